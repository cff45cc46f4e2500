/* cuda_backend.cu — the "cuda" backend: init/free, device memory, errors, scratch. */
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/cuda/cuda_internal.h"
extern "C" {
#include "kernels/cuda/cuda_backend.h"
#include "kernels/cuda/cuda_ext.h"
}

#define LC_WS_BYTES (32u << 20)   /* cuBLAS recommends 32 MiB of workspace on Hopper */

static void lc_record(lc_ctx *c, const char *msg)
{
    /* Ops return void, so the first failure since the last llm_backend_cuda_status is
     * kept for it; a broken context fails every later call, so print the first few. */
    if (!c) { fprintf(stderr, "llmkit cuda: %s\n", msg); return; }
    if (c->failed < 5) fprintf(stderr, "llmkit cuda: %s\n", msg);
    else if (c->failed == 5) fprintf(stderr, "llmkit cuda: (further errors not shown)\n");
    c->failed++;
    if (c->pending) return;
    c->pending = 1;
    snprintf(c->errmsg, sizeof c->errmsg, "%s", msg);
}

extern "C" int lc_fail_cuda(lc_ctx *c, cudaError_t rc, const char *what, const char *file,
                            int line)
{
    if (rc == cudaSuccess) return 0;
    char m[256];
    snprintf(m, sizeof m, "%s:%d: %s: %s", file, line, what, cudaGetErrorString(rc));
    lc_record(c, m);
    return 1;
}

extern "C" int lc_fail_blas(lc_ctx *c, int rc, const char *what, const char *file, int line)
{
    if (rc == CUBLAS_STATUS_SUCCESS) return 0;
    char m[256];
    snprintf(m, sizeof m, "%s:%d: %s: %s", file, line, what,
             cublasGetStatusString((cublasStatus_t)rc));
    lc_record(c, m);
    return 1;
}

/* A stream's state without waiting: cudaSuccess also while work is still queued. */
static cudaError_t lc_stream_peek(cudaStream_t s)
{
    cudaError_t rc = cudaStreamQuery(s);
    return rc == cudaErrorNotReady ? cudaSuccess : rc;
}

/* be->device_lost: a synchronisation (or, without wait, a query) that fails, and a
 * synchronisation that fails again after cudaGetLastError (which clears any error but a
 * sticky one), found the context broken.  Without wait the streams run on: llm-train
 * looks after every step, and a wait there would keep the next step's launches from
 * overlapping the update. */
static int lc_device_lost(llm_backend *be, int wait, char *why, size_t whylen)
{
    lc_ctx *c = lc_get(be);
    if (!c) return 0;
    if (!c->lost && !c->recording) {
        cudaError_t rc = wait ? cudaStreamSynchronize(c->stream) : lc_stream_peek(c->stream);
        if (rc == cudaSuccess && c->copy)
            rc = wait ? cudaStreamSynchronize(c->copy) : lc_stream_peek(c->copy);
        if (rc != cudaSuccess) {
            lc_fail_cuda(c, rc, "cudaStreamSynchronize", __FILE__, __LINE__);
            (void)cudaGetLastError();
            cudaError_t again = cudaStreamSynchronize(c->stream);
            if (again != cudaSuccess) {
                c->lost = 1;
                snprintf(c->lost_msg, sizeof c->lost_msg, "CUDA device %d: %s (a sticky "
                         "error: the device can run nothing more in this process)",
                         c->device, cudaGetErrorString(again));
            }
        }
    }
    if (c->lost && why && whylen) snprintf(why, whylen, "%s", c->lost_msg);
    return c->lost;
}

/* ---- device memory accounting ----
 * Every device allocation of the backend (be->alloc, workspaces, scratch) goes through
 * lc_dmalloc/lc_dfree: the table maps pointer -> size so a free subtracts exactly what
 * was added, and held_peak is the most the backend ever held (device_stats). */

static size_t lc_mem_slot(uintptr_t p, size_t cap)
{
    uint64_t x = (uint64_t)p >> 4;   /* cudaMalloc pointers are 256-byte aligned */
    x ^= x >> 33;
    x *= 0xff51afd7ed558ccdull;
    x ^= x >> 33;
    return (size_t)x & (cap - 1);
}

static void lc_mem_put(uintptr_t *key, size_t *size, size_t cap, uintptr_t p, size_t bytes)
{
    size_t i = lc_mem_slot(p, cap);
    while (key[i]) i = (i + 1) & (cap - 1);
    key[i] = p;
    size[i] = bytes;
}

/* Room for one more entry (load <= 1/2); 0 or -1 when the host is out of memory. */
static int lc_mem_reserve(lc_ctx *c)
{
    if (2 * (c->mem_n + 1) <= c->mem_cap) return 0;
    size_t cap = c->mem_cap ? 2 * c->mem_cap : 256;
    uintptr_t *key = (uintptr_t *)calloc(cap, sizeof *key);
    size_t *size = (size_t *)calloc(cap, sizeof *size);
    if (!key || !size) { free(key); free(size); return -1; }
    for (size_t i = 0; i < c->mem_cap; i++)
        if (c->mem_key[i]) lc_mem_put(key, size, cap, c->mem_key[i], c->mem_size[i]);
    free(c->mem_key);
    free(c->mem_size);
    c->mem_key = key;
    c->mem_size = size;
    c->mem_cap = cap;
    return 0;
}

/* Remove p; returns its size, 0 when p is not in the table.  Linear probing with
 * backward-shift deletion (no tombstones): later entries of the probe run move up. */
static size_t lc_mem_take(lc_ctx *c, uintptr_t p)
{
    if (!c->mem_cap) return 0;
    size_t mask = c->mem_cap - 1, i = lc_mem_slot(p, c->mem_cap);
    while (c->mem_key[i] != p) {
        if (!c->mem_key[i]) return 0;
        i = (i + 1) & mask;
    }
    size_t bytes = c->mem_size[i];
    c->mem_key[i] = 0;
    c->mem_n--;
    for (size_t j = i;;) {
        j = (j + 1) & mask;
        if (!c->mem_key[j]) break;
        size_t h = lc_mem_slot(c->mem_key[j], c->mem_cap);
        /* the entry at j may stay when its home h lies cyclically in (i, j] */
        if (i <= j ? (i < h && h <= j) : (i < h || h <= j)) continue;
        c->mem_key[i] = c->mem_key[j];
        c->mem_size[i] = c->mem_size[j];
        c->mem_key[j] = 0;
        i = j;
    }
    return bytes;
}

extern "C" cudaError_t lc_dmalloc(lc_ctx *c, void **p, size_t bytes)
{
    *p = NULL;
    if (bytes == 0) bytes = 1;
    if (lc_mem_reserve(c)) return cudaErrorMemoryAllocation;
    cudaError_t rc = cudaMalloc(p, bytes);
    if (rc != cudaSuccess) { *p = NULL; return rc; }
    lc_mem_put(c->mem_key, c->mem_size, c->mem_cap, (uintptr_t)*p, bytes);
    c->mem_n++;
    c->held += bytes;
    if (c->held > c->held_peak) c->held_peak = c->held;
    return cudaSuccess;
}

extern "C" cudaError_t lc_dfree(lc_ctx *c, void *p)
{
    if (!p) return cudaSuccess;
    c->held -= lc_mem_take(c, (uintptr_t)p);
    return cudaFree(p);
}

extern "C" int lc_recording(lc_ctx *c, const char *what)
{
    if (!c->recording) return 0;
    char m[160];
    snprintf(m, sizeof m, "%s while a graph is being recorded (graph_capture): not recordable",
             what);
    lc_record(c, m);
    return 1;
}

extern "C" void *lc_scratch(lc_ctx *c, size_t bytes)
{
    /* a recording would keep the block's address, and a later call that grows it frees
     * that block under the graph: grow-only buffers stay out of recorded ops */
    if (lc_recording(c, "scratch (a grow-only buffer)")) return NULL;
    if (bytes == 0) bytes = 1;
    if (c->scratch_bytes >= bytes) return c->scratch;
    if (c->scratch) LC_CK(c, lc_dfree(c, c->scratch));
    c->scratch = NULL;
    c->scratch_bytes = 0;
    size_t want = bytes + bytes / 4;   /* headroom: shapes grow a little between calls */
    if (LC_CK(c, lc_dmalloc(c, &c->scratch, want))) { c->scratch = NULL; return NULL; }
    c->scratch_bytes = want;
    return c->scratch;
}

__global__ void lc_fill_kernel(float *x, size_t n, float v)
{
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n;
         i += (size_t)gridDim.x * blockDim.x)
        x[i] = v;
}

extern "C" const float *lc_ones(lc_ctx *c, size_t n)
{
    if (lc_recording(c, "ones (a grow-only buffer)")) return NULL;   /* as lc_scratch */
    if (c->ones_n >= n && c->ones) return c->ones;
    if (c->ones) LC_CK(c, lc_dfree(c, c->ones));
    c->ones = NULL;
    c->ones_n = 0;
    if (LC_CK(c, lc_dmalloc(c, (void **)&c->ones, n * sizeof(float)))) { c->ones = NULL; return NULL; }
    lc_fill_kernel<<<lc_blocks(n, 256, 4096), 256, 0, c->stream>>>(c->ones, n, 1.0f);
    if (LC_LAUNCHED(c)) return NULL;
    c->ones_n = n;
    return c->ones;
}

/* ---- memory ---- */

static void *lc_alloc(llm_backend *be, size_t bytes)
{
    lc_ctx *c = lc_get(be);
    void *p = NULL;
    if (lc_recording(c, "alloc")) return NULL;
    cudaError_t rc = lc_dmalloc(c, &p, bytes);
    if (rc != cudaSuccess) {
        /* out of memory is the caller's to report (alloc returns NULL); clear it so it is
         * not mistaken for a sticky kernel error later */
        (void)cudaGetLastError();
        return NULL;
    }
    /* alloc returns zeroed memory: ordered on our stream and finished before return so
     * the caller may use it from any stream or copy into it at once */
    if (LC_CK(c, cudaMemsetAsync(p, 0, bytes, c->stream)) ||
        LC_CK(c, cudaStreamSynchronize(c->stream))) {
        lc_dfree(c, p);
        return NULL;
    }
    return p;
}

/* bytes at dst get new contents by one of the backend's own writes (to_device, copy,
 * zero): embed_hint's grouping of the ids there no longer holds */
static void lc_eh_written(lc_ctx *c, const void *dst, size_t bytes)
{
    if (c->eh_inp && (const char *)dst < (const char *)(c->eh_inp + c->eh_N) &&
        (const char *)dst + bytes > (const char *)c->eh_inp)
        c->eh_inp = NULL;
}

static void lc_free(llm_backend *be, void *p)
{
    /* cudaFree waits for the device: it cannot be recorded, and p may be in the graph */
    lc_ctx *c = lc_get(be);
    if (p && p == (void *)c->eh_inp) c->eh_inp = NULL;   /* embed_hint's ids are gone */
    if (p && !lc_recording(c, "free")) LC_CK(c, lc_dfree(c, p));
}

/* ---- the upload data path ----
 * to_device returns before the GPU has the data, and the caller may reuse its buffer at
 * once.  Uploads of at most LC_STAGE_BYTES (token batches, targets, decode positions) go
 * through slot i of a ring of LC_STAGES:
 *
 *   host:     wait for stage_ev[i] (slot i's previous host-to-device copy is done;
 *             normally long ago), memcpy src -> pinned host slot i
 *   copy:     wait stage_used[i] (the compute stream has moved slot i's previous
 *             contents out), host slot i -> device slot i, record stage_ev[i]
 *   compute:  wait stage_ev[i], device slot i -> dst, record stage_used[i]
 *
 * The host-to-device transfer thus runs on the copy stream while the compute stream is
 * still busy with the previous step; only the device-to-device copy (fast, and on the
 * compute stream so it cannot overwrite dst while queued kernels still read it) is in
 * the compute stream's order.  Every later op on the compute stream sees the data; so
 * does anything that follows be->sync (which waits for both streams) or an event
 * recorded on the compute stream (the NCCL streams, the profiler's timing events).
 * Slot reuse is ordered on the device through the two events, with no host wait in the
 * normal path.  Should the copy stream or the device ring not be made, the pinned slots
 * are copied on the compute stream instead (stage_state 1), and without pinned slots
 * every upload synchronises (-1); neither is an error.  Larger uploads are copied and
 * waited for at once. */
#define LC_STAGES 4
#define LC_STAGE_BYTES ((size_t)1 << 20)

/* The staging rings, made on first use; 0, or -1 when not even the pinned ring can be
 * (then every upload synchronises, as before). */
static int lc_stage_ready(lc_ctx *c)
{
    if (c->stage_state) return c->stage_state > 0 ? 0 : -1;
    c->stage_state = -1;
    for (int i = 0; i < LC_STAGES; i++)
        if (cudaHostAlloc(&c->stage[i], LC_STAGE_BYTES, cudaHostAllocDefault) != cudaSuccess ||
            cudaEventCreateWithFlags(&c->stage_ev[i], cudaEventDisableTiming) != cudaSuccess) {
            (void)cudaGetLastError();   /* pinned memory is a nicety: no error recorded */
            return -1;
        }
    c->stage_state = 1;
    if (!c->copy) return 0;
    /* the device ring and its events; both events start recorded (complete), so the
     * first round waits on nothing and every wait is on a recorded event */
    for (int i = 0; i < LC_STAGES; i++)
        if (lc_dmalloc(c, &c->dstage[i], LC_STAGE_BYTES) != cudaSuccess ||
            cudaEventCreateWithFlags(&c->stage_used[i], cudaEventDisableTiming) != cudaSuccess ||
            cudaEventRecord(c->stage_used[i], c->stream) != cudaSuccess ||
            cudaEventRecord(c->stage_ev[i], c->copy) != cudaSuccess) {
            (void)cudaGetLastError();   /* no copy stream: the one-stream path */
            return 0;
        }
    c->stage_state = 2;
    return 0;
}

static void lc_to_device(llm_backend *be, void *dst, const void *src, size_t bytes)
{
    lc_ctx *c = lc_get(be);
    /* recorded, the device-to-device copy out of a ring slot would replay from whatever
     * the slot holds at each launch (and the host-to-device copy, on the copy stream,
     * would not be recorded at all): uploads go before graph_capture */
    if (!bytes || lc_recording(c, "to_device")) return;
    lc_eh_written(c, dst, bytes);
    if (bytes <= LC_STAGE_BYTES && lc_stage_ready(c) == 0) {
        unsigned i = c->stage_next++ % LC_STAGES;
        /* the host slot's previous copy must have left it (long done, normally) */
        if (LC_CK(c, cudaEventSynchronize(c->stage_ev[i]))) return;
        memcpy(c->stage[i], src, bytes);
        if (c->stage_state == 2) {
            if (LC_CK(c, cudaStreamWaitEvent(c->copy, c->stage_used[i], 0)) ||
                LC_CK(c, cudaMemcpyAsync(c->dstage[i], c->stage[i], bytes,
                                         cudaMemcpyHostToDevice, c->copy)) ||
                LC_CK(c, cudaEventRecord(c->stage_ev[i], c->copy)) ||
                LC_CK(c, cudaStreamWaitEvent(c->stream, c->stage_ev[i], 0)) ||
                LC_CK(c, cudaMemcpyAsync(dst, c->dstage[i], bytes, cudaMemcpyDeviceToDevice,
                                         c->stream)) ||
                LC_CK(c, cudaEventRecord(c->stage_used[i], c->stream)))
                return;
        } else {
            /* one stream: the copy queued behind the compute stream's kernels */
            if (LC_CK(c, cudaMemcpyAsync(dst, c->stage[i], bytes, cudaMemcpyHostToDevice,
                                         c->stream)) ||
                LC_CK(c, cudaEventRecord(c->stage_ev[i], c->stream)))
                return;
        }
        c->stage_runs[0]++;
        return;
    }
    LC_CK(c, cudaMemcpyAsync(dst, src, bytes, cudaMemcpyHostToDevice, c->stream));
    LC_CK(c, cudaStreamSynchronize(c->stream));
    c->stage_runs[1]++;
}

static void lc_to_host(llm_backend *be, void *dst, const void *src, size_t bytes)
{
    lc_ctx *c = lc_get(be);
    if (!bytes || lc_recording(c, "to_host")) return;
    LC_CK(c, cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToHost, c->stream));
    LC_CK(c, cudaStreamSynchronize(c->stream));
}

static void lc_copy(llm_backend *be, void *dst, const void *src, size_t bytes)
{
    lc_ctx *c = lc_get(be);
    if (!bytes || dst == src) return;
    lc_eh_written(c, dst, bytes);
    LC_CK(c, cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToDevice, c->stream));
}

static void lc_zero(llm_backend *be, void *p, size_t bytes)
{
    lc_ctx *c = lc_get(be);
    if (!bytes) return;
    lc_eh_written(c, p, bytes);
    LC_CK(c, cudaMemsetAsync(p, 0, bytes, c->stream));
}

static void lc_sync(llm_backend *be)
{
    lc_ctx *c = lc_get(be);
    if (lc_recording(c, "sync")) return;
    /* the compute stream waits for every upload it uses, so this covers the copy stream
     * too; its own sync surfaces a failed copy and leaves nothing queued anywhere */
    LC_CK(c, cudaStreamSynchronize(c->stream));
    if (c->copy) LC_CK(c, cudaStreamSynchronize(c->copy));
}

/* page-locked host memory: to_host into it runs at the bus rate, and a copy never waits
 * on the driver's staging */
static void *lc_host_alloc(llm_backend *be, size_t bytes)
{
    (void)be;
    void *p = NULL;
    if (cudaMallocHost(&p, bytes ? bytes : 1) != cudaSuccess) {
        (void)cudaGetLastError();
        return NULL;
    }
    return p;
}

static void lc_host_free(llm_backend *be, void *p)
{
    (void)be;
    if (p) cudaFreeHost(p);
}

/* ---- init / free ---- */

static void lc_release(lc_ctx *c)
{
    if (!c) return;
    if (c->stream) cudaStreamSynchronize(c->stream);
    if (c->copy) cudaStreamSynchronize(c->copy);
    lc_lo_release(c);
    lc_stats_release(c);
    for (int i = 0; i < LC_STAGES; i++) {
        if (c->stage[i]) cudaFreeHost(c->stage[i]);
        if (c->stage_ev[i]) cudaEventDestroy(c->stage_ev[i]);
        if (c->dstage[i]) cudaFree(c->dstage[i]);
        if (c->stage_used[i]) cudaEventDestroy(c->stage_used[i]);
    }
    if (c->lt) cublasLtDestroy(c->lt);
    if (c->blas) cublasDestroy(c->blas);
    if (c->blas_ws) cudaFree(c->blas_ws);
    if (c->lt_ws) cudaFree(c->lt_ws);
    if (c->scratch) cudaFree(c->scratch);
    if (c->ones) cudaFree(c->ones);
    if (c->d_buf) cudaFree(c->d_buf);
    if (c->h_tok) cudaFreeHost(c->h_tok);
    if (c->h_buf) cudaFreeHost(c->h_buf);
    free(c->h_tmp);
    if (c->copy) cudaStreamDestroy(c->copy);
    if (c->stream) cudaStreamDestroy(c->stream);
    free(c->mem_key);
    free(c->mem_size);
    free(c);
}

/* The device a process computes on (cuda_ext.h): one rule for the backend, the
 * benchmarks and NCCL, so that a rank's buffers and its communicator are on one GPU. */
extern "C" int llm_cuda_select_device(int local_rank, int *dev, char *err, size_t errlen)
{
    int n = 0;
    cudaError_t rc = cudaGetDeviceCount(&n);
    if (rc != cudaSuccess) {
        (void)cudaGetLastError();
        snprintf(err, errlen, "no CUDA device: %s", cudaGetErrorString(rc));
        return LLM_CUDA_ENODEV;
    }
    if (n <= 0) {
        snprintf(err, errlen, "no CUDA device: none found");
        return LLM_CUDA_ENODEV;
    }
    int d = 0;
    const char *e = getenv("LLM_CUDA_DEVICE");
    if (e && *e) {
        char *end;
        long v = strtol(e, &end, 10);
        if (*e < '0' || *e > '9' || *end || v < 0 || v >= n) {
            snprintf(err, errlen, "no CUDA device: LLM_CUDA_DEVICE '%s' is not a device in 0..%d",
                     e, n - 1);
            return LLM_CUDA_ENODEV;
        }
        d = (int)v;
    } else if (local_rank >= 0) {
        d = local_rank % n;
    } else {
        /* the current device when one was chosen (NCCL's), else the launcher's local
         * rank: ranks of one node spread over its GPUs without NCCL too */
        if (cudaGetDevice(&d) != cudaSuccess || d < 0 || d >= n) {
            (void)cudaGetLastError();
            d = 0;
        }
        static const char *const vars[] = {"LOCAL_RANK", "OMPI_COMM_WORLD_LOCAL_RANK",
                                           "SLURM_LOCALID", "MPI_LOCALRANKID",
                                           "MV2_COMM_WORLD_LOCAL_RANK"};
        for (size_t i = 0; d == 0 && i < sizeof vars / sizeof *vars; i++) {
            const char *v = getenv(vars[i]);
            char *end;
            long r = v && *v ? strtol(v, &end, 10) : -1;
            if (r >= 0 && r <= 1000000 && *end == '\0') {
                d = (int)(r % n);
                break;
            }
        }
    }
    rc = cudaSetDevice(d);
    if (rc != cudaSuccess) {
        (void)cudaGetLastError();
        snprintf(err, errlen, "no CUDA device: cudaSetDevice(%d): %s", d, cudaGetErrorString(rc));
        return LLM_CUDA_ENODEV;
    }
    *dev = d;
    return LLM_CUDA_OK;
}

/* Which cuBLAS the programs run with (cuda_ext.h). */
extern "C" int llm_cuda_blas_info(char *buf, size_t n)
{
#ifdef LLM_CUDA_EMU
    snprintf(buf, n, "cuBLAS: emulated (tests/emu)");
#else
    Dl_info di;
    void *f = (void *)&cublasLtMatmul;
    const char *path = dladdr(f, &di) && di.dli_fname ? di.dli_fname : "?";
    size_t v = cublasLtGetVersion();   /* major*10000 + minor*100 + patch */
    snprintf(buf, n, "cuBLAS %zu.%zu.%zu (%s)", v / 10000, v / 100 % 100, v % 100, path);
#endif
    return 0;
}

extern "C" int llm_backend_cuda_available(void)
{
    int n = 0;
    if (cudaGetDeviceCount(&n) != cudaSuccess) {
        (void)cudaGetLastError();
        return 0;
    }
    return n > 0;
}

extern "C" int llm_backend_cuda_init(llm_backend *be, int threads, char *err, size_t errlen)
{
    memset(be, 0, sizeof *be);
    int dev = 0;
    if (llm_cuda_select_device(-1, &dev, err, errlen))
        return -1;
    lc_ctx *c = (lc_ctx *)calloc(1, sizeof *c);
    if (!c) { snprintf(err, errlen, "out of memory"); return -1; }
    c->device = dev;
    const char *stage = "", *e = NULL;
#define STEP(what, call) do { stage = what; if ((call) != 0) goto fail; } while (0)
    STEP("cudaDeviceGetAttribute", cudaDeviceGetAttribute(&c->sm_count, cudaDevAttrMultiProcessorCount, dev));
    if (cudaDeviceGetAttribute(&c->smem_optin_max, cudaDevAttrMaxSharedMemoryPerBlockOptin, dev) !=
            cudaSuccess || c->smem_optin_max < 48 * 1024) {
        (void)cudaGetLastError();
        c->smem_optin_max = 48 * 1024;
    }
    STEP("cudaStreamCreate", cudaStreamCreateWithFlags(&c->stream, cudaStreamNonBlocking));
    /* the upload copy stream is a nicety: without it uploads use the compute stream */
    if (cudaStreamCreateWithFlags(&c->copy, cudaStreamNonBlocking) != cudaSuccess) {
        (void)cudaGetLastError();
        c->copy = NULL;
    }
    STEP("cublasCreate", (int)cublasCreate(&c->blas));
    STEP("cublasSetStream", (int)cublasSetStream(c->blas, c->stream));
    STEP("cublasLtCreate", (int)cublasLtCreate(&c->lt));
    c->ws_bytes = LC_WS_BYTES;
    STEP("cudaMalloc(workspace)", lc_dmalloc(c, &c->blas_ws, c->ws_bytes));
    STEP("cudaMalloc(workspace)", lc_dmalloc(c, &c->lt_ws, c->ws_bytes));
    STEP("cublasSetWorkspace", (int)cublasSetWorkspace(c->blas, c->blas_ws, c->ws_bytes));
    /* exact fp32 unless asked: cuBLAS's default math never uses TF32 by itself, but
     * NVIDIA_TF32_OVERRIDE could; pedantic is not needed for that */
    e = getenv("LLM_CUDA_TF32");
    c->tf32 = e && *e == '1';
    e = getenv("LLM_CUDA_FLASH");
    c->flash_off = e && !strcmp(e, "0");
    c->flash_wmma = e && !strcmp(e, "wmma");
    STEP("cublasSetMathMode", (int)cublasSetMathMode(c->blas, c->tf32 ? CUBLAS_TF32_TENSOR_OP_MATH
                                                                       : CUBLAS_DEFAULT_MATH));
#undef STEP
    be->name = "cuda";
    be->ctx = c;
    be->threads = llm_backend_threads(threads);   /* host threads; <= 0: all cores */
    be->alloc = lc_alloc;
    be->free = lc_free;
    be->to_device = lc_to_device;
    be->to_host = lc_to_host;
    be->copy = lc_copy;
    be->zero = lc_zero;
    be->sync = lc_sync;
    be->host_alloc = lc_host_alloc;
    be->host_free = lc_host_free;
    be->device_lost = lc_device_lost;
    lc_fill_matmul(be);
    lc_fill_attention(be);
    lc_fill_ops(be);
    lc_fill_optim(be);
    lc_fill_infer(be);
    lc_fill_lo(be);
    lc_fill_attention_lse(be);
    lc_fill_stats(be);
    if (lc_apply_off(be, c, getenv("LLM_CUDA_OFF"), err, errlen)) {
        lc_release(c);
        memset(be, 0, sizeof *be);
        return -1;
    }
    return 0;
fail:
    {
        cudaError_t last = cudaGetLastError();
        snprintf(err, errlen, "cuda init: %s failed%s%s", stage, last ? ": " : "",
                 last ? cudaGetErrorString(last) : "");
    }
    lc_release(c);
    memset(be, 0, sizeof *be);
    return -1;
}

extern "C" void llm_backend_cuda_free(llm_backend *be)
{
    if (!be || !be->ctx) return;
    lc_release(lc_get(be));
    memset(be, 0, sizeof *be);
}

/* ---- extensions (cuda_ext.h) ---- */

extern "C" int llm_backend_cuda_status(llm_backend *be, char *err, size_t errlen)
{
    lc_ctx *c = lc_get(be);
    if (!c) return 0;
    /* surface asynchronous kernel faults too */
    cudaError_t rc = cudaStreamSynchronize(c->stream);
    if (rc != cudaSuccess) lc_fail_cuda(c, rc, "cudaStreamSynchronize", __FILE__, __LINE__);
    if (c->copy && (rc = cudaStreamSynchronize(c->copy)) != cudaSuccess)
        lc_fail_cuda(c, rc, "cudaStreamSynchronize(copy)", __FILE__, __LINE__);
    if (!c->pending) return 0;
    if (err && errlen) snprintf(err, errlen, "%s", c->errmsg);
    c->pending = 0;
    return -1;
}

extern "C" void *llm_backend_cuda_stream(llm_backend *be)
{
    lc_ctx *c = lc_get(be);
    return c ? (void *)c->stream : NULL;
}

extern "C" void llm_backend_cuda_set_tf32(llm_backend *be, int on)
{
    lc_ctx *c = lc_get(be);
    if (!c) return;
    c->tf32 = on != 0;
    LC_CKB(c, cublasSetMathMode(c->blas, c->tf32 ? CUBLAS_TF32_TENSOR_OP_MATH : CUBLAS_DEFAULT_MATH));
}

extern "C" void llm_backend_cuda_upload_counts(llm_backend *be, long counts[2])
{
    lc_ctx *c = lc_get(be);
    counts[0] = c ? c->stage_runs[0] : 0;
    counts[1] = c ? c->stage_runs[1] : 0;
}

extern "C" void llm_backend_cuda_embed_counts(llm_backend *be, long counts[2])
{
    lc_ctx *c = lc_get(be);
    counts[0] = c ? c->embed_runs[0] : 0;
    counts[1] = c ? c->embed_runs[1] : 0;
}

extern "C" int llm_backend_cuda_device_info(llm_backend *be, char *name, size_t namelen,
                                            size_t *mem_used, size_t *mem_total)
{
    lc_ctx *c = lc_get(be);
    if (!c) return -1;
    cudaDeviceProp p;
    if (LC_CK(c, cudaGetDeviceProperties(&p, c->device))) return -1;
    if (name && namelen) snprintf(name, namelen, "%s", p.name);
    size_t fr = 0, tot = 0;
    if (LC_CK(c, cudaMemGetInfo(&fr, &tot))) return -1;
    if (mem_used) *mem_used = tot - fr;
    if (mem_total) *mem_total = tot;
    return 0;
}
