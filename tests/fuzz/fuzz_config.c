/* libFuzzer target for the llm-train config: the YAML document (first part of the input),
 * then each line of the second part (split at "\n%%%%\n") as a --set override, then
 * the cross-key validation and the printers. */
#include "tests/fuzz/fuzz_util.h"

#include "common/config.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    const uint8_t *p[2];
    size_t n[2];
    int k = fz_split(data, size, p, n, 2);
    llm_status st;
    llm_train_config *cfg = malloc(sizeof *cfg);
    if (!cfg)
        return 0;
    llm_config_defaults(cfg);
    char *yaml = malloc(n[0] + 1);
    memcpy(yaml, p[0], n[0]);
    yaml[n[0]] = 0;
    int rc = llm_config_apply_yaml(cfg, yaml, n[0], "fuzz.yaml", &st);
    free(yaml);
    if (k == 2) {
        const char *s = (const char *)p[1], *end = s + n[1];
        while (s < end) {
            const char *nl = memchr(s, '\n', (size_t)(end - s));
            size_t l = nl ? (size_t)(nl - s) : (size_t)(end - s);
            char *a = malloc(l + 1);
            memcpy(a, s, l);
            a[l] = 0;
            if (llm_config_set(cfg, a, &st))
                rc = 1;
            free(a);
            s += l + 1;
        }
    }
    if (!rc && llm_config_validate(cfg, &st) == 0) {
        llm_config_accum_steps(cfg);
        llm_node *node = llm_config_to_node(cfg);
        llm_node_free(node);
        FILE *f = fopen("/dev/null", "w");
        if (f) {
            llm_config_print(cfg, f, &st);
            fclose(f);
        }
    }
    free(cfg);
    return 0;
}
