/* gguf_write.c — GGUF v3 export of a GPT-2 checkpoint (layout in common/gguf.h). */
#include "common/gguf.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/ckpt.h"
#include "common/model.h"
#include "common/safetensors.h"
#include "common/safetensors_int.h"
#include "common/tokenizer.h"

enum { GT_U32 = 4, GT_I32 = 5, GT_F32 = 6, GT_STR = 8, GT_ARR = 9 };

/* A growable little-endian byte buffer; err sticks on the first failed allocation. */
typedef struct {
    unsigned char *p;
    size_t n, cap;
    int err;
} buf;

static void put(buf *b, const void *x, size_t n)
{
    if (b->err)
        return;
    if (b->n + n > b->cap) {
        size_t cap = b->cap ? b->cap : 4096;
        while (cap < b->n + n)
            cap *= 2;
        unsigned char *np = realloc(b->p, cap);
        if (!np) {
            b->err = 1;
            return;
        }
        b->p = np, b->cap = cap;
    }
    memcpy(b->p + b->n, x, n);
    b->n += n;
}
static void u32(buf *b, uint32_t v) { unsigned char x[4] = {v, v >> 8, v >> 16, v >> 24}; put(b, x, 4); }
static void u64(buf *b, uint64_t v) { u32(b, (uint32_t)v); u32(b, (uint32_t)(v >> 32)); }
static void str(buf *b, const char *s, size_t n) { u64(b, n); put(b, s, n); }
static void key(buf *b, const char *k, uint32_t type) { str(b, k, strlen(k)); u32(b, type); }
static void kv_u32(buf *b, const char *k, uint32_t v) { key(b, k, GT_U32); u32(b, v); }
static void kv_str(buf *b, const char *k, const char *v) { key(b, k, GT_STR); str(b, v, strlen(v)); }
static void kv_f32(buf *b, const char *k, float v)
{
    uint32_t x;
    memcpy(&x, &v, 4);
    key(b, k, GT_F32);
    u32(b, x);
}

static int ggml_type(llm_dtype dt)
{
    switch (dt) {
    case LLM_DT_F32: return 0;
    case LLM_DT_F16: return 1;
    case LLM_DT_Q4_0: return 2;
    case LLM_DT_Q8_0: return 8;
    case LLM_DT_BF16: return 30;
    default: return -1;
    }
}

/* general.file_type ("mostly X"): the first matmul weight that is not f32 (a block
 * format leaves matrices whose rows do not fill its blocks in f32), else the embedding's. */
static llm_dtype weights_dtype(const llm_ckpt *c, int L)
{
    static const char *const mats[] = {"attn.c_attn", "attn.c_proj", "mlp.c_fc", "mlp.c_proj"};
    for (int l = 0; l < L; l++)
        for (int k = 0; k < 4; k++) {
            char name[64];
            snprintf(name, sizeof name, "h.%d.%s.weight", l, mats[k]);
            const llm_tensor *w = llm_ckpt_find(c, name);
            if (w && w->dtype != LLM_DT_F32)
                return w->dtype;
        }
    const llm_tensor *t = llm_ckpt_find(c, "wte");
    return t ? t->dtype : LLM_DT_F32;
}

static uint32_t file_type(const llm_ckpt *c, int L)
{
    llm_dtype dt = weights_dtype(c, L);
    return dt == LLM_DT_F16 ? 1 : dt == LLM_DT_Q4_0 ? 2 : dt == LLM_DT_Q8_0 ? 7 : dt == LLM_DT_BF16 ? 32 : 0;
}

/* The tokenizer keys: tokens spelled through GPT-2's byte table, merges "a b".  The
 * token list has one entry per row of token_embd (nvocab, the model's vocab_size), as
 * llama.cpp requires: embedding rows past the tokenizer's vocabulary get placeholder
 * tokens "[PAD<id>]" of type unused, as llama.cpp's own converter writes them. */
static int tokenizer_kv(buf *b, const llm_ckpt *c, int nvocab, int *nkv, llm_status *st)
{
    llm_tokenizer *t;
    int rc = llm_tokenizer_from_ckpt(&t, c, st);
    if (rc)
        return llm_err_prefix(st, "GGUF needs the tokenizer");
    const int32_t *m;
    int64_t nm;
    if ((rc = llm_hf_tok_merges(c, &m, &nm, st))) {
        llm_tokenizer_free(t);
        return rc;
    }
    int V = llm_tokenizer_vocab_size(t);
    uint32_t eot = llm_tokenizer_eot(t);
    char *sp = malloc(2 * 4096 + 8), *pair = malloc(4 * 4096 + 16);
    if (!sp || !pair) {
        rc = llm_err(st, LLM_ENOMEM, "out of memory");
        goto out;
    }
    if (V > nvocab) {
        rc = llm_err(st, LLM_EDATA, "the tokenizer has %d tokens, the model's vocab_size is %d", V, nvocab);
        goto out;
    }
    kv_str(b, "tokenizer.ggml.model", "gpt2");
    kv_str(b, "tokenizer.ggml.pre", "gpt-2");
    key(b, "tokenizer.ggml.tokens", GT_ARR);
    u32(b, GT_STR);
    u64(b, (uint64_t)nvocab);
    for (int id = 0; id < V && !rc; id++) {
        const char *tb;
        size_t n;
        if (!(rc = llm_tokenizer_token_bytes(t, (uint32_t)id, &tb, &n, st))) {
            if (n > 4096)
                rc = llm_err(st, LLM_EDATA, "token %d is too long", id);
            else
                str(b, sp, llm_gpt2_spell((const unsigned char *)tb, n, sp));
        }
    }
    for (int id = V; id < nvocab; id++)
        str(b, sp, (size_t)snprintf(sp, 32, "[PAD%d]", id));
    key(b, "tokenizer.ggml.token_type", GT_ARR);
    u32(b, GT_I32);
    u64(b, (uint64_t)nvocab);
    for (int id = 0; id < nvocab; id++)   /* 3: control, 1: normal, 5: unused */
        u32(b, id >= V ? 5 : (uint32_t)id == eot ? 3 : 1);
    key(b, "tokenizer.ggml.merges", GT_ARR);
    u32(b, GT_STR);
    u64(b, (uint64_t)nm);
    for (int64_t k = 0; k < nm && !rc; k++) {
        size_t pl = 0;
        for (int side = 0; side < 2 && !rc; side++) {
            const char *tb;
            size_t n;
            if ((rc = llm_tokenizer_token_bytes(t, (uint32_t)m[2 * k + side], &tb, &n, st)))
                break;
            if (n > 4096) {
                rc = llm_err(st, LLM_EDATA, "merge %lld: token too long", (long long)k);
                break;
            }
            pl += llm_gpt2_spell((const unsigned char *)tb, n, pair + pl);
            if (!side)
                pair[pl++] = ' ';
        }
        if (!rc)
            str(b, pair, pl);
    }
    kv_u32(b, "tokenizer.ggml.bos_token_id", eot);
    kv_u32(b, "tokenizer.ggml.eos_token_id", eot);
    *nkv += 7;
out:
    free(sp);
    free(pair);
    llm_tokenizer_free(t);
    return rc;
}

typedef struct {
    char name[64];
    const llm_tensor *t;
    uint64_t rows;       /* leading rows written (wte: V), else shape[0] */
    uint64_t nbytes, offset;
} gt;

int llm_gguf_export(const char *in, const char *out, llm_status *st)
{
    llm_ckpt *c;
    int rc = llm_ckpt_open(&c, in, 0, st);   /* its messages name the file */
    if (rc)
        return rc;
    llm_model_config cfg;
    buf h = {0}, kv = {0};
    gt *T = NULL;
    int nkv = 0, nt = 0;
    const llm_node *ms = llm_ckpt_section(c, "model");
    if (!ms) {
        rc = llm_err(st, LLM_EDATA, "no model section");
        goto out;
    }
    if ((rc = llm_model_config_parse(ms, &cfg, st)))
        goto out;
    int L = cfg.n_layer;
    T = calloc((size_t)(12 * L + 5), sizeof *T);
    if (!T) {
        rc = llm_err(st, LLM_ENOMEM, "out of memory");
        goto out;
    }
    static const char *const lmap[12][2] = {
        {"ln_1.weight", "attn_norm.weight"}, {"ln_1.bias", "attn_norm.bias"},
        {"attn.c_attn.weight", "attn_qkv.weight"}, {"attn.c_attn.bias", "attn_qkv.bias"},
        {"attn.c_proj.weight", "attn_output.weight"}, {"attn.c_proj.bias", "attn_output.bias"},
        {"ln_2.weight", "ffn_norm.weight"}, {"ln_2.bias", "ffn_norm.bias"},
        {"mlp.c_fc.weight", "ffn_up.weight"}, {"mlp.c_fc.bias", "ffn_up.bias"},
        {"mlp.c_proj.weight", "ffn_down.weight"}, {"mlp.c_proj.bias", "ffn_down.bias"}};
    char src[128];
    for (int i = 0; i < 12 * L + 5; i++) {
        gt *g = &T[nt];
        if (i == 0 || i == 12 * L + 4)
            snprintf(src, sizeof src, "wte"), snprintf(g->name, sizeof g->name, i ? "output.weight" : "token_embd.weight");
        else if (i == 1)
            snprintf(src, sizeof src, "wpe"), snprintf(g->name, sizeof g->name, "position_embd.weight");
        else if (i < 2 + 12 * L)
            snprintf(src, sizeof src, "h.%d.%s", (i - 2) / 12, lmap[(i - 2) % 12][0]),
                snprintf(g->name, sizeof g->name, "blk.%d.%s", (i - 2) / 12, lmap[(i - 2) % 12][1]);
        else
            snprintf(src, sizeof src, "ln_f.%s", i == 2 + 12 * L ? "weight" : "bias"),
                snprintf(g->name, sizeof g->name, "output_norm.%s", i == 2 + 12 * L ? "weight" : "bias");
        if (!(g->t = llm_ckpt_find(c, src))) {
            rc = llm_err(st, LLM_EDATA, "checkpoint has no tensor '%s'", src);
            goto out;
        }
        if ((rc = llm_model_check_shape(&cfg, src, g->t, st)))
            goto out;
        if (ggml_type(g->t->dtype) < 0) {
            rc = llm_err(st, LLM_EDATA, "tensor '%s': dtype %s cannot go to GGUF", src,
                         llm_dtype_name(g->t->dtype));
            goto out;
        }
        g->rows = (uint64_t)g->t->shape[0];
        g->nbytes = g->t->nbytes;
        if (!strcmp(src, "wte")) {   /* the real vocabulary only */
            g->rows = (uint64_t)cfg.vocab_size;
            if (llm_dtype_nbytes(g->t->dtype, g->rows * (uint64_t)g->t->shape[1], &g->nbytes)) {
                rc = llm_err(st, LLM_EDATA, "tensor 'wte' (%s): %d rows do not end on a block", llm_dtype_name(g->t->dtype),
                             cfg.vocab_size);
                goto out;
            }
        }
        nt++;
    }
    /* key/values */
    kv_str(&kv, "general.architecture", "gpt2");
    kv_str(&kv, "general.name", "llmkit");
    kv_u32(&kv, "general.file_type", file_type(c, L));
    kv_u32(&kv, "general.alignment", LLM_GGUF_ALIGN);
    kv_u32(&kv, "gpt2.context_length", (uint32_t)cfg.max_seq_len);
    kv_u32(&kv, "gpt2.embedding_length", (uint32_t)cfg.n_embd);
    kv_u32(&kv, "gpt2.feed_forward_length", 4u * (uint32_t)cfg.n_embd);
    kv_u32(&kv, "gpt2.block_count", (uint32_t)L);
    kv_u32(&kv, "gpt2.attention.head_count", (uint32_t)cfg.n_head);
    kv_f32(&kv, "gpt2.attention.layer_norm_epsilon", 1e-5f);
    nkv = 10;
    if ((rc = tokenizer_kv(&kv, c, cfg.vocab_size, &nkv, st)))
        goto out;
    /* header, tensor infos */
    put(&h, "GGUF", 4);
    u32(&h, 3);
    u64(&h, (uint64_t)nt);
    u64(&h, (uint64_t)nkv);
    put(&h, kv.p, kv.n);
    uint64_t off = 0;
    for (int i = 0; i < nt; i++) {
        gt *g = &T[i];
        str(&h, g->name, strlen(g->name));
        u32(&h, (uint32_t)g->t->ndim);
        if (g->t->ndim == 2)
            u64(&h, (uint64_t)g->t->shape[1]);
        u64(&h, g->rows);
        u32(&h, (uint32_t)ggml_type(g->t->dtype));
        u64(&h, off);
        g->offset = off;
        off = (off + g->nbytes + LLM_GGUF_ALIGN - 1) / LLM_GGUF_ALIGN * LLM_GGUF_ALIGN;
    }
    static const unsigned char zeros[LLM_GGUF_ALIGN];
    put(&h, zeros, (LLM_GGUF_ALIGN - h.n % LLM_GGUF_ALIGN) % LLM_GGUF_ALIGN);
    if (h.err || kv.err) {
        rc = llm_err(st, LLM_ENOMEM, "out of memory");
        goto out;
    }
    llm_afile a;
    if ((rc = llm_afile_open(&a, out, 0, st)))
        goto out;
    rc = llm_afile_put(&a, h.p, h.n, st);
    uint64_t at = 0;
    for (int i = 0; i < nt && !rc; i++) {
        rc = llm_afile_put(&a, zeros, T[i].offset - at, st);
        if (!rc)
            rc = llm_afile_put(&a, T[i].t->data, T[i].nbytes, st);
        at = T[i].offset + T[i].nbytes;
    }
    if (rc)
        llm_afile_abort(&a);
    else
        rc = llm_afile_commit(&a, st);
out:
    if (rc == LLM_EDATA)   /* what the checkpoint lacks: named with the file */
        llm_err_prefix(st, "%s", in);
    free(h.p);
    free(kv.p);
    free(T);
    llm_ckpt_close(c);
    return rc;
}
