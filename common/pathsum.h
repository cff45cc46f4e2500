/* pathsum.h — a digest of what a path names, not of its text: for ranks that must read
 * the same data under paths that may differ from node to node (/scratch/$NODE/...). */
#ifndef LLM_PATHSUM_H
#define LLM_PATHSUM_H

#include <stdint.h>

#include "common/status.h"

/* The part of each file read: its first and its last LLM_PATHSUM_SPAN bytes. */
#define LLM_PATHSUM_SPAN ((uint64_t)1 << 20)

/* Continue the 64-bit FNV-1a *h (common/hash.h) with the file at path: its size and its
 * first and last LLM_PATHSUM_SPAN bytes (not its name).  Cheap for files of any size, and
 * it tells copies from different data unless they differ only in the middle.
 * Errors: LLM_ENOINPUT (missing, unreadable, not a regular file), LLM_EIO (a read failed),
 * naming the file. */
int llm_pathsum_file(const char *path, uint64_t *h, llm_status *st);

/* *h = the digest of the files the glob(3) pattern matches, in glob's order (the data
 * loader's), each as llm_pathsum_file.  A pattern without wildcards is one file.
 * Errors: LLM_ENOINPUT when nothing matches (as the data loader says it), else those of
 * llm_pathsum_file; LLM_ENOMEM. */
int llm_pathsum_glob(const char *pattern, uint64_t *h, llm_status *st);

#endif
