/* gpu_check.c — every op of the "cuda" backend against a double-precision reference
 * (tests/gpu/ref64.c) and, when the library has it, the "cpu-ref" backend, on fresh
 * random inputs at several shapes (many not multiples of 32/64/128).  Prints one table
 * row per (op output, shape): max relative error of cuda vs ref64, cuda vs cpu-ref and
 * cpu-ref vs ref64, its bound and PASS/FAIL; exits 1 on any FAIL.  Also checks that the
 * ops promised deterministic give bit-identical results twice.  The mixed-precision ops
 * and device_stats are checked in gpu_check_lo.c (the lo attention in
 * gpu_check_att_lo.c, the fused GELU GEMMs in gpu_check_gelu_lo.c), the inference ops in
 * gpu_check_infer.c; the shared helpers live in
 * gc_util.c.  --bench adds timings.
 * Without a GPU it prints "no GPU: skipped" and exits 0. */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "common/ckpt.h"
#include "kernels/backend.h"
#include "kernels/cuda/cuda_backend.h"
#include "kernels/cuda/cuda_bucket.h"
#include "kernels/cuda/cuda_ext.h"
#include "tests/gpu/gpu_check.h"
#include "tests/gpu/ref64.h"

/* gc_report_fn for gpu_check_infer.c: the error is against cpu-ref */
static void row_infer(void *xv, const char *op, const char *shape, double err, double bound)
{
    row_result(xv, op, shape, err, err, -1, bound, err <= bound);
}

/* ---- the ops ---- */

static void check_embed(gc *x, int B, int T, int C, int V, int Vp)
{
    char sh[64];
    snprintf(sh, sizeof sh, "B%d T%d C%d V%d", B, T, C, V);
    size_t N = (size_t)B * T;
    int32_t *inp = rtok(x, N, V);
    float *wte = rnd(x, (size_t)Vp * C, -1, 1), *wpe = rnd(x, (size_t)T * C, -1, 1);
    int32_t *ginp = gput(x, inp, N * 4);
    float *gwte = gput(x, wte, (size_t)Vp * C * 4), *gwpe = gput(x, wpe, (size_t)T * C * 4);
    float *gout = gpoison(x, N * C);
    x->g.embed_forward(&x->g, gout, ginp, gwte, gwpe, B, T, C);
    float *out = gget(x, gout, N * C);
    double *r = xmalloc(N * C * sizeof *r);
    r64_embed_forward(r, inp, wte, wpe, B, T, C);
    float *c = NULL;
    if (x->have_ref) { c = xmalloc(N * C * 4); x->r.embed_forward(&x->r, c, inp, wte, wpe, B, T, C); }
    row(x, "embed_forward", sh, out, r, c, N * C, B_EW);
    free(out); free(r); free(c);

    /* backward: accumulate into random gradients, twice for determinism */
    float *dout = rnd(x, N * C, -1, 1);
    float *dwte0 = rnd(x, (size_t)Vp * C, -1, 1), *dwpe0 = rnd(x, (size_t)T * C, -1, 1);
    float *gd = gput(x, dout, N * C * 4);
    float *gdwte = gput(x, dwte0, (size_t)Vp * C * 4), *gdwpe = gput(x, dwpe0, (size_t)T * C * 4);
    x->g.embed_backward(&x->g, gdwte, gdwpe, gd, ginp, B, T, C);
    float *dwte = gget(x, gdwte, (size_t)Vp * C), *dwpe = gget(x, gdwpe, (size_t)T * C);
    double *rte = dcopy(dwte0, (size_t)Vp * C), *rpe = dcopy(dwpe0, (size_t)T * C);
    r64_embed_backward(rte, rpe, dout, inp, B, T, C);
    float *cte = NULL, *cpe = NULL;
    if (x->have_ref) {
        cte = fdup(dwte0, (size_t)Vp * C); cpe = fdup(dwpe0, (size_t)T * C);
        x->r.embed_backward(&x->r, cte, cpe, dout, inp, B, T, C);
    }
    row(x, "embed_backward dwte", sh, dwte, rte, cte, (size_t)Vp * C, B_RED);
    row(x, "embed_backward dwpe", sh, dwpe, rpe, cpe, (size_t)T * C, B_RED);
    x->g.to_device(&x->g, gdwte, dwte0, (size_t)Vp * C * 4);
    x->g.to_device(&x->g, gdwpe, dwpe0, (size_t)T * C * 4);
    x->g.embed_backward(&x->g, gdwte, gdwpe, gd, ginp, B, T, C);
    float *dwte2 = gget(x, gdwte, (size_t)Vp * C);
    row_det(x, "embed_backward determinism", sh, dwte, dwte2, (size_t)Vp * C);
    free(dwte2); free(dwte); free(dwpe); free(rte); free(rpe); free(cte); free(cpe);
    free(dout); free(dwte0); free(dwpe0); free(inp); free(wte); free(wpe);
    x->g.free(&x->g, ginp); x->g.free(&x->g, gwte); x->g.free(&x->g, gwpe);
    x->g.free(&x->g, gout); x->g.free(&x->g, gd); x->g.free(&x->g, gdwte); x->g.free(&x->g, gdwpe);
}

static void check_layernorm(gc *x, int N, int C)
{
    char sh[64];
    snprintf(sh, sizeof sh, "N%d C%d", N, C);
    size_t n = (size_t)N * C;
    float *inp = rnd(x, n, -2, 3), *w = rnd(x, C, 0.5f, 1.5f), *b = rnd(x, C, -0.5f, 0.5f);
    float *ginp = gput(x, inp, n * 4), *gw = gput(x, w, C * 4), *gb = gput(x, b, C * 4);
    float *gout = gpoison(x, n), *gmean = gpoison(x, N), *grstd = gpoison(x, N);
    x->g.layernorm_forward(&x->g, gout, gmean, grstd, ginp, gw, gb, N, C);
    float *out = gget(x, gout, n), *mean = gget(x, gmean, N), *rstd = gget(x, grstd, N);
    double *ro = xmalloc(n * 8), *rm = xmalloc(N * 8), *rr = xmalloc(N * 8);
    r64_layernorm_forward(ro, rm, rr, inp, w, b, N, C);
    float *co = NULL, *cm = NULL, *cr = NULL;
    if (x->have_ref) {
        co = xmalloc(n * 4); cm = xmalloc(N * 4); cr = xmalloc(N * 4);
        x->r.layernorm_forward(&x->r, co, cm, cr, inp, w, b, N, C);
    }
    row(x, "layernorm_forward out", sh, out, ro, co, n, B_RED);
    row(x, "layernorm_forward mean", sh, mean, rm, cm, N, B_RED);
    row(x, "layernorm_forward rstd", sh, rstd, rr, cr, N, B_RED);

    /* backward with the GPU's mean/rstd as the saved statistics (both sides see them) */
    float *dout = rnd(x, n, -1, 1);
    float *dinp0 = rnd(x, n, -1, 1), *dw0 = rnd(x, C, -1, 1), *db0 = rnd(x, C, -1, 1);
    float *gd = gput(x, dout, n * 4);
    float *gdi = gput(x, dinp0, n * 4), *gdw = gput(x, dw0, C * 4), *gdb = gput(x, db0, C * 4);
    x->g.layernorm_backward(&x->g, gdi, gdw, gdb, gd, ginp, gw, gmean, grstd, N, C);
    float *di = gget(x, gdi, n), *dw = gget(x, gdw, C), *db = gget(x, gdb, C);
    double *rdi = dcopy(dinp0, n), *rdw = dcopy(dw0, C), *rdb = dcopy(db0, C);
    r64_layernorm_backward(rdi, rdw, rdb, dout, inp, w, mean, rstd, N, C);
    float *cdi = NULL, *cdw = NULL, *cdb = NULL;
    if (x->have_ref) {
        cdi = fdup(dinp0, n); cdw = fdup(dw0, C); cdb = fdup(db0, C);
        x->r.layernorm_backward(&x->r, cdi, cdw, cdb, dout, inp, w, mean, rstd, N, C);
    }
    row(x, "layernorm_backward dinp", sh, di, rdi, cdi, n, B_BWD);
    row(x, "layernorm_backward dw", sh, dw, rdw, cdw, C, B_RED);
    row(x, "layernorm_backward db", sh, db, rdb, cdb, C, B_RED);
    x->g.to_device(&x->g, gdw, dw0, C * 4);
    x->g.to_device(&x->g, gdb, db0, C * 4);
    x->g.layernorm_backward(&x->g, gdi, gdw, gdb, gd, ginp, gw, gmean, grstd, N, C);
    float *dw2 = gget(x, gdw, C);
    row_det(x, "layernorm_backward determ.", sh, dw, dw2, C);
    free(dw2);
    free(inp); free(w); free(b); free(out); free(mean); free(rstd); free(ro); free(rm); free(rr);
    free(co); free(cm); free(cr); free(dout); free(dinp0); free(dw0); free(db0);
    free(di); free(dw); free(db); free(rdi); free(rdw); free(rdb); free(cdi); free(cdw); free(cdb);
    void *bufs[] = {ginp, gw, gb, gout, gmean, grstd, gd, gdi, gdw, gdb};
    for (size_t i = 0; i < sizeof bufs / sizeof *bufs; i++) x->g.free(&x->g, bufs[i]);
}

static void check_matmul(gc *x, int N, int C, int OC, int with_bias)
{
    char sh[64];
    snprintf(sh, sizeof sh, "N%d C%d OC%d%s", N, C, OC, with_bias ? " +b" : "");
    size_t ni = (size_t)N * C, nw = (size_t)OC * C, no = (size_t)N * OC;
    float *inp = rnd(x, ni, -1, 1), *w = rnd(x, nw, -1, 1);
    float *bias = with_bias ? rnd(x, OC, -1, 1) : NULL;
    float *ginp = gput(x, inp, ni * 4), *gw = gput(x, w, nw * 4);
    float *gbias = bias ? gput(x, bias, OC * 4) : NULL;
    float *gout = gpoison(x, no);
    x->g.matmul_forward(&x->g, gout, ginp, gw, gbias, N, C, OC);
    float *out = gget(x, gout, no);
    double *r = xmalloc(no * 8);
    r64_matmul_forward(r, inp, w, bias, N, C, OC);
    float *c = NULL;
    if (x->have_ref) { c = xmalloc(no * 4); x->r.matmul_forward(&x->r, c, inp, w, bias, N, C, OC); }
    row(x, "matmul_forward", sh, out, r, c, no, B_RED);
    free(out); free(r); free(c);

    float *dout = rnd(x, no, -1, 1);
    float *di0 = rnd(x, ni, -1, 1), *dw0 = rnd(x, nw, -1, 1), *db0 = rnd(x, OC, -1, 1);
    float *gd = gput(x, dout, no * 4), *gdi = gput(x, di0, ni * 4), *gdw = gput(x, dw0, nw * 4);
    float *gdb = bias ? gput(x, db0, OC * 4) : NULL;
    x->g.matmul_backward(&x->g, gdi, gdw, gdb, gd, ginp, gw, N, C, OC);
    float *di = gget(x, gdi, ni), *dw = gget(x, gdw, nw), *db = gdb ? gget(x, gdb, OC) : NULL;
    double *rdi = dcopy(di0, ni), *rdw = dcopy(dw0, nw), *rdb = dcopy(db0, OC);
    r64_matmul_backward(rdi, rdw, bias ? rdb : NULL, dout, inp, w, N, C, OC);
    float *cdi = NULL, *cdw = NULL, *cdb = NULL;
    if (x->have_ref) {
        cdi = fdup(di0, ni); cdw = fdup(dw0, nw); cdb = fdup(db0, OC);
        x->r.matmul_backward(&x->r, cdi, cdw, bias ? cdb : NULL, dout, inp, w, N, C, OC);
    }
    row(x, "matmul_backward dinp", sh, di, rdi, cdi, ni, B_RED);
    row(x, "matmul_backward dw", sh, dw, rdw, cdw, nw, B_RED);
    if (db) {
        row(x, "matmul_backward dbias", sh, db, rdb, cdb, OC, B_RED);
        x->g.to_device(&x->g, gdb, db0, OC * 4);
        x->g.matmul_backward(&x->g, gdi, gdw, gdb, gd, ginp, gw, N, C, OC);
        float *db2 = gget(x, gdb, OC);
        row_det(x, "matmul_backward dbias det.", sh, db, db2, OC);
        free(db2);
    }
    free(inp); free(w); free(bias); free(dout); free(di0); free(dw0); free(db0);
    free(di); free(dw); free(db); free(rdi); free(rdw); free(rdb); free(cdi); free(cdw); free(cdb);
    void *bufs[] = {ginp, gw, gbias, gout, gd, gdi, gdw, gdb};
    for (size_t i = 0; i < sizeof bufs / sizeof *bufs; i++) if (bufs[i]) x->g.free(&x->g, bufs[i]);
}

static void check_attention(gc *x, int B, int T, int C, int NH)
{
    char sh[64];
    snprintf(sh, sizeof sh, "B%d T%d C%d NH%d", B, T, C, NH);
    size_t nq = (size_t)B * T * 3 * C, no = (size_t)B * T * C, na = (size_t)B * NH * T * T;
    float *qkv = rnd(x, nq, -2, 2);
    float *gq = gput(x, qkv, nq * 4), *gout = gpoison(x, no), *gatt = gpoison(x, na);
    x->g.attention_forward(&x->g, gout, gatt, gq, B, T, C, NH);
    float *out = gget(x, gout, no), *att = gget(x, gatt, na);
    double *ro = xmalloc(no * 8), *ra = xmalloc(na * 8);
    r64_attention_forward(ro, ra, qkv, B, T, C, NH);
    float *co = NULL, *ca = NULL;
    if (x->have_ref) {
        co = xmalloc(no * 4); ca = xmalloc(na * 4);
        x->r.attention_forward(&x->r, co, ca, qkv, B, T, C, NH);
    }
    row(x, "attention_forward out", sh, out, ro, co, no, B_RED);
    row(x, "attention_forward att", sh, att, ra, ca, na, B_RED);

    /* backward from the GPU's att (both sides see the same saved probabilities) */
    float *dout = rnd(x, no, -1, 1), *dq0 = rnd(x, nq, -1, 1);
    float *gd = gput(x, dout, no * 4), *gdq = gput(x, dq0, nq * 4);
    x->g.attention_backward(&x->g, gdq, gd, gq, gatt, B, T, C, NH);
    float *dq = gget(x, gdq, nq);
    double *rdq = dcopy(dq0, nq);
    r64_attention_backward(rdq, dout, qkv, att, B, T, C, NH);
    float *cdq = NULL;
    if (x->have_ref) {
        cdq = fdup(dq0, nq);
        x->r.attention_backward(&x->r, cdq, dout, qkv, att, B, T, C, NH);
    }
    row(x, "attention_backward dqkv", sh, dq, rdq, cdq, nq, B_BWD);
    free(qkv); free(out); free(att); free(ro); free(ra); free(co); free(ca);
    free(dout); free(dq0); free(dq); free(rdq); free(cdq);
    void *bufs[] = {gq, gout, gatt, gd, gdq};
    for (size_t i = 0; i < sizeof bufs / sizeof *bufs; i++) x->g.free(&x->g, bufs[i]);
}

static void check_elementwise(gc *x, size_t n)
{
    char sh[64];
    snprintf(sh, sizeof sh, "n%zu", n);
    float *a = rnd(x, n, -6, 6), *b = rnd(x, n, -1, 1), *d0 = rnd(x, n, -1, 1);
    float *ga = gput(x, a, n * 4), *gb = gput(x, b, n * 4), *gout = gpoison(x, n);
    double *r = xmalloc(n * 8);
    float *c = x->have_ref ? xmalloc(n * 4) : NULL;

    x->g.gelu_forward(&x->g, gout, ga, n);
    float *o = gget(x, gout, n);
    r64_gelu_forward(r, a, n);
    if (c) x->r.gelu_forward(&x->r, c, a, n);
    row(x, "gelu_forward", sh, o, r, c, n, B_EW * 10);
    free(o);

    float *gdi = gput(x, d0, n * 4);
    x->g.gelu_backward(&x->g, gdi, ga, gb, n);
    o = gget(x, gdi, n);
    for (size_t i = 0; i < n; i++) r[i] = d0[i];
    r64_gelu_backward(r, a, b, n);
    if (c) { memcpy(c, d0, n * 4); x->r.gelu_backward(&x->r, c, a, b, n); }
    row(x, "gelu_backward", sh, o, r, c, n, B_EW * 10);
    free(o);

    x->g.residual_forward(&x->g, gout, ga, gb, n);
    o = gget(x, gout, n);
    for (size_t i = 0; i < n; i++) r[i] = (double)a[i] + b[i];
    if (c) x->r.residual_forward(&x->r, c, a, b, n);
    row(x, "residual_forward", sh, o, r, c, n, B_EW);
    free(o);

    x->g.to_device(&x->g, gdi, d0, n * 4);
    x->g.accumulate(&x->g, gdi, gb, n);
    o = gget(x, gdi, n);
    for (size_t i = 0; i < n; i++) r[i] = (double)d0[i] + b[i];
    if (c) { memcpy(c, d0, n * 4); x->r.accumulate(&x->r, c, b, n); }
    row(x, "accumulate", sh, o, r, c, n, B_EW);
    free(o);

    /* memory ops: copy and zero round trips */
    x->g.copy(&x->g, gout, ga, n * 4);
    o = gget(x, gout, n);
    for (size_t i = 0; i < n; i++) r[i] = a[i];
    row(x, "copy", sh, o, r, NULL, n, 0.0);
    free(o);
    x->g.zero(&x->g, gout, n * 4);
    o = gget(x, gout, n);
    for (size_t i = 0; i < n; i++) r[i] = 0;
    row(x, "zero", sh, o, r, NULL, n, 0.0);
    free(o);

    free(a); free(b); free(d0); free(r); free(c);
    x->g.free(&x->g, ga); x->g.free(&x->g, gb); x->g.free(&x->g, gout); x->g.free(&x->g, gdi);
}

static void check_xent(gc *x, int N, int V, int Vp)
{
    char sh[64];
    snprintf(sh, sizeof sh, "N%d V%d Vp%d", N, V, Vp);
    size_t n = (size_t)N * Vp;
    float *lg = rnd(x, n, -8, 8);
    for (int i = 0; i < N; i++)   /* padded columns large: they must not count */
        for (int j = V; j < Vp; j++) lg[(size_t)i * Vp + j] = 30.0f;
    int32_t *tg = rtok(x, N, V);
    float *glg = gput(x, lg, n * 4);
    int32_t *gtg = gput(x, tg, (size_t)N * 4);
    float *gl = gpoison(x, N), *glse = gpoison(x, N);
    x->g.xent_forward(&x->g, gl, glse, glg, gtg, N, V, Vp);
    float *l = gget(x, gl, N), *lse = gget(x, glse, N);
    double *rl = xmalloc(N * 8), *rlse = xmalloc(N * 8);
    r64_xent_forward(rl, rlse, lg, tg, N, V, Vp);
    float *cl = NULL, *clse = NULL;
    if (x->have_ref) {
        cl = xmalloc(N * 4); clse = xmalloc(N * 4);
        x->r.xent_forward(&x->r, cl, clse, lg, tg, N, V, Vp);
    }
    row(x, "xent_forward losses", sh, l, rl, cl, N, B_RED);
    row(x, "xent_forward lse", sh, lse, rlse, clse, N, B_RED);

    float dloss = 1.0f / N;
    float *gdl = gpoison(x, n);
    x->g.xent_backward(&x->g, gdl, glg, glse, gtg, dloss, N, V, Vp);
    float *dl = gget(x, gdl, n);
    double *rdl = xmalloc(n * 8);
    r64_xent_backward(rdl, lg, lse, tg, dloss, N, V, Vp);
    float *cdl = NULL;
    if (x->have_ref) { cdl = xmalloc(n * 4); x->r.xent_backward(&x->r, cdl, lg, lse, tg, dloss, N, V, Vp); }
    row(x, "xent_backward", sh, dl, rdl, cdl, n, B_RED);
    /* in place: dlogits aliasing logits */
    x->g.xent_backward(&x->g, glg, glg, glse, gtg, dloss, N, V, Vp);
    float *dl2 = gget(x, glg, n);
    row(x, "xent_backward in place", sh, dl2, rdl, NULL, n, B_RED);
    /* fused: the loss and the in-place gradient of the two ops above, bit for bit */
    if (x->g.xent_fused) {
        float *gf = gput(x, lg, n * 4), *gfl = gpoison(x, N);
        x->g.xent_fused(&x->g, gfl, gf, gtg, dloss, N, V, Vp, 0);
        float *fl = gget(x, gfl, N), *fd = gget(x, gf, n);
        int same = !memcmp(fl, l, N * 4) && !memcmp(fd, dl2, n * 4);
        if (x->cuda) row_check(x, "xent_fused bits", sh, same ? 0.0 : 1.0, 0.0, same);
        row(x, "xent_fused losses", sh, fl, rl, cl, N, B_RED);
        row(x, "xent_fused dlogits", sh, fd, rdl, cdl, n, B_RED);
        free(fl); free(fd);
        x->g.free(&x->g, gf); x->g.free(&x->g, gfl);
    } else if (x->cuda) {
        row_check(x, "backend has xent_fused", x->g.name, 1, 0, 0);
    }
    free(dl2);
    free(lg); free(tg); free(l); free(lse); free(rl); free(rlse); free(cl); free(clse);
    free(dl); free(rdl); free(cdl);
    void *bufs[] = {glg, gtg, gl, glse, gdl};
    for (size_t i = 0; i < sizeof bufs / sizeof *bufs; i++) x->g.free(&x->g, bufs[i]);
}

static void check_optim(gc *x, size_t n, int t)
{
    char sh[64];
    snprintf(sh, sizeof sh, "n%zu t%d", n, t);
    float lr = 0.05f, b1 = 0.9f, b2 = 0.95f, eps = 1e-8f, wd = 0.1f, gs = 0.5f;
    float *p = rnd(x, n, -1, 1), *g = rnd(x, n, -2, 2), *m = rnd(x, n, -0.1f, 0.1f),
          *v = rnd(x, n, 0, 0.01f);
    float *gp = gput(x, p, n * 4), *gg = gput(x, g, n * 4), *gm = gput(x, m, n * 4),
          *gv = gput(x, v, n * 4);
    x->g.adamw(&x->g, gp, gg, gm, gv, n, lr, b1, b2, eps, wd, t, gs);
    float *op = gget(x, gp, n), *om = gget(x, gm, n), *ov = gget(x, gv, n);
    double *rp = xmalloc(n * 8), *rm = xmalloc(n * 8), *rv = xmalloc(n * 8);
    r64_adamw(rp, rm, rv, p, g, m, v, n, lr, b1, b2, eps, wd, t, gs);
    float *cp = NULL, *cm = NULL, *cv = NULL;
    if (x->have_ref) {
        cp = fdup(p, n); cm = fdup(m, n); cv = fdup(v, n);
        x->r.adamw(&x->r, cp, g, cm, cv, n, lr, b1, b2, eps, wd, t, gs);
    }
    /* compare the update p - p0, not p: p's own rounding would hide errors in it */
    for (size_t i = 0; i < n; i++) {
        op[i] -= p[i];
        rp[i] -= p[i];
        if (cp) cp[i] -= p[i];
    }
    row(x, "adamw update", sh, op, rp, cp, n, B_RED);
    row(x, "adamw m", sh, om, rm, cm, n, B_EW);
    row(x, "adamw v", sh, ov, rv, cv, n, B_EW);

    double s1 = x->g.sum_squares(&x->g, gg, n), s2 = x->g.sum_squares(&x->g, gg, n);
    double rs = r64_sum_squares(g, n);
    float f1 = (float)s1;
    double e = isfinite(s1) ? fabs(s1 - rs) / fmax(rs, 1e-30) : INFINITY;
    double ec = -1, ecr = -1;
    if (x->have_ref) {
        double c = x->r.sum_squares(&x->r, g, n);
        ec = fabs(s1 - c) / fmax(fabs(c), 1e-30);
        ecr = fabs(c - rs) / fmax(rs, 1e-30);
    }
    int pass = e <= B_RED && (ec < 0 || ec <= 2 * B_RED);
    x->rows++;
    if (!pass) x->fails++;
    row_print(x, "sum_squares", sh, e, ec, ecr, B_RED, pass);
    float f2 = (float)s2;
    row_det(x, "sum_squares determinism", sh, &f1, &f2, 1);
    (void)s2;
    free(p); free(g); free(m); free(v); free(op); free(om); free(ov); free(rp); free(rm); free(rv);
    free(cp); free(cm); free(cv);
    void *bufs[] = {gp, gg, gm, gv};
    for (size_t i = 0; i < sizeof bufs / sizeof *bufs; i++) x->g.free(&x->g, bufs[i]);
}

/* The host-side token grouping of the cuda embedding backward (runs without a GPU too). */
static void check_bucket(gc *x, size_t N, int V)
{
    char sh[64];
    snprintf(sh, sizeof sh, "N%zu V%d", N, V);
    int32_t *tok = rtok(x, N, V);
    int32_t *buf = xmalloc((3 * N + 1) * sizeof *buf), *tmp = xmalloc((N + 65536) * sizeof *tmp);
    int32_t *off = NULL;
    size_t U = llm_cuda_bucket(tok, N, buf, buf + N, &off, tmp);
    const int32_t *pos = buf, *ut = buf + N;
    char *seen = calloc(N ? N : 1, 1);
    int bad = !seen || off != ut + U || U > N || off[0] != 0 || off[U] != (int32_t)N;
    for (size_t u = 0; !bad && u < U; u++) {
        if (u && ut[u] <= ut[u - 1]) bad = 1;
        if (off[u + 1] <= off[u]) bad = 1;
        for (int32_t i = off[u]; !bad && i < off[u + 1]; i++) {
            if (pos[i] < 0 || (size_t)pos[i] >= N || seen[pos[i]] || tok[pos[i]] != ut[u]) bad = 1;
            else seen[pos[i]] = 1;
            if (i > off[u] && pos[i] <= pos[i - 1]) bad = 1;
        }
    }
    x->rows++;
    if (bad) x->fails++;
    row_print(x, "embed bucket (host)", sh, bad, -1, -1, 0.0, !bad);
    free(seen); free(tok); free(buf); free(tmp);
}

/* cuBLASLt bf16 and TF32 GEMMs (used by the bench and the coming mixed precision) */
static void check_gemm_lo(gc *x, int M, int N, int K)
{
    char sh[64];
    snprintf(sh, sizeof sh, "M%d N%d K%d", M, N, K);
    const char *modes[] = {"bf16", "tf32"};
    for (int i = 0; i < 2; i++) {
        double er = 0, ee = 0;
        char err[256], op[64];
        int rc = gpu_gemm_lo_check(M, N, K, modes[i], (unsigned)rnext(x), &er, &ee, err, sizeof err);
        if (rc) {
            fprintf(stderr, "gpu_check: gemm %s: %s\n", modes[i], err);
            er = ee = INFINITY;
        }
        /* normwise errors.  bf16: exact products of the rounded inputs, fp32 sums ->
         * tight against the rounded reference (~1e-6); against the fp32 inputs bf16's
         * 8-bit mantissa shows (~3e-3).  TF32 (10-bit mantissa) ~4e-4. */
        double b1 = i == 0 ? B_RED : 2e-3, b2 = i == 0 ? 1e-2 : 2e-3;
        snprintf(op, sizeof op, "gemm %s vs rounded in", modes[i]);
        x->rows++;
        if (!(er <= b1)) x->fails++;
        row_print(x, op, sh, er, -1, -1, b1, er <= b1);
        snprintf(op, sizeof op, "gemm %s vs fp32 in", modes[i]);
        x->rows++;
        if (!(ee <= b2)) x->fails++;
        row_print(x, op, sh, ee, -1, -1, b2, ee <= b2);
    }
}

/* ---- timings (--bench) ---- */

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + ts.tv_nsec * 1e-9;
}

#define TIME_OP(label, flops, stmt) do {                                          \
        for (int w_ = 0; w_ < 2; w_++) { stmt; }                                  \
        x->g.sync(&x->g);                                                         \
        double t0_ = now_s();                                                     \
        for (int r_ = 0; r_ < reps; r_++) { stmt; }                               \
        x->g.sync(&x->g);                                                         \
        double ms_ = (now_s() - t0_) * 1e3 / reps;                                \
        char l_[160];                                                             \
        snprintf(l_, sizeof l_, "time %-24s %9.3f ms %9.1f TFLOP/s\n", label, ms_, \
                 (flops) > 0 ? (flops) / (ms_ * 1e-3) / 1e12 : 0.0);              \
        fputs(l_, stdout);                                                        \
        if (x->out) fputs(l_, x->out);                                            \
    } while (0)

/* The update as the model made it without adamw_segs: adamw per run, then the lo copy
 * (p, g, m, v: quarters of buf, na each). */
static void bench_adamw_runs(gc *x, float *buf, size_t na, const llm_adamw_seg *sg, int ns,
                             void *plo)
{
    for (int i = 0; i < ns; i++) {
        size_t o = sg[i].off;
        x->g.adamw(&x->g, buf + o, buf + na + o, buf + 2 * na + o, buf + 3 * na + o, sg[i].n,
                   1e-4f, 0.9f, 0.95f, 1e-8f, sg[i].wd, 3, 1.0f);
    }
    x->g.cast_lo(&x->g, plo, buf, na, LLM_DT_BF16);
}

/* Per-op times of the cuda backend at GPT-2 124M layer shapes (B, T=1024). */
static void bench_ops(gc *x, int B)
{
    const int T = 1024, C = 768, NH = 12, V = 50257, Vp = 50304, reps = 10;
    size_t N = (size_t)B * T;
    size_t nh = N * 4 * C > (size_t)Vp * C ? N * 4 * C : (size_t)Vp * C;
    float *h = rnd(x, nh, -1, 1);
    float *a = gput(x, h, N * 4 * C * 4), *b = gput(x, h, N * 4 * C * 4);
    float *o = gput(x, h, N * 4 * C * 4);
    float *w = gput(x, h, (size_t)4 * C * C * 4), *dw = x->g.alloc(&x->g, (size_t)4 * C * C * 4);
    float *att = x->g.alloc(&x->g, (size_t)B * NH * T * T * 4);
    float *mean = x->g.alloc(&x->g, N * NH * 4), *rstd = x->g.alloc(&x->g, N * 4);
    float *bias = x->g.alloc(&x->g, (size_t)4 * C * 4), *dbias = x->g.alloc(&x->g, (size_t)4 * C * 4);
    float *logits = x->g.alloc(&x->g, N * Vp * 4), *wte = x->g.alloc(&x->g, (size_t)Vp * C * 4);
    int32_t *tok = rtok(x, N, V);
    int32_t *gtok = gput(x, tok, N * 4);
    if (!dw || !att || !mean || !rstd || !bias || !dbias || !logits || !wte) {
        fprintf(stderr, "gpu_check: bench allocation failed\n");
        return;
    }
    x->g.to_device(&x->g, logits, h, N * 4 * C * 4);   /* N*Vp > N*4C */
    x->g.to_device(&x->g, wte, h, (size_t)Vp * C * 4);
    size_t na = N * Vp / 4 < (size_t)124000000 ? N * Vp / 4 : (size_t)124000000;
    double fN = (double)N;
    char lab[64];
    snprintf(lab, sizeof lab, "--- ops at B=%d T=%d C=%d", B, T, C);
    puts(lab);
    TIME_OP("matmul_fwd qkv", 2 * fN * C * 3 * C, x->g.matmul_forward(&x->g, o, a, w, bias, (int)N, C, 3 * C));
    TIME_OP("matmul_fwd fc", 2 * fN * C * 4 * C, x->g.matmul_forward(&x->g, o, a, w, bias, (int)N, C, 4 * C));
    TIME_OP("matmul_bwd fc", 4 * fN * C * 4 * C, x->g.matmul_backward(&x->g, b, dw, dbias, o, a, w, (int)N, C, 4 * C));
    TIME_OP("attention_fwd", 4.0 * B * NH * T * T * (C / NH), x->g.attention_forward(&x->g, o, att, a, B, T, C, NH));
    TIME_OP("attention_bwd", 8.0 * B * NH * T * T * (C / NH), x->g.attention_backward(&x->g, b, o, a, att, B, T, C, NH));
    if (x->g.attention_forward_lse && x->g.matmul_forward_lo && x->cuda) {
        /* mixed precision (bf16) as llm-train runs it: lo activations in, lo or fp32 out */
        const int lo = LLM_DT_BF16;
        size_t nl = N * 4 * C;
        void *al = x->g.alloc(&x->g, nl * 2), *bl = x->g.alloc(&x->g, nl * 2),
             *ol = x->g.alloc(&x->g, nl * 2), *wl = x->g.alloc(&x->g, (size_t)4 * C * C * 2),
             *bsl = x->g.alloc(&x->g, (size_t)4 * C * 2), *ll = x->g.alloc(&x->g, N * Vp * 2),
             *wtl = x->g.alloc(&x->g, (size_t)Vp * C * 2);
        if (!al || !bl || !ol || !wl || !bsl || !ll || !wtl) {
            fprintf(stderr, "gpu_check: bench allocation failed\n");
            return;
        }
        x->g.cast_lo(&x->g, al, a, nl, lo);
        x->g.cast_lo(&x->g, bl, b, nl, lo);
        x->g.cast_lo(&x->g, wl, w, (size_t)4 * C * C, lo);
        x->g.cast_lo(&x->g, bsl, bias, (size_t)4 * C, lo);
        x->g.cast_lo(&x->g, wtl, wte, (size_t)Vp * C, lo);
        x->g.cast_lo(&x->g, ll, logits, N * Vp, lo);
        TIME_OP("matmul_fwd_lo qkv ->lo", 2 * fN * C * 3 * C,
                x->g.matmul_forward_lo(&x->g, ol, lo, al, wl, lo, bsl, (int)N, C, 3 * C));
        TIME_OP("matmul_fwd_lo fc ->lo", 2 * fN * C * 4 * C,
                x->g.matmul_forward_lo(&x->g, ol, lo, al, wl, lo, bsl, (int)N, C, 4 * C));
        TIME_OP("matmul_fwd_lo proj ->f32", 2 * fN * 4 * C * C,
                x->g.matmul_forward_lo(&x->g, o, LLM_DT_F32, al, wl, lo, bias, (int)N, 4 * C, C));
        TIME_OP("matmul_bwd_lo fc", 4 * fN * C * 4 * C,
                x->g.matmul_backward_lo(&x->g, bl, LLM_DT_F32, dw, dbias, ol, al, wl, lo, (int)N, C, 4 * C));
        TIME_OP("matmul_bwd_lo proj ->lo", 4 * fN * C * 4 * C,
                x->g.matmul_backward_lo(&x->g, bl, lo, dw, dbias, al, ol, wl, lo, (int)N, 4 * C, C));
        TIME_OP("lm_head_fwd_lo ->lo", 2 * fN * C * Vp,
                x->g.matmul_forward_lo(&x->g, ll, lo, al, wtl, lo, NULL, (int)N, C, Vp));
        /* the attention training runs: fused kernels, then the batched-GEMM form; the
         * FLOPs counted are the causal half (what the fused kernels compute) */
        double cf = 2.0 * B * NH * T * (T + 1.0) * (C / NH);
        static const char *const fwdn[] = {"attention_lse_fwd fused", "attention_lse_fwd gemm",
                                           "attention_lse_fwd wmma"};
        static const char *const bwdn[] = {"attention_lse_bwd fused", "attention_lse_bwd gemm",
                                           "attention_lse_bwd wmma"};
        for (int off = 0; off < 3; off++) {   /* mma.sync kernels, GEMM form, WMMA kernels */
            llm_backend_cuda_flash_path(&x->g, off, NULL);
            TIME_OP(fwdn[off], cf, x->g.attention_forward_lse(&x->g, ol, mean, al, B, T, C, NH, lo));
            TIME_OP(bwdn[off], 2.5 * cf,
                    x->g.attention_backward_lse(&x->g, bl, ol, al, ol, mean, B, T, C, NH, lo));
        }
        llm_backend_cuda_flash_path(&x->g, 0, NULL);
        TIME_OP("layernorm_fwd_lo +res", 0,
                x->g.layernorm_forward_lo(&x->g, o, ol, mean, rstd, a, b, w, bias, (int)N, C, lo));
        TIME_OP("gelu_fwd_lo", 0, x->g.gelu_forward_lo(&x->g, ol, al, N * 4 * C, lo));
        TIME_OP("gelu_bwd_lo", 0, x->g.gelu_backward_lo(&x->g, bl, al, ol, N * 4 * C, lo));
        /* the fused forms (compare with matmul_fwd_lo fc + gelu_fwd_lo, and matmul_bwd_lo
         * proj + gelu_bwd_lo; the pre-activation goes to bl) */
        if (x->g.matmul_forward_gelu_lo && x->g.matmul_backward_dgelu_lo) {
            TIME_OP("matmul_fwd_gelu_lo fc", 2 * fN * C * 4 * C,
                    x->g.matmul_forward_gelu_lo(&x->g, ol, bl, al, wl, lo, bsl, (int)N, C, 4 * C));
            TIME_OP("matmul_bwd_dgelu_lo proj", 4 * fN * C * 4 * C,
                    x->g.matmul_backward_dgelu_lo(&x->g, ol, dw, dbias, al, bl, bl, wl, lo,
                                                  (int)N, 4 * C, C));
        }
        TIME_OP("xent_fwd_lo", 0, x->g.xent_forward_lo(&x->g, o, b, ll, gtok, (int)N, V, Vp, lo));
        TIME_OP("xent_bwd_lo", 0, x->g.xent_backward_lo(&x->g, ll, ll, b, gtok, 1.0f / N, (int)N, V, Vp, lo));
        if (x->g.xent_fused)   /* compare with xent_fwd_lo + xent_bwd_lo */
            TIME_OP("xent_fused_lo", 0, x->g.xent_fused(&x->g, o, ll, gtok, 1.0f / N, (int)N, V, Vp, lo));
        void *lb[] = {al, bl, ol, wl, bsl, ll, wtl};
        for (size_t i = 0; i < sizeof lb / sizeof *lb; i++) x->g.free(&x->g, lb[i]);
    }
    TIME_OP("layernorm_fwd", 0, x->g.layernorm_forward(&x->g, o, mean, rstd, a, w, bias, (int)N, C));
    TIME_OP("layernorm_bwd", 0, x->g.layernorm_backward(&x->g, b, dw, dbias, o, a, w, mean, rstd, (int)N, C));
    TIME_OP("gelu_fwd", 0, x->g.gelu_forward(&x->g, o, a, N * 4 * C));
    TIME_OP("gelu_bwd", 0, x->g.gelu_backward(&x->g, b, a, o, N * 4 * C));
    TIME_OP("residual_fwd", 0, x->g.residual_forward(&x->g, o, a, b, N * C));
    if (x->g.residual_layernorm_forward)
        TIME_OP("residual_layernorm_fwd", 0,
                x->g.residual_layernorm_forward(&x->g, o, b + N * C, mean, rstd, a, b, w, bias,
                                                (int)N, C));
    TIME_OP("lm_head_fwd", 2 * fN * C * Vp, x->g.matmul_forward(&x->g, logits, a, wte, NULL, (int)N, C, Vp));
    TIME_OP("xent_fwd", 0, x->g.xent_forward(&x->g, o, b, logits, gtok, (int)N, V, Vp));
    TIME_OP("xent_bwd", 0, x->g.xent_backward(&x->g, logits, logits, b, gtok, 1.0f / N, (int)N, V, Vp));
    if (x->g.xent_fused)
        TIME_OP("xent_fused", 0, x->g.xent_fused(&x->g, o, logits, gtok, 1.0f / N, (int)N, V, Vp, 0));
    TIME_OP("embed_bwd", 0, x->g.embed_backward(&x->g, wte, o, b, gtok, B, T, C));
    /* AdamW over up to 124M parameters: p, g, m, v are quarters of the logits buffer */
    TIME_OP("adamw <=124M params", 0, x->g.adamw(&x->g, logits, logits + na, logits + 2 * na,
                                                 logits + 3 * na, na, 1e-4f, 0.9f, 0.95f,
                                                 1e-8f, 0.1f, 3, 1.0f));
    if (x->g.adamw_segs) {   /* the model's update: 98 runs of views (GPT-2 124M), bf16 copy */
        llm_adamw_seg sg[98];
        for (int i = 0; i < 98; i++)
            sg[i] = (llm_adamw_seg){na / 98 * i, i == 97 ? na - na / 98 * 97 : na / 98,
                                    (i & 1) ? 0.0f : 0.1f};
        void *plo = x->g.alloc(&x->g, na * 2);
        if (plo) {
            TIME_OP("adamw x98 + cast_lo", 0, bench_adamw_runs(x, logits, na, sg, 98, plo));
            TIME_OP("adamw_segs x98 + lo", 0,
                    x->g.adamw_segs(&x->g, logits, plo, logits + na, logits + 2 * na,
                                    logits + 3 * na, 0, sg, 98, 1e-4f, 0.9f, 0.95f, 1e-8f, 3,
                                    1.0f, LLM_DT_BF16));
            x->g.free(&x->g, plo);
        }
    }
    TIME_OP("sum_squares", 0, (void)x->g.sum_squares(&x->g, a, N * 4 * C));
    free(h); free(tok);
    void *bufs[] = {a, b, o, w, dw, att, mean, rstd, bias, dbias, logits, wte, gtok};
    for (size_t i = 0; i < sizeof bufs / sizeof *bufs; i++) x->g.free(&x->g, bufs[i]);
}

static void bench_gemm(gc *x)
{
    const char *modes[] = {"fp32", "tf32", "bf16"};
    for (int i = 0; i < 3; i++) {
        double tf = 0;
        char err[256], line[400];
        if (gpu_bench_gemm(4096, 4096, 4096, modes[i], 20, &tf, err, sizeof err))
            snprintf(line, sizeof line, "gemm 4096^3 %-5s failed: %s\n", modes[i], err);
        else
            snprintf(line, sizeof line, "gemm 4096^3 %-5s %8.1f TFLOP/s\n", modes[i], tf);
        fputs(line, stdout);
        if (x->out) fputs(line, x->out);
    }
}

int main(int argc, char **argv)
{
    gc x;
    memset(&x, 0, sizeof x);
    int bench = 0, bench_b = 8, tiny = 0, only_att = 0, only_xfer = 0, only_argmax = 0;
    const char *outpath = NULL, *device = "cuda";
    x.rng = (uint64_t)time(NULL);   /* fresh inputs each run; the seed is printed */
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--bench")) bench = 1;
        else if (!strcmp(argv[i], "--tiny")) tiny = 1;   /* small shapes only (sanitizers) */
        /* --only attention: the lo and lse attention rows alone (quick iterations) */
        else if (!strcmp(argv[i], "--only") && i + 1 < argc && !strcmp(argv[i + 1], "attention")) {
            only_att = 1;
            i++;
        }
        /* --only xfer: the to_device rows alone (tests/cli/gpu_emu.sh, lagging copies) */
        else if (!strcmp(argv[i], "--only") && i + 1 < argc && !strcmp(argv[i + 1], "xfer")) {
            only_xfer = 1;
            i++;
        }
        /* --only argmax: the greedy-token rows alone */
        else if (!strcmp(argv[i], "--only") && i + 1 < argc && !strcmp(argv[i + 1], "argmax")) {
            only_argmax = 1;
            i++;
        }
        else if (!strcmp(argv[i], "--bench-batch") && i + 1 < argc) bench_b = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--seed") && i + 1 < argc) x.rng = strtoull(argv[++i], NULL, 10);
        else if (!strcmp(argv[i], "--out") && i + 1 < argc) outpath = argv[++i];
        /* --device cpu: run the whole table with a CPU backend in place of cuda, to test
         * this program itself where there is no GPU */
        else if (!strcmp(argv[i], "--device") && i + 1 < argc) device = argv[++i];
        /* --off-names: the parts LLM_CUDA_OFF takes, one a line (scripts/gpu-check.sh) */
        else if (!strcmp(argv[i], "--off-names")) {
            for (int k = 0; llm_backend_cuda_off_name(k); k++) puts(llm_backend_cuda_off_name(k));
            return 0;
        }
        else if (!strcmp(argv[i], "--help") || !strcmp(argv[i], "-h")) {
            printf("usage: gpu_check [--seed N] [--out FILE] [--tiny] [--bench] [--bench-batch B]\n"
                   "                 [--device cuda|cpu|cpu-ref] [--only attention|xfer|argmax]\n"
                   "       gpu_check --off-names\n");
            return 0;
        } else {
            fprintf(stderr, "gpu_check: unknown argument '%s'\n", argv[i]);
            return 64;
        }
    }
    char err[256];
    /* the table calls every op of the backend: none may be taken out */
    if (getenv("LLM_CUDA_OFF") || getenv("LLM_CUDA_FAULT")) {
        fprintf(stderr, "gpu_check: LLM_CUDA_OFF and LLM_CUDA_FAULT ignored (every op is checked)\n");
        unsetenv("LLM_CUDA_OFF");
        unsetenv("LLM_CUDA_FAULT");
    }
    x.cuda = !strcmp(device, "cuda");
    /* through llm_backend_init, as the tools: its settings check (LLM_CUDA_TF32, ...) too */
    if (!x.cuda) {
        if (llm_backend_init(&x.g, device, 2, err, sizeof err)) {
            fprintf(stderr, "gpu_check: %s\n", err);
            return 1;
        }
        if (!strncmp(x.g.name, "cpu", 3)) llm_backend_cpu_infer_init(&x.g, !strcmp(x.g.name, "cpu-ref"));
    } else if (llm_backend_init(&x.g, "cuda", 0, err, sizeof err)) {
        if (!strncmp(err, "no CUDA device", 14)) {
            printf("gpu_check: no GPU: skipped (%s)\n", err);
            return 0;
        }
        fprintf(stderr, "gpu_check: %s\n", err);
        return 1;
    }
#ifdef LLM_HAVE_CPU_REF
    if (llm_backend_cpu_init(&x.r, 1, 1) == 0) x.have_ref = 1;
    else fprintf(stderr, "gpu_check: cpu-ref backend unavailable; comparing with ref64 only\n");
#endif
    if (outpath && !(x.out = fopen(outpath, "w"))) {
        fprintf(stderr, "gpu_check: cannot open '%s'\n", outpath);
        return 74;
    }
    char name[128] = "?", blas[600] = "";
    size_t used = 0, total = 0;
    if (x.cuda) {
        llm_backend_cuda_device_info(&x.g, name, sizeof name, &used, &total);
        llm_cuda_blas_info(blas, sizeof blas);   /* which cuBLAS the run has */
    } else {
        snprintf(name, sizeof name, "backend '%s' (harness self-test)", device);
    }
    char hdr[1024];
    snprintf(hdr, sizeof hdr,
             "gpu_check: device %s (%.1f GiB), seed %llu, cpu-ref %s%s%s\n"
             "%-26s %-22s %10s %10s %10s %9s  %s\n",
             name, total / 1073741824.0, (unsigned long long)x.rng, x.have_ref ? "yes" : "no",
             blas[0] ? ", " : "", blas,
             "op", "shape", "cuda/ref64", "cuda/cpu", "cpu/ref64", "bound", "result");
    fputs(hdr, stdout);
    if (x.out) fputs(hdr, x.out);

    {   /* every op of backend.h is filled */
        const llm_backend *b = &x.g;
        const void *ops[] = {
            (const void *)b->alloc, (const void *)b->free, (const void *)b->to_device,
            (const void *)b->to_host, (const void *)b->copy, (const void *)b->zero,
            (const void *)b->sync, (const void *)b->embed_forward,
            (const void *)b->layernorm_forward, (const void *)b->matmul_forward,
            (const void *)b->attention_forward, (const void *)b->gelu_forward,
            (const void *)b->residual_forward, (const void *)b->residual_layernorm_forward,
            (const void *)b->xent_forward,
            (const void *)b->embed_backward, (const void *)b->layernorm_backward,
            (const void *)b->matmul_backward, (const void *)b->attention_backward,
            (const void *)b->gelu_backward, (const void *)b->accumulate,
            (const void *)b->xent_backward, (const void *)b->sum_squares, (const void *)b->adamw};
        int missing = 0;
        for (size_t i = 0; i < sizeof ops / sizeof *ops; i++) missing += ops[i] == NULL;
        x.rows++;
        if (missing) x.fails++;
        row_print(&x, "backend fills every op", b->name, missing, -1, -1, 0.0, !missing);
        if (missing) return 1;
    }
    if (only_att) {
        gpu_check_attention_lse(&x, tiny);
        goto done;
    }
    if (only_xfer) {
        gpu_check_xfer(&x);
        gpu_check_xfer_streams(&x, tiny);
        goto done;
    }
    if (only_argmax) {
        gpu_check_argmax(&x, tiny);
        goto done;
    }
    check_bucket(&x, 1, 1);
    check_bucket(&x, 1000, 7);
    check_bucket(&x, 70001, 50257);
    check_bucket(&x, 5000, 200000);   /* ids past 65535 exercise the high radix pass */
    check_elementwise(&x, 1);
    check_elementwise(&x, tiny ? 1003 : 1000003);
    check_embed(&x, 1, 1, 1, 1, 1);
    check_embed(&x, 3, 37, 61, 7, 7);          /* many repeats of each token */
    check_embed(&x, 5, 129, 96, 500, 512);
    gpu_check_embed_hint(&x, tiny);
    check_layernorm(&x, 1, 1);
    check_layernorm(&x, 37, 61);
    check_layernorm(&x, 70, 1600);   /* the backward's one-warp blocks (4 x 2C floats > 48 KiB) */
    gpu_check_resln(&x, 1, 1);
    gpu_check_resln(&x, 37, 61);
    check_matmul(&x, 1, 1, 1, 1);
    check_matmul(&x, 37, 61, 83, 1);
    check_matmul(&x, 37, 61, 83, 0);
    check_attention(&x, 1, 1, 8, 1);
    check_attention(&x, 2, 7, 48, 3);
    check_attention(&x, 3, 37, 96, 4);
    check_xent(&x, 1, 1, 1);
    check_xent(&x, 7, 500, 512);
    check_xent(&x, 9, 100, 100);
    check_xent(&x, 3, 1000, 1031);
    check_optim(&x, 1, 1);
    check_optim(&x, 4099, 7);
    gpu_check_adamw_segs(&x, tiny);
    gpu_check_off(&x);
    if (x.cuda) check_gemm_lo(&x, 37, 61, 83);
    if (!tiny) {
        if (x.cuda) check_gemm_lo(&x, 129, 257, 768);
        check_embed(&x, 2, 64, 768, 50257, 50304);
        check_layernorm(&x, 300, 768);
        check_layernorm(&x, 1029, 1000);
        check_layernorm(&x, 33, 6200);   /* the backward's shared-memory opt-in (> 48 KiB) */
        gpu_check_resln(&x, 300, 768);
        gpu_check_resln(&x, 1029, 1000);
        check_matmul(&x, 130, 768, 2304, 1);
        check_matmul(&x, 257, 3072, 768, 1);
        check_matmul(&x, 33, 96, 50304, 0);
        check_matmul(&x, 1025, 65, 127, 1);
        check_attention(&x, 2, 64, 128, 4);
        check_attention(&x, 2, 129, 192, 6);
        check_attention(&x, 1, 300, 72, 2);
        check_xent(&x, 33, 50257, 50304);
        check_optim(&x, 1000003, 1);
    }
    gpu_check_xfer(&x);
    gpu_check_xfer_streams(&x, tiny);
    gpu_check_lo(&x, tiny);
    gpu_check_ops_lo(&x, tiny);
    gpu_check_gelu_lo(&x, tiny);
    gpu_check_attention_lse(&x, tiny);
    gpu_check_device_stats(&x, tiny);
    gpu_check_infer(&x.g, x.rng, tiny, row_infer, &x);
    gpu_check_graph(&x);
    gpu_check_argmax(&x, tiny);
    gpu_check_rec(&x);

done:;
    char msg[256];
    if (x.cuda && llm_backend_cuda_status(&x.g, msg, sizeof msg)) {
        x.fails++;
        printf("cuda error: %s\n", msg);
    }
    char tail[128];
    snprintf(tail, sizeof tail, "gpu_check: %d checks, %d passed, %d failed\n", x.rows,
             x.rows - x.fails, x.fails);
    fputs(tail, stdout);
    if (x.out) fputs(tail, x.out);
    if (bench && x.cuda) {
        bench_gemm(&x);
        bench_ops(&x, bench_b);
    }
    if (x.out) fclose(x.out);
#ifdef LLM_HAVE_CPU_REF
    if (x.have_ref) llm_backend_cpu_free(&x.r);
#endif
    if (x.cuda) llm_backend_cuda_free(&x.g);
    else llm_backend_free(&x.g);
    return x.fails ? 1 : 0;
}
