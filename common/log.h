/* log.h — diagnostics on stderr with levels.
 *
 * A logger is a small value passed to whoever logs (no global state).  Levels:
 * LLM_LOG_ERROR is always printed; -q lowers the level to errors only, -v raises it.
 * Each line reads "PROG: message".
 */
#ifndef LLM_LOG_H
#define LLM_LOG_H

#include <stdio.h>

enum { LLM_LOG_ERROR = 0, LLM_LOG_WARN = 1, LLM_LOG_INFO = 2, LLM_LOG_DEBUG = 3 };

typedef struct {
    const char *prog;  /* prefix of every line */
    int level;         /* highest level printed */
    FILE *f;           /* NULL means stderr */
} llm_log;

/* A logger for PROG at the level implied by -q (quiet) and -v counts (verbose). */
llm_log llm_log_make(const char *prog, int quiet, int verbose);

void llm_log_at(const llm_log *lg, int level, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

#define llm_error(lg, ...) llm_log_at((lg), LLM_LOG_ERROR, __VA_ARGS__)
#define llm_warn(lg, ...)  llm_log_at((lg), LLM_LOG_WARN, __VA_ARGS__)
#define llm_info(lg, ...)  llm_log_at((lg), LLM_LOG_INFO, __VA_ARGS__)
#define llm_debug(lg, ...) llm_log_at((lg), LLM_LOG_DEBUG, __VA_ARGS__)

#endif
