/* precision.h — PROPOSED, NOT IMPLEMENTED: the mixed-precision extension of
 * kernels/backend.h (issue 8 "Precision": --precision fp32|bf16|fp16).
 *
 * Nothing includes or implements this yet; it records the design so the model, train and
 * CUDA work can converge on it.  It is additive: backend.h keeps every fp32 op as it is,
 * and gains one field at the END of struct llm_backend:
 *
 *     const struct llm_backend_mp *mp;   NULL when the backend has no mixed precision
 *
 * (a trailing field keeps every designated initializer and every existing caller valid).
 *
 * What lives in which dtype (the llm.c / PyTorch AMP split, fp32 where sums are long):
 *   fp32   master weights, gradients (accumulated across micro-batches), AdamW m and v,
 *          layernorm mean/rstd, losses, lse, the loss scale
 *   lo     (bf16 or fp16) the weight copy the GEMMs read, activations (embedding out,
 *          layernorm out, qkv, attention out, fc, gelu, residual stream), logits, and the
 *          activation gradients flowing backward (dX)
 * GEMMs: cuBLASLt with lo A/B, CUBLAS_COMPUTE_32F; forward writes lo (bias, and GELU via
 * CUBLASLT_EPILOGUE_GELU_AUX_BIAS, fused as epilogues); weight gradients are written in
 * fp32 with beta = 1 straight into the fp32 gradient buffer (cuBLASLt allows C/D fp32
 * with bf16/fp16 A/B), bias gradients through CUBLASLT_EPILOGUE_BGRADB or the
 * deterministic column sum.  Reductions inside kernels (layernorm, softmax, xent) read lo,
 * compute in fp32, write lo.  Attention softmax probabilities are kept in lo.
 *
 * fp16 adds dynamic loss scaling, which needs no new op: the trainer passes
 * dloss = scale / N to xent_backward, so every gradient is scaled; the global norm from
 * sum_squares (computed in double) is inf/NaN exactly when some gradient overflowed; then
 * the step is skipped (weights and moments untouched), scale /= 2, and a "loss_scale"
 * event goes to the metrics; otherwise adamw gets grad_scale = clip_factor / scale, and
 * after `train.loss_scale_window` (e.g. 1000) clean steps scale *= 2 (capped at 2^24).
 * The scale and the clean-step count are saved in the checkpoint's train: section.
 *
 * Tolerances in gpu_check for lo ops: 1e-2 relative (bf16), 2e-3 (fp16), against the same
 * fp64 reference fed with the lo-rounded inputs; 20 training steps within 2e-2 of fp32.
 */
#ifndef LLM_CUDA_PRECISION_H
#define LLM_CUDA_PRECISION_H

#include <stddef.h>
#include <stdint.h>

typedef enum { LLM_DT_F32 = 0, LLM_DT_BF16 = 1, LLM_DT_F16 = 2 } llm_dtype;

struct llm_backend;

/* Every "void *" tensor below has dtype lo; "float *" ones are fp32.  Shapes, "+=" and
 * aliasing rules as in backend.h. */
typedef struct llm_backend_mp {
    llm_dtype lo;   /* LLM_DT_BF16 or LLM_DT_F16 */

    /* dst(n) = src(n) converted (round to nearest even); either side any dtype. */
    void (*cast)(struct llm_backend *be, void *dst, llm_dtype dst_dt, const void *src,
                 llm_dtype src_dt, size_t n);

    void (*embed_forward)(struct llm_backend *be, void *out, const int32_t *inp,
                          const void *wte, const void *wpe, int B, int T, int C);
    void (*layernorm_forward)(struct llm_backend *be, void *out, float *mean, float *rstd,
                              const void *inp, const void *w, const void *b, int N, int C);
    /* out = inp @ w^T + bias; when pre != NULL, pre = that and out = gelu(pre) (fused
     * epilogue: the MLP's first GEMM). */
    void (*matmul_forward)(struct llm_backend *be, void *out, void *pre, const void *inp,
                           const void *w, const void *bias, int N, int C, int OC);
    void (*attention_forward)(struct llm_backend *be, void *out, void *att, const void *qkv,
                              int B, int T, int C, int NH);
    /* out = a + b, then (fused) layernorm of out into ln_out/mean/rstd when ln_out != NULL */
    void (*residual_layernorm_forward)(struct llm_backend *be, void *out, const void *a,
                                       const void *b, void *ln_out, float *mean, float *rstd,
                                       const void *w, const void *bias, int N, int C);
    void (*xent_forward)(struct llm_backend *be, float *losses, float *lse, const void *logits,
                         const int32_t *targets, int N, int V, int Vp);

    void (*xent_backward)(struct llm_backend *be, void *dlogits, const void *logits,
                          const float *lse, const int32_t *targets, float dloss,
                          int N, int V, int Vp);
    /* dinp (lo) +=, dw/dbias (fp32) += */
    void (*matmul_backward)(struct llm_backend *be, void *dinp, float *dw, float *dbias,
                            const void *dout, const void *inp, const void *w,
                            int N, int C, int OC);
    void (*layernorm_backward)(struct llm_backend *be, void *dinp, float *dw, float *db,
                               const void *dout, const void *inp, const void *w,
                               const float *mean, const float *rstd, int N, int C);
    void (*attention_backward)(struct llm_backend *be, void *dqkv, const void *dout,
                               const void *qkv, const void *att, int B, int T, int C, int NH);
    void (*gelu_backward)(struct llm_backend *be, void *dinp, const void *pre,
                          const void *dout, size_t n);
    void (*accumulate)(struct llm_backend *be, void *dst, const void *src, size_t n);
    void (*embed_backward)(struct llm_backend *be, float *dwte, float *dwpe, const void *dout,
                           const int32_t *inp, int B, int T, int C);

    /* AdamW on the fp32 master p (as backend.h's adamw), then p_lo = lo(p). */
    void (*adamw)(struct llm_backend *be, float *p, void *p_lo, const float *grad, float *m,
                  float *v, size_t n, float lr, float b1, float b2, float eps, float wd, int t,
                  float grad_scale);
} llm_backend_mp;

#endif
