/* bench_model.c — training and inference throughput. */
#include "common/bench_model.h"
#include "common/rng.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "common/ckpt.h"
#include "common/infer.h"
#include "common/loss_scale.h"

double llm_bench_train_peak_gflops(const llm_backend *be, llm_dtype lo)
{
    if (strcmp(be->name, "cuda"))
        return llm_bench_cpu_peak_gflops(be->threads > 0 ? be->threads : 1);
    const char *tf = getenv("LLM_CUDA_TF32");
    const char *dt = lo == LLM_DT_BF16 ? "bf16" : lo == LLM_DT_F16 ? "f16" : tf && *tf == '1' ? "tf32" : "f32";
    double peak = -1;
    llm_status st = {0};
    if (llm_bench_gpu_peaks(dt, &peak, NULL, NULL, 0, &st))
        return -1;
    return peak > 0 ? peak : -1;
}

double llm_bench_train_flops_per_token(const llm_model_config *c, int T)
{
    return 6.0 * (double)llm_model_num_params(c) + 6.0 * c->n_layer * (double)T * c->n_embd;
}

static int check_opts(const llm_bench_model_opts *o, llm_status *st)
{
    if (!o->model_path && !o->config) return llm_err(st, LLM_EUSAGE, "need a model file or a config");
    if (o->B < 1 || o->B > 4096 || o->T < 1) return llm_err(st, LLM_EUSAGE, "batch %d / seq %d out of range", o->B, o->T);
    if (o->reps < 1 || o->warmup < 0) return llm_err(st, LLM_EUSAGE, "reps must be >= 1 and warmup >= 0");
    return 0;
}

int llm_bench_train(const llm_bench_model_opts *o, llm_bench_row *row, llm_status *st)
{
    if (check_opts(o, st)) return st->code;
    llm_backend be;
    if (llm_backend_open(&be, o->device, o->threads, st)) return st->code;
    llm_ckpt *ck = NULL;
    llm_model *m = NULL;
    int32_t *ids = NULL, *tgt = NULL;
    double *t = NULL;
    llm_model_config mc;
    int rc = 0;
    if (o->model_path) {
        if ((rc = llm_ckpt_open(&ck, o->model_path, LLM_CKPT_NOVERIFY, st))) goto done;
        const llm_node *sec = llm_ckpt_section(ck, "model");
        if (!sec) { rc = llm_err(st, LLM_EDATA, "'%s': no model section", o->model_path); goto done; }
        if ((rc = llm_model_config_parse(sec, &mc, st))) goto done;
    } else {
        mc = *o->config;
    }
    if (o->T > mc.max_seq_len) { rc = llm_err(st, LLM_EUSAGE, "seq %d exceeds max_seq_len %d", o->T, mc.max_seq_len); goto done; }
    if ((rc = llm_model_new(&m, &mc, &be, st))) goto done;
    llm_dtype lo = o->precision == LLM_PREC_BF16 ? LLM_DT_BF16 : o->precision == LLM_PREC_FP16 ? LLM_DT_F16
                                                                                              : LLM_DT_F32;
    if (lo != LLM_DT_F32 && (rc = llm_model_set_precision(m, lo, st))) goto done;
    llm_loss_scaler ls;
    llm_loss_scaler_init(&ls, lo == LLM_DT_F16, o->loss_scale > 0 ? o->loss_scale : 65536.0,
                         o->loss_scale_window > 0 ? (int64_t)o->loss_scale_window : 1000);
    if (ck) { if ((rc = llm_model_load(m, ck, 0, st))) goto done; }
    else llm_model_init_gpt2(m, 1234);
    size_t n = (size_t)o->B * o->T;
    ids = malloc(n * sizeof *ids);
    tgt = malloc(n * sizeof *tgt);
    t = malloc((size_t)o->reps * sizeof *t);
    if (!ids || !tgt || !t) { rc = llm_err(st, LLM_ENOMEM, "out of memory"); goto done; }
    uint64_t s = 42;
    for (size_t i = 0; i < n; i++) {
        ids[i] = (int32_t)(llm_splitmix64(&s) % (uint64_t)mc.vocab_size);
        tgt[i] = (int32_t)(llm_splitmix64(&s) % (uint64_t)mc.vocab_size);
    }
    llm_adamw_config hp = {1e-4f, 0.9f, 0.95f, 1e-8f, 0.0f, 1.0f};
    for (int k = 0; k < o->warmup + o->reps; k++) {
        double t0 = llm_now_s();
        float loss;
        int skipped = 0;
        if ((rc = llm_model_set_loss_scale(m, ls.scale, st)) || (rc = llm_model_zero_grad(m, st)) ||
            (rc = llm_model_forward_backward(m, ids, tgt, o->B, o->T, 1.0f, &loss, st)) ||
            (rc = llm_model_update(m, &hp, k + 1, NULL, &skipped, st)))
            goto done;
        /* fp16: an overflow skips the step and halves the scale, as in llm-train */
        llm_loss_scaler_update(&ls, skipped && isfinite(loss), skipped && !isfinite(loss), NULL);
        be.sync(&be);
        if (k >= o->warmup) t[k - o->warmup] = llm_now_s() - t0;
    }
    llm_bench_row_init(row, "train", "step");
    snprintf(row->device, sizeof row->device, "%s", be.name);
    snprintf(row->precision, sizeof row->precision, "%s", llm_plan_precision_name(o->precision));
    const char *gemm_dt = lo == LLM_DT_BF16 ? "bf16" : lo == LLM_DT_F16 ? "f16" : "f32";
    snprintf(row->dtype, sizeof row->dtype, "%s", gemm_dt);
    snprintf(row->shape, sizeof row->shape, "B=%d,T=%d,L=%d,C=%d", o->B, o->T, mc.n_layer, mc.n_embd);
    row->threads = be.threads;
    row->warmup = o->warmup;
    llm_bench_row_times(row, t, o->reps, (double)n, 1, "tokens/s");
    double fpt = llm_bench_train_flops_per_token(&mc, o->T);
    double peak = o->peak_gflops > 0 ? o->peak_gflops : llm_bench_train_peak_gflops(&be, lo);
    llm_bench_row_kv(row, "batch", o->B);
    llm_bench_row_kv(row, "ms_per_step", 1e3 * row->t_med);
    llm_bench_row_kv(row, "flops_per_token", fpt);
    /* a GPU that the peak table does not know: no mfu (and peak_pct null) unless --peak */
    if (peak > 0) {
        llm_bench_row_kv(row, "mfu", 100.0 * row->rate * fpt / (peak * 1e9));
        row->peak_pct = 100.0 * row->rate * fpt / (peak * 1e9);
    } else {
        snprintf(row->note, sizeof row->note, "no peak known for this GPU: no mfu (give --peak)");
    }
done:
    free(ids);
    free(tgt);
    free(t);
    llm_model_free(m);
    llm_ckpt_close(ck);
    llm_backend_free(&be);
    return rc;
}

int llm_bench_infer(const llm_bench_model_opts *o, llm_bench_row rows[2], llm_status *st)
{
    if (check_opts(o, st)) return st->code;
    if (!o->model_path) return llm_err(st, LLM_EUSAGE, "infer needs a model file (MODEL.llmk)");
    if (o->gen < 1) return llm_err(st, LLM_EUSAGE, "gen must be >= 1");
    llm_backend be;
    if (llm_backend_open(&be, o->device, o->threads, st)) return st->code;
    llm_infer_model *im = NULL;
    llm_infer_ctx *ctx = NULL;
    llm_infer_row *r = NULL;
    int32_t *next = NULL;
    int *which = NULL;
    double *tp = NULL, *td = NULL, *ttft = NULL;
    int rc = 0, B = o->B, T = o->T;
    if ((rc = llm_infer_model_open(&im, o->model_path, &be, 0, st))) goto done;
    const llm_model_config *mc = &im->cfg;
    if (T > mc->max_seq_len || o->gen > mc->max_seq_len - T) {   /* no int overflow of T + gen */
        rc = llm_err(st, LLM_EUSAGE, "prompt %d + gen %d exceed max_seq_len %d", T, o->gen, mc->max_seq_len);
        goto done;
    }
    if ((rc = llm_infer_ctx_new(&ctx, im, B, B * T, st))) goto done;
    r = malloc((size_t)B * T * sizeof *r);
    next = malloc((size_t)B * sizeof *next);
    which = malloc((size_t)B * sizeof *which);
    tp = malloc((size_t)o->reps * sizeof *tp);
    ttft = malloc((size_t)o->reps * sizeof *ttft);
    td = malloc((size_t)o->reps * o->gen * sizeof *td);
    if (!r || !next || !which || !tp || !td || !ttft) { rc = llm_err(st, LLM_ENOMEM, "out of memory"); goto done; }
    uint64_t s = 7;
    for (int rep = 0; rep < o->warmup + o->reps; rep++) {
        for (int b = 0; b < B; b++) {
            for (int i = 0; i < T; i++)
                r[(size_t)b * T + i] = (llm_infer_row){(int32_t)(llm_splitmix64(&s) % (uint64_t)mc->vocab_size), b, i};
            which[b] = (b + 1) * T - 1;
        }
        double t0 = llm_now_s();
        if ((rc = llm_infer_forward(ctx, r, B * T, st))) goto done;
        double t1 = llm_now_s();
        /* greedy, as llm-infer --temperature 0: the first tokens are the prefill's */
        if ((rc = llm_infer_argmax(ctx, which, B, next, st))) goto done;
        double t2 = llm_now_s();
        for (int k = 0; k < o->gen; k++) {
            double a = llm_now_s();
            for (int b = 0; b < B; b++) {
                r[b] = (llm_infer_row){next[b], b, T + k};
                which[b] = b;
            }
            if ((rc = llm_infer_forward(ctx, r, B, st)) || (rc = llm_infer_argmax(ctx, which, B, next, st)))
                goto done;
            if (rep >= o->warmup) td[(size_t)(rep - o->warmup) * o->gen + k] = llm_now_s() - a;
        }
        if (rep >= o->warmup) {
            tp[rep - o->warmup] = t1 - t0;
            ttft[rep - o->warmup] = t2 - t0;
        }
    }
    for (int i = 0; i < 2; i++) {
        llm_bench_row_init(&rows[i], "infer", i ? "decode" : "prefill");
        snprintf(rows[i].device, sizeof rows[i].device, "%s", be.name);
        snprintf(rows[i].shape, sizeof rows[i].shape, "B=%d,prompt=%d,gen=%d", B, T, o->gen);
        rows[i].threads = be.threads;
        rows[i].warmup = o->warmup;
        llm_bench_row_kv(&rows[i], "batch", B);
    }
    llm_bench_row_times(&rows[0], tp, o->reps, (double)B * T, 1, "tokens/s");
    llm_bench_row_times(&rows[1], td, o->reps * o->gen, (double)B, 1, "tokens/s");
    /* median time to first token: a second sort of ttft */
    llm_bench_row tmp;
    llm_bench_row_init(&tmp, "x", "x");
    llm_bench_row_times(&tmp, ttft, o->reps, 1, 1, "");
    llm_bench_row_kv(&rows[0], "ttft_ms", 1e3 * tmp.t_med);
    llm_bench_row_kv(&rows[1], "tpot_ms", 1e3 * rows[1].t_med);
    llm_bench_row_kv(&rows[1], "ttft_ms", 1e3 * tmp.t_med);
done:
    free(r);
    free(next);
    free(which);
    free(tp);
    free(td);
    free(ttft);
    llm_infer_ctx_free(ctx);
    llm_infer_model_free(im);
    llm_backend_free(&be);
    return rc;
}
