/* infer_net.h — llm-infer --listen: JSONL requests from many clients over TCP or a
 * Unix-domain socket, all decoded in one continuous batch (llm_infer_run).
 *
 * Each connection sends request lines as --jsonl reads them from stdin and gets one
 * response line per request on the same connection, as each completes.  Lines are
 * taken from the connections in turn, so no client can starve the others.  A client
 * that goes away loses its requests' responses and nothing else; a client that does not
 * read its responses is dropped once LLM_INFER_NET_MAX_OUT bytes wait for it, and one
 * whose input finds no memory to be read into is dropped too (polled with its bytes
 * unread, it would wake every poll at once), as is one whose responses find no memory
 * to wait in (the server goes on).  When all LLM_INFER_NET_MAX_CONN places are taken, a
 * newcomer takes the place of the client silent the longest of those with nothing in
 * flight (no request taken or whole line waiting, no response unsent: idle, or holding
 * part of a line), which is closed; with none such, the newcomer is closed.  So clients
 * that connect and stall (a partial line, or nothing) cannot keep others out.  Nor can
 * clients exhaust memory by what they send: while the bytes received and not yet taken
 * as requests, all clients together, are past LLM_INFER_NET_MAX_IN, no client is read
 * (what they send waits at their sockets) until whole lines are taken; and when the
 * unfinished lines alone pass it, which taking lines cannot cure, the longest is cut
 * (answered with an error, the rest of it dropped, as a line past LLM_INFER_MAX_LINE is).
 * A buffer grown for a long line or a backlog of responses is made small again once
 * it holds little.
 */
#ifndef LLM_INFER_NET_H
#define LLM_INFER_NET_H

#include <signal.h>

#include "common/infer_io.h"
#include "common/infer_sched.h"

#define LLM_INFER_NET_MAX_CONN 64             /* clients at once (then see above) */
#define LLM_INFER_NET_MAX_OUT  (16u << 20)    /* bytes of responses waiting for a client */
#define LLM_INFER_NET_MAX_IN   (256u << 20)   /* bytes received and not yet taken as
                                                requests, all clients together (see above) */
#define LLM_INFER_NET_DRAIN_MS 2000           /* at the end: to send what still waits */
#define LLM_INFER_NET_IDLE_S   60             /* --idle-timeout's default, seconds */
#define LLM_INFER_NET_IDLE_MAX_S 86400        /* and its largest value */

typedef struct llm_infer_net llm_infer_net;

/* Listen on addr: "unix:PATH" (a socket file there is replaced unless a server listens
 * on it: LLM_EIO; any other file is refused), "HOST:PORT" or "[IPV6]:PORT" (PORT 0: any
 * free port).  idle_s (0: none; the caller bounds it) closes a client stalled that long:
 * one with nothing in flight that has sent part of a line and nothing more for that long,
 * and one that has read nothing of its waiting responses for that long (it loses them).
 * A client quiet between requests is not timed out (a newcomer takes its place when all
 * are taken).  src parses the lines (the caller sets it for JSONL, in NULL); stop, when set
 * by a signal handler, ends the wait for requests.  *bound receives the address in the
 * same form, with the port.
 * Errors: LLM_EUSAGE (a bad address), LLM_EIO (socket, bind, listen), LLM_ENOMEM. */
int llm_infer_net_open(llm_infer_net **out, const char *addr, double idle_s,
                       llm_infer_source *src, volatile sig_atomic_t *stop, char *bound,
                       size_t boundlen, llm_status *st);
/* Send the responses still waiting (for LLM_INFER_NET_DRAIN_MS at most), close every
 * connection and the listener (and remove the Unix socket file it bound,
 * if that is still what is at its path). */
void llm_infer_net_free(llm_infer_net *n);

/* The llm_infer_io of a server: next waits for a request from any client (0 only when
 * stop is set), ready says whether one is there without waiting, done sends a response
 * to the client that asked. */
llm_infer_io llm_infer_net_io(llm_infer_net *n);

/* Requests answered so far. */
long llm_infer_net_answered(const llm_infer_net *n);

/* For tests: the bound on the bytes received and not yet taken, all clients together
 * (LLM_INFER_NET_MAX_IN unless set). */
void llm_infer_net_set_max_in(llm_infer_net *n, size_t bytes);

#endif
