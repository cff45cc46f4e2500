/* infer_io.h — llm-infer's request sources (prompts, lines, JSONL request objects) and
 * result sinks (plain text in input order, streaming, JSONL response objects).
 * They plug into llm_infer_run as an llm_infer_io.
 */
#ifndef LLM_INFER_IO_H
#define LLM_INFER_IO_H

#include <stdio.h>

#include "common/infer_sched.h"
#include "common/tokenizer.h"

/* bytes per input line (the fuzz build makes it small, so that its fuzzers reach the cut) */
#ifndef LLM_INFER_MAX_LINE
#define LLM_INFER_MAX_LINE (16u << 20)
#endif
#define LLM_INFER_MAX_STOPS 16
#define LLM_INFER_MAX_STOP_LEN 256

typedef struct {
    /* configuration (set by the caller) */
    FILE *in;                   /* lines to read; NULL: use prompts[] */
    int jsonl;                  /* lines are JSON request objects */
    const char *const *prompts; /* -p / -f texts when in is NULL */
    int n_prompts;
    const llm_tokenizer *tok;   /* NULL: only "tokens" requests work */
    int vocab;                  /* model vocabulary (ids must be below) */
    int ctx;                    /* model context: a longer prompt text is refused before
                                   it is encoded (0: no check here) */
    int max_tokens;             /* defaults for fields a request leaves out */
    llm_sampler_params sp;      /* sp.seed: base; request i defaults to base + i */
    const char *const *stops;
    int n_stops;
    /* state */
    size_t max_tok_bytes;       /* of tok, once known */
    long index;
    char *line;
    size_t cap;
} llm_infer_source;

/* llm_infer_io.next for a source.  A request that cannot be parsed is returned with
 * req->error set (and its id when one could be read), so it is answered, not fatal.
 * Fatal: LLM_EIO when reading fails, LLM_ENOMEM. */
int llm_infer_source_next(void *src, llm_infer_request *req, llm_status *st);
/* One line of input (without its newline; text[len] is 0) as a request of s: 1 and *req
 * filled (an unusable line gets req->error), 0 for a blank line in JSONL mode (no
 * request), -1 when out of memory (st set).  toolong: the line was longer than
 * LLM_INFER_MAX_LINE and was cut (answered with an error). */
int llm_infer_source_request(llm_infer_source *s, const char *text, size_t len, int toolong,
                             llm_infer_request *req, llm_status *st);
/* A limit of bytes as messages say it: "16 MiB" when it is a whole number of MiB, else
 * "600 bytes" (the fuzz build's small limits). */
void llm_infer_bytes_str(char *buf, size_t len, size_t bytes);
/* llm_infer_io.ready for a source: 0 when reading the next line would wait for input. */
int llm_infer_source_ready(void *src);
void llm_infer_source_free(llm_infer_source *s);

typedef struct {
    /* configuration */
    FILE *out;
    int jsonl;       /* one response object per request, as each completes */
    int stream;      /* plain text streamed token by token (one request at a time) */
    FILE *err;       /* where plain mode reports failed requests ("PROG: prompt N: ...") */
    const char *prog;
    /* state */
    long next_index; /* plain mode: results are printed in input order */
    struct llm_infer_pending *pending;
    int n_pending, cap_pending;
    long errors;     /* requests that ended in "error" */
    int closed;      /* stdout was closed (EPIPE): end quietly */
} llm_infer_sink;

int llm_infer_sink_token(void *sink, const llm_infer_request *req, const char *b, size_t n,
                         llm_status *st);
int llm_infer_sink_done(void *sink, const llm_infer_result *res, llm_status *st);
/* Print what plain mode still holds back (after a fatal error: everything finished). */
int llm_infer_sink_flush(llm_infer_sink *s, llm_status *st);
void llm_infer_sink_free(llm_infer_sink *s);

/* Write one response object (no newline) for res. */
void llm_infer_result_json(const llm_infer_result *res, FILE *f);

#endif
