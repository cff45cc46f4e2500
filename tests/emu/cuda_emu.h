/* cuda_emu.h — runs the CUDA backend's device code on the CPU, so that kernels can be
 * tested on a machine without a GPU (CI's, and most development sessions').
 *
 * A kernel header (a .cuh of kernels/cuda: device code only) is compiled by the host C++
 * compiler after this file, with tests/emu/include ahead on the include path so that
 * <cuda_bf16.h>, <cuda_fp16.h> and <mma.h> resolve to the stand-ins there.  emu_launch
 * then runs the grid one block at a time; a block's threads are fibers (ucontext) that
 * run until they reach a barrier (__syncthreads, __syncwarp, a shuffle), where the
 * scheduler switches to the next.  What it models, and how it catches mistakes:
 *   - __shared__ arrays are function statics (one block runs at a time, so they are the
 *     block's); the dynamic shared memory (LC_DYN_SMEM) is allocated per block at exactly
 *     the launch's size and filled with 0xff bytes (NaN as floats), so a read of shared
 *     memory nobody wrote shows as NaN, and AddressSanitizer sees overruns;
 *   - the threads of a block are resumed in an order chosen per launch (ascending,
 *     descending, or shuffled each round; warps in lockstep between barriers, or one
 *     warp running ahead of the others as far as the barriers let it): a missing
 *     barrier makes the results depend on the order, which the tests check by comparing
 *     the orders bit for bit;
 *   - barriers must be reached by every live thread of their scope (a warp at
 *     __syncwarp while another of its lanes waits at __syncthreads, or a block that can
 *     never be released, is an error rather than a hang);
 *   - what the GPU requires of converged warps (checked where a warp is released, so
 *     the order the threads run in does not hide it): the lanes of a warp released
 *     together must be at the same kind of warp-level operation (__syncwarp, a shuffle,
 *     ldmatrix/mma.sync) after as many of them, and a __syncwarp or shuffle at the same
 *     source line, so a shuffle in a lane-dependent branch fails; ldmatrix/mma.sync (.aligned) with a lane exited, a shuffle reading an exited
 *     lane, and __syncthreads (bar.sync .aligned) reached by part of a warp whose other
 *     lanes have exited are errors (whole warps may exit before a __syncthreads), and
 *     so are threads of a block at two different __syncthreads (told apart by source
 *     line: a barrier in a branch, or in a loop whose trip count differs by thread);
 *   - WMMA fragments hold the whole 16x16 tile in every lane; loads check the pointer's
 *     256-bit alignment and ldm as the CUDA documentation requires; a store writes each
 *     element from one lane only (element e from lane e % 32), so reading another lane's
 *     part without __syncwarp reads stale memory;
 *   - global memory is host memory: AddressSanitizer (make SAN=1) sees every access.
 * Products of WMMA operands are exact in float (as on the tensor cores) and accumulate in
 * float in k order; the tests' bounds allow for another accumulation order.
 * Not modelled: atomics beyond plain read-modify-write, partial warp masks, cooperative
 * groups, streams and the runtime API (the launchers stay in the .cu files). */
#ifndef LLM_CUDA_EMU_H
#define LLM_CUDA_EMU_H

#include <math.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include <functional>
#include <type_traits>

extern "C" {
#include "common/quant.h"
}

#define __global__
#define __device__
#define __host__
#define __forceinline__ inline
#define __launch_bounds__(...)
#define __shared__ static
#define __restrict__ __restrict
#define LC_DYN_SMEM(name) unsigned char *name = emu_dyn_smem()

struct uint3 {
    unsigned x, y, z;
};
struct dim3 {
    unsigned x, y, z;
    constexpr dim3(unsigned a = 1, unsigned b = 1, unsigned c = 1) : x(a), y(b), z(c) {}
};
struct alignas(16) uint4 {   /* 16-byte aligned as on the device: UBSan checks it */
    unsigned x, y, z, w;
};
static inline uint4 make_uint4(unsigned a, unsigned b, unsigned c, unsigned d) { return {a, b, c, d}; }
struct alignas(16) float4 {
    float x, y, z, w;
};
static inline float4 make_float4(float a, float b, float c, float d) { return {a, b, c, d}; }

/* the running thread's indices (set by the scheduler before it resumes a fiber) */
extern uint3 emu_threadIdx, emu_blockIdx;
extern dim3 emu_blockDim, emu_gridDim;
#define threadIdx emu_threadIdx
#define blockIdx emu_blockIdx
#define blockDim emu_blockDim
#define gridDim emu_gridDim
#define warpSize 32

/* The launch: grid of blocks of block threads, smem bytes of dynamic shared memory;
 * kernel is called once per thread (a lambda calling the __global__ function).
 * order: threads resumed in ascending order (0), descending (1), shuffled each round
 * (2, seeded by seed), all warps released from __syncwarp together; or one warp at a
 * time, the lowest (3) or highest (4) first, so it runs ahead to the next __syncthreads.  Returns 0, or -1 with the reason in emu_error() (a deadlocked or
 * misused barrier, a misaligned WMMA operand, ...).  Not reentrant. */
int emu_launch(dim3 grid, dim3 block, size_t smem, const std::function<void()> &kernel,
               int order = 0, unsigned seed = 1, bool direct = false);
/* direct: the threads run as plain calls one after the other, without fibers (much
 * faster), for a kernel known to reach no barrier or shuffle (doing so is an error).
 * emu_last_syncs: how many barriers and shuffles the last launch reached. */
extern long emu_last_syncs;
/* the first error since the last emu_launch started, or "" */
const char *emu_error(void);
/* record an error (first one wins); the kernel goes on */
void emu_fail(const char *fmt, ...);

/* the block's dynamic shared memory; the running thread's lane (0..31) */
unsigned char *emu_dyn_smem(void);
int emu_lane(void);

/* ---- synchronisation ---- */
void __syncthreads(void);
/* __syncthreads() as a kernel writes it: the call's source line goes with it, so that
 * threads at two different barriers are told apart however the compiler lays out (and
 * duplicates) the code; a return address would not do */
void emu_syncthreads_at(const char *file, int line);
#define __syncthreads() emu_syncthreads_at(__FILE__, __LINE__)
void __syncwarp(unsigned mask = 0xffffffffu);
/* value exchange within the warp: out = src_lane's v (n <= 8 bytes); two warp barriers */
void emu_shfl(const void *v, size_t n, int src_lane, void *out, unsigned mask);

/* v of lane src of this warp */
template <class T> static inline T emu_shfl_from(unsigned mask, T v, int src)
{
    static_assert(sizeof(T) <= 8, "shuffle of at most 8 bytes");
    T r;
    emu_shfl(&v, sizeof v, src, &r, mask);
    return r;
}
template <class T> static inline T __shfl_xor_sync(unsigned mask, T v, int lane_mask, int width = 32)
{
    int lane = emu_lane(), src = lane ^ lane_mask;
    return emu_shfl_from(mask, v, src / width == lane / width ? src : lane);
}
template <class T> static inline T __shfl_down_sync(unsigned mask, T v, unsigned delta, int width = 32)
{
    int lane = emu_lane(), src = lane + (int)delta;
    return emu_shfl_from(mask, v, src / width == lane / width ? src : lane);
}
template <class T> static inline T __shfl_sync(unsigned mask, T v, int src_lane, int width = 32)
{
    return emu_shfl_from(mask, v, (emu_lane() / width) * width + src_lane % width);
}
/* __syncwarp and the shuffles as a kernel writes them: the call's source line goes with
 * the running thread's next warp-level wait, so that lanes of a warp at two different
 * ones (a shuffle in each branch of a lane-dependent if) are told apart */
void emu_warp_site(const char *file, int line);
#define __syncwarp(...) (emu_warp_site(__FILE__, __LINE__), __syncwarp(__VA_ARGS__))
#define __shfl_xor_sync(...) (emu_warp_site(__FILE__, __LINE__), __shfl_xor_sync(__VA_ARGS__))
#define __shfl_down_sync(...) (emu_warp_site(__FILE__, __LINE__), __shfl_down_sync(__VA_ARGS__))
#define __shfl_sync(...) (emu_warp_site(__FILE__, __LINE__), __shfl_sync(__VA_ARGS__))

/* ---- warp-level matrix instructions and asynchronous copies ----
 * kernels/cuda/cuda_mma.cuh calls these in place of its inline PTX.  Each lane holds only
 * its own registers, laid out as the PTX ISA specifies for mma.m16n8k16 and ldmatrix, so
 * a kernel that puts an element in the wrong lane or register computes a wrong result
 * here as on the GPU.  The products are exact in float and summed in k order.
 * emu_warp_gather: every lane's n bytes (n <= 32) at mine into all (32 * n bytes, lane
 * order); warp-collective, one warp barrier.
 * emu_ldmatrix: ldmatrix.sync.aligned.m8n8.x{nmat}[.trans].shared.b16 into r[nmat] from
 * the row address this lane gives (lanes 8j..8j+7 give matrix j's rows; 16-byte aligned).
 * emu_mma16816: mma.sync.aligned.m16n8k16.row.col.f32.{bf16|f16}: d += a b.
 * emu_cp_async: cp.async of n (4, 8 or 16) bytes, queued: the copy happens when the
 * issuing thread's emu_cp_async_wait lets it complete (so a read of shared memory
 * before the wait and the barrier after it sees the 0xff fill), as the PTX groups:
 * emu_cp_async_commit closes a group, emu_cp_async_wait(n) completes all but the n
 * most recent groups.  A thread that ends with copies in flight is an error. */
void emu_warp_gather(const void *mine, size_t n, void *all);
void emu_ldmatrix(uint32_t *r, int nmat, bool trans, const void *row);
void emu_mma16816(float *d, const uint32_t *a, const uint32_t *b, bool bf16);
void emu_cp_async(void *smem, const void *gmem, size_t n);
void emu_cp_async_commit(void);
void emu_cp_async_wait(int n);

/* ---- arithmetic ---- */
static inline int min(int a, int b) { return a < b ? a : b; }
static inline int max(int a, int b) { return a > b ? a : b; }
static inline unsigned min(unsigned a, unsigned b) { return a < b ? a : b; }
static inline unsigned max(unsigned a, unsigned b) { return a > b ? a : b; }
static inline long long min(long long a, long long b) { return a < b ? a : b; }
static inline long long max(long long a, long long b) { return a > b ? a : b; }
static inline size_t min(size_t a, size_t b) { return a < b ? a : b; }
static inline size_t max(size_t a, size_t b) { return a > b ? a : b; }
static inline float rsqrtf(float x) { return 1.0f / sqrtf(x); }
static inline float __fdividef(float a, float b) { return a / b; }
static inline uint32_t __float_as_uint(float f)
{
    uint32_t u;
    memcpy(&u, &f, 4);
    return u;
}
static inline float __uint_as_float(uint32_t u)
{
    float f;
    memcpy(&f, &u, 4);
    return f;
}
template <class T> static inline T atomicAdd(T *p, T v)
{
    T old = *p;   /* fibers switch only at barriers: a read-modify-write is atomic */
    *p = old + v;
    return old;
}

/* ---- bf16 / f16 ---- */
struct __nv_bfloat16 {
    uint16_t x;
    operator float() const { return __uint_as_float((uint32_t)x << 16); }
};
struct __half {
    uint16_t x;
    operator float() const { return llm_quant_f16_to_f32(x); }
};
static inline __nv_bfloat16 __float2bfloat16_rn(float f) { return {llm_quant_f32_to_bf16(f)}; }
static inline __half __float2half_rn(float f) { return {llm_quant_f32_to_f16(f)}; }
static inline __nv_bfloat16 __float2bfloat16(float f) { return __float2bfloat16_rn(f); }
static inline __half __float2half(float f) { return __float2half_rn(f); }
static inline unsigned short __bfloat16_as_ushort(__nv_bfloat16 h) { return h.x; }
static inline unsigned short __half_as_ushort(__half h) { return h.x; }
static inline float __bfloat162float(__nv_bfloat16 h) { return (float)h; }
static inline float __half2float(__half h) { return (float)h; }
static inline __nv_bfloat16 __ushort_as_bfloat16(unsigned short u) { return {u}; }
static inline __half __ushort_as_half(unsigned short u) { return {u}; }

/* ---- WMMA (16x16x16 only) ---- */
namespace nvcuda {
namespace wmma {
struct matrix_a {};
struct matrix_b {};
struct accumulator {};
struct row_major {};
struct col_major {};
enum layout_t { mem_row_major, mem_col_major };

template <class Use, int M, int N, int K, class T, class Layout = void> struct fragment {
    static_assert(M == 16 && N == 16 && K == 16, "the emulator has 16x16x16 fragments only");
    float v[16][16];   /* (row, col) of the tile: A (m,k), B (k,n), accumulator (m,n) */
};

void emu_check_ptr(const void *p, unsigned ldm, size_t elem, const char *what);

template <class Use, class T, class Layout>
static inline void fill_fragment(fragment<Use, 16, 16, 16, T, Layout> &f, float x)
{
    for (int i = 0; i < 16; i++)
        for (int j = 0; j < 16; j++) f.v[i][j] = x;
}

/* element (r, c) of a tile stored at p with leading dimension ldm */
template <class T> static inline float emu_at(const T *p, unsigned ldm, int r, int c, int row_major)
{
    return (float)(row_major ? p[(size_t)r * ldm + c] : p[(size_t)c * ldm + r]);
}

/* The loads are warp-collective: in hardware every lane's part is read once all lanes
 * have arrived.  So the first lane to make a warp's k-th load reads the tile into a
 * per-warp slot, and the other lanes take it from there (what a lane wrote after its own
 * load, such as a store of the result, must not change what the others load). */
float *emu_load_slot(bool *filled);
template <class T>
static inline void emu_load(float *v, const T *p, unsigned ldm, bool row_major, const char *what)
{
    bool filled;
    float *slot = emu_load_slot(&filled);
    if (!filled) {
        emu_check_ptr(p, ldm, sizeof(T), what);
        for (int r = 0; r < 16; r++)
            for (int c = 0; c < 16; c++) slot[r * 16 + c] = emu_at(p, ldm, r, c, row_major);
    }
    memcpy(v, slot, 256 * sizeof(float));
}

template <class T, class Layout>
static inline void load_matrix_sync(fragment<matrix_a, 16, 16, 16, T, Layout> &f, const T *p, unsigned ldm)
{
    emu_load(&f.v[0][0], p, ldm, std::is_same<Layout, row_major>::value, "load_matrix_sync(matrix_a)");
}
template <class T, class Layout>
static inline void load_matrix_sync(fragment<matrix_b, 16, 16, 16, T, Layout> &f, const T *p, unsigned ldm)
{
    emu_load(&f.v[0][0], p, ldm, std::is_same<Layout, row_major>::value, "load_matrix_sync(matrix_b)");
}
static inline void load_matrix_sync(fragment<accumulator, 16, 16, 16, float> &f, const float *p,
                                    unsigned ldm, layout_t l)
{
    emu_load(&f.v[0][0], p, ldm, l == mem_row_major, "load_matrix_sync(accumulator)");
}
static inline void store_matrix_sync(float *p, const fragment<accumulator, 16, 16, 16, float> &f,
                                     unsigned ldm, layout_t l)
{
    emu_check_ptr(p, ldm, sizeof(float), "store_matrix_sync");
    int lane = emu_lane();
    for (int e = lane; e < 256; e += 32) {
        int i = e / 16, j = e % 16;
        p[l == mem_row_major ? (size_t)i * ldm + j : (size_t)j * ldm + i] = f.v[i][j];
    }
}
/* d = c + a b (d may be c).  Every lane of a warp makes the same call with the same
 * fragments: emu_mma computes it once per warp and hands the others the result (after
 * comparing their operands with the first lane's). */
void emu_mma(float *d, const float *a, const float *b, const float *c);
template <class T, class LA, class LB>
static inline void mma_sync(fragment<accumulator, 16, 16, 16, float> &d,
                            const fragment<matrix_a, 16, 16, 16, T, LA> &a,
                            const fragment<matrix_b, 16, 16, 16, T, LB> &b,
                            const fragment<accumulator, 16, 16, 16, float> &c)
{
    emu_mma(&d.v[0][0], &a.v[0][0], &b.v[0][0], &c.v[0][0]);
}
}  // namespace wmma
}  // namespace nvcuda

#endif
