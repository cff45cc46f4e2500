/* test_emu_runtime.cpp — tests/emu's CUDA runtime and cuBLAS stand-ins refuse what the
 * real ones refuse (so the emulated backend fails where a GPU would), and compute what
 * cuBLAS's column-major conventions say. */
#include <cublasLt.h>
#include <cuda_runtime.h>

#include <math.h>
#include <stdlib.h>
#include <string.h>

extern "C" {
#include "tests/unit/testutil.h"
}

namespace {

void fill_kernel(float *p, int n, float v)
{
    int i = (int)(blockIdx.x * blockDim.x + threadIdx.x);
    if (i < n) p[i] = v + (float)i;
}

void smem_kernel(float *p)
{
    LC_DYN_SMEM(sm);
    float *s = (float *)sm;
    s[threadIdx.x] = (float)threadIdx.x;
    __syncthreads();
    p[threadIdx.x] = s[(threadIdx.x + 1) % blockDim.x];
}

void test_launch_checks(void **state)
{
    (void)state;
    float *d = nullptr;
    assert_int_equal(cudaMalloc((void **)&d, 2048 * sizeof(float)), cudaSuccess);
    assert_int_equal(cudaGetLastError(), cudaSuccess);
    emu_call("fill_kernel", [&](auto... a) { fill_kernel(a...); }, 4, 256)(d, 1000, 1.0f);
    assert_int_equal(cudaGetLastError(), cudaSuccess);
    for (int i = 0; i < 1000; i++) assert_true(d[i] == 1.0f + (float)i);
    /* too many threads, too many blocks in y: refused, nothing runs */
    d[0] = -1.0f;
    emu_call("fill_kernel", [&](auto... a) { fill_kernel(a...); }, 1, 1025)(d, 1000, 5.0f);
    assert_int_equal(cudaGetLastError(), cudaErrorInvalidConfiguration);
    assert_true(d[0] == -1.0f);
    emu_call("fill_kernel", [&](auto... a) { fill_kernel(a...); }, dim3(1, 65536), 32)(d, 1000, 5.0f);
    assert_int_equal(cudaGetLastError(), cudaErrorInvalidConfiguration);
    assert_int_equal(cudaGetLastError(), cudaSuccess);   /* read once, then cleared */
    /* dynamic shared memory beyond 48 KiB needs the opt-in, which stops at 227 KiB */
    size_t big = 64 * 1024;
    emu_call("smem_kernel", [&](auto... a) { smem_kernel(a...); }, 1, 64, big)(d);
    assert_int_equal(cudaGetLastError(), cudaErrorInvalidValue);
    assert_int_equal(cudaFuncSetAttribute(emu_named{"smem_kernel"},
                                          cudaFuncAttributeMaxDynamicSharedMemorySize, (int)big),
                     cudaSuccess);
    emu_call("smem_kernel", [&](auto... a) { smem_kernel(a...); }, 1, 64, big)(d);
    assert_int_equal(cudaGetLastError(), cudaSuccess);
    for (int i = 0; i < 64; i++) assert_true(d[i] == (float)((i + 1) % 64));
    assert_int_equal(cudaFuncSetAttribute(emu_named{"smem_kernel"},
                                          cudaFuncAttributeMaxDynamicSharedMemorySize, 228 * 1024),
                     cudaErrorInvalidValue);
    (void)cudaGetLastError();
    size_t fr0, fr1, tot;
    assert_int_equal(cudaMemGetInfo(&fr0, &tot), cudaSuccess);
    assert_int_equal(cudaFree(d), cudaSuccess);
    assert_int_equal(cudaMemGetInfo(&fr1, &tot), cudaSuccess);
    assert_true(fr1 == fr0 + 2048 * sizeof(float));
    int x;
    assert_int_equal(cudaFree(&x), cudaErrorInvalidValue);   /* not from cudaMalloc */
    (void)cudaGetLastError();
}

/* LLM_EMU_DEVICES=2: the current device is per thread, a stream belongs to the device
 * current when it was made (a launch on it with another device current fails), and the
 * shared-memory opt-in of a kernel is per device. */
void test_devices(void **state)
{
    (void)state;
    setenv("LLM_EMU_DEVICES", "2", 1);
    int n = 0, d0 = -1;
    assert_int_equal(cudaGetDeviceCount(&n), cudaSuccess);
    assert_int_equal(n, 2);
    assert_int_equal(cudaGetDevice(&d0), cudaSuccess);
    assert_int_equal(d0, 0);
    assert_int_equal(cudaSetDevice(2), cudaErrorInvalidDevice);
    (void)cudaGetLastError();
    float *d;
    assert_int_equal(cudaMalloc((void **)&d, 64 * sizeof(float)), cudaSuccess);
    cudaStream_t s0, s1;
    assert_int_equal(cudaStreamCreateWithFlags(&s0, cudaStreamNonBlocking), cudaSuccess);
    size_t big = 64 * 1024;
    assert_int_equal(cudaFuncSetAttribute(emu_named{"smem_kernel"},
                                          cudaFuncAttributeMaxDynamicSharedMemorySize, (int)big),
                     cudaSuccess);
    emu_call("smem_kernel", [&](auto... a) { smem_kernel(a...); }, 1, 64, big, s0)(d);
    assert_int_equal(cudaGetLastError(), cudaSuccess);
    /* device 1: no opt-in there yet */
    assert_int_equal(cudaSetDevice(1), cudaSuccess);
    int cur = -1;
    assert_int_equal(cudaGetDevice(&cur), cudaSuccess);
    assert_int_equal(cur, 1);
    assert_int_equal(cudaStreamCreateWithFlags(&s1, cudaStreamNonBlocking), cudaSuccess);
    emu_call("smem_kernel", [&](auto... a) { smem_kernel(a...); }, 1, 64, big, s1)(d);
    assert_int_equal(cudaGetLastError(), cudaErrorInvalidValue);
    /* a stream of device 0 while device 1 is current */
    emu_call("smem_kernel", [&](auto... a) { smem_kernel(a...); }, 1, 64, (size_t)0, s0)(d);
    assert_int_equal(cudaGetLastError(), cudaErrorInvalidResourceHandle);
    assert_int_equal(cudaFuncSetAttribute(emu_named{"smem_kernel"},
                                          cudaFuncAttributeMaxDynamicSharedMemorySize, (int)big),
                     cudaSuccess);
    emu_call("smem_kernel", [&](auto... a) { smem_kernel(a...); }, 1, 64, big, s1)(d);
    assert_int_equal(cudaGetLastError(), cudaSuccess);
    int mx = 0;
    assert_int_equal(cudaDeviceGetAttribute(&mx, cudaDevAttrMaxSharedMemoryPerBlockOptin, 1), cudaSuccess);
    assert_int_equal(mx, 227 * 1024);
    /* LLM_EMU_SMEM_OPTIN=99: an sm_86/sm_89's opt-in maximum, reported and enforced */
    setenv("LLM_EMU_SMEM_OPTIN", "99", 1);
    assert_int_equal(cudaDeviceGetAttribute(&mx, cudaDevAttrMaxSharedMemoryPerBlockOptin, 1), cudaSuccess);
    assert_int_equal(mx, 99 * 1024);
    assert_int_equal(cudaFuncSetAttribute(emu_named{"smem_kernel"},
                                          cudaFuncAttributeMaxDynamicSharedMemorySize, 100 * 1024),
                     cudaErrorInvalidValue);
    (void)cudaGetLastError();
    unsetenv("LLM_EMU_SMEM_OPTIN");
    assert_int_equal(cudaStreamDestroy(s1), cudaSuccess);
    assert_int_equal(cudaSetDevice(0), cudaSuccess);
    assert_int_equal(cudaStreamDestroy(s0), cudaSuccess);
    assert_int_equal(cudaFree(d), cudaSuccess);
    unsetenv("LLM_EMU_DEVICES");
    assert_int_equal(cudaGetDeviceCount(&n), cudaSuccess);
    assert_int_equal(n, 1);
}

/* C = alpha op(A) op(B) + beta C, column-major, against a plain loop */
void test_gemm_conventions(void **state)
{
    (void)state;
    cublasHandle_t h;
    assert_int_equal(cublasCreate(&h), CUBLAS_STATUS_SUCCESS);
    tu_rng r = {42};
    const int m = 5, n = 7, k = 3, lda = 9, ldb = 8, ldc = 6;
    for (int ta = 0; ta < 2; ta++)
        for (int tb = 0; tb < 2; tb++) {
            float A[9 * 9], B[8 * 8], C[6 * 7], C0[6 * 7];
            tu_fill(&r, A, 81, -1, 1);
            tu_fill(&r, B, 64, -1, 1);
            tu_fill(&r, C, 42, -1, 1);
            memcpy(C0, C, sizeof C);
            float alpha = 0.5f, beta = 2.0f;
            assert_int_equal(cublasSgemm(h, ta ? CUBLAS_OP_T : CUBLAS_OP_N, tb ? CUBLAS_OP_T : CUBLAS_OP_N,
                                         m, n, k, &alpha, A, lda, B, ldb, &beta, C, ldc),
                             CUBLAS_STATUS_SUCCESS);
            for (int i = 0; i < m; i++)
                for (int j = 0; j < n; j++) {
                    double s = 0;
                    for (int l = 0; l < k; l++)
                        s += (double)(ta ? A[l + i * lda] : A[i + l * lda]) *
                             (tb ? B[j + l * ldb] : B[l + j * ldb]);
                    double want = alpha * s + beta * C0[i + j * ldc];
                    assert_true(fabs(C[i + j * ldc] - want) <= 1e-5 * (1 + fabs(want)));
                }
            for (int j = 0; j < n; j++)   /* rows m..ldc-1 of C untouched */
                for (int i = m; i < ldc; i++) assert_true(C[i + j * ldc] == C0[i + j * ldc]);
        }
    /* beta 0: C is not read (NaN there stays out) */
    float A[4] = {1, 2, 3, 4}, B[4] = {1, 0, 0, 1}, C[4] = {NAN, NAN, NAN, NAN}, one = 1, zero = 0;
    assert_int_equal(cublasSgemm(h, CUBLAS_OP_N, CUBLAS_OP_N, 2, 2, 2, &one, A, 2, B, 2, &zero, C, 2),
                     CUBLAS_STATUS_SUCCESS);
    for (int i = 0; i < 4; i++) assert_true(C[i] == A[i]);
    /* a leading dimension smaller than the rows: refused */
    assert_int_equal(cublasSgemm(h, CUBLAS_OP_N, CUBLAS_OP_N, 3, 2, 2, &one, A, 2, B, 2, &zero, C, 3),
                     CUBLAS_STATUS_INVALID_VALUE);
    assert_int_equal(cublasSgemm(h, CUBLAS_OP_N, CUBLAS_OP_N, 2, 2, 2, &one, A, 2, B, 2, &zero, C, 1),
                     CUBLAS_STATUS_INVALID_VALUE);
    cublasDestroy(h);

    /* cuBLASLt: layouts that do not agree are refused; the bias adds to every column */
    cublasLtHandle_t lt;
    cublasLtMatmulDesc_t op;
    cublasLtMatrixLayout_t la, lb, lc, bad;
    assert_int_equal(cublasLtCreate(&lt), CUBLAS_STATUS_SUCCESS);
    assert_int_equal(cublasLtMatmulDescCreate(&op, CUBLAS_COMPUTE_32F, CUDA_R_32F), CUBLAS_STATUS_SUCCESS);
    cublasLtEpilogue_t epi = CUBLASLT_EPILOGUE_BIAS;
    float bias[2] = {10, 20};
    const float *bp = bias;
    assert_int_equal(cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_EPILOGUE, &epi, sizeof epi),
                     CUBLAS_STATUS_SUCCESS);
    assert_int_equal(cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &bp, sizeof bp),
                     CUBLAS_STATUS_SUCCESS);
    cublasLtMatrixLayoutCreate(&la, CUDA_R_32F, 2, 2, 2);
    cublasLtMatrixLayoutCreate(&lb, CUDA_R_32F, 2, 2, 2);
    cublasLtMatrixLayoutCreate(&lc, CUDA_R_32F, 2, 2, 2);
    cublasLtMatrixLayoutCreate(&bad, CUDA_R_32F, 3, 2, 3);
    float D[4];
    assert_int_equal(cublasLtMatmul(lt, op, &one, A, la, B, lb, &zero, D, lc, D, lc, nullptr, nullptr, 0, 0),
                     CUBLAS_STATUS_SUCCESS);
    for (int i = 0; i < 4; i++) assert_true(D[i] == A[i] + bias[i % 2]);
    assert_int_equal(cublasLtMatmul(lt, op, &one, A, la, B, lb, &zero, D, bad, D, bad, nullptr, nullptr, 0, 0),
                     CUBLAS_STATUS_INVALID_VALUE);
    cublasLtMatrixLayoutDestroy(la);
    cublasLtMatrixLayoutDestroy(lb);
    cublasLtMatrixLayoutDestroy(lc);
    cublasLtMatrixLayoutDestroy(bad);

    /* lo outputs: bf16 A, B, D and bias; D = bf16(a b + bias) rounded once.  a b =
     * (1 + 2^-7)(1 - 2^-8) = 1 + 2^-8 - 2^-15 rounds alone to 1 (0x3f80); with the bias
     * 2^-12 added first it passes the tie and rounds to 1 + 2^-7 (0x3f81). */
    uint16_t a16 = 0x3f81, b16 = 0x3f7f, bias16 = 0x3980, d16 = 0xffff;
    const uint16_t *bp16 = &bias16;
    cudaDataType_t bf = CUDA_R_16BF, f32 = CUDA_R_32F;
    assert_int_equal(cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &bp16, sizeof bp16),
                     CUBLAS_STATUS_SUCCESS);
    cublasLtMatrixLayoutCreate(&la, CUDA_R_16BF, 1, 1, 1);
    cublasLtMatrixLayoutCreate(&lb, CUDA_R_16BF, 1, 1, 1);
    cublasLtMatrixLayoutCreate(&lc, CUDA_R_16BF, 1, 1, 1);
    cublasLtMatmulPreference_t pref;
    cublasLtMatmulHeuristicResult_t res;
    int got = 0;
    cublasLtMatmulPreferenceCreate(&pref);
    /* a bias type other than D's: no algorithm, and the call is refused */
    assert_int_equal(cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE, &f32, sizeof f32),
                     CUBLAS_STATUS_SUCCESS);
    assert_int_not_equal(cublasLtMatmulAlgoGetHeuristic(lt, op, la, lb, lc, lc, pref, 1, &res, &got),
                         CUBLAS_STATUS_SUCCESS);
    assert_int_equal(got, 0);
    assert_int_not_equal(cublasLtMatmul(lt, op, &one, &a16, la, &b16, lb, &zero, &d16, lc, &d16, lc,
                                        nullptr, nullptr, 0, 0),
                         CUBLAS_STATUS_SUCCESS);
    assert_int_equal(d16, 0xffff);
    assert_int_equal(cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE, &bf, sizeof bf),
                     CUBLAS_STATUS_SUCCESS);
    assert_int_equal(cublasLtMatmulAlgoGetHeuristic(lt, op, la, lb, lc, lc, pref, 1, &res, &got),
                     CUBLAS_STATUS_SUCCESS);
    assert_int_equal(got, 1);
    assert_int_equal(cublasLtMatmul(lt, op, &one, &a16, la, &b16, lb, &zero, &d16, lc, &d16, lc,
                                    nullptr, nullptr, 0, 0),
                     CUBLAS_STATUS_SUCCESS);
    assert_int_equal(d16, 0x3f81);
    /* cublasGemmEx with a bf16 C, beta 0: C not read (NaN bits there), one rounding */
    cublasHandle_t h2;
    cublasCreate(&h2);
    d16 = 0x7fc1;
    assert_int_equal(cublasGemmEx(h2, CUBLAS_OP_N, CUBLAS_OP_N, 1, 1, 1, &one, &a16, CUDA_R_16BF, 1,
                                  &b16, CUDA_R_16BF, 1, &zero, &d16, CUDA_R_16BF, 1,
                                  CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT),
                     CUBLAS_STATUS_SUCCESS);
    assert_int_equal(d16, 0x3f80);
    cublasDestroy(h2);
    cublasLtMatmulPreferenceDestroy(pref);
    cublasLtMatrixLayoutDestroy(la);
    cublasLtMatrixLayoutDestroy(lb);
    cublasLtMatrixLayoutDestroy(lc);
    cublasLtMatmulDescDestroy(op);
    cublasLtDestroy(lt);
}

}  // namespace

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_launch_checks),
        cmocka_unit_test(test_devices),
        cmocka_unit_test(test_gemm_conventions),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
