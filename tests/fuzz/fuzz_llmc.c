/* libFuzzer target for the llm.c checkpoint reader: the header parser on the bytes, then
 * the whole import (llm_llmc_import) from a scratch file. */
#include "tests/fuzz/fuzz_util.h"

#include "common/llmc.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    llm_status st;
    llm_llmc_info info;
    uint8_t *buf = malloc(size ? size : 1);
    if (!buf)
        return 0;
    memcpy(buf, data, size);
    int ok = llm_llmc_parse_header(buf, size, size, &info, &st) == 0;
    free(buf);
    /* the import reads the whole file: only worth it for an accepted header (or a few
     * random others, for the error paths) */
    if (ok || (size && data[size - 1] == 0x5a)) {
        const char *in = fz_write("in.bin", data, size);
        char out[512];
        snprintf(out, sizeof out, "%s/out.llmk", fz_dir());
        llm_llmc_import(in, out, &st);
        unlink(out);
    }
    return 0;
}
