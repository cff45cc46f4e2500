/* gpu_check_rec.cu — gpu_check's rows for what the CUDA backend must do the same on
 * every device and driver, whatever the emulator (tests/emu) can or cannot see:
 *
 *   - graph_capture refuses host work inside the recorded ops: a to_device (its copy
 *     out of a staging-ring slot would replay from whatever the slot holds at each
 *     launch, and its host-to-device copy on the copy stream would not be recorded),
 *     to_host, sync, alloc: the recording fails (-1) with the backend's error naming
 *     it, nothing of it runs, and the backend works on afterwards; so does an op on the
 *     backend's grow-only scratch (layernorm_backward's partial sums), whose address a
 *     graph would keep after a later, larger call freed it;
 *   - with two devices or more (LLM_EMU_DEVICES=2 on the emulated build, which this file
 *     sets for its rows; skipped on a machine with one GPU): the backend comes up on the
 *     thread's current device (as the NCCL setup selects a rank's GPU before it), and the
 *     shared-memory opt-ins (layernorm_backward past 48 KiB, the fused attention of head
 *     size 128) are made on each device, not once per process.
 * Compiled by nvcc for the GPU, by the host compiler against tests/emu when emulated. */
#include <cuda_runtime.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

extern "C" {
#include "common/ckpt.h"
#include "kernels/backend.h"
#include "kernels/cuda/cuda_backend.h"
#include "kernels/cuda/cuda_ext.h"
#include "tests/gpu/gpu_check.h"
}

namespace {

struct rec_arg {
    llm_backend *be;
    int what;           /* 0 to_device, 1 to_host, 2 sync, 3 alloc */
    float *d, *h;
    void *got;
};

void rec_ops(void *p)
{
    rec_arg *a = (rec_arg *)p;
    llm_backend *be = a->be;
    be->zero(be, a->d, 16 * sizeof(float));   /* recordable; must not run either */
    if (a->what == 0) be->to_device(be, a->d, a->h, 16 * sizeof(float));
    else if (a->what == 1) be->to_host(be, a->h, a->d, 16 * sizeof(float));
    else if (a->what == 2) be->sync(be);
    else a->got = be->alloc(be, 64);
}

void rec_rows(gc *x)
{
    static const char *names[] = {"to_device", "to_host", "sync", "alloc"};
    llm_backend *be = &x->g;
    char msg[256];
    printf("gpu_check: 4 expected 'while a graph is being recorded' errors follow\n");
    fflush(stdout);
    for (int w = 0; w < 4; w++) {
        float h[16], back[16];
        for (int i = 0; i < 16; i++) h[i] = (float)(i + 1);
        float *d = (float *)be->alloc(be, sizeof h);
        if (!d) { row_check(x, "record refuses host work", "alloc failed", 1, 0, 0); return; }
        be->to_device(be, d, h, sizeof h);
        for (int i = 0; i < 16; i++) h[i] = -1.0f;   /* what a wrongly recorded upload sends */
        rec_arg a = {be, w, d, h, NULL};
        void *graph = (void *)1;
        int rc = be->graph_capture(be, rec_ops, &a, &graph);
        int err = llm_backend_cuda_status(be, msg, sizeof msg);   /* taken: not the row's */
        be->to_host(be, back, d, sizeof back);
        int kept = 1;
        for (int i = 0; i < 16; i++) kept &= back[i] == (float)(i + 1);
        /* the backend works on: a fresh upload lands */
        for (int i = 0; i < 16; i++) h[i] = (float)(100 + i);
        be->to_device(be, d, h, sizeof h);
        be->to_host(be, back, d, sizeof back);
        int works = back[15] == 115.0f && back[0] == 100.0f;
        int pass = rc == -1 && !graph && err && strstr(msg, names[w]) && strstr(msg, "recorded") &&
                   kept && works && !a.got;
        char sh[160];
        snprintf(sh, sizeof sh, "%s: rc %d%s%s%s", names[w], rc, err ? "" : ", no error",
                 kept ? "" : ", the ops ran", works ? "" : ", backend broken after");
        row_check(x, "record refuses host work", sh, pass ? 0.0 : 1.0, 0.0, pass);
        if (a.got) be->free(be, a.got);
        be->free(be, d);
    }
}

struct ln_arg {
    llm_backend *be;
    float *buf;
    int N, C;
};

/* layernorm_backward of (N, C) on buf: dinp, dout, inp (N*C each), w, dw, db (C), mean,
 * rstd (N) */
void ln_ops(void *p)
{
    ln_arg *a = (ln_arg *)p;
    size_t nc = (size_t)a->N * a->C;
    float *dinp = a->buf, *dout = dinp + nc, *inp = dout + nc, *w = inp + nc, *dw = w + a->C;
    float *db = dw + a->C, *mean = db + a->C, *rstd = mean + a->N;
    a->be->layernorm_backward(a->be, dinp, dw, db, dout, inp, w, mean, rstd, a->N, a->C);
}

void scratch_row(gc *x)
{
    llm_backend *be = &x->g;
    char msg[256] = "";
    const int N = 4, C = 64;
    size_t words = 3 * (size_t)N * C + 3 * (size_t)C + 2 * N;
    float *buf = (float *)be->alloc(be, words * sizeof(float));
    if (!buf) { row_check(x, "record refuses scratch", "alloc failed", 1, 0, 0); return; }
    ln_arg a = {be, buf, N, C};
    ln_ops(&a);   /* unrecorded: the scratch is made, large enough for the recording */
    be->sync(be);
    int pre = llm_backend_cuda_status(be, msg, sizeof msg);
    printf("gpu_check: 1 expected 'while a graph is being recorded' error follows\n");
    fflush(stdout);
    void *graph = NULL;
    int rc = be->graph_capture(be, ln_ops, &a, &graph);
    int err = llm_backend_cuda_status(be, msg, sizeof msg);
    int pass = !pre && rc == -1 && !graph && err && strstr(msg, "scratch");
    char sh[96];
    snprintf(sh, sizeof sh, "layernorm_backward N%d C%d: rc %d%s", N, C, rc, err ? "" : ", no error");
    row_check(x, "record refuses scratch", sh, pass ? 0.0 : 1.0, 0.0, pass);
    if (graph) be->graph_free(be, graph);
    be->free(be, buf);
}

/* layernorm_backward at C = 6400 (one warp's column sums, 51 KiB of shared memory) on
 * be: 0 when it ran without a backend error, else -1 with the error in msg. */
int ln_bwd_big(llm_backend *be, char *msg, size_t len)
{
    const int N = 2, C = 6400;
    size_t nc = (size_t)N * C;
    float *h = (float *)calloc(nc, sizeof *h);
    float *buf = (float *)be->alloc(be, (4 * nc + 2 * (size_t)C + 2 * N) * sizeof(float));
    if (!h || !buf) { free(h); snprintf(msg, len, "out of memory"); return -1; }
    for (size_t i = 0; i < nc; i++) h[i] = (float)((i * 37) % 101) / 101.0f - 0.5f;
    float *dinp = buf, *dout = dinp + nc, *inp = dout + nc, *w = inp + nc, *dw = w + C;
    float *db = dw + C, *mean = db + C, *rstd = mean + N;
    be->to_device(be, dout, h, nc * sizeof(float));
    be->to_device(be, inp, h, nc * sizeof(float));
    be->to_device(be, w, h, (size_t)C * sizeof(float));
    float ms[2 * 2] = {0.01f, -0.02f, 1.5f, 2.0f};
    be->to_device(be, mean, ms, sizeof ms);   /* mean then rstd: adjacent */
    be->layernorm_backward(be, dinp, dw, db, dout, inp, w, mean, rstd, N, C);
    be->sync(be);
    int rc = llm_backend_cuda_status(be, msg, len) ? -1 : 0;
    be->free(be, buf);
    free(h);
    return rc;
}

/* attention_forward_lse at head size 128 (the fused kernels' opt-in past 48 KiB): 0, or
 * -1 with the backend's error in msg. */
int flash_big(llm_backend *be, char *msg, size_t len)
{
    const int B = 1, T = 64, C = 128, NH = 1;
    size_t nq = (size_t)B * T * 3 * C;
    float *h = (float *)malloc(nq * sizeof *h);
    if (!h) { snprintf(msg, len, "out of memory"); return -1; }
    for (size_t i = 0; i < nq; i++) h[i] = (float)((i * 53) % 97) / 97.0f - 0.5f;
    float *qf = (float *)be->alloc(be, nq * sizeof(float));
    void *q = be->alloc(be, nq * 2), *out = be->alloc(be, (size_t)B * T * C * 2);
    float *lse = (float *)be->alloc(be, (size_t)B * NH * T * sizeof(float));
    int rc = -1;
    if (qf && q && out && lse) {
        be->to_device(be, qf, h, nq * sizeof(float));
        be->cast_lo(be, q, qf, nq, LLM_DT_BF16);
        be->attention_forward_lse(be, out, lse, q, B, T, C, NH, LLM_DT_BF16);
        be->sync(be);
        rc = llm_backend_cuda_status(be, msg, len) ? -1 : 0;
    } else {
        snprintf(msg, len, "out of device memory");
    }
    be->free(be, lse);
    be->free(be, out);
    be->free(be, q);
    be->free(be, qf);
    free(h);
    return rc;
}

void device_rows(gc *x)
{
    char err[256] = "", msg[256] = "";
    /* the emulated build models a second device when asked (tests/emu/cuda_rt.cpp) */
    cudaDeviceProp p;
    int emu = cudaGetDeviceProperties(&p, 0) == cudaSuccess && strstr(p.name, "emulated");
    const char *was = getenv("LLM_EMU_DEVICES");
    char saved[32] = "";
    if (was) snprintf(saved, sizeof saved, "%s", was);
    if (emu) setenv("LLM_EMU_DEVICES", "2", 1);
    int n = 0, cur = 0;
    if (cudaGetDeviceCount(&n) != cudaSuccess || n < 2 || cudaGetDevice(&cur) != cudaSuccess) {
        (void)cudaGetLastError();
        printf("gpu_check: one device: the two-device rows skipped\n");
        if (emu) { if (was) setenv("LLM_EMU_DEVICES", saved, 1); else unsetenv("LLM_EMU_DEVICES"); }
        return;
    }
    /* on x->g's device first (the opt-ins made there), then on another one */
    int other = cur == 0 ? 1 : 0;
    int ok0 = !ln_bwd_big(&x->g, msg, sizeof msg) && !flash_big(&x->g, msg, sizeof msg);
    row_check(x, "opt-ins on the first device", ok0 ? "ln C6400, flash hs128" : msg, !ok0, 0, ok0);
    const char *dv = getenv("LLM_CUDA_DEVICE");
    char dsaved[32] = "";
    if (dv) { snprintf(dsaved, sizeof dsaved, "%s", dv); unsetenv("LLM_CUDA_DEVICE"); }
    llm_backend b;
    int on = -1;
    if (cudaSetDevice(other) != cudaSuccess || llm_backend_cuda_init(&b, 1, err, sizeof err)) {
        row_check(x, "backend on the current device", err, 1, 0, 0);
    } else {
        cudaGetDevice(&on);
        char sh[96];
        snprintf(sh, sizeof sh, "selected %d, backend on %d", other, on);
        row_check(x, "backend on the current device", sh, on != other, 0, on == other);
        llm_backend_cuda_free(&b);
    }
    /* no device chosen by the process (current 0): the launcher's local rank picks one,
     * modulo the devices; NCCL's rank passed in does the same (llm_cuda_select_device) */
    {
        const char *lr = getenv("LOCAL_RANK");
        char lsaved[32] = "";
        if (lr) snprintf(lsaved, sizeof lsaved, "%s", lr);
        cudaSetDevice(0);
        char sh[96];
        int d = -1, want = (2 * n + 1) % n;
        snprintf(sh, sizeof sh, "%d", 2 * n + 1);
        setenv("LOCAL_RANK", sh, 1);
        int rc = llm_cuda_select_device(-1, &d, err, sizeof err);
        snprintf(sh, sizeof sh, "LOCAL_RANK %d of %d devices: %d", 2 * n + 1, n, d);
        row_check(x, "device from the local rank", rc ? err : sh, rc || d != want, 0,
                  !rc && d == want);
        unsetenv("LOCAL_RANK");
        rc = llm_cuda_select_device(n + 1, &d, err, sizeof err);
        snprintf(sh, sizeof sh, "rank %d of %d devices: %d", n + 1, n, d);
        row_check(x, "device from NCCL's local rank", rc ? err : sh, rc || d != 1 % n, 0,
                  !rc && d == 1 % n);
        setenv("LLM_CUDA_DEVICE", "0", 1);   /* the user's word wins over the rank */
        rc = llm_cuda_select_device(n + 1, &d, err, sizeof err);
        snprintf(sh, sizeof sh, "LLM_CUDA_DEVICE 0, rank %d: %d", n + 1, d);
        row_check(x, "LLM_CUDA_DEVICE over the rank", rc ? err : sh, rc || d != 0, 0, !rc && d == 0);
        unsetenv("LLM_CUDA_DEVICE");
        if (lr) setenv("LOCAL_RANK", lsaved, 1);
    }
    /* the opt-ins on the other device, named (so they are checked whatever the row above) */
    char od[16];
    snprintf(od, sizeof od, "%d", other);
    setenv("LLM_CUDA_DEVICE", od, 1);
    if (llm_backend_cuda_init(&b, 1, err, sizeof err)) {
        row_check(x, "opt-ins on a second device", err, 1, 0, 0);
    } else {
        int ok1 = !ln_bwd_big(&b, msg, sizeof msg);
        row_check(x, "ln_bwd opt-in on a second device", ok1 ? "C6400" : msg, !ok1, 0, ok1);
        ok1 = !flash_big(&b, msg, sizeof msg);
        row_check(x, "flash opt-in on a second device", ok1 ? "hs128 bf16" : msg, !ok1, 0, ok1);
        llm_backend_cuda_free(&b);
    }
    unsetenv("LLM_CUDA_DEVICE");
    if (dv) setenv("LLM_CUDA_DEVICE", dsaved, 1);
    cudaSetDevice(cur);
    if (emu) { if (was) setenv("LLM_EMU_DEVICES", saved, 1); else unsetenv("LLM_EMU_DEVICES"); }
}

}  // namespace

extern "C" void gpu_check_rec(gc *x)
{
    if (!x->cuda) return;
    if (x->g.graph_capture) {
        rec_rows(x);
        scratch_row(x);
    } else printf("gpu_check: backend '%s' records no graphs: the recording rows skipped\n", x->g.name);
    device_rows(x);
}
