/* fast_elementwise.c — "cpu" elementwise kernels: GELU forward/backward, residual add,
 * gradient accumulation, global squared norm, AdamW.  Each is one pass over memory, split
 * into contiguous slices across be->threads OpenMP threads, with an AVX2/FMA body chosen
 * at run time and a portable one otherwise. */
#include <math.h>

#include "kernels/cpu/cpu_ops.h"
#include "kernels/cpu/mixed.h"
#include "kernels/cpu/simd.h"

/* Below this many elements a parallel region costs more than it saves. */
#define PAR_MIN 32768

#define GELU_K 0.7978845608028654f /* sqrt(2/pi) */
#define GELU_A 0.044715f

/* gelu(x) = 0.5 x (1 + tanh(u)) = x * sigmoid(2u), u = k (x + a x^3): the sigmoid form
 * needs one exp and has no cancellation near 0. */
LLM_AVX2 static inline __m256 sig2u8(__m256 x)
{
    __m256 x2 = _mm256_mul_ps(x, x);
    __m256 u = _mm256_mul_ps(_mm256_mul_ps(_mm256_set1_ps(GELU_K), x),
                             _mm256_fmadd_ps(_mm256_set1_ps(GELU_A), x2, _mm256_set1_ps(1.0f)));
    __m256 e = llm_exp8(_mm256_mul_ps(_mm256_set1_ps(-2.0f), u));
    return _mm256_div_ps(_mm256_set1_ps(1.0f), _mm256_add_ps(_mm256_set1_ps(1.0f), e));
}

static inline float sig2u(float x)
{
    float u = GELU_K * x * (1.0f + GELU_A * x * x);
    return 1.0f / (1.0f + expf(-2.0f * u));
}

LLM_AVX2 static void gelu_fwd_avx2(float *out, const float *x, size_t lo, size_t hi)
{
    size_t i = lo;
    for (; i + 8 <= hi; i += 8) {
        __m256 v = _mm256_loadu_ps(x + i);
        _mm256_storeu_ps(out + i, _mm256_mul_ps(v, sig2u8(v)));
    }
    if (i < hi) {
        __m256i m = llm_mask8((int)(hi - i));
        __m256 v = _mm256_maskload_ps(x + i, m);
        _mm256_maskstore_ps(out + i, m, _mm256_mul_ps(v, sig2u8(v)));
    }
}

/* d gelu / dx = s + 2 x s (1 - s) u',  s = sigmoid(2u) = 1 / (1 + e), e = exp(-2u),
 * u' = k (1 + 3 a x^2).  1 - s is taken as e s: 1 - s itself loses all its digits where
 * s is near 1, and 2 x u' magnifies that error. */
LLM_AVX2 static inline __m256 gelu_grad8(__m256 x, __m256 d, __m256 acc)
{
    __m256 x2 = _mm256_mul_ps(x, x), one = _mm256_set1_ps(1.0f);
    __m256 u = _mm256_mul_ps(_mm256_mul_ps(_mm256_set1_ps(GELU_K), x),
                             _mm256_fmadd_ps(_mm256_set1_ps(GELU_A), x2, one));
    __m256 e = llm_exp8(_mm256_mul_ps(_mm256_set1_ps(-2.0f), u));
    __m256 s = _mm256_div_ps(one, _mm256_add_ps(one, e));
    __m256 du = _mm256_mul_ps(_mm256_set1_ps(GELU_K),
                              _mm256_fmadd_ps(_mm256_set1_ps(3.0f * GELU_A), x2, one));
    __m256 t = _mm256_mul_ps(_mm256_mul_ps(_mm256_add_ps(x, x), du),
                             _mm256_mul_ps(_mm256_mul_ps(e, s), s));
    return _mm256_fmadd_ps(_mm256_add_ps(s, t), d, acc);
}

LLM_AVX2 static void gelu_bwd_avx2(float *dinp, const float *x, const float *dout, size_t lo,
                                   size_t hi)
{
    size_t i = lo;
    for (; i + 8 <= hi; i += 8)
        _mm256_storeu_ps(dinp + i, gelu_grad8(_mm256_loadu_ps(x + i), _mm256_loadu_ps(dout + i),
                                              _mm256_loadu_ps(dinp + i)));
    if (i < hi) {
        __m256i m = llm_mask8((int)(hi - i));
        __m256 g = gelu_grad8(_mm256_maskload_ps(x + i, m), _mm256_maskload_ps(dout + i, m),
                              _mm256_maskload_ps(dinp + i, m));
        _mm256_maskstore_ps(dinp + i, m, g);
    }
}

static void gelu_fwd_generic(float *out, const float *x, size_t lo, size_t hi)
{
    for (size_t i = lo; i < hi; i++)
        out[i] = x[i] * sig2u(x[i]);
}

static void gelu_bwd_generic(float *dinp, const float *x, const float *dout, size_t lo,
                             size_t hi)
{
    for (size_t i = lo; i < hi; i++) {
        /* e clamped finite: e s s must be 0, not inf * 0, where gelu saturates */
        float u = GELU_K * x[i] * (1.0f + GELU_A * x[i] * x[i]), e = expf(fminf(-2.0f * u, 88.0f));
        float s = 1.0f / (1.0f + e), du = GELU_K * (1.0f + 3.0f * GELU_A * x[i] * x[i]);
        dinp[i] += (s + 2.0f * x[i] * du * (e * s * s)) * dout[i];
    }
}

/* Runs STMT with lo/hi set to this thread's slice of [0, n). */
#define PAR_SLICES(be, n, STMT)                                                          \
    do {                                                                                 \
        int nt_ = llm_cpu_threads(be);                                                   \
        _Pragma("omp parallel num_threads(nt_) if ((n) > PAR_MIN)")                      \
        {                                                                                \
            size_t lo, hi;                                                               \
            llm_cpu_split((n), omp_get_thread_num(), omp_get_num_threads(), &lo, &hi);   \
            STMT;                                                                        \
        }                                                                                \
    } while (0)

void llm_fast_gelu_forward(llm_backend *be, float *out, const float *inp, size_t n)
{
    int avx2 = llm_cpu_avx2(be);
    PAR_SLICES(be, n, avx2 ? gelu_fwd_avx2(out, inp, lo, hi) : gelu_fwd_generic(out, inp, lo, hi));
}

void llm_fast_gelu_backward(llm_backend *be, float *dinp, const float *inp, const float *dout,
                            size_t n)
{
    int avx2 = llm_cpu_avx2(be);
    PAR_SLICES(be, n, avx2 ? gelu_bwd_avx2(dinp, inp, dout, lo, hi)
                           : gelu_bwd_generic(dinp, inp, dout, lo, hi));
}

/* Plain loops the compiler vectorises (omp simd), compiled twice: for AVX2 and generic. */
LLM_INLINE void add_body(float *out, const float *a, const float *b, size_t lo, size_t hi)
{
#pragma omp simd
    for (size_t i = lo; i < hi; i++)
        out[i] = a[i] + b[i];
}

LLM_AVX2 static void add_avx2(float *out, const float *a, const float *b, size_t lo, size_t hi)
{
    add_body(out, a, b, lo, hi);
}

static void add_generic(float *out, const float *a, const float *b, size_t lo, size_t hi)
{
    add_body(out, a, b, lo, hi);
}

void llm_fast_residual_forward(llm_backend *be, float *out, const float *a, const float *b,
                               size_t n)
{
    int avx2 = llm_cpu_avx2(be);
    PAR_SLICES(be, n, avx2 ? add_avx2(out, a, b, lo, hi) : add_generic(out, a, b, lo, hi));
}

void llm_fast_accumulate(llm_backend *be, float *dst, const float *src, size_t n)
{
    int avx2 = llm_cpu_avx2(be);
    PAR_SLICES(be, n, avx2 ? add_avx2(dst, dst, src, lo, hi) : add_generic(dst, dst, src, lo, hi));
}

LLM_AVX2 static double sumsq_avx2(const float *g, size_t lo, size_t hi)
{
    /* four independent double accumulators: enough FMAs in flight to keep up with memory */
    __m256d a0 = _mm256_setzero_pd(), a1 = a0, a2 = a0, a3 = a0;
    size_t i = lo;
    for (; i + 16 <= hi; i += 16) {
        __m256 v = _mm256_loadu_ps(g + i), w = _mm256_loadu_ps(g + i + 8);
        __m256d l = _mm256_cvtps_pd(_mm256_castps256_ps128(v));
        __m256d h = _mm256_cvtps_pd(_mm256_extractf128_ps(v, 1));
        __m256d l2 = _mm256_cvtps_pd(_mm256_castps256_ps128(w));
        __m256d h2 = _mm256_cvtps_pd(_mm256_extractf128_ps(w, 1));
        a0 = _mm256_fmadd_pd(l, l, a0);
        a1 = _mm256_fmadd_pd(h, h, a1);
        a2 = _mm256_fmadd_pd(l2, l2, a2);
        a3 = _mm256_fmadd_pd(h2, h2, a3);
    }
    double t[4];
    _mm256_storeu_pd(t, _mm256_add_pd(_mm256_add_pd(a0, a1), _mm256_add_pd(a2, a3)));
    double s = (t[0] + t[1]) + (t[2] + t[3]);
    for (; i < hi; i++)
        s += (double)g[i] * g[i];
    return s;
}

static double sumsq_generic(const float *g, size_t lo, size_t hi)
{
    double s = 0;
    for (size_t i = lo; i < hi; i++)
        s += (double)g[i] * g[i];
    return s;
}

double llm_fast_sum_squares(llm_backend *be, const float *g, size_t n)
{
    enum { MAXT = 256 };
    double part[MAXT] = {0};
    int avx2 = llm_cpu_avx2(be), nt = llm_cpu_threads(be);
    if (nt > MAXT)
        nt = MAXT;
    /* one partial sum per thread, added in thread order: deterministic for a thread count */
#pragma omp parallel num_threads(nt) if (n > PAR_MIN)
    {
        size_t lo, hi;
        int id = omp_get_thread_num();
        llm_cpu_split(n, id, omp_get_num_threads(), &lo, &hi);
        part[id] = avx2 ? sumsq_avx2(g, lo, hi) : sumsq_generic(g, lo, hi);
    }
    double s = 0;
    for (int i = 0; i < nt; i++)
        s += part[i];
    return s;
}

typedef struct {
    float lr, b1, b2, eps, wd, c1, c2, gs; /* c1, c2: 1 / bias corrections */
    float ob1, ob2;                        /* 1 - b1, 1 - b2 */
} adam_hp;

LLM_AVX2 static inline void adam8(float *p, const float *g, float *m, float *v, __m256i mask,
                                  int full, const adam_hp *h)
{
    __m256 gi = full ? _mm256_loadu_ps(g) : _mm256_maskload_ps(g, mask);
    __m256 mi = full ? _mm256_loadu_ps(m) : _mm256_maskload_ps(m, mask);
    __m256 vi = full ? _mm256_loadu_ps(v) : _mm256_maskload_ps(v, mask);
    __m256 pi = full ? _mm256_loadu_ps(p) : _mm256_maskload_ps(p, mask);
    gi = _mm256_mul_ps(gi, _mm256_set1_ps(h->gs));
    mi = _mm256_fmadd_ps(_mm256_set1_ps(h->b1), mi, _mm256_mul_ps(_mm256_set1_ps(h->ob1), gi));
    vi = _mm256_fmadd_ps(_mm256_set1_ps(h->b2), vi,
                         _mm256_mul_ps(_mm256_set1_ps(h->ob2), _mm256_mul_ps(gi, gi)));
    __m256 den = _mm256_add_ps(_mm256_sqrt_ps(_mm256_mul_ps(vi, _mm256_set1_ps(h->c2))),
                               _mm256_set1_ps(h->eps));
    __m256 upd = _mm256_fmadd_ps(_mm256_set1_ps(h->wd), pi,
                                 _mm256_div_ps(_mm256_mul_ps(mi, _mm256_set1_ps(h->c1)), den));
    pi = _mm256_fnmadd_ps(_mm256_set1_ps(h->lr), upd, pi);
    if (full) {
        _mm256_storeu_ps(m, mi);
        _mm256_storeu_ps(v, vi);
        _mm256_storeu_ps(p, pi);
    } else {
        _mm256_maskstore_ps(m, mask, mi);
        _mm256_maskstore_ps(v, mask, vi);
        _mm256_maskstore_ps(p, mask, pi);
    }
}

LLM_AVX2 static void adam_avx2(float *p, const float *g, float *m, float *v, size_t lo,
                               size_t hi, const adam_hp *h)
{
    size_t i = lo;
    __m256i all = _mm256_set1_epi32(-1);
    for (; i + 8 <= hi; i += 8)
        adam8(p + i, g + i, m + i, v + i, all, 1, h);
    if (i < hi)
        adam8(p + i, g + i, m + i, v + i, llm_mask8((int)(hi - i)), 0, h);
}

static void adam_generic(float *p, const float *g, float *m, float *v, size_t lo, size_t hi,
                         const adam_hp *h)
{
    for (size_t i = lo; i < hi; i++) {
        float gi = g[i] * h->gs;
        float mi = h->b1 * m[i] + h->ob1 * gi, vi = h->b2 * v[i] + h->ob2 * gi * gi;
        m[i] = mi;
        v[i] = vi;
        p[i] -= h->lr * ((mi * h->c1) / (sqrtf(vi * h->c2) + h->eps) + h->wd * p[i]);
    }
}

void llm_fast_adamw(llm_backend *be, float *p, const float *grad, float *m, float *v, size_t n,
                    float lr, float b1, float b2, float eps, float wd, int t, float grad_scale)
{
    adam_hp h = {lr, b1, b2, eps, wd, (float)(1.0 / (1.0 - pow(b1, t))),
                 (float)(1.0 / (1.0 - pow(b2, t))), grad_scale, 1.0f - b1, 1.0f - b2};
    int avx2 = llm_cpu_avx2(be);
    PAR_SLICES(be, n, avx2 ? adam_avx2(p, grad, m, v, lo, hi, &h)
                           : adam_generic(p, grad, m, v, lo, hi, &h));
}

/* adamw_segs: llm_fast_adamw's kernels on each segment, block by block, each block just
 * updated rounded to lo by the same thread while it is in L1 (the conversion of
 * llm_fast_cast_lo).  The update is elementwise, so blocks change nothing in p, m, v. */
#define ADAM_BLOCK 2048
void llm_fast_adamw_segs(llm_backend *be, float *p, void *p_lo, const float *grad, float *m,
                         float *v, size_t mv_base, const llm_adamw_seg *segs, int nseg,
                         float lr, float b1, float b2, float eps, int t, float grad_scale,
                         int dt)
{
    int avx2 = llm_cpu_avx2(be);
    for (int s = 0; s < nseg; s++) {
        size_t off = segs[s].off, n = segs[s].n;
        if (!n)
            continue;
        adam_hp h = {lr, b1, b2, eps, segs[s].wd, (float)(1.0 / (1.0 - pow(b1, t))),
                     (float)(1.0 / (1.0 - pow(b2, t))), grad_scale, 1.0f - b1, 1.0f - b2};
        float *sp = p + off, *sm = m + (off - mv_base), *sv = v + (off - mv_base);
        const float *sg = grad + off;
        uint16_t *sl = p_lo ? (uint16_t *)p_lo + off : NULL;
        PAR_SLICES(be, n, {
            for (size_t b0 = lo; b0 < hi; b0 += ADAM_BLOCK) {
                size_t b1_ = b0 + ADAM_BLOCK < hi ? b0 + ADAM_BLOCK : hi;
                if (avx2)
                    adam_avx2(sp, sg, sm, sv, b0, b1_, &h);
                else
                    adam_generic(sp, sg, sm, sv, b0, b1_, &h);
                if (sl)
                    for (size_t i = b0; i < b1_; i++)
                        sl[i] = llm_lo_bits(sp[i], dt);
            }
        });
    }
}
