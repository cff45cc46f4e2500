/* sample.c — token sampling (see sample.h). */
#include "common/sample.h"

#include <math.h>
#include <stdlib.h>

double llm_sample_uniform(uint64_t *rng)
{
    uint64_t z = (*rng += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    z ^= z >> 31;
    return (double)(z >> 11) * 0x1.0p-53;
}

typedef struct { double p; int id; } cand;

static int by_prob(const void *a, const void *b)
{
    const cand *x = a, *y = b;
    if (x->p != y->p)
        return x->p < y->p ? 1 : -1;
    return x->id - y->id;  /* ties: lower id first, for determinism */
}

int llm_sample(const float *logits, int V, const llm_sample_params *p, uint64_t *rng)
{
    if (V < 1)
        return -1;
    int best = -1;
    for (int i = 0; i < V; i++)
        if (isfinite(logits[i]) && (best < 0 || logits[i] > logits[best]))
            best = i;
    if (best < 0)
        best = 0;
    double u = llm_sample_uniform(rng);  /* drawn even when greedy: the state advances alike */
    if (!(p->temperature > 0))
        return best;
    cand *c = malloc((size_t)V * sizeof *c);
    if (!c)
        return -1;
    double mx = logits[best], sum = 0;
    for (int i = 0; i < V; i++) {
        double e = isfinite(logits[i]) ? exp(((double)logits[i] - mx) / p->temperature) : 0.0;
        c[i] = (cand){e, i};
        sum += e;
    }
    qsort(c, (size_t)V, sizeof *c, by_prob);
    int n = V;
    if (p->top_k > 0 && p->top_k < n)
        n = p->top_k;
    double kept = 0;
    for (int i = 0; i < n; i++)
        kept += c[i].p;
    if (p->top_p > 0 && p->top_p < 1) {
        double acc = 0;
        for (int i = 0; i < n; i++) {
            acc += c[i].p;
            if (acc >= p->top_p * kept) {
                n = i + 1;
                kept = acc;
                break;
            }
        }
    }
    (void)sum;
    double r = u * kept, acc = 0;
    int id = c[n - 1].id;
    for (int i = 0; i < n; i++) {
        acc += c[i].p;
        if (r < acc) {
            id = c[i].id;
            break;
        }
    }
    free(c);
    return id;
}
