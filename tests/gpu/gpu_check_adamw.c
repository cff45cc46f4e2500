/* gpu_check_adamw.c — gpu_check's rows for adamw_segs (AdamW over a segment list that
 * writes the lo weight copy): bit for bit the backend's own adamw + cast_lo per segment
 * (p, m, v and the lo copy, gaps between segments untouched), the lo copy the CPU's
 * rounding of the updated p (common/quant.h, bit for bit), and the update against fp64
 * and cpu-ref's adamw_segs.  Segment counts around the CUDA launcher's 128 segments per
 * launch, odd sizes, zero and nonzero decay, shard-relative moments (mv_base), and one
 * segment past the per-segment block cap (its blocks stride over it). */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/ckpt.h"
#include "kernels/backend.h"
#include "tests/gpu/gpu_check.h"
#include "tests/gpu/ref64.h"

#define SENTINEL 0xabcd   /* lo bits the gaps keep */

/* nseg segments with random gaps (0-3 elements) between them, starting at base; sizes
 * from a list of awkward ones, one segment of big elements when big > 0.  Returns the
 * end of the last segment. */
static size_t make_segs(gc *x, llm_adamw_seg *s, int nseg, size_t base, size_t big)
{
    static const size_t sizes[] = {1, 3, 7, 31, 32, 33, 255, 257, 1023, 1025, 4099};
    size_t off = base;
    for (int i = 0; i < nseg; i++) {
        off += rnext(x) % 4;
        size_t n = sizes[rnext(x) % (sizeof sizes / sizeof sizes[0])];
        if (big && i == nseg / 2) n = big;
        if (i == nseg - 1 && nseg > 2) n = 0;   /* an empty one */
        s[i] = (llm_adamw_seg){off, n, (rnext(x) & 1) ? 0.1f : 0.0f};
        off += n;
    }
    return off;
}

static void check_one(gc *x, int nseg, size_t mvb, size_t big, int lo)
{
    llm_backend *g = &x->g;
    llm_adamw_seg *segs = xmalloc((size_t)nseg * sizeof *segs);
    size_t end = make_segs(x, segs, nseg, mvb, big);
    size_t n = end + 5, nm = n - mvb;   /* a gap after the last segment too */
    float lr = 0.05f, b1 = 0.9f, b2 = 0.95f, eps = 1e-8f, gs = 0.5f;
    int t = 3;
    char sh[64];
    snprintf(sh, sizeof sh, "s%d n%zu%s %s", nseg, n, mvb ? " mvb" : "",
             lo == LLM_DT_BF16 ? "bf16" : lo == LLM_DT_F16 ? "f16" : "-");
    float *p = rnd(x, n, -1, 1), *gr = rnd(x, n, -2, 2), *m = rnd(x, nm, -0.1f, 0.1f),
          *v = rnd(x, nm, 0, 0.01f);
    uint16_t *hl = xmalloc(n * 2);
    for (size_t i = 0; i < n; i++) hl[i] = SENTINEL;
    float *gp = gput(x, p, n * 4), *gg = gput(x, gr, n * 4), *gm = gput(x, m, nm * 4),
          *gv = gput(x, v, nm * 4);
    uint16_t *gl = gput(x, hl, n * 2);
    float *gp2 = gput(x, p, n * 4), *gm2 = gput(x, m, nm * 4), *gv2 = gput(x, v, nm * 4);
    uint16_t *gl2 = gput(x, hl, n * 2);

    g->adamw_segs(g, gp, lo ? gl : NULL, gg, gm, gv, mvb, segs, nseg, lr, b1, b2, eps, t, gs, lo);
    for (int i = 0; i < nseg; i++) {
        size_t o = segs[i].off, k = segs[i].n;
        if (!k) continue;
        g->adamw(g, gp2 + o, gg + o, gm2 + (o - mvb), gv2 + (o - mvb), k, lr, b1, b2, eps,
                 segs[i].wd, t, gs);
        if (lo) g->cast_lo(g, gl2 + o, gp2 + o, k, lo);
    }
    float *op = gget(x, gp, n), *om = gget(x, gm, nm), *ov = gget(x, gv, nm);
    float *op2 = gget(x, gp2, n), *om2 = gget(x, gm2, nm), *ov2 = gget(x, gv2, nm);
    uint16_t *ol = xmalloc(n * 2), *ol2 = xmalloc(n * 2);
    g->to_host(g, ol, gl, n * 2);
    g->to_host(g, ol2, gl2, n * 2);
    row_bits(x, "adamw_segs p = adamw's", sh, op, op2, n * 4);
    row_bits(x, "adamw_segs m = adamw's", sh, om, om2, nm * 4);
    row_bits(x, "adamw_segs v = adamw's", sh, ov, ov2, nm * 4);
    if (lo) {
        row_bits(x, "adamw_segs lo = cast_lo's", sh, ol, ol2, n * 2);
        /* and the CPU's rounding of the new p, sentinels in the gaps */
        uint16_t *want = lo_host(op, n, lo);
        size_t next = 0;
        for (int i = 0; i < nseg; i++) {
            for (; next < segs[i].off; next++) want[next] = SENTINEL;
            next = segs[i].off + segs[i].n;
        }
        for (; next < n; next++) want[next] = SENTINEL;
        row_bits(x, "adamw_segs lo = cpu round", sh, ol, want, n * 2);
        free(want);
    } else {
        size_t untouched = 0;
        for (size_t i = 0; i < n; i++) untouched += ol[i] == SENTINEL;
        row_check(x, "adamw_segs no lo: none", sh, (double)(n - untouched), 0.0, untouched == n);
    }

    /* the update p - p0 against fp64 (and cpu-ref's adamw_segs): gaps stay 0 */
    double *rp = dcopy(p, n), *rm = xmalloc(nm * 8), *rv = xmalloc(nm * 8);
    for (int i = 0; i < nseg; i++) {
        size_t o = segs[i].off, k = segs[i].n;
        if (k)
            r64_adamw(rp + o, rm + (o - mvb), rv + (o - mvb), p + o, gr + o, m + (o - mvb),
                      v + (o - mvb), k, lr, b1, b2, eps, segs[i].wd, t, gs);
    }
    float *cp = NULL;
    if (x->have_ref && x->r.adamw_segs) {
        cp = fdup(p, n);
        float *cm = fdup(m, nm), *cv = fdup(v, nm);
        x->r.adamw_segs(&x->r, cp, NULL, gr, cm, cv, mvb, segs, nseg, lr, b1, b2, eps, t, gs, 0);
        free(cm);
        free(cv);
    }
    for (size_t i = 0; i < n; i++) {
        op[i] -= p[i];
        rp[i] -= p[i];
        if (cp) cp[i] -= p[i];
    }
    row(x, "adamw_segs update", sh, op, rp, cp, n, B_RED);

    free(segs); free(p); free(gr); free(m); free(v); free(hl);
    free(op); free(om); free(ov); free(op2); free(om2); free(ov2); free(ol); free(ol2);
    free(rp); free(rm); free(rv); free(cp);
    void *bufs[] = {gp, gg, gm, gv, gl, gp2, gm2, gv2, gl2};
    for (size_t i = 0; i < sizeof bufs / sizeof *bufs; i++) g->free(g, bufs[i]);
}

void gpu_check_adamw_segs(gc *x, int tiny)
{
    if (!x->g.adamw_segs) {
        row_check(x, "adamw_segs", "not filled", 1.0, 0.0, 0);
        return;
    }
    static const int los[] = {0, LLM_DT_BF16, LLM_DT_F16};
    static const int counts[] = {1, 7, 128, 129, 300};
    for (size_t c = 0; c < sizeof counts / sizeof *counts; c++)
        check_one(x, counts[c], c == 3 ? 5 : 0, 0, los[c % 3]);
    check_one(x, 2, 0, 0, LLM_DT_F16);
    check_one(x, 129, 3, 0, LLM_DT_BF16);
    /* past the CUDA kernel's per-segment grid (2048 blocks of 1024 elements): the
     * blocks stride over the rest, a partial chunk at the end */
    check_one(x, 3, 0, ((size_t)2048 * 1024) + 1029, LLM_DT_BF16);
    if (!tiny) check_one(x, 131, 7, ((size_t)5 << 20) + 3, LLM_DT_F16);
}
