/* bench_dist.c — collectives over a real communicator (MPI ranks), nccl-tests style. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/bench.h"
#include "common/dist.h"

static int one(const char *coll, llm_dist *d, float *buf, float *recv, size_t n, llm_status *st)
{
    if (!strcmp(coll, "allreduce"))
        return llm_dist_allreduce(d, buf, n, LLM_DIST_F32, LLM_DIST_SUM, st);
    if (!strcmp(coll, "allgather"))
        return llm_dist_allgather(d, buf, n, LLM_DIST_F32, st);
    if (!strcmp(coll, "reducescatter"))
        return llm_dist_reduce_scatter(d, buf, recv, n, LLM_DIST_F32, LLM_DIST_SUM, st);
    return llm_dist_broadcast(d, buf, n, LLM_DIST_F32, 0, st);
}

int llm_bench_collective_args(const char *coll, size_t bytes, int warmup, int reps,
                              llm_status *st)
{
    if (llm_bench_busbw_factor(coll, 1) < 0)
        return llm_err(st, LLM_EUSAGE,
                       "collective '%s': use allreduce, allgather, reducescatter or broadcast", coll);
    if (bytes < 4 || bytes > ((size_t)1 << 40))
        return llm_err(st, LLM_EUSAGE, "size %zu bytes: must be in 4..1T", bytes);
    if (reps <= 0 || warmup < 0)
        return llm_err(st, LLM_EUSAGE, "reps must be >= 1 and warmup >= 0");
    return 0;
}

int llm_bench_collective_dist(const char *coll, llm_dist *d, size_t bytes, int warmup, int reps,
                              llm_bench_row *row, llm_status *st)
{
    int world = llm_dist_world(d);
    if (world == 1)
        return llm_bench_collective(coll, bytes, warmup, reps, row, st);
    int rc = llm_bench_collective_args(coll, bytes, warmup, reps, st);
    if (rc)
        return rc;
    double factor = llm_bench_busbw_factor(coll, world);
    size_t n = bytes / 4;
    bytes = n * 4;
    float *buf = malloc(bytes), *recv = malloc(bytes / (size_t)world + 8);
    double *t = malloc((size_t)reps * sizeof *t);
    rc = 0;
    if (!buf || !recv || !t) {
        rc = llm_err(st, LLM_ENOMEM, "out of memory for %zu-byte buffers", bytes);
        goto out;
    }
    for (size_t i = 0; i < n; i++)
        buf[i] = 1.0f;
    for (int i = -warmup; i < reps && !rc; i++) {
        /* a barrier first so that every rank's clock starts together; the time of a rep
         * is the slowest rank's (reduced below), as a collective ends for all at once */
        if ((rc = llm_dist_barrier(d, st)))
            break;
        double t0 = llm_now_s();
        rc = one(coll, d, buf, recv, n, st);
        if (i >= 0)
            t[i] = llm_now_s() - t0;
    }
    if (!rc)
        rc = llm_dist_allreduce(d, t, (size_t)reps, LLM_DIST_F64, LLM_DIST_MAX, st);
    if (rc)
        goto out;
    llm_bench_row_init(row, coll, strcmp(coll, "reducescatter") ? "in-place" : "out-of-place");
    snprintf(row->shape, sizeof row->shape, "bytes=%zu", bytes);
    row->ranks = world;
    row->threads = 1;
    row->warmup = warmup;
    llm_bench_row_times(row, t, reps, (double)bytes, 1e9, "GB/s");
    /* nccl-tests: size and count per rank's buffer, algbw = size / time, busbw = algbw x
     * factor; they average the time, we take the median (robust on a shared machine) */
    llm_bench_row_kv(row, "size", (double)bytes);
    llm_bench_row_kv(row, "count", (double)n);
    llm_bench_row_kv(row, "time_us", 1e6 * row->t_med);
    llm_bench_row_kv(row, "algbw", row->rate);
    llm_bench_row_kv(row, "busbw", row->rate * factor);
    snprintf(row->note, sizeof row->note, "%d ranks, %s", world, llm_dist_kind(d));
out:
    free(buf);
    free(recv);
    free(t);
    return rc;
}

/* ---- the result check of the GPU collectives (bench_nccl.c): plain C ---- */

float llm_bench_coll_value(int rank, size_t i)
{
    /* small integers: every partial sum over up to 90000 ranks is exact in float, so the
     * reduced values can be compared with == whatever order NCCL adds them in */
    return (float)((long)(i % 251) - 125 + rank % 61);
}

void llm_bench_coll_counts(const char *coll, size_t n, int world, size_t *in, size_t *out)
{
    size_t c = n / (size_t)world;
    *in = !strcmp(coll, "allgather") ? c : n;
    *out = !strcmp(coll, "reducescatter") ? c : n;
}

void llm_bench_coll_fill(const char *coll, size_t n, int rank, int world, float *in)
{
    size_t nin, nout;
    llm_bench_coll_counts(coll, n, world, &nin, &nout);
    /* allgather: rank r provides elements [r c, (r+1) c) of the gathered output */
    size_t base = !strcmp(coll, "allgather") ? (size_t)rank * (n / (size_t)world) : 0;
    for (size_t j = 0; j < nin; j++)
        in[j] = llm_bench_coll_value(rank, base + j);
}

/* sum over ranks k < world of llm_bench_coll_value(k, i), less world x the i part */
static long rank_sum(int world)
{
    long s = 0;
    for (int k = 0; k < world; k++)
        s += k % 61;
    return s;
}

static float expect(const char *coll, size_t n, int rank, int world, long rsum, size_t j)
{
    size_t c = n / (size_t)world;
    if (!strcmp(coll, "broadcast"))
        return llm_bench_coll_value(0, j);
    if (!strcmp(coll, "allgather"))
        return llm_bench_coll_value((int)(j / c), j);
    size_t i = !strcmp(coll, "reducescatter") ? (size_t)rank * c + j : j;
    return (float)((long)world * ((long)(i % 251) - 125) + rsum);
}

float llm_bench_coll_expect(const char *coll, size_t n, int rank, int world, size_t j)
{
    return expect(coll, n, rank, world, rank_sum(world), j);
}

long long llm_bench_coll_check(const char *coll, size_t n, int rank, int world, const float *out,
                               size_t *first)
{
    size_t nin, nout;
    llm_bench_coll_counts(coll, n, world, &nin, &nout);
    long rsum = rank_sum(world);
    long long wrong = 0;
    *first = (size_t)-1;
    for (size_t j = 0; j < nout; j++)
        if (!(out[j] == expect(coll, n, rank, world, rsum, j)) && wrong++ == 0)
            *first = j;
    return wrong;
}
