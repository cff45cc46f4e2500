/* Unit tests for the planner's step-time model (common/plan_time.h): every term against
 * the formula worked by hand on round numbers, the overlap rule, the node boundary, and
 * the refusals. */
#include "tests/unit/testutil.h"

#include <math.h>
#include <string.h>

#include "common/plan.h"
#include "common/plan_time.h"

/* A model whose parameter count is easy to read: L=2, C=64, NH=4, V=Vp=256, maxT=64:
 * embeddings 256*64 + 64*64 + 2*64 = 20608, per layer 12*64^2 + 13*64 = 49984,
 * N = 20608 + 2*49984 = 120576. */
static llm_plan_config base(int gpus, int tp, int pp, int zero)
{
    llm_plan_config c;
    memset(&c, 0, sizeof c);
    strcpy(c.model.arch, "gpt2");
    c.model.n_layer = 2;
    c.model.n_head = 4;
    c.model.n_embd = 64;
    c.model.vocab_size = 256;
    c.model.padded_vocab = 256;
    c.model.max_seq_len = 64;
    c.batch = 4;
    c.seq = 32;
    c.gpus = gpus;
    c.tp = tp;
    c.pp = pp;
    c.zero = zero;
    c.precision = LLM_PREC_BF16;
    c.recompute = LLM_RECOMPUTE_NONE;
    c.train = 1;
    return c;
}

static const llm_plan_hw HW = {.peak_tflops = 100, .mfu = 0.5, .gpus_per_node = 8,
                               .link_gbs = 100, .net_gbs = 10};

static void near(double got, double want, const char *what)
{
    if (fabs(got - want) > 1e-9 * fmax(1.0, fabs(want)))
        fail_msg("%s: %.12g, want %.12g", what, got, want);
}

static void plan_time(const llm_plan_config *c, const llm_plan_hw *hw, llm_plan *p, llm_plan_time *t)
{
    llm_status st = {0};
    assert_int_equal(llm_plan_compute(c, p, &st), 0);
    if (llm_plan_time_compute(c, p, hw, t, &st))
        fail_msg("%s", st.msg);
}

static void test_data_parallel(void **state)
{
    (void)state;
    const double N = 120576, LTC = 2.0 * 32 * 64, F = 6 * N + 6 * LTC, rate = 100e12 * 0.5;
    llm_plan p;
    llm_plan_time t;
    /* 4 GPUs in one node, ZeRO-0, global batch 4 x B*T*dp: m = 4 micro-batches */
    llm_plan_config c = base(4, 1, 1, 0);
    llm_plan_hw hw = HW;
    hw.global_tokens = 4.0 * 4 * 32 * 4;
    plan_time(&c, &hw, &p, &t);
    assert_true(p.n_params_dev == N);
    near(t.micro_batches, 4, "micro-batches");
    near(t.flops_token, F, "flops/token");
    double compute = 1e3 * (hw.global_tokens / 4) * F / rate;
    near(t.compute_ms, compute, "compute");
    double ar = 1e3 * 2 * 0.75 * 4 * N / 100e9;   /* all-reduce of fp32 grads, in node */
    near(t.dp_comm_ms, ar, "dp all-reduce");
    near(t.dp_exposed_ms, ar, "exposed without overlap");
    assert_int_equal(t.dp_across_nodes, 0);
    near(t.step_ms, compute + ar, "step");
    near(t.tokens_per_s, hw.global_tokens / ((compute + ar) / 1e3), "tokens/s");
    near(t.tokens_per_s_gpu, t.tokens_per_s / 4, "tokens/s per gpu");
    near(t.comm_over_compute, ar / compute, "comm/compute");

    /* ZeRO-1: reduce-scatter grads + all-gather params: (dp-1)/dp (Sg + Sp) */
    c = base(4, 1, 1, 1);
    plan_time(&c, &hw, &p, &t);
    near(t.dp_comm_ms, 1e3 * 0.75 * 8 * N / 100e9, "zero-1 volume");
    c = base(4, 1, 1, 3);
    plan_time(&c, &hw, &p, &t);
    near(t.dp_comm_ms, 1e3 * 0.75 * 12 * N / 100e9, "zero-3 volume");

    /* 16 GPUs span two nodes: the network's bandwidth */
    c = base(16, 1, 1, 0);
    hw.global_tokens = 0;   /* default: one micro-batch per rank */
    plan_time(&c, &hw, &p, &t);
    assert_int_equal(t.dp_across_nodes, 1);
    near(t.micro_batches, 1, "default global batch");
    near(t.dp_comm_ms, 1e3 * 2 * 15.0 / 16 * 4 * N / 10e9, "across nodes");

    /* overlap hides the dp time under 2/3 of compute */
    hw.overlap = 1;
    plan_time(&c, &hw, &p, &t);
    near(t.dp_exposed_ms, fmax(0, t.dp_comm_ms - t.compute_ms * 2 / 3), "overlap");

    /* one GPU: no communication at all */
    c = base(1, 1, 1, 0);
    plan_time(&c, &HW, &p, &t);
    near(t.dp_comm_ms, 0, "one gpu");
    near(t.comm_over_compute, 0, "one gpu ratio");

    /* recompute: full 8N + 8LTC, selective +2LTC */
    c = base(1, 1, 1, 0);
    c.recompute = LLM_RECOMPUTE_FULL;
    plan_time(&c, &HW, &p, &t);
    near(t.flops_token, 8 * N + 8 * LTC, "full recompute flops");
    c.recompute = LLM_RECOMPUTE_SELECTIVE;
    plan_time(&c, &HW, &p, &t);
    near(t.flops_token, 6 * N + 8 * LTC, "selective recompute flops");
}

static void test_tp_pp(void **state)
{
    (void)state;
    llm_plan p;
    llm_plan_time t;
    /* tp 2 x pp 2 x dp 2 = 8 GPUs, 4 micro-batches per rank */
    llm_plan_config c = base(8, 2, 2, 0);
    llm_plan_hw hw = HW;
    hw.global_tokens = 4.0 * 4 * 32 * 2;
    plan_time(&c, &hw, &p, &t);
    double act = 4.0 * 32 * 64 * 2;   /* B*T*C bf16 bytes */
    near(t.tp_comm_ms, 1e3 * 4 * act * 2 * 0.5 * p.layers_per_stage * 4 / 100e9, "tp");
    near(t.pp_comm_ms, 1e3 * 2 * act * 4 / 100e9, "pp");
    near(t.bubble, 1.0 / (4 + 1), "1F1B bubble");
    near(t.step_ms, t.compute_ms / (1 - t.bubble) + t.tp_comm_ms + t.pp_comm_ms + t.dp_exposed_ms,
         "step sum");
    /* fp32 activations are 4 bytes */
    c.precision = LLM_PREC_FP32;
    llm_plan_time t32;
    plan_time(&c, &hw, &p, &t32);
    near(t32.tp_comm_ms, 2 * t.tp_comm_ms, "fp32 activations");
}

static void test_refusals(void **state)
{
    (void)state;
    llm_status st = {0};
    llm_plan p;
    llm_plan_time t;
    llm_plan_config c = base(4, 1, 1, 0);
    assert_int_equal(llm_plan_compute(&c, &p, &st), 0);
    llm_plan_hw hw = HW;
    hw.global_tokens = 4 * 32 * 4 * 1.5;   /* not a multiple of B*T*dp */
    assert_int_equal(llm_plan_time_compute(&c, &p, &hw, &t, &st), LLM_EUSAGE);
    assert_non_null(strstr(st.msg, "multiple"));
    hw = HW;
    hw.mfu = 1.5;
    assert_int_equal(llm_plan_time_compute(&c, &p, &hw, &t, &st), LLM_EUSAGE);
    assert_non_null(strstr(st.msg, "mfu"));
    hw = HW;
    hw.link_gbs = INFINITY;
    assert_int_equal(llm_plan_time_compute(&c, &p, &hw, &t, &st), LLM_EUSAGE);
    c.train = 0;
    assert_int_equal(llm_plan_time_compute(&c, &p, &HW, &t, &st), LLM_EUSAGE);
    /* zeros mean the documented defaults */
    c.train = 1;
    llm_plan_hw zero = {0};
    assert_int_equal(llm_plan_time_compute(&c, &p, &zero, &t, &st), 0);
    near(t.hw.peak_tflops, 989, "default peak");
    near(t.hw.mfu, 0.4, "default mfu");
    assert_int_equal(t.hw.gpus_per_node, 8);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_data_parallel),
        cmocka_unit_test(test_tp_pp),
        cmocka_unit_test(test_refusals),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
