/* GPT-2 model against the PyTorch reference (tests/ref/gpt2_tiny.*), on the "cpu-ref"
 * and "cpu" backends: logits, loss, every gradient, 10 AdamW steps; plus init
 * determinism, gradient accumulation, inference forward, bad input, skipped updates,
 * config parsing, checkpoint round trips, moments held for a range of the layout (ZeRO-1),
 * the allocation tracker and the gradient-ready hook of the overlapped all-reduce.
 *
 * Errors are relative to the tensor's scale: max|ours - ref| / max|ref|. */
#include "tests/unit/testutil.h"

#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/ckpt.h"
#include "common/memtrack.h"
#include "common/model.h"
#include "common/model_impl.h"   /* the moments' buffers, to check a sharded load */
#include "common/tree.h"
#include "kernels/backend.h"

typedef struct {
    json_t *man;
    unsigned char *blob;
    size_t blob_size;
    llm_model_config cfg;
    llm_adamw_config hp;
    int B, T, steps;
} fixture;

static fixture fx;

static const char *root(void)
{
    const char *r = getenv("LLM_ROOT");
    return r ? r : ".";
}

static const void *arr(const char *name, size_t *count)
{
    json_t *a = json_object_get(json_object_get(fx.man, "arrays"), name);
    assert_non_null(a);
    size_t off = (size_t)json_integer_value(json_object_get(a, "offset"));
    size_t nb = (size_t)json_integer_value(json_object_get(a, "nbytes"));
    assert_true(off + nb <= fx.blob_size);
    if (count)
        *count = nb / 4;
    return fx.blob + off;
}

static int jint(json_t *o, const char *k) { return (int)json_integer_value(json_object_get(o, k)); }
static float jflt(json_t *o, const char *k) { return (float)json_number_value(json_object_get(o, k)); }

static int load_fixture(void **state)
{
    (void)state;
    char path[1024];
    snprintf(path, sizeof path, "%s/tests/ref/gpt2_tiny.json", root());
    json_error_t je;
    fx.man = json_load_file(path, 0, &je);
    if (!fx.man) {
        fprintf(stderr, "cannot load %s: %s\n", path, je.text);
        return -1;
    }
    snprintf(path, sizeof path, "%s/tests/ref/gpt2_tiny.bin", root());
    FILE *f = fopen(path, "rb");
    if (!f)
        return -1;
    fseek(f, 0, SEEK_END);
    fx.blob_size = (size_t)ftell(f);
    fseek(f, 0, SEEK_SET);
    fx.blob = malloc(fx.blob_size);
    if (!fx.blob || fread(fx.blob, 1, fx.blob_size, f) != fx.blob_size) {
        fclose(f);
        return -1;
    }
    fclose(f);
    json_t *c = json_object_get(fx.man, "config");
    snprintf(fx.cfg.arch, sizeof fx.cfg.arch, "gpt2");
    fx.cfg.n_layer = jint(c, "n_layer");
    fx.cfg.n_head = jint(c, "n_head");
    fx.cfg.n_embd = jint(c, "n_embd");
    fx.cfg.vocab_size = jint(c, "vocab_size");
    fx.cfg.max_seq_len = jint(c, "max_seq_len");
    fx.cfg.padded_vocab = jint(c, "padded_vocab_size");
    json_t *h = json_object_get(fx.man, "adamw");
    fx.hp = (llm_adamw_config){jflt(h, "lr"), jflt(h, "beta1"), jflt(h, "beta2"), jflt(h, "eps"),
                               jflt(h, "weight_decay"), jflt(h, "grad_clip")};
    fx.steps = jint(h, "steps");
    fx.B = jint(fx.man, "B");
    fx.T = jint(fx.man, "T");
    return 0;
}

static int free_fixture(void **state)
{
    (void)state;
    json_decref(fx.man);
    free(fx.blob);
    return 0;
}


static llm_backend *backend(const char *name)
{
    llm_backend *be = calloc(1, sizeof *be);
    char err[256];
    assert_int_equal(llm_backend_init(be, name, 2, err, sizeof err), 0);
    return be;
}

static void drop_backend(llm_backend *be)
{
    llm_backend_free(be);
    free(be);
}

/* A model with the fixture's parameters (CPU backends: params are host memory). */
static llm_model *fixture_model(llm_backend *be)
{
    llm_model *m;
    llm_status st = {0};
    assert_int_equal(llm_model_new(&m, &fx.cfg, be, &st), 0);
    size_t n;
    const float *p = arr("params", &n);
    assert_int_equal(n, llm_model_num_params(&fx.cfg));
    json_t *views = json_object_get(fx.man, "views");
    assert_int_equal(json_array_size(views), llm_model_nviews(m));
    for (int i = 0; i < llm_model_nviews(m); i++) {
        json_t *jv = json_array_get(views, (size_t)i);
        const llm_param_view *v = llm_model_view(m, i);
        assert_string_equal(v->name, json_string_value(json_object_get(jv, "name")));
        assert_int_equal(v->offset, json_integer_value(json_object_get(jv, "offset")));
        assert_int_equal(v->decay, jint(jv, "decay"));
        json_t *sh = json_object_get(jv, "shape");
        assert_int_equal(v->ndim, json_array_size(sh));
        for (int d = 0; d < v->ndim; d++)
            assert_int_equal(v->shape[d], json_integer_value(json_array_get(sh, (size_t)d)));
    }
    be->to_device(be, llm_model_params(m), p, n * sizeof(float));
    return m;
}

static void reference_backend(const char *bname)
{
    llm_backend *be = backend(bname);
    llm_model *m = fixture_model(be);
    llm_status st = {0};
    const int32_t *in = arr("inputs", NULL), *tg = arr("targets", NULL);
    float loss = 0;
    assert_int_equal(llm_model_forward(m, in, tg, fx.B, fx.T, &loss, &st), 0);
    size_t nl;
    const float *ref_logits = arr("logits", &nl);
    const float *ref_loss = arr("loss", NULL);
    assert_int_equal(nl, (size_t)fx.B * fx.T * fx.cfg.padded_vocab);
    float *lg = malloc(nl * sizeof(float));
    assert_non_null(lg);
    assert_int_equal(llm_model_logits_to_host(m, 0, (size_t)fx.B * fx.T, lg, &st), 0);
    double el = tu_scaled_err(lg, ref_logits, nl);
    double eloss = fabs(loss - ref_loss[0]) / fabs(ref_loss[0]);
    printf("# %s: logits err %.3g, loss %.7f (ref %.7f, err %.3g)\n", bname, el, loss, ref_loss[0], eloss);
    assert_true(el <= 1e-5);
    assert_true(eloss <= 1e-5);

    /* Inference forward gives the same logits. */
    llm_backend *be2 = backend(bname);
    llm_model *mi = fixture_model(be2);
    assert_int_equal(llm_model_forward(mi, in, NULL, fx.B, fx.T, NULL, &st), 0);
    assert_int_equal(llm_model_logits_to_host(mi, 0, (size_t)fx.B * fx.T, lg, &st), 0);
    assert_true(tu_scaled_err(lg, ref_logits, nl) <= 1e-5);
    /* rows outside the last forward are refused */
    assert_int_equal(llm_model_logits_to_host(mi, 1, (size_t)fx.B * fx.T, lg, &st), LLM_EUSAGE);
    free(lg);
    assert_true(llm_model_bytes(mi) < llm_model_bytes(m));
    llm_model_free(mi);
    drop_backend(be2);

    assert_int_equal(llm_model_zero_grad(m, &st), 0);
    assert_int_equal(llm_model_backward(m, 1.0f, &st), 0);
    const float *ref_g = arr("grads", NULL);
    double worst = 0;
    const char *worst_name = "";
    for (int i = 0; i < llm_model_nviews(m); i++) {
        const llm_param_view *v = llm_model_view(m, i);
        const float *ours = llm_model_grads(m) + v->offset;
        double e = tu_scaled_err(ours, ref_g + v->offset, v->numel);
        if (i == 0 || e > worst) {
            worst = e;
            worst_name = v->name;
        }
    }
    double norm = llm_model_grad_norm(m);
    printf("# %s: worst gradient '%s' err %.3g, grad norm %.6f (ref %.6f)\n", bname, worst_name,
           worst, norm, ((const float *)arr("adamw_grad_norms", NULL))[0]);
    assert_true(worst <= 1e-4);
    assert_true(fabs(norm - ((const float *)arr("adamw_grad_norms", NULL))[0]) <= 1e-4 * norm);

    /* 10 AdamW steps from the same start; losses after each step. */
    llm_model_free(m);
    m = fixture_model(be);
    const float *ref_losses = arr("adamw_losses", NULL);
    double wl = 0;
    for (int t = 1; t <= fx.steps; t++) {
        int skipped = 1;
        double gn;
        assert_int_equal(llm_model_zero_grad(m, &st), 0);
        assert_int_equal(llm_model_forward(m, in, tg, fx.B, fx.T, &loss, &st), 0);
        assert_int_equal(llm_model_backward(m, 1.0f, &st), 0);
        assert_int_equal(llm_model_update(m, &fx.hp, t, &gn, &skipped, &st), 0);
        assert_int_equal(skipped, 0);
        assert_int_equal(llm_model_forward(m, in, tg, fx.B, fx.T, &loss, &st), 0);
        double e = fabs(loss - ref_losses[t - 1]) / fabs(ref_losses[t - 1]);
        if (e > wl)
            wl = e;
    }
    printf("# %s: 10 AdamW steps: final loss %.7f (ref %.7f), worst loss err %.3g\n", bname, loss,
           ref_losses[fx.steps - 1], wl);
    assert_true(wl <= 1e-5);
    llm_model_free(m);
    drop_backend(be);
}

static void test_reference_cpu_ref(void **s) { (void)s; reference_backend("cpu-ref"); }
static void test_reference_cpu(void **s) { (void)s; reference_backend("cpu"); }

static uint64_t checksum(const float *p, size_t n)
{
    uint64_t h = 1469598103934665603ull;
    for (size_t i = 0; i < n; i++) {
        uint32_t u;
        memcpy(&u, &p[i], 4);
        h = (h ^ u) * 1099511628211ull;
    }
    return h;
}

static void test_init(void **s)
{
    (void)s;
    llm_backend *be = backend("cpu");
    llm_status st = {0};
    llm_model *a, *b;
    assert_int_equal(llm_model_new(&a, &fx.cfg, be, &st), 0);
    assert_int_equal(llm_model_new(&b, &fx.cfg, be, &st), 0);
    llm_model_init_gpt2(a, 42);
    llm_model_init_gpt2(b, 42);
    size_t n = llm_model_num_params(&fx.cfg);
    uint64_t ca = checksum(llm_model_params(a), n);
    assert_int_equal(ca, checksum(llm_model_params(b), n));
    printf("# init checksum (seed 42): 0x%016llx\n", (unsigned long long)ca);
    /* Fixed value: the init must be the same on every machine and every build. */
    assert_int_equal(ca, 0xf706c69d23bc9dcbull);
    llm_model_init_gpt2(b, 43);
    assert_true(checksum(llm_model_params(b), n) != ca);
    /* statistics: wte real rows ~ N(0, 0.02), padded rows 0, c_proj scaled, ln 1/0 */
    const llm_param_view *v = llm_model_find_view(a, "wte");
    const float *p = llm_model_params(a) + v->offset;
    size_t real = (size_t)fx.cfg.vocab_size * fx.cfg.n_embd;
    double s2 = 0;
    for (size_t i = 0; i < real; i++)
        s2 += (double)p[i] * p[i];
    assert_true(fabs(sqrt(s2 / real) - 0.02) < 0.001);
    for (size_t i = real; i < v->numel; i++)
        assert_true(p[i] == 0.0f);
    v = llm_model_find_view(a, "h.1.mlp.c_proj.weight");
    p = llm_model_params(a) + v->offset;
    s2 = 0;
    for (size_t i = 0; i < v->numel; i++)
        s2 += (double)p[i] * p[i];
    assert_true(fabs(sqrt(s2 / v->numel) - 0.02 / 2.0) < 0.0006);
    v = llm_model_find_view(a, "h.0.ln_2.weight");
    assert_true(llm_model_params(a)[v->offset] == 1.0f);
    v = llm_model_find_view(a, "h.0.ln_2.bias");
    assert_true(llm_model_params(a)[v->offset] == 0.0f);
    llm_model_free(a);
    llm_model_free(b);
    drop_backend(be);
}

static void test_accumulation(void **s)
{
    (void)s;
    llm_backend *be = backend("cpu");
    llm_model *a = fixture_model(be), *b = fixture_model(be);
    llm_status st = {0};
    int B = 8, T = 12;
    int32_t in[8 * 12], tg[8 * 12];
    tu_rng r = {7};
    tu_fill_ids(&r, in, tg, (size_t)B * T, fx.cfg.vocab_size);
    float la, l1, l2;
    assert_int_equal(llm_model_zero_grad(a, &st), 0);
    assert_int_equal(llm_model_forward(a, in, tg, B, T, &la, &st), 0);
    assert_int_equal(llm_model_backward(a, 1.0f, &st), 0);
    assert_int_equal(llm_model_zero_grad(b, &st), 0);
    assert_int_equal(llm_model_forward(b, in, tg, B / 2, T, &l1, &st), 0);
    assert_int_equal(llm_model_backward(b, 0.5f, &st), 0);
    assert_int_equal(llm_model_forward(b, in + B / 2 * T, tg + B / 2 * T, B / 2, T, &l2, &st), 0);
    assert_int_equal(llm_model_backward(b, 0.5f, &st), 0);
    double el = fabs(0.5 * (l1 + l2) - la) / la;
    double eg = tu_scaled_err(llm_model_grads(b), llm_model_grads(a), llm_model_num_params(&fx.cfg));
    printf("# accumulation 2 x B=4 vs B=8: loss err %.3g, grad err %.3g\n", el, eg);
    assert_true(el <= 1e-6);
    assert_true(eg <= 1e-6);
    llm_model_free(a);
    llm_model_free(b);
    drop_backend(be);
}

/* Activation recompute: the same gradients as keeping everything (the same kernels run on
 * the same inputs), bit for bit, with less activation memory (bf16: selective the same
 * as none, the layers keeping no probabilities); fp32 and bf16, cpu and cpu-ref, and with
 * two micro-batches of different shapes reusing the layout.  Except bf16 selective: it
 * computes the GELU output again from the rounded pre-activation where the forward's
 * fused c_fc + GELU took it of the fp32 sum (backend.h), so its gradients are within
 * bf16 roundings (2e-3 scaled error) of none's, the losses still equal. */
static void test_recompute(void **s)
{
    (void)s;
    const char *bes[] = {"cpu", "cpu-ref"};
    for (int bi = 0; bi < 2; bi++)
        for (int lo = 0; lo < 2; lo++) {
            llm_backend *be = backend(bes[bi]);
            llm_status st = {0};
            int B = 3, T = 10;
            int32_t in[3 * 10], tg[3 * 10];
            tu_rng r = {11};
            tu_fill_ids(&r, in, tg, (size_t)B * T, fx.cfg.vocab_size);
            size_t np = llm_model_num_params(&fx.cfg), bytes[3];
            float *g0 = malloc(np * sizeof(float)), loss[3][2];
            for (int rc = LLM_RECOMPUTE_NONE; rc <= LLM_RECOMPUTE_FULL; rc++) {
                llm_model *m = fixture_model(be);
                if (lo)
                    assert_int_equal(llm_model_set_precision(m, LLM_DT_BF16, &st), 0);
                assert_int_equal(llm_model_set_recompute(m, (llm_recompute)rc, &st), 0);
                assert_int_equal(llm_model_zero_grad(m, &st), 0);
                assert_int_equal(llm_model_forward(m, in, tg, B, T, &loss[rc][0], &st), 0);
                assert_int_equal(llm_model_backward(m, 0.5f, &st), 0);
                assert_int_equal(llm_model_forward(m, in, tg, B - 1, T - 3, &loss[rc][1], &st), 0);
                assert_int_equal(llm_model_backward(m, 0.5f, &st), 0);
                bytes[rc] = llm_model_bytes(m);
                const float *g = llm_model_grads(m);
                if (rc == LLM_RECOMPUTE_NONE)
                    memcpy(g0, g, np * sizeof(float));
                else if (lo && rc == LLM_RECOMPUTE_SELECTIVE) {
                    double e = tu_scaled_err(g, g0, np);
                    printf("# %s bf16 selective vs none: gradients %.3g\n", bes[bi], e);
                    assert_true(e <= 2e-3);
                } else if (memcmp(g0, g, np * sizeof(float)) != 0)
                    fail_msg("%s %s recompute %d: gradients differ (scaled err %g)", bes[bi],
                             lo ? "bf16" : "fp32", rc, tu_scaled_err(g, g0, np));
                assert_memory_equal(loss[rc], loss[0], sizeof loss[0]);
                llm_model_free(m);
            }
            printf("# %s %s: model bytes none %zu selective %zu full %zu\n", bes[bi],
                   lo ? "bf16" : "fp32", bytes[0], bytes[1], bytes[2]);
            /* selective drops the probabilities (fp32) or the GELU output (bf16, whose
             * attention keeps only lse) */
            assert_true(bytes[1] < bytes[0] && bytes[2] < bytes[1]);
            free(g0);
            drop_backend(be);
        }
    llm_model *m = NULL;
    llm_backend *be = backend("cpu");
    llm_status st = {0};
    assert_int_equal(llm_model_new(&m, &fx.cfg, be, &st), 0);
    assert_int_equal(llm_model_set_recompute(m, (llm_recompute)7, &st), LLM_EUSAGE);
    llm_model_free(m);
    drop_backend(be);
}

static void test_bad_input_and_skip(void **s)
{
    (void)s;
    llm_backend *be = backend("cpu");
    llm_model *m = fixture_model(be);
    llm_status st = {0};
    int32_t in[4] = {1, 2, 3, fx.cfg.vocab_size}, tg[4] = {1, 2, 3, 4};
    float loss;
    assert_int_equal(llm_model_forward(m, in, tg, 1, 4, &loss, &st), LLM_EDATA);
    assert_non_null(strstr(st.msg, "inputs[3]"));
    in[3] = 0;
    tg[1] = -1;
    assert_int_equal(llm_model_forward(m, in, tg, 1, 4, &loss, &st), LLM_EDATA);
    assert_int_equal(llm_model_forward(m, in, NULL, 1, fx.cfg.max_seq_len + 1, NULL, &st), LLM_EUSAGE);
    assert_int_equal(llm_model_backward(m, 1.0f, &st), LLM_EUSAGE);
    tg[1] = 5;
    /* A non-finite gradient norm skips the update: parameters and moments unchanged. */
    assert_int_equal(llm_model_zero_grad(m, &st), 0);
    assert_int_equal(llm_model_forward(m, in, tg, 1, 4, &loss, &st), 0);
    assert_int_equal(llm_model_backward(m, 1.0f, &st), 0);
    llm_model_grads(m)[5] = NAN;
    size_t n = llm_model_num_params(&fx.cfg);
    uint64_t before = checksum(llm_model_params(m), n);
    int skipped = 0;
    double gn = 0;
    assert_int_equal(llm_model_update(m, &fx.hp, 1, &gn, &skipped, &st), 0);
    assert_int_equal(skipped, 1);
    assert_true(!isfinite(gn));
    assert_int_equal(checksum(llm_model_params(m), n), before);
    llm_model_free(m);
    drop_backend(be);
}

static int parse_cfg(const char *yaml, llm_model_config *cfg, llm_status *st)
{
    llm_node *root = NULL;
    int rc = llm_yaml_parse(yaml, strlen(yaml), "cfg.yaml", &llm_yaml_default_limits, &root, st);
    if (rc)
        return rc;
    rc = llm_model_config_parse(llm_node_get(root, "model"), cfg, st);
    llm_node_free(root);
    return rc;
}

static void test_config(void **s)
{
    (void)s;
    llm_model_config c;
    llm_status st = {0};
    assert_int_equal(parse_cfg("model:\n  arch: gpt2\n  n_layer: 12\n  n_head: 12\n  n_embd: 768\n"
                               "  vocab_size: 50257\n  max_seq_len: 1024\n", &c, &st), 0);
    assert_int_equal(c.padded_vocab, 50304);
    assert_int_equal(llm_model_num_params(&c), 124475904u);
    /* the emitted section parses back to the same config */
    llm_node *n = llm_model_config_node(&c);
    llm_model_config c2;
    assert_int_equal(llm_model_config_parse(n, &c2, &st), 0);
    assert_memory_equal(&c, &c2, sizeof c);
    llm_node_free(n);
    static const struct { const char *yaml, *want; } bad[] = {
        {"model:\n  arch: gpt2\n  n_layer: 2\n  n_head: 2\n  n_embd: 8\n  vocab_size: 10\n  max_seq_len: 8\n  lerning_rate: 3\n",
         "line 8: unknown key 'lerning_rate'"},
        {"model:\n  arch: gpt2\n  n_layer: two\n  n_head: 2\n  n_embd: 8\n  vocab_size: 10\n  max_seq_len: 8\n",
         "line 3: key 'n_layer': expected an integer"},
        {"model:\n  arch: gpt2\n  n_layer: \"2\"\n  n_head: 2\n  n_embd: 8\n  vocab_size: 10\n  max_seq_len: 8\n",
         "key 'n_layer': expected an integer"},
        {"model:\n  arch: gpt2\n  n_layer: 0\n  n_head: 2\n  n_embd: 8\n  vocab_size: 10\n  max_seq_len: 8\n",
         "line 3: key 'n_layer': 0 is out of range"},
        {"model:\n  arch: gpt2\n  n_layer: 2\n  n_head: 3\n  n_embd: 8\n  vocab_size: 10\n  max_seq_len: 8\n",
         "not a multiple of 'n_head'"},
        {"model:\n  arch: llama\n  n_layer: 2\n  n_head: 2\n  n_embd: 8\n  vocab_size: 10\n  max_seq_len: 8\n",
         "line 2: key 'arch'"},
        {"model:\n  arch: gpt2\n  n_layer: 2\n  n_head: 2\n  n_embd: 8\n  vocab_size: 10\n",
         "missing key 'max_seq_len'"},
        {"model:\n  arch: gpt2\n  n_layer: 2\n  n_head: 2\n  n_embd: 8\n  vocab_size: 10\n  max_seq_len: 8\n  padded_vocab_size: 64\n",
         "'padded_vocab_size' 64 is not"},
        {"model:\n  arch: gpt2\n  n_layer: [1]\n  n_head: 2\n  n_embd: 8\n  vocab_size: 10\n  max_seq_len: 8\n",
         "key 'n_layer': expected an integer"},
        {"model: 3\n", "expected a mapping"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        llm_status_clear(&st);
        int rc = parse_cfg(bad[i].yaml, &c, &st);
        if (rc != LLM_EDATA || !strstr(st.msg, bad[i].want))
            fail_msg("case %zu: rc %d, message '%s', want '%s'", i, rc, st.msg, bad[i].want);
    }
}

static void test_checkpoint(void **s)
{
    (void)s;
    llm_backend *be = backend("cpu");
    llm_model *m = fixture_model(be);
    llm_status st = {0};
    const int32_t *in = arr("inputs", NULL), *tg = arr("targets", NULL);
    float loss;
    /* one step so that the moments are not zero */
    assert_int_equal(llm_model_zero_grad(m, &st), 0);
    assert_int_equal(llm_model_forward(m, in, tg, fx.B, fx.T, &loss, &st), 0);
    assert_int_equal(llm_model_backward(m, 1.0f, &st), 0);
    assert_int_equal(llm_model_update(m, &fx.hp, 1, NULL, NULL, &st), 0);
    char *dir = tu_tmpdir(), path[512];
    snprintf(path, sizeof path, "%s/m.llmk", dir);
    llm_ckpt_writer *w;
    assert_int_equal(llm_ckpt_writer_new(&w, &st), 0);
    assert_int_equal(llm_ckpt_set_section(w, "model", llm_model_config_node(&fx.cfg), &st), 0);
    assert_int_equal(llm_model_save(m, w, 1, &st), 0);
    assert_int_equal(llm_ckpt_write(w, path, &st), 0);
    llm_ckpt_writer_free(w);

    llm_ckpt *ck;
    assert_int_equal(llm_ckpt_open(&ck, path, 0, &st), 0);
    assert_int_equal(llm_ckpt_count(ck), 3 * llm_model_nviews(m));
    assert_non_null(llm_ckpt_find(ck, "opt.v.h.1.mlp.c_fc.bias"));
    llm_model_config c2;
    assert_int_equal(llm_model_config_parse(llm_ckpt_section(ck, "model"), &c2, &st), 0);
    llm_model *m2;
    assert_int_equal(llm_model_new(&m2, &c2, be, &st), 0);
    assert_int_equal(llm_model_load(m2, ck, 1, &st), 0);
    size_t n = llm_model_num_params(&fx.cfg);
    assert_memory_equal(llm_model_params(m2), llm_model_params(m), n * sizeof(float));
    /* the same next step from both: moments were restored */
    float l1, l2;
    for (int k = 0; k < 2; k++) {
        llm_model *x = k ? m2 : m;
        assert_int_equal(llm_model_zero_grad(x, &st), 0);
        assert_int_equal(llm_model_forward(x, in, tg, fx.B, fx.T, k ? &l2 : &l1, &st), 0);
        assert_int_equal(llm_model_backward(x, 1.0f, &st), 0);
        assert_int_equal(llm_model_update(x, &fx.hp, 2, NULL, NULL, &st), 0);
    }
    assert_memory_equal(llm_model_params(m2), llm_model_params(m), n * sizeof(float));
    llm_model_free(m2);

    /* a model of another shape refuses the file, naming the tensor */
    llm_model_config c3 = fx.cfg;
    c3.max_seq_len = 16;
    assert_int_equal(llm_model_new(&m2, &c3, be, &st), 0);
    assert_int_equal(llm_model_load(m2, ck, 0, &st), LLM_EDATA);
    assert_non_null(strstr(st.msg, "'wpe'"));
    llm_model_free(m2);
    llm_ckpt_close(ck);

    /* parameters only; a missing tensor is named */
    assert_int_equal(llm_ckpt_writer_new(&w, &st), 0);
    assert_int_equal(llm_model_save(m, w, 0, &st), 0);
    assert_int_equal(llm_ckpt_write(w, path, &st), 0);
    llm_ckpt_writer_free(w);
    assert_int_equal(llm_ckpt_open(&ck, path, 0, &st), 0);
    assert_int_equal(llm_ckpt_count(ck), llm_model_nviews(m));
    llm_model_config c4 = fx.cfg;
    c4.n_layer = 3;
    assert_int_equal(llm_model_new(&m2, &c4, be, &st), 0);
    assert_int_equal(llm_model_load(m2, ck, 1, &st), LLM_EDATA);
    assert_non_null(strstr(st.msg, "'h.2.ln_1.weight'"));
    llm_model_free(m2);
    llm_ckpt_close(ck);
    tu_rmdir(dir);
    free(dir);
    llm_model_free(m);
    drop_backend(be);
}

static int dummy_saver(void *ctx, llm_ckpt_writer *w, llm_status *st)
{
    (void)w, (void)st;
    ++*(int *)ctx;
    return 0;
}

/* ZeRO-1's shard of the moments: a load keeps the slice, whole-model updates and saves
 * without a saver are refused; memtrack counts what the model allocates. */
static void test_opt_range(void **s)
{
    (void)s;
    llm_backend *be = backend("cpu");
    llm_memtrack mt;
    llm_memtrack_init(&mt, be);
    llm_model *m = fixture_model(&mt.be);
    llm_status st = {0};
    size_t n = llm_model_num_params(&fx.cfg);
    assert_int_equal(mt.live, n * sizeof(float));
    const int32_t *in = arr("inputs", NULL), *tg = arr("targets", NULL);
    float loss;
    assert_int_equal(llm_model_zero_grad(m, &st), 0);
    assert_int_equal(llm_model_forward(m, in, tg, fx.B, fx.T, &loss, &st), 0);
    assert_int_equal(llm_model_backward(m, 1.0f, &st), 0);
    assert_int_equal(llm_model_update(m, &fx.hp, 1, NULL, NULL, &st), 0);
    assert_int_equal(mt.live, llm_model_bytes(m));   /* every block went through the tracker */
    char *dir = tu_tmpdir(), path[512];
    snprintf(path, sizeof path, "%s/m.llmk", dir);
    llm_ckpt_writer *w;
    assert_int_equal(llm_ckpt_writer_new(&w, &st), 0);
    assert_int_equal(llm_model_save(m, w, 1, &st), 0);
    assert_int_equal(llm_ckpt_write(w, path, &st), 0);
    llm_ckpt_writer_free(w);

    /* a range that cuts tensors in the middle */
    size_t lo = n / 3 + 5, hi = 2 * n / 3 + 7;
    llm_model *m2;
    assert_int_equal(llm_model_new(&m2, &fx.cfg, &mt.be, &st), 0);
    assert_int_equal(llm_model_set_opt_range(m2, lo, n + 1, &st), LLM_EUSAGE);
    assert_int_equal(llm_model_set_opt_range(m2, hi, lo, &st), LLM_EUSAGE);
    assert_int_equal(llm_model_set_opt_range(m2, lo, hi, &st), 0);
    size_t before = mt.live;
    llm_ckpt *ck;
    assert_int_equal(llm_ckpt_open(&ck, path, 0, &st), 0);
    assert_int_equal(llm_model_load(m2, ck, 1, &st), 0);
    llm_ckpt_close(ck);
    assert_int_equal(mt.live - before, 2 * (hi - lo) * sizeof(float));   /* the slice only */
    assert_memory_equal(m2->m, m->m + lo, (hi - lo) * sizeof(float));
    assert_memory_equal(m2->v, m->v + lo, (hi - lo) * sizeof(float));
    assert_true(llm_model_bytes(m2) == (n + 2 * (hi - lo)) * sizeof(float));
    size_t a, b;
    llm_model_opt_range(m2, &a, &b);
    assert_true(a == lo && b == hi);
    /* the same range again is fine; another one once the moments exist is not */
    assert_int_equal(llm_model_set_opt_range(m2, lo, hi, &st), 0);
    assert_int_equal(llm_model_set_opt_range(m2, 0, n, &st), LLM_EUSAGE);
    assert_int_equal(llm_model_update(m2, &fx.hp, 2, NULL, NULL, &st), LLM_EUSAGE);
    assert_non_null(strstr(st.msg, "shard"));
    /* saving the moments needs a saver, which is called after the weights */
    assert_int_equal(llm_ckpt_writer_new(&w, &st), 0);
    assert_int_equal(llm_model_save(m2, w, 1, &st), LLM_EUSAGE);
    llm_ckpt_writer_free(w);
    int calls = 0;
    llm_model_set_opt_saver(m2, dummy_saver, &calls);
    assert_int_equal(llm_ckpt_writer_new(&w, &st), 0);
    assert_int_equal(llm_model_save(m2, w, 1, &st), 0);
    assert_int_equal(calls, 1);
    assert_int_equal(llm_model_save(m2, w, 0, &st), LLM_EUSAGE);   /* duplicates: refused */
    llm_ckpt_writer_free(w);
    llm_model_free(m2);
    llm_model_free(m);
    assert_int_equal(mt.live, 0);
    assert_true(mt.peak >= (4 * n) * sizeof(float));
    llm_memtrack_free(&mt);
    tu_rmdir(dir);
    free(dir);
    drop_backend(be);
}

/* The gradient-ready hook (llm_model_set_grad_ready): L + 2 ranges per backward, from
 * the top of the layout down, each ending where the previous began, together [0, n)
 * once; each range's gradient is final when reported (a snapshot taken in the hook
 * equals the buffer after the backward, bit for bit); the hook fires on the armed
 * backward only, and an error from it ends the backward. */
typedef struct {
    llm_model *m;
    size_t lo[64], hi[64];
    float *snap;           /* n floats: each range copied when reported */
    int n, fail_at;
} ready_log;

static int ready_cb(void *ctx, size_t lo, size_t hi, llm_status *st)
{
    ready_log *r = ctx;
    assert_true(r->n < 64);
    r->lo[r->n] = lo;
    r->hi[r->n] = hi;
    memcpy(r->snap + lo, llm_model_grads(r->m) + lo, (hi - lo) * sizeof(float));
    if (++r->n == r->fail_at)
        return llm_err(st, LLM_EIO, "test: hook fails");
    return 0;
}

static void test_grad_ready(void **s)
{
    (void)s;
    llm_backend *be = backend("cpu");
    llm_model *m = fixture_model(be);
    llm_status st = {0};
    int B = 4, T = 12, L = fx.cfg.n_layer;
    size_t n = llm_model_num_params(&fx.cfg);
    int32_t in[4 * 12], tg[4 * 12];
    tu_rng r = {11};
    tu_fill_ids(&r, in, tg, (size_t)B * T, fx.cfg.vocab_size);
    ready_log lg = {.m = m, .snap = calloc(n, sizeof(float))};
    assert_non_null(lg.snap);
    float l;
    assert_int_equal(llm_model_zero_grad(m, &st), 0);
    /* accumulation: the first backward unarmed, the second armed */
    assert_int_equal(llm_model_forward(m, in, tg, B, T, &l, &st), 0);
    assert_int_equal(llm_model_backward(m, 0.5f, &st), 0);
    assert_int_equal(lg.n, 0);
    llm_model_set_grad_ready(m, ready_cb, &lg);
    assert_int_equal(llm_model_forward(m, in, tg, B, T, &l, &st), 0);
    assert_int_equal(llm_model_backward(m, 0.5f, &st), 0);
    assert_int_equal(lg.n, L + 2);
    size_t top = n;
    for (int i = 0; i < lg.n; i++) {
        assert_int_equal(lg.hi[i], top);            /* contiguous, top down */
        assert_true(lg.lo[i] < lg.hi[i]);
        top = lg.lo[i];
    }
    assert_int_equal(top, 0);                       /* [0, n) exactly once */
    assert_int_equal(lg.lo[0], llm_model_find_view(m, "ln_f.weight")->offset);
    for (int l2 = L - 1; l2 >= 0; l2--) {           /* one range per layer, its views */
        char name[64];
        snprintf(name, sizeof name, "h.%d.ln_1.weight", l2);
        assert_int_equal(lg.lo[L - l2], llm_model_find_view(m, name)->offset);
    }
    assert_int_equal(lg.hi[L + 1], llm_model_find_view(m, "h.0.ln_1.weight")->offset);
    /* final when reported: wte (tied output projection + embedding) included */
    assert_memory_equal(lg.snap, llm_model_grads(m), n * sizeof(float));
    /* the same ranges again on the next backward; an error from the hook ends it */
    lg.n = 0;
    lg.fail_at = 2;
    assert_int_equal(llm_model_forward(m, in, tg, B, T, &l, &st), 0);
    assert_int_equal(llm_model_backward(m, 1.0f, &st), LLM_EIO);
    assert_int_equal(lg.n, 2);
    /* disarmed: not called */
    llm_model_set_grad_ready(m, NULL, NULL);
    lg.n = 0;
    assert_int_equal(llm_model_forward(m, in, tg, B, T, &l, &st), 0);
    assert_int_equal(llm_model_backward(m, 1.0f, &st), 0);
    assert_int_equal(lg.n, 0);
    free(lg.snap);
    llm_model_free(m);
    drop_backend(be);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_reference_cpu_ref), cmocka_unit_test(test_reference_cpu),
        cmocka_unit_test(test_init),              cmocka_unit_test(test_accumulation),
        cmocka_unit_test(test_recompute),
        cmocka_unit_test(test_bad_input_and_skip), cmocka_unit_test(test_config),
        cmocka_unit_test(test_checkpoint),        cmocka_unit_test(test_opt_range),
        cmocka_unit_test(test_grad_ready),
    };
    return cmocka_run_group_tests(tests, load_fixture, free_fixture);
}
