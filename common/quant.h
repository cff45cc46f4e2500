/* quant.h — weight formats bf16, f16, q8_0, q4_0: conversion, block quantization and
 * error statistics (reference C; the matmul kernels are in kernels/cpu/quant_*.c).
 *
 * Layouts (byte-identical to GGML, so a GGUF export is a copy):
 *   f16   IEEE binary16, little-endian; bf16  the top 16 bits of an f32
 *   q8_0  34 bytes per block of 32: f16 scale d, int8 q[32];        w = d*q,
 *         d = max|w|/127, q = round(w/d)
 *   q4_0  18 bytes per block of 32: f16 scale d, 16 bytes; byte j = (q[j]+8) | (q[j+16]+8)<<4,
 *         w = d*q, d = m/-8 for m the weight of largest magnitude, q in -8..7
 * Conversions round to nearest even.  Error bounds of a round trip (per element, for a
 * block with amax = max|w|): f16 |e| <= 2^-11 |w| (normal range), bf16 2^-8 |w|,
 * q8_0 amax/254 + 127 |d - f16(d)|, q4_0 amax/16 + 8 |d - f16(d)| (amax/8 + ... for values
 * of the sign opposite to the extreme beyond 7.5 d, which clamp to +7: GGML's q4_0).
 */
#ifndef LLM_QUANT_H
#define LLM_QUANT_H

#include <stdint.h>

#include "common/ckpt.h"
#include "common/status.h"

/* Scalar conversions (round to nearest even; NaN stays NaN, overflow gives inf). */
uint16_t llm_quant_f32_to_f16(float f);
float    llm_quant_f16_to_f32(uint16_t h);
uint16_t llm_quant_f32_to_bf16(float f);
float    llm_quant_bf16_to_f32(uint16_t h);

/* 1 for the dtypes weights can be converted to: f32, f16, bf16, q8_0, q4_0. */
int llm_quant_is_weight_dtype(llm_dtype dt);
/* 1 for the block formats q8_0 and q4_0. */
int llm_quant_is_block(llm_dtype dt);

/* Check the f16 block scales of nbytes of q8_0 or q4_0 data: LLM_EDATA naming the
 * first block whose scale is NaN or infinite (every weight of it would be), else 0.
 * Other dtypes: 0. */
int llm_quant_check_scales(llm_dtype dt, const void *p, uint64_t nbytes, llm_status *st);

/* Encode n floats at src as dtype dt into dst (llm_dtype_nbytes(dt, n) bytes; n a
 * multiple of 32 for block formats).  Errors (LLM_EDATA, nothing meaningful in dst): a
 * NaN or infinite input, naming the element index ("value at 12 is nan"); a value beyond
 * the range of f16 (f16 and, through the f16 block scale, q8_0/q4_0); LLM_EUSAGE for a
 * partial block or a dtype that is not a weight dtype. */
int llm_quant_encode(llm_dtype dt, const float *src, void *dst, uint64_t n, llm_status *st);

/* Decode n elements of dtype dt (a weight dtype) at src into floats. */
int llm_quant_decode(llm_dtype dt, const void *src, float *dst, uint64_t n, llm_status *st);

/* Error of an approximation q of w (n elements). */
typedef struct {
    double sum_sq_err;   /* sum (w-q)^2 */
    double sum_sq;       /* sum w^2 */
    double max_abs;      /* max |w-q| */
    uint64_t n;
} llm_quant_err;

/* Accumulate the error of q against w into e (e zeroed by the caller first). */
void llm_quant_err_add(llm_quant_err *e, const float *w, const float *q, uint64_t n);
/* Merge b into a (the same tallies over the union of elements). */
void llm_quant_err_merge(llm_quant_err *a, const llm_quant_err *b);
/* Root-mean-square error; relative error ||w-q|| / ||w|| (0 when w is all zeros). */
double llm_quant_err_rmse(const llm_quant_err *e);
double llm_quant_err_rel(const llm_quant_err *e);

#endif
