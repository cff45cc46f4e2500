/* test_emu_flash.cpp — the fused ("flash") attention kernels, the mma.sync ones of
 * kernels/cuda/cuda_flash2.cuh and the WMMA ones of cuda_flash.cuh, run on the CPU by
 * tests/emu (no GPU, no nvcc), against the double reference that
 * scripts/gpu-check.sh uses on a GPU (tests/gpu/ref64.c) and with its bounds
 * (r64_lse_bounds: out and dqkv, lo outputs, within one rounding of the double sums plus
 * two lo units of roundoff of the sum of |terms|, lse within 1e-5 relative);
 * each case again with the threads resumed in four other orders (emu_launch), bit for
 * bit equal (a missing barrier would show); outputs start as NaN (all bits set), so an
 * element no thread wrote fails; dqkv is overwritten, never read.  Also checks that the emulator itself catches what it claims to. */
#include "tests/emu/cuda_emu.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

extern "C" {
#include "common/ckpt.h"
#include "tests/gpu/ref64.h"
#include "tests/unit/testutil.h"
}

#include "kernels/cuda/cuda_flash.cuh"
#include "kernels/cuda/cuda_flash2.cuh"

namespace {

template <class T> T *alloc(size_t n)
{
    T *p = (T *)malloc((n ? n : 1) * sizeof(T));
    assert_non_null(p);
    return p;
}

float *nans(size_t n)
{
    float *p = alloc<float>(n);
    for (size_t i = 0; i < n; i++) p[i] = NAN;
    return p;
}

uint16_t *lo_nans(size_t n)
{
    uint16_t *p = alloc<uint16_t>(n);
    memset(p, 0xff, n * 2);
    return p;
}

float *lo_vals(const uint16_t *h, size_t n, int lo);

uint16_t to_lo(float v, int lo) { return lo == LLM_DT_BF16 ? llm_quant_f32_to_bf16(v) : llm_quant_f32_to_f16(v); }
float from_lo(uint16_t h, int lo) { return lo == LLM_DT_BF16 ? llm_quant_bf16_to_f32(h) : llm_quant_f16_to_f32(h); }

float *lo_vals(const uint16_t *h, size_t n, int lo)
{
    float *f = alloc<float>(n);
    for (size_t i = 0; i < n; i++) f[i] = from_lo(h[i], lo);
    return f;
}

/* V 1: the WMMA kernels, 2: the mma.sync ones */
template <int V, int LO, int HS>
int run_fwd(uint16_t *out, float *lse, const uint16_t *q, int B, int T, int NH, int order)
{
    int C = NH * HS;
    dim3 grid((unsigned)((T + 63) / 64), (unsigned)NH, (unsigned)B);
    float scale = 1.0f / sqrtf((float)HS);
    if (V == 2)
        return emu_launch(grid, dim3(F2_THREADS), f2_fwd_smem<HS>(),
                          [&] { lc_flash2_fwd_kernel<LO, HS>(out, lse, q, T, C, NH, scale * F2_LOG2E); },
                          order, 7);
    return emu_launch(grid, dim3(FL_THREADS), fl_fwd_smem<HS>(),
                      [&] { lc_flash_fwd_kernel<LO, HS>(out, lse, q, T, C, NH, scale); }, order, 7);
}

template <int V, int LO, int HS>
int run_bwd(uint16_t *dqkv, const uint16_t *q, const uint16_t *d, const float *lse, const float *D,
            int B, int T, int NH, int order)
{
    int C = NH * HS;
    dim3 grid((unsigned)((T + 63) / 64), (unsigned)NH, (unsigned)B);
    float scale = 1.0f / sqrtf((float)HS), sl2 = scale * F2_LOG2E;
    if (V == 2) {
        if (emu_launch(grid, dim3(F2_THREADS), f2_bwd_smem<HS>(),
                       [&] { lc_flash2_bwd_kv_kernel<LO, HS>(dqkv, q, d, lse, D, T, C, NH, sl2, scale); },
                       order, 11))
            return -1;
        return emu_launch(grid, dim3(F2_THREADS), f2_bwd_smem<HS>(),
                          [&] { lc_flash2_bwd_q_kernel<LO, HS>(dqkv, q, d, lse, D, T, C, NH, sl2, scale); },
                          order, 13);
    }
    if (emu_launch(grid, dim3(FL_THREADS), fl_bwd_smem<HS>(),
                   [&] { lc_flash_bwd_kv_kernel<LO, HS>(dqkv, q, d, lse, D, T, C, NH, scale); },
                   order, 11))
        return -1;
    return emu_launch(grid, dim3(FL_THREADS), fl_bwd_smem<HS>(),
                      [&] { lc_flash_bwd_q_kernel<LO, HS>(dqkv, q, d, lse, D, T, C, NH, scale); },
                      order, 13);
}

template <int V, int LO, int HS> void check_case(tu_rng *rng, int B, int T, int NH)
{
    const int lo = LO == LC_DT_BF16 ? LLM_DT_BF16 : LLM_DT_F16;
    double bmax, bmean;
    int C = NH * HS;
    size_t C3 = 3 * (size_t)C, nq = (size_t)B * T * C3, no = (size_t)B * T * C,
           nl = (size_t)B * NH * T;
    float *qkv = alloc<float>(nq), *qr = alloc<float>(nq), *dout = alloc<float>(no);
    float *dq0 = alloc<float>(nq);
    uint16_t *q = alloc<uint16_t>(nq), *d = alloc<uint16_t>(no);
    tu_fill(rng, qkv, nq, -2, 2);
    tu_fill(rng, dout, no, -1, 1);
    tu_fill(rng, dq0, nq, -1, 1);
    for (size_t i = 0; i < nq; i++) {
        q[i] = to_lo(qkv[i], lo);
        qr[i] = from_lo(q[i], lo);
    }
    for (size_t i = 0; i < no; i++) d[i] = to_lo(dout[i], lo);

    /* forward */
    double *y = alloc<double>(no), *ys = alloc<double>(no), *lr = alloc<double>(nl);
    r64_attention_lse_forward(y, ys, lr, qr, B, T, C, NH, lo);
    uint16_t *outl = lo_nans(no);
    float *lse = nans(nl);
    int rc = run_fwd<V, LO, HS>(outl, lse, q, B, T, NH, 0);
    float *out = lo_vals(outl, no, lo);
    if (rc) fprintf(stderr, "emu: %s\n", emu_error());
    assert_int_equal(rc, 0);
    double el = 0, mx, mean;
    for (size_t i = 0; i < nl; i++) {
        double e = isfinite(lse[i]) ? fabs(lse[i] - lr[i]) / (1 + fabs(lr[i])) : INFINITY;
        if (!(e <= el)) el = e;
    }
    r64_scaled_err_lo(out, y, ys, no, lo, &mx, &mean);
    r64_lse_bounds(lo, 1, no, &bmax, &bmean);
    printf("# fwd v%d %s B%d T%d NH%d hs%d: lse %.2e, out max %.3e (bound %.3e) mean %.3e (%.3e)\n",
           V, lo == LLM_DT_BF16 ? "bf16" : "f16", B, T, NH, HS, el, mx, bmax, mean, bmean);
    assert_true(el <= 1e-5);
    assert_true(mx <= bmax);
    assert_true(mean <= bmean);
    for (int order = 1; order <= 4; order++) {
        uint16_t *o2 = lo_nans(no);
        float *l2 = nans(nl);
        int r2 = run_fwd<V, LO, HS>(o2, l2, q, B, T, NH, order);
        assert_int_equal(r2, 0);
        assert_memory_equal(o2, outl, no * 2);
        assert_memory_equal(l2, lse, nl * sizeof(float));
        free(o2);
        free(l2);
    }

    /* backward from the reference's out (rounded to lo) and lse, D = rowsum(dout * out)
     * of the lo values in fp32 */
    float *O = alloc<float>(no), *L = alloc<float>(nl), *D = alloc<float>(nl);
    float *dr = lo_vals(d, no, lo);
    for (size_t i = 0; i < no; i++) O[i] = from_lo(to_lo((float)y[i], lo), lo);
    for (size_t i = 0; i < nl; i++) L[i] = (float)lr[i];
    int hs = HS;
    for (int b = 0; b < B; b++)
        for (int h = 0; h < NH; h++)
            for (int t = 0; t < T; t++) {
                size_t go = ((size_t)b * T + t) * C + (size_t)h * hs;
                double s = 0;
                for (int i = 0; i < hs; i++) s += (double)dr[go + i] * O[go + i];
                D[((size_t)b * NH + h) * T + t] = (float)s;
            }
    double *r = alloc<double>(nq), *rs = alloc<double>(nq);
    memset(r, 0, nq * sizeof(double));
    memset(rs, 0, nq * sizeof(double));
    r64_attention_lse_backward(r, rs, qr, dr, O, L, B, T, C, NH, lo);
    uint16_t *dql = lo_nans(nq);
    rc = run_bwd<V, LO, HS>(dql, q, d, L, D, B, T, NH, 0);
    if (rc) fprintf(stderr, "emu: %s\n", emu_error());
    assert_int_equal(rc, 0);
    float *dq = lo_vals(dql, nq, lo);
    r64_scaled_err_lo(dq, r, rs, nq, lo, &mx, &mean);
    r64_lse_bounds(lo, 0, nq, &bmax, &bmean);
    printf("# bwd v%d %s B%d T%d NH%d hs%d: dqkv max %.3e (bound %.3e) mean %.3e (%.1e)\n",
           V, lo == LLM_DT_BF16 ? "bf16" : "f16", B, T, NH, HS, mx, bmax, mean, bmean);
    assert_true(mx <= bmax);
    assert_true(mean <= bmean);
    for (int order = 1; order <= 4; order++) {
        uint16_t *d2 = lo_nans(nq);
        int r2 = run_bwd<V, LO, HS>(d2, q, d, L, D, B, T, NH, order);
        assert_int_equal(r2, 0);
        assert_memory_equal(d2, dql, nq * 2);
        free(d2);
    }
    free(qkv); free(qr); free(dout); free(dq0); free(q); free(d); free(y); free(ys); free(lr);
    free(out); free(outl); free(lse); free(O); free(L); free(D); free(r); free(rs); free(dq);
    free(dql); free(dr);
}

/* the shapes of gpu_check's fused rows: one position, partial tiles, head sizes 32 / 128 */
template <int V, int LO> void cases(tu_rng *rng)
{
    check_case<V, LO, 64>(rng, 1, 1, 1);
    check_case<V, LO, 64>(rng, 2, 67, 2);
    check_case<V, LO, 32>(rng, 1, 129, 3);
    check_case<V, LO, 128>(rng, 1, 130, 2);
    if (LO == LC_DT_BF16) check_case<V, LO, 64>(rng, 1, 1024, 1);   /* GPT-2's: 16 key tiles */
}

void test_flash_bf16(void **state)
{
    (void)state;
    tu_rng rng = {0x5eed1};
    cases<1, LC_DT_BF16>(&rng);
}

void test_flash_f16(void **state)
{
    (void)state;
    tu_rng rng = {0x5eed2};
    cases<1, LC_DT_F16>(&rng);
}

void test_flash2_bf16(void **state)
{
    (void)state;
    tu_rng rng = {0x5eed3};
    cases<2, LC_DT_BF16>(&rng);
}

void test_flash2_f16(void **state)
{
    (void)state;
    tu_rng rng = {0x5eed4};
    cases<2, LC_DT_F16>(&rng);
}

/* ---- the emulator catches what it says it does ---- */

/* thread i reads what thread i + 1 wrote to shared memory, with or without a barrier */
void shift_kernel(float *out, int sync, float base)
{
    __shared__ float sh[64];
    int i = (int)threadIdx.x;
    sh[i] = base + (float)i;
    if (sync) __syncthreads();
    out[i] = sh[(i + 1) % 64];
}

void test_emu_race(void **state)
{
    (void)state;
    float a[64];
    int run = 0;
    for (int sync = 1; sync >= 0; sync--)
        for (int order = 0; order <= 1; order++) {
            float base = (float)(1000 * ++run);
            int rc = emu_launch(dim3(1), dim3(64), 0, [&] { shift_kernel(a, sync, base); }, order);
            assert_int_equal(rc, 0);
            int wrong = 0;
            for (int i = 0; i < 64; i++) wrong += a[i] != base + (float)((i + 1) % 64);
            /* without the barrier, the values read depend on the order: stale ones show */
            if (sync) assert_int_equal(wrong, 0);
            else assert_true(wrong > 0);
        }
}

/* lanes of one warp at different barriers; a warp sum through shuffles */
void mixed_kernel(void)
{
    if (threadIdx.x % 2) __syncwarp();
    else __syncthreads();
}

void sum_kernel(int *out)
{
    int v = (int)threadIdx.x;
    for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
    out[threadIdx.x] = v;
}

void test_emu_barriers(void **state)
{
    (void)state;
    int rc = emu_launch(dim3(1), dim3(64), 0, [&] { mixed_kernel(); });
    assert_int_equal(rc, -1);
    assert_non_null(strstr(emu_error(), "warp"));
    int out[64];
    rc = emu_launch(dim3(1), dim3(64), 0, [&] { sum_kernel(out); }, 2, 3);
    assert_int_equal(rc, 0);
    for (int i = 0; i < 64; i++) assert_int_equal(out[i], i < 32 ? 496 : 32 * 32 + 496);
}

/* What a GPU does not allow although threads run one after another here: lanes of a
 * warp at different warp-level operations (a shuffle in a lane-dependent branch), a
 * warp with some lanes exited and the others at __syncthreads (bar.sync is .aligned),
 * ldmatrix / mma.sync with exited lanes, a shuffle reading an exited lane. */
void div_shfl_kernel(int *out)
{
    int v = (int)threadIdx.x;
    if (threadIdx.x % 32 < 16) v += __shfl_xor_sync(0xffffffffu, v, 1);
    __syncwarp();
    out[threadIdx.x] = v;
}

/* one shuffle in each branch of a lane-dependent if: as many shuffles in every lane,
 * but at two different instructions */
void div_shfl2_kernel(int *out)
{
    int v = (int)threadIdx.x;
    if (threadIdx.x % 2) v += __shfl_xor_sync(0xffffffffu, v, 1);
    else v -= __shfl_xor_sync(0xffffffffu, v, 1);
    out[threadIdx.x] = v;
}

void exit_bar_kernel(float *out, int n)
{
    __shared__ float sh[64];
    int i = (int)threadIdx.x;
    if (i >= n) return;
    sh[i] = (float)i;
    __syncthreads();
    out[i] = sh[(i + 1) % n];
}

/* a barrier inside a loop whose trip count differs between threads: the threads with
 * fewer trips meet the others' in-loop barrier at the one after the loop */
void loop_bar_kernel(float *out)
{
    __shared__ float sh[64];
    int i = (int)threadIdx.x;
    float acc = 0.0f;
    for (int k = 0; k < 1 + (i >= 32); k++) {
        sh[i] = (float)(i + k);
        __syncthreads();
        acc += sh[(i + 1) % 64];
    }
    __syncthreads();
    out[i] = acc;
}

void exit_mma_kernel(const uint16_t *p, uint32_t *o)
{
    if (threadIdx.x == 31) return;
    uint32_t r[4];
    lc_ldsm4<false>(r, p + 8 * threadIdx.x);
    o[threadIdx.x] = r[0];
}

void exit_shfl_kernel(int *out)
{
    int v = (int)threadIdx.x;
    if (threadIdx.x >= 16) return;
    v += __shfl_down_sync(0xffffffffu, v, 8);
    out[threadIdx.x] = v;
}

void test_emu_divergence(void **state)
{
    (void)state;
    int iout[64];
    float fout[64];
    int rc = emu_launch(dim3(1), dim3(64), 0, [&] { div_shfl_kernel(iout); });
    assert_int_equal(rc, -1);
    assert_non_null(strstr(emu_error(), "divergent"));
    rc = emu_launch(dim3(1), dim3(32), 0, [&] { div_shfl2_kernel(iout); });
    assert_int_equal(rc, -1);
    assert_non_null(strstr(emu_error(), "divergent"));
    /* whole warps may exit before a barrier, part of a warp may not */
    for (int order = 0; order <= 4; order++) {
        rc = emu_launch(dim3(1), dim3(64), 0, [&] { exit_bar_kernel(fout, 32); }, order, 5);
        assert_int_equal(rc, 0);
        for (int i = 0; i < 32; i++) assert_true(fout[i] == (float)((i + 1) % 32));
        rc = emu_launch(dim3(1), dim3(64), 0, [&] { exit_bar_kernel(fout, 40); }, order, 5);
        assert_int_equal(rc, -1);
        assert_non_null(strstr(emu_error(), "exited"));
    }
    rc = emu_launch(dim3(1), dim3(64), 0, [&] { loop_bar_kernel(fout); });
    assert_int_equal(rc, -1);
    assert_non_null(strstr(emu_error(), "different __syncthreads"));
    alignas(16) uint16_t p[8 * 32] = {0};
    uint32_t o[32];
    rc = emu_launch(dim3(1), dim3(32), 0, [&] { exit_mma_kernel(p, o); });
    assert_int_equal(rc, -1);
    assert_non_null(strstr(emu_error(), "exited"));
    rc = emu_launch(dim3(1), dim3(32), 0, [&] { exit_shfl_kernel(iout); });
    assert_int_equal(rc, -1);
    assert_non_null(strstr(emu_error(), "exited"));
}

/* a WMMA load from a pointer that is not 256-bit aligned is refused */
void misaligned_kernel(const uint16_t *p, float *o)
{
    using namespace nvcuda;
    wmma::fragment<wmma::matrix_a, 16, 16, 16, __nv_bfloat16, wmma::row_major> a;
    wmma::load_matrix_sync(a, (const __nv_bfloat16 *)(p + 8), 16);
    o[threadIdx.x] = a.v[0][0];
}

void test_emu_wmma_align(void **state)
{
    (void)state;
    alignas(32) uint16_t p[16 * 16 + 8] = {0};
    float o[32];
    int rc = emu_launch(dim3(1), dim3(32), 0, [&] { misaligned_kernel(p, o); });
    assert_int_equal(rc, -1);
    assert_non_null(strstr(emu_error(), "aligned"));
}

/* ldmatrix from a row address that is not 16-byte aligned is refused */
void ldsm_kernel(const uint16_t *p, uint32_t *o)
{
    uint32_t r[4];
    lc_ldsm4<false>(r, p + (threadIdx.x == 5 ? 4 : 8 * threadIdx.x));
    o[threadIdx.x] = r[0];
}

void test_emu_ldmatrix_align(void **state)
{
    (void)state;
    alignas(16) uint16_t p[8 * 32] = {0};
    uint32_t o[32];
    int rc = emu_launch(dim3(1), dim3(32), 0, [&] { ldsm_kernel(p, o); });
    assert_int_equal(rc, -1);
    assert_non_null(strstr(emu_error(), "aligned"));
}

/* cp.async: the data is in shared memory only after the wait (before it, the 0xff
 * fill shows); a thread that never waits is an error */
void cp_kernel(const float *src, float *out, int wait)
{
    LC_DYN_SMEM(sm);
    float *sh = (float *)sm;
    int i = (int)threadIdx.x;
    lc_cp<4>(sh + i, src + i);
    lc_cp_commit();
    out[i] = sh[i];   /* too early */
    if (wait) lc_cp_wait<0>();
    __syncthreads();
    out[32 + i] = sh[(i + 1) % 32];
}

void test_emu_cp_async(void **state)
{
    (void)state;
    float src[32], out[64];
    for (int i = 0; i < 32; i++) src[i] = (float)i;
    int rc = emu_launch(dim3(1), dim3(32), 32 * sizeof(float), [&] { cp_kernel(src, out, 1); });
    assert_int_equal(rc, 0);
    for (int i = 0; i < 32; i++) {
        assert_true(isnan(out[i]));
        assert_true(out[32 + i] == (float)((i + 1) % 32));
    }
    rc = emu_launch(dim3(1), dim3(32), 32 * sizeof(float), [&] { cp_kernel(src, out, 0); });
    assert_int_equal(rc, -1);
    assert_non_null(strstr(emu_error(), "cp.async"));
}

/* mma.sync through ldmatrix on a 16 x 16 times 16 x 8 product of small integers (exact
 * in bf16 and fp32): the layouts of cuda_mma.cuh's comment, element by element */
void mma_kernel(const uint16_t *a, const uint16_t *bt, float *d)
{
    int lane = (int)threadIdx.x, g = lane >> 2, t = lane & 3;
    uint32_t af[4], bf[4];
    /* A rows 0-15 (16-element rows): matrices (rows 0-7 | 8-15) x (cols 0-7 | 8-15) */
    lc_ldsm4<false>(af, a + ((lane & 7) + ((lane >> 3) & 1) * 8) * 16 + (lane >> 4) * 8);
    /* B^T (8 x 16: row n holds column n of B): matrices (k 0-7 | 8-15), x2 used */
    lc_ldsm4<false>(bf, bt + (lane & 7) * 16 + ((lane >> 3) & 1) * 8);
    float acc[4] = {0, 0, 0, 0};
    lc_mma16816<LC_DT_BF16>(acc, af, bf);
    for (int e = 0; e < 4; e++) d[(g + (e >> 1) * 8) * 8 + 2 * t + (e & 1)] = acc[e];
}

void test_emu_mma(void **state)
{
    (void)state;
    alignas(16) uint16_t a[16 * 16], bt[8 * 16];
    float A[16][16], B[16][8], d[16 * 8];
    for (int r = 0; r < 16; r++)
        for (int k = 0; k < 16; k++) {
            A[r][k] = (float)((r * 7 + k * 3) % 11 - 5);
            a[r * 16 + k] = llm_quant_f32_to_bf16(A[r][k]);
        }
    for (int k = 0; k < 16; k++)
        for (int n = 0; n < 8; n++) {
            B[k][n] = (float)((k * 5 + n * 13) % 9 - 4);
            bt[n * 16 + k] = llm_quant_f32_to_bf16(B[k][n]);
        }
    int rc = emu_launch(dim3(1), dim3(32), 0, [&] { mma_kernel(a, bt, d); });
    assert_int_equal(rc, 0);
    for (int r = 0; r < 16; r++)
        for (int n = 0; n < 8; n++) {
            float s = 0;
            for (int k = 0; k < 16; k++) s += A[r][k] * B[k][n];
            assert_true(d[r * 8 + n] == s);
        }
}

}  // namespace

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_emu_race),
        cmocka_unit_test(test_emu_barriers),
        cmocka_unit_test(test_emu_divergence),
        cmocka_unit_test(test_emu_wmma_align),
        cmocka_unit_test(test_emu_ldmatrix_align),
        cmocka_unit_test(test_emu_cp_async),
        cmocka_unit_test(test_emu_mma),
        cmocka_unit_test(test_flash_bf16),
        cmocka_unit_test(test_flash_f16),
        cmocka_unit_test(test_flash2_bf16),
        cmocka_unit_test(test_flash2_f16),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
