/* quant_kern.h — internal: block layouts, half-precision conversions and the CPU matmul
 * kernels for bf16/f16/q8_0/q4_0 weights (quant_ref.c, quant_avx2.c, quant_avx512.c,
 * quant_matmul.c).  Kernels do not include common/; common/quant.c builds on this file.
 *
 * Block layouts are byte-identical to GGML's (so a GGUF export is a copy):
 *   q8_0: 34 bytes per 32 weights: f16 scale d, then int8 q[32];        w = d * q
 *   q4_0: 18 bytes per 32 weights: f16 scale d, then 16 bytes; byte j holds weight j in
 *         its low nibble and weight j+16 in its high nibble, each stored as q+8 (0..15);
 *         w = d * (nibble - 8)
 * The f16 scale is little-endian IEEE binary16 (stored as two bytes, no alignment).
 */
#ifndef LLM_QUANT_KERN_H
#define LLM_QUANT_KERN_H

#include <stdint.h>
#include <string.h>

#include "kernels/backend.h"

/* Numerically equal to llm_dtype (common/ckpt.h). */
enum { LLM_QK_F32 = 0, LLM_QK_F16 = 1, LLM_QK_BF16 = 2, LLM_QK_Q8_0 = 7, LLM_QK_Q4_0 = 8 };

#define LLM_QK_BLOCK 32

typedef struct {
    uint16_t d;
    int8_t q[32];
} __attribute__((packed)) llm_block_q8_0;

typedef struct {
    uint16_t d;
    uint8_t q[16];
} __attribute__((packed)) llm_block_q4_0;

_Static_assert(sizeof(llm_block_q8_0) == 34, "q8_0 block must be 34 bytes");
_Static_assert(sizeof(llm_block_q4_0) == 18, "q4_0 block must be 18 bytes");

/* IEEE binary16 -> float, exact (denormals, inf and NaN included). */
static inline float llm_f16_to_f32(uint16_t h)
{
    uint32_t sign = (uint32_t)(h & 0x8000) << 16, e = (h >> 10) & 0x1f, m = h & 0x3ff, u;
    if (e == 0x1f) {
        u = sign | 0x7f800000u | (m << 13);
    } else if (e == 0) {
        /* zero or a denormal: m * 2^-24, exact in float */
        float f = (float)m * 5.9604644775390625e-8f;
        memcpy(&u, &f, 4);
        u |= sign;
    } else {
        u = sign | ((e + 112) << 23) | (m << 13);
    }
    float f;
    memcpy(&f, &u, 4);
    return f;
}

/* float -> IEEE binary16, round to nearest even; overflow gives inf, NaN stays NaN. */
static inline uint16_t llm_f32_to_f16(float f)
{
    uint32_t u;
    memcpy(&u, &f, 4);
    uint16_t sign = (uint16_t)((u >> 16) & 0x8000);
    uint32_t a = u & 0x7fffffffu;
    if (a >= 0x7f800000u)                     /* inf or NaN (NaN keeps a quiet bit) */
        return sign | 0x7c00 | (a > 0x7f800000u ? 0x200 : 0);
    if (a >= 0x477ff000u)                     /* rounds to >= 65520: inf */
        return sign | 0x7c00;
    if (a < 0x38800000u) {                    /* below the smallest normal 2^-14 */
        if (a < 0x33000000u)                  /* below half the smallest denormal: 0 */
            return sign;
        /* denormal: shift the full mantissa, round to nearest even */
        uint32_t e = a >> 23, m = (a & 0x7fffff) | 0x800000;
        int shift = 126 - (int)e;             /* 14..24 */
        uint32_t q = m >> shift, rem = m & ((1u << shift) - 1), half = 1u << (shift - 1);
        if (rem > half || (rem == half && (q & 1)))
            q++;
        return sign | (uint16_t)q;
    }
    /* normal: rebias, then round the 13 dropped bits to nearest even (a carry into the
     * exponent is the correct result) */
    uint32_t r = a - 0x38000000u;
    r += 0xfff + ((r >> 13) & 1);
    return sign | (uint16_t)(r >> 13);
}

static inline float llm_bf16_to_f32(uint16_t h)
{
    uint32_t u = (uint32_t)h << 16;
    float f;
    memcpy(&f, &u, 4);
    return f;
}

/* float -> bfloat16, round to nearest even; NaN stays NaN (quiet bit set). */
static inline uint16_t llm_f32_to_bf16(float f)
{
    uint32_t u;
    memcpy(&u, &f, 4);
    if ((u & 0x7fffffffu) > 0x7f800000u)
        return (uint16_t)((u >> 16) | 0x40);
    u += 0x7fff + ((u >> 16) & 1);
    return (uint16_t)(u >> 16);
}

/* s + h[c..C) . x[c..C), added in order: the f16 or bf16 (dt) dot product of the scalar
 * kernel and the tail of the vector kernels. */
static inline float llm_qk_half_dot(float s, const uint16_t *h, int dt, const float *x, int c, int C)
{
    for (; c < C; c++)
        s += (dt == LLM_QK_F16 ? llm_f16_to_f32(h[c]) : llm_bf16_to_f32(h[c])) * x[c];
    return s;
}

/* q4_0 repacked for the decode kernels: not a file dtype, made at load by llm_qk_repack
 * (the same weights and scales, rearranged).  A (OC,C) matrix is stored as groups of 8
 * rows (the last group padded with zero rows: scale 0, nibbles 8), group g at
 * g * nb * 144 bytes (nb = C/32): first nb nibble blocks of 128 bytes, then nb runs of
 * the 8 rows' f16 scales (16 bytes).  Nibble block b is 4 chunks of 32 bytes; chunk j
 * holds bytes 4j..4j+3 of the 8 rows' original q4_0 block b, row r at bytes 4r..4r+3:
 * its low nibbles are the row's weights 4j..4j+3, its high nibbles weights 16+4j..19+4j.
 * One activation block then meets 8 rows with 8 broadcast 4-byte groups, and a lane of
 * 32 bits is one row's partial dot. */
#define LLM_QK_Q4_0R8 0x108

/* The dtype to repack weights of dtype dt to for the decode kernels of this CPU, or dt
 * itself (no repack).  mode 0: never; otherwise (auto, < 0, or on, > 0) LLM_QK_Q4_0R8 for
 * q4_0 whenever the CPU has AVX2 (AVX-512 hosts included: measured faster there too). */
int llm_qk_repack_dtype(int dt, int mode);
/* Bytes of a (OC,C) matrix in dtype rdt (the padding of a repacked one included). */
size_t llm_qk_matrix_bytes(int rdt, int64_t OC, int C);
/* Rewrite the q4_0 matrix w (OC,C) as LLM_QK_Q4_0R8 into dst (llm_qk_matrix_bytes). */
void llm_qk_repack_q4_0r8(void *dst, const void *w, int64_t OC, int C);
/* Row o of the matrix w (rows of C weights) of dtype dt, any dtype of
 * llm_qk_dequantize_row or LLM_QK_Q4_0R8, dequantized to y[C]. */
void llm_qk_dequantize_wrow(int dt, const void *w, int C, int64_t o, float *y);
/* Rows o0..o0+n of such a matrix to y (n rows of C floats). */
void llm_qk_dequantize_wrows(int dt, const void *w, int C, int64_t o0, int n, float *y);
/* The original q4_0 block b of row o of a LLM_QK_Q4_0R8 matrix (nb blocks per row). */
static inline void llm_qk_r8_block(const void *w, int nb, int64_t o, int b, llm_block_q4_0 *out)
{
    const unsigned char *g = (const unsigned char *)w + (size_t)(o / 8) * nb * 144;
    int r = (int)(o % 8);
    memcpy(&out->d, g + (size_t)nb * 128 + (size_t)b * 16 + 2 * r, 2);
    for (int j = 0; j < 4; j++)
        memcpy(out->q + 4 * j, g + (size_t)b * 128 + 32 * j + 4 * r, 4);
}

/* Quantize one row of n floats (n a multiple of 32) to q8_0 blocks: d = max|x|/127,
 * q = round(x/d) (halves away from zero).  Used for weights and, on the fly, for
 * activations.  Inputs must be finite (callers check). */
void llm_qk_quantize_row_q8_0(const float *x, llm_block_q8_0 *y, int64_t n);
/* The same in portable C, and with AVX2 (the same bytes; llm_qk_quantize_row_q8_0 takes
 * the AVX2 one when the CPU has it). */
void llm_qk_quantize_row_q8_0_scalar(const float *x, llm_block_q8_0 *y, int64_t n);
void llm_qk_quantize_row_q8_0_avx2(const float *x, llm_block_q8_0 *y, int64_t n);
/* q4_0: the value of largest magnitude m (with its sign) maps to -8: d = m/-8,
 * q = clamp(floor(x/d + 8.5), 0, 15). */
void llm_qk_quantize_row_q4_0(const float *x, llm_block_q4_0 *y, int64_t n);
/* Dequantize n weights of dtype dt (f32/f16/bf16/q8_0/q4_0) starting at element 0. */
void llm_qk_dequantize_row(int dt, const void *x, float *y, int64_t n);
/* Bytes of one row of C weights of dtype dt. */
size_t llm_qk_row_bytes(int dt, int C);

/* Instruction sets for the matmul kernels.  LLM_QK_ISA_BEST picks the best one the CPU
 * supports at run time. */
enum { LLM_QK_ISA_BEST = -1, LLM_QK_ISA_SCALAR = 0, LLM_QK_ISA_AVX2 = 1,
       LLM_QK_ISA_AVX512 = 2, LLM_QK_ISA_AVX512VNNI = 3 };
/* 1 when the running CPU supports isa. */
int llm_qk_isa_ok(int isa);
/* The best of them on this CPU (what LLM_QK_ISA_BEST picks). */
int llm_qk_isa_best(void);
const char *llm_qk_isa_name(int isa);

/* out(N,OC) = inp(N,C) @ w(OC,C)^T + bias, w of dtype dt in {f16, bf16, q8_0, q4_0,
 * q4_0r8 (LLM_QK_Q4_0R8: any isa; from AVX2 up its own kernels)} (C a multiple of 32 for
 * the q formats).  q formats: each input row is quantized to
 * q8_0 first and the dot products are integer per block, so every (n, o) value is the
 * same whatever N is.  threads <= 1 runs on the caller's thread.  With isa >= AVX2 and
 * N >= LLM_QK_GEMM_MIN_ROWS (prefill), slices of w are dequantized to f32 and multiplied
 * with sgemm instead (compute-bound there; exact weights, unquantized activations),
 * except the q formats from AVX-512 up, whose integer kernels are the faster at every N
 * (there a row's result never depends on N).
 * Returns 0, or -1 (nothing written) for an unsupported dtype, a bad C, an isa the CPU
 * lacks, or no memory for the scratch buffers. */
/* (64, as infer_fast.c's SGEMM_MIN_ROWS: below it a row's result does not depend on N,
 * which llm-infer's decode steps rely on; 32 before, when at N 32-63 the sgemm path was
 * ~15% faster for q8_0 and ~10% slower for q4_0 at batch-40 decode of GPT-2 124M) */
#define LLM_QK_GEMM_MIN_ROWS 64
int llm_qk_matmul(float *out, const float *inp, const void *w, int dt, const float *bias,
                  int N, int C, int OC, int isa, int threads);

/* The per-ISA row kernels (quant_ref.c / quant_avx2.c / quant_avx512.c): dots of weight
 * rows o0..o1 against R <= 4 prepared input rows.  xq: q8_0 input blocks (q formats),
 * xf: f32 input rows (f16/bf16).  out rows are ldo apart. */
void llm_qk_rows_scalar(float *out, int ldo, const void *w, int dt, const llm_block_q8_0 *xq,
                        const float *xf, int R, int C, int o0, int o1);
void llm_qk_rows_avx2(float *out, int ldo, const void *w, int dt, const llm_block_q8_0 *xq,
                      const float *xf, int R, int C, int o0, int o1);
/* LLM_QK_Q4_0R8 weights, AVX2: rows o0..o1 against R <= 4 q8_0 input rows (row r's
 * block b at xq[r * nb + b]), with xs[i] = 8 * the sum of block i's quants and xd[i] its
 * scale as float.  The same results bit for bit as llm_qk_rows_scalar on the q4_0 rows. */
void llm_qk_rows_r8_avx2(float *out, int ldo, const void *w, const llm_block_q8_0 *xq,
                         const int32_t *xs, const float *xd, int R, int nb, int o0, int o1);
/* The same with AVX-512 (vpdpbusd when vnni) for R <= 8 input rows, 16 weight rows per
 * register: the same results bit for bit. */
void llm_qk_rows_r8_avx512(float *out, int ldo, const void *w, const llm_block_q8_0 *xq,
                           const int32_t *xs, const float *xd, int R, int nb, int o0, int o1,
                           int vnni);
/* llm_qk_dequantize_wrows for LLM_QK_Q4_0R8 with AVX2, the same floats. */
void llm_qk_dequantize_r8_avx2(const void *w, int C, int64_t o0, int n, float *y);
/* llm_qk_dequantize_wrows for LLM_QK_Q8_0 with AVX2, the same floats. */
void llm_qk_dequantize_q8_0_avx2(const void *w, int C, int64_t o0, int n, float *y);
/* AVX-512, f16/bf16 weights: rows o0..o1 against R <= 4 f32 input rows. */
void llm_qk_rows_avx512(float *out, int ldo, const void *w, int dt, const float *xf, int R,
                        int C, int o0, int o1);
/* AVX-512, q8_0/q4_0 weights: the q8_0 input rows prepared once per matmul, per row and
 * pair of blocks (2p, 2p+1): their 64 quants (zeros past the last block) and their 16
 * scales as floats (each block's 8 times; 0 past the last block).  A row of nb blocks
 * takes (nb + 1) / 2 entries; llm_qk_pack_x512 prepares one. */
typedef struct {
    _Alignas(64) int8_t q[64];
    float d[16];
} llm_qk_x512;
void llm_qk_pack_x512(llm_qk_x512 *px, const llm_block_q8_0 *xq, int nb);
/* rows o0..o1 of w against R <= 8 packed input rows (px: the first of them); VNNI's
 * vpdpbusd when vnni, else maddubs + madd: the same bits as llm_qk_rows_avx2. */
void llm_qk_qrows_avx512(float *out, int ldo, const void *w, int dt, const llm_qk_x512 *px,
                         int R, int nb, int o0, int o1, int vnni);

/* Inference-op adapters (kernels/cpu/infer_ref.c and infer_fast.c dispatch here for
 * non-f32 weights). */
int  llm_qk_dtype_ok(int dt);
void llm_qk_embed_rows(float *out, const int32_t *ids, const int32_t *pos, const void *wte,
                       int wte_dt, const float *wpe, int N, int C);

#endif
