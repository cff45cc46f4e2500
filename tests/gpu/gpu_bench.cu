/* gpu_bench.cu — cuBLASLt GEMM throughput for gpu_check --bench (fp32, TF32, bf16). */
#include <cuda_runtime.h>
#include <cuda_bf16.h>
#include <cublasLt.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

extern "C" {
#include "tests/gpu/gpu_check.h"
}

/* uniform(-1,1) from a hash of the index: random data without curand */
__global__ void gb_fill_f32(float *x, size_t n, unsigned seed)
{
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n;
         i += (size_t)gridDim.x * blockDim.x) {
        unsigned h = (unsigned)i * 2654435761u ^ seed;
        h ^= h >> 15; h *= 2246822519u; h ^= h >> 13; h *= 3266489917u; h ^= h >> 16;
        x[i] = (float)h * (2.0f / 4294967296.0f) - 1.0f;
    }
}

__global__ void gb_to_bf16(__nv_bfloat16 *y, const float *x, size_t n)
{
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n;
         i += (size_t)gridDim.x * blockDim.x)
        y[i] = __float2bfloat16(x[i]);
}

static int cmp_f(const void *a, const void *b)
{
    float x = *(const float *)a, y = *(const float *)b;
    return (x > y) - (x < y);
}

#define GB_CK(call) do { cudaError_t e_ = (call); if (e_ != cudaSuccess) { \
    snprintf(err, errlen, "%s: %s", #call, cudaGetErrorString(e_)); goto out; } } while (0)
#define GB_CKB(call) do { cublasStatus_t s_ = (call); if (s_ != CUBLAS_STATUS_SUCCESS) { \
    snprintf(err, errlen, "%s: %s", #call, cublasGetStatusString(s_)); goto out; } } while (0)

extern "C" int gpu_bench_gemm(int M, int N, int K, const char *mode, int reps, double *tflops,
                              char *err, size_t errlen)
{
    int bf = !strcmp(mode, "bf16"), tf = !strcmp(mode, "tf32");
    size_t esz = bf ? 2 : 4;
    size_t na = (size_t)M * K, nb = (size_t)K * N, nc = (size_t)M * N;
    const int SETS = 3;   /* rotate inputs so repeated runs do not just hit L2 */
    void *A[3] = {0}, *Bm[3] = {0}, *Cm = NULL, *ws = NULL;
    float *tmp = NULL, *times = NULL;
    size_t wsb = 32u << 20;
    cublasLtHandle_t lt = NULL;
    cublasLtMatmulDesc_t op = NULL;
    cublasLtMatrixLayout_t la = NULL, lb = NULL, lc = NULL;
    cublasLtMatmulPreference_t pref = NULL;
    cublasLtMatmulHeuristicResult_t res;
    int nres = 0, rc = -1;
    cudaEvent_t e0 = NULL, e1 = NULL;
    cudaDataType_t dt = bf ? CUDA_R_16BF : CUDA_R_32F;
    cublasComputeType_t ct = tf ? CUBLAS_COMPUTE_32F_FAST_TF32 : CUBLAS_COMPUTE_32F;
    cublasOperation_t tA = CUBLAS_OP_T, tB = CUBLAS_OP_N;
    const float alpha = 1.0f, beta = 0.0f;

    times = (float *)malloc(sizeof(float) * (reps > 0 ? reps : 1));
    if (!times) { snprintf(err, errlen, "out of memory"); goto out; }
    GB_CK(cudaMalloc((void **)&tmp, (na > nb ? na : nb) * sizeof(float)));
    for (int s = 0; s < SETS; s++) {
        GB_CK(cudaMalloc(&A[s], na * esz));
        GB_CK(cudaMalloc(&Bm[s], nb * esz));
        gb_fill_f32<<<1024, 256>>>(bf ? tmp : (float *)A[s], na, 17u + 2 * s);
        GB_CK(cudaGetLastError());
        if (bf) { gb_to_bf16<<<1024, 256>>>((__nv_bfloat16 *)A[s], tmp, na); GB_CK(cudaGetLastError()); }
        gb_fill_f32<<<1024, 256>>>(bf ? tmp : (float *)Bm[s], nb, 18u + 2 * s);
        GB_CK(cudaGetLastError());
        if (bf) { gb_to_bf16<<<1024, 256>>>((__nv_bfloat16 *)Bm[s], tmp, nb); GB_CK(cudaGetLastError()); }
    }
    GB_CK(cudaMalloc(&Cm, nc * esz));
    GB_CK(cudaMalloc(&ws, wsb));
    GB_CKB(cublasLtCreate(&lt));
    GB_CKB(cublasLtMatmulDescCreate(&op, ct, CUDA_R_32F));
    GB_CKB(cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_TRANSA, &tA, sizeof tA));
    GB_CKB(cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_TRANSB, &tB, sizeof tB));
    /* the layout of a weight-times-activation product: A stored (K,M), B (K,N), C (M,N) */
    GB_CKB(cublasLtMatrixLayoutCreate(&la, dt, K, M, K));
    GB_CKB(cublasLtMatrixLayoutCreate(&lb, dt, K, N, K));
    GB_CKB(cublasLtMatrixLayoutCreate(&lc, dt, M, N, M));
    GB_CKB(cublasLtMatmulPreferenceCreate(&pref));
    GB_CKB(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &wsb, sizeof wsb));
    GB_CKB(cublasLtMatmulAlgoGetHeuristic(lt, op, la, lb, lc, lc, pref, 1, &res, &nres));
    if (nres < 1) { snprintf(err, errlen, "no cuBLASLt algorithm for %s", mode); goto out; }
    GB_CK(cudaEventCreate(&e0));
    GB_CK(cudaEventCreate(&e1));
    for (int i = 0; i < 3; i++)
        GB_CKB(cublasLtMatmul(lt, op, &alpha, A[i % SETS], la, Bm[i % SETS], lb, &beta, Cm, lc, Cm, lc,
                              &res.algo, ws, wsb, 0));
    for (int i = 0; i < reps; i++) {
        GB_CK(cudaEventRecord(e0, 0));
        GB_CKB(cublasLtMatmul(lt, op, &alpha, A[i % SETS], la, Bm[i % SETS], lb, &beta, Cm, lc, Cm, lc,
                              &res.algo, ws, wsb, 0));
        GB_CK(cudaEventRecord(e1, 0));
        GB_CK(cudaEventSynchronize(e1));
        GB_CK(cudaEventElapsedTime(&times[i], e0, e1));
    }
    qsort(times, reps, sizeof *times, cmp_f);
    *tflops = 2.0 * M * N * K / (times[reps / 2] * 1e-3) / 1e12;
    rc = 0;
out:
    if (e0) cudaEventDestroy(e0);
    if (e1) cudaEventDestroy(e1);
    if (pref) cublasLtMatmulPreferenceDestroy(pref);
    if (la) cublasLtMatrixLayoutDestroy(la);
    if (lb) cublasLtMatrixLayoutDestroy(lb);
    if (lc) cublasLtMatrixLayoutDestroy(lc);
    if (op) cublasLtMatmulDescDestroy(op);
    if (lt) cublasLtDestroy(lt);
    for (int s = 0; s < SETS; s++) { if (A[s]) cudaFree(A[s]); if (Bm[s]) cudaFree(Bm[s]); }
    if (Cm) cudaFree(Cm);
    if (ws) cudaFree(ws);
    if (tmp) cudaFree(tmp);
    free(times);
    return rc;
}

/* ---- accuracy of the low-precision GEMM paths ---- */

static uint16_t gb_bf16_bits(float f)   /* round to nearest even (inputs are finite) */
{
    uint32_t u;
    memcpy(&u, &f, 4);
    u += 0x7fffu + ((u >> 16) & 1u);
    return (uint16_t)(u >> 16);
}

static float gb_bf16_value(uint16_t h)
{
    uint32_t u = (uint32_t)h << 16;
    float f;
    memcpy(&f, &u, 4);
    return f;
}

/* normwise ||d - r|| / ||r|| (the usual measure for low-precision GEMMs) */
static double gb_err(const float *d, const double *r, size_t n)
{
    double ss = 0, se = 0;
    for (size_t i = 0; i < n; i++) {
        if (!isfinite(d[i])) return INFINITY;
        ss += r[i] * r[i];
        se += (d[i] - r[i]) * (d[i] - r[i]);
    }
    return sqrt(se) / fmax(sqrt(ss), 1e-30);
}

extern "C" int gpu_gemm_lo_check(int M, int N, int K, const char *mode, unsigned seed,
                                 double *err_rounded, double *err_exact, char *err, size_t errlen)
{
    int bf = !strcmp(mode, "bf16");
    size_t na = (size_t)K * M, nb = (size_t)K * N, nd = (size_t)M * N;
    size_t esz = bf ? 2 : 4;
    float *ha = (float *)malloc(na * 4), *hb = (float *)malloc(nb * 4), *hd = (float *)malloc(nd * 4);
    float *hra = (float *)malloc(na * 4), *hrb = (float *)malloc(nb * 4);
    uint16_t *h16 = (uint16_t *)malloc((na > nb ? na : nb) * 2);
    double *r1 = (double *)malloc(nd * 8), *r2 = (double *)malloc(nd * 8);
    void *da = NULL, *db = NULL, *ws = NULL;
    float *dd = NULL;
    size_t wsb = 32u << 20;
    cublasLtHandle_t lt = NULL;
    cublasLtMatmulDesc_t op = NULL;
    cublasLtMatrixLayout_t la = NULL, lb = NULL, lc = NULL;
    cublasLtMatmulPreference_t pref = NULL;
    cublasLtMatmulHeuristicResult_t res;
    int nres = 0, rc = -1;
    cudaDataType_t dt = bf ? CUDA_R_16BF : CUDA_R_32F;
    cublasComputeType_t ct = bf ? CUBLAS_COMPUTE_32F : CUBLAS_COMPUTE_32F_FAST_TF32;
    cublasOperation_t tA = CUBLAS_OP_T, tB = CUBLAS_OP_N;
    const float alpha = 1.0f, beta = 0.0f;
    uint64_t s = seed * 0x9e3779b97f4a7c15ull + 1;

    if (!ha || !hb || !hd || !hra || !hrb || !h16 || !r1 || !r2) { snprintf(err, errlen, "out of memory"); goto out; }
    for (size_t i = 0; i < na + nb; i++) {
        s ^= s << 13; s ^= s >> 7; s ^= s << 17;
        float v = (float)((s >> 40) * (2.0 / 16777216.0) - 1.0);
        if (i < na) ha[i] = v; else hb[i - na] = v;
    }
    for (size_t i = 0; i < na; i++) hra[i] = bf ? gb_bf16_value(gb_bf16_bits(ha[i])) : ha[i];
    for (size_t i = 0; i < nb; i++) hrb[i] = bf ? gb_bf16_value(gb_bf16_bits(hb[i])) : hb[i];
    /* D(M,N) col-major: D[i + j M] = sum_k A[k + i K] B[k + j K] */
    for (int j = 0; j < N; j++)
        for (int i = 0; i < M; i++) {
            double x = 0, y = 0;
            for (int k = 0; k < K; k++) {
                x += (double)hra[k + (size_t)i * K] * hrb[k + (size_t)j * K];
                y += (double)ha[k + (size_t)i * K] * hb[k + (size_t)j * K];
            }
            r1[i + (size_t)j * M] = x;
            r2[i + (size_t)j * M] = y;
        }
    GB_CK(cudaMalloc(&da, na * esz));
    GB_CK(cudaMalloc(&db, nb * esz));
    GB_CK(cudaMalloc((void **)&dd, nd * 4));
    GB_CK(cudaMalloc(&ws, wsb));
    if (bf) {
        for (size_t i = 0; i < na; i++) h16[i] = gb_bf16_bits(ha[i]);
        GB_CK(cudaMemcpy(da, h16, na * 2, cudaMemcpyHostToDevice));
        for (size_t i = 0; i < nb; i++) h16[i] = gb_bf16_bits(hb[i]);
        GB_CK(cudaMemcpy(db, h16, nb * 2, cudaMemcpyHostToDevice));
    } else {
        GB_CK(cudaMemcpy(da, ha, na * 4, cudaMemcpyHostToDevice));
        GB_CK(cudaMemcpy(db, hb, nb * 4, cudaMemcpyHostToDevice));
    }
    GB_CKB(cublasLtCreate(&lt));
    GB_CKB(cublasLtMatmulDescCreate(&op, ct, CUDA_R_32F));
    GB_CKB(cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_TRANSA, &tA, sizeof tA));
    GB_CKB(cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_TRANSB, &tB, sizeof tB));
    GB_CKB(cublasLtMatrixLayoutCreate(&la, dt, K, M, K));
    GB_CKB(cublasLtMatrixLayoutCreate(&lb, dt, K, N, K));
    GB_CKB(cublasLtMatrixLayoutCreate(&lc, CUDA_R_32F, M, N, M));   /* fp32 output */
    GB_CKB(cublasLtMatmulPreferenceCreate(&pref));
    GB_CKB(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &wsb, sizeof wsb));
    GB_CKB(cublasLtMatmulAlgoGetHeuristic(lt, op, la, lb, lc, lc, pref, 1, &res, &nres));
    if (nres < 1) { snprintf(err, errlen, "no cuBLASLt algorithm for %s", mode); goto out; }
    GB_CKB(cublasLtMatmul(lt, op, &alpha, da, la, db, lb, &beta, dd, lc, dd, lc, &res.algo, ws, wsb, 0));
    GB_CK(cudaMemcpy(hd, dd, nd * 4, cudaMemcpyDeviceToHost));
    *err_rounded = gb_err(hd, r1, nd);
    *err_exact = gb_err(hd, r2, nd);
    rc = 0;
out:
    if (pref) cublasLtMatmulPreferenceDestroy(pref);
    if (la) cublasLtMatrixLayoutDestroy(la);
    if (lb) cublasLtMatrixLayoutDestroy(lb);
    if (lc) cublasLtMatrixLayoutDestroy(lc);
    if (op) cublasLtMatmulDescDestroy(op);
    if (lt) cublasLtDestroy(lt);
    if (da) cudaFree(da);
    if (db) cudaFree(db);
    if (dd) cudaFree(dd);
    if (ws) cudaFree(ws);
    free(ha); free(hb); free(hd); free(hra); free(hrb); free(h16); free(r1); free(r2);
    return rc;
}
