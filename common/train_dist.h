/* train_dist.h — data parallelism and ZeRO-1 inside llm-train's optimizer step.
 *
 * Every rank runs the same model.  One step covers a global batch of world x accum
 * micro-batches of B rows, taken in order from one global data stream: rank r computes
 * micro-batches r*accum .. r*accum+accum-1 and reads past the others' (every rank's data
 * position stays the global one, so a checkpoint resumes on any world size).  Gradients
 * are scaled by 1/(world*accum) in the backward pass and summed across ranks, so 2 ranks
 * x B=4 == 1 rank x B=8 == 1 rank x B=4 x 2 accumulation steps.
 *   zero 0  the gradients are all-reduced in buckets overlapped with the backward of the
 *           last micro-batch: the model reports each range of the gradient buffer as it
 *           becomes final (llm_model_set_grad_ready: ln_f, then layer L-1 .. 0, then the
 *           embeddings); the ranges are gathered into buckets of at least
 *           train.bucket_mb MiB (llm_train_dist_set_bucket_mb), each started as a
 *           non-blocking all-reduce (llm_dist_iallreduce) as soon as it is full, and all
 *           are waited for before the update (MPI progresses them at each reported range:
 *           llm_dist_test).  bucket_mb 0: one all-reduce of the whole buffer after the
 *           backward.  Every rank then runs the same AdamW update
 *   zero 1  each rank holds the AdamW moments of its shard of the flat parameter buffer
 *           only (llm_dist_shard; llm_model_set_opt_range): 8 x P / world bytes instead
 *           of 8 x P.  Parameters and gradients stay whole.  After the backward, a
 *           reduce-scatter in place leaves each rank its shard of the summed gradient
 *           (no second buffer); the clipping norm is summed over the shards; each rank
 *           updates its shard of the parameters and moments; an all-gather of the
 *           parameters follows.
 *   (no zero 2: the backward accumulates into the whole gradient buffer, and the shard
 *   is reduced in place into it, so there is no shard-only gradient copy to drop; a
 *   real ZeRO-2 needs bucketed reduce-scatters during the backward pass.)
 * Checkpoints stay one whole file that resumes on any world size and ZeRO stage: with
 * sharded moments rank 0 writes it and gathers the other ranks' shards while it writes
 * (llm_train_dist_save_begin/_end), through its gradient buffer, so a save needs no
 * memory of its own; a resume with ZeRO-1 loads each rank's slice of the saved moments.
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
 * Errors: LLM_EDATA when total_batch_tokens is not a multiple of world x B x T (with the
 * config the ranks agreed on: LLM_TOGETHER_SAME). */
int llm_train_dist_config(const llm_train_config *cfg, const llm_dist *d, llm_train_config *out,
                          llm_status *st);

/* Refuse to go on when the ranks were given different configs (another --set, another
 * config file; train_agree.c): a collective over d, before any other, comparing every key
 * of cfg but those a rank may set for itself (LLM_TRAIN_DIST_PER_RANK_KEYS: speed, and
 * what rank 0 alone reads or writes: its output.dir, where the other ranks only look for
 * --resume auto's checkpoint and llm_train_dist_check_step checks they found the same
 * step, and its tokenizer, which only its checkpoints and samples carry).  data.train and
 * model.init_from are compared by what they name (common/pathsum.h: the files' sizes and
 * first and last MiB), so node-local copies under different paths agree.  Without it a
 * different lr or seed on one rank trains silently wrong weights (rank 0 writes its own),
 * a different model size crashes in a collective, and a different train.zero or
 * max_steps hangs until --dist-timeout.  Errors, every rank returning together
 * (st->together): LLM_EDATA naming the keys with rank 0's value and the first other
 * rank's, the same message on every rank (LLM_TOGETHER_SAME); LLM_ENOINPUT (or
 * LLM_EIO, LLM_ENOMEM) when a rank cannot read a file its config names: on that rank
 * why (LLM_TOGETHER_OWN), on the others which rank (LLM_TOGETHER_SAME).  0 for one
 * process. */
#define LLM_TRAIN_DIST_PER_RANK_KEYS                                                       \
    "train.threads", "data.prefetch", "train.peak_flops", "output.metrics", "output.prom",  \
        "data.val", "train.eval_every", "train.eval_batches", "train.sample_tokens",        \
        "output.dir", "data.tokenizer"
int llm_train_dist_check_config(const llm_train_config *cfg, llm_dist *d, llm_status *st);

/* ZeRO-1 on several ranks: make m hold the AdamW moments of this rank's shard only
 * (llm_model_set_opt_range).  Call right after creating the model, before a resume
 * loads the moments (so that it loads just this rank's slice); a no-op otherwise.
 * Errors: LLM_EUSAGE when m already holds moments of another range. */
int llm_train_dist_shard_model(llm_model *m, const llm_dist *d, int zero, llm_status *st);

/* Attach d (not owned) to m on backend be (not owned) and make every rank's parameters
 * rank 0's (a broadcast).  zero: 0 or 1 (1: shards m as llm_train_dist_shard_model, if
 * not yet done).  Errors: LLM_ENOMEM, LLM_EUSAGE, collective errors. */
int  llm_train_dist_new(llm_train_dist **out, llm_dist *d, llm_model *m, llm_backend *be,
                        int zero, llm_status *st);
void llm_train_dist_free(llm_train_dist *td);

/* ZeRO-0 overlap: the smallest bucket in MiB (rounded to whole floats; > 0 means at
 * least one float); 0 turns the overlap off (one all-reduce after the backward).  Buckets
 * are whole ranges reported by the model, so one may be larger (a layer or the embeddings
 * bigger than mb).  Default LLM_TRAIN_BUCKET_DEFAULT floats.  ZeRO-1 ignores it (its
 * reduce-scatter runs after the backward). */
#define LLM_TRAIN_BUCKET_MB_DEFAULT 4.0
#define LLM_TRAIN_BUCKET_DEFAULT ((size_t)(LLM_TRAIN_BUCKET_MB_DEFAULT * 1048576.0 / 4.0))
void llm_train_dist_set_bucket_mb(llm_train_dist *td, double mb);
/* What the last step did: gradient ranges the model reported (L + 2 per step with the
 * overlap on: the last micro-batch's only) and buckets all-reduced.  For tests. */
void llm_train_dist_overlap_stats(const llm_train_dist *td, int *ranges, int *buckets);

/* Refuse to go on when the ranks do not all start at the same step (a checkpoint
 * directory that is not shared, or a rank that resumed another file): LLM_EDATA, the same
 * on every rank (LLM_TOGETHER_SAME). */
int llm_train_dist_check_step(llm_train_dist *td, int64_t step, llm_status *st);

/* A step runs in three calls, on every rank:
 *   llm_train_dist_read(td, data)        no collective: this rank reads the world x accum
 *                                        micro-batches of the global batch in order (the
 *                                        data position stays the global one) and keeps its
 *                                        own accum ones
 *   llm_train_dist_agree_read(td, rc)    the step's first collective (one double): every
 *                                        rank learns whether any rank's read failed
 *   llm_train_dist_step(td, ...)         the forward and backward passes, the gradient
 *                                        collectives and the update, if all reads succeeded
 * So a read that fails on one rank (bad data, a file cut short under the job) stops every
 * rank before the step's computation, each holding the last complete step: none is left
 * waiting in a collective, and a checkpoint (its collectives) can follow.
 *
 * Set the step's shape once, before the first read: micro-batches of B x T tokens, accum
 * of them on each rank.  The batches read ahead take (accum + 1) x B x T x 2 int32 of host
 * memory (inputs and targets; one pair is scratch for the other ranks' micro-batches), that
 * is 8 bytes a token of this rank's share of train.total_batch_tokens; more than
 * LLM_TRAIN_DIST_READ_MAX_MB of it is refused (LLM_EDATA naming train.total_batch_tokens).
 * Errors: LLM_EUSAGE (a size below 1), LLM_ENOMEM. */
#define LLM_TRAIN_DIST_READ_MAX_MB 1024
int llm_train_dist_set_batch(llm_train_dist *td, int B, int T, int64_t accum, llm_status *st);
/* Errors: llm_data_next's (the loader stays at the bad batch); LLM_ESOFTWARE before
 * llm_train_dist_set_batch. */
int llm_train_dist_read(llm_train_dist *td, llm_data *data, llm_status *st);
/* rc: this rank's outcome of its read (0, or an error in st).  Returns 0 when every rank
 * read its batches.  Else *together = 1 and every rank returns an error: its own, or the
 * code of the lowest rank that failed with "rank R could not read the step's batches (its
 * own error says why)".  A failed collective returns its own error (this rank's read error
 * when it had one) with *together = 0. */
int llm_train_dist_agree_read(llm_train_dist *td, int rc, int *together, llm_status *st);
/* One optimizer step t (>= 1) over the global batch just read (see the top of this file).
 * force_nan makes the loss non-finite (the test hook).  *loss: mean over the global batch;
 * *gnorm: the global gradient norm before clipping (NaN when skipped); *skipped as
 * llm_model_update.  LLM_ESOFTWARE without batches read (each read serves one step). */
int llm_train_dist_step(llm_train_dist *td, const llm_adamw_config *hp, int t, int force_nan,
                        double *loss, double *gnorm, int *skipped, llm_status *st);

/* 1 on every rank when local is non-zero on any rank (a signal to one rank stops all at
 * the same step); a collective, called by every rank once per step. */
int llm_train_dist_agree(llm_train_dist *td, int local, int *any, llm_status *st);

/* A checkpoint with sharded moments (ZeRO-1, several ranks); every rank calls
 *   llm_train_dist_save_begin(td)   collective: the moments' crc32s (from each shard);
 *                                   on rank 0 the model's saver is set (model.h)
 *   rank 0 only: llm_train_save()   its llm_model_save pulls each shard of the moments
 *                                   from its rank (a broadcast) as the writer reaches it
 *   llm_train_dist_save_end(td)     always, also after a failed write: the transfers
 *                                   rank 0's writer did not run (all, on the other ranks)
 * Both are no-ops when the moments are not sharded.  Errors: LLM_ENOMEM, collective
 * errors (save_end runs the remaining transfers even after save_begin failed on rank 0
 * past its collective, so that no rank is left waiting). */
int llm_train_dist_save_begin(llm_train_dist *td, llm_status *st);
int llm_train_dist_save_end(llm_train_dist *td, llm_status *st);

#endif
