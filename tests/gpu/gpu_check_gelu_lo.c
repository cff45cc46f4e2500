/* gpu_check_gelu_lo.c — gpu_check's rows for the fused GELU GEMMs of mixed precision
 * (matmul_forward_gelu_lo, matmul_backward_dgelu_lo; backend.h).
 *
 * Against double precision on the lo operands (ref64) and the cpu-ref backend's fused
 * ops: pre (the rounded pre-activation) and dw, dbias as the plain lo GEMMs (B_LO plus
 * one rounding); out = lo(gelu(sum)) and dinp = lo(gelu'(pre) sum) with K_GELU roundings
 * allowed instead of one: cuBLASLt's epilogue evaluates the GELU (tanh form) its own way
 * (possibly with an approximate tanh, relative error near 2^-11, about one fp16 ulp),
 * and the emulator's epilogue (tanh as written) differs from the backend's sigmoid form
 * by fp32 roundings too.  Shapes with rows that are not multiples of 8 take the
 * fallback (GEMM into fp32 scratch, then the GELU kernel); those that are take the
 * epilogue.  On cuda also: the fallback forced (cublasGemmEx) equals, bit for bit, the
 * composition of the backend's own plain ops (matmul_forward_lo / matmul_backward_lo
 * with fp32 outputs, gelu_forward / gelu_backward, cast_lo): the GELU of the fp32 sum,
 * not of the rounded pre-activation; GPT-2's shapes must run on the epilogue (a
 * fallback there is right but slow, and fails the "gelu epilogue on cuBLASLt" row);
 * the backward again gives the same bits. */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/ckpt.h"
#include "common/quant.h"
#include "kernels/backend.h"
#include "kernels/cuda/cuda_backend.h"
#include "kernels/cuda/cuda_ext.h"
#include "tests/gpu/gpu_check.h"
#include "tests/gpu/ref64.h"

#define B_LO 2e-5   /* as gpu_check_lo.c: fp32 accumulation of exact lo products */
#define K_GELU 3    /* roundings allowed on out and dinp (see the top of the file) */

static const char *lname(int lo) { return lo == LLM_DT_BF16 ? "bf16" : "f16"; }

/* a device lo tensor of n NaNs (the ops overwrite) */
static void *gnan_lo(gc *x, size_t n)
{
    uint16_t *h = xmalloc((n ? n : 1) * 2);
    memset(h, 0xff, (n ? n : 1) * 2);
    void *d = gput(x, h, (n ? n : 1) * 2);
    free(h);
    return d;
}

/* one row: a against ref with k roundings allowed, and against cpu-ref's c (k + 1) */
static void row_k(gc *x, const char *op, const char *sh, const float *a, const double *ref,
                  const float *c, size_t n, int lo, double k)
{
    double eg = err_lo(a, ref, n, lo, k), egr = -1, er = -1;
    if (c && x->have_ref) {
        double *cr = dcopy(c, n);
        egr = err_lo(a, cr, n, lo, k + 1);
        er = err_lo(c, ref, n, lo, 1);
        free(cr);
    }
    row_result(x, op, sh, eg, egr, er, B_LO, eg <= B_LO && (egr < 0 || egr <= 2 * B_LO));
}

/* Forward at (N, C, OC): out and pre against the references; when bits, against the
 * composition of the backend's plain ops, bit for bit (the forced fallback).  check 0:
 * run only (the path rows). */
static void check_fwd(gc *x, int N, int C, int OC, int with_bias, int lo, int check, int bits,
                      const char *tag)
{
    char sh[64], op[80];
    snprintf(sh, sizeof sh, "N%d C%d OC%d%s", N, C, OC, with_bias ? " +b" : "");
    size_t ni = (size_t)N * C, nw = (size_t)OC * C, no = (size_t)N * OC;
    float *inp = rnd(x, ni, -1, 1), *w = rnd(x, nw, -1, 1), *bias = rnd(x, OC, -1, 1);
    float *xr = lo_vals(inp, ni, lo), *wr = lo_vals(w, nw, lo), *br = lo_vals(bias, OC, lo);
    void *gx = glo_put(x, inp, ni, lo), *gw = glo_put(x, w, nw, lo);
    void *gb = glo_put(x, bias, OC, lo);
    void *go = gnan_lo(x, no), *gp = gnan_lo(x, no);
    x->g.matmul_forward_gelu_lo(&x->g, go, gp, gx, gw, lo, with_bias ? gb : NULL, N, C, OC);
    if (check) {
        float *out = glo_get(x, go, no, lo), *pre = glo_get(x, gp, no, lo);
        double *s = xmalloc(no * 8 + 8), *g = xmalloc(no * 8 + 8);
        r64_matmul_forward(s, xr, wr, with_bias ? br : NULL, N, C, OC);
        for (size_t i = 0; i < no; i++) g[i] = r64_gelu1(s[i]);
        float *cp = NULL, *co = NULL;
        if (x->have_ref && x->r.matmul_forward_gelu_lo) {
            uint16_t *hx = lo_host(inp, ni, lo), *hw = lo_host(w, nw, lo), *hb = lo_host(bias, OC, lo);
            uint16_t *hp = xmalloc(no * 2 + 2), *ho = xmalloc(no * 2 + 2);
            x->r.matmul_forward_gelu_lo(&x->r, ho, hp, hx, hw, lo, with_bias ? hb : NULL, N, C, OC);
            cp = host_vals(hp, no, lo);
            co = host_vals(ho, no, lo);
            free(hx); free(hw); free(hb); free(hp); free(ho);
        }
        snprintf(op, sizeof op, "mm_gelu_fwd_lo %s pre%s", lname(lo), tag);
        row_k(x, op, sh, pre, s, cp, no, lo, 1);
        snprintf(op, sizeof op, "mm_gelu_fwd_lo %s out%s", lname(lo), tag);
        row_k(x, op, sh, out, g, co, no, lo, K_GELU);
        free(out); free(pre); free(s); free(g); free(cp); free(co);
    }
    if (bits) {
        /* the composition: fp32 sum + the lo bias' values, cast_lo; gelu_forward, cast_lo */
        float *gbf = gput(x, br, OC * 4), *gs = gpoison(x, no);
        x->g.matmul_forward_lo(&x->g, gs, LLM_DT_F32, gx, gw, lo, with_bias ? gbf : NULL, N, C, OC);
        void *wp = gnan_lo(x, no), *wo = gnan_lo(x, no);
        x->g.cast_lo(&x->g, wp, gs, no, lo);
        x->g.gelu_forward(&x->g, gs, gs, no);
        x->g.cast_lo(&x->g, wo, gs, no, lo);
        size_t b2 = no * 2;
        uint16_t *a1 = xmalloc(b2 + 2), *a2 = xmalloc(b2 + 2), *b1 = xmalloc(b2 + 2),
                 *bb = xmalloc(b2 + 2);
        x->g.to_host(&x->g, a1, gp, b2);
        x->g.to_host(&x->g, a2, go, b2);
        x->g.to_host(&x->g, b1, wp, b2);
        x->g.to_host(&x->g, bb, wo, b2);
        int same = memcmp(a1, b1, b2) == 0 && memcmp(a2, bb, b2) == 0;
        snprintf(op, sizeof op, "mm_gelu_fwd_lo %s%s bits", lname(lo), tag);
        row_check(x, op, sh, same ? 0.0 : 1.0, 0.0, same);
        free(a1); free(a2); free(b1); free(bb);
        void *bufs[] = {gbf, gs, wp, wo};
        for (size_t i = 0; i < sizeof bufs / sizeof *bufs; i++) x->g.free(&x->g, bufs[i]);
    }
    free(inp); free(w); free(bias); free(xr); free(wr); free(br);
    void *bufs[] = {gx, gw, gb, go, gp};
    for (size_t i = 0; i < sizeof bufs / sizeof *bufs; i++) x->g.free(&x->g, bufs[i]);
}

/* Backward at c_proj's (N, C, OC): dinp (N,C) lo, dw (OC,C) and dbias (OC) accumulated
 * from random values; then again from the same state for the same bits.  check, bits
 * and tag as check_fwd. */
static void check_bwd(gc *x, int N, int C, int OC, int with_bias, int lo, int check, int bits,
                      const char *tag)
{
    char sh[64], op[80];
    snprintf(sh, sizeof sh, "N%d C%d OC%d%s", N, C, OC, with_bias ? " +b" : "");
    size_t ni = (size_t)N * C, nw = (size_t)OC * C, no = (size_t)N * OC;
    float *dout = rnd(x, no, -1, 1), *inp = rnd(x, ni, -1, 1), *pre = rnd(x, ni, -4, 4),
          *w = rnd(x, nw, -1, 1), *dw0 = rnd(x, nw, -1, 1), *db0 = rnd(x, OC, -1, 1);
    float *dr = lo_vals(dout, no, lo), *xr = lo_vals(inp, ni, lo), *pr = lo_vals(pre, ni, lo),
          *wr = lo_vals(w, nw, lo);
    void *gd = glo_put(x, dout, no, lo), *gx = glo_put(x, inp, ni, lo),
         *gp = glo_put(x, pre, ni, lo), *gw = glo_put(x, w, nw, lo), *gdi = gnan_lo(x, ni);
    float *gdw = gput(x, dw0, nw * 4), *gdb = gput(x, db0, OC * 4);
    x->g.matmul_backward_dgelu_lo(&x->g, gdi, gdw, with_bias ? gdb : NULL, gd, gx, gp, gw, lo,
                                  N, C, OC);
    float *di = glo_get(x, gdi, ni, lo), *dw = gget(x, gdw, nw), *db = gget(x, gdb, OC);
    if (check) {
        double *rdi = xmalloc(ni * 8 + 8), *rdw = dcopy(dw0, nw), *rdb = dcopy(db0, OC);
        memset(rdi, 0, ni * 8);
        r64_matmul_backward(rdi, rdw, with_bias ? rdb : NULL, dr, xr, wr, N, C, OC);
        for (size_t i = 0; i < ni; i++) rdi[i] *= r64_gelu_grad1(pr[i]);
        float *cdi = NULL, *cdw = NULL, *cdb = NULL;
        if (x->have_ref && x->r.matmul_backward_dgelu_lo) {
            uint16_t *hd = lo_host(dout, no, lo), *hx = lo_host(inp, ni, lo), *hp = lo_host(pre, ni, lo),
                     *hw = lo_host(w, nw, lo), *hdi = xmalloc(ni * 2 + 2);
            cdw = fdup(dw0, nw);
            cdb = fdup(db0, OC);
            x->r.matmul_backward_dgelu_lo(&x->r, hdi, cdw, with_bias ? cdb : NULL, hd, hx, hp, hw,
                                          lo, N, C, OC);
            cdi = host_vals(hdi, ni, lo);
            free(hd); free(hx); free(hp); free(hw); free(hdi);
        }
        snprintf(op, sizeof op, "mm_dgelu_bwd_lo %s dinp%s", lname(lo), tag);
        row_k(x, op, sh, di, rdi, cdi, ni, lo, K_GELU);
        snprintf(op, sizeof op, "mm_dgelu_bwd_lo %s dw%s", lname(lo), tag);
        row(x, op, sh, dw, rdw, cdw, nw, B_LO);
        if (with_bias) {
            snprintf(op, sizeof op, "mm_dgelu_bwd_lo %s dbias%s", lname(lo), tag);
            row(x, op, sh, db, rdb, cdb, OC, B_LO);
        }
        free(rdi); free(rdw); free(rdb); free(cdi); free(cdw); free(cdb);
    }
    if (bits) {
        /* the composition: matmul_backward_lo's fp32 dinp, gelu_backward into -0, cast_lo */
        float *gs = gpoison(x, ni), *gdw2 = gput(x, dw0, nw * 4), *gdb2 = gput(x, db0, OC * 4);
        x->g.matmul_backward_lo(&x->g, gs, LLM_DT_F32, gdw2, with_bias ? gdb2 : NULL, gd, gx, gw,
                                lo, N, C, OC);
        float *mz = xmalloc(ni * 4 + 4);
        for (size_t i = 0; i < ni; i++) mz[i] = -0.0f;
        float *gt = gput(x, mz, ni * 4), *gpf = gput(x, pr, ni * 4);
        x->g.gelu_backward(&x->g, gt, gpf, gs, ni);
        void *wd = gnan_lo(x, ni);
        x->g.cast_lo(&x->g, wd, gt, ni, lo);
        float *want = glo_get(x, wd, ni, lo), *dw2 = gget(x, gdw2, nw), *db2 = gget(x, gdb2, OC);
        int same = memcmp(want, di, ni * 4) == 0 && memcmp(dw2, dw, nw * 4) == 0 &&
                   memcmp(db2, db, OC * 4) == 0;
        snprintf(op, sizeof op, "mm_dgelu_bwd_lo %s%s bits", lname(lo), tag);
        row_check(x, op, sh, same ? 0.0 : 1.0, 0.0, same);
        free(mz); free(want); free(dw2); free(db2);
        void *bufs[] = {gs, gdw2, gdb2, gt, gpf, wd};
        for (size_t i = 0; i < sizeof bufs / sizeof *bufs; i++) x->g.free(&x->g, bufs[i]);
    }
    if (check) {
        /* the same backward again from the same state: bit-identical */
        x->g.to_device(&x->g, gdw, dw0, nw * 4);
        x->g.to_device(&x->g, gdb, db0, OC * 4);
        x->g.matmul_backward_dgelu_lo(&x->g, gdi, gdw, with_bias ? gdb : NULL, gd, gx, gp, gw,
                                      lo, N, C, OC);
        float *di2 = glo_get(x, gdi, ni, lo), *dw2 = gget(x, gdw, nw), *db2 = gget(x, gdb, OC);
        int same = memcmp(di, di2, ni * 4) == 0 && memcmp(dw, dw2, nw * 4) == 0 &&
                   memcmp(db, db2, OC * 4) == 0;
        snprintf(op, sizeof op, "mm_dgelu_bwd_lo %s%s determ.", lname(lo), tag);
        row_check(x, op, sh, same ? 0.0 : 1.0, 0.0, same);
        free(di2); free(dw2); free(db2);
    }
    free(dout); free(inp); free(pre); free(w); free(dw0); free(db0); free(dr); free(xr);
    free(pr); free(wr); free(di); free(dw); free(db);
    void *bufs[] = {gd, gx, gp, gw, gdi, gdw, gdb};
    for (size_t i = 0; i < sizeof bufs / sizeof *bufs; i++) x->g.free(&x->g, bufs[i]);
}

/* forward and backward at one shape: c_fc (N, C -> OC), c_proj's backward (OC -> C) */
static void check_shape(gc *x, int N, int C, int OC, int with_bias, int lo, int check, int bits,
                        const char *tag)
{
    check_fwd(x, N, C, OC, with_bias, lo, check, bits, tag);
    check_bwd(x, N, OC, C, with_bias, lo, check, bits, tag);
}

void gpu_check_gelu_lo(gc *x, int tiny)
{
    if (!x->g.matmul_forward_gelu_lo || !x->g.matmul_backward_dgelu_lo) {
        if (x->cuda) row_check(x, "backend has fused GELU GEMMs", x->g.name, 1, 0, 0);
        else printf("gpu_check: backend '%s' has no fused GELU GEMMs: skipped\n", x->g.name);
        return;
    }
    const int los[] = {LLM_DT_BF16, LLM_DT_F16};
    for (int i = 0; i < 2; i++) {
        int lo = los[i];
        check_shape(x, 1, 1, 1, 1, lo, 1, 0, "");
        check_shape(x, 5, 7, 3, 0, lo, 1, 0, "");       /* rows not multiples of 8 */
        check_shape(x, 37, 61, 83, 1, lo, 1, 0, "");
        check_shape(x, 33, 48, 64, 1, lo, 1, 0, "");    /* multiples of 8: the epilogue */
        check_shape(x, 19, 24, 40, 0, lo, 1, 0, "");
        if (!tiny) {
            check_shape(x, 1025, 65, 127, 1, lo, 1, 0, "");
            check_shape(x, 256, 768, 3072, 1, lo, 1, 0, " gpt2");
        }
    }
    if (!x->cuda) return;
    /* GPT-2's c_fc forward and c_proj backward (bf16 and fp16) must use the epilogue */
    long r0[2], r1[2];
    llm_backend_cuda_gelu_epi_path(&x->g, r0);
    for (int i = 0; i < 2; i++) check_shape(x, 256, 768, 3072, 1, los[i], 0, 0, "");
    llm_backend_cuda_gelu_epi_path(&x->g, r1);
    char sh[64];
    snprintf(sh, sizeof sh, "epilogue %ld fallback %ld", r1[0] - r0[0], r1[1] - r0[1]);
    row_check(x, "gelu epilogue on cuBLASLt", sh, (double)(r1[1] - r0[1]), 0,
              r1[1] == r0[1] && r1[0] - r0[0] == 4);
    /* the fallback: taken for rows that are not multiples of 8, and forced (cublasGemmEx)
     * it is the composition of the plain ops, bit for bit */
    long f0[2], f1[2], l0[2], l1[2];
    llm_backend_cuda_gelu_epi_path(&x->g, f0);
    check_shape(x, 5, 7, 3, 1, LLM_DT_BF16, 0, 0, "");
    llm_backend_cuda_gelu_epi_path(&x->g, f1);
    llm_backend_cuda_lo_gemm_path(&x->g, 1, l0);
    for (int i = 0; i < 2; i++) {
        check_shape(x, 37, 61, 83, 1, los[i], 1, 1, " ex");
        check_shape(x, 33, 48, 64, 0, los[i], 1, 1, " ex");
    }
    llm_backend_cuda_lo_gemm_path(&x->g, 0, l1);
    long g2[2];
    llm_backend_cuda_gelu_epi_path(&x->g, g2);
    snprintf(sh, sizeof sh, "row%%8: fb %ld; forced: fb %ld ep %ld", f1[1] - f0[1],
             g2[1] - f1[1], g2[0] - f1[0]);
    row_check(x, "gelu fallback paths ran", sh, (double)(g2[0] - f1[0]), 0,
              f1[1] - f0[1] == 2 && f1[0] == f0[0] && g2[1] - f1[1] == 12 && g2[0] == f1[0] &&
                  l1[0] == l0[0]);
}
