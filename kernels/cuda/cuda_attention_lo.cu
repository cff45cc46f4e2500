/* cuda_attention_lo.cu — causal multi-head attention with lo (bf16/fp16) operands
 * (backend.h: attention_forward_lo, attention_backward_lo).
 *
 * The same shape as cuda_attention.cu — per batch row, strided-batched GEMMs over the heads
 * around a causal softmax — with every product on the tensor cores: the operands are lo
 * (qkv and dout rounded once per call into lo buffers, the probabilities rounded by the
 * softmax kernel as it writes them, the score gradient by the softmax backward), the
 * products accumulate in fp32 (cublasGemmStridedBatchedEx, CUBLAS_COMPUTE_32F) into fp32
 * scores, outputs and gradients.  att keeps the fp32 probabilities for the backward.
 * Work space: lo buffers [0] qkv (B,T,3C), [1] dout (B,T,C), [2] probabilities and
 * [3] score gradients of one batch row (NH,T,T); the fp32 score gradient of one batch row
 * in the backend's scratch. */
#include <math.h>

#include "kernels/cuda/cuda_internal.h"
#include "kernels/cuda/cuda_lo.cuh"

#define LC_WARP 32

/* One warp per row r of rows (h,t) of one batch row; t = r % T.  On entry att holds
 * scale * q.k for every column; on exit softmax over columns 0..t and exact zeros after,
 * in fp32 (att) and rounded to lo (plo). */
template <int LO>
__global__ void lc_softmax_lo_kernel(float *att, uint16_t *plo, size_t rows, int T)
{
    size_t warp = (blockIdx.x * (size_t)blockDim.x + threadIdx.x) / LC_WARP;
    int lane = threadIdx.x % LC_WARP;
    if (warp >= rows) return;
    int t = (int)(warp % (size_t)T);
    float *row = att + warp * (size_t)T;
    uint16_t *lrow = plo + warp * (size_t)T;
    float mx = -INFINITY;
    for (int j = lane; j <= t; j += LC_WARP) mx = fmaxf(mx, row[j]);
    for (int o = 16; o > 0; o >>= 1) mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, o));
    float sum = 0.0f;
    for (int j = lane; j <= t; j += LC_WARP) sum += expf(row[j] - mx);
    for (int o = 16; o > 0; o >>= 1) sum += __shfl_xor_sync(0xffffffffu, sum, o);
    float inv = 1.0f / sum;   /* sum >= 1: the max term contributes exp(0) */
    for (int j = lane; j < T; j += LC_WARP) {
        float p = (j <= t) ? expf(row[j] - mx) * inv : 0.0f;
        row[j] = p;
        lrow[j] = lc_to_lo<LO>(p);
    }
}

/* Softmax backward of one batch row: ds[t,j] = lo(scale * att[t,j] (datt[t,j] -
 * sum_i att[t,i] datt[t,i])) for j <= t, 0 after.  One warp per row. */
template <int LO>
__global__ void lc_softmax_bwd_lo_kernel(uint16_t *ds, const float *datt, const float *att,
                                         size_t rows, int T, float scale)
{
    size_t warp = (blockIdx.x * (size_t)blockDim.x + threadIdx.x) / LC_WARP;
    int lane = threadIdx.x % LC_WARP;
    if (warp >= rows) return;
    int t = (int)(warp % (size_t)T);
    const float *d = datt + warp * (size_t)T, *a = att + warp * (size_t)T;
    uint16_t *o = ds + warp * (size_t)T;
    float dot = 0.0f;
    for (int j = lane; j <= t; j += LC_WARP) dot += a[j] * d[j];
    for (int o2 = 16; o2 > 0; o2 >>= 1) dot += __shfl_xor_sync(0xffffffffu, dot, o2);
    for (int j = lane; j < T; j += LC_WARP)
        o[j] = lc_to_lo<LO>((j <= t) ? scale * a[j] * (d[j] - dot) : 0.0f);
}

/* Row-major C(m x n, ldc; stride sC) fp32 = alpha op(A) op(B) + beta C over batch, A and B
 * lo with strides sA, sB (elements); ta/tb: the row-major A/B are stored transposed.  As
 * lc_gemm_rm: column-major C^T = op(B)^T op(A)^T. */
extern "C" void lc_lo_gemm_batched(lc_ctx *c, int lo, int ta, int tb, int m, int n, int k,
                                   float alpha, const void *A, int lda, long long sA,
                                   const void *B, int ldb, long long sB, float beta, float *C,
                                   int ldc, long long sC, int batch)
{
    if (m <= 0 || n <= 0 || batch <= 0) return;
    cudaDataType_t t = lo == LC_DT_BF16 ? CUDA_R_16BF : CUDA_R_16F;
    LC_CKB(c, cublasGemmStridedBatchedEx(c->blas, tb ? CUBLAS_OP_T : CUBLAS_OP_N,
                                         ta ? CUBLAS_OP_T : CUBLAS_OP_N, n, m, k, &alpha,
                                         B, t, ldb, sB, A, t, lda, sA, &beta, C, CUDA_R_32F,
                                         ldc, sC, batch, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT));
}

/* 1 when there is work and lo is valid; an invalid lo is recorded as an error */
extern "C" int lc_att_lo_ok(lc_ctx *c, int B, int T, int C, int NH, int lo, const char *op)
{
    if (B <= 0 || T <= 0 || C <= 0 || NH <= 0) return 0;
    if (lo == LC_DT_BF16 || lo == LC_DT_F16) return 1;
    lc_fail_cuda(c, cudaErrorInvalidValue, op, __FILE__, __LINE__);
    return 0;
}

extern "C" unsigned lc_warp_blocks(size_t rows, unsigned threads)
{
    return (unsigned)((rows * LC_WARP + threads - 1) / threads);
}

extern "C" int lc_att_lo_begin(lc_ctx *c, int B, int T, int C, int NH, int lo, const char *op,
                               const float *qkv, const float *dout, lc_att_dims *a,
                               uint16_t **q, uint16_t **d)
{
    if (!lc_att_lo_ok(c, B, T, C, NH, lo, op)) return 0;
    *a = lc_att_dims{c, lo, T, C / NH, NH, (long long)T * T, 1.0f / sqrtf((float)(C / NH))};
    size_t nq = (size_t)B * T * 3 * C, no = (size_t)B * T * C;
    *q = (uint16_t *)lc_lo_buf(c, 0, nq * 2);
    if (!*q || lc_lo_cast(c, *q, qkv, nq, lo)) return 0;
    if (!dout) return 1;
    *d = (uint16_t *)lc_lo_buf(c, 1, no * 2);
    return *d && !lc_lo_cast(c, *d, dout, no, lo);
}

extern "C" void lc_att_xyt(const lc_att_dims *a, float *S, float alpha, const void *X, int ldx,
                           const void *Y, int ldy)
{
    lc_lo_gemm_batched(a->c, a->lo, 0, 1, a->T, a->T, a->hs, alpha, X, ldx, a->hs, Y, ldy, a->hs,
                       0.0f, S, a->T, a->tt, a->NH);
}

extern "C" void lc_att_py(const lc_att_dims *a, float *O, int ldo, float beta, const void *P,
                          const void *Y, int ldy)
{
    lc_lo_gemm_batched(a->c, a->lo, 0, 0, a->T, a->hs, a->T, 1.0f, P, a->T, a->tt, Y, ldy, a->hs,
                       beta, O, ldo, a->hs, a->NH);
}

extern "C" void lc_att_pty(const lc_att_dims *a, float *O, int ldo, const void *P, const void *Y,
                           int ldy)
{
    lc_lo_gemm_batched(a->c, a->lo, 1, 0, a->T, a->hs, a->T, 1.0f, P, a->T, a->tt, Y, ldy, a->hs,
                       1.0f, O, ldo, a->hs, a->NH);
}

static void lc_attention_forward_lo(llm_backend *be, float *out, float *att, const float *qkv,
                                    int B, int T, int C, int NH, int lo)
{
    lc_ctx *c = lc_get(be);
    lc_att_dims a;
    uint16_t *q, *d;
    if (!lc_att_lo_begin(c, B, T, C, NH, lo, "attention_forward_lo: lo is neither bf16 nor f16",
                         qkv, NULL, &a, &q, &d))
        return;
    size_t rows = (size_t)NH * T;
    uint16_t *p = (uint16_t *)lc_lo_buf(c, 2, (size_t)NH * a.tt * 2);
    if (!p) return;
    const unsigned threads = 256;   /* 8 rows per block */
    for (int b = 0; b < B; b++) {
        const uint16_t *qb = q + (size_t)b * T * 3 * C, *kb = qb + C, *vb = qb + 2 * C;
        float *ab = att + (size_t)b * NH * a.tt;
        lc_att_xyt(&a, ab, a.scale, qb, 3 * C, kb, 3 * C);   /* S_h = scale Q_h K_h^T */
        LC_LAUNCH_LO(c, lo, lc_softmax_lo_kernel, lc_warp_blocks(rows, threads), threads, ab, p,
                     rows, T);
        if (LC_LAUNCHED(c)) return;
        /* out_h = lo(P_h) V_h, into out (B,T,C) at column h*hs */
        lc_att_py(&a, out + (size_t)b * T * C, C, 0.0f, p, vb, 3 * C);
    }
}

static void lc_attention_backward_lo(llm_backend *be, float *dqkv, const float *dout,
                                     const float *qkv, const float *att, int B, int T, int C,
                                     int NH, int lo)
{
    lc_ctx *c = lc_get(be);
    lc_att_dims a;
    uint16_t *q, *d;
    if (!lc_att_lo_begin(c, B, T, C, NH, lo, "attention_backward_lo: lo is neither bf16 nor f16",
                         qkv, dout, &a, &q, &d))
        return;
    size_t rows = (size_t)NH * T;
    uint16_t *p = (uint16_t *)lc_lo_buf(c, 2, (size_t)NH * a.tt * 2);
    uint16_t *ds = (uint16_t *)lc_lo_buf(c, 3, (size_t)NH * a.tt * 2);
    /* the fp32 datt of one batch row; the stream orders its reuse across b */
    float *datt = (float *)lc_scratch(c, (size_t)NH * a.tt * sizeof(float));
    if (!p || !ds || !datt) return;
    const unsigned threads = 256;
    for (int b = 0; b < B; b++) {
        const uint16_t *qb = q + (size_t)b * T * 3 * C, *kb = qb + C, *vb = qb + 2 * C;
        const uint16_t *db = d + (size_t)b * T * C;
        float *dq = dqkv + (size_t)b * T * 3 * C, *dk = dq + C, *dv = dq + 2 * C;
        const float *ab = att + (size_t)b * NH * a.tt;
        lc_att_xyt(&a, datt, 1.0f, db, C, vb, 3 * C);          /* datt_h = dO_h V_h^T */
        if (lc_lo_cast(c, p, ab, (size_t)NH * a.tt, lo)) return;
        lc_att_pty(&a, dv, 3 * C, p, db, C);                    /* dV_h += lo(P_h)^T dO_h */
        /* dS = lo(scale * P (datt - rowsum(P datt))) */
        LC_LAUNCH_LO(c, lo, lc_softmax_bwd_lo_kernel, lc_warp_blocks(rows, threads), threads, ds,
                     datt, ab, rows, T, a.scale);
        if (LC_LAUNCHED(c)) return;
        lc_att_py(&a, dq, 3 * C, 1.0f, ds, kb, 3 * C);          /* dQ_h += dS_h K_h */
        lc_att_pty(&a, dk, 3 * C, ds, qb, 3 * C);               /* dK_h += dS_h^T Q_h */
    }
}

extern "C" void lc_fill_attention_lo(llm_backend *be)
{
    be->attention_forward_lo = lc_attention_forward_lo;
    be->attention_backward_lo = lc_attention_backward_lo;
}
