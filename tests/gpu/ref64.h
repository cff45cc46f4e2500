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

#endif
