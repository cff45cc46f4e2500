/* Unit tests for common/sigstop.c: the stop request, the second SIGINT that ends the
 * process at once, and the armed file such an end removes (rank 0's --dist-init file:
 * id, armed by the exchange in dist_xchg.c).  Each case runs in a child process, which
 * the signals end. */
#include "tests/unit/testutil.h"

#include <fcntl.h>
#include <limits.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "common/dist_impl.h"
#include "common/sigstop.h"

static int exists(const char *p)
{
    struct stat sb;
    return stat(p, &sb) == 0;
}

static void touch(const char *p)
{
    FILE *f = fopen(p, "w");
    assert_non_null(f);
    fclose(f);
}

/* The exit status of fn run in a child with its stderr in tu_path("err"); -1: not exited. */
static int in_child(void (*fn)(void))
{
    fflush(NULL);
    pid_t pid = fork();
    assert_true(pid >= 0);
    if (pid == 0) {
        int fd = open(tu_path("err"), O_WRONLY | O_CREAT | O_TRUNC, 0644);
        if (fd < 0 || dup2(fd, 2) < 0)
            _exit(99);
        fn();
        _exit(98);   /* the signals should have ended it */
    }
    int ws = 0;
    assert_int_equal(waitpid(pid, &ws, 0), pid);
    return WIFEXITED(ws) ? WEXITSTATUS(ws) : -1;
}

/* fn in a child ends with status, and the file name is left (1) or gone (0) after it;
 * then removed */
static void expect_end(void (*fn)(void), int status, const char *name, int left)
{
    assert_int_equal(in_child(fn), status);
    assert_int_equal(exists(tu_path(name)), left);
    unlink(tu_path(name));
}

static void two_sigints_armed(void)
{
    if (llm_sigstop_unlink_on_exit(tu_path("id")))
        _exit(97);
    llm_sigstop_catch();
    raise(SIGINT);
    if (*llm_sigstop_flag() != SIGINT || !exists(tu_path("id")))
        _exit(96);   /* the first is a request only */
    raise(SIGINT);
}

static void two_sigints_disarmed(void)
{
    llm_sigstop_unlink_on_exit(tu_path("id"));
    llm_sigstop_unlink_on_exit(NULL);
    llm_sigstop_catch();
    raise(SIGTERM);   /* any of the three is the request; then SIGINT ends it */
    raise(SIGINT);
}

/* a second SIGINT ends the process with 130 and removes the armed file; disarmed, the
 * file stays */
static void test_second_sigint(void **state)
{
    (void)state;
    touch(tu_path("id"));
    expect_end(two_sigints_armed, 130, "id", 0);
    touch(tu_path("id"));
    expect_end(two_sigints_disarmed, 130, "id", 1);
}

static void exit_at_start(void)
{
    llm_sigstop_unlink_on_exit(tu_path("id"));
    llm_sigstop_catch_exit("prog: stopped\n");
    raise(SIGUSR1);
}

/* the start's handler: the line, the armed file removed, status 0 */
static void test_exit_at_start(void **state)
{
    (void)state;
    touch(tu_path("id"));
    expect_end(exit_at_start, 0, "id", 0);
    char *err = tu_slurp(tu_path("err"), NULL);
    assert_non_null(err);
    assert_string_equal(err, "prog: stopped\n");
    free(err);
}

/* --dist-init file: of the case below */
static const char *xspec(void)
{
    static char spec[PATH_MAX + 8];
    snprintf(spec, sizeof spec, "file:%s", tu_path("xid"));
    return spec;
}

/* as rank 0 of 2, write the id and return: the others have not read it yet */
static void exchange_as_rank0(void)
{
    char blob[16] = "nccl unique id.";
    llm_status st = {0};
    llm_sigstop_catch();
    if (llm_dist__exchange(xspec(), 0, 2, blob, sizeof blob, 5, llm_sigstop_flag(), &st) ||
        !exists(tu_path("xid")))
        _exit(95);
}

static void exchange_then_two_sigints(void)
{
    exchange_as_rank0();
    raise(SIGINT);
    raise(SIGINT);
}

static void exchange_done_disarms(void)
{
    exchange_as_rank0();
    llm_dist__exchange_done(xspec(), 0);
    touch(tu_path("xid"));   /* another job's, say: not ours to remove */
    raise(SIGINT);
    raise(SIGINT);
}

/* rank 0's file: id is armed from its write until llm_dist__exchange_done */
static void test_exchange_arms_its_file(void **state)
{
    (void)state;
    expect_end(exchange_then_two_sigints, 130, "xid", 0);
    expect_end(exchange_done_disarms, 130, "xid", 1);
}

static void restore_ignored(void)
{
    signal(SIGINT, SIG_IGN);   /* as a background job of a script inherits it */
    llm_sigstop_catch_exit(NULL);
    llm_sigstop_catch();
    llm_sigstop_restore();
    raise(SIGINT);
    _exit(7);
}

/* restore: the dispositions from before the first catch, here SIGINT ignored */
static void test_restore(void **state)
{
    (void)state;
    assert_int_equal(in_child(restore_ignored), 7);
}

/* a path too long to hold is refused, not cut */
static void test_too_long(void **state)
{
    (void)state;
    char *p = malloc(PATH_MAX + 1);
    assert_non_null(p);
    memset(p, 'a', PATH_MAX);
    p[PATH_MAX] = 0;
    assert_int_equal(llm_sigstop_unlink_on_exit(p), -1);
    assert_int_equal(llm_sigstop_unlink_on_exit(NULL), 0);
    free(p);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_second_sigint),
        cmocka_unit_test(test_exit_at_start),
        cmocka_unit_test(test_exchange_arms_its_file),
        cmocka_unit_test(test_restore),
        cmocka_unit_test(test_too_long),
    };
    return cmocka_run_group_tests(tests, tu_dir_setup, tu_dir_teardown);
}
