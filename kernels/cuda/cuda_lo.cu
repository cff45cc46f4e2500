/* cuda_lo.cu — mixed precision (backend.h: cast_lo, matmul_forward_lo,
 * matmul_backward_lo, matmul_forward_gelu_lo, matmul_backward_dgelu_lo): lo (bf16/fp16)
 * operands, fp32 accumulate, fp32 or lo outputs.
 *
 * The GEMMs run through cuBLASLt with A/B lo as the caller holds them (no conversion
 * pass: the model keeps its activations and output gradients in lo), C/D fp32 or lo,
 * CUBLAS_COMPUTE_32F: tensor cores multiply the lo operands exactly and accumulate in
 * fp32; a lo D is the fp32 result (bias included: cuBLASLt's bias epilogue adds it
 * before the conversion, and requires the bias in D's type) rounded once.  A plan
 * (descriptors + algorithm) is cached per GEMM shape, types and alignments; when
 * cuBLASLt has no algorithm or refuses a call, cublasGemmEx with the same types computes
 * it instead (with a lo output and a bias: into fp32 scratch, then one kernel adds the
 * bias and rounds, so the output is still rounded once).
 *
 * The fused GELU GEMMs use cuBLASLt's GELU_AUX(_BIAS) epilogue (D = GELU(acc + bias),
 * aux = acc + bias, both in D's type) and DGELU (D = gelu'(aux) * acc): the aux matrix
 * (pre) has D's shape and type, its leading dimension (OC resp. C, the row-major row)
 * a multiple of 8, its pointer 16-byte aligned.  cuBLASLt evaluates the GELU (tanh
 * form) its own way, which may differ from lc_gelu by an fp32 ulp or two before the
 * rounding.  When the shape or alignment does not allow the epilogue, or cuBLASLt has no
 * algorithm for it, the GEMM writes the fp32 sum to scratch and one kernel applies the
 * bias and the GELU (or its derivative) and rounds: the contract's result, one more pass
 * over memory.  lo_gelu_runs counts the two paths. */
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/cuda/cuda_internal.h"
#include "kernels/cuda/cuda_lo.cuh"
extern "C" {
#include "kernels/cuda/cuda_ext.h"
}

#define LC_LO_PLANS 32

/* The epilogues beyond the bias: GELU_AUX(_BIAS) writing the pre-activation to aux, and
 * DGELU reading it from there (aux: D's shape, type and leading dimension). */
enum { LC_EPI_NONE = 0, LC_EPI_GELU = 1, LC_EPI_DGELU = 2 };

struct lc_lo_plan {
    int used;
    /* key */
    int lo, ct, ta, tb, m, n, k, lda, ldb, ldc, bias;   /* ct: C/D (and bias) dtype */
    int epi;                       /* LC_EPI_*: none (bias or not), GELU with aux, DGELU */
    uint32_t al_a, al_b, al_c, al_aux;
    /* value */
    int have_algo;                 /* 0: cuBLASLt found none, use cublasGemmEx */
    cublasLtMatmulDesc_t op;
    cublasLtMatrixLayout_t la, lb, ld;
    cublasLtMatmulAlgo_t algo;
};

template <int LO>
__global__ void lc_cast_kernel(uint16_t *dst, const float *src, size_t n)
{
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n;
         i += (size_t)gridDim.x * blockDim.x)
        dst[i] = LO == LC_DT_BF16 ? lc_to_bf16(src[i]) : lc_to_f16(src[i]);
}

static int lc_lo_ok(lc_ctx *c, int lo, const char *op)
{
    if (lo == LC_DT_BF16 || lo == LC_DT_F16) return 1;
    lc_fail_cuda(c, cudaErrorInvalidValue, op, __FILE__, __LINE__);
    return 0;
}

/* cast_lo: dst(n) lo = round(src(n)) */
static void lc_cast_lo(llm_backend *be, void *dst, const float *src, size_t n, int lo)
{
    lc_ctx *c = lc_get(be);
    if (!lc_lo_ok(c, lo, "cast_lo: lo is neither bf16 nor f16") || !n) return;
    unsigned nb = lc_blocks(n, 256, 65535u * 4);
    if (lo == LC_DT_BF16)
        lc_cast_kernel<LC_DT_BF16><<<nb, 256, 0, c->stream>>>((uint16_t *)dst, src, n);
    else
        lc_cast_kernel<LC_DT_F16><<<nb, 256, 0, c->stream>>>((uint16_t *)dst, src, n);
    LC_LAUNCHED(c);
}

/* Grow-only lo buffer i of at least bytes, or NULL after recording an error.  Growing
 * frees the old block (cudaFree waits for the work queued on it). */
extern "C" void *lc_lo_buf(lc_ctx *c, int i, size_t bytes)
{
    if (lc_recording(c, "lo buffer (a grow-only buffer)")) return NULL;   /* as lc_scratch */
    if (c->lo_bytes[i] >= bytes && c->lo_buf[i]) return c->lo_buf[i];
    if (c->lo_buf[i]) LC_CK(c, lc_dfree(c, c->lo_buf[i]));
    c->lo_buf[i] = NULL;
    c->lo_bytes[i] = 0;
    size_t want = bytes + bytes / 8;
    if (LC_CK(c, lc_dmalloc(c, &c->lo_buf[i], want))) { c->lo_buf[i] = NULL; return NULL; }
    c->lo_bytes[i] = want;
    return c->lo_buf[i];
}

/* ---- GEMM plans ---- */

static uint32_t lc_lo_align(const void *p)
{
    uintptr_t a = (uintptr_t)p;
    return (a % 16 == 0) ? 16 : (a % 8 == 0) ? 8 : (a % 4 == 0) ? 4 : 2;
}

static cudaDataType_t lc_cuda_type(int dt)
{
    return dt == LC_DT_F32 ? CUDA_R_32F : dt == LC_DT_BF16 ? CUDA_R_16BF : CUDA_R_16F;
}

static void lc_plan_destroy(struct lc_lo_plan *p)
{
    if (p->ld) cublasLtMatrixLayoutDestroy(p->ld);
    if (p->lb) cublasLtMatrixLayoutDestroy(p->lb);
    if (p->la) cublasLtMatrixLayoutDestroy(p->la);
    if (p->op) cublasLtMatmulDescDestroy(p->op);
    memset(p, 0, sizeof *p);
}

extern "C" void lc_lo_release(lc_ctx *c)
{
    if (c->lo_plans) {
        for (int i = 0; i < LC_LO_PLANS; i++) lc_plan_destroy(&c->lo_plans[i]);
        free(c->lo_plans);
        c->lo_plans = NULL;
    }
    for (int i = 0; i < LC_LO_BUFS; i++) {
        if (c->lo_buf[i]) lc_dfree(c, c->lo_buf[i]);
        c->lo_buf[i] = NULL;
        c->lo_bytes[i] = 0;
    }
}

/* Descriptors and the heuristic's first algorithm for key k (in the row-major terms of
 * lc_lo_gemm); p->have_algo = 0 when cuBLASLt offers none.  -1 when the host is out of
 * memory for descriptors (the caller falls back). */
static int lc_plan_build(lc_ctx *c, struct lc_lo_plan *p, const void *bias, const void *aux)
{
    cudaDataType_t t = lc_cuda_type(p->lo), f = lc_cuda_type(p->ct);
    /* Column-major view (see lc_gemm_rm): D(n x m) = op(B') op(A') with Lt's "A" the
     * row-major B and Lt's "B" the row-major A, transposes unchanged. */
    cublasOperation_t tA = p->tb ? CUBLAS_OP_T : CUBLAS_OP_N, tB = p->ta ? CUBLAS_OP_T : CUBLAS_OP_N;
    cublasLtEpilogue_t epi = p->bias ? CUBLASLT_EPILOGUE_BIAS : CUBLASLT_EPILOGUE_DEFAULT;
    if (p->epi == LC_EPI_GELU)
        epi = p->bias ? CUBLASLT_EPILOGUE_GELU_AUX_BIAS : CUBLASLT_EPILOGUE_GELU_AUX;
    else if (p->epi == LC_EPI_DGELU)
        epi = CUBLASLT_EPILOGUE_DGELU;
    int64_t ldaux = p->ldc;   /* aux is laid out as D */
    cudaDataType_t bias_t = f;   /* cuBLASLt: the bias has D's type */
    size_t ws = c->ws_bytes;
    cublasLtMatmulPreference_t pref = NULL;
    cublasLtMatmulHeuristicResult_t res;
    int nres = 0;
    p->have_algo = 0;
    if (cublasLtMatmulDescCreate(&p->op, CUBLAS_COMPUTE_32F, CUDA_R_32F) ||
        cublasLtMatmulDescSetAttribute(p->op, CUBLASLT_MATMUL_DESC_TRANSA, &tA, sizeof tA) ||
        cublasLtMatmulDescSetAttribute(p->op, CUBLASLT_MATMUL_DESC_TRANSB, &tB, sizeof tB) ||
        cublasLtMatmulDescSetAttribute(p->op, CUBLASLT_MATMUL_DESC_EPILOGUE, &epi, sizeof epi) ||
        (p->bias && (cublasLtMatmulDescSetAttribute(p->op, CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE,
                                                    &bias_t, sizeof bias_t) ||
                     cublasLtMatmulDescSetAttribute(p->op, CUBLASLT_MATMUL_DESC_BIAS_POINTER,
                                                    &bias, sizeof bias))) ||
        /* the heuristic reads the aux pointer's alignment from its value */
        (p->epi != LC_EPI_NONE &&
         (cublasLtMatmulDescSetAttribute(p->op, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_POINTER,
                                         &aux, sizeof aux) ||
          cublasLtMatmulDescSetAttribute(p->op, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_LD,
                                         &ldaux, sizeof ldaux))))
        return -1;
    if (cublasLtMatrixLayoutCreate(&p->la, t, p->tb ? p->k : p->n, p->tb ? p->n : p->k, p->ldb) ||
        cublasLtMatrixLayoutCreate(&p->lb, t, p->ta ? p->m : p->k, p->ta ? p->k : p->m, p->lda) ||
        cublasLtMatrixLayoutCreate(&p->ld, f, p->n, p->m, p->ldc))
        return -1;
    if (cublasLtMatmulPreferenceCreate(&pref)) return -1;
    if (!cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &ws, sizeof ws) &&
        !cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, &p->al_b, sizeof p->al_b) &&
        !cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES, &p->al_a, sizeof p->al_a) &&
        !cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, &p->al_c, sizeof p->al_c) &&
        !cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES, &p->al_c, sizeof p->al_c) &&
        !cublasLtMatmulAlgoGetHeuristic(c->lt, p->op, p->la, p->lb, p->ld, p->ld, pref, 1, &res, &nres) &&
        nres >= 1) {
        p->algo = res.algo;
        p->have_algo = 1;
    }
    cublasLtMatmulPreferenceDestroy(pref);
    return 0;
}

/* The cached plan for this key, built on a miss (evicting round-robin when full), or
 * NULL when none could be built. */
static struct lc_lo_plan *lc_plan_get(lc_ctx *c, const struct lc_lo_plan *key,
                                      const void *bias, const void *aux)
{
    if (!c->lo_plans) {
        c->lo_plans = (struct lc_lo_plan *)calloc(LC_LO_PLANS, sizeof *c->lo_plans);
        if (!c->lo_plans) return NULL;
    }
    struct lc_lo_plan *slot = NULL;
    for (int i = 0; i < LC_LO_PLANS; i++) {
        struct lc_lo_plan *p = &c->lo_plans[i];
        if (!p->used) { if (!slot) slot = p; continue; }
        if (p->lo == key->lo && p->ct == key->ct && p->ta == key->ta && p->tb == key->tb &&
            p->m == key->m && p->n == key->n && p->k == key->k && p->lda == key->lda &&
            p->ldb == key->ldb && p->ldc == key->ldc && p->bias == key->bias &&
            p->epi == key->epi && p->al_a == key->al_a && p->al_b == key->al_b &&
            p->al_c == key->al_c && p->al_aux == key->al_aux)
            return p;
    }
    if (!slot) {
        slot = &c->lo_plans[c->lo_next++ % LC_LO_PLANS];
        lc_plan_destroy(slot);
    }
    *slot = *key;
    slot->op = NULL;
    slot->la = slot->lb = slot->ld = NULL;
    if (lc_plan_build(c, slot, bias, aux)) { lc_plan_destroy(slot); return NULL; }
    slot->used = 1;
    return slot;
}

/* out(rows, OC) of dtype OD = src + bias (bias of dtype BD, or NULL: 0) with src fp32
 * (NULL: 0); one rounding for a lo out.  src may alias out when OD is fp32.  gout
 * non-NULL (matmul_forward_gelu_lo's fallback): gout (dtype OD too) = gelu of the same
 * fp32 value, rounded once. */
template <int OD, int BD>
__global__ void lc_lo_bias_kernel(void *out, const float *src, const void *bias, size_t rows,
                                  int OC, void *gout)
{
    size_t total = rows * (size_t)OC;
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < total;
         i += (size_t)gridDim.x * blockDim.x) {
        float v = src ? src[i] : 0.0f;
        if (bias) v += lc_ld<BD>(bias, i % OC);
        lc_st<OD>(out, i, v);
        if (gout) lc_st<OD>(gout, i, lc_gelu(v));
    }
}

/* the kernel above for a run-time dtype dt of out, gout and bias (bias has out's dtype) */
static void lc_bias_launch(lc_ctx *c, int dt, void *out, const float *src, const void *bias,
                           size_t rows, int OC, void *gout = NULL)
{
    unsigned nb = lc_blocks(rows * (size_t)OC, 256, 65535);
    if (dt == LC_DT_F32)
        lc_lo_bias_kernel<LC_DT_F32, LC_DT_F32><<<nb, 256, 0, c->stream>>>(out, src, bias, rows, OC, gout);
    else if (dt == LC_DT_BF16)
        lc_lo_bias_kernel<LC_DT_BF16, LC_DT_BF16><<<nb, 256, 0, c->stream>>>(out, src, bias, rows, OC, gout);
    else
        lc_lo_bias_kernel<LC_DT_F16, LC_DT_F16><<<nb, 256, 0, c->stream>>>(out, src, bias, rows, OC, gout);
    LC_LAUNCHED(c);
}

/* Row-major C(m x n, ldc) of dtype ct = op(A) op(B) + beta C [+ bias(n) on every row,
 * bias of dtype ct] through cuBLASLt with epilogue epi (LC_EPI_*; aux: the GELU's
 * pre-activation, laid out as C), A and B lo (ta/tb: stored transposed), fp32
 * accumulate.  1 when cuBLASLt ran it, 0 when it has no plan or refused the call
 * (nothing was written then: it validates before it launches). */
static int lc_lt_gemm(lc_ctx *c, int lo, int ta, int tb, int m, int n, int k,
                      const void *A, int lda, const void *B, int ldb, float beta,
                      void *C, int ct, int ldc, const void *bias, int epi, const void *aux)
{
    const float alpha = 1.0f;
    if (c->lo_force_ex || c->lt_off) return 0;
    struct lc_lo_plan key;
    memset(&key, 0, sizeof key);
    key.lo = lo; key.ct = ct; key.ta = ta; key.tb = tb; key.m = m; key.n = n; key.k = k;
    key.lda = lda; key.ldb = ldb; key.ldc = ldc; key.bias = bias != NULL; key.epi = epi;
    key.al_a = lc_lo_align(A); key.al_b = lc_lo_align(B); key.al_c = lc_lo_align(C);
    key.al_aux = aux ? lc_lo_align(aux) : 0;
    struct lc_lo_plan *p = lc_plan_get(c, &key, bias, aux);
    return p && p->have_algo &&
           (!bias || !cublasLtMatmulDescSetAttribute(p->op, CUBLASLT_MATMUL_DESC_BIAS_POINTER,
                                                     &bias, sizeof bias)) &&
           (!aux || !cublasLtMatmulDescSetAttribute(p->op, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_POINTER,
                                                    &aux, sizeof aux)) &&
           cublasLtMatmul(c->lt, p->op, &alpha, B, p->la, A, p->lb, &beta, C, p->ld, C, p->ld,
                          &p->algo, c->lt_ws, c->ws_bytes, c->stream) == CUBLAS_STATUS_SUCCESS;
}

/* Row-major C(m x n, ldc) of dtype ct = op(A) op(B) + beta C [+ bias(n) on every row,
 * bias of dtype ct], A and B lo (ta/tb: stored transposed), fp32 accumulate; a lo C is
 * rounded once (beta must then be 0, and ldc == n when there is a bias). */
static void lc_lo_gemm(lc_ctx *c, int lo, int ta, int tb, int m, int n, int k,
                       const void *A, int lda, const void *B, int ldb, float beta,
                       void *C, int ct, int ldc, const void *bias)
{
    const float alpha = 1.0f, zero = 0.0f;
    if (lc_lt_gemm(c, lo, ta, tb, m, n, k, A, lda, B, ldb, beta, C, ct, ldc, bias, LC_EPI_NONE,
                   NULL)) {
        c->lo_runs[0]++;
        return;
    }
    /* cuBLASLt validates before it launches: nothing was written, compute it here */
    cudaDataType_t t = lc_cuda_type(lo);
    if (bias && ct != LC_DT_F32) {
        /* the fp32 product into scratch, then out = lo(product + bias): one rounding */
        float *s = (float *)lc_scratch(c, (size_t)m * n * sizeof(float));
        if (!s ||
            LC_CKB(c, cublasGemmEx(c->blas, tb ? CUBLAS_OP_T : CUBLAS_OP_N, ta ? CUBLAS_OP_T : CUBLAS_OP_N,
                                   n, m, k, &alpha, B, t, ldb, A, t, lda, &zero, s, CUDA_R_32F, n,
                                   CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT)))
            return;
        c->lo_runs[1]++;
        lc_bias_launch(c, ct, C, s, bias, (size_t)m, n);
        return;
    }
    if (LC_CKB(c, cublasGemmEx(c->blas, tb ? CUBLAS_OP_T : CUBLAS_OP_N, ta ? CUBLAS_OP_T : CUBLAS_OP_N,
                               n, m, k, &alpha, B, t, ldb, A, t, lda, &beta, C, lc_cuda_type(ct), ldc,
                               CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT)))
        return;
    c->lo_runs[1]++;
    if (bias) lc_bias_launch(c, LC_DT_F32, C, (const float *)C, bias, (size_t)m, n);
}

/* ---- the ops ---- */

static int lc_dt_ok(lc_ctx *c, int dt, int lo, const char *op)
{
    if (dt == LC_DT_F32 || dt == lo) return 1;
    lc_fail_cuda(c, cudaErrorInvalidValue, op, __FILE__, __LINE__);
    return 0;
}

static void lc_matmul_forward_lo(llm_backend *be, void *out, int out_dt, const void *inp,
                                 const void *w_lo, int lo, const void *bias, int N, int C, int OC)
{
    lc_ctx *c = lc_get(be);
    if (!lc_lo_ok(c, lo, "matmul_forward_lo: lo is neither bf16 nor f16") ||
        !lc_dt_ok(c, out_dt, lo, "matmul_forward_lo: out_dt is neither f32 nor lo"))
        return;
    if (N <= 0 || OC <= 0) return;
    if (C <= 0) {   /* empty sum: out = bias or 0 */
        lc_bias_launch(c, out_dt, out, NULL, bias, (size_t)N, OC);
        return;
    }
    /* out(N,OC) = inp(N,C) w(OC,C)^T + bias */
    lc_lo_gemm(c, lo, 0, 1, N, OC, C, inp, C, w_lo, C, 0.0f, out, out_dt, OC, bias);
}

/* Column sums of lo(dout)(N,OC) added to dbias, in an order fixed by N and OC alone:
 * blocks of 32 columns x rows_per rows write partial sums (8 row-strided threads per
 * column, combined in order), then one thread per column adds the partials in order. */
template <typename T>
__global__ void lc_colsum_part_kernel(float *part, const T *x, int N, int OC, int rows_per)
{
    __shared__ float sh[8][33];
    int col = blockIdx.x * 32 + threadIdx.x;
    int r0 = blockIdx.y * rows_per, r1 = min(N, r0 + rows_per);
    float s = 0.0f;
    if (col < OC)
        for (int r = r0 + (int)threadIdx.y; r < r1; r += 8) s += (float)x[(size_t)r * OC + col];
    sh[threadIdx.y][threadIdx.x] = s;
    __syncthreads();
    if (threadIdx.y == 0 && col < OC) {
        float t = sh[0][threadIdx.x];
        for (int i = 1; i < 8; i++) t += sh[i][threadIdx.x];
        part[(size_t)blockIdx.y * OC + col] = t;
    }
}

__global__ void lc_colsum_final_kernel(float *dbias, const float *part, int R, int OC)
{
    for (int col = blockIdx.x * blockDim.x + threadIdx.x; col < OC; col += gridDim.x * blockDim.x) {
        float s = 0.0f;
        for (int r = 0; r < R; r++) s += part[(size_t)r * OC + col];
        dbias[col] += s;
    }
}

static void lc_dbias_lo(lc_ctx *c, float *dbias, const void *dlo, int lo, int N, int OC)
{
    int R = (N + 63) / 64;
    if (R > 1024) R = 1024;
    int rows_per = (N + R - 1) / R;
    float *part = (float *)lc_scratch(c, (size_t)R * OC * sizeof(float));
    if (!part) return;
    dim3 grid((unsigned)((OC + 31) / 32), (unsigned)R), block(32, 8);
    if (lo == LC_DT_BF16)
        lc_colsum_part_kernel<<<grid, block, 0, c->stream>>>(part, (const __nv_bfloat16 *)dlo, N, OC, rows_per);
    else
        lc_colsum_part_kernel<<<grid, block, 0, c->stream>>>(part, (const __half *)dlo, N, OC, rows_per);
    if (LC_LAUNCHED(c)) return;
    lc_colsum_final_kernel<<<lc_blocks((size_t)OC, 256, 4096), 256, 0, c->stream>>>(dbias, part, R, OC);
    LC_LAUNCHED(c);
}

/* dw(OC,C) += dout(N,OC)^T @ inp(N,C) and dbias += column sums of dout (NULL: none), the
 * weight-side half of both backward GEMM ops */
static void lc_wgrad_lo(lc_ctx *c, float *dw, float *dbias, const void *dout, const void *inp,
                        int lo, int N, int C, int OC)
{
    if (C > 0) lc_lo_gemm(c, lo, 1, 0, OC, C, N, dout, OC, inp, C, 1.0f, dw, LC_DT_F32, C, NULL);
    if (dbias) lc_dbias_lo(c, dbias, dout, lo, N, OC);
}

static void lc_matmul_backward_lo(llm_backend *be, void *dinp, int dinp_dt, float *dw,
                                  float *dbias, const void *dout, const void *inp,
                                  const void *w_lo, int lo, int N, int C, int OC)
{
    lc_ctx *c = lc_get(be);
    if (!lc_lo_ok(c, lo, "matmul_backward_lo: lo is neither bf16 nor f16") ||
        !lc_dt_ok(c, dinp_dt, lo, "matmul_backward_lo: dinp_dt is neither f32 nor lo"))
        return;
    if (N <= 0 || C < 0 || OC < 0) return;
    if (OC == 0) {   /* dinp is an empty sum: overwritten with zeros (+0 in every dtype) */
        if (C > 0)
            LC_CK(c, cudaMemsetAsync(dinp, 0, (size_t)N * C * (dinp_dt == LC_DT_F32 ? 4 : 2),
                                     c->stream));
        return;
    }
    /* dinp(N,C) = dout(N,OC) @ w(OC,C) */
    if (C > 0) lc_lo_gemm(c, lo, 0, 0, N, C, OC, dout, OC, w_lo, C, 0.0f, dinp, dinp_dt, C, NULL);
    lc_wgrad_lo(c, dw, dbias, dout, inp, lo, N, C, OC);
}

/* ---- the fused GELU GEMMs ---- */

/* Whether cuBLASLt's GELU epilogues can take aux = pre with leading dimension ld (its
 * row-major row): a multiple of 8, the pointer 16-byte aligned. */
static int lc_gelu_epi_ok(const void *pre, int ld)
{
    return ld % 8 == 0 && (uintptr_t)pre % 16 == 0;
}

/* The backward's: dinp(n) = lo(gelu'(pre) src), src fp32. */
template <int LO>
__global__ void lc_dgelu_epi_kernel(void *dinp, const void *pre, const float *src, size_t n)
{
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n;
         i += (size_t)gridDim.x * blockDim.x)
        lc_st<LO>(dinp, i, lc_gelu_grad(lc_ld<LO>(pre, i)) * src[i]);
}

static void lc_matmul_forward_gelu_lo(llm_backend *be, void *out, void *pre, const void *inp,
                                      const void *w_lo, int lo, const void *bias, int N, int C,
                                      int OC)
{
    lc_ctx *c = lc_get(be);
    if (!lc_lo_ok(c, lo, "matmul_forward_gelu_lo: lo is neither bf16 nor f16")) return;
    if (N <= 0 || OC <= 0) return;
    /* out = GELU(inp w^T + bias), pre = inp w^T + bias: one GEMM with the epilogue */
    if (C > 0 && lc_gelu_epi_ok(pre, OC) &&
        lc_lt_gemm(c, lo, 0, 1, N, OC, C, inp, C, w_lo, C, 0.0f, out, lo, OC, bias, LC_EPI_GELU,
                   pre)) {
        c->lo_gelu_runs[0]++;
        return;
    }
    /* the fp32 sum into scratch (an empty sum: none), then one pass for the bias, the
     * GELU and the two roundings */
    size_t no = (size_t)N * OC;
    float *s = NULL;
    if (C > 0) {
        s = (float *)lc_scratch(c, no * sizeof(float));
        if (!s) return;
        lc_lo_gemm(c, lo, 0, 1, N, OC, C, inp, C, w_lo, C, 0.0f, s, LC_DT_F32, OC, NULL);
    }
    c->lo_gelu_runs[1]++;
    lc_bias_launch(c, lo, pre, s, bias, (size_t)N, OC, out);
}

static void lc_matmul_backward_dgelu_lo(llm_backend *be, void *dinp, float *dw, float *dbias,
                                        const void *dout, const void *inp, const void *pre,
                                        const void *w_lo, int lo, int N, int C, int OC)
{
    lc_ctx *c = lc_get(be);
    if (!lc_lo_ok(c, lo, "matmul_backward_dgelu_lo: lo is neither bf16 nor f16")) return;
    if (N <= 0 || C < 0 || OC < 0) return;
    if (C == 0 || OC == 0) {   /* no product (dinp empty, or zeros): the plain op */
        lc_matmul_backward_lo(be, dinp, lo, dw, dbias, dout, inp, w_lo, lo, N, C, OC);
        return;
    }
    /* dinp(N,C) = gelu'(pre) * (dout(N,OC) @ w(OC,C)): the GEMM with the epilogue, or the
     * fp32 product into scratch and one pass */
    if (lc_gelu_epi_ok(pre, C) &&
        lc_lt_gemm(c, lo, 0, 0, N, C, OC, dout, OC, w_lo, C, 0.0f, dinp, lo, C, NULL,
                   LC_EPI_DGELU, pre)) {
        c->lo_gelu_runs[0]++;
    } else {
        size_t ni = (size_t)N * C;
        float *s = (float *)lc_scratch(c, ni * sizeof(float));
        if (!s) return;
        lc_lo_gemm(c, lo, 0, 0, N, C, OC, dout, OC, w_lo, C, 0.0f, s, LC_DT_F32, C, NULL);
        c->lo_gelu_runs[1]++;
        LC_LAUNCH_LO(c, lo, lc_dgelu_epi_kernel, lc_blocks(ni, 256, 65535), 256, dinp, pre, s,
                     ni);
        if (LC_LAUNCHED(c)) return;
    }
    lc_wgrad_lo(c, dw, dbias, dout, inp, lo, N, C, OC);
}

extern "C" void lc_fill_lo(llm_backend *be)
{
    be->cast_lo = lc_cast_lo;
    be->matmul_forward_lo = lc_matmul_forward_lo;
    be->matmul_backward_lo = lc_matmul_backward_lo;
    be->matmul_forward_gelu_lo = lc_matmul_forward_gelu_lo;
    be->matmul_backward_dgelu_lo = lc_matmul_backward_dgelu_lo;
}

/* ---- cuda_ext.h ---- */

extern "C" void llm_backend_cuda_lo_gemm_path(llm_backend *be, int force_gemmex, long runs[2])
{
    lc_ctx *c = lc_get(be);
    if (!c) return;
    if (runs) { runs[0] = c->lo_runs[0]; runs[1] = c->lo_runs[1]; }
    if (force_gemmex >= 0) c->lo_force_ex = force_gemmex != 0;
}

extern "C" void llm_backend_cuda_gelu_epi_path(llm_backend *be, long runs[2])
{
    lc_ctx *c = lc_get(be);
    if (!c || !runs) return;
    runs[0] = c->lo_gelu_runs[0];
    runs[1] = c->lo_gelu_runs[1];
}
