#include "common/version.h"

/* Only this file sees LLM_VERSION, so a new commit recompiles one object (the Makefile
 * makes it depend on a stamp holding the version). */
#ifndef LLM_VERSION
#define LLM_VERSION "unknown"
#endif

const char *llm_version(void)
{
    return LLM_VERSION;
}
