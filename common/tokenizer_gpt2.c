/* tokenizer_gpt2.c — loading GPT-2's encoder.json (libjansson) and vocab.bpe.
 *
 * Both files spell tokens through GPT-2's byte-to-unicode table: the 188 printable bytes
 * stand for themselves (as code points), the other 68 are shifted to U+0100..U+0143.
 */
#include "common/tokenizer_int.h"

#include <errno.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#define MAX_FILE_BYTES (64u << 20)

/* code point -> byte, or -1 (code points 0..323 only) */
static void unicode_to_byte_table(int16_t tab[324])
{
    for (int i = 0; i < 324; i++)
        tab[i] = -1;
    int n = 0;
    for (int b = 0; b < 256; b++) {
        int printable = (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE && b <= 0xFF);
        if (printable)
            tab[b] = (int16_t)b;
        else
            tab[256 + n++] = (int16_t)b;
    }
}

/* Decode a UTF-8 spelled token into raw bytes; returns the byte count or -1. */
static int spelled_to_bytes(const int16_t tab[324], const char *s, size_t len, uint8_t *out,
                            size_t cap)
{
    const unsigned char *p = (const unsigned char *)s;
    size_t i = 0, k = 0;
    while (i < len) {
        uint32_t cp;
        if (p[i] < 0x80) {
            cp = p[i++];
        } else if ((p[i] & 0xE0) == 0xC0 && i + 1 < len && (p[i + 1] & 0xC0) == 0x80) {
            cp = (uint32_t)(p[i] & 0x1F) << 6 | (p[i + 1] & 0x3F);
            i += 2;
        } else {
            return -1; /* every spelled code point is below U+0800 */
        }
        if (cp >= 324 || tab[cp] < 0 || k == cap)
            return -1;
        out[k++] = (uint8_t)tab[cp];
    }
    return (int)k;
}

static int check_file(const char *path, llm_status *st)
{
    struct stat sb;
    if (stat(path, &sb) < 0)
        return llm_err(st, LLM_ENOINPUT, "cannot open '%s': %s", path, strerror(errno));
    if (!S_ISREG(sb.st_mode))
        return llm_err(st, LLM_ENOINPUT, "'%s' is not a regular file", path);
    if ((uint64_t)sb.st_size > MAX_FILE_BYTES)
        return llm_err(st, LLM_EDATA, "'%s': too large (%lld bytes)", path, (long long)sb.st_size);
    return LLM_OK;
}

static int load_encoder(const char *path, const int16_t tab[324], uint8_t **vbytes,
                        uint32_t **offsets, int *vocab, uint32_t *eot, llm_status *st)
{
    int rc = check_file(path, st);
    if (rc)
        return rc;
    /* read whole, then parse from memory (json_load_file reads a character at a time) */
    FILE *f = fopen(path, "rb");
    if (!f)
        return llm_err(st, LLM_ENOINPUT, "cannot open '%s': %s", path, strerror(errno));
    struct stat sb;
    size_t cap = fstat(fileno(f), &sb) == 0 && sb.st_size > 0 ? (size_t)sb.st_size : 0;
    if (cap > MAX_FILE_BYTES)
        cap = MAX_FILE_BYTES;
    char *text = malloc(cap + 1);
    size_t tn = text ? fread(text, 1, cap + 1, f) : 0;
    int ferr = ferror(f);
    fclose(f);
    if (!text || ferr || tn > cap) { /* grew since stat: refuse rather than chase it */
        free(text);
        return llm_err(st, text ? LLM_EIO : LLM_ENOMEM, "cannot read '%s'", path);
    }
    json_error_t je;
    json_t *root = json_loadb(text, tn, JSON_REJECT_DUPLICATES, &je);
    free(text);
    if (!root)
        return llm_err(st, LLM_EDATA, "'%s': line %d: %s", path, je.line, je.text);
    if (!json_is_object(root)) {
        json_decref(root);
        return llm_err(st, LLM_EDATA, "'%s': not a JSON object of token -> id", path);
    }
    size_t n = json_object_size(root);
    if (n < 256 || n > LLM_TOK_MAX_VOCAB) {
        json_decref(root);
        return llm_err(st, LLM_EDATA, "'%s': %zu tokens (want 256 to %d)", path, n, LLM_TOK_MAX_VOCAB);
    }
    /* first pass: lengths by id, so that bytes can be laid out in id order */
    uint32_t *len = calloc(n + 1, sizeof *len);
    uint8_t *tmp = malloc(LLM_TOK_MAX_TOKLEN);
    uint8_t *vb = NULL;
    int64_t eot_id = -1;
    rc = LLM_OK;
    if (!len || !tmp) {
        rc = llm_err(st, LLM_ENOMEM, "out of memory");
        goto out;
    }
    const char *key;
    json_t *val;
    for (int pass = 0; pass < 2 && !rc; pass++) {
        json_object_foreach(root, key, val) {
            if (!json_is_integer(val) || json_integer_value(val) < 0 ||
                (size_t)json_integer_value(val) >= n) {
                rc = llm_err(st, LLM_EDATA, "'%s': token \"%.40s\" has a bad id (ids must be 0..%zu)",
                             path, key, n - 1);
                break;
            }
            size_t id = (size_t)json_integer_value(val);
            int k = spelled_to_bytes(tab, key, strlen(key), tmp, LLM_TOK_MAX_TOKLEN);
            if (k <= 0) {
                rc = llm_err(st, LLM_EDATA, "'%s': token \"%.40s\" is not a byte-level token", path, key);
                break;
            }
            if (pass == 0) {
                if (len[id + 1]) {
                    rc = llm_err(st, LLM_EDATA, "'%s': id %zu is used twice", path, id);
                    break;
                }
                len[id + 1] = (uint32_t)k;
                if (!strcmp(key, "<|endoftext|>"))
                    eot_id = (int64_t)id;
            } else {
                memcpy(vb + len[id], tmp, (size_t)k);
            }
        }
        if (rc)
            break;
        if (pass == 0) {
            for (size_t i = 0; i < n; i++)
                len[i + 1] += len[i]; /* now offsets; ids are dense since none repeats */
            vb = malloc(len[n]);
            if (!vb)
                rc = llm_err(st, LLM_ENOMEM, "out of memory");
        }
    }
    if (!rc && eot_id < 0)
        rc = llm_err(st, LLM_EDATA, "'%s': no \"<|endoftext|>\" token", path);
out:
    json_decref(root);
    free(tmp);
    if (rc) {
        free(len);
        free(vb);
        return rc;
    }
    *vbytes = vb;
    *offsets = len;
    *vocab = (int)n;
    *eot = (uint32_t)eot_id;
    return LLM_OK;
}

static int load_merges(llm_tokenizer *t, const char *path, const int16_t tab[324], llm_status *st)
{
    int rc = check_file(path, st);
    if (rc)
        return rc;
    FILE *f = fopen(path, "rb");
    if (!f)
        return llm_err(st, LLM_ENOINPUT, "cannot open '%s': %s", path, strerror(errno));
    size_t cap = 1024, n = 0;
    int32_t *m = malloc(cap * 2 * sizeof *m);
    char *line = NULL;
    size_t lcap = 0;
    ssize_t ll;
    long lineno = 0;
    uint8_t a[LLM_TOK_MAX_TOKLEN], b[LLM_TOK_MAX_TOKLEN];
    if (!m)
        rc = llm_err(st, LLM_ENOMEM, "out of memory");
    while (!rc && (ll = getline(&line, &lcap, f)) >= 0) {
        lineno++;
        while (ll > 0 && (line[ll - 1] == '\n' || line[ll - 1] == '\r'))
            line[--ll] = '\0';
        if (ll == 0 || (lineno == 1 && line[0] == '#'))
            continue;
        char *sp = memchr(line, ' ', (size_t)ll);
        int ka = -1, kb = -1;
        if (sp && !memchr(sp + 1, ' ', (size_t)(ll - (sp + 1 - line)))) {
            ka = spelled_to_bytes(tab, line, (size_t)(sp - line), a, sizeof a);
            kb = spelled_to_bytes(tab, sp + 1, (size_t)(ll - (sp + 1 - line)), b, sizeof b);
        }
        if (ka <= 0 || kb <= 0) {
            rc = llm_err(st, LLM_EDATA, "'%s': line %ld: not a merge (want two tokens)", path, lineno);
            break;
        }
        int64_t ia = llm_tok_find(t, a, (size_t)ka), ib = llm_tok_find(t, b, (size_t)kb);
        if (ia < 0 || ib < 0) {
            rc = llm_err(st, LLM_EDATA, "'%s': line %ld: token not in the vocabulary", path, lineno);
            break;
        }
        if (n == cap) {
            if (cap >= LLM_TOK_MAX_VOCAB) {
                rc = llm_err(st, LLM_EDATA, "'%s': too many merges", path);
                break;
            }
            int32_t *nm = realloc(m, cap * 4 * sizeof *m);
            if (!nm) {
                rc = llm_err(st, LLM_ENOMEM, "out of memory");
                break;
            }
            m = nm;
            cap *= 2;
        }
        m[2 * n] = (int32_t)ia;
        m[2 * n + 1] = (int32_t)ib;
        n++;
    }
    if (!rc && ferror(f))
        rc = llm_err(st, LLM_EIO, "cannot read '%s'", path);
    free(line);
    fclose(f);
    if (rc) {
        free(m);
        return rc;
    }
    return llm_tok_set_merges(t, m, (int)n, path, st);
}

int llm_tokenizer_gpt2(llm_tokenizer **out, const char *dir, llm_status *st)
{
    char enc[4096], bpe[4096];
    if (snprintf(enc, sizeof enc, "%s/encoder.json", dir) >= (int)sizeof enc ||
        snprintf(bpe, sizeof bpe, "%s/vocab.bpe", dir) >= (int)sizeof bpe)
        return llm_err(st, LLM_EUSAGE, "vocabulary folder name too long");
    int16_t tab[324];
    unicode_to_byte_table(tab);
    uint8_t *vb = NULL;
    uint32_t *off = NULL, eot = 0;
    int vocab = 0;
    /* both files must exist before the slow parse, so a missing one is reported first */
    int rc = check_file(enc, st);
    if (!rc)
        rc = check_file(bpe, st);
    if (!rc)
        rc = load_encoder(enc, tab, &vb, &off, &vocab, &eot, st);
    if (rc)
        return rc;
    llm_tokenizer *t;
    rc = llm_tok_build_bpe(&t, vb, off, vocab, eot, enc, st);
    if (rc)
        return rc;
    rc = load_merges(t, bpe, tab, st);
    if (rc) {
        llm_tokenizer_free(t);
        return rc;
    }
    *out = t;
    return LLM_OK;
}
