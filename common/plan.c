/* plan.c — memory planner formulas (documented in man/man1/llm-profile.1). */
#include "common/plan.h"

#include <math.h>
#include <string.h>

int llm_plan_precision_parse(const char *s, llm_precision *out)
{
    if (!s) return -1;
    if (!strcmp(s, "fp32") || !strcmp(s, "f32")) *out = LLM_PREC_FP32;
    else if (!strcmp(s, "bf16")) *out = LLM_PREC_BF16;
    else if (!strcmp(s, "fp16") || !strcmp(s, "f16")) *out = LLM_PREC_FP16;
    else return -1;
    return 0;
}

int llm_plan_recompute_parse(const char *s, llm_recompute *out)
{
    if (!s) return -1;
    if (!strcmp(s, "none")) *out = LLM_RECOMPUTE_NONE;
    else if (!strcmp(s, "selective")) *out = LLM_RECOMPUTE_SELECTIVE;
    else if (!strcmp(s, "full")) *out = LLM_RECOMPUTE_FULL;
    else return -1;
    return 0;
}

const char *llm_plan_precision_name(llm_precision p)
{
    return p == LLM_PREC_FP32 ? "fp32" : p == LLM_PREC_BF16 ? "bf16" : "fp16";
}

const char *llm_plan_recompute_name(llm_recompute r)
{
    return r == LLM_RECOMPUTE_NONE ? "none" : r == LLM_RECOMPUTE_SELECTIVE ? "selective" : "full";
}

static double embed_params(const llm_model_config *m)
{
    double C = m->n_embd;
    return (double)m->padded_vocab * C + (double)m->max_seq_len * C + 2 * C;   /* + ln_f */
}

static double layer_params(const llm_model_config *m)
{
    double C = m->n_embd;
    return 12 * C * C + 13 * C;
}

double llm_plan_num_params(const llm_model_config *cfg)
{
    return embed_params(cfg) + cfg->n_layer * layer_params(cfg);
}

/* Floats (4 bytes) the model allocates for a tensor of n elements: n in fp32, n/2 as a
 * lo tensor (2 bytes an element), rounded up to 64 floats (each tensor starts on a
 * 256-byte boundary; common/model_pass.c).  n may be a fraction under tp: a device's
 * share, rounded up. */
static double flt(double n, int lo)
{
    double f = ceil(lo ? n / 2 : n);
    return ceil(f / 64) * 64;
}

int llm_plan_compute(const llm_plan_config *c, llm_plan *o, llm_status *st)
{
    memset(o, 0, sizeof *o);
    const llm_model_config *m = &c->model;
    if (m->n_layer < 1 || m->n_embd < 1 || m->n_head < 1 || m->padded_vocab < 1 || m->max_seq_len < 1)
        return llm_err(st, LLM_EUSAGE, "model: n_layer, n_embd, n_head, vocab and max_seq_len must be >= 1");
    if (c->gpus < 1 || c->tp < 1 || c->pp < 1)
        return llm_err(st, LLM_EUSAGE, "gpus, tp and pp must be >= 1");
    /* tp <= n_head and pp <= n_layer first: their product then fits in an int */
    if (m->n_head % c->tp)
        return llm_err(st, LLM_EUSAGE, "tp %d does not divide n_head %d", c->tp, m->n_head);
    if (c->pp > m->n_layer)
        return llm_err(st, LLM_EUSAGE, "pp %d exceeds n_layer %d", c->pp, m->n_layer);
    long long mp = (long long)c->tp * c->pp;
    if (c->gpus % mp)
        return llm_err(st, LLM_EUSAGE, "gpus %d is not a multiple of tp*pp = %lld", c->gpus, mp);
    if (c->zero < 0 || c->zero > 3) return llm_err(st, LLM_EUSAGE, "zero stage %d: use 0..3", c->zero);
    if (c->batch < 1 || c->seq < 1 || c->seq > m->max_seq_len)
        return llm_err(st, LLM_EUSAGE, "batch %d / seq %d: need batch >= 1, 1 <= seq <= %d", c->batch,
                       c->seq, m->max_seq_len);

    o->dp = c->gpus / (c->tp * c->pp);
    o->layers_per_stage = (m->n_layer + c->pp - 1) / c->pp;
    int Ls = o->layers_per_stage;
    double tp = c->tp, dp = o->dp;
    o->n_params = llm_plan_num_params(m);
    /* The first stage holds the embeddings (and with tied weights the last one a copy). */
    o->n_params_dev = (embed_params(m) + Ls * layer_params(m)) / tp;

    /* llmkit's mixed precision (llm-train --precision bf16|fp16) keeps fp32 master
     * parameters plus a 16-bit copy for the GEMMs, fp32 gradients and AdamW moments, and
     * its activations in lo (2 bytes): the GEMM inputs ln1, atty, ln2, lnf, the qkv and
     * fc pre-activation, its GELU output (kept without recompute), and the logits.  What
     * stays fp32: the residual streams, res2, the layernorm statistics, the residual
     * gradient, the two scratch buffers, losses, and the attention's row log-sum-exps
     * (B,NH,T), kept instead of its probabilities (B,NH,T,T).  Inference reads weights in their file's dtype (bf16/f16 for a 16-bit
     * plan) with fp32 activations and KV cache. */
    double wb = c->precision == LLM_PREC_FP32 ? 4 : 2;   /* a weight in the plan's dtype */
    double ab = 4;                                        /* activations, KV cache */
    double P = o->n_params_dev;
    if (c->train) {
        o->params = P * (4 + (wb < 4 ? wb : 0)) / (c->zero >= 3 ? dp : 1);
        o->grads = P * 4 / (c->zero >= 2 ? dp : 1);
        /* AdamW m and v in fp32 */
        /* ZeRO-1 as llm-train runs it: the largest shard, ceil(P / d) elements */
        o->optimizer = (c->zero >= 1 ? ceil(P / dp) : P) * 8;
    } else {
        o->params = P * wb;
    }

    double B = c->batch, T = c->seq, C = m->n_embd, NH = m->n_head, Vp = m->padded_vocab;
    int lo = c->train && c->precision != LLM_PREC_FP32;
    double N = B * T, NC = N * C, natt = B * NH * T * (lo ? 1 : T);
    if (c->train) {
        /* llmkit's training pass (common/model_pass.c), in floats of 4 bytes, each tensor
         * rounded up to 256 bytes as the model lays them out: per layer ln1, ln2 (lo),
         * res2 and four statistics; split by tp: qkv (N,3C), atty (N,C), fch (N,4C) (lo),
         * and att (the probabilities, or lse under mixed precision). */
        double split = flt(3 * NC / tp, lo) + flt(NC / tp, lo) + flt(4 * NC / tp, lo);
        double full = 2 * flt(NC, lo) + flt(NC, 0) + 4 * flt(N, 0);
        double att = flt(natt / tp, 0);
        double layer;
        double extra = 0;   /* recompute: one layer's dropped tensors, live while it runs */
        switch (c->recompute) {
        case LLM_RECOMPUTE_NONE:   /* mixed precision keeps the GELU output (lo) too */
            layer = full + split + att + (lo ? flt(4 * NC / tp, lo) : 0);
            break;
        case LLM_RECOMPUTE_SELECTIVE:   /* lo: the GELU output dropped (recomputed in scratch) */
            if (lo) layer = full + split + att;
            else { layer = full + split; extra = att; }
            break;
        default: layer = 0; extra = full + split + att; break;   /* keeps only the streams */
        }
        /* Global: Ls+1 residual streams (fp32), ln_f out (lo) + stats, logits (lo;
         * vocab-parallel over tp), losses + lse, two (N,4C) fp32 scratch buffers, the
         * residual gradient (fp32). */
        double global = (Ls + 1) * flt(NC, 0) + flt(NC, lo) + 2 * flt(N, 0) + flt(N * Vp / tp, lo) +
                        2 * flt(N, 0) + 2 * flt(4 * NC, 0) + flt(NC, 0) + extra;
        o->act_per_layer = layer * ab;
        /* token ids and targets on the device: int32 whatever the precision */
        o->act_global = global * ab + 2 * N * 4;
        /* 1F1B: the first stage holds pp micro-batches' activations at its peak. */
        o->activations = c->pp * (Ls * o->act_per_layer + o->act_global);
    } else {
        /* llmkit's inference engine (common/infer_forward.c): R = B*T rows of x, ln, att,
         * proj (N,C), qkv (N,3C), fc and its GELU (N,4C), logits for up to 64 rows, ids. */
        double R = N, lr = R > 64 ? 64 : R;
        o->act_per_layer = 0;
        o->act_global = (15 * R * C / 1.0) * ab + lr * Vp * ab + 3 * R * 4;
        o->activations = o->act_global;
        /* K and V for seq positions of each of the B sequences, layers of this stage. */
        o->kv_cache = 2.0 * Ls * B * T * C / tp * ab;
    }
    o->workspace = c->cpu ? 0 : 32.0 * 1024 * 1024;
    o->total = o->params + o->grads + o->optimizer + o->activations + o->kv_cache + o->workspace;
    /* Everything batch-dependent is linear in B (the logits chunk of inference aside,
     * which only grows up to 64 rows: treated as linear, an over-estimate). */
    o->act_per_sample = (o->activations + o->kv_cache) / B;
    o->fits = -1;
    o->max_batch = -1;
    if (c->device_mem > 0) {
        o->fits = o->total <= c->device_mem;
        double fixed = o->params + o->grads + o->optimizer + o->workspace;
        double room = c->device_mem - fixed;
        o->max_batch = room <= 0 || o->act_per_sample <= 0 ? 0 : (long)floor(room / o->act_per_sample);
    }
    return 0;
}

static void human(char *buf, size_t n, double bytes)
{
    if (bytes >= 1024.0 * 1024 * 1024) snprintf(buf, n, "%.2f GiB", bytes / (1024.0 * 1024 * 1024));
    else if (bytes >= 1024.0 * 1024) snprintf(buf, n, "%.2f MiB", bytes / (1024.0 * 1024));
    else snprintf(buf, n, "%.1f KiB", bytes / 1024.0);
}

void llm_plan_write_table(const llm_plan_config *c, const llm_plan *p, FILE *f)
{
    char b[32];
    const llm_model_config *m = &c->model;
    fprintf(f, "model: L=%d C=%d NH=%d Vp=%d maxT=%d  %.1fM params\n", m->n_layer, m->n_embd,
            m->n_head, m->padded_vocab, m->max_seq_len, p->n_params / 1e6);
    fprintf(f, "layout: %s, %d device(s) = dp %d x tp %d x pp %d, zero %d, %s, recompute %s, "
               "micro-batch B=%d T=%d\n",
            c->train ? "train" : "infer", c->gpus, p->dp, c->tp, c->pp, c->zero,
            llm_plan_precision_name(c->precision), llm_plan_recompute_name(c->recompute), c->batch,
            c->seq);
    fprintf(f, "per device (worst pipeline stage, %d layer(s)):\n", p->layers_per_stage);
    const struct { const char *k; double v; } rows[] = {
        {"params", p->params},       {"grads", p->grads},       {"optimizer", p->optimizer},
        {"activations", p->activations}, {"kv_cache", p->kv_cache}, {"workspace", p->workspace},
    };
    for (size_t i = 0; i < sizeof rows / sizeof rows[0]; i++) {
        human(b, sizeof b, rows[i].v);
        fprintf(f, "  %-12s %14.0f B  %12s\n", rows[i].k, rows[i].v, b);
    }
    human(b, sizeof b, p->act_per_layer);
    fprintf(f, "    per layer  %14.0f B  %12s\n", p->act_per_layer, b);
    human(b, sizeof b, p->total);
    fprintf(f, "  %-12s %14.0f B  %12s\n", "total", p->total, b);
    if (p->fits >= 0) {
        human(b, sizeof b, c->device_mem);
        fprintf(f, "fits in %s: %s; largest micro-batch that fits: %ld\n", b, p->fits ? "yes" : "no",
                p->max_batch);
    } else {
        fprintf(f, "device memory unknown (give --gpu-mem): no fit verdict\n");
    }
}

void llm_plan_write_json(const llm_plan_config *c, const llm_plan *p, llm_json *j)
{
    llm_json_obj_begin(j);
    llm_plan_write_json_members(c, p, j);
    llm_json_obj_end(j);
}

void llm_plan_write_json_members(const llm_plan_config *c, const llm_plan *p, llm_json *j)
{
    const llm_model_config *m = &c->model;
    llm_json_key(j, "model");
    llm_json_obj_begin(j);
    llm_json_kint(j, "n_layer", m->n_layer);
    llm_json_kint(j, "n_head", m->n_head);
    llm_json_kint(j, "n_embd", m->n_embd);
    llm_json_kint(j, "vocab_size", m->vocab_size);
    llm_json_kint(j, "padded_vocab_size", m->padded_vocab);
    llm_json_kint(j, "max_seq_len", m->max_seq_len);
    llm_json_knum(j, "n_params", p->n_params);
    llm_json_obj_end(j);
    llm_json_kstr(j, "mode", c->train ? "train" : "infer");
    llm_json_kstr(j, "device", c->cpu ? "cpu" : "cuda");
    llm_json_kint(j, "gpus", c->gpus);
    llm_json_kint(j, "dp", p->dp);
    llm_json_kint(j, "tp", c->tp);
    llm_json_kint(j, "pp", c->pp);
    llm_json_kint(j, "zero", c->zero);
    llm_json_kstr(j, "precision", llm_plan_precision_name(c->precision));
    llm_json_kstr(j, "recompute", llm_plan_recompute_name(c->recompute));
    llm_json_kint(j, "batch", c->batch);
    llm_json_kint(j, "seq", c->seq);
    llm_json_kint(j, "layers_per_stage", p->layers_per_stage);
    llm_json_knum(j, "params_per_device", p->n_params_dev);
    llm_json_key(j, "bytes");
    llm_json_obj_begin(j);
    llm_json_knum(j, "params", p->params);
    llm_json_knum(j, "grads", p->grads);
    llm_json_knum(j, "optimizer", p->optimizer);
    llm_json_knum(j, "activations", p->activations);
    llm_json_knum(j, "activations_per_layer", p->act_per_layer);
    llm_json_knum(j, "activations_global", p->act_global);
    llm_json_knum(j, "kv_cache", p->kv_cache);
    llm_json_knum(j, "workspace", p->workspace);
    llm_json_knum(j, "total", p->total);
    llm_json_obj_end(j);
    if (c->device_mem > 0) llm_json_knum(j, "device_mem", c->device_mem);
    else { llm_json_key(j, "device_mem"); llm_json_null(j); }
    if (p->fits >= 0) llm_json_kbool(j, "fits", p->fits);
    else { llm_json_key(j, "fits"); llm_json_null(j); }
    if (p->max_batch >= 0) llm_json_kint(j, "max_batch", p->max_batch);
    else { llm_json_key(j, "max_batch"); llm_json_null(j); }
}
