/* libFuzzer target for the .llmk loader (and the strict YAML parser under it).
 * Build and run: make fuzz FUZZ_SECONDS=120.  Crashes go to tests/fuzz/regress/, which
 * tests/cli/shard.sh replays through `llm-shard verify`. */
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>

#include "common/ckpt.h"
#include "common/tree.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    llm_status st;
    llm_ckpt *c = NULL;
    static const unsigned flags[] = {0, LLM_CKPT_NOVERIFY, LLM_CKPT_HEADER_ONLY};
    for (int f = 0; f < 3; f++) {
        if (llm_ckpt_open_mem(&c, data, size, flags[f], &st) != 0)
            continue;
        /* everything a loaded file hands out must be readable */
        volatile unsigned sum = 0;
        for (int i = 0; i < llm_ckpt_count(c); i++) {
            const llm_tensor *t = llm_ckpt_tensor(c, i);
            if (t->data)
                for (uint64_t k = 0; k < t->nbytes; k++)
                    sum += ((const unsigned char *)t->data)[k];
            if (llm_ckpt_find(c, t->name) != t)
                abort();
        }
        /* the header of an accepted file re-emits and re-parses */
        char *y = NULL;
        size_t len = 0;
        if (llm_yaml_emit(llm_ckpt_header(c), &y, &len, &st) == 0) {
            llm_node *back = NULL;
            if (llm_yaml_parse(y, len, "re-emitted", NULL, &back, &st) != 0)
                abort();
            llm_node_free(back);
            free(y);
        }
        llm_ckpt_close(c);
    }
    /* the same bytes as a YAML config */
    llm_node *n = NULL;
    if (llm_yaml_parse((const char *)data, size, "fuzz.yaml", NULL, &n, &st) == 0) {
        char *y = NULL;
        size_t len = 0;
        if (llm_yaml_emit(n, &y, &len, &st) == 0) {
            llm_node *back = NULL;
            if (llm_yaml_parse(y, len, "re-emitted", NULL, &back, &st) != 0)
                abort();
            llm_node_free(back);
            free(y);
        }
        llm_node_free(n);
    }
    return 0;
}
