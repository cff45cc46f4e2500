/* quant_repack.c — q4_0 weights rearranged at load into groups of 8 rows
 * (LLM_QK_Q4_0R8, layout in quant_kern.h) for the AVX2 decode kernels, and row access
 * to any weight matrix (the embedding gather and the prefill dequantization). */
#include "kernels/cpu/quant_kern.h"

int llm_qk_repack_dtype(int dt, int mode)
{
    /* auto and on, AVX-512 hosts included: the repacked layout beat the plain AVX-512 q4_0
     * kernels there with its AVX2 kernels already (GPT-2 124M decode on 2 Zen 5 cores:
     * batch 1 +10-15%, batch 8 +10%), and has AVX-512 kernels of its own since */
    if (dt != LLM_QK_Q4_0 || mode == 0 || !llm_qk_isa_ok(LLM_QK_ISA_AVX2))
        return dt;
    return LLM_QK_Q4_0R8;
}

size_t llm_qk_matrix_bytes(int rdt, int64_t OC, int C)
{
    if (rdt == LLM_QK_Q4_0R8)
        return (size_t)((OC + 7) / 8) * 8 * llm_qk_row_bytes(LLM_QK_Q4_0, C);
    return (size_t)OC * llm_qk_row_bytes(rdt, C);
}

void llm_qk_repack_q4_0r8(void *dst, const void *w, int64_t OC, int C)
{
    int nb = C / 32;
    size_t rb = llm_qk_row_bytes(LLM_QK_Q4_0, C);
    for (int64_t g = 0; g < (OC + 7) / 8; g++) {
        unsigned char *q = (unsigned char *)dst + (size_t)g * nb * 144, *sc = q + (size_t)nb * 128;
        for (int r = 0; r < 8; r++) {
            int64_t o = g * 8 + r;
            for (int b = 0; b < nb; b++) {
                llm_block_q4_0 blk;
                if (o < OC)
                    memcpy(&blk, (const char *)w + (size_t)o * rb + (size_t)b * sizeof blk, sizeof blk);
                else {   /* padding rows: zero weights */
                    blk.d = 0;
                    memset(blk.q, 0x88, sizeof blk.q);
                }
                memcpy(sc + (size_t)b * 16 + 2 * r, &blk.d, 2);
                for (int j = 0; j < 4; j++)
                    memcpy(q + (size_t)b * 128 + 32 * j + 4 * r, blk.q + 4 * j, 4);
            }
        }
    }
}

void llm_qk_dequantize_wrow(int dt, const void *w, int C, int64_t o, float *y)
{
    if (dt != LLM_QK_Q4_0R8) {
        llm_qk_dequantize_row(dt, (const char *)w + (size_t)o * llm_qk_row_bytes(dt, C), y, C);
        return;
    }
    int nb = C / 32;
    for (int b = 0; b < nb; b++) {
        llm_block_q4_0 blk;
        llm_qk_r8_block(w, nb, o, b, &blk);
        llm_qk_dequantize_row(LLM_QK_Q4_0, &blk, y + (size_t)b * 32, 32);
    }
}

void llm_qk_dequantize_wrows(int dt, const void *w, int C, int64_t o0, int n, float *y)
{
    if (dt != LLM_QK_Q4_0R8) {
        for (int k = 0; k < n; k++)
            llm_qk_dequantize_wrow(dt, w, C, o0 + k, y + (size_t)k * C);
        return;
    }
    /* group by group: each 4-byte run of a chunk is 4 consecutive weights and the 4
     * sixteen places further of one row */
    int nb = C / 32;
    for (int64_t g = o0 / 8; g * 8 < o0 + n; g++) {
        const unsigned char *q = (const unsigned char *)w + (size_t)g * nb * 144, *sc = q + (size_t)nb * 128;
        for (int r = 0; r < 8; r++) {
            int64_t o = g * 8 + r;
            if (o < o0 || o >= o0 + n)
                continue;
            float *yr = y + (size_t)(o - o0) * C;
            for (int b = 0; b < nb; b++) {
                uint16_t h;
                memcpy(&h, sc + (size_t)b * 16 + 2 * r, 2);
                float d = llm_f16_to_f32(h);
                const unsigned char *p = q + (size_t)b * 128 + 4 * r;
                float *yb = yr + (size_t)b * 32;
                for (int j = 0; j < 4; j++)
                    for (int i = 0; i < 4; i++) {
                        unsigned char v = p[32 * j + i];
                        yb[4 * j + i] = d * ((v & 0xf) - 8);
                        yb[16 + 4 * j + i] = d * ((v >> 4) - 8);
                    }
            }
        }
    }
}
