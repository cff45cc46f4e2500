/* sampler.h — next-token sampling: greedy, temperature, top-k, top-p, seeded.
 *
 * Each request owns a sampler (its own RNG stream), so the tokens drawn for a request
 * depend only on its seed and its logits, never on what else is in the batch.
 */
#ifndef LLM_SAMPLER_H
#define LLM_SAMPLER_H

#include <stdint.h>

#include "common/rng.h"

#include "common/status.h"

typedef struct {
    float temperature;   /* 0: greedy (argmax, lowest id on ties) */
    int top_k;           /* 0: off; else keep the k most likely */
    float top_p;         /* 1: off; else the smallest set with mass >= top_p */
    uint64_t seed;
} llm_sampler_params;

typedef struct {
    llm_sampler_params p;
    uint64_t s[4];       /* xoshiro256** state */
} llm_sampler;

/* Scratch buffers shared by the samplers of one thread (reused across calls). */
typedef struct {
    float *prob;
    uint64_t *key;       /* candidates: probability bits above, ~id below */
    uint64_t *tmp;       /* radix sort */
    int cap;
} llm_sampler_scratch;

/* A temperature or top_p given as a double, as the float of llm_sampler_params: finite
 * values beyond float's range become the largest float, positive ones below it the
 * smallest, so that a valid value stays valid (1e300 is a temperature, 1e-60 a top_p);
 * others (NaN, infinities) as they are. */
float llm_sampler_param(double x);


/* Validate p (temperature >= 0 finite, top_k >= 0, 0 < top_p <= 1): LLM_EUSAGE naming
 * the field otherwise.  Seeds the RNG from p->seed. */
int llm_sampler_init(llm_sampler *s, const llm_sampler_params *p, llm_status *st);

/* Draw a token from logits[0..V).  Uses one RNG draw per call unless greedy.
 * The probabilities are llm_sampler_probs'.  Candidates are ordered by probability,
 * then id; top-k keeps the first k; top-p then keeps the shortest prefix whose mass
 * reaches top_p of what is left (of the whole distribution without top-k).  Logits
 * that give no finite positive total (NaN, +inf) are drawn greedily.  Returns the id,
 * or -1 when scratch cannot be allocated. */
int llm_sampler_sample(llm_sampler *s, const float *logits, int V, llm_sampler_scratch *sc);

/* prob[i] = exp((logits[i] - max) / temperature) (temperature > 0), computed in float
 * by a polynomial (relative error within a few ulp of the exact value; 0 below
 * e^-87.3), the same on every machine; returns their sum (in double, in a fixed order).
 * max = logits[llm_argmax(logits, V)]. */
double llm_sampler_probs(const float *logits, int V, float temperature, float *prob);

void llm_sampler_scratch_free(llm_sampler_scratch *sc);

/* log(sum_i exp(x[i])) over x[0..n), n >= 1: the largest plus the log of the sum of the
 * others' exponentials relative to it (llm_sampler_probs' exp, double sums in a fixed
 * order; terms below e^-87.3 of the largest dropped).  NaN when any x[i] is NaN. */
double llm_logsumexp(const float *x, int n);

/* Index of the largest of x[0..n) (the lowest index among equals). */
int llm_argmax(const float *x, int n);

/* Uniform double in [0,1) from the sampler's stream. */
double llm_sampler_uniform(llm_sampler *s);

#endif
