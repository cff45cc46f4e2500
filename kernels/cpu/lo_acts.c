/* lo_acts.c — the lo-activation ops of both CPU backends ("cpu" and "cpu-ref"):
 * matmul_forward_lo, matmul_backward_lo, matmul_forward_gelu_lo,
 * matmul_backward_dgelu_lo, layernorm_forward_lo, layernorm_backward_lo, gelu_forward_lo,
 * gelu_backward_lo, xent_forward_lo, xent_backward_lo, attention_forward_lse and
 * attention_backward_lse (backend.h, "mixed precision"); and xent_fused on fp32 or lo
 * logits.
 *
 * Each widens its lo inputs into fp32 work space (exact: every lo value is an fp32
 * value), runs the backend's own fp32 op on them (be->matmul_forward, ... : the
 * reference loops for cpu-ref, the fast kernels for cpu) and rounds the lo outputs once.
 * So on the CPU a lo op means exactly "the fp32 op on lo values, the result rounded",
 * which is the contract, and its kernels are the ones already tested against the
 * references.  The attention ops call the backend's lse kernels on widened q|k|v (they
 * round their operands to lo, a no-op on lo values).
 *
 * Work space: a grow-only buffer of the context (llm_cpu_lo_scratch) separate from the
 * one the fp32 kernels use.  Row-independent ops (and the GEMMs, whose weight gradient
 * sums chunk by chunk in fp32 as one GEMM would) go in chunks of rows of at most
 * ctx->lo_chunk floats, so the (N,Vp) logits never need an fp32 copy.  Ops cannot fail:
 * when even one row's work space cannot be had, the outputs are set to NaN (the loss
 * then reports the failure as a non-finite value). */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/cpu/cpu_ops.h"
#include "kernels/cpu/mixed.h"

/* Work space for `fixed` floats plus *rows rows of `per_row` floats, *rows at most
 * lo_chunk / per_row (>= 1) and N; fewer rows when memory is short; NULL when not even
 * one row fits. */
static float *take(llm_backend *be, size_t fixed, size_t per_row, int N, int *rows)
{
    size_t lim = ((const llm_cpu_ctx *)be->ctx)->lo_chunk;
    size_t r = per_row ? lim / per_row : (size_t)N;
    if (r < 1)
        r = 1;
    if (r > (size_t)N)
        r = (size_t)N;
    for (;;) {
        float *p = llm_cpu_lo_scratch(be, fixed + r * per_row + 1);
        if (p || r == 1) {
            *rows = (int)r;
            return p;
        }
        r /= 2;
    }
}

/* n lo values of dtype dt (LLM_DT_F32: fp32 stored) set to NaN. */
static void nan_fill(void *p, int dt, size_t n)
{
    if (dt == LLM_QK_F32) {
        float *f = p;
        for (size_t i = 0; i < n; i++)
            f[i] = NAN;
    } else {
        uint16_t *h = p, v = llm_lo_bits(NAN, dt);
        for (size_t i = 0; i < n; i++)
            h[i] = v;
    }
}

/* Where a chunk's fp32 result goes: straight into an fp32 output's rows (row r0 of
 * width w), or the work space y, rounded into the lo output afterwards (lo_out_rows). */
static float *f32_rows(void *out, int dt, float *y, size_t r0, size_t w)
{
    return dt == LLM_QK_F32 ? (float *)out + r0 * w : y;
}

static void lo_out_rows(llm_backend *be, void *out, int dt, const float *y, size_t r0, size_t w,
                        size_t rows)
{
    if (dt != LLM_QK_F32)
        llm_fast_cast_lo(be, (uint16_t *)out + r0 * w, y, rows * w, dt);
}

/* matmul_forward_lo, and with pre non-NULL matmul_forward_gelu_lo (out_dt lo): the fp32
 * sum rounded into pre, its GELU (the backend's gelu_forward on the fp32 sum) into out */
static void mm_forward_lo(llm_backend *be, void *out, int out_dt, void *pre, const void *inp,
                          const void *w_lo, int lo, const void *bias, int N, int C, int OC)
{
    if (N <= 0 || OC <= 0)
        return;
    size_t Cz = (size_t)(C > 0 ? C : 0), wn = (size_t)OC * Cz;
    int R;
    /* fixed: the widened weights and bias; per row: an input row and (lo out) an output
     * row */
    float *w = take(be, wn + (size_t)OC, Cz + (out_dt == LLM_QK_F32 ? 0 : (size_t)OC), N, &R);
    if (!w) {
        nan_fill(out, out_dt, (size_t)N * OC);
        if (pre)
            nan_fill(pre, lo, (size_t)N * OC);
        return;
    }
    float *b = w + wn, *x = b + OC, *y = x + (size_t)R * Cz;
    llm_cpu_lo_widen(be, w, w_lo, wn, lo);
    if (bias && out_dt != LLM_QK_F32)
        llm_cpu_lo_widen(be, b, bias, (size_t)OC, lo);
    else if (bias)
        memcpy(b, bias, (size_t)OC * sizeof(float));
    for (int r0 = 0; r0 < N; r0 += R) {
        int rows = N - r0 < R ? N - r0 : R;
        llm_cpu_lo_widen(be, x, (const uint16_t *)inp + (size_t)r0 * Cz, (size_t)rows * Cz, lo);
        be->matmul_forward(be, f32_rows(out, out_dt, y, (size_t)r0, (size_t)OC), x, w,
                           bias ? b : NULL, rows, C, OC);
        if (pre) {
            size_t k = (size_t)rows * OC;
            llm_fast_cast_lo(be, (uint16_t *)pre + (size_t)r0 * OC, y, k, lo);
            be->gelu_forward(be, y, y, k);
        }
        lo_out_rows(be, out, out_dt, y, (size_t)r0, (size_t)OC, (size_t)rows);
    }
}

void llm_cpu_matmul_forward_lo(llm_backend *be, void *out, int out_dt, const void *inp,
                               const void *w_lo, int lo, const void *bias, int N, int C, int OC)
{
    mm_forward_lo(be, out, out_dt, NULL, inp, w_lo, lo, bias, N, C, OC);
}

void llm_cpu_matmul_forward_gelu_lo(llm_backend *be, void *out, void *pre, const void *inp,
                                    const void *w_lo, int lo, const void *bias, int N, int C,
                                    int OC)
{
    mm_forward_lo(be, out, lo, pre, inp, w_lo, lo, bias, N, C, OC);
}

/* matmul_backward_lo, and with pre non-NULL matmul_backward_dgelu_lo (dinp_dt lo): the
 * fp32 dinp goes through the backend's gelu_backward (on pre's values) before the
 * rounding */
static void mm_backward_lo(llm_backend *be, void *dinp, int dinp_dt, float *dw, float *dbias,
                           const void *dout, const void *inp, const void *pre,
                           const void *w_lo, int lo, int N, int C, int OC)
{
    if (N <= 0)
        return;
    size_t Cz = (size_t)(C > 0 ? C : 0), wn = (size_t)(OC > 0 ? OC : 0) * Cz;
    if (OC <= 0) {   /* an empty sum: dinp is overwritten with zeros (of either dtype) */
        memset(dinp, 0, (size_t)N * Cz * (dinp_dt == LLM_QK_F32 ? 4 : 2));
        return;
    }
    int R;
    /* per row: a dout row, an input row (then pre's row), (lo dinp) a dinp row and (with
     * pre) the GELU backward's row */
    float *w = take(be, wn,
                    (size_t)OC + Cz + (dinp_dt == LLM_QK_F32 ? 0 : Cz) + (pre ? Cz : 0), N, &R);
    if (!w) {
        nan_fill(dinp, dinp_dt, (size_t)N * Cz);
        nan_fill(dw, LLM_QK_F32, wn);
        return;
    }
    float *d = w + wn, *x = d + (size_t)R * OC, *g = x + (size_t)R * Cz, *t = g + (size_t)R * Cz;
    llm_cpu_lo_widen(be, w, w_lo, wn, lo);
    /* dinp rows are independent; dw and dbias sum over rows, each chunk adding its part
     * (fp32 accumulation, as one GEMM over all rows would) */
    for (int r0 = 0; r0 < N; r0 += R) {
        int rows = N - r0 < R ? N - r0 : R;
        size_t k = (size_t)rows * Cz;
        llm_cpu_lo_widen(be, d, (const uint16_t *)dout + (size_t)r0 * OC, (size_t)rows * OC, lo);
        llm_cpu_lo_widen(be, x, (const uint16_t *)inp + (size_t)r0 * Cz, k, lo);
        float *gi = f32_rows(dinp, dinp_dt, g, (size_t)r0, Cz);
        memset(gi, 0, k * sizeof(float));   /* the fp32 op accumulates */
        be->matmul_backward(be, gi, dw, dbias, d, x, w, rows, C, OC);
        if (pre) {   /* t = 0 + gelu'(pre) g; the input rows are no longer needed */
            llm_cpu_lo_widen(be, x, (const uint16_t *)pre + (size_t)r0 * Cz, k, lo);
            memset(t, 0, k * sizeof(float));
            be->gelu_backward(be, t, x, g, k);
            gi = t;
        }
        lo_out_rows(be, dinp, dinp_dt, gi, (size_t)r0, Cz, (size_t)rows);
    }
}

void llm_cpu_matmul_backward_lo(llm_backend *be, void *dinp, int dinp_dt, float *dw,
                                float *dbias, const void *dout, const void *inp,
                                const void *w_lo, int lo, int N, int C, int OC)
{
    mm_backward_lo(be, dinp, dinp_dt, dw, dbias, dout, inp, NULL, w_lo, lo, N, C, OC);
}

void llm_cpu_matmul_backward_dgelu_lo(llm_backend *be, void *dinp, float *dw, float *dbias,
                                      const void *dout, const void *inp, const void *pre,
                                      const void *w_lo, int lo, int N, int C, int OC)
{
    mm_backward_lo(be, dinp, lo, dw, dbias, dout, inp, pre, w_lo, lo, N, C, OC);
}

void llm_cpu_layernorm_forward_lo(llm_backend *be, float *res, void *out, float *mean,
                                  float *rstd, const float *a, const float *b, const float *w,
                                  const float *bias, int N, int C, int lo)
{
    if (N <= 0 || C <= 0)
        return;
    int R;
    float *y = take(be, 0, (size_t)C, N, &R);
    if (!y) {
        nan_fill(out, lo, (size_t)N * C);
        return;
    }
    /* layernorm rows are independent: the fp32 op chunk by chunk, then the rounding */
    for (int r0 = 0; r0 < N; r0 += R) {
        int rows = N - r0 < R ? N - r0 : R;
        size_t o = (size_t)r0 * C;
        float *mu = mean ? mean + r0 : NULL, *rs = rstd ? rstd + r0 : NULL;
        if (b && be->residual_layernorm_forward)
            be->residual_layernorm_forward(be, res + o, y, mu, rs, a + o, b + o, w, bias, rows, C);
        else if (b) {   /* the optional fused op absent: the two ops, same bits */
            be->residual_forward(be, res + o, a + o, b + o, (size_t)rows * C);
            be->layernorm_forward(be, y, mu, rs, res + o, w, bias, rows, C);
        } else
            be->layernorm_forward(be, y, mu, rs, a + o, w, bias, rows, C);
        llm_fast_cast_lo(be, (uint16_t *)out + o, y, (size_t)rows * C, lo);
    }
}

void llm_cpu_layernorm_backward_lo(llm_backend *be, float *dinp, void *dinp_lo, float *dw,
                                   float *db, const float *dout, const float *inp,
                                   const float *w, const float *mean, const float *rstd, int N,
                                   int C, int lo)
{
    be->layernorm_backward(be, dinp, dw, db, dout, inp, w, mean, rstd, N, C);
    if (N > 0 && C > 0)
        be->cast_lo(be, dinp_lo, dinp, (size_t)N * C, lo);
}

/* Elementwise ops go in chunks of LLM_LO_EW elements (a "row" of the chunking). */
#define LLM_LO_EW 4096

void llm_cpu_gelu_forward_lo(llm_backend *be, void *out, const void *inp, size_t n, int lo)
{
    size_t nrow = (n + LLM_LO_EW - 1) / LLM_LO_EW;
    if (!n)
        return;
    int R;
    float *x = take(be, 0, LLM_LO_EW, nrow > (size_t)1 << 30 ? 1 << 30 : (int)nrow, &R);
    if (!x) {
        nan_fill(out, lo, n);
        return;
    }
    size_t step = (size_t)R * LLM_LO_EW;
    for (size_t i0 = 0; i0 < n; i0 += step) {
        size_t k = n - i0 < step ? n - i0 : step;
        llm_cpu_lo_widen(be, x, (const uint16_t *)inp + i0, k, lo);
        be->gelu_forward(be, x, x, k);
        llm_fast_cast_lo(be, (uint16_t *)out + i0, x, k, lo);
    }
}

void llm_cpu_gelu_backward_lo(llm_backend *be, void *dinp, const void *inp, const void *dout,
                              size_t n, int lo)
{
    size_t nrow = (n + LLM_LO_EW - 1) / LLM_LO_EW;
    if (!n)
        return;
    int R;
    float *x = take(be, 0, 3 * (size_t)LLM_LO_EW, nrow > (size_t)1 << 30 ? 1 << 30 : (int)nrow, &R);
    if (!x) {
        nan_fill(dinp, lo, n);
        return;
    }
    size_t step = (size_t)R * LLM_LO_EW;
    float *d = x + step, *g = d + step;
    for (size_t i0 = 0; i0 < n; i0 += step) {
        size_t k = n - i0 < step ? n - i0 : step;
        llm_cpu_lo_widen(be, x, (const uint16_t *)inp + i0, k, lo);
        llm_cpu_lo_widen(be, d, (const uint16_t *)dout + i0, k, lo);
        memset(g, 0, k * sizeof(float));
        be->gelu_backward(be, g, x, d, k);
        llm_fast_cast_lo(be, (uint16_t *)dinp + i0, g, k, lo);
    }
}

void llm_cpu_xent_forward_lo(llm_backend *be, float *losses, float *lse, const void *logits,
                             const int32_t *targets, int N, int V, int Vp, int lo)
{
    if (N <= 0)
        return;
    int R;
    float *x = take(be, 0, (size_t)Vp, N, &R);
    if (!x) {
        nan_fill(losses, LLM_QK_F32, (size_t)N);
        nan_fill(lse, LLM_QK_F32, (size_t)N);
        return;
    }
    for (int r0 = 0; r0 < N; r0 += R) {
        int rows = N - r0 < R ? N - r0 : R;
        llm_cpu_lo_widen(be, x, (const uint16_t *)logits + (size_t)r0 * Vp, (size_t)rows * Vp, lo);
        be->xent_forward(be, losses + r0, lse + r0, x, targets + r0, rows, V, Vp);
    }
}

void llm_cpu_xent_backward_lo(llm_backend *be, void *dlogits, const void *logits,
                              const float *lse, const int32_t *targets, float dloss, int N,
                              int V, int Vp, int lo)
{
    if (N <= 0)
        return;
    int R;
    float *x = take(be, 0, (size_t)Vp, N, &R);
    if (!x) {
        nan_fill(dlogits, lo, (size_t)N * Vp);
        return;
    }
    /* chunk by chunk, each chunk's logits read before its gradient is written: dlogits
     * may alias logits */
    for (int r0 = 0; r0 < N; r0 += R) {
        int rows = N - r0 < R ? N - r0 : R;
        size_t o = (size_t)r0 * Vp;
        llm_cpu_lo_widen(be, x, (const uint16_t *)logits + o, (size_t)rows * Vp, lo);
        be->xent_backward(be, x, x, lse + r0, targets + r0, dloss, rows, V, Vp);
        llm_fast_cast_lo(be, (uint16_t *)dlogits + o, x, (size_t)rows * Vp, lo);
    }
}

/* xent_fused on either dtype: chunk by chunk of rows, the backend's own xent_forward then
 * xent_backward (so bit for bit the two ops), each chunk's logits read while they are
 * still in cache.  lo 0: fp32 logits, no work space but the chunk's lse. */
void llm_cpu_xent_fused(llm_backend *be, float *losses, void *logits, const int32_t *targets,
                        float dloss, int N, int V, int Vp, int lo)
{
    if (N <= 0)
        return;
    if (lo == 0) {
        enum { R = 64 };
        float lse[R];
        for (int r0 = 0; r0 < N; r0 += R) {
            int rows = N - r0 < R ? N - r0 : R;
            float *x = (float *)logits + (size_t)r0 * Vp;
            be->xent_forward(be, losses + r0, lse, x, targets + r0, rows, V, Vp);
            be->xent_backward(be, x, x, lse, targets + r0, dloss, rows, V, Vp);
        }
        return;
    }
    int R;
    float *x = take(be, 0, (size_t)Vp + 1, N, &R);
    if (!x) {
        nan_fill(losses, LLM_QK_F32, (size_t)N);
        nan_fill(logits, lo, (size_t)N * Vp);
        return;
    }
    float *lse = x + (size_t)R * Vp;
    for (int r0 = 0; r0 < N; r0 += R) {
        int rows = N - r0 < R ? N - r0 : R;
        uint16_t *h = (uint16_t *)logits + (size_t)r0 * Vp;
        llm_cpu_lo_widen(be, x, h, (size_t)rows * Vp, lo);
        be->xent_forward(be, losses + r0, lse, x, targets + r0, rows, V, Vp);
        be->xent_backward(be, x, x, lse, targets + r0, dloss, rows, V, Vp);
        llm_fast_cast_lo(be, h, x, (size_t)rows * Vp, lo);
    }
}

/* ---- attention: per batch row b, the backend's own lse kernels on widened tensors ---- */

typedef void (*lse_fwd_fn)(llm_backend *, float *, float *, const float *, int, int, int, int,
                           int);
typedef void (*lse_bwd_fn)(llm_backend *, float *, const float *, const float *, const float *,
                           const float *, int, int, int, int, int);

static void attention_forward_lse(llm_backend *be, lse_fwd_fn f, void *out, float *lse,
                                  const void *qkv, int B, int T, int C, int NH, int lo)
{
    if (B <= 0 || T <= 0)
        return;
    size_t tc = (size_t)T * C;
    float *q = llm_cpu_lo_scratch(be, 4 * tc);
    if (!q) {
        nan_fill(out, lo, (size_t)B * tc);
        nan_fill(lse, LLM_QK_F32, (size_t)B * NH * T);
        return;
    }
    float *o = q + 3 * tc;
    for (int b = 0; b < B; b++) {
        llm_cpu_lo_widen(be, q, (const uint16_t *)qkv + (size_t)b * 3 * tc, 3 * tc, lo);
        f(be, o, lse + (size_t)b * NH * T, q, 1, T, C, NH, lo);
        llm_fast_cast_lo(be, (uint16_t *)out + (size_t)b * tc, o, tc, lo);
    }
}

static void attention_backward_lse(llm_backend *be, lse_bwd_fn f, void *dqkv, const void *dout,
                                   const void *qkv, const void *out, const float *lse, int B,
                                   int T, int C, int NH, int lo)
{
    if (B <= 0 || T <= 0)
        return;
    size_t tc = (size_t)T * C;
    float *q = llm_cpu_lo_scratch(be, 8 * tc);
    if (!q) {
        nan_fill(dqkv, lo, (size_t)B * 3 * tc);
        return;
    }
    float *d = q + 3 * tc, *o = d + tc, *g = o + tc;
    for (int b = 0; b < B; b++) {
        llm_cpu_lo_widen(be, q, (const uint16_t *)qkv + (size_t)b * 3 * tc, 3 * tc, lo);
        llm_cpu_lo_widen(be, d, (const uint16_t *)dout + (size_t)b * tc, tc, lo);
        llm_cpu_lo_widen(be, o, (const uint16_t *)out + (size_t)b * tc, tc, lo);
        memset(g, 0, 3 * tc * sizeof(float));
        f(be, g, d, q, o, lse + (size_t)b * NH * T, 1, T, C, NH, lo);
        llm_fast_cast_lo(be, (uint16_t *)dqkv + (size_t)b * 3 * tc, g, 3 * tc, lo);
    }
}

#define LO_ATTENTION(P)                                                                        \
    void P##attention_forward_lse(llm_backend *be, void *out, float *lse, const void *qkv,    \
                                  int B, int T, int C, int NH, int lo)                        \
    {                                                                                          \
        attention_forward_lse(be, P##attention_forward_lse32, out, lse, qkv, B, T, C, NH, lo); \
    }                                                                                          \
    void P##attention_backward_lse(llm_backend *be, void *dqkv, const void *dout,             \
                                   const void *qkv, const void *out, const float *lse, int B, \
                                   int T, int C, int NH, int lo)                              \
    {                                                                                          \
        attention_backward_lse(be, P##attention_backward_lse32, dqkv, dout, qkv, out, lse, B, \
                               T, C, NH, lo);                                                  \
    }

LO_ATTENTION(llm_ref_)
LO_ATTENTION(llm_fast_)
