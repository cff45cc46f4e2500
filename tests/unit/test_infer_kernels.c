/* Fast CPU inference kernels against the reference ones (random inputs, odd shapes), and
 * the batch-independence that batched == one-at-a-time decoding relies on. */
#include "tests/unit/testutil.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/backend.h"

static void backends(llm_backend *fast, llm_backend *ref)
{
    char err[128];
    assert_int_equal(llm_backend_init(fast, "cpu", 2, err, sizeof err), 0);
    assert_int_equal(llm_backend_init(ref, "cpu-ref", 1, err, sizeof err), 0);
    llm_backend_cpu_infer_init(fast, 0);
    llm_backend_cpu_infer_init(ref, 1);
}

static void test_matmul_rows(void **state)
{
    (void)state;
    llm_backend fast, ref;
    backends(&fast, &ref);
    tu_rng r = {3};
    int shapes[][3] = {{1, 64, 192}, {2, 70, 37}, {3, 768, 9}, {5, 13, 4},
                       {8, 256, 1031}, {31, 64, 130}, {33, 96, 77}, {64, 128, 256}};
    for (size_t s = 0; s < sizeof shapes / sizeof shapes[0]; s++) {
        int N = shapes[s][0], C = shapes[s][1], OC = shapes[s][2];
        float *x = malloc((size_t)N * C * sizeof(float)), *w = malloc((size_t)OC * C * sizeof(float));
        float *b = malloc((size_t)OC * sizeof(float));
        float *o1 = malloc((size_t)N * OC * sizeof(float)), *o2 = malloc((size_t)N * OC * sizeof(float));
        tu_fill(&r, x, (size_t)N * C, -1, 1);
        tu_fill(&r, w, (size_t)OC * C, -1, 1);
        tu_fill(&r, b, (size_t)OC, -1, 1);
        for (int withb = 0; withb < 2; withb++) {
            fast.matmul_rows(&fast, o1, x, w, 0, withb ? b : NULL, N, C, OC);
            ref.matmul_rows(&ref, o2, x, w, 0, withb ? b : NULL, N, C, OC);
            double e = tu_max_rel_err(o1, o2, (size_t)N * OC, 1.0, NULL);
            if (e > 1e-5)
                fprintf(stderr, "N=%d C=%d OC=%d bias=%d: err %g\n", N, C, OC, withb, e);
            assert_true(e < 1e-5);
        }
        free(x); free(w); free(b); free(o1); free(o2);
    }
    llm_backend_free(&fast);
    llm_backend_free(&ref);
}

/* Row i's result must be bit-identical whether it is computed alone or among others, up
 * to the backend's rows_invariant (63: at 64 rows the cpu backend takes sgemm).  N 7, 8
 * and 63 with OC 523 (not a multiple of 4) reach every tile: 4x3, 4x2, 4x1 and the last
 * 3 weight rows by 1x2 and 1x1. */
static void test_matmul_rows_batch_independent(void **state)
{
    (void)state;
    llm_backend fast, ref;
    backends(&fast, &ref);
    assert_int_equal(fast.rows_invariant, 63);
    assert_int_equal(ref.rows_invariant, 0);
    tu_rng r = {5};
    int Ns[] = {7, 8, 63}, C = 200, OC = 523;
    for (int t = 0; t < 3; t++) {
        int N = Ns[t];
        float *x = malloc((size_t)N * C * sizeof(float)), *w = malloc((size_t)OC * C * sizeof(float));
        float *all = malloc((size_t)N * OC * sizeof(float)), *one = malloc((size_t)OC * sizeof(float));
        float *b = malloc((size_t)OC * sizeof(float));
        tu_fill(&r, x, (size_t)N * C, -1, 1);
        tu_fill(&r, w, (size_t)OC * C, -1, 1);
        tu_fill(&r, b, (size_t)OC, -1, 1);
        fast.matmul_rows(&fast, all, x, w, 0, t == 1 ? b : NULL, N, C, OC);
        for (int i = 0; i < N; i++) {
            fast.matmul_rows(&fast, one, x + (size_t)i * C, w, 0, t == 1 ? b : NULL, 1, C, OC);
            assert_memory_equal(one, all + (size_t)i * OC, (size_t)OC * sizeof(float));
        }
        free(x); free(w); free(all); free(one); free(b);
    }
    llm_backend_free(&fast);
    llm_backend_free(&ref);
}

static void test_attention_rows(void **state)
{
    (void)state;
    llm_backend fast, ref;
    backends(&fast, &ref);
    tu_rng r = {11};
    int S = 3, T = 40, C = 96, NH = 3, N = 6;
    size_t kvn = (size_t)S * T * C;
    float *kc = malloc(kvn * sizeof(float)), *vc = malloc(kvn * sizeof(float));
    float *qkv = malloc((size_t)N * 3 * C * sizeof(float));
    float *o1 = malloc((size_t)N * C * sizeof(float)), *o2 = malloc((size_t)N * C * sizeof(float));
    tu_fill(&r, kc, kvn, -2, 2);
    tu_fill(&r, vc, kvn, -2, 2);
    tu_fill(&r, qkv, (size_t)N * 3 * C, -2, 2);
    int32_t slot[6] = {0, 2, 1, 0, 2, 1}, pos[6] = {0, 39, 7, 20, 3, 38};
    /* kv_store: k/v of each row land at its (slot, pos) */
    fast.kv_store(&fast, kc, vc, qkv, slot, pos, N, C, T);
    for (int i = 0; i < N; i++) {
        assert_memory_equal(kc + ((size_t)slot[i] * T + pos[i]) * C, qkv + (size_t)i * 3 * C + C,
                            (size_t)C * sizeof(float));
        assert_memory_equal(vc + ((size_t)slot[i] * T + pos[i]) * C,
                            qkv + (size_t)i * 3 * C + 2 * C, (size_t)C * sizeof(float));
    }
    fast.attention_rows(&fast, o1, qkv, kc, vc, slot, pos, N, C, NH, T);
    ref.attention_rows(&ref, o2, qkv, kc, vc, slot, pos, N, C, NH, T);
    assert_true(tu_max_rel_err(o1, o2, (size_t)N * C, 1e-2, NULL) < 1e-5);
    /* position 0 attends only to itself: the output is v */
    for (int d = 0; d < C; d++)
        assert_true(fabsf(o2[d] - vc[d]) < 1e-6f);
    free(kc); free(vc); free(qkv); free(o1); free(o2);
    llm_backend_free(&fast);
    llm_backend_free(&ref);
}

static void test_embed_rows(void **state)
{
    (void)state;
    llm_backend fast, ref;
    backends(&fast, &ref);
    float wte[4 * 3], wpe[5 * 3], out[2 * 3];
    for (int i = 0; i < 12; i++) wte[i] = (float)i;
    for (int i = 0; i < 15; i++) wpe[i] = 100.0f * i;
    int32_t ids[2] = {3, 1}, pos[2] = {4, 0};
    fast.embed_rows(&fast, out, ids, pos, wte, 0, wpe, 2, 3);
    float want[6] = {9 + 1200, 10 + 1300, 11 + 1400, 3, 4 + 100, 5 + 200};
    assert_memory_equal(out, want, sizeof want);
    assert_true(fast.infer_dtype_ok(&fast, 0));
    assert_true(fast.infer_dtype_ok(&fast, 7));    /* q8_0: kernels/cpu/quant_*.c */
    assert_false(fast.infer_dtype_ok(&fast, 3));   /* i32 is no weight dtype */
    llm_backend_free(&fast);
    llm_backend_free(&ref);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_matmul_rows),
        cmocka_unit_test(test_matmul_rows_batch_independent),
        cmocka_unit_test(test_attention_rows),
        cmocka_unit_test(test_embed_rows),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
