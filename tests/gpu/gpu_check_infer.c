/* gpu_check_infer.c — the inference ops (embed_rows, matmul_rows, kv_store,
 * attention_rows) of the backend under test against the cpu-ref backend's inference
 * kernels, on random inputs at odd shapes with several cache slots and positions; plus
 * the batch invariance backend.h promises (a row's result does not depend on N). */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/backend.h"
#include "tests/gpu/gpu_check.h"

enum { DT_F32 = 0, DT_BF16 = 2 };   /* llm_dtype values (common/ckpt.h) */

typedef struct {
    llm_backend *g;     /* under test (device memory) */
    llm_backend r;      /* cpu-ref */
    uint64_t rng;
    gc_report_fn report;
    void *rx;
} ic;

static uint64_t inext(ic *x)
{
    x->rng ^= x->rng << 13;
    x->rng ^= x->rng >> 7;
    x->rng ^= x->rng << 17;
    return x->rng;
}

static void *imalloc(size_t n)
{
    void *p = malloc(n ? n : 1);
    if (!p) { fprintf(stderr, "gpu_check: out of host memory\n"); exit(2); }
    return p;
}

static float *irnd(ic *x, size_t n)
{
    float *a = imalloc(n * sizeof *a);
    for (size_t i = 0; i < n; i++) a[i] = (float)((inext(x) >> 11) * (1.0 / 9007199254740992.0)) * 2 - 1;
    return a;
}

/* bf16 bits of f (round to nearest even; inputs are finite) and back */
static uint16_t to_bf16(float f)
{
    uint32_t u;
    memcpy(&u, &f, 4);
    u += 0x7fff + ((u >> 16) & 1);
    return (uint16_t)(u >> 16);
}

static float from_bf16(uint16_t h)
{
    uint32_t u = (uint32_t)h << 16;
    float f;
    memcpy(&f, &u, 4);
    return f;
}

/* weights of dtype dt from random f32: *host_f32 gets the values the device sees */
static void *iweights(ic *x, size_t n, int dt, float **host_f32, size_t *bytes)
{
    float *w = irnd(x, n);
    if (dt == DT_F32) { *host_f32 = w; *bytes = n * 4; return w; }
    uint16_t *h = imalloc(n * 2);
    for (size_t i = 0; i < n; i++) { h[i] = to_bf16(w[i]); w[i] = from_bf16(h[i]); }
    *host_f32 = w;
    *bytes = n * 2;
    return h;
}

static void *iput(ic *x, const void *h, size_t bytes)
{
    void *d = x->g->alloc(x->g, bytes ? bytes : 1);
    if (!d) { fprintf(stderr, "gpu_check: device allocation of %zu bytes failed\n", bytes); exit(2); }
    if (bytes) x->g->to_device(x->g, d, h, bytes);
    return d;
}

static float *iget(ic *x, const void *d, size_t n)
{
    float *h = imalloc(n * sizeof *h);
    x->g->to_host(x->g, h, d, n * sizeof *h);
    return h;
}

/* as gpu_check's err64: relative to max(|b_i|, rms(b)); non-finite a gives INFINITY */
static double ierr(const float *a, const float *b, size_t n)
{
    double ss = 0;
    for (size_t i = 0; i < n; i++) ss += (double)b[i] * b[i];
    double fl = n ? sqrt(ss / n) : 0;
    if (fl < 1e-30) fl = 1e-30;
    double e = 0;
    for (size_t i = 0; i < n; i++) {
        if (!isfinite(a[i]) || !isfinite(b[i])) return INFINITY;
        double d = fabs((double)a[i] - b[i]) / fmax(fabs((double)b[i]), fl);
        if (d > e) e = d;
    }
    return e;
}

static const char *dtn(int dt) { return dt == DT_BF16 ? " bf16" : ""; }

static void check_embed_rows(ic *x, int N, int C, int Vp, int maxT, int dt)
{
    char sh[64];
    snprintf(sh, sizeof sh, "N%d C%d Vp%d%s", N, C, Vp, dtn(dt));
    float *wte32;
    size_t wb;
    void *wte = iweights(x, (size_t)Vp * C, dt, &wte32, &wb);
    float *wpe = irnd(x, (size_t)maxT * C);
    int32_t *ids = imalloc(N * 4), *pos = imalloc(N * 4);
    for (int i = 0; i < N; i++) { ids[i] = (int32_t)(inext(x) % Vp); pos[i] = (int32_t)(inext(x) % maxT); }
    if (N > 1) { ids[N - 1] = Vp - 1; pos[N - 1] = maxT - 1; }   /* the last row of each table */
    void *gwte = iput(x, wte, wb), *gwpe = iput(x, wpe, (size_t)maxT * C * 4);
    void *gids = iput(x, ids, N * 4), *gpos = iput(x, pos, N * 4);
    size_t no = (size_t)N * C;
    float *nan = imalloc(no * 4);
    for (size_t i = 0; i < no; i++) nan[i] = NAN;
    float *gout = iput(x, nan, no * 4);
    x->g->embed_rows(x->g, gout, gids, gpos, gwte, dt, gwpe, N, C);
    float *out = iget(x, gout, no), *ref = imalloc(no * 4);
    x->r.embed_rows(&x->r, ref, ids, pos, wte32, DT_F32, wpe, N, C);
    x->report(x->rx, "embed_rows", sh, ierr(out, ref, no), 1e-6);
    if (wte != wte32) free(wte);
    free(wte32); free(wpe); free(ids); free(pos); free(nan); free(out); free(ref);
    void *b[] = {gwte, gwpe, gids, gpos, gout};
    for (int i = 0; i < 5; i++) x->g->free(x->g, b[i]);
}

static void check_matmul_rows(ic *x, int N, int C, int OC, int with_bias, int dt)
{
    char sh[64];
    snprintf(sh, sizeof sh, "N%d C%d OC%d%s%s", N, C, OC, with_bias ? " +b" : "", dtn(dt));
    float *w32;
    size_t wb;
    void *w = iweights(x, (size_t)OC * C, dt, &w32, &wb);
    float *inp = irnd(x, (size_t)N * C), *bias = with_bias ? irnd(x, OC) : NULL;
    void *gw = iput(x, w, wb);
    float *ginp = iput(x, inp, (size_t)N * C * 4), *gb = bias ? iput(x, bias, OC * 4) : NULL;
    size_t no = (size_t)N * OC;
    float *gout = x->g->alloc(x->g, no * 4), *gone = x->g->alloc(x->g, (size_t)OC * 4);
    if (!gout || !gone) { fprintf(stderr, "gpu_check: device allocation failed\n"); exit(2); }
    x->g->matmul_rows(x->g, gout, ginp, gw, dt, gb, N, C, OC);
    float *out = iget(x, gout, no), *ref = imalloc(no * 4);
    x->r.matmul_rows(&x->r, ref, inp, w32, DT_F32, bias, N, C, OC);
    x->report(x->rx, "matmul_rows", sh, ierr(out, ref, no), 1e-4);
    /* batch invariance: each row alone gives the same bits as in the batch */
    double diff = 0;
    for (int i = 0; i < N && diff == 0; i++) {
        x->g->matmul_rows(x->g, gone, ginp + (size_t)i * C, gw, dt, gb, 1, C, OC);
        float *one = iget(x, gone, OC);
        if (memcmp(one, out + (size_t)i * OC, (size_t)OC * 4)) diff = 1;
        free(one);
    }
    x->report(x->rx, "matmul_rows batch=single", sh, diff, 0);
    if (w != w32) free(w);
    free(w32); free(inp); free(bias); free(out); free(ref);
    void *b[] = {gw, ginp, gb, gout, gone};
    for (int i = 0; i < 5; i++) if (b[i]) x->g->free(x->g, b[i]);
}

/* N rows at distinct (slot, pos) cells of S slots x maxT positions: row 0 at (0,0), row 1
 * at (S-1, maxT-1), the rest random; caches start random (earlier tokens) on both sides.
 * kv_store then attention_rows; compares both caches and the output. */
static void check_attention_rows(ic *x, int N, int S, int maxT, int C, int NH)
{
    char sh[64];
    snprintf(sh, sizeof sh, "N%d S%d T%d C%d NH%d", N, S, maxT, C, NH);
    size_t cells = (size_t)S * maxT;
    if ((size_t)N > cells) N = (int)cells;
    size_t *cell = imalloc(cells * sizeof *cell);
    for (size_t i = 0; i < cells; i++) cell[i] = i;
    size_t last = cells - 1;
    if (cells > 2) { cell[last] = 1; cell[1] = last; }   /* (S-1, maxT-1) into place 1 */
    for (size_t i = cells - 1; i > 2; i--) {   /* shuffle places 2.. */
        size_t j = 2 + inext(x) % (i - 1);
        size_t t = cell[i]; cell[i] = cell[j]; cell[j] = t;
    }
    int32_t *slot = imalloc(N * 4), *pos = imalloc(N * 4);
    for (int i = 0; i < N; i++) { slot[i] = (int32_t)(cell[i] / maxT); pos[i] = (int32_t)(cell[i] % maxT); }
    size_t nk = cells * C, nq = (size_t)N * 3 * C, no = (size_t)N * C;
    float *kc = irnd(x, nk), *vc = irnd(x, nk), *qkv = irnd(x, nq);
    float *gkc = iput(x, kc, nk * 4), *gvc = iput(x, vc, nk * 4), *gqkv = iput(x, qkv, nq * 4);
    void *gslot = iput(x, slot, N * 4), *gpos = iput(x, pos, N * 4);
    float *gout = x->g->alloc(x->g, no * 4);
    if (!gout) { fprintf(stderr, "gpu_check: device allocation failed\n"); exit(2); }
    x->g->kv_store(x->g, gkc, gvc, gqkv, gslot, gpos, N, C, maxT);
    x->g->attention_rows(x->g, gout, gqkv, gkc, gvc, gslot, gpos, N, C, NH, maxT);
    float *okc = iget(x, gkc, nk), *ovc = iget(x, gvc, nk), *out = iget(x, gout, no);
    float *ref = imalloc(no * 4);
    x->r.kv_store(&x->r, kc, vc, qkv, slot, pos, N, C, maxT);
    x->r.attention_rows(&x->r, ref, qkv, kc, vc, slot, pos, N, C, NH, maxT);
    x->report(x->rx, "kv_store k", sh, memcmp(okc, kc, nk * 4) ? 1.0 : 0.0, 0);
    x->report(x->rx, "kv_store v", sh, memcmp(ovc, vc, nk * 4) ? 1.0 : 0.0, 0);
    x->report(x->rx, "attention_rows", sh, ierr(out, ref, no), 1e-4);
    free(cell); free(slot); free(pos); free(kc); free(vc); free(qkv);
    free(okc); free(ovc); free(out); free(ref);
    void *b[] = {gkc, gvc, gqkv, gslot, gpos, gout};
    for (int i = 0; i < 6; i++) x->g->free(x->g, b[i]);
}

int gpu_check_infer(llm_backend *g, uint64_t seed, int tiny, gc_report_fn report, void *rx)
{
    ic x;
    memset(&x, 0, sizeof x);
    x.g = g;
    x.rng = seed * 2654435761u + 0x9e3779b97f4a7c15ull;
    if (!x.rng) x.rng = 1;
    x.report = report;
    x.rx = rx;
    int filled = g->infer_dtype_ok && g->embed_rows && g->matmul_rows && g->kv_store &&
                 g->attention_rows;
    report(rx, "backend fills infer ops", g->name, filled ? 0 : 1, 0);
    if (!filled) return -1;
    if (llm_backend_cpu_init(&x.r, 1, 1)) {
        report(rx, "cpu-ref backend for infer ops", "-", 1, 0);
        return -1;
    }
    llm_backend_cpu_infer_init(&x.r, 1);
    int bf16 = g->infer_dtype_ok(g, DT_BF16);
    check_embed_rows(&x, 1, 1, 1, 1, DT_F32);
    check_embed_rows(&x, 7, 61, 500, 37, DT_F32);
    if (bf16) check_embed_rows(&x, 5, 96, 513, 129, DT_BF16);
    check_matmul_rows(&x, 1, 1, 1, 1, DT_F32);
    check_matmul_rows(&x, 1, 61, 83, 1, DT_F32);
    check_matmul_rows(&x, 7, 61, 83, 0, DT_F32);
    check_matmul_rows(&x, 3, 65, 127, 1, DT_F32);
    if (bf16) check_matmul_rows(&x, 3, 65, 127, 1, DT_BF16);
    check_attention_rows(&x, 1, 1, 1, 8, 1);
    check_attention_rows(&x, 5, 3, 37, 48, 3);
    check_attention_rows(&x, 9, 4, 300, 72, 2);     /* several 128-position chunks */
    check_attention_rows(&x, 4, 2, 131, 260, 1);    /* head size above the block size */
    if (!tiny) {
        check_embed_rows(&x, 32, 768, 50304, 1024, DT_F32);
        check_matmul_rows(&x, 5, 768, 2304, 1, DT_F32);
        check_matmul_rows(&x, 33, 768, 50304, 0, DT_F32);
        if (bf16) check_matmul_rows(&x, 32, 768, 3072, 1, DT_BF16);
        check_attention_rows(&x, 32, 32, 1024, 768, 12);
    }
    llm_backend_cpu_free(&x.r);
    return 0;
}
