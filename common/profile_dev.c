/* profile_dev.c — how the profiler times an op: the host clock on the CPU; on a GPU (inner
 * backend "cuda" in a CUDA build) a pair of CUDA events on the backend's stream around
 * each op (kernels/cuda/cuda_prof.cu), resolved after each span (a step, a token) instead
 * of a device synchronisation per op, and an NVTX range per op and per span for Nsight.
 * Nothing here depends on the op kind: the mixed-precision ops (cast_lo,
 * matmul_forward_lo, matmul_backward_lo) are timed and named like every other. */
#include "common/profile_impl.h"

#include <stdlib.h>
#include <string.h>

#ifdef LLM_CUDA
#include "kernels/cuda/cuda_ext.h"

#define DEV_SLOTS 16384   /* ops between two flushes before the profiler must wait */

typedef struct {
    int16_t op, layer;
    int site;
    size_t trace;         /* index into p->trace, or SIZE_MAX */
} pending;

typedef struct {
    llm_cuda_prof *cp;
    pending *pend;        /* DEV_SLOTS, in slot order */
    double *start, *dur;  /* DEV_SLOTS scratch for resolve */
    int npend;
    int cur;              /* slot of the op in flight, -1 when it got none */
    llm_profile_devmem mem;
} dev_state;

static void dev_mem_sample(dev_state *d, double *into)
{
    size_t used = 0, total = 0;
    if (!d->cp || llm_cuda_prof_meminfo(d->cp, &used, &total) != 0) return;
    *into = (double)used;
    d->mem.total = (double)total;
    if ((double)used > d->mem.used_peak) d->mem.used_peak = (double)used;
}

int llm_profile_dev_init(llm_profile *p, llm_status *st)
{
    if (!p->inner->name || strcmp(p->inner->name, "cuda") != 0) return 0;
    dev_state *d = calloc(1, sizeof *d);
    if (d) {
        d->pend = malloc(DEV_SLOTS * sizeof *d->pend);
        d->start = malloc(DEV_SLOTS * sizeof *d->start);
        d->dur = malloc(DEV_SLOTS * sizeof *d->dur);
    }
    if (!d || !d->pend || !d->start || !d->dur) {
        if (d) { free(d->pend); free(d->start); free(d->dur); }
        free(d);
        return llm_err(st, LLM_ENOMEM, "out of memory for the profiler");
    }
    char err[256];
    if (llm_cuda_prof_new(&d->cp, p->inner, DEV_SLOTS, err, sizeof err)) {
        free(d->pend); free(d->start); free(d->dur); free(d);
        return llm_err(st, LLM_ENODEV, "%s", err);
    }
    d->cur = -1;
    d->mem.used_before = d->mem.used_after = d->mem.used_peak = d->mem.total = -1;
    p->dev = d;
    /* before: after the backend's own init (cuBLAS workspaces), before the model */
    dev_mem_sample(d, &d->mem.used_before);
    d->mem.used_after = d->mem.used_before;
    llm_cuda_prof_origin(d->cp);
    return 0;
}

void llm_profile_dev_free(llm_profile *p)
{
    dev_state *d = p->dev;
    if (!d) return;
    llm_cuda_prof_free(d->cp);
    free(d->pend);
    free(d->start);
    free(d->dur);
    free(d);
    p->dev = NULL;
}

void llm_profile_dev_flush(llm_profile *p)
{
    dev_state *d = p->dev;
    if (!d) return;
    if (d->npend > 0) {
        /* a failed resolve leaves zeros: the calls and FLOP still count */
        llm_cuda_prof_resolve(d->cp, d->start, d->dur, d->npend);
        for (int i = 0; i < d->npend; i++) {
            const pending *q = &d->pend[i];
            llm_profile_add_time(p, q->op, q->site, q->layer, d->dur[i]);
            if (q->trace < p->ntrace) {
                /* the origin event was stamped at p->t_origin (reset reads the clock after) */
                p->trace[q->trace].t0 = d->start[i];
                p->trace[q->trace].dur = d->dur[i];
            }
        }
    }
    d->npend = 0;
    llm_cuda_prof_clear(d->cp);
    dev_mem_sample(d, &d->mem.used_after);
}

void llm_profile_dev_reset(llm_profile *p)
{
    dev_state *d = p->dev;
    if (!d) return;
    d->npend = 0;
    d->cur = -1;
    llm_cuda_prof_clear(d->cp);
    llm_cuda_prof_origin(d->cp);
}

double llm_profile_dev_begin(llm_profile *p, llm_op op, double now)
{
    dev_state *d = p->dev;
    if (!d) return now;
    d->cur = llm_cuda_prof_begin(d->cp, llm_op_name(op));
    if (d->cur < 0) {   /* pool full: fold in what is there (waits for the device) */
        llm_profile_dev_flush(p);
        d->cur = llm_cuda_prof_begin(d->cp, llm_op_name(op));
    }
    return now;
}

void llm_profile_dev_end(llm_profile *p, llm_op op, int site, int layer, size_t trace_idx)
{
    dev_state *d = p->dev;
    if (!d) return;
    if (d->cur < 0) {   /* no event pair: the op counts with no time */
        if (trace_idx < p->ntrace) p->trace[trace_idx].dur = 0;
        return;
    }
    llm_cuda_prof_end(d->cp, d->cur);
    d->pend[d->cur] = (pending){(int16_t)op, (int16_t)layer, site, trace_idx};
    d->npend = d->cur + 1;
    d->cur = -1;
}

void llm_profile_dev_span_begin(llm_profile *p, const char *name)
{
    if (p->dev) llm_cuda_prof_range_push(name);
}

void llm_profile_dev_span_end(llm_profile *p)
{
    if (!p->dev) return;
    p->inner->sync(p->inner);   /* the span ends when its work is done */
    llm_cuda_prof_range_pop();
}

int llm_profile_device_mem(const llm_profile *p, llm_profile_devmem *out)
{
    const dev_state *d = p->dev;
    if (!d || d->mem.total < 0) return -1;
    *out = d->mem;
    return 0;
}

#else

int llm_profile_dev_init(llm_profile *p, llm_status *st)
{
    (void)p;
    (void)st;
    return 0;
}

void llm_profile_dev_free(llm_profile *p) { (void)p; }
void llm_profile_dev_flush(llm_profile *p) { (void)p; }
void llm_profile_dev_reset(llm_profile *p) { (void)p; }
void llm_profile_dev_span_begin(llm_profile *p, const char *name) { (void)p; (void)name; }
void llm_profile_dev_span_end(llm_profile *p) { (void)p; }

double llm_profile_dev_begin(llm_profile *p, llm_op op, double host_now)
{
    (void)p;
    (void)op;
    return host_now;
}

void llm_profile_dev_end(llm_profile *p, llm_op op, int site, int layer, size_t trace_idx)
{
    (void)p;
    (void)op;
    (void)site;
    (void)layer;
    (void)trace_idx;
}

int llm_profile_device_mem(const llm_profile *p, llm_profile_devmem *out)
{
    (void)p;
    (void)out;
    return -1;
}

#endif
