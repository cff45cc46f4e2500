/* bench_model.h — train and infer throughput benchmarks (rows in the bench.h schema). */
#ifndef LLM_BENCH_MODEL_H
#define LLM_BENCH_MODEL_H

#include "common/bench.h"
#include "common/model.h"

typedef struct {
    const char *model_path;          /* .llmk (weights loaded) or NULL with config */
    const llm_model_config *config;  /* random init when there is no model file */
    const char *device;              /* "cpu", "cpu-ref", "cuda" */
    int threads, warmup, reps;
    int B, T;                        /* train: batch and sequence; infer: batch and prompt */
    int gen;                         /* infer: decode steps timed (tokens per sequence) */
    double peak_gflops;              /* for MFU (<= 0: measured FMA peak; cuda: the GPU table's
                                        f32 peak, tf32 with LLM_CUDA_TF32=1) */
} llm_bench_model_opts;

/* Training FLOPs per token: 6 P + 6 L T C (matmuls forward+backward, plus causal
 * attention scores and values over T/2 positions on average). */
double llm_bench_train_flops_per_token(const llm_model_config *c, int T);

/* Time full training steps (zero_grad, forward, backward, AdamW) on random tokens; one row:
 * tokens/s over the median step, ms_per_step, mfu (%), flops_per_token. */
int llm_bench_train(const llm_bench_model_opts *o, llm_bench_row *row, llm_status *st);

/* Prefill B prompts of T tokens, then gen decode steps, on a model file; two rows:
 * "prefill" (tokens/s, ttft_ms = prefill + first logits) and "decode" (tokens/s =
 * B / median step, tpot_ms). */
int llm_bench_infer(const llm_bench_model_opts *o, llm_bench_row rows[2], llm_status *st);

#endif
