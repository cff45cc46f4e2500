/* infer_sched.c — continuous batching over cache slots; see infer_sched.h. */
#include "common/infer_sched.h"
#include "common/clock.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#ifdef _OPENMP
#include <omp.h>
#endif

#include "common/json.h"

typedef struct {
    int active;
    llm_infer_request req;
    llm_sampler smp;
    uint32_t *toks;
    int n, cap;
    int len;               /* positions in the KV cache */
    uint32_t last;         /* sampled, not yet fed */
    char *text;
    size_t tlen, tcap, emitted;
    size_t max_stop;
    double t_admit, t_first, t_prev, prefill_s;
    double *iv;            /* inter-token intervals (ms) */
    size_t n_iv, cap_iv;
} slot_t;

void llm_infer_request_free(llm_infer_request *r)
{
    free(r->id_str);
    free(r->prompt);
    for (int i = 0; i < r->n_stops; i++)
        free(r->stops[i]);
    free(r->stops);
    free(r->error);
    memset(r, 0, sizeof *r);
}

void llm_infer_stats_free(llm_infer_stats *s)
{
    free(s->tpot_ms);
    memset(s, 0, sizeof *s);
}

static int cmp_dbl(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

double llm_percentile(double *x, size_t n, double p)
{
    if (n == 0)
        return 0.0;
    qsort(x, n, sizeof *x, cmp_dbl);
    double r = p / 100.0 * (double)(n - 1);
    size_t i = (size_t)r;
    if (i + 1 >= n)
        return x[n - 1];
    return x[i] + (r - (double)i) * (x[i + 1] - x[i]);
}

static double mean(const double *x, size_t n)
{
    double s = 0.0;
    for (size_t i = 0; i < n; i++)
        s += x[i];
    return n ? s / (double)n : 0.0;
}

void llm_infer_stats_write(const llm_infer_stats *s, FILE *f)
{
    llm_json j;
    llm_json_init(&j, f, 0);
    llm_json_obj_begin(&j);
    llm_json_kint(&j, "requests", s->requests);
    llm_json_kint(&j, "errors", s->errors);
    llm_json_kint(&j, "prompt_tokens", s->prompt_tokens);
    llm_json_kint(&j, "completion_tokens", s->completion_tokens);
    llm_json_knum(&j, "prefill_tokens_per_s", s->prefill_s > 0 ? s->prompt_tokens / s->prefill_s : 0.0);
    llm_json_knum(&j, "decode_tokens_per_s", s->decode_s > 0 ? s->decode_tokens / s->decode_s : 0.0);
    llm_json_knum(&j, "ttft_ms", s->n_ttft ? s->ttft_ms_sum / s->n_ttft : 0.0);
    double *tp = s->n_tpot ? malloc(s->n_tpot * sizeof *tp) : NULL;
    size_t nt = tp ? s->n_tpot : 0;
    if (tp)
        memcpy(tp, s->tpot_ms, nt * sizeof *tp);
    llm_json_knum(&j, "tpot_ms_mean", s->tpot_seen ? s->tpot_sum / (double)s->tpot_seen : 0.0);
    llm_json_knum(&j, "tpot_ms_p50", llm_percentile(tp, nt, 50));
    llm_json_knum(&j, "tpot_ms_p99", llm_percentile(tp, nt, 99));
    free(tp);
    llm_json_obj_end(&j);
    fputc('\n', f);
    fflush(f);
}

static int push_dbl(double **v, size_t *n, size_t *cap, double x)
{
    if (*n == *cap) {
        size_t nc = *cap ? *cap * 2 : 64;
        double *p = realloc(*v, nc * sizeof *p);
        if (!p)
            return -1;
        *v = p;
        *cap = nc;
    }
    (*v)[(*n)++] = x;
    return 0;
}

/* A server's run generates without end: past LLM_INFER_TPOT_KEEP intervals, interval k
 * (0-based) replaces a random kept one with probability KEEP/(k+1) (reservoir sampling),
 * so the percentiles are of a uniform sample and the memory stays 8 MB. */
int llm_infer_stats_add_tpot(llm_infer_stats *s, double ms)
{
    uint64_t k = s->tpot_seen++;
    s->tpot_sum += ms;
    if (s->n_tpot < LLM_INFER_TPOT_KEEP)
        return push_dbl(&s->tpot_ms, &s->n_tpot, &s->cap_tpot, ms);
    uint64_t z = llm_splitmix64(&s->tpot_rng) % (k + 1);
    if (z < s->n_tpot)
        s->tpot_ms[z] = ms;
    return 0;
}

typedef struct {
    llm_infer_ctx *c;
    llm_infer_model *m;
    const llm_infer_io *io;
    llm_infer_stats *stats;
    llm_sampler_scratch *scratch;   /* one per sampling thread */
    int nscratch;
    float *logits;          /* (slots, Vp) host */
    int32_t *tok;           /* (slots) a decode step's tokens, by row */
    llm_infer_row *rows;
    int *which;
    int slots;
    int64_t eot;            /* -1: none */
} run_t;

static void slot_clear(slot_t *s)
{
    llm_infer_request_free(&s->req);
    free(s->toks);
    free(s->text);
    free(s->iv);
    memset(s, 0, sizeof *s);
}

static int io_fail(llm_status *st)
{
    return st->code ? (int)st->code : llm_err(st, LLM_EIO, "output closed");
}

static int finish(run_t *r, slot_t *s, const char *reason, const char *error, llm_status *st)
{
    double t = llm_now_s();
    llm_infer_result res = {0};
    res.req = &s->req;
    res.text = s->text ? s->text : "";
    res.text_len = s->tlen;
    res.tokens = s->toks;
    res.n_tokens = s->n;
    res.finish_reason = reason;
    res.error = error;
    if (s->t_first > 0) {
        res.ttft_ms = (s->t_first - s->t_admit) * 1e3;
        r->stats->ttft_ms_sum += res.ttft_ms;
        r->stats->n_ttft++;
    }
    res.tokens_per_s = t > s->t_admit && s->n ? s->n / (t - s->t_admit) : 0.0;
    res.prefill_tokens_per_s = s->prefill_s > 0 ? s->req.n_prompt / s->prefill_s : 0.0;
    res.decode_tokens_per_s = s->n_iv ? 1e3 / mean(s->iv, s->n_iv) : 0.0;
    res.tpot_ms_mean = mean(s->iv, s->n_iv);
    for (size_t i = 0; i < s->n_iv; i++)
        if (llm_infer_stats_add_tpot(r->stats, s->iv[i]))
            return llm_err(st, LLM_ENOMEM, "out of memory");
    res.tpot_ms_p50 = llm_percentile(s->iv, s->n_iv, 50);
    res.tpot_ms_p99 = llm_percentile(s->iv, s->n_iv, 99);
    r->stats->requests++;
    if (error)
        r->stats->errors++;
    else {
        r->stats->prompt_tokens += s->req.n_prompt;
        r->stats->completion_tokens += s->n;
    }
    /* the rest of the text (held back while it could begin a stop string) */
    if (r->io->token && !error && s->emitted < s->tlen &&
        r->io->token(r->io->out, &s->req, s->text + s->emitted, s->tlen - s->emitted, st))
        return io_fail(st);
    int rc = r->io->done(r->io->out, &res, st);
    slot_clear(s);
    if (rc)
        return io_fail(st);
    return LLM_OK;
}

static int append_text(slot_t *s, const char *b, size_t n)
{
    if (s->tlen + n + 1 > s->tcap) {
        size_t nc = s->tcap ? s->tcap * 2 : 256;
        while (nc < s->tlen + n + 1)
            nc *= 2;
        char *p = realloc(s->text, nc);
        if (!p)
            return -1;
        s->text = p;
        s->tcap = nc;
    }
    memcpy(s->text + s->tlen, b, n);
    s->tlen += n;
    s->text[s->tlen] = 0;
    return 0;
}

/* Where the text ends when a stop string ends past `before` (text older than that was
 * searched already): the earliest start among them, whatever their order, else tlen. */
static size_t stop_at(const slot_t *s, size_t before)
{
    size_t cut = s->tlen;
    for (int i = 0; i < s->req.n_stops; i++) {
        size_t sl = strlen(s->req.stops[i]);
        size_t from = before >= sl ? before - sl + 1 : 0;
        for (size_t p = from; p + sl <= s->tlen && p < cut; p++)
            if (memcmp(s->text + p, s->req.stops[i], sl) == 0) {
                cut = p;
                break;
            }
    }
    return cut;
}

/* A token was sampled for s: record it, apply the stopping rules, stream what is final.
 * *done = 1 when the request finished (already delivered). */
static int on_token(run_t *r, slot_t *s, int tok, int *done, llm_status *st)
{
    double t = llm_now_s();
    *done = 0;
    if (s->t_first == 0)
        s->t_first = t;
    else if (push_dbl(&s->iv, &s->n_iv, &s->cap_iv, (t - s->t_prev) * 1e3))
        return llm_err(st, LLM_ENOMEM, "out of memory");
    s->t_prev = t;
    if (r->eot >= 0 && tok == r->eot) {
        *done = 1;
        return finish(r, s, "stop", NULL, st);
    }
    if (s->n == s->cap) {
        int nc = s->cap ? s->cap * 2 : 64;
        uint32_t *p = realloc(s->toks, (size_t)nc * sizeof *p);
        if (!p)
            return llm_err(st, LLM_ENOMEM, "out of memory");
        s->toks = p;
        s->cap = nc;
    }
    s->toks[s->n++] = (uint32_t)tok;
    s->last = (uint32_t)tok;
    size_t before = s->tlen;
    if (r->m->tok) {
        const char *b;
        size_t n;
        if (llm_tokenizer_token_bytes(r->m->tok, (uint32_t)tok, &b, &n, st) == LLM_OK) {
            if (append_text(s, b, n))
                return llm_err(st, LLM_ENOMEM, "out of memory");
        } else {
            llm_status_clear(st);  /* ids beyond the tokenizer (padding) print nothing */
        }
    }
    size_t cut = stop_at(s, before);
    if (cut < s->tlen) {
        s->tlen = cut;
        s->text[cut] = 0;
        *done = 1;
        return finish(r, s, "stop", NULL, st);
    }
    if (s->n >= s->req.max_tokens) {
        *done = 1;
        return finish(r, s, "length", NULL, st);
    }
    if (s->len >= r->m->cfg.max_seq_len) {   /* no position left to feed the token */
        *done = 1;
        return finish(r, s, "context", NULL, st);
    }
    if (r->io->token) {
        size_t safe = s->tlen > s->max_stop ? s->tlen - s->max_stop : 0;
        if (safe > s->emitted) {
            if (r->io->token(r->io->out, &s->req, s->text + s->emitted, safe - s->emitted, st))
                return io_fail(st);
            s->emitted = safe;
        }
    }
    return LLM_OK;
}

static int sample(run_t *r, slot_t *s, const float *logits, llm_status *st)
{
    int tok = llm_sampler_sample(&s->smp, logits, r->m->cfg.vocab_size, &r->scratch[0]);
    if (tok < 0)
        return llm_err(st, LLM_ENOMEM, "out of memory");
    return tok;
}

/* s samples greedily: llm_sampler_sample then returns llm_argmax of the logits (for any
 * V >= 1) and draws nothing from its RNG, so llm_infer_argmax gives the same tokens. */
static int greedy(const slot_t *s)
{
    return s->smp.p.temperature <= 0.0f;
}

/* Admit req into s: prefill its prompt and sample its first token. */
static int admit(run_t *r, slot_t *s, int slot, llm_infer_request *req, llm_status *st)
{
    memset(s, 0, sizeof *s);
    s->req = *req;
    memset(req, 0, sizeof *req);
    s->active = 1;
    s->t_admit = llm_now_s();
    for (int i = 0; i < s->req.n_stops; i++) {
        size_t l = strlen(s->req.stops[i]);
        if (l - 1 > s->max_stop)
            s->max_stop = l - 1;
    }
    const char *err = NULL;
    char msg[LLM_MSG_MAX];
    int T = r->m->cfg.max_seq_len;
    if (s->req.error)
        err = s->req.error;
    else if (s->req.n_prompt < 1)
        err = "empty prompt";
    else if (s->req.n_prompt > T) {
        snprintf(msg, sizeof msg, "prompt of %d tokens exceeds the context (%d)",
                 s->req.n_prompt, T);
        err = msg;
    } else if (llm_sampler_init(&s->smp, &s->req.sp, st)) {
        snprintf(msg, sizeof msg, "%s", st->msg);
        llm_status_clear(st);
        err = msg;
    }
    if (err)
        return finish(r, s, "error", err, st);
    if (s->req.max_tokens == 0)
        return finish(r, s, "length", NULL, st);
    double t0 = llm_now_s();
    int R = llm_infer_ctx_max_rows(r->c), P = s->req.n_prompt;
    for (int p0 = 0; p0 < P; p0 += R) {
        int k = P - p0 < R ? P - p0 : R;
        llm_infer_row *rows = malloc((size_t)k * sizeof *rows);
        if (!rows)
            return llm_err(st, LLM_ENOMEM, "out of memory");
        for (int i = 0; i < k; i++)
            rows[i] = (llm_infer_row){(int32_t)s->req.prompt[p0 + i], slot, p0 + i};
        int rc = llm_infer_forward(r->c, rows, k, st);
        free(rows);
        if (rc) {
            /* a bad id in a request is that request's problem */
            snprintf(msg, sizeof msg, "%s", st->msg);
            llm_status_clear(st);
            return finish(r, s, "error", msg, st);
        }
    }
    int last = (P - 1) % R;
    int32_t tok = 0;
    /* greedy: the sampler's argmax, on the device where the backend can */
    if (greedy(s) ? llm_infer_argmax(r->c, &last, 1, &tok, st)
                  : llm_infer_logits(r->c, &last, 1, r->logits, st))
        return st->code;
    s->len = P;
    s->prefill_s = llm_now_s() - t0;
    r->stats->prefill_s += s->prefill_s;
    if (!greedy(s) && (tok = sample(r, s, r->logits, st)) < 0)
        return st->code;
    int done;
    return on_token(r, s, tok, &done, st);
}

int llm_infer_run(llm_infer_ctx *c, llm_infer_model *m, int slots, const llm_infer_io *io,
                  llm_infer_stats *stats, llm_status *st)
{
    run_t r = {.c = c, .m = m, .io = io, .stats = stats, .slots = slots, .eot = -1};
    if (m->tok)
        r.eot = llm_tokenizer_eot(m->tok);
    slot_t *sl = calloc((size_t)slots, sizeof *sl);
    r.logits = llm_backend_host_alloc(m->be, (size_t)slots * m->cfg.padded_vocab * sizeof(float));
    r.rows = malloc((size_t)slots * sizeof *r.rows);
    r.which = malloc((size_t)slots * sizeof *r.which);
    r.tok = malloc((size_t)slots * sizeof *r.tok);
    /* the rows of a decode step sample in parallel (each request has its own RNG): a
     * vocabulary's softmax per row is host work the device waits for */
    r.nscratch = slots < m->be->threads ? slots : m->be->threads;
    if (r.nscratch < 1)
        r.nscratch = 1;
    r.scratch = calloc((size_t)r.nscratch, sizeof *r.scratch);
    int rc = LLM_OK, eof = 0;
    if (!sl || !r.logits || !r.rows || !r.which || !r.tok || !r.scratch) {
        rc = llm_err(st, LLM_ENOMEM, "out of memory");
        goto out;
    }
    for (;;) {
        if (io->stop && *io->stop) {
            int cut = 0;
            for (int i = 0; i < slots && !rc; i++)
                if (sl[i].active) {
                    rc = finish(&r, &sl[i], "interrupted", NULL, st);
                    cut++;
                }
            if (!rc)
                rc = llm_err(st, LLM_EINTR, "interrupted: %d request(s) cut short", cut);
            goto out;
        }
        int busy = 0;   /* slots decoding */
        for (int i = 0; i < slots; i++)
            busy += sl[i].active;
        for (int i = 0; i < slots && !eof; i++) {
            if (sl[i].active)
                continue;
            if (busy && io->ready && !io->ready(io->in))
                break;   /* decode what was admitted rather than wait for input */
            llm_infer_request req;
            memset(&req, 0, sizeof req);
            int g = io->next(io->in, &req, st);
            if (g != 1 && io->stop && *io->stop) {   /* a read the signal cut short */
                llm_infer_request_free(&req);
                llm_status_clear(st);
                break;
            }
            if (g == LLM_INFER_NEXT_NONE) {
                i--;   /* the same slot, once ready has been asked again */
                continue;
            }
            if (g == 0) {
                eof = 1;
                break;
            }
            if (g != 1) {
                llm_infer_request_free(&req);
                rc = st->code ? (int)st->code : llm_err(st, LLM_ESOFTWARE, "request source failed");
                goto out;
            }
            if ((rc = admit(&r, &sl[i], i, &req, st)))
                goto out;
            if (sl[i].active) {
                busy++;
                continue;
            }
            i--;   /* finished at once: the slot is free again */
        }
        int n = 0;
        for (int i = 0; i < slots; i++)
            if (sl[i].active) {
                r.rows[n] = (llm_infer_row){(int32_t)sl[i].last, i, sl[i].len};
                r.which[n] = n;
                n++;
            }
        if (n == 0) {
            if (eof)
                break;
            continue;
        }
        double t0 = llm_now_s();
        /* a step whose rows all sample greedily takes their ids alone (computed on the
         * device where the backend can); any other step brings the logits back */
        int all_greedy = 1;
        for (int k = 0; k < n && all_greedy; k++)
            all_greedy = greedy(&sl[r.rows[k].slot]);
        /* each request's row computed exactly as it would be alone: on a backend whose
         * matmul_rows changes method past rows_invariant rows (the cpu's sgemm, at
         * prefill sizes), the step runs as groups of at most that many, of equal sizes */
        int lim = m->be->rows_invariant > 0 ? m->be->rows_invariant : n;
        int ng = (n + lim - 1) / lim, per = (n + ng - 1) / ng;
        for (int g0 = 0; g0 < n; g0 += per) {
            int k = n - g0 < per ? n - g0 : per;
            if ((rc = llm_infer_forward(c, r.rows + g0, k, st)) ||
                (rc = all_greedy ? llm_infer_argmax(c, r.which, k, r.tok + g0, st)
                                 : llm_infer_logits(c, r.which, k,
                                                    r.logits + (size_t)g0 * m->cfg.padded_vocab, st)))
                goto out;
        }
        /* row k of the logits is the k-th active slot's (in slot order, as rows) */
        int V = m->cfg.vocab_size, nt = r.nscratch;
        if (!all_greedy) {
#pragma omp parallel for num_threads(nt) schedule(dynamic, 1) if (n > 1 && nt > 1)
            for (int k = 0; k < n; k++) {
                int t = 0;
#ifdef _OPENMP
                t = omp_get_thread_num();
#endif
                r.tok[k] = llm_sampler_sample(&sl[r.rows[k].slot].smp,
                                              r.logits + (size_t)k * m->cfg.padded_vocab, V,
                                              &r.scratch[t]);
            }
        }
        int k = 0;
        for (int i = 0; i < slots; i++) {
            if (!sl[i].active)
                continue;
            sl[i].len++;
            int tok = r.tok[k++];
            if (tok < 0) {
                rc = llm_err(st, LLM_ENOMEM, "out of memory");
                goto out;
            }
            int done;
            if ((rc = on_token(&r, &sl[i], tok, &done, st)))
                goto out;
        }
        stats->decode_s += llm_now_s() - t0;
        stats->decode_tokens += n;
    }
out:
    if (sl)
        for (int i = 0; i < slots; i++)
            if (sl[i].active)
                slot_clear(&sl[i]);
    free(sl);
    llm_backend_host_free(m->be, r.logits);
    free(r.rows);
    free(r.which);
    free(r.tok);
    for (int t = 0; r.scratch && t < r.nscratch; t++)
        llm_sampler_scratch_free(&r.scratch[t]);
    free(r.scratch);
    return rc;
}
