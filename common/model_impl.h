/* model_impl.h — private to common/model*.c: the llm_model struct and helpers shared by
 * the layout/optimizer code (model.c), the passes (model_pass.c) and checkpoints
 * (model_io.c).  Nothing outside common/model*.c includes it. */
#ifndef LLM_MODEL_IMPL_H
#define LLM_MODEL_IMPL_H

#include "common/model.h"

/* Per-layer parameter views, in the order of common/model.h. */
enum {
    PV_LN1W, PV_LN1B, PV_QKVW, PV_QKVB, PV_APW, PV_APB, PV_LN2W, PV_LN2B,
    PV_FCW, PV_FCB, PV_FPW, PV_FPB, PV_PER_LAYER
};
#define PV_WTE 0
#define PV_WPE 1
#define PV_LAYER(l, k) (2 + (l) * PV_PER_LAYER + (k))

/* What the backward pass needs of one layer (training), or the single reused slot of
 * the inference layout.  Only what the backward reads is kept: the layer input x and
 * the mid-block residual res2 (layernorm inputs), the layernorm outputs and statistics
 * (matmul inputs), qkv and the attention probabilities, the attention output (input of
 * c_proj) and the fc pre-activation; the GELU output is recomputed in the backward,
 * except under mixed precision without recompute, which keeps it (lo, half the size).
 * The void pointers are lo tensors under mixed precision (m->lo: 2 bytes an element),
 * fp32 otherwise. */
typedef struct {
    void *ln1;                           /* (N,C) */
    float *ln1_mean, *ln1_rstd;          /* (N), (N) */
    void *qkv;                           /* (N,3C) */
    float *att;                          /* (B,NH,T,T) probabilities; (B,NH,T) lse under
                                            mixed precision (the lse attention) */
    void *atty;                          /* (N,C) */
    float *res2;                         /* (N,C) */
    void *ln2;                           /* (N,C) */
    float *ln2_mean, *ln2_rstd;          /* (N), (N) */
    void *fch;                           /* (N,4C) */
    void *fcg;                           /* (N,4C) its GELU: kept only under mixed precision
                                            without recompute (NULL: recomputed) */
} llm_layer_acts;

struct llm_model {
    llm_model_config cfg;
    llm_backend *be;
    int nviews;
    llm_param_view *views;
    size_t nparams;
    float *params, *grads, *m, *v;      /* backend memory; grads/m/v lazily */
    size_t opt_lo, opt_hi;               /* m, v hold elements [opt_lo, opt_hi) of the layout:
                                            m[i - opt_lo] (ZeRO-1 shard; else 0, nparams) */
    llm_model_opt_saver opt_saver;       /* save(): the moments when they are sharded */
    void *opt_saver_ctx;

    /* activations: one backend block, sized for cap_n rows and cap_att attention floats */
    float *acts;
    size_t acts_floats;
    size_t cap_n, cap_att;
    int acts_train;                      /* 1: per-layer slots kept for the backward */
    int recompute;                       /* llm_recompute wanted (model.h) */
    int acts_recompute;                  /* llm_recompute the training layout was made for */
    int acts_lo;                         /* the lo the layout was made for (0: fp32) */
    float **x;                           /* training: L+1 residual streams; inference: 1 */
    llm_layer_acts *layer;               /* training: L slots; inference: 1 */
    void *lnf;                           /* (N,C), lo under mixed precision */
    float *lnf_mean, *lnf_rstd;          /* (N), (N) */
    void *logits;                        /* (N,Vp), lo under mixed precision; dlogits in
                                            place in the backward */
    int logits_lo;                       /* the dtype of the last forward's logits */
    float *losses, *lse;                 /* (N) */
    float *buf_a, *buf_b;                /* (N,4C) floats of scratch each */
    float *dres;                         /* (N,C) residual-stream gradient (training) */
    int32_t *d_inputs, *d_targets;       /* (N) backend copies */
    float *host_losses;                  /* (N) host */

    int last_B, last_T;
    int backward_ready;                  /* the last forward had targets, no backward yet:
                                          * 1, or 2 when it left the loss to the backward */

    float *host_copy;                    /* save(): host copies for device backends */

    /* mixed precision (llm_model_set_precision): lo is 0 (fp32) or LLM_DT_BF16/F16;
     * params_lo holds the parameters cast to lo (same offsets, 2 bytes each), remade
     * before a forward when lo_stale (the parameters may have changed) */
    int lo, lo_stale;
    void *params_lo;
    double loss_scale;                   /* d(loss) multiplier of the backward; 1 */
    llm_model_grad_ready_fn grad_ready;  /* llm_model_set_grad_ready; NULL: disarmed */
    void *grad_ready_ctx;
};

/* Layout/validation shared by model.c and model_io.c. */
int llm_model__validate(llm_model_config *cfg, llm_status *st);
/* The views of cfg (validated) in layout order; *out malloc'd.  -1 when out of memory. */
int llm_model__views(const llm_model_config *cfg, llm_param_view **out, int *nviews);
int llm_model__is_host(const llm_backend *be);
int llm_model__ensure_grads(llm_model *m, llm_status *st);
/* The moments, (opt_hi - opt_lo) floats each. */
int llm_model__ensure_moments(llm_model *m, llm_status *st);
/* 1 when the moments cover only part of the layout (llm_model_set_opt_range). */
int llm_model__opt_sharded(const llm_model *m);
/* AdamW (hp, step t, gradients times scale) on the parameters [lo, hi), the moments
 * holding [lo, hi) only: the runs of consecutive views with equal decay cut to the
 * range, in one adamw_segs call that also writes plo (the lo copy, dtype m->lo; NULL:
 * none) when the backend has it, else one adamw call a run (plo untouched).  *lo_done:
 * 1 when plo now holds the whole range's rounded parameters.  LLM_ENOMEM, or 0. */
int llm_model__adamw_range(llm_model *m, const llm_adamw_config *hp, int t, float scale,
                           size_t lo, size_t hi, void *plo, int *lo_done, llm_status *st);

#endif
