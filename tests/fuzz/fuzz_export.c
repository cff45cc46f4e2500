/* libFuzzer target for the exporters' reading of a hostile .llmk: a checkpoint that the
 * container accepts may still carry a model section or tensors that do not fit each
 * other.  The bytes are written to a scratch file and exported to llm.c
 * (llm_llmc_export) and to a Hugging Face directory (llm_hf_export). */
#include "tests/fuzz/fuzz_util.h"

#include "common/llmc.h"
#include "common/safetensors.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    const char *in = fz_write("in.llmk", data, size);
    char out[512];
    llm_status st;
    snprintf(out, sizeof out, "%s/out.bin", fz_dir());
    llm_llmc_export(in, out, &st);
    unlink(out);
    snprintf(out, sizeof out, "%s/hf", fz_dir());
    llm_hf_export(in, out, &st);
    return 0;
}
