/* cuda_attention.cu — causal multi-head attention: cuBLAS strided-batched GEMMs per batch
 * row (batched over heads) and fused scaled causal softmax kernels (forward, backward). */
#include <math.h>

#include "kernels/cuda/cuda_internal.h"

#define LC_WARP 32

/* One warp per row r of rows (b,h,t); t = r % T.  On entry att holds scale * q.k for
 * every column; on exit softmax over columns 0..t, exact zeros after t. */
__global__ void lc_causal_softmax_kernel(float *att, size_t rows, int T)
{
    size_t warp = (blockIdx.x * (size_t)blockDim.x + threadIdx.x) / LC_WARP;
    int lane = threadIdx.x % LC_WARP;
    if (warp >= rows) return;
    int t = (int)(warp % (size_t)T);
    float *row = att + warp * (size_t)T;
    float mx = -INFINITY;
    for (int j = lane; j <= t; j += LC_WARP) mx = fmaxf(mx, row[j]);
    for (int o = 16; o > 0; o >>= 1) mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, o));
    float sum = 0.0f;
    for (int j = lane; j <= t; j += LC_WARP) {
        float e = expf(row[j] - mx);
        row[j] = e;
        sum += e;
    }
    for (int o = 16; o > 0; o >>= 1) sum += __shfl_xor_sync(0xffffffffu, sum, o);
    float inv = 1.0f / sum;   /* sum >= 1: the max term contributes exp(0) */
    for (int j = lane; j < T; j += LC_WARP) row[j] = (j <= t) ? row[j] * inv : 0.0f;
}

/* Softmax backward, in place on datt: dpre[t,j] = scale * att[t,j] (datt[t,j] -
 * sum_i att[t,i] datt[t,i]) for j <= t, 0 after.  One warp per row. */
__global__ void lc_causal_softmax_bwd_kernel(float *datt, const float *att, size_t rows, int T,
                                             float scale)
{
    size_t warp = (blockIdx.x * (size_t)blockDim.x + threadIdx.x) / LC_WARP;
    int lane = threadIdx.x % LC_WARP;
    if (warp >= rows) return;
    int t = (int)(warp % (size_t)T);
    float *d = datt + warp * (size_t)T;
    const float *a = att + warp * (size_t)T;
    float dot = 0.0f;
    for (int j = lane; j <= t; j += LC_WARP) dot += a[j] * d[j];
    for (int o = 16; o > 0; o >>= 1) dot += __shfl_xor_sync(0xffffffffu, dot, o);
    for (int j = lane; j < T; j += LC_WARP) d[j] = (j <= t) ? scale * a[j] * (d[j] - dot) : 0.0f;
}

static void lc_softmax_launch(lc_ctx *c, float *att, size_t rows, int T)
{
    const unsigned threads = 256;   /* 8 rows per block */
    size_t blocks = (rows * LC_WARP + threads - 1) / threads;
    lc_causal_softmax_kernel<<<(unsigned)blocks, threads, 0, c->stream>>>(att, rows, T);
    LC_LAUNCHED(c);
}

static void lc_attention_forward(llm_backend *be, float *out, float *att, const float *qkv,
                                 int B, int T, int C, int NH)
{
    lc_ctx *c = lc_get(be);
    if (B <= 0 || T <= 0 || C <= 0 || NH <= 0) return;
    int hs = C / NH;
    float scale = 1.0f / sqrtf((float)hs);
    long long tt = (long long)T * T;
    for (int b = 0; b < B; b++) {
        const float *q = qkv + (size_t)b * T * 3 * C;
        const float *k = q + C;
        float *a = att + (size_t)b * NH * tt;
        /* S_h(T,T) = scale * Q_h K_h^T; head h starts hs floats further in each row */
        lc_gemm_rm(c, 0, 1, T, T, hs, scale, q, 3 * C, hs, k, 3 * C, hs, 0.0f, a, T, tt, NH);
    }
    lc_softmax_launch(c, att, (size_t)B * NH * T, T);
    for (int b = 0; b < B; b++) {
        const float *v = qkv + (size_t)b * T * 3 * C + 2 * C;
        const float *a = att + (size_t)b * NH * tt;
        /* out_h(T,hs) = att_h(T,T) V_h(T,hs), written into out (B,T,C) at column h*hs */
        lc_gemm_rm(c, 0, 0, T, hs, T, 1.0f, a, T, tt, v, 3 * C, hs, 0.0f,
                   out + (size_t)b * T * C, C, hs, NH);
    }
}

static void lc_attention_backward(llm_backend *be, float *dqkv, const float *dout,
                                  const float *qkv, const float *att, int B, int T, int C, int NH)
{
    lc_ctx *c = lc_get(be);
    if (B <= 0 || T <= 0 || C <= 0 || NH <= 0) return;
    int hs = C / NH;
    float scale = 1.0f / sqrtf((float)hs);
    long long tt = (long long)T * T;
    /* per batch row: datt for all heads (NH,T,T); the stream orders reuse across b */
    float *datt = (float *)lc_scratch(c, (size_t)NH * tt * sizeof(float));
    if (!datt) return;
    for (int b = 0; b < B; b++) {
        const float *q = qkv + (size_t)b * T * 3 * C;
        const float *k = q + C, *v = q + 2 * C;
        float *dq = dqkv + (size_t)b * T * 3 * C;
        float *dk = dq + C, *dv = dq + 2 * C;
        const float *a = att + (size_t)b * NH * tt;
        const float *d = dout + (size_t)b * T * C;
        /* datt_h(T,T) = dout_h(T,hs) V_h^T */
        lc_gemm_rm(c, 0, 1, T, T, hs, 1.0f, d, C, hs, v, 3 * C, hs, 0.0f, datt, T, tt, NH);
        /* dV_h(T,hs) += att_h^T dout_h */
        lc_gemm_rm(c, 1, 0, T, hs, T, 1.0f, a, T, tt, d, C, hs, 1.0f, dv, 3 * C, hs, NH);
        /* datt -> scale * dpreatt (softmax backward, causal) */
        size_t rows = (size_t)NH * T;
        const unsigned threads = 256;
        size_t blocks = (rows * LC_WARP + threads - 1) / threads;
        lc_causal_softmax_bwd_kernel<<<(unsigned)blocks, threads, 0, c->stream>>>(datt, a, rows, T, scale);
        if (LC_LAUNCHED(c)) return;
        /* dQ_h(T,hs) += dpre_h K_h ; dK_h(T,hs) += dpre_h^T Q_h */
        lc_gemm_rm(c, 0, 0, T, hs, T, 1.0f, datt, T, tt, k, 3 * C, hs, 1.0f, dq, 3 * C, hs, NH);
        lc_gemm_rm(c, 1, 0, T, hs, T, 1.0f, datt, T, tt, q, 3 * C, hs, 1.0f, dk, 3 * C, hs, NH);
    }
}

extern "C" void lc_fill_attention(llm_backend *be)
{
    be->attention_forward = lc_attention_forward;
    be->attention_backward = lc_attention_backward;
}
