/* gpu_check_ops_lo.c — gpu_check's rows for the lo-activation forms of the layernorm
 * forward and backward, GELU and cross-entropy (layernorm_forward_lo,
 * layernorm_backward_lo, gelu_forward_lo, gelu_backward_lo, xent_forward_lo,
 * xent_backward_lo).
 *
 * The contract defines each as the fp32 op on the lo inputs' values with a lo output
 * rounded once, so the first check (on cuda; for another backend the layernorm's only,
 * the one the contract says is bit for bit) is bit for bit against the backend's own fp32 ops
 * (residual_forward + layernorm_forward, gelu_forward, gelu_backward into -0, xent_*)
 * on those values followed by cast_lo; then against double precision (ref64, err_lo:
 * one rounding allowed on top of the fp32 op's bound) and the cpu-ref backend's lo op
 * when it has one (two roundings apart at most).  In-place forms (res aliasing a,
 * out aliasing inp, dinp aliasing dout, dlogits aliasing logits) give the same bits. */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/ckpt.h"
#include "common/quant.h"
#include "kernels/backend.h"
#include "tests/gpu/gpu_check.h"
#include "tests/gpu/ref64.h"

static const char *lname(int lo) { return lo == LLM_DT_BF16 ? "bf16" : "f16"; }

/* n lo elements of a device tensor, as bits */
static uint16_t *gbits(gc *x, const void *d, size_t n)
{
    uint16_t *h = xmalloc((n ? n : 1) * 2);
    x->g.to_host(&x->g, h, d, n * 2);
    return h;
}

/* the backend's cast_lo of a device fp32 tensor, as host bits */
static uint16_t *gcast(gc *x, const float *d, size_t n, int lo)
{
    void *t = x->g.alloc(&x->g, (n ? n : 1) * 2);
    x->g.cast_lo(&x->g, t, d, n, lo);
    uint16_t *h = gbits(x, t, n);
    x->g.free(&x->g, t);
    return h;
}

/* ---- layernorm_forward_lo ---- */

static void check_ln_lo(gc *x, int N, int C, int resid, int lo)
{
    char sh[64], op[80];
    snprintf(sh, sizeof sh, "N%d C%d", N, C);
    size_t n = (size_t)N * C;
    float *a = rnd(x, n, -2, 3), *b = rnd(x, n, -1, 1), *w = rnd(x, C, 0.5f, 1.5f),
          *bias = rnd(x, C, -0.5f, 0.5f);
    float *ga = gput(x, a, n * 4), *gb = gput(x, b, n * 4), *gw = gput(x, w, C * 4),
          *gbias = gput(x, bias, C * 4);
    /* the fp32 ops: x = a + b (or a), layernorm, cast_lo */
    float *gx = resid ? gpoison(x, n) : ga, *go = gpoison(x, n), *gm = gpoison(x, N),
          *gr = gpoison(x, N);
    if (resid) x->g.residual_forward(&x->g, gx, ga, gb, n);
    x->g.layernorm_forward(&x->g, go, gm, gr, gx, gw, gbias, N, C);
    uint16_t *want = gcast(x, go, n, lo);
    float *xs = gget(x, gx, n), *m1 = gget(x, gm, N), *r1 = gget(x, gr, N);
    /* the lo op */
    float *gres = resid ? gpoison(x, n) : NULL, *gm2 = gpoison(x, N), *gr2 = gpoison(x, N);
    void *gl = x->g.alloc(&x->g, n * 2 + 2);
    x->g.layernorm_forward_lo(&x->g, gres, gl, gm2, gr2, ga, resid ? gb : NULL, gw, gbias, N, C, lo);
    uint16_t *got = gbits(x, gl, n);
    float *m2 = gget(x, gm2, N), *r2 = gget(x, gr2, N);
    int same = memcmp(got, want, n * 2) == 0 && memcmp(m1, m2, N * 4) == 0 &&
               memcmp(r1, r2, N * 4) == 0;
    if (resid) {
        float *res = gget(x, gres, n);
        same &= memcmp(res, xs, n * 4) == 0;
        free(res);
    }
    snprintf(op, sizeof op, "layernorm_fwd_lo %s%s bits", lname(lo), resid ? " +res" : "");
    row_check(x, op, sh, same ? 0.0 : 1.0, 0.0, same);
    /* in place: res over a (statistics not asked for) */
    if (resid) {
        float *ga2 = gput(x, a, n * 4);
        x->g.layernorm_forward_lo(&x->g, ga2, gl, NULL, NULL, ga2, gb, gw, gbias, N, C, lo);
        uint16_t *g2 = gbits(x, gl, n);
        float *res = gget(x, ga2, n);
        int s2 = memcmp(g2, want, n * 2) == 0 && memcmp(res, xs, n * 4) == 0;
        snprintf(op, sizeof op, "layernorm_fwd_lo %s res=a", lname(lo));
        row_check(x, op, sh, s2 ? 0.0 : 1.0, 0.0, s2);
        free(g2); free(res);
        x->g.free(&x->g, ga2);
    }
    /* against double precision and cpu-ref */
    double *ro = xmalloc(n * 8), *rm = xmalloc(N * 8), *rr = xmalloc(N * 8);
    r64_layernorm_forward(ro, rm, rr, xs, w, bias, N, C);
    float *vals = host_vals(got, n, lo), *c = NULL;
    if (x->have_ref && x->r.layernorm_forward_lo) {
        uint16_t *cl = xmalloc(n * 2 + 2);
        float *cres = xmalloc(n * 4 + 4), *cm = xmalloc(N * 4), *crs = xmalloc(N * 4);
        x->r.layernorm_forward_lo(&x->r, resid ? cres : NULL, cl, cm, crs, a, resid ? b : NULL,
                                  w, bias, N, C, lo);
        c = host_vals(cl, n, lo);
        free(cl); free(cres); free(cm); free(crs);
    }
    snprintf(op, sizeof op, "layernorm_fwd_lo %s%s", lname(lo), resid ? " +res" : "");
    row_lo(x, op, sh, vals, ro, c, n, B_RED, lo);
    free(a); free(b); free(w); free(bias); free(want); free(xs); free(m1); free(r1);
    free(got); free(m2); free(r2); free(ro); free(rm); free(rr); free(vals); free(c);
    void *bufs[] = {ga, gb, gw, gbias, resid ? gx : NULL, go, gm, gr, gres, gm2, gr2, gl};
    for (size_t i = 0; i < sizeof bufs / sizeof *bufs; i++)
        if (bufs[i]) x->g.free(&x->g, bufs[i]);
}

/* ---- layernorm_backward_lo ----
 * layernorm_backward then cast_lo of the new dinp, bit for bit (dinp, dw, db and the lo
 * copy), from the same starting dinp, dw, db; the fp32 op's numerics are
 * layernorm_backward's rows. */
static void check_ln_bwd_lo(gc *x, int N, int C, int lo)
{
    char sh[64], op[80];
    snprintf(sh, sizeof sh, "N%d C%d", N, C);
    size_t n = (size_t)N * C;
    float *inp = rnd(x, n, -2, 3), *w = rnd(x, C, 0.5f, 1.5f), *b = rnd(x, C, -0.5f, 0.5f);
    float *dout = rnd(x, n, -1, 1), *di0 = rnd(x, n, -1, 1), *dw0 = rnd(x, C, -1, 1),
          *db0 = rnd(x, C, -1, 1);
    float *gi = gput(x, inp, n * 4), *gw = gput(x, w, C * 4), *gb = gput(x, b, C * 4),
          *gd = gput(x, dout, n * 4), *go = gpoison(x, n), *gm = gpoison(x, N), *gr = gpoison(x, N);
    x->g.layernorm_forward(&x->g, go, gm, gr, gi, gw, gb, N, C);
    float *d1 = gput(x, di0, n * 4), *w1 = gput(x, dw0, C * 4), *b1 = gput(x, db0, C * 4);
    float *d2 = gput(x, di0, n * 4), *w2 = gput(x, dw0, C * 4), *b2 = gput(x, db0, C * 4);
    x->g.layernorm_backward(&x->g, d1, w1, b1, gd, gi, gw, gm, gr, N, C);
    uint16_t *want = gcast(x, d1, n, lo);
    void *gl = x->g.alloc(&x->g, n * 2 + 2);
    x->g.layernorm_backward_lo(&x->g, d2, gl, w2, b2, gd, gi, gw, gm, gr, N, C, lo);
    uint16_t *got = gbits(x, gl, n);
    float *h1 = gget(x, d1, n), *h2 = gget(x, d2, n), *hw1 = gget(x, w1, C), *hw2 = gget(x, w2, C),
          *hb1 = gget(x, b1, C), *hb2 = gget(x, b2, C);
    int same = !memcmp(got, want, n * 2) && !memcmp(h1, h2, n * 4) && !memcmp(hw1, hw2, C * 4) &&
               !memcmp(hb1, hb2, C * 4);
    snprintf(op, sizeof op, "layernorm_bwd_lo %s bits", lname(lo));
    row_check(x, op, sh, same ? 0.0 : 1.0, 0.0, same);
    free(inp); free(w); free(b); free(dout); free(di0); free(dw0); free(db0); free(want);
    free(got); free(h1); free(h2); free(hw1); free(hw2); free(hb1); free(hb2);
    void *bufs[] = {gi, gw, gb, gd, go, gm, gr, d1, w1, b1, d2, w2, b2, gl};
    for (size_t i = 0; i < sizeof bufs / sizeof *bufs; i++) x->g.free(&x->g, bufs[i]);
}

/* ---- gelu_forward_lo / gelu_backward_lo ---- */

static void check_gelu_lo(gc *x, size_t n, int lo)
{
    char sh[64], op[80];
    snprintf(sh, sizeof sh, "n%zu", n);
    float *a0 = rnd(x, n, -6, 6), *d0 = rnd(x, n, -1, 1);
    if (n > 2) { a0[0] = -30.0f; a0[1] = 0.0f; }   /* far tail and zero */
    float *a = lo_vals(a0, n, lo), *d = lo_vals(d0, n, lo);
    float *ga = gput(x, a, n * 4), *gd = gput(x, d, n * 4), *go = gpoison(x, n);
    void *gal = glo_put(x, a, n, lo), *gdl = glo_put(x, d, n, lo);
    void *gol = x->g.alloc(&x->g, n * 2 + 2);
    /* forward: own fp32 op + cast_lo */
    x->g.gelu_forward(&x->g, go, ga, n);
    uint16_t *want = gcast(x, go, n, lo);
    x->g.gelu_forward_lo(&x->g, gol, gal, n, lo);
    uint16_t *got = gbits(x, gol, n);
    snprintf(op, sizeof op, "gelu_fwd_lo %s bits", lname(lo));
    if (x->cuda) row_bits(x, op, sh, got, want, n * 2);
    double *r = xmalloc(n * 8);
    r64_gelu_forward(r, a, n);
    float *vals = host_vals(got, n, lo), *c = NULL;
    void *ha = lo_host(a, n, lo), *hd = lo_host(d, n, lo);
    if (x->have_ref && x->r.gelu_forward_lo) {
        uint16_t *cl = xmalloc(n * 2 + 2);
        x->r.gelu_forward_lo(&x->r, cl, ha, n, lo);
        c = host_vals(cl, n, lo);
        free(cl);
    }
    snprintf(op, sizeof op, "gelu_fwd_lo %s", lname(lo));
    row_lo(x, op, sh, vals, r, c, n, B_EW * 10, lo);
    free(vals); free(c); c = NULL;
    /* in place: out over inp */
    void *gip = glo_put(x, a, n, lo);
    x->g.gelu_forward_lo(&x->g, gip, gip, n, lo);
    uint16_t *g2 = gbits(x, gip, n);
    snprintf(op, sizeof op, "gelu_fwd_lo %s in place", lname(lo));
    if (x->cuda) row_bits(x, op, sh, g2, want, n * 2);
    free(g2);

    /* backward: own fp32 op into -0 (0 + g dout keeps g dout's bits, signed zeros too) +
     * cast_lo; the lo op overwrites */
    float *mz = xmalloc(n * 4);
    for (size_t i = 0; i < n; i++) mz[i] = -0.0f;
    float *gdi = gput(x, mz, n * 4);
    x->g.gelu_backward(&x->g, gdi, ga, gd, n);
    uint16_t *wb = gcast(x, gdi, n, lo);
    void *gdil = x->g.alloc(&x->g, n * 2 + 2);
    x->g.gelu_backward_lo(&x->g, gdil, gal, gdl, n, lo);
    uint16_t *gb = gbits(x, gdil, n);
    snprintf(op, sizeof op, "gelu_bwd_lo %s bits", lname(lo));
    if (x->cuda) row_bits(x, op, sh, gb, wb, n * 2);
    double *rb = xmalloc(n * 8);
    memset(rb, 0, n * 8);
    r64_gelu_backward(rb, a, d, n);
    vals = host_vals(gb, n, lo);
    if (x->have_ref && x->r.gelu_backward_lo) {
        uint16_t *cl = xmalloc(n * 2 + 2);
        x->r.gelu_backward_lo(&x->r, cl, ha, hd, n, lo);
        c = host_vals(cl, n, lo);
        free(cl);
    }
    snprintf(op, sizeof op, "gelu_bwd_lo %s", lname(lo));
    row_lo(x, op, sh, vals, rb, c, n, B_EW * 10, lo);
    /* in place: dinp over dout */
    x->g.gelu_backward_lo(&x->g, gdl, gal, gdl, n, lo);
    g2 = gbits(x, gdl, n);
    snprintf(op, sizeof op, "gelu_bwd_lo %s dinp=dout", lname(lo));
    if (x->cuda) row_bits(x, op, sh, g2, wb, n * 2);
    free(g2);
    free(a0); free(d0); free(a); free(d); free(want); free(got); free(r); free(vals); free(c);
    free(ha); free(hd); free(mz); free(wb); free(gb); free(rb);
    void *bufs[] = {ga, gd, go, gal, gdl, gol, gip, gdi, gdil};
    for (size_t i = 0; i < sizeof bufs / sizeof *bufs; i++) x->g.free(&x->g, bufs[i]);
}

/* ---- xent_forward_lo / xent_backward_lo ---- */

static void check_xent_lo(gc *x, int N, int V, int Vp, int lo)
{
    char sh[64], op[80];
    snprintf(sh, sizeof sh, "N%d V%d Vp%d", N, V, Vp);
    size_t n = (size_t)N * Vp;
    float *lg0 = rnd(x, n, -4, 4), *lg = lo_vals(lg0, n, lo);
    int32_t *tg = rtok(x, N, V);
    float dloss = 1.0f / (float)N;
    float *glg = gput(x, lg, n * 4);
    void *gll = glo_put(x, lg, n, lo);
    int32_t *gtg = gput(x, tg, N * 4);
    /* forward: bit for bit the fp32 op on the lo values */
    float *gl1 = gpoison(x, N), *ge1 = gpoison(x, N), *gl2 = gpoison(x, N), *ge2 = gpoison(x, N);
    x->g.xent_forward(&x->g, gl1, ge1, glg, gtg, N, V, Vp);
    x->g.xent_forward_lo(&x->g, gl2, ge2, gll, gtg, N, V, Vp, lo);
    float *l1 = gget(x, gl1, N), *e1 = gget(x, ge1, N), *l2 = gget(x, gl2, N), *e2 = gget(x, ge2, N);
    int same = memcmp(l1, l2, N * 4) == 0 && memcmp(e1, e2, N * 4) == 0;
    snprintf(op, sizeof op, "xent_fwd_lo %s bits", lname(lo));
    if (x->cuda) row_check(x, op, sh, same ? 0.0 : 1.0, 0.0, same);
    double *rl = xmalloc(N * 8), *rlse = xmalloc(N * 8);
    r64_xent_forward(rl, rlse, lg, tg, N, V, Vp);
    float *cl = NULL, *clse = NULL;
    void *hl = lo_host(lg, n, lo);
    if (x->have_ref && x->r.xent_forward_lo) {
        cl = xmalloc(N * 4); clse = xmalloc(N * 4);
        x->r.xent_forward_lo(&x->r, cl, clse, hl, tg, N, V, Vp, lo);
    }
    snprintf(op, sizeof op, "xent_fwd_lo %s losses", lname(lo));
    row(x, op, sh, l2, rl, cl, N, B_RED);
    snprintf(op, sizeof op, "xent_fwd_lo %s lse", lname(lo));
    row(x, op, sh, e2, rlse, clse, N, B_RED);

    /* backward from the lo op's lse: own fp32 op + cast_lo, bit for bit */
    float *gd1 = gpoison(x, n);
    x->g.xent_backward(&x->g, gd1, glg, ge2, gtg, dloss, N, V, Vp);
    uint16_t *want = gcast(x, gd1, n, lo);
    void *gd2 = x->g.alloc(&x->g, n * 2 + 2);
    x->g.xent_backward_lo(&x->g, gd2, gll, ge2, gtg, dloss, N, V, Vp, lo);
    uint16_t *got = gbits(x, gd2, n);
    snprintf(op, sizeof op, "xent_bwd_lo %s bits", lname(lo));
    if (x->cuda) row_bits(x, op, sh, got, want, n * 2);
    double *rd = xmalloc(n * 8);
    r64_xent_backward(rd, lg, e2, tg, dloss, N, V, Vp);
    float *vals = host_vals(got, n, lo), *c = NULL;
    if (x->have_ref && x->r.xent_backward_lo) {
        uint16_t *cb = xmalloc(n * 2 + 2);
        x->r.xent_backward_lo(&x->r, cb, hl, e2, tg, dloss, N, V, Vp, lo);
        c = host_vals(cb, n, lo);
        free(cb);
    }
    snprintf(op, sizeof op, "xent_bwd_lo %s", lname(lo));
    row_lo(x, op, sh, vals, rd, c, n, B_RED, lo);
    /* in place: dlogits over logits */
    x->g.xent_backward_lo(&x->g, gll, gll, ge2, gtg, dloss, N, V, Vp, lo);
    uint16_t *g2 = gbits(x, gll, n);
    snprintf(op, sizeof op, "xent_bwd_lo %s in place", lname(lo));
    if (x->cuda) row_bits(x, op, sh, g2, want, n * 2);
    /* fused: the lo forward's losses and the lo backward's bits */
    if (x->g.xent_fused) {
        void *gf = glo_put(x, lg, n, lo);
        float *gfl = gpoison(x, N);
        x->g.xent_fused(&x->g, gfl, gf, gtg, dloss, N, V, Vp, lo);
        float *fl = gget(x, gfl, N);
        uint16_t *fb = gbits(x, gf, n);
        int fsame = !memcmp(fl, l2, N * 4) && !memcmp(fb, want, n * 2);
        snprintf(op, sizeof op, "xent_fused %s bits", lname(lo));
        if (x->cuda) row_check(x, op, sh, fsame ? 0.0 : 1.0, 0.0, fsame);
        snprintf(op, sizeof op, "xent_fused %s losses", lname(lo));
        row(x, op, sh, fl, rl, cl, N, B_RED);
        free(fl); free(fb);
        x->g.free(&x->g, gf); x->g.free(&x->g, gfl);
    }
    free(lg0); free(lg); free(tg); free(l1); free(e1); free(l2); free(e2); free(rl); free(rlse);
    free(cl); free(clse); free(hl); free(want); free(got); free(rd); free(vals); free(c); free(g2);
    void *bufs[] = {glg, gll, gtg, gl1, ge1, gl2, ge2, gd1, gd2};
    for (size_t i = 0; i < sizeof bufs / sizeof *bufs; i++) x->g.free(&x->g, bufs[i]);
}

void gpu_check_ops_lo(gc *x, int tiny)
{
    if (!x->g.cast_lo || !x->g.layernorm_forward_lo || !x->g.gelu_forward_lo ||
        !x->g.gelu_backward_lo || !x->g.xent_forward_lo || !x->g.xent_backward_lo) {
        if (x->cuda) row_check(x, "backend has lo act. ops", x->g.name, 1, 0, 0);
        else printf("gpu_check: backend '%s' has no lo activation ops: skipped\n", x->g.name);
        return;
    }
    for (int k = 0; k < 2; k++) {
        int lo = k ? LLM_DT_F16 : LLM_DT_BF16;
        for (int r = 0; r < 2; r++) {
            check_ln_lo(x, 1, 1, r, lo);
            check_ln_lo(x, 37, 61, r, lo);
            if (!tiny) check_ln_lo(x, 300, 768, r, lo);
        }
        if (x->g.layernorm_backward_lo) {
            check_ln_bwd_lo(x, 1, 1, lo);
            check_ln_bwd_lo(x, 37, 61, lo);
            check_ln_bwd_lo(x, 70, 1600, lo);
            if (!tiny) check_ln_bwd_lo(x, 300, 768, lo);
        } else if (x->cuda)
            row_check(x, "backend has layernorm_backward_lo", x->g.name, 1, 0, 0);
        check_gelu_lo(x, 1, lo);
        check_gelu_lo(x, tiny ? 1003 : 1000003, lo);
        check_xent_lo(x, 1, 1, 1, lo);
        check_xent_lo(x, 7, 500, 512, lo);
        check_xent_lo(x, 3, 1000, 1031, lo);
        check_xent_lo(x, 5, 100, 104, lo);   /* lo rows in 16-byte vectors, V inside one */
        if (!tiny) check_xent_lo(x, 33, 50257, 50304, lo);
    }
}
