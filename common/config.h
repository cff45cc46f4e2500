/* config.h — llm-train's configuration: a schema with defaults, types and ranges.
 *
 * A config is YAML (parsed with tree.h) with four sections, model:, data:, train: and
 * output:, each a mapping of the keys in the schema below (man/man1/llm-train.1 lists
 * them with their defaults).  Every key has a default except data.train.  Loading is
 * strict: an unknown section or key, a wrong type, an out-of-range value or a duplicate
 * key is an error naming the file, the line and the key, e.g.
 *     run.yaml:31: unknown key 'train.lerning_rate'
 * Overrides (`--set train.lr=3e-4`) go through the same checks; their messages name the
 * override instead of a file line.
 */
#ifndef LLM_CONFIG_H
#define LLM_CONFIG_H

#include <stdint.h>
#include <stdio.h>

#include "common/status.h"
#include "common/tree.h"

#define LLM_CFG_PATH_MAX 4096
#define LLM_CFG_WORD_MAX 32

typedef struct {
    /* model: (the .llmk model section's schema, plus init_from) */
    char arch[LLM_CFG_WORD_MAX];
    int n_layer, n_head, n_embd, vocab_size, max_seq_len;
    int padded_vocab_size;             /* 0: derived (vocab_size rounded up to 128) */
    char init_from[LLM_CFG_PATH_MAX];  /* "" or a .llmk file whose weights start the run */

    /* data: */
    char train_data[LLM_CFG_PATH_MAX]; /* token file or glob (required) */
    char val_data[LLM_CFG_PATH_MAX];   /* "" = no evaluation */
    char tokenizer[LLM_CFG_PATH_MAX];  /* gpt2 | byte | FILE (.llmk or BPE directory) */
    char sampling[LLM_CFG_WORD_MAX];   /* random | sequential */
    int prefetch;                      /* bool */

    /* train: */
    int batch_size, seq_len;
    int64_t total_batch_tokens;        /* 0: batch_size * seq_len (no accumulation) */
    int64_t max_steps;
    double lr, min_lr;
    int64_t warmup_steps;
    char schedule[LLM_CFG_WORD_MAX];   /* cosine | linear | constant | wsd */
    double decay_fraction;             /* wsd: share of max_steps spent decaying */
    double weight_decay, beta1, beta2, eps, grad_clip;
    int64_t seed;
    int64_t eval_every, eval_batches, save_every;
    int keep_last;
    int64_t exit_after;
    int max_skips;                     /* non-finite steps in a row that end the run */
    int sample_tokens;                 /* > 0: print a sample of this many tokens per eval */
    double peak_flops;                 /* for MFU; 0: an estimate for the device */
    char device[LLM_CFG_WORD_MAX];
    int threads;
    int zero;                          /* ZeRO stage (0 or 1) for multi-rank runs */
    double bucket_mb;                  /* ZeRO-0: overlapped all-reduce buckets, MiB (0: off) */
    char precision[LLM_CFG_WORD_MAX];  /* fp32 | bf16 | fp16: precision of the GEMM operands */
    double loss_scale;                 /* fp16: the initial loss scale, [1, 2^24] */
    int64_t loss_scale_window;         /* fp16: clean steps before the loss scale doubles */
    char recompute[LLM_CFG_WORD_MAX];  /* none | selective | full (model.h) */

    /* output: */
    char out_dir[LLM_CFG_PATH_MAX];
    char metrics[LLM_CFG_PATH_MAX];    /* "" or "-": stdout */
    char prom[LLM_CFG_PATH_MAX];       /* "" : none */

    /* bookkeeping, for messages: which keys were given explicitly (index into the
     * schema: 1 by a file, 2 by an override), the line of each, and the file's name */
    unsigned char given[64];
    int line[64];
    char source[LLM_CFG_PATH_MAX];
} llm_train_config;

/* Fill cfg with every default. */
void llm_config_defaults(llm_train_config *cfg);

/* Apply the YAML document buf[0..len) (named fname in messages) on top of cfg.
 * Errors: LLM_EDATA "FILE:LINE: ..." naming the key. */
int llm_config_apply_yaml(llm_train_config *cfg, const char *buf, size_t len, const char *fname,
                          llm_status *st);

/* Read path and apply it (LLM_ENOINPUT when it cannot be read). */
int llm_config_load(llm_train_config *cfg, const char *path, llm_status *st);

/* Apply one override "section.key=value".  Errors: LLM_EUSAGE naming the override. */
int llm_config_set(llm_train_config *cfg, const char *assignment, llm_status *st);
/* The same for a program option that stands for key (value NULL: not given, nothing
 * done); errors name the option: "--precision 'fp8': ...". */
int llm_config_set_opt(llm_train_config *cfg, const char *opt, const char *key,
                       const char *value, llm_status *st);

/* Cross-key checks once everything is applied (data.train given, seq_len <= max_seq_len,
 * n_embd % n_head == 0, total_batch_tokens a multiple of batch_size*seq_len, min_lr <= lr,
 * warmup < max_steps, ...).  Errors: LLM_EDATA naming the keys. */
int llm_config_validate(const llm_train_config *cfg, llm_status *st);

/* Gradient accumulation steps implied by total_batch_tokens. */
int64_t llm_config_accum_steps(const llm_train_config *cfg);

/* The whole resolved config as a tree (sections in schema order); NULL when out of
 * memory.  Caller frees. */
llm_node *llm_config_to_node(const llm_train_config *cfg);

/* Print the resolved config as YAML to f.  Returns 0, or an LLM_* code. */
int llm_config_print(const llm_train_config *cfg, FILE *f, llm_status *st);

/* Schema access for documentation and tests: the i-th key ("train.lr"), its default as
 * text and a one-line description; returns NULL past the end. */
const char *llm_config_key(int i, const char **deflt, const char **help);

/* The inclusive range of a numeric key ("train.batch_size") into *lo and *hi: 1, or 0
 * when the key is unknown or not a number.  For readers of a saved config (a
 * checkpoint's train.config) that hold it to the bounds the config would. */
int llm_config_range(const char *key, double *lo, double *hi);

/* 1 when the key ("model.n_layer") was set explicitly by the file or an override. */
int llm_config_given(const llm_train_config *cfg, const char *key);

#endif
