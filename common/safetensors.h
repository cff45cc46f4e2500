/* safetensors.h — the safetensors format (reader for hostile files, writer), an atomic
 * output file shared by the exporters, and Hugging Face GPT-2 import/export.
 *
 * safetensors: u64 little-endian header length N, N bytes of JSON (an object: tensor
 * name -> {"dtype", "shape", "data_offsets": [begin, end]}, optional "__metadata__":
 * {string: string}), then the data; offsets are relative to the data start, and the
 * tensors tile the data exactly (from 0, contiguous, no trailing bytes).
 */
#ifndef LLM_SAFETENSORS_H
#define LLM_SAFETENSORS_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "common/ckpt.h"
#include "common/afile.h"
#include "common/status.h"

#define LLM_ST_MAX_HEADER (100u << 20)   /* header size cap (the reference library's) */

typedef struct {
    char name[LLM_CKPT_NAME_MAX];
    char dtype[8];          /* "F32", "F16", "BF16", "I32", ... as in the file */
    int ndim;
    int64_t shape[LLM_CKPT_MAX_DIMS];
    uint64_t begin, end;    /* byte range relative to the data start */
    const void *data;       /* end - begin bytes inside the mapping */
} llm_st_tensor;

typedef struct llm_st_file llm_st_file;

/* Open and validate a safetensors file (mmap'd).  Checks: size >= 8, header length
 * <= LLM_ST_MAX_HEADER and inside the file, strict JSON (no duplicate keys, no NUL),
 * a top-level object of at most LLM_CKPT_MAX_TENSORS entries, each with exactly the keys
 * dtype (a known dtype), shape (<= 8 non-negative integers) and data_offsets (two
 * integers, begin <= end), bytes = elements x dtype size without overflow, and the
 * tensors tiling the data from 0 without gap, overlap or trailing bytes.
 * Errors: LLM_ENOINPUT, LLM_EDATA (the problem and the tensor named), LLM_ENOMEM. */
int llm_st_open(llm_st_file **out, const char *path, llm_status *st);
/* As llm_st_open on len bytes at buf (borrowed; must outlive f). */
int llm_st_open_mem(llm_st_file **out, const void *buf, size_t len, llm_status *st);
void llm_st_close(llm_st_file *f);
int llm_st_count(const llm_st_file *f);
const llm_st_tensor *llm_st_get(const llm_st_file *f, int i);
const llm_st_tensor *llm_st_find(const llm_st_file *f, const char *name);

/* Bytes per element of a safetensors dtype name, 0 when unknown. */
int llm_st_dtype_size(const char *dtype);

/* ---- writer ---- */
typedef struct llm_st_writer llm_st_writer;
int  llm_st_writer_new(llm_st_writer **out, llm_status *st);
void llm_st_writer_free(llm_st_writer *w);
/* Add a tensor (data borrowed until llm_st_write returns; nbytes must match dtype x
 * shape).  LLM_EUSAGE for a bad name, unknown dtype or size mismatch. */
int llm_st_add(llm_st_writer *w, const char *name, const char *dtype, int ndim,
               const int64_t *shape, const void *data, uint64_t nbytes, llm_status *st);
/* Write the file atomically: header JSON in insertion order, "__metadata__":
 * {"format": "pt"}, padded with spaces to a multiple of 8, then the data. */
int llm_st_write(llm_st_writer *w, const char *path, llm_status *st);

/* ---- Hugging Face GPT-2 ---- */

/* Export the gpt2 checkpoint at in to directory outdir (created when missing):
 * model.safetensors (transformer.* names, Conv1D weights transposed to (in, out), wte
 * with the real vocabulary rows only; f32/f16/bf16 as stored), config.json
 * (GPT2LMHeadModel) and the tokenizer (vocab.json + merges.txt; the byte tokenizer as a
 * 257-entry vocabulary without merges, which encodes to the same ids).  A checkpoint
 * without a tokenizer section gets no tokenizer files, and note (note_len bytes, may be
 * NULL; else "" or one line for stderr) says so.  Quantized tensors are refused
 * (LLM_EDATA).  Errors: those of llm_ckpt_open; LLM_EIO. */
int llm_hf_export(const char *in, const char *outdir, char *note, size_t note_len, llm_status *st);

/* Import a Hugging Face GPT-2 directory (model.safetensors, config.json, and vocab.json
 * + merges.txt or tokenizer.json when present) into the .llmk out.  Names with or
 * without the "transformer." prefix; attn.bias / attn.masked_bias buffers ignored;
 * lm_head.weight must equal wte (tied).  wte is padded with zero rows to Vp.  A
 * vocabulary that is exactly the 256 bytes + <|endoftext|> without merges becomes the
 * byte tokenizer.  Errors: LLM_ENOINPUT, LLM_EDATA (hostile or inconsistent input),
 * LLM_EIO. */
int llm_hf_import(const char *indir, const char *out, llm_status *st);

/* GPT-2's byte-to-unicode table: the code point that spells byte b in vocab.json,
 * merges.txt and GGUF token lists. */
unsigned llm_gpt2_byte_char(unsigned char b);
/* Append the UTF-8 spelling of bytes p[0..n) (through the table) to out (at least
 * 2n + 1 bytes); returns the length written (NUL-terminated). */
size_t llm_gpt2_spell(const unsigned char *p, size_t n, char *out);

#endif
