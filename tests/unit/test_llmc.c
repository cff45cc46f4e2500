/* llm.c header parsing (common/llmc.c): accepted shapes, and hostile headers refused
 * without overflow.  Whole-file conversion is tested in tests/cli/convert.sh. */
#include "tests/unit/testutil.h"

#include <string.h>

#include "common/llmc.h"

static void header(int32_t *h, int v, int maxT, int V, int L, int NH, int C, int Vp)
{
    memset(h, 0, 256 * sizeof *h);
    int32_t x[8] = {LLM_LLMC_MAGIC, v, maxT, V, L, NH, C, Vp};
    memcpy(h, x, sizeof x);
}

static void test_gpt2_124m(void **s)
{
    (void)s;
    int32_t h[256];
    header(h, 3, 1024, 50257, 12, 12, 768, 50304);
    llm_llmc_info info;
    llm_status st = {0};
    uint64_t size = 1024 + 124475904ull * 4;
    assert_int_equal(llm_llmc_parse_header(h, sizeof h, size, &info, &st), 0);
    assert_int_equal(info.nparams, 124475904u);
    assert_int_equal(info.cfg.padded_vocab, 50304);
    header(h, 5, 1024, 50257, 12, 12, 768, 50304);
    assert_int_equal(llm_llmc_parse_header(h, sizeof h, 1024 + 124475904ull * 2, &info, &st), 0);
    assert_int_equal(info.elem_size, 2);
    /* the fp32 size for a bf16 header is refused */
    assert_int_equal(llm_llmc_parse_header(h, sizeof h, size, &info, &st), LLM_EDATA);
    assert_non_null(strstr(st.msg, "trailing"));
}

static void test_hostile(void **s)
{
    (void)s;
    int32_t h[256];
    llm_llmc_info info;
    llm_status st = {0};
    static const int32_t cases[][7] = {
        /* version maxT V L NH C Vp */
        {3, 1024, 50257, 12, 12, 768, 50257},                  /* Vp not rounded to 128 */
        {3, 2147483647, 50257, 12, 12, 768, 50304},            /* maxT too large */
        {3, 1024, 16777216, 1024, 1, 65536, 16777216},         /* huge but valid shape: size */
        {3, 1024, -1, 12, 12, 768, 128},
        {3, 1024, 50257, 12, 0, 768, 50304},
        {3, 1024, 50257, -12, 12, 768, 50304},
        {4, 1024, 50257, 12, 12, 768, 50304},
        {3, 0, 50257, 12, 12, 768, 50304},
        {3, 1024, 2147483647, 12, 12, 768, 2147483647},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        const int32_t *c = cases[i];
        header(h, c[0], c[1], c[2], c[3], c[4], c[5], c[6]);
        if (llm_llmc_parse_header(h, sizeof h, 4096, &info, &st) != LLM_EDATA)
            fail_msg("case %zu accepted", i);
    }
    header(h, 3, 8, 10, 1, 1, 4, 128);
    h[0] = 20240520;   /* a token file's magic */
    assert_int_equal(llm_llmc_parse_header(h, sizeof h, 4096, &info, &st), LLM_EDATA);
    assert_non_null(strstr(st.msg, "magic"));
    assert_int_equal(llm_llmc_parse_header(h, 100, 100, &info, &st), LLM_EDATA);
    assert_non_null(strstr(st.msg, "truncated"));
}

int main(void)
{
    const struct CMUnitTest tests[] = {cmocka_unit_test(test_gpt2_124m), cmocka_unit_test(test_hostile)};
    return cmocka_run_group_tests(tests, NULL, NULL);
}
