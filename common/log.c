#include "common/log.h"

#include <stdarg.h>

llm_log llm_log_make(const char *prog, int quiet, int verbose)
{
    llm_log lg = {prog, quiet ? LLM_LOG_ERROR : LLM_LOG_INFO + verbose, NULL};
    if (lg.level > LLM_LOG_DEBUG)
        lg.level = LLM_LOG_DEBUG;
    return lg;
}

void llm_log_at(const llm_log *lg, int level, const char *fmt, ...)
{
    if (lg && level > lg->level)
        return;
    FILE *f = lg && lg->f ? lg->f : stderr;
    char line[2048];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(line, sizeof line, fmt, ap);
    va_end(ap);
    /* one write per line so that lines from several processes do not interleave */
    fprintf(f, "%s%s%s%s\n", lg && lg->prog ? lg->prog : "", lg && lg->prog ? ": " : "",
            level == LLM_LOG_WARN ? "warning: " : "", line);
    fflush(f);
}
