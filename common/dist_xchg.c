/* dist_xchg.c — hand a small blob (NCCL's unique id) from rank 0 to every rank without
 * MPI: through a file on a shared filesystem or a TCP port rank 0 listens on. */
#include "common/dist_impl.h"
#include "common/afile.h"
#include "common/sigstop.h"

#include <errno.h>
#include <fcntl.h>
#include <netdb.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

/* Every wait below looks at the stop request (a signal handler sets *stop) at least
 * every STOP_SLICE_MS: the signal may interrupt another thread (the watchdog) or come
 * just before a wait begins, so no wait relies on EINTR alone. */
#define STOP_SLICE_MS 250

static int stopped(const volatile sig_atomic_t *stop)
{
    return stop && *stop;
}

static void nap(void)
{
    usleep(50 * 1000);
}

/* Wait until fd is ready for events or the monotonic deadline passes: 1 ready (or an
 * error the next call reports), 0 past the deadline, -1 stopped. */
static int wait_fd(int fd, short events, double deadline, const volatile sig_atomic_t *stop)
{
    for (;;) {
        if (stopped(stop))
            return -1;
        double left = deadline - llm_now_s();
        if (left <= 0)
            return 0;
        struct pollfd pf = {fd, events, 0};
        int ms = left * 1000 < STOP_SLICE_MS ? (int)(left * 1000) + 1 : STOP_SLICE_MS;
        int k = poll(&pf, 1, ms);
        if (k > 0 || (k < 0 && errno != EINTR))
            return 1;
    }
}

/* file:PATH — rank 0 writes PATH atomically (temp + rename), making its directory when
 * missing (the first run of a job whose output directory holds it); the others wait for
 * it.  PATH must be new for each job (e.g. named after $SLURM_JOB_ID): a file left by an
 * earlier job would hand out a stale id, so rank 0 refuses one that exists, and removes
 * its own once every rank has joined (llm_dist__exchange_done). */
static int by_file(const char *path, int rank, void *blob, size_t n, double timeout_s,
                   const volatile sig_atomic_t *stop, llm_status *st)
{
    if (rank == 0) {
        struct stat old;
        if (stat(path, &old) == 0)
            return llm_err(st, LLM_EUSAGE, "dist-init: '%s' exists: an id from a job that did "
                           "not finish? Use a path new for each job, or remove it", path);
        /* armed from before it appears until llm_dist__exchange_done: a signal that ends
         * the process at once (a second SIGINT) removes it too (sigstop.h) */
        llm_sigstop_unlink_on_exit(path);
        if (llm_afile_write(path, LLM_AFILE_NODEV | LLM_AFILE_MKDIRS, blob, n, st)) {
            llm_sigstop_unlink_on_exit(NULL);
            return llm_err_prefix(st, "dist-init");
        }
        return 0;
    }
    double t0 = llm_now_s();
    for (;;) {
        struct stat sb;
        if (stat(path, &sb) == 0 && (size_t)sb.st_size == n) {
            FILE *f = fopen(path, "rb");
            size_t got = f ? fread(blob, 1, n, f) : 0;
            if (f)
                fclose(f);
            if (got == n)
                return 0;
        }
        if (stopped(stop))
            return llm_err(st, LLM_EINTR, "waiting for rank 0's id in '%s'", path);
        if (llm_now_s() - t0 > timeout_s)
            return llm_err(st, LLM_EIO, "dist-init: '%s' did not appear within %.0f s (is rank 0 "
                           "running, and is the path on a shared filesystem?)", path, timeout_s);
        nap();
    }
}

/* Send (wr) or receive n bytes by the deadline: 0, -1 failed or too late, -2 stopped. */
static int full_io(int fd, void *p, size_t n, int wr, double deadline,
                   const volatile sig_atomic_t *stop)
{
    char *c = p;
    while (n) {
        int w = wait_fd(fd, wr ? POLLOUT : POLLIN, deadline, stop);
        if (w <= 0)
            return w < 0 ? -2 : -1;
        ssize_t k = wr ? send(fd, c, n, MSG_NOSIGNAL | MSG_DONTWAIT)
                       : recv(fd, c, n, MSG_DONTWAIT);
        if (k < 0 && (errno == EINTR || errno == EAGAIN || errno == EWOULDBLOCK))
            continue;
        if (k <= 0)
            return -1;
        c += k;
        n -= (size_t)k;
    }
    return 0;
}

/* The 8 bytes a rank sends rank 0 over TCP before it gets the blob: "LLMK" and its rank
 * (little-endian), so that rank 0 counts each rank once and hands the id to no other
 * connection (a port scanner, a rank of another job). */
static void hello_pack(unsigned char h[8], int rank)
{
    memcpy(h, "LLMK", 4);
    for (int i = 0; i < 4; i++)
        h[4 + i] = (unsigned char)((unsigned)rank >> (8 * i));
}

static int hello_rank(const unsigned char h[8], int world)
{
    if (memcmp(h, "LLMK", 4))
        return -1;
    unsigned r = 0;
    for (int i = 0; i < 4; i++)
        r |= (unsigned)h[4 + i] << (8 * i);
    return r >= 1 && r < (unsigned)world ? (int)r : -1;
}

/* The ranks in [1, world) not yet seen, as "1, 3, 4" (as many as len holds, then ", ..."
 * when some are left out). */
static void missing_ranks(const char *seen, int world, char *out, size_t len)
{
    size_t o = 0;
    out[0] = 0;
    for (int r = 1; r < world; r++) {
        if (seen[r])
            continue;
        if (o + 12 >= len) {
            snprintf(out + o, len - o, ", ...");
            break;
        }
        o += (size_t)snprintf(out + o, len - o, "%s%d", o ? ", " : "", r);
    }
}

/* rank 0's side: accept until every other rank has said hello and got the blob, or
 * timeout_s after t0, or a stop request */
static int tcp_serve(int s, int world, const void *blob, size_t n, double t0, double timeout_s,
                     const char *port, const volatile sig_atomic_t *stop, llm_status *st)
{
    char *seen = calloc((size_t)world, 1);
    if (!seen)
        return llm_err(st, LLM_ENOMEM, "out of memory");
    int got = 1, rc = 0;
    char miss[104];
    while (got < world && !rc) {
        int k = wait_fd(s, POLLIN, t0 + timeout_s, stop);
        if (k <= 0) {
            missing_ranks(seen, world, miss, sizeof miss);
            if (k < 0)
                rc = llm_err(st, LLM_EINTR, "waiting for rank%s %s at port %s (%d of %d "
                             "joined)", world - got > 1 ? "s" : "", miss, port, got, world);
            else
                rc = llm_err(st, LLM_EIO, "dist-init: %d of %d ranks reached port %s within "
                             "%.0f s (missing: %s)", got, world, port, timeout_s, miss);
            break;
        }
        int c = accept4(s, NULL, NULL, SOCK_CLOEXEC);
        if (c < 0)
            continue;
        /* a peer that connects and stays silent costs at most 5 s, and never time past
         * the deadline */
        double until = llm_now_s() + 5;
        if (until > t0 + timeout_s)
            until = t0 + timeout_s;
        unsigned char h[8];
        int r = full_io(c, h, sizeof h, 0, until, stop) ? -1 : hello_rank(h, world);
        if (r > 0 && !seen[r] && !full_io(c, (void *)blob, n, 1, until, stop)) {
            seen[r] = 1;
            got++;
        }
        close(c);   /* stopped meanwhile: the next wait_fd says so */
    }
    free(seen);
    return rc;
}

/* A connection to ai by the monotonic deadline: the socket, -1 (refused, unreachable or
 * too late: try again), -2 stopped. */
static int tcp_connect(const struct addrinfo *ai, double deadline,
                       const volatile sig_atomic_t *stop)
{
    int s = socket(ai->ai_family, ai->ai_socktype, 0);
    if (s < 0)
        return -1;
    int fl = fcntl(s, F_GETFL);
    /* non-blocking: an address that drops packets would hold connect(2) for minutes */
    if (fl < 0 || fcntl(s, F_SETFL, fl | O_NONBLOCK) < 0) {
        close(s);
        return -1;
    }
    if (connect(s, ai->ai_addr, ai->ai_addrlen) == 0)
        return s;
    if (errno != EINPROGRESS && errno != EINTR) {
        close(s);
        return -1;
    }
    int w = wait_fd(s, POLLOUT, deadline, stop), err = 0;
    socklen_t len = sizeof err;
    if (w > 0 && getsockopt(s, SOL_SOCKET, SO_ERROR, &err, &len) == 0 && !err)
        return s;
    close(s);
    return w < 0 ? -2 : -1;
}

/* tcp://HOST:PORT — rank 0 listens on PORT and sends the blob to each other rank once. */
static int by_tcp(const char *hostport, int rank, int world, void *blob, size_t n,
                  double timeout_s, const volatile sig_atomic_t *stop, llm_status *st)
{
    char host[256];
    const char *colon = strrchr(hostport, ':');
    if (!colon || colon == hostport || (size_t)(colon - hostport) >= sizeof host || !colon[1])
        return llm_err(st, LLM_EUSAGE, "dist-init 'tcp://%s': want tcp://HOST:PORT", hostport);
    memcpy(host, hostport, (size_t)(colon - hostport));
    host[colon - hostport] = 0;
    struct addrinfo hints = {0}, *ai = NULL;
    hints.ai_family = AF_UNSPEC;
    hints.ai_socktype = SOCK_STREAM;
    hints.ai_flags = rank == 0 ? AI_PASSIVE : 0;
    int g = getaddrinfo(rank == 0 ? NULL : host, colon + 1, &hints, &ai);
    if (g)
        return llm_err(st, LLM_EUSAGE, "dist-init 'tcp://%s': %s", hostport, gai_strerror(g));
    int rc = 0;
    double t0 = llm_now_s();
    if (rank == 0) {
        /* non-blocking: a connection gone between poll and accept is EAGAIN, not a wait */
        int s = socket(ai->ai_family, ai->ai_socktype | SOCK_NONBLOCK | SOCK_CLOEXEC, 0), one = 1;
        if (s >= 0)
            setsockopt(s, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
        if (s < 0 || bind(s, ai->ai_addr, ai->ai_addrlen) || listen(s, world))
            rc = llm_err(st, LLM_EIO, "dist-init: cannot listen on port %s: %s", colon + 1,
                         strerror(errno));
        else
            rc = tcp_serve(s, world, blob, n, t0, timeout_s, colon + 1, stop, st);
        if (s >= 0)
            close(s);
    } else {
        unsigned char h[8];
        hello_pack(h, rank);
        for (;;) {
            int s = tcp_connect(ai, t0 + timeout_s, stop), io = 0;
            if (s >= 0) {
                /* rank 0 answers at once, after the ranks that connected before */
                io = full_io(s, h, sizeof h, 1, t0 + timeout_s, stop);
                if (!io)
                    io = full_io(s, blob, n, 0, t0 + timeout_s, stop);
                close(s);
                if (io == -1)
                    rc = llm_err(st, LLM_EIO, "dist-init: receiving the id from %s failed (is "
                                 "another process rank %d?)", hostport, rank);
                if (io != -2)
                    break;
            }
            if (s == -2 || io == -2 || stopped(stop)) {
                rc = llm_err(st, LLM_EINTR, "waiting for rank 0 at tcp://%s", hostport);
                break;
            }
            if (llm_now_s() - t0 > timeout_s) {
                rc = llm_err(st, LLM_EIO, "dist-init: no rank 0 at tcp://%s within %.0f s",
                             hostport, timeout_s);
                break;
            }
            nap();
        }
    }
    freeaddrinfo(ai);
    return rc;
}

void llm_dist__exchange_done(const char *init, int rank)
{
    if (rank == 0 && init && !strncmp(init, "file:", 5) && init[5]) {
        unlink(init + 5);
        llm_sigstop_unlink_on_exit(NULL);
    }
}

int llm_dist__exchange(const char *init, int rank, int world, void *blob, size_t n,
                       double timeout_s, const volatile sig_atomic_t *stop, llm_status *st)
{
    if (!init)
        return llm_err(st, LLM_EUSAGE, "dist: %d ranks without MPI need --dist-init "
                       "file:PATH or tcp://HOST:PORT", world);
    if (!strncmp(init, "file:", 5) && init[5])
        return by_file(init + 5, rank, blob, n, timeout_s, stop, st);
    if (!strncmp(init, "tcp://", 6))
        return by_tcp(init + 6, rank, world, blob, n, timeout_s, stop, st);
    return llm_err(st, LLM_EUSAGE, "--dist-init '%s': want file:PATH or tcp://HOST:PORT", init);
}
