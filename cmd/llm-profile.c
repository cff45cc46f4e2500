/* llm-profile — where time and memory go, per op and per layer; the memory planner. */
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "common/bench.h"
#include "common/cli.h"
#include "common/config.h"
#include "common/log.h"
#include "common/plan.h"
#include "common/plan_time.h"
#include "common/profile_run.h"
#include "kernels/backend.h"

static int load_config(const char *prog, const char *path, llm_train_config *tc, llm_model_config *mc)
{
    llm_status st = {0};
    llm_config_defaults(tc);
    if (llm_config_load(tc, path, &st) || llm_profile_config_model(tc, mc, &st)) {
        fprintf(stderr, "%s: %s\n", prog, st.msg);
        return llm_exit_code(st.code);
    }
    return 0;
}

/* An option of plan given as 0 or less is refused (64); one not given stays at the value
 * that means "the default" (0).  Doubles start as NaN, which the parser never yields. */
static int plan_positive(const llm_log *lg, const char *name, double *v)
{
    if (isnan(*v)) { *v = 0; return 0; }
    if (*v > 0) return 0;
    llm_error(lg, "--%s %g: must be positive", name, *v);
    return 64;
}

static int plan_count(const llm_log *lg, const char *name, const char *s, int *out)
{
    if (!s) return 0;
    if (llm_parse_int(s, out) || *out < 1) {
        llm_error(lg, "--%s '%s': use an integer >= 1", name, s);
        return 64;
    }
    return 0;
}

static int run_plan(int argc, char **argv)
{
    const char *prog = "llm-profile plan";
    const char *config = NULL, *mem = NULL, *prec = "bf16", *rec = "none", *mode = "train",
               *device = "cuda";
    const char *bs = NULL, *ts = NULL, *gpn = NULL;
    int gpus = 1, zero = 0, tp = 1, pp = 1, B = 0, T = 0, json = 0, quiet = 0, verbose = 0;
    llm_plan_hw hw = {.peak_tflops = NAN, .mfu = NAN, .link_gbs = NAN, .net_gbs = NAN};
    int64_t gtok = 0;
    const llm_opt table[] = {
        {"config", 'c', LLM_OPT_STR, &config, "FILE", "llm-train YAML config (model: and train: sections)"},
        {"gpus", 'g', LLM_OPT_INT, &gpus, "N", "devices in all (default: 1)"},
        {"gpu-mem", 0, LLM_OPT_STR, &mem, "BYTES", "memory per device, K/M/G suffixes (binary), e.g. 80G"},
        {"precision", 'p', LLM_OPT_STR, &prec, "P", "fp32, bf16 or fp16 (default: bf16)"},
        {"zero", 'z', LLM_OPT_INT, &zero, "N", "ZeRO stage 0..3 (default: 0)"},
        {"tp", 0, LLM_OPT_INT, &tp, "N", "tensor-parallel size (default: 1)"},
        {"pp", 0, LLM_OPT_INT, &pp, "N", "pipeline-parallel size (default: 1)"},
        {"recompute", 0, LLM_OPT_STR, &rec, "R", "none, selective or full (default: none)"},
        {"batch", 'b', LLM_OPT_STR, &bs, "B", "micro-batch (default: train.batch_size)"},
        {"seq", 't', LLM_OPT_STR, &ts, "T", "sequence length (default: train.seq_len)"},
        {"mode", 'm', LLM_OPT_STR, &mode, "M", "train or infer (default: train)"},
        {"device", 'd', LLM_OPT_STR, &device, "DEV", "cuda or cpu (default: cuda)"},
        {"global-batch", 0, LLM_OPT_I64, &gtok, "TOKENS", "tokens per optimizer step (default: train.total_batch_tokens, else B*T*dp)"},
        {"peak-tflops", 0, LLM_OPT_DOUBLE, &hw.peak_tflops, "X", "dense peak per GPU (default: 989 bf16/fp16, 67 fp32)"},
        {"mfu", 0, LLM_OPT_DOUBLE, &hw.mfu, "F", "fraction of the peak reached (default: 0.4)"},
        {"gpus-per-node", 0, LLM_OPT_STR, &gpn, "N", "GPUs in one node (default: 8)"},
        {"link-bw", 0, LLM_OPT_DOUBLE, &hw.link_gbs, "GB/s", "collective bus bandwidth in a node (default: 360)"},
        {"net-bw", 0, LLM_OPT_DOUBLE, &hw.net_gbs, "GB/s", "bus bandwidth across nodes (default: 40)"},
        {"overlap", 0, LLM_OPT_FLAG, &hw.overlap, NULL, "model dp collectives overlapped with the backward"},
        {"json", 0, LLM_OPT_FLAG, &json, NULL, "one JSON document on stdout"},
        {"quiet", 'q', LLM_OPT_FLAG, &quiet, NULL, "errors only on stderr"},
        {"verbose", 'v', LLM_OPT_COUNT, &verbose, NULL, "more diagnostics"},
        {0},
    };
    const llm_cli cli = {prog, "--config FILE [options]",
                         "Predict per-device memory for a model, batch and parallel layout.", table, 0, 0, NULL};
    llm_cli_seen seen;
    int r = llm_cli_parse_seen(&cli, argc, argv, NULL, &seen);
    if (r != LLM_CLI_RUN) return r == LLM_CLI_EXIT ? 0 : 64;
    llm_log lg = llm_log_make(prog, quiet, verbose);
    if (!config) { llm_error(&lg, "--config FILE is required (try '%s --help')", prog); return 64; }
    /* 0 in gtok is "not given" (train.total_batch_tokens, else B T dp): a typed 0 is refused */
    if (llm_cli_given(&cli, &seen, "global-batch") && gtok < 1) {
        llm_error(&lg, "--global-batch %lld: must be positive", (long long)gtok);
        return 64;
    }
    if ((r = plan_count(&lg, "batch", bs, &B)) || (r = plan_count(&lg, "seq", ts, &T)) ||
        (r = plan_count(&lg, "gpus-per-node", gpn, &hw.gpus_per_node)) ||
        (r = plan_positive(&lg, "peak-tflops", &hw.peak_tflops)) || (r = plan_positive(&lg, "mfu", &hw.mfu)) ||
        (r = plan_positive(&lg, "link-bw", &hw.link_gbs)) || (r = plan_positive(&lg, "net-bw", &hw.net_gbs)))
        return r;
    llm_plan_config pc = {.gpus = gpus, .tp = tp, .pp = pp, .zero = zero};
    if (llm_plan_precision_parse(prec, &pc.precision)) { llm_error(&lg, "precision '%s': use fp32, bf16 or fp16", prec); return 64; }
    if (llm_plan_recompute_parse(rec, &pc.recompute)) { llm_error(&lg, "recompute '%s': use none, selective or full", rec); return 64; }
    if (strcmp(mode, "train") && strcmp(mode, "infer")) { llm_error(&lg, "mode '%s': use train or infer", mode); return 64; }
    if (strcmp(device, "cuda") && strcmp(device, "cpu")) { llm_error(&lg, "device '%s': use cuda or cpu", device); return 64; }
    pc.train = !strcmp(mode, "train");
    pc.cpu = !strcmp(device, "cpu");
    if (mem) {
        size_t b;
        if (llm_bench_parse_size(mem, &b) || b == 0) { llm_error(&lg, "gpu-mem '%s': use a size like 80G", mem); return 64; }
        pc.device_mem = (double)b;
    }
    llm_train_config tc;
    if ((r = load_config(prog, config, &tc, &pc.model))) return r;
    pc.batch = B > 0 ? B : tc.batch_size;
    pc.seq = T > 0 ? T : (pc.train ? tc.seq_len : pc.model.max_seq_len);
    llm_plan plan;
    llm_status st = {0};
    if (llm_plan_compute(&pc, &plan, &st)) { llm_error(&lg, "%s", st.msg); return llm_exit_code(st.code); }
    /* the step-time model: training on GPUs */
    llm_plan_time pt;
    int timed = pc.train && !pc.cpu;
    hw.global_tokens = gtok > 0 ? (double)gtok : (double)tc.total_batch_tokens;
    if (timed && llm_plan_time_compute(&pc, &plan, &hw, &pt, &st)) { llm_error(&lg, "%s", st.msg); return llm_exit_code(st.code); }
    if (json) {
        llm_json j;
        llm_json_init(&j, stdout, 1);
        llm_json_obj_begin(&j);
        llm_plan_write_json_members(&pc, &plan, &j);
        if (timed) {
            llm_json_key(&j, "time");
            llm_json_obj_begin(&j);
            llm_plan_time_write_json(&pt, &j);
            llm_json_obj_end(&j);
        }
        llm_json_obj_end(&j);
        fputc('\n', stdout);
    } else {
        llm_plan_write_table(&pc, &plan, stdout);
        if (timed) llm_plan_time_write_table(&pt, stdout);
    }
    if (fflush(stdout) != 0 || ferror(stdout)) return 74;
    return 0;
}

static int run_profile(int argc, char **argv)
{
    const char *prog = "llm-profile";
    const char *config = NULL, *device = "cpu", *mode = "train", *trace = NULL, *peaks = NULL, *prec = NULL;
    int threads = 0, B = 0, T = 0, steps = 0, warmup = 1, per_layer = 0, json = 0, quiet = 0, verbose = 0;
    double pg = 0, pb = 0;
    long long seed = 1234;
    const llm_opt table[] = {
        {"config", 'c', LLM_OPT_STR, &config, "FILE", "profile a random-init model of this llm-train config"},
        {"device", 'd', LLM_OPT_STR, &device, "DEV", "cpu, cpu-ref, cuda or auto (default: cpu)"},
        {"threads", 'j', LLM_OPT_INT, &threads, "N", "CPU threads (default: 0, all cores)"},
        {"batch", 'b', LLM_OPT_INT, &B, "B", "batch size (default: 4)"},
        {"seq", 't', LLM_OPT_INT, &T, "T", "sequence length (default: max_seq_len)"},
        {"mode", 'm', LLM_OPT_STR, &mode, "M", "train, prefill or decode (default: train)"},
        {"precision", 'p', LLM_OPT_STR, &prec, "P",
         "train: fp32, bf16 or fp16 GEMM operands and activations (default: the config's train.precision, else fp32)"},
        {"steps", 's', LLM_OPT_INT, &steps, "N", "train steps, prefill runs or decode tokens"},
        {"warmup", 'w', LLM_OPT_INT, &warmup, "N", "untimed steps first (default: 1)"},
        {"per-layer", 'l', LLM_OPT_FLAG, &per_layer, NULL, "one row per layer instead of folding layers"},
        {"json", 0, LLM_OPT_FLAG, &json, NULL, "one JSON document on stdout"},
        {"trace", 0, LLM_OPT_STR, &trace, "FILE", "write Chrome trace-event JSON to FILE"},
        {"peaks", 0, LLM_OPT_STR, &peaks, "FILE", "peaks from llm-bench JSON (measured and saved if absent)"},
        {"peak-gflops", 0, LLM_OPT_DOUBLE, &pg, "X", "compute peak in GFLOP/s"},
        {"peak-gbs", 0, LLM_OPT_DOUBLE, &pb, "X", "memory bandwidth peak in GB/s"},
        {"seed", 0, LLM_OPT_I64, &seed, "N", "seed of the random tokens and init (default: 1234)"},
        {"quiet", 'q', LLM_OPT_FLAG, &quiet, NULL, "errors only on stderr"},
        {"verbose", 'v', LLM_OPT_COUNT, &verbose, NULL, "more diagnostics"},
        {0},
    };
    const llm_cli cli = {prog, "MODEL.llmk | --config FILE [options]\n       llm-profile plan --config FILE [options]",
                         "Time every kernel call of training steps, a prefill or decode tokens; "
                         "memory predicted and measured.", table, 0, 1, NULL};
    for (int i = 1; i < argc && strcmp(argv[i], "--"); i++)
        if (!strcmp(argv[i], "--help") || !strcmp(argv[i], "-h")) {
            llm_cli_help(&cli, stdout);
            printf("\ncommands:\n  plan          per-device memory plan ('llm-profile plan --help')\n\n");
            return 0;
        }
    llm_strlist pos = {0};
    llm_cli_seen seen;
    int r = llm_cli_parse_seen(&cli, argc, argv, &pos, &seen);
    if (r != LLM_CLI_RUN) { llm_strlist_free(&pos); return r == LLM_CLI_EXIT ? 0 : 64; }
    llm_log lg = llm_log_make(prog, quiet, verbose);
    const char *model = pos.n ? pos.v[0] : NULL;
    llm_strlist_free(&pos);
    llm_profile_run_opts o = {.model_path = model, .device = device, .threads = threads, .B = B, .T = T,
                              .steps = steps, .warmup = warmup, .per_layer = per_layer, .json = json,
                              .trace_path = trace, .peaks = {pg, pb}, .seed = (unsigned long long)seed};
    /* 0 in pg, pb, B, T and steps is "not given" (the peaks measured or from --peaks, the
     * config's or the default batch and length, the mode's steps): a typed 0 is refused */
#define GIVEN(name) llm_cli_given(&cli, &seen, name)
    if ((GIVEN("peak-gflops") && !(pg > 0)) || (GIVEN("peak-gbs") && !(pb > 0))) {
        llm_error(&lg, "--peak-gflops and --peak-gbs must be positive");
        return 64;
    }
    if ((GIVEN("batch") && B < 1) || (GIVEN("seq") && T < 1) || (GIVEN("steps") && (steps < 1 || steps > 1000000))) {
        llm_error(&lg, "-b and -t must be >= 1, --steps in 1..1000000");
        return 64;
    }
#undef GIVEN
    if (!strcmp(mode, "train")) o.mode = LLM_PROFILE_TRAIN;
    else if (!strcmp(mode, "prefill")) o.mode = LLM_PROFILE_PREFILL;
    else if (!strcmp(mode, "decode")) o.mode = LLM_PROFILE_DECODE;
    else { llm_error(&lg, "mode '%s': use train, prefill or decode", mode); return 64; }
    if (prec && llm_plan_precision_parse(prec, &o.precision)) {
        llm_error(&lg, "precision '%s': use fp32, bf16 or fp16", prec);
        return 64;
    }
    if (prec && o.precision != LLM_PREC_FP32 && o.mode != LLM_PROFILE_TRAIN) {
        llm_error(&lg, "--precision %s is for --mode train", prec);
        return 64;
    }
    if (!!model == !!config) { llm_error(&lg, "give a model file or --config FILE (one of them)"); return 64; }
    if (!llm_backend_known(device)) {
        llm_error(&lg, "device '%s': use cpu, cpu-ref, cuda or auto", device);
        return 64;
    }
    if (warmup < 0 || warmup > 1000 || threads < 0) {
        llm_error(&lg, "--warmup must be in 0..1000 and --threads >= 0");
        return 64;
    }
    llm_train_config tc;
    llm_model_config mc;
    if (config) {
        if ((r = load_config(prog, config, &tc, &mc))) return r;
        o.config = &mc;
        if (!B) o.B = tc.batch_size;
        if (!T) o.T = tc.seq_len;
        /* the config's precision and loss scaling unless --precision says otherwise
         * (profiling an inference mode keeps fp32: the precision is llm-train's) */
        if (!prec && o.mode == LLM_PROFILE_TRAIN && llm_plan_precision_parse(tc.precision, &o.precision)) {
            llm_error(&lg, "%s: train.precision '%s': use fp32, bf16 or fp16", config, tc.precision);
            return 65;   /* a bad config, as in llm-train */
        }
        o.loss_scale = tc.loss_scale;
        o.loss_scale_window = (long long)tc.loss_scale_window;
    }
    llm_status st = {0};
    if (llm_profile_peaks_get_dev(&o.peaks, peaks, device, threads, &st)) {
        llm_error(&lg, "%s", st.msg);
        return llm_exit_code(st.code);
    }
    llm_debug(&lg, "peaks: %.1f GFLOP/s, %.1f GB/s", o.peaks.gflops, o.peaks.gbs);
    if (llm_profile_run(&o, stdout, &lg, &st)) {
        if (st.code == LLM_EIO && llm_cli_stdout_closed(errno)) return 0;
        llm_error(&lg, "%s", st.msg);
        return llm_exit_code(st.code);
    }
    return 0;
}

int main(int argc, char **argv)
{
    llm_cli_quiet_sigpipe();
    if (argc > 1 && !strcmp(argv[1], "plan")) return run_plan(argc - 1, argv + 1);
    return run_profile(argc, argv);
}
