/* schedule.c — learning-rate schedules (see schedule.h). */
#include "common/schedule.h"

#include <math.h>
#include <string.h>

int llm_schedule_init(llm_schedule *s, const char *name, double lr, double min_lr,
                      int64_t warmup, int64_t total, double decay_fraction, llm_status *st)
{
    static const char *names[] = {"cosine", "linear", "constant", "wsd"};
    int k = -1;
    for (int i = 0; i < 4; i++)
        if (name && !strcmp(name, names[i]))
            k = i;
    if (k < 0)
        return llm_err(st, LLM_EUSAGE, "unknown schedule '%s' (want cosine, linear, constant or wsd)",
                       name ? name : "");
    if (!(lr >= 0) || !(min_lr >= 0) || min_lr > lr)
        return llm_err(st, LLM_EUSAGE, "schedule: need 0 <= min_lr <= lr (got %g, %g)", min_lr, lr);
    /* warmup > total is allowed: a short run (a smoke test, a first slice of a longer
     * job) then ends while the learning rate is still rising */
    if (total < 1 || warmup < 0)
        return llm_err(st, LLM_EUSAGE, "schedule: need warmup >= 0 and total >= 1");
    if (!(decay_fraction >= 0 && decay_fraction <= 1))
        return llm_err(st, LLM_EUSAGE, "schedule: decay fraction must be in [0, 1]");
    *s = (llm_schedule){(llm_sched_kind)k, lr, min_lr, warmup, total, decay_fraction};
    return 0;
}

double llm_schedule_lr(const llm_schedule *s, int64_t step)
{
    if (step < 1)
        step = 1;
    if (step <= s->warmup)
        return s->lr * (double)step / (double)s->warmup;
    if (step > s->total)
        step = s->total;
    double span = (double)(s->total - s->warmup);
    double p = span > 0 ? (double)(step - s->warmup) / span : 1.0;
    switch (s->kind) {
    case LLM_SCHED_COSINE:
        return s->min_lr + (s->lr - s->min_lr) * 0.5 * (1.0 + cos(M_PI * p));
    case LLM_SCHED_LINEAR:
        return s->lr - (s->lr - s->min_lr) * p;
    case LLM_SCHED_CONSTANT:
        return s->lr;
    case LLM_SCHED_WSD: {
        /* the decay phase: the last decay_fraction of all steps (not of post-warmup) */
        int64_t decay = (int64_t)llround(s->decay_fraction * (double)s->total);
        if (decay > s->total - s->warmup)
            decay = s->total - s->warmup;
        int64_t start = s->total - decay;    /* last step at full lr */
        if (step <= start || decay == 0)
            return s->lr;
        return s->lr - (s->lr - s->min_lr) * (double)(step - start) / (double)decay;
    }
    }
    return s->lr;
}
