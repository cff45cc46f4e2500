/* Unit tests of the profiling wrapper under mixed precision: the lo ops' counts and
 * attribution through the lo weight copy (stub backend), capabilities, and a bf16
 * training run on the CPU with every op's site, layer, calls and cost. */
#include "tests/unit/profile_stub.h"

/* ---- mixed precision: the lo ops, attribution through the lo copy, capabilities ---- */

static int last_lo, last_dt;
static void s_cast_lo(llm_backend *be, void *d, const float *s, size_t n, int lo) { (void)d; (void)s; (void)n; last_lo = lo; S(be)->calls[LLM_OP_CAST_LO]++; }
static void s_mm_f_lo(llm_backend *be, void *o, int odt, const void *i, const void *w, int lo, const void *b, int N, int C, int OC) { (void)o; (void)i; (void)w; (void)b; last_lo = lo; last_dt = odt; stub *s = S(be); s->calls[LLM_OP_MATMUL_FWD_LO]++; s->lastN = N; s->lastC = C; s->lastOC = OC; }
static void s_mm_b_lo(llm_backend *be, void *di, int ddt, float *dw, float *db, const void *d, const void *i, const void *w, int lo, int N, int C, int OC) { (void)di; (void)dw; (void)db; (void)d; (void)i; (void)w; (void)N; (void)C; (void)OC; last_lo = lo; last_dt = ddt; S(be)->calls[LLM_OP_MATMUL_BWD_LO]++; }
static void s_ln_f_lo(llm_backend *be, float *r, void *o, float *m, float *rs, const float *a, const float *b, const float *w, const float *bias, int N, int C, int lo) { (void)r; (void)o; (void)m; (void)rs; (void)a; (void)b; (void)w; (void)bias; last_lo = lo; S(be)->calls[LLM_OP_LAYERNORM_FWD_LO]++; S(be)->lastN = N; S(be)->lastC = C; }
static void s_gelu_f_lo(llm_backend *be, void *o, const void *i, size_t n, int lo) { (void)o; (void)i; (void)n; last_lo = lo; S(be)->calls[LLM_OP_GELU_FWD_LO]++; }
static void s_gelu_b_lo(llm_backend *be, void *di, const void *i, const void *d, size_t n, int lo) { (void)di; (void)i; (void)d; (void)n; last_lo = lo; S(be)->calls[LLM_OP_GELU_BWD_LO]++; }
static void s_mm_f_gelu_lo(llm_backend *be, void *o, void *pre, const void *i, const void *w, int lo, const void *b, int N, int C, int OC) { (void)o; (void)pre; (void)i; (void)w; (void)b; last_lo = lo; stub *s = S(be); s->calls[LLM_OP_MATMUL_FWD_GELU_LO]++; s->lastN = N; s->lastC = C; s->lastOC = OC; }
static void s_mm_b_dgelu_lo(llm_backend *be, void *di, float *dw, float *db, const void *d, const void *i, const void *pre, const void *w, int lo, int N, int C, int OC) { (void)di; (void)dw; (void)db; (void)d; (void)i; (void)pre; (void)w; (void)N; (void)C; (void)OC; last_lo = lo; S(be)->calls[LLM_OP_MATMUL_BWD_DGELU_LO]++; }
static void s_att_f_lse(llm_backend *be, void *o, float *l, const void *q, int B, int T, int C, int NH, int lo) { (void)o; (void)l; (void)q; (void)B; (void)T; (void)C; (void)NH; last_lo = lo; S(be)->calls[LLM_OP_ATTENTION_FWD_LSE]++; }
static void s_att_b_lse(llm_backend *be, void *d, const void *g, const void *q, const void *o, const float *l, int B, int T, int C, int NH, int lo) { (void)d; (void)g; (void)q; (void)o; (void)l; (void)B; (void)T; (void)C; (void)NH; last_lo = lo; S(be)->calls[LLM_OP_ATTENTION_BWD_LSE]++; }
static void s_xent_f_lo(llm_backend *be, float *l, float *s, const void *g, const int32_t *t, int N, int V, int Vp, int lo) { (void)l; (void)s; (void)g; (void)t; (void)N; (void)V; (void)Vp; last_lo = lo; S(be)->calls[LLM_OP_XENT_FWD_LO]++; }
static void s_xent_b_lo(llm_backend *be, void *dl, const void *l, const float *s, const int32_t *t, float dloss, int N, int V, int Vp, int lo) { (void)dl; (void)l; (void)s; (void)t; (void)dloss; (void)N; (void)V; (void)Vp; last_lo = lo; S(be)->calls[LLM_OP_XENT_BWD_LO]++; }
static void s_ln_b_lo(llm_backend *be, float *di, void *dl, float *dw, float *db, const float *d, const float *i, const float *w, const float *m, const float *r, int N, int C, int lo) { (void)di; (void)dl; (void)dw; (void)db; (void)d; (void)i; (void)w; (void)m; (void)r; (void)N; (void)C; last_lo = lo; S(be)->calls[LLM_OP_LAYERNORM_BWD_LO]++; }
static void s_xent_fused(llm_backend *be, float *l, void *g, const int32_t *t, float dloss, int N, int V, int Vp, int lo) { (void)l; (void)g; (void)t; (void)dloss; (void)N; (void)V; (void)Vp; last_lo = lo; S(be)->calls[LLM_OP_XENT_FUSED]++; }

/* Give a stub backend every lo op. */
static void stub_lo(llm_backend *be)
{
    be->cast_lo = s_cast_lo;
    be->matmul_forward_lo = s_mm_f_lo;
    be->matmul_backward_lo = s_mm_b_lo;
    be->matmul_forward_gelu_lo = s_mm_f_gelu_lo;
    be->matmul_backward_dgelu_lo = s_mm_b_dgelu_lo;
    be->layernorm_forward_lo = s_ln_f_lo;
    be->gelu_forward_lo = s_gelu_f_lo;
    be->gelu_backward_lo = s_gelu_b_lo;
    be->attention_forward_lse = s_att_f_lse;
    be->attention_backward_lse = s_att_b_lse;
    be->xent_forward_lo = s_xent_f_lo;
    be->xent_backward_lo = s_xent_b_lo;
    be->layernorm_backward_lo = s_ln_b_lo;
    be->xent_fused = s_xent_fused;
}

static int s_stats(llm_backend *be, struct llm_device_stats *o) { (void)be; o->mem_used_mb = 42; o->util_pct = -1; return 0; }

static void test_capabilities(void **state)
{
    (void)state;
    stub s;
    llm_backend inner, be;
    llm_profile *p;
    llm_status st = {0};
    /* an inner backend without the optional ops: the wrapper has none either */
    stub_init(&inner, &s);
    assert_int_equal(llm_profile_new(&p, &inner, 0, &st), 0);
    llm_profile_backend(p, &be);
    assert_null(be.cast_lo);
    assert_null(be.matmul_forward_lo);
    assert_null(be.matmul_backward_lo);
    assert_null(be.matmul_forward_gelu_lo);
    assert_null(be.matmul_backward_dgelu_lo);
    assert_null(be.layernorm_forward_lo);
    assert_null(be.gelu_forward_lo);
    assert_null(be.gelu_backward_lo);
    assert_null(be.attention_forward_lse);
    assert_null(be.attention_backward_lse);
    assert_null(be.xent_forward_lo);
    assert_null(be.xent_backward_lo);
    assert_null(be.layernorm_backward_lo);
    assert_null(be.xent_fused);
    assert_null(be.device_stats);
    assert_null(be.matmul_rows);
    assert_null(be.residual_layernorm_forward);
    llm_profile_free(p);
    /* with them: forwarded */
    inner.residual_layernorm_forward = s_resln_f;
    stub_lo(&inner);
    inner.device_stats = s_stats;
    assert_int_equal(llm_profile_new(&p, &inner, 0, &st), 0);
    llm_profile_backend(p, &be);
    assert_non_null(be.cast_lo);
    assert_non_null(be.matmul_forward_lo);
    assert_non_null(be.matmul_backward_lo);
    assert_non_null(be.matmul_forward_gelu_lo);
    assert_non_null(be.matmul_backward_dgelu_lo);
    assert_non_null(be.layernorm_forward_lo);
    assert_non_null(be.gelu_forward_lo);
    assert_non_null(be.gelu_backward_lo);
    assert_non_null(be.attention_forward_lse);
    assert_non_null(be.attention_backward_lse);
    assert_non_null(be.xent_forward_lo);
    assert_non_null(be.xent_backward_lo);
    assert_non_null(be.layernorm_backward_lo);
    assert_non_null(be.xent_fused);
    assert_non_null(be.residual_layernorm_forward);
    struct llm_device_stats ds = {0};
    assert_int_equal(be.device_stats(&be, &ds), 0);
    assert_true(ds.mem_used_mb == 42 && ds.util_pct == -1);
    assert_int_equal(llm_profile_nevents(p), 0);   /* a query, not an op */
    llm_profile_free(p);
}

/* The entry (op, site, layer) exists, with calls calls and the cost c each. */
static void expect_entry(const llm_profile_entry *v, int n, llm_op op, const char *site, int layer,
                         long calls, llm_op_cost c)
{
    const llm_profile_entry *e = find(v, n, op, site, layer);
    if (!e) fail_msg("no entry %s '%s' layer %d", llm_op_name(op), site, layer);
    if (e->calls != calls || e->flop != calls * c.flop || e->bytes != calls * c.bytes)
        fail_msg("%s '%s' layer %d: %ld calls, %.0f flop, %.0f bytes; want %ld, %.0f, %.0f",
                 llm_op_name(op), site, layer, e->calls, e->flop, e->bytes, calls, calls * c.flop,
                 calls * c.bytes);
}

static void test_mixed_precision(void **state)
{
    fixture *f = *state;
    /* the fixture's profiler wraps f->inner: give it the lo ops and re-fill the wrapper */
    stub_lo(&f->inner);
    llm_profile_backend(f->p, &f->be);
    llm_backend *be = &f->be;
    /* the model's lo copy: 300 two-byte elements, cast from the whole parameter buffer */
    uint16_t *lo = be->alloc(be, 300 * sizeof(uint16_t));
    assert_non_null(lo);
    be->cast_lo(be, lo, f->params, 300, LLM_DT_BF16);
    assert_int_equal(last_lo, LLM_DT_BF16);
    assert_int_equal(llm_profile_mem_lo(f->p), 600);
    /* stand-ins for lo activations and fp32 statistics (the stubs never touch them) */
    uint16_t act[64];
    float f32[16] = {0};
    /* layer 0: ln_1 by its weight (no residual: after the embedding), c_attn into lo */
    be->layernorm_forward_lo(be, NULL, act, f32, f32 + 2, f32, NULL, f->params + 60, f->params + 61,
                             2, 4, LLM_DT_BF16);
    be->matmul_forward_lo(be, act, LLM_DT_BF16, act, lo + 10, LLM_DT_BF16, lo + 20, 4, 3, 5);
    assert_int_equal(last_dt, LLM_DT_BF16);
    be->gelu_forward_lo(be, act, act, 10, LLM_DT_BF16);                       /* -> layer 0 */
    /* layer 1: an fp32 output */
    be->matmul_forward_lo(be, f32, LLM_DT_F32, act, lo + 100, LLM_DT_F16, NULL, 4, 3, 5);
    assert_true(last_lo == LLM_DT_F16 && last_dt == LLM_DT_F32);
    be->attention_forward_lse(be, act, f32, act, 1, 3, 4, 2, LLM_DT_F16);     /* -> layer 1 */
    assert_int_equal(last_lo, LLM_DT_F16);
    be->attention_backward_lse(be, act, act, act, act, f32, 1, 3, 4, 2, LLM_DT_BF16);
    assert_int_equal(last_lo, LLM_DT_BF16);
    be->gelu_backward_lo(be, act, act, act, 10, LLM_DT_F16);                  /* -> layer 1 */
    assert_int_equal(last_lo, LLM_DT_F16);
    /* the residual gradient rounded for the backward GEMMs: an activation, attributed to
     * the context, not counted as the lo copy */
    uint16_t dlo[16];
    float dres[16] = {0};
    be->cast_lo(be, dlo, dres, 16, LLM_DT_BF16);
    assert_int_equal(llm_profile_mem_lo(f->p), 600);
    /* the loss on lo logits, the lm_head, a backward GEMM writing a lo input gradient */
    be->matmul_forward_lo(be, act, LLM_DT_BF16, act, lo + 250, LLM_DT_BF16, NULL, 2, 4, 8);
    be->xent_forward_lo(be, f32, f32, act, NULL, 2, 5, 8, LLM_DT_BF16);
    be->xent_backward_lo(be, act, act, f32, NULL, 1.0f, 2, 5, 8, LLM_DT_F16);
    assert_int_equal(last_lo, LLM_DT_F16);
    be->xent_fused(be, f32, act, NULL, 1.0f, 2, 5, 8, LLM_DT_BF16);
    assert_int_equal(last_lo, LLM_DT_BF16);
    be->matmul_backward_lo(be, f32, LLM_DT_F32, f32, NULL, act, act, lo + 250, LLM_DT_BF16, 2, 4, 8);
    assert_int_equal(last_dt, LLM_DT_F32);
    be->matmul_backward_lo(be, act, LLM_DT_BF16, f32, f32, act, act, lo + 110, LLM_DT_F16, 4, 3, 5);
    assert_true(last_lo == LLM_DT_F16 && last_dt == LLM_DT_BF16);
    /* the fused GELU GEMMs, attributed by their lo weights (layer 1) */
    be->matmul_forward_gelu_lo(be, act, act, act, lo + 100, LLM_DT_BF16, lo + 20, 4, 3, 5);
    assert_int_equal(last_lo, LLM_DT_BF16);
    be->matmul_backward_dgelu_lo(be, act, f32, f32, act, act, act, lo + 110, LLM_DT_F16, 4, 3, 5);
    assert_int_equal(last_lo, LLM_DT_F16);
    /* a single tensor cast: its own site */
    uint16_t one[20];
    be->cast_lo(be, one, f->params + 60, 20, LLM_DT_BF16);
    assert_int_equal(f->s.calls[LLM_OP_CAST_LO], 3);
    assert_int_equal(f->s.calls[LLM_OP_MATMUL_FWD_LO], 3);
    assert_int_equal(f->s.calls[LLM_OP_MATMUL_BWD_LO], 2);
    assert_int_equal(f->s.calls[LLM_OP_LAYERNORM_FWD_LO], 1);
    assert_int_equal(f->s.calls[LLM_OP_GELU_FWD_LO], 1);
    assert_int_equal(f->s.calls[LLM_OP_GELU_BWD_LO], 1);
    assert_int_equal(f->s.calls[LLM_OP_XENT_FWD_LO], 1);
    assert_int_equal(f->s.calls[LLM_OP_XENT_BWD_LO], 1);
    assert_int_equal(f->s.calls[LLM_OP_XENT_FUSED], 1);
    assert_int_equal(f->s.calls[LLM_OP_MATMUL_FWD_GELU_LO], 1);
    assert_int_equal(f->s.calls[LLM_OP_MATMUL_BWD_DGELU_LO], 1);
    assert_int_equal(f->s.lastOC, 5);   /* the last forward GEMM's shape: the fused one */

    llm_profile_entry *v;
    int n;
    llm_status st = {0};
    assert_int_equal(llm_profile_entries(f->p, 0, &v, &n, &st), 0);
    assert_int_equal(n, 18);
    expect_entry(v, n, LLM_OP_MATMUL_FWD_GELU_LO, "attn.c_attn", 1, 1,
                 llm_cost_matmul_forward_gelu_lo(4, 3, 5, 1));
    expect_entry(v, n, LLM_OP_MATMUL_BWD_DGELU_LO, "attn.c_attn", 1, 1,
                 llm_cost_matmul_backward_dgelu_lo(4, 3, 5, 1));
    expect_entry(v, n, LLM_OP_CAST_LO, "params", -1, 1, llm_cost_cast_lo(300));
    expect_entry(v, n, LLM_OP_CAST_LO, "ln_1", 0, 1, llm_cost_cast_lo(20));
    expect_entry(v, n, LLM_OP_CAST_LO, "", 1, 1, llm_cost_cast_lo(16));
    expect_entry(v, n, LLM_OP_LAYERNORM_FWD_LO, "ln_1", 0, 1, llm_cost_layernorm_forward_lo(2, 4, 0, 1));
    expect_entry(v, n, LLM_OP_MATMUL_FWD_LO, "attn.c_attn", 0, 1,
                 llm_cost_matmul_forward_lo(4, 3, 5, 1, LLM_DT_BF16));
    expect_entry(v, n, LLM_OP_GELU_FWD_LO, "", 0, 1, llm_cost_gelu_forward_lo(10));
    expect_entry(v, n, LLM_OP_MATMUL_FWD_LO, "attn.c_attn", 1, 1,
                 llm_cost_matmul_forward_lo(4, 3, 5, 0, LLM_DT_F32));
    expect_entry(v, n, LLM_OP_ATTENTION_FWD_LSE, "", 1, 1, llm_cost_attention_forward_lse(1, 3, 4, 2));
    expect_entry(v, n, LLM_OP_ATTENTION_BWD_LSE, "", 1, 1, llm_cost_attention_backward_lse(1, 3, 4, 2));
    expect_entry(v, n, LLM_OP_GELU_BWD_LO, "", 1, 1, llm_cost_gelu_backward_lo(10));
    expect_entry(v, n, LLM_OP_MATMUL_FWD_LO, "lm_head", -1, 1,
                 llm_cost_matmul_forward_lo(2, 4, 8, 0, LLM_DT_BF16));
    expect_entry(v, n, LLM_OP_XENT_FWD_LO, "", -1, 1, llm_cost_xent_forward_lo(2, 5, 8));
    expect_entry(v, n, LLM_OP_XENT_BWD_LO, "", -1, 1, llm_cost_xent_backward_lo(2, 5, 8));
    expect_entry(v, n, LLM_OP_XENT_FUSED, "", -1, 1, llm_cost_xent_fused(2, 5, 8, LLM_DT_BF16));
    expect_entry(v, n, LLM_OP_MATMUL_BWD_LO, "lm_head", -1, 1,
                 llm_cost_matmul_backward_lo(2, 4, 8, 0, LLM_DT_F32));
    expect_entry(v, n, LLM_OP_MATMUL_BWD_LO, "attn.c_attn", 1, 1,
                 llm_cost_matmul_backward_lo(4, 3, 5, 1, LLM_DT_BF16));
    free(v);

    /* freed: the lo copy is forgotten, its memory no longer counts */
    be->free(be, lo);
    assert_int_equal(llm_profile_mem_lo(f->p), 40);   /* the 20-element cast into one[] */
    llm_profile_reset(f->p);
    uint16_t stray[8];
    be->matmul_forward_lo(be, act, LLM_DT_F32, act, stray, LLM_DT_BF16, NULL, 1, 2, 3);
    assert_int_equal(llm_profile_entries(f->p, 0, &v, &n, &st), 0);
    assert_non_null(find(v, n, LLM_OP_MATMUL_FWD_LO, "", 1));   /* unattributed: the context */
    free(v);
    /* an activation cast over a lo copy: the mapping is gone */
    lo = be->alloc(be, 300 * sizeof(uint16_t));
    be->cast_lo(be, lo, f->params, 300, LLM_DT_BF16);
    assert_int_equal(llm_profile_mem_lo(f->p), 640);
    be->cast_lo(be, lo + 100, dres, 16, LLM_DT_BF16);
    assert_int_equal(llm_profile_mem_lo(f->p), 40);
    llm_profile_reset(f->p);
    be->matmul_forward_lo(be, act, LLM_DT_F32, act, lo + 10, LLM_DT_BF16, NULL, 1, 2, 3);
    assert_int_equal(llm_profile_entries(f->p, 0, &v, &n, &st), 0);
    assert_null(find(v, n, LLM_OP_MATMUL_FWD_LO, "attn.c_attn", 0));
    free(v);
    be->free(be, lo);
}

/* Sum of the "X" op events of a Chrome trace inside each span named "step *": each op
 * lies within its span and their times add up to at most the span. */
static void check_trace_spans(const char *trace, int steps, double *op_s, double *span_s)
{
    json_error_t err;
    json_t *doc = json_loads(trace, 0, &err);
    assert_non_null(doc);
    json_t *ev = json_object_get(doc, "traceEvents");
    assert_true(json_is_array(ev));
    double s0[16], s1[16];
    int ns = 0;
    size_t i;
    json_t *e;
    json_array_foreach(ev, i, e) {
        const char *name = json_string_value(json_object_get(e, "name"));
        const char *ph = json_string_value(json_object_get(e, "ph"));
        if (ph && !strcmp(ph, "X") && name && !strncmp(name, "step ", 5) && ns < 16) {
            s0[ns] = json_number_value(json_object_get(e, "ts"));
            s1[ns] = s0[ns] + json_number_value(json_object_get(e, "dur"));
            ns++;
        }
    }
    assert_int_equal(ns, steps);
    *op_s = *span_s = 0;
    for (int k = 0; k < ns; k++) *span_s += (s1[k] - s0[k]) * 1e-6;
    json_array_foreach(ev, i, e) {
        const char *cat = json_string_value(json_object_get(e, "cat"));
        if (!cat || (strcmp(cat, "op") && strcmp(cat, "memory"))) continue;
        double t0 = json_number_value(json_object_get(e, "ts"));
        double t1 = t0 + json_number_value(json_object_get(e, "dur"));
        int in = 0;
        for (int k = 0; k < ns; k++) in |= t0 >= s0[k] - 1 && t1 <= s1[k] + 1;   /* 1 us slack */
        if (!in) fail_msg("op %s at %.1f us outside every step", json_string_value(json_object_get(e, "name")), t0);
        *op_s += (t1 - t0) * 1e-6;
    }
    json_decref(doc);
}

static char *trace_of(llm_profile *p)
{
    char *buf = NULL;
    size_t len = 0;
    FILE *m = open_memstream(&buf, &len);
    llm_status st = {0};
    assert_int_equal(llm_profile_write_trace(p, m, &st), 0);
    fclose(m);
    return buf;
}

/* bf16 training of a small model on the CPU backend through the wrapper: every lo op the
 * model runs is named and counted at its site, no fp32 compute op is left, the op times
 * add up to the steps, and only the parameters' lo copy counts as lo memory. */
/* adamw_segs: forwarded, one optimizer entry with the lo write in its bytes; the lo copy
 * it writes is remembered like cast_lo's, so a GEMM reading it is attributed to the
 * weight's site without any cast_lo. */
static int segs_calls, segs_nseg;
static void s_adamw_segs(llm_backend *be, float *p, void *p_lo, const float *g, float *m,
                         float *v, size_t mvb, const llm_adamw_seg *segs, int nseg, float lr,
                         float b1, float b2, float eps, int t, float gs, int lo)
{
    (void)be; (void)p; (void)p_lo; (void)g; (void)m; (void)v; (void)mvb; (void)segs;
    (void)lr; (void)b1; (void)b2; (void)eps; (void)t; (void)gs; (void)lo;
    segs_calls++;
    segs_nseg = nseg;
}

static void test_adamw_segs(void **state)
{
    fixture *f = *state;
    llm_backend probe;
    llm_profile_backend(f->p, &probe);
    assert_null(probe.adamw_segs);   /* the stub has none: neither has the wrapper */
    stub_lo(&f->inner);
    f->inner.adamw_segs = s_adamw_segs;
    llm_profile_backend(f->p, &f->be);
    llm_backend *be = &f->be;
    uint16_t *lo = be->alloc(be, 300 * sizeof(uint16_t));
    assert_non_null(lo);
    const llm_adamw_seg segs[] = {{0, 60, 0.1f}, {60, 0, 0.0f}, {60, 40, 0.0f}, {100, 200, 0.1f}};
    segs_calls = 0;
    be->adamw_segs(be, f->params, lo, NULL, NULL, NULL, 0, segs, 4, 1e-3f, 0.9f, 0.95f, 1e-8f,
                   1, 1.0f, LLM_DT_BF16);
    be->adamw_segs(be, f->params, NULL, NULL, NULL, NULL, 0, segs, 1, 1e-3f, 0.9f, 0.95f, 1e-8f,
                   1, 1.0f, 0);
    assert_int_equal(segs_calls, 2);
    assert_int_equal(segs_nseg, 1);
    assert_int_equal(llm_profile_mem_lo(f->p), 600);
    uint16_t act[64];
    be->matmul_forward_lo(be, act, LLM_DT_BF16, act, lo + 100, LLM_DT_BF16, NULL, 4, 3, 5);
    assert_int_equal(f->s.calls[LLM_OP_CAST_LO], 0);
    llm_profile_entry *v;
    int n;
    llm_status st = {0};
    assert_int_equal(llm_profile_entries(f->p, 0, &v, &n, &st), 0);
    /* 300 elements with the lo copy, then 60 without */
    llm_op_cost c1 = llm_cost_adamw_segs(300, 1), c2 = llm_cost_adamw_segs(60, 0);
    const llm_profile_entry *e = find(v, n, LLM_OP_ADAMW_SEGS, "optimizer", -1);
    assert_non_null(e);
    assert_true(e->calls == 2 && e->flop == c1.flop + c2.flop && e->bytes == c1.bytes + c2.bytes);
    assert_true(c1.flop == 17.0 * 300 && c1.bytes == 30.0 * 300 && c2.bytes == 28.0 * 60);
    expect_entry(v, n, LLM_OP_MATMUL_FWD_LO, "attn.c_attn", 1, 1,
                 llm_cost_matmul_forward_lo(4, 3, 5, 0, LLM_DT_BF16));
    assert_string_equal(llm_op_name(LLM_OP_ADAMW_SEGS), "adamw_segs");
    free(v);
    be->free(be, lo);
}

static void test_train_bf16_cpu(void **state)
{
    (void)state;
    llm_backend inner, be;
    char err[128];
    assert_int_equal(llm_backend_init(&inner, "cpu", 1, err, sizeof err), 0);
    llm_profile *p;
    llm_status st = {0};
    assert_int_equal(llm_profile_new(&p, &inner, 100000, &st), 0);
    llm_profile_backend(p, &be);
    llm_model_config mc;
    memset(&mc, 0, sizeof mc);
    snprintf(mc.arch, sizeof mc.arch, "gpt2");
    mc.n_layer = 2;
    mc.n_head = 2;
    mc.n_embd = 32;
    mc.vocab_size = 100;
    mc.padded_vocab = 128;
    mc.max_seq_len = 16;
    llm_model *m;
    assert_int_equal(llm_model_new(&m, &mc, &be, &st), 0);
    assert_int_equal(llm_model_set_precision(m, LLM_DT_BF16, &st), 0);
    llm_model_init_gpt2(m, 3);
    float *params = llm_model_params(m);
    for (int i = 0; i < llm_model_nviews(m); i++) {
        const llm_param_view *pv = llm_model_view(m, i);
        assert_int_equal(llm_profile_add_region(p, params + pv->offset, pv->numel * sizeof(float),
                                                pv->name, &st), 0);
    }
    enum { B = 2, T = 16, STEPS = 2 };
    int32_t ids[B * T], tgt[B * T];
    for (int i = 0; i < B * T; i++) {
        ids[i] = (i * 7 + 3) % mc.vocab_size;
        tgt[i] = (i * 11 + 5) % mc.vocab_size;
    }
    llm_adamw_config hp = {1e-3f, 0.9f, 0.95f, 1e-8f, 0.1f, 1.0f};
    llm_profile_reset(p);   /* the uploads of the initial parameters are no step's */
    for (int s = 1; s <= STEPS; s++) {
        char name[16];
        snprintf(name, sizeof name, "step %d", s);
        llm_profile_span_begin(p, name);
        float loss;
        assert_int_equal(llm_model_zero_grad(m, &st), 0);
        assert_int_equal(llm_model_forward(m, ids, tgt, B, T, &loss, &st), 0);
        assert_true(isfinite(loss));
        assert_int_equal(llm_model_backward(m, 1.0f, &st), 0);
        assert_int_equal(llm_model_update(m, &hp, s, NULL, NULL, &st), 0);
        llm_profile_span_end(p);
    }
    /* only the parameters' lo copy counts (the residual gradient's casts do not) */
    assert_int_equal(llm_profile_mem_lo(p), 2 * llm_model_num_params(&mc));

    llm_profile_entry *v;
    int n;
    assert_int_equal(llm_profile_entries(p, 0, &v, &n, &st), 0);
    const int N = B * T, C = 32, Vp = 128, V = 100, bf = LLM_DT_BF16, f4 = LLM_DT_F32;
    for (int l = 0; l < 2; l++) {
        /* ln_1 of layer 0 follows the embedding (no residual); every other one is fused
         * with the residual before it */
        expect_entry(v, n, LLM_OP_LAYERNORM_FWD_LO, "ln_1", l, STEPS,
                     llm_cost_layernorm_forward_lo(N, C, l > 0, 1));
        expect_entry(v, n, LLM_OP_LAYERNORM_FWD_LO, "ln_2", l, STEPS,
                     llm_cost_layernorm_forward_lo(N, C, 1, 1));
        /* the GEMMs feeding lo tensors write lo, those feeding the residual stream fp32 */
        expect_entry(v, n, LLM_OP_MATMUL_FWD_LO, "attn.c_attn", l, STEPS,
                     llm_cost_matmul_forward_lo(N, C, 3 * C, 1, bf));
        expect_entry(v, n, LLM_OP_MATMUL_FWD_LO, "attn.c_proj", l, STEPS,
                     llm_cost_matmul_forward_lo(N, C, C, 1, f4));
        /* c_fc with its GELU, c_proj's input gradient with the GELU backward: fused */
        expect_entry(v, n, LLM_OP_MATMUL_FWD_GELU_LO, "mlp.c_fc", l, STEPS,
                     llm_cost_matmul_forward_gelu_lo(N, C, 4 * C, 1));
        expect_entry(v, n, LLM_OP_MATMUL_FWD_LO, "mlp.c_proj", l, STEPS,
                     llm_cost_matmul_forward_lo(N, 4 * C, C, 1, f4));
        /* input gradients: lo where a lo op reads them next, fp32 for the layernorms */
        expect_entry(v, n, LLM_OP_MATMUL_BWD_DGELU_LO, "mlp.c_proj", l, STEPS,
                     llm_cost_matmul_backward_dgelu_lo(N, 4 * C, C, 1));
        expect_entry(v, n, LLM_OP_MATMUL_BWD_LO, "mlp.c_fc", l, STEPS,
                     llm_cost_matmul_backward_lo(N, C, 4 * C, 1, f4));
        expect_entry(v, n, LLM_OP_MATMUL_BWD_LO, "attn.c_proj", l, STEPS,
                     llm_cost_matmul_backward_lo(N, C, C, 1, bf));
        expect_entry(v, n, LLM_OP_MATMUL_BWD_LO, "attn.c_attn", l, STEPS,
                     llm_cost_matmul_backward_lo(N, C, 3 * C, 1, f4));
        expect_entry(v, n, LLM_OP_ATTENTION_FWD_LSE, "", l, STEPS,
                     llm_cost_attention_forward_lse(B, T, C, 2));
    }
    expect_entry(v, n, LLM_OP_LAYERNORM_FWD_LO, "ln_f", -1, STEPS, llm_cost_layernorm_forward_lo(N, C, 1, 1));
    expect_entry(v, n, LLM_OP_MATMUL_FWD_LO, "lm_head", -1, STEPS, llm_cost_matmul_forward_lo(N, C, Vp, 0, bf));
    expect_entry(v, n, LLM_OP_MATMUL_BWD_LO, "lm_head", -1, STEPS, llm_cost_matmul_backward_lo(N, C, Vp, 0, f4));
    expect_entry(v, n, LLM_OP_XENT_FWD_LO, "", -1, STEPS, llm_cost_xent_forward_lo(N, V, Vp));
    expect_entry(v, n, LLM_OP_XENT_BWD_LO, "", -1, STEPS, llm_cost_xent_backward_lo(N, V, Vp));
    /* the lo copy is cast once, before the first forward; each update rewrites it */
    expect_entry(v, n, LLM_OP_CAST_LO, "params", -1, 1, llm_cost_cast_lo(llm_model_num_params(&mc)));
    expect_entry(v, n, LLM_OP_ADAMW_SEGS, "optimizer", -1, STEPS,
                 llm_cost_adamw_segs(llm_model_num_params(&mc), 1));
    expect_entry(v, n, LLM_OP_LAYERNORM_BWD_LO, "ln_f", -1, STEPS, llm_cost_layernorm_backward_lo(N, C));
    expect_entry(v, n, LLM_OP_LAYERNORM_BWD_LO, "ln_2", 0, STEPS, llm_cost_layernorm_backward_lo(N, C));
    expect_entry(v, n, LLM_OP_LAYERNORM_BWD, "ln_1", 0, STEPS, llm_cost_layernorm_backward(N, C));
    free(v);
    /* folded: the GELUs only inside the fused GEMMs (without recompute the backward
     * reads the kept output; no separate GELU op), the lse attention backward, the
     * residual gradient's lo copies made by the layernorm backwards (no casts but the
     * weights'; layer 0's ln_1 feeds the fp32 embedding backward only); nothing in fp32
     * but that layernorm backward, the embedding and the optimizer */
    assert_int_equal(llm_profile_entries(p, 1, &v, &n, &st), 0);
    long calls[LLM_OP_COUNT] = {0};
    for (int i = 0; i < n; i++) calls[v[i].op] += v[i].calls;
    free(v);
    assert_int_equal(calls[LLM_OP_MATMUL_FWD_GELU_LO], 2 * STEPS);
    assert_int_equal(calls[LLM_OP_MATMUL_BWD_DGELU_LO], 2 * STEPS);
    assert_int_equal(calls[LLM_OP_GELU_FWD_LO], 0);
    assert_int_equal(calls[LLM_OP_GELU_BWD_LO], 0);
    assert_int_equal(calls[LLM_OP_ATTENTION_BWD_LSE], 2 * STEPS);
    assert_int_equal(calls[LLM_OP_CAST_LO], 1);
    assert_int_equal(calls[LLM_OP_ADAMW_SEGS], STEPS);
    assert_int_equal(calls[LLM_OP_ADAMW], 0);
    assert_int_equal(calls[LLM_OP_LAYERNORM_BWD_LO], (2 * 2) * STEPS);
    assert_int_equal(calls[LLM_OP_LAYERNORM_BWD], 1 * STEPS);
    const llm_op fp32_ops[] = {LLM_OP_MATMUL_FWD, LLM_OP_MATMUL_BWD, LLM_OP_LAYERNORM_FWD,
                               LLM_OP_RESIDUAL_LAYERNORM_FWD, LLM_OP_RESIDUAL_FWD, LLM_OP_GELU_FWD,
                               LLM_OP_GELU_BWD, LLM_OP_ATTENTION_FWD, LLM_OP_ATTENTION_BWD,
                               LLM_OP_XENT_FWD, LLM_OP_XENT_BWD};
    for (size_t k = 0; k < sizeof fp32_ops / sizeof fp32_ops[0]; k++)
        if (calls[fp32_ops[k]]) fail_msg("fp32 op %s ran under bf16", llm_op_name(fp32_ops[k]));
    /* the op times lie inside the steps and add up to at most their span (the host's own
     * work between ops is the rest), and to the recorded total */
    char *tr = trace_of(p);
    double op_s, span_s;
    check_trace_spans(tr, STEPS, &op_s, &span_s);
    free(tr);
    printf("# bf16 cpu: ops %.3f ms of %.3f ms in %d steps\n", 1e3 * op_s, 1e3 * span_s, STEPS);
    assert_true(op_s > 0 && op_s <= span_s * 1.0001 + 2e-6 * llm_profile_nevents(p));
    assert_true(fabs(op_s - llm_profile_total_seconds(p)) <= 1e-6 * llm_profile_nevents(p) + 1e-9);
    llm_model_free(m);
    assert_int_equal(llm_profile_mem_live(p), 0);
    llm_profile_free(p);
    llm_backend_free(&inner);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_capabilities),
        cmocka_unit_test_setup_teardown(test_mixed_precision, setup, teardown),
        cmocka_unit_test_setup_teardown(test_adamw_segs, setup, teardown),
        cmocka_unit_test(test_train_bf16_cpu),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
