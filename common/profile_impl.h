/* profile_impl.h — the profiler's private state, shared by profile*.c only. */
#ifndef LLM_PROFILE_IMPL_H
#define LLM_PROFILE_IMPL_H

#include "common/clock.h"

#include <stdint.h>

#include "common/profile.h"

typedef struct {
    void *ptr;
    size_t bytes;    /* SIZE_MAX: deleted slot */
} mem_block;

typedef struct {
    int used, op, site, layer;
    long calls;
    double seconds, flop, bytes;
} agg_entry;

typedef struct {
    uintptr_t start;
    size_t bytes;
    int layer, site;
} region;

/* A lo copy made by cast_lo: lo element i at dst stands for the fp32 element i at src. */
typedef struct {
    uintptr_t dst, src;
    size_t n;                      /* elements; 0: unused slot */
} lo_alias;

typedef struct {
    double t0, dur, flop, bytes;   /* seconds since t_origin */
    int16_t op, layer;
    int site;
} trace_event;

typedef struct {
    char name[32];
    double t0, dur;                /* dur < 0: never ended */
} span;

struct llm_profile {
    llm_backend *inner;
    char name[48];
    /* memory tracking */
    mem_block *blocks;
    size_t cblocks, nblocks, ndead;
    size_t live, peak;
    /* aggregates */
    agg_entry *agg;
    size_t cagg, nagg;
    double total_s;
    /* attribution */
    region *regions;
    size_t nregions, cregions;
    char (*sites)[40];
    int nsites, csites;
    int site_none, site_mem, site_opt, site_wte, site_lm_head, site_params;
    int ctx_layer;
    lo_alias lo[8];                /* the latest cast_lo destinations (mixed precision) */
    int next_lo;
    int host_mem;      /* inner backend memory is host memory (CPU backends) */
    /* trace */
    double t_origin;
    trace_event *trace;
    size_t trace_cap, ntrace, nevents;
    span *spans;
    size_t nspans, cspans;
    long span_open;
    /* device timing (CUDA events), NULL on the CPU */
    void *dev;
    /* the latest small uploads (to_device) by destination, off the CPU: attention_rows
     * reads its positions from here instead of a device round trip */
    struct { const void *dst; size_t bytes, cap; void *host; } uploads[8];
    int next_upload;
};

/* Device hooks (profile_dev.c; no-ops on the CPU, where p->dev is NULL).
 * begin brackets the start of an op (a CUDA event and an NVTX range) and returns the
 * host time to record; end closes it and keeps (op, site, layer, trace index) until
 * flush, which waits for the device and adds each op's event-timed duration to its
 * aggregate, the total and its trace event.  reset forgets what is pending and starts a
 * new time origin (the caller reads its host clock right after).  span_begin/span_end
 * add an NVTX range around a span; span_end waits for the device first. */
int llm_profile_dev_init(llm_profile *p, llm_status *st);
void llm_profile_dev_free(llm_profile *p);
double llm_profile_dev_begin(llm_profile *p, llm_op op, double host_now);
void llm_profile_dev_end(llm_profile *p, llm_op op, int site, int layer, size_t trace_idx);
void llm_profile_dev_flush(llm_profile *p);
void llm_profile_dev_reset(llm_profile *p);
void llm_profile_dev_span_begin(llm_profile *p, const char *name);
void llm_profile_dev_span_end(llm_profile *p);
/* Add dur seconds to the aggregate (op, site, layer) and the total (profile.c). */
void llm_profile_add_time(llm_profile *p, int op, int site, int layer, double dur);

void llm_profile_op_end(llm_profile *p, llm_op op, int site, int layer, double t0,
                        llm_op_cost c);

/* Hash maps (profile_maps.c).  Memory blocks: put records a live allocation (0, or -1
 * when out of memory: then it is not tracked); take forgets one and returns its size
 * (0 when unknown); size looks one up without forgetting it.  agg_get finds or adds the
 * aggregate of (op, site, layer); NULL when out of memory. */
int llm_profile_blocks_put(llm_profile *p, void *ptr, size_t bytes);
size_t llm_profile_blocks_take(llm_profile *p, void *ptr);
size_t llm_profile_blocks_size(const llm_profile *p, const void *ptr);
agg_entry *llm_profile_agg_get(llm_profile *p, int op, int site, int layer);

/* profile.c's recording helpers, shared with the wrappers in profile_lo.c: the clock,
 * the registered region holding ptr (NULL: none), an op's site and layer from its weight
 * pointer, the tied output projection shown as lm_head, and forgetting remembered
 * uploads into [dst, dst + bytes). */
const region *llm_profile__region_of(const llm_profile *p, const void *ptr);
void llm_profile__attribute(llm_profile *p, const void *weight, int *site, int *layer);
int llm_profile__lm_head_site(llm_profile *p, int site);
void llm_profile__uploads_forget(llm_profile *p, const void *dst, size_t bytes);

/* profile_lo.c: the mixed-precision wrappers (cast_lo, the lo GEMMs and activations, the
 * lse attention) set into be where the inner backend has the ops, and forgetting the lo
 * copies that lay in a freed buffer [ptr, ptr + bytes). */
void llm_profile__fill_lo(llm_profile *p, llm_backend *be);
void llm_profile__lo_forget(llm_profile *p, const void *ptr, size_t bytes);

/* Timing brackets of a wrapper (p in scope): an op's start, then its end with its site,
 * layer and cost (llm_profile_op_end); the profiler of a wrapped backend and its inner
 * backend. */
#define BEGIN(OP) double t0_ = llm_profile_dev_begin(p, (OP), llm_now_s())
#define END(OP, SITE, LAYER, COST) llm_profile_op_end(p, (OP), (SITE), (LAYER), t0_, (COST))
#define P(be) ((llm_profile *)(be)->ctx)
#define IN(p) ((p)->inner)

#endif
