/* fast_mixed.c — the conversions between fp32 and lo of the "cpu" backend, on its
 * threads for large n: cast_lo (the rounding, bit for bit that of common/quant.c) and
 * llm_cpu_lo_widen (lo bits to their fp32 values, exact), which lo_acts.c builds on. */
#include "kernels/cpu/cpu_ops.h"
#include "kernels/cpu/mixed.h"

void llm_cpu_lo_widen(llm_backend *be, float *dst, const uint16_t *w, size_t n, int lo)
{
    int nt = llm_cpu_threads(be);
    if (lo == LLM_QK_F16) {
#pragma omp parallel for num_threads(nt) schedule(static) if (n > 65536)
        for (size_t i = 0; i < n; i++)
            dst[i] = llm_f16_to_f32(w[i]);
    } else {
#pragma omp parallel for num_threads(nt) schedule(static) if (n > 65536)
        for (size_t i = 0; i < n; i++)
            dst[i] = llm_bf16_to_f32(w[i]);
    }
}

void llm_fast_cast_lo(llm_backend *be, void *dst, const float *src, size_t n, int lo)
{
    uint16_t *d = dst;
    int nt = llm_cpu_threads(be);
    if (lo == LLM_QK_F16) {
#pragma omp parallel for num_threads(nt) schedule(static) if (n > 65536)
        for (size_t i = 0; i < n; i++)
            d[i] = llm_f32_to_f16(src[i]);
    } else {
#pragma omp parallel for num_threads(nt) schedule(static) if (n > 65536)
        for (size_t i = 0; i < n; i++)
            d[i] = llm_f32_to_bf16(src[i]);
    }
}
