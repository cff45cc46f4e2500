/* dist_impl.h — what dist.c shares with the MPI and NCCL implementations (internal). */
#ifndef LLM_DIST_IMPL_H
#define LLM_DIST_IMPL_H

#include "common/clock.h"

#include <pthread.h>

#include "common/dist.h"

typedef struct {
    const char *name;
    int (*allreduce)(llm_dist *d, void *buf, size_t n, llm_dist_type t, llm_dist_op op,
                     llm_status *st);
    int (*reduce_scatter)(llm_dist *d, const void *send, void *recv, size_t n, llm_dist_type t,
                          llm_dist_op op, llm_status *st);
    int (*allgather)(llm_dist *d, void *buf, size_t n, llm_dist_type t, llm_status *st);
    int (*broadcast)(llm_dist *d, void *buf, size_t n, llm_dist_type t, int root,
                     llm_status *st);
    int (*barrier)(llm_dist *d, llm_status *st);
    void (*abort)(llm_dist *d);       /* from the watchdog thread; may be NULL */
    void (*abort_job)(llm_dist *d, int code); /* end every rank (main thread); may be NULL */
    void (*fini)(llm_dist *d);
    /* buf holds n elements; afterwards buf[lo, hi) (this rank's shard) is reduced */
    int (*reduce_scatter_inplace)(llm_dist *d, void *buf, size_t n, llm_dist_type t,
                                  llm_dist_op op, llm_status *st);
    /* non-blocking all-reduce (dist.h); NULL: run the blocking one inside iallreduce */
    int (*iallreduce)(llm_dist *d, llm_dist_req *r, llm_status *st);
    int (*test)(llm_dist *d, llm_dist_req *r, int *done, llm_status *st);
    int (*wait)(llm_dist *d, llm_dist_req *r, llm_status *st);   /* also frees r->impl */
} llm_dist_ops;

struct llm_dist {
    const llm_dist_ops *ops;
    int rank, world, local_rank, device;
    double timeout_s;
    const llm_log *log;
    void *impl;                       /* the implementation's state */
    /* watchdog */
    pthread_t wd;
    pthread_mutex_t mu;
    pthread_cond_t cv;
    int wd_running, wd_quit;
    void *stream;                     /* llm_dist_set_stream (NCCL); NULL */
    double busy_since;                /* > 0: inside a collective since (monotonic s) */
    const char *busy_what;
    int busy_setup;                   /* the wait is NCCL's setup: a stop request ends it */
    const volatile sig_atomic_t *stop; /* llm_dist_opts.stop; NULL: none */
    /* the --dist-init spec while this rank 0's file: id waits for the others (NULL
     * otherwise): removed (llm_dist__exchange_done) when the watchdog ends the process */
    const char *xchg_pending;
};

/* A non-blocking all-reduce in flight (dist.h). */
struct llm_dist_req {
    void *buf;
    size_t n;
    llm_dist_type t;
    llm_dist_op op;
    void *impl;                       /* the implementation's handles */
};

size_t llm_dist__tsize(llm_dist_type t);
/* Inside what (a collective, or the communicator's setup) from now on; NULL: done.  The
 * watchdog (when it runs: world > 1) ends the process with exit 70 when one takes longer
 * than timeout_s. */
void llm_dist__busy(llm_dist *d, const char *what);
/* The same for NCCL's setup, which waits for every rank: a stop request (d->stop) during
 * it also ends the process, with status 0 ("stopped on a signal during the start-up"). */
void llm_dist__busy_setup(llm_dist *d, const char *what);

#ifdef LLM_MPI
/* 1 when the environment says an MPI launcher started this process. */
int llm_dist__mpi_launched(void);
int llm_dist__mpi_init(llm_dist *d, llm_status *st);
/* Exchange bytes from rank 0 to all over MPI (for NCCL's unique id); 0 or an error. */
int llm_dist__mpi_bcast_bytes(void *buf, size_t n, llm_status *st);
/* NCCL took over: free the MPI state but keep MPI initialized (finalized by ..._fini). */
void llm_dist__mpi_detach(llm_dist *d);
void llm_dist__mpi_fini(void);
#endif
#ifdef LLM_NCCL
int llm_dist__nccl_init(llm_dist *d, const char *init, int have_mpi, llm_status *st);
#endif
/* --dist-init exchange of a blob from rank 0 (file:PATH or tcp://HOST:PORT).  stop (may
 * be NULL): when *stop becomes non-zero the waits end within a fraction of a second with
 * LLM_EINTR, the message saying what was waited for ("waiting for ..."); rank 0 leaves
 * no file: id behind then. */
int llm_dist__exchange(const char *init, int rank, int world, void *blob, size_t n,
                       double timeout_s, const volatile sig_atomic_t *stop, llm_status *st);
/* Once every rank holds the blob (NCCL's setup completed), or when the setup failed or
 * was stopped: rank 0 removes a file: blob, so that it is not left for the next job to
 * trip on, and disarms it (llm_sigstop_unlink_on_exit: from its write until here a
 * signal that ends the process at once removes it).  Nothing for tcp://.  Only unlink(2)
 * and a store: the watchdog thread calls it too. */
void llm_dist__exchange_done(const char *init, int rank);

#endif
