/* llm-train — train a GPT-2 style model from a YAML config (man 1 llm-train). */
#include <errno.h>
#include <math.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "common/afile.h"
#include "common/cli.h"
#include "common/config.h"
#include "common/dist.h"
#include "common/env.h"
#include "common/log.h"
#include "common/sigstop.h"
#include "common/train.h"
#include "kernels/backend.h"

#define STOPPED_AT_START "stopped on a signal before training started: nothing written"

/* A signal since the config was read, before training started: nothing to save, and
 * nothing written yet. */
static int stopped_at_start(const llm_log *lg)
{
    if (!*llm_sigstop_flag())
        return 0;
    llm_info(lg, STOPPED_AT_START);
    return 1;
}

int main(int argc, char **argv)
{
    /* first: a signal from here on ends the start cleanly instead of killing it; until
     * the config is read nothing is written and nothing needs saving, so it ends the
     * program there and then, also in a blocking read (a config on a terminal or a FIFO),
     * where a flag would wait for the read */
    llm_sigstop_catch_exit("llm-train: " STOPPED_AT_START "\n");
    const char *config = NULL, *out = NULL, *resume = NULL, *metrics = NULL, *prom = NULL;
    const char *dist_init = NULL, *precision = NULL, *device = NULL;
    double dist_timeout = 600;
    int print = 0, quiet = 0, verbose = 0;
    llm_strlist sets = {0};
    const llm_opt opts[] = {
        {"config", 'c', LLM_OPT_STR, &config, "FILE", "the training config (YAML)"},
        {"set", 's', LLM_OPT_STRS, &sets, "KEY=VALUE", "override a config key (repeatable)"},
        {"output", 'o', LLM_OPT_STR, &out, "DIR", "checkpoint directory (output.dir)"},
        {"resume", 'r', LLM_OPT_STR, &resume, "auto|FILE",
         "continue from the newest checkpoint in DIR, or from FILE"},
        {"metrics", 'm', LLM_OPT_STR, &metrics, "FILE", "JSON lines here (output.metrics)"},
        {"prom", 0, LLM_OPT_STR, &prom, "FILE", "Prometheus textfile (output.prom)"},
        {"precision", 0, LLM_OPT_STR, &precision, "fp32|bf16|fp16",
         "matmul operands and activations; fp16 with dynamic loss scaling (train.precision)"},
        {"device", 'd', LLM_OPT_STR, &device, "DEV",
         "cpu, cpu-ref, cuda or auto: cuda when a GPU is usable (train.device; default auto)"},
        {"dist-init", 0, LLM_OPT_STR, &dist_init, "file:PATH|tcp://HOST:PORT",
         "NCCL id exchange for ranks from RANK/WORLD_SIZE or Slurm (no MPI)"},
        {"dist-timeout", 0, LLM_OPT_DOUBLE, &dist_timeout, "SECONDS",
         "end the job (exit 70) when a collective waits longer (600)"},
        {"print-config", 0, LLM_OPT_FLAG, &print, NULL, "print the resolved config and exit"},
        {"quiet", 'q', LLM_OPT_FLAG, &quiet, NULL, "errors only on stderr"},
        {"verbose", 'v', LLM_OPT_COUNT, &verbose, NULL, "more diagnostics"},
        {0},
    };
    static const llm_env env[] = {
        {"LLMKIT_DATA", "data folder searched first for gpt2/encoder.json and vocab.bpe"},
        {"LLM_DATA", "data folder searched next (then ./data)"},
        {"LLM_TRAIN_MEMSTAT", "1: print the peak memory allocated and RSS at the end"},
        {"LD_LIBRARY_PATH", "searched first for libnccl, opened when a multi-GPU run starts"},
        {"LLM_CPU_GEMM", "omp (default) or blas: who threads the CPU matrix products"},
        {"LLM_CUDA_DEVICE", "GPU ordinal (default: the local rank modulo the GPUs)"},
        {"LLM_CUDA_TF32", "1: fp32 matrix products on TF32 tensor cores"},
        {"LLM_CUDA_FLASH", "0: attention as batched GEMMs; wmma: the WMMA kernels"},
        {"LLM_CUDA_OFF", "optional CUDA parts to leave out, comma-separated, or all"},
        {"LLM_TRAIN_FAULT", "test hook: step:N, eval:N or sample:N fails (out of memory), "
                            "data:N (bad data)"},
        {"LLM_TRAIN_FAULT_NAN", "test hook: losses from this step on are not finite"},
        {"LLM_FAULT_WRITE_LIMIT", "test hook: output files (checkpoints, --prom) fail past this many bytes"},
        {"LLM_CUDA_FAULT", "test hook: xent_fused breaks that CUDA operation"},
        {0},
    };
    const llm_cli cli = {"llm-train", "--config FILE [options]",
                         "Train a GPT-2 style model as a YAML config describes.", opts, 0, 0, env};
    int r = llm_cli_parse(&cli, argc, argv, NULL);
    if (r != LLM_CLI_RUN) {
        llm_strlist_free(&sets);
        return r == LLM_CLI_EXIT ? 0 : 64;
    }
    if (quiet)
        llm_sigstop_catch_exit(NULL);
    llm_log lg = llm_log_make("llm-train", quiet, verbose);
    llm_status st = {0};
    llm_train_config cfg;
    llm_config_defaults(&cfg);
    if (!config && !print) {
        llm_error(&lg, "--config FILE is required (see --help)");
        llm_strlist_free(&sets);
        return 64;
    }
    int rc = config ? llm_config_load(&cfg, config, &st) : 0;
    for (int i = 0; !rc && i < sets.n; i++)
        rc = llm_config_set(&cfg, sets.v[i], &st);
    llm_strlist_free(&sets);
    const struct { const char *opt, *key, *value; } from[] = {
        {"-o", "output.dir", out}, {"--metrics", "output.metrics", metrics},
        {"--prom", "output.prom", prom}, {"--precision", "train.precision", precision},
        {"--device", "train.device", device}};
    for (size_t i = 0; !rc && i < sizeof from / sizeof *from; i++)
        rc = llm_config_set_opt(&cfg, from[i].opt, from[i].key, from[i].value, &st);
    /* the config is read: from here on a signal is a request the loop answers (a
     * --print-config is written whole) */
    llm_sigstop_catch();
    const volatile sig_atomic_t *stop_requested = llm_sigstop_flag();
    if (!rc && print) {
        llm_cli_quiet_sigpipe();
        rc = llm_config_print(&cfg, stdout, &st);
        if (rc && st.code == LLM_EIO && llm_cli_stdout_closed(errno))
            return 0;
    }
    if (!rc && !print)
        rc = llm_config_validate(&cfg, &st);
    if (rc) {
        llm_error(&lg, "%s", st.msg);
        return llm_exit_code(st.code);
    }
    if (print)
        return 0;

    llm_cli_quiet_sigpipe();

    if (dist_timeout <= 0) {
        llm_error(&lg, "--dist-timeout must be positive");
        return 64;
    }
    static const char *const bit[] = {"0", "1", NULL};
    int memstat = 0;
    /* LLM_FAULT_WRITE_LIMIT is read by each output file as it opens: checked before step 1 */
    if (llm_env_word("LLM_TRAIN_MEMSTAT", bit, &memstat, &st) || llm_afile_env_check(&st)) {
        llm_error(&lg, "%s", st.msg);
        return llm_exit_code(st.code);
    }
    if (stopped_at_start(&lg))
        return 0;
    /* auto becomes a device before the ranks start: NCCL or not, and each rank's GPU */
    if (!strcmp(cfg.device, "auto"))
        snprintf(cfg.device, sizeof cfg.device, "%s", llm_backend_resolve("auto"));
    llm_debug(&lg, "device %s", cfg.device);
    llm_dist *dist = NULL;
    /* the waits for the other ranks end on a signal: stopped like the start above */
    llm_dist_opts dopt = {dist_init, dist_timeout, !strcmp(cfg.device, "cuda"), &lg,
                          stop_requested};
    if (llm_dist_init(&dist, &dopt, &st)) {
        if (st.code == LLM_EINTR && *stop_requested) {
            llm_info(&lg, "stopped on a signal during the start-up, %s: nothing written",
                     st.msg);
            return 0;
        }
        llm_error(&lg, "%s", st.msg);
        return llm_exit_code(st.code);
    }
    if (llm_dist_rank(dist) > 0)  /* one voice: rank 0's; the others report errors only */
        lg = llm_log_make("llm-train", 1, 0);
    else if (llm_dist_world(dist) > 1)
        llm_info(&lg, "%d ranks (%s)%s", llm_dist_world(dist), llm_dist_kind(dist),
                 cfg.zero ? ", ZeRO-1" : "");
    llm_train_opts o = {resume, stop_requested, &lg, isatty(2) && !quiet && !llm_dist_rank(dist),
                        dist};
    llm_train_result res;
    rc = llm_train_run(&cfg, &o, &res, &st);
    if (rc && st.together && llm_dist_world(dist) > 1) {
        /* every rank stops here, none left in a collective: one voice for what they all
         * found (rank 0's), or each its own, and rank 0's word out before any rank exits
         * (a launcher ends the others then) */
        if (!llm_dist_rank(dist) || st.together == LLM_TOGETHER_OWN)
            llm_error(&lg, "%s", st.msg);
        llm_status bst = {0};
        llm_dist_barrier(dist, &bst);
        llm_dist_free(dist);
        return llm_exit_code(st.code);
    }
    if (rc) {
        llm_error(&lg, "%s", st.msg);
        llm_dist_abort(dist, llm_exit_code(st.code)); /* the other ranks must not wait */
        llm_dist_free(dist);
        return llm_exit_code(st.code);
    }
    /* test hook (llm-train.1, ENVIRONMENT): every rank's peak memory on stderr */
    if (memstat)
        fprintf(stderr, "llm-train: rank %d/%d: peak memory %.0f bytes allocated, %.0f bytes "
                "RSS\n", llm_dist_rank(dist), llm_dist_world(dist), res.mem_peak, res.rss_peak);
    llm_dist_free(dist);
    if (res.diverged)
        return LLM_TRAIN_EXIT_DIVERGED;
    if (res.last_step >= res.first_step && res.step_seconds > 0)
    {
        char val[64] = "";
        if (isfinite(res.last_val_loss))
            snprintf(val, sizeof val, ", val loss %.4f", res.last_val_loss);
        llm_info(&lg, "steps %lld..%lld: loss %.4f%s, %.1f s, data wait %.3f%% of step time",
                 (long long)res.first_step, (long long)res.last_step, res.last_loss, val,
                 res.step_seconds, 100.0 * res.data_seconds / res.step_seconds);
    }
    return 0;
}
