/* cuda_optim.cu — AdamW (per buffer, and over a segment list writing the lo weight copy)
 * and the deterministic sum of squares (global grad norm). */
#include <math.h>
#include <string.h>

#include "kernels/cuda/cuda_internal.h"
#include "kernels/cuda/cuda_lo.cuh"

/* One element's update, shared by adamw and adamw_segs so the two agree bit for bit
 * (one expression, contracted the same way); returns the new p. */
__device__ __forceinline__ float lc_adamw_elem(float *p, const float *grad, float *m, float *v,
                                               size_t i, size_t k, float lr, float b1,
                                               float b2, float eps, float wd, float bc1,
                                               float bc2, float grad_scale)
{
    float g = grad[i] * grad_scale;
    float mi = b1 * m[k] + (1.0f - b1) * g;
    float vi = b2 * v[k] + (1.0f - b2) * g * g;
    m[k] = mi;
    v[k] = vi;
    float mh = mi / bc1, vh = vi / bc2;
    float pi = p[i] - lr * (mh / (sqrtf(vh) + eps) + wd * p[i]);
    p[i] = pi;
    return pi;
}

__global__ void lc_adamw_kernel(float *p, const float *grad, float *m, float *v, size_t n,
                                float lr, float b1, float b2, float eps, float wd,
                                float bc1, float bc2, float grad_scale)
{
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n;
         i += (size_t)gridDim.x * blockDim.x)
        lc_adamw_elem(p, grad, m, v, i, i, lr, b1, b2, eps, wd, bc1, bc2, grad_scale);
}

static void lc_adamw(llm_backend *be, float *p, const float *grad, float *m, float *v, size_t n,
                     float lr, float b1, float b2, float eps, float wd, int t, float grad_scale)
{
    lc_ctx *c = lc_get(be);
    if (!n) return;
    /* bias corrections in double: 1 - b2^t is small, and powf's rounding would show */
    float bc1 = (float)(1.0 - pow((double)b1, t)), bc2 = (float)(1.0 - pow((double)b2, t));
    lc_adamw_kernel<<<lc_blocks(n, 256, 65535u * 4), 256, 0, c->stream>>>(
        p, grad, m, v, n, lr, b1, b2, eps, wd, bc1, bc2, grad_scale);
    LC_LAUNCHED(c);
}

/* ---- adamw_segs: every segment in one launch (LC_ADAM_SEGS segments per launch) ----
 * The segment table travels by value in the kernel's parameters (no upload, nothing to
 * synchronise): 128 segments are about 3.1 KB of the 4 KB parameter space, and cover
 * GPT-2 124M's ~98 runs of equal decay in one launch.  Segment s gets blocks
 * [first[s], first[s+1]), each block a chunk of LC_ADAM_CHUNK elements at a time (a
 * segment past LC_ADAM_SEG_BLOCKS chunks strides over the rest: 2048 blocks of 256
 * threads are still twice what an H100/H200 holds resident); element e of the segment
 * is touched by exactly one thread, so the result does not depend on the grid. */
#define LC_ADAM_SEGS 128
#define LC_ADAM_THREADS 256
#define LC_ADAM_PER 4
#define LC_ADAM_CHUNK (LC_ADAM_THREADS * LC_ADAM_PER)
#define LC_ADAM_SEG_BLOCKS 2048u

struct lc_adam_tab {
    size_t off[LC_ADAM_SEGS], n[LC_ADAM_SEGS];
    float wd[LC_ADAM_SEGS];
    unsigned first[LC_ADAM_SEGS + 1];   /* first block of each segment; [nseg]: the grid */
    int nseg;
};

/* LO 0: fp32 only; LC_DT_BF16 / LC_DT_F16: plo[i] = the new p[i] rounded (cast_lo's). */
template <int LO>
__global__ void lc_adamw_segs_kernel(const lc_adam_tab tab, float *p, uint16_t *plo,
                                     const float *grad, float *m, float *v, size_t mv_base,
                                     float lr, float b1, float b2, float eps, float bc1,
                                     float bc2, float grad_scale)
{
    unsigned b = blockIdx.x;
    int lo = 0, hi = tab.nseg - 1;   /* the last segment whose first block is <= b */
    while (lo < hi) {
        int mid = (lo + hi + 1) / 2;
        if (tab.first[mid] <= b) lo = mid;
        else hi = mid - 1;
    }
    size_t off = tab.off[lo], n = tab.n[lo];
    unsigned nb = tab.first[lo + 1] - tab.first[lo];
    float wd = tab.wd[lo];
    for (size_t base = (size_t)(b - tab.first[lo]) * LC_ADAM_CHUNK; base < n;
         base += (size_t)nb * LC_ADAM_CHUNK) {
#pragma unroll
        for (int k = 0; k < LC_ADAM_PER; k++) {
            size_t e = base + (size_t)k * LC_ADAM_THREADS + threadIdx.x;
            if (e < n) {
                size_t i = off + e;
                float pi = lc_adamw_elem(p, grad, m, v, i, i - mv_base, lr, b1, b2, eps, wd,
                                         bc1, bc2, grad_scale);
                if (LO) plo[i] = lc_to_lo<LO>(pi);
            }
        }
    }
}

/* Launch the table; 0, or nonzero after recording an error. */
static int lc_adamw_segs_launch(lc_ctx *c, lc_adam_tab *tab, unsigned blocks, float *p,
                                void *p_lo, const float *grad, float *m, float *v,
                                size_t mv_base, float lr, float b1, float b2, float eps,
                                float bc1, float bc2, float gs, int lo)
{
    tab->first[tab->nseg] = blocks;
    uint16_t *pl = (uint16_t *)p_lo;
    if (!p_lo)
        lc_adamw_segs_kernel<0><<<blocks, LC_ADAM_THREADS, 0, c->stream>>>(
            *tab, p, pl, grad, m, v, mv_base, lr, b1, b2, eps, bc1, bc2, gs);
    else if (lo == LC_DT_BF16)
        lc_adamw_segs_kernel<LC_DT_BF16><<<blocks, LC_ADAM_THREADS, 0, c->stream>>>(
            *tab, p, pl, grad, m, v, mv_base, lr, b1, b2, eps, bc1, bc2, gs);
    else
        lc_adamw_segs_kernel<LC_DT_F16><<<blocks, LC_ADAM_THREADS, 0, c->stream>>>(
            *tab, p, pl, grad, m, v, mv_base, lr, b1, b2, eps, bc1, bc2, gs);
    return LC_LAUNCHED(c);
}

static void lc_adamw_segs(llm_backend *be, float *p, void *p_lo, const float *grad, float *m,
                          float *v, size_t mv_base, const llm_adamw_seg *segs, int nseg,
                          float lr, float b1, float b2, float eps, int t, float grad_scale,
                          int lo)
{
    lc_ctx *c = lc_get(be);
    if (p_lo && lo != LC_DT_BF16 && lo != LC_DT_F16) {
        lc_fail_cuda(c, cudaErrorInvalidValue, "adamw_segs: lo is neither bf16 nor f16",
                     __FILE__, __LINE__);
        return;
    }
    /* as lc_adamw: bias corrections in double, then float */
    float bc1 = (float)(1.0 - pow((double)b1, t)), bc2 = (float)(1.0 - pow((double)b2, t));
    lc_adam_tab tab;
    memset(&tab, 0, sizeof tab);
    unsigned blocks = 0;
    for (int s = 0; s < nseg; s++) {
        size_t n = segs[s].n;
        if (!n) continue;   /* no blocks: the kernel's search needs each segment non-empty */
        size_t nb = (n + LC_ADAM_CHUNK - 1) / LC_ADAM_CHUNK;
        if (nb > LC_ADAM_SEG_BLOCKS) nb = LC_ADAM_SEG_BLOCKS;
        int k = tab.nseg++;
        tab.off[k] = segs[s].off;
        tab.n[k] = n;
        tab.wd[k] = segs[s].wd;
        tab.first[k] = blocks;
        blocks += (unsigned)nb;
        if (tab.nseg == LC_ADAM_SEGS) {
            if (lc_adamw_segs_launch(c, &tab, blocks, p, p_lo, grad, m, v, mv_base, lr, b1,
                                     b2, eps, bc1, bc2, grad_scale, lo))
                return;
            tab.nseg = 0;
            blocks = 0;
        }
    }
    if (tab.nseg)
        lc_adamw_segs_launch(c, &tab, blocks, p, p_lo, grad, m, v, mv_base, lr, b1, b2, eps,
                             bc1, bc2, grad_scale, lo);
}

#define LC_SSQ_THREADS 512
#define LC_SSQ_BLOCKS 1024

/* Stage 1: block b sums g^2 (in double) over a grid-stride slice; fixed tree per block. */
__global__ void lc_ssq_partial_kernel(double *part, const float *g, size_t n)
{
    __shared__ double sh[LC_SSQ_THREADS];
    double acc = 0.0;
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n;
         i += (size_t)gridDim.x * blockDim.x) {
        double x = g[i];
        acc += x * x;
    }
    sh[threadIdx.x] = acc;
    __syncthreads();
    for (int s = blockDim.x / 2; s > 0; s >>= 1) {
        if ((int)threadIdx.x < s) sh[threadIdx.x] += sh[threadIdx.x + s];
        __syncthreads();
    }
    if (threadIdx.x == 0) part[blockIdx.x] = sh[0];
}

/* Stage 2: one thread adds the partials in order. */
__global__ void lc_ssq_final_kernel(double *out, const double *part, int P)
{
    if (blockIdx.x != 0 || threadIdx.x != 0) return;
    double s = 0.0;
    for (int i = 0; i < P; i++) s += part[i];
    *out = s;
}

static double lc_sum_squares(llm_backend *be, const float *g, size_t n)
{
    lc_ctx *c = lc_get(be);
    if (!n) return 0.0;
    /* the grid depends only on n, so the result is the same on every run */
    unsigned P = lc_blocks(n, LC_SSQ_THREADS, LC_SSQ_BLOCKS);
    double *part = (double *)lc_scratch(c, (P + 1) * sizeof(double));
    if (!part) return NAN;
    lc_ssq_partial_kernel<<<P, LC_SSQ_THREADS, 0, c->stream>>>(part + 1, g, n);
    if (LC_LAUNCHED(c)) return NAN;
    lc_ssq_final_kernel<<<1, 1, 0, c->stream>>>(part, part + 1, (int)P);
    if (LC_LAUNCHED(c)) return NAN;
    double r = NAN;
    if (LC_CK(c, cudaMemcpyAsync(&r, part, sizeof r, cudaMemcpyDeviceToHost, c->stream)) ||
        LC_CK(c, cudaStreamSynchronize(c->stream)))
        return NAN;
    return r;
}

extern "C" void lc_fill_optim(llm_backend *be)
{
    be->adamw = lc_adamw;
    be->adamw_segs = lc_adamw_segs;
    be->sum_squares = lc_sum_squares;
}
