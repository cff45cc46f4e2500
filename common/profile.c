/* profile.c — the forwarding backend that times and counts every kernel call. */
#include "common/profile_impl.h"

#include <stdlib.h>
#include <string.h>
#include <time.h>

/* ---- regions (named parameter tensors) ---- */

static int site_intern(llm_profile *p, const char *name)
{
    for (int i = 0; i < p->nsites; i++)
        if (strcmp(p->sites[i], name) == 0) return i;
    if (p->nsites == p->csites) {
        int cap = p->csites ? 2 * p->csites : 32;
        char (*ns)[40] = realloc(p->sites, (size_t)cap * sizeof *ns);
        if (!ns) return -1;
        p->sites = ns;
        p->csites = cap;
    }
    snprintf(p->sites[p->nsites], sizeof p->sites[0], "%s", name);
    return p->nsites++;
}

int llm_profile_add_region(llm_profile *p, const void *ptr, size_t bytes, const char *name,
                           llm_status *st)
{
    if (!ptr || !bytes) return 0;
    /* "h.12.attn.c_attn.weight" -> layer 12, site "attn.c_attn"; "ln_f.bias" -> "ln_f". */
    int layer = -1;
    const char *rest = name;
    if (strncmp(name, "h.", 2) == 0) {
        char *end;
        long l = strtol(name + 2, &end, 10);
        if (end != name + 2 && *end == '.' && l >= 0 && l < 100000) {
            layer = (int)l;
            rest = end + 1;
        }
    }
    char site[40];
    snprintf(site, sizeof site, "%s", rest);
    size_t len = strlen(site);
    if (len > 7 && strcmp(site + len - 7, ".weight") == 0) site[len - 7] = 0;
    else if (len > 5 && strcmp(site + len - 5, ".bias") == 0) site[len - 5] = 0;
    int s = site_intern(p, site);
    if (s < 0) return llm_err(st, LLM_ENOMEM, "out of memory for profile regions");
    if (p->nregions == p->cregions) {
        size_t cap = p->cregions ? 2 * p->cregions : 64;
        region *nr = realloc(p->regions, cap * sizeof *nr);
        if (!nr) return llm_err(st, LLM_ENOMEM, "out of memory for profile regions");
        p->regions = nr;
        p->cregions = cap;
    }
    /* Keep the array sorted by start address (insertion: regions come in order). */
    size_t i = p->nregions;
    while (i > 0 && (uintptr_t)p->regions[i - 1].start > (uintptr_t)ptr) {
        p->regions[i] = p->regions[i - 1];
        i--;
    }
    p->regions[i] = (region){(uintptr_t)ptr, bytes, layer, s};
    p->nregions++;
    return 0;
}

const region *llm_profile__region_of(const llm_profile *p, const void *ptr)
{
    uintptr_t a = (uintptr_t)ptr;
    size_t lo = 0, hi = p->nregions;
    while (lo < hi) {   /* first region starting after a */
        size_t mid = (lo + hi) / 2;
        if (p->regions[mid].start <= a) lo = mid + 1;
        else hi = mid;
    }
    if (lo == 0) return NULL;
    const region *r = &p->regions[lo - 1];
    return a < r->start + r->bytes ? r : NULL;
}

/* ---- recording ---- */

/* Site and layer for an op: from its weight pointer when it has one (and that pointer
 * is registered), else the context left by the latest weighted op. */
void llm_profile__attribute(llm_profile *p, const void *weight, int *site, int *layer)
{
    const region *r = weight ? llm_profile__region_of(p, weight) : NULL;
    if (r) {
        p->ctx_layer = r->layer;
        *site = r->site;
        *layer = r->layer;
        return;
    }
    *site = p->site_none;
    *layer = p->ctx_layer;
}

void llm_profile_add_time(llm_profile *p, int op, int site, int layer, double dur)
{
    agg_entry *e = llm_profile_agg_get(p, op, site, layer);
    if (e) e->seconds += dur;
    p->total_s += dur;
}

void llm_profile_op_end(llm_profile *p, llm_op op, int site, int layer, double t0,
                        llm_op_cost c)
{
    double t1 = llm_now_s();
    /* on a GPU the duration is known only once the device has run the op (flush) */
    int later = p->dev != NULL;
    double dur = later ? 0 : t1 - t0;
    agg_entry *e = llm_profile_agg_get(p, op, site, layer);
    if (e) {
        e->calls++;
        e->seconds += dur;
        e->flop += c.flop;
        e->bytes += c.bytes;
    }
    p->total_s += dur;
    p->nevents++;
    size_t ti = SIZE_MAX;
    if (p->ntrace < p->trace_cap) {
        ti = p->ntrace;
        p->trace[p->ntrace++] = (trace_event){t0 - p->t_origin, dur, c.flop, c.bytes,
                                              (int16_t)op, (int16_t)layer, site};
    }
    if (later) llm_profile_dev_end(p, op, site, layer, ti);
}

/* ---- small uploads remembered off the CPU (see attention_rows) ---- */

#define UPLOAD_MAX 65536
#define NUPLOADS ((int)(sizeof ((llm_profile *)0)->uploads / sizeof ((llm_profile *)0)->uploads[0]))

void llm_profile__uploads_forget(llm_profile *p, const void *dst, size_t bytes)
{
    uintptr_t a = (uintptr_t)dst, b = a + (bytes ? bytes : 1);
    for (int i = 0; i < NUPLOADS; i++) {
        uintptr_t s = (uintptr_t)p->uploads[i].dst, e = s + p->uploads[i].bytes;
        if (p->uploads[i].dst && s < b && a < e) p->uploads[i].dst = NULL;
    }
}

static void uploads_remember(llm_profile *p, const void *dst, const void *src, size_t bytes)
{
    if (p->host_mem || bytes == 0) return;
    llm_profile__uploads_forget(p, dst, bytes);
    if (bytes > UPLOAD_MAX) return;
    int i = p->next_upload;
    p->next_upload = (i + 1) % NUPLOADS;
    if (p->uploads[i].cap < bytes) {
        void *h = realloc(p->uploads[i].host, bytes);
        if (!h) return;   /* then attention_rows reads the device */
        p->uploads[i].host = h;
        p->uploads[i].cap = bytes;
    }
    memcpy(p->uploads[i].host, src, bytes);
    p->uploads[i].dst = dst;
    p->uploads[i].bytes = bytes;
}

static const void *uploads_find(const llm_profile *p, const void *dst, size_t bytes)
{
    for (int i = 0; i < NUPLOADS; i++)
        if (p->uploads[i].dst == dst && p->uploads[i].bytes >= bytes) return p->uploads[i].host;
    return NULL;
}

static void *w_alloc(llm_backend *be, size_t bytes)
{
    llm_profile *p = P(be);
    void *ptr = IN(p)->alloc(IN(p), bytes);
    if (ptr && llm_profile_blocks_put(p, ptr, bytes) == 0) {
        p->live += bytes;
        if (p->live > p->peak) p->peak = p->live;
    }
    return ptr;
}

static void w_free(llm_backend *be, void *ptr)
{
    llm_profile *p = P(be);
    if (ptr) {
        size_t b = llm_profile_blocks_take(p, ptr);
        p->live -= b;
        if (!p->host_mem) llm_profile__uploads_forget(p, ptr, b);
        llm_profile__lo_forget(p, ptr, b);
    }
    IN(p)->free(IN(p), ptr);
}

static void w_to_device(llm_backend *be, void *dst, const void *src, size_t bytes)
{
    llm_profile *p = P(be);
    uploads_remember(p, dst, src, bytes);
    BEGIN(LLM_OP_TO_DEVICE);
    IN(p)->to_device(IN(p), dst, src, bytes);
    END(LLM_OP_TO_DEVICE, p->site_mem, -1, ((llm_op_cost){0, 2.0 * (double)bytes}));
}

static void w_to_host(llm_backend *be, void *dst, const void *src, size_t bytes)
{
    llm_profile *p = P(be);
    BEGIN(LLM_OP_TO_HOST);
    IN(p)->to_host(IN(p), dst, src, bytes);
    END(LLM_OP_TO_HOST, p->site_mem, -1, ((llm_op_cost){0, 2.0 * (double)bytes}));
}

static void w_copy(llm_backend *be, void *dst, const void *src, size_t bytes)
{
    llm_profile *p = P(be);
    if (!p->host_mem) llm_profile__uploads_forget(p, dst, bytes);
    BEGIN(LLM_OP_COPY);
    IN(p)->copy(IN(p), dst, src, bytes);
    END(LLM_OP_COPY, p->site_mem, -1, ((llm_op_cost){0, 2.0 * (double)bytes}));
}

static void w_zero(llm_backend *be, void *ptr, size_t bytes)
{
    llm_profile *p = P(be);
    if (!p->host_mem) llm_profile__uploads_forget(p, ptr, bytes);
    BEGIN(LLM_OP_ZERO);
    IN(p)->zero(IN(p), ptr, bytes);
    END(LLM_OP_ZERO, p->site_mem, -1, ((llm_op_cost){0, (double)bytes}));
}

static void w_sync(llm_backend *be)
{
    llm_profile *p = P(be);
    IN(p)->sync(IN(p));
}

static void w_embed_forward(llm_backend *be, float *out, const int32_t *inp, const float *wte,
                            const float *wpe, int B, int T, int C)
{
    llm_profile *p = P(be);
    int site, layer;
    llm_profile__attribute(p, wte, &site, &layer);
    BEGIN(LLM_OP_EMBED_FWD);
    IN(p)->embed_forward(IN(p), out, inp, wte, wpe, B, T, C);
    END(LLM_OP_EMBED_FWD, site, layer, llm_cost_embed_forward(B, T, C));
}

static void w_layernorm_forward(llm_backend *be, float *out, float *mean, float *rstd,
                                const float *inp, const float *w, const float *b, int N, int C)
{
    llm_profile *p = P(be);
    int site, layer;
    llm_profile__attribute(p, w, &site, &layer);
    BEGIN(LLM_OP_LAYERNORM_FWD);
    IN(p)->layernorm_forward(IN(p), out, mean, rstd, inp, w, b, N, C);
    END(LLM_OP_LAYERNORM_FWD, site, layer, llm_cost_layernorm_forward(N, C));
}

int llm_profile__lm_head_site(llm_profile *p, int site)
{
    /* The tied output projection reads wte: show it as the lm_head. */
    return site == p->site_wte ? p->site_lm_head : site;
}

static void w_matmul_forward(llm_backend *be, float *out, const float *inp, const float *w,
                             const float *bias, int N, int C, int OC)
{
    llm_profile *p = P(be);
    int site, layer;
    llm_profile__attribute(p, w, &site, &layer);
    site = llm_profile__lm_head_site(p, site);
    BEGIN(LLM_OP_MATMUL_FWD);
    IN(p)->matmul_forward(IN(p), out, inp, w, bias, N, C, OC);
    END(LLM_OP_MATMUL_FWD, site, layer, llm_cost_matmul_forward(N, C, OC, bias != NULL));
}

static void w_attention_forward(llm_backend *be, float *out, float *att, const float *qkv,
                                int B, int T, int C, int NH)
{
    llm_profile *p = P(be);
    int site, layer;
    llm_profile__attribute(p, NULL, &site, &layer);
    BEGIN(LLM_OP_ATTENTION_FWD);
    IN(p)->attention_forward(IN(p), out, att, qkv, B, T, C, NH);
    END(LLM_OP_ATTENTION_FWD, site, layer, llm_cost_attention_forward(B, T, C, NH));
}

static void w_gelu_forward(llm_backend *be, float *out, const float *inp, size_t n)
{
    llm_profile *p = P(be);
    int site, layer;
    llm_profile__attribute(p, NULL, &site, &layer);
    BEGIN(LLM_OP_GELU_FWD);
    IN(p)->gelu_forward(IN(p), out, inp, n);
    END(LLM_OP_GELU_FWD, site, layer, llm_cost_gelu_forward(n));
}

static void w_residual_forward(llm_backend *be, float *out, const float *a, const float *b,
                               size_t n)
{
    llm_profile *p = P(be);
    int site, layer;
    llm_profile__attribute(p, NULL, &site, &layer);
    BEGIN(LLM_OP_RESIDUAL_FWD);
    IN(p)->residual_forward(IN(p), out, a, b, n);
    END(LLM_OP_RESIDUAL_FWD, site, layer, llm_cost_residual_forward(n));
}

static void w_residual_layernorm_forward(llm_backend *be, float *res, float *out, float *mean,
                                        float *rstd, const float *a, const float *b,
                                        const float *w, const float *bias, int N, int C)
{
    llm_profile *p = P(be);
    int site, layer;
    llm_profile__attribute(p, w, &site, &layer);
    BEGIN(LLM_OP_RESIDUAL_LAYERNORM_FWD);
    IN(p)->residual_layernorm_forward(IN(p), res, out, mean, rstd, a, b, w, bias, N, C);
    END(LLM_OP_RESIDUAL_LAYERNORM_FWD, site, layer, llm_cost_residual_layernorm_forward(N, C));
}

static void w_xent_forward(llm_backend *be, float *losses, float *lse, const float *logits,
                           const int32_t *targets, int N, int V, int Vp)
{
    llm_profile *p = P(be);
    BEGIN(LLM_OP_XENT_FWD);
    IN(p)->xent_forward(IN(p), losses, lse, logits, targets, N, V, Vp);
    END(LLM_OP_XENT_FWD, p->site_none, -1, llm_cost_xent_forward(N, V, Vp));
}

static void w_embed_backward(llm_backend *be, float *dwte, float *dwpe, const float *dout,
                             const int32_t *inp, int B, int T, int C)
{
    llm_profile *p = P(be);
    p->ctx_layer = -1;
    BEGIN(LLM_OP_EMBED_BWD);
    IN(p)->embed_backward(IN(p), dwte, dwpe, dout, inp, B, T, C);
    END(LLM_OP_EMBED_BWD, p->site_wte, -1, llm_cost_embed_backward(B, T, C));
}

/* Host work that overlaps the device's (embed_hint): passed through, not an op of its
 * own (its small upload goes through the inner backend, uncounted). */
static void w_embed_hint(llm_backend *be, const int32_t *inp, const int32_t *host, size_t N)
{
    llm_profile *p = P(be);
    IN(p)->embed_hint(IN(p), inp, host, N);
}

static void w_layernorm_backward(llm_backend *be, float *dinp, float *dw, float *db,
                                 const float *dout, const float *inp, const float *w,
                                 const float *mean, const float *rstd, int N, int C)
{
    llm_profile *p = P(be);
    int site, layer;
    llm_profile__attribute(p, w, &site, &layer);
    BEGIN(LLM_OP_LAYERNORM_BWD);
    IN(p)->layernorm_backward(IN(p), dinp, dw, db, dout, inp, w, mean, rstd, N, C);
    END(LLM_OP_LAYERNORM_BWD, site, layer, llm_cost_layernorm_backward(N, C));
}

static void w_matmul_backward(llm_backend *be, float *dinp, float *dw, float *dbias,
                              const float *dout, const float *inp, const float *w, int N,
                              int C, int OC)
{
    llm_profile *p = P(be);
    int site, layer;
    llm_profile__attribute(p, w, &site, &layer);
    site = llm_profile__lm_head_site(p, site);
    BEGIN(LLM_OP_MATMUL_BWD);
    IN(p)->matmul_backward(IN(p), dinp, dw, dbias, dout, inp, w, N, C, OC);
    END(LLM_OP_MATMUL_BWD, site, layer, llm_cost_matmul_backward(N, C, OC, dbias != NULL));
}

static void w_attention_backward(llm_backend *be, float *dqkv, const float *dout,
                                 const float *qkv, const float *att, int B, int T, int C, int NH)
{
    llm_profile *p = P(be);
    int site, layer;
    llm_profile__attribute(p, NULL, &site, &layer);
    BEGIN(LLM_OP_ATTENTION_BWD);
    IN(p)->attention_backward(IN(p), dqkv, dout, qkv, att, B, T, C, NH);
    END(LLM_OP_ATTENTION_BWD, site, layer, llm_cost_attention_backward(B, T, C, NH));
}

static void w_gelu_backward(llm_backend *be, float *dinp, const float *inp, const float *dout,
                            size_t n)
{
    llm_profile *p = P(be);
    int site, layer;
    llm_profile__attribute(p, NULL, &site, &layer);
    BEGIN(LLM_OP_GELU_BWD);
    IN(p)->gelu_backward(IN(p), dinp, inp, dout, n);
    END(LLM_OP_GELU_BWD, site, layer, llm_cost_gelu_backward(n));
}

static void w_accumulate(llm_backend *be, float *dst, const float *src, size_t n)
{
    llm_profile *p = P(be);
    int site, layer;
    llm_profile__attribute(p, NULL, &site, &layer);
    BEGIN(LLM_OP_ACCUMULATE);
    IN(p)->accumulate(IN(p), dst, src, n);
    END(LLM_OP_ACCUMULATE, site, layer, llm_cost_accumulate(n));
}

static void w_xent_backward(llm_backend *be, float *dlogits, const float *logits,
                            const float *lse, const int32_t *targets, float dloss, int N, int V,
                            int Vp)
{
    llm_profile *p = P(be);
    BEGIN(LLM_OP_XENT_BWD);
    IN(p)->xent_backward(IN(p), dlogits, logits, lse, targets, dloss, N, V, Vp);
    END(LLM_OP_XENT_BWD, p->site_none, -1, llm_cost_xent_backward(N, V, Vp));
}

static double w_sum_squares(llm_backend *be, const float *g, size_t n)
{
    llm_profile *p = P(be);
    BEGIN(LLM_OP_SUM_SQUARES);
    double r = IN(p)->sum_squares(IN(p), g, n);
    END(LLM_OP_SUM_SQUARES, p->site_opt, -1, llm_cost_sum_squares(n));
    return r;
}

static void w_adamw(llm_backend *be, float *par, const float *grad, float *m, float *v, size_t n,
                    float lr, float b1, float b2, float eps, float wd, int t, float grad_scale)
{
    llm_profile *p = P(be);
    BEGIN(LLM_OP_ADAMW);
    IN(p)->adamw(IN(p), par, grad, m, v, n, lr, b1, b2, eps, wd, t, grad_scale);
    END(LLM_OP_ADAMW, p->site_opt, -1, llm_cost_adamw(n));
}

static int w_infer_dtype_ok(llm_backend *be, int dt)
{
    llm_profile *p = P(be);
    return IN(p)->infer_dtype_ok(IN(p), dt);
}

static void w_embed_rows(llm_backend *be, float *out, const int32_t *ids, const int32_t *pos,
                         const void *wte, int wte_dt, const float *wpe, int N, int C)
{
    llm_profile *p = P(be);
    p->ctx_layer = -1;
    BEGIN(LLM_OP_EMBED_ROWS);
    IN(p)->embed_rows(IN(p), out, ids, pos, wte, wte_dt, wpe, N, C);
    END(LLM_OP_EMBED_ROWS, p->site_wte, -1, llm_cost_embed_rows(N, C, wte_dt));
}

static void w_matmul_rows(llm_backend *be, float *out, const float *inp, const void *w, int w_dt,
                          const float *bias, int N, int C, int OC)
{
    llm_profile *p = P(be);
    int site, layer;
    llm_profile__attribute(p, w, &site, &layer);
    site = llm_profile__lm_head_site(p, site);
    BEGIN(LLM_OP_MATMUL_ROWS);
    IN(p)->matmul_rows(IN(p), out, inp, w, w_dt, bias, N, C, OC);
    END(LLM_OP_MATMUL_ROWS, site, layer, llm_cost_matmul_rows(N, C, OC, w_dt, bias != NULL));
}

static void w_kv_store(llm_backend *be, float *kcache, float *vcache, const float *qkv,
                       const int32_t *slot, const int32_t *pos, int N, int C, int maxT)
{
    llm_profile *p = P(be);
    int site, layer;
    llm_profile__attribute(p, NULL, &site, &layer);
    BEGIN(LLM_OP_KV_STORE);
    IN(p)->kv_store(IN(p), kcache, vcache, qkv, slot, pos, N, C, maxT);
    END(LLM_OP_KV_STORE, site, layer, llm_cost_kv_store(N, C));
}

static void w_attention_rows(llm_backend *be, float *out, const float *qkv, const float *kcache,
                             const float *vcache, const int32_t *slot, const int32_t *pos, int N,
                             int C, int NH, int maxT)
{
    llm_profile *p = P(be);
    int site, layer;
    llm_profile__attribute(p, NULL, &site, &layer);
    /* The cost depends on the positions: read them (device memory off the CPU: from
     * the upload that wrote them when it is remembered, so the device keeps running). */
    llm_op_cost c = {0, 0};
    int32_t small[256], *hp = N <= 256 ? small : malloc((size_t)N * sizeof *hp);
    if (hp) {
        const void *up = p->host_mem ? NULL : uploads_find(p, pos, (size_t)N * sizeof *hp);
        if (p->host_mem) memcpy(hp, pos, (size_t)N * sizeof *hp);
        else if (up) memcpy(hp, up, (size_t)N * sizeof *hp);
        else IN(p)->to_host(IN(p), hp, pos, (size_t)N * sizeof *hp);
        c = llm_cost_attention_rows(hp, N, C, NH);
        if (hp != small) free(hp);
    }
    BEGIN(LLM_OP_ATTENTION_ROWS);
    IN(p)->attention_rows(IN(p), out, qkv, kcache, vcache, slot, pos, N, C, NH, maxT);
    END(LLM_OP_ATTENTION_ROWS, site, layer, c);
}

/* outside the blocks, as xent_forward (it reads no weight); ids written on the device
 * are no longer a remembered upload */
static void w_argmax_rows(llm_backend *be, int32_t *ids, const float *logits, int N, int V,
                          int ld)
{
    llm_profile *p = P(be);
    if (!p->host_mem) llm_profile__uploads_forget(p, ids, (size_t)(N > 0 ? N : 0) * sizeof *ids);
    BEGIN(LLM_OP_ARGMAX_ROWS);
    IN(p)->argmax_rows(IN(p), ids, logits, N, V, ld);
    END(LLM_OP_ARGMAX_ROWS, p->site_none, -1, llm_cost_argmax_rows(N, V));
}

/* Host-side queries (NVML, cudaMemGetInfo): passed through untimed. */
static int w_device_stats(llm_backend *be, struct llm_device_stats *out)
{
    llm_profile *p = P(be);
    return IN(p)->device_stats(IN(p), out);
}

static void *w_host_alloc(llm_backend *be, size_t bytes)
{
    llm_profile *p = P(be);
    return IN(p)->host_alloc(IN(p), bytes);
}

static void w_host_free(llm_backend *be, void *ptr)
{
    llm_profile *p = P(be);
    IN(p)->host_free(IN(p), ptr);
}

void llm_profile_backend(llm_profile *p, llm_backend *be)
{
    *be = (llm_backend){
        .name = p->name,
        .ctx = p,
        .threads = p->inner->threads,
        .host_memory = p->inner->host_memory,
        .rows_invariant = p->inner->rows_invariant,
        .alloc = w_alloc,
        .free = w_free,
        .to_device = w_to_device,
        .to_host = w_to_host,
        .copy = w_copy,
        .zero = w_zero,
        .sync = w_sync,
        .embed_forward = w_embed_forward,
        .layernorm_forward = w_layernorm_forward,
        .matmul_forward = w_matmul_forward,
        .attention_forward = w_attention_forward,
        .gelu_forward = w_gelu_forward,
        .residual_forward = w_residual_forward,
        .residual_layernorm_forward =
            p->inner->residual_layernorm_forward ? w_residual_layernorm_forward : NULL,
        .xent_forward = w_xent_forward,
        .embed_backward = w_embed_backward,
        .layernorm_backward = w_layernorm_backward,
        .matmul_backward = w_matmul_backward,
        .attention_backward = w_attention_backward,
        .gelu_backward = w_gelu_backward,
        .accumulate = w_accumulate,
        .xent_backward = w_xent_backward,
        .sum_squares = w_sum_squares,
        .adamw = w_adamw,
        /* Inference pointers only where the inner backend has them, so that callers
         * checking for NULL see the same capabilities. */
        .infer_dtype_ok = p->inner->infer_dtype_ok ? w_infer_dtype_ok : NULL,
        .embed_rows = p->inner->embed_rows ? w_embed_rows : NULL,
        .matmul_rows = p->inner->matmul_rows ? w_matmul_rows : NULL,
        .kv_store = p->inner->kv_store ? w_kv_store : NULL,
        .attention_rows = p->inner->attention_rows ? w_attention_rows : NULL,
        .argmax_rows = p->inner->argmax_rows ? w_argmax_rows : NULL,
        .device_stats = p->inner->device_stats ? w_device_stats : NULL,
        .host_alloc = p->inner->host_alloc ? w_host_alloc : NULL,
        .host_free = p->inner->host_alloc ? w_host_free : NULL,
        .embed_hint = p->inner->embed_hint ? w_embed_hint : NULL,
    };
    llm_profile__fill_lo(p, be);
}

int llm_profile_new(llm_profile **out, llm_backend *inner, size_t trace_cap, llm_status *st)
{
    *out = NULL;
    if (trace_cap > ((size_t)1 << 26)) trace_cap = (size_t)1 << 26;
    llm_profile *p = calloc(1, sizeof *p);
    if (!p) return llm_err(st, LLM_ENOMEM, "out of memory for the profiler");
    p->inner = inner;
    p->trace_cap = trace_cap;
    p->ctx_layer = -1;
    p->span_open = -1;
    p->host_mem = inner->name && strncmp(inner->name, "cpu", 3) == 0;
    snprintf(p->name, sizeof p->name, "profile(%s)", inner->name ? inner->name : "?");
    if (trace_cap && !(p->trace = malloc(trace_cap * sizeof *p->trace))) {
        free(p);
        return llm_err(st, LLM_ENOMEM, "out of memory for %zu trace events", trace_cap);
    }
    p->site_none = site_intern(p, "");
    p->site_mem = site_intern(p, "memory");
    p->site_opt = site_intern(p, "optimizer");
    p->site_wte = site_intern(p, "wte");
    p->site_lm_head = site_intern(p, "lm_head");
    p->site_params = site_intern(p, "params");
    if (p->site_lm_head < 0 || p->site_params < 0 || llm_profile_dev_init(p, st)) {
        llm_profile_free(p);
        return st && st->code ? (int)st->code : llm_err(st, LLM_ENOMEM, "out of memory for the profiler");
    }
    p->t_origin = llm_now_s();
    *out = p;
    return 0;
}

void llm_profile_free(llm_profile *p)
{
    if (!p) return;
    llm_profile_dev_free(p);
    for (int i = 0; i < NUPLOADS; i++) free(p->uploads[i].host);
    free(p->blocks);
    free(p->agg);
    free(p->regions);
    free(p->sites);
    free(p->trace);
    free(p->spans);
    free(p);
}

void llm_profile_reset(llm_profile *p)
{
    llm_profile_dev_reset(p);
    free(p->agg);
    p->agg = NULL;
    p->cagg = p->nagg = 0;
    p->ntrace = 0;
    p->nevents = 0;
    p->nspans = 0;
    p->span_open = -1;
    p->total_s = 0;
    p->t_origin = llm_now_s();
}

void llm_profile_span_begin(llm_profile *p, const char *name)
{
    if (p->nspans == p->cspans) {
        size_t cap = p->cspans ? 2 * p->cspans : 64;
        span *ns = realloc(p->spans, cap * sizeof *ns);
        if (!ns) return;   /* spans are decoration: losing one loses no timing */
        p->spans = ns;
        p->cspans = cap;
    }
    span *s = &p->spans[p->nspans];
    snprintf(s->name, sizeof s->name, "%s", name);
    s->t0 = llm_now_s() - p->t_origin;
    s->dur = -1;
    p->span_open = (long)p->nspans++;
    llm_profile_dev_span_begin(p, s->name);
}

void llm_profile_span_end(llm_profile *p)
{
    if (p->span_open < 0) return;
    llm_profile_dev_span_end(p);
    span *s = &p->spans[p->span_open];
    s->dur = llm_now_s() - p->t_origin - s->t0;
    p->span_open = -1;
    llm_profile_dev_flush(p);
}

void llm_profile_flush(llm_profile *p)
{
    llm_profile_dev_flush(p);
}

size_t llm_profile_mem_live(const llm_profile *p) { return p->live; }
size_t llm_profile_mem_peak(const llm_profile *p) { return p->peak; }
void llm_profile_mem_reset_peak(llm_profile *p) { p->peak = p->live; }
double llm_profile_total_seconds(const llm_profile *p) { return p->total_s; }
size_t llm_profile_nevents(const llm_profile *p) { return p->nevents; }
