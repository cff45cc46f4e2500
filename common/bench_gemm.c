/* bench_gemm.c — GEMM throughput with OpenBLAS and the CPU's measured FMA peak. */
#include "common/bench.h"

#include <cblas.h>
#include <dlfcn.h>
#include <math.h>
#include <omp.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#if defined(__x86_64__)
#include <immintrin.h>
#endif

/* Ten independent accumulator chains hide the FMA latency (4 cycles) on two pipes. */
#define PEAK_CHAINS 10

#if defined(__x86_64__)
/* fma_loop_avx2 and fma_loop_avx512: the same loop on 8 and 16 lanes (two 512-bit FMA
 * pipes, Zen 5 or a Xeon, double the AVX2 rate; one, or 512-bit ops split in two, match
 * it).  Named accumulators, not an array: the compiler must keep all ten in registers. */
#define PCAT(a, b) PCAT2(a, b)
#define PCAT2(a, b) a##b
#define POP(bits, op) PCAT(PCAT(_mm, bits), op)
#define FMA_LOOP(name, tgt, bits)                                                           \
    __attribute__((target(tgt))) static float name(long iters)                              \
    {                                                                                       \
        PCAT(__m, bits) a = POP(bits, _set1_ps)(0.999999f), b = POP(bits, _set1_ps)(1e-7f); \
        PCAT(__m, bits) c0 = POP(bits, _set1_ps)(0), c1 = POP(bits, _set1_ps)(1),           \
            c2 = POP(bits, _set1_ps)(2), c3 = POP(bits, _set1_ps)(3),                       \
            c4 = POP(bits, _set1_ps)(4), c5 = POP(bits, _set1_ps)(5),                       \
            c6 = POP(bits, _set1_ps)(6), c7 = POP(bits, _set1_ps)(7),                       \
            c8 = POP(bits, _set1_ps)(8), c9 = POP(bits, _set1_ps)(9);                       \
        for (long it = 0; it < iters; it++) {                                               \
            c0 = POP(bits, _fmadd_ps)(c0, a, b); c1 = POP(bits, _fmadd_ps)(c1, a, b);       \
            c2 = POP(bits, _fmadd_ps)(c2, a, b); c3 = POP(bits, _fmadd_ps)(c3, a, b);       \
            c4 = POP(bits, _fmadd_ps)(c4, a, b); c5 = POP(bits, _fmadd_ps)(c5, a, b);       \
            c6 = POP(bits, _fmadd_ps)(c6, a, b); c7 = POP(bits, _fmadd_ps)(c7, a, b);       \
            c8 = POP(bits, _fmadd_ps)(c8, a, b); c9 = POP(bits, _fmadd_ps)(c9, a, b);       \
        }                                                                                   \
        PCAT(__m, bits) s = POP(bits, _add_ps)(POP(bits, _add_ps)(c0, c1), c2);             \
        s = POP(bits, _add_ps)(POP(bits, _add_ps)(s, c3), POP(bits, _add_ps)(c4, c5));      \
        s = POP(bits, _add_ps)(POP(bits, _add_ps)(s, c6), POP(bits, _add_ps)(c7, c8));      \
        s = POP(bits, _add_ps)(s, c9);                                                      \
        float out[bits / 32];                                                               \
        POP(bits, _storeu_ps)(out, s);                                                      \
        return out[0] + out[bits / 32 - 1];                                                 \
    }
FMA_LOOP(fma_loop_avx2, "avx2,fma", 256)
FMA_LOOP(fma_loop_avx512, "avx512f", 512)
#undef FMA_LOOP
#undef POP
#undef PCAT2
#undef PCAT
#endif

static float fma_loop_scalar(long iters)
{
    float acc[PEAK_CHAINS];
    for (int i = 0; i < PEAK_CHAINS; i++) acc[i] = (float)i;
    for (long it = 0; it < iters; it++)
        for (int i = 0; i < PEAK_CHAINS; i++) acc[i] = fmaf(acc[i], 0.999999f, 1e-7f);
    float s = 0;
    for (int i = 0; i < PEAK_CHAINS; i++) s += acc[i];
    return s;
}

double llm_bench_cpu_peak_gflops(int threads)
{
    if (threads <= 0) threads = omp_get_max_threads();
    int lanes = 1;
#if defined(__x86_64__)
    __builtin_cpu_init();
    if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma")) lanes = 8;
    if (lanes == 8 && __builtin_cpu_supports("avx512f")) lanes = 16;
#endif
    /* One thread's rate times the threads: FMA pipes are per core, and a parallel loop
     * on a shared machine measures the neighbours instead.  Best of many short runs
     * (~1 ms each): a run that had the core to itself shows the hardware's rate. */
    const long iters = 400000;
    double best = 0;
    volatile float sink = 0;
    for (int rep = 0; rep < 12; rep++) {
        double t0 = llm_now_s();
#if defined(__x86_64__)
        sink += lanes == 16 ? fma_loop_avx512(iters)
                : lanes == 8 ? fma_loop_avx2(iters) : fma_loop_scalar(iters);
#else
        sink += fma_loop_scalar(iters);
#endif
        double dt = llm_now_s() - t0;
        double g = 2.0 * PEAK_CHAINS * lanes * (double)iters / dt / 1e9;
        if (g > best) best = g;
    }
    (void)sink;
    return best * threads;
}

/* cblas_sbgemm as OpenBLAS declares it (bfloat16 = uint16_t storage); looked up at run
 * time because distribution builds may leave it out (BUILD_BFLOAT16=0). */
typedef void (*sbgemm_fn)(int, int, int, int, int, int, float, const void *, int,
                          const void *, int, float, float *, int);

typedef struct {
    int M, N, K, dt;   /* dt: 0 f32, 1 f64, 2 bf16 */
    void *A, *B, *C;
    sbgemm_fn sbgemm;
} gemm_ctx;

static void gemm_run(void *p)
{
    gemm_ctx *g = p;
    switch (g->dt) {
    case 0:
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, g->M, g->N, g->K, 1.0f, g->A,
                    g->K, g->B, g->N, 0.0f, g->C, g->N);
        break;
    case 1:
        cblas_dgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, g->M, g->N, g->K, 1.0, g->A,
                    g->K, g->B, g->N, 0.0, g->C, g->N);
        break;
    default:
        g->sbgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, g->M, g->N, g->K, 1.0f, g->A, g->K,
                  g->B, g->N, 0.0f, g->C, g->N);
        break;
    }
}

int llm_bench_gemm(const llm_bench_gemm_opts *o, llm_bench_row *row, llm_status *st)
{
    int dt;
    size_t esz;
    if (strcmp(o->dtype, "f32") == 0) { dt = 0; esz = 4; }
    else if (strcmp(o->dtype, "f64") == 0) { dt = 1; esz = 8; }
    else if (strcmp(o->dtype, "bf16") == 0) { dt = 2; esz = 2; }
    else return llm_err(st, LLM_EUSAGE, "dtype '%s': the cpu gemm knows f32, f64, bf16", o->dtype);
    if (o->M <= 0 || o->N <= 0 || o->K <= 0 || o->M > 65536 || o->N > 65536 || o->K > 65536)
        return llm_err(st, LLM_EUSAGE, "gemm size %dx%dx%d: each must be in 1..65536", o->M, o->N,
                       o->K);
    if (o->reps <= 0 || o->warmup < 0)
        return llm_err(st, LLM_EUSAGE, "reps must be >= 1 and warmup >= 0");
    int threads = o->threads > 0 ? o->threads : omp_get_max_threads();
    openblas_set_num_threads(threads);

    gemm_ctx g = {.M = o->M, .N = o->N, .K = o->K, .dt = dt};
    if (dt == 2) {
        void *sym = dlsym(RTLD_DEFAULT, "cblas_sbgemm");
        if (!sym)
            return llm_err(st, LLM_ENODEV, "dtype 'bf16': this OpenBLAS has no cblas_sbgemm");
        memcpy(&g.sbgemm, &sym, sizeof sym);
    }
    size_t na = (size_t)o->M * o->K, nb = (size_t)o->K * o->N, nc = (size_t)o->M * o->N;
    /* C is f32 for bf16 inputs (sbgemm accumulates and writes fp32). */
    size_t csz = dt == 2 ? 4 : esz;
    g.A = malloc(na * esz);
    g.B = malloc(nb * esz);
    g.C = calloc(nc, csz);
    double *t = malloc((size_t)o->reps * sizeof *t);
    if (!g.A || !g.B || !g.C || !t) {
        free(g.A); free(g.B); free(g.C); free(t);
        return llm_err(st, LLM_ENOMEM, "out of memory for a %dx%dx%d gemm", o->M, o->N, o->K);
    }
    /* Small non-zero values: denormals or zeros would distort the timing. */
    for (size_t i = 0; i < na; i++) {
        float v = (float)((i * 2654435761u) % 1000) * 1e-3f - 0.5f;
        if (dt == 0) ((float *)g.A)[i] = v;
        else if (dt == 1) ((double *)g.A)[i] = v;
        else { uint32_t u; memcpy(&u, &v, 4); ((uint16_t *)g.A)[i] = (uint16_t)(u >> 16); }
    }
    for (size_t i = 0; i < nb; i++) {
        float v = (float)((i * 40503u) % 997) * 1e-3f - 0.5f;
        if (dt == 0) ((float *)g.B)[i] = v;
        else if (dt == 1) ((double *)g.B)[i] = v;
        else { uint32_t u; memcpy(&u, &v, 4); ((uint16_t *)g.B)[i] = (uint16_t)(u >> 16); }
    }
    llm_bench_time(gemm_run, &g, o->warmup, o->reps, t);

    llm_bench_row_init(row, "gemm", dt == 0 ? "sgemm" : dt == 1 ? "dgemm" : "sbgemm");
    snprintf(row->dtype, sizeof row->dtype, "%s", o->dtype);
    snprintf(row->shape, sizeof row->shape, "M=%d,N=%d,K=%d", o->M, o->N, o->K);
    row->threads = threads;
    row->warmup = o->warmup;
    llm_bench_row_times(row, t, o->reps, 2.0 * o->M * o->N * (double)o->K, 1e9, "GFLOP/s");
    double peak = o->peak_gflops > 0 ? o->peak_gflops : llm_bench_cpu_peak_gflops(threads);
    /* f64 has half the lanes of f32 on the same FMA pipes; CPUs without bf16 FMA run
     * bf16 GEMM on the f32 pipes. */
    if (dt == 1 && !(o->peak_given && o->peak_gflops > 0)) peak *= 0.5;
    if (peak > 0) row->peak_pct = 100.0 * row->rate / peak;
    llm_bench_row_kv(row, "peak_gflops", peak);
    free(g.A); free(g.B); free(g.C); free(t);
    return 0;
}
