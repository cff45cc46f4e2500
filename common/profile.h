/* profile.h — a timing wrapper backend: per-op time, FLOP and bytes, memory, traces.
 *
 * llm_profile_new() wraps an existing backend; llm_profile_backend() hands out an
 * llm_backend whose every pointer forwards to the inner backend and records the call:
 * its time (on the CPU the host clock around the call; on a GPU a pair of CUDA events
 * on the backend's stream around it, read back after each span or at llm_profile_flush,
 * with no device synchronisation per op; each op is also an NVTX range), FLOP and bytes
 * moved from the formulas below, and the layer.  Memory calls are tracked too (bytes
 * live now and at the peak).
 *
 * Layers: register the model's parameter tensors with llm_profile_add_region(); an op
 * whose weight pointer falls in "h.3.attn.c_attn.weight" is attributed to layer 3 and
 * site "attn.c_attn" (residual_layernorm_forward and layernorm_forward_lo by their
 * layernorm's weight: a layer's last residual shows under the next layer's ln_1, or
 * ln_f).  Ops without a weight (attention, gelu, residual, ...) are
 * attributed to the layer and site of the latest op that had one; site names then get
 * no change (the site column shows the enclosing weighted op).  Layer -1 means outside
 * the blocks (embedding, final layernorm, loss, optimizer).
 *
 * Counting conventions (fp32, 4 bytes an element; every tensor read or written once;
 * "tri" = T(T+1)/2 causal score entries per head; hs = C/NH):
 *   embed_forward       flop BTC            bytes 4(BT + 3BTC)
 *   layernorm_forward   flop 8NC            bytes 4(2NC + 2C + 2N)
 *   matmul_forward      flop 2NC*OC (+N*OC bias)  bytes 4(NC + OC*C + N*OC (+OC))
 *   attention_forward   flop B*NH*tri*(4hs+5)     bytes 4(4BTC + B*NH*T*T)
 *   gelu_forward        flop 8n             bytes 8n
 *   residual_forward    flop n              bytes 12n
 *   residual_layernorm_forward  flop n + 8NC (n = NC)
 *                       bytes 4(4NC + 2C + 2N): a, b read, res and out written once
 *   xent_forward        flop 4NV            bytes 4(NV + 3N)
 *   embed_backward      flop 2BTC           bytes 4(BT + 5BTC)
 *   layernorm_backward  flop 14NC           bytes 4(4NC + 5C + 2N)
 *   matmul_backward     flop 4NC*OC (+N*OC bias)  bytes 4(N*OC + 3NC + 3OC*C (+2OC))
 *   attention_backward  flop B*NH*tri*(8hs+4)     bytes 4(10BTC + B*NH*T*T)
 *   gelu_backward       flop 16n            bytes 16n
 *   accumulate          flop n              bytes 12n
 *   xent_backward       flop 3NV            bytes 4(NV + N*Vp + 2N)
 *   sum_squares         flop 2n             bytes 4n
 *   adamw               flop 17n            bytes 28n
 *   adamw_segs          flop 17n            bytes 28n (+2n for the lo copy), n = the
 *                       segments' total
 *   copy/to_device/to_host  flop 0  bytes 2*bytes;  zero  flop 0  bytes = bytes
 * Inference ops (weights may be stored in another dtype: wbytes(n) = its bytes for n):
 *   embed_rows          flop NC             bytes wbytes(NC) + 4(2N + 2NC)
 *   matmul_rows         flop 2NC*OC (+N*OC)  bytes wbytes(OC*C) + 4(NC + N*OC (+OC))
 *   kv_store            flop 0              bytes 4(4NC + 2N)
 *   attention_rows      flop S(4C + 5NH)    bytes 4(2NC + 2N + 2C*S), S = sum_i (pos[i]+1)
 *   argmax_rows         flop NV (compares)  bytes 4(NV + N)
 * Mixed-precision ops (lo = bf16/fp16, 2 bytes an element; lb(dt) = 4 for an fp32
 * output, 2 for a lo one; FLOPs as the fp32 ops', a rounding is no FLOP).  The GEMMs
 * read lo operands as they are (no rounding inside); "overwritten" outputs are written
 * once, "+=" ones (dw, dbias) read and written in fp32:
 *   cast_lo             flop 0              bytes 4n + 2n
 *   matmul_forward_lo   flop 2NC*OC (+N*OC bias)
 *                       bytes 2NC + 2OC*C + lb(out_dt)N*OC (+lb(out_dt)OC bias)
 *   matmul_backward_lo  flop 4NC*OC (+N*OC bias)
 *                       bytes 2N*OC + 2NC + lb(dinp_dt)NC (dinp written) + 2OC*C
 *                             + 8OC*C (dw r/w) (+8OC dbias r/w)
 *   layernorm_forward_lo  flop 8NC (+NC with b)
 *                       bytes 4NC (a) (+4NC b read, +4NC res written) + 2NC (out)
 *                             + 4*2C (w, bias) (+4*2N mean, rstd)
 *   layernorm_backward_lo  flop as layernorm_backward
 *                       bytes layernorm_backward's + 2NC (the lo copy of dinp)
 *   matmul_forward_gelu_lo  flop matmul_forward_lo's + 8N*OC (the GELU)
 *                       bytes 2NC + 2OC*C + 2N*OC (pre) + 2N*OC (out) (+2OC bias)
 *   matmul_backward_dgelu_lo  flop matmul_backward_lo's + 16NC (the GELU backward)
 *                       bytes matmul_backward_lo's (lo dinp) + 2NC (pre)
 *   gelu_forward_lo     flop 8n             bytes 2n + 2n
 *   gelu_backward_lo    flop 16n            bytes 2n (inp) + 2n (dout) + 2n (dinp)
 *   attention_forward_lse  flop as attention_forward
 *                       bytes 2*3BTC (qkv) + 2BTC (out) + 4*B*NH*T (lse)
 *   attention_backward_lse flop attention_backward's + B*NH*tri*2hs + B*NH*T*2hs
 *                       bytes 2BTC (dout) + 2*3BTC (qkv) + 2BTC (out) + 2*3BTC (dqkv)
 *                             + 4*B*NH*T (lse)
 *   xent_forward_lo     flop 4NV            bytes 2NV + 4*3N
 *   xent_backward_lo    flop 3NV            bytes 2NV + 2N*Vp + 4*2N
 *   xent_fused          flop 7NV            bytes e*NV + e*N*Vp + 4*2N (e: 4 for fp32
 *                       logits, 2 for lo; the row's second read is counted as cached)
 *
 * Mixed precision: the model's lo weights are a separate buffer (a 16-bit copy of the
 * parameters, same offsets).  The profiler learns where it lives from cast_lo: a call
 * cast_lo(dst, src, n) whose src lies in a registered region (a parameter) makes dst[i]
 * stand for src[i], so a lo weight pointer inside dst is attributed to the region of the
 * fp32 element it was cast from (the layer and site of the fp32 weight).  A later
 * cast_lo to the same dst replaces the mapping; a cast of something else (the residual
 * gradient rounded for the backward GEMMs) over it, or freeing dst, forgets it.
 */
#ifndef LLM_PROFILE_H
#define LLM_PROFILE_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "common/json.h"
#include "common/status.h"
#include "kernels/backend.h"

typedef enum {
    LLM_OP_EMBED_FWD, LLM_OP_LAYERNORM_FWD, LLM_OP_MATMUL_FWD, LLM_OP_ATTENTION_FWD,
    LLM_OP_GELU_FWD, LLM_OP_RESIDUAL_FWD, LLM_OP_RESIDUAL_LAYERNORM_FWD, LLM_OP_XENT_FWD,
    LLM_OP_EMBED_BWD, LLM_OP_LAYERNORM_BWD, LLM_OP_MATMUL_BWD, LLM_OP_ATTENTION_BWD,
    LLM_OP_GELU_BWD, LLM_OP_ACCUMULATE, LLM_OP_XENT_BWD,
    LLM_OP_SUM_SQUARES, LLM_OP_ADAMW, LLM_OP_ADAMW_SEGS,
    LLM_OP_EMBED_ROWS, LLM_OP_MATMUL_ROWS, LLM_OP_KV_STORE, LLM_OP_ATTENTION_ROWS,
    LLM_OP_ARGMAX_ROWS,
    LLM_OP_CAST_LO, LLM_OP_MATMUL_FWD_LO, LLM_OP_MATMUL_BWD_LO, LLM_OP_LAYERNORM_FWD_LO,
    LLM_OP_GELU_FWD_LO, LLM_OP_GELU_BWD_LO, LLM_OP_ATTENTION_FWD_LSE, LLM_OP_ATTENTION_BWD_LSE,
    LLM_OP_XENT_FWD_LO, LLM_OP_XENT_BWD_LO, LLM_OP_MATMUL_FWD_GELU_LO,
    LLM_OP_MATMUL_BWD_DGELU_LO, LLM_OP_LAYERNORM_BWD_LO, LLM_OP_XENT_FUSED,
    LLM_OP_COPY, LLM_OP_TO_DEVICE, LLM_OP_TO_HOST, LLM_OP_ZERO, LLM_OP_SYNC,
    LLM_OP_COUNT
} llm_op;

/* "matmul_forward", ... (the backend.h member names). */
const char *llm_op_name(llm_op op);

typedef struct {
    double flop, bytes;
} llm_op_cost;

/* The formulas of the table above, one per op (has_bias: the bias pointer was non-NULL). */
llm_op_cost llm_cost_embed_forward(int B, int T, int C);
llm_op_cost llm_cost_layernorm_forward(int N, int C);
llm_op_cost llm_cost_matmul_forward(int N, int C, int OC, int has_bias);
llm_op_cost llm_cost_attention_forward(int B, int T, int C, int NH);
llm_op_cost llm_cost_gelu_forward(size_t n);
llm_op_cost llm_cost_residual_forward(size_t n);
llm_op_cost llm_cost_residual_layernorm_forward(int N, int C);
llm_op_cost llm_cost_xent_forward(int N, int V, int Vp);
llm_op_cost llm_cost_embed_backward(int B, int T, int C);
llm_op_cost llm_cost_layernorm_backward(int N, int C);
llm_op_cost llm_cost_layernorm_backward_lo(int N, int C);
llm_op_cost llm_cost_matmul_backward(int N, int C, int OC, int has_bias);
llm_op_cost llm_cost_attention_backward(int B, int T, int C, int NH);
llm_op_cost llm_cost_gelu_backward(size_t n);
llm_op_cost llm_cost_accumulate(size_t n);
llm_op_cost llm_cost_xent_backward(int N, int V, int Vp);
llm_op_cost llm_cost_sum_squares(size_t n);
llm_op_cost llm_cost_adamw(size_t n);
/* n: the segments' total elements; has_lo: a lo copy was written. */
llm_op_cost llm_cost_adamw_segs(size_t n, int has_lo);
llm_op_cost llm_cost_embed_rows(int N, int C, int wte_dt);
llm_op_cost llm_cost_matmul_rows(int N, int C, int OC, int w_dt, int has_bias);
llm_op_cost llm_cost_kv_store(int N, int C);
/* pos: host array of the N rows' positions. */
llm_op_cost llm_cost_attention_rows(const int32_t *pos, int N, int C, int NH);
llm_op_cost llm_cost_argmax_rows(int N, int V);
llm_op_cost llm_cost_cast_lo(size_t n);
/* out_dt, dinp_dt: LLM_DT_F32 (4-byte output) or the lo dtype (2 bytes). */
llm_op_cost llm_cost_matmul_forward_lo(int N, int C, int OC, int has_bias, int out_dt);
llm_op_cost llm_cost_matmul_backward_lo(int N, int C, int OC, int has_bias, int dinp_dt);
/* has_b: the residual b (and res) non-NULL; has_stats: mean and rstd written. */
llm_op_cost llm_cost_layernorm_forward_lo(int N, int C, int has_b, int has_stats);
llm_op_cost llm_cost_matmul_forward_gelu_lo(int N, int C, int OC, int has_bias);
llm_op_cost llm_cost_matmul_backward_dgelu_lo(int N, int C, int OC, int has_bias);
llm_op_cost llm_cost_gelu_forward_lo(size_t n);
llm_op_cost llm_cost_gelu_backward_lo(size_t n);
llm_op_cost llm_cost_attention_forward_lse(int B, int T, int C, int NH);
llm_op_cost llm_cost_attention_backward_lse(int B, int T, int C, int NH);
llm_op_cost llm_cost_xent_forward_lo(int N, int V, int Vp);
llm_op_cost llm_cost_xent_backward_lo(int N, int V, int Vp);
llm_op_cost llm_cost_xent_fused(int N, int V, int Vp, int lo);

typedef struct llm_profile llm_profile;

/* Wrap inner (not owned; must outlive the profile).  trace_cap: events kept for
 * llm_profile_write_trace (0: none; beyond the cap events are counted, not kept). */
int llm_profile_new(llm_profile **out, llm_backend *inner, size_t trace_cap, llm_status *st);
void llm_profile_free(llm_profile *p);

/* Fill be with the forwarding backend (name "profile(INNER)", ctx = p).  The optional
 * pointers (residual_layernorm_forward, inference, mixed precision, device_stats) are set
 * only where inner has them, so the wrapper has the same capabilities. */
void llm_profile_backend(llm_profile *p, llm_backend *be);

/* Name a region of backend memory (a parameter tensor: "h.3.mlp.c_fc.weight") so that
 * ops reading it are attributed to its layer and site.  name is copied. */
int llm_profile_add_region(llm_profile *p, const void *ptr, size_t bytes, const char *name,
                           llm_status *st);

/* Forget the timings and trace recorded so far (memory tracking carries on). */
void llm_profile_reset(llm_profile *p);

/* A named span in the trace (a training step, a decode token); begin/end pair up.
 * On a GPU the span is an NVTX range, span_end waits for the device's work (the span's
 * host-clock duration covers it) and then folds in the op times of the span. */
void llm_profile_span_begin(llm_profile *p, const char *name);
void llm_profile_span_end(llm_profile *p);

/* On a GPU: wait for the device and fold the op times still pending into the aggregates
 * and the trace (the readers below see only folded times).  A no-op on the CPU. */
void llm_profile_flush(llm_profile *p);

/* Device memory as cudaMemGetInfo reports it, in bytes, for the whole device (other
 * processes included): in use when the profiler was made (after the backend's own
 * init), at the latest flush, the most at any flush, and the device's total. */
typedef struct {
    double used_before, used_after, used_peak, total;
} llm_profile_devmem;
/* 0 and *out filled on a GPU; -1 on the CPU (or when the driver could not tell). */
int llm_profile_device_mem(const llm_profile *p, llm_profile_devmem *out);

/* Bytes of the live lo copies of parameters cast_lo has written (the model's 16-bit
 * weight copy under mixed precision; 0 in fp32): the size of each allocation it wrote
 * into (2 bytes an element where dst is not an allocation's start).  Casts of other
 * tensors (activation gradients) are not counted. */
size_t llm_profile_mem_lo(const llm_profile *p);

/* Bytes allocated through the wrapper now and at the peak; number of live blocks. */
size_t llm_profile_mem_live(const llm_profile *p);
size_t llm_profile_mem_peak(const llm_profile *p);
void llm_profile_mem_reset_peak(llm_profile *p);

/* One aggregated row. */
typedef struct {
    llm_op op;
    char site[40];     /* "attn.c_attn", "ln_1", "wte", "" */
    int layer;         /* -1: outside the blocks or folded */
    long calls;
    double seconds, flop, bytes;
} llm_profile_entry;

/* Aggregated rows, sorted by time (largest first).  fold: merge every layer into one row
 * per (op, site) with layer -1.  *out is malloc'd (caller frees). */
int llm_profile_entries(const llm_profile *p, int fold, llm_profile_entry **out, int *n,
                        llm_status *st);
/* Sum of the seconds of every recorded op call. */
double llm_profile_total_seconds(const llm_profile *p);

/* Peaks for the compute/memory-bound verdict (GFLOP/s and GB/s; <= 0: unknown). */
typedef struct {
    double gflops, gbs;
} llm_profile_peaks;

/* "compute" when flop/bytes exceeds the machine balance peak.gflops/peak.gbs, else
 * "memory"; "-" when a peak is unknown or the op moves no bytes. */
const char *llm_profile_bound(double flop, double bytes, const llm_profile_peaks *pk);

/* The share (percent) of the roofline an op reached: its time at the peaks, the larger
 * of flop / peak.gflops and bytes / peak.gbs, over the seconds it took; -1 when a peak
 * is unknown or it took no time. */
double llm_profile_roof_pct(double flop, double bytes, double seconds, const llm_profile_peaks *pk);

/* Table: op, site, layer, calls, total ms, % of the total, GFLOP, GFLOP/s, GB, GB/s, bound,
 * roof% (llm_profile_roof_pct; the total row: the ops' times at the peaks over the total).
 * Ops that were never called are left out. */
int llm_profile_write_table(const llm_profile *p, FILE *f, int fold, const llm_profile_peaks *pk,
                            llm_status *st);
/* The same rows as JSON members "ops": [...] plus "total_ms" (written into an open
 * object of j; see profile_report.c). */
int llm_profile_write_json_ops(const llm_profile *p, llm_json *j, int fold,
                               const llm_profile_peaks *pk, llm_status *st);

/* Chrome trace-event JSON ({"traceEvents": [...]}; "X" complete events in
 * microseconds, args layer/site/gflop/bytes) that Perfetto and chrome://tracing open. */
int llm_profile_write_trace(const llm_profile *p, FILE *f, llm_status *st);
/* Events recorded (kept or not). */
size_t llm_profile_nevents(const llm_profile *p);

#endif
