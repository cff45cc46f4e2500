/* fuzz_util.h — helpers shared by the libFuzzer targets (tests/fuzz/fuzz_*.c): a private
 * scratch directory per process, files written into it, and input splitting. */
#ifndef LLM_FUZZ_UTIL_H
#define LLM_FUZZ_UTIL_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* The process's scratch directory (created on first use, under $TMPDIR or /tmp). */
static const char *fz_dir(void)
{
    static char dir[256];
    if (!dir[0]) {
        const char *t = getenv("TMPDIR");
        snprintf(dir, sizeof dir, "%s/llmfuzz.XXXXXX", t && *t ? t : "/tmp");
        if (!mkdtemp(dir))
            abort();
    }
    return dir;
}

/* Write n bytes to dir/name; the path is returned in a static buffer per slot. */
static const char *fz_write(const char *name, const void *p, size_t n)
{
    static char paths[8][512];
    static int slot;
    char *path = paths[slot++ & 7];
    snprintf(path, 512, "%s/%s", fz_dir(), name);
    /* a new file, not the last one cut to 0 bytes: ext4 starts writing a truncated
     * file back to disk when it is closed (auto_da_alloc), at every input */
    unlink(path);
    FILE *f = fopen(path, "wb");
    if (!f || (n && fwrite(p, 1, n, f) != n) || fclose(f))
        abort();
    return path;
}

static void fz_rm(const char *name)
{
    char path[512];
    snprintf(path, sizeof path, "%s/%s", fz_dir(), name);
    unlink(path);
}

/* Split data at the separator "\n%%%%\n" into at most max parts; returns the count. */
#define FZ_SEP "\n%%%%\n"
static int fz_split(const uint8_t *data, size_t size, const uint8_t **p, size_t *n, int max)
{
    int k = 0;
    size_t sl = strlen(FZ_SEP);
    const uint8_t *cur = data, *end = data + size;
    while (k < max - 1) {
        const uint8_t *s = memmem(cur, (size_t)(end - cur), FZ_SEP, sl);
        if (!s)
            break;
        p[k] = cur, n[k] = (size_t)(s - cur), k++;
        cur = s + sl;
    }
    p[k] = cur, n[k] = (size_t)(end - cur), k++;
    return k;
}

#endif
