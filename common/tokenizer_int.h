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

/* The code point of the whole UTF-8 character of 2 to 4 bytes that starts at p[i] and
 * ends before p[n], or -1 (ASCII, invalid, or cut short by n). */
static inline int32_t llm_tok__utf8_at(const unsigned char *p, size_t i, size_t n)
{
    unsigned char b0 = p[i];
    size_t k = b0 >= 0xc2 && b0 <= 0xdf ? 2 : b0 >= 0xe0 && b0 <= 0xef ? 3 : b0 >= 0xf0 && b0 <= 0xf4 ? 4 : 0;
    if (!k || k > n - i)
        return -1;
    for (size_t j = 1; j < k; j++)
        if ((p[i + j] & 0xc0) != 0x80)
            return -1;
    return llm_tok__utf8_before(p + i, k);
}

enum { LLM_TOK__UNSURE = 0, LLM_TOK__L = 1, LLM_TOK__N = 2, LLM_TOK__O = 3 };

/* The class of cp in GPT-2's pattern where it is certain: LLM_TOK__L (\p{L}), __N
 * (\p{N}), __O ([^\s\p{L}\p{N}]), else LLM_TOK__UNSURE (white space, controls, and every
 * code point outside the few ranges below).  The ranges are of letters, digits and
 * punctuation assigned by Unicode 3.0 (any PCRE2 has them), chosen for text that has no
 * ASCII white space to cut at: Chinese, Japanese and Korean letters and punctuation, the
 * fullwidth forms, general punctuation, combining accents, Latin-1, Latin Extended-A and
 * Cyrillic.  test_tokenizer checks every code point of each range against PCRE2 (UTF and
 * UCP, as the pre-tokenizer compiles). */
static inline int llm_tok__gpt2_class(int32_t c)
{
    if (c < 0x80) {
        if ((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z'))
            return LLM_TOK__L;
        if (c >= '0' && c <= '9')
            return LLM_TOK__N;
        return c > 0x20 && c < 0x7f ? LLM_TOK__O : LLM_TOK__UNSURE;
    }
    if ((c >= 0x4e00 && c <= 0x9fa5) || (c >= 0x3041 && c <= 0x3094) || (c >= 0x30a1 && c <= 0x30fa) ||
        (c >= 0x30fc && c <= 0x30fe) || (c >= 0xac00 && c <= 0xd7a3) || (c >= 0xff21 && c <= 0xff3a) ||
        (c >= 0xff41 && c <= 0xff5a) || (c >= 0xc0 && c <= 0x17f && c != 0xd7 && c != 0xf7) ||
        (c >= 0x410 && c <= 0x44f))
        return LLM_TOK__L;
    if (c >= 0xff10 && c <= 0xff19)
        return LLM_TOK__N;
    if ((c >= 0x3001 && c <= 0x3003) || (c >= 0x3008 && c <= 0x3011) || (c >= 0x3014 && c <= 0x301f) ||
        c == 0x30fb || (c >= 0x3099 && c <= 0x309c) || (c >= 0xff01 && c <= 0xff0f) ||
        (c >= 0xff1a && c <= 0xff20) || (c >= 0xff3b && c <= 0xff40) || (c >= 0xff5b && c <= 0xff5e) ||
        (c >= 0x2010 && c <= 0x2027) || (c >= 0x2030 && c <= 0x205e) || (c >= 0x300 && c <= 0x34e) ||
        c == 0xd7 || c == 0xf7)
        return LLM_TOK__O;
    return LLM_TOK__UNSURE;
}

/* A cut between text[i-1] and text[i] (0 < i < n, n the length of text) is safe for GPT-2
 * when:
 *  (a) text[i] is a space, tab, '\r' or '\n' and text[i-1] ends a character that is not
 *      white space: printable ASCII other than space, or a whole UTF-8 character that
 *      llm_tok__maybe_space rules out (so Chinese or Japanese text is cut at its line
 *      ends too); or
 *  (b) the characters x before and y after it are whole, of two different certain
 *      classes (llm_tok__gpt2_class: letter, number, other), and not x an apostrophe
 *      with y a letter.
 * Why (b) is safe.  The pattern is
 *   's|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+
 * x is valid and not white space, so a match M of the whole text holds it (one may start
 * at x: the search cannot pass it).  M is not a white-space alternative (x is not white
 * space), nor a run alternative that goes on past x: its optional space cannot be x,
 * so x and y would both be in its run of one class.  Nor a contraction that goes on past
 * x: x would be its apostrophe followed by y a letter, which (b) excludes, or a letter
 * followed by y a letter, one class.  So M ends at i.  The matches up to M's are found
 * alike in text[0, i): what they read past their end is one character, only to learn
 * that it does not continue a run (y, for M: not of x's class; end of text, in the part)
 * or that a white-space run ends before a non-space (at or before x, in both); the
 * contraction tried at x, an apostrophe, fails on y (not a letter) as on the end of text.
 * From i the search starts afresh, and the pattern has no look-behind.  (a) is the same
 * argument with y white space: no alternative holds a non-space then a space (spaces
 * only ever lead a match), and only the white-space alternatives look ahead.  Both sides
 * of a cut are whole UTF-8.  Any cut is safe for the byte kind. */
static inline int llm_tok__cut_ok(const char *text, size_t i, size_t n)
{
    const unsigned char *p = (const unsigned char *)text;
    unsigned char x = p[i - 1], y = p[i];
    if (y == ' ' || y == '\t' || y == '\n' || y == '\r') {
        if (x < 0x80)
            return x > 0x20 && x < 0x7f;
        int32_t cp = llm_tok__utf8_before(p, i);
        return cp >= 0 && !llm_tok__maybe_space(cp);
    }
    int32_t cx = x < 0x80 ? x : llm_tok__utf8_before(p, i), cy = y < 0x80 ? y : llm_tok__utf8_at(p, i, n);
    if (cx < 0 || cy < 0)
        return 0;
    int kx = llm_tok__gpt2_class(cx), ky = llm_tok__gpt2_class(cy);
    return kx && ky && kx != ky && !(cx == '\'' && ky == LLM_TOK__L);
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
