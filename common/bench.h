/* bench.h — one result schema for every benchmark, its writers, and the timing loop.
 *
 * A row records what ran (benchmark, op, device, dtype, shape, threads, ranks), how it
 * was timed (warm-up runs, repetitions, min/median/max seconds per repetition), the work
 * per repetition and the rate it implies (work / median time), where the code came from
 * (git commit of the build, host, UTC date) and optional extra numbers (nccl-tests'
 * algbw/busbw, MFU, time to first token, ...).  Writers emit a table, CSV, one JSON
 * document ({"results": [...]}) or JSON lines; every row carries every field.
 */
#ifndef LLM_BENCH_H
#define LLM_BENCH_H

#include "common/clock.h"

#include <stdio.h>

#include "common/status.h"

#define LLM_BENCH_MAX_KV 10

typedef struct {
    char key[24];
    double v;
} llm_bench_kv;

typedef struct {
    char bench[24];     /* "gemm", "mem", "allreduce", "train", "infer", ... */
    char op[24];        /* variant: "sgemm", "copy", "triad", "step", "prefill", "decode" */
    char device[16];    /* "cpu", "cuda" */
    char dtype[8];      /* "f32", "f64", "bf16", ... */
    char precision[8];  /* train: "fp32", "bf16", "fp16" (llm-train --precision); "" for
                           rows without one: then no such field is written */
    char shape[80];     /* "M=512,N=512,K=512", "bytes=1048576", "B=4,T=64" */
    int threads;        /* CPU threads (0: not applicable) */
    int ranks;          /* processes taking part (1 without a communicator) */
    int warmup, reps;
    double t_min, t_med, t_max;   /* seconds per repetition */
    double work;        /* per repetition, in units of unit's numerator (flop, byte, token) */
    double rate;        /* work / t_med, scaled to unit */
    char unit[16];      /* "GFLOP/s", "GB/s", "tokens/s" */
    double peak_pct;    /* rate as % of the peak; negative when no peak applies */
    int nkv;
    llm_bench_kv kv[LLM_BENCH_MAX_KV];
    char note[120];     /* free text, e.g. "1 rank: local copy path" */
    char commit[48], host[64], date[32];
    char cpu[48];       /* the CPU kernels' instruction set and OpenBLAS's kernel set:
                           "avx512vnni openblas=Cooperlake" */
} llm_bench_row;

typedef enum { LLM_BENCH_TABLE, LLM_BENCH_CSV, LLM_BENCH_JSON, LLM_BENCH_JSONL } llm_bench_format;

/* "table", "csv", "json", "jsonl" -> *out; 0, or -1 for an unknown name. */
int llm_bench_format_parse(const char *name, llm_bench_format *out);

/* Fill r's commit (the build's git describe), host (gethostname), cpu and date (UTC,
 * ISO 8601) and zero the rest; peak_pct starts at -1. */
void llm_bench_row_init(llm_bench_row *r, const char *bench, const char *op);

/* Append an extra number; silently ignored once LLM_BENCH_MAX_KV are set. */
void llm_bench_row_kv(llm_bench_row *r, const char *key, double v);
/* Value of an extra number, or def when absent. */
double llm_bench_row_get(const llm_bench_row *r, const char *key, double def);

/* Set t_min/t_med/t_max from t[0..n-1] (sorted in place) and rate = work/t_med / scale. */
void llm_bench_row_times(llm_bench_row *r, double *t, int n, double work, double scale,
                         const char *unit);

/* Write rows in format fmt to f.  A row's precision, when set, is a string member
 * "precision" after dtype (JSON), a column of that name when any row has one (CSV), and
 * "precision=P" after the extras (table).  Returns 0, or -1 when a write failed (errno
 * set). */
int llm_bench_write(FILE *f, llm_bench_format fmt, const llm_bench_row *rows, int n);

/* The same into the file path, all or nothing (made in memory, then llm_afile_write): a
 * failed write leaves the old file as it was.  LLM_ENOMEM, or llm_afile's errors. */
int llm_bench_write_file(const char *path, llm_bench_format fmt, const llm_bench_row *rows,
                         int n, llm_status *st);

/* A byte size: decimal digits with an optional binary suffix K, M, G (KiB, MiB, GiB;
 * a trailing B or iB is accepted).  0, or -1 when malformed or above 1 TiB. */
int llm_bench_parse_size(const char *s, size_t *out);

/* Run fn(ctx) warmup times untimed, then reps times, each timed with the monotonic
 * clock; t (reps entries, caller's) receives the seconds of each repetition. */
void llm_bench_time(void (*fn)(void *ctx), void *ctx, int warmup, int reps, double *t);

/* A growable list of rows. */
typedef struct {
    llm_bench_row *v;
    int n, cap;
} llm_bench_rows;
/* Append a copy of r; LLM_ENOMEM on failure. */
int llm_bench_rows_push(llm_bench_rows *l, const llm_bench_row *r, llm_status *st);
void llm_bench_rows_free(llm_bench_rows *l);

/* ---- benchmarks (bench_gemm.c, bench_mem.c) ---- */

/* Single-precision FMA peak of threads CPU threads in GFLOP/s: one thread's measured
 * rate (a register-only loop of independent fused multiply-adds, AVX2 when the CPU has
 * it; best of 12 runs of ~1 ms) times threads.  Assumes a thread per physical core. */
double llm_bench_cpu_peak_gflops(int threads);

typedef struct {
    int M, N, K;
    const char *dtype;   /* "f32", "f64", "bf16" */
    int threads, warmup, reps;
    double peak_gflops;  /* f32 peak for % of peak (<= 0: measure it); f64 rows get half */
    int peak_given;      /* peak_gflops is the user's (--peak): every dtype's, not halved */
} llm_bench_gemm_opts;

/* C(M,N) = A(M,K) B(K,N) with OpenBLAS; one row (2MNK flop per repetition).
 * LLM_EUSAGE for an unknown dtype or bad sizes, LLM_ENOMEM. */
int llm_bench_gemm(const llm_bench_gemm_opts *o, llm_bench_row *row, llm_status *st);

/* STREAM-style bandwidth on float arrays of bytes each: op "copy" (a = b, 2 arrays of
 * traffic) or "triad" (a = b + s c, 3).  One row in GB/s. */
int llm_bench_mem(const char *op, size_t bytes, int threads, int warmup, int reps,
                  llm_bench_row *row, llm_status *st);

/* A collective ("allreduce", "allgather", "reducescatter", "broadcast") with nccl-tests'
 * definitions: size = bytes per rank's buffer (allgather: the gathered output,
 * reducescatter: the input), algbw = size / time, busbw = algbw * factor
 * (allreduce 2(n-1)/n, allgather and reducescatter (n-1)/n, broadcast 1).  Without a
 * communicator there is one rank and the local copy path (out-of-place copy of the
 * buffer) is what is timed; the row's note says so.  One row per call. */
int llm_bench_collective(const char *coll, size_t bytes, int warmup, int reps,
                         llm_bench_row *row, llm_status *st);

/* The same over the ranks of d (common/dist.h; MPI on host memory): every rank calls it;
 * the time of a repetition is the slowest rank's (barrier, collective, max over ranks).
 * With one rank it is llm_bench_collective. */
struct llm_dist;
int llm_bench_collective_dist(const char *coll, struct llm_dist *d, size_t bytes, int warmup,
                              int reps, llm_bench_row *row, llm_status *st);

/* The nccl-tests bus-bandwidth factor for coll at n ranks; -1 for an unknown name. */
double llm_bench_busbw_factor(const char *coll, int n);

/* The checks every collective benchmark makes first: a known name, 4 B <= bytes <= 1 TiB,
 * reps >= 1, warmup >= 0.  LLM_EUSAGE naming what is wrong, else 0. */
int llm_bench_collective_args(const char *coll, size_t bytes, int warmup, int reps,
                              llm_status *st);

/* The same on GPUs (bench_nccl.c): NCCL over d, which must be an "nccl" communicator
 * (llm_dist_init with device 1, then llm_dist_nccl_self for one rank); every rank calls
 * it.  Device buffers; nccl-tests' layout: n = bytes / 4 floats (allgather and
 * reducescatter: rounded down to a multiple of the ranks, at least one per rank; the
 * NCCL count is n / ranks for them, n otherwise), broadcast from rank 0.  rows[0] is
 * out-of-place, rows[1] in-place (the input inside the output, as nccl-tests places it).
 * Each: warmup untimed runs, then reps runs, each between two CUDA events on the
 * communicator's stream (with more than one rank, after a one-float allreduce that lines
 * the ranks up), all queued before one wait; the time of a rep is the slowest rank's.
 * Then the input is written again, the output poisoned with NaN, the collective runs once
 * more and every output element is compared with llm_bench_coll_expect; the row's
 * "wrong" is the count over all ranks, and any is LLM_ESOFTWARE.  Extra fields as the
 * CPU rows plus "wrong"; device "cuda", threads 0.  LLM_ENODEV without NCCL in the build,
 * LLM_ENOMEM, LLM_EIO (NCCL), LLM_ESOFTWARE (CUDA). */
int llm_bench_collective_cuda(const char *coll, struct llm_dist *d, size_t bytes, int warmup,
                              int reps, llm_bench_row rows[2], llm_status *st);

/* The GPU collectives' result check, plain C.  n: elements of the buffer that size counts
 * (allreduce, broadcast: the buffer; allgather: the gathered output; reducescatter: the
 * input), a multiple of world for allgather and reducescatter; c = n / world. */
/* The value rank writes at element i of that buffer: an integer in [-125, 185], so sums
 * over up to 90000 ranks are exact in float in any order. */
float llm_bench_coll_value(int rank, size_t i);
/* Elements of one rank's input (allgather: c) and output (reducescatter: c). */
void llm_bench_coll_counts(const char *coll, size_t n, int world, size_t *in, size_t *out);
/* Write rank's input of coll to in (llm_bench_coll_counts' in elements): value(rank, i)
 * for its elements i (allgather: rank's part, i = rank c + j). */
void llm_bench_coll_fill(const char *coll, size_t n, int rank, int world, float *in);
/* The exact expected element j of rank's output: allreduce the sum over ranks of
 * value(k, j); reducescatter that sum at i = rank c + j; allgather value(j / c, j);
 * broadcast value(0, j). */
float llm_bench_coll_expect(const char *coll, size_t n, int rank, int world, size_t j);
/* How many elements of out (the output count) differ from the expected ones (NaN
 * counts); *first is the first such index, or (size_t)-1. */
long long llm_bench_coll_check(const char *coll, size_t n, int rank, int world, const float *out,
                               size_t *first);

/* ---- GPU benchmarks (bench_cuda.c; kernels/cuda/cuda_bench.cu in a CUDA build) ----
 * In a build without CUDA each returns LLM_ENODEV ("this build has no CUDA"); in a CUDA
 * build without a usable GPU or driver, LLM_ENODEV with "no CUDA device: ...". */

/* Dense peak of a GPU in GFLOP/s for dtype ("f32", "tf32", "bf16", "f16"): the flop per
 * clock per SM of its compute capability (NVIDIA's architecture whitepapers; table in
 * bench_cuda.c and llm-bench(1)) x sm_count x clock_mhz, with tensor-core dtypes on
 * compute capability 9.0 at most at the 1830 MHz tensor boost clock of the H100
 * whitepaper.  -1 when the table has no entry (an unknown architecture, or tensor
 * dtypes on consumer parts whose fp32-accumulate rate differs between products). */
double llm_bench_gpu_peak_gflops(int cc_major, int cc_minor, int sm_count, double clock_mhz,
                                 const char *dtype);

/* Peak DRAM bandwidth in GB/s: 2 (double data rate) x mem_clock_mhz x bus_width_bits / 8,
 * as the CUDA samples compute it; -1 when either is unknown (<= 0). */
double llm_bench_gpu_peak_gbs(double mem_clock_mhz, int bus_width_bits);

/* The same C = A B on the GPU with cuBLASLt (llm_cuda_bench_gemm: CUDA events, output
 * checked after timing); dtype "f32" (also "fp32"), "tf32", "bf16", "f16" (also "fp16").
 * o->threads is ignored (the row says 0); o->peak_gflops > 0 replaces the table peak.
 * LLM_EUSAGE (dtype, sizes), LLM_ENODEV (no GPU; no cuBLASLt algorithm), LLM_ENOMEM,
 * LLM_ESOFTWARE (a CUDA failure, or an output that failed its check). */
int llm_bench_gemm_cuda(const llm_bench_gemm_opts *o, llm_bench_row *row, llm_status *st);

/* GPU memory bandwidth: op "copy" (kernel, 2 x bytes moved), "memcpy" (cudaMemcpy device
 * to device, 2 x bytes), "triad" (kernel, 3 x bytes), "h2d" and "d2h" (pinned host memory
 * over the bus, 1 x bytes).  One row in GB/s; peak_pct against llm_bench_gpu_peak_gbs for
 * the device-memory ops.  Errors as llm_bench_gemm_cuda. */
int llm_bench_mem_cuda(const char *op, size_t bytes, int warmup, int reps, llm_bench_row *row,
                       llm_status *st);

/* The current GPU's peaks: table GFLOP/s for dtype and DRAM GB/s (-1 when unknown), and
 * its name (may be NULL).  LLM_ENODEV without a GPU or CUDA. */
int llm_bench_gpu_peaks(const char *dtype, double *gflops, double *gbs, char *name, size_t namelen,
                        llm_status *st);

#endif
