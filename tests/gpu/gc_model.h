/* gc_model.h — small models for gpu_check's inference rows (gc_util.c); C only. */
#ifndef LLM_GC_MODEL_H
#define LLM_GC_MODEL_H

#include <stddef.h>
#include <stdint.h>

#include "common/model.h"
#include "kernels/backend.h"

/* A random GPT-2 of cfg (llm_model_init_gpt2 with seed, weights scaled by 3 so that the
 * logits are well apart) written to path through be, a CPU backend (its parameters are
 * host memory): 0, or -1 with the reason in msg (len bytes). */
int gc_write_model(const char *path, const llm_model_config *cfg, llm_backend *be, uint64_t seed,
                   char *msg, size_t len);

#endif
