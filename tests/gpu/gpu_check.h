/* gpu_check.h — pieces of the gpu_check program shared between its files. */
#ifndef LLM_GPU_CHECK_H
#define LLM_GPU_CHECK_H

#include <stddef.h>
#include <stdio.h>

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
#include "kernels/backend.h"
#include <stdint.h>
int gpu_check_infer(llm_backend *g, uint64_t seed, int tiny, gc_report_fn report, void *x);

#endif
