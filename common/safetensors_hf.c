/* safetensors_hf.c — Hugging Face GPT-2 directories (model.safetensors, config.json,
 * tokenizer files) to and from .llmk.  HF's Conv1D stores weights as (in, out), llmkit
 * as (out, in): the four matmul weights are transposed on the way. */
#include "common/safetensors.h"
#include "common/safetensors_int.h"

#include <errno.h>
#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "common/fsutil.h"
#include "common/model.h"

static const char *const layer_names[12] = {
    "ln_1.weight", "ln_1.bias", "attn.c_attn.weight", "attn.c_attn.bias", "attn.c_proj.weight",
    "attn.c_proj.bias", "ln_2.weight", "ln_2.bias", "mlp.c_fc.weight", "mlp.c_fc.bias",
    "mlp.c_proj.weight", "mlp.c_proj.bias"};

static int is_conv1d(int k) { return k == 2 || k == 4 || k == 8 || k == 10; }

/* (R,K) -> (K,R) for elements of es bytes. */
static void transpose(const void *src, void *dst, int64_t R, int64_t K, int es)
{
    const unsigned char *s = src;
    unsigned char *d = dst;
    for (int64_t r = 0; r < R; r++)
        for (int64_t k = 0; k < K; k++)
            memcpy(d + ((size_t)k * (size_t)R + (size_t)r) * (size_t)es, s + ((size_t)r * (size_t)K + (size_t)k) * (size_t)es,
                   (size_t)es);
}

static const char *st_dtype(llm_dtype dt)
{
    return dt == LLM_DT_F32 ? "F32" : dt == LLM_DT_F16 ? "F16" : dt == LLM_DT_BF16 ? "BF16" : NULL;
}

/* The .llmk name of parameter i in model order (wte, wpe, layers, ln_f). */
static void param_name(int i, int L, char *buf, size_t n, int *layer_kind)
{
    *layer_kind = -1;
    if (i == 0)
        snprintf(buf, n, "wte");
    else if (i == 1)
        snprintf(buf, n, "wpe");
    else if (i < 2 + 12 * L)
        *layer_kind = (i - 2) % 12, snprintf(buf, n, "h.%d.%s", (i - 2) / 12, layer_names[(i - 2) % 12]);
    else
        snprintf(buf, n, "ln_f.%s", i == 2 + 12 * L ? "weight" : "bias");
}

static int write_config(const llm_model_config *cfg, int eot, const char *torch_dtype,
                        const char *dir, llm_status *st)
{
    json_t *j = json_pack("{s:[s], s:s, s:s, s:i, s:i, s:i, s:i, s:i, s:i, s:n, s:f, s:f, s:f, s:f, s:f, s:i, "
                          "s:i, s:b, s:b, s:b, s:s}",
                          "architectures", "GPT2LMHeadModel", "model_type", "gpt2", "activation_function", "gelu_new",
                          "n_layer", cfg->n_layer, "n_head", cfg->n_head, "n_embd", cfg->n_embd, "n_positions",
                          cfg->max_seq_len, "n_ctx", cfg->max_seq_len, "vocab_size", cfg->vocab_size, "n_inner",
                          "layer_norm_epsilon", 1e-5, "initializer_range", 0.02, "resid_pdrop", 0.0, "embd_pdrop",
                          0.0, "attn_pdrop", 0.0, "bos_token_id", eot, "eos_token_id", eot, "tie_word_embeddings", 1,
                          "scale_attn_weights", 1, "use_cache", 1, "torch_dtype", torch_dtype);
    char *s = j ? json_dumps(j, JSON_INDENT(2) | JSON_PRESERVE_ORDER) : NULL;
    json_decref(j);
    if (!s)
        return llm_err(st, LLM_ENOMEM, "out of memory");
    char path[4200];
    snprintf(path, sizeof path, "%s/config.json", dir);
    int rc = llm_afile_write(path, 0, s, strlen(s), st);
    free(s);
    return rc;
}

int llm_hf_export(const char *in, const char *outdir, char *note, size_t note_len, llm_status *st)
{
    if (note && note_len)
        note[0] = 0;
    llm_ckpt *c;
    int rc = llm_ckpt_open(&c, in, 0, st);   /* its messages name the file */
    if (rc)
        return rc;
    llm_model_config cfg;
    int np = 0;
    const char *torch_dtype = "float32";
    llm_st_writer *w = NULL;
    void **bufs = NULL;
    const llm_node *ms = llm_ckpt_section(c, "model");
    if (!ms) {
        rc = llm_err(st, LLM_EDATA, "no model section");
        goto out;
    }
    if ((rc = llm_model_config_parse(ms, &cfg, st)))
        goto out;
    np = 2 + 12 * cfg.n_layer + 2;
    bufs = calloc((size_t)np, sizeof *bufs);
    if (!bufs || (rc = llm_st_writer_new(&w, st))) {
        rc = rc ? rc : llm_err(st, LLM_ENOMEM, "out of memory");
        goto out;
    }
    for (int i = 0; i < np; i++) {
        char name[128], hf[160];
        int k;
        param_name(i, cfg.n_layer, name, sizeof name, &k);
        const llm_tensor *t = llm_ckpt_find(c, name);
        if (!t) {
            rc = llm_err(st, LLM_EDATA, "checkpoint has no tensor '%s'", name);
            goto out;
        }
        if ((rc = llm_model_check_shape(&cfg, name, t, st)))
            goto out;
        const char *dt = st_dtype(t->dtype);
        if (i == 0)   /* config.json's torch_dtype: the embedding's, as transformers writes it */
            torch_dtype = t->dtype == LLM_DT_BF16 ? "bfloat16" : t->dtype == LLM_DT_F16 ? "float16"
                                                                                   : "float32";
        if (!dt) {
            rc = llm_err(st, LLM_EDATA, "tensor '%s': dtype %s cannot be exported to safetensors (f32, f16, bf16)",
                         name, llm_dtype_name(t->dtype));
            goto out;
        }
        int es = t->dtype == LLM_DT_F32 ? 4 : 2;
        snprintf(hf, sizeof hf, "transformer.%s%s", name, i < 2 ? ".weight" : "");
        int64_t shape[2] = {t->shape[0], t->ndim == 2 ? t->shape[1] : 0};
        const void *data = t->data;
        uint64_t nbytes = t->nbytes;
        if (i == 0) {   /* the real vocabulary rows only */
            shape[0] = cfg.vocab_size;
            nbytes = (uint64_t)cfg.vocab_size * (uint64_t)shape[1] * (uint64_t)es;
        } else if (k >= 0 && is_conv1d(k)) {
            if (!(bufs[i] = malloc(t->nbytes + 1))) {
                rc = llm_err(st, LLM_ENOMEM, "tensor '%s': out of memory", name);
                goto out;
            }
            transpose(t->data, bufs[i], t->shape[0], t->shape[1], es);
            data = bufs[i];
            shape[0] = t->shape[1], shape[1] = t->shape[0];
        }
        if ((rc = llm_st_add(w, hf, dt, t->ndim, shape, data, nbytes, st)))
            goto out;
    }
    /* the directory (and any missing parent) only once the checkpoint has passed */
    if ((rc = llm_mkdirs(outdir, st)))
        goto out;
    char path[4200];
    snprintf(path, sizeof path, "%s/model.safetensors", outdir);
    if ((rc = llm_st_write(w, path, st)))
        goto out;
    int eot = cfg.vocab_size - 1;
    const llm_node *tk = llm_ckpt_section(c, "tokenizer");
    int64_t e64;
    if (tk && !llm_node_i64(llm_node_get(tk, "eot"), &e64) && e64 >= 0 && e64 < cfg.vocab_size)
        eot = (int)e64;
    if ((rc = write_config(&cfg, eot, torch_dtype, outdir, st)))
        goto out;
    if (tk)
        rc = llm_hf_tok_write(c, outdir, cfg.max_seq_len, st);
    else if (note && note_len)   /* a model without one (an llm.c import): say so, it is not an error */
        snprintf(note, note_len, "'%s' has no tokenizer section: no vocab.json, merges.txt or "
                 "tokenizer_config.json written (load a tokenizer separately, e.g. GPT-2's)", in);
out:
    if (rc == LLM_EDATA)   /* what the checkpoint lacks: named with the file */
        llm_err_prefix(st, "%s", in);
    for (int i = 0; bufs && i < np; i++)
        free(bufs[i]);
    free(bufs);
    llm_st_writer_free(w);
    llm_ckpt_close(c);
    return rc;
}

/* config.json -> cfg, strictly: the keys llmkit needs, and refusals for GPT-2 variants
 * it does not implement. */
static int read_config(const char *dir, llm_model_config *cfg, llm_status *st)
{
    char path[4200];
    snprintf(path, sizeof path, "%s/config.json", dir);
    struct stat sb;
    if (stat(path, &sb))
        return llm_err(st, LLM_ENOINPUT, "cannot open '%s': %s", path, strerror(errno));
    if (sb.st_size > (1 << 20))
        return llm_err(st, LLM_EDATA, "'%s' is larger than 1 MiB", path);
    json_error_t e;
    json_t *j = json_load_file(path, JSON_REJECT_DUPLICATES, &e);
    if (!j)
        return llm_err(st, LLM_EDATA, "'%s': line %d: %s", path, e.line, e.text);
    int rc = LLM_OK;
    json_t *mt = json_object_get(j, "model_type"), *act = json_object_get(j, "activation_function"),
           *eps = json_object_get(j, "layer_norm_epsilon");
    json_t *np = json_object_get(j, "n_positions");
    if (!np)
        np = json_object_get(j, "n_ctx");
    const char *ik[4] = {"n_layer", "n_head", "n_embd", "vocab_size"};
    int iv[5];
    for (int i = 0; i < 5 && !rc; i++) {
        json_t *x = i < 4 ? json_object_get(j, ik[i]) : np;
        if (!json_is_integer(x) || json_integer_value(x) < 1 || json_integer_value(x) > (1 << 24))
            rc = llm_err(st, LLM_EDATA, "'%s': '%s' missing or not a positive integer", path,
                         i < 4 ? ik[i] : "n_positions");
        else
            iv[i] = (int)json_integer_value(x);
    }
    if (!rc && !json_is_object(j))
        rc = llm_err(st, LLM_EDATA, "'%s' is not a JSON object", path);
    else if (!rc && mt && (!json_is_string(mt) || strcmp(json_string_value(mt), "gpt2")))
        rc = llm_err(st, LLM_EDATA, "'%s': model_type is not gpt2", path);
    else if (!rc && act && (!json_is_string(act) || strcmp(json_string_value(act), "gelu_new")))
        rc = llm_err(st, LLM_EDATA, "'%s': activation_function must be gelu_new", path);
    else if (!rc && eps && (!json_is_number(eps) || fabs(json_number_value(eps) - 1e-5) > 1e-12))
        rc = llm_err(st, LLM_EDATA, "'%s': layer_norm_epsilon must be 1e-5", path);
    json_decref(j);
    if (rc)
        return rc;
    llm_model_config c = {"gpt2", iv[0], iv[1], iv[2], iv[3], 0, iv[4]};
    c.padded_vocab = (c.vocab_size + 127) / 128 * 128;
    /* the model section's own validation (ranges, n_embd divisible by n_head) */
    llm_node *n = llm_model_config_node(&c);
    if (!n)
        return llm_err(st, LLM_ENOMEM, "out of memory");
    rc = llm_model_config_parse(n, cfg, st);
    llm_node_free(n);
    return rc ? llm_err_prefix(st, "%s", path) : LLM_OK;
}

static int ignorable(const char *n)
{
    size_t l = strlen(n);
    return (l > 10 && !strcmp(n + l - 10, ".attn.bias")) || (l > 17 && !strcmp(n + l - 17, ".attn.masked_bias"));
}

int llm_hf_import(const char *indir, const char *out, llm_status *st)
{
    llm_model_config cfg;
    int rc = read_config(indir, &cfg, st);
    if (rc)
        return rc;
    char path[4200];
    snprintf(path, sizeof path, "%s/model.safetensors", indir);
    llm_st_file *f;
    if ((rc = llm_st_open(&f, path, st)))
        return rc;
    int np = 2 + 12 * cfg.n_layer + 2, C = cfg.n_embd;
    void **bufs = calloc((size_t)np, sizeof *bufs);
    char *used = calloc((size_t)llm_st_count(f) + 1, 1);
    llm_ckpt_writer *w = NULL;
    llm_tokenizer *tok = NULL;
    if (!bufs || !used || (rc = llm_ckpt_writer_new(&w, st))) {
        rc = rc ? rc : llm_err(st, LLM_ENOMEM, "out of memory");
        goto out;
    }
    if ((rc = llm_ckpt_set_section(w, "model", llm_model_config_node(&cfg), st)))
        goto out;
    const llm_st_tensor *wte = NULL;
    for (int i = 0; i < np; i++) {
        char name[128], hf[170];
        int k;
        param_name(i, cfg.n_layer, name, sizeof name, &k);
        snprintf(hf, sizeof hf, "transformer.%s%s", name, i < 2 ? ".weight" : "");
        const llm_st_tensor *t = llm_st_find(f, hf);
        if (!t)
            t = llm_st_find(f, hf + 12);
        if (!t) {
            rc = llm_err(st, LLM_EDATA, "'%s': no tensor '%s'", path, hf);
            goto out;
        }
        used[t - llm_st_get(f, 0)] = 1;
        llm_dtype dt = !strcmp(t->dtype, "F32") ? LLM_DT_F32 : !strcmp(t->dtype, "F16") ? LLM_DT_F16
                     : !strcmp(t->dtype, "BF16") ? LLM_DT_BF16 : LLM_DT_COUNT;
        int es = dt == LLM_DT_F32 ? 4 : 2;
        /* the HF shape expected for this tensor */
        int64_t want[2] = {C, 0};
        int nd = 1;
        if (i == 0)
            want[0] = cfg.vocab_size, want[1] = C, nd = 2;
        else if (i == 1)
            want[0] = cfg.max_seq_len, want[1] = C, nd = 2;
        else if (k == 2)
            want[1] = 3 * C, nd = 2;
        else if (k == 3)
            want[0] = 3 * C;
        else if (k == 4)
            want[1] = C, nd = 2;
        else if (k == 8)
            want[1] = 4 * C, nd = 2;
        else if (k == 9)
            want[0] = 4 * C;
        else if (k == 10)
            want[0] = 4 * C, want[1] = C, nd = 2;
        if (dt == LLM_DT_COUNT || t->ndim != nd || t->shape[0] != want[0] || (nd == 2 && t->shape[1] != want[1])) {
            rc = llm_err(st, LLM_EDATA, "'%s': tensor '%s': dtype %s or shape does not fit the config", path,
                         t->name, t->dtype);
            goto out;
        }
        int64_t shape[2] = {want[0], want[1]};
        const void *data = t->data;
        if (i == 0) {   /* pad to Vp rows with zeros */
            wte = t;
            shape[0] = cfg.padded_vocab;
            size_t nb = (size_t)cfg.padded_vocab * (size_t)C * (size_t)es;
            if (!(bufs[i] = calloc(1, nb))) {
                rc = llm_err(st, LLM_ENOMEM, "out of memory");
                goto out;
            }
            memcpy(bufs[i], t->data, t->end - t->begin);
            data = bufs[i];
        } else if (k >= 0 && is_conv1d(k)) {
            if (!(bufs[i] = malloc(t->end - t->begin + 1))) {
                rc = llm_err(st, LLM_ENOMEM, "out of memory");
                goto out;
            }
            transpose(t->data, bufs[i], want[0], want[1], es);
            data = bufs[i];
            shape[0] = want[1], shape[1] = want[0];
        }
        if ((rc = llm_ckpt_add(w, name, dt, nd, shape, data, 0, st)))
            goto out;
    }
    for (int i = 0; i < llm_st_count(f); i++) {
        const llm_st_tensor *t = llm_st_get(f, i);
        if (used[i] || ignorable(t->name))
            continue;
        if (!strcmp(t->name, "lm_head.weight") && !strcmp(t->dtype, wte->dtype) &&
            t->end - t->begin == wte->end - wte->begin && !memcmp(t->data, wte->data, t->end - t->begin))
            continue;
        rc = llm_err(st, LLM_EDATA, "'%s': tensor '%s' is not part of a tied GPT-2", path, t->name);
        goto out;
    }
    if ((rc = llm_hf_tok_read(indir, cfg.vocab_size, &tok, st)))
        goto out;
    if (tok && (rc = llm_tokenizer_save(tok, w, st)))
        goto out;
    rc = llm_ckpt_write(w, out, st);
out:
    llm_tokenizer_free(tok);
    llm_ckpt_writer_free(w);
    for (int i = 0; bufs && i < np; i++)
        free(bufs[i]);
    free(bufs);
    free(used);
    llm_st_close(f);
    return rc;
}
