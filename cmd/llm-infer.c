/* llm-infer — generate, score (perplexity) and serve from a checkpoint (man 1 llm-infer). */
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "common/cli.h"
#include "common/infer.h"
#include "common/infer_eval.h"
#include "common/infer_io.h"
#include "common/infer_net.h"
#include "common/infer_sched.h"
#include "common/infer_tp.h"
#include "common/dist.h"
#include "common/json.h"
#include "common/log.h"
#include "common/tokfile.h"
#include "kernels/backend.h"

#define MAX_PROMPT_FILE (64u << 20)

/* Whole file (or stdin for "-") as one NUL-terminated prompt. */
static int read_file(const char *path, char **out, llm_status *st)
{
    FILE *f = strcmp(path, "-") == 0 ? stdin : fopen(path, "rb");
    if (!f)
        return llm_err(st, LLM_ENOINPUT, "cannot open '%s': %s", path, strerror(errno));
    size_t n = 0, cap = 4096;
    char *b = malloc(cap);
    int rc = LLM_OK;
    while (b) {
        if (n > MAX_PROMPT_FILE) {   /* read one byte past the limit at most */
            rc = llm_err(st, LLM_EDATA, "'%s': prompt file larger than 64 MiB", path);
            break;
        }
        if (n + 1 >= cap) {
            char *p = realloc(b, cap * 2);
            if (!p) {
                free(b);
                b = NULL;   /* out of memory, below: not a prompt cut short */
                break;
            }
            b = p;
            cap *= 2;
        }
        size_t want = cap - 1 - n;
        if (want > MAX_PROMPT_FILE + 1 - n)
            want = MAX_PROMPT_FILE + 1 - n;
        size_t r = fread(b + n, 1, want, f);
        n += r;
        if (r == 0)
            break;
    }
    if (!b)
        rc = llm_err(st, LLM_ENOMEM, "out of memory");
    else if (!rc && ferror(f))
        rc = llm_err(st, LLM_EIO, "reading '%s': %s", path, strerror(errno));
    if (f != stdin)
        fclose(f);
    if (rc) {
        free(b);
        return rc;
    }
    b[n] = 0;
    *out = b;
    return LLM_OK;
}

/* The model file of this rank: PREFIX-tp{rank}-pp0.llmk for --shards (or
 * PREFIX-tp{rank}.llmk), and "{rank}" in a path replaced by the rank. */
static int shard_path(char *buf, size_t cap, const char *model, const char *shards, int rank,
                      llm_status *st)
{
    size_t n;
    if (shards) {
        n = (size_t)snprintf(buf, cap, "%s-tp%d-pp0.llmk", shards, rank);
        if (n < cap && access(buf, F_OK) != 0) {
            char alt[4096];
            if ((size_t)snprintf(alt, sizeof alt, "%s-tp%d.llmk", shards, rank) < sizeof alt &&
                access(alt, F_OK) == 0)
                n = (size_t)snprintf(buf, cap, "%s", alt);
        }
    } else {
        const char *r = strstr(model, "{rank}");
        n = r ? (size_t)snprintf(buf, cap, "%.*s%d%s", (int)(r - model), model, rank, r + 6)
              : (size_t)snprintf(buf, cap, "%s", model);
    }
    if (n >= cap)
        return llm_err(st, LLM_EUSAGE, "model path too long");
    return LLM_OK;
}

static int backend(llm_backend *be, const char *device, int threads, const llm_log *lg,
                   llm_status *st)
{
    char err[256];
    int brc = llm_backend_init(be, device, threads, err, sizeof err);
    if (brc)
        return llm_err(st, llm_backend_code(brc), "device '%s': %s", device, err);
    if (err[0])   /* auto, and the GPU there could not be used */
        llm_warn(lg, "device auto: the GPU is not usable (%s); running on cpu", err);
    if (strcmp(device, "auto") == 0 && llm_infer_backend_ready(be, st) != LLM_OK) {
        /* a GPU backend without inference kernels: the CPU can still serve */
        llm_status_clear(st);
        llm_backend_free(be);
        if (llm_backend_init(be, "cpu", threads, err, sizeof err) != 0)
            return llm_err(st, LLM_ENODEV, "device 'cpu': %s", err);
    }
    if (llm_infer_backend_ready(be, st)) {
        llm_backend_free(be);
        return st->code;
    }
    return LLM_OK;
}

/* SIGINT or SIGTERM while generating: the requests in flight are answered with what they
 * have (llm_infer_io.stop); a second one ends the program at once. */
static volatile sig_atomic_t stop_requested;

static void on_stop(int sig)
{
    if (stop_requested) {
        signal(sig, SIG_DFL);
        raise(sig);
    }
    stop_requested = 1;
}

static void catch_stop(void)
{
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_stop;   /* no SA_RESTART: a read waiting for input returns */
    sigemptyset(&sa.sa_mask);
    sigaction(SIGINT, &sa, NULL);
    sigaction(SIGTERM, &sa, NULL);
}

int main(int argc, char **argv)
{
    const char *prompt = NULL, *file = NULL, *eval = NULL, *device = "auto", *shards = NULL;
    const char *listen_addr = NULL;
    /* --seed is taken as text, since every int64 can be typed (INT64_MIN meant "not
     * given" once, so --seed -9223372036854775808 was random), and parsed below */
    const char *seed_arg = NULL;
    int max_tokens = 128, top_k = 0, jsonl = 0, batch = 1, ctx = 0, stride = 0, stats = 0;
    int threads = 0, quiet = 0, verbose = 0;
    int64_t seed = 0;
    double temperature = 1.0, top_p = 1.0, idle_timeout = LLM_INFER_NET_IDLE_S;
    llm_strlist stops = {0}, pos = {0};
    const llm_opt opts[] = {
        {"prompt", 'p', LLM_OPT_STR, &prompt, "TEXT", "generate from this prompt"},
        {"file", 'f', LLM_OPT_STR, &file, "FILE", "generate from the whole of FILE as one prompt"},
        {"max-tokens", 'n', LLM_OPT_INT, &max_tokens, "N", "tokens to generate at most (default: 128)"},
        {"seed", 0, LLM_OPT_STR, &seed_arg, "N", "sampling seed (default: random); request i uses N+i"},
        {"temperature", 0, LLM_OPT_DOUBLE, &temperature, "T", "softmax temperature; 0 is greedy (default: 1)"},
        {"top-k", 0, LLM_OPT_INT, &top_k, "K", "sample from the K most likely tokens (default: 0, off)"},
        {"top-p", 0, LLM_OPT_DOUBLE, &top_p, "P", "nucleus sampling mass (default: 1, off)"},
        {"stop", 0, LLM_OPT_STRS, &stops, "TEXT", "stop when TEXT is generated (repeatable)"},
        {"jsonl", 0, LLM_OPT_FLAG, &jsonl, NULL, "stdin holds JSON request objects, stdout gets responses"},
        {"listen", 0, LLM_OPT_STR, &listen_addr, "ADDR",
         "serve JSON requests from clients of HOST:PORT or unix:PATH"},
        {"idle-timeout", 0, LLM_OPT_DOUBLE, &idle_timeout, "SECONDS",
         "--listen: close a client stalled that long on part of a line or on unread "
         "responses (default: 60; 0: never)"},
        {"batch", 0, LLM_OPT_INT, &batch, "N", "decode up to N requests together (default: 1)"},
        {"eval", 0, LLM_OPT_STR, &eval, "TOKENS.bin", "print the perplexity over a token file"},
        {"ctx", 0, LLM_OPT_INT, &ctx, "N", "--eval window length (default: the model's context)"},
        {"stride", 0, LLM_OPT_INT, &stride, "S", "--eval window step (default: --ctx)"},
        {"stats", 0, LLM_OPT_FLAG, &stats, NULL, "one JSON line of throughput and latency on stderr"},
        {"threads", 'j', LLM_OPT_INT, &threads, "N", "CPU threads (default: 0, all cores)"},
        {"threads", 't', LLM_OPT_INT, &threads, "N", NULL},   /* the earlier spelling */
        {"device", 0, LLM_OPT_STR, &device, "DEV", "cpu, cpu-ref, cuda or auto: cuda when a GPU is usable (default: auto)"},
        {"shards", 0, LLM_OPT_STR, &shards, "PREFIX", "under mpirun: rank r loads PREFIX-tp{r}-pp0.llmk"},
        {"quiet", 'q', LLM_OPT_FLAG, &quiet, NULL, "errors only on stderr"},
        {"verbose", 'v', LLM_OPT_COUNT, &verbose, NULL, "more diagnostics"},
        {0},
    };
    static const llm_env env[] = {
        {"LLM_CPU_GEMM", "omp (default) or blas: who threads the CPU matrix products"},
        {"LLM_CUDA_DEVICE", "GPU ordinal of --device cuda"},
        {"LLM_CUDA_GRAPHS", "0: launch every kernel of a decode step (no CUDA graphs)"},
        {"LLM_CUDA_TF32", "1: fp32 matrix products on TF32 tensor cores"},
        {"LLM_CUDA_FLASH", "0 or wmma: the attention kernels, as in llm-train(1)"},
        {"LLM_CUDA_OFF", "optional CUDA parts to leave out, as in llm-train(1)"},
        {"LLM_Q4_REPACK", "0: never repack q4_0 weights at load; 1: whenever AVX2"},
        {0},
    };
    const llm_cli cli = {"llm-infer", "MODEL.llmk|--shards PREFIX [options]",
                         "Generate text, score perplexity or serve requests from a model file.",
                         opts, 0, 1, env};
    llm_cli_seen seen;
    int r = llm_cli_parse_seen(&cli, argc, argv, &pos, &seen);
    if (r != LLM_CLI_RUN) {
        llm_strlist_free(&stops);
        llm_strlist_free(&pos);
        return r == LLM_CLI_EXIT ? 0 : 64;
    }
    llm_log lg = llm_log_make("llm-infer", quiet, verbose);
    const char *model_arg = pos.n ? pos.v[0] : NULL;
    const char *bad = NULL;
    char why[128];   /* a message that names a limit */
    /* 0 in ctx and stride is "not given" (the model's context, --ctx): a typed 0 is no
     * window and refused */
    int ctx_given = llm_cli_given(&cli, &seen, "ctx"), stride_given = llm_cli_given(&cli, &seen, "stride");
    if (!model_arg == !shards) bad = "give one MODEL.llmk or --shards PREFIX";
    else if (prompt && file) bad = "-p and -f exclude each other";
    else if (eval && (prompt || file || jsonl)) bad = "--eval excludes -p, -f and --jsonl";
    else if (jsonl && (prompt || file)) bad = "--jsonl reads stdin; it excludes -p and -f";
    else if (listen_addr && (prompt || file || eval || jsonl))
        bad = "--listen serves JSON requests; it excludes -p, -f, --eval and --jsonl";
    else if (!eval && (ctx_given || stride_given)) bad = "--ctx and --stride go with --eval";
    else if (!listen_addr && llm_cli_given(&cli, &seen, "idle-timeout"))
        bad = "--idle-timeout goes with --listen";
    else if (!(idle_timeout >= 0 && idle_timeout <= LLM_INFER_NET_IDLE_MAX_S)) {
        snprintf(why, sizeof why, "--idle-timeout must be in 0..%d seconds",
                 LLM_INFER_NET_IDLE_MAX_S);
        bad = why;
    }
    else if (max_tokens < 0) bad = "-n must be >= 0";
    else if (seed_arg && llm_parse_i64_range(seed_arg, 0, INT64_MAX, &seed))
        bad = "--seed must be an integer >= 0";
    else if (batch < 1 || batch > 1024) bad = "--batch must be in 1..1024";
    else if (threads < 0) bad = "--threads must be >= 0";
    else if (!llm_backend_known(device)) bad = "--device must be cpu, cpu-ref, cuda or auto";
    else if (top_k < 0) bad = "--top-k must be >= 0";
    else if (!(top_p > 0 && top_p <= 1)) bad = "--top-p must be in (0, 1]";
    else if (!(temperature >= 0)) bad = "--temperature must be >= 0";
    else if ((ctx_given && ctx < 1) || (stride_given && stride < 1))
        bad = "--ctx and --stride must be positive";
    for (int i = 0; !bad && i < stops.n; i++)
        if (!stops.v[i][0] || strlen(stops.v[i]) > LLM_INFER_MAX_STOP_LEN) {
            snprintf(why, sizeof why, "--stop needs 1..%d bytes", LLM_INFER_MAX_STOP_LEN);
            bad = why;
        }
    if (!bad && stops.n > LLM_INFER_MAX_STOPS) {
        snprintf(why, sizeof why, "at most %d --stop strings", LLM_INFER_MAX_STOPS);
        bad = why;
    }
    if (bad) {
        llm_error(&lg, "%s (see --help)", bad);
        llm_strlist_free(&stops);
        llm_strlist_free(&pos);
        return 64;
    }
    llm_cli_quiet_sigpipe();
    if (!seed_arg)
        seed = (int64_t)(((uint64_t)time(NULL) * 0x9e3779b97f4a7c15ull ^ (uint64_t)getpid()) >> 1);

    llm_status st = {0};
    llm_backend be;
    llm_infer_model *m = NULL;
    llm_infer_ctx *c = NULL;
    llm_infer_tp *tp = NULL;
    char *file_text = NULL, model_path[4096];
    /* under mpirun the ranks are tensor-parallel peers (infer_tp.h); the collectives wait
     * for rank 0, which may sit idle on stdin, hence no short watchdog */
    llm_dist *dist = NULL;
    /* Open MPI: ranks that wait in a collective yield the core (decode does ~4 collectives
     * a layer, and ranks often share cores); a setting from the user wins */
    setenv("OMPI_MCA_mpi_yield_when_idle", "1", 0);
    llm_dist_opts dopt = {NULL, 1e7, 0, &lg, NULL};
    int rc = llm_dist_init(&dist, &dopt, &st);
    int rank = rc ? 0 : llm_dist_rank(dist), world = rc ? 1 : llm_dist_world(dist);
    if (!rc && !threads && world > 1) {
        /* ranks share the node: one thread each unless there are cores to spare */
        const char *ls = getenv("OMPI_COMM_WORLD_LOCAL_SIZE");
        long local = ls ? atol(ls) : world, ncpu = sysconf(_SC_NPROCESSORS_ONLN);
        threads = local > 0 && ncpu / local > 1 ? (int)(ncpu / local) : 1;
    }
    if (rank > 0)
        lg = llm_log_make("llm-infer", 1, 0);   /* one voice: rank 0's */
    if (!rc)
        rc = shard_path(model_path, sizeof model_path, model_arg, shards, rank, &st);
    int have_be = 0, exit_code = 0;
    if (!rc) {
        rc = backend(&be, device, threads, &lg, &st);
        have_be = rc == LLM_OK;
    }
    if (!rc) {
        rc = llm_infer_model_open(&m, model_path, &be, 1, &st);
        if (rc == LLM_ENODEV && !strcmp(device, "auto") && strcmp(be.name, "cpu") != 0) {
            /* auto chose the GPU, which cannot run these weights (quantized): the CPU can */
            llm_info(&lg, "device auto: %s; running on cpu", st.msg);
            llm_status_clear(&st);
            llm_backend_free(&be);
            rc = backend(&be, "cpu", threads, &lg, &st);
            have_be = rc == LLM_OK;
            if (!rc)
                rc = llm_infer_model_open(&m, model_path, &be, 1, &st);
        }
    }
    if (!rc && eval) {
        if (!ctx) ctx = m->cfg.max_seq_len;
        if (!stride) stride = ctx;
        rc = llm_infer_ctx_new(&c, m, 1, ctx < 512 ? ctx : 512, &st);
    } else if (!rc) {
        int T = m->cfg.max_seq_len;
        rc = llm_infer_ctx_new(&c, m, batch, T < 512 ? T : 512, &st);
    }
    if (!rc && !eval)
        catch_stop();   /* every rank: a follower keeps following until rank 0 stops it */
    int quiet_err = 0;   /* a follower's group error: rank 0 reports it */
    if (dist && (world > 1 || (m && m->tp_size > 1))) {
        if (rc && rank > 0)
            llm_error(&lg, "rank %d: %s", rank, st.msg);   /* its own reason; rank 0 the group's */
        rc = llm_infer_tp_join(&tp, dist, m, rc, &st);
        quiet_err = rc && rank > 0;
        if (!rc && rank > 0 && (rc = llm_infer_tp_follow(tp, c, &st))) {
            llm_error(&lg, "rank %d: %s", rank, st.msg);
            llm_dist_abort(dist, llm_exit_code(st.code));   /* rank 0 would wait for it */
        }
        if (!rc && world > 1)
            llm_debug(&lg, "tensor parallel over %d ranks (%s), %d thread(s) each", world,
                      llm_dist_kind(dist), be.threads);
    }
    if (!rc && rank == 0)
        llm_debug(&lg, "%s: %d layers, %d heads, %d channels, context %d, %.1f MB of weights "
                 "(%.1f MB of them repacked at load); device %s, %d thread(s)", model_path,
                 m->cfg.n_layer, m->cfg.n_head, m->cfg.n_embd, m->cfg.max_seq_len,
                 m->weight_bytes / 1e6, m->repack_bytes / 1e6, be.name, be.threads);
    if (!rc && rank == 0 && eval) {
        llm_tokfile tf;
        rc = llm_tokfile_open(&tf, eval, m->cfg.vocab_size, &st);
        if (!rc) {
            llm_infer_eval_result er;
            rc = llm_infer_eval(c, m, &tf, ctx, stride, &er, &st);
            if (!rc) {
                llm_json j;
                llm_json_init(&j, stdout, 0);
                llm_json_obj_begin(&j);
                llm_json_kint(&j, "tokens", (int64_t)er.tokens);
                llm_json_knum(&j, "nll", er.nll);
                llm_json_knum(&j, "ppl", er.ppl);
                llm_json_kint(&j, "ctx", ctx);
                llm_json_kint(&j, "stride", stride);
                llm_json_knum(&j, "tokens_per_s", er.seconds > 0 ? er.tokens / er.seconds : 0.0);
                llm_json_obj_end(&j);
                putchar('\n');
                if (fflush(stdout) != 0 || ferror(stdout)) {
                    if (!llm_cli_stdout_closed(errno))
                        rc = llm_err(&st, LLM_EIO, "writing output: %s", strerror(errno));
                }
            }
            llm_tokfile_close(&tf);
        }
    } else if (!rc && rank == 0) {
        const char *one[1];
        llm_infer_source src = {0};
        src.tok = m->tok;
        src.vocab = m->cfg.vocab_size;
        src.ctx = m->cfg.max_seq_len;
        src.max_tokens = max_tokens;
        src.sp = (llm_sampler_params){llm_sampler_param(temperature), top_k,
                                      llm_sampler_param(top_p), (uint64_t)seed};
        src.stops = stops.v;
        src.n_stops = stops.n;
        src.jsonl = jsonl || listen_addr;
        if (file)
            rc = read_file(file, &file_text, &st);
        if (prompt || file) {
            one[0] = prompt ? prompt : file_text;
            src.prompts = one;
            src.n_prompts = 1;
        } else {
            src.in = listen_addr ? NULL : stdin;   /* --listen: lines come from its clients */
        }
        llm_infer_sink sink = {.out = stdout, .jsonl = jsonl, .err = stderr, .prog = "llm-infer"};
        sink.stream = src.n_prompts == 1 && !jsonl && isatty(STDOUT_FILENO);
        llm_infer_io io = {llm_infer_source_next, llm_infer_sink_token, llm_infer_sink_done,
                           &src, &sink, llm_infer_source_ready, &stop_requested};
        llm_infer_stats stt = {0};
        llm_infer_net *net = NULL;
        if (!rc) {
            llm_debug(&lg, "KV cache and activations: %.1f MB; seed %lld",
                     llm_infer_ctx_bytes(c) / 1e6, (long long)seed);
        }
        if (!rc && listen_addr) {
            char bound[300];
            rc = llm_infer_net_open(&net, listen_addr, idle_timeout, &src, &stop_requested, bound, sizeof bound, &st);
            if (!rc) {
                io = llm_infer_net_io(net);
                llm_info(&lg, "listening on %s", bound);
            }
        }
        if (!rc) {
            rc = llm_infer_run(c, m, batch, &io, &stt, &st);
            if (net && rc == LLM_EINTR) {   /* a signal is how a server ends */
                llm_info(&lg, "stopped after %ld request(s) (%s)", llm_infer_net_answered(net), st.msg);
                llm_status_clear(&st);
                rc = LLM_OK;
            }
            if (rc == LLM_OK || !sink.closed) {
                llm_status st2 = {0};
                if (llm_infer_sink_flush(&sink, &st2) && !rc) {
                    rc = st2.code;
                    st = st2;
                }
            }
            if (stats)
                llm_infer_stats_write(&stt, stderr);
            if (sink.closed)
                rc = LLM_OK, exit_code = 0;
            else if (!rc && !jsonl && sink.errors)
                exit_code = 65;
        }
        llm_infer_net_free(net);
        llm_infer_stats_free(&stt);
        llm_infer_sink_free(&sink);
        llm_infer_source_free(&src);
    }
    if (tp) {   /* release the followers whatever happened here */
        llm_status st2 = {0};
        if (llm_infer_tp_stop(tp, &st2) && !rc) {
            rc = st2.code;
            st = st2;
        }
    }
    if (rc) {
        if (!quiet_err && rank == 0)
            llm_error(&lg, "%s", st.msg);
        exit_code = llm_exit_code(st.code);
    }
    free(file_text);
    llm_infer_ctx_free(c);
    llm_infer_tp_free(tp);
    llm_infer_model_free(m);
    llm_dist_free(dist);
    if (have_be)
        llm_backend_free(&be);
    llm_strlist_free(&stops);
    llm_strlist_free(&pos);
    return exit_code;
}
