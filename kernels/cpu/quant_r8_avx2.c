/* quant_r8_avx2.c — AVX2 decode kernels for q4_0 weights repacked in groups of 8 rows
 * (LLM_QK_Q4_0R8, quant_kern.h).
 *
 * Per activation block and group: the 4 nibble chunks (32 bytes each) are split into
 * low and high nibbles, unsigned 0..15, whose 32-bit lane r holds 4 weights of row r;
 * maddubs against the matching 4 activation bytes broadcast to every lane gives pair
 * sums of at most 2*15*127 = 3810 in magnitude, and the 8 of them that land in one int16
 * lane sum to at most 30480: added in int16 without overflow.  One madd then gives each
 * row's sum of u*x in its int32 lane, and subtracting 8 * sum(x) (per activation block,
 * computed once per call) gives the exact integer block dot of the offset-8 weights.
 * Lane r then takes (float)dot * (dw_r * dx) and adds it to its accumulator, block after
 * block: the order and the roundings of llm_qk_rows_scalar, so the results are the
 * scalar kernel's bit for bit, for every R (and independent of N). */
#include <immintrin.h>

#include "kernels/cpu/quant_kern.h"

#define TGT __attribute__((target("avx2,fma,f16c")))
#define PREFETCH_AHEAD 4096

TGT __attribute__((always_inline)) static inline __m256i bcast4(const int8_t *p)
{
    int32_t v;
    memcpy(&v, p, 4);
    return _mm256_set1_epi32(v);
}

/* One group of 8 rows (g: its first byte) against R input rows; the 8 results of input
 * row r in res[r]. */
TGT __attribute__((always_inline)) static inline void
group(__m256 *res, const unsigned char *g, const llm_block_q8_0 *xq, const int32_t *xs,
      const float *xd, int R, int nb)
{
    const uint16_t *sc = (const uint16_t *)(g + (size_t)nb * 128);
    const __m256i m4 = _mm256_set1_epi8(0x0f), ones = _mm256_set1_epi16(1);
    __m256 acc[4];
    for (int r = 0; r < R; r++)
        acc[r] = _mm256_setzero_ps();
    for (int b = 0; b < nb; b++) {
        const __m256i *p = (const __m256i *)(g + (size_t)b * 128);
        /* decode streams the weights once from memory: ask for them well ahead (about
         * one group at C = 768; on 2 cores of an EPYC VM all of GPT-2 small's decode
         * matmuls took 1/1.5 of the time without, about the same from 4 to 16 KiB) */
        _mm_prefetch((const char *)p + PREFETCH_AHEAD, _MM_HINT_T0);
        _mm_prefetch((const char *)p + PREFETCH_AHEAD + 64, _MM_HINT_T0);
        __m256i s[4];
        for (int j = 0; j < 4; j++) {
            __m256i v = _mm256_loadu_si256(p + j);
            __m256i lo = _mm256_and_si256(v, m4), hi = _mm256_and_si256(_mm256_srli_epi16(v, 4), m4);
            for (int r = 0; r < R; r++) {
                const int8_t *x = xq[(size_t)r * nb + b].q;
                __m256i t = _mm256_add_epi16(_mm256_maddubs_epi16(lo, bcast4(x + 4 * j)),
                                             _mm256_maddubs_epi16(hi, bcast4(x + 16 + 4 * j)));
                s[r] = j ? _mm256_add_epi16(s[r], t) : t;
            }
        }
        __m256 dw = _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(sc + 8 * (size_t)b)));
        for (int r = 0; r < R; r++) {
            size_t i = (size_t)r * nb + b;
            __m256i d = _mm256_sub_epi32(_mm256_madd_epi16(s[r], ones), _mm256_set1_epi32(xs[i]));
            __m256 sc8 = _mm256_mul_ps(dw, _mm256_broadcast_ss(xd + i));
            acc[r] = _mm256_add_ps(acc[r], _mm256_mul_ps(_mm256_cvtepi32_ps(d), sc8));
        }
    }
    for (int r = 0; r < R; r++)
        res[r] = acc[r];
}

TGT void llm_qk_rows_r8_avx2(float *out, int ldo, const void *w, const llm_block_q8_0 *xq,
                             const int32_t *xs, const float *xd, int R, int nb, int o0, int o1)
{
    for (int g = o0 / 8; 8 * g < o1; g++) {
        const unsigned char *gp = (const unsigned char *)w + (size_t)g * nb * 144;
        __m256 res[4];
        /* constant R so the accumulators live in registers */
        switch (R) {
        case 1: group(res, gp, xq, xs, xd, 1, nb); break;
        case 2: group(res, gp, xq, xs, xd, 2, nb); break;
        case 3: group(res, gp, xq, xs, xd, 3, nb); break;
        default: group(res, gp, xq, xs, xd, 4, nb); break;
        }
        int a = o0 > 8 * g ? o0 - 8 * g : 0, e = o1 < 8 * g + 8 ? o1 - 8 * g : 8;
        for (int r = 0; r < R; r++) {
            if (a == 0 && e == 8) {
                _mm256_storeu_ps(out + (size_t)r * ldo + 8 * g, res[r]);
            } else {   /* the ends of the range: only its rows */
                _Alignas(32) float t[8];
                _mm256_store_ps(t, res[r]);
                memcpy(out + (size_t)r * ldo + 8 * g + a, t + a, (size_t)(e - a) * sizeof(float));
            }
        }
    }
}

/* Rows o0..o0+n of a LLM_QK_Q4_0R8 matrix to f32 (the prefill path's sgemm operand):
 * per row and block, the 4-byte runs of the 4 chunks gathered into 16 bytes hold weights
 * 0..15 (low nibbles) and 16..31 (high); d * (u - 8) rounded once, as the scalar
 * dequantization does. */
TGT void llm_qk_dequantize_r8_avx2(const void *w, int C, int64_t o0, int n, float *y)
{
    int nb = C / 32;
    const __m128i m4 = _mm_set1_epi8(0x0f);
    const __m256i eight = _mm256_set1_epi32(8);
    for (int64_t g = o0 / 8; g * 8 < o0 + n; g++) {
        const unsigned char *q = (const unsigned char *)w + (size_t)g * nb * 144, *sc = q + (size_t)nb * 128;
        for (int r = 0; r < 8; r++) {
            int64_t o = g * 8 + r;
            if (o < o0 || o >= o0 + n)
                continue;
            float *yr = y + (size_t)(o - o0) * C;
            for (int b = 0; b < nb; b++) {
                const unsigned char *p = q + (size_t)b * 128 + 4 * r;
                int32_t c[4];
                for (int j = 0; j < 4; j++)
                    memcpy(&c[j], p + 32 * j, 4);
                __m128i v = _mm_set_epi32(c[3], c[2], c[1], c[0]);
                __m128i lo = _mm_and_si128(v, m4), hi = _mm_and_si128(_mm_srli_epi16(v, 4), m4);
                uint16_t h;
                memcpy(&h, sc + (size_t)b * 16 + 2 * r, 2);
                __m256 d = _mm256_set1_ps(_cvtsh_ss(h));
                float *yb = yr + (size_t)b * 32;
#define DQ8(src, k)                                                                         \
    _mm256_storeu_ps(yb + (k), _mm256_mul_ps(d, _mm256_cvtepi32_ps(_mm256_sub_epi32(      \
                                               _mm256_cvtepu8_epi32(src), eight))))
                DQ8(lo, 0);
                DQ8(_mm_srli_si128(lo, 8), 8);
                DQ8(hi, 16);
                DQ8(_mm_srli_si128(hi, 8), 24);
#undef DQ8
            }
        }
    }
}
