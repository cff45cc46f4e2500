/* shard.h — tensor- and pipeline-parallel shards of a GPT-2 .llmk checkpoint.
 *
 * A shard is a complete .llmk (model:, tokenizer:, train: sections and the tokenizer
 * tensors carried unchanged) holding the tensors one (tp rank, pp stage) needs, plus a
 * `shard:` section:
 *
 *   shard: {tp_rank, tp_size, pp_rank, pp_size, layer_begin, layer_end (exclusive),
 *           n_layer, source (crc32 of the source's tensor table, 8 hex digits),
 *           source_tensors (count), tensors: [{name, index (position in the source),
 *           split: rows|cols|replicated|rank0, shape (the full shape), and for rows/cols:
 *           axis, parts, begin, end; quant: converted|kept when llm-quantize rewrote
 *           the shard}], and from llm-quantize: dropped: [source indices of the tensors
 *           it dropped from this shard]}
 *
 * Megatron tensor parallelism over tp ranks (C = n_embd, Vp = padded vocab):
 *   attn.c_attn.weight (3C,C), .bias (3C): rows; q, k and v are 3 parts, each rank takes
 *     the same row range [begin,end) of every part, i.e. whole heads of q, k and v
 *   mlp.c_fc.weight (4C,C), .bias (4C): rows, 1 part
 *   attn.c_proj.weight (C,C), mlp.c_proj.weight (C,4C): cols (input columns)
 *   attn.c_proj.bias, mlp.c_proj.bias: rank0 (present on tp rank 0 only)
 *   ln_1, ln_2, ln_f, wpe: replicated;  wte (Vp,C): rows (vocabulary rows)
 * Pipeline stages own contiguous layer ranges; wte and wpe go with the first stage, ln_f
 * with the last, and wte (tied to the output projection) with the last stage too.
 * Optimizer moments opt.m.NAME / opt.v.NAME follow NAME.  Tokenizer tensors go to every
 * shard; any other tensor goes whole to tp rank 0 of stage 0.  Block-quantized tensors
 * (q8_0, q4_0: 32 elements per block along the row) are only cut on block boundaries.
 */
#ifndef LLM_SHARD_H
#define LLM_SHARD_H

#include <stdint.h>

#include "common/status.h"

#define LLM_SHARD_MAX_TP 256
#define LLM_SHARD_MAX_PP 256

/* How a tensor is cut (the `split:` of a shard entry). */
typedef enum { LLM_SPLIT_REPL = 0, LLM_SPLIT_RANK0, LLM_SPLIT_ROWS, LLM_SPLIT_COLS } llm_split_kind;

/* Copy one piece of a tensor of dtype dt and full shape (ndim, shape) between the full
 * data and the piece's data: ROWS takes rows [begin,end) of each of parts equal chunks
 * of dimension 0; COLS takes columns [begin,end) of dimension 1 of a 2-D tensor.
 * to_piece != 0 copies full -> piece, else piece -> full.  The caller has checked the
 * ranges (llm_shard_piece_ok). */
void llm_shard_copy_piece(void *full, void *piece, int dt, int ndim, const int64_t *shape,
                          llm_split_kind kind, int parts, int64_t begin, int64_t end,
                          int to_piece);

/* 0 when the piece is valid for that tensor (ranges inside, parts divides dim 0, block
 * types cut only at multiples of 32 elements), and then *pshape gets the piece's shape;
 * -1 otherwise. */
int llm_shard_piece_ok(int dt, int ndim, const int64_t *shape, llm_split_kind kind, int parts,
                       int64_t begin, int64_t end, int64_t *pshape);

/* Parse "5,7" (stage sizes, each >= 1) into v[0..*n); at most max entries.
 * LLM_EUSAGE for a malformed list. */
int llm_shard_parse_layers(const char *s, int *v, int max, int *n, llm_status *st);

/* Split the checkpoint at in into tp x pp files PREFIX-tp{i}-pp{j}.llmk (written
 * atomically, one at a time).  layers: pp stage sizes summing to n_layer, or NULL for
 * an even split (the first n_layer % pp stages get one layer more).
 * Errors: LLM_EUSAGE when the model does not divide (n_head or Vp not divisible by tp,
 * pp > n_layer, a quantized block would be cut, bad layer list); LLM_EDATA for an input
 * that is already a shard, has no gpt2 model section, or a parameter (or its moment)
 * whose shape does not fit the model section; those of llm_ckpt_open / llm_ckpt_write. */
int llm_shard_split(const char *in, int tp, int pp, const int *layers, const char *prefix,
                    llm_status *st);

/* Reassemble the shards paths[0..n) (any order) into out.  The set is validated: the
 * same source and sizes in every shard, each (tp, pp) exactly once, every source tensor
 * present with consistent dtype and shapes, copies of replicated tensors identical.
 * Split then merge gives every tensor byte for byte, in the source order.  Shards that
 * llm-quantize rewrote one by one must all carry the same quant type; a source index in
 * some shard's dropped list is left out (and must be in no shard's tensors), and the
 * quant section counts each source tensor marked converted (kept) once.
 * Errors: LLM_EDATA naming the shard and the problem; those of open/write. */
int llm_shard_merge(const char *const *paths, int n, const char *out, llm_status *st);

#endif
