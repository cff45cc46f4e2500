/* tokenizer_bpe.c — GPT-2 byte-level BPE: lookup tables, pre-tokenization (PCRE2 JIT),
 * a heap-driven merge per pre-token, and a per-thread cache of pre-token -> ids. */
#define PCRE2_CODE_UNIT_WIDTH 8
#include "common/tokenizer_int.h"

#include <pcre2.h>
#include <stdlib.h>
#include <string.h>

/* GPT-2's pre-tokenization pattern (case-sensitive contractions, letters, numbers,
 * other, whitespace not followed by non-space, whitespace). */
static const char gpt2_pattern[] =
    "'s|'t|'re|'ve|'m|'ll|'d| ?\\p{L}+| ?\\p{N}+| ?[^\\s\\p{L}\\p{N}]+|\\s+(?!\\S)|\\s+";

#define CACHE_MAX_KEY   128        /* longer pre-tokens are not cached */
#define CACHE_MAX_SLOTS (1u << 20) /* beyond this the cache is emptied and refilled */
#define CACHE_MAX_ARENA (1u << 21) /* 4-byte words of keys and ids (8 MiB), likewise */

typedef struct {
    uint64_t h;
    uint32_t val;          /* the id when icnt == 1 and klen <= 8, else an offset in abuf */
    uint16_t klen, icnt;   /* klen 0: empty slot */
} centry;                  /* 16 bytes: most lookups touch one cache line only */

typedef struct {
    uint32_t rank, pos, lid, rid;
} hentry;

struct llm_tok_state {
    pcre2_match_data *md;
    pcre2_match_context *mctx;
    pcre2_jit_stack *jstack;
    centry *ce;
    size_t cmask, cn;
    uint32_t *abuf;        /* arena: [key bytes, padded to 4, when klen > 8] then ids */
    size_t an, acap;
    /* merge scratch, grown to the longest pre-token seen */
    uint32_t *sym;
    int32_t *next, *prev;
    hentry *heap;
    size_t scap;
};

/* 8 bytes at a time: pre-tokens are short, so this is mostly one or two rounds.  For a
 * given length up to 8 every step is invertible (xor with a constant, multiply by an odd
 * constant, xorshift), so distinct keys of equal length <= 8 never collide. */
static uint64_t hash_bytes(const uint8_t *p, size_t n)
{
    uint64_t h = (uint64_t)n * 0x9e3779b97f4a7c15ull, w;
    for (; n >= 8; p += 8, n -= 8) {
        memcpy(&w, p, 8);
        h = (h ^ w) * 0xbf58476d1ce4e5b9ull;
        h ^= h >> 31;
    }
    if (n) {
        w = 0;
        for (size_t i = 0; i < n; i++)
            w |= (uint64_t)p[i] << (8 * i);
        h = (h ^ w) * 0x94d049bb133111ebull;
    }
    return h ^ (h >> 29);
}

static inline size_t hash_pair(uint64_t key, size_t mask)
{
    key *= 0x9e3779b97f4a7c15ull;
    return (size_t)(key >> 32 ^ key) & mask;
}

static size_t pow2_at_least(size_t n)
{
    size_t c = 16;
    while (c < n)
        c *= 2;
    return c;
}

int64_t llm_tok_find(const llm_tokenizer *t, const uint8_t *b, size_t n)
{
    size_t i = (size_t)hash_bytes(b, n) & t->vmask;
    for (;;) {
        uint32_t s = t->vslots[i];
        if (!s)
            return -1;
        uint32_t id = s - 1, a = t->offsets[id], l = t->offsets[id + 1] - a;
        if (l == n && !memcmp(t->vocab_bytes + a, b, n))
            return id;
        i = (i + 1) & t->vmask;
    }
}

/* rank and result of merging (a, b), or 0 when there is no such merge */
static inline int merge_find(const llm_tokenizer *t, uint32_t a, uint32_t b, uint32_t *rank,
                             uint32_t *res)
{
    uint64_t key = ((uint64_t)a << 32 | b) + 1;
    size_t i = hash_pair(key, t->mmask);
    for (;;) {
        uint64_t k = t->mkeys[i];
        if (k == key) {
            *rank = t->mrank[i];
            *res = t->mres[i];
            return 1;
        }
        if (!k)
            return 0;
        i = (i + 1) & t->mmask;
    }
}

static void state_free(llm_tok_state *s);

void llm_tok_bpe_free(llm_tokenizer *t)
{
    free(t->vocab_bytes);
    free(t->offsets);
    free(t->merges);
    free(t->mkeys);
    free(t->mrank);
    free(t->mres);
    free(t->vslots);
    if (t->re)
        pcre2_code_free(t->re);
    for (int i = 0; i < t->npool; i++)
        state_free(t->pool[i]);
    free(t->pool);
    pthread_mutex_destroy(&t->pool_mu);
}

static int ascii_classes(uint8_t cls[128]);

int llm_tok_build_bpe(llm_tokenizer **out, uint8_t *vbytes, uint32_t *offsets, int vocab,
                      uint32_t eot, const char *what, llm_status *st)
{
    llm_tokenizer *t = calloc(1, sizeof *t);
    if (!t) {
        free(vbytes);
        free(offsets);
        return llm_err(st, LLM_ENOMEM, "out of memory");
    }
    t->kind = LLM_TOK_GPT2;
    t->vocab = vocab;
    t->eot = eot;
    t->vocab_bytes = vbytes;
    t->offsets = offsets;
    pthread_mutex_init(&t->pool_mu, NULL);
    int rc = LLM_OK;

    if (vocab <= 0 || vocab > LLM_TOK_MAX_VOCAB) {
        rc = llm_err(st, LLM_EDATA, "%s: bad vocabulary size %d", what, vocab);
        goto fail;
    }
    if (eot >= (uint32_t)vocab) {
        rc = llm_err(st, LLM_EDATA, "%s: end-of-text id %u out of range", what, eot);
        goto fail;
    }
    if (offsets[0] != 0) {
        rc = llm_err(st, LLM_EDATA, "%s: vocabulary offsets must start at 0", what);
        goto fail;
    }
    uint8_t *padded = realloc(vbytes, (size_t)offsets[vocab] + LLM_TOK_PAD);
    if (!padded) {
        rc = llm_err(st, LLM_ENOMEM, "out of memory");
        goto fail;
    }
    memset(padded + offsets[vocab], 0, LLM_TOK_PAD);
    t->vocab_bytes = vbytes = padded;
    for (int i = 0; i < vocab; i++) {
        uint32_t l = offsets[i + 1] - offsets[i];
        if (offsets[i + 1] <= offsets[i] || l > LLM_TOK_MAX_TOKLEN) {
            rc = llm_err(st, LLM_EDATA, "%s: token %d has a bad length", what, i);
            goto fail;
        }
    }
    /* the end-of-text id decodes, exports and is encoded as "<|endoftext|>": it must be
     * that token, or a round trip through vocab.json would move it */
    if (offsets[eot + 1] - offsets[eot] != 13 || memcmp(vbytes + offsets[eot], "<|endoftext|>", 13)) {
        rc = llm_err(st, LLM_EDATA, "%s: end-of-text id %u is not the token '<|endoftext|>'", what,
                     eot);
        goto fail;
    }
    t->vmask = pow2_at_least((size_t)vocab * 2) - 1;
    t->vslots = calloc(t->vmask + 1, sizeof *t->vslots);
    if (!t->vslots) {
        rc = llm_err(st, LLM_ENOMEM, "out of memory");
        goto fail;
    }
    for (int id = 0; id < vocab; id++) {
        const uint8_t *b = vbytes + offsets[id];
        size_t n = offsets[id + 1] - offsets[id];
        size_t i = (size_t)hash_bytes(b, n) & t->vmask;
        for (; t->vslots[i]; i = (i + 1) & t->vmask) {
            uint32_t o = t->vslots[i] - 1, a = offsets[o];
            if (offsets[o + 1] - a == n && !memcmp(vbytes + a, b, n)) {
                rc = llm_err(st, LLM_EDATA, "%s: token %d duplicates token %u", what, id, o);
                goto fail;
            }
        }
        t->vslots[i] = (uint32_t)id + 1;
    }
    for (int c = 0; c < 256; c++) {
        uint8_t b = (uint8_t)c;
        int64_t id = llm_tok_find(t, &b, 1);
        if (id < 0) {
            rc = llm_err(st, LLM_EDATA, "%s: byte 0x%02x has no token", what, c);
            goto fail;
        }
        t->byte_id[c] = (uint32_t)id;
    }
    int err;
    PCRE2_SIZE eoff;
    t->re = pcre2_compile((PCRE2_SPTR)gpt2_pattern, PCRE2_ZERO_TERMINATED,
                          PCRE2_UTF | PCRE2_UCP | PCRE2_MATCH_INVALID_UTF, &err, &eoff, NULL);
    if (!t->re) {
        rc = llm_err(st, LLM_ESOFTWARE, "cannot compile the pre-tokenization pattern (pcre2 error %d)", err);
        goto fail;
    }
    /* JIT is an optimisation: without it (e.g. no executable memory) matching still works */
    t->jit = pcre2_jit_compile(t->re, PCRE2_JIT_COMPLETE) == 0;
    t->fast = ascii_classes(t->acls) == 0;
    *out = t;
    return LLM_OK;
fail:
    llm_tok_bpe_free(t);
    free(t);
    return rc;
}

int llm_tok_set_merges(llm_tokenizer *t, int32_t *merges, int nmerges, const char *what,
                       llm_status *st)
{
    free(t->merges);
    free(t->mkeys);
    free(t->mrank);
    free(t->mres);
    t->merges = merges;
    t->nmerges = nmerges;
    t->mkeys = NULL;
    t->mrank = t->mres = NULL;
    if (nmerges < 0 || nmerges > LLM_TOK_MAX_VOCAB)
        return llm_err(st, LLM_EDATA, "%s: bad number of merges %d", what, nmerges);
    t->mmask = pow2_at_least((size_t)nmerges * 2) - 1;
    t->mkeys = calloc(t->mmask + 1, sizeof *t->mkeys);
    t->mrank = malloc((t->mmask + 1) * sizeof *t->mrank);
    t->mres = malloc((t->mmask + 1) * sizeof *t->mres);
    if (!t->mkeys || !t->mrank || !t->mres)
        return llm_err(st, LLM_ENOMEM, "out of memory");
    const uint32_t *off = t->offsets;
    uint8_t cat[2 * LLM_TOK_MAX_TOKLEN];
    for (int r = 0; r < nmerges; r++) {
        int32_t a = merges[2 * r], b = merges[2 * r + 1];
        if (a < 0 || b < 0 || a >= t->vocab || b >= t->vocab)
            return llm_err(st, LLM_EDATA, "%s: merge %d refers to an unknown token", what, r + 1);
        size_t la = off[a + 1] - off[a], lb = off[b + 1] - off[b];
        memcpy(cat, t->vocab_bytes + off[a], la);
        memcpy(cat + la, t->vocab_bytes + off[b], lb);
        int64_t res = llm_tok_find(t, cat, la + lb);
        if (res < 0)
            return llm_err(st, LLM_EDATA, "%s: merge %d produces a token not in the vocabulary",
                           what, r + 1);
        uint64_t key = ((uint64_t)(uint32_t)a << 32 | (uint32_t)b) + 1;
        size_t i = hash_pair(key, t->mmask);
        while (t->mkeys[i] && t->mkeys[i] != key)
            i = (i + 1) & t->mmask;
        if (t->mkeys[i])
            continue; /* a repeated merge keeps its first (lowest) rank */
        t->mkeys[i] = key;
        t->mrank[i] = (uint32_t)r;
        t->mres[i] = (uint32_t)res;
    }
    return LLM_OK;
}

/* ---- per-thread state ---- */

static void state_free(llm_tok_state *s)
{
    if (!s)
        return;
    pcre2_match_data_free(s->md);
    pcre2_match_context_free(s->mctx);
    pcre2_jit_stack_free(s->jstack);
    free(s->ce);
    free(s->abuf);
    free(s->sym);
    free(s->next);
    free(s->prev);
    free(s->heap);
    free(s);
}

static llm_tok_state *state_get(const llm_tokenizer *tc)
{
    /* The pool is the only mutable part of a tokenizer; encode is logically const. */
    llm_tokenizer *t = (llm_tokenizer *)tc;
    llm_tok_state *s = NULL;
    pthread_mutex_lock(&t->pool_mu);
    if (t->npool)
        s = t->pool[--t->npool];
    pthread_mutex_unlock(&t->pool_mu);
    if (s)
        return s;
    s = calloc(1, sizeof *s);
    if (!s)
        return NULL;
    s->md = pcre2_match_data_create(1, NULL);
    s->mctx = pcre2_match_context_create(NULL);
    s->jstack = pcre2_jit_stack_create(32 * 1024, 1024 * 1024, NULL);
    s->cmask = 4096 - 1;
    s->ce = calloc(s->cmask + 1, sizeof *s->ce);
    if (!s->md || !s->mctx || !s->jstack || !s->ce) {
        state_free(s);
        return NULL;
    }
    pcre2_jit_stack_assign(s->mctx, NULL, s->jstack);
    return s;
}

static int state_put(const llm_tokenizer *tc, llm_tok_state *s)
{
    llm_tokenizer *t = (llm_tokenizer *)tc;
    pthread_mutex_lock(&t->pool_mu);
    if (t->npool == t->cappool) {
        int cap = t->cappool ? t->cappool * 2 : 8;
        llm_tok_state **p = realloc(t->pool, (size_t)cap * sizeof *p);
        if (!p) {
            pthread_mutex_unlock(&t->pool_mu);
            state_free(s);
            return -1;
        }
        t->pool = p;
        t->cappool = cap;
    }
    t->pool[t->npool++] = s;
    pthread_mutex_unlock(&t->pool_mu);
    return 0;
}

static int grow_scratch(llm_tok_state *s, size_t n)
{
    if (n <= s->scap)
        return 0;
    size_t cap = pow2_at_least(n);
    uint32_t *sym = realloc(s->sym, cap * sizeof *sym);
    if (sym)
        s->sym = sym;
    int32_t *nx = realloc(s->next, cap * sizeof *nx);
    if (nx)
        s->next = nx;
    int32_t *pv = realloc(s->prev, cap * sizeof *pv);
    if (pv)
        s->prev = pv;
    hentry *hp = realloc(s->heap, 3 * cap * sizeof *hp);
    if (hp)
        s->heap = hp;
    if (!sym || !nx || !pv || !hp)
        return -1;
    s->scap = cap;
    return 0;
}

/* ---- the merge: lowest rank first, leftmost first among equal ranks ---- */

static inline int hless(const hentry *a, const hentry *b)
{
    return a->rank < b->rank || (a->rank == b->rank && a->pos < b->pos);
}

static void hpush(hentry *h, size_t *n, hentry e)
{
    size_t i = (*n)++;
    while (i) {
        size_t p = (i - 1) / 2;
        if (!hless(&e, &h[p]))
            break;
        h[i] = h[p];
        i = p;
    }
    h[i] = e;
}

static hentry hpop(hentry *h, size_t *n)
{
    hentry top = h[0], last = h[--(*n)];
    size_t i = 0, m = *n;
    for (;;) {
        size_t c = 2 * i + 1;
        if (c >= m)
            break;
        if (c + 1 < m && hless(&h[c + 1], &h[c]))
            c++;
        if (!hless(&h[c], &last))
            break;
        h[i] = h[c];
        i = c;
    }
    if (m)
        h[i] = last;
    return top;
}

static inline void try_pair(const llm_tokenizer *t, llm_tok_state *s, size_t *hn, int32_t pos)
{
    int32_t nx = s->next[pos];
    uint32_t rank, res;
    if (nx >= 0 && merge_find(t, s->sym[pos], s->sym[nx], &rank, &res))
        hpush(s->heap, hn, (hentry){rank, (uint32_t)pos, s->sym[pos], s->sym[nx]});
}

/* Merge the bytes p[0..n) into s->sym; returns the number of ids, compacted in s->sym. */
static size_t bpe_word(const llm_tokenizer *t, llm_tok_state *s, const uint8_t *p, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        s->sym[i] = t->byte_id[p[i]];
        s->next[i] = i + 1 < n ? (int32_t)i + 1 : -1;
        s->prev[i] = (int32_t)i - 1;
    }
    size_t hn = 0;
    for (size_t i = 0; i + 1 < n; i++)
        try_pair(t, s, &hn, (int32_t)i);
    while (hn) {
        hentry e = hpop(s->heap, &hn);
        int32_t l = (int32_t)e.pos, r = s->next[l];
        /* stale entries: the left symbol changed or died, or its right neighbour changed */
        if (s->sym[l] != e.lid || r < 0 || s->sym[r] != e.rid)
            continue;
        uint32_t rank = 0, res = 0;
        merge_find(t, e.lid, e.rid, &rank, &res);
        s->sym[l] = res;
        s->sym[r] = UINT32_MAX;
        s->next[l] = s->next[r];
        if (s->next[r] >= 0)
            s->prev[s->next[r]] = l;
        if (s->prev[l] >= 0)
            try_pair(t, s, &hn, s->prev[l]);
        try_pair(t, s, &hn, l);
    }
    size_t k = 0;
    for (int32_t i = 0; i >= 0; i = s->next[i])
        s->sym[k++] = s->sym[i];
    return k;
}

static int cache_grow(llm_tok_state *s)
{
    size_t cap = (s->cmask + 1) * 2;
    centry *ne = calloc(cap, sizeof *ne);
    if (!ne)
        return -1;
    for (size_t i = 0; i <= s->cmask; i++) {
        if (!s->ce[i].klen)
            continue;
        size_t j = (size_t)s->ce[i].h & (cap - 1);
        while (ne[j].klen)
            j = (j + 1) & (cap - 1);
        ne[j] = s->ce[i];
    }
    free(s->ce);
    s->ce = ne;
    s->cmask = cap - 1;
    return 0;
}

static void cache_clear(llm_tok_state *s)
{
    memset(s->ce, 0, (s->cmask + 1) * sizeof *s->ce);
    s->cn = s->an = 0;
}

/* Remember ids for key; failure to cache is harmless (the next lookup just misses). */
static void cache_put(llm_tok_state *s, uint64_t h, const uint8_t *key, size_t klen,
                      const uint32_t *ids, size_t nids)
{
    if (2 * (s->cn + 1) > s->cmask + 1) {
        if (s->cmask + 1 >= CACHE_MAX_SLOTS || cache_grow(s))
            cache_clear(s);
    }
    size_t kw = klen > 8 ? (klen + 3) / 4 : 0, need = nids == 1 && !kw ? 0 : kw + nids;
    if (need > CACHE_MAX_ARENA / 2)
        return;
    if (s->an + need > CACHE_MAX_ARENA)
        cache_clear(s);   /* long pre-tokens that never repeat would fill it without end */
    if (s->an + need > s->acap) {
        size_t cap = s->acap ? s->acap * 2 : 1 << 14;
        while (cap < s->an + need)
            cap *= 2;
        if (cap > CACHE_MAX_ARENA)
            cap = CACHE_MAX_ARENA;
        uint32_t *nb = realloc(s->abuf, cap * sizeof *nb);
        if (!nb)
            return;
        s->abuf = nb;
        s->acap = cap;
    }
    size_t j = (size_t)h & s->cmask;
    while (s->ce[j].klen)
        j = (j + 1) & s->cmask;
    uint32_t val = (uint32_t)s->an;
    if (need) {
        if (kw) {
            s->abuf[s->an + kw - 1] = 0;
            memcpy(s->abuf + s->an, key, klen);
        }
        memcpy(s->abuf + s->an + kw, ids, nids * sizeof *ids);
        s->an += need;
    } else {
        val = ids[0];
    }
    s->ce[j] = (centry){h, val, (uint16_t)klen, (uint16_t)nids};
    s->cn++;
}

/* The cache key of a pre-token (unused, 0, for single bytes and long words, which are
 * not cached).  Not altered in any way: equal-length keys <= 8 bytes rely on it being
 * a bijection. */
static inline uint64_t word_hash(const uint8_t *p, size_t n)
{
    return n >= 2 && n <= CACHE_MAX_KEY ? hash_bytes(p, n) : 0;
}

/* Encode one pre-token p[0..n) (n >= 1) onto out; h = word_hash(p, n). */
static int encode_word(const llm_tokenizer *t, llm_tok_state *s, const uint8_t *p, size_t n,
                       uint64_t h, llm_ids *out)
{
    if (out->cap - out->n < n && llm_ids_reserve(out, n))
        return -1;
    if (n == 1) {
        out->v[out->n++] = t->byte_id[p[0]];
        return 0;
    }
    if (n <= CACHE_MAX_KEY) {
        for (size_t j = (size_t)h & s->cmask; s->ce[j].klen; j = (j + 1) & s->cmask) {
            const centry *c = &s->ce[j];
            if (c->h != h || c->klen != n)
                continue;
            /* up to 8 bytes the hash is a bijection for a given length, so equal hashes
             * are equal keys; longer keys are compared */
            if (n <= 8) {
                if (c->icnt == 1)
                    out->v[out->n++] = c->val;
                else {
                    memcpy(out->v + out->n, s->abuf + c->val, c->icnt * sizeof(uint32_t));
                    out->n += c->icnt;
                }
                return 0;
            }
            if (!memcmp(s->abuf + c->val, p, n)) {
                memcpy(out->v + out->n, s->abuf + c->val + (n + 3) / 4, c->icnt * sizeof(uint32_t));
                out->n += c->icnt;
                return 0;
            }
        }
    }
    if (grow_scratch(s, n))
        return -1;
    size_t k = bpe_word(t, s, p, n);
    memcpy(out->v + out->n, s->sym, k * sizeof(uint32_t));
    out->n += k;
    if (n <= CACHE_MAX_KEY)
        cache_put(s, h, p, n, s->sym, k);
    return 0;
}

/* ---- pre-tokenization ---- */

enum { C_OTHER = 0, C_LETTER = 1, C_NUMBER = 2, C_SPACE = 3 };

/* The ASCII classes of \p{L}, \p{N} and \s, asked of PCRE2 itself so that the fast path
 * below agrees with the pattern by construction.  Returns 0, or -1 when the classes
 * overlap (then only PCRE2 is used). */
static int ascii_classes(uint8_t cls[128])
{
    static const char *const pat[3] = {"\\p{L}", "\\p{N}", "\\s"};
    memset(cls, C_OTHER, 128);
    for (int k = 0; k < 3; k++) {
        int err;
        PCRE2_SIZE eoff;
        pcre2_code *re = pcre2_compile((PCRE2_SPTR)pat[k], PCRE2_ZERO_TERMINATED,
                                       PCRE2_UTF | PCRE2_UCP | PCRE2_ANCHORED, &err, &eoff, NULL);
        pcre2_match_data *md = re ? pcre2_match_data_create_from_pattern(re, NULL) : NULL;
        if (!md) {
            pcre2_code_free(re);
            return -1;
        }
        for (int c = 0; c < 128; c++) {
            uint8_t ch = (uint8_t)c;
            if (pcre2_match(re, &ch, 1, 0, 0, md, NULL) > 0) {
                if (cls[c] != C_OTHER)
                    k = 99;
                cls[c] = (uint8_t)(k + 1);
            }
        }
        pcre2_match_data_free(md);
        pcre2_code_free(re);
        if (k == 99)
            return -1;
    }
    return 0;
}

/* End of the run of class k from i; 0 when the run reaches a non-ASCII byte (which
 * might continue it: only PCRE2 knows). */
static inline size_t ascii_run(const uint8_t *cls, const uint8_t *p, size_t len, size_t i, int k)
{
    while (i < len && p[i] < 0x80 && cls[p[i]] == k)
        i++;
    return i < len && p[i] >= 0x80 ? 0 : i;
}

/* The end of GPT-2's match at pos when ASCII alone decides it, else 0.  Mirrors the
 * alternatives in order: contractions, optional space + letters | numbers | other,
 * whitespace not followed by non-space (all but the last of a run followed by
 * non-space), whitespace. */
static size_t ascii_match(const uint8_t *cls, const uint8_t *p, size_t len, size_t pos)
{
    uint8_t c = p[pos];
    if (c >= 0x80)
        return 0;
    if (c == '\'' && pos + 1 < len) {
        uint8_t c1 = p[pos + 1], c2 = pos + 2 < len ? p[pos + 2] : 0;
        if (c1 == 's' || c1 == 't' || c1 == 'm' || c1 == 'd')
            return pos + 2;
        if ((c1 == 'r' && c2 == 'e') || (c1 == 'v' && c2 == 'e') || (c1 == 'l' && c2 == 'l'))
            return pos + 3;
    }
    if (c == ' ' && pos + 1 < len) {
        uint8_t c1 = p[pos + 1];
        if (c1 >= 0x80)
            return 0;
        if (cls[c1] != C_SPACE)
            return ascii_run(cls, p, len, pos + 1, cls[c1]);
    }
    int k = cls[c];
    if (k != C_SPACE)
        return ascii_run(cls, p, len, pos, k);
    size_t q = ascii_run(cls, p, len, pos, C_SPACE);
    if (!q || q == len)
        return q;
    return q - pos >= 2 ? q - 1 : q;
}

int llm_tok_bpe_encode(const llm_tokenizer *t, const char *text, size_t len, llm_ids *out,
                       llm_status *st)
{
    llm_tok_state *s = state_get(t);
    if (!s)
        return llm_err(st, LLM_ENOMEM, "out of memory");
    const uint8_t *p = (const uint8_t *)text;
    PCRE2_SIZE *ov = pcre2_get_ovector_pointer(s->md);
    size_t pos = 0, qa = 0, qn = 0; /* the pending pre-token [qa, qa + qn) */
    uint64_t qh = 0;
    int rc = LLM_OK;
    /* Each pre-token is encoded one step late: its cache slot is prefetched while the
     * next match is found, hiding the cache miss behind the pattern matching. */
#define FLUSH()                                                      \
    do {                                                             \
        if (qn && encode_word(t, s, p + qa, qn, qh, out))            \
            goto oom;                                                \
        qn = 0;                                                      \
    } while (0)
    while (pos < len) {
        size_t a = pos, b = t->fast ? ascii_match(t->acls, p, len, pos) : 0;
        int m = b ? 1
                  : t->jit ? pcre2_jit_match(t->re, p, len, pos, 0, s->md, s->mctx)
                           : pcre2_match(t->re, p, len, pos, 0, s->md, s->mctx);
        if (b) {
            /* decided by the ASCII fast path */
        } else if (m == PCRE2_ERROR_NOMATCH) {
            a = b = len;
        } else if (m < 0) {
            PCRE2_UCHAR buf[160];
            pcre2_get_error_message(m, buf, sizeof buf);
            rc = llm_err(st, LLM_ESOFTWARE, "pre-tokenization failed at byte %zu: %s", pos, (char *)buf);
            break;
        } else {
            a = ov[0];
            b = ov[1];
        }
        if (b <= pos) { /* no progress (cannot happen with this pattern): take one byte */
            a = pos;
            b = pos + 1;
        }
        /* Bytes no alternative matches (invalid UTF-8) form a pre-token of their own. */
        if (a > pos) {
            FLUSH();
            if (encode_word(t, s, p + pos, a - pos, word_hash(p + pos, a - pos), out))
                goto oom;
        }
        if (b > a) {
            uint64_t h = word_hash(p + a, b - a);
            if (b - a >= 2)
                __builtin_prefetch(&s->ce[h & s->cmask]);
            FLUSH();
            qa = a;
            qn = b - a;
            qh = h;
        }
        pos = b;
    }
    if (!rc)
        FLUSH();
#undef FLUSH
    if (0) {
oom:
        rc = llm_err(st, LLM_ENOMEM, "out of memory");
    }
    if (state_put(t, s) && !rc)
        rc = llm_err(st, LLM_ENOMEM, "out of memory");
    return rc;
}
