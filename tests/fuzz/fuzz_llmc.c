/* libFuzzer target for the llm.c checkpoint reader: the header parser on the bytes, then
 * the whole import (llm_llmc_import) from a scratch file.  make fuzz gives it the
 * dictionary tests/fuzz/fuzz_llmc.dict (the header's magic, versions and shapes). */
#include "tests/fuzz/fuzz_util.h"

#include "common/llmc.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

/* Shapes deeper than this are imported only now and then (the input's last byte 0x5a,
 * as for the random inputs below); the header parse sees every shape.  Each layer is
 * the same code, and a deep narrow shape (514 layers of width 1 fit in 27 KB) makes
 * thousands of tensors whose checkpoint header takes tens of ms to write: imported each
 * time, such inputs took most of the target's time once the corpus held one.  (Only the
 * writer's buffer growth, common/tree.c write_cb, needs a header that big.) */
#define FZ_LLMC_MAX_LAYERS 8

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
    if (info.nparams && info.cfg.n_layer > FZ_LLMC_MAX_LAYERS && data[size - 1] != 0x5a)
        return 0;
    /* A mutated file rarely keeps the exact size its header describes, so the import's
     * body (the parameters) would hardly ever be reached: a header whose shape is valid
     * (nparams set) but whose size is wrong is imported as a file of the right size,
     * the input's bytes repeated to fill it (up to 1 MiB). */
    uint64_t want = 1024 + (uint64_t)info.nparams * info.elem_size;
    if (!ok && info.nparams && size >= 1024 && want <= ((uint64_t)1 << 20)) {
        uint8_t *fit = malloc((size_t)want);
        if (!fit)
            return 0;
        /* the input, then what is filled so far doubled: a per-byte loop here (compare
         * tracing on every byte) took most of the time of an input */
        size_t have = size < want ? size : (size_t)want;
        memcpy(fit, data, have);
        while (have < want) {
            size_t n = have < want - have ? have : (size_t)want - have;
            memcpy(fit + have, fit, n);
            have += n;
        }
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
