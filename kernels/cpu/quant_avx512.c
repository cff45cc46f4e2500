/* quant_avx512.c — AVX-512 (F+BW+VL) and AVX-512 VNNI row kernels for quantized and
 * half-precision weights, selected at run time (quant_matmul.c) when the CPU has them.
 *
 * q8_0/q4_0: two blocks per 512-bit register; |w| times sign(w)*x as unsigned x signed
 * bytes, summed into 16 int32 lanes (8 per block) by vpdpbusd (VNNI) or maddubs+madd,
 * converted to float and scaled per half by dw*dx.  f16/bf16: 16 weights per step.
 * The development machine has no AVX-512: these run in the unit tests only on CPUs that
 * have it (the tests compare them with the scalar kernel there).
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

/* The int32 lane sums of |w| * (sign(w) x): vpdpbusd with VNNI, else maddubs + madd. */
#define QROW_BODY(DOT)                                                                      \
    __m512 acc[4];                                                                          \
    for (int r = 0; r < R; r++)                                                             \
        acc[r] = _mm512_setzero_ps();                                                       \
    for (int b = 0; b < nb; b += 2) {                                                       \
        int two = b + 1 < nb;                                                               \
        float d0, d1 = 0.0f;                                                                \
        __m256i w0 = llm_qk_load_wblock(wr, dt, b, &d0);                                    \
        __m256i w1 = two ? llm_qk_load_wblock(wr, dt, b + 1, &d1) : _mm256_setzero_si256(); \
        __m512i w = join(w0, w1);                                                           \
        __m512i aw = _mm512_abs_epi8(w);                                                    \
        __mmask64 neg = _mm512_movepi8_mask(w);                                             \
        for (int r = 0; r < R; r++) {                                                       \
            const llm_block_q8_0 *xb = xq + (size_t)r * nb + b;                             \
            uint16_t h0, h1 = 0;                                                            \
            memcpy(&h0, &xb[0].d, 2);                                                       \
            __m256i x0 = _mm256_loadu_si256((const __m256i *)xb[0].q), x1 = _mm256_setzero_si256(); \
            if (two) {                                                                      \
                memcpy(&h1, &xb[1].d, 2);                                                   \
                x1 = _mm256_loadu_si256((const __m256i *)xb[1].q);                          \
            }                                                                               \
            __m512i x = join(x0, x1);                                                       \
            __m512i sx = _mm512_mask_sub_epi8(x, neg, _mm512_setzero_si512(), x);           \
            __m512i p = DOT(aw, sx);                                                        \
            acc[r] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(p),                                 \
                                     join_ps(d0 * _cvtsh_ss(h0), d1 * _cvtsh_ss(h1)), acc[r]); \
        }                                                                                   \
    }                                                                                       \
    for (int r = 0; r < R; r++)                                                             \
        out[(size_t)r * ldo + o] = _mm512_reduce_add_ps(acc[r]);

#define DOT_BW(a, s) _mm512_madd_epi16(_mm512_maddubs_epi16((a), (s)), _mm512_set1_epi16(1))
#define DOT_VNNI(a, s) _mm512_dpbusd_epi32(_mm512_setzero_si512(), (a), (s))

TGT512 __attribute__((always_inline)) static inline void
qrow_bw(float *out, int ldo, const char *wr, int dt, const llm_block_q8_0 *xq, int R, int nb, int o)
{
    QROW_BODY(DOT_BW)
}

TGTVNNI __attribute__((always_inline)) static inline void
qrow_vnni(float *out, int ldo, const char *wr, int dt, const llm_block_q8_0 *xq, int R, int nb, int o)
{
    QROW_BODY(DOT_VNNI)
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

TGT512 static void rows_bw(float *out, int ldo, const void *w, int dt, const llm_block_q8_0 *xq,
                           const float *xf, int R, int C, int o0, int o1)
{
    size_t rb = llm_qk_row_bytes(dt, C);
    int nb = C / 32;
    for (int o = o0; o < o1; o++) {
        const char *wr = (const char *)w + (size_t)o * rb;
        if (dt == LLM_QK_Q8_0 || dt == LLM_QK_Q4_0) {
            switch (R) {
            case 1: qrow_bw(out, ldo, wr, dt, xq, 1, nb, o); break;
            case 2: qrow_bw(out, ldo, wr, dt, xq, 2, nb, o); break;
            case 3: qrow_bw(out, ldo, wr, dt, xq, 3, nb, o); break;
            default: qrow_bw(out, ldo, wr, dt, xq, 4, nb, o); break;
            }
        } else {
            switch (R) {
            case 1: hrow(out, ldo, (const uint16_t *)wr, dt, xf, 1, C, o); break;
            case 2: hrow(out, ldo, (const uint16_t *)wr, dt, xf, 2, C, o); break;
            case 3: hrow(out, ldo, (const uint16_t *)wr, dt, xf, 3, C, o); break;
            default: hrow(out, ldo, (const uint16_t *)wr, dt, xf, 4, C, o); break;
            }
        }
    }
}

TGTVNNI static void rows_vnni(float *out, int ldo, const void *w, int dt, const llm_block_q8_0 *xq,
                              int R, int C, int o0, int o1)
{
    size_t rb = llm_qk_row_bytes(dt, C);
    int nb = C / 32;
    for (int o = o0; o < o1; o++) {
        const char *wr = (const char *)w + (size_t)o * rb;
        switch (R) {
        case 1: qrow_vnni(out, ldo, wr, dt, xq, 1, nb, o); break;
        case 2: qrow_vnni(out, ldo, wr, dt, xq, 2, nb, o); break;
        case 3: qrow_vnni(out, ldo, wr, dt, xq, 3, nb, o); break;
        default: qrow_vnni(out, ldo, wr, dt, xq, 4, nb, o); break;
        }
    }
}

void llm_qk_rows_avx512(float *out, int ldo, const void *w, int dt, const llm_block_q8_0 *xq,
                        const float *xf, int R, int C, int o0, int o1, int vnni)
{
    if (vnni && (dt == LLM_QK_Q8_0 || dt == LLM_QK_Q4_0))
        rows_vnni(out, ldo, w, dt, xq, R, C, o0, o1);
    else
        rows_bw(out, ldo, w, dt, xq, xf, R, C, o0, o1);
}
