/* profile_stub.h — the fixture of the profiler's unit tests (test_profile.c,
 * test_profile_lo.c): a stub inner backend that counts calls and remembers the last
 * shape, a profiler over it with a fake parameter buffer and named regions, and the
 * lookup of an aggregate entry.  Included by one test file each: static definitions. */
#ifndef LLM_TEST_PROFILE_STUB_H
#define LLM_TEST_PROFILE_STUB_H

#include "tests/unit/testutil.h"

#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/ckpt.h"
#include "common/model.h"
#include "common/profile.h"

/* ---- a stub inner backend: counts calls, remembers the last shape ---- */

typedef struct {
    int calls[LLM_OP_COUNT];
    int lastN, lastC, lastOC;
    size_t allocs, frees;
} stub;

#define S(be) ((stub *)(be)->ctx)
static void *s_alloc(llm_backend *be, size_t n) { S(be)->allocs++; return calloc(1, n ? n : 1); }
static void s_free(llm_backend *be, void *p) { if (p) S(be)->frees++; free(p); }
static void s_to_device(llm_backend *be, void *d, const void *s, size_t n) { S(be)->calls[LLM_OP_TO_DEVICE]++; memcpy(d, s, n); }
static void s_to_host(llm_backend *be, void *d, const void *s, size_t n) { S(be)->calls[LLM_OP_TO_HOST]++; memcpy(d, s, n); }
static void s_copy(llm_backend *be, void *d, const void *s, size_t n) { S(be)->calls[LLM_OP_COPY]++; memcpy(d, s, n); }
static void s_zero(llm_backend *be, void *p, size_t n) { S(be)->calls[LLM_OP_ZERO]++; memset(p, 0, n); }
static void s_sync(llm_backend *be) { S(be)->calls[LLM_OP_SYNC]++; }
static void s_embed_f(llm_backend *be, float *o, const int32_t *i, const float *a, const float *b, int B, int T, int C) { (void)o; (void)i; (void)a; (void)b; (void)B; (void)T; (void)C; S(be)->calls[LLM_OP_EMBED_FWD]++; }
static void s_ln_f(llm_backend *be, float *o, float *m, float *r, const float *i, const float *w, const float *b, int N, int C) { (void)o; (void)m; (void)r; (void)i; (void)w; (void)b; S(be)->calls[LLM_OP_LAYERNORM_FWD]++; S(be)->lastN = N; S(be)->lastC = C; }
static void s_mm_f(llm_backend *be, float *o, const float *i, const float *w, const float *b, int N, int C, int OC) { (void)o; (void)i; (void)w; (void)b; stub *s = S(be); s->calls[LLM_OP_MATMUL_FWD]++; s->lastN = N; s->lastC = C; s->lastOC = OC; }
static void s_att_f(llm_backend *be, float *o, float *a, const float *q, int B, int T, int C, int NH) { (void)o; (void)a; (void)q; (void)B; (void)T; (void)C; (void)NH; S(be)->calls[LLM_OP_ATTENTION_FWD]++; }
static void s_gelu_f(llm_backend *be, float *o, const float *i, size_t n) { (void)o; (void)i; (void)n; S(be)->calls[LLM_OP_GELU_FWD]++; }
static void s_res_f(llm_backend *be, float *o, const float *a, const float *b, size_t n) { (void)o; (void)a; (void)b; (void)n; S(be)->calls[LLM_OP_RESIDUAL_FWD]++; }
static void s_resln_f(llm_backend *be, float *r, float *o, float *m, float *rs, const float *a, const float *b, const float *w, const float *bias, int N, int C) { (void)r; (void)o; (void)m; (void)rs; (void)a; (void)b; (void)w; (void)bias; S(be)->calls[LLM_OP_RESIDUAL_LAYERNORM_FWD]++; S(be)->lastN = N; S(be)->lastC = C; }
static void s_xent_f(llm_backend *be, float *l, float *s, const float *g, const int32_t *t, int N, int V, int Vp) { (void)l; (void)s; (void)g; (void)t; (void)N; (void)V; (void)Vp; S(be)->calls[LLM_OP_XENT_FWD]++; }
static void s_embed_b(llm_backend *be, float *a, float *b, const float *d, const int32_t *i, int B, int T, int C) { (void)a; (void)b; (void)d; (void)i; (void)B; (void)T; (void)C; S(be)->calls[LLM_OP_EMBED_BWD]++; }
static void s_ln_b(llm_backend *be, float *di, float *dw, float *db, const float *d, const float *i, const float *w, const float *m, const float *r, int N, int C) { (void)di; (void)dw; (void)db; (void)d; (void)i; (void)w; (void)m; (void)r; (void)N; (void)C; S(be)->calls[LLM_OP_LAYERNORM_BWD]++; }
static void s_mm_b(llm_backend *be, float *di, float *dw, float *db, const float *d, const float *i, const float *w, int N, int C, int OC) { (void)di; (void)dw; (void)db; (void)d; (void)i; (void)w; (void)N; (void)C; (void)OC; S(be)->calls[LLM_OP_MATMUL_BWD]++; }
static void s_att_b(llm_backend *be, float *dq, const float *d, const float *q, const float *a, int B, int T, int C, int NH) { (void)dq; (void)d; (void)q; (void)a; (void)B; (void)T; (void)C; (void)NH; S(be)->calls[LLM_OP_ATTENTION_BWD]++; }
static void s_gelu_b(llm_backend *be, float *di, const float *i, const float *d, size_t n) { (void)di; (void)i; (void)d; (void)n; S(be)->calls[LLM_OP_GELU_BWD]++; }
static void s_acc(llm_backend *be, float *d, const float *s, size_t n) { (void)d; (void)s; (void)n; S(be)->calls[LLM_OP_ACCUMULATE]++; }
static void s_xent_b(llm_backend *be, float *dl, const float *l, const float *s, const int32_t *t, float dloss, int N, int V, int Vp) { (void)dl; (void)l; (void)s; (void)t; (void)dloss; (void)N; (void)V; (void)Vp; S(be)->calls[LLM_OP_XENT_BWD]++; }
static double s_ss(llm_backend *be, const float *g, size_t n) { (void)g; S(be)->calls[LLM_OP_SUM_SQUARES]++; return (double)n; }
static void s_adamw(llm_backend *be, float *p, const float *g, float *m, float *v, size_t n, float lr, float b1, float b2, float eps, float wd, int t, float gs) { (void)p; (void)g; (void)m; (void)v; (void)n; (void)lr; (void)b1; (void)b2; (void)eps; (void)wd; (void)t; (void)gs; S(be)->calls[LLM_OP_ADAMW]++; }

static void stub_init(llm_backend *be, stub *s)
{
    memset(s, 0, sizeof *s);
    *be = (llm_backend){
        .name = "stub", .ctx = s, .threads = 1,
        .alloc = s_alloc, .free = s_free, .to_device = s_to_device, .to_host = s_to_host,
        .copy = s_copy, .zero = s_zero, .sync = s_sync,
        .embed_forward = s_embed_f, .layernorm_forward = s_ln_f, .matmul_forward = s_mm_f,
        .attention_forward = s_att_f, .gelu_forward = s_gelu_f, .residual_forward = s_res_f,
        .xent_forward = s_xent_f, .embed_backward = s_embed_b, .layernorm_backward = s_ln_b,
        .matmul_backward = s_mm_b, .attention_backward = s_att_b, .gelu_backward = s_gelu_b,
        .accumulate = s_acc, .xent_backward = s_xent_b, .sum_squares = s_ss, .adamw = s_adamw,
    };
}

static __attribute__((unused)) const llm_profile_entry *find(const llm_profile_entry *v, int n, llm_op op, const char *site,
                                     int layer)
{
    for (int i = 0; i < n; i++)
        if (v[i].op == op && strcmp(v[i].site, site) == 0 && v[i].layer == layer) return &v[i];
    return NULL;
}

typedef struct {
    llm_backend inner, be;
    stub s;
    llm_profile *p;
    float *params;   /* fake parameter buffer: 2 layers of c_attn weights, then wte */
} fixture;

static __attribute__((unused)) int setup(void **state)
{
    fixture *f = calloc(1, sizeof *f);
    stub_init(&f->inner, &f->s);
    llm_status st = {0};
    assert_int_equal(llm_profile_new(&f->p, &f->inner, 1000, &st), 0);
    llm_profile_backend(f->p, &f->be);
    f->params = calloc(300, sizeof(float));
    assert_int_equal(llm_profile_add_region(f->p, f->params + 200, 100 * 4, "wte", &st), 0);
    assert_int_equal(llm_profile_add_region(f->p, f->params, 60 * 4, "h.0.attn.c_attn.weight", &st), 0);
    assert_int_equal(llm_profile_add_region(f->p, f->params + 60, 20 * 4, "h.0.ln_1.weight", &st), 0);
    assert_int_equal(llm_profile_add_region(f->p, f->params + 100, 60 * 4, "h.1.attn.c_attn.weight", &st), 0);
    *state = f;
    return 0;
}

static __attribute__((unused)) int teardown(void **state)
{
    fixture *f = *state;
    llm_profile_free(f->p);
    free(f->params);
    free(f);
    return 0;
}

#endif
