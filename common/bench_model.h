/* bench_model.h — train and infer throughput benchmarks (rows in the bench.h schema). */
#ifndef LLM_BENCH_MODEL_H
#define LLM_BENCH_MODEL_H

#include "common/bench.h"
#include "common/model.h"
#include "common/plan.h"

typedef struct {
    const char *model_path;          /* .llmk (weights loaded) or NULL with config */
    const llm_model_config *config;  /* random init when there is no model file */
    const char *device;              /* "cpu", "cpu-ref", "cuda" */
    int threads, warmup, reps;
    int B, T;                        /* train: batch and sequence; infer: batch and prompt */
    int gen;                         /* infer: decode steps timed (tokens per sequence) */
    double peak_gflops;              /* for MFU (<= 0: measured FMA peak; cuda: the GPU table's
                                        peak for the matmul operands: f32, tf32 with
                                        LLM_CUDA_TF32=1, bf16 or f16) */
    llm_precision precision;         /* train: matmul operands as llm-train --precision (fp32
                                        master weights + a 16-bit copy for bf16/fp16) */
    double loss_scale;               /* train fp16: initial dynamic loss scale (<= 0: 65536) */
    long long loss_scale_window;     /* train fp16: clean steps before it doubles (<= 0: 1000) */
} llm_bench_model_opts;

/* Training FLOPs per token: 6 P + 6 L T C (matmuls forward+backward, plus causal
 * attention scores and values over T/2 positions on average). */
double llm_bench_train_flops_per_token(const llm_model_config *c, int T);

/* The dense peak in GFLOP/s that training's MFU on backend be is measured against when
 * none is given (llm-train's train.peak_flops, llm-bench's --peak): on cuda the device's
 * table peak (llm_bench_gpu_peaks) for the GEMMs it runs at precision lo (bf16/f16 tensor
 * cores, else fp32, or TF32 when LLM_CUDA_TF32=1 turns it on), -1 when the table does
 * not know the device; on the CPU the fp32 FMA peak of its threads, measured now, in
 * every precision (its bf16/fp16 matmuls are fp32 GEMMs on rounded operands). */
double llm_bench_train_peak_gflops(const llm_backend *be, llm_dtype lo);

/* Time full training steps (zero_grad, forward, backward, AdamW) on random tokens in
 * o->precision (fp16 with dynamic loss scaling, as llm-train); one row: tokens/s over the
 * median step, ms_per_step, mfu (%), flops_per_token; precision "fp32"/"bf16"/"fp16" and
 * dtype the matmul operands' ("f32", "bf16", "f16").  LLM_ENODEV when the backend has no
 * bf16/fp16 matmuls. */
int llm_bench_train(const llm_bench_model_opts *o, llm_bench_row *row, llm_status *st);

/* Prefill B prompts of T tokens, then gen greedy decode steps (llm_infer_argmax), on a
 * model file; two rows: "prefill" (tokens/s, ttft_ms = prefill + the first tokens) and
 * "decode" (tokens/s = B / median step, tpot_ms). */
int llm_bench_infer(const llm_bench_model_opts *o, llm_bench_row rows[2], llm_status *st);

#endif
