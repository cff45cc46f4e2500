/* llmc.h — llm.c GPT-2 model checkpoints (the files llm.c's train_gpt2 programs read
 * and write), converted to and from .llmk.
 *
 * An llm.c model file is a header of 256 little-endian int32 — magic 20240326, version
 * (3: fp32 parameters, 5: bf16), maxT, V, L, NH, C, Vp, the rest 0 — followed by the
 * parameters without padding in the order wte (Vp,C), wpe (maxT,C), then each of ln1w,
 * ln1b, qkvw, qkvb, attprojw, attprojb, ln2w, ln2b, fcw, fcb, fcprojw, fcprojb stacked
 * over the L layers, then lnfw, lnfb.  Weights are (out, in) like llmkit's, so every
 * per-layer .llmk tensor of common/model.h is a contiguous slice of the file. */
#ifndef LLM_LLMC_H
#define LLM_LLMC_H

#include <stddef.h>
#include <stdint.h>

#include "common/model.h"
#include "common/status.h"

#define LLM_LLMC_MAGIC 20240326
#define LLM_LLMC_HEADER_BYTES 1024

typedef struct {
    int version;              /* 3 (f32) or 5 (bf16) */
    llm_model_config cfg;     /* maxT, V, L, NH, C; padded_vocab = Vp */
    size_t nparams;
    size_t elem_size;         /* 4 or 2 */
} llm_llmc_info;

/* Parse and validate an llm.c header from the first len bytes of a file of file_size
 * bytes: magic, version 3 or 5, a valid GPT-2 shape with Vp = V rounded up to a
 * multiple of 128, and file_size exactly header + parameters.  LLM_EDATA names the
 * problem. */
int llm_llmc_parse_header(const void *buf, size_t len, uint64_t file_size, llm_llmc_info *info,
                          llm_status *st);

/* Convert llm.c file in (path or "-" for stdin) to .llmk out (path or "-"): the model
 * section from the header, one tensor per view named as in common/model.h, f32 for
 * version 3 and bf16 for version 5.  Errors: LLM_ENOINPUT, LLM_EDATA (malformed file),
 * LLM_EIO, LLM_ENOMEM. */
int llm_llmc_import(const char *in, const char *out, llm_status *st);

/* Convert .llmk in to an llm.c file out (path or "-"; files are written atomically).
 * The checkpoint must hold a gpt2 model section and every parameter tensor in f32, f16
 * or bf16 (q8_0/q4_0: LLM_EDATA, saying what to do instead); other tensors (optimizer
 * moments, tokenizer) are ignored.  llm.c holds all parameters in one dtype: any bf16
 * tensor makes the file version 5 and the others are rounded to bf16 (a model
 * llm-quantize made bf16 keeps wpe, norms and biases f32); else version 3, f16 widened
 * to f32 exactly.  note (note_len bytes, may be NULL) gets "" or one line saying what
 * was converted, for stderr.  llm.c -> .llmk -> llm.c reproduces the file byte for byte
 * (header words after the eighth are written as 0, as llm.c writes them). */
int llm_llmc_export(const char *in, const char *out, char *note, size_t note_len, llm_status *st);

#endif
