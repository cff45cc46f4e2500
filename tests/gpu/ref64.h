/* ref64.h — plain double-precision versions of every kernels/backend.h op, written from
 * the contract's comments alone, as the independent reference of gpu_check.  Inputs are
 * the fp32 values the backends see; outputs are double.  "+=" outputs are accumulated
 * into (initialised by the caller), as in the contract. */
#ifndef LLM_GPU_REF64_H
#define LLM_GPU_REF64_H

#include <stddef.h>
#include <stdint.h>

void r64_embed_forward(double *out, const int32_t *inp, const float *wte, const float *wpe,
                       int B, int T, int C);
void r64_embed_backward(double *dwte, double *dwpe, const float *dout, const int32_t *inp,
                        int B, int T, int C);
void r64_layernorm_forward(double *out, double *mean, double *rstd, const float *inp,
                           const float *w, const float *b, int N, int C);
void r64_layernorm_backward(double *dinp, double *dw, double *db, const float *dout,
                            const float *inp, const float *w, const float *mean,
                            const float *rstd, int N, int C);
void r64_matmul_forward(double *out, const float *inp, const float *w, const float *bias,
                        int N, int C, int OC);
void r64_matmul_backward(double *dinp, double *dw, double *dbias, const float *dout,
                         const float *inp, const float *w, int N, int C, int OC);
void r64_attention_forward(double *out, double *att, const float *qkv, int B, int T, int C, int NH);
void r64_attention_backward(double *dqkv, const float *dout, const float *qkv, const float *att,
                            int B, int T, int C, int NH);
/* GPT-2's GELU (tanh form) of one double, and its derivative */
double r64_gelu1(double x);
double r64_gelu_grad1(double x);
void r64_gelu_forward(double *out, const float *inp, size_t n);
void r64_gelu_backward(double *dinp, const float *inp, const float *dout, size_t n);
void r64_xent_forward(double *losses, double *lse, const float *logits, const int32_t *targets,
                      int N, int V, int Vp);
void r64_xent_backward(double *dlogits, const float *logits, const float *lse,
                       const int32_t *targets, float dloss, int N, int V, int Vp);
void r64_adamw(double *p, double *m, double *v, const float *p0, const float *grad,
               const float *m0, const float *v0, size_t n, float lr, float b1, float b2,
               float eps, float wd, int t, float grad_scale);
double r64_sum_squares(const float *g, size_t n);

/* attention_forward_lse on operands already rounded to lo, qr (B,T,3C): lse (B,NH,T) in
 * double; out (B,T,C) = sum_s lo(exp(S - lse)) v_s (the contract's form, before the
 * output's own rounding to lo) and outs the sum of |terms| of each output (the scale of
 * its rounding errors).  lo: LLM_DT_BF16/F16. */
void r64_attention_lse_forward(double *out, double *outs, double *lse, const float *qr,
                               int B, int T, int C, int NH, int lo);
/* attention_backward_lse from the out and lse given to the backend (out's values: the lo
 * tensor's), dout's values (rounded to lo here, idempotent on lo values): the gradient
 * terms added to r (B,T,3C) and their |terms| to rs (both initialised by the caller:
 * zero for the overwritten lo dqkv, before its own rounding); rs of dq and dk also
 * carries the allowance for fp32 sums of the cancelling dP - D (see ref64.c). */
void r64_attention_lse_backward(double *r, double *rs, const float *qr, const float *dout,
                                const float *out, const float *lse, int B, int T, int C,
                                int NH, int lo);
/* *max and *mean over i of |a[i] - r[i]| / s[i] (a non-finite a[i] counts as infinite) */
void r64_scaled_err(const float *a, const double *r, const double *s, size_t n, double *max,
                    double *mean);
/* The same for a lo output a (its values) against the unrounded r: each |a[i] - r[i]|
 * less one rounding's allowance u |r[i]| (and 2^-25 for fp16 denormals), not below 0.
 * lo: LLM_DT_BF16/F16. */
void r64_scaled_err_lo(const float *a, const double *r, const double *s, size_t n, int lo,
                       double *max, double *mean);
/* The bounds on r64_scaled_err of the attention_*_lse results against the references
 * above.  u = 2^-8 (bf16) or 2^-11 (f16), the unit roundoff.  max 2u + 2e-5: a term's
 * lo rounding may land on the other side of the reference's (the fused forward rounds
 * partial probabilities exp(S - m), the reference exp(S - lse); elsewhere an fp32 value
 * and the double one may straddle a rounding boundary), one spacing = 2u of the term.
 * mean: u/2 for the fused forward's out (independent roundings on both sides average
 * below it; a wrong rescale or mask is off by O(1)), else 2e-5 (the roundings are the
 * reference's but for rare flips; unrounded operands would miss it), plus four flips'
 * worth (8u/n) for a result of few elements n.  fused_out: 1 for the out of a kernel that
 * rounds partial probabilities. */
void r64_lse_bounds(int lo, int fused_out, size_t n, double *max, double *mean);

#endif
