/* Unit tests for safetensors (common/safetensors_*.c): the hostile-input reader refuses
 * every kind of malformed header with LLM_EDATA and no crash; the writer's files read
 * back; llmk -> Hugging Face directory -> llmk is bit-exact (byte and GPT-2 tokenizers);
 * the exported Conv1D weights are the transposes. */
#include "tests/unit/testutil.h"

#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "common/safetensors.h"
#include "common/safetensors_int.h"
#include "common/tokenizer.h"
#include "tests/unit/gpt2_fixture.h"

/* A file: 8-byte length, header text, then dlen data bytes. */
static unsigned char *mk(const char *hdr, size_t dlen, size_t *n)
{
    size_t hl = strlen(hdr);
    unsigned char *b = calloc(1, 8 + hl + dlen + 1);
    for (int i = 0; i < 8; i++)
        b[i] = (unsigned char)((uint64_t)hl >> (8 * i));
    memcpy(b + 8, hdr, hl);
    *n = 8 + hl + dlen;
    return b;
}

static int try_open(const char *hdr, size_t dlen, char *msg, size_t cap)
{
    size_t n;
    unsigned char *b = mk(hdr, dlen, &n);
    llm_st_file *f = NULL;
    llm_status st = {0};
    int rc = llm_st_open_mem(&f, b, n, &st);
    snprintf(msg, cap, "%s", st.msg);
    llm_st_close(f);
    free(b);
    return rc;
}

static void test_hostile(void **state)
{
    (void)state;
    char m[LLM_MSG_MAX];
    static const struct { const char *hdr; size_t dlen; const char *why; } bad[] = {
        {"[]", 0, "start with"},
        {"{\"a\":1}", 0, "exactly"},
        {"{\"a\":", 0, "JSON"},
        {"{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]},\"a\":{}}", 8, "JSON"},
        {"{\"a\":{\"dtype\":\"F33\",\"shape\":[2],\"data_offsets\":[0,8]}}", 8, "dtype"},
        {"{\"a\":{\"dtype\":\"F32\",\"shape\":[-2],\"data_offsets\":[0,8]}}", 8, "shape"},
        {"{\"a\":{\"dtype\":\"F32\",\"shape\":[2.5],\"data_offsets\":[0,8]}}", 8, "shape"},
        {"{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]}}", 4, "beyond"},
        {"{\"a\":{\"dtype\":\"F32\",\"shape\":[3],\"data_offsets\":[0,8]}}", 8, "bytes"},
        {"{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[8,0]}}", 8, "begin"},
        {"{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[4,12]}}", 12, "gap"},
        {"{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]},"
         "\"b\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[4,12]}}", 12, "gap or overlap"},
        {"{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]}}", 9, "after the last"},
        {"{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8],\"x\":1}}", 8, "exactly"},
        {"{\"a\":{\"dtype\":\"F32\",\"shape\":[2]}}", 8, "exactly"},
        {"{\"__metadata__\":{\"k\":1}}", 0, "metadata"},
        {"{\"a\":{\"dtype\":\"F32\",\"shape\":[4294967296,4294967296,4294967296],\"data_offsets\":[0,8]}}", 8,
         "overflow"},
        {"{\"a\":{\"dtype\":\"F32\",\"shape\":[1,1,1,1,1,1,1,1,1],\"data_offsets\":[0,4]}}", 4, "dimensions"},
        {"{\"a\\u0000b\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]}}", 8, "JSON"},
        {"{\"a\\u0001\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]}}", 8, "control"},
        {"{} x", 0, "JSON"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
        int rc = try_open(bad[i].hdr, bad[i].dlen, m, sizeof m);
        if (rc != LLM_EDATA || !strstr(m, bad[i].why))
            fail_msg("case %zu: rc %d, message '%s' (want '%s')", i, rc, m, bad[i].why);
    }
    /* a valid file, with spaces padding the header, a scalar and an empty tensor */
    assert_int_equal(try_open("{\"__metadata__\":{\"format\":\"pt\"},\"b\":{\"dtype\":\"BF16\",\"shape\":[],"
                              "\"data_offsets\":[8,10]},\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]},"
                              "\"e\":{\"dtype\":\"F32\",\"shape\":[0,3],\"data_offsets\":[10,10]}}   ",
                              10, m, sizeof m), 0);
    /* lengths: too short, header length past the end, over the cap */
    llm_st_file *f;
    llm_status st = {0};
    unsigned char b[16] = {0};
    assert_int_equal(llm_st_open_mem(&f, b, 4, &st), LLM_EDATA);
    b[0] = 200;
    assert_int_equal(llm_st_open_mem(&f, b, 16, &st), LLM_EDATA);
    memset(b, 0xff, 8);
    assert_int_equal(llm_st_open_mem(&f, b, 16, &st), LLM_EDATA);
    /* random corruption of a valid file never crashes */
    size_t n;
    unsigned char *good = mk("{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]},"
                             "\"b\":{\"dtype\":\"F16\",\"shape\":[2,2],\"data_offsets\":[8,16]}}", 16, &n);
    tu_rng r = {5};
    for (int it = 0; it < 3000; it++) {
        unsigned char *c = malloc(n);
        memcpy(c, good, n);
        for (int k = 0; k < 1 + it % 4; k++)
            c[tu_next(&r) % n] = (unsigned char)tu_next(&r);
        size_t len = it % 7 == 0 ? (size_t)(tu_next(&r) % n) : n;
        if (llm_st_open_mem(&f, c, len, &st) == 0)
            llm_st_close(f);
        free(c);
    }
    free(good);
}

static void roundtrip(const char *gpt2)
{
    char *dir = tu_tmpdir(), in[512], hf[512], back[512], path[600];
    snprintf(in, sizeof in, "%s/m.llmk", dir);
    snprintf(hf, sizeof hf, "%s/hf", dir);
    snprintf(back, sizeof back, "%s/back.llmk", dir);
    fx_spec s = {2, 2, 64, gpt2 ? 50257 : 257, 32, 0, 0, 1, gpt2};
    fx_write(in, &s, 3);
    llm_status st = {0};
    int rc = llm_hf_export(in, hf, NULL, 0, &st);
    if (rc)
        fail_msg("export: %s", st.msg);
    llm_st_file *f;
    snprintf(path, sizeof path, "%s/model.safetensors", hf);
    assert_int_equal(llm_st_open(&f, path, &st), 0);
    assert_int_equal(llm_st_count(f), 2 + 12 * 2 + 2);
    const llm_st_tensor *t = llm_st_find(f, "transformer.h.1.mlp.c_fc.weight");
    assert_non_null(t);
    assert_int_equal(t->shape[0], 64);
    assert_int_equal(t->shape[1], 256);
    assert_non_null(t = llm_st_find(f, "transformer.wte.weight"));
    assert_int_equal(t->shape[0], s.vocab);
    llm_ckpt *c;
    assert_int_equal(llm_ckpt_open(&c, in, 0, &st), 0);
    const float *W = llm_ckpt_find(c, "h.1.mlp.c_fc.weight")->data;   /* (256, 64) */
    const float *H = llm_st_find(f, "transformer.h.1.mlp.c_fc.weight")->data;   /* (64, 256) */
    for (int i = 0; i < 256; i += 37)
        for (int k = 0; k < 64; k += 5)
            assert_memory_equal(&H[k * 256 + i], &W[i * 64 + k], 4);
    llm_ckpt_close(c);
    llm_st_close(f);
    rc = llm_hf_import(hf, back, &st);
    if (rc)
        fail_msg("import: %s", st.msg);
    fx_assert_same2(in, back, 0);
    tu_rmdir(dir);
    free(dir);
}

/* A checkpoint whose tensors do not fit its model section is refused by the export,
 * naming the tensor, with nothing written (fx_rewrite_shape: each shape in turn). */
static void test_export_shapes(void **state)
{
    (void)state;
    char *dir = tu_tmpdir(), in[512], bad[512], hf[512], path[600];
    snprintf(in, sizeof in, "%s/m.llmk", dir);
    snprintf(bad, sizeof bad, "%s/bad.llmk", dir);
    fx_spec s = {2, 2, 64, 257, 32, 0, 0, 1, 0};
    fx_write(in, &s, 3);
    llm_status st = {0};
    for (int v = 0; v < FX_SHAPE_VICTIMS; v++)
        for (int mode = 0; mode < 3; mode++) {
            fx_rewrite_shape(in, bad, fx_shape_victims[v], mode);
            snprintf(hf, sizeof hf, "%s/hf%d_%d", dir, v, mode);
            assert_int_equal(llm_hf_export(bad, hf, NULL, 0, &st), LLM_EDATA);
            if (!strstr(st.msg, fx_shape_victims[v]) || !strstr(st.msg, "does not fit"))
                fail_msg("error does not name '%s': %s", fx_shape_victims[v], st.msg);
            snprintf(path, sizeof path, "%s/model.safetensors", hf);
            assert_int_not_equal(access(path, F_OK), 0);
        }
    tu_rmdir(dir);
    free(dir);
}

/* vocab.json in dir: the 256 GPT-2-spelled bytes at ids first..first+255, and
 * "<|endoftext|>" at eot when eot >= 0; merges.txt with no merges. */
static void write_vocab(const char *dir, int first, int eot)
{
    json_t *v = json_object();
    for (int b = 0; b < 256; b++) {
        unsigned cp = llm_gpt2_byte_char((unsigned char)b);
        char k[4] = {0};
        if (cp < 0x80) {
            k[0] = (char)cp;
        } else {
            k[0] = (char)(0xC0 | cp >> 6);
            k[1] = (char)(0x80 | (cp & 0x3F));
        }
        json_object_set_new(v, k, json_integer(first + b));
    }
    if (eot >= 0)
        json_object_set_new(v, "<|endoftext|>", json_integer(eot));
    char p[256];
    snprintf(p, sizeof p, "%s/vocab.json", dir);
    assert_int_equal(json_dump_file(v, p, 0), 0);
    json_decref(v);
    snprintf(p, sizeof p, "%s/merges.txt", dir);
    FILE *f = fopen(p, "w");
    assert_non_null(f);
    fputs("#version: 0.2\n", f);
    fclose(f);
}

/* A GPT-2 style vocabulary without "<|endoftext|>" is refused by name (its end-of-text id
 * used to be guessed as the last id, an ordinary token then); with it, its id is the
 * end-of-text id. */
static void test_tok_needs_eot(void **state)
{
    (void)state;
    char dir[] = "/tmp/llmkit-st-eot.XXXXXX";
    assert_non_null(mkdtemp(dir));
    llm_tokenizer *t = NULL;
    llm_status st = {0};
    write_vocab(dir, 0, -1);
    assert_int_equal(llm_hf_tok_read(dir, 257, &t, &st), LLM_EDATA);
    if (!strstr(st.msg, "<|endoftext|>"))
        fail_msg("message: %s", st.msg);
    assert_null(t);
    write_vocab(dir, 1, 0);
    int rc = llm_hf_tok_read(dir, 257, &t, &st);
    if (rc)
        fail_msg("%s", st.msg);
    assert_non_null(t);
    assert_int_equal(llm_tokenizer_eot(t), 0);
    llm_tokenizer_free(t);
    char p[256];
    snprintf(p, sizeof p, "%s/vocab.json", dir);
    unlink(p);
    snprintf(p, sizeof p, "%s/merges.txt", dir);
    unlink(p);
    rmdir(dir);
}

static void test_roundtrip_byte(void **state) { (void)state; roundtrip(NULL); }

static void test_roundtrip_gpt2(void **state)
{
    (void)state;
    const char *d = tu_data("gpt2/encoder.json");
    if (!d) {
        skip();
        return;
    }
    char dir[4096];
    snprintf(dir, sizeof dir, "%s", d);
    *strrchr(dir, '/') = 0;
    roundtrip(dir);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_hostile),
        cmocka_unit_test(test_tok_needs_eot),
        cmocka_unit_test(test_roundtrip_byte),
        cmocka_unit_test(test_export_shapes),
        cmocka_unit_test(test_roundtrip_gpt2),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
