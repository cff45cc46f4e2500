/* Mixed-precision kernel tests (kernels/backend.h: cast_lo, matmul_forward_lo,
 * matmul_backward_lo) on the "cpu-ref" and "cpu" backends:
 *   - cast_lo on hand-checked edge cases (ties to even, the f16 overflow at 65520,
 *     subnormals, NaN, -0, infinities) for bf16 and f16;
 *   - cast_lo against PyTorch's .to(bfloat16) / .half() bits (tests/ref/lo_cast.bin,
 *     written by tests/ref/gen_lo_cast.py), bit for bit;
 *   - both GEMM ops of both backends against a double-precision GEMM of the rounded
 *     operands computed here, on shapes that are not multiples of 8/32, with and without
 *     bias, with the fast backend's row chunking forced small; the fp32 GEMM must NOT
 *     pass the same check (the operands really are rounded);
 *   - attention_forward_lo / attention_backward_lo of both backends against a double
 *     attention of the rounded operands computed here (T across the fast kernel's 64-row
 *     blocks, heads of odd sizes); the fp32 attention must NOT pass the same check;
 *   - attention_forward_lse / attention_backward_lse likewise (their contract: only the
 *     rows' log-sum-exp kept, the probabilities recomputed in the backward);
 *   - an fp16 overflow in an operand reaches the output as a non-finite value. */
#include "tests/unit/testutil.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/ckpt.h"
#include "common/quant.h"
#include "kernels/backend.h"
#include "kernels/cpu/cpu_ops.h"

static llm_backend REF, FAST;
static llm_backend *BACKENDS[2] = {&REF, &FAST};

static int setup(void **state)
{
    (void)state;
    return tu_cpu_backends(&REF, &FAST);
}

/* The fast backend with its activation chunk forced down to a few rows (several chunks
 * per GEMM, the dw/dbias sums split across them). */
static int setup_chunked(void **state)
{
    if (setup(state) != 0)
        return -1;
    ((llm_cpu_ctx *)FAST.ctx)->lo_chunk = 700;
    print_message("# fast backend with lo_chunk 700 floats\n");
    return 0;
}

static int teardown(void **state)
{
    (void)state;
    tu_cpu_backends_free(&REF, &FAST);
    return 0;
}

static float f_of(uint32_t u)
{
    float f;
    memcpy(&f, &u, 4);
    return f;
}

static int h_is_nan(uint16_t h, int lo)
{
    return lo == LLM_DT_F16 ? (h & 0x7c00) == 0x7c00 && (h & 0x3ff)
                            : (h & 0x7f80) == 0x7f80 && (h & 0x7f);
}

static const char *lo_name(int lo) { return lo == LLM_DT_F16 ? "f16" : "bf16"; }

/* ---- cast_lo ---- */

typedef struct {
    uint32_t in;
    uint16_t bf16, f16;   /* 0xffff: expect a NaN */
} cast_case;

static const cast_case CASES[] = {
    {0x00000000, 0x0000, 0x0000},   /* +0 */
    {0x80000000, 0x8000, 0x8000},   /* -0 keeps its sign */
    {0x3f800000, 0x3f80, 0x3c00},   /* 1 */
    {0xbf800000, 0xbf80, 0xbc00},   /* -1 */
    /* bf16 ties to even: 1 + 2^-8 is halfway between 1 and 1 + 2^-7 */
    {0x3f808000, 0x3f80, 0x3c04},   /* (exact in f16) */
    {0x3f818000, 0x3f82, 0x3c0c},   /* 1 + 3*2^-8: halfway, rounds up to even */
    {0x3f808001, 0x3f81, 0x3c04},   /* just above halfway */
    /* f16 ties to even: 1 + 2^-11 -> 1, 1 + 3*2^-11 -> 1 + 2^-9 */
    {0x3f801000, 0x3f80, 0x3c00},
    {0x3f803000, 0x3f80, 0x3c02},
    {0x45001000, 0x4500, 0x6800},   /* 2049 -> 2048 (tie, even) */
    {0x45003000, 0x4500, 0x6802},   /* 2051 -> 2052 (tie, even) */
    /* f16 range: 65504 max; below 65520 rounds down to it; 65520 and beyond: inf */
    {0x477fe000, 0x4780, 0x7bff},   /* 65504 */
    {0x477fefff, 0x4780, 0x7bff},   /* 65519.996 */
    {0x477ff000, 0x4780, 0x7c00},   /* 65520 -> inf */
    {0xc77ff000, 0xc780, 0xfc00},   /* -65520 -> -inf */
    {0x501502f9, 0x5015, 0x7c00},   /* 1e10 */
    /* bf16 range: ties at the top go to inf (even) */
    {0x7f7f7fff, 0x7f7f, 0x7c00},
    {0x7f7f8000, 0x7f80, 0x7c00},
    {0x7f7fffff, 0x7f80, 0x7c00},   /* FLT_MAX */
    {0x7f800000, 0x7f80, 0x7c00},   /* +inf */
    {0xff800000, 0xff80, 0xfc00},   /* -inf */
    /* f16 subnormals: 2^-24 is the smallest; 2^-25 ties to 0 (even); 1.5*2^-24 ties to 2 */
    {0x33800000, 0x3380, 0x0001},
    {0x33000000, 0x3300, 0x0000},
    {0x33000001, 0x3300, 0x0001},
    {0x33c00000, 0x33c0, 0x0002},
    {0x32800000, 0x3280, 0x0000},   /* 2^-26 */
    {0x38800000, 0x3880, 0x0400},   /* 2^-14, the smallest normal */
    {0x387fffff, 0x3880, 0x0400},   /* just below it: rounds up into the normals */
    {0x387fc000, 0x3880, 0x03ff},   /* largest subnormal exactly: 1023 * 2^-24 */
    {0xb3c00000, 0xb3c0, 0x8002},   /* negative subnormal tie */
    /* float subnormals: bf16 keeps (rounded) subnormals, f16 flushes them to signed 0 */
    {0x00000001, 0x0000, 0x0000},
    {0x00008000, 0x0000, 0x0000},   /* bf16 tie to even */
    {0x00018000, 0x0002, 0x0000},
    {0x007fffff, 0x0080, 0x0000},
    {0x80000001, 0x8000, 0x8000},
    /* NaN stays NaN (payloads are not compared) */
    {0x7fc00000, 0xffff, 0xffff},
    {0xffc00000, 0xffff, 0xffff},
    {0x7f800001, 0xffff, 0xffff},   /* signalling, tiny payload: must not become inf */
    {0x7fffffff, 0xffff, 0xffff},   /* all-ones payload: must not carry into the sign */
};
#define NCASES (sizeof CASES / sizeof CASES[0])

static void test_cast_edges(void **state)
{
    (void)state;
    float in[NCASES];
    uint16_t out[NCASES];
    for (size_t i = 0; i < NCASES; i++)
        in[i] = f_of(CASES[i].in);
    int bad = 0;
    for (int b = 0; b < 2; b++)
        for (int k = 0; k < 2; k++) {
            int lo = k ? LLM_DT_F16 : LLM_DT_BF16;
            memset(out, 0x55, sizeof out);
            BACKENDS[b]->cast_lo(BACKENDS[b], out, in, NCASES, lo);
            for (size_t i = 0; i < NCASES; i++) {
                uint16_t want = k ? CASES[i].f16 : CASES[i].bf16;
                int ok = want == 0xffff ? h_is_nan(out[i], lo) : out[i] == want;
                /* the library's scalar conversion (common/quant.h) is the same function */
                uint16_t lib = k ? llm_quant_f32_to_f16(in[i]) : llm_quant_f32_to_bf16(in[i]);
                ok &= want == 0xffff ? h_is_nan(lib, lo) : lib == want;
                if (!ok) {
                    print_message("# %s %s: 0x%08x -> 0x%04x (library 0x%04x), want 0x%04x\n",
                                  BACKENDS[b]->name, lo_name(lo), CASES[i].in, out[i], lib, want);
                    bad++;
                }
            }
        }
    assert_int_equal(bad, 0);
}

/* The fast backend's threaded cast (n beyond its serial cutoff) equals the reference's. */
static void test_cast_large(void **state)
{
    (void)state;
    size_t n = 200003;
    float *x = malloc(n * sizeof *x);
    uint16_t *a = malloc(n * 2), *b = malloc(n * 2);
    assert_true(x && a && b);
    tu_rng r = {17};
    for (size_t i = 0; i < n; i++)
        x[i] = f_of((uint32_t)tu_next(&r));   /* every class of float, NaNs included */
    for (int k = 0; k < 2; k++) {
        int lo = k ? LLM_DT_F16 : LLM_DT_BF16;
        REF.cast_lo(&REF, a, x, n, lo);
        FAST.cast_lo(&FAST, b, x, n, lo);
        assert_memory_equal(a, b, n * 2);
    }
    free(x);
    free(a);
    free(b);
}

static const char *root(void)
{
    const char *r = getenv("LLM_ROOT");
    return r ? r : ".";
}

static void test_cast_torch(void **state)
{
    (void)state;
    char path[1024];
    snprintf(path, sizeof path, "%s/tests/ref/lo_cast.bin", root());
    FILE *f = fopen(path, "rb");
    assert_non_null(f);
    char magic[8];
    uint32_t n = 0;
    assert_int_equal(fread(magic, 1, 8, f), 8);
    assert_memory_equal(magic, "LLMLOCST", 8);
    assert_int_equal(fread(&n, 4, 1, f), 1);
    assert_true(n > 1000 && n < 1000000);
    uint32_t *in = malloc(n * 4);
    uint16_t *bf = malloc(n * 2), *hf = malloc(n * 2), *out = malloc(n * 2);
    assert_true(in && bf && hf && out);
    assert_int_equal(fread(in, 4, n, f), n);
    assert_int_equal(fread(bf, 2, n, f), n);
    assert_int_equal(fread(hf, 2, n, f), n);
    assert_int_equal(fgetc(f), EOF);
    fclose(f);
    float *x = malloc(n * sizeof *x);
    assert_non_null(x);
    size_t nans = 0;
    for (uint32_t i = 0; i < n; i++) {
        x[i] = f_of(in[i]);
        nans += isnan(x[i]) != 0;
    }
    int bad = 0;
    for (int b = 0; b < 2; b++)
        for (int k = 0; k < 2; k++) {
            int lo = k ? LLM_DT_F16 : LLM_DT_BF16;
            const uint16_t *want = k ? hf : bf;
            BACKENDS[b]->cast_lo(BACKENDS[b], out, x, n, lo);
            for (uint32_t i = 0; i < n; i++) {
                int ok = isnan(x[i]) ? h_is_nan(out[i], lo) && h_is_nan(want[i], lo)
                                     : out[i] == want[i];
                if (!ok && bad++ < 10)
                    print_message("# %s %s: 0x%08x -> 0x%04x, torch 0x%04x\n", BACKENDS[b]->name,
                                  lo_name(lo), in[i], out[i], want[i]);
            }
        }
    print_message("# %u values (%zu NaN) against torch 1.13, both backends, bf16 and f16\n", n,
                  nans);
    assert_int_equal(bad, 0);
    free(in);
    free(bf);
    free(hf);
    free(out);
    free(x);
}

/* ---- GEMMs against a double-precision GEMM of the rounded operands ---- */

typedef struct {
    int N, C, OC;
} mshape;

static const mshape MSHAPES[] = {
    {1, 4, 3},   {10, 13, 37}, {21, 48, 70},  {34, 64, 96},  {70, 40, 23},
    {66, 127, 129}, {130, 33, 8}, {256, 96, 200}, {20, 64, 1500}, {3, 1, 5},
};
#define NMSHAPES (sizeof MSHAPES / sizeof MSHAPES[0])

static float rnd_lo(int lo, float x)
{
    return lo == LLM_DT_F16 ? llm_quant_f16_to_f32(llm_quant_f32_to_f16(x))
                            : llm_quant_bf16_to_f32(llm_quant_f32_to_bf16(x));
}

static float *rnd(tu_rng *r, size_t n, float lo, float hi)
{
    float *x = malloc(sizeof(float) * (n ? n : 1));
    assert_non_null(x);
    tu_fill(r, x, n, lo, hi);
    return x;
}

static float *dup(const float *x, size_t n)
{
    float *y = malloc(sizeof(float) * (n ? n : 1));
    assert_non_null(y);
    memcpy(y, x, sizeof(float) * n);
    return y;
}

/* max over i of |got[i] - want[i]| / scale[i] (NaN counts as infinite). */
static double worst(const float *got, const double *want, const double *scale, size_t n)
{
    double m = 0;
    for (size_t i = 0; i < n; i++) {
        double e = fabs((double)got[i] - want[i]) / (scale[i] > 1e-30 ? scale[i] : 1e-30);
        if (!(e <= m))
            m = isnan(e) ? INFINITY : e;
    }
    return m;
}

/* Bounds, relative to sum |terms| of each output: fp32 accumulation of at most 1500
 * exact products (the fast backend; the reference sums in double). */
#define TOL_FAST 2e-5
#define TOL_REF  1e-6

static void test_gemm(void **state)
{
    (void)state;
    tu_rng r = {5};
    double we[2][3] = {{0}}, f32_err = 0;
    for (int k = 0; k < 2; k++) {
        int lo = k ? LLM_DT_F16 : LLM_DT_BF16;
        for (size_t s = 0; s < NMSHAPES; s++) {
            int N = MSHAPES[s].N, C = MSHAPES[s].C, OC = MSHAPES[s].OC, withbias = s % 2;
            size_t nx = (size_t)N * C, nw = (size_t)OC * C, ny = (size_t)N * OC;
            float *x = rnd(&r, nx, -2, 2), *w = rnd(&r, nw, -1, 1), *dy = rnd(&r, ny, -1, 1);
            float *bias = withbias ? rnd(&r, OC, -1, 1) : NULL;
            uint16_t *wl = malloc(nw * 2 + 2);
            assert_non_null(wl);
            REF.cast_lo(&REF, wl, w, nw, lo);
            /* the double reference on the rounded operands; scale = sum of |terms| */
            double *y = calloc(ny, 8), *ys = calloc(ny, 8), *dx = calloc(nx, 8),
                   *dxs = calloc(nx, 8), *dw = calloc(nw, 8), *dws = calloc(nw, 8),
                   *db = calloc((size_t)OC, 8), *dbs = calloc((size_t)OC, 8);
            assert_true(y && ys && dx && dxs && dw && dws && db && dbs);
            float *dx0 = rnd(&r, nx, -1, 1), *dw0 = rnd(&r, nw, -1, 1), *db0 = rnd(&r, OC, -1, 1);
            for (int i = 0; i < N; i++)
                for (int o = 0; o < OC; o++) {
                    double dyr = rnd_lo(lo, dy[(size_t)i * OC + o]);
                    double a = bias ? bias[o] : 0, as = fabs(a);
                    for (int c = 0; c < C; c++) {
                        double xr = rnd_lo(lo, x[(size_t)i * C + c]);
                        double wr = rnd_lo(lo, w[(size_t)o * C + c]);
                        a += xr * wr;
                        as += fabs(xr * wr);
                        dx[(size_t)i * C + c] += dyr * wr;
                        dxs[(size_t)i * C + c] += fabs(dyr * wr);
                        dw[(size_t)o * C + c] += dyr * xr;
                        dws[(size_t)o * C + c] += fabs(dyr * xr);
                    }
                    y[(size_t)i * OC + o] = a;
                    ys[(size_t)i * OC + o] = as;
                    db[o] += dyr;
                    dbs[o] += fabs(dyr);
                }
            /* the accumulated outputs start from dx0, dw0, db0 */
            for (size_t i = 0; i < nx; i++) { dx[i] += dx0[i]; dxs[i] += fabs(dx0[i]); }
            for (size_t i = 0; i < nw; i++) { dw[i] += dw0[i]; dws[i] += fabs(dw0[i]); }
            for (int o = 0; o < OC; o++) { db[o] += db0[o]; dbs[o] += fabs(db0[o]); }
            for (int b = 0; b < 2; b++) {
                llm_backend *be = BACKENDS[b];
                double tol = b ? TOL_FAST : TOL_REF;
                float *out = rnd(&r, ny, -9, 9), *gx = dup(dx0, nx), *gw = dup(dw0, nw),
                      *gb = dup(db0, OC);
                be->matmul_forward_lo(be, out, x, wl, lo, bias, N, C, OC);
                be->matmul_backward_lo(be, gx, gw, withbias ? gb : NULL, dy, x, wl, lo, N, C, OC);
                double e[3] = {worst(out, y, ys, ny), worst(gx, dx, dxs, nx),
                               worst(gw, dw, dws, nw)};
                double eb = withbias ? worst(gb, db, dbs, OC) : 0;
                if (!withbias)
                    assert_memory_equal(gb, db0, OC * sizeof(float)); /* NULL dbias: untouched */
                if (eb > e[2])
                    e[2] = eb;
                for (int j = 0; j < 3; j++) {
                    if (e[j] > we[b][j])
                        we[b][j] = e[j];
                    if (!(e[j] <= tol))
                        print_message("# %s %s N=%d C=%d OC=%d: %s error %.3g > %.1g\n",
                                      be->name, lo_name(lo), N, C, OC,
                                      j == 0 ? "forward" : j == 1 ? "dinp" : "dw/dbias", e[j], tol);
                    assert_true(e[j] <= tol);
                }
                /* the fp32 GEMM on the unrounded operands must miss the rounded reference */
                be->matmul_forward(be, out, x, w, bias, N, C, OC);
                double e32 = worst(out, y, ys, ny);
                if (e32 > f32_err)
                    f32_err = e32;
                free(out); free(gx); free(gw); free(gb);
            }
            free(x); free(w); free(dy); free(bias); free(wl); free(dx0); free(dw0); free(db0);
            free(y); free(ys); free(dx); free(dxs); free(dw); free(dws); free(db); free(dbs);
        }
    }
    for (int b = 0; b < 2; b++)
        print_message("# %s: worst error / sum|terms|: forward %.3g, dinp %.3g, dw+dbias %.3g\n",
                      BACKENDS[b]->name, we[b][0], we[b][1], we[b][2]);
    print_message("# fp32 GEMM against the rounded reference: %.3g (must exceed 1e-3)\n", f32_err);
    assert_true(f32_err > 1e-3);
}

/* ---- attention against a double-precision attention of the rounded operands ---- */

typedef struct {
    int B, T, C, NH;
} ashape;

/* T > 64 crosses the fast kernel's row/column blocks */
static const ashape ASHAPES[] = {
    {1, 1, 4, 1}, {2, 5, 12, 3}, {1, 70, 16, 2}, {2, 67, 40, 5}, {1, 130, 64, 2},
};
#define NASHAPES (sizeof ASHAPES / sizeof ASHAPES[0])

/* Bounds.  att: fp32 softmax against the double one, absolute (probabilities <= 1).
 * out and dv: relative to sum |terms|, the rounded probabilities taken from what the
 * backend stored (forward) or was given (backward), so no rounding can differ.  dq, dk:
 * the score gradient is rounded from an fp32 value that may differ from the double one in
 * its last bits, so a rounding may go the other way: at most one lo ulp per term,
 * 2^-8 (bf16) or 2^-11 (f16) of sum |terms|, plus the fp32 accumulation. */
#define TOL_ATT 2e-6

static void test_attention(void **state)
{
    (void)state;
    tu_rng r = {13};
    double we[2][5] = {{0}}, f32_err = 0;
    for (int k = 0; k < 2; k++) {
        int lo = k ? LLM_DT_F16 : LLM_DT_BF16;
        double tol_ds = (k ? 0x1p-11 : 0x1p-8) + TOL_FAST;
        for (size_t si = 0; si < NASHAPES; si++) {
            int B = ASHAPES[si].B, T = ASHAPES[si].T, C = ASHAPES[si].C, NH = ASHAPES[si].NH;
            int hs = C / NH;
            size_t C3 = 3 * (size_t)C, nq = (size_t)B * T * C3, no = (size_t)B * T * C,
                   na = (size_t)B * NH * T * T;
            double scale = 1.0 / sqrt((double)hs);
            float *qkv = rnd(&r, nq, -2, 2), *dy = rnd(&r, no, -1, 1), *dq0 = rnd(&r, nq, -1, 1);
            float *P = malloc(na * sizeof(float));
            double *dq = calloc(nq, 8), *dqs = calloc(nq, 8);
            assert_true(P && dq && dqs);
            /* forward probabilities and the backward, in double on the rounded operands */
            for (int b = 0; b < B; b++)
                for (int h = 0; h < NH; h++)
                    for (int t = 0; t < T; t++) {
                        size_t qo = ((size_t)b * T + t) * C3 + (size_t)h * hs;
                        float *pr = P + (((size_t)b * NH + h) * T + t) * T;
                        double sc[130], mx = -INFINITY, sum = 0, dp[130], pdp = 0;
                        for (int s2 = 0; s2 < T; s2++) {
                            size_t ko = ((size_t)b * T + s2) * C3 + C + (size_t)h * hs;
                            double d = 0;
                            for (int i = 0; i < hs; i++)
                                d += (double)rnd_lo(lo, qkv[qo + i]) * rnd_lo(lo, qkv[ko + i]);
                            sc[s2] = d * scale;
                            if (s2 <= t && sc[s2] > mx)
                                mx = sc[s2];
                        }
                        for (int s2 = 0; s2 <= t; s2++)
                            sum += exp(sc[s2] - mx);
                        for (int s2 = 0; s2 < T; s2++)
                            pr[s2] = s2 <= t ? (float)(exp(sc[s2] - mx) / sum) : 0.0f;
                        const float *g = dy + ((size_t)b * T + t) * C + (size_t)h * hs;
                        for (int s2 = 0; s2 <= t; s2++) {
                            size_t vo = ((size_t)b * T + s2) * C3 + 2 * (size_t)C + (size_t)h * hs;
                            double d = 0, pl = rnd_lo(lo, pr[s2]);
                            for (int i = 0; i < hs; i++) {
                                double gl = rnd_lo(lo, g[i]);
                                d += gl * rnd_lo(lo, qkv[vo + i]);
                                dq[vo + i] += pl * gl;
                                dqs[vo + i] += fabs(pl * gl);
                            }
                            dp[s2] = d;
                        }
                        for (int s2 = 0; s2 <= t; s2++)
                            pdp += pr[s2] * dp[s2];
                        for (int s2 = 0; s2 <= t; s2++) {
                            double ds = rnd_lo(lo, (float)(pr[s2] * (dp[s2] - pdp) * scale));
                            size_t ko = ((size_t)b * T + s2) * C3 + C + (size_t)h * hs;
                            for (int i = 0; i < hs; i++) {
                                double kl = rnd_lo(lo, qkv[ko + i]), ql = rnd_lo(lo, qkv[qo + i]);
                                dq[qo + i] += ds * kl;
                                dqs[qo + i] += fabs(ds * kl);
                                dq[ko + i] += ds * ql;
                                dqs[ko + i] += fabs(ds * ql);
                            }
                        }
                    }
            for (size_t i = 0; i < nq; i++) { dq[i] += dq0[i]; dqs[i] += fabs(dq0[i]); }
            for (int bi = 0; bi < 2; bi++) {
                llm_backend *be = BACKENDS[bi];
                double tol = bi ? TOL_FAST : TOL_REF;
                float *out = rnd(&r, no, -9, 9), *att = rnd(&r, na, -9, 9), *g = dup(dq0, nq);
                be->attention_forward_lo(be, out, att, qkv, B, T, C, NH, lo);
                double ea = 0;
                for (size_t i = 0; i < na; i++)
                    if (!(fabs((double)att[i] - P[i]) <= ea))
                        ea = isnan(att[i]) ? INFINITY : fabs((double)att[i] - P[i]);
                /* out from the probabilities this backend stored */
                double *y = calloc(no, 8), *ys = calloc(no, 8);
                assert_true(y && ys);
                for (int b = 0; b < B; b++)
                    for (int h = 0; h < NH; h++)
                        for (int t = 0; t < T; t++)
                            for (int s2 = 0; s2 <= t; s2++) {
                                double pl = rnd_lo(lo, att[(((size_t)b * NH + h) * T + t) * T + s2]);
                                for (int i = 0; i < hs; i++) {
                                    double v = rnd_lo(lo, qkv[((size_t)b * T + s2) * C3 + 2 * (size_t)C +
                                                              (size_t)h * hs + i]);
                                    y[((size_t)b * T + t) * C + (size_t)h * hs + i] += pl * v;
                                    ys[((size_t)b * T + t) * C + (size_t)h * hs + i] += fabs(pl * v);
                                }
                            }
                double eo = worst(out, y, ys, no);
                /* the backward from the double probabilities (given, as fp32) */
                be->attention_backward_lo(be, g, dy, qkv, P, B, T, C, NH, lo);
                double edv = 0, edqk = 0;
                for (size_t i = 0; i < nq; i++) {
                    double e = fabs((double)g[i] - dq[i]) / (dqs[i] > 1e-30 ? dqs[i] : 1e-30);
                    e = isnan(e) ? INFINITY : e;
                    double *w = (i % C3) >= 2 * (size_t)C ? &edv : &edqk;
                    if (!(e <= *w))
                        *w = e;
                }
                double e[4] = {ea, eo, edv, edqk}, bound[4] = {TOL_ATT, tol, tol, tol_ds};
                for (int j = 0; j < 4; j++) {
                    if (e[j] > we[bi][j])
                        we[bi][j] = e[j];
                    if (!(e[j] <= bound[j]))
                        print_message("# %s %s B=%d T=%d C=%d NH=%d: %s error %.3g > %.3g\n",
                                      be->name, lo_name(lo), B, T, C, NH,
                                      (const char *[]){"att", "out", "dv", "dq/dk"}[j], e[j],
                                      bound[j]);
                    assert_true(e[j] <= bound[j]);
                }
                /* the fp32 attention on the unrounded operands must miss the reference */
                if (T > 1) {
                    be->attention_forward(be, out, att, qkv, B, T, C, NH);
                    double e32 = worst(out, y, ys, no);
                    if (e32 > f32_err)
                        f32_err = e32;
                }
                free(out); free(att); free(g); free(y); free(ys);
            }
            free(qkv); free(dy); free(dq0); free(P); free(dq); free(dqs);
        }
    }
    for (int b = 0; b < 2; b++)
        print_message("# %s attention lo: worst att %.3g (abs), out %.3g, dv %.3g, dq/dk %.3g "
                      "(/ sum|terms|)\n", BACKENDS[b]->name, we[b][0], we[b][1], we[b][2], we[b][3]);
    print_message("# fp32 attention against the rounded reference: %.3g (must exceed 1e-3)\n",
                  f32_err);
    assert_true(f32_err > 1e-3);
}

/* attention_forward_lse / attention_backward_lse against a double reference of their
 * contract.  A probability may be rounded to lo from values that differ in their last
 * fp32 bits, so each output may miss by one lo ulp per term (max <= ulp + TOL_FAST), but
 * such flips are rare: the mean error must stay at fp32 level (TOL_FAST), which unrounded
 * operands (errors ~ half an ulp everywhere) would miss. */
static void check_lse_errs(const char *what, const char *be, int lo, const ashape *a,
                           const float *got, const double *want, const double *scale, size_t n,
                           double *wmax, double *wmean)
{
    double mx = 0, sum = 0, ulp = lo == LLM_DT_F16 ? 0x1p-11 : 0x1p-8;
    for (size_t i = 0; i < n; i++) {
        double e = fabs((double)got[i] - want[i]) / (scale[i] > 1e-30 ? scale[i] : 1e-30);
        e = isnan(e) ? INFINITY : e;
        sum += e;
        if (!(e <= mx))
            mx = e;
    }
    double mean = n ? sum / (double)n : 0;
    if (mx > *wmax)
        *wmax = mx;
    if (mean > *wmean)
        *wmean = mean;
    if (!(mx <= ulp + TOL_FAST && mean <= TOL_FAST))
        print_message("# %s %s lse B=%d T=%d C=%d NH=%d: %s max %.3g mean %.3g\n", be,
                      lo_name(lo), a->B, a->T, a->C, a->NH, what, mx, mean);
    assert_true(mx <= ulp + TOL_FAST && mean <= TOL_FAST);
}

static void test_attention_lse(void **state)
{
    (void)state;
    tu_rng r = {17};
    double wmax[2] = {0}, wmean[2] = {0}, wlse[2] = {0};
    for (int k = 0; k < 2; k++) {
        int lo = k ? LLM_DT_F16 : LLM_DT_BF16;
        for (size_t si = 0; si < NASHAPES; si++) {
            const ashape *sh = &ASHAPES[si];
            int B = sh->B, T = sh->T, C = sh->C, NH = sh->NH, hs = C / NH;
            size_t C3 = 3 * (size_t)C, nq = (size_t)B * T * C3, no = (size_t)B * T * C,
                   nl = (size_t)B * NH * T;
            double scale = 1.0 / sqrt((double)hs);
            float *qkv = rnd(&r, nq, -2, 2), *dy = rnd(&r, no, -1, 1), *dq0 = rnd(&r, nq, -1, 1);
            float *L = malloc(nl * 4), *O = malloc(no * 4);
            double *y = calloc(no, 8), *ys = calloc(no, 8), *dq = calloc(nq, 8),
                   *dqs = calloc(nq, 8), *lref = calloc(nl, 8);
            assert_true(L && O && y && ys && dq && dqs && lref);
            /* forward: lse and out in double */
            for (int b = 0; b < B; b++)
                for (int h = 0; h < NH; h++)
                    for (int t = 0; t < T; t++) {
                        size_t qo = ((size_t)b * T + t) * C3 + (size_t)h * hs;
                        size_t go = ((size_t)b * T + t) * C + (size_t)h * hs;
                        double sc[130], mx = -INFINITY, sum = 0;
                        for (int s2 = 0; s2 <= t; s2++) {
                            size_t ko = ((size_t)b * T + s2) * C3 + C + (size_t)h * hs;
                            double d = 0;
                            for (int i = 0; i < hs; i++)
                                d += (double)rnd_lo(lo, qkv[qo + i]) * rnd_lo(lo, qkv[ko + i]);
                            sc[s2] = d * scale;
                            mx = sc[s2] > mx ? sc[s2] : mx;
                        }
                        for (int s2 = 0; s2 <= t; s2++)
                            sum += exp(sc[s2] - mx);
                        double l = mx + log(sum);
                        lref[((size_t)b * NH + h) * T + t] = l;
                        L[((size_t)b * NH + h) * T + t] = (float)l;
                        for (int s2 = 0; s2 <= t; s2++) {
                            double pl = rnd_lo(lo, (float)exp(sc[s2] - l));
                            size_t vo = ((size_t)b * T + s2) * C3 + 2 * (size_t)C + (size_t)h * hs;
                            for (int i = 0; i < hs; i++) {
                                double v = rnd_lo(lo, qkv[vo + i]);
                                y[go + i] += pl * v;
                                ys[go + i] += fabs(pl * v);
                            }
                        }
                    }
            for (size_t i = 0; i < no; i++)
                O[i] = (float)y[i];
            /* backward from L and O (as given to the backends) */
            for (size_t i = 0; i < nq; i++) { dq[i] = dq0[i]; dqs[i] = fabs(dq0[i]); }
            for (int b = 0; b < B; b++)
                for (int h = 0; h < NH; h++)
                    for (int t = 0; t < T; t++) {
                        size_t qo = ((size_t)b * T + t) * C3 + (size_t)h * hs;
                        size_t go = ((size_t)b * T + t) * C + (size_t)h * hs;
                        double D = 0, l = L[((size_t)b * NH + h) * T + t];
                        for (int i = 0; i < hs; i++)
                            D += (double)dy[go + i] * O[go + i];
                        for (int s2 = 0; s2 <= t; s2++) {
                            size_t ko = ((size_t)b * T + s2) * C3 + C + (size_t)h * hs;
                            size_t vo = ko + (size_t)C;
                            double sc = 0, dp = 0;
                            for (int i = 0; i < hs; i++) {
                                sc += (double)rnd_lo(lo, qkv[qo + i]) * rnd_lo(lo, qkv[ko + i]);
                                dp += (double)rnd_lo(lo, dy[go + i]) * rnd_lo(lo, qkv[vo + i]);
                            }
                            double p = exp(sc * scale - l), pl = rnd_lo(lo, (float)p);
                            double ds = rnd_lo(lo, (float)(scale * p * (dp - D)));
                            for (int i = 0; i < hs; i++) {
                                double g = rnd_lo(lo, dy[go + i]), kl = rnd_lo(lo, qkv[ko + i]),
                                       ql = rnd_lo(lo, qkv[qo + i]);
                                dq[vo + i] += pl * g;
                                dqs[vo + i] += fabs(pl * g);
                                dq[qo + i] += ds * kl;
                                dqs[qo + i] += fabs(ds * kl);
                                dq[ko + i] += ds * ql;
                                dqs[ko + i] += fabs(ds * ql);
                            }
                        }
                    }
            for (int bi = 0; bi < 2; bi++) {
                llm_backend *be = BACKENDS[bi];
                float *out = rnd(&r, no, -9, 9), *lse = rnd(&r, nl, -9, 9), *g = dup(dq0, nq);
                be->attention_forward_lse(be, out, lse, qkv, B, T, C, NH, lo);
                for (size_t i = 0; i < nl; i++) {
                    double e = fabs(lse[i] - lref[i]) / (1 + fabs(lref[i]));
                    e = isnan(e) ? INFINITY : e;
                    if (!(e <= wlse[bi]))
                        wlse[bi] = e;
                    assert_true(e <= 1e-6);
                }
                check_lse_errs("out", be->name, lo, sh, out, y, ys, no, &wmax[bi], &wmean[bi]);
                be->attention_backward_lse(be, g, dy, qkv, O, L, B, T, C, NH, lo);
                check_lse_errs("dqkv", be->name, lo, sh, g, dq, dqs, nq, &wmax[bi], &wmean[bi]);
                free(out); free(lse); free(g);
            }
            free(qkv); free(dy); free(dq0); free(L); free(O);
            free(y); free(ys); free(dq); free(dqs); free(lref);
        }
    }
    for (int b = 0; b < 2; b++)
        print_message("# %s attention lse: lse %.3g, out/dqkv max %.3g, mean %.3g (/ sum|terms|)\n",
                      BACKENDS[b]->name, wlse[b], wmax[b], wmean[b]);
}

/* An operand beyond the f16 range becomes inf: the outputs it touches are non-finite
 * (what the trainer's dynamic loss scaling detects); bf16 holds the same value. */
static void test_overflow(void **state)
{
    (void)state;
    enum { N = 5, C = 7, OC = 6 };
    tu_rng r = {9};
    float x[N * C], w[OC * C], dy[N * OC], out[N * OC], dx[N * C], dw[OC * C], db[OC];
    uint16_t wl[OC * C];
    tu_fill(&r, x, N * C, -1, 1);
    tu_fill(&r, w, OC * C, -1, 1);
    tu_fill(&r, dy, N * OC, -1, 1);
    x[2 * C + 3] = 70000.0f;     /* row 2 of the input */
    dy[4 * OC + 1] = -1e6f;      /* row 4, column 1 of the output gradient */
    for (int b = 0; b < 2; b++)
        for (int k = 0; k < 2; k++) {
            llm_backend *be = BACKENDS[b];
            int lo = k ? LLM_DT_F16 : LLM_DT_BF16;
            be->cast_lo(be, wl, w, OC * C, lo);
            be->matmul_forward_lo(be, out, x, wl, lo, NULL, N, C, OC);
            memset(dx, 0, sizeof dx);
            memset(dw, 0, sizeof dw);
            memset(db, 0, sizeof db);
            be->matmul_backward_lo(be, dx, dw, db, dy, x, wl, lo, N, C, OC);
            for (int i = 0; i < N; i++)
                for (int o = 0; o < OC; o++)
                    assert_int_equal(!isfinite(out[i * OC + o]), lo == LLM_DT_F16 && i == 2);
            for (int i = 0; i < N; i++)
                for (int c = 0; c < C; c++)
                    assert_int_equal(!isfinite(dx[i * C + c]), lo == LLM_DT_F16 && i == 4);
            for (int o = 0; o < OC; o++) {
                assert_int_equal(!isfinite(db[o]), lo == LLM_DT_F16 && o == 1);
                /* dw row 1 sees -inf * x: non-finite; the others see row 2's inf input */
                for (int c = 0; c < C; c++)
                    assert_int_equal(!isfinite(dw[o * C + c]),
                                     lo == LLM_DT_F16 && (o == 1 || c == 3));
            }
        }
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_cast_edges),
        cmocka_unit_test(test_cast_large),
        cmocka_unit_test(test_cast_torch),
        cmocka_unit_test(test_gemm),
        cmocka_unit_test(test_attention),
        cmocka_unit_test(test_attention_lse),
        cmocka_unit_test(test_overflow),
    };
    const struct CMUnitTest chunked[] = {
        cmocka_unit_test(test_gemm),
        cmocka_unit_test(test_overflow),
    };
    int rc = cmocka_run_group_tests_name("mixed", tests, setup, teardown);
    rc |= cmocka_run_group_tests_name("mixed_chunked", chunked, setup_chunked, teardown);
    return rc;
}
