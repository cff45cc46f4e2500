/* train.c — the training loop (see train.h). */
#include "common/train.h"
#include "common/clock.h"

#include <errno.h>
#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "common/bench_model.h"
#include "common/env.h"
#include "common/fsutil.h"
#include "common/loss_scale.h"
#include "common/memtrack.h"
#include "common/metrics.h"
#include "common/sampler.h"
#include "common/schedule.h"
#include "common/train_dist.h"

typedef struct {
    const llm_train_config *cfg;
    const llm_train_opts *o;
    const llm_log *log;
    llm_backend raw;       /* the device's backend */
    llm_memtrack mem;      /* raw, counting its allocations: what the model runs on */
    llm_backend *be;       /* &mem.be */
    int have_be;
    llm_model *m;
    llm_tokenizer *tok;
    llm_data *train, *val;
    llm_metrics *met;
    llm_schedule sched;
    int32_t *in, *tg;
    int64_t step;          /* last completed step */
    int64_t skipped_total; /* over the whole run, resumes included (from the checkpoint) */
    int64_t in_a_row;      /* non-finite steps in a row (train.max_skips), resumes included */
    llm_train_dist *dd;    /* several ranks or ZeRO (train_dist.h); NULL: one process */
    int rank;              /* only rank 0 logs metrics, evaluates and writes checkpoints */
    llm_loss_scaler ls;    /* fp16: dynamic loss scaling; else a fixed scale of 1 */
    uint64_t fault_nan;    /* LLM_TRAIN_FAULT_NAN (test hook, llm-train.1): 0 or a step */
    int fault_at;          /* LLM_TRAIN_FAULT (test hook, llm-train.1): FAULT_* or 0 */
    int64_t fault_step;    /* ... the step it names */
    int unsound;           /* an error may have left the model between two steps' states */
    int together;          /* several ranks: every rank stopped at the same point on the
                            * error (a read: llm_train_dist_agree_read), none in a collective */
    int lost;              /* the device failed (device_check): nothing on it can be saved */
    int halted;            /* setup saw a stop request: no step, nothing written */
    size_t made_dir;       /* this run made output.dir: llm_mkdirs_made's prefix length */
    int made_metrics;      /* this run made output.metrics */
} trainer;

/* LLM_TRAIN_FAULT=WHERE:N: the test hook that makes step N fail before its update, or the
 * evaluation or the sample after step N fail, as out of memory would, or the read of step
 * N's batches fail, as bad data would */
enum { FAULT_STEP = 1, FAULT_EVAL, FAULT_SAMPLE, FAULT_DATA };
static const char *const fault_names[] = {"", "step", "eval", "sample", "data"};

static int fault_parse(trainer *t, llm_status *st)
{
    const char *v = getenv("LLM_TRAIN_FAULT");
    if (!v || !*v)
        return 0;
    for (int k = FAULT_STEP; k <= FAULT_DATA; k++) {
        size_t l = strlen(fault_names[k]);
        const char *n = v + l + 1;
        char *end;
        errno = 0;
        if (strncmp(v, fault_names[k], l) || v[l] != ':' || *n < '1' || *n > '9')
            continue;
        unsigned long long x = strtoull(n, &end, 10);
        if (errno || *end || x > INT64_MAX)
            break;
        t->fault_at = k;
        t->fault_step = (int64_t)x;
        return 0;
    }
    return llm_err(st, LLM_EUSAGE, "LLM_TRAIN_FAULT '%s': want step:N, eval:N, sample:N or "
                   "data:N (N >= 1)", v);
}

/* The fault of LLM_TRAIN_FAULT, if it is due at `where` of step `step`. */
static int fault_due(const trainer *t, int where, int64_t step, llm_status *st)
{
    if (t->fault_at != where || t->fault_step != step)
        return 0;
    if (where == FAULT_DATA)
        return llm_err(st, LLM_EDATA, "step %lld: bad data (test hook LLM_TRAIN_FAULT=data:%lld)",
                       (long long)step, (long long)step);
    return llm_err(st, LLM_ENOMEM, "out of memory (test hook LLM_TRAIN_FAULT=%s:%lld)",
                   fault_names[where], (long long)step);
}

/* data.tokenizer: byte | gpt2 (encoder.json + vocab.bpe from $LLMKIT_DATA/gpt2,
 * $LLM_DATA/gpt2 or ./data/gpt2: llm_tokenizer_gpt2_find) | a directory holding them | a .llmk file. */
static int load_tokenizer(trainer *t, llm_status *st)
{
    const char *spec = t->cfg->tokenizer;
    if (!strcmp(spec, "byte"))
        return llm_tokenizer_byte(&t->tok, st);
    struct stat sb;
    if (!strcmp(spec, "gpt2")) {
        char dir[LLM_CFG_PATH_MAX];
        if (llm_tokenizer_gpt2_find(dir, sizeof dir))
            return llm_tokenizer_gpt2(&t->tok, dir, st);
        /* training needs no tokenizer, only the checkpoints' users do: go on, loudly */
        llm_warn(t->log, "tokenizer 'gpt2': encoder.json and vocab.bpe not found in "
                 "$LLMKIT_DATA/gpt2, $LLM_DATA/gpt2 or ./data/gpt2 (set data.tokenizer to their "
                 "directory); checkpoints will carry no tokenizer");
        return 0;
    }
    if (stat(spec, &sb))
        return llm_err(st, LLM_ENOINPUT, "tokenizer '%s': %s", spec, strerror(errno));
    if (S_ISDIR(sb.st_mode))
        return llm_tokenizer_gpt2(&t->tok, spec, st);
    llm_ckpt *ck;
    if (llm_ckpt_open(&ck, spec, LLM_CKPT_NOVERIFY, st))
        return st->code;
    int rc = llm_tokenizer_from_ckpt(&t->tok, ck, st);
    llm_ckpt_close(ck);
    return rc;
}

/* The model config: from the config's model section, or from model.init_from's
 * checkpoint (then any model key the config gives must agree with it). */
static int model_config(trainer *t, llm_model_config *mc, llm_ckpt **init, llm_status *st)
{
    const llm_train_config *c = t->cfg;
    llm_node *n = llm_node_new_map();
    if (!n || llm_node_set_str(n, "arch", c->arch) || llm_node_set_int(n, "n_layer", c->n_layer) ||
        llm_node_set_int(n, "n_head", c->n_head) || llm_node_set_int(n, "n_embd", c->n_embd) ||
        llm_node_set_int(n, "vocab_size", c->vocab_size) ||
        llm_node_set_int(n, "max_seq_len", c->max_seq_len) ||
        (c->padded_vocab_size && llm_node_set_int(n, "padded_vocab_size", c->padded_vocab_size))) {
        llm_node_free(n);
        return llm_err(st, LLM_ENOMEM, "out of memory");
    }
    int rc = llm_model_config_parse(n, mc, st);
    llm_node_free(n);
    if (rc || !c->init_from[0])
        return rc;
    if (llm_ckpt_open(init, c->init_from, 0, st))
        return llm_err_prefix(st, "model.init_from");
    llm_model_config ic;
    const llm_node *ms = llm_ckpt_section(*init, "model");
    if (!ms)
        return llm_err(st, LLM_EDATA, "model.init_from '%s' has no model section", c->init_from);
    if ((rc = llm_model_config_parse(ms, &ic, st)))
        return llm_err_prefix(st, "model.init_from '%s'", c->init_from);
    static const char *keys[] = {"model.n_layer", "model.n_head", "model.n_embd",
                                 "model.vocab_size", "model.max_seq_len"};
    const int a[] = {ic.n_layer, ic.n_head, ic.n_embd, ic.vocab_size, ic.max_seq_len};
    const int b[] = {mc->n_layer, mc->n_head, mc->n_embd, mc->vocab_size, mc->max_seq_len};
    for (int i = 0; i < 5; i++)
        if (llm_config_given(c, keys[i]) && a[i] != b[i])
            return llm_err(st, LLM_EDATA, "'%s' is %d in the config but %d in model.init_from '%s'",
                           keys[i], b[i], a[i], c->init_from);
    if (c->seq_len > ic.max_seq_len)
        return llm_err(st, LLM_EDATA, "'train.seq_len' (%d) exceeds the max_seq_len (%d) of "
                       "model.init_from '%s'", c->seq_len, ic.max_seq_len, c->init_from);
    *mc = ic;
    return 0;
}

/* p, for a resume with another batch_size: its count of batches handed out goes on in
 * batches of the new size (the rows read, and so the position, stay the same). */
static const llm_data_pos *rebatch(llm_data_pos *p, int64_t was_b, int64_t b)
{
    if (was_b != b && p->batches <= UINT64_MAX / (uint64_t)was_b &&
        p->batches * (uint64_t)was_b % (uint64_t)b == 0)
        p->batches = p->batches * (uint64_t)was_b / (uint64_t)b;
    return p;
}

/* A resume with another batch_size (the same global batch: llm_train_check_compat) says
 * so, and warns when the evaluations now score other windows of data.val. */
static void resplit_note(const trainer *t, const llm_train_shape *was)
{
    const llm_train_config *c = t->cfg;
    int world = llm_dist_world(t->o->dist);
    llm_info(t->log, "resuming with batch_size %d (was %lld): same global batch of %lld "
             "tokens (%d rank(s) x batch_size %d x seq_len %d x %lld accumulation step(s))",
             c->batch_size, (long long)was->batch_size, (long long)was->global_tokens, world,
             c->batch_size, c->seq_len, (long long)(llm_config_accum_steps(c) / world));
    if (!t->val || !was->eval_batches)
        return;
    /* eval_batches counts batches of batch_size rows from the start of data.val */
    int64_t then = was->eval_batches * was->batch_size, now = c->eval_batches * c->batch_size;
    if (then == now)
        return;
    char same[80] = "";
    if (then % c->batch_size == 0)
        snprintf(same, sizeof same, "; train.eval_batches %lld scores the same ones",
                 (long long)(then / c->batch_size));
    llm_warn(t->log, "the evaluations now score %lld windows of data.val (train.eval_batches "
             "%lld x batch_size %d), %lld before: val_loss is not comparable across the "
             "resume%s", (long long)now, (long long)c->eval_batches, c->batch_size,
             (long long)then, same);
}

/* Find and load the checkpoint to resume from; *step = 0 when starting fresh. */
static int resume(trainer *t, const llm_model_config *mc, llm_status *st)
{
    const char *r = t->o->resume;
    char path[LLM_CFG_PATH_MAX + 32];
    int64_t *steps = NULL;
    int n = 1;
    if (!strcmp(r, "auto")) {
        n = llm_train_list_ckpts(t->cfg->out_dir, &steps);
        if (n < 0)
            return llm_err(st, LLM_EIO, "cannot read '%s': %s", t->cfg->out_dir, strerror(errno));
        if (n == 0)
            llm_info(t->log, "no checkpoint in '%s': starting from step 0", t->cfg->out_dir);
    }
    int rc = 0;
    for (int i = 0; i < n; i++) {
        if (steps)
            llm_train_ckpt_path(path, sizeof path, t->cfg->out_dir, steps[i]);
        else
            snprintf(path, sizeof path, "%s", r);
        llm_ckpt *ck = NULL;
        if ((rc = llm_ckpt_open(&ck, path, 0, st))) {
            if (!steps)
                break;
            /* a damaged newest file must not end a requeued job: take the one before */
            llm_warn(t->log, "skipping checkpoint '%s': %s", path, st->msg);
            llm_status_clear(st);
            continue;
        }
        const llm_node *tr = llm_ckpt_section(ck, "train");
        llm_data_pos pos;
        int64_t step = -1, skipped = 0, in_a_row = 0;
        const llm_node *nr = llm_node_get(tr, "skipped_in_a_row"); /* absent: none */
        llm_train_shape was;
        if ((rc = llm_train_check_compat(ck, path, mc, t->cfg, llm_dist_world(t->o->dist), &was,
                                         st)) ||
            (rc = llm_model_load(t->m, ck, 1, st))) {
            llm_ckpt_close(ck);
            break;
        }
        /* steps as max_steps bounds them (AdamW counts them in an int) */
        if (llm_node_i64(llm_node_get(tr, "step"), &step) || step < 0 || step > INT_MAX ||
            llm_node_i64(llm_node_get(tr, "skipped"), &skipped) || skipped < 0 ||
            (nr && (llm_node_i64(nr, &in_a_row) || in_a_row < 0 || in_a_row > step)) ||
            llm_loss_scaler_load(&t->ls, tr, st) ||
            llm_data_pos_parse(llm_node_get(tr, "data"), &pos, st) ||
            /* other files: refused below, naming them (a file index past them is no
             * damage of the checkpoint) */
            (!llm_data_files_differ(t->train, &pos, NULL, 0) &&
             llm_data_seek(t->train, rebatch(&pos, was.batch_size, t->cfg->batch_size), st))) {
            char why[LLM_MSG_MAX];   /* st->msg is the buffer llm_err writes */
            snprintf(why, sizeof why, "%s", st->msg);
            rc = llm_err(st, LLM_EDATA, "checkpoint '%s': bad train section%s%s", path,
                         why[0] ? ": " : "", why);
            llm_ckpt_close(ck);
            break;
        }
        llm_ckpt_close(ck);
        /* the position is a file index and an offset: in other files it is other data */
        char why[200];
        if (llm_data_files_differ(t->train, &pos, why, sizeof why)) {
            rc = llm_err(st, LLM_EDATA, "checkpoint '%s': data.train '%s' is not the data of "
                         "the run it continues (%s), where its data position means other "
                         "tokens: restore those files, or start a new run from its weights "
                         "(model.init_from, in another output directory)", path,
                         t->cfg->train_data, why);
            break;
        }
        t->step = step;
        t->skipped_total = skipped;
        t->in_a_row = in_a_row;
        llm_info(t->log, "resuming from '%s' (step %lld)", path, (long long)step);
        if (was.batch_size != t->cfg->batch_size)
            resplit_note(t, &was);
        break;
    }
    free(steps);
    return rc;
}

/* The checkpoints in output.dir must be this run's past: a checkpoint after the step the
 * run starts from (a fresh run: any) is another run's, or the abandoned rest of this one,
 * and keep_last and a later --resume auto would take it for this run's.  --resume auto
 * starts from the newest that loads: any newer one is damaged, and is replaced. */
static int check_out_dir(trainer *t, llm_status *st)
{
    const char *dir = t->cfg->out_dir, *r = t->o->resume;
    if (r && !strcmp(r, "auto"))
        return 0;
    int64_t *steps;
    int n = llm_train_list_ckpts(dir, &steps);
    if (n < 0)
        return llm_err(st, LLM_EIO, "cannot read '%s': %s", dir, strerror(errno));
    int64_t newest = n ? steps[0] : 0;
    free(steps);
    if (newest <= t->step)
        return 0;
    if (!r)
        return llm_err(st, LLM_EUSAGE, "'%s' already holds checkpoints (the newest of step "
                       "%lld): continue that run with --resume auto, or give another output "
                       "directory", dir, (long long)newest);
    return llm_err(st, LLM_EUSAGE, "'%s' holds checkpoints after step %lld of '%s' (the newest "
                   "of step %lld), which --resume auto and train.keep_last would take for this "
                   "run's: give another output directory", dir, (long long)t->step, r,
                   (long long)newest);
}

/* Every evaluation reads the same batches from the start of data.val: read them once at
 * the start (until they wrap around), so that a bad token id there ends the run before its
 * first step and not at its first evaluation, by default after its last step and before
 * its final checkpoint. */
static int check_val(trainer *t, llm_status *st)
{
    const llm_train_config *c = t->cfg;
    llm_data_pos zero = {0};
    int64_t i = 0;
    for (; i < c->eval_batches && !llm_data_tell(t->val).epoch; i++)
        if (llm_data_next(t->val, t->in, t->tg, st))
            return llm_err_prefix(st, "data.val");
    if (i < c->eval_batches)   /* it wrapped around: the same windows scored again */
        llm_warn(t->log, "data.val wraps around within %lld batch(es) of %d x %d tokens; "
                 "train.eval_batches %lld scores some windows more than once", (long long)i,
                 c->batch_size, c->seq_len, (long long)c->eval_batches);
    return llm_data_seek(t->val, &zero, st);
}

static int evaluate(trainer *t, double *val_loss, llm_status *st)
{
    const llm_train_config *c = t->cfg;
    llm_data_pos zero = {0};
    if (llm_data_seek(t->val, &zero, st))
        return st->code;
    double sum = 0;
    for (int64_t i = 0; i < c->eval_batches; i++) {
        float loss = 0;
        if (llm_data_next(t->val, t->in, t->tg, st) ||
            llm_model_forward(t->m, t->in, t->tg, c->batch_size, c->seq_len, &loss, st) ||
            fault_due(t, FAULT_EVAL, t->step, st))
            return st->code;
        sum += loss;
    }
    *val_loss = sum / (double)c->eval_batches;
    return 0;
}

/* A sample on stderr: temperature 0.8, top-k 40, seeded by train.seed and the step. */
static int print_sample(trainer *t, llm_status *st)
{
    const llm_model_config *mc = llm_model_cfg(t->m);
    int n = t->cfg->sample_tokens, T = t->cfg->seq_len;
    int32_t *ctx = malloc(((size_t)n + 1) * sizeof *ctx);
    float *row = malloc((size_t)mc->padded_vocab * sizeof *row);
    if (!ctx || !row) {
        free(ctx);
        free(row);
        return llm_err(st, LLM_ENOMEM, "out of memory");
    }
    llm_sampler_params sp = {0.8f, 40, 1.0f,
                             (uint64_t)t->cfg->seed * 0x9E3779B97F4A7C15ull + (uint64_t)t->step};
    llm_sampler smp;
    llm_sampler_scratch scratch = {0};
    if (llm_sampler_init(&smp, &sp, st)) {
        free(ctx);
        free(row);
        return st->code;
    }
    int len = 0;
    ctx[len++] = (int32_t)llm_tokenizer_eot(t->tok);
    char *text = NULL;
    size_t tlen = 0;
    FILE *mf = open_memstream(&text, &tlen);
    int rc = 0;
    for (int i = 0; i < n && mf; i++) {
        int start = len > T ? len - T : 0, w = len - start;
        if ((rc = llm_model_forward(t->m, ctx + start, NULL, 1, w, NULL, st)) ||
            (rc = fault_due(t, FAULT_SAMPLE, t->step, st)))
            break;
        if ((rc = llm_model_logits_to_host(t->m, (size_t)(w - 1), 1, row, st)))
            break;
        int id = llm_sampler_sample(&smp, row, mc->vocab_size, &scratch);
        if (id < 0) {
            rc = llm_err(st, LLM_ENOMEM, "out of memory");
            break;
        }
        if ((uint32_t)id == llm_tokenizer_eot(t->tok))
            break;
        ctx[len++] = id;
        const char *b;
        size_t bl;
        if (!llm_tokenizer_token_bytes(t->tok, (uint32_t)id, &b, &bl, st))
            fwrite(b, 1, bl, mf);
    }
    if (mf)
        fclose(mf);
    if (!rc && text) {
        llm_metrics_progress_clear(t->met);
        fprintf(stderr, "---- sample at step %lld ----\n%s\n----\n", (long long)t->step, text);
        fflush(stderr);
    }
    free(text);
    free(ctx);
    free(row);
    llm_sampler_scratch_free(&scratch);
    return rc;
}

/* The device's health after work that ended in rc (0 or an error in st), where is what
 * ran ("step 3"): a device that failed (kernels/backend.h device_lost: a sticky error,
 * from any op since the last look, the update of the step before included) makes it an
 * error whatever rc was, LLM_ENODEV naming the device's error (and rc's, if any), and
 * leaves the model's state untrustworthy and unreadable: t->unsound, t->lost.  wait:
 * after all the queued work (before a save, which must not write what a fault left);
 * else what has surfaced, the queued work running on (after a step: a fault in its
 * update is found by the next look, before anything is saved).  Returns the code to go
 * on with. */
static int device_check(trainer *t, int rc, int wait, const char *where, llm_status *st)
{
    char why[256];
    if (!llm_backend_device_lost(t->be, wait, why, sizeof why))
        return rc;
    t->unsound = t->lost = 1;
    llm_status was = *st;
    llm_err(st, LLM_ENODEV, "device '%s' failed by the end of %s: %s", t->be->name, where, why);
    if (rc) {
        size_t l = strlen(st->msg);
        snprintf(st->msg + l, sizeof st->msg - l, " (%s also failed: %.200s)", where, was.msg);
    }
    return st->code;
}

/* The checkpoint of step t->step; pos: the data position after it. */
static int save(trainer *t, const llm_data_pos *pos, llm_train_result *res, llm_status *st)
{
    char path[LLM_CFG_PATH_MAX + 32], where[64];
    llm_train_ckpt_path(path, sizeof path, t->cfg->out_dir, t->step);
    snprintf(where, sizeof where, "step %lld", (long long)t->step);
    /* ZeRO-1 on several ranks: rank 0 gathers the moments' shards as it writes */
    int rc = t->dd ? llm_train_dist_save_begin(t->dd, st) : 0;
    /* what is read back from a failed device is not the model (device_check) */
    if (!rc && !t->rank)
        rc = device_check(t, 0, 1, where, st);
    if (!rc && !t->rank)
        rc = llm_train_save(path, t->m, t->tok, t->cfg, t->step, t->skipped_total, t->in_a_row,
                            &t->ls, pos, st);
    if (t->dd) {
        llm_status later = {0};
        int rc2 = llm_train_dist_save_end(t->dd, rc ? &later : st);
        rc = rc ? rc : rc2;
    }
    if (t->rank)
        return rc;
    if (rc)
        return llm_err_prefix(st, "checkpoint '%s' not written", path);
    snprintf(res->last_ckpt, sizeof res->last_ckpt, "%s", path);
    llm_metrics_progress_clear(t->met);
    llm_info(t->log, "saved '%s'", path);
    llm_train_prune(t->cfg->out_dir, t->cfg->keep_last, t->step, t->log);
    return 0;
}

/* A stop request during the start of one process ends it there (setup: t->halted), before
 * the first step, so that a signal during a long load is answered at once; several ranks
 * go on to agree before their first step (llm_train_run). */
static int halt(trainer *t)
{
    if (t->o->stop && *t->o->stop && llm_dist_world(t->o->dist) <= 1)
        t->halted = 1;
    return t->halted;
}

static int setup(trainer *t, llm_status *st)
{
    const llm_train_config *c = t->cfg;
    if (llm_env_u64("LLM_TRAIN_FAULT_NAN", 0, INT64_MAX, &t->fault_nan, st) ||
        fault_parse(t, st))
        return st->code;
    if (llm_backend_open(&t->raw, c->device, c->threads, st))
        return llm_err_prefix(st, "device '%s'", c->device);
    t->have_be = 1;
    llm_memtrack_init(&t->mem, &t->raw);
    t->be = &t->mem.be;
    llm_model_config mc;
    llm_ckpt *init = NULL;
    int rc = 0;
    if (halt(t))
        goto out;
    if ((rc = model_config(t, &mc, &init, st)) || (rc = llm_model_new(&t->m, &mc, t->be, st)))
        goto out;
    /* ZeRO-1: this rank's moments only, before a resume loads them */
    if ((rc = llm_train_dist_shard_model(t->m, t->o->dist, c->zero, st)))
        goto out;
    if (init) {
        if ((rc = llm_model_load(t->m, init, 0, st)))
            goto out;
    } else {
        llm_model_init_gpt2(t->m, (uint64_t)c->seed);
    }
    /* mixed precision: bf16/fp16 matmul operands, fp32 master weights (model.h) */
    llm_dtype lo = !strcmp(c->precision, "bf16") ? LLM_DT_BF16
                   : !strcmp(c->precision, "fp16") ? LLM_DT_F16 : LLM_DT_F32;
    if (lo != LLM_DT_F32 && (rc = llm_model_set_precision(t->m, lo, st))) {
        llm_err_prefix(st, "train.precision %s", c->precision);
        goto out;
    }
    llm_loss_scaler_init(&t->ls, lo == LLM_DT_F16, c->loss_scale, c->loss_scale_window);
    /* activation recompute trades one more (partial) forward for activation memory */
    if ((rc = llm_model_set_recompute(t->m, !strcmp(c->recompute, "full") ? LLM_RECOMPUTE_FULL
                                            : !strcmp(c->recompute, "selective")
                                                ? LLM_RECOMPUTE_SELECTIVE : LLM_RECOMPUTE_NONE, st)))
        goto out;
    if (halt(t) || (rc = load_tokenizer(t, st)))
        goto out;
    if (t->tok && llm_tokenizer_vocab_size(t->tok) > mc.vocab_size) {
        rc = llm_err(st, LLM_EDATA, "tokenizer '%s' has %d tokens but model.vocab_size is %d",
                     c->tokenizer, llm_tokenizer_vocab_size(t->tok), mc.vocab_size);
        goto out;
    }
    llm_data_opts dopt = {c->train_data, c->batch_size, c->seq_len, mc.vocab_size,
                          !strcmp(c->sampling, "sequential"), (uint64_t)c->seed, c->prefetch};
    if ((rc = llm_data_open(&t->train, &dopt, st)))
        goto out;
    if (c->val_data[0] && !t->rank) {
        llm_data_opts vopt = {c->val_data, c->batch_size, c->seq_len, mc.vocab_size, 1, 0, 0};
        if ((rc = llm_data_open(&t->val, &vopt, st)))
            goto out;
    }
    if (halt(t))
        goto out;
    if ((rc = llm_schedule_init(&t->sched, c->schedule, c->lr, c->min_lr, c->warmup_steps,
                                c->max_steps, c->decay_fraction, st)))
        goto out;
    size_t bt = (size_t)c->batch_size * (size_t)c->seq_len;
    t->in = malloc(bt * sizeof *t->in);
    t->tg = malloc(bt * sizeof *t->tg);
    if (!t->in || !t->tg) {
        rc = llm_err(st, LLM_ENOMEM, "out of memory");
        goto out;
    }
    if (t->val && (rc = check_val(t, st)))
        goto out;
    if (halt(t))
        goto out;
    struct stat od;
    if ((rc = llm_mkdirs_made(c->out_dir, &t->made_dir, st)))
        goto out;
    if (!t->rank)
        llm_train_clean_temps(c->out_dir, t->log);
    if (t->o->resume && (rc = resume(t, &mc, st)))
        goto out;
    if ((rc = check_out_dir(t, st)) || halt(t))
        goto out;
    if ((t->o->dist && llm_dist_world(t->o->dist) > 1) || c->zero) {
        if ((rc = llm_train_dist_new(&t->dd, t->o->dist, t->m, t->be, c->zero, st)) ||
            (rc = llm_train_dist_set_batch(t->dd, c->batch_size, c->seq_len,
                                           llm_config_accum_steps(c) / llm_dist_world(t->o->dist),
                                           st)) ||
            (rc = llm_train_dist_check_step(t->dd, t->step, st)))
            goto out;
        llm_train_dist_set_bucket_mb(t->dd, c->bucket_mb);
    }
    t->made_metrics = !t->rank && c->metrics[0] && strcmp(c->metrics, "-") &&
                      stat(c->metrics, &od) != 0;
    rc = t->rank ? llm_metrics_open(&t->met, "/dev/null", "", 0, st)
                 : llm_metrics_open(&t->met, c->metrics, c->prom, t->o->progress, st);
out:
    llm_ckpt_close(init);
    if (rc || t->halted)   /* a run refused or stopped at its start leaves no empty directory */
        llm_rmdirs_made(c->out_dir, t->made_dir);
    return rc;
}

/* A run stopped before its first step after setup: the metrics file and output.dir it
 * made, still empty, go again (after teardown closed the file). */
static void unmake_outputs(const trainer *t)
{
    struct stat sb;
    if (t->made_metrics && !stat(t->cfg->metrics, &sb) && sb.st_size == 0)
        remove(t->cfg->metrics);
    llm_rmdirs_made(t->cfg->out_dir, t->made_dir);   /* and those above it that it made */
}

static void teardown(trainer *t)
{
    llm_train_dist_free(t->dd);
    llm_metrics_close(t->met);
    llm_data_free(t->train);
    llm_data_free(t->val);
    llm_model_free(t->m);
    llm_tokenizer_free(t->tok);
    if (t->have_be) {
        llm_memtrack_free(&t->mem);
        llm_backend_free(&t->raw);
    }
    free(t->in);
    free(t->tg);
}

/* AdamW's step count for this step's update: the updates applied so far, plus one.  A
 * skipped step does not advance it, as in PyTorch, where a step GradScaler skips never
 * reaches the optimizer: after skipped steps the bias correction is that of the first
 * update, not of the step number. */
static int adam_t(const trainer *t)
{
    return (int)(t->step + 1 - t->skipped_total);
}

/* One optimizer step over accum micro-batches.  An error before the update leaves the
 * model as the last step left it; one in the update (or, with several ranks or ZeRO, in
 * the step's computation) may not: t->unsound says so.  Several ranks read the step's
 * batches first and agree on the outcome, the step's first collective: a rank that could
 * not read its batches stops every rank there (t->together), before any computation. */
static int one_step(trainer *t, int64_t accum, double lr, double *loss, double *gnorm,
                    int *skipped, llm_status *st)
{
    const llm_train_config *c = t->cfg;
    /* the test hook LLM_TRAIN_FAULT_NAN=N makes the loss of every step >= N non-finite,
     * to exercise skipping and the max_skips abort */
    int64_t fault = (int64_t)t->fault_nan;
    if (llm_model_set_loss_scale(t->m, t->ls.scale, st))
        return st->code;
    if (t->dd) {
        int mine = fault_due(t, FAULT_DATA, t->step + 1, st);
        if (!mine)
            mine = llm_train_dist_read(t->dd, t->train, st);
        int rc = llm_train_dist_agree_read(t->dd, mine, &t->together, st);
        if (rc && !mine && t->together)   /* another rank's: which step it was */
            llm_err_prefix(st, "step %lld", (long long)t->step + 1);
        if (rc)
            return rc;
        llm_adamw_config hp = {(float)lr, (float)c->beta1, (float)c->beta2, (float)c->eps,
                               (float)c->weight_decay, (float)c->grad_clip};
        rc = llm_train_dist_step(t->dd, &hp, adam_t(t), fault > 0 && t->step + 1 >= fault,
                                 loss, gnorm, skipped, st);
        t->unsound = rc != 0;
        return rc;
    }
    if (fault_due(t, FAULT_DATA, t->step + 1, st) || llm_model_zero_grad(t->m, st))
        return st->code;
    double sum = 0;
    for (int64_t a = 0; a < accum; a++) {
        float l = 0;
        if (llm_data_next(t->train, t->in, t->tg, st) ||
            llm_model_forward_backward(t->m, t->in, t->tg, c->batch_size, c->seq_len,
                                       1.0f / (float)accum, &l, st))
            return st->code;
        sum += l;
    }
    if (fault_due(t, FAULT_STEP, t->step + 1, st))
        return st->code;
    *loss = sum / (double)accum;
    if (fault > 0 && t->step + 1 >= fault)
        *loss = NAN;
    *skipped = 0;
    *gnorm = NAN;
    if (!isfinite(*loss)) {
        *skipped = 1;  /* the update is not applied: weights and moments stay as they are */
        return 0;
    }
    llm_adamw_config hp = {(float)lr, (float)c->beta1, (float)c->beta2, (float)c->eps,
                           (float)c->weight_decay, (float)c->grad_clip};
    int rc = llm_model_update(t->m, &hp, adam_t(t), gnorm, skipped, st);
    t->unsound = rc != 0;   /* it may have stopped part way through the parameters */
    return rc;
}

/* An error that ends the run after some steps need not lose them: an error in a step
 * before its update (bad data, out of memory in the forward or backward pass) or in an
 * evaluation leaves the model, the optimizer and `done` as the last complete step left
 * them, so save that step, which a resume continues from, and keep the error (st) for the
 * exit status, its message saying what was saved.  Not after a failed final save (that is
 * the error), nor when the update itself failed (t->unsound: it may have changed part of
 * the weights), nor after the device failed (t->lost: the caller does not call it).
 * Several ranks: only after an error every rank met at the same point (t->together: a rank
 * could not read its batches, which every rank learns before the step's computation, each
 * holding the last complete step).  Then the save's own collectives (ZeRO-1 gathers the
 * moments to rank 0) are safe: every rank takes part and rank 0 writes, the ranks having
 * agreed that a save is due (rank 0's last periodic save may have failed on it alone) and
 * learning after it whether it was written.  An error in the middle of a step may leave a
 * rank in collectives the others never start: nothing is saved, and the caller ends the
 * job (st->together is not set).  A collective of the save that fails clears
 * t->together. */
static void rescue(trainer *t, int64_t on_disk, const llm_data_pos *done,
                   llm_train_result *res, llm_status *st)
{
    llm_status why = *st, sst = {0};
    size_t l = strlen(why.msg), n = sizeof why.msg - l;
    char path[LLM_CFG_PATH_MAX + 32];
    int due = t->step > on_disk, failed = 0;
    if (t->dd && llm_train_dist_agree(t->dd, due, &due, &sst))
        goto lost;
    if (!due)
        return;
    if (t->unsound) {
        snprintf(why.msg + l, n, " (in the update of step %lld: the state after step %lld is "
                 "not saved, as the update may have changed part of the weights)",
                 (long long)t->step + 1, (long long)t->step);
        *st = why;
        return;
    }
    failed = save(t, done, res, &sst) != 0;
    if (t->dd && llm_train_dist_agree(t->dd, failed, &failed, &sst))
        goto lost;
    llm_train_ckpt_path(path, sizeof path, t->cfg->out_dir, t->step);
    if (!failed)
        snprintf(why.msg + l, n, " (the state after step %lld, the last complete one, is saved "
                 "in '%.200s')", (long long)t->step, path);
    else if (sst.code)
        snprintf(why.msg + l, n, "; the state after step %lld, the last complete one, is not "
                 "saved: %.300s", (long long)t->step, sst.msg);
    else   /* rank 0 could not write it */
        snprintf(why.msg + l, n, "; the state after step %lld, the last complete one, is not "
                 "saved (rank 0 says why)", (long long)t->step);
    *st = why;
    return;
lost:
    t->together = 0;
    snprintf(why.msg + l, n, "; the state after step %lld, the last complete one, is not saved: "
             "%.300s", (long long)t->step, sst.msg);
    *st = why;
}

int llm_train_run(const llm_train_config *c, const llm_train_opts *o, llm_train_result *res,
                  llm_status *st)
{
    llm_log deflog = llm_log_make("llm-train", 0, 0);
    memset(res, 0, sizeof *res);
    res->last_loss = res->last_val_loss = NAN;
    llm_train_config dc;   /* several ranks: the global batch resolved (train_dist.h) */
    /* first of all, the ranks must agree on the config: a difference is refused before
     * any work (else silently wrong weights, a crash or a hang in a collective) */
    if (llm_train_dist_check_config(c, o->dist, st) || llm_train_dist_config(c, o->dist, &dc, st))
        return st->code;
    c = &dc;
    trainer t = {.cfg = c, .o = o, .log = o->log ? o->log : &deflog,
                 .rank = llm_dist_rank(o->dist)};
    int rc = setup(&t, st);
    if (rc || t.halted) {
        if (t.halted) {
            res->stopped = 1;
            llm_info(t.log, "stopped on a signal before training started: nothing written");
        }
        teardown(&t);
        return rc;
    }
    res->first_step = t.step + 1;
    res->last_step = t.step;
    if (t.step >= c->max_steps)
        llm_info(t.log, "step %lld reached train.max_steps: nothing to do", (long long)t.step);

    const llm_model_config *mc = llm_model_cfg(t.m);
    int64_t accum = llm_config_accum_steps(c) / llm_dist_world(o->dist);
    int world = llm_dist_world(o->dist);  /* tokens/s and MFU are the global ones */
    double tokens = (double)accum * world * c->batch_size * c->seq_len;
    /* llm.c's count (6 N + 6 L T C, the causal attention's half of the scores), as
     * llm-bench and the planner use */
    double flops = tokens * llm_bench_train_flops_per_token(mc, c->seq_len);
    /* the peak when none is configured: on a GPU its table peak for the GEMMs of this
     * precision (bf16/f16 tensor cores, fp32 or TF32), on the CPU the FMA rate of its
     * threads measured now, as llm-bench measures its peak (a fixed guess read 1.16 on
     * an AVX-512 machine).  A GPU the table does not know has no MFU (NaN: the metrics
     * leave it out) rather than one against a guessed peak. */
    double peak = c->peak_flops;
    if (!(peak > 0)) {
        double gflops = llm_bench_train_peak_gflops(t.be, llm_model_precision(t.m));
        peak = gflops > 0 ? gflops * 1e9 : NAN;
        if (!(gflops > 0))
            llm_info(t.log, "mfu: no peak known for this GPU at %s; set train.peak_flops to "
                     "have it reported", llm_dtype_name(llm_model_precision(t.m)));
    }
    peak *= world;
    int ran = 0, save_failed = 0;   /* save_failed: the final save, which ended the run */
    /* the data position after the last completed step (a failed step may have read some of
     * its micro-batches), and the step whose state is on disk (a fresh run: its start) */
    llm_data_pos done = llm_data_tell(t.train);
    int64_t on_disk = t.step, from = t.step;
    while (t.step < c->max_steps) {
        if (!ran && o->stop) {
            /* a signal since setup looked: stop before the first step, every rank alike */
            int stop = *o->stop != 0;
            if (t.dd && (rc = llm_train_dist_agree(t.dd, stop, &stop, st)))
                break;
            if (stop) {
                res->stopped = 1;
                llm_info(t.log, "stopped on a signal before step %lld: nothing written",
                         (long long)t.step + 1);
                break;
            }
        }
        double t0 = llm_now_s(), w0 = llm_data_wait_seconds(t.train);
        double lr = llm_schedule_lr(&t.sched, t.step + 1), loss = 0, gn = 0;
        int skipped;
        char where[64];
        snprintf(where, sizeof where, "step %lld", (long long)t.step + 1);
        if ((rc = device_check(&t, one_step(&t, accum, lr, &loss, &gn, &skipped, st), 0,
                               where, st)))
            break;
        t.step++;
        ran++;
        done = llm_data_tell(t.train);
        double dt = llm_now_s() - t0, wait = llm_data_wait_seconds(t.train) - w0;
        res->step_seconds += dt;
        res->data_seconds += wait;
        res->last_step = t.step;
        res->last_loss = loss;
        /* fp16: a finite loss with a non-finite gradient norm is an overflow of the loss
         * scale, not a divergence: the scale halves and the skip does not count towards
         * train.max_skips (unless the scale is already 1) */
        double scale_from;
        llm_loss_scale_change ch = llm_loss_scaler_update(&t.ls, skipped && isfinite(loss),
                                                          skipped && !isfinite(loss),
                                                          &scale_from);
        if (ch != LLM_LOSS_SCALE_HALVED)
            t.in_a_row = skipped ? t.in_a_row + 1 : 0;
        t.skipped_total += skipped;
        res->skipped += skipped;
        /* device health, after the step's timing; unknown fields stay -1 (not printed) */
        struct llm_device_stats ds = {-1, -1, -1, -1, -1};
        if (t.be->device_stats)
            t.be->device_stats(t.be, &ds);
        llm_step_metrics sm = {t.step, c->max_steps, loss, lr, gn, tokens / dt, dt * 1e3,
                               flops / dt / peak, llm_peak_rss_mb(), t.skipped_total, wait * 1e3,
                               .loss_scale = t.ls.dynamic ? scale_from : 0,
                               .gpu_mem_mb = ds.mem_used_mb, .gpu_mem_peak_mb = ds.mem_peak_mb,
                               .gpu_util = ds.util_pct, .gpu_temp_c = ds.temp_c,
                               .gpu_power_w = ds.power_w};
        int stop_now = 0;
        if (llm_metrics_step(t.met, &sm, st) ||
            (ch != LLM_LOSS_SCALE_SAME &&
             llm_metrics_loss_scale(t.met, t.step, scale_from, t.ls.scale,
                                    ch == LLM_LOSS_SCALE_HALVED ? "overflow" : "grow", st))) {
            if (st->code == LLM_EINTR) /* stdout closed: stop quietly with a checkpoint */
                stop_now = 1;
            else
                llm_warn(t.log, "%s", st->msg);
            llm_status_clear(st);
        }
        if (ch == LLM_LOSS_SCALE_HALVED) {
            llm_metrics_progress_clear(t.met);
            llm_info(t.log, "step %lld: fp16 gradient overflow, update skipped; loss scale "
                     "%.10g -> %.10g", (long long)t.step, scale_from, t.ls.scale);
        } else if (ch == LLM_LOSS_SCALE_GROWN) {
            llm_debug(t.log, "step %lld: loss scale %.10g -> %.10g after %lld clean steps",
                      (long long)t.step, scale_from, t.ls.scale, (long long)t.ls.window);
        } else if (skipped) {
            llm_metrics_progress_clear(t.met);
            llm_warn(t.log, "step %lld: non-finite loss or gradient norm, update skipped "
                     "(%lld in a row)", (long long)t.step, (long long)t.in_a_row);
        }
        if (t.in_a_row >= c->max_skips) {
            llm_error(t.log, "%lld non-finite steps in a row (train.max_skips): giving up at "
                      "step %lld", (long long)t.in_a_row, (long long)t.step);
            res->diverged = 1;
            break;
        }
        int last = t.step == c->max_steps;
        if ((o->stop && *o->stop) || (c->exit_after && ran >= c->exit_after))
            stop_now = 1;
        /* the end of this run, planned or not, gets an evaluation too */
        if (t.val && ((c->eval_every && t.step % c->eval_every == 0) || last || stop_now)) {
            double vl = 0;
            snprintf(where, sizeof where, "the evaluation after step %lld", (long long)t.step);
            if ((rc = device_check(&t, evaluate(&t, &vl, st), 0, where, st)))
                break;
            res->last_val_loss = vl;
            if (llm_metrics_eval(t.met, t.step, vl, st)) {
                stop_now |= st->code == LLM_EINTR;
                llm_status_clear(st);
            }
            /* the sample is for the eye: failing it (out of memory) is no reason to stop */
            if (c->sample_tokens > 0 && t.tok && print_sample(&t, st)) {
                llm_metrics_progress_clear(t.met);
                llm_warn(t.log, "step %lld: no sample: %s", (long long)t.step, st->msg);
                llm_status_clear(st);
            }
            snprintf(where, sizeof where, "the sample after step %lld", (long long)t.step);
            if (c->sample_tokens > 0 && t.tok && (rc = device_check(&t, 0, 0, where, st)))
                break;
        }
        if (o->stop && *o->stop)
            stop_now = 1;  /* a signal during the evaluation */
        int asked_here = stop_now;
        if (t.dd && (rc = llm_train_dist_agree(t.dd, stop_now, &stop_now, st)))
            break; /* every rank stops at the same step when any rank is asked to */
        if (t.step % c->save_every == 0 || last || stop_now) {
            if (save(&t, &done, res, st)) {
                llm_metrics_progress_clear(t.met);
                if (last || stop_now || t.lost) {   /* the caller reports it */
                    save_failed = 1;
                    rc = st->code;
                    break;
                }
                /* a failed periodic save is not the end: the next one may succeed */
                llm_error(t.log, "%s", st->msg);
                llm_status_clear(st);
            } else {
                on_disk = t.step;
            }
        }
        if (stop_now) {
            res->stopped = 1;
            if (o->stop && *o->stop)
                llm_info(t.log, "stopping at step %lld on a signal", (long long)t.step);
            else if (!asked_here)   /* rank 0 says why the job ends early */
                llm_info(t.log, "stopping at step %lld: another rank was asked to stop (a "
                         "signal)", (long long)t.step);
            break;
        }
    }
    /* An error that ends the run after some steps need not lose them (rescue); nor when
     * the device failed (t.lost, device_check: a sticky error, which may come from the last
     * step's update, and after which nothing can be read back): the checkpoint on disk is
     * what to resume from, and the message says which. */
    if (rc && t.lost) {
        size_t l = strlen(st->msg);
        if (res->last_ckpt[0])
            snprintf(st->msg + l, sizeof st->msg - l, "; nothing is saved: resume from the "
                     "last checkpoint on disk, '%.200s' (step %lld)", res->last_ckpt,
                     (long long)on_disk);
        else if (on_disk > from)   /* a rank but 0: rank 0 wrote it, and knows whether */
            snprintf(st->msg + l, sizeof st->msg - l, "; nothing is saved: resume from the "
                     "newest checkpoint in '%.200s' (rank 0 wrote the last one, of step %lld, "
                     "unless it said that save failed)", t.cfg->out_dir, (long long)on_disk);
        else if (on_disk > 0)
            snprintf(st->msg + l, sizeof st->msg - l, "; nothing is saved: resume from the "
                     "checkpoint this run started from (step %lld)", (long long)on_disk);
        else
            snprintf(st->msg + l, sizeof st->msg - l, "; nothing is saved, and no checkpoint "
                     "of this run is on disk: train again from the start");
    } else if (rc && !save_failed && (world == 1 || t.together)) {
        rescue(&t, on_disk, &done, res, st);
    }
    if (rc && t.together)   /* each rank says its own (the one that failed, why) */
        st->together = LLM_TOGETHER_OWN;
    res->mem_peak = (double)t.mem.peak;
    res->rss_peak = llm_peak_rss_mb() * 1024.0 * 1024.0;
    teardown(&t);
    if (!ran && res->stopped)
        unmake_outputs(&t);
    return rc;
}
