/* cuda_flash.cuh — the device code of the fused ("flash") causal attention (the
 * launchers and the design are in cuda_flash.cu).  Device code only, so that
 * tests/emu can compile it for the CPU and run it without a GPU. */
#ifndef LLM_CUDA_FLASH_CUH
#define LLM_CUDA_FLASH_CUH
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <math.h>
#include <mma.h>
#include <stddef.h>
#include <stdint.h>

#include "kernels/cuda/cuda_lo.cuh"

using namespace nvcuda;

#define FL_BM 64
#define FL_BN 64
#define FL_THREADS 128
#define FL_LDS (FL_BN + 4)   /* fp32 score tiles */
#define FL_LDP (FL_BN + 8)   /* lo probability tiles */

template <int LO> struct lc_wt { typedef __nv_bfloat16 type; };
template <> struct lc_wt<LC_DT_F16> { typedef __half type; };

/* 64 rows x HS lo elements from src (row r0 + r at src + (r0 + r) * stride) into dst (row
 * stride ld), rows at or beyond T zero; 16-byte copies. */
template <int HS>
__device__ __forceinline__ void fl_load_tile(uint16_t *dst, int ld, const uint16_t *src,
                                             size_t stride, int r0, int T)
{
    constexpr int CH = HS / 8;
    for (int i = threadIdx.x; i < 64 * CH; i += FL_THREADS) {
        int r = i / CH, ch = i % CH;
        uint4 v = make_uint4(0u, 0u, 0u, 0u);
        if (r0 + r < T) v = *(const uint4 *)(src + (size_t)(r0 + r) * stride + ch * 8);
        *(uint4 *)(dst + r * ld + ch * 8) = v;
    }
}

/* rows [r0, r0 + 64) of a (T) row vector, 0 beyond T */
__device__ __forceinline__ void fl_load_rows(float *dst, const float *src, int r0, int T)
{
    if (threadIdx.x < 64) dst[threadIdx.x] = r0 + (int)threadIdx.x < T ? src[r0 + threadIdx.x] : 0.0f;
}

/* S(16 x 64, fp32, ld FL_LDS) = A(16 x HS, row-major, ld lda) B^T, B (64 x HS row-major,
 * ld ldb): one warp's strip of scores. */
template <int LO, int HS>
__device__ __forceinline__ void fl_strip_abt(float *S, const uint16_t *A, int lda,
                                             const uint16_t *B, int ldb)
{
    typedef typename lc_wt<LO>::type TT;
    wmma::fragment<wmma::accumulator, 16, 16, 16, float> acc[FL_BN / 16];
#pragma unroll
    for (int n = 0; n < FL_BN / 16; n++) wmma::fill_fragment(acc[n], 0.0f);
#pragma unroll
    for (int k0 = 0; k0 < HS; k0 += 16) {
        wmma::fragment<wmma::matrix_a, 16, 16, 16, TT, wmma::row_major> a;
        wmma::load_matrix_sync(a, (const TT *)(A + k0), lda);
#pragma unroll
        for (int n = 0; n < FL_BN / 16; n++) {
            wmma::fragment<wmma::matrix_b, 16, 16, 16, TT, wmma::col_major> b;
            wmma::load_matrix_sync(b, (const TT *)(B + n * 16 * ldb + k0), ldb);
            wmma::mma_sync(acc[n], a, b, acc[n]);
        }
    }
#pragma unroll
    for (int n = 0; n < FL_BN / 16; n++)
        wmma::store_matrix_sync(S + n * 16, acc[n], FL_LDS, wmma::mem_row_major);
}

template <int HS>
static inline size_t fl_fwd_smem()
{
    return (size_t)(FL_BM + 2 * FL_BN) * (HS + 8) * 2 + (size_t)FL_BM * FL_LDS * 4 +
           (size_t)FL_BM * FL_LDP * 2 + (size_t)FL_BM * (HS + 4) * 4 + 3 * FL_BM * 4;
}

template <int LO, int HS>
__global__ void __launch_bounds__(FL_THREADS)
lc_flash_fwd_kernel(uint16_t *out, float *lse, const uint16_t *qkv, int T, int C, int NH, float scale)
{
    typedef typename lc_wt<LO>::type TT;
    constexpr int LDH = HS + 8, LDO = HS + 4;
    LC_DYN_SMEM(fl_sm);
    uint16_t *Qs = (uint16_t *)fl_sm, *Ks = Qs + FL_BM * LDH, *Vs = Ks + FL_BN * LDH;
    float *S = (float *)(Vs + FL_BN * LDH);
    uint16_t *Ps = (uint16_t *)(S + FL_BM * FL_LDS);
    float *O = (float *)(Ps + FL_BM * FL_LDP), *mrow = O + FL_BM * LDO, *lrow = mrow + FL_BM;
    float *arow = lrow + FL_BM;   /* each row's rescale factor of this key tile */
    int q0 = blockIdx.x * FL_BM, h = blockIdx.y, b = blockIdx.z;
    int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
    size_t C3 = 3 * (size_t)C;
    const uint16_t *base = qkv + (size_t)b * T * C3 + (size_t)h * HS;
    fl_load_tile<HS>(Qs, LDH, base, C3, q0, T);
    for (int i = threadIdx.x; i < FL_BM * LDO; i += FL_THREADS) O[i] = 0.0f;
    if (threadIdx.x < FL_BM) { mrow[threadIdx.x] = -INFINITY; lrow[threadIdx.x] = 0.0f; }
    int jend = min(q0 + FL_BM, T);
    for (int j0 = 0; j0 < jend; j0 += FL_BN) {
        __syncthreads();   /* every warp is done with the previous K, V tiles */
        fl_load_tile<HS>(Ks, LDH, base + C, C3, j0, T);
        fl_load_tile<HS>(Vs, LDH, base + 2 * C, C3, j0, T);
        __syncthreads();
        fl_strip_abt<LO, HS>(S + warp * 16 * FL_LDS, Qs + warp * 16 * LDH, LDH, Ks, LDH);
        __syncwarp();
        /* the online softmax of this warp's 16 rows, two lanes per row: lane 2r + k has
         * row r's columns k, k + 2, ... (few shared-memory bank conflicts, one shuffle
         * per reduction); the running max m and sum l, the partial probabilities
         * lo(exp(S - m)) into Ps and the factor rescaling the row's O into arow */
        {
            int half = lane & 1, row = warp * 16 + (lane >> 1);
            int lim = min(q0 + row, T - 1) - j0;   /* columns <= lim: causal and < T */
            const float *srow = S + row * FL_LDS;
            uint16_t *prow = Ps + row * FL_LDP;
            float m_old = mrow[row], mx = -INFINITY;
#pragma unroll 8
            for (int c = half; c < FL_BN; c += 2)
                if (c <= lim) mx = fmaxf(mx, srow[c] * scale);
            mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 1));
            float m_new = fmaxf(m_old, mx);   /* finite: column 0 (j0) <= lim in every tile */
            float sum = 0.0f;
#pragma unroll 8
            for (int c = half; c < FL_BN; c += 2) {
                float p = c <= lim ? expf(srow[c] * scale - m_new) : 0.0f;
                sum += p;
                prow[c] = lc_to_lo<LO>(p);
            }
            sum += __shfl_xor_sync(0xffffffffu, sum, 1);
            float alpha = m_old == -INFINITY ? 0.0f : expf(m_old - m_new);
            if (!half) {
                mrow[row] = m_new;
                lrow[row] = lrow[row] * alpha + sum;
                arow[row] = alpha;
            }
        }
        __syncwarp();
        for (int r = 0; r < 16; r++) {   /* O *= alpha row by row, lanes along the row */
            int row = warp * 16 + r;
            float alpha = arow[row];
            if (alpha != 1.0f)
                for (int i = lane; i < HS; i += 32) O[row * LDO + i] *= alpha;
        }
        __syncwarp();
        /* O strip += P strip (16 x 64) V (64 x HS) */
        wmma::fragment<wmma::accumulator, 16, 16, 16, float> o[HS / 16];
#pragma unroll
        for (int n = 0; n < HS / 16; n++)
            wmma::load_matrix_sync(o[n], O + warp * 16 * LDO + n * 16, LDO, wmma::mem_row_major);
#pragma unroll
        for (int k0 = 0; k0 < FL_BN; k0 += 16) {
            wmma::fragment<wmma::matrix_a, 16, 16, 16, TT, wmma::row_major> a;
            wmma::load_matrix_sync(a, (const TT *)(Ps + warp * 16 * FL_LDP + k0), FL_LDP);
#pragma unroll
            for (int n = 0; n < HS / 16; n++) {
                wmma::fragment<wmma::matrix_b, 16, 16, 16, TT, wmma::row_major> bv;
                wmma::load_matrix_sync(bv, (const TT *)(Vs + k0 * LDH + n * 16), LDH);
                wmma::mma_sync(o[n], a, bv, o[n]);
            }
        }
#pragma unroll
        for (int n = 0; n < HS / 16; n++)
            wmma::store_matrix_sync(O + warp * 16 * LDO + n * 16, o[n], LDO, wmma::mem_row_major);
        __syncwarp();
    }
    for (int r = 0; r < 16; r++) {
        int row = warp * 16 + r, rg = q0 + row;
        if (rg >= T) break;
        float l = lrow[row], inv = 1.0f / l;
        uint16_t *dst = out + ((size_t)b * T + rg) * C + (size_t)h * HS;
        for (int i = lane; i < HS; i += 32) dst[i] = lc_to_lo<LO>(O[row * LDO + i] * inv);
        if (lane == 0) lse[((size_t)b * NH + h) * T + rg] = mrow[row] + logf(l);
    }
}

/* Shared by the two backward kernels: for this warp's 16 query rows (tile rows i0.., key
 * tile j0..) from S = Q K^T and dP = dO V^T in fp32: Ps = lo(P), dSs = lo(scale P (dP -
 * D)), P = exp(scale S - lse), zero outside the causal part and beyond T. */
template <int LO>
__device__ __forceinline__ void fl_probs_and_ds(uint16_t *Ps, uint16_t *dSs, const float *S,
                                                const float *dPs, const float *ls,
                                                const float *Ds, int i0, int j0, int T,
                                                float scale, int warp, int lane)
{
    for (int r = 0; r < 16; r++) {
        int row = warp * 16 + r, rg = i0 + row;
#pragma unroll
        for (int u = 0; u < 2; u++) {
            int cidx = lane + 32 * u, cg = j0 + cidx;
            int valid = cg <= rg && rg < T;
            float p = valid ? expf(S[row * FL_LDS + cidx] * scale - ls[row]) : 0.0f;
            float ds = valid ? scale * p * (dPs[row * FL_LDS + cidx] - Ds[row]) : 0.0f;
            if (Ps) Ps[row * FL_LDP + cidx] = lc_to_lo<LO>(p);
            dSs[row * FL_LDP + cidx] = lc_to_lo<LO>(ds);
        }
    }
}

/* The backward kernels' shared memory, in this order (fl_bwd_smem bytes): Q, dO tiles
 * (64 x HS lo), K, V tiles; S and dP (fp32); lo(P) and lo(dS); a staging strip for the
 * results (64 x HS+4 fp32); lse and D of the 64 query rows. */
template <int HS>
struct fl_bwd_sm {
    uint16_t *Qs, *dOs, *Ks, *Vs, *Ps, *dSs;
    float *S, *dPs, *st, *ls, *Ds;
    __device__ explicit fl_bwd_sm(unsigned char *sm)
    {
        constexpr int LDH = HS + 8;
        Qs = (uint16_t *)sm; dOs = Qs + FL_BM * LDH; Ks = dOs + FL_BM * LDH; Vs = Ks + FL_BN * LDH;
        S = (float *)(Vs + FL_BN * LDH); dPs = S + FL_BM * FL_LDS;
        Ps = (uint16_t *)(dPs + FL_BM * FL_LDS); dSs = Ps + FL_BM * FL_LDP;
        st = (float *)(dSs + FL_BM * FL_LDP); ls = st + FL_BN * (HS + 4); Ds = ls + FL_BM;
    }
};

template <int HS>
static inline size_t fl_bwd_smem()
{
    return (size_t)(FL_BM + FL_BM + FL_BN + FL_BN) * (HS + 8) * 2 +
           2 * (size_t)FL_BM * FL_LDS * 4 + 2 * (size_t)FL_BM * FL_LDP * 2 +
           (size_t)FL_BN * (HS + 4) * 4 + 2 * FL_BM * 4;
}

/* Writes this warp's 16 x HS fragments acc (staged through st, ld HS + 4), rounded to
 * lo, to dst rows r0 + 16 warp.. (row stride ld3), rows beyond T skipped: each element's
 * full fp32 sum, rounded once (the outputs are overwritten). */
template <int LO, int HS>
__device__ __forceinline__ void fl_store_strip(uint16_t *dst, size_t ld3, int r0, int T, float *st,
                                             wmma::fragment<wmma::accumulator, 16, 16, 16, float> *acc,
                                             int warp, int lane)
{
    constexpr int LDO = HS + 4;
#pragma unroll
    for (int n = 0; n < HS / 16; n++)
        wmma::store_matrix_sync(st + warp * 16 * LDO + n * 16, acc[n], LDO, wmma::mem_row_major);
    __syncwarp();
    for (int r = 0; r < 16; r++) {
        int rg = r0 + warp * 16 + r;
        if (rg >= T) break;
        uint16_t *d = dst + (size_t)rg * ld3;
        for (int i = lane; i < HS; i += 32) d[i] = lc_to_lo<LO>(st[(warp * 16 + r) * LDO + i]);
    }
}

/* dK, dV of one key tile: blocks (key tile, head, batch row). */
template <int LO, int HS>
__global__ void __launch_bounds__(FL_THREADS)
lc_flash_bwd_kv_kernel(uint16_t *dqkv, const uint16_t *qkv, const uint16_t *dlo, const float *lse,
                       const float *D, int T, int C, int NH, float scale)
{
    typedef typename lc_wt<LO>::type TT;
    constexpr int LDH = HS + 8;
    LC_DYN_SMEM(fl_sm);
    fl_bwd_sm<HS> m(fl_sm);
    uint16_t *Qs = m.Qs, *dOs = m.dOs, *Ks = m.Ks, *Vs = m.Vs, *Ps = m.Ps, *dSs = m.dSs;
    float *S = m.S, *dPs = m.dPs, *st = m.st, *ls = m.ls, *Ds = m.Ds;
    int j0 = blockIdx.x * FL_BN, h = blockIdx.y, b = blockIdx.z;
    int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
    size_t C3 = 3 * (size_t)C, bh = (size_t)b * NH + h;
    const uint16_t *base = qkv + (size_t)b * T * C3 + (size_t)h * HS;
    const uint16_t *dbase = dlo + (size_t)b * T * C + (size_t)h * HS;
    fl_load_tile<HS>(Ks, LDH, base + C, C3, j0, T);
    fl_load_tile<HS>(Vs, LDH, base + 2 * C, C3, j0, T);
    wmma::fragment<wmma::accumulator, 16, 16, 16, float> dk[HS / 16], dv[HS / 16];
#pragma unroll
    for (int n = 0; n < HS / 16; n++) { wmma::fill_fragment(dk[n], 0.0f); wmma::fill_fragment(dv[n], 0.0f); }
    for (int i0 = j0; i0 < T; i0 += FL_BM) {   /* FL_BM == FL_BN: the tiles at and after j0 */
        __syncthreads();
        fl_load_tile<HS>(Qs, LDH, base, C3, i0, T);
        fl_load_tile<HS>(dOs, LDH, dbase, C, i0, T);
        fl_load_rows(ls, lse + bh * T, i0, T);
        fl_load_rows(Ds, D + bh * T, i0, T);
        __syncthreads();
        fl_strip_abt<LO, HS>(S + warp * 16 * FL_LDS, Qs + warp * 16 * LDH, LDH, Ks, LDH);
        fl_strip_abt<LO, HS>(dPs + warp * 16 * FL_LDS, dOs + warp * 16 * LDH, LDH, Vs, LDH);
        __syncwarp();
        fl_probs_and_ds<LO>(Ps, dSs, S, dPs, ls, Ds, i0, j0, T, scale, warp, lane);
        __syncthreads();   /* the transposed products read every warp's rows */
        /* keys 16w..: dV += P^T dO, dK += dS^T Q over this tile's 64 queries */
#pragma unroll
        for (int k0 = 0; k0 < FL_BM; k0 += 16) {
            wmma::fragment<wmma::matrix_a, 16, 16, 16, TT, wmma::col_major> pa, sa;
            wmma::load_matrix_sync(pa, (const TT *)(Ps + k0 * FL_LDP + warp * 16), FL_LDP);
            wmma::load_matrix_sync(sa, (const TT *)(dSs + k0 * FL_LDP + warp * 16), FL_LDP);
#pragma unroll
            for (int n = 0; n < HS / 16; n++) {
                wmma::fragment<wmma::matrix_b, 16, 16, 16, TT, wmma::row_major> go, qq;
                wmma::load_matrix_sync(go, (const TT *)(dOs + k0 * LDH + n * 16), LDH);
                wmma::load_matrix_sync(qq, (const TT *)(Qs + k0 * LDH + n * 16), LDH);
                wmma::mma_sync(dv[n], pa, go, dv[n]);
                wmma::mma_sync(dk[n], sa, qq, dk[n]);
            }
        }
    }
    uint16_t *dst = dqkv + (size_t)b * T * C3 + (size_t)h * HS;
    fl_store_strip<LO, HS>(dst + C, C3, j0, T, st, dk, warp, lane);
    __syncwarp();
    fl_store_strip<LO, HS>(dst + 2 * C, C3, j0, T, st, dv, warp, lane);
}

/* dQ of one query tile: blocks (query tile, head, batch row). */
template <int LO, int HS>
__global__ void __launch_bounds__(FL_THREADS)
lc_flash_bwd_q_kernel(uint16_t *dqkv, const uint16_t *qkv, const uint16_t *dlo, const float *lse,
                      const float *D, int T, int C, int NH, float scale)
{
    typedef typename lc_wt<LO>::type TT;
    constexpr int LDH = HS + 8;
    LC_DYN_SMEM(fl_sm);
    fl_bwd_sm<HS> m(fl_sm);
    uint16_t *Qs = m.Qs, *dOs = m.dOs, *Ks = m.Ks, *Vs = m.Vs, *Ps = m.Ps, *dSs = m.dSs;
    float *S = m.S, *dPs = m.dPs, *st = m.st, *ls = m.ls, *Ds = m.Ds;
    (void)Ps;
    int i0 = blockIdx.x * FL_BM, h = blockIdx.y, b = blockIdx.z;
    int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
    size_t C3 = 3 * (size_t)C, bh = (size_t)b * NH + h;
    const uint16_t *base = qkv + (size_t)b * T * C3 + (size_t)h * HS;
    fl_load_tile<HS>(Qs, LDH, base, C3, i0, T);
    fl_load_tile<HS>(dOs, LDH, dlo + (size_t)b * T * C + (size_t)h * HS, C, i0, T);
    fl_load_rows(ls, lse + bh * T, i0, T);
    fl_load_rows(Ds, D + bh * T, i0, T);
    wmma::fragment<wmma::accumulator, 16, 16, 16, float> dq[HS / 16];
#pragma unroll
    for (int n = 0; n < HS / 16; n++) wmma::fill_fragment(dq[n], 0.0f);
    int jend = min(i0 + FL_BM, T);
    for (int j0 = 0; j0 < jend; j0 += FL_BN) {
        __syncthreads();
        fl_load_tile<HS>(Ks, LDH, base + C, C3, j0, T);
        fl_load_tile<HS>(Vs, LDH, base + 2 * C, C3, j0, T);
        __syncthreads();
        fl_strip_abt<LO, HS>(S + warp * 16 * FL_LDS, Qs + warp * 16 * LDH, LDH, Ks, LDH);
        fl_strip_abt<LO, HS>(dPs + warp * 16 * FL_LDS, dOs + warp * 16 * LDH, LDH, Vs, LDH);
        __syncwarp();
        fl_probs_and_ds<LO>(NULL, dSs, S, dPs, ls, Ds, i0, j0, T, scale, warp, lane);
        __syncwarp();
        /* rows 16w..: dQ += dS (16 x 64) K (64 x HS) */
#pragma unroll
        for (int k0 = 0; k0 < FL_BN; k0 += 16) {
            wmma::fragment<wmma::matrix_a, 16, 16, 16, TT, wmma::row_major> sa;
            wmma::load_matrix_sync(sa, (const TT *)(dSs + warp * 16 * FL_LDP + k0), FL_LDP);
#pragma unroll
            for (int n = 0; n < HS / 16; n++) {
                wmma::fragment<wmma::matrix_b, 16, 16, 16, TT, wmma::row_major> kb;
                wmma::load_matrix_sync(kb, (const TT *)(Ks + k0 * LDH + n * 16), LDH);
                wmma::mma_sync(dq[n], sa, kb, dq[n]);
            }
        }
    }
    fl_store_strip<LO, HS>(dqkv + (size_t)b * T * C3 + (size_t)h * HS, C3, i0, T, st, dq, warp, lane);
}

#endif
