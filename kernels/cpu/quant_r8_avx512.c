/* quant_r8_avx512.c — AVX-512 kernels for q4_0 weights repacked in groups of 8 rows
 * (LLM_QK_Q4_0R8, quant_kern.h), the wide form of quant_r8_avx2.c.
 *
 * Two groups (16 weight rows) per 512-bit register: lane l < 8 is row l of group g, lane
 * 8 + l row l of group g + 1.  Per activation block and chunk j, the low and high nibbles
 * (unsigned 0..15) meet the matching 4 activation bytes broadcast to every lane: with
 * VNNI, vpdpbusd adds the 4 products of each lane straight into int32; without it,
 * maddubs pairs summed in int16 (at most 30480 over the 8 of a block, as in the AVX2
 * kernel) and one madd.  Either way each lane ends with the exact sum of u*x over the
 * row's block; minus 8 * sum(x) it is the exact integer block dot of the offset-8
 * weights.  Lane by lane the result then takes (float)dot * (dw * dx) and adds it to its
 * accumulator, block after block: the order and the roundings of llm_qk_rows_scalar, so
 * the results are the scalar kernel's bit for bit, for every R (and independent of N).
 * Up to 8 input rows share each weight load. */
#include <immintrin.h>

#include "kernels/cpu/quant_kern.h"

#define TGT512 __attribute__((target("avx512f,avx512bw,avx512vl,avx2,fma,f16c")))
#define TGTVNNI __attribute__((target("avx512f,avx512bw,avx512vl,avx512vnni,avx2,fma,f16c")))
/* weights asked for this far ahead in each group's stream: on 2 Zen 5 cores, GPT-2 124M
 * q4_0 decode at batch 1 ran 5-11% faster at 8 KiB than at 4 (4 of 4 rounds), batch 8
 * within noise; 16 KiB cost batch 8 up to a third */
#define PREFETCH_AHEAD 8192

/* Bytes [off, off + 32) of groups a and b (b NULL: zeros) as one register. */
TGT512 __attribute__((always_inline)) static inline __m512i
two(const unsigned char *a, const unsigned char *b, size_t off)
{
    __m512i v = _mm512_castsi256_si512(_mm256_loadu_si256((const __m256i *)(a + off)));
    if (!b)
        return _mm512_inserti64x4(v, _mm256_setzero_si256(), 1);
    return _mm512_inserti64x4(v, _mm256_loadu_si256((const __m256i *)(b + off)), 1);
}

TGT512 __attribute__((always_inline)) static inline __m512i bcast4(const int8_t *p)
{
    int32_t v;
    memcpy(&v, p, 4);
    return _mm512_set1_epi32(v);
}

/* Groups ga and gb (NULL: none) against R input rows; row r's 16 results in res[r]. */
#define PAIR_BODY(VNNI)                                                                     \
    const __m512i m4 = _mm512_set1_epi8(0x0f);                                              \
    const unsigned char *sa = ga + (size_t)nb * 128, *sb = gb ? gb + (size_t)nb * 128 : NULL; \
    __m512 acc[8];                                                                          \
    for (int r = 0; r < R; r++)                                                             \
        acc[r] = _mm512_setzero_ps();                                                       \
    for (int b = 0; b < nb; b++) {                                                          \
        size_t off = (size_t)b * 128;                                                       \
        _mm_prefetch((const char *)ga + off + PREFETCH_AHEAD, _MM_HINT_T0);                 \
        _mm_prefetch((const char *)ga + off + PREFETCH_AHEAD + 64, _MM_HINT_T0);            \
        if (gb) {                                                                           \
            _mm_prefetch((const char *)gb + off + PREFETCH_AHEAD, _MM_HINT_T0);             \
            _mm_prefetch((const char *)gb + off + PREFETCH_AHEAD + 64, _MM_HINT_T0);        \
        }                                                                                   \
        __m512i s[8];                                                                       \
        for (int j = 0; j < 4; j++) {                                                       \
            __m512i v = two(ga, gb, off + 32 * (size_t)j);                                  \
            __m512i lo = _mm512_and_si512(v, m4);                                           \
            __m512i hi = _mm512_and_si512(_mm512_srli_epi16(v, 4), m4);                     \
            for (int r = 0; r < R; r++) {                                                   \
                const int8_t *x = xq[(size_t)r * nb + b].q;                                 \
                __m512i xl = bcast4(x + 4 * j), xh = bcast4(x + 16 + 4 * j);                \
                if (VNNI) {                                                                 \
                    __m512i t = _mm512_dpbusd_epi32(j ? s[r] : _mm512_setzero_si512(), lo, xl); \
                    s[r] = _mm512_dpbusd_epi32(t, hi, xh);                                  \
                } else {                                                                    \
                    __m512i t = _mm512_add_epi16(_mm512_maddubs_epi16(lo, xl),              \
                                                 _mm512_maddubs_epi16(hi, xh));             \
                    s[r] = j ? _mm512_add_epi16(s[r], t) : t;                               \
                }                                                                           \
            }                                                                               \
        }                                                                                   \
        __m256i hw = _mm256_castsi128_si256(_mm_loadu_si128((const __m128i *)(sa + 16 * (size_t)b))); \
        if (sb)                                                                             \
            hw = _mm256_inserti128_si256(hw, _mm_loadu_si128((const __m128i *)(sb + 16 * (size_t)b)), 1); \
        else                                                                                \
            hw = _mm256_inserti128_si256(hw, _mm_setzero_si128(), 1);                       \
        __m512 dw = _mm512_cvtph_ps(hw);                                                    \
        for (int r = 0; r < R; r++) {                                                       \
            size_t i = (size_t)r * nb + b;                                                  \
            __m512i u = VNNI ? s[r] : _mm512_madd_epi16(s[r], _mm512_set1_epi16(1));        \
            __m512i d = _mm512_sub_epi32(u, _mm512_set1_epi32(xs[i]));                      \
            __m512 sc = _mm512_mul_ps(dw, _mm512_set1_ps(xd[i]));                           \
            acc[r] = _mm512_add_ps(acc[r], _mm512_mul_ps(_mm512_cvtepi32_ps(d), sc));       \
        }                                                                                   \
    }                                                                                       \
    for (int r = 0; r < R; r++)                                                             \
        res[r] = acc[r];

TGT512 __attribute__((always_inline)) static inline void
pair_bw(__m512 *res, const unsigned char *ga, const unsigned char *gb, const llm_block_q8_0 *xq,
        const int32_t *xs, const float *xd, int R, int nb)
{
    PAIR_BODY(0)
}

TGTVNNI __attribute__((always_inline)) static inline void
pair_vnni(__m512 *res, const unsigned char *ga, const unsigned char *gb, const llm_block_q8_0 *xq,
          const int32_t *xs, const float *xd, int R, int nb)
{
    PAIR_BODY(1)
}
#undef PAIR_BODY

/* Lanes [a, e) of the 16 results of groups g, g + 1 to rows 8g + a .. 8g + e of out. */
TGT512 static inline void put(float *out, __m512 v, int g, int a, int e)
{
    if (a == 0 && e == 16) {
        _mm512_storeu_ps(out + 8 * (size_t)g, v);
        return;
    }
    _mm512_mask_storeu_ps(out + 8 * (size_t)g, (__mmask16)(((1u << e) - 1) & ~((1u << a) - 1)), v);
}

#define ROWS_BODY(FN)                                                                       \
    for (int g = o0 / 8; 8 * g < o1; g += 2) {                                              \
        const unsigned char *ga = (const unsigned char *)w + (size_t)g * nb * 144;          \
        const unsigned char *gb = 8 * (g + 1) < o1 ? ga + (size_t)nb * 144 : NULL;          \
        __m512 res[8];                                                                      \
        /* constant R so the accumulators live in registers */                             \
        switch (R) {                                                                        \
        case 1: FN(res, ga, gb, xq, xs, xd, 1, nb); break;                                  \
        case 2: FN(res, ga, gb, xq, xs, xd, 2, nb); break;                                  \
        case 3: FN(res, ga, gb, xq, xs, xd, 3, nb); break;                                  \
        case 4: FN(res, ga, gb, xq, xs, xd, 4, nb); break;                                  \
        case 5: FN(res, ga, gb, xq, xs, xd, 5, nb); break;                                  \
        case 6: FN(res, ga, gb, xq, xs, xd, 6, nb); break;                                  \
        case 7: FN(res, ga, gb, xq, xs, xd, 7, nb); break;                                  \
        default: FN(res, ga, gb, xq, xs, xd, 8, nb); break;                                 \
        }                                                                                   \
        int a = o0 > 8 * g ? o0 - 8 * g : 0, e = o1 < 8 * g + 16 ? o1 - 8 * g : 16;         \
        for (int r = 0; r < R; r++)                                                         \
            put(out + (size_t)r * ldo, res[r], g, a, e);                                    \
    }

TGT512 static void rows_bw(float *out, int ldo, const void *w, const llm_block_q8_0 *xq,
                           const int32_t *xs, const float *xd, int R, int nb, int o0, int o1)
{
    ROWS_BODY(pair_bw)
}

TGTVNNI static void rows_vnni(float *out, int ldo, const void *w, const llm_block_q8_0 *xq,
                              const int32_t *xs, const float *xd, int R, int nb, int o0, int o1)
{
    ROWS_BODY(pair_vnni)
}

void llm_qk_rows_r8_avx512(float *out, int ldo, const void *w, const llm_block_q8_0 *xq,
                           const int32_t *xs, const float *xd, int R, int nb, int o0, int o1,
                           int vnni)
{
    if (vnni)
        rows_vnni(out, ldo, w, xq, xs, xd, R, nb, o0, o1);
    else
        rows_bw(out, ldo, w, xq, xs, xd, R, nb, o0, o1);
}
