/* fast_matmul.c — "cpu" matmul forward/backward on OpenBLAS cblas_sgemm, and the GEMM
 * helper every fast kernel uses (see llm_cpu_gemm in cpu_ops.h for the threading). */
#include <cblas.h>
#include <string.h>

#include "kernels/cpu/cpu_ops.h"
#include "kernels/cpu/simd.h"

/* OpenBLAS extensions (declared here too: <cblas.h> may be another vendor's header). */
void openblas_set_num_threads(int num_threads);
int openblas_get_num_threads(void);

void llm_cpu_blas_threads(int n)
{
    if (openblas_get_num_threads() != n)
        openblas_set_num_threads(n);
}

void llm_cpu_gemm(llm_backend *be, int ta, int tb, int M, int N, int K, float alpha,
                  const float *A, int lda, const float *B, int ldb, float beta, float *C, int ldc)
{
    if (M <= 0 || N <= 0)
        return;
    CBLAS_TRANSPOSE TA = ta ? CblasTrans : CblasNoTrans, TB = tb ? CblasTrans : CblasNoTrans;
    llm_cpu_ctx *ctx = be->ctx;
    int nt = ctx->threads;
    if (!ctx->gemm_omp || nt == 1 || (double)M * N * K < 1e6) {
        llm_cpu_blas_threads(ctx->gemm_omp ? 1 : nt);
        cblas_sgemm(CblasRowMajor, TA, TB, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc);
        return;
    }
    /* one OpenBLAS call per OpenMP thread on a slice of C (along its longer side) */
    llm_cpu_blas_threads(1);
    int by_rows = M >= N;
#pragma omp parallel num_threads(nt)
    {
        size_t lo, hi;
        llm_cpu_split(by_rows ? (size_t)M : (size_t)N, omp_get_thread_num(),
                      omp_get_num_threads(), &lo, &hi);
        if (hi > lo) {
            if (by_rows)
                cblas_sgemm(CblasRowMajor, TA, TB, (int)(hi - lo), N, K, alpha,
                            ta ? A + lo : A + lo * (size_t)lda, lda, B, ldb, beta,
                            C + lo * (size_t)ldc, ldc);
            else
                cblas_sgemm(CblasRowMajor, TA, TB, M, (int)(hi - lo), K, alpha, A, lda,
                            tb ? B + lo * (size_t)ldb : B + lo, ldb, beta, C + lo, ldc);
        }
    }
}

static int ld(int n)
{
    return n > 0 ? n : 1;
}

void llm_fast_matmul_forward(llm_backend *be, float *out, const float *inp, const float *w,
                             const float *bias, int N, int C, int OC)
{
    if (N <= 0 || OC <= 0)
        return;
    int nt = llm_cpu_threads(be);
    if (bias) {
        /* out = bias broadcast, then the GEMM accumulates with beta = 1 */
#pragma omp parallel for num_threads(nt) schedule(static) if (N > 8)
        for (int i = 0; i < N; i++)
            memcpy(out + (size_t)i * OC, bias, sizeof(float) * (size_t)OC);
    }
    llm_cpu_gemm(be, 0, 1, N, OC, C, 1.0f, inp, ld(C), w, ld(C), bias ? 1.0f : 0.0f, out, OC);
}

/* dbias[o0..o1) += column sums of dout(N,OC) over all rows, in row order. */
LLM_INLINE void colsum(float *dbias, const float *dout, int N, int OC, size_t o0, size_t o1)
{
    enum { W = 512 };
    float acc[W];
    for (size_t j0 = o0; j0 < o1; j0 += W) {
        size_t n = o1 - j0 < W ? o1 - j0 : W;
        memset(acc, 0, sizeof(float) * n);
        for (int i = 0; i < N; i++) {
            const float *d = dout + (size_t)i * OC + j0;
#pragma omp simd
            for (size_t j = 0; j < n; j++)
                acc[j] += d[j];
        }
        for (size_t j = 0; j < n; j++)
            dbias[j0 + j] += acc[j];
    }
}

LLM_AVX2 static void colsum_avx2(float *dbias, const float *dout, int N, int OC, size_t o0,
                                 size_t o1)
{
    colsum(dbias, dout, N, OC, o0, o1);
}

static void colsum_generic(float *dbias, const float *dout, int N, int OC, size_t o0,
                           size_t o1)
{
    colsum(dbias, dout, N, OC, o0, o1);
}

void llm_fast_matmul_backward(llm_backend *be, float *dinp, float *dw, float *dbias,
                              const float *dout, const float *inp, const float *w,
                              int N, int C, int OC)
{
    if (N <= 0 || OC <= 0)
        return;
    int nt = llm_cpu_threads(be), avx2 = llm_cpu_avx2(be);
    if (dbias) {
#pragma omp parallel num_threads(nt) if ((size_t)N * OC > 16384)
        {
            size_t lo, hi;
            llm_cpu_split((size_t)OC, omp_get_thread_num(), omp_get_num_threads(), &lo, &hi);
            if (avx2)
                colsum_avx2(dbias, dout, N, OC, lo, hi);
            else
                colsum_generic(dbias, dout, N, OC, lo, hi);
        }
    }
    if (C <= 0)
        return;
    llm_cpu_gemm(be, 0, 0, N, C, OC, 1.0f, dout, OC, w, C, 1.0f, dinp, C);
    llm_cpu_gemm(be, 1, 0, OC, C, N, 1.0f, dout, OC, inp, C, 1.0f, dw, C);
}
