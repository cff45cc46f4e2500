/* model_io.c — GPT-2 parameters and AdamW moments to and from .llmk checkpoints:
 * one f32 tensor per view, named as the view; moments as "opt.m.NAME", "opt.v.NAME". */
#include "common/model_impl.h"
#include "common/quant.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* n bf16/f16 elements of t from src, widened to f32 (exactly), to dst, a chunk at a time. */
static int load_widened(llm_model *m, const llm_tensor *t, const char *src, float *dst, size_t n,
                        llm_status *st)
{
    enum { CHUNK = 1 << 16 };
    float *f = malloc(CHUNK * sizeof *f);
    if (!f)
        return llm_err(st, LLM_ENOMEM, "out of memory");
    for (size_t i = 0; i < n; i += CHUNK) {
        size_t k = n - i < CHUNK ? n - i : CHUNK;
        if (llm_quant_decode(t->dtype, src + i * 2, f, k, st)) {
            free(f);
            return llm_err_prefix(st, "tensor '%s'", t->name);
        }
        m->be->to_device(m->be, dst + i, f, k * sizeof *f);
    }
    free(f);
    return LLM_OK;
}

/* Tensor name of view v (f32, or bf16/f16 widened to f32) into dst; of its elements
 * only [lo, hi) of the flat layout go to dst (dst indexes the layout from lo): the whole
 * view for parameters, the model's range for moments. */
static int load_one(llm_model *m, const llm_ckpt *ck, const char *name, const llm_param_view *v,
                    float *dst, size_t lo, size_t hi, int required, int *found, llm_status *st)
{
    const llm_tensor *t = llm_ckpt_find(ck, name);
    *found = t != NULL;
    if (!t)
        return required ? llm_err(st, LLM_EDATA, "checkpoint has no tensor '%s'", name) : LLM_OK;
    int es = t->dtype == LLM_DT_F32 ? 4 : t->dtype == LLM_DT_BF16 || t->dtype == LLM_DT_F16 ? 2 : 0;
    if (!es)
        return llm_err(st, LLM_EDATA, "tensor '%s': dtype %s, expected f32 (or bf16, f16)", name,
                       llm_dtype_name(t->dtype));
    int shape_ok = t->ndim == v->ndim && t->nelem == v->numel;
    for (int d = 0; shape_ok && d < v->ndim; d++)
        shape_ok = t->shape[d] == v->shape[d];
    if (!shape_ok) {
        if (v->ndim == 2)
            return llm_err(st, LLM_EDATA, "tensor '%s': shape does not match the model's (%lld,%lld)",
                           name, (long long)v->shape[0], (long long)v->shape[1]);
        return llm_err(st, LLM_EDATA, "tensor '%s': shape does not match the model's (%lld)", name,
                       (long long)v->shape[0]);
    }
    if (!t->data || t->nbytes != v->numel * (size_t)es)
        return llm_err(st, LLM_EDATA, "tensor '%s': no data", name);
    size_t a = v->offset > lo ? v->offset : lo, b = v->offset + v->numel < hi ? v->offset + v->numel : hi;
    if (a >= b)
        return LLM_OK;
    if (es == 4) {   /* only these pages of a mmap'd file are read */
        m->be->to_device(m->be, dst + (a - lo), (const float *)t->data + (a - v->offset),
                         (b - a) * sizeof(float));
        return LLM_OK;
    }
    return load_widened(m, t, (const char *)t->data + (a - v->offset) * 2, dst + (a - lo), b - a, st);
}

int llm_model_load(llm_model *m, const llm_ckpt *ck, int with_optimizer, llm_status *st)
{
    int rc, found;
    char name[LLM_CKPT_NAME_MAX];
    m->lo_stale = 1;
    for (int i = 0; i < m->nviews; i++) {
        const llm_param_view *v = &m->views[i];
        if ((rc = load_one(m, ck, v->name, v, m->params, 0, m->nparams, 1, &found, st)))
            return rc;
    }
    if (!with_optimizer)
        return LLM_OK;
    snprintf(name, sizeof name, "opt.m.%s", m->views[0].name);
    if (!llm_ckpt_find(ck, name))
        return LLM_OK;   /* no optimizer state saved: moments start at zero */
    if ((rc = llm_model__ensure_moments(m, st)))
        return rc;
    for (int i = 0; i < m->nviews; i++) {
        const llm_param_view *v = &m->views[i];
        snprintf(name, sizeof name, "opt.m.%s", v->name);
        if ((rc = load_one(m, ck, name, v, m->m, m->opt_lo, m->opt_hi, 1, &found, st)))
            return rc;
        snprintf(name, sizeof name, "opt.v.%s", v->name);
        if ((rc = load_one(m, ck, name, v, m->v, m->opt_lo, m->opt_hi, 1, &found, st)))
            return rc;
    }
    return LLM_OK;
}

int llm_model_save(llm_model *m, llm_ckpt_writer *w, int with_optimizer, llm_status *st)
{
    int rc;
    const float *p = m->params, *mm = m->m, *vv = m->v;
    /* moments of part of the layout: the saver supplies them whole (after the weights) */
    int sharded = with_optimizer && llm_model__opt_sharded(m);
    if (sharded && !m->opt_saver)
        return llm_err(st, LLM_EUSAGE, "model: the optimizer moments are sharded and no saver "
                       "gathers them");
    if (sharded)
        with_optimizer = 0;
    if (with_optimizer && (rc = llm_model__ensure_moments(m, st)))
        return rc;
    if (!llm_model__is_host(m->be)) {
        size_t n = m->nparams * (with_optimizer ? 3 : 1);
        free(m->host_copy);
        if (!(m->host_copy = malloc(n * sizeof(float))))
            return llm_err(st, LLM_ENOMEM, "model: no memory for a host copy of the parameters");
        m->be->to_host(m->be, m->host_copy, m->params, m->nparams * sizeof(float));
        p = m->host_copy;
        if (with_optimizer) {
            m->be->to_host(m->be, m->host_copy + m->nparams, m->m, m->nparams * sizeof(float));
            m->be->to_host(m->be, m->host_copy + 2 * m->nparams, m->v, m->nparams * sizeof(float));
            mm = m->host_copy + m->nparams;
            vv = m->host_copy + 2 * m->nparams;
        }
    } else {
        mm = m->m;
        vv = m->v;
    }
    char name[LLM_CKPT_NAME_MAX];
    for (int i = 0; i < m->nviews; i++) {
        const llm_param_view *v = &m->views[i];
        if ((rc = llm_ckpt_add(w, v->name, LLM_DT_F32, v->ndim, v->shape, p + v->offset, 0, st)))
            return rc;
    }
    if (sharded)
        return m->opt_saver(m->opt_saver_ctx, w, st);
    if (!with_optimizer)
        return LLM_OK;
    for (int k = 0; k < 2; k++)
        for (int i = 0; i < m->nviews; i++) {
            const llm_param_view *v = &m->views[i];
            snprintf(name, sizeof name, "opt.%c.%s", k ? 'v' : 'm', v->name);
            if ((rc = llm_ckpt_add(w, name, LLM_DT_F32, v->ndim, v->shape,
                                   (k ? vv : mm) + v->offset, 0, st)))
                return rc;
        }
    return LLM_OK;
}
