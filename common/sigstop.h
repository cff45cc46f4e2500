/* sigstop.h — SIGTERM, SIGINT and SIGUSR1 as a request to stop (llm-train, llm-bench):
 * the handlers, and the one file a signal that ends the process at once removes first
 * (rank 0's --dist-init file: id while the other ranks have not all read it).
 *
 * A signal handler can reach only process-wide state, so this module holds some: the
 * stop flag, the line for llm_sigstop_catch_exit and the armed path, all set before they
 * are needed, so that the handlers themselves only write(2), unlink(2) and _exit(2). */
#ifndef LLM_SIGSTOP_H
#define LLM_SIGSTOP_H

#include <signal.h>

/* The stop request: 0, or the number of the signal that asked (for llm_dist_opts.stop
 * and the loops that look at it). */
const volatile sig_atomic_t *llm_sigstop_flag(void);

/* SIGTERM, SIGINT and SIGUSR1 from now on set the flag (SA_RESTART); a SIGINT that comes
 * after a request (a second Ctrl-C) ends the process at once with status 130, after
 * removing the armed file. */
void llm_sigstop_catch(void);

/* SIGTERM, SIGINT and SIGUSR1 from now on end the process at once with status 0, after
 * writing line (NULL: nothing; copied, up to 255 bytes) to stderr and removing the armed
 * file: for a start where nothing is written yet, also inside a blocking read. */
void llm_sigstop_catch_exit(const char *line);

/* The three back to the dispositions they had before the first catch above: the
 * default, or ignored (a background job's SIGINT).  The armed file stays armed. */
void llm_sigstop_restore(void);

/* Arm path (copied; NULL: disarm): until it is disarmed, a signal that ends the process
 * at once (above) unlinks it first.  One path at a time; a path of PATH_MAX bytes or more
 * is not armed (returns -1; else 0).  Safe to call from any thread. */
int llm_sigstop_unlink_on_exit(const char *path);

#endif
