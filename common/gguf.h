/* gguf.h — export a GPT-2 .llmk as GGUF v3 for llama.cpp (architecture "gpt2").
 *
 * GGUF v3: "GGUF", u32 version 3, u64 tensor count, u64 key/value count, the key/values
 * (u64-length strings, u32 value types, arrays as u32 type + u64 count), the tensor
 * infos (name, u32 n_dims, u64 ne[] innermost first, u32 ggml type, u64 offset), zero
 * padding to general.alignment (32), then the tensor data, each tensor at a multiple of
 * 32.  All little-endian.
 *
 * Tensor map (llmkit -> llama.cpp; an (out,in) row-major weight is ne = [in, out], the
 * same bytes): wte rows [0,V) -> token_embd.weight and output.weight (tied), wpe ->
 * position_embd.weight, h.N.ln_1 -> blk.N.attn_norm, attn.c_attn -> blk.N.attn_qkv,
 * attn.c_proj -> blk.N.attn_output, ln_2 -> blk.N.ffn_norm, mlp.c_fc -> blk.N.ffn_up,
 * mlp.c_proj -> blk.N.ffn_down, ln_f -> output_norm (.weight and .bias each).
 * f32, f16, bf16, q8_0 and q4_0 data are copied unchanged (the block layouts are GGML's).
 */
#ifndef LLM_GGUF_H
#define LLM_GGUF_H

#include "common/status.h"

#define LLM_GGUF_ALIGN 32

/* Write the gpt2 checkpoint at in as GGUF file out (atomically).  Metadata: general.*,
 * gpt2.{context_length, embedding_length, feed_forward_length, block_count,
 * attention.head_count, attention.layer_norm_epsilon}, and from the stored tokenizer
 * tokenizer.ggml.{model "gpt2", pre "gpt-2", tokens, token_type, merges, bos/eos ids}.
 * Errors: those of llm_ckpt_open; LLM_EDATA for a missing tensor, a dtype GGUF cannot
 * hold or a file without tokenizer; LLM_EIO. */
int llm_gguf_export(const char *in, const char *out, llm_status *st);

#endif
