/* fast_mixed.c — "cpu" mixed-precision GEMM ops: the operands are rounded to lo into fp32
 * scratch (the rounded values are exact in fp32) and multiplied by the fp32 GEMMs of
 * fast_matmul.c, so the arithmetic is fp32 on lo-valued inputs, as on a GPU's tensor
 * cores.  This is the numerics of the GPU path on the CPU; it is slower than plain fp32
 * (the roundings are extra passes), not faster.
 *
 * Memory: the weights are widened once per call (OC*C floats); activation rows are
 * rounded in chunks of at most ctx->lo_chunk floats, so the logits GEMM of a large
 * vocabulary does not need a copy of the whole (N,Vp) gradient.  When the scratch cannot
 * be allocated the reference kernel runs instead (slow, same meaning: ops never fail). */
#include "kernels/cpu/cpu_ops.h"
#include "kernels/cpu/mixed.h"

/* dst[i] = lo(src[i]) (both fp32), on the backend's threads for large n. */
static void round_into(llm_backend *be, float *dst, const float *src, size_t n, int lo)
{
    int nt = llm_cpu_threads(be);
    if (lo == LLM_QK_F16) {
#pragma omp parallel for num_threads(nt) schedule(static) if (n > 65536)
        for (size_t i = 0; i < n; i++)
            dst[i] = llm_f16_to_f32(llm_f32_to_f16(src[i]));
    } else {
#pragma omp parallel for num_threads(nt) schedule(static) if (n > 65536)
        for (size_t i = 0; i < n; i++)
            dst[i] = llm_bf16_to_f32(llm_f32_to_bf16(src[i]));
    }
}

/* dst[i] = the value of lo bits w[i]. */
static void widen(llm_backend *be, float *dst, const uint16_t *w, size_t n, int lo)
{
    int nt = llm_cpu_threads(be);
    if (lo == LLM_QK_F16) {
#pragma omp parallel for num_threads(nt) schedule(static) if (n > 65536)
        for (size_t i = 0; i < n; i++)
            dst[i] = llm_f16_to_f32(w[i]);
    } else {
#pragma omp parallel for num_threads(nt) schedule(static) if (n > 65536)
        for (size_t i = 0; i < n; i++)
            dst[i] = llm_bf16_to_f32(w[i]);
    }
}

/* Rows per chunk when each row needs `per_row` floats of scratch: >= 1, <= N. */
static int chunk_rows(const llm_backend *be, int N, size_t per_row)
{
    size_t lim = ((const llm_cpu_ctx *)be->ctx)->lo_chunk;
    size_t r = per_row ? lim / per_row : (size_t)N;
    if (r < 1)
        r = 1;
    return r < (size_t)N ? (int)r : N;
}

void llm_fast_cast_lo(llm_backend *be, void *dst, const float *src, size_t n, int lo)
{
    uint16_t *d = dst;
    int nt = llm_cpu_threads(be);
    if (lo == LLM_QK_F16) {
#pragma omp parallel for num_threads(nt) schedule(static) if (n > 65536)
        for (size_t i = 0; i < n; i++)
            d[i] = llm_f32_to_f16(src[i]);
    } else {
#pragma omp parallel for num_threads(nt) schedule(static) if (n > 65536)
        for (size_t i = 0; i < n; i++)
            d[i] = llm_f32_to_bf16(src[i]);
    }
}

void llm_fast_matmul_forward_lo(llm_backend *be, float *out, const float *inp, const void *w_lo,
                                int lo, const float *bias, int N, int C, int OC)
{
    if (N <= 0 || OC <= 0)
        return;
    size_t wn = (size_t)OC * (size_t)(C > 0 ? C : 0);
    int R = chunk_rows(be, N, (size_t)(C > 0 ? C : 0));
    float *w = llm_cpu_scratch(be, wn + (size_t)R * (size_t)(C > 0 ? C : 0) + 1);
    if (!w) {
        llm_ref_matmul_forward_lo(be, out, inp, w_lo, lo, bias, N, C, OC);
        return;
    }
    float *x = w + wn;
    widen(be, w, w_lo, wn, lo);
    for (int r0 = 0; r0 < N; r0 += R) {
        int rows = N - r0 < R ? N - r0 : R;
        round_into(be, x, inp + (size_t)r0 * C, (size_t)rows * C, lo);
        llm_fast_matmul_forward(be, out + (size_t)r0 * OC, x, w, bias, rows, C, OC);
    }
}

void llm_fast_matmul_backward_lo(llm_backend *be, float *dinp, float *dw, float *dbias,
                                 const float *dout, const float *inp, const void *w_lo, int lo,
                                 int N, int C, int OC)
{
    if (N <= 0 || OC <= 0)
        return;
    size_t Cz = (size_t)(C > 0 ? C : 0), wn = (size_t)OC * Cz;
    int R = chunk_rows(be, N, (size_t)OC + Cz);
    float *w = llm_cpu_scratch(be, wn + (size_t)R * ((size_t)OC + Cz) + 1);
    if (!w) {
        llm_ref_matmul_backward_lo(be, dinp, dw, dbias, dout, inp, w_lo, lo, N, C, OC);
        return;
    }
    float *d = w + wn, *x = d + (size_t)R * OC;
    widen(be, w, w_lo, wn, lo);
    /* chunks of rows: dinp rows are independent; dw and dbias sum over rows, so each
     * chunk adds its part (fp32 accumulation, as one GEMM over all rows would) */
    for (int r0 = 0; r0 < N; r0 += R) {
        int rows = N - r0 < R ? N - r0 : R;
        round_into(be, d, dout + (size_t)r0 * OC, (size_t)rows * OC, lo);
        round_into(be, x, inp + (size_t)r0 * Cz, (size_t)rows * Cz, lo);
        llm_fast_matmul_backward(be, dinp + (size_t)r0 * Cz, dw, dbias, d, x, w, rows, C, OC);
    }
}
