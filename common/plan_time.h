/* plan_time.h — the step-time model of the planner: compute against communication.
 *
 * For one optimizer step of a training plan (common/plan.h) on `gpus` devices, with the
 * global batch of G tokens split over dp = gpus / (tp * pp) data-parallel ranks and
 * m = G / (B * T * dp) micro-batches per rank:
 *   compute     G / dp * F / (tp * pp) / (peak * mfu), F = training FLOPs per token
 *               (6 N + 6 L T C as llm-train's MFU; recompute full 8 N + 8 L T C,
 *               selective 6 N + 8 L T C)
 *   bubble      1F1B pipeline: idle fraction (pp - 1) / (m + pp - 1) of the pipelined time
 *   dp comm     gradients of the device's parameters, fp32 (Sg = 4 P_dev bytes), and for
 *               ZeRO >= 1 the fp32 parameters (Sp = 4 P_dev): ZeRO-0 all-reduce Sg
 *               (2 (dp-1)/dp Sg over the bus bandwidth), ZeRO-1/2 reduce-scatter Sg +
 *               all-gather Sp ((dp-1)/dp (Sg + Sp)), ZeRO-3 one more all-gather of Sp;
 *               the bus bandwidth is the node's link when the whole job fits in one node,
 *               else the network's (a ring across nodes runs at the per-GPU network rate)
 *   tp comm     per layer and micro-batch, 2 all-reduces forward and 2 backward of the
 *               (B, T, C) activations (2 bytes in bf16/fp16, 4 in fp32), inside a node
 *   pp comm     per micro-batch, the (B, T, C) activations forward and their gradient back
 *               across each stage boundary (an upper bound: all of it on the critical path)
 *   step        compute / (1 - bubble) + tp comm + pp comm + the exposed dp comm: all of it,
 *               or with overlap what does not fit under the backward (2/3 of compute).
 * Bus bandwidths follow nccl-tests' busbw: what `llm-bench allreduce` measures.
 */
#ifndef LLM_PLAN_TIME_H
#define LLM_PLAN_TIME_H

#include <stdio.h>

#include "common/json.h"
#include "common/plan.h"
#include "common/status.h"

typedef struct {
    double peak_tflops;    /* dense peak per device for the plan's precision; 0: default */
    double mfu;            /* fraction of the peak the kernels reach, (0, 1]; 0: default */
    int gpus_per_node;     /* 0: default 8 */
    double link_gbs;       /* collective bus bandwidth inside a node, GB/s; 0: default */
    double net_gbs;        /* bus bandwidth of a collective across nodes, GB/s; 0: default */
    double global_tokens;  /* tokens per optimizer step, all ranks; <= 0: B * T * dp */
    int overlap;           /* 1: the dp collectives overlap the backward pass */
} llm_plan_hw;

/* The defaults (an H100/H200 SXM node; assumptions, not measurements — see the man page):
 * peak 989 TFLOP/s bf16/fp16, 67 fp32; mfu 0.4; 8 GPUs per node; link 360 GB/s;
 * network 40 GB/s (one 400 Gb/s NIC per GPU at 80%). */
void llm_plan_hw_defaults(llm_plan_hw *hw, llm_precision p);

typedef struct {
    double tokens_step;     /* G */
    double micro_batches;   /* m per rank per step */
    double flops_token;     /* F */
    double compute_ms, bubble, dp_comm_ms, dp_exposed_ms, tp_comm_ms, pp_comm_ms;
    double step_ms;
    double tokens_per_s, tokens_per_s_gpu;
    double comm_over_compute;   /* (dp + tp + pp comm) / compute */
    int dp_across_nodes;        /* 1: the dp collectives use the network bandwidth */
    llm_plan_hw hw;             /* the hardware numbers used (defaults filled in) */
} llm_plan_time;

/* Fill *out for a training plan p of c (c->train must be 1).  hw may hold zeros for
 * defaults.  LLM_EUSAGE: an inference plan, global_tokens not a multiple of B*T*dp, or a
 * hardware number out of range (named). */
int llm_plan_time_compute(const llm_plan_config *c, const llm_plan *p, const llm_plan_hw *hw,
                          llm_plan_time *out, llm_status *st);

void llm_plan_time_write_table(const llm_plan_time *t, FILE *f);
/* Writes the fields of t as members of the currently open JSON object. */
void llm_plan_time_write_json(const llm_plan_time *t, llm_json *j);

#endif
