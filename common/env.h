/* env.h — environment variables read strictly: a value that is set but not valid is an
 * error naming the variable, never a silent default.  Unset or empty means unset. */
#ifndef LLM_ENV_H
#define LLM_ENV_H
#include <stdint.h>

#include "common/status.h"

/* A whole decimal number in [lo, hi]: *out.  Unset or empty: LLM_OK, *out untouched.
 * Anything else: LLM_EUSAGE. */
int llm_env_u64(const char *name, uint64_t lo, uint64_t hi, uint64_t *out, llm_status *st);

/* One of words (NULL-terminated): *out = its index.  Unset or empty: LLM_OK, *out
 * untouched.  Anything else: LLM_EUSAGE, listing the words. */
int llm_env_word(const char *name, const char *const *words, int *out, llm_status *st);

#endif
