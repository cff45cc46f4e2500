/* profile_impl.h — the profiler's private state, shared by profile*.c only. */
#ifndef LLM_PROFILE_IMPL_H
#define LLM_PROFILE_IMPL_H

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
    int site_none, site_mem, site_opt, site_wte, site_lm_head;
    int ctx_layer;
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
};

/* Device hooks (profile_dev.c): begin returns the host start time to record; end
 * returns the op's duration in seconds (host clock on the CPU, CUDA events on a GPU). */
int llm_profile_dev_init(llm_profile *p, llm_status *st);
void llm_profile_dev_free(llm_profile *p);
double llm_profile_dev_begin(llm_profile *p, llm_op op, double host_now);
double llm_profile_dev_end(llm_profile *p, double t0, double host_now);

void llm_profile_op_end(llm_profile *p, llm_op op, int site, int layer, double t0,
                        llm_op_cost c);

#endif
