/* fsutil.h — small filesystem helpers shared by the programs' library code. */
#ifndef LLM_FSUTIL_H
#define LLM_FSUTIL_H

#include "common/status.h"

/* mkdir -p: path and every missing directory above it (mode 0777 before the umask).
 * 0, or LLM_EUSAGE for an empty or over-long path, LLM_EIO naming the directory that
 * could not be made. */
int llm_mkdirs(const char *path, llm_status *st);

/* llm_mkdirs of the directory that holds file path (nothing for a bare file name). */
int llm_mkdirs_parent(const char *path, llm_status *st);

#endif
