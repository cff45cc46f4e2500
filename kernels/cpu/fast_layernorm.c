/* fast_layernorm.c — "cpu" layernorm and embedding kernels, forward and backward.
 * Rows are split across be->threads OpenMP threads; the per-row loops are plain loops
 * vectorised by the compiler (omp simd), compiled once for AVX2/FMA and once generic. */
#include <math.h>
#include <string.h>

#include "kernels/cpu/cpu_ops.h"
#include "kernels/cpu/simd.h"

/* One row: out, *mean, *rstd (either may be NULL) of x.  Compiled once per target into
 * a function that is never inlined, so that layernorm_forward and
 * residual_layernorm_forward run the very same instructions on a row (bit-identical). */
LLM_INLINE void ln_fwd_row(float *o, float *mean, float *rstd, const float *x,
                           const float *w, const float *b, int C)
{
    float s = 0, v = 0;
#pragma omp simd reduction(+ : s)
    for (int c = 0; c < C; c++)
        s += x[c];
    float m = s / C;
    /* two-pass variance: no cancellation for rows with a large mean */
#pragma omp simd reduction(+ : v)
    for (int c = 0; c < C; c++)
        v += (x[c] - m) * (x[c] - m);
    float rs = 1.0f / sqrtf(v / C + 1e-5f);
#pragma omp simd
    for (int c = 0; c < C; c++)
        o[c] = (x[c] - m) * rs * w[c] + b[c];
    if (mean)
        *mean = m;
    if (rstd)
        *rstd = rs;
}

LLM_AVX2 __attribute__((noinline)) static void ln_row_avx2(float *o, float *mean, float *rstd,
                                                           const float *x, const float *w,
                                                           const float *b, int C)
{
    ln_fwd_row(o, mean, rstd, x, w, b, C);
}

__attribute__((noinline)) static void ln_row_generic(float *o, float *mean, float *rstd,
                                                     const float *x, const float *w,
                                                     const float *b, int C)
{
    ln_fwd_row(o, mean, rstd, x, w, b, C);
}

/* Rows [r0, r1): with a (and b, res) the row of res = a + b first, still in cache when
 * the layernorm reads it back; without, the layernorm of inp. */
LLM_INLINE void ln_fwd_rows(float *out, float *mean, float *rstd, const float *inp,
                            float *res, const float *a, const float *b2, const float *w,
                            const float *b, int C, size_t r0, size_t r1, int avx2)
{
    for (size_t i = r0; i < r1; i++) {
        const float *x = inp + i * C;
        if (a) {
            float *r = res + i * C;
            const float *ra = a + i * C, *rb = b2 + i * C;
#pragma omp simd
            for (int c = 0; c < C; c++)
                r[c] = ra[c] + rb[c];
            x = r;
        }
        float *mi = mean ? mean + i : NULL, *ri = rstd ? rstd + i : NULL;
        if (avx2)
            ln_row_avx2(out + i * C, mi, ri, x, w, b, C);
        else
            ln_row_generic(out + i * C, mi, ri, x, w, b, C);
    }
}

/* Per row: dinp += rstd (dxh - mean(dxh) - xh mean(dxh xh)), dxh = dout w; dw/db partial
 * sums for this slice of rows go to pdw/pdb (zeroed by the caller). */
LLM_INLINE void ln_bwd_rows(float *dinp, float *pdw, float *pdb, const float *dout,
                            const float *inp, const float *w, const float *mean,
                            const float *rstd, int C, size_t r0, size_t r1)
{
    for (size_t i = r0; i < r1; i++) {
        const float *x = inp + i * C, *dy = dout + i * C;
        float *dx = dinp + i * C;
        float m = mean[i], rs = rstd[i], g = 0, gx = 0;
#pragma omp simd reduction(+ : g, gx)
        for (int c = 0; c < C; c++) {
            float xh = (x[c] - m) * rs, dxh = dy[c] * w[c];
            g += dxh;
            gx += dxh * xh;
            pdw[c] += dy[c] * xh;
            pdb[c] += dy[c];
        }
        g /= C;
        gx /= C;
#pragma omp simd
        for (int c = 0; c < C; c++) {
            float xh = (x[c] - m) * rs;
            dx[c] += rs * (dy[c] * w[c] - g - xh * gx);
        }
    }
}

LLM_AVX2 static void ln_fwd_avx2(float *out, float *mean, float *rstd, const float *inp,
                                 float *res, const float *a, const float *b2, const float *w,
                                 const float *b, int C, size_t r0, size_t r1)
{
    ln_fwd_rows(out, mean, rstd, inp, res, a, b2, w, b, C, r0, r1, 1);
}

static void ln_fwd_generic(float *out, float *mean, float *rstd, const float *inp,
                           float *res, const float *a, const float *b2, const float *w,
                           const float *b, int C, size_t r0, size_t r1)
{
    ln_fwd_rows(out, mean, rstd, inp, res, a, b2, w, b, C, r0, r1, 0);
}

LLM_AVX2 static void ln_bwd_avx2(float *dinp, float *pdw, float *pdb, const float *dout,
                                 const float *inp, const float *w, const float *mean,
                                 const float *rstd, int C, size_t r0, size_t r1)
{
    ln_bwd_rows(dinp, pdw, pdb, dout, inp, w, mean, rstd, C, r0, r1);
}

static void ln_bwd_generic(float *dinp, float *pdw, float *pdb, const float *dout,
                           const float *inp, const float *w, const float *mean,
                           const float *rstd, int C, size_t r0, size_t r1)
{
    ln_bwd_rows(dinp, pdw, pdb, dout, inp, w, mean, rstd, C, r0, r1);
}

static size_t row_split(size_t n, int part, int parts, int hi)
{
    return n * (size_t)(part + hi) / (size_t)parts;
}

/* The layernorm of inp, or (a non-NULL) of res = a + b2, rows split across threads. */
static void ln_forward(llm_backend *be, float *out, float *mean, float *rstd, const float *inp,
                       float *res, const float *a, const float *b2, const float *w,
                       const float *b, int N, int C)
{
    int nt = llm_cpu_threads(be), avx2 = llm_cpu_avx2(be);
#pragma omp parallel num_threads(nt) if ((size_t)N * C > 16384)
    {
        int id = omp_get_thread_num(), p = omp_get_num_threads();
        size_t r0 = row_split(N, id, p, 0), r1 = row_split(N, id, p, 1);
        if (avx2)
            ln_fwd_avx2(out, mean, rstd, inp, res, a, b2, w, b, C, r0, r1);
        else
            ln_fwd_generic(out, mean, rstd, inp, res, a, b2, w, b, C, r0, r1);
    }
}

void llm_fast_layernorm_forward(llm_backend *be, float *out, float *mean, float *rstd,
                                const float *inp, const float *w, const float *b, int N, int C)
{
    ln_forward(be, out, mean, rstd, inp, NULL, NULL, NULL, w, b, N, C);
}

void llm_fast_residual_layernorm_forward(llm_backend *be, float *res, float *out, float *mean,
                                         float *rstd, const float *a, const float *b,
                                         const float *w, const float *bias, int N, int C)
{
    /* res may alias a or b: each element is read then written by one thread */
    ln_forward(be, out, mean, rstd, res, res, a, b, w, bias, N, C);
}

void llm_fast_layernorm_backward(llm_backend *be, float *dinp, float *dw, float *db,
                                 const float *dout, const float *inp, const float *w,
                                 const float *mean, const float *rstd, int N, int C)
{
    int nt = llm_cpu_threads(be), avx2 = llm_cpu_avx2(be);
    if ((size_t)N * C <= 16384)
        nt = 1;
    /* per-thread dw/db partials, reduced in thread order: deterministic, no atomics */
    size_t stride = ((size_t)C + 15) & ~(size_t)15;
    float *part = llm_cpu_scratch(be, 2 * stride * nt);
    if (!part) {
        nt = 1;
        part = NULL;
    }
#pragma omp parallel num_threads(nt)
    {
        int id = omp_get_thread_num(), p = omp_get_num_threads();
        size_t r0 = row_split(N, id, p, 0), r1 = row_split(N, id, p, 1);
        float *pdw = part ? part + 2 * stride * id : dw, *pdb = part ? pdw + stride : db;
        if (part)
            memset(pdw, 0, sizeof(float) * 2 * stride);
        if (avx2)
            ln_bwd_avx2(dinp, pdw, pdb, dout, inp, w, mean, rstd, C, r0, r1);
        else
            ln_bwd_generic(dinp, pdw, pdb, dout, inp, w, mean, rstd, C, r0, r1);
#pragma omp barrier
        if (part) {
            /* reduce: each thread owns a slice of the channels */
            size_t c0 = row_split(C, id, p, 0), c1 = row_split(C, id, p, 1);
            for (int t = 0; t < p; t++) {
                const float *tw = part + 2 * stride * t, *tb = tw + stride;
                for (size_t c = c0; c < c1; c++) {
                    dw[c] += tw[c];
                    db[c] += tb[c];
                }
            }
        }
    }
}

void llm_fast_embed_forward(llm_backend *be, float *out, const int32_t *inp, const float *wte,
                            const float *wpe, int B, int T, int C)
{
    int nt = llm_cpu_threads(be);
#pragma omp parallel for num_threads(nt) schedule(static) if ((size_t)B * T * C > 16384)
    for (int r = 0; r < B * T; r++) {
        const float *e = wte + (size_t)inp[r] * C, *p = wpe + (size_t)(r % T) * C;
        float *o = out + (size_t)r * C;
#pragma omp simd
        for (int c = 0; c < C; c++)
            o[c] = e[c] + p[c];
    }
}

void llm_fast_embed_backward(llm_backend *be, float *dwte, float *dwpe, const float *dout,
                             const int32_t *inp, int B, int T, int C)
{
    int nt = llm_cpu_threads(be);
    /* Each thread owns a slice of the channels and walks every token in order: no two
     * threads touch the same element and the summation order is fixed (deterministic,
     * whatever the thread count). */
#pragma omp parallel num_threads(nt) if ((size_t)B * T * C > 16384)
    {
        size_t c0, c1;
        llm_cpu_split((size_t)C, omp_get_thread_num(), omp_get_num_threads(), &c0, &c1);
        for (int r = 0; r < B * T; r++) {
            const float *d = dout + (size_t)r * C;
            float *e = dwte + (size_t)inp[r] * C, *p = dwpe + (size_t)(r % T) * C;
#pragma omp simd
            for (size_t c = c0; c < c1; c++) {
                e[c] += d[c];
                p[c] += d[c];
            }
        }
    }
}
