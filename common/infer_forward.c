/* infer_forward.c — KV cache and the prefill/decode forward over cache slots. */
#include "common/infer.h"
#include "common/infer_tp.h"
#include "common/sampler.h"

#include <stdlib.h>
#include <string.h>

/* Rows of logits computed per output-projection call (bounds the logits buffer when
 * --eval asks for every position of a long window). */
#define LOGIT_CHUNK 64

/* Recordings of one kind of work, per row count n (run_rec) */
typedef struct {
    void **g;               /* slots + 1 entries */
    unsigned char *seen;    /* n rows: 0 never, 1 once, 2 recorded or not recordable */
} rec_set;

struct llm_infer_ctx {
    llm_infer_model *m;
    llm_backend *be;
    int slots, max_rows, n_last;
    float *kc, *vc;                       /* (L, S, maxT, C) each */
    float *x, *ln, *qkv, *att, *proj, *fc, *fca, *logits;
    /* a forward of n rows: ids[0..n), slots[n..2n), positions[2n..3n), staged on the
     * host and uploaded in one copy (both buffers 3 * max_rows); the forward's ops read
     * them at offsets that depend on n alone, as a recording of n rows needs */
    int32_t *rows_d, *h_rows;
    /* llm_infer_argmax (backends with argmax_rows): a chunk's greedy ids go to the
     * device in rows_d (its rows are read only during the forward, and the next forward
     * uploads them again; 3 * max_rows >= a chunk) and come back into h_ids (host_alloc:
     * pinned on a GPU); where the logits must come back instead, h_logits holds a
     * chunk's (made on first use) */
    int32_t *h_ids;
    float *h_logits;
    size_t bytes;
    /* recorded work (backend graph_capture) for n rows, n <= slots: the ops of a
     * forward depend only on n (rows, positions and slots are read from the device), and
     * so do those of a decode step's head (ln_f, lm-head and argmax of rows 0..n-1), so
     * the second run for n rows records them and later ones replay the recording */
    rec_set fwd, head;
};

/* fn(arg), the work of n rows: run, recorded (the second time for n) or replayed (after
 * that); just run when rs has no recordings or n > slots.  0, or -1 when the backend
 * failed to record or replay (its error recorded). */
static int run_rec(llm_infer_ctx *c, rec_set *rs, int n, void (*fn)(void *), void *arg)
{
    llm_backend *be = c->be;
    if (!rs->g || n > c->slots) {
        fn(arg);
        return 0;
    }
    if (rs->g[n])
        return be->graph_launch(be, rs->g[n]) ? -1 : 0;
    if (rs->seen[n] == 1) {   /* recorded, or where that cannot be, run; not tried again */
        rs->seen[n] = 2;
        return be->graph_capture(be, fn, arg, &rs->g[n]) < 0 ? -1 : 0;
    }
    if (rs->seen[n] == 0)
        rs->seen[n] = 1;
    fn(arg);
    return 0;
}

static void rec_free(llm_infer_ctx *c, rec_set *rs)
{
    if (rs->g)
        for (int n = 0; n <= c->slots; n++)
            c->be->graph_free(c->be, rs->g[n]);
    free(rs->g);
    free(rs->seen);
}

static int rec_new(llm_infer_ctx *c, rec_set *rs)
{
    rs->g = calloc((size_t)c->slots + 1, sizeof *rs->g);
    rs->seen = calloc((size_t)c->slots + 1, 1);
    return rs->g && rs->seen ? 0 : -1;
}

static void *balloc(llm_infer_ctx *c, size_t bytes)
{
    c->bytes += bytes;
    return c->be->alloc(c->be, bytes ? bytes : 1);
}

void llm_infer_ctx_free(llm_infer_ctx *c)
{
    if (!c)
        return;
    llm_backend *be = c->be;
    void *bufs[] = {c->kc, c->vc, c->x, c->ln, c->qkv, c->att, c->proj, c->fc, c->fca,
                    c->logits, c->rows_d};
    for (size_t i = 0; i < sizeof bufs / sizeof bufs[0]; i++)
        if (bufs[i])
            be->free(be, bufs[i]);
    rec_free(c, &c->fwd);
    rec_free(c, &c->head);
    free(c->h_rows);
    llm_backend_host_free(be, c->h_ids);
    llm_backend_host_free(be, c->h_logits);
    free(c);
}

int llm_infer_ctx_new(llm_infer_ctx **out, llm_infer_model *m, int slots, int max_rows,
                      llm_status *st)
{
    *out = NULL;
    const llm_model_config *cfg = &m->cfg;
    if (slots < 1 || slots > 4096)
        return llm_err(st, LLM_EUSAGE, "batch must be in 1..4096 (got %d)", slots);
    if (max_rows < 1)
        return llm_err(st, LLM_EUSAGE, "max_rows must be >= 1");
    if (max_rows < slots)
        max_rows = slots;
    llm_infer_ctx *c = calloc(1, sizeof *c);
    if (!c)
        return llm_err(st, LLM_ENOMEM, "out of memory");
    c->m = m;
    c->be = m->be;
    c->slots = slots;
    c->max_rows = max_rows;
    size_t C = (size_t)cfg->n_embd, R = (size_t)max_rows;
    /* a tensor-parallel rank caches only its heads */
    size_t kv = (size_t)cfg->n_layer * slots * cfg->max_seq_len * (C / m->tp_size) * sizeof(float);
    size_t lr = R > LOGIT_CHUNK ? LOGIT_CHUNK : R;
    c->kc = balloc(c, kv);
    c->vc = balloc(c, kv);
    c->x = balloc(c, R * C * sizeof(float));
    c->ln = balloc(c, R * C * sizeof(float));
    c->qkv = balloc(c, R * 3 * C * sizeof(float));
    c->att = balloc(c, R * C * sizeof(float));
    c->proj = balloc(c, R * C * sizeof(float));
    c->fc = balloc(c, R * 4 * C * sizeof(float));
    c->fca = balloc(c, R * 4 * C * sizeof(float));
    c->logits = balloc(c, lr * (size_t)cfg->padded_vocab * sizeof(float));
    c->rows_d = balloc(c, 3 * R * sizeof(int32_t));
    c->h_rows = malloc(3 * R * sizeof(int32_t));
    if (c->be->argmax_rows)
        c->h_ids = llm_backend_host_alloc(c->be, lr * sizeof(int32_t));
    if (c->be->graph_capture && m->tp_size == 1) {
        if (rec_new(c, &c->fwd) || (c->be->argmax_rows && rec_new(c, &c->head))) {
            llm_infer_ctx_free(c);
            return llm_err(st, LLM_ENOMEM, "out of memory");
        }
    }
    if (!c->kc || !c->vc || !c->x || !c->ln || !c->qkv || !c->att || !c->proj || !c->fc ||
        !c->fca || !c->logits || !c->rows_d || !c->h_rows ||
        (c->be->argmax_rows && !c->h_ids)) {
        llm_infer_ctx_free(c);
        return llm_err(st, LLM_ENOMEM, "out of memory for a KV cache of %d slot(s) x %d positions",
                       slots, cfg->max_seq_len);
    }
    *out = c;
    return LLM_OK;
}

int llm_infer_ctx_max_rows(const llm_infer_ctx *c) { return c->max_rows; }
size_t llm_infer_ctx_bytes(const llm_infer_ctx *c) { return c->bytes; }

/* x += proj, then ln = layernorm(x) (w, b): fused when the backend offers it. */
static void residual_ln(llm_backend *be, float *x, float *ln, const float *proj, const float *w,
                        const float *b, int n, int C)
{
    if (be->residual_layernorm_forward) {
        be->residual_layernorm_forward(be, x, ln, NULL, NULL, x, proj, w, b, n, C);
        return;
    }
    be->residual_forward(be, x, x, proj, (size_t)n * C);
    be->layernorm_forward(be, ln, NULL, NULL, x, w, b, n, C);
}

/* The device part of a forward of n rows (uploaded to c->rows_d): only
 * ops on c's backend, their arguments a function of n alone, so that it may be recorded
 * (llm_infer_forward).  A tensor-parallel exchange failing sets rc. */
typedef struct {
    llm_infer_ctx *c;
    int n, rc;
    llm_status *st;
} forward_args;

static void forward_ops(void *arg)
{
    forward_args *a = arg;
    llm_infer_ctx *c = a->c;
    const llm_infer_model *m = c->m;
    const llm_model_config *cfg = &m->cfg;
    llm_backend *be = c->be;
    int n = a->n;
    llm_status *st = a->st;
    /* tensor parallel: Cl channels = NH heads of this rank; the projections' partial
     * sums (and the embedding) are summed over the ranks */
    int C = cfg->n_embd, NH = cfg->n_head / m->tp_size, T = cfg->max_seq_len;
    int Cl = C / m->tp_size;
    size_t layer_kv = (size_t)c->slots * T * Cl;
    size_t nc = (size_t)n * C;
    const int32_t *ids = c->rows_d, *slot = ids + n, *pos = ids + 2 * (size_t)n;
    be->embed_rows(be, c->x, ids, pos, m->wte.p, m->wte.dtype, m->wpe.p, n, C);
    if (m->tp && llm_infer_tp_embed_reduce(m->tp, be, c->x, n, C, st)) {
        a->rc = st->code;
        return;
    }
    be->layernorm_forward(be, c->ln, NULL, NULL, c->x, m->layers[0].ln1_w.p,
                          m->layers[0].ln1_b.p, n, C);
    for (int l = 0; l < cfg->n_layer; l++) {
        const llm_infer_layer *L = &m->layers[l];
        float *kc = c->kc + l * layer_kv, *vc = c->vc + l * layer_kv;
        /* c->ln holds ln_1 of c->x (written with the previous layer's last residual) */
        be->matmul_rows(be, c->qkv, c->ln, L->qkv_w.p, L->qkv_w.dtype, L->qkv_b.p, n, C, 3 * Cl);
        be->kv_store(be, kc, vc, c->qkv, slot, pos, n, Cl, T);
        be->attention_rows(be, c->att, c->qkv, kc, vc, slot, pos, n, Cl, NH, T);
        be->matmul_rows(be, c->proj, c->att, L->attn_proj_w.p, L->attn_proj_w.dtype,
                        L->attn_proj_b.p, n, Cl, C);
        if (m->tp && llm_infer_tp_allreduce(m->tp, be, c->proj, nc, st)) {
            a->rc = st->code;
            return;
        }
        residual_ln(be, c->x, c->ln, c->proj, L->ln2_w.p, L->ln2_b.p, n, C);
        be->matmul_rows(be, c->fc, c->ln, L->fc_w.p, L->fc_w.dtype, L->fc_b.p, n, C, 4 * Cl);
        be->gelu_forward(be, c->fca, c->fc, (size_t)n * 4 * Cl);
        be->matmul_rows(be, c->proj, c->fca, L->fc_proj_w.p, L->fc_proj_w.dtype,
                        L->fc_proj_b.p, n, 4 * Cl, C);
        if (m->tp && llm_infer_tp_allreduce(m->tp, be, c->proj, nc, st)) {
            a->rc = st->code;
            return;
        }
        if (l + 1 < cfg->n_layer)
            residual_ln(be, c->x, c->ln, c->proj, m->layers[l + 1].ln1_w.p,
                        m->layers[l + 1].ln1_b.p, n, C);
        else   /* ln_f reads only the rows llm_infer_logits asks for */
            be->residual_forward(be, c->x, c->x, c->proj, nc);
    }
}

int llm_infer_forward(llm_infer_ctx *c, const llm_infer_row *rows, int n, llm_status *st)
{
    const llm_infer_model *m = c->m;
    const llm_model_config *cfg = &m->cfg;
    llm_backend *be = c->be;
    if (n < 1 || n > c->max_rows)
        return llm_err(st, LLM_EUSAGE, "forward of %d rows (max %d)", n, c->max_rows);
    for (int i = 0; i < n; i++) {
        if (rows[i].id < 0 || rows[i].id >= cfg->vocab_size)
            return llm_err(st, LLM_EUSAGE, "token id %d out of range (vocabulary %d)",
                           rows[i].id, cfg->vocab_size);
        if (rows[i].pos < 0 || rows[i].pos >= cfg->max_seq_len)
            return llm_err(st, LLM_EUSAGE, "position %d beyond the context (%d)", rows[i].pos,
                           cfg->max_seq_len);
        if (rows[i].slot < 0 || rows[i].slot >= c->slots)
            return llm_err(st, LLM_EUSAGE, "slot %d out of range", rows[i].slot);
        c->h_rows[i] = rows[i].id;
        c->h_rows[n + i] = rows[i].slot;
        c->h_rows[2 * n + i] = rows[i].pos;
    }
    if (m->tp_size > 1 && !m->tp)
        return llm_err(st, LLM_EUSAGE, "a tensor-parallel shard computes only with its peers");
    if (m->tp && (llm_infer_tp_lead_forward(m->tp, rows, n, st) ||
                  llm_infer_tp_local_ids(m->tp, c->h_rows, n, st)))
        return st->code;
    be->to_device(be, c->rows_d, c->h_rows, 3 * (size_t)n * sizeof(int32_t));

    forward_args a = {c, n, 0, st};
    if (run_rec(c, &c->fwd, n, forward_ops, &a))
        return llm_err(st, LLM_ESOFTWARE, "forward: recording or replaying the forward of %d "
                       "rows failed on the backend", n);
    if (a.rc)
        return a.rc;
    c->n_last = n;
    return LLM_OK;
}

/* ln_f and the tied output projection of the k rows which[0..k) (k <= the chunk) into
 * c->logits (k, Vp / tp_size). */
static void head_rows(llm_infer_ctx *c, const int *which, int k)
{
    const llm_infer_model *m = c->m;
    llm_backend *be = c->be;
    int C = m->cfg.n_embd, Vl = m->cfg.padded_vocab / m->tp_size;
    /* the projection runs on exactly the k wanted rows: read in place when they are
     * consecutive (a decode step asks for every row), else gathered one by one */
    int run = 1;
    while (run < k && which[run] == which[0] + run)
        run++;
    const float *rows = c->x + (size_t)which[0] * C;
    if (run < k) {
        for (int i = 0; i < k; i++)
            be->copy(be, c->proj + (size_t)i * C, c->x + (size_t)which[i] * C,
                     (size_t)C * sizeof(float));
        rows = c->proj;
    }
    be->layernorm_forward(be, c->ln, NULL, NULL, rows, m->lnf_w.p, m->lnf_b.p, k, C);
    be->matmul_rows(be, c->logits, c->ln, m->wte.p, m->wte.dtype, NULL, k, C, Vl);
}

static int check_which(const llm_infer_ctx *c, const int *which, int n, llm_status *st)
{
    for (int i = 0; i < n; i++)
        if (which[i] < 0 || which[i] >= c->n_last)
            return llm_err(st, LLM_EUSAGE, "logits row %d not in the last forward", which[i]);
    return LLM_OK;
}

static int chunk_rows(const llm_infer_ctx *c)
{
    return c->max_rows < LOGIT_CHUNK ? c->max_rows : LOGIT_CHUNK;
}

int llm_infer_logits(llm_infer_ctx *c, const int *which, int n, float *out, llm_status *st)
{
    const llm_infer_model *m = c->m;
    llm_backend *be = c->be;
    int Vp = m->cfg.padded_vocab;
    if (check_which(c, which, n, st))
        return st->code;
    if (m->tp && llm_infer_tp_lead_logits(m->tp, which, n, st))
        return st->code;
    int chunk = chunk_rows(c);
    for (int i0 = 0; i0 < n; i0 += chunk) {
        int k = n - i0 < chunk ? n - i0 : chunk;
        head_rows(c, which + i0, k);
        if (m->tp) {   /* each rank holds the logits of its vocabulary rows */
            if (llm_infer_tp_logits(m->tp, be, c->logits, k, Vp, out ? out + (size_t)i0 * Vp : NULL,
                                    st))
                return st->code;
        } else {
            be->to_host(be, out + (size_t)i0 * Vp, c->logits, (size_t)k * Vp * sizeof(float));
        }
    }
    return LLM_OK;
}

/* head_ops: ln_f, the lm-head and argmax_rows of rows which[0..k) into rows_d */
typedef struct {
    llm_infer_ctx *c;
    const int *which;
    int k;
} head_args;

static void head_ops(void *arg)
{
    head_args *h = arg;
    llm_infer_ctx *c = h->c;
    const llm_model_config *cfg = &c->m->cfg;
    head_rows(c, h->which, h->k);
    c->be->argmax_rows(c->be, c->rows_d, c->logits, h->k, cfg->vocab_size, cfg->padded_vocab);
}

/* ids[i] = llm_argmax of the k host rows lg (leading dimension ld), in parallel over
 * the rows as the samplers of a decode step run */
static void argmax_host(const llm_backend *be, const float *lg, int k, int V, int ld,
                        int32_t *ids)
{
    int nt = be->threads < k ? be->threads : k;
    if (nt < 1)
        nt = 1;
#pragma omp parallel for num_threads(nt) if (nt > 1)
    for (int i = 0; i < k; i++)
        ids[i] = llm_argmax(lg + (size_t)i * ld, V);
}

int llm_infer_argmax(llm_infer_ctx *c, const int *which, int n, int32_t *ids, llm_status *st)
{
    const llm_infer_model *m = c->m;
    llm_backend *be = c->be;
    int V = m->cfg.vocab_size, Vp = m->cfg.padded_vocab, chunk = chunk_rows(c);
    if (check_which(c, which, n, st))
        return st->code;
    if (m->tp || (!be->argmax_rows && !be->host_memory)) {
        /* the logits come to the host (a tensor-parallel rank holds a slice of the
         * vocabulary; llm_infer_logits gathers it, its peers following) */
        if (!c->h_logits &&
            !(c->h_logits = llm_backend_host_alloc(be, (size_t)chunk * Vp * sizeof(float))))
            return llm_err(st, LLM_ENOMEM, "out of memory");
        for (int i0 = 0; i0 < n; i0 += chunk) {
            int k = n - i0 < chunk ? n - i0 : chunk;
            if (llm_infer_logits(c, which + i0, k, c->h_logits, st))
                return st->code;
            argmax_host(be, c->h_logits, k, V, Vp, ids + i0);
        }
        return LLM_OK;
    }
    for (int i0 = 0; i0 < n; i0 += chunk) {
        int k = n - i0 < chunk ? n - i0 : chunk;
        if (be->argmax_rows) {   /* 4 bytes a row come back instead of Vp floats */
            /* a decode step asks for every row of the forward, in order: the same ops
             * for each k, recorded like the forward */
            int all = i0 == 0 && k == c->n_last;
            for (int i = 0; all && i < k; i++)
                all = which[i] == i;
            head_args h = {c, which + i0, k};
            if (!all)
                head_ops(&h);
            else if (run_rec(c, &c->head, k, head_ops, &h))
                return llm_err(st, LLM_ESOFTWARE, "recording or replaying the logits and argmax "
                               "of %d rows failed on the backend", k);
            be->to_host(be, c->h_ids, c->rows_d, (size_t)k * sizeof(int32_t));
            memcpy(ids + i0, c->h_ids, (size_t)k * sizeof(int32_t));
        } else {   /* host memory: the logits are read where they are */
            head_rows(c, which + i0, k);
            argmax_host(be, c->logits, k, V, Vp, ids + i0);
        }
    }
    return LLM_OK;
}
