/* The lo-activation ops other than the GEMMs (kernels/backend.h, "mixed precision") on
 * the "cpu-ref" and "cpu" backends, each with its row chunking forced small too:
 *   - layernorm_forward_lo, with and without the residual add (res aliasing a), bit for
 *     bit the backend's own residual_forward + layernorm_forward + cast_lo, statistics
 *     equal;
 *   - gelu_forward_lo / gelu_backward_lo (dinp aliasing dout), bit for bit the backend's
 *     fp32 op on the lo values, rounded; the fp32 ops themselves are checked against
 *     double references in test_kernels.c;
 *   - xent_forward_lo / xent_backward_lo (dlogits aliasing the logits, padded columns
 *     0) likewise; xent_fused bit for bit the forward then the backward, fp32 and lo;
 *   - attention_forward_lse / attention_backward_lse on lo q|k|v against a double
 *     reference of their contract computed here (T across the fast kernel's 64-row
 *     blocks, heads of odd sizes): only the rows' log-sum-exp kept, the probabilities
 *     recomputed in the backward, lo outputs rounded once, dqkv overwritten. */
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





/* the lo bits of src(n) rounded (the library's conversion) */
static uint16_t *to_lo(const float *src, size_t n, int lo)
{
    uint16_t *h = malloc(2 * (n ? n : 1));
    assert_non_null(h);
    for (size_t i = 0; i < n; i++)
        h[i] = lo_bits(src[i], lo);
    return h;
}

/* ---- layernorm_forward_lo ---- */

static void test_layernorm_lo(void **state)
{
    (void)state;
    tu_rng r = {21};
    static const int shapes[][2] = {{1, 1}, {3, 7}, {17, 64}, {33, 130}, {64, 768}};
    for (int k = 0; k < 2; k++) {
        int lo = k ? LLM_DT_F16 : LLM_DT_BF16;
        for (size_t s = 0; s < sizeof shapes / sizeof shapes[0]; s++)
            for (int bi = 0; bi < 2; bi++)
                for (int resid = 0; resid < 2; resid++) {
                    llm_backend *be = BACKENDS[bi];
                    int N = shapes[s][0], C = shapes[s][1];
                    size_t n = (size_t)N * C;
                    float *a = tu_rnd(&r, n, -3, 3), *b = tu_rnd(&r, n, -1, 1), *w = tu_rnd(&r, C, 0.5f, 1.5f),
                          *bias = tu_rnd(&r, C, -0.5f, 0.5f);
                    /* the fp32 ops */
                    float *res = malloc(n * 4), *y = malloc(n * 4), *mu = malloc(N * 4),
                          *rs = malloc(N * 4);
                    assert_true(res && y && mu && rs);
                    if (resid)
                        be->residual_forward(be, res, a, b, n);
                    be->layernorm_forward(be, y, mu, rs, resid ? res : a, w, bias, N, C);
                    uint16_t *want = malloc(2 * n);
                    assert_non_null(want);
                    be->cast_lo(be, want, y, n, lo);
                    /* the lo op, the residual in place (res aliases a) */
                    float *a2 = malloc(n * 4), *mu2 = malloc(N * 4), *rs2 = malloc(N * 4);
                    uint16_t *out = malloc(2 * n);
                    assert_true(a2 && mu2 && rs2 && out);
                    memcpy(a2, a, n * 4);
                    memset(out, 0xff, 2 * n);
                    be->layernorm_forward_lo(be, resid ? a2 : NULL, out, mu2, rs2, a2,
                                             resid ? b : NULL, w, bias, N, C, lo);
                    if (memcmp(out, want, 2 * n) || memcmp(mu, mu2, N * 4) || memcmp(rs, rs2, N * 4))
                        print_message("# %s %s N=%d C=%d%s: differs from the fp32 ops\n", be->name,
                                      lo_name(lo), N, C, resid ? " +residual" : "");
                    assert_memory_equal(out, want, 2 * n);
                    assert_memory_equal(mu, mu2, N * 4);
                    assert_memory_equal(rs, rs2, N * 4);
                    assert_memory_equal(a2, resid ? res : a, n * 4);
                    /* statistics may be NULL (inference) */
                    memset(out, 0xff, 2 * n);
                    memcpy(a2, a, n * 4);
                    be->layernorm_forward_lo(be, resid ? a2 : NULL, out, NULL, NULL, a2,
                                             resid ? b : NULL, w, bias, N, C, lo);
                    assert_memory_equal(out, want, 2 * n);
                    free(a); free(b); free(w); free(bias); free(res); free(y); free(mu); free(rs);
                    free(want); free(a2); free(mu2); free(rs2); free(out);
                }
    }
}

/* ---- layernorm_backward_lo: layernorm_backward, then cast_lo of the new dinp ---- */

static void test_layernorm_backward_lo(void **state)
{
    (void)state;
    tu_rng r = {22};
    static const int shapes[][2] = {{1, 1}, {3, 7}, {33, 130}, {64, 768}};
    for (int k = 0; k < 2; k++) {
        int lo = k ? LLM_DT_F16 : LLM_DT_BF16;
        for (size_t s = 0; s < sizeof shapes / sizeof shapes[0]; s++)
            for (int bi = 0; bi < 2; bi++) {
                llm_backend *be = BACKENDS[bi];
                int N = shapes[s][0], C = shapes[s][1];
                size_t n = (size_t)N * C;
                float *x = tu_rnd(&r, n, -3, 3), *w = tu_rnd(&r, C, 0.5f, 1.5f),
                      *bias = tu_rnd(&r, C, -0.5f, 0.5f), *dout = tu_rnd(&r, n, -1, 1),
                      *di = tu_rnd(&r, n, -1, 1), *dw = tu_rnd(&r, C, -1, 1),
                      *db = tu_rnd(&r, C, -1, 1);
                float *y = malloc(n * 4), *mu = malloc(N * 4), *rs = malloc(N * 4);
                float *di2 = tu_dup(di, n), *dw2 = tu_dup(dw, C), *db2 = tu_dup(db, C);
                uint16_t *want = malloc(2 * n), *got = malloc(2 * n), *old = malloc(2 * n);
                assert_true(y && mu && rs && want && got && old);
                be->layernorm_forward(be, y, mu, rs, x, w, bias, N, C);
                be->cast_lo(be, old, di, n, lo);
                be->layernorm_backward(be, di, dw, db, dout, x, w, mu, rs, N, C);
                be->cast_lo(be, want, di, n, lo);
                memset(got, 0xff, 2 * n);
                be->layernorm_backward_lo(be, di2, got, dw2, db2, dout, x, w, mu, rs, N, C, lo);
                assert_memory_equal(di2, di, n * 4);
                assert_memory_equal(dw2, dw, C * 4);
                assert_memory_equal(db2, db, C * 4);
                assert_memory_equal(got, want, 2 * n);
                /* the copy is of the updated gradient */
                if (n > 1)
                    assert_memory_not_equal(got, old, 2 * n);
                free(x); free(w); free(bias); free(dout); free(di); free(dw); free(db); free(y);
                free(mu); free(rs); free(di2); free(dw2); free(db2); free(want); free(got);
                free(old);
            }
    }
}

/* ---- GELU ---- */

static void test_gelu_lo(void **state)
{
    (void)state;
    tu_rng r = {23};
    static const size_t sizes[] = {1, 7, 4096, 4097, 70001};
    for (int k = 0; k < 2; k++) {
        int lo = k ? LLM_DT_F16 : LLM_DT_BF16;
        for (size_t s = 0; s < sizeof sizes / sizeof sizes[0]; s++)
            for (int bi = 0; bi < 2; bi++) {
                llm_backend *be = BACKENDS[bi];
                size_t n = sizes[s];
                float *x, *d;
                uint16_t *xl = rnd_lo(&r, n, -6, 6, lo, &x), *dl = rnd_lo(&r, n, -2, 2, lo, &d);
                float *y = malloc(n * 4), *g = calloc(n, 4);
                assert_true(y && g);
                be->gelu_forward(be, y, x, n);
                be->gelu_backward(be, g, x, d, n);
                uint16_t *wy = to_lo(y, n, lo), *wg = to_lo(g, n, lo);
                uint16_t *out = malloc(2 * n);
                assert_non_null(out);
                memset(out, 0xff, 2 * n);
                be->gelu_forward_lo(be, out, xl, n, lo);
                assert_memory_equal(out, wy, 2 * n);
                /* in place */
                memcpy(out, xl, 2 * n);
                be->gelu_forward_lo(be, out, out, n, lo);
                assert_memory_equal(out, wy, 2 * n);
                /* backward, overwriting, in place over dout */
                memset(out, 0xff, 2 * n);
                be->gelu_backward_lo(be, out, xl, dl, n, lo);
                assert_memory_equal(out, wg, 2 * n);
                memcpy(out, dl, 2 * n);
                be->gelu_backward_lo(be, out, xl, out, n, lo);
                assert_memory_equal(out, wg, 2 * n);
                free(x); free(d); free(xl); free(dl); free(y); free(g); free(wy); free(wg);
                free(out);
            }
    }
}

/* ---- cross-entropy ---- */

static void test_xent_lo(void **state)
{
    (void)state;
    tu_rng r = {29};
    static const int shapes[][3] = {{1, 5, 8}, {7, 100, 128}, {33, 1000, 1003}, {4, 50257, 50304}};
    for (int k = 0; k < 2; k++) {
        int lo = k ? LLM_DT_F16 : LLM_DT_BF16;
        for (size_t s = 0; s < sizeof shapes / sizeof shapes[0]; s++)
            for (int bi = 0; bi < 2; bi++) {
                llm_backend *be = BACKENDS[bi];
                int N = shapes[s][0], V = shapes[s][1], Vp = shapes[s][2];
                size_t n = (size_t)N * Vp;
                float *x;
                uint16_t *xl = rnd_lo(&r, n, -8, 8, lo, &x);
                int32_t *tg = malloc((size_t)N * 4);
                assert_non_null(tg);
                for (int i = 0; i < N; i++)
                    tg[i] = (int32_t)(tu_next(&r) % (uint64_t)V);
                float *l32 = malloc(N * 4), *s32 = malloc(N * 4), *l = malloc(N * 4),
                      *sl = malloc(N * 4), *d = malloc(n * 4);
                assert_true(l32 && s32 && l && sl && d);
                be->xent_forward(be, l32, s32, x, tg, N, V, Vp);
                be->xent_backward(be, d, x, s32, tg, 0.37f / N, N, V, Vp);
                uint16_t *want = to_lo(d, n, lo);
                be->xent_forward_lo(be, l, sl, xl, tg, N, V, Vp, lo);
                assert_memory_equal(l, l32, N * 4);
                assert_memory_equal(sl, s32, N * 4);
                /* in place over the logits */
                be->xent_backward_lo(be, xl, xl, sl, tg, 0.37f / N, N, V, Vp, lo);
                if (memcmp(xl, want, 2 * n))
                    print_message("# %s %s N=%d V=%d: dlogits differ\n", be->name, lo_name(lo), N, V);
                assert_memory_equal(xl, want, 2 * n);
                for (int i = 0; i < N; i++)
                    for (int j = V; j < Vp; j++)
                        assert_int_equal(xl[(size_t)i * Vp + j] & 0x7fff, 0);
                free(x); free(xl); free(tg); free(l32); free(s32); free(l); free(sl); free(d);
                free(want);
            }
    }
}

/* xent_fused: bit for bit xent_forward(_lo) then xent_backward(_lo), fp32 and lo logits,
 * N across the fp32 path's 64-row chunks (and the lo path's, chunked group) */
static void test_xent_fused(void **state)
{
    (void)state;
    tu_rng r = {31};
    static const int shapes[][3] = {{1, 5, 8}, {130, 100, 101}, {65, 1000, 1024}, {3, 50257, 50304}};
    static const int dts[] = {0, LLM_DT_BF16, LLM_DT_F16};
    for (int k = 0; k < 3; k++)
        for (size_t s = 0; s < sizeof shapes / sizeof shapes[0]; s++)
            for (int bi = 0; bi < 2; bi++) {
                llm_backend *be = BACKENDS[bi];
                int lo = dts[k], N = shapes[s][0], V = shapes[s][1], Vp = shapes[s][2];
                size_t n = (size_t)N * Vp, es = lo ? 2 : 4;
                float *x;
                uint16_t *xl = rnd_lo(&r, n, -8, 8, lo ? lo : LLM_DT_BF16, &x);
                void *a = lo ? (void *)xl : (void *)x, *b = malloc(n * es);
                int32_t *tg = malloc((size_t)N * 4);
                float *l1 = malloc(N * 4), *e1 = malloc(N * 4), *l2 = malloc(N * 4);
                assert_true(b && tg && l1 && e1 && l2);
                for (int i = 0; i < N; i++)
                    tg[i] = (int32_t)(tu_next(&r) % (uint64_t)V);
                memcpy(b, a, n * es);
                float dloss = 0.61f / N;
                if (lo) {
                    be->xent_forward_lo(be, l1, e1, a, tg, N, V, Vp, lo);
                    be->xent_backward_lo(be, a, a, e1, tg, dloss, N, V, Vp, lo);
                } else {
                    be->xent_forward(be, l1, e1, a, tg, N, V, Vp);
                    be->xent_backward(be, a, a, e1, tg, dloss, N, V, Vp);
                }
                be->xent_fused(be, l2, b, tg, dloss, N, V, Vp, lo);
                if (memcmp(l1, l2, N * 4) || memcmp(a, b, n * es))
                    print_message("# %s dt %d N=%d V=%d: fused differs\n", be->name, lo, N, V);
                assert_memory_equal(l1, l2, N * 4);
                assert_memory_equal(a, b, n * es);
                free(x); free(xl); free(b); free(tg); free(l1); free(e1); free(l2);
            }
}

/* ---- the lse attention against a double reference of its contract ---- */

typedef struct {
    int B, T, C, NH;
} ashape;

/* T > 64 crosses the fast kernel's row/column blocks */
static const ashape ASHAPES[] = {
    {1, 1, 4, 1}, {2, 5, 12, 3}, {1, 70, 16, 2}, {2, 67, 40, 5}, {1, 130, 64, 2},
};
#define NASHAPES (sizeof ASHAPES / sizeof ASHAPES[0])

#define TOL_FAST 2e-5

/* A lo output h(n) against the double reference want (scale: sum |terms|).  A
 * probability or score gradient may be rounded to lo from values that differ in their
 * last fp32 bits, so each output may miss by one lo ulp of sum|terms| per flip, and its
 * own rounding by one more: max <= 2 ulp + TOL_FAST.  Flips are rare: at most 10% of the
 * elements may round differently from the reference (unrounded or wrongly rounded
 * outputs differ in about half).  The scale of dq and dk includes the size of the
 * operands of dP - D, which cancel. */
static void check_lo(const char *what, const char *be, int lo, const ashape *a,
                     const uint16_t *h, const double *want, const double *scale, size_t n,
                     double *wmax, double *wdiff)
{
    double mx = 0, ulp = lo == LLM_DT_F16 ? 0x1p-11 : 0x1p-8;
    size_t d = 0;
    for (size_t i = 0; i < n; i++) {
        double e = fabs((double)lo_val(h[i], lo) - want[i]) / (scale[i] > 1e-30 ? scale[i] : 1e-30);
        e = isnan(e) ? INFINITY : e;
        if (!(e <= mx))
            mx = e;
        d += h[i] != lo_bits(want[i], lo);
    }
    double frac = n ? (double)d / (double)n : 0;
    if (mx > *wmax)
        *wmax = mx;
    if (frac > *wdiff)
        *wdiff = frac;
    int ok = mx <= 2 * ulp + TOL_FAST && (n < 100 || frac <= 0.1);
    if (!ok)
        print_message("# %s %s lse B=%d T=%d C=%d NH=%d: %s max %.3g, %.3g round differently\n",
                      be, lo_name(lo), a->B, a->T, a->C, a->NH, what, mx, frac);
    assert_true(ok);
}

static void test_attention_lse(void **state)
{
    (void)state;
    tu_rng r = {17};
    double wmax[2] = {0}, wdiff[2] = {0}, wlse[2] = {0};
    for (int k = 0; k < 2; k++) {
        int lo = k ? LLM_DT_F16 : LLM_DT_BF16;
        for (size_t si = 0; si < NASHAPES; si++) {
            const ashape *sh = &ASHAPES[si];
            int B = sh->B, T = sh->T, C = sh->C, NH = sh->NH, hs = C / NH;
            size_t C3 = 3 * (size_t)C, nq = (size_t)B * T * C3, no = (size_t)B * T * C,
                   nl = (size_t)B * NH * T;
            double scale = 1.0 / sqrt((double)hs);
            float *qkv, *dy;
            uint16_t *ql = rnd_lo(&r, nq, -2, 2, lo, &qkv), *dyl = rnd_lo(&r, no, -1, 1, lo, &dy);
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
                                d += (double)qkv[qo + i] * qkv[ko + i];
                            sc[s2] = d * scale;
                            mx = sc[s2] > mx ? sc[s2] : mx;
                        }
                        for (int s2 = 0; s2 <= t; s2++)
                            sum += exp(sc[s2] - mx);
                        double l = mx + log(sum);
                        lref[((size_t)b * NH + h) * T + t] = l;
                        L[((size_t)b * NH + h) * T + t] = (float)l;
                        for (int s2 = 0; s2 <= t; s2++) {
                            double pl = lo_val(lo_bits((float)exp(sc[s2] - l), lo), lo);
                            size_t vo = ((size_t)b * T + s2) * C3 + 2 * (size_t)C + (size_t)h * hs;
                            for (int i = 0; i < hs; i++) {
                                y[go + i] += pl * qkv[vo + i];
                                ys[go + i] += fabs(pl * qkv[vo + i]);
                            }
                        }
                    }
            /* the forward's output as the model keeps it: lo */
            uint16_t *Ol = malloc(2 * (no ? no : 1));
            assert_non_null(Ol);
            for (size_t i = 0; i < no; i++) {
                Ol[i] = lo_bits(y[i], lo);
                O[i] = lo_val(Ol[i], lo);
            }
            /* backward from L and the lo O (as given to the backends) */
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
                                sc += (double)qkv[qo + i] * qkv[ko + i];
                                dp += (double)dy[go + i] * qkv[vo + i];
                            }
                            double p = exp(sc * scale - l), pl = lo_val(lo_bits((float)p, lo), lo);
                            double ds = lo_val(lo_bits((float)(scale * p * (dp - D)), lo), lo);
                            /* dp - D cancels (exactly, in row 0): an fp32 kernel's score
                             * gradient is only good to fp32 of its operands' size */
                            double dsm = scale * p * (fabs(dp) + fabs(D));
                            for (int i = 0; i < hs; i++) {
                                double g = dy[go + i], kl = qkv[ko + i], qv = qkv[qo + i];
                                dq[vo + i] += pl * g;
                                dqs[vo + i] += fabs(pl * g);
                                dq[qo + i] += ds * kl;
                                dqs[qo + i] += fabs(ds * kl) + dsm * fabs(kl);
                                dq[ko + i] += ds * qv;
                                dqs[ko + i] += fabs(ds * qv) + dsm * fabs(qv);
                            }
                        }
                    }
            for (int bi = 0; bi < 2; bi++) {
                llm_backend *be = BACKENDS[bi];
                float *lse = tu_rnd(&r, nl, -9, 9);
                uint16_t *out = malloc(2 * no + 2), *g = malloc(2 * nq + 2);
                assert_true(out && g);
                memset(out, 0xff, 2 * no + 2);
                memset(g, 0xff, 2 * nq + 2);   /* overwritten: NaN to start with */
                be->attention_forward_lse(be, out, lse, ql, B, T, C, NH, lo);
                for (size_t i = 0; i < nl; i++) {
                    double e = fabs(lse[i] - lref[i]) / (1 + fabs(lref[i]));
                    e = isnan(e) ? INFINITY : e;
                    if (!(e <= wlse[bi]))
                        wlse[bi] = e;
                    assert_true(e <= 1e-6);
                }
                check_lo("out", be->name, lo, sh, out, y, ys, no, &wmax[bi], &wdiff[bi]);
                be->attention_backward_lse(be, g, dyl, ql, Ol, L, B, T, C, NH, lo);
                check_lo("dqkv", be->name, lo, sh, g, dq, dqs, nq, &wmax[bi], &wdiff[bi]);
                free(out); free(lse); free(g);
            }
            free(qkv); free(dy); free(ql); free(dyl); free(L); free(O); free(Ol);
            free(y); free(ys); free(dq); free(dqs); free(lref);
        }
    }
    for (int b = 0; b < 2; b++)
        print_message("# %s attention lse: lse %.3g, out/dqkv max %.3g (/ sum|terms|), %.3g "
                      "rounding differently\n", BACKENDS[b]->name, wlse[b], wmax[b], wdiff[b]);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_layernorm_lo),
        cmocka_unit_test(test_layernorm_backward_lo),
        cmocka_unit_test(test_gelu_lo),
        cmocka_unit_test(test_xent_lo),
        cmocka_unit_test(test_xent_fused),
        cmocka_unit_test(test_attention_lse),
    };
    int rc = cmocka_run_group_tests_name("lo_ops", tests, setup, teardown);
    rc |= cmocka_run_group_tests_name("lo_ops_chunked", tests, setup_chunked, teardown);
    return rc;
}
