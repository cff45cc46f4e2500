/* dist.c — the communicator: rank discovery, the collective watchdog, the single-process
 * implementation, and dispatch to MPI / NCCL (see dist.h). */
#include "common/dist_impl.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

size_t llm_dist__tsize(llm_dist_type t)
{
    return t == LLM_DIST_F64 ? 8 : 4;
}

void llm_dist_shard(size_t n, int world, int rank, size_t *lo, size_t *hi)
{
    /* 128-bit products: n * world must not overflow for large n */
    *lo = (size_t)((unsigned __int128)n * (unsigned)rank / (unsigned)world);
    *hi = (size_t)((unsigned __int128)n * (unsigned)(rank + 1) / (unsigned)world);
}

/* ---- single process ---- */

static int s_allreduce(llm_dist *d, void *b, size_t n, llm_dist_type t, llm_dist_op op,
                       llm_status *st)
{
    (void)d, (void)b, (void)n, (void)t, (void)op, (void)st;
    return 0;
}
static int s_reduce_scatter(llm_dist *d, const void *s, void *r, size_t n, llm_dist_type t,
                            llm_dist_op op, llm_status *st)
{
    (void)op, (void)st;
    if (d->device)
        return llm_err(st, LLM_ESOFTWARE, "dist: single-process reduce-scatter on device memory");
    memcpy(r, s, n * llm_dist__tsize(t));
    return 0;
}
static int s_reduce_scatter_inplace(llm_dist *d, void *b, size_t n, llm_dist_type t,
                                    llm_dist_op op, llm_status *st)
{
    (void)d, (void)b, (void)n, (void)t, (void)op, (void)st;
    return 0;   /* one rank: its shard is the whole buffer, already reduced */
}
static int s_allgather(llm_dist *d, void *b, size_t n, llm_dist_type t, llm_status *st)
{
    (void)d, (void)b, (void)n, (void)t, (void)st;
    return 0;
}
static int s_broadcast(llm_dist *d, void *b, size_t n, llm_dist_type t, int root,
                       llm_status *st)
{
    (void)d, (void)b, (void)n, (void)t, (void)root, (void)st;
    return 0;
}
static int s_barrier(llm_dist *d, llm_status *st)
{
    (void)d, (void)st;
    return 0;
}
static const llm_dist_ops single_ops = {"single", s_allreduce, s_reduce_scatter, s_allgather,
                                        s_broadcast, s_barrier, NULL, NULL, NULL,
                                        s_reduce_scatter_inplace, NULL, NULL, NULL};

/* ---- watchdog ---- */

static void *watchdog(void *arg)
{
    llm_dist *d = arg;
    pthread_mutex_lock(&d->mu);
    while (!d->wd_quit) {
        struct timespec ts;
        clock_gettime(CLOCK_REALTIME, &ts);
        ts.tv_nsec += 200 * 1000000L;  /* poll 5 times a second: cheap, and precise enough */
        if (ts.tv_nsec >= 1000000000L) {
            ts.tv_sec++;
            ts.tv_nsec -= 1000000000L;
        }
        pthread_cond_timedwait(&d->cv, &d->mu, &ts);
        if (d->busy_since > 0 && d->busy_setup && d->stop && *d->stop) {
            /* NCCL's setup cannot be returned from either: a signal ends the start here */
            if (d->xchg_pending)
                llm_dist__exchange_done(d->xchg_pending, d->rank);
            llm_info(d->log, "stopped on a signal during the start-up, waiting in %s: "
                     "nothing written", d->busy_what);
            fflush(stderr);
            _exit(0);
        }
        if (d->busy_since > 0 && llm_now_s() - d->busy_since > d->timeout_s) {
            fprintf(stderr, "llm: rank %d/%d: collective '%s' did not complete within %.0f s "
                    "(--dist-timeout): a rank died or hangs; aborting\n", d->rank, d->world,
                    d->busy_what, d->timeout_s);
            fflush(stderr);
            if (d->xchg_pending)
                llm_dist__exchange_done(d->xchg_pending, d->rank);
            if (d->ops->abort)
                d->ops->abort(d);
            /* a blocked collective cannot be returned from: end the process (exit 70) */
            _exit(70);
        }
    }
    pthread_mutex_unlock(&d->mu);
    return NULL;
}

static void set_busy(llm_dist *d, const char *what, int setup)
{
    if (!d->wd_running)
        return;
    pthread_mutex_lock(&d->mu);
    d->busy_since = what ? llm_now_s() : 0;
    d->busy_what = what;
    d->busy_setup = setup;
    pthread_mutex_unlock(&d->mu);
}

void llm_dist__busy(llm_dist *d, const char *what)
{
    set_busy(d, what, 0);
}

void llm_dist__busy_setup(llm_dist *d, const char *what)
{
    set_busy(d, what, 1);
}

/* ---- discovery ---- */

static int env_int(const char *name, int *v)
{
    const char *s = getenv(name);
    if (!s || !*s)
        return 0;
    char *e;
    errno = 0;
    long x = strtol(s, &e, 10);
    if (errno || *e || x < 0 || x > 1000000)
        return -1;
    *v = (int)x;
    return 1;
}

/* Ranks from RANK/WORLD_SIZE/LOCAL_RANK (torchrun style) or Slurm's variables. */
static int env_ranks(llm_dist *d, llm_status *st)
{
    static const char *sets[2][3] = {{"RANK", "WORLD_SIZE", "LOCAL_RANK"},
                                     {"SLURM_PROCID", "SLURM_NTASKS", "SLURM_LOCALID"}};
    for (int i = 0; i < 2; i++) {
        int r = 0, w = 0, l = 0;
        int a = env_int(sets[i][0], &r), b = env_int(sets[i][1], &w), c = env_int(sets[i][2], &l);
        if (a < 0 || b < 0 || c < 0)
            return llm_err(st, LLM_EUSAGE, "dist: bad value in %s/%s/%s", sets[i][0],
                           sets[i][1], sets[i][2]);
        if (!b)
            continue;
        if (!a || w < 1 || r >= w)
            return llm_err(st, LLM_EUSAGE, "dist: %s=%d needs %s in [0, %d)", sets[i][1], w,
                           sets[i][0], w);
        d->rank = r;
        d->world = w;
        d->local_rank = c ? l : 0;
        return 0;
    }
    return 0;
}

/* Ranks an MPI launcher announced (Open MPI, MPICH/Hydra, Intel MPI); 0 when none. */
static int launcher_world(void)
{
    static const char *vars[] = {"OMPI_COMM_WORLD_SIZE", "PMI_SIZE", "MPI_LOCALNRANKS"};
    for (size_t i = 0; i < sizeof vars / sizeof *vars; i++) {
        int w = 0;
        if (env_int(vars[i], &w) > 0)
            return w;
    }
    return 0;
}

int llm_dist_init(llm_dist **out, const llm_dist_opts *o, llm_status *st)
{
    *out = NULL;
    llm_dist *d = calloc(1, sizeof *d);
    if (!d)
        return llm_err(st, LLM_ENOMEM, "out of memory");
    d->ops = &single_ops;
    d->world = 1;
    d->timeout_s = o->timeout_s > 0 ? o->timeout_s : 600;
    d->log = o->log;
    d->stop = o->stop;
    pthread_mutex_init(&d->mu, NULL);
    pthread_cond_init(&d->cv, NULL);
    const char *init = o->init && *o->init ? o->init : NULL;
    int rc = 0, have_mpi = 0;
#ifdef LLM_MPI
    if (llm_dist__mpi_launched()) {
        if ((rc = llm_dist__mpi_init(d, st)))
            goto fail;
        have_mpi = 1;
    }
#endif
    if (!have_mpi && launcher_world() > 1) {
        /* N copies of a single-process run would overwrite each other's checkpoints */
        rc = llm_err(st, LLM_EUSAGE, "dist: started by an MPI launcher with %d ranks, but this "
                     "build has no MPI: rebuild with MPI=1", launcher_world());
        goto fail;
    }
    if (!have_mpi && (rc = env_ranks(d, st)))
        goto fail;
    /* the watchdog before NCCL's setup, which waits for every rank: one that never
     * starts ends the others after --dist-timeout instead of leaving them hanging */
    if (d->world > 1) {
        if (pthread_create(&d->wd, NULL, watchdog, d)) {
            rc = llm_err(st, LLM_ESOFTWARE, "dist: cannot start the watchdog thread");
            goto fail;
        }
        d->wd_running = 1;
    }
    if (o->device && (d->world > 1 || init)) {
#ifdef LLM_NCCL
        if ((rc = llm_dist__nccl_init(d, init, have_mpi, st)))
            goto fail;
#else
        rc = llm_err(st, LLM_EUSAGE, "dist: %d ranks on GPUs need NCCL: rebuild with NCCL=1",
                     d->world);
        goto fail;
#endif
    } else if (!have_mpi && d->world > 1) {
#ifdef LLM_MPI
        rc = llm_err(st, LLM_EUSAGE, "dist: %d ranks from the environment but no MPI launcher: "
                     "on the CPU launch with mpirun, or srun --mpi=pmix", d->world);
#else
        rc = llm_err(st, LLM_EUSAGE, "dist: %d ranks on the CPU need MPI: rebuild with MPI=1 "
                     "and launch with mpirun", d->world);
#endif
        goto fail;
    } else if (init && !o->device) {
        rc = llm_err(st, LLM_EUSAGE, "dist: --dist-init is for NCCL on GPUs; CPU ranks come "
                     "from the MPI launcher");
        goto fail;
    }
    d->device = o->device && d->ops != &single_ops;
    *out = d;
    return 0;
fail:
    llm_dist_free(d);
    return rc;
}

void llm_dist_free(llm_dist *d)
{
    if (!d)
        return;
    if (d->wd_running) {
        pthread_mutex_lock(&d->mu);
        d->wd_quit = 1;
        pthread_cond_broadcast(&d->cv);
        pthread_mutex_unlock(&d->mu);
        pthread_join(d->wd, NULL);
    }
    if (d->ops->fini)
        d->ops->fini(d);
    pthread_mutex_destroy(&d->mu);
    pthread_cond_destroy(&d->cv);
    free(d);
}

void llm_dist_abort(llm_dist *d, int code)
{
    if (!d || d->world == 1)
        return;
    fflush(stdout);
    fflush(stderr);
    if (d->ops->abort_job)
        d->ops->abort_job(d, code);
    if (d->ops->abort)
        d->ops->abort(d);
    _exit(code);
}

int llm_dist_rank(const llm_dist *d) { return d ? d->rank : 0; }
int llm_dist_world(const llm_dist *d) { return d ? d->world : 1; }
int llm_dist_local_rank(const llm_dist *d) { return d ? d->local_rank : 0; }
const char *llm_dist_kind(const llm_dist *d) { return d ? d->ops->name : "single"; }
int llm_dist_on_device(const llm_dist *d) { return d && d->device; }

int llm_dist_allreduce(llm_dist *d, void *buf, size_t n, llm_dist_type type, llm_dist_op op,
                       llm_status *st)
{
    if (!d || d->world == 1 || !n)
        return 0;
    llm_dist__busy(d, "allreduce");
    int rc = d->ops->allreduce(d, buf, n, type, op, st);
    llm_dist__busy(d, NULL);
    return rc;
}

int llm_dist_reduce_scatter(llm_dist *d, const void *send, void *recv, size_t n,
                            llm_dist_type type, llm_dist_op op, llm_status *st)
{
    if (!d || d->world == 1)
        return s_reduce_scatter(d ? d : &(llm_dist){.world = 1}, send, recv, n, type, op, st);
    llm_dist__busy(d, "reduce_scatter");
    int rc = d->ops->reduce_scatter(d, send, recv, n, type, op, st);
    llm_dist__busy(d, NULL);
    return rc;
}

int llm_dist_reduce_scatter_inplace(llm_dist *d, void *buf, size_t n, llm_dist_type type,
                                    llm_dist_op op, llm_status *st)
{
    if (!d || d->world == 1 || !n)
        return 0;
    llm_dist__busy(d, "reduce_scatter");
    int rc = d->ops->reduce_scatter_inplace(d, buf, n, type, op, st);
    llm_dist__busy(d, NULL);
    return rc;
}

int llm_dist_allgather(llm_dist *d, void *buf, size_t n, llm_dist_type type, llm_status *st)
{
    if (!d || d->world == 1 || !n)
        return 0;
    llm_dist__busy(d, "allgather");
    int rc = d->ops->allgather(d, buf, n, type, st);
    llm_dist__busy(d, NULL);
    return rc;
}

int llm_dist_broadcast(llm_dist *d, void *buf, size_t n, llm_dist_type type, int root,
                       llm_status *st)
{
    if (!d || d->world == 1 || !n)
        return 0;
    if (root < 0 || root >= d->world)
        return llm_err(st, LLM_EUSAGE, "dist: broadcast root %d outside [0, %d)", root, d->world);
    llm_dist__busy(d, "broadcast");
    int rc = d->ops->broadcast(d, buf, n, type, root, st);
    llm_dist__busy(d, NULL);
    return rc;
}

int llm_dist_barrier(llm_dist *d, llm_status *st)
{
    if (!d || d->world == 1)
        return 0;
    llm_dist__busy(d, "barrier");
    int rc = d->ops->barrier(d, st);
    llm_dist__busy(d, NULL);
    return rc;
}

/* ---- non-blocking all-reduce ---- */

void llm_dist_set_stream(llm_dist *d, void *stream)
{
    if (d)
        d->stream = stream;
}

int llm_dist_iallreduce(llm_dist *d, void *buf, size_t n, llm_dist_type type, llm_dist_op op,
                        llm_dist_req **req, llm_status *st)
{
    *req = NULL;
    if (!d || d->world == 1 || !n)
        return 0;
    if (!d->ops->iallreduce)   /* no non-blocking form: done now, nothing to wait for */
        return llm_dist_allreduce(d, buf, n, type, op, st);
    llm_dist_req *r = calloc(1, sizeof *r);
    if (!r)
        return llm_err(st, LLM_ENOMEM, "out of memory");
    *r = (llm_dist_req){buf, n, type, op, NULL};
    /* starting one is local (no peer needed), but NCCL may wait for its queue: watched */
    llm_dist__busy(d, "allreduce (start)");
    int rc = d->ops->iallreduce(d, r, st);
    llm_dist__busy(d, NULL);
    if (rc) {
        free(r);
        return rc;
    }
    *req = r;
    return 0;
}

int llm_dist_test(llm_dist *d, llm_dist_req *req, int *done, llm_status *st)
{
    *done = 1;
    if (!req)
        return 0;
    *done = 0;
    return d->ops->test(d, req, done, st);
}

int llm_dist_wait(llm_dist *d, llm_dist_req *req, llm_status *st)
{
    if (!req)
        return 0;
    llm_dist__busy(d, "allreduce (bucket)");
    int rc = d->ops->wait(d, req, st);
    llm_dist__busy(d, NULL);
    free(req);
    return rc;
}
