/* cuda_bucket.h — host-side grouping of positions by token for the deterministic
 * embedding backward (C and C++; header-only so tests/gpu can check it without a GPU). */
#ifndef LLM_CUDA_BUCKET_H
#define LLM_CUDA_BUCKET_H

#include <stddef.h>
#include <stdint.h>
#include <string.h>

/* Group positions 0..N-1 by tok[p] (non-negative ids): writes pos[N] (positions sorted by
 * token, increasing within a token), utok[U] (the distinct tokens, increasing) and
 * off[U+1] (pos[off[u]..off[u+1]) belong to utok[u]); returns U.  tmp holds N + 65536
 * ints.  A stable LSD radix sort on 2 x 16 bits: O(N + 65536), no allocation.  utok and
 * off may live right after pos in one buffer: utok = pos + N, off = utok + U (the caller
 * passes off = NULL to get that layout, since U is known only at the end). */
static inline size_t llm_cuda_bucket(const int32_t *tok, size_t N, int32_t *pos,
                                     int32_t *utok, int32_t **off_out, int32_t *tmp)
{
    int32_t *ptmp = tmp, *cnt = tmp + N;
    for (size_t i = 0; i < N; i++) ptmp[i] = (int32_t)i;
    int32_t *src = ptmp, *dst = pos;
    for (int pass = 0; pass < 2; pass++) {
        int sh = 16 * pass;
        memset(cnt, 0, 65536 * sizeof(int32_t));
        for (size_t i = 0; i < N; i++) cnt[((uint32_t)tok[src[i]] >> sh) & 0xffffu]++;
        int32_t sum = 0;
        for (int d = 0; d < 65536; d++) { int32_t x = cnt[d]; cnt[d] = sum; sum += x; }
        for (size_t i = 0; i < N; i++) dst[cnt[((uint32_t)tok[src[i]] >> sh) & 0xffffu]++] = src[i];
        int32_t *t = src; src = dst; dst = t;
    }
    /* two passes leave the result in ptmp */
    memcpy(pos, src, N * sizeof(int32_t));
    size_t U = 0;
    for (size_t i = 0; i < N; i++)
        if (i == 0 || tok[pos[i]] != tok[pos[i - 1]]) utok[U++] = tok[pos[i]];
    int32_t *off = utok + U;
    size_t u = 0;
    for (size_t i = 0; i < N; i++)
        if (i == 0 || tok[pos[i]] != tok[pos[i - 1]]) off[u++] = (int32_t)i;
    off[U] = (int32_t)N;
    *off_out = off;
    return U;
}

#endif
