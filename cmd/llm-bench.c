/* llm-bench — GEMM, memory bandwidth, collectives, train and infer throughput, one schema. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/bench.h"
#include "common/cli.h"
#include "common/log.h"

typedef struct {
    const char *format, *device, *out;
    int reps, warmup, threads, quiet, verbose;
    const char *sizes, *dtypes, *ops, *size, *minb, *maxb;
    double peak, factor;
} opts;

static void opts_default(opts *o)
{
    memset(o, 0, sizeof *o);
    o->format = "table";
    o->device = "cpu";
    o->out = "-";
    o->reps = 5;
    o->warmup = 2;
    o->factor = 4;
}

#define COMMON_OPTS(o)                                                                     \
    {"format", 'F', LLM_OPT_STR, &(o).format, "FMT", "table, csv, json or jsonl (default: table)"}, \
    {"reps", 'r', LLM_OPT_INT, &(o).reps, "N", "timed repetitions (default: 5)"},           \
    {"warmup", 'w', LLM_OPT_INT, &(o).warmup, "N", "untimed warm-up runs (default: 2)"},    \
    {"threads", 'j', LLM_OPT_INT, &(o).threads, "N", "CPU threads (default: all cores)"},    \
    {"device", 'd', LLM_OPT_STR, &(o).device, "DEV", "cpu or cuda (default: cpu)"},          \
    {"output", 'o', LLM_OPT_STR, &(o).out, "FILE", "write results to FILE (default: stdout)"}, \
    {"quiet", 'q', LLM_OPT_FLAG, &(o).quiet, NULL, "errors only on stderr"},                 \
    {"verbose", 'v', LLM_OPT_COUNT, &(o).verbose, NULL, "more diagnostics"}

/* Validate the options every subcommand shares; returns 0 or an exit status. */
static int check_common(const char *prog, const opts *o, llm_bench_format *fmt)
{
    if (llm_bench_format_parse(o->format, fmt)) {
        fprintf(stderr, "%s: format '%s': use table, csv, json or jsonl\n", prog, o->format);
        return 64;
    }
    if (o->reps < 1 || o->reps > 100000 || o->warmup < 0 || o->warmup > 100000) {
        fprintf(stderr, "%s: --reps must be in 1..100000 and --warmup in 0..100000\n", prog);
        return 64;
    }
    if (o->threads < 0 || o->threads > 4096) {
        fprintf(stderr, "%s: --threads must be in 0..4096\n", prog);
        return 64;
    }
    if (strcmp(o->device, "cpu") != 0) {
        if (strcmp(o->device, "cuda") == 0) {
            fprintf(stderr, "%s: device 'cuda': not available in this build (CPU only)\n", prog);
            return 69;
        }
        fprintf(stderr, "%s: device '%s': use cpu or cuda\n", prog, o->device);
        return 64;
    }
    return 0;
}

static int emit(const char *prog, const opts *o, llm_bench_format fmt, llm_bench_rows *rows)
{
    FILE *f = stdout;
    if (strcmp(o->out, "-") != 0 && !(f = fopen(o->out, "w"))) {
        fprintf(stderr, "%s: cannot open '%s': %s\n", prog, o->out, strerror(errno));
        return 74;
    }
    int rc = llm_bench_write(f, fmt, rows->v, rows->n);
    int err = errno;
    if (f != stdout && fclose(f) != 0) rc = -1;
    if (rc != 0) {
        if (f == stdout && llm_cli_stdout_closed(err)) return 0;
        fprintf(stderr, "%s: write failed: %s\n", prog, strerror(err));
        return 74;
    }
    return 0;
}

/* Split a comma-separated list in place: up to cap items. */
static int split(char *s, char **items, int cap)
{
    int n = 0;
    for (char *save = NULL, *t = strtok_r(s, ",", &save); t && n < cap; t = strtok_r(NULL, ",", &save))
        items[n++] = t;
    return n;
}

static int run_gemm(int argc, char **argv)
{
    const char *prog = "llm-bench gemm";
    opts o;
    opts_default(&o);
    o.sizes = "256,512,1024";
    o.dtypes = "f32";
    const llm_opt table[] = {
        COMMON_OPTS(o),
        {"sizes", 's', LLM_OPT_STR, &o.sizes, "LIST", "N (square) or MxNxK, comma-separated (default: 256,512,1024)"},
        {"dtype", 't', LLM_OPT_STR, &o.dtypes, "LIST", "f32, f64, bf16, comma-separated (default: f32)"},
        {"peak", 0, LLM_OPT_DOUBLE, &o.peak, "GFLOPS", "f32 peak for %% of peak (default: measured)"},
        {0},
    };
    const llm_cli cli = {prog, "[options]", "Time C = A B with OpenBLAS for each size and dtype.",
                         table, 0, 0};
    int r = llm_cli_parse(&cli, argc, argv, NULL);
    if (r != LLM_CLI_RUN) return r == LLM_CLI_EXIT ? 0 : 64;
    llm_bench_format fmt;
    if ((r = check_common(prog, &o, &fmt))) return r;
    llm_log lg = llm_log_make(prog, o.quiet, o.verbose);
    char sbuf[1024], dbuf[256];
    snprintf(sbuf, sizeof sbuf, "%s", o.sizes);
    snprintf(dbuf, sizeof dbuf, "%s", o.dtypes);
    char *sz[64], *dt[8];
    int nsz = split(sbuf, sz, 64), ndt = split(dbuf, dt, 8);
    if (nsz == 0 || ndt == 0) { llm_error(&lg, "empty --sizes or --dtype"); return 64; }
    double peak = o.peak > 0 ? o.peak : llm_bench_cpu_peak_gflops(o.threads);
    llm_info(&lg, "measured f32 FMA peak: %.1f GFLOP/s", peak);
    llm_bench_rows rows = {0};
    llm_status st = {0};
    for (int d = 0; d < ndt; d++)
        for (int i = 0; i < nsz; i++) {
            int M, N, K;
            char tail;
            if (sscanf(sz[i], "%dx%dx%d%c", &M, &N, &K, &tail) == 3) {
            } else if (sscanf(sz[i], "%d%c", &M, &tail) == 1) {
                N = K = M;
            } else {
                llm_error(&lg, "size '%s': use N or MxNxK", sz[i]);
                llm_bench_rows_free(&rows);
                return 64;
            }
            llm_bench_gemm_opts g = {M, N, K, dt[d], o.threads, o.warmup, o.reps, peak};
            llm_bench_row row;
            if (llm_bench_gemm(&g, &row, &st) || llm_bench_rows_push(&rows, &row, &st)) {
                llm_error(&lg, "%s", st.msg);
                llm_bench_rows_free(&rows);
                return llm_exit_code(st.code);
            }
        }
    r = emit(prog, &o, fmt, &rows);
    llm_bench_rows_free(&rows);
    return r;
}

static int run_mem(int argc, char **argv)
{
    const char *prog = "llm-bench mem";
    opts o;
    opts_default(&o);
    o.size = "64M";
    o.ops = "copy,triad";
    const llm_opt table[] = {
        COMMON_OPTS(o),
        {"size", 's', LLM_OPT_STR, &o.size, "BYTES", "bytes per array, K/M/G suffixes (default: 64M)"},
        {"op", 0, LLM_OPT_STR, &o.ops, "LIST", "copy, triad, comma-separated (default: copy,triad)"},
        {0},
    };
    const llm_cli cli = {prog, "[options]", "STREAM-style copy and triad bandwidth.", table, 0, 0};
    int r = llm_cli_parse(&cli, argc, argv, NULL);
    if (r != LLM_CLI_RUN) return r == LLM_CLI_EXIT ? 0 : 64;
    llm_bench_format fmt;
    if ((r = check_common(prog, &o, &fmt))) return r;
    llm_log lg = llm_log_make(prog, o.quiet, o.verbose);
    size_t bytes;
    if (llm_bench_parse_size(o.size, &bytes) || bytes < 4) {
        llm_error(&lg, "size '%s': use a byte count like 64M", o.size);
        return 64;
    }
    char obuf[128];
    snprintf(obuf, sizeof obuf, "%s", o.ops);
    char *ops[8];
    int nops = split(obuf, ops, 8);
    llm_bench_rows rows = {0};
    llm_status st = {0};
    for (int i = 0; i < nops; i++) {
        llm_bench_row row;
        if (llm_bench_mem(ops[i], bytes, o.threads, o.warmup, o.reps, &row, &st) ||
            llm_bench_rows_push(&rows, &row, &st)) {
            llm_error(&lg, "%s", st.msg);
            llm_bench_rows_free(&rows);
            return llm_exit_code(st.code);
        }
    }
    r = emit(prog, &o, fmt, &rows);
    llm_bench_rows_free(&rows);
    return r;
}

static int run_coll(const char *coll, int argc, char **argv)
{
    char prog[64];
    snprintf(prog, sizeof prog, "llm-bench %s", coll);
    opts o;
    opts_default(&o);
    o.minb = "1K";
    o.maxb = "16M";
    const llm_opt table[] = {
        COMMON_OPTS(o),
        {"minbytes", 'b', LLM_OPT_STR, &o.minb, "BYTES", "smallest size (default: 1K)"},
        {"maxbytes", 'e', LLM_OPT_STR, &o.maxb, "BYTES", "largest size (default: 16M)"},
        {"stepfactor", 'f', LLM_OPT_DOUBLE, &o.factor, "F", "size multiplier between rows (default: 4)"},
        {0},
    };
    const llm_cli cli = {prog, "[options]",
                         "Collective bandwidth with nccl-tests' size, time, algbw and busbw.",
                         table, 0, 0};
    int r = llm_cli_parse(&cli, argc, argv, NULL);
    if (r != LLM_CLI_RUN) return r == LLM_CLI_EXIT ? 0 : 64;
    llm_bench_format fmt;
    if ((r = check_common(prog, &o, &fmt))) return r;
    llm_log lg = llm_log_make(prog, o.quiet, o.verbose);
    size_t lo, hi;
    if (llm_bench_parse_size(o.minb, &lo) || llm_bench_parse_size(o.maxb, &hi) || lo < 4 || hi < lo) {
        llm_error(&lg, "sizes '%s'..'%s': need 4 <= minbytes <= maxbytes", o.minb, o.maxb);
        return 64;
    }
    if (!(o.factor > 1.0) || o.factor > 1024) {
        llm_error(&lg, "--stepfactor must be in (1, 1024]");
        return 64;
    }
    llm_warn(&lg, "1 rank (no communicator in this build): timing the local copy path");
    llm_bench_rows rows = {0};
    llm_status st = {0};
    for (double s = (double)lo; s <= (double)hi * (1 + 1e-9); s *= o.factor) {
        llm_bench_row row;
        if (llm_bench_collective(coll, (size_t)s, o.warmup, o.reps, &row, &st) ||
            llm_bench_rows_push(&rows, &row, &st)) {
            llm_error(&lg, "%s", st.msg);
            llm_bench_rows_free(&rows);
            return llm_exit_code(st.code);
        }
    }
    r = emit(prog, &o, fmt, &rows);
    llm_bench_rows_free(&rows);
    return r;
}

static int run_allreduce(int c, char **v) { return run_coll("allreduce", c, v); }
static int run_allgather(int c, char **v) { return run_coll("allgather", c, v); }
static int run_reducescatter(int c, char **v) { return run_coll("reducescatter", c, v); }
static int run_broadcast(int c, char **v) { return run_coll("broadcast", c, v); }

int main(int argc, char **argv)
{
    llm_cli_quiet_sigpipe();
    static const llm_subcmd subs[] = {
        {"gemm", "GEMM GFLOP/s and % of the measured peak (OpenBLAS)", run_gemm},
        {"mem", "memory bandwidth: copy and triad GB/s", run_mem},
        {"allreduce", "allreduce size, time, algbw, busbw", run_allreduce},
        {"allgather", "allgather size, time, algbw, busbw", run_allgather},
        {"reducescatter", "reducescatter size, time, algbw, busbw", run_reducescatter},
        {"broadcast", "broadcast size, time, algbw, busbw", run_broadcast},
        {0},
    };
    return llm_cli_dispatch("llm-bench", "Benchmarks with one result schema.", subs, argc, argv);
}
