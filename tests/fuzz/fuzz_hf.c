/* libFuzzer target for the Hugging Face import (llm_hf_import): the input is split at
 * "\n%%%%\n" into config.json, model.safetensors and the tokenizer (one part:
 * tokenizer.json; two: vocab.json + merges.txt), written to a scratch directory.  What
 * imports must export and import again. */
#include "tests/fuzz/fuzz_util.h"

#include "common/safetensors.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    const uint8_t *p[5];
    size_t n[5];
    int k = fz_split(data, size, p, n, 5);
    static const char *const names[] = {"config.json", "model.safetensors", "tokenizer.json", NULL};
    fz_rm("tokenizer.json"), fz_rm("vocab.json"), fz_rm("merges.txt");
    for (int i = 0; i < k; i++) {
        const char *name = i < 2 ? names[i] : k == 3 ? "tokenizer.json" : i == 2 ? "vocab.json" : "merges.txt";
        fz_write(name, p[i], n[i]);
    }
    if (k < 2)
        fz_rm("model.safetensors");
    char out[512];
    snprintf(out, sizeof out, "%s/out.llmk", fz_dir());
    llm_status st;
    if (llm_hf_import(fz_dir(), out, &st) == 0) {
        /* what was imported exports, and the export imports again */
        char dir2[512], back[512];
        snprintf(dir2, sizeof dir2, "%s/re", fz_dir());
        snprintf(back, sizeof back, "%s/back.llmk", fz_dir());
        if (llm_hf_export(out, dir2, NULL, 0, &st) || llm_hf_import(dir2, back, &st)) {
            fprintf(stderr, "imported, but the export does not import back: %s\n", st.msg);
            abort();
        }
        unlink(back);
    }
    unlink(out);
    return 0;
}
