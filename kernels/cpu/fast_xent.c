/* fast_xent.c — "cpu" fused softmax + cross-entropy over a padded vocabulary.
 * Rows are split across be->threads OpenMP threads.  Per row the forward reads the V real
 * logits twice (max, then sum of exp: the row stays in cache between), the backward once;
 * padded columns are never read by the forward and are written 0 by the backward. */
#include <math.h>

#include "kernels/cpu/cpu_ops.h"
#include "kernels/cpu/simd.h"

LLM_AVX2 static float lse_avx2(const float *x, int V)
{
    __m256 m0 = _mm256_set1_ps(-INFINITY), m1 = m0;
    int j = 0;
    for (; j + 16 <= V; j += 16) {
        m0 = _mm256_max_ps(m0, _mm256_loadu_ps(x + j));
        m1 = _mm256_max_ps(m1, _mm256_loadu_ps(x + j + 8));
    }
    float mx = llm_hmax8(_mm256_max_ps(m0, m1));
    for (int k = j; k < V; k++)
        mx = x[k] > mx ? x[k] : mx;
    __m256 vm = _mm256_set1_ps(mx), s0 = _mm256_setzero_ps(), s1 = s0;
    for (j = 0; j + 16 <= V; j += 16) {
        s0 = _mm256_add_ps(s0, llm_exp8(_mm256_sub_ps(_mm256_loadu_ps(x + j), vm)));
        s1 = _mm256_add_ps(s1, llm_exp8(_mm256_sub_ps(_mm256_loadu_ps(x + j + 8), vm)));
    }
    if (j + 8 <= V) {
        s0 = _mm256_add_ps(s0, llm_exp8(_mm256_sub_ps(_mm256_loadu_ps(x + j), vm)));
        j += 8;
    }
    if (j < V) {
        __m256i mk = llm_mask8(V - j);
        __m256 e = llm_exp8(_mm256_sub_ps(_mm256_maskload_ps(x + j, mk), vm));
        s1 = _mm256_add_ps(s1, _mm256_and_ps(e, _mm256_castsi256_ps(mk)));
    }
    return mx + logf(llm_hsum8(_mm256_add_ps(s0, s1)));
}

static float lse_generic(const float *x, int V)
{
    float mx = -INFINITY, s = 0;
    for (int j = 0; j < V; j++)
        mx = x[j] > mx ? x[j] : mx;
    for (int j = 0; j < V; j++)
        s += expf(x[j] - mx);
    return mx + logf(s);
}

void llm_fast_xent_forward(llm_backend *be, float *losses, float *lse, const float *logits,
                           const int32_t *targets, int N, int V, int Vp)
{
    int nt = llm_cpu_threads(be), avx2 = llm_cpu_avx2(be);
#pragma omp parallel for num_threads(nt) schedule(static) if ((size_t)N * V > 16384)
    for (int i = 0; i < N; i++) {
        const float *x = logits + (size_t)i * Vp;
        float l = avx2 ? lse_avx2(x, V) : lse_generic(x, V);
        lse[i] = l;
        losses[i] = l - x[targets[i]];
    }
}

LLM_AVX2 static void dlogits_avx2(float *d, const float *x, float lse, int V, int Vp, float dl)
{
    __m256 vl = _mm256_set1_ps(lse), vd = _mm256_set1_ps(dl);
    int j = 0;
    for (; j + 8 <= V; j += 8)
        _mm256_storeu_ps(d + j,
                         _mm256_mul_ps(llm_exp8(_mm256_sub_ps(_mm256_loadu_ps(x + j), vl)), vd));
    for (; j < V; j++)
        d[j] = expf(x[j] - lse) * dl;
    for (; j < Vp; j++)
        d[j] = 0.0f;
}

static void dlogits_generic(float *d, const float *x, float lse, int V, int Vp, float dl)
{
    int j = 0;
    for (; j < V; j++)
        d[j] = expf(x[j] - lse) * dl;
    for (; j < Vp; j++)
        d[j] = 0.0f;
}

void llm_fast_xent_backward(llm_backend *be, float *dlogits, const float *logits,
                            const float *lse, const int32_t *targets, float dloss, int N,
                            int V, int Vp)
{
    int nt = llm_cpu_threads(be), avx2 = llm_cpu_avx2(be);
#pragma omp parallel for num_threads(nt) schedule(static) if ((size_t)N * V > 16384)
    for (int i = 0; i < N; i++) {
        const float *x = logits + (size_t)i * Vp;
        float *d = dlogits + (size_t)i * Vp;
        /* d may be x: every element is read before it is written */
        float pt = expf(x[targets[i]] - lse[i]);
        if (avx2)
            dlogits_avx2(d, x, lse[i], V, Vp, dloss);
        else
            dlogits_generic(d, x, lse[i], V, Vp, dloss);
        d[targets[i]] = (pt - 1.0f) * dloss;
    }
}
