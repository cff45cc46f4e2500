/* plan.h — the memory planner: bytes per device for a model, batch and parallel layout.
 *
 * Components (per device, worst pipeline stage; formulas in man/man1/llm-profile.1):
 *   params       P_dev * 4 fp32 master weights, + P_dev * 2 for the 16-bit GEMM copy of
 *                bf16/fp16 training (ZeRO-3: / dp); inference P_dev * wbytes
 *   grads        P_dev * 4                           (ZeRO-2,3: / dp)
 *   optimizer    P_dev * 8, AdamW m and v            (ZeRO-1..3: / dp)
 *   activations  what llmkit's training pass keeps (common/model_pass.c), per layer and
 *                global, each tensor rounded up to 256 bytes as the model lays them out:
 *                fp32; under bf16/fp16 the GEMM inputs (ln1, atty, ln2, ln_f out), qkv,
 *                the fc pre-activation and the logits in 2-byte lo, the attention's row
 *                log-sum-exps instead of its probabilities, the residual streams, res2,
 *                statistics, scratch and the residual gradient fp32; tensor parallelism
 *                splits the per-head and MLP tensors; pipeline stages hold ceil(L/pp)
 *                layers and, 1F1B, pp micro-batches in flight; recompute drops tensors
 *                (selective: the probabilities; full: all but the streams)
 *   kv_cache     inference: 2 * layers * B * maxT * C / tp fp32 elements
 *   workspace    cuBLAS(Lt) workspace on GPUs (32 MiB), 0 on the CPU
 * where P_dev = (embedding params + ceil(L/pp) * per-layer params) / tp,
 * dp = gpus / (tp * pp).  The CPU prediction (any precision and recompute mode; one
 * device, or dp ranks with ZeRO 0 or 1 as llm-train runs them) is exact for llmkit's own
 * allocations; llm-profile and llm-train (LLM_TRAIN_MEMSTAT) measure them to check it.  ZeRO 2 and 3
 * are planning models only.
 */
#ifndef LLM_PLAN_H
#define LLM_PLAN_H

#include <stddef.h>
#include <stdio.h>

#include "common/json.h"
#include "common/model.h"
#include "common/status.h"

typedef enum { LLM_PREC_FP32, LLM_PREC_BF16, LLM_PREC_FP16 } llm_precision;
/* llm_recompute (none, selective, full) is in common/model.h. */

typedef struct {
    llm_model_config model;
    int batch, seq;          /* micro-batch B and sequence length T (T <= max_seq_len) */
    int gpus, tp, pp, zero;  /* devices; tensor/pipeline parallel sizes; ZeRO stage 0..3 */
    double device_mem;       /* bytes per device, <= 0: unknown (no fit verdict) */
    llm_precision precision;
    llm_recompute recompute;
    int train;               /* 1: training; 0: inference (weights, KV cache, activations) */
    int cpu;                 /* 1: CPU (no cuBLAS workspace) */
} llm_plan_config;

typedef struct {
    int dp, layers_per_stage;
    double n_params;         /* whole model */
    double n_params_dev;     /* on the worst device before ZeRO */
    double params, grads, optimizer, activations, kv_cache, workspace, total;
    double act_per_layer;    /* one layer, one micro-batch */
    double act_global;       /* residual streams, logits, scratch (one micro-batch) */
    double act_per_sample;   /* activations + KV cache per unit of B */
    int fits;                /* -1: unknown (no device_mem) */
    long max_batch;          /* largest micro-batch that fits; -1 unknown, 0 none */
} llm_plan;

/* Parse names: "fp32"|"f32", "bf16", "fp16"|"f16"; "none", "selective", "full".
 * 0, or -1 for an unknown name. */
int llm_plan_precision_parse(const char *s, llm_precision *out);
int llm_plan_recompute_parse(const char *s, llm_recompute *out);
const char *llm_plan_precision_name(llm_precision p);
const char *llm_plan_recompute_name(llm_recompute r);

/* Parameter count of cfg (the padded vocabulary included), same as llm_model_num_params. */
double llm_plan_num_params(const llm_model_config *cfg);

/* Compute the plan.  LLM_EUSAGE when the layout is inconsistent (gpus not a multiple of
 * tp*pp, tp not dividing the heads, zero outside 0..3, batch/seq out of range), naming
 * the value. */
int llm_plan_compute(const llm_plan_config *c, llm_plan *out, llm_status *st);

/* Human-readable breakdown (GiB, MiB as fits) and a JSON object with every field. */
void llm_plan_write_table(const llm_plan_config *c, const llm_plan *p, FILE *f);
void llm_plan_write_json(const llm_plan_config *c, const llm_plan *p, llm_json *j);
/* The same fields as members of the JSON object the caller has open (to add more). */
void llm_plan_write_json_members(const llm_plan_config *c, const llm_plan *p, llm_json *j);

#endif
