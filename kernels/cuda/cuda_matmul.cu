/* cuda_matmul.cu — fp32 GEMMs through cuBLAS / cuBLASLt (bias fused as an epilogue). */
#include <stdint.h>

#include "kernels/cuda/cuda_internal.h"

/* cuBLAS is column-major: a row-major (m x n) matrix with row stride ld is the
 * column-major (n x m) matrix with the same ld.  So row-major C = op(A) op(B) is computed
 * as column-major C^T = op(B)^T op(A)^T, i.e. cuBLAS with the operands swapped and the
 * same transpose flags. */
extern "C" void lc_gemm_rm(lc_ctx *c, int ta, int tb, int m, int n, int k, float alpha,
                           const float *A, int lda, long long sA,
                           const float *B, int ldb, long long sB, float beta,
                           float *C, int ldc, long long sC, int batch)
{
    if (m <= 0 || n <= 0 || batch <= 0) return;
    cublasOperation_t oa = ta ? CUBLAS_OP_T : CUBLAS_OP_N;
    cublasOperation_t ob = tb ? CUBLAS_OP_T : CUBLAS_OP_N;
    if (batch == 1)
        LC_CKB(c, cublasSgemm(c->blas, ob, oa, n, m, k, &alpha, B, ldb, A, lda, &beta, C, ldc));
    else
        LC_CKB(c, cublasSgemmStridedBatched(c->blas, ob, oa, n, m, k, &alpha, B, ldb, sB,
                                            A, lda, sA, &beta, C, ldc, sC, batch));
}

__global__ void lc_add_bias_kernel(float *out, const float *bias, size_t N, int OC)
{
    size_t total = N * (size_t)OC;
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < total;
         i += (size_t)gridDim.x * blockDim.x)
        out[i] += bias[i % OC];
}

static uint32_t lc_align(const void *p)
{
    uintptr_t a = (uintptr_t)p;
    return (a % 16 == 0) ? 16 : (a % 8 == 0) ? 8 : (a % 4 == 0) ? 4 : 1;
}

/* out(N,OC) = inp(N,C) w(OC,C)^T + bias through cuBLASLt's BIAS epilogue.  Returns 0
 * when it ran, -1 when cuBLASLt has no algorithm for it (the caller falls back). */
static int lc_matmul_lt_bias(lc_ctx *c, float *out, const float *inp, const float *w,
                             const float *bias, int N, int C, int OC)
{
    cublasLtMatmulDesc_t op = NULL;
    cublasLtMatrixLayout_t la = NULL, lb = NULL, ld = NULL;
    cublasLtMatmulPreference_t pref = NULL;
    int ran = -1;
    cublasOperation_t tA = CUBLAS_OP_T, tB = CUBLAS_OP_N;
    cublasLtEpilogue_t epi = CUBLASLT_EPILOGUE_BIAS;
    size_t ws = c->ws_bytes;
    uint32_t al_a = lc_align(w), al_b = lc_align(inp), al_d = lc_align(out);
    cublasLtMatmulHeuristicResult_t res;
    int nres = 0;
    const float alpha = 1.0f, beta = 0.0f;

    if (c->lt_off) return -1;
    /* column-major: D(OC,N) = op(W)(OC,C) X(C,N), W stored (C,OC) ld C, X stored (C,N) */
    if (cublasLtMatmulDescCreate(&op, c->tf32 ? CUBLAS_COMPUTE_32F_FAST_TF32 : CUBLAS_COMPUTE_32F,
                                 CUDA_R_32F) != CUBLAS_STATUS_SUCCESS) goto done;
    if (cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_TRANSA, &tA, sizeof tA) ||
        cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_TRANSB, &tB, sizeof tB) ||
        cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_EPILOGUE, &epi, sizeof epi) ||
        cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &bias, sizeof bias))
        goto done;
    if (cublasLtMatrixLayoutCreate(&la, CUDA_R_32F, C, OC, C) ||
        cublasLtMatrixLayoutCreate(&lb, CUDA_R_32F, C, N, C) ||
        cublasLtMatrixLayoutCreate(&ld, CUDA_R_32F, OC, N, OC))
        goto done;
    if (cublasLtMatmulPreferenceCreate(&pref) ||
        cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &ws, sizeof ws) ||
        cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, &al_a, sizeof al_a) ||
        cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES, &al_b, sizeof al_b) ||
        cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, &al_d, sizeof al_d) ||
        cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES, &al_d, sizeof al_d))
        goto done;
    if (cublasLtMatmulAlgoGetHeuristic(c->lt, op, la, lb, ld, ld, pref, 1, &res, &nres) ||
        nres < 1)
        goto done;
    /* cuBLASLt validates before it launches, so on failure nothing was written and the
     * caller's plain GEMM + bias kernel takes over */
    if (cublasLtMatmul(c->lt, op, &alpha, w, la, inp, lb, &beta, out, ld, out, ld,
                       &res.algo, c->lt_ws, c->ws_bytes, c->stream) == CUBLAS_STATUS_SUCCESS)
        ran = 0;
done:
    if (pref) cublasLtMatmulPreferenceDestroy(pref);
    if (ld) cublasLtMatrixLayoutDestroy(ld);
    if (lb) cublasLtMatrixLayoutDestroy(lb);
    if (la) cublasLtMatrixLayoutDestroy(la);
    if (op) cublasLtMatmulDescDestroy(op);
    return ran;
}

static void lc_matmul_forward(llm_backend *be, float *out, const float *inp, const float *w,
                              const float *bias, int N, int C, int OC)
{
    lc_ctx *c = lc_get(be);
    if (N <= 0 || OC <= 0) return;
    if (C <= 0) {   /* empty sum: out = bias or 0 */
        LC_CK(c, cudaMemsetAsync(out, 0, (size_t)N * OC * sizeof(float), c->stream));
    } else {
        if (bias && lc_matmul_lt_bias(c, out, inp, w, bias, N, C, OC) == 0) return;
        /* out = inp @ w^T : A = inp (N,C), op(B) = w^T with w stored (OC,C) */
        lc_gemm_rm(c, 0, 1, N, OC, C, 1.0f, inp, C, 0, w, C, 0, 0.0f, out, OC, 0, 1);
    }
    if (bias) {
        size_t total = (size_t)N * OC;
        lc_add_bias_kernel<<<lc_blocks(total, 256, 65535), 256, 0, c->stream>>>(out, bias, N, OC);
        LC_LAUNCHED(c);
    }
}

static void lc_matmul_backward(llm_backend *be, float *dinp, float *dw, float *dbias,
                               const float *dout, const float *inp, const float *w,
                               int N, int C, int OC)
{
    lc_ctx *c = lc_get(be);
    if (N <= 0 || C <= 0 || OC <= 0) return;
    /* dinp(N,C) += dout(N,OC) @ w(OC,C) */
    lc_gemm_rm(c, 0, 0, N, C, OC, 1.0f, dout, OC, 0, w, C, 0, 1.0f, dinp, C, 0, 1);
    /* dw(OC,C) += dout^T @ inp(N,C) : op(A) = dout^T with dout stored (N,OC) */
    lc_gemm_rm(c, 1, 0, OC, C, N, 1.0f, dout, OC, 0, inp, C, 0, 1.0f, dw, C, 0, 1);
    if (dbias) {
        /* dbias(OC) += sum over rows: column-major dout is (OC,N), times a ones vector.
         * cuBLAS gemv is deterministic (no atomics unless enabled). */
        const float *ones = lc_ones(c, (size_t)N);
        const float one = 1.0f;
        if (ones)
            LC_CKB(c, cublasSgemv(c->blas, CUBLAS_OP_N, OC, N, &one, dout, OC, ones, 1, &one,
                                  dbias, 1));
    }
}

extern "C" void lc_fill_matmul(llm_backend *be)
{
    be->matmul_forward = lc_matmul_forward;
    be->matmul_backward = lc_matmul_backward;
}
