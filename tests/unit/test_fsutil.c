/* Unit tests for the directory helpers of common/fsutil.c: mkdir -p that says what it
 * made, and its undoing. */
#include "tests/unit/testutil.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "common/fsutil.h"

static char *dir;

static int setup(void **state)
{
    (void)state;
    dir = tu_tmpdir();
    return dir ? 0 : -1;
}

static int teardown(void **state)
{
    (void)state;
    tu_rmdir(dir);
    free(dir);
    return 0;
}

static const char *path(const char *name)
{
    static char buf[4][512];
    static int k;
    k = (k + 1) % 4;
    snprintf(buf[k], sizeof buf[k], "%s/%s", dir, name);
    return buf[k];
}

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
    assert_int_equal(llm_mkdirs_made(path("a/b/c"), &made, &st), LLM_OK);
    assert_true(is_dir(path("a/b/c")));
    assert_int_equal(made, strlen(path("a")));
    llm_rmdirs_made(path("a/b/c"), made);
    assert_false(is_dir(path("a")));
    assert_true(is_dir(dir));

    /* part there already: only what is new is made, and undone */
    assert_int_equal(llm_mkdirs(path("x/y"), &st), LLM_OK);
    assert_int_equal(llm_mkdirs_made(path("x/y/z/w/"), &made, &st), LLM_OK);
    assert_int_equal(made, strlen(path("x/y/z")));
    llm_rmdirs_made(path("x/y/z/w/"), made);
    assert_false(is_dir(path("x/y/z")));
    assert_true(is_dir(path("x/y")));

    /* nothing new: made 0, and undoing it removes nothing */
    assert_int_equal(llm_mkdirs_made(path("x/y"), &made, &st), LLM_OK);
    assert_int_equal(made, 0);
    llm_rmdirs_made(path("x/y"), made);
    assert_true(is_dir(path("x/y")));
}

/* a directory that is no longer empty stays, and so does everything above it */
static void test_undo_stops_at_nonempty(void **state)
{
    (void)state;
    llm_status st = {0};
    size_t made = 0;
    assert_int_equal(llm_mkdirs_made(path("p//q/r"), &made, &st), LLM_OK);
    assert_int_equal(made, strlen(path("p")));
    FILE *f = fopen(path("p/other"), "w");
    assert_non_null(f);
    fclose(f);
    llm_rmdirs_made(path("p//q/r"), made);
    assert_false(is_dir(path("p/q")));
    assert_true(is_dir(path("p")));
    assert_int_equal(unlink(path("p/other")), 0);
    assert_int_equal(rmdir(path("p")), 0);
}

/* a file in the way is an error, and made says nothing was made */
static void test_file_in_the_way(void **state)
{
    (void)state;
    llm_status st = {0};
    FILE *f = fopen(path("file"), "w");
    assert_non_null(f);
    fclose(f);
    size_t made = 7;
    assert_int_equal(llm_mkdirs_made(path("file/d"), &made, &st), LLM_EIO);
    assert_int_equal(made, 0);
    assert_non_null(strstr(st.msg, "cannot create directory"));
    assert_int_equal(unlink(path("file")), 0);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_made_and_undone),
        cmocka_unit_test(test_undo_stops_at_nonempty),
        cmocka_unit_test(test_file_in_the_way),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
