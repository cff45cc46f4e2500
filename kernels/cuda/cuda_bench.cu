/* cuda_bench.cu — llm-bench's GPU half: device facts, cuBLASLt GEMMs and memory bandwidth,
 * each timed with CUDA events and checked after timing (see cuda_ext.h). */
#include <cuda_runtime.h>
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cublasLt.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

extern "C" {
#include "kernels/cuda/cuda_ext.h"
}

#define LCB_WS_BYTES ((size_t)32 << 20)

/* ---- device choice: llm_cuda_select_device, as the backend (cuda_ext.h) ---- */

static int lcb_device(int *dev, char *err, size_t errlen)
{
    return llm_cuda_select_device(-1, dev, err, errlen);
}

extern "C" int llm_cuda_bench_devinfo(llm_cuda_devinfo *out, char *err, size_t errlen)
{
    memset(out, 0, sizeof *out);
    int dev, rc = lcb_device(&dev, err, errlen);
    if (rc) return rc;
    cudaDeviceProp p;
    int clk = 0, mclk = 0, bus = 0;
    /* clockRate and memoryClockRate left cudaDeviceProp in CUDA 13: ask for attributes */
    if (cudaGetDeviceProperties(&p, dev) != cudaSuccess ||
        cudaDeviceGetAttribute(&clk, cudaDevAttrClockRate, dev) != cudaSuccess ||
        cudaDeviceGetAttribute(&mclk, cudaDevAttrMemoryClockRate, dev) != cudaSuccess ||
        cudaDeviceGetAttribute(&bus, cudaDevAttrGlobalMemoryBusWidth, dev) != cudaSuccess) {
        cudaError_t e = cudaGetLastError();
        snprintf(err, errlen, "no CUDA device: device %d properties: %s", dev, cudaGetErrorString(e));
        return LLM_CUDA_ENODEV;
    }
    snprintf(out->name, sizeof out->name, "%.*s", (int)sizeof out->name - 1, p.name);
    out->device = dev;
    out->cc_major = p.major;
    out->cc_minor = p.minor;
    out->sm_count = p.multiProcessorCount;
    out->sm_clock_mhz = clk / 1000.0;
    out->mem_clock_mhz = mclk / 1000.0;
    out->bus_width_bits = bus;
    if (cudaMemGetInfo(&out->mem_free, &out->mem_total) != cudaSuccess) {
        (void)cudaGetLastError();
        out->mem_free = out->mem_total = 0;
    }
    return LLM_CUDA_OK;
}

/* ---- shared plumbing ---- */

/* A failed CUDA call: message, and the code it maps to (out of memory is its own). */
static int lcb_cuda_fail(cudaError_t e, const char *what, char *err, size_t errlen)
{
    (void)cudaGetLastError();
    snprintf(err, errlen, "%s: %s", what, cudaGetErrorString(e));
    return e == cudaErrorMemoryAllocation ? LLM_CUDA_ENOMEM : LLM_CUDA_EFAIL;
}

#define CK(call) do { cudaError_t e_ = (call); \
    if (e_ != cudaSuccess) { rc = lcb_cuda_fail(e_, #call, err, errlen); goto out; } } while (0)
#define CKL() CK(cudaGetLastError())

/* Times of reps repetitions of fn(ctx) after warmup untimed ones, one event pair around
 * each on stream s, read after the last one finished (no host sync in between). */
typedef int (*lcb_fn)(void *ctx, cudaStream_t s);

static int lcb_time(lcb_fn fn, void *ctx, cudaStream_t s, int warmup, int reps, double *times,
                    char *err, size_t errlen)
{
    int rc = LLM_CUDA_OK;
    cudaEvent_t *ev = (cudaEvent_t *)calloc(2 * (size_t)reps, sizeof *ev);
    int made = 0;
    if (!ev) { snprintf(err, errlen, "out of memory for %d event pairs", reps); return LLM_CUDA_ENOMEM; }
    for (; made < 2 * reps; made++) CK(cudaEventCreate(&ev[made]));
    for (int i = 0; i < warmup; i++)
        if ((rc = fn(ctx, s))) goto out;
    for (int i = 0; i < reps; i++) {
        CK(cudaEventRecord(ev[2 * i], s));
        if ((rc = fn(ctx, s))) goto out;
        CK(cudaEventRecord(ev[2 * i + 1], s));
    }
    CK(cudaEventSynchronize(ev[2 * reps - 1]));
    for (int i = 0; i < reps; i++) {
        float ms = 0;
        CK(cudaEventElapsedTime(&ms, ev[2 * i], ev[2 * i + 1]));
        times[i] = 1e-3 * ms;
    }
out:
    for (int i = 0; i < made; i++) cudaEventDestroy(ev[i]);
    free(ev);
    return rc;
}

/* ---- GEMM ---- */

/* uniform(-1,1) from a hash of the index and a seed (no curand needed) */
__device__ __forceinline__ float lcb_hash_unit(size_t i, unsigned seed)
{
    unsigned h = (unsigned)i * 2654435761u ^ (unsigned)(i >> 32) * 40503u ^ seed;
    h ^= h >> 15; h *= 2246822519u; h ^= h >> 13; h *= 3266489917u; h ^= h >> 16;
    return (float)(h >> 8) * (2.0f / 16777216.0f) - 1.0f;
}

template <typename T> __device__ __forceinline__ T lcb_from_float(float x);
template <> __device__ __forceinline__ float lcb_from_float<float>(float x) { return x; }
template <> __device__ __forceinline__ __nv_bfloat16 lcb_from_float<__nv_bfloat16>(float x) { return __float2bfloat16(x); }
template <> __device__ __forceinline__ __half lcb_from_float<__half>(float x) { return __float2half(x); }

__device__ __forceinline__ double lcb_to_double(float x) { return (double)x; }
__device__ __forceinline__ double lcb_to_double(__nv_bfloat16 x) { return (double)__bfloat162float(x); }
__device__ __forceinline__ double lcb_to_double(__half x) { return (double)__half2float(x); }

template <typename T>
__global__ void lcb_fill(T *x, size_t n, unsigned seed)
{
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x)
        x[i] = lcb_from_float<T>(lcb_hash_unit(i, seed));
}

/* o1[j] += sum_i w1[i] X[i,j] and (o2 != NULL) o2[j] += sum_i w2[i] X[i,j]^2 over rows
 * rows of the row-major X(rows,cols); w1/w2 NULL mean weights of 1.  Blocks: x over
 * columns (coalesced), y over chunks of 256 rows; fp64 atomics combine the chunks. */
template <typename T>
__global__ void lcb_colsums(const T *X, int rows, int cols, const double *w1, const double *w2,
                            double *o1, double *o2)
{
    int j = blockIdx.x * blockDim.x + threadIdx.x;
    if (j >= cols) return;
    int i0 = blockIdx.y * 256, i1 = min(rows, i0 + 256);
    double s1 = 0, s2 = 0;
    for (int i = i0; i < i1; i++) {
        double x = lcb_to_double(X[(size_t)i * cols + j]);
        s1 += (w1 ? w1[i] : 1.0) * x;
        s2 += (w2 ? w2[i] : 1.0) * x * x;
    }
    atomicAdd(&o1[j], s1);
    if (o2) atomicAdd(&o2[j], s2);
}

/* One block per sampled entry (ri[s], cj[s]): err[s] = |C - sum_k A B| / sqrt(sum_k (A B)^2). */
template <typename T>
__global__ void lcb_sample_check(const T *A, const T *B, const float *C, int N, int K,
                                 const int *ri, const int *cj, double *errs)
{
    __shared__ double sh[2][256];
    int i = ri[blockIdx.x], j = cj[blockIdx.x];
    double s = 0, q = 0;
    for (int k = threadIdx.x; k < K; k += blockDim.x) {
        double p = lcb_to_double(A[(size_t)i * K + k]) * lcb_to_double(B[(size_t)k * N + j]);
        s += p;
        q += p * p;
    }
    sh[0][threadIdx.x] = s;
    sh[1][threadIdx.x] = q;
    __syncthreads();
    for (int w = blockDim.x / 2; w > 0; w /= 2) {
        if ((int)threadIdx.x < w) {
            sh[0][threadIdx.x] += sh[0][threadIdx.x + w];
            sh[1][threadIdx.x] += sh[1][threadIdx.x + w];
        }
        __syncthreads();
    }
    if (threadIdx.x == 0) {
        double scale = sqrt(sh[1][0]);
        errs[blockIdx.x] = fabs((double)C[(size_t)i * N + j] - sh[0][0]) / (scale > 0 ? scale : 1e-300);
    }
}

typedef struct {
    cublasLtHandle_t lt;
    cublasLtMatmulDesc_t op;
    cublasLtMatrixLayout_t la, lb, ld;
    cublasLtMatmulAlgo_t algo;
    const void *A, *B;
    float *C;
    void *ws;
} lcb_gemm;

static int lcb_gemm_run(void *p, cudaStream_t s)
{
    lcb_gemm *g = (lcb_gemm *)p;
    const float alpha = 1.0f, beta = 0.0f;
    /* column-major view: C^T(N,M) = B^T(N,K) A^T(K,M), i.e. cuBLASLt's A is our B */
    cublasStatus_t st = cublasLtMatmul(g->lt, g->op, &alpha, g->B, g->lb, g->A, g->la, &beta, g->C,
                                       g->ld, g->C, g->ld, &g->algo, g->ws, LCB_WS_BYTES, s);
    return st == CUBLAS_STATUS_SUCCESS ? LLM_CUDA_OK : LLM_CUDA_EFAIL;
}

template <typename T>
static int lcb_gemm_check(const T *A, const T *B, const float *C, int M, int N, int K, cudaStream_t s,
                          double *worst, char *err, size_t errlen)
{
    enum { NS = 64 };
    int rc = LLM_CUDA_OK;
    double *d = NULL, *h = NULL;
    int *idx = NULL;
    int hi[2 * NS];
    double *sA, *qA, *r, *sc, *cs, *es;
    size_t nd = 2 * (size_t)K + 3 * (size_t)N + NS;
    /* the four corners, then pseudo-random entries */
    uint64_t x = 0x9e3779b97f4a7c15ull ^ ((uint64_t)M << 40) ^ ((uint64_t)N << 20) ^ (uint64_t)K;
    for (int q = 0; q < NS; q++) {
        x ^= x << 13; x ^= x >> 7; x ^= x << 17;
        hi[q] = q < 4 ? (q & 1 ? M - 1 : 0) : (int)(x % (uint64_t)M);
        hi[NS + q] = q < 4 ? (q & 2 ? N - 1 : 0) : (int)((x >> 32) % (uint64_t)N);
    }
    CK(cudaMalloc((void **)&d, nd * sizeof(double)));
    CK(cudaMalloc((void **)&idx, sizeof hi));
    CK(cudaMemcpyAsync(idx, hi, sizeof hi, cudaMemcpyHostToDevice, s));
    CK(cudaMemsetAsync(d, 0, nd * sizeof(double), s));
    sA = d; qA = sA + K; r = qA + K; sc = r + N; cs = sc + N; es = cs + N;
    {
        dim3 ga((K + 255) / 256, (M + 255) / 256), gb((N + 255) / 256, (K + 255) / 256),
            gc((N + 255) / 256, (M + 255) / 256);
        lcb_colsums<T><<<ga, 256, 0, s>>>(A, M, K, NULL, NULL, sA, qA);
        CKL();
        lcb_colsums<T><<<gb, 256, 0, s>>>(B, K, N, sA, qA, r, sc);
        CKL();
        lcb_colsums<float><<<gc, 256, 0, s>>>(C, M, N, NULL, NULL, cs, NULL);
        CKL();
        lcb_sample_check<T><<<NS, 256, 0, s>>>(A, B, C, N, K, idx, idx + NS, es);
        CKL();
    }
    h = (double *)malloc(3 * (size_t)N * sizeof(double) + NS * sizeof(double));
    if (!h) { snprintf(err, errlen, "out of memory for the gemm check"); rc = LLM_CUDA_ENOMEM; goto out; }
    CK(cudaMemcpyAsync(h, r, (3 * (size_t)N + NS) * sizeof(double), cudaMemcpyDeviceToHost, s));
    CK(cudaStreamSynchronize(s));
    {
        double w = 0;
        const double *hr = h, *hs = h + N, *hc = h + 2 * (size_t)N, *he = h + 3 * (size_t)N;
        for (int j = 0; j < N; j++) {
            double sq = sqrt(hs[j]);
            double e = fabs(hc[j] - hr[j]) / (sq > 0 ? sq : 1e-300);
            if (!(e <= w)) w = e;   /* NaN sticks */
            if (isnan(w)) break;
        }
        for (int q = 0; q < NS && !isnan(w); q++)
            if (!(he[q] <= w)) w = he[q];
        *worst = w;
    }
out:
    cudaFree(d);
    cudaFree(idx);
    free(h);
    return rc;
}

extern "C" int llm_cuda_bench_gemm(llm_cuda_gemm_args *a, char *err, size_t errlen)
{
    int M = a->M, N = a->N, K = a->K;
    a->check_err = NAN;
    a->check_bound = 0;
    a->algo[0] = 0;
    int dt;   /* 0 f32, 1 tf32, 2 bf16, 3 f16 */
    if (!strcmp(a->dtype, "f32")) dt = 0;
    else if (!strcmp(a->dtype, "tf32")) dt = 1;
    else if (!strcmp(a->dtype, "bf16")) dt = 2;
    else if (!strcmp(a->dtype, "f16")) dt = 3;
    else { snprintf(err, errlen, "dtype '%s': the cuda gemm knows f32, tf32, bf16, f16", a->dtype); return LLM_CUDA_EUNSUP; }
    if (M <= 0 || N <= 0 || K <= 0 || a->reps <= 0 || a->warmup < 0) {
        snprintf(err, errlen, "gemm %dx%dx%d, %d reps: sizes and reps must be positive", M, N, K, a->reps);
        return LLM_CUDA_EUNSUP;
    }
    int dev, rc = lcb_device(&dev, err, errlen);
    if (rc) return rc;
    size_t esz = dt >= 2 ? 2 : 4;
    cudaDataType_t io = dt == 2 ? CUDA_R_16BF : dt == 3 ? CUDA_R_16F : CUDA_R_32F;
    cublasComputeType_t ct = dt == 1 ? CUBLAS_COMPUTE_32F_FAST_TF32 : CUBLAS_COMPUTE_32F;
    cudaDataType_t sc = CUDA_R_32F;
    cublasOperation_t nt = CUBLAS_OP_N;
    lcb_gemm g;
    memset(&g, 0, sizeof g);
    cudaStream_t s = NULL;
    cublasLtMatmulPreference_t pref = NULL;
    cublasLtMatmulHeuristicResult_t res;
    int nres = 0;
    size_t wsb = LCB_WS_BYTES;
    void *A = NULL, *B = NULL;
    float *C = NULL;
    cublasStatus_t bs;

    CK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
    CK(cudaMalloc(&A, (size_t)M * K * esz));
    CK(cudaMalloc(&B, (size_t)K * N * esz));
    CK(cudaMalloc((void **)&C, (size_t)M * N * sizeof(float)));
    CK(cudaMalloc(&g.ws, wsb));
    if (esz == 4) {
        lcb_fill<float><<<1024, 256, 0, s>>>((float *)A, (size_t)M * K, 17u);
        lcb_fill<float><<<1024, 256, 0, s>>>((float *)B, (size_t)K * N, 18u);
    } else if (dt == 2) {
        lcb_fill<__nv_bfloat16><<<1024, 256, 0, s>>>((__nv_bfloat16 *)A, (size_t)M * K, 17u);
        lcb_fill<__nv_bfloat16><<<1024, 256, 0, s>>>((__nv_bfloat16 *)B, (size_t)K * N, 18u);
    } else {
        lcb_fill<__half><<<1024, 256, 0, s>>>((__half *)A, (size_t)M * K, 17u);
        lcb_fill<__half><<<1024, 256, 0, s>>>((__half *)B, (size_t)K * N, 18u);
    }
    CKL();
    CK(cudaMemsetAsync(C, 0, (size_t)M * N * sizeof(float), s));

#define CKB(call) do { bs = (call); if (bs != CUBLAS_STATUS_SUCCESS) { \
    snprintf(err, errlen, "%s: %s", #call, cublasGetStatusString(bs)); \
    rc = bs == CUBLAS_STATUS_ALLOC_FAILED ? LLM_CUDA_ENOMEM : LLM_CUDA_EFAIL; goto out; } } while (0)
    CKB(cublasLtCreate(&g.lt));
    CKB(cublasLtMatmulDescCreate(&g.op, ct, sc));
    CKB(cublasLtMatmulDescSetAttribute(g.op, CUBLASLT_MATMUL_DESC_TRANSA, &nt, sizeof nt));
    CKB(cublasLtMatmulDescSetAttribute(g.op, CUBLASLT_MATMUL_DESC_TRANSB, &nt, sizeof nt));
    /* column-major layouts of the row-major operands: B as (N,K) ld N, A as (K,M) ld K,
     * C as (N,M) ld N */
    CKB(cublasLtMatrixLayoutCreate(&g.lb, io, N, K, N));
    CKB(cublasLtMatrixLayoutCreate(&g.la, io, K, M, K));
    CKB(cublasLtMatrixLayoutCreate(&g.ld, CUDA_R_32F, N, M, N));
    CKB(cublasLtMatmulPreferenceCreate(&pref));
    CKB(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &wsb, sizeof wsb));
    bs = cublasLtMatmulAlgoGetHeuristic(g.lt, g.op, g.lb, g.la, g.ld, g.ld, pref, 1, &res, &nres);
    if (bs != CUBLAS_STATUS_SUCCESS || nres < 1) {
        snprintf(err, errlen, "cuBLASLt has no %s algorithm for %dx%dx%d on this device (%s)", a->dtype, M, N,
                 K, bs != CUBLAS_STATUS_SUCCESS ? cublasGetStatusString(bs) : "no heuristic result");
        rc = LLM_CUDA_EUNSUP;
        goto out;
    }
#undef CKB
    g.algo = res.algo;
    g.A = A;
    g.B = B;
    g.C = C;
    snprintf(a->algo, sizeof a->algo, "cublasLt heuristic #0, %zu MiB ws", res.workspaceSize >> 20);
    if ((rc = lcb_time(lcb_gemm_run, &g, s, a->warmup, a->reps, a->times, err, errlen))) {
        if (rc == LLM_CUDA_EFAIL && !err[0]) snprintf(err, errlen, "cublasLtMatmul failed");
        goto out;
    }
    /* the check runs on a fresh output: NaN first, so a GEMM that writes nothing fails */
    CK(cudaMemsetAsync(C, 0xff, (size_t)M * N * sizeof(float), s));
    if ((rc = lcb_gemm_run(&g, s))) { snprintf(err, errlen, "cublasLtMatmul failed"); goto out; }
    if (esz == 4) rc = lcb_gemm_check<float>((const float *)A, (const float *)B, C, M, N, K, s, &a->check_err, err, errlen);
    else if (dt == 2) rc = lcb_gemm_check<__nv_bfloat16>((const __nv_bfloat16 *)A, (const __nv_bfloat16 *)B, C, M, N, K, s, &a->check_err, err, errlen);
    else rc = lcb_gemm_check<__half>((const __half *)A, (const __half *)B, C, M, N, K, s, &a->check_err, err, errlen);
    if (rc) goto out;
    a->check_bound = dt == 1 ? 1e-2 : 1e-3;
    if (!(a->check_err <= a->check_bound)) {
        snprintf(err, errlen, "gemm %dx%dx%d %s: output check failed: normalised error %.3g > %.3g", M, N, K,
                 a->dtype, a->check_err, a->check_bound);
        rc = LLM_CUDA_EWRONG;
    }
out:
    if (s) cudaStreamSynchronize(s);
    if (pref) cublasLtMatmulPreferenceDestroy(pref);
    if (g.ld) cublasLtMatrixLayoutDestroy(g.ld);
    if (g.la) cublasLtMatrixLayoutDestroy(g.la);
    if (g.lb) cublasLtMatrixLayoutDestroy(g.lb);
    if (g.op) cublasLtMatmulDescDestroy(g.op);
    if (g.lt) cublasLtDestroy(g.lt);
    cudaFree(A);
    cudaFree(B);
    cudaFree(C);
    cudaFree(g.ws);
    if (s) cudaStreamDestroy(s);
    return rc;
}

/* ---- memory bandwidth ---- */

/* exact small values: b[i] and c[i], so b + 3c is exact in fp32 however it is rounded */
__host__ __device__ __forceinline__ float lcb_pat_b(size_t i) { return (float)(i % 1021) * 0.25f; }
__host__ __device__ __forceinline__ float lcb_pat_c(size_t i) { return (float)(i % 509) * 0.5f - 64.0f; }

__global__ void lcb_fill_pat(float *b, float *c, size_t n)
{
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x) {
        if (b) b[i] = lcb_pat_b(i);
        if (c) c[i] = lcb_pat_c(i);
    }
}

__global__ void lcb_copy_k(float *__restrict__ a, const float *__restrict__ b, size_t n)
{
    size_t n4 = n / 4, stride = (size_t)gridDim.x * blockDim.x;
    float4 *a4 = (float4 *)a;
    const float4 *b4 = (const float4 *)b;
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n4; i += stride) a4[i] = b4[i];
    for (size_t i = 4 * n4 + blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += stride) a[i] = b[i];
}

__global__ void lcb_triad_k(float *__restrict__ a, const float *__restrict__ b, const float *__restrict__ c,
                            float s, size_t n)
{
    size_t n4 = n / 4, stride = (size_t)gridDim.x * blockDim.x;
    float4 *a4 = (float4 *)a;
    const float4 *b4 = (const float4 *)b, *c4 = (const float4 *)c;
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n4; i += stride) {
        float4 x = b4[i], y = c4[i];
        a4[i] = make_float4(x.x + s * y.x, x.y + s * y.y, x.z + s * y.z, x.w + s * y.w);
    }
    for (size_t i = 4 * n4 + blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += stride)
        a[i] = b[i] + s * c[i];
}

/* *bad += the entries of a that differ from b (triad: from b + 3c), recomputed here */
__global__ void lcb_mem_check(const float *a, int triad, size_t n, unsigned long long *bad)
{
    unsigned long long k = 0;
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x) {
        float want = triad ? lcb_pat_b(i) + 3.0f * lcb_pat_c(i) : lcb_pat_b(i);
        if (!(a[i] == want)) k++;
    }
    if (k) atomicAdd(bad, k);
}

typedef struct {
    int op;   /* 0 copy, 1 memcpy, 2 triad, 3 h2d, 4 d2h */
    float *a, *b, *c, *host;
    size_t n;
    unsigned blocks;
} lcb_mem;

static int lcb_mem_run(void *p, cudaStream_t s)
{
    lcb_mem *m = (lcb_mem *)p;
    size_t bytes = m->n * sizeof(float);
    cudaError_t e = cudaSuccess;
    switch (m->op) {
    case 0: lcb_copy_k<<<m->blocks, 256, 0, s>>>(m->a, m->b, m->n); e = cudaGetLastError(); break;
    case 1: e = cudaMemcpyAsync(m->a, m->b, bytes, cudaMemcpyDeviceToDevice, s); break;
    case 2: lcb_triad_k<<<m->blocks, 256, 0, s>>>(m->a, m->b, m->c, 3.0f, m->n); e = cudaGetLastError(); break;
    case 3: e = cudaMemcpyAsync(m->a, m->host, bytes, cudaMemcpyHostToDevice, s); break;
    default: e = cudaMemcpyAsync(m->host, m->b, bytes, cudaMemcpyDeviceToHost, s); break;
    }
    return e == cudaSuccess ? LLM_CUDA_OK : LLM_CUDA_EFAIL;
}

extern "C" int llm_cuda_bench_mem(llm_cuda_mem_args *a, char *err, size_t errlen)
{
    static const char *names[] = {"copy", "memcpy", "triad", "h2d", "d2h"};
    int op = -1;
    for (int i = 0; i < 5; i++)
        if (!strcmp(a->op, names[i])) op = i;
    a->mismatches = -1;
    if (op < 0) { snprintf(err, errlen, "mem op '%s': the cuda mem knows copy, memcpy, triad, h2d, d2h", a->op); return LLM_CUDA_EUNSUP; }
    if (a->bytes < 4 || a->reps <= 0 || a->warmup < 0) {
        snprintf(err, errlen, "mem: need at least 4 bytes and 1 rep");
        return LLM_CUDA_EUNSUP;
    }
    int dev, rc = lcb_device(&dev, err, errlen);
    if (rc) return rc;
    lcb_mem m;
    memset(&m, 0, sizeof m);
    m.op = op;
    m.n = a->bytes / sizeof(float);
    size_t bytes = m.n * sizeof(float);
    cudaStream_t s = NULL;
    unsigned long long *bad = NULL, hbad = 0;
    int sms = 0;
    CK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev));
    /* enough resident blocks to saturate the memory system, then grid-stride */
    m.blocks = (unsigned)(sms > 0 ? sms * 8 : 1024);
    CK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
    CK(cudaMalloc((void **)&bad, sizeof *bad));
    if (op != 4) CK(cudaMalloc((void **)&m.a, bytes));
    if (op != 3) CK(cudaMalloc((void **)&m.b, bytes));
    if (op == 2) CK(cudaMalloc((void **)&m.c, bytes));
    if (op >= 3) {
        CK(cudaHostAlloc((void **)&m.host, bytes, cudaHostAllocDefault));
        if (op == 3)
            for (size_t i = 0; i < m.n; i++) m.host[i] = lcb_pat_b(i);
    }
    if (op != 3) {
        lcb_fill_pat<<<m.blocks, 256, 0, s>>>(m.b, m.c, m.n);
        CKL();
    }
    if ((rc = lcb_time(lcb_mem_run, &m, s, a->warmup, a->reps, a->times, err, errlen))) {
        if (rc == LLM_CUDA_EFAIL && !err[0]) snprintf(err, errlen, "mem op '%s' failed", a->op);
        goto out;
    }
    /* poison the destination, run once more, compare every element */
    if (op == 4) memset(m.host, 0xff, bytes);
    else CK(cudaMemsetAsync(m.a, 0xff, bytes, s));
    if ((rc = lcb_mem_run(&m, s))) { snprintf(err, errlen, "mem op '%s' failed", a->op); goto out; }
    if (op == 4) {
        CK(cudaStreamSynchronize(s));
        long long k = 0;
        for (size_t i = 0; i < m.n; i++) k += !(m.host[i] == lcb_pat_b(i));
        a->mismatches = k;
    } else {
        CK(cudaMemsetAsync(bad, 0, sizeof *bad, s));
        lcb_mem_check<<<m.blocks, 256, 0, s>>>(m.a, op == 2, m.n, bad);
        CKL();
        CK(cudaMemcpyAsync(&hbad, bad, sizeof hbad, cudaMemcpyDeviceToHost, s));
        CK(cudaStreamSynchronize(s));
        a->mismatches = (long long)hbad;
    }
    if (a->mismatches) {
        snprintf(err, errlen, "mem op '%s', %zu bytes: output check failed: %lld of %zu floats wrong", a->op, bytes,
                 a->mismatches, m.n);
        rc = LLM_CUDA_EWRONG;
    }
out:
    if (s) cudaStreamSynchronize(s);
    cudaFree(bad);
    cudaFree(m.a);
    cudaFree(m.b);
    cudaFree(m.c);
    if (m.host) cudaFreeHost(m.host);
    if (s) cudaStreamDestroy(s);
    return rc;
}
