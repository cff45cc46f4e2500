/* libFuzzer target for the GPT-2 BPE tokenizer loader (llm_tokenizer_gpt2: encoder.json +
 * vocab.bpe) and for encoding with what it accepts: the input is split at "\n%%%%\n" into
 * encoder.json, vocab.bpe and a text; an accepted tokenizer must encode any text and
 * decode the ids back to the same bytes, and refuse ids out of range. */
#include "tests/fuzz/fuzz_util.h"

#include "common/tokenizer.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    const uint8_t *p[3];
    size_t n[3];
    int k = fz_split(data, size, p, n, 3);
    if (k < 2)
        return 0;
    fz_write("encoder.json", p[0], n[0]);
    fz_write("vocab.bpe", p[1], n[1]);
    llm_status st;
    llm_tokenizer *t = NULL;
    if (llm_tokenizer_gpt2(&t, fz_dir(), &st))
        return 0;
    const char *text = k == 3 ? (const char *)p[2] : "hello world, \xff\xfe caf\xc3\xa9 <|endoftext|>";
    size_t len = k == 3 ? n[2] : strlen(text);
    llm_ids ids = {0};
    if (llm_tokenizer_encode(t, text, len, &ids, &st))
        abort();   /* any bytes encode */
    char *back = NULL;
    size_t blen = 0;
    if (llm_tokenizer_decode(t, ids.v, ids.n, &back, &blen, &st))
        abort();
    if (blen != len || memcmp(back, text, len)) {
        fprintf(stderr, "round trip differs: %zu bytes -> %zu ids -> %zu bytes\n", len, ids.n, blen);
        abort();
    }
    free(back);
    uint32_t bad = (uint32_t)llm_tokenizer_vocab_size(t);
    back = NULL;
    if (llm_tokenizer_decode(t, &bad, 1, &back, &blen, &st) == 0)
        abort();
    free(back);
    llm_ids_free(&ids);
    llm_tokenizer_free(t);
    return 0;
}
