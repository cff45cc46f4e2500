/* infer_model.c — the weights table: tensors of an mmap'd checkpoint used in place. */
#include "common/infer.h"
#include "common/env.h"
#include "common/infer_tp.h"
#include "common/quant.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/cpu/quant_kern.h"

int llm_infer_backend_ready(llm_backend *be, llm_status *st)
{
    if (!be->matmul_rows && be->name && strncmp(be->name, "cpu", 3) == 0)
        llm_backend_cpu_infer_init(be, strcmp(be->name, "cpu-ref") == 0);
    if (!be->infer_dtype_ok || !be->embed_rows || !be->matmul_rows || !be->kv_store ||
        !be->attention_rows || !be->layernorm_forward || !be->gelu_forward ||
        !be->residual_forward)
        return llm_err(st, LLM_ENODEV, "device '%s' has no inference kernels yet (use --device cpu)",
                       be->name ? be->name : "?");
    return LLM_OK;
}

/* Point w at t's data, or at the backend's own copy of it (a device backend reads
 * weights from its memory: copied once at load). */
static int place(llm_infer_model *m, llm_wref *w, const char *name, const void *data,
                 uint64_t nbytes, llm_status *st)
{
    w->p = data;
    if (m->dev) {
        void *d = m->be->alloc(m->be, (size_t)nbytes);
        if (!d)
            return llm_err(st, LLM_ENOMEM, "tensor '%s': cannot allocate %llu bytes on device '%s'",
                           name, (unsigned long long)nbytes, m->be->name);
        m->dev[m->n_dev++] = d;
        m->be->to_device(m->be, d, data, (size_t)nbytes);
        w->p = d;
    }
    m->weight_bytes += nbytes;
    return LLM_OK;
}

/* A bf16 or f16 tensor the kernels read as f32 (position embedding, layer norms,
 * biases: what an import of an all-bf16 llm.c file or an f16 Hugging Face model holds)
 * is widened once at load into an owned f32 copy (exact). */
static int bind_widened(llm_infer_model *m, llm_wref *w, const char *name, const llm_tensor *t,
                        llm_status *st)
{
    float *f = malloc((size_t)t->nelem * sizeof *f + 1);
    if (!f)
        return llm_err(st, LLM_ENOMEM, "tensor '%s': cannot allocate %llu floats to widen it", name,
                       (unsigned long long)t->nelem);
    m->wide[m->n_wide++] = f;
    if (llm_quant_decode(t->dtype, t->data, f, t->nelem, st))
        return llm_err_prefix(st, "tensor '%s'", name);
    w->dtype = LLM_DT_F32;
    if (place(m, w, name, f, t->nelem * sizeof *f, st))
        return st->code;
    /* a device backend has its copy now (to_device lets go of the source at return) */
    if (m->dev)
        free(m->wide[--m->n_wide]);
    return LLM_OK;
}

/* Find name with the given shape; f32only: the kernels read it as f32 (bf16 and f16
 * are widened), else any dtype the backend's matmul accepts. */
static int bind(llm_infer_model *m, llm_wref *w, const char *name, int ndim, int64_t d0,
                int64_t d1, int f32only, llm_status *st)
{
    const llm_tensor *t = llm_ckpt_find(m->ck, name);
    if (!t && m->tp_rank > 0 && strstr(name, "c_proj.bias"))
        return LLM_OK;   /* tensor parallel: the row-parallel biases live on rank 0 */
    if (!t)
        return llm_err(st, LLM_EDATA, "tensor '%s': missing", name);
    int64_t want[2] = {d0, d1};
    int okshape = t->ndim == ndim;
    for (int i = 0; okshape && i < ndim; i++)
        okshape = t->shape[i] == want[i];
    if (!okshape) {
        if (ndim == 1)
            return llm_err(st, LLM_EDATA, "tensor '%s': expected shape [%lld]", name, (long long)d0);
        return llm_err(st, LLM_EDATA, "tensor '%s': expected shape [%lld, %lld]", name,
                       (long long)d0, (long long)d1);
    }
    if (f32only && t->data && (t->dtype == LLM_DT_BF16 || t->dtype == LLM_DT_F16))
        return bind_widened(m, w, name, t, st);
    if (f32only && t->dtype != LLM_DT_F32)
        return llm_err(st, LLM_EDATA, "tensor '%s': dtype %s not supported for inference "
                       "(must be f32, bf16 or f16)", name, llm_dtype_name(t->dtype));
    /* not a weight dtype at all (i32, u8, ...): the file is wrong */
    if (t->dtype != LLM_DT_F32 && t->dtype != LLM_DT_BF16 && t->dtype != LLM_DT_F16 &&
        t->dtype != LLM_DT_Q8_0 && t->dtype != LLM_DT_Q4_0)
        return llm_err(st, LLM_EDATA, "tensor '%s': dtype %s is not a weight dtype (f32, bf16, "
                       "f16, q8_0 or q4_0)", name, llm_dtype_name(t->dtype));
    /* a dtype the device cannot compute with: the file is fine, the device is not */
    if (!f32only && !m->be->infer_dtype_ok(m->be, (int)t->dtype))
        return llm_err(st, LLM_ENODEV, "tensor '%s': dtype %s not supported for inference on "
                       "device '%s'", name, llm_dtype_name(t->dtype), m->be->name);
    if ((t->dtype == LLM_DT_Q8_0 || t->dtype == LLM_DT_Q4_0) && t->shape[ndim - 1] % 32)
        return llm_err(st, LLM_EDATA, "tensor '%s': %s rows must be a multiple of 32", name,
                       llm_dtype_name(t->dtype));
    if (!t->data)
        return llm_err(st, LLM_EDATA, "tensor '%s': no data", name);
    if (llm_quant_check_scales(t->dtype, t->data, t->nbytes, st))
        return llm_err_prefix(st, "tensor '%s'", name);
    w->dtype = (int)t->dtype;
    int rdt = m->rep ? llm_qk_repack_dtype((int)t->dtype, m->repack_mode) : w->dtype;
    if (rdt != w->dtype) {
        /* the decode kernels want another layout: a copy in it, made once at load */
        size_t n = llm_qk_matrix_bytes(rdt, d0, (int)d1), al = (n + 63) / 64 * 64;
        void *r = aligned_alloc(64, al ? al : 64);
        if (!r)
            return llm_err(st, LLM_ENOMEM, "tensor '%s': cannot allocate %zu bytes to repack it",
                           name, n);
        llm_qk_repack_q4_0r8(r, t->data, d0, (int)d1);
        llm_ckpt_release(m->ck, t);   /* the copy replaces the mapped pages in memory */
        m->rep[m->n_rep++] = r;
        m->repack_bytes += n;
        m->weight_bytes += n;
        w->p = r;
        w->dtype = rdt;
        return LLM_OK;
    }
    return place(m, w, name, t->data, t->nbytes, st);
}

static int build_table(llm_infer_model *m, llm_status *st)
{
    const llm_model_config *c = &m->cfg;
    int64_t C = c->n_embd, P = m->tp_size;   /* P > 1: this rank's pieces (infer_tp.h) */
    char nm[96];
#define B(w, name, nd, a, b, f) \
    do { if (bind(m, (w), (name), (nd), (a), (b), (f), st)) return st->code; } while (0)
    B(&m->wte, "wte", 2, c->padded_vocab / P, C, 0);
    B(&m->wpe, "wpe", 2, c->max_seq_len, C, 1);
    for (int l = 0; l < c->n_layer; l++) {
        llm_infer_layer *L = &m->layers[l];
#define BL(field, suffix, nd, a, b, f) \
        do { snprintf(nm, sizeof nm, "h.%d.%s", l, suffix); B(&L->field, nm, nd, a, b, f); } while (0)
        BL(ln1_w, "ln_1.weight", 1, C, 0, 1);
        BL(ln1_b, "ln_1.bias", 1, C, 0, 1);
        BL(qkv_w, "attn.c_attn.weight", 2, 3 * C / P, C, 0);
        BL(qkv_b, "attn.c_attn.bias", 1, 3 * C / P, 0, 1);
        BL(attn_proj_w, "attn.c_proj.weight", 2, C, C / P, 0);
        BL(attn_proj_b, "attn.c_proj.bias", 1, C, 0, 1);
        BL(ln2_w, "ln_2.weight", 1, C, 0, 1);
        BL(ln2_b, "ln_2.bias", 1, C, 0, 1);
        BL(fc_w, "mlp.c_fc.weight", 2, 4 * C / P, C, 0);
        BL(fc_b, "mlp.c_fc.bias", 1, 4 * C / P, 0, 1);
        BL(fc_proj_w, "mlp.c_proj.weight", 2, C, 4 * C / P, 0);
        BL(fc_proj_b, "mlp.c_proj.bias", 1, C, 0, 1);
#undef BL
    }
    B(&m->lnf_w, "ln_f.weight", 1, C, 0, 1);
    B(&m->lnf_b, "ln_f.bias", 1, C, 0, 1);
#undef B
    return LLM_OK;
}

int llm_infer_model_open(llm_infer_model **out, const char *path, llm_backend *be, int verify,
                         llm_status *st)
{
    *out = NULL;
    if (llm_infer_backend_ready(be, st))
        return st->code;
    /* checked whatever the backend (llm-infer.1: a value it does not take is refused),
     * though only one that takes repacked q4_0 reads it */
    static const char *const rp[] = {"0", "1", NULL};
    int repack = -1;
    if (llm_env_word("LLM_Q4_REPACK", rp, &repack, st))
        return st->code;
    llm_infer_model *m = calloc(1, sizeof *m);
    if (!m)
        return llm_err(st, LLM_ENOMEM, "out of memory");
    m->be = be;
    if (llm_ckpt_open(&m->ck, path, verify ? 0 : LLM_CKPT_NOVERIFY, st)) {
        path = NULL;   /* its messages name the file already */
        goto fail;
    }
    const llm_node *sec = llm_ckpt_section(m->ck, "model");
    if (!sec) {
        llm_err(st, LLM_EDATA, "no 'model' section");
        goto fail;
    }
    if (llm_model_config_parse(sec, &m->cfg, st))
        goto fail;
    if (strcmp(m->cfg.arch, "gpt2") != 0) {
        llm_err(st, LLM_EDATA, "arch '%s' not supported (gpt2 only)", m->cfg.arch);
        goto fail;
    }
    if (llm_infer_tp_shard(m->ck, &m->cfg, &m->tp_rank, &m->tp_size, st))
        goto fail;
    m->layers = calloc((size_t)m->cfg.n_layer, sizeof *m->layers);
    if (!m->layers) {
        llm_err(st, LLM_ENOMEM, "out of memory");
        goto fail;
    }
    /* the tensors bind() takes: 12 per layer and 4 more; a device backend gets its own
     * copy of each (a CPU backend, also through llm-profile's wrapper, reads the file's
     * pages) */
    size_t nbind = (size_t)m->cfg.n_layer * 12 + 4;
    if (!be->host_memory && !(m->dev = calloc(nbind, sizeof *m->dev))) {
        llm_err(st, LLM_ENOMEM, "out of memory");
        goto fail;
    }
    /* a backend whose decode kernels take q4_0 repacked in groups of 8 rows (the fast CPU
     * one, also through llm-profile's wrapper) may get those weights repacked */
    if (be->infer_dtype_ok && be->infer_dtype_ok(be, LLM_QK_Q4_0R8)) {
        m->repack_mode = repack;
        if (!(m->rep = calloc(nbind, sizeof *m->rep))) {
            llm_err(st, LLM_ENOMEM, "out of memory");
            goto fail;
        }
    }
    if (!(m->wide = calloc(nbind, sizeof *m->wide))) {
        llm_err(st, LLM_ENOMEM, "out of memory");
        goto fail;
    }
    if (build_table(m, st))
        goto fail;
    if (llm_ckpt_section(m->ck, "tokenizer")) {
        if (llm_tokenizer_from_ckpt(&m->tok, m->ck, st))
            goto fail;
        if (llm_tokenizer_vocab_size(m->tok) > m->cfg.vocab_size) {
            llm_err(st, LLM_EDATA, "tokenizer vocabulary %d exceeds the model's %d",
                    llm_tokenizer_vocab_size(m->tok), m->cfg.vocab_size);
            goto fail;
        }
    }
    *out = m;
    return LLM_OK;
fail:
    if (path)
        llm_err_prefix(st, "%s", path);
    llm_infer_model_free(m);
    return st->code;
}

void llm_infer_model_free(llm_infer_model *m)
{
    if (!m)
        return;
    if (m->tok)
        llm_tokenizer_free(m->tok);
    if (m->ck)
        llm_ckpt_close(m->ck);
    for (int i = 0; i < m->n_dev; i++)
        m->be->free(m->be, m->dev[i]);
    free(m->dev);
    for (int i = 0; i < m->n_rep; i++)
        free(m->rep[i]);
    free(m->rep);
    for (int i = 0; i < m->n_wide; i++)
        free(m->wide[i]);
    free(m->wide);
    free(m->layers);
    free(m);
}
