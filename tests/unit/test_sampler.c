/* Sampler: greedy, seeded reproducibility, temperature / top-k / top-p distributions. */
#include "tests/unit/testutil.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
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

/* llm_sampler_probs against exp in double on the same float argument: a few ulp; NaN and
 * the far tail give 0; the largest logit gives 1, also at a vanishing temperature. */
static void test_probs(void **state)
{
    (void)state;
    tu_rng r = {11};
    enum { V = 1003 };
    float lg[V], pr[V];
    const float temps[] = {0.05f, 0.7f, 1.0f, 2.5f, 1e-30f};
    for (size_t t = 0; t < sizeof temps / sizeof *temps; t++) {
        tu_fill(&r, lg, V, -40, 40);
        lg[3] = -INFINITY;
        lg[7] = NAN;
        lg[100] = -1e30f;
        double total = llm_sampler_probs(lg, V, temps[t], pr);
        int am = llm_argmax(lg, V);
        float mx = lg[am], inv_t = 1.0f / temps[t];
        if (!(inv_t <= 3.4e38f))
            inv_t = 3.4028234663852886e38f;
        double sum = 0, worst = 0;
        for (int i = 0; i < V; i++) {
            float x = (lg[i] - mx) * inv_t;
            double want = x > -87.3f ? exp((double)x) : 0.0;
            if (want > 1e-30)
                worst = fmax(worst, fabs(pr[i] - want) / want);
            else
                assert_true(pr[i] >= 0 && fabs(pr[i] - want) <= 1e-36);
            sum += pr[i];
        }
        assert_true(pr[am] == 1.0f);
        assert_true(pr[3] == 0 && pr[7] == 0 && pr[100] == 0);
        assert_true(fabs(total - sum) <= 1e-12 * sum);
        printf("# T=%g: probs max rel err %.3g\n", temps[t], worst);
        assert_true(worst < 1e-6);
    }
}

/* llm_logsumexp against the sum of exp in double; -inf terms count 0, a NaN gives NaN. */
static void test_logsumexp(void **state)
{
    (void)state;
    tu_rng r = {5};
    double worst = 0;
    for (int it = 0; it < 200; it++) {
        int n = 1 + (int)(tu_next(&r) % 5000);
        float *x = malloc((size_t)n * sizeof *x);
        assert_non_null(x);
        float a = (it % 4 + 1) * 8.0f;
        tu_fill(&r, x, (size_t)n, -a, a);
        if (it % 3 == 0)
            x[tu_next(&r) % (uint64_t)n] = -INFINITY;
        double mx = -INFINITY, s = 0;
        for (int i = 0; i < n; i++)
            mx = x[i] > mx ? x[i] : mx;
        for (int i = 0; i < n; i++)
            s += exp((double)x[i] - mx);
        double want = mx + log(s), got = llm_logsumexp(x, n);
        worst = fmax(worst, fabs(got - want) / fmax(1.0, fabs(want)));
        if (n > 2) {
            x[n / 2] = NAN;
            assert_true(isnan(llm_logsumexp(x, n)));
        }
        free(x);
    }
    printf("# logsumexp: max error %.3g (relative to max(1, |lse|))\n", worst);
    assert_true(worst < 1e-6);
    float one[3] = {-INFINITY, 2.5f, -INFINITY};
    assert_true(llm_logsumexp(one, 3) == 2.5);
}

/* The sampler against a plain reference on the same probabilities and draws: every token
 * sorted (probability descending, id ascending), the first top_k kept, then the shortest
 * prefix reaching top_p of their mass (of the whole distribution without top-k), the draw
 * in that order; without filters the draw in id order.  Identical ids expected. */
typedef struct { float p; int id; } ref_cand;
static int ref_cmp(const void *a, const void *b)
{
    const ref_cand *x = a, *y = b;
    if (x->p != y->p) return x->p > y->p ? -1 : 1;
    return (x->id > y->id) - (x->id < y->id);
}
static int ref_sample(const float *lg, int V, float t, int top_k, float top_p, double u)
{
    float *pr = malloc((size_t)V * sizeof *pr);
    ref_cand *c = malloc((size_t)V * sizeof *c);
    assert_non_null(pr);
    assert_non_null(c);
    double total = llm_sampler_probs(lg, V, t, pr);
    int id = -1;
    if (!(total > 0) || !isfinite(total)) {
        id = llm_argmax(lg, V);
    } else if (!(top_k > 0 && top_k < V) && top_p >= 1.0f) {
        double target = u * total, acc = 0;
        for (int i = 0; i < V && id < 0; i++)
            if (target < (acc += pr[i]))
                id = i;
        if (id < 0)
            id = llm_argmax(lg, V);
    } else {
        for (int i = 0; i < V; i++)
            c[i] = (ref_cand){pr[i], i};
        qsort(c, (size_t)V, sizeof *c, ref_cmp);
        int n = top_k > 0 && top_k < V ? top_k : V;
        double mass = 0;
        if (n < V)
            for (int i = 0; i < n; i++)
                mass += c[i].p;
        else
            mass = total;
        if (top_p < 1.0f) {
            double acc = 0, want = top_p * mass;
            int m = 0;
            while (m < n) {
                acc += c[m++].p;
                if (acc >= want)
                    break;
            }
            n = m;
            mass = acc;
        }
        double target = u * mass, acc = 0;
        for (int i = 0; i < n && id < 0; i++)
            if (target < (acc += c[i].p))
                id = c[i].id;
        if (id < 0)
            id = c[n - 1].id;
    }
    free(c);
    free(pr);
    return id;
}

static void test_matches_reference(void **state)
{
    (void)state;
    tu_rng r = {2024};
    llm_sampler_scratch sc = {0};
    const float temps[] = {0.3f, 1.0f, 1.7f};
    const float spreads[] = {0.05f, 3.0f, 30.0f};
    const float ps[] = {1.0f, 0.5f, 0.9f, 0.99f, 1e-6f};
    int cases = 0, filtered = 0;
    for (int it = 0; it < 240; it++) {
        int V = 1 + (int)(tu_next(&r) % 3000);
        if (it % 7 == 0)
            V = 600 + (int)(tu_next(&r) % 40000);   /* past the radix sort's threshold */
        float *lg = malloc((size_t)V * sizeof *lg);
        assert_non_null(lg);
        float a = spreads[tu_next(&r) % 3];
        tu_fill(&r, lg, (size_t)V, -a, a);
        if (it % 3 == 0)   /* ties: a few levels only */
            for (int i = 0; i < V; i++)
                lg[i] = roundf(lg[i] * 2 / a) * a / 2;
        if (it % 5 == 0 && V > 4)
            lg[tu_next(&r) % (uint64_t)V] = -INFINITY;
        int ks[] = {0, 1, 5, V - 1, V, V + 3};
        float t = temps[tu_next(&r) % 3];
        int k = ks[tu_next(&r) % 6];
        float p = ps[tu_next(&r) % 5];
        uint64_t seed = tu_next(&r);
        llm_sampler s = mk(t, k, p, seed), su = mk(t, k, p, seed);
        for (int d = 0; d < 6; d++) {
            int got = llm_sampler_sample(&s, lg, V, &sc);
            int want = ref_sample(lg, V, t, k, p, llm_sampler_uniform(&su));
            if (got != want)
                printf("# V=%d T=%g k=%d p=%g draw %d: got %d want %d\n", V, t, k, p, d, got, want);
            assert_int_equal(got, want);
            cases++;
        }
        filtered += (k > 0 && k < V) || p < 1.0f;
        free(lg);
    }
    printf("# %d draws equal to the reference (%d of %d settings filtered)\n", cases, filtered, 240);
    llm_sampler_scratch_free(&sc);
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
        cmocka_unit_test(test_probs),
        cmocka_unit_test(test_matches_reference),
        cmocka_unit_test(test_logsumexp),
        cmocka_unit_test(test_bad_params),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
