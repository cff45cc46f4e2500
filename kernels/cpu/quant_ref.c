/* quant_ref.c — reference (portable C) block quantization and the scalar matmul row
 * kernel for f16/bf16/q8_0/q4_0 weights; the SIMD kernels are tested against these. */
#include <math.h>
#include <stdlib.h>

#include "kernels/cpu/quant_kern.h"

void llm_qk_quantize_row_q8_0(const float *x, llm_block_q8_0 *y, int64_t n)
{
    if (llm_qk_isa_ok(LLM_QK_ISA_AVX2))   /* a few loads of the CPU model's flags */
        llm_qk_quantize_row_q8_0_avx2(x, y, n);
    else
        llm_qk_quantize_row_q8_0_scalar(x, y, n);
}

void llm_qk_quantize_row_q8_0_scalar(const float *x, llm_block_q8_0 *y, int64_t n)
{
    for (int64_t b = 0; b < n / 32; b++, x += 32) {
        float amax = 0.0f;
        for (int j = 0; j < 32; j++)
            amax = fmaxf(amax, fabsf(x[j]));
        float d = amax / 127.0f, id = d != 0.0f ? 1.0f / d : 0.0f;
        if (!isfinite(id))   /* d below 2^-128: the f16 scale is 0 anyway */
            id = 0.0f;
        y[b].d = llm_f32_to_f16(d);
        for (int j = 0; j < 32; j++)
            /* the clamp also maps a NaN activation to a value instead of undefined
             * behaviour in the cast (weights are checked finite before this) */
            y[b].q[j] = (int8_t)roundf(fminf(fmaxf(x[j] * id, -127.0f), 127.0f));
    }
}

void llm_qk_quantize_row_q4_0(const float *x, llm_block_q4_0 *y, int64_t n)
{
    for (int64_t b = 0; b < n / 32; b++, x += 32) {
        /* the signed value of largest magnitude maps exactly to -8, which uses the one
         * extra negative level of 4 bits */
        float amax = 0.0f, m = 0.0f;
        for (int j = 0; j < 32; j++)
            if (fabsf(x[j]) > amax) {
                amax = fabsf(x[j]);
                m = x[j];
            }
        float d = m / -8.0f, id = d != 0.0f ? 1.0f / d : 0.0f;
        if (!isfinite(id))   /* d below 2^-128: the f16 scale is 0 anyway */
            id = 0.0f;
        y[b].d = llm_f32_to_f16(d);
        for (int j = 0; j < 16; j++) {
            float a = floorf(x[j] * id + 8.5f), c = floorf(x[j + 16] * id + 8.5f);
            int lo = a < 0 ? 0 : a > 15 ? 15 : (int)a;
            int hi = c < 0 ? 0 : c > 15 ? 15 : (int)c;
            y[b].q[j] = (uint8_t)(lo | hi << 4);
        }
    }
}

void llm_qk_dequantize_row(int dt, const void *x, float *y, int64_t n)
{
    switch (dt) {
    case LLM_QK_F32:
        memcpy(y, x, (size_t)n * sizeof(float));
        break;
    case LLM_QK_F16: {
        const uint16_t *h = x;
        for (int64_t i = 0; i < n; i++)
            y[i] = llm_f16_to_f32(h[i]);
        break;
    }
    case LLM_QK_BF16: {
        const uint16_t *h = x;
        for (int64_t i = 0; i < n; i++)
            y[i] = llm_bf16_to_f32(h[i]);
        break;
    }
    case LLM_QK_Q8_0: {
        const llm_block_q8_0 *b = x;
        for (int64_t k = 0; k < n / 32; k++) {
            float d = llm_f16_to_f32(b[k].d);
            for (int j = 0; j < 32; j++)
                y[k * 32 + j] = d * b[k].q[j];
        }
        break;
    }
    case LLM_QK_Q4_0: {
        const llm_block_q4_0 *b = x;
        for (int64_t k = 0; k < n / 32; k++) {
            float d = llm_f16_to_f32(b[k].d);
            for (int j = 0; j < 16; j++) {
                y[k * 32 + j] = d * ((b[k].q[j] & 0xf) - 8);
                y[k * 32 + j + 16] = d * ((b[k].q[j] >> 4) - 8);
            }
        }
        break;
    }
    default:
        break;
    }
}

size_t llm_qk_row_bytes(int dt, int C)
{
    switch (dt) {
    case LLM_QK_F32: return (size_t)C * 4;
    case LLM_QK_F16:
    case LLM_QK_BF16: return (size_t)C * 2;
    case LLM_QK_Q8_0: return (size_t)C / 32 * sizeof(llm_block_q8_0);
    case LLM_QK_Q4_0: return (size_t)C / 32 * sizeof(llm_block_q4_0);
    default: return 0;
    }
}

int llm_qk_dtype_ok(int dt)
{
    return dt == LLM_QK_F32 || dt == LLM_QK_F16 || dt == LLM_QK_BF16 || dt == LLM_QK_Q8_0 ||
           dt == LLM_QK_Q4_0 || dt == LLM_QK_Q4_0R8;
}

void llm_qk_embed_rows(float *out, const int32_t *ids, const int32_t *pos, const void *wte,
                       int wte_dt, const float *wpe, int N, int C)
{
    for (int i = 0; i < N; i++) {
        float *o = out + (size_t)i * C;
        const float *p = wpe + (size_t)pos[i] * C;
        llm_qk_dequantize_wrow(wte_dt, wte, C, ids[i], o);
        for (int c = 0; c < C; c++)
            o[c] += p[c];
    }
}

/* Integer dot of one q8_0 or q4_0 weight block with one q8_0 activation block. */
static int32_t block_dot(const void *wb, int dt, const llm_block_q8_0 *xb)
{
    int32_t s = 0;
    if (dt == LLM_QK_Q8_0) {
        const llm_block_q8_0 *w = wb;
        for (int j = 0; j < 32; j++)
            s += (int32_t)w->q[j] * xb->q[j];
    } else {
        const llm_block_q4_0 *w = wb;
        for (int j = 0; j < 16; j++)
            s += ((w->q[j] & 0xf) - 8) * (int32_t)xb->q[j] + ((w->q[j] >> 4) - 8) * (int32_t)xb->q[j + 16];
    }
    return s;
}

void llm_qk_rows_scalar(float *out, int ldo, const void *w, int dt, const llm_block_q8_0 *xq,
                        const float *xf, int R, int C, int o0, int o1)
{
    size_t rb = llm_qk_row_bytes(dt, C);
    int nb = C / 32;
    for (int o = o0; o < o1; o++) {
        const char *wr = (const char *)w + (size_t)o * rb;
        for (int r = 0; r < R; r++) {
            float s = 0.0f;
            if (dt == LLM_QK_Q4_0R8) {   /* the same blocks, fetched from their groups */
                const llm_block_q8_0 *xr = xq + (size_t)r * nb;
                for (int b = 0; b < nb; b++) {
                    llm_block_q4_0 wb;
                    llm_qk_r8_block(w, nb, o, b, &wb);
                    s += (float)block_dot(&wb, LLM_QK_Q4_0, &xr[b]) * (llm_f16_to_f32(wb.d) * llm_f16_to_f32(xr[b].d));
                }
            } else if (dt == LLM_QK_Q8_0 || dt == LLM_QK_Q4_0) {
                size_t bs = dt == LLM_QK_Q8_0 ? sizeof(llm_block_q8_0) : sizeof(llm_block_q4_0);
                const llm_block_q8_0 *xr = xq + (size_t)r * nb;
                for (int b = 0; b < nb; b++) {
                    const char *wb = wr + (size_t)b * bs;
                    uint16_t dw;
                    memcpy(&dw, wb, 2);
                    s += (float)block_dot(wb, dt, &xr[b]) * (llm_f16_to_f32(dw) * llm_f16_to_f32(xr[b].d));
                }
            } else {
                const uint16_t *h = (const uint16_t *)wr;
                const float *x = xf + (size_t)r * C;
                s = llm_qk_half_dot(s, h, dt, x, 0, C);
            }
            out[(size_t)r * ldo + o] = s;
        }
    }
}
