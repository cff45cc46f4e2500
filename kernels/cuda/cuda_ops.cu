/* cuda_ops.cu — embedding, layernorm (and fused with the residual), GELU, residual/accumulate;
 * and the lo-activation forms of the layernorm forward and GELU (backend.h, mixed
 * precision): the same kernels templated on the dtype of their tensors, so a lo op
 * computes the fp32 op's value from the lo inputs' values and rounds it once.  The
 * cross-entropy ops are in cuda_xent.cu. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/cuda/cuda_internal.h"
#include "kernels/cuda/cuda_bucket.h"

#define LC_WARP 32
#include "kernels/cuda/cuda_resln.cuh"

#define GRID_STRIDE(i, n) \
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < (n); \
         i += (size_t)gridDim.x * blockDim.x)

static inline unsigned lc_ew_blocks(size_t n) { return lc_blocks(n, 256, 65535u * 4); }

/* ---- embedding ---- */

__global__ void lc_embed_fwd_kernel(float *out, const int32_t *inp, const float *wte,
                                    const float *wpe, size_t N, int T, int C)
{
    GRID_STRIDE(i, N * (size_t)C) {
        size_t n = i / C;
        int c = (int)(i % C);
        int t = (int)(n % T);
        out[i] = wte[(size_t)inp[n] * C + c] + wpe[(size_t)t * C + c];
    }
}

static void lc_embed_forward(llm_backend *be, float *out, const int32_t *inp, const float *wte,
                             const float *wpe, int B, int T, int C)
{
    lc_ctx *c = lc_get(be);
    size_t N = (size_t)B * T;
    if (!N || C <= 0) return;
    lc_embed_fwd_kernel<<<lc_ew_blocks(N * C), 256, 0, c->stream>>>(out, inp, wte, wpe, N, T, C);
    LC_LAUNCHED(c);
}

/* dwpe[t,c] += dout[b,t,c] for b = 0..B-1 in order: each thread owns one (t,c). */
__global__ void lc_dwpe_kernel(float *dwpe, const float *dout, int B, int T, int C)
{
    GRID_STRIDE(i, (size_t)T * C) {
        float acc = dwpe[i];
        for (int b = 0; b < B; b++) acc += dout[(size_t)b * T * C + i];
        dwpe[i] = acc;
    }
}

/* One block row per distinct token: dwte[tok,c] += dout[p,c] over the token's positions p
 * in increasing order, so the sum is the same on every run (and the CPU's order). */
__global__ void lc_dwte_kernel(float *dwte, const float *dout, const int32_t *pos,
                               const int32_t *tok, const int32_t *off, int C)
{
    int u = blockIdx.x;
    int c = blockIdx.y * blockDim.x + threadIdx.x;
    if (c >= C) return;
    float *dst = dwte + (size_t)tok[u] * C + c;
    float acc = *dst;
    for (int i = off[u]; i < off[u + 1]; i++) acc += dout[(size_t)pos[i] * C + c];
    *dst = acc;
}

/* Host buffers for n positions; 0 or -1. */
static int lc_embed_buffers(lc_ctx *c, size_t n)
{
    if (c->h_n >= n && c->d_n >= 3 * n + 1) return 0;
    /* an earlier dwte kernel may still read d_buf */
    if (LC_CK(c, cudaStreamSynchronize(c->stream))) return -1;
    c->eh_inp = NULL;   /* a hint's grouping lives in d_buf */
    if (c->h_tok) cudaFreeHost(c->h_tok);
    if (c->h_buf) cudaFreeHost(c->h_buf);
    if (c->d_buf) lc_dfree(c, c->d_buf);
    free(c->h_tmp);
    c->h_tok = c->h_buf = c->h_tmp = c->d_buf = NULL;
    c->h_n = c->d_n = 0;
    if (LC_CK(c, cudaMallocHost((void **)&c->h_tok, n * sizeof(int32_t))) ||
        LC_CK(c, cudaMallocHost((void **)&c->h_buf, (3 * n + 1) * sizeof(int32_t))) ||
        LC_CK(c, lc_dmalloc(c, (void **)&c->d_buf, (3 * n + 1) * sizeof(int32_t))))
        return -1;
    c->h_tmp = (int32_t *)malloc((n + 65536) * sizeof(int32_t));
    if (!c->h_tmp) { LC_CK(c, cudaErrorMemoryAllocation); return -1; }
    c->h_n = n;
    c->d_n = 3 * n + 1;
    return 0;
}

/* Group the N ids in tok (host) into h_buf (see cuda_bucket.h) and send the grouping to
 * d_buf through to_device: queued on the compute stream, so every dwte kernel queued
 * before has read the previous contents, and h_buf is free again on return.  Returns
 * the number of distinct tokens, or 0 on failure (error recorded; N > 0). */
static size_t lc_embed_group(llm_backend *be, lc_ctx *c, const int32_t *tok, size_t N)
{
    int32_t *pos = c->h_buf, *utok = c->h_buf + N, *off = NULL;
    size_t U = llm_cuda_bucket(tok, N, pos, utok, &off, c->h_tmp);
    int failed = c->failed;
    be->to_device(be, c->d_buf, c->h_buf, (N + 2 * U + 1) * sizeof(int32_t));
    return c->failed == failed ? U : 0;
}

/* embed_hint: the grouping made while the device runs the forward (the ids' upload is
 * queued before it, the dwte kernel after). */
static void lc_embed_hint(llm_backend *be, const int32_t *inp, const int32_t *host, size_t N)
{
    lc_ctx *c = lc_get(be);
    c->eh_inp = NULL;
    if (!N || N > (size_t)INT32_MAX / 4 || c->recording || lc_embed_buffers(c, N)) return;
    size_t U = lc_embed_group(be, c, host, N);
    if (!U) return;
    c->eh_inp = inp;
    c->eh_N = N;
    c->eh_U = U;
}

static void lc_embed_backward(llm_backend *be, float *dwte, float *dwpe, const float *dout,
                              const int32_t *inp, int B, int T, int C)
{
    lc_ctx *c = lc_get(be);
    size_t N = (size_t)B * T;
    if (!N || C <= 0) return;
    lc_dwpe_kernel<<<lc_ew_blocks((size_t)T * C), 256, 0, c->stream>>>(dwpe, dout, B, T, C);
    if (LC_LAUNCHED(c)) return;
    size_t U;
    if (c->eh_inp == inp && c->eh_N == N) {
        U = c->eh_U;
        c->embed_runs[0]++;
    } else {
        /* No hint: read the ids back and group them here (the device waits meanwhile) */
        c->eh_inp = NULL;
        if (lc_recording(c, "embed_backward without embed_hint") || lc_embed_buffers(c, N) ||
            LC_CK(c, cudaMemcpyAsync(c->h_tok, inp, N * sizeof(int32_t), cudaMemcpyDeviceToHost, c->stream)) ||
            LC_CK(c, cudaStreamSynchronize(c->stream)))
            return;
        if (!(U = lc_embed_group(be, c, c->h_tok, N))) return;
        c->embed_runs[1]++;
    }
    dim3 grid((unsigned)U, (unsigned)((C + 127) / 128));
    lc_dwte_kernel<<<grid, 128, 0, c->stream>>>(dwte, dout, c->d_buf, c->d_buf + N,
                                                 c->d_buf + N + U, C);
    LC_LAUNCHED(c);
}

/* ---- layernorm ---- */

/* lc_warp_sum, lc_ln_fwd_kernel and lc_resln_fwd_kernel: cuda_resln.cuh */

static void lc_layernorm_forward(llm_backend *be, float *out, float *mean, float *rstd,
                                 const float *inp, const float *w, const float *b, int N, int C)
{
    lc_ctx *c = lc_get(be);
    if (N <= 0 || C <= 0) return;
    unsigned blocks = (unsigned)(((size_t)N * LC_WARP + 255) / 256);
    lc_ln_fwd_kernel<LC_DT_F32><<<blocks, 256, 0, c->stream>>>(out, mean, rstd, inp, w, b, N, C);
    LC_LAUNCHED(c);
}

static void lc_residual_layernorm_forward(llm_backend *be, float *res, float *out, float *mean,
                                          float *rstd, const float *a, const float *b,
                                          const float *w, const float *bias, int N, int C)
{
    lc_ctx *c = lc_get(be);
    if (N <= 0 || C <= 0) return;
    unsigned blocks = (unsigned)(((size_t)N * LC_WARP + 255) / 256);
    lc_resln_fwd_kernel<LC_DT_F32><<<blocks, 256, 0, c->stream>>>(res, out, mean, rstd, a, b, w, bias, N, C);
    LC_LAUNCHED(c);
}

static int lc_lo_arg(lc_ctx *c, int lo, const char *op)
{
    if (lo == LC_DT_BF16 || lo == LC_DT_F16) return 1;
    lc_fail_cuda(c, cudaErrorInvalidValue, op, __FILE__, __LINE__);
    return 0;
}

/* layernorm_forward / residual_layernorm_forward's kernels with a lo out: the fp32 value
 * of those ops rounded once */
static void lc_layernorm_forward_lo(llm_backend *be, float *res, void *out, float *mean,
                                    float *rstd, const float *a, const float *b, const float *w,
                                    const float *bias, int N, int C, int lo)
{
    lc_ctx *c = lc_get(be);
    if (!lc_lo_arg(c, lo, "layernorm_forward_lo: lo is neither bf16 nor f16") || N <= 0 || C <= 0)
        return;
    unsigned blocks = (unsigned)(((size_t)N * LC_WARP + 255) / 256);
    if (b) LC_LAUNCH_LO(c, lo, lc_resln_fwd_kernel, blocks, 256, res, out, mean, rstd, a, b, w, bias, N, C);
    else LC_LAUNCH_LO(c, lo, lc_ln_fwd_kernel, blocks, 256, out, mean, rstd, a, w, bias, N, C);
    LC_LAUNCHED(c);
}

/* layernorm_backward in one pass over dout and inp: blocks of LC_LNB_WARPS warps take
 * chunks of LC_LNB_ROWS rows (blockIdx.x), warp w the chunk's rows w, w + W, ...: per
 * row the two sums a = mean(w dy), an = mean(w dy n), then dinp += (w dy - a - n an) r
 * (with LO: dinp_lo = the new dinp rounded) while the row's dw (dy n) and db (dy) terms
 * add up per column in the warp's shared-memory row (lanes own columns: no atomics);
 * then the block sums its warps' rows in order into the chunk's partial row.  The
 * chunking depends on N only, so the sums are reproducible. */
#define LC_LNB_ROWS 32

template <int LO>
__global__ void lc_ln_bwd_kernel(float *dinp, uint16_t *dlo, float *pdw, float *pdb,
                                 const float *dout, const float *inp, const float *w,
                                 const float *mean, const float *rstd, int N, int C)
{
    LC_DYN_SMEM(sm);
    int nw = (int)blockDim.x / LC_WARP, warp = (int)threadIdx.x / LC_WARP;
    int lane = (int)threadIdx.x % LC_WARP;
    float *aw = (float *)sm + (size_t)warp * 2 * C, *ab = aw + C;
    for (int i = lane; i < C; i += LC_WARP) aw[i] = ab[i] = 0.0f;
    int r0 = (int)blockIdx.x * LC_LNB_ROWS, r1 = min(N, r0 + LC_LNB_ROWS);
    for (int row = r0 + warp; row < r1; row += nw) {
        const float *x = inp + (size_t)row * C, *dy = dout + (size_t)row * C;
        float m = mean[row], r = rstd[row], a = 0.0f, an = 0.0f;
        for (int i = lane; i < C; i += LC_WARP) {
            float dn = w[i] * dy[i];
            a += dn;
            an += dn * ((x[i] - m) * r);
        }
        a = lc_warp_sum(a) / C;
        an = lc_warp_sum(an) / C;
        float *dx = dinp + (size_t)row * C;
        for (int i = lane; i < C; i += LC_WARP) {
            float n = (x[i] - m) * r, d = dy[i];
            float v = dx[i] + (w[i] * d - a - n * an) * r;
            dx[i] = v;
            if (LO) dlo[(size_t)row * C + i] = lc_to_lo<LO>(v);
            aw[i] += d * n;
            ab[i] += d;
        }
    }
    __syncthreads();
    for (int i = (int)threadIdx.x; i < C; i += (int)blockDim.x) {
        float sw = 0.0f, sb = 0.0f;
        for (int k = 0; k < nw; k++) {
            sw += ((float *)sm)[(size_t)k * 2 * C + i];
            sb += ((float *)sm)[(size_t)k * 2 * C + C + i];
        }
        pdw[(size_t)blockIdx.x * C + i] = sw;
        pdb[(size_t)blockIdx.x * C + i] = sb;
    }
}

__global__ void lc_ln_bwd_final_kernel(float *dw, float *db, const float *pdw, const float *pdb,
                                       int P, int C)
{
    int col = blockIdx.x * blockDim.x + threadIdx.x;
    if (col >= C) return;
    float aw = 0.0f, ab = 0.0f;
    for (int p = 0; p < P; p++) { aw += pdw[(size_t)p * C + col]; ab += pdb[(size_t)p * C + col]; }
    dw[col] += aw;
    db[col] += ab;
}

/* the launches of layernorm_backward(_lo): lo 0 for no lo copy.  Four warps a block while
 * their column sums fit in 48 KiB of shared memory, else one warp and, past 48 KiB, the
 * opt-in (C up to ~28k on sm_80/sm_90); beyond that an error is recorded. */
static void lc_ln_bwd(lc_ctx *c, float *dinp, void *dlo, int lo, float *dw, float *db,
                      const float *dout, const float *inp, const float *w, const float *mean,
                      const float *rstd, int N, int C)
{
    if (N <= 0 || C <= 0) return;
    int warps = (size_t)4 * 2 * C * sizeof(float) <= 48 * 1024 ? 4 : 1;
    size_t sm = (size_t)warps * 2 * C * sizeof(float);
    int P = (N + LC_LNB_ROWS - 1) / LC_LNB_ROWS;
    float *part = (float *)lc_scratch(c, 2 * (size_t)P * C * sizeof(float));
    if (!part) return;
    /* past 48 KiB the opt-in, once per kernel and device, for the device's largest
     * size: one value whatever C, so threads racing set the same one */
    static lc_optin optin[3];
    int k = lo == LC_DT_BF16 ? 2 : lo == LC_DT_F16 ? 1 : 0;
    if (sm > 48 * 1024 && sm > (size_t)c->smem_optin_max) {
        lc_fail_cuda(c, cudaErrorInvalidValue, "layernorm_backward: C too large for shared memory",
                     __FILE__, __LINE__);
        return;
    }
    unsigned dev = sm > 48 * 1024 ? lc_optin_device(c) : 0;
    if (sm > 48 * 1024 && lc_optin_needed(dev, optin[k])) {
        int mx = c->smem_optin_max;
        cudaError_t e = k == 2 ? cudaFuncSetAttribute(lc_ln_bwd_kernel<LC_DT_BF16>,
                                                      cudaFuncAttributeMaxDynamicSharedMemorySize, mx)
                      : k == 1 ? cudaFuncSetAttribute(lc_ln_bwd_kernel<LC_DT_F16>,
                                                      cudaFuncAttributeMaxDynamicSharedMemorySize, mx)
                               : cudaFuncSetAttribute(lc_ln_bwd_kernel<0>,
                                                      cudaFuncAttributeMaxDynamicSharedMemorySize, mx);
        if (LC_CK(c, e)) return;
        lc_optin_done(dev, optin[k]);
    }
    unsigned th = (unsigned)(warps * LC_WARP);
    float *pdw = part, *pdb = part + (size_t)P * C;
    uint16_t *dl = (uint16_t *)dlo;
    if (k == 2) lc_ln_bwd_kernel<LC_DT_BF16><<<P, th, sm, c->stream>>>(dinp, dl, pdw, pdb, dout, inp, w, mean, rstd, N, C);
    else if (k == 1) lc_ln_bwd_kernel<LC_DT_F16><<<P, th, sm, c->stream>>>(dinp, dl, pdw, pdb, dout, inp, w, mean, rstd, N, C);
    else lc_ln_bwd_kernel<0><<<P, th, sm, c->stream>>>(dinp, dl, pdw, pdb, dout, inp, w, mean, rstd, N, C);
    if (LC_LAUNCHED(c)) return;
    lc_ln_bwd_final_kernel<<<(C + 255) / 256, 256, 0, c->stream>>>(dw, db, pdw, pdb, P, C);
    LC_LAUNCHED(c);
}

static void lc_layernorm_backward(llm_backend *be, float *dinp, float *dw, float *db,
                                  const float *dout, const float *inp, const float *w,
                                  const float *mean, const float *rstd, int N, int C)
{
    lc_ln_bwd(lc_get(be), dinp, NULL, 0, dw, db, dout, inp, w, mean, rstd, N, C);
}

/* the same kernel with the lo copy written as each dinp element is: the fp32 op's bits,
 * then cast_lo's rounding */
static void lc_layernorm_backward_lo(llm_backend *be, float *dinp, void *dinp_lo, float *dw,
                                     float *db, const float *dout, const float *inp,
                                     const float *w, const float *mean, const float *rstd,
                                     int N, int C, int lo)
{
    lc_ctx *c = lc_get(be);
    if (!lc_lo_arg(c, lo, "layernorm_backward_lo: lo is neither bf16 nor f16")) return;
    lc_ln_bwd(c, dinp, dinp_lo, lo, dw, db, dout, inp, w, mean, rstd, N, C);
}

/* ---- GELU (tanh form), residual, accumulate ---- */

/* out = gelu(inp), tensors of dtype D (fp32, or lo: the value rounded once); out may
 * alias inp (each element read, then written, by one thread).  lc_gelu: cuda_lo.cuh */
template <int D>
__global__ void lc_gelu_fwd_kernel(void *out, const void *inp, size_t n)
{
    GRID_STRIDE(i, n) lc_st<D>(out, i, lc_gelu(lc_ld<D>(inp, i)));
}

/* fp32 (D = LC_DT_F32): dinp += gelu'(inp) dout; lo: dinp = lo(gelu'(inp) dout), dinp
 * may alias dout */
template <int D>
__global__ void lc_gelu_bwd_kernel(void *dinp, const void *inp, const void *dout, size_t n)
{
    GRID_STRIDE(i, n) {
        float g = lc_gelu_grad(lc_ld<D>(inp, i));
        if (D == LC_DT_F32) ((float *)dinp)[i] += g * ((const float *)dout)[i];
        else lc_st<D>(dinp, i, g * lc_ld<D>(dout, i));
    }
}

__global__ void lc_add_kernel(float *out, const float *a, const float *b, size_t n)
{
    GRID_STRIDE(i, n) out[i] = a[i] + b[i];
}

static void lc_gelu_forward(llm_backend *be, float *out, const float *inp, size_t n)
{
    lc_ctx *c = lc_get(be);
    if (!n) return;
    lc_gelu_fwd_kernel<LC_DT_F32><<<lc_ew_blocks(n), 256, 0, c->stream>>>(out, inp, n);
    LC_LAUNCHED(c);
}

static void lc_gelu_backward(llm_backend *be, float *dinp, const float *inp, const float *dout,
                             size_t n)
{
    lc_ctx *c = lc_get(be);
    if (!n) return;
    lc_gelu_bwd_kernel<LC_DT_F32><<<lc_ew_blocks(n), 256, 0, c->stream>>>(dinp, inp, dout, n);
    LC_LAUNCHED(c);
}

static void lc_gelu_forward_lo(llm_backend *be, void *out, const void *inp, size_t n, int lo)
{
    lc_ctx *c = lc_get(be);
    if (!lc_lo_arg(c, lo, "gelu_forward_lo: lo is neither bf16 nor f16") || !n) return;
    LC_LAUNCH_LO(c, lo, lc_gelu_fwd_kernel, lc_ew_blocks(n), 256, out, inp, n);
    LC_LAUNCHED(c);
}

static void lc_gelu_backward_lo(llm_backend *be, void *dinp, const void *inp, const void *dout,
                                size_t n, int lo)
{
    lc_ctx *c = lc_get(be);
    if (!lc_lo_arg(c, lo, "gelu_backward_lo: lo is neither bf16 nor f16") || !n) return;
    LC_LAUNCH_LO(c, lo, lc_gelu_bwd_kernel, lc_ew_blocks(n), 256, dinp, inp, dout, n);
    LC_LAUNCHED(c);
}

static void lc_residual_forward(llm_backend *be, float *out, const float *a, const float *b,
                                size_t n)
{
    lc_ctx *c = lc_get(be);
    if (!n) return;
    lc_add_kernel<<<lc_ew_blocks(n), 256, 0, c->stream>>>(out, a, b, n);
    LC_LAUNCHED(c);
}

static void lc_accumulate(llm_backend *be, float *dst, const float *src, size_t n)
{
    lc_ctx *c = lc_get(be);
    if (!n) return;
    lc_add_kernel<<<lc_ew_blocks(n), 256, 0, c->stream>>>(dst, dst, src, n);
    LC_LAUNCHED(c);
}

extern "C" void lc_fill_ops(llm_backend *be)
{
    be->embed_forward = lc_embed_forward;
    be->embed_backward = lc_embed_backward;
    be->embed_hint = lc_embed_hint;
    be->layernorm_forward = lc_layernorm_forward;
    be->layernorm_backward = lc_layernorm_backward;
    be->layernorm_backward_lo = lc_layernorm_backward_lo;
    be->gelu_forward = lc_gelu_forward;
    be->gelu_backward = lc_gelu_backward;
    be->residual_forward = lc_residual_forward;
    be->residual_layernorm_forward = lc_residual_layernorm_forward;
    be->accumulate = lc_accumulate;
    be->layernorm_forward_lo = lc_layernorm_forward_lo;
    be->gelu_forward_lo = lc_gelu_forward_lo;
    be->gelu_backward_lo = lc_gelu_backward_lo;
    lc_fill_xent(be);   /* cuda_xent.cu */
}
