/* afile.c — an output file that appears whole or not at all (afile.h). */
#include "common/afile.h"
#include "common/env.h"
#include "common/fsutil.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#define AFILE_BUF (1u << 16)

/* 0: no fsync at all, as if every output had LLM_AFILE_NOSYNC: for the fuzz build
 * (Makefile FZ_LIMITS), whose targets write thousands of outputs a second through the
 * same code, where a sync would cost more than the parse it follows and test nothing */
#ifndef LLM_AFILE_SYNC
#define LLM_AFILE_SYNC 1
#endif

/* strerror, lowercased as the project's messages are ("no space left on device"). */
static const char *why(int err, char *buf, size_t n)
{
    snprintf(buf, n, "%s", strerror(err));
    if (buf[0] >= 'A' && buf[0] <= 'Z' && !(buf[1] >= 'A' && buf[1] <= 'Z'))
        buf[0] = (char)(buf[0] - 'A' + 'a');
    return buf;
}

static int fail(llm_afile *a, llm_code code, const char *what, int err, llm_status *st)
{
    char r[128];
    if (a->is_stdout)
        llm_err(st, code, "cannot write to stdout: %s", why(err, r, sizeof r));
    else
        llm_err(st, code, "cannot %s '%s': %s", what, a->path, why(err, r, sizeof r));
    errno = err;
    return code;
}

/* Temp files being written, for llm_afile_remove_on_signal's handler. */
#define LIVE_MAX 32
static char *volatile live[LIVE_MAX];

static void track(const llm_afile *a)
{
    for (int i = 0; i < LIVE_MAX; i++)
        if (!live[i]) {
            live[i] = a->tmp;
            return;
        }
}

static void untrack(const llm_afile *a)
{
    for (int i = 0; a->tmp && i < LIVE_MAX; i++)
        if (live[i] == a->tmp)
            live[i] = NULL;
}

/* llm_afile_hold_signals: a signal that comes is kept here until the release (a flag,
 * not a signal mask: a mask is per thread, and a library's threads would take it). */
static volatile sig_atomic_t held, pending;

static void on_signal(int sig)
{
    if (held) {
        pending = sig;
        return;
    }
    for (int i = 0; i < LIVE_MAX; i++)
        if (live[i])
            unlink(live[i]);
    signal(sig, SIG_DFL);
    raise(sig);
}

void llm_afile_remove_on_signal(void)
{
    static const int sigs[] = {SIGINT, SIGTERM, SIGHUP};
    for (size_t i = 0; i < sizeof sigs / sizeof *sigs; i++) {
        struct sigaction sa, old;
        memset(&sa, 0, sizeof sa);
        sa.sa_handler = on_signal;
        sigemptyset(&sa.sa_mask);
        /* leave a signal the caller ignores ignored (nohup) */
        if (sigaction(sigs[i], NULL, &old) == 0 && old.sa_handler != SIG_IGN)
            sigaction(sigs[i], &sa, NULL);
    }
}

void llm_afile_hold_signals(void)
{
    held = 1;
}

void llm_afile_release_signals(void)
{
    held = 0;
    if (pending)
        on_signal(pending);
}

static void release(llm_afile *a)
{
    untrack(a);
    free(a->buf);
    free(a->path);
    free(a->tmp);
    memset(a, 0, sizeof *a);
    a->fd = -1;
}

/* A new file beside path, hidden (.NAME.tmp.PID.NONCE: no glob such as data/corpus_*
 * picks it up, nor ls), created exclusively with mode 0666 so the umask decides, as for
 * any file a program creates. */
static int open_temp(llm_afile *a, llm_status *st)
{
    size_t n = strlen(a->path) + 64;
    if (!(a->tmp = malloc(n)))
        return llm_err(st, LLM_ENOMEM, "out of memory");
    const char *slash = strrchr(a->path, '/'), *base = slash ? slash + 1 : a->path;
    int dlen = (int)(base - a->path);
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    int err = EEXIST;
    for (int attempt = 0; attempt < 100 && err == EEXIST; attempt++) {
        snprintf(a->tmp, n, "%.*s.%s.tmp.%ld.%lx%d", dlen, a->path, base, (long)getpid(),
                 (unsigned long)ts.tv_nsec, attempt);
        a->fd = open(a->tmp, O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC, 0666);
        if (a->fd >= 0) {
            track(a);
            return LLM_OK;
        }
        err = errno;
    }
    free(a->tmp);
    a->tmp = NULL;
    return fail(a, LLM_EIO, "create", err, st);
}

int llm_afile_env_check(llm_status *st)
{
    uint64_t v;
    return llm_env_u64("LLM_FAULT_WRITE_LIMIT", 0, UINT64_MAX, &v, st);
}

int llm_afile_open(llm_afile *a, const char *path, unsigned flags, llm_status *st)
{
    memset(a, 0, sizeof *a);
    a->fd = -1;
    a->flags = flags;
    a->fault_at = UINT64_MAX;
    int erc = llm_env_u64("LLM_FAULT_WRITE_LIMIT", 0, UINT64_MAX, &a->fault_at, st);
    if (erc)
        return erc;
    if (!path || !*path)
        return llm_err(st, LLM_EUSAGE, "no output path");
    if (!(a->buf = malloc(AFILE_BUF)))
        return llm_err(st, LLM_ENOMEM, "out of memory");
    int rc = LLM_OK;
    if ((flags & LLM_AFILE_STDOUT) && !strcmp(path, "-")) {
        a->in_place = a->is_stdout = 1;
        a->fd = STDOUT_FILENO;
        if (!(a->path = strdup("<stdout>")))
            rc = llm_err(st, LLM_ENOMEM, "out of memory");
    } else {
        char target[PATH_MAX];
        int dfd = -1;
        if ((flags & LLM_AFILE_MKDIRS) && (rc = llm_mkdirs_parent(path, st)))
            goto out;
        if ((rc = llm_out_target(path, target, sizeof target, (flags & LLM_AFILE_NODEV) ? NULL : &dfd, st)))
            goto out;
        if (!(a->path = strdup(dfd >= 0 ? path : target))) {
            if (dfd >= 0)
                close(dfd);
            rc = llm_err(st, LLM_ENOMEM, "out of memory");
        } else if (dfd >= 0) {   /* a device or FIFO: written in place */
            a->in_place = 1;
            a->fd = dfd;
        } else {
            rc = open_temp(a, st);
        }
    }
out:
    if (rc)
        release(a);
    return rc;
}

/* write(2) all of it; the fault hook counts bytes of temp files. */
static int put_raw(llm_afile *a, const void *p, size_t n, llm_status *st)
{
    const unsigned char *b = p;
    while (n) {
        size_t k = n > (1u << 30) ? (1u << 30) : n;
        ssize_t w;
        if (a->tmp && a->fault_at != UINT64_MAX && a->written + k > a->fault_at)
            w = -1, errno = ENOSPC;
        else
            w = write(a->fd, b, k);
        if (w < 0 && errno == EINTR)
            continue;
        if (w <= 0)
            return fail(a, LLM_EIO, "write", w < 0 ? errno : EIO, st);
        b += w;
        n -= (size_t)w;
        a->written += (uint64_t)w;
    }
    return LLM_OK;
}

static int flush(llm_afile *a, llm_status *st)
{
    size_t n = a->nbuf;
    a->nbuf = 0;
    return n ? put_raw(a, a->buf, n, st) : LLM_OK;
}

int llm_afile_put(llm_afile *a, const void *p, uint64_t n, llm_status *st)
{
    if (a->fd < 0)
        return llm_err(st, LLM_ESOFTWARE, "write to a closed output");
    if (n < AFILE_BUF - a->nbuf) {
        if (n)
            memcpy(a->buf + a->nbuf, p, (size_t)n);
        a->nbuf += (size_t)n;
        return LLM_OK;
    }
    int rc = flush(a, st);   /* a large write goes straight out, not through buf */
    return rc ? rc : put_raw(a, p, (size_t)n, st);
}

int llm_afile_seekable(const llm_afile *a)
{
    return a->fd >= 0 && a->tmp != NULL;
}

static int check_range(llm_afile *a, uint64_t off, size_t n, llm_status *st)
{
    if (!llm_afile_seekable(a))
        return llm_err(st, LLM_ESOFTWARE, "'%s': cannot go back in a stream", a->path);
    if (off > a->written + a->nbuf || n > a->written + a->nbuf - off)
        return llm_err(st, LLM_ESOFTWARE, "'%s': bytes %llu..%llu not written yet", a->path,
                       (unsigned long long)off, (unsigned long long)(off + n));
    return flush(a, st);
}

int llm_afile_patch(llm_afile *a, uint64_t off, const void *p, size_t n, llm_status *st)
{
    int rc = check_range(a, off, n, st);
    const unsigned char *b = p;
    while (!rc && n) {
        ssize_t w = pwrite(a->fd, b, n, (off_t)off);
        if (w < 0 && errno == EINTR)
            continue;
        if (w <= 0)
            return fail(a, LLM_EIO, "write", w < 0 ? errno : EIO, st);
        b += w;
        off += (uint64_t)w;
        n -= (size_t)w;
    }
    return rc;
}

int llm_afile_read(llm_afile *a, uint64_t off, void *p, size_t n, llm_status *st)
{
    int rc = check_range(a, off, n, st);
    unsigned char *b = p;
    while (!rc && n) {   /* the temp file is open for reading too, whatever its mode */
        ssize_t r = pread(a->fd, b, n, (off_t)off);
        if (r < 0 && errno == EINTR)
            continue;
        if (r <= 0)
            rc = fail(a, LLM_EIO, "read back", r < 0 ? errno : EIO, st);
        else
            b += r, off += (uint64_t)r, n -= (size_t)r;
    }
    return rc;
}

int llm_afile_truncate(llm_afile *a, uint64_t n, llm_status *st)
{
    int rc = check_range(a, n, 0, st);
    if (!rc && ftruncate(a->fd, (off_t)n))
        return fail(a, LLM_EIO, "write", errno, st);
    if (!rc) {
        a->written = n;
        if (lseek(a->fd, (off_t)n, SEEK_SET) < 0)
            return fail(a, LLM_EIO, "write", errno, st);
    }
    return rc;
}

void llm_afile_abort(llm_afile *a)
{
    if (a->fd >= 0 && a->fd != STDOUT_FILENO)
        close(a->fd);
    if (a->tmp)
        unlink(a->tmp);
    release(a);
}

int llm_afile_finish(llm_afile *a, llm_status *st)
{
    if (a->finished)
        return LLM_OK;
    if (a->fd < 0)
        return llm_err(st, LLM_ESOFTWARE, "commit of a closed output");
    int rc = flush(a, st), sync = LLM_AFILE_SYNC && !(a->flags & LLM_AFILE_NOSYNC);
    a->finished = 1;
    if (a->in_place) {
        if (a->fd != STDOUT_FILENO && close(a->fd) && !rc)
            rc = fail(a, LLM_EIO, "write", errno, st);
        a->fd = -1;
        if (rc)
            release(a);
        return rc;
    }
    if (!rc && sync && fsync(a->fd))
        rc = fail(a, LLM_EIO, "sync", errno, st);
    if (close(a->fd) && !rc)
        rc = fail(a, LLM_EIO, "write", errno, st);
    a->fd = -1;
    if (rc) {
        unlink(a->tmp);
        release(a);
    }
    return rc;
}

/* Test hook: LLM_FAULT_RENAME=SUFFIX makes the rename over a path ending in SUFFIX fail. */
static int rename_fault(const char *path)
{
    const char *f = getenv("LLM_FAULT_RENAME");
    size_t n = f ? strlen(f) : 0, m = strlen(path);
    return n && n <= m && !strcmp(path + m - n, f);
}

int llm_afile_publish(llm_afile *a, llm_status *st)
{
    if (!a->finished)
        return llm_err(st, LLM_ESOFTWARE, "publish of an output not finished");
    int rc = LLM_OK;
    if (!a->in_place && a->tmp) {
        if (rename_fault(a->path))
            rc = fail(a, LLM_EIO, "rename to", EIO, st);
        else if (rename(a->tmp, a->path))
            rc = fail(a, LLM_EIO, "rename to", errno, st);
        if (rc)
            unlink(a->tmp);
    }
    release(a);
    return rc;
}

int llm_afile_sync_dir(const char *path, llm_status *st)
{
    char dir[PATH_MAX], r[128];
    if (!LLM_AFILE_SYNC)
        return LLM_OK;
    llm_dir_of(path, dir, sizeof dir);
    int dfd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC), rc = LLM_OK;
    if (dfd >= 0) {
        if (fsync(dfd) && errno != EINVAL && errno != EROFS)
            rc = llm_err(st, LLM_EIO, "cannot sync the directory of '%s': %s", path,
                         why(errno, r, sizeof r));
        close(dfd);
    }
    return rc;
}

int llm_afile_commit(llm_afile *a, llm_status *st)
{
    int sync = LLM_AFILE_SYNC && !(a->flags & LLM_AFILE_NOSYNC) && !a->in_place;
    char *path = sync && a->path ? strdup(a->path) : NULL;
    if (sync && a->path && !path) {
        llm_afile_abort(a);
        return llm_err(st, LLM_ENOMEM, "out of memory");
    }
    int rc = llm_afile_finish(a, st);
    if (!rc)
        rc = llm_afile_publish(a, st);
    if (!rc && path)   /* the rename is durable once the directory is synced */
        rc = llm_afile_sync_dir(path, st);
    free(path);
    return rc;
}

int llm_afile_write(const char *path, unsigned flags, const void *p, uint64_t n, llm_status *st)
{
    llm_afile a;
    int rc = llm_afile_open(&a, path, flags, st);
    if (rc)
        return rc;
    if ((rc = llm_afile_put(&a, p, n, st))) {
        llm_afile_abort(&a);
        return rc;
    }
    return llm_afile_commit(&a, st);
}
