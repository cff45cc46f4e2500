/* residual_layernorm_forward (the residual add fused with the layernorm that reads it):
 *   - the op against the same backend's residual_forward then layernorm_forward, bit for
 *     bit, on cpu-ref and the fast cpu backend, at odd shapes, with res aliasing a or b
 *     and with mean/rstd NULL; the fast op against cpu-ref within the fp32 bound;
 *   - the model: training steps with the op and with the pointer set to NULL (the two-op
 *     fallback) give bit-identical losses, gradients and parameters, for recompute none,
 *     selective and full, fp32 and bf16, on both CPU backends, and equal to recompute
 *     none's (but bf16 selective: see test_model_bit_identical); the inference forward
 *     (no targets) gives identical logits;
 *   - llm-infer's forward (prefill and decode) gives identical logits with and without. */
#include "tests/unit/testutil.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/infer.h"
#include "common/model.h"
#include "kernels/backend.h"
#include "tests/unit/test_infer_util.h"

/* ---- the op ---- */

typedef struct {
    float *a, *b, *w, *bias;
    float *res, *out, *mean, *rstd;   /* the two ops' results */
} case_t;

static void case_free(case_t *k)
{
    free(k->a); free(k->b); free(k->w); free(k->bias);
    free(k->res); free(k->out); free(k->mean); free(k->rstd);
}

static float *fmalloc(size_t n)
{
    float *p = malloc((n ? n : 1) * sizeof *p);
    assert_non_null(p);
    return p;
}

/* Random inputs (row 1 with a mean near 100 when big_mean) and the backend's two-op
 * result. */
static case_t make_case(llm_backend *be, tu_rng *r, int N, int C, int big_mean)
{
    size_t n = (size_t)N * C;
    case_t k = {fmalloc(n), fmalloc(n), fmalloc(C), fmalloc(C),
                fmalloc(n), fmalloc(n), fmalloc(N), fmalloc(N)};
    tu_fill(r, k.a, n, -2, 3);
    tu_fill(r, k.b, n, -1, 1);
    tu_fill(r, k.w, C, 0.5f, 1.5f);
    tu_fill(r, k.bias, C, -0.5f, 0.5f);
    for (int c = 0; c < C && N > 1 && big_mean; c++)
        k.a[C + c] += 100.0f;
    be->residual_forward(be, k.res, k.a, k.b, n);
    be->layernorm_forward(be, k.out, k.mean, k.rstd, k.res, k.w, k.bias, N, C);
    return k;
}

static void same_bits(const float *x, const float *y, size_t n, const char *what, const char *be,
                      int N, int C)
{
    if (memcmp(x, y, n * sizeof *x) != 0)
        fail_msg("%s: %s differs from residual + layernorm at N=%d C=%d", be, what, N, C);
}

static void check_op(llm_backend *be, tu_rng *r, int N, int C)
{
    size_t n = (size_t)N * C;
    case_t k = make_case(be, r, N, C, 1);
    float *res = fmalloc(n), *out = fmalloc(n), *mean = fmalloc(N), *rstd = fmalloc(N);
    be->residual_layernorm_forward(be, res, out, mean, rstd, k.a, k.b, k.w, k.bias, N, C);
    same_bits(res, k.res, n, "res", be->name, N, C);
    same_bits(out, k.out, n, "out", be->name, N, C);
    same_bits(mean, k.mean, N, "mean", be->name, N, C);
    same_bits(rstd, k.rstd, N, "rstd", be->name, N, C);
    /* in place: res is a, then b; no statistics */
    for (int alias = 0; alias < 2; alias++) {
        memcpy(res, alias ? k.b : k.a, n * sizeof *res);
        memset(out, 0, n * sizeof *out);
        be->residual_layernorm_forward(be, res, out, NULL, NULL, alias ? k.a : res,
                                       alias ? res : k.b, k.w, k.bias, N, C);
        same_bits(res, k.res, n, alias ? "res (res = b)" : "res (res = a)", be->name, N, C);
        same_bits(out, k.out, n, alias ? "out (res = b)" : "out (res = a)", be->name, N, C);
    }
    free(res); free(out); free(mean); free(rstd);
    case_free(&k);
}

static const int NS[] = {1, 7, 300}, CS[] = {1, 3, 768 + 5};

static void test_op_bit_identical(void **state)
{
    (void)state;
    llm_backend ref, fast;
    assert_int_equal(tu_cpu_backends(&ref, &fast), 0);
    assert_non_null(ref.residual_layernorm_forward);
    assert_non_null(fast.residual_layernorm_forward);
    tu_rng r = {2024};
    for (int i = 0; i < 3; i++)
        for (int j = 0; j < 3; j++) {
            check_op(&ref, &r, NS[i], CS[j]);
            check_op(&fast, &r, NS[i], CS[j]);
        }
    tu_cpu_backends_free(&ref, &fast);
}

/* The fast op against the reference one (the layernorm's fp32 bound). */
static void test_op_fast_vs_ref(void **state)
{
    (void)state;
    llm_backend ref, fast;
    assert_int_equal(tu_cpu_backends(&ref, &fast), 0);
    tu_rng r = {7};
    for (int i = 0; i < 3; i++)
        for (int j = 0; j < 3; j++) {
            int N = NS[i], C = CS[j];
            size_t n = (size_t)N * C;
            /* no large-mean row: x - mean in fp32 loses its bits against the double
             * reference (test_kernels' layernorm inputs and bound) */
            case_t k = make_case(&ref, &r, N, C, 0);
            float *res = fmalloc(n), *out = fmalloc(n), *mean = fmalloc(N), *rstd = fmalloc(N);
            fast.residual_layernorm_forward(&fast, res, out, mean, rstd, k.a, k.b, k.w, k.bias,
                                            N, C);
            assert_memory_equal(res, k.res, n * sizeof *res);   /* one rounding either way */
            double e = fmax(fmax(tu_scaled_err(out, k.out, n), tu_scaled_err(mean, k.mean, N)),
                            tu_scaled_err(rstd, k.rstd, N));
            if (e > 1e-5)
                fail_msg("fast vs cpu-ref at N=%d C=%d: error %.3g", N, C, e);
            free(res); free(out); free(mean); free(rstd);
            case_free(&k);
        }
    tu_cpu_backends_free(&ref, &fast);
}

/* ---- the model ---- */

static const llm_model_config CFG = {"gpt2", 3, 2, 48, 100, 0, 16};
enum { B = 2, T = 16, STEPS = 3 };

typedef struct {
    llm_model *m;
    float loss[STEPS];
    float *grads[STEPS], *params, *logits;
    size_t nlogits;
} run_t;

/* STEPS AdamW steps from the same init on be; the gradients of each step, the final
 * parameters and the logits of an inference forward (no targets) on a fresh model. */
static run_t train_run(llm_backend *be, llm_recompute rec, llm_dtype lo)
{
    llm_status st = {0};
    run_t r = {0};
    size_t np = llm_model_num_params(&CFG);
    int32_t in[B * T], tg[B * T];
    tu_rng g = {99};
    tu_fill_ids(&g, in, tg, B * T, CFG.vocab_size);
    assert_int_equal(llm_model_new(&r.m, &CFG, be, &st), 0);
    llm_model_init_gpt2(r.m, 5);
    assert_int_equal(llm_model_set_precision(r.m, lo, &st), 0);
    assert_int_equal(llm_model_set_recompute(r.m, rec, &st), 0);
    llm_adamw_config hp = {1e-3f, 0.9f, 0.95f, 1e-8f, 0.1f, 1.0f};
    for (int s = 0; s < STEPS; s++) {
        assert_int_equal(llm_model_zero_grad(r.m, &st), 0);
        assert_int_equal(llm_model_forward(r.m, in, tg, B, T, &r.loss[s], &st), 0);
        assert_int_equal(llm_model_backward(r.m, 1.0f, &st), 0);
        r.grads[s] = fmalloc(np);
        memcpy(r.grads[s], llm_model_grads(r.m), np * sizeof(float));
        assert_int_equal(llm_model_update(r.m, &hp, s + 1, NULL, NULL, &st), 0);
    }
    r.params = fmalloc(np);
    memcpy(r.params, llm_model_params(r.m), np * sizeof(float));
    llm_model_free(r.m);
    /* inference layout: one slot, the stream updated in place */
    assert_int_equal(llm_model_new(&r.m, &CFG, be, &st), 0);
    llm_model_init_gpt2(r.m, 5);
    assert_int_equal(llm_model_set_precision(r.m, lo, &st), 0);
    assert_int_equal(llm_model_forward(r.m, in, NULL, B, T, NULL, &st), 0);
    r.nlogits = (size_t)B * T * llm_model_cfg(r.m)->padded_vocab;
    r.logits = fmalloc(r.nlogits);
    assert_int_equal(llm_model_logits_to_host(r.m, 0, (size_t)B * T, r.logits, &st), 0);
    llm_model_free(r.m);
    return r;
}

static void run_free(run_t *r)
{
    for (int s = 0; s < STEPS; s++)
        free(r->grads[s]);
    free(r->params);
    free(r->logits);
}

static void test_model_bit_identical(void **state)
{
    (void)state;
    const char *names[] = {"cpu-ref", "cpu"};
    const char *recs[] = {"none", "selective", "full"};
    size_t np = llm_model_num_params(&CFG);
    for (int bi = 0; bi < 2; bi++) {
        llm_backend be;
        char err[256];
        assert_int_equal(llm_backend_init(&be, names[bi], 2, err, sizeof err), 0);
        assert_non_null(be.residual_layernorm_forward);
        llm_backend off = be;   /* the same kernels without the fused op */
        off.residual_layernorm_forward = NULL;
        for (int lo = 0; lo < 2; lo++) {
            llm_dtype dt = lo ? LLM_DT_BF16 : LLM_DT_F32;
            run_t base = {0};
            for (int rec = 0; rec < 3; rec++) {
                run_t a = train_run(&be, (llm_recompute)rec, dt);
                run_t b = train_run(&off, (llm_recompute)rec, dt);
                /* fused against unfused; and recompute against none (fused): the
                 * recomputed layernorms are the plain ones, the kept ones fused.  (bf16
                 * selective recompute computes the GELU output again from the rounded
                 * pre-activation, not as the fused c_fc + GELU forward did: within lo
                 * roundings of none, test_mixed_model.c; not compared here) */
                int vs_none = rec == LLM_RECOMPUTE_FULL || (rec && !lo);
                const run_t *ref[2] = {&b, vs_none ? &base : &b};
                for (int k = 0; k < 2; k++)
                    for (int s = 0; s < STEPS; s++)
                        if (memcmp(&a.loss[s], &ref[k]->loss[s], sizeof(float)) != 0 ||
                            memcmp(a.grads[s], ref[k]->grads[s], np * sizeof(float)) != 0)
                            fail_msg("%s %s recompute %s: step %d differs from %s (loss %.9g vs "
                                     "%.9g)", names[bi], lo ? "bf16" : "fp32", recs[rec], s,
                                     k ? "recompute none" : "the two ops", a.loss[s],
                                     ref[k]->loss[s]);
                for (int s = 0; s < STEPS; s++)
                    assert_true(isfinite(a.loss[s]) && a.loss[s] > 0);
                assert_memory_equal(a.params, b.params, np * sizeof(float));
                assert_memory_equal(a.logits, b.logits, a.nlogits * sizeof(float));
                /* the steps did something: the loss moved */
                assert_true(a.loss[STEPS - 1] != a.loss[0]);
                run_free(&b);
                if (rec)
                    run_free(&a);
                else
                    base = a;
            }
            run_free(&base);
        }
        llm_backend_free(&be);
    }
}

/* ---- llm-infer's forward ---- */

/* Logits of a prefill of 9 positions in slot 0 and 5 in slot 1, then 3 decode steps of
 * both slots (greedy), on model file path with backend be: (2 + 3 * 2) rows of Vp. */
static float *infer_logits(const char *path, llm_backend *be, int Vp)
{
    llm_status st = {0};
    llm_infer_model *m;
    llm_infer_ctx *c;
    assert_int_equal(llm_infer_model_open(&m, path, be, 1, &st), 0);
    assert_int_equal(llm_infer_ctx_new(&c, m, 2, 16, &st), 0);
    float *out = fmalloc((size_t)8 * Vp);
    llm_infer_row rows[14];
    int n = 0;
    for (int p = 0; p < 9; p++)
        rows[n++] = (llm_infer_row){(int32_t)(p * 7 % 300), 0, p};
    for (int p = 0; p < 5; p++)
        rows[n++] = (llm_infer_row){(int32_t)(p * 13 % 300), 1, p};
    assert_int_equal(llm_infer_forward(c, rows, n, &st), 0);
    int which[2] = {8, 13};
    assert_int_equal(llm_infer_logits(c, which, 2, out, &st), 0);
    int pos[2] = {9, 5};
    for (int s = 0; s < 3; s++) {
        for (int k = 0; k < 2; k++) {
            const float *lg = out + (size_t)(2 * s + k) * Vp;
            int best = 0;
            for (int v = 1; v < 300; v++)
                if (lg[v] > lg[best])
                    best = v;
            rows[k] = (llm_infer_row){best, k, pos[k]++};
        }
        assert_int_equal(llm_infer_forward(c, rows, 2, &st), 0);
        int w2[2] = {0, 1};
        assert_int_equal(llm_infer_logits(c, w2, 2, out + (size_t)(2 * s + 2) * Vp, &st), 0);
    }
    llm_infer_ctx_free(c);
    llm_infer_model_free(m);
    return out;
}

static void test_infer_identical(void **state)
{
    (void)state;
    llm_model_config cfg = {.arch = "gpt2", .n_layer = 3, .n_head = 4, .n_embd = 64,
                            .vocab_size = 300, .padded_vocab = 384, .max_seq_len = 32};
    char *dir = tu_tmpdir(), path[512];
    snprintf(path, sizeof path, "%s/m.llmk", dir);
    const char *names[] = {"cpu-ref", "cpu"};
    for (int bi = 0; bi < 2; bi++) {
        llm_backend be;
        char err[256];
        assert_int_equal(llm_backend_init(&be, names[bi], 2, err, sizeof err), 0);
        llm_model *train;
        tiu_make_model(path, &cfg, &be, 31, 4.0f, 0, &train);
        llm_model_free(train);
        llm_backend off = be;
        off.residual_layernorm_forward = NULL;
        float *a = infer_logits(path, &be, cfg.padded_vocab);
        float *b = infer_logits(path, &off, cfg.padded_vocab);
        if (memcmp(a, b, (size_t)8 * cfg.padded_vocab * sizeof(float)) != 0)
            fail_msg("%s: llm-infer logits differ with the fused op", names[bi]);
        free(a);
        free(b);
        llm_backend_free(&be);
    }
    tu_rmdir(dir);
    free(dir);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_op_bit_identical),
        cmocka_unit_test(test_op_fast_vs_ref),
        cmocka_unit_test(test_model_bit_identical),
        cmocka_unit_test(test_infer_identical),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
