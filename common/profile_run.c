/* profile_run.c — llm-profile's driver: train steps, prefill, decode through the
 * profiling backend; the per-op report with predicted and measured memory. */
#include "common/profile_run.h"
#include "common/rng.h"

#include <errno.h>
#include <jansson.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>

#include "common/afile.h"
#include "common/bench.h"
#include "common/ckpt.h"
#include "common/infer.h"
#include "common/json.h"
#include "common/loss_scale.h"
#include "common/plan.h"

double llm_profile_peak_rss(void)
{
    struct rusage ru;
    if (getrusage(RUSAGE_SELF, &ru) != 0) return 0;
    return (double)ru.ru_maxrss * 1024.0;   /* Linux reports KiB */
}

int llm_profile_config_model(const llm_train_config *tc, llm_model_config *mc, llm_status *st)
{
    memset(mc, 0, sizeof *mc);
    snprintf(mc->arch, sizeof mc->arch, "%.15s", tc->arch);
    mc->n_layer = tc->n_layer;
    mc->n_head = tc->n_head;
    mc->n_embd = tc->n_embd;
    mc->vocab_size = tc->vocab_size;
    mc->max_seq_len = tc->max_seq_len;
    mc->padded_vocab = tc->padded_vocab_size ? tc->padded_vocab_size : (tc->vocab_size + 127) / 128 * 128;
    if (mc->n_layer < 1 || mc->n_head < 1 || mc->n_embd < 1 || mc->vocab_size < 1 || mc->max_seq_len < 1)
        return llm_err(st, LLM_EDATA, "model: n_layer, n_head, n_embd, vocab_size, max_seq_len must be >= 1");
    if (mc->n_embd % mc->n_head)
        return llm_err(st, LLM_EDATA, "model: n_embd %d is not a multiple of n_head %d", mc->n_embd, mc->n_head);
    return 0;
}

/* ---- peaks ---- */

/* The best f32 gemm and triad rates of device's rows (cpu-ref reads cpu rows); a file
 * without rows of that device gives its best rows of any device. */
static int peaks_read(llm_profile_peaks *pk, const char *path, const char *device, llm_status *st)
{
    json_error_t e;
    json_t *doc = json_load_file(path, 0, &e);
    if (!doc) return llm_err(st, LLM_EDATA, "peaks file '%s': %s (line %d)", path, e.text, e.line);
    json_t *rows = json_is_object(doc) ? json_object_get(doc, "results") : doc;
    const char *want = strncmp(device, "cpu", 3) == 0 ? "cpu" : device;
    double g = 0, b = 0;
    for (int any = 0; any < 2 && !(g > 0) && !(b > 0); any++) {
        size_t i;
        json_t *r;
        if (json_is_array(rows))
            json_array_foreach(rows, i, r) {
                const char *bench = json_string_value(json_object_get(r, "benchmark"));
                const char *op = json_string_value(json_object_get(r, "op"));
                const char *dt = json_string_value(json_object_get(r, "dtype"));
                const char *dev = json_string_value(json_object_get(r, "device"));
                double rate = json_number_value(json_object_get(r, "rate"));
                if (!bench || !(rate > 0)) continue;
                if (!any && (!dev || strcmp(dev, want) != 0)) continue;
                if (!strcmp(bench, "gemm") && dt && !strcmp(dt, "f32") && rate > g) g = rate;
                if (!strcmp(bench, "mem") && op && !strcmp(op, "triad") && rate > b) b = rate;
            }
    }
    json_decref(doc);
    if (pk->gflops <= 0) pk->gflops = g;
    if (pk->gbs <= 0) pk->gbs = b;
    return 0;
}

int llm_profile_peaks_get(llm_profile_peaks *pk, const char *path, int threads, llm_status *st)
{
    return llm_profile_peaks_get_dev(pk, path, "cpu", threads, st);
}

int llm_profile_peaks_get_dev(llm_profile_peaks *pk, const char *path, const char *device, int threads,
                              llm_status *st)
{
    if (pk->gflops > 0 && pk->gbs > 0) return 0;
    if (path) {
        FILE *f = fopen(path, "r");
        if (f) {
            fclose(f);
            return peaks_read(pk, path, device ? device : "cpu", st);
        }
    }
    llm_bench_row rows[2];
    if (device && !strcmp(device, "cuda")) {
        /* the GEMMs the model runs: fp32, or TF32 when the backend was told to use it */
        const char *tf = getenv("LLM_CUDA_TF32");
        llm_bench_gemm_opts g = {2048, 2048, 2048, tf && *tf == '1' ? "tf32" : "f32", 0, 1, 3, 0, 0};
        if (llm_bench_gemm_cuda(&g, &rows[0], st)) return st->code;
        if (llm_bench_mem_cuda("triad", (size_t)256 << 20, 1, 3, &rows[1], st)) return st->code;
    } else {
        llm_bench_gemm_opts g = {512, 512, 512, "f32", threads, 1, 3, 0, 0};
        if (llm_bench_gemm(&g, &rows[0], st)) return st->code;
        if (llm_bench_mem("triad", (size_t)32 << 20, threads, 1, 3, &rows[1], st)) return st->code;
    }
    if (pk->gflops <= 0) pk->gflops = rows[0].rate;
    if (pk->gbs <= 0) pk->gbs = rows[1].rate;
    return path ? llm_bench_write_file(path, LLM_BENCH_JSON, rows, 2, st) : 0;
}

/* ---- the run ---- */

typedef struct {
    llm_backend inner, be;
    int inner_ok;
    llm_profile *prof;
    llm_ckpt *ck;
    llm_model *model;
    llm_infer_model *im;
    llm_infer_ctx *ictx;
    int32_t *ids, *tgt;
    llm_infer_row *rows;
    size_t mem_before;   /* tracked bytes before the run's own buffers (weights) */
} run_state;

static void run_free(run_state *r)
{
    llm_infer_ctx_free(r->ictx);
    llm_infer_model_free(r->im);
    llm_model_free(r->model);
    llm_ckpt_close(r->ck);
    llm_profile_free(r->prof);
    if (r->inner_ok) llm_backend_free(&r->inner);
    free(r->ids);
    free(r->tgt);
    free(r->rows);
}

static int run_train(run_state *r, const llm_profile_run_opts *o, llm_model_config *mc, int B, int T,
                     int steps, llm_status *st)
{
    if (o->model_path) {
        if (llm_ckpt_open(&r->ck, o->model_path, LLM_CKPT_NOVERIFY, st)) return st->code;
        const llm_node *sec = llm_ckpt_section(r->ck, "model");
        if (!sec) return llm_err(st, LLM_EDATA, "'%s': no model section", o->model_path);
        if (llm_model_config_parse(sec, mc, st)) return llm_err_prefix(st, "%s", o->model_path);
    } else {
        *mc = *o->config;
    }
    if (T > mc->max_seq_len) return llm_err(st, LLM_EUSAGE, "-t %d exceeds max_seq_len %d", T, mc->max_seq_len);
    if (llm_model_new(&r->model, mc, &r->be, st)) return st->code;
    /* mixed precision as llm-train runs it: the lo copy is allocated here (tracked) */
    llm_dtype lo = o->precision == LLM_PREC_BF16 ? LLM_DT_BF16 : o->precision == LLM_PREC_FP16 ? LLM_DT_F16
                                                                                              : LLM_DT_F32;
    if (lo != LLM_DT_F32 && llm_model_set_precision(r->model, lo, st)) return st->code;
    llm_loss_scaler ls;
    llm_loss_scaler_init(&ls, lo == LLM_DT_F16, o->loss_scale > 0 ? o->loss_scale : 65536.0,
                         o->loss_scale_window > 0 ? (int64_t)o->loss_scale_window : 1000);
    if (r->ck) {
        if (llm_model_load(r->model, r->ck, 0, st)) return st->code;
    } else {
        llm_model_init_gpt2(r->model, o->seed);
    }
    float *params = llm_model_params(r->model);
    for (int i = 0; i < llm_model_nviews(r->model); i++) {
        const llm_param_view *v = llm_model_view(r->model, i);
        if (llm_profile_add_region(r->prof, params + v->offset, v->numel * sizeof(float), v->name, st))
            return st->code;
    }
    size_t n = (size_t)B * T;
    r->ids = malloc(n * sizeof *r->ids);
    r->tgt = malloc(n * sizeof *r->tgt);
    if (!r->ids || !r->tgt) return llm_err(st, LLM_ENOMEM, "out of memory for B*T=%zu tokens", n);
    uint64_t s = o->seed;
    for (size_t i = 0; i < n; i++) {
        r->ids[i] = (int32_t)(llm_splitmix64(&s) % (uint64_t)mc->vocab_size);
        r->tgt[i] = (int32_t)(llm_splitmix64(&s) % (uint64_t)mc->vocab_size);
    }
    llm_adamw_config hp = {1e-4f, 0.9f, 0.95f, 1e-8f, 0.0f, 1.0f};
    for (int step = 1; step <= o->warmup + steps; step++) {
        if (step == o->warmup + 1) llm_profile_reset(r->prof);
        char name[32];
        snprintf(name, sizeof name, "step %d", step);
        llm_profile_span_begin(r->prof, name);
        float loss;
        int skipped = 0;
        if (llm_model_set_loss_scale(r->model, ls.scale, st) || llm_model_zero_grad(r->model, st) ||
            llm_model_forward_backward(r->model, r->ids, r->tgt, B, T, 1.0f, &loss, st) ||
            llm_model_update(r->model, &hp, step, NULL, &skipped, st))
            return st->code;
        /* fp16: an overflowing step is skipped and the scale halves, as in llm-train */
        llm_loss_scaler_update(&ls, skipped && isfinite(loss), skipped && !isfinite(loss), NULL);
        r->be.sync(&r->be);
        llm_profile_span_end(r->prof);
    }
    return 0;
}

static int run_infer(run_state *r, const llm_profile_run_opts *o, llm_model_config *mc, int B, int T,
                     int steps, llm_status *st)
{
    if (!o->model_path)
        return llm_err(st, LLM_EUSAGE, "--mode %s needs a model file (MODEL.llmk)",
                       o->mode == LLM_PROFILE_DECODE ? "decode" : "prefill");
    /* The wrapper forwards the inference pointers only when the inner backend has them. */
    if (llm_infer_backend_ready(&r->inner, st)) return st->code;
    llm_profile_backend(r->prof, &r->be);
    if (llm_infer_model_open(&r->im, o->model_path, &r->be, 0, st)) return llm_err_prefix(st, "%s", o->model_path);
    *mc = r->im->cfg;
    if (T > mc->max_seq_len) return llm_err(st, LLM_EUSAGE, "-t %d exceeds max_seq_len %d", T, mc->max_seq_len);
    for (int i = 0; i < llm_ckpt_count(r->im->ck); i++) {
        const llm_tensor *t = llm_ckpt_tensor(r->im->ck, i);
        if (t->data && llm_profile_add_region(r->prof, t->data, t->nbytes, t->name, st)) return st->code;
    }
    r->mem_before = llm_profile_mem_live(r->prof);
    /* Prefill: B sequences of T positions in one forward; decode: a prompt of T/2
     * positions (not profiled), then one token per sequence per step. */
    int prompt = o->mode == LLM_PROFILE_DECODE ? (T / 2 > 0 ? T / 2 : 1) : T;
    if (o->mode == LLM_PROFILE_DECODE && prompt + steps > mc->max_seq_len)
        return llm_err(st, LLM_EUSAGE, "prompt %d + %d decode steps exceed max_seq_len %d", prompt, steps,
                       mc->max_seq_len);
    if (llm_infer_ctx_new(&r->ictx, r->im, B, B * prompt, st)) return st->code;
    size_t n = (size_t)B * prompt;
    r->rows = malloc(n * sizeof *r->rows);
    llm_backend *hb = r->im->be;   /* page-locked where the device has it */
    /* prefill: the logits come back, as llm-infer's first token; decode: greedy ids */
    int dec = o->mode == LLM_PROFILE_DECODE;
    float *logits = dec ? NULL : llm_backend_host_alloc(hb, (size_t)B * mc->padded_vocab * sizeof(float));
    int *which = malloc((size_t)B * sizeof(int));
    int32_t *next = malloc((size_t)B * sizeof *next);
    if (!r->rows || (!dec && !logits) || !which || !next) {
        llm_backend_host_free(hb, logits);
        free(which);
        free(next);
        return llm_err(st, LLM_ENOMEM, "out of memory for %zu rows", n);
    }
    uint64_t s = o->seed;
    int rc = 0;
    int reps = o->mode == LLM_PROFILE_PREFILL ? o->warmup + steps : 1;
    for (int rep = 0; rep < reps && !rc; rep++) {
        if (o->mode == LLM_PROFILE_PREFILL && rep == o->warmup) llm_profile_reset(r->prof);
        for (int b = 0; b < B; b++)
            for (int t = 0; t < prompt; t++) {
                llm_infer_row *row = &r->rows[(size_t)b * prompt + t];
                row->id = (int32_t)(llm_splitmix64(&s) % (uint64_t)mc->vocab_size);
                row->slot = b;
                row->pos = t;
            }
        for (int b = 0; b < B; b++) which[b] = (b + 1) * prompt - 1;
        llm_profile_span_begin(r->prof, "prefill");
        rc = llm_infer_forward(r->ictx, r->rows, (int)n, st) ||
             (dec ? llm_infer_argmax(r->ictx, which, B, next, st)
                  : llm_infer_logits(r->ictx, which, B, logits, st));
        llm_profile_span_end(r->prof);
    }
    if (dec && !rc) {
        llm_profile_reset(r->prof);
        for (int k = 0; k < steps && !rc; k++) {
            char name[32];
            snprintf(name, sizeof name, "token %d", prompt + k);
            for (int b = 0; b < B; b++) {
                r->rows[b] = (llm_infer_row){next[b], b, prompt + k};
                which[b] = b;
            }
            /* greedy, as llm-infer --temperature 0: the next tokens from the device
             * (argmax_rows) where the backend has it */
            llm_profile_span_begin(r->prof, name);
            rc = llm_infer_forward(r->ictx, r->rows, B, st) || llm_infer_argmax(r->ictx, which, B, next, st);
            llm_profile_span_end(r->prof);
        }
    }
    llm_backend_host_free(hb, logits);
    free(which);
    free(next);
    return rc ? st->code : 0;
}

static const char *mode_name(llm_profile_mode m)
{
    return m == LLM_PROFILE_TRAIN ? "train" : m == LLM_PROFILE_PREFILL ? "prefill" : "decode";
}

static void write_report(const llm_profile_run_opts *o, const run_state *r, const llm_model_config *mc,
                         int B, int T, int steps, const llm_plan *plan, double measured, double rss,
                         FILE *out, llm_status *st)
{
    llm_profile_devmem dm;
    int have_dm = llm_profile_device_mem(r->prof, &dm) == 0;
    double total = llm_profile_total_seconds(r->prof);
    const char *unit = o->mode == LLM_PROFILE_TRAIN ? "step" : o->mode == LLM_PROFILE_PREFILL ? "prefill" : "token";
    double tokens = o->mode == LLM_PROFILE_DECODE ? (double)B * steps : (double)B * T * steps;
    double pred = plan->total - (o->mode == LLM_PROFILE_TRAIN ? 0 : plan->params);
    /* mixed precision: the 16-bit weight copy (part of params) predicted and measured */
    int mixed = o->precision != LLM_PREC_FP32;
    double lo_pred = mixed ? 2.0 * plan->n_params_dev : 0, lo_meas = (double)llm_profile_mem_lo(r->prof);
    const char *prec = llm_plan_precision_name(o->precision);
    if (o->json) {
        llm_json j;
        llm_json_init(&j, out, 1);
        llm_json_obj_begin(&j);
        llm_json_kstr(&j, "mode", mode_name(o->mode));
        llm_json_kstr(&j, "device", r->inner.name);
        llm_json_kint(&j, "threads", r->inner.threads);
        llm_json_kstr(&j, "precision", prec);
        llm_json_kint(&j, "batch", B);
        llm_json_kint(&j, "seq", T);
        llm_json_kint(&j, "steps", steps);
        llm_json_kint(&j, "n_layer", mc->n_layer);
        llm_json_kint(&j, "n_embd", mc->n_embd);
        llm_json_knum(&j, "ms_per_step", steps ? 1e3 * total / steps : 0);
        llm_json_knum(&j, "tokens_per_s", total > 0 ? tokens / total : 0);
        llm_json_key(&j, "peaks");
        llm_json_obj_begin(&j);
        llm_json_knum(&j, "gflops", o->peaks.gflops);
        llm_json_knum(&j, "gbs", o->peaks.gbs);
        llm_json_obj_end(&j);
        llm_profile_write_json_ops(r->prof, &j, !o->per_layer, &o->peaks, st);
        llm_json_key(&j, "memory");
        llm_json_obj_begin(&j);
        llm_json_key(&j, "predicted");
        llm_json_obj_begin(&j);
        llm_json_knum(&j, "params", plan->params);
        if (mixed) llm_json_knum(&j, "params_lo", lo_pred);
        llm_json_knum(&j, "grads", plan->grads);
        llm_json_knum(&j, "optimizer", plan->optimizer);
        llm_json_knum(&j, "activations", plan->activations);
        llm_json_knum(&j, "activations_per_layer", plan->act_per_layer);
        llm_json_knum(&j, "kv_cache", plan->kv_cache);
        llm_json_knum(&j, "workspace", plan->workspace);
        llm_json_knum(&j, "total", plan->total);
        llm_json_knum(&j, "allocated", pred);
        llm_json_obj_end(&j);
        llm_json_key(&j, "measured");
        llm_json_obj_begin(&j);
        llm_json_knum(&j, "allocated_peak", measured);
        if (mixed) llm_json_knum(&j, "params_lo", lo_meas);
        llm_json_knum(&j, "peak_rss", rss);
        if (r->im) llm_json_knum(&j, "weights_repacked", (double)r->im->repack_bytes);
        if (have_dm) {
            llm_json_knum(&j, "device_used_before", dm.used_before);
            llm_json_knum(&j, "device_used_after", dm.used_after);
            llm_json_knum(&j, "device_used_delta", dm.used_after - dm.used_before);
            llm_json_knum(&j, "device_used_peak", dm.used_peak);
            llm_json_knum(&j, "device_total", dm.total);
        }
        llm_json_obj_end(&j);
        llm_json_knum(&j, "error_pct", pred > 0 ? 100.0 * (measured - pred) / pred : 0);
        llm_json_obj_end(&j);
        llm_json_obj_end(&j);
        fputc('\n', out);
        return;
    }
    fprintf(out, "# llm-profile: mode %s, device %s (%d threads), B=%d T=%d, %d %s(s), L=%d C=%d, precision %s\n",
            mode_name(o->mode), r->inner.name, r->inner.threads, B, T, steps, unit, mc->n_layer, mc->n_embd, prec);
    fprintf(out, "# %.3f ms per %s, %.1f tokens/s; peaks %.1f GFLOP/s, %.1f GB/s\n",
            steps ? 1e3 * total / steps : 0, unit, total > 0 ? tokens / total : 0, o->peaks.gflops,
            o->peaks.gbs);
    llm_profile_write_table(r->prof, out, !o->per_layer, &o->peaks, st);
    fprintf(out, "\nmemory          predicted       measured\n");
    fprintf(out, "params       %12.0f %s\n", plan->params,
            o->mode == LLM_PROFILE_TRAIN ? "" : "  (mmap'd from the file, not allocated)");
    if (mixed)
        fprintf(out, "  params_lo  %12.0f %14.0f   (the %s copy of the weights, in params)\n", lo_pred, lo_meas,
                prec);
    fprintf(out, "grads        %12.0f\n", plan->grads);
    fprintf(out, "optimizer    %12.0f\n", plan->optimizer);
    fprintf(out, "activations  %12.0f   (%.0f per layer)\n", plan->activations, plan->act_per_layer);
    fprintf(out, "kv_cache     %12.0f\n", plan->kv_cache);
    fprintf(out, "allocated    %12.0f %14.0f   (%+.2f%%; tracked backend allocations, peak)\n", pred,
            measured, pred > 0 ? 100.0 * (measured - pred) / pred : 0);
    fprintf(out, "peak RSS                   %14.0f\n", rss);
    if (r->im && r->im->repack_bytes)
        fprintf(out, "weights repacked           %14.0f   (q4_0 for the CPU decode kernels, on the heap)\n",
                (double)r->im->repack_bytes);
    if (have_dm) {
        fprintf(out, "device used                %14.0f   (%+.0f since the profiler started; cudaMemGetInfo, "
                     "whole device)\n", dm.used_after, dm.used_after - dm.used_before);
        fprintf(out, "device used, peak          %14.0f   (of %.0f; sampled after each step or token)\n",
                dm.used_peak, dm.total);
    }
}

/* The Chrome trace, made in memory, then written all or nothing (llm_afile; "-": stdout). */
static int write_trace(const llm_profile *prof, const char *path, llm_status *st)
{
    char *buf = NULL;
    size_t len = 0;
    FILE *m = open_memstream(&buf, &len);
    if (!m)
        return llm_err(st, LLM_ENOMEM, "out of memory");
    int rc = llm_profile_write_trace(prof, m, st);
    if (fclose(m) && !rc)
        rc = llm_err(st, LLM_ENOMEM, "out of memory");
    if (!rc)
        rc = llm_afile_write(path, LLM_AFILE_STDOUT, buf, len, st);
    free(buf);
    return rc;
}

int llm_profile_run(const llm_profile_run_opts *o, FILE *out, const llm_log *lg, llm_status *st)
{
    if (!o->model_path && !o->config) return llm_err(st, LLM_EUSAGE, "need a model file or --config");
    run_state r;
    memset(&r, 0, sizeof r);
    if (llm_backend_open(&r.inner, o->device, o->threads, st))
        return st->code;
    r.inner_ok = 1;
    int B = o->B > 0 ? o->B : 4;
    if (B > 4096) { run_free(&r); return llm_err(st, LLM_EUSAGE, "-b %d: must be in 1..4096", B); }
    if (o->precision != LLM_PREC_FP32 && o->mode != LLM_PROFILE_TRAIN) {
        run_free(&r);
        return llm_err(st, LLM_EUSAGE, "--precision %s is for --mode train (inference runs the "
                       "checkpoint's weights as stored)", llm_plan_precision_name(o->precision));
    }
    if (llm_profile_new(&r.prof, &r.inner, 1u << 20, st)) { run_free(&r); return st->code; }
    llm_profile_backend(r.prof, &r.be);

    llm_model_config mc;
    int maxT = o->model_path ? 0 : o->config->max_seq_len;
    int T = o->T;
    int rc;
    int steps = o->steps;
    if (o->mode == LLM_PROFILE_TRAIN) {
        if (T <= 0) T = maxT > 0 ? maxT : 64;
        if (steps <= 0) steps = 3;
        /* T == 0 with a model file: the file's max_seq_len, known once it is open */
        rc = run_train(&r, o, &mc, B, T, steps, st);
    } else {
        if (T <= 0) T = maxT > 0 ? maxT : 64;
        if (steps <= 0) steps = o->mode == LLM_PROFILE_DECODE ? T - (T / 2 > 0 ? T / 2 : 1) : 3;
        if (steps <= 0) steps = 1;
        rc = run_infer(&r, o, &mc, B, T, steps, st);
    }
    if (rc) { run_free(&r); return rc; }
    llm_profile_flush(r.prof);   /* on a GPU: the last op times (a no-op on the CPU) */
    llm_debug(lg, "%zu op calls recorded", llm_profile_nevents(r.prof));

    llm_plan_config pc = {.model = mc, .batch = B, .seq = T, .gpus = 1, .tp = 1, .pp = 1, .zero = 0,
                          .precision = o->precision, .recompute = LLM_RECOMPUTE_NONE,
                          .train = o->mode == LLM_PROFILE_TRAIN, .cpu = 1};
    llm_plan plan;
    if (o->mode != LLM_PROFILE_TRAIN) {
        /* the engine's KV cache spans max_seq_len per sequence; its rows are the prompt */
        int prompt = o->mode == LLM_PROFILE_DECODE ? (T / 2 > 0 ? T / 2 : 1) : T;
        pc.seq = prompt;
    }
    rc = llm_plan_compute(&pc, &plan, st);
    if (!rc && o->mode != LLM_PROFILE_TRAIN) {
        plan.kv_cache = 2.0 * mc.n_layer * B * (double)mc.max_seq_len * mc.n_embd * 4;
        plan.total = plan.params + plan.activations + plan.kv_cache + plan.workspace;
    }
    if (rc) { run_free(&r); return rc; }
    double measured = (double)(llm_profile_mem_peak(r.prof) - r.mem_before);
    write_report(o, &r, &mc, B, T, steps, &plan, measured, llm_profile_peak_rss(), out, st);
    if (!st->code && o->trace_path)
        rc = write_trace(r.prof, o->trace_path, st);
    run_free(&r);
    if (!rc && (fflush(out) != 0 || ferror(out))) rc = llm_err(st, LLM_EIO, "write failed: %s", strerror(errno));
    return rc ? rc : (int)st->code;
}
