/* profile_dev.c — how the profiler times an op: the host clock on the CPU; on a GPU (inner
 * backend "cuda" in a CUDA build) the host clock with the device synchronised before and
 * after each op, and an NVTX range per op for Nsight. */
#include "common/profile_impl.h"

#include <stdlib.h>
#include <string.h>
#include <time.h>

#ifdef LLM_CUDA
#include <nvtx3/nvToolsExt.h>

/* The CUDA backend runs on its own non-blocking stream, which events recorded on the
 * legacy default stream would not bracket, and the stream is private to kernels/cuda.
 * So each op is bracketed by the backend's own sync (all queued work done) and timed
 * with the host clock: exact per-op device time plus one launch latency (~10 us).
 * Switching to cudaEvents needs a stream accessor in kernels/cuda/cuda_ext.h. */
typedef struct {
    int on;   /* inner backend is the CUDA one */
} dev_state;

int llm_profile_dev_init(llm_profile *p, llm_status *st)
{
    if (!p->inner->name || strcmp(p->inner->name, "cuda") != 0) return 0;
    dev_state *d = calloc(1, sizeof *d);
    if (!d) return llm_err(st, LLM_ENOMEM, "out of memory for the profiler");
    d->on = 1;
    p->dev = d;
    return 0;
}

void llm_profile_dev_free(llm_profile *p)
{
    free(p->dev);
    p->dev = NULL;
}

static double host_now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

double llm_profile_dev_begin(llm_profile *p, llm_op op, double now)
{
    if (!p->dev) return now;
    p->inner->sync(p->inner);   /* earlier work must not count against this op */
    nvtxRangePushA(llm_op_name(op));
    return host_now();
}

double llm_profile_dev_end(llm_profile *p, double t0, double now)
{
    if (!p->dev) return now - t0;
    p->inner->sync(p->inner);
    nvtxRangePop();
    return host_now() - t0;
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
