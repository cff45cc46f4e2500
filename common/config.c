/* config.c — the training config schema and its strict loader. */
#include "common/config.h"

#include <errno.h>
#include <limits.h>
#include <math.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>

#include "common/cli.h"

typedef enum { K_INT, K_I64, K_DBL, K_STR, K_WORD, K_BOOL } kind;

typedef struct {
    const char *key;      /* "section.name" */
    kind k;
    size_t off;
    const char *deflt;    /* default as text (parsed at init) */
    double lo, hi;        /* numeric range (inclusive) */
    const char *choices;  /* K_WORD: "a|b|c" (NULL: any word) */
    const char *help;
} entry;

#define O(f) offsetof(llm_train_config, f)
#define BIG 9.0e18

static const entry schema[] = {
    {"model.arch", K_WORD, O(arch), "gpt2", 0, 0, "gpt2", "architecture"},
    {"model.n_layer", K_INT, O(n_layer), "12", 1, 1024, NULL, "transformer blocks"},
    {"model.n_head", K_INT, O(n_head), "12", 1, 1024, NULL, "attention heads"},
    {"model.n_embd", K_INT, O(n_embd), "768", 1, 65536, NULL, "channels"},
    {"model.vocab_size", K_INT, O(vocab_size), "50257", 1, 16777216, NULL, "vocabulary size"},
    {"model.max_seq_len", K_INT, O(max_seq_len), "1024", 1, 1048576, NULL, "context length"},
    {"model.padded_vocab_size", K_INT, O(padded_vocab_size), "0", 0, 16777216, NULL,
     "padded vocabulary (0: vocab_size rounded up to 128)"},
    {"model.init_from", K_STR, O(init_from), "", 0, 0, NULL,
     "start from this checkpoint's weights (its model section is used)"},
    {"data.train", K_STR, O(train_data), "", 0, 0, NULL, "training token file(s), a glob"},
    {"data.val", K_STR, O(val_data), "", 0, 0, NULL, "validation token file(s); empty: no eval"},
    {"data.tokenizer", K_STR, O(tokenizer), "gpt2", 0, 0, NULL,
     "gpt2, byte, a .llmk file or a directory with encoder.json and vocab.bpe"},
    {"data.sampling", K_WORD, O(sampling), "random", 0, 0, "random|sequential",
     "how training windows are chosen"},
    {"data.prefetch", K_BOOL, O(prefetch), "true", 0, 1, NULL,
     "prepare the next batch on a thread"},
    {"train.batch_size", K_INT, O(batch_size), "4", 1, 65536, NULL, "micro-batch B"},
    {"train.seq_len", K_INT, O(seq_len), "1024", 1, 1048576, NULL, "sequence length T"},
    {"train.total_batch_tokens", K_I64, O(total_batch_tokens), "0", 0, BIG, NULL,
     "tokens per optimizer step (0: B*T); a multiple of B*T"},
    {"train.max_steps", K_I64, O(max_steps), "1000", 1, INT_MAX, NULL,
     "optimizer steps (AdamW counts them in an int)"},
    {"train.lr", K_DBL, O(lr), "0.0006", 0, 10, NULL, "peak learning rate"},
    {"train.min_lr", K_DBL, O(min_lr), "0", 0, 10, NULL, "final learning rate"},
    {"train.warmup_steps", K_I64, O(warmup_steps), "0", 0, BIG, NULL, "linear warmup steps"},
    {"train.schedule", K_WORD, O(schedule), "cosine", 0, 0, "cosine|linear|constant|wsd",
     "learning rate schedule after warmup"},
    {"train.decay_fraction", K_DBL, O(decay_fraction), "0.2", 0, 1, NULL,
     "wsd: share of max_steps spent decaying to min_lr"},
    {"train.weight_decay", K_DBL, O(weight_decay), "0.1", 0, 10, NULL, "AdamW weight decay"},
    {"train.beta1", K_DBL, O(beta1), "0.9", 0, 0.999999, NULL, "AdamW beta1"},
    {"train.beta2", K_DBL, O(beta2), "0.95", 0, 0.999999999, NULL, "AdamW beta2"},
    {"train.eps", K_DBL, O(eps), "1e-08", 1e-30, 1, NULL, "AdamW epsilon"},
    {"train.grad_clip", K_DBL, O(grad_clip), "1", 0, 1e9, NULL,
     "clip the global gradient norm (0: off)"},
    {"train.seed", K_I64, O(seed), "1337", 0, BIG, NULL, "initialisation and data seed"},
    {"train.eval_every", K_I64, O(eval_every), "0", 0, BIG, NULL,
     "evaluate every N steps (0: only at the end)"},
    {"train.eval_batches", K_I64, O(eval_batches), "20", 1, 1e9, NULL, "batches per eval"},
    {"train.save_every", K_I64, O(save_every), "1000", 1, BIG, NULL, "checkpoint every N steps"},
    {"train.keep_last", K_INT, O(keep_last), "3", 0, 1000000, NULL,
     "checkpoints kept (0: all)"},
    {"train.exit_after", K_I64, O(exit_after), "0", 0, BIG, NULL,
     "stop with a checkpoint after N steps of this run (0: never)"},
    {"train.max_skips", K_INT, O(max_skips), "5", 1, 1000000, NULL,
     "non-finite steps in a row that end the run (exit 3)"},
    {"train.sample_tokens", K_INT, O(sample_tokens), "0", 0, 1000000, NULL,
     "print a sample of N tokens after each eval (0: none)"},
    {"train.peak_flops", K_DBL, O(peak_flops), "0", 0, 1e21, NULL,
     "device peak FLOP/s for MFU (0: an estimate)"},
    {"train.device", K_WORD, O(device), "auto", 0, 0, "cpu|cpu-ref|cuda|auto",
     "kernel backend (auto: cuda when a GPU is usable, else cpu)"},
    {"train.threads", K_INT, O(threads), "0", 0, 4096, NULL, "CPU threads (0: all cores)"},
    {"train.zero", K_INT, O(zero), "0", 0, 1, NULL,
     "ZeRO stage with several ranks: 0 replicated optimizer, 1 sharded AdamW moments"},
    {"train.bucket_mb", K_DBL, O(bucket_mb), "4", 0, 1048576, NULL,
     "ZeRO-0: all-reduce gradients in buckets of >= N MiB during the backward (0: after it)"},
    {"train.precision", K_WORD, O(precision), "fp32", 0, 0, "fp32|bf16|fp16",
     "matmul operands and activations: fp32, or bf16/fp16 with fp32 accumulation and master weights"},
    {"train.loss_scale", K_DBL, O(loss_scale), "65536", 1, 16777216, NULL,
     "fp16: initial loss scale (dynamic: halved on overflow, doubled after a window)"},
    {"train.loss_scale_window", K_I64, O(loss_scale_window), "1000", 1, 1e9, NULL,
     "fp16: consecutive clean steps before the loss scale doubles"},
    {"train.recompute", K_WORD, O(recompute), "none", 0, 0, "none|selective|full",
     "activations recomputed in the backward: none, attention probabilities (bf16/fp16: the GELU output), whole layers"},
    {"output.dir", K_STR, O(out_dir), "out", 0, 0, NULL, "checkpoint directory"},
    {"output.metrics", K_STR, O(metrics), "", 0, 0, NULL, "JSON lines file (empty or -: stdout)"},
    {"output.prom", K_STR, O(prom), "", 0, 0, NULL, "Prometheus textfile (empty: none)"},
};
#define NKEYS ((int)(sizeof schema / sizeof schema[0]))
_Static_assert(sizeof schema / sizeof schema[0] <= 64, "given[] too small");

static const char *sections[] = {"model", "data", "train", "output"};

static const entry *find(const char *key, int *idx)
{
    for (int i = 0; i < NKEYS; i++)
        if (!strcmp(schema[i].key, key)) {
            if (idx)
                *idx = i;
            return &schema[i];
        }
    return NULL;
}

static int word_ok(const char *choices, const char *v)
{
    size_t n = strlen(v);
    for (const char *p = choices; *p;) {
        const char *e = strchr(p, '|');
        size_t len = e ? (size_t)(e - p) : strlen(p);
        if (len == n && !strncmp(p, v, n))
            return 1;
        if (!e)
            break;
        p = e + 1;
    }
    return 0;
}

/* Convert text v into the field of e.  where: "FILE:LINE" or "--set 'k=v'".  */
static int store(llm_train_config *cfg, const entry *e, const char *v, int quoted,
                 const char *where, llm_code code, llm_status *st)
{
    char *dst = (char *)cfg + e->off;
    double d = 0;
    int64_t i = 0;
    switch (e->k) {
    case K_INT:
    case K_I64: {
        /* the header's integer rules (tree.c): decimal, no leading zero, which YAML 1.1
         * readers take as octal */
        llm_node n = {.kind = LLM_NODE_SCALAR, .value = (char *)v};
        if (quoted || llm_node_i64(&n, &i))
            return llm_err(st, code, "%s: '%s' must be an integer, got '%s'", where, e->key, v);
        if ((double)i < e->lo && e->hi >= BIG)
            return llm_err(st, code, "%s: '%s' must be at least %.15g, got %s", where, e->key,
                           e->lo, v);
        if ((double)i < e->lo || (double)i > e->hi)
            return llm_err(st, code, "%s: '%s' must be in [%.15g, %.15g], got %s", where, e->key,
                           e->lo, e->hi, v);
        if (e->k == K_INT)
            *(int *)dst = (int)i;
        else
            *(int64_t *)dst = i;
        return 0;
    }
    case K_DBL:
        if (quoted || llm_parse_double(v, &d))
            return llm_err(st, code, "%s: '%s' must be a number, got '%s'", where, e->key, v);
        if (d < e->lo || d > e->hi)
            return llm_err(st, code, "%s: '%s' must be in [%.15g, %.15g], got %s", where, e->key,
                           e->lo, e->hi, v);
        *(double *)dst = d;
        return 0;
    case K_BOOL: {
        llm_node n = {.kind = LLM_NODE_SCALAR, .value = (char *)v};
        int b;
        if (quoted || llm_node_bool(&n, &b))
            return llm_err(st, code, "%s: '%s' must be true or false, got '%s'", where, e->key, v);
        *(int *)dst = b;
        return 0;
    }
    case K_WORD:
        if (e->choices && !word_ok(e->choices, v))
            return llm_err(st, code, "%s: '%s' must be one of %s, got '%s'", where, e->key,
                           e->choices, v);
        if (strlen(v) >= LLM_CFG_WORD_MAX)
            return llm_err(st, code, "%s: '%s' is too long", where, e->key);
        strcpy(dst, v);
        return 0;
    case K_STR:
        if (strlen(v) >= LLM_CFG_PATH_MAX)
            return llm_err(st, code, "%s: '%s' is longer than %d bytes", where, e->key,
                           LLM_CFG_PATH_MAX - 1);
        if (memchr(v, '\n', strlen(v)))
            return llm_err(st, code, "%s: '%s' must be one line", where, e->key);
        strcpy(dst, v);
        return 0;
    }
    return llm_err(st, LLM_ESOFTWARE, "config: bad schema entry '%s'", e->key);
}

void llm_config_defaults(llm_train_config *cfg)
{
    memset(cfg, 0, sizeof *cfg);
    for (int i = 0; i < NKEYS; i++) {
        llm_status st = {0};
        store(cfg, &schema[i], schema[i].deflt, 0, "default", LLM_ESOFTWARE, &st);
    }
}

int llm_config_apply_yaml(llm_train_config *cfg, const char *buf, size_t len, const char *fname,
                          llm_status *st)
{
    llm_node *root = NULL;
    llm_yaml_limits lim = llm_yaml_default_limits;
    lim.max_bytes = 1u << 20;
    lim.max_depth = 4;
    lim.max_nodes = 10000;
    if (llm_yaml_parse(buf, len, fname, &lim, &root, st))
        return st->code == LLM_ENOMEM ? st->code : (st->code = LLM_EDATA);
    int rc = 0;
    char where[LLM_CFG_PATH_MAX + 32];
    snprintf(cfg->source, sizeof cfg->source, "%s", fname);
    if (!root || (root->kind == LLM_NODE_SCALAR && (!root->value || !*root->value)))
        goto out; /* an empty document: defaults only */
    if (root->kind != LLM_NODE_MAP) {
        rc = llm_err(st, LLM_EDATA, "%s:%d: the config must be a mapping of sections", fname,
                     root->line);
        goto out;
    }
    for (int s = 0; s < root->n; s++) {
        const llm_node *sec = root->items[s];
        int known = 0;
        for (size_t k = 0; k < sizeof sections / sizeof *sections; k++)
            known |= !strcmp(sec->key, sections[k]);
        if (!known) {
            rc = llm_err(st, LLM_EDATA,
                         "%s:%d: unknown section '%s' (want model, data, train or output)",
                         fname, sec->line, sec->key);
            goto out;
        }
        if (sec->kind == LLM_NODE_SCALAR && (!sec->value || !*sec->value))
            continue; /* "train:" with nothing under it */
        if (sec->kind != LLM_NODE_MAP) {
            rc = llm_err(st, LLM_EDATA, "%s:%d: section '%s' must be a mapping", fname,
                         sec->line, sec->key);
            goto out;
        }
        for (int i = 0; i < sec->n; i++) {
            const llm_node *kv = sec->items[i];
            char key[256];
            snprintf(key, sizeof key, "%s.%s", sec->key, kv->key);
            int idx;
            const entry *e = find(key, &idx);
            snprintf(where, sizeof where, "%s:%d", fname, kv->line);
            if (!e) {
                rc = llm_err(st, LLM_EDATA, "%s: unknown key '%s'", where, key);
                goto out;
            }
            if (kv->kind != LLM_NODE_SCALAR || !kv->value) {
                rc = llm_err(st, LLM_EDATA, "%s: '%s' must be a single value, not a %s", where,
                             key, kv->kind == LLM_NODE_MAP ? "mapping" : "sequence");
                goto out;
            }
            if ((rc = store(cfg, e, kv->value, kv->quoted, where, LLM_EDATA, st)))
                goto out;
            cfg->given[idx] = 1;
            cfg->line[idx] = kv->line;
        }
    }
out:
    llm_node_free(root);
    return rc;
}

int llm_config_load(llm_train_config *cfg, const char *path, llm_status *st)
{
    FILE *f = strcmp(path, "-") ? fopen(path, "rb") : stdin;
    if (!f)
        return llm_err(st, LLM_ENOINPUT, "cannot open config '%s': %s", path, strerror(errno));
    size_t cap = 1u << 20, n = 0;
    char *buf = malloc(cap + 1);
    if (!buf) {
        if (f != stdin)
            fclose(f);
        return llm_err(st, LLM_ENOMEM, "out of memory");
    }
    n = fread(buf, 1, cap + 1, f);
    int bad = ferror(f);
    if (f != stdin)
        fclose(f);
    int rc;
    if (bad)
        rc = llm_err(st, LLM_ENOINPUT, "cannot read config '%s'", path);
    else if (n > cap)
        rc = llm_err(st, LLM_EDATA, "config '%s' is larger than 1 MiB", path);
    else
        rc = llm_config_apply_yaml(cfg, buf, n, path, st);
    free(buf);
    return rc;
}

/* key=value in a, errors said to come from where */
static int set_at(llm_train_config *cfg, const char *a, const char *where, llm_status *st)
{
    const char *eq = strchr(a, '=');
    if (!eq || eq == a)
        return llm_err(st, LLM_EUSAGE, "%s: want section.key=value", where);
    char key[256];
    size_t kl = (size_t)(eq - a);
    if (kl >= sizeof key)
        return llm_err(st, LLM_EUSAGE, "%s: key too long", where);
    memcpy(key, a, kl);
    key[kl] = 0;
    int idx;
    const entry *e = find(key, &idx);
    if (!e)
        return llm_err(st, LLM_EUSAGE, "%s: unknown key '%s'", where, key);
    if (store(cfg, e, eq + 1, 0, where, LLM_EUSAGE, st))
        return st->code;
    cfg->given[idx] = 2;
    cfg->line[idx] = 0;
    return 0;
}

int llm_config_set(llm_train_config *cfg, const char *a, llm_status *st)
{
    char where[300];
    snprintf(where, sizeof where, "--set '%.250s'", a);
    return set_at(cfg, a, where, st);
}

int llm_config_set_opt(llm_train_config *cfg, const char *opt, const char *key,
                       const char *value, llm_status *st)
{
    if (!value)
        return 0;
    char a[LLM_CFG_PATH_MAX + 300], where[300];
    if ((size_t)snprintf(a, sizeof a, "%s=%s", key, value) >= sizeof a)
        return llm_err(st, LLM_EUSAGE, "%s: value too long", opt);
    snprintf(where, sizeof where, "%s '%.200s'", opt, value);
    return set_at(cfg, a, where, st);
}

/* Where key got its value: "run.yaml:12", "--set", or the config file for a default. */
static const char *origin(const llm_train_config *c, const char *key, char *buf, size_t n)
{
    int i;
    if (!find(key, &i) || !c->given[i])
        snprintf(buf, n, "%s", c->source[0] ? c->source : "config");
    else if (c->given[i] == 2)
        snprintf(buf, n, "--set");
    else
        snprintf(buf, n, "%s:%d", c->source, c->line[i]);
    return buf;
}

int llm_config_validate(const llm_train_config *c, llm_status *st)
{
    char w[LLM_CFG_PATH_MAX + 16];
#define AT(key) origin(c, key, w, sizeof w)
    if (!c->train_data[0])
        return llm_err(st, LLM_EDATA, "%s: 'data.train' is required", AT("data.train"));
    if (!c->init_from[0]) {
        if (c->n_embd % c->n_head)
            return llm_err(st, LLM_EDATA, "%s: 'model.n_embd' (%d) must be a multiple of "
                           "'model.n_head' (%d)", AT("model.n_head"), c->n_embd, c->n_head);
        if (c->padded_vocab_size && c->padded_vocab_size < c->vocab_size)
            return llm_err(st, LLM_EDATA, "%s: 'model.padded_vocab_size' (%d) is below "
                           "'model.vocab_size' (%d)", AT("model.padded_vocab_size"),
                           c->padded_vocab_size, c->vocab_size);
        if (c->seq_len > c->max_seq_len)
            return llm_err(st, LLM_EDATA, "%s: 'train.seq_len' (%d) exceeds 'model.max_seq_len' (%d)",
                           AT("train.seq_len"), c->seq_len, c->max_seq_len);
    }
    int64_t bt = (int64_t)c->batch_size * c->seq_len;
    if (bt > (int64_t)1 << 31)
        return llm_err(st, LLM_EDATA, "%s: 'train.batch_size' x 'train.seq_len' is too large",
                       AT("train.batch_size"));
    if (c->total_batch_tokens && c->total_batch_tokens % bt)
        return llm_err(st, LLM_EDATA, "%s: 'train.total_batch_tokens' (%lld) must be a multiple "
                       "of 'train.batch_size' x 'train.seq_len' (%lld)",
                       AT("train.total_batch_tokens"), (long long)c->total_batch_tokens,
                       (long long)bt);
    if (c->min_lr > c->lr)
        return llm_err(st, LLM_EDATA, "%s: 'train.min_lr' (%g) exceeds 'train.lr' (%g)",
                       AT("train.min_lr"), c->min_lr, c->lr);
    if (!c->out_dir[0])
        return llm_err(st, LLM_EDATA, "%s: 'output.dir' must not be empty", AT("output.dir"));
#undef AT
    return 0;
}

int64_t llm_config_accum_steps(const llm_train_config *c)
{
    int64_t bt = (int64_t)c->batch_size * c->seq_len;
    return c->total_batch_tokens ? c->total_batch_tokens / bt : 1;
}

/* The shortest %g form that reads back to the same double (0.0006, not 0.00059999...). */
static void shortest(char *buf, size_t n, double v)
{
    for (int p = 1; p <= 17; p++) {
        snprintf(buf, n, "%.*g", p, v);
        if (strtod(buf, NULL) == v)
            return;
    }
}

llm_node *llm_config_to_node(const llm_train_config *c)
{
    llm_node *root = llm_node_new_map();
    if (!root)
        return NULL;
    for (size_t s = 0; s < sizeof sections / sizeof *sections; s++) {
        llm_node *sec = llm_node_new_map();
        if (!sec || llm_node_set(root, sections[s], sec))
            goto oom;
        size_t sl = strlen(sections[s]);
        for (int i = 0; i < NKEYS; i++) {
            const entry *e = &schema[i];
            if (strncmp(e->key, sections[s], sl) || e->key[sl] != '.')
                continue;
            const char *name = e->key + sl + 1;
            const char *p = (const char *)c + e->off;
            int r;
            switch (e->k) {
            case K_INT: r = llm_node_set_int(sec, name, *(const int *)p); break;
            case K_I64: r = llm_node_set_int(sec, name, *(const int64_t *)p); break;
            case K_DBL: {
                char num[40];
                shortest(num, sizeof num, *(const double *)p);
                r = llm_node_set_str(sec, name, num);
                break;
            }
            case K_BOOL: r = llm_node_set_str(sec, name, *(const int *)p ? "true" : "false"); break;
            default: r = llm_node_set_str(sec, name, p); break;
            }
            if (r)
                goto oom;
            if (e->k == K_BOOL || e->k == K_DBL) /* a YAML bool/number, not a string */
                llm_node_get(sec, name)->quoted = 0;
        }
    }
    return root;
oom:
    llm_node_free(root);
    return NULL;
}

int llm_config_print(const llm_train_config *c, FILE *f, llm_status *st)
{
    llm_node *n = llm_config_to_node(c);
    if (!n)
        return llm_err(st, LLM_ENOMEM, "out of memory");
    char *txt = NULL;
    size_t len = 0;
    int rc = llm_yaml_emit(n, &txt, &len, st);
    llm_node_free(n);
    if (rc)
        return rc;
    if (fwrite(txt, 1, len, f) != len || fflush(f))
        rc = llm_err(st, LLM_EIO, "cannot write the config: %s", strerror(errno));
    free(txt);
    return rc;
}

const char *llm_config_key(int i, const char **deflt, const char **help)
{
    if (i < 0 || i >= NKEYS)
        return NULL;
    if (deflt)
        *deflt = schema[i].deflt;
    if (help)
        *help = schema[i].help;
    return schema[i].key;
}

int llm_config_range(const char *key, double *lo, double *hi)
{
    const entry *e = find(key, NULL);
    if (!e || (e->k != K_INT && e->k != K_I64 && e->k != K_DBL))
        return 0;
    *lo = e->lo;
    *hi = e->hi;
    return 1;
}

int llm_config_given(const llm_train_config *c, const char *key)
{
    int idx;
    return find(key, &idx) ? c->given[idx] : 0;
}
