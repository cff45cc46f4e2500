/* cuda_attention_lse.cu — attention_forward_lse / attention_backward_lse (backend.h): the
 * lo attention that keeps only each row's log-sum-exp, (B,NH,T) floats instead of the
 * (B,NH,T,T) probabilities.
 *
 * q|k|v, dout and out are the caller's lo tensors, read as they are (no conversion pass);
 * out and dqkv are written in lo, each element's fp32 sum rounded once (dqkv is
 * overwritten: every element is one product's full sum).
 *
 * This file holds the batched-GEMM form, which works for every head size: per batch row,
 * the scores of all heads go to fp32 scratch (NH,T,T) through cublasGemmStridedBatchedEx
 * on lo operands, a warp-per-row kernel turns them into lo probabilities (and lse), and
 * the products (lo operands, fp32 accumulate, lo results) run strided-batched over the
 * heads; the backward computes the scores again and P = exp(S - lse) from them.  The
 * scratch is per batch row, so the memory is O(NH T^2) for the whole call instead of per
 * layer and batch.  A fused kernel that never stores the scores (cuda_flash.cu) takes
 * over where it applies (head sizes 32, 64, 128, 16-byte aligned qkv and dout), unless
 * LLM_CUDA_FLASH=0 or llm_backend_cuda_flash_path turned it off.
 * Work space: lo buffers [0] lo(P), [1] lo(dS) of one batch row (lc_lo_buf); the scratch:
 * the fp32 scores/probabilities and dP of one batch row, and D. */
#include <math.h>

#include "kernels/cuda/cuda_internal.h"
#include "kernels/cuda/cuda_lo.cuh"
extern "C" {
#include "kernels/cuda/cuda_ext.h"
}

#define LC_WARP 32

/* ---- the batched lo GEMMs over the heads of one batch row ---- */

/* Row-major C(m x n, ldc; stride sC) of dtype ct = alpha op(A) op(B) + beta C over
 * batch, A and B lo with strides sA, sB (elements); ta/tb: the row-major A/B are stored
 * transposed; fp32 accumulate, a lo C rounded once.  As lc_gemm_rm: column-major
 * C^T = op(B)^T op(A)^T. */
static void lc_lo_gemm_batched(lc_ctx *c, int lo, int ta, int tb, int m, int n, int k,
                               float alpha, const void *A, int lda, long long sA,
                               const void *B, int ldb, long long sB, float beta, void *C,
                               int ct, int ldc, long long sC, int batch)
{
    if (m <= 0 || n <= 0 || batch <= 0) return;
    cudaDataType_t t = lo == LC_DT_BF16 ? CUDA_R_16BF : CUDA_R_16F;
    cudaDataType_t tc = ct == LC_DT_F32 ? CUDA_R_32F : t;
    LC_CKB(c, cublasGemmStridedBatchedEx(c->blas, tb ? CUBLAS_OP_T : CUBLAS_OP_N,
                                         ta ? CUBLAS_OP_T : CUBLAS_OP_N, n, m, k, &alpha,
                                         B, t, ldb, sB, A, t, lda, sA, &beta, C, tc,
                                         ldc, sC, batch, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT));
}

/* The dimensions of one call: X, Y below are T rows holding head h's hs columns at h*hs
 * (row strides ldx, ldy elements); P (NH,T,T) lo; S (NH,T,T) fp32; O T rows, head h at
 * h*hs, row stride ldo, lo. */
typedef struct {
    lc_ctx *c;
    int lo, T, hs, NH;
    long long tt;   /* T*T */
    float scale;    /* 1/sqrt(hs) */
} lc_att_dims;

/* The argument check (0: nothing to do, or lo invalid and recorded) and *a. */
static int lc_att_begin(lc_ctx *c, int B, int T, int C, int NH, int lo, const char *op,
                        lc_att_dims *a)
{
    if (B <= 0 || T <= 0 || C <= 0 || NH <= 0) return 0;
    if (lo != LC_DT_BF16 && lo != LC_DT_F16) {
        lc_fail_cuda(c, cudaErrorInvalidValue, op, __FILE__, __LINE__);
        return 0;
    }
    *a = lc_att_dims{c, lo, T, C / NH, NH, (long long)T * T, 1.0f / sqrtf((float)(C / NH))};
    return 1;
}

/* blocks of threads for one warp per row */
static unsigned lc_warp_blocks(size_t rows, unsigned threads)
{
    return (unsigned)((rows * LC_WARP + threads - 1) / threads);
}

/* S_h = alpha X_h Y_h^T (fp32) */
static void lc_att_xyt(const lc_att_dims *a, float *S, float alpha, const void *X, int ldx,
                       const void *Y, int ldy)
{
    lc_lo_gemm_batched(a->c, a->lo, 0, 1, a->T, a->T, a->hs, alpha, X, ldx, a->hs, Y, ldy, a->hs,
                       0.0f, S, LC_DT_F32, a->T, a->tt, a->NH);
}

/* O_h = P_h Y_h (lo, overwritten) */
static void lc_att_py(const lc_att_dims *a, void *O, int ldo, const void *P, const void *Y, int ldy)
{
    lc_lo_gemm_batched(a->c, a->lo, 0, 0, a->T, a->hs, a->T, 1.0f, P, a->T, a->tt, Y, ldy, a->hs,
                       0.0f, O, a->lo, ldo, a->hs, a->NH);
}

/* O_h = P_h^T Y_h (lo, overwritten) */
static void lc_att_pty(const lc_att_dims *a, void *O, int ldo, const void *P, const void *Y, int ldy)
{
    lc_lo_gemm_batched(a->c, a->lo, 1, 0, a->T, a->hs, a->T, 1.0f, P, a->T, a->tt, Y, ldy, a->hs,
                       0.0f, O, a->lo, ldo, a->hs, a->NH);
}

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

/* D[(b*NH + h)*T + t] = dout[b,t,h*hs..] . out[b,t,h*hs..] (lo values, fp32 sums); one
 * warp per row. */
template <int LO>
__global__ void lc_rowdot_kernel(float *D, const uint16_t *dout, const uint16_t *out, int B,
                                 int T, int C, int NH)
{
    size_t warp = (blockIdx.x * (size_t)blockDim.x + threadIdx.x) / LC_WARP;
    int lane = threadIdx.x % LC_WARP;
    size_t rows = (size_t)B * NH * T;
    if (warp >= rows) return;
    int hs = C / NH, t = (int)(warp % (size_t)T), h = (int)(warp / T % NH);
    size_t b = warp / ((size_t)T * NH);
    size_t o = (b * T + t) * (size_t)C + (size_t)h * hs;
    float s = 0.0f;
    for (int i = lane; i < hs; i += LC_WARP)
        s += lc_from_lo<LO>(dout[o + i]) * lc_from_lo<LO>(out[o + i]);
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

/* the fused kernels (cuda_flash.cu): 0 when they ran, 1 when the shape or alignment is
 * not theirs, -1 after an error (recorded); lc_flash_fits: whether they apply (dout NULL
 * for the forward; dst: out, or dqkv) */
extern "C" int lc_flash_fits(const lc_ctx *c, int C, int NH, const void *qkv, const void *dout,
                             const void *dst);
extern "C" int lc_flash_forward(lc_ctx *c, uint16_t *out, float *lse, const uint16_t *q, int B,
                                int T, int C, int NH, int lo);
extern "C" int lc_flash_backward(lc_ctx *c, uint16_t *dqkv, const uint16_t *q, const uint16_t *d,
                                 const float *lse, const float *D, int B, int T, int C, int NH,
                                 int lo);

static void lc_attention_forward_lse(llm_backend *be, void *out, float *lse, const void *qkv,
                                     int B, int T, int C, int NH, int lo)
{
    lc_ctx *c = lc_get(be);
    lc_att_dims a;
    if (!lc_att_begin(c, B, T, C, NH, lo, "attention_forward_lse: lo is neither bf16 nor f16", &a))
        return;
    const uint16_t *q = (const uint16_t *)qkv;
    uint16_t *o = (uint16_t *)out;
    size_t rows = (size_t)NH * T;
    if (!c->flash_off && lc_flash_fits(c, C, NH, qkv, NULL, out)) {
        lc_flash_forward(c, o, lse, q, B, T, C, NH, lo);
        return;
    }
    uint16_t *p = (uint16_t *)lc_lo_buf(c, 0, (size_t)NH * a.tt * 2);
    float *S = (float *)lc_scratch(c, (size_t)NH * a.tt * sizeof(float));
    if (!p || !S) return;
    const unsigned threads = 256;
    for (int b = 0; b < B; b++) {
        const uint16_t *qb = q + (size_t)b * T * 3 * C, *kb = qb + C, *vb = qb + 2 * C;
        lc_att_xyt(&a, S, a.scale, qb, 3 * C, kb, 3 * C);
        LC_LAUNCH_LO(c, lo, lc_softmax_lse_kernel, lc_warp_blocks(rows, threads), threads, S, p,
                     lse + (size_t)b * rows, rows, T);
        if (LC_LAUNCHED(c)) return;
        lc_att_py(&a, o + (size_t)b * T * C, C, p, vb, 3 * C);   /* out_h = lo(P_h) V_h */
    }
    c->flash_runs[1]++;
}

static void lc_attention_backward_lse(llm_backend *be, void *dqkv, const void *dout,
                                      const void *qkv, const void *out, const float *lse,
                                      int B, int T, int C, int NH, int lo)
{
    lc_ctx *c = lc_get(be);
    lc_att_dims a;
    if (!lc_att_begin(c, B, T, C, NH, lo, "attention_backward_lse: lo is neither bf16 nor f16", &a))
        return;
    const uint16_t *q = (const uint16_t *)qkv, *d = (const uint16_t *)dout;
    uint16_t *dq0 = (uint16_t *)dqkv;
    size_t rows = (size_t)NH * T, nD = (size_t)B * NH * T;
    const unsigned threads = 256;
    int flash = !c->flash_off && lc_flash_fits(c, C, NH, qkv, dout, dqkv);
    /* scratch: D (B,NH,T), then for the GEMM form the scores/P and dP of one batch row */
    float *D = (float *)lc_scratch(c, (nD + (flash ? 0 : 2 * (size_t)NH * a.tt)) * sizeof(float));
    if (!D) return;
    LC_LAUNCH_LO(c, lo, lc_rowdot_kernel, lc_warp_blocks(nD, threads), threads, D, d,
                 (const uint16_t *)out, B, T, C, NH);
    if (LC_LAUNCHED(c)) return;
    if (flash) {
        lc_flash_backward(c, dq0, q, d, lse, D, B, T, C, NH, lo);
        return;
    }
    float *S = D + nD, *dP = S + (size_t)NH * a.tt;
    uint16_t *p = (uint16_t *)lc_lo_buf(c, 0, (size_t)NH * a.tt * 2);
    uint16_t *ds = (uint16_t *)lc_lo_buf(c, 1, (size_t)NH * a.tt * 2);
    if (!p || !ds) return;
    for (int b = 0; b < B; b++) {
        const uint16_t *qb = q + (size_t)b * T * 3 * C, *kb = qb + C, *vb = qb + 2 * C;
        const uint16_t *db = d + (size_t)b * T * C;
        uint16_t *dq = dq0 + (size_t)b * T * 3 * C, *dk = dq + C, *dv = dq + 2 * C;
        /* S = scale Q K^T again, then P = exp(S - lse) in place and lo(P) */
        lc_att_xyt(&a, S, a.scale, qb, 3 * C, kb, 3 * C);
        LC_LAUNCH_LO(c, lo, lc_lse_probs_kernel, lc_warp_blocks(rows, threads), threads, S, p,
                     lse + (size_t)b * rows, rows, T);
        if (LC_LAUNCHED(c)) return;
        lc_att_pty(&a, dv, 3 * C, p, db, C);            /* dV_h = lo(P_h)^T dO_h */
        lc_att_xyt(&a, dP, 1.0f, db, C, vb, 3 * C);     /* dP_h = dO_h V_h^T */
        LC_LAUNCH_LO(c, lo, lc_dsoftmax_lse_kernel, lc_warp_blocks(rows, threads), threads, ds, dP,
                     S, D + (size_t)b * rows, rows, T, a.scale);
        if (LC_LAUNCHED(c)) return;
        lc_att_py(&a, dq, 3 * C, ds, kb, 3 * C);        /* dQ_h = dS_h K_h */
        lc_att_pty(&a, dk, 3 * C, ds, qb, 3 * C);       /* dK_h = dS_h^T Q_h */
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
    if (off >= 0) {
        c->flash_off = off == 1;
        c->flash_wmma = off == 2;
    }
}
