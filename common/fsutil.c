/* fsutil.c — small filesystem helpers (fsutil.h). */
#include "common/fsutil.h"

#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>

int llm_mkdirs(const char *path, llm_status *st)
{
    char buf[PATH_MAX];
    size_t n = path ? strlen(path) : 0;
    if (n == 0 || n >= sizeof buf)
        return llm_err(st, LLM_EUSAGE, "directory path '%.200s' is %s", path ? path : "",
                       n ? "too long" : "empty");
    memcpy(buf, path, n + 1);
    for (char *p = buf + 1;; p++) {
        if (*p == '/' || !*p) {
            char c = *p;
            *p = 0;
            if (mkdir(buf, 0777) && errno != EEXIST)
                return llm_err(st, LLM_EIO, "cannot create directory '%s': %s", buf,
                               strerror(errno));
            *p = c;
            if (!c)
                break;
        }
    }
    return 0;
}

int llm_mkdirs_parent(const char *path, llm_status *st)
{
    const char *slash = path ? strrchr(path, '/') : NULL;
    if (!slash || slash == path)
        return 0;   /* in the current directory, or in / */
    char dir[PATH_MAX];
    size_t n = (size_t)(slash - path);
    if (n >= sizeof dir)
        return llm_err(st, LLM_EUSAGE, "path '%.200s' is too long", path);
    memcpy(dir, path, n);
    dir[n] = 0;
    return llm_mkdirs(dir, st);
}
