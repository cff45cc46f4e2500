/* safetensors_read.c — a safetensors reader that treats every file as hostile. */
#include "common/safetensors.h"

#include <errno.h>
#include <fcntl.h>
#include <jansson.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

struct llm_st_file {
    void *map;
    size_t maplen;
    llm_st_tensor *t;
    int n;
};

int llm_st_dtype_size(const char *d)
{
    static const struct { const char *n; int s; } tab[] = {
        {"F64", 8}, {"F32", 4}, {"F16", 2}, {"BF16", 2}, {"I64", 8}, {"I32", 4}, {"I16", 2},
        {"I8", 1}, {"U64", 8}, {"U32", 4}, {"U16", 2}, {"U8", 1}, {"BOOL", 1}};
    for (size_t i = 0; i < sizeof tab / sizeof *tab; i++)
        if (!strcmp(d, tab[i].n))
            return tab[i].s;
    return 0;
}

static int by_begin(const void *a, const void *b)
{
    const llm_st_tensor *x = a, *y = b;
    if (x->begin != y->begin)
        return x->begin < y->begin ? -1 : 1;
    return x->end < y->end ? -1 : x->end > y->end;
}

static int parse_entry(llm_st_tensor *t, const char *name, json_t *v, uint64_t dlen, llm_status *st)
{
    const char *why = NULL;
    if (strlen(name) >= LLM_CKPT_NAME_MAX || !*name)
        return llm_err(st, LLM_EDATA, "safetensors: tensor name of %zu bytes (1..%d allowed)", strlen(name),
                       LLM_CKPT_NAME_MAX - 1);
    for (const unsigned char *p = (const unsigned char *)name; *p; p++)
        if (*p < 0x20 || *p == 0x7f)
            return llm_err(st, LLM_EDATA, "safetensors: tensor name with a control character");
    strcpy(t->name, name);
    json_t *dt = json_object_get(v, "dtype"), *sh = json_object_get(v, "shape"),
           *off = json_object_get(v, "data_offsets");
    if (!json_is_object(v) || json_object_size(v) != 3 || !json_is_string(dt) || !json_is_array(sh) ||
        !json_is_array(off) || json_array_size(off) != 2)
        why = "want exactly dtype, shape and data_offsets [begin, end]";
    else if (strlen(json_string_value(dt)) >= sizeof t->dtype || !llm_st_dtype_size(json_string_value(dt)))
        why = "unknown dtype";
    else if (json_array_size(sh) > LLM_CKPT_MAX_DIMS)
        why = "more than 8 dimensions";
    if (why)
        return llm_err(st, LLM_EDATA, "safetensors: tensor '%s': %s", name, why);
    strcpy(t->dtype, json_string_value(dt));
    t->ndim = (int)json_array_size(sh);
    uint64_t nel = 1, esz = (uint64_t)llm_st_dtype_size(t->dtype);
    for (int d = 0; d < t->ndim; d++) {
        json_t *x = json_array_get(sh, (size_t)d);
        if (!json_is_integer(x) || json_integer_value(x) < 0)
            return llm_err(st, LLM_EDATA, "safetensors: tensor '%s': shape entries must be integers >= 0", name);
        t->shape[d] = json_integer_value(x);
        if (t->shape[d] && nel > UINT64_MAX / (uint64_t)t->shape[d])
            return llm_err(st, LLM_EDATA, "safetensors: tensor '%s': element count overflows", name);
        nel *= (uint64_t)t->shape[d];
    }
    json_t *b = json_array_get(off, 0), *e = json_array_get(off, 1);
    if (!json_is_integer(b) || !json_is_integer(e) || json_integer_value(b) < 0 ||
        json_integer_value(e) < json_integer_value(b))
        return llm_err(st, LLM_EDATA, "safetensors: tensor '%s': data_offsets must be integers 0 <= begin <= end",
                       name);
    t->begin = (uint64_t)json_integer_value(b);
    t->end = (uint64_t)json_integer_value(e);
    if (t->end > dlen)
        return llm_err(st, LLM_EDATA, "safetensors: tensor '%s': data_offsets end %llu beyond the data (%llu bytes)",
                       name, (unsigned long long)t->end, (unsigned long long)dlen);
    if (nel > UINT64_MAX / esz || nel * esz != t->end - t->begin)
        return llm_err(st, LLM_EDATA, "safetensors: tensor '%s': %llu bytes for dtype %s and its shape",
                       name, (unsigned long long)(t->end - t->begin), t->dtype);
    return LLM_OK;
}

static int parse(llm_st_file *f, const unsigned char *buf, size_t len, llm_status *st)
{
    if (len < 8)
        return llm_err(st, LLM_EDATA, "safetensors: file of %zu bytes is too short", len);
    uint64_t n = 0;
    for (int i = 7; i >= 0; i--)
        n = n << 8 | buf[i];
    if (n < 2 || n > LLM_ST_MAX_HEADER || n > len - 8)
        return llm_err(st, LLM_EDATA, "safetensors: header length %llu is out of range (file %zu bytes)",
                       (unsigned long long)n, len);
    if (buf[8] != '{')
        return llm_err(st, LLM_EDATA, "safetensors: header does not start with '{'");
    uint64_t dlen = len - 8 - n;
    json_error_t jerr;
    json_t *root = json_loadb((const char *)buf + 8, (size_t)n, JSON_REJECT_DUPLICATES, &jerr);
    if (!root)
        return llm_err(st, LLM_EDATA, "safetensors: header JSON: %s (byte %d)", jerr.text, jerr.position);
    int rc = LLM_OK;
    if (!json_is_object(root) || json_object_size(root) > LLM_CKPT_MAX_TENSORS + 1) {
        rc = llm_err(st, LLM_EDATA, "safetensors: header is not an object of at most %u tensors",
                     LLM_CKPT_MAX_TENSORS);
        goto out;
    }
    f->t = calloc(json_object_size(root) + 1, sizeof *f->t);
    if (!f->t) {
        rc = llm_err(st, LLM_ENOMEM, "out of memory");
        goto out;
    }
    const char *key;
    json_t *v;
    json_object_foreach(root, key, v) {
        if (!strcmp(key, "__metadata__")) {
            const char *k2;
            json_t *v2;
            if (!json_is_object(v)) {
                rc = llm_err(st, LLM_EDATA, "safetensors: __metadata__ is not an object");
                goto out;
            }
            json_object_foreach(v, k2, v2) if (!json_is_string(v2)) {
                rc = llm_err(st, LLM_EDATA, "safetensors: __metadata__ '%.64s' is not a string", k2);
                goto out;
            }
            continue;
        }
        if ((rc = parse_entry(&f->t[f->n], key, v, dlen, st)))
            goto out;
        f->t[f->n].data = buf + 8 + n + f->t[f->n].begin;
        f->n++;
    }
    if ((unsigned)f->n > LLM_CKPT_MAX_TENSORS) {   /* the +1 above is for __metadata__ only */
        rc = llm_err(st, LLM_EDATA, "safetensors: more than %u tensors", LLM_CKPT_MAX_TENSORS);
        goto out;
    }
    /* the tensors must tile the data: sort by offset, then no gap, overlap or tail */
    llm_st_tensor *s = malloc(sizeof *s * ((size_t)f->n + 1));
    if (!s) {
        rc = llm_err(st, LLM_ENOMEM, "out of memory");
        goto out;
    }
    memcpy(s, f->t, sizeof *s * (size_t)f->n);
    qsort(s, (size_t)f->n, sizeof *s, by_begin);
    uint64_t at = 0;
    for (int i = 0; i < f->n && !rc; i++) {
        if (s[i].begin != at)
            rc = llm_err(st, LLM_EDATA, "safetensors: tensor '%s': data at %llu, expected %llu (gap or overlap)",
                         s[i].name, (unsigned long long)s[i].begin, (unsigned long long)at);
        at = s[i].end;
    }
    free(s);
    if (!rc && at != dlen)
        rc = llm_err(st, LLM_EDATA, "safetensors: %llu bytes after the last tensor",
                     (unsigned long long)(dlen - at));
out:
    json_decref(root);
    return rc;
}

int llm_st_open_mem(llm_st_file **out, const void *buf, size_t len, llm_status *st)
{
    llm_st_file *f = calloc(1, sizeof *f);
    if (!f)
        return llm_err(st, LLM_ENOMEM, "out of memory");
    int rc = parse(f, buf, len, st);
    if (rc) {
        llm_st_close(f);
        return rc;
    }
    *out = f;
    return LLM_OK;
}

int llm_st_open(llm_st_file **out, const char *path, llm_status *st)
{
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return llm_err(st, LLM_ENOINPUT, "cannot open '%s': %s", path, strerror(errno));
    struct stat sb;
    if (fstat(fd, &sb) || !S_ISREG(sb.st_mode)) {
        close(fd);
        return llm_err(st, LLM_ENOINPUT, "'%s' is not a regular file", path);
    }
    size_t len = (size_t)sb.st_size;
    void *map = len ? mmap(NULL, len, PROT_READ, MAP_PRIVATE, fd, 0) : NULL;
    close(fd);
    if (len && map == MAP_FAILED)
        return llm_err(st, LLM_EIO, "cannot map '%s': %s", path, strerror(errno));
    int rc = llm_st_open_mem(out, map ? map : "", len, st);
    if (rc) {
        if (map)
            munmap(map, len);
        return llm_err_prefix(st, "%s", path);
    }
    (*out)->map = map;
    (*out)->maplen = len;
    return LLM_OK;
}

void llm_st_close(llm_st_file *f)
{
    if (!f)
        return;
    if (f->map)
        munmap(f->map, f->maplen);
    free(f->t);
    free(f);
}

int llm_st_count(const llm_st_file *f) { return f->n; }
const llm_st_tensor *llm_st_get(const llm_st_file *f, int i) { return i >= 0 && i < f->n ? &f->t[i] : NULL; }

const llm_st_tensor *llm_st_find(const llm_st_file *f, const char *name)
{
    for (int i = 0; i < f->n; i++)
        if (!strcmp(f->t[i].name, name))
            return &f->t[i];
    return NULL;
}
