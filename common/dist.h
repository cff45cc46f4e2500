/* dist.h — ranks and collectives for data-parallel training: a communicator with rank,
 * world size and local rank, and the collectives training needs (all-reduce,
 * reduce-scatter (also in place), all-gather, broadcast, barrier).
 *
 * Implementations (chosen by llm_dist_init):
 *   single  one process (world 1): every collective is a no-op (or a copy)
 *   mpi     MPI on host memory (CPU runs; built when MPI=1, see the Makefile); ranks come
 *           from the MPI launcher (mpirun, or srun --mpi=pmix)
 *   nccl    NCCL on device memory (GPU runs; built when NCCL=1 with CUDA=1); ranks from
 *           MPI when launched by it, else from SLURM_PROCID/SLURM_NTASKS/SLURM_LOCALID or
 *           RANK/WORLD_SIZE/LOCAL_RANK, with NCCL's unique id exchanged through
 *           --dist-init file:PATH or tcp://HOST:PORT (rank 0 writes / serves it).  The
 *           blocking collectives also take host memory (the small agreements: a step,
 *           a loss), copied through a device buffer; llm_dist_iallreduce does not.
 * Shards: the collectives that split a buffer of n elements give rank r the elements
 * [n*r/world, n*(r+1)/world) (llm_dist_shard), so shards differ by at most one element
 * and any n works on any world size.
 * Failure: every collective runs under a watchdog; one that has not completed after
 * timeout_s seconds (a rank died or hangs) ends the process with exit status 70 after a
 * message on stderr (NCCL: the communicator is aborted first).  This is the one place
 * a library function ends the process: a blocked MPI collective cannot be cancelled.
 * Stopping: with opts.stop, a stop request (a signal handler setting *stop) ends the
 * start-up waits that could last up to the timeout: the --dist-init exchange returns
 * LLM_EINTR at once, and NCCL's setup (ncclCommInitRank, which cannot be returned from)
 * ends the process with status 0 after a message on stderr.  Either way rank 0 first
 * removes the file: id it wrote.  Collectives themselves are never cut short by it.
 */
#ifndef LLM_DIST_H
#define LLM_DIST_H

#include <signal.h>
#include <stddef.h>

#include "common/log.h"
#include "common/status.h"

typedef enum { LLM_DIST_SUM = 0, LLM_DIST_AVG = 1, LLM_DIST_MAX = 2 } llm_dist_op;
typedef enum { LLM_DIST_F32 = 0, LLM_DIST_F64 = 1 } llm_dist_type;

typedef struct {
    const char *init;     /* NULL/"": from the launcher; "file:PATH" | "tcp://HOST:PORT" */
    double timeout_s;     /* collective watchdog (<= 0: 600 s) */
    int device;           /* 1: buffers are device memory (NCCL); 0: host memory */
    const llm_log *log;   /* diagnostics (NULL: stderr) */
    /* non-zero: a stop request (a signal) ends the start-up waits (above); NULL: none */
    const volatile sig_atomic_t *stop;
} llm_dist_opts;

typedef struct llm_dist llm_dist;

/* Create the communicator: MPI when the process was started by an MPI launcher (and MPI
 * is built in), NCCL when o->device and NCCL is built in, else a single process.  A
 * launch with several ranks that cannot be served (no MPI built in, or world > 1 from
 * the environment on the CPU without MPI) is LLM_EUSAGE naming what is missing.
 * Errors: LLM_EUSAGE (bad --dist-init, inconsistent rank variables), LLM_EIO (the id
 * exchange failed or timed out), LLM_ENODEV (NCCL/MPI initialisation failed), LLM_EINTR
 * (o->stop was set while waiting for the id exchange; the message says what for, e.g.
 * "waiting for rank 0's id in 'PATH'"). */
int  llm_dist_init(llm_dist **out, const llm_dist_opts *o, llm_status *st);
/* Finalize (MPI_Finalize / ncclCommDestroy) and free; NULL is fine. */
void llm_dist_free(llm_dist *d);

/* For main() after a fatal error on this rank with world > 1: end every rank of the job
 * now with exit status code (MPI_Abort / ncclCommAbort then exit) instead of leaving
 * the others waiting for the watchdog.  Returns only for a single process. */
void llm_dist_abort(llm_dist *d, int code);

int llm_dist_rank(const llm_dist *d);
int llm_dist_world(const llm_dist *d);
int llm_dist_local_rank(const llm_dist *d);
/* "single", "mpi" or "nccl". */
const char *llm_dist_kind(const llm_dist *d);
/* 1 when the collectives take device memory (nccl). */
int llm_dist_on_device(const llm_dist *d);

/* The shard [*lo, *hi) of n elements that rank holds among world ranks. */
void llm_dist_shard(size_t n, int world, int rank, size_t *lo, size_t *hi);

/* In place over buf (n elements of type): SUM, AVG (sum / world) or MAX. */
int llm_dist_allreduce(llm_dist *d, void *buf, size_t n, llm_dist_type type, llm_dist_op op,
                       llm_status *st);
/* send holds n elements on every rank; recv gets this rank's shard of the reduction
 * (hi - lo elements of llm_dist_shard).  send and recv must not overlap. */
int llm_dist_reduce_scatter(llm_dist *d, const void *send, void *recv, size_t n,
                            llm_dist_type type, llm_dist_op op, llm_status *st);
/* Reduce-scatter in place: buf holds n elements on every rank; afterwards buf[lo, hi) (this
 * rank's llm_dist_shard) holds the reduction of that shard and the rest of buf is
 * undefined.  Needs no second buffer (ZeRO: the gradient buffer receives its own shard). */
int llm_dist_reduce_scatter_inplace(llm_dist *d, void *buf, size_t n, llm_dist_type type,
                                    llm_dist_op op, llm_status *st);
/* In place: buf holds n elements of which each rank provides its shard; afterwards every
 * rank holds all n. */
int llm_dist_allgather(llm_dist *d, void *buf, size_t n, llm_dist_type type, llm_status *st);
/* Copy root's buf (n elements) to every rank. */
int llm_dist_broadcast(llm_dist *d, void *buf, size_t n, llm_dist_type type, int root,
                       llm_status *st);
int llm_dist_barrier(llm_dist *d, llm_status *st);

/* ---- the NCCL communicator for benchmarks (llm-bench's collectives; issue 9) ----
 * Additions only: nothing above changes.  Defined in dist_nccl.c; in a build without
 * NCCL they return LLM_ENODEV / -1. */

/* Make d a one-rank NCCL communicator when it has one rank and is not one already (from
 * llm_dist_init with device 1: "single", or "mpi" under mpirun -np 1), so that the NCCL
 * path runs even alone: the GPU is the one llm_dist_init's NCCL would pick (local rank
 * modulo the visible GPUs); afterwards d is "nccl" with device memory.  0 when d is
 * already nccl; LLM_EUSAGE for more than one rank that is not nccl; LLM_ENODEV without a
 * GPU or NCCL; LLM_EIO when NCCL fails. */
int llm_dist_nccl_self(llm_dist *d, llm_status *st);

/* The ncclComm_t and cudaStream_t of an nccl d (as void *; the stream is where its
 * collectives run): 0, or -1 when d is not nccl.  d keeps ownership. */
int llm_dist_nccl_handles(llm_dist *d, void **comm, void **stream);

/* Wait for the work queued on d's stream as the collectives do: polling NCCL's async
 * error, and past d's timeout aborting the communicator (LLM_EIO).  what names the wait
 * in messages. */
int llm_dist_nccl_wait(llm_dist *d, const char *what, llm_status *st);

/* ---- non-blocking all-reduce (overlap with the backward pass: common/train_dist.c) ----
 * llm_dist_iallreduce starts an all-reduce in place over buf and returns at once with a
 * request in *req (NULL when there is nothing to wait for: one rank, or n == 0); buf must
 * not be read or written until llm_dist_wait(req) has returned.  Every rank starts the
 * same requests in the same order (and its blocking collectives in the same order
 * relative to them).
 *   mpi   MPI_Iallreduce on host memory.  Open MPI moves a non-blocking collective on
 *         only inside MPI calls (no progress thread here): call llm_dist_test on the
 *         outstanding requests now and then (train_dist.c does, at each gradient range
 *         the backward reports), else the whole transfer happens in llm_dist_wait.
 *   nccl  device memory: ncclAllReduce on the communicator's stream, ordered after the
 *         work enqueued so far on the compute stream (llm_dist_set_stream: an event
 *         recorded there, waited for on the communicator's stream), so the host does not
 *         wait; without a compute stream the device is synchronised first.
 * llm_dist_wait blocks until req is complete, applies AVG, and frees req (NULL is fine);
 * it runs under the collective watchdog like every blocking collective (a peer that died
 * or hangs ends the process with exit status 70 after timeout_s; NCCL: the communicator
 * is aborted and LLM_EIO returned).  The time a request spends outstanding while the
 * caller computes does not count against the timeout.  llm_dist_test never blocks: it
 * lets req progress and sets *done to 1 when it is complete (it still needs a wait).
 * After an error on one rank the job is to be ended (llm_dist_abort); outstanding
 * requests are not cancelled. */
typedef struct llm_dist_req llm_dist_req;
int llm_dist_iallreduce(llm_dist *d, void *buf, size_t n, llm_dist_type type, llm_dist_op op,
                        llm_dist_req **req, llm_status *st);
int llm_dist_test(llm_dist *d, llm_dist_req *req, int *done, llm_status *st);
int llm_dist_wait(llm_dist *d, llm_dist_req *req, llm_status *st);
/* NCCL: the CUDA stream (a cudaStream_t) whose work the non-blocking collectives wait
 * for (the backend's compute stream: llm_backend_cuda_stream); NULL: none.  Ignored by
 * the other implementations. */
void llm_dist_set_stream(llm_dist *d, void *stream);

#endif
