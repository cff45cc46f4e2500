/* nccl_emu.cpp — NCCL's collectives for the emulated build (tests/emu/include/nccl.h), so
 * that common/dist_nccl.c and the device-memory paths of common/train_dist.c run on the
 * CPU: under mpirun each process is one rank with its emulated device, and the
 * collectives are MPI's over the (host-backed) device buffers; without MPI a communicator
 * of one rank (ncclCommInitAll with one device) copies.
 *
 * As NCCL with NCCL_CHECK_POINTERS=1, every buffer must be device memory (cudaMalloc):
 * anything else fails with ncclInvalidArgument and a message, where real NCCL would fault
 * or read garbage.  A collective runs in its stream's order (emu_stream_issue), after the
 * work the stream waits for.  Groups (ncclGroupStart/End) run their operations one by one,
 * which is the same as long as every rank issues the same sequence (MPI's rule too).
 */
#include <nccl.h>
#include <cuda_runtime.h>

#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

/* the C API only: no C++ bindings to link */
#define OMPI_SKIP_MPICXX 1
#define MPICH_SKIP_MPICXX 1
#include <mpi.h>

struct ncclComm {
    MPI_Comm mc;   /* MPI_COMM_NULL: one rank, no MPI */
    int rank, size;
};

namespace {

bool mpi_up()
{
    int init = 0, fin = 0;
    MPI_Initialized(&init);
    MPI_Finalized(&fin);
    return init && !fin;
}

bool device_mem(const char *op, const char *which, const void *p, size_t bytes)
{
    cudaPointerAttributes a;
    if (bytes == 0) return true;
    if (cudaPointerGetAttributes(&a, p) == cudaSuccess && a.type == cudaMemoryTypeDevice &&
        cudaPointerGetAttributes(&a, (const char *)p + bytes - 1) == cudaSuccess &&
        a.type == cudaMemoryTypeDevice)
        return true;
    fprintf(stderr, "emu: nccl %s: %s buffer %p (%zu bytes) is not device memory\n", op, which,
            p, bytes);
    return false;
}

size_t tsize(ncclDataType_t t)
{
    return t == ncclFloat64 ? 8 : 4;
}

bool mpi_type(ncclDataType_t t, MPI_Datatype *m)
{
    if (t == ncclFloat32) *m = MPI_FLOAT;
    else if (t == ncclFloat64) *m = MPI_DOUBLE;
    else return false;
    return true;
}

MPI_Op mpi_op(ncclRedOp_t op)
{
    return op == ncclMax ? MPI_MAX : op == ncclMin ? MPI_MIN : op == ncclProd ? MPI_PROD : MPI_SUM;
}

void avg(void *p, size_t n, ncclDataType_t t, int size)
{
    if (t == ncclFloat64)
        for (size_t i = 0; i < n; i++) ((double *)p)[i] /= size;
    else
        for (size_t i = 0; i < n; i++) ((float *)p)[i] /= (float)size;
}

/* what a collective of n elements works with: the MPI type, n's bytes, whether this rank
 * is the root */
struct call {
    MPI_Datatype m;
    size_t b;
    bool me;
};

/* the checks every collective makes (root -1: none; total: the elements of the whole
 * buffer), filling *k */
ncclResult_t check(const char *op, ncclComm_t c, size_t n, size_t total, ncclDataType_t t,
                   int root, call *k)
{
    if (!c) {
        fprintf(stderr, "emu: nccl %s: no communicator\n", op);
        return ncclInvalidArgument;
    }
    if (root < -1 || root >= c->size) {
        fprintf(stderr, "emu: nccl %s: root %d of %d ranks\n", op, root, c->size);
        return ncclInvalidArgument;
    }
    k->b = n * tsize(t);
    k->me = c->rank == root;
    if (!mpi_type(t, &k->m)) {
        fprintf(stderr, "emu: nccl %s: only float32 and float64 are emulated\n", op);
        return ncclInvalidArgument;
    }
    if (total > INT_MAX) {
        fprintf(stderr, "emu: nccl %s: %zu elements (MPI counts are int)\n", op, total);
        return ncclInvalidArgument;
    }
    if (c->mc != MPI_COMM_NULL && !mpi_up()) {
        fprintf(stderr, "emu: nccl %s: MPI is finalized\n", op);
        return ncclSystemError;
    }
    return ncclSuccess;
}

}  // namespace

extern "C" {

ncclResult_t ncclGetVersion(int *version)
{
    if (!version) return ncclInvalidArgument;
    *version = NCCL_VERSION_CODE;
    return ncclSuccess;
}

ncclResult_t ncclGetUniqueId(ncclUniqueId *id)
{
    if (!id) return ncclInvalidArgument;
    memset(id, 0, sizeof *id);
    unsigned long long v[3] = {(unsigned long long)getpid(), (unsigned long long)time(NULL),
                               (unsigned long long)clock()};
    memcpy(id->internal, v, sizeof v);
    return ncclSuccess;
}

ncclResult_t ncclCommInitRank(ncclComm_t *comm, int nranks, ncclUniqueId id, int rank)
{
    if (!comm || nranks < 1 || rank < 0 || rank >= nranks) return ncclInvalidArgument;
    *comm = NULL;
    if (!mpi_up()) {
        fprintf(stderr, "emu: nccl: ncclCommInitRank needs MPI (run under mpirun)\n");
        return ncclSystemError;
    }
    /* the ranks holding the same id form the communicator, ordered by rank */
    unsigned h = 2166136261u;
    for (size_t i = 0; i < sizeof id.internal; i++) h = (h ^ (unsigned char)id.internal[i]) * 16777619u;
    ncclComm *c = (ncclComm *)calloc(1, sizeof *c);
    if (!c) return ncclSystemError;
    if (MPI_Comm_split(MPI_COMM_WORLD, (int)(h & 0x7fffffff), rank, &c->mc) != MPI_SUCCESS) {
        free(c);
        return ncclSystemError;
    }
    MPI_Comm_rank(c->mc, &c->rank);
    MPI_Comm_size(c->mc, &c->size);
    if (c->size != nranks || c->rank != rank) {
        fprintf(stderr, "emu: nccl: ncclCommInitRank: rank %d of %d, but %d of %d hold the id\n",
                rank, nranks, c->rank, c->size);
        MPI_Comm_free(&c->mc);
        free(c);
        return ncclInvalidUsage;
    }
    *comm = c;
    return ncclSuccess;
}

ncclResult_t ncclCommInitAll(ncclComm_t *comm, int ndev, const int *devlist)
{
    (void)devlist;
    if (!comm || ndev != 1) {
        fprintf(stderr, "emu: nccl: ncclCommInitAll emulates one device only\n");
        return ncclInvalidArgument;
    }
    ncclComm *c = (ncclComm *)calloc(1, sizeof *c);
    if (!c) return ncclSystemError;
    c->mc = MPI_COMM_NULL;
    c->rank = 0;
    c->size = 1;
    *comm = c;
    return ncclSuccess;
}

static ncclResult_t release(ncclComm_t comm, int collective)
{
    if (!comm) return ncclInvalidArgument;
    if (comm->mc != MPI_COMM_NULL && mpi_up()) {
        if (collective) MPI_Comm_free(&comm->mc);   /* an abort must not wait for peers */
    }
    free(comm);
    return ncclSuccess;
}

ncclResult_t ncclCommDestroy(ncclComm_t comm)
{
    cudaDeviceSynchronize();   /* queued collectives on the communicator first */
    return release(comm, 1);
}

ncclResult_t ncclCommAbort(ncclComm_t comm)
{
    return release(comm, 0);
}

ncclResult_t ncclCommGetAsyncError(ncclComm_t comm, ncclResult_t *asyncError)
{
    if (!comm || !asyncError) return ncclInvalidArgument;
    *asyncError = ncclSuccess;   /* MPI's errors are fatal: none is ever pending */
    return ncclSuccess;
}

const char *ncclGetErrorString(ncclResult_t r)
{
    switch (r) {
    case ncclSuccess: return "no error";
    case ncclUnhandledCudaError: return "unhandled cuda error (emulated)";
    case ncclSystemError: return "unhandled system error (emulated)";
    case ncclInternalError: return "internal error (emulated)";
    case ncclInvalidArgument: return "invalid argument (emulated; see the emu: line above)";
    case ncclInvalidUsage: return "invalid usage (emulated)";
    case ncclRemoteError: return "remote process exited or there was a network error (emulated)";
    case ncclInProgress: return "NCCL operation in progress";
    default: return "unknown result code";
    }
}

ncclResult_t ncclGroupStart(void) { return ncclSuccess; }
ncclResult_t ncclGroupEnd(void) { return ncclSuccess; }

ncclResult_t ncclAllReduce(const void *send, void *recv, size_t n, ncclDataType_t t,
                           ncclRedOp_t op, ncclComm_t c, cudaStream_t s)
{
    call k;
    ncclResult_t r = check("allreduce", c, n, n, t, -1, &k);
    if (r) return r;
    if (!device_mem("allreduce", "send", send, k.b) || !device_mem("allreduce", "recv", recv, k.b))
        return ncclInvalidArgument;
    emu_stream_issue(s, [=] {
        if (c->mc == MPI_COMM_NULL) {
            if (send != recv) memmove(recv, send, k.b);
        } else {
            MPI_Allreduce(send == recv ? MPI_IN_PLACE : send, recv, (int)n, k.m, mpi_op(op), c->mc);
        }
        if (op == ncclAvg) avg(recv, n, t, c->size);
    });
    return ncclSuccess;
}

ncclResult_t ncclReduce(const void *send, void *recv, size_t n, ncclDataType_t t, ncclRedOp_t op,
                        int root, ncclComm_t c, cudaStream_t s)
{
    call k;
    ncclResult_t r = root < 0 ? ncclInvalidArgument : check("reduce", c, n, n, t, root, &k);
    if (r) return r;
    if (!device_mem("reduce", "send", send, k.b) || (k.me && !device_mem("reduce", "recv", recv, k.b)))
        return ncclInvalidArgument;
    emu_stream_issue(s, [=] {
        if (c->mc == MPI_COMM_NULL) {
            if (send != recv) memmove(recv, send, k.b);
        } else {
            MPI_Reduce(k.me && send == recv ? MPI_IN_PLACE : send, k.me ? recv : NULL, (int)n, k.m,
                       mpi_op(op), root, c->mc);
        }
        if (k.me && op == ncclAvg) avg(recv, n, t, c->size);
    });
    return ncclSuccess;
}

ncclResult_t ncclBroadcast(const void *send, void *recv, size_t n, ncclDataType_t t, int root,
                           ncclComm_t c, cudaStream_t s)
{
    call k;
    ncclResult_t r = root < 0 ? ncclInvalidArgument : check("broadcast", c, n, n, t, root, &k);
    if (r) return r;
    if ((k.me && !device_mem("broadcast", "send", send, k.b)) || !device_mem("broadcast", "recv", recv, k.b))
        return ncclInvalidArgument;
    emu_stream_issue(s, [=] {
        if (k.me && send != recv) memmove(recv, send, k.b);
        if (c->mc != MPI_COMM_NULL) MPI_Bcast(recv, (int)n, k.m, root, c->mc);
    });
    return ncclSuccess;
}

ncclResult_t ncclReduceScatter(const void *send, void *recv, size_t n, ncclDataType_t t,
                               ncclRedOp_t op, ncclComm_t c, cudaStream_t s)
{
    call k;
    ncclResult_t r = check("reducescatter", c, n, n * (c ? (size_t)c->size : 1), t, -1, &k);
    if (r) return r;
    if (!device_mem("reducescatter", "send", send, k.b * c->size) ||
        !device_mem("reducescatter", "recv", recv, k.b))
        return ncclInvalidArgument;
    emu_stream_issue(s, [=] {
        if (c->mc == MPI_COMM_NULL) {
            if (send != recv) memmove(recv, send, k.b);
        } else {
            /* in place when recv is this rank's part of send: reduce from a copy */
            char *tmp = (char *)malloc(k.b * c->size);
            memcpy(tmp, send, k.b * c->size);
            MPI_Reduce_scatter_block(tmp, recv, (int)n, k.m, mpi_op(op), c->mc);
            free(tmp);
        }
        if (op == ncclAvg) avg(recv, n, t, c->size);
    });
    return ncclSuccess;
}

ncclResult_t ncclAllGather(const void *send, void *recv, size_t n, ncclDataType_t t, ncclComm_t c,
                           cudaStream_t s)
{
    call k;
    ncclResult_t r = check("allgather", c, n, n * (c ? (size_t)c->size : 1), t, -1, &k);
    if (r) return r;
    if (!device_mem("allgather", "send", send, k.b) || !device_mem("allgather", "recv", recv, k.b * c->size))
        return ncclInvalidArgument;
    emu_stream_issue(s, [=] {
        char *mine = (char *)recv + k.b * c->rank;
        if (c->mc == MPI_COMM_NULL) {
            if (send != mine) memmove(mine, send, k.b);
        } else {
            MPI_Allgather(send == mine ? MPI_IN_PLACE : send, (int)n, k.m, recv, (int)n, k.m, c->mc);
        }
    });
    return ncclSuccess;
}

}  // extern "C"
