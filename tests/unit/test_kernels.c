/* Kernel tests: backend selection; every fast ("cpu") kernel against its reference
 * ("cpu-ref") on random inputs at awkward shapes (max relative error printed as a TAP
 * comment and bounded); every reference backward against finite differences. */
#include "tests/unit/testutil.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/backend.h"
#include "kernels/cpu/cpu_ops.h"

typedef struct {
    int B, T, C, NH, OC, V, Vp;
} shape;

/* Sizes that are not multiples of 8/16/64, a single row/head, a long T (several blocks
 * of the blocked attention), and GPT-2-like head size 64. */
static const shape SHAPES[] = {
    {1, 1, 4, 1, 3, 5, 5},       {2, 5, 13, 1, 37, 11, 14},  {3, 7, 48, 4, 70, 29, 32},
    {2, 17, 64, 2, 96, 100, 128}, {1, 70, 40, 5, 23, 61, 64}, {2, 33, 128, 2, 129, 257, 260},
    {1, 130, 64, 1, 8, 9, 16},
    /* big enough to thread, GEMMs split by rows and by columns */
    {4, 64, 96, 3, 200, 1000, 1024}, {1, 20, 64, 2, 1500, 50, 64},
};
#define NSHAPES (sizeof SHAPES / sizeof SHAPES[0])

static llm_backend REF, FAST;

static int setup(void **state)
{
    (void)state;
    return tu_cpu_backends(&REF, &FAST);
}

/* The same tests on the portable (non-AVX2) paths of the fast backend. */
static int setup_generic(void **state)
{
    if (setup(state) != 0)
        return -1;
    ((llm_cpu_ctx *)FAST.ctx)->avx2 = 0;
    print_message("# portable (non-AVX2) kernels\n");
    return 0;
}

static int teardown(void **state)
{
    (void)state;
    tu_cpu_backends_free(&REF, &FAST);
    return 0;
}

static double max_abs(const float *x, size_t n)
{
    double m = 0;
    for (size_t i = 0; i < n; i++)
        if (fabs(x[i]) > m)
            m = fabs(x[i]);
    return m;
}

/* Compare fast against reference.  floor_frac: errors are relative to
 * max(|ref_i|, floor_frac * max|ref|), so that outputs which are a small difference of
 * larger terms (a GEMM entry, x*w + b, b1 m + (1-b1) g) are judged against the size of
 * those terms, not against their near-zero result.  Prints the error as a TAP comment; the worst over shapes is tracked. */
static double cmp(const char *op, const shape *s, const float *fast, const float *ref,
                  size_t n, double floor_frac, double bound, double *worst)
{
    double fl = floor_frac * max_abs(ref, n);
    size_t wi = 0;
    double e = tu_max_rel_err(fast, ref, n, fl > 1e-30 ? fl : 1e-30, &wi);
    if (e > *worst)
        *worst = e;
    if (!(e <= bound))
        print_message("# %s B=%d T=%d C=%d NH=%d OC=%d V=%d Vp=%d: max rel err %.3g at %zu "
                      "(%g vs %g) > %g\n",
                      op, s->B, s->T, s->C, s->NH, s->OC, s->V, s->Vp, e, wi, fast[wi],
                      ref[wi], bound);
    assert_true(e <= bound);
    return e;
}

static void report(const char *op, double worst)
{
    print_message("# %-20s max rel err %.3g\n", op, worst);
}

/* ---- backend selection ---- */

static void test_backend_init(void **state)
{
    (void)state;
    llm_backend be;
    char err[256];
    assert_int_equal(llm_backend_init(&be, "cpu", 3, err, sizeof err), 0);
    assert_string_equal(be.name, "cpu");
    assert_int_equal(be.threads, 3);
    float *p = be.alloc(&be, 1000);
    assert_non_null(p);
    assert_true(((uintptr_t)p & 63) == 0);
    for (int i = 0; i < 250; i++)
        assert_true(p[i] == 0.0f);
    be.free(&be, p);
    llm_backend_free(&be);
    assert_int_equal(llm_backend_init(&be, "cpu-ref", 0, err, sizeof err), 0);
    assert_string_equal(be.name, "cpu-ref");
    assert_non_null(be.matmul_forward);
    llm_backend_free(&be);
    assert_int_equal(llm_backend_init(&be, "auto", 0, err, sizeof err), 0);
    assert_true(be.threads >= 1);
    llm_backend_free(&be);
    assert_int_equal(llm_backend_init(&be, "tpu", 0, err, sizeof err), -1);
    assert_non_null(strstr(err, "'tpu'"));
#ifndef LLM_CUDA
    assert_int_equal(llm_backend_init(&be, "cuda", 0, err, sizeof err), -1);
    assert_non_null(strstr(err, "not available in this build"));
#endif
}

/* ---- fast vs reference ---- */

static void test_embed(void **state)
{
    (void)state;
    tu_rng r = {1};
    double w1 = 0, w2 = 0, w3 = 0;
    for (size_t k = 0; k < NSHAPES; k++) {
        const shape *s = &SHAPES[k];
        size_t n = (size_t)s->B * s->T * s->C;
        int32_t *inp = malloc(sizeof(int32_t) * s->B * s->T);
        for (int i = 0; i < s->B * s->T; i++)
            inp[i] = (int32_t)(tu_next(&r) % (uint64_t)s->V);
        inp[0] = inp[s->B * s->T - 1]; /* a repeated id */
        float *wte = tu_rnd(&r, (size_t)s->Vp * s->C, -1, 1), *wpe = tu_rnd(&r, (size_t)s->T * s->C, -1, 1);
        float *o1 = tu_rnd(&r, n, -1, 1), *o2 = tu_dup(o1, n), *d = tu_rnd(&r, n, -1, 1);
        REF.embed_forward(&REF, o1, inp, wte, wpe, s->B, s->T, s->C);
        FAST.embed_forward(&FAST, o2, inp, wte, wpe, s->B, s->T, s->C);
        cmp("embed_forward", s, o2, o1, n, 0, 0, &w1);
        float *g1 = tu_rnd(&r, (size_t)s->Vp * s->C, -1, 1), *g2 = tu_dup(g1, (size_t)s->Vp * s->C);
        float *p1 = tu_rnd(&r, (size_t)s->T * s->C, -1, 1), *p2 = tu_dup(p1, (size_t)s->T * s->C);
        REF.embed_backward(&REF, g1, p1, d, inp, s->B, s->T, s->C);
        FAST.embed_backward(&FAST, g2, p2, d, inp, s->B, s->T, s->C);
        cmp("embed_backward dwte", s, g2, g1, (size_t)s->Vp * s->C, 1e-2, 1e-5, &w2);
        cmp("embed_backward dwpe", s, p2, p1, (size_t)s->T * s->C, 1e-2, 1e-5, &w3);
        free(inp); free(wte); free(wpe); free(o1); free(o2); free(d);
        free(g1); free(g2); free(p1); free(p2);
    }
    report("embed_forward", w1);
    report("embed_backward dwte", w2);
    report("embed_backward dwpe", w3);
}

static void test_layernorm(void **state)
{
    (void)state;
    tu_rng r = {2};
    double we[6] = {0};
    for (size_t k = 0; k < NSHAPES; k++) {
        const shape *s = &SHAPES[k];
        int N = s->B * s->T, C = s->C;
        size_t n = (size_t)N * C;
        float *x = tu_rnd(&r, n, -2, 3), *w = tu_rnd(&r, C, 0.5, 1.5), *b = tu_rnd(&r, C, -1, 1);
        float *o1 = malloc(4 * n), *o2 = malloc(4 * n), *m1 = malloc(4 * N), *m2 = malloc(4 * N);
        float *r1 = malloc(4 * N), *r2 = malloc(4 * N);
        REF.layernorm_forward(&REF, o1, m1, r1, x, w, b, N, C);
        FAST.layernorm_forward(&FAST, o2, m2, r2, x, w, b, N, C);
        cmp("layernorm_forward out", s, o2, o1, n, 1e-2, 1e-5, &we[0]);
        cmp("layernorm_forward mean", s, m2, m1, N, 1e-2, 1e-5, &we[1]);
        cmp("layernorm_forward rstd", s, r2, r1, N, 1e-2, 1e-5, &we[1]);
        FAST.layernorm_forward(&FAST, o2, NULL, NULL, x, w, b, N, C);
        cmp("layernorm_forward out", s, o2, o1, n, 1e-2, 1e-5, &we[0]);
        float *dy = tu_rnd(&r, n, -1, 1), *dx1 = tu_rnd(&r, n, -1, 1), *dx2 = tu_dup(dx1, n);
        float *dw1 = tu_rnd(&r, C, -1, 1), *dw2 = tu_dup(dw1, C), *db1 = tu_rnd(&r, C, -1, 1), *db2 = tu_dup(db1, C);
        REF.layernorm_backward(&REF, dx1, dw1, db1, dy, x, w, m1, r1, N, C);
        FAST.layernorm_backward(&FAST, dx2, dw2, db2, dy, x, w, m1, r1, N, C);
        cmp("layernorm_backward dinp", s, dx2, dx1, n, 1e-2, 1e-4, &we[2]);
        cmp("layernorm_backward dw", s, dw2, dw1, C, 1e-2, 1e-4, &we[3]);
        cmp("layernorm_backward db", s, db2, db1, C, 1e-2, 1e-4, &we[4]);
        free(x); free(w); free(b); free(o1); free(o2); free(m1); free(m2); free(r1); free(r2);
        free(dy); free(dx1); free(dx2); free(dw1); free(dw2); free(db1); free(db2);
    }
    report("layernorm_forward", we[0] > we[1] ? we[0] : we[1]);
    report("layernorm_backward dinp", we[2]);
    report("layernorm_backward dw", we[3]);
    report("layernorm_backward db", we[4]);
}

static void test_matmul(void **state)
{
    (void)state;
    tu_rng r = {3};
    double we[5] = {0};
    for (size_t k = 0; k < NSHAPES; k++) {
        const shape *s = &SHAPES[k];
        int N = s->B * s->T, C = s->C, OC = s->OC;
        for (int withbias = 0; withbias < 2; withbias++) {
            float *x = tu_rnd(&r, (size_t)N * C, -1, 1), *w = tu_rnd(&r, (size_t)OC * C, -1, 1);
            float *bias = withbias ? tu_rnd(&r, OC, -1, 1) : NULL;
            float *o1 = tu_rnd(&r, (size_t)N * OC, -1, 1), *o2 = tu_rnd(&r, (size_t)N * OC, -1, 1);
            REF.matmul_forward(&REF, o1, x, w, bias, N, C, OC);
            FAST.matmul_forward(&FAST, o2, x, w, bias, N, C, OC);
            cmp("matmul_forward", s, o2, o1, (size_t)N * OC, 1e-2, 1e-4, &we[0]);
            float *dy = tu_rnd(&r, (size_t)N * OC, -1, 1);
            float *dx1 = tu_rnd(&r, (size_t)N * C, -1, 1), *dx2 = tu_dup(dx1, (size_t)N * C);
            float *dw1 = tu_rnd(&r, (size_t)OC * C, -1, 1), *dw2 = tu_dup(dw1, (size_t)OC * C);
            float *db1 = tu_rnd(&r, OC, -1, 1), *db2 = tu_dup(db1, OC);
            REF.matmul_backward(&REF, dx1, dw1, withbias ? db1 : NULL, dy, x, w, N, C, OC);
            FAST.matmul_backward(&FAST, dx2, dw2, withbias ? db2 : NULL, dy, x, w, N, C, OC);
            cmp("matmul_backward dinp", s, dx2, dx1, (size_t)N * C, 1e-2, 1e-4, &we[1]);
            cmp("matmul_backward dw", s, dw2, dw1, (size_t)OC * C, 1e-2, 1e-4, &we[2]);
            cmp("matmul_backward dbias", s, db2, db1, OC, 1e-2, 1e-4, &we[3]);
            free(x); free(w); free(bias); free(o1); free(o2); free(dy);
            free(dx1); free(dx2); free(dw1); free(dw2); free(db1); free(db2);
        }
    }
    report("matmul_forward", we[0]);
    report("matmul_backward dinp", we[1]);
    report("matmul_backward dw", we[2]);
    report("matmul_backward dbias", we[3]);
}

static void test_attention(void **state)
{
    (void)state;
    tu_rng r = {4};
    double we[3] = {0};
    for (size_t k = 0; k < NSHAPES; k++) {
        const shape *s = &SHAPES[k];
        int B = s->B, T = s->T, C = s->C, NH = s->NH;
        size_t nq = (size_t)B * T * 3 * C, no = (size_t)B * T * C, na = (size_t)B * NH * T * T;
        float *qkv = tu_rnd(&r, nq, -2, 2);
        float *o1 = malloc(4 * no), *o2 = malloc(4 * no);
        float *a1 = tu_rnd(&r, na, -1, 1), *a2 = tu_rnd(&r, na, -1, 1); /* must be overwritten */
        REF.attention_forward(&REF, o1, a1, qkv, B, T, C, NH);
        FAST.attention_forward(&FAST, o2, a2, qkv, B, T, C, NH);
        cmp("attention_forward out", s, o2, o1, no, 1e-2, 1e-4, &we[0]); /* a GEMM */
        cmp("attention_forward att", s, a2, a1, na, 1e-2, 1e-5, &we[1]);
        float *dy = tu_rnd(&r, no, -1, 1), *d1 = tu_rnd(&r, nq, -1, 1), *d2 = tu_dup(d1, nq);
        REF.attention_backward(&REF, d1, dy, qkv, a1, B, T, C, NH);
        FAST.attention_backward(&FAST, d2, dy, qkv, a1, B, T, C, NH);
        cmp("attention_backward", s, d2, d1, nq, 1e-2, 1e-4, &we[2]);
        free(qkv); free(o1); free(o2); free(a1); free(a2); free(dy); free(d1); free(d2);
    }
    report("attention_forward out", we[0]);
    report("attention_forward att", we[1]);
    report("attention_backward", we[2]);
}

static void test_elementwise(void **state)
{
    (void)state;
    tu_rng r = {5};
    double we[6] = {0};
    static const size_t sizes[] = {1, 7, 8, 13, 64, 1001, 4099, 100003};
    for (size_t k = 0; k < sizeof sizes / sizeof sizes[0]; k++) {
        size_t n = sizes[k];
        shape s = {0, 0, (int)n, 0, 0, 0, 0};
        float *x = tu_rnd(&r, n, -6, 6), *y = tu_rnd(&r, n, -1, 1);
        x[0] = n > 1 ? -20.0f : 0.0f; /* saturated tails */
        if (n > 2)
            x[1] = 15.0f;
        float *o1 = malloc(4 * n), *o2 = malloc(4 * n);
        REF.gelu_forward(&REF, o1, x, n);
        FAST.gelu_forward(&FAST, o2, x, n);
        cmp("gelu_forward", &s, o2, o1, n, 1e-2, 1e-5, &we[0]);
        float *d1 = tu_rnd(&r, n, -1, 1), *d2 = tu_dup(d1, n);
        REF.gelu_backward(&REF, d1, x, y, n);
        FAST.gelu_backward(&FAST, d2, x, y, n);
        cmp("gelu_backward", &s, d2, d1, n, 1e-2, 1e-5, &we[1]);
        REF.residual_forward(&REF, o1, x, y, n);
        FAST.residual_forward(&FAST, o2, x, y, n);
        cmp("residual_forward", &s, o2, o1, n, 0, 0, &we[2]);
        memcpy(o2, x, 4 * n);
        FAST.residual_forward(&FAST, o2, o2, y, n); /* aliased */
        cmp("residual_forward", &s, o2, o1, n, 0, 0, &we[2]);
        memcpy(o1, x, 4 * n);
        memcpy(o2, x, 4 * n);
        REF.accumulate(&REF, o1, y, n);
        FAST.accumulate(&FAST, o2, y, n);
        cmp("accumulate", &s, o2, o1, n, 0, 0, &we[3]);
        double s1 = REF.sum_squares(&REF, x, n), s2 = FAST.sum_squares(&FAST, x, n);
        double e = fabs(s1 - s2) / fmax(s1, 1e-30);
        if (e > we[4])
            we[4] = e;
        assert_true(e <= 1e-10);
        free(x); free(y); free(o1); free(o2); free(d1); free(d2);
    }
    report("gelu_forward", we[0]);
    report("gelu_backward", we[1]);
    report("residual_forward", we[2]);
    report("accumulate", we[3]);
    report("sum_squares", we[4]);
}

static void test_adamw(void **state)
{
    (void)state;
    tu_rng r = {6};
    double we = 0;
    static const size_t sizes[] = {1, 13, 100, 1027, 70001};
    for (size_t k = 0; k < sizeof sizes / sizeof sizes[0]; k++) {
        size_t n = sizes[k];
        shape s = {0, 0, (int)n, 0, 0, 0, 0};
        float *p1 = tu_rnd(&r, n, -1, 1), *g = tu_rnd(&r, n, -1, 1), *m1 = tu_rnd(&r, n, -.1f, .1f);
        float *v1 = tu_rnd(&r, n, 0, .01f), *p2 = tu_dup(p1, n), *m2 = tu_dup(m1, n), *v2 = tu_dup(v1, n);
        for (int t = 1; t <= 3; t++) {
            float wd = t == 2 ? 0.0f : 0.1f;
            REF.adamw(&REF, p1, g, m1, v1, n, 1e-3f, 0.9f, 0.95f, 1e-8f, wd, t, 0.5f);
            FAST.adamw(&FAST, p2, g, m2, v2, n, 1e-3f, 0.9f, 0.95f, 1e-8f, wd, t, 0.5f);
        }
        cmp("adamw p", &s, p2, p1, n, 1e-2, 1e-5, &we);
        cmp("adamw m", &s, m2, m1, n, 1e-2, 1e-5, &we);
        cmp("adamw v", &s, v2, v1, n, 1e-2, 1e-5, &we);
        free(p1); free(g); free(m1); free(v1); free(p2); free(m2); free(v2);
    }
    report("adamw", we);
}

static void test_xent(void **state)
{
    (void)state;
    tu_rng r = {7};
    double we[3] = {0};
    for (size_t k = 0; k < NSHAPES; k++) {
        const shape *s = &SHAPES[k];
        int N = s->B * s->T, V = s->V, Vp = s->Vp;
        size_t n = (size_t)N * Vp;
        float *x = tu_rnd(&r, n, -8, 8);
        int32_t *tg = malloc(4 * N);
        for (int i = 0; i < N; i++) {
            tg[i] = (int32_t)(tu_next(&r) % (uint64_t)V);
            for (int j = V; j < Vp; j++)
                x[(size_t)i * Vp + j] = 1e4f; /* padded columns must never win */
        }
        float *l1 = malloc(4 * N), *l2 = malloc(4 * N), *z1 = malloc(4 * N), *z2 = malloc(4 * N);
        REF.xent_forward(&REF, l1, z1, x, tg, N, V, Vp);
        FAST.xent_forward(&FAST, l2, z2, x, tg, N, V, Vp);
        /* a loss is lse - logit: its rounding error scales with lse (~log V), not with the
         * loss, which can be near 0 */
        cmp("xent_forward loss", s, l2, l1, N, 0.1, 1e-5, &we[0]);
        cmp("xent_forward lse", s, z2, z1, N, 1e-2, 1e-5, &we[1]);
        float *d1 = tu_rnd(&r, n, -1, 1), *d2 = tu_dup(x, n);
        REF.xent_backward(&REF, d1, x, z1, tg, 1.0f / N, N, V, Vp);
        FAST.xent_backward(&FAST, d2, d2, z1, tg, 1.0f / N, N, V, Vp); /* in place */
        cmp("xent_backward", s, d2, d1, n, 1e-2, 1e-5, &we[2]);
        for (int i = 0; i < N; i++)
            for (int j = V; j < Vp; j++)
                assert_true(d2[(size_t)i * Vp + j] == 0.0f && d1[(size_t)i * Vp + j] == 0.0f);
        free(x); free(tg); free(l1); free(l2); free(z1); free(z2); free(d1); free(d2);
    }
    report("xent_forward loss", we[0]);
    report("xent_forward lse", we[1]);
    report("xent_backward", we[2]);
}

/* Two runs of each backward with the same inputs give bit-identical gradients. */
static void test_deterministic(void **state)
{
    (void)state;
    tu_rng r = {8};
    int B = 4, T = 64, C = 96, NH = 3, N = B * T, OC = 200;
    size_t nq = (size_t)N * 3 * C, no = (size_t)N * C;
    float *qkv = tu_rnd(&r, nq, -2, 2), *dy = tu_rnd(&r, no, -1, 1), *att = tu_rnd(&r, (size_t)B * NH * T * T, 0, 0);
    float *out = tu_rnd(&r, no, 0, 0), *x = tu_rnd(&r, no, -1, 1), *w = tu_rnd(&r, (size_t)OC * C, -1, 1);
    float *dout = tu_rnd(&r, (size_t)N * OC, -1, 1), *mean = tu_rnd(&r, N, 0, 0), *rstd = tu_rnd(&r, N, 0, 0);
    int32_t *ids = malloc(sizeof(int32_t) * N);
    for (int i = 0; i < N; i++)
        ids[i] = (int32_t)(tu_next(&r) % 7); /* many repeats */
    FAST.attention_forward(&FAST, out, att, qkv, B, T, C, NH);
    FAST.layernorm_forward(&FAST, out, mean, rstd, x, w, w, N, C);
    float *g[2][6];
    for (int run = 0; run < 2; run++) {
        float **o = g[run];
        o[0] = tu_rnd(&r, nq, 0, 0), o[1] = tu_rnd(&r, no, 0, 0), o[2] = tu_rnd(&r, (size_t)OC * C, 0, 0);
        o[3] = tu_rnd(&r, OC, 0, 0), o[4] = tu_rnd(&r, (size_t)7 * C, 0, 0), o[5] = tu_rnd(&r, (size_t)T * C, 0, 0);
        FAST.attention_backward(&FAST, o[0], dy, qkv, att, B, T, C, NH);
        FAST.layernorm_backward(&FAST, o[1], o[2], o[3], dy, x, w, mean, rstd, N, C);
        FAST.matmul_backward(&FAST, o[1], o[2], o[3], dout, x, w, N, C, OC);
        FAST.embed_backward(&FAST, o[4], o[5], dy, ids, B, T, C);
    }
    size_t n[6] = {nq, no, (size_t)OC * C, OC, (size_t)7 * C, (size_t)T * C};
    for (int i = 0; i < 6; i++) {
        assert_memory_equal(g[0][i], g[1][i], sizeof(float) * n[i]);
        free(g[0][i]);
        free(g[1][i]);
    }
    free(qkv); free(dy); free(att); free(out); free(x); free(w); free(dout); free(mean);
    free(rstd); free(ids);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_backend_init),
        cmocka_unit_test(test_embed),
        cmocka_unit_test(test_layernorm),
        cmocka_unit_test(test_matmul),
        cmocka_unit_test(test_attention),
        cmocka_unit_test(test_elementwise),
        cmocka_unit_test(test_adamw),
        cmocka_unit_test(test_xent),
        cmocka_unit_test(test_deterministic),
    };
    int fails = cmocka_run_group_tests_name("kernels", tests, setup, teardown);
    const struct CMUnitTest generic[] = {
        cmocka_unit_test(test_embed),      cmocka_unit_test(test_layernorm),
        cmocka_unit_test(test_matmul),     cmocka_unit_test(test_attention),
        cmocka_unit_test(test_elementwise), cmocka_unit_test(test_adamw),
        cmocka_unit_test(test_xent),
    };
    return fails + cmocka_run_group_tests_name("kernels_generic", generic, setup_generic,
                                               teardown);
}
