/* cuda_xent.cu — softmax cross-entropy over the first V of Vp columns: the forward
 * (losses and logsumexp), the backward (dlogits in place) and both fused in one kernel
 * for training, on fp32 or lo logits.
 *
 * One block per row.  The row's logsumexp comes from one function (lc_xent_row_lse)
 * that every kernel here shares, with the same block size, so xent_fused is bit for bit
 * xent_forward then xent_backward.  The fused kernel reads the row twice: the second
 * read follows the first within the block and finds it in L2 (a GPT-2 row is 100 KB in
 * bf16; 1024-thread blocks keep at most two rows per SM in flight), so from DRAM the
 * classifier's loss and gradient cost one read and one write of the logits instead of
 * two reads and a write. */
#include <math.h>

#include "kernels/cuda/cuda_internal.h"

#define LC_WARP 32
#define LC_XENT_THREADS 1024

/* Elements a thread takes at a time when a row is read in vectors: 8 for every dtype
 * (32 bytes of fp32, 16 of lo), so that the sums group alike and a lo op's value is the
 * fp32 op's on the same values, bit for bit. */
#define LC_XV 8

/* The LC_XV values at element i (a multiple of LC_XV, the tensor 16-byte aligned). */
template <int D>
__device__ __forceinline__ void lc_xent_ld(const void *p, size_t i, float *v)
{
    if (D == LC_DT_F32) {
        const float4 *q = (const float4 *)((const float *)p + i);
        float4 a = q[0], b = q[1];
        v[0] = a.x; v[1] = a.y; v[2] = a.z; v[3] = a.w;
        v[4] = b.x; v[5] = b.y; v[6] = b.z; v[7] = b.w;
    } else {
        uint4 u = *(const uint4 *)((const uint16_t *)p + i);
        uint32_t w[4] = {u.x, u.y, u.z, u.w};
#pragma unroll
        for (int k = 0; k < 4; k++) {
            v[2 * k] = lc_from_lo<D>((uint16_t)(w[k] & 0xffffu));
            v[2 * k + 1] = lc_from_lo<D>((uint16_t)(w[k] >> 16));
        }
    }
}

template <int D>
__device__ __forceinline__ void lc_xent_st(void *p, size_t i, const float *v)
{
    if (D == LC_DT_F32) {
        float4 *q = (float4 *)((float *)p + i);
        q[0] = make_float4(v[0], v[1], v[2], v[3]);
        q[1] = make_float4(v[4], v[5], v[6], v[7]);
    } else {
        uint32_t w[4];
#pragma unroll
        for (int k = 0; k < 4; k++)
            w[k] = (uint32_t)lc_to_lo<D>(v[2 * k]) | ((uint32_t)lc_to_lo<D>(v[2 * k + 1]) << 16);
        *(uint4 *)((uint16_t *)p + i) = make_uint4(w[0], w[1], w[2], w[3]);
    }
}

/* Running (max, sum of exp(x - max)) pairs, merged; empty = (-inf, 0). */
__device__ __forceinline__ void lc_lse_merge(float &m, float &s, float m2, float s2)
{
    if (m2 == -INFINITY) return;
    if (m == -INFINITY) { m = m2; s = s2; return; }
    float mx = fmaxf(m, m2);
    s = s * expf(m - mx) + s2 * expf(m2 - mx);
    m = mx;
}

/* One value into a running pair.  A NaN never wins the max and makes s NaN; +inf makes
 * it NaN too (inf - inf): a non-finite row gives a non-finite loss. */
__device__ __forceinline__ void lc_lse_add(float &m, float &s, float v)
{
    if (v > m) { s = s * expf(m - v) + 1.0f; m = v; }
    else s += expf(v - m);
}

/* The logsumexp of the row at element x (its first V values), returned to every thread
 * of the block.  vec: the row may be read in 16-byte vectors (the row length Vp a
 * multiple of LC_XV and the tensor 16-byte aligned).  The grouping of the sums
 * depends only on V, vec and the block size. */
template <int D>
__device__ float lc_xent_row_lse(const void *logits, size_t x, int V, int vec)
{
    __shared__ float sm[LC_XENT_THREADS / LC_WARP], ss[LC_XENT_THREADS / LC_WARP];
    __shared__ float out;
    const int NV = LC_XV;
    float m = -INFINITY, s = 0.0f;
    if (vec) {
        for (int j = threadIdx.x * NV; j < V; j += blockDim.x * NV) {
            float v[NV];
            lc_xent_ld<D>(logits, x + j, v);
            int k_end = V - j < NV ? V - j : NV;   /* the padded columns do not count */
            for (int k = 0; k < k_end; k++) lc_lse_add(m, s, v[k]);
        }
    } else {
        for (int j = threadIdx.x; j < V; j += blockDim.x) lc_lse_add(m, s, lc_ld<D>(logits, x + j));
    }
    for (int o = 16; o > 0; o >>= 1) {
        float m2 = __shfl_xor_sync(0xffffffffu, m, o), s2 = __shfl_xor_sync(0xffffffffu, s, o);
        lc_lse_merge(m, s, m2, s2);
    }
    int wid = threadIdx.x / LC_WARP, lane = threadIdx.x % LC_WARP;
    if (lane == 0) { sm[wid] = m; ss[wid] = s; }
    __syncthreads();
    if (threadIdx.x == 0) {
        float M = sm[0], S = ss[0];
        for (int w = 1; w < (int)(blockDim.x / LC_WARP); w++) lc_lse_merge(M, S, sm[w], ss[w]);
        out = M + logf(S);
    }
    __syncthreads();
    return out;
}

/* Row x's gradient (exp(v - l) - onehot(tgt)) * dloss for j < V, 0 after, written over
 * dlogits (which may be logits: each element is read and written by one thread). */
template <int D>
__device__ void lc_xent_row_grad(void *dlogits, const void *logits, size_t x, float l, int tgt,
                                 float dloss, int V, int Vp, int vec)
{
    const int NV = LC_XV;
    if (vec) {
        for (int j = threadIdx.x * NV; j < Vp; j += blockDim.x * NV) {
            float v[NV];
            lc_xent_ld<D>(logits, x + j, v);
#pragma unroll
            for (int k = 0; k < NV; k++)
                v[k] = j + k < V ? (expf(v[k] - l) - (j + k == tgt ? 1.0f : 0.0f)) * dloss : 0.0f;
            lc_xent_st<D>(dlogits, x + j, v);
        }
    } else {
        for (int j = threadIdx.x; j < Vp; j += blockDim.x) {
            float g = 0.0f;
            if (j < V) g = (expf(lc_ld<D>(logits, x + j) - l) - (j == tgt ? 1.0f : 0.0f)) * dloss;
            lc_st<D>(dlogits, x + j, g);
        }
    }
}

template <int D>
__global__ void __launch_bounds__(LC_XENT_THREADS)
lc_xent_fwd_kernel(float *losses, float *lse, const void *logits, const int32_t *targets, int V,
                   int Vp, int vec)
{
    size_t row = blockIdx.x, x = row * (size_t)Vp;
    float l = lc_xent_row_lse<D>(logits, x, V, vec);
    if (threadIdx.x == 0) {
        lse[row] = l;
        losses[row] = l - lc_ld<D>(logits, x + targets[row]);
    }
}

template <int D>
__global__ void __launch_bounds__(LC_XENT_THREADS)
lc_xent_bwd_kernel(void *dlogits, const void *logits, const float *lse, const int32_t *targets,
                   float dloss, int V, int Vp, int vec)
{
    size_t row = blockIdx.x, x = row * (size_t)Vp;
    lc_xent_row_grad<D>(dlogits, logits, x, lse[row], targets[row], dloss, V, Vp, vec);
}

/* Both: the loss from the target's logit read before any thread may overwrite it (the
 * lse's block barriers order the read before the gradient loop). */
template <int D>
__global__ void __launch_bounds__(LC_XENT_THREADS)
lc_xent_fused_kernel(float *losses, void *logits, const int32_t *targets, float dloss, int V,
                     int Vp, int vec)
{
    size_t row = blockIdx.x, x = row * (size_t)Vp;
    int tgt = targets[row];
    float xt = threadIdx.x == 0 ? lc_ld<D>(logits, x + tgt) : 0.0f;
    float l = lc_xent_row_lse<D>(logits, x, V, vec);
    if (threadIdx.x == 0) losses[row] = l - xt;
    lc_xent_row_grad<D>(logits, logits, x, l, tgt, dloss, V, Vp, vec);
}

/* Whether rows of p (Vp columns) may be read LC_XV elements at a time.  The device
 * allocations are 256-byte aligned, so an fp32 tensor and its lo copy take the same path
 * (the lo ops' bit-for-bit contract relies on it). */
static int lc_xent_vec(const void *p, int Vp)
{
    return Vp % LC_XV == 0 && ((uintptr_t)p & 15u) == 0;
}

/* Whether dt is a dtype the op takes (fp32 only where f32 is set); else the error is
 * recorded under op's message. */
static int lc_xent_dt(lc_ctx *c, int dt, int f32, const char *op)
{
    if ((f32 && dt == LC_DT_F32) || dt == LC_DT_BF16 || dt == LC_DT_F16) return 1;
    lc_fail_cuda(c, cudaErrorInvalidValue, op, __FILE__, __LINE__);
    return 0;
}

/* kern<dt><<<N, LC_XENT_THREADS>>>(args) on c's stream, dt a runtime dtype code. */
#define LC_XENT_LAUNCH(c, dt, kern, N, ...)                                                    \
    do {                                                                                     \
        unsigned g_ = (unsigned)(N);                                                         \
        if ((dt) == LC_DT_F32) kern<LC_DT_F32><<<g_, LC_XENT_THREADS, 0, (c)->stream>>>(__VA_ARGS__); \
        else if ((dt) == LC_DT_BF16) kern<LC_DT_BF16><<<g_, LC_XENT_THREADS, 0, (c)->stream>>>(__VA_ARGS__); \
        else kern<LC_DT_F16><<<g_, LC_XENT_THREADS, 0, (c)->stream>>>(__VA_ARGS__);          \
        LC_LAUNCHED(c);                                                                      \
    } while (0)

static void lc_xent_fwd(llm_backend *be, float *losses, float *lse, const void *logits,
                        const int32_t *targets, int N, int V, int Vp, int dt, int f32,
                        const char *op)
{
    lc_ctx *c = lc_get(be);
    if (!lc_xent_dt(c, dt, f32, op) || N <= 0) return;
    LC_XENT_LAUNCH(c, dt, lc_xent_fwd_kernel, N, losses, lse, logits, targets, V, Vp,
                   lc_xent_vec(logits, Vp));
}

static void lc_xent_bwd(llm_backend *be, void *dlogits, const void *logits, const float *lse,
                        const int32_t *targets, float dloss, int N, int V, int Vp, int dt,
                        int f32, const char *op)
{
    lc_ctx *c = lc_get(be);
    if (!lc_xent_dt(c, dt, f32, op) || N <= 0) return;
    /* the vector path reads and writes the same 16-byte groups: both must allow it */
    int vec = lc_xent_vec(logits, Vp) && lc_xent_vec(dlogits, Vp);
    LC_XENT_LAUNCH(c, dt, lc_xent_bwd_kernel, N, dlogits, logits, lse, targets, dloss, V, Vp,
                   vec);
}

static void lc_xent_forward(llm_backend *be, float *losses, float *lse, const float *logits,
                            const int32_t *targets, int N, int V, int Vp)
{
    lc_xent_fwd(be, losses, lse, logits, targets, N, V, Vp, LC_DT_F32, 1, "xent_forward");
}

static void lc_xent_backward(llm_backend *be, float *dlogits, const float *logits,
                             const float *lse, const int32_t *targets, float dloss,
                             int N, int V, int Vp)
{
    lc_xent_bwd(be, dlogits, logits, lse, targets, dloss, N, V, Vp, LC_DT_F32, 1,
                "xent_backward");
}

static void lc_xent_forward_lo(llm_backend *be, float *losses, float *lse, const void *logits,
                               const int32_t *targets, int N, int V, int Vp, int lo)
{
    lc_xent_fwd(be, losses, lse, logits, targets, N, V, Vp, lo, 0,
                "xent_forward_lo: lo is neither bf16 nor f16");
}

static void lc_xent_backward_lo(llm_backend *be, void *dlogits, const void *logits,
                                const float *lse, const int32_t *targets, float dloss, int N,
                                int V, int Vp, int lo)
{
    lc_xent_bwd(be, dlogits, logits, lse, targets, dloss, N, V, Vp, lo, 0,
                "xent_backward_lo: lo is neither bf16 nor f16");
}

static void lc_xent_fused(llm_backend *be, float *losses, void *logits, const int32_t *targets,
                          float dloss, int N, int V, int Vp, int lo)
{
    lc_ctx *c = lc_get(be);
    if (!lc_xent_dt(c, lo, 1, "xent_fused: lo is neither 0 (fp32), bf16 nor f16") || N <= 0)
        return;
    LC_XENT_LAUNCH(c, lo, lc_xent_fused_kernel, N, losses, logits, targets, dloss, V, Vp,
                   lc_xent_vec(logits, Vp));
}

extern "C" void lc_fill_xent(llm_backend *be)
{
    be->xent_forward = lc_xent_forward;
    be->xent_backward = lc_xent_backward;
    be->xent_forward_lo = lc_xent_forward_lo;
    be->xent_backward_lo = lc_xent_backward_lo;
    be->xent_fused = lc_xent_fused;
}
