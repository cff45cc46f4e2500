/* metrics.h — training metrics: JSON lines, a Prometheus textfile, a progress line.
 *
 * Step lines:  {"step":N,"loss":..,"lr":..,"grad_norm":..,"tokens_per_s":..,"ms":..,
 *               "mfu":..,"rss_mb":..,"skipped":N,"data_ms":..}
 *              (+ "loss_scale":.. when training in fp16)
 *              then, for a GPU run, the device fields that are known (>= 0):
 *               "gpu_mem_mb","gpu_mem_peak_mb","gpu_util","gpu_temp_c","gpu_power_w"
 * Eval lines:  {"step":N,"val_loss":..}
 * Events:      {"step":N,"event":"loss_scale","from":..,"to":..,"reason":"overflow"|"grow"}
 * Numbers are written in the shortest form that reads back to the same double, so the
 * float loss of a step prints identically whenever it is computed identically.  Lines go
 * to stdout or a file (appended), one write + flush per line.  The Prometheus file (if
 * any) is rewritten atomically (temp + rename) after every step and eval.  The progress
 * line is drawn on stderr only when progress is set (the caller passes isatty(2)).
 */
#ifndef LLM_METRICS_H
#define LLM_METRICS_H

#include <stdint.h>

#include "common/status.h"

typedef struct {
    int64_t step, max_steps;
    double loss, lr, grad_norm;
    double tokens_per_s, ms, mfu, rss_mb;
    int64_t skipped;          /* non-finite steps skipped so far in this run */
    double data_ms;           /* time the step waited for data */
    /* mixed precision (fp16) */
    double loss_scale;        /* > 0: the loss scale the step ran with ("loss_scale") */
    /* Device health (llm_backend.device_stats), each printed only when >= 0: a CPU run,
     * or a field the driver cannot tell, sets -1.  Device memory in use and the most the
     * backend has held (MiB), utilisation (%), temperature (C), board power (W). */
    double gpu_mem_mb, gpu_mem_peak_mb, gpu_util, gpu_temp_c, gpu_power_w;
} llm_step_metrics;

typedef struct llm_metrics llm_metrics;

/* path NULL, "" or "-": stdout.  prom NULL or "": none.  Errors: LLM_EIO when the file
 * cannot be opened. */
int  llm_metrics_open(llm_metrics **out, const char *path, const char *prom, int progress,
                      llm_status *st);
/* Flushes, ends the progress line, closes the file.  */
void llm_metrics_close(llm_metrics *m);

/* Write one step / eval line.  Errors: LLM_EIO (message names the file); a closed
 * stdout gives LLM_EINTR so the caller can stop quietly. */
int llm_metrics_step(llm_metrics *m, const llm_step_metrics *s, llm_status *st);
int llm_metrics_eval(llm_metrics *m, int64_t step, double val_loss, llm_status *st);

/* A loss-scale change after step (fp16 training):
 *   {"step":N,"event":"loss_scale","from":X,"to":Y,"reason":"overflow"|"grow"}
 * Errors as llm_metrics_step. */
int llm_metrics_loss_scale(llm_metrics *m, int64_t step, double from, double to,
                           const char *reason, llm_status *st);

/* Clear the progress line (before a log line is printed on stderr). */
void llm_metrics_progress_clear(llm_metrics *m);

/* Peak resident set size of this process in MiB. */
double llm_peak_rss_mb(void);

#endif
