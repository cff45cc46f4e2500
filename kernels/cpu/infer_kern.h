/* infer_kern.h — internal: the CPU inference kernels shared by infer_ref.c and
 * infer_fast.c (see the inference section of kernels/backend.h for the contracts). */
#ifndef LLM_INFER_KERN_H
#define LLM_INFER_KERN_H

#include "kernels/backend.h"

/* Weight dtypes, numerically equal to llm_dtype (common/ckpt.h); kernels do not
 * include common/. */
enum { LLM_IK_F32 = 0 };

int  llm_infer_ref_dtype_ok(llm_backend *be, int dt);
void llm_infer_ref_embed_rows(llm_backend *be, float *out, const int32_t *ids, const int32_t *pos,
                              const void *wte, int wte_dt, const float *wpe, int N, int C);
void llm_infer_ref_matmul_rows(llm_backend *be, float *out, const float *inp, const void *w,
                               int w_dt, const float *bias, int N, int C, int OC);
void llm_infer_ref_kv_store(llm_backend *be, float *kcache, float *vcache, const float *qkv,
                            const int32_t *slot, const int32_t *pos, int N, int C, int maxT);
void llm_infer_ref_attention_rows(llm_backend *be, float *out, const float *qkv,
                                  const float *kcache, const float *vcache, const int32_t *slot,
                                  const int32_t *pos, int N, int C, int NH, int maxT);

#endif
