/* llm-bench — GEMM, memory bandwidth, collectives, train and infer throughput, one schema. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/afile.h"
#include "common/bench.h"
#include "common/bench_model.h"
#include "common/ckpt.h"
#include "common/config.h"
#include "common/dist.h"
#include "common/sigstop.h"
#include "common/tree.h"
#include "common/cli.h"
#include "common/log.h"

typedef struct {
    const char *format, *device, *out;
    int reps, warmup, threads, quiet, verbose;
    const char *sizes, *dtypes, *ops, *size, *minb, *maxb;
    double peak, factor;
    int peak_given;   /* --peak on the command line (gemm, train): 0 in peak is "not given" */
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
    {"reps", 'r', LLM_OPT_INT, &(o).reps, "N", "timed repetitions (default: 5; train, infer: 3)"},           \
    {"warmup", 'w', LLM_OPT_INT, &(o).warmup, "N", "untimed warm-up runs (default: 2; train, infer: 1)"},    \
    {"threads", 'j', LLM_OPT_INT, &(o).threads, "N", "CPU threads (default: 0, all cores)"},    \
    {"device", 'd', LLM_OPT_STR, &(o).device, "DEV", "cpu or cuda; train, infer: also cpu-ref (default: cpu)"},          \
    {"output", 'o', LLM_OPT_STR, &(o).out, "FILE", "write results to FILE (default: stdout)"}, \
    {"quiet", 'q', LLM_OPT_FLAG, &(o).quiet, NULL, "errors only on stderr"},                 \
    {"verbose", 'v', LLM_OPT_COUNT, &(o).verbose, NULL, "more diagnostics"}

/* Which devices a subcommand runs on. */
enum { DEV_CPU, DEV_MODEL, DEV_GPU, DEV_NCCL };

/* Validate the options every subcommand shares; returns 0 or an exit status.
 * devs: DEV_MODEL when the subcommand runs through kernels/backend.h (train, infer), so
 * any device the backend knows is fine; DEV_GPU for gemm and mem (cpu, and cuda in a
 * CUDA build); DEV_NCCL for the collectives (cpu, and cuda in a CUDA build with NCCL);
 * DEV_CPU for cpu only. */
static int check_common(const char *prog, const opts *o, llm_bench_format *fmt, int devs)
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
    if (o->peak_given && !(o->peak > 0)) {   /* 0 in peak, the default: measured or the table's */
        fprintf(stderr, "%s: --peak must be positive\n", prog);
        return 64;
    }
    if (devs == DEV_MODEL && (!strcmp(o->device, "cpu") || !strcmp(o->device, "cpu-ref") || !strcmp(o->device, "cuda")))
        return 0;
    if (strcmp(o->device, "cpu") != 0) {
        if (strcmp(o->device, "cuda") == 0) {
            /* gemm, mem: bench_cuda.c says why when it cannot run (no CUDA in this
             * build, no GPU), after checking the dtype and op names */
            if (devs == DEV_GPU) return 0;
#if defined(LLM_CUDA) && defined(LLM_NCCL)
            if (devs == DEV_NCCL) return 0;
#endif
#ifdef LLM_CUDA
            if (devs == DEV_NCCL)
                fprintf(stderr, "%s: device 'cuda': the collectives need NCCL, and this build has "
                                "none (rebuild with NCCL=1, NCCL_HOME=DIR)\n", prog);
            else
                fprintf(stderr, "%s: device 'cuda': not implemented for this benchmark\n", prog);
#else
            fprintf(stderr, "%s: device 'cuda': not available in this build (CPU only; rebuild with "
                            "make CUDA=1)\n", prog);
#endif
            return 69;
        }
        fprintf(stderr, "%s: device '%s': use cpu or cuda\n", prog, o->device);
        return 64;
    }
    return 0;
}

static int emit(const char *prog, const opts *o, llm_bench_format fmt, llm_bench_rows *rows)
{
    if (strcmp(o->out, "-") != 0) {   /* all or nothing: a failed write keeps the old file */
        llm_status st = {0};
        if (llm_bench_write_file(o->out, fmt, rows->v, rows->n, &st) == 0) return 0;
        fprintf(stderr, "%s: %s\n", prog, st.msg);
        return llm_exit_code(st.code);
    }
    if (llm_bench_write(stdout, fmt, rows->v, rows->n) != 0) {
        int err = errno;
        if (llm_cli_stdout_closed(err)) return 0;
        fprintf(stderr, "%s: write failed: %s\n", prog, strerror(err));
        return 74;
    }
    return 0;
}

/* Parse the options (pos may be NULL) and check the shared ones: -1 when the subcommand
 * should run, else its exit status (0 after --help).  seen (may be NULL) gets the options
 * given, for the subcommand's own checks. */
static int start(const llm_cli *cli, int argc, char **argv, llm_strlist *pos, opts *o,
                 llm_bench_format *fmt, int devs, llm_cli_seen *seen)
{
    llm_cli_seen own;
    if (!seen) seen = &own;
    int r = llm_cli_parse_seen(cli, argc, argv, pos, seen);
    if (r != LLM_CLI_RUN) return r == LLM_CLI_EXIT ? 0 : 64;
    for (const llm_opt *p = cli->opts; p->name; p++)   /* gemm and train have a --peak */
        if (!strcmp(p->name, "peak")) o->peak_given = llm_cli_given(cli, seen, "peak");
    r = check_common(cli->prog, o, fmt, devs);
    return r ? r : -1;
}

/* Report st and free rows; returns st's exit status. */
static int fail(const llm_log *lg, const llm_status *st, llm_bench_rows *rows)
{
    llm_error(lg, "%s", st->msg);
    llm_bench_rows_free(rows);
    return llm_exit_code(st->code);
}

/* Write rows and free them; returns the exit status. */
static int finish(const char *prog, const opts *o, llm_bench_format fmt, llm_bench_rows *rows)
{
    int r = emit(prog, o, fmt, rows);
    llm_bench_rows_free(rows);
    return r;
}

/* The comma-separated items of list (copied into buf), at most cap of them: their count,
 * or -1 with a message when there are more or the list does not fit buf. */
static int split(const char *what, const char *list, char *buf, size_t blen, char **items,
                 int cap, const llm_log *lg)
{
    if ((size_t)snprintf(buf, blen, "%s", list) >= blen) {
        llm_error(lg, "%s: longer than %zu characters", what, blen - 1);
        return -1;
    }
    int n = 0;
    for (char *save = NULL, *t = strtok_r(buf, ",", &save); t; t = strtok_r(NULL, ",", &save)) {
        if (n == cap) {
            llm_error(lg, "%s: at most %d items", what, cap);
            return -1;
        }
        items[n++] = t;
    }
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
        {"dtype", 't', LLM_OPT_STR, &o.dtypes, "LIST", "cpu: f32, f64, bf16; cuda: f32, tf32, bf16, f16; comma-separated (default: f32)"},
        {"peak", 0, LLM_OPT_DOUBLE, &o.peak, "GFLOPS", "peak for peak_pct (default: cpu the measured f32 FMA peak, cuda a table)"},
        {0},
    };
    const llm_cli cli = {prog, "[options]",
                         "Time C = A B with OpenBLAS (cpu) or cuBLASLt (cuda) for each size and dtype.",
                         table, 0, 0, NULL};
    llm_bench_format fmt;
    int r = start(&cli, argc, argv, NULL, &o, &fmt, DEV_GPU, NULL);
    if (r >= 0) return r;
    llm_log lg = llm_log_make(prog, o.quiet, o.verbose);
    char sbuf[1024], dbuf[256];
    char *sz[64], *dt[8];
    int nsz = split("--sizes", o.sizes, sbuf, sizeof sbuf, sz, 64, &lg), ndt = 0;
    if (nsz < 0 || (ndt = split("--dtype", o.dtypes, dbuf, sizeof dbuf, dt, 8, &lg)) < 0) return 64;
    if (nsz == 0 || ndt == 0) { llm_error(&lg, "empty --sizes or --dtype"); return 64; }
    int cuda = !strcmp(o.device, "cuda");
    double peak = o.peak;   /* cuda: <= 0 means the table's peak for each dtype */
    if (!cuda) {
        peak = o.peak > 0 ? o.peak : llm_bench_cpu_peak_gflops(o.threads);
        llm_debug(&lg, "measured f32 FMA peak: %.1f GFLOP/s", peak);
    }
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
            llm_bench_gemm_opts g = {M, N, K, dt[d], o.threads, o.warmup, o.reps, peak, o.peak > 0};
            llm_bench_row row;
            if ((cuda ? llm_bench_gemm_cuda(&g, &row, &st) : llm_bench_gemm(&g, &row, &st)) ||
                llm_bench_rows_push(&rows, &row, &st)) {
                return fail(&lg, &st, &rows);
            }
        }
    return finish(prog, &o, fmt, &rows);
}

static int run_mem(int argc, char **argv)
{
    const char *prog = "llm-bench mem";
    opts o;
    opts_default(&o);
    o.size = "64M";
    o.ops = NULL;
    const llm_opt table[] = {
        COMMON_OPTS(o),
        {"size", 's', LLM_OPT_STR, &o.size, "BYTES", "bytes per array, K/M/G suffixes (default: 64M)"},
        {"op", 0, LLM_OPT_STR, &o.ops, "LIST",
         "cpu: copy, triad; cuda: copy, memcpy, triad, h2d, d2h; comma-separated (default: all of them)"},
        {0},
    };
    const llm_cli cli = {prog, "[options]",
                         "STREAM-style copy and triad bandwidth; on cuda also cudaMemcpy and pinned host<->device.",
                         table, 0, 0, NULL};
    llm_bench_format fmt;
    int r = start(&cli, argc, argv, NULL, &o, &fmt, DEV_GPU, NULL);
    if (r >= 0) return r;
    llm_log lg = llm_log_make(prog, o.quiet, o.verbose);
    size_t bytes;
    if (llm_bench_parse_size(o.size, &bytes) || bytes < 4) {
        llm_error(&lg, "size '%s': use a byte count like 64M", o.size);
        return 64;
    }
    int cuda = !strcmp(o.device, "cuda");
    char obuf[128];
    char *ops[8];
    int nops = split("--op", o.ops ? o.ops : cuda ? "copy,memcpy,triad,h2d,d2h" : "copy,triad",
                     obuf, sizeof obuf, ops, 8, &lg);
    if (nops < 0) return 64;
    llm_bench_rows rows = {0};
    llm_status st = {0};
    for (int i = 0; i < nops; i++) {
        llm_bench_row row;
        if ((cuda ? llm_bench_mem_cuda(ops[i], bytes, o.warmup, o.reps, &row, &st)
                  : llm_bench_mem(ops[i], bytes, o.threads, o.warmup, o.reps, &row, &st)) ||
            llm_bench_rows_push(&rows, &row, &st)) {
            return fail(&lg, &st, &rows);
        }
    }
    return finish(prog, &o, fmt, &rows);
}

static int run_coll(const char *coll, int argc, char **argv)
{
    char prog[64];
    snprintf(prog, sizeof prog, "llm-bench %s", coll);
    opts o;
    opts_default(&o);
    o.minb = "1K";
    o.maxb = "16M";
    const char *dist_init = NULL;
    double dist_timeout = 600;
    const llm_opt table[] = {
        COMMON_OPTS(o),
        {"minbytes", 'b', LLM_OPT_STR, &o.minb, "BYTES", "smallest size (default: 1K)"},
        {"maxbytes", 'e', LLM_OPT_STR, &o.maxb, "BYTES", "largest size (default: 16M)"},
        {"stepfactor", 'f', LLM_OPT_DOUBLE, &o.factor, "F", "size multiplier between rows (default: 4)"},
        {"dist-init", 0, LLM_OPT_STR, &dist_init, "file:PATH|tcp://HOST:PORT",
         "cuda: NCCL id exchange for ranks from RANK/WORLD_SIZE or Slurm (no MPI)"},
        {"dist-timeout", 0, LLM_OPT_DOUBLE, &dist_timeout, "SECONDS",
         "end the job (exit 70) when a collective waits longer (600)"},
        {0},
    };
    const llm_cli cli = {prog, "[options]",
                         "Collective bandwidth with nccl-tests' size, time, algbw and busbw: cpu over "
                         "MPI on host memory; cuda over NCCL on device memory, one process per GPU "
                         "(mpirun -np N, srun, or --dist-init), out-of-place and in-place rows, the "
                         "result checked.",
                         table, 0, 0, NULL};
    llm_bench_format fmt;
    int r = start(&cli, argc, argv, NULL, &o, &fmt, DEV_NCCL, NULL);
    if (r >= 0) return r;
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
    if (!(dist_timeout > 0)) {
        llm_error(&lg, "--dist-timeout must be positive");
        return 64;
    }
    int cuda = !strcmp(o.device, "cuda");
    llm_status st = {0};
    /* cuda: no GPU is LLM_ENODEV ("nccl: no CUDA device: ...") from llm_dist_init or
     * llm_dist_nccl_self, before any rank waits for the others; no probe here, which would
     * make a context on GPU 0 in every rank */
    llm_dist *d = NULL;  /* ranks from mpirun (MPI builds), srun or --dist-init; else one rank */
    /* while the ranks meet, a signal is a request that ends the waits (and rank 0 removes
     * its --dist-init file: id), as in llm-train; afterwards the dispositions it had */
    llm_sigstop_catch();
    llm_dist_opts dopt = {dist_init, dist_timeout, cuda, &lg, llm_sigstop_flag()};
    int drc = llm_dist_init(&d, &dopt, &st);
    llm_sigstop_restore();
    if (drc && st.code == LLM_EINTR && *llm_sigstop_flag()) {
        llm_info(&lg, "stopped on a signal during the start-up, %s: nothing measured", st.msg);
        return 0;
    }
    if (!drc && *llm_sigstop_flag()) {
        llm_info(&lg, "stopped on a signal during the start-up: nothing measured");
        llm_dist_free(d);
        return 0;
    }
    if (drc || (cuda && llm_dist_nccl_self(d, &st))) {
        llm_error(&lg, "%s", st.msg);
        llm_dist_free(d);
        return llm_exit_code(st.code);
    }
    if (llm_dist_world(d) == 1)
        llm_warn(&lg, cuda ? "1 rank: a one-rank NCCL communicator (one process per GPU: mpirun "
                             "-np N, srun, or --dist-init)"
                           : "1 rank (not started by mpirun, or no MPI in this build): timing the "
                             "local copy path");
    llm_bench_rows rows = {0};
    for (double s = (double)lo; s <= (double)hi * (1 + 1e-9); s *= o.factor) {
        llm_bench_row row[2];
        int k = 0;
        if (cuda ? llm_bench_collective_cuda(coll, d, (size_t)s, o.warmup, o.reps, row, &st)
                 : llm_bench_collective_dist(coll, d, (size_t)s, o.warmup, o.reps, row, &st))
            k = -1;
        for (int i = 0; k >= 0 && i < (cuda ? 2 : 1); i++)
            if (llm_bench_rows_push(&rows, &row[i], &st)) k = -1;
        if (k < 0) {
            r = fail(&lg, &st, &rows);
            llm_dist_abort(d, r);
            llm_dist_free(d);
            return r;
        }
    }
    r = llm_dist_rank(d) ? 0 : emit(prog, &o, fmt, &rows);  /* rank 0 reports */
    llm_bench_rows_free(&rows);
    llm_dist_free(d);
    return r;
}

/* train and infer: MODEL.llmk or --config FILE, a list of batch sizes. */
static int run_model(int train, int argc, char **argv)
{
    const char *prog = train ? "llm-bench train" : "llm-bench infer";
    opts o;
    opts_default(&o);
    o.reps = 3;
    o.warmup = 1;
    const char *config = NULL, *batches = train ? "4" : "1,2,4", *prec = NULL;
    int T = 0, gen = 16;
    const llm_opt table_train[] = {
        COMMON_OPTS(o),
        {"config", 'c', LLM_OPT_STR, &config, "FILE", "llm-train config: random-init model of its shape"},
        {"batch", 'b', LLM_OPT_STR, &batches, "LIST", "batch sizes, comma-separated (default: 4)"},
        {"seq", 's', LLM_OPT_INT, &T, "T", "sequence length (default: train.seq_len or max_seq_len)"},
        {"seq", 't', LLM_OPT_INT, &T, "T", NULL},   /* llm-profile's spelling */
        {"precision", 'p', LLM_OPT_STR, &prec, "P",
         "fp32, bf16 or fp16 matmul operands, as llm-train (default: the config's train.precision, else fp32)"},
        {"peak", 0, LLM_OPT_DOUBLE, &o.peak, "GFLOPS", "peak for MFU (default: cpu the measured FMA peak, cuda the table peak of the precision)"},
        {0},
    };
    const llm_opt table_infer[] = {
        COMMON_OPTS(o),
        {"batch", 'b', LLM_OPT_STR, &batches, "LIST", "batch sizes, comma-separated (default: 1,2,4)"},
        {"seq", 's', LLM_OPT_INT, &T, "T", "prompt tokens per sequence (default: max_seq_len/2)"},
        {"seq", 't', LLM_OPT_INT, &T, "T", NULL},   /* llm-profile's spelling */
        {"gen", 'g', LLM_OPT_INT, &gen, "N", "decode steps timed per repetition (default: 16)"},
        {0},
    };
    const llm_cli cli = {prog, train ? "MODEL.llmk | --config FILE [options]" : "MODEL.llmk [options]",
                         train ? "Training throughput: tokens/s, ms/step and MFU per batch size."
                               : "Prefill and decode tokens/s, time to first token and per output token.",
                         train ? table_train : table_infer, 0, 1, NULL};
    llm_strlist pos = {0};
    llm_bench_format fmt;
    llm_cli_seen seen;
    int r = start(&cli, argc, argv, &pos, &o, &fmt, DEV_MODEL, &seen);
    const char *model = pos.n ? pos.v[0] : NULL;  /* a string of argv: outlives pos */
    llm_strlist_free(&pos);
    if (r >= 0) return r;
    llm_log lg = llm_log_make(prog, o.quiet, o.verbose);
    /* 0 in T is "not given" (the config's or the model's length): a typed 0 is no length */
    if (llm_cli_given(&cli, &seen, "seq") && T < 1) { llm_error(&lg, "--seq must be >= 1"); return 64; }
    if (!!model == !!config) { llm_error(&lg, "give a model file%s", train ? " or --config FILE (one of them)" : ""); return 64; }
    llm_precision precision = LLM_PREC_FP32;
    if (prec && llm_plan_precision_parse(prec, &precision)) {
        llm_error(&lg, "precision '%s': use fp32, bf16 or fp16", prec);
        return 64;
    }
    llm_status st = {0};
    llm_train_config tc;
    llm_model_config mc;
    int maxT = 0;
    double loss_scale = 0;
    long long ls_window = 0;
    if (config) {
        llm_config_defaults(&tc);
        if (llm_config_load(&tc, config, &st)) { llm_error(&lg, "%s", st.msg); return llm_exit_code(st.code); }
        memset(&mc, 0, sizeof mc);
        snprintf(mc.arch, sizeof mc.arch, "%.15s", tc.arch);
        mc.n_layer = tc.n_layer; mc.n_head = tc.n_head; mc.n_embd = tc.n_embd;
        mc.vocab_size = tc.vocab_size; mc.max_seq_len = tc.max_seq_len;
        mc.padded_vocab = tc.padded_vocab_size ? tc.padded_vocab_size : (tc.vocab_size + 127) / 128 * 128;
        if (!T) T = tc.seq_len;
        /* the config's precision and loss scaling unless --precision says otherwise */
        if (!prec && llm_plan_precision_parse(tc.precision, &precision)) {
            llm_error(&lg, "%s: train.precision '%s': use fp32, bf16 or fp16", config, tc.precision);
            return 65;   /* a bad config, as in llm-train */
        }
        loss_scale = tc.loss_scale;
        ls_window = (long long)tc.loss_scale_window;
    } else {
        llm_ckpt *ck;
        if (llm_ckpt_open(&ck, model, LLM_CKPT_HEADER_ONLY, &st)) { llm_error(&lg, "%s", st.msg); return llm_exit_code(st.code); }
        const llm_node *sec = llm_ckpt_section(ck, "model");
        const llm_node *mt = sec ? llm_node_get(sec, "max_seq_len") : NULL;
        if (mt) llm_node_int(mt, &maxT);
        llm_ckpt_close(ck);
        if (!T) T = train ? maxT : maxT / 2;
    }
    if (T < 1) { llm_error(&lg, "cannot tell the sequence length: give --seq"); return 64; }
    if (!train && gen < 1) { llm_error(&lg, "--gen must be >= 1"); return 64; }
    char bbuf[256];
    char *bl[32];
    int nb = split("--batch", batches, bbuf, sizeof bbuf, bl, 32, &lg);
    if (nb < 0) return 64;
    llm_bench_rows rows = {0};
    for (int i = 0; i < nb; i++) {
        int B;
        if (llm_parse_int(bl[i], &B) || B < 1 || B > 4096) {
            llm_error(&lg, "batch '%s': use integers in 1..4096", bl[i]);
            llm_bench_rows_free(&rows);
            return 64;
        }
        llm_bench_model_opts mo = {model, config ? &mc : NULL, o.device, o.threads, o.warmup, o.reps,
                                   B, T, gen, o.peak, precision, loss_scale, ls_window};
        llm_bench_row out[2];
        int rc = train ? llm_bench_train(&mo, &out[0], &st) : llm_bench_infer(&mo, out, &st);
        for (int k = 0; !rc && k < (train ? 1 : 2); k++) rc = llm_bench_rows_push(&rows, &out[k], &st);
        if (rc) {
            return fail(&lg, &st, &rows);
        }
    }
    return finish(prog, &o, fmt, &rows);
}

static int run_train(int c, char **v) { return run_model(1, c, v); }
static int run_infer(int c, char **v) { return run_model(0, c, v); }
static int run_allreduce(int c, char **v) { return run_coll("allreduce", c, v); }
static int run_allgather(int c, char **v) { return run_coll("allgather", c, v); }
static int run_reducescatter(int c, char **v) { return run_coll("reducescatter", c, v); }
static int run_broadcast(int c, char **v) { return run_coll("broadcast", c, v); }

int main(int argc, char **argv)
{
    llm_cli_quiet_sigpipe();
    static const llm_subcmd subs[] = {
        {"gemm", "GEMM GFLOP/s and % of peak (OpenBLAS; cuBLASLt on cuda)", run_gemm},
        {"mem", "memory bandwidth: copy and triad GB/s (cuda: also memcpy, h2d, d2h)", run_mem},
        {"allreduce", "allreduce size, time, algbw, busbw", run_allreduce},
        {"allgather", "allgather size, time, algbw, busbw", run_allgather},
        {"reducescatter", "reducescatter size, time, algbw, busbw", run_reducescatter},
        {"broadcast", "broadcast size, time, algbw, busbw", run_broadcast},
        {"train", "training tokens/s, ms/step, MFU per batch size", run_train},
        {"infer", "prefill/decode tokens/s, TTFT, TPOT per batch size", run_infer},
        {0},
    };
    return llm_cli_dispatch("llm-bench", "Benchmarks with one result schema.", subs, argc, argv);
}
