/* train_dist.c — data-parallel and ZeRO-1 optimizer steps, and the gather of sharded
 * moments into rank 0's checkpoint writer (see train_dist.h). */
#include "common/train_dist.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <zlib.h>

#include "common/model_impl.h"
#ifdef LLM_CUDA
#include "kernels/cuda/cuda_ext.h"
#endif

/* Moments in device memory reach the host (checksums, the writer) in pieces of this many
 * floats (4 MiB). */
#define CHUNK ((size_t)1 << 20)

typedef struct {
    llm_train_dist *td;
    int k;              /* 0: opt.m, 1: opt.v */
    int view;
} src_tensor;

/* One bucket of the overlapped all-reduce: elements [lo, hi) of the gradient buffer. */
typedef struct {
    size_t lo, hi;
    llm_dist_req *req;
    int done;           /* llm_dist_test saw it complete (it still needs its wait) */
} bucket;

struct llm_train_dist {
    llm_dist *d;
    llm_model *m;
    llm_backend *be;
    int zero, rank, world;
    int stage;          /* 1: collectives on host memory, model on a device: copy through */
    int sharded;        /* zero on several ranks: the model holds moments [lo, hi) only */
    float *host;        /* stage: nparams floats */
    size_t lo, hi;      /* zero: this rank's shard of the flat parameter buffer */
    /* a checkpoint of sharded moments, between save_begin and save_end */
    int saving;
    int next;           /* the next transfer of the fixed sequence (transfer()) */
    uint32_t *crc;      /* rank 0: crc32 of each whole opt.m.* then opt.v.* tensor */
    src_tensor *src;    /* rank 0: the writer's sources, same order */
    int cur_k, cur_r;   /* rank 0: the shard readable at `data` (moment k of rank r); -1 none */
    const float *data;  /* its element i of the layout at data[i - dlo], for i in [dlo, dhi) */
    size_t dlo, dhi;
    int data_host;      /* data is host memory; else device memory, read through chunk */
    float *chunk;       /* CHUNK floats of host memory when the moments live on a device */
    /* ZeRO-0 overlap (llm_train_dist_set_bucket_mb): buckets of at least bucket floats,
     * all-reduced as the backward reports their gradients final */
    size_t bucket;      /* 0: one all-reduce after the backward */
    size_t pend_lo, pend_hi;   /* reported final, not yet in a bucket */
    bucket *bk;         /* the buckets of this step, in order of launch */
    int nbk, cap_bk;
    int ranges;         /* ranges reported during this step (stats) */
    /* the step's batches, read before its first collective (llm_train_dist_read) */
    int B, T;
    int64_t accum;
    int32_t *batch;     /* accum pairs (inputs, targets) of B x T, then a scratch pair */
    int have;           /* batch holds the batches of the next step */
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

/* Reduce-scatter (sum) the flat buffer p (nparams floats, backend memory) in place:
 * afterwards p[lo, hi) holds this rank's reduced shard, the rest is stale. */
static int reduce_scatter_be(llm_train_dist *td, float *p, llm_status *st)
{
    size_t n = td->m->nparams;
    if (td->be->sync)
        td->be->sync(td->be);
    if (!td->stage)
        return llm_dist_reduce_scatter_inplace(td->d, p, n, LLM_DIST_F32, LLM_DIST_SUM, st);
    td->be->to_host(td->be, td->host, p, n * sizeof(float));
    if (llm_dist_reduce_scatter_inplace(td->d, td->host, n, LLM_DIST_F32, LLM_DIST_SUM, st))
        return st->code;
    td->be->to_device(td->be, p + td->lo, td->host + td->lo, (td->hi - td->lo) * sizeof(float));
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
    if (out->total_batch_tokens % per) {
        /* from the config the ranks agreed on: the same on every rank */
        llm_err(st, LLM_EDATA, "'train.total_batch_tokens' (%lld) must be a multiple of "
                "ranks x train.batch_size x train.seq_len (%d x %d x %d = %lld)",
                (long long)out->total_batch_tokens, world, cfg->batch_size, cfg->seq_len,
                (long long)per);
        st->together = LLM_TOGETHER_SAME;
        return st->code;
    }
    return 0;
}

int llm_train_dist_shard_model(llm_model *m, const llm_dist *d, int zero, llm_status *st)
{
    int world = llm_dist_world(d);
    if (!zero || world == 1)
        return 0;
    size_t lo, hi;
    llm_dist_shard(m->nparams, world, llm_dist_rank(d), &lo, &hi);
    return llm_model_set_opt_range(m, lo, hi, st);
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
    td->sharded = zero && td->world > 1;
    td->cur_k = td->cur_r = -1;
    size_t n = m->nparams;
    llm_dist_shard(n, td->world, td->rank, &td->lo, &td->hi);
    if (!zero) {
        td->lo = 0;
        td->hi = n;
    }
    int rc;
    /* ZeRO-1: the moments of this rank's shard only (a resume has loaded just that) */
    if ((rc = llm_train_dist_shard_model(m, d, zero, st)) ||
        (rc = llm_model__ensure_grads(m, st)) || (rc = llm_model__ensure_moments(m, st)))
        goto fail;
#ifdef LLM_CUDA
    /* NCCL's non-blocking all-reduce waits for the backend's stream on the device */
    if (llm_dist_on_device(d))
        llm_dist_set_stream(d, llm_backend_cuda_stream(be));
#endif
    td->bucket = LLM_TRAIN_BUCKET_DEFAULT;
    if (td->stage && !(td->host = malloc(n * sizeof(float)))) {
        rc = llm_err(st, LLM_ENOMEM, "out of memory");
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

static void save_done(llm_train_dist *td)
{
    llm_model_set_opt_saver(td->m, NULL, NULL);
    free(td->crc);
    free(td->src);
    free(td->chunk);
    td->crc = NULL;
    td->src = NULL;
    td->chunk = NULL;
    td->saving = 0;
    td->cur_k = td->cur_r = -1;
}

void llm_train_dist_free(llm_train_dist *td)
{
    if (!td)
        return;
    save_done(td);
    for (int i = 0; i < td->nbk; i++)
        free(td->bk[i].req);   /* only after an error (the job ends): never waited for */
    free(td->bk);
    free(td->host);
    free(td->batch);
    free(td);
}

int llm_train_dist_check_step(llm_train_dist *td, int64_t step, llm_status *st)
{
    double v[2] = {(double)step, -(double)step};
    if (llm_dist_allreduce(td->d, v, 2, LLM_DIST_F64, LLM_DIST_MAX, st))
        return st->code;
    if (v[0] != -v[1]) {
        llm_err(st, LLM_EDATA, "ranks start at different steps (%.0f to %.0f): is "
                "output.dir on a filesystem every rank shares?", -v[1], v[0]);
        st->together = LLM_TOGETHER_SAME;
        return st->code;
    }
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

/* ---- checkpoints of sharded moments ----
 * Rank 0 writes one whole file.  Its own shard of each moment it reads in place; every
 * other rank's shard comes by a broadcast from that rank, into each receiver's gradient
 * buffer (free between steps: the next step zeroes it) or, when the collectives run on
 * host memory for a device model, into the host staging buffer.  So the gather needs no
 * memory of its own (only CHUNK floats of host memory when the moments are on a device).
 * Every rank runs the same fixed sequence of 2 x (world - 1) transfers, i = 0, 1, ...:
 * moment k = i / (world - 1) (m, then v) of rank r = 1 + i % (world - 1); rank 0 runs
 * them as its writer reaches each shard (file order is the layout order, m then v) and
 * the rest in save_end, where the other ranks run all of them. */

static float *moments(llm_train_dist *td, int k)
{
    return k ? td->m->v : td->m->m;
}

/* Transfer i of the sequence above (every rank). */
static int transfer(llm_train_dist *td, int i, llm_status *st)
{
    llm_backend *be = td->be;
    int k = i / (td->world - 1), r = 1 + i % (td->world - 1);
    size_t lo, hi;
    llm_dist_shard(td->m->nparams, td->world, r, &lo, &hi);
    float *buf = td->stage ? td->host : td->rank == r ? moments(td, k) : td->m->grads;
    if (be->sync)
        be->sync(be);
    if (td->stage && td->rank == r)
        be->to_host(be, td->host, moments(td, k), (hi - lo) * sizeof(float));
    if (llm_dist_broadcast(td->d, buf, hi - lo, LLM_DIST_F32, r, st))
        return st->code;
    if (td->rank == 0) {
        td->cur_k = k;
        td->cur_r = r;
        td->data = buf;
        td->dlo = lo;
        td->dhi = hi;
        td->data_host = td->stage || !is_device(be);
    }
    return 0;
}

/* crc32 of n floats of backend memory p (through chunk on a device). */
static uint32_t crc_be(llm_train_dist *td, const float *p, size_t n)
{
    uLong c = crc32(0L, Z_NULL, 0);
    if (!is_device(td->be))
        return (uint32_t)crc32_z(c, (const Bytef *)p, n * sizeof(float));
    for (size_t o = 0; o < n; o += CHUNK) {
        size_t k = n - o < CHUNK ? n - o : CHUNK;
        td->be->to_host(td->be, td->chunk, p + o, k * sizeof(float));
        c = crc32_z(c, (const Bytef *)td->chunk, k * sizeof(float));
    }
    return (uint32_t)c;
}

/* The writer's source of one moment tensor (rank 0): the piece at byte off, from the
 * shard that holds it, staged by the transfers up to it. */
static int src_read(void *ctx, uint64_t off, const void **p, size_t *n, llm_status *st)
{
    src_tensor *s = ctx;
    llm_train_dist *td = s->td;
    const llm_param_view *v = &td->m->views[s->view];
    size_t g = v->offset + (size_t)(off / sizeof(float)), end = v->offset + v->numel;
    int r = 0;
    size_t lo, hi;
    for (;; r++) {
        llm_dist_shard(td->m->nparams, td->world, r, &lo, &hi);
        if (g < hi || r == td->world - 1)
            break;
    }
    if (td->cur_k != s->k || td->cur_r != r) {
        if (r == 0) {
            td->cur_k = s->k;
            td->cur_r = 0;
            td->data = moments(td, s->k);
            td->dlo = td->lo;
            td->dhi = td->hi;
            td->data_host = !is_device(td->be);
        } else {
            int want = s->k * (td->world - 1) + r - 1;
            if (want < td->next)
                return llm_err(st, LLM_ESOFTWARE, "checkpoint gather: moments read out of order");
            while (td->next <= want)
                if (transfer(td, td->next++, st))
                    return st->code;
        }
    }
    if (g < td->dlo || g >= td->dhi)
        return llm_err(st, LLM_ESOFTWARE, "checkpoint gather: element %zu outside the shard", g);
    size_t b = end < td->dhi ? end : td->dhi;
    const float *src = td->data + (g - td->dlo);
    if (td->data_host) {
        *p = src;
        *n = (b - g) * sizeof(float);
        return 0;
    }
    size_t k = b - g < CHUNK ? b - g : CHUNK;
    td->be->to_host(td->be, td->chunk, src, k * sizeof(float));
    *p = td->chunk;
    *n = k * sizeof(float);
    return 0;
}

/* The model's saver (rank 0): every moment tensor as a source with its crc32. */
static int add_sources(void *ctx, llm_ckpt_writer *w, llm_status *st)
{
    llm_train_dist *td = ctx;
    llm_model *m = td->m;
    char name[LLM_CKPT_NAME_MAX];
    for (int k = 0; k < 2; k++)
        for (int i = 0; i < m->nviews; i++) {
            const llm_param_view *v = &m->views[i];
            snprintf(name, sizeof name, "opt.%c.%s", k ? 'v' : 'm', v->name);
            if (llm_ckpt_add_source(w, name, LLM_DT_F32, v->ndim, v->shape,
                                    td->crc[k * m->nviews + i], src_read,
                                    &td->src[k * m->nviews + i], st))
                return st->code;
        }
    return 0;
}

int llm_train_dist_save_begin(llm_train_dist *td, llm_status *st)
{
    if (!td->sharded)
        return 0;
    save_done(td);
    llm_model *m = td->m;
    int nv = m->nviews, W = td->world;
    size_t ncrc = (size_t)2 * nv * W;
    /* every rank's crc32 of each tensor's part in its shard, summed across ranks (one
     * non-zero entry each: exact in doubles); rank 0 combines them in rank order */
    double *part = calloc(ncrc, sizeof *part);
    int rc = 0;
    if (!part || (is_device(td->be) && !(td->chunk = malloc(CHUNK * sizeof(float))))) {
        rc = llm_err(st, LLM_ENOMEM, "out of memory");
        goto out;
    }
    if (td->be->sync)
        td->be->sync(td->be);
    for (int k = 0; k < 2; k++)
        for (int i = 0; i < nv; i++) {
            const llm_param_view *v = &m->views[i];
            size_t a = v->offset > td->lo ? v->offset : td->lo;
            size_t b = v->offset + v->numel < td->hi ? v->offset + v->numel : td->hi;
            if (a < b)
                part[((size_t)k * nv + i) * W + td->rank] =
                    crc_be(td, moments(td, k) + (a - td->lo), b - a);
        }
    if ((rc = llm_dist_allreduce(td->d, part, ncrc, LLM_DIST_F64, LLM_DIST_SUM, st)))
        goto out;
    td->saving = 1;
    td->next = 0;
    if (td->rank)
        goto out;
    td->crc = calloc((size_t)2 * nv, sizeof *td->crc);
    td->src = calloc((size_t)2 * nv, sizeof *td->src);
    if (!td->crc || !td->src) {
        rc = llm_err(st, LLM_ENOMEM, "out of memory");
        goto out;
    }
    for (int k = 0; k < 2; k++)
        for (int i = 0; i < nv; i++) {
            const llm_param_view *v = &m->views[i];
            uLong c = crc32(0L, Z_NULL, 0);
            for (int r = 0; r < W; r++) {
                size_t lo, hi;
                llm_dist_shard(m->nparams, W, r, &lo, &hi);
                size_t a = v->offset > lo ? v->offset : lo;
                size_t b = v->offset + v->numel < hi ? v->offset + v->numel : hi;
                if (a < b)
                    c = crc32_combine(c, (uLong)part[((size_t)k * nv + i) * W + r],
                                      (z_off_t)((b - a) * sizeof(float)));
            }
            td->crc[k * nv + i] = (uint32_t)c;
            td->src[k * nv + i] = (src_tensor){td, k, i};
        }
    llm_model_set_opt_saver(m, add_sources, td);
out:
    free(part);
    return rc;
}

int llm_train_dist_save_end(llm_train_dist *td, llm_status *st)
{
    if (!td->sharded || !td->saving)
        return 0;
    /* rank 0: the transfers its writer did not reach (a failed write); the others: all */
    int rc = 0;
    while (!rc && td->next < 2 * (td->world - 1))
        rc = transfer(td, td->next++, st);
    save_done(td);
    return rc;
}

/* ZeRO-1: this rank's reduced gradient shard, the global norm, its AdamW update. */
static int zero_update(llm_train_dist *td, const llm_adamw_config *hp, int t, double *gnorm,
                       int *skipped, llm_status *st)
{
    llm_model *m = td->m;
    llm_backend *be = td->be;
    size_t lo = td->lo, hi = td->hi;
    if (reduce_scatter_be(td, m->grads, st))   /* grads[lo, hi): this rank's reduced shard */
        return st->code;
    /* the clipping norm is over the whole gradient: sum the shards' squares */
    double ss = hi > lo ? be->sum_squares(be, m->grads + lo, hi - lo) : 0.0;
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
     * the same as the whole-buffer update; the moments hold [lo, hi) only.  fp32 only:
     * the lo copy is remade from the all-gathered parameters, which the other ranks
     * updated */
    int lo_done;
    if (llm_model__adamw_range(m, hp, t, scale, lo, hi, NULL, &lo_done, st))
        return st->code;
    llm_model_params_changed(m);   /* [mixed precision] the lo copy is remade */
    return allgather_be(td, m->params, st);
}

void llm_train_dist_set_bucket_mb(llm_train_dist *td, double mb)
{
    td->bucket = mb > 0 ? (size_t)(mb * 1048576.0 / sizeof(float)) : 0;
    if (mb > 0 && !td->bucket)
        td->bucket = 1;
}

void llm_train_dist_overlap_stats(const llm_train_dist *td, int *ranges, int *buckets)
{
    *ranges = td->ranges;
    *buckets = td->nbk;
}

/* Start the all-reduce of gradient elements [lo, hi) as one bucket. */
static int launch(llm_train_dist *td, size_t lo, size_t hi, llm_status *st)
{
    if (td->nbk == td->cap_bk) {
        int cap = td->cap_bk ? 2 * td->cap_bk : 16;
        bucket *b = realloc(td->bk, (size_t)cap * sizeof *b);
        if (!b)
            return llm_err(st, LLM_ENOMEM, "out of memory");
        td->bk = b;
        td->cap_bk = cap;
    }
    float *g = td->m->grads + lo;
    if (td->stage) {
        /* host collectives for a device model: this range through the staging buffer
         * (to_host waits for the stream, so the copy is of final values) */
        td->be->to_host(td->be, td->host + lo, g, (hi - lo) * sizeof(float));
        g = td->host + lo;
    }
    bucket *b = &td->bk[td->nbk];
    *b = (bucket){lo, hi, NULL, 0};
    if (llm_dist_iallreduce(td->d, g, hi - lo, LLM_DIST_F32, LLM_DIST_SUM, &b->req, st))
        return st->code;
    td->nbk++;
    return 0;
}

/* The model's gradient-ready hook (llm_model_set_grad_ready): ranges come from the top
 * of the layout down; a bucket closes once it holds td->bucket floats, and the last one
 * (ending at 0) at the end of the backward.  Every rank sees the same ranges, so every
 * rank starts the same buckets in the same order.  Then the outstanding requests are
 * tested: Open MPI moves a non-blocking collective on only inside MPI calls, so this is
 * where the transfers progress while the backward computes (once per layer). */
static int on_ready(void *ctx, size_t lo, size_t hi, llm_status *st)
{
    llm_train_dist *td = ctx;
    td->ranges++;
    if (hi != td->pend_lo || lo >= hi)
        return llm_err(st, LLM_ESOFTWARE, "overlap: gradient range [%zu, %zu) out of order "
                       "(expected one ending at %zu)", lo, hi, td->pend_lo);
    td->pend_lo = lo;
    if (lo == 0 || td->pend_hi - lo >= td->bucket) {
        if (launch(td, lo, td->pend_hi, st))
            return st->code;
        td->pend_hi = lo;
    }
    for (int i = 0; i < td->nbk; i++)
        if (!td->bk[i].done && llm_dist_test(td->d, td->bk[i].req, &td->bk[i].done, st))
            return st->code;
    return 0;
}

/* Wait for every bucket of this step, in launch order (the same on every rank). */
static int wait_buckets(llm_train_dist *td, llm_status *st)
{
    for (int i = 0; i < td->nbk; i++) {
        bucket *b = &td->bk[i];
        llm_dist_req *r = b->req;
        b->req = NULL;
        if (llm_dist_wait(td->d, r, st))
            return st->code;
        if (td->stage)
            td->be->to_device(td->be, td->m->grads + b->lo, td->host + b->lo,
                              (b->hi - b->lo) * sizeof(float));
    }
    return 0;
}

int llm_train_dist_set_batch(llm_train_dist *td, int B, int T, int64_t accum, llm_status *st)
{
    if (B < 1 || T < 1 || accum < 1)
        return llm_err(st, LLM_EUSAGE, "batches of %d x %d tokens, %lld a step: all must be "
                       "positive", B, T, (long long)accum);
    double bytes = (double)accum * B * T * 2 * sizeof(int32_t);
    if (bytes > LLM_TRAIN_DIST_READ_MAX_MB * 1048576.0) {
        llm_err(st, LLM_EDATA, "'train.total_batch_tokens': a rank reads its share of a "
                "step (%lld micro-batch(es) of %d x %d tokens) before the step starts, "
                "%.0f bytes of inputs and targets, more than the %d MiB allowed: use "
                "more ranks or a smaller total_batch_tokens", (long long)accum, B, T,
                bytes, LLM_TRAIN_DIST_READ_MAX_MB);
        st->together = LLM_TOGETHER_SAME;   /* the agreed config's: every rank finds it */
        return st->code;
    }
    int32_t *b = malloc((size_t)(accum + 1) * 2 * (size_t)B * (size_t)T * sizeof *b);
    if (!b)
        return llm_err(st, LLM_ENOMEM, "out of memory");
    free(td->batch);
    td->batch = b;
    td->B = B;
    td->T = T;
    td->accum = accum;
    td->have = 0;
    return 0;
}

int llm_train_dist_read(llm_train_dist *td, llm_data *data, llm_status *st)
{
    if (!td->batch)
        return llm_err(st, LLM_ESOFTWARE, "train_dist: a read before llm_train_dist_set_batch");
    size_t bt = (size_t)td->B * (size_t)td->T;
    int64_t total = td->accum * td->world, mine = (int64_t)td->rank * td->accum;
    int32_t *scratch = td->batch + 2 * bt * (size_t)td->accum;
    td->have = 0;
    /* every rank reads every micro-batch of the global batch, in order, so that the data
     * position stays global; it keeps its own */
    for (int64_t g = 0; g < total; g++) {
        int32_t *in = g >= mine && g < mine + td->accum ? td->batch + 2 * bt * (size_t)(g - mine)
                                                        : scratch;
        if (llm_data_next(data, in, in + bt, st))
            return st->code;
    }
    td->have = 1;
    return 0;
}

int llm_train_dist_agree_read(llm_train_dist *td, int rc, int *together, llm_status *st)
{
    /* the lowest rank that failed and its code in one double: (world - rank) x 256 + code
     * (exact), the maximum over the ranks */
    double v = rc ? (double)(td->world - td->rank) * 256.0 + (double)rc : 0.0;
    llm_status cst = {0};
    *together = 0;
    if (llm_dist_allreduce(td->d, &v, 1, LLM_DIST_F64, LLM_DIST_MAX, &cst)) {
        if (rc)
            return rc;   /* this rank's own error says more */
        *st = cst;
        return st->code;
    }
    if (v == 0)
        return 0;
    int64_t iv = (int64_t)v;
    int r = td->world - (int)(iv / 256), code = (int)(iv % 256);
    if ((double)iv != v || r < 0 || r >= td->world || code <= 0) {   /* no rank sent it */
        if (rc)
            return rc;
        return llm_err(st, LLM_ESOFTWARE, "train_dist: the ranks' read outcome came back as "
                       "%.17g, which no rank sent", v);
    }
    td->have = 0;
    *together = 1;
    if (rc)
        return rc;
    return llm_err(st, (llm_code)code, "rank %d could not read the step's batches (its own "
                   "error says why)", r);
}

int llm_train_dist_step(llm_train_dist *td, const llm_adamw_config *hp, int t, int force_nan,
                        double *loss, double *gnorm, int *skipped, llm_status *st)
{
    llm_model *m = td->m;
    if (!td->have)
        return llm_err(st, LLM_ESOFTWARE, "train_dist: a step without its batches "
                       "(llm_train_dist_read)");
    td->have = 0;
    if (llm_model_zero_grad(m, st))
        return st->code;
    int64_t accum = td->accum, total = accum * td->world;
    size_t bt = (size_t)td->B * (size_t)td->T;
    float gscale = (float)(1.0 / (double)total);
    int overlap = !td->zero && td->bucket > 0;
    td->nbk = td->ranges = 0;
    double sum = 0;
    for (int64_t a = 0; a < accum; a++) {
        const int32_t *in = td->batch + 2 * bt * (size_t)a;
        float l = 0;
        /* overlap: only the last micro-batch's backward makes the gradients final (the
         * forward reports nothing: the hook may be armed across it) */
        int arm = overlap && a == accum - 1;
        if (arm) {
            td->pend_lo = td->pend_hi = m->nparams;
            llm_model_set_grad_ready(m, on_ready, td);
        }
        int rc = llm_model_forward_backward(m, in, in + bt, td->B, td->T, gscale, &l, st);
        if (arm)
            llm_model_set_grad_ready(m, NULL, NULL);
        if (rc)
            return rc;
        sum += l;
    }
    if (overlap && td->pend_lo != 0)
        return llm_err(st, LLM_ESOFTWARE, "overlap: the backward reported gradients up to "
                       "%zu only", td->pend_lo);
    /* the buckets first: every rank waits for them whatever the loss, so that the
     * collectives match (a non-finite step then skips the update) */
    if (overlap && wait_buckets(td, st))
        return st->code;
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
    if (!overlap && allreduce_be(td, m->grads, m->nparams, st))
        return st->code;
    return llm_model_update(m, hp, t, gnorm, skipped, st);
}
