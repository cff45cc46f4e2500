/* profile_maps.c — the profiler's hash maps: live memory blocks by address, aggregates
 * by (op, site, layer). */
#include "common/profile_impl.h"

#include <stdlib.h>
#include <string.h>

static size_t hash_ptr(const void *p)
{
    uint64_t x = (uint64_t)(uintptr_t)p;
    x ^= x >> 33;
    x *= 0xff51afd7ed558ccdull;
    x ^= x >> 33;
    return (size_t)x;
}

/* Memory blocks: open addressing, deleted slots marked with size SIZE_MAX. */
int llm_profile_blocks_put(llm_profile *p, void *ptr, size_t bytes)
{
    if (2 * (p->nblocks + p->ndead + 1) > p->cblocks) {
        size_t cap = p->cblocks ? 2 * p->cblocks : 256;
        while (2 * (p->nblocks + 1) > cap) cap *= 2;
        mem_block *nb = calloc(cap, sizeof *nb);
        if (!nb) return -1;
        for (size_t i = 0; i < p->cblocks; i++) {
            mem_block b = p->blocks[i];
            if (!b.ptr || b.bytes == SIZE_MAX) continue;
            size_t h = hash_ptr(b.ptr) & (cap - 1);
            while (nb[h].ptr) h = (h + 1) & (cap - 1);
            nb[h] = b;
        }
        free(p->blocks);
        p->blocks = nb;
        p->cblocks = cap;
        p->ndead = 0;
    }
    size_t h = hash_ptr(ptr) & (p->cblocks - 1);
    while (p->blocks[h].ptr && p->blocks[h].bytes != SIZE_MAX) h = (h + 1) & (p->cblocks - 1);
    if (p->blocks[h].ptr) p->ndead--;
    p->blocks[h] = (mem_block){ptr, bytes};
    p->nblocks++;
    return 0;
}

size_t llm_profile_blocks_take(llm_profile *p, void *ptr)
{
    if (!p->cblocks) return 0;
    size_t h = hash_ptr(ptr) & (p->cblocks - 1);
    while (p->blocks[h].ptr) {
        if (p->blocks[h].ptr == ptr && p->blocks[h].bytes != SIZE_MAX) {
            size_t b = p->blocks[h].bytes;
            p->blocks[h].bytes = SIZE_MAX;
            p->nblocks--;
            p->ndead++;
            return b;
        }
        h = (h + 1) & (p->cblocks - 1);
    }
    return 0;
}

/* Aggregates keyed by (op, site, layer). */
static size_t agg_hash(int op, int site, int layer)
{
    return ((size_t)op * 1000003u) ^ ((size_t)site * 7919u) ^ ((size_t)(layer + 1) * 104729u);
}

agg_entry *llm_profile_agg_get(llm_profile *p, int op, int site, int layer)
{
    if (2 * (p->nagg + 1) > p->cagg) {
        size_t cap = p->cagg ? 2 * p->cagg : 512;
        agg_entry *na = calloc(cap, sizeof *na);
        if (!na) return NULL;
        for (size_t i = 0; i < p->cagg; i++) {
            if (!p->agg[i].used) continue;
            agg_entry *e = &p->agg[i];
            size_t h = agg_hash(e->op, e->site, e->layer) & (cap - 1);
            while (na[h].used) h = (h + 1) & (cap - 1);
            na[h] = *e;
        }
        free(p->agg);
        p->agg = na;
        p->cagg = cap;
    }
    size_t h = agg_hash(op, site, layer) & (p->cagg - 1);
    while (p->agg[h].used) {
        agg_entry *e = &p->agg[h];
        if (e->op == op && e->site == site && e->layer == layer) return e;
        h = (h + 1) & (p->cagg - 1);
    }
    agg_entry *e = &p->agg[h];
    memset(e, 0, sizeof *e);
    e->used = 1;
    e->op = op;
    e->site = site;
    e->layer = layer;
    p->nagg++;
    return e;
}

/* The size of the tracked allocation that starts at ptr, 0 when there is none. */
size_t llm_profile_blocks_size(const llm_profile *p, const void *ptr)
{
    if (!p->cblocks) return 0;
    size_t h = hash_ptr(ptr) & (p->cblocks - 1);
    while (p->blocks[h].ptr) {
        if (p->blocks[h].ptr == ptr && p->blocks[h].bytes != SIZE_MAX) return p->blocks[h].bytes;
        h = (h + 1) & (p->cblocks - 1);
    }
    return 0;
}

