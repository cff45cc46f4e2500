/* test_emu_resln.cpp — the CUDA layernorm kernels of kernels/cuda/cuda_resln.cuh run on
 * the CPU by tests/emu (no GPU, no nvcc): lc_resln_fwd_kernel (residual add fused with
 * the layernorm) bit for bit equal to the host's fp32 add followed by lc_ln_fwd_kernel
 * (what residual_forward then layernorm_forward compute on the device), also in place
 * (res aliasing a, then b) with mean/rstd NULL; both within gpu_check's fp32 bound of
 * the double reference (tests/gpu/ref64.c); the same bits in the emulator's five thread
 * orders.  Outputs start as NaN, so an element no thread wrote fails. */
#include "tests/emu/cuda_emu.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

extern "C" {
#include "tests/gpu/ref64.h"
#include "tests/unit/testutil.h"
}

#include "kernels/cuda/cuda_resln.cuh"

namespace {

const double BOUND = 1e-4;   /* gpu_check's B_RED: fp32 reductions */

float *alloc(size_t n)
{
    float *p = (float *)malloc((n ? n : 1) * sizeof(float));
    assert_non_null(p);
    return p;
}

float *nans(size_t n)
{
    float *p = alloc(n);
    for (size_t i = 0; i < n; i++) p[i] = NAN;
    return p;
}

/* gpu_check's metric: max |a - r| / max(|r|, rms(r)); INFINITY on a non-finite a */
double err64(const float *a, const double *r, size_t n)
{
    double ss = 0, e = 0;
    for (size_t i = 0; i < n; i++) ss += r[i] * r[i];
    double fl = fmax(n ? sqrt(ss / n) : 0, 1e-30);
    for (size_t i = 0; i < n; i++) {
        if (!isfinite(a[i])) return INFINITY;
        e = fmax(e, fabs(a[i] - r[i]) / fmax(fabs(r[i]), fl));
    }
    return e;
}

dim3 grid_for(int N) { return dim3((unsigned)(((size_t)N * LC_WARP + 255) / 256)); }

int run_ln(float *out, float *mean, float *rstd, const float *x, const float *w, const float *b,
           int N, int C, int order)
{
    return emu_launch(grid_for(N), dim3(256), 0,
                      [&] { lc_ln_fwd_kernel<LC_DT_F32>(out, mean, rstd, x, w, b, N, C); }, order, 3);
}

int run_resln(float *res, float *out, float *mean, float *rstd, const float *a, const float *b,
              const float *w, const float *bias, int N, int C, int order)
{
    return emu_launch(grid_for(N), dim3(256), 0,
                      [&] { lc_resln_fwd_kernel<LC_DT_F32>(res, out, mean, rstd, a, b, w, bias, N, C); },
                      order, 5);
}

void check_case(tu_rng *r, int N, int C)
{
    size_t n = (size_t)N * C;
    float *a = alloc(n), *b = alloc(n), *w = alloc(C), *bias = alloc(C), *sum = alloc(n);
    tu_fill(r, a, n, -2, 3);
    tu_fill(r, b, n, -1, 1);
    tu_fill(r, w, C, 0.5f, 1.5f);
    tu_fill(r, bias, C, -0.5f, 0.5f);
    for (int c = 0; c < C && N > 1; c++) a[C + c] += 100.0f;   /* a row with a large mean */
    for (size_t i = 0; i < n; i++) sum[i] = a[i] + b[i];

    /* the two ops: the host's add (lc_add_kernel's one rounding), then the layernorm */
    float *o1 = nans(n), *m1 = nans(N), *r1 = nans(N);
    int rc = run_ln(o1, m1, r1, sum, w, bias, N, C, 0);
    if (rc) fprintf(stderr, "emu: %s\n", emu_error());
    assert_int_equal(rc, 0);
    double *ro = (double *)malloc(n * sizeof(double)), *rm = (double *)malloc(N * sizeof(double)),
           *rr = (double *)malloc(N * sizeof(double));
    r64_layernorm_forward(ro, rm, rr, sum, w, bias, N, C);
    double e = fmax(err64(o1, ro, n), fmax(err64(m1, rm, N), err64(r1, rr, N)));
    printf("# N%d C%d: layernorm vs fp64 %.2e (bound %.0e)\n", N, C, e, BOUND);
    assert_true(e <= BOUND);

    /* fused, in every thread order: the same bits */
    for (int order = 0; order <= 4; order++) {
        float *res = nans(n), *o2 = nans(n), *m2 = nans(N), *r2 = nans(N);
        rc = run_resln(res, o2, m2, r2, a, b, w, bias, N, C, order);
        if (rc) fprintf(stderr, "emu: %s\n", emu_error());
        assert_int_equal(rc, 0);
        assert_memory_equal(res, sum, n * sizeof(float));
        assert_memory_equal(o2, o1, n * sizeof(float));
        assert_memory_equal(m2, m1, N * sizeof(float));
        assert_memory_equal(r2, r1, N * sizeof(float));
        free(res); free(o2); free(m2); free(r2);
    }

    /* in place: res is a (k = 0), then b (k = 1); no statistics */
    for (int k = 0; k < 2; k++) {
        float *x = alloc(n), *o2 = nans(n);
        memcpy(x, k ? b : a, n * sizeof(float));
        rc = run_resln(x, o2, NULL, NULL, k ? a : x, k ? x : b, w, bias, N, C, 2);
        assert_int_equal(rc, 0);
        assert_memory_equal(x, sum, n * sizeof(float));
        assert_memory_equal(o2, o1, n * sizeof(float));
        free(x); free(o2);
    }
    /* lo outputs (layernorm_forward_lo): the fp32 out rounded once, bit for bit, fused
     * (bf16) and plain (fp16); the statistics and the residual as the fp32 kernels' */
    {
        uint16_t *l1 = (uint16_t *)malloc(n * 2), *l2 = (uint16_t *)malloc(n * 2);
        uint16_t *w1 = (uint16_t *)malloc(n * 2), *w2 = (uint16_t *)malloc(n * 2);
        float *res = nans(n), *m2 = nans(N), *r2 = nans(N);
        for (size_t i = 0; i < n; i++) {
            w1[i] = llm_quant_f32_to_bf16(o1[i]);
            w2[i] = llm_quant_f32_to_f16(o1[i]);
        }
        rc = emu_launch(grid_for(N), dim3(256), 0,
                        [&] { lc_resln_fwd_kernel<LC_DT_BF16>(res, l1, m2, r2, a, b, w, bias, N, C); }, 3, 7);
        assert_int_equal(rc, 0);
        assert_memory_equal(res, sum, n * sizeof(float));
        assert_memory_equal(m2, m1, N * sizeof(float));
        assert_memory_equal(r2, r1, N * sizeof(float));
        assert_memory_equal(l1, w1, n * 2);
        rc = emu_launch(grid_for(N), dim3(256), 0,
                        [&] { lc_ln_fwd_kernel<LC_DT_F16>(l2, nullptr, nullptr, sum, w, bias, N, C); }, 1, 9);
        assert_int_equal(rc, 0);
        assert_memory_equal(l2, w2, n * 2);
        free(l1); free(l2); free(w1); free(w2); free(res); free(m2); free(r2);
    }
    free(a); free(b); free(w); free(bias); free(sum); free(o1); free(m1); free(r1);
    free(ro); free(rm); free(rr);
}

void test_resln(void **state)
{
    (void)state;
    tu_rng r = {42};
    const int shapes[][2] = {{1, 1}, {7, 3}, {37, 61}, {9, 768 + 5}, {300, 64}};
    for (size_t i = 0; i < sizeof shapes / sizeof shapes[0]; i++)
        check_case(&r, shapes[i][0], shapes[i][1]);
}

}   // namespace

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_resln),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
