/* tokfile.h — token files compatible with llm.c.
 *
 * Layout: a header of 256 little-endian int32 (h[0] = 20240520 magic, h[1] = version,
 * h[2] = number of tokens), then the tokens: version 1 = uint16 LE, version 2 = uint32 LE.
 * The reader validates magic, version, that the count agrees with the file size, and,
 * when a vocabulary size is given, that every id is below it.
 */
#ifndef LLM_TOKFILE_H
#define LLM_TOKFILE_H

#include <stddef.h>
#include <stdint.h>

#include "common/status.h"

#define LLM_TOKFILE_MAGIC 20240520
#define LLM_TOKFILE_HEADER_BYTES 1024

typedef struct {
    int version;           /* 1: uint16 ids, 2: uint32 ids */
    uint64_t ntok;
    const void *ids;       /* ntok ids of the version's width (mmap'd or owned) */
    void *base;            /* mapping or buffer to release */
    size_t base_len;
    int mapped;            /* base is an mmap (else malloc) */
} llm_tokfile;

/* Open path ("-": read stdin into memory) and validate it.  vocab > 0 checks every id.
 * Errors: LLM_ENOINPUT (missing), LLM_EDATA (bad magic/version/size, id >= vocab: the
 * message names the first bad position). */
int  llm_tokfile_open(llm_tokfile *tf, const char *path, int64_t vocab, llm_status *st);
void llm_tokfile_close(llm_tokfile *tf);

/* The id at position i (i < ntok). */
static inline uint32_t llm_tokfile_at(const llm_tokfile *tf, uint64_t i)
{
    return tf->version == 1 ? ((const uint16_t *)tf->ids)[i] : ((const uint32_t *)tf->ids)[i];
}

/* Copy n ids starting at start into out as int32 (start + n <= ntok). */
void llm_tokfile_read(const llm_tokfile *tf, uint64_t start, size_t n, int32_t *out);

/* Write n ids as a token file: version 1 when every id < 65536 and version == 0 (auto),
 * else 2 (or the version asked for; 1 with an id >= 65536 is LLM_EUSAGE).  path "-" is
 * stdout; files are written atomically (temp + fsync + rename).  Errors: LLM_EIO. */
int llm_tokfile_write(const char *path, const uint32_t *ids, uint64_t n, int version,
                      llm_status *st);

#endif
