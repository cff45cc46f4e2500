/* shard_info.c — `llm-shard info` and `llm-shard verify`. */
#include "common/shard_info.h"

#include <errno.h>
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "common/ckpt.h"

void llm_shard_tree_json(llm_json *j, const llm_node *n)
{
    if (n->kind == LLM_NODE_MAP) {
        llm_json_obj_begin(j);
        for (int i = 0; i < n->n; i++) {
            llm_json_key(j, n->items[i]->key);
            llm_shard_tree_json(j, n->items[i]);
        }
        llm_json_obj_end(j);
        return;
    }
    if (n->kind == LLM_NODE_SEQ) {
        llm_json_arr_begin(j);
        for (int i = 0; i < n->n; i++)
            llm_shard_tree_json(j, n->items[i]);
        llm_json_arr_end(j);
        return;
    }
    const char *v = n->value ? n->value : "";
    int64_t i64;
    double d;
    if (n->quoted)
        llm_json_str(j, v);
    else if (!llm_node_i64(n, &i64))
        llm_json_int(j, i64);
    else if (!llm_node_double(n, &d))
        llm_json_num(j, d);
    else if (!strcasecmp(v, "true") || !strcasecmp(v, "false"))
        llm_json_bool(j, !strcasecmp(v, "true"));
    else if (!*v || !strcmp(v, "~") || !strcasecmp(v, "null"))
        llm_json_null(j);
    else
        llm_json_str(j, v);
}

static void shape_str(const llm_tensor *t, char *buf, size_t n)
{
    size_t at = 0;
    at += (size_t)snprintf(buf, n, "[");
    for (int d = 0; d < t->ndim && at < n; d++)
        at += (size_t)snprintf(buf + at, n - at, "%s%" PRId64, d ? ", " : "", t->shape[d]);
    if (at < n)
        snprintf(buf + at, n - at, "]");
}

static int print_text(const llm_ckpt *c, const char *path, FILE *out, llm_status *st)
{
    const llm_node *h = llm_ckpt_header(c);
    int n = llm_ckpt_count(c);
    fprintf(out, "file: %s\nsize: %" PRIu64 " bytes, format version %u, %d tensor%s\n", path,
            llm_ckpt_file_size(c), LLM_CKPT_VERSION, n, n == 1 ? "" : "s");
    for (int i = 0; i < h->n; i++) {
        llm_node *sec = h->items[i];
        if (!strcmp(sec->key, "tensors"))
            continue;
        /* a one-entry mapping around the section prints "model:\n  arch: ..." */
        llm_node wrap = {.kind = LLM_NODE_MAP, .items = &sec, .n = 1, .cap = 1};
        char *y = NULL;
        size_t len = 0;
        int rc = llm_yaml_emit(&wrap, &y, &len, st);
        if (rc)
            return rc;
        fwrite(y, 1, len, out);
        free(y);
    }
    int wname = 4, wshape = 5;
    char sh[256];
    for (int i = 0; i < n; i++) {
        const llm_tensor *t = llm_ckpt_tensor(c, i);
        int l = (int)strlen(t->name);
        if (l > wname)
            wname = l > 48 ? 48 : l;
        shape_str(t, sh, sizeof sh);
        l = (int)strlen(sh);
        if (l > wshape)
            wshape = l > 32 ? 32 : l;
    }
    fprintf(out, "tensors:\n  %-*s  %-5s  %-*s  %12s  %12s  %s\n", wname, "NAME", "DTYPE", wshape, "SHAPE",
            "BYTES", "STORED", "COMPRESSED");
    for (int i = 0; i < n; i++) {
        const llm_tensor *t = llm_ckpt_tensor(c, i);
        shape_str(t, sh, sizeof sh);
        fprintf(out, "  %-*s  %-5s  %-*s  %12" PRIu64 "  %12" PRIu64 "  %s\n", wname, t->name,
                llm_dtype_name(t->dtype), wshape, sh, t->nbytes, t->stored, t->compressed ? "zlib" : "no");
    }
    return 0;
}

static void print_json(const llm_ckpt *c, const char *path, FILE *out)
{
    llm_json j;
    llm_json_init(&j, out, 1);
    llm_json_obj_begin(&j);
    llm_json_kstr(&j, "file", path);
    llm_json_kint(&j, "size", (int64_t)llm_ckpt_file_size(c));
    llm_json_kint(&j, "version", LLM_CKPT_VERSION);
    const llm_node *h = llm_ckpt_header(c);
    for (int i = 0; i < h->n; i++) {
        if (!strcmp(h->items[i]->key, "tensors"))
            continue;
        llm_json_key(&j, h->items[i]->key);
        llm_shard_tree_json(&j, h->items[i]);
    }
    llm_json_key(&j, "tensors");
    llm_json_arr_begin(&j);
    for (int i = 0; i < llm_ckpt_count(c); i++) {
        const llm_tensor *t = llm_ckpt_tensor(c, i);
        llm_json_obj_begin(&j);
        llm_json_kstr(&j, "name", t->name);
        llm_json_kstr(&j, "dtype", llm_dtype_name(t->dtype));
        llm_json_key(&j, "shape");
        llm_json_arr_begin(&j);
        for (int d = 0; d < t->ndim; d++)
            llm_json_int(&j, t->shape[d]);
        llm_json_arr_end(&j);
        llm_json_kint(&j, "nbytes", (int64_t)t->nbytes);
        llm_json_kint(&j, "stored", (int64_t)t->stored);
        llm_json_kint(&j, "offset", (int64_t)t->offset);
        llm_json_kint(&j, "crc32", t->crc32);
        llm_json_kbool(&j, "compressed", t->compressed);
        llm_json_obj_end(&j);
    }
    llm_json_arr_end(&j);
    llm_json_obj_end(&j);
    fputc('\n', out);
}

static int finish(FILE *out, llm_status *st)
{
    if (fflush(out) != 0 || ferror(out))
        return llm_err(st, LLM_EIO, "cannot write output: %s", strerror(errno));
    return 0;
}

int llm_shard_info(const char *path, int json, FILE *out, llm_status *st)
{
    llm_ckpt *c;
    int rc = llm_ckpt_open(&c, path, LLM_CKPT_HEADER_ONLY, st);
    if (rc)
        return rc;
    const char *shown = strcmp(path, "-") ? path : "<stdin>";
    if (json)
        print_json(c, shown, out);
    else
        rc = print_text(c, shown, out, st);
    llm_ckpt_close(c);
    return rc ? rc : finish(out, st);
}

int llm_shard_verify(const char *path, int quiet, FILE *out, llm_status *st)
{
    llm_ckpt *c;
    int rc = llm_ckpt_open(&c, path, 0, st);
    if (rc)
        return rc;
    if (!quiet)
        fprintf(out, "%s: ok (%d tensor%s, %" PRIu64 " bytes)\n", strcmp(path, "-") ? path : "<stdin>",
                llm_ckpt_count(c), llm_ckpt_count(c) == 1 ? "" : "s", llm_ckpt_file_size(c));
    llm_ckpt_close(c);
    return finish(out, st);
}
