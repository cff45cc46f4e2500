/* Unit tests for the windowed encoder (common/tokenizer_stream.c): on random texts, any
 * window, any feeding and any thread count give the ids and document starts of encoding
 * each whole input at once (llm_tokenizer_encode_docs on documents cut by the rule
 * written out here).  The GPT-2 half reads the shared data and skips without it. */
#include "tests/unit/testutil.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/tokenizer.h"

static llm_tokenizer *gpt2, *bytes; /* gpt2 NULL when the shared data is absent */

static int setup(void **state)
{
    (void)state;
    llm_status st = {0};
    if (llm_tokenizer_byte(&bytes, &st))
        return -1;
    const char *enc = tu_data("gpt2/encoder.json");
    if (enc) {
        char d[1024];
        snprintf(d, sizeof d, "%s", enc);
        *strrchr(d, '/') = '\0';
        if (llm_tokenizer_gpt2(&gpt2, d, &st))
            return -1;
    }
    return 0;
}

static int teardown(void **state)
{
    (void)state;
    llm_tokenizer_free(gpt2);
    llm_tokenizer_free(bytes);
    return 0;
}

/* The reference documents of one input: with split, a document ends just after a run of
 * two or more line ends ("\n", "\r\n") that more text follows; an empty input is one
 * empty document. */
static size_t ref_docs(const char *p, size_t n, int split, const char **t, size_t *l)
{
    size_t nd = 0, start = 0;
    for (;;) {
        size_t cut = n;
        for (size_t q = start; split && q < n;) {
            const char *nl = memchr(p + q, '\n', n - q);
            if (!nl)
                break;
            size_t r = (size_t)(nl - p) + 1;
            int lines = 1;
            while (r < n && (p[r] == '\n' || (p[r] == '\r' && r + 1 < n && p[r + 1] == '\n')))
                lines += p[r++] == '\n';
            if (lines >= 2 && r < n) {
                cut = r;
                break;
            }
            q = r;
        }
        t[nd] = p + start;
        l[nd++] = cut - start;
        if (cut == n)
            return nd;
        start = cut;
    }
}

typedef struct {
    llm_ids got;
} sink;

static int collect(void *ctx, const uint32_t *v, size_t n, llm_status *st)
{
    sink *s = ctx;
    for (size_t i = 0; i < n; i++)
        if (llm_ids_push(&s->got, v[i]))
            return llm_err(st, LLM_ENOMEM, "out of memory");
    return LLM_OK;
}

static const char *const alphabet[] = {
    "a", "b", "Z", " ", "  ", "\n", "\n\n", "\r\n", "\r", "\t", ".", ",", "'s", "'ll", "1", "23",
    "\xc3\xa9", "\xe6\x97\xa5\xe6\x9c\xac", "\xf0\x9f\x99\x82", "-", " \n", "\n \n", "\r\n\r\n",
    "x\n\n\n", "\xff", "hello world", "\n\r\n", "\xe3\x80\x82\n", "\xe3\x80\x80", "\xc2\xa0",
    "\xc2\x85", "\xe6\x97\xa5 ", "\xe6\x97", "\x80",
    /* Japanese without white space: letters, punctuation, digits, a combining mark */
    "\xe3\x81\xae", "\xe3\x80\x8c", "\xe3\x80\x8d", "\xe3\x80\x81", "\xe3\x83\xbc", "\xef\xbc\x91",
    "\xcc\x81", "'t", "\xe3\x80\x82",
};

static char *random_text(tu_rng *r, size_t *n)
{
    static const size_t sizes[] = {0, 1, 5, 50, 500, 3000};
    size_t parts = sizes[tu_next(r) % 6], cap = parts * 12 + 1, k = 0;
    char *p = malloc(cap);
    assert_non_null(p);
    for (size_t i = 0; i < parts; i++) {
        const char *a = alphabet[tu_next(r) % (sizeof alphabet / sizeof *alphabet)];
        size_t m = strlen(a);
        memcpy(p + k, a, m);
        k += m;
    }
    *n = k;
    return p;
}

static void one_case(const llm_tokenizer *t, tu_rng *r, int verbose)
{
    int nin = 1 + (int)(tu_next(r) % 3), eot = (int)(tu_next(r) & 1), split = (int)(tu_next(r) & 1);
    int threads = 1 + (int)(tu_next(r) % 3);
    static const size_t windows[] = {1, 2, 3, 5, 8, 13, 64, 1000, 100000};
    size_t window = windows[tu_next(r) % 9];
    char *in[3];
    size_t len[3], nd = 0;
    const char *dt[4000];
    size_t dl[4000];
    for (int f = 0; f < nin; f++) {
        in[f] = random_text(r, &len[f]);
        nd += ref_docs(in[f], len[f], split, dt + nd, dl + nd);
    }
    llm_status st = {0};
    llm_ids want = {0};
    size_t *ws = malloc((nd + 1) * sizeof *ws);
    assert_non_null(ws);
    assert_int_equal(llm_tokenizer_encode_docs(t, dt, dl, nd, eot, 1, &want, ws, &st), LLM_OK);

    sink s = {{0}};
    llm_encoder *e = NULL;
    assert_int_equal(llm_encoder_new(&e, t, eot, split, threads, window, collect, &s, &st), LLM_OK);
    llm_encoder_keep_starts(e);
    for (int f = 0; f < nin; f++) {
        for (size_t at = 0; at < len[f];) {   /* fed in random pieces */
            size_t k = 1 + (size_t)(tu_next(r) % 700);
            if (k > len[f] - at)
                k = len[f] - at;
            assert_int_equal(llm_encoder_feed(e, in[f] + at, k, &st), LLM_OK);
            at += k;
        }
        assert_int_equal(llm_encoder_end_input(e, &st), LLM_OK);
    }
    if (verbose || s.got.n != want.n || (want.n && memcmp(s.got.v, want.v, want.n * sizeof *want.v)))
        printf("# %s: %d input(s), eot %d, split %d, window %zu, %d thread(s): %zu ids (want %zu)\n",
               t == gpt2 ? "gpt2" : "byte", nin, eot, split, window, threads, s.got.n, want.n);
    assert_int_equal(s.got.n, want.n);
    if (want.n)
        assert_memory_equal(s.got.v, want.v, want.n * sizeof *want.v);
    assert_int_equal(llm_encoder_tokens(e), want.n);
    size_t ns;
    const uint64_t *starts = llm_encoder_doc_starts(e, &ns);
    assert_int_equal(ns, nd);
    for (size_t d = 0; d < nd; d++)
        assert_int_equal(starts[d], ws[d]);
    uint64_t total = 0;
    for (int f = 0; f < nin; f++)
        total += len[f];
    assert_int_equal(llm_encoder_bytes(e), total);
    llm_encoder_free(e);
    llm_ids_free(&s.got);
    llm_ids_free(&want);
    free(ws);
    for (int f = 0; f < nin; f++)
        free(in[f]);
}

static void test_stream_byte(void **state)
{
    (void)state;
    tu_rng r = {11};
    for (int i = 0; i < 400; i++)
        one_case(bytes, &r, 0);
}

static void test_stream_gpt2(void **state)
{
    (void)state;
    if (!gpt2) {
        printf("# SKIP: shared GPT-2 data not found (set LLM_DATA)\n");
        skip();
    }
    tu_rng r = {12};
    for (int i = 0; i < 400; i++)
        one_case(gpt2, &r, 0);
}

/* A long stretch with no place to cut is held whole, then encoded as one piece; a
 * window of one byte still gives the whole input's ids. */
static void test_stream_no_cut(void **state)
{
    (void)state;
    const llm_tokenizer *t = gpt2 ? gpt2 : bytes;
    size_t n = 200000;
    char *p = malloc(n);
    assert_non_null(p);
    for (size_t i = 0; i < n; i++)
        p[i] = i % 7 == 6 ? ' ' : (char)('a' + i % 26);
    p[n / 2] = '\n';   /* one place to cut, for GPT-2 after a printable byte */
    llm_status st = {0};
    llm_ids want = {0};
    assert_int_equal(llm_tokenizer_encode(t, p, n, &want, &st), LLM_OK);
    sink s = {{0}};
    llm_encoder *e = NULL;
    assert_int_equal(llm_encoder_new(&e, t, 0, 1, 2, 1, collect, &s, &st), LLM_OK);
    for (size_t at = 0; at < n; at += 4096)
        assert_int_equal(llm_encoder_feed(e, p + at, n - at < 4096 ? n - at : 4096, &st), LLM_OK);
    assert_int_equal(llm_encoder_end_input(e, &st), LLM_OK);
    assert_int_equal(s.got.n, want.n);
    assert_memory_equal(s.got.v, want.v, want.n * sizeof *want.v);
    llm_encoder_free(e);
    llm_ids_free(&s.got);
    llm_ids_free(&want);
    free(p);
}

/* CRLF lines, one long line and lines of Japanese are cut before '\r', spaces and line
 * ends, and one line of Japanese between its letters and its punctuation: ids come out
 * while the input is still being fed, not all at its end. */
static int count_calls(void *ctx, const uint32_t *v, size_t n, llm_status *st)
{
    (void)v, (void)n, (void)st;
    ++*(int *)ctx;
    return LLM_OK;
}

static void test_stream_cuts_early(void **state)
{
    (void)state;
    if (!gpt2) {
        printf("# SKIP: shared GPT-2 data not found (set LLM_DATA)\n");
        skip();
    }
    static const char *const unit[] = {"Some words, then CRLF.\r\n", "one long line of words ",
                                       "\xe6\x97\xa5\xe6\x9c\xac\xe8\xaa\x9e\xe3\x81\xae\xe6\x96\x87\xe3\x80\x82\n",
                                       "\xe6\x97\xa5\xe6\x9c\xac\xe8\xaa\x9e\xe3\x81\xae\xe6\x96\x87\xe3\x80\x82"};
    static const char *const what[] = {"crlf", "long line", "japanese lines",
                                       "one line of japanese, no white space"};
    for (int k = 0; k < 4; k++) {
        int calls = 0;
        llm_status st = {0};
        llm_encoder *e = NULL;
        assert_int_equal(llm_encoder_new(&e, gpt2, 0, 0, 1, 1000, count_calls, &calls, &st), LLM_OK);
        for (int i = 0; i < 4000; i++)
            assert_int_equal(llm_encoder_feed(e, unit[k], strlen(unit[k]), &st), LLM_OK);
        int before_end = calls;
        assert_int_equal(llm_encoder_end_input(e, &st), LLM_OK);
        if (before_end < 50)
            printf("# %s: %d rounds before the end\n", what[k], before_end);
        assert_true(before_end >= 50);
        llm_encoder_free(e);
    }
}

/* An error from the consumer stops the encoder with its status. */
static int refuse(void *ctx, const uint32_t *v, size_t n, llm_status *st)
{
    (void)ctx, (void)v, (void)n;
    return llm_err(st, LLM_EIO, "cannot write 'x': no space left on device");
}

static void test_stream_emit_error(void **state)
{
    (void)state;
    llm_status st = {0};
    llm_encoder *e = NULL;
    assert_int_equal(llm_encoder_new(&e, bytes, 1, 0, 1, 16, refuse, NULL, &st), LLM_OK);
    int rc = llm_encoder_feed(e, "0123456789abcdefghijklmnop", 26, &st);
    if (!rc)
        rc = llm_encoder_end_input(e, &st);
    assert_int_equal(rc, LLM_EIO);
    assert_non_null(strstr(st.msg, "no space left"));
    llm_encoder_free(e);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_stream_byte),
        cmocka_unit_test(test_stream_gpt2),
        cmocka_unit_test(test_stream_no_cut),
        cmocka_unit_test(test_stream_cuts_early),
        cmocka_unit_test(test_stream_emit_error),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
