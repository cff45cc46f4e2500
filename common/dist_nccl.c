/* dist_nccl.c — the NCCL implementation of dist.h: device memory, one GPU per rank
 * (llm_cuda_select_device: LLM_CUDA_DEVICE, else the local rank modulo the visible
 * GPUs).  Built only with NCCL=1 (LLM_NCCL).
 * Collectives run on the communicator's own stream; the caller syncs its compute stream
 * first (train_dist.c does), except the non-blocking all-reduce, which orders itself
 * after the compute stream on the device (an event; llm_dist_set_stream).  Waiting polls the stream and NCCL's async error, and past
 * the timeout aborts the communicator (ncclCommAbort) and returns LLM_EIO, so a dead peer
 * ends the job instead of hanging it. */
#include "common/dist_impl.h"

#ifdef LLM_NCCL
#include <cuda_runtime.h>
#include <nccl.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "common/nccl_dl.h"
#include "kernels/cuda/cuda_ext.h"

typedef struct {
    ncclComm_t comm;
    cudaStream_t stream;
    float *scratch;   /* one float for the barrier */
    cudaEvent_t ready; /* non-blocking all-reduce: recorded on the compute stream */
    int aborted;
    void *stage;       /* device copy of host buffers (below), grown on demand */
    size_t stage_bytes;
} nccl_state;

static ncclDataType_t ty(llm_dist_type t)
{
    return t == LLM_DIST_F64 ? ncclFloat64 : ncclFloat32;
}

static ncclRedOp_t rop(llm_dist_op op)
{
    return op == LLM_DIST_MAX ? ncclMax : op == LLM_DIST_AVG ? ncclAvg : ncclSum;
}

static int nerr(llm_status *st, const char *what, ncclResult_t r)
{
    return llm_err(st, LLM_EIO, "nccl: %s failed: %s", what, ncclGetErrorString(r));
}

/* Abort the communicator once, whoever asks first (the watchdog thread, a wait below,
 * llm_dist_abort): aborted is set before the abort, atomically. */
static void n_abort(llm_dist *d)
{
    nccl_state *s = d->impl;
    if (s && !__atomic_exchange_n(&s->aborted, 1, __ATOMIC_ACQ_REL))
        ncclCommAbort(s->comm);
}

/* Wait for the stream (ev NULL) or for the event ev, watching for NCCL errors and the
 * timeout. */
static int wait_event(llm_dist *d, const char *what, cudaEvent_t ev, llm_status *st)
{
    nccl_state *s = d->impl;
    double t0 = llm_now_s();
    for (;;) {
        cudaError_t e = ev ? cudaEventQuery(ev) : cudaStreamQuery(s->stream);
        if (e == cudaSuccess)
            return 0;
        if (e != cudaErrorNotReady)
            return llm_err(st, LLM_EIO, "nccl: %s: %s", what, cudaGetErrorString(e));
        /* under d->mu: the watchdog (dist.c) aborts holding it, so the communicator is
         * neither aborted twice nor asked after it was (n_abort sets aborted first) */
        int rc = 0;
        pthread_mutex_lock(&d->mu);
        ncclResult_t ae = ncclSuccess;
        if (__atomic_load_n(&s->aborted, __ATOMIC_ACQUIRE))
            rc = llm_err(st, LLM_EIO, "nccl: %s: the communicator was aborted", what);
        else if (ncclCommGetAsyncError(s->comm, &ae), ae != ncclSuccess && ae != ncclInProgress)
            rc = nerr(st, what, ae);
        else if (llm_now_s() - t0 > d->timeout_s)
            rc = llm_err(st, LLM_EIO, "nccl: %s did not complete within %.0f s "
                         "(--dist-timeout): communicator aborted", what, d->timeout_s);
        if (rc)
            n_abort(d);
        pthread_mutex_unlock(&d->mu);
        if (rc)
            return rc;
        usleep(50);
    }
}

static int wait_done(llm_dist *d, const char *what, llm_status *st)
{
    return wait_event(d, what, NULL, st);
}

/* ---- host buffers ----
 * NCCL reads and writes only memory the GPU can address; the small agreements of
 * common/train_dist.c (the start step, a skipped step, the loss, the gradient norm,
 * checkpoint checksums) and of infer_tp.c are host memory.  Such a buffer goes through
 * s->stage: copied in on the communicator's stream, reduced there, copied back after the
 * collective completed (wait_done, so the timeout still applies). */
static int on_host(const void *p)
{
    struct cudaPointerAttributes a;
    if (cudaPointerGetAttributes(&a, p) != cudaSuccess) {
        (void)cudaGetLastError();
        return 1;   /* memory the runtime does not know: plain host memory */
    }
    return a.type != cudaMemoryTypeDevice && a.type != cudaMemoryTypeManaged;
}

/* s->stage of at least bytes, holding a copy of host[0, in) when in > 0; 0 or an error */
static int stage_in(llm_dist *d, const void *host, size_t in, size_t bytes, llm_status *st)
{
    nccl_state *s = d->impl;
    cudaError_t e = cudaSuccess;
    if (bytes > s->stage_bytes) {
        if (s->stage)
            cudaFree(s->stage);   /* no collective holds it: each waits before returning */
        s->stage = NULL;
        s->stage_bytes = 0;
        if ((e = cudaMalloc(&s->stage, bytes)) != cudaSuccess)
            s->stage = NULL;
        else
            s->stage_bytes = bytes;
    }
    if (e == cudaSuccess && in)
        e = cudaMemcpyAsync(s->stage, host, in, cudaMemcpyHostToDevice, s->stream);
    if (e != cudaSuccess) {
        (void)cudaGetLastError();
        return llm_err(st, e == cudaErrorMemoryAllocation ? LLM_ENOMEM : LLM_EIO,
                       "nccl: staging %zu bytes of host memory: %s", bytes, cudaGetErrorString(e));
    }
    return 0;
}

/* The buffer a collective over buf (bytes, the first in of them its input) runs on: buf
 * itself when it is device memory (*host NULL), else s->stage with buf's input copied in
 * (*host = buf, for finish to copy the result back).  0 or an error. */
static int view(llm_dist *d, void *buf, size_t in, size_t bytes, void **host, void **dev,
                llm_status *st)
{
    *host = bytes && on_host(buf) ? buf : NULL;
    *dev = buf;
    if (*host) {
        if (stage_in(d, buf, in, bytes, st))
            return st->code;
        *dev = ((nccl_state *)d->impl)->stage;
    }
    return 0;
}

/* After the collective: wait for it, then copy dev[0, bytes) back to host when staged. */
static int finish(llm_dist *d, const char *what, void *host, const void *dev, size_t bytes,
                  llm_status *st)
{
    if (wait_done(d, what, st))
        return st->code;
    if (host && bytes) {
        cudaError_t e = cudaMemcpy(host, dev, bytes, cudaMemcpyDeviceToHost);
        if (e != cudaSuccess)
            return llm_err(st, LLM_EIO, "nccl: %s: copying the result back: %s", what,
                           cudaGetErrorString(e));
    }
    return 0;
}

static int n_allreduce(llm_dist *d, void *buf, size_t n, llm_dist_type t, llm_dist_op op,
                       llm_status *st)
{
    nccl_state *s = d->impl;
    size_t bytes = n * llm_dist__tsize(t);
    void *host, *dev;
    if (view(d, buf, bytes, bytes, &host, &dev, st))
        return st->code;
    ncclResult_t r = ncclAllReduce(dev, dev, n, ty(t), rop(op), s->comm, s->stream);
    return r != ncclSuccess ? nerr(st, "allreduce", r)
                            : finish(d, "allreduce", host, dev, bytes, st);
}

/* Shards of unequal size: one reduce per rank (rooted at the shard's owner) in a group,
 * which NCCL runs as one operation. */
static int n_reduce_scatter(llm_dist *d, const void *send, void *recv, size_t n,
                            llm_dist_type t, llm_dist_op op, llm_status *st)
{
    nccl_state *s = d->impl;
    size_t es = llm_dist__tsize(t), mlo, mhi;
    llm_dist_shard(n, d->world, d->rank, &mlo, &mhi);
    size_t rbytes = (mhi - mlo) * es;
    /* host memory on either side: send staged whole, this rank's shard received after it */
    void *host = n && (on_host(send) || on_host(recv)) ? recv : NULL, *dev = recv;
    if (host) {
        if (stage_in(d, send, n * es, n * es + rbytes, st))
            return st->code;
        send = s->stage;
        dev = (char *)s->stage + n * es;
    }
    ncclGroupStart();
    for (int r = 0; r < d->world; r++) {
        size_t lo, hi;
        llm_dist_shard(n, d->world, r, &lo, &hi);
        ncclResult_t e = ncclReduce((const char *)send + lo * es, dev, hi - lo, ty(t), rop(op),
                                    r, s->comm, s->stream);
        if (e != ncclSuccess) {
            ncclGroupEnd();
            return nerr(st, "reduce_scatter", e);
        }
    }
    ncclResult_t e = ncclGroupEnd();
    return e != ncclSuccess ? nerr(st, "reduce_scatter", e)
                            : finish(d, "reduce_scatter", host, dev, rbytes, st);
}

/* In place: the reduce rooted at this rank reads and writes its own shard of buf
 * (NCCL allows sendbuff == recvbuff). */
static int n_reduce_scatter_inplace(llm_dist *d, void *buf, size_t n, llm_dist_type t,
                                    llm_dist_op op, llm_status *st)
{
    size_t lo, hi;
    llm_dist_shard(n, d->world, d->rank, &lo, &hi);
    return n_reduce_scatter(d, buf, (char *)buf + lo * llm_dist__tsize(t), n, t, op, st);
}

static int n_allgather(llm_dist *d, void *buf, size_t n, llm_dist_type t, llm_status *st)
{
    nccl_state *s = d->impl;
    size_t es = llm_dist__tsize(t);
    void *host, *dev;
    if (view(d, buf, n * es, n * es, &host, &dev, st))
        return st->code;
    ncclGroupStart();
    for (int r = 0; r < d->world; r++) {
        size_t lo, hi;
        llm_dist_shard(n, d->world, r, &lo, &hi);
        char *p = (char *)dev + lo * es;
        ncclResult_t e = ncclBroadcast(p, p, hi - lo, ty(t), r, s->comm, s->stream);
        if (e != ncclSuccess) {
            ncclGroupEnd();
            return nerr(st, "allgather", e);
        }
    }
    ncclResult_t e = ncclGroupEnd();
    return e != ncclSuccess ? nerr(st, "allgather", e)
                            : finish(d, "allgather", host, dev, n * es, st);
}

static int n_broadcast(llm_dist *d, void *buf, size_t n, llm_dist_type t, int root,
                       llm_status *st)
{
    nccl_state *s = d->impl;
    size_t bytes = n * llm_dist__tsize(t);
    void *host, *dev;
    if (view(d, buf, d->rank == root ? bytes : 0, bytes, &host, &dev, st))
        return st->code;
    ncclResult_t e = ncclBroadcast(dev, dev, n, ty(t), root, s->comm, s->stream);
    return e != ncclSuccess ? nerr(st, "broadcast", e)
                            : finish(d, "broadcast", host, dev, bytes, st);
}

static int n_barrier(llm_dist *d, llm_status *st)
{
    nccl_state *s = d->impl;
    return n_allreduce(d, s->scratch, 1, LLM_DIST_F32, LLM_DIST_SUM, st);
}

/* Non-blocking all-reduce: the communicator's stream waits (on the device) for the
 * work enqueued so far on the compute stream, then reduces; impl is an event recorded
 * after the reduce. */
static int n_iallreduce(llm_dist *d, llm_dist_req *q, llm_status *st)
{
    nccl_state *s = d->impl;
    cudaError_t e;
    if (q->n && on_host(q->buf))   /* no staging here: it would wait for the reduce */
        return llm_err(st, LLM_EUSAGE, "nccl: iallreduce needs device memory");
    if (d->stream) {
        if ((e = cudaEventRecord(s->ready, (cudaStream_t)d->stream)) != cudaSuccess ||
            (e = cudaStreamWaitEvent(s->stream, s->ready, 0)) != cudaSuccess)
            return llm_err(st, LLM_EIO, "nccl: iallreduce: %s", cudaGetErrorString(e));
    } else if ((e = cudaDeviceSynchronize()) != cudaSuccess) {
        return llm_err(st, LLM_EIO, "nccl: iallreduce: %s", cudaGetErrorString(e));
    }
    ncclResult_t r = ncclAllReduce(q->buf, q->buf, q->n, ty(q->t), rop(q->op), s->comm,
                                   s->stream);
    if (r != ncclSuccess)
        return nerr(st, "iallreduce", r);
    cudaEvent_t done;
    if ((e = cudaEventCreateWithFlags(&done, cudaEventDisableTiming)) != cudaSuccess)
        return llm_err(st, LLM_EIO, "nccl: iallreduce: %s", cudaGetErrorString(e));
    if ((e = cudaEventRecord(done, s->stream)) != cudaSuccess) {
        cudaEventDestroy(done);
        return llm_err(st, LLM_EIO, "nccl: iallreduce: %s", cudaGetErrorString(e));
    }
    q->impl = done;
    return 0;
}

static int n_test(llm_dist *d, llm_dist_req *q, int *done, llm_status *st)
{
    (void)d;
    cudaError_t e = cudaEventQuery((cudaEvent_t)q->impl);
    *done = e == cudaSuccess;
    if (e != cudaSuccess && e != cudaErrorNotReady)
        return llm_err(st, LLM_EIO, "nccl: iallreduce: %s", cudaGetErrorString(e));
    return 0;
}

static int n_wait(llm_dist *d, llm_dist_req *q, llm_status *st)
{
    cudaEvent_t ev = (cudaEvent_t)q->impl;
    int rc = wait_event(d, "allreduce (bucket)", ev, st);
    cudaEventDestroy(ev);
    q->impl = NULL;
    return rc;   /* AVG: ncclAvg did it */
}


static void n_fini(llm_dist *d)
{
    nccl_state *s = d->impl;
    if (!s)
        return;
    if (s->comm && !s->aborted)
        ncclCommDestroy(s->comm);
    if (s->scratch)
        cudaFree(s->scratch);
    if (s->stage)
        cudaFree(s->stage);
    if (s->ready)
        cudaEventDestroy(s->ready);
    if (s->stream)
        cudaStreamDestroy(s->stream);
    free(s);
    d->impl = NULL;
#ifdef LLM_MPI
    /* MPI (if it launched us) carried the id: finalize it too */
    llm_dist__mpi_fini();
#endif
}

static const llm_dist_ops nccl_ops = {"nccl", n_allreduce, n_reduce_scatter, n_allgather,
                                      n_broadcast, n_barrier, n_abort, NULL, n_fini,
                                      n_reduce_scatter_inplace, n_iallreduce, n_test, n_wait};

/* This rank's GPU, made current: the backend's rule (LLM_CUDA_DEVICE, else the local
 * rank modulo the visible GPUs), so that the backend created afterwards shares it.
 * The ordinal, or -1 with st set. */
static int pick_gpu(const llm_dist *d, llm_status *st)
{
    char err[256] = "";
    int dev = 0;
    if (llm_cuda_select_device(d->local_rank, &dev, err, sizeof err)) {
        llm_err(st, LLM_ENODEV, "nccl: %s", err);
        return -1;
    }
    if (llm_nccl_load(err, sizeof err)) {   /* opened now, not at exec (nccl_dl.c) */
        llm_err(st, LLM_ENODEV, "%s", err);
        return -1;
    }
    return dev;
}

int llm_dist__nccl_init(llm_dist *d, const char *init, int have_mpi, llm_status *st)
{
    if (pick_gpu(d, st) < 0)
        return st->code;
    ncclUniqueId id;
    memset(&id, 0, sizeof id);
    ncclResult_t r;
    if (d->rank == 0 && (r = ncclGetUniqueId(&id)) != ncclSuccess)
        return nerr(st, "ncclGetUniqueId", r);
    int rc;
#ifdef LLM_MPI
    if (have_mpi)
        rc = llm_dist__mpi_bcast_bytes(&id, sizeof id, st);
    else
#endif
        rc = llm_dist__exchange(init, d->rank, d->world, &id, sizeof id, d->timeout_s,
                                d->stop, st);
    (void)have_mpi;
    if (rc)
        return rc;
    /* from here on rank 0's file: id is removed however the setup ends: joined, failed,
     * or (the watchdog) timed out or stopped */
    const char *pending = have_mpi ? NULL : init;
    nccl_state *s = calloc(1, sizeof *s);
    if (!s) {
        llm_dist__exchange_done(pending, d->rank);
        return llm_err(st, LLM_ENOMEM, "out of memory");
    }
    if (cudaStreamCreateWithFlags(&s->stream, cudaStreamNonBlocking) != cudaSuccess ||
        cudaMalloc((void **)&s->scratch, sizeof(float)) != cudaSuccess ||
        cudaEventCreateWithFlags(&s->ready, cudaEventDisableTiming) != cudaSuccess) {
        llm_dist__exchange_done(pending, d->rank);
        d->impl = s;
        n_fini(d);
        return llm_err(st, LLM_ENODEV, "nccl: cannot create a stream");
    }
    d->xchg_pending = pending;   /* read by the watchdog once busy (under d->mu) */
    llm_dist__busy_setup(d, "ncclCommInitRank (waits for every rank)");
    r = ncclCommInitRank(&s->comm, d->world, id, d->rank);
    llm_dist__busy(d, NULL);
    d->xchg_pending = NULL;
    llm_dist__exchange_done(pending, d->rank);
    if (r != ncclSuccess) {
        s->comm = NULL;
        d->impl = s;
        n_fini(d);
        return nerr(st, "ncclCommInitRank", r);
    }
#ifdef LLM_MPI
    if (have_mpi)
        llm_dist__mpi_detach(d);
#endif
    d->impl = s;
    d->ops = &nccl_ops;
    return 0;
}

/* ---- for benchmarks (llm-bench's collectives; issue 9): additions only ---- */

int llm_dist_nccl_self(llm_dist *d, llm_status *st)
{
    if (d->ops == &nccl_ops)
        return 0;
    if (d->world != 1)
        return llm_err(st, LLM_EUSAGE, "dist: %d %s ranks: NCCL comes from llm_dist_init "
                       "(device memory)", d->world, d->ops->name);
    int dev = pick_gpu(d, st);
    if (dev < 0)
        return st->code;
    nccl_state *s = calloc(1, sizeof *s);
    if (!s)
        return llm_err(st, LLM_ENOMEM, "out of memory");
    int rc = 0;
    ncclResult_t r;
    if (cudaStreamCreateWithFlags(&s->stream, cudaStreamNonBlocking) != cudaSuccess ||
        cudaMalloc((void **)&s->scratch, sizeof(float)) != cudaSuccess)
        rc = llm_err(st, LLM_ENODEV, "nccl: cannot create a stream");
    /* one process, one GPU: no unique id to hand around */
    else if ((r = ncclCommInitAll(&s->comm, 1, &dev)) != ncclSuccess)
        rc = nerr(st, "ncclCommInitAll", r);
    if (rc) {
        /* not n_fini: that would also finalize MPI, which d still uses */
        if (s->scratch)
            cudaFree(s->scratch);
        if (s->stream)
            cudaStreamDestroy(s->stream);
        free(s);
        return rc;
    }
#ifdef LLM_MPI
    if (!strcmp(d->ops->name, "mpi"))
        llm_dist__mpi_detach(d);   /* n_fini finalizes MPI */
#endif
    d->impl = s;
    d->ops = &nccl_ops;
    d->device = 1;
    return 0;
}

int llm_dist_nccl_handles(llm_dist *d, void **comm, void **stream)
{
    if (!d || d->ops != &nccl_ops || !d->impl)
        return -1;
    nccl_state *s = d->impl;
    if (comm)
        *comm = s->comm;
    if (stream)
        *stream = s->stream;
    return 0;
}

int llm_dist_nccl_wait(llm_dist *d, const char *what, llm_status *st)
{
    if (!d || d->ops != &nccl_ops || !d->impl)
        return llm_err(st, LLM_EUSAGE, "dist: %s: not an NCCL communicator", what);
    return wait_done(d, what, st);
}
#else
typedef int llm_dist_nccl_unused; /* ISO C forbids an empty translation unit */
#endif

#ifndef LLM_NCCL
/* ---- for benchmarks (issue 9): a build without NCCL ---- */
int llm_dist_nccl_self(llm_dist *d, llm_status *st)
{
    (void)d;
    return llm_err(st, LLM_ENODEV, "dist: this build has no NCCL: rebuild with CUDA=1 NCCL=1");
}

int llm_dist_nccl_handles(llm_dist *d, void **comm, void **stream)
{
    (void)d, (void)comm, (void)stream;
    return -1;
}

int llm_dist_nccl_wait(llm_dist *d, const char *what, llm_status *st)
{
    (void)d;
    return llm_err(st, LLM_ENODEV, "dist: %s: this build has no NCCL", what);
}
#endif
