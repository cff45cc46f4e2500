/* infer_tp.h — tensor-parallel inference over the shards of `llm-shard split --tp N`.
 *
 * Every rank of a communicator (common/dist.h) opens its own shard (llm_infer_model_open
 * reads the shard: section and binds the local pieces: whole heads of q, k and v, a slice
 * of the MLP, the input columns of both output projections, a block of vocabulary rows
 * of wte) and keeps a KV cache of its heads only.  Rank 0 runs the scheduler, sampling,
 * --eval and all I/O; the other ranks follow: each llm_infer_forward / llm_infer_logits
 * on rank 0 first broadcasts its rows (token ids, slots, positions: the sampled token
 * travels this way) and every rank then runs its part.  Inside the forward the partial
 * sums of the row-parallel projections (attn c_proj, mlp c_proj; their biases live on
 * rank 0 only) and of the embedding (each rank looks up the ids in its vocabulary rows)
 * are all-reduced, and the logits of each rank's vocabulary rows are all-gathered.
 * Pipeline-parallel shards (pp_size > 1) are refused.
 */
#ifndef LLM_INFER_TP_H
#define LLM_INFER_TP_H

#include <stddef.h>
#include <stdint.h>

#include "common/ckpt.h"
#include "common/dist.h"
#include "common/infer.h"
#include "common/status.h"

/* Read ck's shard: section: *tp_rank, *tp_size (0 and 1 for a file without one).
 * LLM_EDATA for a malformed section, a pipeline-parallel shard (pp_size > 1: not
 * supported for inference), or sizes that do not divide cfg's heads / padded vocab. */
int llm_infer_tp_shard(const llm_ckpt *ck, const llm_model_config *cfg, int *tp_rank,
                       int *tp_size, llm_status *st);

/* Join the ranks of d after each opened its shard into m (m NULL or setup_rc != 0 when
 * this rank's setup failed: it still takes part so that no rank waits).  Every rank
 * checks that the world size equals tp_size, that rank r holds tp shard r and that all
 * shards come from the same source; on success *out (owned by the caller, free with
 * llm_infer_tp_free before m) is attached to m (m->tp).  Errors: LLM_EUSAGE (world size
 * and shard count differ), LLM_EDATA (a mixed set), the failing rank's code elsewhere. */
int llm_infer_tp_join(llm_infer_tp **out, llm_dist *d, llm_infer_model *m, int setup_rc,
                      llm_status *st);
void llm_infer_tp_free(llm_infer_tp *tp);
int llm_infer_tp_rank(const llm_infer_tp *tp);

/* Follower ranks (rank > 0): run the forwards and logits rank 0 asks for on c until
 * rank 0 calls llm_infer_tp_stop.  Returns LLM_OK then, or the first error. */
int llm_infer_tp_follow(llm_infer_tp *tp, llm_infer_ctx *c, llm_status *st);
/* Rank 0: release the followers (no-op elsewhere).  Call once, success or not. */
int llm_infer_tp_stop(llm_infer_tp *tp, llm_status *st);

/* ---- hooks for infer_forward.c ---- */
/* Rank 0: broadcast a forward of rows[0..n) / a logits request for which[0..n). */
int llm_infer_tp_lead_forward(llm_infer_tp *tp, const llm_infer_row *rows, int n, llm_status *st);
int llm_infer_tp_lead_logits(llm_infer_tp *tp, const int *which, int n, llm_status *st);
/* Map ids[0..n) (global vocabulary) in place to this rank's wte rows (0 when not held),
 * remembering which rows are held. */
int llm_infer_tp_local_ids(llm_infer_tp *tp, int32_t *ids, int n, llm_status *st);
/* After embed_rows over the mapped ids: zero the rows this rank does not hold and sum
 * x (n, C) over the ranks. */
int llm_infer_tp_embed_reduce(llm_infer_tp *tp, llm_backend *be, float *x, int n, int C,
                              llm_status *st);
/* Sum buf (n floats, backend memory) over the ranks, in place. */
int llm_infer_tp_allreduce(llm_infer_tp *tp, llm_backend *be, float *buf, size_t n,
                           llm_status *st);
/* local: (k, Vp/tp) logits of this rank's vocabulary rows (backend memory); gather them
 * into out (k, Vp) host memory (out may be NULL on followers). */
int llm_infer_tp_logits(llm_infer_tp *tp, llm_backend *be, const float *local, int k, int Vp,
                        float *out, llm_status *st);

#endif
