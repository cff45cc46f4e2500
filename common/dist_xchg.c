/* dist_xchg.c — hand a small blob (NCCL's unique id) from rank 0 to every rank without
 * MPI: through a file on a shared filesystem or a TCP port rank 0 listens on. */
#include "common/dist_impl.h"

#include <errno.h>
#include <netdb.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

static void nap(void)
{
    usleep(50 * 1000);
}

/* file:PATH — rank 0 writes PATH atomically (temp + rename); the others wait for it.
 * PATH must be new for each job (e.g. named after $SLURM_JOB_ID): a file left by an
 * earlier job would hand out a stale id. */
static int by_file(const char *path, int rank, void *blob, size_t n, double timeout_s,
                   llm_status *st)
{
    if (rank == 0) {
        char tmp[4200];
        snprintf(tmp, sizeof tmp, "%s.tmp.%ld", path, (long)getpid());
        FILE *f = fopen(tmp, "wb");
        if (!f || fwrite(blob, 1, n, f) != n || fflush(f) || fsync(fileno(f))) {
            if (f)
                fclose(f);
            remove(tmp);
            return llm_err(st, LLM_EIO, "dist-init: cannot write '%s': %s", tmp, strerror(errno));
        }
        fclose(f);
        if (rename(tmp, path)) {
            remove(tmp);
            return llm_err(st, LLM_EIO, "dist-init: cannot create '%s': %s", path, strerror(errno));
        }
        return 0;
    }
    double t0 = llm_dist__now();
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
        if (llm_dist__now() - t0 > timeout_s)
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

/* tcp://HOST:PORT — rank 0 listens on PORT and sends the blob to world-1 connections. */
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
    double t0 = llm_dist__now();
    if (rank == 0) {
        int s = socket(ai->ai_family, ai->ai_socktype, 0), one = 1;
        setsockopt(s, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
        if (s < 0 || bind(s, ai->ai_addr, ai->ai_addrlen) || listen(s, world)) {
            rc = llm_err(st, LLM_EIO, "dist-init: cannot listen on port %s: %s", colon + 1,
                         strerror(errno));
        } else {
            for (int i = 1; i < world && !rc; i++) {
                int c = accept(s, NULL, NULL);
                if (c < 0 || full_io(c, blob, n, 1))
                    rc = llm_err(st, LLM_EIO, "dist-init: sending the id failed: %s",
                                 strerror(errno));
                if (c >= 0)
                    close(c);
            }
        }
        if (s >= 0)
            close(s);
    } else {
        for (;;) {
            int s = socket(ai->ai_family, ai->ai_socktype, 0);
            if (s >= 0 && connect(s, ai->ai_addr, ai->ai_addrlen) == 0) {
                if (full_io(s, blob, n, 0))
                    rc = llm_err(st, LLM_EIO, "dist-init: receiving the id from %s failed",
                                 hostport);
                close(s);
                break;
            }
            if (s >= 0)
                close(s);
            if (llm_dist__now() - t0 > timeout_s) {
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
