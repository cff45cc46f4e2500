/* safetensors_tok.c — GPT-2 tokenizer files of Hugging Face (vocab.json, merges.txt,
 * tokenizer.json) to and from the tokenizer stored in a .llmk. */
#include "common/safetensors.h"
#include "common/safetensors_int.h"
#include "common/tokenizer_int.h"

#include <errno.h>
#include <jansson.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#define MAX_TOKFILE (64u << 20)

unsigned llm_gpt2_byte_char(unsigned char b)
{
    int printable = (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || b >= 0xAE;
    if (printable)
        return b;
    unsigned n = 0;
    for (unsigned x = 0; x < b; x++)
        n += !((x >= '!' && x <= '~') || (x >= 0xA1 && x <= 0xAC) || x >= 0xAE);
    return 256 + n;
}

size_t llm_gpt2_spell(const unsigned char *p, size_t n, char *out)
{
    size_t k = 0;
    for (size_t i = 0; i < n; i++) {
        unsigned c = llm_gpt2_byte_char(p[i]);
        if (c < 0x80) {
            out[k++] = (char)c;
        } else {
            out[k++] = (char)(0xC0 | (c >> 6));
            out[k++] = (char)(0x80 | (c & 0x3F));
        }
    }
    out[k] = 0;
    return k;
}

/* code point -> byte of GPT-2's byte spelling, -1 for the others; filled once */
static int16_t unspell_tab[324];
static pthread_once_t unspell_once = PTHREAD_ONCE_INIT;

static void unspell_init(void)
{
    for (int i = 0; i < 324; i++)
        unspell_tab[i] = -1;
    for (int b = 0; b < 256; b++)
        unspell_tab[llm_gpt2_byte_char((unsigned char)b)] = (int16_t)b;
}

/* Spelled token -> bytes; -1 when a code point is not in the table. */
static int unspell(const char *s, uint8_t *out, size_t cap)
{
    const int16_t *tab = unspell_tab;
    pthread_once(&unspell_once, unspell_init);
    const unsigned char *p = (const unsigned char *)s;
    size_t k = 0;
    while (*p) {
        unsigned cp;
        if (*p < 0x80)
            cp = *p++;
        else if ((*p & 0xE0) == 0xC0 && (p[1] & 0xC0) == 0x80)
            cp = (unsigned)(*p & 0x1F) << 6 | (p[1] & 0x3F), p += 2;
        else
            return -1;
        if (cp >= 324 || tab[cp] < 0 || k == cap)
            return -1;
        out[k++] = (uint8_t)tab[cp];
    }
    return (int)k;
}

int llm_hf_tok_merges(const llm_ckpt *c, const int32_t **m, int64_t *n, llm_status *st)
{
    *m = NULL, *n = 0;
    /* only a gpt2 tokenizer has merges: a byte tokenizer's file may still carry a stray
     * tensor of that name (llm_tokenizer_from_ckpt ignores it, so must its exporters) */
    const char *kind = llm_node_str(llm_node_get(llm_ckpt_section(c, "tokenizer"), "kind"));
    const llm_tensor *t = llm_ckpt_find(c, "tokenizer.merges");
    if (!t || !kind || strcmp(kind, "gpt2"))
        return LLM_OK;
    if (t->dtype != LLM_DT_I32 || t->ndim != 2 || t->shape[1] != 2)
        return llm_err(st, LLM_EDATA, "tensor 'tokenizer.merges': want i32 (M,2)");
    *m = t->data, *n = t->shape[0];
    return LLM_OK;
}

int llm_hf_tok_write(const llm_ckpt *c, const char *dir, int max_len, llm_status *st)
{
    llm_tokenizer *t;
    int rc = llm_tokenizer_from_ckpt(&t, c, st);
    if (rc)
        return rc;
    const int32_t *m;
    int64_t nm;
    char path[4200], *buf = NULL, *js = NULL;
    json_t *vocab = json_object();
    size_t cap = 1 << 16, len = 0;
    if ((rc = llm_hf_tok_merges(c, &m, &nm, st)))
        goto out;
    int V = llm_tokenizer_vocab_size(t);
    char *sp = malloc(2 * LLM_TOK_MAX_TOKLEN + 16);
    buf = malloc(cap);
    if (!vocab || !sp || !buf) {
        free(sp);
        rc = llm_err(st, LLM_ENOMEM, "out of memory");
        goto out;
    }
    for (int id = 0; id < V && !rc; id++) {
        const char *b;
        size_t n;
        if ((rc = llm_tokenizer_token_bytes(t, (uint32_t)id, &b, &n, st)))
            break;
        if (n > LLM_TOK_MAX_TOKLEN)
            rc = llm_err(st, LLM_EDATA, "token %d is too long", id);
        else if (json_object_set_new(vocab, (llm_gpt2_spell((const unsigned char *)b, n, sp), sp), json_integer(id)))
            rc = llm_err(st, LLM_EDATA, "token %d cannot be written to vocab.json", id);
    }
    len = (size_t)snprintf(buf, cap, "#version: 0.2\n");
    for (int64_t k = 0; k < nm && !rc; k++) {
        for (int side = 0; side < 2 && !rc; side++) {
            const char *b;
            size_t n;
            if ((rc = llm_tokenizer_token_bytes(t, (uint32_t)m[2 * k + side], &b, &n, st)))
                break;
            size_t sl = llm_gpt2_spell((const unsigned char *)b, n, sp);
            if (len + sl + 2 > cap) {
                char *nb = realloc(buf, cap * 2 + sl);
                if (!nb) {
                    rc = llm_err(st, LLM_ENOMEM, "out of memory");
                    break;
                }
                buf = nb, cap = cap * 2 + sl;
            }
            memcpy(buf + len, sp, sl);
            len += sl;
            buf[len++] = side ? '\n' : ' ';
        }
    }
    free(sp);
    if (rc)
        goto out;
    if (!(js = json_dumps(vocab, JSON_COMPACT | JSON_PRESERVE_ORDER))) {
        rc = llm_err(st, LLM_ENOMEM, "out of memory");
        goto out;
    }
    snprintf(path, sizeof path, "%s/vocab.json", dir);
    if ((rc = llm_afile_write(path, 0, js, strlen(js), st)))
        goto out;
    snprintf(path, sizeof path, "%s/merges.txt", dir);
    if ((rc = llm_afile_write(path, 0, buf, len, st)))
        goto out;
    free(js);
    js = NULL;
    json_t *cfg = json_pack("{s:s, s:i, s:s, s:s, s:s, s:b}", "tokenizer_class", "GPT2Tokenizer",
                            "model_max_length", max_len, "bos_token", "<|endoftext|>", "eos_token",
                            "<|endoftext|>", "unk_token", "<|endoftext|>", "add_prefix_space", 0);
    js = cfg ? json_dumps(cfg, JSON_INDENT(2) | JSON_PRESERVE_ORDER) : NULL;
    json_decref(cfg);
    if (!js) {
        rc = llm_err(st, LLM_ENOMEM, "out of memory");
        goto out;
    }
    snprintf(path, sizeof path, "%s/tokenizer_config.json", dir);
    rc = llm_afile_write(path, 0, js, strlen(js), st);
out:
    free(js);
    free(buf);
    json_decref(vocab);
    llm_tokenizer_free(t);
    return rc;
}

static int exists(const char *dir, const char *name, char *path, size_t n)
{
    struct stat sb;
    snprintf(path, n, "%s/%s", dir, name);
    return stat(path, &sb) == 0 && S_ISREG(sb.st_mode);
}

static json_t *load_json(const char *path, llm_status *st)
{
    struct stat sb;
    if (stat(path, &sb) || sb.st_size > MAX_TOKFILE) {
        llm_err(st, LLM_EDATA, "'%s' is missing or larger than %u bytes", path, MAX_TOKFILE);
        return NULL;
    }
    json_error_t e;
    json_t *j = json_load_file(path, JSON_REJECT_DUPLICATES, &e);
    if (!j)
        llm_err(st, LLM_EDATA, "'%s': line %d: %s", path, e.line, e.text);
    return j;
}

/* Build the tokenizer from a vocab object and merges as "a b" strings (mtext, a file's
 * lines) or a JSON array (strings "a b" or pairs ["a","b"]). */
static int build(json_t *vocab, const char *mtext, size_t mlen, json_t *marr, int model_vocab,
                 const char *what, llm_tokenizer **out, llm_status *st)
{
    /* The tokenizer may have fewer ids than the model has embedding rows (llm-train allows
     * it, Hugging Face too: the rows above are never produced), never more. */
    size_t nv = json_is_object(vocab) ? json_object_size(vocab) : 0;
    if (nv == 0 || nv > (size_t)model_vocab)
        return llm_err(st, LLM_EDATA, "%s: the vocabulary has %zu entries, the model %d (want 1 to %d)",
                       what, nv, model_vocab, model_vocab);
    int V = (int)nv;
    uint32_t *off = calloc((size_t)V + 1, sizeof *off);
    uint32_t *lens = calloc((size_t)V, sizeof *lens);
    uint8_t *tmp = malloc((size_t)V * 8 + LLM_TOK_MAX_TOKLEN), *vb = NULL;
    int32_t *mg = NULL;
    int rc = LLM_OK, isbyte = V == 257, eot = -1;
    size_t used = 0, cap = (size_t)V * 8 + LLM_TOK_MAX_TOKLEN;
    size_t *tok = calloc((size_t)V, sizeof *tok);   /* offset of each token in tmp */
    if (!off || !lens || !tmp || !tok) {
        rc = llm_err(st, LLM_ENOMEM, "out of memory");
        goto out;
    }
    const char *k;
    json_t *v;
    uint8_t one[LLM_TOK_MAX_TOKLEN];
    json_object_foreach(vocab, k, v) {
        json_int_t id = json_is_integer(v) ? json_integer_value(v) : -1;
        int n = !strcmp(k, "<|endoftext|>") ? 13 : unspell(k, one, sizeof one);
        if (id < 0 || id >= V || lens[id] || n <= 0) {
            rc = llm_err(st, LLM_EDATA, "%s: entry '%.40s': bad or duplicate id, or not GPT-2 spelled", what, k);
            goto out;
        }
        if (!strcmp(k, "<|endoftext|>"))
            memcpy(one, k, 13), eot = (int)id;
        if (used + (size_t)n > cap) {
            uint8_t *nt = realloc(tmp, cap * 2);
            if (!nt) {
                rc = llm_err(st, LLM_ENOMEM, "out of memory");
                goto out;
            }
            tmp = nt, cap *= 2;
        }
        memcpy(tmp + used, one, (size_t)n);
        tok[id] = used;
        lens[id] = (uint32_t)n;
        used += (size_t)n;
        if (isbyte && id < 256 && !(n == 1 && one[0] == id))
            isbyte = 0;
    }
    if (eot < 0) {
        /* the id llm-infer stops at and decodes as "<|endoftext|>": not guessed */
        rc = llm_err(st, LLM_EDATA, "%s: no '<|endoftext|>' entry (a GPT-2 vocabulary has one)",
                     what);
        goto out;
    }
    /* merges */
    int nm = 0, capm = 1024;
    mg = malloc(sizeof *mg * 2 * (size_t)capm);
    if (!mg) {
        rc = llm_err(st, LLM_ENOMEM, "out of memory");
        goto out;
    }
    size_t pos = 0;
    size_t nitems = marr ? json_array_size(marr) : 0;
    for (size_t it = 0;; it++) {
        char a[2 * LLM_TOK_MAX_TOKLEN + 8], b[2 * LLM_TOK_MAX_TOKLEN + 8];
        if (marr) {
            if (it >= nitems)
                break;
            json_t *x = json_array_get(marr, it);
            const char *s = json_string_value(x), *sp = s ? strchr(s, ' ') : NULL;
            if (sp && strlen(s) < sizeof a) {
                snprintf(a, sizeof a, "%.*s", (int)(sp - s), s);
                snprintf(b, sizeof b, "%s", sp + 1);
            } else if (json_is_array(x) && json_array_size(x) == 2 && json_is_string(json_array_get(x, 0)) &&
                       json_is_string(json_array_get(x, 1)) &&
                       strlen(json_string_value(json_array_get(x, 0))) < sizeof a &&
                       strlen(json_string_value(json_array_get(x, 1))) < sizeof b) {
                strcpy(a, json_string_value(json_array_get(x, 0)));
                strcpy(b, json_string_value(json_array_get(x, 1)));
            } else {
                rc = llm_err(st, LLM_EDATA, "%s: merge %zu is malformed", what, it);
                goto out;
            }
        } else {
            if (pos >= mlen)
                break;
            const char *ln = mtext + pos, *nl = memchr(ln, '\n', mlen - pos);
            size_t ll = nl ? (size_t)(nl - ln) : mlen - pos;
            pos += ll + 1;
            if (ll && ln[ll - 1] == '\r')
                ll--;
            if (!ll || (it == 0 && ll >= 8 && !memcmp(ln, "#version", 8)))
                continue;
            const char *sp = memchr(ln, ' ', ll);
            if (!sp || ll >= sizeof a || memchr(sp + 1, ' ', ll - (size_t)(sp + 1 - ln))) {
                rc = llm_err(st, LLM_EDATA, "%s: merges line %zu is not 'a b'", what, it + 1);
                goto out;
            }
            snprintf(a, sizeof a, "%.*s", (int)(sp - ln), ln);
            snprintf(b, sizeof b, "%.*s", (int)(ll - (size_t)(sp + 1 - ln)), sp + 1);
        }
        json_t *ia = json_object_get(vocab, a), *ib = json_object_get(vocab, b);
        if (!json_is_integer(ia) || !json_is_integer(ib)) {
            rc = llm_err(st, LLM_EDATA, "%s: merge '%.40s %.40s' names a token not in the vocabulary", what, a, b);
            goto out;
        }
        if (nm == capm) {
            int32_t *n2 = realloc(mg, sizeof *mg * 4 * (size_t)capm);
            if (!n2) {
                rc = llm_err(st, LLM_ENOMEM, "out of memory");
                goto out;
            }
            mg = n2, capm *= 2;
        }
        mg[2 * nm] = (int32_t)json_integer_value(ia);
        mg[2 * nm + 1] = (int32_t)json_integer_value(ib);
        nm++;
    }
    if (isbyte && nm == 0 && eot == 256) {
        rc = llm_tokenizer_byte(out, st);
        goto out;
    }
    if (!(vb = malloc(used + 1))) {
        rc = llm_err(st, LLM_ENOMEM, "out of memory");
        goto out;
    }
    for (int i = 0; i < V; i++) {
        memcpy(vb + off[i], tmp + tok[i], lens[i]);
        off[i + 1] = off[i] + lens[i];
    }
    llm_tokenizer *t;
    rc = llm_tok_build_bpe(&t, vb, off, V, (uint32_t)eot, what, st);
    vb = NULL, off = NULL;   /* owned by the tokenizer now (freed on failure too) */
    if (rc)
        goto out;
    rc = llm_tok_set_merges(t, mg, nm, what, st);
    mg = NULL;
    if (rc) {
        llm_tokenizer_free(t);
        goto out;
    }
    *out = t;
out:
    free(off);
    free(lens);
    free(tmp);
    free(tok);
    free(vb);
    free(mg);
    return rc;
}

int llm_hf_tok_read(const char *dir, int V, llm_tokenizer **out, llm_status *st)
{
    char pv[4200], pm[4200];
    *out = NULL;
    if (exists(dir, "vocab.json", pv, sizeof pv) && exists(dir, "merges.txt", pm, sizeof pm)) {
        json_t *vocab = load_json(pv, st);
        if (!vocab)
            return st->code;
        struct stat sb;
        FILE *f = fopen(pm, "rb");
        char *txt = NULL;
        int rc = LLM_OK;
        if (!f || fstat(fileno(f), &sb) || sb.st_size > MAX_TOKFILE || !(txt = malloc((size_t)sb.st_size + 1)) ||
            fread(txt, 1, (size_t)sb.st_size, f) != (size_t)sb.st_size)
            rc = llm_err(st, LLM_EDATA, "'%s': cannot read (or larger than %u bytes)", pm, MAX_TOKFILE);
        if (f)
            fclose(f);
        if (!rc)
            rc = build(vocab, txt, (size_t)sb.st_size, NULL, V, "vocab.json", out, st);
        free(txt);
        json_decref(vocab);
        return rc;
    }
    if (!exists(dir, "tokenizer.json", pv, sizeof pv))
        return LLM_OK;
    json_t *j = load_json(pv, st);
    if (!j)
        return st->code;
    json_t *model = json_object_get(j, "model");
    json_t *vocab = json_object_get(model, "vocab"), *merges = json_object_get(model, "merges");
    int rc;
    if (!json_is_object(vocab) || !json_is_array(merges))
        rc = llm_err(st, LLM_EDATA, "'%s': no model.vocab object and model.merges array", pv);
    else
        rc = build(vocab, NULL, 0, merges, V, "tokenizer.json", out, st);
    json_decref(j);
    return rc;
}
