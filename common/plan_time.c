/* plan_time.c — step-time model (formulas in plan_time.h and man/man1/llm-profile.1). */
#include "common/plan_time.h"

#include <math.h>

#include "common/bench_model.h"

void llm_plan_hw_defaults(llm_plan_hw *hw, llm_precision p)
{
    *hw = (llm_plan_hw){0};
    hw->peak_tflops = p == LLM_PREC_FP32 ? 67.0 : 989.0;
    hw->mfu = 0.4;
    hw->gpus_per_node = 8;
    hw->link_gbs = 360.0;
    hw->net_gbs = 40.0;
}

static int bad(double v, double lo, double hi)
{
    return !isfinite(v) || v <= lo || v > hi;
}

int llm_plan_time_compute(const llm_plan_config *c, const llm_plan *p, const llm_plan_hw *hw_in,
                          llm_plan_time *out, llm_status *st)
{
    if (!c->train)
        return llm_err(st, LLM_EUSAGE, "plan: the step-time model is for training plans");
    llm_plan_hw hw;
    llm_plan_hw_defaults(&hw, c->precision);
    if (hw_in) {
        if (hw_in->peak_tflops != 0) hw.peak_tflops = hw_in->peak_tflops;
        if (hw_in->mfu != 0) hw.mfu = hw_in->mfu;
        if (hw_in->gpus_per_node != 0) hw.gpus_per_node = hw_in->gpus_per_node;
        if (hw_in->link_gbs != 0) hw.link_gbs = hw_in->link_gbs;
        if (hw_in->net_gbs != 0) hw.net_gbs = hw_in->net_gbs;
        hw.global_tokens = hw_in->global_tokens;
        hw.overlap = hw_in->overlap != 0;
    }
    if (bad(hw.peak_tflops, 0, 1e6)) return llm_err(st, LLM_EUSAGE, "plan: peak %g TFLOP/s out of range", hw.peak_tflops);
    if (bad(hw.mfu, 0, 1)) return llm_err(st, LLM_EUSAGE, "plan: mfu %g must be in (0, 1]", hw.mfu);
    if (hw.gpus_per_node < 1 || hw.gpus_per_node > 1 << 16) return llm_err(st, LLM_EUSAGE, "plan: %d GPUs per node out of range", hw.gpus_per_node);
    if (bad(hw.link_gbs, 0, 1e6)) return llm_err(st, LLM_EUSAGE, "plan: link bandwidth %g GB/s out of range", hw.link_gbs);
    if (bad(hw.net_gbs, 0, 1e6)) return llm_err(st, LLM_EUSAGE, "plan: network bandwidth %g GB/s out of range", hw.net_gbs);

    const llm_model_config *m = &c->model;
    double dp = p->dp, tp = c->tp, pp = c->pp;
    double bt = (double)c->batch * c->seq, per_step = bt * dp;
    double G = hw.global_tokens > 0 ? hw.global_tokens : per_step;
    double mb = G / per_step;
    if (!isfinite(G) || G > 1e15 || mb < 1 || mb != floor(mb))
        return llm_err(st, LLM_EUSAGE,
                       "plan: global batch %.0f tokens is not a multiple of B*T*dp = %.0f", G, per_step);
    llm_plan_time t = {.tokens_step = G, .micro_batches = mb};

    double N = llm_plan_num_params(m), LTC = (double)m->n_layer * c->seq * m->n_embd;
    t.flops_token = llm_bench_train_flops_per_token(m, c->seq);   /* 6 N + 6 L T C */
    if (c->recompute == LLM_RECOMPUTE_FULL) t.flops_token = 8 * N + 8 * LTC;
    else if (c->recompute == LLM_RECOMPUTE_SELECTIVE) t.flops_token += 2 * LTC;
    double rate = hw.peak_tflops * 1e12 * hw.mfu;   /* FLOP/s per device */
    t.compute_ms = 1e3 * (G / dp) * t.flops_token / (tp * pp) / rate;
    t.bubble = pp > 1 ? (pp - 1) / (mb + pp - 1) : 0;

    /* data parallel: fp32 gradients and (ZeRO >= 1) fp32 parameters of this device */
    double Sg = 4.0 * p->n_params_dev, Sp = Sg, vol = 0;
    if (dp > 1) {
        double f = (dp - 1) / dp;
        vol = c->zero == 0 ? 2 * f * Sg : c->zero <= 2 ? f * (Sg + Sp) : f * (Sg + 2 * Sp);
    }
    t.dp_across_nodes = c->gpus > hw.gpus_per_node;
    t.dp_comm_ms = 1e3 * vol / ((t.dp_across_nodes ? hw.net_gbs : hw.link_gbs) * 1e9);
    double backward_ms = t.compute_ms * 2.0 / 3.0;
    t.dp_exposed_ms = hw.overlap ? fmax(0.0, t.dp_comm_ms - backward_ms) : t.dp_comm_ms;

    double ab = c->precision == LLM_PREC_FP32 ? 4.0 : 2.0, act = bt * m->n_embd * ab;
    if (tp > 1)
        t.tp_comm_ms = 1e3 * 4 * act * 2 * (tp - 1) / tp * p->layers_per_stage * mb / (hw.link_gbs * 1e9);
    if (pp > 1) {
        int stage_nodes = c->gpus / (int)dp > hw.gpus_per_node;   /* a model replica spans nodes */
        t.pp_comm_ms = 1e3 * 2 * act * mb / ((stage_nodes ? hw.net_gbs : hw.link_gbs) * 1e9);
    }
    t.step_ms = t.compute_ms / (1 - t.bubble) + t.tp_comm_ms + t.pp_comm_ms + t.dp_exposed_ms;
    t.tokens_per_s = G / (t.step_ms / 1e3);
    t.tokens_per_s_gpu = t.tokens_per_s / c->gpus;
    t.comm_over_compute = (t.dp_comm_ms + t.tp_comm_ms + t.pp_comm_ms) / t.compute_ms;
    t.hw = hw;
    t.hw.global_tokens = G;
    *out = t;
    return LLM_OK;
}

void llm_plan_time_write_table(const llm_plan_time *t, FILE *f)
{
    fprintf(f, "\nstep time (model: %.0f TFLOP/s x mfu %.2f per device, link %.0f GB/s, "
               "network %.0f GB/s, %d GPUs/node)\n",
            t->hw.peak_tflops, t->hw.mfu, t->hw.link_gbs, t->hw.net_gbs, t->hw.gpus_per_node);
    fprintf(f, "  tokens/step      %.0f (%.0f micro-batch%s per rank)\n", t->tokens_step, t->micro_batches,
            t->micro_batches == 1 ? "" : "es");
    fprintf(f, "  compute          %10.2f ms  (%.3g FLOP/token)\n", t->compute_ms, t->flops_token);
    if (t->bubble > 0) fprintf(f, "  pipeline bubble  %10.1f %%\n", 100 * t->bubble);
    fprintf(f, "  dp collectives   %10.2f ms  (%s%s, %.2f ms exposed)\n", t->dp_comm_ms,
            t->dp_across_nodes ? "network" : "in node", t->hw.overlap ? ", overlapped" : "",
            t->dp_exposed_ms);
    if (t->tp_comm_ms > 0) fprintf(f, "  tp all-reduces   %10.2f ms\n", t->tp_comm_ms);
    if (t->pp_comm_ms > 0) fprintf(f, "  pp transfers     %10.2f ms\n", t->pp_comm_ms);
    fprintf(f, "  step             %10.2f ms  comm/compute %.3f\n", t->step_ms, t->comm_over_compute);
    fprintf(f, "  throughput       %10.0f tokens/s (%.0f per GPU)\n", t->tokens_per_s, t->tokens_per_s_gpu);
}

void llm_plan_time_write_json(const llm_plan_time *t, llm_json *j)
{
    llm_json_knum(j, "peak_tflops", t->hw.peak_tflops);
    llm_json_knum(j, "mfu", t->hw.mfu);
    llm_json_kint(j, "gpus_per_node", t->hw.gpus_per_node);
    llm_json_knum(j, "link_gbs", t->hw.link_gbs);
    llm_json_knum(j, "net_gbs", t->hw.net_gbs);
    llm_json_kbool(j, "overlap", t->hw.overlap);
    llm_json_knum(j, "tokens_per_step", t->tokens_step);
    llm_json_knum(j, "micro_batches", t->micro_batches);
    llm_json_knum(j, "flops_per_token", t->flops_token);
    llm_json_knum(j, "compute_ms", t->compute_ms);
    llm_json_knum(j, "bubble", t->bubble);
    llm_json_knum(j, "dp_comm_ms", t->dp_comm_ms);
    llm_json_kbool(j, "dp_across_nodes", t->dp_across_nodes);
    llm_json_knum(j, "dp_exposed_ms", t->dp_exposed_ms);
    llm_json_knum(j, "tp_comm_ms", t->tp_comm_ms);
    llm_json_knum(j, "pp_comm_ms", t->pp_comm_ms);
    llm_json_knum(j, "step_ms", t->step_ms);
    llm_json_knum(j, "tokens_per_s", t->tokens_per_s);
    llm_json_knum(j, "tokens_per_s_per_gpu", t->tokens_per_s_gpu);
    llm_json_knum(j, "comm_over_compute", t->comm_over_compute);
}
