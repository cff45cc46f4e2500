/* ref_backward.c — reference ("cpu-ref") backward and optimizer kernels: plain loops,
 * one thread, accumulation in double.  Each is checked against finite differences of
 * its forward in tests/unit/test_kernels.c. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/cpu/cpu_ops.h"
#include "kernels/cpu/mixed.h"

void llm_ref_embed_backward(llm_backend *be, float *dwte, float *dwpe, const float *dout,
                            const int32_t *inp, int B, int T, int C)
{
    (void)be;
    for (int b = 0; b < B; b++)
        for (int t = 0; t < T; t++) {
            const float *d = dout + ((size_t)b * T + t) * C;
            float *e = dwte + (size_t)inp[b * T + t] * C;
            float *p = dwpe + (size_t)t * C;
            for (int c = 0; c < C; c++) {
                e[c] += d[c];
                p[c] += d[c];
            }
        }
}

void llm_ref_layernorm_backward(llm_backend *be, float *dinp, float *dw, float *db,
                                const float *dout, const float *inp, const float *w,
                                const float *mean, const float *rstd, int N, int C)
{
    (void)be;
    for (int i = 0; i < N; i++) {
        const float *x = inp + (size_t)i * C, *dy = dout + (size_t)i * C;
        double m = mean[i], s = rstd[i];
        /* y = xhat*w + b, xhat = (x-m)*s:
         * dx = s * (dxhat - mean(dxhat) - xhat * mean(dxhat*xhat)), dxhat = dy*w */
        double g = 0, gx = 0;
        for (int c = 0; c < C; c++) {
            double xh = (x[c] - m) * s, dxh = (double)dy[c] * w[c];
            g += dxh;
            gx += dxh * xh;
        }
        g /= C;
        gx /= C;
        for (int c = 0; c < C; c++) {
            double xh = (x[c] - m) * s, dxh = (double)dy[c] * w[c];
            dinp[(size_t)i * C + c] += (float)(s * (dxh - g - xh * gx));
            dw[c] += (float)(dy[c] * xh);
            db[c] += dy[c];
        }
    }
}

void llm_ref_matmul_backward(llm_backend *be, float *dinp, float *dw, float *dbias,
                             const float *dout, const float *inp, const float *w,
                             int N, int C, int OC)
{
    (void)be;
    for (int i = 0; i < N; i++)
        for (int c = 0; c < C; c++) {
            double s = 0;
            for (int o = 0; o < OC; o++)
                s += (double)dout[(size_t)i * OC + o] * w[(size_t)o * C + c];
            dinp[(size_t)i * C + c] += (float)s;
        }
    for (int o = 0; o < OC; o++) {
        for (int c = 0; c < C; c++) {
            double s = 0;
            for (int i = 0; i < N; i++)
                s += (double)dout[(size_t)i * OC + o] * inp[(size_t)i * C + c];
            dw[(size_t)o * C + c] += (float)s;
        }
        if (dbias) {
            double s = 0;
            for (int i = 0; i < N; i++)
                s += dout[(size_t)i * OC + o];
            dbias[o] += (float)s;
        }
    }
}

/* fp32 (lo = 0) or lo operands, R as in ref_forward.c: dp[s] = R(dy).R(v_s),
 * dv_s += R(p[s]) R(dy), the softmax backward in double on the fp32 probabilities, and
 * the score gradient, rounded to fp32 then lo once (for both of its products) under lo,
 * times R(k) and R(q). */
static void attention_backward(float *dqkv, const float *dout, const float *qkv,
                               const float *att, int B, int T, int C, int NH, int lo)
{
    int hs = C / NH;
    double scale = 1.0 / sqrt((double)hs);
    size_t C3 = 3 * (size_t)C;
    double *dp = malloc(sizeof(double) * (T > 0 ? T : 1));
    if (!dp)
        return; /* ops cannot fail; the reference is only used on small shapes */
    for (int b = 0; b < B; b++)
        for (int h = 0; h < NH; h++)
            for (int t = 0; t < T; t++) {
                const float *p = att + (((size_t)b * NH + h) * T + t) * T;
                const float *dy = dout + ((size_t)b * T + t) * C + (size_t)h * hs;
                size_t qo = ((size_t)b * T + t) * C3 + (size_t)h * hs;
                /* out_t = sum_s p[s] v_s: dp[s] = dy . v_s, dv_s += p[s] dy */
                for (int s = 0; s <= t; s++) {
                    size_t vo = ((size_t)b * T + s) * C3 + 2 * (size_t)C + (size_t)h * hs;
                    double d = 0, pl = llm_lo_or_f32(p[s], lo);
                    for (int i = 0; i < hs; i++) {
                        double g = llm_lo_or_f32(dy[i], lo);
                        d += g * llm_lo_or_f32(qkv[vo + i], lo);
                        dqkv[vo + i] += (float)(pl * g);
                    }
                    dp[s] = d;
                }
                /* softmax backward: dscore[s] = p[s] (dp[s] - sum_s' p[s'] dp[s']) */
                double pdp = 0;
                for (int s = 0; s <= t; s++)
                    pdp += p[s] * dp[s];
                for (int s = 0; s <= t; s++) {
                    double ds = llm_lo_or_f64(p[s] * (dp[s] - pdp) * scale, lo);
                    size_t ko = ((size_t)b * T + s) * C3 + (size_t)C + (size_t)h * hs;
                    for (int i = 0; i < hs; i++) {
                        dqkv[qo + i] += (float)(ds * llm_lo_or_f32(qkv[ko + i], lo));
                        dqkv[ko + i] += (float)(ds * llm_lo_or_f32(qkv[qo + i], lo));
                    }
                }
            }
    free(dp);
}

void llm_ref_attention_backward(llm_backend *be, float *dqkv, const float *dout,
                                const float *qkv, const float *att, int B, int T, int C,
                                int NH)
{
    (void)be;
    attention_backward(dqkv, dout, qkv, att, B, T, C, NH, 0);
}

/* The backward of attention_forward_lse: per row, the scores again from lo(q), lo(k) in
 * double, P = exp(S - lse) (lse the forward's fp32 value), D = dout . out, and then as
 * attention_backward with lo operands (dS rounded to fp32 then lo once). */
void llm_ref_attention_backward_lse32(llm_backend *be, float *dqkv, const float *dout,
                                      const float *qkv, const float *out, const float *lse,
                                      int B, int T, int C, int NH, int lo)
{
    (void)be;
    int hs = C / NH;
    double scale = 1.0 / sqrt((double)hs);
    size_t C3 = 3 * (size_t)C;
    double *pr = malloc(sizeof(double) * 2 * (T > 0 ? T : 1)), *dp = pr + (T > 0 ? T : 1);
    if (!pr)
        return; /* ops cannot fail; the reference is only used on small shapes */
    for (int b = 0; b < B; b++)
        for (int h = 0; h < NH; h++)
            for (int t = 0; t < T; t++) {
                size_t qo = ((size_t)b * T + t) * C3 + (size_t)h * hs;
                size_t go = ((size_t)b * T + t) * C + (size_t)h * hs;
                double l = lse[((size_t)b * NH + h) * T + t], D = 0;
                for (int i = 0; i < hs; i++)
                    D += (double)dout[go + i] * out[go + i];
                for (int s = 0; s <= t; s++) {
                    size_t ko = ((size_t)b * T + s) * C3 + (size_t)C + (size_t)h * hs;
                    size_t vo = ko + (size_t)C;
                    double sc = 0, d = 0;
                    for (int i = 0; i < hs; i++) {
                        sc += llm_lo_round(qkv[qo + i], lo) * (double)llm_lo_round(qkv[ko + i], lo);
                        d += llm_lo_round(dout[go + i], lo) * (double)llm_lo_round(qkv[vo + i], lo);
                    }
                    pr[s] = exp(sc * scale - l);
                    dp[s] = d;
                    double pl = llm_lo_round((float)pr[s], lo);
                    for (int i = 0; i < hs; i++)
                        dqkv[vo + i] += (float)(pl * llm_lo_round(dout[go + i], lo));
                }
                for (int s = 0; s <= t; s++) {
                    double ds = llm_lo_round((float)(scale * pr[s] * (dp[s] - D)), lo);
                    size_t ko = ((size_t)b * T + s) * C3 + (size_t)C + (size_t)h * hs;
                    for (int i = 0; i < hs; i++) {
                        dqkv[qo + i] += (float)(ds * llm_lo_round(qkv[ko + i], lo));
                        dqkv[ko + i] += (float)(ds * llm_lo_round(qkv[qo + i], lo));
                    }
                }
            }
    free(pr);
}

void llm_ref_gelu_backward(llm_backend *be, float *dinp, const float *inp, const float *dout,
                           size_t n)
{
    (void)be;
    const double k = sqrt(2.0 / M_PI);
    for (size_t i = 0; i < n; i++) {
        double x = inp[i], u = k * (x + 0.044715 * x * x * x), th = tanh(u);
        double du = k * (1.0 + 3.0 * 0.044715 * x * x);
        double g = 0.5 * (1.0 + th) + 0.5 * x * (1.0 - th * th) * du;
        dinp[i] += (float)(g * dout[i]);
    }
}

void llm_ref_accumulate(llm_backend *be, float *dst, const float *src, size_t n)
{
    (void)be;
    for (size_t i = 0; i < n; i++)
        dst[i] += src[i];
}

void llm_ref_xent_backward(llm_backend *be, float *dlogits, const float *logits,
                           const float *lse, const int32_t *targets, float dloss, int N,
                           int V, int Vp)
{
    (void)be;
    for (int i = 0; i < N; i++) {
        const float *x = logits + (size_t)i * Vp;
        float *d = dlogits + (size_t)i * Vp;
        for (int j = 0; j < Vp; j++) {
            /* read x[j] before writing d[j]: they may be the same memory */
            double p = j < V ? exp((double)x[j] - lse[i]) : 0.0;
            double y = j == targets[i] ? 1.0 : 0.0;
            d[j] = j < V ? (float)((p - y) * dloss) : 0.0f;
        }
    }
}

double llm_ref_sum_squares(llm_backend *be, const float *g, size_t n)
{
    (void)be;
    double s = 0;
    for (size_t i = 0; i < n; i++)
        s += (double)g[i] * g[i];
    return s;
}

void llm_ref_adamw(llm_backend *be, float *p, const float *grad, float *m, float *v, size_t n,
                   float lr, float b1, float b2, float eps, float wd, int t, float grad_scale)
{
    (void)be;
    double c1 = 1.0 - pow(b1, t), c2 = 1.0 - pow(b2, t);
    for (size_t i = 0; i < n; i++) {
        double g = (double)grad[i] * grad_scale;
        double mi = b1 * (double)m[i] + (1.0 - b1) * g;
        double vi = b2 * (double)v[i] + (1.0 - b2) * g * g;
        m[i] = (float)mi;
        v[i] = (float)vi;
        p[i] = (float)(p[i] - lr * ((mi / c1) / (sqrt(vi / c2) + eps) + wd * (double)p[i]));
    }
}
