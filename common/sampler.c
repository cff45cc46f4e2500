/* sampler.c — see sampler.h. */
#include "common/sampler.h"

#include <float.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

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

float llm_sampler_param(double x)
{
    if (isfinite(x) && fabs(x) > FLT_MAX)
        return x > 0 ? FLT_MAX : -FLT_MAX;
    if (x > 0 && (float)x == 0.0f)
        return FLT_TRUE_MIN;
    return (float)x;
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
        s->s[i] = llm_splitmix64(&x);
    return LLM_OK;
}

/* The scan "best = i when x[i] > x[best]" reloads x[best] behind every compare (330 us
 * against this one's 20-24 us over a 50k vocabulary, BENCHMARKS.md).  Here: the largest value first, in 8 independent
 * lanes (compiled to vector maxima), then its first index.  Same answer: values are only
 * ever replaced by strictly greater ones, NaNs never win (a NaN x[0] wins alone, as
 * nothing compares greater than it), and == finds the first of equal maxima (-0 == +0). */
int llm_argmax(const float *x, int n)
{
    if (n <= 1 || x[0] != x[0])
        return 0;
    float m = x[0], lane[8];
    for (int j = 0; j < 8; j++)
        lane[j] = m;
    int i = 1;
    for (; i + 8 <= n; i += 8)
        for (int j = 0; j < 8; j++)
            lane[j] = x[i + j] > lane[j] ? x[i + j] : lane[j];
    for (; i < n; i++)
        m = x[i] > m ? x[i] : m;
    for (int j = 0; j < 8; j++)
        m = lane[j] > m ? lane[j] : m;
    for (i = 0; i < n; i++)
        if (x[i] == m)
            return i;
    return 0;
}

void llm_sampler_scratch_free(llm_sampler_scratch *sc)
{
    free(sc->prob);
    free(sc->key);
    free(sc->tmp);
    sc->prob = NULL;
    sc->key = NULL;
    sc->tmp = NULL;
    sc->cap = 0;
}

/* e^x for x <= 0 by the usual reduction x = n ln2 + r (ln2 split in two) and a degree-6
 * polynomial for e^r (Cephes' expf coefficients); 0 below -87.3 and for NaN.  Plain
 * float operations without contraction (-std=c11), so the same bits on every machine and
 * vector width.  The range test is on the bits (|x| < 87.3, NaN failing it): a float
 * compare may not be if-converted under trapping math, and the loop over a vocabulary
 * must vectorise. */
#pragma omp declare simd
static inline float exp_neg(float x)
{
    uint32_t xb, lim = 0xc2ae999au;   /* -87.3f */
    memcpy(&xb, &x, sizeof xb);
    uint32_t keep = 0u - (uint32_t)((xb & 0x7fffffffu) < 0x42ae999au);
    uint32_t yb = (xb & keep) | (lim & ~keep);
    float y;
    memcpy(&y, &yb, sizeof y);
    float n = (y * 1.44269504f + 12582912.0f) - 12582912.0f;   /* round to nearest */
    float r = y - n * 0.693359375f;
    r = r + n * 2.12194440e-4f;
    float p = 1.9875691500e-4f;
    p = p * r + 1.3981999507e-3f;
    p = p * r + 8.3334519073e-3f;
    p = p * r + 4.1665795894e-2f;
    p = p * r + 1.6666665459e-1f;
    p = p * r + 5.0000001201e-1f;
    p = p * r * r + r + 1.0f;
    uint32_t sb = (uint32_t)((int32_t)n + 127) << 23;
    float scale;
    memcpy(&scale, &sb, sizeof scale);
    float e = p * scale;
    uint32_t eb;
    memcpy(&eb, &e, sizeof eb);
    eb &= keep;
    memcpy(&e, &eb, sizeof e);
    return e;
}

double llm_sampler_probs(const float *logits, int V, float temperature, float *prob)
{
    if (V <= 0)
        return 0.0;
    /* capped, so that the largest logit gives exactly 1 (0 * inf would be NaN) */
    float mx = logits[llm_argmax(logits, V)], inv_t = 1.0f / temperature;
    if (!(inv_t <= FLT_MAX))
        inv_t = FLT_MAX;
    double lane[8] = {0};
    int i = 0;
    for (; i + 8 <= V; i += 8)
#pragma omp simd
        for (int j = 0; j < 8; j++) {
            float e = exp_neg((logits[i + j] - mx) * inv_t);
            prob[i + j] = e;
            lane[j] += e;
        }
    for (int j = 0; i < V; i++, j++) {
        float e = exp_neg((logits[i] - mx) * inv_t);
        prob[i] = e;
        lane[j] += e;
    }
    double total = 0.0;
    for (int j = 0; j < 8; j++)
        total += lane[j];
    return total;
}

double llm_logsumexp(const float *x, int n)
{
    float mx = x[llm_argmax(x, n)];
    double lane[8] = {0};
    uint32_t nan = 0;
    int i = 0;
    for (; i + 8 <= n; i += 8)
#pragma omp simd reduction(| : nan)
        for (int j = 0; j < 8; j++) {
            uint32_t b;
            memcpy(&b, &x[i + j], sizeof b);
            nan |= (uint32_t)((b & 0x7fffffffu) > 0x7f800000u);
            lane[j] += exp_neg(x[i + j] - mx);
        }
    for (int j = 0; i < n; i++, j++) {
        nan |= (uint32_t)(x[i] != x[i]);
        lane[j] += exp_neg(x[i] - mx);
    }
    double s = 0.0;
    for (int j = 0; j < 8; j++)
        s += lane[j];
    return nan ? NAN : (double)mx + log(s);
}

/* A candidate: its probability's bits above its id's complement, so that larger keys
 * are more likely tokens and, among equals, lower ids (probabilities are >= 0). */
static inline uint64_t mkkey(const float *prob, int i)
{
    union { float f; uint32_t u; } b = {prob[i]};
    return (uint64_t)b.u << 32 | (uint32_t)~(uint32_t)i;
}
static inline int key_id(uint64_t k) { return (int)~(uint32_t)k; }
static inline double key_prob(uint64_t k)
{
    union { uint32_t u; float f; } b = {(uint32_t)(k >> 32)};
    return b.f;
}

static int cmp_key_desc(const void *a, const void *b)
{
    uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
    return (x < y) - (x > y);
}

/* key[0..n) into descending order (tmp: n more): LSD radix on bytes above a few hundred
 * keys, skipping the bytes that all keys share. */
static void sort_desc(uint64_t *key, uint64_t *tmp, int n)
{
    if (n < 256) {
        qsort(key, (size_t)n, sizeof *key, cmp_key_desc);
        return;
    }
    uint64_t *a = key, *b = tmp;
    for (int shift = 0; shift < 64; shift += 8) {
        size_t cnt[256] = {0};
        for (int i = 0; i < n; i++)
            cnt[(uint8_t)~(a[i] >> shift)]++;
        if (cnt[(uint8_t)~(a[0] >> shift)] == (size_t)n)
            continue;   /* every key has this byte */
        size_t at = 0;
        for (int d = 0; d < 256; d++) {
            size_t c = cnt[d];
            cnt[d] = at;
            at += c;
        }
        for (int i = 0; i < n; i++)
            b[cnt[(uint8_t)~(a[i] >> shift)]++] = a[i];
        uint64_t *t = a;
        a = b;
        b = t;
    }
    if (a != key)
        for (int i = 0; i < n; i++)
            key[i] = a[i];
}

/* The k largest keys (k < V), sorted descending into sc->key; a min-heap of k keys over
 * one pass, so that most tokens cost one compare. */
static int top_k_keys(llm_sampler_scratch *sc, const float *prob, int V, int k)
{
    uint64_t *h = sc->key;
    for (int i = 0; i < k; i++) {   /* the first k, heapified as they come */
        uint64_t x = mkkey(prob, i);
        int c = i;
        while (c > 0 && h[(c - 1) / 2] > x) {
            h[c] = h[(c - 1) / 2];
            c = (c - 1) / 2;
        }
        h[c] = x;
    }
    for (int i = k; i < V; i++) {
        uint64_t x = mkkey(prob, i);
        if (x <= h[0])
            continue;
        int c = 0;
        for (;;) {   /* x replaces the smallest and sinks */
            int l = 2 * c + 1, m = c;
            uint64_t mv = x;
            if (l < k && h[l] < mv) { m = l; mv = h[l]; }
            if (l + 1 < k && h[l + 1] < mv) m = l + 1;
            if (m == c)
                break;
            h[c] = h[m];
            c = m;
        }
        h[c] = x;
    }
    sort_desc(h, sc->tmp, k);
    return k;
}

/* Tokens that may be in the nucleus of mass want (no top-k): those at or above a
 * threshold whose tokens hold more than want (tried from 1/16 down by factors of 16,
 * the largest probability being 1), sorted descending into sc->key.  The margin keeps
 * the walk over the sorted keys, which sums in another order, inside the set. */
static int nucleus_keys(llm_sampler_scratch *sc, const float *prob, int V, double want)
{
    double need = want * (1.0 + 1e-9);
    float tau = 1.0f / 16;
    for (;;) {
        double mass = 0.0;
        for (int i = 0; i < V; i++)
            mass += prob[i] >= tau ? prob[i] : 0.0f;
        if (mass >= need || tau == 0.0f)
            break;
        tau = tau > 1e-30f ? tau / 16 : 0.0f;
    }
    int n = 0;
    for (int i = 0; i < V; i++)
        if (prob[i] >= tau)
            sc->key[n++] = mkkey(prob, i);
    sort_desc(sc->key, sc->tmp, n);
    return n;
}

int llm_sampler_sample(llm_sampler *s, const float *logits, int V, llm_sampler_scratch *sc)
{
    if (s->p.temperature <= 0.0f || V < 1)
        return llm_argmax(logits, V);
    if (sc->cap < V) {
        float *p = realloc(sc->prob, (size_t)V * sizeof *p);
        if (!p) return -1;
        sc->prob = p;
        uint64_t *k = realloc(sc->key, (size_t)V * sizeof *k);
        if (!k) return -1;
        sc->key = k;
        uint64_t *t = realloc(sc->tmp, (size_t)V * sizeof *t);
        if (!t) return -1;
        sc->tmp = t;
        sc->cap = V;
    }
    const float *prob = sc->prob;
    double total = llm_sampler_probs(logits, V, s->p.temperature, sc->prob);
    double u = llm_sampler_uniform(s);
    if (!(total > 0.0) || !isfinite(total))
        return llm_argmax(logits, V);
    int k = s->p.top_k > 0 && s->p.top_k < V ? s->p.top_k : V;
    if (k == V && s->p.top_p >= 1.0f) {
        double target = u * total, c = 0.0;
        for (int i = 0; i < V; i++) {
            c += prob[i];
            if (target < c)
                return i;
        }
        return llm_argmax(logits, V);   /* u * total rounded up to the sum */
    }
    int n;
    double mass = 0.0;
    if (k < V) {
        n = top_k_keys(sc, prob, V, k);
        for (int i = 0; i < n; i++)
            mass += key_prob(sc->key[i]);
    } else {
        mass = total;
        n = nucleus_keys(sc, prob, V, s->p.top_p * total);
    }
    const uint64_t *key = sc->key;
    if (s->p.top_p < 1.0f) {
        /* the nucleus: the shortest prefix reaching top_p of the mass */
        double c = 0.0, want = s->p.top_p * mass;
        int m = 0;
        while (m < n) {
            c += key_prob(key[m++]);
            if (c >= want)
                break;
        }
        n = m;
        mass = c;
    }
    double target = u * mass, c = 0.0;
    for (int i = 0; i < n; i++) {
        c += key_prob(key[i]);
        if (target < c)
            return key_id(key[i]);
    }
    return key_id(key[n - 1]);
}
