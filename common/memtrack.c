/* memtrack.c — a backend copy whose alloc/free count bytes (see memtrack.h). */
#include "common/memtrack.h"

#include <stdlib.h>

struct llm_memtrack_block {
    void *p;
    size_t n;
};

static void *t_alloc(llm_backend *be, size_t bytes)
{
    llm_memtrack *t = (llm_memtrack *)be;
    if (t->nblk == t->cap) {
        size_t cap = t->cap ? 2 * t->cap : 16;
        struct llm_memtrack_block *b = realloc(t->blk, cap * sizeof *b);
        if (!b)
            return NULL;
        t->blk = b;
        t->cap = cap;
    }
    void *p = t->inner->alloc(t->inner, bytes);
    if (!p)
        return NULL;
    t->blk[t->nblk++] = (struct llm_memtrack_block){p, bytes};
    t->live += bytes;
    if (t->live > t->peak)
        t->peak = t->live;
    return p;
}

static void t_free(llm_backend *be, void *p)
{
    llm_memtrack *t = (llm_memtrack *)be;
    if (!p)
        return;
    /* few, long-lived blocks: newest first finds scratch buffers at once */
    for (size_t i = t->nblk; i-- > 0;)
        if (t->blk[i].p == p) {
            t->live -= t->blk[i].n;
            t->blk[i] = t->blk[--t->nblk];
            break;
        }
    t->inner->free(t->inner, p);
}

void llm_memtrack_init(llm_memtrack *t, llm_backend *inner)
{
    *t = (llm_memtrack){.be = *inner, .inner = inner};
    t->be.alloc = t_alloc;
    t->be.free = t_free;
}

void llm_memtrack_free(llm_memtrack *t)
{
    free(t->blk);
    t->blk = NULL;
    t->nblk = t->cap = 0;
}
