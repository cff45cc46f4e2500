#include "common/status.h"

#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <sysexits.h>

int llm_err(llm_status *st, llm_code code, const char *fmt, ...)
{
    if (st) {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(st->msg, sizeof st->msg, fmt, ap);
        va_end(ap);
        st->code = code;
        st->together = LLM_TOGETHER_NO;
    }
    return code;
}

int llm_err_prefix(llm_status *st, const char *fmt, ...)
{
    if (!st)
        return LLM_ESOFTWARE;
    char pre[LLM_MSG_MAX], old[LLM_MSG_MAX];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(pre, sizeof pre, fmt, ap);
    va_end(ap);
    memcpy(old, st->msg, sizeof old);
    int n = snprintf(st->msg, sizeof st->msg, "%.200s: ", pre);
    if (n > 0 && (size_t)n < sizeof st->msg)
        snprintf(st->msg + n, sizeof st->msg - (size_t)n, "%.*s", (int)(sizeof st->msg - (size_t)n - 1), old);
    return st->code;
}

void llm_status_clear(llm_status *st)
{
    if (st) {
        st->code = LLM_OK;
        st->msg[0] = '\0';
        st->together = LLM_TOGETHER_NO;
    }
}

int llm_exit_code(llm_code code)
{
    switch (code) {
    case LLM_OK: return 0;
    case LLM_EUSAGE: return EX_USAGE;
    case LLM_EDATA: return EX_DATAERR;
    case LLM_ENOINPUT: return EX_NOINPUT;
    case LLM_EIO: return EX_IOERR;
    case LLM_ENOMEM: return EX_OSERR;
    case LLM_ENODEV: return EX_UNAVAILABLE;
    case LLM_ECONFIG: return EX_CONFIG;
    case LLM_EINTR: return 130;
    case LLM_ESOFTWARE: default: return EX_SOFTWARE;
    }
}

const char *llm_code_name(llm_code code)
{
    switch (code) {
    case LLM_OK: return "ok";
    case LLM_EUSAGE: return "usage error";
    case LLM_EDATA: return "bad data";
    case LLM_ENOINPUT: return "no input";
    case LLM_EIO: return "i/o error";
    case LLM_ENOMEM: return "out of memory";
    case LLM_ENODEV: return "no device";
    case LLM_ECONFIG: return "config error";
    case LLM_EINTR: return "interrupted";
    case LLM_ESOFTWARE: default: return "internal error";
    }
}
