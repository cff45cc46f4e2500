/* gpu_check_att_lo.c — gpu_check's rows for attention_forward_lo / attention_backward_lo.
 *
 * The reference is computed here in double on the lo-rounded operands, in the form that
 * leaves no rounding to chance:
 *   - att: the double softmax of scale * lo(q).lo(k) (r64 on the rounded qkv), max
 *     relative error as every row (B_RED), the cpu-ref lo op beside it;
 *   - out = sum lo(att) lo(v) from the probabilities the backend itself stored, so the
 *     rounding of each probability is the same on both sides: max |error| over
 *     sum |terms| within B_LO (fp32 accumulation only);
 *   - the backward from one fp32 att given to it: dv likewise exact in its roundings
 *     (B_LO); dq, dk sum lo(dS) terms, dS rounded from an fp32 value that may differ from
 *     the double one in its last bits, so a rounding may go the other way: one lo
 *     spacing per term at most (2u: u = 2^-8 bf16, 2^-11 f16, the unit roundoff) of
 *     sum |terms|, plus B_LO.  (One u was the bound until the emulated run of tests/emu
 *     drew a seed that missed it by 13%: a flip costs the whole spacing.)
 * Unrounded operands or probabilities would miss out/dv by ~1e-3 (one bf16 rounding).
 * attention_forward_lse / attention_backward_lse: see check_att_lse below; on cuda both
 * the fused kernels (cuda_flash.cu) and the batched-GEMM form (forced). */
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

#define B_LO_ATT 2e-5

static double rl(float v, int lo)
{
    return lo == LLM_DT_BF16 ? llm_quant_bf16_to_f32(llm_quant_f32_to_bf16(v))
                             : llm_quant_f16_to_f32(llm_quant_f32_to_f16(v));
}

/* max over i of |a[i] - r[i]| / s[i] (non-finite a: infinite) */
static double scaled(const float *a, const double *r, const double *s, size_t n)
{
    double e = 0;
    for (size_t i = 0; i < n; i++) {
        if (!isfinite(a[i])) return INFINITY;
        double d = fabs(a[i] - r[i]) / (s[i] > 1e-30 ? s[i] : 1e-30);
        if (d > e) e = d;
    }
    return e;
}

static void check_att_lo(gc *x, int B, int T, int C, int NH, int lo)
{
    char sh[64], op[64];
    const char *ln = lo == LLM_DT_BF16 ? "bf16" : "f16";
    snprintf(sh, sizeof sh, "B%d T%d C%d NH%d", B, T, C, NH);
    int hs = C / NH;
    size_t C3 = 3 * (size_t)C, nq = (size_t)B * T * C3, no = (size_t)B * T * C,
           na = (size_t)B * NH * T * T;
    double scale = 1.0 / sqrt((double)hs);
    float *qkv = rnd(x, nq, -2, 2), *qr = xmalloc(nq * 4);
    for (size_t i = 0; i < nq; i++) qr[i] = (float)rl(qkv[i], lo);
    float *gq = gput(x, qkv, nq * 4), *gout = gpoison(x, no), *gatt = gpoison(x, na);
    x->g.attention_forward_lo(&x->g, gout, gatt, gq, B, T, C, NH, lo);
    float *out = gget(x, gout, no), *att = gget(x, gatt, na);
    double *ro = xmalloc(no * 8), *ra = xmalloc(na * 8);
    r64_attention_forward(ro, ra, qr, B, T, C, NH);
    float *co = NULL, *ca = NULL;
    if (x->have_ref && x->r.attention_forward_lo) {
        co = xmalloc(no * 4); ca = xmalloc(na * 4);
        x->r.attention_forward_lo(&x->r, co, ca, qkv, B, T, C, NH, lo);
    }
    snprintf(op, sizeof op, "attention_fwd_lo %s att", ln);
    row(x, op, sh, att, ra, ca, na, B_RED);
    /* out from the backend's own probabilities */
    double *ys = xmalloc(no * 8);
    memset(ro, 0, no * 8);
    memset(ys, 0, no * 8);
    for (int b = 0; b < B; b++)
        for (int h = 0; h < NH; h++)
            for (int t = 0; t < T; t++)
                for (int s = 0; s <= t; s++) {
                    double p = rl(att[(((size_t)b * NH + h) * T + t) * T + s], lo);
                    for (int i = 0; i < hs; i++) {
                        double v = qr[((size_t)b * T + s) * C3 + 2 * (size_t)C + (size_t)h * hs + i];
                        size_t o = ((size_t)b * T + t) * C + (size_t)h * hs + i;
                        ro[o] += p * v;
                        ys[o] += fabs(p * v);
                    }
                }
    double e = scaled(out, ro, ys, no);
    snprintf(op, sizeof op, "attention_fwd_lo %s out", ln);
    row_check(x, op, sh, e, B_LO_ATT, e <= B_LO_ATT);

    /* backward from the backend's att */
    float *dout = rnd(x, no, -1, 1), *dq0 = rnd(x, nq, -1, 1);
    float *gd = gput(x, dout, no * 4), *gdq = gput(x, dq0, nq * 4);
    x->g.attention_backward_lo(&x->g, gdq, gd, gq, gatt, B, T, C, NH, lo);
    float *dq = gget(x, gdq, nq);
    double *r = dcopy(dq0, nq), *rs = xmalloc(nq * 8), *dp = xmalloc((size_t)T * 8);
    for (size_t i = 0; i < nq; i++) rs[i] = fabs(dq0[i]);
    for (int b = 0; b < B; b++)
        for (int h = 0; h < NH; h++)
            for (int t = 0; t < T; t++) {
                const float *p = att + (((size_t)b * NH + h) * T + t) * T;
                size_t qo = ((size_t)b * T + t) * C3 + (size_t)h * hs;
                size_t go = ((size_t)b * T + t) * C + (size_t)h * hs;
                double pdp = 0;
                for (int s = 0; s <= t; s++) {
                    size_t vo = ((size_t)b * T + s) * C3 + 2 * (size_t)C + (size_t)h * hs;
                    double d = 0, pl = rl(p[s], lo);
                    for (int i = 0; i < hs; i++) {
                        double g = rl(dout[go + i], lo);
                        d += g * qr[vo + i];
                        r[vo + i] += pl * g;
                        rs[vo + i] += fabs(pl * g);
                    }
                    dp[s] = d;
                    pdp += p[s] * d;
                }
                for (int s = 0; s <= t; s++) {
                    double ds = rl((float)(scale * p[s] * (dp[s] - pdp)), lo);
                    size_t ko = ((size_t)b * T + s) * C3 + (size_t)C + (size_t)h * hs;
                    for (int i = 0; i < hs; i++) {
                        r[qo + i] += ds * qr[ko + i];
                        rs[qo + i] += fabs(ds * qr[ko + i]);
                        r[ko + i] += ds * qr[qo + i];
                        rs[ko + i] += fabs(ds * qr[qo + i]);
                    }
                }
            }
    double edv = 0, edqk = 0;
    for (size_t i = 0; i < nq; i++) {
        double ei = scaled(dq + i, r + i, rs + i, 1);
        double *w = (i % C3) >= 2 * (size_t)C ? &edv : &edqk;
        if (!(ei <= *w)) *w = ei;
    }
    double bqk = 2 * (lo == LLM_DT_BF16 ? 0x1p-8 : 0x1p-11) + B_LO_ATT;
    snprintf(op, sizeof op, "attention_bwd_lo %s dv", ln);
    row_check(x, op, sh, edv, B_LO_ATT, edv <= B_LO_ATT);
    snprintf(op, sizeof op, "attention_bwd_lo %s dq,dk", ln);
    row_check(x, op, sh, edqk, bqk, edqk <= bqk);
    free(qkv); free(qr); free(out); free(att); free(ro); free(ra); free(co); free(ca); free(ys);
    free(dout); free(dq0); free(dq); free(r); free(rs); free(dp);
    void *bufs[] = {gq, gout, gatt, gd, gdq};
    for (size_t i = 0; i < sizeof bufs / sizeof *bufs; i++) x->g.free(&x->g, bufs[i]);
}

/* ---- attention_forward_lse / attention_backward_lse ----
 * Reference in double on the rounded operands: lse; out = sum lo(exp(S - lse)) lo(v); the
 * backward from that lse and out (as fp32, given to both).  Bounds: r64_lse_bounds
 * (ref64.h); lse (1e-5) catches unrounded q or k. */
static void lse_row(gc *x, const char *op, const char *sh, const float *a, const double *r,
                    const double *s, size_t n, int lo, int fused)
{
    double mx, mean, bmax, bmean;
    r64_scaled_err(a, r, s, n, &mx, &mean);
    r64_lse_bounds(lo, fused, n, &bmax, &bmean);
    char o2[80];
    snprintf(o2, sizeof o2, "%s max", op);
    row_check(x, o2, sh, mx, bmax, mx <= bmax);
    snprintf(o2, sizeof o2, "%s mean", op);
    row_check(x, o2, sh, mean, bmean, mean <= bmean);
}

static void check_att_lse(gc *x, int B, int T, int C, int NH, int lo, const char *tag)
{
    char sh[64], op[64];
    const char *ln = lo == LLM_DT_BF16 ? "bf16" : "f16";
    snprintf(sh, sizeof sh, "B%d T%d C%d NH%d", B, T, C, NH);
    size_t C3 = 3 * (size_t)C, nq = (size_t)B * T * C3, no = (size_t)B * T * C,
           nl = (size_t)B * NH * T;
    float *qkv = rnd(x, nq, -2, 2), *qr = xmalloc(nq * 4), *dout = rnd(x, no, -1, 1);
    float *dq0 = rnd(x, nq, -1, 1), *L = xmalloc(nl * 4), *O = xmalloc(no * 4);
    for (size_t i = 0; i < nq; i++) qr[i] = (float)rl(qkv[i], lo);
    double *y = xmalloc(no * 8), *ys = xmalloc(no * 8), *lr = xmalloc(nl * 8);
    r64_attention_lse_forward(y, ys, lr, qr, B, T, C, NH, lo);
    for (size_t i = 0; i < nl; i++) L[i] = (float)lr[i];
    for (size_t i = 0; i < no; i++) O[i] = (float)y[i];
    float *gq = gput(x, qkv, nq * 4), *gout = gpoison(x, no), *glse = gpoison(x, nl);
    x->g.attention_forward_lse(&x->g, gout, glse, gq, B, T, C, NH, lo);
    float *out = gget(x, gout, no), *lse = gget(x, glse, nl);
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

    /* backward from the reference's lse and out */
    double *r = dcopy(dq0, nq), *rs = xmalloc(nq * 8);
    for (size_t i = 0; i < nq; i++) rs[i] = fabs(dq0[i]);
    r64_attention_lse_backward(r, rs, qr, dout, O, L, B, T, C, NH, lo);
    float *gd = gput(x, dout, no * 4), *gdq = gput(x, dq0, nq * 4);
    float *gO = gput(x, O, no * 4), *gL = gput(x, L, nl * 4);
    x->g.attention_backward_lse(&x->g, gdq, gd, gq, gO, gL, B, T, C, NH, lo);
    float *dq = gget(x, gdq, nq);
    snprintf(op, sizeof op, "lse_bwd %s%s dqkv", ln, tag);
    lse_row(x, op, sh, dq, r, rs, nq, lo, 0);
    free(qkv); free(qr); free(dout); free(dq0); free(L); free(O); free(y); free(ys); free(lr);
    free(out); free(lse); free(r); free(rs); free(dq);
    void *bufs[] = {gq, gout, glse, gd, gdq, gO, gL};
    for (size_t i = 0; i < sizeof bufs / sizeof *bufs; i++) x->g.free(&x->g, bufs[i]);
}

static void check_lse_all(gc *x, int tiny, const char *tag)
{
    for (int k = 0; k < 2; k++) {
        int lo = k ? LLM_DT_F16 : LLM_DT_BF16;
        check_att_lse(x, 2, 7, 12, 3, lo, tag);      /* head size 4: never fused */
        check_att_lse(x, 1, 1, 64, 1, lo, tag);
        check_att_lse(x, 2, 67, 128, 2, lo, tag);    /* partial tiles */
        check_att_lse(x, 1, 129, 96, 3, lo, tag);    /* head size 32 */
        check_att_lse(x, 1, 130, 256, 2, lo, tag);   /* head size 128 */
        if (!tiny) {
            check_att_lse(x, 3, 256, 768, 12, lo, tag);
            if (!k) check_att_lse(x, 1, 1024, 768, 12, lo, tag);
        }
    }
}

void gpu_check_attention_lo(gc *x, int tiny)
{
    if (!x->g.attention_forward_lo || !x->g.attention_backward_lo) {
        if (x->cuda) row_check(x, "backend has attention lo ops", x->g.name, 1, 0, 0);
        else printf("gpu_check: backend '%s' has no attention lo ops: skipped\n", x->g.name);
        return;
    }
    for (int k = 0; k < 2; k++) {
        int lo = k ? LLM_DT_F16 : LLM_DT_BF16;
        check_att_lo(x, 1, 1, 4, 1, lo);
        check_att_lo(x, 2, 7, 12, 3, lo);
        check_att_lo(x, 2, 67, 40, 5, lo);
        if (!tiny) {
            check_att_lo(x, 1, 129, 96, 2, lo);
            check_att_lo(x, 3, 256, 768, 12, lo);
        }
    }
    if (!x->g.attention_forward_lse || !x->g.attention_backward_lse) {
        if (x->cuda) row_check(x, "backend has attention lse ops", x->g.name, 1, 0, 0);
        return;
    }
    if (!x->cuda) {
        check_lse_all(x, tiny, "");
        return;
    }
    /* the fused kernels where the head size allows, then the batched-GEMM form forced */
    long r0[2], r1[2], r2[2];
    llm_backend_cuda_flash_path(&x->g, 0, r0);
    check_lse_all(x, tiny, "");
    llm_backend_cuda_flash_path(&x->g, 1, r1);
    check_lse_all(x, tiny, " gemm");
    llm_backend_cuda_flash_path(&x->g, 0, r2);
    char sh[64];
    snprintf(sh, sizeof sh, "fused %ld gemm %ld", r1[0] - r0[0], r2[1] - r1[1]);
    /* fused calls in the first round, none in the forced one (whose GEMM calls are all
     * of its checks: 2 per shape) */
    row_check(x, "attention lse paths ran", sh, (double)(r1[0] - r0[0]), 1,
              r1[0] > r0[0] && r2[0] == r1[0] && r2[1] > r1[1]);
}
