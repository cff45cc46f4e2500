/* cublas_v2.h for tests/emu: the cuBLAS calls the backend makes, computed on the CPU by
 * tests/emu/cublas_emu.cpp with cuBLAS's column-major conventions and argument checks
 * (a leading dimension too small, a negative size: CUBLAS_STATUS_INVALID_VALUE). */
#ifndef LLM_EMU_CUBLAS_V2_H
#define LLM_EMU_CUBLAS_V2_H

#include <cuda_runtime.h>

typedef enum {
    CUBLAS_STATUS_SUCCESS = 0,
    CUBLAS_STATUS_NOT_INITIALIZED = 1,
    CUBLAS_STATUS_ALLOC_FAILED = 3,
    CUBLAS_STATUS_INVALID_VALUE = 7,
    CUBLAS_STATUS_EXECUTION_FAILED = 13,
    CUBLAS_STATUS_NOT_SUPPORTED = 15,
} cublasStatus_t;
typedef enum { CUBLAS_OP_N = 0, CUBLAS_OP_T = 1 } cublasOperation_t;
typedef enum { CUBLAS_DEFAULT_MATH = 0, CUBLAS_TF32_TENSOR_OP_MATH = 3 } cublasMath_t;
typedef enum { CUBLAS_COMPUTE_32F = 68, CUBLAS_COMPUTE_32F_FAST_TF32 = 77 } cublasComputeType_t;
typedef enum { CUBLAS_GEMM_DEFAULT = -1 } cublasGemmAlgo_t;
typedef enum { CUDA_R_32F = 0, CUDA_R_16F = 2, CUDA_R_16BF = 14 } cudaDataType_t;
typedef struct emu_cublas *cublasHandle_t;

const char *cublasGetStatusString(cublasStatus_t s);
cublasStatus_t cublasCreate(cublasHandle_t *h);
cublasStatus_t cublasDestroy(cublasHandle_t h);
cublasStatus_t cublasSetStream(cublasHandle_t h, cudaStream_t s);
cublasStatus_t cublasSetWorkspace(cublasHandle_t h, void *ws, size_t bytes);
cublasStatus_t cublasSetMathMode(cublasHandle_t h, cublasMath_t m);
cublasStatus_t cublasSgemm(cublasHandle_t h, cublasOperation_t ta, cublasOperation_t tb, int m,
                           int n, int k, const float *alpha, const float *A, int lda,
                           const float *B, int ldb, const float *beta, float *C, int ldc);
cublasStatus_t cublasSgemmStridedBatched(cublasHandle_t h, cublasOperation_t ta,
                                         cublasOperation_t tb, int m, int n, int k,
                                         const float *alpha, const float *A, int lda,
                                         long long sA, const float *B, int ldb, long long sB,
                                         const float *beta, float *C, int ldc, long long sC,
                                         int batch);
cublasStatus_t cublasSgemv(cublasHandle_t h, cublasOperation_t t, int m, int n,
                           const float *alpha, const float *A, int lda, const float *x,
                           int incx, const float *beta, float *y, int incy);
cublasStatus_t cublasGemmEx(cublasHandle_t h, cublasOperation_t ta, cublasOperation_t tb, int m,
                            int n, int k, const void *alpha, const void *A, cudaDataType_t at,
                            int lda, const void *B, cudaDataType_t bt, int ldb, const void *beta,
                            void *C, cudaDataType_t ct, int ldc, cublasComputeType_t comp,
                            cublasGemmAlgo_t algo);
cublasStatus_t cublasGemmStridedBatchedEx(cublasHandle_t h, cublasOperation_t ta,
                                          cublasOperation_t tb, int m, int n, int k,
                                          const void *alpha, const void *A, cudaDataType_t at,
                                          int lda, long long sA, const void *B,
                                          cudaDataType_t bt, int ldb, long long sB,
                                          const void *beta, void *C, cudaDataType_t ct, int ldc,
                                          long long sC, int batch, cublasComputeType_t comp,
                                          cublasGemmAlgo_t algo);

/* the CPU GEMM behind all of them (column-major; A, B, C of the given types, C fp32 or the
 * type given; beta 0: C is not read) */
cublasStatus_t emu_gemm(cublasOperation_t ta, cublasOperation_t tb, int m, int n, int k,
                        float alpha, const void *A, cudaDataType_t at, int lda, long long sA,
                        const void *B, cudaDataType_t bt, int ldb, long long sB, float beta,
                        void *C, cudaDataType_t ct, int ldc, long long sC, int batch,
                        const void *bias, cudaDataType_t biast, int tf32);

#endif
