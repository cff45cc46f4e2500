/* profile_dev.c — how the profiler times an op: the host clock on the CPU; CUDA events
 * and NVTX ranges (for Nsight) when the inner backend is "cuda" in a CUDA build. */
#include "common/profile_impl.h"

#include <stdlib.h>
#include <string.h>

#ifdef LLM_CUDA
#include <cuda_runtime.h>
#include <nvtx3/nvToolsExt.h>

typedef struct {
    cudaEvent_t start, stop;
    int on;   /* inner backend is the CUDA one */
} dev_state;

int llm_profile_dev_init(llm_profile *p, llm_status *st)
{
    if (!p->inner->name || strcmp(p->inner->name, "cuda") != 0) return 0;
    dev_state *d = calloc(1, sizeof *d);
    if (!d) return llm_err(st, LLM_ENOMEM, "out of memory for the profiler");
    if (cudaEventCreate(&d->start) != cudaSuccess || cudaEventCreate(&d->stop) != cudaSuccess) {
        free(d);
        return llm_err(st, LLM_ENODEV, "cannot create CUDA events for profiling");
    }
    d->on = 1;
    p->dev = d;
    return 0;
}

void llm_profile_dev_free(llm_profile *p)
{
    dev_state *d = p->dev;
    if (!d) return;
    cudaEventDestroy(d->start);
    cudaEventDestroy(d->stop);
    free(d);
    p->dev = NULL;
}

double llm_profile_dev_begin(llm_profile *p, llm_op op, double host_now)
{
    dev_state *d = p->dev;
    if (!d) return host_now;
    nvtxRangePushA(llm_op_name(op));
    /* The backend launches on the default (legacy) stream unless it says otherwise;
     * events on stream 0 bracket whatever it queued for this op. */
    cudaEventRecord(d->start, 0);
    return host_now;
}

double llm_profile_dev_end(llm_profile *p, double t0, double host_now)
{
    dev_state *d = p->dev;
    if (!d) return host_now - t0;
    cudaEventRecord(d->stop, 0);
    /* Waiting per op serialises host and device; a profile is for attribution, and the
     * per-op device time is exact this way. */
    cudaEventSynchronize(d->stop);
    nvtxRangePop();
    float ms = 0;
    if (cudaEventElapsedTime(&ms, d->start, d->stop) != cudaSuccess) return host_now - t0;
    return 1e-3 * (double)ms;
}

#else

int llm_profile_dev_init(llm_profile *p, llm_status *st)
{
    (void)p;
    (void)st;
    return 0;
}

void llm_profile_dev_free(llm_profile *p)
{
    (void)p;
}

double llm_profile_dev_begin(llm_profile *p, llm_op op, double host_now)
{
    (void)p;
    (void)op;
    return host_now;
}

double llm_profile_dev_end(llm_profile *p, double t0, double host_now)
{
    (void)p;
    return host_now - t0;
}

#endif
