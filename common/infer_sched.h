/* infer_sched.h — requests, continuous batching and stopping rules for generation.
 *
 * Up to `slots` requests decode together: each step runs one row per active request
 * through the model (one matmul per weight for all of them); a new request is prefilled
 * (its whole prompt in one forward, logits only for the last position) as soon as a
 * slot is free.  Results are delivered as each request finishes, so their order may
 * differ from the input order.  Every request samples from its own seeded stream, so
 * its tokens do not depend on the other requests in the batch.
 */
#ifndef LLM_INFER_SCHED_H
#define LLM_INFER_SCHED_H

#include <signal.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "common/infer.h"
#include "common/sampler.h"

enum { LLM_ID_NONE = 0, LLM_ID_STR, LLM_ID_INT, LLM_ID_REAL };

/* One request.  All pointers are owned by the request (llm_infer_request_free). */
typedef struct {
    long index;               /* 0-based position in the input */
    int id_kind;              /* LLM_ID_*: the request's "id", echoed in its response */
    char *id_str;
    long long id_int;
    double id_real;
    uint32_t *prompt;         /* token ids */
    int n_prompt;
    int max_tokens;           /* >= 0 */
    llm_sampler_params sp;
    char **stops;             /* stop strings (non-empty) */
    int n_stops;
    char *error;              /* non-NULL: answered with finish_reason "error" */
    uint64_t route;           /* the source's own: where the response goes (--listen) */
} llm_infer_request;

void llm_infer_request_free(llm_infer_request *r);

/* What a finished request produced. */
typedef struct {
    const llm_infer_request *req;
    const char *text;          /* generated text (stop string removed), text_len bytes */
    size_t text_len;
    const uint32_t *tokens;    /* generated ids (end-of-text not included) */
    int n_tokens;
    const char *finish_reason; /* "stop" | "length" | "context" | "error" | "interrupted" */
    const char *error;         /* message when finish_reason is "error" */
    double ttft_ms;            /* admission to first token */
    double tokens_per_s;       /* completion tokens / (admission to finish) */
    double prefill_tokens_per_s, decode_tokens_per_s;
    double tpot_ms_mean, tpot_ms_p50, tpot_ms_p99;
} llm_infer_result;

/* Where requests come from and results go.  next: 1 and *req filled (zeroed first by
 * the caller), LLM_INFER_NEXT_NONE when it took input that is no request (a blank line:
 * ready is asked again, so that a source never waits while requests decode), 0 at the
 * end, or an llm_code (st set) to stop everything.  token: text
 * that is final (stream it), may be NULL.  done: one finished request.  token/done
 * return 0, or non-zero to stop (e.g. stdout closed), which llm_infer_run returns as
 * LLM_EIO with their message in st. */
#define LLM_INFER_NEXT_NONE (-1)

typedef struct {
    int (*next)(void *u, llm_infer_request *req, llm_status *st);
    int (*token)(void *u, const llm_infer_request *req, const char *bytes, size_t n,
                 llm_status *st);
    int (*done)(void *u, const llm_infer_result *res, llm_status *st);
    void *in;    /* passed to next */
    void *out;   /* passed to token and done */
    /* NULL, or 0 when next would wait for input: then, while requests are decoding,
     * llm_infer_run does not call next (a client may wait for their responses before
     * sending more) */
    int (*ready)(void *u);   /* passed in */
    /* NULL, or a flag (set by a signal handler) that ends the run: nothing more is read,
     * the requests in flight are answered at once with finish reason "interrupted" and
     * their text so far, and llm_infer_run returns LLM_EINTR */
    volatile sig_atomic_t *stop;
} llm_infer_io;

/* Totals over a run (llm_infer_stats_free releases tpot). */
typedef struct {
    long requests, errors;
    long prompt_tokens, completion_tokens, decode_tokens;
    double prefill_s, decode_s, ttft_ms_sum;
    long n_ttft;
    double *tpot_ms;           /* inter-token intervals: all of the first
                                  LLM_INFER_TPOT_KEEP, then a uniform sample of as many */
    size_t n_tpot, cap_tpot;
    uint64_t tpot_seen, tpot_rng;
    double tpot_sum;           /* over all of them */
} llm_infer_stats;

#define LLM_INFER_TPOT_KEEP ((size_t)1 << 20)

void llm_infer_stats_free(llm_infer_stats *s);

/* One inter-token interval into s (memory bounded by LLM_INFER_TPOT_KEEP).  0, or -1 when
 * out of memory. */
int llm_infer_stats_add_tpot(llm_infer_stats *s, double ms);
/* The --stats line: {"prompt_tokens", "completion_tokens", "prefill_tokens_per_s",
 * "decode_tokens_per_s", "ttft_ms", "tpot_ms_mean", "tpot_ms_p50", "tpot_ms_p99"}
 * (+ "requests", "errors"), then a newline. */
void llm_infer_stats_write(const llm_infer_stats *s, FILE *f);

/* Serve every request of io on c (slots = its batch size).  Returns LLM_OK when the
 * input is exhausted, or the first fatal error (a request's own problem is not fatal: it
 * gets an "error" result). */
int llm_infer_run(llm_infer_ctx *c, llm_infer_model *m, int slots, const llm_infer_io *io,
                  llm_infer_stats *stats, llm_status *st);

/* Percentile p (0..100) of x[0..n) (sorted in place); 0 when n == 0. */
double llm_percentile(double *x, size_t n, double p);

#endif
