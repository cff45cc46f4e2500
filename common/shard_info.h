/* shard_info.h — what `llm-shard info` and `llm-shard verify` print, kept out of main(). */
#ifndef LLM_SHARD_INFO_H
#define LLM_SHARD_INFO_H

#include <stdio.h>

#include "common/json.h"
#include "common/status.h"
#include "common/tree.h"

/* Print the header sections (model:, tokenizer:, train:, shard:, ...) and the tensor table
 * (name, dtype, shape, bytes, stored bytes, compressed or not) of the .llmk at path ("-":
 * stdin) to out; json != 0 prints one JSON document instead.  Only the header is read and
 * validated (the data is checked by llm_shard_verify).
 * Errors: those of llm_ckpt_open; LLM_EIO when out cannot be written. */
int llm_shard_info(const char *path, int json, FILE *out, llm_status *st);

/* Check the structure and every crc32 of the .llmk at path ("-": stdin), decompressing
 * compressed tensors.  On success prints "PATH: ok (N tensors, B bytes)" to out unless
 * quiet.  Errors: LLM_EDATA naming the problem and the first bad tensor, LLM_ENOINPUT. */
int llm_shard_verify(const char *path, int quiet, FILE *out, llm_status *st);

/* Write a tree as a JSON value: plain integers and finite numbers as numbers,
 * true/false as booleans, null/~/empty as null, everything else (and every quoted
 * scalar) as a string. */
void llm_shard_tree_json(llm_json *j, const llm_node *n);

#endif
