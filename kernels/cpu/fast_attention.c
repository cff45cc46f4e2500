/* fast_attention.c — "cpu" causal multi-head self-attention, forward and backward.
 *
 * Per (batch, head) the products Q K^T, P V, dO V^T, dS K, dS^T Q, P^T dO are OpenBLAS
 * GEMMs read straight out of the (B,T,3C) qkv buffer (leading dimension 3C) and the
 * (B,NH,T,T) att buffer, tiled in blocks of RB rows (or columns) so that the causal
 * triangle above the diagonal is mostly skipped at long T.  The softmax and its backward
 * are AVX2 loops over the rows.
 *
 * Threads: an OpenMP region of be->threads threads takes the (b,h) pairs; OpenBLAS is
 * set to one thread for the region, so each thread runs its GEMMs itself (1 x threads). */
#include <cblas.h>
#include <math.h>
#include <string.h>

#include "kernels/cpu/cpu_ops.h"
#include "kernels/cpu/simd.h"

#define RB 64

/* Row a[0..n) <- softmax(a[0..n)) in place; a[n..T) <- 0. */
LLM_AVX2 static void softmax_row_avx2(float *a, int n, int T)
{
    __m256 vm = _mm256_set1_ps(-INFINITY);
    int j = 0;
    for (; j + 8 <= n; j += 8)
        vm = _mm256_max_ps(vm, _mm256_loadu_ps(a + j));
    float mx = llm_hmax8(vm);
    for (int k = j; k < n; k++)
        mx = a[k] > mx ? a[k] : mx;
    vm = _mm256_set1_ps(mx);
    __m256 vs = _mm256_setzero_ps();
    for (j = 0; j + 8 <= n; j += 8) {
        __m256 e = llm_exp8(_mm256_sub_ps(_mm256_loadu_ps(a + j), vm));
        _mm256_storeu_ps(a + j, e);
        vs = _mm256_add_ps(vs, e);
    }
    float s = llm_hsum8(vs);
    for (int k = j; k < n; k++) {
        a[k] = expf(a[k] - mx);
        s += a[k];
    }
    __m256 vi = _mm256_set1_ps(1.0f / s);
    for (j = 0; j + 8 <= n; j += 8)
        _mm256_storeu_ps(a + j, _mm256_mul_ps(_mm256_loadu_ps(a + j), vi));
    for (int k = j; k < n; k++)
        a[k] *= 1.0f / s;
    memset(a + n, 0, sizeof(float) * (size_t)(T - n));
}

static void softmax_row_generic(float *a, int n, int T)
{
    float mx = -INFINITY, s = 0;
    for (int k = 0; k < n; k++)
        mx = a[k] > mx ? a[k] : mx;
    for (int k = 0; k < n; k++) {
        a[k] = expf(a[k] - mx);
        s += a[k];
    }
    for (int k = 0; k < n; k++)
        a[k] *= 1.0f / s;
    memset(a + n, 0, sizeof(float) * (size_t)(T - n));
}

/* d[0..n) <- p (d - sum(p d)) * scale (softmax backward, the scale of the scores folded
 * in); d[n..m) <- 0. */
LLM_INLINE void dsoftmax_row(float *d, const float *p, int n, int m, float scale)
{
    float pd = 0;
#pragma omp simd reduction(+ : pd)
    for (int k = 0; k < n; k++)
        pd += p[k] * d[k];
#pragma omp simd
    for (int k = 0; k < n; k++)
        d[k] = p[k] * (d[k] - pd) * scale;
    if (m > n)
        memset(d + n, 0, sizeof(float) * (size_t)(m - n));
}

LLM_AVX2 static void dsoftmax_row_avx2(float *d, const float *p, int n, int m, float scale)
{
    dsoftmax_row(d, p, n, m, scale);
}

static void dsoftmax_row_generic(float *d, const float *p, int n, int m, float scale)
{
    dsoftmax_row(d, p, n, m, scale);
}

void llm_fast_attention_forward(llm_backend *be, float *out, float *att, const float *qkv,
                                int B, int T, int C, int NH)
{
    int nt = llm_cpu_threads(be), avx2 = llm_cpu_avx2(be), hs = C / NH, ld = 3 * C;
    float scale = 1.0f / sqrtf((float)hs);
    llm_cpu_blas_threads(1);
#pragma omp parallel for num_threads(nt) schedule(static)
    for (int bh = 0; bh < B * NH; bh++) {
        int b = bh / NH, h = bh % NH;
        const float *q = qkv + (size_t)b * T * ld + (size_t)h * hs, *k = q + C, *v = q + 2 * C;
        float *a = att + (size_t)bh * T * T, *o = out + (size_t)b * T * C + (size_t)h * hs;
        for (int i0 = 0; i0 < T; i0 += RB) {
            int i1 = i0 + RB < T ? i0 + RB : T, rows = i1 - i0;
            /* scores of rows i0..i1 against keys 0..i1 (the causal part of the tile) */
            cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, rows, i1, hs, scale,
                        q + (size_t)i0 * ld, ld, k, ld, 0.0f, a + (size_t)i0 * T, T);
            for (int t = i0; t < i1; t++) {
                if (avx2)
                    softmax_row_avx2(a + (size_t)t * T, t + 1, T);
                else
                    softmax_row_generic(a + (size_t)t * T, t + 1, T);
            }
            cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, rows, hs, i1, 1.0f,
                        a + (size_t)i0 * T, T, v, ld, 0.0f, o + (size_t)i0 * C, C);
        }
    }
}

void llm_fast_attention_backward(llm_backend *be, float *dqkv, const float *dout,
                                 const float *qkv, const float *att, int B, int T, int C,
                                 int NH)
{
    int nt = llm_cpu_threads(be), avx2 = llm_cpu_avx2(be), hs = C / NH, ld = 3 * C;
    float scale = 1.0f / sqrtf((float)hs);
    if (nt > B * NH)
        nt = B * NH > 0 ? B * NH : 1;
    float *scratch = llm_cpu_scratch(be, (size_t)nt * T * T);
    if (!scratch)
        return; /* ops cannot fail; a failed T*T scratch allocation leaves dqkv as is */
    llm_cpu_blas_threads(1);
#pragma omp parallel num_threads(nt)
    {
        float *ds = scratch + (size_t)omp_get_thread_num() * T * T;
#pragma omp for schedule(static)
        for (int bh = 0; bh < B * NH; bh++) {
            int b = bh / NH, h = bh % NH;
            size_t base = (size_t)b * T * ld + (size_t)h * hs;
            const float *q = qkv + base, *k = q + C, *v = q + 2 * C;
            float *dq = dqkv + base, *dk = dq + C, *dv = dq + 2 * C;
            const float *p = att + (size_t)bh * T * T;
            const float *dO = dout + (size_t)b * T * C + (size_t)h * hs;
            for (int i0 = 0; i0 < T; i0 += RB) {
                int i1 = i0 + RB < T ? i0 + RB : T, rows = i1 - i0;
                /* dP = dO V^T on the causal part of the row block, then dS in place */
                cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, rows, i1, hs, 1.0f,
                            dO + (size_t)i0 * C, C, v, ld, 0.0f, ds + (size_t)i0 * T, T);
                for (int t = i0; t < i1; t++) {
                    if (avx2)
                        dsoftmax_row_avx2(ds + (size_t)t * T, p + (size_t)t * T, t + 1, i1, scale);
                    else
                        dsoftmax_row_generic(ds + (size_t)t * T, p + (size_t)t * T, t + 1, i1,
                                             scale);
                }
                /* dQ[rows] += dS[rows, 0..i1) K[0..i1) */
                cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, rows, hs, i1, 1.0f,
                            ds + (size_t)i0 * T, T, k, ld, 1.0f, dq + (size_t)i0 * ld, ld);
            }
            for (int j0 = 0; j0 < T; j0 += RB) {
                int j1 = j0 + RB < T ? j0 + RB : T, cols = j1 - j0;
                /* keys/values j0..j1 receive from queries j0..T (the causal part) */
                cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, cols, hs, T - j0, 1.0f,
                            ds + (size_t)j0 * T + j0, T, q + (size_t)j0 * ld, ld, 1.0f,
                            dk + (size_t)j0 * ld, ld);
                cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, cols, hs, T - j0, 1.0f,
                            p + (size_t)j0 * T + j0, T, dO + (size_t)j0 * C, C, 1.0f,
                            dv + (size_t)j0 * ld, ld);
            }
        }
    }
}
