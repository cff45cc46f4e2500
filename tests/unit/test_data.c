/* Unit tests for the batch loader (common/data.c). */
#include "tests/unit/testutil.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/data.h"

/* An llm.c token file (version 1) holding first, first+1, ..., first+n-1. */
static void write_tokens(const char *path, uint32_t first, int n)
{
    int32_t h[256] = {20240520, 1, n};
    FILE *f = fopen(path, "wb");
    assert_non_null(f);
    fwrite(h, sizeof h, 1, f);
    for (int i = 0; i < n; i++) {
        uint16_t v = (uint16_t)(first + (uint32_t)i);
        fwrite(&v, 2, 1, f);
    }
    fclose(f);
}

static char *dir;
static char pa[600], pb[600], pglob[600];

static int setup(void **state)
{
    (void)state;
    dir = tu_tmpdir();
    snprintf(pa, sizeof pa, "%s/shard_0.bin", dir);
    snprintf(pb, sizeof pb, "%s/shard_1.bin", dir);
    snprintf(pglob, sizeof pglob, "%s/shard_*.bin", dir);
    write_tokens(pa, 0, 100);
    write_tokens(pb, 1000, 50);
    return 0;
}

static int teardown(void **state)
{
    (void)state;
    tu_rmdir(dir);
    free(dir);
    return 0;
}

static void test_sequential(void **state)
{
    (void)state;
    llm_data *d;
    llm_status st = {0};
    llm_data_opts o = {pa, 2, 8, 0, 1, 0, 0};
    assert_int_equal(llm_data_open(&d, &o, &st), 0);
    int32_t in[16], tg[16];
    assert_int_equal(llm_data_next(d, in, tg, &st), 0);
    for (int i = 0; i < 8; i++) {
        assert_int_equal(in[i], i);
        assert_int_equal(tg[i], i + 1);
        assert_int_equal(in[8 + i], 8 + i);
        assert_int_equal(tg[8 + i], 9 + i);
    }
    /* 100 tokens hold windows at 0, 8, ..., 88 (12 of them); the 13th wraps */
    for (int b = 1; b < 6; b++)
        assert_int_equal(llm_data_next(d, in, tg, &st), 0);
    llm_data_pos p = llm_data_tell(d);
    assert_int_equal(p.epoch, 0);
    assert_int_equal(p.offset, 96);
    assert_int_equal(llm_data_next(d, in, tg, &st), 0);
    assert_int_equal(in[0], 0);
    assert_int_equal(in[8], 8);
    assert_int_equal(llm_data_tell(d).epoch, 1);
    assert_int_equal(llm_data_tell(d).batches, 7);
    llm_data_free(d);
}

static void collect(llm_data *d, int nb, int32_t *out)
{
    int32_t tg[4 * 16];
    for (int b = 0; b < nb; b++)
        assert_int_equal(llm_data_next(d, out + b * 64, tg, NULL), 0);
}

static void test_random_prefetch_seek(void **state)
{
    (void)state;
    llm_status st = {0};
    int32_t a[10 * 64], b[10 * 64], c[5 * 64];
    llm_data *d;
    for (int pf = 0; pf < 2; pf++) {
        llm_data_opts o = {pglob, 4, 16, 2000, 0, 42, pf};
        assert_int_equal(llm_data_open(&d, &o, &st), 0);
        assert_int_equal(llm_data_nfiles(d), 2);
        assert_int_equal(llm_data_ntok(d), 150);
        collect(d, 10, pf ? b : a);
        llm_data_free(d);
    }
    assert_memory_equal(a, b, sizeof a);     /* prefetch changes nothing */
    /* windows never cross a file and come from both files */
    int from_b = 0;
    for (int r = 0; r < 40; r++) {
        const int32_t *row = a + r * 16;
        for (int i = 1; i < 16; i++)
            assert_int_equal(row[i], row[i - 1] + 1);
        assert_true((row[0] >= 0 && row[15] < 100) || (row[0] >= 1000 && row[15] < 1050));
        from_b += row[0] >= 1000;
    }
    assert_true(from_b > 0 && from_b < 40);
    /* tell/seek: resume mid-stream with prefetch and get exactly the same batches */
    llm_data_opts o = {pglob, 4, 16, 0, 0, 42, 1};
    assert_int_equal(llm_data_open(&d, &o, &st), 0);
    collect(d, 5, c);
    llm_data_pos p = llm_data_tell(d);
    assert_int_equal(p.batches, 5);
    llm_data_free(d);
    assert_int_equal(llm_data_open(&d, &o, &st), 0);
    llm_node *n = llm_data_pos_node(&p);
    llm_data_pos q;
    assert_int_equal(llm_data_pos_parse(n, &q, &st), 0);
    llm_node_free(n);
    assert_memory_equal(&p, &q, sizeof p);
    assert_int_equal(llm_data_seek(d, &q, &st), 0);
    collect(d, 5, c);
    assert_memory_equal(c, a + 5 * 64, sizeof c);
    /* another seed, other batches */
    llm_data_free(d);
    o.seed = 43;
    assert_int_equal(llm_data_open(&d, &o, &st), 0);
    collect(d, 5, c);
    assert_memory_not_equal(c, a, sizeof c);
    llm_data_free(d);
}

static void test_errors(void **state)
{
    (void)state;
    llm_status st = {0};
    llm_data *d = NULL;
    char p[700];
    snprintf(p, sizeof p, "%s/none_*.bin", dir);
    llm_data_opts o = {p, 1, 8, 0, 0, 1, 0};
    assert_int_equal(llm_data_open(&d, &o, &st), LLM_ENOINPUT);
    assert_non_null(strstr(st.msg, "no file matches"));
    snprintf(p, sizeof p, "%s/missing.bin", dir);
    assert_int_equal(llm_data_open(&d, &o, &st), LLM_ENOINPUT);
    assert_non_null(strstr(st.msg, "missing.bin"));
    o.pattern = pb;
    o.T = 50;   /* 50 tokens hold no window of 51 */
    assert_int_equal(llm_data_open(&d, &o, &st), LLM_EDATA);
    o.T = 8;
    o.vocab = 1000;  /* ids 1000.. are out of range: found when read, with and without prefetch */
    for (int pf = 0; pf < 2; pf++) {
        int32_t in[8], tg[8];
        o.prefetch = pf;
        assert_int_equal(llm_data_open(&d, &o, &st), 0);
        assert_int_equal(llm_data_next(d, in, tg, &st), LLM_EDATA);
        assert_non_null(strstr(st.msg, "shard_1.bin': token id 10"));
        assert_non_null(strstr(st.msg, "is not below the vocabulary size 1000"));
        assert_int_equal(llm_data_next(d, in, tg, &st), LLM_EDATA);
        llm_data_free(d);
    }
    o.prefetch = 0;
    o.vocab = 0;
    assert_int_equal(llm_data_open(&d, &o, &st), 0);
    llm_data_pos bad = {.file = 5};
    assert_int_equal(llm_data_seek(d, &bad, &st), LLM_EDATA);
    llm_data_free(d);
    llm_node *m = llm_node_new_map();
    llm_node_set_str(m, "rng", "-1");
    assert_int_equal(llm_data_pos_parse(m, &bad, &st), LLM_EDATA);
    llm_node_free(m);
}

/* A position records its files: another file set (one more, one less, a rename, another
 * length) is told apart; a position saved without them (5 keys) is taken, unchecked. */
static void test_files(void **state)
{
    (void)state;
    llm_status st = {0};
    llm_data *d, *e;
    llm_data_opts o = {pglob, 2, 4, 0, 1, 1, 0};
    char why[200], pc[600], pd[600];
    assert_int_equal(llm_data_open(&d, &o, &st), 0);
    llm_data_pos p = llm_data_tell(d);
    assert_int_equal(p.files, 2);
    assert_int_equal(p.tokens, 150);
    assert_int_equal(llm_data_files_differ(d, &p, why, sizeof why), 0);
    /* the round trip keeps them; without them, parse gives 0 and nothing differs */
    llm_node *n = llm_data_pos_node(&p);
    llm_data_pos q;
    assert_int_equal(llm_data_pos_parse(n, &q, &st), 0);
    assert_memory_equal(&p, &q, sizeof p);
    assert_int_equal(llm_node_remove(n, "files_hash"), 0);
    assert_int_equal(llm_data_pos_parse(n, &q, &st), LLM_EDATA);   /* all or none */
    assert_non_null(strstr(st.msg, "'files_hash'"));
    llm_node_remove(n, "files");
    llm_node_remove(n, "tokens");
    assert_int_equal(llm_data_pos_parse(n, &q, &st), 0);
    assert_int_equal(q.files, 0);
    assert_int_equal(llm_data_files_differ(d, &q, why, sizeof why), 0);
    llm_node_free(n);
    /* a third shard */
    snprintf(pc, sizeof pc, "%s/shard_2.bin", dir);
    write_tokens(pc, 2000, 30);
    assert_int_equal(llm_data_open(&e, &o, &st), 0);
    assert_int_equal(llm_data_files_differ(e, &p, why, sizeof why), 1);
    assert_string_equal(why, "3 file(s) of 180 tokens now, 2 of 150 then");
    llm_data_free(e);
    /* the same count and tokens under another name */
    remove(pc);
    snprintf(pd, sizeof pd, "%s/shard_9.bin", dir);
    rename(pb, pd);
    assert_int_equal(llm_data_open(&e, &o, &st), 0);
    assert_int_equal(llm_data_files_differ(e, &p, why, sizeof why), 1);
    assert_non_null(strstr(why, "2 file(s) of 150 tokens now, 2 of 150 then, under other names"));
    llm_data_free(e);
    rename(pd, pb);
    llm_data_free(d);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_sequential),
        cmocka_unit_test(test_random_prefetch_seek),
        cmocka_unit_test(test_errors),
        cmocka_unit_test(test_files),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
