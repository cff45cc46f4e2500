/* pathsum.c — digests of what paths name (see pathsum.h). */
#include "common/pathsum.h"

#include <errno.h>
#include <fcntl.h>
#include <glob.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "common/fsutil.h"
#include "common/hash.h"

/* n bytes of fd at off into buf, continuing h: 0 or -1 (errno) */
static int sum_span(int fd, uint64_t off, size_t n, unsigned char *buf, uint64_t *h)
{
    size_t got = 0;
    while (got < n) {
        ssize_t k = pread(fd, buf + got, n - got, (off_t)(off + got));
        if (k < 0 && errno == EINTR)
            continue;
        if (k <= 0) {
            if (k == 0)
                errno = EIO;   /* shorter than fstat said: changed under us */
            return -1;
        }
        got += (size_t)k;
    }
    *h = llm_fnv1a(*h, buf, n);
    return 0;
}

int llm_pathsum_file(const char *path, uint64_t *h, llm_status *st)
{
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    struct stat sb;
    if (fd < 0 || fstat(fd, &sb)) {
        int e = errno;
        if (fd >= 0)
            close(fd);
        return llm_err(st, LLM_ENOINPUT, "cannot open '%s': %s", path, strerror(e));
    }
    if (!S_ISREG(sb.st_mode)) {
        close(fd);
        return llm_err(st, LLM_ENOINPUT, "'%s' is not a regular file", path);
    }
    unsigned char *buf = malloc((size_t)LLM_PATHSUM_SPAN);
    if (!buf) {
        close(fd);
        return llm_err(st, LLM_ENOMEM, "out of memory");
    }
    uint64_t size = (uint64_t)sb.st_size, first = size < LLM_PATHSUM_SPAN ? size : LLM_PATHSUM_SPAN;
    uint64_t last = size - first < LLM_PATHSUM_SPAN ? size - first : LLM_PATHSUM_SPAN;
    unsigned char le[8];
    for (int k = 0; k < 8; k++)
        le[k] = (unsigned char)(size >> (8 * k));
    *h = llm_fnv1a(*h, le, sizeof le);
    int rc = 0;
    if (sum_span(fd, 0, (size_t)first, buf, h) || sum_span(fd, size - last, (size_t)last, buf, h))
        rc = llm_err(st, LLM_EIO, "reading '%s': %s", path, strerror(errno));
    free(buf);
    close(fd);
    return rc;
}

int llm_pathsum_glob(const char *pattern, uint64_t *h, llm_status *st)
{
    *h = LLM_FNV1A_INIT;
    glob_t g;
    int rc = llm_glob_files(pattern, &g, st);
    if (rc)
        return rc;
    for (size_t i = 0; !rc && i < g.gl_pathc; i++)
        rc = llm_pathsum_file(g.gl_pathv[i], h, st);
    globfree(&g);
    return rc;
}
