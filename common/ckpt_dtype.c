/* ckpt_dtype.c — dtype names and sizes, the tensor-name index, crc32. */
#include "common/ckpt.h"
#include "common/ckpt_internal.h"
#include "common/hash.h"

#include <stdlib.h>
#include <string.h>
#include <zlib.h>

static const char *const dtype_names[LLM_DT_COUNT] = {
    [LLM_DT_F32] = "f32", [LLM_DT_F16] = "f16", [LLM_DT_BF16] = "bf16", [LLM_DT_I32] = "i32",
    [LLM_DT_U8] = "u8", [LLM_DT_U16] = "u16", [LLM_DT_I8] = "i8", [LLM_DT_Q8_0] = "q8_0",
    [LLM_DT_Q4_0] = "q4_0"};

const char *llm_dtype_name(llm_dtype dt)
{
    return (unsigned)dt < LLM_DT_COUNT ? dtype_names[dt] : "unknown";
}

int llm_dtype_from_name(const char *name, llm_dtype *out)
{
    if (!name)
        return -1;
    for (int i = 0; i < LLM_DT_COUNT; i++)
        if (!strcmp(name, dtype_names[i])) {
            *out = (llm_dtype)i;
            return 0;
        }
    return -1;
}

int llm_dtype_nbytes(llm_dtype dt, uint64_t nelem, uint64_t *out)
{
    uint64_t per, div = 1;
    switch (dt) {
    case LLM_DT_F32: case LLM_DT_I32: per = 4; break;
    case LLM_DT_F16: case LLM_DT_BF16: case LLM_DT_U16: per = 2; break;
    case LLM_DT_U8: case LLM_DT_I8: per = 1; break;
    case LLM_DT_Q8_0: per = 34; div = 32; break;  /* f16 scale + 32 x i8 */
    case LLM_DT_Q4_0: per = 18; div = 32; break;  /* f16 scale + 32 x 4 bits */
    default: return -1;
    }
    if (nelem % div)
        return -1;
    uint64_t blocks = nelem / div;
    if (blocks > UINT64_MAX / per)
        return -1;
    *out = blocks * per;
    return 0;
}

int llm_ckpt_name_ok(const char *name, const char **why)
{
    const char *w = NULL;
    size_t len = name ? strlen(name) : 0;
    if (len == 0)
        w = "empty tensor name";
    else if (len >= LLM_CKPT_NAME_MAX)
        w = "tensor name too long";
    else
        for (size_t i = 0; i < len; i++)
            if ((unsigned char)name[i] < 0x20 || name[i] == 0x7f) {
                w = "control character in tensor name";
                break;
            }
    if (why)
        *why = w;
    return w ? -1 : 0;
}

uint32_t llm_crc32(const void *p, uint64_t n)
{
    const unsigned char *b = p;
    uLong c = crc32(0L, Z_NULL, 0);
    while (n > 0) {
        uInt k = n > (1u << 30) ? (1u << 30) : (uInt)n;
        c = crc32(c, b, k);
        b += k;
        n -= k;
    }
    return (uint32_t)c;
}

int llm_name_index_init(llm_name_index *ix, size_t expected)
{
    memset(ix, 0, sizeof *ix);
    size_t cap = 16;
    while (cap < 2 * expected + 1)
        cap *= 2;
    ix->names = calloc(cap, sizeof *ix->names);
    ix->idx = calloc(cap, sizeof *ix->idx);
    if (!ix->names || !ix->idx) {
        llm_name_index_free(ix);
        return -1;
    }
    ix->cap = cap;
    return 0;
}

void llm_name_index_free(llm_name_index *ix)
{
    free(ix->names);
    free(ix->idx);
    memset(ix, 0, sizeof *ix);
}

static int grow(llm_name_index *ix)
{
    llm_name_index big;
    if (llm_name_index_init(&big, ix->cap))
        return -1;
    for (size_t i = 0; i < ix->cap; i++)
        if (ix->names[i])
            llm_name_index_add(&big, ix->names[i], ix->idx[i]);
    llm_name_index_free(ix);
    *ix = big;
    return 0;
}

int llm_name_index_add(llm_name_index *ix, const char *name, int i)
{
    if (2 * (ix->n + 1) > ix->cap && grow(ix))
        return -1;
    size_t m = ix->cap - 1, h = (size_t)llm_fnv1a(LLM_FNV1A_INIT, name, strlen(name)) & m;
    while (ix->names[h]) {
        if (!strcmp(ix->names[h], name))
            return 1;
        h = (h + 1) & m;
    }
    ix->names[h] = name;
    ix->idx[h] = i;
    ix->n++;
    return 0;
}

int llm_name_index_find(const llm_name_index *ix, const char *name)
{
    if (!ix->cap || !name)
        return -1;
    size_t m = ix->cap - 1, h = (size_t)llm_fnv1a(LLM_FNV1A_INIT, name, strlen(name)) & m;
    while (ix->names[h]) {
        if (!strcmp(ix->names[h], name))
            return ix->idx[h];
        h = (h + 1) & m;
    }
    return -1;
}
