/* env.c — environment variables read strictly (env.h). */
#include "common/env.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int llm_env_u64(const char *name, uint64_t lo, uint64_t hi, uint64_t *out, llm_status *st)
{
    const char *s = getenv(name);
    if (!s || !*s)
        return LLM_OK;
    char *end = NULL;
    errno = 0;
    unsigned long long v = 0;
    if (*s >= '0' && *s <= '9')   /* digits only: strtoull takes spaces and signs */
        v = strtoull(s, &end, 10);
    if (!end || errno || *end || v < lo || v > hi)
        return llm_err(st, LLM_EUSAGE, "%s '%.64s' is not a whole number in %llu..%llu", name, s,
                       (unsigned long long)lo, (unsigned long long)hi);
    *out = v;
    return LLM_OK;
}

int llm_env_word(const char *name, const char *const *words, int *out, llm_status *st)
{
    const char *s = getenv(name);
    if (!s || !*s)
        return LLM_OK;
    char list[160] = "";
    for (int i = 0; words[i]; i++) {
        if (!strcmp(s, words[i])) {
            *out = i;
            return LLM_OK;
        }
        size_t n = strlen(list);
        snprintf(list + n, sizeof list - n, "%s'%s'", i ? (words[i + 1] ? ", " : " or ") : "",
                 words[i]);
    }
    return llm_err(st, LLM_EUSAGE, "%s '%.64s' is not %s", name, s, list);
}
