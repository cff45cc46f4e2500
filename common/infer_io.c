/* infer_io.c — request parsing (libjansson) and response writing; see infer_io.h. */
#include "common/infer_io.h"

#include <errno.h>
#include <jansson.h>
#include <poll.h>
#include <stdlib.h>
#include <string.h>

#include "common/cli.h"
#include "common/json.h"

struct llm_infer_pending {
    long index;
    char *text;
    size_t len;
    char *error;
};

/* ---------------------------------------------------------------- reading */

/* Read one line (without its newline) into s->line.  Returns 1 and *len, 0 at the end
 * of input, -1 on a read error; *toolong = 1 when the line exceeded the cap (the rest of
 * it was skipped). */
static int read_line(llm_infer_source *s, size_t *len, int *toolong, llm_status *st)
{
    size_t n = 0;
    int c, any = 0;
    *toolong = 0;
    while ((c = getc_unlocked(s->in)) != EOF) {
        any = 1;
        if (c == '\n')
            break;
        if (n >= LLM_INFER_MAX_LINE) {
            *toolong = 1;
            continue;
        }
        if (n + 2 > s->cap) {
            size_t nc = s->cap ? s->cap * 2 : 4096;
            char *p = realloc(s->line, nc);
            if (!p)
                return llm_err(st, LLM_ENOMEM, "out of memory"), -1;
            s->line = p;
            s->cap = nc;
        }
        s->line[n++] = (char)c;
    }
    if (ferror(s->in))
        return llm_err(st, LLM_EIO, "reading input: %s", strerror(errno)), -1;
    if (!any)
        return 0;
    if (n && s->line[n - 1] == '\r')
        n--;
    if (!s->line) {
        s->line = malloc(1);
        if (!s->line)
            return llm_err(st, LLM_ENOMEM, "out of memory"), -1;
        s->cap = 1;
    }
    s->line[n] = 0;
    *len = n;
    return 1;
}

static int set_error(llm_infer_request *req, const char *fmt, const char *a)
{
    char buf[LLM_MSG_MAX];
    snprintf(buf, sizeof buf, fmt, a);
    free(req->error);
    req->error = strdup(buf);
    return req->error ? 1 : -1;
}

/* Tokenize text as the prompt.  An empty prompt starts from end-of-text. */
static int encode(llm_infer_source *s, llm_infer_request *req, const char *text, size_t len,
                  llm_status *st)
{
    if (!s->tok)
        return set_error(req, "%s", "the model file has no tokenizer: send \"tokens\"");
    if (s->ctx > 0 && !s->max_tok_bytes)
        s->max_tok_bytes = llm_tokenizer_max_token_bytes(s->tok);
    if (s->ctx > 0 && len / s->max_tok_bytes > (size_t)s->ctx) {   /* more ids than fit */
        char why[160];
        snprintf(why, sizeof why, "prompt of %zu bytes exceeds the context (%d tokens of at most "
                 "%zu bytes)", len, s->ctx, s->max_tok_bytes);
        return set_error(req, "%s", why);
    }
    llm_ids ids = {0};
    if (len == 0) {
        if (llm_ids_push(&ids, llm_tokenizer_eot(s->tok)))
            return llm_err(st, LLM_ENOMEM, "out of memory"), -1;
    } else if (llm_tokenizer_encode(s->tok, text, len, &ids, st)) {
        llm_ids_free(&ids);
        if (st->code == LLM_ENOMEM)
            return -1;
        set_error(req, "%s", st->msg);
        llm_status_clear(st);
        return 1;
    }
    if (ids.n > (size_t)1 << 30) {
        llm_ids_free(&ids);
        return set_error(req, "%s", "prompt too long");
    }
    req->prompt = ids.v;   /* llm_ids's array is malloc'd: take it over */
    req->n_prompt = (int)ids.n;
    return 0;
}

static void defaults(llm_infer_source *s, llm_infer_request *req)
{
    req->index = s->index;
    req->max_tokens = s->max_tokens;
    req->sp = s->sp;
    req->sp.seed = s->sp.seed + (uint64_t)s->index;
}

static int add_stop(llm_infer_request *req, const char *v)
{
    if (req->n_stops >= LLM_INFER_MAX_STOPS)
        return set_error(req, "%s", "too many stop strings (max 16)");
    size_t l = strlen(v);
    if (l == 0 || l > LLM_INFER_MAX_STOP_LEN)
        return set_error(req, "%s", "a stop string must have 1..256 bytes");
    char **p = realloc(req->stops, (size_t)(req->n_stops + 1) * sizeof *p);
    if (!p)
        return -1;
    req->stops = p;
    if (!(p[req->n_stops] = strdup(v)))
        return -1;
    req->n_stops++;
    return 0;
}

/* A request's own "stop" replaces the command-line strings (defaults() gave it them). */
static void clear_stops(llm_infer_request *req)
{
    for (int i = 0; i < req->n_stops; i++)
        free(req->stops[i]);
    free(req->stops);
    req->stops = NULL;
    req->n_stops = 0;
}

/* Fill req from a JSON request object.  Returns 0, 1 (req->error set) or -1 (no memory). */
static int parse_request(llm_infer_source *s, llm_infer_request *req, const char *line,
                         size_t len, llm_status *st)
{
    json_error_t je;
    json_t *o = json_loadb(line, len, JSON_REJECT_DUPLICATES, &je);
    if (!o)
        return set_error(req, "malformed JSON: %s", je.text);
    int rc = 0;
    if (!json_is_object(o)) {
        rc = set_error(req, "%s", "a request must be a JSON object");
        goto out;
    }
    json_t *id = json_object_get(o, "id");
    if (id) {
        if (json_is_string(id)) {
            req->id_kind = LLM_ID_STR;
            if (!(req->id_str = strdup(json_string_value(id)))) { rc = -1; goto out; }
        } else if (json_is_integer(id)) {
            req->id_kind = LLM_ID_INT;
            req->id_int = json_integer_value(id);
        } else if (json_is_real(id)) {
            req->id_kind = LLM_ID_REAL;
            req->id_real = json_real_value(id);
        } else if (!json_is_null(id)) {
            rc = set_error(req, "%s", "'id' must be a string or a number");
            goto out;
        }
    }
    const char *key;
    json_t *v;
    int have_prompt = 0;
    json_object_foreach(o, key, v) {
        if (strcmp(key, "id") == 0)
            continue;
        if (strcmp(key, "prompt") == 0 || strcmp(key, "tokens") == 0) {
            if (have_prompt++) {
                rc = set_error(req, "%s", "give either 'prompt' or 'tokens', not both");
                goto out;
            }
        }
        if (strcmp(key, "prompt") == 0) {
            if (!json_is_string(v)) { rc = set_error(req, "%s", "'prompt' must be a string"); goto out; }
            if ((rc = encode(s, req, json_string_value(v), json_string_length(v), st)))
                goto out;
        } else if (strcmp(key, "tokens") == 0) {
            size_t n = json_is_array(v) ? json_array_size(v) : 0;
            if (!json_is_array(v) || n == 0) {
                rc = set_error(req, "%s", "'tokens' must be a non-empty array of token ids");
                goto out;
            }
            if (n > (size_t)1 << 24) { rc = set_error(req, "%s", "'tokens' too long"); goto out; }
            if (!(req->prompt = malloc(n * sizeof *req->prompt))) { rc = -1; goto out; }
            for (size_t i = 0; i < n; i++) {
                json_t *t = json_array_get(v, i);
                json_int_t x = json_is_integer(t) ? json_integer_value(t) : -1;
                if (x < 0 || x >= s->vocab) {
                    char what[64];
                    snprintf(what, sizeof what, "%zu", i);
                    rc = set_error(req, "'tokens'[%s] is not a token id of this model", what);
                    goto out;
                }
                req->prompt[i] = (uint32_t)x;
            }
            req->n_prompt = (int)n;
        } else if (strcmp(key, "max_tokens") == 0) {
            json_int_t x = json_is_integer(v) ? json_integer_value(v) : -1;
            if (x < 0 || x > (1 << 30)) { rc = set_error(req, "%s", "'max_tokens' must be an integer >= 0"); goto out; }
            req->max_tokens = (int)x;
        } else if (strcmp(key, "temperature") == 0 || strcmp(key, "top_p") == 0) {
            if (!json_is_number(v)) { rc = set_error(req, "'%s' must be a number", key); goto out; }
            float x = llm_sampler_param(json_number_value(v));
            if (key[0] == 't' && key[1] == 'e') req->sp.temperature = x;
            else req->sp.top_p = x;
        } else if (strcmp(key, "top_k") == 0) {
            json_int_t x = json_is_integer(v) ? json_integer_value(v) : -1;
            if (x < 0 || x > (1 << 30)) { rc = set_error(req, "%s", "'top_k' must be an integer >= 0"); goto out; }
            req->sp.top_k = (int)x;
        } else if (strcmp(key, "seed") == 0) {
            json_int_t x = json_is_integer(v) ? json_integer_value(v) : -1;
            if (x < 0) { rc = set_error(req, "%s", "'seed' must be an integer >= 0"); goto out; }
            req->sp.seed = (uint64_t)x;
        } else if (strcmp(key, "stop") == 0) {
            clear_stops(req);
            if (json_is_string(v)) {
                if ((rc = add_stop(req, json_string_value(v)))) goto out;
            } else if (json_is_array(v)) {
                size_t i;
                json_t *e;
                json_array_foreach(v, i, e) {
                    if (!json_is_string(e)) { rc = set_error(req, "%s", "'stop' must be a string or an array of strings"); goto out; }
                    if ((rc = add_stop(req, json_string_value(e)))) goto out;
                }
            } else if (!json_is_null(v)) {
                rc = set_error(req, "%s", "'stop' must be a string or an array of strings");
                goto out;
            }
        } else {
            rc = set_error(req, "unknown key '%s'", key);
            goto out;
        }
    }
    if (!have_prompt)
        rc = set_error(req, "%s", "missing 'prompt' (or 'tokens')");
out:
    json_decref(o);
    return rc;
}

int llm_infer_source_next(void *src, llm_infer_request *req, llm_status *st)
{
    llm_infer_source *s = src;
    const char *text;
    size_t len;
    int toolong = 0;
    if (s->in) {
        int r = read_line(s, &len, &toolong, st);
        if (r <= 0)
            return r == 0 ? 0 : (int)st->code;
        text = s->line;
    } else {
        if (s->index >= s->n_prompts)
            return 0;
        text = s->prompts[s->index];
        len = strlen(text);
    }
    int r = llm_infer_source_request(s, text, len, toolong, req, st);
    return r > 0 ? 1 : r < 0 ? (int)st->code : LLM_INFER_NEXT_NONE;
}

void llm_infer_bytes_str(char *buf, size_t len, size_t bytes)
{
    const size_t mib = (size_t)1 << 20;
    if (bytes >= mib && bytes % mib == 0)
        snprintf(buf, len, "%zu MiB", bytes / mib);
    else
        snprintf(buf, len, "%zu bytes", bytes);
}

int llm_infer_source_request(llm_infer_source *s, const char *text, size_t len, int toolong,
                             llm_infer_request *req, llm_status *st)
{
    memset(req, 0, sizeof *req);
    if (s->jsonl && !toolong && strspn(text, " \t") == len)
        return 0;   /* blank lines are not requests */
    defaults(s, req);
    s->index++;
    int rc = 0;
    for (int i = 0; i < s->n_stops && rc == 0; i++)
        rc = add_stop(req, s->stops[i]);
    if (rc == 0) {
        if (toolong) {
            char lim[32];
            llm_infer_bytes_str(lim, sizeof lim, LLM_INFER_MAX_LINE);
            rc = set_error(req, "input line longer than %s", lim);
        }
        else if (s->jsonl)
            rc = parse_request(s, req, text, len, st);
        else
            rc = encode(s, req, text, len, st);
    }
    if (rc < 0) {
        llm_infer_request_free(req);
        if (!st->code)
            llm_err(st, LLM_ENOMEM, "out of memory");
        return -1;
    }
    return 1;
}

int llm_infer_source_ready(void *src)
{
    llm_infer_source *s = src;
    if (!s->in)
        return 1;
#ifdef __GLIBC__
    if (s->in->_IO_read_ptr < s->in->_IO_read_end)
        return 1;   /* buffered already (elsewhere such input waits until no slot decodes) */
#endif
    int fd = fileno(s->in);
    if (fd < 0)
        return 1;   /* a memory stream never waits */
    struct pollfd p = {.fd = fd, .events = POLLIN};
    return poll(&p, 1, 0) != 0;   /* data, end of input or an error (which next reports) */
}

void llm_infer_source_free(llm_infer_source *s)
{
    free(s->line);
    s->line = NULL;
    s->cap = 0;
}

/* ---------------------------------------------------------------- writing */

static int out_check(llm_infer_sink *s, llm_status *st)
{
    if (fflush(s->out) == 0 && !ferror(s->out))
        return 0;
    if (llm_cli_stdout_closed(errno)) {
        s->closed = 1;
        return llm_err(st, LLM_EIO, "stdout closed");
    }
    return llm_err(st, LLM_EIO, "writing output: %s", strerror(errno));
}

void llm_infer_result_json(const llm_infer_result *res, FILE *f)
{
    const llm_infer_request *q = res->req;
    llm_json j;
    llm_json_init(&j, f, 0);
    llm_json_obj_begin(&j);
    llm_json_key(&j, "id");
    switch (q->id_kind) {
    case LLM_ID_STR: llm_json_str(&j, q->id_str); break;
    case LLM_ID_INT: llm_json_int(&j, q->id_int); break;
    case LLM_ID_REAL: llm_json_num(&j, q->id_real); break;
    default: llm_json_null(&j);
    }
    llm_json_kint(&j, "index", q->index);
    llm_json_key(&j, "text");
    llm_json_strn(&j, res->text, res->text_len);
    llm_json_key(&j, "tokens");
    llm_json_arr_begin(&j);
    for (int i = 0; i < res->n_tokens; i++)
        llm_json_int(&j, res->tokens[i]);
    llm_json_arr_end(&j);
    llm_json_kint(&j, "prompt_tokens", res->error ? 0 : q->n_prompt);
    llm_json_kint(&j, "completion_tokens", res->n_tokens);
    llm_json_kstr(&j, "finish_reason", res->finish_reason);
    if (res->error)
        llm_json_kstr(&j, "error", res->error);
    llm_json_knum(&j, "ttft_ms", res->ttft_ms);
    llm_json_knum(&j, "tokens_per_s", res->tokens_per_s);
    llm_json_knum(&j, "prefill_tokens_per_s", res->prefill_tokens_per_s);
    llm_json_knum(&j, "decode_tokens_per_s", res->decode_tokens_per_s);
    llm_json_knum(&j, "tpot_ms_mean", res->tpot_ms_mean);
    llm_json_knum(&j, "tpot_ms_p50", res->tpot_ms_p50);
    llm_json_knum(&j, "tpot_ms_p99", res->tpot_ms_p99);
    llm_json_obj_end(&j);
}

int llm_infer_sink_token(void *sink, const llm_infer_request *req, const char *b, size_t n,
                         llm_status *st)
{
    llm_infer_sink *s = sink;
    (void)req;
    if (!s->stream)
        return 0;
    fwrite(b, 1, n, s->out);
    return out_check(s, st);
}

static int print_plain(llm_infer_sink *s, long index, const char *text, size_t len,
                       const char *error, llm_status *st)
{
    if (error) {
        fprintf(s->err, "%s: prompt %ld: %s\n", s->prog, index + 1, error);
        return 0;
    }
    fwrite(text, 1, len, s->out);
    fputc('\n', s->out);
    return out_check(s, st);
}

int llm_infer_sink_flush(llm_infer_sink *s, llm_status *st)
{
    /* print held results in index order, skipping gaps (only after a fatal stop) */
    while (s->n_pending > 0) {
        int best = 0;
        for (int i = 1; i < s->n_pending; i++)
            if (s->pending[i].index < s->pending[best].index)
                best = i;
        struct llm_infer_pending p = s->pending[best];
        s->pending[best] = s->pending[--s->n_pending];
        int rc = print_plain(s, p.index, p.text, p.len, p.error, st);
        free(p.text);
        free(p.error);
        if (rc)
            return rc;
        s->next_index = p.index + 1;
    }
    return 0;
}

int llm_infer_sink_done(void *sink, const llm_infer_result *res, llm_status *st)
{
    llm_infer_sink *s = sink;
    if (res->error)
        s->errors++;
    if (s->jsonl) {
        llm_infer_result_json(res, s->out);
        fputc('\n', s->out);
        return out_check(s, st);
    }
    if (s->stream) {
        if (res->error)
            return print_plain(s, res->req->index, NULL, 0, res->error, st);
        fputc('\n', s->out);
        return out_check(s, st);
    }
    /* plain: hold until every earlier prompt has been printed */
    if (s->n_pending == s->cap_pending) {
        int nc = s->cap_pending ? s->cap_pending * 2 : 16;
        struct llm_infer_pending *p = realloc(s->pending, (size_t)nc * sizeof *p);
        if (!p)
            return llm_err(st, LLM_ENOMEM, "out of memory");
        s->pending = p;
        s->cap_pending = nc;
    }
    struct llm_infer_pending *p = &s->pending[s->n_pending];
    p->index = res->req->index;
    p->len = res->text_len;
    p->text = malloc(res->text_len + 1);
    p->error = res->error ? strdup(res->error) : NULL;
    if (!p->text || (res->error && !p->error)) {
        free(p->text);
        free(p->error);
        return llm_err(st, LLM_ENOMEM, "out of memory");
    }
    memcpy(p->text, res->text, res->text_len);
    s->n_pending++;
    for (;;) {
        int found = -1;
        for (int i = 0; i < s->n_pending; i++)
            if (s->pending[i].index == s->next_index)
                found = i;
        if (found < 0)
            return 0;
        struct llm_infer_pending q = s->pending[found];
        s->pending[found] = s->pending[--s->n_pending];
        int rc = print_plain(s, q.index, q.text, q.len, q.error, st);
        free(q.text);
        free(q.error);
        s->next_index++;
        if (rc)
            return rc;
    }
}

void llm_infer_sink_free(llm_infer_sink *s)
{
    for (int i = 0; i < s->n_pending; i++) {
        free(s->pending[i].text);
        free(s->pending[i].error);
    }
    free(s->pending);
    s->pending = NULL;
    s->n_pending = s->cap_pending = 0;
}
