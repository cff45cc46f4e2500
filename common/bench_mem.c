/* bench_mem.c — memory bandwidth (copy, triad) and the single-rank collective path. */
#include "common/bench.h"

#include <omp.h>
#include <stdlib.h>
#include <string.h>

typedef struct {
    float *a, *b, *c;
    size_t n;
    int triad, threads;
} mem_ctx;

static void mem_run(void *p)
{
    mem_ctx *m = p;
    float *restrict a = m->a;
    const float *restrict b = m->b, *restrict c = m->c;
    const float s = 3.0f;
    long n = (long)m->n;
    if (m->triad) {
#pragma omp parallel for schedule(static) num_threads(m->threads)
        for (long i = 0; i < n; i++) a[i] = b[i] + s * c[i];
    } else {
#pragma omp parallel for schedule(static) num_threads(m->threads)
        for (long i = 0; i < n; i++) a[i] = b[i];
    }
}

int llm_bench_mem(const char *op, size_t bytes, int threads, int warmup, int reps,
                  llm_bench_row *row, llm_status *st)
{
    int triad;
    if (strcmp(op, "copy") == 0) triad = 0;
    else if (strcmp(op, "triad") == 0) triad = 1;
    else return llm_err(st, LLM_EUSAGE, "mem op '%s': use copy or triad", op);
    if (bytes < 4 || bytes > ((size_t)1 << 40))
        return llm_err(st, LLM_EUSAGE, "array size %zu bytes: must be in 4..1T", bytes);
    if (reps <= 0 || warmup < 0) return llm_err(st, LLM_EUSAGE, "reps must be >= 1 and warmup >= 0");
    if (threads <= 0) threads = omp_get_max_threads();
    mem_ctx m = {.n = bytes / 4, .triad = triad, .threads = threads};
    m.a = malloc(m.n * 4);
    m.b = malloc(m.n * 4);
    m.c = malloc(m.n * 4);
    double *t = malloc((size_t)reps * sizeof *t);
    if (!m.a || !m.b || !m.c || !t) {
        free(m.a); free(m.b); free(m.c); free(t);
        return llm_err(st, LLM_ENOMEM, "out of memory for 3 arrays of %zu bytes", bytes);
    }
    /* First touch from the same threads and schedule as the timed loop (NUMA placement). */
    long n = (long)m.n;
#pragma omp parallel for schedule(static) num_threads(threads)
    for (long i = 0; i < n; i++) { m.a[i] = 0; m.b[i] = 1; m.c[i] = 2; }
    llm_bench_time(mem_run, &m, warmup, reps, t);
    llm_bench_row_init(row, "mem", op);
    snprintf(row->shape, sizeof row->shape, "bytes=%zu", m.n * 4);
    row->threads = threads;
    row->warmup = warmup;
    /* STREAM's accounting: bytes read + bytes written, no write-allocate traffic. */
    llm_bench_row_times(row, t, reps, (triad ? 3.0 : 2.0) * (double)(m.n * 4), 1e9, "GB/s");
    free(m.a); free(m.b); free(m.c); free(t);
    return 0;
}

double llm_bench_busbw_factor(const char *coll, int n)
{
    if (n < 1) return -1;
    if (strcmp(coll, "allreduce") == 0) return 2.0 * (n - 1) / n;
    if (strcmp(coll, "allgather") == 0 || strcmp(coll, "reducescatter") == 0)
        return (double)(n - 1) / n;
    if (strcmp(coll, "broadcast") == 0) return 1.0;
    return -1;
}

typedef struct {
    void *dst;
    const void *src;
    size_t bytes;
} copy_ctx;

static void copy_run(void *p)
{
    copy_ctx *c = p;
    memcpy(c->dst, c->src, c->bytes);
}

int llm_bench_collective(const char *coll, size_t bytes, int warmup, int reps,
                         llm_bench_row *row, llm_status *st)
{
    const int nranks = 1;
    double factor = llm_bench_busbw_factor(coll, nranks);
    if (factor < 0)
        return llm_err(st, LLM_EUSAGE,
                       "collective '%s': use allreduce, allgather, reducescatter or broadcast", coll);
    if (bytes < 4 || bytes > ((size_t)1 << 40))
        return llm_err(st, LLM_EUSAGE, "size %zu bytes: must be in 4..1T", bytes);
    if (reps <= 0 || warmup < 0) return llm_err(st, LLM_EUSAGE, "reps must be >= 1 and warmup >= 0");
    bytes &= ~(size_t)3;   /* whole f32 elements, as nccl-tests counts */
    /* With one rank every collective is the identity on its buffer; out of place that
     * is one copy of size bytes from the send to the receive buffer. */
    copy_ctx c = {.bytes = bytes};
    void *src = malloc(bytes), *dst = malloc(bytes);
    double *t = malloc((size_t)reps * sizeof *t);
    if (!src || !dst || !t) {
        free(src); free(dst); free(t);
        return llm_err(st, LLM_ENOMEM, "out of memory for %zu-byte buffers", bytes);
    }
    memset(src, 1, bytes);
    memset(dst, 0, bytes);
    c.src = src;
    c.dst = dst;
    llm_bench_time(copy_run, &c, warmup, reps, t);
    llm_bench_row_init(row, coll, "out-of-place");
    snprintf(row->shape, sizeof row->shape, "bytes=%zu", bytes);
    row->ranks = nranks;
    row->threads = 1;
    row->warmup = warmup;
    llm_bench_row_times(row, t, reps, (double)bytes, 1e9, "GB/s");
    /* nccl-tests reports algbw and busbw from the average time; we use the median. */
    llm_bench_row_kv(row, "size", (double)bytes);
    llm_bench_row_kv(row, "count", (double)(bytes / 4));
    llm_bench_row_kv(row, "time_us", 1e6 * row->t_med);
    llm_bench_row_kv(row, "algbw", row->rate);
    llm_bench_row_kv(row, "busbw", row->rate * factor);
    snprintf(row->note, sizeof row->note,
             "1 rank, no communicator: local copy path (run under mpirun for MPI, --device cuda for NCCL)");
    free(src); free(dst); free(t);
    return 0;
}
