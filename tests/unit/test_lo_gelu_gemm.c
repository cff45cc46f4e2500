/* The fused GELU GEMMs of mixed precision (kernels/backend.h: matmul_forward_gelu_lo,
 * matmul_backward_dgelu_lo) on the "cpu-ref" and "cpu" backends, each with its row
 * chunking forced small too, bf16 and fp16, with and without a bias, shapes that are
 * not multiples of 8:
 *   - forward: pre and out bit for bit the contract's composition from the backend's
 *     own ops (matmul_forward_lo with an fp32 out and the lo bias' values, then cast_lo
 *     for pre and gelu_forward + cast_lo for out: GELU of the fp32 sum, not of pre).
 *     Bit for bit where both see the same rows per GEMM call: always on cpu-ref (its
 *     GEMM is row by row), on cpu unless the work space is forced small (then the fused
 *     op, which needs more work space a row, runs the fast GEMM on fewer rows at a time,
 *     and the fast GEMM's sums depend on that): there within one lo rounding;
 *     out differs from gelu_forward_lo(pre) somewhere (the fusion is real); both within
 *     one lo rounding of a double reference;
 *   - backward: dinp bit for bit gelu_backward (on pre's values) of matmul_backward_lo's
 *     fp32 dinp, rounded once; dw and dbias bit for bit matmul_backward_lo's (the same
 *     accumulation into the same starting values); dinp with the same exception as the
 *     forward, dw and dbias bit for bit unless the work space is forced small (on either
 *     backend: they are summed chunk by chunk, then within fp32 sums' error); dinp
 *     within one lo rounding of a double reference;
 *   - cpu and cpu-ref agree within two lo roundings. */
#include "tests/unit/testutil.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tests/unit/lo_fixture.h"

/* GPT-2's GELU (tanh form) and its derivative, in double */
static double gelu64(double x)
{
    const double k = 0.7978845608028654;
    return 0.5 * x * (1.0 + tanh(k * (x + 0.044715 * x * x * x)));
}

static double dgelu64(double x)
{
    const double k = 0.7978845608028654;
    double t = tanh(k * (x + 0.044715 * x * x * x));
    return 0.5 * (1.0 + t) + 0.5 * x * (1.0 - t * t) * k * (1.0 + 3.0 * 0.044715 * x * x);
}

static float *widen(const uint16_t *h, size_t n, int lo)
{
    float *f = malloc(4 * (n ? n : 1));
    assert_non_null(f);
    for (size_t i = 0; i < n; i++)
        f[i] = lo_val(h[i], lo);
    return f;
}

static uint16_t *lo_alloc(size_t n)
{
    uint16_t *h = malloc(2 * (n ? n : 1));
    assert_non_null(h);
    memset(h, 0xff, 2 * (n ? n : 1));   /* NaN: the ops overwrite */
    return h;
}

/* max |a - r| over max |r|: within one lo rounding when <= the lo epsilon (plus the fp32
 * sums' error, far below it) */
static double scaled64(const float *a, const double *r, size_t n)
{
    double m = 0, e = 0;
    for (size_t i = 0; i < n; i++) {
        m = fmax(m, fabs(r[i]));
        e = fmax(e, fabs((double)a[i] - r[i]));
    }
    return m > 0 ? e / m : e;
}

static double lo_eps(int lo) { return lo == LLM_DT_F16 ? 0x1p-11 : 0x1p-8; }

/* Whether be's fused ops see the same rows per GEMM call as the composition they are
 * checked against (see the top of the file). */
static int exact(llm_backend *be)
{
    return be == &REF || ((llm_cpu_ctx *)be->ctx)->lo_chunk >= ((size_t)1 << 20);
}

/* lo tensors a and b equal (exact), or within one lo rounding (scaled) of each other */
static void expect_lo(const uint16_t *a, const uint16_t *b, size_t n, int lo, int ex)
{
    if (ex) {
        assert_memory_equal(a, b, 2 * n);
        return;
    }
    float *fa = widen(a, n, lo), *fb = widen(b, n, lo);
    double e = tu_scaled_err(fa, fb, n);
    if (e > lo_eps(lo))
        print_message("# scaled error %.3g against the composition\n", e);
    assert_true(e <= lo_eps(lo));
    free(fa);
    free(fb);
}

static const int SHAPES[][3] = {{1, 1, 1}, {3, 5, 7}, {17, 13, 37}, {33, 64, 129}, {9, 130, 24}};
enum { NSH = sizeof SHAPES / sizeof SHAPES[0] };

static void test_forward_gelu(void **state)
{
    (void)state;
    tu_rng r = {31};
    for (int k = 0; k < 2; k++) {
        int lo = k ? LLM_DT_F16 : LLM_DT_BF16;
        for (int s = 0; s < NSH; s++)
            for (int hb = 0; hb < 2; hb++) {
                int N = SHAPES[s][0], C = SHAPES[s][1], OC = SHAPES[s][2];
                size_t ni = (size_t)N * C, nw = (size_t)OC * C, no = (size_t)N * OC;
                float *xv, *wv, *bv;
                uint16_t *xl = rnd_lo(&r, ni, -1, 1, lo, &xv), *wl = rnd_lo(&r, nw, -1, 1, lo, &wv),
                         *bl = rnd_lo(&r, (size_t)OC, -1, 1, lo, &bv);
                /* double reference of the sum */
                double *s64 = malloc(8 * no), *g64 = malloc(8 * no);
                assert_true(s64 && g64);
                for (int i = 0; i < N; i++)
                    for (int o = 0; o < OC; o++) {
                        double a = hb ? bv[o] : 0.0;
                        for (int c = 0; c < C; c++)
                            a += (double)xv[(size_t)i * C + c] * wv[(size_t)o * C + c];
                        s64[(size_t)i * OC + o] = a;
                        g64[(size_t)i * OC + o] = gelu64(a);
                    }
                float *outs[2];
                for (int bi = 0; bi < 2; bi++) {
                    llm_backend *be = BACKENDS[bi];
                    /* the composition: fp32 sum with the lo bias' values, rounded; its GELU */
                    float *sum = malloc(4 * no);
                    assert_non_null(sum);
                    be->matmul_forward_lo(be, sum, LLM_DT_F32, xl, wl, lo, hb ? bv : NULL, N, C, OC);
                    uint16_t *wpre = lo_alloc(no), *wout = lo_alloc(no);
                    be->cast_lo(be, wpre, sum, no, lo);
                    be->gelu_forward(be, sum, sum, no);
                    be->cast_lo(be, wout, sum, no, lo);
                    /* the fused op */
                    uint16_t *pre = lo_alloc(no), *out = lo_alloc(no), *unf = lo_alloc(no);
                    be->matmul_forward_gelu_lo(be, out, pre, xl, wl, lo, hb ? bl : NULL, N, C, OC);
                    if (memcmp(pre, wpre, 2 * no) || memcmp(out, wout, 2 * no))
                        print_message("# %s %s N=%d C=%d OC=%d%s: differs from the composition%s\n",
                                      be->name, lo_name(lo), N, C, OC, hb ? " +bias" : "",
                                      exact(be) ? "" : " (allowed: other row chunks)");
                    expect_lo(pre, wpre, no, lo, exact(be));
                    expect_lo(out, wout, no, lo, exact(be));
                    /* GELU of the rounded pre-activation: not the same, for enough outputs */
                    be->gelu_forward_lo(be, unf, pre, no, lo);
                    if (no > 1000)
                        assert_true(memcmp(unf, out, 2 * no) != 0);
                    float *pv = widen(pre, no, lo);
                    outs[bi] = widen(out, no, lo);
                    double ep = scaled64(pv, s64, no), eo = scaled64(outs[bi], g64, no);
                    if (ep > lo_eps(lo) || eo > lo_eps(lo))
                        print_message("# %s %s N=%d C=%d OC=%d: pre %.3g out %.3g vs double\n",
                                      be->name, lo_name(lo), N, C, OC, ep, eo);
                    assert_true(ep <= lo_eps(lo) && eo <= lo_eps(lo));
                    free(sum); free(wpre); free(wout); free(pre); free(out); free(unf); free(pv);
                }
                assert_true(tu_scaled_err(outs[0], outs[1], no) <= 2 * lo_eps(lo));
                free(outs[0]); free(outs[1]);
                free(xv); free(wv); free(bv); free(xl); free(wl); free(bl); free(s64); free(g64);
            }
    }
}

static void test_backward_dgelu(void **state)
{
    (void)state;
    tu_rng r = {37};
    for (int k = 0; k < 2; k++) {
        int lo = k ? LLM_DT_F16 : LLM_DT_BF16;
        for (int s = 0; s < NSH; s++)
            for (int hb = 0; hb < 2; hb++) {
                /* c_proj's shape: dout (N,OC), inp and pre (N,C), w (OC,C) */
                int N = SHAPES[s][0], C = SHAPES[s][2], OC = SHAPES[s][1];
                size_t ni = (size_t)N * C, nw = (size_t)OC * C, no = (size_t)N * OC;
                float *dv, *xv, *pv, *wv;
                uint16_t *dl = rnd_lo(&r, no, -1, 1, lo, &dv), *xl = rnd_lo(&r, ni, -1, 1, lo, &xv),
                         *pl = rnd_lo(&r, ni, -4, 4, lo, &pv), *wl = rnd_lo(&r, nw, -1, 1, lo, &wv);
                float *dw0 = tu_rnd(&r, nw, -1, 1), *db0 = tu_rnd(&r, (size_t)OC, -1, 1);
                double *r64 = malloc(8 * (ni ? ni : 1));
                assert_non_null(r64);
                for (int i = 0; i < N; i++)
                    for (int c = 0; c < C; c++) {
                        double a = 0;
                        for (int o = 0; o < OC; o++)
                            a += (double)dv[(size_t)i * OC + o] * wv[(size_t)o * C + c];
                        r64[(size_t)i * C + c] = dgelu64(pv[(size_t)i * C + c]) * a;
                    }
                float *dis[2];
                for (int bi = 0; bi < 2; bi++) {
                    llm_backend *be = BACKENDS[bi];
                    /* the composition: matmul_backward_lo's fp32 dinp, gelu_backward, rounded */
                    float *g = malloc(4 * ni), *t = calloc(ni ? ni : 1, 4);
                    float *dwa = tu_dup(dw0, nw), *dba = tu_dup(db0, (size_t)OC);
                    assert_true(g && t);
                    be->matmul_backward_lo(be, g, LLM_DT_F32, dwa, hb ? dba : NULL, dl, xl, wl, lo,
                                           N, C, OC);
                    be->gelu_backward(be, t, pv, g, ni);
                    uint16_t *want = lo_alloc(ni), *di = lo_alloc(ni);
                    be->cast_lo(be, want, t, ni, lo);
                    /* the fused op */
                    float *dwb = tu_dup(dw0, nw), *dbb = tu_dup(db0, (size_t)OC);
                    be->matmul_backward_dgelu_lo(be, di, dwb, hb ? dbb : NULL, dl, xl, pl, wl, lo,
                                                 N, C, OC);
                    if (memcmp(di, want, 2 * ni))
                        print_message("# %s %s N=%d C=%d OC=%d: dinp differs from the composition%s\n",
                                      be->name, lo_name(lo), N, C, OC,
                                      exact(be) ? "" : " (allowed: other row chunks)");
                    expect_lo(di, want, ni, lo, exact(be));
                    if (((llm_cpu_ctx *)be->ctx)->lo_chunk >= ((size_t)1 << 20)) {
                        assert_memory_equal(dwb, dwa, 4 * nw);
                        assert_memory_equal(dbb, dba, 4 * (size_t)OC);
                    } else {
                        assert_true(tu_scaled_err(dwb, dwa, nw) <= 1e-6);
                        assert_true(tu_scaled_err(dbb, dba, (size_t)OC) <= 1e-6);
                    }
                    dis[bi] = widen(di, ni, lo);
                    double e = scaled64(dis[bi], r64, ni);
                    if (e > lo_eps(lo))
                        print_message("# %s %s N=%d C=%d OC=%d: dinp %.3g vs double\n", be->name,
                                      lo_name(lo), N, C, OC, e);
                    assert_true(e <= lo_eps(lo));
                    free(g); free(t); free(dwa); free(dba); free(want); free(di); free(dwb);
                    free(dbb);
                }
                assert_true(tu_scaled_err(dis[0], dis[1], ni) <= 2 * lo_eps(lo));
                free(dis[0]); free(dis[1]);
                free(dv); free(xv); free(pv); free(wv); free(dl); free(xl); free(pl); free(wl);
                free(dw0); free(db0); free(r64);
            }
    }
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_forward_gelu),
        cmocka_unit_test(test_backward_dgelu),
    };
    int rc = cmocka_run_group_tests_name("lo_gelu_gemm", tests, setup, teardown);
    rc |= cmocka_run_group_tests_name("lo_gelu_gemm_chunked", tests, setup_chunked, teardown);
    return rc;
}
