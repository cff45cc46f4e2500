/* dist_xchg.c — hand a small blob (NCCL's unique id) from rank 0 to every rank without
 * MPI: through a file on a shared filesystem or a TCP port rank 0 listens on. */
#include "common/dist_impl.h"
#include "common/afile.h"

#include <errno.h>
#include <netdb.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/time.h>
#include <unistd.h>

static void nap(void)
{
    usleep(50 * 1000);
}

/* file:PATH — rank 0 writes PATH atomically (temp + rename), making its directory when
 * missing (the first run of a job whose output directory holds it); the others wait for
 * it.  PATH must be new for each job (e.g. named after $SLURM_JOB_ID): a file left by an
 * earlier job would hand out a stale id, so rank 0 refuses one that exists, and removes
 * its own once every rank has joined (llm_dist__exchange_done). */
static int by_file(const char *path, int rank, void *blob, size_t n, double timeout_s,
                   llm_status *st)
{
    if (rank == 0) {
        struct stat old;
        if (stat(path, &old) == 0)
            return llm_err(st, LLM_EUSAGE, "dist-init: '%s' exists: an id from a job that did "
                           "not finish? Use a path new for each job, or remove it", path);
        if (llm_afile_write(path, LLM_AFILE_NODEV | LLM_AFILE_MKDIRS, blob, n, st))
            return llm_err_prefix(st, "dist-init");
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
        if (llm_now_s() - t0 > timeout_s)
            return llm_err(st, LLM_EIO, "dist-init: '%s' did not appear within %.0f s (is rank 0 "
                           "running, and is the path on a shared filesystem?)", path, timeout_s);
        nap();
    }
}

static int full_io(int fd, void *p, size_t n, int wr)
{
    char *c = p;
    while (n) {
        ssize_t k = wr ? send(fd, c, n, MSG_NOSIGNAL) : recv(fd, c, n, 0);
        if (k < 0 && errno == EINTR)
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

/* rank 0's side: accept until every other rank has said hello and got the blob, or
 * timeout_s after t0 */
static int tcp_serve(int s, int world, const void *blob, size_t n, double t0, double timeout_s,
                     const char *port, llm_status *st)
{
    char *seen = calloc((size_t)world, 1);
    if (!seen)
        return llm_err(st, LLM_ENOMEM, "out of memory");
    int got = 1, rc = 0;
    while (got < world && !rc) {
        double left = timeout_s - (llm_now_s() - t0);
        struct pollfd pf = {s, POLLIN, 0};
        int k = left > 0 ? poll(&pf, 1, (int)(left * 1000) + 1) : 0;
        if (k < 0 && errno == EINTR)
            continue;
        if (k <= 0) {
            char miss[96] = "";
            size_t o = 0;
            for (int r = 1; r < world && o + 12 < sizeof miss; r++)
                if (!seen[r])
                    o += (size_t)snprintf(miss + o, sizeof miss - o, "%s%d", o ? ", " : "", r);
            rc = llm_err(st, LLM_EIO, "dist-init: %d of %d ranks reached port %s within %.0f s "
                         "(missing: %s%s)", got, world, port, timeout_s, miss,
                         world - got > 8 ? ", ..." : "");
            break;
        }
        int c = accept(s, NULL, NULL);
        if (c < 0)
            continue;
        /* a peer that connects and stays silent costs at most 5 s */
        struct timeval tv = {5, 0};
        setsockopt(c, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
        setsockopt(c, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof tv);
        unsigned char h[8];
        int r = full_io(c, h, sizeof h, 0) ? -1 : hello_rank(h, world);
        if (r > 0 && !seen[r] && !full_io(c, (void *)blob, n, 1)) {
            seen[r] = 1;
            got++;
        }
        close(c);
    }
    free(seen);
    return rc;
}

/* tcp://HOST:PORT — rank 0 listens on PORT and sends the blob to each other rank once. */
static int by_tcp(const char *hostport, int rank, int world, void *blob, size_t n,
                  double timeout_s, llm_status *st)
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
        int s = socket(ai->ai_family, ai->ai_socktype, 0), one = 1;
        if (s >= 0)
            setsockopt(s, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
        if (s < 0 || bind(s, ai->ai_addr, ai->ai_addrlen) || listen(s, world))
            rc = llm_err(st, LLM_EIO, "dist-init: cannot listen on port %s: %s", colon + 1,
                         strerror(errno));
        else
            rc = tcp_serve(s, world, blob, n, t0, timeout_s, colon + 1, st);
        if (s >= 0)
            close(s);
    } else {
        unsigned char h[8];
        hello_pack(h, rank);
        for (;;) {
            int s = socket(ai->ai_family, ai->ai_socktype, 0);
            if (s >= 0 && connect(s, ai->ai_addr, ai->ai_addrlen) == 0) {
                if (full_io(s, h, sizeof h, 1) || full_io(s, blob, n, 0))
                    rc = llm_err(st, LLM_EIO, "dist-init: receiving the id from %s failed (is "
                                 "another process rank %d?)", hostport, rank);
                close(s);
                break;
            }
            if (s >= 0)
                close(s);
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
    if (rank == 0 && init && !strncmp(init, "file:", 5) && init[5])
        unlink(init + 5);
}

int llm_dist__exchange(const char *init, int rank, int world, void *blob, size_t n,
                       double timeout_s, llm_status *st)
{
    if (!init)
        return llm_err(st, LLM_EUSAGE, "dist: %d ranks without MPI need --dist-init "
                       "file:PATH or tcp://HOST:PORT", world);
    if (!strncmp(init, "file:", 5) && init[5])
        return by_file(init + 5, rank, blob, n, timeout_s, st);
    if (!strncmp(init, "tcp://", 6))
        return by_tcp(init + 6, rank, world, blob, n, timeout_s, st);
    return llm_err(st, LLM_EUSAGE, "--dist-init '%s': want file:PATH or tcp://HOST:PORT", init);
}
