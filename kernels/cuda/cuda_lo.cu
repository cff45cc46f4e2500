/* cuda_lo.cu — mixed precision (backend.h: cast_lo, matmul_forward_lo,
 * matmul_backward_lo): bf16/fp16 operands, fp32 accumulate and outputs.
 *
 * The GEMMs run through cuBLASLt with A/B in lo, C/D fp32, CUBLAS_COMPUTE_32F: tensor
 * cores multiply the lo operands exactly and accumulate in fp32, which is the contract's
 * "operands rounded to lo, fp32 accumulate".  Activations and dout are rounded into
 * grow-only lo buffers of the context first, by the same kernel as cast_lo.  A plan
 * (descriptors + algorithm) is cached per GEMM shape; when cuBLASLt has no algorithm or
 * refuses a call, cublasGemmEx with the same types computes it instead. */
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/cuda/cuda_internal.h"
#include "kernels/cuda/cuda_lo.cuh"
extern "C" {
#include "kernels/cuda/cuda_ext.h"
}

#define LC_LO_PLANS 32

struct lc_lo_plan {
    int used;
    /* key */
    int lo, ta, tb, m, n, k, lda, ldb, ldc, bias;
    uint32_t al_a, al_b, al_c;
    /* value */
    int have_algo;                 /* 0: cuBLASLt found none, use cublasGemmEx */
    cublasLtMatmulDesc_t op;
    cublasLtMatrixLayout_t la, lb, ld;
    cublasLtMatmulAlgo_t algo;
};

template <int LO>
__global__ void lc_cast_kernel(uint16_t *dst, const float *src, size_t n)
{
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n;
         i += (size_t)gridDim.x * blockDim.x)
        dst[i] = LO == LC_DT_BF16 ? lc_to_bf16(src[i]) : lc_to_f16(src[i]);
}

static int lc_lo_ok(lc_ctx *c, int lo, const char *op)
{
    if (lo == LC_DT_BF16 || lo == LC_DT_F16) return 1;
    lc_fail_cuda(c, cudaErrorInvalidValue, op, __FILE__, __LINE__);
    return 0;
}

/* dst(n) lo = round(src(n)); 0, or -1 after recording an error */
extern "C" int lc_lo_cast(lc_ctx *c, void *dst, const float *src, size_t n, int lo)
{
    if (!n) return 0;
    unsigned nb = lc_blocks(n, 256, 65535u * 4);
    if (lo == LC_DT_BF16)
        lc_cast_kernel<LC_DT_BF16><<<nb, 256, 0, c->stream>>>((uint16_t *)dst, src, n);
    else
        lc_cast_kernel<LC_DT_F16><<<nb, 256, 0, c->stream>>>((uint16_t *)dst, src, n);
    return LC_LAUNCHED(c) ? -1 : 0;
}

static void lc_cast_lo(llm_backend *be, void *dst, const float *src, size_t n, int lo)
{
    lc_ctx *c = lc_get(be);
    if (lc_lo_ok(c, lo, "cast_lo: lo is neither bf16 nor f16")) lc_lo_cast(c, dst, src, n, lo);
}

/* Grow-only lo buffer i of at least bytes, or NULL after recording an error.  Growing
 * frees the old block (cudaFree waits for the work queued on it). */
extern "C" void *lc_lo_buf(lc_ctx *c, int i, size_t bytes)
{
    if (c->lo_bytes[i] >= bytes && c->lo_buf[i]) return c->lo_buf[i];
    if (c->lo_buf[i]) LC_CK(c, lc_dfree(c, c->lo_buf[i]));
    c->lo_buf[i] = NULL;
    c->lo_bytes[i] = 0;
    size_t want = bytes + bytes / 8;
    if (LC_CK(c, lc_dmalloc(c, &c->lo_buf[i], want))) { c->lo_buf[i] = NULL; return NULL; }
    c->lo_bytes[i] = want;
    return c->lo_buf[i];
}

/* ---- GEMM plans ---- */

static uint32_t lc_lo_align(const void *p)
{
    uintptr_t a = (uintptr_t)p;
    return (a % 16 == 0) ? 16 : (a % 8 == 0) ? 8 : (a % 4 == 0) ? 4 : 2;
}

static void lc_plan_destroy(struct lc_lo_plan *p)
{
    if (p->ld) cublasLtMatrixLayoutDestroy(p->ld);
    if (p->lb) cublasLtMatrixLayoutDestroy(p->lb);
    if (p->la) cublasLtMatrixLayoutDestroy(p->la);
    if (p->op) cublasLtMatmulDescDestroy(p->op);
    memset(p, 0, sizeof *p);
}

extern "C" void lc_lo_release(lc_ctx *c)
{
    if (c->lo_plans) {
        for (int i = 0; i < LC_LO_PLANS; i++) lc_plan_destroy(&c->lo_plans[i]);
        free(c->lo_plans);
        c->lo_plans = NULL;
    }
    for (int i = 0; i < LC_LO_BUFS; i++) {
        if (c->lo_buf[i]) lc_dfree(c, c->lo_buf[i]);
        c->lo_buf[i] = NULL;
        c->lo_bytes[i] = 0;
    }
}

/* Descriptors and the heuristic's first algorithm for key k (in the row-major terms of
 * lc_lo_gemm); p->have_algo = 0 when cuBLASLt offers none.  -1 when the host is out of
 * memory for descriptors (the caller falls back). */
static int lc_plan_build(lc_ctx *c, struct lc_lo_plan *p, const float *bias)
{
    cudaDataType_t t = p->lo == LC_DT_BF16 ? CUDA_R_16BF : CUDA_R_16F, f = CUDA_R_32F;
    /* Column-major view (see lc_gemm_rm): D(n x m) = op(B') op(A') with Lt's "A" the
     * row-major B and Lt's "B" the row-major A, transposes unchanged. */
    cublasOperation_t tA = p->tb ? CUBLAS_OP_T : CUBLAS_OP_N, tB = p->ta ? CUBLAS_OP_T : CUBLAS_OP_N;
    cublasLtEpilogue_t epi = p->bias ? CUBLASLT_EPILOGUE_BIAS : CUBLASLT_EPILOGUE_DEFAULT;
    cudaDataType_t bias_t = CUDA_R_32F;
    size_t ws = c->ws_bytes;
    cublasLtMatmulPreference_t pref = NULL;
    cublasLtMatmulHeuristicResult_t res;
    int nres = 0;
    p->have_algo = 0;
    if (cublasLtMatmulDescCreate(&p->op, CUBLAS_COMPUTE_32F, CUDA_R_32F) ||
        cublasLtMatmulDescSetAttribute(p->op, CUBLASLT_MATMUL_DESC_TRANSA, &tA, sizeof tA) ||
        cublasLtMatmulDescSetAttribute(p->op, CUBLASLT_MATMUL_DESC_TRANSB, &tB, sizeof tB) ||
        cublasLtMatmulDescSetAttribute(p->op, CUBLASLT_MATMUL_DESC_EPILOGUE, &epi, sizeof epi) ||
        (p->bias && (cublasLtMatmulDescSetAttribute(p->op, CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE,
                                                    &bias_t, sizeof bias_t) ||
                     cublasLtMatmulDescSetAttribute(p->op, CUBLASLT_MATMUL_DESC_BIAS_POINTER,
                                                    &bias, sizeof bias))))
        return -1;
    if (cublasLtMatrixLayoutCreate(&p->la, t, p->tb ? p->k : p->n, p->tb ? p->n : p->k, p->ldb) ||
        cublasLtMatrixLayoutCreate(&p->lb, t, p->ta ? p->m : p->k, p->ta ? p->k : p->m, p->lda) ||
        cublasLtMatrixLayoutCreate(&p->ld, f, p->n, p->m, p->ldc))
        return -1;
    if (cublasLtMatmulPreferenceCreate(&pref)) return -1;
    if (!cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &ws, sizeof ws) &&
        !cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, &p->al_b, sizeof p->al_b) &&
        !cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES, &p->al_a, sizeof p->al_a) &&
        !cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, &p->al_c, sizeof p->al_c) &&
        !cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES, &p->al_c, sizeof p->al_c) &&
        !cublasLtMatmulAlgoGetHeuristic(c->lt, p->op, p->la, p->lb, p->ld, p->ld, pref, 1, &res, &nres) &&
        nres >= 1) {
        p->algo = res.algo;
        p->have_algo = 1;
    }
    cublasLtMatmulPreferenceDestroy(pref);
    return 0;
}

/* The cached plan for this key, built on a miss (evicting round-robin when full), or
 * NULL when none could be built. */
static struct lc_lo_plan *lc_plan_get(lc_ctx *c, const struct lc_lo_plan *key,
                                      const float *bias)
{
    if (!c->lo_plans) {
        c->lo_plans = (struct lc_lo_plan *)calloc(LC_LO_PLANS, sizeof *c->lo_plans);
        if (!c->lo_plans) return NULL;
    }
    struct lc_lo_plan *slot = NULL;
    for (int i = 0; i < LC_LO_PLANS; i++) {
        struct lc_lo_plan *p = &c->lo_plans[i];
        if (!p->used) { if (!slot) slot = p; continue; }
        if (p->lo == key->lo && p->ta == key->ta && p->tb == key->tb && p->m == key->m &&
            p->n == key->n && p->k == key->k && p->lda == key->lda && p->ldb == key->ldb &&
            p->ldc == key->ldc && p->bias == key->bias && p->al_a == key->al_a &&
            p->al_b == key->al_b && p->al_c == key->al_c)
            return p;
    }
    if (!slot) {
        slot = &c->lo_plans[c->lo_next++ % LC_LO_PLANS];
        lc_plan_destroy(slot);
    }
    *slot = *key;
    slot->op = NULL;
    slot->la = slot->lb = slot->ld = NULL;
    if (lc_plan_build(c, slot, bias)) { lc_plan_destroy(slot); return NULL; }
    slot->used = 1;
    return slot;
}

__global__ void lc_lo_bias_kernel(float *out, const float *bias, size_t rows, int OC)
{
    size_t total = rows * (size_t)OC;
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < total;
         i += (size_t)gridDim.x * blockDim.x)
        out[i] += bias[i % OC];
}

/* Row-major C(m x n, ldc) fp32 = op(A) op(B) + beta C [+ bias(n) on every row], A and B
 * lo (ta/tb: stored transposed), fp32 accumulate. */
static void lc_lo_gemm(lc_ctx *c, int lo, int ta, int tb, int m, int n, int k,
                       const void *A, int lda, const void *B, int ldb, float beta,
                       float *C, int ldc, const float *bias)
{
    const float alpha = 1.0f;
    if (!c->lo_force_ex) {
        struct lc_lo_plan key;
        memset(&key, 0, sizeof key);
        key.lo = lo; key.ta = ta; key.tb = tb; key.m = m; key.n = n; key.k = k;
        key.lda = lda; key.ldb = ldb; key.ldc = ldc; key.bias = bias != NULL;
        key.al_a = lc_lo_align(A); key.al_b = lc_lo_align(B); key.al_c = lc_lo_align(C);
        struct lc_lo_plan *p = lc_plan_get(c, &key, bias);
        if (p && p->have_algo &&
            (!bias || !cublasLtMatmulDescSetAttribute(p->op, CUBLASLT_MATMUL_DESC_BIAS_POINTER,
                                                      &bias, sizeof bias)) &&
            cublasLtMatmul(c->lt, p->op, &alpha, B, p->la, A, p->lb, &beta, C, p->ld, C, p->ld,
                           &p->algo, c->lt_ws, c->ws_bytes, c->stream) == CUBLAS_STATUS_SUCCESS) {
            c->lo_runs[0]++;
            return;
        }
    }
    /* cuBLASLt validates before it launches: nothing was written, compute it here */
    cudaDataType_t t = lo == LC_DT_BF16 ? CUDA_R_16BF : CUDA_R_16F;
    if (LC_CKB(c, cublasGemmEx(c->blas, tb ? CUBLAS_OP_T : CUBLAS_OP_N, ta ? CUBLAS_OP_T : CUBLAS_OP_N,
                               n, m, k, &alpha, B, t, ldb, A, t, lda, &beta, C, CUDA_R_32F, ldc,
                               CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT)))
        return;
    c->lo_runs[1]++;
    if (bias) {
        size_t total = (size_t)m * n;
        lc_lo_bias_kernel<<<lc_blocks(total, 256, 65535), 256, 0, c->stream>>>(C, bias, (size_t)m, n);
        LC_LAUNCHED(c);
    }
}

/* ---- the ops ---- */

static void lc_matmul_forward_lo(llm_backend *be, float *out, const float *inp, const void *w_lo,
                                 int lo, const float *bias, int N, int C, int OC)
{
    lc_ctx *c = lc_get(be);
    if (N <= 0 || OC <= 0 || !lc_lo_ok(c, lo, "matmul_forward_lo: lo is neither bf16 nor f16"))
        return;
    if (C <= 0) {   /* empty sum: out = bias or 0 */
        if (LC_CK(c, cudaMemsetAsync(out, 0, (size_t)N * OC * sizeof(float), c->stream)) || !bias)
            return;
        size_t total = (size_t)N * OC;
        lc_lo_bias_kernel<<<lc_blocks(total, 256, 65535), 256, 0, c->stream>>>(out, bias, (size_t)N, OC);
        LC_LAUNCHED(c);
        return;
    }
    void *x = lc_lo_buf(c, 0, (size_t)N * C * 2);
    if (!x || lc_lo_cast(c, x, inp, (size_t)N * C, lo)) return;
    /* out(N,OC) = x(N,C) w(OC,C)^T + bias */
    lc_lo_gemm(c, lo, 0, 1, N, OC, C, x, C, w_lo, C, 0.0f, out, OC, bias);
}

/* Column sums of lo(dout)(N,OC) added to dbias, in an order fixed by N and OC alone:
 * blocks of 32 columns x rows_per rows write partial sums (8 row-strided threads per
 * column, combined in order), then one thread per column adds the partials in order. */
template <typename T>
__global__ void lc_colsum_part_kernel(float *part, const T *x, int N, int OC, int rows_per)
{
    __shared__ float sh[8][33];
    int col = blockIdx.x * 32 + threadIdx.x;
    int r0 = blockIdx.y * rows_per, r1 = min(N, r0 + rows_per);
    float s = 0.0f;
    if (col < OC)
        for (int r = r0 + (int)threadIdx.y; r < r1; r += 8) s += (float)x[(size_t)r * OC + col];
    sh[threadIdx.y][threadIdx.x] = s;
    __syncthreads();
    if (threadIdx.y == 0 && col < OC) {
        float t = sh[0][threadIdx.x];
        for (int i = 1; i < 8; i++) t += sh[i][threadIdx.x];
        part[(size_t)blockIdx.y * OC + col] = t;
    }
}

__global__ void lc_colsum_final_kernel(float *dbias, const float *part, int R, int OC)
{
    for (int col = blockIdx.x * blockDim.x + threadIdx.x; col < OC; col += gridDim.x * blockDim.x) {
        float s = 0.0f;
        for (int r = 0; r < R; r++) s += part[(size_t)r * OC + col];
        dbias[col] += s;
    }
}

static void lc_dbias_lo(lc_ctx *c, float *dbias, const void *dlo, int lo, int N, int OC)
{
    int R = (N + 63) / 64;
    if (R > 1024) R = 1024;
    int rows_per = (N + R - 1) / R;
    float *part = (float *)lc_scratch(c, (size_t)R * OC * sizeof(float));
    if (!part) return;
    dim3 grid((unsigned)((OC + 31) / 32), (unsigned)R), block(32, 8);
    if (lo == LC_DT_BF16)
        lc_colsum_part_kernel<<<grid, block, 0, c->stream>>>(part, (const __nv_bfloat16 *)dlo, N, OC, rows_per);
    else
        lc_colsum_part_kernel<<<grid, block, 0, c->stream>>>(part, (const __half *)dlo, N, OC, rows_per);
    if (LC_LAUNCHED(c)) return;
    lc_colsum_final_kernel<<<lc_blocks((size_t)OC, 256, 4096), 256, 0, c->stream>>>(dbias, part, R, OC);
    LC_LAUNCHED(c);
}

static void lc_matmul_backward_lo(llm_backend *be, float *dinp, float *dw, float *dbias,
                                  const float *dout, const float *inp, const void *w_lo, int lo,
                                  int N, int C, int OC)
{
    lc_ctx *c = lc_get(be);
    if (N <= 0 || OC <= 0 || !lc_lo_ok(c, lo, "matmul_backward_lo: lo is neither bf16 nor f16"))
        return;
    void *d = lc_lo_buf(c, 0, (size_t)N * OC * 2);
    if (!d || lc_lo_cast(c, d, dout, (size_t)N * OC, lo)) return;
    if (C > 0) {
        void *x = lc_lo_buf(c, 1, (size_t)N * C * 2);
        if (!x || lc_lo_cast(c, x, inp, (size_t)N * C, lo)) return;
        /* dinp(N,C) += d(N,OC) @ w(OC,C) */
        lc_lo_gemm(c, lo, 0, 0, N, C, OC, d, OC, w_lo, C, 1.0f, dinp, C, NULL);
        /* dw(OC,C) += d^T @ x(N,C) */
        lc_lo_gemm(c, lo, 1, 0, OC, C, N, d, OC, x, C, 1.0f, dw, C, NULL);
    }
    if (dbias) lc_dbias_lo(c, dbias, d, lo, N, OC);
}

extern "C" void lc_fill_lo(llm_backend *be)
{
    be->cast_lo = lc_cast_lo;
    be->matmul_forward_lo = lc_matmul_forward_lo;
    be->matmul_backward_lo = lc_matmul_backward_lo;
}

/* ---- cuda_ext.h ---- */

extern "C" void llm_backend_cuda_lo_gemm_path(llm_backend *be, int force_gemmex, long runs[2])
{
    lc_ctx *c = lc_get(be);
    if (!c) return;
    if (runs) { runs[0] = c->lo_runs[0]; runs[1] = c->lo_runs[1]; }
    if (force_gemmex >= 0) c->lo_force_ex = force_gemmex != 0;
}
