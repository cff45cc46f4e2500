/* data.h — training batches from token files (llm.c .bin format, see tokfile.h).
 *
 * A loader reads one file or many (a glob pattern, files in sorted order) and hands out
 * batches of B rows of T+1 consecutive tokens, split into inputs (B,T) and targets (B,T)
 * (targets are the inputs shifted by one).  A window never crosses a file boundary.
 *   random      each row starts at a uniformly drawn position among all windows of all
 *               files (a seeded splitmix64 generator; the same seed gives the same batches
 *               on every machine)
 *   sequential  rows follow each other through the files with a stride of T; at the end
 *               of the last file the loader wraps to the first and counts an epoch
 * With prefetch, a thread prepares the next batch while the caller computes.  The data
 * position (llm_data_tell) is that of the batches handed out so far, not of the thread's
 * read-ahead, so a checkpoint taken between steps resumes with exactly the next batch.
 */
#ifndef LLM_DATA_H
#define LLM_DATA_H

#include <stdint.h>

#include "common/status.h"
#include "common/tree.h"

typedef struct {
    uint64_t rng;      /* random: generator state */
    uint64_t file;     /* sequential: file index of the next window */
    uint64_t offset;   /* sequential: start of the next window in that file */
    uint64_t epoch;    /* sequential: completed passes over all files */
    uint64_t batches;  /* batches handed out so far */
    /* which files it is a position in (tell fills them; 0 when unknown, as in a position
     * saved before they were recorded): their count, their tokens, and a 64-bit FNV-1a
     * hash of each one's base name and token count in glob order.  Seek ignores them:
     * llm_data_files_differ compares them with the files open. */
    uint64_t files, tokens, files_hash;
} llm_data_pos;

typedef struct {
    const char *pattern;  /* a path or a glob ("data/shard_*.bin") */
    int B, T;
    int64_t vocab;        /* > 0: ids are checked to be below it as windows are read
                           * (files are never scanned whole: opening stays fast) */
    int sequential;       /* 0: random windows, 1: sequential */
    uint64_t seed;        /* random: initial generator state (mixed) */
    int prefetch;         /* 1: prepare the next batch on a thread */
} llm_data_opts;

typedef struct llm_data llm_data;

/* Open every file matching o->pattern and validate its header and size.  Errors:
 * LLM_ENOINPUT (no file matches or one is unreadable), LLM_EDATA (a bad token file, or
 * no file holds T+1 tokens), LLM_ENOMEM, LLM_ESOFTWARE (thread creation). */
int  llm_data_open(llm_data **out, const llm_data_opts *o, llm_status *st);
void llm_data_free(llm_data *d);

/* The next batch: inputs and targets, each B*T int32 (caller-owned).  Errors: LLM_EDATA
 * when a window holds an id >= vocab (the file and position are named); the loader
 * stays at the bad batch. */
int llm_data_next(llm_data *d, int32_t *inputs, int32_t *targets, llm_status *st);

/* Position after the batches handed out so far; seek restarts from p (discarding any
 * read-ahead).  Seek errors: LLM_EDATA when p does not fit these files. */
llm_data_pos llm_data_tell(const llm_data *d);
int llm_data_seek(llm_data *d, const llm_data_pos *p, llm_status *st);

/* When p records its files (p->files > 0) and d's differ from them (a file added,
 * removed, renamed, or of another length): writes what differs into why (size n:
 * "3 file(s) of 120000 tokens now, 2 of 80000 then") and returns 1; else 0. */
int llm_data_files_differ(const llm_data *d, const llm_data_pos *p, char *why, size_t n);

int llm_data_nfiles(const llm_data *d);
uint64_t llm_data_ntok(const llm_data *d);          /* tokens over all files */
/* Seconds the caller spent inside llm_data_next (waiting + copying), in total. */
double llm_data_wait_seconds(const llm_data *d);

/* A position as a mapping {rng, file, offset, epoch, batches, files, tokens, files_hash}
 * (u64 as decimal strings, files_hash as 16 hex digits) and back; parse takes a mapping
 * without the last three (files = tokens = files_hash = 0) too.  from_node errors:
 * LLM_EDATA naming the key. */
llm_node *llm_data_pos_node(const llm_data_pos *p);
int llm_data_pos_parse(const llm_node *map, llm_data_pos *p, llm_status *st);

#endif
