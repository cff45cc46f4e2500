/* Unit tests for the tokenizers (common/tokenizer*.c).  The GPT-2 tests read the shared
 * data through tu_data() and skip, saying so, when it is absent. */
#include "tests/unit/testutil.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <jansson.h>
#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>
#include <sys/stat.h>
#include <unistd.h>

#include "common/ckpt.h"
#include "common/tokenizer.h"
#include "common/tokenizer_int.h"

static char *dir;
static llm_tokenizer *gpt2; /* NULL when the shared data is absent */

static int setup(void **state)
{
    (void)state;
    dir = tu_tmpdir();
    const char *enc = tu_data("gpt2/encoder.json");
    if (enc) {
        char d[1024];
        snprintf(d, sizeof d, "%s", enc);
        *strrchr(d, '/') = '\0';
        llm_status st = {0};
        if (llm_tokenizer_gpt2(&gpt2, d, &st)) {
            fprintf(stderr, "loading GPT-2 from %s: %s\n", d, st.msg);
            return -1;
        }
    }
    return dir ? 0 : -1;
}

static int teardown(void **state)
{
    (void)state;
    llm_tokenizer_free(gpt2);
    tu_rmdir(dir);
    free(dir);
    return 0;
}

#define NEED_GPT2()                                                                          \
    do {                                                                                     \
        if (!gpt2) {                                                                         \
            printf("# SKIP: shared GPT-2 data not found (set LLM_DATA)\n");                  \
            skip();                                                                          \
        }                                                                                    \
    } while (0)

static char *read_all(const char *p, size_t *n)
{
    FILE *f = fopen(p, "rb");
    assert_non_null(f);
    fseek(f, 0, SEEK_END);
    long len = ftell(f);
    rewind(f);
    char *b = malloc((size_t)len + 1);
    assert_non_null(b);
    assert_int_equal(fread(b, 1, (size_t)len, f), (size_t)len);
    fclose(f);
    *n = (size_t)len;
    return b;
}

static void roundtrip(const llm_tokenizer *t, const char *text, size_t n)
{
    llm_status st = {0};
    llm_ids ids = {0};
    assert_int_equal(llm_tokenizer_encode(t, text, n, &ids, &st), LLM_OK);
    char *out;
    size_t m;
    assert_int_equal(llm_tokenizer_decode(t, ids.v, ids.n, &out, &m, &st), LLM_OK);
    assert_int_equal(m, n);
    assert_memory_equal(out, text, n);
    free(out);
    llm_ids_free(&ids);
}

/* ---- byte tokenizer ---- */

static void test_byte(void **state)
{
    (void)state;
    llm_status st = {0};
    llm_tokenizer *t;
    assert_int_equal(llm_tokenizer_byte(&t, &st), LLM_OK);
    assert_string_equal(llm_tokenizer_kind(t), "byte");
    assert_int_equal(llm_tokenizer_vocab_size(t), 257);
    assert_int_equal(llm_tokenizer_eot(t), 256);
    llm_ids ids = {0};
    assert_int_equal(llm_tokenizer_encode(t, "A\xff\0z", 4, &ids, &st), LLM_OK);
    assert_int_equal(ids.n, 4);
    assert_int_equal(ids.v[0], 65);
    assert_int_equal(ids.v[1], 255);
    assert_int_equal(ids.v[2], 0);
    assert_int_equal(ids.v[3], 'z');
    assert_int_equal(llm_ids_push(&ids, 256), 0);
    char *out;
    size_t n;
    assert_int_equal(llm_tokenizer_decode(t, ids.v, ids.n, &out, &n, &st), LLM_OK);
    assert_int_equal(n, 4 + 13);
    assert_memory_equal(out, "A\xff\0z<|endoftext|>", n);
    free(out);
    const char *b;
    size_t bl;
    assert_int_equal(llm_tokenizer_token_bytes(t, 200, &b, &bl, &st), LLM_OK);
    assert_int_equal(bl, 1);
    assert_int_equal((unsigned char)b[0], 200);
    assert_int_equal(llm_tokenizer_token_bytes(t, 257, &b, &bl, &st), LLM_EDATA);
    ids.v[1] = 300;
    assert_int_equal(llm_tokenizer_decode(t, ids.v, ids.n, &out, &n, &st), LLM_EDATA);
    assert_non_null(strstr(st.msg, "token 1"));
    llm_ids_free(&ids);
    llm_tokenizer_free(t);
}

/* ---- a tiny BPE written to files: exercises loading and merge order without data ---- */

/* GPT-2's byte -> code point spelling, written out independently of the library */
static int spell(int b)
{
    if ((b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE && b <= 0xFF))
        return b;
    int n = 0;
    for (int c = 0; c < b; c++)
        if (!((c >= '!' && c <= '~') || (c >= 0xA1 && c <= 0xAC) || (c >= 0xAE && c <= 0xFF)))
            n++;
    return 256 + n;
}

static void put_spelled(FILE *f, const char *bytes, int json)
{
    for (const unsigned char *p = (const unsigned char *)bytes; *p; p++) {
        int cp = spell(*p);
        if (json && (cp == '"' || cp == '\\'))
            fputc('\\', f);
        if (cp < 0x80) {
            fputc(cp, f);
        } else {
            fputc(0xC0 | (cp >> 6), f);
            fputc(0x80 | (cp & 0x3F), f);
        }
    }
}

/* tokens: the 256 bytes (id = byte, except 0 which is written last... as id 0), then
 * ab bc aa abc aaaa, then <|endoftext|>; merges in rank order */
static void write_tiny(const char *d, const char *merges, int with_eot, int extra_bad)
{
    char p[1024];
    snprintf(p, sizeof p, "%s/encoder.json", d);
    FILE *f = fopen(p, "wb");
    assert_non_null(f);
    fputs("{", f);
    for (int b = 1; b < 256; b++) {
        char s[2] = {(char)b, 0};
        fputs("\"", f);
        put_spelled(f, s, 1);
        fprintf(f, "\": %d, ", b);
    }
    fputs("\"", f);
    fputs("\xc4\x80", f); /* byte 0 spelled U+0100 */
    fputs("\": 0", f);
    const char *multi[] = {"ab", "bc", "aa", "abc", "aaaa"};
    for (int i = 0; i < 5; i++) {
        fputs(", \"", f);
        put_spelled(f, multi[i], 1);
        fprintf(f, "\": %d", 256 + i);
    }
    if (with_eot)
        fputs(", \"<|endoftext|>\": 261", f);
    if (extra_bad)
        fputs(", \"xyz\": 3", f);
    fputs("}\n", f);
    fclose(f);
    snprintf(p, sizeof p, "%s/vocab.bpe", d);
    f = fopen(p, "wb");
    assert_non_null(f);
    fputs("#version: 0.2\n", f);
    fputs(merges, f);
    fclose(f);
}

static const char tiny_merges[] = "a b\nb c\na a\nab c\naa aa\n";

static void expect_ids(const llm_tokenizer *t, const char *text, const uint32_t *want, size_t n)
{
    llm_status st = {0};
    llm_ids ids = {0};
    assert_int_equal(llm_tokenizer_encode(t, text, strlen(text), &ids, &st), LLM_OK);
    if (ids.n != n)
        fail_msg("'%s': %zu ids, want %zu", text, ids.n, n);
    for (size_t i = 0; i < n; i++)
        if (ids.v[i] != want[i])
            fail_msg("'%s': id %zu is %u, want %u", text, i, ids.v[i], want[i]);
    llm_ids_free(&ids);
}

static void test_tiny_bpe_merge_order(void **state)
{
    (void)state;
    char d[600];
    snprintf(d, sizeof d, "%s/tiny", dir);
    assert_int_equal(mkdir(d, 0755), 0);
    write_tiny(d, tiny_merges, 1, 0);
    llm_status st = {0};
    llm_tokenizer *t;
    if (llm_tokenizer_gpt2(&t, d, &st))
        fail_msg("%s", st.msg);
    assert_int_equal(llm_tokenizer_vocab_size(t), 262);
    assert_int_equal(llm_tokenizer_eot(t), 261);
    /* lowest rank first: ab (0) before bc (1), then ab+c (3) */
    expect_ids(t, "abc", (uint32_t[]){259}, 1);
    expect_ids(t, "bca", (uint32_t[]){257, 'a'}, 2);
    /* equal ranks merge leftmost first */
    expect_ids(t, "aaa", (uint32_t[]){258, 'a'}, 2);
    expect_ids(t, "aaaa", (uint32_t[]){260}, 1);
    expect_ids(t, "aaaaa", (uint32_t[]){260, 'a'}, 2);
    /* pre-tokens are merged separately; a space joins the following word */
    expect_ids(t, "abc abc", (uint32_t[]){259, ' ', 259}, 3);
    expect_ids(t, "abc'sab", (uint32_t[]){259, '\'', 's', 256}, 4);
    expect_ids(t, "", (uint32_t[]){0}, 0);
    /* a long word takes the uncached path; it must give the same ids as a short one */
    char longw[400];
    memset(longw, 'a', 399);
    longw[399] = 0;
    llm_ids ids = {0};
    assert_int_equal(llm_tokenizer_encode(t, longw, 399, &ids, &st), LLM_OK);
    assert_int_equal(ids.n, 101); /* 399 = 99 x aaaa + aa + a */
    for (int i = 0; i < 99; i++)
        assert_int_equal(ids.v[i], 260);
    assert_int_equal(ids.v[99], 258);
    assert_int_equal(ids.v[100], 'a');
    llm_ids_free(&ids);
    roundtrip(t, "\0abc\xff", 5);
    llm_tokenizer_free(t);
}

static void expect_load_error(const char *name, const char *merges, int eot, int bad, int code,
                              const char *needle)
{
    char d[600];
    snprintf(d, sizeof d, "%s/%s", dir, name);
    assert_int_equal(mkdir(d, 0755), 0);
    write_tiny(d, merges, eot, bad);
    llm_status st = {0};
    llm_tokenizer *t = NULL;
    assert_int_equal(llm_tokenizer_gpt2(&t, d, &st), code);
    assert_null(t);
    if (!strstr(st.msg, needle))
        fail_msg("'%s' lacks '%s'", st.msg, needle);
}

static void test_bad_vocabularies(void **state)
{
    (void)state;
    expect_load_error("noeot", tiny_merges, 0, 0, LLM_EDATA, "endoftext");
    expect_load_error("dupid", tiny_merges, 1, 1, LLM_EDATA, "twice");
    expect_load_error("unknown", "a b\nzz q\n", 1, 0, LLM_EDATA, "line 3");
    expect_load_error("nores", "a b\nc c\n", 1, 0, LLM_EDATA, "merge 2");
    expect_load_error("notpair", "a b c\n", 1, 0, LLM_EDATA, "line 2");
    char d[600], p[700];
    snprintf(d, sizeof d, "%s/broken", dir);
    assert_int_equal(mkdir(d, 0755), 0);
    write_tiny(d, tiny_merges, 1, 0);
    snprintf(p, sizeof p, "%s/encoder.json", d);
    FILE *f = fopen(p, "wb");
    fputs("{\"a\": 1,", f);
    fclose(f);
    llm_status st = {0};
    llm_tokenizer *t = NULL;
    assert_int_equal(llm_tokenizer_gpt2(&t, d, &st), LLM_EDATA);
    assert_non_null(strstr(st.msg, "encoder.json"));
    snprintf(p, sizeof p, "%s/vocab.bpe", d);
    unlink(p);
    assert_int_equal(llm_tokenizer_gpt2(&t, d, &st), LLM_ENOINPUT);
    assert_non_null(strstr(st.msg, "vocab.bpe"));
    assert_int_equal(llm_tokenizer_gpt2(&t, "/nonexistent/dir", &st), LLM_ENOINPUT);
    assert_int_equal(llm_tokenizer_load(&t, "no-such-model.llmk", NULL, &st), LLM_ENOINPUT);
    /* the end-of-text id must be the token "<|endoftext|>" (a stored tokenizer naming
     * another token would decode and export it as that text) */
    for (int e = 0; e < 2; e++) {
        uint8_t *vb = malloc(256 + 13);
        uint32_t *off = malloc(258 * sizeof *off);
        assert_non_null(vb);
        assert_non_null(off);
        for (int i = 0; i < 256; i++)
            vb[i] = (uint8_t)i, off[i] = (uint32_t)i;
        memcpy(vb + 256, "<|endoftext|>", 13);
        off[256] = 256;
        off[257] = 256 + 13;
        int rc = llm_tok_build_bpe(&t, vb, off, 257, e ? 256 : 5, "test", &st);
        if (e) {
            assert_int_equal(rc, LLM_OK);
            llm_tokenizer_free(t);
        } else {
            assert_int_equal(rc, LLM_EDATA);
            assert_non_null(strstr(st.msg, "is not the token"));
        }
    }
}

/* ---- GPT-2 on the shared data ---- */

static void test_gpt2_cases(void **state)
{
    (void)state;
    NEED_GPT2();
    const char *p = tu_data("gpt2/tokenizer_cases.jsonl");
    assert_non_null(p);
    FILE *f = fopen(p, "rb");
    char *line = NULL;
    size_t cap = 0;
    int n = 0, saw_eot_text = 0;
    llm_status st = {0};
    while (getline(&line, &cap, f) > 0) {
        json_error_t je;
        json_t *c = json_loads(line, 0, &je);
        assert_non_null(c);
        json_t *text = json_object_get(c, "text"), *want = json_object_get(c, "ids");
        const char *s = json_string_value(text);
        size_t len = json_string_length(text);
        saw_eot_text |= strstr(s, "<|endoftext|>") != NULL;
        llm_ids ids = {0};
        assert_int_equal(llm_tokenizer_encode(gpt2, s, len, &ids, &st), LLM_OK);
        if (ids.n != json_array_size(want))
            fail_msg("case %d: %zu ids, want %zu", n + 1, ids.n, json_array_size(want));
        for (size_t i = 0; i < ids.n; i++)
            if (ids.v[i] != (uint32_t)json_integer_value(json_array_get(want, i)))
                fail_msg("case %d: id %zu is %u", n + 1, i, ids.v[i]);
        roundtrip(gpt2, s, len);
        llm_ids_free(&ids);
        json_decref(c);
        n++;
    }
    free(line);
    fclose(f);
    assert_true(n >= 10);
    assert_true(saw_eot_text); /* the literal text is ordinary text (a case checks it) */
    printf("# %d tokenizer cases exact\n", n);
}

static void test_gpt2_shakespeare(void **state)
{
    (void)state;
    NEED_GPT2();
    char pt[1024], pr[1024]; /* tu_data returns a static buffer: copy each path */
    const char *q = tu_data("tinyshakespeare/input.txt");
    snprintf(pt, sizeof pt, "%s", q ? q : "");
    q = tu_data("tinyshakespeare/input.gpt2.u16");
    snprintf(pr, sizeof pr, "%s", q ? q : "");
    if (!*pt || !*pr) {
        printf("# SKIP: tinyshakespeare data not found\n");
        skip();
    }
    size_t n, rn;
    char *text = read_all(pt, &n);
    unsigned char *ref = (unsigned char *)read_all(pr, &rn);
    assert_int_equal(rn, 338025 * 2);
    llm_status st = {0};
    for (int fast = 1; fast >= 0; fast--) {
        /* the ASCII fast path and PCRE2 alone must both give the reference ids */
        gpt2->fast = fast;
        llm_ids ids = {0};
        assert_int_equal(llm_tokenizer_encode(gpt2, text, n, &ids, &st), LLM_OK);
        assert_int_equal(ids.n, rn / 2);
        for (size_t i = 0; i < ids.n; i++)
            if (ids.v[i] != (uint32_t)(ref[2 * i] | ref[2 * i + 1] << 8))
                fail_msg("fast=%d: token %zu is %u, want %u", fast, i, ids.v[i],
                         ref[2 * i] | ref[2 * i + 1] << 8);
        char *out;
        size_t m;
        assert_int_equal(llm_tokenizer_decode(gpt2, ids.v, ids.n, &out, &m, &st), LLM_OK);
        assert_int_equal(m, n);
        assert_memory_equal(out, text, n);
        free(out);
        llm_ids_free(&ids);
    }
    gpt2->fast = 1;
    /* threads: same ids for any count, with documents and end-of-text ids */
    llm_ids one = {0};
    const char *docs[3] = {text, text + 1000, text + 400000};
    size_t lens[3] = {1000, 399000, n - 400000}, s1[3], s4[3];
    assert_int_equal(llm_tokenizer_encode_docs(gpt2, docs, lens, 3, 1, 1, &one, s1, &st), LLM_OK);
    for (int th = 2; th <= 4; th++) {
        llm_ids many = {0};
        assert_int_equal(llm_tokenizer_encode_docs(gpt2, docs, lens, 3, 1, th, &many, s4, &st), LLM_OK);
        assert_int_equal(many.n, one.n);
        assert_memory_equal(many.v, one.v, one.n * sizeof *one.v);
        assert_memory_equal(s1, s4, sizeof s1);
        llm_ids_free(&many);
    }
    assert_int_equal(s1[0], 0);
    for (int d = 0; d < 3; d++)
        assert_int_equal(one.v[s1[d]], 50256);
    llm_ids_free(&one);
    llm_ids whole = {0}, mt = {0};
    assert_int_equal(llm_tokenizer_encode(gpt2, text, n, &whole, &st), LLM_OK);
    assert_int_equal(llm_tokenizer_encode_mt(gpt2, text, n, 3, &mt, &st), LLM_OK);
    assert_int_equal(mt.n, whole.n);
    assert_memory_equal(mt.v, whole.v, whole.n * sizeof *whole.v);
    llm_ids_free(&whole);
    llm_ids_free(&mt);
    free(text);
    free(ref);
}

/* random text from pieces that stress the pattern: contractions, runs of each class,
 * Unicode letters/digits/spaces, emoji, and invalid UTF-8 */
static size_t random_text(tu_rng *r, char *buf, size_t cap)
{
    static const char *const pieces[] = {
        "a", "Z", "q", "7", "0", " ", " ", "  ", "\n", "\n\n", "\t", "\r\n", "'s", "'t", "'re",
        "'ve", "'m", "'ll", "'d", "'S", "'", "!", "...", "-", "\"", "(", "\x01", "\x1f", "\x7f",
        "\xc3\xa9", "\xc2\xb2", "\xc2\xa0", "\xe3\x80\x80", "\xe6\x97\xa5", "\xf0\x9f\x98\x80",
        "\xe2\x80\x94", "\xe2\x80\xa8", "\xff", "\xc3", "\xe2\x80", "\x80", "\xf0\x9f", "\xed\xa0\x80",
        "hello", " world", "1234", " 42", "don't", "\xd9\xa3",
    };
    size_t n = 0, np = sizeof pieces / sizeof *pieces;
    while (n + 8 < cap) {
        uint64_t x = tu_next(r);
        if (x % 11 == 0) {
            buf[n++] = (char)(x >> 8);
        } else {
            const char *p = pieces[(x >> 8) % np];
            size_t l = strlen(p);
            memcpy(buf + n, p, l);
            n += l;
        }
        if ((x >> 40) % 97 == 0)
            break;
    }
    return n;
}

static void test_gpt2_random_roundtrip_and_fast_path(void **state)
{
    (void)state;
    NEED_GPT2();
    tu_rng r = {7};
    char buf[4096];
    llm_status st = {0};
    for (int it = 0; it < 3000; it++) {
        size_t n;
        if (it % 3 == 0) {
            n = tu_next(&r) % 600;
            for (size_t i = 0; i < n; i++)
                buf[i] = (char)tu_next(&r);
        } else {
            n = random_text(&r, buf, sizeof buf);
        }
        roundtrip(gpt2, buf, n);
        llm_ids a = {0}, b = {0};
        gpt2->fast = 1;
        assert_int_equal(llm_tokenizer_encode(gpt2, buf, n, &a, &st), LLM_OK);
        gpt2->fast = 0;
        assert_int_equal(llm_tokenizer_encode(gpt2, buf, n, &b, &st), LLM_OK);
        gpt2->fast = 1;
        if (a.n != b.n || (a.n && memcmp(a.v, b.v, a.n * sizeof *a.v)))
            fail_msg("iteration %d: the ASCII fast path and PCRE2 disagree", it);
        llm_ids_free(&a);
        llm_ids_free(&b);
    }
    /* big inputs: long runs (JIT stack, uncached words) and a large random block */
    size_t big = 300000;
    char *x = malloc(big);
    memset(x, ' ', big);
    roundtrip(gpt2, x, big);
    memset(x, 'a', big);
    roundtrip(gpt2, x, big);
    memset(x, '!', big);
    roundtrip(gpt2, x, big);
    for (size_t i = 0; i < big; i++)
        x[i] = (char)tu_next(&r);
    roundtrip(gpt2, x, big);
    llm_ids one = {0}, mt = {0};
    assert_int_equal(llm_tokenizer_encode(gpt2, x, big, &one, &st), LLM_OK);
    assert_int_equal(llm_tokenizer_encode_mt(gpt2, x, big, 4, &mt, &st), LLM_OK);
    assert_int_equal(one.n, mt.n);
    assert_memory_equal(one.v, mt.v, one.n * sizeof *one.v);
    llm_ids_free(&one);
    llm_ids_free(&mt);
    free(x);
}

typedef struct {
    const char *text;
    size_t n;
    const llm_ids *want;
    int ok;
} conc_arg;

static void *conc_worker(void *p)
{
    conc_arg *a = p;
    llm_status st = {0};
    a->ok = 1;
    for (int rep = 0; rep < 3; rep++) {
        llm_ids ids = {0};
        if (llm_tokenizer_encode(gpt2, a->text, a->n, &ids, &st) || ids.n != a->want->n ||
            memcmp(ids.v, a->want->v, ids.n * sizeof *ids.v))
            a->ok = 0;
        llm_ids_free(&ids);
    }
    return NULL;
}

/* ---- safe cuts (llm_tok__cut_ok) ---- */

static size_t put_utf8(unsigned char *b, uint32_t cp)
{
    if (cp < 0x800) {
        b[0] = (unsigned char)(0xc0 | cp >> 6);
        b[1] = (unsigned char)(0x80 | (cp & 0x3f));
        return 2;
    }
    if (cp < 0x10000) {
        b[0] = (unsigned char)(0xe0 | cp >> 12);
        b[1] = (unsigned char)(0x80 | (cp >> 6 & 0x3f));
        b[2] = (unsigned char)(0x80 | (cp & 0x3f));
        return 3;
    }
    b[0] = (unsigned char)(0xf0 | cp >> 18);
    b[1] = (unsigned char)(0x80 | (cp >> 12 & 0x3f));
    b[2] = (unsigned char)(0x80 | (cp >> 6 & 0x3f));
    b[3] = (unsigned char)(0x80 | (cp & 0x3f));
    return 4;
}

/* Every code point above 0x7f: the decoder finds it, and a cut after it is never taken
 * when PCRE2 (UTF + UCP, as the pre-tokenizer compiles) calls it white space. */
static void test_cut_every_code_point(void **state)
{
    (void)state;
    int err;
    PCRE2_SIZE eoff;
    pcre2_code *re = pcre2_compile((PCRE2_SPTR) "\\s", PCRE2_ZERO_TERMINATED,
                                   PCRE2_UTF | PCRE2_UCP | PCRE2_ANCHORED, &err, &eoff, NULL);
    assert_non_null(re);
    pcre2_match_data *md = pcre2_match_data_create_from_pattern(re, NULL);
    assert_non_null(md);
    size_t spaces = 0, cuts = 0;
    for (uint32_t cp = 0x80; cp <= 0x10ffff; cp++) {
        if (cp >= 0xd800 && cp <= 0xdfff)
            continue;
        unsigned char b[8] = {'a'};
        size_t n = 1 + put_utf8(b + 1, cp);
        b[n] = ' ';
        assert_int_equal(llm_tok__utf8_before(b, n), (int32_t)cp);
        int space = pcre2_match(re, b + 1, n - 1, 0, 0, md, NULL) > 0;
        int cut = llm_tok__cut_ok((const char *)b, n, n + 1);
        if (space && cut)
            printf("# U+%04X is white space to PCRE2, yet a cut after it was taken\n", cp);
        assert_false(space && cut);
        spaces += space;
        cuts += cut;
    }
    printf("# %zu white-space code points above 0x7f; cuts after %zu code points\n", spaces, cuts);
    /* the certain classes of llm_tok__gpt2_class are PCRE2's, code point by code point */
    static const char *const cls_pat[3] = {"\\p{L}", "\\p{N}", "\\s"};
    pcre2_code *cre[3];
    pcre2_match_data *cmd[3];
    for (int k = 0; k < 3; k++) {
        cre[k] = pcre2_compile((PCRE2_SPTR)cls_pat[k], PCRE2_ZERO_TERMINATED,
                               PCRE2_UTF | PCRE2_UCP | PCRE2_ANCHORED, &err, &eoff, NULL);
        assert_non_null(cre[k]);
        cmd[k] = pcre2_match_data_create_from_pattern(cre[k], NULL);
    }
    size_t known[4] = {0};
    for (uint32_t cp = 0; cp <= 0x10ffff; cp++) {
        if (cp >= 0xd800 && cp <= 0xdfff)
            continue;
        int k = llm_tok__gpt2_class((int32_t)cp);
        known[k]++;
        if (!k)
            continue;
        unsigned char b[8] = {(unsigned char)cp};
        size_t n = cp < 0x80 ? 1 : put_utf8(b, cp);
        int in[3];
        for (int j = 0; j < 3; j++)
            in[j] = pcre2_match(cre[j], b, n, 0, 0, cmd[j], NULL) > 0;
        int want = in[2] ? -1 : in[0] ? LLM_TOK__L : in[1] ? LLM_TOK__N : LLM_TOK__O;
        if (want != k)
            printf("# U+%04X: class %d here, %d to PCRE2\n", cp, k, want);
        assert_int_equal(k, want);
    }
    printf("# certain classes: %zu letters, %zu numbers, %zu other\n", known[1], known[2], known[3]);
    assert_true(known[1] > 30000 && known[2] >= 20 && known[3] > 200);
    for (int k = 0; k < 3; k++) {
        pcre2_match_data_free(cmd[k]);
        pcre2_code_free(cre[k]);
    }
    assert_true(spaces >= 20);
    assert_true(cuts > 1000000);
    pcre2_match_data_free(md);
    pcre2_code_free(re);
    /* not one whole character: cut short, overlong, a surrogate, beyond U+10FFFF */
    static const char *const bad[] = {"\xe6\x97 ", "\x97 ", "\xc0\x80 ", "\xed\xa0\x80 ",
                                      "\xf4\x90\x80\x80 ", "\xe6 ", "\xf0\x9f\x99 "};
    for (size_t k = 0; k < sizeof bad / sizeof *bad; k++)
        assert_false(llm_tok__cut_ok(bad[k], strlen(bad[k]) - 1, strlen(bad[k])));
}

/* got == want, else the text's bytes printed (what: which cut) and the test fails */
static void assert_same_ids(const llm_ids *got, const llm_ids *want, const char *what,
                            const char *text, size_t n)
{
    if (got->n != want->n || memcmp(got->v, want->v, want->n * sizeof *want->v)) {
        printf("# %s differs:", what);
        for (size_t j = 0; j < n; j++)
            printf(" %02x", (unsigned char)text[j]);
        printf("\n");
    }
    assert_int_equal(got->n, want->n);
    assert_memory_equal(got->v, want->v, want->n * sizeof *want->v);
}

/* 1 to max_parts pieces drawn from piece[0..n), joined into text (the caller's, large
 * enough for max_parts of the longest piece); returns its length */
static size_t joined_pieces(tu_rng *r, const char *const *piece, size_t n, size_t max_parts, char *text)
{
    size_t len = 0, parts = 1 + tu_next(r) % max_parts;
    for (size_t k = 0; k < parts; k++) {
        const char *a = piece[tu_next(r) % n];
        memcpy(text + len, a, strlen(a));
        len += strlen(a);
    }
    return len;
}

/* On random byte strings rich in UTF-8, white space of every kind and invalid bytes,
 * encoding the two sides of every cut taken gives the ids of the whole. */
static void test_gpt2_cuts_agree(void **state)
{
    (void)state;
    NEED_GPT2();
    static const char *const piece[] = {
        "a", "Z", "1", ".", "'", "'s", " ", "\t", "\n", "\r", "\x0b", "\x0c", "\x1f",
        "\xc2\xa0", "\xc2\x85", "\xe3\x80\x80", "\xe2\x80\x83", "\xe2\x80\xa8", "\xe1\x9a\x80",
        "\xe2\x81\x9f", "\xef\xbb\xbf", "\xe6\x97\xa5", "\xe3\x80\x82", "\xef\xbc\x8c",
        "\xc3\xa9", "\xf0\x9f\x99\x82", "\xd9\xa3", "\xe2\x80\x9d", "\x80", "\xff", "\xe6\x97",
        "\xf0\x9f", "\xc2",
        /* letters, digits and punctuation of the certain classes, contractions */
        "\xe3\x81\xae", "\xe3\x82\xa2", "\xe3\x83\xbc", "\xe3\x80\x85", "\xe3\x80\x87", "\xe3\x80\x8c",
        "\xe3\x80\x8d", "\xe3\x80\x81", "\xef\xbc\x91", "\xef\xbc\xa1", "\xcc\x81", "\xe3\x82\x99",
        "\xd0\x96", "\xea\xb0\x80", "\xe2\x80\x99", "'t", "'re", "'ll", "s", "ll", "d", "7", "-",
    };
    tu_rng r = {21};
    size_t cuts = 0;
    for (int c = 0; c < 3000; c++) {
        char text[200];
        size_t n = joined_pieces(&r, piece, sizeof piece / sizeof *piece, 24, text);
        llm_status st = {0};
        llm_ids whole = {0};
        assert_int_equal(llm_tokenizer_encode(gpt2, text, n, &whole, &st), LLM_OK);
        for (size_t i = 1; i < n; i++) {
            if (!llm_tok__cut_ok(text, i, n))
                continue;
            llm_ids two = {0};
            assert_int_equal(llm_tokenizer_encode(gpt2, text, i, &two, &st), LLM_OK);
            assert_int_equal(llm_tokenizer_encode(gpt2, text + i, n - i, &two, &st), LLM_OK);
            char what[64];
            snprintf(what, sizeof what, "cut at %zu of %zu", i, n);
            assert_same_ids(&two, &whole, what, text, n);
            llm_ids_free(&two);
            cuts++;
        }
        llm_ids_free(&whole);
    }
    printf("# %zu cuts checked\n", cuts);
    assert_true(cuts > 1000);
}

/* Text of Japanese, mixed with ASCII letters, digits, apostrophes, spaces and combining
 * marks: encoding it piece by piece, cut at every place llm_tok__cut_ok allows at once,
 * gives the ids of the whole. */
static void test_gpt2_cut_everywhere(void **state)
{
    (void)state;
    NEED_GPT2();
    static const char *const piece[] = {
        "\xe6\x97\xa5", "\xe6\x9c\xac", "\xe8\xaa\x9e", "\xe3\x81\xae", "\xe3\x81\x97", "\xe3\x82\xab",
        "\xe3\x83\xbc", "\xe3\x80\x82", "\xe3\x80\x81", "\xe3\x80\x8c", "\xe3\x80\x8d", "\xef\xbc\x81",
        "\xef\xbc\x91", "\xef\xbc\x92", "\xcc\x81", "\xcc\x88", "\xe3\x82\x99", "'", "'s", "'t", "'ll",
        "a", "b", "s", "t", "1", "2", ".", "\"", " ", "\n", "\xe3\x80\x80", "\xe2\x80\x94", "\xc3\xa9",
    };
    tu_rng r = {77};
    size_t cuts = 0, held = 0;
    for (int c = 0; c < 2000; c++) {
        char text[600];
        size_t n = joined_pieces(&r, piece, sizeof piece / sizeof *piece, 150, text);
        llm_status st = {0};
        llm_ids whole = {0}, parts_ids = {0};
        assert_int_equal(llm_tokenizer_encode(gpt2, text, n, &whole, &st), LLM_OK);
        size_t from = 0;
        for (size_t i = 1; i <= n; i++) {
            if (i < n && !llm_tok__cut_ok(text, i, n))
                continue;
            assert_int_equal(llm_tokenizer_encode(gpt2, text + from, i - from, &parts_ids, &st), LLM_OK);
            held = i - from > held ? i - from : held;
            from = i;
            cuts += i < n;
        }
        assert_same_ids(&parts_ids, &whole, "cut everywhere", text, n);
        llm_ids_free(&whole);
        llm_ids_free(&parts_ids);
    }
    printf("# %zu cuts at once checked; longest piece %zu bytes\n", cuts, held);
    assert_true(cuts > 50000);
}

static void test_gpt2_concurrent_encode(void **state)
{
    (void)state;
    NEED_GPT2();
    tu_rng r = {99};
    size_t n = 0, cap = 200000;
    char *text = malloc(cap);
    while (n + 5000 < cap)
        n += random_text(&r, text + n, 4096);
    llm_ids want = {0};
    llm_status st = {0};
    assert_int_equal(llm_tokenizer_encode(gpt2, text, n, &want, &st), LLM_OK);
    pthread_t th[4];
    conc_arg a[4];
    for (int i = 0; i < 4; i++) {
        a[i] = (conc_arg){text, n, &want, 0};
        assert_int_equal(pthread_create(&th[i], NULL, conc_worker, &a[i]), 0);
    }
    for (int i = 0; i < 4; i++) {
        pthread_join(th[i], NULL);
        assert_true(a[i].ok);
    }
    llm_ids_free(&want);
    free(text);
}

/* ---- storage in a .llmk file ---- */

static void ckpt_roundtrip(llm_tokenizer *t, const char *name)
{
    llm_status st = {0};
    llm_ckpt_writer *w;
    assert_int_equal(llm_ckpt_writer_new(&w, &st), LLM_OK);
    if (llm_tokenizer_save(t, w, &st))
        fail_msg("%s", st.msg);
    char p[600];
    snprintf(p, sizeof p, "%s/%s", dir, name);
    if (llm_ckpt_write(w, p, &st))
        fail_msg("%s", st.msg);
    llm_ckpt_writer_free(w);
    llm_tokenizer *u;
    if (llm_tokenizer_load(&u, p, NULL, &st))
        fail_msg("%s", st.msg);
    assert_string_equal(llm_tokenizer_kind(u), llm_tokenizer_kind(t));
    assert_int_equal(llm_tokenizer_vocab_size(u), llm_tokenizer_vocab_size(t));
    assert_int_equal(llm_tokenizer_eot(u), llm_tokenizer_eot(t));
    for (int id = 0; id < llm_tokenizer_vocab_size(t); id++) {
        const char *a, *b;
        size_t la, lb;
        assert_int_equal(llm_tokenizer_token_bytes(t, (uint32_t)id, &a, &la, &st), LLM_OK);
        assert_int_equal(llm_tokenizer_token_bytes(u, (uint32_t)id, &b, &lb, &st), LLM_OK);
        assert_int_equal(la, lb);
        assert_memory_equal(a, b, la);
    }
    static const char sample[] = "Hello, world! It's 2026 \xe2\x80\x94 caf\xc3\xa9 \xff\xfe  \n\n";
    llm_ids x = {0}, y = {0};
    assert_int_equal(llm_tokenizer_encode(t, sample, sizeof sample - 1, &x, &st), LLM_OK);
    assert_int_equal(llm_tokenizer_encode(u, sample, sizeof sample - 1, &y, &st), LLM_OK);
    assert_int_equal(x.n, y.n);
    assert_memory_equal(x.v, y.v, x.n * sizeof *x.v);
    llm_ids_free(&x);
    llm_ids_free(&y);
    llm_tokenizer_free(u);
}

static void test_ckpt_storage(void **state)
{
    (void)state;
    llm_status st = {0};
    llm_tokenizer *b;
    assert_int_equal(llm_tokenizer_byte(&b, &st), LLM_OK);
    ckpt_roundtrip(b, "byte.llmk");
    llm_tokenizer_free(b);
    char d[600];
    snprintf(d, sizeof d, "%s/tinyck", dir);
    assert_int_equal(mkdir(d, 0755), 0);
    write_tiny(d, tiny_merges, 1, 0);
    llm_tokenizer *t;
    assert_int_equal(llm_tokenizer_gpt2(&t, d, &st), LLM_OK);
    ckpt_roundtrip(t, "tiny.llmk");
    llm_tokenizer_free(t);
    if (gpt2)
        ckpt_roundtrip(gpt2, "gpt2.llmk");
    /* a checkpoint without a tokenizer section, and one with a broken section */
    llm_ckpt_writer *w;
    assert_int_equal(llm_ckpt_writer_new(&w, &st), LLM_OK);
    float x[4] = {0};
    int64_t shape[1] = {4};
    assert_int_equal(llm_ckpt_add(w, "w", LLM_DT_F32, 1, shape, x, 0, &st), LLM_OK);
    char p[600];
    snprintf(p, sizeof p, "%s/none.llmk", dir);
    assert_int_equal(llm_ckpt_write(w, p, &st), LLM_OK);
    llm_ckpt_writer_free(w);
    llm_tokenizer *u = NULL;
    assert_int_equal(llm_tokenizer_load(&u, p, NULL, &st), LLM_EDATA);
    assert_non_null(strstr(st.msg, "no tokenizer"));
    assert_int_equal(llm_ckpt_writer_new(&w, &st), LLM_OK);
    llm_node *sec = llm_node_new_map();
    llm_node_set_str(sec, "kind", "gpt2");
    llm_node_set_int(sec, "vocab_size", 262);
    llm_node_set_int(sec, "eot", 261);
    assert_int_equal(llm_ckpt_set_section(w, "tokenizer", sec, &st), LLM_OK);
    snprintf(p, sizeof p, "%s/broken.llmk", dir);
    assert_int_equal(llm_ckpt_write(w, p, &st), LLM_OK);
    llm_ckpt_writer_free(w);
    assert_int_equal(llm_tokenizer_load(&u, p, NULL, &st), LLM_EDATA);
    assert_non_null(strstr(st.msg, "missing"));
    assert_null(u);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_byte),
        cmocka_unit_test(test_tiny_bpe_merge_order),
        cmocka_unit_test(test_bad_vocabularies),
        cmocka_unit_test(test_gpt2_cases),
        cmocka_unit_test(test_gpt2_shakespeare),
        cmocka_unit_test(test_gpt2_random_roundtrip_and_fast_path),
        cmocka_unit_test(test_gpt2_concurrent_encode),
        cmocka_unit_test(test_cut_every_code_point),
        cmocka_unit_test(test_gpt2_cuts_agree),
        cmocka_unit_test(test_gpt2_cut_everywhere),
        cmocka_unit_test(test_ckpt_storage),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
