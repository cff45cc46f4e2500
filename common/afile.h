/* afile.h — an output file that appears whole or not at all.
 *
 * Every program's outputs go through this: checkpoints, token files, llm.c, safetensors
 * and GGUF exports, the Prometheus file, the dist-init id.  A regular file is written to
 * a hidden temp file beside it (.NAME.tmp.PID.NONCE; beside the file a symbolic link
 * names: the link stays), then
 * synced, renamed over it and its directory synced, so a reader sees the old file or the
 * new one and a failed run leaves nothing behind.  Standard output, a character device or
 * a FIFO (/dev/null, a terminal, a named pipe) is written in place: a rename would
 * replace the node with a file (llm_out_target).
 *
 * Test hook: with LLM_FAULT_WRITE_LIMIT=N in the environment, writing past byte N of a
 * temp file fails with ENOSPC, as on a full disk.
 */
#ifndef LLM_AFILE_H
#define LLM_AFILE_H

#include <stddef.h>
#include <stdint.h>

#include "common/status.h"

enum {
    LLM_AFILE_STDOUT = 1,   /* path "-" is standard output */
    LLM_AFILE_NODEV = 2,    /* refuse a device or FIFO (a file replaced again and again) */
    LLM_AFILE_NOSYNC = 4,   /* no fsync: a small file rewritten every few seconds */
    LLM_AFILE_MKDIRS = 8,   /* make the directories above path first */
};

typedef struct {
    int fd;
    int in_place;        /* stdout, a device or a FIFO: no temp file, no rename */
    int is_stdout;       /* "-" with LLM_AFILE_STDOUT */
    int finished;        /* llm_afile_finish done: closed, to be published */
    unsigned flags;
    char *path;          /* the file written (a link's target), for messages */
    char *tmp;           /* the temp file beside it, or NULL */
    unsigned char *buf;  /* small writes gather here */
    size_t nbuf;
    uint64_t written;    /* bytes put so far */
    uint64_t fault_at;   /* LLM_FAULT_WRITE_LIMIT, or UINT64_MAX */
} llm_afile;

/* Open path for writing.  LLM_EUSAGE for a device refused by NODEV; LLM_EIO when the
 * directory is not writable, path is a directory, socket or block device, or a device
 * does not open; LLM_ENOMEM.  On error a is left closed (abort is harmless). */
int llm_afile_open(llm_afile *a, const char *path, unsigned flags, llm_status *st);

/* LLM_FAULT_WRITE_LIMIT checked as llm_afile_open reads it: LLM_OK, or LLM_EUSAGE naming
 * it.  For programs that make something (a folder) before their first output file opens,
 * so that a value refused leaves nothing behind. */
int llm_afile_env_check(llm_status *st);

/* Append n bytes (n may be 0).  LLM_EIO naming path and the reason; errno is the
 * write's (EPIPE for a reader that went away). */
int llm_afile_put(llm_afile *a, const void *p, uint64_t n, llm_status *st);

/* Rewrite n bytes at offset off of what was put (off + n <= bytes put): a header whose
 * counts are known only at the end.  Only a temp file can (llm_afile_seekable). */
int llm_afile_seekable(const llm_afile *a);
int llm_afile_patch(llm_afile *a, uint64_t off, const void *p, size_t n, llm_status *st);

/* Cut what was put to its first n bytes (n <= bytes put; a temp file only). */
int llm_afile_truncate(llm_afile *a, uint64_t n, llm_status *st);

/* Read back n bytes at offset off of what was put (a temp file only). */
int llm_afile_read(llm_afile *a, uint64_t off, void *p, size_t n, llm_status *st);

/* Finish: flush, then for a temp file fsync, rename over path and fsync the directory
 * (no syncs with NOSYNC).  On error the temp file is removed.  Frees a either way. */
int llm_afile_commit(llm_afile *a, llm_status *st);

/* Commit in steps, for outputs that must change together (llm-tokenize's train/val
 * pair): llm_afile_finish flushes, syncs and closes the temp file, which stays hidden
 * (on error it is removed and a freed); llm_afile_publish then renames it over path (on
 * error the temp file is removed and the old file stays) and frees a either way, without
 * syncing the directory; llm_afile_sync_dir(path) makes the renames in path's directory
 * durable.  A finished a may still be aborted instead of published.  commit is the three
 * in a row (of a finished a: the last two).  Test hook: with LLM_FAULT_RENAME=SUFFIX, publishing over a path that ends in
 * SUFFIX fails (EIO) as a rename can on a full or failing disk. */
int llm_afile_finish(llm_afile *a, llm_status *st);
int llm_afile_publish(llm_afile *a, llm_status *st);
int llm_afile_sync_dir(const char *path, llm_status *st);

/* Give up: remove the temp file (the old file at path stays) and free a. */
void llm_afile_abort(llm_afile *a);

/* A whole output at once: open, put n bytes, commit (abort on error). */
int llm_afile_write(const char *path, unsigned flags, const void *p, uint64_t n, llm_status *st);

/* For a program that writes for a long time (llm-tokenize, llm-quantize, llm-shard):
 * SIGINT, SIGTERM and SIGHUP remove the temp files being written, then end the process as
 * the signal would have (a signal the process ignores stays ignored). */
void llm_afile_remove_on_signal(void);

/* Around a few renames that must not be cut apart (llm-tokenize's train/val pair): a
 * signal of remove_on_signal's that comes after hold waits until release, which then
 * removes the temp files left and ends the process as the signal would have. */
void llm_afile_hold_signals(void);
void llm_afile_release_signals(void);

#endif
