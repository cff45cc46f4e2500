/* Unit tests for the directory helpers of common/fsutil.c: mkdir -p that says what it
 * made, and its undoing. */
#include "tests/unit/testutil.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "common/fsutil.h"


static int is_dir(const char *p)
{
    struct stat sb;
    return stat(p, &sb) == 0 && S_ISDIR(sb.st_mode);
}

/* made: the first directory created; undone back to it, not further */
static void test_made_and_undone(void **state)
{
    (void)state;
    llm_status st = {0};
    size_t made = 99;
    assert_int_equal(llm_mkdirs_made(tu_path("a/b/c"), &made, &st), LLM_OK);
    assert_true(is_dir(tu_path("a/b/c")));
    assert_int_equal(made, strlen(tu_path("a")));
    llm_rmdirs_made(tu_path("a/b/c"), made);
    assert_false(is_dir(tu_path("a")));
    assert_true(is_dir(tu_dir));

    /* part there already: only what is new is made, and undone */
    assert_int_equal(llm_mkdirs(tu_path("x/y"), &st), LLM_OK);
    assert_int_equal(llm_mkdirs_made(tu_path("x/y/z/w/"), &made, &st), LLM_OK);
    assert_int_equal(made, strlen(tu_path("x/y/z")));
    llm_rmdirs_made(tu_path("x/y/z/w/"), made);
    assert_false(is_dir(tu_path("x/y/z")));
    assert_true(is_dir(tu_path("x/y")));

    /* nothing new: made 0, and undoing it removes nothing */
    assert_int_equal(llm_mkdirs_made(tu_path("x/y"), &made, &st), LLM_OK);
    assert_int_equal(made, 0);
    llm_rmdirs_made(tu_path("x/y"), made);
    assert_true(is_dir(tu_path("x/y")));
}

/* a directory that is no longer empty stays, and so does everything above it */
static void test_undo_stops_at_nonempty(void **state)
{
    (void)state;
    llm_status st = {0};
    size_t made = 0;
    assert_int_equal(llm_mkdirs_made(tu_path("p//q/r"), &made, &st), LLM_OK);
    assert_int_equal(made, strlen(tu_path("p")));
    FILE *f = fopen(tu_path("p/other"), "w");
    assert_non_null(f);
    fclose(f);
    llm_rmdirs_made(tu_path("p//q/r"), made);
    assert_false(is_dir(tu_path("p/q")));
    assert_true(is_dir(tu_path("p")));
    assert_int_equal(unlink(tu_path("p/other")), 0);
    assert_int_equal(rmdir(tu_path("p")), 0);
}

/* a file in the way is an error, and made says nothing was made */
static void test_file_in_the_way(void **state)
{
    (void)state;
    llm_status st = {0};
    FILE *f = fopen(tu_path("file"), "w");
    assert_non_null(f);
    fclose(f);
    size_t made = 7;
    assert_int_equal(llm_mkdirs_made(tu_path("file/d"), &made, &st), LLM_EIO);
    assert_int_equal(made, 0);
    assert_non_null(strstr(st.msg, "cannot create directory"));
    assert_int_equal(unlink(tu_path("file")), 0);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_made_and_undone),
        cmocka_unit_test(test_undo_stops_at_nonempty),
        cmocka_unit_test(test_file_in_the_way),
    };
    return cmocka_run_group_tests(tests, tu_dir_setup, tu_dir_teardown);
}
