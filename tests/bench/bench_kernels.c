/* bench_kernels — time every kernel of the "cpu" and "cpu-ref" backends at GPT-2 124M
 * training shapes, and the OpenBLAS sgemm rate at like shapes, on the same threads.
 *
 *   build/bench/bench_kernels [--threads N] [--reps N] [--B N] [--T N] [--no-ref]
 *                             [--ref-reps N] [--ref-lmhead] [--ops SUBSTRING] [--no-step]
 *                             [--cpu-time]
 *
 * The reference is timed once per op (--ref-reps), and not on the two lm-head matmuls
 * (about a minute each) unless --ref-lmhead.  --ops times only the ops whose name
 * contains SUBSTRING (e.g. --ops attention --T 1024); the step lines then are skipped.
 *
 * Each op: one warm-up call, then the median of --reps timed calls (the machine is
 * shared: medians, not means).  GEMM-like ops report GFLOP/s, memory-bound ops GB/s.
 * The last lines sum the ops of one training step (forward, backward, grad norm, AdamW
 * over all parameters) in the order and multiplicity GPT-2 uses them, as a projected step
 * time and its rate (6 x params x tokens / time) against the sgemm rate measured here. */
#include <cblas.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "kernels/backend.h"

void openblas_set_num_threads(int num_threads);

/* Wall-clock seconds, or with --cpu-time the process's CPU seconds divided by the thread
 * count: on a machine shared with other jobs that estimates the time the run would take
 * alone, since time spent descheduled is not counted (spin-waits still are). */
static int cpu_clock, cpu_div = 1;

static double now(void)
{
    struct timespec t;
    clock_gettime(cpu_clock ? CLOCK_PROCESS_CPUTIME_ID : CLOCK_MONOTONIC, &t);
    return ((double)t.tv_sec + 1e-9 * (double)t.tv_nsec) / (cpu_clock ? cpu_div : 1);
}

static int cmpd(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

static double median(double *v, int n)
{
    qsort(v, (size_t)n, sizeof *v, cmpd);
    return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

typedef struct {
    int B, T, C, NH, V, Vp, L, maxT, N;
    size_t nparams;
    /* Inputs (never written after setup, so values stay realistic over repetitions) ... */
    float *x, *y, *qkv, *att, *h4, *logits, *dlogits, *mean, *rstd, *w, *b, *wte, *wpe, *wqkv,
        *wfc, *lse;
    /* ... and outputs */
    float *ox, *oqkv, *oh4, *ologits, *odlogits, *omean, *orstd, *oatt, *dw, *db, *dwte, *dwpe,
        *dwqkv, *dwfc, *loss;
    float *p, *g, *m, *v; /* nparams each, for sum_squares and adamw */
    int32_t *inp, *tgt;
} bufs;

enum { OP_EMB_F, OP_LN_F, OP_MM_QKV_F, OP_ATT_F, OP_MM_PROJ_F, OP_RES_F, OP_MM_FC_F, OP_GELU_F,
       OP_MM_FCP_F, OP_MM_LM_F, OP_XENT_F, OP_XENT_B, OP_MM_LM_B, OP_LN_B, OP_ACC, OP_MM_FCP_B,
       OP_GELU_B, OP_MM_FC_B, OP_MM_PROJ_B, OP_ATT_B, OP_MM_QKV_B, OP_EMB_B, OP_SUMSQ, OP_ADAMW,
       NOPS };

static const char *NAMES[NOPS] = {
    "embed_forward", "layernorm_forward", "matmul_forward qkv", "attention_forward",
    "matmul_forward proj", "residual_forward", "matmul_forward fc", "gelu_forward",
    "matmul_forward fcproj", "matmul_forward lmhead", "xent_forward", "xent_backward",
    "matmul_backward lmhead", "layernorm_backward", "accumulate", "matmul_backward fcproj",
    "gelu_backward", "matmul_backward fc", "matmul_backward proj", "attention_backward",
    "matmul_backward qkv", "embed_backward", "sum_squares", "adamw"};

/* Calls of each op in one training step of an L-layer GPT-2. */
static int per_step(int op, int L)
{
    switch (op) {
    case OP_EMB_F: case OP_MM_LM_F: case OP_XENT_F: case OP_XENT_B: case OP_MM_LM_B:
    case OP_EMB_B: case OP_SUMSQ: case OP_ADAMW:
        return 1;
    case OP_LN_F: case OP_LN_B: case OP_RES_F: case OP_ACC:
        return 2 * L + (op == OP_LN_F || op == OP_LN_B);
    default:
        return L;
    }
}

/* Work of one call: flops (GEMM-like ops) or bytes moved (the rest); *isflop says which. */
static double work(const bufs *s, int op, int *isflop)
{
    double N = s->N, C = s->C, T = s->T, B = s->B, F = 4.0;
    *isflop = 1;
    switch (op) {
    case OP_MM_QKV_F: return 2 * N * C * 3 * C;
    case OP_MM_PROJ_F: return 2 * N * C * C;
    case OP_MM_FC_F: case OP_MM_FCP_F: return 2 * N * C * 4 * C;
    case OP_MM_LM_F: return 2 * N * C * s->Vp;
    case OP_MM_QKV_B: return 4 * N * C * 3 * C;
    case OP_MM_PROJ_B: return 4 * N * C * C;
    case OP_MM_FC_B: case OP_MM_FCP_B: return 4 * N * C * 4 * C;
    case OP_MM_LM_B: return 4 * N * C * s->Vp;
    case OP_ATT_F: return 4 * B * T * T * C; /* Q K^T and P V, full squares */
    case OP_ATT_B: return 8 * B * T * T * C;
    }
    *isflop = 0;
    switch (op) {
    case OP_EMB_F: return F * 3 * N * C;
    case OP_LN_F: return F * 2 * N * C;
    case OP_RES_F: return F * 3 * N * C;
    case OP_GELU_F: return F * 2 * N * 4 * C;
    case OP_XENT_F: return F * N * s->Vp;
    case OP_XENT_B: return F * 2 * N * s->Vp;
    case OP_LN_B: return F * 4 * N * C;
    case OP_ACC: return F * 3 * N * C;
    case OP_GELU_B: return F * 4 * N * 4 * C;
    case OP_EMB_B: return F * 5 * N * C;
    case OP_SUMSQ: return F * (double)s->nparams;
    case OP_ADAMW: return F * 7 * (double)s->nparams;
    }
    return 0;
}

static void run_op(llm_backend *be, bufs *s, int op)
{
    int N = s->N, C = s->C, B = s->B, T = s->T, NH = s->NH, V = s->V, Vp = s->Vp;
    switch (op) {
    case OP_EMB_F: be->embed_forward(be, s->ox, s->inp, s->wte, s->wpe, B, T, C); break;
    case OP_LN_F: be->layernorm_forward(be, s->ox, s->omean, s->orstd, s->x, s->w, s->b, N, C); break;
    case OP_MM_QKV_F: be->matmul_forward(be, s->oqkv, s->y, s->wqkv, s->b, N, C, 3 * C); break;
    case OP_ATT_F: be->attention_forward(be, s->ox, s->oatt, s->qkv, B, T, C, NH); break;
    case OP_MM_PROJ_F: be->matmul_forward(be, s->ox, s->x, s->wqkv, s->b, N, C, C); break;
    case OP_RES_F: be->residual_forward(be, s->ox, s->x, s->y, (size_t)N * C); break;
    case OP_MM_FC_F: be->matmul_forward(be, s->oh4, s->y, s->wfc, s->b, N, C, 4 * C); break;
    case OP_GELU_F: be->gelu_forward(be, s->oh4, s->h4, (size_t)N * 4 * C); break;
    case OP_MM_FCP_F: be->matmul_forward(be, s->ox, s->h4, s->wfc, s->b, N, 4 * C, C); break;
    case OP_MM_LM_F: be->matmul_forward(be, s->ologits, s->y, s->wte, NULL, N, C, Vp); break;
    case OP_XENT_F: be->xent_forward(be, s->loss, s->ologits, s->logits, s->tgt, N, V, Vp); break;
    case OP_XENT_B:
        be->xent_backward(be, s->odlogits, s->logits, s->lse, s->tgt, 1.0f / N, N, V, Vp);
        break;
    case OP_MM_LM_B:
        be->matmul_backward(be, s->ox, s->dwte, NULL, s->dlogits, s->y, s->wte, N, C, Vp);
        break;
    case OP_LN_B:
        be->layernorm_backward(be, s->ox, s->dw, s->db, s->y, s->x, s->w, s->mean, s->rstd, N, C);
        break;
    case OP_ACC: be->accumulate(be, s->ox, s->y, (size_t)N * C); break;
    case OP_MM_FCP_B:
        be->matmul_backward(be, s->oh4, s->dwfc, s->db, s->y, s->h4, s->wfc, N, 4 * C, C);
        break;
    case OP_GELU_B: be->gelu_backward(be, s->oh4, s->h4, s->h4, (size_t)N * 4 * C); break;
    case OP_MM_FC_B:
        be->matmul_backward(be, s->ox, s->dwfc, s->db, s->h4, s->y, s->wfc, N, C, 4 * C);
        break;
    case OP_MM_PROJ_B:
        be->matmul_backward(be, s->ox, s->dwqkv, s->db, s->y, s->x, s->wqkv, N, C, C);
        break;
    case OP_ATT_B: be->attention_backward(be, s->oqkv, s->y, s->qkv, s->att, B, T, C, NH); break;
    case OP_MM_QKV_B:
        be->matmul_backward(be, s->ox, s->dwqkv, s->db, s->qkv, s->y, s->wqkv, N, C, 3 * C);
        break;
    case OP_EMB_B: be->embed_backward(be, s->dwte, s->dwpe, s->y, s->inp, B, T, C); break;
    case OP_SUMSQ: {
        volatile double r = be->sum_squares(be, s->g, s->nparams);
        (void)r;
        break;
    }
    case OP_ADAMW:
        be->adamw(be, s->p, s->g, s->m, s->v, s->nparams, 1e-4f, 0.9f, 0.95f, 1e-8f, 0.0f, 1,
                  1.0f);
        break;
    }
}

/* n floats uniform in [-amp/2, amp/2) (amp 0: zeros). */
static float *fbuf(size_t n, unsigned seed, float amp)
{
    float *p = malloc(sizeof(float) * n);
    if (!p) {
        fprintf(stderr, "bench_kernels: out of memory\n");
        exit(1);
    }
    for (size_t i = 0; i < n; i++) {
        seed = seed * 1664525u + 1013904223u;
        p[i] = ((float)(seed >> 8) / 16777216.0f - 0.5f) * amp;
    }
    return p;
}

/* Median seconds of one call of op on be. */
static double time_op(llm_backend *be, bufs *s, int op, int reps)
{
    double t[64];
    if (reps > 64)
        reps = 64;
    run_op(be, s, op); /* warm-up: page faults, BLAS buffers, thread start */
    for (int r = 0; r < reps; r++) {
        double t0 = now();
        run_op(be, s, op);
        t[r] = now() - t0;
    }
    return median(t, reps);
}

/* OpenBLAS's own rate on threads threads for an (M x K) @ (K x N)^T product. */
static double sgemm_rate(int threads, int M, int N, int K, int reps)
{
    float *a = fbuf((size_t)M * K, 1, 1), *b = fbuf((size_t)N * K, 2, 1);
    float *c = fbuf((size_t)M * N, 3, 0);
    double t[64];
    if (reps > 64)
        reps = 64;
    openblas_set_num_threads(threads);
    for (int r = -1; r < reps; r++) {
        double t0 = now();
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, M, N, K, 1.0f, a, K, b, K, 0.0f, c, N);
        if (r >= 0)
            t[r] = now() - t0;
    }
    free(a); free(b); free(c);
    return 2.0 * M * N * K / median(t, reps) / 1e9;
}

/* One training step's ops in their real order (forward, backward, norm, AdamW), so that
 * switching between kernels (thread wake-ups, caches) is part of the time. */
static void run_step(llm_backend *be, bufs *s)
{
    static const int fwd[] = {OP_LN_F, OP_MM_QKV_F, OP_ATT_F, OP_MM_PROJ_F, OP_RES_F,
                              OP_LN_F, OP_MM_FC_F, OP_GELU_F, OP_MM_FCP_F, OP_RES_F};
    static const int bwd[] = {OP_ACC, OP_MM_FCP_B, OP_GELU_B, OP_MM_FC_B, OP_LN_B,
                              OP_ACC, OP_MM_PROJ_B, OP_ATT_B, OP_MM_QKV_B, OP_LN_B};
    run_op(be, s, OP_EMB_F);
    for (int l = 0; l < s->L; l++)
        for (size_t i = 0; i < sizeof fwd / sizeof fwd[0]; i++)
            run_op(be, s, fwd[i]);
    run_op(be, s, OP_LN_F);
    run_op(be, s, OP_MM_LM_F);
    run_op(be, s, OP_XENT_F);
    run_op(be, s, OP_XENT_B);
    run_op(be, s, OP_MM_LM_B);
    run_op(be, s, OP_LN_B);
    for (int l = 0; l < s->L; l++)
        for (size_t i = 0; i < sizeof bwd / sizeof bwd[0]; i++)
            run_op(be, s, bwd[i]);
    run_op(be, s, OP_EMB_B);
    run_op(be, s, OP_SUMSQ);
    run_op(be, s, OP_ADAMW);
}

int main(int argc, char **argv)
{
    int threads = 2, reps = 10, ref = 1, ref_reps = 1, ref_lm = 0, do_step = 1;
    const char *only = NULL;
    bufs s = {.B = 4, .T = 64, .C = 768, .NH = 12, .V = 50257, .Vp = 50304, .L = 12, .maxT = 1024};
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        int more = i + 1 < argc;
        if (!strcmp(a, "--threads") && more) threads = atoi(argv[++i]);
        else if (!strcmp(a, "--reps") && more) reps = atoi(argv[++i]);
        else if (!strcmp(a, "--ref-reps") && more) ref_reps = atoi(argv[++i]);
        else if (!strcmp(a, "--B") && more) s.B = atoi(argv[++i]);
        else if (!strcmp(a, "--T") && more) s.T = atoi(argv[++i]);
        else if (!strcmp(a, "--no-ref")) ref = 0;
        else if (!strcmp(a, "--ref-lmhead")) ref_lm = 1;
        else if (!strcmp(a, "--no-step")) do_step = 0;
        else if (!strcmp(a, "--cpu-time")) cpu_clock = 1;
        else if (!strcmp(a, "--ops") && more) only = argv[++i], do_step = 0;
        else {
            fprintf(stderr, "usage: bench_kernels [--threads N] [--reps N] [--B N] [--T N] "
                            "[--no-ref] [--ref-reps N] [--ref-lmhead] [--ops SUBSTRING] "
                            "[--no-step] [--cpu-time]\n");
            return 64;
        }
    }
    if (reps < 1 || ref_reps < 1 || threads < 1 || s.B < 1 || s.T < 1 || s.T > s.maxT) {
        fprintf(stderr, "bench_kernels: bad argument\n");
        return 64;
    }
    cpu_div = threads;
    int C = s.C;
    s.N = s.B * s.T;
    size_t N = (size_t)s.N;
    s.nparams = (size_t)s.Vp * C + (size_t)s.maxT * C + (size_t)s.L * (12 * (size_t)C * C + 13 * (size_t)C) + 2 * (size_t)C;
    /* inputs: activations ~N(0,1)-sized, weights ~0.02-sized, logits a few units */
    s.x = fbuf(N * C, 4, 2); s.y = fbuf(N * C, 5, 2); s.qkv = fbuf(N * 3 * C, 6, 2);
    s.att = fbuf((size_t)s.B * s.NH * s.T * s.T, 8, 0.1f); s.h4 = fbuf(N * 4 * C, 9, 4);
    s.logits = fbuf(N * s.Vp, 11, 10); s.dlogits = fbuf(N * s.Vp, 12, 1e-4f);
    s.mean = fbuf(N, 13, 0.1f); s.rstd = fbuf(N, 14, 2); s.w = fbuf(C, 15, 2);
    s.b = fbuf(4 * C, 16, 0.1f); s.wte = fbuf((size_t)s.Vp * C, 19, 0.05f);
    s.wpe = fbuf((size_t)s.maxT * C, 20, 0.05f); s.wqkv = fbuf(3 * (size_t)C * C, 23, 0.05f);
    s.wfc = fbuf(4 * (size_t)C * C, 24, 0.05f); s.lse = fbuf(N, 28, 1);
    for (size_t i = 0; i < N; i++)
        s.lse[i] += 11.0f;
    /* outputs */
    s.ox = fbuf(N * C, 40, 0); s.oqkv = fbuf(N * 3 * C, 41, 0); s.oh4 = fbuf(N * 4 * C, 42, 0);
    s.ologits = fbuf(N * s.Vp, 43, 0); s.odlogits = fbuf(N * s.Vp, 44, 0);
    s.omean = fbuf(N, 45, 0); s.orstd = fbuf(N, 46, 0);
    s.oatt = fbuf((size_t)s.B * s.NH * s.T * s.T, 47, 0); s.dw = fbuf(C, 48, 0);
    s.db = fbuf(4 * C, 49, 0); s.dwte = fbuf((size_t)s.Vp * C, 50, 0);
    s.dwpe = fbuf((size_t)s.maxT * C, 51, 0); s.dwqkv = fbuf(3 * (size_t)C * C, 52, 0);
    s.dwfc = fbuf(4 * (size_t)C * C, 53, 0); s.loss = fbuf(N, 54, 0);
    s.p = fbuf(s.nparams, 29, 0.1f); s.g = fbuf(s.nparams, 30, 0.01f);
    s.m = fbuf(s.nparams, 31, 0.001f); s.v = fbuf(s.nparams, 32, 0.001f);
    for (size_t i = 0; i < s.nparams; i++)
        s.v[i] = fabsf(s.v[i]);
    s.inp = malloc(sizeof(int32_t) * N);
    s.tgt = malloc(sizeof(int32_t) * N);
    for (size_t i = 0; i < N; i++) {
        s.inp[i] = (int32_t)((i * 7919) % (size_t)s.V);
        s.tgt[i] = (int32_t)((i * 104729) % (size_t)s.V);
    }

    char err[256];
    llm_backend fast, slow;
    if (llm_backend_init(&fast, "cpu", threads, err, sizeof err) != 0 ||
        llm_backend_init(&slow, "cpu-ref", threads, err, sizeof err) != 0) {
        fprintf(stderr, "bench_kernels: %s\n", err);
        return 70;
    }
    printf("# GPT-2 124M shapes: B=%d T=%d C=%d NH=%d V=%d Vp=%d L=%d, %zu params; "
           "threads=%d, median of %d (cpu) / %d (cpu-ref), %s\n",
           s.B, s.T, C, s.NH, s.V, s.Vp, s.L, s.nparams, threads, reps, ref_reps,
           cpu_clock ? "CPU time / threads" : "wall-clock time");
    double r1 = sgemm_rate(threads, s.N, 3072, 768, reps);
    double r2 = sgemm_rate(threads, s.N, 768, 3072, reps);
    double r3 = sgemm_rate(threads, 768, 3072, 256, reps);
    double sg = (r1 + r2 + r3) / 3;
    printf("sgemm (OpenBLAS, %d threads) %dx3072x768 %.1f  %dx768x3072 %.1f  768x3072x256 %.1f"
           "  GFLOP/s; mean %.1f\n", threads, s.N, r1, s.N, r2, r3, sg);
    printf("%-24s %6s %10s %10s %10s %10s %9s\n", "op", "calls", "cpu ms", "cpu rate",
           "ref ms", "ref rate", "speedup");
    double step = 0, step_ref = 0;
    for (int op = 0; op < NOPS; op++) {
        if (only && !strstr(NAMES[op], only))
            continue;
        int isflop;
        double wk = work(&s, op, &isflop), tf = time_op(&fast, &s, op, reps);
        int lm = op == OP_MM_LM_F || op == OP_MM_LM_B;
        double tr = ref && (ref_lm || !lm) ? time_op(&slow, &s, op, ref_reps) : NAN;
        const char *unit = isflop ? "GF/s" : "GB/s";
        step += tf * per_step(op, s.L);
        step_ref += tr * per_step(op, s.L);
        printf("%-24s %6d %10.3f %5.1f %4s %10.1f %5.1f %4s %8.1fx\n", NAMES[op],
               per_step(op, s.L), tf * 1e3, wk / tf / 1e9, unit, tr * 1e3, wk / tr / 1e9, unit,
               tr / tf);
        fflush(stdout);
    }
    if (!do_step) {
        llm_backend_free(&fast);
        llm_backend_free(&slow);
        return 0;
    }
    double flops = 6.0 * (double)s.nparams * (double)N, ts[64];
    int sreps = reps > 64 ? 64 : reps;
    run_step(&fast, &s);
    for (int r = 0; r < sreps; r++) {
        double t0 = now();
        run_step(&fast, &s);
        ts[r] = now() - t0;
    }
    double st = median(ts, sreps);
    double after = (sgemm_rate(threads, s.N, 3072, 768, reps) +
                    sgemm_rate(threads, s.N, 768, 3072, reps) +
                    sgemm_rate(threads, 768, 3072, 256, reps)) / 3;
    printf("sgemm mean after the ops: %.1f GFLOP/s\n", after);
    sg = 0.5 * (sg + after);
    printf("step, sum of ops x calls: cpu %.1f ms", step * 1e3);
    if (ref && ref_lm)
        printf(", cpu-ref %.1f ms", step_ref * 1e3);
    printf("\nstep, ops run in order:   cpu %.1f ms = %.1f GFLOP/s (6 x params x tokens / time)"
           " = %.0f%% of the sgemm rate (%.1f GFLOP/s, mean of before and after)\n",
           st * 1e3, flops / st / 1e9, 100 * flops / st / 1e9 / sg, sg);
    llm_backend_free(&fast);
    llm_backend_free(&slow);
    return 0;
}
