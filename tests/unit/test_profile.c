/* Unit tests for the profiling wrapper backend: forwarding, FLOP/byte counts against
 * hand-derived numbers, layer attribution, memory tracking, table/JSON/trace output. */
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

static const llm_profile_entry *find(const llm_profile_entry *v, int n, llm_op op, const char *site,
                                     int layer)
{
    for (int i = 0; i < n; i++)
        if (v[i].op == op && strcmp(v[i].site, site) == 0 && v[i].layer == layer) return &v[i];
    return NULL;
}

/* Hand-derived counts on small shapes (fp32: bytes = 4 x elements touched). */
static void test_cost_formulas(void **state)
{
    (void)state;
    llm_op_cost c;
    /* matmul N=4 C=3 OC=5 + bias: 2*4*3*5 = 120 mul-adds x2 ... = 120 + bias 20 = 140;
     * elements: inp 12 + w 15 + out 20 + bias 5 = 52 -> 208 bytes. */
    c = llm_cost_matmul_forward(4, 3, 5, 1);
    assert_true(c.flop == 140 && c.bytes == 208);
    c = llm_cost_matmul_forward(4, 3, 5, 0);
    assert_true(c.flop == 120 && c.bytes == 188);
    /* matmul backward: dinp (4x5 @ 5x3) 120 + dw (5x4 @ 4x3) 120 + dbias 20 = 260;
     * elements: dout 20 + inp 12 + dinp r/w 24 + w 15 + dw r/w 30 + dbias r/w 10 = 111. */
    c = llm_cost_matmul_backward(4, 3, 5, 1);
    assert_true(c.flop == 260 && c.bytes == 444);
    /* layernorm N=2 C=4: 8 per element = 64; elements in 8 + out 8 + w,b 8 + mean,rstd 4. */
    c = llm_cost_layernorm_forward(2, 4);
    assert_true(c.flop == 64 && c.bytes == 112);
    /* layernorm backward N=2 C=4: 14*8 = 112; dout 8 + inp 8 + dinp r/w 16 + w 4 +
     * dw,db r/w 16 + mean,rstd 4 = 56 -> 224. */
    c = llm_cost_layernorm_backward(2, 4);
    assert_true(c.flop == 112 && c.bytes == 224);
    /* attention B=1 T=3 C=4 NH=2 (hs 2): causal entries 6 per head; per entry QK dot 2hs=4,
     * softmax 5, AV 2hs=4 -> 13; 2 heads -> 156.  qkv 36 + out 12 + att 18 = 66 -> 264. */
    c = llm_cost_attention_forward(1, 3, 4, 2);
    assert_true(c.flop == 156 && c.bytes == 264);
    /* attention backward: per entry 4 matmul terms 8hs=16 + softmax 4 = 20; 12 entries
     * -> 240.  dout 12 + qkv 36 + dqkv r/w 72 + att 18 = 138 -> 552. */
    c = llm_cost_attention_backward(1, 3, 4, 2);
    assert_true(c.flop == 240 && c.bytes == 552);
    /* embed B=2 T=3 C=4: adds 24; ids 6 + wte rows 24 + wpe rows 24 + out 24 = 78. */
    c = llm_cost_embed_forward(2, 3, 4);
    assert_true(c.flop == 24 && c.bytes == 312);
    c = llm_cost_embed_backward(2, 3, 4);
    assert_true(c.flop == 48 && c.bytes == 4 * (6 + 120));
    /* xent N=2 V=5 Vp=8: 4 per logit = 40; logits 10 + targets 2 + losses 2 + lse 2. */
    c = llm_cost_xent_forward(2, 5, 8);
    assert_true(c.flop == 40 && c.bytes == 64);
    /* xent backward: 3 per logit = 30; logits 10 + dlogits 16 (padded too) + targets,lse 4. */
    c = llm_cost_xent_backward(2, 5, 8);
    assert_true(c.flop == 30 && c.bytes == 120);
    c = llm_cost_gelu_forward(10);
    assert_true(c.flop == 80 && c.bytes == 80);
    c = llm_cost_gelu_backward(10);
    assert_true(c.flop == 160 && c.bytes == 160);
    c = llm_cost_residual_forward(10);
    assert_true(c.flop == 10 && c.bytes == 120);
    /* residual_layernorm N=2 C=4: the add 8 + the layernorm 64 = 72; a 8 + b 8 + res 8 +
     * out 8 + w,b 8 + mean,rstd 4 = 44 elements -> 176 bytes (res is not read back). */
    c = llm_cost_residual_layernorm_forward(2, 4);
    assert_true(c.flop == 72 && c.bytes == 176);
    assert_string_equal(llm_op_name(LLM_OP_RESIDUAL_LAYERNORM_FWD), "residual_layernorm_forward");
    c = llm_cost_accumulate(10);
    assert_true(c.flop == 10 && c.bytes == 120);
    c = llm_cost_sum_squares(10);
    assert_true(c.flop == 20 && c.bytes == 40);
    /* adamw: 17 flop per parameter; reads p g m v, writes p m v = 7 floats. */
    c = llm_cost_adamw(10);
    assert_true(c.flop == 170 && c.bytes == 280);
    /* Inference ops.  matmul_rows N=2 C=3 OC=4 f32 + bias: 2*2*3*4 + 8 = 56 flop;
     * weights 12 floats = 48 bytes, inp 6 + out 8 + bias 4 = 18 floats = 72 bytes. */
    c = llm_cost_matmul_rows(2, 3, 4, LLM_DT_F32, 1);
    assert_true(c.flop == 56 && c.bytes == 120);
    /* q8_0 weights (2 x 32): 2 blocks of 34 bytes; inp 32 + out 2 floats. */
    c = llm_cost_matmul_rows(1, 32, 2, LLM_DT_Q8_0, 0);
    assert_true(c.flop == 128 && c.bytes == 68 + 136);
    /* kv_store N=2 C=4: read k,v (16) write k,v (16), slot+pos (4) = 36 floats. */
    c = llm_cost_kv_store(2, 4);
    assert_true(c.flop == 0 && c.bytes == 144);
    /* attention_rows at positions 0 and 2 (S = 1 + 3 = 4 cached positions), C=4 NH=2:
     * per position q.k 2C + softmax 5 per head + p.v 2C = 4C + 5NH = 26 -> 104;
     * q 8 + out 8 + slot/pos 4 + K,V rows 2*4*4 = 32 -> 52 floats. */
    int32_t pos[2] = {0, 2};
    c = llm_cost_attention_rows(pos, 2, 4, 2);
    assert_true(c.flop == 104 && c.bytes == 208);
    /* embed_rows N=2 C=4 f32: 8 adds; wte rows 8 floats, ids+pos 4, wpe rows 8, out 8. */
    c = llm_cost_embed_rows(2, 4, LLM_DT_F32);
    assert_true(c.flop == 8 && c.bytes == 112);
    /* Mixed precision: 2-byte lo elements read as they are; outputs of the dtype asked
     * for, overwritten ones written once.  cast_lo n=10: read 40, write 20. */
    c = llm_cost_cast_lo(10);
    assert_true(c.flop == 0 && c.bytes == 60);
    /* matmul_forward_lo N=4 C=3 OC=5 + bias, fp32 out: flop as fp32 (140); inp 12 x 2 = 24,
     * w_lo 15 x 2 = 30, out 20 x 4 = 80, bias 5 x 4 = 20 -> 154.  lo out: out 20 x 2,
     * bias 5 x 2 -> 104. */
    c = llm_cost_matmul_forward_lo(4, 3, 5, 1, LLM_DT_F32);
    assert_true(c.flop == 140 && c.bytes == 154);
    c = llm_cost_matmul_forward_lo(4, 3, 5, 0, LLM_DT_F32);
    assert_true(c.flop == 120 && c.bytes == 134);
    c = llm_cost_matmul_forward_lo(4, 3, 5, 1, LLM_DT_BF16);
    assert_true(c.flop == 140 && c.bytes == 104);
    c = llm_cost_matmul_forward_lo(4, 3, 5, 0, LLM_DT_F16);
    assert_true(c.flop == 120 && c.bytes == 94);
    /* matmul_backward_lo N=4 C=3 OC=5 + bias, fp32 dinp: flop 260 as fp32; dout 20 x 2 =
     * 40, inp 12 x 2 = 24, dinp written 12 x 4 = 48, w_lo 15 x 2 = 30, dw r/w 15 x 8 = 120,
     * dbias r/w 5 x 8 = 40 -> 302; lo dinp 12 x 2 -> 278. */
    c = llm_cost_matmul_backward_lo(4, 3, 5, 1, LLM_DT_F32);
    assert_true(c.flop == 260 && c.bytes == 302);
    c = llm_cost_matmul_backward_lo(4, 3, 5, 0, LLM_DT_F32);
    assert_true(c.flop == 240 && c.bytes == 262);
    c = llm_cost_matmul_backward_lo(4, 3, 5, 1, LLM_DT_BF16);
    assert_true(c.flop == 260 && c.bytes == 278);
    /* layernorm_forward_lo N=2 C=4 with b and statistics: the add 8 + 64 = 72 flop; a, b
     * read 2 x 32, res written 32, out 8 x 2 = 16, w, bias 32, mean, rstd 16 -> 160.
     * Without b and statistics: 64 flop; a 32 + out 16 + w, bias 32 = 80. */
    c = llm_cost_layernorm_forward_lo(2, 4, 1, 1);
    assert_true(c.flop == 72 && c.bytes == 160);
    c = llm_cost_layernorm_forward_lo(2, 4, 0, 0);
    assert_true(c.flop == 64 && c.bytes == 80);
    c = llm_cost_layernorm_forward_lo(2, 4, 0, 1);
    assert_true(c.flop == 64 && c.bytes == 96);
    /* gelu lo n=10: forward 80 flop, in + out 2 x 20 = 40 bytes; backward 160 flop, inp,
     * dout, dinp 3 x 20 = 60 bytes */
    c = llm_cost_gelu_forward_lo(10);
    assert_true(c.flop == 80 && c.bytes == 40);
    c = llm_cost_gelu_backward_lo(10);
    assert_true(c.flop == 160 && c.bytes == 60);
    /* xent lo N=2 V=5 Vp=8: forward 40 flop; logits 10 x 2 = 20, targets, losses, lse
     * 6 x 4 = 24 -> 44.  Backward 30 flop; logits 20, dlogits 16 x 2 = 32 (padding too),
     * targets, lse 16 -> 68. */
    c = llm_cost_xent_forward_lo(2, 5, 8);
    assert_true(c.flop == 40 && c.bytes == 44);
    c = llm_cost_xent_backward_lo(2, 5, 8);
    assert_true(c.flop == 30 && c.bytes == 68);
    assert_string_equal(llm_op_name(LLM_OP_CAST_LO), "cast_lo");
    assert_string_equal(llm_op_name(LLM_OP_MATMUL_FWD_LO), "matmul_forward_lo");
    assert_string_equal(llm_op_name(LLM_OP_MATMUL_BWD_LO), "matmul_backward_lo");
    assert_string_equal(llm_op_name(LLM_OP_LAYERNORM_FWD_LO), "layernorm_forward_lo");
    assert_string_equal(llm_op_name(LLM_OP_GELU_FWD_LO), "gelu_forward_lo");
    assert_string_equal(llm_op_name(LLM_OP_GELU_BWD_LO), "gelu_backward_lo");
    assert_string_equal(llm_op_name(LLM_OP_XENT_FWD_LO), "xent_forward_lo");
    assert_string_equal(llm_op_name(LLM_OP_XENT_BWD_LO), "xent_backward_lo");
    assert_string_equal(llm_op_name(LLM_OP_MATMUL_FWD_GELU_LO), "matmul_forward_gelu_lo");
    assert_string_equal(llm_op_name(LLM_OP_MATMUL_BWD_DGELU_LO), "matmul_backward_dgelu_lo");
    assert_string_equal(llm_op_name(LLM_OP_LAYERNORM_BWD_LO), "layernorm_backward_lo");
    /* layernorm_backward_lo N=2 C=4: layernorm_backward's 112 flop; its dout, inp, dinp r/w
     * 4 x 8 floats, w, dw, db, ... 5 x 4 and mean, rstd 2 x 2 -> 4 x 56 = 224 bytes, plus
     * the lo copy 8 x 2 = 16 -> 240 */
    c = llm_cost_layernorm_backward_lo(2, 4);
    assert_true(c.flop == 112 && c.bytes == 240);
    /* fused GELU N=2 C=3 OC=4 with bias: forward 48 + 8 (bias) + 8 x 8 (GELU) = 120 flop;
     * inp 12, w 24, out 16, bias 8, pre 16 -> 76 bytes.  Backward 96 + 8 + 16 x 6 (GELU
     * backward) = 200 flop; dout 16, inp 12, dinp 12, w 24, dw 96, dbias 32, pre 12 ->
     * 204 bytes. */
    c = llm_cost_matmul_forward_gelu_lo(2, 3, 4, 1);
    assert_true(c.flop == 120 && c.bytes == 76);
    c = llm_cost_matmul_backward_dgelu_lo(2, 3, 4, 1);
    assert_true(c.flop == 200 && c.bytes == 204);
    c = llm_cost_matmul_backward_dgelu_lo(2, 3, 4, 0);
    assert_true(c.flop == 192 && c.bytes == 172);
    /* attention_forward_lse B=1 T=3 C=4 NH=2: flop 156; qkv 36 x 2 = 72, out 12 x 2 = 24,
     * lse 6 x 4 = 24 -> 120.  Backward: 240 + scores 12 entries x 2hs (4) = 48 + D 6 rows
     * x 2hs (4) = 24 -> 312; dout 24, qkv 72, out 24, dqkv written 72, lse 24 -> 216. */
    c = llm_cost_attention_forward_lse(1, 3, 4, 2);
    assert_true(c.flop == 156 && c.bytes == 120);
    c = llm_cost_attention_backward_lse(1, 3, 4, 2);
    assert_true(c.flop == 312 && c.bytes == 216);
    assert_string_equal(llm_op_name(LLM_OP_ATTENTION_FWD_LSE), "attention_forward_lse");
    assert_string_equal(llm_op_name(LLM_OP_ATTENTION_BWD_LSE), "attention_backward_lse");
    /* every op has a name */
    for (int k = 0; k < LLM_OP_COUNT; k++) {
        assert_non_null(llm_op_name((llm_op)k));
        assert_string_not_equal(llm_op_name((llm_op)k), "?");
    }
    /* No 32-bit overflow on GPT-2 XL sized shapes. */
    c = llm_cost_matmul_forward(8 * 1024, 1600, 4 * 1600, 0);
    assert_true(c.flop == 2.0 * 8192 * 1600 * 6400);
}

typedef struct {
    llm_backend inner, be;
    stub s;
    llm_profile *p;
    float *params;   /* fake parameter buffer: 2 layers of c_attn weights, then wte */
} fixture;

static int setup(void **state)
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

static int teardown(void **state)
{
    fixture *f = *state;
    llm_profile_free(f->p);
    free(f->params);
    free(f);
    return 0;
}

static void run_ops(fixture *f)
{
    llm_backend *be = &f->be;
    be->matmul_forward(be, NULL, NULL, f->params + 10, f->params, 4, 3, 5);   /* layer 0 */
    be->attention_forward(be, NULL, NULL, NULL, 1, 3, 4, 2);                    /* -> layer 0 */
    be->layernorm_forward(be, NULL, NULL, NULL, NULL, f->params + 61, NULL, 2, 4);
    be->matmul_forward(be, NULL, NULL, f->params + 100, NULL, 4, 3, 5);        /* layer 1 */
    be->gelu_forward(be, NULL, NULL, 10);                                        /* -> layer 1 */
    be->matmul_forward(be, NULL, NULL, f->params + 250, NULL, 2, 4, 8);        /* lm_head */
    be->xent_forward(be, NULL, NULL, NULL, NULL, 2, 5, 8);
    be->adamw(be, f->params, NULL, NULL, NULL, 300, 1e-3f, 0.9f, 0.95f, 1e-8f, 0, 1, 1);
}

static void test_forwarding_and_counts(void **state)
{
    fixture *f = *state;
    run_ops(f);
    assert_int_equal(f->s.calls[LLM_OP_MATMUL_FWD], 3);
    assert_int_equal(f->s.calls[LLM_OP_ATTENTION_FWD], 1);
    assert_int_equal(f->s.lastN, 2);
    assert_int_equal(f->s.lastOC, 8);
    llm_profile_entry *v;
    int n;
    llm_status st = {0};
    assert_int_equal(llm_profile_entries(f->p, 0, &v, &n, &st), 0);
    assert_int_equal(n, 8);
    const llm_profile_entry *e = find(v, n, LLM_OP_MATMUL_FWD, "attn.c_attn", 0);
    assert_non_null(e);
    assert_true(e->calls == 1 && e->flop == 140 && e->bytes == 208);
    e = find(v, n, LLM_OP_MATMUL_FWD, "attn.c_attn", 1);
    assert_non_null(e);
    assert_true(e->flop == 120 && e->bytes == 188);
    e = find(v, n, LLM_OP_ATTENTION_FWD, "", 0);
    assert_non_null(e);
    assert_true(e->flop == 156);
    assert_non_null(find(v, n, LLM_OP_LAYERNORM_FWD, "ln_1", 0));
    assert_non_null(find(v, n, LLM_OP_GELU_FWD, "", 1));
    /* The tied output projection reads wte and is reported as the lm_head. */
    e = find(v, n, LLM_OP_MATMUL_FWD, "lm_head", -1);
    assert_non_null(e);
    assert_true(e->flop == 2.0 * 2 * 4 * 8);
    assert_non_null(find(v, n, LLM_OP_XENT_FWD, "", -1));
    assert_non_null(find(v, n, LLM_OP_ADAMW, "optimizer", -1));
    double sum = 0;
    for (int i = 0; i < n; i++) sum += v[i].seconds;
    assert_true(sum > 0 && sum <= llm_profile_total_seconds(f->p) * (1 + 1e-9));
    free(v);

    /* Folded: both c_attn matmuls in one row. */
    assert_int_equal(llm_profile_entries(f->p, 1, &v, &n, &st), 0);
    e = find(v, n, LLM_OP_MATMUL_FWD, "attn.c_attn", -1);
    assert_non_null(e);
    assert_true(e->calls == 2 && e->flop == 260 && e->bytes == 396);
    free(v);

    llm_profile_reset(f->p);
    assert_int_equal(llm_profile_entries(f->p, 0, &v, &n, &st), 0);
    assert_int_equal(n, 0);
    free(v);
}

/* The fused residual + layernorm is attributed by its layernorm's weight (a layer's last
 * residual shows under the next layer's ln_1) and counted with its formula. */
static void test_residual_layernorm(void **state)
{
    fixture *f = *state;
    llm_backend inner = f->inner, be;
    llm_profile *p;
    llm_status st = {0};
    inner.residual_layernorm_forward = s_resln_f;
    assert_int_equal(llm_profile_new(&p, &inner, 100, &st), 0);
    llm_profile_backend(p, &be);
    assert_int_equal(llm_profile_add_region(p, f->params + 60, 20 * 4, "h.0.ln_1.weight", &st), 0);
    assert_int_equal(llm_profile_add_region(p, f->params + 100, 60 * 4, "h.1.attn.c_attn.weight", &st), 0);
    be.matmul_forward(&be, NULL, NULL, f->params + 100, NULL, 4, 3, 5);   /* layer 1 */
    for (int i = 0; i < 3; i++)
        be.residual_layernorm_forward(&be, NULL, NULL, NULL, NULL, NULL, NULL, f->params + 61,
                                      NULL, 2, 4);
    be.gelu_forward(&be, NULL, NULL, 10);   /* the context is now layer 0 */
    assert_int_equal(f->s.calls[LLM_OP_RESIDUAL_LAYERNORM_FWD], 3);
    assert_int_equal(f->s.lastN, 2);
    assert_int_equal(f->s.lastC, 4);
    llm_profile_entry *v;
    int n;
    assert_int_equal(llm_profile_entries(p, 0, &v, &n, &st), 0);
    assert_int_equal(n, 3);
    const llm_profile_entry *e = find(v, n, LLM_OP_RESIDUAL_LAYERNORM_FWD, "ln_1", 0);
    assert_non_null(e);
    assert_true(e->calls == 3 && e->flop == 3 * 72.0 && e->bytes == 3 * 176.0);
    assert_non_null(find(v, n, LLM_OP_GELU_FWD, "", 0));
    free(v);
    llm_profile_free(p);
}

static void test_memory_tracking(void **state)
{
    fixture *f = *state;
    llm_backend *be = &f->be;
    void *a = be->alloc(be, 100), *b = be->alloc(be, 200);
    assert_non_null(a);
    assert_int_equal(llm_profile_mem_live(f->p), 300);
    be->free(be, a);
    assert_int_equal(llm_profile_mem_live(f->p), 200);
    assert_int_equal(llm_profile_mem_peak(f->p), 300);
    void *many[2000];
    for (int i = 0; i < 2000; i++) many[i] = be->alloc(be, 8);
    assert_int_equal(llm_profile_mem_live(f->p), 200 + 16000);
    for (int i = 0; i < 2000; i++) be->free(be, many[i]);
    be->free(be, b);
    be->free(be, NULL);
    assert_int_equal(llm_profile_mem_live(f->p), 0);
    assert_int_equal(llm_profile_mem_peak(f->p), 16200);
    assert_int_equal(f->s.allocs, f->s.frees);
    llm_profile_mem_reset_peak(f->p);
    assert_int_equal(llm_profile_mem_peak(f->p), 0);
    /* memory ops forward and are timed */
    char x[16] = "abc", y[16];
    be->copy(be, y, x, 16);
    assert_string_equal(y, "abc");
    assert_int_equal(f->s.calls[LLM_OP_COPY], 1);
}

static char *capture(int (*fn)(fixture *, FILE *), fixture *f)
{
    char *buf = NULL;
    size_t len = 0;
    FILE *m = open_memstream(&buf, &len);
    assert_int_equal(fn(f, m), 0);
    fclose(m);
    return buf;
}

static int do_trace(fixture *f, FILE *m)
{
    llm_status st = {0};
    return llm_profile_write_trace(f->p, m, &st);
}

static int do_table(fixture *f, FILE *m)
{
    llm_status st = {0};
    llm_profile_peaks pk = {100, 10};
    return llm_profile_write_table(f->p, m, 0, &pk, &st);
}

static int do_json(fixture *f, FILE *m)
{
    llm_status st = {0};
    llm_json j;
    llm_json_init(&j, m, 0);
    llm_json_obj_begin(&j);
    int rc = llm_profile_write_json_ops(f->p, &j, 1, NULL, &st);
    llm_json_obj_end(&j);
    return rc;
}

static void test_outputs(void **state)
{
    fixture *f = *state;
    llm_profile_span_begin(f->p, "step 1");
    run_ops(f);
    llm_profile_span_end(f->p);

    char *t = capture(do_trace, f);
    json_error_t err;
    json_t *doc = json_loads(t, 0, &err);
    assert_non_null(doc);
    json_t *ev = json_object_get(doc, "traceEvents");
    assert_true(json_is_array(ev));
    /* 3 metadata + 1 span + 8 ops */
    assert_int_equal(json_array_size(ev), 12);
    json_t *last = json_array_get(ev, 11);
    assert_string_equal(json_string_value(json_object_get(last, "ph")), "X");
    assert_string_equal(json_string_value(json_object_get(last, "name")), "adamw");
    assert_true(json_is_number(json_object_get(last, "dur")));
    json_decref(doc);
    free(t);

    char *tab = capture(do_table, f);
    assert_non_null(strstr(tab, "matmul_forward"));
    assert_non_null(strstr(tab, "attn.c_attn"));
    /* adamw: 17 flop / 28 bytes < balance 10 -> memory; matmul 140/208 also memory */
    assert_non_null(strstr(tab, "memory"));
    free(tab);

    char *js = capture(do_json, f);
    doc = json_loads(js, 0, &err);
    assert_non_null(doc);
    json_t *ops = json_object_get(doc, "ops");
    assert_true(json_array_size(ops) == 7);   /* folded: both c_attn matmuls merged */
    assert_true(json_is_number(json_object_get(doc, "total_ms")));
    json_decref(doc);
    free(js);
}

static void test_bound(void **state)
{
    (void)state;
    llm_profile_peaks pk = {1000, 100};   /* balance 10 flop/byte */
    assert_string_equal(llm_profile_bound(2000, 100, &pk), "compute");
    assert_string_equal(llm_profile_bound(500, 100, &pk), "memory");
    assert_string_equal(llm_profile_bound(500, 0, &pk), "-");
    assert_string_equal(llm_profile_bound(500, 100, NULL), "-");
}

static void test_trace_cap(void **state)
{
    (void)state;
    llm_backend inner, be;
    stub s;
    stub_init(&inner, &s);
    llm_profile *p;
    llm_status st = {0};
    assert_int_equal(llm_profile_new(&p, &inner, 4, &st), 0);
    llm_profile_backend(p, &be);
    for (int i = 0; i < 10; i++) be.gelu_forward(&be, NULL, NULL, 4);
    assert_int_equal(llm_profile_nevents(p), 10);
    assert_int_equal(s.calls[LLM_OP_GELU_FWD], 10);
    char *buf = NULL;
    size_t len = 0;
    FILE *m = open_memstream(&buf, &len);
    assert_int_equal(llm_profile_write_trace(p, m, &st), 0);
    fclose(m);
    json_error_t err;
    json_t *doc = json_loads(buf, 0, &err);
    assert_non_null(doc);
    assert_int_equal(json_array_size(json_object_get(doc, "traceEvents")), 3 + 4);
    assert_int_equal(json_integer_value(json_object_get(doc, "droppedEvents")), 6);
    json_decref(doc);
    free(buf);
    llm_profile_free(p);
}

static void s_att_rows(llm_backend *be, float *o, const float *q, const float *k, const float *v,
                       const int32_t *slot, const int32_t *pos, int N, int C, int NH, int maxT)
{
    (void)o; (void)q; (void)k; (void)v; (void)slot; (void)pos; (void)N; (void)C; (void)NH; (void)maxT;
    S(be)->calls[LLM_OP_ATTENTION_ROWS]++;
}

/* Off the CPU attention_rows needs the positions on the host for its cost: it takes them
 * from the upload that wrote them (no device round trip), and reads the device once
 * that buffer was written otherwise. */
static void test_attention_rows_positions(void **state)
{
    (void)state;
    stub s;
    llm_backend inner, be;
    stub_init(&inner, &s);
    inner.attention_rows = s_att_rows;   /* "stub" is not host memory to the profiler */
    llm_profile *p;
    llm_status st = {0};
    assert_int_equal(llm_profile_new(&p, &inner, 100, &st), 0);
    llm_profile_backend(p, &be);
    int32_t hpos[3] = {4, 0, 9};
    int32_t *dpos = be.alloc(&be, sizeof hpos);
    be.to_device(&be, dpos, hpos, sizeof hpos);
    be.attention_rows(&be, NULL, NULL, NULL, NULL, NULL, dpos, 3, 8, 2, 16);
    assert_int_equal(s.calls[LLM_OP_TO_HOST], 0);
    assert_int_equal(s.calls[LLM_OP_ATTENTION_ROWS], 1);
    llm_profile_entry *v;
    int n;
    assert_int_equal(llm_profile_entries(p, 1, &v, &n, &st), 0);
    const llm_profile_entry *e = find(v, n, LLM_OP_ATTENTION_ROWS, "", -1);
    assert_non_null(e);
    llm_op_cost c = llm_cost_attention_rows(hpos, 3, 8, 2);
    assert_true(e->flop == c.flop && e->bytes == c.bytes && c.flop > 0);
    free(v);
    /* a later write that is not an upload: the device is read */
    be.zero(&be, dpos, sizeof hpos);
    be.attention_rows(&be, NULL, NULL, NULL, NULL, NULL, dpos, 3, 8, 2, 16);
    assert_int_equal(s.calls[LLM_OP_TO_HOST], 1);
    /* a new upload is remembered again; freeing forgets it */
    be.to_device(&be, dpos, hpos, sizeof hpos);
    be.attention_rows(&be, NULL, NULL, NULL, NULL, NULL, dpos, 3, 8, 2, 16);
    assert_int_equal(s.calls[LLM_OP_TO_HOST], 1);
    be.free(&be, dpos);
    int32_t *d2 = be.alloc(&be, sizeof hpos);
    be.attention_rows(&be, NULL, NULL, NULL, NULL, NULL, d2, 3, 8, 2, 16);
    assert_int_equal(s.calls[LLM_OP_TO_HOST], 2);
    be.free(&be, d2);
    llm_profile_free(p);
}

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
    assert_int_equal(f->s.calls[LLM_OP_MATMUL_FWD_GELU_LO], 1);
    assert_int_equal(f->s.calls[LLM_OP_MATMUL_BWD_DGELU_LO], 1);
    assert_int_equal(f->s.lastOC, 5);   /* the last forward GEMM's shape: the fused one */

    llm_profile_entry *v;
    int n;
    llm_status st = {0};
    assert_int_equal(llm_profile_entries(f->p, 0, &v, &n, &st), 0);
    assert_int_equal(n, 17);
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
    expect_entry(v, n, LLM_OP_CAST_LO, "params", -1, STEPS, llm_cost_cast_lo(llm_model_num_params(&mc)));
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
    assert_int_equal(calls[LLM_OP_CAST_LO], 1 * STEPS);
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
        cmocka_unit_test(test_cost_formulas),
        cmocka_unit_test_setup_teardown(test_forwarding_and_counts, setup, teardown),
        cmocka_unit_test_setup_teardown(test_residual_layernorm, setup, teardown),
        cmocka_unit_test_setup_teardown(test_memory_tracking, setup, teardown),
        cmocka_unit_test_setup_teardown(test_outputs, setup, teardown),
        cmocka_unit_test(test_bound),
        cmocka_unit_test(test_trace_cap),
        cmocka_unit_test(test_attention_rows_positions),
        cmocka_unit_test(test_capabilities),
        cmocka_unit_test_setup_teardown(test_mixed_precision, setup, teardown),
        cmocka_unit_test(test_train_bf16_cpu),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
