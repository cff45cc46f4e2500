/* cuda_resln.cuh — device code of the CUDA layernorm forward (cuda_ops.cu): the plain
 * one's row tail and the residual add fused with it (residual_layernorm_forward).
 * Device code only (kernels and __device__ helpers; the launchers are in cuda_ops.cu),
 * so that a host emulation can compile it too.  Both kernels share the row tail
 * lc_ln_row_finish, so the fused op does exactly the arithmetic of residual_forward
 * followed by layernorm_forward (bit-identical to them).  The output's dtype OD is a
 * template parameter (LC_DT_F32, or a lo one for layernorm_forward_lo: the same fp32
 * value rounded once, so the lo op is the fp32 one + cast_lo bit for bit).  The kernels
 * are static: a host compilation of this header (tests/emu) links with the library's launch stubs. */
#ifndef LLM_CUDA_RESLN_CUH
#define LLM_CUDA_RESLN_CUH
#include <math.h>
#include <stdint.h>

#include "kernels/cuda/cuda_lo.cuh"

#ifndef LC_WARP
#define LC_WARP 32
#endif

/* The sum of v over the 32 lanes of a warp, in every lane (butterfly: the same order in
 * every lane). */
__device__ __forceinline__ float lc_warp_sum(float v)
{
    for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
    return v;
}

/* One warp per row, row `row` of (N,C), lane = this thread's lane: s is the lane's
 * partial sum of the row x (elements lane, lane + 32, ... in order).  Mean from s, the
 * variance about it (a second pass over x), out = (x - mean) * rstd * w + b (stored as
 * dtype OD); lane 0
 * writes mean[row] and rstd[row] (either may be NULL).  eps = 1e-5. */
template <int OD>
__device__ __forceinline__ void lc_ln_row_finish(void *out, float *mean, float *rstd,
                                                 const float *x, const float *w,
                                                 const float *b, int row, int C, int lane,
                                                 float s)
{
    float m = lc_warp_sum(s) / C;
    float v = 0.0f;
    for (int i = lane; i < C; i += LC_WARP) { float d = x[i] - m; v += d * d; }
    v = lc_warp_sum(v) / C;
    float r = 1.0f / sqrtf(v + 1e-5f);
    size_t o = (size_t)row * C;
    for (int i = lane; i < C; i += LC_WARP) lc_st<OD>(out, o + i, (r * (x[i] - m)) * w[i] + b[i]);
    if (lane == 0) {
        if (mean) mean[row] = m;
        if (rstd) rstd[row] = r;
    }
}

/* The layer norm of inp(N,C), one warp per row (blockDim a multiple of 32). */
template <int OD>
static __global__ void lc_ln_fwd_kernel(void *out, float *mean, float *rstd,
                                        const float *inp, const float *w, const float *b, int N,
                                        int C)
{
    int row = (int)((blockIdx.x * (size_t)blockDim.x + threadIdx.x) / LC_WARP);
    int lane = threadIdx.x % LC_WARP;
    if (row >= N) return;
    const float *x = inp + (size_t)row * C;
    float s = 0.0f;
    for (int i = lane; i < C; i += LC_WARP) s += x[i];
    lc_ln_row_finish<OD>(out, mean, rstd, x, w, b, row, C, lane, s);
}

/* res(N,C) = a + b, then the layer norm of res as lc_ln_fwd_kernel, one warp per row.
 * res may alias a or b: every element is read and written by the same thread, and the
 * later passes read back what that thread wrote. */
template <int OD>
static __global__ void lc_resln_fwd_kernel(float *res, void *out, float *mean, float *rstd,
                                           const float *a, const float *b, const float *w,
                                           const float *bias, int N, int C)
{
    int row = (int)((blockIdx.x * (size_t)blockDim.x + threadIdx.x) / LC_WARP);
    int lane = threadIdx.x % LC_WARP;
    if (row >= N) return;
    size_t off = (size_t)row * C;
    float *x = res + off;
    float s = 0.0f;
    for (int i = lane; i < C; i += LC_WARP) {
        float v = a[off + i] + b[off + i];
        x[i] = v;
        s += v;
    }
    lc_ln_row_finish<OD>(out, mean, rstd, x, w, bias, row, C, lane, s);
}

#endif
