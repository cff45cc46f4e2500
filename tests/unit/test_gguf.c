/* Unit tests for the GGUF export (common/gguf_write.c): the file is read back with a
 * small independent GGUF reader (header, every key/value, tensor infos, alignment) and
 * the tensors compared with the checkpoint's, for f32 and q8_0 weights.
 * With LLM_WRITE_FIXTURE=PATH set (and optionally LLM_FIXTURE_GPT2=DIR for the GPT-2
 * tokenizer), writes a small GPT-2 checkpoint for the CLI tests and exits. */
#include "tests/unit/testutil.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "common/ckpt.h"
#include "common/gguf.h"
#include "tests/unit/gpt2_fixture.h"

typedef struct {
    const unsigned char *p;
    size_t n, at;
    int bad;
} rd;

static uint64_t get(rd *r, int bytes)
{
    uint64_t v = 0;
    if (r->at + (size_t)bytes > r->n) {
        r->bad = 1;
        return 0;
    }
    for (int i = bytes - 1; i >= 0; i--)
        v = v << 8 | r->p[r->at + (size_t)i];
    r->at += (size_t)bytes;
    return v;
}

static void gstr(rd *r, char *out, size_t cap)
{
    uint64_t n = get(r, 8);
    if (r->bad || n > r->n - r->at) {
        r->bad = 1;
        return;
    }
    if (out)
        snprintf(out, cap, "%.*s", (int)(n < cap ? n : cap - 1), (const char *)r->p + r->at);
    r->at += n;
}

static const int tsize[] = {1, 1, 2, 2, 4, 4, 4, 1, 0, 0, 8, 8, 8};

static void skip_val(rd *r, uint32_t type)
{
    if (type == 8)
        gstr(r, NULL, 0);
    else if (type == 9) {
        uint32_t et = (uint32_t)get(r, 4);
        uint64_t n = get(r, 8);
        for (uint64_t i = 0; i < n && !r->bad; i++)
            skip_val(r, et);
    } else if (type < 13 && tsize[type])
        get(r, tsize[type]);
    else
        r->bad = 1;
}

typedef struct {
    char name[64];
    uint32_t ndim, type;
    uint64_t ne[4], off;
} tinfo;

/* Parse a whole GGUF file; returns the tensor infos and the data start. */
static int parse(const unsigned char *p, size_t n, tinfo *ti, int maxt, size_t *data, uint32_t *vocab_n,
                 uint32_t *ctx)
{
    rd r = {p, n, 0, 0};
    assert_memory_equal(p, "GGUF", 4);
    r.at = 4;
    assert_int_equal(get(&r, 4), 3);
    uint64_t nt = get(&r, 8), nkv = get(&r, 8);
    assert_true(nt <= (uint64_t)maxt);
    for (uint64_t i = 0; i < nkv && !r.bad; i++) {
        char k[128];
        gstr(&r, k, sizeof k);
        uint32_t type = (uint32_t)get(&r, 4);
        if (!strcmp(k, "tokenizer.ggml.tokens")) {
            size_t save = r.at;
            get(&r, 4);
            *vocab_n = (uint32_t)get(&r, 8);
            r.at = save;
        }
        if (!strcmp(k, "gpt2.context_length")) {
            assert_int_equal(type, 4);
            size_t save = r.at;
            *ctx = (uint32_t)get(&r, 4);
            r.at = save;
        }
        skip_val(&r, type);
    }
    for (uint64_t i = 0; i < nt && !r.bad; i++) {
        gstr(&r, ti[i].name, sizeof ti[i].name);
        ti[i].ndim = (uint32_t)get(&r, 4);
        assert_true(ti[i].ndim >= 1 && ti[i].ndim <= 4);
        for (uint32_t d = 0; d < ti[i].ndim; d++)
            ti[i].ne[d] = get(&r, 8);
        ti[i].type = (uint32_t)get(&r, 4);
        ti[i].off = get(&r, 8);
        assert_int_equal(ti[i].off % 32, 0);
    }
    assert_false(r.bad);
    *data = (r.at + 31) / 32 * 32;
    return (int)nt;
}

static const tinfo *tfind(const tinfo *ti, int n, const char *name)
{
    for (int i = 0; i < n; i++)
        if (!strcmp(ti[i].name, name))
            return &ti[i];
    fail_msg("GGUF has no tensor '%s'", name);
    return NULL;
}

static void check_export(int q8)
{
    char *dir = tu_tmpdir(), in[512], out[512];
    snprintf(in, sizeof in, "%s/m.llmk", dir);
    snprintf(out, sizeof out, "%s/m.gguf", dir);
    fx_spec s = {2, 2, 64, 257, 32, q8, 0, 1, NULL};
    fx_write(in, &s, 9);
    llm_status st = {0};
    int rc = llm_gguf_export(in, out, &st);
    if (rc)
        fail_msg("export: %s", st.msg);
    FILE *f = fopen(out, "rb");
    assert_non_null(f);
    fseek(f, 0, SEEK_END);
    size_t n = (size_t)ftell(f);
    rewind(f);
    unsigned char *p = malloc(n);
    assert_int_equal(fread(p, 1, n, f), n);
    fclose(f);
    tinfo ti[64];
    size_t data;
    uint32_t vocab = 0, ctx = 0;
    int nt = parse(p, n, ti, 64, &data, &vocab, &ctx);
    assert_int_equal(nt, 12 * 2 + 5);
    for (int i = 0; i < nt; i++)   /* names are unique */
        for (int j = 0; j < i; j++)
            assert_string_not_equal(ti[i].name, ti[j].name);
    assert_int_equal(vocab, 257);
    assert_int_equal(ctx, 32);
    llm_ckpt *c;
    assert_int_equal(llm_ckpt_open(&c, in, 0, &st), 0);
    const tinfo *te = tfind(ti, nt, "token_embd.weight"), *to = tfind(ti, nt, "output.weight");
    assert_int_equal(te->ne[0], 64);
    assert_int_equal(te->ne[1], 257);
    assert_int_equal(te->type, q8 ? 8 : 0);
    uint64_t wb = q8 ? 257 * 64 / 32 * 34 : 257 * 64 * 4;
    assert_true(data + te->off + wb <= n);
    assert_memory_equal(p + data + te->off, llm_ckpt_find(c, "wte")->data, wb);
    assert_memory_equal(p + data + to->off, llm_ckpt_find(c, "wte")->data, wb);
    const tinfo *qkv = tfind(ti, nt, "blk.1.attn_qkv.weight");
    assert_int_equal(qkv->ne[0], 64);
    assert_int_equal(qkv->ne[1], 192);
    const llm_tensor *w = llm_ckpt_find(c, "h.1.attn.c_attn.weight");
    assert_memory_equal(p + data + qkv->off, w->data, w->nbytes);
    const tinfo *dn = tfind(ti, nt, "blk.0.ffn_down.weight");
    assert_int_equal(dn->ne[0], 256);
    assert_int_equal(dn->ne[1], 64);
    w = llm_ckpt_find(c, "h.0.mlp.c_proj.weight");
    assert_memory_equal(p + data + dn->off, w->data, w->nbytes);
    const tinfo *on = tfind(ti, nt, "output_norm.bias");
    w = llm_ckpt_find(c, "ln_f.bias");
    assert_memory_equal(p + data + on->off, w->data, w->nbytes);
    tfind(ti, nt, "position_embd.weight");
    tfind(ti, nt, "blk.0.attn_norm.weight");
    tfind(ti, nt, "blk.0.ffn_norm.bias");
    tfind(ti, nt, "blk.0.ffn_up.bias");
    tfind(ti, nt, "blk.1.attn_output.weight");
    /* the last tensor ends the file (up to alignment) */
    uint64_t end = 0;
    for (int i = 0; i < nt; i++)
        if (ti[i].off > end)
            end = ti[i].off;
    assert_true(data + end < n);
    llm_ckpt_close(c);
    free(p);
    tu_rmdir(dir);
    free(dir);
}

static void test_f32(void **state) { (void)state; check_export(0); }
static void test_q8(void **state) { (void)state; check_export(1); }

static void test_refusals(void **state)
{
    (void)state;
    char *dir = tu_tmpdir(), in[512], out[512];
    snprintf(in, sizeof in, "%s/m.llmk", dir);
    snprintf(out, sizeof out, "%s/m.gguf", dir);
    llm_status st = {0};
    assert_int_equal(llm_gguf_export("/nonexistent.llmk", out, &st), LLM_ENOINPUT);
    /* a shard lacks tensors */
    fx_spec s = {2, 2, 64, 257, 32, 0, 0, 1, NULL};
    fx_write(in, &s, 9);
    char prefix[600], sh[700];
    snprintf(prefix, sizeof prefix, "%s/s", dir);
    extern int llm_shard_split(const char *, int, int, const int *, const char *, llm_status *);
    assert_int_equal(llm_shard_split(in, 1, 2, NULL, prefix, &st), 0);
    snprintf(sh, sizeof sh, "%s-tp0-pp0.llmk", prefix);
    assert_int_equal(llm_gguf_export(sh, out, &st), LLM_EDATA);
    assert_non_null(strstr(st.msg, "no tensor"));
    /* tensors that do not fit the model section (a wte with fewer rows than vocab_size
     * would have been read past its end), nothing written */
    char bad[600];
    snprintf(bad, sizeof bad, "%s/bad.llmk", dir);
    for (int v = 0; v < FX_SHAPE_VICTIMS; v++)
        for (int mode = 0; mode < 3; mode++) {
            fx_rewrite_shape(in, bad, fx_shape_victims[v], mode);
            assert_int_equal(llm_gguf_export(bad, out, &st), LLM_EDATA);
            if (!strstr(st.msg, fx_shape_victims[v]) || !strstr(st.msg, "does not fit"))
                fail_msg("error does not name '%s': %s", fx_shape_victims[v], st.msg);
            assert_int_not_equal(access(out, F_OK), 0);
        }
    tu_rmdir(dir);
    free(dir);
}

int main(void)
{
    const char *fx = getenv("LLM_WRITE_FIXTURE");
    if (fx) {
        const char *g = getenv("LLM_FIXTURE_GPT2");
        fx_spec s = {2, 4, 64, g ? 50257 : 257, 64, 0, 0, 1, g};
        fx_write(fx, &s, 11);
        return 0;
    }
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_f32),
        cmocka_unit_test(test_q8),
        cmocka_unit_test(test_refusals),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
