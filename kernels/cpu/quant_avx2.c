/* quant_avx2.c — AVX2/FMA/F16C row kernels for quantized and half-precision weights.
 *
 * q8_0/q4_0: per block, the 32 int8 weight values (q4_0 unpacked to -8..7) are multiplied
 * with the 32 int8 activations exactly (maddubs on |w| and sign(w)*x, then madd into 8
 * int32 lanes; no overflow: |w| <= 128, |x| <= 127, pair sums <= 32512), converted to
 * float and scaled by dw*dx into 8 float accumulators.  Each weight block is loaded once
 * for all R input rows.  f16/bf16: 8 weights at a time widened to f32 (F16C / a shift)
 * and FMA'd.  Compiled with target attributes; callers check the CPU first.
 */
#include <immintrin.h>

#include "kernels/cpu/quant_x86.h"

#define TGT __attribute__((target("avx2,fma,f16c")))

TGT static inline float hsum8(__m256 v)
{
    __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    s = _mm_add_ps(s, _mm_movehl_ps(s, s));
    s = _mm_add_ss(s, _mm_movehdup_ps(s));
    return _mm_cvtss_f32(s);
}

TGT __attribute__((always_inline)) static inline void
qrow(float *out, int ldo, const char *wr, int dt, const llm_block_q8_0 *xq, int R, int nb, int o)
{
    /* two accumulators per row (even and odd blocks) so consecutive FMAs do not wait on
     * each other; the order is fixed, so a row's result still does not depend on R */
    __m256 acc[4][2];
    const __m256i ones = _mm256_set1_epi16(1);
    for (int r = 0; r < R; r++)
        acc[r][0] = acc[r][1] = _mm256_setzero_ps();
    for (int b = 0; b < nb; b++) {
        float dw;
        __m256i w = llm_qk_load_wblock(wr, dt, b, &dw);
        __m256i aw = _mm256_sign_epi8(w, w);
        for (int r = 0; r < R; r++) {
            const llm_block_q8_0 *xb = xq + (size_t)r * nb + b;
            __m256i x = _mm256_loadu_si256((const __m256i *)xb->q);
            __m256i p16 = _mm256_maddubs_epi16(aw, _mm256_sign_epi8(x, w));
            __m256 p = _mm256_cvtepi32_ps(_mm256_madd_epi16(p16, ones));
            uint16_t hx;
            memcpy(&hx, &xb->d, 2);
            acc[r][b & 1] = _mm256_fmadd_ps(p, _mm256_set1_ps(dw * _cvtsh_ss(hx)), acc[r][b & 1]);
        }
    }
    for (int r = 0; r < R; r++)
        out[(size_t)r * ldo + o] = hsum8(_mm256_add_ps(acc[r][0], acc[r][1]));
}

/* R == 1 (decode): four output rows at a time share each activation block (one load, one
 * scale conversion) and give the core four independent dot products to overlap.  Each
 * output keeps qrow's accumulation order (even/odd block accumulators, the same products
 * dw*dx), so the results equal qrow's bit for bit. */
TGT __attribute__((always_inline)) static inline __m256
qdot(__m256i w, __m256i x, float d, __m256 acc)
{
    __m256i p16 = _mm256_maddubs_epi16(_mm256_sign_epi8(w, w), _mm256_sign_epi8(x, w));
    __m256 p = _mm256_cvtepi32_ps(_mm256_madd_epi16(p16, _mm256_set1_epi16(1)));
    return _mm256_fmadd_ps(p, _mm256_set1_ps(d), acc);
}

TGT static void qrow1x4(float *out, const char *wr, size_t rb, int dt, const llm_block_q8_0 *xq,
                        int nb, int o)
{
    __m256 e0 = _mm256_setzero_ps(), e1 = e0, e2 = e0, e3 = e0;   /* even blocks */
    __m256 f0 = e0, f1 = e0, f2 = e0, f3 = e0;                     /* odd blocks */
    const char *w0 = wr, *w1 = wr + rb, *w2 = wr + 2 * rb, *w3 = wr + 3 * rb;
    for (int b = 0; b < nb; b++) {
        uint16_t hx;
        memcpy(&hx, &xq[b].d, 2);
        float dx = _cvtsh_ss(hx), d0, d1, d2, d3;
        __m256i x = _mm256_loadu_si256((const __m256i *)xq[b].q);
        __m256i q0 = llm_qk_load_wblock(w0, dt, b, &d0), q1 = llm_qk_load_wblock(w1, dt, b, &d1);
        __m256i q2 = llm_qk_load_wblock(w2, dt, b, &d2), q3 = llm_qk_load_wblock(w3, dt, b, &d3);
        if (b & 1) {
            f0 = qdot(q0, x, d0 * dx, f0); f1 = qdot(q1, x, d1 * dx, f1);
            f2 = qdot(q2, x, d2 * dx, f2); f3 = qdot(q3, x, d3 * dx, f3);
        } else {
            e0 = qdot(q0, x, d0 * dx, e0); e1 = qdot(q1, x, d1 * dx, e1);
            e2 = qdot(q2, x, d2 * dx, e2); e3 = qdot(q3, x, d3 * dx, e3);
        }
    }
    out[o] = hsum8(_mm256_add_ps(e0, f0));
    out[o + 1] = hsum8(_mm256_add_ps(e1, f1));
    out[o + 2] = hsum8(_mm256_add_ps(e2, f2));
    out[o + 3] = hsum8(_mm256_add_ps(e3, f3));
}

TGT static inline __m256 load8(const uint16_t *h, int dt)
{
    __m128i v = _mm_loadu_si128((const __m128i *)h);
    if (dt == LLM_QK_F16)
        return _mm256_cvtph_ps(v);
    return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(v), 16));
}

TGT __attribute__((always_inline)) static inline void
hrow(float *out, int ldo, const uint16_t *h, int dt, const float *xf, int R, int C, int o)
{
    __m256 acc[4];
    for (int r = 0; r < R; r++)
        acc[r] = _mm256_setzero_ps();
    int c = 0;
    for (; c + 8 <= C; c += 8) {
        __m256 w = load8(h + c, dt);
        for (int r = 0; r < R; r++)
            acc[r] = _mm256_fmadd_ps(w, _mm256_loadu_ps(xf + (size_t)r * C + c), acc[r]);
    }
    for (int r = 0; r < R; r++)
        out[(size_t)r * ldo + o] = llm_qk_half_dot(hsum8(acc[r]), h, dt, xf + (size_t)r * C, c, C);
}

TGT void llm_qk_rows_avx2(float *out, int ldo, const void *w, int dt, const llm_block_q8_0 *xq,
                          const float *xf, int R, int C, int o0, int o1)
{
    size_t rb = llm_qk_row_bytes(dt, C);
    int nb = C / 32, q = dt == LLM_QK_Q8_0 || dt == LLM_QK_Q4_0;
    if (dt == LLM_QK_Q4_0 && R == 1)   /* q8_0 measured slower this way: it is bound by memory */
        for (; o0 + 4 <= o1; o0 += 4)
            qrow1x4(out, (const char *)w + (size_t)o0 * rb, rb, dt, xq, nb, o0);
    for (int o = o0; o < o1; o++) {
        const char *wr = (const char *)w + (size_t)o * rb;
        if (q) {
            /* constant R so the accumulators live in registers */
            switch (R) {
            case 1: qrow(out, ldo, wr, dt, xq, 1, nb, o); break;
            case 2: qrow(out, ldo, wr, dt, xq, 2, nb, o); break;
            case 3: qrow(out, ldo, wr, dt, xq, 3, nb, o); break;
            default: qrow(out, ldo, wr, dt, xq, 4, nb, o); break;
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
