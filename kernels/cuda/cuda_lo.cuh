/* cuda_lo.cuh — device-side basics shared by the CUDA backend's kernels: the dtype codes,
 * the lo roundings (the CPU's conversion, common/quant.h, bit for bit) and the dynamic
 * shared memory declaration. */
#ifndef LLM_CUDA_LO_CUH
#define LLM_CUDA_LO_CUH
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <stdint.h>

/* llm_dtype values of common/ckpt.h (kernels do not include common/) */
enum { LC_DT_F32 = 0, LC_DT_F16 = 1, LC_DT_BF16 = 2 };

/* Declares name, the block's dynamic shared memory (unsigned char[], 128-byte aligned).
 * A macro so that tests/emu, which runs device code on the CPU, can supply its own. */
#ifndef LC_DYN_SMEM
#define LC_DYN_SMEM(name) extern __shared__ __align__(128) unsigned char name[]
#endif

/* Round to nearest even with the cuda_bf16/cuda_fp16 intrinsics (overflow -> inf; fp16
 * values >= 65520 round to inf).  NaN is mapped as the CPU maps it (sign and top payload
 * bits kept, quiet bit set for bf16; sign | 0x7e00 for fp16), so every bit matches. */
__device__ __forceinline__ uint16_t lc_to_bf16(float x)
{
    uint32_t u = __float_as_uint(x);
    if ((u & 0x7fffffffu) > 0x7f800000u) return (uint16_t)((u >> 16) | 0x40);
    return __bfloat16_as_ushort(__float2bfloat16_rn(x));
}

__device__ __forceinline__ uint16_t lc_to_f16(float x)
{
    uint32_t u = __float_as_uint(x);
    if ((u & 0x7fffffffu) > 0x7f800000u) return (uint16_t)(((u >> 16) & 0x8000u) | 0x7e00u);
    return __half_as_ushort(__float2half_rn(x));
}

/* The lo bits of x for LO = LC_DT_BF16 or LC_DT_F16. */
template <int LO>
__device__ __forceinline__ uint16_t lc_to_lo(float x)
{
    return LO == LC_DT_BF16 ? lc_to_bf16(x) : lc_to_f16(x);
}

/* The value of lo bits h (exact). */
template <int LO>
__device__ __forceinline__ float lc_from_lo(uint16_t h)
{
    return LO == LC_DT_BF16 ? __uint_as_float((uint32_t)h << 16)
                            : __half2float(__ushort_as_half((unsigned short)h));
}

/* Element i of a tensor of dtype D (LC_DT_F32, or a lo one as its 2-byte bits): its
 * value, and storing v into it (a lo one rounded once, as lc_to_lo). */
template <int D>
__device__ __forceinline__ float lc_ld(const void *p, size_t i)
{
    if (D == LC_DT_F32) return ((const float *)p)[i];
    return lc_from_lo<D>(((const uint16_t *)p)[i]);
}

template <int D>
__device__ __forceinline__ void lc_st(void *p, size_t i, float v)
{
    if (D == LC_DT_F32) ((float *)p)[i] = v;
    else ((uint16_t *)p)[i] = lc_to_lo<D>(v);
}

/* GPT-2's GELU (tanh form) and its derivative in fp32, as the backend's GELU kernels and
 * the fused GEMMs' fallback compute them.  0.5 (1 + tanh u) = 1 / (1 + e^-2u): no
 * cancellation for x << 0, where the tanh form rounds 1 + tanh u to 0 (gpu_check's n=1
 * row caught it). */
#define LC_GELU_S 0.7978845608028654f   /* sqrt(2/pi) */

__device__ __forceinline__ float lc_gelu(float x)
{
    float u = LC_GELU_S * (x + 0.044715f * x * x * x);
    return x / (1.0f + expf(-2.0f * u));
}

__device__ __forceinline__ float lc_gelu_grad(float x)
{
    float u = LC_GELU_S * (x + 0.044715f * x * x * x);
    /* sig = 0.5 (1 + tanh u), 1 - sig without cancellation, sech^2 u = 4 sig (1 - sig) */
    float e = expf(-2.0f * u);
    float sig = 1.0f / (1.0f + e);
    float om = e > 1.0f ? 1.0f - sig : e * sig;
    return sig + x * 2.0f * sig * om * LC_GELU_S * (1.0f + 3.0f * 0.044715f * x * x);
}

/* kern<LO><<<grid, block, 0, c->stream>>>(...) for the run-time lo (bf16 or f16). */
#define LC_LAUNCH_LO(c, lo, kern, grid, block, ...)                                           \
    do {                                                                                      \
        if ((lo) == LC_DT_BF16) kern<LC_DT_BF16><<<(grid), (block), 0, (c)->stream>>>(__VA_ARGS__); \
        else kern<LC_DT_F16><<<(grid), (block), 0, (c)->stream>>>(__VA_ARGS__);             \
    } while (0)

#endif
