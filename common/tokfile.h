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

#include "common/afile.h"
#include "common/status.h"

#define LLM_TOKFILE_MAGIC 20240520
/* llm.c reads h[2], the count, as an int: a file holds 1 to INT32_MAX tokens (writers
 * refuse more, and refuse an empty file, whose 0 llm.c's loader asserts against). */
#define LLM_TOKFILE_MAX_TOKENS 2147483647
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
 * stdout; files are written atomically (llm_afile).  Errors: LLM_EIO. */
int llm_tokfile_write(const char *path, const uint32_t *ids, uint64_t n, int version,
                      llm_status *st);

/* A token file written as the ids come: a file gets its header's count at commit, so
 * memory stays small; standard output, a device or FIFO is a stream that cannot go back,
 * so its ids wait in memory (2 or 4 bytes each) until commit writes header and ids. */
typedef struct {
    llm_afile a;
    int open, version;
    int autov;                /* version 0 asked: 1 until an id needs 2 */
    uint64_t n;               /* ids put */
    uint64_t wide_at;         /* autov: where the first id above 65535 is (if version 2) */
    unsigned char *mem;       /* a stream's ids, in the file's width */
    size_t mem_n, mem_cap;
} llm_tokfile_writer;

/* version 1 (uint16 ids), 2 (uint32), or 0: 1 until an id above 65535 comes, then the
 * ids so far are widened to 2.  Errors as llm_afile_open. */
int  llm_tokfile_writer_open(llm_tokfile_writer *w, const char *path, int version, llm_status *st);
/* Append n ids: LLM_EUSAGE for an id over 65535 in version 1 asked for, or more than
 * 2^32-1 ids in all. */
int  llm_tokfile_writer_put(llm_tokfile_writer *w, const uint32_t *ids, size_t n, llm_status *st);
/* Move the ids from position cut on to the end of rest (of w's version, or opened with
 * version 0: its own), leaving w with the first cut: a train/val split once the count is
 * known.  A w of version 0 that was widened goes back to version 1 when its remaining
 * ids fit 16 bits. */
int  llm_tokfile_writer_split(llm_tokfile_writer *w, uint64_t cut, llm_tokfile_writer *rest,
                              llm_status *st);
/* Write the count, finish the file (llm_afile_commit); frees w either way. */
int  llm_tokfile_writer_commit(llm_tokfile_writer *w, llm_status *st);
/* The first half of commit (llm_afile_finish): the file is complete and synced but still
 * hidden; then llm_afile_commit or llm_afile_publish of w->a puts it in place, or
 * llm_tokfile_writer_abort removes it.  On error w is freed. */
int  llm_tokfile_writer_finish(llm_tokfile_writer *w, llm_status *st);
/* Leave no file behind (the old one at path stays); frees w.  Harmless after commit. */
void llm_tokfile_writer_abort(llm_tokfile_writer *w);

#endif
