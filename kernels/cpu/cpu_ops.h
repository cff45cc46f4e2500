/* cpu_ops.h — internal to kernels/cpu: the CPU backend context and the op functions the
 * "cpu-ref" (ref_*.c) and "cpu" (fast_*.c) backends are filled with.  Signatures are
 * exactly those of the function pointers in kernels/backend.h; see there for shapes. */
#ifndef LLM_CPU_OPS_H
#define LLM_CPU_OPS_H

#include <omp.h>

#include "kernels/backend.h"

typedef struct {
    int threads;      /* OpenMP threads per parallel region (num_threads clause) */
    int avx2;         /* the CPU has AVX2 and FMA: take the vectorised paths */
    float *scratch;   /* grow-only work space (a backend is used by one thread at a time) */
    size_t scratch_n; /* its size in floats */
    int gemm_omp;     /* 1: GEMMs split over our OpenMP threads, OpenBLAS at 1 thread;
                       * 0: one OpenBLAS call with be->threads threads (LLM_CPU_GEMM) */
    size_t lo_chunk;  /* lo ops (lo_acts.c): floats of widened activations held at
                       * once; rows are done in chunks that fit */
    float *lo_scratch;   /* their grow-only work space (llm_cpu_lo_scratch) */
    size_t lo_scratch_n; /* its size in floats */
} llm_cpu_ctx;

static inline int llm_cpu_avx2(const llm_backend *be)
{
    return ((const llm_cpu_ctx *)be->ctx)->avx2;
}

static inline int llm_cpu_threads(const llm_backend *be)
{
    return ((const llm_cpu_ctx *)be->ctx)->threads;
}

/* At least n floats of scratch owned by the backend, or NULL when out of memory. */
float *llm_cpu_scratch(llm_backend *be, size_t n);

/* C(M,N) = alpha op(A) op(B) + beta C, row-major, op = transpose when ta/tb.  Called
 * outside OpenMP regions; it keeps BLAS threads x OpenMP threads <= be->threads either by
 * splitting C across be->threads OpenMP threads that each call a 1-thread OpenBLAS
 * (gemm_omp) or by one OpenBLAS call on be->threads threads. */
void llm_cpu_gemm(llm_backend *be, int ta, int tb, int M, int N, int K, float alpha,
                  const float *A, int lda, const float *B, int ldb, float beta, float *C, int ldc);

/* Set OpenBLAS's thread count (process-wide in OpenBLAS; set before every use). */
void llm_cpu_blas_threads(int n);

/* [*lo, *hi): part `part` of `parts` of the range [0, n), contiguous and in order;
 * inner boundaries are multiples of 16 (one cache line of floats: no false sharing). */
static inline void llm_cpu_split(size_t n, int part, int parts, size_t *lo, size_t *hi)
{
    *lo = part == 0 ? 0 : (n * (size_t)part / (size_t)parts) & ~(size_t)15;
    *hi = part == parts - 1 ? n : (n * (size_t)(part + 1) / (size_t)parts) & ~(size_t)15;
}

#define LLM_CPU_OPS(P)                                                                        \
    void P##embed_forward(llm_backend *be, float *out, const int32_t *inp, const float *wte,  \
                          const float *wpe, int B, int T, int C);                             \
    void P##layernorm_forward(llm_backend *be, float *out, float *mean, float *rstd,          \
                              const float *inp, const float *w, const float *b, int N, int C); \
    void P##matmul_forward(llm_backend *be, float *out, const float *inp, const float *w,     \
                           const float *bias, int N, int C, int OC);                          \
    void P##attention_forward(llm_backend *be, float *out, float *att, const float *qkv,      \
                              int B, int T, int C, int NH);                                   \
    void P##gelu_forward(llm_backend *be, float *out, const float *inp, size_t n);            \
    void P##residual_forward(llm_backend *be, float *out, const float *a, const float *b,     \
                             size_t n);                                                       \
    void P##residual_layernorm_forward(llm_backend *be, float *res, float *out, float *mean,  \
                                       float *rstd, const float *a, const float *b,           \
                                       const float *w, const float *bias, int N, int C);      \
    void P##xent_forward(llm_backend *be, float *losses, float *lse, const float *logits,     \
                         const int32_t *targets, int N, int V, int Vp);                       \
    void P##embed_backward(llm_backend *be, float *dwte, float *dwpe, const float *dout,      \
                           const int32_t *inp, int B, int T, int C);                          \
    void P##layernorm_backward(llm_backend *be, float *dinp, float *dw, float *db,            \
                               const float *dout, const float *inp, const float *w,           \
                               const float *mean, const float *rstd, int N, int C);           \
    void P##matmul_backward(llm_backend *be, float *dinp, float *dw, float *dbias,            \
                            const float *dout, const float *inp, const float *w,              \
                            int N, int C, int OC);                                            \
    void P##attention_backward(llm_backend *be, float *dqkv, const float *dout,               \
                               const float *qkv, const float *att, int B, int T, int C,       \
                               int NH);                                                       \
    void P##gelu_backward(llm_backend *be, float *dinp, const float *inp, const float *dout,  \
                          size_t n);                                                          \
    void P##accumulate(llm_backend *be, float *dst, const float *src, size_t n);              \
    void P##xent_backward(llm_backend *be, float *dlogits, const float *logits,               \
                          const float *lse, const int32_t *targets, float dloss, int N,       \
                          int V, int Vp);                                                     \
    double P##sum_squares(llm_backend *be, const float *g, size_t n);                         \
    void P##adamw(llm_backend *be, float *p, const float *grad, float *m, float *v, size_t n, \
                  float lr, float b1, float b2, float eps, float wd, int t, float grad_scale);

LLM_CPU_OPS(llm_ref_)
LLM_CPU_OPS(llm_fast_)

/* Mixed-precision ops; lo is LLM_QK_BF16 or LLM_QK_F16 (quant_kern.h; equal to the
 * llm_dtype values).  cast_lo: ref_mixed.c, fast_mixed.c.  attention_*_lse: lo_acts.c,
 * on the backend's attention_*_lse32 kernels (ref_forward.c / ref_backward.c,
 * fast_attention.c): the lse attention on fp32-stored q|k|v, dout, out that rounds its
 * operands to lo itself and accumulates into fp32 dqkv (+=). */
#define LLM_CPU_LO_OPS(P)                                                                     \
    void P##cast_lo(llm_backend *be, void *dst, const float *src, size_t n, int lo);          \
    void P##attention_forward_lse(llm_backend *be, void *out, float *lse, const void *qkv,    \
                                  int B, int T, int C, int NH, int lo);                       \
    void P##attention_backward_lse(llm_backend *be, void *dqkv, const void *dout,             \
                                   const void *qkv, const void *out, const float *lse,        \
                                   int B, int T, int C, int NH, int lo);                      \
    void P##attention_forward_lse32(llm_backend *be, float *out, float *lse, const float *qkv, \
                                    int B, int T, int C, int NH, int lo);                     \
    void P##attention_backward_lse32(llm_backend *be, float *dqkv, const float *dout,         \
                                     const float *qkv, const float *out, const float *lse,    \
                                     int B, int T, int C, int NH, int lo);

LLM_CPU_LO_OPS(llm_ref_)
LLM_CPU_LO_OPS(llm_fast_)

/* adamw_segs (backend.h): ref_adamw_segs.c (adamw then cast_lo per segment) and
 * fast_elementwise.c (the two fused per slice). */
#define LLM_CPU_ADAMW_SEGS(P)                                                                 \
    void P##adamw_segs(llm_backend *be, float *p, void *p_lo, const float *grad, float *m,    \
                       float *v, size_t mv_base, const llm_adamw_seg *segs, int nseg,         \
                       float lr, float b1, float b2, float eps, int t, float grad_scale,      \
                       int lo);

LLM_CPU_ADAMW_SEGS(llm_ref_)
LLM_CPU_ADAMW_SEGS(llm_fast_)

/* The lo-activation ops both CPU backends share (lo_acts.c): the backend's own fp32 op
 * on widened lo inputs, lo outputs rounded once. */
void llm_cpu_matmul_forward_lo(llm_backend *be, void *out, int out_dt, const void *inp,
                               const void *w_lo, int lo, const void *bias, int N, int C, int OC);
void llm_cpu_matmul_backward_lo(llm_backend *be, void *dinp, int dinp_dt, float *dw,
                                float *dbias, const void *dout, const void *inp,
                                const void *w_lo, int lo, int N, int C, int OC);
void llm_cpu_layernorm_forward_lo(llm_backend *be, float *res, void *out, float *mean,
                                  float *rstd, const float *a, const float *b, const float *w,
                                  const float *bias, int N, int C, int lo);
void llm_cpu_layernorm_backward_lo(llm_backend *be, float *dinp, void *dinp_lo, float *dw,
                                   float *db, const float *dout, const float *inp,
                                   const float *w, const float *mean, const float *rstd, int N,
                                   int C, int lo);
void llm_cpu_matmul_forward_gelu_lo(llm_backend *be, void *out, void *pre, const void *inp,
                                    const void *w_lo, int lo, const void *bias, int N, int C,
                                    int OC);
void llm_cpu_matmul_backward_dgelu_lo(llm_backend *be, void *dinp, float *dw, float *dbias,
                                      const void *dout, const void *inp, const void *pre,
                                      const void *w_lo, int lo, int N, int C, int OC);
void llm_cpu_gelu_forward_lo(llm_backend *be, void *out, const void *inp, size_t n, int lo);
void llm_cpu_gelu_backward_lo(llm_backend *be, void *dinp, const void *inp, const void *dout,
                              size_t n, int lo);
void llm_cpu_xent_forward_lo(llm_backend *be, float *losses, float *lse, const void *logits,
                             const int32_t *targets, int N, int V, int Vp, int lo);
void llm_cpu_xent_backward_lo(llm_backend *be, void *dlogits, const void *logits,
                              const float *lse, const int32_t *targets, float dloss, int N,
                              int V, int Vp, int lo);
void llm_cpu_xent_fused(llm_backend *be, float *losses, void *logits, const int32_t *targets,
                        float dloss, int N, int V, int Vp, int lo);

/* At least n floats of the lo ops' own work space (separate from llm_cpu_scratch, which
 * the fp32 kernels they call use), or NULL when out of memory. */
float *llm_cpu_lo_scratch(llm_backend *be, size_t n);

/* dst(n) fp32 = the values of the lo bits src(n) (fast_mixed.c; threads for large n). */
void llm_cpu_lo_widen(llm_backend *be, float *dst, const uint16_t *src, size_t n, int lo);

#endif
