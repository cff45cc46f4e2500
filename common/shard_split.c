/* shard_split.c — cut a GPT-2 checkpoint into tensor- and pipeline-parallel shards
 * (the layout is described in common/shard.h). */
#include "common/shard.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <zlib.h>

#include "common/ckpt.h"
#include "common/fsutil.h"
#include "common/model.h"
#include "common/tree.h"

/* Bytes of n elements of dt starting at element e (block types: whole blocks). */
static uint64_t span(int dt, uint64_t n)
{
    uint64_t b = 0;
    llm_dtype_nbytes((llm_dtype)dt, n, &b);
    return b;
}

static int is_block(int dt) { return dt == LLM_DT_Q8_0 || dt == LLM_DT_Q4_0; }

int llm_shard_piece_ok(int dt, int ndim, const int64_t *shape, llm_split_kind kind, int parts,
                       int64_t begin, int64_t end, int64_t *pshape)
{
    if (ndim < 1 || ndim > LLM_CKPT_MAX_DIMS || begin < 0 || end <= begin || parts < 1)
        return -1;
    int64_t inner = 1;
    for (int d = 1; d < ndim; d++)
        inner *= shape[d];
    for (int d = 0; d < ndim; d++)
        pshape[d] = shape[d];
    if (kind == LLM_SPLIT_ROWS) {
        if (shape[0] % parts || end > shape[0] / parts)
            return -1;
        pshape[0] = (end - begin) * parts;
        if (is_block(dt) && ((begin * inner) % 32 || ((end - begin) * inner) % 32 ||
                             ((shape[0] / parts) * inner) % 32))
            return -1;
        return 0;
    }
    if (kind == LLM_SPLIT_COLS) {
        if (ndim != 2 || end > shape[1])
            return -1;
        pshape[1] = end - begin;
        if (is_block(dt) && (shape[1] % 32 || begin % 32 || (end - begin) % 32))
            return -1;
        return 0;
    }
    return -1;
}

void llm_shard_copy_piece(void *full, void *piece, int dt, int ndim, const int64_t *shape,
                          llm_split_kind kind, int parts, int64_t begin, int64_t end,
                          int to_piece)
{
    unsigned char *f = full, *p = piece;
    uint64_t inner = 1;
    for (int d = 1; d < ndim; d++)
        inner *= (uint64_t)shape[d];
    if (kind == LLM_SPLIT_ROWS) {
        uint64_t chunk = (uint64_t)shape[0] / (uint64_t)parts;
        uint64_t n = span(dt, (uint64_t)(end - begin) * inner);
        for (int k = 0; k < parts; k++) {
            unsigned char *fp = f + span(dt, ((uint64_t)k * chunk + (uint64_t)begin) * inner);
            if (to_piece)
                memcpy(p, fp, n);
            else
                memcpy(fp, p, n);
            p += n;
        }
        return;
    }
    uint64_t K = (uint64_t)shape[1], n = span(dt, (uint64_t)(end - begin));
    for (int64_t r = 0; r < shape[0]; r++) {
        unsigned char *fp = f + span(dt, (uint64_t)r * K + (uint64_t)begin);
        if (to_piece)
            memcpy(p, fp, n);
        else
            memcpy(fp, p, n);
        p += n;
    }
}

int llm_shard_parse_layers(const char *s, int *v, int max, int *n, llm_status *st)
{
    *n = 0;
    const char *p = s;
    while (*p) {
        char *e;
        long x = strtol(p, &e, 10);
        if (e == p || x < 1 || x > 1000000 || (*e && *e != ',') || *n >= max)
            return llm_err(st, LLM_EUSAGE, "--pp-layers '%s': want stage sizes like 5,7 (each >= 1)", s);
        v[(*n)++] = (int)x;
        p = *e ? e + 1 : e;
        if (*e && !*p)
            return llm_err(st, LLM_EUSAGE, "--pp-layers '%s': trailing comma", s);
    }
    if (!*n)
        return llm_err(st, LLM_EUSAGE, "--pp-layers: empty list");
    return LLM_OK;
}

/* Where a source tensor goes.  stage: a layer index, or STAGE_FIRST, STAGE_EMB (first
 * and last: the tied wte), STAGE_LAST, STAGE_ALL. */
enum { STAGE_FIRST = -1, STAGE_EMB = -2, STAGE_LAST = -3, STAGE_ALL = -4 };
typedef struct {
    llm_split_kind kind;
    int parts;
    int stage;
    int first_only;   /* only on tp rank 0 of stage 0 (unknown tensors) */
} rule;

static int classify(const char *name, const llm_model_config *cfg, rule *r, llm_status *st)
{
    const char *b = name;
    if (!strncmp(b, "opt.m.", 6) || !strncmp(b, "opt.v.", 6))
        b += 6;
    *r = (rule){LLM_SPLIT_REPL, 1, STAGE_ALL, 0};
    if (!strncmp(b, "h.", 2) && b[2] >= '0' && b[2] <= '9') {
        char *e;
        long l = strtol(b + 2, &e, 10);
        if (*e != '.' || l >= cfg->n_layer)
            return llm_err(st, LLM_EDATA, "tensor '%s': no layer %ld in a %d-layer model", name, l,
                           cfg->n_layer);
        const char *sfx = e + 1;
        r->stage = (int)l;
        if (!strcmp(sfx, "attn.c_attn.weight") || !strcmp(sfx, "attn.c_attn.bias"))
            r->kind = LLM_SPLIT_ROWS, r->parts = 3;
        else if (!strcmp(sfx, "mlp.c_fc.weight") || !strcmp(sfx, "mlp.c_fc.bias"))
            r->kind = LLM_SPLIT_ROWS;
        else if (!strcmp(sfx, "attn.c_proj.weight") || !strcmp(sfx, "mlp.c_proj.weight"))
            r->kind = LLM_SPLIT_COLS;
        else if (!strcmp(sfx, "attn.c_proj.bias") || !strcmp(sfx, "mlp.c_proj.bias"))
            r->kind = LLM_SPLIT_RANK0;
        return LLM_OK;
    }
    if (!strcmp(b, "wte"))
        r->kind = LLM_SPLIT_ROWS, r->stage = STAGE_EMB;
    else if (!strcmp(b, "wpe"))
        r->stage = STAGE_FIRST;
    else if (!strncmp(b, "ln_f.", 5))
        r->stage = STAGE_LAST;
    else if (strncmp(name, "tokenizer.", 10))
        r->kind = LLM_SPLIT_RANK0, r->stage = STAGE_FIRST, r->first_only = 1;
    return LLM_OK;
}

/* A model parameter (or its optimizer moment) must have the model's shape: a wrong one
 * would be cut as if it were right.  Other tensors go by their rule. */
static int check_shape(const llm_model_config *cfg, const llm_tensor *t,
                       llm_status *st)
{
    const char *b = t->name;
    if (!strncmp(b, "opt.m.", 6) || !strncmp(b, "opt.v.", 6))
        b += 6;
    llm_status s = {0};
    int rc = llm_model_check_shape(cfg, b, t, &s);
    if (rc == LLM_EUSAGE)
        return LLM_OK;   /* not a parameter */
    if (rc == LLM_EDATA)
        return llm_err(st, rc, "%s%s%s", b != t->name ? t->name : "", b != t->name ? ": " : "", s.msg);
    return rc ? llm_err(st, rc, "%s", s.msg) : LLM_OK;
}

static int on_stage(const rule *r, int j, int pp, const int *lb)
{
    switch (r->stage) {
    case STAGE_ALL: return 1;
    case STAGE_FIRST: return j == 0;
    case STAGE_LAST: return j == pp - 1;
    case STAGE_EMB: return j == 0 || j == pp - 1;
    default: return r->stage >= lb[j] && r->stage < lb[j + 1];
    }
}

/* Identity of the source: crc32 over every tensor's name, dtype, shape and crc32. */
static uint32_t source_id(const llm_ckpt *c)
{
    uLong h = crc32(0, NULL, 0);
    for (int i = 0; i < llm_ckpt_count(c); i++) {
        const llm_tensor *t = llm_ckpt_tensor(c, i);
        h = crc32(h, (const Bytef *)t->name, (uInt)strlen(t->name) + 1);
        uint32_t w[2] = {(uint32_t)t->dtype, t->crc32};
        h = crc32(h, (const Bytef *)w, sizeof w);
        h = crc32(h, (const Bytef *)t->shape, (uInt)(sizeof(int64_t) * (size_t)t->ndim));
    }
    return (uint32_t)h;
}

static llm_node *shape_node(int ndim, const int64_t *shape)
{
    llm_node *s = llm_node_new_seq();
    for (int d = 0; s && d < ndim; d++)
        if (llm_node_append(s, llm_node_new_int(shape[d]))) {
            llm_node_free(s);
            return NULL;
        }
    return s;
}

static const char *kind_name(llm_split_kind k)
{
    static const char *const n[] = {"replicated", "rank0", "rows", "cols"};
    return n[k];
}

typedef struct {
    const llm_ckpt *c;
    const llm_model_config *cfg;
    const rule *rules;
    int tp, pp;
    const int *lb;        /* stage j owns layers [lb[j], lb[j+1]) */
    uint32_t src;
    const char *prefix;
} split_ctx;

static int write_one(const split_ctx *x, int i, int j, llm_status *st)
{
    llm_ckpt_writer *w = NULL;
    int nt = llm_ckpt_count(x->c), rc;
    void **bufs = calloc((size_t)nt + 1, sizeof *bufs);
    llm_node *sec = llm_node_new_map(), *list = llm_node_new_seq();
    if (!bufs || !sec || !list) {
        rc = llm_err(st, LLM_ENOMEM, "out of memory");
        goto out;
    }
    if ((rc = llm_ckpt_writer_new(&w, st)))
        goto out;
    const llm_node *hdr = llm_ckpt_header(x->c);
    for (int k = 0; k < hdr->n; k++) {
        const llm_node *s = hdr->items[k];
        if (!s->key || !strcmp(s->key, "tensors"))
            continue;
        llm_node *cp = llm_node_copy(s);
        if (!cp) {
            rc = llm_err(st, LLM_ENOMEM, "out of memory");
            goto out;
        }
        if ((rc = llm_ckpt_set_section(w, s->key, cp, st)))
            goto out;
    }
    char src[16];
    snprintf(src, sizeof src, "%08x", x->src);
    if (llm_node_set_int(sec, "tp_rank", i) || llm_node_set_int(sec, "tp_size", x->tp) ||
        llm_node_set_int(sec, "pp_rank", j) || llm_node_set_int(sec, "pp_size", x->pp) ||
        llm_node_set_int(sec, "layer_begin", x->lb[j]) || llm_node_set_int(sec, "layer_end", x->lb[j + 1]) ||
        llm_node_set_int(sec, "n_layer", x->cfg->n_layer) || llm_node_set_str(sec, "source", src) ||
        llm_node_set_int(sec, "source_tensors", nt)) {
        rc = llm_err(st, LLM_ENOMEM, "out of memory");
        goto out;
    }
    for (int k = 0; k < nt; k++) {
        const llm_tensor *t = llm_ckpt_tensor(x->c, k);
        const rule *r = &x->rules[k];
        if (!on_stage(r, j, x->pp, x->lb) || (r->kind == LLM_SPLIT_RANK0 && i != 0) ||
            (r->first_only && j != 0))
            continue;
        llm_node *e = llm_node_new_map();
        if (!e || llm_node_append(list, e) || llm_node_set_str(e, "name", t->name) ||
            llm_node_set_int(e, "index", k) || llm_node_set_str(e, "split", kind_name(r->kind)) ||
            llm_node_set(e, "shape", shape_node(t->ndim, t->shape))) {
            rc = llm_err(st, LLM_ENOMEM, "out of memory");
            goto out;
        }
        unsigned fl = t->compressed ? LLM_CKPT_ZLIB : 0;
        if (r->kind == LLM_SPLIT_REPL || r->kind == LLM_SPLIT_RANK0) {
            if ((rc = llm_ckpt_add(w, t->name, t->dtype, t->ndim, t->shape, t->data, fl, st)))
                goto out;
            continue;
        }
        int axis = r->kind == LLM_SPLIT_COLS;
        int64_t piece = t->shape[axis] / r->parts / x->tp, b = piece * i, ps[LLM_CKPT_MAX_DIMS];
        if (llm_node_set_int(e, "axis", axis) || llm_node_set_int(e, "parts", r->parts) ||
            llm_node_set_int(e, "begin", b) || llm_node_set_int(e, "end", b + piece)) {
            rc = llm_err(st, LLM_ENOMEM, "out of memory");
            goto out;
        }
        llm_shard_piece_ok(t->dtype, t->ndim, t->shape, r->kind, r->parts, b, b + piece, ps);
        if (!(bufs[k] = malloc(t->nbytes / (uint64_t)x->tp + 1))) {
            rc = llm_err(st, LLM_ENOMEM, "tensor '%s': out of memory", t->name);
            goto out;
        }
        llm_shard_copy_piece((void *)t->data, bufs[k], t->dtype, t->ndim, t->shape, r->kind, r->parts,
                             b, b + piece, 1);
        if ((rc = llm_ckpt_add(w, t->name, t->dtype, t->ndim, ps, bufs[k], fl, st)))
            goto out;
    }
    if (llm_node_set(sec, "tensors", list)) {
        list = NULL;
        rc = llm_err(st, LLM_ENOMEM, "out of memory");
        goto out;
    }
    list = NULL;
    rc = llm_ckpt_set_section(w, "shard", sec, st);
    sec = NULL;
    if (rc)
        goto out;
    char path[4200];
    if ((size_t)snprintf(path, sizeof path, "%s-tp%d-pp%d.llmk", x->prefix, i, j) >= sizeof path) {
        rc = llm_err(st, LLM_EUSAGE, "output prefix too long");
        goto out;
    }
    rc = llm_ckpt_write(w, path, st);
out:
    llm_ckpt_writer_free(w);
    llm_node_free(sec);
    llm_node_free(list);
    for (int k = 0; bufs && k < nt; k++)
        free(bufs[k]);
    free(bufs);
    return rc;
}

/* Every tensor can be cut as its rule says, for this tp. */
static int check_cuts(const llm_ckpt *c, const rule *rules, int tp, llm_status *st)
{
    for (int k = 0; k < llm_ckpt_count(c); k++) {
        const llm_tensor *t = llm_ckpt_tensor(c, k);
        const rule *r = &rules[k];
        if (r->kind != LLM_SPLIT_ROWS && r->kind != LLM_SPLIT_COLS)
            continue;
        int axis = r->kind == LLM_SPLIT_COLS;
        int64_t ps[LLM_CKPT_MAX_DIMS];
        if (t->ndim <= axis || t->ndim > 2 || t->shape[axis] % ((int64_t)r->parts * tp))
            return llm_err(st, LLM_EUSAGE, "tensor '%s': dimension %d cannot be cut into %d x %d parts",
                           t->name, axis, r->parts, tp);
        int64_t piece = t->shape[axis] / r->parts / tp;
        for (int i = 0; i < tp; i++)
            if (llm_shard_piece_ok(t->dtype, t->ndim, t->shape, r->kind, r->parts, piece * i,
                                   piece * (i + 1), ps))
                return llm_err(st, LLM_EUSAGE,
                               "tensor '%s' (%s): --tp %d would cut its blocks of 32 elements",
                               t->name, llm_dtype_name(t->dtype), tp);
    }
    return LLM_OK;
}

int llm_shard_split(const char *in, int tp, int pp, const int *layers, const char *prefix,
                    llm_status *st)
{
    if (tp < 1 || tp > LLM_SHARD_MAX_TP || pp < 1 || pp > LLM_SHARD_MAX_PP)
        return llm_err(st, LLM_EUSAGE, "--tp and --pp must be in 1..%d", LLM_SHARD_MAX_TP);
    llm_ckpt *c;
    int rc = llm_ckpt_open(&c, in, 0, st);   /* its messages name the file */
    if (rc)
        return rc;
    llm_model_config cfg;
    rule *rules = NULL;
    int *lb = NULL, writing = 0;
    if (llm_ckpt_section(c, "shard")) {
        rc = llm_err(st, LLM_EDATA, "already a shard (merge it first)");
        goto out;
    }
    const llm_node *ms = llm_ckpt_section(c, "model");
    if (!ms) {
        rc = llm_err(st, LLM_EDATA, "no model section");
        goto out;
    }
    if ((rc = llm_model_config_parse(ms, &cfg, st)))
        goto out;
    if (cfg.n_head % tp) {
        rc = llm_err(st, LLM_EUSAGE, "n_head %d is not divisible by --tp %d", cfg.n_head, tp);
        goto out;
    }
    if (cfg.padded_vocab % tp) {
        rc = llm_err(st, LLM_EUSAGE, "padded vocabulary %d is not divisible by --tp %d", cfg.padded_vocab, tp);
        goto out;
    }
    if (pp > cfg.n_layer) {
        rc = llm_err(st, LLM_EUSAGE, "--pp %d is more stages than the model's %d layers", pp, cfg.n_layer);
        goto out;
    }
    lb = calloc((size_t)pp + 1, sizeof *lb);
    rules = calloc((size_t)llm_ckpt_count(c) + 1, sizeof *rules);
    if (!lb || !rules) {
        rc = llm_err(st, LLM_ENOMEM, "out of memory");
        goto out;
    }
    for (int j = 0; j < pp; j++)
        lb[j + 1] = lb[j] + (layers ? layers[j] : cfg.n_layer / pp + (j < cfg.n_layer % pp));
    if (lb[pp] != cfg.n_layer) {
        rc = llm_err(st, LLM_EUSAGE, "--pp-layers add up to %d, the model has %d layers", lb[pp], cfg.n_layer);
        goto out;
    }
    for (int k = 0; k < llm_ckpt_count(c); k++)
        if ((rc = classify(llm_ckpt_tensor(c, k)->name, &cfg, &rules[k], st)) ||
            (rc = check_shape(&cfg, llm_ckpt_tensor(c, k), st)))
            goto out;
    if ((rc = check_cuts(c, rules, tp, st)))
        goto out;
    /* -o shards/m: the shards' directory is made when missing (a set of files, as
     * llm-train's output directory and export's Hugging Face folder are); from here on an
     * error is the output's, not the model's */
    writing = 1;
    if ((rc = llm_mkdirs_parent(prefix, st)))
        goto out;
    split_ctx x = {c, &cfg, rules, tp, pp, lb, source_id(c), prefix};
    for (int j = 0; j < pp && !rc; j++)
        for (int i = 0; i < tp && !rc; i++)
            rc = write_one(&x, i, j, st);
out:
    if (!writing && (rc == LLM_EDATA || rc == LLM_EUSAGE))   /* the model's: named with the file */
        llm_err_prefix(st, "%s", in);
    free(rules);
    free(lb);
    llm_ckpt_close(c);
    return rc;
}
