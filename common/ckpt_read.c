/* ckpt_read.c — the .llmk reader: mmap for regular files, a growing buffer for pipes,
 * and one validator for both that treats every byte as hostile. */
#include "common/ckpt.h"
#include "common/ckpt_internal.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zlib.h>

struct llm_ckpt {
    llm_node *hdr;
    llm_tensor *t;
    int n;
    llm_name_index ix;
    void *map;             /* mmap'd file */
    size_t maplen;
    unsigned char *buf;    /* bytes read from a pipe */
    void **owned;          /* per tensor: decompressed data or NULL */
    uint64_t hlen, data_start, end;
};

#define E(...) llm_err(st, LLM_EDATA, __VA_ARGS__)
#define ULL(x) ((unsigned long long)(x))

/* ---- fixed prefix ---- */

static int parse_prefix(const unsigned char *b, uint64_t len, uint64_t *hlen, llm_status *st)
{
    if (len == 0)
        return E("empty file");
    if (memcmp(b, LLM_CKPT_MAGIC, len < 8 ? (size_t)len : 8))
        return E("not a .llmk file (bad magic)");
    if (len < LLM_CKPT_PREFIX)
        return E("truncated: %llu bytes, the fixed prefix needs %u", ULL(len), LLM_CKPT_PREFIX);
    uint32_t v = 0;
    uint64_t h = 0;
    for (int i = 3; i >= 0; i--)
        v = v << 8 | b[8 + i];
    for (int i = 7; i >= 0; i--)
        h = h << 8 | b[12 + i];
    if (v == 0)
        return E("invalid format version 0");
    if (v > LLM_CKPT_VERSION)
        return E("format version %u is newer than this reader supports (%u)", v, LLM_CKPT_VERSION);
    if (h == 0)
        return E("empty header");
    if (h > LLM_CKPT_MAX_HEADER)
        return E("header length %llu exceeds the %u-byte cap", ULL(h), LLM_CKPT_MAX_HEADER);
    *hlen = h;
    return 0;
}

/* ---- header ---- */

static int tfail(llm_status *st, const llm_node *m, int i, const char *name, const char *what, const char *arg)
{
    char tn[300];
    if (name)
        snprintf(tn, sizeof tn, "tensor '%.200s'", name);
    else
        snprintf(tn, sizeof tn, "tensor #%d", i);
    return E("header:%d: %s: %s%.100s", m->line, tn, what, arg ? arg : "");
}

static int get_u64(const llm_node *m, const char *key, uint64_t *out)
{
    int64_t v;
    const llm_node *n = llm_node_get(m, key);
    if (!n || llm_node_i64(n, &v) || v < 0)
        return -1;
    *out = (uint64_t)v;
    return 0;
}

static int parse_tensor(llm_ckpt *c, int i, const llm_node *m, uint64_t *pos, llm_status *st)
{
    static const char *const keys[] = {"name", "dtype", "shape", "offset", "nbytes", "stored", "crc32", "compression"};
    llm_tensor *t = &c->t[i];
    if (m->kind != LLM_NODE_MAP)
        return E("header:%d: tensor #%d: not a mapping", m->line, i);
    const char *name = llm_node_str(llm_node_get(m, "name"));
    const char *why;
    if (!name)
        return tfail(st, m, i, NULL, "missing 'name'", NULL);
    const llm_node *nn = llm_node_get(m, "name");
    if (!nn->quoted && (!strcmp(name, "~") || !strcasecmp(name, "null")))
        return tfail(st, m, i, NULL, "tensor name is null", NULL);
    if (llm_ckpt_name_ok(name, &why))
        return tfail(st, m, i, NULL, why, NULL);
    for (int k = 0; k < m->n; k++) {
        int known = 0;
        for (size_t j = 0; j < sizeof keys / sizeof *keys; j++)
            known |= !strcmp(m->items[k]->key, keys[j]);
        if (!known)
            return tfail(st, m, i, name, "unknown key ", m->items[k]->key);
    }
    snprintf(t->name, sizeof t->name, "%s", name);
    int dup = llm_name_index_add(&c->ix, t->name, i);
    if (dup < 0)
        return llm_err(st, LLM_ENOMEM, "out of memory");
    if (dup)
        return tfail(st, m, i, name, "duplicate tensor name", NULL);
    const char *dt = llm_node_str(llm_node_get(m, "dtype"));
    if (!dt)
        return tfail(st, m, i, name, "missing 'dtype'", NULL);
    if (llm_dtype_from_name(dt, &t->dtype))
        return tfail(st, m, i, name, "unknown dtype ", dt);
    const llm_node *shape = llm_node_get(m, "shape");
    if (!shape || shape->kind != LLM_NODE_SEQ)
        return tfail(st, m, i, name, "'shape' must be a sequence", NULL);
    if (shape->n > LLM_CKPT_MAX_DIMS)
        return tfail(st, m, i, name, "too many dimensions", NULL);
    t->ndim = shape->n;
    uint64_t nelem = 1;
    for (int d = 0; d < shape->n; d++) {
        int64_t v;
        if (llm_node_i64(shape->items[d], &v) || v < 0)
            return tfail(st, m, i, name, "bad dimension ", llm_node_str(shape->items[d]));
        if (v && nelem > UINT64_MAX / (uint64_t)v)
            return tfail(st, m, i, name, "element count overflows 64 bits", NULL);
        nelem *= (uint64_t)v;
        t->shape[d] = v;
    }
    t->nelem = nelem;
    uint64_t want, crc;
    if (llm_dtype_nbytes(t->dtype, nelem, &want))
        return tfail(st, m, i, name, "shape does not fit dtype ", dt);
    if (get_u64(m, "nbytes", &t->nbytes))
        return tfail(st, m, i, name, "missing or bad 'nbytes'", NULL);
    if (t->nbytes != want) {
        char msg[120];
        snprintf(msg, sizeof msg, "nbytes %llu disagrees with shape and dtype (%llu)", ULL(t->nbytes), ULL(want));
        return tfail(st, m, i, name, msg, NULL);
    }
    if (get_u64(m, "offset", &t->offset))
        return tfail(st, m, i, name, "missing or bad 'offset'", NULL);
    if (get_u64(m, "stored", &t->stored))
        return tfail(st, m, i, name, "missing or bad 'stored'", NULL);
    if (get_u64(m, "crc32", &crc) || crc > 0xffffffffu)
        return tfail(st, m, i, name, "missing or bad 'crc32'", NULL);
    t->crc32 = (uint32_t)crc;
    const llm_node *comp = llm_node_get(m, "compression");
    if (comp) {
        const char *cs = llm_node_str(comp);
        if (!cs || strcmp(cs, "zlib"))
            return tfail(st, m, i, name, "unknown compression ", cs ? cs : "(not a scalar)");
        t->compressed = 1;
    } else if (t->stored != t->nbytes) {
        return tfail(st, m, i, name, "'stored' differs from 'nbytes' without compression", NULL);
    }
    if (t->offset % LLM_CKPT_ALIGN)
        return tfail(st, m, i, name, "offset is not aligned to 64 bytes", NULL);
    if (t->offset < *pos)
        return tfail(st, m, i, name, "overlaps the previous tensor (offsets out of order)", NULL);
    if (t->offset != llm_align_up(*pos, LLM_CKPT_ALIGN))
        return tfail(st, m, i, name, "gap before the tensor (offset is not the next aligned position)", NULL);
    /* caps keep every later sum far from 64-bit overflow */
    if (t->stored > (UINT64_MAX >> 4) || t->offset > (UINT64_MAX >> 4) - t->stored)
        return tfail(st, m, i, name, "size overflows", NULL);
    *pos = t->offset + t->stored;
    return 0;
}

static int parse_header(llm_ckpt *c, const char *yaml, uint64_t hlen, llm_status *st)
{
    /* at most one node per 4 header bytes keeps memory proportional to the input */
    llm_yaml_limits lim = {.max_bytes = LLM_CKPT_MAX_HEADER, .max_depth = 16, .max_nodes = (int)(hlen / 4 + 64)};
    int rc = llm_yaml_parse(yaml, (size_t)hlen, "header", &lim, &c->hdr, st);
    if (rc)
        return rc;
    const llm_node *h = c->hdr;
    if (h->kind != LLM_NODE_MAP)
        return E("header: not a mapping");
    static const char *const maps[] = {"model", "tokenizer", "train", "shard"};
    for (int k = 0; k < 4; k++) {
        const llm_node *s = llm_node_get(h, maps[k]);
        if (s && s->kind != LLM_NODE_MAP)
            return E("header:%d: section '%s' must be a mapping", s->line, maps[k]);
    }
    const llm_node *ts = llm_node_get(h, "tensors");
    if (!ts)
        return E("header: missing 'tensors'");
    if (ts->kind != LLM_NODE_SEQ)
        return E("header:%d: 'tensors' must be a sequence", ts->line);
    if ((unsigned)ts->n > LLM_CKPT_MAX_TENSORS)
        return E("header: %d tensors exceed the cap of %u", ts->n, LLM_CKPT_MAX_TENSORS);
    c->t = calloc(ts->n ? (size_t)ts->n : 1, sizeof *c->t);
    c->owned = calloc(ts->n ? (size_t)ts->n : 1, sizeof *c->owned);
    if (!c->t || !c->owned || llm_name_index_init(&c->ix, (size_t)ts->n))
        return llm_err(st, LLM_ENOMEM, "out of memory");
    c->n = ts->n;
    uint64_t pos = 0;
    for (int i = 0; i < ts->n; i++)
        if ((rc = parse_tensor(c, i, ts->items[i], &pos, st)))
            return rc;
    c->data_start = llm_align_up(LLM_CKPT_PREFIX + hlen, LLM_CKPT_ALIGN);
    c->end = c->data_start + pos;
    return 0;
}

/* ---- data ---- */

static int all_zero(const unsigned char *p, uint64_t n)
{
    for (uint64_t i = 0; i < n; i++)
        if (p[i])
            return 0;
    return 1;
}

/* Inflate exactly t->nbytes from the stored stream; the output buffer grows only as
 * bytes are produced, so a lying nbytes cannot force a huge allocation. */
static int inflate_tensor(const llm_tensor *t, const unsigned char *src, void **out, llm_status *st)
{
    z_stream z;
    memset(&z, 0, sizeof z);
    if (inflateInit(&z) != Z_OK)
        return llm_err(st, LLM_ENOMEM, "tensor '%s': cannot start zlib", t->name);
    uint64_t limit = t->nbytes + 1, cap = 0, in_left = t->stored;
    unsigned char *buf = NULL;
    int zr, rc = 0;
    z.next_in = (unsigned char *)src;
    for (;;) {
        if (z.avail_in == 0 && in_left > 0) {
            uInt k = in_left > (1u << 30) ? (1u << 30) : (uInt)in_left;
            z.avail_in = k;
            in_left -= k;
        }
        if (z.avail_out == 0) {
            uint64_t have = buf ? (uint64_t)(z.next_out - buf) : 0;
            if (have == cap) {
                if (cap >= limit) {
                    rc = E("tensor '%s': inflates to more than nbytes (%llu)", t->name, ULL(t->nbytes));
                    break;
                }
                uint64_t ncap = cap < (1u << 16) ? (1u << 16) : 2 * cap;
                if (ncap > limit)
                    ncap = limit;
                unsigned char *nb = realloc(buf, (size_t)ncap);
                if (!nb) {
                    rc = llm_err(st, LLM_ENOMEM, "tensor '%s': out of memory", t->name);
                    break;
                }
                buf = nb;
                cap = ncap;
            }
            z.next_out = buf + have;
            z.avail_out = cap - have > (1u << 30) ? (1u << 30) : (uInt)(cap - have);
        }
        zr = inflate(&z, Z_NO_FLUSH);
        if (zr == Z_STREAM_END)
            break;
        if (zr == Z_BUF_ERROR && z.avail_in == 0 && in_left == 0) {
            rc = E("tensor '%s': compressed stream is truncated", t->name);
            break;
        }
        if (zr != Z_OK && zr != Z_BUF_ERROR) {
            rc = E("tensor '%s': corrupt compressed data (%s)", t->name, z.msg ? z.msg : "zlib error");
            break;
        }
    }
    uint64_t produced = buf ? (uint64_t)(z.next_out - buf) : 0;
    if (!rc && produced != t->nbytes)
        rc = E("tensor '%s': inflates to %llu bytes, nbytes says %llu", t->name, ULL(produced), ULL(t->nbytes));
    if (!rc && (z.avail_in != 0 || in_left != 0))
        rc = E("tensor '%s': bytes after the end of the compressed stream", t->name);
    inflateEnd(&z);
    if (rc) {
        free(buf);
        return rc;
    }
    if (!buf && !(buf = malloc(1)))
        return llm_err(st, LLM_ENOMEM, "out of memory");
    *out = buf;
    return 0;
}

/* Check the layout of len bytes at b against the parsed header, then crc and load. */
static int load(llm_ckpt *c, const unsigned char *b, uint64_t len, unsigned flags, llm_status *st)
{
    uint64_t hend = LLM_CKPT_PREFIX + c->hlen;
    if (len < c->data_start)
        return E("truncated: the file ends in the padding after the header");
    if (!all_zero(b + hend, c->data_start - hend))
        return E("nonzero bytes in the padding after the header");
    uint64_t pos = c->data_start;
    for (int i = 0; i < c->n; i++) {
        const llm_tensor *t = &c->t[i];
        uint64_t at = c->data_start + t->offset;
        if (at + t->stored > len)
            return E("tensor '%s': truncated (its data ends at byte %llu, the file has %llu)", t->name,
                     ULL(at + t->stored), ULL(len));
        if (!(flags & LLM_CKPT_HEADER_ONLY) && !all_zero(b + pos, at - pos))
            return E("tensor '%s': nonzero bytes in the padding before it", t->name);
        pos = at + t->stored;
    }
    if (len > c->end)
        return E("%llu trailing bytes after the last tensor", ULL(len - c->end));
    if (flags & LLM_CKPT_HEADER_ONLY)
        return 0;
    for (int i = 0; i < c->n; i++) {
        llm_tensor *t = &c->t[i];
        const unsigned char *p = b + c->data_start + t->offset;
        if (!(flags & LLM_CKPT_NOVERIFY) || t->compressed) {
            uint32_t crc = llm_crc32(p, t->stored);
            if (crc != t->crc32)
                return E("tensor '%s': crc32 mismatch (header 0x%08x, data 0x%08x)", t->name, t->crc32, crc);
        }
        if (t->compressed) {
            int rc = inflate_tensor(t, p, &c->owned[i], st);
            if (rc)
                return rc;
            t->data = c->owned[i];
        } else {
            t->data = p;
        }
    }
    return 0;
}

/* ---- sources ---- */

typedef struct {
    unsigned char *b;
    uint64_t len, cap;
    int eof;
} rbuf;

/* Read from fd until rb holds want bytes or the input ends.  Capacity never runs far
 * ahead of the bytes actually received, whatever the header claims. */
static int fill(int fd, rbuf *rb, uint64_t want, llm_status *st)
{
    while (rb->len < want && !rb->eof) {
        if (rb->len == rb->cap) {
            uint64_t ncap = rb->cap < (1u << 20) ? (1u << 20) : 2 * rb->cap;
            if (ncap > want)
                ncap = want;
            unsigned char *nb = realloc(rb->b, (size_t)ncap);
            if (!nb)
                return llm_err(st, LLM_ENOMEM, "out of memory reading input");
            rb->b = nb;
            rb->cap = ncap;
        }
        uint64_t room = rb->cap - rb->len;
        ssize_t r = read(fd, rb->b + rb->len, room > (1u << 30) ? (1u << 30) : (size_t)room);
        if (r < 0 && errno == EINTR)
            continue;
        if (r < 0)
            return llm_err(st, LLM_EIO, "read error: %s", strerror(errno));
        if (r == 0)
            rb->eof = 1;
        rb->len += (uint64_t)r;
    }
    return 0;
}

static int open_stream(llm_ckpt *c, int fd, unsigned flags, llm_status *st)
{
    rbuf rb = {0};
    int rc = fill(fd, &rb, LLM_CKPT_PREFIX, st);
    if (!rc)
        rc = parse_prefix(rb.b ? rb.b : (const unsigned char *)"", rb.len, &c->hlen, st);
    if (!rc)
        rc = fill(fd, &rb, LLM_CKPT_PREFIX + c->hlen, st);
    if (!rc && rb.len < LLM_CKPT_PREFIX + c->hlen)
        rc = E("truncated header (%llu of %llu bytes)", ULL(rb.len - LLM_CKPT_PREFIX), ULL(c->hlen));
    if (!rc)
        rc = parse_header(c, (const char *)rb.b + LLM_CKPT_PREFIX, c->hlen, st);
    if (!rc)
        rc = fill(fd, &rb, (flags & LLM_CKPT_HEADER_ONLY) ? c->data_start : c->end, st);
    if (!rc && !(flags & LLM_CKPT_HEADER_ONLY) && rb.len == c->end && !rb.eof) {
        unsigned char extra;
        ssize_t r;
        do
            r = read(fd, &extra, 1);
        while (r < 0 && errno == EINTR);
        if (r > 0)
            rc = E("trailing bytes after the last tensor");
    }
    c->buf = rb.b;
    if (!rc && (flags & LLM_CKPT_HEADER_ONLY)) {
        /* only the header was read: check what we have, trust sizes for the rest */
        if (rb.len < c->data_start)
            return E("truncated: the input ends in the padding after the header");
        if (!all_zero(rb.b + LLM_CKPT_PREFIX + c->hlen, c->data_start - LLM_CKPT_PREFIX - c->hlen))
            return E("nonzero bytes in the padding after the header");
        return 0;
    }
    if (!rc)
        rc = load(c, rb.b, rb.len, flags, st);
    return rc;
}

static int open_bytes(llm_ckpt *c, const unsigned char *b, uint64_t len, unsigned flags, llm_status *st)
{
    int rc = parse_prefix(b, len, &c->hlen, st);
    if (rc)
        return rc;
    if (len < LLM_CKPT_PREFIX + c->hlen)
        return E("truncated header (%llu of %llu bytes)", ULL(len - LLM_CKPT_PREFIX), ULL(c->hlen));
    rc = parse_header(c, (const char *)b + LLM_CKPT_PREFIX, c->hlen, st);
    return rc ? rc : load(c, b, len, flags, st);
}

/* Messages quote names and keys from the file: keep them on one printable line. */
static int clean_msg(llm_status *st, int rc)
{
    if (st && rc)
        for (char *p = st->msg; *p; p++)
            if ((unsigned char)*p < 0x20 || *p == 0x7f)
                *p = '?';
    return rc;
}

static llm_ckpt *ckpt_new(void)
{
    return calloc(1, sizeof(llm_ckpt));
}

int llm_ckpt_open_mem(llm_ckpt **out, const void *buf, size_t len, unsigned flags, llm_status *st)
{
    *out = NULL;
    llm_ckpt *c = ckpt_new();
    if (!c)
        return llm_err(st, LLM_ENOMEM, "out of memory");
    int rc = clean_msg(st, open_bytes(c, buf ? buf : "", len, flags, st));
    if (rc) {
        llm_ckpt_close(c);
        return rc;
    }
    *out = c;
    return 0;
}

int llm_ckpt_open(llm_ckpt **out, const char *path, unsigned flags, llm_status *st)
{
    *out = NULL;
    if (!path || !*path)
        return llm_err(st, LLM_EUSAGE, "no input path");
    int is_stdin = !strcmp(path, "-");
    const char *shown = is_stdin ? "<stdin>" : path;
    int fd = is_stdin ? STDIN_FILENO : open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return llm_err(st, LLM_ENOINPUT, "cannot open '%s': %s", path, strerror(errno));
    llm_ckpt *c = ckpt_new();
    struct stat sb;
    int rc = 0;
    if (!c)
        rc = llm_err(st, LLM_ENOMEM, "out of memory");
    else if (fstat(fd, &sb) != 0)
        rc = llm_err(st, LLM_EIO, "cannot stat '%s': %s", shown, strerror(errno));
    else if (S_ISDIR(sb.st_mode))
        rc = llm_err(st, LLM_ENOINPUT, "'%s' is a directory", shown);
    else if (S_ISREG(sb.st_mode) && sb.st_size > 0 && (!is_stdin || lseek(fd, 0, SEEK_CUR) == 0)) {
        c->map = mmap(NULL, (size_t)sb.st_size, PROT_READ, MAP_PRIVATE, fd, 0);
        if (c->map == MAP_FAILED) {
            c->map = NULL;
            rc = llm_err(st, LLM_EIO, "cannot map '%s': %s", shown, strerror(errno));
        } else {
            c->maplen = (size_t)sb.st_size;
            rc = open_bytes(c, c->map, c->maplen, flags, st);
            if (rc && rc != LLM_ENOMEM)
                llm_err_prefix(st, "%s", shown);
        }
    } else {
        rc = open_stream(c, fd, flags, st);
        if (rc && rc != LLM_ENOMEM)
            llm_err_prefix(st, "%s", shown);
    }
    if (!is_stdin)
        close(fd);
    clean_msg(st, rc);
    if (rc) {
        llm_ckpt_close(c);
        return rc;
    }
    *out = c;
    return 0;
}

void llm_ckpt_release(llm_ckpt *c, const llm_tensor *t)
{
    const unsigned char *m = c->map, *d = t->data;
    long ps = sysconf(_SC_PAGESIZE);
    if (!m || !d || ps <= 0 || d < m || (size_t)(d - m) > c->maplen || t->nbytes > c->maplen - (size_t)(d - m))
        return;
    uintptr_t a = ((uintptr_t)d + (uintptr_t)ps - 1) & ~((uintptr_t)ps - 1);
    uintptr_t e = ((uintptr_t)d + (uintptr_t)t->nbytes) & ~((uintptr_t)ps - 1);
    /* a private, read-only file mapping: dropped pages come back from the file unchanged */
    if (e > a)
        madvise((void *)a, e - a, MADV_DONTNEED);
}

void llm_ckpt_close(llm_ckpt *c)
{
    if (!c)
        return;
    if (c->map)
        munmap(c->map, c->maplen);
    for (int i = 0; c->owned && i < c->n; i++)
        free(c->owned[i]);
    free(c->owned);
    free(c->buf);
    free(c->t);
    llm_name_index_free(&c->ix);
    llm_node_free(c->hdr);
    free(c);
}

const llm_node *llm_ckpt_section(const llm_ckpt *c, const char *name)
{
    if (!c || !name || !strcmp(name, "tensors"))
        return NULL;
    return llm_node_get(c->hdr, name);
}

const llm_node *llm_ckpt_header(const llm_ckpt *c) { return c ? c->hdr : NULL; }
int llm_ckpt_count(const llm_ckpt *c) { return c ? c->n : 0; }

const llm_tensor *llm_ckpt_tensor(const llm_ckpt *c, int i)
{
    return c && i >= 0 && i < c->n ? &c->t[i] : NULL;
}

const llm_tensor *llm_ckpt_find(const llm_ckpt *c, const char *name)
{
    if (!c)
        return NULL;
    int i = llm_name_index_find(&c->ix, name);
    return i >= 0 ? &c->t[i] : NULL;
}

uint64_t llm_ckpt_file_size(const llm_ckpt *c) { return c ? c->end : 0; }
