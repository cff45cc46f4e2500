/* ref_mixed.c — the reference ("cpu-ref") rounding to lo, one element at a time.  The
 * other lo ops of both CPU backends are in lo_acts.c (the backend's fp32 ops on widened
 * lo values); the reference lse attention in ref_forward.c and ref_backward.c. */
#include "kernels/cpu/cpu_ops.h"
#include "kernels/cpu/mixed.h"

void llm_ref_cast_lo(llm_backend *be, void *dst, const float *src, size_t n, int lo)
{
    (void)be;
    uint16_t *d = dst;
    for (size_t i = 0; i < n; i++)
        d[i] = llm_lo_bits(src[i], lo);
}
