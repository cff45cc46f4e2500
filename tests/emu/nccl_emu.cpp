/* nccl_emu.cpp — NCCL's collectives for the emulated build (tests/emu/include/nccl.h), so
 * that common/dist_nccl.c and the device-memory paths of common/train_dist.c run on the
 * CPU, each process one rank with its emulated device:
 * - under mpirun the collectives are MPI's over the (host-backed) device buffers;
 * - without MPI (ranks from RANK/WORLD_SIZE, the unique id handed on by --dist-init
 *   file:|tcp://, as NCCL's own bootstrap would be used) the ranks holding one id meet in
 *   a shared mapping of a file named by it (shm below): chunks of every rank's buffer are
 *   copied in, reduced in rank order, copied out, between barriers;
 * - a communicator of one rank (ncclCommInitAll with one device) copies.
 *
 * As NCCL with NCCL_CHECK_POINTERS=1, every buffer must be device memory (cudaMalloc):
 * anything else fails with ncclInvalidArgument and a message, where real NCCL would fault
 * or read garbage.  A collective runs in its stream's order (emu_stream_issue), after the
 * work the stream waits for.  Groups (ncclGroupStart/End) run their operations one by one,
 * which is the same as long as every rank issues the same sequence (MPI's rule too).
 */
#include <nccl.h>
#include <cuda_runtime.h>

#include <atomic>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

/* the C API only: no C++ bindings to link */
#define OMPI_SKIP_MPICXX 1
#define MPICH_SKIP_MPICXX 1
#include <mpi.h>

struct shm_seg;

struct ncclComm {
    MPI_Comm mc;     /* MPI_COMM_NULL: no MPI (one rank, or shm) */
    shm_seg *shm;    /* the shared segment of ranks launched without MPI; NULL otherwise */
    size_t shm_len;  /* its mapped length */
    uint64_t gen;    /* barriers this rank has passed on shm */
    int rank, size;
    std::atomic<int> aborted;   /* ncclCommAbort in this process: its waits give up */
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

/* ---- shm: the ranks of one unique id, launched without MPI ----
 * One shared segment per communicator, a file named by the id mapped by every rank: a
 * header, then a slot of SHM_SLOT bytes per rank.  Rank 0 creates it; the others open it
 * once it has its size; when all have joined rank 0 unlinks the name (the mappings
 * stay), so nothing is left behind after the job.  A collective goes chunk by chunk: every rank copies
 * its part into its slot, a barrier, every rank reads what it needs (reductions in rank
 * order), a barrier before the slots are written again.  A rank that dies or stops
 * leaves the others waiting in a barrier, as NCCL would: llmkit's watchdog ends them. */
constexpr char ID_TAG[8] = {'l', 'l', 'm', 'e', 'm', 'u', '1', 0};
constexpr uint64_t SHM_MAGIC = 0x6e63636c656d7531ULL;
constexpr size_t SHM_SLOT = (size_t)1 << 20;
constexpr size_t SHM_HDR = 256;
constexpr double SHM_JOIN_S = 600;   /* how long ranks wait for each other in init */

}  // namespace

struct shm_seg {
    std::atomic<uint64_t> ready;     /* SHM_MAGIC once rank 0 has set the segment up */
    std::atomic<int> joined;         /* ranks attached */
    std::atomic<uint64_t> arrived;   /* barrier arrivals, ever */
    std::atomic<int> spare;          /* (unused: an abort is a process's own, ncclComm) */
    int size;
};
static_assert(sizeof(shm_seg) <= SHM_HDR, "shm header");
static_assert(std::atomic<uint64_t>::is_always_lock_free, "process-shared atomics");

namespace {

double mono_now()
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

void nap(long ns)
{
    struct timespec ts = {0, ns};
    nanosleep(&ts, NULL);
}

/* the segment's file: in $TMPDIR (else /tmp), so that a job that dies before every rank
 * joined leaves it where its test cleans up */
void shm_name(const ncclUniqueId &id, char *name, size_t len)
{
    uint64_t tok;
    memcpy(&tok, id.internal + sizeof ID_TAG, sizeof tok);
    const char *dir = getenv("TMPDIR");
    snprintf(name, len, "%s/llm-emu-nccl-%016llx", dir && *dir ? dir : "/tmp",
             (unsigned long long)tok);
}

char *slot(ncclComm *c, int r)
{
    return (char *)c->shm + SHM_HDR + (size_t)r * SHM_SLOT;
}

/* every rank here before any goes on; false when this process aborted the communicator.
 * Another rank's abort does not end the wait: as with NCCL, this rank waits in its
 * collective until its own watchdog aborts it (--dist-timeout). */
bool shm_barrier(ncclComm *c)
{
    shm_seg *h = c->shm;
    uint64_t target = (c->gen + 1) * (uint64_t)c->size;
    h->arrived.fetch_add(1, std::memory_order_acq_rel);
    for (unsigned spin = 0; h->arrived.load(std::memory_order_acquire) < target; spin++) {
        if (c->aborted.load(std::memory_order_relaxed)) return false;
        if (spin > 200) nap(20 * 1000);
    }
    c->gen++;
    return true;
}

ncclResult_t shm_join(ncclComm *c, const ncclUniqueId &id, int nranks, int rank)
{
    if (memcmp(id.internal, ID_TAG, sizeof ID_TAG)) {
        fprintf(stderr, "emu: nccl: ncclCommInitRank: the id was not made by ncclGetUniqueId\n");
        return ncclInvalidArgument;
    }
    char name[4200];
    shm_name(id, name, sizeof name);
    size_t len = SHM_HDR + (size_t)nranks * SHM_SLOT;
    double t0 = mono_now();
    int fd = -1;
    if (rank == 0) {
        fd = open(name, O_CREAT | O_EXCL | O_RDWR, 0600);
        if (fd < 0 || ftruncate(fd, (off_t)len)) {
            fprintf(stderr, "emu: nccl: cannot create %s: %s\n", name, strerror(errno));
            if (fd >= 0) unlink(name), close(fd);
            return ncclSystemError;
        }
    } else {
        struct stat sb;
        while ((fd = open(name, O_RDWR)) < 0 || fstat(fd, &sb) || (size_t)sb.st_size < len) {
            if (fd >= 0) close(fd);
            if (mono_now() - t0 > SHM_JOIN_S) {
                fprintf(stderr, "emu: nccl: rank %d: no segment %s from rank 0 after %.0f s\n",
                        rank, name, SHM_JOIN_S);
                return ncclSystemError;
            }
            nap(10 * 1000 * 1000);
        }
    }
    void *m = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    close(fd);
    if (m == MAP_FAILED) {
        fprintf(stderr, "emu: nccl: cannot map %s: %s\n", name, strerror(errno));
        if (rank == 0) unlink(name);
        return ncclSystemError;
    }
    shm_seg *h = (shm_seg *)m;
    if (rank == 0) {
        h->size = nranks;
        h->joined.store(1);
        h->ready.store(SHM_MAGIC, std::memory_order_release);
    } else {
        while (h->ready.load(std::memory_order_acquire) != SHM_MAGIC) {
            if (mono_now() - t0 > SHM_JOIN_S) break;
            nap(1000 * 1000);
        }
        if (h->ready.load(std::memory_order_acquire) != SHM_MAGIC || h->size != nranks) {
            fprintf(stderr, "emu: nccl: rank %d: segment %s is for %d ranks, not %d\n", rank,
                    name, h->size, nranks);
            munmap(m, len);
            return ncclInvalidUsage;
        }
        h->joined.fetch_add(1);
    }
    /* NCCL's init is collective: back when every rank has joined */
    while (h->joined.load() < nranks) {
        if (mono_now() - t0 > SHM_JOIN_S) {
            fprintf(stderr, "emu: nccl: rank %d: %d of %d ranks joined after %.0f s\n", rank,
                    h->joined.load(), nranks, SHM_JOIN_S);
            if (rank == 0) unlink(name);
            munmap(m, len);
            return ncclSystemError;
        }
        nap(1000 * 1000);
    }
    if (rank == 0) unlink(name);
    c->shm = h;
    c->shm_len = len;
    c->rank = rank;
    c->size = nranks;
    return ncclSuccess;
}

template <typename T>
void reduce_slots(ncclComm *c, T *dst, size_t off, size_t m, ncclRedOp_t op)
{
    for (size_t i = 0; i < m; i++) {
        T a = ((const T *)slot(c, 0))[off + i];
        for (int r = 1; r < c->size; r++) {
            T b = ((const T *)slot(c, r))[off + i];
            a = op == ncclProd ? a * b : op == ncclMax ? (b > a ? b : a)
                : op == ncclMin ? (b < a ? b : a) : a + b;
        }
        dst[i] = a;
    }
}

void reduce_slots(ncclComm *c, void *dst, size_t off, size_t m, ncclDataType_t t, ncclRedOp_t op)
{
    if (t == ncclFloat64) reduce_slots(c, (double *)dst, off, m, op);
    else reduce_slots(c, (float *)dst, off, m, op);
}

/* allreduce (root -1) or reduce to root, n elements */
void shm_reduce(ncclComm *c, const void *send, void *recv, size_t n, ncclDataType_t t,
                ncclRedOp_t op, int root)
{
    size_t ts = tsize(t), per = SHM_SLOT / ts;
    for (size_t i = 0; i < n; i += per) {
        size_t m = n - i < per ? n - i : per;
        memcpy(slot(c, c->rank), (const char *)send + i * ts, m * ts);
        if (!shm_barrier(c)) return;
        if (root < 0 || root == c->rank) reduce_slots(c, (char *)recv + i * ts, 0, m, t, op);
        if (!shm_barrier(c)) return;
    }
}

void shm_broadcast(ncclComm *c, const void *send, void *recv, size_t n, ncclDataType_t t, int root)
{
    size_t ts = tsize(t), per = SHM_SLOT / ts;
    for (size_t i = 0; i < n; i += per) {
        size_t m = n - i < per ? n - i : per;
        if (c->rank == root) memcpy(slot(c, root), (const char *)send + i * ts, m * ts);
        if (!shm_barrier(c)) return;
        if (c->rank != root) memcpy((char *)recv + i * ts, slot(c, root), m * ts);
        if (!shm_barrier(c)) return;
    }
    if (c->rank == root && send != recv) memmove(recv, send, n * ts);
}

/* n elements per rank: rank r gets the reduction of every rank's send[r n, (r+1) n) */
void shm_reduce_scatter(ncclComm *c, const void *send, void *recv, size_t n, ncclDataType_t t,
                        ncclRedOp_t op)
{
    size_t ts = tsize(t), per = SHM_SLOT / ts / (size_t)c->size;
    for (size_t i = 0; i < n; i += per) {
        size_t m = n - i < per ? n - i : per;
        for (int d = 0; d < c->size; d++)
            memcpy(slot(c, c->rank) + (size_t)d * m * ts,
                   (const char *)send + ((size_t)d * n + i) * ts, m * ts);
        if (!shm_barrier(c)) return;
        reduce_slots(c, (char *)recv + i * ts, (size_t)c->rank * m, m, t, op);
        if (!shm_barrier(c)) return;
    }
}

void shm_allgather(ncclComm *c, const void *send, void *recv, size_t n, ncclDataType_t t)
{
    size_t ts = tsize(t), per = SHM_SLOT / ts;
    for (size_t i = 0; i < n; i += per) {
        size_t m = n - i < per ? n - i : per;
        memcpy(slot(c, c->rank), (const char *)send + i * ts, m * ts);
        if (!shm_barrier(c)) return;
        for (int r = 0; r < c->size; r++)
            memcpy((char *)recv + ((size_t)r * n + i) * ts, slot(c, r), m * ts);
        if (!shm_barrier(c)) return;
    }
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
    uint64_t tok = 0;
    FILE *f = fopen("/dev/urandom", "rb");
    if (!f || fread(&tok, sizeof tok, 1, f) != 1)
        tok = ((uint64_t)getpid() << 32) ^ (uint64_t)time(NULL) ^ (uint64_t)clock();
    if (f) fclose(f);
    memcpy(id->internal, ID_TAG, sizeof ID_TAG);
    memcpy(id->internal + sizeof ID_TAG, &tok, sizeof tok);
    return ncclSuccess;
}

ncclResult_t ncclCommInitRank(ncclComm_t *comm, int nranks, ncclUniqueId id, int rank)
{
    if (!comm || nranks < 1 || rank < 0 || rank >= nranks) return ncclInvalidArgument;
    *comm = NULL;
    ncclComm *c = (ncclComm *)calloc(1, sizeof *c);
    if (!c) return ncclSystemError;
    c->mc = MPI_COMM_NULL;
    if (!mpi_up()) {   /* launched without MPI: the ranks meet in shared memory */
        ncclResult_t r = nranks == 1 ? ncclSuccess : shm_join(c, id, nranks, rank);
        c->size = nranks;
        if (r) free(c);
        else *comm = c;
        return r;
    }
    /* the ranks holding the same id form the communicator, ordered by rank */
    unsigned h = 2166136261u;
    for (size_t i = 0; i < sizeof id.internal; i++) h = (h ^ (unsigned char)id.internal[i]) * 16777619u;
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
    if (comm->shm && !collective) {
        /* another thread may still wait in a barrier on this segment and communicator:
         * it gives up (aborted), and both stay mapped until the process ends */
        comm->aborted.store(1);
        return ncclSuccess;
    }
    if (comm->shm) munmap(comm->shm, comm->shm_len);
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
        if (c->shm) {
            shm_reduce(c, send, recv, n, t, op, -1);
        } else if (c->mc == MPI_COMM_NULL) {
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
        if (c->shm) {
            shm_reduce(c, send, recv, n, t, op, root);
        } else if (c->mc == MPI_COMM_NULL) {
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
        if (c->shm) {
            shm_broadcast(c, send, recv, n, t, root);
            return;
        }
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
        if (c->shm) {
            shm_reduce_scatter(c, send, recv, n, t, op);
        } else if (c->mc == MPI_COMM_NULL) {
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
        if (c->shm) {
            shm_allgather(c, send, recv, n, t);
        } else if (c->mc == MPI_COMM_NULL) {
            if (send != mine) memmove(mine, send, k.b);
        } else {
            MPI_Allgather(send == mine ? MPI_IN_PLACE : send, (int)n, k.m, recv, (int)n, k.m, c->mc);
        }
    });
    return ncclSuccess;
}

}  // extern "C"
