/* status.h — error codes and the message buffer every library call reports through.
 *
 * Library functions never exit() or abort() on bad input: they fill an llm_status and
 * return its code.  Only main() turns a code into a process exit status (llm_exit_code).
 */
#ifndef LLM_STATUS_H
#define LLM_STATUS_H

#include <stddef.h>

typedef enum {
    LLM_OK = 0,
    LLM_EUSAGE,     /* bad option or argument value          -> 64 EX_USAGE   */
    LLM_EDATA,      /* malformed or inconsistent input data  -> 65 EX_DATAERR */
    LLM_ENOINPUT,   /* input file missing or unreadable      -> 66 EX_NOINPUT */
    LLM_EIO,        /* read/write/fsync failure, disk full   -> 74 EX_IOERR   */
    LLM_ENOMEM,     /* allocation failed                     -> 71 EX_OSERR   */
    LLM_ESOFTWARE,  /* internal error / unsupported case     -> 70 EX_SOFTWARE */
    LLM_ENODEV,     /* requested device (GPU) not available  -> 69 EX_UNAVAILABLE */
    LLM_ECONFIG,    /* configuration file error              -> 78 EX_CONFIG  */
    LLM_EINTR       /* interrupted by a signal               -> 130 */
} llm_code;

#define LLM_MSG_MAX 512

/* llm_status.together: set where every rank of a distributed run returns an error from
 * the same collective decision at the same point (the ranks' config agreement, say), so
 * that no rank needs to end the others (llm_dist_abort) and 64 ranks need not print 64
 * copies: LLM_TOGETHER_SAME, the same message on every rank, reported by rank 0 alone;
 * LLM_TOGETHER_OWN, this rank's own message (a file missing on its node), which it
 * reports itself. */
enum { LLM_TOGETHER_NO = 0, LLM_TOGETHER_SAME = 1, LLM_TOGETHER_OWN = 2 };
typedef struct {
    llm_code code;
    char msg[LLM_MSG_MAX];
    int together;   /* LLM_TOGETHER_*: llm_err sets LLM_TOGETHER_NO */
} llm_status;

/* Record an error: sets st->code and formats st->msg (lowercase, subject in quotes by
 * convention).  Returns code so callers can write `return llm_err(st, LLM_EIO, ...)`.
 * st may be NULL (the error is then only returned). */
int llm_err(llm_status *st, llm_code code, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

/* Prefix the current message with "context: " (e.g. a file name).  Returns st->code. */
int llm_err_prefix(llm_status *st, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/* Reset to LLM_OK with an empty message. */
void llm_status_clear(llm_status *st);

/* sysexits.h exit status for a code (LLM_OK -> 0). */
int llm_exit_code(llm_code code);

/* A short name for a code ("bad data", "i/o error", ...). */
const char *llm_code_name(llm_code code);

#endif
