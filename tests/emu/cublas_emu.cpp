/* cublas_emu.cpp — the cuBLAS and cuBLASLt stand-ins of tests/emu/include: column-major
 * GEMMs on the CPU, with the argument checks of the real libraries.  C/D may be fp32,
 * bf16 or fp16: the fp32 sum (with alpha, beta C and the bias) rounded once on store
 * (beta 0 does not read C); cuBLASLt's bias must have D's type, as the real library's.
 * The GELU epilogues as cuBLASLt documents them (cublasLt.h): GELU_AUX(_BIAS) stores
 * x = the sum (+ bias) to the aux matrix and GELU(x) to D, DGELU stores gelu'(aux) * the
 * sum to D; the aux matrix has D's shape, its type D's unless set, its leading dimension
 * a multiple of 8 and at least D's rows.  The GELU is the tanh form evaluated as written
 * (0.5 x (1 + tanh(...)), fp32): not the backend's sigmoid form, so that the emulated
 * epilogue differs from the backend's own GELU by fp32 roundings, as the library's may. */
#include <cublasLt.h>

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include <algorithm>
#include <vector>

#include <cblas.h>

struct emu_cublas {
    int tf32;
    cudaStream_t stream;   /* cublasSetStream: its queued copies run before each call */
};
struct emu_lt {
    int unused;
};
struct emu_lt_desc {
    cublasComputeType_t comp;
    cublasOperation_t ta = CUBLAS_OP_N, tb = CUBLAS_OP_N;
    cublasLtEpilogue_t epi = CUBLASLT_EPILOGUE_DEFAULT;
    const void *bias = nullptr;
    cudaDataType_t bias_t = CUDA_R_32F;
    const void *aux = nullptr;
    int64_t aux_ld = 0;
    int32_t aux_t = -1;   /* -1: D's type */
};
struct emu_lt_layout {
    cudaDataType_t t;
    uint64_t rows, cols;
    int64_t ld;
};
struct emu_lt_pref {
    size_t ws;
};

namespace {

float load(const void *p, cudaDataType_t t, size_t i)
{
    switch (t) {
    case CUDA_R_32F: return ((const float *)p)[i];
    case CUDA_R_16F: return llm_quant_f16_to_f32(((const uint16_t *)p)[i]);
    case CUDA_R_16BF: return llm_quant_bf16_to_f32(((const uint16_t *)p)[i]);
    }
    return NAN;
}

void store(void *p, cudaDataType_t t, size_t i, float v)
{
    switch (t) {
    case CUDA_R_32F: ((float *)p)[i] = v; break;
    case CUDA_R_16F: ((uint16_t *)p)[i] = llm_quant_f32_to_f16(v); break;
    case CUDA_R_16BF: ((uint16_t *)p)[i] = llm_quant_f32_to_bf16(v); break;
    }
}

bool type_ok(cudaDataType_t t) { return t == CUDA_R_32F || t == CUDA_R_16F || t == CUDA_R_16BF; }

bool gelu_epi(cublasLtEpilogue_t e)
{
    return e == CUBLASLT_EPILOGUE_GELU_AUX || e == CUBLASLT_EPILOGUE_GELU_AUX_BIAS ||
           e == CUBLASLT_EPILOGUE_DGELU;
}

bool bias_epi(cublasLtEpilogue_t e)
{
    return e == CUBLASLT_EPILOGUE_BIAS || e == CUBLASLT_EPILOGUE_GELU_AUX_BIAS;
}

/* GELU (tanh form) and its derivative, fp32 as written */
float gelu_tanh(float x)
{
    const float k = 0.7978845608028654f;
    return 0.5f * x * (1.0f + tanhf(k * (x + 0.044715f * x * x * x)));
}

float dgelu_tanh(float x)
{
    const float k = 0.7978845608028654f;
    float t = tanhf(k * (x + 0.044715f * x * x * x));
    return 0.5f * (1.0f + t) + 0.5f * x * (1.0f - t * t) * k * (1.0f + 3.0f * 0.044715f * x * x);
}

/* TF32: the operands keep 10 explicit mantissa bits (round to nearest even) */
float tf32(float x)
{
    uint32_t u;
    memcpy(&u, &x, 4);
    if ((u & 0x7f800000u) == 0x7f800000u) return x;
    u += 0xfffu + ((u >> 13) & 1u);
    u &= ~0x1fffu;
    memcpy(&x, &u, 4);
    return x;
}

}  // namespace

cublasStatus_t emu_gemm(cublasOperation_t ta, cublasOperation_t tb, int m, int n, int k,
                        float alpha, const void *A, cudaDataType_t at, int lda, long long sA,
                        const void *B, cudaDataType_t bt, int ldb, long long sB, float beta,
                        void *C, cudaDataType_t ct, int ldc, long long sC, int batch,
                        const void *bias, cudaDataType_t biast, int tf)
{
    if (m < 0 || n < 0 || k < 0 || batch < 0 || !type_ok(at) || !type_ok(bt) || !type_ok(ct) ||
        lda < (ta == CUBLAS_OP_N ? (m > 1 ? m : 1) : (k > 1 ? k : 1)) ||
        ldb < (tb == CUBLAS_OP_N ? (k > 1 ? k : 1) : (n > 1 ? n : 1)) || ldc < (m > 1 ? m : 1))
        return CUBLAS_STATUS_INVALID_VALUE;
    if (emu_sticky_error() != cudaSuccess) return CUBLAS_STATUS_EXECUTION_FAILED;
    if (!m || !n || !batch) return CUBLAS_STATUS_SUCCESS;
    std::vector<float> a((size_t)m * k), b((size_t)k * n);   /* op(A) row-major, op(B) col-major */
    std::vector<float> p((size_t)m * n);
    for (int g = 0; g < batch; g++) {
        const char *Ag = (const char *)A, *Bg = (const char *)B;
        size_t ea = at == CUDA_R_32F ? 4 : 2, eb = bt == CUDA_R_32F ? 4 : 2, ec = ct == CUDA_R_32F ? 4 : 2;
        Ag += (size_t)g * sA * ea;
        Bg += (size_t)g * sB * eb;
        char *Cg = (char *)C + (size_t)g * sC * ec;
        for (int i = 0; i < m; i++)
            for (int l = 0; l < k; l++) {
                float v = load(Ag, at, ta == CUBLAS_OP_N ? (size_t)i + (size_t)l * lda : (size_t)l + (size_t)i * lda);
                a[(size_t)i * k + l] = tf ? tf32(v) : v;
            }
        for (int j = 0; j < n; j++)
            for (int l = 0; l < k; l++) {
                float v = load(Bg, bt, tb == CUBLAS_OP_N ? (size_t)l + (size_t)j * ldb : (size_t)j + (size_t)l * ldb);
                b[(size_t)j * k + l] = tf ? tf32(v) : v;
            }
        /* p(m x n, row-major) = op(A) op(B), fp32 accumulation as on the device */
        if (k) cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, m, n, k, 1.0f, a.data(), k,
                           b.data(), k, 0.0f, p.data(), n);
        else std::fill(p.begin(), p.end(), 0.0f);
        for (int j = 0; j < n; j++)
            for (int i = 0; i < m; i++) {
                size_t ci = (size_t)i + (size_t)j * ldc;
                float v = alpha * p[(size_t)i * n + j];
                if (beta != 0.0f) v += beta * load(Cg, ct, ci);   /* beta 0: C is not read */
                if (bias) v += load(bias, biast, (size_t)i);
                store(Cg, ct, ci, v);
            }
    }
    return CUBLAS_STATUS_SUCCESS;
}

const char *cublasGetStatusString(cublasStatus_t s)
{
    switch (s) {
    case CUBLAS_STATUS_SUCCESS: return "CUBLAS_STATUS_SUCCESS";
    case CUBLAS_STATUS_NOT_INITIALIZED: return "CUBLAS_STATUS_NOT_INITIALIZED";
    case CUBLAS_STATUS_ALLOC_FAILED: return "CUBLAS_STATUS_ALLOC_FAILED";
    case CUBLAS_STATUS_INVALID_VALUE: return "CUBLAS_STATUS_INVALID_VALUE";
    case CUBLAS_STATUS_NOT_SUPPORTED: return "CUBLAS_STATUS_NOT_SUPPORTED";
    case CUBLAS_STATUS_EXECUTION_FAILED: return "CUBLAS_STATUS_EXECUTION_FAILED";
    }
    return "CUBLAS_STATUS_UNKNOWN";
}

cublasStatus_t cublasCreate(cublasHandle_t *h)
{
    *h = new emu_cublas{0, nullptr};
    return CUBLAS_STATUS_SUCCESS;
}
cublasStatus_t cublasDestroy(cublasHandle_t h)
{
    delete h;
    return CUBLAS_STATUS_SUCCESS;
}
cublasStatus_t cublasSetStream(cublasHandle_t h, cudaStream_t s)
{
    if (!h) return CUBLAS_STATUS_NOT_INITIALIZED;
    h->stream = s;
    return CUBLAS_STATUS_SUCCESS;
}
cublasStatus_t cublasSetWorkspace(cublasHandle_t h, void *ws, size_t bytes)
{
    (void)ws;
    (void)bytes;
    return h ? CUBLAS_STATUS_SUCCESS : CUBLAS_STATUS_NOT_INITIALIZED;
}
cublasStatus_t cublasSetMathMode(cublasHandle_t h, cublasMath_t m)
{
    if (!h) return CUBLAS_STATUS_NOT_INITIALIZED;
    h->tf32 = m == CUBLAS_TF32_TENSOR_OP_MATH;
    return CUBLAS_STATUS_SUCCESS;
}
cublasStatus_t cublasSgemm(cublasHandle_t h, cublasOperation_t ta, cublasOperation_t tb, int m,
                           int n, int k, const float *alpha, const float *A, int lda,
                           const float *B, int ldb, const float *beta, float *C, int ldc)
{
    return cublasSgemmStridedBatched(h, ta, tb, m, n, k, alpha, A, lda, 0, B, ldb, 0, beta, C, ldc,
                                     0, 1);
}
cublasStatus_t cublasSgemmStridedBatched(cublasHandle_t h, cublasOperation_t ta,
                                         cublasOperation_t tb, int m, int n, int k,
                                         const float *alpha, const float *A, int lda,
                                         long long sA, const float *B, int ldb, long long sB,
                                         const float *beta, float *C, int ldc, long long sC,
                                         int batch)
{
    if (!h) return CUBLAS_STATUS_NOT_INITIALIZED;
    emu_stream_flush(h->stream);
    return emu_gemm(ta, tb, m, n, k, *alpha, A, CUDA_R_32F, lda, sA, B, CUDA_R_32F, ldb, sB, *beta,
                    C, CUDA_R_32F, ldc, sC, batch, nullptr, CUDA_R_32F, h->tf32);
}
cublasStatus_t cublasSgemv(cublasHandle_t h, cublasOperation_t t, int m, int n,
                           const float *alpha, const float *A, int lda, const float *x,
                           int incx, const float *beta, float *y, int incy)
{
    if (!h) return CUBLAS_STATUS_NOT_INITIALIZED;
    if (m < 0 || n < 0 || lda < (m > 1 ? m : 1) || !incx || !incy) return CUBLAS_STATUS_INVALID_VALUE;
    if (emu_sticky_error() != cudaSuccess) return CUBLAS_STATUS_EXECUTION_FAILED;
    emu_stream_flush(h->stream);
    int ny = t == CUBLAS_OP_N ? m : n, nx = t == CUBLAS_OP_N ? n : m;
    for (int i = 0; i < ny; i++) {
        double s = 0;
        for (int j = 0; j < nx; j++) {
            float a = t == CUBLAS_OP_N ? A[(size_t)i + (size_t)j * lda] : A[(size_t)j + (size_t)i * lda];
            s += (double)a * x[(long long)j * incx];
        }
        float *yi = &y[(long long)i * incy];
        *yi = *alpha * (float)s + (*beta != 0.0f ? *beta * *yi : 0.0f);
    }
    return CUBLAS_STATUS_SUCCESS;
}
cublasStatus_t cublasGemmEx(cublasHandle_t h, cublasOperation_t ta, cublasOperation_t tb, int m,
                            int n, int k, const void *alpha, const void *A, cudaDataType_t at,
                            int lda, const void *B, cudaDataType_t bt, int ldb, const void *beta,
                            void *C, cudaDataType_t ct, int ldc, cublasComputeType_t comp,
                            cublasGemmAlgo_t algo)
{
    return cublasGemmStridedBatchedEx(h, ta, tb, m, n, k, alpha, A, at, lda, 0, B, bt, ldb, 0, beta,
                                      C, ct, ldc, 0, 1, comp, algo);
}
cublasStatus_t cublasGemmStridedBatchedEx(cublasHandle_t h, cublasOperation_t ta,
                                          cublasOperation_t tb, int m, int n, int k,
                                          const void *alpha, const void *A, cudaDataType_t at,
                                          int lda, long long sA, const void *B,
                                          cudaDataType_t bt, int ldb, long long sB,
                                          const void *beta, void *C, cudaDataType_t ct, int ldc,
                                          long long sC, int batch, cublasComputeType_t comp,
                                          cublasGemmAlgo_t algo)
{
    (void)algo;
    if (!h) return CUBLAS_STATUS_NOT_INITIALIZED;
    if (at != bt || (comp != CUBLAS_COMPUTE_32F && comp != CUBLAS_COMPUTE_32F_FAST_TF32))
        return CUBLAS_STATUS_NOT_SUPPORTED;
    emu_stream_flush(h->stream);
    return emu_gemm(ta, tb, m, n, k, *(const float *)alpha, A, at, lda, sA, B, bt, ldb, sB,
                    *(const float *)beta, C, ct, ldc, sC, batch, nullptr, CUDA_R_32F,
                    comp == CUBLAS_COMPUTE_32F_FAST_TF32 && at == CUDA_R_32F);
}

/* ---- cuBLASLt ---- */

cublasStatus_t cublasLtCreate(cublasLtHandle_t *h)
{
    *h = new emu_lt{0};
    return CUBLAS_STATUS_SUCCESS;
}
cublasStatus_t cublasLtDestroy(cublasLtHandle_t h)
{
    delete h;
    return CUBLAS_STATUS_SUCCESS;
}
cublasStatus_t cublasLtMatmulDescCreate(cublasLtMatmulDesc_t *d, cublasComputeType_t c,
                                        cudaDataType_t scale)
{
    if (scale != CUDA_R_32F) return CUBLAS_STATUS_NOT_SUPPORTED;
    *d = new emu_lt_desc;
    (*d)->comp = c;
    return CUBLAS_STATUS_SUCCESS;
}
cublasStatus_t cublasLtMatmulDescDestroy(cublasLtMatmulDesc_t d)
{
    delete d;
    return CUBLAS_STATUS_SUCCESS;
}
cublasStatus_t cublasLtMatmulDescSetAttribute(cublasLtMatmulDesc_t d,
                                              cublasLtMatmulDescAttributes_t a, const void *v,
                                              size_t n)
{
    if (!d || !v) return CUBLAS_STATUS_INVALID_VALUE;
    switch (a) {
    case CUBLASLT_MATMUL_DESC_TRANSA:
        if (n != sizeof(cublasOperation_t)) return CUBLAS_STATUS_INVALID_VALUE;
        memcpy(&d->ta, v, n);
        return CUBLAS_STATUS_SUCCESS;
    case CUBLASLT_MATMUL_DESC_TRANSB:
        if (n != sizeof(cublasOperation_t)) return CUBLAS_STATUS_INVALID_VALUE;
        memcpy(&d->tb, v, n);
        return CUBLAS_STATUS_SUCCESS;
    case CUBLASLT_MATMUL_DESC_EPILOGUE:
        if (n != sizeof(cublasLtEpilogue_t)) return CUBLAS_STATUS_INVALID_VALUE;
        memcpy(&d->epi, v, n);
        return d->epi == CUBLASLT_EPILOGUE_DEFAULT || d->epi == CUBLASLT_EPILOGUE_BIAS ||
                       gelu_epi(d->epi)
                   ? CUBLAS_STATUS_SUCCESS : CUBLAS_STATUS_NOT_SUPPORTED;
    case CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_POINTER:
        if (n != sizeof(void *)) return CUBLAS_STATUS_INVALID_VALUE;
        memcpy(&d->aux, v, n);
        return CUBLAS_STATUS_SUCCESS;
    case CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_LD:
        if (n != sizeof(int64_t)) return CUBLAS_STATUS_INVALID_VALUE;
        memcpy(&d->aux_ld, v, n);
        return CUBLAS_STATUS_SUCCESS;
    case CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_DATA_TYPE:
        if (n != sizeof(int32_t)) return CUBLAS_STATUS_INVALID_VALUE;
        memcpy(&d->aux_t, v, n);
        return CUBLAS_STATUS_SUCCESS;
    case CUBLASLT_MATMUL_DESC_BIAS_POINTER:
        if (n != sizeof(void *)) return CUBLAS_STATUS_INVALID_VALUE;
        memcpy(&d->bias, v, n);
        return CUBLAS_STATUS_SUCCESS;
    case CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE:
        if (n != sizeof(cudaDataType_t)) return CUBLAS_STATUS_INVALID_VALUE;
        memcpy(&d->bias_t, v, n);
        return type_ok(d->bias_t) ? CUBLAS_STATUS_SUCCESS : CUBLAS_STATUS_INVALID_VALUE;
    }
    return CUBLAS_STATUS_INVALID_VALUE;
}
cublasStatus_t cublasLtMatrixLayoutCreate(cublasLtMatrixLayout_t *l, cudaDataType_t t,
                                          uint64_t rows, uint64_t cols, int64_t ld)
{
    if (!type_ok(t) || ld < (int64_t)(rows > 1 ? rows : 1)) return CUBLAS_STATUS_INVALID_VALUE;
    *l = new emu_lt_layout{t, rows, cols, ld};
    return CUBLAS_STATUS_SUCCESS;
}
cublasStatus_t cublasLtMatrixLayoutDestroy(cublasLtMatrixLayout_t l)
{
    delete l;
    return CUBLAS_STATUS_SUCCESS;
}
cublasStatus_t cublasLtMatmulPreferenceCreate(cublasLtMatmulPreference_t *p)
{
    *p = new emu_lt_pref{0};
    return CUBLAS_STATUS_SUCCESS;
}
cublasStatus_t cublasLtMatmulPreferenceDestroy(cublasLtMatmulPreference_t p)
{
    delete p;
    return CUBLAS_STATUS_SUCCESS;
}
cublasStatus_t cublasLtMatmulPreferenceSetAttribute(cublasLtMatmulPreference_t p,
                                                    cublasLtMatmulPreferenceAttributes_t a,
                                                    const void *v, size_t n)
{
    if (!p || !v) return CUBLAS_STATUS_INVALID_VALUE;
    if (a == CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES) {
        if (n != sizeof(uint64_t)) return CUBLAS_STATUS_INVALID_VALUE;
        memcpy(&p->ws, v, n);
        return CUBLAS_STATUS_SUCCESS;
    }
    return n == sizeof(uint32_t) ? CUBLAS_STATUS_SUCCESS : CUBLAS_STATUS_INVALID_VALUE;
}

namespace {

/* the shapes of D = op(A) op(B) (+ C) agree: m x k times k x n */
bool lt_shapes(const emu_lt_desc *d, const emu_lt_layout *a, const emu_lt_layout *b,
               const emu_lt_layout *c, const emu_lt_layout *dl, uint64_t *m, uint64_t *n, uint64_t *k)
{
    uint64_t am = d->ta == CUBLAS_OP_N ? a->rows : a->cols, ak = d->ta == CUBLAS_OP_N ? a->cols : a->rows;
    uint64_t bk = d->tb == CUBLAS_OP_N ? b->rows : b->cols, bn = d->tb == CUBLAS_OP_N ? b->cols : b->rows;
    *m = am;
    *n = bn;
    *k = ak;
    return ak == bk && dl->rows == am && dl->cols == bn && c->rows == am && c->cols == bn &&
           c->t == dl->t && a->t == b->t;
}

/* The epilogue's own arguments against D's layout: the bias in D's type; the GELU aux
 * matrix with a leading dimension that is a multiple of 8 and at least D's rows, of D's
 * type (bf16/fp16/fp32 D; the fp8 exceptions do not arise here). */
cublasStatus_t lt_epi_ok(const emu_lt_desc *d, const emu_lt_layout *dl)
{
    if (bias_epi(d->epi) && d->bias_t != dl->t) return CUBLAS_STATUS_NOT_SUPPORTED;
    if (!gelu_epi(d->epi)) return CUBLAS_STATUS_SUCCESS;
    if (d->aux_ld < (int64_t)dl->rows || d->aux_ld % 8) return CUBLAS_STATUS_INVALID_VALUE;
    if (d->aux_t != -1 && d->aux_t != (int32_t)dl->t) return CUBLAS_STATUS_NOT_SUPPORTED;
    return CUBLAS_STATUS_SUCCESS;
}

}  // namespace

cublasStatus_t cublasLtMatmulAlgoGetHeuristic(cublasLtHandle_t h, cublasLtMatmulDesc_t d,
                                              cublasLtMatrixLayout_t a, cublasLtMatrixLayout_t b,
                                              cublasLtMatrixLayout_t c, cublasLtMatrixLayout_t dl,
                                              cublasLtMatmulPreference_t p, int want,
                                              cublasLtMatmulHeuristicResult_t *res, int *got)
{
    uint64_t m, n, k;
    if (!h || !d || !a || !b || !c || !dl || !p || want < 1 || !res || !got)
        return CUBLAS_STATUS_INVALID_VALUE;
    *got = 0;
    if (!lt_shapes(d, a, b, c, dl, &m, &n, &k)) return CUBLAS_STATUS_INVALID_VALUE;
    /* the bias in D's type (bf16/fp16 outputs included), the aux matrix's rules */
    cublasStatus_t st = lt_epi_ok(d, dl);
    if (st != CUBLAS_STATUS_SUCCESS) return st;
    memset(res, 0, sizeof *res);
    res->state = CUBLAS_STATUS_SUCCESS;
    res->wavesCount = 1.0f;
    *got = 1;
    return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasLtMatmul(cublasLtHandle_t h, cublasLtMatmulDesc_t d, const void *alpha,
                              const void *A, cublasLtMatrixLayout_t al, const void *B,
                              cublasLtMatrixLayout_t bl, const void *beta, const void *C,
                              cublasLtMatrixLayout_t cl, void *D, cublasLtMatrixLayout_t dl,
                              const cublasLtMatmulAlgo_t *algo, void *ws, size_t wsbytes,
                              cudaStream_t s)
{
    (void)algo;
    (void)ws;
    (void)wsbytes;
    emu_stream_flush(s);
    uint64_t m, n, k;
    if (!h || !d || !al || !bl || !cl || !dl || !lt_shapes(d, al, bl, cl, dl, &m, &n, &k))
        return CUBLAS_STATUS_INVALID_VALUE;
    if (bias_epi(d->epi) && !d->bias) return CUBLAS_STATUS_INVALID_VALUE;
    if (gelu_epi(d->epi) && !d->aux) return CUBLAS_STATUS_INVALID_VALUE;
    cublasStatus_t st = lt_epi_ok(d, dl);
    if (st != CUBLAS_STATUS_SUCCESS) return st;
    float b = *(const float *)beta;
    int tf = d->comp == CUBLAS_COMPUTE_32F_FAST_TF32 && al->t == CUDA_R_32F;
    if (gelu_epi(d->epi)) {
        /* the fp32 result (alpha, beta C, the bias) first, then the epilogue, stored */
        std::vector<float> t(m * n > 0 ? m * n : 1);
        if (b != 0.0f)
            for (uint64_t j = 0; j < n; j++)
                for (uint64_t i = 0; i < m; i++)
                    t[i + j * m] = load(C, cl->t, i + j * (uint64_t)cl->ld);
        cublasStatus_t r = emu_gemm(d->ta, d->tb, (int)m, (int)n, (int)k, *(const float *)alpha,
                                    A, al->t, (int)al->ld, 0, B, bl->t, (int)bl->ld, 0, b,
                                    t.data(), CUDA_R_32F, (int)(m ? m : 1), 0, 1,
                                    bias_epi(d->epi) ? d->bias : nullptr, d->bias_t, tf);
        if (r != CUBLAS_STATUS_SUCCESS) return r;
        cudaDataType_t xt = d->aux_t == -1 ? dl->t : (cudaDataType_t)d->aux_t;
        for (uint64_t j = 0; j < n; j++)
            for (uint64_t i = 0; i < m; i++) {
                float v = t[i + j * m];
                size_t ai = i + j * (uint64_t)d->aux_ld, di = i + j * (uint64_t)dl->ld;
                if (d->epi == CUBLASLT_EPILOGUE_DGELU)
                    v *= dgelu_tanh(load(d->aux, xt, ai));
                else {
                    store((void *)d->aux, xt, ai, v);
                    v = gelu_tanh(v);
                }
                store(D, dl->t, di, v);
            }
        return CUBLAS_STATUS_SUCCESS;
    }
    if (b != 0.0f && C != D) {   /* C into D first, then D += op(A) op(B) */
        for (uint64_t j = 0; j < n; j++)
            for (uint64_t i = 0; i < m; i++)
                store(D, dl->t, i + j * (uint64_t)dl->ld, load(C, cl->t, i + j * (uint64_t)cl->ld));
    }
    return emu_gemm(d->ta, d->tb, (int)m, (int)n, (int)k, *(const float *)alpha, A, al->t,
                    (int)al->ld, 0, B, bl->t, (int)bl->ld, 0, b, D, dl->t, (int)dl->ld, 0, 1,
                    d->epi == CUBLASLT_EPILOGUE_BIAS ? d->bias : nullptr, d->bias_t, tf);
}
