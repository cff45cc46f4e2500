/* ref_adamw_segs.c — the "cpu-ref" backend's adamw_segs: by definition its adamw on each
 * segment followed by its cast_lo of the segment, so the fused op of the other backends
 * has an obviously correct reference. */
#include "kernels/cpu/cpu_ops.h"

void llm_ref_adamw_segs(llm_backend *be, float *p, void *p_lo, const float *grad, float *m,
                        float *v, size_t mv_base, const llm_adamw_seg *segs, int nseg,
                        float lr, float b1, float b2, float eps, int t, float grad_scale,
                        int lo)
{
    for (int s = 0; s < nseg; s++) {
        size_t off = segs[s].off, n = segs[s].n;
        if (!n)
            continue;
        llm_ref_adamw(be, p + off, grad + off, m + (off - mv_base), v + (off - mv_base), n,
                      lr, b1, b2, eps, segs[s].wd, t, grad_scale);
        if (p_lo)
            llm_ref_cast_lo(be, (uint16_t *)p_lo + off, p + off, n, lo);
    }
}
