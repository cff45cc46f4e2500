/* model.h — GPT-2 (arch "gpt2") driven through the kernel interface.
 *
 * Parameters live in one contiguous backend buffer; named views over it are the .llmk
 * tensor names (below).  Gradients and the AdamW moments m, v use the same layout, so a
 * view's offset indexes all four buffers.
 *
 * Tensor names and shapes (L layers, C = n_embd, Vp = padded vocab, maxT = max_seq_len);
 * weights are (out, in) row-major, i.e. y = x @ W^T + b:
 *   wte (Vp,C)  wpe (maxT,C)
 *   h.{l}.ln_1.weight (C)      h.{l}.ln_1.bias (C)
 *   h.{l}.attn.c_attn.weight (3C,C)   h.{l}.attn.c_attn.bias (3C)
 *   h.{l}.attn.c_proj.weight (C,C)    h.{l}.attn.c_proj.bias (C)
 *   h.{l}.ln_2.weight (C)      h.{l}.ln_2.bias (C)
 *   h.{l}.mlp.c_fc.weight (4C,C)      h.{l}.mlp.c_fc.bias (4C)
 *   h.{l}.mlp.c_proj.weight (C,4C)    h.{l}.mlp.c_proj.bias (C)
 *   ln_f.weight (C)  ln_f.bias (C)
 * in that order in the buffer (layer by layer).  The output projection is tied to wte.
 * Optimizer moments are stored in checkpoints as "opt.m.NAME" and "opt.v.NAME".
 */
#ifndef LLM_MODEL_H
#define LLM_MODEL_H

#include <stddef.h>
#include <stdint.h>

#include "common/ckpt.h"
#include "common/status.h"
#include "common/tree.h"
#include "kernels/backend.h"

typedef struct {
    char arch[16];       /* "gpt2" */
    int n_layer, n_head, n_embd;
    int vocab_size;      /* V */
    int padded_vocab;    /* Vp: V rounded up to a multiple of 128 (derived) */
    int max_seq_len;     /* maxT */
} llm_model_config;

/* Read and validate a model: section (keys arch, n_layer, n_head, n_embd, vocab_size,
 * max_seq_len; padded_vocab_size optional and checked).  Unknown keys, wrong types and
 * out-of-range values are LLM_EDATA with the key (and line when known) named. */
int llm_model_config_parse(const llm_node *section, llm_model_config *cfg, llm_status *st);
/* The model: section for cfg (includes padded_vocab_size). NULL when out of memory. */
llm_node *llm_model_config_node(const llm_model_config *cfg);
/* Parameter count (padded wte included). */
size_t llm_model_num_params(const llm_model_config *cfg);

/* LLM_OK when tensor t, stored under the parameter name `name` (model order names
 * above), has the shape cfg's layout gives that parameter, whatever its dtype; wte may
 * hold any number of rows from vocab_size up (exports write the first vocab_size).
 * Else LLM_EDATA naming the tensor and both shapes (LLM_EUSAGE for a name that is not
 * a parameter, LLM_ENOMEM). */
int llm_model_check_shape(const llm_model_config *cfg, const char *name, const llm_tensor *t,
                          llm_status *st);

typedef struct {
    char name[64];
    size_t offset;        /* in floats, into params/grads/m/v */
    size_t numel;
    int ndim;
    int64_t shape[2];
    int decay;            /* 1: weight decay applies (matmul weights and embeddings) */
} llm_param_view;

typedef struct {
    float lr, beta1, beta2, eps, weight_decay;
    float grad_clip;      /* clip the global norm to this; <= 0: no clipping */
} llm_adamw_config;

typedef struct llm_model llm_model;   /* opaque; fields via accessors below */

/* Create a model on backend be (not owned) with zeroed parameters.  Grads, moments and
 * activations are allocated lazily (training only needs them). */
int  llm_model_new(llm_model **out, const llm_model_config *cfg, llm_backend *be, llm_status *st);
void llm_model_free(llm_model *m);

const llm_model_config *llm_model_cfg(const llm_model *m);
int llm_model_nviews(const llm_model *m);
const llm_param_view *llm_model_view(const llm_model *m, int i);
const llm_param_view *llm_model_find_view(const llm_model *m, const char *name);
float *llm_model_params(llm_model *m);    /* backend memory (see llm_model_params_changed) */
/* The gradient buffer (same layout as the parameters; backend memory), NULL before the
 * first zero_grad/backward.  For all-reduce across ranks and for tests. */
float *llm_model_grads(llm_model *m);

/* GPT-2 initialisation: N(0, 0.02) for weights and embeddings, residual projections
 * (attn.c_proj, mlp.c_proj weights) N(0, 0.02/sqrt(2 L)), biases 0, layernorm w 1 b 0,
 * padded wte rows 0.  Deterministic for a seed on every machine (own PRNG + Box-Muller). */
void llm_model_init_gpt2(llm_model *m, uint64_t seed);

/* Load parameters (and, when with_optimizer and present, the AdamW moments: only the
 * model's range of them, llm_model_set_opt_range) from an open checkpoint.  Tensors must
 * exist with the right dtype and shape (f32; quantized dtypes are for llm-infer).  Errors
 * name the tensor. */
int llm_model_load(llm_model *m, const llm_ckpt *ck, int with_optimizer, llm_status *st);

/* Add the parameters (and with_optimizer: the moments) to a writer.  The data pointers
 * stay valid while m lives and is not updated (host copies are made for device backends).
 * Moments held for part of the layout only come from the saver (llm_model_set_opt_saver);
 * without one that is LLM_EUSAGE. */
int llm_model_save(llm_model *m, llm_ckpt_writer *w, int with_optimizer, llm_status *st);

/* Forward pass on inputs (B,T) (host int32 ids < V).  targets (B,T) or NULL.  With
 * targets, the mean loss is returned in *loss (else *loss is untouched; loss may be NULL).
 * T <= max_seq_len.  Activations are (re)allocated for B*T when it grows. */
int llm_model_forward(llm_model *m, const int32_t *inputs, const int32_t *targets, int B, int T,
                      float *loss, llm_status *st);

/* Rows [row, row+nrows) of the logits (B*T rows of Vp) of the last forward, fp32,
 * copied to host memory out (nrows*Vp floats).  Under mixed precision the logits are kept
 * in lo (bf16/fp16) and widened here.  Valid until the next forward or backward (the
 * backward writes the logits' gradient over them).  LLM_EUSAGE for rows outside the last
 * forward. */
int llm_model_logits_to_host(const llm_model *m, size_t row, size_t nrows, float *out,
                             llm_status *st);

/* Zero the gradient buffer (allocating it on first use). */
int llm_model_zero_grad(llm_model *m, llm_status *st);

/* Backward pass of the last forward (which must have had targets); gradients are
 * ADDED to the gradient buffer, with d(mean loss) scaled by grad_scale (use
 * 1/accumulation_steps for gradient accumulation). */
int llm_model_backward(llm_model *m, float grad_scale, llm_status *st);

/* llm_model_forward with targets then llm_model_backward(grad_scale), the same
 * gradients and *loss (may be NULL), in one call so that the classifier's loss and its
 * gradient can be computed in one pass over the logits (the backend's xent_fused: one
 * read of the (B*T, Vp) logits fewer, and no wait for the loss between the passes).
 * Without xent_fused the two calls.  Results are bit for bit those of the two calls. */
int llm_model_forward_backward(llm_model *m, const int32_t *inputs, const int32_t *targets,
                               int B, int T, float grad_scale, float *loss, llm_status *st);

/* Gradient-ready hook (data-parallel overlap, common/train_dist.c): while armed, each
 * llm_model_backward calls fn(ctx, lo, hi, st) as soon as the elements [lo, hi) of the
 * gradient buffer (layout offsets, in floats) are final for this backward, i.e. no later
 * op of the pass writes them.  The calls are deterministic and cover [0, nparams)
 * exactly once, from the top of the layout down, each range ending where the previous
 * one began:
 *   [ln_f.weight, nparams)           after the final layernorm's backward
 *   [h.{l}.ln_1.weight, next)        after layer l's backward, l = L-1 .. 0
 *   [0, h.0.ln_1.weight)             wte and wpe, after the embedding backward (wte also
 *                                    takes the tied output projection's gradient first)
 * so L + 2 calls per backward.  On a host backend the range is computed when fn runs; on
 * a device backend the ops that compute it have been enqueued on the backend's stream
 * (a consumer orders itself after that stream: an event, or be->sync).  A non-zero
 * return (with st set) ends the backward with that code.  Arm it only for the backward
 * whose gradients are to be sent (the last micro-batch of an accumulation); fn NULL
 * disarms it.  ctx is borrowed. */
typedef int (*llm_model_grad_ready_fn)(void *ctx, size_t lo, size_t hi, llm_status *st);
void llm_model_set_grad_ready(llm_model *m, llm_model_grad_ready_fn fn, void *ctx);

/* Global L2 norm of the gradient buffer. */
double llm_model_grad_norm(llm_model *m);

/* One AdamW step t (>= 1) with clipping to hp->grad_clip.  No weight decay on biases and
 * layernorm parameters.  When the gradient norm is not finite the update is skipped
 * (weights and moments unchanged) and *skipped = 1.  *grad_norm gets the norm before
 * clipping.  Either out-pointer may be NULL.  LLM_EUSAGE when the model holds the
 * moments of part of the layout only (llm_model_set_opt_range). */
int llm_model_update(llm_model *m, const llm_adamw_config *hp, int t, double *grad_norm,
                     int *skipped, llm_status *st);

/* ---- mixed precision (llm-train --precision) ----
 * The passes run on the backend's lo ops (kernels/backend.h, "mixed precision"): every
 * matmul (the tied wte output projection included) and the attention's products take
 * bf16 or f16 operands and accumulate in fp32, and the activations are kept in that
 * dtype: the layernorm outputs, q|k|v, the attention output, the fc pre-activation and
 * its GELU, the logits, and the gradients that flow into GEMMs.  fp32: the parameters
 * (the master weights the optimizer updates; a lo copy of the whole buffer, same
 * offsets, is cast from them before a forward whenever they may have changed: after an
 * update, a load, an init, llm_model_params or llm_model_params_changed), the
 * gradients, the moments, the residual stream and its gradient, the layernorm
 * statistics, the GEMM outputs that feed the residual stream or a layernorm backward.
 * The attention keeps each row's log-sum-exp instead of its probabilities; without
 * recompute the layers keep the GELU output too (lo), which selective recompute drops
 * (the backward computes it again, as fp32 training always does). */

/* dt: LLM_DT_F32 (the default; frees the lo copy), LLM_DT_BF16 or LLM_DT_F16.
 * Errors: LLM_EUSAGE for another dtype; LLM_ENODEV when the backend lacks the
 * mixed-precision ops (the message names the backend and the precision); LLM_ENOMEM. */
int llm_model_set_precision(llm_model *m, llm_dtype dt, llm_status *st);
/* LLM_DT_F32, LLM_DT_BF16 or LLM_DT_F16. */
llm_dtype llm_model_precision(const llm_model *m);

/* The loss scale (default 1): llm_model_backward multiplies d(loss) by it, and
 * llm_model_update divides the gradients by it again: the norm it reports and clips with
 * is the true one, AdamW gets grad_scale = clip factor / scale.  Dynamic loss scaling
 * for fp16 (common/train.c) changes it between steps.  Errors: LLM_EUSAGE unless scale
 * is finite and > 0. */
int llm_model_set_loss_scale(llm_model *m, double scale, llm_status *st);
double llm_model_loss_scale(const llm_model *m);

/* The parameters were written through a pointer obtained earlier (e.g. a collective on
 * the buffer): the lo copy is remade before the next forward.  llm_model_params itself
 * marks them so, since its caller may write. */
void llm_model_params_changed(llm_model *m);

/* ZeRO-1: keep the optimizer state (the AdamW moments m, v) only for elements [lo, hi)
 * of the flat parameter layout, e.g. this rank's llm_dist_shard; by default the model
 * holds all of [0, nparams).  Call before the moments exist (before the first update, or
 * a load with the optimizer); afterwards only the same range is accepted.  With part of
 * the layout: the moments take (hi - lo) floats each; llm_model_load reads only that
 * range of a checkpoint's moments; llm_model_update is refused (the caller updates its
 * range: common/train_dist.c); llm_model_save with the optimizer needs a saver (below).
 * Errors: LLM_EUSAGE (a range outside the layout, or moments already allocated for
 * another range). */
int llm_model_set_opt_range(llm_model *m, size_t lo, size_t hi, llm_status *st);
/* The range set above ([0, nparams) by default). */
void llm_model_opt_range(const llm_model *m, size_t *lo, size_t *hi);

/* How llm_model_save gets the whole moments of a model that holds only a range of them:
 * saver(ctx, w, st) adds every "opt.m.NAME" and then every "opt.v.NAME" tensor (view
 * order) to w, e.g. as llm_ckpt_add_source tensors gathered from the other ranks while
 * the file is written.  fn NULL removes it.  ctx is borrowed. */
typedef int (*llm_model_opt_saver)(void *ctx, llm_ckpt_writer *w, llm_status *st);
void llm_model_set_opt_saver(llm_model *m, llm_model_opt_saver fn, void *ctx);

/* ---- activation recompute (train.recompute) ----
 * none       every layer keeps what its backward reads (model_impl.h, llm_layer_acts)
 * selective  the attention probabilities (B,NH,T,T) are kept for one layer only and
 *            recomputed from the kept qkv in the backward (one attention forward per
 *            layer more); under mixed precision (no probabilities kept) the GELU
 *            output is dropped instead and recomputed (one GELU per layer more)
 * full       only the L+1 residual streams are kept; each layer's forward is rerun
 *            from its input stream into one shared layer slot in the backward (one
 *            layer forward per layer more)
 * The gradients are the same as without recompute (the same kernels on the same inputs). */
typedef enum { LLM_RECOMPUTE_NONE, LLM_RECOMPUTE_SELECTIVE, LLM_RECOMPUTE_FULL } llm_recompute;
/* Errors: LLM_EUSAGE for a value outside the enum. Takes effect at the next forward. */
int llm_model_set_recompute(llm_model *m, llm_recompute r, llm_status *st);

/* Bytes of backend memory held (params, grads, moments, activations) for reporting. */
size_t llm_model_bytes(const llm_model *m);

#endif
