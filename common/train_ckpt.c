/* train_ckpt.c — llm-train's checkpoint files: naming, listing, pruning, saving, and the
 * compatibility check before a resume. */
#include "common/train.h"

#include <dirent.h>
#include <errno.h>
#include <inttypes.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <signal.h>
#include <string.h>

void llm_train_ckpt_path(char *buf, size_t n, const char *dir, int64_t step)
{
    snprintf(buf, n, "%s/step-%08" PRId64 ".llmk", dir, step);
}

/* step-<digits>.llmk exactly; anything else (temp files included) is not a checkpoint. */
static int parse_name(const char *name, int64_t *step)
{
    if (strncmp(name, "step-", 5))
        return -1;
    const char *p = name + 5, *q = p;
    while (*q >= '0' && *q <= '9')
        q++;
    if (q == p || q - p > 18 || strcmp(q, ".llmk"))
        return -1;
    *step = strtoll(p, NULL, 10);
    return 0;
}

static int desc(const void *a, const void *b)
{
    int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;
    return x < y ? 1 : x > y ? -1 : 0;
}

int llm_train_list_ckpts(const char *dir, int64_t **steps)
{
    *steps = NULL;
    DIR *d = opendir(dir);
    if (!d)
        return errno == ENOENT ? 0 : -1;
    int n = 0, cap = 0;
    int64_t *v = NULL;
    struct dirent *e;
    while ((e = readdir(d))) {
        int64_t s;
        if (parse_name(e->d_name, &s))
            continue;
        if (n == cap) {
            cap = cap ? 2 * cap : 16;
            int64_t *nv = realloc(v, (size_t)cap * sizeof *v);
            if (!nv) {
                free(v);
                closedir(d);
                return -1;
            }
            v = nv;
        }
        v[n++] = s;
    }
    closedir(d);
    if (n)
        qsort(v, (size_t)n, sizeof *v, desc);
    *steps = v;
    return n;
}

int llm_train_clean_temps(const char *dir, const llm_log *log)
{
    DIR *d = opendir(dir);
    if (!d)
        return 0;
    int gone = 0;
    struct dirent *e;
    while ((e = readdir(d))) {
        /* the writer's temp files: .step-N.llmk.tmp.<pid>.<nonce> (afile.c), or without the
         * leading dot (written by d372e6e .. 2390e84) */
        const char *name = e->d_name + (e->d_name[0] == '.');
        const char *t = strstr(name, ".llmk.tmp.");
        int64_t step;
        char base[300];
        if (strncmp(name, "step-", 5) || !t || (size_t)(t - name) + 5 >= sizeof base)
            continue;
        memcpy(base, name, (size_t)(t - name) + 5);
        base[t - name + 5] = 0;
        if (parse_name(base, &step))
            continue;
        long pid = strtol(t + 10, NULL, 10);
        if (pid <= 0 || (kill((pid_t)pid, 0) != 0 && errno == ESRCH)) {
            char path[LLM_CFG_PATH_MAX + 300];
            snprintf(path, sizeof path, "%s/%s", dir, e->d_name);
            if (remove(path) == 0) {
                gone++;
                llm_info(log, "removed the unfinished '%s' of an earlier run", path);
            }
        }
    }
    closedir(d);
    return gone;
}

int llm_train_prune(const char *dir, int keep, int64_t keep_step, const llm_log *log)
{
    if (keep <= 0)
        return 0;
    int64_t *steps;
    int n = llm_train_list_ckpts(dir, &steps);
    int gone = 0;
    for (int i = keep; i < n; i++) {
        if (steps[i] == keep_step)
            continue;
        char path[LLM_CFG_PATH_MAX + 32];
        llm_train_ckpt_path(path, sizeof path, dir, steps[i]);
        if (remove(path) == 0) {
            gone++;
            llm_debug(log, "removed '%s' (keep_last %d)", path, keep);
        } else {
            llm_warn(log, "cannot remove '%s': %s", path, strerror(errno));
        }
    }
    free(steps);
    return gone;
}

int llm_train_save(const char *path, llm_model *m, const llm_tokenizer *tok,
                   const llm_train_config *cfg, int64_t step, int64_t skipped,
                   int64_t in_a_row, const llm_loss_scaler *ls, const llm_data_pos *pos, llm_status *st)
{
    /* optimizer.t: AdamW's step count, the updates applied so far (a skipped step applies
     * none: adam_t in train.c); a resume derives it from step and skipped, so only people
     * and other tools read it */
    llm_ckpt_writer *w = NULL;
    if (llm_ckpt_writer_new(&w, st))
        return st->code;
    int rc = 0;
    llm_node *model = llm_model_config_node(llm_model_cfg(m));
    llm_node *train = llm_node_new_map();
    llm_node *conf = llm_config_to_node(cfg);
    llm_node *dp = llm_data_pos_node(pos);
    llm_node *opt = llm_node_new_map();
    if (!model || !train || !conf || !dp || !opt || llm_node_set_int(train, "step", step) ||
        llm_node_set_int(train, "skipped", skipped) ||
        (in_a_row && llm_node_set_int(train, "skipped_in_a_row", in_a_row)) ||
        llm_node_set_str(train, "precision", cfg->precision[0] ? cfg->precision : "fp32") ||
        (ls && llm_loss_scaler_save(ls, train)) || llm_node_set_str(opt, "name", "adamw") ||
        llm_node_set_int(opt, "t", step - skipped) || llm_node_set(train, "optimizer", opt) ||
        llm_node_set(train, "data", dp) || llm_node_set(train, "config", conf)) {
        /* set() took ownership of whatever it was given, even on failure */
        llm_node_free(model);
        llm_node_free(train);
        llm_ckpt_writer_free(w);
        return llm_err(st, LLM_ENOMEM, "out of memory");
    }
    if ((rc = llm_ckpt_set_section(w, "model", model, st)) ||
        (rc = llm_ckpt_set_section(w, "train", train, st)) ||
        (tok && (rc = llm_tokenizer_save(tok, w, st))) || (rc = llm_model_save(m, w, 1, st)) ||
        (rc = llm_ckpt_write(w, path, st))) {
        llm_ckpt_writer_free(w);
        return rc;
    }
    llm_ckpt_writer_free(w);
    return 0;
}

static void add_diff(char *buf, size_t n, const char *key, const char *was, const char *now)
{
    size_t l = strlen(buf);
    if (l + 1 >= n)
        return;
    snprintf(buf + l, n - l, "%s%s: %s in the checkpoint, %s in the config", l ? "; " : "", key,
             was, now);
}

static void add_int_diff(char *buf, size_t n, const char *key, int64_t was, int64_t now)
{
    if (was == now)
        return;
    char a[32], b[32];
    snprintf(a, sizeof a, "%" PRId64, was);
    snprintf(b, sizeof b, "%" PRId64, now);
    add_diff(buf, n, key, a, b);
}

/* A saved train.config's integer `name` (under "train."), within the range the config
 * itself allows: 1 with *v set, else 0 (absent, not an integer, out of range). */
static int saved_in_range(const llm_node *tc, const char *name, int64_t *v)
{
    char key[64];
    double lo, hi;
    snprintf(key, sizeof key, "train.%s", name);
    return !llm_node_i64(llm_node_get(tc, name), v) && llm_config_range(key, &lo, &hi) &&
           (double)*v >= lo && (double)*v <= hi;
}

/* The global batch differs and cfg leaves train.total_batch_tokens unset (ranks x
 * batch_size x seq_len): say what to set it to, or what stands in the way. */
static void add_global_hint(char *buf, size_t n, const llm_train_config *cfg, int world,
                            int64_t had)
{
    size_t l = strlen(buf);
    int64_t split = (int64_t)world * cfg->batch_size * cfg->seq_len;
    /* several ranks: llm_train_dist_config has set it to that split */
    if (l + 1 >= n || (llm_config_given(cfg, "train.total_batch_tokens") &&
                       cfg->total_batch_tokens))
        return;
    if (had % split == 0)
        snprintf(buf + l, n - l, " (train.total_batch_tokens is unset, so ranks x batch_size x "
                 "seq_len = %d x %d x %d: set train.total_batch_tokens to %" PRId64 " to go on "
                 "with the same global batch)", world, cfg->batch_size, cfg->seq_len, had);
    else
        snprintf(buf + l, n - l, " (train.total_batch_tokens is unset, so ranks x batch_size x "
                 "seq_len = %d x %d x %d; the same global batch, train.total_batch_tokens %"
                 PRId64 ", needs a batch_size and ranks whose product divides its %" PRId64
                 " rows)", world, cfg->batch_size, cfg->seq_len, had, had / cfg->seq_len);
}

int llm_train_check_compat(const llm_ckpt *ck, const char *path, const llm_model_config *mc,
                           const llm_train_config *cfg, int world, llm_train_shape *was,
                           llm_status *st)
{
    const llm_node *ms = llm_ckpt_section(ck, "model");
    llm_model_config cm;
    if (!ms)
        return llm_err(st, LLM_EDATA, "checkpoint '%s' has no model section", path);
    if (llm_model_config_parse(ms, &cm, st))
        return llm_err_prefix(st, "checkpoint '%s'", path);
    char d[LLM_MSG_MAX - 64] = "";
    if (strcmp(cm.arch, mc->arch))
        add_diff(d, sizeof d, "model.arch", cm.arch, mc->arch);
    add_int_diff(d, sizeof d, "model.n_layer", cm.n_layer, mc->n_layer);
    add_int_diff(d, sizeof d, "model.n_head", cm.n_head, mc->n_head);
    add_int_diff(d, sizeof d, "model.n_embd", cm.n_embd, mc->n_embd);
    add_int_diff(d, sizeof d, "model.vocab_size", cm.vocab_size, mc->vocab_size);
    add_int_diff(d, sizeof d, "model.padded_vocab_size", cm.padded_vocab, mc->padded_vocab);
    add_int_diff(d, sizeof d, "model.max_seq_len", cm.max_seq_len, mc->max_seq_len);
    const llm_node *tr = llm_ckpt_section(ck, "train");
    const llm_node *tc = tr ? llm_node_path(tr, "config.train") : NULL;
    if (!tc)
        return llm_err(st, LLM_EDATA, "checkpoint '%s' has no train.config section "
                       "(not a training checkpoint)", path);
    int64_t B = 0, T = 0, tot = 0, ev = 0;
    /* bounded as the config bounds them, so that B x T cannot overflow */
    if (!saved_in_range(tc, "batch_size", &B) || !saved_in_range(tc, "seq_len", &T) ||
        !saved_in_range(tc, "total_batch_tokens", &tot) || (tot && tot % (B * T)))
        return llm_err(st, LLM_EDATA, "checkpoint '%s': bad train.config batch shape", path);
    if (!saved_in_range(tc, "eval_batches", &ev))
        ev = 0;   /* for a note only: not recorded */
    /* the data position counts rows, whatever their batches: only the rows per step
     * (tokens per step and seq_len) must stay; batch_size, ranks and accumulation steps
     * may split them otherwise */
    int64_t had = tot ? tot : B * T;
    int64_t want = cfg->total_batch_tokens ? cfg->total_batch_tokens
                                           : (int64_t)cfg->batch_size * cfg->seq_len;
    add_int_diff(d, sizeof d, "train.seq_len", T, cfg->seq_len);
    add_int_diff(d, sizeof d, "train.total_batch_tokens (effective)", had, want);
    if (had != want && T == cfg->seq_len)
        add_global_hint(d, sizeof d, cfg, world, had);
    *was = (llm_train_shape){B, T, had, ev};
    if (d[0])
        return llm_err(st, LLM_EDATA, "refusing to resume from '%s': %s", path, d);
    return 0;
}
