/* infer_ref.c — reference CPU kernels for inference (decode-shaped ops of backend.h).
 *
 * Plain loops in a fixed order, obviously correct; the fast kernels (infer_fast.c) are
 * tested against these.  f32 weights here; bf16/f16/q8_0/q4_0 weights go to the scalar
 * kernels of quant_ref.c (quant_kern.h).
 */
#include <math.h>
#include <string.h>

#include "kernels/backend.h"
#include "kernels/cpu/infer_kern.h"
#include "kernels/cpu/quant_kern.h"

/* The file dtypes (bf16/f16/q8_0/q4_0: quant_*.c); the repacked q4_0 layout is the fast
 * backend's (fast_dtype_ok), which is how llm-infer knows to repack for it. */
int llm_infer_ref_dtype_ok(llm_backend *be, int dt)
{
    (void)be;
    return dt == LLM_IK_F32 || (llm_qk_dtype_ok(dt) && dt != LLM_QK_Q4_0R8);
}

void llm_infer_ref_embed_rows(llm_backend *be, float *out, const int32_t *ids, const int32_t *pos,
                              const void *wte, int wte_dt, const float *wpe, int N, int C)
{
    (void)be;
    if (wte_dt != LLM_IK_F32) {   /* callers check infer_dtype_ok first */
        llm_qk_embed_rows(out, ids, pos, wte, wte_dt, wpe, N, C);
        return;
    }
    const float *w = wte;
    for (int i = 0; i < N; i++) {
        const float *e = w + (size_t)ids[i] * C;
        const float *p = wpe + (size_t)pos[i] * C;
        float *o = out + (size_t)i * C;
        for (int c = 0; c < C; c++)
            o[c] = e[c] + p[c];
    }
}

void llm_infer_ref_matmul_rows(llm_backend *be, float *out, const float *inp, const void *w,
                               int w_dt, const float *bias, int N, int C, int OC)
{
    (void)be;
    if (w_dt != LLM_IK_F32) {
        llm_qk_matmul(out, inp, w, w_dt, bias, N, C, OC, LLM_QK_ISA_SCALAR, 1);
        return;
    }
    const float *W = w;
    for (int n = 0; n < N; n++) {
        const float *x = inp + (size_t)n * C;
        for (int o = 0; o < OC; o++) {
            const float *wr = W + (size_t)o * C;
            float s = 0.0f;
            for (int c = 0; c < C; c++)
                s += x[c] * wr[c];
            out[(size_t)n * OC + o] = s + (bias ? bias[o] : 0.0f);
        }
    }
}

void llm_infer_ref_kv_store(llm_backend *be, float *kcache, float *vcache, const float *qkv,
                            const int32_t *slot, const int32_t *pos, int N, int C, int maxT)
{
    (void)be;
    for (int i = 0; i < N; i++) {
        size_t at = ((size_t)slot[i] * maxT + pos[i]) * C;
        const float *r = qkv + (size_t)i * 3 * C;
        memcpy(kcache + at, r + C, (size_t)C * sizeof(float));
        memcpy(vcache + at, r + 2 * (size_t)C, (size_t)C * sizeof(float));
    }
}

void llm_infer_ref_attention_rows(llm_backend *be, float *out, const float *qkv,
                                  const float *kcache, const float *vcache, const int32_t *slot,
                                  const int32_t *pos, int N, int C, int NH, int maxT)
{
    (void)be;
    int hs = C / NH;
    float scale = 1.0f / sqrtf((float)hs);
    for (int i = 0; i < N; i++) {
        const float *kbase = kcache + (size_t)slot[i] * maxT * C;
        const float *vbase = vcache + (size_t)slot[i] * maxT * C;
        int T = pos[i] + 1;
        for (int h = 0; h < NH; h++) {
            const float *q = qkv + (size_t)i * 3 * C + h * hs;
            float *o = out + (size_t)i * C + h * hs;
            /* two passes (max, then exp-sum) so no score buffer is needed */
            float mx = -INFINITY;
            for (int t = 0; t < T; t++) {
                const float *k = kbase + (size_t)t * C + h * hs;
                float s = 0.0f;
                for (int d = 0; d < hs; d++)
                    s += q[d] * k[d];
                s *= scale;
                if (s > mx)
                    mx = s;
            }
            for (int d = 0; d < hs; d++)
                o[d] = 0.0f;
            float sum = 0.0f;
            for (int t = 0; t < T; t++) {
                const float *k = kbase + (size_t)t * C + h * hs;
                const float *v = vbase + (size_t)t * C + h * hs;
                float s = 0.0f;
                for (int d = 0; d < hs; d++)
                    s += q[d] * k[d];
                float e = expf(s * scale - mx);
                sum += e;
                for (int d = 0; d < hs; d++)
                    o[d] += e * v[d];
            }
            float inv = 1.0f / sum;
            for (int d = 0; d < hs; d++)
                o[d] *= inv;
        }
    }
}
