/* ref64.c — double-precision reference ops for gpu_check (see ref64.h). */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "common/ckpt.h"
#include "common/quant.h"
#include "tests/gpu/ref64.h"

void r64_embed_forward(double *out, const int32_t *inp, const float *wte, const float *wpe,
                       int B, int T, int C)
{
    for (int b = 0; b < B; b++)
        for (int t = 0; t < T; t++) {
            size_t n = (size_t)b * T + t;
            for (int c = 0; c < C; c++)
                out[n * C + c] = (double)wte[(size_t)inp[n] * C + c] + wpe[(size_t)t * C + c];
        }
}

void r64_embed_backward(double *dwte, double *dwpe, const float *dout, const int32_t *inp,
                        int B, int T, int C)
{
    for (int b = 0; b < B; b++)
        for (int t = 0; t < T; t++) {
            size_t n = (size_t)b * T + t;
            for (int c = 0; c < C; c++) {
                dwte[(size_t)inp[n] * C + c] += dout[n * C + c];
                dwpe[(size_t)t * C + c] += dout[n * C + c];
            }
        }
}

void r64_layernorm_forward(double *out, double *mean, double *rstd, const float *inp,
                           const float *w, const float *b, int N, int C)
{
    for (int i = 0; i < N; i++) {
        const float *x = inp + (size_t)i * C;
        double m = 0, v = 0;
        for (int c = 0; c < C; c++) m += x[c];
        m /= C;
        for (int c = 0; c < C; c++) v += (x[c] - m) * (x[c] - m);
        v /= C;
        double r = 1.0 / sqrt(v + 1e-5);
        for (int c = 0; c < C; c++) out[(size_t)i * C + c] = (x[c] - m) * r * w[c] + b[c];
        mean[i] = m;
        rstd[i] = r;
    }
}

void r64_layernorm_backward(double *dinp, double *dw, double *db, const float *dout,
                            const float *inp, const float *w, const float *mean,
                            const float *rstd, int N, int C)
{
    for (int i = 0; i < N; i++) {
        const float *x = inp + (size_t)i * C, *dy = dout + (size_t)i * C;
        double m = mean[i], r = rstd[i], a = 0, an = 0;
        for (int c = 0; c < C; c++) {
            double n = (x[c] - m) * r, dn = (double)w[c] * dy[c];
            a += dn;
            an += dn * n;
            dw[c] += n * dy[c];
            db[c] += dy[c];
        }
        a /= C;
        an /= C;
        for (int c = 0; c < C; c++) {
            double n = (x[c] - m) * r;
            dinp[(size_t)i * C + c] += ((double)w[c] * dy[c] - a - n * an) * r;
        }
    }
}

void r64_matmul_forward(double *out, const float *inp, const float *w, const float *bias,
                        int N, int C, int OC)
{
    for (int i = 0; i < N; i++)
        for (int o = 0; o < OC; o++) {
            double s = bias ? bias[o] : 0.0;
            const float *x = inp + (size_t)i * C, *wr = w + (size_t)o * C;
            for (int c = 0; c < C; c++) s += (double)x[c] * wr[c];
            out[(size_t)i * OC + o] = s;
        }
}

void r64_matmul_backward(double *dinp, double *dw, double *dbias, const float *dout,
                         const float *inp, const float *w, int N, int C, int OC)
{
    for (int i = 0; i < N; i++)
        for (int o = 0; o < OC; o++) {
            double d = dout[(size_t)i * OC + o];
            if (d == 0) continue;
            for (int c = 0; c < C; c++) {
                dinp[(size_t)i * C + c] += d * w[(size_t)o * C + c];
                dw[(size_t)o * C + c] += d * inp[(size_t)i * C + c];
            }
            if (dbias) dbias[o] += d;
        }
}

void r64_attention_forward(double *out, double *att, const float *qkv, int B, int T, int C, int NH)
{
    int hs = C / NH;
    double scale = 1.0 / sqrt((double)hs);
    for (int b = 0; b < B; b++)
        for (int h = 0; h < NH; h++)
            for (int t = 0; t < T; t++) {
                const float *q = qkv + ((size_t)b * T + t) * 3 * C + (size_t)h * hs;
                double *a = att + (((size_t)b * NH + h) * T + t) * T;
                double mx = -INFINITY;
                for (int j = 0; j <= t; j++) {
                    const float *k = qkv + ((size_t)b * T + j) * 3 * C + C + (size_t)h * hs;
                    double s = 0;
                    for (int i = 0; i < hs; i++) s += (double)q[i] * k[i];
                    a[j] = s * scale;
                    if (a[j] > mx) mx = a[j];
                }
                double sum = 0;
                for (int j = 0; j <= t; j++) { a[j] = exp(a[j] - mx); sum += a[j]; }
                for (int j = 0; j < T; j++) a[j] = j <= t ? a[j] / sum : 0.0;
                double *o = out + ((size_t)b * T + t) * C + (size_t)h * hs;
                for (int i = 0; i < hs; i++) {
                    double s = 0;
                    for (int j = 0; j <= t; j++)
                        s += a[j] * qkv[((size_t)b * T + j) * 3 * C + 2 * C + (size_t)h * hs + i];
                    o[i] = s;
                }
            }
}

void r64_attention_backward(double *dqkv, const float *dout, const float *qkv, const float *att,
                            int B, int T, int C, int NH)
{
    int hs = C / NH;
    double scale = 1.0 / sqrt((double)hs);
    double *da = malloc((size_t)T * sizeof *da);
    if (!da) abort();
    for (int b = 0; b < B; b++)
        for (int h = 0; h < NH; h++)
            for (int t = 0; t < T; t++) {
                const float *a = att + (((size_t)b * NH + h) * T + t) * T;
                const float *d = dout + ((size_t)b * T + t) * C + (size_t)h * hs;
                size_t qo = ((size_t)b * T + t) * 3 * C + (size_t)h * hs;
                /* datt[j] = dout_t . v_j ; dv_j += att[t,j] dout_t */
                for (int j = 0; j <= t; j++) {
                    size_t vo = ((size_t)b * T + j) * 3 * C + 2 * C + (size_t)h * hs;
                    double s = 0;
                    for (int i = 0; i < hs; i++) {
                        s += (double)d[i] * qkv[vo + i];
                        dqkv[vo + i] += (double)a[j] * d[i];
                    }
                    da[j] = s;
                }
                double dot = 0;
                for (int j = 0; j <= t; j++) dot += (double)a[j] * da[j];
                for (int j = 0; j <= t; j++) {
                    double dp = a[j] * (da[j] - dot) * scale;
                    size_t ko = ((size_t)b * T + j) * 3 * C + C + (size_t)h * hs;
                    for (int i = 0; i < hs; i++) {
                        dqkv[qo + i] += dp * qkv[ko + i];
                        dqkv[ko + i] += dp * qkv[qo + i];
                    }
                }
            }
    free(da);
}

static const double GS = 0.79788456080286535588; /* sqrt(2/pi) */

double r64_gelu1(double x)
{
    return 0.5 * x * (1.0 + tanh(GS * (x + 0.044715 * x * x * x)));
}

double r64_gelu_grad1(double x)
{
    double th = tanh(GS * (x + 0.044715 * x * x * x));
    return 0.5 * (1.0 + th) + 0.5 * x * (1.0 - th * th) * GS * (1.0 + 3 * 0.044715 * x * x);
}

void r64_gelu_forward(double *out, const float *inp, size_t n)
{
    for (size_t i = 0; i < n; i++) out[i] = r64_gelu1(inp[i]);
}

void r64_gelu_backward(double *dinp, const float *inp, const float *dout, size_t n)
{
    for (size_t i = 0; i < n; i++) dinp[i] += r64_gelu_grad1(inp[i]) * dout[i];
}

void r64_xent_forward(double *losses, double *lse, const float *logits, const int32_t *targets,
                      int N, int V, int Vp)
{
    for (int i = 0; i < N; i++) {
        const float *x = logits + (size_t)i * Vp;
        double mx = -INFINITY, s = 0;
        for (int j = 0; j < V; j++) if (x[j] > mx) mx = x[j];
        for (int j = 0; j < V; j++) s += exp(x[j] - mx);
        lse[i] = mx + log(s);
        losses[i] = lse[i] - x[targets[i]];
    }
}

void r64_xent_backward(double *dlogits, const float *logits, const float *lse,
                       const int32_t *targets, float dloss, int N, int V, int Vp)
{
    for (int i = 0; i < N; i++)
        for (int j = 0; j < Vp; j++) {
            size_t k = (size_t)i * Vp + j;
            dlogits[k] = j < V ? (exp((double)logits[k] - lse[i]) - (j == targets[i])) * dloss : 0.0;
        }
}

void r64_adamw(double *p, double *m, double *v, const float *p0, const float *grad,
               const float *m0, const float *v0, size_t n, float lr, float b1, float b2,
               float eps, float wd, int t, float grad_scale)
{
    double bc1 = 1.0 - pow(b1, t), bc2 = 1.0 - pow(b2, t);
    for (size_t i = 0; i < n; i++) {
        double g = (double)grad[i] * grad_scale;
        m[i] = (double)b1 * m0[i] + (1.0 - (double)b1) * g;
        v[i] = (double)b2 * v0[i] + (1.0 - (double)b2) * g * g;
        p[i] = p0[i] - (double)lr * ((m[i] / bc1) / (sqrt(v[i] / bc2) + eps) + (double)wd * p0[i]);
    }
}

double r64_sum_squares(const float *g, size_t n)
{
    double s = 0;
    for (size_t i = 0; i < n; i++) s += (double)g[i] * g[i];
    return s;
}

static double r64_rl(float v, int lo)
{
    return lo == LLM_DT_BF16 ? llm_quant_bf16_to_f32(llm_quant_f32_to_bf16(v))
                             : llm_quant_f16_to_f32(llm_quant_f32_to_f16(v));
}

void r64_attention_lse_forward(double *out, double *outs, double *lse, const float *qr,
                               int B, int T, int C, int NH, int lo)
{
    int hs = C / NH;
    size_t C3 = 3 * (size_t)C, no = (size_t)B * T * C;
    double scale = 1.0 / sqrt((double)hs);
    double *sc = malloc((size_t)T * sizeof *sc);
    if (!sc) abort();
    memset(out, 0, no * sizeof *out);
    memset(outs, 0, no * sizeof *outs);
    for (int b = 0; b < B; b++)
        for (int h = 0; h < NH; h++)
            for (int t = 0; t < T; t++) {
                size_t qo = ((size_t)b * T + t) * C3 + (size_t)h * hs;
                size_t go = ((size_t)b * T + t) * C + (size_t)h * hs;
                double mx = -INFINITY, sum = 0;
                for (int s = 0; s <= t; s++) {
                    size_t ko = ((size_t)b * T + s) * C3 + C + (size_t)h * hs;
                    double d = 0;
                    for (int i = 0; i < hs; i++) d += (double)qr[qo + i] * qr[ko + i];
                    sc[s] = d * scale;
                    if (sc[s] > mx) mx = sc[s];
                }
                for (int s = 0; s <= t; s++) sum += exp(sc[s] - mx);
                double l = mx + log(sum);
                lse[((size_t)b * NH + h) * T + t] = l;
                for (int s = 0; s <= t; s++) {
                    double p = r64_rl((float)exp(sc[s] - l), lo);
                    size_t vo = ((size_t)b * T + s) * C3 + 2 * (size_t)C + (size_t)h * hs;
                    for (int i = 0; i < hs; i++) {
                        out[go + i] += p * qr[vo + i];
                        outs[go + i] += fabs(p * qr[vo + i]);
                    }
                }
            }
    free(sc);
}

void r64_attention_lse_backward(double *r, double *rs, const float *qr, const float *dout,
                                const float *out, const float *lse, int B, int T, int C,
                                int NH, int lo)
{
    int hs = C / NH;
    size_t C3 = 3 * (size_t)C;
    double scale = 1.0 / sqrt((double)hs), bmax, bmean;
    r64_lse_bounds(lo, 0, (size_t)B * T * C3, &bmax, &bmean);
    for (int b = 0; b < B; b++)
        for (int h = 0; h < NH; h++)
            for (int t = 0; t < T; t++) {
                size_t qo = ((size_t)b * T + t) * C3 + (size_t)h * hs;
                size_t go = ((size_t)b * T + t) * C + (size_t)h * hs;
                double D = 0, Dabs = 0, l = lse[((size_t)b * NH + h) * T + t];
                for (int i = 0; i < hs; i++) {
                    D += (double)dout[go + i] * out[go + i];
                    Dabs += fabs((double)dout[go + i] * out[go + i]);
                }
                for (int s = 0; s <= t; s++) {
                    size_t ko = ((size_t)b * T + s) * C3 + C + (size_t)h * hs, vo = ko + C;
                    double sv = 0, dp = 0, dpabs = 0;
                    for (int i = 0; i < hs; i++) {
                        sv += (double)qr[qo + i] * qr[ko + i];
                        dp += r64_rl(dout[go + i], lo) * qr[vo + i];
                        dpabs += fabs(r64_rl(dout[go + i], lo) * qr[vo + i]);
                    }
                    double p = exp(sv * scale - l), pl = r64_rl((float)p, lo);
                    double ds = r64_rl((float)(scale * p * (dp - D)), lo);
                    /* dP - D cancels: a backend's fp32 sums may miss it by (hs + 2) 2^-24
                     * of their |terms|, which dS passes on unrounded to dq and dk; that
                     * allowance is added to their scale, divided by the bound on max error
                     * r64_lse_bounds applies to it (so error <= bound * scale still) */
                    double eds = scale * p * (hs + 2) * 0x1p-24 * (dpabs + Dabs) / bmax;
                    for (int i = 0; i < hs; i++) {
                        double g = r64_rl(dout[go + i], lo);
                        r[vo + i] += pl * g;
                        rs[vo + i] += fabs(pl * g);
                        r[qo + i] += ds * qr[ko + i];
                        rs[qo + i] += fabs(ds * qr[ko + i]) + eds * fabs(qr[ko + i]);
                        r[ko + i] += ds * qr[qo + i];
                        rs[ko + i] += fabs(ds * qr[qo + i]) + eds * fabs(qr[qo + i]);
                    }
                }
            }
}

void r64_scaled_err(const float *a, const double *r, const double *s, size_t n, double *max,
                    double *mean)
{
    double mx = 0, sum = 0;
    for (size_t i = 0; i < n; i++) {
        double e = isfinite(a[i]) ? fabs(a[i] - r[i]) / (s[i] > 1e-30 ? s[i] : 1e-30) : INFINITY;
        sum += e;
        if (!(e <= mx)) mx = e;
    }
    *max = mx;
    *mean = n ? sum / (double)n : 0;
}

void r64_scaled_err_lo(const float *a, const double *r, const double *s, size_t n, int lo,
                       double *max, double *mean)
{
    double u = lo == LLM_DT_BF16 ? 0x1p-8 : 0x1p-11, tiny = lo == LLM_DT_BF16 ? 0 : 0x1p-25;
    double mx = 0, sum = 0;
    for (size_t i = 0; i < n; i++) {
        double e = INFINITY;
        if (isfinite(a[i])) {
            e = fabs(a[i] - r[i]) - u * fabs(r[i]) - tiny;
            e = (e > 0 ? e : 0) / (s[i] > 1e-30 ? s[i] : 1e-30);
        }
        sum += e;
        if (!(e <= mx)) mx = e;
    }
    *max = mx;
    *mean = n ? sum / (double)n : 0;
}

void r64_lse_bounds(int lo, int fused_out, size_t n, double *max, double *mean)
{
    double u = lo == LLM_DT_BF16 ? 0x1p-8 : 0x1p-11;
    *max = 2 * u + 2e-5;
    *mean = (fused_out ? u / 2 : 2e-5) + (n ? 8 * u / (double)n : 0);
}
