/* cuda_infer.cu — the decode-shaped inference ops of backend.h on the GPU: embed_rows,
 * matmul_rows, kv_store, attention_rows (KV caches in device memory), argmax_rows
 * (greedy tokens).
 *
 * First version: plain kernels whose reduction order for a row never depends on N or on
 * the other rows, so batched decode equals one-at-a-time decode bit for bit (the
 * contract in backend.h).  Weights may be f32, f16 or bf16 (converted to fp32 as they
 * are read; sums in fp32).  q8_0/q4_0 are refused by infer_dtype_ok. */
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <limits.h>
#include <math.h>
#include <stdint.h>

#include "kernels/cuda/cuda_internal.h"

__device__ __forceinline__ float lc_ld(const float *p, size_t i) { return p[i]; }
__device__ __forceinline__ float lc_ld(const __half *p, size_t i) { return __half2float(p[i]); }
__device__ __forceinline__ float lc_ld(const __nv_bfloat16 *p, size_t i) { return __bfloat162float(p[i]); }

static int lc_infer_dtype_ok(llm_backend *be, int dt)
{
    (void)be;
    return dt == LC_DT_F32 || dt == LC_DT_F16 || dt == LC_DT_BF16;
}

/* ---- embed_rows: out[i,c] = wte[ids[i],c] + wpe[pos[i],c] ---- */

template <typename W>
__global__ void lc_embed_rows_kernel(float *out, const int32_t *ids, const int32_t *pos,
                                     const W *wte, const float *wpe, int N, int C)
{
    size_t total = (size_t)N * C;
    for (size_t k = blockIdx.x * (size_t)blockDim.x + threadIdx.x; k < total;
         k += (size_t)gridDim.x * blockDim.x) {
        size_t i = k / C, c = k % C;
        out[k] = lc_ld(wte, (size_t)ids[i] * C + c) + wpe[(size_t)pos[i] * C + c];
    }
}

static void lc_embed_rows(llm_backend *be, float *out, const int32_t *ids, const int32_t *pos,
                          const void *wte, int wte_dt, const float *wpe, int N, int C)
{
    lc_ctx *c = lc_get(be);
    size_t total = (size_t)N * C;
    if (!total) return;
    unsigned nb = lc_blocks(total, 256, 65535);
    if (wte_dt == LC_DT_BF16)
        lc_embed_rows_kernel<<<nb, 256, 0, c->stream>>>(out, ids, pos, (const __nv_bfloat16 *)wte, wpe, N, C);
    else if (wte_dt == LC_DT_F16)
        lc_embed_rows_kernel<<<nb, 256, 0, c->stream>>>(out, ids, pos, (const __half *)wte, wpe, N, C);
    else
        lc_embed_rows_kernel<<<nb, 256, 0, c->stream>>>(out, ids, pos, (const float *)wte, wpe, N, C);
    LC_LAUNCHED(c);
}

/* ---- matmul_rows: out(N,OC) = inp(N,C) w(OC,C)^T + bias ----
 * One warp per output column o, looping over the rows LC_MR_ROWS at a time: each weight
 * element is loaded once per group of rows (decode streams the weights once per step).
 * Each (n,o) is a lane-strided fp32 sum and a fixed shuffle tree: the same for any N. */

#define LC_MR_WARPS 8

#define LC_MR_ROWS 8    /* rows sharing one read of each weight element */

template <typename W>
__global__ void lc_matmul_rows_kernel(float *out, const float *inp, const W *w,
                                      const float *bias, int N, int C, int OC)
{
    int lane = threadIdx.x & 31;
    long long o = (long long)blockIdx.x * LC_MR_WARPS + (threadIdx.x >> 5);
    if (o >= OC) return;   /* whole warps exit together: o is uniform in a warp */
    const W *wr = w + (size_t)o * C;
    float b = bias ? bias[o] : 0.0f;
    for (int n0 = 0; n0 < N; n0 += LC_MR_ROWS) {
        int nr = min(LC_MR_ROWS, N - n0);
        const float *x = inp + (size_t)n0 * C;
        float s[LC_MR_ROWS];
#pragma unroll
        for (int r = 0; r < LC_MR_ROWS; r++) s[r] = 0.0f;
        /* each s[r] is the same lane-strided sum whatever nr is: grouping rows only
         * shares the weight loads */
        for (int k = lane; k < C; k += 32) {
            float wk = lc_ld(wr, (size_t)k);
#pragma unroll
            for (int r = 0; r < LC_MR_ROWS; r++)
                if (r < nr) s[r] += x[(size_t)r * C + k] * wk;
        }
#pragma unroll
        for (int r = 0; r < LC_MR_ROWS; r++) {
            float v = s[r];
            for (int off = 16; off > 0; off >>= 1)
                v += __shfl_xor_sync(0xffffffffu, v, off);
            if (lane == 0 && r < nr)
                out[(size_t)(n0 + r) * OC + o] = v + b;
        }
    }
}

static void lc_matmul_rows(llm_backend *be, float *out, const float *inp, const void *w,
                           int w_dt, const float *bias, int N, int C, int OC)
{
    lc_ctx *c = lc_get(be);
    if (N <= 0 || OC <= 0) return;
    unsigned nb = (unsigned)((OC + LC_MR_WARPS - 1) / LC_MR_WARPS);
    unsigned nt = 32 * LC_MR_WARPS;
    if (w_dt == LC_DT_BF16)
        lc_matmul_rows_kernel<<<nb, nt, 0, c->stream>>>(out, inp, (const __nv_bfloat16 *)w, bias, N, C, OC);
    else if (w_dt == LC_DT_F16)
        lc_matmul_rows_kernel<<<nb, nt, 0, c->stream>>>(out, inp, (const __half *)w, bias, N, C, OC);
    else
        lc_matmul_rows_kernel<<<nb, nt, 0, c->stream>>>(out, inp, (const float *)w, bias, N, C, OC);
    LC_LAUNCHED(c);
}

/* ---- kv_store: k, v of row i -> caches at [slot[i], pos[i]] ---- */

__global__ void lc_kv_store_kernel(float *kc, float *vc, const float *qkv, const int32_t *slot,
                                   const int32_t *pos, int N, int C, int maxT)
{
    size_t total = (size_t)N * C;
    for (size_t k = blockIdx.x * (size_t)blockDim.x + threadIdx.x; k < total;
         k += (size_t)gridDim.x * blockDim.x) {
        size_t i = k / C, ch = k % C;
        size_t at = ((size_t)slot[i] * maxT + pos[i]) * C + ch;
        const float *r = qkv + i * 3 * (size_t)C;
        kc[at] = r[C + ch];
        vc[at] = r[2 * (size_t)C + ch];
    }
}

static void lc_kv_store(llm_backend *be, float *kcache, float *vcache, const float *qkv,
                        const int32_t *slot, const int32_t *pos, int N, int C, int maxT)
{
    lc_ctx *c = lc_get(be);
    size_t total = (size_t)N * C;
    if (!total) return;
    lc_kv_store_kernel<<<lc_blocks(total, 256, 65535), 256, 0, c->stream>>>(kcache, vcache, qkv, slot,
                                                                             pos, N, C, maxT);
    LC_LAUNCHED(c);
}

/* ---- attention_rows ----
 * One block per (row, head).  Positions are taken LC_AR_T at a time: each thread scores
 * one position (a full hs-long dot product), the block finds the chunk's max and
 * rescales the running output and sum (online softmax), then each thread accumulates
 * its own output dimensions over the chunk.  Shared: q[hs], acc[hs], p[LC_AR_T],
 * red[LC_AR_T]. */

#define LC_AR_T 128   /* threads per block and positions per chunk (power of two) */

__device__ float lc_block_reduce(float *red, float v, int is_max)
{
    int t = threadIdx.x;
    __syncthreads();   /* red may still be read from the previous reduction */
    red[t] = v;
    __syncthreads();
    for (int s = LC_AR_T / 2; s > 0; s >>= 1) {
        if (t < s) red[t] = is_max ? fmaxf(red[t], red[t + s]) : red[t] + red[t + s];
        __syncthreads();
    }
    return red[0];
}

__global__ void lc_attention_rows_kernel(float *out, const float *qkv, const float *kc,
                                         const float *vc, const int32_t *slot, const int32_t *pos,
                                         int C, int NH, int maxT, float scale)
{
    LC_DYN_SMEM(sh_bytes);
    float *sh = (float *)sh_bytes;
    int hs = C / NH;
    int i = blockIdx.x / NH, h = blockIdx.x % NH;
    int tid = threadIdx.x;
    float *q = sh, *acc = sh + hs, *p = sh + 2 * hs, *red = p + LC_AR_T;
    const float *qg = qkv + (size_t)i * 3 * C + (size_t)h * hs;
    for (int d = tid; d < hs; d += LC_AR_T) {
        q[d] = qg[d];
        acc[d] = 0.0f;
    }
    __syncthreads();
    const float *kb = kc + (size_t)slot[i] * maxT * C + (size_t)h * hs;
    const float *vb = vc + (size_t)slot[i] * maxT * C + (size_t)h * hs;
    int T = pos[i] + 1;
    float m = -INFINITY, l = 0.0f;
    for (int t0 = 0; t0 < T; t0 += LC_AR_T) {
        int t = t0 + tid;
        float s = -INFINITY;
        if (t < T) {
            const float *k = kb + (size_t)t * C;
            float dot = 0.0f;
            for (int d = 0; d < hs; d++)
                dot += q[d] * k[d];
            s = dot * scale;
        }
        float mn = fmaxf(m, lc_block_reduce(red, s, 1));   /* finite: t0 < T */
        float e = t < T ? expf(s - mn) : 0.0f;
        p[tid] = e;
        float csum = lc_block_reduce(red, e, 0);   /* its barriers also publish p */
        float corr = expf(m - mn);                  /* 0 on the first chunk (m = -inf) */
        l = l * corr + csum;
        int nt = min(LC_AR_T, T - t0);
        for (int d = tid; d < hs; d += LC_AR_T) {
            float a = acc[d] * corr;
            const float *v = vb + (size_t)t0 * C + d;
            for (int j = 0; j < nt; j++)
                a += p[j] * v[(size_t)j * C];
            acc[d] = a;
        }
        m = mn;
        __syncthreads();   /* p is rewritten by the next chunk */
    }
    float inv = 1.0f / l;
    float *o = out + (size_t)i * C + (size_t)h * hs;
    for (int d = tid; d < hs; d += LC_AR_T)
        o[d] = acc[d] * inv;
}

static void lc_attention_rows(llm_backend *be, float *out, const float *qkv, const float *kcache,
                              const float *vcache, const int32_t *slot, const int32_t *pos,
                              int N, int C, int NH, int maxT)
{
    lc_ctx *c = lc_get(be);
    if (N <= 0 || NH <= 0 || C <= 0) return;
    int hs = C / NH;
    size_t shmem = (2 * (size_t)hs + 2 * LC_AR_T) * sizeof(float);
    if (shmem > 48 * 1024) {
        /* hs > 12000: no GPT-style model has heads that wide; refuse loudly */
        lc_fail_cuda(c, cudaErrorInvalidValue, "attention_rows: head size too large", __FILE__, __LINE__);
        return;
    }
    long long blocks = (long long)N * NH;
    if (blocks > 0x7fffffffLL) {
        lc_fail_cuda(c, cudaErrorInvalidValue, "attention_rows: too many rows", __FILE__, __LINE__);
        return;
    }
    lc_attention_rows_kernel<<<(unsigned)blocks, LC_AR_T, shmem, c->stream>>>(
        out, qkv, kcache, vcache, slot, pos, C, NH, maxT, 1.0f / sqrtf((float)hs));
    LC_LAUNCHED(c);
}

/* ---- argmax_rows: llm_argmax of each row (common/sampler.c) ----
 * One block per row.  Each thread keeps the best (value, index) of its elements, then a
 * shuffle tree per warp and one warp over the warps' bests.  (v, i) beats (bv, bi) when
 * v > bv, or v == bv and i < bi: NaN never beats anything (both compares are false), -0
 * and +0 are equal (the lower index wins), and since that order does not depend on the
 * order of the comparisons, the result is llm_argmax's, the lowest index holding the
 * largest non-NaN value, whatever the thread count.  A row whose first entry is NaN
 * gives 0, as llm_argmax does.  The row is read as float4 from its first 16-byte
 * boundary (a row of a padded (N, Vp) matrix is aligned when Vp % 4 == 0), scalars
 * before and after. */

/* 1024 threads, four float4 loads each in flight: 64 KiB of a row requested at once, so
 * that one block (a batch-1 decode step) is not latency-bound over GPT-2's 200 KB of
 * logits.  ptxas: 31-32 registers, no spills (sm_80, sm_90). */
#define LC_AM_T 1024

__device__ __forceinline__ void lc_am_take(float &bv, int &bi, float v, int i)
{
    if (v > bv || (v == bv && i < bi)) { bv = v; bi = i; }
}

__device__ __forceinline__ void lc_am_take4(float &bv, int &bi, float4 q, int i)
{
    lc_am_take(bv, bi, q.x, i);
    lc_am_take(bv, bi, q.y, i + 1);
    lc_am_take(bv, bi, q.z, i + 2);
    lc_am_take(bv, bi, q.w, i + 3);
}

__device__ __forceinline__ void lc_am_warp(float &bv, int &bi)
{
#pragma unroll
    for (int off = 16; off; off >>= 1) {
        float ov = __shfl_down_sync(0xffffffffu, bv, off);
        int oi = __shfl_down_sync(0xffffffffu, bi, off);
        lc_am_take(bv, bi, ov, oi);
    }
}

__global__ void __launch_bounds__(LC_AM_T)
lc_argmax_rows_kernel(int32_t *ids, const float *logits, int V, size_t ld)
{
    __shared__ float s_v[LC_AM_T / 32];
    __shared__ int s_i[LC_AM_T / 32];
    const float *x = logits + (size_t)blockIdx.x * ld;
    int tid = threadIdx.x;
    /* llm_argmax's 0 for V <= 1 or a NaN first entry (the same for the whole block,
     * which still meets the barrier and shuffles below: every block takes one path) */
    bool zero = V <= 1 || x[0] != x[0];
    float bv = -INFINITY;
    int bi = INT_MAX;
    if (!zero) {
        int head = (int)(((16 - ((uintptr_t)x & 15)) & 15) >> 2);
        if (head > V) head = V;
        if (tid < head) lc_am_take(bv, bi, x[tid], tid);
        const float4 *x4 = (const float4 *)(x + head);
        int n4 = (V - head) >> 2, k = tid;
        /* four independent loads in flight per thread */
        for (; k + 3 * LC_AM_T < n4; k += 4 * LC_AM_T) {
            float4 q0 = x4[k], q1 = x4[k + LC_AM_T], q2 = x4[k + 2 * LC_AM_T],
                   q3 = x4[k + 3 * LC_AM_T];
            lc_am_take4(bv, bi, q0, head + 4 * k);
            lc_am_take4(bv, bi, q1, head + 4 * (k + LC_AM_T));
            lc_am_take4(bv, bi, q2, head + 4 * (k + 2 * LC_AM_T));
            lc_am_take4(bv, bi, q3, head + 4 * (k + 3 * LC_AM_T));
        }
        for (; k < n4; k += LC_AM_T)
            lc_am_take4(bv, bi, x4[k], head + 4 * k);
        for (int i = head + 4 * n4 + tid; i < V; i += LC_AM_T)
            lc_am_take(bv, bi, x[i], i);
    }
    lc_am_warp(bv, bi);
    int lane = tid & 31, w = tid >> 5;
    if (lane == 0) { s_v[w] = bv; s_i[w] = bi; }
    __syncthreads();
    if (w == 0) {
        bv = lane < LC_AM_T / 32 ? s_v[lane] : -INFINITY;
        bi = lane < LC_AM_T / 32 ? s_i[lane] : INT_MAX;
        lc_am_warp(bv, bi);
        if (lane == 0) ids[blockIdx.x] = zero ? 0 : bi;   /* else x[0] is a number: an
                                                           * index won */
    }
}

static void lc_argmax_rows(llm_backend *be, int32_t *ids, const float *logits, int N, int V,
                           int ld)
{
    lc_ctx *c = lc_get(be);
    if (N <= 0) return;
    if (ld < V) {
        lc_fail_cuda(c, cudaErrorInvalidValue, "argmax_rows: leading dimension below V", __FILE__, __LINE__);
        return;
    }
    lc_argmax_rows_kernel<<<(unsigned)N, LC_AM_T, 0, c->stream>>>(ids, logits, V, (size_t)ld);
    LC_LAUNCHED(c);
}

extern "C" void lc_fill_infer(llm_backend *be)
{
    be->infer_dtype_ok = lc_infer_dtype_ok;
    be->embed_rows = lc_embed_rows;
    be->matmul_rows = lc_matmul_rows;
    be->kv_store = lc_kv_store;
    be->attention_rows = lc_attention_rows;
    be->argmax_rows = lc_argmax_rows;
    lc_fill_graph(be);   /* cuda_graph.cu: decode steps are recorded */
}
