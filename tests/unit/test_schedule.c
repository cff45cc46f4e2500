/* Unit tests for learning-rate schedules (common/schedule.c). */
#include "tests/unit/testutil.h"

#include <math.h>

#include "common/schedule.h"

#define NEAR(a, b) assert_true(fabs((a) - (b)) < 1e-12)

static void test_warmup_cosine(void **state)
{
    (void)state;
    llm_schedule s;
    llm_status st = {0};
    assert_int_equal(llm_schedule_init(&s, "cosine", 1.0, 0.1, 10, 110, 0, &st), 0);
    NEAR(llm_schedule_lr(&s, 1), 0.1);
    NEAR(llm_schedule_lr(&s, 5), 0.5);
    NEAR(llm_schedule_lr(&s, 10), 1.0);
    NEAR(llm_schedule_lr(&s, 60), 0.55);        /* half way: (1 + 0.1) / 2 */
    NEAR(llm_schedule_lr(&s, 110), 0.1);
    NEAR(llm_schedule_lr(&s, 500), 0.1);         /* past the end: stays at min */
    for (int i = 11; i < 110; i++)               /* monotone after warmup */
        assert_true(llm_schedule_lr(&s, i + 1) <= llm_schedule_lr(&s, i));
}

static void test_linear_constant(void **state)
{
    (void)state;
    llm_schedule s;
    llm_status st = {0};
    assert_int_equal(llm_schedule_init(&s, "linear", 2.0, 0.0, 0, 100, 0, &st), 0);
    NEAR(llm_schedule_lr(&s, 50), 1.0);
    NEAR(llm_schedule_lr(&s, 100), 0.0);
    assert_int_equal(llm_schedule_init(&s, "constant", 2.0, 0.0, 4, 100, 0, &st), 0);
    NEAR(llm_schedule_lr(&s, 2), 1.0);
    NEAR(llm_schedule_lr(&s, 99), 2.0);
}

static void test_wsd(void **state)
{
    (void)state;
    llm_schedule s;
    llm_status st = {0};
    assert_int_equal(llm_schedule_init(&s, "wsd", 1.0, 0.0, 10, 100, 0.2, &st), 0);
    NEAR(llm_schedule_lr(&s, 5), 0.5);
    NEAR(llm_schedule_lr(&s, 80), 1.0);          /* stable until step 80 */
    NEAR(llm_schedule_lr(&s, 90), 0.5);
    NEAR(llm_schedule_lr(&s, 100), 0.0);
}

static void test_errors(void **state)
{
    (void)state;
    llm_schedule s;
    llm_status st = {0};
    assert_int_equal(llm_schedule_init(&s, "step", 1, 0, 0, 10, 0, &st), LLM_EUSAGE);
    assert_string_equal(st.msg, "unknown schedule 'step' (want cosine, linear, constant or wsd)");
    assert_int_equal(llm_schedule_init(&s, "cosine", 1, 2, 0, 10, 0, &st), LLM_EUSAGE);
    assert_int_equal(llm_schedule_init(&s, "cosine", 1, 0, -1, 10, 0, &st), LLM_EUSAGE);
    /* warmup > total: the run ends still warming up (lr = step / warmup) */
    assert_int_equal(llm_schedule_init(&s, "cosine", 1, 0, 20, 10, 0, &st), 0);
    NEAR(llm_schedule_lr(&s, 5), 0.25);
    NEAR(llm_schedule_lr(&s, 10), 0.5);
    /* warmup == total: the whole run is warmup, no division by zero */
    assert_int_equal(llm_schedule_init(&s, "cosine", 1, 0, 10, 10, 0, &st), 0);
    NEAR(llm_schedule_lr(&s, 10), 1.0);
    assert_true(isfinite(llm_schedule_lr(&s, 11)));
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_warmup_cosine),
        cmocka_unit_test(test_linear_constant),
        cmocka_unit_test(test_wsd),
        cmocka_unit_test(test_errors),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
