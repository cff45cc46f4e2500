/* gpu_check_lo.c — gpu_check's mixed-precision and device-health checks.
 *
 * cast_lo: bit for bit against the CPU conversions of common/quant.h (random bit
 * patterns, ordinary values and the edge cases: signed zeros, infinities, NaN payloads,
 * denormals, ties, the fp16 overflow threshold 65520).
 * matmul_forward_lo / matmul_backward_lo: lo inputs, fp32 or lo outputs (a lo out with
 * a lo bias), against double precision on the lo operands (ref64) and, when the cpu-ref
 * backend has them, its lo ops.  The products of two lo values are exact in fp32, so
 * only fp32 accumulation separates cuda from the reference: B_LO below, plus for a lo
 * output its one rounding (err_lo, gpu_check.h: a rounding done twice or truncated
 * still fails).  dinp is overwritten: its buffer starts as NaN.
 * device_stats: memory in use and the backend's exact held/peak accounting (allocation
 * churn included), NVML fields -1 or in range, and -1 when NVML is absent. */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "common/quant.h"
#include "kernels/backend.h"
#include "kernels/cuda/cuda_backend.h"
#include "kernels/cuda/cuda_ext.h"
#include "tests/gpu/gpu_check.h"
#include "tests/gpu/ref64.h"

/* Max relative error (err64) of the lo GEMMs.  Measured on an H200 for the fp32 GEMMs
 * with the same metric: 3.5e-6 at K = 3072 (cuBLAS SGEMM); a bf16 x bf16 product is
 * exact in fp32, so the lo GEMMs see the same kind of fp32 accumulation error.  2e-5
 * leaves 5x room; a wrong rounding of either operand (one bf16 ulp is 3.9e-3, fp16
 * 4.9e-4) or unrounded operands would show near 1e-3 and fail. */
#define B_LO 2e-5

static const char *lo_name(int lo) { return lo == LLM_DT_BF16 ? "bf16" : "f16"; }

static uint16_t to_lo(float v, int lo)
{
    return lo == LLM_DT_BF16 ? llm_quant_f32_to_bf16(v) : llm_quant_f32_to_f16(v);
}

static float from_lo(uint16_t h, int lo)
{
    return lo == LLM_DT_BF16 ? llm_quant_bf16_to_f32(h) : llm_quant_f16_to_f32(h);
}

static uint16_t *enc(const float *a, size_t n, int lo)
{
    uint16_t *h = xmalloc(n * sizeof *h);
    for (size_t i = 0; i < n; i++) h[i] = to_lo(a[i], lo);
    return h;
}

/* a rounded to lo and back: the values the lo GEMM multiplies */
static float *rounded(const float *a, size_t n, int lo)
{
    float *r = xmalloc(n * sizeof *r);
    for (size_t i = 0; i < n; i++) r[i] = from_lo(to_lo(a[i], lo), lo);
    return r;
}

static float fbits(uint32_t u)
{
    float f;
    memcpy(&f, &u, 4);
    return f;
}

/* ---- cast_lo ---- */

static const uint32_t edge_bits[] = {
    0x00000000, 0x80000000,                         /* +-0 */
    0x7f800000, 0xff800000,                         /* +-inf */
    0x7fc00000, 0xffc00000, 0x7f800001, 0xff800001, /* quiet / signalling NaN, signs */
    0x7fbfffff, 0x7fe12345, 0xffa5a5a5, 0x7f80ffff, /* NaN payloads (low bits only too) */
    0x00000001, 0x80000001, 0x007fffff, 0x00400000, /* fp32 denormals */
    0x00800000, 0x7f7fffff, 0xff7fffff,             /* FLT_MIN, +-FLT_MAX */
    0x3f800000, 0x3f808000, 0x3f818000, 0x3f807fff, /* 1, bf16 ties to even (down, up), below */
    0x3f808001, 0x3f80ffff, 0xbf808000, 0xbf818000,
    0x477fe000, 0x477fefff, 0x477ff000, 0xc77ff000, /* 65504, just below 65520, 65520 -> inf */
    0x477ff001, 0x47800000, 0x7f000000,             /* beyond fp16 */
    0x33800000, 0x33000000, 0x33000001, 0x32ffffff, /* 2^-24 (fp16 min denormal), its half: 0 */
    0x33c00000, 0x34200000, 0x38800000, 0x387fffff, /* 1.5 x 2^-24 (tie -> even), 2^-14 edge */
    0x387fe000, 0x387ff000, 0xb87ff000, 0x38801000, /* largest fp16 denormal, ties up to normal */
    0x3f801000, 0x3f803000, 0x3f800fff, 0x3f801001, /* fp16 ties to even around 1 */
};

/* Input number i of a cast test: the edge cases first, then random bit patterns (every
 * exponent, NaNs included), ordinary values, values near the fp16 range limits and in
 * its denormal range. */
static float cast_input(gc *x, size_t i)
{
    size_t ne = sizeof edge_bits / sizeof *edge_bits;
    if (i < ne) return fbits(edge_bits[i]);
    switch (i % 4) {
    case 0: return fbits((uint32_t)rnext(x));
    case 1: return runi(x, -2, 2);
    case 2: return (rnext(x) & 1 ? 1 : -1) * (65504.0f + runi(x, -64, 64));
    default: return runi(x, -1, 1) * 6.103515625e-05f;   /* |x| < 2^-14 */
    }
}

static void check_cast(gc *x, size_t n, int lo, int off)
{
    char sh[64], op[64];
    snprintf(sh, sizeof sh, "n%zu%s", n, off ? " unaligned" : "");
    float *a = xmalloc((n + off) * sizeof *a);
    for (size_t i = 0; i < n; i++) a[off + i] = cast_input(x, i);
    uint16_t *want = enc(a + off, n, lo);
    float *gsrc = gput(x, a, (n + off) * sizeof *a);
    uint16_t *init = xmalloc((n + off) * 2);
    memset(init, 0xa5, (n + off) * 2);
    uint16_t *gdst = gput(x, init, (n + off) * 2);
    x->g.cast_lo(&x->g, gdst + off, gsrc + off, n, lo);
    uint16_t *got = xmalloc((n + off) * 2);
    x->g.to_host(&x->g, got, gdst, (n + off) * 2);
    size_t bad = 0;
    for (size_t i = 0; i < n; i++)
        if (got[off + i] != want[i] && bad++ == 0)
        {
            uint32_t u;
            memcpy(&u, &a[off + i], 4);
            fprintf(stderr, "gpu_check: cast_lo %s: input %zu = 0x%08x: got 0x%04x, want 0x%04x\n",
                    lo_name(lo), i, (unsigned)u, got[off + i], want[i]);
        }
    if (off && got[0] != 0xa5a5) bad++;   /* nothing written before dst */
    snprintf(op, sizeof op, "cast_lo %s bits", lo_name(lo));
    row_check(x, op, sh, (double)bad, 0.0, bad == 0);
    if (x->have_ref && x->r.cast_lo) {   /* the cpu-ref backend's own cast */
        uint16_t *c = xmalloc(n * 2);
        x->r.cast_lo(&x->r, c, a + off, n, lo);
        size_t badc = 0;
        for (size_t i = 0; i < n; i++) badc += c[i] != got[off + i];
        snprintf(op, sizeof op, "cast_lo %s = cpu-ref", lo_name(lo));
        row_check(x, op, sh, (double)badc, 0.0, badc == 0);
        free(c);
    }
    free(a); free(want); free(init); free(got);
    x->g.free(&x->g, gsrc);
    x->g.free(&x->g, gdst);
}

/* ---- the lo GEMMs ---- */

/* A device buffer of n elements of dtype dt (4 or 2 bytes) after off leading ones, all
 * bits set (NaN in fp32, bf16 and fp16: an element left unwritten shows); *at the
 * tensor. */
static void *gnan(gc *x, size_t n, size_t off, int dt, void **at)
{
    size_t es = dt == LLM_DT_F32 ? 4 : 2, bytes = (n + off) * es;
    unsigned char *h = xmalloc(bytes ? bytes : 1);
    memset(h, 0xff, bytes);
    unsigned char *d = gput(x, h, bytes ? bytes : 1);
    free(h);
    *at = d + off * es;
    return d;
}

/* n values of dtype dt at d (device) as floats */
static float *gvals(gc *x, const void *d, size_t n, int dt)
{
    return dt == LLM_DT_F32 ? gget(x, d, n) : glo_get(x, d, n, dt);
}

/* host lo bits of a after off zero elements */
static uint16_t *enc_off(const float *a, size_t n, int lo, size_t off)
{
    uint16_t *h = xmalloc((n + off) * 2 + 2);
    memset(h, 0, off * 2);
    for (size_t i = 0; i < n; i++) h[off + i] = to_lo(a[i], lo);
    return h;
}

/* One shape: forward and backward against ref64 on the lo operands (and cpu-ref's lo ops
 * when present), then the backward again for determinism.  odt: the forward's out and
 * the backward's dinp dtype (LLM_DT_F32 or lo; a lo out gets a lo bias).  misalign:
 * w_lo, inp, dout and the outputs start one element into their buffers (2- and 4-byte
 * aligned, as a tensor inside a bigger buffer may be).  tag names the GEMM path. */
static void check_mm_lo(gc *x, int N, int C, int OC, int with_bias, int lo, int odt,
                        int misalign, const char *tag)
{
    char sh[64], op[80];
    snprintf(sh, sizeof sh, "N%d C%d OC%d%s%s", N, C, OC, with_bias ? " +b" : "",
             misalign ? " unal" : "");
    const char *ln = lo_name(lo), *on = odt == LLM_DT_F32 ? "->f32" : "->lo";
    size_t ni = (size_t)N * C, nw = (size_t)OC * C, no = (size_t)N * OC;
    size_t off = misalign ? 1 : 0;
    float *inp = rnd(x, ni, -1, 1), *w = rnd(x, nw, -1, 1);
    float *bias = with_bias ? rnd(x, OC, -1, 1) : NULL;
    /* the values the GEMM sees: lo operands, and a lo bias for a lo out */
    float *xr = rounded(inp, ni, lo), *wr = rounded(w, nw, lo);
    float *br = bias ? (odt == LLM_DT_F32 ? fdup(bias, OC) : rounded(bias, OC, lo)) : NULL;
    uint16_t *hw = enc_off(w, nw, lo, off), *hx = enc_off(inp, ni, lo, off);
    uint16_t *gwb = gput(x, hw, (nw + off) * 2), *gxb = gput(x, hx, (ni + off) * 2);
    const void *gw = gwb + off, *gx = gxb + off;
    void *gbias = NULL;
    if (bias) gbias = odt == LLM_DT_F32 ? gput(x, bias, OC * 4) : glo_put(x, bias, OC, lo);
    void *gout, *goutb = gnan(x, no, off, odt, &gout);
    x->g.matmul_forward_lo(&x->g, gout, odt, gx, gw, lo, gbias, N, C, OC);
    float *out = gvals(x, gout, no, odt);
    double *r = xmalloc(no * 8 + 8);
    r64_matmul_forward(r, xr, wr, br, N, C, OC);
    float *c = NULL;
    if (x->have_ref && x->r.matmul_forward_lo) {
        void *hb = NULL, *co = xmalloc(no * 4 + 4);
        if (bias) hb = odt == LLM_DT_F32 ? (void *)fdup(bias, OC) : (void *)enc(bias, OC, lo);
        x->r.matmul_forward_lo(&x->r, co, odt, hx + off, hw + off, lo, hb, N, C, OC);
        if (odt == LLM_DT_F32) c = co;
        else {
            c = xmalloc(no * 4 + 4);
            for (size_t i = 0; i < no; i++) c[i] = from_lo(((uint16_t *)co)[i], lo);
            free(co);
        }
        free(hb);
    }
    snprintf(op, sizeof op, "matmul_fwd_lo %s%s%s", ln, on, tag);
    if (odt == LLM_DT_F32) row(x, op, sh, out, r, c, no, B_LO);
    else row_lo(x, op, sh, out, r, c, no, B_LO, lo);
    free(out); free(r); free(c);

    /* backward: dinp overwritten (starts as NaN), dw and dbias accumulate */
    float *dout = rnd(x, no, -1, 1), *dr = rounded(dout, no, lo);
    float *dw0 = rnd(x, nw, -1, 1), *db0 = rnd(x, OC, -1, 1);
    uint16_t *hd = enc_off(dout, no, lo, off);
    uint16_t *gdb_ = gput(x, hd, (no + off) * 2);
    const void *gd = gdb_ + off;
    void *gdi, *gdib = gnan(x, ni, off, odt, &gdi);
    float *gdw = gput(x, dw0, nw * 4);
    float *gdb = bias ? gput(x, db0, OC * 4) : NULL;
    x->g.matmul_backward_lo(&x->g, gdi, odt, gdw, gdb, gd, gx, gw, lo, N, C, OC);
    float *di = gvals(x, gdi, ni, odt), *dw = gget(x, gdw, nw), *db = bias ? gget(x, gdb, OC) : NULL;
    double *rdi = xmalloc(ni * 8 + 8), *rdw = dcopy(dw0, nw), *rdb = bias ? dcopy(db0, OC) : NULL;
    memset(rdi, 0, ni * 8);
    r64_matmul_backward(rdi, rdw, rdb, dr, xr, wr, N, C, OC);
    float *cdi = NULL, *cdw = NULL, *cdb = NULL;
    if (x->have_ref && x->r.matmul_backward_lo) {
        void *ci = xmalloc(ni * 4 + 4);
        cdw = fdup(dw0, nw); cdb = bias ? fdup(db0, OC) : NULL;
        x->r.matmul_backward_lo(&x->r, ci, odt, cdw, cdb, hd + off, hx + off, hw + off, lo, N, C, OC);
        if (odt == LLM_DT_F32) cdi = ci;
        else {
            cdi = xmalloc(ni * 4 + 4);
            for (size_t i = 0; i < ni; i++) cdi[i] = from_lo(((uint16_t *)ci)[i], lo);
            free(ci);
        }
    }
    snprintf(op, sizeof op, "matmul_bwd_lo %s%s%s dinp", ln, on, tag);
    if (odt == LLM_DT_F32) row(x, op, sh, di, rdi, cdi, ni, B_LO);
    else row_lo(x, op, sh, di, rdi, cdi, ni, B_LO, lo);
    snprintf(op, sizeof op, "matmul_bwd_lo %s%s dw", ln, tag);
    row(x, op, sh, dw, rdw, cdw, nw, B_LO);
    if (bias) {
        snprintf(op, sizeof op, "matmul_bwd_lo %s%s dbias", ln, tag);
        row(x, op, sh, db, rdb, cdb, OC, B_LO);
    }
    /* the same backward again from the same state: bit-identical */
    x->g.to_device(&x->g, gdw, dw0, nw * 4);
    if (bias) x->g.to_device(&x->g, gdb, db0, OC * 4);
    x->g.matmul_backward_lo(&x->g, gdi, odt, gdw, gdb, gd, gx, gw, lo, N, C, OC);
    float *di2 = gvals(x, gdi, ni, odt), *dw2 = gget(x, gdw, nw), *db2 = bias ? gget(x, gdb, OC) : NULL;
    snprintf(op, sizeof op, "matmul_bwd_lo %s%s%s determ.", ln, on, tag);
    int same = memcmp(dw, dw2, nw * 4) == 0 && memcmp(di, di2, ni * 4) == 0 &&
               (!bias || memcmp(db, db2, OC * 4) == 0);
    row_check(x, op, sh, same ? 0.0 : 1.0, 0.0, same);
    free(di2); free(dw2); free(db2);
    free(inp); free(w); free(bias); free(xr); free(wr); free(br); free(hw); free(hx); free(hd);
    free(dout); free(dr); free(dw0); free(db0); free(di); free(dw); free(db);
    free(rdi); free(rdw); free(rdb); free(cdi); free(cdw); free(cdb);
    void *bufs[] = {gwb, gxb, gbias, goutb, gdb_, gdib, gdw, gdb};
    for (size_t i = 0; i < sizeof bufs / sizeof *bufs; i++)
        if (bufs[i]) x->g.free(&x->g, bufs[i]);
}

/* Many distinct shapes (more than the backend caches plans for), then the first again. */
static void check_plan_churn(gc *x, int shapes)
{
    const int C = 3, OC = 5, lo = LLM_DT_BF16;
    double worst = 0;
    for (int s = 0; s <= shapes; s++) {
        int N = s < shapes ? s + 1 : 1;
        int odt = s % 2 ? lo : LLM_DT_F32;
        float *inp = rnd(x, (size_t)N * C, -1, 1), *w = rnd(x, (size_t)OC * C, -1, 1);
        float *xr = rounded(inp, (size_t)N * C, lo), *wr = rounded(w, (size_t)OC * C, lo);
        void *gi = glo_put(x, inp, (size_t)N * C, lo), *gw = glo_put(x, w, (size_t)OC * C, lo);
        void *go, *gob = gnan(x, (size_t)N * OC, 0, odt, &go);
        x->g.matmul_forward_lo(&x->g, go, odt, gi, gw, lo, NULL, N, C, OC);
        float *out = gvals(x, go, (size_t)N * OC, odt);
        double *r = xmalloc((size_t)N * OC * 8);
        r64_matmul_forward(r, xr, wr, NULL, N, C, OC);
        double e = odt == LLM_DT_F32 ? err64(out, r, (size_t)N * OC) : err_lo(out, r, (size_t)N * OC, lo, 1);
        if (!(e <= worst)) worst = e;
        free(inp); free(w); free(xr); free(wr); free(out); free(r);
        x->g.free(&x->g, gi); x->g.free(&x->g, gob); x->g.free(&x->g, gw);
    }
    char sh[64];
    snprintf(sh, sizeof sh, "%d shapes N1..%d C3 OC5", shapes + 1, shapes);
    row_check(x, "matmul_fwd_lo plan churn", sh, worst, B_LO, worst <= B_LO);
}

/* fp16 overflow (|x| >= 65520) must reach the outputs as inf/NaN: what dynamic loss
 * scaling looks for.  The lo inputs hold an inf (rounded from 7e4 and 1e5); a lo output
 * overflows too when its fp32 value does (the forward's row 2). */
static void check_overflow(gc *x)
{
    const int N = 4, C = 8, OC = 5, lo = LLM_DT_F16;
    float *inp = rnd(x, N * C, 0.5f, 1), *w = rnd(x, OC * C, 0.5f, 1), *dout = rnd(x, N * OC, -1, 1);
    inp[2 * C + 3] = 7e4f;           /* row 2 of the forward input */
    dout[1 * OC + 2] = 1e5f;         /* row 1, column 2 of dout */
    float *z = calloc(N * C + OC * C + OC, sizeof *z);
    void *gi = glo_put(x, inp, N * C, lo), *gd = glo_put(x, dout, N * OC, lo);
    void *gw = glo_put(x, w, OC * C, lo), *go = glo_put(x, z, N * OC, lo);
    void *gdi = glo_put(x, z, N * C, lo);
    float *gdw = gput(x, z, OC * C * 4), *gdb = gput(x, z, OC * 4);
    x->g.matmul_forward_lo(&x->g, go, lo, gi, gw, lo, NULL, N, C, OC);
    x->g.matmul_backward_lo(&x->g, gdi, lo, gdw, gdb, gd, gi, gw, lo, N, C, OC);
    float *o = glo_get(x, go, N * OC, lo), *di = glo_get(x, gdi, N * C, lo),
          *dw = gget(x, gdw, OC * C), *db = gget(x, gdb, OC);
    int ok = 1;
    for (int n = 0; n < N; n++)
        for (int k = 0; k < OC; k++) ok &= (n == 2) == !isfinite(o[n * OC + k]);
    for (int n = 0; n < N; n++)
        for (int c = 0; c < C; c++) ok &= (n == 1) == !isfinite(di[n * C + c]);
    for (int k = 0; k < OC; k++) {
        /* dw(k,c) sums dout[n,k] x inp[n,c]: column 2 of dout and column 3 of inp (its
         * inf in row 2) hold an inf */
        for (int c = 0; c < C; c++) ok &= (k == 2 || c == 3) == !isfinite(dw[k * C + c]);
        ok &= k == 2 ? db[k] == INFINITY : isfinite(db[k]);
    }
    /* a finite fp32 sum beyond 65504 rounds to inf in the lo output: 8 x 1e4 */
    float big[8] = {1e4f, 1e4f, 1e4f, 1e4f, 1e4f, 1e4f, 1e4f, 1e4f}, one[8] = {1, 1, 1, 1, 1, 1, 1, 1};
    void *gb = glo_put(x, big, 8, lo), *g1 = glo_put(x, one, 8, lo), *gs = glo_put(x, z, 1, lo);
    x->g.matmul_forward_lo(&x->g, gs, lo, gb, g1, lo, NULL, 1, 8, 1);
    float *s = glo_get(x, gs, 1, lo);
    ok &= s[0] == INFINITY;
    row_check(x, "fp16 overflow -> inf", "N4 C8 OC5, 1x8x1", ok ? 0.0 : 1.0, 0.0, ok);
    free(inp); free(w); free(dout); free(z); free(o); free(di); free(dw); free(db); free(s);
    void *bufs[] = {gi, gd, go, gw, gdi, gdw, gdb, gb, g1, gs};
    for (size_t i = 0; i < sizeof bufs / sizeof *bufs; i++) x->g.free(&x->g, bufs[i]);
}

/* An lo that is neither bf16 nor f16 is recorded as an error by each op (cuda only). */
static void check_bad_lo(gc *x)
{
    float *g = x->g.alloc(&x->g, 64 * 4);
    char msg[256];
    int refused = 0;
    const int want = 11;
    fprintf(stderr, "gpu_check: %d expected 'neither ...' errors follow\n", want);
#define REFUSED (refused += llm_backend_cuda_status(&x->g, msg, sizeof msg) != 0 && strstr(msg, "neither"))
    x->g.cast_lo(&x->g, g, g + 32, 16, LLM_DT_F32); REFUSED;
    x->g.matmul_forward_lo(&x->g, g, LLM_DT_F32, g + 16, g + 32, LLM_DT_I8, NULL, 2, 2, 2); REFUSED;
    /* an out dtype that is neither fp32 nor the lo given */
    x->g.matmul_forward_lo(&x->g, g, LLM_DT_F16, g + 16, g + 32, LLM_DT_BF16, NULL, 2, 2, 2); REFUSED;
    x->g.matmul_backward_lo(&x->g, g, LLM_DT_F32, g + 8, NULL, g + 16, g + 24, g + 32, LLM_DT_F32, 2, 2, 2); REFUSED;
    x->g.matmul_backward_lo(&x->g, g, LLM_DT_BF16, g + 8, NULL, g + 16, g + 24, g + 32, LLM_DT_F16, 2, 2, 2); REFUSED;
    x->g.layernorm_forward_lo(&x->g, NULL, g, NULL, NULL, g + 16, NULL, g + 32, g + 48, 2, 4, LLM_DT_F32); REFUSED;
    x->g.gelu_forward_lo(&x->g, g, g + 16, 8, LLM_DT_I8); REFUSED;
    x->g.gelu_backward_lo(&x->g, g, g + 16, g + 32, 8, LLM_DT_F32); REFUSED;
    x->g.xent_forward_lo(&x->g, g, g + 8, g + 16, (const int32_t *)(g + 32), 2, 4, 4, LLM_DT_F32); REFUSED;
    x->g.attention_forward_lse(&x->g, g, g + 8, g + 16, 1, 1, 4, 1, LLM_DT_F32); REFUSED;
    x->g.attention_backward_lse(&x->g, g, g + 8, g + 16, g + 24, g + 32, 1, 1, 4, 1, LLM_DT_I8); REFUSED;
#undef REFUSED
    x->g.free(&x->g, g);
    char sh[32];
    snprintf(sh, sizeof sh, "%d calls", want);
    row_check(x, "lo ops refuse bad dtypes", sh, want - refused, 0.0, refused == want);
}

void gpu_check_lo(gc *x, int tiny)
{
    if (!x->g.cast_lo || !x->g.matmul_forward_lo || !x->g.matmul_backward_lo) {
        if (x->cuda) {
            row_check(x, "backend has lo ops", x->g.name, 1, 0, 0);
        } else {
            printf("gpu_check: backend '%s' has no mixed-precision ops: lo checks skipped\n", x->g.name);
            if (x->out) fprintf(x->out, "lo checks skipped: backend '%s' has none\n", x->g.name);
        }
        return;
    }
    const int los[] = {LLM_DT_BF16, LLM_DT_F16};
    for (int i = 0; i < 2; i++) {
        int lo = los[i];
        check_cast(x, 1, lo, 0);
        check_cast(x, 4099, lo, 1);
        check_cast(x, tiny ? 1003 : 1000003, lo, 0);
        for (int k = 0; k < 2; k++) {
            int odt = k ? lo : LLM_DT_F32;
            check_mm_lo(x, 1, 1, 1, 1, lo, odt, 0, "");
            check_mm_lo(x, 5, 7, 3, 0, lo, odt, 0, "");
            check_mm_lo(x, 3, 0, 5, 1, lo, odt, 0, "");     /* C = 0: out = bias, dbias only */
            check_mm_lo(x, 2, 3, 0, 0, lo, odt, 0, "");     /* OC = 0: dinp = 0 */
            check_mm_lo(x, 37, 61, 83, 1, lo, odt, 0, "");
            check_mm_lo(x, 37, 61, 83, 1, lo, odt, 1, "");
            check_mm_lo(x, 64, 48, 32, 1, lo, odt, 0, "");  /* multiples of 16 */
            if (!tiny) {
                check_mm_lo(x, 130, 768, 2304, 1, lo, odt, 0, "");
                check_mm_lo(x, 1025, 65, 127, 1, lo, odt, 1, "");
            }
        }
    }
    if (!tiny) {
        check_mm_lo(x, 257, 3072, 768, 1, LLM_DT_BF16, LLM_DT_F32, 0, "");
        check_mm_lo(x, 257, 768, 3072, 1, LLM_DT_BF16, LLM_DT_BF16, 0, "");
        check_mm_lo(x, 33, 96, 50304, 0, LLM_DT_BF16, LLM_DT_BF16, 0, "");
        check_mm_lo(x, 64, 768, 768, 1, LLM_DT_F16, LLM_DT_F16, 0, "");
    }
    check_overflow(x);
    check_plan_churn(x, tiny ? 8 : 40);
    if (!x->cuda) return;
    check_bad_lo(x);
    /* the model's GEMM kinds at GPT-2 shapes (lo out with a lo bias, fp32 out with an fp32
     * bias; forward and backward) must run on cuBLASLt: its fallback is right but slow */
    long l0[2], l1[2];
    llm_backend_cuda_lo_gemm_path(&x->g, -1, l0);
    check_mm_lo(x, 256, 768, 2304, 1, LLM_DT_BF16, LLM_DT_BF16, 0, " gpt2");
    check_mm_lo(x, 256, 3072, 768, 1, LLM_DT_BF16, LLM_DT_F32, 0, " gpt2");
    check_mm_lo(x, 256, 768, 3072, 1, LLM_DT_F16, LLM_DT_F16, 0, " gpt2");
    llm_backend_cuda_lo_gemm_path(&x->g, -1, l1);
    char shl[64];
    snprintf(shl, sizeof shl, "lt %ld ex %ld", l1[0] - l0[0], l1[1] - l0[1]);
    row_check(x, "lo gemms on cuBLASLt", shl, (double)(l1[1] - l0[1]), 0,
              l1[1] == l0[1] && l1[0] > l0[0]);
    /* the cublasGemmEx path (taken when cuBLASLt refuses a shape), forced */
    long before[2], after[2];
    llm_backend_cuda_lo_gemm_path(&x->g, 1, before);
    check_mm_lo(x, 37, 61, 83, 1, LLM_DT_BF16, LLM_DT_F32, 0, " ex");
    check_mm_lo(x, 37, 61, 83, 1, LLM_DT_BF16, LLM_DT_BF16, 0, " ex");   /* lo out + bias */
    check_mm_lo(x, 37, 61, 83, 0, LLM_DT_F16, LLM_DT_F32, 1, " ex");
    check_mm_lo(x, 37, 61, 83, 1, LLM_DT_F16, LLM_DT_F16, 1, " ex");
    check_mm_lo(x, 3, 0, 5, 1, LLM_DT_BF16, LLM_DT_BF16, 0, " ex");
    if (!tiny) check_mm_lo(x, 130, 768, 2304, 1, LLM_DT_BF16, LLM_DT_BF16, 1, " ex");
    llm_backend_cuda_lo_gemm_path(&x->g, 0, after);
    char sh[64];
    snprintf(sh, sizeof sh, "lt %ld ex %ld", before[0], after[1] - before[1]);
    /* cuBLASLt ran the default path (a 0 means every lo GEMM fell back: slow, not wrong),
     * and the forced one ran cublasGemmEx only */
    row_check(x, "lo gemm paths ran", sh, (double)before[0], 1,
              before[0] > 0 && after[1] > before[1] && after[0] == before[0]);
}

/* ---- device_stats ---- */

static int nvml_sane(const struct llm_device_stats *s)
{
    return (s->util_pct == -1 || (s->util_pct >= 0 && s->util_pct <= 100)) &&
           (s->temp_c == -1 || (s->temp_c > 0 && s->temp_c < 130)) &&
           (s->power_w == -1 || (s->power_w > 0 && s->power_w < 2000));
}

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + ts.tv_nsec * 1e-9;
}

void gpu_check_device_stats(gc *x, int tiny)
{
    if (!x->cuda) return;   /* the CPU backends have none */
    llm_backend *g = &x->g;
    char sh[96];
    if (!g->device_stats) { row_check(x, "device_stats filled", g->name, 1, 0, 0); return; }
    struct llm_device_stats s0, s1, s2;
    size_t h0 = 0, p0 = 0, h1 = 0, p1 = 0, h2 = 0, p2 = 0;
    int rc = g->device_stats(g, &s0);
    llm_backend_cuda_mem_held(g, &h0, &p0);
    int nvml = llm_backend_cuda_nvml_loaded(g);
    snprintf(sh, sizeof sh, "used %.0f peak %.0f MiB", s0.mem_used_mb, s0.mem_peak_mb);
    row_check(x, "device_stats memory", sh, s0.mem_used_mb, 0,
              rc == 0 && s0.mem_used_mb > 0 && s0.mem_peak_mb * 1048576.0 >= (double)h0 &&
              s0.mem_peak_mb * 1048576.0 == (double)p0 && p0 >= (64u << 20));
    snprintf(sh, sizeof sh, "nvml %s: %.0f%% %.0fC %.0fW", nvml ? "yes" : "no", s0.util_pct,
             s0.temp_c, s0.power_w);
    row_check(x, "device_stats nvml fields", sh, 0, 0,
              nvml_sane(&s0) && (nvml || (s0.util_pct == -1 && s0.temp_c == -1 && s0.power_w == -1)));

    /* 256 MiB through be->alloc: held and peak move by exactly that, and back */
    size_t big = (size_t)256 << 20;
    void *p = g->alloc(g, big);
    g->device_stats(g, &s1);
    llm_backend_cuda_mem_held(g, &h1, &p1);
    g->free(g, p);
    p = g->alloc(g, big);   /* the same again: the peak must not move */
    g->device_stats(g, &s2);
    llm_backend_cuda_mem_held(g, &h2, &p2);
    g->free(g, p);
    size_t h3 = 0;
    llm_backend_cuda_mem_held(g, &h3, NULL);
    snprintf(sh, sizeof sh, "+256 MiB: used +%.0f peak %.0f", s1.mem_used_mb - s0.mem_used_mb,
             s1.mem_peak_mb);
    row_check(x, "device_stats alloc/free", sh, (double)(h1 - h0), (double)big,
              p && h1 == h0 + big && p1 >= h1 && p1 >= p0 && s1.mem_peak_mb * 1048576.0 == (double)p1 &&
              s1.mem_used_mb - s0.mem_used_mb >= 250 && h2 == h1 && p2 == p1 && h3 == h0);

    /* an allocation the device cannot hold: NULL, nothing counted, no error left over
     * (not under --tiny: compute-sanitizer would count the failed cudaMalloc) */
    if (!tiny) {
        size_t hb = 0, ha = 0, pb = 0, pa = 0;
        llm_backend_cuda_mem_held(g, &hb, &pb);
        void *huge = g->alloc(g, (size_t)1 << 50);
        llm_backend_cuda_mem_held(g, &ha, &pa);
        row_check(x, "device alloc 1 PiB refused", "NULL, held unchanged", huge != NULL, 0,
                  !huge && ha == hb && pa == pb);
    }

    /* churn: 3000 small buffers (600 with --tiny), some freed on the way, the rest in a
     * shuffled order; the table must give back exactly what it took */
    const int NB = tiny ? 600 : 3000;
    void **bufs = xmalloc(NB * sizeof *bufs);
    size_t *sizes = xmalloc(NB * sizeof *sizes), sum = 0, hmid = 0;
    for (int i = 0; i < NB; i++) {
        sizes[i] = 1 + rnext(x) % 4096;
        bufs[i] = g->alloc(g, sizes[i]);
        sum += sizes[i];
        if (!bufs[i]) sum = (size_t)-1 / 2;   /* fails the check below */
        if (i % 7 == 3 && bufs[i / 2]) {      /* free some early, mid-churn */
            g->free(g, bufs[i / 2]);
            sum -= sizes[i / 2];
            bufs[i / 2] = NULL;
        }
    }
    llm_backend_cuda_mem_held(g, &hmid, NULL);
    for (int i = NB - 1; i > 0; i--) {
        int j = (int)(rnext(x) % (uint64_t)(i + 1));
        void *t = bufs[i]; bufs[i] = bufs[j]; bufs[j] = t;
    }
    for (int i = 0; i < NB; i++) if (bufs[i]) g->free(g, bufs[i]);
    size_t hend = 0;
    llm_backend_cuda_mem_held(g, &hend, NULL);
    free(bufs);
    free(sizes);
    snprintf(sh, sizeof sh, "%d allocs, %zu B live at most", NB, sum);
    row_check(x, "device memory accounting", sh, (double)hend - (double)h0, 0,
              hmid == h0 + sum && hend == h0);

    /* cost per call (the trainer calls it once per step) */
    double t0 = now_s();
    for (int i = 0; i < 50; i++) g->device_stats(g, &s1);
    double ms = (now_s() - t0) * 1e3 / 50;
    snprintf(sh, sizeof sh, "%.3f ms per call", ms);
    /* (no time bound under --tiny: the sanitizers slow every call) */
    row_check(x, "device_stats cost", sh, ms, 5.0, (tiny || ms <= 5.0) && nvml_sane(&s1));

    /* NVML absent: util/temp/power -1, no error, memory still known */
    setenv("LLM_NVML_LIB", "/nonexistent/libnvidia-ml.so.1", 1);
    llm_backend b2;
    char err[256];
    int ok = llm_backend_cuda_init(&b2, 1, err, sizeof err) == 0;
    if (ok) {
        struct llm_device_stats s;
        ok = b2.device_stats(&b2, &s) == 0 && s.util_pct == -1 && s.temp_c == -1 &&
             s.power_w == -1 && s.mem_used_mb > 0 && s.mem_peak_mb >= 64 &&
             !llm_backend_cuda_nvml_loaded(&b2) && llm_backend_cuda_status(&b2, err, sizeof err) == 0;
        llm_backend_cuda_free(&b2);
    }
    unsetenv("LLM_NVML_LIB");
    row_check(x, "device_stats without nvml", "LLM_NVML_LIB=missing", ok ? 0 : 1, 0, ok);
}
