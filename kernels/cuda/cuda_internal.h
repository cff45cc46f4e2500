/* cuda_internal.h — state and helpers shared by the CUDA backend's .cu files (C++ only). */
#ifndef LLM_CUDA_INTERNAL_H
#define LLM_CUDA_INTERNAL_H

#include <cuda_runtime.h>
#include <cublas_v2.h>
#include <cublasLt.h>
#include <stddef.h>
#include <stdint.h>

#include <atomic>

#include "kernels/cuda/cuda_lo.cuh"

extern "C" {
#include "kernels/backend.h"
}

#define LC_LO_BUFS 2

/* Backend state behind llm_backend.ctx. */
typedef struct {
    int device;
    cudaStream_t stream;
    cublasHandle_t blas;
    cublasLtHandle_t lt;
    void *blas_ws;          /* cuBLAS workspace */
    void *lt_ws;            /* cuBLASLt workspace */
    size_t ws_bytes;
    int tf32;               /* 1: GEMMs may use TF32 tensor cores (explicit opt-in) */
    int sm_count;
    /* grow-only device scratch for reductions and attention (see lc_scratch) */
    void *scratch;
    size_t scratch_bytes;
    float *ones;            /* device vector of 1.0f for bias gradients (gemv) */
    size_t ones_n;
    /* host staging for the deterministic embedding backward */
    int32_t *h_tok;         /* pinned, N tokens */
    int32_t *h_buf;         /* pinned, 3N + 1: positions, segment tokens, offsets */
    int32_t *h_tmp;         /* pageable, 2N radix sort temporaries */
    size_t h_n;
    int32_t *d_buf;         /* device copy of h_buf */
    size_t d_n;
    const int32_t *eh_inp;  /* embed_hint: the device ids whose grouping d_buf holds (in
                               the compute stream's order), NULL when none does */
    size_t eh_N, eh_U;      /* their count and distinct tokens */
    long embed_runs[2];     /* embed_backward calls grouped by a hint / by a read back */
    /* errors: how many so far (to limit printing), and the first one since the last
     * llm_backend_cuda_status call */
    int failed;
    int pending;
    char errmsg[256];
    /* device_lost: 1 once a synchronisation found a sticky error (the context is
       broken for good), which lost_msg names */
    int lost;
    char lost_msg[256];
    /* device memory accounting (lc_dmalloc/lc_dfree): pointer -> size, open addressing
     * (key 0 = empty slot); held now and the most ever held, in bytes */
    uintptr_t *mem_key;
    size_t *mem_size;
    size_t mem_cap, mem_n;
    size_t held, held_peak;
    /* mixed precision: grow-only lo work buffers (the GEMM form of the lse attention,
     * cuda_attention_lse.cu, uses [0] probabilities and [1] score gradients of one
     * batch row) and cuBLASLt plans cached by cuda_lo.cu */
    void *lo_buf[LC_LO_BUFS];
    size_t lo_bytes[LC_LO_BUFS];
    struct lc_lo_plan *lo_plans;    /* LC_LO_PLANS entries, allocated on first use */
    unsigned lo_next;               /* round-robin victim when the cache is full */
    int lo_force_ex;                /* test hook: skip cuBLASLt, use cublasGemmEx */
    int lt_off;                     /* LLM_CUDA_OFF=cublaslt: no cuBLASLt for any GEMM */
    long lo_runs[2];                /* lo GEMMs run by cuBLASLt, by cublasGemmEx */
    long lo_gelu_runs[2];           /* fused GELU GEMMs: by the epilogue, by the fallback */
    int flash_off;                  /* 1: the lse attention uses its batched-GEMM form only
                                       (LLM_CUDA_FLASH=0, or the test hook) */
    int flash_wmma;                 /* 1: the fused attention runs the WMMA kernels instead
                                       of the mma.sync ones (LLM_CUDA_FLASH=wmma) */
    long flash_runs[2];             /* lse attention calls by the fused kernels, by GEMMs */
    /* to_device staging (the data path in cuda_backend.cu): small uploads are copied into
     * a ring of pinned host slots, sent by the copy stream into a ring of device slots
     * while the compute stream runs, and moved into place by a device-to-device copy on
     * the compute stream, so the caller neither waits for the GPU nor keeps its buffer.
     * stage_ev[i]: recorded on the copy stream after slot i's host-to-device copy (the
     * host slot is free again, the device slot holds the data); stage_used[i]: recorded
     * on the compute stream after slot i's device-to-device copy (the device slot is free
     * again).  stage_state 0 not yet made, 2 ready with the copy stream, 1 pinned slots
     * only (the copy is queued on the compute stream), -1 unavailable (uploads then
     * synchronise) */
    cudaStream_t copy;              /* host-to-device copies; NULL when it cannot be made */
    void *stage[4];
    void *dstage[4];
    cudaEvent_t stage_ev[4];
    cudaEvent_t stage_used[4];
    unsigned stage_next;
    int stage_state;
    long stage_runs[2];             /* uploads staged / synchronous (for tests) */
    long graph_runs[2];             /* graphs recorded and run / launched again */
    int recording;                  /* 1 while graph_capture runs the caller's ops (the
                                       stream is captured): see lc_recording */
    int smem_optin_max;             /* the device's largest dynamic shared memory per block
                                       (cudaDevAttrMaxSharedMemoryPerBlockOptin; 48 KiB
                                       when it cannot be read) */
    /* NVML loaded at run time by device_stats (cuda_stats.cu); NULL until first use */
    struct lc_nvml *nvml;
    int nvml_tried;
} lc_ctx;

static inline lc_ctx *lc_get(llm_backend *be) { return (lc_ctx *)be->ctx; }

/* Record (first one wins) and print an error; returns nonzero when rc means failure. */
extern "C" int lc_fail_cuda(lc_ctx *c, cudaError_t rc, const char *what, const char *file, int line);
extern "C" int lc_fail_blas(lc_ctx *c, int rc, const char *what, const char *file, int line);

#define LC_CK(c, call) lc_fail_cuda((c), (call), #call, __FILE__, __LINE__)
#define LC_CKB(c, call) lc_fail_blas((c), (int)(call), #call, __FILE__, __LINE__)
/* after every kernel launch */
#define LC_LAUNCHED(c) lc_fail_cuda((c), cudaGetLastError(), "kernel launch", __FILE__, __LINE__)

/* LC_DT_F32/F16/BF16 (the llm_dtype values) are in cuda_lo.cuh */

/* Nonzero (after recording an error naming what) when c's stream is being recorded by
 * graph_capture: what must not be recorded (a host copy through the staging ring, a
 * synchronisation, an allocation) fails in the same way on every device and driver,
 * instead of depending on which calls the driver refuses during a capture. */
extern "C" int lc_recording(lc_ctx *c, const char *what);

/* The dynamic shared memory opt-in (cudaFuncSetAttribute) is state of a kernel on one
 * device, the calling thread's current one: a kernel's opt-in done on device 0 does not
 * let it launch on device 1.  An lc_optin per kernel (a static: zero-initialised) holds
 * one bit per device ordinal below LC_OPTIN_DEVICES, set once the attribute is on that
 * device; a device beyond has its attribute set on every call (idempotent).  Threads may
 * race: both set the same value, and a bit is set only after its device has it.
 * lc_optin_device: the current device (c's when it cannot be read). */
#define LC_OPTIN_DEVICES 64
typedef std::atomic<unsigned long long> lc_optin;
static inline unsigned lc_optin_device(const lc_ctx *c)
{
    int d;
    if (cudaGetDevice(&d) != cudaSuccess) {
        (void)cudaGetLastError();
        d = c->device;
    }
    return (unsigned)d;
}
static inline int lc_optin_needed(unsigned dev, const lc_optin &o)
{
    return dev >= LC_OPTIN_DEVICES || !(o.load(std::memory_order_acquire) >> dev & 1u);
}
static inline void lc_optin_done(unsigned dev, lc_optin &o)
{
    if (dev < LC_OPTIN_DEVICES) o.fetch_or(1ull << dev, std::memory_order_release);
}

/* cudaMalloc / cudaFree that keep the backend's held and peak byte counts (device_stats).
 * lc_dfree(NULL) is a no-op; a pointer the table does not know is freed uncounted. */
extern "C" cudaError_t lc_dmalloc(lc_ctx *c, void **p, size_t bytes);
extern "C" cudaError_t lc_dfree(lc_ctx *c, void *p);

/* Device scratch of at least bytes (contents undefined), or NULL after recording an error.
 * Growing frees the old block; cudaFree synchronises, so work queued on the old block is
 * finished first.  While graph_capture records (lc_recording) it, lc_ones and lc_lo_buf
 * refuse: a graph keeps the address that a later growth frees. */
extern "C" void *lc_scratch(lc_ctx *c, size_t bytes);
/* Device vector of n ones (grow-only), or NULL. */
extern "C" const float *lc_ones(lc_ctx *c, size_t n);

/* Blocks for a grid-stride loop over n items with threads per block. */
static inline unsigned lc_blocks(size_t n, unsigned threads, unsigned cap)
{
    size_t b = (n + threads - 1) / threads;
    if (b < 1) b = 1;
    if (b > cap) b = cap;
    return (unsigned)b;
}

/* Launchers living in the other .cu files; each fills its part of be. */
extern "C" void lc_fill_matmul(llm_backend *be);
extern "C" void lc_fill_attention(llm_backend *be);
extern "C" void lc_fill_ops(llm_backend *be);
extern "C" void lc_fill_xent(llm_backend *be);
extern "C" void lc_fill_graph(llm_backend *be);
extern "C" void lc_fill_optim(llm_backend *be);
extern "C" void lc_fill_infer(llm_backend *be);
extern "C" void lc_fill_lo(llm_backend *be);
extern "C" void lc_fill_attention_lse(llm_backend *be);
extern "C" void lc_fill_stats(llm_backend *be);
/* LLM_CUDA_OFF (cuda_off.cu): take the parts named in spec out of be (after the fills;
 * LLM_CUDA_FAULT, a test hook, first); 0, or -1 with a message in err for an unknown
 * name. */
extern "C" int lc_apply_off(llm_backend *be, lc_ctx *c, const char *spec, char *err,
                            size_t errlen);
/* Mixed precision helper of cuda_lo.cu: grow-only lo buffer i (< LC_LO_BUFS; the
 * batched-GEMM lse attention's probabilities and score gradients) of at least bytes, or
 * NULL after recording an error (growing frees the old block, which synchronises). */
extern "C" void *lc_lo_buf(lc_ctx *c, int i, size_t bytes);
/* Release what cuda_lo.cu / cuda_stats.cu hold in c (plans, lo buffers, NVML). */
extern "C" void lc_lo_release(lc_ctx *c);
extern "C" void lc_stats_release(lc_ctx *c);

/* Row-major fp32 GEMM helper shared by matmul and attention:
 * C(m x n, row-major, ldc) = alpha * op(A) op(B) + beta * C, where op(A) is (m x k) and
 * op(B) is (k x n); ta/tb say whether the row-major A/B are stored transposed.
 * Batched with strides (in elements) when batch > 1. */
extern "C" void lc_gemm_rm(lc_ctx *c, int ta, int tb, int m, int n, int k, float alpha,
                           const float *A, int lda, long long sA,
                           const float *B, int ldb, long long sB, float beta,
                           float *C, int ldc, long long sC, int batch);

#endif
