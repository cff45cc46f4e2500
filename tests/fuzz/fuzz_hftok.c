/* libFuzzer target for the Hugging Face tokenizer import (llm_hf_tok_read): the input is
 * split at "\n%%%%\n" into vocab.json + merges.txt (two parts, a third is a text) or
 * tokenizer.json (one part).  The vocabulary size the model would declare is taken from
 * the file itself so the builder is reached; an accepted tokenizer must round-trip any
 * text. */
#include <jansson.h>

#include "tests/fuzz/fuzz_util.h"

#include "common/safetensors_int.h"
#include "common/tokenizer.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    const uint8_t *p[3];
    size_t n[3];
    int k = fz_split(data, size, p, n, 3);
    fz_rm("tokenizer.json"), fz_rm("vocab.json"), fz_rm("merges.txt");
    int V = 257;
    json_t *j = json_loadb((const char *)p[0], n[0], 0, NULL);
    json_t *vocab = k == 1 ? json_object_get(json_object_get(j, "model"), "vocab") : j;
    if (json_is_object(vocab) && json_object_size(vocab) > 0 && json_object_size(vocab) < (1u << 20))
        V = (int)json_object_size(vocab);
    json_decref(j);
    if (k == 1) {
        fz_write("tokenizer.json", p[0], n[0]);
    } else {
        fz_write("vocab.json", p[0], n[0]);
        fz_write("merges.txt", p[1], n[1]);
    }
    llm_status st;
    llm_tokenizer *t = NULL;
    if (llm_hf_tok_read(fz_dir(), V, &t, &st) || !t)
        return 0;
    const char *text = k == 3 ? (const char *)p[2] : "hello world, \xff\xfe caf\xc3\xa9 <|endoftext|>";
    size_t len = k == 3 ? n[2] : strlen(text);
    llm_ids ids = {0};
    if (llm_tokenizer_encode(t, text, len, &ids, &st))
        abort();
    char *back = NULL;
    size_t blen = 0;
    if (llm_tokenizer_decode(t, ids.v, ids.n, &back, &blen, &st) || blen != len || memcmp(back, text, len))
        abort();
    free(back);
    llm_ids_free(&ids);
    llm_tokenizer_free(t);
    return 0;
}
