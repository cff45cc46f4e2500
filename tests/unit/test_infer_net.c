/* Unit tests for llm-infer --listen's --idle-timeout (common/infer_net.c), driven through
 * its ready hook (one pass over the sockets: poll, read and write, then the timeouts),
 * and its next and done hooks where a request is to be answered; its bound on the bytes
 * received and not yet taken (made small), and the memory its input buffers keep.
 * poll(2) is this file's own: "blind", it reports nothing, as when bytes arrive after
 * the server's poll returned and before its pass ends. */
#include "tests/unit/testutil.h"

#include <errno.h>
#include <malloc.h>
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

/* 1 while the server keeps c's connection, 0 once it closed it. */
static int still_open(int c)
{
    char b;
    ssize_t r = recv(c, &b, 1, MSG_DONTWAIT);
    return r < 0 && (errno == EAGAIN || errno == EWOULDBLOCK);
}

/* JSONL without a tokenizer: a line is a request (answered with an error, or not). */
static llm_infer_source src = {.jsonl = 1};

/* A new client of the server on dir's socket, accepted. */
static int join(const char *dir, llm_infer_io *io)
{
    struct sockaddr_un sa = {0};
    sa.sun_family = AF_UNIX;
    snprintf(sa.sun_path, sizeof sa.sun_path, "%s/s.sock", dir);
    int c = socket(AF_UNIX, SOCK_STREAM, 0);
    assert_true(c >= 0 && !connect(c, (struct sockaddr *)&sa, sizeof sa));
    io->ready(io->in);   /* accepts it */
    return c;
}

/* A test's server, on a Unix socket in its scratch directory, and its first client. */
typedef struct {
    char *dir;
    llm_infer_net *n;
    llm_infer_io io;
    int c;
} server;

/* A server with idle_s, and one client connected to it (accepted). */
static server *serve(double idle_s)
{
    static server s;
    s.dir = tu_tmpdir();
    char addr[600], bound[700];
    snprintf(addr, sizeof addr, "unix:%s/s.sock", s.dir);
    llm_status st = {0};
    assert_int_equal(llm_infer_net_open(&s.n, addr, idle_s, &src, NULL, bound, sizeof bound, &st), 0);
    s.io = llm_infer_net_io(s.n);
    s.c = join(s.dir, &s.io);
    return &s;
}

/* Take the next request and answer it; returns its error, or "-" (in buf).  There must
 * be one: at once (a pass over the sockets just found it), or within 5 s. */
static const char *answer_now(llm_infer_io *io, char *buf, size_t len)
{
    llm_infer_request req;
    memset(&req, 0, sizeof req);
    llm_status st = {0};
    assert_int_equal(io->next(io->in, &req, &st), 1);
    snprintf(buf, len, "%s", req.error ? req.error : "-");
    llm_infer_result res = {.req = &req, .text = "", .finish_reason = req.error ? "error" : "length",
                            .error = req.error};
    assert_int_equal(io->done(io->out, &res, &st), 0);
    llm_infer_request_free(&req);
    return buf;
}

static const char *answer(llm_infer_io *io, char *buf, size_t len)
{
    for (int i = 0; i < 100 && !io->ready(io->in); i++)
        nap_ms(50);
    assert_true(io->ready(io->in));
    return answer_now(io, buf, len);
}

/* One response line from c (waiting up to 5 s for it, passing over the sockets). */
static void read_response(llm_infer_io *io, int c, char *buf, size_t len)
{
    size_t n = 0;
    for (int i = 0; i < 100 && (!n || buf[n - 1] != '\n'); i++) {
        ssize_t r = recv(c, buf + n, len - 1 - n, MSG_DONTWAIT);
        if (r > 0)
            n += (size_t)r;
        else {
            nap_ms(50);
            io->ready(io->in);
        }
    }
    buf[n] = 0;
    assert_true(n && buf[n - 1] == '\n');
}

/* Whether the server keeps c open while passing over the sockets every 50 ms for ms. */
static int kept_for(llm_infer_io *io, int c, int ms)
{
    for (int t = 0; t < ms && still_open(c); t += 50) {
        nap_ms(50);
        io->ready(io->in);
    }
    return still_open(c);
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

static void finish(server *s)
{
    close(s->c);
    llm_infer_net_free(s->n);
    tu_rmdir(s->dir);
    free(s->dir);
}

/* A client quiet for the timeout whose bytes (part of a line) arrive as the pass looks at
 * it is not the quiet one: the server reads them, and keeps it. */
static void test_spoke_in_time(void **state)
{
    (void)state;
    server *s = serve(0.2);
    llm_infer_io *io = &s->io;
    int c = s->c;
    assert_true(send(c, "{\"prompt\"", 9, 0) == 9);
    io->ready(io->in);   /* reads it */
    nap_ms(400);         /* quiet past the timeout... */
    assert_true(send(c, ": \"ROM", 6, 0) == 6);   /* ...then speaks, unseen by poll */
    blind = 1;
    io->ready(io->in);
    blind = 0;
    assert_true(still_open(c));
    assert_true(closed_soon(io, c));   /* and quiet again: closed */
    finish(s);
}

/* A timeout of less than a nanosecond is a timeout, not "never" (0 is never). */
static void test_tiny_timeout(void **state)
{
    (void)state;
    server *s = serve(1e-10);
    llm_infer_io *io = &s->io;
    int c = s->c;
    assert_true(send(c, "{", 1, 0) == 1);   /* part of a line */
    assert_true(closed_soon(io, c));
    finish(s);
}

/* Clients quiet between requests are not timed out: one that has sent nothing, and one
 * whose request was answered and whose answer it read; one that stopped in the middle
 * of a line is. */
static void test_quiet_stays(void **state)
{
    (void)state;
    server *s = serve(0.2);
    llm_infer_io *io = &s->io;
    int silent = s->c;
    int asked = join(s->dir, io), partial = join(s->dir, io);
    char buf[4096];
    assert_true(send(asked, "{\"id\": 7}\n", 10, 0) == 10);
    answer(io, buf, sizeof buf);
    read_response(io, asked, buf, sizeof buf);
    assert_non_null(strstr(buf, "\"id\":7"));
    assert_true(send(partial, "{\"id\"", 5, 0) == 5);
    assert_true(kept_for(io, silent, 1000));   /* five times the timeout */
    assert_true(still_open(asked));
    assert_false(still_open(partial));
    assert_true(send(asked, "{\"id\": 8}\n", 10, 0) == 10);   /* and is served as before */
    answer(io, buf, sizeof buf);
    read_response(io, asked, buf, sizeof buf);
    assert_non_null(strstr(buf, "\"id\":8"));
    close(asked);
    close(partial);
    finish(s);
}

/* Whether the server has closed c, with or without bytes still waiting to be read. */
static int hung_up(int c)
{
    struct pollfd p = {.fd = c, .events = POLLRDHUP};
    struct timespec zero = {0, 0};
    return ppoll(&p, 1, &zero, NULL) > 0 && (p.revents & (POLLHUP | POLLRDHUP | POLLERR));
}

/* A client that reads none of its responses is closed once they have waited for the
 * timeout with none of them taken. */
static void test_unread_closed(void **state)
{
    (void)state;
    server *s = serve(0.2);
    llm_infer_io *io = &s->io;
    int c = s->c;
    char buf[4096];
    /* more responses (of some 60 bytes each) than the sockets between hold; on a slow
     * machine the timeout may strike before all are sent */
    for (int k = 0; k < 10000; k++) {
        if (send(c, "x\n", 2, MSG_NOSIGNAL) != 2 || !io->ready(io->in))
            break;   /* closed: the line was read, or not */
        answer_now(io, buf, sizeof buf);
    }
    for (int i = 0; i < 100 && !hung_up(c); i++) {
        nap_ms(50);
        io->ready(io->in);
    }
    assert_true(hung_up(c));
    finish(s);
}

/* Send all of len bytes of b to c, passing over the server's sockets while c's is full. */
static void send_all(llm_infer_io *io, int c, const char *b, size_t len)
{
    while (len) {
        ssize_t w = send(c, b, len, MSG_DONTWAIT | MSG_NOSIGNAL);
        if (w < 0) {
            assert_true(errno == EAGAIN || errno == EINTR);
            io->ready(io->in);
            continue;
        }
        b += w;
        len -= (size_t)w;
    }
}

static void send_str(llm_infer_io *io, int c, const char *s)
{
    send_all(io, c, s, strlen(s));
}

/* Pass over the sockets until the server has read everything sent to it (a few times
 * after the last progress, for a loaded machine: up to 2 s). */
static void settle(llm_infer_io *io)
{
    for (int i = 0; i < 40; i++) {
        io->ready(io->in);
        nap_ms(50);
    }
}

/* A server (no idle timeout) whose bound on the bytes received and not yet taken is
 * max_in, with two clients: *a (s->c) and *b. */
static server *serve_bound(size_t max_in, int *a, int *b)
{
    server *s = serve(0);
    llm_infer_net_set_max_in(s->n, max_in);
    *a = s->c;
    *b = join(s->dir, &s->io);
    return s;
}

/* Past the bound on the unfinished lines of all clients, the longest is cut: answered
 * with an error that says why, the rest of it dropped to its end; the lines after it,
 * and the other clients' unfinished lines, are served as usual. */
static void test_partial_bound(void **state)
{
    (void)state;
    int a, b;
    server *s = serve_bound(300000, &a, &b);
    llm_infer_io *io = &s->io;
    size_t big = 200000, small = 150000;
    char *x = malloc(big);
    assert_non_null(x);
    memset(x, 'x', big);
    char buf[4096];
    send_str(io, a, "{\"id\": \"a\", \"prompt\": \"");
    send_all(io, a, x, big);
    settle(io);
    assert_false(io->ready(io->in));   /* 200023 bytes: under the bound, nothing cut */
    send_str(io, b, "{\"id\": \"b\", \"prompt\": \"");
    send_all(io, b, x, small);   /* 350046 in all: a's line, the longest, is cut */
    settle(io);
    assert_non_null(strstr(answer(io, buf, sizeof buf), "input line cut"));
    assert_non_null(strstr(buf, "300000 bytes"));
    read_response(io, a, buf, sizeof buf);
    assert_non_null(strstr(buf, "\"finish_reason\":\"error\""));
    assert_non_null(strstr(buf, "input line cut"));
    assert_false(io->ready(io->in));
    /* the rest of a's line is dropped; its next line is served */
    send_all(io, a, x, 1000);
    send_str(io, a, "\"}\n{\"id\": \"a2\"}\n");
    assert_string_equal(answer(io, buf, sizeof buf), "missing 'prompt' (or 'tokens')");
    read_response(io, a, buf, sizeof buf);
    assert_non_null(strstr(buf, "\"id\":\"a2\""));
    /* b's line was kept whole: its request is read (and refused for want of a tokenizer,
     * as any prompt is here) */
    send_str(io, b, "\"}\n");
    assert_null(strstr(answer(io, buf, sizeof buf), "cut"));
    assert_non_null(strstr(buf, "tokenizer"));
    read_response(io, b, buf, sizeof buf);
    assert_non_null(strstr(buf, "\"id\":\"b\""));
    free(x);
    close(b);
    finish(s);
}

/* Send what of len bytes c's socket takes now: how many. */
static size_t send_some(int c, const char *b, size_t len)
{
    ssize_t w = send(c, b, len, MSG_DONTWAIT | MSG_NOSIGNAL);
    assert_true(w >= 0 || errno == EAGAIN || errno == EINTR);
    return w > 0 ? (size_t)w : 0;
}

/* Take c's responses that are there (the server passed over): how many lines, their ids
 * (numbers) checked to come in order from *next. */
static long take_responses(int c, char *buf, size_t *have, size_t cap, long *next)
{
    long k = 0;
    ssize_t r;
    while ((r = recv(c, buf + *have, cap - 1 - *have, MSG_DONTWAIT)) > 0)
        *have += (size_t)r;
    buf[*have] = 0;
    char *nl;
    while ((nl = memchr(buf, '\n', *have))) {
        const char *id = strstr(buf, "\"id\":");
        assert_true(id && id < nl);
        assert_int_equal(atol(id + 5), *next);
        ++*next;
        k++;
        *have -= (size_t)(nl + 1 - buf);
        memmove(buf, nl + 1, *have);
        buf[*have] = 0;
    }
    return k;
}

/* n lines of len bytes each (len >= 30): {"id": I, "pad": "xx..."}, I from 0. */
static char *id_lines(int n, int len)
{
    char *x = malloc((size_t)n * (size_t)len);
    assert_non_null(x);
    for (int i = 0; i < n; i++) {
        char *l = x + (size_t)i * (size_t)len;
        int h = snprintf(l, (size_t)len, "{\"id\": %d, \"pad\": \"", i);
        memset(l + h, 'x', (size_t)(len - h - 3));
        memcpy(l + len - 3, "\"}\n", 3);
    }
    return x;
}

/* Past the bound on the bytes received and not yet taken, whole lines waiting count too:
 * the server reads no more (what the client sends waits at its socket) until lines are
 * taken, then reads on, losing and reordering none; another client's partial line waits
 * meanwhile, and is served once whole. */
static void test_in_bound(void **state)
{
    (void)state;
    int a, b;
    server *s = serve_bound(100000, &a, &b);
    llm_infer_io *io = &s->io;
    enum { LINES = 4000, LEN = 1000 };   /* 4 MB: 40 times the bound */
    char *x = id_lines(LINES, LEN), *got = malloc(1 << 16);
    assert_non_null(got);
    send_str(io, b, "{\"id\": \"b\", \"prompt\": \"RO");   /* b: part of a line */
    io->ready(io->in);
    /* a sends while the server passes over the sockets, taking no line: what it could
     * send is the bound, one read (64 KiB) and what the sockets between hold, not 4 MB */
    size_t sent = 0;
    for (int quiet = 0; quiet < 20 && sent < (size_t)LINES * LEN; nap_ms(10)) {
        size_t w = send_some(a, x + sent, (size_t)LINES * LEN - sent);
        sent += w;
        quiet = w ? 0 : quiet + 1;
        io->ready(io->in);
    }
    assert_true(sent < 1000000);
    send_str(io, b, "MEO");
    /* lines taken, the rest is read: each answered once, in order */
    long next = 0, answered = 0;
    size_t have = 0;
    char buf[4096];
    while (answered < LINES) {
        sent += send_some(a, x + sent, (size_t)LINES * LEN - sent);
        if (io->ready(io->in)) {
            answer_now(io, buf, sizeof buf);
            answered++;
        } else
            nap_ms(10);
        take_responses(a, got, &have, 1 << 16, &next);
    }
    assert_int_equal(sent, (size_t)LINES * LEN);
    for (int i = 0; i < 100 && next < LINES; i++) {
        nap_ms(20);
        io->ready(io->in);
        take_responses(a, got, &have, 1 << 16, &next);
    }
    assert_int_equal(next, LINES);
    /* and b's line, read at last, is whole once it ends */
    send_str(io, b, ":\"}\n");
    assert_non_null(strstr(answer(io, buf, sizeof buf), "tokenizer"));
    read_response(io, b, buf, sizeof buf);
    assert_non_null(strstr(buf, "\"id\":\"b\""));
    free(x);
    free(got);
    close(b);
    finish(s);
}

/* A server with a 0.3 s timeout, past its bound on what all clients sent: client *a sent
 * HELD_LINES whole lines (*x, for the caller to free) and *b sent b_part, all read; then
 * the bound is set under what waits, so nothing more is read until lines are taken. */
enum { HELD_LINES = 200, HELD_LEN = 1000 };
static server *serve_held(const char *b_part, int *a, int *b, char **x)
{
    server *s = serve(0.3);
    llm_infer_io *io = &s->io;
    *a = s->c;
    *b = join(s->dir, io);
    *x = id_lines(HELD_LINES, HELD_LEN);
    send_all(io, *a, *x, (size_t)HELD_LINES * HELD_LEN);   /* 200 KB of whole lines, read */
    send_str(io, *b, b_part);
    io->ready(io->in);
    io->ready(io->in);
    llm_infer_net_set_max_in(s->n, 100000);   /* now past the bound: nothing is read */
    return s;
}

/* A client on part of a line whose next bytes wait unread at its socket, past the bound
 * on what all clients sent, is not timed out as stalled (the server is slow, not it),
 * however long that lasts; once lines are taken, they are read and its line served. */
static void test_held_not_stalled(void **state)
{
    (void)state;
    int a, b;
    char *x, buf[4096];
    server *s = serve_held("{\"id\": \"b\", \"prompt\": \"RO", &a, &b, &x);
    llm_infer_io *io = &s->io;
    send_str(io, b, "MEO");
    assert_true(kept_for(io, b, 1000));   /* three times b's timeout */
    for (int i = 0; i < HELD_LINES; i++)
        answer(io, buf, sizeof buf);
    send_str(io, b, ":\"}\n");
    assert_non_null(strstr(answer(io, buf, sizeof buf), "tokenizer"));
    read_response(io, b, buf, sizeof buf);
    assert_non_null(strstr(buf, "\"id\":\"b\""));
    free(x);
    close(b);
    finish(s);
}

/* A client on part of a line that ends its input (no '\n': its last line is whole) while
 * nothing is read, past the bound on what all clients sent, has a request in flight: it
 * is not timed out as stalled, and its line is served once lines are taken. */
static void test_eof_while_held(void **state)
{
    (void)state;
    int a, b;
    char *x, buf[4096];
    server *s = serve_held("{\"id\": \"b\", \"prompt\": \"ROMEO:\"}", &a, &b, &x);
    llm_infer_io *io = &s->io;
    assert_int_equal(shutdown(b, SHUT_WR), 0);   /* b's line is whole now */
    assert_true(kept_for(io, b, 1000));   /* three times b's timeout */
    int bs = 0;   /* b's line among a's (taken in turn), refused for want of a tokenizer */
    for (int i = 0; i < HELD_LINES + 1; i++)
        bs += strstr(answer(io, buf, sizeof buf), "tokenizer") != NULL;
    assert_int_equal(bs, 1);
    read_response(io, b, buf, sizeof buf);
    assert_non_null(strstr(buf, "\"id\":\"b\""));
    free(x);
    close(b);
    finish(s);
}

/* Bytes the process has allocated now. */
#ifdef __SANITIZE_ADDRESS__
size_t __sanitizer_get_current_allocated_bytes(void);
static size_t allocated(void)
{
    return __sanitizer_get_current_allocated_bytes();
}
#else
static size_t allocated(void)
{
    struct mallinfo2 m = mallinfo2();
    return m.uordblks + m.hblkhd;
}
#endif

/* A client's input buffer, grown for a long line, is made small again once the line is
 * taken and little is left (part of the next line): 8 clients that each sent a line of
 * 1.5 MiB and part of another keep well under the 2 MiB each their lines needed. */
static void test_in_shrinks(void **state)
{
    (void)state;
    server *s = serve(0);
    llm_infer_io *io = &s->io;
    enum { CLIENTS = 8 };
    size_t big = 3u << 19;
    char *x = malloc(big + 1), buf[4096];
    assert_non_null(x);
    memset(x, 'x', big);
    x[big] = '\n';
    int c[CLIENTS];
    c[0] = s->c;
    for (int k = 1; k < CLIENTS; k++)
        c[k] = join(s->dir, io);
    size_t before = allocated();
    for (int k = 0; k < CLIENTS; k++) {
        send_all(io, c[k], x, big + 1);
        send_str(io, c[k], "{\"id\": \"next");
        assert_non_null(strstr(answer(io, buf, sizeof buf), "JSON"));
        read_response(io, c[k], buf, sizeof buf);
    }
    settle(io);
    size_t after = allocated();
    assert_true(after < before + 6 * ((size_t)1 << 20));
    for (int k = 1; k < CLIENTS; k++)
        close(c[k]);
    free(x);
    finish(s);
}

int main(void)
{
    signal(SIGPIPE, SIG_IGN);
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_spoke_in_time),
        cmocka_unit_test(test_tiny_timeout),
        cmocka_unit_test(test_quiet_stays),
        cmocka_unit_test(test_unread_closed),
        cmocka_unit_test(test_partial_bound),
        cmocka_unit_test(test_in_bound),
        cmocka_unit_test(test_held_not_stalled),
        cmocka_unit_test(test_eof_while_held),
        cmocka_unit_test(test_in_shrinks),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
