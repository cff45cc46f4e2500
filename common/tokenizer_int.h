/* tokenizer_int.h — private parts shared by common/tokenizer*.c (not a public interface). */
#ifndef LLM_TOKENIZER_INT_H
#define LLM_TOKENIZER_INT_H

#include <pthread.h>
#include <stdint.h>

#include "common/tokenizer.h"

enum { LLM_TOK_BYTE = 0, LLM_TOK_GPT2 = 1 };

#define LLM_TOK_MAX_VOCAB  (1 << 24)   /* caps for hostile files */
#define LLM_TOK_MAX_TOKLEN 1024        /* bytes of one vocabulary entry */
#define LLM_TOK_PAD 16                 /* readable slack after vocab_bytes (fast decode) */

/* Per-thread encode state (word cache, regex match data); pooled in the tokenizer. */
typedef struct llm_tok_state llm_tok_state;

struct llm_tokenizer {
    int kind;
    int vocab;              /* number of ids */
    uint32_t eot;
    /* GPT-2: the bytes of every id (vocab_bytes[offsets[i] .. offsets[i+1])) */
    uint8_t *vocab_bytes;
    uint32_t *offsets;      /* vocab + 1 entries */
    int32_t *merges;        /* nmerges x (left id, right id), in rank order */
    int nmerges;
    uint32_t byte_id[256];  /* id of each single byte */
    /* merge table: open addressing on (left, right) -> rank, result id */
    uint64_t *mkeys;        /* (left << 32 | right) + 1; 0 = empty */
    uint32_t *mrank, *mres;
    size_t mmask;
    /* token bytes -> id (used while building, kept for lookups) */
    uint32_t *vslots;       /* id + 1; 0 = empty */
    size_t vmask;
    void *re;               /* pcre2_code (GPT-2 pre-tokenizer) */
    int jit;                /* re was JIT-compiled */
    int fast;               /* ASCII fast path on (acls valid); tests may turn it off */
    uint8_t acls[128];      /* ASCII class for the fast path (letter, number, space, other) */
    pthread_mutex_t pool_mu;
    llm_tok_state **pool;   /* idle per-thread states */
    int npool, cappool;
};

/* Build a GPT-2-style BPE from vocabulary bytes (no merges yet); takes ownership of
 * vbytes (offsets[vocab] bytes; it is grown by LLM_TOK_PAD zero bytes) and offsets
 * (vocab + 1 entries), freed on failure too.  Checks: offsets monotone, entries non-empty,
 * bounded and unique, all 256 single bytes present, eot < vocab.  what names the source
 * in messages. */
int llm_tok_build_bpe(llm_tokenizer **out, uint8_t *vbytes, uint32_t *offsets, int vocab,
                      uint32_t eot, const char *what, llm_status *st);

/* Install merges (nmerges x (left id, right id), rank = index); takes ownership of merges.
 * Checks that each merge's concatenation is in the vocabulary.  On failure the caller
 * frees t. */
int llm_tok_set_merges(llm_tokenizer *t, int32_t *merges, int nmerges, const char *what,
                       llm_status *st);

/* Lookup of token bytes: id or -1. */
int64_t llm_tok_find(const llm_tokenizer *t, const uint8_t *b, size_t n);

int  llm_tok_bpe_encode(const llm_tokenizer *t, const char *text, size_t len, llm_ids *out,
                        llm_status *st);
void llm_tok_bpe_free(llm_tokenizer *t);

/* The code point of the whole UTF-8 character of 2 to 4 bytes that ends at text[i-1],
 * or -1 when the bytes there are not one (ASCII, invalid or cut short).  text[0] is the
 * first byte it may read. */
static inline int32_t llm_tok__utf8_before(const unsigned char *p, size_t i)
{
    size_t k = 1;
    while (k < 4 && k < i && (p[i - k] & 0xc0) == 0x80)
        k++;
    if (k < 2 || k > i)
        return -1;
    unsigned char b0 = p[i - k], b1 = p[i - k + 1];
    int32_t cp;
    if (k == 2 && b0 >= 0xc2 && b0 <= 0xdf)
        cp = b0 & 0x1f;
    else if (k == 3 && b0 >= 0xe0 && b0 <= 0xef && !(b0 == 0xe0 && b1 < 0xa0) &&
             !(b0 == 0xed && b1 > 0x9f))
        cp = b0 & 0x0f;
    else if (k == 4 && b0 >= 0xf0 && b0 <= 0xf4 && !(b0 == 0xf0 && b1 < 0x90) &&
             !(b0 == 0xf4 && b1 > 0x8f))
        cp = b0 & 0x07;
    else
        return -1;
    for (size_t j = i - k + 1; j < i; j++)
        cp = cp << 6 | (p[j] & 0x3f);
    return cp;
}

/* Whether a code point above 0x7f may be white space to PCRE2 with UCP (\s is \p{Z},
 * \h and \v): a superset of those (test_tokenizer checks it against PCRE2 over every
 * code point), so that a "no" is certain. */
static inline int llm_tok__maybe_space(int32_t cp)
{
    return cp == 0x85 || cp == 0xa0 || cp == 0x1680 || cp == 0x180e ||
           (cp >= 0x2000 && cp <= 0x202f) || cp == 0x205f || cp == 0x3000 || cp == 0xfeff;
}

/* A cut between text[i-1] and text[i] (i > 0) is safe for GPT-2 when text[i] is a space,
 * tab, '\r' or '\n' and text[i-1] ends a character that is not white space: printable
 * ASCII other than space, or a whole UTF-8 character that llm_tok__maybe_space rules out
 * (so Chinese or Japanese text is cut at its line ends too).  No pattern alternative
 * spans a non-space followed by a space (spaces only ever lead a match), the match
 * ending at text[i-1] is found identically whether or not text goes on (only the
 * whitespace alternatives look ahead, and they stop before text[i-1]), and both sides
 * are whole UTF-8.  Any cut is safe for the byte kind. */
static inline int llm_tok__cut_ok(const char *text, size_t i)
{
    const unsigned char *p = (const unsigned char *)text;
    unsigned char x = p[i - 1], y = p[i];
    if (!(y == ' ' || y == '\t' || y == '\n' || y == '\r'))
        return 0;
    if (x < 0x80)
        return x > 0x20 && x < 0x7f;
    int32_t cp = llm_tok__utf8_before(p, i);
    return cp >= 0 && !llm_tok__maybe_space(cp);
}

/* The first safe cut of text in [from, to): a position where encoding the text before it
 * and after it separately gives the ids of the whole (tokenizer_mt.c); to when none. */
size_t llm_tok__safe_cut(const llm_tokenizer *t, const char *text, size_t from, size_t to);

/* A text to encode after the ones before it: a document of its own (preceded by the
 * end-of-text id when asked), or with cont the rest of the one before. */
typedef struct {
    const char *text;
    size_t len;
    int cont;
    size_t start;   /* set by llm_tok__encode_spans: its first id's index in out (not with cont) */
} llm_tok_span;

/* llm_tokenizer_encode_docs on spans, some of which may continue a document. */
int llm_tok__encode_spans(const llm_tokenizer *t, llm_tok_span *sp, size_t n, int with_eot,
                          int nthreads, llm_ids *out, llm_status *st);

#endif
