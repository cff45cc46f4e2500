/* bench_nccl.c — llm-bench's collectives on GPUs: NCCL on device buffers over common/dist's
 * communicator (one process per GPU), out-of-place and in-place rows as nccl-tests prints
 * them, the result checked after timing (bench.h).  Built with NCCL (LLM_NCCL); in other
 * builds llm_bench_collective_cuda says what is missing (LLM_ENODEV).
 *
 * Timing: a pair of CUDA events around each repetition on the communicator's stream, every
 * repetition queued before one wait.  Host wall time would need a wait per repetition, and
 * dist's wait polls the stream (with a 50 us sleep, to watch NCCL's async error and the
 * timeout): at small sizes that granularity and the launch latency are larger than the
 * collective itself (about 10 us on NVLink).  nccl-tests instead times a batch of -n
 * launches on the host clock and divides; both leave the launch out of the large sizes. */
#include "common/bench.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/dist.h"

#ifdef LLM_NCCL
#include <cuda_runtime.h>
#include <nccl.h>

typedef struct {
    llm_dist *d;
    ncclComm_t comm;
    cudaStream_t s;
    const char *coll;
    int rank, world;
    size_t n, c, nin, nout;   /* bench.h's n; c = n / world; input and output elements */
    float *a;                 /* device, nin: the out-of-place input */
    float *b;                 /* device, n: the out-of-place output and the in-place buffer */
    float *bar;               /* device, 1: the barrier's operand */
    double *red;              /* device, reps (>= 1): reductions of host numbers over ranks */
    float *host;              /* n: inputs written and outputs read back */
    cudaEvent_t *ev;          /* 2 per repetition */
    int nev;
} bctx;

static int cuerr(llm_status *st, const char *what, cudaError_t e)
{
    return llm_err(st, e == cudaErrorMemoryAllocation ? LLM_ENOMEM : LLM_ESOFTWARE, "cuda: %s: %s",
                   what, cudaGetErrorString(e));
}

static int ncerr(llm_status *st, const char *what, ncclResult_t r)
{
    return llm_err(st, LLM_EIO, "nccl: %s failed: %s", what, ncclGetErrorString(r));
}

/* Where the collective reads and writes in mode ip (0 out-of-place, 1 in-place): nccl-tests'
 * in-place layout puts an allgather's input at rank c of the output and a reducescatter's
 * output at rank c of the input. */
static void bufs(const bctx *x, int ip, float **send, float **recv)
{
    size_t off = (size_t)x->rank * x->c;
    *send = ip ? x->b : x->a;
    *recv = x->b;
    if (ip && !strcmp(x->coll, "allgather"))
        *send = x->b + off;
    if (ip && !strcmp(x->coll, "reducescatter"))
        *recv = x->b + off;
}

static ncclResult_t launch(const bctx *x, int ip)
{
    float *send, *recv;
    bufs(x, ip, &send, &recv);
    if (!strcmp(x->coll, "allreduce"))
        return ncclAllReduce(send, recv, x->n, ncclFloat32, ncclSum, x->comm, x->s);
    if (!strcmp(x->coll, "allgather"))
        return ncclAllGather(send, recv, x->c, ncclFloat32, x->comm, x->s);
    if (!strcmp(x->coll, "reducescatter"))
        return ncclReduceScatter(send, recv, x->c, ncclFloat32, ncclSum, x->comm, x->s);
    return ncclBroadcast(send, recv, x->n, ncclFloat32, 0, x->comm, x->s);
}

/* Write this rank's input for mode ip and poison the rest of the output with NaN (all
 * bits set); queued on the stream, and the host buffer is reused only after a wait. */
static int put_input(bctx *x, int ip, llm_status *st)
{
    float *send, *recv;
    bufs(x, ip, &send, &recv);
    cudaError_t e = cudaMemsetAsync(x->b, 0xff, x->n * sizeof(float), x->s);
    llm_bench_coll_fill(x->coll, x->n, x->rank, x->world, x->host);
    if (e == cudaSuccess)
        e = cudaMemcpyAsync(send, x->host, x->nin * sizeof(float), cudaMemcpyHostToDevice, x->s);
    if (e != cudaSuccess)
        return cuerr(st, "writing the input", e);
    return llm_dist_nccl_wait(x->d, "writing the input", st);
}

/* v[0..k-1] on every rank becomes its max (op ncclMax) or sum over the ranks. */
static int over_ranks(bctx *x, double *v, int k, ncclRedOp_t op, llm_status *st)
{
    if (x->world == 1)
        return 0;
    cudaError_t e = cudaMemcpyAsync(x->red, v, (size_t)k * sizeof *v, cudaMemcpyHostToDevice, x->s);
    if (e != cudaSuccess)
        return cuerr(st, "copying to the device", e);
    ncclResult_t r = ncclAllReduce(x->red, x->red, (size_t)k, ncclFloat64, op, x->comm, x->s);
    if (r != ncclSuccess)
        return ncerr(st, "allreduce of the results", r);
    if ((e = cudaMemcpyAsync(v, x->red, (size_t)k * sizeof *v, cudaMemcpyDeviceToHost, x->s)) != cudaSuccess)
        return cuerr(st, "copying to the host", e);
    return llm_dist_nccl_wait(x->d, "allreduce of the results", st);
}

/* Timed runs of mode ip: t[0..reps-1] in seconds, the slowest rank's. */
static int timed(bctx *x, int ip, int warmup, int reps, double *t, llm_status *st)
{
    int rc = put_input(x, ip, st);
    if (rc)
        return rc;
    ncclResult_t r = ncclSuccess;
    cudaError_t e = cudaSuccess;
    for (int i = 0; i < warmup && r == ncclSuccess; i++)
        r = launch(x, ip);
    for (int i = 0; i < reps && r == ncclSuccess && e == cudaSuccess; i++) {
        /* line the ranks up so that no rank's time includes waiting for a late one */
        if (x->world > 1 && (r = ncclAllReduce(x->bar, x->bar, 1, ncclFloat32, ncclSum, x->comm, x->s)))
            break;
        if ((e = cudaEventRecord(x->ev[2 * i], x->s)) != cudaSuccess)
            break;
        if ((r = launch(x, ip)) != ncclSuccess)
            break;
        e = cudaEventRecord(x->ev[2 * i + 1], x->s);
    }
    if (r != ncclSuccess)
        return ncerr(st, x->coll, r);
    if (e != cudaSuccess)
        return cuerr(st, "recording an event", e);
    if ((rc = llm_dist_nccl_wait(x->d, x->coll, st)))
        return rc;
    for (int i = 0; i < reps; i++) {
        float ms = 0;
        if ((e = cudaEventElapsedTime(&ms, x->ev[2 * i], x->ev[2 * i + 1])) != cudaSuccess)
            return cuerr(st, "reading an event", e);
        t[i] = 1e-3 * ms;
    }
    return over_ranks(x, t, reps, ncclMax, st);
}

/* One more run on fresh input and a poisoned output; *wrong: the bad elements on all
 * ranks (this rank's first is described in msg). */
static int checked(bctx *x, int ip, double *wrong, char *msg, size_t cap, llm_status *st)
{
    int rc = put_input(x, ip, st);
    if (rc)
        return rc;
    ncclResult_t r = launch(x, ip);
    if (r != ncclSuccess)
        return ncerr(st, x->coll, r);
    float *send, *recv;
    bufs(x, ip, &send, &recv);
    cudaError_t e = cudaMemcpyAsync(x->host, recv, x->nout * sizeof(float), cudaMemcpyDeviceToHost, x->s);
    if (e != cudaSuccess)
        return cuerr(st, "reading the output", e);
    if ((rc = llm_dist_nccl_wait(x->d, x->coll, st)))
        return rc;
    size_t first;
    long long w = llm_bench_coll_check(x->coll, x->n, x->rank, x->world, x->host, &first);
    msg[0] = 0;
    if (w)
        snprintf(msg, cap, "; rank %d: %lld, the first at element %zu: %g, want %g", x->rank, w, first,
                 (double)x->host[first],
                 (double)llm_bench_coll_expect(x->coll, x->n, x->rank, x->world, first));
    *wrong = (double)w;
    return over_ranks(x, wrong, 1, ncclSum, st);
}

static void release(bctx *x)
{
    for (int i = 0; i < x->nev; i++)
        cudaEventDestroy(x->ev[i]);
    free(x->ev);
    free(x->host);
    if (x->a)
        cudaFree(x->a);
    if (x->b)
        cudaFree(x->b);
    if (x->bar)
        cudaFree(x->bar);
    if (x->red)
        cudaFree(x->red);
}

static int setup(bctx *x, int reps, llm_status *st)
{
    cudaError_t e;
    if ((e = cudaMalloc((void **)&x->a, x->nin * sizeof(float))) != cudaSuccess ||
        (e = cudaMalloc((void **)&x->b, x->n * sizeof(float))) != cudaSuccess ||
        (e = cudaMalloc((void **)&x->bar, sizeof(float))) != cudaSuccess ||
        (e = cudaMalloc((void **)&x->red, (size_t)reps * sizeof(double))) != cudaSuccess)
        return cuerr(st, "cudaMalloc", e);
    if ((e = cudaMemsetAsync(x->bar, 0, sizeof(float), x->s)) != cudaSuccess)
        return cuerr(st, "cudaMemset", e);
    x->host = malloc(x->n * sizeof(float));
    x->ev = calloc((size_t)reps * 2, sizeof *x->ev);
    if (!x->host || !x->ev)
        return llm_err(st, LLM_ENOMEM, "out of memory for %zu-byte buffers", x->n * sizeof(float));
    for (; x->nev < 2 * reps; x->nev++)
        if ((e = cudaEventCreate(&x->ev[x->nev])) != cudaSuccess)
            return cuerr(st, "cudaEventCreate", e);
    return 0;
}

int llm_bench_collective_cuda(const char *coll, llm_dist *d, size_t bytes, int warmup, int reps,
                              llm_bench_row rows[2], llm_status *st)
{
    int rc0 = llm_bench_collective_args(coll, bytes, warmup, reps, st);
    if (rc0)
        return rc0;
    bctx x = {.d = d, .coll = coll};
    void *comm, *stream;
    if (llm_dist_nccl_handles(d, &comm, &stream))
        return llm_err(st, LLM_EUSAGE, "the cuda collectives need an NCCL communicator, not '%s'",
                       llm_dist_kind(d));
    x.comm = comm;
    x.s = stream;
    x.rank = llm_dist_rank(d);
    x.world = llm_dist_world(d);
    x.n = bytes / 4;
    if (!strcmp(coll, "allgather") || !strcmp(coll, "reducescatter")) {
        x.c = x.n / (size_t)x.world;
        if (x.c == 0)
            x.c = 1;
        x.n = x.c * (size_t)x.world;
    } else {
        x.c = x.n / (size_t)x.world;
    }
    llm_bench_coll_counts(coll, x.n, x.world, &x.nin, &x.nout);
    double factor = llm_bench_busbw_factor(coll, x.world);
    double *t = malloc((size_t)reps * sizeof *t);
    if (!t)
        return llm_err(st, LLM_ENOMEM, "out of memory for %d times", reps);
    int rc = setup(&x, reps, st);
    char gpu[64] = "?";
    struct cudaDeviceProp prop;
    int dev = 0;
    if (cudaGetDevice(&dev) == cudaSuccess && cudaGetDeviceProperties(&prop, dev) == cudaSuccess)
        snprintf(gpu, sizeof gpu, "%.63s", prop.name);
    int ver = 0;
    ncclGetVersion(&ver);
    size_t size = x.n * sizeof(float);
    for (int ip = 0; ip < 2 && !rc; ip++) {
        const char *mode = ip ? "in-place" : "out-of-place";
        double wrong = 0;
        char msg[160];
        if ((rc = timed(&x, ip, warmup, reps, t, st)) || (rc = checked(&x, ip, &wrong, msg, sizeof msg, st)))
            break;
        if (wrong > 0) {
            rc = llm_err(st, LLM_ESOFTWARE, "%s %s of %zu bytes over %d ranks: %.0f wrong elements%s",
                         coll, mode, size, x.world, wrong, msg);
            break;
        }
        llm_bench_row *row = &rows[ip];
        llm_bench_row_init(row, coll, mode);
        snprintf(row->device, sizeof row->device, "cuda");
        snprintf(row->shape, sizeof row->shape, "bytes=%zu", size);
        row->threads = 0;
        row->ranks = x.world;
        row->warmup = warmup;
        llm_bench_row_times(row, t, reps, (double)size, 1e9, "GB/s");
        llm_bench_row_kv(row, "size", (double)size);
        /* nccl-tests' count: the count argument of the NCCL call */
        llm_bench_row_kv(row, "count", (double)(x.nin < x.nout ? x.nin : x.nout));
        llm_bench_row_kv(row, "time_us", 1e6 * row->t_med);
        llm_bench_row_kv(row, "algbw", row->rate);
        llm_bench_row_kv(row, "busbw", row->rate * factor);
        llm_bench_row_kv(row, "wrong", wrong);
        snprintf(row->note, sizeof row->note, "%d rank%s, nccl %d.%d.%d, %.48s, result checked", x.world,
                 x.world == 1 ? "" : "s", ver / 10000, ver / 100 % 100, ver % 100, gpu);
    }
    release(&x);
    free(t);
    return rc;
}

#else

int llm_bench_collective_cuda(const char *coll, llm_dist *d, size_t bytes, int warmup, int reps,
                              llm_bench_row rows[2], llm_status *st)
{
    (void)d, (void)bytes, (void)warmup, (void)reps, (void)rows;
    if (llm_bench_busbw_factor(coll, 1) < 0)
        return llm_bench_collective_args(coll, 4, 0, 1, st);   /* names the bad collective */
#ifdef LLM_CUDA
    return llm_err(st, LLM_ENODEV, "device 'cuda': the collectives need NCCL, and this build has "
                   "none (rebuild with NCCL=1, NCCL_HOME=DIR)");
#else
    return llm_err(st, LLM_ENODEV, "device 'cuda': not available in this build (CPU only; rebuild "
                   "with make CUDA=1)");
#endif
}

#endif
