/* cuda_flash.cu — fused ("flash") causal attention for attention_forward_lse /
 * attention_backward_lse: the scores and probabilities of a 64 x 64 tile live in shared
 * memory only; nothing of size T x T reaches device memory.
 *
 * Tiles of 64 queries x 64 keys, 4 warps; warp w owns rows 16w..16w+15 of the query
 * tile.  The products are WMMA 16x16x16 tensor-core operations on lo (bf16/fp16)
 * operands with fp32 accumulation.
 *   forward, one block per (query tile, head, batch row): for each key tile up to the
 *     diagonal, S = scale Q K^T (q|k|v read as the caller's lo tensor), an online softmax (running max m and sum l per row;
 *     the partial probabilities exp(S - m) are rounded to lo for P V, which the contract
 *     allows: one lo rounding per term from the reference), O = O exp(m_old - m) + P V;
 *     out = lo(O / l), lse = m + log l.
 *   backward, deterministic (no atomics; every output element has one writer):
 *     one block per (key tile, head, batch row) accumulates dK, dV over the query tiles
 *     at and after it; one block per (query tile, head, batch row) accumulates dQ over
 *     the key tiles up to the diagonal.  Both recompute S, P = exp(S - lse) and
 *     dP = dO V^T, and dS = lo(scale P (dP - D)), D = rowsum(dout * out) given.  Each
 *     block writes its rows' dK, dV or dQ whole (the fp32 sums rounded once to lo):
 *     dqkv is overwritten, never read.
 * Shapes: head size 32, 64 or 128, C a multiple of 8 and qkv, dout 16-byte aligned (the
 * tile loads are 16-byte copies); others return 1 and cuda_attention_lse.cu's
 * batched-GEMM form runs instead. */
#include "kernels/cuda/cuda_internal.h"
#include "kernels/cuda/cuda_flash.cuh"

/* ---- launchers ---- */

static int fl_fits(int C, int NH)
{
    int hs = NH > 0 ? C / NH : 0;
    return hs * NH == C && C % 8 == 0 && (hs == 32 || hs == 64 || hs == 128);
}

static int fl_aligned(const void *p) { return ((uintptr_t)p & 15u) == 0; }

template <int LO, int HS>
static int fl_fwd(lc_ctx *c, uint16_t *out, float *lse, const uint16_t *q, int B, int T, int C, int NH)
{
    size_t sm = fl_fwd_smem<HS>();
    static int attr_set;   /* the shared-memory opt-in, once per kernel (per process) */
    if (!attr_set) {
        if (LC_CK(c, cudaFuncSetAttribute(lc_flash_fwd_kernel<LO, HS>,
                                          cudaFuncAttributeMaxDynamicSharedMemorySize, (int)sm)))
            return -1;
        attr_set = 1;
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
    static int attr_set;
    if (!attr_set) {
        if (LC_CK(c, cudaFuncSetAttribute(lc_flash_bwd_kv_kernel<LO, HS>,
                                          cudaFuncAttributeMaxDynamicSharedMemorySize, (int)sm)) ||
            LC_CK(c, cudaFuncSetAttribute(lc_flash_bwd_q_kernel<LO, HS>,
                                          cudaFuncAttributeMaxDynamicSharedMemorySize, (int)sm)))
            return -1;
        attr_set = 1;
    }
    dim3 grid((unsigned)((T + FL_BM - 1) / FL_BM), (unsigned)NH, (unsigned)B);
    float scale = 1.0f / sqrtf((float)HS);
    lc_flash_bwd_kv_kernel<LO, HS><<<grid, FL_THREADS, sm, c->stream>>>(dqkv, q, d, lse, D, T, C, NH, scale);
    if (LC_LAUNCHED(c)) return -1;
    lc_flash_bwd_q_kernel<LO, HS><<<grid, FL_THREADS, sm, c->stream>>>(dqkv, q, d, lse, D, T, C, NH, scale);
    return LC_LAUNCHED(c) ? -1 : 0;
}

extern "C" int lc_flash_forward(lc_ctx *c, uint16_t *out, float *lse, const uint16_t *q, int B,
                                int T, int C, int NH, int lo)
{
    if (!fl_fits(C, NH) || !fl_aligned(q)) return 1;
    int hs = C / NH, rc;
    if (lo == LC_DT_BF16)
        rc = hs == 32 ? fl_fwd<LC_DT_BF16, 32>(c, out, lse, q, B, T, C, NH)
           : hs == 64 ? fl_fwd<LC_DT_BF16, 64>(c, out, lse, q, B, T, C, NH)
                      : fl_fwd<LC_DT_BF16, 128>(c, out, lse, q, B, T, C, NH);
    else
        rc = hs == 32 ? fl_fwd<LC_DT_F16, 32>(c, out, lse, q, B, T, C, NH)
           : hs == 64 ? fl_fwd<LC_DT_F16, 64>(c, out, lse, q, B, T, C, NH)
                      : fl_fwd<LC_DT_F16, 128>(c, out, lse, q, B, T, C, NH);
    if (rc == 0) c->flash_runs[0]++;
    return rc ? -1 : 0;
}

extern "C" int lc_flash_backward(lc_ctx *c, uint16_t *dqkv, const uint16_t *q, const uint16_t *d,
                                 const float *lse, const float *D, int B, int T, int C, int NH,
                                 int lo)
{
    if (!fl_fits(C, NH) || !fl_aligned(q) || !fl_aligned(d)) return 1;
    int hs = C / NH, rc;
    if (lo == LC_DT_BF16)
        rc = hs == 32 ? fl_bwd<LC_DT_BF16, 32>(c, dqkv, q, d, lse, D, B, T, C, NH)
           : hs == 64 ? fl_bwd<LC_DT_BF16, 64>(c, dqkv, q, d, lse, D, B, T, C, NH)
                      : fl_bwd<LC_DT_BF16, 128>(c, dqkv, q, d, lse, D, B, T, C, NH);
    else
        rc = hs == 32 ? fl_bwd<LC_DT_F16, 32>(c, dqkv, q, d, lse, D, B, T, C, NH)
           : hs == 64 ? fl_bwd<LC_DT_F16, 64>(c, dqkv, q, d, lse, D, B, T, C, NH)
                      : fl_bwd<LC_DT_F16, 128>(c, dqkv, q, d, lse, D, B, T, C, NH);
    if (rc == 0) c->flash_runs[0]++;
    return rc ? -1 : 0;
}

extern "C" int lc_flash_fits(int C, int NH, const void *qkv, const void *dout)
{
    return fl_fits(C, NH) && fl_aligned(qkv) && (!dout || fl_aligned(dout));
}
