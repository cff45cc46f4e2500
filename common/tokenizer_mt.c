/* tokenizer_mt.c — encoding large inputs and many documents on several threads.
 *
 * The input (a list of documents) is cut into batches of roughly equal size; a big
 * document is cut only where GPT-2's pre-tokenizer is certain to have a boundary, so
 * every piece encodes exactly as it would inside the whole.  Threads take batches in
 * turn; the batches' ids are joined in input order, so the result does not depend on
 * the number of threads.
 */
#include "common/tokenizer_int.h"

#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#define MIN_BATCH (64u << 10)

typedef struct {
    const char *p;
    size_t n;
    size_t doc;        /* document index */
    int first;         /* first piece of its document */
} piece;

typedef struct {
    size_t p0, p1;     /* pieces [p0, p1) */
    llm_ids ids;
    int rc;
    llm_status st;
} batch;

typedef struct {
    const llm_tokenizer *t;
    piece *pc;
    batch *b;
    size_t nb;
    int with_eot;
    llm_tok_span *sp;  /* a span's start is first its place within its batch's ids */
    atomic_size_t next;
} work;

size_t llm_tok__safe_cut(const llm_tokenizer *t, const char *text, size_t from, size_t to)
{
    if (t->kind != LLM_TOK_GPT2)
        return from;
    for (size_t i = from ? from : 1; i < to; i++)
        if (llm_tok__cut_ok(text, i, to))
            return i;
    return to;
}

static void *worker(void *arg)
{
    work *w = arg;
    for (;;) {
        size_t k = atomic_fetch_add(&w->next, 1);
        if (k >= w->nb)
            break;
        batch *b = &w->b[k];
        /* ids grow in a local vector: neighbouring batches share cache lines */
        llm_ids ids = {0};
        llm_status st = {0};
        int rc = LLM_OK;
        for (size_t i = b->p0; i < b->p1 && !rc; i++) {
            const piece *p = &w->pc[i];
            if (p->first) {
                w->sp[p->doc].start = ids.n;
                if (w->with_eot && llm_ids_push(&ids, w->t->eot)) {
                    rc = llm_err(&st, LLM_ENOMEM, "out of memory");
                    break;
                }
            }
            if (p->n)
                rc = llm_tokenizer_encode(w->t, p->p, p->n, &ids, &st);
        }
        b->ids = ids;
        b->rc = rc;
        b->st = st;
    }
    return NULL;
}

int llm_tokenizer_encode_docs(const llm_tokenizer *t, const char *const *texts,
                              const size_t *lens, size_t ndocs, int with_eot, int nthreads,
                              llm_ids *out, size_t *starts, llm_status *st)
{
    llm_tok_span *sp = malloc((ndocs ? ndocs : 1) * sizeof *sp);
    if (!sp)
        return llm_err(st, LLM_ENOMEM, "out of memory");
    for (size_t d = 0; d < ndocs; d++)
        sp[d] = (llm_tok_span){texts[d], lens[d], 0, 0};
    int rc = llm_tok__encode_spans(t, sp, ndocs, with_eot, nthreads, out, st);
    for (size_t d = 0; !rc && starts && d < ndocs; d++)
        starts[d] = sp[d].start;
    free(sp);
    return rc;
}

int llm_tok__encode_spans(const llm_tokenizer *t, llm_tok_span *sp, size_t ndocs, int with_eot,
                          int nthreads, llm_ids *out, llm_status *st)
{
    size_t total = 0;
    for (size_t d = 0; d < ndocs; d++)
        total += sp[d].len;
    if (nthreads < 1)
        nthreads = 1;
    if (nthreads > 256)
        nthreads = 256;
    size_t bsz = total / ((size_t)nthreads * 8);
    if (bsz < MIN_BATCH)
        bsz = MIN_BATCH;

    /* pieces: documents, big ones cut at safe places near multiples of bsz */
    size_t npc = 0, cap = ndocs + total / bsz + 16, nb = 0;
    piece *pc = malloc(cap * sizeof *pc);
    batch *b = NULL;
    int rc = LLM_OK;
    if (!pc) {
        rc = llm_err(st, LLM_ENOMEM, "out of memory");
        goto done;
    }
    for (size_t d = 0; d < ndocs; d++) {
        size_t at = 0;
        do {
            size_t end = sp[d].len;
            if (end - at > bsz)
                end = llm_tok__safe_cut(t, sp[d].text, at + bsz, sp[d].len);
            if (npc == cap) {
                piece *np = realloc(pc, 2 * cap * sizeof *pc);
                if (!np) {
                    rc = llm_err(st, LLM_ENOMEM, "out of memory");
                    goto done;
                }
                pc = np;
                cap *= 2;
            }
            pc[npc++] = (piece){sp[d].text + at, end - at, d, at == 0 && !sp[d].cont};
            at = end;
        } while (at < sp[d].len);
    }
    /* batches: consecutive pieces until about bsz bytes.  Every batch but the last holds
     * at least bsz of the total + npc bytes counted, so that bounds how many there are
     * (a batch holds a status: not one per small document) */
    if (!(b = calloc((total + npc) / bsz + 1, sizeof *b))) {
        rc = llm_err(st, LLM_ENOMEM, "out of memory");
        goto done;
    }
    for (size_t i = 0, acc = 0; i < npc; i++) {
        if (acc == 0)
            b[nb].p0 = i;
        acc += pc[i].n + 1;
        if (acc >= bsz || i + 1 == npc) {
            b[nb++].p1 = i + 1;
            acc = 0;
        }
    }
    work w = {t, pc, b, nb, with_eot, sp, 0};
    size_t nth = (size_t)nthreads < nb ? (size_t)nthreads : nb;
    pthread_t tid[256];
    size_t started = 0;
    for (size_t i = 1; i < nth; i++) {
        if (pthread_create(&tid[started], NULL, worker, &w))
            break; /* fewer threads is still correct */
        started++;
    }
    worker(&w);
    for (size_t i = 0; i < started; i++)
        pthread_join(tid[i], NULL);

    size_t sum = 0;
    for (size_t k = 0; k < nb; k++) {
        if (b[k].rc) {
            rc = b[k].rc;
            if (st)
                *st = b[k].st;
            goto done;
        }
        sum += b[k].ids.n;
    }
    if (llm_ids_reserve(out, sum)) {
        rc = llm_err(st, LLM_ENOMEM, "out of memory (%zu ids)", sum);
        goto done;
    }
    for (size_t k = 0; k < nb; k++) {
        size_t base = out->n;
        for (size_t i = b[k].p0; i < b[k].p1; i++)
            if (pc[i].first)
                sp[pc[i].doc].start += base;
        if (b[k].ids.n) /* an empty batch has no buffer (and out may have none) */
            memcpy(out->v + out->n, b[k].ids.v, b[k].ids.n * sizeof *out->v);
        out->n += b[k].ids.n;
    }
done:
    if (b)
        for (size_t k = 0; k < nb; k++)
            llm_ids_free(&b[k].ids);
    free(b);
    free(pc);
    return rc;
}

int llm_tokenizer_encode_mt(const llm_tokenizer *t, const char *text, size_t len,
                            int nthreads, llm_ids *out, llm_status *st)
{
    if (nthreads <= 1 || len < 2 * MIN_BATCH)
        return llm_tokenizer_encode(t, text, len, out, st);
    return llm_tokenizer_encode_docs(t, &text, &len, 1, 0, nthreads, out, NULL, st);
}
