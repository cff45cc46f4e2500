/* libFuzzer target for token files (llm_tokfile_open) and the training data loader
 * (llm_data_open / next / seek): the first part of the input (split at "\n%%%%\n") is the
 * token file, the optional second a YAML data position to seek to; the last byte of the
 * input is not part of either: it picks the vocabulary, batch shape and mode. */
#include "tests/fuzz/fuzz_util.h"

#include "common/data.h"
#include "common/tokfile.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    /* the last byte is the knob, the rest the file (and position) */
    unsigned knob = size ? data[size - 1] : 0;
    size -= size > 0;
    const uint8_t *p[2];
    size_t n[2];
    int k = fz_split(data, size, p, n, 2);
    int64_t vocab = (knob & 3) == 0 ? 0 : (knob & 3) == 1 ? 256 : (knob & 3) == 2 ? 50257 : 70000;
    const char *path = fz_write("tok.bin", p[0], n[0]);
    llm_status st;
    llm_tokfile tf;
    if (llm_tokfile_open(&tf, path, vocab, &st) == 0) {
        volatile uint64_t sum = 0;
        int32_t buf[64];
        for (uint64_t i = 0; i < tf.ntok; i += 64) {
            size_t m = tf.ntok - i < 64 ? (size_t)(tf.ntok - i) : 64;
            llm_tokfile_read(&tf, i, m, buf);
            for (size_t j = 0; j < m; j++)
                sum += (uint32_t)buf[j];
        }
        llm_tokfile_close(&tf);
    }
    llm_data_opts o = {.pattern = path, .B = 1 + (int)(knob >> 6), .T = 1 + (int)((knob >> 2) & 7),
                       .vocab = vocab, .sequential = (knob >> 5) & 1, .seed = knob, .prefetch = 0};
    llm_data *d = NULL;
    if (llm_data_open(&d, &o, &st) == 0) {
        int32_t *in = malloc(sizeof(int32_t) * (size_t)o.B * (size_t)o.T * 2);
        for (int s = 0; s < 3; s++)
            if (llm_data_next(d, in, in + o.B * o.T, &st))
                break;
        if (k == 2) {
            llm_node *node = NULL;
            llm_data_pos pos;
            if (llm_yaml_parse((const char *)p[1], n[1], "pos.yaml", NULL, &node, &st) == 0 &&
                llm_data_pos_parse(node, &pos, &st) == 0 && llm_data_seek(d, &pos, &st) == 0)
                for (int s = 0; s < 3; s++)
                    if (llm_data_next(d, in, in + o.B * o.T, &st))
                        break;
            llm_node_free(node);
        }
        free(in);
        llm_data_free(d);
    }
    return 0;
}
