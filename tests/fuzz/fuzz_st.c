/* libFuzzer target for the safetensors reader (llm_st_open_mem): every tensor an accepted
 * file hands out must be readable and findable by name. */
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "common/safetensors.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    llm_status st;
    llm_st_file *f = NULL;
    /* a copy, so reads past size are caught by ASan exactly */
    uint8_t *buf = malloc(size ? size : 1);
    if (!buf)
        return 0;
    memcpy(buf, data, size);
    if (llm_st_open_mem(&f, buf, size, &st) == 0) {
        volatile unsigned sum = 0;
        for (int i = 0; i < llm_st_count(f); i++) {
            const llm_st_tensor *t = llm_st_get(f, i);
            if (t->end < t->begin || t->ndim < 0 || t->ndim > LLM_CKPT_MAX_DIMS)
                abort();
            if (llm_st_dtype_size(t->dtype) <= 0)
                abort();
            for (uint64_t k = 0; k < t->end - t->begin; k++)
                sum += ((const unsigned char *)t->data)[k];
            if (llm_st_find(f, t->name) != t)
                abort();
        }
        llm_st_close(f);
    }
    free(buf);
    return 0;
}
