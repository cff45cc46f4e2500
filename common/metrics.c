/* metrics.c — JSON lines, Prometheus textfile and progress line (see metrics.h). */
#include "common/metrics.h"
#include "common/afile.h"
#include "common/fsutil.h"

#include <errno.h>
#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <sys/resource.h>

#include "common/json.h"

struct llm_metrics {
    FILE *f;
    int own;              /* f is a file we opened */
    char *path;
    char *prom;
    int progress, drawn;
    llm_step_metrics last;
    int have_last;
    double val_loss;
    int have_val;
};

int llm_metrics_open(llm_metrics **out, const char *path, const char *prom, int progress,
                     llm_status *st)
{
    *out = NULL;
    /* the Prometheus file is replaced by a rename every step: a regular file (or the one
     * a link names), never a device or pipe, which the rename would replace */
    char target[PATH_MAX];
    if (prom && *prom) {
        if (llm_out_target(prom, target, sizeof target, NULL, st))
            return llm_err_prefix(st, "prom file");
        prom = target;
        /* its folder must take the file now, not fail at every step */
        char dir[PATH_MAX];
        llm_dir_of(target, dir, sizeof dir);
        if (access(dir, W_OK | X_OK))
            return llm_err(st, LLM_EIO, "prom file '%s': cannot write in '%s': %s", target, dir,
                           strerror(errno));
    }
    llm_metrics *m = calloc(1, sizeof *m);
    if (!m)
        return llm_err(st, LLM_ENOMEM, "out of memory");
    if (!path || !*path || !strcmp(path, "-")) {
        m->f = stdout;
    } else {
        m->f = fopen(path, "a");
        if (!m->f) {
            free(m);
            return llm_err(st, LLM_EIO, "cannot open metrics file '%s': %s", path,
                           strerror(errno));
        }
        m->own = 1;
    }
    m->path = strdup(path && *path ? path : "-");
    m->prom = prom && *prom ? strdup(prom) : NULL;
    m->progress = progress;
    m->val_loss = NAN;
    if (!m->path || (prom && *prom && !m->prom)) {
        llm_metrics_close(m);
        return llm_err(st, LLM_ENOMEM, "out of memory");
    }
    *out = m;
    return 0;
}

void llm_metrics_progress_clear(llm_metrics *m)
{
    if (m && m->drawn) {
        fputs("\r\033[K", stderr);
        m->drawn = 0;
    }
}

void llm_metrics_close(llm_metrics *m)
{
    if (!m)
        return;
    if (m->drawn)
        fputc('\n', stderr);
    if (m->own)
        fclose(m->f);
    else
        fflush(m->f);
    free(m->path);
    free(m->prom);
    free(m);
}

static int finish_line(llm_metrics *m, llm_status *st)
{
    fputc('\n', m->f);
    if (fflush(m->f) || ferror(m->f)) {
        int e = errno;
        clearerr(m->f);
        if (!m->own && e == EPIPE)
            return llm_err(st, LLM_EINTR, "stdout closed");
        return llm_err(st, LLM_EIO, "cannot write metrics to '%s': %s", m->path, strerror(e));
    }
    return 0;
}

static void prom_row(FILE *f, const char *name, const char *type, const char *help, double v)
{
    fprintf(f, "# HELP %s %s\n# TYPE %s %s\n%s ", name, help, name, type, name);
    if (isfinite(v))
        fprintf(f, "%.17g\n", v);
    else
        fprintf(f, "%s\n", isnan(v) ? "NaN" : v > 0 ? "+Inf" : "-Inf");
}

/* Write the textfile-collector file atomically: readers never see half a file. */
static int write_prom(llm_metrics *m, llm_status *st)
{
    if (!m->prom)
        return 0;
    char *text = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&text, &len);
    if (!f)
        return llm_err(st, LLM_ENOMEM, "out of memory");
    const llm_step_metrics *s = &m->last;
    struct { const char *name, *type, *help; double v; int ok; } rows[] = {
        {"llmkit_train_step", "counter", "Optimizer steps completed.", (double)s->step, m->have_last},
        {"llmkit_train_max_steps", "gauge", "Optimizer steps planned.", (double)s->max_steps, m->have_last},
        {"llmkit_train_loss", "gauge", "Training loss of the last step.", s->loss, m->have_last},
        {"llmkit_train_lr", "gauge", "Learning rate of the last step.", s->lr, m->have_last},
        {"llmkit_train_grad_norm", "gauge", "Gradient norm before clipping.", s->grad_norm, m->have_last},
        {"llmkit_train_tokens_per_second", "gauge", "Training throughput.", s->tokens_per_s, m->have_last},
        {"llmkit_train_step_seconds", "gauge", "Duration of the last step.", s->ms / 1000.0, m->have_last},
        {"llmkit_train_mfu", "gauge", "Model FLOPs utilisation estimate.", s->mfu,
         m->have_last && isfinite(s->mfu)},
        {"llmkit_train_rss_bytes", "gauge", "Peak resident set size.", s->rss_mb * 1048576.0, m->have_last},
        {"llmkit_train_skipped_total", "counter", "Non-finite steps skipped.", (double)s->skipped, m->have_last},
        {"llmkit_train_val_loss", "gauge", "Validation loss of the last eval.", m->val_loss, m->have_val},
        /* mixed precision (fp16) */
        {"llmkit_train_loss_scale", "gauge", "fp16 loss scale of the last step.", s->loss_scale,
         m->have_last && s->loss_scale > 0},
    };
    for (size_t i = 0; i < sizeof rows / sizeof *rows; i++)
        if (rows[i].ok)
            prom_row(f, rows[i].name, rows[i].type, rows[i].help, rows[i].v);
    /* device gauges: only those the backend reported */
    struct { const char *name, *help; double v; } dev[] = {
        {"llmkit_train_gpu_memory_used_bytes", "Device memory in use (whole device).", s->gpu_mem_mb * 1048576.0},
        {"llmkit_train_gpu_memory_peak_bytes", "Most device memory the backend has held.", s->gpu_mem_peak_mb * 1048576.0},
        {"llmkit_train_gpu_utilization_ratio", "GPU utilisation over the driver's last sample period.", s->gpu_util / 100.0},
        {"llmkit_train_gpu_temperature_celsius", "GPU temperature.", s->gpu_temp_c},
        {"llmkit_train_gpu_power_watts", "Board power draw.", s->gpu_power_w},
    };
    for (size_t i = 0; i < sizeof dev / sizeof *dev; i++)
        if (m->have_last && dev[i].v >= 0)
            prom_row(f, dev[i].name, "gauge", dev[i].help, dev[i].v);
    int bad = ferror(f);
    bad |= fclose(f) != 0;
    if (bad) {
        free(text);
        return llm_err(st, LLM_ENOMEM, "out of memory");
    }
    /* rewritten every step: atomic (a collector never reads half a file), not synced */
    int rc = llm_afile_write(m->prom, LLM_AFILE_NODEV | LLM_AFILE_NOSYNC, text, len, st);
    free(text);
    return rc;
}

static void draw_progress(llm_metrics *m)
{
    const llm_step_metrics *s = &m->last;
    fprintf(stderr, "\r\033[Kstep %lld/%lld  loss %.4f  lr %.3g  %.0f tok/s  %.1f ms/step",
            (long long)s->step, (long long)s->max_steps, s->loss, s->lr, s->tokens_per_s, s->ms);
    if (m->have_val)
        fprintf(stderr, "  val %.4f", m->val_loss);
    fflush(stderr);
    m->drawn = 1;
}

int llm_metrics_step(llm_metrics *m, const llm_step_metrics *s, llm_status *st)
{
    llm_json j;
    llm_json_init(&j, m->f, 0);
    llm_json_obj_begin(&j);
    llm_json_kint(&j, "step", s->step);
    llm_json_knum(&j, "loss", s->loss);
    llm_json_knum(&j, "lr", s->lr);
    llm_json_knum(&j, "grad_norm", s->grad_norm);
    llm_json_knum(&j, "tokens_per_s", round(s->tokens_per_s * 10) / 10);
    llm_json_knum(&j, "ms", round(s->ms * 1000) / 1000);
    if (isfinite(s->mfu))   /* NaN: no peak known for the device */
        llm_json_knum(&j, "mfu", round(s->mfu * 1e6) / 1e6);
    llm_json_knum(&j, "rss_mb", round(s->rss_mb * 10) / 10);
    llm_json_kint(&j, "skipped", s->skipped);
    llm_json_knum(&j, "data_ms", round(s->data_ms * 1000) / 1000);
    /* mixed precision (fp16) */
    if (s->loss_scale > 0)
        llm_json_knum(&j, "loss_scale", s->loss_scale);
    /* device health: the fields the backend could read (a CPU run has none) */
    struct { const char *k; double v, scale; } dev[] = {
        {"gpu_mem_mb", s->gpu_mem_mb, 10}, {"gpu_mem_peak_mb", s->gpu_mem_peak_mb, 10},
        {"gpu_util", s->gpu_util, 1}, {"gpu_temp_c", s->gpu_temp_c, 1},
        {"gpu_power_w", s->gpu_power_w, 10},
    };
    for (size_t i = 0; i < sizeof dev / sizeof *dev; i++)
        if (dev[i].v >= 0)
            llm_json_knum(&j, dev[i].k, round(dev[i].v * dev[i].scale) / dev[i].scale);
    llm_json_obj_end(&j);
    m->last = *s;
    m->have_last = 1;
    int rc = finish_line(m, st);
    if (m->progress)
        draw_progress(m);
    if (!rc)
        rc = write_prom(m, st);
    return rc;
}

int llm_metrics_eval(llm_metrics *m, int64_t step, double val_loss, llm_status *st)
{
    llm_json j;
    llm_json_init(&j, m->f, 0);
    llm_json_obj_begin(&j);
    llm_json_kint(&j, "step", step);
    llm_json_knum(&j, "val_loss", val_loss);
    llm_json_obj_end(&j);
    m->val_loss = val_loss;
    m->have_val = 1;
    int rc = finish_line(m, st);
    if (m->progress && m->have_last)
        draw_progress(m);
    if (!rc)
        rc = write_prom(m, st);
    return rc;
}

int llm_metrics_loss_scale(llm_metrics *m, int64_t step, double from, double to,
                           const char *reason, llm_status *st)
{
    llm_json j;
    llm_json_init(&j, m->f, 0);
    llm_json_obj_begin(&j);
    llm_json_kint(&j, "step", step);
    llm_json_kstr(&j, "event", "loss_scale");
    llm_json_knum(&j, "from", from);
    llm_json_knum(&j, "to", to);
    llm_json_kstr(&j, "reason", reason);
    llm_json_obj_end(&j);
    int rc = finish_line(m, st);
    if (m->progress && m->have_last)
        draw_progress(m);
    return rc;
}

double llm_peak_rss_mb(void)
{
    struct rusage ru;
    if (getrusage(RUSAGE_SELF, &ru))
        return 0;
    return (double)ru.ru_maxrss / 1024.0;  /* Linux reports KiB */
}
