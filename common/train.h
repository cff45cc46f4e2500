/* train.h — the training loop of llm-train: steps, gradient accumulation, evaluation,
 * checkpoints (save, keep_last, resume) and stopping on request.
 *
 * Steps are numbered from 1; the checkpoint DIR/step-NNNNNNNN.llmk holds the state after
 * step N: parameters, AdamW moments ("opt.m.*", "opt.v.*"), the tokenizer, and the
 * header section train: {step, skipped, [skipped_in_a_row: when not 0], precision,
 * [loss_scale, loss_scale_clean: fp16], optimizer: {name: adamw, t: the updates applied,
 * step - skipped}, data: <data position>, config: <the resolved config>}.  Resuming from
 * it repeats the rest of the run exactly (same losses bit for bit, same weights) on the
 * same device and thread count.
 */
#ifndef LLM_TRAIN_H
#define LLM_TRAIN_H

#include <signal.h>
#include <stdint.h>

#include "common/ckpt.h"
#include "common/config.h"
#include "common/data.h"
#include "common/log.h"
#include "common/loss_scale.h"
#include "common/model.h"
#include "common/status.h"
#include "common/tokenizer.h"

/* Exit status of llm-train when train.max_skips non-finite steps came in a row. */
#define LLM_TRAIN_EXIT_DIVERGED 3

typedef struct {
    const char *resume;               /* NULL: fresh; "auto": newest in output.dir; or a file */
    const volatile sig_atomic_t *stop; /* non-zero: finish the step, checkpoint, return */
    const llm_log *log;               /* diagnostics (NULL: stderr at info level) */
    int progress;                     /* draw a progress line on stderr */
    struct llm_dist *dist;            /* ranks (common/dist.h); NULL: one process */
} llm_train_opts;

typedef struct {
    int64_t first_step, last_step;    /* steps this run did (first > last: none) */
    int64_t skipped;                  /* non-finite steps skipped in this run */
    int diverged;                     /* ended by max_skips non-finite steps in a row */
    int stopped;                      /* ended early by a stop request or exit_after */
    double last_loss, last_val_loss;  /* NaN when none */
    double step_seconds, data_seconds;/* time in steps, and of it waiting for data */
    char last_ckpt[LLM_CFG_PATH_MAX + 32]; /* the newest checkpoint written ("" if none) */
    double mem_peak;                  /* this process: most bytes held allocated through the
                                         backend (weights, gradients, optimizer state,
                                         activations: what llm-profile plan predicts) */
    double rss_peak;                  /* this process: peak resident set size, bytes */
} llm_train_result;

/* Run training as configured (cfg must have passed llm_config_validate).  Returns 0 when
 * the run reached max_steps, or stopped on request / exit_after with a checkpoint, or
 * diverged (res->diverged; no checkpoint is written then).  Errors: LLM_EDATA (bad data,
 * a checkpoint that does not match the config: the differences are named), LLM_ENOINPUT,
 * LLM_EIO (a final checkpoint could not be written; the previous one is intact),
 * LLM_ENODEV, LLM_ENOMEM.  An error after some steps of one process (not a failed final
 * save) first saves the last complete step, unless its checkpoint exists or the error
 * came in a step's update (which may have changed part of the weights); st->msg is the
 * error's, followed by the file saved, or by why the save failed, or by why none was
 * attempted (the update), and the code stays the error's.  Several ranks do the same, all
 * together, after a rank could not read a step's batches, and set st->together to
 * LLM_TOGETHER_OWN (no rank waits in a collective: the job need not be aborted): that
 * rank's error is its own, the others' names it ("step N: rank R could not read the
 * step's batches ...") with its code.  A device that fails during the run (kernels/
 * backend.h device_lost: a sticky CUDA error) is LLM_ENODEV, found after each step,
 * evaluation and sample and before each save: nothing more is saved (the error may come
 * from the update of the step before), and st->msg names the checkpoint on disk to resume
 * from.  A failed sample (train.sample_tokens) is a warning. */
int llm_train_run(const llm_train_config *cfg, const llm_train_opts *o, llm_train_result *res,
                  llm_status *st);

/* ---- checkpoint files (train_ckpt.c) ---- */

/* "DIR/step-NNNNNNNN.llmk" into buf (size n). */
void llm_train_ckpt_path(char *buf, size_t n, const char *dir, int64_t step);

/* The steps of the checkpoints in dir (files named exactly step-<digits>.llmk; temp
 * files and anything else are ignored), newest first.  *steps is malloc'd (NULL when
 * none); returns the count, or -1 when dir cannot be read (0 when it does not exist). */
int llm_train_list_ckpts(const char *dir, int64_t **steps);

/* Remove temp files left in dir by a writer that died (kill -9 during a save): names
 * [.]step-N.llmk.tmp.PID.* whose PID no longer runs.  Returns the number removed. */
int llm_train_clean_temps(const char *dir, const llm_log *log);

/* Delete all but the newest keep checkpoints in dir, never the one of step `keep_step`.
 * Returns the number deleted. */
int llm_train_prune(const char *dir, int keep, int64_t keep_step, const llm_log *log);

/* The batch shape a checkpoint's run had (its train.config). */
typedef struct {
    int64_t batch_size, seq_len;
    int64_t global_tokens;   /* tokens per optimizer step: total_batch_tokens, or B x T */
    int64_t eval_batches;    /* 0: not recorded */
} llm_train_shape;

/* Refuse a checkpoint whose model differs from mc, or whose run had another seq_len or
 * another global batch (tokens per step) than cfg (cfg's total_batch_tokens resolved for
 * `world` ranks: llm_train_dist_config): LLM_EDATA with every difference named
 * ("model.n_embd: 64 in the checkpoint, 128 in the config"), and, when the global batch
 * differs only because cfg leaves train.total_batch_tokens unset, what to set it to.
 * Another batch_size (so other ranks or accumulation steps) splitting the same global
 * batch is no difference: the data position is global (rows, not batches).  *was gets
 * the checkpoint's shape. */
int llm_train_check_compat(const llm_ckpt *ck, const char *path, const llm_model_config *mc,
                           const llm_train_config *cfg, int world, llm_train_shape *was,
                           llm_status *st);

/* Write the training checkpoint of step to path atomically (see the top of this file);
 * skipped: non-finite steps so far, in_a_row: how many of the last steps were (for
 * train.max_skips after a resume); tok may be NULL (no tokenizer stored); ls: the loss scaler whose state is saved (fp16;
 * NULL: none).  Errors: LLM_EIO with the reason (the file at path, if any, is untouched). */
int llm_train_save(const char *path, llm_model *m, const llm_tokenizer *tok,
                   const llm_train_config *cfg, int64_t step, int64_t skipped,
                   int64_t in_a_row, const llm_loss_scaler *ls, const llm_data_pos *pos, llm_status *st);

#endif
