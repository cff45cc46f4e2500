/* gpu_check_lo.c — gpu_check's mixed-precision and device-health checks.
 *
 * cast_lo: bit for bit against the CPU conversions of common/quant.h (random bit
 * patterns, ordinary values and the edge cases: signed zeros, infinities, NaN payloads,
 * denormals, ties, the fp16 overflow threshold 65520).
 * matmul_forward_lo / matmul_backward_lo: against double precision on the lo-rounded
 * operands (ref64) and, when the cpu-ref backend has them, its lo ops.  The operands are
 * identical after rounding and the products of two lo values are exact in fp32, so only
 * fp32 accumulation separates cuda from the reference: B_LO below.
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

/* One shape: forward and backward against ref64 on the rounded operands (and cpu-ref's
 * lo ops when present), then the backward again for determinism.  misalign: w_lo and
 * out start one element into their buffers (2- and 4-byte aligned, as a tensor inside a
 * parameter buffer may be).  tag names the GEMM path in the table. */
static void check_mm_lo(gc *x, int N, int C, int OC, int with_bias, int lo, int misalign,
                        const char *tag)
{
    char sh[64], op[64];
    snprintf(sh, sizeof sh, "N%d C%d OC%d%s%s", N, C, OC, with_bias ? " +b" : "",
             misalign ? " unal" : "");
    const char *ln = lo_name(lo);
    size_t ni = (size_t)N * C, nw = (size_t)OC * C, no = (size_t)N * OC;
    int off = misalign ? 1 : 0;
    float *inp = rnd(x, ni, -1, 1), *w = rnd(x, nw, -1, 1);
    float *bias = with_bias ? rnd(x, OC, -1, 1) : NULL;
    uint16_t *wl = enc(w, nw, lo);
    float *xr = rounded(inp, ni, lo), *wr = rounded(w, nw, lo);
    uint16_t *hw = xmalloc((nw + off) * 2);
    if (off) hw[0] = 0;
    memcpy(hw + off, wl, nw * 2);
    uint16_t *gwb = gput(x, hw, (nw + off) * 2);
    const void *gw = gwb + off;
    float *ginp = gput(x, inp, ni * 4), *gbias = bias ? gput(x, bias, OC * 4) : NULL;
    float *goutb = gpoison(x, no + off), *gout = goutb + off;
    x->g.matmul_forward_lo(&x->g, gout, ginp, gw, lo, gbias, N, C, OC);
    float *out = gget(x, gout, no);
    double *r = xmalloc(no * 8);
    r64_matmul_forward(r, xr, wr, bias, N, C, OC);
    float *c = NULL;
    if (x->have_ref && x->r.matmul_forward_lo) {
        c = xmalloc(no * 4);
        x->r.matmul_forward_lo(&x->r, c, inp, wl, lo, bias, N, C, OC);
    }
    snprintf(op, sizeof op, "matmul_fwd_lo %s%s", ln, tag);
    row(x, op, sh, out, r, c, no, B_LO);
    free(out); free(r); free(c);

    float *dout = rnd(x, no, -1, 1), *dr = rounded(dout, no, lo);
    float *di0 = rnd(x, ni, -1, 1), *dw0 = rnd(x, nw, -1, 1), *db0 = rnd(x, OC, -1, 1);
    float *gd = gput(x, dout, no * 4), *gdi = gput(x, di0, ni * 4), *gdw = gput(x, dw0, nw * 4);
    float *gdb = bias ? gput(x, db0, OC * 4) : NULL;
    x->g.matmul_backward_lo(&x->g, gdi, gdw, gdb, gd, ginp, gw, lo, N, C, OC);
    float *di = gget(x, gdi, ni), *dw = gget(x, gdw, nw), *db = bias ? gget(x, gdb, OC) : NULL;
    double *rdi = dcopy(di0, ni), *rdw = dcopy(dw0, nw), *rdb = bias ? dcopy(db0, OC) : NULL;
    r64_matmul_backward(rdi, rdw, rdb, dr, xr, wr, N, C, OC);
    float *cdi = NULL, *cdw = NULL, *cdb = NULL;
    if (x->have_ref && x->r.matmul_backward_lo) {
        cdi = fdup(di0, ni); cdw = fdup(dw0, nw); cdb = bias ? fdup(db0, OC) : NULL;
        x->r.matmul_backward_lo(&x->r, cdi, cdw, cdb, dout, inp, wl, lo, N, C, OC);
    }
    snprintf(op, sizeof op, "matmul_bwd_lo %s%s dinp", ln, tag);
    row(x, op, sh, di, rdi, cdi, ni, B_LO);
    snprintf(op, sizeof op, "matmul_bwd_lo %s%s dw", ln, tag);
    row(x, op, sh, dw, rdw, cdw, nw, B_LO);
    if (bias) {
        snprintf(op, sizeof op, "matmul_bwd_lo %s%s dbias", ln, tag);
        row(x, op, sh, db, rdb, cdb, OC, B_LO);
    }
    /* the same backward again from the same state: bit-identical */
    x->g.to_device(&x->g, gdi, di0, ni * 4);
    x->g.to_device(&x->g, gdw, dw0, nw * 4);
    if (bias) x->g.to_device(&x->g, gdb, db0, OC * 4);
    x->g.matmul_backward_lo(&x->g, gdi, gdw, gdb, gd, ginp, gw, lo, N, C, OC);
    float *dw2 = gget(x, gdw, nw), *db2 = bias ? gget(x, gdb, OC) : NULL;
    snprintf(op, sizeof op, "matmul_bwd_lo %s%s determ.", ln, tag);
    int same = memcmp(dw, dw2, nw * 4) == 0 && (!bias || memcmp(db, db2, OC * 4) == 0);
    row_check(x, op, sh, same ? 0.0 : 1.0, 0.0, same);
    free(dw2); free(db2);
    free(inp); free(w); free(bias); free(wl); free(xr); free(wr); free(hw);
    free(dout); free(dr); free(di0); free(dw0); free(db0); free(di); free(dw); free(db);
    free(rdi); free(rdw); free(rdb); free(cdi); free(cdw); free(cdb);
    void *bufs[] = {gwb, ginp, gbias, goutb, gd, gdi, gdw, gdb};
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
        float *inp = rnd(x, (size_t)N * C, -1, 1), *w = rnd(x, (size_t)OC * C, -1, 1);
        uint16_t *wl = enc(w, (size_t)OC * C, lo);
        float *xr = rounded(inp, (size_t)N * C, lo), *wr = rounded(w, (size_t)OC * C, lo);
        float *gi = gput(x, inp, (size_t)N * C * 4), *go = gpoison(x, (size_t)N * OC);
        void *gw = gput(x, wl, (size_t)OC * C * 2);
        x->g.matmul_forward_lo(&x->g, go, gi, gw, lo, NULL, N, C, OC);
        float *out = gget(x, go, (size_t)N * OC);
        double *r = xmalloc((size_t)N * OC * 8);
        r64_matmul_forward(r, xr, wr, NULL, N, C, OC);
        double e = err64(out, r, (size_t)N * OC);
        if (!(e <= worst)) worst = e;
        free(inp); free(w); free(wl); free(xr); free(wr); free(out); free(r);
        x->g.free(&x->g, gi); x->g.free(&x->g, go); x->g.free(&x->g, gw);
    }
    char sh[64];
    snprintf(sh, sizeof sh, "%d shapes N1..%d C3 OC5", shapes + 1, shapes);
    row_check(x, "matmul_fwd_lo plan churn", sh, worst, B_LO, worst <= B_LO);
}

/* fp16 overflow (|x| >= 65520) must reach the outputs as inf/NaN: what dynamic loss
 * scaling looks for. */
static void check_overflow(gc *x)
{
    const int N = 4, C = 8, OC = 5, lo = LLM_DT_F16;
    float *inp = rnd(x, N * C, 0.5f, 1), *w = rnd(x, OC * C, 0.5f, 1), *dout = rnd(x, N * OC, -1, 1);
    inp[2 * C + 3] = 7e4f;           /* row 2 of the forward input */
    dout[1 * OC + 2] = 1e5f;         /* row 1, column 2 of dout */
    uint16_t *wl = enc(w, OC * C, lo);
    float *z = calloc(N * C + OC * C + OC, sizeof *z);
    float *gi = gput(x, inp, N * C * 4), *gd = gput(x, dout, N * OC * 4), *go = gpoison(x, N * OC);
    void *gw = gput(x, wl, OC * C * 2);
    float *gdi = gput(x, z, N * C * 4), *gdw = gput(x, z, OC * C * 4), *gdb = gput(x, z, OC * 4);
    x->g.matmul_forward_lo(&x->g, go, gi, gw, lo, NULL, N, C, OC);
    x->g.matmul_backward_lo(&x->g, gdi, gdw, gdb, gd, gi, gw, lo, N, C, OC);
    float *o = gget(x, go, N * OC), *di = gget(x, gdi, N * C), *dw = gget(x, gdw, OC * C),
          *db = gget(x, gdb, OC);
    int ok = 1;
    for (int n = 0; n < N; n++)
        for (int k = 0; k < OC; k++) ok &= (n == 2) == !isfinite(o[n * OC + k]);
    for (int n = 0; n < N; n++)
        for (int c = 0; c < C; c++) ok &= (n == 1) == !isfinite(di[n * C + c]);
    for (int k = 0; k < OC; k++) {
        /* dw(k,c) sums dout[n,k] x inp[n,c]: column 2 of dout and column 3 of inp (its
         * 7e4 in row 2) hold an inf */
        for (int c = 0; c < C; c++) ok &= (k == 2 || c == 3) == !isfinite(dw[k * C + c]);
        ok &= k == 2 ? db[k] == INFINITY : isfinite(db[k]);
    }
    row_check(x, "fp16 overflow -> inf", "N4 C8 OC5", ok ? 0.0 : 1.0, 0.0, ok);
    free(inp); free(w); free(dout); free(wl); free(z); free(o); free(di); free(dw); free(db);
    void *bufs[] = {gi, gd, go, gw, gdi, gdw, gdb};
    for (size_t i = 0; i < sizeof bufs / sizeof *bufs; i++) x->g.free(&x->g, bufs[i]);
}

/* An lo that is neither bf16 nor f16 is recorded as an error by each op (cuda only). */
static void check_bad_lo(gc *x)
{
    float *g = x->g.alloc(&x->g, 64 * 4);
    char msg[256];
    int refused = 0;
    fprintf(stderr, "gpu_check: 3 expected 'neither bf16 nor f16' errors follow\n");
    x->g.cast_lo(&x->g, g, g + 32, 16, LLM_DT_F32);
    refused += llm_backend_cuda_status(&x->g, msg, sizeof msg) != 0 && strstr(msg, "neither bf16 nor f16");
    x->g.matmul_forward_lo(&x->g, g, g + 16, g + 32, LLM_DT_I8, NULL, 2, 2, 2);
    refused += llm_backend_cuda_status(&x->g, msg, sizeof msg) != 0 && strstr(msg, "neither bf16 nor f16");
    x->g.matmul_backward_lo(&x->g, g, g + 8, NULL, g + 16, g + 24, g + 32, LLM_DT_F32, 2, 2, 2);
    refused += llm_backend_cuda_status(&x->g, msg, sizeof msg) != 0 && strstr(msg, "neither bf16 nor f16");
    x->g.free(&x->g, g);
    row_check(x, "lo ops refuse lo=f32/i8", "3 calls", 3 - refused, 0.0, refused == 3);
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
        check_mm_lo(x, 1, 1, 1, 1, lo, 0, "");
        check_mm_lo(x, 5, 7, 3, 0, lo, 0, "");
        check_mm_lo(x, 3, 0, 5, 1, lo, 0, "");          /* C = 0: out = bias, dbias only */
        check_mm_lo(x, 37, 61, 83, 1, lo, 0, "");
        check_mm_lo(x, 37, 61, 83, 0, lo, 1, "");
        if (!tiny) {
            check_mm_lo(x, 130, 768, 2304, 1, lo, 0, "");
            check_mm_lo(x, 1025, 65, 127, 1, lo, 1, "");
        }
    }
    if (!tiny) {
        check_mm_lo(x, 257, 3072, 768, 1, LLM_DT_BF16, 0, "");
        check_mm_lo(x, 33, 96, 50304, 0, LLM_DT_BF16, 0, "");
        check_mm_lo(x, 64, 768, 768, 1, LLM_DT_F16, 0, "");
    }
    check_overflow(x);
    check_plan_churn(x, tiny ? 8 : 40);
    if (!x->cuda) return;
    check_bad_lo(x);
    /* the cublasGemmEx path (taken when cuBLASLt refuses a shape), forced */
    long before[2], after[2];
    llm_backend_cuda_lo_gemm_path(&x->g, 1, before);
    check_mm_lo(x, 37, 61, 83, 1, LLM_DT_BF16, 0, " ex");
    check_mm_lo(x, 37, 61, 83, 0, LLM_DT_F16, 1, " ex");
    if (!tiny) check_mm_lo(x, 130, 768, 2304, 1, LLM_DT_BF16, 1, " ex");
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
