/* quant_matmul.c — matmul with f16/bf16/q8_0/q4_0 weights: ISA selection at run time,
 * activation quantization, threading over output columns, and the dequantize+sgemm path
 * for prefill-sized batches. */
#include <cblas.h>
#include <stdlib.h>

#include <omp.h>

#include "kernels/cpu/quant_kern.h"

/* Output columns per parallel work item: small enough to balance 2..64 threads on
 * GPT-2 shapes, large enough that a slice of weights is reused by every row group. */
#define COLS_PER_ITEM 32
/* Weight rows dequantized per sgemm call on the prefill path (scratch COLS x C floats). */
#define GEMM_COLS 256
#define PAR_MIN_WORK (1 << 18)

int llm_qk_isa_ok(int isa)
{
    switch (isa) {
    case LLM_QK_ISA_SCALAR: return 1;
    case LLM_QK_ISA_AVX2:
        return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") &&
               __builtin_cpu_supports("f16c");
    case LLM_QK_ISA_AVX512:
        return llm_qk_isa_ok(LLM_QK_ISA_AVX2) && __builtin_cpu_supports("avx512f") &&
               __builtin_cpu_supports("avx512bw") && __builtin_cpu_supports("avx512vl");
    case LLM_QK_ISA_AVX512VNNI:
        return llm_qk_isa_ok(LLM_QK_ISA_AVX512) && __builtin_cpu_supports("avx512vnni");
    default: return 0;
    }
}

const char *llm_qk_isa_name(int isa)
{
    static const char *const n[] = {"scalar", "avx2", "avx512", "avx512vnni"};
    return isa >= 0 && isa <= 3 ? n[isa] : "?";
}

int llm_qk_isa_best(void)
{
    for (int i = LLM_QK_ISA_AVX512VNNI; i > LLM_QK_ISA_SCALAR; i--)
        if (llm_qk_isa_ok(i))
            return i;
    return LLM_QK_ISA_SCALAR;
}

static void rows(int isa, float *out, int ldo, const void *w, int dt, const llm_block_q8_0 *xq,
                 const float *xf, int R, int C, int o0, int o1)
{
    if (isa == LLM_QK_ISA_SCALAR)
        llm_qk_rows_scalar(out, ldo, w, dt, xq, xf, R, C, o0, o1);
    else if (isa == LLM_QK_ISA_AVX2)
        llm_qk_rows_avx2(out, ldo, w, dt, xq, xf, R, C, o0, o1);
    else
        llm_qk_rows_avx512(out, ldo, w, dt, xf, R, C, o0, o1);
}

/* Prefill: dequantize GEMM_COLS weight rows at a time into per-thread scratch and let
 * sgemm (single-threaded per call) multiply them with all N rows. */
static int gemm_path(float *out, const float *inp, const void *w, int dt, const float *bias,
                     int N, int C, int OC, int isa, int threads)
{
    int nitems = (OC + GEMM_COLS - 1) / GEMM_COLS, nt = threads;
    float *scratch = malloc((size_t)nt * GEMM_COLS * C * sizeof(float));
    if (!scratch)
        return -1;
#pragma omp parallel for schedule(dynamic, 1) num_threads(nt) if (nt > 1)
    for (int it = 0; it < nitems; it++) {
        float *wf = scratch + (size_t)omp_get_thread_num() * GEMM_COLS * C;
        int o0 = it * GEMM_COLS, oc = OC - o0 < GEMM_COLS ? OC - o0 : GEMM_COLS;
        if (dt == LLM_QK_Q4_0R8)   /* this path runs from AVX2 up */
            llm_qk_dequantize_r8_avx2(w, C, o0, oc, wf);
        else if (dt == LLM_QK_Q8_0 && isa >= LLM_QK_ISA_AVX2)
            llm_qk_dequantize_q8_0_avx2(w, C, o0, oc, wf);
        else
            llm_qk_dequantize_wrows(dt, w, C, o0, oc, wf);
        if (bias)
            for (int n = 0; n < N; n++)
                memcpy(out + (size_t)n * OC + o0, bias + o0, (size_t)oc * sizeof(float));
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, N, oc, C, 1.0f, inp, C, wf, C,
                    bias ? 1.0f : 0.0f, out + o0, OC);
    }
    free(scratch);
    return 0;
}

int llm_qk_matmul(float *out, const float *inp, const void *w, int dt, const float *bias,
                  int N, int C, int OC, int isa, int threads)
{
    int q = dt == LLM_QK_Q8_0 || dt == LLM_QK_Q4_0 || dt == LLM_QK_Q4_0R8;
    if (!q && dt != LLM_QK_F16 && dt != LLM_QK_BF16)
        return -1;
    if (N < 1 || C < 1 || OC < 1 || (q && C % 32))
        return -1;
    if (isa == LLM_QK_ISA_BEST)
        isa = llm_qk_isa_best();
    if (!llm_qk_isa_ok(isa))
        return -1;
    int nt = threads > 1 ? threads : 1;
    if ((double)N * OC * C < PAR_MIN_WORK)
        nt = 1;   /* tiny products are not worth waking threads for */
    /* AVX-512's integer kernels outrun the dequantized sgemm at every N (GPT-2 124M on 2
     * Zen 5 cores, prefill of 128 tokens: q8_0 1.4x, q4_0 repacked 2.2x) */
    if (isa != LLM_QK_ISA_SCALAR && N >= LLM_QK_GEMM_MIN_ROWS &&
        !(q && isa >= LLM_QK_ISA_AVX512))
        return gemm_path(out, inp, w, dt, bias, N, C, OC, isa, nt);

    llm_block_q8_0 *xq = NULL;
    int32_t *xs = NULL;
    float *xd = NULL;
    llm_qk_x512 *px = NULL;
    int nb = C / 32, r8 = dt == LLM_QK_Q4_0R8 && isa != LLM_QK_ISA_SCALAR;
    /* AVX-512: q8_0/q4_0 input rows prepared once (llm_qk_pack_x512); there, repacked
     * q4_0 too, groups of up to 8 rows share each weight load; elsewhere groups of 4 */
    int x512 = q && !r8 && isa >= LLM_QK_ISA_AVX512, G = isa >= LLM_QK_ISA_AVX512 && q ? 8 : 4;
    if (q) {
        xq = malloc((size_t)N * nb * sizeof *xq);
        if (x512)
            px = aligned_alloc(64, (size_t)N * ((nb + 1) / 2) * sizeof *px);
        if (r8) {
            xs = malloc((size_t)N * nb * sizeof *xs);
            xd = malloc((size_t)N * nb * sizeof *xd);
        }
        if (!xq || (x512 && !px) || (r8 && (!xs || !xd))) {
            free(xq); free(px); free(xs); free(xd);
            return -1;
        }
        /* the input rows quantized (and prepared for their kernels) in parallel: one
         * thread alone took a quarter of a 128-row prefill's quantized products */
#pragma omp parallel for schedule(static) num_threads(nt) if (nt > 1 && N > 1)
        for (int n = 0; n < N; n++) {
            llm_block_q8_0 *xr = xq + (size_t)n * nb;
            llm_qk_quantize_row_q8_0(inp + (size_t)n * C, xr, C);
            if (x512)
                llm_qk_pack_x512(px + (size_t)n * ((nb + 1) / 2), xr, nb);
            for (int b = 0; r8 && b < nb; b++) {   /* 8 * the sum of its quants, its scale */
                int32_t t = 0;
                for (int j = 0; j < 32; j++)
                    t += xr[b].q[j];
                xs[(size_t)n * nb + b] = 8 * t;
                xd[(size_t)n * nb + b] = llm_f16_to_f32(xr[b].d);
            }
        }
    }
    int nitems = (OC + COLS_PER_ITEM - 1) / COLS_PER_ITEM;
#pragma omp parallel for schedule(static) num_threads(nt) if (nt > 1)
    for (int it = 0; it < nitems; it++) {
        int o0 = it * COLS_PER_ITEM, o1 = o0 + COLS_PER_ITEM < OC ? o0 + COLS_PER_ITEM : OC;
        /* row groups of G share each weight load; the order of a dot product never
         * depends on the group, so a row's result does not depend on N */
        for (int n = 0; n < N; n += G) {
            int R = N - n < G ? N - n : G;
            if (x512) {
                llm_qk_qrows_avx512(out + (size_t)n * OC, OC, w, dt, px + (size_t)n * ((nb + 1) / 2),
                                    R, nb, o0, o1, isa == LLM_QK_ISA_AVX512VNNI);
                continue;
            }
            if (r8 && isa >= LLM_QK_ISA_AVX512) {
                llm_qk_rows_r8_avx512(out + (size_t)n * OC, OC, w, xq + (size_t)n * nb,
                                      xs + (size_t)n * nb, xd + (size_t)n * nb, R, nb, o0, o1,
                                      isa == LLM_QK_ISA_AVX512VNNI);
                continue;
            }
            if (r8) {   /* AVX2 (the caller checked it) */
                llm_qk_rows_r8_avx2(out + (size_t)n * OC, OC, w, xq + (size_t)n * nb,
                                    xs + (size_t)n * nb, xd + (size_t)n * nb, R, nb, o0, o1);
                continue;
            }
            rows(isa, out + (size_t)n * OC, OC, w, dt, q ? xq + (size_t)n * nb : NULL,
                 inp + (size_t)n * C, R, C, o0, o1);
        }
        if (bias)
            for (int n = 0; n < N; n++)
                for (int o = o0; o < o1; o++)
                    out[(size_t)n * OC + o] += bias[o];
    }
    free(xq);
    free(xs);
    free(xd);
    free(px);
    return 0;
}
