/* tokout.h — where llm-tokenize's encoded ids go, as they come: counted only, decimal
 * text, one token file, a train/val pair split at the end, or shards of a fixed size.
 * Every file appears whole or not at all (llm_afile); a failed run leaves none of the
 * files it was making. */
#ifndef LLM_TOKOUT_H
#define LLM_TOKOUT_H

#include <stddef.h>
#include <stdint.h>

#include "common/status.h"
#include "common/tokenizer.h"

typedef enum {
    LLM_TOKOUT_COUNT,     /* nothing written: the count at the end */
    LLM_TOKOUT_TEXT,      /* path: ids as decimal text, space separated, one newline */
    LLM_TOKOUT_FILE,      /* path: one token file ("-" stdout) */
    LLM_TOKOUT_SPLIT,     /* path_train.bin + path_val.bin, the last val_fraction to val */
    LLM_TOKOUT_SHARDS,    /* path_000000.bin, path_000001.bin, ...: shard_tokens each */
} llm_tokout_kind;

typedef struct {
    llm_tokout_kind kind;
    const char *path;         /* file, or prefix for SPLIT and SHARDS */
    double val_fraction;      /* SPLIT: (0, 1) */
    uint64_t shard_tokens;    /* SHARDS: 1 .. 2^32-1 */
} llm_tokout_spec;

typedef struct llm_tokout llm_tokout;

/* SHARDS: the name of shard k (from 0) of prefix into buf (n bytes): PREFIX_000000.bin.
 * Always 6 digits, so that a glob (which sorts by name) reads the shards in order: a
 * shard k of LLM_TOKOUT_MAX_SHARDS or more is LLM_EUSAGE, asking for a larger
 * --shard-tokens (the run then fails and removes its shards), as is a name over n. */
#define LLM_TOKOUT_MAX_SHARDS 1000000u
int  llm_tokout_shard_name(char *buf, size_t n, const char *prefix, uint64_t k,
                           uint64_t shard_tokens, llm_status *st);

/* Open the output: for SHARDS, LLM_EUSAGE when a shard of that prefix exists already (an
 * earlier run's would be read with the new ones by a glob). */
int  llm_tokout_open(llm_tokout **out, const llm_tokout_spec *spec, llm_status *st);
/* An llm_ids_fn: take the next n ids. */
int  llm_tokout_put(void *tokout, const uint32_t *ids, size_t n, llm_status *st);
/* Finish after the last id: SPLIT chooses its cut from e's document starts (the one
 * nearest the wanted cut; e needs llm_encoder_keep_starts, else the cut is at the token).  *summary gets a line for the log (files and token counts).
 * Frees o either way. */
int  llm_tokout_commit(llm_tokout *o, const llm_encoder *e, char *summary, size_t len,
                       llm_status *st);
/* Give up: remove what this run made; frees o. */
void llm_tokout_abort(llm_tokout *o);

#endif
