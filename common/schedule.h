/* schedule.h — learning-rate schedules: linear warmup, then cosine, linear, constant or
 * wsd (warmup-stable-decay) down to a minimum.
 *
 * Steps are 1-based: step s is the s-th optimizer update.  During warmup (s <= warmup)
 * the rate rises linearly, lr * s / warmup.  Afterwards, with p = (s - warmup) /
 * (total - warmup) in [0, 1]:
 *   cosine    min + (lr - min) * (1 + cos(pi p)) / 2
 *   linear    lr - (lr - min) * p
 *   constant  lr
 *   wsd       lr until the last decay_fraction * total steps, then linear to min
 * Past total steps the rate stays at its final value.
 */
#ifndef LLM_SCHEDULE_H
#define LLM_SCHEDULE_H

#include <stdint.h>

#include "common/status.h"

typedef enum { LLM_SCHED_COSINE, LLM_SCHED_LINEAR, LLM_SCHED_CONSTANT, LLM_SCHED_WSD } llm_sched_kind;

typedef struct {
    llm_sched_kind kind;
    double lr, min_lr;
    int64_t warmup, total;
    double decay_fraction;   /* wsd only, in [0, 1] */
} llm_schedule;

/* Set up s; name is "cosine", "linear", "constant" or "wsd".  Errors: LLM_EUSAGE for an
 * unknown name, min_lr > lr, negative values or warmup > total. */
int llm_schedule_init(llm_schedule *s, const char *name, double lr, double min_lr,
                      int64_t warmup, int64_t total, double decay_fraction, llm_status *st);

/* The learning rate of step (>= 1). */
double llm_schedule_lr(const llm_schedule *s, int64_t step);

#endif
