/* quant_avx512.c — AVX-512 (F+BW+VL) and AVX-512 VNNI row kernels for quantized and
 * half-precision weights, selected at run time (quant_matmul.c) when the CPU has them.
 *
 * q8_0/q4_0: two blocks per 512-bit register; |w| times sign(w)*x as unsigned x signed
 * bytes, summed into 16 int32 lanes (8 per block) by vpdpbusd (VNNI) or maddubs+madd,
 * converted to float and scaled per half by dw*dx; up to 8 input rows share each
 * weight load.  f16/bf16: 16 weights per step.  Run by the unit tests on CPUs that have
 * AVX-512 (test_quant compares them with the scalar kernel and, bit for bit, with the
 * AVX2 kernels' arithmetic).
 */
#include <immintrin.h>

#include "kernels/cpu/quant_x86.h"

#define TGT512 __attribute__((target("avx512f,avx512bw,avx512vl,avx2,fma,f16c")))
#define TGTVNNI __attribute__((target("avx512f,avx512bw,avx512vl,avx512vnni,avx2,fma,f16c")))

TGT512 static inline __m512i join(__m256i a, __m256i b)
{
    return _mm512_inserti64x4(_mm512_castsi256_si512(a), b, 1);
}

TGT512 static inline __m512 join_ps(float a, float b)
{
    __m512d v = _mm512_castpd256_pd512(_mm256_castps_pd(_mm256_set1_ps(a)));
    return _mm512_castpd_ps(_mm512_insertf64x4(v, _mm256_castps_pd(_mm256_set1_ps(b)), 1));
}

/* q8_0/q4_0 (llm_qk_pack_x512 prepared the input rows): per block pair and input row
 * one masked negate, the dot (vpdpbusd with VNNI, else maddubs + madd: the same int32
 * lanes, no saturation at |w| <= 128, |x| <= 127), one conversion, one multiply of the
 * weight and activation scales (the float products dw*dx) and one FMA.  Lanes 0-7 take
 * the even blocks and 8-15 the odd ones, and _mm512_reduce_add_ps sums them as the AVX2
 * kernels' hsum8 of the two accumulators does: the AVX2 kernels' results bit for bit,
 * whatever R.  The weight block pair (its signs, magnitudes and scales) is prepared
 * once for the R <= 8 input rows.  q8_0 weights are asked for 4 KiB ahead: decode
 * streams them once from memory. */
#define QROW_BODY(DOT)                                                                      \
    __m512 acc[8];                                                                          \
    const __m512i zero = _mm512_setzero_si512();                                            \
    int np = (nb + 1) / 2;                                                                  \
    for (int r = 0; r < R; r++)                                                             \
        acc[r] = _mm512_setzero_ps();                                                       \
    for (int p = 0; p < np; p++) {                                                          \
        int b = 2 * p, two = b + 1 < nb;                                                    \
        float d0, d1 = 0.0f;                                                                \
        if (dt == LLM_QK_Q8_0)                                                              \
            _mm_prefetch(wr + (size_t)b * sizeof(llm_block_q8_0) + 4096, _MM_HINT_T0);      \
        __m256i w0 = llm_qk_load_wblock(wr, dt, b, &d0);                                    \
        __m256i w1 = two ? llm_qk_load_wblock(wr, dt, b + 1, &d1) : _mm256_setzero_si256(); \
        __m512i w = join(w0, w1);                                                           \
        __m512i aw = _mm512_abs_epi8(w);                                                    \
        __mmask64 neg = _mm512_movepi8_mask(w);                                             \
        __m512 dw = join_ps(d0, d1);                                                        \
        for (int r = 0; r < R; r++) {                                                       \
            const llm_qk_x512 *x = px + (size_t)r * np + p;                                 \
            __m512i xv = _mm512_load_si512(x->q);                                           \
            __m512i q = DOT(aw, _mm512_mask_sub_epi8(xv, neg, zero, xv));                   \
            __m512 s = _mm512_mul_ps(dw, _mm512_load_ps(x->d));                             \
            acc[r] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(q), s, acc[r]);                     \
        }                                                                                   \
    }                                                                                       \
    for (int r = 0; r < R; r++)                                                             \
        out[(size_t)r * ldo + o] = _mm512_reduce_add_ps(acc[r]);

#define DOT_BW(a, s) _mm512_madd_epi16(_mm512_maddubs_epi16((a), (s)), _mm512_set1_epi16(1))
#define DOT_VNNI(a, s) _mm512_dpbusd_epi32(_mm512_setzero_si512(), (a), (s))

TGT512 __attribute__((always_inline)) static inline void
qrow_bw(float *out, int ldo, const char *wr, int dt, const llm_qk_x512 *px, int R, int nb, int o)
{
    QROW_BODY(DOT_BW)
}

TGTVNNI __attribute__((always_inline)) static inline void
qrow_vnni(float *out, int ldo, const char *wr, int dt, const llm_qk_x512 *px, int R, int nb, int o)
{
    QROW_BODY(DOT_VNNI)
}

/* rows o0..o1 with a constant R, so that the accumulators live in registers */
#define QROWS(FN)                                                                           \
    do {                                                                                    \
        size_t rb = llm_qk_row_bytes(dt, 32 * nb);                                          \
        for (int o = o0; o < o1; o++) {                                                     \
            const char *wr = (const char *)w + (size_t)o * rb;                              \
            switch (R) {                                                                    \
            case 1: FN(out, ldo, wr, dt, px, 1, nb, o); break;                              \
            case 2: FN(out, ldo, wr, dt, px, 2, nb, o); break;                              \
            case 3: FN(out, ldo, wr, dt, px, 3, nb, o); break;                              \
            case 4: FN(out, ldo, wr, dt, px, 4, nb, o); break;                              \
            case 5: FN(out, ldo, wr, dt, px, 5, nb, o); break;                              \
            case 6: FN(out, ldo, wr, dt, px, 6, nb, o); break;                              \
            case 7: FN(out, ldo, wr, dt, px, 7, nb, o); break;                              \
            default: FN(out, ldo, wr, dt, px, 8, nb, o); break;                             \
            }                                                                               \
        }                                                                                   \
    } while (0)

TGT512 static void qrows_bw(float *out, int ldo, const void *w, int dt, const llm_qk_x512 *px,
                            int R, int nb, int o0, int o1)
{
    QROWS(qrow_bw);
}

TGTVNNI static void qrows_vnni(float *out, int ldo, const void *w, int dt, const llm_qk_x512 *px,
                               int R, int nb, int o0, int o1)
{
    QROWS(qrow_vnni);
}

TGT512 void llm_qk_pack_x512(llm_qk_x512 *px, const llm_block_q8_0 *xq, int nb)
{
    for (int p = 0; p < (nb + 1) / 2; p++) {
        const llm_block_q8_0 *xb = xq + 2 * p;
        uint16_t h0, h1;
        memcpy(&h0, &xb[0].d, 2);
        __m256i x0 = _mm256_loadu_si256((const __m256i *)xb[0].q), x1 = _mm256_setzero_si256();
        float d1 = 0.0f;
        if (2 * p + 1 < nb) {
            memcpy(&h1, &xb[1].d, 2);
            x1 = _mm256_loadu_si256((const __m256i *)xb[1].q);
            d1 = _cvtsh_ss(h1);
        }
        _mm512_store_si512(px[p].q, join(x0, x1));
        _mm512_store_ps(px[p].d, join_ps(_cvtsh_ss(h0), d1));
    }
}

void llm_qk_qrows_avx512(float *out, int ldo, const void *w, int dt, const llm_qk_x512 *px,
                         int R, int nb, int o0, int o1, int vnni)
{
    if (vnni)
        qrows_vnni(out, ldo, w, dt, px, R, nb, o0, o1);
    else
        qrows_bw(out, ldo, w, dt, px, R, nb, o0, o1);
}

TGT512 static inline __m512 load16(const uint16_t *h, int dt)
{
    __m256i v = _mm256_loadu_si256((const __m256i *)h);
    if (dt == LLM_QK_F16)
        return _mm512_cvtph_ps(v);
    return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(v), 16));
}

TGT512 __attribute__((always_inline)) static inline void
hrow(float *out, int ldo, const uint16_t *h, int dt, const float *xf, int R, int C, int o)
{
    __m512 acc[4];
    for (int r = 0; r < R; r++)
        acc[r] = _mm512_setzero_ps();
    int c = 0;
    for (; c + 16 <= C; c += 16) {
        __m512 w = load16(h + c, dt);
        for (int r = 0; r < R; r++)
            acc[r] = _mm512_fmadd_ps(w, _mm512_loadu_ps(xf + (size_t)r * C + c), acc[r]);
    }
    for (int r = 0; r < R; r++)
        out[(size_t)r * ldo + o] = llm_qk_half_dot(_mm512_reduce_add_ps(acc[r]), h, dt, xf + (size_t)r * C, c, C);
}

TGT512 void llm_qk_rows_avx512(float *out, int ldo, const void *w, int dt, const float *xf, int R,
                               int C, int o0, int o1)
{
    size_t rb = llm_qk_row_bytes(dt, C);
    for (int o = o0; o < o1; o++) {
        const uint16_t *h = (const uint16_t *)((const char *)w + (size_t)o * rb);
        switch (R) {
        case 1: hrow(out, ldo, h, dt, xf, 1, C, o); break;
        case 2: hrow(out, ldo, h, dt, xf, 2, C, o); break;
        case 3: hrow(out, ldo, h, dt, xf, 3, C, o); break;
        default: hrow(out, ldo, h, dt, xf, 4, C, o); break;
        }
    }
}
