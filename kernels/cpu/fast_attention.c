/* fast_attention.c — "cpu" causal multi-head self-attention, forward and backward.
 *
 * Per (batch, head) the products Q K^T, P V, dO V^T, dS K, dS^T Q, P^T dO are OpenBLAS
 * GEMMs read straight out of the (B,T,3C) qkv buffer (leading dimension 3C) and the
 * (B,NH,T,T) att buffer, tiled in blocks of RB rows (or columns) so that the causal
 * triangle above the diagonal is mostly skipped at long T.  The softmax and its backward
 * are AVX2 loops over the rows.
 *
 * Threads: an OpenMP region of be->threads threads takes the (b,h) pairs; OpenBLAS is
 * set to one thread for the region, so each thread runs its GEMMs itself (1 x threads).
 *
 * The mixed-precision variants (the lse kernels, attention_*_lse32) run the
 * same loops on operands rounded to lo into per-thread fp32 scratch (exact in fp32): the
 * head's q, k, v (and dout), the probabilities' tile before P V, the whole probability
 * matrix before P^T dO, and the score gradient in place before its two products.  When
 * that scratch cannot be allocated the reference kernels run instead (same meaning). */
#include <cblas.h>
#include <math.h>
#include <string.h>

#include "kernels/cpu/cpu_ops.h"
#include "kernels/cpu/mixed.h"
#include "kernels/cpu/simd.h"

#define RB 64

/* Row a[0..n) <- softmax(a[0..n)) in place; a[n..T) <- 0.  Returns log sum exp. */
LLM_AVX2 static float softmax_row_avx2(float *a, int n, int T)
{
    __m256 vm = _mm256_set1_ps(-INFINITY);
    int j = 0;
    for (; j + 8 <= n; j += 8)
        vm = _mm256_max_ps(vm, _mm256_loadu_ps(a + j));
    float mx = llm_hmax8(vm);
    for (int k = j; k < n; k++)
        mx = a[k] > mx ? a[k] : mx;
    vm = _mm256_set1_ps(mx);
    __m256 vs = _mm256_setzero_ps();
    for (j = 0; j + 8 <= n; j += 8) {
        __m256 e = llm_exp8(_mm256_sub_ps(_mm256_loadu_ps(a + j), vm));
        _mm256_storeu_ps(a + j, e);
        vs = _mm256_add_ps(vs, e);
    }
    float s = llm_hsum8(vs);
    for (int k = j; k < n; k++) {
        a[k] = expf(a[k] - mx);
        s += a[k];
    }
    __m256 vi = _mm256_set1_ps(1.0f / s);
    for (j = 0; j + 8 <= n; j += 8)
        _mm256_storeu_ps(a + j, _mm256_mul_ps(_mm256_loadu_ps(a + j), vi));
    for (int k = j; k < n; k++)
        a[k] *= 1.0f / s;
    memset(a + n, 0, sizeof(float) * (size_t)(T - n));
    return mx + logf(s);
}

static float softmax_row_generic(float *a, int n, int T)
{
    float mx = -INFINITY, s = 0;
    for (int k = 0; k < n; k++)
        mx = a[k] > mx ? a[k] : mx;
    for (int k = 0; k < n; k++) {
        a[k] = expf(a[k] - mx);
        s += a[k];
    }
    for (int k = 0; k < n; k++)
        a[k] *= 1.0f / s;
    memset(a + n, 0, sizeof(float) * (size_t)(T - n));
    return mx + logf(s);
}

/* d[0..n) <- p (d - sum(p d)) * scale (softmax backward, the scale of the scores folded
 * in); d[n..m) <- 0. */
LLM_INLINE void dsoftmax_row(float *d, const float *p, int n, int m, float scale)
{
    float pd = 0;
#pragma omp simd reduction(+ : pd)
    for (int k = 0; k < n; k++)
        pd += p[k] * d[k];
#pragma omp simd
    for (int k = 0; k < n; k++)
        d[k] = p[k] * (d[k] - pd) * scale;
    if (m > n)
        memset(d + n, 0, sizeof(float) * (size_t)(m - n));
}

LLM_AVX2 static void dsoftmax_row_avx2(float *d, const float *p, int n, int m, float scale)
{
    dsoftmax_row(d, p, n, m, scale);
}

static void dsoftmax_row_generic(float *d, const float *p, int n, int m, float scale)
{
    dsoftmax_row(d, p, n, m, scale);
}

/* dst(rows, cols; ld dld) = lo(src(rows, cols; ld sld)). */
static void round_block(float *dst, int dld, const float *src, int sld, int rows, int cols,
                        int lo)
{
    for (int i = 0; i < rows; i++)
        for (int j = 0; j < cols; j++)
            dst[(size_t)i * dld + j] = llm_lo_round(src[(size_t)i * sld + j], lo);
}

/* dK += dS^T Q and dV += P^T dO of one head, in column blocks of RB keys: keys j0..j1
 * receive from queries j0..T (the causal part).  ds, p: (T x T); q (ld lq), dO (ld ldo);
 * dk, dv (ld ld). */
static void kv_products(const float *ds, const float *p, const float *q, int lq,
                        const float *dO, int ldo, float *dk, float *dv, int ld, int T, int hs)
{
    for (int j0 = 0; j0 < T; j0 += RB) {
        int j1 = j0 + RB < T ? j0 + RB : T, cols = j1 - j0;
        cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, cols, hs, T - j0, 1.0f,
                    ds + (size_t)j0 * T + j0, T, q + (size_t)j0 * lq, lq, 1.0f,
                    dk + (size_t)j0 * ld, ld);
        cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, cols, hs, T - j0, 1.0f,
                    p + (size_t)j0 * T + j0, T, dO + (size_t)j0 * ldo, ldo, 1.0f,
                    dv + (size_t)j0 * ld, ld);
    }
}

/* lo = 0: fp32; else LLM_QK_BF16 / LLM_QK_F16 operands (see the top of the file). */
/* att NULL: the probabilities go to a per-thread tile (RB x T) and only lse (B,NH,T) is
 * kept (lse may be NULL otherwise). */
static int attention_forward(llm_backend *be, float *out, float *att, float *lse,
                             const float *qkv, int B, int T, int C, int NH, int lo)
{
    int nt = llm_cpu_threads(be), avx2 = llm_cpu_avx2(be), hs = C / NH, ld = 3 * C;
    float scale = 1.0f / sqrtf((float)hs);
    if (nt > B * NH)
        nt = B * NH > 0 ? B * NH : 1;
    /* lo: per thread q, k, v of one head (T x hs each) and one rounded probability tile
     * (RB x T); no att: one fp32 probability tile too */
    size_t per = (lo ? 3 * (size_t)T * hs + (size_t)RB * T : 0) + (att ? 0 : (size_t)RB * T);
    float *scratch = NULL;
    if (per && !(scratch = llm_cpu_scratch(be, (size_t)nt * per)))
        return -1;
    llm_cpu_blas_threads(1);
#pragma omp parallel num_threads(nt)
    {
        float *qr = scratch ? scratch + (size_t)omp_get_thread_num() * per : NULL;
        float *kr = lo ? qr + (size_t)T * hs : NULL, *vr = lo ? kr + (size_t)T * hs : NULL;
        float *pr = lo ? vr + (size_t)T * hs : NULL;
        float *tile = att ? NULL : (lo ? pr + (size_t)RB * T : qr);
#pragma omp for schedule(static)
        for (int bh = 0; bh < B * NH; bh++) {
            int b = bh / NH, h = bh % NH;
            const float *q = qkv + (size_t)b * T * ld + (size_t)h * hs, *k = q + C, *v = q + 2 * C;
            int lq = ld;
            float *o = out + (size_t)b * T * C + (size_t)h * hs;
            if (lo) {
                round_block(qr, hs, q, ld, T, hs, lo);
                round_block(kr, hs, k, ld, T, hs, lo);
                round_block(vr, hs, v, ld, T, hs, lo);
                q = qr, k = kr, v = vr, lq = hs;
            }
            for (int i0 = 0; i0 < T; i0 += RB) {
                int i1 = i0 + RB < T ? i0 + RB : T, rows = i1 - i0;
                /* rows i0..i1 of the probabilities: in att, or the tile's rows 0..rows */
                float *a = att ? att + (size_t)bh * T * T + (size_t)i0 * T : tile;
                /* scores of rows i0..i1 against keys 0..i1 (the causal part of the tile) */
                cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, rows, i1, hs, scale,
                            q + (size_t)i0 * lq, lq, k, lq, 0.0f, a, T);
                for (int t = i0; t < i1; t++) {
                    float *row = a + (size_t)(t - i0) * T;
                    /* without att only columns 0..i1 are read back */
                    int width = att ? T : i1;
                    float l = avx2 ? softmax_row_avx2(row, t + 1, width)
                                   : softmax_row_generic(row, t + 1, width);
                    if (lse)
                        lse[(size_t)bh * T + t] = l;
                }
                const float *pt = a;
                if (lo) {
                    round_block(pr, T, pt, T, rows, i1, lo);
                    pt = pr;
                }
                cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, rows, hs, i1, 1.0f, pt,
                            T, v, lq, 0.0f, o + (size_t)i0 * C, C);
            }
        }
    }
    return 0;
}

static int attention_backward(llm_backend *be, float *dqkv, const float *dout,
                              const float *qkv, const float *att, int B, int T, int C, int NH,
                              int lo)
{
    int nt = llm_cpu_threads(be), avx2 = llm_cpu_avx2(be), hs = C / NH, ld = 3 * C;
    float scale = 1.0f / sqrtf((float)hs);
    if (nt > B * NH)
        nt = B * NH > 0 ? B * NH : 1;
    /* per thread: the score gradient (T x T); lo: also lo(att) (T x T) and the head's
     * q, k, v, dout (T x hs each) */
    size_t per = (size_t)T * T + (lo ? (size_t)T * T + 4 * (size_t)T * hs : 0);
    float *scratch = llm_cpu_scratch(be, (size_t)nt * per);
    if (!scratch)
        return -1;
    llm_cpu_blas_threads(1);
#pragma omp parallel num_threads(nt)
    {
        float *ds = scratch + (size_t)omp_get_thread_num() * per;
        float *pr = ds + (size_t)T * T, *qr = pr + (size_t)T * T;
        float *kr = qr + (size_t)T * hs, *vr = kr + (size_t)T * hs, *dr = vr + (size_t)T * hs;
#pragma omp for schedule(static)
        for (int bh = 0; bh < B * NH; bh++) {
            int b = bh / NH, h = bh % NH;
            size_t base = (size_t)b * T * ld + (size_t)h * hs;
            const float *q = qkv + base, *k = q + C, *v = q + 2 * C;
            float *dq = dqkv + base, *dk = dq + C, *dv = dq + 2 * C;
            const float *p = att + (size_t)bh * T * T, *pv = p;
            const float *dO = dout + (size_t)b * T * C + (size_t)h * hs;
            int lq = ld, ldo = C;
            if (lo) {
                round_block(qr, hs, q, ld, T, hs, lo);
                round_block(kr, hs, k, ld, T, hs, lo);
                round_block(vr, hs, v, ld, T, hs, lo);
                round_block(dr, hs, dO, C, T, hs, lo);
                round_block(pr, T, p, T, T, T, lo);
                q = qr, k = kr, v = vr, dO = dr, pv = pr, lq = hs, ldo = hs;
            }
            for (int i0 = 0; i0 < T; i0 += RB) {
                int i1 = i0 + RB < T ? i0 + RB : T, rows = i1 - i0;
                /* dP = dO V^T on the causal part of the row block, then dS in place */
                cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, rows, i1, hs, 1.0f,
                            dO + (size_t)i0 * ldo, ldo, v, lq, 0.0f, ds + (size_t)i0 * T, T);
                for (int t = i0; t < i1; t++) {
                    if (avx2)
                        dsoftmax_row_avx2(ds + (size_t)t * T, p + (size_t)t * T, t + 1, i1, scale);
                    else
                        dsoftmax_row_generic(ds + (size_t)t * T, p + (size_t)t * T, t + 1, i1,
                                             scale);
                }
                if (lo) /* dS is rounded once, for both of its products */
                    round_block(ds + (size_t)i0 * T, T, ds + (size_t)i0 * T, T, rows, i1, lo);
                /* dQ[rows] += dS[rows, 0..i1) K[0..i1) */
                cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, rows, hs, i1, 1.0f,
                            ds + (size_t)i0 * T, T, k, lq, 1.0f, dq + (size_t)i0 * ld, ld);
            }
            kv_products(ds, pv, q, lq, dO, ldo, dk, dv, ld, T, hs);
        }
    }
    return 0;
}

void llm_fast_attention_forward(llm_backend *be, float *out, float *att, const float *qkv,
                                int B, int T, int C, int NH)
{
    attention_forward(be, out, att, NULL, qkv, B, T, C, NH, 0);
}

void llm_fast_attention_backward(llm_backend *be, float *dqkv, const float *dout,
                                 const float *qkv, const float *att, int B, int T, int C,
                                 int NH)
{
    /* ops cannot fail; a failed T*T scratch allocation leaves dqkv as is */
    attention_backward(be, dqkv, dout, qkv, att, B, T, C, NH, 0);
}

/* ---- attention_forward_lse / attention_backward_lse ---- */

void llm_fast_attention_forward_lse32(llm_backend *be, float *out, float *lse,
                                      const float *qkv, int B, int T, int C, int NH, int lo)
{
    if (attention_forward(be, out, NULL, lse, qkv, B, T, C, NH, lo) != 0)
        llm_ref_attention_forward_lse32(be, out, lse, qkv, B, T, C, NH, lo);
}

/* Per (b,h), per thread: the head's rounded q, k, v, dout (T x hs each), D (T), and three
 * T x T buffers: P recomputed from the scores and lse, lo(P), and the score gradient. */
static int attention_backward_lse(llm_backend *be, float *dqkv, const float *dout,
                                  const float *qkv, const float *out, const float *lse, int B,
                                  int T, int C, int NH, int lo)
{
    int nt = llm_cpu_threads(be), hs = C / NH, ld = 3 * C;
    float scale = 1.0f / sqrtf((float)hs);
    if (nt > B * NH)
        nt = B * NH > 0 ? B * NH : 1;
    size_t per = 3 * (size_t)T * T + 4 * (size_t)T * hs + (size_t)T;
    float *scratch = llm_cpu_scratch(be, (size_t)nt * per);
    if (!scratch)
        return -1;
    llm_cpu_blas_threads(1);
#pragma omp parallel num_threads(nt)
    {
        float *p = scratch + (size_t)omp_get_thread_num() * per;
        float *pr = p + (size_t)T * T, *ds = pr + (size_t)T * T, *qr = ds + (size_t)T * T;
        float *kr = qr + (size_t)T * hs, *vr = kr + (size_t)T * hs, *dr = vr + (size_t)T * hs;
        float *D = dr + (size_t)T * hs;
#pragma omp for schedule(static)
        for (int bh = 0; bh < B * NH; bh++) {
            int b = bh / NH, h = bh % NH;
            size_t base = (size_t)b * T * ld + (size_t)h * hs;
            float *dq = dqkv + base, *dk = dq + C, *dv = dq + 2 * C;
            const float *dO = dout + (size_t)b * T * C + (size_t)h * hs;
            const float *o = out + (size_t)b * T * C + (size_t)h * hs, *l = lse + (size_t)bh * T;
            round_block(qr, hs, qkv + base, ld, T, hs, lo);
            round_block(kr, hs, qkv + base + C, ld, T, hs, lo);
            round_block(vr, hs, qkv + base + 2 * C, ld, T, hs, lo);
            round_block(dr, hs, dO, C, T, hs, lo);
            for (int t = 0; t < T; t++) {
                double d = 0;
                for (int i = 0; i < hs; i++)
                    d += (double)dO[(size_t)t * C + i] * o[(size_t)t * C + i];
                D[t] = (float)d;
            }
            for (int i0 = 0; i0 < T; i0 += RB) {
                int i1 = i0 + RB < T ? i0 + RB : T, rows = i1 - i0;
                float *pb = p + (size_t)i0 * T, *db = ds + (size_t)i0 * T;
                /* P = exp(scale Q K^T - lse) on the causal part of the row block */
                cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, rows, i1, hs, scale,
                            qr + (size_t)i0 * hs, hs, kr, hs, 0.0f, pb, T);
                /* dP = dO V^T */
                cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, rows, i1, hs, 1.0f,
                            dr + (size_t)i0 * hs, hs, vr, hs, 0.0f, db, T);
                for (int t = i0; t < i1; t++) {
                    float *pt = p + (size_t)t * T, *dt = ds + (size_t)t * T;
                    for (int s = 0; s < i1; s++) {
                        float ps = s <= t ? expf(pt[s] - l[t]) : 0.0f;
                        pt[s] = ps;
                        dt[s] = llm_lo_round(s <= t ? scale * ps * (dt[s] - D[t]) : 0.0f, lo);
                    }
                }
                round_block(pr + (size_t)i0 * T, T, pb, T, rows, i1, lo);
                /* dQ[rows] += dS[rows, 0..i1) K[0..i1) */
                cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, rows, hs, i1, 1.0f, db, T,
                            kr, hs, 1.0f, dq + (size_t)i0 * ld, ld);
            }
            kv_products(ds, pr, qr, hs, dr, hs, dk, dv, ld, T, hs);
        }
    }
    return 0;
}

void llm_fast_attention_backward_lse32(llm_backend *be, float *dqkv, const float *dout,
                                       const float *qkv, const float *out, const float *lse,
                                       int B, int T, int C, int NH, int lo)
{
    if (attention_backward_lse(be, dqkv, dout, qkv, out, lse, B, T, C, NH, lo) != 0)
        llm_ref_attention_backward_lse32(be, dqkv, dout, qkv, out, lse, B, T, C, NH, lo);
}
