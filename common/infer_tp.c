/* infer_tp.c — tensor-parallel inference: shard section, rank agreement, the follower
 * loop and the collectives inside the forward; see infer_tp.h. */
#include "common/infer_tp.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "common/tree.h"

enum { OP_STOP = 0, OP_FORWARD = 1, OP_LOGITS = 2 };

struct llm_infer_tp {
    llm_dist *d;
    llm_infer_model *m;
    int rank, size;
    int stage;             /* collectives need host copies of backend buffers */
    int stopped;
    int64_t vlo, vhi;      /* this rank's wte rows [vlo, vhi) */
    unsigned char *held;   /* per row of the last llm_infer_tp_local_ids */
    double *msg;           /* broadcast payload */
    float *host;           /* staging / gather buffer */
    size_t cap_held, cap_msg, cap_host;
};

static int grow(void **p, size_t *cap, size_t want, size_t elem, llm_status *st)
{
    if (want <= *cap)
        return LLM_OK;
    void *q = realloc(*p, want * elem);
    if (!q)
        return llm_err(st, LLM_ENOMEM, "out of memory");
    *p = q;
    *cap = want;
    return LLM_OK;
}

static int get_int(const llm_node *sec, const char *key, int *v, llm_status *st)
{
    const llm_node *n = llm_node_get(sec, key);
    if (!n || llm_node_int(n, v) != 0)
        return llm_err(st, LLM_EDATA, "shard section: '%s' missing or not an integer", key);
    return LLM_OK;
}

int llm_infer_tp_shard(const llm_ckpt *ck, const llm_model_config *cfg, int *tp_rank,
                       int *tp_size, llm_status *st)
{
    *tp_rank = 0;
    *tp_size = 1;
    const llm_node *sec = llm_ckpt_section(ck, "shard");
    if (!sec)
        return LLM_OK;
    int tr, ts, pr, ps;
    if (get_int(sec, "tp_rank", &tr, st) || get_int(sec, "tp_size", &ts, st) ||
        get_int(sec, "pp_rank", &pr, st) || get_int(sec, "pp_size", &ps, st))
        return st->code;
    if (ps != 1)
        return llm_err(st, LLM_EDATA, "pipeline-parallel shard (stage %d of %d): llm-infer runs "
                       "tensor-parallel shards only (merge with llm-shard merge, or split --tp "
                       "alone)", pr, ps);
    if (ts < 1 || ts > 4096 || tr < 0 || tr >= ts)
        return llm_err(st, LLM_EDATA, "shard section: tp_rank %d of tp_size %d", tr, ts);
    if (cfg->n_head % ts || cfg->padded_vocab % ts)
        return llm_err(st, LLM_EDATA, "shard section: tp_size %d does not divide %d heads and "
                       "padded vocabulary %d", ts, cfg->n_head, cfg->padded_vocab);
    *tp_rank = tr;
    *tp_size = ts;
    return LLM_OK;
}

/* The source checksum (8 hex digits) as a number; -1 when absent. */
static double source_of(const llm_infer_model *m)
{
    const llm_node *sec = llm_ckpt_section(m->ck, "shard");
    const char *s = sec ? llm_node_str(llm_node_get(sec, "source")) : NULL;
    if (!s)
        return -1;
    char *end;
    unsigned long v = strtoul(s, &end, 16);
    return *end ? -1 : (double)v;
}

int llm_infer_tp_join(llm_infer_tp **out, llm_dist *d, llm_infer_model *m, int setup_rc,
                      llm_status *st)
{
    *out = NULL;
    int world = llm_dist_world(d), rank = llm_dist_rank(d);
    int ok = setup_rc == LLM_OK && m;
    /* per rank: ok, tp_rank, tp_size, source, n_layer, n_embd (all exact in a double) */
    enum { K = 6 };
    double *v = calloc((size_t)world * K, sizeof *v);
    if (!v)
        return setup_rc ? setup_rc : llm_err(st, LLM_ENOMEM, "out of memory");
    double *me = v + (size_t)rank * K;
    if (ok) {
        me[0] = 1;
        me[1] = m->tp_rank;
        me[2] = m->tp_size;
        me[3] = source_of(m);
        me[4] = m->cfg.n_layer;
        me[5] = m->cfg.n_embd;
    }
    llm_status st2 = {0};
    int rc = world > 1 ? llm_dist_allgather(d, v, (size_t)world * K, LLM_DIST_F64, &st2) : LLM_OK;
    if (rc) {
        free(v);
        if (!setup_rc)
            *st = st2;
        return setup_rc ? setup_rc : rc;
    }
    if (setup_rc) {
        free(v);
        return setup_rc;
    }
    for (int r = 0; r < world; r++) {
        const double *o = v + (size_t)r * K;
        if (!o[0]) {
            rc = llm_err(st, LLM_EDATA, "rank %d could not load its shard (see its message)", r);
            break;
        }
        if (o[2] == 1) {
            rc = llm_err(st, LLM_EUSAGE, "rank %d loaded a whole model: under %d ranks llm-infer "
                         "runs the shards of 'llm-shard split --tp %d' (--shards PREFIX)", r,
                         world, world);
            break;
        }
        if (o[2] != world) {
            rc = llm_err(st, LLM_EUSAGE, "rank %d holds a shard of a %d-way tensor-parallel split "
                         "but %d rank(s) run: start as many ranks as shards (mpirun -np %d)",
                         r, (int)o[2], world, (int)o[2]);
            break;
        }
        if (o[1] != r) {
            rc = llm_err(st, LLM_EDATA, "rank %d loaded tensor-parallel shard %d (want shard %d)",
                         r, (int)o[1], r);
            break;
        }
        if (o[3] != v[3] || o[4] != v[4] || o[5] != v[5]) {
            rc = llm_err(st, LLM_EDATA, "rank %d's shard comes from a different model than "
                         "rank 0's", r);
            break;
        }
    }
    free(v);
    if (rc)
        return rc;
    llm_infer_tp *tp = calloc(1, sizeof *tp);
    if (!tp)
        return llm_err(st, LLM_ENOMEM, "out of memory");
    tp->d = d;
    tp->m = m;
    tp->rank = rank;
    tp->size = world;
    int64_t vl = m->cfg.padded_vocab / m->tp_size;
    tp->vlo = vl * m->tp_rank;
    tp->vhi = tp->vlo + vl;
    /* MPI takes host memory: a device backend goes through copies */
    tp->stage = !llm_dist_on_device(d) && !(m->be->name && strncmp(m->be->name, "cpu", 3) == 0);
    m->tp = tp;
    *out = tp;
    return LLM_OK;
}

void llm_infer_tp_free(llm_infer_tp *tp)
{
    if (!tp)
        return;
    if (tp->m)
        tp->m->tp = NULL;
    free(tp->held);
    free(tp->msg);
    free(tp->host);
    free(tp);
}

int llm_infer_tp_rank(const llm_infer_tp *tp) { return tp ? tp->rank : 0; }

/* Rank 0 sends {op, n} then, for n > 0, the payload msg[0..len). */
static int lead(llm_infer_tp *tp, int op, int n, size_t len, llm_status *st)
{
    double h[2] = {op, n};
    if (llm_dist_broadcast(tp->d, h, 2, LLM_DIST_F64, 0, st))
        return st->code;
    if (len && llm_dist_broadcast(tp->d, tp->msg, len, LLM_DIST_F64, 0, st))
        return st->code;
    return LLM_OK;
}

int llm_infer_tp_lead_forward(llm_infer_tp *tp, const llm_infer_row *rows, int n, llm_status *st)
{
    if (tp->rank != 0)
        return LLM_OK;
    if (grow((void **)&tp->msg, &tp->cap_msg, (size_t)n * 3, sizeof *tp->msg, st))
        return st->code;
    for (int i = 0; i < n; i++) {
        tp->msg[3 * i] = rows[i].id;
        tp->msg[3 * i + 1] = rows[i].slot;
        tp->msg[3 * i + 2] = rows[i].pos;
    }
    return lead(tp, OP_FORWARD, n, (size_t)n * 3, st);
}

int llm_infer_tp_lead_logits(llm_infer_tp *tp, const int *which, int n, llm_status *st)
{
    if (tp->rank != 0)
        return LLM_OK;
    if (grow((void **)&tp->msg, &tp->cap_msg, (size_t)n, sizeof *tp->msg, st))
        return st->code;
    for (int i = 0; i < n; i++)
        tp->msg[i] = which[i];
    return lead(tp, OP_LOGITS, n, (size_t)n, st);
}

int llm_infer_tp_stop(llm_infer_tp *tp, llm_status *st)
{
    if (!tp || tp->rank != 0 || tp->stopped)
        return LLM_OK;
    tp->stopped = 1;
    return lead(tp, OP_STOP, 0, 0, st);
}

int llm_infer_tp_follow(llm_infer_tp *tp, llm_infer_ctx *c, llm_status *st)
{
    int R = llm_infer_ctx_max_rows(c);
    llm_infer_row *rows = malloc((size_t)R * sizeof *rows);
    int *which = malloc((size_t)R * sizeof *which);
    int rc = LLM_OK;
    if (!rows || !which || grow((void **)&tp->msg, &tp->cap_msg, (size_t)R * 3,
                                sizeof *tp->msg, st)) {
        rc = st->code ? (int)st->code : llm_err(st, LLM_ENOMEM, "out of memory");
        goto out;
    }
    for (;;) {
        double h[2];
        if ((rc = llm_dist_broadcast(tp->d, h, 2, LLM_DIST_F64, 0, st)))
            break;
        int op = (int)h[0], n = (int)h[1];
        if (op == OP_STOP)
            break;
        if (n < 1 || n > R || (op != OP_FORWARD && op != OP_LOGITS)) {
            rc = llm_err(st, LLM_ESOFTWARE, "tensor parallel: rank 0 sent op %d with %d rows "
                         "(max %d): are all ranks running the same command line?", op, n, R);
            break;
        }
        size_t len = op == OP_FORWARD ? (size_t)n * 3 : (size_t)n;
        if ((rc = llm_dist_broadcast(tp->d, tp->msg, len, LLM_DIST_F64, 0, st)))
            break;
        if (op == OP_FORWARD) {
            for (int i = 0; i < n; i++)
                rows[i] = (llm_infer_row){(int32_t)tp->msg[3 * i], (int32_t)tp->msg[3 * i + 1],
                                          (int32_t)tp->msg[3 * i + 2]};
            rc = llm_infer_forward(c, rows, n, st);
        } else {
            for (int i = 0; i < n; i++)
                which[i] = (int)tp->msg[i];
            rc = llm_infer_logits(c, which, n, NULL, st);
        }
        if (rc)
            break;
    }
out:
    free(rows);
    free(which);
    return rc;
}

int llm_infer_tp_local_ids(llm_infer_tp *tp, int32_t *ids, int n, llm_status *st)
{
    if (grow((void **)&tp->held, &tp->cap_held, (size_t)n, 1, st))
        return st->code;
    for (int i = 0; i < n; i++) {
        tp->held[i] = ids[i] >= tp->vlo && ids[i] < tp->vhi;
        ids[i] = tp->held[i] ? (int32_t)(ids[i] - tp->vlo) : 0;
    }
    return LLM_OK;
}

int llm_infer_tp_allreduce(llm_infer_tp *tp, llm_backend *be, float *buf, size_t n,
                           llm_status *st)
{
    if (!tp->stage) {
        /* device collectives (NCCL) run on the communicator's own stream: the backend's
         * work that wrote buf must be finished first (a no-op on the CPU) */
        be->sync(be);
        return llm_dist_allreduce(tp->d, buf, n, LLM_DIST_F32, LLM_DIST_SUM, st);
    }
    if (grow((void **)&tp->host, &tp->cap_host, n, sizeof(float), st))
        return st->code;
    be->to_host(be, tp->host, buf, n * sizeof(float));
    if (llm_dist_allreduce(tp->d, tp->host, n, LLM_DIST_F32, LLM_DIST_SUM, st))
        return st->code;
    be->to_device(be, buf, tp->host, n * sizeof(float));
    return LLM_OK;
}

int llm_infer_tp_embed_reduce(llm_infer_tp *tp, llm_backend *be, float *x, int n, int C,
                              llm_status *st)
{
    /* the holder of a token's row contributes wte + wpe, everyone else zero: the sum is
     * exactly the unsharded embedding */
    for (int i = 0; i < n; i++)
        if (!tp->held[i])
            be->zero(be, x + (size_t)i * C, (size_t)C * sizeof(float));
    return llm_infer_tp_allreduce(tp, be, x, (size_t)n * C, st);
}

int llm_infer_tp_logits(llm_infer_tp *tp, llm_backend *be, const float *local, int k, int Vp,
                        float *out, llm_status *st)
{
    size_t vl = (size_t)Vp / (size_t)tp->size, part = (size_t)k * vl;
    if (grow((void **)&tp->host, &tp->cap_host, part * tp->size, sizeof(float), st))
        return st->code;
    /* llm_dist_allgather gives rank r the r-th equal part of the buffer: (size, k, vl) */
    be->to_host(be, tp->host + part * tp->rank, local, part * sizeof(float));
    if (llm_dist_allgather(tp->d, tp->host, part * tp->size, LLM_DIST_F32, st))
        return st->code;
    if (!out)
        return LLM_OK;
    for (int r = 0; r < tp->size; r++)
        for (int i = 0; i < k; i++)
            memcpy(out + (size_t)i * Vp + r * vl, tp->host + part * r + (size_t)i * vl,
                   vl * sizeof(float));
    return LLM_OK;
}
