/* quantize.c — the file-level rewrite behind llm-quantize (see quantize.h for which
 * tensors convert).  Conversion runs in parallel over fixed chunks of each tensor; error
 * tallies are merged in chunk order so reports do not depend on the thread count. */
#include "common/quantize.h"

#include <fnmatch.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include <omp.h>

#include "common/clock.h"
#include "common/json.h"
#include "common/tree.h"

/* Elements per parallel work item (a multiple of 32 so blocks never straddle items). */
#define CHUNK (1 << 16)

static int ends_with(const char *s, const char *suf)
{
    size_t a = strlen(s), b = strlen(suf);
    return a >= b && strcmp(s + a - b, suf) == 0;
}

static int is_float(llm_dtype dt)
{
    return dt == LLM_DT_F32 || dt == LLM_DT_F16 || dt == LLM_DT_BF16;
}

/* Decide what happens to tensor t; sets e->action/why/to. */
static void classify(const llm_tensor *t, const llm_quantize_opts *o, llm_qz_entry *e)
{
    e->from = e->to = t->dtype;
    e->action = LLM_QZ_COPY;
    if (strncmp(t->name, "opt.", 4) == 0) {
        e->action = LLM_QZ_DROP;
        e->why = "optimizer state";
        return;
    }
    for (int k = 0; k < o->nkeep; k++)
        if (fnmatch(o->keep[k], t->name, 0) == 0) {
            e->why = "--keep";
            return;
        }
    if (!(strcmp(t->name, "wte") == 0 || ends_with(t->name, ".weight"))) {
        e->why = strcmp(t->name, "wpe") == 0 ? "positional embedding" : "not a weight";
        return;
    }
    if (t->dtype == o->type && t->ndim == 2) {
        e->why = "already in the type";
        e->kept = 1;
        return;
    }
    if (!is_float(t->dtype)) {
        e->why = "not floating point";
        return;
    }
    if (t->ndim != 2) {
        e->why = t->ndim == 1 ? "1-D (norm)" : "not a matrix";
        return;
    }
    if (llm_quant_is_block(o->type) && t->shape[1] % 32) {
        e->why = "rows not a multiple of 32";
        return;
    }
    e->action = LLM_QZ_CONVERT;
    e->to = o->type;
    e->why = "";
}

/* Convert tensor t into out (e->bytes_out bytes), tallying the error when asked. */
static int convert(const llm_tensor *t, llm_qz_entry *e, void *out, int stats, int nt,
                   llm_status *st)
{
    uint64_t n = t->nelem, nch = (n + CHUNK - 1) / CHUNK;
    llm_quant_err *errs = stats ? calloc(nch ? nch : 1, sizeof *errs) : NULL;
    float *buf = malloc((size_t)nt * CHUNK * 2 * sizeof(float));
    uint64_t obs = 0;   /* output bytes per CHUNK elements */
    llm_dtype_nbytes(e->to, CHUNK, &obs);
    if (!buf || (stats && !errs)) {
        free(buf);
        free(errs);
        return llm_err(st, LLM_ENOMEM, "out of memory");
    }
    int64_t bad = -1;   /* first failing chunk */
    llm_status cst[1] = {{0}};
#pragma omp parallel for schedule(dynamic, 1) num_threads(nt) if (nt > 1 && nch > 1)
    for (uint64_t c = 0; c < nch; c++) {
        float *src = buf + (size_t)omp_get_thread_num() * CHUNK * 2, *dq = src + CHUNK;
        uint64_t i0 = c * CHUNK, m = n - i0 < CHUNK ? n - i0 : CHUNK;
        size_t isz = t->dtype == LLM_DT_F32 ? 4 : 2;
        const float *w = src;
        llm_status s = {0};
        if (t->dtype == LLM_DT_F32)
            w = (const float *)t->data + i0;
        else
            llm_quant_decode(t->dtype, (const char *)t->data + i0 * isz, src, m, &s);
        void *dst = (char *)out + c * obs;
        if (llm_quant_encode(e->to, w, dst, m, &s)) {
#pragma omp critical
            if (bad < 0 || (int64_t)c < bad) {
                bad = (int64_t)c;
                cst[0] = s;
            }
            continue;
        }
        if (stats) {
            llm_quant_decode(e->to, dst, dq, m, &s);
            llm_quant_err_add(&errs[c], w, dq, m);
        }
    }
    if (bad >= 0) {
        free(buf);
        free(errs);
        /* the element index in the message is relative to the chunk */
        return llm_err(st, cst[0].code, "tensor '%s': %s (in the chunk at element %lld)",
                       t->name, cst[0].msg, (long long)bad * CHUNK);
    }
    for (uint64_t c = 0; stats && c < nch; c++)
        llm_quant_err_merge(&e->err, &errs[c]);
    free(buf);
    free(errs);
    return LLM_OK;
}

/* Every top-level key but tensors, train, quant and shard (rewritten by shard_section),
 * mappings or not (llmk(5): other top-level keys are kept). */
static llm_node *header_copy_except(const llm_node *h, llm_ckpt_writer *w, llm_status *st)
{
    for (int k = 0; k < h->n; k++) {
        const char *key = h->items[k]->key;
        if (!strcmp(key, "tensors") || !strcmp(key, "train") || !strcmp(key, "quant") ||
            !strcmp(key, "shard"))
            continue;
        llm_node *cp = llm_node_copy(h->items[k]);
        if (!cp || llm_ckpt_set_section(w, key, cp, st))
            return NULL;
    }
    return (llm_node *)h;
}

/* The shard: section of a shard being quantized (common/shard.h), as llm_shard_merge
 * needs it: the entries of dropped tensors leave the list and their source indices join
 * `dropped`; each remaining entry says whether this run converted its tensor or found
 * it already in the type (`quant: converted|kept`), so that a merge counts each source
 * tensor once.  *cut counts the pieces left unconverted because the split cut their rows
 * below a multiple of 32 where the whole tensor's are not.  Returns the new section,
 * NULL when out of memory. */
static llm_node *shard_section(const llm_ckpt *ck, const llm_node *sec, const llm_quantize_opts *o,
                               int *cut)
{
    const llm_node *old = llm_node_get(sec, "tensors"), *od = llm_node_get(sec, "dropped");
    if (!old || old->kind != LLM_NODE_SEQ)   /* not a shard's: left for merge to refuse */
        return llm_node_copy(sec);
    llm_node *s = llm_node_copy(sec), *list = llm_node_new_seq(), *dropped = NULL;
    if (!s || !list || !(dropped = od ? llm_node_copy(od) : llm_node_new_seq()))
        goto fail;
    for (int k = 0; k < old->n; k++) {
        const llm_node *e = old->items[k];
        const char *name = llm_node_str(llm_node_get(e, "name"));
        const llm_tensor *t = name ? llm_ckpt_find(ck, name) : NULL;
        llm_qz_entry q = {0};
        if (t)
            classify(t, o, &q);
        if (t && q.action == LLM_QZ_DROP) {
            const llm_node *ix = llm_node_get(e, "index");
            if (ix && llm_node_append(dropped, llm_node_copy(ix)))
                goto fail;
            continue;
        }
        const llm_node *fs = llm_node_get(e, "shape");
        int64_t cols;
        if (t && q.why && !strcmp(q.why, "rows not a multiple of 32") && fs && fs->kind == LLM_NODE_SEQ &&
            fs->n == 2 && !llm_node_i64(fs->items[1], &cols) && cols % 32 == 0)
            (*cut)++;
        llm_node *c = llm_node_copy(e);
        if (!c || llm_node_append(list, c))
            goto fail;
        /* the mark is this run's: one left by an earlier run (a shard quantized again,
         * with --keep) would count a tensor this run leaves as it is */
        llm_node_remove(c, "quant");
        if (t && (q.action == LLM_QZ_CONVERT || q.kept) &&
            llm_node_set_str(c, "quant", q.action == LLM_QZ_CONVERT ? "converted" : "kept"))
            goto fail;
    }
    if (llm_node_set(s, "tensors", list)) {
        list = NULL;
        goto fail;
    }
    list = NULL;
    if (dropped->n ? llm_node_set(s, "dropped", dropped) : (llm_node_free(dropped), 0)) {
        dropped = NULL;
        goto fail;
    }
    return s;
fail:
    llm_node_free(s);
    llm_node_free(list);
    llm_node_free(dropped);
    return NULL;
}

int llm_quantize_file(const char *in, const char *out, const llm_quantize_opts *o,
                      llm_qz_report *rep, llm_status *st)
{
    llm_qz_report local = {0};
    llm_qz_report *r = rep ? rep : &local;
    memset(r, 0, sizeof *r);
    if (!llm_quant_is_weight_dtype(o->type))
        return llm_err(st, LLM_EUSAGE, "type '%s' is not one of f32, f16, bf16, q8_0, q4_0",
                       llm_dtype_name(o->type));
    double t0 = llm_now_s();
    int nt = o->threads > 0 ? o->threads : omp_get_num_procs();
    llm_ckpt *ck = NULL;
    llm_ckpt_writer *w = NULL;
    void **bufs = NULL;
    int rc = llm_ckpt_open(&ck, in, 0, st);
    if (rc) {
        if (rc == LLM_EDATA)
            llm_err_prefix(st, "'%s' is not a valid .llmk file", in);
        goto done;
    }
    r->type = o->type;
    r->stats = o->stats;
    r->n = llm_ckpt_count(ck);
    r->file_in = llm_ckpt_file_size(ck);
    r->t = calloc(r->n ? (size_t)r->n : 1, sizeof *r->t);
    bufs = calloc(r->n ? (size_t)r->n : 1, sizeof *bufs);
    if (!r->t || !bufs) {
        rc = llm_err(st, LLM_ENOMEM, "out of memory");
        goto done;
    }
    /* refuse before any work: requantizing blocks to another format compounds errors */
    for (int i = 0; i < r->n; i++) {
        const llm_tensor *t = llm_ckpt_tensor(ck, i);
        if (llm_quant_is_block(t->dtype) && t->dtype != o->type && strncmp(t->name, "opt.", 4)) {
            rc = llm_err(st, LLM_EDATA, "'%s' is already quantized (tensor '%s' is %s): "
                         "requantizing to %s compounds the error; start from the f32 model",
                         in, t->name, llm_dtype_name(t->dtype), llm_dtype_name(o->type));
            goto done;
        }
    }
    if ((rc = llm_ckpt_writer_new(&w, st)))
        goto done;
    if (!header_copy_except(llm_ckpt_header(ck), w, st)) {
        rc = st->code ? (int)st->code : llm_err(st, LLM_ENOMEM, "out of memory");
        goto done;
    }
    r->train_dropped = llm_ckpt_section(ck, "train") != NULL;
    for (int i = 0; i < r->n; i++) {
        const llm_tensor *t = llm_ckpt_tensor(ck, i);
        llm_qz_entry *e = &r->t[i];
        snprintf(e->name, sizeof e->name, "%s", t->name);
        e->nelem = t->nelem;
        e->bytes_in = t->nbytes;
        classify(t, o, e);
        if (e->action == LLM_QZ_DROP) {
            r->dropped++;
            r->dropped_bytes += t->nbytes;
            continue;
        }
        const void *data = t->data;
        e->bytes_out = t->nbytes;
        if (e->action == LLM_QZ_CONVERT) {
            if (llm_dtype_nbytes(e->to, t->nelem, &e->bytes_out) ||
                !(bufs[i] = malloc(e->bytes_out ? e->bytes_out : 1))) {
                rc = llm_err(st, LLM_ENOMEM, "out of memory for tensor '%s'", t->name);
                goto done;
            }
            if ((rc = convert(t, e, bufs[i], o->stats, nt, st)))
                goto done;
            data = bufs[i];
            r->converted++;
            llm_quant_err_merge(&r->err, &e->err);
        }
        r->kept += e->kept;
        r->nelem += e->nelem;
        r->bytes_in += e->bytes_in;
        r->bytes_out += e->bytes_out;
        if ((rc = llm_ckpt_add(w, t->name, e->to, t->ndim, t->shape, data, 0, st)))
            goto done;
    }
    const llm_node *shs = llm_ckpt_section(ck, "shard");
    llm_node *sh = shs ? shard_section(ck, shs, o, &r->shard_cut) : NULL;
    if (shs && (!sh || llm_ckpt_set_section(w, "shard", sh, st))) {
        rc = st->code ? (int)st->code : llm_err(st, LLM_ENOMEM, "out of memory");
        goto done;
    }
    llm_node *q = llm_node_new_map();
    if (!q || llm_node_set_str(q, "type", llm_dtype_name(o->type)) ||
        llm_node_set_int(q, "converted", r->converted) ||
        (r->kept && llm_node_set_int(q, "kept", r->kept)) ||
        llm_node_set_int(q, "block", llm_quant_is_block(o->type) ? 32 : 1)) {
        llm_node_free(q);
        rc = llm_err(st, LLM_ENOMEM, "out of memory");
        goto done;
    }
    if ((rc = llm_ckpt_set_section(w, "quant", q, st)))
        goto done;
    if ((rc = llm_ckpt_write(w, out, st)))
        goto done;
    struct stat sb;   /* a file's size (a device or pipe written in place has none) */
    if (strcmp(out, "-") != 0 && stat(out, &sb) == 0 && S_ISREG(sb.st_mode))
        r->file_out = (uint64_t)sb.st_size;
done:
    r->seconds = llm_now_s() - t0;
    for (int i = 0; bufs && i < r->n; i++)
        free(bufs[i]);
    free(bufs);
    llm_ckpt_writer_free(w);
    llm_ckpt_close(ck);
    if (!rep)
        llm_quantize_report_free(&local);
    return rc;
}

void llm_quantize_report_free(llm_qz_report *r)
{
    free(r->t);
    r->t = NULL;
    r->n = 0;
}

static void json_entry(llm_json *j, const llm_qz_entry *e, int stats)
{
    llm_json_obj_begin(j);
    llm_json_kstr(j, "name", e->name);
    llm_json_kstr(j, "from", llm_dtype_name(e->from));
    llm_json_kstr(j, "to", llm_dtype_name(e->to));
    llm_json_kstr(j, "action", e->action == LLM_QZ_CONVERT ? "convert" : e->action == LLM_QZ_COPY ? "copy" : "drop");
    if (e->action != LLM_QZ_CONVERT)
        llm_json_kstr(j, "why", e->why);
    llm_json_kint(j, "elements", (int64_t)e->nelem);
    llm_json_kint(j, "bytes_in", (int64_t)e->bytes_in);
    llm_json_kint(j, "bytes_out", (int64_t)e->bytes_out);
    if (stats && e->action == LLM_QZ_CONVERT) {
        llm_json_knum(j, "rmse", llm_quant_err_rmse(&e->err));
        llm_json_knum(j, "max_abs_err", e->err.max_abs);
        llm_json_knum(j, "rel_err", llm_quant_err_rel(&e->err));
    }
    llm_json_obj_end(j);
}

void llm_quantize_report_print(const llm_qz_report *r, FILE *f, int json)
{
    if (json) {
        llm_json j;
        llm_json_init(&j, f, 0);
        llm_json_obj_begin(&j);
        llm_json_kstr(&j, "type", llm_dtype_name(r->type));
        llm_json_key(&j, "tensors");
        llm_json_arr_begin(&j);
        for (int i = 0; i < r->n; i++)
            json_entry(&j, &r->t[i], r->stats);
        llm_json_arr_end(&j);
        llm_json_key(&j, "totals");
        llm_json_obj_begin(&j);
        llm_json_kint(&j, "tensors", r->n - r->dropped);
        llm_json_kint(&j, "converted", r->converted);
        llm_json_kint(&j, "kept", r->kept);
        llm_json_kint(&j, "dropped", r->dropped);
        llm_json_kint(&j, "elements", (int64_t)r->nelem);
        llm_json_kint(&j, "bytes_in", (int64_t)r->bytes_in);
        llm_json_kint(&j, "bytes_out", (int64_t)r->bytes_out);
        llm_json_kint(&j, "dropped_bytes", (int64_t)r->dropped_bytes);
        llm_json_kint(&j, "file_bytes_in", (int64_t)r->file_in);
        llm_json_kint(&j, "file_bytes_out", (int64_t)r->file_out);
        if (r->stats) {
            llm_json_knum(&j, "rmse", llm_quant_err_rmse(&r->err));
            llm_json_knum(&j, "max_abs_err", r->err.max_abs);
            llm_json_knum(&j, "rel_err", llm_quant_err_rel(&r->err));
        }
        llm_json_knum(&j, "seconds", r->seconds);
        llm_json_obj_end(&j);
        llm_json_obj_end(&j);
        fputc('\n', f);
        return;
    }
    fprintf(f, "%-28s %-5s %-5s %12s %12s %12s %11s %11s %11s\n", "tensor", "from", "to",
            "elements", "bytes_in", "bytes_out", "rmse", "max_abs", "rel_err");
    for (int i = 0; i < r->n; i++) {
        const llm_qz_entry *e = &r->t[i];
        fprintf(f, "%-28s %-5s %-5s %12llu %12llu %12llu", e->name, llm_dtype_name(e->from),
                e->action == LLM_QZ_DROP ? "-" : llm_dtype_name(e->to),
                (unsigned long long)e->nelem, (unsigned long long)e->bytes_in,
                (unsigned long long)e->bytes_out);
        if (e->action == LLM_QZ_CONVERT && r->stats)
            fprintf(f, " %11.4e %11.4e %11.4e\n", llm_quant_err_rmse(&e->err), e->err.max_abs,
                    llm_quant_err_rel(&e->err));
        else
            fprintf(f, "  (%s%s)\n", e->action == LLM_QZ_DROP ? "dropped: " : e->action == LLM_QZ_COPY ? "kept: " : "", e->why);
    }
    fprintf(f, "%-28s %-5s %-5s %12llu %12llu %12llu", "total", "", llm_dtype_name(r->type),
            (unsigned long long)r->nelem, (unsigned long long)r->bytes_in,
            (unsigned long long)r->bytes_out);
    if (r->stats)
        fprintf(f, " %11.4e %11.4e %11.4e", llm_quant_err_rmse(&r->err), r->err.max_abs,
                llm_quant_err_rel(&r->err));
    fprintf(f, "\n%d converted, %d already %s (kept as they are), %d dropped (%llu bytes), "
            "%.2fx smaller tensors, %.3f s\n", r->converted, r->kept, llm_dtype_name(r->type), r->dropped, (unsigned long long)r->dropped_bytes,
            r->bytes_out ? (double)r->bytes_in / (double)r->bytes_out : 0.0, r->seconds);
}
