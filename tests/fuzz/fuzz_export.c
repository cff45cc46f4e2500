/* libFuzzer target for the exporters' reading of a hostile .llmk: a checkpoint that the
 * container accepts may still carry a model section or tensors that do not fit each
 * other.  The bytes are written to a scratch file and exported to llm.c
 * (llm_llmc_export), to a Hugging Face directory (llm_hf_export) and to GGUF
 * (llm_gguf_export); what an exporter with an importer accepts must import back. */
#include "tests/fuzz/fuzz_util.h"

#include "common/gguf.h"
#include "common/llmc.h"
#include "common/safetensors.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    const char *in = fz_write("in.llmk", data, size);
    char out[512];
    llm_status st;
    char back[512];
    snprintf(back, sizeof back, "%s/back.llmk", fz_dir());
    /* what an exporter accepts, its importer reads back */
    snprintf(out, sizeof out, "%s/out.bin", fz_dir());
    if (llm_llmc_export(in, out, NULL, 0, &st) == 0 && llm_llmc_import(out, back, &st)) {
        fprintf(stderr, "llm.c export accepted, import refused: %s\n", st.msg);
        abort();
    }
    unlink(out);
    snprintf(out, sizeof out, "%s/hf", fz_dir());
    static const char *const files[] = {"model.safetensors", "config.json", "vocab.json", "merges.txt",
                                        "tokenizer_config.json", "tokenizer.json"};
    for (int i = 0; i < 6; i++) {
        char p[600];
        snprintf(p, sizeof p, "%s/%s", out, files[i]);
        unlink(p);
    }
    if (llm_hf_export(in, out, NULL, 0, &st) == 0 && llm_hf_import(out, back, &st)) {
        fprintf(stderr, "safetensors export accepted, import refused: %s\n", st.msg);
        abort();
    }
    unlink(back);
    snprintf(out, sizeof out, "%s/out.gguf", fz_dir());
    llm_gguf_export(in, out, &st);
    unlink(out);
    return 0;
}
