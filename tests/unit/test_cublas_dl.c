/* test_cublas_dl.c — cuBLAS opened at run time (kernels/cuda/cublas_dl.c), CUDA=1 builds.
 * Needs the CUDA toolkit's libraries (the build's), not a GPU: cuBLASLt's layout
 * descriptors are host objects. */
#include <string.h>

#include "tests/unit/testutil.h"

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
    /* a short buffer is cut, not overrun */
    char small[8];
    memset(small, 'x', sizeof small);
    assert_int_equal(llm_cuda_blas_probe("absent.so", NULL, small, sizeof small), -1);
    assert_int_equal(strlen(small), sizeof small - 1);
}

static void test_calls_reach_the_library(void **state)
{
    (void)state;
    char err[600] = "";
    assert_int_equal(llm_cuda_blas_load(err, sizeof err), 0);
    assert_int_equal(llm_cuda_blas_load(NULL, 0), 0);   /* once per process */
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
        cmocka_unit_test(test_probe_finds_the_toolkit),
        cmocka_unit_test(test_probe_reports_a_missing_library),
        cmocka_unit_test(test_calls_reach_the_library),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
#else
static void test_not_this_build(void **state)
{
    (void)state;
    skip();   /* CUDA=0 links no cuBLAS; CUDA=emu links the emulator's stand-ins */
}

int main(void)
{
    const struct CMUnitTest tests[] = { cmocka_unit_test(test_not_this_build) };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
#endif
