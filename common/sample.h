/* sample.h — picking the next token from logits: greedy, temperature, top-k, top-p.
 *
 * Seeded and deterministic: the same logits, parameters and generator state give the
 * same token on every machine (splitmix64; the state advances by one draw per call).
 */
#ifndef LLM_SAMPLE_H
#define LLM_SAMPLE_H

#include <stdint.h>

typedef struct {
    float temperature;   /* <= 0: greedy (argmax, lowest id on ties) */
    int top_k;           /* keep the k most likely ids; <= 0: all */
    float top_p;         /* keep the smallest set with this much probability; >= 1: all */
} llm_sample_params;

/* The id drawn from softmax(logits[0..V) / temperature) restricted by top_k and top_p.
 * rng is the generator state (updated).  Non-finite logits never win.  Returns the id,
 * or -1 when V < 1 or memory runs out. */
int llm_sample(const float *logits, int V, const llm_sample_params *p, uint64_t *rng);

/* A uniform double in [0, 1) from the generator (the draw llm_sample uses). */
double llm_sample_uniform(uint64_t *rng);

#endif
