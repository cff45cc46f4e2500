/* test_dlsyms.c — libraries opened at run time: common/dlsyms.c and the NCCL table built
 * on it (common/nccl_dl.c, NCCL=1), which needs NCCL's library (the build's), not a GPU:
 * ncclGetVersion asks no device; and, in a CUDA=1 build, which cuBLAS it runs with. */
#include <string.h>
#include <zlib.h>

#include "tests/unit/testutil.h"
#include "common/dlsyms.h"
#include "common/nccl_dl.h"

static void test_dlsyms_resolves_and_reports(void **state)
{
    (void)state;
    const char *(*ver)(void) = NULL;
    int (*absent)(void) = NULL;
    const char *libs[] = { "libz.so.1" };
    llm_dlsym ok[] = { { 0, "zlibVersion", &ver } };
    char why[256] = "";
    assert_int_equal(llm_dlsyms_open(libs, 1, ok, 1, 1, why, sizeof why), 0);
    assert_non_null(ver);
    assert_string_equal(ver(), zlibVersion());   /* the same library the program links */
    llm_dlsym bad[] = { { 0, "zlibVersion", &ver }, { 0, "no_such_function", &absent } };
    assert_int_equal(llm_dlsyms_open(libs, 1, bad, 2, 0, why, sizeof why), -1);
    assert_string_equal(why, "libz.so.1 has no no_such_function");
    llm_dlsym badlib[] = { { 1, "zlibVersion", &ver } };
    assert_int_equal(llm_dlsyms_open(libs, 1, badlib, 1, 0, why, sizeof why), -1);
    assert_string_equal(why, "? has no zlibVersion");
    const char *missing[] = { "libz.so.1", "libllmkit-absent.so.7" };
    assert_int_equal(llm_dlsyms_open(missing, 2, ok, 1, 0, why, sizeof why), -1);
    assert_non_null(strstr(why, "cannot load libllmkit-absent.so.7: "));
    assert_int_equal(llm_dlsyms_open(libs, 0, ok, 1, 0, why, sizeof why), -1);
    assert_int_equal(llm_dlsyms_open(libs, 5, ok, 1, 0, why, sizeof why), -1);
    /* a short buffer is cut, not overrun */
    char small[8];
    memset(small, 'x', sizeof small);
    assert_int_equal(llm_dlsyms_open(missing, 2, ok, 1, 0, small, sizeof small), -1);
    assert_int_equal(strlen(small), sizeof small - 1);
}

#ifdef LLM_NCCL
#include <nccl.h>

static void test_nccl_opens_and_forwards(void **state)
{
    (void)state;
    char err[600] = "";
    assert_int_equal(llm_nccl_probe(NULL, err, sizeof err), 0);
    assert_int_equal(llm_nccl_probe("libz.so.1", err, sizeof err), -1);
    assert_string_equal(err, "NCCL: libz.so.1 has no ncclGetVersion");
    assert_int_equal(llm_nccl_probe("libnccl-absent.so.2", err, sizeof err), -1);
    assert_non_null(strstr(err, "NCCL: cannot load libnccl-absent.so.2: "));
    assert_int_equal(llm_nccl_load(err, sizeof err), 0);
    int v = 0;
    assert_int_equal(ncclGetVersion(&v), ncclSuccess);
    assert_int_equal(v / 10000, NCCL_MAJOR);   /* 2.x codes: major*10000 + minor*100 + patch */
    assert_string_not_equal(ncclGetErrorString(ncclSuccess), "NCCL not loaded");
}
#else
static void test_nccl_opens_and_forwards(void **state)
{
    (void)state;
    char err[600] = "";
    assert_int_equal(llm_nccl_load(err, sizeof err), -1);
    assert_non_null(strstr(err, "this build has none"));
}
#endif

#if defined(LLM_CUDA) && !defined(LLM_CUDA_EMU)
#include <cublasLt.h>
#include "kernels/cuda/cuda_ext.h"

#define STR2(x) #x
#define STR(x) STR2(x)

/* which cuBLAS the program was loaded with: the headers' major version, and the file */
static void test_blas_info(void **state)
{
    (void)state;
    char info[600] = "";
    assert_int_equal(llm_cuda_blas_info(info, sizeof info), 0);
    static const char want[] = "cuBLAS " STR(CUBLAS_VER_MAJOR) ".";
    assert_true(strncmp(info, want, sizeof want - 1) == 0);
    assert_non_null(strstr(info, "/libcublasLt.so." STR(CUBLAS_VER_MAJOR) ")"));
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_dlsyms_resolves_and_reports),
        cmocka_unit_test(test_nccl_opens_and_forwards),
        cmocka_unit_test(test_blas_info),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
#else
static void test_cublas_not_this_build(void **state)
{
    (void)state;
    skip();   /* CUDA=0 links no cuBLAS; CUDA=emu links the emulator's stand-ins */
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_dlsyms_resolves_and_reports),
        cmocka_unit_test(test_nccl_opens_and_forwards),
        cmocka_unit_test(test_cublas_not_this_build),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
#endif
