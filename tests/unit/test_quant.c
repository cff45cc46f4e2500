/* Weight formats: f16/bf16 conversions, q8_0/q4_0 round trips within their bounds on
 * random and adversarial blocks, GGML's exact block layout on hand-computed blocks, and
 * every fast matmul kernel the CPU has against the scalar one. */
#include "tests/unit/testutil.h"

#include <cblas.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <immintrin.h>

#include "common/quant.h"
#include "kernels/backend.h"
#include "kernels/cpu/quant_kern.h"

/* ---- conversions ---- */

__attribute__((target("f16c"))) static uint16_t hw_f16(float f)
{
    return (uint16_t)_cvtss_sh(f, _MM_FROUND_TO_NEAREST_INT);
}

static void test_f16(void **state)
{
    (void)state;
    /* every f16 value survives f16 -> f32 -> f16 */
    for (uint32_t h = 0; h < 65536; h++) {
        float f = llm_quant_f16_to_f32((uint16_t)h);
        if (isnan(f))
            assert_true(isnan(llm_quant_f16_to_f32(llm_quant_f32_to_f16(f))));
        else
            assert_int_equal(llm_quant_f32_to_f16(f), h);
    }
    /* ties to even, overflow, underflow */
    assert_int_equal(llm_quant_f32_to_f16(1.0f + 0x1p-11f), 0x3c00);
    assert_int_equal(llm_quant_f32_to_f16(1.0f + 3 * 0x1p-11f), 0x3c02);
    assert_int_equal(llm_quant_f32_to_f16(65504.0f), 0x7bff);
    assert_int_equal(llm_quant_f32_to_f16(65520.0f), 0x7c00);
    assert_int_equal(llm_quant_f32_to_f16(-0x1p-25f), 0x8000);
    assert_int_equal(llm_quant_f32_to_f16(0x1p-24f), 0x0001);
    /* against the F16C instruction on random bit patterns, when the CPU has it */
    if (__builtin_cpu_supports("f16c")) {
        tu_rng r = {11};
        for (int i = 0; i < 2000000; i++) {
            uint32_t u = (uint32_t)tu_next(&r);
            float f;
            memcpy(&f, &u, 4);
            if (isnan(f))
                continue;
            uint16_t a = llm_quant_f32_to_f16(f), b = hw_f16(f);
            if (a != b)
                fail_msg("f16(%a): 0x%04x, F16C 0x%04x", (double)f, a, b);
        }
    }
}

static void test_bf16(void **state)
{
    (void)state;
    assert_int_equal(llm_quant_f32_to_bf16(1.0f), 0x3f80);
    assert_int_equal(llm_quant_f32_to_bf16(1.0f + 0x1p-8f), 0x3f80);          /* tie: even */
    assert_int_equal(llm_quant_f32_to_bf16(1.0f + 3 * 0x1p-8f), 0x3f82);      /* tie: up */
    assert_int_equal(llm_quant_f32_to_bf16(1.0f + 0x1p-8f + 0x1p-20f), 0x3f81);
    assert_true(isnan(llm_quant_bf16_to_f32(llm_quant_f32_to_bf16(NAN))));
    tu_rng r = {5};
    for (int i = 0; i < 100000; i++) {
        float f = tu_uniform(&r, -100, 100);
        float g = llm_quant_bf16_to_f32(llm_quant_f32_to_bf16(f));
        assert_true(fabsf(f - g) <= ldexpf(fabsf(f), -8));
    }
}

/* ---- round trips ---- */

/* Per-element bound of a q8_0/q4_0 round trip of block x (see quant.h). */
static double bound(llm_dtype dt, const float *x)
{
    float amax = 0;
    for (int j = 0; j < 32; j++)
        amax = fmaxf(amax, fabsf(x[j]));
    double d = dt == LLM_DT_Q8_0 ? amax / 127.0 : amax / 8.0;
    /* scale stored as f16: relative 2^-11 when normal, absolute 2^-25 below */
    double dd = fmax(d * 0x1p-11, 0x1p-25);
    double qmax = dt == LLM_DT_Q8_0 ? 127 : 8;
    /* q4_0: values of the sign opposite to the extreme beyond 7.5 d clamp to 7: d/2 more */
    return (dt == LLM_DT_Q8_0 ? amax / 254.0 : amax / 8.0) + qmax * dd + 1e-12;
}

static void roundtrip(llm_dtype dt, const float *x, int n)
{
    llm_status st = {0};
    uint64_t nb;
    assert_int_equal(llm_dtype_nbytes(dt, (uint64_t)n, &nb), 0);
    void *q = malloc(nb);
    float *y = malloc((size_t)n * sizeof(float));
    assert_int_equal(llm_quant_encode(dt, x, q, (uint64_t)n, &st), 0);
    assert_int_equal(llm_quant_decode(dt, q, y, (uint64_t)n, &st), 0);
    for (int b = 0; b < n / 32; b++) {
        double bd = dt == LLM_DT_Q8_0 || dt == LLM_DT_Q4_0 ? bound(dt, x + b * 32) : 0;
        for (int j = 0; j < 32; j++) {
            int i = b * 32 + j;
            double e = fabs((double)x[i] - y[i]);
            if (dt == LLM_DT_F16)
                bd = fmax(fabs(x[i]) * 0x1p-11, 0x1p-25);
            else if (dt == LLM_DT_BF16)
                bd = fmax(fabs(x[i]) * 0x1p-8, 0x1p-134);   /* denormals: half an ulp */
            if (e > bd)
                fail_msg("%s element %d: %g -> %g, error %g > bound %g", llm_dtype_name(dt), i,
                         (double)x[i], (double)y[i], e, bd);
        }
    }
    free(q);
    free(y);
}

static const llm_dtype types[] = {LLM_DT_F16, LLM_DT_BF16, LLM_DT_Q8_0, LLM_DT_Q4_0};

static void test_roundtrip_random(void **state)
{
    (void)state;
    tu_rng r = {7};
    int n = 32 * 400;
    float *x = malloc((size_t)n * sizeof(float));
    for (int i = 0; i < n; i++) {
        /* block scales from 1e-6 to 1e3 */
        float s = powf(10.0f, (float)((i / 32) % 10) - 6.0f);
        x[i] = tu_uniform(&r, -s, s);
    }
    for (size_t t = 0; t < 4; t++)
        roundtrip(types[t], x, n);
    free(x);
}

static void test_roundtrip_adversarial(void **state)
{
    (void)state;
    float x[32 * 4];
    /* block 0 all zeros, block 1 one huge outlier, block 2 denormals, block 3 a tie */
    memset(x, 0, sizeof x);
    for (int j = 0; j < 32; j++) {
        x[32 + j] = 0.01f * (float)(j - 16);
        x[64 + j] = (float)(j - 16) * 1e-40f;
        x[96 + j] = (float)(j % 3) - 1.0f;
    }
    x[32 + 7] = 3e4f;
    for (size_t t = 0; t < 4; t++) {
        roundtrip(types[t], x, 128);
        uint8_t q[512];
        float y[128];
        llm_status st = {0};
        assert_int_equal(llm_quant_encode(types[t], x, q, 128, &st), 0);
        llm_quant_decode(types[t], q, y, 128, &st);
        for (int j = 0; j < 32; j++)
            assert_true(y[j] == 0.0f);   /* zeros stay exact zeros */
        assert_true(fabsf(y[32 + 7] - 3e4f) <= 3e4f * 0x1p-8f);   /* the outlier survives */
    }
    /* NaN and infinities rejected with the element named; f16 overflow rejected */
    for (size_t t = 0; t < 4; t++) {
        uint8_t q[512];
        llm_status st = {0};
        float z[32] = {0};
        z[5] = NAN;
        assert_int_equal(llm_quant_encode(types[t], z, q, 32, &st), LLM_EDATA);
        assert_non_null(strstr(st.msg, "value at 5 is nan"));
        z[5] = -INFINITY;
        assert_int_equal(llm_quant_encode(types[t], z, q, 32, &st), LLM_EDATA);
    }
    llm_status st = {0};
    float big[32] = {7e4f};
    uint8_t q[64];
    assert_int_equal(llm_quant_encode(LLM_DT_F16, big, q, 32, &st), LLM_EDATA);
    assert_int_equal(llm_quant_encode(LLM_DT_Q8_0, big, q, 32, &st), 0);
    assert_int_equal(llm_quant_encode(LLM_DT_Q4_0, big, q, 31, &st), LLM_EUSAGE);
}

/* ---- GGML layout ---- */

static void test_ggml_layout(void **state)
{
    (void)state;
    llm_status st = {0};
    float x[32];
    uint8_t b[34];
    /* q8_0: amax 127 gives d = 1.0 (f16 0x3c00), so q = x */
    for (int j = 0; j < 32; j++)
        x[j] = (float)(4 * j - 64);
    x[31] = 127.0f;
    assert_int_equal(llm_quant_encode(LLM_DT_Q8_0, x, b, 32, &st), 0);
    assert_int_equal(b[0], 0x00);
    assert_int_equal(b[1], 0x3c);
    for (int j = 0; j < 32; j++)
        assert_int_equal((int8_t)b[2 + j], (int)x[j]);
    /* q4_0: the largest magnitude -8 gives d = -8/-8 = 1.0; byte j = (x[j]+8) | (x[j+16]+8)<<4 */
    for (int j = 0; j < 16; j++) {
        x[j] = (float)(j - 8);
        x[16 + j] = (float)(7 - j);
    }
    assert_int_equal(llm_quant_encode(LLM_DT_Q4_0, x, b, 32, &st), 0);
    assert_int_equal(b[0], 0x00);
    assert_int_equal(b[1], 0x3c);
    for (int j = 0; j < 16; j++)
        assert_int_equal(b[2 + j], j | (15 - j) << 4);
    /* a positive extreme gives a negative scale: 16 -> d = -2 (0xc000), stored nibble 0 */
    memset(x, 0, sizeof x);
    x[5] = 16.0f;
    x[20] = -2.0f;
    assert_int_equal(llm_quant_encode(LLM_DT_Q4_0, x, b, 32, &st), 0);
    assert_int_equal(b[0] | b[1] << 8, 0xc000);
    assert_int_equal(b[2 + 5] & 0xf, 0);
    assert_int_equal(b[2 + 4] >> 4, 9);   /* -2 / -2 = 1, +8 */
    assert_int_equal(b[2 + 0], 0x88);
    /* block sizes */
    uint64_t nb;
    assert_int_equal(llm_dtype_nbytes(LLM_DT_Q8_0, 64, &nb), 0);
    assert_int_equal(nb, 68);
    assert_int_equal(llm_dtype_nbytes(LLM_DT_Q4_0, 64, &nb), 0);
    assert_int_equal(nb, 36);
}

/* ---- kernels ---- */

static void *make_w(tu_rng *r, int dt, int OC, int C, float **wf)
{
    float *w = malloc((size_t)OC * C * sizeof(float));
    tu_fill(r, w, (size_t)OC * C, -1, 1);
    size_t rb = llm_qk_row_bytes(dt, C);
    void *q = malloc(rb * OC);
    llm_status st = {0};
    for (int o = 0; o < OC; o++)
        assert_int_equal(llm_quant_encode((llm_dtype)dt, w + (size_t)o * C, (char *)q + rb * o,
                                          (uint64_t)C, &st), 0);
    for (int o = 0; o < OC; o++)   /* the exact weights the kernels see */
        llm_qk_dequantize_row(dt, (char *)q + rb * o, w + (size_t)o * C, C);
    *wf = w;
    return q;
}

static void test_kernels(void **state)
{
    (void)state;
    openblas_set_num_threads(1);
    tu_rng r = {9};
    int qdt[] = {LLM_QK_Q8_0, LLM_QK_Q4_0, LLM_QK_F16, LLM_QK_BF16};
    int shapes[][3] = {{1, 32, 5}, {1, 768, 67}, {2, 96, 37}, {3, 160, 64}, {4, 64, 9},
                       {5, 224, 130}, {7, 96, 33}, {31, 64, 70}, {32, 96, 65}, {40, 160, 100}};
    int tested = 0;
    for (int d = 0; d < 4; d++)
        for (size_t s = 0; s < sizeof shapes / sizeof shapes[0]; s++) {
            int dt = qdt[d], N = shapes[s][0], C = shapes[s][1], OC = shapes[s][2];
            if (dt == LLM_QK_F16 && s % 2)
                C += 6;   /* half formats take any C */
            float *wf, *x = malloc((size_t)N * C * 4), *bias = malloc((size_t)OC * 4);
            void *w = make_w(&r, dt, OC, C, &wf);
            tu_fill(&r, x, (size_t)N * C, -2, 2);
            tu_fill(&r, bias, (size_t)OC, -1, 1);
            float *ref = malloc((size_t)N * OC * 4), *got = malloc((size_t)N * OC * 4),
                  *exact = malloc((size_t)N * OC * 4);
            assert_int_equal(llm_qk_matmul(ref, x, w, dt, bias, N, C, OC, LLM_QK_ISA_SCALAR, 1), 0);
            /* the scalar kernel against f32 math on the same weights: only the 8-bit
             * activations differ (q formats), |error| <= sum |w| * (max|x|/254) */
            for (int n = 0; n < N; n++)
                for (int o = 0; o < OC; o++) {
                    double s2 = bias[o], aw = 0, ax = 0;
                    for (int c = 0; c < C; c++) {
                        s2 += (double)wf[(size_t)o * C + c] * x[(size_t)n * C + c];
                        aw += fabs(wf[(size_t)o * C + c]);
                        ax = fmax(ax, fabs(x[(size_t)n * C + c]));
                    }
                    exact[(size_t)n * OC + o] = (float)s2;
                    double tol = (dt == LLM_QK_Q8_0 || dt == LLM_QK_Q4_0 ? aw * ax / 254 * 1.01 : 0) + 1e-4 * (aw * ax + 1);
                    if (fabs(ref[(size_t)n * OC + o] - s2) > tol)
                        fail_msg("scalar %d (%d,%d,%d) [%d,%d]: %g vs %g", dt, N, C, OC, n, o,
                                 (double)ref[(size_t)n * OC + o], s2);
                }
            for (int isa = LLM_QK_ISA_AVX2; isa <= LLM_QK_ISA_AVX512VNNI; isa++) {
                if (!llm_qk_isa_ok(isa))
                    continue;
                assert_int_equal(llm_qk_matmul(got, x, w, dt, bias, N, C, OC, isa, 2), 0);
                /* N >= 32 takes the dequantize + sgemm path: f32 activations */
                const float *want = N >= LLM_QK_GEMM_MIN_ROWS ? exact : ref;
                size_t worst;
                double e = tu_max_rel_err(got, want, (size_t)N * OC, 1.0, &worst);
                if (e > 2e-5)
                    fail_msg("%s dtype %d (%d,%d,%d): rel err %g at %zu (%g vs %g)",
                             llm_qk_isa_name(isa), dt, N, C, OC, e, worst, (double)got[worst],
                             (double)want[worst]);
                tested++;
                /* a row's result does not depend on the batch (N < 32) */
                if (N > 1 && N < LLM_QK_GEMM_MIN_ROWS) {
                    float *one = malloc((size_t)OC * 4);
                    int n = N - 1;
                    assert_int_equal(llm_qk_matmul(one, x + (size_t)n * C, w, dt, bias, 1, C, OC, isa, 1), 0);
                    assert_memory_equal(one, got + (size_t)n * OC, (size_t)OC * 4);
                    free(one);
                }
            }
            free(wf); free(w); free(x); free(bias); free(ref); free(got); free(exact);
        }
    fprintf(stderr, "# fast kernels checked: %d (isa: avx2 %d, avx512 %d, avx512vnni %d)\n", tested,
            llm_qk_isa_ok(1), llm_qk_isa_ok(2), llm_qk_isa_ok(3));
    if (!llm_qk_isa_ok(LLM_QK_ISA_AVX512))
        fprintf(stderr, "# AVX-512 kernels not tested: this CPU lacks AVX-512\n");
    /* q formats refuse rows that are not a multiple of 32 */
    float xx[40] = {0}, oo[4];
    uint8_t ww[34 * 4] = {0};
    assert_int_equal(llm_qk_matmul(oo, xx, ww, LLM_QK_Q8_0, NULL, 1, 40, 1, LLM_QK_ISA_SCALAR, 1), -1);
    assert_int_equal(llm_qk_matmul(oo, xx, ww, LLM_QK_F32, NULL, 1, 32, 1, LLM_QK_ISA_SCALAR, 1), -1);
}

/* The AVX2 q8_0/q4_0 kernels' arithmetic, written out: per block the exact int32 dot of
 * each group of 4 weights (lane k: weights 4k..4k+3), times the float product dw*dx,
 * fused-added into lane k of the even- or odd-block accumulator; then the lanes summed
 * as hsum8 does.  Every decode path (R = 1, four rows at a time) must give these bits. */
static float avx2_order_dot(const void *wrow, int dt, const llm_block_q8_0 *xq, int nb)
{
    float acc[2][8] = {{0}};
    for (int b = 0; b < nb; b++) {
        int8_t wv[32];
        uint16_t hw;
        if (dt == LLM_QK_Q8_0) {
            const llm_block_q8_0 *blk = (const llm_block_q8_0 *)wrow + b;
            memcpy(&hw, &blk->d, 2);
            memcpy(wv, blk->q, 32);
        } else {
            const llm_block_q4_0 *blk = (const llm_block_q4_0 *)wrow + b;
            memcpy(&hw, &blk->d, 2);
            for (int j = 0; j < 16; j++) {
                wv[j] = (int8_t)((blk->q[j] & 15) - 8);
                wv[j + 16] = (int8_t)((blk->q[j] >> 4) - 8);
            }
        }
        uint16_t hx;
        memcpy(&hx, &xq[b].d, 2);
        float s = llm_f16_to_f32(hw) * llm_f16_to_f32(hx);
        for (int k = 0; k < 8; k++) {
            int p = 0;
            for (int j = 4 * k; j < 4 * k + 4; j++)
                p += wv[j] * xq[b].q[j];
            acc[b & 1][k] = fmaf((float)p, s, acc[b & 1][k]);
        }
    }
    float v[8], t[4];
    for (int k = 0; k < 8; k++)
        v[k] = acc[0][k] + acc[1][k];
    for (int k = 0; k < 4; k++)
        t[k] = v[k] + v[k + 4];
    float u0 = t[0] + t[2], u1 = t[1] + t[3];
    return u0 + u1;
}

/* The AVX2 and AVX-512 decode kernels bit for bit against avx2_order_dot, batches of
 * 1, 2, 3, 7, 8, 9 and 17 rows (the AVX-512 kernels take groups of 8, the others of 4),
 * and 70 on AVX-512, which keeps its integer kernels past LLM_QK_GEMM_MIN_ROWS:
 * output rows that are and are not multiples of 4, block counts below, at and above
 * multiples of 8 (the q4_0 scale chunks) and odd, rows at and past the q4_0 batched
 * kernel's table size (C 4096 / 4128), f16 scales of every magnitude (denormals
 * included) and extreme nibbles and activations. */
static void test_kernels_exact(void **state)
{
    (void)state;
    if (!llm_qk_isa_ok(LLM_QK_ISA_AVX2)) {
        fprintf(stderr, "# AVX2 kernels not tested: this CPU lacks AVX2\n");
        return;
    }
    int isas = 0;
    for (int isa = LLM_QK_ISA_AVX2; isa <= LLM_QK_ISA_AVX512VNNI; isa++)
        isas += llm_qk_isa_ok(isa);
    fprintf(stderr, "# bit-exact decode kernels: %d of avx2, avx512, avx512vnni\n", isas);
    tu_rng r = {21};
    int Cs[] = {32, 64, 224, 256, 288, 512, 768, 800, 4096, 4128};
    int OCs[] = {1, 3, 4, 5, 37, 64};
    int dts[] = {LLM_QK_Q4_0, LLM_QK_Q8_0};
    for (int d = 0; d < 2; d++)
        for (size_t ci = 0; ci < sizeof Cs / sizeof Cs[0]; ci++)
            for (size_t oi = 0; oi < sizeof OCs / sizeof OCs[0]; oi++) {
                int dt = dts[d], C = Cs[ci], OC = OCs[oi], nb = C / 32, N = 70;
                if (C > 800 && OC > 5)
                    continue;
                float *wf, *x = malloc((size_t)N * C * 4), *bias = malloc((size_t)OC * 4);
                unsigned char *w = make_w(&r, dt, OC, C, &wf);
                size_t rb = llm_qk_row_bytes(dt, C), bs = dt == LLM_QK_Q4_0 ? 18 : 34;
                /* random finite f16 scales (about a third denormal) and, in some rows,
                 * all-extreme quants */
                for (int o = 0; o < OC; o++)
                    for (int b = 0; b < nb; b++) {
                        unsigned char *blk = w + (size_t)o * rb + (size_t)b * bs;
                        uint16_t h = (uint16_t)((uint32_t)tu_next(&r) & 0xffff);
                        if ((h & 0x7c00) == 0x7c00)
                            h &= 0x83ff;
                        if ((uint32_t)tu_next(&r) % 3 == 0)
                            h &= 0x83ff;
                        memcpy(blk, &h, 2);
                        if (o % 3 == 1)
                            memset(blk + 2, dt == LLM_QK_Q4_0 ? (b & 1 ? 0x00 : 0xff) : (b & 1 ? 0x80 : 0x7f), bs - 2);
                    }
                tu_fill(&r, x, (size_t)N * C, -2, 2);
                for (int c = 0; c < C; c += 5)   /* activation blocks with +-127 */
                    x[c] = c % 2 ? 50 : -50;
                tu_fill(&r, bias, (size_t)OC, -1, 1);
                llm_block_q8_0 *xq = malloc((size_t)N * nb * sizeof *xq);
                float *got = malloc((size_t)N * OC * 4);
                for (int n = 0; n < N; n++)
                    llm_qk_quantize_row_q8_0(x + (size_t)n * C, xq + (size_t)n * nb, C);
                static const int NNs[] = {1, 2, 3, 7, 8, 9, 17, 70};
                for (int isa = LLM_QK_ISA_AVX2; isa <= LLM_QK_ISA_AVX512VNNI; isa++)
                for (size_t ni = 0; ni < sizeof NNs / sizeof NNs[0]; ni++)
                    for (int th = 1; th <= 2; th++) {
                        int NN = NNs[ni];
                        if (!llm_qk_isa_ok(isa) || (NN >= LLM_QK_GEMM_MIN_ROWS && isa < LLM_QK_ISA_AVX512))
                            continue;
                        assert_int_equal(llm_qk_matmul(got, x, w, dt, bias, NN, C, OC, isa, th), 0);
                        for (int n = 0; n < NN; n++)
                            for (int o = 0; o < OC; o++) {
                                float want = avx2_order_dot(w + (size_t)o * rb, dt, xq + (size_t)n * nb, nb) + bias[o];
                                float g = got[(size_t)n * OC + o];
                                if (memcmp(&g, &want, 4))
                                    fail_msg("%s dtype %d N %d C %d OC %d [%d,%d]: %.9g vs %.9g",
                                             llm_qk_isa_name(isa), dt, NN, C, OC, n, o, (double)g,
                                             (double)want);
                            }
                    }
                free(wf); free(w); free(x); free(bias); free(xq); free(got);
            }
}

/* The AVX2 q8_0 quantization (every activation row of the q kernels goes through it)
 * against the scalar one, byte for byte: random rows at several scales, exact ties
 * (x * id = k + 0.5 in both signs), values around the ties, NaN and infinite
 * activations, denormal and huge blocks, zeros and negative zeros. */
static void test_quantize_q8_0_avx2(void **state)
{
    (void)state;
    if (!llm_qk_isa_ok(LLM_QK_ISA_AVX2)) {
        fprintf(stderr, "# AVX2 quantization not tested: this CPU lacks AVX2\n");
        return;
    }
    tu_rng r = {41};
    enum { NB = 64, N = NB * 32 };
    float *x = malloc(N * sizeof *x);
    llm_block_q8_0 a[NB], b[NB];
    int ties = 0;
    for (int round = 0; round < 200; round++) {
        float scale = powf(10.0f, (float)(round % 13) - 6.0f);
        tu_fill(&r, x, N, -scale, scale);
        for (int blk = 0; blk < NB; blk++) {
            float *xb = x + 32 * blk;
            switch ((round + blk) % 8) {
            case 0:   /* max 127 exactly: id = 1, ties at k + 0.5 */
                for (int j = 0; j < 32; j++)
                    xb[j] = (float)((int)(tu_next(&r) % 254) - 127) + ((j & 1) ? 0.5f : 0.0f);
                xb[0] = 127.0f;
                ties++;
                break;
            case 1:   /* one step either side of the ties */
                for (int j = 1; j < 32; j++)
                    xb[j] = nextafterf((float)(j % 7) + 0.5f, j & 2 ? 0.0f : 200.0f) * (j & 4 ? -1.0f : 1.0f);
                xb[0] = -127.0f;
                break;
            case 2: xb[(int)(tu_next(&r) % 32)] = NAN; break;
            case 3: xb[(int)(tu_next(&r) % 32)] = (tu_next(&r) & 1) ? INFINITY : -INFINITY; break;
            case 4:
                for (int j = 0; j < 32; j++)
                    xb[j] *= 1e-38f;   /* denormal and tiny */
                break;
            case 5:
                for (int j = 0; j < 32; j++)
                    xb[j] = j & 1 ? -0.0f : 0.0f;
                break;
            case 6: xb[3] = 3e38f; break;
            default: break;
            }
        }
        memset(a, 0x55, sizeof a);
        memset(b, 0xaa, sizeof b);
        llm_qk_quantize_row_q8_0_scalar(x, a, N);
        llm_qk_quantize_row_q8_0_avx2(x, b, N);
        for (int blk = 0; blk < NB; blk++)
            if (memcmp(&a[blk], &b[blk], sizeof a[blk]))
                fail_msg("q8_0 quantization round %d block %d: avx2 differs from scalar", round, blk);
    }
    fprintf(stderr, "# q8_0 quantization: 200 x %d blocks, %d with ties, avx2 == scalar\n", NB, ties);
    free(x);
}

/* q4_0 repacked in groups of 8 rows (LLM_QK_Q4_0R8): the layout gives back every row's
 * weights exactly (padding rows zero), and its kernels, scalar and AVX2, give the scalar
 * q4_0 kernel's results bit for bit: output rows that are and are not multiples of 8 (the
 * padded last group), batches of 1 to 7, 1 and 2 threads, f16 scales of every magnitude
 * (denormals included), extreme nibbles and activations; the prefill path (N >= 32) the
 * same bits as on the original layout; row ranges that start and end inside a group. */
static void test_repack_q4_0r8(void **state)
{
    (void)state;
    tu_rng r = {33};
    int Cs[] = {32, 64, 96, 256, 768, 800, 4128};
    int OCs[] = {1, 5, 7, 8, 9, 15, 16, 37, 64, 67};
    int avx2 = llm_qk_isa_ok(LLM_QK_ISA_AVX2), checked = 0;
    assert_int_equal(llm_qk_repack_dtype(LLM_QK_Q8_0, 1), LLM_QK_Q8_0);
    assert_int_equal(llm_qk_repack_dtype(LLM_QK_Q4_0, 0), LLM_QK_Q4_0);
    assert_int_equal(llm_qk_repack_dtype(LLM_QK_Q4_0, 1), avx2 ? LLM_QK_Q4_0R8 : LLM_QK_Q4_0);
    assert_int_equal(llm_qk_repack_dtype(LLM_QK_Q4_0, -1), avx2 ? LLM_QK_Q4_0R8 : LLM_QK_Q4_0);
    for (size_t ci = 0; ci < sizeof Cs / sizeof Cs[0]; ci++)
        for (size_t oi = 0; oi < sizeof OCs / sizeof OCs[0]; oi++) {
            int C = Cs[ci], OC = OCs[oi], nb = C / 32, N = 70;
            if (C > 800 && OC > 9)
                continue;
            float *wf, *x = malloc((size_t)N * C * 4), *bias = malloc((size_t)OC * 4);
            unsigned char *w = make_w(&r, LLM_QK_Q4_0, OC, C, &wf);
            size_t rb = llm_qk_row_bytes(LLM_QK_Q4_0, C);
            for (int o = 0; o < OC; o++)
                for (int b = 0; b < nb; b++) {
                    unsigned char *blk = w + (size_t)o * rb + (size_t)b * 18;
                    uint16_t h = (uint16_t)((uint32_t)tu_next(&r) & 0xffff);
                    if ((h & 0x7c00) == 0x7c00 || (uint32_t)tu_next(&r) % 3 == 0)
                        h &= 0x83ff;
                    memcpy(blk, &h, 2);
                    if (o % 3 == 1)
                        memset(blk + 2, b & 1 ? 0x00 : 0xff, 16);
                }
            tu_fill(&r, x, (size_t)N * C, -2, 2);
            for (int c = 0; c < C; c += 5)
                x[c] = c % 2 ? 50 : -50;
            tu_fill(&r, bias, (size_t)OC, -1, 1);
            size_t bytes = llm_qk_matrix_bytes(LLM_QK_Q4_0R8, OC, C);
            assert_int_equal(bytes, (size_t)(OC + 7) / 8 * 8 * rb);
            unsigned char *rw = malloc(bytes);
            llm_qk_repack_q4_0r8(rw, w, OC, C);
            float *a = malloc((size_t)C * 4), *b = malloc((size_t)C * 4);
            for (int o = 0; o < (OC + 7) / 8 * 8; o++) {
                llm_qk_dequantize_wrow(LLM_QK_Q4_0R8, rw, C, o, a);
                if (o < OC) {
                    llm_qk_dequantize_wrow(LLM_QK_Q4_0, w, C, o, b);
                    assert_memory_equal(a, b, (size_t)C * 4);
                } else {
                    for (int c = 0; c < C; c++)
                        assert_true(a[c] == 0.0f);
                }
            }
            for (int o0 = 0; o0 < OC; o0 += 3) {   /* row ranges, in and across groups */
                int n = OC - o0 < 11 ? OC - o0 : 11;
                float *ya = malloc((size_t)n * C * 4), *yb = malloc((size_t)n * C * 4);
                llm_qk_dequantize_wrows(LLM_QK_Q4_0R8, rw, C, o0, n, ya);
                llm_qk_dequantize_wrows(LLM_QK_Q4_0, w, C, o0, n, yb);
                assert_memory_equal(ya, yb, (size_t)n * C * 4);
                if (avx2) {
                    memset(ya, 0xff, (size_t)n * C * 4);
                    llm_qk_dequantize_r8_avx2(rw, C, o0, n, ya);
                    assert_memory_equal(ya, yb, (size_t)n * C * 4);
                }
                free(ya);
                free(yb);
            }
            float *ref = malloc((size_t)N * OC * 4), *got = malloc((size_t)N * OC * 4);
            /* 1..7, 33 and 70: from LLM_QK_GEMM_MIN_ROWS rows AVX2 takes the dequantized
             * sgemm (the q4_0 one's results), AVX-512 its integer kernels (the scalar
             * kernel's) */
            static const int NNs[] = {1, 2, 3, 4, 5, 6, 7, 33, 70};
            for (size_t ni = 0; ni < sizeof NNs / sizeof NNs[0]; ni++) {
                int NN = NNs[ni];
                if (NN > N || (C > 800 && NN == 70 && OC > 5))
                    continue;
                for (int isa = LLM_QK_ISA_SCALAR; isa <= LLM_QK_ISA_AVX512VNNI; isa++) {
                    if (!llm_qk_isa_ok(isa) || (isa == LLM_QK_ISA_SCALAR && NN >= LLM_QK_GEMM_MIN_ROWS))
                        continue;
                    int isa0 = NN >= LLM_QK_GEMM_MIN_ROWS && isa == LLM_QK_ISA_AVX2 ? LLM_QK_ISA_AVX2
                                                                                   : LLM_QK_ISA_SCALAR;
                    assert_int_equal(llm_qk_matmul(ref, x, w, LLM_QK_Q4_0, bias, NN, C, OC, isa0, 1), 0);
                    for (int th = 1; th <= 2; th++) {
                        memset(got, 0xff, (size_t)NN * OC * 4);
                        assert_int_equal(llm_qk_matmul(got, x, rw, LLM_QK_Q4_0R8, bias, NN, C, OC, isa, th), 0);
                        for (int i = 0; i < NN * OC; i++)
                            if (memcmp(&got[i], &ref[i], 4))
                                fail_msg("q4_0r8 %s N %d C %d OC %d threads %d [%d,%d]: %.9g vs %.9g",
                                         llm_qk_isa_name(isa), NN, C, OC, th, i / OC, i % OC,
                                         (double)got[i], (double)ref[i]);
                        checked++;
                    }
                }
            }
            if (avx2) {   /* ranges inside groups: rows o0..o1 only, the others untouched */
                int R = 3, o0 = OC > 3 ? 3 : 0, o1 = OC > 11 ? OC - 2 : OC;
                llm_block_q8_0 *xq = malloc((size_t)R * nb * sizeof *xq);
                int32_t *xs = malloc((size_t)R * nb * 4);
                float *xd = malloc((size_t)R * nb * 4);
                for (int n = 0; n < R; n++)
                    llm_qk_quantize_row_q8_0(x + (size_t)n * C, xq + (size_t)n * nb, C);
                for (int i = 0; i < R * nb; i++) {
                    int t = 0;
                    for (int j = 0; j < 32; j++)
                        t += xq[i].q[j];
                    xs[i] = 8 * t;
                    xd[i] = llm_f16_to_f32(xq[i].d);
                }
                assert_int_equal(llm_qk_matmul(ref, x, w, LLM_QK_Q4_0, NULL, R, C, OC, LLM_QK_ISA_SCALAR, 1), 0);
                for (int k = 0; k < 3; k++) {   /* avx2, avx512, avx512 with vnni */
                    if (k && !llm_qk_isa_ok(k == 1 ? LLM_QK_ISA_AVX512 : LLM_QK_ISA_AVX512VNNI))
                        continue;
                    for (int i = 0; i < R * OC; i++)
                        got[i] = -7.0f;
                    if (k)
                        llm_qk_rows_r8_avx512(got, OC, rw, xq, xs, xd, R, nb, o0, o1, k == 2);
                    else
                        llm_qk_rows_r8_avx2(got, OC, rw, xq, xs, xd, R, nb, o0, o1);
                    for (int n = 0; n < R; n++)
                        for (int o = 0; o < OC; o++) {
                            float g = got[n * OC + o], want = o >= o0 && o < o1 ? ref[n * OC + o] : -7.0f;
                            if (memcmp(&g, &want, 4))
                                fail_msg("q4_0r8 kernel %d rows %d..%d C %d OC %d [%d,%d]: %.9g vs %.9g",
                                         k, o0, o1, C, OC, n, o, (double)g, (double)want);
                        }
                }
                free(xq); free(xs); free(xd);
            }
            free(wf); free(w); free(rw); free(x); free(bias); free(a); free(b); free(ref); free(got);
        }
    fprintf(stderr, "# q4_0r8 matmuls checked bit for bit: %d\n", checked);
}

/* The prefill path's AVX2 q8_0 dequantization: the scalar floats bit for bit, on random
 * blocks with every int8 value, scales from f16 subnormals to the largest f16, negative
 * zero, and row ranges that start and end anywhere. */
static void test_dequant_q8_0_avx2(void **state)
{
    (void)state;
    if (!llm_qk_isa_ok(LLM_QK_ISA_AVX2)) {
        print_message("# AVX2 q8_0 dequantization not tested: this CPU lacks AVX2\n");
        return;
    }
    enum { OC = 13, C = 96, NB = C / 32 };
    llm_block_q8_0 w[OC * NB];
    tu_rng r = {23};
    const uint16_t scales[] = {0x0001, 0x03ff, 0x0400, 0x3c00, 0xbc00, 0x7bff, 0xfbff, 0x8000, 0x2e66};
    for (int i = 0; i < OC * NB; i++) {
        w[i].d = i < (int)(sizeof scales / sizeof scales[0]) ? scales[i] : (uint16_t)(tu_next(&r) & 0x7bff);
        for (int k = 0; k < 32; k++)
            w[i].q[k] = (int8_t)(i == 1 ? k * 8 - 128 : (int)(tu_next(&r) & 0xff) - 128);
    }
    float want[OC * C], got[OC * C];
    for (int o0 = 0; o0 < OC; o0++)
        for (int n = 1; o0 + n <= OC; n += 3) {
            llm_qk_dequantize_wrows(LLM_QK_Q8_0, w, C, o0, n, want);
            memset(got, 0xff, sizeof got);
            llm_qk_dequantize_q8_0_avx2(w, C, o0, n, got);
            assert_memory_equal(got, want, (size_t)n * C * sizeof(float));
        }
}

/* The inference ops of both CPU backends accept every weight dtype (and q4_0 repacked). */
static void test_backend_ops(void **state)
{
    (void)state;
    llm_backend fast, ref;
    char err[128];
    assert_int_equal(llm_backend_init(&fast, "cpu", 2, err, sizeof err), 0);
    assert_int_equal(llm_backend_init(&ref, "cpu-ref", 1, err, sizeof err), 0);
    llm_backend_cpu_infer_init(&fast, 0);
    llm_backend_cpu_infer_init(&ref, 1);
    tu_rng r = {13};
    int C = 64, V = 10, N = 3;
    int dts[] = {LLM_QK_F16, LLM_QK_BF16, LLM_QK_Q8_0, LLM_QK_Q4_0};
    for (int d = 0; d < 4; d++) {
        assert_true(fast.infer_dtype_ok(&fast, dts[d]));
        assert_true(ref.infer_dtype_ok(&ref, dts[d]));
        float *wf, wpe[4 * 64], a[3 * 64], b[3 * 64], la[3 * 10], lb[3 * 10];
        void *w = make_w(&r, dts[d], V, C, &wf);
        tu_fill(&r, wpe, 4 * 64, -1, 1);
        int32_t ids[3] = {9, 0, 4}, pos[3] = {0, 3, 1};
        fast.embed_rows(&fast, a, ids, pos, w, dts[d], wpe, N, C);
        ref.embed_rows(&ref, b, ids, pos, w, dts[d], wpe, N, C);
        for (int i = 0; i < N; i++)
            for (int c = 0; c < C; c++)
                assert_float_equal(a[i * C + c], wf[ids[i] * C + c] + wpe[pos[i] * C + c], 1e-6);
        assert_memory_equal(a, b, sizeof a);
        fast.matmul_rows(&fast, la, a, w, dts[d], NULL, N, C, V);
        ref.matmul_rows(&ref, lb, a, w, dts[d], NULL, N, C, V);
        assert_true(tu_max_rel_err(la, lb, (size_t)N * V, 1.0, NULL) < 2e-5);
        if (dts[d] == LLM_QK_Q4_0) {   /* repacked: the same embeddings and logits */
            float ra[3 * 64], rla[3 * 10], rlb[3 * 10];
            void *rw = malloc(llm_qk_matrix_bytes(LLM_QK_Q4_0R8, V, C));
            llm_qk_repack_q4_0r8(rw, w, V, C);
            assert_true(fast.infer_dtype_ok(&fast, LLM_QK_Q4_0R8));
            fast.embed_rows(&fast, ra, ids, pos, rw, LLM_QK_Q4_0R8, wpe, N, C);
            assert_memory_equal(ra, a, sizeof a);
            fast.matmul_rows(&fast, rla, a, rw, LLM_QK_Q4_0R8, NULL, N, C, V);
            ref.matmul_rows(&ref, rlb, a, rw, LLM_QK_Q4_0R8, NULL, N, C, V);
            assert_memory_equal(rla, lb, sizeof lb);
            assert_memory_equal(rlb, lb, sizeof lb);
            free(rw);
        }
        free(wf);
        free(w);
    }
    llm_backend_free(&fast);
    llm_backend_free(&ref);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_f16),
        cmocka_unit_test(test_bf16),
        cmocka_unit_test(test_roundtrip_random),
        cmocka_unit_test(test_roundtrip_adversarial),
        cmocka_unit_test(test_ggml_layout),
        cmocka_unit_test(test_kernels),
        cmocka_unit_test(test_kernels_exact),
        cmocka_unit_test(test_quantize_q8_0_avx2),
        cmocka_unit_test(test_repack_q4_0r8),
        cmocka_unit_test(test_dequant_q8_0_avx2),
        cmocka_unit_test(test_backend_ops),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
