/* cuda_prof.cu — CUDA-event timing and NVTX ranges for the profiler (common/profile_dev.c).
 *
 * Each op gets a pair of events on the backend's own stream, so an op's time is the
 * device time between the work queued before it finishing and its own work finishing;
 * nothing waits on the device until the caller resolves a batch (after a step).
 *
 * The pool is per op call, not per op kind: every op kind of common/profile.h gets its
 * pair and its NVTX name (llm_op_name) the same way, the mixed-precision ones included.
 * The lo ops (matmul_forward_lo, matmul_backward_lo, the lse attention, the lo
 * layernorm, GELU and cross-entropy) read their lo inputs as the model holds them: no
 * conversion pass runs inside their pair, so an op's time is its GEMMs or kernels alone
 * (plus, for a cublasGemmEx fallback with a lo output and a bias, the one kernel that
 * adds the bias and rounds); cast_lo (the weight copy after each update) is an op of its
 * own. */
#include <nvtx3/nvToolsExt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/cuda/cuda_internal.h"
extern "C" {
#include "kernels/cuda/cuda_ext.h"
}

struct llm_cuda_prof {
    cudaStream_t stream;
    int cap, n, made;        /* made: event pairs created so far (lazily) */
    cudaEvent_t *ev;         /* 2 per slot: start, end */
    cudaEvent_t origin;
    int have_origin;
};

extern "C" int llm_cuda_prof_new(llm_cuda_prof **out, llm_backend *be, int cap, char *err, size_t errlen)
{
    *out = NULL;
    if (!be || !be->name || strcmp(be->name, "cuda") != 0 || !be->ctx) {
        snprintf(err, errlen, "cuda profiler: the backend is not a cuda one");
        return -1;
    }
    if (cap < 1) cap = 1;
    llm_cuda_prof *p = (llm_cuda_prof *)calloc(1, sizeof *p);
    cudaEvent_t *ev = (cudaEvent_t *)calloc(2 * (size_t)cap, sizeof *ev);
    if (!p || !ev) {
        free(p);
        free(ev);
        snprintf(err, errlen, "out of memory for %d event pairs", cap);
        return -1;
    }
    p->stream = lc_get(be)->stream;
    p->cap = cap;
    p->ev = ev;
    cudaError_t e = cudaEventCreate(&p->origin);
    if (e != cudaSuccess) {
        (void)cudaGetLastError();
        snprintf(err, errlen, "cudaEventCreate: %s", cudaGetErrorString(e));
        free(ev);
        free(p);
        return -1;
    }
    *out = p;
    return 0;
}

extern "C" void llm_cuda_prof_free(llm_cuda_prof *p)
{
    if (!p) return;
    cudaStreamSynchronize(p->stream);   /* no event may be pending when destroyed */
    for (int i = 0; i < 2 * p->made; i++) cudaEventDestroy(p->ev[i]);
    cudaEventDestroy(p->origin);
    free(p->ev);
    free(p);
}

extern "C" int llm_cuda_prof_begin(llm_cuda_prof *p, const char *name)
{
    if (p->n >= p->cap) return -1;
    if (p->n == p->made) {
        if (cudaEventCreate(&p->ev[2 * p->made]) != cudaSuccess) { (void)cudaGetLastError(); return -1; }
        if (cudaEventCreate(&p->ev[2 * p->made + 1]) != cudaSuccess) {
            (void)cudaGetLastError();
            cudaEventDestroy(p->ev[2 * p->made]);
            return -1;
        }
        p->made++;
    }
    if (cudaEventRecord(p->ev[2 * p->n], p->stream) != cudaSuccess) { (void)cudaGetLastError(); return -1; }
    nvtxRangePushA(name);
    return p->n++;
}

extern "C" void llm_cuda_prof_end(llm_cuda_prof *p, int slot)
{
    nvtxRangePop();
    if (slot < 0 || slot >= p->n) return;
    if (cudaEventRecord(p->ev[2 * slot + 1], p->stream) != cudaSuccess) (void)cudaGetLastError();
}

extern "C" int llm_cuda_prof_resolve(llm_cuda_prof *p, double *start, double *dur, int n)
{
    if (n > p->n) n = p->n;
    if (n <= 0) return 0;
    if (cudaEventSynchronize(p->ev[2 * (n - 1) + 1]) != cudaSuccess) { (void)cudaGetLastError(); return -1; }
    int rc = 0;
    for (int i = 0; i < n; i++) {
        float ms = 0, t0 = 0;
        if (cudaEventElapsedTime(&ms, p->ev[2 * i], p->ev[2 * i + 1]) != cudaSuccess) {
            (void)cudaGetLastError();
            ms = 0;
            rc = -1;
        }
        if (!p->have_origin || cudaEventElapsedTime(&t0, p->origin, p->ev[2 * i]) != cudaSuccess) {
            (void)cudaGetLastError();
            t0 = 0;
        }
        start[i] = 1e-3 * t0;
        dur[i] = ms > 0 ? 1e-3 * ms : 0;
    }
    return rc;
}

extern "C" void llm_cuda_prof_clear(llm_cuda_prof *p)
{
    p->n = 0;
}

extern "C" int llm_cuda_prof_origin(llm_cuda_prof *p)
{
    /* an idle stream: the origin is stamped now, and later events are after it */
    if (cudaStreamSynchronize(p->stream) != cudaSuccess || cudaEventRecord(p->origin, p->stream) != cudaSuccess ||
        cudaEventSynchronize(p->origin) != cudaSuccess) {
        (void)cudaGetLastError();
        p->have_origin = 0;
        return -1;
    }
    p->have_origin = 1;
    return 0;
}

extern "C" int llm_cuda_prof_meminfo(llm_cuda_prof *p, size_t *used, size_t *total)
{
    (void)p;
    size_t fr = 0, tot = 0;
    if (cudaMemGetInfo(&fr, &tot) != cudaSuccess) { (void)cudaGetLastError(); return -1; }
    *used = tot - fr;
    *total = tot;
    return 0;
}

extern "C" void llm_cuda_prof_range_push(const char *name)
{
    nvtxRangePushA(name);
}

extern "C" void llm_cuda_prof_range_pop(void)
{
    nvtxRangePop();
}
