/* tokenizer_ckpt.c — a tokenizer inside a .llmk file, and loading a tokenizer by name.
 *
 * Header section:  tokenizer: {kind: gpt2|byte, vocab_size: N, eot: ID}
 * Tensors (gpt2):  tokenizer.vocab          u8  (B)      the bytes of every token, by id
 *                  tokenizer.vocab_offsets  i32 (N+1)    token i = vocab[off[i] .. off[i+1])
 *                  tokenizer.merges         i32 (M, 2)   (left id, right id), rank order
 */
#include "common/tokenizer_int.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <zlib.h>

int llm_tokenizer_save(const llm_tokenizer *t, llm_ckpt_writer *w, llm_status *st)
{
    llm_node *sec = llm_node_new_map();
    if (!sec || llm_node_set_str(sec, "kind", llm_tokenizer_kind(t)) ||
        llm_node_set_int(sec, "vocab_size", t->vocab) || llm_node_set_int(sec, "eot", t->eot)) {
        llm_node_free(sec);
        return llm_err(st, LLM_ENOMEM, "out of memory");
    }
    int rc = llm_ckpt_set_section(w, "tokenizer", sec, st);
    if (rc || t->kind != LLM_TOK_GPT2)
        return rc;
    if (t->offsets[t->vocab] > INT32_MAX)
        return llm_err(st, LLM_EUSAGE, "tokenizer: vocabulary too large to store");
    int64_t sv = t->offsets[t->vocab], so = (int64_t)t->vocab + 1, sm[2] = {t->nmerges, 2};
    rc = llm_ckpt_add(w, "tokenizer.vocab", LLM_DT_U8, 1, &sv, t->vocab_bytes, 0, st);
    if (!rc) /* offsets are < 2^31 (checked above), so their u32 bits are valid i32 */
        rc = llm_ckpt_add(w, "tokenizer.vocab_offsets", LLM_DT_I32, 1, &so, t->offsets, 0, st);
    if (!rc)
        rc = llm_ckpt_add(w, "tokenizer.merges", LLM_DT_I32, 2, sm, t->merges, 0, st);
    return rc;
}

/* A tokenizer tensor: present, of dtype dt and ndim dims; crc32 checked here because
 * models are opened with LLM_CKPT_NOVERIFY (the weights need not be read to get it). */
static const llm_tensor *need(const llm_ckpt *ck, const char *name, llm_dtype dt, int ndim,
                              llm_status *st)
{
    const llm_tensor *x = llm_ckpt_find(ck, name);
    if (!x) {
        llm_err(st, LLM_EDATA, "tokenizer: tensor '%s' missing", name);
        return NULL;
    }
    if (x->dtype != dt || x->ndim != ndim || (ndim == 2 && x->shape[1] != 2)) {
        llm_err(st, LLM_EDATA, "tokenizer: tensor '%s' has the wrong dtype or shape", name);
        return NULL;
    }
    if (x->nbytes > (1u << 30) || (x->nbytes && !x->data)) {
        llm_err(st, LLM_EDATA, "tokenizer: tensor '%s' is too large or has no data", name);
        return NULL;
    }
    if (!x->compressed && (uint32_t)crc32(0, x->data, (uInt)x->nbytes) != x->crc32) {
        llm_err(st, LLM_EDATA, "tokenizer: tensor '%s': crc32 mismatch", name);
        return NULL;
    }
    return x;
}

int llm_tokenizer_from_ckpt(llm_tokenizer **out, const llm_ckpt *ck, llm_status *st)
{
    const llm_node *sec = llm_ckpt_section(ck, "tokenizer");
    if (!sec || sec->kind != LLM_NODE_MAP)
        return llm_err(st, LLM_EDATA, "checkpoint has no tokenizer section");
    const char *kind = llm_node_str(llm_node_get(sec, "kind"));
    int64_t vocab, eot;
    if (!kind || llm_node_i64(llm_node_get(sec, "vocab_size"), &vocab) ||
        llm_node_i64(llm_node_get(sec, "eot"), &eot))
        return llm_err(st, LLM_EDATA, "tokenizer section needs kind, vocab_size and eot");
    if (!strcmp(kind, "byte")) {
        if (vocab != 257 || eot != 256)
            return llm_err(st, LLM_EDATA, "byte tokenizer with vocab_size %lld, eot %lld (want 257, 256)",
                           (long long)vocab, (long long)eot);
        return llm_tokenizer_byte(out, st);
    }
    if (strcmp(kind, "gpt2"))
        return llm_err(st, LLM_EDATA, "unknown tokenizer kind '%.40s'", kind);
    if (vocab < 256 || vocab > LLM_TOK_MAX_VOCAB || eot < 0 || eot >= vocab)
        return llm_err(st, LLM_EDATA, "tokenizer: vocab_size %lld or eot %lld out of range",
                       (long long)vocab, (long long)eot);
    const llm_tensor *tv = need(ck, "tokenizer.vocab", LLM_DT_U8, 1, st);
    const llm_tensor *to = tv ? need(ck, "tokenizer.vocab_offsets", LLM_DT_I32, 1, st) : NULL;
    const llm_tensor *tm = to ? need(ck, "tokenizer.merges", LLM_DT_I32, 2, st) : NULL;
    if (!tm)
        return st ? st->code : LLM_EDATA;
    if (to->shape[0] != vocab + 1)
        return llm_err(st, LLM_EDATA, "tokenizer: %lld offsets for vocab_size %lld",
                       (long long)to->shape[0], (long long)vocab);
    /* copies: the tokenizer outlives the checkpoint, and vocab bytes get padding */
    uint8_t *vb = malloc(tv->nbytes + LLM_TOK_PAD);
    uint32_t *off = malloc(to->nbytes);
    int32_t *m = malloc(tm->nbytes ? tm->nbytes : 1);
    if (!vb || !off || !m) {
        free(vb);
        free(off);
        free(m);
        return llm_err(st, LLM_ENOMEM, "out of memory");
    }
    memcpy(vb, tv->data, tv->nbytes);
    memcpy(off, to->data, to->nbytes);
    if (tm->nbytes)
        memcpy(m, tm->data, tm->nbytes);
    if (off[vocab] != tv->nbytes) {
        uint32_t end = off[vocab];
        free(vb);
        free(off);
        free(m);
        return llm_err(st, LLM_EDATA, "tokenizer: offsets end at %u but the vocabulary has %llu bytes",
                       end, (unsigned long long)tv->nbytes);
    }
    llm_tokenizer *t;
    int rc = llm_tok_build_bpe(&t, vb, off, (int)vocab, (uint32_t)eot, "tokenizer", st);
    if (rc) {
        free(m);
        return rc;
    }
    rc = llm_tok_set_merges(t, m, (int)tm->shape[0], "tokenizer", st);
    if (rc) {
        llm_tokenizer_free(t);
        return rc;
    }
    *out = t;
    return LLM_OK;
}

int llm_tokenizer_gpt2_find(char *dir, size_t n)
{
    const char *bases[] = {getenv("LLMKIT_DATA"), getenv("LLM_DATA"), "./data"};
    int first = 1;
    for (size_t i = 0; i < sizeof bases / sizeof *bases; i++) {
        if (!bases[i] || !*bases[i])
            continue;
        char enc[4200], bpe[4200];
        snprintf(enc, sizeof enc, "%s/gpt2/encoder.json", bases[i]);
        snprintf(bpe, sizeof bpe, "%s/gpt2/vocab.bpe", bases[i]);
        int found = access(enc, F_OK) == 0 && access(bpe, F_OK) == 0;
        if (found || first)   /* none found: the first place looked, for the message */
            snprintf(dir, n, "%s/gpt2", bases[i]);
        if (found)
            return 1;
        first = 0;
    }
    return 0;
}

int llm_tokenizer_load(llm_tokenizer **out, const char *spec, const char *vocab_dir,
                       llm_status *st)
{
    if (!strcmp(spec, "byte"))
        return llm_tokenizer_byte(out, st);
    if (!strcmp(spec, "gpt2")) {
        char dir[4096];
        if (!vocab_dir) {
            llm_tokenizer_gpt2_find(dir, sizeof dir);
            vocab_dir = dir;
        }
        return llm_tokenizer_gpt2(out, vocab_dir, st);
    }
    if (strcmp(spec, "-") && access(spec, F_OK))
        return llm_err(st, LLM_ENOINPUT, "vocabulary '%s': no such file (want gpt2, byte or a .llmk model)",
                       spec);
    llm_ckpt *ck;
    int rc = llm_ckpt_open(&ck, spec, LLM_CKPT_NOVERIFY, st);
    if (rc)
        return rc;
    rc = llm_tokenizer_from_ckpt(out, ck, st);
    if (rc)
        llm_err_prefix(st, "'%s'", spec);
    llm_ckpt_close(ck);
    return rc;
}
