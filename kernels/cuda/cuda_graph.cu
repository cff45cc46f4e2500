/* cuda_graph.cu — CUDA graphs for fixed sequences of ops (backend.h graph_capture,
 * graph_launch, graph_free): a decode step is ~110 small kernels whose launch costs more
 * than their work at batch 1; recorded once, the step is one cudaGraphLaunch.
 *
 * The capture is thread-local: an op in the recorded sequence that synchronises, copies
 * to or from the host or allocates device memory fails (as a CUDA error, recorded like
 * any other), so only pure sequences of launches on the stream can be recorded.
 * LLM_CUDA_GRAPHS=0 withholds the ops (the caller then runs its ops directly). */
#include <stdlib.h>
#include <string.h>

#include "kernels/cuda/cuda_internal.h"

static int lc_graph_capture(llm_backend *be, void (*fn)(void *arg), void *arg, void **graph)
{
    lc_ctx *c = lc_get(be);
    *graph = NULL;
    if (cudaStreamBeginCapture(c->stream, cudaStreamCaptureModeThreadLocal) != cudaSuccess) {
        (void)cudaGetLastError();   /* not recordable here: run the ops as they are */
        fn(arg);
        return 1;
    }
    int failed = c->failed;
    c->recording = 1;   /* to_device, to_host, sync, alloc, free and the grow-only
                           buffers (scratch, ones, lo) refuse: lc_recording */
    fn(arg);
    c->recording = 0;
    cudaGraph_t g = NULL;
    cudaError_t rc = cudaStreamEndCapture(c->stream, &g);
    if (c->failed != failed) {
        /* an op failed while recording (one that may not be recorded, or a bad launch):
         * its error is recorded; nothing ran */
        if (g) cudaGraphDestroy(g);
        (void)cudaGetLastError();
        return -1;
    }
    cudaGraphExec_t exec = NULL;
    if (rc != cudaSuccess || !g || cudaGraphInstantiate(&exec, g, 0) != cudaSuccess) {
        /* the recording did not take (nothing ran): the ops directly */
        if (g) cudaGraphDestroy(g);
        (void)cudaGetLastError();
        fn(arg);
        return 1;
    }
    cudaGraphDestroy(g);
    if (LC_CK(c, cudaGraphLaunch(exec, c->stream))) {
        cudaGraphExecDestroy(exec);
        return -1;
    }
    c->graph_runs[0]++;
    *graph = exec;
    return 0;
}

static int lc_graph_launch(llm_backend *be, void *graph)
{
    lc_ctx *c = lc_get(be);
    if (!graph || LC_CK(c, cudaGraphLaunch((cudaGraphExec_t)graph, c->stream))) return -1;
    c->graph_runs[1]++;
    return 0;
}

static void lc_graph_free(llm_backend *be, void *graph)
{
    if (!graph) return;
    /* a launch still queued completes first: CUDA frees an in-flight graph after it */
    LC_CK(lc_get(be), cudaGraphExecDestroy((cudaGraphExec_t)graph));
}

extern "C" void llm_backend_cuda_graph_counts(llm_backend *be, long counts[2])
{
    lc_ctx *c = lc_get(be);
    counts[0] = c->graph_runs[0];
    counts[1] = c->graph_runs[1];
}

extern "C" void lc_fill_graph(llm_backend *be)
{
    const char *e = getenv("LLM_CUDA_GRAPHS");
    if (e && !strcmp(e, "0")) return;
    be->graph_capture = lc_graph_capture;
    be->graph_launch = lc_graph_launch;
    be->graph_free = lc_graph_free;
}
