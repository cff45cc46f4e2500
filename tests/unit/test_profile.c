/* Unit tests for the profiling wrapper backend: forwarding, FLOP/byte counts against
 * hand-derived numbers, layer attribution, memory tracking, table/JSON/trace output
 * (the mixed-precision ops: test_profile_lo.c). */
#include "tests/unit/profile_stub.h"

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
    /* fused: 70 flop; logits read once 10 x 2 = 20, dlogits 32, targets and losses 16 ->
     * 68 in lo; fp32 logits 40 + 64 + 16 = 120 */
    c = llm_cost_xent_fused(2, 5, 8, LLM_DT_BF16);
    assert_true(c.flop == 70 && c.bytes == 68);
    c = llm_cost_xent_fused(2, 5, 8, 0);
    assert_true(c.flop == 70 && c.bytes == 120);
    assert_string_equal(llm_op_name(LLM_OP_XENT_FUSED), "xent_fused");
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
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
