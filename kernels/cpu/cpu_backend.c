/* cpu_backend.c — the two CPU backends: "cpu-ref" (reference kernels, ref_*.c) and "cpu"
 * (fast kernels, fast_*.c).  Memory is ordinary host memory, 64-byte aligned, zeroed.
 *
 * Threads (no oversubscription: BLAS threads x OpenMP threads <= be->threads):
 *   - every parallel region has a num_threads(be->threads) clause; the process-wide
 *     OpenMP settings are never changed;
 *   - OpenBLAS runs at 1 thread inside our regions: each matmul GEMM is split into
 *     be->threads slices of the output, one 1-thread sgemm per OpenMP thread
 *     (llm_cpu_gemm); the attention's per-head products likewise (be->threads x 1).
 *     So one pool of worker threads serves every op: OpenMP workers that spin after a
 *     region never compete with OpenBLAS workers for the same cores;
 *   - LLM_CPU_GEMM=blas instead runs each matmul GEMM as one OpenBLAS call with
 *     be->threads threads outside any OpenMP region (1 x be->threads), for comparison.
 * openblas_set_num_threads is process-wide, so it is set before every use
 * (llm_cpu_blas_threads; a no-op when unchanged). */
#include <omp.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/cpu/cpu_ops.h"

static void *cpu_alloc(llm_backend *be, size_t bytes)
{
    (void)be;
    void *p = NULL;
    if (posix_memalign(&p, 64, bytes ? bytes : 1) != 0)
        return NULL;
    memset(p, 0, bytes);
    return p;
}

static void cpu_free(llm_backend *be, void *p)
{
    (void)be;
    free(p);
}

static void cpu_copy(llm_backend *be, void *dst, const void *src, size_t bytes)
{
    (void)be;
    if (bytes)
        memmove(dst, src, bytes);
}

static void cpu_zero(llm_backend *be, void *p, size_t bytes)
{
    (void)be;
    if (bytes)
        memset(p, 0, bytes);
}

static void cpu_sync(llm_backend *be)
{
    (void)be;
}

#define CPU_TABLE(P)                                                                        \
    .alloc = cpu_alloc, .free = cpu_free, .to_device = cpu_copy, .to_host = cpu_copy,       \
    .copy = cpu_copy, .zero = cpu_zero, .sync = cpu_sync,                                   \
    .embed_forward = P##embed_forward, .layernorm_forward = P##layernorm_forward,           \
    .matmul_forward = P##matmul_forward, .attention_forward = P##attention_forward,         \
    .gelu_forward = P##gelu_forward, .residual_forward = P##residual_forward,               \
    .residual_layernorm_forward = P##residual_layernorm_forward,                            \
    .xent_forward = P##xent_forward, .embed_backward = P##embed_backward,                   \
    .layernorm_backward = P##layernorm_backward, .matmul_backward = P##matmul_backward,     \
    .attention_backward = P##attention_backward, .gelu_backward = P##gelu_backward,         \
    .accumulate = P##accumulate, .xent_backward = P##xent_backward,                         \
    .sum_squares = P##sum_squares, .adamw = P##adamw,                                     \
    .adamw_segs = P##adamw_segs,                                                            \
    .cast_lo = P##cast_lo, .matmul_forward_lo = llm_cpu_matmul_forward_lo,                  \
    .matmul_backward_lo = llm_cpu_matmul_backward_lo,                                       \
    .matmul_forward_gelu_lo = llm_cpu_matmul_forward_gelu_lo,                               \
    .matmul_backward_dgelu_lo = llm_cpu_matmul_backward_dgelu_lo,                           \
    .layernorm_forward_lo = llm_cpu_layernorm_forward_lo,                                   \
    .layernorm_backward_lo = llm_cpu_layernorm_backward_lo,                                 \
    .gelu_forward_lo = llm_cpu_gelu_forward_lo, .gelu_backward_lo = llm_cpu_gelu_backward_lo, \
    .attention_forward_lse = P##attention_forward_lse,                                      \
    .attention_backward_lse = P##attention_backward_lse,                                    \
    .xent_forward_lo = llm_cpu_xent_forward_lo, .xent_backward_lo = llm_cpu_xent_backward_lo, \
    .xent_fused = llm_cpu_xent_fused

int llm_backend_cpu_init(llm_backend *be, int threads, int reference)
{
    static const llm_backend ref = {.name = "cpu-ref", .host_memory = 1, CPU_TABLE(llm_ref_)};
    static const llm_backend fast = {.name = "cpu", .host_memory = 1, CPU_TABLE(llm_fast_)};
    llm_cpu_ctx *ctx = calloc(1, sizeof *ctx);
    if (!ctx)
        return -1;
    threads = llm_backend_threads(threads);
    ctx->threads = threads;
    /* GEMM threading (see llm_cpu_gemm): our OpenMP threads by default, so that a single
     * pool of worker threads serves every op; LLM_CPU_GEMM=blas lets OpenBLAS thread. */
    const char *g = getenv("LLM_CPU_GEMM");
    ctx->gemm_omp = !(g && strcmp(g, "blas") == 0);
    ctx->lo_chunk = (size_t)1 << 24;   /* 64 MiB of rounded activations */
    __builtin_cpu_init();
    ctx->avx2 = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
    *be = reference ? ref : fast;
    be->ctx = ctx;
    be->threads = reference ? 1 : threads;
    return 0;
}

/* *buf grown to at least n floats (64-byte aligned, contents not kept), or NULL. */
static float *grow(float **buf, size_t *have, size_t n)
{
    if (*have < n) {
        free(*buf);
        *have = 0;
        if (posix_memalign((void **)buf, 64, n * sizeof(float)) != 0) {
            *buf = NULL;
            return NULL;
        }
        *have = n;
    }
    return *buf;
}

float *llm_cpu_scratch(llm_backend *be, size_t n)
{
    llm_cpu_ctx *ctx = be->ctx;
    return grow(&ctx->scratch, &ctx->scratch_n, n);
}

float *llm_cpu_lo_scratch(llm_backend *be, size_t n)
{
    llm_cpu_ctx *ctx = be->ctx;
    return grow(&ctx->lo_scratch, &ctx->lo_scratch_n, n);
}

void llm_backend_cpu_free(llm_backend *be)
{
    if (!be || !be->ctx)
        return;
    free(((llm_cpu_ctx *)be->ctx)->scratch);
    free(((llm_cpu_ctx *)be->ctx)->lo_scratch);
    free(be->ctx);
    be->ctx = NULL;
}
