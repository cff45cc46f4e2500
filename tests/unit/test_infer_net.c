/* Unit tests for llm-infer --listen's --idle-timeout (common/infer_net.c), driven through
 * its ready hook (one pass over the sockets: poll, read and write, then the timeouts).
 * poll(2) is this file's own: "blind", it reports nothing, as when bytes arrive after
 * the server's poll returned and before its pass ends. */
#include "tests/unit/testutil.h"

#include <errno.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

#include "common/infer_net.h"

static int blind;

int poll(struct pollfd *fds, nfds_t n, int ms)
{
    if (blind) {
        for (nfds_t i = 0; i < n; i++)
            fds[i].revents = 0;
        return 0;
    }
    struct timespec ts = {ms / 1000, (long)(ms % 1000) * 1000000L};
    return ppoll(fds, n, ms < 0 ? NULL : &ts, NULL);
}

static void nap_ms(int ms)
{
    struct timespec ts = {ms / 1000, (long)(ms % 1000) * 1000000L};
    while (nanosleep(&ts, &ts) && errno == EINTR) {
    }
}

/* A server on a Unix socket in dir with idle_s, and one client connected to it (accepted). */
static llm_infer_net *serve(const char *dir, double idle_s, llm_infer_io *io, int *client)
{
    char addr[600], bound[700];
    snprintf(addr, sizeof addr, "unix:%s/s.sock", dir);
    llm_infer_net *n = NULL;
    llm_status st = {0};
    assert_int_equal(llm_infer_net_open(&n, addr, idle_s, NULL, NULL, bound, sizeof bound, &st), 0);
    *io = llm_infer_net_io(n);
    struct sockaddr_un sa = {0};
    sa.sun_family = AF_UNIX;
    snprintf(sa.sun_path, sizeof sa.sun_path, "%s/s.sock", dir);
    *client = socket(AF_UNIX, SOCK_STREAM, 0);
    assert_true(*client >= 0 && !connect(*client, (struct sockaddr *)&sa, sizeof sa));
    io->ready(io->in);   /* accepts it */
    return n;
}

/* 1 while the server keeps c's connection, 0 once it closed it. */
static int still_open(int c)
{
    char b;
    ssize_t r = recv(c, &b, 1, MSG_DONTWAIT);
    return r < 0 && (errno == EAGAIN || errno == EWOULDBLOCK);
}

/* Whether the server closes c, passing over the sockets every 50 ms for 5 s at most. */
static int closed_soon(llm_infer_io *io, int c)
{
    for (int i = 0; i < 100 && still_open(c); i++) {
        nap_ms(50);
        io->ready(io->in);
    }
    return !still_open(c);
}

static void finish(llm_infer_net *n, int c, char *dir)
{
    close(c);
    llm_infer_net_free(n);
    tu_rmdir(dir);
    free(dir);
}

/* A client quiet for the timeout whose bytes (part of a line) arrive as the pass looks at
 * it is not the quiet one: the server reads them, and keeps it. */
static void test_spoke_in_time(void **state)
{
    (void)state;
    char *dir = tu_tmpdir();
    llm_infer_io io;
    int c;
    llm_infer_net *n = serve(dir, 0.2, &io, &c);
    assert_true(send(c, "{\"prompt\"", 9, 0) == 9);
    io.ready(io.in);   /* reads it */
    nap_ms(400);       /* quiet past the timeout... */
    assert_true(send(c, ": \"ROM", 6, 0) == 6);   /* ...then speaks, unseen by poll */
    blind = 1;
    io.ready(io.in);
    blind = 0;
    assert_true(still_open(c));
    assert_true(closed_soon(&io, c));   /* and quiet again: closed */
    finish(n, c, dir);
}

/* A timeout of less than a nanosecond is a timeout, not "never" (0 is never). */
static void test_tiny_timeout(void **state)
{
    (void)state;
    char *dir = tu_tmpdir();
    llm_infer_io io;
    int c;
    llm_infer_net *n = serve(dir, 1e-10, &io, &c);
    assert_true(closed_soon(&io, c));
    finish(n, c, dir);
}

int main(void)
{
    signal(SIGPIPE, SIG_IGN);
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_spoke_in_time),
        cmocka_unit_test(test_tiny_timeout),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
