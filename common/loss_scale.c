/* loss_scale.c — dynamic loss scaling (see loss_scale.h). */
#include "common/loss_scale.h"

#include <math.h>

void llm_loss_scaler_init(llm_loss_scaler *s, int dynamic, double initial, int64_t window)
{
    s->dynamic = dynamic;
    s->clean = 0;
    s->window = window >= 1 ? window : 1;
    s->scale = 1.0;
    if (dynamic)
        s->scale = !(initial >= LLM_LOSS_SCALE_MIN) ? LLM_LOSS_SCALE_MIN
                   : initial > LLM_LOSS_SCALE_MAX   ? LLM_LOSS_SCALE_MAX
                                                    : initial;
}

llm_loss_scale_change llm_loss_scaler_update(llm_loss_scaler *s, int overflow, int other_skip,
                                             double *from)
{
    if (from)
        *from = s->scale;
    if (!s->dynamic)
        return LLM_LOSS_SCALE_SAME;
    if (overflow || other_skip) {
        s->clean = 0;
        if (!overflow || s->scale <= LLM_LOSS_SCALE_MIN)
            return LLM_LOSS_SCALE_SAME;
        s->scale = fmax(s->scale / 2, LLM_LOSS_SCALE_MIN);
        return LLM_LOSS_SCALE_HALVED;
    }
    if (++s->clean < s->window)
        return LLM_LOSS_SCALE_SAME;
    s->clean = 0;
    if (s->scale >= LLM_LOSS_SCALE_MAX)
        return LLM_LOSS_SCALE_SAME;
    s->scale = fmin(s->scale * 2, LLM_LOSS_SCALE_MAX);
    return LLM_LOSS_SCALE_GROWN;
}

int llm_loss_scaler_save(const llm_loss_scaler *s, llm_node *train)
{
    if (!s->dynamic)
        return 0;
    return llm_node_set_double(train, "loss_scale", s->scale) ||
                   llm_node_set_int(train, "loss_scale_clean", s->clean)
               ? -1
               : 0;
}

int llm_loss_scaler_load(llm_loss_scaler *s, const llm_node *train, llm_status *st)
{
    const llm_node *ns = llm_node_get(train, "loss_scale");
    const llm_node *nc = llm_node_get(train, "loss_scale_clean");
    if (!s->dynamic || (!ns && !nc))
        return 0;
    double scale;
    int64_t clean;
    if (!ns || llm_node_double(ns, &scale) || !(scale >= LLM_LOSS_SCALE_MIN) ||
        scale > LLM_LOSS_SCALE_MAX)
        return llm_err(st, LLM_EDATA, "train.loss_scale must be a number in [1, %.0f]",
                       LLM_LOSS_SCALE_MAX);
    if (!nc || llm_node_i64(nc, &clean) || clean < 0)
        return llm_err(st, LLM_EDATA, "train.loss_scale_clean must be an integer >= 0");
    s->scale = scale;
    /* a window shorter now than when saved: the next clean step grows the scale */
    s->clean = clean < s->window ? clean : s->window - 1;
    return 0;
}
