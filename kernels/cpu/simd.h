/* simd.h — internal to kernels/cpu: small AVX2/FMA helpers.
 *
 * Every function here is compiled for AVX2+FMA through a target attribute, so the rest of
 * the build keeps generic flags; callers only reach them from code that checked
 * llm_cpu_avx2() (runtime detection via __builtin_cpu_supports) and keep a portable path. */
#ifndef LLM_CPU_SIMD_H
#define LLM_CPU_SIMD_H

#include <immintrin.h>

#define LLM_AVX2 __attribute__((target("avx2,fma")))
#define LLM_INLINE static inline __attribute__((always_inline))

/* e^x for 8 floats, relative error ~2 ulp: x is clamped above at 88.7 (e^88.7 ~ 3e38)
 * and results for x < -87 are exactly 0 (no denormals, which are slow to compute with);
 * x = n ln2 + r with |r| <= ln2/2, e^r by a degree-6 minimax polynomial, 2^n put
 * straight into the exponent bits. */
LLM_AVX2 static inline __m256 llm_exp8(__m256 x)
{
    __m256 keep = _mm256_cmp_ps(x, _mm256_set1_ps(-87.0f), _CMP_GE_OQ);
    x = _mm256_min_ps(_mm256_max_ps(x, _mm256_set1_ps(-87.0f)), _mm256_set1_ps(88.7f));
    __m256 n = _mm256_round_ps(_mm256_mul_ps(x, _mm256_set1_ps(1.44269504088896341f)),
                               _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    __m256 r = _mm256_fnmadd_ps(n, _mm256_set1_ps(0.693359375f), x);
    r = _mm256_fnmadd_ps(n, _mm256_set1_ps(-2.12194440e-4f), r);
    __m256 p = _mm256_set1_ps(1.9875691500e-4f);
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.3981999507e-3f));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(8.3334519073e-3f));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(4.1665795894e-2f));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.6666665459e-1f));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(5.0000001201e-1f));
    p = _mm256_fmadd_ps(_mm256_mul_ps(p, r), r, _mm256_add_ps(r, _mm256_set1_ps(1.0f)));
    /* n in [-126, 128]: 128 would overflow the exponent field, so scale in two halves */
    __m256i ni = _mm256_cvtps_epi32(n);
    __m256i h = _mm256_srai_epi32(ni, 1);
    __m256 s1 = _mm256_castsi256_ps(
        _mm256_slli_epi32(_mm256_add_epi32(h, _mm256_set1_epi32(127)), 23));
    __m256 s2 = _mm256_castsi256_ps(
        _mm256_slli_epi32(_mm256_add_epi32(_mm256_sub_epi32(ni, h), _mm256_set1_epi32(127)), 23));
    return _mm256_and_ps(_mm256_mul_ps(_mm256_mul_ps(p, s1), s2), keep);
}

LLM_AVX2 static inline float llm_hsum8(__m256 v)
{
    __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    s = _mm_add_ps(s, _mm_movehl_ps(s, s));
    s = _mm_add_ss(s, _mm_movehdup_ps(s));
    return _mm_cvtss_f32(s);
}

LLM_AVX2 static inline float llm_hmax8(__m256 v)
{
    __m128 s = _mm_max_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    s = _mm_max_ps(s, _mm_movehl_ps(s, s));
    s = _mm_max_ss(s, _mm_movehdup_ps(s));
    return _mm_cvtss_f32(s);
}

/* Mask selecting the first k (0..8) lanes, for loop tails. */
LLM_AVX2 static inline __m256i llm_mask8(int k)
{
    return _mm256_cmpgt_epi32(_mm256_set1_epi32(k), _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7));
}

#endif
