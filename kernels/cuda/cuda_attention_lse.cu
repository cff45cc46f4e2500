/* cuda_attention_lse.cu — attention_forward_lse / attention_backward_lse (backend.h): the
 * lo attention that keeps only each row's log-sum-exp, (B,NH,T) floats instead of the
 * (B,NH,T,T) probabilities.
 *
 * This file holds the batched-GEMM form, which works for every head size: per batch row,
 * the scores of all heads go to fp32 scratch (NH,T,T) through cublasGemmStridedBatchedEx
 * on lo operands, a warp-per-row kernel turns them into lo probabilities (and lse), and
 * the products run as in cuda_attention_lo.cu; the backward computes the scores again
 * and P = exp(S - lse) from them.  The scratch is per batch row, so the memory is
 * O(NH T^2) for the whole call instead of per layer and batch.  A fused kernel that
 * never stores the scores (cuda_flash.cu) takes over where it applies (head sizes 32, 64,
 * 128), unless LLM_CUDA_FLASH=0 or llm_backend_cuda_flash_path turned it off.
 * Work space: lo buffers [0] qkv, [1] dout, [2] lo(P), [3] lo(dS) of one batch row; the
 * backend's scratch: the fp32 scores/probabilities and dP of one batch row, and D. */
#include <math.h>

#include "kernels/cuda/cuda_internal.h"
#include "kernels/cuda/cuda_lo.cuh"
extern "C" {
#include "kernels/cuda/cuda_ext.h"
}

#define LC_WARP 32

/* One warp per row (h,t) of one batch row, t = row % T: S holds the scaled scores;
 * lse[row] = log sum_{j<=t} exp(S[j]), plo = lo(exp(S - lse)) for j <= t, 0 after. */
template <int LO>
__global__ void lc_softmax_lse_kernel(const float *S, uint16_t *plo, float *lse, size_t rows,
                                      int T)
{
    size_t warp = (blockIdx.x * (size_t)blockDim.x + threadIdx.x) / LC_WARP;
    int lane = threadIdx.x % LC_WARP;
    if (warp >= rows) return;
    int t = (int)(warp % (size_t)T);
    const float *row = S + warp * (size_t)T;
    uint16_t *lrow = plo + warp * (size_t)T;
    float mx = -INFINITY;
    for (int j = lane; j <= t; j += LC_WARP) mx = fmaxf(mx, row[j]);
    for (int o = 16; o > 0; o >>= 1) mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, o));
    float sum = 0.0f;
    for (int j = lane; j <= t; j += LC_WARP) sum += expf(row[j] - mx);
    for (int o = 16; o > 0; o >>= 1) sum += __shfl_xor_sync(0xffffffffu, sum, o);
    float l = mx + logf(sum);
    if (lane == 0) lse[warp] = l;
    for (int j = lane; j < T; j += LC_WARP) lrow[j] = lc_to_lo<LO>(j <= t ? expf(row[j] - l) : 0.0f);
}

/* Backward, one warp per row: S (scaled scores) -> P = exp(S - lse) in place (0 after
 * column t) and plo = lo(P). */
template <int LO>
__global__ void lc_lse_probs_kernel(float *S, uint16_t *plo, const float *lse, size_t rows, int T)
{
    size_t warp = (blockIdx.x * (size_t)blockDim.x + threadIdx.x) / LC_WARP;
    int lane = threadIdx.x % LC_WARP;
    if (warp >= rows) return;
    int t = (int)(warp % (size_t)T);
    float *row = S + warp * (size_t)T;
    uint16_t *lrow = plo + warp * (size_t)T;
    float l = lse[warp];
    for (int j = lane; j < T; j += LC_WARP) {
        float p = j <= t ? expf(row[j] - l) : 0.0f;
        row[j] = p;
        lrow[j] = lc_to_lo<LO>(p);
    }
}

/* D[(b*NH + h)*T + t] = dout[b,t,h*hs..] . out[b,t,h*hs..] (fp32); one warp per row. */
__global__ void lc_rowdot_kernel(float *D, const float *dout, const float *out, int B, int T,
                                 int C, int NH)
{
    size_t warp = (blockIdx.x * (size_t)blockDim.x + threadIdx.x) / LC_WARP;
    int lane = threadIdx.x % LC_WARP;
    size_t rows = (size_t)B * NH * T;
    if (warp >= rows) return;
    int hs = C / NH, t = (int)(warp % (size_t)T), h = (int)(warp / T % NH);
    size_t b = warp / ((size_t)T * NH);
    size_t o = (b * T + t) * (size_t)C + (size_t)h * hs;
    float s = 0.0f;
    for (int i = lane; i < hs; i += LC_WARP) s += dout[o + i] * out[o + i];
    for (int k = 16; k > 0; k >>= 1) s += __shfl_xor_sync(0xffffffffu, s, k);
    if (lane == 0) D[warp] = s;
}

/* dS = lo(scale * P (dP - D[row])) for j <= t, 0 after; one warp per row. */
template <int LO>
__global__ void lc_dsoftmax_lse_kernel(uint16_t *ds, const float *dP, const float *P,
                                       const float *D, size_t rows, int T, float scale)
{
    size_t warp = (blockIdx.x * (size_t)blockDim.x + threadIdx.x) / LC_WARP;
    int lane = threadIdx.x % LC_WARP;
    if (warp >= rows) return;
    int t = (int)(warp % (size_t)T);
    const float *d = dP + warp * (size_t)T, *p = P + warp * (size_t)T;
    uint16_t *o = ds + warp * (size_t)T;
    float dd = D[warp];
    for (int j = lane; j < T; j += LC_WARP)
        o[j] = lc_to_lo<LO>(j <= t ? scale * p[j] * (d[j] - dd) : 0.0f);
}

/* the fused kernels (cuda_flash.cu): 0 when they ran, 1 when the shape is not theirs, -1
 * after an error (recorded); lc_flash_fits: whether the shape is theirs */
extern "C" int lc_flash_fits(int C, int NH);
extern "C" int lc_flash_forward(lc_ctx *c, float *out, float *lse, const uint16_t *q, int B,
                                int T, int C, int NH, int lo);
extern "C" int lc_flash_backward(lc_ctx *c, float *dqkv, const uint16_t *q, const uint16_t *d,
                                 const float *lse, const float *D, int B, int T, int C, int NH,
                                 int lo);

static void lc_attention_forward_lse(llm_backend *be, float *out, float *lse, const float *qkv,
                                     int B, int T, int C, int NH, int lo)
{
    lc_ctx *c = lc_get(be);
    lc_att_dims a;
    uint16_t *q, *d;
    if (!lc_att_lo_begin(c, B, T, C, NH, lo, "attention_forward_lse: lo is neither bf16 nor f16",
                         qkv, NULL, &a, &q, &d))
        return;
    size_t rows = (size_t)NH * T;
    if (!c->flash_off && lc_flash_fits(C, NH)) {
        lc_flash_forward(c, out, lse, q, B, T, C, NH, lo);
        return;
    }
    uint16_t *p = (uint16_t *)lc_lo_buf(c, 2, (size_t)NH * a.tt * 2);
    float *S = (float *)lc_scratch(c, (size_t)NH * a.tt * sizeof(float));
    if (!p || !S) return;
    const unsigned threads = 256;
    for (int b = 0; b < B; b++) {
        const uint16_t *qb = q + (size_t)b * T * 3 * C, *kb = qb + C, *vb = qb + 2 * C;
        lc_att_xyt(&a, S, a.scale, qb, 3 * C, kb, 3 * C);
        LC_LAUNCH_LO(c, lo, lc_softmax_lse_kernel, lc_warp_blocks(rows, threads), threads, S, p,
                     lse + (size_t)b * rows, rows, T);
        if (LC_LAUNCHED(c)) return;
        lc_att_py(&a, out + (size_t)b * T * C, C, 0.0f, p, vb, 3 * C);
    }
    c->flash_runs[1]++;
}

static void lc_attention_backward_lse(llm_backend *be, float *dqkv, const float *dout,
                                      const float *qkv, const float *out, const float *lse,
                                      int B, int T, int C, int NH, int lo)
{
    lc_ctx *c = lc_get(be);
    lc_att_dims a;
    uint16_t *q, *d;
    if (!lc_att_lo_begin(c, B, T, C, NH, lo, "attention_backward_lse: lo is neither bf16 nor f16",
                         qkv, dout, &a, &q, &d))
        return;
    size_t rows = (size_t)NH * T, nD = (size_t)B * NH * T;
    const unsigned threads = 256;
    int flash = !c->flash_off && lc_flash_fits(C, NH);
    /* scratch: D (B,NH,T), then for the GEMM form the scores/P and dP of one batch row */
    float *D = (float *)lc_scratch(c, (nD + (flash ? 0 : 2 * (size_t)NH * a.tt)) * sizeof(float));
    if (!D) return;
    lc_rowdot_kernel<<<lc_warp_blocks(nD, threads), threads, 0, c->stream>>>(D, dout, out, B, T, C, NH);
    if (LC_LAUNCHED(c)) return;
    if (flash) {
        lc_flash_backward(c, dqkv, q, d, lse, D, B, T, C, NH, lo);
        return;
    }
    float *S = D + nD, *dP = S + (size_t)NH * a.tt;
    uint16_t *p = (uint16_t *)lc_lo_buf(c, 2, (size_t)NH * a.tt * 2);
    uint16_t *ds = (uint16_t *)lc_lo_buf(c, 3, (size_t)NH * a.tt * 2);
    if (!p || !ds) return;
    for (int b = 0; b < B; b++) {
        const uint16_t *qb = q + (size_t)b * T * 3 * C, *kb = qb + C, *vb = qb + 2 * C;
        const uint16_t *db = d + (size_t)b * T * C;
        float *dq = dqkv + (size_t)b * T * 3 * C, *dk = dq + C, *dv = dq + 2 * C;
        /* S = scale Q K^T again, then P = exp(S - lse) in place and lo(P) */
        lc_att_xyt(&a, S, a.scale, qb, 3 * C, kb, 3 * C);
        LC_LAUNCH_LO(c, lo, lc_lse_probs_kernel, lc_warp_blocks(rows, threads), threads, S, p,
                     lse + (size_t)b * rows, rows, T);
        if (LC_LAUNCHED(c)) return;
        lc_att_pty(&a, dv, 3 * C, p, db, C);            /* dV_h += lo(P_h)^T dO_h */
        lc_att_xyt(&a, dP, 1.0f, db, C, vb, 3 * C);     /* dP_h = dO_h V_h^T */
        LC_LAUNCH_LO(c, lo, lc_dsoftmax_lse_kernel, lc_warp_blocks(rows, threads), threads, ds, dP,
                     S, D + (size_t)b * rows, rows, T, a.scale);
        if (LC_LAUNCHED(c)) return;
        lc_att_py(&a, dq, 3 * C, 1.0f, ds, kb, 3 * C);  /* dQ_h += dS_h K_h */
        lc_att_pty(&a, dk, 3 * C, ds, qb, 3 * C);       /* dK_h += dS_h^T Q_h */
    }
    c->flash_runs[1]++;
}

extern "C" void lc_fill_attention_lse(llm_backend *be)
{
    be->attention_forward_lse = lc_attention_forward_lse;
    be->attention_backward_lse = lc_attention_backward_lse;
}

/* ---- cuda_ext.h ---- */

extern "C" void llm_backend_cuda_flash_path(llm_backend *be, int off, long runs[2])
{
    lc_ctx *c = lc_get(be);
    if (!c) return;
    if (runs) { runs[0] = c->flash_runs[0]; runs[1] = c->flash_runs[1]; }
    if (off >= 0) c->flash_off = off != 0;
}
