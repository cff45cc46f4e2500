/* Unit tests for the .llmk container (common/ckpt*.c): dtypes, round trips through a file,
 * a pipe and memory, compression, atomic saves, writer argument checks and corruption.
 * With LLM_WRITE_SAMPLE=PATH set, writes the deterministic sample (make sample) and exits. */
#include "tests/unit/testutil.h"

#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <dirent.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <zlib.h>

#include "common/ckpt.h"

typedef struct {
    const char *name;
    llm_dtype dt;
    int ndim;
    int64_t shape[3];
    unsigned flags;
} spec;

/* Every dtype, one of them compressed twice over (a compressible and a random one). */
static const spec specs[] = {
    {"wte", LLM_DT_F32, 2, {16, 8}, 0},
    {"wpe", LLM_DT_F16, 2, {8, 8}, LLM_CKPT_ZLIB},
    {"h.0.ln_1.bias", LLM_DT_BF16, 1, {24}, 0},
    {"tok.ids", LLM_DT_I32, 1, {5}, 0},
    {"mask", LLM_DT_U8, 1, {10}, 0},
    {"vocab.lens", LLM_DT_U16, 1, {7}, LLM_CKPT_ZLIB},
    {"deltas", LLM_DT_I8, 3, {2, 3, 4}, 0},
    {"h.0.mlp.q8", LLM_DT_Q8_0, 2, {2, 32}, 0},
    {"h.0.mlp.q4", LLM_DT_Q4_0, 1, {64}, 0},
    {"scalar", LLM_DT_F32, 0, {0}, 0},
    {"empty", LLM_DT_F32, 2, {0, 4}, LLM_CKPT_ZLIB},
};
#define NSPEC ((int)(sizeof specs / sizeof *specs))

typedef struct {
    unsigned char *data[NSPEC];
    uint64_t nbytes[NSPEC];
} payload;

static void make_payload(payload *p, uint64_t seed)
{
    tu_rng r = {seed};
    for (int i = 0; i < NSPEC; i++) {
        uint64_t nelem = 1;
        for (int d = 0; d < specs[i].ndim; d++)
            nelem *= (uint64_t)specs[i].shape[d];
        assert_int_equal(llm_dtype_nbytes(specs[i].dt, nelem, &p->nbytes[i]), 0);
        p->data[i] = malloc(p->nbytes[i] + 1);
        for (uint64_t k = 0; k < p->nbytes[i]; k++)
            /* "wpe" compressible (small alphabet), the rest random */
            p->data[i][k] = (unsigned char)(i == 1 ? (k / 16) % 4 : tu_next(&r));
    }
}

static void free_payload(payload *p)
{
    for (int i = 0; i < NSPEC; i++)
        free(p->data[i]);
}

static llm_ckpt_writer *make_writer(const payload *p)
{
    llm_status st;
    llm_ckpt_writer *w;
    assert_int_equal(llm_ckpt_writer_new(&w, &st), 0);
    llm_node *m = llm_node_new_map();
    llm_node_set_str(m, "arch", "gpt2");
    llm_node_set_int(m, "n_layer", 1);
    llm_node_set_int(m, "n_head", 2);
    llm_node_set_int(m, "n_embd", 8);
    llm_node_set_int(m, "vocab_size", 16);
    llm_node_set_int(m, "max_seq_len", 8);
    assert_int_equal(llm_ckpt_set_section(w, "model", m, &st), 0);
    llm_node *t = llm_node_new_map();
    llm_node_set_str(t, "kind", "byte");
    assert_int_equal(llm_ckpt_set_section(w, "tokenizer", t, &st), 0);
    llm_node *tr = llm_node_new_map();
    llm_node_set_int(tr, "step", 42);
    llm_node_set_double(tr, "lr", 0.1);
    assert_int_equal(llm_ckpt_set_section(w, "train", tr, &st), 0);
    for (int i = 0; i < NSPEC; i++)
        assert_int_equal(llm_ckpt_add(w, specs[i].name, specs[i].dt, specs[i].ndim, specs[i].shape, p->data[i],
                                      specs[i].flags, &st), 0);
    return w;
}

static void check_ckpt(const llm_ckpt *c, const payload *p)
{
    assert_int_equal(llm_ckpt_count(c), NSPEC);
    for (int i = 0; i < NSPEC; i++) {
        const llm_tensor *t = llm_ckpt_tensor(c, i);
        assert_non_null(t);
        assert_string_equal(t->name, specs[i].name);
        assert_ptr_equal(llm_ckpt_find(c, specs[i].name), t);
        assert_int_equal(t->dtype, specs[i].dt);
        assert_int_equal(t->ndim, specs[i].ndim);
        for (int d = 0; d < t->ndim; d++)
            assert_int_equal(t->shape[d], specs[i].shape[d]);
        assert_int_equal(t->nbytes, p->nbytes[i]);
        assert_int_equal(t->compressed, (specs[i].flags & LLM_CKPT_ZLIB) != 0);
        assert_int_equal(t->offset % LLM_CKPT_ALIGN, 0);
        assert_non_null(t->data);
        assert_memory_equal(t->data, p->data[i], t->nbytes);
    }
    assert_null(llm_ckpt_find(c, "nope"));
    const llm_tensor *wpe = llm_ckpt_find(c, "wpe");
    assert_true(wpe->stored < wpe->nbytes);
    int v;
    assert_int_equal(llm_node_int(llm_node_get(llm_ckpt_section(c, "model"), "n_embd"), &v), 0);
    assert_int_equal(v, 8);
    double lr;
    assert_int_equal(llm_node_double(llm_node_get(llm_ckpt_section(c, "train"), "lr"), &lr), 0);
    assert_true(lr == 0.1);
    assert_string_equal(llm_node_str(llm_node_get(llm_ckpt_section(c, "tokenizer"), "kind")), "byte");
    assert_null(llm_ckpt_section(c, "shard"));
    assert_null(llm_ckpt_section(c, "tensors"));
}

static unsigned char *slurp(const char *path, size_t *len)
{
    unsigned char *b = (unsigned char *)tu_slurp(path, len);
    assert_non_null(b);
    return b;
}

static int count_entries(const char *dir)
{
    DIR *d = opendir(dir);
    int n = 0;
    struct dirent *e;
    while ((e = readdir(d)))
        n += e->d_name[0] != '.' || (strcmp(e->d_name, ".") && strcmp(e->d_name, ".."));
    closedir(d);
    return n;
}

static void test_dtypes(void **state)
{
    (void)state;
    uint64_t n;
    struct { llm_dtype dt; uint64_t nelem, want; } cases[] = {
        {LLM_DT_F32, 3, 12}, {LLM_DT_F16, 3, 6}, {LLM_DT_BF16, 3, 6}, {LLM_DT_I32, 3, 12},
        {LLM_DT_U8, 3, 3}, {LLM_DT_U16, 3, 6}, {LLM_DT_I8, 3, 3}, {LLM_DT_Q8_0, 64, 68},
        {LLM_DT_Q4_0, 64, 36}, {LLM_DT_Q4_0, 0, 0}};
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        assert_int_equal(llm_dtype_nbytes(cases[i].dt, cases[i].nelem, &n), 0);
        assert_int_equal(n, cases[i].want);
        llm_dtype back;
        assert_int_equal(llm_dtype_from_name(llm_dtype_name(cases[i].dt), &back), 0);
        assert_int_equal(back, cases[i].dt);
    }
    assert_int_equal(llm_dtype_nbytes(LLM_DT_Q8_0, 33, &n), -1);
    assert_int_equal(llm_dtype_nbytes(LLM_DT_F32, UINT64_MAX / 2, &n), -1);
    assert_int_equal(llm_dtype_nbytes(LLM_DT_COUNT, 1, &n), -1);
    llm_dtype dt;
    assert_int_equal(llm_dtype_from_name("f64", &dt), -1);
}

static void test_roundtrip_file(void **state)
{
    (void)state;
    char *dir = tu_tmpdir(), a[512], b[512];
    snprintf(a, sizeof a, "%s/a.llmk", dir);
    snprintf(b, sizeof b, "%s/b.llmk", dir);
    payload p;
    make_payload(&p, 7);
    llm_status st;
    llm_ckpt_writer *w = make_writer(&p);
    assert_int_equal(llm_ckpt_write(w, a, &st), 0);
    assert_int_equal(llm_ckpt_write(w, b, &st), 0);  /* a writer can write twice */
    llm_ckpt_writer_free(w);
    assert_int_equal(count_entries(dir), 2);          /* no temp files left */
    size_t la, lb;
    unsigned char *ba = slurp(a, &la), *bb = slurp(b, &lb);
    assert_int_equal(la, lb);
    assert_memory_equal(ba, bb, la);
    assert_memory_equal(ba, LLM_CKPT_MAGIC, 8);
    for (unsigned flags = 0; flags < 4; flags++) {
        llm_ckpt *c;
        if (llm_ckpt_open(&c, a, flags & LLM_CKPT_NOVERIFY, &st))
            fail_msg("%s", st.msg);
        check_ckpt(c, &p);
        assert_int_equal(llm_ckpt_file_size(c), la);
        llm_ckpt_close(c);
    }
    llm_ckpt *c;
    assert_int_equal(llm_ckpt_open_mem(&c, ba, la, 0, &st), 0);
    check_ckpt(c, &p);
    llm_ckpt_close(c);
    assert_int_equal(llm_ckpt_open(&c, a, LLM_CKPT_HEADER_ONLY, &st), 0);
    assert_int_equal(llm_ckpt_count(c), NSPEC);
    assert_null(llm_ckpt_tensor(c, 0)->data);
    llm_ckpt_close(c);
    /* re-writing what was read gives the same bytes */
    assert_int_equal(llm_ckpt_open(&c, a, 0, &st), 0);
    assert_int_equal(llm_ckpt_writer_new(&w, &st), 0);
    const char *secs[] = {"model", "tokenizer", "train"};
    for (int i = 0; i < 3; i++)
        assert_int_equal(llm_ckpt_set_section(w, secs[i], llm_node_copy(llm_ckpt_section(c, secs[i])), &st), 0);
    for (int i = 0; i < llm_ckpt_count(c); i++) {
        const llm_tensor *t = llm_ckpt_tensor(c, i);
        assert_int_equal(llm_ckpt_add(w, t->name, t->dtype, t->ndim, t->shape, t->data,
                                      t->compressed ? LLM_CKPT_ZLIB : 0, &st), 0);
    }
    assert_int_equal(llm_ckpt_write(w, b, &st), 0);
    llm_ckpt_writer_free(w);
    llm_ckpt_close(c);
    free(bb);
    bb = slurp(b, &lb);
    assert_int_equal(la, lb);
    assert_memory_equal(ba, bb, la);
    free(ba);
    free(bb);
    free_payload(&p);
    tu_rmdir(dir);
    free(dir);
}

/* Write through a real pipe from a child process, read it with the stream reader. */
static void test_roundtrip_pipe(void **state)
{
    (void)state;
    payload p;
    make_payload(&p, 11);
    for (int mode = 0; mode < 2; mode++) {
        int fds[2];
        assert_int_equal(pipe(fds), 0);
        pid_t pid = fork();
        assert_true(pid >= 0);
        if (pid == 0) {
            close(fds[0]);
            dup2(fds[1], STDOUT_FILENO);
            close(fds[1]);
            llm_status st;
            llm_ckpt_writer *w = make_writer(&p);
            _exit(llm_ckpt_write(w, "-", &st) ? 1 : 0);
        }
        close(fds[1]);
        llm_status st;
        llm_ckpt *c = NULL;
        int rc;
        if (mode == 0) {
            char path[64];
            snprintf(path, sizeof path, "/dev/fd/%d", fds[0]);
            rc = llm_ckpt_open(&c, path, 0, &st);
        } else {
            int saved = dup(STDIN_FILENO);
            dup2(fds[0], STDIN_FILENO);
            rc = llm_ckpt_open(&c, "-", 0, &st);
            dup2(saved, STDIN_FILENO);
            close(saved);
        }
        close(fds[0]);
        int ws;
        waitpid(pid, &ws, 0);
        assert_true(WIFEXITED(ws) && WEXITSTATUS(ws) == 0);
        if (rc)
            fail_msg("%s", st.msg);
        check_ckpt(c, &p);
        llm_ckpt_close(c);
    }
    free_payload(&p);
}

static void test_pipe_header_only_and_corrupt(void **state)
{
    (void)state;
    char *dir = tu_tmpdir(), a[512];
    snprintf(a, sizeof a, "%s/a.llmk", dir);
    payload p;
    make_payload(&p, 3);
    llm_status st;
    llm_ckpt_writer *w = make_writer(&p);
    assert_int_equal(llm_ckpt_write(w, a, &st), 0);
    llm_ckpt_writer_free(w);
    size_t len;
    unsigned char *b = slurp(a, &len);
    llm_ckpt *c;
    /* a flipped byte in an uncompressed tensor: named; NOVERIFY skips the check */
    const llm_tensor *t;
    assert_int_equal(llm_ckpt_open_mem(&c, b, len, LLM_CKPT_HEADER_ONLY, &st), 0);
    t = llm_ckpt_find(c, "deltas");
    uint64_t data_start = llm_ckpt_file_size(c) - (llm_ckpt_tensor(c, NSPEC - 1)->offset + llm_ckpt_tensor(c, NSPEC - 1)->stored);
    size_t pos = (size_t)(data_start + t->offset + 1);
    llm_ckpt_close(c);
    b[pos] ^= 0x40;
    assert_int_equal(llm_ckpt_open_mem(&c, b, len, 0, &st), LLM_EDATA);
    assert_non_null(strstr(st.msg, "'deltas'"));
    assert_non_null(strstr(st.msg, "crc32"));
    assert_int_equal(llm_ckpt_open_mem(&c, b, len, LLM_CKPT_NOVERIFY, &st), 0);
    llm_ckpt_close(c);
    b[pos] ^= 0x40;
    /* truncation and trailing bytes */
    assert_int_equal(llm_ckpt_open_mem(&c, b, len - 1, 0, &st), LLM_EDATA);
    assert_non_null(strstr(st.msg, "truncated"));
    unsigned char *big = calloc(len + 64, 1);
    memcpy(big, b, len);
    assert_int_equal(llm_ckpt_open_mem(&c, big, len + 3, 0, &st), LLM_EDATA);
    assert_non_null(strstr(st.msg, "trailing"));
    free(big);
    assert_int_equal(llm_ckpt_open_mem(&c, b, 0, 0, &st), LLM_EDATA);
    assert_int_equal(llm_ckpt_open_mem(&c, b, 12, 0, &st), LLM_EDATA);
    /* future version */
    b[8] = 2;
    assert_int_equal(llm_ckpt_open_mem(&c, b, len, 0, &st), LLM_EDATA);
    assert_non_null(strstr(st.msg, "version"));
    b[8] = 1;
    /* missing file */
    char missing[600];
    snprintf(missing, sizeof missing, "%s/none.llmk", dir);
    assert_int_equal(llm_ckpt_open(&c, missing, 0, &st), LLM_ENOINPUT);
    assert_int_equal(llm_ckpt_open(&c, dir, 0, &st), LLM_ENOINPUT);
    free(b);
    free_payload(&p);
    tu_rmdir(dir);
    free(dir);
}

static void test_writer_checks(void **state)
{
    (void)state;
    llm_status st;
    llm_ckpt_writer *w;
    float x[64] = {0};
    int64_t s2[2] = {2, 3}, neg[1] = {-1}, q[1] = {33};
    assert_int_equal(llm_ckpt_writer_new(&w, &st), 0);
    assert_int_equal(llm_ckpt_add(w, "a", LLM_DT_F32, 2, s2, x, 0, &st), 0);
    assert_int_equal(llm_ckpt_add(w, "a", LLM_DT_F32, 2, s2, x, 0, &st), LLM_EUSAGE);
    assert_non_null(strstr(st.msg, "duplicate"));
    assert_int_equal(llm_ckpt_add(w, "", LLM_DT_F32, 2, s2, x, 0, &st), LLM_EUSAGE);
    assert_int_equal(llm_ckpt_add(w, "bad\nname", LLM_DT_F32, 2, s2, x, 0, &st), LLM_EUSAGE);
    assert_int_equal(llm_ckpt_add(w, "n", LLM_DT_F32, 1, neg, x, 0, &st), LLM_EUSAGE);
    assert_int_equal(llm_ckpt_add(w, "q", LLM_DT_Q8_0, 1, q, x, 0, &st), LLM_EUSAGE);
    assert_int_equal(llm_ckpt_add(w, "d", LLM_DT_F32, 9, s2, x, 0, &st), LLM_EUSAGE);
    assert_int_equal(llm_ckpt_add(w, "z", LLM_DT_F32, 2, s2, NULL, 0, &st), LLM_EUSAGE);
    assert_int_equal(llm_ckpt_add(w, "t", LLM_DT_COUNT, 2, s2, x, 0, &st), LLM_EUSAGE);
    assert_int_equal(llm_ckpt_set_section(w, "tensors", llm_node_new_map(), &st), LLM_EUSAGE);
    /* a section can be replaced; an extra section is kept */
    assert_int_equal(llm_ckpt_set_section(w, "model", llm_node_new_map(), &st), 0);
    llm_node *m = llm_node_new_map();
    llm_node_set_int(m, "tp_rank", 1);
    assert_int_equal(llm_ckpt_set_section(w, "model", m, &st), 0);
    assert_int_equal(llm_ckpt_set_section(w, "notes", llm_node_new_str("hello"), &st), 0);
    char *dir = tu_tmpdir(), path[512];
    snprintf(path, sizeof path, "%s/x.llmk", dir);
    assert_int_equal(llm_ckpt_write(w, path, &st), 0);
    llm_ckpt_writer_free(w);
    llm_ckpt *c;
    assert_int_equal(llm_ckpt_open(&c, path, 0, &st), 0);
    assert_string_equal(llm_node_str(llm_ckpt_section(c, "notes")), "hello");
    assert_non_null(llm_node_get(llm_ckpt_section(c, "model"), "tp_rank"));
    llm_ckpt_close(c);
    tu_rmdir(dir);
    free(dir);
}

/* A source tensor: the same file as with the data in memory, read piece by piece in
 * order; a failing source ends the write with no file; a source giving too much is
 * refused. */
typedef struct {
    const unsigned char *data;
    uint64_t size, expect_off;
    size_t piece;
    int calls, fail;
} src_state;

static int src_cb(void *ctx, uint64_t off, const void **p, size_t *n, llm_status *st)
{
    src_state *s = ctx;
    s->calls++;
    if (s->fail)
        return llm_err(st, LLM_EIO, "source failed");
    assert_true(off == s->expect_off);
    *p = s->data + off;
    *n = s->size - off < s->piece ? (size_t)(s->size - off) : s->piece;
    s->expect_off += *n;
    return 0;
}

static void test_source(void **state)
{
    (void)state;
    enum { N = 1000 };
    float x[N];
    for (int i = 0; i < N; i++)
        x[i] = (float)i * 0.25f - 7.0f;
    int64_t shape[2] = {10, 100}, s1[1] = {3};
    float y[3] = {1, 2, 3};
    /* the checksum of the whole from the parts' (as ranks holding slices would) */
    uLong c = crc32_combine(crc32(0, (const Bytef *)x, 1200), crc32(0, (const Bytef *)x + 1200, 2800), 2800);
    char *dir = tu_tmpdir(), a[512], b[512];
    snprintf(a, sizeof a, "%s/a.llmk", dir);
    snprintf(b, sizeof b, "%s/b.llmk", dir);
    llm_status st = {0};
    llm_ckpt_writer *w;
    assert_int_equal(llm_ckpt_writer_new(&w, &st), 0);
    assert_int_equal(llm_ckpt_add(w, "y", LLM_DT_F32, 1, s1, y, 0, &st), 0);
    assert_int_equal(llm_ckpt_add(w, "x", LLM_DT_F32, 2, shape, x, 0, &st), 0);
    assert_int_equal(llm_ckpt_write(w, a, &st), 0);
    llm_ckpt_writer_free(w);
    src_state ss = {(const unsigned char *)x, sizeof x, 0, 28, 0, 0};
    assert_int_equal(llm_ckpt_writer_new(&w, &st), 0);
    assert_int_equal(llm_ckpt_add(w, "y", LLM_DT_F32, 1, s1, y, 0, &st), 0);
    assert_int_equal(llm_ckpt_add_source(w, "x", LLM_DT_F32, 2, shape, (uint32_t)c,
                                         src_cb, &ss, &st), 0);
    assert_int_equal(llm_ckpt_add_source(w, "z", LLM_DT_F32, 1, s1, 0, NULL, NULL, &st), LLM_EUSAGE);
    assert_int_equal(llm_ckpt_write(w, b, &st), 0);
    assert_int_equal(ss.calls, (int)((sizeof x + 27) / 28));
    size_t la, lb;
    unsigned char *fa = slurp(a, &la), *fb = slurp(b, &lb);
    assert_true(la == lb && !memcmp(fa, fb, la));
    free(fa);
    free(fb);
    llm_ckpt *ck;
    assert_int_equal(llm_ckpt_open(&ck, b, 0, &st), 0);   /* crc32 checked */
    llm_ckpt_close(ck);
    /* a failing source: the error comes back and no file appears */
    snprintf(b, sizeof b, "%s/c.llmk", dir);
    ss = (src_state){(const unsigned char *)x, sizeof x, 0, 28, 0, 1};
    assert_int_equal(llm_ckpt_write(w, b, &st), LLM_EIO);
    assert_non_null(strstr(st.msg, "source failed"));
    assert_int_equal(access(b, F_OK), -1);
    /* a source that hands out more than the tensor holds */
    ss = (src_state){(const unsigned char *)x, sizeof x + 4, 0, sizeof x + 4, 0, 0};
    assert_int_equal(llm_ckpt_write(w, b, &st), LLM_ESOFTWARE);
    assert_int_equal(access(b, F_OK), -1);
    llm_ckpt_writer_free(w);
    assert_int_equal(count_entries(dir), 2);   /* a.llmk, b.llmk: no temp file left */
    tu_rmdir(dir);
    free(dir);
}

/* A failed save leaves an existing file untouched and no temp file behind. */
static void test_atomic_save(void **state)
{
    (void)state;
    char *dir = tu_tmpdir(), path[512];
    snprintf(path, sizeof path, "%s/keep.llmk", dir);
    FILE *f = fopen(path, "w");
    fputs("old contents\n", f);
    fclose(f);
    llm_status st;
    /* 1: the header cannot be written (invalid UTF-8 in a section string) */
    llm_ckpt_writer *w;
    assert_int_equal(llm_ckpt_writer_new(&w, &st), 0);
    llm_node *m = llm_node_new_map();
    llm_node_set_str(m, "bad", "\xff\xfe");
    assert_int_equal(llm_ckpt_set_section(w, "model", m, &st), 0);
    assert_int_not_equal(llm_ckpt_write(w, path, &st), 0);
    llm_ckpt_writer_free(w);
    /* 2: the disk "fills up" mid-write (file size limit in a child) */
    static unsigned char big[1 << 16];
    pid_t pid = fork();
    if (pid == 0) {
        signal(SIGXFSZ, SIG_IGN);
        struct rlimit rl = {4096, 4096};
        setrlimit(RLIMIT_FSIZE, &rl);
        llm_ckpt_writer *w2;
        llm_status st2;
        int64_t n = sizeof big;
        llm_ckpt_writer_new(&w2, &st2);
        llm_ckpt_add(w2, "big", LLM_DT_U8, 1, &n, big, 0, &st2);
        int rc = llm_ckpt_write(w2, path, &st2);
        llm_ckpt_writer_free(w2);
        _exit(rc == LLM_EIO && strstr(st2.msg, "cannot write") ? 0 : 1);
    }
    int ws;
    waitpid(pid, &ws, 0);
    assert_true(WIFEXITED(ws) && WEXITSTATUS(ws) == 0);
    /* 3: a directory that does not exist */
    char bad[600];
    snprintf(bad, sizeof bad, "%s/no/such/dir.llmk", dir);
    assert_int_equal(llm_ckpt_writer_new(&w, &st), 0);
    assert_int_not_equal(llm_ckpt_write(w, bad, &st), 0);
    llm_ckpt_writer_free(w);
    size_t len;
    unsigned char *b = slurp(path, &len);
    assert_int_equal(len, 13);
    assert_memory_equal(b, "old contents\n", 13);
    free(b);
    assert_int_equal(count_entries(dir), 1);
    /* a successful save replaces it */
    assert_int_equal(llm_ckpt_writer_new(&w, &st), 0);
    assert_int_equal(llm_ckpt_write(w, path, &st), 0);
    llm_ckpt_writer_free(w);
    llm_ckpt *c;
    assert_int_equal(llm_ckpt_open(&c, path, 0, &st), 0);
    assert_int_equal(llm_ckpt_count(c), 0);
    llm_ckpt_close(c);
    assert_int_equal(count_entries(dir), 1);
    tu_rmdir(dir);
    free(dir);
}

/* The committed sample (tests/data/sample.llmk): small, deterministic, every common dtype,
 * one compressed tensor, a model section. */
static int write_sample(const char *path)
{
    llm_status st;
    llm_ckpt_writer *w;
    if (llm_ckpt_writer_new(&w, &st))
        return 1;
    llm_node *m = llm_node_new_map();
    llm_node_set_str(m, "arch", "gpt2");
    llm_node_set_int(m, "n_layer", 1);
    llm_node_set_int(m, "n_head", 2);
    llm_node_set_int(m, "n_embd", 16);
    llm_node_set_int(m, "vocab_size", 32);
    llm_node_set_int(m, "max_seq_len", 16);
    llm_ckpt_set_section(w, "model", m, &st);
    llm_node *t = llm_node_new_map();
    llm_node_set_str(t, "kind", "byte");
    llm_ckpt_set_section(w, "tokenizer", t, &st);
    static float wte[32 * 16], wpe[16 * 16];
    static uint16_t ln[16];
    static int32_t ids[8];
    static uint8_t mask[16];
    static int64_t sw[2] = {32, 16}, sp[2] = {16, 16}, s16[1] = {16}, s8[1] = {8};
    tu_rng r = {2026};
    for (int i = 0; i < 32 * 16; i++)
        wte[i] = tu_uniform(&r, -0.1f, 0.1f);
    for (int i = 0; i < 16 * 16; i++)
        wpe[i] = (float)((i % 16) * 0.01);  /* compressible */
    for (int i = 0; i < 16; i++) {
        ln[i] = 0x3f80;  /* bf16 1.0 */
        mask[i] = (uint8_t)(i < 12);
    }
    for (int i = 0; i < 8; i++)
        ids[i] = i * 3;
    int rc = llm_ckpt_add(w, "wte", LLM_DT_F32, 2, sw, wte, 0, &st) ||
             llm_ckpt_add(w, "wpe", LLM_DT_F32, 2, sp, wpe, LLM_CKPT_ZLIB, &st) ||
             llm_ckpt_add(w, "ln_f.w", LLM_DT_BF16, 1, s16, ln, 0, &st) ||
             llm_ckpt_add(w, "tok.ids", LLM_DT_I32, 1, s8, ids, 0, &st) ||
             llm_ckpt_add(w, "mask", LLM_DT_U8, 1, s16, mask, 0, &st) ||
             llm_ckpt_write(w, path, &st);
    if (rc)
        fprintf(stderr, "test_ckpt: %s\n", st.msg);
    llm_ckpt_writer_free(w);
    return rc != 0;
}

int main(void)
{
    const char *sample = getenv("LLM_WRITE_SAMPLE");
    if (sample && *sample)
        return write_sample(sample);
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_dtypes),
        cmocka_unit_test(test_roundtrip_file),
        cmocka_unit_test(test_roundtrip_pipe),
        cmocka_unit_test(test_pipe_header_only_and_corrupt),
        cmocka_unit_test(test_writer_checks),
        cmocka_unit_test(test_atomic_save),
        cmocka_unit_test(test_source),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
