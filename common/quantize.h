/* quantize.h — rewrite a checkpoint's weights in another format (llm-quantize).
 *
 * Which tensors convert: 2-D floating-point (f32/f16/bf16) tensors named "wte" or
 * ending in ".weight" — the matmul weights and the embedding, which is also the tied
 * output projection (the output matmul then runs on the quantized matrix; llm-infer's
 * kernels take it as any other weight).  Everything else is copied unchanged: layernorm
 * weights and biases (1-D), "wpe" (positional embeddings: added, never multiplied, 3 MB
 * for GPT-2, and inference reads it as f32), tokenizer tensors, and tensors matched by a
 * --keep glob.  Block formats need rows that are a multiple of 32: other tensors stay
 * as they are (the report says why).  Optimizer moments ("opt.*") and the "train"
 * section are dropped (the result is an inference model).  Weights already in the type
 * (a q8_0 model quantized to q8_0 again) are copied as they are and counted as kept, not
 * converted.  The header gains a "quant" section {type, converted, kept (when any),
 * block}.  A shard (common/shard.h) stays one: its shard: section loses the dropped
 * tensors' entries (their source indices listed under `dropped`) and marks each entry
 * `quant: converted|kept`, so that llm_shard_merge reassembles the quantized shards.
 */
#ifndef LLM_QUANTIZE_H
#define LLM_QUANTIZE_H

#include <stdint.h>
#include <stdio.h>

#include "common/ckpt.h"
#include "common/quant.h"
#include "common/status.h"

typedef struct {
    llm_dtype type;            /* f32, f16, bf16, q8_0 or q4_0 */
    const char *const *keep;   /* fnmatch(3) globs of tensor names left unconverted */
    int nkeep;
    int stats;                 /* compute error statistics (one decode per tensor) */
    int threads;               /* <= 0: all cores */
} llm_quantize_opts;

typedef enum { LLM_QZ_CONVERT, LLM_QZ_COPY, LLM_QZ_DROP } llm_qz_action;

typedef struct {
    char name[LLM_CKPT_NAME_MAX];
    llm_dtype from, to;
    llm_qz_action action;
    const char *why;           /* static text for COPY/DROP ("--keep", "1-D", ...) */
    uint64_t nelem, bytes_in, bytes_out;
    llm_quant_err err;         /* CONVERT with stats only */
    int kept;                  /* COPY of a 2-D weight already in the type */
} llm_qz_entry;

typedef struct {
    llm_dtype type;
    llm_qz_entry *t;
    int n;
    int converted, dropped;
    int kept;                  /* weights already in the type, copied as they are */
    int shard_cut;             /* a shard's pieces whose rows the split cut below a multiple
                                  of 32 (the whole tensor's are): left unconverted */
    int train_dropped;         /* 1 when the input had a train: section */
    uint64_t nelem, bytes_in, bytes_out;   /* over written tensors */
    uint64_t dropped_bytes;
    uint64_t file_in, file_out;            /* whole files (file_out 0 for a pipe) */
    llm_quant_err err;         /* over converted tensors */
    int stats;
    double seconds;
} llm_qz_report;

/* Read in (path or "-"), write out (path or "-", atomically for a path) as o->type.
 * rep (zeroed and filled; free with llm_quantize_report_free) may be NULL.
 * Errors: LLM_ENOINPUT (missing input), LLM_EDATA (not a .llmk file, corrupt, NaN or
 * out-of-range values in a converted tensor, or already quantized to a different block
 * format), LLM_EUSAGE (bad type), LLM_EIO, LLM_ENOMEM. */
int llm_quantize_file(const char *in, const char *out, const llm_quantize_opts *o,
                      llm_qz_report *rep, llm_status *st);
void llm_quantize_report_free(llm_qz_report *r);

/* Print the report: a table (one line per tensor, then totals) or, json != 0, one JSON
 * document {"type", "tensors": [...], "totals": {...}}. */
void llm_quantize_report_print(const llm_qz_report *r, FILE *f, int json);

#endif
