/* safetensors_write.c — the safetensors writer. */
#include "common/safetensors.h"

#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct {
    char *name;
    char dtype[8];
    int ndim;
    int64_t shape[LLM_CKPT_MAX_DIMS];
    const void *data;
    uint64_t nbytes;
} entry;

struct llm_st_writer {
    entry *e;
    int n, cap;
};

int llm_st_writer_new(llm_st_writer **out, llm_status *st)
{
    if (!(*out = calloc(1, sizeof **out)))
        return llm_err(st, LLM_ENOMEM, "out of memory");
    return LLM_OK;
}

void llm_st_writer_free(llm_st_writer *w)
{
    if (!w)
        return;
    for (int i = 0; i < w->n; i++)
        free(w->e[i].name);
    free(w->e);
    free(w);
}

int llm_st_add(llm_st_writer *w, const char *name, const char *dtype, int ndim, const int64_t *shape,
               const void *data, uint64_t nbytes, llm_status *st)
{
    int es = llm_st_dtype_size(dtype);
    uint64_t nel = 1;
    for (int d = 0; d < ndim; d++)
        nel *= (uint64_t)shape[d];
    if (!*name || !es || ndim < 0 || ndim > LLM_CKPT_MAX_DIMS || nel * (uint64_t)es != nbytes ||
        !strcmp(name, "__metadata__"))
        return llm_err(st, LLM_EUSAGE, "safetensors: tensor '%s': bad name, dtype or size", name);
    if (w->n == w->cap) {
        int cap = w->cap ? 2 * w->cap : 64;
        entry *ne = realloc(w->e, sizeof *ne * (size_t)cap);
        if (!ne)
            return llm_err(st, LLM_ENOMEM, "out of memory");
        w->e = ne, w->cap = cap;
    }
    entry *e = &w->e[w->n];
    if (!(e->name = strdup(name)))
        return llm_err(st, LLM_ENOMEM, "out of memory");
    snprintf(e->dtype, sizeof e->dtype, "%s", dtype);
    e->ndim = ndim;
    memcpy(e->shape, shape, sizeof(int64_t) * (size_t)ndim);
    e->data = data;
    e->nbytes = nbytes;
    w->n++;
    return LLM_OK;
}

int llm_st_write(llm_st_writer *w, const char *path, llm_status *st)
{
    json_t *root = json_object(), *meta = json_object();
    int rc = LLM_OK;
    if (!root || !meta || json_object_set_new(meta, "format", json_string("pt")) ||
        json_object_set_new(root, "__metadata__", meta)) {
        json_decref(root);
        return llm_err(st, LLM_ENOMEM, "out of memory");
    }
    uint64_t at = 0;
    for (int i = 0; i < w->n; i++) {
        entry *e = &w->e[i];
        json_t *o = json_object(), *sh = json_array(), *off = json_array();
        for (int d = 0; d < e->ndim; d++)
            json_array_append_new(sh, json_integer(e->shape[d]));
        json_array_append_new(off, json_integer((json_int_t)at));
        json_array_append_new(off, json_integer((json_int_t)(at + e->nbytes)));
        at += e->nbytes;
        if (!o || json_object_set_new(o, "dtype", json_string(e->dtype)) || json_object_set_new(o, "shape", sh) ||
            json_object_set_new(o, "data_offsets", off) || json_object_set_new(root, e->name, o)) {
            json_decref(root);
            return llm_err(st, LLM_ENOMEM, "out of memory");
        }
    }
    char *js = json_dumps(root, JSON_COMPACT | JSON_PRESERVE_ORDER);
    json_decref(root);
    if (!js)
        return llm_err(st, LLM_ENOMEM, "out of memory");
    size_t jl = strlen(js), hl = (jl + 7) / 8 * 8;
    unsigned char len8[8];
    for (int i = 0; i < 8; i++)
        len8[i] = (unsigned char)((uint64_t)hl >> (8 * i));
    llm_afile a;
    if ((rc = llm_afile_open(&a, path, 0, st))) {
        free(js);
        return rc;
    }
    rc = llm_afile_put(&a, len8, 8, st);
    if (!rc)
        rc = llm_afile_put(&a, js, jl, st);
    if (!rc)
        rc = llm_afile_put(&a, "        ", hl - jl, st);
    for (int i = 0; i < w->n && !rc; i++)
        rc = llm_afile_put(&a, w->e[i].data, w->e[i].nbytes, st);
    free(js);
    if (rc) {
        llm_afile_abort(&a);
        return rc;
    }
    return llm_afile_commit(&a, st);
}
