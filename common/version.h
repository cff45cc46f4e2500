/* version.h — the build's version string (git describe at build time). */
#ifndef LLM_VERSION_H
#define LLM_VERSION_H

/* "v0.1-12-gabcdef[-dirty]" or "unknown" outside a git checkout. */
const char *llm_version(void);

#endif
