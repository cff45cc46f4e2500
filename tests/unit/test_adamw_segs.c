/* adamw_segs (kernels/backend.h): AdamW over a segment list that also writes the lo
 * weight copy, on the "cpu-ref" and "cpu" backends:
 *   - bit for bit the backend's own adamw on each segment followed by its cast_lo, for
 *     bf16, fp16 and no lo copy, over segments of odd sizes (1 element, not multiples
 *     of 8 or 32, one past the threaded size), with and without decay, empty ones, gaps
 *     between them (left untouched, lo copy included), shard-relative moments
 *     (mv_base), a NaN gradient and an fp16 overflow, three steps in a row;
 *   - llm_model_update through it gives the parameters, moments, lo copy and the next
 *     losses of the per-run adamw + cast_lo path bit for bit (fp32, bf16, fp16 with a
 *     loss scale, gradient clipping), and leaves the lo copy fresh (no cast_lo pass
 *     before the next forward, and the copy is the parameters rounded). */
#include "tests/unit/testutil.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/ckpt.h"
#include "common/model.h"
#include "common/model_impl.h"
#include "kernels/backend.h"

/* Segments over a buffer of NTOT elements: gaps at [5, 9), [1200, 1300), the tail. */
enum { NTOT = 45000 };
static const llm_adamw_seg SEGS[] = {
    {0, 1, 0.1f},       {1, 4, 0.0f},      {9, 37, 0.1f},     {46, 1, 0.0f},
    {47, 33, 0.0f},     {80, 1120, 0.1f},  {1300, 0, 0.1f},   {1300, 40003, 0.1f},
    {41303, 31, 0.0f},  {41334, 7, 0.1f},  {41341, 3000, 0.0f},
};
#define NSEGS ((int)(sizeof SEGS / sizeof SEGS[0]))

typedef struct {
    float *p, *g, *m, *v;
    uint16_t *lo;
} state_bufs;

static void bufs_init(state_bufs *s, tu_rng *r, size_t mvb)
{
    s->p = tu_rnd(r, NTOT, -1, 1);
    s->g = tu_rnd(r, NTOT, -2, 2);
    s->m = tu_rnd(r, NTOT - mvb, -0.1f, 0.1f);
    s->v = tu_rnd(r, NTOT - mvb, 0, 0.01f);
    s->lo = malloc(NTOT * sizeof(uint16_t));
    assert_non_null(s->lo);
    for (size_t i = 0; i < NTOT; i++)
        s->lo[i] = 0xabcd;   /* gaps must keep it */
    s->g[100] = NAN;         /* propagates to p: the lo copy maps NaN as cast_lo does */
    s->p[2000] = 70000.0f;   /* beyond fp16: inf in an fp16 copy */
    s->p[2001] = 65519.0f;
}

static void bufs_dup(state_bufs *d, const state_bufs *s, size_t mvb)
{
    d->p = tu_dup(s->p, NTOT);
    d->g = tu_dup(s->g, NTOT);
    d->m = tu_dup(s->m, NTOT - mvb);
    d->v = tu_dup(s->v, NTOT - mvb);
    d->lo = malloc(NTOT * sizeof(uint16_t));
    assert_non_null(d->lo);
    memcpy(d->lo, s->lo, NTOT * sizeof(uint16_t));
}

static void bufs_free(state_bufs *s)
{
    free(s->p);
    free(s->g);
    free(s->m);
    free(s->v);
    free(s->lo);
}

static void expect_same(const char *what, const void *a, const void *b, size_t bytes,
                        const char *be, int lo, size_t mvb, int t)
{
    if (memcmp(a, b, bytes) != 0)
        fail_msg("%s differs (backend %s, lo %d, mv_base %zu, t %d)", what, be, lo, mvb, t);
}

static void check_backend(llm_backend *be)
{
    static const int los[] = {0, LLM_DT_BF16, LLM_DT_F16};
    static const size_t mvbs[] = {0, 9};
    for (size_t li = 0; li < 3; li++)
        for (size_t mi = 0; mi < 2; mi++) {
            int lo = los[li];
            size_t mvb = mvbs[mi];
            tu_rng r = {1234 + li * 10 + mi};
            state_bufs a, b;
            bufs_init(&a, &r, mvb);
            bufs_dup(&b, &a, mvb);
            llm_adamw_seg segs[NSEGS];
            int n = 0;
            for (int i = 0; i < NSEGS; i++)
                if (SEGS[i].off >= mvb) segs[n++] = SEGS[i];
            for (int t = 1; t <= 3; t++) {
                float lr = 0.01f * t, gs = t == 2 ? 0.5f : 1.0f;
                be->adamw_segs(be, a.p, lo ? a.lo : NULL, a.g, a.m, a.v, mvb, segs, n, lr, 0.9f,
                               0.95f, 1e-8f, t, gs, lo);
                for (int i = 0; i < n; i++) {
                    size_t o = segs[i].off, k = segs[i].n;
                    if (!k) continue;
                    be->adamw(be, b.p + o, b.g + o, b.m + (o - mvb), b.v + (o - mvb), k, lr, 0.9f,
                              0.95f, 1e-8f, segs[i].wd, t, gs);
                    if (lo) be->cast_lo(be, b.lo + o, b.p + o, k, lo);
                }
                expect_same("p", a.p, b.p, NTOT * sizeof(float), be->name, lo, mvb, t);
                expect_same("m", a.m, b.m, (NTOT - mvb) * sizeof(float), be->name, lo, mvb, t);
                expect_same("v", a.v, b.v, (NTOT - mvb) * sizeof(float), be->name, lo, mvb, t);
                expect_same("lo copy", a.lo, b.lo, NTOT * sizeof(uint16_t), be->name, lo, mvb, t);
            }
            /* the test sees what it means to: updates happened, gaps kept */
            assert_true(isnan(a.p[100]));
            assert_true(a.lo[5] == 0xabcd && a.lo[1250] == 0xabcd && a.lo[NTOT - 1] == 0xabcd);
            if (lo == LLM_DT_F16) assert_int_equal(a.lo[2000], 0x7c00);
            if (lo) assert_true((mvb || a.lo[0] != 0xabcd) && a.lo[41340] != 0xabcd);
            bufs_free(&a);
            bufs_free(&b);
        }
}

static void test_kernel_bit_exact(void **state)
{
    (void)state;
    llm_backend ref, fast;
    if (tu_cpu_backends(&ref, &fast) != 0)
        fail_msg("cpu backends unavailable");
    assert_non_null(ref.adamw_segs);
    assert_non_null(fast.adamw_segs);
    check_backend(&ref);
    check_backend(&fast);
    /* nothing to do: no call into the arrays */
    ref.adamw_segs(&ref, NULL, NULL, NULL, NULL, NULL, 0, NULL, 0, 0.1f, 0.9f, 0.95f, 1e-8f,
                   1, 1.0f, 0);
    fast.adamw_segs(&fast, NULL, NULL, NULL, NULL, NULL, 0, NULL, 0, 0.1f, 0.9f, 0.95f, 1e-8f,
                    1, 1.0f, 0);
    tu_cpu_backends_free(&ref, &fast);
}

/* ---- through the model ---- */

static const llm_model_config CFG = {"gpt2", 2, 2, 48, 100, 0, 16};
enum { B = 2, T = 16 };

static llm_model *model(llm_backend *be, llm_dtype lo)
{
    llm_model *m;
    llm_status st = {0};
    assert_int_equal(llm_model_new(&m, &CFG, be, &st), 0);
    llm_model_init_gpt2(m, 5);
    assert_int_equal(llm_model_set_precision(m, lo, &st), 0);
    if (lo == LLM_DT_F16) assert_int_equal(llm_model_set_loss_scale(m, 1024.0, &st), 0);
    return m;
}

static float forward(llm_model *m, const int32_t *in, const int32_t *tg, int *casts)
{
    llm_status st = {0};
    float loss = 0;
    *casts += m->lo && m->lo_stale;   /* the forward's cast_lo pass runs */
    assert_int_equal(llm_model_forward(m, in, tg, B, T, &loss, &st), 0);
    return loss;
}

static void test_model_bit_exact(void **state)
{
    (void)state;
    int32_t in[B * T], tg[B * T];
    tu_rng r = {99};
    tu_fill_ids(&r, in, tg, B * T, CFG.vocab_size);
    static const char *names[] = {"cpu-ref", "cpu"};
    static const llm_dtype los[] = {LLM_DT_F32, LLM_DT_BF16, LLM_DT_F16};
    for (int bi = 0; bi < 2; bi++)
        for (int li = 0; li < 3; li++) {
            llm_backend be, old;
            char err[128];
            assert_int_equal(llm_backend_init(&be, names[bi], 2, err, sizeof err), 0);
            old = be;                /* the same kernels and context, without the op */
            old.adamw_segs = NULL;
            llm_dtype lo = los[li];
            llm_model *a = model(&be, lo), *b = model(&old, lo);
            size_t n = a->nparams;
            llm_status st = {0};
            int casts_a = 0, casts_b = 0;
            for (int s = 1; s <= 3; s++) {
                /* step 2 clips: the scale is not 1 */
                llm_adamw_config hp = {3e-3f, 0.9f, 0.95f, 1e-8f, 0.1f, s == 2 ? 1e-3f : 1.0f};
                float la = forward(a, in, tg, &casts_a), lb = forward(b, in, tg, &casts_b);
                assert_true(la == lb);
                assert_int_equal(llm_model_backward(a, 1.0f, &st), 0);
                assert_int_equal(llm_model_backward(b, 1.0f, &st), 0);
                double na = 0, nb = 0;
                int ska = 1, skb = 1;
                assert_int_equal(llm_model_update(a, &hp, s, &na, &ska, &st), 0);
                assert_int_equal(llm_model_update(b, &hp, s, &nb, &skb, &st), 0);
                assert_true(na == nb && ska == 0 && skb == 0);
                assert_memory_equal(a->params, b->params, n * sizeof(float));
                assert_memory_equal(a->m, b->m, n * sizeof(float));
                assert_memory_equal(a->v, b->v, n * sizeof(float));
                if (lo != LLM_DT_F32) {
                    /* fresh after the update: the parameters rounded, bit for bit */
                    assert_int_equal(a->lo_stale, 0);
                    assert_int_equal(b->lo_stale, 1);
                    uint16_t *want = malloc(n * sizeof(uint16_t));
                    assert_non_null(want);
                    be.cast_lo(&be, want, a->params, n, lo);
                    assert_memory_equal(a->params_lo, want, n * sizeof(uint16_t));
                    free(want);
                }
            }
            float la = forward(a, in, tg, &casts_a), lb = forward(b, in, tg, &casts_b);
            assert_true(la == lb);
            if (lo != LLM_DT_F32) {
                assert_memory_equal(a->params_lo, b->params_lo, n * sizeof(uint16_t));
                assert_int_equal(casts_a, 1);   /* the first forward only */
                assert_int_equal(casts_b, 4);   /* every forward */
            }
            /* a write through llm_model_params after an update still marks it stale */
            float *p = llm_model_params(a);
            p[0] += 1.0f;
            assert_int_equal(a->lo_stale, 1);
            llm_model_free(a);
            llm_model_free(b);
            llm_backend_free(&be);
        }
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_kernel_bit_exact),
        cmocka_unit_test(test_model_bit_exact),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
