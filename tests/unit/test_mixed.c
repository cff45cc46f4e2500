/* Mixed-precision kernel tests (kernels/backend.h, "mixed precision": cast_lo and the
 * lo-activation GEMMs) on the "cpu-ref" and "cpu" backends:
 *   - cast_lo on hand-checked edge cases (ties to even, the f16 overflow at 65520,
 *     subnormals, NaN, -0, infinities) for bf16 and f16;
 *   - cast_lo against PyTorch's .to(bfloat16) / .half() bits (tests/ref/lo_cast.bin,
 *     written by tests/ref/gen_lo_cast.py), bit for bit;
 *   - both GEMM ops of both backends on lo operands against a double-precision GEMM
 *     computed here, fp32 and lo outputs (a lo output within one rounding, and equal to
 *     the rounded reference for nearly every element), with and without bias, on shapes
 *     that are not multiples of 8/32, with the row chunking forced small; overwritten
 *     outputs start as NaN, accumulated ones from random values;
 *   - an f16 infinity in an operand reaches the outputs it touches as a non-finite
 *     value, and a lo output beyond the f16 range becomes inf.
 * The other lo ops (layernorm, GELU, cross-entropy, the lse attention): test_lo_ops.c. */
#include "tests/unit/testutil.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/ckpt.h"
#include "common/quant.h"
#include "kernels/backend.h"
#include "kernels/cpu/cpu_ops.h"

#include "tests/unit/lo_fixture.h"

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

/* ---- GEMMs against a double-precision GEMM of the lo operands ---- */

typedef struct {
    int N, C, OC;
} mshape;

static const mshape MSHAPES[] = {
    {1, 4, 3},   {10, 13, 37}, {21, 48, 70},  {34, 64, 96},  {70, 40, 23},
    {66, 127, 129}, {130, 33, 8}, {256, 96, 200}, {20, 64, 1500}, {3, 1, 5},
};
#define NMSHAPES (sizeof MSHAPES / sizeof MSHAPES[0])




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

/* A lo output h(n) against the double result want with scale sum|terms|: the worst
 * error (one rounding flip allowed: callers bound it by an ulp plus the fp32 one) and
 * the fraction of elements whose bits differ from want rounded (a flip needs want
 * within the fp32 error of a rounding midpoint: rare; a wrong or missing rounding makes
 * it about half). */
static double worst_lo(const uint16_t *h, int lo, const double *want, const double *scale,
                       size_t n, double *differ)
{
    double m = 0;
    size_t d = 0;
    for (size_t i = 0; i < n; i++) {
        double v = lo_val(h[i], lo);
        double e = fabs(v - want[i]) / (scale[i] > 1e-30 ? scale[i] : 1e-30);
        if (!(e <= m))
            m = isnan(e) ? INFINITY : e;
        d += h[i] != lo_bits(want[i], lo);
    }
    *differ = n ? (double)d / (double)n : 0;
    return m;
}

/* Bounds, relative to sum |terms| of each output: fp32 accumulation of at most 1500
 * exact products (the fast backend; the reference sums in double), plus one lo ulp for a
 * lo output; at most DIFFER of a lo output's elements may round differently from the
 * double result. */
#define TOL_FAST 2e-5
#define TOL_REF  1e-6
#define DIFFER   0.05

static double ulp_of(int lo) { return lo == LLM_DT_F16 ? 0x1p-11 : 0x1p-8; }

/* One GEMM case on backend be; we[0..3]: worst forward, dinp, dw/dbias errors and the
 * worst lo differing fraction, updated. */
static void gemm_case(llm_backend *be, int lo, int N, int C, int OC, int withbias, int lo_out,
                      tu_rng *r, double *we)
{
    size_t nx = (size_t)N * C, nw = (size_t)OC * C, ny = (size_t)N * OC;
    float *x, *w, *dy, *bias;
    uint16_t *xl = rnd_lo(r, nx, -2, 2, lo, &x), *wl = rnd_lo(r, nw, -1, 1, lo, &w),
             *dyl = rnd_lo(r, ny, -1, 1, lo, &dy), *bl = rnd_lo(r, OC, -1, 1, lo, &bias);
    double *y = calloc(ny, 8), *ys = calloc(ny, 8), *dx = calloc(nx, 8), *dxs = calloc(nx, 8),
           *dw = calloc(nw, 8), *dws = calloc(nw, 8), *db = calloc((size_t)OC, 8),
           *dbs = calloc((size_t)OC, 8);
    assert_true(y && ys && dx && dxs && dw && dws && db && dbs);
    float *dw0 = tu_rnd(r, nw, -1, 1), *db0 = tu_rnd(r, OC, -1, 1);
    for (int i = 0; i < N; i++)
        for (int o = 0; o < OC; o++) {
            double dyr = dy[(size_t)i * OC + o];
            double a = withbias ? bias[o] : 0, as = fabs(a);
            for (int c = 0; c < C; c++) {
                double xr = x[(size_t)i * C + c], wr = w[(size_t)o * C + c];
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
    /* the accumulated outputs start from dw0, db0 */
    for (size_t i = 0; i < nw; i++) { dw[i] += dw0[i]; dws[i] += fabs(dw0[i]); }
    for (int o = 0; o < OC; o++) { db[o] += db0[o]; dbs[o] += fabs(db0[o]); }
    double tol = strcmp(be->name, "cpu-ref") ? TOL_FAST : TOL_REF, ulp = ulp_of(lo), dif = 0;
    int odt = lo_out ? lo : LLM_DT_F32;
    /* overwritten outputs start as NaN: a kernel that accumulates into them fails */
    void *out = malloc(ny * 4 + 4), *gx = malloc(nx * 4 + 4);
    float *gw = tu_dup(dw0, nw), *gb = tu_dup(db0, OC);
    assert_true(out && gx);
    memset(out, 0xff, ny * 4 + 4);
    memset(gx, 0xff, nx * 4 + 4);
    be->matmul_forward_lo(be, out, odt, xl, wl, lo, withbias ? (lo_out ? (void *)bl : (void *)bias) : NULL,
                          N, C, OC);
    be->matmul_backward_lo(be, gx, odt, gw, withbias ? gb : NULL, dyl, xl, wl, lo, N, C, OC);
    double e[3], d1 = 0, d2 = 0;
    if (lo_out) {
        e[0] = worst_lo(out, lo, y, ys, ny, &d1);
        e[1] = worst_lo(gx, lo, dx, dxs, nx, &d2);
        dif = d1 > d2 ? d1 : d2;
    } else {
        e[0] = worst(out, y, ys, ny);
        e[1] = worst(gx, dx, dxs, nx);
    }
    e[2] = worst(gw, dw, dws, nw);
    if (withbias) {
        double eb = worst(gb, db, dbs, OC);
        e[2] = eb > e[2] ? eb : e[2];
    } else {
        assert_memory_equal(gb, db0, OC * sizeof(float)); /* NULL dbias: untouched */
    }
    for (int j = 0; j < 3; j++) {
        double bound = tol + (lo_out && j < 2 ? ulp : 0);
        if (e[j] > we[j])
            we[j] = e[j];
        if (!(e[j] <= bound))
            print_message("# %s %s%s N=%d C=%d OC=%d: %s error %.3g > %.3g\n", be->name,
                          lo_name(lo), lo_out ? " lo out" : "", N, C, OC,
                          j == 0 ? "forward" : j == 1 ? "dinp" : "dw/dbias", e[j], bound);
        assert_true(e[j] <= bound);
    }
    if (dif > we[3])
        we[3] = dif;
    /* tiny outputs have too few elements for a fraction */
    if (ny >= 100 && nx >= 100 && !(dif <= DIFFER)) {
        print_message("# %s %s N=%d C=%d OC=%d: %.3g of the lo outputs round differently\n",
                      be->name, lo_name(lo), N, C, OC, dif);
        fail();
    }
    free(out); free(gx); free(gw); free(gb);
    free(x); free(w); free(dy); free(bias); free(xl); free(wl); free(dyl); free(bl);
    free(dw0); free(db0);
    free(y); free(ys); free(dx); free(dxs); free(dw); free(dws); free(db); free(dbs);
}

static void test_gemm(void **state)
{
    (void)state;
    tu_rng r = {5};
    double we[2][4] = {{0}};
    for (int k = 0; k < 2; k++) {
        int lo = k ? LLM_DT_F16 : LLM_DT_BF16;
        for (size_t s = 0; s < NMSHAPES; s++)
            for (int b = 0; b < 2; b++)
                for (int lo_out = 0; lo_out < 2; lo_out++)
                    gemm_case(BACKENDS[b], lo, MSHAPES[s].N, MSHAPES[s].C, MSHAPES[s].OC,
                              (int)(s + lo_out) % 2, lo_out, &r, we[b]);
    }
    /* empty sums: OC = 0 overwrites dinp with zeros; C = 0 gives out = bias */
    for (int b = 0; b < 2; b++)
        for (int lo_out = 0; lo_out < 2; lo_out++) {
            llm_backend *be = BACKENDS[b];
            int dt = lo_out ? LLM_DT_BF16 : LLM_DT_F32;
            uint32_t gx[4 * 5], out[4 * 3], zero[4 * 5] = {0};
            uint16_t x16[4] = {0}, w16[4] = {0}, bl[3];
            float bf[3] = {0.5f, -2.0f, 3.0f};
            memset(gx, 0xff, sizeof gx);
            be->matmul_backward_lo(be, gx, dt, NULL, NULL, x16, x16, w16, LLM_DT_BF16, 4, 5, 0);
            assert_memory_equal(gx, zero, (lo_out ? 2 : 4) * 4 * 5);
            for (int o = 0; o < 3; o++)
                bl[o] = llm_quant_f32_to_bf16(bf[o]);
            memset(out, 0xff, sizeof out);
            be->matmul_forward_lo(be, out, dt, x16, w16, LLM_DT_BF16, lo_out ? (void *)bl : (void *)bf,
                                  4, 0, 3);
            for (int i = 0; i < 4; i++)
                for (int o = 0; o < 3; o++)
                    assert_true((lo_out ? lo_val(((uint16_t *)out)[i * 3 + o], LLM_DT_BF16)
                                        : ((float *)out)[i * 3 + o]) == bf[o]);
        }
    for (int b = 0; b < 2; b++)
        print_message("# %s: worst error / sum|terms|: forward %.3g, dinp %.3g, dw+dbias %.3g; "
                      "lo outputs rounding differently %.3g\n",
                      BACKENDS[b]->name, we[b][0], we[b][1], we[b][2], we[b][3]);
}

/* An f16 infinity in an operand (70000 and -1e6 cast to f16) reaches the outputs it
 * touches as a non-finite value (what the trainer's dynamic loss scaling detects); bf16
 * holds the same values.  A lo output beyond the f16 range becomes inf. */
static void test_overflow(void **state)
{
    (void)state;
    enum { N = 5, C = 7, OC = 6 };
    tu_rng r = {9};
    float x[N * C], w[OC * C], dy[N * OC], out[N * OC], dx[N * C], dw[OC * C], db[OC];
    uint16_t wl[OC * C], xl[N * C], dyl[N * OC], ol[N * OC];
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
            be->cast_lo(be, xl, x, N * C, lo);
            be->cast_lo(be, dyl, dy, N * OC, lo);
            be->matmul_forward_lo(be, out, LLM_DT_F32, xl, wl, lo, NULL, N, C, OC);
            memset(dw, 0, sizeof dw);
            memset(db, 0, sizeof db);
            be->matmul_backward_lo(be, dx, LLM_DT_F32, dw, db, dyl, xl, wl, lo, N, C, OC);
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
            /* finite operands, a result beyond 65504: inf in f16, finite in bf16 */
            float big[C];
            for (int c = 0; c < C; c++)
                big[c] = 32768.0f;   /* exact in both */
            be->cast_lo(be, xl, big, C, lo);
            for (int c = 0; c < C; c++)
                big[c] = 1.0f;
            be->cast_lo(be, wl, big, C, lo);
            be->matmul_forward_lo(be, ol, lo, xl, wl, lo, NULL, 1, C, 1);
            be->matmul_forward_lo(be, out, LLM_DT_F32, xl, wl, lo, NULL, 1, C, 1);
            assert_true(isfinite(out[0]) && out[0] == 229376.0f);
            assert_int_equal(!isfinite(lo_val(ol[0], lo)), lo == LLM_DT_F16);
        }
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_cast_edges),
        cmocka_unit_test(test_cast_large),
        cmocka_unit_test(test_cast_torch),
        cmocka_unit_test(test_gemm),
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
