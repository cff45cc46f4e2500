/* ref_forward.c — reference ("cpu-ref") forward kernels: plain loops, one thread,
 * accumulation in double.  They define what each op means; the fast kernels are tested
 * against them, so clarity wins over speed here. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/cpu/cpu_ops.h"
#include "kernels/cpu/mixed.h"

void llm_ref_embed_forward(llm_backend *be, float *out, const int32_t *inp, const float *wte,
                           const float *wpe, int B, int T, int C)
{
    (void)be;
    for (int b = 0; b < B; b++)
        for (int t = 0; t < T; t++) {
            const float *e = wte + (size_t)inp[b * T + t] * C;
            const float *p = wpe + (size_t)t * C;
            float *o = out + ((size_t)b * T + t) * C;
            for (int c = 0; c < C; c++)
                o[c] = e[c] + p[c];
        }
}

void llm_ref_layernorm_forward(llm_backend *be, float *out, float *mean, float *rstd,
                               const float *inp, const float *w, const float *b, int N, int C)
{
    (void)be;
    for (int i = 0; i < N; i++) {
        const float *x = inp + (size_t)i * C;
        double m = 0, v = 0;
        for (int c = 0; c < C; c++)
            m += x[c];
        m /= C;
        for (int c = 0; c < C; c++)
            v += ((double)x[c] - m) * ((double)x[c] - m);
        v /= C;
        double s = 1.0 / sqrt(v + 1e-5);
        float *o = out + (size_t)i * C;
        for (int c = 0; c < C; c++)
            o[c] = (float)(((double)x[c] - m) * s * w[c] + b[c]);
        if (mean)
            mean[i] = (float)m;
        if (rstd)
            rstd[i] = (float)s;
    }
}

void llm_ref_matmul_forward(llm_backend *be, float *out, const float *inp, const float *w,
                            const float *bias, int N, int C, int OC)
{
    (void)be;
    for (int i = 0; i < N; i++)
        for (int o = 0; o < OC; o++) {
            double s = bias ? bias[o] : 0.0;
            for (int c = 0; c < C; c++)
                s += (double)inp[(size_t)i * C + c] * w[(size_t)o * C + c];
            out[(size_t)i * OC + o] = (float)s;
        }
}

/* fp32 (lo = 0) or lo operands: the scores sum R(q) R(k) in double, the probabilities
 * are computed in double and stored as fp32 (att, when not NULL; lse, when not NULL,
 * gets each row's log-sum-exp); the output sums P R(v) with P the double probability in
 * fp32 and lo(fp32 P) — the stored value rounded, as the fast kernels round what they
 * stored — in lo.  R: the identity for fp32, the rounding to lo. */
static void attention_forward(float *out, float *att, float *lse, const float *qkv, int B,
                              int T, int C, int NH, int lo)
{
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
                double mx = -INFINITY;
                for (int s = 0; s <= t; s++) {
                    const float *k = qkv + ((size_t)b * T + s) * C3 + C + (size_t)h * hs;
                    double d = 0;
                    for (int i = 0; i < hs; i++)
                        d += llm_lo_or_f32(q[i], lo) * llm_lo_or_f32(k[i], lo);
                    sc[s] = d * scale;
                    if (sc[s] > mx)
                        mx = sc[s];
                }
                double sum = 0;
                for (int s = 0; s <= t; s++) {
                    sc[s] = exp(sc[s] - mx);
                    sum += sc[s];
                }
                if (att) {
                    float *a = att + (((size_t)b * NH + h) * T + t) * T;
                    for (int s = 0; s < T; s++)
                        a[s] = s <= t ? (float)(sc[s] / sum) : 0.0f;
                }
                if (lse)
                    lse[((size_t)b * NH + h) * T + t] = (float)(mx + log(sum));
                float *o = out + ((size_t)b * T + t) * C + (size_t)h * hs;
                for (int i = 0; i < hs; i++) {
                    double acc = 0;
                    for (int s = 0; s <= t; s++)
                        acc += llm_lo_or_f64(sc[s] / sum, lo) *
                               llm_lo_or_f32(qkv[((size_t)b * T + s) * C3 + 2 * (size_t)C +
                                                 (size_t)h * hs + i], lo);
                    o[i] = (float)acc;
                }
            }
    free(sc);
}

void llm_ref_attention_forward(llm_backend *be, float *out, float *att, const float *qkv,
                               int B, int T, int C, int NH)
{
    (void)be;
    attention_forward(out, att, NULL, qkv, B, T, C, NH, 0);
}

void llm_ref_attention_forward_lse32(llm_backend *be, float *out, float *lse, const float *qkv,
                                     int B, int T, int C, int NH, int lo)
{
    (void)be;
    attention_forward(out, NULL, lse, qkv, B, T, C, NH, lo);
}

static double gelu(double x)
{
    const double k = sqrt(2.0 / M_PI);
    return 0.5 * x * (1.0 + tanh(k * (x + 0.044715 * x * x * x)));
}

void llm_ref_gelu_forward(llm_backend *be, float *out, const float *inp, size_t n)
{
    (void)be;
    for (size_t i = 0; i < n; i++)
        out[i] = (float)gelu(inp[i]);
}

void llm_ref_residual_forward(llm_backend *be, float *out, const float *a, const float *b,
                              size_t n)
{
    (void)be;
    for (size_t i = 0; i < n; i++)
        out[i] = a[i] + b[i];
}

/* Row by row: the row of res, then layernorm_forward of that row (the same arithmetic
 * as the two ops one after the other). */
void llm_ref_residual_layernorm_forward(llm_backend *be, float *res, float *out, float *mean,
                                        float *rstd, const float *a, const float *b,
                                        const float *w, const float *bias, int N, int C)
{
    for (int i = 0; i < N; i++) {
        size_t o = (size_t)i * C;
        llm_ref_residual_forward(be, res + o, a + o, b + o, (size_t)C);
        llm_ref_layernorm_forward(be, out + o, mean ? mean + i : NULL, rstd ? rstd + i : NULL,
                                  res + o, w, bias, 1, C);
    }
}

void llm_ref_xent_forward(llm_backend *be, float *losses, float *lse, const float *logits,
                          const int32_t *targets, int N, int V, int Vp)
{
    (void)be;
    for (int i = 0; i < N; i++) {
        const float *x = logits + (size_t)i * Vp;
        double mx = -INFINITY, sum = 0;
        for (int j = 0; j < V; j++)
            if (x[j] > mx)
                mx = x[j];
        for (int j = 0; j < V; j++)
            sum += exp(x[j] - mx);
        double l = mx + log(sum);
        lse[i] = (float)l;
        losses[i] = (float)(l - x[targets[i]]);
    }
}
