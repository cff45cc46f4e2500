/* Unit tests for the all-or-nothing output file (common/afile.c). */
#include "tests/unit/testutil.h"

#include <dirent.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "common/afile.h"


/* entries of tu_dir whose name holds name (the hidden temp files too) */
static int count(const char *name)
{
    DIR *d = opendir(tu_dir);
    assert_non_null(d);
    int n = 0;
    struct dirent *e;
    while ((e = readdir(d)))
        n += strstr(e->d_name, name) != NULL;
    closedir(d);
    return n;
}

static void put_old(const char *name)
{
    FILE *f = fopen(tu_path(name), "wb");
    assert_non_null(f);
    fputs("old", f);
    fclose(f);
}

/* Small and large puts, a patch, a read-back and a truncation give the bytes asked for;
 * the file appears only at commit, with the umask's mode. */
static void test_put_patch_truncate(void **state)
{
    (void)state;
    llm_status st = {0};
    mode_t old = umask(027);
    put_old("a.bin");
    llm_afile a;
    assert_int_equal(llm_afile_open(&a, tu_path("a.bin"), 0, &st), LLM_OK);
    assert_true(llm_afile_seekable(&a));
    char *big = malloc(300000);
    assert_non_null(big);
    for (int i = 0; i < 300000; i++)
        big[i] = (char)(i * 31);
    assert_int_equal(llm_afile_put(&a, "HDR0", 4, &st), LLM_OK);
    assert_int_equal(llm_afile_put(&a, big, 300000, &st), LLM_OK);
    assert_int_equal(llm_afile_put(&a, "tail", 4, &st), LLM_OK);
    assert_int_equal(llm_afile_patch(&a, 0, "HDR1", 4, &st), LLM_OK);
    char back[8];
    assert_int_equal(llm_afile_read(&a, 300004, back, 4, &st), LLM_OK);
    assert_memory_equal(back, "tail", 4);
    assert_int_equal(llm_afile_patch(&a, 300005, "xx", 4, &st), LLM_ESOFTWARE);   /* past the end */
    assert_int_equal(llm_afile_truncate(&a, 100004, &st), LLM_OK);
    assert_int_equal(llm_afile_put(&a, "end", 3, &st), LLM_OK);
    size_t n;
    char *b = tu_slurp(tu_path("a.bin"), &n);
    assert_non_null(b);
    assert_int_equal(n, 3);   /* the old file until commit */
    assert_int_equal(count(".a.bin.tmp."), 1);   /* beside it, hidden */
    free(b);
    assert_int_equal(llm_afile_commit(&a, &st), LLM_OK);
    umask(old);
    b = tu_slurp(tu_path("a.bin"), &n);
    assert_non_null(b);
    assert_int_equal(n, 100007);
    assert_memory_equal(b, "HDR1", 4);
    assert_memory_equal(b + 4, big, 100000);
    assert_memory_equal(b + 100004, "end", 3);
    struct stat sb;
    assert_int_equal(stat(tu_path("a.bin"), &sb), 0);
    assert_int_equal(sb.st_mode & 0777, 0640);
    assert_int_equal(count("a.bin"), 1);
    free(b);
    free(big);
}

/* A failed write (the fault hook's full disk) or an abort keeps the old file and leaves
 * no temp file; the message names the file and the reason. */
static void test_failure_keeps_old(void **state)
{
    (void)state;
    llm_status st = {0};
    put_old("b.bin");
    setenv("LLM_FAULT_WRITE_LIMIT", "70000", 1);
    llm_afile a;
    assert_int_equal(llm_afile_open(&a, tu_path("b.bin"), 0, &st), LLM_OK);
    unsetenv("LLM_FAULT_WRITE_LIMIT");
    static char zeros[50000];
    assert_int_equal(llm_afile_put(&a, zeros, sizeof zeros, &st), LLM_OK);
    int rc = llm_afile_put(&a, zeros, sizeof zeros, &st);
    assert_int_equal(rc, LLM_EIO);
    assert_non_null(strstr(st.msg, "b.bin"));
    assert_non_null(strstr(st.msg, "no space left on device"));
    llm_afile_abort(&a);
    size_t n;
    char *b = tu_slurp(tu_path("b.bin"), &n);
    assert_non_null(b);
    assert_int_equal(n, 3);
    assert_memory_equal(b, "old", 3);
    free(b);
    assert_int_equal(count("b.bin"), 1);

    assert_int_equal(llm_afile_open(&a, tu_path("b.bin"), LLM_AFILE_NOSYNC, &st), LLM_OK);
    assert_int_equal(llm_afile_put(&a, "new", 3, &st), LLM_OK);
    llm_afile_abort(&a);
    assert_int_equal(count("b.bin"), 1);
    /* commit with NOSYNC replaces it */
    assert_int_equal(llm_afile_open(&a, tu_path("b.bin"), LLM_AFILE_NOSYNC, &st), LLM_OK);
    assert_int_equal(llm_afile_put(&a, "newer", 5, &st), LLM_OK);
    assert_int_equal(llm_afile_commit(&a, &st), LLM_OK);
    b = tu_slurp(tu_path("b.bin"), &n);
    assert_non_null(b);
    assert_int_equal(n, 5);
    free(b);
}

/* finish, then publish or abort: until the publish the old file is what a reader sees;
 * a publish that fails (LLM_FAULT_RENAME) keeps it and removes the temp file. */
static void test_finish_publish(void **state)
{
    (void)state;
    llm_status st = {0};
    size_t n;
    put_old("f.bin");
    llm_afile a;
    assert_int_equal(llm_afile_open(&a, tu_path("f.bin"), 0, &st), LLM_OK);
    assert_int_equal(llm_afile_put(&a, "new!", 4, &st), LLM_OK);
    assert_int_equal(llm_afile_finish(&a, &st), LLM_OK);
    assert_int_equal(llm_afile_finish(&a, &st), LLM_OK);   /* again: nothing to do */
    char *b = tu_slurp(tu_path("f.bin"), &n);
    assert_int_equal(n, 3);
    free(b);
    assert_int_equal(count("f.bin"), 2);                   /* the temp file, complete */
    llm_afile_abort(&a);
    assert_int_equal(count("f.bin"), 1);

    assert_int_equal(llm_afile_open(&a, tu_path("f.bin"), 0, &st), LLM_OK);
    assert_int_equal(llm_afile_put(&a, "new!", 4, &st), LLM_OK);
    assert_int_equal(llm_afile_finish(&a, &st), LLM_OK);
    setenv("LLM_FAULT_RENAME", "/f.bin", 1);
    assert_int_equal(llm_afile_publish(&a, &st), LLM_EIO);
    unsetenv("LLM_FAULT_RENAME");
    assert_non_null(strstr(st.msg, "rename to"));
    assert_int_equal(count("f.bin"), 1);
    b = tu_slurp(tu_path("f.bin"), &n);
    assert_int_equal(n, 3);
    free(b);

    assert_int_equal(llm_afile_open(&a, tu_path("f.bin"), 0, &st), LLM_OK);
    assert_int_equal(llm_afile_put(&a, "new!", 4, &st), LLM_OK);
    assert_int_equal(llm_afile_finish(&a, &st), LLM_OK);
    assert_int_equal(llm_afile_commit(&a, &st), LLM_OK);   /* commit of a finished file */
    b = tu_slurp(tu_path("f.bin"), &n);
    assert_int_equal(n, 4);
    free(b);
    assert_int_equal(count("f.bin"), 1);
}

/* A signal that comes while held waits: the process goes on until the release, which
 * then removes the temp files and ends it by that signal. */
static void test_hold_signals(void **state)
{
    (void)state;
    pid_t pid = fork();
    assert_true(pid >= 0);
    if (pid == 0) {
        llm_status st = {0};
        llm_afile a;
        llm_afile_remove_on_signal();
        if (llm_afile_open(&a, tu_path("h.bin"), 0, &st))
            _exit(1);
        llm_afile_hold_signals();
        kill(getpid(), SIGTERM);
        put_old("h-went-on");
        llm_afile_release_signals();
        _exit(2);
    }
    int ws;
    assert_int_equal(waitpid(pid, &ws, 0), pid);
    assert_true(WIFSIGNALED(ws));
    assert_int_equal(WTERMSIG(ws), SIGTERM);
    assert_int_equal(count("h-went-on"), 1);
    assert_int_equal(count("h.bin"), 0);
}

/* A symbolic link stays and its file is replaced; a missing folder is made with MKDIRS
 * and is an error without; a directory is refused. */
static void test_targets(void **state)
{
    (void)state;
    llm_status st = {0};
    put_old("real.bin");
    assert_int_equal(symlink("real.bin", tu_path("link.bin")), 0);
    llm_afile a;
    assert_int_equal(llm_afile_open(&a, tu_path("link.bin"), 0, &st), LLM_OK);
    assert_int_equal(llm_afile_put(&a, "via link", 8, &st), LLM_OK);
    assert_int_equal(llm_afile_commit(&a, &st), LLM_OK);
    struct stat sb;
    assert_int_equal(lstat(tu_path("link.bin"), &sb), 0);
    assert_true(S_ISLNK(sb.st_mode));
    size_t n;
    char *b = tu_slurp(tu_path("real.bin"), &n);
    assert_non_null(b);
    assert_int_equal(n, 8);
    free(b);

    assert_int_equal(llm_afile_open(&a, tu_path("no/such/x.bin"), 0, &st), LLM_EIO);
    assert_non_null(strstr(st.msg, "x.bin"));
    llm_afile_abort(&a);   /* harmless after a failed open */
    assert_int_equal(llm_afile_open(&a, tu_path("made/here/x.bin"), LLM_AFILE_MKDIRS, &st), LLM_OK);
    assert_int_equal(llm_afile_commit(&a, &st), LLM_OK);
    assert_int_equal(stat(tu_path("made/here/x.bin"), &sb), 0);
    assert_int_equal(sb.st_size, 0);

    assert_int_equal(mkdir(tu_path("adir"), 0755), 0);
    assert_int_equal(llm_afile_open(&a, tu_path("adir"), 0, &st), LLM_EIO);
    assert_int_equal(llm_afile_open(&a, "", 0, &st), LLM_EUSAGE);
}

/* A device is written in place, or refused with NODEV; a stream cannot go back. */
static void test_devices(void **state)
{
    (void)state;
    llm_status st = {0};
    llm_afile a;
    assert_int_equal(llm_afile_open(&a, "/dev/null", LLM_AFILE_NODEV, &st), LLM_EUSAGE);
    assert_int_equal(llm_afile_open(&a, "/dev/null", 0, &st), LLM_OK);
    assert_false(llm_afile_seekable(&a));
    assert_int_equal(llm_afile_put(&a, "x", 1, &st), LLM_OK);
    assert_int_equal(llm_afile_patch(&a, 0, "y", 1, &st), LLM_ESOFTWARE);
    assert_int_equal(llm_afile_commit(&a, &st), LLM_OK);
    struct stat sb;
    assert_int_equal(stat("/dev/null", &sb), 0);
    assert_true(S_ISCHR(sb.st_mode));

    /* "-" is standard output with STDOUT, a file named "-" without */
    int saved = dup(1);
    int fd = open(tu_path("stdout.txt"), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    assert_true(saved >= 0 && fd >= 0);
    fflush(stdout);
    dup2(fd, 1);
    close(fd);
    int rc = llm_afile_open(&a, "-", LLM_AFILE_STDOUT, &st);
    if (!rc)
        rc = llm_afile_put(&a, "to stdout\n", 10, &st);
    if (!rc)
        rc = llm_afile_commit(&a, &st);
    dup2(saved, 1);
    close(saved);
    assert_int_equal(rc, LLM_OK);
    size_t n;
    char *b = tu_slurp(tu_path("stdout.txt"), &n);
    assert_non_null(b);
    assert_int_equal(n, 10);
    free(b);
    assert_int_equal(chdir(tu_dir), 0);
    assert_int_equal(llm_afile_open(&a, "-", 0, &st), LLM_OK);
    assert_int_equal(llm_afile_commit(&a, &st), LLM_OK);
    assert_int_equal(stat(tu_path("-"), &sb), 0);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_put_patch_truncate),
        cmocka_unit_test(test_failure_keeps_old),
        cmocka_unit_test(test_finish_publish),
        cmocka_unit_test(test_hold_signals),
        cmocka_unit_test(test_targets),
        cmocka_unit_test(test_devices),
    };
    return cmocka_run_group_tests(tests, tu_dir_setup, tu_dir_teardown);
}
