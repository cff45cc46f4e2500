/* test_dlsyms.c — libraries opened at run time: common/dlsyms.c, and the cuBLAS
 * (kernels/cuda/cublas_dl.c, CUDA=1) and NCCL (common/nccl_dl.c, NCCL=1) tables built on
 * it.  They need the CUDA toolkit's libraries (the build's), not a GPU: cuBLASLt's layout
 * descriptors are host objects and ncclGetVersion asks no device. */
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
#include <cublas_v2.h>
#include "kernels/cuda/cublas_dl.h"
#include <dlfcn.h>

#define STR2(x) #x
#define STR(x) STR2(x)

static void test_probe_finds_the_toolkit(void **state)
{
    (void)state;
    char err[600] = "";
    assert_int_equal(llm_cuda_blas_probe(NULL, NULL, err, sizeof err), 0);
}

static void test_probe_reports_a_missing_library(void **state)
{
    (void)state;
    char err[600] = "";
    assert_int_equal(llm_cuda_blas_probe("libcublasLt-absent.so.99", NULL, err, sizeof err), -1);
    assert_non_null(strstr(err, "cuBLAS: cannot load libcublasLt-absent.so.99"));
    /* a library without the functions: named, with the first one missing */
    err[0] = 0;
    assert_int_equal(llm_cuda_blas_probe(NULL, "libz.so.1", err, sizeof err), -1);
    assert_non_null(strstr(err, "libz.so.1 has no cublasCreate_v2"));
}

static void test_calls_reach_the_library(void **state)
{
    (void)state;
    char err[600] = "";
    assert_int_equal(llm_cuda_blas_load(err, sizeof err), 0);
    assert_int_equal(llm_cuda_blas_load(NULL, 0), 0);   /* once per process */
    char info[600] = "";
    assert_int_equal(llm_cuda_blas_info(info, sizeof info), 0);
    static const char want[] = "cuBLAS " STR(CUBLAS_VER_MAJOR) ".";
    assert_true(strncmp(info, want, sizeof want - 1) == 0);
    assert_non_null(strstr(info, "/libcublasLt.so." STR(CUBLAS_VER_MAJOR) ")"));
    const char *s = cublasGetStatusString(CUBLAS_STATUS_SUCCESS);
    assert_non_null(s);
    assert_string_not_equal(s, "cuBLAS not loaded");
    /* a layout round trip through the forwarded functions: arguments arrive intact */
    cublasLtMatrixLayout_t l = NULL;
    assert_int_equal(cublasLtMatrixLayoutCreate(&l, CUDA_R_16BF, 768, 3072, 768),
                     CUBLAS_STATUS_SUCCESS);
    /* cublasLtMatrixLayoutGetAttribute is not forwarded (the backend does not use it):
     * take it from the library the shim opened (RTLD_NOLOAD: opened already, or fail) */
    void *h = dlopen("libcublasLt.so." STR(CUBLAS_VER_MAJOR), RTLD_NOW | RTLD_NOLOAD);
    assert_non_null(h);
    cublasStatus_t (*get)(cublasLtMatrixLayout_t, cublasLtMatrixLayoutAttribute_t, void *,
                          size_t, size_t *);
    void *sym = dlsym(h, "cublasLtMatrixLayoutGetAttribute");
    assert_non_null(sym);
    memcpy(&get, &sym, sizeof sym);
    uint64_t rows = 0, cols = 0;
    int64_t ld = 0;
    int32_t type = -1;
    size_t got = 0;
    assert_int_equal(get(l, CUBLASLT_MATRIX_LAYOUT_ROWS, &rows, sizeof rows, &got), 0);
    assert_int_equal(get(l, CUBLASLT_MATRIX_LAYOUT_COLS, &cols, sizeof cols, &got), 0);
    assert_int_equal(get(l, CUBLASLT_MATRIX_LAYOUT_LD, &ld, sizeof ld, &got), 0);
    assert_int_equal(get(l, CUBLASLT_MATRIX_LAYOUT_TYPE, &type, sizeof type, &got), 0);
    assert_int_equal(rows, 768);
    assert_int_equal(cols, 3072);
    assert_int_equal(ld, 768);
    assert_int_equal(type, CUDA_R_16BF);
    assert_int_equal(cublasLtMatrixLayoutDestroy(l), CUBLAS_STATUS_SUCCESS);
    dlclose(h);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_dlsyms_resolves_and_reports),
        cmocka_unit_test(test_nccl_opens_and_forwards),
        cmocka_unit_test(test_probe_finds_the_toolkit),
        cmocka_unit_test(test_probe_reports_a_missing_library),
        cmocka_unit_test(test_calls_reach_the_library),
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
