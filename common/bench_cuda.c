/* bench_cuda.c — llm-bench's GPU rows: the peak table, and gemm/mem rows from the CUDA
 * benchmarks of kernels/cuda/cuda_bench.cu (LLM_ENODEV in a build without CUDA). */
#include "common/bench.h"

#include <stdlib.h>
#include <string.h>

#ifdef LLM_CUDA
#include "kernels/cuda/cuda_ext.h"
#endif

/* Dense flop per clock per SM (an FMA is 2 flop), from NVIDIA's architecture whitepapers
 * (V100, A100, H100) and the fp32 core counts of the Ampere GA10x and Ada whitepapers:
 *   f32   CUDA cores x 2: 64 cores/SM on 7.0, 7.5, 8.0; 128 on 8.6, 8.9, 9.0
 *   tf32  tensor cores, A100: 512 FMA/clk/SM; H100: 1024
 *   bf16, f16 (fp32 accumulate)  V100 (f16 only): 512 FMA/clk/SM; A100: 1024; H100: 2048
 * Checks against the datasheets (SMs x clock): V100 SXM2 80 x 1530 MHz: 15.7 f32, 125 f16;
 * A100 108 x 1410 MHz: 19.5 f32, 156 tf32, 312 bf16; H100 SXM5 / H200 132 SMs: 66.9 f32
 * at 1980 MHz, 494.7 tf32 and 989.4 bf16 at the 1830 MHz tensor-core boost clock of the
 * H100 whitepaper (TFLOP/s).  Consumer parts of 7.5, 8.6 and 8.9 run tensor-core fp32
 * accumulation at half rate on GeForce boards and full rate on data-center ones, so only
 * their f32 rate is in the table. */
static const struct {
    int major, minor;
    double f32, tf32, bf16, f16;   /* flop/clk/SM; -1 unknown */
    double tensor_mhz_cap;         /* tensor dtypes at most at this clock (0: none) */
} peak_table[] = {
    {7, 0, 128, -1, -1, 1024, 0},
    {7, 5, 128, -1, -1, -1, 0},
    {8, 0, 128, 1024, 2048, 2048, 0},
    {8, 6, 256, -1, -1, -1, 0},
    {8, 9, 256, -1, -1, -1, 0},
    {9, 0, 256, 2048, 4096, 4096, 1830},
};

double llm_bench_gpu_peak_gflops(int cc_major, int cc_minor, int sm_count, double clock_mhz,
                                 const char *dtype)
{
    if (sm_count <= 0 || !(clock_mhz > 0) || !dtype) return -1;
    for (size_t i = 0; i < sizeof peak_table / sizeof peak_table[0]; i++) {
        if (peak_table[i].major != cc_major || peak_table[i].minor != cc_minor) continue;
        double per = -1;
        int tensor = 1;
        if (!strcmp(dtype, "f32")) { per = peak_table[i].f32; tensor = 0; }
        else if (!strcmp(dtype, "tf32")) per = peak_table[i].tf32;
        else if (!strcmp(dtype, "bf16")) per = peak_table[i].bf16;
        else if (!strcmp(dtype, "f16")) per = peak_table[i].f16;
        if (per <= 0) return -1;
        double mhz = clock_mhz;
        if (tensor && peak_table[i].tensor_mhz_cap > 0 && mhz > peak_table[i].tensor_mhz_cap)
            mhz = peak_table[i].tensor_mhz_cap;
        return per * sm_count * mhz * 1e-3;   /* flop/clk x MHz = Mflop/s; / 1e3 = GFLOP/s */
    }
    return -1;
}

double llm_bench_gpu_peak_gbs(double mem_clock_mhz, int bus_width_bits)
{
    if (!(mem_clock_mhz > 0) || bus_width_bits <= 0) return -1;
    return 2.0 * mem_clock_mhz * 1e6 * (bus_width_bits / 8.0) / 1e9;
}

/* "fp32" -> "f32", "fp16" -> "f16"; NULL for names the GPU gemm does not know */
static const char *gpu_dtype(const char *d)
{
    if (!strcmp(d, "f32") || !strcmp(d, "fp32")) return "f32";
    if (!strcmp(d, "f16") || !strcmp(d, "fp16")) return "f16";
    if (!strcmp(d, "tf32")) return "tf32";
    if (!strcmp(d, "bf16")) return "bf16";
    return NULL;
}

/* The GPU mem ops: bytes moved per repetition (x size) and whether they stay in device
 * memory (then the DRAM peak applies). */
static const struct { const char *op; double factor; int dram; } mem_ops[] = {
    {"copy", 2, 1}, {"memcpy", 2, 1}, {"triad", 3, 1}, {"h2d", 1, 0}, {"d2h", 1, 0},
};

static int mem_op(const char *op)
{
    for (int i = 0; i < (int)(sizeof mem_ops / sizeof mem_ops[0]); i++)
        if (!strcmp(op, mem_ops[i].op)) return i;
    return -1;
}

#ifdef LLM_CUDA

static int cuda_code(int rc, llm_status *st, const char *err)
{
    switch (rc) {
    case LLM_CUDA_OK: return 0;
    case LLM_CUDA_ENODEV:
    case LLM_CUDA_EUNSUP: return llm_err(st, LLM_ENODEV, "%s", err);
    case LLM_CUDA_ENOMEM: return llm_err(st, LLM_ENOMEM, "%s", err);
    default: return llm_err(st, LLM_ESOFTWARE, "%s", err);
    }
}

int llm_bench_gpu_peaks(const char *dtype, double *gflops, double *gbs, char *name, size_t namelen,
                        llm_status *st)
{
    llm_cuda_devinfo di;
    char err[256] = "";
    int rc = llm_cuda_bench_devinfo(&di, err, sizeof err);
    if (rc) return cuda_code(rc, st, err);
    const char *d = gpu_dtype(dtype ? dtype : "f32");
    if (gflops) *gflops = d ? llm_bench_gpu_peak_gflops(di.cc_major, di.cc_minor, di.sm_count, di.sm_clock_mhz, d) : -1;
    if (gbs) *gbs = llm_bench_gpu_peak_gbs(di.mem_clock_mhz, di.bus_width_bits);
    if (name && namelen) snprintf(name, namelen, "%s", di.name);
    return 0;
}

/* The device part of a row's note: "NVIDIA H200 (cc 9.0, 132 SMs, 1980 MHz)". */
static void dev_note(char *dst, size_t cap, const llm_cuda_devinfo *di, const char *tail)
{
    snprintf(dst, cap, "%.48s (cc %d.%d, %d SMs, %.0f MHz)%s", di->name, di->cc_major, di->cc_minor,
             di->sm_count, di->sm_clock_mhz, tail);
}

int llm_bench_gemm_cuda(const llm_bench_gemm_opts *o, llm_bench_row *row, llm_status *st)
{
    const char *dt = gpu_dtype(o->dtype);
    if (!dt) return llm_err(st, LLM_EUSAGE, "dtype '%s': the cuda gemm knows f32, tf32, bf16, f16", o->dtype);
    if (o->M <= 0 || o->N <= 0 || o->K <= 0 || o->M > 65536 || o->N > 65536 || o->K > 65536)
        return llm_err(st, LLM_EUSAGE, "gemm size %dx%dx%d: each must be in 1..65536", o->M, o->N, o->K);
    if (o->reps <= 0 || o->warmup < 0) return llm_err(st, LLM_EUSAGE, "reps must be >= 1 and warmup >= 0");
    llm_cuda_devinfo di;
    char err[256] = "";
    int rc = llm_cuda_bench_devinfo(&di, err, sizeof err);
    if (rc) return cuda_code(rc, st, err);
    double *t = malloc((size_t)o->reps * sizeof *t);
    if (!t) return llm_err(st, LLM_ENOMEM, "out of memory for %d times", o->reps);
    llm_cuda_gemm_args a = {.M = o->M, .N = o->N, .K = o->K, .dtype = dt, .warmup = o->warmup, .reps = o->reps,
                            .times = t};
    rc = llm_cuda_bench_gemm(&a, err, sizeof err);
    if (rc) {
        free(t);
        return cuda_code(rc, st, err);
    }
    llm_bench_row_init(row, "gemm", !strcmp(dt, "f32") ? "sgemm" : !strcmp(dt, "tf32") ? "sgemm_tf32"
                                                                  : !strcmp(dt, "bf16") ? "gemm_bf16" : "gemm_f16");
    snprintf(row->device, sizeof row->device, "cuda");
    snprintf(row->dtype, sizeof row->dtype, "%s", dt);
    snprintf(row->shape, sizeof row->shape, "M=%d,N=%d,K=%d", o->M, o->N, o->K);
    row->threads = 0;
    row->warmup = o->warmup;
    llm_bench_row_times(row, t, o->reps, 2.0 * o->M * o->N * (double)o->K, 1e9, "GFLOP/s");
    free(t);
    double peak = o->peak_gflops > 0 ? o->peak_gflops
                                     : llm_bench_gpu_peak_gflops(di.cc_major, di.cc_minor, di.sm_count,
                                                                 di.sm_clock_mhz, dt);
    if (peak > 0) {
        row->peak_pct = 100.0 * row->rate / peak;
        llm_bench_row_kv(row, "peak_gflops", peak);
    }
    llm_bench_row_kv(row, "check_err", a.check_err);
    llm_bench_row_kv(row, "check_bound", a.check_bound);
    dev_note(row->note, sizeof row->note, &di, ", cuBLASLt, output checked");
    return 0;
}

int llm_bench_mem_cuda(const char *op, size_t bytes, int warmup, int reps, llm_bench_row *row,
                       llm_status *st)
{
    int k = mem_op(op);
    if (k < 0) return llm_err(st, LLM_EUSAGE, "mem op '%s': use copy, memcpy, triad, h2d or d2h", op);
    if (bytes < 4 || bytes > ((size_t)1 << 40))
        return llm_err(st, LLM_EUSAGE, "array size %zu bytes: must be in 4..1T", bytes);
    if (reps <= 0 || warmup < 0) return llm_err(st, LLM_EUSAGE, "reps must be >= 1 and warmup >= 0");
    llm_cuda_devinfo di;
    char err[256] = "";
    int rc = llm_cuda_bench_devinfo(&di, err, sizeof err);
    if (rc) return cuda_code(rc, st, err);
    double *t = malloc((size_t)reps * sizeof *t);
    if (!t) return llm_err(st, LLM_ENOMEM, "out of memory for %d times", reps);
    llm_cuda_mem_args a = {.op = op, .bytes = bytes, .warmup = warmup, .reps = reps, .times = t};
    rc = llm_cuda_bench_mem(&a, err, sizeof err);
    if (rc) {
        free(t);
        return cuda_code(rc, st, err);
    }
    size_t b = bytes / 4 * 4;
    llm_bench_row_init(row, "mem", op);
    snprintf(row->device, sizeof row->device, "cuda");
    snprintf(row->shape, sizeof row->shape, "bytes=%zu", b);
    row->threads = 0;
    row->warmup = warmup;
    llm_bench_row_times(row, t, reps, mem_ops[k].factor * (double)b, 1e9, "GB/s");
    free(t);
    double peak = mem_ops[k].dram ? llm_bench_gpu_peak_gbs(di.mem_clock_mhz, di.bus_width_bits) : -1;
    if (peak > 0) {
        row->peak_pct = 100.0 * row->rate / peak;
        llm_bench_row_kv(row, "peak_gbs", peak);
    }
    dev_note(row->note, sizeof row->note, &di, mem_ops[k].dram ? ", output checked" : ", pinned host, output checked");
    return 0;
}

#else

static int no_cuda(llm_status *st)
{
    return llm_err(st, LLM_ENODEV, "device 'cuda': not available in this build (CPU only; rebuild with make CUDA=1)");
}

int llm_bench_gpu_peaks(const char *dtype, double *gflops, double *gbs, char *name, size_t namelen,
                        llm_status *st)
{
    (void)dtype; (void)gflops; (void)gbs; (void)name; (void)namelen;
    return no_cuda(st);
}

int llm_bench_gemm_cuda(const llm_bench_gemm_opts *o, llm_bench_row *row, llm_status *st)
{
    (void)row;
    if (!gpu_dtype(o->dtype)) return llm_err(st, LLM_EUSAGE, "dtype '%s': the cuda gemm knows f32, tf32, bf16, f16", o->dtype);
    return no_cuda(st);
}

int llm_bench_mem_cuda(const char *op, size_t bytes, int warmup, int reps, llm_bench_row *row,
                       llm_status *st)
{
    (void)bytes; (void)warmup; (void)reps; (void)row;
    if (mem_op(op) < 0) return llm_err(st, LLM_EUSAGE, "mem op '%s': use copy, memcpy, triad, h2d or d2h", op);
    return no_cuda(st);
}

#endif
