/* gpu_check_off.c — gpu_check's rows for LLM_CUDA_OFF (kernels/cuda/cuda_off.cu): for
 * every part it names, a backend started with it off lacks exactly that part (its op
 * pointers NULL, every other op as in the default backend), the parts inside the backend
 * take their other path (the lse attention by GEMMs, the lo GEMMs by cublasGemmEx, the
 * fp32 bias GEMM by cuBLAS and a bias kernel,
 * uploads synchronous), and what it computes is still right; "all" takes every part,
 * an unknown name stops the start. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/ckpt.h"
#include "kernels/backend.h"
#include "kernels/cuda/cuda_backend.h"
#include "kernels/cuda/cuda_ext.h"
#include "tests/gpu/gpu_check.h"

/* The optional op pointers LLM_CUDA_OFF can clear, by the name that clears them. */
#define OFF_OPS(X)                                                                        \
    X(adamw_segs, adamw_segs) X(argmax_rows, argmax_rows) X(embed_hint, embed_hint)       \
    X(layernorm_backward_lo, layernorm_backward_lo)                                       \
    X(matmul_backward_dgelu_lo, matmul_backward_dgelu_lo)                                 \
    X(matmul_forward_gelu_lo, matmul_forward_gelu_lo)                                     \
    X(residual_layernorm_forward, residual_layernorm_forward) X(xent_fused, xent_fused)   \
    X(device_stats, device_stats) X(graphs, graph_capture) X(graphs, graph_launch)        \
    X(graphs, graph_free) X(host_alloc, host_alloc) X(host_alloc, host_free)

/* How many of the clearable pointers differ from the default backend's in a way off
 * does not explain: cleared though off does not name their part, or kept though it does
 * ("all" names every part). */
static int ops_wrong(const llm_backend *d, const llm_backend *b, const char *off)
{
    int wrong = 0, all = !strcmp(off, "all");
#define X(part, field)                                                                    \
    {                                                                                     \
        int named = all || !strcmp(off, #part);                                           \
        if (named ? b->field != NULL : b->field != d->field)                             \
            wrong++;                                                                      \
    }
    OFF_OPS(X)
#undef X
    /* the required ops stay */
    if (b->matmul_forward != d->matmul_forward || b->attention_forward_lse != d->attention_forward_lse ||
        b->layernorm_forward_lo != d->layernorm_forward_lo || b->adamw != d->adamw)
        wrong++;
    return wrong;
}

/* An upload and its read back through b: the bytes come back. */
static int roundtrip_ok(llm_backend *b)
{
    enum { N = 4099 };
    int32_t h[N], back[N];
    for (int i = 0; i < N; i++) h[i] = i * 7919 - 5;
    int32_t *d = b->alloc(b, sizeof h);
    if (!d) return 0;
    b->to_device(b, d, h, sizeof h);
    memset(h, 0, sizeof h);   /* the staging ring copied it: the caller's buffer is free */
    b->to_host(b, back, d, sizeof back);
    b->free(b, d);
    int ok = llm_backend_cuda_status(b, NULL, 0) == 0;
    for (int i = 0; ok && i < N; i++) ok = back[i] == i * 7919 - 5;
    return ok;
}

/* The lse attention forward on b at B1 T64 C128 NH2 (head size 64: the fused kernels'
 * shape), bf16; how many calls each form took ([0] fused, [1] GEMMs) and the output. */
static int lse_runs(gc *x, llm_backend *b, long runs[2], float **out)
{
    enum { B = 1, T = 64, C = 128, NH = 2 };
    float *q = rnd(x, (size_t)B * T * 3 * C, -1, 1);
    long r0[2], r1[2];
    void *dq = NULL, *dout = NULL;
    float *dl = NULL;
    uint16_t *hq = lo_host(q, (size_t)B * T * 3 * C, LLM_DT_BF16);
    int ok = (dq = b->alloc(b, (size_t)B * T * 3 * C * 2)) && (dout = b->alloc(b, (size_t)B * T * C * 2)) &&
             (dl = b->alloc(b, (size_t)B * NH * T * sizeof(float)));
    if (ok) {
        b->to_device(b, dq, hq, (size_t)B * T * 3 * C * 2);
        llm_backend_cuda_flash_path(b, -1, r0);
        b->attention_forward_lse(b, dout, dl, dq, B, T, C, NH, LLM_DT_BF16);
        llm_backend_cuda_flash_path(b, -1, r1);
        runs[0] = r1[0] - r0[0];
        runs[1] = r1[1] - r0[1];
        uint16_t *ho = xmalloc((size_t)B * T * C * 2);
        b->to_host(b, ho, dout, (size_t)B * T * C * 2);
        *out = host_vals(ho, (size_t)B * T * C, LLM_DT_BF16);
        free(ho);
        ok = llm_backend_cuda_status(b, NULL, 0) == 0;
    }
    b->free(b, dq);   /* lc_free: NULL is nothing */
    b->free(b, dout);
    b->free(b, dl);
    free(q);
    free(hq);
    return ok;
}

/* matmul_forward_lo on b (N37 C64 OC48, bf16 in, fp32 out, no bias); the library runs
 * ([0] cuBLASLt, [1] cublasGemmEx) and the output. */
static int lo_gemm_runs(gc *x, llm_backend *b, long runs[2], float **out)
{
    enum { N = 37, C = 64, OC = 48 };
    float *a = rnd(x, (size_t)N * C, -1, 1), *w = rnd(x, (size_t)OC * C, -1, 1);
    uint16_t *ha = lo_host(a, (size_t)N * C, LLM_DT_BF16), *hw = lo_host(w, (size_t)OC * C, LLM_DT_BF16);
    void *da = b->alloc(b, (size_t)N * C * 2), *dw = b->alloc(b, (size_t)OC * C * 2);
    float *dout = b->alloc(b, (size_t)N * OC * sizeof(float));
    long r0[2], r1[2];
    int ok = da && dw && dout;
    if (ok) {
        b->to_device(b, da, ha, (size_t)N * C * 2);
        b->to_device(b, dw, hw, (size_t)OC * C * 2);
        llm_backend_cuda_lo_gemm_path(b, -1, r0);
        b->matmul_forward_lo(b, dout, LLM_DT_F32, da, dw, LLM_DT_BF16, NULL, N, C, OC);
        llm_backend_cuda_lo_gemm_path(b, -1, r1);
        runs[0] = r1[0] - r0[0];
        runs[1] = r1[1] - r0[1];
        *out = xmalloc((size_t)N * OC * sizeof(float));
        b->to_host(b, *out, dout, (size_t)N * OC * sizeof(float));
        ok = llm_backend_cuda_status(b, NULL, 0) == 0;
    }
    b->free(b, da);
    b->free(b, dw);
    b->free(b, dout);
    free(a), free(w), free(ha), free(hw);
    return ok;
}

/* matmul_forward on b (N37 C64 OC48, fp32, with a bias: cuBLASLt's bias epilogue, or,
 * with cuBLASLt off, cuBLAS and the bias kernel) and its output. */
static int f32_bias_run(gc *x, llm_backend *b, float **out)
{
    enum { N = 37, C = 64, OC = 48 };
    float *a = rnd(x, (size_t)N * C, -1, 1), *w = rnd(x, (size_t)OC * C, -1, 1),
          *bias = rnd(x, OC, -1, 1);
    float *da = b->alloc(b, (size_t)N * C * sizeof(float)), *dw = b->alloc(b, (size_t)OC * C * sizeof(float)),
          *db = b->alloc(b, OC * sizeof(float)), *dout = b->alloc(b, (size_t)N * OC * sizeof(float));
    int ok = da && dw && db && dout;
    if (ok) {
        b->to_device(b, da, a, (size_t)N * C * sizeof(float));
        b->to_device(b, dw, w, (size_t)OC * C * sizeof(float));
        b->to_device(b, db, bias, OC * sizeof(float));
        b->matmul_forward(b, dout, da, dw, db, N, C, OC);
        *out = xmalloc((size_t)N * OC * sizeof(float));
        b->to_host(b, *out, dout, (size_t)N * OC * sizeof(float));
        ok = llm_backend_cuda_status(b, NULL, 0) == 0;
    }
    b->free(b, da);
    b->free(b, dw);
    b->free(b, db);
    b->free(b, dout);
    free(a), free(w), free(bias);
    return ok;
}

/* max |a - b| over max |b| (INFINITY when a has a non-finite value): the two forms
 * of the lse attention round their partial sums differently (a lo rounding a term, up
 * to a few lo spacings of the largest output); a wrong path is off by O(1) */
static double errmax(const float *a, const float *b, size_t n)
{
    double d = 0, m = 0;
    for (size_t i = 0; i < n; i++) {
        if (!isfinite(a[i])) return INFINITY;
        d = fmax(d, fabs((double)a[i] - b[i]));
        m = fmax(m, fabs((double)b[i]));
    }
    return m > 0 ? d / m : d;
}

static int start(llm_backend *b, const char *off, char *err, size_t errlen)
{
    setenv("LLM_CUDA_OFF", off, 1);
    int rc = llm_backend_cuda_init(b, 1, err, errlen);
    unsetenv("LLM_CUDA_OFF");
    return rc;
}

void gpu_check_off(gc *x)
{
    if (!x->cuda) return;
    char err[512];
    llm_backend d;
    if (start(&d, "", err, sizeof err)) {
        row_check(x, "LLM_CUDA_OFF", "default start", 1, 0, 0);
        return;
    }
    /* the default's lse attention and lo GEMM, to compare the other paths with */
    long dr[2], dg[2];
    float *dlse = NULL, *dgemm = NULL, *dbias = NULL;
    uint64_t seed = x->rng;   /* the same inputs again for each part's paths */
    int dok = lse_runs(x, &d, dr, &dlse) & lo_gemm_runs(x, &d, dg, &dgemm) & f32_bias_run(x, &d, &dbias);
    char shape[96];
    for (int i = -1;; i++) {
        const char *off = i < 0 ? "all" : llm_backend_cuda_off_name(i);
        if (!off) break;
        llm_backend b;
        snprintf(shape, sizeof shape, "%s", off);
        if (start(&b, off, err, sizeof err)) {
            row_check(x, "LLM_CUDA_OFF ops", shape, 1, 0, 0);
            continue;
        }
        int wrong = ops_wrong(&d, &b, off);
        row_check(x, "LLM_CUDA_OFF ops", shape, wrong, 0, wrong == 0);
        int all = !strcmp(off, "all");
        long up0[2], up1[2];
        llm_backend_cuda_upload_counts(&b, up0);
        int rt = roundtrip_ok(&b);
        llm_backend_cuda_upload_counts(&b, up1);
        /* staging off: the upload waited; otherwise it went through the ring */
        int sync = up1[1] - up0[1] == 1 && up1[0] == up0[0];
        int want_sync = all || !strcmp(off, "staging");
        row_check(x, "LLM_CUDA_OFF upload", shape, !(rt && sync == want_sync), 0,
                  rt && sync == want_sync);
        if (all || !strcmp(off, "flash") || !strcmp(off, "cublaslt")) {
            long r[2], g[2];
            float *o = NULL, *og = NULL, *ob = NULL;
            uint64_t now = x->rng;
            x->rng = seed;
            int ok = lse_runs(x, &b, r, &o) & lo_gemm_runs(x, &b, g, &og) & f32_bias_run(x, &b, &ob) && dok;
            /* the default: fused, cuBLASLt; each part off: the other form, same values
             * within the lo rounding (the lse forms round differently) */
            int fl = all || !strcmp(off, "flash"), lt = all || !strcmp(off, "cublaslt");
            ok = ok && dr[0] == 1 && dg[0] == 1;
            ok = ok && r[fl ? 1 : 0] == 1 && g[lt ? 1 : 0] == 1;
            double e1 = ok ? errmax(o, dlse, 64 * 128) : 1, e2 = ok ? errmax(og, dgemm, 37 * 48) : 1;
            /* the fp32 bias GEMM: the epilogue, or (cuBLASLt off) GEMM then bias kernel */
            double e3 = ok ? errmax(ob, dbias, 37 * 48) : 1;
            snprintf(shape, sizeof shape, "%s: paths, vs default", off);
            row_check(x, "LLM_CUDA_OFF paths", shape, fmax(e1, fmax(e2, e3)), 2e-2,
                      ok && e1 <= 2e-2 && e2 <= 1e-5 && e3 <= 1e-5);
            free(o);
            free(og);
            free(ob);
            x->rng = now;
        }
        llm_backend_cuda_free(&b);
    }
    free(dlse);
    free(dgemm);
    free(dbias);
    llm_backend_cuda_free(&d);
    /* a misspelt part: no backend, the name in the message */
    llm_backend b;
    int rc = start(&b, "xent_fused, flsh", err, sizeof err);
    int ok = rc != 0 && strstr(err, "unknown part 'flsh'");
    row_check(x, "LLM_CUDA_OFF unknown name", "'xent_fused, flsh'", !ok, 0, ok);
    if (!rc) llm_backend_cuda_free(&b);
}
