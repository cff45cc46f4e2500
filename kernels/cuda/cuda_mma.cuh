/* cuda_mma.cuh — warp-level tensor-core instructions (sm_80 and later) for kernels that
 * keep their operands and accumulators in registers: mma.sync m16n8k16 on bf16/fp16
 * with fp32 accumulation, ldmatrix from shared memory, and cp.async copies from global
 * to shared memory.  Inline PTX on the GPU; under tests/emu (which defines
 * LLM_CUDA_EMU_H) the emulator's stand-ins, which keep the same per-lane layouts.
 *
 * The layouts (PTX ISA, "Matrix Fragments for mma.m16n8k16"), lane = 4 g + t:
 *   A (16 x 16, row-major) a[4]: a[0] = (g, 2t..2t+1), a[1] = (g+8, 2t..), a[2] = (g,
 *     2t+8..), a[3] = (g+8, 2t+8..), each register two elements, the lower column in
 *     the low half;
 *   B (16 x 8, k x n) b[2]: b[0] = (k 2t..2t+1, n g), b[1] = (k 2t+8.., n g);
 *   C/D (16 x 8, fp32) c[4]: (g, 2t), (g, 2t+1), (g+8, 2t), (g+8, 2t+1).
 * So the accumulators of two adjacent 16 x 8 tiles, rounded and paired, are the A
 * operand of the next product (lc_pack_lo), with no data movement between lanes.
 *   ldmatrix .x4: lanes 8j..8j+7 give the row addresses (16 bytes each, 16-byte
 *   aligned) of 8 x 8 matrix j; lane 4g+t receives row g, columns 2t..2t+1 of each
 *   matrix in r[j] (.trans: column g, rows 2t..2t+1). */
#ifndef LLM_CUDA_MMA_CUH
#define LLM_CUDA_MMA_CUH
#include <stdint.h>
#include <string.h>

#include "kernels/cuda/cuda_lo.cuh"

/* r[0..3] = ldmatrix .x4 (trans: .trans) from this lane's row address p (shared) */
template <bool TRANS>
__device__ __forceinline__ void lc_ldsm4(uint32_t r[4], const uint16_t *p)
{
#ifdef LLM_CUDA_EMU_H
    emu_ldmatrix(r, 4, TRANS, p);
#else
    uint32_t a = (uint32_t)__cvta_generic_to_shared(p);
    if (TRANS)
        asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0, %1, %2, %3}, [%4];\n"
                     : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3]) : "r"(a));
    else
        asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0, %1, %2, %3}, [%4];\n"
                     : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3]) : "r"(a));
#endif
}

/* d(16 x 8) += a(16 x 16) b(16 x 8), LO = LC_DT_BF16 or LC_DT_F16 operands, fp32 d */
template <int LO>
__device__ __forceinline__ void lc_mma16816(float d[4], const uint32_t a[4], const uint32_t b[2])
{
#ifdef LLM_CUDA_EMU_H
    emu_mma16816(d, a, b, LO == LC_DT_BF16);
#else
    if (LO == LC_DT_BF16)
        asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0, %1, %2, %3}, "
                     "{%4, %5, %6, %7}, {%8, %9}, {%0, %1, %2, %3};\n"
                     : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
                     : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
    else
        asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0, %1, %2, %3}, "
                     "{%4, %5, %6, %7}, {%8, %9}, {%0, %1, %2, %3};\n"
                     : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
                     : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
#endif
}

/* x in the low half, y in the high half, each rounded to lo (to nearest even, as
 * lc_to_lo; one paired conversion instruction on the GPU, whose NaN bits may differ from
 * lc_to_lo's CPU-matching ones: for operands and outputs that no bit-for-bit contract
 * covers) */
template <int LO>
__device__ __forceinline__ uint32_t lc_pack_lo(float x, float y)
{
#ifdef LLM_CUDA_EMU_H
    return (uint32_t)lc_to_lo<LO>(x) | (uint32_t)lc_to_lo<LO>(y) << 16;
#else
    uint32_t u;
    if (LO == LC_DT_BF16) {
        __nv_bfloat162 h = __floats2bfloat162_rn(x, y);
        memcpy(&u, &h, 4);
    } else {
        __half2 h = __floats2half2_rn(x, y);
        memcpy(&u, &h, 4);
    }
    return u;
#endif
}

/* cp.async of N bytes (4, 8 or 16; both addresses N-byte aligned): 16 bypasses L1 */
template <int N>
__device__ __forceinline__ void lc_cp(void *smem, const void *gmem)
{
#ifdef LLM_CUDA_EMU_H
    emu_cp_async(smem, gmem, N);
#else
    uint32_t a = (uint32_t)__cvta_generic_to_shared(smem);
    if (N == 16)
        asm volatile("cp.async.cg.shared.global [%0], [%1], 16;\n" ::"r"(a), "l"(gmem) : "memory");
    else
        asm volatile("cp.async.ca.shared.global [%0], [%1], %2;\n" ::"r"(a), "l"(gmem), "n"(N) : "memory");
#endif
}

/* close this thread's group of cp.async copies */
__device__ __forceinline__ void lc_cp_commit(void)
{
#ifdef LLM_CUDA_EMU_H
    emu_cp_async_commit();
#else
    asm volatile("cp.async.commit_group;\n" ::: "memory");
#endif
}

/* wait until at most N of this thread's committed groups are in flight (then a
 * __syncthreads makes every thread's copies visible to the block) */
template <int N>
__device__ __forceinline__ void lc_cp_wait(void)
{
#ifdef LLM_CUDA_EMU_H
    emu_cp_async_wait(N);
#else
    asm volatile("cp.async.wait_group %0;\n" ::"n"(N) : "memory");
#endif
}

#endif
