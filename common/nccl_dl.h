/* nccl_dl.h — NCCL opened at run time (common/nccl_dl.c), in builds with NCCL=1. */
#ifndef LLM_NCCL_DL_H
#define LLM_NCCL_DL_H

#include <stddef.h>

/* Open libnccl.so.N (N: the major version of the nccl.h built against) once per
 * process; 0, or -1 with "NCCL: cannot load ...: <dlerror>" in err.  The distributed
 * layer calls it before its first NCCL call; the forwarding functions load on their own
 * when called first and fail with ncclSystemError when the library cannot be opened. */
int llm_nccl_load(char *err, size_t errlen);

/* Open the named library (NULL: the default above), resolve every function used, close
 * it again: 0, or -1 with the reason.  For tests. */
int llm_nccl_probe(const char *name, char *err, size_t errlen);

#endif
