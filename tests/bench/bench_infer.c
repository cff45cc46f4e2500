/* bench_infer — llm-infer's engine on GPT-2 124M (f32, random weights): prefill tokens/s
 * for a 128-token prompt, decode tokens/s at batch 1 and batch 8, GB/s of weights
 * streamed per decode step beside a measured memory read bandwidth, and resident memory.
 *
 *   bench_infer [MODEL.llmk] [--threads N] [--steps S] [--device cpu|cpu-ref] [--keep]
 *
 * MODEL.llmk defaults to /tmp/llmkit-gpt2-124m.llmk, created (random GPT-2 124M, seed
 * 1337) when missing; --keep leaves a created file behind for the next run or for a
 * GGUF export.  Prints one JSON line on stdout (repacked_mb: weights the CPU backend
 * repacked at load, on top of the mapping; LLM_Q4_REPACK=0 turns that off).  Timings are wall clock on a shared
 * machine: repeat and compare ratios.
 */
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "common/ckpt.h"
#include "common/cli.h"
#include "common/clock.h"
#include "common/infer.h"
#include "common/model.h"
#include "common/tokenizer.h"

static double cpu_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
    return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

static long rss_kb(const char *key)
{
    FILE *f = fopen("/proc/self/status", "r");
    char line[256];
    long v = -1;
    while (f && fgets(line, sizeof line, f))
        if (strncmp(line, key, strlen(key)) == 0)
            v = atol(line + strlen(key));
    if (f)
        fclose(f);
    return v;
}

static int make_model(const char *path, llm_status *st)
{
    llm_model_config cfg = {.arch = "gpt2", .n_layer = 12, .n_head = 12, .n_embd = 768,
                            .vocab_size = 50257, .padded_vocab = 50304, .max_seq_len = 1024};
    llm_backend be;
    char err[128];
    if (llm_backend_init(&be, "cpu", 0, err, sizeof err))
        return llm_err(st, LLM_ENODEV, "%s", err);
    llm_model *m = NULL;
    llm_ckpt_writer *w = NULL;
    llm_tokenizer *tok = NULL;
    int rc = llm_model_new(&m, &cfg, &be, st);
    if (!rc) {
        llm_model_init_gpt2(m, 1337);
        rc = llm_ckpt_writer_new(&w, st);
    }
    if (!rc)
        rc = llm_ckpt_set_section(w, "model", llm_model_config_node(&cfg), st);
    /* the byte tokenizer keeps the file self-contained without the GPT-2 vocab files */
    if (!rc)
        rc = llm_tokenizer_byte(&tok, st);
    if (!rc)
        rc = llm_tokenizer_save(tok, w, st);
    if (!rc)
        rc = llm_model_save(m, w, 0, st);
    if (!rc)
        rc = llm_ckpt_write(w, path, st);
    llm_ckpt_writer_free(w);
    if (tok)
        llm_tokenizer_free(tok);
    llm_model_free(m);
    llm_backend_free(&be);
    return rc;
}

/* Read bandwidth: sum a buffer far larger than the caches with `threads` threads. */
static double read_bandwidth_gbs(int threads)
{
    size_t n = (size_t)256 << 20;   /* 1 GiB of floats */
    float *x = malloc(n * sizeof(float));
    if (!x)
        return 0;
#pragma omp parallel for num_threads(threads)
    for (size_t i = 0; i < n; i++)
        x[i] = (float)(i & 7);
    double best = 0;
    for (int rep = 0; rep < 3; rep++) {
        double t0 = llm_now_s(), total = 0;
#pragma omp parallel for reduction(+ : total) num_threads(threads)
        for (size_t i = 0; i < n; i += 8) {
            total += x[i] + x[i + 1] + x[i + 2] + x[i + 3] + x[i + 4] + x[i + 5] + x[i + 6] +
                     x[i + 7];
        }
        double dt = llm_now_s() - t0;
        if (total < 0)
            fprintf(stderr, "?");
        double gbs = n * sizeof(float) / dt / 1e9;
        if (gbs > best)
            best = gbs;
    }
    free(x);
    return best;
}

/* Decode `steps` tokens in `batch` slots after a prompt of P tokens each; tokens/s. */
static double decode_rate(llm_infer_ctx *c, int batch, int P, int steps, double *per_cpu_s,
                          llm_status *st)
{
    llm_infer_row rows[64];
    int which[64];
    float *lg = malloc((size_t)batch * 50304 * sizeof(float));
    for (int s = 0; s < batch; s++) {
        llm_infer_row pr[16];
        for (int i = 0; i < P; i++)
            pr[i] = (llm_infer_row){(int32_t)((s * 31 + i * 7) % 50000), s, i};
        if (llm_infer_forward(c, pr, P, st))
            return -1;
    }
    double t0 = 0, c0 = 0;
    for (int k = -1; k < steps; k++) {   /* step -1 warms up */
        if (k == 0) {
            t0 = llm_now_s();
            c0 = cpu_s();
        }
        int pos = P + k + 1;
        for (int s = 0; s < batch; s++) {
            rows[s] = (llm_infer_row){(int32_t)((s * 13 + pos * 5) % 50000), s, pos};
            which[s] = s;
        }
        if (llm_infer_forward(c, rows, batch, st) || llm_infer_logits(c, which, batch, lg, st))
            return -1;
    }
    double dt = llm_now_s() - t0;
    /* tokens per CPU-second of this process: on a shared machine the wall clock also
     * counts time other processes held the cores */
    *per_cpu_s = (double)steps * batch / (cpu_s() - c0);
    free(lg);
    return (double)steps * batch / dt;
}

int main(int argc, char **argv)
{
    const char *device = "cpu";
    int threads = 2, steps = 32, keep = 0;
    llm_strlist pos = {0};
    const llm_opt opts[] = {
        {"threads", 't', LLM_OPT_INT, &threads, "N", "threads (default: 2)"},
        {"steps", 's', LLM_OPT_INT, &steps, "S", "decode steps timed (default: 32)"},
        {"device", 0, LLM_OPT_STR, &device, "DEV", "cpu or cpu-ref (default: cpu)"},
        {"keep", 0, LLM_OPT_FLAG, &keep, NULL, "keep a created model file"},
        {0},
    };
    const llm_cli cli = {"bench_infer", "[MODEL.llmk] [options]",
                         "Time GPT-2 124M prefill and decode.", opts, 0, 1, NULL};
    int r = llm_cli_parse(&cli, argc, argv, &pos);
    if (r != LLM_CLI_RUN)
        return r == LLM_CLI_EXIT ? 0 : 64;
    const char *path = pos.n ? pos.v[0] : "/tmp/llmkit-gpt2-124m.llmk";
    llm_status st = {0};
    int created = 0;
    if (access(path, R_OK) != 0) {
        fprintf(stderr, "bench_infer: writing a random GPT-2 124M to %s\n", path);
        if (make_model(path, &st)) {
            fprintf(stderr, "bench_infer: %s\n", st.msg);
            return 1;
        }
        created = 1;
    }
    long rss0 = rss_kb("VmRSS:");
    llm_backend be;
    char err[128];
    if (llm_backend_init(&be, device, threads, err, sizeof err)) {
        fprintf(stderr, "bench_infer: %s\n", err);
        return 1;
    }
    llm_infer_model *m = NULL;
    llm_infer_ctx *c1 = NULL, *c8 = NULL;
    if (llm_infer_model_open(&m, path, &be, 0, &st) ||
        llm_infer_ctx_new(&c1, m, 1, 128, &st) || llm_infer_ctx_new(&c8, m, 8, 128, &st)) {
        fprintf(stderr, "bench_infer: %s\n", st.msg);
        return 1;
    }
    /* prefill: 128-token prompt, logits for the last position only */
    llm_infer_row rows[128];
    for (int i = 0; i < 128; i++)
        rows[i] = (llm_infer_row){(int32_t)((i * 7919) % 50257), 0, i};
    float *lg = malloc(50304 * sizeof(float));
    double pf_best = 0;
    int last = 127;
    for (int rep = 0; rep < 3; rep++) {
        double t0 = llm_now_s();
        if (llm_infer_forward(c1, rows, 128, &st) || llm_infer_logits(c1, &last, 1, lg, &st)) {
            fprintf(stderr, "bench_infer: %s\n", st.msg);
            return 1;
        }
        double rate = 128 / (llm_now_s() - t0);
        if (rate > pf_best)
            pf_best = rate;
    }
    double c1r, c8r;
    double d1 = decode_rate(c1, 1, 8, steps, &c1r, &st);
    double d8 = decode_rate(c8, 8, 8, steps / 2 > 4 ? steps / 2 : 4, &c8r, &st);
    if (d1 < 0 || d8 < 0) {
        fprintf(stderr, "bench_infer: %s\n", st.msg);
        return 1;
    }
    long rss = rss_kb("VmRSS:"), hwm = rss_kb("VmHWM:");
    double gb = m->weight_bytes / 1e9;
    double bw = read_bandwidth_gbs(threads);
    /* the matmul weights' format in the file names the run (wte may be kept at another
     * type; the CPU backend may have repacked them: repacked_mb) */
    const llm_tensor *fdt = llm_ckpt_find(m->ck, "h.0.attn.c_attn.weight");
    printf("{\"model\":\"gpt2-124m\",\"dtype\":\"%s\",\"device\":\"%s\",\"threads\":%d,"
           "\"prefill128_tokens_per_s\":%.1f,\"decode_b1_tokens_per_s\":%.2f,"
           "\"decode_b8_tokens_per_s\":%.2f,\"b8_over_b1\":%.2f,"
           "\"decode_b1_tokens_per_cpu_s\":%.2f,\"decode_b8_tokens_per_cpu_s\":%.2f,"
           "\"b8_over_b1_cpu\":%.2f,\"weights_gb\":%.3f,"
           "\"decode_b1_weight_gbs\":%.2f,\"read_bandwidth_gbs\":%.2f,\"bw_fraction\":%.2f,"
           "\"kv_and_act_mb_b1\":%.1f,\"kv_and_act_mb_b8\":%.1f,\"rss_mb\":%.1f,"
           "\"rss_peak_mb\":%.1f,\"rss_before_open_mb\":%.1f,\"repacked_mb\":%.1f}\n",
           fdt ? llm_dtype_name(fdt->dtype) : "?", be.name, be.threads, pf_best, d1, d8, d8 / d1, c1r, c8r, c8r / c1r, gb, d1 * gb, bw, d1 * gb / bw,
           llm_infer_ctx_bytes(c1) / 1e6, llm_infer_ctx_bytes(c8) / 1e6, rss / 1024.0,
           hwm / 1024.0, rss0 / 1024.0, m->repack_bytes / 1e6);
    free(lg);
    llm_infer_ctx_free(c1);
    llm_infer_ctx_free(c8);
    llm_infer_model_free(m);
    llm_backend_free(&be);
    if (created && !keep)
        unlink(path);
    llm_strlist_free(&pos);
    return 0;
}
