/* ref_mixed.c — reference ("cpu-ref") mixed-precision ops (the GEMMs and the attention's
 * products): plain loops, operands rounded to lo on every use, products summed in double
 * (exact for a bf16 x bf16 or f16 x f16 product; the sum is then at least as accurate as
 * the fp32 accumulation the interface promises).  These define what the ops mean;
 * fast_mixed.c, fast_attention.c and the CUDA kernels are tested against them. */
#include <math.h>
#include <stdlib.h>

#include "kernels/cpu/cpu_ops.h"
#include "kernels/cpu/mixed.h"

void llm_ref_cast_lo(llm_backend *be, void *dst, const float *src, size_t n, int lo)
{
    (void)be;
    uint16_t *d = dst;
    for (size_t i = 0; i < n; i++)
        d[i] = llm_lo_bits(src[i], lo);
}

void llm_ref_matmul_forward_lo(llm_backend *be, float *out, const float *inp, const void *w_lo,
                               int lo, const float *bias, int N, int C, int OC)
{
    (void)be;
    const uint16_t *w = w_lo;
    for (int i = 0; i < N; i++)
        for (int o = 0; o < OC; o++) {
            double s = bias ? bias[o] : 0.0;
            for (int c = 0; c < C; c++)
                s += (double)llm_lo_round(inp[(size_t)i * C + c], lo) *
                     llm_lo_value(w[(size_t)o * C + c], lo);
            out[(size_t)i * OC + o] = (float)s;
        }
}

void llm_ref_matmul_backward_lo(llm_backend *be, float *dinp, float *dw, float *dbias,
                                const float *dout, const float *inp, const void *w_lo, int lo,
                                int N, int C, int OC)
{
    (void)be;
    const uint16_t *w = w_lo;
    for (int i = 0; i < N; i++)
        for (int c = 0; c < C; c++) {
            double s = 0;
            for (int o = 0; o < OC; o++)
                s += (double)llm_lo_round(dout[(size_t)i * OC + o], lo) *
                     llm_lo_value(w[(size_t)o * C + c], lo);
            dinp[(size_t)i * C + c] += (float)s;
        }
    for (int o = 0; o < OC; o++) {
        for (int c = 0; c < C; c++) {
            double s = 0;
            for (int i = 0; i < N; i++)
                s += (double)llm_lo_round(dout[(size_t)i * OC + o], lo) *
                     llm_lo_round(inp[(size_t)i * C + c], lo);
            dw[(size_t)o * C + c] += (float)s;
        }
        if (dbias) {
            double s = 0;
            for (int i = 0; i < N; i++)
                s += llm_lo_round(dout[(size_t)i * OC + o], lo);
            dbias[o] += (float)s;
        }
    }
}

/* Causal attention with lo operands: the scores sum lo(q) lo(k) in double, the
 * probabilities are computed in double and stored as fp32 (att), and the output sums
 * lo(att) lo(v) — the probabilities rounded from their stored fp32 value, as the fast
 * kernels round what they stored. */
void llm_ref_attention_forward_lo(llm_backend *be, float *out, float *att, const float *qkv,
                                  int B, int T, int C, int NH, int lo)
{
    (void)be;
    int hs = C / NH;
    double scale = 1.0 / sqrt((double)hs);
    size_t C3 = 3 * (size_t)C;
    double *sc = malloc(sizeof(double) * (T > 0 ? T : 1));
    if (!sc)
        return; /* ops cannot fail; the reference is only used on small shapes */
    for (int b = 0; b < B; b++)
        for (int h = 0; h < NH; h++)
            for (int t = 0; t < T; t++) {
                const float *q = qkv + ((size_t)b * T + t) * C3 + (size_t)h * hs;
                float *a = att + (((size_t)b * NH + h) * T + t) * T;
                double mx = -INFINITY;
                for (int s = 0; s <= t; s++) {
                    const float *k = qkv + ((size_t)b * T + s) * C3 + C + (size_t)h * hs;
                    double d = 0;
                    for (int i = 0; i < hs; i++)
                        d += (double)llm_lo_round(q[i], lo) * llm_lo_round(k[i], lo);
                    sc[s] = d * scale;
                    if (sc[s] > mx)
                        mx = sc[s];
                }
                double sum = 0;
                for (int s = 0; s <= t; s++) {
                    sc[s] = exp(sc[s] - mx);
                    sum += sc[s];
                }
                for (int s = 0; s < T; s++)
                    a[s] = s <= t ? (float)(sc[s] / sum) : 0.0f;
                float *o = out + ((size_t)b * T + t) * C + (size_t)h * hs;
                for (int i = 0; i < hs; i++) {
                    double acc = 0;
                    for (int s = 0; s <= t; s++)
                        acc += (double)llm_lo_round(a[s], lo) *
                               llm_lo_round(qkv[((size_t)b * T + s) * C3 + 2 * (size_t)C +
                                                (size_t)h * hs + i], lo);
                    o[i] = (float)acc;
                }
            }
    free(sc);
}

void llm_ref_attention_backward_lo(llm_backend *be, float *dqkv, const float *dout,
                                   const float *qkv, const float *att, int B, int T, int C,
                                   int NH, int lo)
{
    (void)be;
    int hs = C / NH;
    double scale = 1.0 / sqrt((double)hs);
    size_t C3 = 3 * (size_t)C;
    double *dp = malloc(sizeof(double) * (T > 0 ? T : 1));
    if (!dp)
        return;
    for (int b = 0; b < B; b++)
        for (int h = 0; h < NH; h++)
            for (int t = 0; t < T; t++) {
                const float *p = att + (((size_t)b * NH + h) * T + t) * T;
                const float *dy = dout + ((size_t)b * T + t) * C + (size_t)h * hs;
                size_t qo = ((size_t)b * T + t) * C3 + (size_t)h * hs;
                for (int s = 0; s <= t; s++) {
                    size_t vo = ((size_t)b * T + s) * C3 + 2 * (size_t)C + (size_t)h * hs;
                    double d = 0, pl = llm_lo_round(p[s], lo);
                    for (int i = 0; i < hs; i++) {
                        double dyl = llm_lo_round(dy[i], lo);
                        d += dyl * llm_lo_round(qkv[vo + i], lo);
                        dqkv[vo + i] += (float)(pl * dyl);
                    }
                    dp[s] = d;
                }
                /* the softmax backward in full precision on the fp32 probabilities; the
                 * score gradient is rounded once for both of its products */
                double pdp = 0;
                for (int s = 0; s <= t; s++)
                    pdp += p[s] * dp[s];
                for (int s = 0; s <= t; s++) {
                    double ds = llm_lo_round((float)(p[s] * (dp[s] - pdp) * scale), lo);
                    size_t ko = ((size_t)b * T + s) * C3 + (size_t)C + (size_t)h * hs;
                    for (int i = 0; i < hs; i++) {
                        dqkv[qo + i] += (float)(ds * llm_lo_round(qkv[ko + i], lo));
                        dqkv[ko + i] += (float)(ds * llm_lo_round(qkv[qo + i], lo));
                    }
                }
            }
    free(dp);
}
