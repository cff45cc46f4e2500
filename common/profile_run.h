/* profile_run.h — llm-profile's work: run training steps, a prefill or decode tokens of
 * a model through the profiling backend, and report per-op time and memory (predicted
 * by the planner and measured) as a table or one JSON document, plus a Chrome trace. */
#ifndef LLM_PROFILE_RUN_H
#define LLM_PROFILE_RUN_H

#include <stdio.h>

#include "common/config.h"
#include "common/log.h"
#include "common/model.h"
#include "common/plan.h"
#include "common/profile.h"
#include "common/status.h"

typedef enum { LLM_PROFILE_TRAIN, LLM_PROFILE_PREFILL, LLM_PROFILE_DECODE } llm_profile_mode;

typedef struct {
    const char *model_path;          /* a .llmk model, or NULL with config */
    const llm_model_config *config;  /* model shape when there is no model file (random init) */
    const char *device;              /* "cpu", "cpu-ref", "cuda" */
    int threads;
    int B, T;                        /* batch and sequence length (0: defaults 4 and maxT) */
    llm_profile_mode mode;
    int steps;                       /* train: steps; prefill: repetitions; decode: tokens
                                        (0: defaults 3, 3, T - T/2) */
    int warmup;                      /* untimed steps before (train, prefill) */
    int per_layer;                   /* 1: one row per layer; 0: layers folded */
    int json;
    const char *trace_path;          /* NULL: no trace */
    llm_profile_peaks peaks;         /* <= 0 fields: unknown */
    unsigned long long seed;
    llm_precision precision;         /* train: GEMM operand and activation precision, as llm-train --precision
                                        (fp32 master weights + a 16-bit copy for bf16/fp16) */
    double loss_scale;               /* fp16: initial dynamic loss scale (<= 0: 65536) */
    long long loss_scale_window;     /* fp16: clean steps before it doubles (<= 0: 1000) */
} llm_profile_run_opts;

/* Run and write the report to out.  Errors: LLM_ENOINPUT/LLM_EDATA (model file),
 * LLM_EUSAGE (B/T/mode out of range, decode without a model file, a precision other
 * than fp32 outside train mode), LLM_ENODEV (also: a backend without the bf16/fp16 ops),
 * LLM_ENOMEM, LLM_EIO (writing). */
int llm_profile_run(const llm_profile_run_opts *o, FILE *out, const llm_log *lg, llm_status *st);

/* Machine peaks for the compute/memory verdict: from an llm-bench JSON file (best f32
 * gemm rate and best mem triad rate) when path names one; else measured (~0.2 s: FMA
 * loop and a 32 MiB triad) and, when path is not NULL, saved there as llm-bench JSON.
 * Fields given > 0 in *pk are kept. */
int llm_profile_peaks_get(llm_profile_peaks *pk, const char *path, int threads, llm_status *st);

/* The same for a device: "cpu"/"cpu-ref" as above; "cuda" reads the file's cuda rows, or
 * measures a 2048^3 cuBLASLt GEMM (f32, or tf32 when LLM_CUDA_TF32=1) and a 256 MiB
 * triad on the GPU (LLM_ENODEV without one).  A file without rows of the device gives
 * its best rows of any device. */
int llm_profile_peaks_get_dev(llm_profile_peaks *pk, const char *path, const char *device, int threads,
                              llm_status *st);

/* Peak resident set size of this process in bytes (getrusage). */
double llm_profile_peak_rss(void);

/* Model config from an llm-train YAML config (model: section; padded vocab derived). */
int llm_profile_config_model(const llm_train_config *tc, llm_model_config *mc, llm_status *st);

#endif
