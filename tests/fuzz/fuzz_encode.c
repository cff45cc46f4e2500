/* libFuzzer target for encoding and decoding arbitrary bytes with the real GPT-2
 * tokenizer ($FUZZ_GPT2_DIR, default ../shared/data/gpt2): encode never fails on any
 * bytes, decode(encode(x)) == x, the threaded encoder agrees, the windowed encoder
 * (llm_encoder) gives the same ids through a tiny window as in one piece, and the bytes
 * read as ids decode or are refused (out of range) without a crash. */
#include "tests/fuzz/fuzz_util.h"

#include "common/tokenizer.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static llm_tokenizer *tok;

static int collect(void *ctx, const uint32_t *v, size_t n, llm_status *st)
{
    for (size_t i = 0; i < n; i++)
        if (llm_ids_push(ctx, v[i]))
            return llm_err(st, LLM_ENOMEM, "out of memory");
    return LLM_OK;
}

/* data through an encoder of the given window, fed k bytes at a time */
static void stream(const uint8_t *data, size_t size, int eot, int split, size_t window, size_t k,
                   llm_ids *out)
{
    llm_status st;
    llm_encoder *e;
    if (llm_encoder_new(&e, tok, eot, split, 2, window, collect, out, &st))
        abort();
    for (size_t at = 0; at < size; at += k)
        if (llm_encoder_feed(e, (const char *)data + at, size - at < k ? size - at : k, &st))
            abort();
    if (llm_encoder_end_input(e, &st) || llm_encoder_tokens(e) != out->n)
        abort();
    llm_encoder_free(e);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    llm_status st;
    static int missing;
    if (!tok && !missing) {
        const char *dir = getenv("FUZZ_GPT2_DIR");
        if (llm_tokenizer_gpt2(&tok, dir ? dir : "../shared/data/gpt2", &st)) {
            fprintf(stderr, "fuzz_encode: %s (set FUZZ_GPT2_DIR); nothing to fuzz\n", st.msg);
            missing = 1;
        }
    }
    if (!tok)
        return 0;
    llm_ids ids = {0}, ids2 = {0};
    if (llm_tokenizer_encode(tok, (const char *)data, size, &ids, &st))
        abort();
    char *back = NULL;
    size_t blen = 0;
    if (llm_tokenizer_decode(tok, ids.v, ids.n, &back, &blen, &st) || blen != size ||
        (size && memcmp(back, data, size)))
        abort();
    free(back);
    if (size > 64 && (data[0] & 1)) {
        if (llm_tokenizer_encode_mt(tok, (const char *)data, size, 2, &ids2, &st) || ids2.n != ids.n ||
            memcmp(ids2.v, ids.v, ids.n * sizeof *ids.v))
            abort();
    }
    if (size > 2 && (data[0] & 2)) {
        int eot = data[0] & 4, split = data[0] & 8;
        llm_ids a = {0}, b = {0};
        stream(data, size, eot, split, 1 + data[1] % 64, 1 + data[2] % 97, &a);
        stream(data, size, eot, split, size + 1, size + 1, &b);
        if (a.n != b.n || (a.n && memcmp(a.v, b.v, a.n * sizeof *a.v)))
            abort();
        /* without documents cut by blank lines, one piece is the plain encoding */
        if (!split && (b.n != ids.n + !!eot ||
                       (ids.n && memcmp(b.v + !!eot, ids.v, ids.n * sizeof *ids.v))))
            abort();
        llm_ids_free(&a);
        llm_ids_free(&b);
    }
    /* the bytes as little-endian u32 ids, some out of range */
    size_t nid = size / 4;
    uint32_t *raw = malloc(nid * 4 + 4);
    memcpy(raw, data, nid * 4);
    for (size_t i = 0; i < nid; i++)
        raw[i] %= (uint32_t)llm_tokenizer_vocab_size(tok) + 16;
    back = NULL;
    int rc = llm_tokenizer_decode(tok, raw, nid, &back, &blen, &st);
    int out = 0;
    for (size_t i = 0; i < nid; i++)
        out |= raw[i] >= (uint32_t)llm_tokenizer_vocab_size(tok);
    if ((rc == 0) == out)
        abort();   /* out of range must be refused, in range accepted */
    free(back);
    for (size_t i = 0; i < nid && i < 8; i++) {
        const char *b;
        size_t bl;
        if ((llm_tokenizer_token_bytes(tok, raw[i], &b, &bl, &st) == 0) != (raw[i] < (uint32_t)llm_tokenizer_vocab_size(tok)))
            abort();
    }
    free(raw);
    llm_ids_free(&ids);
    llm_ids_free(&ids2);
    return 0;
}
