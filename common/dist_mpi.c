/* dist_mpi.c — the MPI implementation of dist.h: host memory, MPI_COMM_WORLD.
 * Built only with MPI=1 (LLM_MPI); otherwise this file is empty. */
#include "common/dist_impl.h"

#ifdef LLM_MPI
#include <mpi.h>
#include <stdlib.h>
#include <string.h>

typedef struct {
    int *counts, *displs;   /* per-rank shard sizes and offsets, for the v-collectives */
    size_t n_for;           /* the n they were computed for, and the type */
    int we_init;            /* we called MPI_Init (so we finalize) */
    void *ring;             /* RING_CHUNK elements of 8 bytes: the in-place reduce-scatter */
} mpi_state;

int llm_dist__mpi_launched(void)
{
    /* Open MPI, PMIx (srun --mpi=pmix, Open MPI 5), MPICH/Hydra and Intel MPI */
    static const char *vars[] = {"OMPI_COMM_WORLD_SIZE", "PMIX_RANK", "PMI_SIZE", "PMI_RANK",
                                 "MPI_LOCALNRANKS"};
    for (size_t i = 0; i < sizeof vars / sizeof *vars; i++)
        if (getenv(vars[i]))
            return 1;
    return 0;
}

static MPI_Datatype dt(llm_dist_type t)
{
    return t == LLM_DIST_F64 ? MPI_DOUBLE : MPI_FLOAT;
}

static MPI_Op mop(llm_dist_op op)
{
    return op == LLM_DIST_MAX ? MPI_MAX : MPI_SUM;
}

static int mpierr(llm_status *st, const char *what, int code)
{
    char msg[MPI_MAX_ERROR_STRING];
    int len = 0;
    MPI_Error_string(code, msg, &len);
    return llm_err(st, LLM_EIO, "mpi: %s failed: %.*s", what, len, msg);
}

/* AVG = SUM then a division by world, done here so every implementation agrees. */
static void scale(void *buf, size_t n, llm_dist_type t, int world)
{
    if (t == LLM_DIST_F64) {
        double *p = buf;
        for (size_t i = 0; i < n; i++)
            p[i] /= (double)world;
    } else {
        float *p = buf;
        for (size_t i = 0; i < n; i++)
            p[i] /= (float)world;
    }
}

/* MPI counts are int: collectives over more than INT_MAX elements go in pieces. */
#define CHUNK ((size_t)1 << 30)

static int m_allreduce(llm_dist *d, void *buf, size_t n, llm_dist_type t, llm_dist_op op,
                       llm_status *st)
{
    size_t es = llm_dist__tsize(t);
    for (size_t o = 0; o < n; o += CHUNK) {
        size_t k = n - o < CHUNK ? n - o : CHUNK;
        int rc = MPI_Allreduce(MPI_IN_PLACE, (char *)buf + o * es, (int)k, dt(t), mop(op),
                               MPI_COMM_WORLD);
        if (rc != MPI_SUCCESS)
            return mpierr(st, "allreduce", rc);
    }
    if (op == LLM_DIST_AVG)
        scale(buf, n, t, d->world);
    return 0;
}

static int layout(llm_dist *d, size_t n, llm_status *st)
{
    mpi_state *s = d->impl;
    if (s->n_for == n && s->counts)
        return 0;
    size_t lo, hi;
    llm_dist_shard(n, d->world, d->world - 1, &lo, &hi);
    if (n > (size_t)2147483647)
        return llm_err(st, LLM_EUSAGE, "mpi: %zu elements exceed MPI's int counts", n);
    for (int r = 0; r < d->world; r++) {
        llm_dist_shard(n, d->world, r, &lo, &hi);
        s->counts[r] = (int)(hi - lo);
        s->displs[r] = (int)lo;
    }
    s->n_for = n;
    return 0;
}

static int m_reduce_scatter(llm_dist *d, const void *send, void *recv, size_t n,
                            llm_dist_type t, llm_dist_op op, llm_status *st)
{
    mpi_state *s = d->impl;
    if (layout(d, n, st))
        return st->code;
    int rc = MPI_Reduce_scatter(send, recv, s->counts, dt(t), mop(op), MPI_COMM_WORLD);
    if (rc != MPI_SUCCESS)
        return mpierr(st, "reduce_scatter", rc);
    if (op == LLM_DIST_AVG)
        scale(recv, (size_t)s->counts[d->rank], t, d->world);
    return 0;
}

/* Reduce-scatter in place as a ring over the shards, in pieces of RING_CHUNK elements:
 * W - 1 steps; at step s rank r sends its partial sum of shard (r - s - 1) to rank r + 1
 * and adds what rank r - 1 sends of shard (r - s - 2) into its own, so after the last
 * step shard r is complete on rank r.  MPI_Reduce_scatter would do, but Open MPI's
 * allocates a scratch copy of the whole buffer for it: for ZeRO's gradient buffer that
 * would cost the very memory the sharding saves.  Here the scratch is one piece. */
#define RING_CHUNK ((size_t)1 << 20)

static void combine(void *dst, const void *src, size_t n, llm_dist_type t, llm_dist_op op)
{
    if (t == LLM_DIST_F64) {
        double *d = dst;
        const double *x = src;
        for (size_t i = 0; i < n; i++)
            d[i] = op == LLM_DIST_MAX ? (x[i] > d[i] ? x[i] : d[i]) : d[i] + x[i];
    } else {
        float *d = dst;
        const float *x = src;
        for (size_t i = 0; i < n; i++)
            d[i] = op == LLM_DIST_MAX ? (x[i] > d[i] ? x[i] : d[i]) : d[i] + x[i];
    }
}

static int m_reduce_scatter_inplace(llm_dist *d, void *buf, size_t n, llm_dist_type t,
                                    llm_dist_op op, llm_status *st)
{
    mpi_state *s = d->impl;
    int W = d->world, r = d->rank, next = (r + 1) % W, prev = (r + W - 1) % W;
    size_t es = llm_dist__tsize(t);
    if (!s->ring && !(s->ring = malloc(RING_CHUNK * 8)))
        return llm_err(st, LLM_ENOMEM, "out of memory");
    /* every rank exchanges the same number of pieces per step (zero-length where its
     * shards are shorter), so that each message meets its receive */
    size_t pieces = ((n + W - 1) / W + RING_CHUNK - 1) / RING_CHUNK;
    for (int step = 0; step < W - 1; step++) {
        size_t slo, shi, rlo, rhi;
        llm_dist_shard(n, W, ((r - step - 1) % W + W) % W, &slo, &shi);
        llm_dist_shard(n, W, ((r - step - 2) % W + W) % W, &rlo, &rhi);
        for (size_t o = 0; o < pieces * RING_CHUNK; o += RING_CHUNK) {
            size_t ks = shi - slo > o ? shi - slo - o : 0, kr = rhi - rlo > o ? rhi - rlo - o : 0;
            ks = ks < RING_CHUNK ? ks : RING_CHUNK;
            kr = kr < RING_CHUNK ? kr : RING_CHUNK;
            int rc = MPI_Sendrecv((char *)buf + (slo + o) * es, (int)ks, dt(t), next, step,
                                  s->ring, (int)kr, dt(t), prev, step, MPI_COMM_WORLD,
                                  MPI_STATUS_IGNORE);
            if (rc != MPI_SUCCESS)
                return mpierr(st, "reduce_scatter", rc);
            combine((char *)buf + (rlo + o) * es, s->ring, kr, t, op);
        }
    }
    if (op == LLM_DIST_AVG) {
        size_t lo, hi;
        llm_dist_shard(n, W, r, &lo, &hi);
        scale((char *)buf + lo * es, hi - lo, t, W);
    }
    return 0;
}

static int m_allgather(llm_dist *d, void *buf, size_t n, llm_dist_type t, llm_status *st)
{
    mpi_state *s = d->impl;
    if (layout(d, n, st))
        return st->code;
    int rc = MPI_Allgatherv(MPI_IN_PLACE, 0, MPI_DATATYPE_NULL, buf, s->counts, s->displs, dt(t),
                            MPI_COMM_WORLD);
    return rc == MPI_SUCCESS ? 0 : mpierr(st, "allgather", rc);
}

static int m_broadcast(llm_dist *d, void *buf, size_t n, llm_dist_type t, int root,
                       llm_status *st)
{
    (void)d;
    size_t es = llm_dist__tsize(t);
    for (size_t o = 0; o < n; o += CHUNK) {
        size_t k = n - o < CHUNK ? n - o : CHUNK;
        int rc = MPI_Bcast((char *)buf + o * es, (int)k, dt(t), root, MPI_COMM_WORLD);
        if (rc != MPI_SUCCESS)
            return mpierr(st, "broadcast", rc);
    }
    return 0;
}

static int m_barrier(llm_dist *d, llm_status *st)
{
    (void)d;
    int rc = MPI_Barrier(MPI_COMM_WORLD);
    return rc == MPI_SUCCESS ? 0 : mpierr(st, "barrier", rc);
}

/* Non-blocking all-reduce: one MPI_Iallreduce per CHUNK elements; impl holds the
 * MPI_Request array, its count first. */
typedef struct {
    int n;
    MPI_Request r[];
} mpi_reqs;

static int m_iallreduce(llm_dist *d, llm_dist_req *q, llm_status *st)
{
    (void)d;
    size_t es = llm_dist__tsize(q->t), k = (q->n + CHUNK - 1) / CHUNK;
    mpi_reqs *m = calloc(1, sizeof *m + k * sizeof(MPI_Request));
    if (!m)
        return llm_err(st, LLM_ENOMEM, "out of memory");
    for (size_t i = 0; i < k; i++) {
        size_t o = i * CHUNK, c = q->n - o < CHUNK ? q->n - o : CHUNK;
        int rc = MPI_Iallreduce(MPI_IN_PLACE, (char *)q->buf + o * es, (int)c, dt(q->t),
                                mop(q->op), MPI_COMM_WORLD, &m->r[i]);
        if (rc != MPI_SUCCESS) {
            free(m);   /* the job is ended after an error (dist.h): no waiting here */
            return mpierr(st, "iallreduce", rc);
        }
        m->n++;
    }
    q->impl = m;
    return 0;
}

static int m_test(llm_dist *d, llm_dist_req *q, int *done, llm_status *st)
{
    (void)d;
    mpi_reqs *m = q->impl;
    int rc = MPI_Testall(m->n, m->r, done, MPI_STATUSES_IGNORE);
    return rc == MPI_SUCCESS ? 0 : mpierr(st, "iallreduce (test)", rc);
}

static int m_wait(llm_dist *d, llm_dist_req *q, llm_status *st)
{
    mpi_reqs *m = q->impl;
    int rc = MPI_Waitall(m->n, m->r, MPI_STATUSES_IGNORE);
    free(m);
    q->impl = NULL;
    if (rc != MPI_SUCCESS)
        return mpierr(st, "iallreduce (wait)", rc);
    if (q->op == LLM_DIST_AVG)
        scale(q->buf, q->n, q->t, d->world);
    return 0;
}

static void m_fini(llm_dist *d)
{
    mpi_state *s = d->impl;
    if (!s)
        return;
    int fin = 0;
    if (s->we_init && MPI_Finalized(&fin) == MPI_SUCCESS && !fin)
        MPI_Finalize();
    free(s->counts);
    free(s->displs);
    free(s->ring);
    free(s);
    d->impl = NULL;
}

static void m_abort_job(llm_dist *d, int code)
{
    (void)d;
    MPI_Abort(MPI_COMM_WORLD, code);
}

static const llm_dist_ops mpi_ops = {"mpi", m_allreduce, m_reduce_scatter, m_allgather,
                                     m_broadcast, m_barrier, NULL, m_abort_job, m_fini,
                                     m_reduce_scatter_inplace, m_iallreduce, m_test, m_wait};

int llm_dist__mpi_init(llm_dist *d, llm_status *st)
{
    int inited = 0, provided = 0, rc;
    mpi_state *s = calloc(1, sizeof *s);
    if (!s)
        return llm_err(st, LLM_ENOMEM, "out of memory");
    MPI_Initialized(&inited);
    /* SERIALIZED: only the training thread calls MPI; the watchdog never does */
    if (!inited) {
        if ((rc = MPI_Init_thread(NULL, NULL, MPI_THREAD_SERIALIZED, &provided)) != MPI_SUCCESS) {
            free(s);
            return llm_err(st, LLM_ENODEV, "mpi: MPI_Init_thread failed (%d)", rc);
        }
        s->we_init = 1;
    }
    /* errors come back as codes (then a message), not as an abort inside MPI */
    MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
    MPI_Comm_rank(MPI_COMM_WORLD, &d->rank);
    MPI_Comm_size(MPI_COMM_WORLD, &d->world);
    MPI_Comm local;
    d->local_rank = 0;
    if (MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, d->rank, MPI_INFO_NULL,
                            &local) == MPI_SUCCESS) {
        MPI_Comm_rank(local, &d->local_rank);
        MPI_Comm_free(&local);
    }
    s->counts = calloc((size_t)d->world, sizeof *s->counts);
    s->displs = calloc((size_t)d->world, sizeof *s->displs);
    d->impl = s;
    d->ops = &mpi_ops;
    if (!s->counts || !s->displs)
        return llm_err(st, LLM_ENOMEM, "out of memory");
    return 0;
}

void llm_dist__mpi_detach(llm_dist *d)
{
    mpi_state *s = d->impl;
    if (!s)
        return;
    free(s->counts);
    free(s->displs);
    free(s->ring);
    free(s);
    d->impl = NULL;
}

void llm_dist__mpi_fini(void)
{
    int inited = 0, fin = 0;
    if (MPI_Initialized(&inited) == MPI_SUCCESS && inited && MPI_Finalized(&fin) == MPI_SUCCESS &&
        !fin)
        MPI_Finalize();
}

int llm_dist__mpi_bcast_bytes(void *buf, size_t n, llm_status *st)
{
    int rc = MPI_Bcast(buf, (int)n, MPI_BYTE, 0, MPI_COMM_WORLD);
    return rc == MPI_SUCCESS ? 0 : mpierr(st, "broadcast of the NCCL id", rc);
}
#else
typedef int llm_dist_mpi_unused; /* ISO C forbids an empty translation unit */
#endif
