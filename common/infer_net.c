/* infer_net.c — llm-infer --listen: requests from socket clients (infer_net.h). */
#include "common/infer_net.h"

#include <errno.h>
#include <fcntl.h>
#include <netdb.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include "common/clock.h"

#ifndef LLM_INFER_NET_READ_CHUNK   /* the fuzz build makes it small, as LLM_INFER_MAX_LINE */
#define LLM_INFER_NET_READ_CHUNK (64u << 10)
#endif
#define READ_CHUNK LLM_INFER_NET_READ_CHUNK
/* The output buffer's size past which the sent bytes are always moved out of the way
 * rather than the buffer grown: at most LLM_INFER_NET_MAX_OUT bytes wait when a response
 * is added (more and the client was dropped), so half of it is then free. */
#define OUT_CAP_MAX (2 * (size_t)LLM_INFER_NET_MAX_OUT)

/* A buffer of bytes p[off, n) waiting to be used (taken as lines, or sent), in cap
 * allocated bytes: consumed by moving off, made room in by nbuf_room. */
typedef struct {
    char *p;
    size_t off, n, cap;
} nbuf;

typedef struct {
    int fd;              /* -1: a free entry */
    uint32_t gen;        /* bumped when the entry is reused: late responses are dropped */
    nbuf in;             /* bytes received; in.p[in.off, in.n) not yet taken as lines */
    size_t scan;         /* no '\n' in in.p[in.off, scan): each byte is looked for once */
    size_t open;         /* after the last '\n' received: where the open line starts */
    int skipping;        /* inside a cut line (longer than LLM_INFER_MAX_LINE, or crowded
                            out by bound_partial): drop to its end */
    int toolong;         /* cut lines not yet answered; crowded of them by bound_partial */
    int crowded;
    int eof;             /* the client sent its last byte */
    int held;            /* bytes of it wait at its socket, left unread while the bound on
                            what all clients sent is reached (in_full) */
    nbuf out;            /* responses; out.p[out.off, out.n) not yet sent */
    long pending;        /* requests taken and not yet answered */
    uint64_t last;       /* when it last sent a byte or was sent one (ns, monotonic) */
    uint64_t moved;      /* with responses waiting: when they began to, or last moved */
} conn;

struct llm_infer_net {
    int lfd;
    char *unix_path;     /* removed at the end, if still the socket bound here: */
    dev_t unix_dev;
    ino_t unix_ino;
    conn c[LLM_INFER_NET_MAX_CONN];
    int next;            /* the connection to look at first for a line (round robin) */
    int accept_wait;     /* accept failed for want of descriptors or memory: the listener
                            stays readable, so leave it out of the next poll */
    uint64_t idle_ns;    /* --idle-timeout (0: none) */
    size_t max_in;       /* bytes received and not yet taken, all clients together */
    unsigned turn;       /* where pump's pass over the clients starts (in turn) */
    llm_infer_source *src;
    volatile sig_atomic_t *stop;
    long answered;
};

static void flush_out(conn *c);
static void read_in(llm_infer_net *n, conn *c);
static int has_line(conn *c);

static void conn_close(conn *c)
{
    if (c->fd >= 0)
        close(c->fd);
    free(c->in.p);
    free(c->out.p);
    uint32_t gen = c->gen + 1;
    memset(c, 0, sizeof *c);
    c->fd = -1;
    c->gen = gen;
}

/* ---- the listening socket ---- */

static int listen_unix(llm_infer_net *n, const char *path, char *bound, size_t blen,
                       llm_status *st)
{
    struct sockaddr_un sa;
    memset(&sa, 0, sizeof sa);
    sa.sun_family = AF_UNIX;
    if (!*path || strlen(path) >= sizeof sa.sun_path)
        return llm_err(st, LLM_EUSAGE, "--listen unix:%s: the path must have 1..%zu bytes", path,
                       sizeof sa.sun_path - 1);
    memcpy(sa.sun_path, path, strlen(path));
    struct stat sb;
    if (lstat(path, &sb) == 0) {
        if (!S_ISSOCK(sb.st_mode))
            return llm_err(st, LLM_EUSAGE, "--listen unix:%s: a file that is not a socket is there",
                           path);
        /* a socket left by an earlier server, unless one still listens there */
        int probe = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
        int live = probe >= 0 && (connect(probe, (struct sockaddr *)&sa, sizeof sa) == 0 ||
                                  errno == EAGAIN || errno == EINPROGRESS);
        if (probe >= 0)
            close(probe);
        if (live)
            return llm_err(st, LLM_EIO, "--listen unix:%s: a server is listening there", path);
        unlink(path);
    }
    n->lfd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
    if (n->lfd < 0 || bind(n->lfd, (struct sockaddr *)&sa, sizeof sa) < 0)
        return llm_err(st, LLM_EIO, "--listen unix:%s: %s", path, strerror(errno));
    if (lstat(path, &sb) == 0) {   /* ours to remove at the end (not a file put there since) */
        if (!(n->unix_path = strdup(path)))
            return llm_err(st, LLM_ENOMEM, "out of memory");
        n->unix_dev = sb.st_dev;
        n->unix_ino = sb.st_ino;
    }
    snprintf(bound, blen, "unix:%s", path);
    return LLM_OK;
}

static int listen_tcp(llm_infer_net *n, const char *addr, char *bound, size_t blen, llm_status *st)
{
    char host[256];
    const char *colon = strrchr(addr, ':');
    size_t hl = colon ? (size_t)(colon - addr) : 0;
    if (!colon || !hl || hl >= sizeof host || !colon[1] || colon[1 + strspn(colon + 1, "0123456789")])
        return llm_err(st, LLM_EUSAGE, "--listen '%s': expected HOST:PORT, [IPV6]:PORT or unix:PATH",
                       addr);
    /* getaddrinfo takes any number as a service and keeps its low 16 bits: 65536 is 0 */
    if (strtoul(colon + 1, NULL, 10) > 65535)   /* ULONG_MAX past its range */
        return llm_err(st, LLM_EUSAGE, "--listen '%s': the port must be in 0..65535", addr);
    memcpy(host, addr, hl);
    host[hl] = 0;
    if (host[0] == '[' && host[hl - 1] == ']') {   /* [::1] */
        memmove(host, host + 1, hl - 2);
        host[hl - 2] = 0;
    }
    struct addrinfo hints, *ai = NULL;
    memset(&hints, 0, sizeof hints);
    hints.ai_family = AF_UNSPEC;
    hints.ai_socktype = SOCK_STREAM;
    hints.ai_flags = AI_PASSIVE | AI_NUMERICSERV;
    int g = getaddrinfo(host, colon + 1, &hints, &ai);
    if (g)
        return llm_err(st, LLM_EUSAGE, "--listen '%s': %s", addr, gai_strerror(g));
    int rc = LLM_OK;
    n->lfd = socket(ai->ai_family, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
    int one = 1;
    if (n->lfd < 0 || setsockopt(n->lfd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one) < 0 ||
        bind(n->lfd, ai->ai_addr, ai->ai_addrlen) < 0)
        rc = llm_err(st, LLM_EIO, "--listen '%s': %s", addr, strerror(errno));
    int family = ai->ai_family;
    freeaddrinfo(ai);
    struct sockaddr_storage ss;
    socklen_t sl = sizeof ss;
    char h[NI_MAXHOST], p[NI_MAXSERV];
    if (!rc && (getsockname(n->lfd, (struct sockaddr *)&ss, &sl) < 0 ||
                getnameinfo((struct sockaddr *)&ss, sl, h, sizeof h, p, sizeof p,
                            NI_NUMERICHOST | NI_NUMERICSERV)))
        rc = llm_err(st, LLM_EIO, "--listen '%s': cannot read the bound address", addr);
    if (!rc)
        snprintf(bound, blen, family == AF_INET6 ? "[%s]:%s" : "%s:%s", h, p);
    return rc;
}

int llm_infer_net_open(llm_infer_net **out, const char *addr, double idle_s,
                       llm_infer_source *src, volatile sig_atomic_t *stop, char *bound,
                       size_t boundlen, llm_status *st)
{
    *out = NULL;
    llm_infer_net *n = calloc(1, sizeof *n);
    if (!n)
        return llm_err(st, LLM_ENOMEM, "out of memory");
    n->lfd = -1;
    for (int i = 0; i < LLM_INFER_NET_MAX_CONN; i++)
        n->c[i].fd = -1;
    /* the caller bounds it; under a nanosecond is still a timeout (0 is none) */
    n->idle_ns = idle_s > 0 ? (uint64_t)(idle_s * 1e9) : 0;
    if (idle_s > 0 && !n->idle_ns)
        n->idle_ns = 1;
    n->max_in = LLM_INFER_NET_MAX_IN;
    n->src = src;
    n->stop = stop;
    int rc = !strncmp(addr, "unix:", 5) ? listen_unix(n, addr + 5, bound, boundlen, st)
                                        : listen_tcp(n, addr, bound, boundlen, st);
    if (!rc && listen(n->lfd, 64) < 0)
        rc = llm_err(st, LLM_EIO, "--listen '%s': %s", addr, strerror(errno));
    if (rc) {
        llm_infer_net_free(n);
        return rc;
    }
    *out = n;
    return LLM_OK;
}

/* Send what waits for the clients (responses already made, the last ones "interrupted")
 * for up to ms milliseconds: a client that reads slowly still gets them; one that does
 * not read delays the end by ms at most. */
static void drain(llm_infer_net *n, int ms)
{
    uint64_t end = llm_now_ns() + (uint64_t)ms * 1000000u;
    for (;;) {
        struct pollfd p[LLM_INFER_NET_MAX_CONN];
        int idx[LLM_INFER_NET_MAX_CONN], k = 0;
        for (int i = 0; i < LLM_INFER_NET_MAX_CONN; i++)
            if (n->c[i].fd >= 0 && n->c[i].out.n > n->c[i].out.off) {
                p[k] = (struct pollfd){.fd = n->c[i].fd, .events = POLLOUT};
                idx[k++] = i;
            }
        uint64_t t = llm_now_ns();
        if (!k || t >= end)
            return;
        int left = (int)((end - t + 999999) / 1000000);
        int r = poll(p, (nfds_t)k, left);
        if (r < 0 && errno != EINTR)
            return;
        for (int j = 0; r > 0 && j < k; j++)
            if (p[j].revents)
                flush_out(&n->c[idx[j]]);
    }
}

void llm_infer_net_free(llm_infer_net *n)
{
    if (!n)
        return;
    drain(n, LLM_INFER_NET_DRAIN_MS);
    for (int i = 0; i < LLM_INFER_NET_MAX_CONN; i++)
        if (n->c[i].fd >= 0)
            conn_close(&n->c[i]);
    if (n->lfd >= 0)
        close(n->lfd);
    struct stat sb;
    if (n->unix_path && lstat(n->unix_path, &sb) == 0 && S_ISSOCK(sb.st_mode) &&
        sb.st_dev == n->unix_dev && sb.st_ino == n->unix_ino)
        unlink(n->unix_path);
    free(n->unix_path);
    free(n);
}

long llm_infer_net_answered(const llm_infer_net *n)
{
    return n->answered;
}

void llm_infer_net_set_max_in(llm_infer_net *n, size_t bytes)
{
    n->max_in = bytes;
}

/* ---- moving bytes ---- */

/* Whether c may be closed to make room: nothing of it in flight (no request taken and not
 * yet answered, no whole line waiting to be taken, no response waiting to be sent, no
 * bytes left unread at its socket by the bound on what all clients sent), so that all
 * it loses is a partial line it has not finished sending. */
static int replaceable(conn *c)
{
    return c->fd >= 0 && !c->pending && !c->toolong && !c->held && c->out.off == c->out.n &&
           !has_line(c);
}

/* Whether c has sent part of a line and not (yet) the rest: bytes after its last '\n'
 * (open_bytes: how many), or an over-long line being dropped to its end.  (At the end of
 * its input, what follows the last '\n' is a whole line.) */
static size_t open_bytes(const conn *c)
{
    return c->fd >= 0 && !c->eof ? c->in.n - c->open : 0;
}

static int partial(const conn *c)
{
    return c->fd >= 0 && !c->eof && (c->skipping || open_bytes(c));
}

/* The client silent the longest of those that may be closed to make room; -1 if none.
 * What the candidates sent is read first: a request already at the socket is in flight,
 * and a client that just spoke is not the silent one. */
static int silent_longest(llm_infer_net *n)
{
    int best = -1;
    for (int i = 0; i < LLM_INFER_NET_MAX_CONN; i++)
        if (replaceable(&n->c[i]))
            read_in(n, &n->c[i]);
    for (int i = 0; i < LLM_INFER_NET_MAX_CONN; i++) {
        conn *c = &n->c[i];
        if (c->fd < 0)
            return i;   /* read_in closed one (a reset): its place is free */
        if (replaceable(c) && (best < 0 || c->last < n->c[best].last))
            best = i;
    }
    return best;
}

static void accept_all(llm_infer_net *n)
{
    for (;;) {
        int fd = accept4(n->lfd, NULL, NULL, SOCK_NONBLOCK | SOCK_CLOEXEC);
        if (fd < 0) {
            if (errno == EMFILE || errno == ENFILE || errno == ENOBUFS || errno == ENOMEM)
                n->accept_wait = 1;   /* not a busy loop: try again in a while */
            return;   /* EAGAIN, or a client that went away while queued */
        }
        int i = 0;
        while (i < LLM_INFER_NET_MAX_CONN && n->c[i].fd >= 0)
            i++;
        if (i == LLM_INFER_NET_MAX_CONN && (i = silent_longest(n)) >= 0 && n->c[i].fd >= 0)
            conn_close(&n->c[i]);   /* full: the client silent the longest makes room */
        if (i < 0) {
            close(fd);   /* full of busy clients: the newcomer sees its connection closed */
            continue;
        }
        n->c[i].fd = fd;
        n->c[i].last = llm_now_ns();
    }
}

/* All used: the buffer starts over (and is given back when large). */
static void nbuf_reset(nbuf *b)
{
    b->off = b->n = 0;
    if (b->cap > 4 * READ_CHUNK) {
        free(b->p);
        b->p = NULL;
        b->cap = 0;
    }
}

/* Move the waiting bytes to the front; returns how far they moved. */
static size_t nbuf_compact(nbuf *b)
{
    size_t k = b->off;
    memmove(b->p, b->p + k, b->n - k);
    b->n -= k;
    b->off = 0;
    return k;
}

/* Give back what a large buffer (past 4 chunks, as nbuf_reset) does not use: when its
 * waiting bytes fill an eighth of it at most, they move to the front and it is cut to
 * four times their size (4 chunks at least); returns how far they moved (0: not cut).
 * So a buffer grown once for a long line, or for a backlog of responses, does not keep
 * that size while it holds little.  Nor is one in steady use resized back and forth:
 * after a cut it is a quarter full at most, so it grows again (when full) only once what
 * waits has grown fourfold, and is cut again only once that has halved. */
static size_t nbuf_trim(nbuf *b)
{
    size_t live = b->n - b->off, nc = 4 * live;
    if (b->cap <= 4 * (size_t)READ_CHUNK || live > b->cap / 8)
        return 0;
    if (nc < 4 * (size_t)READ_CHUNK)
        nc = 4 * (size_t)READ_CHUNK;
    size_t moved = nbuf_compact(b);
    char *p = realloc(b->p, nc);
    if (p) {   /* (else it stays as large: nothing is lost) */
        b->p = p;
        b->cap = nc;
    }
    return moved;
}

/* Room for need more bytes after p[n]: 0, or -1 out of memory; *moved: how far the
 * waiting bytes moved (0 if they did not).  The used bytes are dropped by moving the
 * waiting ones when that costs no more than the bytes used since the last move, or when
 * the buffer is as large as it gets (max: twice the most that may wait, so half of it is
 * then free); else it doubles (from first).  Each byte is moved a bounded number of
 * times, not once per line taken or response added. */
static int nbuf_room(nbuf *b, size_t need, size_t first, size_t max, size_t *moved)
{
    *moved = 0;
    if (b->cap - b->n >= need)
        return 0;
    if (b->off && (b->off >= b->n - b->off || b->cap >= max)) {
        *moved = nbuf_compact(b);
        if (b->cap - b->n >= need)
            return 0;
    }
    size_t nc = b->cap ? b->cap * 2 : first;
    if (nc > max)
        nc = max;
    if (nc < b->n + need)
        nc = b->n + need;   /* more than the rest of the room at once */
    char *p = realloc(b->p, nc);
    if (!p) {
        if (!b->off)
            return -1;
        *moved += nbuf_compact(b);   /* short of memory: what the used bytes leave may do */
        return b->cap - b->n >= need ? 0 : -1;
    }
    b->p = p;
    b->cap = nc;
    return 0;
}

/* Room in c's input for a chunk and a final 0; the line marks move with the bytes. */
static int in_room(conn *c)
{
    size_t moved;
    int rc = nbuf_room(&c->in, READ_CHUNK + 1, 2 * READ_CHUNK, 2 * (size_t)LLM_INFER_MAX_LINE,
                       &moved);
    c->scan -= moved;
    c->open -= moved;
    return rc;
}

/* After bytes of c's input were taken or dropped: what is left starts over when nothing
 * is, else a large buffer holding little is made smaller (nbuf_trim); the line marks
 * move with the bytes. */
static void in_used(conn *c)
{
    if (c->in.off == c->in.n) {
        nbuf_reset(&c->in);
        c->scan = c->open = 0;
        return;
    }
    size_t moved = nbuf_trim(&c->in);
    c->scan -= moved;
    c->open -= moved;
}

/* Send what waits for c; a client that is gone or stuck is closed. */
static void flush_out(conn *c)
{
    while (c->fd >= 0 && c->out.off < c->out.n) {
        ssize_t w = send(c->fd, c->out.p + c->out.off, c->out.n - c->out.off, MSG_NOSIGNAL);
        if (w < 0 && errno == EINTR)
            continue;
        if (w < 0 && (errno == EAGAIN || errno == EWOULDBLOCK))
            break;
        if (w <= 0) {
            conn_close(c);
            return;
        }
        c->out.off += (size_t)w;
        c->last = c->moved = llm_now_ns();
    }
    if (c->fd >= 0 && c->out.off == c->out.n)
        nbuf_reset(&c->out);
    else if (c->fd >= 0)
        nbuf_trim(&c->out);   /* a backlog that shrank gives its room back */
    if (c->fd >= 0 && c->out.n - c->out.off > LLM_INFER_NET_MAX_OUT)
        conn_close(c);
    if (c->fd >= 0 && c->eof && !c->pending && c->in.n == c->in.off && !c->toolong &&
        c->out.n == 0)
        conn_close(c);   /* said all it had to say, and heard every answer */
}

/* The end ('\n') of c's first whole line, or NULL; bytes already looked at are not
 * looked at again (a client may pipeline up to LLM_INFER_MAX_LINE bytes of requests,
 * and this is asked once per decode step). */
static char *line_end(conn *c)
{
    if (c->scan < c->in.n) {
        char *nl = memchr(c->in.p + c->scan, '\n', c->in.n - c->scan);
        c->scan = nl ? (size_t)(nl - c->in.p) : c->in.n;   /* at the '\n': found at once again */
        return nl;
    }
    return NULL;
}

/* Whether c holds a whole line (or an over-long one to answer). */
static int has_line(conn *c)
{
    return c->fd >= 0 && (c->toolong || line_end(c) || (c->eof && c->in.n > c->in.off));
}

/* Cut c's open line: it is answered with an error (toolong), the rest of it dropped as
 * it comes.  The whole lines before it stay; a large buffer gives back what they leave. */
static void cut_open_line(conn *c)
{
    c->in.n = c->open;
    if (c->scan > c->in.n)
        c->scan = c->in.n;
    c->toolong++;
    c->skipping = 1;
    in_used(c);
}

/* The unfinished lines of all clients past n->max_in bytes: cut the longest until they
 * are not (each answered with an error, as an over-long line is).  So however many
 * clients stall on long lines, what waits for their ends stays bounded; whole lines are
 * not cut, as they can be taken instead (in_full). */
static void bound_partial(llm_infer_net *n)
{
    for (;;) {
        size_t total = 0, most = 0;
        int big = -1;
        for (int i = 0; i < LLM_INFER_NET_MAX_CONN; i++) {
            size_t b = open_bytes(&n->c[i]);
            total += b;
            if (b > most) {
                most = b;
                big = i;
            }
        }
        if (big < 0 || total <= n->max_in)
            return;
        cut_open_line(&n->c[big]);
        n->c[big].crowded++;
    }
}

/* Whether the bytes received and not yet taken, all clients together, are past n->max_in:
 * then no client is read until whole lines are taken (bound_partial keeps the unfinished
 * ones within the bound, so some are whole and can be: no client waits for another's
 * bytes), and what they send waits at their sockets; so the server holds at most the
 * bound and one read. */
static int in_full(const llm_infer_net *n)
{
    size_t total = 0;
    for (int i = 0; i < LLM_INFER_NET_MAX_CONN; i++)
        if (n->c[i].fd >= 0)
            total += n->c[i].in.n - n->c[i].in.off;
    return total > n->max_in;
}

/* Read what c sent; keeps at most one line's worth, counting longer lines to answer.
 * A client whose bytes find no memory is closed: left in the poll set with its bytes
 * unread, it would wake every poll at once for as long as memory is short. */
static void read_in(llm_infer_net *n, conn *c)
{
    /* past a line's worth unread there is a whole line at least: take it first (also when
     * a hangup, not POLLIN, brought us here) */
    while (c->in.n - c->in.off <= LLM_INFER_MAX_LINE) {
        if (in_full(n)) {   /* what c sent waits; say whether anything does (replaceable) */
            char b;
            ssize_t r = recv(c->fd, &b, 1, MSG_PEEK | MSG_DONTWAIT);
            c->held = r > 0;
            if (r == 0)
                c->eof = 1;   /* its end, nothing before it: what follows its last '\n' is
                                 a whole line (in flight), not a stalled partial one */
            return;
        }
        if (in_room(c) < 0) {
            conn_close(c);
            return;
        }
        ssize_t r = recv(c->fd, c->in.p + c->in.n, READ_CHUNK, 0);
        if (r < 0 && errno == EINTR)
            continue;
        if (r < 0 && (errno == EAGAIN || errno == EWOULDBLOCK))
            return;
        if (r <= 0) {
            if (r < 0)
                conn_close(c);   /* reset: nobody to answer */
            else
                c->eof = 1;
            return;
        }
        size_t start = c->in.n;
        c->in.n += (size_t)r;
        c->last = llm_now_ns();
        c->held = 0;
        if (c->skipping) {   /* drop to the end of the over-long line, keeping the whole
                                lines received before it (not yet taken) */
            char *nl = memchr(c->in.p + start, '\n', c->in.n - start);
            size_t keep = nl ? c->in.n - (size_t)(nl + 1 - c->in.p) : 0;
            memmove(c->in.p + start, c->in.p + c->in.n - keep, keep);
            c->in.n = start + keep;
            c->skipping = !nl;
        }
        /* a line still open past the limit: answer it once, drop the rest of it */
        char *last = c->in.n > start ? memrchr(c->in.p + start, '\n', c->in.n - start) : NULL;
        if (last)
            c->open = (size_t)(last + 1 - c->in.p);
        if (c->in.n - c->open > LLM_INFER_MAX_LINE)
            cut_open_line(c);
        bound_partial(n);   /* (it may cut c's line, or another's) */
    }
}

/* --idle-timeout: close the clients stalled that long: one holding part of a line with
 * nothing in flight that has sent nothing more for that long (what it sent is read first:
 * a request at the socket is in flight, and new bytes are progress), and one whose waiting
 * responses its socket has taken nothing of for that long (it loses them, as a client
 * that leaves 16 MiB unread does).  A client quiet between requests (no part of a line,
 * nothing in flight) is not timed out: it holds a place and no memory to speak of, and
 * a newcomer takes that place when all are taken. */
static void expire(llm_infer_net *n)
{
    if (!n->idle_ns)
        return;
    uint64_t t = llm_now_ns();
    for (int i = 0; i < LLM_INFER_NET_MAX_CONN; i++) {
        conn *c = &n->c[i];
        if (t - c->last >= n->idle_ns && replaceable(c) && partial(c)) {   /* cheap test first */
            read_in(n, c);   /* bytes read now move c->last past t: it went on */
            if (replaceable(c) && partial(c) && c->last <= t)
                conn_close(c);
        } else if (c->fd >= 0 && c->out.n > c->out.off && t - c->moved >= n->idle_ns)
            conn_close(c);
    }
}

/* Accept, read and write what is ready; wait up to timeout_ms (-1: until something is). */
static void pump(llm_infer_net *n, int timeout_ms)
{
    struct pollfd p[LLM_INFER_NET_MAX_CONN + 1];
    int idx[LLM_INFER_NET_MAX_CONN + 1], k = 0;
    if (n->accept_wait) {   /* queued clients wait; look again in 100 ms at most */
        n->accept_wait = 0;
        if (timeout_ms < 0 || timeout_ms > 100)
            timeout_ms = 100;
    } else {
        p[k] = (struct pollfd){.fd = n->lfd, .events = POLLIN};
        idx[k++] = -1;
    }
    int full = in_full(n);   /* none is read: see there */
    for (int i = 0; i < LLM_INFER_NET_MAX_CONN; i++) {
        conn *c = &n->c[i];
        if (c->fd < 0)
            continue;
        short ev = 0;
        if (!full && !c->eof && c->in.n - c->in.off <= LLM_INFER_MAX_LINE)
            ev |= POLLIN;
        if (c->out.n > c->out.off)
            ev |= POLLOUT;
        p[k] = (struct pollfd){.fd = c->fd, .events = ev};
        idx[k++] = i;
    }
    int r = poll(p, (nfds_t)k, timeout_ms);   /* < 0: a signal; the caller looks at stop */
    /* each pass starts at another client: near the bound on what all send, the first read
     * takes what room there is, and that is not always the same client */
    unsigned first = k ? n->turn++ % (unsigned)k : 0;
    for (int jj = 0; r > 0 && jj < k; jj++) {
        int j = (int)(((unsigned)jj + first) % (unsigned)k);
        if (!p[j].revents)
            continue;
        if (idx[j] < 0) {
            accept_all(n);
            continue;
        }
        conn *c = &n->c[idx[j]];
        if (c->fd >= 0 && (p[j].revents & (POLLIN | POLLHUP | POLLERR)))
            read_in(n, c);   /* (accept_all may have closed it to make room) */
        if (c->fd >= 0)
            flush_out(c);
    }
    expire(n);
}

/* ---- llm_infer_io ---- */

/* A line cut for the bound on unfinished lines (bound_partial) says so, not that it was
 * over-long: 1, or -1 out of memory (req freed). */
static int crowded_error(const llm_infer_net *n, llm_infer_request *req, llm_status *st)
{
    char msg[200], lim[32];
    llm_infer_bytes_str(lim, sizeof lim, n->max_in);
    snprintf(msg, sizeof msg, "input line cut: the unfinished lines of all clients passed the "
             "server's %s, and this one was the longest", lim);
    char *e = strdup(msg);
    if (!e) {
        llm_infer_request_free(req);
        llm_err(st, LLM_ENOMEM, "out of memory");
        return -1;
    }
    free(req->error);
    req->error = e;
    return 1;
}

/* The next whole line of any client, as a request: 1, 2 when only blank lines were there,
 * 0 when there is none now, -1 out of memory. */
static int take_line(llm_infer_net *n, llm_infer_request *req, llm_status *st)
{
    int blank = 0;
    for (int t = 0; t < LLM_INFER_NET_MAX_CONN; t++) {
        int i = (n->next + t) % LLM_INFER_NET_MAX_CONN;
        conn *c = &n->c[i];
        while (has_line(c)) {
            int r;
            if (c->toolong) {
                int crowded = c->crowded > 0;
                c->toolong--;
                c->crowded -= crowded;
                r = llm_infer_source_request(n->src, "", 0, 1, req, st);
                if (r > 0 && crowded)
                    r = crowded_error(n, req, st);
            } else {
                char *line = c->in.p + c->in.off, *nl = line_end(c);
                size_t len = nl ? (size_t)(nl - line) : c->in.n - c->in.off;
                size_t used = nl ? len + 1 : len;
                /* read_in cuts a line once it is open past the limit; one whose end came
                 * in the same read is over it too (the limit counts a CR, as on stdin) */
                int over = len > LLM_INFER_MAX_LINE;
                if (over)
                    len = 0;
                else if (len && line[len - 1] == '\r')
                    len--;
                char save = line[len];
                line[len] = 0;
                r = llm_infer_source_request(n->src, over ? "" : line, len, over, req, st);
                line[len] = save;
                c->in.off += used;   /* taken: moved out of the way by in_room, or in_used */
                c->scan = c->in.off;
                in_used(c);
            }
            if (r < 0)
                return -1;
            if (r == 0) {
                blank = 1;
                continue;
            }
            req->route = (uint64_t)c->gen << 16 | (uint64_t)i;
            c->pending++;
            n->next = (i + 1) % LLM_INFER_NET_MAX_CONN;
            return 1;
        }
        if (c->fd >= 0)
            flush_out(c);   /* closes a client that has said everything */
    }
    return blank ? 2 : 0;
}

static int net_next(void *u, llm_infer_request *req, llm_status *st)
{
    llm_infer_net *n = u;
    for (;;) {
        if (n->stop && *n->stop)
            return 0;
        int r = take_line(n, req, st);
        if (r)
            return r < 0 ? (int)st->code : r == 2 ? LLM_INFER_NEXT_NONE : 1;
        pump(n, 500);   /* a signal may go to another thread: look at stop now and then */
    }
}

static int net_ready(void *u)
{
    llm_infer_net *n = u;
    pump(n, 0);
    for (int i = 0; i < LLM_INFER_NET_MAX_CONN; i++)
        if (has_line(&n->c[i]))
            return 1;
    return 0;
}

static int net_done(void *u, const llm_infer_result *res, llm_status *st)
{
    (void)st;   /* nothing here ends the server */
    llm_infer_net *n = u;
    int i = (int)(res->req->route & 0xffff);
    uint32_t gen = (uint32_t)(res->req->route >> 16);
    n->answered++;
    if (i >= LLM_INFER_NET_MAX_CONN)
        return LLM_OK;
    conn *c = &n->c[i];
    if (c->fd < 0 || c->gen != gen)
        return LLM_OK;   /* the client went away: nobody to answer */
    c->pending--;
    /* a response that finds no memory closes its client (the others and the server go
     * on): a gap in its responses would go unseen, and its requests still in flight are
     * dropped as a departed client's */
    char *buf = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&buf, &len);
    if (f) {
        llm_infer_result_json(res, f);
        fputc('\n', f);
    }
    size_t moved;
    if (!f || fclose(f) || nbuf_room(&c->out, len, READ_CHUNK, OUT_CAP_MAX, &moved) < 0) {
        free(buf);
        conn_close(c);
        return LLM_OK;
    }
    if (c->out.off == c->out.n)
        c->moved = llm_now_ns();   /* responses begin to wait */
    memcpy(c->out.p + c->out.n, buf, len);
    c->out.n += len;
    free(buf);
    flush_out(c);
    return LLM_OK;
}

llm_infer_io llm_infer_net_io(llm_infer_net *n)
{
    llm_infer_io io = {net_next, NULL, net_done, n, n, net_ready, n->stop};
    return io;
}
