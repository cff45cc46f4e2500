/* Unit tests for token files (common/tokfile.c) and shard names (common/tokout.c). */
#include "tests/unit/testutil.h"

#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "common/tokfile.h"
#include "common/tokout.h"

static void put_file(const char *name, const void *data, size_t n)
{
    FILE *f = fopen(tu_path(name), "wb");
    assert_non_null(f);
    assert_int_equal(fwrite(data, 1, n, f), n);
    fclose(f);
}

static long file_size(const char *p)
{
    struct stat sb;
    return stat(p, &sb) ? -1 : (long)sb.st_size;
}

/* a hand-built header, independent of the writer */
static void header(unsigned char *h, uint32_t magic, uint32_t version, uint32_t n)
{
    memset(h, 0, LLM_TOKFILE_HEADER_BYTES);
    uint32_t v[3] = {magic, version, n};
    for (int i = 0; i < 3; i++)
        for (int b = 0; b < 4; b++)
            h[4 * i + b] = (unsigned char)(v[i] >> (8 * b));
}

static void test_roundtrip_v1_v2(void **state)
{
    (void)state;
    llm_status st = {0};
    tu_rng r = {42};
    uint32_t ids[1000];
    for (int i = 0; i < 1000; i++)
        ids[i] = (uint32_t)(tu_next(&r) % 50257);
    assert_int_equal(llm_tokfile_write(tu_path("a.bin"), ids, 1000, 0, &st), LLM_OK);
    assert_int_equal(file_size(tu_path("a.bin")), 1024 + 2 * 1000);
    llm_tokfile tf;
    assert_int_equal(llm_tokfile_open(&tf, tu_path("a.bin"), 50257, &st), LLM_OK);
    assert_int_equal(tf.version, 1);
    assert_int_equal(tf.ntok, 1000);
    for (int i = 0; i < 1000; i++)
        assert_int_equal(llm_tokfile_at(&tf, (uint64_t)i), ids[i]);
    int32_t part[10];
    llm_tokfile_read(&tf, 500, 10, part);
    for (int i = 0; i < 10; i++)
        assert_int_equal(part[i], (int32_t)ids[500 + i]);
    llm_tokfile_close(&tf);

    ids[7] = 70000; /* forces version 2 */
    assert_int_equal(llm_tokfile_write(tu_path("b.bin"), ids, 1000, 0, &st), LLM_OK);
    assert_int_equal(file_size(tu_path("b.bin")), 1024 + 4 * 1000);
    assert_int_equal(llm_tokfile_open(&tf, tu_path("b.bin"), 0, &st), LLM_OK);
    assert_int_equal(tf.version, 2);
    assert_int_equal(llm_tokfile_at(&tf, 7), 70000);
    llm_tokfile_read(&tf, 5, 3, part);
    assert_int_equal(part[2], 70000);
    llm_tokfile_close(&tf);
    /* asking for version 1 with a big id is a usage error, and writes nothing */
    assert_int_equal(llm_tokfile_write(tu_path("c.bin"), ids, 1000, 1, &st), LLM_EUSAGE);
    assert_int_equal(file_size(tu_path("c.bin")), -1);
    /* version 2 on request */
    ids[7] = 1;
    assert_int_equal(llm_tokfile_write(tu_path("d.bin"), ids, 1000, 2, &st), LLM_OK);
    assert_int_equal(file_size(tu_path("d.bin")), 1024 + 4 * 1000);
    /* empty: refused, as llm.c's loader refuses it (it asserts a count above 0), and
     * nothing written */
    assert_int_equal(llm_tokfile_write(tu_path("e.bin"), ids, 0, 0, &st), LLM_EDATA);
    assert_non_null(strstr(st.msg, "no tokens"));
    assert_int_equal(file_size(tu_path("e.bin")), -1);
    /* llm.c reads the count as an int: over INT32_MAX tokens are refused before any id is
     * read or any byte written, by the whole-file and the streaming writer alike */
    assert_int_equal(llm_tokfile_write(tu_path("big.bin"), ids, (uint64_t)INT32_MAX + 1, 0, &st), LLM_EUSAGE);
    assert_int_equal(file_size(tu_path("big.bin")), -1);
    llm_tokfile_writer w;
    assert_int_equal(llm_tokfile_writer_open(&w, tu_path("big2.bin"), 0, &st), LLM_OK);
    assert_int_equal(llm_tokfile_writer_put(&w, ids, 10, &st), LLM_OK);
    w.n = INT32_MAX - 5;   /* as if INT32_MAX - 5 ids had gone in */
    assert_int_equal(llm_tokfile_writer_put(&w, ids, 6, &st), LLM_EUSAGE);
    assert_non_null(strstr(st.msg, "2147483647"));
    llm_tokfile_writer_abort(&w);
    assert_int_equal(file_size(tu_path("big2.bin")), -1);
}

static void test_reads_handmade_file(void **state)
{
    (void)state;
    unsigned char buf[1024 + 6];
    header(buf, 20240520, 1, 3);
    unsigned char t[6] = {0x01, 0x00, 0x50, 0xc3, 0xff, 0xff}; /* 1, 50000, 65535 */
    memcpy(buf + 1024, t, 6);
    put_file("hand.bin", buf, sizeof buf);
    llm_tokfile tf;
    llm_status st = {0};
    assert_int_equal(llm_tokfile_open(&tf, tu_path("hand.bin"), 0, &st), LLM_OK);
    assert_int_equal(llm_tokfile_at(&tf, 0), 1);
    assert_int_equal(llm_tokfile_at(&tf, 1), 50000);
    assert_int_equal(llm_tokfile_at(&tf, 2), 65535);
    llm_tokfile_close(&tf);
    /* the vocabulary check names the first bad position */
    assert_int_equal(llm_tokfile_open(&tf, tu_path("hand.bin"), 50257, &st), LLM_EDATA);
    assert_non_null(strstr(st.msg, "token 2"));
    assert_null(tf.base);
}

static void expect_bad(const char *name, const void *data, size_t n, const char *needle)
{
    put_file(name, data, n);
    llm_tokfile tf;
    llm_status st = {0};
    assert_int_equal(llm_tokfile_open(&tf, tu_path(name), 0, &st), LLM_EDATA);
    if (!strstr(st.msg, needle))
        fail_msg("message '%s' lacks '%s'", st.msg, needle);
    assert_non_null(strstr(st.msg, name));
}

static void test_rejects_bad_files(void **state)
{
    (void)state;
    unsigned char buf[1024 + 8];
    memset(buf, 0, sizeof buf);
    expect_bad("short.bin", "garbage", 7, "header");
    header(buf, 12345, 1, 4);
    expect_bad("magic.bin", buf, 1024 + 8, "magic");
    header(buf, 20240520, 3, 4);
    expect_bad("version.bin", buf, 1024 + 8, "version");
    header(buf, 20240520, 1, 5);
    expect_bad("count.bin", buf, 1024 + 8, "5 tokens");
    header(buf, 20240520, 1, 4);
    expect_bad("trunc.bin", buf, 1024 + 7, "tokens");
    header(buf, 20240520, 2, 4);
    expect_bad("v2size.bin", buf, 1024 + 8, "tokens");
    header(buf, 20240520, 1, 0xffffffffu); /* huge count: no overflow, no big allocation */
    expect_bad("huge.bin", buf, 1024 + 8, "tokens");
    llm_tokfile tf;
    llm_status st = {0};
    assert_int_equal(llm_tokfile_open(&tf, tu_path("missing.bin"), 0, &st), LLM_ENOINPUT);
    assert_int_equal(llm_tokfile_open(&tf, tu_dir, 0, &st), LLM_ENOINPUT);
}

static int count_entries(const char *d)
{
    DIR *dp = opendir(d);
    int n = 0;
    for (struct dirent *e; dp && (e = readdir(dp));)
        n += e->d_name[0] != '.';
    if (dp)
        closedir(dp);
    return n;
}

static void test_atomic_write(void **state)
{
    (void)state;
    llm_status st = {0};
    uint32_t ids[4] = {1, 2, 3, 4};
    char sub[512];
    snprintf(sub, sizeof sub, "%s/atomic", tu_dir);
    assert_int_equal(mkdir(sub, 0755), 0);
    char target[600];
    snprintf(target, sizeof target, "%s/out.bin", sub);
    assert_int_equal(llm_tokfile_write(target, ids, 4, 0, &st), LLM_OK);
    assert_int_equal(count_entries(sub), 1); /* no temp file left */
    /* a failed write (target is a directory) keeps the old state and leaves no temp */
    char blocker[600];
    snprintf(blocker, sizeof blocker, "%s/dir.bin", sub);
    assert_int_equal(mkdir(blocker, 0755), 0);
    assert_int_equal(llm_tokfile_write(blocker, ids, 4, 0, &st), LLM_EIO);
    assert_int_equal(count_entries(sub), 2);
    /* a missing folder: an error naming the file */
    char nodir[600];
    snprintf(nodir, sizeof nodir, "%s/no/such/out.bin", sub);
    assert_int_equal(llm_tokfile_write(nodir, ids, 4, 0, &st), LLM_EIO);
    assert_non_null(strstr(st.msg, "out.bin"));
    /* overwriting replaces the whole file */
    uint32_t more[100] = {0};
    assert_int_equal(llm_tokfile_write(target, more, 100, 0, &st), LLM_OK);
    assert_int_equal(file_size(target), 1024 + 200);
    assert_int_equal(count_entries(sub), 2);
}

/* The streaming writer, fed in random pieces, writes the bytes llm_tokfile_write does;
 * version 0 widens to 2 when a large id comes late, in a file and in a FIFO's memory. */
static void test_writer_matches_whole(void **state)
{
    (void)state;
    tu_rng r = {5};
    for (int c = 0; c < 12; c++) {
        size_t n = (size_t)(tu_next(&r) % 20000);
        uint32_t *ids = malloc((n + 1) * sizeof *ids);
        assert_non_null(ids);
        for (size_t i = 0; i < n; i++)
            ids[i] = (uint32_t)(tu_next(&r) % 50257);
        if (c % 3 == 1 && n)   /* one id over 65535, late */
            ids[n - 1 - (size_t)(tu_next(&r) % (n < 100 ? n : 100))] = 70000 + (uint32_t)c;
        llm_status st = {0};
        assert_int_equal(llm_tokfile_write(tu_path("whole.bin"), ids, n, 0, &st), LLM_OK);
        llm_tokfile_writer w;
        assert_int_equal(llm_tokfile_writer_open(&w, tu_path("stream.bin"), 0, &st), LLM_OK);
        for (size_t at = 0; at < n;) {
            size_t k = 1 + (size_t)(tu_next(&r) % 5000);
            if (k > n - at)
                k = n - at;
            assert_int_equal(llm_tokfile_writer_put(&w, ids + at, k, &st), LLM_OK);
            at += k;
        }
        assert_int_equal(llm_tokfile_writer_commit(&w, &st), LLM_OK);
        size_t na, nb;
        char *a = tu_slurp(tu_path("whole.bin"), &na), *b = tu_slurp(tu_path("stream.bin"), &nb);
        assert_true(a && b);
        assert_int_equal(na, nb);
        assert_memory_equal(a, b, na);
        assert_int_equal(a[4], c % 3 == 1 && n ? 2 : 1);
        /* a split moves the tail to another file; the two hold the ids in order, each
         * of version 2 only when its own ids need it */
        uint64_t cut = n ? tu_next(&r) % (n + 1) : 0;
        llm_tokfile_writer t, v;
        assert_int_equal(llm_tokfile_writer_open(&t, tu_path("t.bin"), 0, &st), LLM_OK);
        assert_int_equal(llm_tokfile_writer_put(&t, ids, n, &st), LLM_OK);
        assert_int_equal(llm_tokfile_writer_open(&v, tu_path("v.bin"), 0, &st), LLM_OK);
        assert_int_equal(llm_tokfile_writer_split(&t, cut, &v, &st), LLM_OK);
        assert_int_equal(llm_tokfile_writer_commit(&t, &st), LLM_OK);
        assert_int_equal(llm_tokfile_writer_commit(&v, &st), LLM_OK);
        llm_tokfile tf;
        int wide_t = 0, wide_v = 0;
        for (uint64_t i = 0; i < n; i++)
            *(i < cut ? &wide_t : &wide_v) |= ids[i] > 0xffff;
        assert_int_equal(llm_tokfile_open(&tf, tu_path("t.bin"), 0, &st), LLM_OK);
        assert_int_equal(tf.ntok, cut);
        assert_int_equal(tf.version, wide_t ? 2 : 1);
        for (uint64_t i = 0; i < cut; i++)
            assert_int_equal(llm_tokfile_at(&tf, i), ids[i]);
        llm_tokfile_close(&tf);
        assert_int_equal(llm_tokfile_open(&tf, tu_path("v.bin"), 0, &st), LLM_OK);
        assert_int_equal(tf.ntok, n - cut);
        assert_int_equal(tf.version, wide_v ? 2 : 1);
        for (uint64_t i = cut; i < n; i++)
            assert_int_equal(llm_tokfile_at(&tf, i - cut), ids[i]);
        llm_tokfile_close(&tf);
        free(a);
        free(b);
        free(ids);
    }
}

/* A split where the wide id is on one side only: each file takes the version its ids need. */
static void test_split_versions(void **state)
{
    (void)state;
    static const uint32_t cases[2][4] = {{70000, 1, 2, 3}, {1, 2, 3, 70000}};
    for (int c = 0; c < 2; c++) {
        llm_status st = {0};
        llm_tokfile_writer t, v;
        assert_int_equal(llm_tokfile_writer_open(&t, tu_path("st.bin"), 0, &st), LLM_OK);
        assert_int_equal(llm_tokfile_writer_put(&t, cases[c], 4, &st), LLM_OK);
        assert_int_equal(llm_tokfile_writer_open(&v, tu_path("sv.bin"), 0, &st), LLM_OK);
        assert_int_equal(llm_tokfile_writer_split(&t, 2, &v, &st), LLM_OK);
        assert_int_equal(llm_tokfile_writer_commit(&t, &st), LLM_OK);
        assert_int_equal(llm_tokfile_writer_commit(&v, &st), LLM_OK);
        llm_tokfile tf;
        const char *names[2] = {"st.bin", "sv.bin"};
        for (int f = 0; f < 2; f++) {
            assert_int_equal(llm_tokfile_open(&tf, tu_path(names[f]), 0, &st), LLM_OK);
            assert_int_equal(tf.ntok, 2);
            assert_int_equal(tf.version, (c == 0) == (f == 0) ? 2 : 1);
            for (int i = 0; i < 2; i++)
                assert_int_equal(llm_tokfile_at(&tf, (uint64_t)i), cases[c][2 * f + i]);
            llm_tokfile_close(&tf);
            assert_int_equal(file_size(tu_path(names[f])), 1024 + 2 * ((c == 0) == (f == 0) ? 4 : 2));
        }
    }
}

/* Two large ids in one put after smaller ones: widened once, in a file and in memory. */
static void test_writer_widens_once(void **state)
{
    (void)state;
    uint32_t first[2] = {1, 2}, second[3] = {70000, 5, 70001}, all[5] = {1, 2, 70000, 5, 70001};
    llm_status st = {0};
    assert_int_equal(llm_tokfile_write(tu_path("w_ref.bin"), all, 5, 0, &st), LLM_OK);
    llm_tokfile_writer w;
    assert_int_equal(llm_tokfile_writer_open(&w, tu_path("w.bin"), 0, &st), LLM_OK);
    assert_int_equal(llm_tokfile_writer_put(&w, first, 2, &st), LLM_OK);
    assert_int_equal(llm_tokfile_writer_put(&w, second, 3, &st), LLM_OK);
    assert_int_equal(llm_tokfile_writer_commit(&w, &st), LLM_OK);
    size_t na, nb;
    char *a = tu_slurp(tu_path("w_ref.bin"), &na), *b = tu_slurp(tu_path("w.bin"), &nb);
    assert_true(a && b);
    assert_int_equal(na, 1024 + 20);
    assert_int_equal(nb, na);
    assert_memory_equal(a, b, na);
    llm_tokfile tf;
    assert_int_equal(llm_tokfile_open(&tf, tu_path("w.bin"), 0, &st), LLM_OK);
    for (int i = 0; i < 5; i++)
        assert_int_equal(llm_tokfile_at(&tf, (uint64_t)i), all[i]);
    llm_tokfile_close(&tf);
    free(a);
    free(b);
}

/* A FIFO cannot go back: the ids wait in memory and the reader gets the same bytes as a
 * file, widened to version 2 when a large id comes late. */
static void test_writer_fifo(void **state)
{
    (void)state;
    uint32_t ids[3000];
    for (int i = 0; i < 3000; i++)
        ids[i] = (uint32_t)(i * 7);
    ids[2998] = 99999;
    ids[2999] = 100000;
    llm_status st = {0};
    assert_int_equal(llm_tokfile_write(tu_path("ref.bin"), ids, 3000, 0, &st), LLM_OK);
    assert_int_equal(mkfifo(tu_path("fifo"), 0600), 0);
    char fifo[512];
    snprintf(fifo, sizeof fifo, "%s", tu_path("fifo"));
    pid_t pid = fork();
    assert_true(pid >= 0);
    if (pid == 0) {   /* the writer; the parent reads */
        llm_tokfile_writer w;
        int rc = llm_tokfile_writer_open(&w, fifo, 0, &st);
        for (int i = 0; i < 3000 && !rc; i += 1000)
            rc = llm_tokfile_writer_put(&w, ids + i, 1000, &st);
        if (!rc)
            rc = llm_tokfile_writer_commit(&w, &st);
        _exit(rc ? 1 : 0);
    }
    size_t nr;
    char *want = tu_slurp(tu_path("ref.bin"), &nr), *got = malloc(nr + 16);
    assert_non_null(want);
    assert_non_null(got);
    FILE *f = fopen(fifo, "rb");
    assert_non_null(f);
    size_t ng = fread(got, 1, nr + 16, f);
    fclose(f);
    int status;
    assert_int_equal(waitpid(pid, &status, 0), pid);
    assert_true(WIFEXITED(status) && WEXITSTATUS(status) == 0);
    assert_int_equal(ng, nr);
    assert_memory_equal(got, want, nr);
    assert_int_equal(got[4], 2);
    free(got);
    free(want);
    unlink(fifo);
}

/* Shard names keep 6 digits, so that their order by name is their order: the last one
 * is _999999; one more is refused, naming --shard-tokens (1000000 shards of 1 token
 * would take the CLI test most of an hour, so the boundary is tested here). */
static void test_shard_names(void **state)
{
    (void)state;
    llm_status st = {0};
    char a[64], b[64];
    assert_int_equal(llm_tokout_shard_name(a, sizeof a, "d/p", 0, 7, &st), LLM_OK);
    assert_string_equal(a, "d/p_000000.bin");
    assert_int_equal(llm_tokout_shard_name(a, sizeof a, "d/p", 999998, 7, &st), LLM_OK);
    assert_int_equal(llm_tokout_shard_name(b, sizeof b, "d/p", 999999, 7, &st), LLM_OK);
    assert_string_equal(b, "d/p_999999.bin");
    assert_true(strcmp(a, b) < 0);
    assert_int_equal(llm_tokout_shard_name(a, sizeof a, "d/p", 1000000, 7, &st), LLM_EUSAGE);
    assert_non_null(strstr(st.msg, "more than 1000000 shards of 7 tokens"));
    assert_non_null(strstr(st.msg, "--shard-tokens"));
    assert_int_equal(llm_tokout_shard_name(a, sizeof a, "d/p", (uint64_t)1 << 32, 7, &st), LLM_EUSAGE);
    assert_int_equal(llm_tokout_shard_name(a, 14, "d/p", 0, 7, &st), LLM_EUSAGE);   /* too long */
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_roundtrip_v1_v2),
        cmocka_unit_test(test_reads_handmade_file),
        cmocka_unit_test(test_rejects_bad_files),
        cmocka_unit_test(test_atomic_write),
        cmocka_unit_test(test_writer_matches_whole),
        cmocka_unit_test(test_writer_widens_once),
        cmocka_unit_test(test_split_versions),
        cmocka_unit_test(test_writer_fifo),
        cmocka_unit_test(test_shard_names),
    };
    return cmocka_run_group_tests(tests, tu_dir_setup, tu_dir_teardown);
}
