/* ckpt_internal.h — helpers shared by ckpt_dtype.c, ckpt_read.c and ckpt_write.c. */
#ifndef LLM_CKPT_INTERNAL_H
#define LLM_CKPT_INTERNAL_H

#include <stddef.h>
#include <stdint.h>

/* 8 magic + 4 version + 8 header length */
#define LLM_CKPT_PREFIX 20u

/* An open-addressing set of borrowed names -> index, for uniqueness and lookup. */
typedef struct {
    const char **names;
    int *idx;
    size_t cap;    /* power of two */
    size_t n;
} llm_name_index;

/* 0 on success, -1 out of memory. */
int llm_name_index_init(llm_name_index *ix, size_t expected);
void llm_name_index_free(llm_name_index *ix);
/* Insert name -> i.  Returns 0, 1 when the name is already present, -1 out of memory. */
int llm_name_index_add(llm_name_index *ix, const char *name, int i);
/* Index of name or -1. */
int llm_name_index_find(const llm_name_index *ix, const char *name);

/* 0 when name is usable: non-empty, shorter than LLM_CKPT_NAME_MAX, no control bytes. */
int llm_ckpt_name_ok(const char *name, const char **why);

static inline uint64_t llm_align_up(uint64_t x, uint64_t a) { return (x + a - 1) / a * a; }

/* crc32 over any length (zlib's length argument is narrower than size_t). */
uint32_t llm_crc32(const void *p, uint64_t n);

#endif
