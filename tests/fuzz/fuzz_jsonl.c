/* libFuzzer target for llm-infer's request sources (common/infer_io.c): the input as
 * JSONL request lines (and as plain prompt lines), with the byte tokenizer; then the
 * JSON writer (common/json.c) escaping the raw bytes, checked to read back with jansson. */
#include <jansson.h>

#include "tests/fuzz/fuzz_util.h"

#include "common/infer_io.h"
#include "common/json.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static llm_tokenizer *tok;

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    llm_status st;
    if (!tok && llm_tokenizer_byte(&tok, &st))
        abort();
    for (int mode = 0; mode < 2; mode++) {
        FILE *in = fmemopen((void *)data, size ? size : 1, "rb");
        if (!in)
            return 0;
        if (!size)
            fgetc(in);
        static const char *const stops[] = {"\n\n"};
        llm_infer_source src = {.in = in, .jsonl = !mode, .tok = tok, .vocab = 300, .max_tokens = 16,
                                .stops = stops, .n_stops = 1};
        src.sp.temperature = 1.0f;
        for (int i = 0; i < 1000; i++) {
            llm_infer_request req;
            memset(&req, 0, sizeof req);
            int rc = llm_infer_source_next(&src, &req, &st);
            if (rc == 1) {
                if (!req.error) {
                    if (req.n_prompt < 0 || req.max_tokens < 0 || req.n_stops < 0)
                        abort();
                    for (int j = 0; j < req.n_prompt; j++)
                        if (req.prompt[j] >= 300)
                            abort();
                    for (int j = 0; j < req.n_stops; j++)
                        if (!req.stops[j][0])
                            abort();
                }
                /* an over-long line's error names this build's limit (256 bytes) */
                static const char over[] = "input line longer than ";
                if (req.error && !strncmp(req.error, over, sizeof over - 1)) {
                    char want[64];
                    unsigned lim = LLM_INFER_MAX_LINE;
                    snprintf(want, sizeof want, lim % (1u << 20) ? "%s%u bytes" : "%s%u MiB", over,
                             lim % (1u << 20) ? lim : lim >> 20);
                    if (strcmp(req.error, want)) {
                        fprintf(stderr, "'%s', not '%s'\n", req.error, want);
                        abort();
                    }
                }
                /* the response of this request as JSON must read back */
                llm_infer_result res = {.req = &req, .text = (const char *)data, .text_len = size,
                                        .finish_reason = req.error ? "error" : "length", .error = req.error};
                char *buf = NULL;
                size_t len = 0;
                FILE *mf = open_memstream(&buf, &len);
                llm_infer_result_json(&res, mf);
                fclose(mf);
                json_error_t e;
                json_t *j = json_loadb(buf, len, JSON_ALLOW_NUL, &e);   /* \u0000 is valid JSON */
                if (!j) {
                    fprintf(stderr, "response does not parse: %s: %.*s\n", e.text, (int)len, buf);
                    abort();
                }
                json_decref(j);
                free(buf);
                llm_infer_request_free(&req);
                continue;
            }
            llm_infer_request_free(&req);
            break;
        }
        llm_infer_source_free(&src);
        fclose(in);
    }
    return 0;
}
