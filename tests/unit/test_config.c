/* Unit tests for the training config (common/config.c). */
#include "tests/unit/testutil.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/config.h"

static int apply(llm_train_config *c, const char *yaml, llm_status *st)
{
    return llm_config_apply_yaml(c, yaml, strlen(yaml), "run.yaml", st);
}

static void test_defaults(void **state)
{
    (void)state;
    llm_train_config c;
    llm_config_defaults(&c);
    assert_string_equal(c.arch, "gpt2");
    assert_int_equal(c.n_layer, 12);
    assert_int_equal(c.batch_size, 4);
    assert_true(c.lr == 0.0006);
    assert_string_equal(c.schedule, "cosine");
    assert_int_equal(c.prefetch, 1);
    assert_string_equal(c.out_dir, "out");
    assert_int_equal(llm_config_accum_steps(&c), 1);
    /* every key has a default and help text */
    int n = 0;
    const char *d, *h;
    for (const char *k; (k = llm_config_key(n, &d, &h)); n++) {
        assert_non_null(d);
        assert_true(strlen(h) > 3);
        assert_non_null(strchr(k, '.'));
    }
    assert_true(n > 30);
    llm_status st = {0};
    assert_int_equal(llm_config_validate(&c, &st), LLM_EDATA);
    assert_non_null(strstr(st.msg, "config: 'data.train' is required"));
}

static void test_apply(void **state)
{
    (void)state;
    llm_train_config c;
    llm_config_defaults(&c);
    llm_status st = {0};
    assert_int_equal(apply(&c, "model:\n  n_layer: 2\n  n_head: 2\n  n_embd: 64\n"
                               "data:\n  train: a.bin\n  tokenizer: byte\n"
                               "train:\n  lr: 3e-4\n  batch_size: 8\n  seq_len: 64\n"
                               "  total_batch_tokens: 1024\n  schedule: wsd\n  prefetch: off\n",
                     &st),
                     LLM_EDATA); /* prefetch is a data key */
    assert_string_equal(st.msg, "run.yaml:14: unknown key 'train.prefetch'");
    llm_config_defaults(&c);
    assert_int_equal(apply(&c, "model: {n_layer: 2, n_head: 2, n_embd: 64, max_seq_len: 64}\n"
                               "data: {train: a.bin, tokenizer: byte, prefetch: off}\n"
                               "train: {lr: 3e-4, batch_size: 8, seq_len: 64, "
                               "total_batch_tokens: 1024, schedule: wsd}\n", &st), 0);
    assert_int_equal(c.n_layer, 2);
    assert_true(c.lr == 3e-4);
    assert_int_equal(c.prefetch, 0);
    assert_int_equal(llm_config_accum_steps(&c), 2);
    assert_true(llm_config_given(&c, "train.lr"));
    assert_false(llm_config_given(&c, "train.min_lr"));
    assert_int_equal(llm_config_validate(&c, &st), 0);
    /* overrides */
    assert_int_equal(llm_config_set(&c, "train.lr=0.01", &st), 0);
    assert_true(c.lr == 0.01);
    assert_int_equal(llm_config_set(&c, "output.dir=/tmp/x=y", &st), 0);
    assert_string_equal(c.out_dir, "/tmp/x=y");
    assert_int_equal(llm_config_set(&c, "train.lr", &st), LLM_EUSAGE);
    assert_string_equal(st.msg, "--set 'train.lr': want section.key=value");
    assert_int_equal(llm_config_set(&c, "train.lerning_rate=1", &st), LLM_EUSAGE);
    assert_string_equal(st.msg, "--set 'train.lerning_rate=1': unknown key 'train.lerning_rate'");
    assert_int_equal(llm_config_set(&c, "train.lr=fast", &st), LLM_EUSAGE);
    assert_string_equal(st.msg, "--set 'train.lr=fast': 'train.lr' must be a number, got 'fast'");
    /* cross-key checks */
    assert_int_equal(llm_config_set(&c, "train.total_batch_tokens=1000", &st), 0);
    assert_int_equal(llm_config_validate(&c, &st), LLM_EDATA);
    assert_non_null(strstr(st.msg, "must be a multiple of"));
}

static void test_errors(void **state)
{
    (void)state;
    static const struct { const char *yaml, *msg; } cases[] = {
        {"train:\n  lerning_rate: 1\n", "run.yaml:2: unknown key 'train.lerning_rate'"},
        {"trian: {lr: 1}\n", "run.yaml:1: unknown section 'trian' (want model, data, train or output)"},
        {"train:\n  lr: fast\n", "run.yaml:2: 'train.lr' must be a number, got 'fast'"},
        {"train:\n  lr: \"0.1\"\n", "run.yaml:2: 'train.lr' must be a number, got '0.1'"},
        {"train:\n  batch_size: 2.5\n", "run.yaml:2: 'train.batch_size' must be an integer, got '2.5'"},
        {"train:\n  batch_size: 0\n", "run.yaml:2: 'train.batch_size' must be in [1, 65536], got 0"},
        {"train:\n  lr: 20\n", "run.yaml:2: 'train.lr' must be in [0, 10], got 20"},
        {"train:\n  schedule: step\n",
         "run.yaml:2: 'train.schedule' must be one of cosine|linear|constant|wsd, got 'step'"},
        {"data:\n  prefetch: maybe\n", "run.yaml:2: 'data.prefetch' must be true or false, got 'maybe'"},
        {"train:\n  lr: [1, 2]\n", "run.yaml:2: 'train.lr' must be a single value, not a sequence"},
        {"train: 5\n", "run.yaml:1: section 'train' must be a mapping"},
        {"- 1\n- 2\n", "run.yaml:1: the config must be a mapping of sections"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        llm_train_config c;
        llm_config_defaults(&c);
        llm_status st = {0};
        assert_int_equal(apply(&c, cases[i].yaml, &st), LLM_EDATA);
        assert_string_equal(st.msg, cases[i].msg);
    }
    /* duplicate keys: refused by the parser with the line named */
    llm_train_config c;
    llm_config_defaults(&c);
    llm_status st = {0};
    assert_int_equal(apply(&c, "train:\n  lr: 1\n  lr: 2\n", &st), LLM_EDATA);
    assert_non_null(strstr(st.msg, "run.yaml:3"));
    assert_non_null(strstr(st.msg, "lr"));
}

static void test_print_roundtrip(void **state)
{
    (void)state;
    llm_train_config c, d;
    llm_config_defaults(&c);
    llm_status st = {0};
    assert_int_equal(llm_config_set(&c, "train.lr=0.0003", &st), 0);
    assert_int_equal(llm_config_set(&c, "data.train=/data/shard_*.bin", &st), 0);
    assert_int_equal(llm_config_set(&c, "data.prefetch=false", &st), 0);
    char *buf = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&buf, &len);
    assert_int_equal(llm_config_print(&c, f, &st), 0);
    fclose(f);
    assert_non_null(strstr(buf, "lr: 0.0003\n"));
    llm_config_defaults(&d);
    assert_int_equal(llm_config_apply_yaml(&d, buf, len, "printed", &st), 0);
    memset(c.given, 0, sizeof c.given);
    memset(d.given, 0, sizeof d.given);
    memset(c.line, 0, sizeof c.line);
    memset(d.line, 0, sizeof d.line);
    memset(c.source, 0, sizeof c.source);
    memset(d.source, 0, sizeof d.source);
    assert_memory_equal(&c, &d, sizeof c);
    free(buf);
}

/* llm_config_range gives the bounds llm_config_set enforces, for every numeric key */
static void test_range(void **state)
{
    (void)state;
    double lo = 0, hi = 0;
    assert_int_equal(llm_config_range("train.eval_batches", &lo, &hi), 1);
    assert_true(lo == 1 && hi == 1e9);
    assert_int_equal(llm_config_range("train.batch_size", &lo, &hi), 1);
    assert_true(lo == 1 && hi == 65536);
    assert_int_equal(llm_config_range("train.nope", &lo, &hi), 0);
    assert_int_equal(llm_config_range("data.train", &lo, &hi), 0);        /* a string */
    assert_int_equal(llm_config_range("train.schedule", &lo, &hi), 0);    /* a word */
    int n = 0, ranged = 0;
    for (const char *k; (k = llm_config_key(n, NULL, NULL)); n++) {
        if (!llm_config_range(k, &lo, &hi))
            continue;
        ranged++;
        assert_true(lo <= hi);
        char a[160];
        llm_train_config c;
        llm_status st = {0};
        llm_config_defaults(&c);
        snprintf(a, sizeof a, "%s=%.17g", k, lo);
        assert_int_equal(llm_config_set(&c, a, &st), 0);
        snprintf(a, sizeof a, "%s=%.17g", k, lo - 1);
        assert_int_not_equal(llm_config_set(&c, a, &st), 0);
        if (hi < 1e15) {   /* (larger ones as text are exponents, which integers refuse) */
            snprintf(a, sizeof a, "%s=%.17g", k, hi);
            assert_int_equal(llm_config_set(&c, a, &st), 0);
            snprintf(a, sizeof a, "%s=%.17g", k, hi * 2 + 1);
            assert_int_not_equal(llm_config_set(&c, a, &st), 0);
        }
    }
    assert_true(ranged > 20);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_defaults),
        cmocka_unit_test(test_apply),
        cmocka_unit_test(test_errors),
        cmocka_unit_test(test_print_roundtrip),
        cmocka_unit_test(test_range),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
