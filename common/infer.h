/* infer.h — inference engine: weights table over an mmap'd checkpoint, KV cache,
 * prefill/decode forward, logits for selected rows.
 *
 * The model file is opened with llm_ckpt_open (uncompressed tensors point into the
 * mapping) and each weight is referenced in place together with its dtype, so f32 files
 * need no copy and quantized dtypes only need kernels (backend infer_dtype_ok).
 * Everything runs through the inference pointers of kernels/backend.h.
 *
 * The scheduler (requests, sampling, batching) is in infer_sched.h; request parsing and
 * response writing in infer_io.h; perplexity in infer_eval.h.
 */
#ifndef LLM_INFER_H
#define LLM_INFER_H

#include <stddef.h>
#include <stdint.h>

#include "common/ckpt.h"
#include "common/model.h"
#include "common/status.h"
#include "common/tokenizer.h"
#include "kernels/backend.h"

/* A weight used in place: data (in the checkpoint mapping) and its llm_dtype. */
typedef struct {
    const void *p;
    int dtype;
} llm_wref;

typedef struct {
    llm_wref ln1_w, ln1_b, qkv_w, qkv_b, attn_proj_w, attn_proj_b;
    llm_wref ln2_w, ln2_b, fc_w, fc_b, fc_proj_w, fc_proj_b;
} llm_infer_layer;

/* Tensor-parallel state (infer_tp.h); NULL for a whole model. */
typedef struct llm_infer_tp llm_infer_tp;

typedef struct {
    llm_model_config cfg;
    llm_ckpt *ck;            /* owned: keeps the mapping alive */
    llm_tokenizer *tok;      /* owned; NULL when the file has none (ids only) */
    llm_backend *be;         /* not owned */
    llm_wref wte, wpe, lnf_w, lnf_b;
    llm_infer_layer *layers; /* n_layer */
    uint64_t weight_bytes;   /* bytes of all weights (what a decode step streams) */
    void **dev;              /* weights copied to device memory (non-CPU backends) */
    int n_dev;
    void **rep;              /* owned: weights repacked at load for the CPU decode kernels
                              * (q4_0 on AVX2: kernels/cpu/quant_kern.h, LLM_QK_Q4_0R8) */
    int n_rep;
    uint64_t repack_bytes;   /* heap bytes of rep (their originals' pages in the file
                              * mapping are released: llm_ckpt_release) */
    int repack_mode;         /* llm_qk_repack_dtype's mode (LLM_Q4_REPACK; -1 auto) */
    void **wide;             /* owned: f32 copies of bf16/f16 tensors the kernels read as
                              * f32 (wpe, layer norms, biases), widened at load */
    int n_wide;
    int tp_rank, tp_size;    /* tensor-parallel shard (0, 1 for a whole model): local
                              * heads n_head/tp_size, MLP 4C/tp_size, wte Vp/tp_size rows */
    llm_infer_tp *tp;        /* not owned; set by llm_infer_tp_join */
} llm_infer_model;

/* Check that be has the inference kernels; a CPU backend ("cpu", "cpu-ref") without them
 * gets them (llm_backend_cpu_infer_init).  LLM_ENODEV for a backend that has none,
 * naming it. */
int llm_infer_backend_ready(llm_backend *be, llm_status *st);

/* Open a model file and build the weights table.  A tensor-parallel shard (shard:
 * section, pp_size 1) opens with its local pieces (tp_rank, tp_size set); it computes
 * only once joined to its peers (llm_infer_tp_join).  Errors: LLM_ENOINPUT (missing file),
 * LLM_EDATA (corrupt file, missing tensor, wrong shape, a tensor of a dtype it cannot
 * use: the tensor is named; bf16/f16 position embedding, layer norms and biases are
 * widened to f32 copies at load), LLM_ENODEV (backend without inference kernels, or a weight
 * dtype it cannot compute with, e.g. q4_0 on cuda: the tensor is named), LLM_ENOMEM.
 * verify != 0 checks every crc32.  A file without a tokenizer opens (tok NULL).
 * On a backend whose infer_dtype_ok takes the repacked layout (the fast "cpu" one, also
 * under llm-profile's wrapper), q4_0 weights are repacked into heap buffers for the
 * decode kernels when the CPU prefers it (AVX2 without AVX-512; LLM_Q4_REPACK=0 never, =1
 * whenever the CPU has AVX2): the same weights, the same results bit for bit as the
 * scalar kernels; repack_bytes counts them. */
int llm_infer_model_open(llm_infer_model **out, const char *path, llm_backend *be, int verify,
                         llm_status *st);
void llm_infer_model_free(llm_infer_model *m);

/* One position to run: token id at position pos of cache slot slot. */
typedef struct {
    int32_t id, slot, pos;
} llm_infer_row;

typedef struct llm_infer_ctx llm_infer_ctx;

/* KV cache for `slots` sequences of up to max_seq_len positions each
 * (slots x n_layer x maxT x C floats for K and V, allocated zeroed so pages are only
 * touched as positions fill) plus activations for up to max_rows rows per forward.
 * m must outlive the context. */
int llm_infer_ctx_new(llm_infer_ctx **out, llm_infer_model *m, int slots, int max_rows,
                      llm_status *st);
void llm_infer_ctx_free(llm_infer_ctx *c);
int llm_infer_ctx_max_rows(const llm_infer_ctx *c);
/* Bytes held by the KV cache and activations. */
size_t llm_infer_ctx_bytes(const llm_infer_ctx *c);

/* Run rows[0..n) through the layers (n <= max_rows), storing their K/V in the cache.
 * Each row attends to its slot's positions 0..pos, so positions before pos of that slot
 * must have been run earlier or earlier in this same call; rows of one slot in one call
 * must have distinct positions.  Ids must be < vocab_size, pos < max_seq_len, slot < slots
 * (LLM_EUSAGE otherwise).  The final hidden states stay for llm_infer_logits. */
int llm_infer_forward(llm_infer_ctx *c, const llm_infer_row *rows, int n, llm_status *st);

/* Logits (n, Vp) into out (host memory) for rows which[0..n) of the last forward: final
 * layernorm + the tied output projection, computed only for those rows.  n <= max_rows. */
int llm_infer_logits(llm_infer_ctx *c, const int *which, int n, float *out, llm_status *st);

/* Greedy next tokens for rows which[0..n) of the last forward: ids[i] (host memory, n
 * entries) = llm_argmax (common/sampler.h) of row which[i]'s logits over the real
 * vocabulary (the first vocab_size of the padded_vocab columns), the same ids as
 * llm_infer_logits followed by llm_argmax on each row, bit for bit.  Where the backend
 * has argmax_rows (cuda) the argmax runs on the device and only the ids come back; on
 * the CPU backends the logits are read in place; a tensor-parallel rank (whose peers
 * follow) and a device backend without argmax_rows copy the logits to the host (a
 * buffer of up to 64 rows, made on first use) and take llm_argmax there.  Errors as
 * llm_infer_logits' (LLM_EUSAGE for a row not in the last forward; LLM_ENOMEM). */
int llm_infer_argmax(llm_infer_ctx *c, const int *which, int n, int32_t *ids, llm_status *st);

#endif
