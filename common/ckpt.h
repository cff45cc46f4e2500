/* ckpt.h — the .llmk checkpoint container (spec: man/man5/llmk.5, DESIGN.md section 3).
 *
 * Layout (little-endian):
 *   0   8  magic "LLMK\0\r\n\x1a"
 *   8   4  u32 version (1)
 *   12  8  u64 header length H (bytes of YAML that follow)
 *   20  H  YAML header: model:, tokenizer:, tensors: [...], optional train:, shard:
 *   ..     zero padding to the data start, a multiple of LLM_CKPT_ALIGN
 *   ..     tensor data; every tensor at an aligned offset relative to the data start,
 *          in header order, no overlaps, stored bytes = nbytes (or the zlib stream size
 *          when compressed); crc32 is over the stored bytes.
 * Every offset and crc is known before the data is written, so a writer can stream to
 * a pipe and a reader never seeks backwards.
 */
#ifndef LLM_CKPT_H
#define LLM_CKPT_H

#include <stddef.h>
#include <stdint.h>

#include "common/status.h"
#include "common/tree.h"

#define LLM_CKPT_MAGIC      "LLMK\0\r\n\x1a"
#define LLM_CKPT_VERSION    1u
#define LLM_CKPT_ALIGN      64u
#define LLM_CKPT_MAX_HEADER (64u << 20)   /* header size cap */
#define LLM_CKPT_MAX_TENSORS (1u << 20)
#define LLM_CKPT_MAX_DIMS   8
#define LLM_CKPT_NAME_MAX   256           /* bytes incl. NUL */

typedef enum {
    LLM_DT_F32 = 0, LLM_DT_F16, LLM_DT_BF16, LLM_DT_I32, LLM_DT_U8, LLM_DT_U16,
    LLM_DT_I8, LLM_DT_Q8_0, LLM_DT_Q4_0,
    LLM_DT_COUNT
} llm_dtype;

/* "f32", "f16", "bf16", "i32", "u8", "u16", "i8", "q8_0", "q4_0". */
const char *llm_dtype_name(llm_dtype dt);
/* 0 and *out set when name is known, -1 otherwise. */
int llm_dtype_from_name(const char *name, llm_dtype *out);
/* Bytes for nelem elements (q8_0: 34 per block of 32, q4_0: 18; nelem must then be a
 * multiple of 32).  Returns 0 and sets *out, or -1 on overflow or a partial block. */
int llm_dtype_nbytes(llm_dtype dt, uint64_t nelem, uint64_t *out);

typedef struct {
    char name[LLM_CKPT_NAME_MAX];
    llm_dtype dtype;
    int ndim;
    int64_t shape[LLM_CKPT_MAX_DIMS];
    uint64_t nelem;
    uint64_t nbytes;       /* logical (uncompressed) bytes */
    uint64_t offset;       /* of the stored bytes, relative to the data start */
    uint64_t stored;       /* stored bytes (== nbytes unless compressed) */
    uint32_t crc32;        /* of the stored bytes */
    int compressed;        /* 1: zlib stream */
    const void *data;      /* reader: nbytes of logical data (mmap'd or owned by the reader) */
} llm_tensor;

/* ---- reading ---- */

typedef struct llm_ckpt llm_ckpt;

enum {
    LLM_CKPT_NOVERIFY = 1 << 0,  /* skip crc32 checks of uncompressed tensors (fast mmap open) */
    LLM_CKPT_HEADER_ONLY = 1 << 1 /* parse and validate the header, load no data */
};

/* Open and validate a .llmk file; path "-" reads stdin (sequentially, no seeking).
 * Files are mmap'd: uncompressed tensor data points into the mapping.  Every structural
 * rule of the format is checked, and every crc32 unless LLM_CKPT_NOVERIFY.
 * Errors: LLM_ENOINPUT (missing/unreadable), LLM_EDATA (malformed: the message names the
 * problem and, for data errors, the tensor), LLM_ENOMEM, LLM_EIO. */
int llm_ckpt_open(llm_ckpt **out, const char *path, unsigned flags, llm_status *st);
void llm_ckpt_close(llm_ckpt *c);

/* As llm_ckpt_open, on len bytes at buf (borrowed: it must outlive c, since uncompressed
 * tensor data points into it).  Used by the fuzzer and by callers that already hold a
 * file in memory. */
int llm_ckpt_open_mem(llm_ckpt **out, const void *buf, size_t len, unsigned flags, llm_status *st);

/* The header's top-level section ("model", "tokenizer", "train", "shard") or NULL. */
const llm_node *llm_ckpt_section(const llm_ckpt *c, const char *name);
/* The whole header tree (owned by c). */
const llm_node *llm_ckpt_header(const llm_ckpt *c);
int llm_ckpt_count(const llm_ckpt *c);
const llm_tensor *llm_ckpt_tensor(const llm_ckpt *c, int i);
const llm_tensor *llm_ckpt_find(const llm_ckpt *c, const char *name);
/* Size of the whole file in bytes. */
uint64_t llm_ckpt_file_size(const llm_ckpt *c);
/* Hint that the caller holds its own copy of tensor t's data and will not read it soon:
 * where it lies in the file mapping, its whole pages are dropped from this process's
 * resident memory (a later read maps them back from the file).  Nothing is done for
 * data read from a pipe or decompressed.  The data pointer stays valid. */
void llm_ckpt_release(llm_ckpt *c, const llm_tensor *t);

/* ---- writing ---- */

typedef struct llm_ckpt_writer llm_ckpt_writer;

enum { LLM_CKPT_ZLIB = 1 << 0 };  /* llm_ckpt_add flag: store this tensor zlib-compressed */

int  llm_ckpt_writer_new(llm_ckpt_writer **out, llm_status *st);
void llm_ckpt_writer_free(llm_ckpt_writer *w);

/* Set a header section (takes ownership of tree, replacing any earlier one). */
int llm_ckpt_set_section(llm_ckpt_writer *w, const char *name, llm_node *tree, llm_status *st);

/* Add a tensor.  data is borrowed: it must stay valid until llm_ckpt_write returns.
 * Errors: LLM_EUSAGE for a bad/duplicate name, dims, or a dtype/size mismatch. */
int llm_ckpt_add(llm_ckpt_writer *w, const char *name, llm_dtype dt, int ndim,
                 const int64_t *shape, const void *data, unsigned flags, llm_status *st);

/* A tensor's data produced while the file is written (data that is not in this
 * process's memory as a whole, e.g. optimizer state gathered from other ranks).  Called
 * with off = the bytes of this tensor delivered so far (0, then increasing), it points
 * *p at the next *n bytes (0 < *n <= nbytes - off), valid until the next call; it is
 * called until the tensor is complete, once per llm_ckpt_write.  Returns 0 or an error
 * code (with st set), which ends the write. */
typedef int (*llm_ckpt_source_fn)(void *ctx, uint64_t off, const void **p, size_t *n,
                                  llm_status *st);

/* Add a tensor whose data comes from read(ctx, ...) during llm_ckpt_write, with its
 * crc32 known in advance (the data are not read twice: combine the parts' checksums,
 * e.g. with zlib's crc32_combine).  Stored uncompressed.  Errors as llm_ckpt_add; a
 * source that delivers a bad count is LLM_ESOFTWARE and a wrong crc32 is not detected
 * here (llm_ckpt_open of the file will refuse it). */
int llm_ckpt_add_source(llm_ckpt_writer *w, const char *name, llm_dtype dt, int ndim,
                        const int64_t *shape, uint32_t crc32, llm_ckpt_source_fn read, void *ctx,
                        llm_status *st);

/* Write the file.  path "-" writes stdout (a pipe is fine).  Files are written
 * atomically: a temp file in the same directory, fsync, rename, fsync of the directory;
 * on any failure the temp file is removed and an existing file at path is untouched.
 * Errors: LLM_EIO (with the reason, e.g. "no space left on device"). */
int llm_ckpt_write(llm_ckpt_writer *w, const char *path, llm_status *st);

#endif
