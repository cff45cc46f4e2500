/* cuda_flash.cu — fused ("flash") causal attention for attention_forward_lse /
 * attention_backward_lse: the scores and probabilities of a 64 x 64 tile never reach
 * device memory.  Two implementations with the same tiling and contract:
 *
 * mma.sync (cuda_flash2.cuh, the default): scores, probabilities and accumulators live
 * in registers in the m16n8k16 accumulator layout; inputs reach shared memory by
 * cp.async, the next tile's copies overlapping this tile's products; operands reach
 * the tensor cores by ldmatrix.  Forward, one block per (query tile, head, batch row),
 * the longest (last) query tiles first: per key tile up to the diagonal, S = Q K^T, an
 * online softmax in log2 units (running max m and this lane's part of the sum l per
 * row; the partial probabilities exp2(S - m) rounded to lo for P V, one lo rounding per
 * term, which the contract allows), O = O alpha + P V; out = lo(O / l), lse = m ln 2 +
 * log l.
 *
 * WMMA (cuda_flash.cuh, LLM_CUDA_FLASH=wmma): 16x16x16 fragments; scores, probabilities
 * and the output accumulator staged through shared memory.  The first version, kept
 * beside the mma.sync kernels until those have run on a GPU and been timed against it.
 *
 * Both backwards are deterministic (no atomics; every output element has one writer):
 * one block per (key tile, head, batch row) accumulates dK, dV over the query tiles at
 * and after it; one block per (query tile, head, batch row) accumulates dQ over the key
 * tiles up to the diagonal.  Both recompute S, P = exp(S - lse) and dP = dO V^T, and
 * dS = lo(scale P (dP - D)), D = rowsum(dout * out) given.  Each block writes its rows'
 * dK, dV or dQ whole (the fp32 sums rounded once to lo): dqkv is overwritten, never
 * read.
 * Shapes: head size 32, 64 or 128, C a multiple of 8, qkv and dout 16-byte aligned (the
 * tile copies are 16 bytes), out and dqkv 4-byte aligned, the kernels' shared memory
 * within the device's opt-in maximum; others return 1 and cuda_attention_lse.cu's
 * batched-GEMM form runs instead. */
#include "kernels/cuda/cuda_internal.h"
#include "kernels/cuda/cuda_flash.cuh"
#include "kernels/cuda/cuda_flash2.cuh"

/* ---- launchers ---- */

static int fl_fits(int C, int NH)
{
    int hs = NH > 0 ? C / NH : 0;
    return hs * NH == C && C % 8 == 0 && (hs == 32 || hs == 64 || hs == 128);
}

static int fl_aligned(const void *p) { return ((uintptr_t)p & 15u) == 0; }
static int fl_aligned4(const void *p) { return ((uintptr_t)p & 3u) == 0; }

/* Whether the kernels c would run for head size hs (the forward, or with bwd the
 * backward) get their dynamic shared memory on this device: the opt-in maximum is 227
 * KiB on sm_90 and 163 KiB on sm_80, but 99 KiB on sm_86 / sm_89 (which run the sm_80
 * code), below the WMMA backward at head size 64 and both kinds' at 128 (the
 * cudaFuncSetAttribute would fail, an error instead of the GEMM form) */
static int fl_smem_fits(const lc_ctx *c, int hs, int bwd)
{
    size_t sm;
    if (c->flash_wmma)
        sm = hs == 32 ? (bwd ? fl_bwd_smem<32>() : fl_fwd_smem<32>())
           : hs == 64 ? (bwd ? fl_bwd_smem<64>() : fl_fwd_smem<64>())
                      : (bwd ? fl_bwd_smem<128>() : fl_fwd_smem<128>());
    else
        sm = hs == 32 ? (bwd ? f2_bwd_smem<32>() : f2_fwd_smem<32>())
           : hs == 64 ? (bwd ? f2_bwd_smem<64>() : f2_fwd_smem<64>())
                      : (bwd ? f2_bwd_smem<128>() : f2_fwd_smem<128>());
    return sm <= 48 * 1024 || sm <= (size_t)c->smem_optin_max;
}

template <int LO, int HS>
static int fl_fwd(lc_ctx *c, uint16_t *out, float *lse, const uint16_t *q, int B, int T, int C, int NH)
{
    size_t sm = fl_fwd_smem<HS>();
    static lc_optin attr;   /* the shared-memory opt-in, once per kernel and device */
    unsigned dev = lc_optin_device(c);
    if (lc_optin_needed(dev, attr)) {
        if (LC_CK(c, cudaFuncSetAttribute(lc_flash_fwd_kernel<LO, HS>,
                                          cudaFuncAttributeMaxDynamicSharedMemorySize, (int)sm)))
            return -1;
        lc_optin_done(dev, attr);
    }
    dim3 grid((unsigned)((T + FL_BM - 1) / FL_BM), (unsigned)NH, (unsigned)B);
    lc_flash_fwd_kernel<LO, HS><<<grid, FL_THREADS, sm, c->stream>>>(out, lse, q, T, C, NH,
                                                                      1.0f / sqrtf((float)HS));
    return LC_LAUNCHED(c) ? -1 : 0;
}

template <int LO, int HS>
static int fl_bwd(lc_ctx *c, uint16_t *dqkv, const uint16_t *q, const uint16_t *d, const float *lse,
                  const float *D, int B, int T, int C, int NH)
{
    size_t sm = fl_bwd_smem<HS>();
    static lc_optin attr;
    unsigned dev = lc_optin_device(c);
    if (lc_optin_needed(dev, attr)) {
        if (LC_CK(c, cudaFuncSetAttribute(lc_flash_bwd_kv_kernel<LO, HS>,
                                          cudaFuncAttributeMaxDynamicSharedMemorySize, (int)sm)) ||
            LC_CK(c, cudaFuncSetAttribute(lc_flash_bwd_q_kernel<LO, HS>,
                                          cudaFuncAttributeMaxDynamicSharedMemorySize, (int)sm)))
            return -1;
        lc_optin_done(dev, attr);
    }
    dim3 grid((unsigned)((T + FL_BM - 1) / FL_BM), (unsigned)NH, (unsigned)B);
    float scale = 1.0f / sqrtf((float)HS);
    lc_flash_bwd_kv_kernel<LO, HS><<<grid, FL_THREADS, sm, c->stream>>>(dqkv, q, d, lse, D, T, C, NH, scale);
    if (LC_LAUNCHED(c)) return -1;
    lc_flash_bwd_q_kernel<LO, HS><<<grid, FL_THREADS, sm, c->stream>>>(dqkv, q, d, lse, D, T, C, NH, scale);
    return LC_LAUNCHED(c) ? -1 : 0;
}

/* the mma.sync kernels (cuda_flash2.cuh) */
template <int LO, int HS>
static int f2_fwd(lc_ctx *c, uint16_t *out, float *lse, const uint16_t *q, int B, int T, int C, int NH)
{
    size_t sm = f2_fwd_smem<HS>();
    static lc_optin attr;
    unsigned dev = lc_optin_device(c);
    if (lc_optin_needed(dev, attr)) {
        if (LC_CK(c, cudaFuncSetAttribute(lc_flash2_fwd_kernel<LO, HS>,
                                          cudaFuncAttributeMaxDynamicSharedMemorySize, (int)sm)))
            return -1;
        lc_optin_done(dev, attr);
    }
    dim3 grid((unsigned)((T + F2_TILE - 1) / F2_TILE), (unsigned)NH, (unsigned)B);
    float scale = 1.0f / sqrtf((float)HS);
    lc_flash2_fwd_kernel<LO, HS><<<grid, F2_THREADS, sm, c->stream>>>(out, lse, q, T, C, NH,
                                                                       scale * F2_LOG2E);
    return LC_LAUNCHED(c) ? -1 : 0;
}

template <int LO, int HS>
static int f2_bwd(lc_ctx *c, uint16_t *dqkv, const uint16_t *q, const uint16_t *d, const float *lse,
                  const float *D, int B, int T, int C, int NH)
{
    size_t sm = f2_bwd_smem<HS>();
    static lc_optin attr;
    unsigned dev = lc_optin_device(c);
    if (lc_optin_needed(dev, attr)) {
        if (LC_CK(c, cudaFuncSetAttribute(lc_flash2_bwd_kv_kernel<LO, HS>,
                                          cudaFuncAttributeMaxDynamicSharedMemorySize, (int)sm)) ||
            LC_CK(c, cudaFuncSetAttribute(lc_flash2_bwd_q_kernel<LO, HS>,
                                          cudaFuncAttributeMaxDynamicSharedMemorySize, (int)sm)))
            return -1;
        lc_optin_done(dev, attr);
    }
    dim3 grid((unsigned)((T + F2_TILE - 1) / F2_TILE), (unsigned)NH, (unsigned)B);
    float scale = 1.0f / sqrtf((float)HS);
    lc_flash2_bwd_kv_kernel<LO, HS><<<grid, F2_THREADS, sm, c->stream>>>(dqkv, q, d, lse, D, T, C, NH,
                                                                          scale * F2_LOG2E, scale);
    if (LC_LAUNCHED(c)) return -1;
    lc_flash2_bwd_q_kernel<LO, HS><<<grid, F2_THREADS, sm, c->stream>>>(dqkv, q, d, lse, D, T, C, NH,
                                                                         scale * F2_LOG2E, scale);
    return LC_LAUNCHED(c) ? -1 : 0;
}

/* kernel<LO, HS> for the run-time lo and head size (32, 64 or 128) */
#define FL_DISPATCH(rc, fn, lo, hs, ...)                                                      \
    do {                                                                                      \
        if ((lo) == LC_DT_BF16)                                                               \
            rc = (hs) == 32 ? fn<LC_DT_BF16, 32>(__VA_ARGS__)                                 \
               : (hs) == 64 ? fn<LC_DT_BF16, 64>(__VA_ARGS__) : fn<LC_DT_BF16, 128>(__VA_ARGS__); \
        else                                                                                  \
            rc = (hs) == 32 ? fn<LC_DT_F16, 32>(__VA_ARGS__)                                  \
               : (hs) == 64 ? fn<LC_DT_F16, 64>(__VA_ARGS__) : fn<LC_DT_F16, 128>(__VA_ARGS__); \
    } while (0)

extern "C" int lc_flash_forward(lc_ctx *c, uint16_t *out, float *lse, const uint16_t *q, int B,
                                int T, int C, int NH, int lo)
{
    if (!fl_fits(C, NH) || !fl_aligned(q) || !fl_aligned4(out) || !fl_smem_fits(c, C / NH, 0))
        return 1;
    int hs = C / NH, rc;
    if (c->flash_wmma) FL_DISPATCH(rc, fl_fwd, lo, hs, c, out, lse, q, B, T, C, NH);
    else FL_DISPATCH(rc, f2_fwd, lo, hs, c, out, lse, q, B, T, C, NH);
    if (rc == 0) c->flash_runs[0]++;
    return rc ? -1 : 0;
}

extern "C" int lc_flash_backward(lc_ctx *c, uint16_t *dqkv, const uint16_t *q, const uint16_t *d,
                                 const float *lse, const float *D, int B, int T, int C, int NH,
                                 int lo)
{
    if (!fl_fits(C, NH) || !fl_aligned(q) || !fl_aligned(d) || !fl_aligned4(dqkv) ||
        !fl_smem_fits(c, C / NH, 1))
        return 1;
    int hs = C / NH, rc;
    if (c->flash_wmma) FL_DISPATCH(rc, fl_bwd, lo, hs, c, dqkv, q, d, lse, D, B, T, C, NH);
    else FL_DISPATCH(rc, f2_bwd, lo, hs, c, dqkv, q, d, lse, D, B, T, C, NH);
    if (rc == 0) c->flash_runs[0]++;
    return rc ? -1 : 0;
}

/* ---- the layouts' self-check (cuda_ext.h) ----
 * One 64 x 16 tile through the building blocks of the mma.sync kernels: s = Q K^T
 * (f2_rows_a, f2_abt: ldmatrix, mma.sync) written from the accumulators, o = lo(s) V
 * (f2_pv: the accumulators repacked as A operands, ldmatrix .trans) rounded to lo. */
template <int LO>
__global__ void __launch_bounds__(F2_THREADS)
lc_mma_check_kernel(float *s_out, uint16_t *o_out, const uint16_t *q, const uint16_t *k, const uint16_t *v)
{
    constexpr int E = f2_tile_elems<16>();
    LC_DYN_SMEM(sm);
    uint16_t *Qs = (uint16_t *)sm, *Ks = Qs + E, *Vs = Ks + E;
    int warp = threadIdx.x / 32, lane = threadIdx.x % 32, g = lane >> 2, t = lane & 3;
    f2_load_tile<16>(Qs, q, 16, 0, F2_TILE);
    f2_load_tile<16>(Ks, k, 16, 0, F2_TILE);
    f2_load_tile<16>(Vs, v, 16, 0, F2_TILE);
    lc_cp_commit();
    lc_cp_wait<0>();
    __syncthreads();
    uint32_t af[1][4];
    f2_rows_a<16>(af, Qs, warp, lane);
    float s[8][4], o[2][4];
    for (int n = 0; n < 8; n++) s[n][0] = s[n][1] = s[n][2] = s[n][3] = 0.0f;
    for (int n = 0; n < 2; n++) o[n][0] = o[n][1] = o[n][2] = o[n][3] = 0.0f;
    f2_abt<LO, 16>(s, af, Ks, lane);
    for (int n = 0; n < 8; n++)
        for (int e = 0; e < 4; e++)
            s_out[(warp * 16 + g + (e >> 1) * 8) * F2_TILE + n * 8 + 2 * t + (e & 1)] = s[n][e];
    f2_pv<LO, 16>(o, s, Vs, lane);
    const float one[2] = {1.0f, 1.0f};
    f2_store_rows<LO, 16>(o_out, 16, 0, F2_TILE, o, one, warp, lane);
}

extern "C" int llm_backend_cuda_mma_check(llm_backend *be, int lo, const void *q, const void *k,
                                          const void *v, float *s, void *o)
{
    lc_ctx *c = lc_get(be);
    if (!c || (lo != LC_DT_BF16 && lo != LC_DT_F16)) return -1;
    size_t sm = 3 * (size_t)f2_tile_elems<16>() * 2;
    if (lo == LC_DT_BF16)
        lc_mma_check_kernel<LC_DT_BF16><<<1, F2_THREADS, sm, c->stream>>>(s, (uint16_t *)o, (const uint16_t *)q,
                                                                        (const uint16_t *)k, (const uint16_t *)v);
    else
        lc_mma_check_kernel<LC_DT_F16><<<1, F2_THREADS, sm, c->stream>>>(s, (uint16_t *)o, (const uint16_t *)q,
                                                                       (const uint16_t *)k, (const uint16_t *)v);
    return LC_LAUNCHED(c) ? -1 : 0;
}

extern "C" int lc_flash_fits(const lc_ctx *c, int C, int NH, const void *qkv, const void *dout,
                             const void *dst)
{
    return fl_fits(C, NH) && fl_aligned(qkv) && (!dout || fl_aligned(dout)) && fl_aligned4(dst) &&
           fl_smem_fits(c, C / NH, dout != NULL);
}
