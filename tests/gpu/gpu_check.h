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

#endif
