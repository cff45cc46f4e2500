/* loss_scale.h — dynamic loss scaling for fp16 training (llm-train --precision fp16).
 *
 * fp16 gradients underflow below 2^-24; multiplying d(loss) by a scale S keeps them in
 * range, and the optimizer divides by S again (llm_model_set_loss_scale).  Too large an
 * S overflows f16 (65520 and beyond become inf) and the gradient norm is not finite:
 * the step is skipped and S halves (never below 1).  After `window` consecutive clean
 * steps S doubles (never above 2^24).  Without dynamic scaling (fp32, bf16) S stays 1.
 *
 * The state (S and the clean-step count) is part of a training checkpoint, so a resumed
 * run scales exactly as the uninterrupted one would.
 */
#ifndef LLM_LOSS_SCALE_H
#define LLM_LOSS_SCALE_H

#include <stdint.h>

#include "common/status.h"
#include "common/tree.h"

#define LLM_LOSS_SCALE_MIN 1.0
#define LLM_LOSS_SCALE_MAX 16777216.0   /* 2^24 */

typedef struct {
    int dynamic;        /* 0: the scale is 1 and never changes */
    double scale;       /* the scale of the next step */
    int64_t clean;      /* consecutive clean steps since the last change */
    int64_t window;     /* clean steps before the scale doubles (>= 1) */
} llm_loss_scaler;

typedef enum { LLM_LOSS_SCALE_SAME, LLM_LOSS_SCALE_HALVED, LLM_LOSS_SCALE_GROWN } llm_loss_scale_change;

/* dynamic: fp16 training.  initial in [1, 2^24] (clamped into it), window >= 1. */
void llm_loss_scaler_init(llm_loss_scaler *s, int dynamic, double initial, int64_t window);

/* After a step.  overflow: the step's gradient norm was not finite (the step was
 * skipped) while its loss was finite; other_skip: the step was skipped for another reason
 * (a non-finite loss: no change of scale, but not a clean step either).  Returns what
 * happened to the scale; *from gets the scale before (may be NULL).  An overflow at the
 * minimum scale changes nothing (LLM_LOSS_SCALE_SAME): the caller treats it as a
 * non-finite step. */
llm_loss_scale_change llm_loss_scaler_update(llm_loss_scaler *s, int overflow, int other_skip,
                                             double *from);

/* Add loss_scale and loss_scale_clean to a checkpoint's train: mapping (dynamic only;
 * returns 0 without adding anything otherwise).  -1 when out of memory. */
int llm_loss_scaler_save(const llm_loss_scaler *s, llm_node *train);

/* Restore the state from a checkpoint's train: mapping when it has one (dynamic only;
 * a checkpoint without it, e.g. from an fp32 run, leaves s as initialised).
 * Errors: LLM_EDATA for a scale outside [1, 2^24], a negative count or wrong types. */
int llm_loss_scaler_load(llm_loss_scaler *s, const llm_node *train, llm_status *st);

#endif
