/* backend.h — the kernel interface.
 *
 * One struct of function pointers for every op of the transformer, forward and backward,
 * plus memory management.  A backend (kernels/cpu: "cpu" fast, "cpu-ref" reference;
 * kernels/cuda: "cuda") fills it with designated initializers; common/model.c only calls
 * through it, so every pointer an op receives is backend memory (device memory for CUDA).
 *
 * Conventions: B batch, T time, C channels, NH heads (C % NH == 0), OC output channels,
 * N = B*T rows, V real vocabulary, Vp padded vocabulary (Vp >= V).  All float tensors are
 * row-major fp32.  "+=" marks outputs that are accumulated into (the caller zeroes them);
 * other outputs are overwritten.  Ops never fail: shapes are validated by the caller.
 */
#ifndef LLM_BACKEND_H
#define LLM_BACKEND_H

#include <stddef.h>
#include <stdint.h>

#include "common/status.h"

typedef struct llm_backend llm_backend;
struct llm_device_stats;   /* below */

/* One segment of adamw_segs: elements [off, off + n) of its arrays, decayed by wd. */
typedef struct {
    size_t off, n;
    float wd;
} llm_adamw_seg;

struct llm_backend {
    const char *name;   /* "cpu", "cpu-ref", "cuda" */
    void *ctx;          /* backend state: threads, handles, streams, scratch */
    int threads;        /* CPU threads the backend uses (BLAS x OpenMP <= this) */
    int host_memory;    /* 1: alloc'd memory is host memory the CPU may read and ops may
                           take host pointers (the CPU backends); 0: device memory */
    int rows_invariant; /* matmul_rows computes each row exactly as alone (below) only
                           for N up to this; 0: for every N.  The cpu backend switches
                           to sgemm (and, for quantized weights, unquantized
                           activations) at prefill-sized N: 63 there */

    /* ---- memory (bytes); alloc returns zeroed memory or NULL ---- */
    void *(*alloc)(llm_backend *be, size_t bytes);
    void  (*free)(llm_backend *be, void *p);
    void  (*to_device)(llm_backend *be, void *dst, const void *host_src, size_t bytes);
    void  (*to_host)(llm_backend *be, void *host_dst, const void *src, size_t bytes);
    void  (*copy)(llm_backend *be, void *dst, const void *src, size_t bytes);
    void  (*zero)(llm_backend *be, void *p, size_t bytes);
    void  (*sync)(llm_backend *be);

    /* ---- forward ---- */

    /* out(B,T,C) = wte[inp[b,t]] + wpe[t]; inp (B,T) int32 ids < V; wte (Vp,C); wpe (maxT,C). */
    void (*embed_forward)(llm_backend *be, float *out, const int32_t *inp, const float *wte,
                          const float *wpe, int B, int T, int C);

    /* out(N,C) = (inp - mean) * rstd * w + b per row; writes mean(N), rstd(N)
     * (mean/rstd may be NULL in inference).  eps = 1e-5. */
    void (*layernorm_forward)(llm_backend *be, float *out, float *mean, float *rstd,
                              const float *inp, const float *w, const float *b, int N, int C);

    /* out(N,OC) = inp(N,C) @ w(OC,C)^T + bias(OC); bias may be NULL. */
    void (*matmul_forward)(llm_backend *be, float *out, const float *inp, const float *w,
                           const float *bias, int N, int C, int OC);

    /* Causal multi-head self-attention.  qkv (B,T,3C) holds q|k|v for each position,
     * heads contiguous within each of q, k, v (head h uses channels h*hs..(h+1)*hs-1,
     * hs = C/NH).  out (B,T,C).  att (B,NH,T,T) receives the softmax probabilities
     * (row t: columns 0..t, the rest 0), kept for the backward pass. scale 1/sqrt(hs). */
    void (*attention_forward)(llm_backend *be, float *out, float *att, const float *qkv,
                              int B, int T, int C, int NH);

    /* out = 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3))) elementwise, n elements. */
    void (*gelu_forward)(llm_backend *be, float *out, const float *inp, size_t n);

    /* out = a + b elementwise (out may alias a or b). */
    void (*residual_forward)(llm_backend *be, float *out, const float *a, const float *b,
                             size_t n);

    /* res(N,C) = a + b, then out(N,C), mean(N), rstd(N) = layernorm of res exactly as
     * layernorm_forward (mean/rstd may be NULL): one pass over memory instead of
     * residual_forward then layernorm_forward.  res may alias a or b (the stream updated
     * in place); out aliases none of them.  The result is bit-identical to the backend's
     * residual_forward followed by its layernorm_forward.  Optional: NULL when the
     * backend does not offer it (the model then calls the two ops). */
    void (*residual_layernorm_forward)(llm_backend *be, float *res, float *out, float *mean,
                                       float *rstd, const float *a, const float *b,
                                       const float *w, const float *bias, int N, int C);

    /* Cross-entropy of softmax(logits) over the first V of Vp columns (padded columns
     * are ignored: they never win and carry no probability).  logits (N,Vp), targets (N)
     * in [0,V).  Writes losses(N) = logsumexp - logit[target] and lse(N) = logsumexp. */
    void (*xent_forward)(llm_backend *be, float *losses, float *lse, const float *logits,
                         const int32_t *targets, int N, int V, int Vp);

    /* ---- backward ---- */

    /* dwte(Vp,C) += , dwpe(maxT,C) += from dout(B,T,C).  Deterministic. */
    void (*embed_backward)(llm_backend *be, float *dwte, float *dwpe, const float *dout,
                           const int32_t *inp, int B, int T, int C);

    /* dinp(N,C) +=, dw(C) +=, db(C) += given dout(N,C) and the forward's inp, w, mean, rstd. */
    void (*layernorm_backward)(llm_backend *be, float *dinp, float *dw, float *db,
                               const float *dout, const float *inp, const float *w,
                               const float *mean, const float *rstd, int N, int C);

    /* dinp(N,C) += dout @ w; dw(OC,C) += dout^T @ inp; dbias(OC) += sum_rows dout
     * (dbias may be NULL). */
    void (*matmul_backward)(llm_backend *be, float *dinp, float *dw, float *dbias,
                            const float *dout, const float *inp, const float *w,
                            int N, int C, int OC);

    /* dqkv(B,T,3C) += from dout(B,T,C), using the forward's qkv and att. */
    void (*attention_backward)(llm_backend *be, float *dqkv, const float *dout,
                               const float *qkv, const float *att, int B, int T, int C, int NH);

    /* dinp(n) += gelu'(inp) * dout. */
    void (*gelu_backward)(llm_backend *be, float *dinp, const float *inp, const float *dout,
                          size_t n);

    /* dst(n) += src(n) (residual backward, gradient accumulation). */
    void (*accumulate)(llm_backend *be, float *dst, const float *src, size_t n);

    /* dlogits(N,Vp) = (softmax(logits) - onehot(target)) * dloss for the first V columns,
     * 0 for padded columns.  dlogits may alias logits (written in place).  lse from the
     * forward. */
    void (*xent_backward)(llm_backend *be, float *dlogits, const float *logits,
                          const float *lse, const int32_t *targets, float dloss,
                          int N, int V, int Vp);

    /* ---- optimizer ---- */

    /* Sum of squares of g(n), returned to the host. */
    double (*sum_squares)(llm_backend *be, const float *g, size_t n);

    /* AdamW on n parameters, step t >= 1 (bias correction), gradients multiplied by
     * grad_scale first (clipping / loss-scale undo):
     *   g = grad*grad_scale; m = b1 m + (1-b1) g; v = b2 v + (1-b2) g^2;
     *   p -= lr * ( (m/(1-b1^t)) / (sqrt(v/(1-b2^t)) + eps) + wd * p ). */
    void (*adamw)(llm_backend *be, float *p, const float *grad, float *m, float *v, size_t n,
                  float lr, float b1, float b2, float eps, float wd, int t, float grad_scale);

    /* ---- inference (decode-shaped; added for llm-infer) ----
     * Every pointer below may be NULL: a backend without them cannot run llm-infer,
     * which refuses with a message (llm_infer_backend_ready).  The CPU backends get
     * them from llm_backend_cpu_infer_init().  Rows are independent sequences'
     * positions: row i of an (N,...) tensor belongs to cache slot slot[i] at position
     * pos[i].  KV caches are one layer's (S,maxT,C) fp32 (S slots).  Weight pointers
     * carry a dtype (llm_dtype values from common/ckpt.h: f32 now; bf16/f16/q8_0/q4_0
     * later) and may point straight into an mmap'd checkpoint.  For a given row, the
     * result must not depend on N or on the other rows (batched == one at a time) while
     * N <= rows_invariant (every N when that is 0): a caller that needs a row computed
     * exactly as alone (a decode step's requests) runs at most that many at once. */

    /* 1 when embed_rows / matmul_rows accept weights of dtype dt (an llm_dtype). */
    int (*infer_dtype_ok)(llm_backend *be, int dt);

    /* out(N,C) = wte[ids[i]] + wpe[pos[i]]; wte (Vp,C) of dtype wte_dt, wpe (maxT,C) f32. */
    void (*embed_rows)(llm_backend *be, float *out, const int32_t *ids, const int32_t *pos,
                       const void *wte, int wte_dt, const float *wpe, int N, int C);

    /* out(N,OC) = inp(N,C) @ w(OC,C)^T + bias(OC); w of dtype w_dt, bias f32 or NULL.
     * Tuned for small N (decode: one weight read serves every row) and large N (prefill). */
    void (*matmul_rows)(llm_backend *be, float *out, const float *inp, const void *w,
                        int w_dt, const float *bias, int N, int C, int OC);

    /* Store k and v of qkv(N,3C) into kcache/vcache (S,maxT,C) at [slot[i], pos[i]]. */
    void (*kv_store)(llm_backend *be, float *kcache, float *vcache, const float *qkv,
                     const int32_t *slot, const int32_t *pos, int N, int C, int maxT);

    /* Causal attention of the q part of qkv(N,3C) against the cached keys/values of
     * slot[i] at positions 0..pos[i] (inclusive; stored by kv_store first).  out (N,C).
     * Heads as in attention_forward, scale 1/sqrt(C/NH). */
    void (*attention_rows)(llm_backend *be, float *out, const float *qkv, const float *kcache,
                           const float *vcache, const int32_t *slot, const int32_t *pos,
                           int N, int C, int NH, int maxT);

    /* Greedy tokens: ids[i] (N int32, backend memory) = the index of the largest of
     * logits[i*ld .. i*ld + V) (N rows, leading dimension ld >= V, backend memory),
     * exactly as common/sampler.h llm_argmax on that row: 0 when V <= 1 or when the row's
     * first entry is NaN; else the lowest index whose value equals the largest non-NaN
     * value (NaN entries never win; -inf rows give 0; +0 and -0 are equal, so the first
     * of them wins).  A device op with no host transfer (recordable like the others);
     * the caller copies ids back (llm_infer_argmax: 4N bytes instead of the logits).
     * Optional: NULL (llm_infer_argmax then copies the logits and runs llm_argmax). */
    void (*argmax_rows)(llm_backend *be, int32_t *ids, const float *logits, int N, int V,
                        int ld);

    /* ---- mixed precision (llm-train --precision bf16|fp16; added for issue 8) ----
     * NULL when the backend has none: llm-train then refuses the precision by name.
     * lo is LLM_DT_BF16 or LLM_DT_F16 (the llm_dtype values of common/ckpt.h).  A "lo
     * tensor" is row-major like the fp32 ones, 2 bytes per element (the bits of dtype lo).
     * Under mixed precision the model keeps its activations as lo tensors: every GEMM
     * input, the attention's q|k|v and output, the GELU's input and output, the logits
     * and the gradients flowing into GEMMs.  What stays fp32: the master parameters (the
     * GEMMs read a lo copy made with cast_lo whenever they change), every parameter
     * gradient, the optimizer moments, the residual stream and its gradient, layernorm
     * statistics, lse, losses, and the outputs of the GEMMs that feed the residual stream
     * or a layernorm backward.  Arithmetic is fp32 (GEMMs and attention products
     * multiply lo values exactly and accumulate in fp32); a lo output is its fp32 result
     * rounded once.  Rounding is to nearest even; a value beyond the lo range becomes
     * +-inf (fp16 overflows at |x| >= 65520, which is what dynamic loss scaling
     * detects), NaN stays NaN.  "Overwritten" outputs are written whole (no zeroing
     * first); "+=" ones accumulate as in the fp32 ops. */

    /* dst(n) of dtype lo = src(n) rounded. */
    void (*cast_lo)(llm_backend *be, void *dst, const float *src, size_t n, int lo);

    /* AdamW over nseg segments in one call (on a GPU one launch, or one per 128
     * segments), each bit for bit the backend's adamw on elements [off, off + n) of p
     * and grad with weight decay wd (same formula, same bias corrections), and, when
     * p_lo is non-NULL, p_lo[off, off + n) (2 bytes an element, dtype lo: LLM_DT_BF16 or
     * LLM_DT_F16) = the updated p rounded exactly as cast_lo rounds it: the update and
     * the lo weight copy in one pass over memory.  p_lo NULL: fp32 only, lo ignored.
     * The moments m, v hold elements from mv_base on: element i of p pairs with
     * m[i - mv_base], v[i - mv_base] (0 for whole-buffer moments, a ZeRO shard's start
     * for sharded ones; every segment's off >= mv_base).  Elements outside the
     * segments, p_lo's included, are not touched.  segs is host memory, read during the
     * call only; segments must not overlap; empty ones (n 0) are skipped.  May be NULL:
     * the model then calls adamw per run of views and cast_lo before the next forward. */
    void (*adamw_segs)(llm_backend *be, float *p, void *p_lo, const float *grad, float *m,
                       float *v, size_t mv_base, const llm_adamw_seg *segs, int nseg,
                       float lr, float b1, float b2, float eps, int t, float grad_scale,
                       int lo);

    /* out(N,OC) = inp(N,C) @ w_lo(OC,C)^T + bias(OC), inp and w lo, fp32 accumulate;
     * out_dt LLM_DT_F32: out and bias fp32; out_dt == lo: out and bias lo (the bias'
     * value added to the fp32 sum, then rounded).  bias may be NULL.  Overwritten. */
    void (*matmul_forward_lo)(llm_backend *be, void *out, int out_dt, const void *inp,
                              const void *w_lo, int lo, const void *bias, int N, int C, int OC);

    /* dinp(N,C) = dout(N,OC) @ w_lo (overwritten; fp32 when dinp_dt is LLM_DT_F32, else
     * lo); dw(OC,C) += dout^T @ inp; dbias(OC) += column sums of dout (may be NULL).
     * dout, inp, w_lo lo; dw, dbias fp32, the sums in fp32. */
    void (*matmul_backward_lo)(llm_backend *be, void *dinp, int dinp_dt, float *dw, float *dbias,
                               const void *dout, const void *inp, const void *w_lo, int lo,
                               int N, int C, int OC);

    /* x = a + b (b non-NULL: the sum is written to res(N,C), which may alias a or b) or
     * x = a (b NULL: res is not written, may be NULL); out(N,C) lo = layernorm(x)
     * rounded, the fp32 layernorm exactly as layernorm_forward computes it (so out is
     * the backend's residual_forward + layernorm_forward, then cast_lo, bit for bit);
     * mean, rstd (N) as layernorm_forward (may be NULL).  a, b, res, w, bias fp32. */
    void (*layernorm_forward_lo)(llm_backend *be, float *res, void *out, float *mean,
                                 float *rstd, const float *a, const float *b, const float *w,
                                 const float *bias, int N, int C, int lo);

    /* layernorm_backward (dinp, dw, db +=, all fp32), and dinp_lo(N,C) lo = the updated
     * dinp rounded: the backend's layernorm_backward then cast_lo, bit for bit, in one
     * pass (the model's residual-stream gradient and the lo copy of it that the GEMMs
     * of the block below read).  May be NULL (the model then casts). */
    void (*layernorm_backward_lo)(llm_backend *be, float *dinp, void *dinp_lo, float *dw,
                                  float *db, const float *dout, const float *inp,
                                  const float *w, const float *mean, const float *rstd,
                                  int N, int C, int lo);

    /* out(n) lo = gelu(inp) rounded, inp lo, gelu as gelu_forward on inp's values.
     * out may alias inp. */
    void (*gelu_forward_lo)(llm_backend *be, void *out, const void *inp, size_t n, int lo);

    /* dinp(n) lo = gelu'(inp) * dout rounded (overwritten), inp and dout lo, gelu' as
     * gelu_backward's.  dinp may alias dout. */
    void (*gelu_backward_lo)(llm_backend *be, void *dinp, const void *inp, const void *dout,
                             size_t n, int lo);

    /* c_fc and its GELU in one (cuBLASLt's GELU_AUX_BIAS epilogue): with
     * s = inp(N,C) @ w_lo(OC,C)^T + bias(OC) in fp32 (as matmul_forward_lo),
     * pre(N,OC) lo = s rounded and out(N,OC) lo = gelu(s) rounded, gelu as gelu_forward
     * on the fp32 s (not on the rounded pre: one rounding each).  inp, w_lo, bias lo;
     * bias may be NULL; both overwritten.  The GELU formula is the tanh form of
     * gelu_forward; a backend whose library evaluates it its own way may differ from
     * the backend's gelu_forward by an fp32 ulp or two before the rounding.  May be
     * NULL: the model then runs matmul_forward_lo into pre and gelu_forward_lo.  The
     * GELU output computed again from pre (gelu_forward_lo: gelu of the rounded s) is
     * not out bit for bit (it may differ by the effect of pre's rounding): the model's
     * full recompute reruns this op, its selective recompute takes gelu_forward_lo. */
    void (*matmul_forward_gelu_lo)(llm_backend *be, void *out, void *pre, const void *inp,
                                   const void *w_lo, int lo, const void *bias, int N, int C,
                                   int OC);

    /* c_proj's backward with the GELU backward applied before the rounding (cuBLASLt's
     * DGELU epilogue): with g = dout(N,OC) @ w_lo(OC,C) in fp32, dinp(N,C) lo =
     * gelu'(pre) * g rounded once (overwritten; gelu' as gelu_backward's, on pre's
     * values); dw(OC,C) += dout^T @ inp and dbias(OC) += column sums of dout (may be
     * NULL) exactly as matmul_backward_lo.  dout, inp, pre(N,C), w_lo lo.  May be NULL:
     * the model then runs matmul_backward_lo (lo dinp) and gelu_backward_lo, which
     * rounds g first (one rounding more). */
    void (*matmul_backward_dgelu_lo)(llm_backend *be, void *dinp, float *dw, float *dbias,
                                     const void *dout, const void *inp, const void *pre,
                                     const void *w_lo, int lo, int N, int C, int OC);

    /* Causal attention with lo q|k|v (shapes, heads and scale as attention_forward) that
     * keeps only each row's log-sum-exp instead of the (B,NH,T,T) probabilities (a
     * fused, "flash" kernel never stores them):
     *   S = scale * q . k (fp32 accumulate), row t over columns s <= t;
     *   lse(B,NH,T) fp32 = log sum_s exp(S[s]);  P = exp(S - lse) (fp32);
     *   out(B,T,C) lo = (sum_s lo(P[s]) v_s) rounded.
     * A kernel that rounds partial (unnormalised) probabilities instead may differ from
     * this by one lo rounding per term; the tests allow exactly that. */
    void (*attention_forward_lse)(llm_backend *be, void *out, float *lse, const void *qkv,
                                  int B, int T, int C, int NH, int lo);

    /* Its backward from the forward's out and lse (P recomputed as above), dout, qkv and
     * out lo; dqkv(B,T,3C) lo overwritten, each element summed in fp32 and rounded once:
     *   dv = lo(P)^T dout;  dP = dout v^T;  D = rowsum(dout * out) (fp32);
     *   dS = scale * P * (dP - D), rounded to lo;  dq = dS k;  dk = dS^T q. */
    void (*attention_backward_lse)(llm_backend *be, void *dqkv, const void *dout,
                                   const void *qkv, const void *out, const float *lse,
                                   int B, int T, int C, int NH, int lo);

    /* xent_forward on lo logits (N,Vp): losses, lse fp32 from the logits' values. */
    void (*xent_forward_lo)(llm_backend *be, float *losses, float *lse, const void *logits,
                            const int32_t *targets, int N, int V, int Vp, int lo);

    /* xent_backward on lo logits: dlogits(N,Vp) lo = ((softmax - onehot) * dloss)
     * rounded for the first V columns, 0 for padded ones; may alias logits. */
    void (*xent_backward_lo)(llm_backend *be, void *dlogits, const void *logits,
                             const float *lse, const int32_t *targets, float dloss, int N,
                             int V, int Vp, int lo);

    /* xent_forward then xent_backward in one call, for training: losses(N) fp32 and, in
     * place over logits (N,Vp), dlogits = (softmax - onehot(target)) * dloss for the
     * first V columns, 0 for padded ones.  lo: 0 (fp32 logits) or LLM_DT_BF16/F16 (lo
     * logits, the gradient rounded once).  Bit for bit the backend's xent_forward(_lo)
     * followed by its xent_backward(_lo) with the same dloss, reading the logits once
     * where the backend can.  Optional: NULL (the model then calls the two). */
    void (*xent_fused)(llm_backend *be, float *losses, void *logits, const int32_t *targets,
                       float dloss, int N, int V, int Vp, int lo);

    /* ---- recorded op sequences (CUDA graphs; NULL elsewhere) ----
     * graph_capture runs fn(arg), which queues this backend's ops and nothing else (no
     * to_host, sync, alloc or free: those fail while recording), and records them:
     * returns 0 with *graph set (the ops ran, as one recording), 1 with *graph NULL (the
     * ops ran directly: no recording possible), or -1 (an op failed; error recorded).
     * graph_launch queues a recording again: the same ops with the same arguments
     * (pointers, sizes); what they read from device memory may have changed since.
     * Returns 0 or -1.  graph_free releases one (NULL is a no-op); a launch still queued
     * completes first.  The caller keeps every pointer a recording uses valid while it
     * may be launched.  All three NULL, or all three set. */
    int (*graph_capture)(llm_backend *be, void (*fn)(void *arg), void *arg, void **graph);
    int (*graph_launch)(llm_backend *be, void *graph);
    void (*graph_free)(llm_backend *be, void *graph);

    /* ---- device health for metrics (NULL on the CPU) ----
     * Fills *out; a field the device or driver cannot tell is -1 (NVML absent: util,
     * temp and power are -1).  Returns 0, or -1 when nothing could be read. */
    int (*device_stats)(llm_backend *be, struct llm_device_stats *out);

    /* ---- host buffers for large to_host / to_device transfers (optional) ----
     * Host memory that the device copies to and from fastest (page-locked on a GPU: a
     * pageable copy goes through the driver's staging at a fraction of the bus rate).
     * NULL when out of memory; released by host_free.  Absent: plain malloc/free, which
     * llm_backend_host_alloc/llm_backend_host_free fall back to. */
    void *(*host_alloc)(llm_backend *be, size_t bytes);
    void (*host_free)(llm_backend *be, void *p);

    /* ---- the embedding backward's grouping, ahead of time (optional) ----
     * Tells the backend that the N ids just uploaded to inp (to_device) are host[0..N).
     * A backend whose embed_backward groups positions by token (CUDA: each token's rows
     * summed in one fixed order) may group them now, on the host, while the device runs
     * the forward, instead of reading the ids back in the middle of the backward.  The
     * hint holds for embed_backward calls on inp with B*T == N until inp is written by
     * to_device, copy or zero, or freed (a kernel that writes ids is not watched: hint
     * again after one); a call without it works as before.  host is not kept.  NULL: no
     * hint. */
    void (*embed_hint)(llm_backend *be, const int32_t *inp, const int32_t *host, size_t N);

    /* ---- a failed device (optional; NULL: never, as on the CPU) ----
     * Ops return void, and a device fault may surface only at a later call: an
     * asynchronous error (CUDA: an illegal memory access in a kernel) breaks the context
     * for good ("sticky": every later call fails and nothing clears it).  device_lost
     * returns 1 once the device is in that state, with its error in why (whylen bytes;
     * may be NULL), else 0.  With wait it first waits for the work queued so far (a
     * synchronisation: not while graph_capture records), so a fault in any of it is
     * found; without, it only looks at what has surfaced by now (the queued work runs
     * on: a fault in it is found by a later look).  Then nothing the device computed since the
     * fault, which may lie in ops queued well before the call, is to be trusted, and
     * nothing more can be read back from it: a caller that holds state on the device
     * (llm-train's weights and moments) cannot save it.  Errors that leave the device
     * usable (a refused allocation or launch) are not this. */
    int (*device_lost)(llm_backend *be, int wait, char *why, size_t whylen);
};

/* What device_stats reports. */
struct llm_device_stats {
    double mem_used_mb;    /* device memory in use now (whole device, cudaMemGetInfo) */
    double mem_peak_mb;    /* the most this backend has held allocated since init */
    double util_pct;       /* GPU utilisation over the last sample period (NVML) */
    double temp_c;         /* GPU temperature (NVML) */
    double power_w;        /* board power draw (NVML) */
};

/* Fill be for device "cpu" (fast kernels), "cpu-ref" (reference kernels) or "cuda"
 * ("auto": cuda when a GPU is usable, else cpu).  threads <= 0: all cores.
 * Returns 0, or -1 with a message in err (size errlen) when the device is unavailable
 * (e.g. "no CUDA device: ..." in a build without a GPU).  "auto" falls back to "cpu"
 * and returns 0, with err empty, or, when a GPU is present but the cuda backend could
 * not start on it (LLM_CUDA_DEVICE naming none, a failed CUDA call), saying why.
 * LLM_BACKEND_ESETTING, with a message, when a backend environment variable
 * (LLM_CPU_GEMM, LLM_CUDA_TF32, LLM_CUDA_FLASH, LLM_CUDA_GRAPHS) is set to a value it
 * does not take, whatever the device: a usage error. */
#define LLM_BACKEND_ESETTING (-2)
int  llm_backend_init(llm_backend *be, const char *device, int threads, char *err, size_t errlen);

/* llm_backend_init reporting through st: its message, and LLM_EUSAGE for a bad setting,
 * LLM_ENODEV for a device that is not there (auto's warning, if any, is not kept). */
int llm_backend_open(llm_backend *be, const char *device, int threads, llm_status *st);

/* The status code of a failed llm_backend_init's return value rc. */
static inline llm_code llm_backend_code(int rc)
{
    return rc == LLM_BACKEND_ESETTING ? LLM_EUSAGE : LLM_ENODEV;
}

/* The device "auto" stands for here: "cuda" in a CUDA build that sees a GPU, else
 * "cpu".  Any other name is returned as given.  Programs resolve "auto" before they
 * start anything that depends on the device (NCCL ranks, the GPU each rank takes). */
const char *llm_backend_resolve(const char *device);

/* 1 when device is a name llm_backend_init knows (cpu, cpu-ref, cuda, auto; NULL is auto),
 * whatever this build and machine have: for option checks (a bad name is a usage error,
 * a missing device is not). */
int llm_backend_known(const char *device);

/* bytes of be's host_alloc memory, or malloc's where be has none (bytes 0: 1 byte);
 * NULL when out of memory.  Release with llm_backend_host_free (NULL: nothing). */
void *llm_backend_host_alloc(llm_backend *be, size_t bytes);
void llm_backend_host_free(llm_backend *be, void *p);

/* be->device_lost where the backend has one, else 0 (why, when given, gets ""). */
int llm_backend_device_lost(llm_backend *be, int wait, char *why, size_t whylen);

/* The thread count a backend uses for a requested threads: threads itself when > 0,
 * else every online core (at least 1). */
int  llm_backend_threads(int threads);
void llm_backend_free(llm_backend *be);

/* The CPU backends (kernels/cpu). */
int llm_backend_cpu_init(llm_backend *be, int threads, int reference);
void llm_backend_cpu_free(llm_backend *be);

/* Fill the inference pointers (infer_dtype_ok .. attention_rows) of a CPU backend:
 * reference != 0 the plain reference kernels, else the fast ones (SIMD, OpenMP with
 * be->threads threads, BLAS for large N).  Other fields are untouched. */
void llm_backend_cpu_infer_init(llm_backend *be, int reference);

#endif
