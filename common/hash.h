/* hash.h — 64-bit FNV-1a, for hash tables and for comparing values by a short digest
 * (checkpoint tensor names, the data files a run read, the config of each rank). */
#ifndef LLM_HASH_H
#define LLM_HASH_H

#include <stddef.h>
#include <stdint.h>

#define LLM_FNV1A_INIT 0xcbf29ce484222325ull   /* the offset basis: a hash of nothing */

/* The hash of n bytes at p, continuing from h (LLM_FNV1A_INIT to start). */
static inline uint64_t llm_fnv1a(uint64_t h, const void *p, size_t n)
{
    const unsigned char *b = p;
    for (size_t i = 0; i < n; i++)
        h = (h ^ b[i]) * 0x100000001b3ull;
    return h;
}

#endif
