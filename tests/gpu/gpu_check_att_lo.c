/* gpu_check_att_lo.c — gpu_check's rows for the lo attention: attention_forward_lse /
 * attention_backward_lse (q|k|v, dout, out lo; lse fp32; dqkv lo and overwritten).
 *
 * The reference is double precision on the lo operands (ref64: r64_attention_lse_*):
 * lse; out = sum lo(exp(S - lse)) v; the backward from that lse and out (as the lo
 * tensor given to both).  Each lo output is compared with the unrounded double sum less
 * one rounding's allowance (r64_scaled_err_lo), then bounded as r64_lse_bounds says:
 * roundings of the terms may flip (2u of sum |terms|), fp32 sums add little; lse (1e-5)
 * catches unrounded q or k.  dqkv starts as NaN: every element must be written.  On cuda
 * the fused kernels (cuda_flash.cu: the mma.sync ones, then the WMMA ones) and the
 * batched-GEMM form (forced) run, and a
 * qkv one element off 16-byte alignment (the fused kernels' 16-byte loads cannot take
 * it) falls back to the GEMM form. */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/quant.h"
#include "kernels/backend.h"
#include "kernels/cuda/cuda_ext.h"
#include "tests/gpu/gpu_check.h"
#include "tests/gpu/ref64.h"

static double rl(float v, int lo)
{
    return lo == LLM_DT_BF16 ? llm_quant_bf16_to_f32(llm_quant_f32_to_bf16(v))
                             : llm_quant_f16_to_f32(llm_quant_f32_to_f16(v));
}

/* ---- attention_forward_lse / attention_backward_lse ---- */
static void lse_row(gc *x, const char *op, const char *sh, const float *a, const double *r,
                    const double *s, size_t n, int lo, int fused)
{
    double mx, mean, bmax, bmean;
    r64_scaled_err_lo(a, r, s, n, lo, &mx, &mean);
    r64_lse_bounds(lo, fused, n, &bmax, &bmean);
    char o2[80];
    snprintf(o2, sizeof o2, "%s max", op);
    row_check(x, o2, sh, mx, bmax, mx <= bmax);
    snprintf(o2, sizeof o2, "%s mean", op);
    row_check(x, o2, sh, mean, bmean, mean <= bmean);
}

/* a device lo tensor of a's values (already lo) after off elements; *at the tensor */
static uint16_t *gput_lo_off(gc *x, const float *a, size_t n, int lo, size_t off, void **at)
{
    uint16_t *h = xmalloc((n + off) * 2 + 2);
    memset(h, 0, off * 2);
    for (size_t i = 0; i < n; i++)
        h[off + i] = lo == LLM_DT_BF16 ? llm_quant_f32_to_bf16(a[i]) : llm_quant_f32_to_f16(a[i]);
    uint16_t *d = gput(x, h, (n + off) * 2);
    free(h);
    *at = d + off;
    return d;
}

/* n lo elements, all bits set (NaN) */
static void *gnan_lo(gc *x, size_t n)
{
    uint16_t *h = xmalloc(n * 2 + 2);
    memset(h, 0xff, n * 2 + 2);
    void *d = gput(x, h, n * 2 + 2);
    free(h);
    return d;
}

static void check_att_lse(gc *x, int B, int T, int C, int NH, int lo, int misalign,
                          const char *tag)
{
    char sh[64], op[64];
    const char *ln = lo == LLM_DT_BF16 ? "bf16" : "f16";
    snprintf(sh, sizeof sh, "B%d T%d C%d NH%d%s", B, T, C, NH, misalign ? " unal" : "");
    size_t C3 = 3 * (size_t)C, nq = (size_t)B * T * C3, no = (size_t)B * T * C,
           nl = (size_t)B * NH * T, off = misalign ? 1 : 0;
    float *qkv = rnd(x, nq, -2, 2), *qr = xmalloc(nq * 4), *dout = rnd(x, no, -1, 1);
    float *dr = xmalloc(no * 4), *L = xmalloc(nl * 4), *O = xmalloc(no * 4);
    for (size_t i = 0; i < nq; i++) qr[i] = (float)rl(qkv[i], lo);
    for (size_t i = 0; i < no; i++) dr[i] = (float)rl(dout[i], lo);
    double *y = xmalloc(no * 8), *ys = xmalloc(no * 8), *lr = xmalloc(nl * 8);
    r64_attention_lse_forward(y, ys, lr, qr, B, T, C, NH, lo);
    for (size_t i = 0; i < nl; i++) L[i] = (float)lr[i];
    for (size_t i = 0; i < no; i++) O[i] = (float)rl((float)y[i], lo);   /* a lo out */
    void *gq, *gd, *gO;
    uint16_t *gqb = gput_lo_off(x, qr, nq, lo, off, &gq);
    void *gout = gnan_lo(x, no);
    float *glse = gpoison(x, nl);
    x->g.attention_forward_lse(&x->g, gout, glse, gq, B, T, C, NH, lo);
    float *out = glo_get(x, gout, no, lo), *lse = gget(x, glse, nl);
    double el = 0;
    for (size_t i = 0; i < nl; i++) {
        double e = isfinite(lse[i]) ? fabs(lse[i] - lr[i]) / (1 + fabs(lr[i])) : INFINITY;
        if (!(e <= el)) el = e;
    }
    snprintf(op, sizeof op, "lse_fwd %s%s lse", ln, tag);
    row_check(x, op, sh, el, 1e-5, el <= 1e-5);
    snprintf(op, sizeof op, "lse_fwd %s%s out", ln, tag);
    /* the fused kernel may have run unless the batched-GEMM form was forced */
    lse_row(x, op, sh, out, y, ys, no, lo, x->cuda && strcmp(tag, " gemm") != 0);

    /* backward from the reference's lse and (lo) out; dqkv overwritten */
    double *r = xmalloc(nq * 8), *rs = xmalloc(nq * 8);
    memset(r, 0, nq * 8);
    memset(rs, 0, nq * 8);
    r64_attention_lse_backward(r, rs, qr, dr, O, L, B, T, C, NH, lo);
    uint16_t *gdb = gput_lo_off(x, dr, no, lo, off, &gd);
    uint16_t *gOb = gput_lo_off(x, O, no, lo, 0, &gO);
    float *gL = gput(x, L, nl * 4);
    void *gdq = gnan_lo(x, nq);
    x->g.attention_backward_lse(&x->g, gdq, gd, gq, gO, gL, B, T, C, NH, lo);
    float *dq = glo_get(x, gdq, nq, lo);
    snprintf(op, sizeof op, "lse_bwd %s%s dqkv", ln, tag);
    lse_row(x, op, sh, dq, r, rs, nq, lo, 0);
    /* again into the previous result: overwritten, the same bits */
    x->g.attention_backward_lse(&x->g, gdq, gd, gq, gO, gL, B, T, C, NH, lo);
    float *dq2 = glo_get(x, gdq, nq, lo);
    snprintf(op, sizeof op, "lse_bwd %s%s rerun", ln, tag);
    int same = memcmp(dq, dq2, nq * 4) == 0;
    row_check(x, op, sh, same ? 0 : 1, 0, same);
    free(qkv); free(qr); free(dout); free(dr); free(L); free(O); free(y); free(ys); free(lr);
    free(out); free(lse); free(r); free(rs); free(dq); free(dq2);
    void *bufs[] = {gqb, gout, glse, gdb, gOb, gL, gdq};
    for (size_t i = 0; i < sizeof bufs / sizeof *bufs; i++) x->g.free(&x->g, bufs[i]);
}

static void check_lse_all(gc *x, int tiny, const char *tag)
{
    for (int k = 0; k < 2; k++) {
        int lo = k ? LLM_DT_F16 : LLM_DT_BF16;
        check_att_lse(x, 1, 1, 4, 1, lo, 0, tag);
        check_att_lse(x, 2, 7, 12, 3, lo, 0, tag);      /* head size 4: never fused */
        check_att_lse(x, 1, 1, 64, 1, lo, 0, tag);
        check_att_lse(x, 2, 67, 128, 2, lo, 0, tag);    /* partial tiles */
        check_att_lse(x, 2, 67, 128, 2, lo, 1, tag);    /* misaligned: the GEMM form */
        check_att_lse(x, 1, 129, 96, 3, lo, 0, tag);    /* head size 32 */
        check_att_lse(x, 1, 130, 256, 2, lo, 0, tag);   /* head size 128 */
        if (!tiny) {
            check_att_lse(x, 3, 256, 768, 12, lo, 0, tag);
            if (!k) check_att_lse(x, 1, 1024, 768, 12, lo, 0, tag);
        }
    }
}

/* The mma.sync kernels' building blocks on one 64 x 16 tile (llm_backend_cuda_mma_check):
 * s = q k^T (fp32 sums of 16 exact products: 1e-6 of the sum of |terms|) and o = lo(s) v
 * against double sums of the same lo values (one lo rounding of o, and fp32 sums) */
static void check_mma_layout(gc *x, int lo)
{
    const char *ln = lo == LLM_DT_BF16 ? "bf16" : "f16";
    enum { R = 64, W = 16 };
    float *q = rnd(x, R * W, -1, 1), *k = rnd(x, R * W, -1, 1), *v = rnd(x, R * W, -1, 1);
    for (int i = 0; i < R * W; i++) {
        q[i] = (float)rl(q[i], lo);
        k[i] = (float)rl(k[i], lo);
        v[i] = (float)rl(v[i], lo);
    }
    void *gq, *gk, *gv;
    uint16_t *bq = gput_lo_off(x, q, R * W, lo, 0, &gq), *bk = gput_lo_off(x, k, R * W, lo, 0, &gk);
    uint16_t *bv = gput_lo_off(x, v, R * W, lo, 0, &gv);
    float *gs = gpoison(x, R * R);
    void *go = gnan_lo(x, R * W);
    int rc = llm_backend_cuda_mma_check(&x->g, lo, gq, gk, gv, gs, go);
    float *sv = gget(x, gs, R * R), *ov = glo_get(x, go, R * W, lo);
    double es = rc ? INFINITY : 0, eo = rc ? INFINITY : 0;
    for (int i = 0; i < R && !rc; i++) {
        for (int j = 0; j < R; j++) {
            double r = 0, a = 0;
            for (int c = 0; c < W; c++) {
                r += (double)q[i * W + c] * k[j * W + c];
                a += fabs((double)q[i * W + c] * k[j * W + c]);
            }
            double e = isfinite(sv[i * R + j]) ? fabs(sv[i * R + j] - r) / (a + 1e-30) : INFINITY;
            if (!(e <= es)) es = e;
        }
        for (int c = 0; c < W; c++) {
            double r = 0, a = 0;
            for (int j = 0; j < R; j++) {
                double p = rl(sv[i * R + j], lo) * v[j * W + c];
                r += p;
                a += fabs(p);
            }
            double e = isfinite(ov[i * W + c]) ? fabs(ov[i * W + c] - r) / (a + 1e-30) : INFINITY;
            if (!(e <= eo)) eo = e;
        }
    }
    double bo = (lo == LLM_DT_BF16 ? 1.0 / 256 : 1.0 / 2048) + 1e-5;
    char op[64];
    snprintf(op, sizeof op, "mma layout %s s=qk^T", ln);
    /* a wrong layout errs by O(1); tensor cores align and truncate their products
     * (about 1e-7 of sum |terms| modelled), so 1e-5 leaves room without hiding one */
    row_check(x, op, "64x16 tile", es, 1e-5, es <= 1e-5);
    snprintf(op, sizeof op, "mma layout %s o=lo(s)v", ln);
    row_check(x, op, "64x16 tile", eo, bo, eo <= bo);
    free(q); free(k); free(v); free(sv); free(ov);
    void *bufs[] = {bq, bk, bv, gs, go};
    for (size_t i = 0; i < sizeof bufs / sizeof *bufs; i++) x->g.free(&x->g, bufs[i]);
}

void gpu_check_attention_lse(gc *x, int tiny)
{
    if (!x->g.attention_forward_lse || !x->g.attention_backward_lse) {
        if (x->cuda) row_check(x, "backend has attention lse ops", x->g.name, 1, 0, 0);
        else printf("gpu_check: backend '%s' has no attention lse ops: skipped\n", x->g.name);
        return;
    }
    if (!x->cuda) {
        check_lse_all(x, tiny, "");
        return;
    }
    check_mma_layout(x, LLM_DT_BF16);
    check_mma_layout(x, LLM_DT_F16);
    /* the fused mma.sync kernels where the head size allows, the WMMA ones, then the
     * batched-GEMM form forced */
    long r0[2], r1[2], r2[2], r3[2];
    llm_backend_cuda_flash_path(&x->g, 0, r0);
    check_lse_all(x, tiny, "");
    llm_backend_cuda_flash_path(&x->g, 2, r1);
    check_lse_all(x, tiny, " wmma");
    llm_backend_cuda_flash_path(&x->g, 1, r2);
    check_lse_all(x, tiny, " gemm");
    llm_backend_cuda_flash_path(&x->g, 0, r3);
    char sh[64];
    snprintf(sh, sizeof sh, "fused %ld wmma %ld gemm %ld", r1[0] - r0[0], r2[0] - r1[0],
             r3[1] - r2[1]);
    /* fused calls in the first two rounds, none in the forced one (whose GEMM calls are
     * all of its checks: 3 per shape) */
    row_check(x, "attention lse paths ran", sh, (double)(r1[0] - r0[0]), 1,
              r1[0] > r0[0] && r2[0] > r1[0] && r3[0] == r2[0] && r3[1] > r2[1]);
}
