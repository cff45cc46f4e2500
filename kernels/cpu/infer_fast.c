/* infer_fast.c — fast CPU kernels for inference: AVX2/FMA or AVX-512 matmul tiles for
 * decode-sized N (each weight row is read once for all rows; infer_tiles.h), OpenBLAS
 * sgemm for prefill-sized N,
 * attention over the KV cache parallel over (row, head).  Threads: be->threads (OpenMP).
 *
 * Determinism: the value of out[n][o] is computed by the same sequence of operations
 * whatever N is and wherever row n sits in the batch (tiles only change which rows share
 * a weight load, never the order of a dot product), so batched decoding equals decoding
 * one sequence at a time bit for bit.
 */
#include <cblas.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include <immintrin.h>
#include <omp.h>

#include "kernels/backend.h"
#include "kernels/cpu/infer_kern.h"
#include "kernels/cpu/quant_kern.h"

/* N at or above which matmul_rows uses sgemm: prefill-sized batches are compute-bound
 * and BLAS wins there; below it the weight stream dominates and tiles win (with the 4x3
 * tile at parity with sgemm from ~20 rows up: 2 threads, 768 x 3072, ~185 GFLOP/s).
 * Below it every row is also computed exactly as alone (rows_invariant). */
#define SGEMM_MIN_ROWS 64
/* Multiply-adds below which a kernel runs on the calling thread only. */
#define PAR_MIN_WORK (1 << 18)

static int nthreads(const llm_backend *be)
{
    return be->threads > 0 ? be->threads : 1;
}

static int have_avx2(void)
{
    return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
}

__attribute__((target("avx2,fma"))) static inline float hsum8(__m256 v)
{
    __m128 lo = _mm256_castps256_ps128(v), hi = _mm256_extractf128_ps(v, 1);
    __m128 s = _mm_add_ps(lo, hi);
    s = _mm_add_ps(s, _mm_movehl_ps(s, s));
    s = _mm_add_ss(s, _mm_movehdup_ps(s));
    return _mm_cvtss_f32(s);
}

/* The tiles, once per instruction set (infer_tiles.h); block_rows_avx512 on CPUs with
 * AVX-512 (F, BW, VL): 16 lanes per FMA, the same structure. */
#define TILE_SFX avx2
#define TILE_BITS 256
#define TILE_TGT __attribute__((target("avx2,fma")))
#define TILE_HSUM(v) hsum8(v)
#include "kernels/cpu/infer_tiles.h"

#define TILE_SFX avx512
#define TILE_BITS 512
#define TILE_TGT __attribute__((target("avx512f,avx512bw,avx512vl,avx2,fma")))
#define TILE_HSUM(v) _mm512_reduce_add_ps(v)
#include "kernels/cpu/infer_tiles.h"

static void matmul_tiles(llm_backend *be, float *out, const float *inp, const float *W,
                         const float *bias, int N, int C, int OC)
{
    int nblk = (OC + 3) / 4, w512 = llm_qk_isa_ok(LLM_QK_ISA_AVX512);
    /* tiny products are not worth waking threads for */
    int par = (double)N * OC * C >= PAR_MIN_WORK;
#pragma omp parallel for schedule(static) num_threads(nthreads(be)) if (par)
    for (int b = 0; b < nblk; b++) {
        int o0 = b * 4;
        int MR = OC - o0 >= 4 ? 4 : OC - o0;
        if (w512)
            block_rows_avx512(out, inp, W, bias, N, C, OC, o0, MR);
        else
            block_rows_avx2(out, inp, W, bias, N, C, OC, o0, MR);
    }
}

static void fast_matmul_rows(llm_backend *be, float *out, const float *inp, const void *w,
                             int w_dt, const float *bias, int N, int C, int OC)
{
    if (w_dt != LLM_IK_F32 &&
        llm_qk_matmul(out, inp, w, w_dt, bias, N, C, OC, LLM_QK_ISA_BEST, nthreads(be)) == 0)
        return;   /* bf16/f16/q8_0/q4_0: quant_*.c picks the ISA */
    if (w_dt != LLM_IK_F32 || !have_avx2()) {
        llm_infer_ref_matmul_rows(be, out, inp, w, w_dt, bias, N, C, OC);
        return;
    }
    if (N < SGEMM_MIN_ROWS) {
        matmul_tiles(be, out, inp, w, bias, N, C, OC);
        return;
    }
    /* BLAS stays single-threaded (see cpu_backend.c); each OpenMP thread multiplies its
     * own slice of output columns. */
    int nt = nthreads(be);
    int per;
    if ((double)N * OC * C < PAR_MIN_WORK)
        nt = 1;
    per = ((OC + nt - 1) / nt + 15) / 16 * 16;
#pragma omp parallel for schedule(static) num_threads(nt)
    for (int t = 0; t < nt; t++) {
        int o0 = t * per, oc = OC - o0 < per ? OC - o0 : per;
        if (oc <= 0)
            continue;
        if (bias)
            for (int n = 0; n < N; n++)
                memcpy(out + (size_t)n * OC + o0, bias + o0, (size_t)oc * sizeof(float));
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, N, oc, C, 1.0f, inp, C,
                    (const float *)w + (size_t)o0 * C, C, bias ? 1.0f : 0.0f, out + o0, OC);
    }
}

__attribute__((target("avx2,fma"))) static float dot_avx(const float *a, const float *b, int n)
{
    __m256 acc = _mm256_setzero_ps();
    int d = 0;
    for (; d + 8 <= n; d += 8)
        acc = _mm256_fmadd_ps(_mm256_loadu_ps(a + d), _mm256_loadu_ps(b + d), acc);
    float s = hsum8(acc);
    for (; d < n; d++)
        s += a[d] * b[d];
    return s;
}

__attribute__((target("avx2,fma"))) static void axpy_avx(float *y, float a, const float *x, int n)
{
    __m256 av = _mm256_set1_ps(a);
    int d = 0;
    for (; d + 8 <= n; d += 8)
        _mm256_storeu_ps(y + d, _mm256_fmadd_ps(av, _mm256_loadu_ps(x + d), _mm256_loadu_ps(y + d)));
    for (; d < n; d++)
        y[d] += a * x[d];
}

/* The reference's dtypes and q4_0 repacked in groups of 8 rows (LLM_QK_Q4_0R8), which
 * the decode kernels here read faster; common/infer_model.c repacks when this says so. */
static int fast_dtype_ok(llm_backend *be, int dt)
{
    return dt == LLM_QK_Q4_0R8 || llm_infer_ref_dtype_ok(be, dt);
}

static void fast_attention_rows(llm_backend *be, float *out, const float *qkv,
                                const float *kcache, const float *vcache, const int32_t *slot,
                                const int32_t *pos, int N, int C, int NH, int maxT)
{
    if (!have_avx2()) {
        llm_infer_ref_attention_rows(be, out, qkv, kcache, vcache, slot, pos, N, C, NH, maxT);
        return;
    }
    int hs = C / NH, nt = nthreads(be);
    float scale = 1.0f / sqrtf((float)hs);
    long work = (long)N * NH;
    float *scores = malloc((size_t)nt * maxT * sizeof(float));
    if (!scores) {  /* ops never fail: the reference needs no buffer */
        llm_infer_ref_attention_rows(be, out, qkv, kcache, vcache, slot, pos, N, C, NH, maxT);
        return;
    }
    /* short attention spans are not worth waking threads for */
    int par = (double)N * C * (pos[0] + 1) >= PAR_MIN_WORK;
#pragma omp parallel num_threads(nt) if (par)
    {
        float *sc = scores + (size_t)omp_get_thread_num() * maxT;
#pragma omp for schedule(dynamic, 4)
        for (long j = 0; j < work; j++) {
            int i = (int)(j / NH), h = (int)(j % NH);
            const float *kb = kcache + (size_t)slot[i] * maxT * C + h * hs;
            const float *vb = vcache + (size_t)slot[i] * maxT * C + h * hs;
            const float *q = qkv + (size_t)i * 3 * C + h * hs;
            float *o = out + (size_t)i * C + h * hs;
            int T = pos[i] + 1;
            float mx = -INFINITY;
            for (int t = 0; t < T; t++) {
                sc[t] = dot_avx(q, kb + (size_t)t * C, hs) * scale;
                if (sc[t] > mx)
                    mx = sc[t];
            }
            float sum = 0.0f;
            for (int t = 0; t < T; t++) {
                sc[t] = expf(sc[t] - mx);
                sum += sc[t];
            }
            memset(o, 0, (size_t)hs * sizeof(float));
            for (int t = 0; t < T; t++)
                axpy_avx(o, sc[t], vb + (size_t)t * C, hs);
            float inv = 1.0f / sum;
            for (int d = 0; d < hs; d++)
                o[d] *= inv;
        }
    }
    free(scores);
}

void llm_backend_cpu_infer_init(llm_backend *be, int reference)
{
    /* the tiles (and the quantized kernels) below these N, sgemm at or above them */
    be->rows_invariant = reference ? 0
                         : (SGEMM_MIN_ROWS < LLM_QK_GEMM_MIN_ROWS ? SGEMM_MIN_ROWS : LLM_QK_GEMM_MIN_ROWS) - 1;
    be->infer_dtype_ok = reference ? llm_infer_ref_dtype_ok : fast_dtype_ok;
    be->embed_rows = llm_infer_ref_embed_rows;
    be->kv_store = llm_infer_ref_kv_store;
    if (reference) {
        be->matmul_rows = llm_infer_ref_matmul_rows;
        be->attention_rows = llm_infer_ref_attention_rows;
    } else {
        be->matmul_rows = fast_matmul_rows;
        be->attention_rows = fast_attention_rows;
        openblas_set_num_threads(1);   /* threads come from OpenMP slices */
    }
}
