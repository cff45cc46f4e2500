/* tokenizer_stream.c — encoding inputs of any size a window at a time (llm_encoder).
 *
 * Bytes gather in a window.  When it is full, the part whose encoding can no longer
 * depend on what follows is encoded (on several threads) and handed on, and the rest
 * waits for more bytes.  That part ends at a document boundary that is certain, or
 * inside a document at a cut where GPT-2's pre-tokenizer is certain to have a boundary
 * (llm_tok__cut_ok: before white space, or between letters, digits and punctuation), so the ids are those of encoding each whole input at once.
 */
#include "common/tokenizer_int.h"

#include <stdlib.h>
#include <string.h>

#define DEFAULT_WINDOW (16u << 20)

struct llm_encoder {
    const llm_tokenizer *t;
    int with_eot, split_docs, nthreads;
    size_t window, next_try;
    llm_ids_fn emit;
    void *ctx;
    char *pend;                /* bytes not yet encoded, of the current input */
    size_t n, cap;
    int cont;                  /* pend continues a document begun in an earlier round */
    size_t input_docs;         /* documents begun in the current input */
    uint64_t ntok, bytes;
    size_t ndocs;              /* documents begun */
    int keep_starts;
    uint64_t *starts;          /* with keep_starts: every document's first id */
    size_t cap_starts;
    llm_tok_span *sp;          /* one round's pieces */
    size_t nsp, cap_sp;
    llm_ids ids;
};

int llm_encoder_new(llm_encoder **out, const llm_tokenizer *t, int with_eot, int split_docs,
                    int nthreads, size_t window, llm_ids_fn emit, void *ctx, llm_status *st)
{
    llm_encoder *e = calloc(1, sizeof *e);
    if (!e)
        return llm_err(st, LLM_ENOMEM, "out of memory");
    e->t = t;
    e->with_eot = with_eot;
    e->split_docs = split_docs;
    e->nthreads = nthreads;
    e->window = window ? window : DEFAULT_WINDOW;
    e->next_try = e->window;
    e->emit = emit;
    e->ctx = ctx;
    *out = e;
    return LLM_OK;
}

void llm_encoder_free(llm_encoder *e)
{
    if (!e)
        return;
    free(e->pend);
    free(e->starts);
    free(e->sp);
    llm_ids_free(&e->ids);
    free(e);
}

uint64_t llm_encoder_tokens(const llm_encoder *e)
{
    return e->ntok;
}

uint64_t llm_encoder_bytes(const llm_encoder *e)
{
    return e->bytes;
}

void llm_encoder_keep_starts(llm_encoder *e)
{
    e->keep_starts = 1;
}

const uint64_t *llm_encoder_doc_starts(const llm_encoder *e, size_t *ndocs)
{
    *ndocs = e->ndocs;
    return e->keep_starts ? e->starts : NULL;
}

static int add_piece(llm_encoder *e, size_t at, size_t len, int cont)
{
    if (e->nsp == e->cap_sp) {
        size_t cap = e->cap_sp ? 2 * e->cap_sp : 64;
        llm_tok_span *sp = realloc(e->sp, cap * sizeof *sp);
        if (!sp)
            return -1;
        e->sp = sp;
        e->cap_sp = cap;
    }
    e->sp[e->nsp++] = (llm_tok_span){e->pend + at, len, cont, 0};
    return 0;
}

/* The end of the document that starts at s in pend[0, n): just after the first run of
 * two or more line ends ("\n" or "\r\n") that more text follows, as llm-tokenize's
 * --split-docs has it.  0 when there is none.  Not final: a run that reaches the end of
 * pend is undecided, and *sure is where it begins (n when none is). */
static size_t doc_end(const char *p, size_t s, size_t n, int final, size_t *sure)
{
    *sure = n;
    for (size_t q = s; q < n;) {
        const char *nl = memchr(p + q, '\n', n - q);
        if (!nl)
            return 0;
        size_t r = (size_t)(nl - p) + 1;
        int lines = 1;
        while (r < n && (p[r] == '\n' || (p[r] == '\r' && r + 1 < n && p[r + 1] == '\n')))
            lines += p[r++] == '\n';
        /* the run's end is known when a byte follows it that cannot extend it */
        if (!final && (r == n || (p[r] == '\r' && r + 1 == n))) {
            *sure = (size_t)(nl - p);
            return 0;
        }
        if (lines >= 2 && r < n)
            return r;
        q = r;
    }
    return 0;
}

/* The last safe cut in (s, limit]: everything before it can be encoded now.  s when
 * there is none.  A GPT-2 cut is just before a space or line end, or between a letter,
 * a digit and punctuation (llm_tok__cut_ok); the character after it must be in pend. */
static size_t last_cut(const llm_tokenizer *t, const char *p, size_t s, size_t limit, size_t n)
{
    if (t->kind != LLM_TOK_GPT2)
        return limit;
    for (size_t i = limit < n ? limit : n - 1; i > s; i--)
        if (llm_tok__cut_ok(p, i, n))
            return i;
    return s;
}

/* Encode what can be encoded now (all of pend when final). */
static int round_(llm_encoder *e, int final, llm_status *st)
{
    const char *p = e->pend;
    size_t s = 0, n = e->n;
    int cont = e->cont;
    e->nsp = 0;
    while (s < n) {
        size_t sure = n, b = e->split_docs ? doc_end(p, s, n, final, &sure) : 0;
        if (b) {
            if (add_piece(e, s, b - s, cont))
                goto oom;
            s = b;
            cont = 0;
            continue;
        }
        if (final) {
            if (add_piece(e, s, n - s, cont))
                goto oom;
            s = n;
            break;
        }
        size_t c = last_cut(e->t, p, s, sure, n);
        if (c > s) {
            if (add_piece(e, s, c - s, cont))
                goto oom;
            s = c;
            cont = 1;
        }
        break;
    }
    /* an empty input is an empty document (its end-of-text id only, with --eot) */
    if (final && !e->input_docs && !e->nsp && add_piece(e, 0, 0, 0))
        goto oom;
    if (!e->nsp)
        return LLM_OK;
    e->ids.n = 0;
    int rc = llm_tok__encode_spans(e->t, e->sp, e->nsp, e->with_eot, e->nthreads, &e->ids, st);
    if (rc)
        return rc;
    for (size_t i = 0; i < e->nsp; i++) {
        if (e->sp[i].cont)
            continue;
        if (e->keep_starts) {
            if (e->ndocs == e->cap_starts) {
                size_t cap = e->cap_starts ? 2 * e->cap_starts : 256;
                uint64_t *v = realloc(e->starts, cap * sizeof *v);
                if (!v)
                    goto oom;
                e->starts = v;
                e->cap_starts = cap;
            }
            e->starts[e->ndocs] = e->ntok + e->sp[i].start;
        }
        e->ndocs++;
        e->input_docs++;
    }
    if (e->ids.n && (rc = e->emit(e->ctx, e->ids.v, e->ids.n, st)))
        return rc;
    e->ntok += e->ids.n;
    if (s < n)
        memmove(e->pend, e->pend + s, n - s);
    e->n = n - s;
    e->cont = cont;
    return LLM_OK;
oom:
    return llm_err(st, LLM_ENOMEM, "out of memory");
}

int llm_encoder_feed(llm_encoder *e, const char *p, size_t len, llm_status *st)
{
    while (len) {
        if (e->n == e->cap) {
            size_t cap = e->cap ? 2 * e->cap : (size_t)1 << 20;
            char *np = cap > e->cap ? realloc(e->pend, cap) : NULL;
            if (!np)
                return llm_err(st, LLM_ENOMEM, "out of memory (%zu bytes held without a place "
                               "to cut)", e->n);
            e->pend = np;
            e->cap = cap;
        }
        size_t k = e->cap - e->n < len ? e->cap - e->n : len;
        memcpy(e->pend + e->n, p, k);
        e->n += k;
        e->bytes += k;
        p += k;
        len -= k;
        if (e->n >= e->next_try) {
            int rc = round_(e, 0, st);
            if (rc)
                return rc;
            /* what is left had no place to cut: when it is most of the window, wait
             * for as much again before looking (the window grows only then) */
            e->next_try = 2 * e->n > e->window ? 2 * e->n : e->window;
        }
    }
    return LLM_OK;
}

int llm_encoder_end_input(llm_encoder *e, llm_status *st)
{
    int rc = round_(e, 1, st);
    e->n = 0;
    e->cont = 0;
    e->input_docs = 0;
    e->next_try = e->window;
    return rc;
}
