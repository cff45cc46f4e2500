/* model.c — GPT-2 configuration, parameter layout, initialisation and the optimizer
 * step.  The passes are in model_pass.c, checkpoints in model_io.c. */
#include "common/model_impl.h"
#include "common/rng.h"

#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Bounds: generous for real models, small enough that every size below fits in 64 bits
 * without overflow checks at each multiplication. */
#define MAX_LAYER  1024
#define MAX_HEAD   1024
#define MAX_EMBD   65536
#define MAX_VOCAB  (1 << 24)
#define MAX_SEQ    (1 << 20)

static int round_vocab(int V) { return (int)(((int64_t)V + 127) / 128 * 128); }

int llm_model__validate(llm_model_config *cfg, llm_status *st)
{
    if (strcmp(cfg->arch, "gpt2") != 0)
        return llm_err(st, LLM_EDATA, "model: arch '%.16s' is not supported (want 'gpt2')", cfg->arch);
    struct { const char *k; int v, lo, hi; } r[] = {
        {"n_layer", cfg->n_layer, 1, MAX_LAYER}, {"n_head", cfg->n_head, 1, MAX_HEAD},
        {"n_embd", cfg->n_embd, 1, MAX_EMBD}, {"vocab_size", cfg->vocab_size, 1, MAX_VOCAB},
        {"max_seq_len", cfg->max_seq_len, 1, MAX_SEQ},
    };
    for (size_t i = 0; i < sizeof r / sizeof r[0]; i++)
        if (r[i].v < r[i].lo || r[i].v > r[i].hi)
            return llm_err(st, LLM_EDATA, "model: '%s' is %d, must be in [%d, %d]", r[i].k,
                           r[i].v, r[i].lo, r[i].hi);
    if (cfg->n_embd % cfg->n_head != 0)
        return llm_err(st, LLM_EDATA, "model: 'n_embd' %d is not a multiple of 'n_head' %d",
                       cfg->n_embd, cfg->n_head);
    int vp = round_vocab(cfg->vocab_size);
    if (cfg->padded_vocab == 0)
        cfg->padded_vocab = vp;
    else if (cfg->padded_vocab != vp)
        return llm_err(st, LLM_EDATA,
                       "model: 'padded_vocab_size' %d is not vocab_size %d rounded up to a multiple of 128 (%d)",
                       cfg->padded_vocab, cfg->vocab_size, vp);
    return LLM_OK;
}

int llm_model_config_parse(const llm_node *sec, llm_model_config *cfg, llm_status *st)
{
    memset(cfg, 0, sizeof *cfg);
    if (!sec || sec->kind != LLM_NODE_MAP)
        return llm_err(st, LLM_EDATA, "model: expected a mapping");
    static const char *const ikeys[] = {"n_layer", "n_head", "n_embd", "vocab_size",
                                        "max_seq_len", "padded_vocab_size"};
    int *idst[] = {&cfg->n_layer, &cfg->n_head, &cfg->n_embd, &cfg->vocab_size,
                   &cfg->max_seq_len, &cfg->padded_vocab};
    int seen_arch = 0, seen[6] = {0};
    for (int i = 0; i < sec->n; i++) {
        const llm_node *n = sec->items[i];
        const char *k = n->key ? n->key : "";
        int line = n->line;
        if (strcmp(k, "arch") == 0) {
            const char *s = llm_node_str(n);
            if (!s)
                return llm_err(st, LLM_EDATA, "model: line %d: key 'arch': expected a string", line);
            if (strlen(s) >= sizeof cfg->arch || strcmp(s, "gpt2") != 0)
                return llm_err(st, LLM_EDATA, "model: line %d: key 'arch': '%.32s' is not supported (want 'gpt2')",
                               line, s);
            snprintf(cfg->arch, sizeof cfg->arch, "%s", s);
            seen_arch = 1;
            continue;
        }
        size_t j = 0;
        while (j < 6 && strcmp(k, ikeys[j]) != 0)
            j++;
        if (j == 6)
            return llm_err(st, LLM_EDATA, "model: line %d: unknown key '%.64s'", line, k);
        int64_t v;
        if (n->kind != LLM_NODE_SCALAR || n->quoted || llm_node_i64(n, &v) != 0)
            return llm_err(st, LLM_EDATA, "model: line %d: key '%s': expected an integer", line, k);
        int lo = 1, hi = j == 0 ? MAX_LAYER : j == 1 ? MAX_HEAD : j == 2 ? MAX_EMBD
                       : j == 4 ? MAX_SEQ : MAX_VOCAB + 128;
        if (v < lo || v > hi)
            return llm_err(st, LLM_EDATA, "model: line %d: key '%s': %lld is out of range [%d, %d]",
                           line, k, (long long)v, lo, hi);
        *idst[j] = (int)v;
        seen[j] = 1;
    }
    if (!seen_arch)
        return llm_err(st, LLM_EDATA, "model: missing key 'arch'");
    for (int j = 0; j < 5; j++)
        if (!seen[j])
            return llm_err(st, LLM_EDATA, "model: missing key '%s'", ikeys[j]);
    return llm_model__validate(cfg, st);
}

llm_node *llm_model_config_node(const llm_model_config *cfg)
{
    llm_node *n = llm_node_new_map();
    if (!n)
        return NULL;
    int vp = cfg->padded_vocab ? cfg->padded_vocab : round_vocab(cfg->vocab_size);
    if (llm_node_set_str(n, "arch", cfg->arch[0] ? cfg->arch : "gpt2") ||
        llm_node_set_int(n, "n_layer", cfg->n_layer) || llm_node_set_int(n, "n_head", cfg->n_head) ||
        llm_node_set_int(n, "n_embd", cfg->n_embd) ||
        llm_node_set_int(n, "vocab_size", cfg->vocab_size) ||
        llm_node_set_int(n, "padded_vocab_size", vp) ||
        llm_node_set_int(n, "max_seq_len", cfg->max_seq_len)) {
        llm_node_free(n);
        return NULL;
    }
    return n;
}

size_t llm_model_num_params(const llm_model_config *cfg)
{
    size_t C = (size_t)cfg->n_embd, L = (size_t)cfg->n_layer;
    size_t Vp = (size_t)(cfg->padded_vocab ? cfg->padded_vocab : round_vocab(cfg->vocab_size));
    return Vp * C + (size_t)cfg->max_seq_len * C + L * (12 * C * C + 13 * C) + 2 * C;
}

static void set_view(llm_param_view *v, const char *name, size_t *off, int ndim, int64_t d0,
                     int64_t d1, int decay)
{
    snprintf(v->name, sizeof v->name, "%s", name);
    v->offset = *off;
    v->ndim = ndim;
    v->shape[0] = d0;
    v->shape[1] = ndim == 2 ? d1 : 0;
    v->numel = (size_t)d0 * (size_t)(ndim == 2 ? d1 : 1);
    v->decay = decay;
    *off += v->numel;
}

int llm_model__is_host(const llm_backend *be)
{
    return be->name && strncmp(be->name, "cpu", 3) == 0;
}

int llm_model__views(const llm_model_config *cfg, llm_param_view **out, int *nviews)
{
    int L = cfg->n_layer, n = 2 + L * PV_PER_LAYER + 2;
    int64_t C = cfg->n_embd;
    llm_param_view *v = calloc((size_t)n, sizeof *v);
    if (!v)
        return -1;
    size_t off = 0;
    set_view(&v[PV_WTE], "wte", &off, 2, cfg->padded_vocab, C, 1);
    set_view(&v[PV_WPE], "wpe", &off, 2, cfg->max_seq_len, C, 1);
    static const struct { const char *n; int ndim, d0m, d1m, decay; } per[PV_PER_LAYER] = {
        {"ln_1.weight", 1, 1, 0, 0}, {"ln_1.bias", 1, 1, 0, 0},
        {"attn.c_attn.weight", 2, 3, 1, 1}, {"attn.c_attn.bias", 1, 3, 0, 0},
        {"attn.c_proj.weight", 2, 1, 1, 1}, {"attn.c_proj.bias", 1, 1, 0, 0},
        {"ln_2.weight", 1, 1, 0, 0}, {"ln_2.bias", 1, 1, 0, 0},
        {"mlp.c_fc.weight", 2, 4, 1, 1}, {"mlp.c_fc.bias", 1, 4, 0, 0},
        {"mlp.c_proj.weight", 2, 1, 4, 1}, {"mlp.c_proj.bias", 1, 1, 0, 0},
    };
    char name[64];
    for (int l = 0; l < L; l++)
        for (int k = 0; k < PV_PER_LAYER; k++) {
            snprintf(name, sizeof name, "h.%d.%s", l, per[k].n);
            set_view(&v[PV_LAYER(l, k)], name, &off, per[k].ndim, per[k].d0m * C,
                     per[k].d1m * C, per[k].decay);
        }
    set_view(&v[n - 2], "ln_f.weight", &off, 1, C, 0, 0);
    set_view(&v[n - 1], "ln_f.bias", &off, 1, C, 0, 0);
    *out = v;
    *nviews = n;
    return 0;
}

/* "[d0, d1, ...]" of n dims into buf */
static const char *shape_str(const int64_t *d, int n, char *buf, size_t len)
{
    size_t k = (size_t)snprintf(buf, len, "[");
    for (int i = 0; i < n && k < len; i++)
        k += (size_t)snprintf(buf + k, len - k, "%s%lld", i ? ", " : "", (long long)d[i]);
    if (k < len)
        snprintf(buf + k, len - k, "]");
    return buf;
}

int llm_model_check_shape(const llm_model_config *cfg, const char *name, const llm_tensor *t,
                          llm_status *st)
{
    llm_param_view *v;
    int n;
    if (llm_model__views(cfg, &v, &n))
        return llm_err(st, LLM_ENOMEM, "out of memory");
    int i = 0;
    while (i < n && strcmp(v[i].name, name))
        i++;
    int rc = LLM_OK;
    if (i == n) {
        rc = llm_err(st, LLM_EUSAGE, "'%s' is not a parameter of the model", name);
    } else {
        const llm_param_view *w = &v[i];
        int ok = t->ndim == w->ndim && (i == PV_WTE ? t->shape[0] >= cfg->vocab_size
                                                    : t->shape[0] == w->shape[0]);
        if (ok && w->ndim == 2)
            ok = t->shape[1] == w->shape[1];
        if (!ok) {
            char got[96], want[64];
            rc = llm_err(st, LLM_EDATA, "tensor '%s': shape %s does not fit the model's %s%s", name,
                         shape_str(t->shape, t->ndim, got, sizeof got),
                         shape_str(w->shape, w->ndim, want, sizeof want),
                         i == PV_WTE ? " (at least vocab_size rows)" : "");
        }
    }
    free(v);
    return rc;
}

int llm_model_new(llm_model **out, const llm_model_config *cfg_in, llm_backend *be, llm_status *st)
{
    *out = NULL;
    llm_model_config cfg = *cfg_in;
    int rc = llm_model__validate(&cfg, st);
    if (rc)
        return rc;
    llm_model *m = calloc(1, sizeof *m);
    if (!m || llm_model__views(&cfg, &m->views, &m->nviews) != 0) {
        free(m);
        return llm_err(st, LLM_ENOMEM, "model: out of memory");
    }
    m->cfg = cfg;
    m->be = be;
    m->loss_scale = 1.0;
    size_t off = m->views[m->nviews - 1].offset + m->views[m->nviews - 1].numel;
    m->nparams = off;
    m->opt_hi = off;
    if (off != llm_model_num_params(&cfg)) {
        llm_model_free(m);
        return llm_err(st, LLM_ESOFTWARE, "model: layout size mismatch");
    }
    m->params = be->alloc(be, m->nparams * sizeof(float));
    if (!m->params) {
        llm_model_free(m);
        return llm_err(st, LLM_ENOMEM, "model: cannot allocate %zu parameters", off);
    }
    *out = m;
    return LLM_OK;
}

void llm_model_free(llm_model *m)
{
    if (!m)
        return;
    llm_backend *be = m->be;
    float *bufs[] = {m->params, m->grads, m->m, m->v, m->acts};
    for (size_t i = 0; i < sizeof bufs / sizeof bufs[0]; i++)
        if (bufs[i])
            be->free(be, bufs[i]);
    if (m->d_inputs)
        be->free(be, m->d_inputs);
    if (m->d_targets)
        be->free(be, m->d_targets);
    if (m->params_lo)
        be->free(be, m->params_lo);
    free(m->x);
    free(m->layer);
    free(m->host_losses);
    free(m->host_copy);
    free(m->views);
    free(m);
}

const llm_model_config *llm_model_cfg(const llm_model *m) { return &m->cfg; }
int llm_model_nviews(const llm_model *m) { return m->nviews; }
float *llm_model_params(llm_model *m)
{
    m->lo_stale = 1;   /* the caller may write through it */
    return m->params;
}
float *llm_model_grads(llm_model *m) { return m->grads; }

const llm_param_view *llm_model_view(const llm_model *m, int i)
{
    return i >= 0 && i < m->nviews ? &m->views[i] : NULL;
}

const llm_param_view *llm_model_find_view(const llm_model *m, const char *name)
{
    for (int i = 0; i < m->nviews; i++)
        if (strcmp(m->views[i].name, name) == 0)
            return &m->views[i];
    return NULL;
}

/* ---- initialisation ----
 * The generator is xoshiro256** seeded through splitmix64 (both integer-only, so the
 * stream is the same everywhere).  Normals come from the polar form of Box-Muller
 * (Marsaglia): only +, *, log and sqrt in double precision, rounded to float, so the
 * result does not depend on a platform's sin/cos.  Both normals of each pair are used.
 * Values are drawn view by view in layout order, element by element; views that are
 * constant (biases, layernorms) and the padded wte rows draw nothing. */
typedef struct {
    uint64_t s[4];
    int have;
    double spare;
} init_rng;

static uint64_t rotl(uint64_t x, int k) { return (x << k) | (x >> (64 - k)); }

static uint64_t xoshiro(init_rng *r)
{
    uint64_t *s = r->s, res = rotl(s[1] * 5, 7) * 9, t = s[1] << 17;
    s[2] ^= s[0];
    s[3] ^= s[1];
    s[1] ^= s[2];
    s[0] ^= s[3];
    s[2] ^= t;
    s[3] = rotl(s[3], 45);
    return res;
}

static double normal(init_rng *r)
{
    if (r->have) {
        r->have = 0;
        return r->spare;
    }
    double u, v, s;
    do {
        u = (double)(xoshiro(r) >> 11) * 0x1.0p-52 - 1.0;   /* [-1, 1) */
        v = (double)(xoshiro(r) >> 11) * 0x1.0p-52 - 1.0;
        s = u * u + v * v;
    } while (s >= 1.0 || s == 0.0);
    double f = sqrt(-2.0 * log(s) / s);
    r->spare = v * f;
    r->have = 1;
    return u * f;
}

void llm_model_init_gpt2(llm_model *m, uint64_t seed)
{
    init_rng r = {{0}, 0, 0.0};
    uint64_t x = seed;
    for (int i = 0; i < 4; i++)
        r.s[i] = llm_splitmix64(&x);
    llm_backend *be = m->be;
    enum { CHUNK = 1 << 16 };
    float *buf = malloc(CHUNK * sizeof(float));
    int host = llm_model__is_host(be);
    if (!host && !buf)
        return;   /* out of memory: parameters stay zero */
    m->lo_stale = 1;
    double resid_std = 0.02 / sqrt(2.0 * m->cfg.n_layer);
    size_t Vreal = (size_t)m->cfg.vocab_size * (size_t)m->cfg.n_embd;
    for (int i = 0; i < m->nviews; i++) {
        const llm_param_view *v = &m->views[i];
        const char *nm = v->name;
        size_t len = strlen(nm);
        int is_ln_w = len >= 6 && strcmp(nm + len - 6, "weight") == 0 && strstr(nm, "ln_");
        double std = 0.02;
        if (strstr(nm, "c_proj.weight"))
            std = resid_std;
        for (size_t done = 0; done < v->numel;) {
            size_t n = v->numel - done < CHUNK ? v->numel - done : CHUNK;
            float *dst = host ? m->params + v->offset + done : buf;
            for (size_t j = 0; j < n; j++) {
                size_t e = done + j;
                if (is_ln_w)
                    dst[j] = 1.0f;
                else if (!v->decay)
                    dst[j] = 0.0f;
                else if (i == PV_WTE && e >= Vreal)
                    dst[j] = 0.0f;
                else
                    dst[j] = (float)(std * normal(&r));
            }
            if (!host)
                be->to_device(be, m->params + v->offset + done, dst, n * sizeof(float));
            done += n;
        }
    }
    free(buf);
}

/* ---- gradients and the optimizer ---- */

int llm_model__ensure_grads(llm_model *m, llm_status *st)
{
    if (!m->grads && !(m->grads = m->be->alloc(m->be, m->nparams * sizeof(float))))
        return llm_err(st, LLM_ENOMEM, "model: cannot allocate gradients (%zu floats)", m->nparams);
    return LLM_OK;
}

int llm_model__ensure_moments(llm_model *m, llm_status *st)
{
    /* at least one float: a rank with an empty shard still gets a buffer */
    size_t k = m->opt_hi - m->opt_lo, bytes = (k ? k : 1) * sizeof(float);
    if (!m->m && !(m->m = m->be->alloc(m->be, bytes)))
        return llm_err(st, LLM_ENOMEM, "model: cannot allocate optimizer moments");
    if (!m->v && !(m->v = m->be->alloc(m->be, bytes)))
        return llm_err(st, LLM_ENOMEM, "model: cannot allocate optimizer moments");
    return LLM_OK;
}

int llm_model__opt_sharded(const llm_model *m)
{
    return m->opt_lo != 0 || m->opt_hi != m->nparams;
}

int llm_model_set_opt_range(llm_model *m, size_t lo, size_t hi, llm_status *st)
{
    if (lo > hi || hi > m->nparams)
        return llm_err(st, LLM_EUSAGE, "model: optimizer range [%zu, %zu) outside the %zu "
                       "parameters", lo, hi, m->nparams);
    if (lo == m->opt_lo && hi == m->opt_hi)
        return LLM_OK;
    if (m->m || m->v)
        return llm_err(st, LLM_EUSAGE, "model: the optimizer moments exist already; set their "
                       "range first");
    m->opt_lo = lo;
    m->opt_hi = hi;
    return LLM_OK;
}

void llm_model_opt_range(const llm_model *m, size_t *lo, size_t *hi)
{
    *lo = m->opt_lo;
    *hi = m->opt_hi;
}

void llm_model_set_opt_saver(llm_model *m, llm_model_opt_saver fn, void *ctx)
{
    m->opt_saver = fn;
    m->opt_saver_ctx = fn ? ctx : NULL;
}

int llm_model_zero_grad(llm_model *m, llm_status *st)
{
    if (!m->grads)
        return llm_model__ensure_grads(m, st);   /* alloc returns zeroed memory */
    m->be->zero(m->be, m->grads, m->nparams * sizeof(float));
    return LLM_OK;
}

double llm_model_grad_norm(llm_model *m)
{
    if (!m->grads)
        return 0.0;
    return sqrt(m->be->sum_squares(m->be, m->grads, m->nparams));
}

/* The runs of consecutive views with equal decay (weight_decay, or 0 for views without
 * decay) cut to [lo, hi), in layout order, empty ones dropped: *out malloc'd, *nseg of
 * them.  -1 when out of memory. */
static int adamw_runs(const llm_model *m, float weight_decay, size_t lo, size_t hi,
                      llm_adamw_seg **out, int *nseg)
{
    *out = NULL;
    *nseg = 0;
    llm_adamw_seg *s = malloc((size_t)(m->nviews > 0 ? m->nviews : 1) * sizeof *s);
    if (!s)
        return -1;
    int k = 0;
    for (int i = 0; i < m->nviews;) {
        int j = i + 1;
        while (j < m->nviews && m->views[j].decay == m->views[i].decay)
            j++;
        size_t a = m->views[i].offset, b = m->views[j - 1].offset + m->views[j - 1].numel;
        if (a < lo)
            a = lo;
        if (b > hi)
            b = hi;
        if (a < b)
            s[k++] = (llm_adamw_seg){a, b - a, m->views[i].decay ? weight_decay : 0.0f};
        i = j;
    }
    *out = s;
    *nseg = k;
    return 0;
}

int llm_model__adamw_range(llm_model *m, const llm_adamw_config *hp, int t, float scale,
                           size_t lo, size_t hi, void *plo, int *lo_done, llm_status *st)
{
    *lo_done = 0;
    llm_adamw_seg *segs;
    int nseg;
    if (adamw_runs(m, hp->weight_decay, lo, hi, &segs, &nseg))
        return llm_err(st, LLM_ENOMEM, "adamw: out of memory for %d segments", m->nviews);
    llm_backend *be = m->be;
    if (be->adamw_segs) {
        /* the copy is whole when the runs tile the range (the views tile the buffer) */
        size_t covered = lo;
        for (int i = 0; i < nseg; i++)
            covered = segs[i].off == covered ? covered + segs[i].n : SIZE_MAX;
        be->adamw_segs(be, m->params, plo, m->grads, m->m, m->v, lo, segs, nseg, hp->lr,
                       hp->beta1, hp->beta2, hp->eps, t, scale, plo ? m->lo : 0);
        *lo_done = plo && covered == hi;
    } else {
        for (int i = 0; i < nseg; i++) {
            size_t a = segs[i].off;
            be->adamw(be, m->params + a, m->grads + a, m->m + (a - lo), m->v + (a - lo),
                      segs[i].n, hp->lr, hp->beta1, hp->beta2, hp->eps, segs[i].wd, t, scale);
        }
    }
    free(segs);
    return LLM_OK;
}

int llm_model_update(llm_model *m, const llm_adamw_config *hp, int t, double *grad_norm,
                     int *skipped, llm_status *st)
{
    if (t < 1)
        return llm_err(st, LLM_EUSAGE, "adamw: step %d must be >= 1", t);
    if (llm_model__opt_sharded(m))
        return llm_err(st, LLM_EUSAGE, "adamw: the model holds a shard of the moments "
                       "([%zu, %zu) of %zu): update that range instead", m->opt_lo, m->opt_hi,
                       m->nparams);
    int rc = llm_model__ensure_grads(m, st);
    if (rc || (rc = llm_model__ensure_moments(m, st)))
        return rc;
    /* the gradients carry the loss scale: the true norm is the buffer's over it */
    double norm = llm_model_grad_norm(m) / m->loss_scale;
    if (grad_norm)
        *grad_norm = norm;
    if (!isfinite(norm)) {
        if (skipped)
            *skipped = 1;
        return LLM_OK;
    }
    if (skipped)
        *skipped = 0;
    double clip = 1.0;
    if (hp->grad_clip > 0 && norm > hp->grad_clip)
        clip = hp->grad_clip / norm;
    float scale = (float)(clip / m->loss_scale);   /* exactly the clip factor at scale 1 */
    /* the lo copy is rewritten by the update where the backend can (adamw_segs), so the
     * next forward needs no cast_lo pass; else it is remade there */
    m->lo_stale = 1;
    int lo_done = 0;
    rc = llm_model__adamw_range(m, hp, t, scale, 0, m->nparams, m->lo ? m->params_lo : NULL,
                                &lo_done, st);
    if (!rc && lo_done)
        m->lo_stale = 0;
    return rc;
}

size_t llm_model_bytes(const llm_model *m)
{
    size_t f = m->nparams * (1 + (m->grads != NULL)) +
               (m->opt_hi - m->opt_lo) * ((m->m != NULL) + (m->v != NULL));
    return (f + m->acts_floats) * sizeof(float) + 2 * m->cap_n * sizeof(int32_t) +
           (m->params_lo ? m->nparams * sizeof(uint16_t) : 0);
}

/* ---- mixed precision ---- */

int llm_model_set_precision(llm_model *m, llm_dtype dt, llm_status *st)
{
    llm_backend *be = m->be;
    if (dt == LLM_DT_F32) {
        if (m->params_lo)
            be->free(be, m->params_lo);
        m->params_lo = NULL;
        m->lo = 0;
        return LLM_OK;
    }
    const char *name = dt == LLM_DT_BF16 ? "bf16" : dt == LLM_DT_F16 ? "fp16" : NULL;
    if (!name)
        return llm_err(st, LLM_EUSAGE, "model: precision %s is not supported (want fp32, "
                       "bf16 or fp16)", llm_dtype_name(dt));
    if (!be->cast_lo || !be->matmul_forward_lo || !be->matmul_backward_lo ||
        !be->layernorm_forward_lo || !be->gelu_forward_lo || !be->gelu_backward_lo ||
        !be->attention_forward_lse || !be->attention_backward_lse || !be->xent_forward_lo ||
        !be->xent_backward_lo)
        return llm_err(st, LLM_ENODEV, "backend '%s' has no %s ops (the lo ops of "
                       "kernels/backend.h: cast_lo, matmul_*_lo, layernorm_forward_lo, "
                       "gelu_*_lo, attention_*_lse, xent_*_lo): use precision fp32 or "
                       "another device", be->name ? be->name : "?", name);
    if (!m->params_lo && !(m->params_lo = be->alloc(be, m->nparams * sizeof(uint16_t))))
        return llm_err(st, LLM_ENOMEM, "model: cannot allocate the %s copy of %zu parameters",
                       name, m->nparams);
    m->lo = (int)dt;
    m->lo_stale = 1;
    return LLM_OK;
}

llm_dtype llm_model_precision(const llm_model *m)
{
    return m->lo ? (llm_dtype)m->lo : LLM_DT_F32;
}

int llm_model_set_loss_scale(llm_model *m, double scale, llm_status *st)
{
    if (!isfinite(scale) || !(scale > 0) || scale > 3.0e38)
        return llm_err(st, LLM_EUSAGE, "model: loss scale %g must be finite and > 0", scale);
    m->loss_scale = scale;
    return LLM_OK;
}

double llm_model_loss_scale(const llm_model *m) { return m->loss_scale; }

void llm_model_params_changed(llm_model *m) { m->lo_stale = 1; }
