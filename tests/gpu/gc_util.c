/* gc_util.c — gpu_check's shared pieces: random inputs, device buffers, the error
 * metric and the result table (declared in gpu_check.h). */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/ckpt.h"
#include "common/model.h"
#include "common/quant.h"
#include "kernels/backend.h"
#include "kernels/cuda/cuda_ext.h"
#include "tests/gpu/gc_model.h"
#include "tests/gpu/gpu_check.h"

/* ---- random inputs, buffers ---- */

uint64_t rnext(gc *x)
{
    uint64_t z = (x->rng += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

float runi(gc *x, float lo, float hi)
{
    return lo + (hi - lo) * (float)((rnext(x) >> 40) * (1.0 / 16777216.0));
}

void *xmalloc(size_t n)
{
    void *p = malloc(n ? n : 1);
    if (!p) { fprintf(stderr, "gpu_check: out of host memory\n"); exit(2); }
    return p;
}

float *rnd(gc *x, size_t n, float lo, float hi)
{
    float *p = xmalloc(n * sizeof *p);
    for (size_t i = 0; i < n; i++) p[i] = runi(x, lo, hi);
    return p;
}

int32_t *rtok(gc *x, size_t n, int V)
{
    int32_t *p = xmalloc(n * sizeof *p);
    for (size_t i = 0; i < n; i++) p[i] = (int32_t)(rnext(x) % (uint64_t)V);
    return p;
}

double *dcopy(const float *a, size_t n)
{
    double *d = xmalloc(n * sizeof *d);
    for (size_t i = 0; i < n; i++) d[i] = a[i];
    return d;
}

float *fdup(const float *a, size_t n)
{
    float *p = xmalloc(n * sizeof *p);
    memcpy(p, a, n * sizeof *p);
    return p;
}

/* device copy of host data */
void *gput(gc *x, const void *h, size_t bytes)
{
    void *d = x->g.alloc(&x->g, bytes);
    if (!d) { fprintf(stderr, "gpu_check: device allocation of %zu bytes failed\n", bytes); exit(2); }
    x->g.to_device(&x->g, d, h, bytes);
    return d;
}

/* device buffer of n floats filled with NaN, so unwritten outputs show */
float *gpoison(gc *x, size_t n)
{
    float *h = xmalloc(n * sizeof *h);
    for (size_t i = 0; i < n; i++) h[i] = NAN;
    float *d = gput(x, h, n * sizeof *h);
    free(h);
    return d;
}

float *gget(gc *x, const float *d, size_t n)
{
    float *h = xmalloc(n * sizeof *h);
    x->g.to_host(&x->g, h, d, n * sizeof *h);
    return h;
}

/* ---- errors and the table ---- */

/* max_i |a_i - r_i| / max(|r_i|, rms(r)): relative where an element is at least the
 * tensor's typical size, relative to that size below it (fp32 sums of K terms leave
 * absolute errors ~ sqrt(K) eps rms, which would swamp a near-zero element's own scale).
 * A wrong index or an unwritten element still shows as an O(1) error; NaN/inf anywhere
 * gives INFINITY. */
double err64(const float *a, const double *r, size_t n)
{
    double ss = 0;
    for (size_t i = 0; i < n; i++) ss += r[i] * r[i];
    double fl = n ? sqrt(ss / n) : 0;
    if (fl < 1e-30) fl = 1e-30;
    double e = 0;
    for (size_t i = 0; i < n; i++) {
        if (!isfinite(a[i])) return INFINITY;
        double d = fabs(a[i] - r[i]) / fmax(fabs(r[i]), fl);
        if (d > e) e = d;
    }
    return e;
}

double errff(const float *a, const float *b, size_t n)
{
    double *r = dcopy(b, n);
    for (size_t i = 0; i < n; i++) if (!isfinite(b[i])) { free(r); return INFINITY; }
    double e = err64(a, r, n);
    free(r);
    return e;
}

void row_print(gc *x, const char *op, const char *shape, double eg, double egr,
                      double er, double bound, int pass)
{
    char b1[32], b2[32], b3[32];
    snprintf(b1, sizeof b1, "%.2e", eg);
    if (egr >= 0) snprintf(b2, sizeof b2, "%.2e", egr); else snprintf(b2, sizeof b2, "-");
    if (er >= 0) snprintf(b3, sizeof b3, "%.2e", er); else snprintf(b3, sizeof b3, "-");
    char line[256];
    snprintf(line, sizeof line, "%-26s %-22s %10s %10s %10s %9.1e  %s\n", op, shape, b1, b2, b3,
             bound, pass ? "PASS" : "FAIL");
    fputs(line, stdout);
    if (x->out) fputs(line, x->out);
}

void row_result(gc *x, const char *op, const char *shape, double eg, double egr, double er,
                double bound, int pass)
{
    char msg[256];
    if (x->cuda && llm_backend_cuda_status(&x->g, msg, sizeof msg)) pass = 0;
    x->rows++;
    if (!pass) x->fails++;
    row_print(x, op, shape, eg, egr, er, bound, pass);
}

/* One output compared: a = cuda, ref = double reference, c = cpu-ref (may be NULL). */
void row(gc *x, const char *op, const char *shape, const float *a, const double *ref,
                const float *c, size_t n, double bound)
{
    double eg = err64(a, ref, n);
    double egr = (c && x->have_ref) ? errff(a, c, n) : -1;
    double er = (c && x->have_ref) ? err64(c, ref, n) : -1;
    /* the cpu-ref column is informative; cuda must meet the bound against both */
    row_result(x, op, shape, eg, egr, er, bound, eg <= bound && (egr < 0 || egr <= 2 * bound));
}

void row_det(gc *x, const char *op, const char *shape, const float *a, const float *b,
                    size_t n)
{
    int same = memcmp(a, b, n * sizeof *a) == 0;
    x->rows++;
    if (!same) x->fails++;
    row_print(x, op, shape, same ? 0.0 : 1.0, -1, -1, 0.0, same);
}


void row_check(gc *x, const char *op, const char *shape, double v, double bound, int pass)
{
    row_result(x, op, shape, v, -1, -1, bound, pass);
}

/* ---- lo outputs ---- */

double lo_unit(int lo) { return lo == LLM_DT_BF16 ? 0x1p-8 : 0x1p-11; }

uint16_t *lo_host(const float *a, size_t n, int lo)
{
    uint16_t *h = xmalloc((n ? n : 1) * 2);
    for (size_t i = 0; i < n; i++)
        h[i] = lo == LLM_DT_BF16 ? llm_quant_f32_to_bf16(a[i]) : llm_quant_f32_to_f16(a[i]);
    return h;
}

float *host_vals(const uint16_t *h, size_t n, int lo)
{
    float *f = xmalloc((n ? n : 1) * sizeof *f);
    for (size_t i = 0; i < n; i++)
        f[i] = lo == LLM_DT_BF16 ? llm_quant_bf16_to_f32(h[i]) : llm_quant_f16_to_f32(h[i]);
    return f;
}

float *lo_vals(const float *a, size_t n, int lo)
{
    uint16_t *h = lo_host(a, n, lo);
    float *f = host_vals(h, n, lo);
    free(h);
    return f;
}

float *glo_get(gc *x, const void *d, size_t n, int lo)
{
    uint16_t *h = xmalloc((n ? n : 1) * 2);
    x->g.to_host(&x->g, h, d, n * 2);
    float *f = host_vals(h, n, lo);
    free(h);
    return f;
}

void *glo_put(gc *x, const float *a, size_t n, int lo)
{
    uint16_t *h = lo_host(a, n, lo);
    void *d = gput(x, h, (n ? n : 1) * 2);
    free(h);
    return d;
}

double err_lo(const float *a, const double *r, size_t n, int lo, double k)
{
    double ss = 0;
    for (size_t i = 0; i < n; i++) ss += r[i] * r[i];
    double fl = n ? sqrt(ss / n) : 0;
    if (fl < 1e-30) fl = 1e-30;
    /* k roundings of |r|, and fp16's denormal spacing 2^-24 (half of it per rounding) */
    double u = lo_unit(lo), tiny = lo == LLM_DT_F16 ? k * 0x1p-25 : 0;
    double e = 0;
    for (size_t i = 0; i < n; i++) {
        if (!isfinite(a[i])) return INFINITY;
        double d = fabs(a[i] - r[i]) - k * u * fabs(r[i]) - tiny;
        d = (d > 0 ? d : 0) / fmax(fabs(r[i]), fl);
        if (d > e) e = d;
    }
    return e;
}

void row_lo(gc *x, const char *op, const char *shape, const float *a, const double *ref,
            const float *c, size_t n, double bound, int lo)
{
    double eg = err_lo(a, ref, n, lo, 1), egr = -1, er = -1;
    if (c && x->have_ref) {
        double *cr = dcopy(c, n);
        int fin = 1;
        for (size_t i = 0; i < n; i++) fin &= isfinite(c[i]) != 0;
        egr = fin ? err_lo(a, cr, n, lo, 2) : INFINITY;
        er = err_lo(c, ref, n, lo, 1);
        free(cr);
    }
    row_result(x, op, shape, eg, egr, er, bound, eg <= bound && (egr < 0 || egr <= 2 * bound));
}

void row_bits(gc *x, const char *op, const char *shape, const void *a, const void *b, size_t bytes)
{
    int same = memcmp(a, b, bytes) == 0;
    row_check(x, op, shape, same ? 0.0 : 1.0, 0.0, same);
}

int gc_write_model(const char *path, const llm_model_config *cfg, llm_backend *be, uint64_t seed,
                   char *msg, size_t len)
{
    llm_status st = {0};
    llm_model *m = NULL;
    llm_ckpt_writer *w = NULL;
    int rc = llm_model_new(&m, cfg, be, &st);
    if (!rc) {
        llm_model_init_gpt2(m, seed);
        float *p = llm_model_params(m);   /* host memory: be is a CPU backend */
        for (size_t i = 0; i < llm_model_num_params(cfg); i++) p[i] *= 3.0f;
        rc = llm_ckpt_writer_new(&w, &st) ||
             llm_ckpt_set_section(w, "model", llm_model_config_node(cfg), &st) ||
             llm_model_save(m, w, 0, &st) || llm_ckpt_write(w, path, &st);
    }
    if (rc) snprintf(msg, len, "%.200s", st.msg);
    llm_ckpt_writer_free(w);
    llm_model_free(m);
    return rc ? -1 : 0;
}
