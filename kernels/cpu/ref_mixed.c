/* ref_mixed.c — reference ("cpu-ref") mixed-precision GEMM ops (the attention's are in
 * ref_forward.c and ref_backward.c, beside the fp32 ones): plain loops, operands rounded to lo on every use, products summed in double
 * (exact for a bf16 x bf16 or f16 x f16 product; the sum is then at least as accurate as
 * the fp32 accumulation the interface promises).  These define what the ops mean;
 * fast_mixed.c, fast_attention.c and the CUDA kernels are tested against them. */
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

