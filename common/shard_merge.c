/* shard_merge.c — reassemble the shards written by llm_shard_split (common/shard.h).
 * Every shard is hostile input: its shard: section is checked against the others and
 * against the tensors it actually holds before any byte is copied. */
#include "common/shard.h"

#include <stdlib.h>
#include <string.h>

#include "common/ckpt.h"
#include "common/tree.h"

typedef struct {
    const char *name;        /* borrowed from the first shard that has it */
    int dtype, ndim, kind, parts;
    int64_t shape[LLM_CKPT_MAX_DIMS];
    const void *whole;       /* replicated / rank0: the data of the first copy */
    uint64_t nbytes;
    unsigned char *buf;      /* rows / cols: the reassembled tensor */
    const void **have;       /* rows / cols: the first piece seen for each tp rank */
    int compressed;
    int qz;                  /* llm-quantize's mark: 0 none, 1 converted, 2 kept */
} full_t;

typedef struct {
    int tp_rank, tp_size, pp_rank, pp_size, lbeg, lend, nsrc;
    const char *source;
    const llm_node *list;
    const llm_node *dropped;   /* source indices llm-quantize dropped, or NULL */
    const char *quant;         /* the quant: section's type, or NULL */
} shard_hdr;

static int get_int(const llm_node *m, const char *k, int lo, int hi, int *out)
{
    int64_t v;
    if (llm_node_i64(llm_node_get(m, k), &v) || v < lo || v > hi)
        return -1;
    *out = (int)v;
    return 0;
}

static int read_hdr(const llm_ckpt *c, const char *path, shard_hdr *h, llm_status *st)
{
    const llm_node *s = llm_ckpt_section(c, "shard");
    if (!s)
        return llm_err(st, LLM_EDATA, "'%s' is not a shard (no shard section)", path);
    if (get_int(s, "tp_size", 1, LLM_SHARD_MAX_TP, &h->tp_size) ||
        get_int(s, "pp_size", 1, LLM_SHARD_MAX_PP, &h->pp_size) ||
        get_int(s, "tp_rank", 0, h->tp_size - 1, &h->tp_rank) ||
        get_int(s, "pp_rank", 0, h->pp_size - 1, &h->pp_rank) ||
        get_int(s, "layer_begin", 0, 1 << 20, &h->lbeg) || get_int(s, "layer_end", 0, 1 << 20, &h->lend) ||
        get_int(s, "source_tensors", 0, (int)LLM_CKPT_MAX_TENSORS, &h->nsrc) ||
        !(h->source = llm_node_str(llm_node_get(s, "source"))))
        return llm_err(st, LLM_EDATA, "'%s': shard section lacks or has a bad rank, size, layer range or source",
                       path);
    h->list = llm_node_get(s, "tensors");
    if (!h->list || h->list->kind != LLM_NODE_SEQ)
        return llm_err(st, LLM_EDATA, "'%s': shard section has no tensors list", path);
    h->dropped = llm_node_get(s, "dropped");
    if (h->dropped && h->dropped->kind != LLM_NODE_SEQ)
        return llm_err(st, LLM_EDATA, "'%s': shard section's dropped is not a list", path);
    const llm_node *q = llm_ckpt_section(c, "quant");
    h->quant = q ? llm_node_str(llm_node_get(q, "type")) : NULL;
    if (q && !h->quant)
        return llm_err(st, LLM_EDATA, "'%s': quant section has no type", path);
    return LLM_OK;
}

static int kind_of(const char *s)
{
    static const char *const n[] = {"replicated", "rank0", "rows", "cols"};
    for (int k = 0; s && k < 4; k++)
        if (!strcmp(s, n[k]))
            return k;
    return -1;
}

/* One entry of a shard's tensor list: check it and put its piece in place. */
static int take(full_t *F, const shard_hdr *h, const llm_ckpt *c, const char *path,
                const llm_node *e, llm_status *st)
{
    const char *name = llm_node_str(llm_node_get(e, "name"));
    int idx, kind = kind_of(llm_node_str(llm_node_get(e, "split")));
    const llm_node *sh = llm_node_get(e, "shape"), *qn = llm_node_get(e, "quant");
    const char *qs = qn ? llm_node_str(qn) : NULL;
    int qz = !qn ? 0 : qs && !strcmp(qs, "converted") ? 1 : qs && !strcmp(qs, "kept") ? 2 : -1;
    if (!name || qz < 0 || get_int(e, "index", 0, h->nsrc - 1, &idx) || kind < 0 || !sh ||
        sh->kind != LLM_NODE_SEQ || sh->n < 1 || sh->n > LLM_CKPT_MAX_DIMS)
        return llm_err(st, LLM_EDATA, "'%s': malformed shard tensor entry (line %d)", path, e->line);
    const llm_tensor *t = llm_ckpt_find(c, name);
    if (!t)
        return llm_err(st, LLM_EDATA, "'%s': tensor '%s' listed in the shard section is missing", path, name);
    int64_t shape[LLM_CKPT_MAX_DIMS], ps[LLM_CKPT_MAX_DIMS];
    uint64_t nel = 1;
    for (int d = 0; d < sh->n; d++) {
        if (llm_node_i64(sh->items[d], &shape[d]) || shape[d] < 0 || (shape[d] && nel > UINT64_MAX / (uint64_t)shape[d]))
            return llm_err(st, LLM_EDATA, "'%s': tensor '%s': bad full shape", path, name);
        nel *= (uint64_t)shape[d];
    }
    uint64_t nbytes;
    if (llm_dtype_nbytes(t->dtype, nel, &nbytes) || nbytes > (1ull << 40))
        return llm_err(st, LLM_EDATA, "'%s': tensor '%s': full shape does not fit its dtype", path, name);
    full_t *f = &F[idx];
    if (!f->name) {
        f->name = t->name, f->dtype = t->dtype, f->ndim = sh->n, f->kind = kind, f->nbytes = nbytes;
        f->compressed = t->compressed;
        memcpy(f->shape, shape, sizeof(int64_t) * (size_t)sh->n);
        if (kind >= LLM_SPLIT_ROWS) {
            if (t->nbytes * (uint64_t)h->tp_size != nbytes)
                return llm_err(st, LLM_EDATA, "'%s': tensor '%s': piece size does not fit the full shape",
                               path, name);
            f->buf = malloc(nbytes ? nbytes : 1);
            f->have = calloc((size_t)h->tp_size, sizeof *f->have);
            if (!f->buf || !f->have)
                return llm_err(st, LLM_ENOMEM, "tensor '%s': out of memory", name);
        }
    } else if (strcmp(f->name, name) || f->dtype != (int)t->dtype || f->ndim != sh->n || f->kind != kind ||
               memcmp(f->shape, shape, sizeof(int64_t) * (size_t)sh->n)) {
        return llm_err(st, LLM_EDATA, "'%s': tensor %d ('%s') disagrees with the other shards", path, idx, name);
    }
    if (qz == 1 || !f->qz)   /* converted on any shard: converted */
        f->qz = qz;
    if (kind == LLM_SPLIT_REPL || kind == LLM_SPLIT_RANK0) {
        if (kind == LLM_SPLIT_RANK0 && h->tp_rank != 0)
            return llm_err(st, LLM_EDATA, "'%s': rank0 tensor '%s' on tp rank %d", path, name, h->tp_rank);
        if (t->nbytes != nbytes || t->ndim != sh->n || memcmp(t->shape, shape, sizeof(int64_t) * (size_t)sh->n))
            return llm_err(st, LLM_EDATA, "'%s': tensor '%s': shape differs from the shard section", path, name);
        if (!f->whole)
            f->whole = t->data;
        else if (nbytes && memcmp(f->whole, t->data, nbytes))
            return llm_err(st, LLM_EDATA, "'%s': copies of tensor '%s' differ between shards", path, name);
        return LLM_OK;
    }
    int axis, parts;
    int64_t b, en;
    if (get_int(e, "axis", 0, 1, &axis) || axis != (kind == LLM_SPLIT_COLS) ||
        get_int(e, "parts", 1, 1 << 20, &parts) || llm_node_i64(llm_node_get(e, "begin"), &b) ||
        llm_node_i64(llm_node_get(e, "end"), &en))
        return llm_err(st, LLM_EDATA, "'%s': tensor '%s': bad axis, parts or range", path, name);
    if (!f->parts)
        f->parts = parts;
    int64_t piece = f->shape[axis] / parts / h->tp_size;
    if (parts != f->parts || f->shape[axis] % ((int64_t)parts * h->tp_size) || b != piece * h->tp_rank ||
        en != b + piece ||
        llm_shard_piece_ok(t->dtype, sh->n, shape, (llm_split_kind)kind, parts, b, en, ps))
        return llm_err(st, LLM_EDATA, "'%s': tensor '%s': range [%lld,%lld) is not tp rank %d's part", path,
                       name, (long long)b, (long long)en, h->tp_rank);
    if (t->ndim != sh->n || memcmp(t->shape, ps, sizeof(int64_t) * (size_t)sh->n))
        return llm_err(st, LLM_EDATA, "'%s': tensor '%s': piece shape disagrees with its range", path, name);
    if (f->have[h->tp_rank]) {
        if (t->nbytes && memcmp(f->have[h->tp_rank], t->data, t->nbytes))
            return llm_err(st, LLM_EDATA, "'%s': copies of tensor '%s' differ between stages", path, name);
        return LLM_OK;
    }
    f->have[h->tp_rank] = t->data ? t->data : (const void *)"";
    llm_shard_copy_piece(f->buf, (void *)t->data, f->dtype, f->ndim, f->shape, (llm_split_kind)kind, parts,
                         b, en, 0);
    return LLM_OK;
}

/* The quant: section of shards quantized one by one counts each shard's conversions:
 * the merged file's counts each source tensor once, as quantizing the merged model would
 * (the entries' quant: marks; none when the model was quantized before the split, and
 * then its counts stand).  0, or -1 when out of memory. */
static int requant(llm_node *q, const full_t *F, int nsrc)
{
    int conv = 0, kept = 0, marked = 0;
    for (int k = 0; k < nsrc; k++) {
        marked |= F[k].qz != 0;
        conv += F[k].qz == 1;
        kept += F[k].qz == 2;
    }
    if (!marked)
        return 0;
    /* in llm-quantize's order: type, converted, kept (when any), block */
    const llm_node *bl = llm_node_get(q, "block");
    llm_node *blk = bl ? llm_node_copy(bl) : NULL;
    if ((bl && !blk) || llm_node_set_int(q, "converted", conv)) {
        llm_node_free(blk);
        return -1;
    }
    llm_node_remove(q, "kept");
    llm_node_remove(q, "block");
    if (kept && llm_node_set_int(q, "kept", kept)) {
        llm_node_free(blk);
        return -1;
    }
    return blk ? llm_node_set(q, "block", blk) : 0;
}

int llm_shard_merge(const char *const *paths, int n, const char *out, llm_status *st)
{
    if (n < 1)
        return llm_err(st, LLM_EUSAGE, "no shards given");
    llm_ckpt **cs = calloc((size_t)n, sizeof *cs);
    shard_hdr *hs = calloc((size_t)n, sizeof *hs);
    full_t *F = NULL;
    const llm_ckpt **grid = NULL;
    llm_ckpt_writer *w = NULL;
    int rc = LLM_OK, nsrc = 0;
    if (!cs || !hs) {
        rc = llm_err(st, LLM_ENOMEM, "out of memory");
        goto out;
    }
    for (int i = 0; i < n && !rc; i++) {
        if ((rc = llm_ckpt_open(&cs[i], paths[i], 0, st)))
            break;   /* its messages name the file */
        rc = read_hdr(cs[i], paths[i], &hs[i], st);
        if (!rc && (hs[i].tp_size != hs[0].tp_size || hs[i].pp_size != hs[0].pp_size ||
                    hs[i].nsrc != hs[0].nsrc || strcmp(hs[i].source, hs[0].source)))
            rc = llm_err(st, LLM_EDATA, "'%s' comes from another split than '%s' (source, sizes differ)",
                         paths[i], paths[0]);
        else if (!rc && (!hs[i].quant != !hs[0].quant || (hs[i].quant && strcmp(hs[i].quant, hs[0].quant))))
            rc = llm_err(st, LLM_EDATA, "'%s' is %s%s, '%s' is %s%s: quantize every shard of a split "
                         "to the same type, or none", paths[i], hs[i].quant ? "quantized to " : "not quantized",
                         hs[i].quant ? hs[i].quant : "", paths[0], hs[0].quant ? "quantized to " : "not quantized",
                         hs[0].quant ? hs[0].quant : "");
    }
    if (rc)
        goto out;
    int tp = hs[0].tp_size, pp = hs[0].pp_size;
    nsrc = hs[0].nsrc;
    if (n != tp * pp) {
        rc = llm_err(st, LLM_EDATA, "%d shards given, the split has tp %d x pp %d = %d", n, tp, pp, tp * pp);
        goto out;
    }
    grid = calloc((size_t)n, sizeof *grid);
    F = calloc((size_t)nsrc + 1, sizeof *F);
    if (!grid || !F) {
        rc = llm_err(st, LLM_ENOMEM, "out of memory");
        goto out;
    }
    for (int i = 0; i < n; i++) {
        const llm_ckpt **g = &grid[hs[i].pp_rank * tp + hs[i].tp_rank];
        if (*g) {
            rc = llm_err(st, LLM_EDATA, "'%s': tp rank %d, pp rank %d given twice", paths[i], hs[i].tp_rank,
                         hs[i].pp_rank);
            goto out;
        }
        *g = cs[i];
    }
    for (int i = 0; i < n; i++)
        for (int k = 0; k < hs[i].list->n; k++)
            if ((rc = take(F, &hs[i], cs[i], paths[i], hs[i].list->items[k], st)))
                goto out;
    /* source tensors llm-quantize dropped from the shards that held them (opt.*): in no
     * shard's list, and then in none */
    for (int i = 0; i < n; i++)
        for (int k = 0; hs[i].dropped && k < hs[i].dropped->n; k++) {
            int idx;
            if (llm_node_int(hs[i].dropped->items[k], &idx) || idx < 0 || idx >= nsrc) {
                rc = llm_err(st, LLM_EDATA, "'%s': bad source index in the shard section's dropped list",
                             paths[i]);
                goto out;
            }
            if (F[idx].name) {
                rc = llm_err(st, LLM_EDATA, "'%s': tensor %d ('%s') was dropped from this shard but is in "
                             "another: quantize every shard of a split, or none", paths[i], idx, F[idx].name);
                goto out;
            }
            F[idx].qz = -1;
        }
    if ((rc = llm_ckpt_writer_new(&w, st)))
        goto out;
    const llm_ckpt *head = grid[0];
    const llm_node *hdr = llm_ckpt_header(head);
    for (int k = 0; k < hdr->n; k++) {
        const llm_node *s = hdr->items[k];
        if (!s->key || !strcmp(s->key, "tensors") || !strcmp(s->key, "shard"))
            continue;
        llm_node *cp = llm_node_copy(s);
        if (cp && !strcmp(s->key, "quant") && requant(cp, F, nsrc)) {
            llm_node_free(cp);
            cp = NULL;
        }
        if (!cp) {
            rc = llm_err(st, LLM_ENOMEM, "out of memory");
            goto out;
        }
        if ((rc = llm_ckpt_set_section(w, s->key, cp, st)))
            goto out;
    }
    for (int k = 0; k < nsrc; k++) {
        full_t *f = &F[k];
        if (f->qz < 0)
            continue;   /* dropped */
        if (!f->name) {
            rc = llm_err(st, LLM_EDATA, "source tensor %d is in no shard (a shard is missing)", k);
            goto out;
        }
        for (int r = 0; f->have && r < tp; r++)
            if (!f->have[r]) {
                rc = llm_err(st, LLM_EDATA, "tensor '%s': the part of tp rank %d is missing", f->name, r);
                goto out;
            }
        const void *data = f->buf ? f->buf : f->whole;
        if ((rc = llm_ckpt_add(w, f->name, (llm_dtype)f->dtype, f->ndim, f->shape, data,
                               f->compressed ? LLM_CKPT_ZLIB : 0, st)))
            goto out;
    }
    rc = llm_ckpt_write(w, out, st);
out:
    llm_ckpt_writer_free(w);
    for (int k = 0; F && k < nsrc; k++) {
        free(F[k].buf);
        free(F[k].have);
    }
    free(F);
    free(grid);
    for (int i = 0; cs && i < n; i++)
        llm_ckpt_close(cs[i]);
    free(cs);
    free(hs);
    return rc;
}
