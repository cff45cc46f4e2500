/* safetensors_int.h — private parts shared by common/safetensors_*.c and common/gguf*.c. */
#ifndef LLM_SAFETENSORS_INT_H
#define LLM_SAFETENSORS_INT_H

#include "common/ckpt.h"
#include "common/tokenizer.h"

/* Write vocab.json, merges.txt and tokenizer_config.json for the tokenizer stored in c
 * into dir.  LLM_EDATA when c has no usable tokenizer. */
int llm_hf_tok_write(const llm_ckpt *c, const char *dir, int max_len, llm_status *st);

/* Read the tokenizer files of dir (vocab.json + merges.txt, else tokenizer.json).
 * *out is NULL when there are none.  The vocabulary must have 1 to vocab_size entries
 * (a model may have more embedding rows than its tokenizer has ids) and an
 * "<|endoftext|>" entry (its id is the end-of-text id; LLM_EDATA without one). */
int llm_hf_tok_read(const char *dir, int vocab_size, llm_tokenizer **out, llm_status *st);

/* The merges of a stored tokenizer: n x (left id, right id) from tensor tokenizer.merges
 * (NULL and 0 for the byte tokenizer). */
int llm_hf_tok_merges(const llm_ckpt *c, const int32_t **m, int64_t *n, llm_status *st);

#endif
