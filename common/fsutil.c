/* fsutil.c — small filesystem helpers (fsutil.h). */
#include "common/fsutil.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <string.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <unistd.h>

int llm_mkdirs(const char *path, llm_status *st)
{
    return llm_mkdirs_made(path, NULL, st);
}

int llm_mkdirs_made(const char *path, size_t *made, llm_status *st)
{
    char buf[PATH_MAX];
    if (made)
        *made = 0;
    size_t n = path ? strlen(path) : 0;
    if (n == 0 || n >= sizeof buf)
        return llm_err(st, LLM_EUSAGE, "directory path '%.200s' is %s", path ? path : "",
                       n ? "too long" : "empty");
    memcpy(buf, path, n + 1);
    for (char *p = buf + 1;; p++) {
        if (*p == '/' || !*p) {
            char c = *p;
            *p = 0;
            struct stat sb;
            if (mkdir(buf, 0777) != 0) {
                int e = errno;
                /* something there already: a directory (or a link to one), not a file */
                if (e == EEXIST && (stat(buf, &sb) != 0 || !S_ISDIR(sb.st_mode)))
                    e = ENOTDIR;
                if (e != EEXIST)
                    return llm_err(st, LLM_EIO, "cannot create directory '%s': %s", buf,
                                   strerror(e));
            } else if (made && !*made) {
                *made = (size_t)(p - buf);
            }
            *p = c;
            if (!c)
                break;
        }
    }
    return 0;
}

void llm_rmdirs_made(const char *path, size_t made)
{
    char buf[PATH_MAX];
    size_t n = path ? strlen(path) : 0;
    if (!made || made > n || n >= sizeof buf)
        return;
    memcpy(buf, path, n + 1);
    for (;;) {
        while (n > 1 && buf[n - 1] == '/')
            buf[--n] = 0;
        if (rmdir(buf) != 0 && errno != ENOENT)
            return;   /* not empty (or not ours to remove): what is above stays too */
        while (n > 0 && buf[n - 1] != '/')
            n--;   /* up one: cut the last component */
        while (n > 0 && buf[n - 1] == '/')
            n--;
        if (n < made)
            return;
        buf[n] = 0;
    }
}

void llm_dir_of(const char *path, char *dir, size_t n)
{
    const char *slash = strrchr(path, '/');
    if (!slash)
        snprintf(dir, n, ".");
    else
        snprintf(dir, n, "%.*s", slash == path ? 1 : (int)(slash - path), path);
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

int llm_out_target(const char *path, char *target, size_t len, int *fd, llm_status *st)
{
    if (fd)
        *fd = -1;
    struct stat sb;
    if (!path || !*path)
        return llm_err(st, LLM_EUSAGE, "no output path");
    if (lstat(path, &sb) != 0) {
        if (errno != ENOENT)
            return llm_err(st, LLM_EIO, "cannot write '%s': %s", path, strerror(errno));
        if ((size_t)snprintf(target, len, "%s", path) >= len)
            return llm_err(st, LLM_EUSAGE, "output path '%.200s' is too long", path);
        return 0;   /* a new file */
    }
    if (S_ISLNK(sb.st_mode)) {
        /* the file the link names is replaced, not the link: its temp file beside it */
        char buf[PATH_MAX];
        if (!realpath(path, buf))
            return llm_err(st, LLM_EIO, "cannot write through the link '%s': %s", path,
                           strerror(errno));
        if (strlen(buf) >= len)
            return llm_err(st, LLM_EUSAGE, "output path '%.200s' is too long", buf);
        return llm_out_target(buf, target, len, fd, st);
    }
    if ((size_t)snprintf(target, len, "%s", path) >= len)
        return llm_err(st, LLM_EUSAGE, "output path '%.200s' is too long", path);
    if (S_ISREG(sb.st_mode))
        return 0;
    if (S_ISCHR(sb.st_mode) || S_ISFIFO(sb.st_mode)) {
        /* a device or pipe: written in place (a rename would replace it) */
        if (!fd)
            return llm_err(st, LLM_EUSAGE, "'%s' is a device or pipe: it is replaced after "
                           "every write, so give a file's path", path);
        if ((*fd = open(target, O_WRONLY | O_CLOEXEC)) < 0)
            return llm_err(st, LLM_EIO, "cannot write '%s': %s", path, strerror(errno));
        return 0;
    }
    return llm_err(st, LLM_EIO, "cannot write '%s': %s", path,
                   S_ISDIR(sb.st_mode) ? "is a directory" : "not a file, device or pipe");
}

int llm_glob_files(const char *pattern, glob_t *g, llm_status *st)
{
    memset(g, 0, sizeof *g);
    int gr = glob(pattern, GLOB_ERR, NULL, g);
    if (gr == GLOB_NOMATCH || (gr == 0 && g->gl_pathc == 0)) {
        globfree(g);
        if (!strpbrk(pattern, "*?["))
            return llm_err(st, LLM_ENOINPUT, "cannot open '%s': %s", pattern, strerror(ENOENT));
        return llm_err(st, LLM_ENOINPUT, "no file matches '%s'", pattern);
    }
    if (gr) {
        globfree(g);
        return llm_err(st, gr == GLOB_NOSPACE ? LLM_ENOMEM : LLM_ENOINPUT, "cannot list '%s'",
                       pattern);
    }
    return 0;
}
