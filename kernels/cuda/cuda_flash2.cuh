/* cuda_flash2.cuh — the device code of the register-resident fused causal attention
 * (mma.sync; launchers and design in cuda_flash.cu).  Device code only, so that
 * tests/emu can run it on the CPU.
 *
 * Tiles of 64 queries x 64 keys, 4 warps, warp w owning 16 rows (queries in the forward
 * and the dQ kernel, keys in the dK/dV kernel).  Scores, probabilities and accumulators
 * stay in registers in the mma.sync accumulator layout (cuda_mma.cuh); a row's reduction
 * is over the 4 lanes of a quad (shuffles 1 and 2).  Shared memory holds the lo input
 * tiles only, rows padded to HS + 8 elements (the 8 rows an ldmatrix reads fall in 8
 * different 16-byte bank groups), the next key (query) tile copied in by cp.async while
 * the current one is used.  exp is exp2 on log2(e)-scaled scores. */
#ifndef LLM_CUDA_FLASH2_CUH
#define LLM_CUDA_FLASH2_CUH
#include <math.h>
#include <stddef.h>
#include <stdint.h>

#include "kernels/cuda/cuda_lo.cuh"
#include "kernels/cuda/cuda_mma.cuh"

#define F2_TILE 64
#define F2_THREADS 128
#define F2_LOG2E 1.4426950408889634f
#define F2_LN2 0.6931471805599453f
/* blocks an SM should hold (the register budget the compiler gets: 65536 / (128 x
 * blocks)): at head size <= 64 the forward's 4 x 46 KB and the backward's 3 x 56 KB of
 * shared memory fit beside them; larger heads get what they need */
#define F2_MIN_BLOCKS_FWD(HS) ((HS) <= 64 ? 4 : 1)
#define F2_MIN_BLOCKS_BWD(HS) ((HS) <= 64 ? 3 : 1)

/* one 64 x HS lo tile's shared-memory elements */
template <int HS>
__host__ __device__ constexpr int f2_tile_elems() { return F2_TILE * (HS + 8); }

/* rows [r0, r0 + 64) of a lo matrix (row stride `stride` elements) into dst by cp.async
 * (16 bytes each); rows at or beyond T are zero, stored directly */
template <int HS>
__device__ __forceinline__ void f2_load_tile(uint16_t *dst, const uint16_t *src, size_t stride,
                                             int r0, int T)
{
    constexpr int CH = HS / 8, LD = HS + 8;
    for (int i = threadIdx.x; i < F2_TILE * CH; i += F2_THREADS) {
        int r = i / CH, ch = i % CH;
        uint16_t *d = dst + r * LD + ch * 8;
        if (r0 + r < T) lc_cp<16>(d, src + (size_t)(r0 + r) * stride + ch * 8);
        else *(uint4 *)d = make_uint4(0u, 0u, 0u, 0u);
    }
}

/* rows [r0, r0 + 64) of two fp32 row vectors into a[64], b[64] (cp.async, 0 beyond T) */
__device__ __forceinline__ void f2_load_rows(float *a, const float *sa, float *b, const float *sb,
                                             int r0, int T)
{
    int i = threadIdx.x & 63;
    float *d = threadIdx.x < 64 ? a : b;
    const float *s = threadIdx.x < 64 ? sa : sb;
    if (r0 + i < T) lc_cp<4>(d + i, s + r0 + i);
    else d[i] = 0.0f;
}

/* The A fragments (16 rows x HS) of the tile rows 16w.. of a tile in shared memory:
 * af[k] for columns 16k..16k+15. */
template <int HS>
__device__ __forceinline__ void f2_rows_a(uint32_t (*af)[4], const uint16_t *tile, int warp, int lane)
{
    constexpr int LD = HS + 8;
    const uint16_t *p = tile + (warp * 16 + (lane & 7) + ((lane >> 3) & 1) * 8) * LD + (lane >> 4) * 8;
#pragma unroll
    for (int k = 0; k < HS / 16; k++) lc_ldsm4<false>(af[k], p + k * 16);
}

/* acc(16 x 64) += A (16 x HS, fragments af) times the 64 rows of tile transposed (the
 * tile's rows are acc's columns, 8 per accumulator tile) */
template <int LO, int HS>
__device__ __forceinline__ void f2_abt(float (*acc)[4], const uint32_t (*af)[4], const uint16_t *tile, int lane)
{
    constexpr int LD = HS + 8;
    const uint16_t *p = tile + ((lane & 7) + (lane >> 4) * 8) * LD + ((lane >> 3) & 1) * 8;
#pragma unroll
    for (int k = 0; k < HS / 16; k++)
#pragma unroll
        for (int np = 0; np < 4; np++) {
            uint32_t b[4];
            lc_ldsm4<false>(b, p + np * 16 * LD + k * 16);
            lc_mma16816<LO>(acc[2 * np], af[k], b);
            lc_mma16816<LO>(acc[2 * np + 1], af[k], b + 2);
        }
}

/* acc(16 x HS) += P (16 x 64: the fp32 accumulator tiles p, rounded to lo here) times the
 * tile (64 x HS, rows = P's columns) */
template <int LO, int HS>
__device__ __forceinline__ void f2_pv(float (*acc)[4], const float (*p)[4], const uint16_t *tile, int lane)
{
    constexpr int LD = HS + 8;
    const uint16_t *q = tile + ((lane & 7) + ((lane >> 3) & 1) * 8) * LD + (lane >> 4) * 8;
#pragma unroll
    for (int k = 0; k < 4; k++) {
        uint32_t a[4] = {lc_pack_lo<LO>(p[2 * k][0], p[2 * k][1]),
                         lc_pack_lo<LO>(p[2 * k][2], p[2 * k][3]),
                         lc_pack_lo<LO>(p[2 * k + 1][0], p[2 * k + 1][1]),
                         lc_pack_lo<LO>(p[2 * k + 1][2], p[2 * k + 1][3])};
#pragma unroll
        for (int np = 0; np < HS / 16; np++) {
            uint32_t b[4];
            lc_ldsm4<true>(b, q + k * 16 * LD + np * 16);
            lc_mma16816<LO>(acc[2 * np], a, b);
            lc_mma16816<LO>(acc[2 * np + 1], a, b + 2);
        }
    }
}

/* This lane's accumulator rows (16 x HS, acc) rounded into dst rows r0 + 16 warp.. (row
 * stride ld elements), rows at or beyond T skipped, times mul[0] / mul[1] for the
 * lane's two rows. */
template <int LO, int HS>
__device__ __forceinline__ void f2_store_rows(uint16_t *dst, size_t ld, int r0, int T,
                                              const float (*acc)[4], const float mul[2], int warp,
                                              int lane)
{
    int g = lane >> 2, t = lane & 3;
#pragma unroll
    for (int h = 0; h < 2; h++) {
        int r = r0 + warp * 16 + g + 8 * h;
        if (r >= T) continue;
        uint32_t *d = (uint32_t *)(dst + (size_t)r * ld + 2 * t);
#pragma unroll
        for (int n = 0; n < HS / 8; n++)
            d[n * 4] = lc_pack_lo<LO>(acc[n][2 * h] * mul[h], acc[n][2 * h + 1] * mul[h]);
    }
}

/* ---- forward: blocks (query tile, head, batch row), the last query tile first ---- */
template <int HS>
__host__ __device__ constexpr size_t f2_fwd_smem() { return (size_t)5 * f2_tile_elems<HS>() * 2; }

template <int LO, int HS>
__global__ void __launch_bounds__(F2_THREADS, F2_MIN_BLOCKS_FWD(HS))
lc_flash2_fwd_kernel(uint16_t *out, float *lse, const uint16_t *qkv, int T, int C, int NH, float sl2)
{
    constexpr int E = f2_tile_elems<HS>(), NT = HS / 8;
    LC_DYN_SMEM(sm);
    uint16_t *Qs = (uint16_t *)sm, *Ks = Qs + E, *Vs = Ks + 2 * E;   /* K, V: two buffers */
    int qt = (int)gridDim.x - 1 - (int)blockIdx.x, q0 = qt * F2_TILE, h = blockIdx.y, b = blockIdx.z;
    int warp = threadIdx.x / 32, lane = threadIdx.x % 32, g = lane >> 2, t = lane & 3;
    size_t C3 = 3 * (size_t)C;
    const uint16_t *base = qkv + (size_t)b * T * C3 + (size_t)h * HS;
    f2_load_tile<HS>(Qs, base, C3, q0, T);
    f2_load_tile<HS>(Ks, base + C, C3, 0, T);
    f2_load_tile<HS>(Vs, base + 2 * C, C3, 0, T);
    lc_cp_commit();
    uint32_t qf[HS / 16][4];
    float o[NT][4], m[2] = {-INFINITY, -INFINITY}, l[2] = {0.0f, 0.0f};
#pragma unroll
    for (int n = 0; n < NT; n++) o[n][0] = o[n][1] = o[n][2] = o[n][3] = 0.0f;
    for (int j = 0; j <= qt; j++) {
        const uint16_t *Kc = Ks + (j & 1) * E, *Vc = Vs + (j & 1) * E;
        lc_cp_wait<0>();
        __syncthreads();   /* tile j is in; every warp is done with tile j - 1's buffers */
        if (j < qt) {
            f2_load_tile<HS>(Ks + ((j + 1) & 1) * E, base + C, C3, (j + 1) * F2_TILE, T);
            f2_load_tile<HS>(Vs + ((j + 1) & 1) * E, base + 2 * C, C3, (j + 1) * F2_TILE, T);
            lc_cp_commit();
        }
        if (j == 0) f2_rows_a<HS>(qf, Qs, warp, lane);
        float s[8][4];
#pragma unroll
        for (int n = 0; n < 8; n++) s[n][0] = s[n][1] = s[n][2] = s[n][3] = 0.0f;
        f2_abt<LO, HS>(s, qf, Kc, lane);
        /* scores in log2 units, causal mask on the diagonal tile; the rows' new maxima
         * (finite: key j*64 <= every row of this tile) */
        float mx[2] = {m[0], m[1]};
        int rbase = q0 + warp * 16 + g, kbase = j * F2_TILE + 2 * t;
#pragma unroll
        for (int n = 0; n < 8; n++)
#pragma unroll
            for (int e = 0; e < 4; e++) {
                float v = s[n][e] * sl2;
                if (j == qt && kbase + n * 8 + (e & 1) > rbase + (e >> 1) * 8) v = -INFINITY;
                s[n][e] = v;
                mx[e >> 1] = fmaxf(mx[e >> 1], v);
            }
        float alpha[2], rs[2] = {0.0f, 0.0f};
#pragma unroll
        for (int r = 0; r < 2; r++) {
            mx[r] = fmaxf(mx[r], __shfl_xor_sync(0xffffffffu, mx[r], 1));
            mx[r] = fmaxf(mx[r], __shfl_xor_sync(0xffffffffu, mx[r], 2));
            alpha[r] = exp2f(m[r] - mx[r]);   /* 0 on the first tile (m = -inf) */
            m[r] = mx[r];
        }
#pragma unroll
        for (int n = 0; n < 8; n++)
#pragma unroll
            for (int e = 0; e < 4; e++) {
                float p = exp2f(s[n][e] - m[e >> 1]);
                s[n][e] = p;
                rs[e >> 1] += p;
            }
        /* l: this lane's part of the row sums (the quad's parts add up at the end) */
#pragma unroll
        for (int r = 0; r < 2; r++) l[r] = l[r] * alpha[r] + rs[r];
#pragma unroll
        for (int n = 0; n < NT; n++) {
            o[n][0] *= alpha[0]; o[n][1] *= alpha[0];
            o[n][2] *= alpha[1]; o[n][3] *= alpha[1];
        }
        f2_pv<LO, HS>(o, s, Vc, lane);
    }
    float inv[2];
#pragma unroll
    for (int r = 0; r < 2; r++) {
        l[r] += __shfl_xor_sync(0xffffffffu, l[r], 1);
        l[r] += __shfl_xor_sync(0xffffffffu, l[r], 2);
        inv[r] = 1.0f / l[r];
    }
    f2_store_rows<LO, HS>(out + (size_t)b * T * C + (size_t)h * HS, C, q0, T, o, inv, warp, lane);
    if (t == 0)
#pragma unroll
        for (int r = 0; r < 2; r++) {
            int row = q0 + warp * 16 + g + 8 * r;
            if (row < T) lse[((size_t)b * NH + h) * T + row] = m[r] * F2_LN2 + logf(l[r]);
        }
}

/* ---- backward ----
 * Shared memory of both kernels: the tile kept for the whole block (K and V, or Q and
 * dO), two buffers of the two streamed tiles, and two buffers of lse and D (64 each). */
template <int HS>
__host__ __device__ constexpr size_t f2_bwd_smem()
{
    return (size_t)6 * f2_tile_elems<HS>() * 2 + 4 * F2_TILE * sizeof(float);
}

/* P and dS of a 16 x 64 block of (rows x columns) from the scores s and dP dp (fp32
 * accumulators, in place: s becomes P, dp becomes dS, both fp32): P = exp2(s sl2 -
 * lse2), dS = scale P (dP - D), zero where masked.  rowq: the accumulator rows are
 * queries (dQ kernel: lse, D per row, ls/ds of this lane's two rows) or keys (dK/dV
 * kernel: lse, D per column from the tile vectors lsv/dv). */
template <bool ROWQ>
__device__ __forceinline__ void f2_probs(float (*s)[4], float (*dp)[4], int r0, int c0, int T,
                                         float sl2, float scale, const float *lsv, const float *dv,
                                         const float lsr[2], const float dr[2], int lane)
{
    int g = lane >> 2, t = lane & 3;
#pragma unroll
    for (int n = 0; n < 8; n++)
#pragma unroll
        for (int e = 0; e < 4; e++) {
            int r = r0 + g + (e >> 1) * 8, c = c0 + n * 8 + 2 * t + (e & 1);
            int q = ROWQ ? r : c, k = ROWQ ? c : r;
            float L = ROWQ ? lsr[e >> 1] : lsv[n * 8 + 2 * t + (e & 1)];
            float D = ROWQ ? dr[e >> 1] : dv[n * 8 + 2 * t + (e & 1)];
            bool ok = k <= q && q < T;
            float p = ok ? exp2f(s[n][e] * sl2 - L * F2_LOG2E) : 0.0f;
            s[n][e] = p;
            dp[n][e] = ok ? scale * p * (dp[n][e] - D) : 0.0f;
        }
}

/* Both backward kernels' middle: for the warp's 16 rows of the kept tiles a1, a2 (K and
 * V, or Q and dO; read again each tile, so that fewer registers stay live across the
 * loop) against the streamed tiles b1, b2: s = a1 b1^T, dp = a2 b2^T, then P and dS in
 * place (f2_probs). */
template <int LO, int HS, bool ROWQ>
__device__ __forceinline__ void f2_p_ds(float (*s)[4], float (*dp)[4], const uint16_t *a1,
                                        const uint16_t *a2, const uint16_t *b1, const uint16_t *b2,
                                        int r0, int c0, int T, float sl2, float scale,
                                        const float *lsv, const float *dv, const float lsr[2],
                                        const float dr[2], int warp, int lane)
{
    uint32_t af[HS / 16][4];
#pragma unroll
    for (int n = 0; n < 8; n++)
#pragma unroll
        for (int e = 0; e < 4; e++) s[n][e] = dp[n][e] = 0.0f;
    f2_rows_a<HS>(af, a1, warp, lane);
    f2_abt<LO, HS>(s, af, b1, lane);
    f2_rows_a<HS>(af, a2, warp, lane);
    f2_abt<LO, HS>(dp, af, b2, lane);
    f2_probs<ROWQ>(s, dp, r0, c0, T, sl2, scale, lsv, dv, lsr, dr, lane);
}

/* dK, dV of one key tile: blocks (key tile, head, batch row), key tile 0 (the most query
 * tiles) first; warp w owns keys 16w..; over the query tiles at and after the key tile. */
template <int LO, int HS>
__global__ void __launch_bounds__(F2_THREADS, F2_MIN_BLOCKS_BWD(HS))
lc_flash2_bwd_kv_kernel(uint16_t *dqkv, const uint16_t *qkv, const uint16_t *dlo, const float *lse,
                        const float *D, int T, int C, int NH, float sl2, float scale)
{
    constexpr int E = f2_tile_elems<HS>(), NT = HS / 8;
    LC_DYN_SMEM(sm);
    uint16_t *Ks = (uint16_t *)sm, *Vs = Ks + E, *Qs = Vs + E, *dOs = Qs + 2 * E;
    float *vec = (float *)(dOs + 2 * E);   /* per buffer: lse[64], D[64] */
    int kt = blockIdx.x, k0 = kt * F2_TILE, h = blockIdx.y, b = blockIdx.z;
    int nq = ((int)T + F2_TILE - 1) / F2_TILE;
    int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
    size_t C3 = 3 * (size_t)C, bh = (size_t)b * NH + h;
    const uint16_t *base = qkv + (size_t)b * T * C3 + (size_t)h * HS;
    const uint16_t *dbase = dlo + (size_t)b * T * C + (size_t)h * HS;
    f2_load_tile<HS>(Ks, base + C, C3, k0, T);
    f2_load_tile<HS>(Vs, base + 2 * C, C3, k0, T);
    f2_load_tile<HS>(Qs, base, C3, k0, T);
    f2_load_tile<HS>(dOs, dbase, C, k0, T);
    f2_load_rows(vec, lse + bh * T, vec + F2_TILE, D + bh * T, k0, T);
    lc_cp_commit();
    float dk[NT][4], dv[NT][4];
#pragma unroll
    for (int n = 0; n < NT; n++)
#pragma unroll
        for (int e = 0; e < 4; e++) dk[n][e] = dv[n][e] = 0.0f;
    for (int i = kt; i < nq; i++) {
        int cur = (i - kt) & 1;
        const uint16_t *Qc = Qs + cur * E, *dOc = dOs + cur * E;
        const float *lsv = vec + cur * 2 * F2_TILE, *dvv = lsv + F2_TILE;
        lc_cp_wait<0>();
        __syncthreads();
        if (i + 1 < nq) {
            float *nv = vec + (cur ^ 1) * 2 * F2_TILE;
            f2_load_tile<HS>(Qs + (cur ^ 1) * E, base, C3, (i + 1) * F2_TILE, T);
            f2_load_tile<HS>(dOs + (cur ^ 1) * E, dbase, C, (i + 1) * F2_TILE, T);
            f2_load_rows(nv, lse + bh * T, nv + F2_TILE, D + bh * T, (i + 1) * F2_TILE, T);
            lc_cp_commit();
        }
        /* S^T (keys x queries) = K Q^T, dP^T = V dO^T, then P^T and dS^T */
        float s[8][4], dp[8][4];
        f2_p_ds<LO, HS, false>(s, dp, Ks, Vs, Qc, dOc, k0 + warp * 16, i * F2_TILE, T, sl2, scale,
                               lsv, dvv, NULL, NULL, warp, lane);
        /* dV += lo(P)^T dO, dK += lo(dS)^T Q (this warp's 16 keys) */
        f2_pv<LO, HS>(dv, s, dOc, lane);
        f2_pv<LO, HS>(dk, dp, Qc, lane);
    }
    const float one[2] = {1.0f, 1.0f};
    uint16_t *dst = dqkv + (size_t)b * T * C3 + (size_t)h * HS;
    f2_store_rows<LO, HS>(dst + C, C3, k0, T, dk, one, warp, lane);
    f2_store_rows<LO, HS>(dst + 2 * C, C3, k0, T, dv, one, warp, lane);
}

/* dQ of one query tile: blocks (query tile, head, batch row), the last (most key tiles)
 * first; warp w owns queries 16w..; over the key tiles up to the diagonal. */
template <int LO, int HS>
__global__ void __launch_bounds__(F2_THREADS, F2_MIN_BLOCKS_BWD(HS))
lc_flash2_bwd_q_kernel(uint16_t *dqkv, const uint16_t *qkv, const uint16_t *dlo, const float *lse,
                       const float *D, int T, int C, int NH, float sl2, float scale)
{
    constexpr int E = f2_tile_elems<HS>(), NT = HS / 8;
    LC_DYN_SMEM(sm);
    uint16_t *Qs = (uint16_t *)sm, *dOs = Qs + E, *Ks = dOs + E, *Vs = Ks + 2 * E;
    float *vec = (float *)(Vs + 2 * E);
    int qt = (int)gridDim.x - 1 - (int)blockIdx.x, q0 = qt * F2_TILE, h = blockIdx.y, b = blockIdx.z;
    int warp = threadIdx.x / 32, lane = threadIdx.x % 32, g = lane >> 2;
    size_t C3 = 3 * (size_t)C, bh = (size_t)b * NH + h;
    const uint16_t *base = qkv + (size_t)b * T * C3 + (size_t)h * HS;
    f2_load_tile<HS>(Qs, base, C3, q0, T);
    f2_load_tile<HS>(dOs, dlo + (size_t)b * T * C + (size_t)h * HS, C, q0, T);
    f2_load_rows(vec, lse + bh * T, vec + F2_TILE, D + bh * T, q0, T);
    f2_load_tile<HS>(Ks, base + C, C3, 0, T);
    f2_load_tile<HS>(Vs, base + 2 * C, C3, 0, T);
    lc_cp_commit();
    float dq[NT][4], lsr[2], dr[2];
#pragma unroll
    for (int n = 0; n < NT; n++) dq[n][0] = dq[n][1] = dq[n][2] = dq[n][3] = 0.0f;
    for (int j = 0; j <= qt; j++) {
        const uint16_t *Kc = Ks + (j & 1) * E, *Vc = Vs + (j & 1) * E;
        lc_cp_wait<0>();
        __syncthreads();
        if (j < qt) {
            f2_load_tile<HS>(Ks + ((j + 1) & 1) * E, base + C, C3, (j + 1) * F2_TILE, T);
            f2_load_tile<HS>(Vs + ((j + 1) & 1) * E, base + 2 * C, C3, (j + 1) * F2_TILE, T);
            lc_cp_commit();
        }
        if (j == 0)
#pragma unroll
            for (int r = 0; r < 2; r++) {
                lsr[r] = vec[warp * 16 + g + 8 * r];
                dr[r] = vec[F2_TILE + warp * 16 + g + 8 * r];
            }
        /* S = Q K^T, dP = dO V^T, then P and dS */
        float s[8][4], dp[8][4];
        f2_p_ds<LO, HS, true>(s, dp, Qs, dOs, Kc, Vc, q0 + warp * 16, j * F2_TILE, T, sl2, scale,
                              NULL, NULL, lsr, dr, warp, lane);
        f2_pv<LO, HS>(dq, dp, Kc, lane);   /* dQ += lo(dS) K */
    }
    const float one[2] = {1.0f, 1.0f};
    f2_store_rows<LO, HS>(dqkv + (size_t)b * T * C3 + (size_t)h * HS, C3, q0, T, dq, one, warp, lane);
}

#endif
