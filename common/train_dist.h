/* train_dist.h — data parallelism and ZeRO-1 inside llm-train's optimizer step.
 *
 * Every rank runs the same model.  One step covers a global batch of world x accum
 * micro-batches of B rows, taken in order from one global data stream: rank r computes
 * micro-batches r*accum .. r*accum+accum-1 and reads past the others' (every rank's data
 * position stays the global one, so a checkpoint resumes on any world size).  Gradients
 * are scaled by 1/(world*accum) in the backward pass and summed across ranks, so 2 ranks
 * x B=4 == 1 rank x B=8 == 1 rank x B=4 x 2 accumulation steps.
 *   zero 0  one all-reduce of the whole gradient buffer (one bucket) after the backward;
 *           every rank then runs the same AdamW update
 *   zero 1  reduce-scatter of the gradients: each rank updates its shard of the
 *           parameters and AdamW moments (llm_dist_shard over the flat buffer), the
 *           clipping norm is summed over all shards, then an all-gather of the parameters.
 *           Before a checkpoint the moments are gathered (checkpoints stay whole).
 * The loss is averaged over ranks, so every rank agrees on skipping a non-finite step.
 * Host-memory collectives (MPI) on a device backend go through a host staging buffer.
 */
#ifndef LLM_TRAIN_DIST_H
#define LLM_TRAIN_DIST_H

#include <stdint.h>

#include "common/config.h"
#include "common/data.h"
#include "common/dist.h"
#include "common/model.h"
#include "common/status.h"

typedef struct llm_train_dist llm_train_dist;

/* *out = *cfg with the global batch resolved for d's world size (d may be NULL): an
 * unset train.total_batch_tokens becomes world x batch_size x seq_len (so a checkpoint
 * records the global batch and a resume on another world size is checked against it).
 * Errors: LLM_EDATA when total_batch_tokens is not a multiple of world x B x T. */
int llm_train_dist_config(const llm_train_config *cfg, const llm_dist *d, llm_train_config *out,
                          llm_status *st);

/* Attach d (not owned) to m on backend be (not owned) and make every rank's parameters
 * rank 0's (a broadcast).  zero: 0 or 1.  Errors: LLM_ENOMEM, collective errors. */
int  llm_train_dist_new(llm_train_dist **out, llm_dist *d, llm_model *m, llm_backend *be,
                        int zero, llm_status *st);
void llm_train_dist_free(llm_train_dist *td);

/* Refuse to go on when the ranks do not all start at the same step (a checkpoint
 * directory that is not shared, or a rank that resumed another file): LLM_EDATA. */
int llm_train_dist_check_step(llm_train_dist *td, int64_t step, llm_status *st);

/* One optimizer step t (>= 1) over the global batch (see the top of this file).  The
 * batches come from data into in/tg (B*T each, caller-owned).  force_nan makes the loss
 * non-finite (the test hook).  *loss: mean over the global batch; *gnorm: the global
 * gradient norm before clipping (NaN when skipped); *skipped as llm_model_update. */
int llm_train_dist_step(llm_train_dist *td, llm_data *data, int32_t *in, int32_t *tg, int B,
                        int T, int64_t accum, const llm_adamw_config *hp, int t, int force_nan,
                        double *loss, double *gnorm, int *skipped, llm_status *st);

/* 1 on every rank when local is non-zero on any rank (a signal to one rank stops all at
 * the same step); a collective, called by every rank once per step. */
int llm_train_dist_agree(llm_train_dist *td, int local, int *any, llm_status *st);

/* Before a checkpoint (every rank calls it): ZeRO-1 gathers the moments whole. */
int llm_train_dist_pre_save(llm_train_dist *td, llm_status *st);

#endif
