/* tokenizer.c — id vectors, the byte tokenizer, and what both kinds share. */
#include "common/tokenizer_int.h"

#include <stdlib.h>
#include <string.h>

static const char eot_text[] = "<|endoftext|>";

int llm_ids_push(llm_ids *ids, uint32_t id)
{
    if (ids->n == ids->cap && llm_ids_reserve(ids, 1))  /* doubles, from 256 */
        return -1;
    ids->v[ids->n++] = id;
    return 0;
}

int llm_ids_reserve(llm_ids *ids, size_t extra)
{
    if (extra <= ids->cap - ids->n)
        return 0;
    if (ids->n > SIZE_MAX / 2 - extra)
        return -1;
    size_t cap = ids->cap ? ids->cap : 256;
    while (cap < ids->n + extra)
        cap *= 2;
    if (cap > SIZE_MAX / sizeof *ids->v)
        return -1;
    uint32_t *v = realloc(ids->v, cap * sizeof *v);
    if (!v)
        return -1;
    ids->v = v;
    ids->cap = cap;
    return 0;
}

void llm_ids_free(llm_ids *ids)
{
    free(ids->v);
    ids->v = NULL;
    ids->n = ids->cap = 0;
}

int llm_tokenizer_byte(llm_tokenizer **out, llm_status *st)
{
    llm_tokenizer *t = calloc(1, sizeof *t);
    if (!t)
        return llm_err(st, LLM_ENOMEM, "out of memory");
    t->kind = LLM_TOK_BYTE;
    t->vocab = 257;
    t->eot = 256;
    for (int i = 0; i < 256; i++)
        t->byte_id[i] = (uint32_t)i;
    *out = t;
    return LLM_OK;
}

void llm_tokenizer_free(llm_tokenizer *t)
{
    if (!t)
        return;
    if (t->kind == LLM_TOK_GPT2)
        llm_tok_bpe_free(t);
    free(t);
}

const char *llm_tokenizer_kind(const llm_tokenizer *t)
{
    return t->kind == LLM_TOK_GPT2 ? "gpt2" : "byte";
}

int llm_tokenizer_vocab_size(const llm_tokenizer *t)
{
    return t->vocab;
}

uint32_t llm_tokenizer_eot(const llm_tokenizer *t)
{
    return t->eot;
}

size_t llm_tokenizer_max_token_bytes(const llm_tokenizer *t)
{
    size_t m = 1;
    if (t->kind == LLM_TOK_GPT2)
        for (int i = 0; i < t->vocab; i++)
            if (t->offsets[i + 1] - t->offsets[i] > m)
                m = t->offsets[i + 1] - t->offsets[i];
    return m;
}

int llm_tokenizer_encode(const llm_tokenizer *t, const char *text, size_t len, llm_ids *out,
                         llm_status *st)
{
    if (t->kind == LLM_TOK_GPT2)
        return llm_tok_bpe_encode(t, text, len, out, st);
    if (llm_ids_reserve(out, len))
        return llm_err(st, LLM_ENOMEM, "out of memory encoding %zu bytes", len);
    const unsigned char *p = (const unsigned char *)text;
    uint32_t *v = out->v + out->n;
    for (size_t i = 0; i < len; i++)
        v[i] = p[i];
    out->n += len;
    return LLM_OK;
}

int llm_tokenizer_token_bytes(const llm_tokenizer *t, uint32_t id, const char **bytes,
                              size_t *len, llm_status *st)
{
    if (id >= (uint32_t)t->vocab)
        return llm_err(st, LLM_EDATA, "token id %u out of range (vocabulary size %d)", id, t->vocab);
    if (t->kind == LLM_TOK_GPT2) {
        *bytes = (const char *)t->vocab_bytes + t->offsets[id];
        *len = t->offsets[id + 1] - t->offsets[id];
    } else if (id == t->eot) {
        *bytes = eot_text;
        *len = sizeof eot_text - 1;
    } else {
        /* a static table of the 256 bytes, so callers get stable pointers */
        static const unsigned char all[256] = {
#define R16(b) b, b + 1, b + 2, b + 3, b + 4, b + 5, b + 6, b + 7, b + 8, b + 9, b + 10, \
               b + 11, b + 12, b + 13, b + 14, b + 15
            R16(0), R16(16), R16(32), R16(48), R16(64), R16(80), R16(96), R16(112),
            R16(128), R16(144), R16(160), R16(176), R16(192), R16(208), R16(224), R16(240)
#undef R16
        };
        *bytes = (const char *)all + id;
        *len = 1;
    }
    return LLM_OK;
}

int llm_tokenizer_decode(const llm_tokenizer *t, const uint32_t *ids, size_t n, char **out,
                         size_t *len, llm_status *st)
{
    /* two passes: validate and size, then copy; nothing is returned on a bad id */
    const uint32_t vocab = (uint32_t)t->vocab;
    const uint32_t *off = t->offsets;
    size_t total = 0;
    for (size_t i = 0; i < n; i++) {
        uint32_t id = ids[i];
        if (id >= vocab)
            return llm_err(st, LLM_EDATA, "token %zu: id %u out of range (vocabulary size %d)", i,
                           id, t->vocab);
        total += t->kind == LLM_TOK_GPT2 ? off[id + 1] - off[id]
                 : id == t->eot          ? sizeof eot_text - 1
                                         : 1;
    }
    /* LLM_TOK_PAD bytes of slack let short tokens be copied with one fixed-size move */
    char *buf = malloc(total + LLM_TOK_PAD);
    if (!buf)
        return llm_err(st, LLM_ENOMEM, "out of memory decoding %zu tokens", n);
    char *p = buf;
    if (t->kind == LLM_TOK_GPT2) {
        const uint8_t *vb = t->vocab_bytes;
        for (size_t i = 0; i < n; i++) {
            uint32_t a = off[ids[i]], l = off[ids[i] + 1] - a;
            if (l <= LLM_TOK_PAD)
                memcpy(p, vb + a, LLM_TOK_PAD);
            else
                memcpy(p, vb + a, l);
            p += l;
        }
    } else {
        for (size_t i = 0; i < n; i++) {
            if (ids[i] == t->eot) {
                memcpy(p, eot_text, sizeof eot_text - 1);
                p += sizeof eot_text - 1;
            } else {
                *p++ = (char)ids[i];
            }
        }
    }
    *out = buf;
    *len = total;
    return LLM_OK;
}
