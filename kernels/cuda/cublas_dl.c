/* cublas_dl.c — cuBLAS and cuBLASLt, opened when the CUDA backend first needs them.
 *
 * Linked at load time, libcublasLt costs every program that links the CUDA backend about
 * 200 MB of resident memory and 60 ms at exec, on the CPU paths too, and a program would
 * not start at all on a node without the CUDA toolkit.  The programs therefore do not
 * link cuBLAS: this file defines the cuBLAS functions the backend calls (the signatures
 * are the headers' own, so the compiler checks every one) and forwards each to the
 * library, opened with dlopen on the first call.  The library directory comes from the
 * usual dlopen search: LD_LIBRARY_PATH, then the program's run path ($(CUDA_HOME)/lib64
 * from the link), then the system's.  Built with CUDA=1 only; the emulator (CUDA=emu)
 * has its own stand-ins.
 */
#include <dlfcn.h>
#include <stdio.h>
#include <string.h>

#include <cublasLt.h>
#include <cublas_v2.h>

#include "common/dlsyms.h"
#include "kernels/cuda/cublas_dl.h"

#define LC_STR2(x) #x
#define LC_STR(x) LC_STR2(x)
#define LC_LT_NAME "libcublasLt.so." LC_STR(CUBLAS_VER_MAJOR)
#define LC_BLAS_NAME "libcublas.so." LC_STR(CUBLAS_VER_MAJOR)

/* X(library, return type, name, (parameters), (arguments)): every function used. */
#define LC_BLAS_FUNCS(X)                                                                      \
    X(lt, cublasStatus_t, cublasLtCreate, (cublasLtHandle_t *h), (h))                         \
    X(lt, cublasStatus_t, cublasLtDestroy, (cublasLtHandle_t h), (h))                         \
    X(lt, cublasStatus_t, cublasLtMatmul,                                                     \
      (cublasLtHandle_t h, cublasLtMatmulDesc_t desc, const void *alpha, const void *A,       \
       cublasLtMatrixLayout_t Adesc, const void *B, cublasLtMatrixLayout_t Bdesc,             \
       const void *beta, const void *C, cublasLtMatrixLayout_t Cdesc, void *D,                \
       cublasLtMatrixLayout_t Ddesc, const cublasLtMatmulAlgo_t *algo, void *ws,              \
       size_t ws_bytes, cudaStream_t stream),                                                 \
      (h, desc, alpha, A, Adesc, B, Bdesc, beta, C, Cdesc, D, Ddesc, algo, ws, ws_bytes,      \
       stream))                                                                               \
    X(lt, cublasStatus_t, cublasLtMatmulAlgoGetHeuristic,                                     \
      (cublasLtHandle_t h, cublasLtMatmulDesc_t desc, cublasLtMatrixLayout_t Adesc,           \
       cublasLtMatrixLayout_t Bdesc, cublasLtMatrixLayout_t Cdesc,                            \
       cublasLtMatrixLayout_t Ddesc, cublasLtMatmulPreference_t pref, int requested,          \
       cublasLtMatmulHeuristicResult_t results[], int *returned),                             \
      (h, desc, Adesc, Bdesc, Cdesc, Ddesc, pref, requested, results, returned))              \
    X(lt, cublasStatus_t, cublasLtMatmulDescCreate,                                           \
      (cublasLtMatmulDesc_t *d, cublasComputeType_t ct, cudaDataType_t st), (d, ct, st))      \
    X(lt, cublasStatus_t, cublasLtMatmulDescDestroy, (cublasLtMatmulDesc_t d), (d))           \
    X(lt, cublasStatus_t, cublasLtMatmulDescSetAttribute,                                     \
      (cublasLtMatmulDesc_t d, cublasLtMatmulDescAttributes_t a, const void *buf, size_t n),  \
      (d, a, buf, n))                                                                         \
    X(lt, cublasStatus_t, cublasLtMatmulPreferenceCreate, (cublasLtMatmulPreference_t *p),    \
      (p))                                                                                    \
    X(lt, cublasStatus_t, cublasLtMatmulPreferenceDestroy, (cublasLtMatmulPreference_t p),    \
      (p))                                                                                    \
    X(lt, cublasStatus_t, cublasLtMatmulPreferenceSetAttribute,                               \
      (cublasLtMatmulPreference_t p, cublasLtMatmulPreferenceAttributes_t a, const void *buf, \
       size_t n),                                                                             \
      (p, a, buf, n))                                                                         \
    X(lt, cublasStatus_t, cublasLtMatrixLayoutCreate,                                         \
      (cublasLtMatrixLayout_t *l, cudaDataType t, uint64_t rows, uint64_t cols, int64_t ld),  \
      (l, t, rows, cols, ld))                                                                 \
    X(lt, cublasStatus_t, cublasLtMatrixLayoutDestroy, (cublasLtMatrixLayout_t l), (l))       \
    X(blas, cublasStatus_t, cublasCreate_v2, (cublasHandle_t *h), (h))                        \
    X(blas, cublasStatus_t, cublasDestroy_v2, (cublasHandle_t h), (h))                        \
    X(blas, cublasStatus_t, cublasSetStream_v2, (cublasHandle_t h, cudaStream_t s), (h, s))   \
    X(blas, cublasStatus_t, cublasSetWorkspace_v2, (cublasHandle_t h, void *ws, size_t n),    \
      (h, ws, n))                                                                             \
    X(blas, cublasStatus_t, cublasSetMathMode, (cublasHandle_t h, cublasMath_t m), (h, m))    \
    X(blas, cublasStatus_t, cublasSgemm_v2,                                                   \
      (cublasHandle_t h, cublasOperation_t ta, cublasOperation_t tb, int m, int n, int k,     \
       const float *alpha, const float *A, int lda, const float *B, int ldb,                  \
       const float *beta, float *C, int ldc),                                                 \
      (h, ta, tb, m, n, k, alpha, A, lda, B, ldb, beta, C, ldc))                              \
    X(blas, cublasStatus_t, cublasSgemmStridedBatched,                                        \
      (cublasHandle_t h, cublasOperation_t ta, cublasOperation_t tb, int m, int n, int k,     \
       const float *alpha, const float *A, int lda, long long int sA, const float *B,         \
       int ldb, long long int sB, const float *beta, float *C, int ldc, long long int sC,     \
       int batch),                                                                            \
      (h, ta, tb, m, n, k, alpha, A, lda, sA, B, ldb, sB, beta, C, ldc, sC, batch))           \
    X(blas, cublasStatus_t, cublasSgemv_v2,                                                   \
      (cublasHandle_t h, cublasOperation_t t, int m, int n, const float *alpha,               \
       const float *A, int lda, const float *x, int incx, const float *beta, float *y,        \
       int incy),                                                                             \
      (h, t, m, n, alpha, A, lda, x, incx, beta, y, incy))                                    \
    X(blas, cublasStatus_t, cublasGemmEx,                                                     \
      (cublasHandle_t h, cublasOperation_t ta, cublasOperation_t tb, int m, int n, int k,     \
       const void *alpha, const void *A, cudaDataType At, int lda, const void *B,             \
       cudaDataType Bt, int ldb, const void *beta, void *C, cudaDataType Ct, int ldc,         \
       cublasComputeType_t ct, cublasGemmAlgo_t algo),                                        \
      (h, ta, tb, m, n, k, alpha, A, At, lda, B, Bt, ldb, beta, C, Ct, ldc, ct, algo))        \
    X(blas, cublasStatus_t, cublasGemmStridedBatchedEx,                                       \
      (cublasHandle_t h, cublasOperation_t ta, cublasOperation_t tb, int m, int n, int k,     \
       const void *alpha, const void *A, cudaDataType At, int lda, long long int sA,          \
       const void *B, cudaDataType Bt, int ldb, long long int sB, const void *beta, void *C,  \
       cudaDataType Ct, int ldc, long long int sC, int batch, cublasComputeType_t ct,         \
       cublasGemmAlgo_t algo),                                                                \
      (h, ta, tb, m, n, k, alpha, A, At, lda, sA, B, Bt, ldb, sB, beta, C, Ct, ldc, sC,       \
       batch, ct, algo))

typedef struct {
#define LC_PTR(lib, R, name, params, args) R (*name) params;
    LC_BLAS_FUNCS(LC_PTR)
#undef LC_PTR
    const char *(*cublasGetStatusString)(cublasStatus_t);
    size_t (*cublasLtGetVersion)(void);
} lc_blas_fns;

static lc_blas_fns lc_fn;
static llm_dlonce lc_state = LLM_DLONCE_INIT;   /* loaded: every pointer in lc_fn is set */

/* Open both libraries and resolve every function into *fn (common/dlsyms.h). */
static int lc_blas_open(const char *lt_name, const char *blas_name, lc_blas_fns *fn, int keep,
                        char *why, size_t whylen)
{
    const char *const libs[2] = { lt_name, blas_name };
#define LC_IDX_lt 0
#define LC_IDX_blas 1
#define LC_ENTRY(lib, R, name, params, args) { LC_IDX_##lib, #name, &fn->name },
    const llm_dlsym syms[] = {
        LC_BLAS_FUNCS(LC_ENTRY)
        { LC_IDX_blas, "cublasGetStatusString", &fn->cublasGetStatusString },
        { LC_IDX_lt, "cublasLtGetVersion", &fn->cublasLtGetVersion },
    };
#undef LC_ENTRY
    return llm_dlsyms_open(libs, 2, syms, (int)(sizeof syms / sizeof *syms), keep, why, whylen);
}

static void lc_load(void)
{
    lc_state.loaded = lc_blas_open(LC_LT_NAME, LC_BLAS_NAME, &lc_fn, 1, lc_state.why,
                                   sizeof lc_state.why) == 0;
}

static int lc_ready(void)
{
    pthread_once(&lc_state.once, lc_load);
    return lc_state.loaded;
}

int llm_cuda_blas_load(char *err, size_t errlen)
{
    return llm_dlsyms_status(lc_ready(), "cuBLAS", lc_state.why, err, errlen);
}

int llm_cuda_blas_probe(const char *lt_name, const char *blas_name, char *err, size_t errlen)
{
    lc_blas_fns fn;
    char why[512];
    int ok = lc_blas_open(lt_name ? lt_name : LC_LT_NAME, blas_name ? blas_name : LC_BLAS_NAME,
                          &fn, 0, why, sizeof why) == 0;
    return llm_dlsyms_status(ok, "cuBLAS", why, err, errlen);
}

int llm_cuda_blas_info(char *buf, size_t n)
{
    if (!lc_ready())
        return llm_dlsyms_status(0, "cuBLAS", lc_state.why, buf, n);
    Dl_info di;
    void *f;
    memcpy(&f, &lc_fn.cublasLtMatmul, sizeof f);
    const char *path = dladdr(f, &di) && di.dli_fname ? di.dli_fname : LC_LT_NAME;
    size_t v = lc_fn.cublasLtGetVersion();   /* major*10000 + minor*100 + patch */
    snprintf(buf, n, "cuBLAS %zu.%zu.%zu (%s)", v / 10000, v / 100 % 100, v % 100, path);
    return 0;
}

/* The forwarding definitions.  Before a successful load every one fails as cuBLAS does
 * when it has not been initialised. */
#define LC_DEF(lib, R, name, params, args)                                                    \
    LLM_DLSYMS_FORWARD(lc_ready, lc_fn, CUBLAS_STATUS_NOT_INITIALIZED, R, name, params, args)
LC_BLAS_FUNCS(LC_DEF)
#undef LC_DEF

const char *cublasGetStatusString(cublasStatus_t status)
{
    return lc_ready() ? lc_fn.cublasGetStatusString(status) : "cuBLAS not loaded";
}
