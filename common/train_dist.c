/* train_dist.c — data-parallel and ZeRO-1 optimizer steps (see train_dist.h). */
#include "common/train_dist.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "common/model_impl.h"

struct llm_train_dist {
    llm_dist *d;
    llm_model *m;
    llm_backend *be;
    int zero, rank, world;
    int stage;          /* 1: collectives on host memory, model on a device: copy through */
    float *host;        /* stage: nparams floats */
    float *shard;       /* zero: this rank's reduced gradient shard (backend memory) */
    size_t lo, hi;      /* zero: this rank's shard of the flat parameter buffer */
};

static int is_device(const llm_backend *be)
{
    return !strcmp(be->name, "cuda");
}

/* All-reduce (sum) n floats of backend memory p. */
static int allreduce_be(llm_train_dist *td, float *p, size_t n, llm_status *st)
{
    if (td->be->sync)
        td->be->sync(td->be);
    if (!td->stage)
        return llm_dist_allreduce(td->d, p, n, LLM_DIST_F32, LLM_DIST_SUM, st);
    td->be->to_host(td->be, td->host, p, n * sizeof(float));
    if (llm_dist_allreduce(td->d, td->host, n, LLM_DIST_F32, LLM_DIST_SUM, st))
        return st->code;
    td->be->to_device(td->be, p, td->host, n * sizeof(float));
    return 0;
}

/* All-gather the flat buffer p (nparams floats, backend memory) from its shards. */
static int allgather_be(llm_train_dist *td, float *p, llm_status *st)
{
    size_t n = td->m->nparams;
    if (td->be->sync)
        td->be->sync(td->be);
    if (!td->stage)
        return llm_dist_allgather(td->d, p, n, LLM_DIST_F32, st);
    td->be->to_host(td->be, td->host + td->lo, p + td->lo, (td->hi - td->lo) * sizeof(float));
    if (llm_dist_allgather(td->d, td->host, n, LLM_DIST_F32, st))
        return st->code;
    td->be->to_device(td->be, p, td->host, n * sizeof(float));
    return 0;
}

int llm_train_dist_config(const llm_train_config *cfg, const llm_dist *d, llm_train_config *out,
                          llm_status *st)
{
    *out = *cfg;
    int world = llm_dist_world(d);
    int64_t per = (int64_t)world * cfg->batch_size * cfg->seq_len;
    if (world == 1)
        return 0;
    if (!out->total_batch_tokens)
        out->total_batch_tokens = per;
    if (out->total_batch_tokens % per)
        return llm_err(st, LLM_EDATA, "'train.total_batch_tokens' (%lld) must be a multiple of "
                       "ranks x train.batch_size x train.seq_len (%d x %d x %d = %lld)",
                       (long long)out->total_batch_tokens, world, cfg->batch_size, cfg->seq_len,
                       (long long)per);
    return 0;
}

int llm_train_dist_new(llm_train_dist **out, llm_dist *d, llm_model *m, llm_backend *be,
                       int zero, llm_status *st)
{
    *out = NULL;
    llm_train_dist *td = calloc(1, sizeof *td);
    if (!td)
        return llm_err(st, LLM_ENOMEM, "out of memory");
    td->d = d;
    td->m = m;
    td->be = be;
    td->zero = zero;
    td->rank = llm_dist_rank(d);
    td->world = llm_dist_world(d);
    td->stage = is_device(be) && !llm_dist_on_device(d) && td->world > 1;
    int rc;
    if ((rc = llm_model__ensure_grads(m, st)) || (rc = llm_model__ensure_moments(m, st)))
        goto fail;
    size_t n = m->nparams;
    llm_dist_shard(n, td->world, td->rank, &td->lo, &td->hi);
    if (td->stage && !(td->host = malloc(n * sizeof(float)))) {
        rc = llm_err(st, LLM_ENOMEM, "out of memory");
        goto fail;
    }
    if (zero && !(td->shard = be->alloc(be, (td->hi - td->lo + 1) * sizeof(float)))) {
        rc = llm_err(st, LLM_ENOMEM, "out of memory (gradient shard)");
        goto fail;
    }
    /* every rank starts from rank 0's weights, whatever its initialisation or resume */
    if (td->world > 1) {
        if (be->sync)
            be->sync(be);
        if (td->stage) {
            be->to_host(be, td->host, m->params, n * sizeof(float));
            rc = llm_dist_broadcast(d, td->host, n, LLM_DIST_F32, 0, st);
            be->to_device(be, m->params, td->host, n * sizeof(float));
        } else {
            rc = llm_dist_broadcast(d, m->params, n, LLM_DIST_F32, 0, st);
        }
        llm_model_params_changed(m);   /* [mixed precision] the lo copy is remade */
        if (rc)
            goto fail;
    }
    *out = td;
    return 0;
fail:
    llm_train_dist_free(td);
    return rc;
}

void llm_train_dist_free(llm_train_dist *td)
{
    if (!td)
        return;
    if (td->shard)
        td->be->free(td->be, td->shard);
    free(td->host);
    free(td);
}

int llm_train_dist_check_step(llm_train_dist *td, int64_t step, llm_status *st)
{
    double v[2] = {(double)step, -(double)step};
    if (llm_dist_allreduce(td->d, v, 2, LLM_DIST_F64, LLM_DIST_MAX, st))
        return st->code;
    if (v[0] != -v[1])
        return llm_err(st, LLM_EDATA, "ranks start at different steps (%.0f to %.0f): is "
                       "output.dir on a filesystem every rank shares?", -v[1], v[0]);
    return 0;
}

int llm_train_dist_agree(llm_train_dist *td, int local, int *any, llm_status *st)
{
    double v = local ? 1.0 : 0.0;
    if (llm_dist_allreduce(td->d, &v, 1, LLM_DIST_F64, LLM_DIST_MAX, st))
        return st->code;
    *any = v > 0;
    return 0;
}

int llm_train_dist_pre_save(llm_train_dist *td, llm_status *st)
{
    if (!td->zero || td->world == 1)
        return 0;
    if (allgather_be(td, td->m->m, st) || allgather_be(td, td->m->v, st))
        return st->code;
    return 0;
}

/* ZeRO-1: this rank's reduced gradient shard, the global norm, its AdamW update. */
static int zero_update(llm_train_dist *td, const llm_adamw_config *hp, int t, double *gnorm,
                       int *skipped, llm_status *st)
{
    llm_model *m = td->m;
    llm_backend *be = td->be;
    size_t n = m->nparams, lo = td->lo, hi = td->hi;
    if (be->sync)
        be->sync(be);
    if (!td->stage) {
        if (llm_dist_reduce_scatter(td->d, m->grads, td->shard, n, LLM_DIST_F32, LLM_DIST_SUM,
                                    st))
            return st->code;
    } else {
        be->to_host(be, td->host, m->grads, n * sizeof(float));
        float *tmp = malloc((hi - lo + 1) * sizeof(float));
        if (!tmp)
            return llm_err(st, LLM_ENOMEM, "out of memory");
        int rc = llm_dist_reduce_scatter(td->d, td->host, tmp, n, LLM_DIST_F32, LLM_DIST_SUM,
                                         st);
        if (!rc)
            be->to_device(be, td->shard, tmp, (hi - lo) * sizeof(float));
        free(tmp);
        if (rc)
            return rc;
    }
    /* the clipping norm is over the whole gradient: sum the shards' squares */
    double ss = hi > lo ? be->sum_squares(be, td->shard, hi - lo) : 0.0;
    if (llm_dist_allreduce(td->d, &ss, 1, LLM_DIST_F64, LLM_DIST_SUM, st))
        return st->code;
    /* [mixed precision] the gradients carry the model's loss scale (1 unless fp16):
     * clip on the true norm and undo the scale in AdamW, as llm_model_update does */
    double norm = sqrt(ss) / llm_model_loss_scale(m);
    *gnorm = norm;
    if (!isfinite(norm)) {
        *skipped = 1;  /* same on every rank: the norm is global */
        return 0;
    }
    *skipped = 0;
    double clip = 1.0;
    if (hp->grad_clip > 0 && norm > hp->grad_clip)
        clip = hp->grad_clip / norm;
    float scale = (float)(clip / llm_model_loss_scale(m));   /* [mixed precision] */
    /* runs of views with the same decay, cut to [lo, hi): elementwise, so the result is
     * the same as the whole-buffer update */
    for (int i = 0; i < m->nviews;) {
        int j = i + 1;
        while (j < m->nviews && m->views[j].decay == m->views[i].decay)
            j++;
        size_t a = m->views[i].offset, b = m->views[j - 1].offset + m->views[j - 1].numel;
        if (a < lo)
            a = lo;
        if (b > hi)
            b = hi;
        if (a < b) {
            float wd = m->views[i].decay ? hp->weight_decay : 0.0f;
            be->adamw(be, m->params + a, td->shard + (a - lo), m->m + a, m->v + a, b - a, hp->lr,
                      hp->beta1, hp->beta2, hp->eps, wd, t, scale);
        }
        i = j;
    }
    llm_model_params_changed(m);   /* [mixed precision] the lo copy is remade */
    return allgather_be(td, m->params, st);
}

int llm_train_dist_step(llm_train_dist *td, llm_data *data, int32_t *in, int32_t *tg, int B,
                        int T, int64_t accum, const llm_adamw_config *hp, int t, int force_nan,
                        double *loss, double *gnorm, int *skipped, llm_status *st)
{
    llm_model *m = td->m;
    if (llm_model_zero_grad(m, st))
        return st->code;
    int64_t total = accum * td->world, mine = (int64_t)td->rank * accum;
    float gscale = (float)(1.0 / (double)total);
    double sum = 0;
    for (int64_t g = 0; g < total; g++) {
        /* every rank reads every micro-batch of the global batch, in order, so that the
         * data position stays global; only its own go through the model */
        if (llm_data_next(data, in, tg, st))
            return st->code;
        if (g < mine || g >= mine + accum)
            continue;
        float l = 0;
        if (llm_model_forward(m, in, tg, B, T, &l, st) || llm_model_backward(m, gscale, st))
            return st->code;
        sum += l;
    }
    if (force_nan)
        sum = NAN;
    if (llm_dist_allreduce(td->d, &sum, 1, LLM_DIST_F64, LLM_DIST_SUM, st))
        return st->code;
    *loss = sum / (double)total;
    *gnorm = NAN;
    *skipped = 0;
    if (!isfinite(*loss)) {
        *skipped = 1;  /* the loss is global: every rank skips this step */
        return 0;
    }
    if (td->zero)
        return zero_update(td, hp, t, gnorm, skipped, st);
    if (allreduce_be(td, m->grads, m->nparams, st))
        return st->code;
    return llm_model_update(m, hp, t, gnorm, skipped, st);
}
