/* sampler.c — see sampler.h. */
#include "common/sampler.h"

#include <math.h>
#include <stdlib.h>

static uint64_t splitmix(uint64_t *x)
{
    uint64_t z = (*x += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

static uint64_t rotl(uint64_t x, int k) { return (x << k) | (x >> (64 - k)); }

static uint64_t next_u64(llm_sampler *s)
{
    uint64_t *q = s->s;
    uint64_t r = rotl(q[1] * 5, 7) * 9, t = q[1] << 17;
    q[2] ^= q[0]; q[3] ^= q[1]; q[1] ^= q[2]; q[0] ^= q[3];
    q[2] ^= t; q[3] = rotl(q[3], 45);
    return r;
}

double llm_sampler_uniform(llm_sampler *s)
{
    return (double)(next_u64(s) >> 11) * (1.0 / 9007199254740992.0);
}

int llm_sampler_init(llm_sampler *s, const llm_sampler_params *p, llm_status *st)
{
    if (!(p->temperature >= 0.0f) || !isfinite(p->temperature))
        return llm_err(st, LLM_EUSAGE, "'temperature' must be a finite number >= 0");
    if (p->top_k < 0)
        return llm_err(st, LLM_EUSAGE, "'top_k' must be >= 0");
    if (!(p->top_p > 0.0f && p->top_p <= 1.0f))
        return llm_err(st, LLM_EUSAGE, "'top_p' must be in (0, 1]");
    s->p = *p;
    uint64_t x = p->seed;
    for (int i = 0; i < 4; i++)
        s->s[i] = splitmix(&x);
    return LLM_OK;
}

int llm_argmax(const float *x, int n)
{
    int best = 0;
    for (int i = 1; i < n; i++)
        if (x[i] > x[best])
            best = i;
    return best;
}

void llm_sampler_scratch_free(llm_sampler_scratch *sc)
{
    free(sc->prob);
    free(sc->tmp);
    free(sc->idx);
    sc->prob = NULL;
    sc->tmp = NULL;
    sc->idx = NULL;
    sc->cap = 0;
}

/* Order: probability descending, then id ascending, so the candidate order (and thus
 * the draw) is fully determined by the logits. */
static int cmp_desc(const void *a, const void *b, void *arg)
{
    const float *p = arg;
    int32_t i = *(const int32_t *)a, j = *(const int32_t *)b;
    if (p[i] > p[j]) return -1;
    if (p[i] < p[j]) return 1;
    return (i > j) - (i < j);
}

/* The k-th largest (1-based) of x[0..n), using tmp[0..n) as scratch (quickselect with
 * a deterministic middle pivot). */
static float kth_largest(float *tmp, const float *x, int n, int k)
{
    for (int i = 0; i < n; i++)
        tmp[i] = x[i];
    int lo = 0, hi = n - 1, want = k - 1;   /* index in descending order */
    while (lo < hi) {
        float piv = tmp[lo + (hi - lo) / 2];
        int i = lo, j = hi;
        while (i <= j) {
            while (tmp[i] > piv) i++;
            while (tmp[j] < piv) j--;
            if (i <= j) {
                float t = tmp[i]; tmp[i] = tmp[j]; tmp[j] = t;
                i++; j--;
            }
        }
        if (want <= j) hi = j;
        else if (want >= i) lo = i;
        else break;
    }
    return tmp[want];
}

int llm_sampler_sample(llm_sampler *s, const float *logits, int V, llm_sampler_scratch *sc)
{
    if (s->p.temperature <= 0.0f)
        return llm_argmax(logits, V);
    if (sc->cap < V) {
        float *p = realloc(sc->prob, (size_t)V * sizeof(float));
        if (!p) return -1;
        sc->prob = p;
        int32_t *ix = realloc(sc->idx, (size_t)V * sizeof(int32_t));
        if (!ix) return -1;
        sc->idx = ix;
        float *t = realloc(sc->tmp, (size_t)V * sizeof(float));
        if (!t) return -1;
        sc->tmp = t;
        sc->cap = V;
    }
    float *prob = sc->prob;
    int32_t *idx = sc->idx;
    float mx = logits[llm_argmax(logits, V)];
    double inv_t = 1.0 / s->p.temperature, total = 0.0;
    for (int i = 0; i < V; i++) {
        prob[i] = (float)exp(((double)logits[i] - mx) * inv_t);
        total += prob[i];
    }
    int k = s->p.top_k > 0 && s->p.top_k < V ? s->p.top_k : V;
    int filter = k < V || s->p.top_p < 1.0f;
    if (!filter) {
        double u = llm_sampler_uniform(s) * total, c = 0.0;
        for (int i = 0; i < V; i++) {
            c += prob[i];
            if (u < c)
                return i;
        }
        return llm_argmax(logits, V);
    }
    /* Only candidates that can survive the filters are sorted.  top-k: those at or
     * above the k-th largest probability (found in O(V) by selection).  top-p alone:
     * tokens below (1-top_p)/V of the total cannot be in the nucleus (all of them
     * together hold less than 1-top_p). */
    double floor_p;
    if (k < V)
        floor_p = kth_largest(sc->tmp, prob, V, k);
    else
        floor_p = (1.0 - s->p.top_p) / V * total;
    int n = 0;
    for (int i = 0; i < V; i++)
        if (prob[i] >= floor_p)
            idx[n++] = i;
    qsort_r(idx, (size_t)n, sizeof *idx, cmp_desc, prob);
    if (n > k)
        n = k;
    double mass = 0.0;
    for (int i = 0; i < n; i++)
        mass += prob[idx[i]];
    if (s->p.top_p < 1.0f) {
        /* nucleus within the top-k set, renormalised to that set */
        double c = 0.0, want = s->p.top_p * mass;
        int m = 0;
        while (m < n) {
            c += prob[idx[m++]];
            if (c >= want)
                break;
        }
        n = m;
        mass = c;
    }
    double u = llm_sampler_uniform(s) * mass, c = 0.0;
    for (int i = 0; i < n; i++) {
        c += prob[idx[i]];
        if (u < c)
            return idx[i];
    }
    return idx[n - 1];
}
