/* quant_avx2.c — AVX2/FMA/F16C row kernels for quantized and half-precision weights.
 *
 * q8_0/q4_0: per block, the 32 int8 weight values (q4_0 unpacked to -8..7) are multiplied
 * with the 32 int8 activations exactly (maddubs on |w| and sign(w)*x, then madd into 8
 * int32 lanes; no overflow: |w| <= 128, |x| <= 127, pair sums <= 32512), converted to
 * float and scaled by dw*dx into 8 float accumulators.  Each weight block is loaded once
 * for all R input rows.  q4_0 has its own kernels with the same arithmetic on unsigned
 * nibbles (q4row1x4, q4rowR: fewer instructions per block, the same bits).  f16/bf16:
 * 8 weights at a time widened to f32 (F16C / a shift) and FMA'd.  Compiled with target
 * attributes; callers check the CPU first.
 */
#include <immintrin.h>
#include <math.h>

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
        /* q8_0 decode streams its weights from memory: ask for them 4 KiB ahead (the
         * rows follow each other; 7-20% less time for GPT-2 small's decode matmuls on 2
         * cores of an EPYC VM; nothing changes in the arithmetic) */
        if (dt == LLM_QK_Q8_0)
            _mm_prefetch(wr + (size_t)b * sizeof(llm_block_q8_0) + 4096, _MM_HINT_T0);
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

/* q4_0, R == 1 (decode): four output rows at a time share each activation block, with
 * fewer instructions per block than qrow and the same results bit for bit:
 *  - the 16 nibble bytes are broadcast to both halves by the load itself and one variable
 *    shift moves the upper half's high nibbles down: load, shift, and give the 32
 *    unsigned values u = q+8 in 0..15;
 *  - maddubs takes u unsigned as it is (u*x pair sums <= 2*15*127 never saturate), and
 *    sum (u-8)*x = madd(maddubs(u, x)) - madd(maddubs(8, x)) exactly in int32, the second
 *    term once per activation block for the four rows: the int32 lanes equal qrow's;
 *  - the scales of 8 blocks are gathered with integer loads, widened with one F16C
 *    conversion and multiplied by the 8 activation scales at once (the same float
 *    products dw*dx), then broadcast from memory into each block's FMA.
 * Each row keeps qrow's accumulation order (even/odd block accumulators, lane by lane),
 * so a row's result still does not depend on N. */

/* madd(maddubs(8, x), 1) for activation block x: 8 * the sum of each lane's 4 values */
TGT __attribute__((always_inline)) static inline __m256i q4corr(const llm_block_q8_0 *xb)
{
    __m256i x = _mm256_loadu_si256((const __m256i *)xb->q);
    return _mm256_madd_epi16(_mm256_maddubs_epi16(_mm256_set1_epi8(8), x), _mm256_set1_epi16(1));
}

/* n <= 8 f16 values st bytes apart from p, widened to float (lanes n.. are 0); the
 * halves are gathered with integer loads and shifts, off the vector ports */
TGT __attribute__((always_inline)) static inline __m256 h8(const char *p, size_t st, int n)
{
    uint64_t a = 0, c = 0;
    uint16_t h;
    for (int k = 0; k < n && k < 4; k++) {
        memcpy(&h, p + k * st, 2);
        a |= (uint64_t)h << 16 * k;
    }
    for (int k = 4; k < n; k++) {
        memcpy(&h, p + k * st, 2);
        c |= (uint64_t)h << 16 * (k - 4);
    }
    return _mm256_cvtph_ps(_mm_set_epi64x((long long)c, (long long)a));
}

/* the 32 nibbles of q4_0 block b of row wr as unsigned bytes 0..15, in weight order */
TGT __attribute__((always_inline)) static inline __m256i q4v(const char *wr, int b)
{
    const llm_block_q4_0 *w = (const llm_block_q4_0 *)wr + b;
    __m256i v = _mm256_broadcastsi128_si256(_mm_loadu_si128((const __m128i *)w->q));
    return _mm256_and_si256(_mm256_srlv_epi64(v, _mm256_set_epi64x(4, 4, 0, 0)),
                            _mm256_set1_epi8(0x0f));
}

TGT __attribute__((always_inline)) static inline __m256
qdotm(__m256i u, __m256i x, __m256i c, const float *d, __m256 acc)
{
    __m256i s = _mm256_sub_epi32(_mm256_madd_epi16(_mm256_maddubs_epi16(u, x), _mm256_set1_epi16(1)), c);
    return _mm256_fmadd_ps(_mm256_cvtepi32_ps(s), _mm256_broadcast_ss(d), acc);
}

/* block B+k of the four rows into accumulators a0..a3; pr[i][k] = dw*dx */
#define Q4STEP8(a0, a1, a2, a3, k)                                                         \
    do {                                                                                   \
        int b_ = B + (k);                                                                  \
        __m256i x = _mm256_loadu_si256((const __m256i *)xq[b_].q), c = q4corr(xq + b_);    \
        a0 = qdotm(q4v(w0, b_), x, c, &pr[0][k], a0);                                      \
        a1 = qdotm(q4v(w1, b_), x, c, &pr[1][k], a1);                                      \
        a2 = qdotm(q4v(w2, b_), x, c, &pr[2][k], a2);                                      \
        a3 = qdotm(q4v(w3, b_), x, c, &pr[3][k], a3);                                      \
    } while (0)

#define PR8(n)                                                                            \
    do {                                                                                  \
        __m256 dx = h8((const char *)&xq[B].d, sizeof *xq, n);                            \
        _mm256_store_ps(pr[0], _mm256_mul_ps(h8(w0 + 18 * (size_t)B, 18, n), dx));        \
        _mm256_store_ps(pr[1], _mm256_mul_ps(h8(w1 + 18 * (size_t)B, 18, n), dx));        \
        _mm256_store_ps(pr[2], _mm256_mul_ps(h8(w2 + 18 * (size_t)B, 18, n), dx));        \
        _mm256_store_ps(pr[3], _mm256_mul_ps(h8(w3 + 18 * (size_t)B, 18, n), dx));        \
    } while (0)

TGT static void q4row1x4(float *out, const char *wr, size_t rb, const llm_block_q8_0 *xq, int nb, int o)
{
    __m256 e0 = _mm256_setzero_ps(), e1 = e0, e2 = e0, e3 = e0;   /* even blocks */
    __m256 f0 = e0, f1 = e0, f2 = e0, f3 = e0;                     /* odd blocks */
    const char *w0 = wr, *w1 = wr + rb, *w2 = wr + 2 * rb, *w3 = wr + 3 * rb;
    _Alignas(32) float pr[4][8];
    for (int B = 0; B < nb; B += 8) {
        int n = nb - B < 8 ? nb - B : 8;
        if (n == 8) {
            PR8(8);
            Q4STEP8(e0, e1, e2, e3, 0); Q4STEP8(f0, f1, f2, f3, 1);
            Q4STEP8(e0, e1, e2, e3, 2); Q4STEP8(f0, f1, f2, f3, 3);
            Q4STEP8(e0, e1, e2, e3, 4); Q4STEP8(f0, f1, f2, f3, 5);
            Q4STEP8(e0, e1, e2, e3, 6); Q4STEP8(f0, f1, f2, f3, 7);
        } else {
            PR8(n);
            int k = 0;
            for (; k + 2 <= n; k += 2) {
                Q4STEP8(e0, e1, e2, e3, k);
                Q4STEP8(f0, f1, f2, f3, k + 1);
            }
            if (k < n)
                Q4STEP8(e0, e1, e2, e3, k);
        }
    }
    out[o] = hsum8(_mm256_add_ps(e0, f0));
    out[o + 1] = hsum8(_mm256_add_ps(e1, f1));
    out[o + 2] = hsum8(_mm256_add_ps(e2, f2));
    out[o + 3] = hsum8(_mm256_add_ps(e3, f3));
}
#undef Q4STEP8
#undef PR8

/* q4_0, R >= 2 (batched decode): qrow's order and results with q4row1x4's unpacking
 * and unsigned maddubs; the corrections q4corr and the activation scales of the R input
 * rows (cx, dxf: row r's block b at r * nb + b) are computed once per call by the caller
 * and shared by all of its weight rows. */
TGT __attribute__((always_inline)) static inline void
q4rowR(float *out, int ldo, const char *wr, const llm_block_q8_0 *xq, const __m256i *cx,
       const float *dxf, int R, int nb, int o)
{
    __m256 acc[4][2];
    const __m256i ones = _mm256_set1_epi16(1);
    for (int r = 0; r < R; r++)
        acc[r][0] = acc[r][1] = _mm256_setzero_ps();
    for (int b = 0; b < nb; b++) {
        uint16_t h;
        memcpy(&h, &((const llm_block_q4_0 *)wr)[b].d, 2);
        float dw = _cvtsh_ss(h);
        __m256i u = q4v(wr, b);
        for (int r = 0; r < R; r++) {
            size_t i = (size_t)r * nb + b;
            __m256i x = _mm256_loadu_si256((const __m256i *)xq[i].q);
            __m256i s = _mm256_sub_epi32(_mm256_madd_epi16(_mm256_maddubs_epi16(u, x), ones), cx[i]);
            acc[r][b & 1] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(s), _mm256_set1_ps(dw * dxf[i]), acc[r][b & 1]);
        }
    }
    for (int r = 0; r < R; r++)
        out[(size_t)r * ldo + o] = hsum8(_mm256_add_ps(acc[r][0], acc[r][1]));
}

/* Blocks per input row that q4rowR's per-call tables hold (C <= 4096); longer rows take
 * qrow. */
#define Q4R_MAXNB 128

TGT static void q4rows(float *out, int ldo, const void *w, size_t rb, const llm_block_q8_0 *xq,
                       int R, int nb, int o0, int o1)
{
    __m256i cx[4 * Q4R_MAXNB];
    float dxf[4 * Q4R_MAXNB];
    for (int i = 0; i < R * nb; i++) {
        uint16_t h;
        memcpy(&h, &xq[i].d, 2);
        dxf[i] = _cvtsh_ss(h);
        cx[i] = q4corr(xq + i);
    }
    for (int o = o0; o < o1; o++) {
        const char *wr = (const char *)w + (size_t)o * rb;
        switch (R) {
        case 2: q4rowR(out, ldo, wr, xq, cx, dxf, 2, nb, o); break;
        case 3: q4rowR(out, ldo, wr, xq, cx, dxf, 3, nb, o); break;
        default: q4rowR(out, ldo, wr, xq, cx, dxf, 4, nb, o); break;
        }
    }
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
            q4row1x4(out, (const char *)w + (size_t)o0 * rb, rb, xq, nb, o0);
    if (dt == LLM_QK_Q4_0 && R >= 2 && nb <= Q4R_MAXNB) {
        q4rows(out, ldo, w, rb, xq, R, nb, o0, o1);
        return;
    }
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

/* llm_qk_dequantize_wrows for q8_0 with AVX2: rows o0..o0+n of w (C columns) into y.
 * int8 -> float is exact and each value is one multiply by the block's scale, as in the
 * scalar llm_qk_dequantize_row: the same floats bit for bit. */
TGT void llm_qk_dequantize_q8_0_avx2(const void *w, int C, int64_t o0, int n, float *y)
{
    int nb = C / 32;
    const llm_block_q8_0 *blk = (const llm_block_q8_0 *)w + (size_t)o0 * nb;
    for (size_t i = 0; i < (size_t)n * nb; i++, blk++, y += 32) {
        __m256 d = _mm256_set1_ps(_cvtsh_ss(blk->d));
        for (int k = 0; k < 32; k += 8) {
            __m128i q8 = _mm_loadl_epi64((const __m128i *)(blk->q + k));
            _mm256_storeu_ps(y + k, _mm256_mul_ps(d, _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(q8))));
        }
    }
}

/* llm_qk_quantize_row_q8_0 with AVX2, the scalar function's bytes: the same block maximum
 * (max_ps(v, m) keeps m for a NaN v, as fmaxf does), the same scalar scale and inverse,
 * the same products x * id, clamped as fmaxf/fminf do (a NaN product becomes -127), then
 * rounded half away from zero as roundf: the truncation plus one step away from zero
 * where the fraction (exact) is at least one half. */
TGT void llm_qk_quantize_row_q8_0_avx2(const float *x, llm_block_q8_0 *y, int64_t n)
{
    const __m256 absmask = _mm256_castsi256_ps(_mm256_set1_epi32(0x7fffffff));
    const __m256 lo = _mm256_set1_ps(-127.0f), hi = _mm256_set1_ps(127.0f);
    const __m256 half = _mm256_set1_ps(0.5f), one = _mm256_set1_ps(1.0f);
    const __m256i order = _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7);
    for (int64_t b = 0; b < n / 32; b++, x += 32) {
        __m256 v[4], m = _mm256_setzero_ps();
        for (int k = 0; k < 4; k++) {
            v[k] = _mm256_loadu_ps(x + 8 * k);
            m = _mm256_max_ps(_mm256_and_ps(v[k], absmask), m);
        }
        __m128 m4 = _mm_max_ps(_mm256_castps256_ps128(m), _mm256_extractf128_ps(m, 1));
        m4 = _mm_max_ps(m4, _mm_movehl_ps(m4, m4));
        m4 = _mm_max_ss(m4, _mm_movehdup_ps(m4));
        float amax = _mm_cvtss_f32(m4);
        float d = amax / 127.0f, id = d != 0.0f ? 1.0f / d : 0.0f;
        if (!isfinite(id))
            id = 0.0f;
        y[b].d = llm_f32_to_f16(d);
        __m256i q[4];
        for (int k = 0; k < 4; k++) {
            __m256 p = _mm256_mul_ps(v[k], _mm256_set1_ps(id));
            p = _mm256_min_ps(_mm256_max_ps(p, lo), hi);
            __m256 t = _mm256_round_ps(p, _MM_FROUND_TO_ZERO | _MM_FROUND_NO_EXC);
            __m256 f = _mm256_and_ps(_mm256_sub_ps(p, t), absmask);
            __m256 step = _mm256_and_ps(_mm256_cmp_ps(f, half, _CMP_GE_OQ),
                                        _mm256_or_ps(_mm256_andnot_ps(absmask, p), one));
            q[k] = _mm256_cvttps_epi32(_mm256_add_ps(t, step));
        }
        __m256i s = _mm256_packs_epi16(_mm256_packs_epi32(q[0], q[1]), _mm256_packs_epi32(q[2], q[3]));
        _mm256_storeu_si256((__m256i *)y[b].q, _mm256_permutevar8x32_epi32(s, order));
    }
}
