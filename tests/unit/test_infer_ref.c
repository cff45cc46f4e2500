/* KV-cache decoding against the PyTorch reference logits (tests/ref/gpt2_tiny.*): the
 * reference parameters are written as a .llmk, opened by the inference engine, and the
 * B sequences are prefilled (first half) then decoded together one position per step
 * (second half) on "cpu" and "cpu-ref"; every position's logits must match PyTorch's
 * to 1e-5 of the row's scale. */
#include "tests/unit/testutil.h"

#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/ckpt.h"
#include "common/infer.h"
#include "common/model.h"

static const char *root(void)
{
    const char *r = getenv("LLM_ROOT");
    return r ? r : ".";
}

static unsigned char *slurp(const char *path, size_t *n)
{
    FILE *f = fopen(path, "rb");
    if (!f)
        return NULL;
    fseek(f, 0, SEEK_END);
    *n = (size_t)ftell(f);
    fseek(f, 0, SEEK_SET);
    unsigned char *b = malloc(*n);
    if (b && fread(b, 1, *n, f) != *n) {
        free(b);
        b = NULL;
    }
    fclose(f);
    return b;
}

static const float *arr(json_t *man, const unsigned char *blob, size_t size, const char *name)
{
    json_t *a = json_object_get(json_object_get(man, "arrays"), name);
    assert_non_null(a);
    size_t off = (size_t)json_integer_value(json_object_get(a, "offset"));
    size_t nb = (size_t)json_integer_value(json_object_get(a, "nbytes"));
    assert_true(off + nb <= size);
    return (const float *)(blob + off);
}

static void run_on(const char *device)
{
    char path[1024];
    snprintf(path, sizeof path, "%s/tests/ref/gpt2_tiny.json", root());
    json_error_t je;
    json_t *man = json_load_file(path, 0, &je);
    assert_non_null(man);
    snprintf(path, sizeof path, "%s/tests/ref/gpt2_tiny.bin", root());
    size_t size = 0;
    unsigned char *blob = slurp(path, &size);
    assert_non_null(blob);
    json_t *c = json_object_get(man, "config");
    llm_model_config cfg = {.arch = "gpt2"};
    cfg.n_layer = (int)json_integer_value(json_object_get(c, "n_layer"));
    cfg.n_head = (int)json_integer_value(json_object_get(c, "n_head"));
    cfg.n_embd = (int)json_integer_value(json_object_get(c, "n_embd"));
    cfg.vocab_size = (int)json_integer_value(json_object_get(c, "vocab_size"));
    cfg.max_seq_len = (int)json_integer_value(json_object_get(c, "max_seq_len"));
    cfg.padded_vocab = (int)json_integer_value(json_object_get(c, "padded_vocab_size"));
    int B = (int)json_integer_value(json_object_get(man, "B"));
    int T = (int)json_integer_value(json_object_get(man, "T"));
    const float *params = arr(man, blob, size, "params");
    const int32_t *inputs = (const int32_t *)arr(man, blob, size, "inputs");
    const float *ref = arr(man, blob, size, "logits");

    llm_status st = {0};
    llm_backend be;
    char err[128];
    assert_int_equal(llm_backend_init(&be, device, 2, err, sizeof err), 0);
    llm_model *m = NULL;
    assert_int_equal(llm_model_new(&m, &cfg, &be, &st), 0);
    memcpy(llm_model_params(m), params, llm_model_num_params(&cfg) * sizeof(float));
    char *dir = tu_tmpdir();
    snprintf(path, sizeof path, "%s/ref.llmk", dir);
    llm_ckpt_writer *w = NULL;
    assert_int_equal(llm_ckpt_writer_new(&w, &st), 0);
    assert_int_equal(llm_ckpt_set_section(w, "model", llm_model_config_node(&cfg), &st), 0);
    assert_int_equal(llm_model_save(m, w, 0, &st), 0);
    assert_int_equal(llm_ckpt_write(w, path, &st), 0);
    llm_ckpt_writer_free(w);

    llm_infer_model *im = NULL;
    llm_infer_ctx *ctx = NULL;
    assert_int_equal(llm_infer_model_open(&im, path, &be, 1, &st), 0);
    assert_int_equal(llm_infer_ctx_new(&ctx, im, B, T, &st), 0);
    int Vp = cfg.padded_vocab, V = cfg.vocab_size, P = T / 2;
    float *got = calloc((size_t)B * T * Vp, sizeof(float));
    llm_infer_row *rows = malloc((size_t)(B > T ? B : T) * sizeof *rows);
    int *which = malloc((size_t)(B > T ? B : T) * sizeof *which);
    for (int b = 0; b < B; b++) {
        for (int t = 0; t < P; t++) {
            rows[t] = (llm_infer_row){inputs[b * T + t], b, t};
            which[t] = t;
        }
        assert_int_equal(llm_infer_forward(ctx, rows, P, &st), 0);
        assert_int_equal(llm_infer_logits(ctx, which, P, got + (size_t)b * T * Vp, &st), 0);
    }
    float *lg = malloc((size_t)B * Vp * sizeof(float));
    for (int t = P; t < T; t++) {
        for (int b = 0; b < B; b++) {
            rows[b] = (llm_infer_row){inputs[b * T + t], b, t};
            which[b] = b;
        }
        assert_int_equal(llm_infer_forward(ctx, rows, B, &st), 0);
        assert_int_equal(llm_infer_logits(ctx, which, B, lg, &st), 0);
        for (int b = 0; b < B; b++)
            memcpy(got + ((size_t)b * T + t) * Vp, lg + (size_t)b * Vp, (size_t)Vp * sizeof(float));
    }
    double worst = 0;
    for (int r = 0; r < B * T; r++) {
        double d = 0, s = 0;
        for (int v = 0; v < V; v++) {
            d = fmax(d, fabs((double)got[(size_t)r * Vp + v] - ref[(size_t)r * Vp + v]));
            s = fmax(s, fabs((double)ref[(size_t)r * Vp + v]));
        }
        worst = fmax(worst, d / s);
    }
    printf("# %s: KV-cache logits vs PyTorch, %d sequences x %d positions: max err %.3g\n",
           device, B, T, worst);
    assert_true(worst < 1e-5);
    free(lg);
    free(got);
    free(rows);
    free(which);
    llm_infer_ctx_free(ctx);
    llm_infer_model_free(im);
    llm_model_free(m);
    llm_backend_free(&be);
    tu_rmdir(dir);
    free(dir);
    free(blob);
    json_decref(man);
}

static void test_ref_cpu(void **state) { (void)state; run_on("cpu"); }
static void test_ref_cpu_ref(void **state) { (void)state; run_on("cpu-ref"); }

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_ref_cpu),
        cmocka_unit_test(test_ref_cpu_ref),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
