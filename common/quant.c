/* quant.c — weight format conversion with input checks and error statistics; the block
 * arithmetic itself is shared with the kernels (kernels/cpu/quant_kern.h, quant_ref.c). */
#include "common/quant.h"

#include <math.h>

#include "kernels/cpu/quant_kern.h"

uint16_t llm_quant_f32_to_f16(float f) { return llm_f32_to_f16(f); }
float llm_quant_f16_to_f32(uint16_t h) { return llm_f16_to_f32(h); }
uint16_t llm_quant_f32_to_bf16(float f) { return llm_f32_to_bf16(f); }
float llm_quant_bf16_to_f32(uint16_t h) { return llm_bf16_to_f32(h); }

int llm_quant_is_weight_dtype(llm_dtype dt)
{
    return dt == LLM_DT_F32 || dt == LLM_DT_F16 || dt == LLM_DT_BF16 || dt == LLM_DT_Q8_0 ||
           dt == LLM_DT_Q4_0;
}

int llm_quant_is_block(llm_dtype dt)
{
    return dt == LLM_DT_Q8_0 || dt == LLM_DT_Q4_0;
}

int llm_quant_check_scales(llm_dtype dt, const void *p, uint64_t nbytes, llm_status *st)
{
    if (!llm_quant_is_block(dt))
        return LLM_OK;
    const unsigned char *b = p;
    size_t per = dt == LLM_DT_Q8_0 ? 34 : 18;
    for (uint64_t k = 0; k < nbytes / per; k++) {
        unsigned h = b[k * per] | (unsigned)b[k * per + 1] << 8;
        if ((h & 0x7c00) == 0x7c00)   /* exponent all ones: inf or nan */
            return llm_err(st, LLM_EDATA, "block %llu (weights %llu..%llu) has scale %s",
                           (unsigned long long)k, (unsigned long long)k * 32,
                           (unsigned long long)k * 32 + 31, h & 0x3ff ? "nan" : "inf");
    }
    return LLM_OK;
}

/* Largest magnitude each dtype can hold without overflow: f16 max 65504 (values up to
 * 65519.99 round down to it); block scales are f16, d = amax/127 (q8_0) or amax/8. */
static double dtype_limit(llm_dtype dt)
{
    switch (dt) {
    case LLM_DT_F16: return 65519.0;
    case LLM_DT_Q8_0: return 65504.0 * 127.0;
    case LLM_DT_Q4_0: return 65504.0 * 8.0;
    default: return INFINITY;
    }
}

/* dt is a weight format and n elements fill whole blocks of it. */
static int check_dtype(llm_dtype dt, uint64_t n, llm_status *st)
{
    if (!llm_quant_is_weight_dtype(dt))
        return llm_err(st, LLM_EUSAGE, "dtype '%s' is not a weight format", llm_dtype_name(dt));
    if (llm_quant_is_block(dt) && n % 32)
        return llm_err(st, LLM_EUSAGE, "%s needs a multiple of 32 elements (got %llu)",
                       llm_dtype_name(dt), (unsigned long long)n);
    return LLM_OK;
}

int llm_quant_encode(llm_dtype dt, const float *src, void *dst, uint64_t n, llm_status *st)
{
    int rc = check_dtype(dt, n, st);
    if (rc)
        return rc;
    double lim = dtype_limit(dt);
    for (uint64_t i = 0; i < n; i++) {
        float v = src[i];
        if (!isfinite(v))
            return llm_err(st, LLM_EDATA, "value at %llu is %s", (unsigned long long)i,
                           isnan(v) ? "nan" : "infinite");
        if (fabs(v) > lim)
            return llm_err(st, LLM_EDATA, "value at %llu (%g) is out of the range of %s",
                           (unsigned long long)i, (double)v, llm_dtype_name(dt));
    }
    switch (dt) {
    case LLM_DT_F32:
        memcpy(dst, src, (size_t)n * sizeof(float));
        break;
    case LLM_DT_F16: {
        uint16_t *h = dst;
        for (uint64_t i = 0; i < n; i++)
            h[i] = llm_f32_to_f16(src[i]);
        break;
    }
    case LLM_DT_BF16: {
        uint16_t *h = dst;
        for (uint64_t i = 0; i < n; i++)
            h[i] = llm_f32_to_bf16(src[i]);
        break;
    }
    case LLM_DT_Q8_0:
        llm_qk_quantize_row_q8_0(src, dst, (int64_t)n);
        break;
    default:
        llm_qk_quantize_row_q4_0(src, dst, (int64_t)n);
        break;
    }
    return LLM_OK;
}

int llm_quant_decode(llm_dtype dt, const void *src, float *dst, uint64_t n, llm_status *st)
{
    int rc = check_dtype(dt, n, st);
    if (rc)
        return rc;
    llm_qk_dequantize_row((int)dt, src, dst, (int64_t)n);
    return LLM_OK;
}

void llm_quant_err_add(llm_quant_err *e, const float *w, const float *q, uint64_t n)
{
    double se = 0, s = 0, mx = e->max_abs;
    for (uint64_t i = 0; i < n; i++) {
        double d = (double)w[i] - q[i];
        se += d * d;
        s += (double)w[i] * w[i];
        if (fabs(d) > mx)
            mx = fabs(d);
    }
    e->sum_sq_err += se;
    e->sum_sq += s;
    e->max_abs = mx;
    e->n += n;
}

void llm_quant_err_merge(llm_quant_err *a, const llm_quant_err *b)
{
    a->sum_sq_err += b->sum_sq_err;
    a->sum_sq += b->sum_sq;
    if (b->max_abs > a->max_abs)
        a->max_abs = b->max_abs;
    a->n += b->n;
}

double llm_quant_err_rmse(const llm_quant_err *e)
{
    return e->n ? sqrt(e->sum_sq_err / (double)e->n) : 0.0;
}

double llm_quant_err_rel(const llm_quant_err *e)
{
    return e->sum_sq > 0 ? sqrt(e->sum_sq_err / e->sum_sq) : 0.0;
}
