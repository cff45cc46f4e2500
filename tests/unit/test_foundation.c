/* Unit tests for status, cli and json. */
#include "tests/unit/testutil.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/cli.h"
#include "common/env.h"
#include "common/json.h"
#include "common/status.h"

static void test_status_codes(void **state)
{
    (void)state;
    llm_status st = {0};
    assert_int_equal(llm_err(&st, LLM_EDATA, "bad '%s'", "x"), LLM_EDATA);
    assert_string_equal(st.msg, "bad 'x'");
    llm_err_prefix(&st, "%s", "file.llmk");
    assert_string_equal(st.msg, "file.llmk: bad 'x'");
    assert_int_equal(llm_exit_code(LLM_OK), 0);
    assert_int_equal(llm_exit_code(LLM_EUSAGE), 64);
    assert_int_equal(llm_exit_code(LLM_EDATA), 65);
    assert_int_equal(llm_exit_code(LLM_ENOINPUT), 66);
    assert_int_equal(llm_exit_code(LLM_ESOFTWARE), 70);
    assert_int_equal(llm_exit_code(LLM_EIO), 74);
}

static char *json_of(void (*fn)(llm_json *))
{
    char *buf = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&buf, &len);
    llm_json j;
    llm_json_init(&j, f, 0);
    fn(&j);
    fclose(f);
    return buf;
}

static void doc1(llm_json *j)
{
    llm_json_obj_begin(j);
    llm_json_kstr(j, "a", "q\"b\\\n\x01\xff\xc3\xa9");
    llm_json_key(j, "arr");
    llm_json_arr_begin(j);
    llm_json_int(j, -3);
    llm_json_num(j, 0.1);
    llm_json_num(j, 1.0 / 0.0);
    llm_json_arr_end(j);
    llm_json_key(j, "e");
    llm_json_obj_begin(j);
    llm_json_obj_end(j);
    llm_json_kbool(j, "t", 1);
    llm_json_obj_end(j);
}

static void test_json_writer(void **state)
{
    (void)state;
    char *s = json_of(doc1);
    assert_string_equal(s, "{\"a\":\"q\\\"b\\\\\\n\\u0001\\ufffd\xc3\xa9\",\"arr\":[-3,0.1,null],\"e\":{},\"t\":true}");
    free(s);
}

static void test_cli_parse(void **state)
{
    (void)state;
    int flag = 0, n = 5, verbose = 0;
    double x = 0;
    const char *out = NULL;
    llm_strlist many = {0};
    llm_opt opts[] = {
        {"flag", 'f', LLM_OPT_FLAG, &flag, NULL, "a flag"},
        {"num", 'n', LLM_OPT_INT, &n, "N", "a number"},
        {"num", 'k', LLM_OPT_INT, &n, "N", NULL},   /* hidden alias */
        {"x", 0, LLM_OPT_DOUBLE, &x, "X", "a double"},
        {"output", 'o', LLM_OPT_STR, &out, "FILE", "output"},
        {"set", 0, LLM_OPT_STRS, &many, "K=V", "repeatable"},
        {"verbose", 'v', LLM_OPT_COUNT, &verbose, NULL, "more"},
        {0},
    };
    llm_cli cli = {"prog", "[options] FILE", "test", opts, 1, 2, NULL};
    char *argv1[] = {"prog", "-f", "--num=7", "in", "-oout", "--set", "a=1", "--set", "b=2",
                     "-v", "-v", "--x", "2.5", "-", NULL};
    llm_strlist pos = {0};
    assert_int_equal(llm_cli_parse(&cli, 14, argv1, &pos), LLM_CLI_RUN);
    assert_int_equal(flag, 1);
    assert_int_equal(n, 7);
    assert_true(x == 2.5);
    assert_string_equal(out, "out");
    assert_int_equal(many.n, 2);
    assert_string_equal(many.v[1], "b=2");
    assert_int_equal(verbose, 2);
    assert_int_equal(pos.n, 2);
    assert_string_equal(pos.v[1], "-");
    llm_strlist_free(&pos);
    llm_strlist_free(&many);

    /* a hidden alias: accepted as the short name is (-k 9, -k11), not shown by --help */
    char *argv2[] = {"prog", "-k", "9", "a", NULL}, *argv3[] = {"prog", "-k11", "a", NULL};
    assert_int_equal(llm_cli_parse(&cli, 4, argv2, NULL), LLM_CLI_RUN);
    assert_int_equal(n, 9);
    assert_int_equal(llm_cli_parse(&cli, 3, argv3, NULL), LLM_CLI_RUN);
    assert_int_equal(n, 11);
    char help[2048] = {0};
    FILE *hf = fmemopen(help, sizeof help - 1, "w");
    assert_non_null(hf);
    llm_cli_help(&cli, hf);
    fclose(hf);
    assert_non_null(strstr(help, "-n, --num"));
    assert_null(strstr(help, "-k"));
    /* listed once */
    assert_null(strstr(strstr(help, "--num") + 1, "--num"));
    /* no environment table: no such section */
    assert_null(strstr(help, "environment"));
    /* with one: after the options, a line per variable, a long name on a line of its own */
    const llm_env env[] = {{"PROG_THREADS", "threads to use"},
                           {"PROG_A_VERY_LONG_VARIABLE_NAME", "long"}, {0}};
    cli.env = env;
    memset(help, 0, sizeof help);
    hf = fmemopen(help, sizeof help - 1, "w");
    assert_non_null(hf);
    llm_cli_help(&cli, hf);
    fclose(hf);
    const char *sec = strstr(help, "\nenvironment (details in the man page):\n");
    assert_non_null(sec);
    assert_true(sec > strstr(help, "--version"));
    assert_non_null(strstr(sec, "\n  PROG_THREADS                threads to use\n"));
    assert_non_null(strstr(sec, "\n  PROG_A_VERY_LONG_VARIABLE_NAME\n                              long\n"));
    cli.env = NULL;

    /* errors: unknown, malformed number, missing value, too many/few positionals */
    FILE *saved = stderr;
    stderr = fopen("/dev/null", "w");
    char *bad1[] = {"prog", "--nope", "a", NULL};
    char *bad2[] = {"prog", "-n", "7x", "a", NULL};
    char *bad3[] = {"prog", "a", "--num", NULL};
    char *bad4[] = {"prog", "a", "b", "c", NULL};
    char *bad5[] = {"prog", NULL};
    char *bad6[] = {"prog", "--flag=1", "a", NULL};
    assert_int_equal(llm_cli_parse(&cli, 3, bad1, NULL), LLM_CLI_ERROR);
    assert_int_equal(llm_cli_parse(&cli, 4, bad2, NULL), LLM_CLI_ERROR);
    assert_int_equal(llm_cli_parse(&cli, 3, bad3, NULL), LLM_CLI_ERROR);
    assert_int_equal(llm_cli_parse(&cli, 4, bad4, NULL), LLM_CLI_ERROR);
    assert_int_equal(llm_cli_parse(&cli, 1, bad5, NULL), LLM_CLI_ERROR);
    assert_int_equal(llm_cli_parse(&cli, 3, bad6, NULL), LLM_CLI_ERROR);
    fclose(stderr);
    stderr = saved;
}

/* llm_cli_parse_seen: a typed value that equals the "not given" default (--seq 0) is told
 * from no option, a short name and a hidden alias count as the entry, and each parse
 * starts afresh */
static void test_cli_seen(void **state)
{
    (void)state;
    int seq = 0, flag = 0;
    double peak = 0;
    llm_opt opts[] = {
        {"seq", 's', LLM_OPT_INT, &seq, "T", "length (default: the model's)"},
        {"seq", 't', LLM_OPT_INT, &seq, "T", NULL},   /* hidden alias */
        {"peak", 0, LLM_OPT_DOUBLE, &peak, "X", "peak (default: measured)"},
        {"flag", 'f', LLM_OPT_FLAG, &flag, NULL, "a flag"},
        {0},
    };
    llm_cli cli = {"prog", "[options]", "test", opts, 0, 1, NULL};
    llm_cli_seen seen;
    char *none[] = {"prog", "a", NULL};
    assert_int_equal(llm_cli_parse_seen(&cli, 2, none, NULL, &seen), LLM_CLI_RUN);
    assert_int_equal(llm_cli_given(&cli, &seen, "seq"), 0);
    assert_int_equal(llm_cli_given(&cli, &seen, "peak"), 0);
    assert_int_equal(llm_cli_given(&cli, &seen, "flag"), 0);
    char *zero[] = {"prog", "--seq", "0", "--peak=0", NULL};
    assert_int_equal(llm_cli_parse_seen(&cli, 4, zero, NULL, &seen), LLM_CLI_RUN);
    assert_int_equal(seq, 0);
    assert_true(peak == 0);
    assert_int_equal(llm_cli_given(&cli, &seen, "seq"), 1);
    assert_int_equal(llm_cli_given(&cli, &seen, "peak"), 1);
    assert_int_equal(llm_cli_given(&cli, &seen, "flag"), 0);
    char *alias[] = {"prog", "-t0", "-f", NULL};
    assert_int_equal(llm_cli_parse_seen(&cli, 3, alias, NULL, &seen), LLM_CLI_RUN);
    assert_int_equal(llm_cli_given(&cli, &seen, "seq"), 1);
    assert_int_equal(llm_cli_given(&cli, &seen, "peak"), 0);   /* cleared: a new parse */
    assert_int_equal(llm_cli_given(&cli, &seen, "flag"), 1);
    char *shortn[] = {"prog", "-s", "0", NULL};
    assert_int_equal(llm_cli_parse_seen(&cli, 3, shortn, NULL, &seen), LLM_CLI_RUN);
    assert_int_equal(llm_cli_given(&cli, &seen, "seq"), 1);
    assert_int_equal(llm_cli_given(&cli, &seen, "flag"), 0);
    /* after "--", an option-like word is a positional argument, not the option */
    char *dashes[] = {"prog", "--", "--seq", NULL};
    assert_int_equal(llm_cli_parse_seen(&cli, 3, dashes, NULL, &seen), LLM_CLI_RUN);
    assert_int_equal(llm_cli_given(&cli, &seen, "seq"), 0);
    /* llm_cli_parse is llm_cli_parse_seen without the record */
    char *plain[] = {"prog", "--seq", "5", NULL};
    assert_int_equal(llm_cli_parse(&cli, 3, plain, NULL), LLM_CLI_RUN);
    assert_int_equal(seq, 5);

    /* a table longer than a record holds is refused, not overrun */
    llm_opt big[LLM_CLI_MAX_OPTS + 2];
    for (int i = 0; i <= LLM_CLI_MAX_OPTS; i++)
        big[i] = (llm_opt){"seq", 0, LLM_OPT_INT, &seq, "T", NULL};
    big[LLM_CLI_MAX_OPTS + 1] = (llm_opt){0};
    llm_cli bigcli = {"prog", "[options]", "test", big, 0, 1, NULL};
    FILE *saved = stderr;
    stderr = fopen("/dev/null", "w");
    assert_int_equal(llm_cli_parse_seen(&bigcli, 2, none, NULL, &seen), LLM_CLI_ERROR);
    assert_int_equal(llm_cli_parse(&bigcli, 2, none, NULL), LLM_CLI_RUN);
    fclose(stderr);
    stderr = saved;
}

static void test_parse_numbers(void **state)
{
    (void)state;
    int64_t v;
    int i;
    double d;
    assert_int_equal(llm_parse_i64("-42", &v), 0);
    assert_true(v == -42);
    assert_int_equal(llm_parse_i64("99999999999999999999", &v), -1);
    assert_int_equal(llm_parse_int("3000000000", &i), -1);
    assert_int_equal(llm_parse_double("3e-4", &d), 0);
    assert_true(d == 3e-4);
    assert_int_equal(llm_parse_double("nan", &d), -1);
    assert_int_equal(llm_parse_double("1e999", &d), -1);
    assert_int_equal(llm_parse_double("", &d), -1);
    assert_int_equal(llm_parse_double(NULL, &d), -1);
    assert_int_equal(llm_parse_double("0x1p-3", &d), -1);   /* decimal only */
    assert_int_equal(llm_parse_double(" 1", &d), -1);
    assert_int_equal(llm_parse_double("1 ", &d), -1);
    assert_int_equal(llm_parse_double("1e5e", &d), -1);
    /* an underflow reads as the tiny value (a checkpoint may hold one), as the
     * config's llm_node_double, which is this function */
    assert_int_equal(llm_parse_double("4e-320", &d), 0);
    assert_true(d > 0 && d < 1e-300);
    assert_int_equal(llm_parse_double("1e-400", &d), 0);
    assert_true(d == 0);
}

static void test_env_strict(void **state)
{
    (void)state;
    llm_status st = {0};
    uint64_t v = 7;
    unsetenv("LLM_TEST_ENV");
    assert_int_equal(llm_env_u64("LLM_TEST_ENV", 1, 100, &v, &st), LLM_OK);
    assert_int_equal(v, 7);
    setenv("LLM_TEST_ENV", "", 1);
    assert_int_equal(llm_env_u64("LLM_TEST_ENV", 1, 100, &v, &st), LLM_OK);
    assert_int_equal(v, 7);
    setenv("LLM_TEST_ENV", "100", 1);
    assert_int_equal(llm_env_u64("LLM_TEST_ENV", 1, 100, &v, &st), LLM_OK);
    assert_int_equal(v, 100);
    static const char *const bad[] = {"101", "0", "-1", "+5", " 5", "5 ", "5k", "0x10", "1e2",
                                      "99999999999999999999999"};
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
        setenv("LLM_TEST_ENV", bad[i], 1);
        v = 7;
        assert_int_equal(llm_env_u64("LLM_TEST_ENV", 1, 100, &v, &st), LLM_EUSAGE);
        assert_int_equal(v, 7);
        assert_non_null(strstr(st.msg, "LLM_TEST_ENV '"));
    }
    setenv("LLM_TEST_ENV", "18446744073709551615", 1);
    assert_int_equal(llm_env_u64("LLM_TEST_ENV", 0, UINT64_MAX, &v, &st), LLM_OK);
    assert_true(v == UINT64_MAX);
    static const char *const words[] = {"omp", "blas", "x", NULL};
    int k = -1;
    setenv("LLM_TEST_ENV", "blas", 1);
    assert_int_equal(llm_env_word("LLM_TEST_ENV", words, &k, &st), LLM_OK);
    assert_int_equal(k, 1);
    setenv("LLM_TEST_ENV", "BLAS", 1);
    k = -1;
    assert_int_equal(llm_env_word("LLM_TEST_ENV", words, &k, &st), LLM_EUSAGE);
    assert_int_equal(k, -1);
    assert_string_equal(st.msg, "LLM_TEST_ENV 'BLAS' is not 'omp', 'blas' or 'x'");
    unsetenv("LLM_TEST_ENV");
    assert_int_equal(llm_env_word("LLM_TEST_ENV", words, &k, &st), LLM_OK);
    assert_int_equal(k, -1);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_status_codes),
        cmocka_unit_test(test_json_writer),
        cmocka_unit_test(test_cli_parse),
        cmocka_unit_test(test_cli_seen),
        cmocka_unit_test(test_parse_numbers),
        cmocka_unit_test(test_env_strict),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
