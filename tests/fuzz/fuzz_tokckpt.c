/* libFuzzer target for a tokenizer stored in a .llmk file (llm_tokenizer_from_ckpt, as
 * llm-tokenize --vocab MODEL.llmk and llm-infer load it): an accepted tokenizer must
 * encode any text and decode it back. */
#include "tests/fuzz/fuzz_util.h"

#include "common/ckpt.h"
#include "common/tokenizer.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    llm_status st;
    llm_ckpt *c = NULL;
    if (llm_ckpt_open_mem(&c, data, size, LLM_CKPT_NOVERIFY, &st))
        return 0;
    llm_tokenizer *t = NULL;
    if (llm_tokenizer_from_ckpt(&t, c, &st) == 0) {
        static const char text[] = "hello world, \xff\xfe caf\xc3\xa9 <|endoftext|> he ll";
        llm_ids ids = {0};
        if (llm_tokenizer_encode(t, text, sizeof text - 1, &ids, &st))
            abort();
        char *back = NULL;
        size_t blen = 0;
        if (llm_tokenizer_decode(t, ids.v, ids.n, &back, &blen, &st) || blen != sizeof text - 1 ||
            memcmp(back, text, blen))
            abort();
        free(back);
        llm_ids_free(&ids);
        llm_tokenizer_free(t);
    }
    llm_ckpt_close(c);
    return 0;
}
