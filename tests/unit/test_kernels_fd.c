/* Finite-difference checks of the reference ("cpu-ref") backward kernels: for a scalar
 * loss L = sum(out * r) with random r, each analytic gradient must match the central
 * difference (L(x+h) - L(x-h)) / 2h computed in double on tiny shapes. */
#include "tests/unit/testutil.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/backend.h"

static llm_backend REF;

enum { LN, MM, ATT, GELU, XENT, EMB };

typedef struct {
    int op, B, T, C, NH, OC, N, V, Vp;
    float *x, *w, *b, *out, *r, *aux, *aux2;
    int32_t *ids;
} fd_ctx;

static int setup(void **state)
{
    (void)state;
    char err[256];
    return llm_backend_init(&REF, "cpu-ref", 1, err, sizeof err) == 0 ? 0 : -1;
}

static int teardown(void **state)
{
    (void)state;
    llm_backend_free(&REF);
    return 0;
}

/* Forward pass of the op under test; returns sum(out * r) in double. */
static double loss(fd_ctx *c)
{
    size_t n = 0;
    switch (c->op) {
    case LN:
        REF.layernorm_forward(&REF, c->out, c->aux, c->aux2, c->x, c->w, c->b, c->N, c->C);
        n = (size_t)c->N * c->C;
        break;
    case MM:
        REF.matmul_forward(&REF, c->out, c->x, c->w, c->b, c->N, c->C, c->OC);
        n = (size_t)c->N * c->OC;
        break;
    case ATT:
        REF.attention_forward(&REF, c->out, c->aux, c->x, c->B, c->T, c->C, c->NH);
        n = (size_t)c->B * c->T * c->C;
        break;
    case GELU:
        REF.gelu_forward(&REF, c->out, c->x, (size_t)c->N);
        n = (size_t)c->N;
        break;
    case XENT: {
        REF.xent_forward(&REF, c->out, c->aux, c->x, c->ids, c->N, c->V, c->Vp);
        double s = 0;
        for (int i = 0; i < c->N; i++)
            s += c->out[i];
        return s / c->N; /* mean loss: dloss = 1/N */
    }
    case EMB:
        REF.embed_forward(&REF, c->out, c->ids, c->w, c->b, c->B, c->T, c->C);
        n = (size_t)c->B * c->T * c->C;
        break;
    }
    double s = 0;
    for (size_t i = 0; i < n; i++)
        s += (double)c->out[i] * c->r[i];
    return s;
}

/* Compare grad(n) with central differences of loss() in x(n). */
static void fd_check(const char *what, fd_ctx *c, float *x, const float *grad, size_t n)
{
    double gmax = 0, worst = 0;
    for (size_t i = 0; i < n; i++)
        gmax = fmax(gmax, fabs(grad[i]));
    for (size_t i = 0; i < n; i++) {
        float x0 = x[i];
        /* h large enough that fp32 rounding of the forward stays small against it */
        float h = 1e-2f * fmaxf(1.0f, fabsf(x0));
        x[i] = x0 + h;
        double lp = loss(c);
        x[i] = x0 - h;
        double lm = loss(c);
        x[i] = x0;
        double fd = (lp - lm) / ((double)(x0 + h) - (double)(x0 - h));
        double e = fabs(fd - grad[i]) / fmax(fabs(grad[i]), 1e-2 * gmax + 1e-6);
        if (e > worst)
            worst = e;
        if (!(e <= 2e-2))
            print_message("# %s[%zu]: analytic %g, finite difference %g\n", what, i, grad[i], fd);
        assert_true(e <= 2e-2);
    }
    print_message("# fd %-22s max rel err %.3g\n", what, worst);
}

static void test_fd_layernorm(void **state)
{
    (void)state;
    tu_rng r = {11};
    fd_ctx c = {.op = LN, .N = 3, .C = 7};
    size_t n = (size_t)c.N * c.C;
    c.x = tu_rnd(&r, n, -2, 2), c.w = tu_rnd(&r, c.C, 0.5, 1.5), c.b = tu_rnd(&r, c.C, -1, 1);
    c.out = tu_rnd(&r, n, 0, 0), c.r = tu_rnd(&r, n, -1, 1), c.aux = tu_rnd(&r, c.N, 0, 0);
    c.aux2 = tu_rnd(&r, c.N, 0, 0);
    float *dx = tu_rnd(&r, n, 0, 0), *dw = tu_rnd(&r, c.C, 0, 0), *db = tu_rnd(&r, c.C, 0, 0);
    loss(&c);
    REF.layernorm_backward(&REF, dx, dw, db, c.r, c.x, c.w, c.aux, c.aux2, c.N, c.C);
    fd_check("layernorm dinp", &c, c.x, dx, n);
    fd_check("layernorm dw", &c, c.w, dw, c.C);
    fd_check("layernorm db", &c, c.b, db, c.C);
    free(c.x); free(c.w); free(c.b); free(c.out); free(c.r); free(c.aux); free(c.aux2);
    free(dx); free(dw); free(db);
}

static void test_fd_matmul(void **state)
{
    (void)state;
    tu_rng r = {12};
    fd_ctx c = {.op = MM, .N = 3, .C = 5, .OC = 4};
    c.x = tu_rnd(&r, (size_t)c.N * c.C, -1, 1), c.w = tu_rnd(&r, (size_t)c.OC * c.C, -1, 1);
    c.b = tu_rnd(&r, c.OC, -1, 1), c.out = tu_rnd(&r, (size_t)c.N * c.OC, 0, 0);
    c.r = tu_rnd(&r, (size_t)c.N * c.OC, -1, 1);
    float *dx = tu_rnd(&r, (size_t)c.N * c.C, 0, 0), *dw = tu_rnd(&r, (size_t)c.OC * c.C, 0, 0);
    float *db = tu_rnd(&r, c.OC, 0, 0);
    REF.matmul_backward(&REF, dx, dw, db, c.r, c.x, c.w, c.N, c.C, c.OC);
    fd_check("matmul dinp", &c, c.x, dx, (size_t)c.N * c.C);
    fd_check("matmul dw", &c, c.w, dw, (size_t)c.OC * c.C);
    fd_check("matmul dbias", &c, c.b, db, c.OC);
    free(c.x); free(c.w); free(c.b); free(c.out); free(c.r); free(dx); free(dw); free(db);
}

static void test_fd_attention(void **state)
{
    (void)state;
    tu_rng r = {13};
    fd_ctx c = {.op = ATT, .B = 2, .T = 4, .C = 6, .NH = 2};
    size_t nq = (size_t)c.B * c.T * 3 * c.C, no = (size_t)c.B * c.T * c.C;
    c.x = tu_rnd(&r, nq, -1, 1), c.out = tu_rnd(&r, no, 0, 0), c.r = tu_rnd(&r, no, -1, 1);
    c.aux = tu_rnd(&r, (size_t)c.B * c.NH * c.T * c.T, 0, 0);
    float *dq = tu_rnd(&r, nq, 0, 0);
    loss(&c);
    REF.attention_backward(&REF, dq, c.r, c.x, c.aux, c.B, c.T, c.C, c.NH);
    fd_check("attention dqkv", &c, c.x, dq, nq);
    free(c.x); free(c.out); free(c.r); free(c.aux); free(dq);
}

static void test_fd_gelu(void **state)
{
    (void)state;
    tu_rng r = {14};
    fd_ctx c = {.op = GELU, .N = 40};
    c.x = tu_rnd(&r, c.N, -4, 4), c.out = tu_rnd(&r, c.N, 0, 0), c.r = tu_rnd(&r, c.N, -1, 1);
    float *dx = tu_rnd(&r, c.N, 0, 0);
    REF.gelu_backward(&REF, dx, c.x, c.r, c.N);
    fd_check("gelu dinp", &c, c.x, dx, c.N);
    free(c.x); free(c.out); free(c.r); free(dx);
}

static void test_fd_xent(void **state)
{
    (void)state;
    tu_rng r = {15};
    fd_ctx c = {.op = XENT, .N = 3, .V = 9, .Vp = 12};
    size_t n = (size_t)c.N * c.Vp;
    c.x = tu_rnd(&r, n, -3, 3), c.out = tu_rnd(&r, c.N, 0, 0), c.aux = tu_rnd(&r, c.N, 0, 0);
    c.ids = malloc(sizeof(int32_t) * c.N);
    for (int i = 0; i < c.N; i++)
        c.ids[i] = (int32_t)(tu_next(&r) % (uint64_t)c.V);
    float *dl = tu_rnd(&r, n, 0, 0);
    loss(&c);
    REF.xent_backward(&REF, dl, c.x, c.aux, c.ids, 1.0f / c.N, c.N, c.V, c.Vp);
    fd_check("xent dlogits", &c, c.x, dl, n);
    free(c.x); free(c.out); free(c.aux); free(c.ids); free(dl);
}

static void test_fd_embed(void **state)
{
    (void)state;
    tu_rng r = {16};
    fd_ctx c = {.op = EMB, .B = 2, .T = 3, .C = 4, .V = 5};
    size_t no = (size_t)c.B * c.T * c.C;
    c.w = tu_rnd(&r, (size_t)c.V * c.C, -1, 1), c.b = tu_rnd(&r, (size_t)c.T * c.C, -1, 1);
    c.out = tu_rnd(&r, no, 0, 0), c.r = tu_rnd(&r, no, -1, 1);
    c.ids = malloc(sizeof(int32_t) * c.B * c.T);
    for (int i = 0; i < c.B * c.T; i++)
        c.ids[i] = (int32_t)(i % 3); /* repeats */
    float *dwte = tu_rnd(&r, (size_t)c.V * c.C, 0, 0), *dwpe = tu_rnd(&r, (size_t)c.T * c.C, 0, 0);
    REF.embed_backward(&REF, dwte, dwpe, c.r, c.ids, c.B, c.T, c.C);
    fd_check("embed dwte", &c, c.w, dwte, (size_t)c.V * c.C);
    fd_check("embed dwpe", &c, c.b, dwpe, (size_t)c.T * c.C);
    free(c.w); free(c.b); free(c.out); free(c.r); free(c.ids); free(dwte); free(dwpe);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_fd_layernorm), cmocka_unit_test(test_fd_matmul),
        cmocka_unit_test(test_fd_attention), cmocka_unit_test(test_fd_gelu),
        cmocka_unit_test(test_fd_xent),      cmocka_unit_test(test_fd_embed),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
