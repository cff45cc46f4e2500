/* Sampler: greedy, seeded reproducibility, temperature / top-k / top-p distributions. */
#include "tests/unit/testutil.h"

#include <math.h>
#include <string.h>

#include "common/sampler.h"

static llm_sampler mk(float t, int k, float p, uint64_t seed)
{
    llm_sampler s;
    llm_sampler_params sp = {t, k, p, seed};
    llm_status st = {0};
    assert_int_equal(llm_sampler_init(&s, &sp, &st), 0);
    return s;
}

static void test_greedy(void **state)
{
    (void)state;
    llm_sampler_scratch sc = {0};
    float lg[5] = {0.1f, 3.0f, -1.0f, 3.0f, 2.9f};
    llm_sampler s = mk(0.0f, 0, 1.0f, 1);
    for (int i = 0; i < 10; i++)
        assert_int_equal(llm_sampler_sample(&s, lg, 5, &sc), 1);   /* lowest id on ties */
    s = mk(1.0f, 1, 1.0f, 1);                                      /* top-k 1 == argmax */
    for (int i = 0; i < 10; i++)
        assert_int_equal(llm_sampler_sample(&s, lg, 5, &sc), 1);
    s = mk(1.0f, 0, 1e-6f, 1);                                     /* tiny top-p == argmax */
    for (int i = 0; i < 10; i++)
        assert_int_equal(llm_sampler_sample(&s, lg, 5, &sc), 1);
    llm_sampler_scratch_free(&sc);
}

static void test_seeded(void **state)
{
    (void)state;
    llm_sampler_scratch sc = {0};
    tu_rng r = {1};
    float lg[1000];
    tu_fill(&r, lg, 1000, -3, 3);
    int a[200], b[200], c[200];
    llm_sampler s1 = mk(0.9f, 50, 0.95f, 42), s2 = mk(0.9f, 50, 0.95f, 42), s3 = mk(0.9f, 50, 0.95f, 43);
    for (int i = 0; i < 200; i++) {
        a[i] = llm_sampler_sample(&s1, lg, 1000, &sc);
        b[i] = llm_sampler_sample(&s2, lg, 1000, &sc);
        c[i] = llm_sampler_sample(&s3, lg, 1000, &sc);
    }
    assert_memory_equal(a, b, sizeof a);
    assert_true(memcmp(a, c, sizeof a) != 0);
    llm_sampler_scratch_free(&sc);
}

/* Frequencies over many draws against the expected distribution. */
static void check_freq(float t, int k, float p, const double *want)
{
    llm_sampler_scratch sc = {0};
    float lg[6] = {2.0f, 1.0f, 0.5f, 0.0f, -1.0f, 1.5f};
    llm_sampler s = mk(t, k, p, 7);
    int cnt[6] = {0}, n = 40000;
    for (int i = 0; i < n; i++) {
        int id = llm_sampler_sample(&s, lg, 6, &sc);
        assert_true(id >= 0 && id < 6);
        cnt[id]++;
    }
    for (int i = 0; i < 6; i++) {
        if (want[i] == 0)
            assert_int_equal(cnt[i], 0);
        else
            assert_true(fabs((double)cnt[i] / n - want[i]) < 0.012);
    }
    llm_sampler_scratch_free(&sc);
}

static void softmax(const float *lg, const int *keep, int n, float t, double *out)
{
    double z = 0;
    for (int i = 0; i < 6; i++) {
        out[i] = 0;
        for (int j = 0; j < n; j++)
            if (keep[j] == i)
                out[i] = exp(lg[i] / t);
        z += out[i];
    }
    for (int i = 0; i < 6; i++)
        out[i] /= z;
}

static void test_distributions(void **state)
{
    (void)state;
    float lg[6] = {2.0f, 1.0f, 0.5f, 0.0f, -1.0f, 1.5f};
    int all[6] = {0, 1, 2, 3, 4, 5}, top2[2] = {0, 5}, top3[3] = {0, 5, 1};
    double w[6];
    softmax(lg, all, 6, 1.0f, w);
    check_freq(1.0f, 0, 1.0f, w);
    softmax(lg, all, 6, 0.5f, w);
    check_freq(0.5f, 0, 1.0f, w);
    softmax(lg, top2, 2, 1.0f, w);
    check_freq(1.0f, 2, 1.0f, w);
    /* top-p at T=1: probs sorted 0.420 (id 0), 0.255 (id 5), 0.154 (id 1), ...: 0.6 keeps
     * {0, 5} (0.674 after two), 0.7 keeps {0, 5, 1} */
    softmax(lg, top2, 2, 1.0f, w);
    check_freq(1.0f, 0, 0.6f, w);
    softmax(lg, top3, 3, 1.0f, w);
    check_freq(1.0f, 0, 0.7f, w);
    check_freq(1.0f, 3, 0.99f, w);   /* top-k 3 then nucleus 0.99 of those: all three */
}

static void test_bad_params(void **state)
{
    (void)state;
    llm_sampler s;
    llm_status st = {0};
    llm_sampler_params bad[] = {{-1, 0, 1, 0}, {NAN, 0, 1, 0}, {1, -2, 1, 0}, {1, 0, 0, 0},
                                {1, 0, 1.5f, 0}};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++)
        assert_int_equal(llm_sampler_init(&s, &bad[i], &st), LLM_EUSAGE);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_greedy),
        cmocka_unit_test(test_seeded),
        cmocka_unit_test(test_distributions),
        cmocka_unit_test(test_bad_params),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
