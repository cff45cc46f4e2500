/* memtrack.h — count what a backend allocates, live and peak bytes, at no cost to its ops.
 *
 * A tracker is a copy of a backend (every op, the name and ctx unchanged, so code that
 * looks at be->name behaves the same) whose alloc and free also keep the bytes held.
 * llm-train runs on one so that every rank can report its peak (LLM_TRAIN_MEMSTAT in
 * llm-train(1)): the number the memory planner (llm-profile plan) predicts.
 */
#ifndef LLM_MEMTRACK_H
#define LLM_MEMTRACK_H

#include <stddef.h>

#include "kernels/backend.h"

typedef struct {
    llm_backend be;        /* hand out &t->be (first member: alloc/free find the tracker) */
    llm_backend *inner;    /* borrowed: must outlive the tracker */
    size_t live, peak;     /* bytes allocated through be now, and the most at any time */
    struct llm_memtrack_block *blk;
    size_t nblk, cap;
} llm_memtrack;

/* Make t->be a tracked copy of inner.  Allocation bookkeeping that runs out of memory
 * makes that alloc return NULL (as if the backend had none). */
void llm_memtrack_init(llm_memtrack *t, llm_backend *inner);
/* Free the bookkeeping (not the blocks still allocated, nor inner). */
void llm_memtrack_free(llm_memtrack *t);

#endif
