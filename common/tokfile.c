/* tokfile.c — llm.c-compatible token files: validated reads, atomic writes. */
#include "common/tokfile.h"
#include "common/fsutil.h"

#include <errno.h>
#include <limits.h>
#include <fcntl.h>
#include <libgen.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

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
            out[i] = (int32_t)((uint32_t)p[2 * i] | (uint32_t)p[2 * i + 1] << 8);
    } else {
        p += start * 4;
        for (size_t i = 0; i < n; i++)
            out[i] = (int32_t)rd32(p + 4 * i);
    }
}

static int write_all(int fd, const void *buf, size_t n)
{
    const char *p = buf;
    while (n) {
        ssize_t w = write(fd, p, n);
        if (w < 0 && errno == EINTR)
            continue;
        if (w < 0)
            return -1;
        p += w;
        n -= (size_t)w;
    }
    return 0;
}

/* Header + ids, converted to little-endian in blocks so memory stays small. */
static int write_body(int fd, const uint32_t *ids, uint64_t n, int version)
{
    unsigned char hdr[LLM_TOKFILE_HEADER_BYTES];
    memset(hdr, 0, sizeof hdr);
    wr32(hdr, LLM_TOKFILE_MAGIC);
    wr32(hdr + 4, (uint32_t)version);
    wr32(hdr + 8, (uint32_t)n);
    if (write_all(fd, hdr, sizeof hdr))
        return -1;
    unsigned char buf[1 << 16];
    size_t per = version == 1 ? sizeof buf / 2 : sizeof buf / 4, k = 0;
    for (uint64_t i = 0; i < n; i++) {
        if (version == 1) {
            buf[2 * k] = (unsigned char)ids[i];
            buf[2 * k + 1] = (unsigned char)(ids[i] >> 8);
        } else {
            wr32(buf + 4 * k, ids[i]);
        }
        if (++k == per) {
            if (write_all(fd, buf, k * (version == 1 ? 2 : 4)))
                return -1;
            k = 0;
        }
    }
    if (k && write_all(fd, buf, k * (version == 1 ? 2 : 4)))
        return -1;
    return 0;
}

int llm_tokfile_write(const char *path, const uint32_t *ids, uint64_t n, int version,
                      llm_status *st)
{
    if (n > UINT32_MAX)
        return llm_err(st, LLM_EUSAGE, "'%s': %llu tokens do not fit a token file (at most %u)", path,
                       (unsigned long long)n, UINT32_MAX);
    int need = 1;
    for (uint64_t i = 0; i < n && need == 1; i++)
        if (ids[i] > 0xffff)
            need = 2;
    if (version == 0)
        version = need;
    else if (version == 1 && need == 2)
        return llm_err(st, LLM_EUSAGE, "'%s': ids above 65535 need token file version 2", path);
    else if (version != 1 && version != 2)
        return llm_err(st, LLM_EUSAGE, "'%s': token file version %d (want 1 or 2)", path, version);

    if (!strcmp(path, "-")) {
        if (write_body(1, ids, n, version))
            return llm_err(st, LLM_EIO, "cannot write to stdout: %s", strerror(errno));
        return LLM_OK;
    }
    char target[PATH_MAX];
    int dfd;
    if (llm_out_target(path, target, sizeof target, &dfd, st))
        return st->code;
    if (dfd >= 0) {   /* a device or pipe: written in place */
        int bad = write_body(dfd, ids, n, version) != 0;
        int e = errno;
        if (close(dfd) && !bad)
            bad = 1, e = errno;
        return bad ? llm_err(st, LLM_EIO, "cannot write '%s': %s", path, strerror(e)) : LLM_OK;
    }
    path = target;

    /* Atomic: a temp file beside the target, fsync, rename, fsync the directory. */
    size_t plen = strlen(path);
    char *tmp = malloc(plen + 16), *dcopy = strdup(path);
    if (!tmp || !dcopy) {
        free(tmp);
        free(dcopy);
        return llm_err(st, LLM_ENOMEM, "out of memory");
    }
    snprintf(tmp, plen + 16, "%s.tmp.XXXXXX", path);
    int fd = mkstemp(tmp);
    if (fd < 0) {
        int e = errno;
        free(tmp);
        free(dcopy);
        return llm_err(st, LLM_EIO, "cannot create '%s': %s", path, strerror(e));
    }
    int rc = LLM_OK;
    if (fchmod(fd, 0644) || write_body(fd, ids, n, version) || fsync(fd))
        rc = llm_err(st, LLM_EIO, "cannot write '%s': %s", path, strerror(errno));
    if (close(fd) && !rc)
        rc = llm_err(st, LLM_EIO, "cannot write '%s': %s", path, strerror(errno));
    if (!rc && rename(tmp, path))
        rc = llm_err(st, LLM_EIO, "cannot rename to '%s': %s", path, strerror(errno));
    if (rc) {
        unlink(tmp);
    } else {
        int dfd = open(dirname(dcopy), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
        if (dfd >= 0) {
            fsync(dfd);
            close(dfd);
        }
    }
    free(tmp);
    free(dcopy);
    return rc;
}
