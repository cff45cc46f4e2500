/* tokfile.c — llm.c-compatible token files: validated reads, atomic and streamed writes. */
#include "common/tokfile.h"

#include <errno.h>
#include <limits.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

static uint32_t rd16(const unsigned char *p)
{
    return (uint32_t)p[0] | (uint32_t)p[1] << 8;
}

static uint32_t rd32(const unsigned char *p)
{
    return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}

static void wr32(unsigned char *p, uint32_t v)
{
    p[0] = (unsigned char)v;
    p[1] = (unsigned char)(v >> 8);
    p[2] = (unsigned char)(v >> 16);
    p[3] = (unsigned char)(v >> 24);
}

/* The bytes a stream whose first n bytes are b may hold: the header's own count once the
 * header is in (one byte more, so that a longer stream shows as one), nothing more when
 * it is not a token file's header (validate names what is wrong), else unbounded. */
static uint64_t stream_limit(const unsigned char *b, size_t n)
{
    if (n < 12)
        return UINT64_MAX;
    uint32_t version = rd32(b + 4);
    if (rd32(b) != LLM_TOKFILE_MAGIC || (version != 1 && version != 2))
        return n;
    if (n < LLM_TOKFILE_HEADER_BYTES)
        return UINT64_MAX;
    return LLM_TOKFILE_HEADER_BYTES + (uint64_t)rd32(b + 8) * (version == 1 ? 2 : 4) + 1;
}

/* Read fd into a malloc'd buffer (pipes have no size to ask for), as much as its header
 * says it holds: /dev/zero or an endless pipe is refused by its header, not read to the
 * end of memory. */
static int slurp_fd(int fd, const char *name, void **out, size_t *len, llm_status *st)
{
    size_t cap = 1 << 16, n = 0;
    char *buf = malloc(cap);
    if (!buf)
        return llm_err(st, LLM_ENOMEM, "'%s': out of memory", name);
    uint64_t limit = UINT64_MAX;   /* fixed once the header decides it */
    for (;;) {
        if (limit == UINT64_MAX)
            limit = stream_limit((const unsigned char *)buf, n);
        if (n >= limit)
            break;
        if (n == cap) {
            if (cap > SIZE_MAX / 2) {
                free(buf);
                return llm_err(st, LLM_ENOMEM, "'%s': input too large", name);
            }
            char *nb = realloc(buf, cap * 2);
            if (!nb) {
                free(buf);
                return llm_err(st, LLM_ENOMEM, "'%s': out of memory", name);
            }
            buf = nb;
            cap *= 2;
        }
        size_t room = cap - n;
        if (limit - n < room)
            room = (size_t)(limit - n);
        ssize_t r = read(fd, buf + n, room);
        if (r < 0 && errno == EINTR)
            continue;
        if (r < 0) {
            int e = errno;
            free(buf);
            return llm_err(st, LLM_EIO, "cannot read '%s': %s", name, strerror(e));
        }
        if (r == 0)
            break;
        n += (size_t)r;
    }
    *out = buf;
    *len = n;
    return LLM_OK;
}

static int validate(llm_tokfile *tf, const char *name, int64_t vocab, llm_status *st)
{
    const unsigned char *p = tf->base;
    size_t len = tf->base_len;
    if (len < LLM_TOKFILE_HEADER_BYTES)
        return llm_err(st, LLM_EDATA, "'%s': not a token file (%zu bytes, shorter than the %d-byte header)",
                       name, len, LLM_TOKFILE_HEADER_BYTES);
    uint32_t magic = rd32(p), version = rd32(p + 4), ntok = rd32(p + 8);
    if (magic != LLM_TOKFILE_MAGIC)
        return llm_err(st, LLM_EDATA, "'%s': not a token file (bad magic %u, want %u)", name, magic,
                       LLM_TOKFILE_MAGIC);
    if (version != 1 && version != 2)
        return llm_err(st, LLM_EDATA, "'%s': unsupported token file version %u (want 1 or 2)", name,
                       version);
    uint64_t width = version == 1 ? 2 : 4;
    uint64_t want = LLM_TOKFILE_HEADER_BYTES + (uint64_t)ntok * width;
    if (want != len)
        return llm_err(st, LLM_EDATA,
                       "'%s': header says %u tokens (%llu bytes) but the file has %zu bytes", name,
                       ntok, (unsigned long long)want, len);
    tf->version = (int)version;
    tf->ntok = ntok;
    tf->ids = p + LLM_TOKFILE_HEADER_BYTES;
    if (vocab > 0) {
        for (uint64_t i = 0; i < tf->ntok; i++) {
            uint32_t id = llm_tokfile_at(tf, i);
            if (id >= (uint64_t)vocab)
                return llm_err(st, LLM_EDATA, "'%s': token %llu has id %u, out of range for vocabulary size %lld",
                               name, (unsigned long long)i, id, (long long)vocab);
        }
    }
    return LLM_OK;
}

int llm_tokfile_open(llm_tokfile *tf, const char *path, int64_t vocab, llm_status *st)
{
    memset(tf, 0, sizeof *tf);
    int rc;
    if (!strcmp(path, "-")) {
        rc = slurp_fd(0, "<stdin>", &tf->base, &tf->base_len, st);
        if (rc)
            return rc;
        rc = validate(tf, "<stdin>", vocab, st);
    } else {
        int fd = open(path, O_RDONLY | O_CLOEXEC);
        if (fd < 0)
            return llm_err(st, errno == ENOENT || errno == EACCES ? LLM_ENOINPUT : LLM_EIO,
                           "cannot open '%s': %s", path, strerror(errno));
        struct stat sb;
        if (fstat(fd, &sb) < 0) {
            int e = errno;
            close(fd);
            return llm_err(st, LLM_EIO, "cannot stat '%s': %s", path, strerror(e));
        }
        if (S_ISDIR(sb.st_mode)) {
            close(fd);
            return llm_err(st, LLM_ENOINPUT, "'%s' is a directory", path);
        }
        if (S_ISREG(sb.st_mode) && sb.st_size >= LLM_TOKFILE_HEADER_BYTES) {
            void *m = mmap(NULL, (size_t)sb.st_size, PROT_READ, MAP_PRIVATE, fd, 0);
            if (m == MAP_FAILED) {
                int e = errno;
                close(fd);
                return llm_err(st, LLM_EIO, "cannot map '%s': %s", path, strerror(e));
            }
            tf->base = m;
            tf->base_len = (size_t)sb.st_size;
            tf->mapped = 1;
            rc = LLM_OK;
        } else {
            rc = slurp_fd(fd, path, &tf->base, &tf->base_len, st);
        }
        close(fd);
        if (rc)
            return rc;
        rc = validate(tf, path, vocab, st);
    }
    if (rc)
        llm_tokfile_close(tf);
    return rc;
}

void llm_tokfile_close(llm_tokfile *tf)
{
    if (tf->base) {
        if (tf->mapped)
            munmap(tf->base, tf->base_len);
        else
            free(tf->base);
    }
    memset(tf, 0, sizeof *tf);
}

void llm_tokfile_read(const llm_tokfile *tf, uint64_t start, size_t n, int32_t *out)
{
    const unsigned char *p = (const unsigned char *)tf->ids;
    if (tf->version == 1) {
        p += start * 2;
        for (size_t i = 0; i < n; i++)
            out[i] = (int32_t)rd16(p + 2 * i);
    } else {
        p += start * 4;
        for (size_t i = 0; i < n; i++)
            out[i] = (int32_t)rd32(p + 4 * i);
    }
}

/* ---- writing ---- */

static void put_header(unsigned char *hdr, int version, uint64_t n)
{
    memset(hdr, 0, LLM_TOKFILE_HEADER_BYTES);
    wr32(hdr, LLM_TOKFILE_MAGIC);
    wr32(hdr + 4, (uint32_t)version);
    wr32(hdr + 8, (uint32_t)n);
}

int llm_tokfile_writer_open(llm_tokfile_writer *w, const char *path, int version, llm_status *st)
{
    memset(w, 0, sizeof *w);
    if (version < 0 || version > 2)
        return llm_err(st, LLM_EUSAGE, "'%s': token file version %d (want 1 or 2)", path, version);
    w->autov = version == 0;
    w->version = version ? version : 1;
    int rc = llm_afile_open(&w->a, path, LLM_AFILE_STDOUT, st);
    if (rc)
        return rc;
    w->open = 1;
    if (!llm_afile_seekable(&w->a))
        return LLM_OK;   /* a stream: the ids wait in memory until the count is known */
    unsigned char hdr[LLM_TOKFILE_HEADER_BYTES];   /* the count comes at commit */
    put_header(hdr, w->version, 0);
    if ((rc = llm_afile_put(&w->a, hdr, sizeof hdr, st)))
        llm_tokfile_writer_abort(w);
    return rc;
}

/* n ids in the file's width, little-endian: to the file, or into a stream's memory. */
static int put_ids(llm_tokfile_writer *w, const uint32_t *ids, size_t n, llm_status *st)
{
    size_t width = w->version == 1 ? 2 : 4;
    unsigned char buf[1 << 14];
    for (size_t at = 0; at < n;) {
        size_t k = n - at < sizeof buf / width ? n - at : sizeof buf / width;
        unsigned char *o = buf;
        if (!llm_afile_seekable(&w->a)) {
            if (w->mem_n + k * width > w->mem_cap) {
                size_t cap = w->mem_cap ? w->mem_cap : 1 << 16;
                while (cap < w->mem_n + k * width)
                    cap *= 2;
                unsigned char *m = realloc(w->mem, cap);
                if (!m)
                    return llm_err(st, LLM_ENOMEM, "out of memory (%llu ids for '%s')",
                                   (unsigned long long)(w->n + at + k), w->a.path);
                w->mem = m;
                w->mem_cap = cap;
            }
            o = w->mem + w->mem_n;
        }
        for (size_t i = 0; i < k; i++) {
            uint32_t v = ids[at + i];
            if (width == 2) {
                o[2 * i] = (unsigned char)v;
                o[2 * i + 1] = (unsigned char)(v >> 8);
            } else {
                wr32(o + 4 * i, v);
            }
        }
        if (llm_afile_seekable(&w->a)) {
            int rc = llm_afile_put(&w->a, buf, k * width, st);
            if (rc)
                return rc;
        } else {
            w->mem_n += k * width;
        }
        at += k;
    }
    return LLM_OK;
}

/* Version 1 to 2 for an id above 65535: the ids so far from 16 to 32 bits, in place,
 * last first so that no id is overwritten before it is read. */
static int widen(llm_tokfile_writer *w, llm_status *st)
{
    w->version = 2;
    if (!llm_afile_seekable(&w->a)) {
        unsigned char *m = w->n ? realloc(w->mem, (size_t)w->n * 4) : w->mem;
        if (w->n && !m)
            return llm_err(st, LLM_ENOMEM, "out of memory (%llu ids for '%s')",
                           (unsigned long long)w->n, w->a.path);
        for (size_t i = (size_t)w->n; i-- > 0;)
            wr32(m + 4 * i, rd16(m + 2 * i));
        w->mem = m;
        w->mem_n = w->mem_cap = (size_t)w->n * 4;
        return LLM_OK;
    }
    static const unsigned char zeros[4096];
    int rc = LLM_OK;
    for (uint64_t grow = w->n * 2; grow && !rc;) {
        size_t k = grow < sizeof zeros ? (size_t)grow : sizeof zeros;
        rc = llm_afile_put(&w->a, zeros, k, st);
        grow -= k;
    }
    unsigned char raw[8192], wide[16384];
    for (uint64_t end = w->n; end > 0 && !rc;) {
        size_t k = end < 4096 ? (size_t)end : 4096;
        uint64_t j = end - k;
        rc = llm_afile_read(&w->a, LLM_TOKFILE_HEADER_BYTES + 2 * j, raw, 2 * k, st);
        for (size_t i = 0; i < k && !rc; i++)
            wr32(wide + 4 * i, rd16(raw + 2 * i));
        if (!rc)
            rc = llm_afile_patch(&w->a, LLM_TOKFILE_HEADER_BYTES + 4 * j, wide, 4 * k, st);
        end = j;
    }
    return rc;
}

int llm_tokfile_writer_put(llm_tokfile_writer *w, const uint32_t *ids, size_t n, llm_status *st)
{
    if (!w->open)
        return llm_err(st, LLM_ESOFTWARE, "token file writer not open");
    if (n > LLM_TOKFILE_MAX_TOKENS - w->n)   /* llm.c reads the count as an int */
        return llm_err(st, LLM_EUSAGE, "'%s': over %d tokens do not fit a token file (llm.c reads "
                       "the count as a signed 32-bit integer): write shards (--shard-tokens)",
                       w->a.path, LLM_TOKFILE_MAX_TOKENS);
    int rc = LLM_OK;
    for (size_t i = 0; i < n && w->version == 1; i++)
        if (ids[i] > 0xffff) {   /* once: after widen the version is 2 */
            w->wide_at = w->n + i;
            rc = w->autov ? widen(w, st)
                          : llm_err(st, LLM_EUSAGE, "'%s': ids above 65535 need token file "
                                    "version 2", w->a.path);
            break;
        }
    if (!rc)
        rc = put_ids(w, ids, n, st);
    if (!rc)
        w->n += n;
    return rc;
}

/* Version 2 back to 1 (an auto-version writer whose wide ids all went to the other side
 * of a split), in place, first to last: an id's 2 bytes never overtake its 4. */
static int narrow(llm_tokfile_writer *w, llm_status *st)
{
    int mem = !llm_afile_seekable(&w->a), rc = LLM_OK;
    unsigned char raw[16384], thin[8192];
    for (uint64_t at = 0; at < w->n && !rc;) {
        size_t k = w->n - at < 4096 ? (size_t)(w->n - at) : 4096;
        const unsigned char *p = raw;
        if (mem)
            p = w->mem + 4 * at;
        else
            rc = llm_afile_read(&w->a, LLM_TOKFILE_HEADER_BYTES + 4 * at, raw, 4 * k, st);
        for (size_t i = 0; i < k && !rc; i++) {
            uint32_t id = rd32(p + 4 * i);
            thin[2 * i] = (unsigned char)id;
            thin[2 * i + 1] = (unsigned char)(id >> 8);
        }
        if (!rc && mem)
            memcpy(w->mem + 2 * at, thin, 2 * k);
        else if (!rc)
            rc = llm_afile_patch(&w->a, LLM_TOKFILE_HEADER_BYTES + 2 * at, thin, 2 * k, st);
        at += k;
    }
    if (rc)
        return rc;
    if (mem)
        w->mem_n = (size_t)w->n * 2;
    else if ((rc = llm_afile_truncate(&w->a, LLM_TOKFILE_HEADER_BYTES + w->n * 2, st)))
        return rc;
    w->version = 1;
    return LLM_OK;
}

int llm_tokfile_writer_split(llm_tokfile_writer *w, uint64_t cut, llm_tokfile_writer *rest,
                             llm_status *st)
{
    if (cut > w->n || !w->open || !rest->open || (rest->version != w->version && !rest->autov))
        return llm_err(st, LLM_ESOFTWARE, "bad token file split");
    size_t width = w->version == 1 ? 2 : 4;
    uint32_t ids[4096];
    unsigned char raw[sizeof ids];
    int mem = !llm_afile_seekable(&w->a), rc = LLM_OK;
    for (uint64_t at = cut; at < w->n && !rc;) {
        size_t k = w->n - at < 4096 ? (size_t)(w->n - at) : 4096;
        const unsigned char *p = raw;
        if (mem)
            p = w->mem + at * width;
        else
            rc = llm_afile_read(&w->a, LLM_TOKFILE_HEADER_BYTES + at * width, raw, k * width, st);
        for (size_t i = 0; i < k && !rc; i++)
            ids[i] = width == 2 ? rd16(p + 2 * i) : rd32(p + 4 * i);
        if (!rc)
            rc = llm_tokfile_writer_put(rest, ids, k, st);
        at += k;
    }
    if (rc)
        return rc;
    if (mem)
        w->mem_n = (size_t)cut * width;
    else if ((rc = llm_afile_truncate(&w->a, LLM_TOKFILE_HEADER_BYTES + cut * width, st)))
        return rc;
    w->n = cut;
    return w->autov && w->version == 2 && w->wide_at >= cut ? narrow(w, st) : LLM_OK;
}

int llm_tokfile_writer_finish(llm_tokfile_writer *w, llm_status *st)
{
    if (!w->open)
        return llm_err(st, LLM_ESOFTWARE, "token file writer not open");
    if (!w->n) {   /* llm.c's loader asserts a count above 0: refuse rather than write one */
        int rc = llm_err(st, LLM_EDATA, "'%s': no tokens to write (llm.c's loader refuses an "
                         "empty token file); nothing written", w->a.path);
        llm_tokfile_writer_abort(w);
        return rc;
    }
    unsigned char hdr[LLM_TOKFILE_HEADER_BYTES];
    put_header(hdr, w->version, w->n);
    int rc;
    if (llm_afile_seekable(&w->a))
        rc = llm_afile_patch(&w->a, 0, hdr, sizeof hdr, st);
    else if (!(rc = llm_afile_put(&w->a, hdr, sizeof hdr, st)))
        rc = llm_afile_put(&w->a, w->mem, w->mem_n, st);
    free(w->mem);
    w->mem = NULL;
    w->mem_n = w->mem_cap = 0;
    if (!rc && (rc = llm_afile_finish(&w->a, st)))
        w->open = 0;   /* finish removed the temp file and freed a */
    if (rc)
        llm_tokfile_writer_abort(w);
    return rc;
}

int llm_tokfile_writer_commit(llm_tokfile_writer *w, llm_status *st)
{
    int rc = llm_tokfile_writer_finish(w, st);
    if (!rc) {
        rc = llm_afile_commit(&w->a, st);
        w->open = 0;
    }
    return rc;
}

void llm_tokfile_writer_abort(llm_tokfile_writer *w)
{
    if (w->open)
        llm_afile_abort(&w->a);
    free(w->mem);
    w->mem = NULL;
    w->mem_n = w->mem_cap = 0;
    w->open = 0;
}

int llm_tokfile_write(const char *path, const uint32_t *ids, uint64_t n, int version,
                      llm_status *st)
{
    if (n > LLM_TOKFILE_MAX_TOKENS)
        return llm_err(st, LLM_EUSAGE, "'%s': %llu tokens do not fit a token file (at most %d: llm.c "
                       "reads the count as a signed 32-bit integer)", path, (unsigned long long)n,
                       LLM_TOKFILE_MAX_TOKENS);
    llm_tokfile_writer w;
    int rc = llm_tokfile_writer_open(&w, path, version, st);
    if (!rc && (rc = llm_tokfile_writer_put(&w, ids, (size_t)n, st)))
        llm_tokfile_writer_abort(&w);
    else if (!rc)
        rc = llm_tokfile_writer_commit(&w, st);
    return rc;
}
