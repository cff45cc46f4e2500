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
    /* A mutated file rarely keeps the exact size its header describes, so the import's
     * body (the parameters) would hardly ever be reached: a header whose shape is valid
     * (nparams set) but whose size is wrong is imported as a file of the right size,
     * the input's bytes repeated to fill it (up to 1 MiB). */
    uint64_t want = 1024 + (uint64_t)info.nparams * info.elem_size;
    if (!ok && info.nparams && size >= 1024 && want <= ((uint64_t)1 << 20)) {
        uint8_t *fit = malloc((size_t)want);
        if (!fit)
            return 0;
        for (size_t i = 0; i < want; i++)
            fit[i] = data[i % size];
        const char *in = fz_write("in.bin", fit, (size_t)want);
        free(fit);
        char out[512];
        snprintf(out, sizeof out, "%s/out.llmk", fz_dir());
        llm_llmc_import(in, out, &st);
        unlink(out);
        return 0;
    }
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
