/* quant_x86.h — internal: x86 SIMD pieces shared by quant_avx2.c and quant_avx512.c.
 * The functions carry the AVX2 target; callers compiled for a superset (AVX-512) inline
 * them too. */
#ifndef LLM_QUANT_X86_H
#define LLM_QUANT_X86_H

#include <immintrin.h>

#include "kernels/cpu/quant_kern.h"

/* The 32 int8 weight values of q8_0/q4_0 (dt) block b of row wr (q4_0 unpacked to
 * -8..7) and, in *d, its scale. */
__attribute__((target("avx2,fma,f16c"))) static inline __m256i
llm_qk_load_wblock(const char *wr, int dt, int b, float *d)
{
    uint16_t h;
    if (dt == LLM_QK_Q8_0) {
        const llm_block_q8_0 *w = (const llm_block_q8_0 *)wr + b;
        memcpy(&h, &w->d, 2);
        *d = _cvtsh_ss(h);
        return _mm256_loadu_si256((const __m256i *)w->q);
    }
    const llm_block_q4_0 *w = (const llm_block_q4_0 *)wr + b;
    memcpy(&h, &w->d, 2);
    *d = _cvtsh_ss(h);
    __m128i v = _mm_loadu_si128((const __m128i *)w->q), m = _mm_set1_epi8(0x0f);
    __m128i lo = _mm_and_si128(v, m), hi = _mm_and_si128(_mm_srli_epi16(v, 4), m);
    return _mm256_sub_epi8(_mm256_set_m128i(hi, lo), _mm256_set1_epi8(8));
}

#endif
