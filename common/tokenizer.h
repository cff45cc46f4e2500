/* tokenizer.h — GPT-2 byte-level BPE and the byte tokenizer.
 *
 * "gpt2": GPT-2's pre-tokenization pattern (PCRE2 with JIT), byte-to-unicode mapping,
 * merges by rank, <|endoftext|> = 50256; vocabulary 50257.  The literal text
 * "<|endoftext|>" in the input is ordinary text (encoded as its characters, as the
 * shared tokenizer_cases.jsonl requires); only callers add the end-of-text id.  Bytes
 * that are not valid UTF-8 match no pattern alternative and form pre-tokens of their
 * own, so any byte string encodes and decodes back to itself.
 * "byte": ids 0..255 are the bytes, 256 is end-of-text; vocabulary 257.
 * A tokenizer is stored in a .llmk file as the header section `tokenizer:` (kind, vocab
 * size, eot) plus tensors (GPT-2: the vocabulary bytes and the merges), so a model file
 * carries its tokenizer.
 */
#ifndef LLM_TOKENIZER_H
#define LLM_TOKENIZER_H

#include <stddef.h>
#include <stdint.h>

#include "common/ckpt.h"
#include "common/status.h"

typedef struct llm_tokenizer llm_tokenizer;

/* A growable id vector. */
typedef struct {
    uint32_t *v;
    size_t n, cap;
} llm_ids;
int  llm_ids_push(llm_ids *ids, uint32_t id);   /* 0, or -1 out of memory */
void llm_ids_free(llm_ids *ids);
/* Make room for extra more ids without reallocating.  0, or -1 out of memory. */
int  llm_ids_reserve(llm_ids *ids, size_t extra);

int llm_tokenizer_byte(llm_tokenizer **out, llm_status *st);

/* Load GPT-2 BPE from dir/encoder.json and dir/vocab.bpe.  Errors: LLM_ENOINPUT for a
 * missing file, LLM_EDATA for a corrupt one (file named). */
int llm_tokenizer_gpt2(llm_tokenizer **out, const char *dir, llm_status *st);

/* Load the tokenizer stored in a checkpoint (section + tensors).  LLM_EDATA when absent
 * or malformed. */
int llm_tokenizer_from_ckpt(llm_tokenizer **out, const llm_ckpt *ck, llm_status *st);

/* Store into a writer: sets the `tokenizer:` section and adds the tensors.  The
 * tensors' data is owned by t (t must outlive llm_ckpt_write). */
int llm_tokenizer_save(const llm_tokenizer *t, llm_ckpt_writer *w, llm_status *st);

void llm_tokenizer_free(llm_tokenizer *t);

const char *llm_tokenizer_kind(const llm_tokenizer *t);  /* "gpt2" | "byte" */
int llm_tokenizer_vocab_size(const llm_tokenizer *t);
uint32_t llm_tokenizer_eot(const llm_tokenizer *t);
/* The most bytes of text one id stands for: text of n bytes encodes to at least
 * n / this many ids (1 for the byte kind). */
size_t llm_tokenizer_max_token_bytes(const llm_tokenizer *t);

/* Append the ids of text[0..len) to out.  Any bytes (invalid UTF-8 included) encode.
 * Safe to call from several threads at once on the same tokenizer. */
int llm_tokenizer_encode(const llm_tokenizer *t, const char *text, size_t len, llm_ids *out,
                         llm_status *st);

/* The bytes of one token (not NUL-terminated).  LLM_EDATA when id >= vocab size. */
int llm_tokenizer_token_bytes(const llm_tokenizer *t, uint32_t id, const char **bytes,
                              size_t *len, llm_status *st);

/* Decode n ids into a malloc'd buffer *out of *len bytes (not NUL-terminated; the
 * caller frees it).  Every id is checked first: LLM_EDATA names the first id out of
 * range and nothing is returned.  The end-of-text id decodes to "<|endoftext|>". */
int llm_tokenizer_decode(const llm_tokenizer *t, const uint32_t *ids, size_t n, char **out,
                         size_t *len, llm_status *st);

/* llm_tokenizer_encode with up to nthreads threads (<= 1: the calling thread only).
 * Large texts are cut only where a pre-token boundary is certain (before a space, tab or
 * line end that follows a character other than white space, or between a letter, a
 * digit and punctuation: llm_tok__cut_ok), each
 * piece is encoded by its own thread,
 * and the ids are appended in input order: the result is identical to
 * llm_tokenizer_encode. */
int llm_tokenizer_encode_mt(const llm_tokenizer *t, const char *text, size_t len,
                            int nthreads, llm_ids *out, llm_status *st);

/* Encode ndocs documents (texts[i] of lens[i] bytes) one after the other onto out, each
 * preceded by the end-of-text id when with_eot, on up to nthreads threads (same result
 * for any count).  starts (NULL or ndocs entries) receives the index in out of each
 * document's first id (its end-of-text id when with_eot). */
int llm_tokenizer_encode_docs(const llm_tokenizer *t, const char *const *texts,
                              const size_t *lens, size_t ndocs, int with_eot, int nthreads,
                              llm_ids *out, size_t *starts, llm_status *st);

/* ---- encoding inputs of any size, a window at a time ----
 * Feed each input's bytes in any pieces, then end it; emit receives the ids in order as
 * they are made, exactly those of llm_tokenizer_encode_docs on the whole inputs as
 * documents (each input one, and with split_docs also each block that ends in a run of
 * two or more line ends, the blank lines staying with the block they end).  Memory: the
 * window (0: 16 MiB) and its ids, plus any stretch longer than the window without a
 * place to cut (for GPT-2, a space, tab or line end after a character other than white
 * space), and
 * with llm_encoder_keep_starts 8 bytes per document. */
typedef int (*llm_ids_fn)(void *ctx, const uint32_t *ids, size_t n, llm_status *st);
typedef struct llm_encoder llm_encoder;
int  llm_encoder_new(llm_encoder **out, const llm_tokenizer *t, int with_eot, int split_docs,
                     int nthreads, size_t window, llm_ids_fn emit, void *ctx, llm_status *st);
int  llm_encoder_feed(llm_encoder *e, const char *p, size_t n, llm_status *st);
/* The current input ends (its last document with it); the next feed starts another. */
int  llm_encoder_end_input(llm_encoder *e, llm_status *st);
uint64_t llm_encoder_tokens(const llm_encoder *e);   /* ids emitted so far */
uint64_t llm_encoder_bytes(const llm_encoder *e);    /* bytes fed so far */
/* Keep every document's start (for a train/val cut at a document); call before feeding. */
void llm_encoder_keep_starts(llm_encoder *e);
/* The documents begun so far (*ndocs), and with keep_starts each one's first id (its
 * end-of-text id with with_eot), in order; else NULL. */
const uint64_t *llm_encoder_doc_starts(const llm_encoder *e, size_t *ndocs);
void llm_encoder_free(llm_encoder *e);

/* Where GPT-2's encoder.json and vocab.bpe are by default: the first of $LLMKIT_DATA/gpt2,
 * $LLM_DATA/gpt2 and ./data/gpt2 (unset or empty variables skipped) that holds both goes
 * to dir; 1.  None does: the first of them goes to dir (for the message); 0. */
int llm_tokenizer_gpt2_find(char *dir, size_t n);

/* Load by name: "byte", "gpt2" (from vocab_dir: encoder.json + vocab.bpe; NULL means
 * $LLMKIT_DATA/gpt2, or ./data/gpt2 when LLMKIT_DATA is unset), or the path of a .llmk
 * file whose tokenizer is used.  Errors as for the loaders above. */
int llm_tokenizer_load(llm_tokenizer **out, const char *spec, const char *vocab_dir,
                       llm_status *st);

#endif
