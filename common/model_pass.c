/* model_pass.c — GPT-2 forward and backward passes through the kernel interface, and
 * the activation memory they use.
 *
 * Memory: training keeps, per layer, only what the backward reads (see llm_layer_acts)
 * plus L+1 residual streams; the GELU output is recomputed in the backward (but kept,
 * in lo, under mixed precision without recompute) and the gradient of the logits is
 * written over the logits.  The backward needs three scratch
 * buffers in all (two of (N,4C), one (N,C)) instead of a gradient per activation.
 * Inference (no targets) keeps one layer slot and one residual stream, updated in place.
 * Each residual add is fused with the layernorm that reads it (the next layer's ln_1 or
 * ln_f after a layer's MLP) when the backend offers residual_layernorm_forward. */
#include "common/model_impl.h"
#include "common/quant.h"

#include <stdlib.h>
#include <string.h>

/* Floats of backend memory for n elements: fp32, or a lo tensor (2 bytes an element)
 * when lo; each tensor starts on a 256-byte boundary (GEMM operands want 16). */
static size_t fl(size_t n, int lo)
{
    size_t f = lo ? (n + 1) / 2 : n;
    return (f + 63) & ~(size_t)63;
}

/* Floats of one layer slot for n rows and natt attention floats (gelu: the GELU output
 * kept too). */
static size_t layer_floats(size_t n, size_t C, size_t natt, int lo, int gelu)
{
    /* ln1 qkv atty ln2 fch [fcg] (lo-able), res2, att, four statistics */
    return fl(n * C, lo) * 3 + fl(3 * n * C, lo) + fl(4 * n * C, lo) * (gelu ? 2 : 1) +
           fl(n * C, 0) + fl(natt, 0) + 4 * fl(n, 0);
}

static int alloc_acts(llm_model *m, int B, int T, int train, llm_status *st)
{
    /* mixed precision keeps lo activations and the rows' log-sum-exp (B,NH,T) instead
     * of the attention probabilities (B,NH,T,T) */
    int lo = m->lo;
    size_t n = (size_t)B * (size_t)T,
           natt = (size_t)B * m->cfg.n_head * (size_t)T * (lo ? 1 : (size_t)T);
    if (m->acts && n <= m->cap_n && natt <= m->cap_att && m->acts_lo == lo &&
        ((m->acts_train && m->acts_recompute == m->recompute) || !train))
        return LLM_OK;
    llm_backend *be = m->be;
    if (n < m->cap_n)
        n = m->cap_n;
    if (natt < m->cap_att)
        natt = m->cap_att;
    if (m->acts)
        be->free(be, m->acts);
    if (m->d_inputs)
        be->free(be, m->d_inputs);
    if (m->d_targets)
        be->free(be, m->d_targets);
    free(m->x);
    free(m->layer);
    free(m->host_losses);
    m->acts = NULL;
    m->d_inputs = m->d_targets = NULL;
    m->x = NULL;
    m->layer = NULL;
    m->host_losses = NULL;
    m->cap_n = m->cap_att = 0;
    m->acts_floats = 0;
    m->backward_ready = 0;

    size_t C = (size_t)m->cfg.n_embd, Vp = (size_t)m->cfg.padded_vocab;
    int rec = train ? m->recompute : LLM_RECOMPUTE_NONE;
    int L = m->cfg.n_layer, nx = train ? L + 1 : 1;
    int nslots = train && rec != LLM_RECOMPUTE_FULL ? L : 1;
    /* selective: one attention-probability buffer shared by the layer slots (nothing to
     * share when the layers keep only lse) */
    int shared_att = rec == LLM_RECOMPUTE_SELECTIVE && !lo;
    /* mixed precision without recompute keeps the GELU output (lo): the backward need not
     * compute it again; selective recompute drops it */
    int keep_gelu = train && lo && rec == LLM_RECOMPUTE_NONE;
    size_t total = (size_t)nslots * (layer_floats(n, C, natt, lo, keep_gelu) -
                                     (shared_att ? fl(natt, 0) : 0))
                   + (shared_att ? fl(natt, 0) : 0) + (size_t)nx * fl(n * C, 0)
                   + fl(n * C, lo) + 2 * fl(n, 0)     /* lnf, mean, rstd */
                   + fl(n * Vp, lo) + 2 * fl(n, 0)    /* logits, losses, lse */
                   + 2 * fl(n * 4 * C, 0)             /* scratch a, b */
                   + (train ? fl(n * C, 0) : 0);      /* dres */
    m->acts = be->alloc(be, total * sizeof(float));
    m->d_inputs = be->alloc(be, n * sizeof(int32_t));
    m->d_targets = be->alloc(be, n * sizeof(int32_t));
    m->x = calloc((size_t)nx, sizeof *m->x);
    m->layer = calloc((size_t)nslots, sizeof *m->layer);
    m->host_losses = malloc(n * sizeof(float));
    if (!m->acts || !m->d_inputs || !m->d_targets || !m->x || !m->layer || !m->host_losses)
        return llm_err(st, LLM_ENOMEM, "model: cannot allocate activations for B*T=%zu (%zu MiB)",
                       n, total * sizeof(float) >> 20);
    float *p = m->acts;
#define TAKE(ptr, count, l) do { (ptr) = (void *)p; p += fl((count), (l)); } while (0)
    for (int i = 0; i < nx; i++)
        TAKE(m->x[i], n * C, 0);
    float *att_shared = NULL;
    if (shared_att)
        TAKE(att_shared, natt, 0);
    for (int l = 0; l < nslots; l++) {
        llm_layer_acts *a = &m->layer[l];
        TAKE(a->ln1, n * C, lo);
        TAKE(a->ln1_mean, n, 0);
        TAKE(a->ln1_rstd, n, 0);
        TAKE(a->qkv, n * 3 * C, lo);
        if (shared_att)
            a->att = att_shared;
        else
            TAKE(a->att, natt, 0);
        TAKE(a->atty, n * C, lo);
        TAKE(a->res2, n * C, 0);
        TAKE(a->ln2, n * C, lo);
        TAKE(a->ln2_mean, n, 0);
        TAKE(a->ln2_rstd, n, 0);
        TAKE(a->fch, n * 4 * C, lo);
        if (keep_gelu)
            TAKE(a->fcg, n * 4 * C, lo);
        else
            a->fcg = NULL;
    }
    TAKE(m->lnf, n * C, lo);
    TAKE(m->lnf_mean, n, 0);
    TAKE(m->lnf_rstd, n, 0);
    TAKE(m->logits, n * Vp, lo);
    TAKE(m->losses, n, 0);
    TAKE(m->lse, n, 0);
    TAKE(m->buf_a, n * 4 * C, 0);
    TAKE(m->buf_b, n * 4 * C, 0);
    if (train)
        TAKE(m->dres, n * C, 0);
    else
        m->dres = NULL;
#undef TAKE
    if ((size_t)(p - m->acts) != total)
        return llm_err(st, LLM_ESOFTWARE, "model: activation layout mismatch");
    m->acts_floats = total;
    m->cap_n = n;
    m->cap_att = natt;
    m->acts_lo = lo;
    m->acts_train = train;
    m->acts_recompute = rec;
    return LLM_OK;
}

static int check_ids(const int32_t *ids, size_t n, int V, const char *what, llm_status *st)
{
    for (size_t i = 0; i < n; i++)
        if (ids[i] < 0 || ids[i] >= V)
            return llm_err(st, LLM_EDATA, "model: %s[%zu] = %d is outside the vocabulary [0, %d)",
                           what, i, ids[i], V);
    return LLM_OK;
}

#define P(m, idx) ((m)->params + (m)->views[idx].offset)
#define G(m, idx) ((m)->grads + (m)->views[idx].offset)
#define PL(m, idx) ((const uint16_t *)(m)->params_lo + (m)->views[idx].offset)

/* out(n,OC) = inp(n,C) @ W^T + bias for the weight view w and its bias view wb (-1:
 * none).  fp32; or under mixed precision lo inp and weights (the lo copy), out lo when
 * out_lo (with the lo copy of the bias), else fp32 (with the fp32 bias). */
static void mm_forward(llm_model *m, void *out, int out_lo, const void *inp, int w, int wb,
                       int n, int C, int OC)
{
    llm_backend *be = m->be;
    if (!m->lo) {
        be->matmul_forward(be, out, inp, P(m, w), wb >= 0 ? P(m, wb) : NULL, n, C, OC);
        return;
    }
    const void *bias = wb < 0 ? NULL : out_lo ? (const void *)PL(m, wb) : (const void *)P(m, wb);
    be->matmul_forward_lo(be, out, out_lo ? m->lo : LLM_DT_F32, inp, PL(m, w), m->lo, bias, n,
                          C, OC);
}

/* The gradients of view w (and its bias wb, -1: none) += from dout; dinp: fp32, the
 * fp32 ops accumulate into it (zeroed by the caller), the lo ops overwrite it (a lo
 * tensor when dinp_lo, else fp32). */
static void mm_backward(llm_model *m, void *dinp, int dinp_lo, int w, int wb, const void *dout,
                        const void *inp, int n, int C, int OC)
{
    llm_backend *be = m->be;
    float *db = wb >= 0 ? G(m, wb) : NULL;
    if (m->lo)
        be->matmul_backward_lo(be, dinp, dinp_lo ? m->lo : LLM_DT_F32, G(m, w), db, dout, inp,
                               PL(m, w), m->lo, n, C, OC);
    else
        be->matmul_backward(be, dinp, G(m, w), db, dout, inp, P(m, w), n, C, OC);
}

/* A layernorm's destination: output (lo under mixed precision), statistics (NULL in
 * inference) and the view of its weight (the bias is the next view). */
typedef struct {
    void *out;
    float *mean, *rstd;
    int view;
} ln_dst;

/* Layer l's ln_1 into its slot a (a plain layernorm of the stream x: layer 0 after the
 * embedding, and full recompute; otherwise the previous layer's last residual writes it). */
static ln_dst ln1_dst(int l, llm_layer_acts *a, int train)
{
    return (ln_dst){a->ln1, train ? a->ln1_mean : NULL, train ? a->ln1_rstd : NULL,
                    PV_LAYER(l, PV_LN1W)};
}

/* res = a + b (b non-NULL), then the layernorm d of res (or of a when b is NULL): the
 * backend's fused op when it offers one (bit-identical to the two ops), the lo op under
 * mixed precision. */
static void residual_ln_forward(llm_model *m, float *res, const float *a, const float *b,
                                const ln_dst *d, int n)
{
    llm_backend *be = m->be;
    int C = m->cfg.n_embd;
    const float *w = P(m, d->view), *wb = P(m, d->view + 1);
    if (m->lo)
        be->layernorm_forward_lo(be, res, d->out, d->mean, d->rstd, a, b, w, wb, n, C, m->lo);
    else if (!b)
        be->layernorm_forward(be, d->out, d->mean, d->rstd, a, w, wb, n, C);
    else if (be->residual_layernorm_forward)
        be->residual_layernorm_forward(be, res, d->out, d->mean, d->rstd, a, b, w, wb, n, C);
    else {
        be->residual_forward(be, res, a, b, (size_t)n * C);
        be->layernorm_forward(be, d->out, d->mean, d->rstd, res, w, wb, n, C);
    }
}

/* Mixed precision with the backend's fused c_fc + GELU: the forward computes the GELU of
 * the fp32 pre-activation (matmul_forward_gelu_lo) and the backward fuses the GELU
 * backward into c_proj's (matmul_backward_dgelu_lo when present). */
static int fused_gelu(const llm_model *m)
{
    return m->lo && m->be->matmul_forward_gelu_lo;
}

/* The GELU of the fc pre-activation fch into out (n elements). */
static void gelu_forward(llm_model *m, void *out, const void *fch, size_t n)
{
    llm_backend *be = m->be;
    if (m->lo)
        be->gelu_forward_lo(be, out, fch, n, m->lo);
    else
        be->gelu_forward(be, out, fch, n);
}

/* Layer l's forward from the residual stream x, its ln_1 already in a (ln1_dst): the kept
 * activations into a (layernorm statistics when train), res2 = x + attention block (res2
 * may be x: inference updates the stream in place), then xo = res2 + MLP block and with
 * it the next layernorm, next (the next layer's ln_1 or ln_f).  xo NULL (recompute in the
 * backward) stops after the fc pre-activation: everything the backward reads, nothing
 * more.  Under mixed precision the GEMMs feeding lo tensors (qkv, fch) write lo, the two
 * feeding the residual stream fp32. */
static void layer_forward(llm_model *m, int l, llm_layer_acts *a, const float *x, float *res2,
                          float *xo, const ln_dst *next, int train, int B, int T)
{
    llm_backend *be = m->be;
    int C = m->cfg.n_embd, NH = m->cfg.n_head, n = B * T;
    size_t N = (size_t)n;
    mm_forward(m, a->qkv, 1, a->ln1, PV_LAYER(l, PV_QKVW), PV_LAYER(l, PV_QKVB), n, C, 3 * C);
    if (m->lo)
        be->attention_forward_lse(be, a->atty, a->att, a->qkv, B, T, C, NH, m->lo);
    else
        be->attention_forward(be, a->atty, a->att, a->qkv, B, T, C, NH);
    mm_forward(m, m->buf_b, 0, a->atty, PV_LAYER(l, PV_APW), PV_LAYER(l, PV_APB), n, C, C);
    ln_dst ln2 = {a->ln2, train ? a->ln2_mean : NULL, train ? a->ln2_rstd : NULL,
                  PV_LAYER(l, PV_LN2W)};
    residual_ln_forward(m, res2, x, m->buf_b, &ln2, n);
    void *g = a->fcg ? a->fcg : (void *)m->buf_a;   /* kept for the backward, or scratch */
    if (fused_gelu(m)) {
        /* c_fc and its GELU in one op: GELU of the unrounded sum.  Recompute (xo NULL)
         * too, so that the backward sees the forward's GELU output bit for bit (in
         * buf_a, where mlp_backward looks for it) */
        be->matmul_forward_gelu_lo(be, g, a->fch, a->ln2, PL(m, PV_LAYER(l, PV_FCW)), m->lo,
                                   PL(m, PV_LAYER(l, PV_FCB)), n, C, 4 * C);
        if (!xo)
            return;
    } else {
        mm_forward(m, a->fch, 1, a->ln2, PV_LAYER(l, PV_FCW), PV_LAYER(l, PV_FCB), n, C, 4 * C);
        if (!xo)
            return;
        gelu_forward(m, g, a->fch, N * 4 * C);
    }
    mm_forward(m, m->buf_b, 0, g, PV_LAYER(l, PV_FPW), PV_LAYER(l, PV_FPB), n, 4 * C, C);
    residual_ln_forward(m, xo, res2, m->buf_b, next, n);
}

/* The mean of the N per-row losses on the device, read back (a sync). */
static float mean_loss(llm_model *m, size_t N)
{
    m->be->to_host(m->be, m->host_losses, m->losses, N * sizeof(float));
    double s = 0.0;
    for (size_t i = 0; i < N; i++)
        s += m->host_losses[i];
    return (float)(s / (double)N);
}

/* llm_model_forward; with defer (and targets) the cross-entropy is left to the backward,
 * which computes it fused with its gradient (backward_ready 2). */
static int forward_pass(llm_model *m, const int32_t *inputs, const int32_t *targets, int B, int T,
                        float *loss, int defer, llm_status *st)
{
    const llm_model_config *c = &m->cfg;
    if (B < 1 || T < 1 || T > c->max_seq_len || (int64_t)B * T > (int64_t)1 << 30)
        return llm_err(st, LLM_EUSAGE, "model: batch B=%d T=%d out of range (1 <= T <= %d)", B, T,
                       c->max_seq_len);
    size_t N = (size_t)B * (size_t)T;
    int rc = check_ids(inputs, N, c->vocab_size, "inputs", st);
    if (rc || (targets && (rc = check_ids(targets, N, c->vocab_size, "targets", st))))
        return rc;
    /* Training layout when there are targets, or when it is already there. */
    if ((rc = alloc_acts(m, B, T, targets != NULL, st)))
        return rc;
    llm_backend *be = m->be;
    int L = c->n_layer, C = c->n_embd, Vp = c->padded_vocab, V = c->vocab_size;
    int n = (int)N, train = m->acts_train;
    m->backward_ready = 0;
    if (m->lo && m->lo_stale) {
        /* the parameters may have changed since the lo copy was made */
        be->cast_lo(be, m->params_lo, m->params, m->nparams, m->lo);
        m->lo_stale = 0;
    }
    be->to_device(be, m->d_inputs, inputs, N * sizeof(int32_t));
    if (targets)
        be->to_device(be, m->d_targets, targets, N * sizeof(int32_t));

    be->embed_forward(be, m->x[0], m->d_inputs, P(m, PV_WTE), P(m, PV_WPE), B, T, C);
    int slots = train && m->acts_recompute != LLM_RECOMPUTE_FULL;
    ln_dst first = ln1_dst(0, &m->layer[0], train);
    residual_ln_forward(m, NULL, m->x[0], NULL, &first, n);
    for (int l = 0; l < L; l++) {
        llm_layer_acts *a = &m->layer[slots ? l : 0];
        float *x = m->x[train ? l : 0], *xo = m->x[train ? l + 1 : 0];
        /* the layer's last residual is fused with the next layernorm: the next layer's
         * ln_1 (into its slot), ln_f after the last layer */
        ln_dst next = l + 1 < L ? ln1_dst(l + 1, &m->layer[slots ? l + 1 : 0], train)
                                : (ln_dst){m->lnf, train ? m->lnf_mean : NULL,
                                           train ? m->lnf_rstd : NULL, m->nviews - 2};
        layer_forward(m, l, a, x, train ? a->res2 : x, xo, &next, train, B, T);
    }
    mm_forward(m, m->logits, 1, m->lnf, PV_WTE, -1, n, C, Vp);
    /* a pass that may be followed by a backward: the embedding backward's grouping of
     * positions by token is made now, on the host, while the device runs what is queued */
    if (targets && train && be->embed_hint)
        be->embed_hint(be, m->d_inputs, inputs, N);
    m->logits_lo = m->lo;
    m->last_B = B;
    m->last_T = T;
    if (targets && defer) {
        m->backward_ready = 2;
    } else if (targets) {
        if (m->lo)
            be->xent_forward_lo(be, m->losses, m->lse, m->logits, m->d_targets, n, V, Vp, m->lo);
        else
            be->xent_forward(be, m->losses, m->lse, m->logits, m->d_targets, n, V, Vp);
        float l = mean_loss(m, N);
        if (loss)
            *loss = l;
        m->backward_ready = 1;
    } else {
        be->sync(be);
    }
    return LLM_OK;
}

int llm_model_forward(llm_model *m, const int32_t *inputs, const int32_t *targets, int B, int T,
                      float *loss, llm_status *st)
{
    return forward_pass(m, inputs, targets, B, T, loss, 0, st);
}

int llm_model_logits_to_host(const llm_model *m, size_t row, size_t nrows, float *out,
                             llm_status *st)
{
    size_t Vp = (size_t)m->cfg.padded_vocab;
    if (!m->logits || row > (size_t)m->last_B * m->last_T ||
        nrows > (size_t)m->last_B * m->last_T - row)
        return llm_err(st, LLM_EUSAGE, "model: logits rows [%zu, %zu) are not those of the last "
                       "forward (%d x %d)", row, row + nrows, m->last_B, m->last_T);
    llm_backend *be = m->be;
    if (!m->logits_lo) {
        be->to_host(be, out, (const float *)m->logits + row * Vp, nrows * Vp * sizeof(float));
        return LLM_OK;
    }
    /* lo logits: the bits go to the upper half of out and are widened in place from the
     * front (float i ends at byte 4i+4, the first unread bits start at 2k+2i+2 >= 4i+4
     * for i < k) */
    size_t k = nrows * Vp;
    uint16_t *bits = (uint16_t *)(out + k) - k;
    be->to_host(be, bits, (const uint16_t *)m->logits + row * Vp, k * sizeof(uint16_t));
    for (size_t i = 0; i < k; i++)
        out[i] = m->logits_lo == LLM_DT_BF16 ? llm_quant_bf16_to_f32(bits[i])
                                             : llm_quant_f16_to_f32(bits[i]);
    return LLM_OK;
}

void llm_model_set_grad_ready(llm_model *m, llm_model_grad_ready_fn fn, void *ctx)
{
    m->grad_ready = fn;
    m->grad_ready_ctx = fn ? ctx : NULL;
}

/* The gradients [lo, *top) are final: tell the hook (if armed); *top becomes lo. */
static int ready(llm_model *m, size_t lo, size_t *top, llm_status *st)
{
    size_t hi = *top;
    *top = lo;
    return m->grad_ready && hi > lo ? m->grad_ready(m->grad_ready_ctx, lo, hi, st) : LLM_OK;
}

/* Mixed precision: the residual stream's gradient dres rounded to lo, which the GEMMs of
 * the block below read, lives at dres_lo (in buf_a after the room of an (N,4C) lo
 * tensor: nothing between its making and its use writes there, recompute included).
 * With the backend's layernorm_backward_lo the layernorm backward that finishes dres
 * writes it in the same pass; else the block casts dres itself. */
static void *dres_lo(const llm_model *m, size_t N)
{
    return m->buf_a + fl(N * 4 * (size_t)m->cfg.n_embd, 1);
}

static int fused_ln_bwd(const llm_model *m)
{
    return m->lo && m->be->layernorm_backward_lo;
}

/* dres += the backward of the layernorm with weight view wv (bias view wv + 1) from
 * dout; dlo non-NULL when a block below reads dres in lo */
static void ln_backward(llm_model *m, void *dlo, int wv, const float *dout, const float *inp,
                        const float *mean, const float *rstd, int n)
{
    llm_backend *be = m->be;
    int C = m->cfg.n_embd;
    if (dlo && fused_ln_bwd(m))
        be->layernorm_backward_lo(be, m->dres, dlo, G(m, wv), G(m, wv + 1), dout, inp, P(m, wv),
                                  mean, rstd, n, C, m->lo);
    else
        be->layernorm_backward(be, m->dres, G(m, wv), G(m, wv + 1), dout, inp, P(m, wv), mean,
                               rstd, n, C);
}

/* The backward of layer l's MLP block and ln_2 (x_{l+1} = res2 + c_proj(gelu(c_fc(
 * ln_2(res2))))), dres += into the stream's gradient.  fp32: the backward ops accumulate
 * into zeroed scratch; mixed precision: dres rounded to lo for the GEMMs, which overwrite
 * their input gradients (lo where a lo op reads them next, fp32 for the layernorm). */
static void mlp_backward(llm_model *m, int l, llm_layer_acts *a, int n)
{
    llm_backend *be = m->be;
    int C = m->cfg.n_embd, lo = m->lo;
    size_t N = (size_t)n, fz = sizeof(float);
    float *A = m->buf_a, *Bf = m->buf_b, *dres = m->dres;
    /* lo: A holds the GELU output (N,4C) lo when it is not kept, then the cast dres
     * (N,C) lo at dlo, g32 the fp32 gradient of ln_2's output (N,C); Bf the (N,4C) lo
     * gradient of the GELU */
    void *dlo = dres_lo(m, N);
    float *g32 = lo ? (float *)dlo + fl(N * C, 1) : Bf;
    /* the GELU output: kept by the forward, or in A (full recompute with the fused
     * forward: layer_forward's recompute left it there, and for the last layer the
     * forward itself, the logits' backward keeping off A), or computed again into A
     * from the lo pre-activation (selective recompute: with the fused forward this
     * differs from the forward's GELU of the fp32 sum by the pre-activation's rounding) */
    void *g = a->fcg;
    if (!g) {
        if (!(fused_gelu(m) && m->acts_recompute == LLM_RECOMPUTE_FULL))
            gelu_forward(m, A, a->fch, N * 4 * C);
        g = A;
    }
    if (lo) {
        if (!fused_ln_bwd(m))
            be->cast_lo(be, dlo, dres, N * C, lo);
        if (be->matmul_backward_dgelu_lo)
            be->matmul_backward_dgelu_lo(be, Bf, G(m, PV_LAYER(l, PV_FPW)),
                                         G(m, PV_LAYER(l, PV_FPB)), dlo, g, a->fch,
                                         PL(m, PV_LAYER(l, PV_FPW)), lo, n, 4 * C, C);
        else {
            mm_backward(m, Bf, 1, PV_LAYER(l, PV_FPW), PV_LAYER(l, PV_FPB), dlo, g, n, 4 * C, C);
            be->gelu_backward_lo(be, Bf, a->fch, Bf, N * 4 * C, lo);
        }
    } else {
        be->zero(be, Bf, N * 4 * C * fz);
        mm_backward(m, Bf, 0, PV_LAYER(l, PV_FPW), PV_LAYER(l, PV_FPB), dres, g, n, 4 * C, C);
        be->zero(be, A, N * 4 * C * fz);   /* (fp32 keeps no GELU output: g was A) */
        be->gelu_backward(be, A, a->fch, Bf, N * 4 * C);
        be->zero(be, Bf, N * C * fz);
    }
    mm_backward(m, g32, 0, PV_LAYER(l, PV_FCW), PV_LAYER(l, PV_FCB), lo ? (void *)Bf : A, a->ln2,
                n, C, 4 * C);
    ln_backward(m, lo ? dlo : NULL, PV_LAYER(l, PV_LN2W), g32, a->res2, a->ln2_mean, a->ln2_rstd, n);
}

/* The backward of layer l's attention block and ln_1 (res2 = x_l + c_proj(attn(c_attn(
 * ln_1(x_l))))), as mlp_backward. */
static void attn_block_backward(llm_model *m, int l, llm_layer_acts *a, int B, int T)
{
    llm_backend *be = m->be;
    int C = m->cfg.n_embd, NH = m->cfg.n_head, lo = m->lo, n = B * T;
    size_t N = (size_t)n, fz = sizeof(float);
    float *A = m->buf_a, *Bf = m->buf_b, *dres = m->dres;
    int rec = m->acts_recompute;
    if (lo) {
        /* A: the attention output's gradient (N,C) lo, then dres cast at dlo; Bf: dqkv
         * (N,3C) lo; g32 as in mlp_backward */
        void *dlo = dres_lo(m, N);
        float *g32 = (float *)dlo + fl(N * C, 1);
        if (!fused_ln_bwd(m))
            be->cast_lo(be, dlo, dres, N * C, lo);
        mm_backward(m, A, 1, PV_LAYER(l, PV_APW), PV_LAYER(l, PV_APB), dlo, a->atty, n, C, C);
        be->attention_backward_lse(be, Bf, A, a->qkv, a->atty, a->att, B, T, C, NH, lo);
        mm_backward(m, g32, 0, PV_LAYER(l, PV_QKVW), PV_LAYER(l, PV_QKVB), Bf, a->ln1, n, C, 3 * C);
        A = g32;
    } else {
        be->zero(be, A, N * C * fz);
        mm_backward(m, A, 0, PV_LAYER(l, PV_APW), PV_LAYER(l, PV_APB), dres, a->atty, n, C, C);
        /* selective recompute: the probabilities of this layer into the shared buffer
         * (the output goes to scratch: atty is kept) */
        if (rec == LLM_RECOMPUTE_SELECTIVE && l != m->cfg.n_layer - 1)
            be->attention_forward(be, Bf, a->att, a->qkv, B, T, C, NH);
        be->zero(be, Bf, N * 3 * C * fz);
        be->attention_backward(be, Bf, A, a->qkv, a->att, B, T, C, NH);
        be->zero(be, A, N * C * fz);
        mm_backward(m, A, 0, PV_LAYER(l, PV_QKVW), PV_LAYER(l, PV_QKVB), Bf, a->ln1, n, C, 3 * C);
    }
    /* layer 0's stream gradient goes to the embeddings' backward, in fp32 only */
    ln_backward(m, lo && l > 0 ? dres_lo(m, N) : NULL, PV_LAYER(l, PV_LN1W), A, m->x[l],
                a->ln1_mean, a->ln1_rstd, n);
}

/* llm_model_backward; after a deferred forward (backward_ready 2) the loss and its
 * gradient come from one xent_fused and the mean loss goes to *loss. */
static int backward_pass(llm_model *m, float grad_scale, float *loss, llm_status *st)
{
    if (!m->backward_ready)
        return llm_err(st, LLM_EUSAGE, "model: backward needs a forward with targets first");
    int rc = llm_model__ensure_grads(m, st);
    if (rc)
        return rc;
    int fused = m->backward_ready == 2;
    m->backward_ready = 0;
    const llm_model_config *c = &m->cfg;
    llm_backend *be = m->be;
    int B = m->last_B, T = m->last_T, L = c->n_layer, C = c->n_embd;
    int Vp = c->padded_vocab, V = c->vocab_size, n = B * T;
    size_t N = (size_t)n, fz = sizeof(float);
    /* the logits' backward writes ln_f's input gradient to buf_b, not buf_a: under full
     * recompute with the fused GELU forward buf_a still holds the last layer's GELU
     * output for mlp_backward */
    float *A = m->buf_b, *dres = m->dres;

    /* d(mean loss)/d(loss_i) = 1/N, times the caller's accumulation scale and the loss
     * scale (1 unless fp16 training scales the gradients up past f16's underflow) */
    float gs = (float)((double)grad_scale * m->loss_scale);
    if (fused) {
        be->xent_fused(be, m->losses, m->logits, m->d_targets, gs / (float)n, n, V, Vp, m->lo);
        if (!m->lo)
            be->zero(be, A, N * C * fz);
    } else if (m->lo) {
        be->xent_backward_lo(be, m->logits, m->logits, m->lse, m->d_targets, gs / (float)n, n, V,
                             Vp, m->lo);
    } else {
        be->xent_backward(be, m->logits, m->logits, m->lse, m->d_targets, gs / (float)n, n, V, Vp);
        be->zero(be, A, N * C * fz);
    }
    mm_backward(m, A, 0, PV_WTE, -1, m->logits, m->lnf, n, C, Vp);
    be->zero(be, dres, N * C * fz);
    ln_backward(m, m->lo ? dres_lo(m, N) : NULL, m->nviews - 2, A, m->x[L], m->lnf_mean,
                m->lnf_rstd, n);
    /* the ranges below are final when reported: nothing later in the pass writes them
     * (see llm_model_set_grad_ready) */
    size_t top = m->nparams;
    if ((rc = ready(m, m->views[m->nviews - 2].offset, &top, st)))
        return rc;
    int rec = m->acts_recompute;
    for (int l = L - 1; l >= 0; l--) {
        llm_layer_acts *a = &m->layer[rec == LLM_RECOMPUTE_FULL ? 0 : l];
        /* full recompute: rerun the layer's forward into the shared slot (the last layer's
         * activations are still there from the forward) */
        if (rec == LLM_RECOMPUTE_FULL && l != L - 1) {
            ln_dst ln1 = ln1_dst(l, a, 1);
            residual_ln_forward(m, NULL, m->x[l], NULL, &ln1, n);
            layer_forward(m, l, a, m->x[l], a->res2, NULL, NULL, 1, B, T);
        }
        mlp_backward(m, l, a, n);
        attn_block_backward(m, l, a, B, T);
        if ((rc = ready(m, m->views[PV_LAYER(l, PV_LN1W)].offset, &top, st)))
            return rc;
    }
    be->embed_backward(be, G(m, PV_WTE), G(m, PV_WPE), dres, m->d_inputs, B, T, C);
    if ((rc = ready(m, 0, &top, st)))
        return rc;
    if (fused) {
        float l = mean_loss(m, N);   /* its read waits for the whole pass */
        if (loss)
            *loss = l;
    } else {
        be->sync(be);
    }
    return LLM_OK;
}

int llm_model_backward(llm_model *m, float grad_scale, llm_status *st)
{
    return backward_pass(m, grad_scale, NULL, st);
}

int llm_model_forward_backward(llm_model *m, const int32_t *inputs, const int32_t *targets,
                               int B, int T, float grad_scale, float *loss, llm_status *st)
{
    if (!targets)
        return llm_err(st, LLM_EUSAGE, "model: a training pass needs targets");
    int defer = m->be->xent_fused != NULL;
    int rc = forward_pass(m, inputs, targets, B, T, loss, defer, st);
    if (!rc)
        rc = backward_pass(m, grad_scale, loss, st);
    return rc;
}

int llm_model_set_recompute(llm_model *m, llm_recompute r, llm_status *st)
{
    if ((int)r < LLM_RECOMPUTE_NONE || (int)r > LLM_RECOMPUTE_FULL)
        return llm_err(st, LLM_EUSAGE, "model: recompute mode %d unknown", (int)r);
    m->recompute = r;
    return LLM_OK;
}
