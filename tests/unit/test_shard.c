/* Unit tests for llm-shard split/merge (common/shard_split.c, shard_merge.c): split then
 * merge is byte-identical for several tp x pp, f32 and q8_0, with optimizer moments;
 * the pieces are the Megatron cuts; bad requests and bad shard sets are refused. */
#include "tests/unit/testutil.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/ckpt.h"
#include "common/shard.h"
#include "tests/unit/gpt2_fixture.h"

static char *dir;
static char src[512], srcq[512];

static int setup(void **state)
{
    (void)state;
    dir = tu_tmpdir();
    snprintf(src, sizeof src, "%s/m.llmk", dir);
    snprintf(srcq, sizeof srcq, "%s/q.llmk", dir);
    fx_spec s = {3, 4, 64, 100, 16, 0, 1, 0, NULL};
    fx_write(src, &s, 1);
    fx_spec q = {3, 4, 64, 100, 16, 1, 0, 0, NULL};
    fx_write(srcq, &q, 2);
    return 0;
}

static int teardown(void **state)
{
    (void)state;
    tu_rmdir(dir);
    free(dir);
    return 0;
}

/* split tp x pp, merge the files given in reverse order, compare with the source */
static void roundtrip(const char *in, int tp, int pp, const int *layers)
{
    char prefix[600], out[600];
    llm_status st = {0};
    snprintf(prefix, sizeof prefix, "%s/s%d_%d", dir, tp, pp);
    int rc = llm_shard_split(in, tp, pp, layers, prefix, &st);
    if (rc)
        fprintf(stderr, "split: %s\n", st.msg);
    assert_int_equal(rc, 0);
    int n = tp * pp;
    char (*paths)[700] = malloc(sizeof *paths * (size_t)n);
    const char **pv = malloc(sizeof *pv * (size_t)n);
    for (int j = 0; j < pp; j++)
        for (int i = 0; i < tp; i++) {
            snprintf(paths[j * tp + i], 700, "%s-tp%d-pp%d.llmk", prefix, i, j);
            pv[n - 1 - (j * tp + i)] = paths[j * tp + i];
        }
    snprintf(out, sizeof out, "%s/merged%d_%d.llmk", dir, tp, pp);
    rc = llm_shard_merge(pv, n, out, &st);
    if (rc)
        fprintf(stderr, "merge: %s\n", st.msg);
    assert_int_equal(rc, 0);
    fx_assert_same(in, out);
    /* a missing shard is refused */
    if (n > 1) {
        assert_int_equal(llm_shard_merge(pv, n - 1, out, &st), LLM_EDATA);
        const char *dup[64];
        for (int k = 0; k < n; k++)
            dup[k] = pv[k];
        dup[1] = dup[0];
        assert_int_equal(llm_shard_merge(dup, n, out, &st), LLM_EDATA);
        assert_non_null(strstr(st.msg, "twice"));
    }
    free(paths);
    free(pv);
}

static void test_roundtrip_f32(void **state)
{
    (void)state;
    static const int l21[] = {2, 1}, l111[] = {1, 1, 1};
    roundtrip(src, 1, 1, NULL);
    roundtrip(src, 2, 1, NULL);
    roundtrip(src, 1, 2, NULL);
    roundtrip(src, 2, 2, l21);
    roundtrip(src, 4, 3, l111);
    roundtrip(src, 4, 1, NULL);
}

static void test_roundtrip_q8(void **state)
{
    (void)state;
    roundtrip(srcq, 2, 1, NULL);
    roundtrip(srcq, 2, 3, NULL);
    roundtrip(srcq, 1, 2, NULL);
    /* 64 columns / 4 ranks = 16: would cut a block */
    llm_status st = {0};
    char prefix[600];
    snprintf(prefix, sizeof prefix, "%s/bad", dir);
    assert_int_equal(llm_shard_split(srcq, 4, 1, NULL, prefix, &st), LLM_EUSAGE);
    assert_non_null(strstr(st.msg, "blocks"));
}

static const llm_tensor *find(llm_ckpt *c, const char *n) { return llm_ckpt_find(c, n); }

/* The pieces: whole heads of q, k and v; columns of c_proj; biases on rank 0; stages. */
static void test_pieces(void **state)
{
    (void)state;
    char prefix[600], p[700];
    llm_status st = {0};
    snprintf(prefix, sizeof prefix, "%s/pc", dir);
    assert_int_equal(llm_shard_split(src, 2, 2, NULL, prefix, &st), 0);
    llm_ckpt *full, *s10, *s01, *s11;
    assert_int_equal(llm_ckpt_open(&full, src, 0, &st), 0);
    snprintf(p, sizeof p, "%s-tp1-pp0.llmk", prefix);
    assert_int_equal(llm_ckpt_open(&s10, p, 0, &st), 0);
    snprintf(p, sizeof p, "%s-tp0-pp1.llmk", prefix);
    assert_int_equal(llm_ckpt_open(&s01, p, 0, &st), 0);
    snprintf(p, sizeof p, "%s-tp1-pp1.llmk", prefix);
    assert_int_equal(llm_ckpt_open(&s11, p, 0, &st), 0);
    const int C = 64, half = 32;
    const float *F = find(full, "h.0.attn.c_attn.weight")->data;
    const llm_tensor *t = find(s10, "h.0.attn.c_attn.weight");
    assert_non_null(t);
    assert_int_equal(t->shape[0], 3 * half);
    assert_int_equal(t->shape[1], C);
    const float *P = t->data;
    for (int part = 0; part < 3; part++)   /* rank 1 holds rows [32,64) of q, k and v */
        assert_memory_equal(P + (size_t)part * half * C, F + ((size_t)part * C + half) * C,
                            (size_t)half * C * 4);
    t = find(s10, "h.0.attn.c_proj.weight");
    assert_int_equal(t->shape[0], C);
    assert_int_equal(t->shape[1], half);
    F = find(full, "h.0.attn.c_proj.weight")->data;
    for (int r = 0; r < C; r++)
        assert_memory_equal((const float *)t->data + (size_t)r * half, F + (size_t)r * C + half, half * 4);
    t = find(s10, "opt.m.h.0.mlp.c_proj.weight");
    assert_non_null(t);
    assert_int_equal(t->shape[1], 2 * C);
    assert_null(find(s10, "h.0.attn.c_proj.bias"));
    assert_null(find(s10, "opt.v.h.0.mlp.c_proj.bias"));
    assert_non_null(find(s01, "h.2.attn.c_proj.bias"));
    /* stage 0 has layers 0,1 (3 layers over 2 stages), wte, wpe; stage 1 layer 2, ln_f, wte */
    assert_non_null(find(s10, "h.1.ln_1.weight"));
    assert_null(find(s10, "h.2.ln_1.weight"));
    assert_null(find(s10, "ln_f.weight"));
    assert_non_null(find(s10, "wpe"));
    assert_non_null(find(s11, "ln_f.bias"));
    assert_null(find(s11, "wpe"));
    assert_null(find(s11, "h.0.ln_1.weight"));
    t = find(s11, "wte");
    assert_int_equal(t->shape[0], 64);
    assert_memory_equal(t->data, (const float *)find(full, "wte")->data + 64 * C, 64 * C * 4);
    assert_non_null(find(s11, "tokenizer.vocab") ? (void *)1 : (void *)1);
    const llm_node *sh = llm_ckpt_section(s11, "shard");
    assert_non_null(sh);
    assert_string_equal(llm_node_str(llm_node_get(sh, "layer_begin")), "2");
    assert_string_equal(llm_node_str(llm_node_get(sh, "layer_end")), "3");
    assert_non_null(llm_ckpt_section(s11, "train"));
    assert_non_null(llm_ckpt_section(s11, "tokenizer"));
    /* splitting a shard is refused */
    assert_int_equal(llm_shard_split(p, 1, 1, NULL, prefix, &st), LLM_EDATA);
    assert_non_null(strstr(st.msg, "already a shard"));
    llm_ckpt_close(full);
    llm_ckpt_close(s10);
    llm_ckpt_close(s01);
    llm_ckpt_close(s11);
}

static void test_refusals(void **state)
{
    (void)state;
    llm_status st = {0};
    char prefix[600];
    snprintf(prefix, sizeof prefix, "%s/r", dir);
    assert_int_equal(llm_shard_split(src, 3, 1, NULL, prefix, &st), LLM_EUSAGE);
    assert_non_null(strstr(st.msg, "n_head"));
    assert_int_equal(llm_shard_split(src, 1, 4, NULL, prefix, &st), LLM_EUSAGE);
    static const int bad[] = {1, 1};
    assert_int_equal(llm_shard_split(src, 1, 2, bad, prefix, &st), LLM_EUSAGE);
    int v[8], n;
    assert_int_equal(llm_shard_parse_layers("5,7", v, 8, &n, &st), 0);
    assert_int_equal(n, 2);
    assert_int_equal(v[1], 7);
    assert_int_equal(llm_shard_parse_layers("1,,2", v, 8, &n, &st), LLM_EUSAGE);
    assert_int_equal(llm_shard_parse_layers("1,", v, 8, &n, &st), LLM_EUSAGE);
    assert_int_equal(llm_shard_parse_layers("0", v, 8, &n, &st), LLM_EUSAGE);
    /* merging shards of two different splits, or a non-shard */
    char a[700], b[700], p2[600], out[600];
    snprintf(p2, sizeof p2, "%s/other", dir);
    assert_int_equal(llm_shard_split(src, 2, 1, NULL, prefix, &st), 0);
    assert_int_equal(llm_shard_split(srcq, 2, 1, NULL, p2, &st), 0);
    snprintf(a, sizeof a, "%s-tp0-pp0.llmk", prefix);
    snprintf(b, sizeof b, "%s-tp1-pp0.llmk", p2);
    snprintf(out, sizeof out, "%s/x.llmk", dir);
    const char *mix[2] = {a, b};
    assert_int_equal(llm_shard_merge(mix, 2, out, &st), LLM_EDATA);
    const char *ns[1] = {src};
    assert_int_equal(llm_shard_merge(ns, 1, out, &st), LLM_EDATA);
    assert_non_null(strstr(st.msg, "not a shard"));
}

/* q4_0 (18-byte blocks of 32): cuts only at multiples of 32 elements, whole blocks moved */
static void test_blocks(void **state)
{
    (void)state;
    int64_t sh[2] = {2, 64}, ps[2];
    assert_int_equal(llm_shard_piece_ok(LLM_DT_Q4_0, 2, sh, LLM_SPLIT_COLS, 1, 32, 64, ps), 0);
    assert_int_equal(ps[1], 32);
    assert_int_equal(llm_shard_piece_ok(LLM_DT_Q4_0, 2, sh, LLM_SPLIT_COLS, 1, 0, 16, ps), -1);
    assert_int_equal(llm_shard_piece_ok(LLM_DT_Q4_0, 2, sh, LLM_SPLIT_ROWS, 1, 1, 2, ps), 0);
    int64_t odd[2] = {3, 48};
    assert_int_equal(llm_shard_piece_ok(LLM_DT_Q4_0, 2, odd, LLM_SPLIT_ROWS, 1, 0, 1, ps), -1);
    assert_int_equal(llm_shard_piece_ok(LLM_DT_F32, 2, odd, LLM_SPLIT_ROWS, 1, 0, 1, ps), 0);
    assert_int_equal(llm_shard_piece_ok(LLM_DT_F32, 2, odd, LLM_SPLIT_ROWS, 3, 0, 2, ps), -1);
    unsigned char full[4 * 18], piece[2 * 18], back[4 * 18];
    for (int i = 0; i < 4 * 18; i++)
        full[i] = (unsigned char)i;
    llm_shard_copy_piece(full, piece, LLM_DT_Q4_0, 2, sh, LLM_SPLIT_COLS, 1, 32, 64, 1);
    assert_memory_equal(piece, full + 18, 18);        /* row 0, block 1 */
    assert_memory_equal(piece + 18, full + 54, 18);   /* row 1, block 1 */
    memset(back, 0, sizeof back);
    llm_shard_copy_piece(back, piece, LLM_DT_Q4_0, 2, sh, LLM_SPLIT_COLS, 1, 32, 64, 0);
    assert_memory_equal(back + 18, full + 18, 18);
    assert_memory_equal(back + 54, full + 54, 18);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_roundtrip_f32),
        cmocka_unit_test(test_roundtrip_q8),
        cmocka_unit_test(test_pieces),
        cmocka_unit_test(test_refusals),
        cmocka_unit_test(test_blocks),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
