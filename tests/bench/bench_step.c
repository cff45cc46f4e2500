/* bench_step — time one GPT-2 training step (zero_grad + forward + backward + AdamW).
 *
 *   build/bench/bench_step [124m|small] [--threads N] [--steps N] [--warmup N]
 *                          [--device cpu|cpu-ref] [--json]
 *
 * 124m: 12 layers, 12 heads, 768 wide, vocab 50257, B=4, T=64 (issue 4).
 * small: 4 layers, 4 heads, 256 wide, vocab 50257, B=8, T=128.
 * Prints the median of --steps timed steps after --warmup untimed ones: ms/step,
 * tokens/s, GFLOP/s (6 x params x tokens / time), the OpenBLAS sgemm rate on the same
 * threads measured in the same run (1024^3, before and after the steps), the step's
 * fraction of it, and the peak RSS of the process.  A benchmark, never a test. */
#include <cblas.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>

#include "common/clock.h"
#include "common/model.h"
#include "kernels/backend.h"

void openblas_set_num_threads(int);
int openblas_get_num_threads(void);

static int cmp_d(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

/* Median GFLOP/s of 5 square sgemms of size n on `threads` OpenBLAS threads. */
static double sgemm_rate(int n, int threads)
{
    int saved = openblas_get_num_threads();
    openblas_set_num_threads(threads);
    float *a = malloc((size_t)n * n * 4), *b = malloc((size_t)n * n * 4), *c = malloc((size_t)n * n * 4);
    for (size_t i = 0; i < (size_t)n * n; i++) {
        a[i] = (float)((i * 7) % 13) * 0.01f;
        b[i] = (float)((i * 5) % 11) * 0.01f;
    }
    double t[5];
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, n, n, n, 1.0f, a, n, b, n, 0.0f, c, n);
    for (int r = 0; r < 5; r++) {
        double t0 = llm_now_s();
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, n, n, n, 1.0f, a, n, b, n, 0.0f, c, n);
        t[r] = llm_now_s() - t0;
    }
    qsort(t, 5, sizeof t[0], cmp_d);
    free(a);
    free(b);
    free(c);
    openblas_set_num_threads(saved);
    return 2.0 * n * n * (double)n / t[2] * 1e-9;
}

int main(int argc, char **argv)
{
    const char *which = "124m", *device = "cpu";
    int threads = 2, steps = 10, warmup = 2, json = 0;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--threads") && i + 1 < argc)
            threads = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--steps") && i + 1 < argc)
            steps = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--warmup") && i + 1 < argc)
            warmup = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--device") && i + 1 < argc)
            device = argv[++i];
        else if (!strcmp(argv[i], "--json"))
            json = 1;
        else if (argv[i][0] != '-')
            which = argv[i];
        else {
            fprintf(stderr, "usage: %s [124m|small] [--threads N] [--steps N] [--warmup N] "
                            "[--device D] [--json]\n", argv[0]);
            return 64;
        }
    }
    if (steps < 1 || steps > 1000 || warmup < 0 || threads < 1) {
        fprintf(stderr, "bench_step: bad --steps/--warmup/--threads\n");
        return 64;
    }
    llm_model_config cfg = {.arch = "gpt2", .vocab_size = 50257};
    int B, T;
    if (!strcmp(which, "124m")) {
        cfg.n_layer = 12, cfg.n_head = 12, cfg.n_embd = 768, cfg.max_seq_len = 1024;
        B = 4, T = 64;
    } else if (!strcmp(which, "small")) {
        cfg.n_layer = 4, cfg.n_head = 4, cfg.n_embd = 256, cfg.max_seq_len = 1024;
        B = 8, T = 128;
    } else {
        fprintf(stderr, "bench_step: unknown model '%s' (124m or small)\n", which);
        return 64;
    }
    double sg0 = sgemm_rate(1024, threads);

    llm_backend be;
    char err[256];
    if (llm_backend_init(&be, device, threads, err, sizeof err) != 0) {
        fprintf(stderr, "bench_step: %s\n", err);
        return 69;
    }
    llm_status st = {0};
    llm_model *m;
    if (llm_model_new(&m, &cfg, &be, &st) != 0) {
        fprintf(stderr, "bench_step: %s\n", st.msg);
        return 70;
    }
    llm_model_init_gpt2(m, 1337);
    int n = B * T;
    int32_t *in = malloc((size_t)n * 4), *tg = malloc((size_t)n * 4);
    uint64_t s = 42;
    for (int i = 0; i < n; i++) {
        s = s * 6364136223846793005ull + 1442695040888963407ull;
        in[i] = (int32_t)((s >> 33) % (uint64_t)cfg.vocab_size);
        s = s * 6364136223846793005ull + 1442695040888963407ull;
        tg[i] = (int32_t)((s >> 33) % (uint64_t)cfg.vocab_size);
    }
    llm_adamw_config hp = {3e-4f, 0.9f, 0.95f, 1e-8f, 0.1f, 1.0f};
    double *t = malloc(sizeof(double) * (size_t)steps * 4), *tf = t + steps, *tb = tf + steps,
           *tu = tb + steps;
    float loss = 0;
    for (int i = 0; i < warmup + steps; i++) {
        double t0 = llm_now_s(), t1, t2;
        if (llm_model_zero_grad(m, &st) || llm_model_forward(m, in, tg, B, T, &loss, &st) ||
            (t1 = llm_now_s(), llm_model_backward(m, 1.0f, &st)) ||
            (t2 = llm_now_s(), llm_model_update(m, &hp, i + 1, NULL, NULL, &st))) {
            fprintf(stderr, "bench_step: %s\n", st.msg);
            return 70;
        }
        be.sync(&be);
        double t3 = llm_now_s(), dt = t3 - t0;
        if (i >= warmup) {
            t[i - warmup] = dt;
            tf[i - warmup] = t1 - t0;
            tb[i - warmup] = t2 - t1;
            tu[i - warmup] = t3 - t2;
        }
        if (!json)
            fprintf(stderr, "step %d: %.1f ms loss %.4f\n", i + 1, dt * 1e3, loss);
    }
    double sg1 = sgemm_rate(1024, threads);
    double *all[4] = {t, tf, tb, tu}, meds[4];
    for (int k = 0; k < 4; k++) {
        qsort(all[k], (size_t)steps, sizeof t[0], cmp_d);
        meds[k] = steps % 2 ? all[k][steps / 2] : 0.5 * (all[k][steps / 2 - 1] + all[k][steps / 2]);
    }
    double med = meds[0];
    double params = (double)llm_model_num_params(&cfg);
    double gflops = 6.0 * params * n / med * 1e-9;
    double sg = 0.5 * (sg0 + sg1);
    struct rusage ru;
    getrusage(RUSAGE_SELF, &ru);
    double rss_mb = ru.ru_maxrss / 1024.0;
    if (json)
        printf("{\"model\":\"%s\",\"device\":\"%s\",\"threads\":%d,\"B\":%d,\"T\":%d,\"params\":%.0f,"
               "\"ms_per_step\":%.2f,\"min_ms\":%.2f,\"max_ms\":%.2f,\"tokens_per_s\":%.1f,"
               "\"gflops\":%.2f,\"sgemm_gflops\":%.2f,\"sgemm_before\":%.2f,\"sgemm_after\":%.2f,"
               "\"fraction_of_sgemm\":%.3f,\"peak_rss_mb\":%.1f,\"model_mb\":%.1f,"
               "\"forward_ms\":%.2f,\"backward_ms\":%.2f,\"update_ms\":%.2f}\n",
               which, device, threads, B, T, params, med * 1e3, t[0] * 1e3, t[steps - 1] * 1e3,
               n / med, gflops, sg, sg0, sg1, gflops / sg, rss_mb, llm_model_bytes(m) / 1048576.0,
               meds[1] * 1e3, meds[2] * 1e3, meds[3] * 1e3);
    else
        printf("%s (%s, %d threads, B=%d T=%d, %.1fM params): %.1f ms/step (min %.1f max %.1f), "
               "%.0f tokens/s, %.1f GFLOP/s = %.0f%% of sgemm %.1f GFLOP/s (%.1f before, %.1f after), "
               "peak RSS %.0f MB (model %.0f MB); zero_grad+forward %.1f, backward %.1f, update %.1f ms\n",
               which, device, threads, B, T, params / 1e6, med * 1e3, t[0] * 1e3, t[steps - 1] * 1e3,
               n / med, gflops, 100 * gflops / sg, sg, sg0, sg1, rss_mb, llm_model_bytes(m) / 1048576.0,
               meds[1] * 1e3, meds[2] * 1e3, meds[3] * 1e3);
    free(t);
    free(in);
    free(tg);
    llm_model_free(m);
    llm_backend_free(&be);
    return 0;
}
