/* Unit tests for the memory planner: the CPU prediction against measured allocations
 * (exact, in fp32, bf16 and fp16, every recompute mode, odd sizes that the model's
 * 256-byte rounding pads), the mixed-precision activation layout from first principles,
 * ZeRO/TP/PP arithmetic, the fit verdict, JSON. */
#include "tests/unit/testutil.h"

#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/model.h"
#include "common/plan.h"
#include "common/profile.h"

static llm_model_config cfg_of(int L, int NH, int C, int V, int maxT)
{
    llm_model_config c;
    memset(&c, 0, sizeof c);
    snprintf(c.arch, sizeof c.arch, "gpt2");
    c.n_layer = L;
    c.n_head = NH;
    c.n_embd = C;
    c.vocab_size = V;
    c.padded_vocab = (V + 127) / 128 * 128;
    c.max_seq_len = maxT;
    return c;
}

static llm_plan_config cpu_plan(llm_model_config m, int B, int T)
{
    llm_plan_config p = {.model = m, .batch = B, .seq = T, .gpus = 1, .tp = 1, .pp = 1,
                         .precision = LLM_PREC_FP32, .recompute = LLM_RECOMPUTE_NONE,
                         .train = 1, .cpu = 1};
    return p;
}

static const char *prec_name(llm_precision p)
{
    return llm_plan_precision_name(p);
}

/* Run training steps through the profiling wrapper in precision prec and recompute mode
 * rec; return the tracked peak, and the model's own count (llm_model_bytes) in *model. */
static double measure_train_peak(const llm_model_config *mc, int B, int T, int steps,
                                 llm_precision prec, llm_recompute rec, double *model)
{
    llm_backend inner, be;
    char err[128];
    assert_int_equal(llm_backend_init(&inner, "cpu", 1, err, sizeof err), 0);
    llm_profile *p;
    llm_status st = {0};
    assert_int_equal(llm_profile_new(&p, &inner, 0, &st), 0);
    llm_profile_backend(p, &be);
    llm_model *m;
    assert_int_equal(llm_model_new(&m, mc, &be, &st), 0);
    llm_model_init_gpt2(m, 1);
    if (prec != LLM_PREC_FP32)
        assert_int_equal(llm_model_set_precision(m, prec == LLM_PREC_BF16 ? LLM_DT_BF16 : LLM_DT_F16,
                                                 &st), 0);
    assert_int_equal(llm_model_set_recompute(m, rec, &st), 0);
    size_t n = (size_t)B * T;
    int32_t *ids = malloc(n * sizeof *ids), *tgt = malloc(n * sizeof *tgt);
    tu_rng r = {5};
    for (size_t i = 0; i < n; i++) {
        ids[i] = (int32_t)(tu_next(&r) % (uint64_t)mc->vocab_size);
        tgt[i] = (int32_t)(tu_next(&r) % (uint64_t)mc->vocab_size);
    }
    llm_adamw_config hp = {1e-3f, 0.9f, 0.95f, 1e-8f, 0.1f, 1.0f};
    for (int s = 1; s <= steps; s++) {
        float loss;
        assert_int_equal(llm_model_zero_grad(m, &st), 0);
        assert_int_equal(llm_model_forward(m, ids, tgt, B, T, &loss, &st), 0);
        assert_true(isfinite(loss));
        assert_int_equal(llm_model_backward(m, 1.0f, &st), 0);
        assert_int_equal(llm_model_update(m, &hp, s, NULL, NULL, &st), 0);
    }
    double peak = (double)llm_profile_mem_peak(p);
    *model = (double)llm_model_bytes(m);
    llm_model_free(m);
    assert_int_equal(llm_profile_mem_live(p), 0);   /* everything allocated was freed */
    llm_profile_free(p);
    llm_backend_free(&inner);
    free(ids);
    free(tgt);
    return peak;
}

/* The plan's total for (mc, B, T, prec, rec) against the measured peak and the model's
 * count: equal to the byte (the layout, its rounding included, is modelled exactly).
 * Returns the predicted activations. */
static double check_config_as(llm_model_config mc, int B, int T, llm_precision prec,
                              llm_recompute rec)
{
    llm_plan_config pc = cpu_plan(mc, B, T);
    pc.precision = prec;
    pc.recompute = rec;
    llm_plan plan;
    llm_status st = {0};
    assert_int_equal(llm_plan_compute(&pc, &plan, &st), 0);
    double model;
    double measured = measure_train_peak(&mc, B, T, 2, prec, rec, &model);
    printf("# L=%d C=%d NH=%d V=%d B=%d T=%d %s recompute %s: predicted %.0f measured %.0f "
           "(model %.0f), activations %.0f\n", mc.n_layer, mc.n_embd, mc.n_head, mc.vocab_size, B, T,
           prec_name(prec), llm_plan_recompute_name(rec), plan.total, measured, model,
           plan.activations);
    assert_true(measured == plan.total);
    assert_true(model == plan.total);
    return plan.activations;
}

static void check_config(llm_model_config mc, int B, int T)
{
    double a32 = check_config_as(mc, B, T, LLM_PREC_FP32, LLM_RECOMPUTE_NONE);
    double a16 = check_config_as(mc, B, T, LLM_PREC_BF16, LLM_RECOMPUTE_NONE);
    /* lo activations (and lse for the probabilities) take less */
    assert_true(a16 < a32);
}

static void test_predicted_vs_measured(void **state)
{
    (void)state;
    check_config(cfg_of(2, 2, 64, 257, 64), 4, 64);
    check_config(cfg_of(3, 4, 96, 1000, 128), 2, 128);
    check_config(cfg_of(1, 1, 32, 50, 32), 8, 16);   /* T < max_seq_len */
    /* odd sizes: lo tensors of an odd element count, everything padded to 256 bytes */
    check_config(cfg_of(1, 3, 33, 51, 16), 1, 7);
    check_config_as(cfg_of(1, 3, 33, 51, 16), 1, 7, LLM_PREC_FP16, LLM_RECOMPUTE_NONE);
    /* recompute modes in both precisions */
    llm_model_config c = cfg_of(2, 2, 32, 100, 32);
    double none32 = check_config_as(c, 2, 32, LLM_PREC_FP32, LLM_RECOMPUTE_NONE);
    double sel32 = check_config_as(c, 2, 32, LLM_PREC_FP32, LLM_RECOMPUTE_SELECTIVE);
    double full32 = check_config_as(c, 2, 32, LLM_PREC_FP32, LLM_RECOMPUTE_FULL);
    assert_true(full32 < sel32 && sel32 < none32);
    double none16 = check_config_as(c, 2, 32, LLM_PREC_BF16, LLM_RECOMPUTE_NONE);
    double sel16 = check_config_as(c, 2, 32, LLM_PREC_BF16, LLM_RECOMPUTE_SELECTIVE);
    double full16 = check_config_as(c, 2, 32, LLM_PREC_FP16, LLM_RECOMPUTE_FULL);
    /* bf16 without recompute keeps the GELU output, which selective drops */
    assert_true(full16 < sel16 && sel16 < none16 && none16 < none32);
}

/* GPT-2 small, B=8 T=1024 (every tensor a multiple of 256 bytes: no padding): the bf16
 * training layout from first principles. */
static void test_mixed_layout(void **state)
{
    (void)state;
    llm_model_config c = cfg_of(12, 12, 768, 50257, 1024);
    llm_plan_config pc = cpu_plan(c, 8, 1024);
    llm_plan f32, b16;
    llm_status st = {0};
    assert_int_equal(llm_plan_compute(&pc, &f32, &st), 0);
    pc.precision = LLM_PREC_BF16;
    assert_int_equal(llm_plan_compute(&pc, &b16, &st), 0);
    double N = 8.0 * 1024, NC = N * 768, Vp = 50304, rows = 8.0 * 12 * 1024;
    /* per layer: ln1 ln2 atty (lo), qkv (lo), fch and its GELU (lo), res2 fp32, 4
     * statistics, lse */
    assert_true(b16.act_per_layer ==
                2 * NC * 3 + 2 * 3 * NC + 2 * 2 * 4 * NC + 4 * NC + 4 * 4 * N + 4 * rows);
    /* fp32: the same tensors in fp32 but the GELU output (recomputed), and the
     * probabilities (B,NH,T,T) */
    assert_true(f32.act_per_layer == 4 * (8 * NC + 3 * NC + 4 * N) + 4 * rows * 1024);
    /* global: 13 residual streams, ln_f out (lo) and its statistics, logits (lo), losses
     * and lse, two (N,4C) fp32 scratch buffers, the residual gradient, ids and targets */
    double g16 = 13 * 4 * NC + 2 * NC + 8 * N + 2 * N * Vp + 8 * N + 2 * 4 * 4 * NC + 4 * NC + 8 * N;
    assert_true(b16.act_global == g16);
    assert_true(f32.act_global == g16 + 2 * NC + 2 * N * Vp);
    assert_true(b16.activations == 12 * b16.act_per_layer + b16.act_global);
    /* fp16 lays out the same bytes */
    pc.precision = LLM_PREC_FP16;
    llm_plan h16;
    assert_int_equal(llm_plan_compute(&pc, &h16, &st), 0);
    assert_true(h16.activations == b16.activations);
}

static void test_num_params(void **state)
{
    (void)state;
    llm_model_config c = cfg_of(12, 12, 768, 50257, 1024);
    assert_true(llm_plan_num_params(&c) == (double)llm_model_num_params(&c));
    /* GPT-2 small with the padded vocabulary (50304): 124,475,904 parameters */
    assert_true(llm_plan_num_params(&c) == 124475904.0);
}

static void test_zero_tp_pp(void **state)
{
    (void)state;
    llm_model_config c = cfg_of(12, 12, 768, 50257, 1024);
    llm_plan_config pc = cpu_plan(c, 8, 1024);
    pc.cpu = 0;
    pc.precision = LLM_PREC_BF16;
    pc.gpus = 8;
    llm_plan p0, p1, p2, p3;
    llm_status st = {0};
    pc.zero = 0;
    assert_int_equal(llm_plan_compute(&pc, &p0, &st), 0);
    pc.zero = 1;
    assert_int_equal(llm_plan_compute(&pc, &p1, &st), 0);
    pc.zero = 2;
    assert_int_equal(llm_plan_compute(&pc, &p2, &st), 0);
    pc.zero = 3;
    assert_int_equal(llm_plan_compute(&pc, &p3, &st), 0);
    double P = 124475904.0;
    assert_int_equal(p0.dp, 8);
    /* llm-train's bf16: fp32 master weights + a 16-bit copy, fp32 grads and moments */
    assert_true(p0.params == 6 * P && p0.grads == 4 * P && p0.optimizer == 8 * P);
    assert_true(p1.optimizer == 8 * P / 8 && p1.grads == 4 * P && p1.params == 6 * P);
    assert_true(p2.grads == 4 * P / 8 && p2.params == 6 * P);
    assert_true(p3.params == 6 * P / 8);
    assert_true(p0.activations == p3.activations);
    assert_true(p0.workspace == 32.0 * 1024 * 1024);
    /* ZeRO-1 over 5 replicas: the largest shard, ceil(P / 5) moments (P is not a multiple) */
    pc.gpus = 5;
    pc.zero = 1;
    llm_plan p5;
    assert_int_equal(llm_plan_compute(&pc, &p5, &st), 0);
    assert_int_equal(p5.dp, 5);
    assert_true(p5.optimizer == 8 * ceil(P / 5) && p5.optimizer > 8 * P / 5);
    pc.gpus = 8;

    /* tp splits the per-device parameters; pp the layers */
    pc.zero = 0;
    pc.tp = 4;
    llm_plan pt;
    assert_int_equal(llm_plan_compute(&pc, &pt, &st), 0);
    assert_int_equal(pt.dp, 2);
    assert_true(fabs(pt.n_params_dev - P / 4) < 1);
    assert_true(pt.activations < p0.activations);
    pc.tp = 1;
    pc.pp = 4;
    llm_plan pp;
    assert_int_equal(llm_plan_compute(&pc, &pp, &st), 0);
    assert_int_equal(pp.layers_per_stage, 3);
    assert_true(pp.n_params_dev < P);

    /* recompute lowers activations, in order; under bf16 the layers keep only the
     * attention's lse, and selective recompute drops the GELU output */
    pc.pp = 1;
    llm_plan rs, rf, f32, f32s;
    pc.recompute = LLM_RECOMPUTE_SELECTIVE;
    assert_int_equal(llm_plan_compute(&pc, &rs, &st), 0);
    pc.recompute = LLM_RECOMPUTE_FULL;
    assert_int_equal(llm_plan_compute(&pc, &rf, &st), 0);
    assert_true(rf.activations < rs.activations && rs.activations < p0.activations);
    pc.recompute = LLM_RECOMPUTE_NONE;
    pc.precision = LLM_PREC_FP32;
    assert_int_equal(llm_plan_compute(&pc, &f32, &st), 0);
    pc.recompute = LLM_RECOMPUTE_SELECTIVE;
    assert_int_equal(llm_plan_compute(&pc, &f32s, &st), 0);
    assert_true(f32s.activations < f32.activations);
    /* bf16 keeps lo activations and B*NH*T floats of the attention per layer instead of
     * B*NH*T*T: far less (test_mixed_layout has the exact bytes) */
    assert_true(f32.activations > 2 * p0.activations);
    pc.precision = LLM_PREC_BF16;

    /* bad layouts are usage errors naming the value */
    pc.recompute = LLM_RECOMPUTE_NONE;
    pc.tp = 3;
    pc.gpus = 8;
    assert_int_equal(llm_plan_compute(&pc, &pt, &st), LLM_EUSAGE);
    assert_non_null(strstr(st.msg, "8"));
    pc.tp = 5;
    pc.gpus = 5;
    assert_int_equal(llm_plan_compute(&pc, &pt, &st), LLM_EUSAGE);   /* 5 does not divide 12 heads */
    pc.tp = 1;
    pc.zero = 4;
    assert_int_equal(llm_plan_compute(&pc, &pt, &st), LLM_EUSAGE);
    pc.zero = 0;
    pc.seq = 2048;
    assert_int_equal(llm_plan_compute(&pc, &pt, &st), LLM_EUSAGE);
}

static void test_fit_and_max_batch(void **state)
{
    (void)state;
    llm_model_config c = cfg_of(12, 12, 768, 50257, 1024);
    llm_plan_config pc = cpu_plan(c, 4, 1024);
    pc.cpu = 0;
    pc.precision = LLM_PREC_BF16;
    pc.device_mem = 16.0 * 1024 * 1024 * 1024;
    llm_plan p;
    llm_status st = {0};
    assert_int_equal(llm_plan_compute(&pc, &p, &st), 0);
    assert_true(p.max_batch > 0);
    /* the largest batch fits, one more does not */
    pc.batch = (int)p.max_batch;
    llm_plan q;
    assert_int_equal(llm_plan_compute(&pc, &q, &st), 0);
    assert_int_equal(q.fits, 1);
    pc.batch = (int)p.max_batch + 1;
    assert_int_equal(llm_plan_compute(&pc, &q, &st), 0);
    assert_int_equal(q.fits, 0);
    /* nothing fits in 100 MiB */
    pc.device_mem = 100.0 * 1024 * 1024;
    assert_int_equal(llm_plan_compute(&pc, &q, &st), 0);
    assert_int_equal(q.fits, 0);
    assert_int_equal(q.max_batch, 0);
    /* unknown memory: no verdict */
    pc.device_mem = 0;
    assert_int_equal(llm_plan_compute(&pc, &q, &st), 0);
    assert_int_equal(q.fits, -1);
    /* inference: KV cache 2 L B T C fp32 elements, no grads or optimizer */
    pc.train = 0;
    pc.batch = 2;
    pc.seq = 1024;
    assert_int_equal(llm_plan_compute(&pc, &q, &st), 0);
    assert_true(q.kv_cache == 2.0 * 12 * 2 * 1024 * 768 * 4);
    assert_true(q.grads == 0 && q.optimizer == 0);
}

static void test_json(void **state)
{
    (void)state;
    llm_plan_config pc = cpu_plan(cfg_of(2, 2, 64, 257, 64), 8, 64);
    pc.gpus = 8;
    pc.zero = 1;
    pc.device_mem = 1e9;
    llm_plan p;
    llm_status st = {0};
    assert_int_equal(llm_plan_compute(&pc, &p, &st), 0);
    char *buf = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&buf, &len);
    llm_json j;
    llm_json_init(&j, f, 1);
    llm_plan_write_json(&pc, &p, &j);
    fclose(f);
    json_error_t e;
    json_t *d = json_loads(buf, 0, &e);
    assert_non_null(d);
    const char *top[] = {"model", "mode", "device", "gpus", "dp", "tp", "pp", "zero", "precision",
                         "recompute", "batch", "seq", "layers_per_stage", "params_per_device",
                         "bytes", "device_mem", "fits", "max_batch"};
    for (size_t i = 0; i < sizeof top / sizeof top[0]; i++)
        if (!json_object_get(d, top[i])) fail_msg("plan JSON lacks '%s'", top[i]);
    const char *bytes[] = {"params", "grads", "optimizer", "activations", "activations_per_layer",
                           "activations_global", "kv_cache", "workspace", "total"};
    json_t *b = json_object_get(d, "bytes");
    for (size_t i = 0; i < sizeof bytes / sizeof bytes[0]; i++)
        if (!json_is_number(json_object_get(b, bytes[i]))) fail_msg("plan JSON lacks bytes.%s", bytes[i]);
    assert_true(json_number_value(json_object_get(b, "total")) == p.total);
    assert_true(json_is_true(json_object_get(d, "fits")));
    json_decref(d);
    free(buf);

    llm_precision pr;
    llm_recompute rc;
    assert_int_equal(llm_plan_precision_parse("bf16", &pr), 0);
    assert_int_equal(pr, LLM_PREC_BF16);
    assert_int_equal(llm_plan_precision_parse("int8", &pr), -1);
    assert_int_equal(llm_plan_recompute_parse("selective", &rc), 0);
    assert_int_equal(llm_plan_recompute_parse("some", &rc), -1);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_predicted_vs_measured), cmocka_unit_test(test_mixed_layout),
        cmocka_unit_test(test_num_params),
        cmocka_unit_test(test_zero_tp_pp),            cmocka_unit_test(test_fit_and_max_batch),
        cmocka_unit_test(test_json),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
