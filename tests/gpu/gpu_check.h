/* gpu_check.h — pieces of the gpu_check program shared between its files. */
#ifndef LLM_GPU_CHECK_H
#define LLM_GPU_CHECK_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "kernels/backend.h"

/* GEMM throughput through cuBLASLt on its own buffers: M x N x K with mode "fp32"
 * (exact), "tf32" or "bf16" (bf16 inputs/outputs, fp32 accumulate).  Median of reps
 * timed runs after warm-up, on random data.  0 with *tflops, or -1 with a message. */
int gpu_bench_gemm(int M, int N, int K, const char *mode, int reps, double *tflops,
                   char *err, size_t errlen);

/* Accuracy of cuBLASLt's low-precision paths on random M x N x K inputs (seeded):
 * mode "bf16" (bf16 inputs, fp32 accumulate and output) or "tf32" (fp32 inputs, TF32
 * tensor cores).  err_rounded: against fp64 on the inputs as the GPU sees them (bf16-
 * rounded; for tf32 the fp32 inputs); err_exact: against fp64 on the fp32 inputs.
 * 0, or -1 with a message. */
int gpu_gemm_lo_check(int M, int N, int K, const char *mode, unsigned seed,
                      double *err_rounded, double *err_exact, char *err, size_t errlen);

/* One checked output for gpu_check's table: err (max relative error, or 0/1 for a
 * bit-exact comparison) passes when err <= bound. */
typedef void (*gc_report_fn)(void *x, const char *op, const char *shape, double err,
                             double bound);

/* The inference ops of g (embed_rows, matmul_rows, kv_store, attention_rows) against
 * the cpu-ref backend's, on random inputs from seed; tiny: small shapes only.  Each
 * result goes to report.  0, or -1 when g lacks the ops (reported as a failure). */
int gpu_check_infer(llm_backend *g, uint64_t seed, int tiny, gc_report_fn report, void *x);

/* ---- shared by gpu_check's files (gc_util.c) ---- */

/* The run's state: the backend under test, the reference, the table. */
typedef struct {
    llm_backend g;      /* cuda */
    llm_backend r;      /* cpu-ref (host memory) */
    int have_ref;
    int cuda;           /* g is the cuda backend (else --device: a harness self-test) */
    uint64_t rng;
    FILE *out;          /* copy of the table, may be NULL */
    int rows, fails;
} gc;

/* splitmix64 stream of x; uniform in [lo,hi) */
uint64_t rnext(gc *x);
float runi(gc *x, float lo, float hi);
/* malloc that exits(2) when the host is out of memory */
void *xmalloc(size_t n);
/* fresh host arrays: n uniforms in [lo,hi), n ids in [0,V), double/float copies */
float *rnd(gc *x, size_t n, float lo, float hi);
int32_t *rtok(gc *x, size_t n, int V);
double *dcopy(const float *a, size_t n);
float *fdup(const float *a, size_t n);
/* device copy of host data (exits on failure); n NaNs; n floats back to the host */
void *gput(gc *x, const void *h, size_t bytes);
float *gpoison(gc *x, size_t n);
float *gget(gc *x, const float *d, size_t n);
/* max_i |a_i - r_i| / max(|r_i|, rms(r)) (INFINITY on a non-finite a_i); errff against
 * a float reference */
double err64(const float *a, const double *r, size_t n);
double errff(const float *a, const float *b, size_t n);
/* table rows: row_print as given; row compares a (cuda) with ref (double) and c
 * (cpu-ref, may be NULL; must meet 2 x bound); row_det passes when a == b bit for bit */
void row_print(gc *x, const char *op, const char *shape, double eg, double egr, double er,
               double bound, int pass);
void row(gc *x, const char *op, const char *shape, const float *a, const double *ref,
         const float *c, size_t n, double bound);
void row_det(gc *x, const char *op, const char *shape, const float *a, const float *b, size_t n);
/* one row with its errors as given (eg: cuda vs the reference, egr: vs cpu-ref, er:
 * cpu-ref vs the reference; -1 not shown): counted, and failed too when the backend
 * recorded an error */
void row_result(gc *x, const char *op, const char *shape, double eg, double egr, double er,
                double bound, int pass);
/* one pass/fail row with a free-form measure (bound printed; pass decided by the caller) */
void row_check(gc *x, const char *op, const char *shape, double v, double bound, int pass);

/* ---- lo (bf16/fp16) tensors (gc_util.c) ----
 * lo_unit: the unit roundoff u (2^-8 bf16, 2^-11 fp16).  glo_get: n lo elements of a
 * device tensor as floats (exact); glo_put: a device lo tensor of a's values rounded.
 * err_lo: err64 less k roundings' allowance per element (k u |r_i|, and k 2^-25 for fp16
 * denormals): a lo output is its fp32 value rounded once, so k = 1 against a double
 * reference, k = 2 between two backends' lo outputs (their roundings may fall on either
 * side); a wrong rounding (truncation, rounding twice) still leaves up to u |r_i| over.
 * row_lo: as row with err_lo; row_bits: passes when the bytes are equal. */
double lo_unit(int lo);
/* host lo bits of a's values rounded; the values of host lo bits; a's values rounded to
 * lo (what a lo tensor holds); all malloc'd */
uint16_t *lo_host(const float *a, size_t n, int lo);
float *host_vals(const uint16_t *h, size_t n, int lo);
float *lo_vals(const float *a, size_t n, int lo);
float *glo_get(gc *x, const void *d, size_t n, int lo);
void *glo_put(gc *x, const float *a, size_t n, int lo);
double err_lo(const float *a, const double *r, size_t n, int lo, double k);
void row_lo(gc *x, const char *op, const char *shape, const float *a, const double *ref,
            const float *c, size_t n, double bound, int lo);
void row_bits(gc *x, const char *op, const char *shape, const void *a, const void *b, size_t bytes);

#define B_EW 1e-5     /* elementwise: rounding of one or two operations */
/* (bounds are for err64's metric; fp32 ops land near 1e-6, wrong ones near 1) */
#define B_RED 1e-4    /* reductions and GEMMs in fp32 */
#define B_BWD 5e-4    /* chained backward reductions (attention, layernorm dinp) */


/* The mixed-precision ops (cast_lo, matmul_forward_lo, matmul_backward_lo) and
 * device_stats of x->g, against the CPU conversions of common/quant.h, the cpu-ref
 * backend's lo ops when it has them, and double precision on the lo operands
 * (gpu_check_lo.c).  tiny: small shapes only. */
void gpu_check_lo(gc *x, int tiny);
void gpu_check_device_stats(gc *x, int tiny);
/* LLM_CUDA_OFF: each part off, "all", an unknown name (gpu_check_off.c; cuda only). */
void gpu_check_off(gc *x);
/* attention_forward_lse / attention_backward_lse (gpu_check_att_lo.c). */
void gpu_check_attention_lse(gc *x, int tiny);
/* layernorm_forward_lo, gelu_forward_lo / gelu_backward_lo, xent_forward_lo /
 * xent_backward_lo (gpu_check_ops_lo.c). */
void gpu_check_ops_lo(gc *x, int tiny);
/* matmul_forward_gelu_lo / matmul_backward_dgelu_lo, their cuBLASLt epilogue and
 * fallback paths (gpu_check_gelu_lo.c). */
void gpu_check_gelu_lo(gc *x, int tiny);
/* residual_layernorm_forward at (N,C) against fp64, cpu-ref and the backend's own
 * residual_forward + layernorm_forward, in place too (gpu_check_resln.c). */
void gpu_check_resln(gc *x, int N, int C);
/* adamw_segs against the backend's adamw + cast_lo (bit for bit), the CPU's rounding,
 * fp64 and cpu-ref (gpu_check_adamw.c). */
void gpu_check_adamw_segs(gc *x, int tiny);
/* to_device ordering and host-buffer reuse, staged and synchronous uploads
 * (gpu_check_xfer.c). */
void gpu_check_xfer(gc *x);
/* uploads through the copy stream while the compute stream is busy, each consumed by an
 * op, no synchronisation in between (gpu_check_xfer.c).  tiny: small buffers. */
void gpu_check_xfer_streams(gc *x, int tiny);
/* embed_hint: hinted = plain bit for bit, stale hints dropped (gpu_check_embed.c) */
void gpu_check_embed_hint(gc *x, int tiny);

/* Recorded decode steps (gpu_check_graph.c): logits equal to the unrecorded ops bit
 * for bit, and the recordings used. */
void gpu_check_graph(gc *x);

/* argmax_rows against llm_argmax (ties, NaN, -inf, signed zeros, padded and unaligned
 * rows), and greedy decode ids of llm_infer_argmax = llm_argmax of llm_infer_logits
 * (gpu_check_argmax.c).  tiny: no 64 x 50257 rows. */
void gpu_check_argmax(gc *x, int tiny);

/* What a recording must refuse (host work inside graph_capture), and with two devices
 * (emulated, or a machine with two GPUs) the backend on the current device and the
 * shared-memory opt-ins made per device (gpu_check_rec.cu). */
void gpu_check_rec(gc *x);

#endif
