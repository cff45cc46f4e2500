/* Mixed precision through the model (common/model.h) and the loss scaler
 * (common/loss_scale.h), on the "cpu-ref" and "cpu" backends:
 *   - precision and loss-scale arguments refused; a backend without the ops is named;
 *   - bf16/fp16 forward and backward stay close to fp32 but are not fp32 (the lo path
 *     runs), and the two CPU backends agree;
 *   - under mixed precision (lo activations, the lse attention) full recompute gives
 *     the gradients of no recompute bit for bit; selective recompute computes the GELU
 *     output again from the rounded pre-activation where the forward (the fused c_fc +
 *     GELU) took the GELU of the fp32 sum, so it is within a few lo roundings of no
 *     recompute and no farther from the fp32 gradients;
 *   - a backend without the fused GELU GEMMs (both, or the backward only) trains through
 *     the plain ops: recompute none, selective and full bit for bit among themselves
 *     (and full with the forward fused only), within lo roundings of the fused ops and
 *     not equal to them;
 *   - the logits of a lo forward come back widened (llm_model_logits_to_host), equal
 *     to the fp32 logits within bf16 rounding and not equal to them;
 *   - the lo copy follows the parameters: after llm_model_params writes, after
 *     llm_model_params_changed, after an update (bit-identical to a fresh model);
 *   - a power-of-two loss scale is undone exactly: 3 AdamW steps with scale 1024 give
 *     bit-identical parameters, moments, losses and norms to scale 1 (fp32 and bf16);
 *   - an fp16 overflow skips the update with weights and moments unchanged;
 *   - the scaler's halving, growth, bounds and checkpoint state;
 *   - llm_model_forward_backward (xent_fused) equals forward + backward bit for bit. */
#include "tests/unit/testutil.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/loss_scale.h"
#include "common/model.h"
#include "common/tree.h"
#include "kernels/backend.h"

static const llm_model_config CFG = {"gpt2", 2, 2, 48, 100, 0, 16};
enum { B = 2, T = 16 };
static int32_t IN[B * T], TG[B * T];

static int setup(void **state)
{
    (void)state;
    tu_rng r = {77};
    for (int i = 0; i < B * T; i++) {
        IN[i] = (int32_t)(tu_next(&r) % 100);
        TG[i] = (int32_t)(tu_next(&r) % 100);
    }
    return 0;
}

static llm_backend *backend(const char *name)
{
    llm_backend *be = calloc(1, sizeof *be);
    char err[256];
    assert_non_null(be);
    assert_int_equal(llm_backend_init(be, name, 2, err, sizeof err), 0);
    return be;
}

static void drop_backend(llm_backend *be)
{
    llm_backend_free(be);
    free(be);
}

static llm_model *model(llm_backend *be, llm_dtype lo, uint64_t seed)
{
    llm_model *m;
    llm_status st = {0};
    assert_int_equal(llm_model_new(&m, &CFG, be, &st), 0);
    llm_model_init_gpt2(m, seed);
    assert_int_equal(llm_model_set_precision(m, lo, &st), 0);
    return m;
}

static size_t nparams(void) { return llm_model_num_params(&CFG); }


static float fwd_bwd(llm_model *m)
{
    llm_status st = {0};
    float loss = 0;
    assert_int_equal(llm_model_zero_grad(m, &st), 0);
    assert_int_equal(llm_model_forward(m, IN, TG, B, T, &loss, &st), 0);
    assert_int_equal(llm_model_backward(m, 1.0f, &st), 0);
    return loss;
}

static const char *lo_name(llm_dtype lo) { return lo == LLM_DT_F16 ? "fp16" : "bf16"; }

static void test_refusals(void **state)
{
    (void)state;
    llm_backend *be = backend("cpu");
    llm_model *m = model(be, LLM_DT_F32, 1);
    llm_status st = {0};
    assert_int_equal(llm_model_precision(m), LLM_DT_F32);
    assert_int_equal(llm_model_set_precision(m, LLM_DT_Q8_0, &st), LLM_EUSAGE);
    assert_non_null(strstr(st.msg, "q8_0"));
    assert_int_equal(llm_model_precision(m), LLM_DT_F32);
    assert_int_equal(llm_model_set_precision(m, LLM_DT_F16, &st), 0);
    assert_int_equal(llm_model_precision(m), LLM_DT_F16);
    assert_int_equal(llm_model_set_precision(m, LLM_DT_F32, &st), 0);
    assert_int_equal(llm_model_precision(m), LLM_DT_F32);
    assert_true(llm_model_loss_scale(m) == 1.0);
    const double bad[] = {0.0, -1.0, NAN, INFINITY, -INFINITY};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        llm_status_clear(&st);
        assert_int_equal(llm_model_set_loss_scale(m, bad[i], &st), LLM_EUSAGE);
        assert_non_null(strstr(st.msg, "loss scale"));
    }
    assert_true(llm_model_loss_scale(m) == 1.0);
    assert_int_equal(llm_model_set_loss_scale(m, 3.5, &st), 0);
    assert_true(llm_model_loss_scale(m) == 3.5);
    llm_model_free(m);

    /* a backend without the ops: refused with its name and the precision */
    llm_backend nolo;
    for (int miss = 0; miss < 3; miss++) {
        nolo = *be;
        nolo.name = "nolo-test";
        if (miss == 2)
            nolo.attention_backward_lse = NULL;
        else if (miss == 1)
            nolo.xent_backward_lo = NULL;
        else
            nolo.matmul_backward_lo = NULL;
        assert_int_equal(llm_model_new(&m, &CFG, &nolo, &st), 0);
        for (int k = 0; k < 2; k++) {
            llm_status_clear(&st);
            llm_dtype lo = k ? LLM_DT_F16 : LLM_DT_BF16;
            assert_int_equal(llm_model_set_precision(m, lo, &st), LLM_ENODEV);
            print_message("# %s\n", st.msg);
            assert_non_null(strstr(st.msg, "'nolo-test'"));
            assert_non_null(strstr(st.msg, lo_name(lo)));
        }
        assert_int_equal(llm_model_precision(m), LLM_DT_F32);
        llm_model_free(m);
    }
    drop_backend(be);
}

/* lo against fp32 on each backend; cpu against cpu-ref in lo */
static void test_close_to_fp32(void **state)
{
    (void)state;
    size_t n = nparams();
    float *g[2][3];   /* [backend][fp32, bf16, fp16] */
    float loss[2][3];
    const char *names[2] = {"cpu-ref", "cpu"};
    const llm_dtype dts[3] = {LLM_DT_F32, LLM_DT_BF16, LLM_DT_F16};
    for (int b = 0; b < 2; b++) {
        llm_backend *be = backend(names[b]);
        for (int k = 0; k < 3; k++) {
            llm_model *m = model(be, dts[k], 5);
            loss[b][k] = fwd_bwd(m);
            g[b][k] = malloc(n * sizeof(float));
            assert_non_null(g[b][k]);
            memcpy(g[b][k], llm_model_grads(m), n * sizeof(float));
            llm_model_free(m);
        }
        drop_backend(be);
    }
    for (int b = 0; b < 2; b++)
        for (int k = 1; k < 3; k++) {
            double el = fabs(loss[b][k] - loss[b][0]) / loss[b][0];
            double eg = tu_scaled_err(g[b][k], g[b][0], n);
            print_message("# %s %s vs fp32: loss %.7f vs %.7f (rel %.3g), gradients %.3g\n",
                          names[b], lo_name(dts[k]), loss[b][k], loss[b][0], el, eg);
            assert_true(el <= 1e-2);
            assert_true(eg <= (k == 1 ? 1e-2 : 2e-3));
            assert_true(eg > 1e-5);   /* the lo path ran: not the fp32 result */
        }
    for (int k = 0; k < 3; k++) {
        double el = fabs(loss[1][k] - loss[0][k]) / loss[0][k];
        double eg = tu_scaled_err(g[1][k], g[0][k], n);
        print_message("# %s cpu vs cpu-ref: loss rel %.3g, gradients %.3g\n",
                      k ? lo_name(dts[k]) : "fp32", el, eg);
        assert_true(el <= 1e-5);
        assert_true(eg <= (k == 1 ? 5e-3 : k == 2 ? 1e-3 : 1e-5));
    }
    for (int b = 0; b < 2; b++)
        for (int k = 0; k < 3; k++)
            free(g[b][k]);
}

/* Full recompute under mixed precision reruns the same lo ops on the same inputs (the
 * fused c_fc + GELU included): the gradients equal those of no recompute bit for bit.
 * Selective recompute's GELU output is gelu(lo(s)) where the forward kept lo(gelu(s)) of
 * the fp32 sum s: the same loss, gradients within a few lo roundings of no recompute
 * (bf16 2e-3, fp16 5e-4 scaled error; measured 4.6e-4 and 6.6e-5) and no farther from the
 * fp32 gradients than no recompute's (10% slack). */
static void test_lo_recompute(void **state)
{
    (void)state;
    size_t n = nparams();
    const char *names[2] = {"cpu-ref", "cpu"};
    for (int b = 0; b < 2; b++) {
        llm_backend *be = backend(names[b]);
        llm_model *m32 = model(be, LLM_DT_F32, 5);
        fwd_bwd(m32);
        for (int k = 0; k < 2; k++) {
            llm_dtype lo = k ? LLM_DT_F16 : LLM_DT_BF16;
            llm_model *m0 = model(be, lo, 5);
            float l0 = fwd_bwd(m0);
            const float *g0 = llm_model_grads(m0), *g32 = llm_model_grads(m32);
            double e0 = tu_scaled_err(g0, g32, n);
            for (int r = LLM_RECOMPUTE_SELECTIVE; r <= LLM_RECOMPUTE_FULL; r++) {
                llm_model *m = model(be, lo, 5);
                llm_status st = {0};
                assert_int_equal(llm_model_set_recompute(m, (llm_recompute)r, &st), 0);
                float l = fwd_bwd(m);
                const float *g = llm_model_grads(m);
                double e = tu_scaled_err(g, g0, n), e32 = tu_scaled_err(g, g32, n);
                print_message("# %s %s recompute %d: loss %.7f vs %.7f, gradients vs none "
                              "%.3g, vs fp32 %.3g (none %.3g)\n", names[b], lo_name(lo), r, l,
                              l0, e, e32, e0);
                assert_true(l == l0);   /* the forward is the same either way */
                if (r == LLM_RECOMPUTE_FULL) {
                    assert_memory_equal(g, g0, n * sizeof(float));
                    assert_true(llm_model_bytes(m) < llm_model_bytes(m0));
                } else {
                    assert_true(e <= (k ? 5e-4 : 2e-3));
                    assert_true(e32 <= 1.1 * e0);
                }
                llm_model_free(m);
            }
            llm_model_free(m0);
        }
        llm_model_free(m32);
        drop_backend(be);
    }
}

/* The model without the fused GELU GEMMs (matmul_forward_gelu_lo and
 * matmul_backward_dgelu_lo NULL: the plain lo ops) and with the forward one only. */
static void test_lo_unfused_gelu(void **state)
{
    (void)state;
    size_t n = nparams();
    llm_backend *be = backend("cpu-ref");
    for (int k = 0; k < 2; k++) {
        llm_dtype lo = k ? LLM_DT_F16 : LLM_DT_BF16;
        llm_model *m0 = model(be, lo, 5), *m32 = model(be, LLM_DT_F32, 5);
        float l0 = fwd_bwd(m0);
        fwd_bwd(m32);
        const float *g32 = llm_model_grads(m32);
        for (int v = 0; v < 2; v++) {
            llm_backend off = *be;   /* the same kernels, v 0: no fused op, 1: forward only */
            off.matmul_backward_dgelu_lo = NULL;
            if (!v)
                off.matmul_forward_gelu_lo = NULL;
            float *g1 = NULL, l1 = 0;
            for (int r = LLM_RECOMPUTE_NONE; r <= LLM_RECOMPUTE_FULL; r++) {
                if (v && r == LLM_RECOMPUTE_SELECTIVE)
                    continue;   /* the fused forward: within roundings, test_lo_recompute */
                llm_model *m = model(&off, lo, 5);
                llm_status st = {0};
                assert_int_equal(llm_model_set_recompute(m, (llm_recompute)r, &st), 0);
                float l = fwd_bwd(m);
                const float *g = llm_model_grads(m);
                if (r == LLM_RECOMPUTE_NONE) {
                    g1 = tu_dup(g, n);
                    l1 = l;
                    double e = tu_scaled_err(g, llm_model_grads(m0), n);
                    print_message("# %s %s: loss %.7f vs fused %.7f, gradients %.3g apart; "
                                  "vs fp32 %.3g (fused %.3g)\n",
                                  v ? "forward fused only" : "unfused", lo_name(lo), l, l0, e,
                                  tu_scaled_err(g, g32, n),
                                  tu_scaled_err(llm_model_grads(m0), g32, n));
                    assert_true(fabs(l - l0) <= 1e-3 * l0);
                    assert_true(e <= (k ? 1e-3 : 5e-3));
                    assert_true(memcmp(g, llm_model_grads(m0), n * sizeof(float)) != 0);
                } else {
                    assert_true(l == l1);
                    assert_memory_equal(g, g1, n * sizeof(float));
                }
                llm_model_free(m);
            }
            free(g1);
        }
        llm_model_free(m0);
        llm_model_free(m32);
    }
    drop_backend(be);
}

/* A lo forward's logits come back widened to fp32: the fp32 model's within a few bf16
 * spacings, not equal to them, and every value a bf16 value; a lo model's activations
 * take less memory than the fp32 one's. */
static void test_lo_logits(void **state)
{
    (void)state;
    llm_backend *be = backend("cpu");
    llm_model *m32 = model(be, LLM_DT_F32, 7), *m16 = model(be, LLM_DT_BF16, 7);
    llm_status st = {0};
    size_t nl = (size_t)B * T * 128;   /* padded vocabulary of CFG */
    float *a = malloc(nl * 4), *b = malloc(nl * 4);
    assert_true(a && b);
    for (int train = 0; train < 2; train++) {
        float l32 = 0, l16 = 0;
        assert_int_equal(llm_model_forward(m32, IN, train ? TG : NULL, B, T, &l32, &st), 0);
        assert_int_equal(llm_model_forward(m16, IN, train ? TG : NULL, B, T, &l16, &st), 0);
        assert_int_equal(llm_model_logits_to_host(m32, 0, (size_t)B * T, a, &st), 0);
        assert_int_equal(llm_model_logits_to_host(m16, 0, (size_t)B * T, b, &st), 0);
        double e = tu_scaled_err(b, a, nl);
        size_t odd = 0;
        for (size_t i = 0; i < nl; i++) {
            uint32_t u;
            memcpy(&u, &b[i], 4);
            odd += (u & 0xffff) != 0;
        }
        print_message("# bf16 logits vs fp32 (%s forward): %.3g\n", train ? "training" : "inference", e);
        assert_true(e > 1e-6 && e <= 3e-2);
        assert_int_equal(odd, 0);
        /* one row from the middle */
        assert_int_equal(llm_model_logits_to_host(m16, 5, 1, a, &st), 0);
        assert_memory_equal(a, b + 5 * 128, 128 * 4);
    }
    /* the same but for the lo copy of the parameters: smaller activations */
    assert_true(llm_model_bytes(m16) - nparams() * 2 < llm_model_bytes(m32));
    free(a);
    free(b);
    llm_model_free(m32);
    llm_model_free(m16);
    drop_backend(be);
}

static float fwd(llm_model *m)
{
    llm_status st = {0};
    float loss = 0;
    assert_int_equal(llm_model_forward(m, IN, TG, B, T, &loss, &st), 0);
    return loss;
}

/* A fresh bf16 model holding params p: the loss a correct lo copy gives. */
static float fresh_loss(llm_backend *be, const float *p)
{
    llm_model *m;
    llm_status st = {0};
    assert_int_equal(llm_model_new(&m, &CFG, be, &st), 0);
    memcpy(llm_model_params(m), p, nparams() * sizeof(float));
    assert_int_equal(llm_model_set_precision(m, LLM_DT_BF16, &st), 0);
    float l = fwd(m);
    llm_model_free(m);
    return l;
}

static void test_lo_copy_follows(void **state)
{
    (void)state;
    llm_backend *be = backend("cpu");
    size_t n = nparams();
    llm_model *m = model(be, LLM_DT_BF16, 3);
    llm_status st = {0};
    float l0 = fwd(m);
    /* writes through llm_model_params */
    float *p = llm_model_params(m);
    for (size_t i = 0; i < n; i++)
        p[i] *= 1.5f;
    float l1 = fwd(m);
    assert_true(l1 != l0);
    assert_true(l1 == fresh_loss(be, llm_model_params(m)));
    /* a pointer kept from before the forward, then llm_model_params_changed */
    for (size_t i = 0; i < n; i++)
        p[i] *= 0.5f;
    llm_model_params_changed(m);
    float l2 = fwd(m);
    assert_true(l2 != l1);
    assert_true(l2 == fresh_loss(be, p));
    /* an update */
    llm_adamw_config hp = {1e-2f, 0.9f, 0.95f, 1e-8f, 0.1f, 1.0f};
    fwd_bwd(m);
    int skipped = 1;
    assert_int_equal(llm_model_update(m, &hp, 1, NULL, &skipped, &st), 0);
    assert_int_equal(skipped, 0);
    float l3 = fwd(m);
    assert_true(l3 != l2);
    assert_true(l3 == fresh_loss(be, p));
    /* precision back to fp32 and on again */
    assert_int_equal(llm_model_set_precision(m, LLM_DT_F32, &st), 0);
    float l4 = fwd(m);
    assert_true(l4 != l3);
    assert_int_equal(llm_model_set_precision(m, LLM_DT_BF16, &st), 0);
    assert_true(fwd(m) == l3);
    llm_model_free(m);
    drop_backend(be);
}

/* steps x (forward, backward, AdamW step); losses and norms before clipping recorded.
 * The parameters after several steps depend on every moment. */
static void run_steps(llm_model *m, int steps, float grad_clip, float *losses, double *norms)
{
    llm_adamw_config hp = {3e-3f, 0.9f, 0.95f, 1e-8f, 0.1f, grad_clip};
    llm_status st = {0};
    for (int s = 0; s < steps; s++) {
        losses[s] = fwd_bwd(m);
        int skipped = 1;
        assert_int_equal(llm_model_update(m, &hp, s + 1, &norms[s], &skipped, &st), 0);
        assert_int_equal(skipped, 0);
    }
}

static void test_loss_scale_exact(void **state)
{
    (void)state;
    size_t n = nparams();
    const char *names[2] = {"cpu-ref", "cpu"};
    for (int b = 0; b < 2; b++)
        for (int k = 0; k < 2; k++)
            for (int clip = 0; clip < 2; clip++) {
                llm_dtype lo = k ? LLM_DT_BF16 : LLM_DT_F32;
                llm_backend *be = backend(names[b]);
                llm_model *a = model(be, lo, 11), *s = model(be, lo, 11);
                llm_status st = {0};
                assert_int_equal(llm_model_set_loss_scale(s, 1024.0, &st), 0);
                /* the scaled gradients are exactly 1024 x the unscaled ones */
                fwd_bwd(a);
                fwd_bwd(s);
                const float *ga = llm_model_grads(a), *gs = llm_model_grads(s);
                size_t diff = 0;
                for (size_t i = 0; i < n; i++)
                    diff += gs[i] != ga[i] * 1024.0f;
                assert_int_equal(diff, 0);
                float la[3], ls[3];
                double na[3], ns[3];
                float gc = clip ? 0.05f : 0.0f;   /* clipping on (norms are ~2) or off */
                run_steps(a, 3, gc, la, na);
                run_steps(s, 3, gc, ls, ns);
                for (int i = 0; i < 3; i++) {
                    assert_true(la[i] == ls[i]);
                    assert_true(na[i] == ns[i]);
                }
                assert_memory_equal(llm_model_params(a), llm_model_params(s), n * sizeof(float));
                print_message("# %s %s clip %g: scale 1024 == scale 1 bit for bit (norm %.4f)\n",
                              names[b], k ? "bf16" : "fp32", gc, na[2]);
                llm_model_free(a);
                llm_model_free(s);
                drop_backend(be);
            }
}

/* The moments are not visible through model.h: that they are unchanged by a skipped step
 * shows as a later step equal to that of a twin model that never saw the overflow. */
static void test_fp16_overflow(void **state)
{
    (void)state;
    size_t n = nparams();
    llm_backend *be = backend("cpu");
    llm_model *m = model(be, LLM_DT_F16, 21), *twin = model(be, LLM_DT_F16, 21);
    llm_status st = {0};
    llm_adamw_config hp = {3e-3f, 0.9f, 0.95f, 1e-8f, 0.1f, 1.0f};
    /* one clean step at 1024 on both, so that the moments are not zero */
    float l[1];
    double nr[1];
    assert_int_equal(llm_model_set_loss_scale(m, 1024.0, &st), 0);
    assert_int_equal(llm_model_set_loss_scale(twin, 1024.0, &st), 0);
    run_steps(m, 1, 1.0f, l, nr);
    run_steps(twin, 1, 1.0f, l, nr);
    float *before = malloc(n * sizeof(float));
    assert_non_null(before);
    memcpy(before, llm_model_params(m), n * sizeof(float));
    /* 2^24 / (B*T = 32) puts d(logits) beyond 65504: the f16 operand overflows */
    assert_int_equal(llm_model_set_loss_scale(m, 16777216.0, &st), 0);
    fwd_bwd(m);
    double norm = 0;
    int skipped = 0;
    assert_int_equal(llm_model_update(m, &hp, 2, &norm, &skipped, &st), 0);
    print_message("# fp16 at scale 2^24: norm %g, skipped %d\n", norm, skipped);
    assert_int_equal(skipped, 1);
    assert_false(isfinite(norm));
    assert_memory_equal(llm_model_params(m), before, n * sizeof(float));
    /* the moments are unchanged too: the next step (t = 2) matches the twin's exactly */
    assert_int_equal(llm_model_set_loss_scale(m, 1024.0, &st), 0);
    double n1, n2;
    float l1 = fwd_bwd(m), l2 = fwd_bwd(twin);
    assert_true(l1 == l2);
    assert_int_equal(llm_model_update(m, &hp, 2, &n1, &skipped, &st), 0);
    assert_int_equal(skipped, 0);
    assert_int_equal(llm_model_update(twin, &hp, 2, &n2, &skipped, &st), 0);
    assert_true(n1 == n2 && isfinite(n1));
    assert_memory_equal(llm_model_params(m), llm_model_params(twin), n * sizeof(float));
    assert_memory_not_equal(llm_model_params(m), before, n * sizeof(float));
    free(before);
    llm_model_free(m);
    llm_model_free(twin);
    drop_backend(be);
}

static void test_scaler(void **state)
{
    (void)state;
    llm_loss_scaler s;
    double from;
    /* not dynamic: always 1, nothing changes */
    llm_loss_scaler_init(&s, 0, 65536, 2);
    assert_true(s.scale == 1.0);
    assert_int_equal(llm_loss_scaler_update(&s, 1, 0, &from), LLM_LOSS_SCALE_SAME);
    assert_true(s.scale == 1.0);
    /* halving down to the floor */
    llm_loss_scaler_init(&s, 1, 8, 3);
    assert_true(s.scale == 8.0);
    assert_int_equal(llm_loss_scaler_update(&s, 1, 0, &from), LLM_LOSS_SCALE_HALVED);
    assert_true(from == 8.0 && s.scale == 4.0);
    assert_int_equal(llm_loss_scaler_update(&s, 1, 0, &from), LLM_LOSS_SCALE_HALVED);
    assert_int_equal(llm_loss_scaler_update(&s, 1, 0, &from), LLM_LOSS_SCALE_HALVED);
    assert_true(s.scale == 1.0);
    assert_int_equal(llm_loss_scaler_update(&s, 1, 0, &from), LLM_LOSS_SCALE_SAME);
    assert_true(s.scale == 1.0);
    /* growth after `window` clean steps; another skip resets the count */
    assert_int_equal(llm_loss_scaler_update(&s, 0, 0, &from), LLM_LOSS_SCALE_SAME);
    assert_int_equal(llm_loss_scaler_update(&s, 0, 0, &from), LLM_LOSS_SCALE_SAME);
    assert_int_equal(llm_loss_scaler_update(&s, 0, 1, &from), LLM_LOSS_SCALE_SAME);
    assert_true(s.scale == 1.0 && s.clean == 0);
    assert_int_equal(llm_loss_scaler_update(&s, 0, 0, &from), LLM_LOSS_SCALE_SAME);
    assert_int_equal(llm_loss_scaler_update(&s, 0, 0, &from), LLM_LOSS_SCALE_SAME);
    assert_int_equal(llm_loss_scaler_update(&s, 0, 0, &from), LLM_LOSS_SCALE_GROWN);
    assert_true(from == 1.0 && s.scale == 2.0 && s.clean == 0);
    /* the cap: 2^24 */
    llm_loss_scaler_init(&s, 1, 1e9, 1);
    assert_true(s.scale == LLM_LOSS_SCALE_MAX);
    assert_int_equal(llm_loss_scaler_update(&s, 0, 0, &from), LLM_LOSS_SCALE_SAME);
    assert_true(s.scale == LLM_LOSS_SCALE_MAX);
    llm_loss_scaler_init(&s, 1, 12582912, 1);   /* 1.5 * 2^23 */
    assert_int_equal(llm_loss_scaler_update(&s, 0, 0, &from), LLM_LOSS_SCALE_GROWN);
    assert_true(s.scale == LLM_LOSS_SCALE_MAX);
    /* checkpoint state round trip, through YAML text */
    llm_loss_scaler_init(&s, 1, 3000, 10);
    llm_loss_scaler_update(&s, 1, 0, NULL);
    for (int i = 0; i < 7; i++)
        llm_loss_scaler_update(&s, 0, 0, NULL);
    llm_node *tr = llm_node_new_map();
    assert_non_null(tr);
    assert_int_equal(llm_loss_scaler_save(&s, tr), 0);
    char *txt = NULL;
    size_t len = 0;
    llm_status st = {0};
    assert_int_equal(llm_yaml_emit(tr, &txt, &len, &st), 0);
    llm_node *back = NULL;
    assert_int_equal(llm_yaml_parse(txt, len, "t", &llm_yaml_default_limits, &back, &st), 0);
    llm_loss_scaler r;
    llm_loss_scaler_init(&r, 1, 65536, 10);
    assert_int_equal(llm_loss_scaler_load(&r, back, &st), 0);
    assert_true(r.scale == 1500.0 && r.clean == 7);
    /* a shorter window now: the count is clamped below it */
    llm_loss_scaler_init(&r, 1, 65536, 4);
    assert_int_equal(llm_loss_scaler_load(&r, back, &st), 0);
    assert_true(r.clean == 3);
    /* not dynamic: nothing saved, nothing loaded */
    llm_loss_scaler_init(&r, 0, 65536, 4);
    assert_int_equal(llm_loss_scaler_load(&r, back, &st), 0);
    assert_true(r.scale == 1.0);
    llm_node *empty = llm_node_new_map();
    assert_int_equal(llm_loss_scaler_save(&r, empty), 0);
    assert_null(llm_node_get(empty, "loss_scale"));
    /* a checkpoint without the state (an fp32 run) keeps the configured scale */
    llm_loss_scaler_init(&r, 1, 4096, 4);
    assert_int_equal(llm_loss_scaler_load(&r, empty, &st), 0);
    assert_true(r.scale == 4096.0 && r.clean == 0);
    /* hostile values */
    const char *bad[][2] = {{"0", "2"}, {"-8", "2"}, {"1e30", "2"}, {"nan", "2"},
                            {"64", "-1"}, {"64", "x"}, {"abc", "2"}};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        llm_node *h = llm_node_new_map();
        assert_int_equal(llm_node_set_str(h, "loss_scale", bad[i][0]), 0);
        assert_int_equal(llm_node_set_str(h, "loss_scale_clean", bad[i][1]), 0);
        llm_loss_scaler_init(&r, 1, 4096, 4);
        llm_status_clear(&st);
        assert_int_equal(llm_loss_scaler_load(&r, h, &st), LLM_EDATA);
        assert_non_null(strstr(st.msg, "train.loss_scale"));
        assert_true(r.scale == 4096.0);
        llm_node_free(h);
    }
    llm_node *half = llm_node_new_map();
    assert_int_equal(llm_node_set_int(half, "loss_scale", 64), 0);
    assert_int_equal(llm_loss_scaler_load(&r, half, &st), LLM_EDATA);
    llm_node_free(half);
    llm_node_free(empty);
    llm_node_free(back);
    llm_node_free(tr);
    free(txt);
}

/* llm_model_forward_backward (the classifier's loss and gradient in one xent_fused):
 * the loss and gradients of llm_model_forward + llm_model_backward bit for bit, and of a
 * backend without xent_fused, in fp32, bf16 and fp16, with a loss scale and
 * accumulation; it needs targets and leaves no backward armed. */
static void test_forward_backward(void **state)
{
    (void)state;
    const char *names[] = {"cpu", "cpu-ref"};
    const llm_dtype dts[] = {LLM_DT_F32, LLM_DT_BF16, LLM_DT_F16};
    size_t n = nparams();
    for (int b = 0; b < 2; b++)
        for (int k = 0; k < 3; k++) {
            llm_backend *be = backend(names[b]);
            llm_backend nofuse = *be;
            nofuse.xent_fused = NULL;
            assert_non_null(be->xent_fused);
            llm_model *m[3] = {model(be, dts[k], 5), model(be, dts[k], 5), model(&nofuse, dts[k], 5)};
            float loss[3][2];
            llm_status st = {0};
            for (int i = 0; i < 3; i++) {
                assert_int_equal(llm_model_set_loss_scale(m[i], 8.0, &st), 0);
                assert_int_equal(llm_model_zero_grad(m[i], &st), 0);
                /* two accumulated micro-batches: the second with the inputs shifted */
                for (int a = 0; a < 2; a++) {
                    const int32_t *in = a ? TG : IN, *tg = a ? IN : TG;
                    if (i == 0) {
                        assert_int_equal(llm_model_forward(m[i], in, tg, B, T, &loss[i][a], &st), 0);
                        assert_int_equal(llm_model_backward(m[i], 0.5f, &st), 0);
                    } else {
                        assert_int_equal(llm_model_forward_backward(m[i], in, tg, B, T, 0.5f,
                                                                    &loss[i][a], &st), 0);
                    }
                }
            }
            for (int i = 1; i < 3; i++) {
                assert_memory_equal(loss[i], loss[0], sizeof loss[0]);
                assert_memory_equal(llm_model_grads(m[i]), llm_model_grads(m[0]), n * sizeof(float));
            }
            assert_true(isfinite(loss[0][0]) && loss[0][0] > 1.0f);
            /* the pass consumed its forward; a pass without targets is refused */
            assert_int_equal(llm_model_backward(m[1], 1.0f, &st), LLM_EUSAGE);
            llm_status_clear(&st);
            assert_int_equal(llm_model_forward_backward(m[1], IN, NULL, B, T, 1.0f, NULL, &st),
                             LLM_EUSAGE);
            for (int i = 0; i < 3; i++)
                llm_model_free(m[i]);
            drop_backend(be);
        }
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_refusals),
        cmocka_unit_test(test_close_to_fp32),
        cmocka_unit_test(test_lo_recompute),
        cmocka_unit_test(test_lo_unfused_gelu),
        cmocka_unit_test(test_lo_logits),
        cmocka_unit_test(test_lo_copy_follows),
        cmocka_unit_test(test_loss_scale_exact),
        cmocka_unit_test(test_fp16_overflow),
        cmocka_unit_test(test_scaler),
        cmocka_unit_test(test_forward_backward),
    };
    return cmocka_run_group_tests_name("mixed_model", tests, setup, NULL);
}
