/* ckpt_write.c — the .llmk writer: compression and crc32 first, then header and data in
 * one forward pass, atomically to a file or straight to a pipe. */
#include "common/ckpt.h"
#include "common/ckpt_internal.h"
#include "common/afile.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <zlib.h>

typedef struct {
    char *name;
    llm_node *tree;
} section;

typedef struct {
    llm_tensor t;       /* t.data borrowed from the caller */
    unsigned flags;
    unsigned char *z;   /* compressed stream (owned) when LLM_CKPT_ZLIB */
    llm_ckpt_source_fn read;  /* llm_ckpt_add_source: data from read(ctx), crc given */
    void *ctx;
} wtensor;

struct llm_ckpt_writer {
    section *sec;
    int nsec, capsec;
    wtensor **t;
    int n, cap;
    llm_name_index ix;
};

int llm_ckpt_writer_new(llm_ckpt_writer **out, llm_status *st)
{
    *out = calloc(1, sizeof **out);
    if (!*out || llm_name_index_init(&(*out)->ix, 16)) {
        free(*out);
        *out = NULL;
        return llm_err(st, LLM_ENOMEM, "out of memory");
    }
    return 0;
}

void llm_ckpt_writer_free(llm_ckpt_writer *w)
{
    if (!w)
        return;
    for (int i = 0; i < w->nsec; i++) {
        free(w->sec[i].name);
        llm_node_free(w->sec[i].tree);
    }
    free(w->sec);
    for (int i = 0; i < w->n; i++) {
        free(w->t[i]->z);
        free(w->t[i]);
    }
    free(w->t);
    llm_name_index_free(&w->ix);
    free(w);
}

int llm_ckpt_set_section(llm_ckpt_writer *w, const char *name, llm_node *tree, llm_status *st)
{
    if (!name || !*name || !strcmp(name, "tensors") || !tree) {
        llm_node_free(tree);
        return llm_err(st, LLM_EUSAGE, "invalid header section '%s'", name ? name : "(null)");
    }
    for (int i = 0; i < w->nsec; i++)
        if (!strcmp(w->sec[i].name, name)) {
            llm_node_free(w->sec[i].tree);
            w->sec[i].tree = tree;
            return 0;
        }
    if (w->nsec == w->capsec) {
        int cap = w->capsec ? 2 * w->capsec : 8;
        section *s = realloc(w->sec, (size_t)cap * sizeof *s);
        if (!s) {
            llm_node_free(tree);
            return llm_err(st, LLM_ENOMEM, "out of memory");
        }
        w->sec = s;
        w->capsec = cap;
    }
    char *n = strdup(name);
    if (!n) {
        llm_node_free(tree);
        return llm_err(st, LLM_ENOMEM, "out of memory");
    }
    w->sec[w->nsec].name = n;
    w->sec[w->nsec].tree = tree;
    w->nsec++;
    return 0;
}

static int add(llm_ckpt_writer *w, const char *name, llm_dtype dt, int ndim,
               const int64_t *shape, const void *data, unsigned flags,
               llm_ckpt_source_fn read, void *ctx, uint32_t crc, llm_status *st)
{
    const char *why;
    if (llm_ckpt_name_ok(name, &why))
        return llm_err(st, LLM_EUSAGE, "%s%s%.200s%s", why, name ? " '" : "", name ? name : "", name ? "'" : "");
    if ((unsigned)dt >= LLM_DT_COUNT)
        return llm_err(st, LLM_EUSAGE, "tensor '%s': unknown dtype %d", name, (int)dt);
    if (ndim < 0 || ndim > LLM_CKPT_MAX_DIMS || (ndim > 0 && !shape))
        return llm_err(st, LLM_EUSAGE, "tensor '%s': %d dimensions (0..%d allowed)", name, ndim, LLM_CKPT_MAX_DIMS);
    if (w->n >= (int)LLM_CKPT_MAX_TENSORS)
        return llm_err(st, LLM_EUSAGE, "more than %u tensors", LLM_CKPT_MAX_TENSORS);
    uint64_t nelem = 1, nbytes;
    for (int i = 0; i < ndim; i++) {
        if (shape[i] < 0)
            return llm_err(st, LLM_EUSAGE, "tensor '%s': negative dimension", name);
        if (shape[i] && nelem > UINT64_MAX / (uint64_t)shape[i])
            return llm_err(st, LLM_EUSAGE, "tensor '%s': element count overflows", name);
        nelem *= (uint64_t)shape[i];
    }
    if (llm_dtype_nbytes(dt, nelem, &nbytes) || nbytes > (UINT64_MAX >> 2))
        return llm_err(st, LLM_EUSAGE, "tensor '%s': %llu elements do not fit dtype %s", name,
                       (unsigned long long)nelem, llm_dtype_name(dt));
    if (nbytes && !data && !read)
        return llm_err(st, LLM_EUSAGE, "tensor '%s': no data", name);
    if (llm_name_index_find(&w->ix, name) >= 0)
        return llm_err(st, LLM_EUSAGE, "duplicate tensor name '%s'", name);
    if (w->n == w->cap) {
        int cap = w->cap ? 2 * w->cap : 16;
        wtensor **t = realloc(w->t, (size_t)cap * sizeof *t);
        if (!t)
            return llm_err(st, LLM_ENOMEM, "out of memory");
        w->t = t;
        w->cap = cap;
    }
    wtensor *x = calloc(1, sizeof *x);
    if (!x)
        return llm_err(st, LLM_ENOMEM, "out of memory");
    snprintf(x->t.name, sizeof x->t.name, "%s", name);
    x->t.dtype = dt;
    x->t.ndim = ndim;
    for (int i = 0; i < ndim; i++)
        x->t.shape[i] = shape[i];
    x->t.nelem = nelem;
    x->t.nbytes = nbytes;
    x->t.data = data;
    x->t.compressed = (flags & LLM_CKPT_ZLIB) != 0;
    x->flags = flags;
    x->read = read;
    x->ctx = ctx;
    x->t.crc32 = crc;
    if (llm_name_index_add(&w->ix, x->t.name, w->n) < 0) {
        free(x);
        return llm_err(st, LLM_ENOMEM, "out of memory");
    }
    w->t[w->n++] = x;
    return 0;
}

int llm_ckpt_add(llm_ckpt_writer *w, const char *name, llm_dtype dt, int ndim,
                 const int64_t *shape, const void *data, unsigned flags, llm_status *st)
{
    return add(w, name, dt, ndim, shape, data, flags, NULL, NULL, 0, st);
}

int llm_ckpt_add_source(llm_ckpt_writer *w, const char *name, llm_dtype dt, int ndim,
                        const int64_t *shape, uint32_t crc32, llm_ckpt_source_fn read, void *ctx,
                        llm_status *st)
{
    if (!read)
        return llm_err(st, LLM_EUSAGE, "tensor '%s': no source", name ? name : "(null)");
    return add(w, name, dt, ndim, shape, NULL, 0, read, ctx, crc32, st);
}

/* Compress (when asked) and checksum every tensor, assigning offsets. */
static int prepare(llm_ckpt_writer *w, uint64_t *data_len, llm_status *st)
{
    uint64_t off = 0;
    for (int i = 0; i < w->n; i++) {
        llm_tensor *t = &w->t[i]->t;
        free(w->t[i]->z);
        w->t[i]->z = NULL;
        if (w->t[i]->read) {
            t->stored = t->nbytes;   /* crc32 given by llm_ckpt_add_source */
        } else if (t->compressed) {
            uLong cap = compressBound((uLong)t->nbytes);
            unsigned char *z = malloc(cap ? cap : 1);
            if (!z)
                return llm_err(st, LLM_ENOMEM, "tensor '%s': out of memory compressing", t->name);
            uLongf zlen = cap;
            int zr = compress2(z, &zlen, t->data ? t->data : (const void *)"", (uLong)t->nbytes, Z_DEFAULT_COMPRESSION);
            if (zr != Z_OK) {
                free(z);
                return llm_err(st, zr == Z_MEM_ERROR ? LLM_ENOMEM : LLM_ESOFTWARE, "tensor '%s': zlib error %d", t->name, zr);
            }
            w->t[i]->z = z;
            t->stored = zlen;
            t->crc32 = llm_crc32(z, zlen);
        } else {
            t->stored = t->nbytes;
            t->crc32 = llm_crc32(t->data, t->nbytes);
        }
        off = llm_align_up(off, LLM_CKPT_ALIGN);
        t->offset = off;
        off += t->stored;
    }
    *data_len = off;
    return 0;
}

static int add_section_copy(llm_node *root, const char *name, const llm_node *tree)
{
    llm_node *c = llm_node_copy(tree);
    return c ? llm_node_set(root, name, c) : -1;
}

/* The header tree: model, tokenizer, train, shard, any other sections, then tensors. */
static llm_node *build_header(const llm_ckpt_writer *w)
{
    static const char *const order[] = {"model", "tokenizer", "train", "shard"};
    llm_node *root = llm_node_new_map();
    if (!root)
        return NULL;
    for (int k = 0; k < 4; k++)
        for (int i = 0; i < w->nsec; i++)
            if (!strcmp(w->sec[i].name, order[k]) && add_section_copy(root, order[k], w->sec[i].tree))
                goto fail;
    for (int i = 0; i < w->nsec; i++)
        if (!llm_node_get(root, w->sec[i].name) && add_section_copy(root, w->sec[i].name, w->sec[i].tree))
            goto fail;
    llm_node *seq = llm_node_new_seq();
    if (llm_node_set(root, "tensors", seq))
        goto fail;
    for (int i = 0; i < w->n; i++) {
        const llm_tensor *t = &w->t[i]->t;
        llm_node *m = llm_node_new_map(), *shape;
        if (llm_node_append(seq, m) || llm_node_set(m, "name", llm_node_new_str(t->name)) ||
            llm_node_set_str(m, "dtype", llm_dtype_name(t->dtype)) ||
            llm_node_set(m, "shape", (shape = llm_node_new_seq())))
            goto fail;
        for (int d = 0; d < t->ndim; d++)
            if (llm_node_append(shape, llm_node_new_int(t->shape[d])))
                goto fail;
        if (llm_node_set_int(m, "offset", (int64_t)t->offset) || llm_node_set_int(m, "nbytes", (int64_t)t->nbytes) ||
            llm_node_set_int(m, "stored", (int64_t)t->stored) || llm_node_set_int(m, "crc32", (int64_t)t->crc32) ||
            (t->compressed && llm_node_set_str(m, "compression", "zlib")))
            goto fail;
    }
    return root;
fail:
    llm_node_free(root);
    return NULL;
}

static int put_zeros(llm_afile *a, uint64_t n, llm_status *st)
{
    static const unsigned char zeros[LLM_CKPT_ALIGN];
    return llm_afile_put(a, zeros, n, st);
}

/* A source tensor's bytes, piece by piece as its callback hands them out. */
static int put_source(const wtensor *x, llm_afile *a, llm_status *st)
{
    for (uint64_t off = 0; off < x->t.nbytes;) {
        const void *p = NULL;
        size_t n = 0;
        int rc = x->read(x->ctx, off, &p, &n, st);
        if (rc)
            return rc;
        if (!p || !n || n > x->t.nbytes - off)
            return llm_err(st, LLM_ESOFTWARE, "tensor '%s': its source gave %zu bytes at "
                           "offset %llu of %llu", x->t.name, n, (unsigned long long)off,
                           (unsigned long long)x->t.nbytes);
        if ((rc = llm_afile_put(a, p, n, st)))
            return rc;
        off += n;
    }
    return 0;
}

static int stream_out(llm_ckpt_writer *w, llm_afile *a, llm_status *st)
{
    uint64_t data_len;
    int rc = prepare(w, &data_len, st);
    if (rc)
        return rc;
    llm_node *hdr = build_header(w);
    if (!hdr)
        return llm_err(st, LLM_ENOMEM, "out of memory building the header");
    char *yaml = NULL;
    size_t ylen = 0;
    rc = llm_yaml_emit(hdr, &yaml, &ylen, st);
    llm_node_free(hdr);
    if (rc)
        return rc;
    if (ylen > LLM_CKPT_MAX_HEADER) {
        free(yaml);
        return llm_err(st, LLM_EUSAGE, "header of %zu bytes exceeds the %u-byte cap", ylen, LLM_CKPT_MAX_HEADER);
    }
    unsigned char pre[LLM_CKPT_PREFIX];
    memcpy(pre, LLM_CKPT_MAGIC, 8);
    uint32_t v = LLM_CKPT_VERSION;
    uint64_t h = ylen;
    for (int i = 0; i < 4; i++)
        pre[8 + i] = (unsigned char)(v >> (8 * i));
    for (int i = 0; i < 8; i++)
        pre[12 + i] = (unsigned char)(h >> (8 * i));
    uint64_t pos = LLM_CKPT_PREFIX + ylen, start = llm_align_up(pos, LLM_CKPT_ALIGN);
    rc = llm_afile_put(a, pre, sizeof pre, st);
    if (!rc)
        rc = llm_afile_put(a, yaml, ylen, st);
    if (!rc)
        rc = put_zeros(a, start - pos, st);
    free(yaml);
    uint64_t at = 0;
    for (int i = 0; i < w->n && !rc; i++) {
        const llm_tensor *t = &w->t[i]->t;
        rc = put_zeros(a, t->offset - at, st);
        if (!rc && w->t[i]->read)
            rc = put_source(w->t[i], a, st);
        else if (!rc)
            rc = llm_afile_put(a, t->compressed ? (const void *)w->t[i]->z : t->data, t->stored, st);
        at = t->offset + t->stored;
    }
    for (int i = 0; i < w->n; i++) {
        free(w->t[i]->z);
        w->t[i]->z = NULL;
    }
    return rc;
}

int llm_ckpt_write(llm_ckpt_writer *w, const char *path, llm_status *st)
{
    if (!w || !path || !*path)
        return llm_err(st, LLM_EUSAGE, "no output path");
    if (st)
        llm_status_clear(st);
    llm_afile a;
    int rc = llm_afile_open(&a, path, LLM_AFILE_STDOUT, st);
    if (rc)
        return rc;
    if ((rc = stream_out(w, &a, st)))
        llm_afile_abort(&a);
    else
        rc = llm_afile_commit(&a, st);
    return rc;
}
