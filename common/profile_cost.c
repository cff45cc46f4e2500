/* profile_cost.c — FLOP and byte counts per op (the conventions are in profile.h). */
#include "common/profile.h"

#include "common/ckpt.h"
#include "kernels/cpu/quant_kern.h"

static const char *const op_names[LLM_OP_COUNT] = {
    [LLM_OP_EMBED_FWD] = "embed_forward",
    [LLM_OP_LAYERNORM_FWD] = "layernorm_forward",
    [LLM_OP_MATMUL_FWD] = "matmul_forward",
    [LLM_OP_ATTENTION_FWD] = "attention_forward",
    [LLM_OP_GELU_FWD] = "gelu_forward",
    [LLM_OP_RESIDUAL_FWD] = "residual_forward",
    [LLM_OP_RESIDUAL_LAYERNORM_FWD] = "residual_layernorm_forward",
    [LLM_OP_XENT_FWD] = "xent_forward",
    [LLM_OP_EMBED_BWD] = "embed_backward",
    [LLM_OP_LAYERNORM_BWD] = "layernorm_backward",
    [LLM_OP_MATMUL_BWD] = "matmul_backward",
    [LLM_OP_ATTENTION_BWD] = "attention_backward",
    [LLM_OP_GELU_BWD] = "gelu_backward",
    [LLM_OP_ACCUMULATE] = "accumulate",
    [LLM_OP_XENT_BWD] = "xent_backward",
    [LLM_OP_SUM_SQUARES] = "sum_squares",
    [LLM_OP_ADAMW] = "adamw",
    [LLM_OP_ADAMW_SEGS] = "adamw_segs",
    [LLM_OP_EMBED_ROWS] = "embed_rows",
    [LLM_OP_MATMUL_ROWS] = "matmul_rows",
    [LLM_OP_KV_STORE] = "kv_store",
    [LLM_OP_ATTENTION_ROWS] = "attention_rows",
    [LLM_OP_ARGMAX_ROWS] = "argmax_rows",
    [LLM_OP_CAST_LO] = "cast_lo",
    [LLM_OP_MATMUL_FWD_LO] = "matmul_forward_lo",
    [LLM_OP_MATMUL_BWD_LO] = "matmul_backward_lo",
    [LLM_OP_LAYERNORM_FWD_LO] = "layernorm_forward_lo",
    [LLM_OP_GELU_FWD_LO] = "gelu_forward_lo",
    [LLM_OP_GELU_BWD_LO] = "gelu_backward_lo",
    [LLM_OP_ATTENTION_FWD_LSE] = "attention_forward_lse",
    [LLM_OP_ATTENTION_BWD_LSE] = "attention_backward_lse",
    [LLM_OP_XENT_FWD_LO] = "xent_forward_lo",
    [LLM_OP_XENT_BWD_LO] = "xent_backward_lo",
    [LLM_OP_MATMUL_FWD_GELU_LO] = "matmul_forward_gelu_lo",
    [LLM_OP_MATMUL_BWD_DGELU_LO] = "matmul_backward_dgelu_lo",
    [LLM_OP_LAYERNORM_BWD_LO] = "layernorm_backward_lo",
    [LLM_OP_XENT_FUSED] = "xent_fused",
    [LLM_OP_COPY] = "copy",
    [LLM_OP_TO_DEVICE] = "to_device",
    [LLM_OP_TO_HOST] = "to_host",
    [LLM_OP_ZERO] = "zero",
    [LLM_OP_SYNC] = "sync",
};

const char *llm_op_name(llm_op op)
{
    return (unsigned)op < LLM_OP_COUNT ? op_names[op] : "?";
}

/* All in double: B*T*C*OC overflows 32-bit (and 64-bit integer products are easy to get
 * wrong); doubles are exact to 2^53. */
static llm_op_cost cost(double flop, double elems)
{
    return (llm_op_cost){flop, 4.0 * elems};
}

llm_op_cost llm_cost_embed_forward(int B, int T, int C)
{
    double bt = (double)B * T, btc = bt * C;
    return cost(btc, bt + 3 * btc);
}

llm_op_cost llm_cost_layernorm_forward(int N, int C)
{
    double nc = (double)N * C;
    return cost(8 * nc, 2 * nc + 2.0 * C + 2.0 * N);
}

llm_op_cost llm_cost_matmul_forward(int N, int C, int OC, int has_bias)
{
    double nc = (double)N * C, noc = (double)N * OC, occ = (double)OC * C;
    return cost(2 * noc * C + (has_bias ? noc : 0), nc + occ + noc + (has_bias ? OC : 0));
}

static double tri(int T)
{
    return (double)T * (T + 1) / 2;
}

llm_op_cost llm_cost_attention_forward(int B, int T, int C, int NH)
{
    double hs = (double)C / NH, btc = (double)B * T * C, att = (double)B * NH * T * T;
    return cost((double)B * NH * tri(T) * (4 * hs + 5), 4 * btc + att);
}

llm_op_cost llm_cost_gelu_forward(size_t n)
{
    return cost(8.0 * (double)n, 2.0 * (double)n);
}

llm_op_cost llm_cost_residual_forward(size_t n)
{
    return cost((double)n, 3.0 * (double)n);
}

llm_op_cost llm_cost_residual_layernorm_forward(int N, int C)
{
    double nc = (double)N * C;
    return cost(nc + 8 * nc, 4 * nc + 2.0 * C + 2.0 * N);
}

llm_op_cost llm_cost_xent_forward(int N, int V, int Vp)
{
    (void)Vp;
    double nv = (double)N * V;
    return cost(4 * nv, nv + 3.0 * N);
}

llm_op_cost llm_cost_embed_backward(int B, int T, int C)
{
    double bt = (double)B * T, btc = bt * C;
    return cost(2 * btc, bt + 5 * btc);
}

llm_op_cost llm_cost_layernorm_backward(int N, int C)
{
    double nc = (double)N * C;
    return cost(14 * nc, 4 * nc + 5.0 * C + 2.0 * N);
}

llm_op_cost llm_cost_matmul_backward(int N, int C, int OC, int has_bias)
{
    double nc = (double)N * C, noc = (double)N * OC, occ = (double)OC * C;
    return cost(4 * noc * C + (has_bias ? noc : 0), noc + 3 * nc + 3 * occ + (has_bias ? 2.0 * OC : 0));
}

llm_op_cost llm_cost_attention_backward(int B, int T, int C, int NH)
{
    double hs = (double)C / NH, btc = (double)B * T * C, att = (double)B * NH * T * T;
    return cost((double)B * NH * tri(T) * (8 * hs + 4), 10 * btc + att);
}

llm_op_cost llm_cost_gelu_backward(size_t n)
{
    return cost(16.0 * (double)n, 4.0 * (double)n);
}

llm_op_cost llm_cost_accumulate(size_t n)
{
    return cost((double)n, 3.0 * (double)n);
}

llm_op_cost llm_cost_xent_backward(int N, int V, int Vp)
{
    double nv = (double)N * V;
    return cost(3 * nv, nv + (double)N * Vp + 2.0 * N);
}

llm_op_cost llm_cost_sum_squares(size_t n)
{
    return cost(2.0 * (double)n, (double)n);
}

llm_op_cost llm_cost_adamw(size_t n)
{
    return cost(17.0 * (double)n, 7.0 * (double)n);
}

/* adamw_segs: adamw's, plus the lo copy written (2 bytes an element). */
llm_op_cost llm_cost_adamw_segs(size_t n, int has_lo)
{
    llm_op_cost c = llm_cost_adamw(n);
    if (has_lo)
        c.bytes += 2.0 * (double)n;
    return c;
}

/* Bytes of n weights stored as dtype dt (f32 when the dtype is unknown; q4_0 repacked
 * for the CPU decode kernels is as large as q4_0). */
static double wbytes(double n, int dt)
{
    uint64_t b;
    if (dt == LLM_QK_Q4_0R8)
        dt = LLM_DT_Q4_0;
    if (dt >= 0 && dt < LLM_DT_COUNT && n < 9e15 && llm_dtype_nbytes((llm_dtype)dt, (uint64_t)n, &b) == 0)
        return (double)b;
    return 4.0 * n;
}

llm_op_cost llm_cost_embed_rows(int N, int C, int wte_dt)
{
    double nc = (double)N * C;
    return (llm_op_cost){nc, wbytes(nc, wte_dt) + 4.0 * (2.0 * N + 2 * nc)};
}

llm_op_cost llm_cost_matmul_rows(int N, int C, int OC, int w_dt, int has_bias)
{
    double nc = (double)N * C, noc = (double)N * OC;
    return (llm_op_cost){2 * noc * C + (has_bias ? noc : 0),
                         wbytes((double)OC * C, w_dt) + 4.0 * (nc + noc + (has_bias ? OC : 0))};
}

llm_op_cost llm_cost_kv_store(int N, int C)
{
    return cost(0, 4.0 * N * C + 2.0 * N);
}

llm_op_cost llm_cost_attention_rows(const int32_t *pos, int N, int C, int NH)
{
    double S = 0;
    for (int i = 0; i < N; i++) S += (double)pos[i] + 1;
    double nc = (double)N * C;
    return cost(S * (4.0 * C + 5.0 * NH), 2 * nc + 2.0 * N + 2.0 * C * S);
}

/* argmax_rows: each of the N rows' V logits read and compared once, N ids written. */
llm_op_cost llm_cost_argmax_rows(int N, int V)
{
    double nv = (double)N * V;
    return cost(nv, nv + N);
}

/* Mixed precision: lo tensors are 2 bytes an element and read as they are (the GEMMs
 * and the attention take lo operands; nothing is rounded on the way in); an output of
 * dtype dt is lb(dt) bytes an element.  FLOPs are the fp32 ops' (a rounding is none). */
static double lb(int dt)
{
    return dt == LLM_DT_F32 ? 4.0 : 2.0;
}

/* cast_lo: src read in fp32 (4), dst written in lo (2). */
llm_op_cost llm_cost_cast_lo(size_t n)
{
    return (llm_op_cost){0, 6.0 * (double)n};
}

/* matmul_forward_lo: inp and w_lo read in lo (2 each), out written once in out_dt, the
 * bias (of out's dtype) read once. */
llm_op_cost llm_cost_matmul_forward_lo(int N, int C, int OC, int has_bias, int out_dt)
{
    double nc = (double)N * C, noc = (double)N * OC, occ = (double)OC * C, ob = lb(out_dt);
    return (llm_op_cost){2 * noc * C + (has_bias ? noc : 0),
                         2 * nc + 2 * occ + ob * noc + (has_bias ? ob * OC : 0)};
}

/* matmul_backward_lo: dout, inp and w_lo read in lo (2 each), dinp written once
 * (overwritten) in dinp_dt, dw and dbias read and written in fp32 (8 each). */
llm_op_cost llm_cost_matmul_backward_lo(int N, int C, int OC, int has_bias, int dinp_dt)
{
    double nc = (double)N * C, noc = (double)N * OC, occ = (double)OC * C;
    return (llm_op_cost){4 * noc * C + (has_bias ? noc : 0),
                         2 * noc + 2 * nc + lb(dinp_dt) * nc + 2 * occ + 8 * occ +
                             (has_bias ? 8.0 * OC : 0)};
}

/* matmul_forward_gelu_lo: matmul_forward_lo with a lo out and bias, plus pre written
 * (lo) and the GELU's FLOPs on every output. */
llm_op_cost llm_cost_matmul_forward_gelu_lo(int N, int C, int OC, int has_bias)
{
    llm_op_cost c = llm_cost_matmul_forward_lo(N, C, OC, has_bias, LLM_DT_BF16);
    double noc = (double)N * OC;
    return (llm_op_cost){c.flop + 8 * noc, c.bytes + 2 * noc};
}

/* matmul_backward_dgelu_lo: matmul_backward_lo with a lo dinp, plus pre(N,C) read (lo)
 * and the GELU backward's FLOPs on every dinp element. */
llm_op_cost llm_cost_matmul_backward_dgelu_lo(int N, int C, int OC, int has_bias)
{
    llm_op_cost c = llm_cost_matmul_backward_lo(N, C, OC, has_bias, LLM_DT_BF16);
    double nc = (double)N * C;
    return (llm_op_cost){c.flop + 16 * nc, c.bytes + 2 * nc};
}

/* layernorm_forward_lo: a read in fp32 (4); with b: b read and res written in fp32
 * (4 + 4, and the add's NC FLOPs); out written in lo (2); w and bias read (4 each a
 * column); mean and rstd written (4 each a row) when asked for. */
llm_op_cost llm_cost_layernorm_forward_lo(int N, int C, int has_b, int has_stats)
{
    double nc = (double)N * C;
    return (llm_op_cost){8 * nc + (has_b ? nc : 0),
                         4 * nc + (has_b ? 8 * nc : 0) + 2 * nc + 8.0 * C +
                             (has_stats ? 8.0 * N : 0)};
}

/* layernorm_backward_lo: layernorm_backward, and the lo copy of dinp written (2). */
llm_op_cost llm_cost_layernorm_backward_lo(int N, int C)
{
    llm_op_cost c = llm_cost_layernorm_backward(N, C);
    return (llm_op_cost){c.flop, c.bytes + 2.0 * N * C};
}

/* gelu_forward_lo: inp read and out written in lo (2 each). */
llm_op_cost llm_cost_gelu_forward_lo(size_t n)
{
    return (llm_op_cost){8.0 * (double)n, 4.0 * (double)n};
}

/* gelu_backward_lo: inp and dout read, dinp written once (overwritten), all lo. */
llm_op_cost llm_cost_gelu_backward_lo(size_t n)
{
    return (llm_op_cost){16.0 * (double)n, 6.0 * (double)n};
}

/* The lse attention as a fused kernel moves it: forward, qkv read and out written in lo
 * (2 each), lse written (4 a row); backward, dout, qkv and out (for D) read in lo, dqkv
 * written once in lo (overwritten), lse read (4 a row).  FLOPs: the forward's as
 * attention_forward; the backward's as attention_backward plus the scores again (2 hs
 * per causal entry) and D (2 hs per row). */
llm_op_cost llm_cost_attention_forward_lse(int B, int T, int C, int NH)
{
    double btc = (double)B * T * C, rows = (double)B * NH * T;
    return (llm_op_cost){llm_cost_attention_forward(B, T, C, NH).flop,
                         2 * 3 * btc + 2 * btc + 4 * rows};
}

llm_op_cost llm_cost_attention_backward_lse(int B, int T, int C, int NH)
{
    double hs = (double)C / NH, btc = (double)B * T * C, rows = (double)B * NH * T;
    double flop = llm_cost_attention_backward(B, T, C, NH).flop +
                  (double)B * NH * tri(T) * 2 * hs + rows * 2 * hs;
    return (llm_op_cost){flop, 2 * btc + 2 * 3 * btc + 2 * btc + 2 * 3 * btc + 4 * rows};
}

/* xent_forward_lo: the first V logits of each row read in lo (2); targets read, losses
 * and lse written (4 each a row). */
llm_op_cost llm_cost_xent_forward_lo(int N, int V, int Vp)
{
    (void)Vp;
    double nv = (double)N * V;
    return (llm_op_cost){4 * nv, 2 * nv + 12.0 * N};
}

/* xent_backward_lo: the first V logits read in lo (2), dlogits written in lo for all
 * Vp columns (padding zeroed), targets and lse read (4 each a row). */
llm_op_cost llm_cost_xent_backward_lo(int N, int V, int Vp)
{
    double nv = (double)N * V;
    return (llm_op_cost){3 * nv, 2 * nv + 2.0 * N * Vp + 8.0 * N};
}

/* xent_fused: xent_forward's and xent_backward's flops; the first V logits read once in
 * their dtype (a row's second read is the block's own, from cache), dlogits written for
 * all Vp columns, targets read and losses written (4 each a row). */
llm_op_cost llm_cost_xent_fused(int N, int V, int Vp, int lo)
{
    double nv = (double)N * V, e = lo ? 2 : 4;
    return (llm_op_cost){7 * nv, e * nv + e * N * Vp + 8.0 * N};
}
