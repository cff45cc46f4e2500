/* profile_lo.c — the profiler's wrappers of the mixed-precision ops (backend.h "mixed
 * precision": cast_lo, the lo GEMMs, layernorm, GELU and cross-entropy, the lse
 * attention) and of xent_fused (either dtype), and the lo weight copies it learns from cast_lo so that a GEMM reading a
 * lo copy is attributed to the fp32 weight's site. */
#include "common/profile_impl.h"

#define NLO ((int)(sizeof ((llm_profile *)0)->lo / sizeof ((llm_profile *)0)->lo[0]))

static void lo_remember(llm_profile *p, const void *dst, const float *src, size_t n)
{
    if (!dst || !src || !n) return;
    int slot = -1;
    for (int i = 0; i < NLO && slot < 0; i++)
        if (p->lo[i].n && p->lo[i].dst == (uintptr_t)dst) slot = i;
    if (slot < 0) {
        slot = p->next_lo;
        p->next_lo = (slot + 1) % NLO;
    }
    p->lo[slot] = (lo_alias){(uintptr_t)dst, (uintptr_t)src, n};
}

/* A buffer [ptr, ptr + bytes) was freed: mappings into it are gone. */
void llm_profile__lo_forget(llm_profile *p, const void *ptr, size_t bytes)
{
    uintptr_t a = (uintptr_t)ptr, b = a + (bytes ? bytes : 1);
    for (int i = 0; i < NLO; i++)
        if (p->lo[i].n && p->lo[i].dst < b && a < p->lo[i].dst + 2 * p->lo[i].n) p->lo[i].n = 0;
}

/* The fp32 element a lo pointer was cast from, or NULL when no cast_lo wrote there. */
static const void *lo_source(const llm_profile *p, const void *w_lo)
{
    uintptr_t a = (uintptr_t)w_lo;
    for (int k = 1; k <= NLO; k++) {   /* newest first */
        const lo_alias *l = &p->lo[(p->next_lo - k + NLO) % NLO];
        if (l->n && a >= l->dst && a < l->dst + 2 * l->n)
            return (const void *)(l->src + (a - l->dst) / 2 * sizeof(float));
    }
    return NULL;
}

/* Site and layer of an op reading lo weights: a registered region of the lo pointer
 * itself, else the region of the fp32 weight it was cast from. */
static void attribute_lo(llm_profile *p, const void *w_lo, int *site, int *layer)
{
    if (w_lo && !llm_profile__region_of(p, w_lo)) {
        const void *src = lo_source(p, w_lo);
        if (src) w_lo = src;
    }
    llm_profile__attribute(p, w_lo, site, layer);
}

static void w_attention_forward_lse(llm_backend *be, void *out, float *lse, const void *qkv,
                                    int B, int T, int C, int NH, int lo)
{
    llm_profile *p = P(be);
    int site, layer;
    llm_profile__attribute(p, NULL, &site, &layer);
    BEGIN(LLM_OP_ATTENTION_FWD_LSE);
    IN(p)->attention_forward_lse(IN(p), out, lse, qkv, B, T, C, NH, lo);
    END(LLM_OP_ATTENTION_FWD_LSE, site, layer, llm_cost_attention_forward_lse(B, T, C, NH));
}

static void w_attention_backward_lse(llm_backend *be, void *dqkv, const void *dout,
                                     const void *qkv, const void *out, const float *lse,
                                     int B, int T, int C, int NH, int lo)
{
    llm_profile *p = P(be);
    int site, layer;
    llm_profile__attribute(p, NULL, &site, &layer);
    BEGIN(LLM_OP_ATTENTION_BWD_LSE);
    IN(p)->attention_backward_lse(IN(p), dqkv, dout, qkv, out, lse, B, T, C, NH, lo);
    END(LLM_OP_ATTENTION_BWD_LSE, site, layer, llm_cost_attention_backward_lse(B, T, C, NH));
}

static void w_cast_lo(llm_backend *be, void *dst, const float *src, size_t n, int lo)
{
    llm_profile *p = P(be);
    if (!p->host_mem) llm_profile__uploads_forget(p, dst, 2 * n);
    /* A cast of parameters (src in a region) is the lo weight copy: remembered for the
     * GEMMs' attribution and counted as such; one tensor shows at its site, the model's
     * whole parameter buffer as "params".  Anything else (the residual gradient rounded
     * for the backward GEMMs) overwrites whatever dst stood for and is attributed like an
     * op without weights. */
    const region *r = src ? llm_profile__region_of(p, src) : NULL;
    int site, layer;
    if (r) {
        lo_remember(p, dst, src, n);
        site = p->site_params;
        layer = -1;
        if ((uintptr_t)src + n * sizeof(float) <= r->start + r->bytes) {
            site = r->site;
            layer = r->layer;
        }
    } else {
        llm_profile__lo_forget(p, dst, 2 * n);
        llm_profile__attribute(p, NULL, &site, &layer);
    }
    BEGIN(LLM_OP_CAST_LO);
    IN(p)->cast_lo(IN(p), dst, src, n, lo);
    END(LLM_OP_CAST_LO, site, layer, llm_cost_cast_lo(n));
}

static void w_matmul_forward_lo(llm_backend *be, void *out, int out_dt, const void *inp,
                                const void *w_lo, int lo, const void *bias, int N, int C, int OC)
{
    llm_profile *p = P(be);
    int site, layer;
    attribute_lo(p, w_lo, &site, &layer);
    site = llm_profile__lm_head_site(p, site);
    BEGIN(LLM_OP_MATMUL_FWD_LO);
    IN(p)->matmul_forward_lo(IN(p), out, out_dt, inp, w_lo, lo, bias, N, C, OC);
    END(LLM_OP_MATMUL_FWD_LO, site, layer,
        llm_cost_matmul_forward_lo(N, C, OC, bias != NULL, out_dt));
}

static void w_matmul_backward_lo(llm_backend *be, void *dinp, int dinp_dt, float *dw,
                                 float *dbias, const void *dout, const void *inp,
                                 const void *w_lo, int lo, int N, int C, int OC)
{
    llm_profile *p = P(be);
    int site, layer;
    attribute_lo(p, w_lo, &site, &layer);
    site = llm_profile__lm_head_site(p, site);
    BEGIN(LLM_OP_MATMUL_BWD_LO);
    IN(p)->matmul_backward_lo(IN(p), dinp, dinp_dt, dw, dbias, dout, inp, w_lo, lo, N, C, OC);
    END(LLM_OP_MATMUL_BWD_LO, site, layer,
        llm_cost_matmul_backward_lo(N, C, OC, dbias != NULL, dinp_dt));
}

static void w_layernorm_forward_lo(llm_backend *be, float *res, void *out, float *mean,
                                   float *rstd, const float *a, const float *b, const float *w,
                                   const float *bias, int N, int C, int lo)
{
    llm_profile *p = P(be);
    int site, layer;
    llm_profile__attribute(p, w, &site, &layer);
    BEGIN(LLM_OP_LAYERNORM_FWD_LO);
    IN(p)->layernorm_forward_lo(IN(p), res, out, mean, rstd, a, b, w, bias, N, C, lo);
    END(LLM_OP_LAYERNORM_FWD_LO, site, layer,
        llm_cost_layernorm_forward_lo(N, C, b != NULL, mean != NULL || rstd != NULL));
}

static void w_matmul_forward_gelu_lo(llm_backend *be, void *out, void *pre, const void *inp,
                                     const void *w_lo, int lo, const void *bias, int N, int C,
                                     int OC)
{
    llm_profile *p = P(be);
    int site, layer;
    attribute_lo(p, w_lo, &site, &layer);
    BEGIN(LLM_OP_MATMUL_FWD_GELU_LO);
    IN(p)->matmul_forward_gelu_lo(IN(p), out, pre, inp, w_lo, lo, bias, N, C, OC);
    END(LLM_OP_MATMUL_FWD_GELU_LO, site, layer,
        llm_cost_matmul_forward_gelu_lo(N, C, OC, bias != NULL));
}
static void w_layernorm_backward_lo(llm_backend *be, float *dinp, void *dinp_lo, float *dw,
                                    float *db, const float *dout, const float *inp,
                                    const float *w, const float *mean, const float *rstd, int N,
                                    int C, int lo)
{
    llm_profile *p = P(be);
    int site, layer;
    llm_profile__attribute(p, w, &site, &layer);
    BEGIN(LLM_OP_LAYERNORM_BWD_LO);
    IN(p)->layernorm_backward_lo(IN(p), dinp, dinp_lo, dw, db, dout, inp, w, mean, rstd, N, C, lo);
    END(LLM_OP_LAYERNORM_BWD_LO, site, layer, llm_cost_layernorm_backward_lo(N, C));
}

static void w_matmul_backward_dgelu_lo(llm_backend *be, void *dinp, float *dw, float *dbias,
                                       const void *dout, const void *inp, const void *pre,
                                       const void *w_lo, int lo, int N, int C, int OC)
{
    llm_profile *p = P(be);
    int site, layer;
    attribute_lo(p, w_lo, &site, &layer);
    BEGIN(LLM_OP_MATMUL_BWD_DGELU_LO);
    IN(p)->matmul_backward_dgelu_lo(IN(p), dinp, dw, dbias, dout, inp, pre, w_lo, lo, N, C, OC);
    END(LLM_OP_MATMUL_BWD_DGELU_LO, site, layer,
        llm_cost_matmul_backward_dgelu_lo(N, C, OC, dbias != NULL));
}
static void w_gelu_forward_lo(llm_backend *be, void *out, const void *inp, size_t n, int lo)
{
    llm_profile *p = P(be);
    int site, layer;
    llm_profile__attribute(p, NULL, &site, &layer);
    BEGIN(LLM_OP_GELU_FWD_LO);
    IN(p)->gelu_forward_lo(IN(p), out, inp, n, lo);
    END(LLM_OP_GELU_FWD_LO, site, layer, llm_cost_gelu_forward_lo(n));
}

static void w_gelu_backward_lo(llm_backend *be, void *dinp, const void *inp, const void *dout,
                               size_t n, int lo)
{
    llm_profile *p = P(be);
    int site, layer;
    llm_profile__attribute(p, NULL, &site, &layer);
    BEGIN(LLM_OP_GELU_BWD_LO);
    IN(p)->gelu_backward_lo(IN(p), dinp, inp, dout, n, lo);
    END(LLM_OP_GELU_BWD_LO, site, layer, llm_cost_gelu_backward_lo(n));
}

static void w_xent_forward_lo(llm_backend *be, float *losses, float *lse, const void *logits,
                              const int32_t *targets, int N, int V, int Vp, int lo)
{
    llm_profile *p = P(be);
    BEGIN(LLM_OP_XENT_FWD_LO);
    IN(p)->xent_forward_lo(IN(p), losses, lse, logits, targets, N, V, Vp, lo);
    END(LLM_OP_XENT_FWD_LO, p->site_none, -1, llm_cost_xent_forward_lo(N, V, Vp));
}

static void w_xent_backward_lo(llm_backend *be, void *dlogits, const void *logits,
                               const float *lse, const int32_t *targets, float dloss, int N,
                               int V, int Vp, int lo)
{
    llm_profile *p = P(be);
    BEGIN(LLM_OP_XENT_BWD_LO);
    IN(p)->xent_backward_lo(IN(p), dlogits, logits, lse, targets, dloss, N, V, Vp, lo);
    END(LLM_OP_XENT_BWD_LO, p->site_none, -1, llm_cost_xent_backward_lo(N, V, Vp));
}

/* adamw_segs: an optimizer op; the lo weight copy it writes is remembered as cast_lo's
 * (one alias over the segments' span of p: they are views of the same buffer). */
static void w_adamw_segs(llm_backend *be, float *par, void *p_lo, const float *grad, float *m,
                         float *v, size_t mv_base, const llm_adamw_seg *segs, int nseg,
                         float lr, float b1, float b2, float eps, int t, float grad_scale,
                         int lo)
{
    llm_profile *p = P(be);
    size_t n = 0, a = SIZE_MAX, b = 0;
    for (int i = 0; i < nseg; i++) {
        if (!segs[i].n) continue;
        n += segs[i].n;
        if (segs[i].off < a) a = segs[i].off;
        if (segs[i].off + segs[i].n > b) b = segs[i].off + segs[i].n;
    }
    if (p_lo && n) {
        uint16_t *dst = (uint16_t *)p_lo + a;
        if (!p->host_mem) llm_profile__uploads_forget(p, dst, 2 * (b - a));
        if (llm_profile__region_of(p, par + a)) lo_remember(p, dst, par + a, b - a);
        else llm_profile__lo_forget(p, dst, 2 * (b - a));
    }
    BEGIN(LLM_OP_ADAMW_SEGS);
    IN(p)->adamw_segs(IN(p), par, p_lo, grad, m, v, mv_base, segs, nseg, lr, b1, b2, eps, t,
                      grad_scale, lo);
    END(LLM_OP_ADAMW_SEGS, p->site_opt, -1, llm_cost_adamw_segs(n, p_lo != NULL));
}

static void w_xent_fused(llm_backend *be, float *losses, void *logits, const int32_t *targets,
                         float dloss, int N, int V, int Vp, int lo)
{
    llm_profile *p = P(be);
    BEGIN(LLM_OP_XENT_FUSED);
    IN(p)->xent_fused(IN(p), losses, logits, targets, dloss, N, V, Vp, lo);
    END(LLM_OP_XENT_FUSED, p->site_none, -1, llm_cost_xent_fused(N, V, Vp, lo));
}


size_t llm_profile_mem_lo(const llm_profile *p)
{
    size_t total = 0;
    for (int i = 0; i < NLO; i++) {
        if (!p->lo[i].n) continue;
        size_t b = llm_profile_blocks_size(p, (const void *)p->lo[i].dst);
        total += b ? b : 2 * p->lo[i].n;
    }
    return total;
}

void llm_profile__fill_lo(llm_profile *p, llm_backend *be)
{
    const llm_backend *in = p->inner;
    be->cast_lo = in->cast_lo ? w_cast_lo : NULL;
    be->matmul_forward_lo = in->matmul_forward_lo ? w_matmul_forward_lo : NULL;
    be->matmul_backward_lo = in->matmul_backward_lo ? w_matmul_backward_lo : NULL;
    be->matmul_forward_gelu_lo = in->matmul_forward_gelu_lo ? w_matmul_forward_gelu_lo : NULL;
    be->matmul_backward_dgelu_lo = in->matmul_backward_dgelu_lo ? w_matmul_backward_dgelu_lo : NULL;
    be->layernorm_forward_lo = in->layernorm_forward_lo ? w_layernorm_forward_lo : NULL;
    be->layernorm_backward_lo = in->layernorm_backward_lo ? w_layernorm_backward_lo : NULL;
    be->gelu_forward_lo = in->gelu_forward_lo ? w_gelu_forward_lo : NULL;
    be->gelu_backward_lo = in->gelu_backward_lo ? w_gelu_backward_lo : NULL;
    be->attention_forward_lse = in->attention_forward_lse ? w_attention_forward_lse : NULL;
    be->attention_backward_lse = in->attention_backward_lse ? w_attention_backward_lse : NULL;
    be->xent_forward_lo = in->xent_forward_lo ? w_xent_forward_lo : NULL;
    be->xent_backward_lo = in->xent_backward_lo ? w_xent_backward_lo : NULL;
    be->adamw_segs = in->adamw_segs ? w_adamw_segs : NULL;
    be->xent_fused = in->xent_fused ? w_xent_fused : NULL;
}
