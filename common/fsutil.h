/* fsutil.h — small filesystem helpers shared by the programs' library code. */
#ifndef LLM_FSUTIL_H
#define LLM_FSUTIL_H

#include <glob.h>
#include <stddef.h>

#include "common/status.h"

/* mkdir -p: path and every missing directory above it (mode 0777 before the umask).
 * 0, or LLM_EUSAGE for an empty or over-long path, LLM_EIO naming the directory that
 * could not be made. */
int llm_mkdirs(const char *path, llm_status *st);
/* llm_mkdirs, and *made = the length of the prefix of path that is the first directory
 * it created (0: none, every directory was there): for llm_rmdirs_made. */
int llm_mkdirs_made(const char *path, size_t *made, llm_status *st);
/* Undo llm_mkdirs_made: remove path, then each directory above it down to the prefix of
 * length made, stopping at the first that is not empty (0: nothing). */
void llm_rmdirs_made(const char *path, size_t made);

/* The directory that holds file path into dir (n bytes, truncated): "." for a bare
 * name, "/" for a file in the root. */
void llm_dir_of(const char *path, char *dir, size_t n);

/* llm_mkdirs of the directory that holds file path (nothing for a bare file name). */
int llm_mkdirs_parent(const char *path, llm_status *st);

/* Where a writer that replaces path atomically (temp file beside it, rename) should
 * write: 0 with target = path, or for a symbolic link the file it names (so the link
 * stays and the temp file goes beside that file), and *fd = -1; when path is an existing
 * character device or FIFO (/dev/null, a terminal, a named pipe), *fd is it opened for
 * writing, to be written in place and closed: a rename would replace the node with a
 * file; fd NULL: a device or FIFO is refused (LLM_EUSAGE: for a file replaced again and
 * again, which cannot be written in place).  LLM_EIO for a directory, socket or block
 * device, a link that leads nowhere, or a device that does not open.  target: len bytes
 * (PATH_MAX is enough). */
int llm_out_target(const char *path, char *target, size_t len, int *fd, llm_status *st);

/* The files a pattern (glob(3), GLOB_ERR) matches into *g, at least one: 0, or
 * LLM_ENOINPUT naming the pattern ("cannot open 'x': no such file or directory" for a
 * plain name, "no file matches 'x*'"), LLM_ENOMEM; *g is freed on an error.  The caller
 * globfree()s it otherwise. */
int llm_glob_files(const char *pattern, glob_t *g, llm_status *st);

#endif
