/* mixed.h — internal to kernels/cpu: the roundings of the mixed-precision GEMM ops
 * (ref_mixed.c, fast_mixed.c).  They build on the f32 <-> f16/bf16 conversions of
 * quant_kern.h (the ones common/quant.c exports), so a checkpoint converted by
 * llm-quantize and a GEMM operand rounded here agree bit for bit: round to nearest even,
 * beyond the range +-inf (f16 from |x| >= 65520), NaN stays NaN, f16 subnormals kept. */
#ifndef LLM_CPU_MIXED_H
#define LLM_CPU_MIXED_H

#include <stdint.h>

#include "kernels/cpu/quant_kern.h"

/* The lo bits of x; lo is LLM_QK_F16, anything else is bf16 (the model validates lo). */
static inline uint16_t llm_lo_bits(float x, int lo)
{
    return lo == LLM_QK_F16 ? llm_f32_to_f16(x) : llm_f32_to_bf16(x);
}

/* The value of lo bits h, exactly, as a float. */
static inline float llm_lo_value(uint16_t h, int lo)
{
    return lo == LLM_QK_F16 ? llm_f16_to_f32(h) : llm_bf16_to_f32(h);
}

/* x rounded to lo and back: the value the GEMM multiplies. */
static inline float llm_lo_round(float x, int lo)
{
    return llm_lo_value(llm_lo_bits(x, lo), lo);
}

/* The value a product reads: x itself when lo is 0 (fp32), else x rounded to lo.  The
 * reference attention runs its fp32 and lo variants through one loop with these. */
static inline double llm_lo_or_f32(float x, int lo)
{
    return lo ? llm_lo_round(x, lo) : x;
}

/* A value computed in double that a lo product reads: rounded to fp32 and then to lo,
 * as the fast kernels store it; kept in double when lo is 0. */
static inline double llm_lo_or_f64(double x, int lo)
{
    return lo ? llm_lo_round((float)x, lo) : x;
}

#endif
