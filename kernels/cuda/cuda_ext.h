/* cuda_ext.h — additions beyond kernels/backend.h that only the CUDA backend offers.
 *
 * Additive: nothing in backend.h changes, and code that never includes this header is
 * unaffected.  Each function takes a backend filled by llm_backend_cuda_init. */
#ifndef LLM_CUDA_EXT_H
#define LLM_CUDA_EXT_H

#include <stddef.h>
#include "kernels/backend.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Ops return void, so a failed CUDA/cuBLAS call is recorded and printed to stderr (the
 * first few).  This synchronises the backend's stream (surfacing asynchronous faults) and
 * returns 0 when nothing failed since the previous call, else -1 with the first message
 * since then in err.  A caller that wants to stop on any failure calls it once per step;
 * a fault that breaks the CUDA context makes every later op fail, so it shows again. */
int llm_backend_cuda_status(llm_backend *be, char *err, size_t errlen);

/* The cudaStream_t every op of the backend is enqueued on (as void *), NULL when be is
 * not a CUDA backend: for collectives that order themselves after the backend's work
 * (llm_dist_set_stream, common/train_dist.c; added for issue 10). */
void *llm_backend_cuda_stream(llm_backend *be);

/* Allow (on != 0) or forbid TF32 tensor-core math in fp32 GEMMs.  Default: forbidden,
 * unless the environment has LLM_CUDA_TF32=1 at init.  TF32 keeps ~10 mantissa bits of
 * the inputs (relative error near 3e-4 instead of 1e-6). */
void llm_backend_cuda_set_tf32(llm_backend *be, int on);

/* The device's name and memory in use / in total (bytes, any may be NULL).  0 or -1. */
int llm_backend_cuda_device_info(llm_backend *be, char *name, size_t namelen,
                                 size_t *mem_used, size_t *mem_total);

/* Device memory the backend holds now and the most it has held since init (bytes):
 * be->alloc'ed buffers plus its own workspaces and scratch.  0 or -1.  (device_stats
 * reports the peak in MiB; this exact form is for tests.) */
int llm_backend_cuda_mem_held(llm_backend *be, size_t *held, size_t *peak);

/* Which library ran the mixed-precision GEMMs: runs (may be NULL) receives how many
 * ran through cuBLASLt [0] and through cublasGemmEx [1] so far; force_gemmex 1 makes
 * every later one use cublasGemmEx (the fallback for shapes cuBLASLt refuses), 0 the
 * default (cuBLASLt first), -1 leaves it.  For tests. */
void llm_backend_cuda_lo_gemm_path(llm_backend *be, int force_gemmex, long runs[2]);

/* Which form ran matmul_forward_gelu_lo / matmul_backward_dgelu_lo: runs receives the
 * calls done by cuBLASLt's GELU epilogues [0] and by the fallback (GEMM into fp32 scratch,
 * then the GELU kernel) [1] so far.  The fallback is taken when the shape or alignment
 * rules out the epilogue (the row not a multiple of 8, pre not 16-byte aligned), when
 * cuBLASLt has no algorithm, and when llm_backend_cuda_lo_gemm_path forces cublasGemmEx.
 * For tests. */
void llm_backend_cuda_gelu_epi_path(llm_backend *be, long runs[2]);

/* Which form ran attention_forward_lse / attention_backward_lse: runs (may be NULL)
 * receives the calls by the fused kernels [0] and by the batched-GEMM form [1] so far;
 * off 1 makes every later call use the batched-GEMM form, 0 the default (fused where the
 * head size and the 16-byte alignment of qkv and dout allow, by the mma.sync kernels;
 * LLM_CUDA_FLASH=0 at init starts with 1), 2 fused by the earlier WMMA kernels
 * (LLM_CUDA_FLASH=wmma at init), -1 leaves it.  For tests and benchmarks. */
void llm_backend_cuda_flash_path(llm_backend *be, int off, long runs[2]);

/* The mma.sync kernels' register layouts on one 64 x 16 tile (lo bf16 or f16): from
 * device q, k, v (64 x 16 lo, row-major) writes s (64 x 64 fp32) = q k^T and o (64 x 16
 * lo) = lo(s) v through the fused attention's own building blocks (ldmatrix, mma.sync,
 * accumulators repacked as operands).  Returns 0, or -1 (error recorded).  For tests:
 * a wrong lane or register layout shows here before it shows in the attention. */
int llm_backend_cuda_mma_check(llm_backend *be, int lo, const void *q, const void *k,
                               const void *v, float *s, void *o);

/* How many to_device uploads went through the pinned staging ring without waiting
 * [0] (up to 1 MiB each) and how many synchronised [1] (larger ones).  For tests. */
void llm_backend_cuda_upload_counts(llm_backend *be, long counts[2]);

/* How many embed_backward calls used a grouping made by embed_hint [0] and how many
 * read the ids back from the device to group them [1].  For tests. */
void llm_backend_cuda_embed_counts(llm_backend *be, long counts[2]);

/* How many graph_capture calls recorded a graph [0] and how many graph_launch calls
 * replayed one [1].  For tests and benchmarks. */
void llm_backend_cuda_graph_counts(llm_backend *be, long counts[2]);

/* 1 when device_stats has loaded NVML (after its first call), else 0. */
int llm_backend_cuda_nvml_loaded(llm_backend *be);

/* The parts LLM_CUDA_OFF can take out of the backend (cuda_off.cu), i from 0 on; NULL
 * past the last.  "all" is not among them. */
const char *llm_backend_cuda_off_name(int i);

/* ---- benchmarks and profiling (cuda_bench.cu, cuda_prof.cu; added for issue 9) ----
 * The llm_cuda_bench_* functions need no backend: each takes the device as the backend
 * would (llm_cuda_select_device(-1, ...)), makes its own stream, cuBLASLt handle and
 * buffers, and releases them before it returns.  They return one of these codes, with a
 * message in err (lowercase, "no CUDA device: ..." when there is no usable GPU or
 * driver). */
enum {
    LLM_CUDA_OK = 0,
    LLM_CUDA_ENODEV = -1,   /* no GPU, no driver, or LLM_CUDA_DEVICE names no device */
    LLM_CUDA_ENOMEM = -2,   /* device or pinned host memory exhausted */
    LLM_CUDA_EUNSUP = -3,   /* cuBLASLt has no algorithm for this shape and dtype here */
    LLM_CUDA_EFAIL = -4,    /* a CUDA or cuBLAS call failed */
    LLM_CUDA_EWRONG = -5    /* the timed kernel's output failed its check */
};

/* Choose and make current the GPU this process computes on: LLM_CUDA_DEVICE when set
 * (an ordinal among the visible devices), else local_rank modulo the visible devices when
 * local_rank >= 0 (NCCL: one GPU per rank of a node), else the current device when it is
 * not 0 (the rank's GPU once NCCL has chosen it, so that the backend created after the
 * communicator shares its GPU), else the launcher's local rank (LOCAL_RANK,
 * OMPI_COMM_WORLD_LOCAL_RANK, SLURM_LOCALID, MPI_LOCALRANKID, MV2_COMM_WORLD_LOCAL_RANK:
 * the first that is set) modulo the visible devices, else 0.  *dev = the ordinal.
 * LLM_CUDA_OK, or LLM_CUDA_ENODEV with "no CUDA device: ..." in err. */
int llm_cuda_select_device(int local_rank, int *dev, char *err, size_t errlen);

/* "cuBLAS MAJOR.MINOR.PATCH (path of libcublasLt)" in buf (n bytes): the library the
 * programs were loaded with; "cuBLAS: emulated (tests/emu)" under the emulator.  0. */
int llm_cuda_blas_info(char *buf, size_t n);

/* What cudaGetDeviceProperties / cudaDeviceGetAttribute say about the device. */
typedef struct {
    char name[128];
    int device;             /* the ordinal used */
    int cc_major, cc_minor; /* compute capability */
    int sm_count;
    double sm_clock_mhz;    /* peak SM clock (cudaDevAttrClockRate) */
    double mem_clock_mhz;   /* peak memory clock (cudaDevAttrMemoryClockRate) */
    int bus_width_bits;     /* cudaDevAttrGlobalMemoryBusWidth */
    size_t mem_total, mem_free;   /* cudaMemGetInfo */
} llm_cuda_devinfo;

/* Fill *out for the device the bench functions use.  LLM_CUDA_OK or LLM_CUDA_ENODEV. */
int llm_cuda_bench_devinfo(llm_cuda_devinfo *out, char *err, size_t errlen);

/* One GEMM configuration: row-major C(M,N) = A(M,K) B(K,N) through cuBLASLt.
 * dtype "f32" (fp32, exact fp32 math), "tf32" (fp32 storage, TF32 tensor cores), "bf16"
 * or "f16" (A and B in that type; fp32 accumulate and fp32 C).  A and B hold uniform
 * values in (-1, 1).  Each of warmup + reps runs is bracketed by CUDA events on one
 * stream, with no host synchronisation in between; times[i] receives repetition i in
 * seconds.  Then C is filled with NaN, the GEMM runs once more and its output is checked
 * (on the device, in fp64): 64 entries (the four corners and 60 pseudo-random ones)
 * against dot products of the stored inputs, and every column sum of C against
 * (1^T A) B.  Errors are normalised by the root sum of squares of the products that
 * make up each value, so the bound does not depend on K: check_err is the worst,
 * check_bound its limit (1e-3 for f32, bf16, f16; 1e-2 for tf32), and a result above it
 * (or NaN anywhere) returns LLM_CUDA_EWRONG. */
typedef struct {
    int M, N, K;
    const char *dtype;
    int warmup, reps;
    double *times;          /* out: reps entries (caller's) */
    double check_err;       /* out */
    double check_bound;     /* out */
    char algo[64];          /* out: what ran, e.g. "cublasLt heuristic #0, ws 32 MiB" */
} llm_cuda_gemm_args;
int llm_cuda_bench_gemm(llm_cuda_gemm_args *g, char *err, size_t errlen);

/* One memory-bandwidth configuration on float arrays of bytes each (bytes rounded down
 * to whole floats):
 *   "copy"   a = b            copy kernel (float4 loads/stores), device memory
 *   "memcpy" a = b            cudaMemcpyAsync device to device
 *   "triad"  a = b + 3 c      kernel, device memory
 *   "h2d"    device = host    cudaMemcpyAsync from pinned (cudaHostAlloc) memory
 *   "d2h"    host = device    cudaMemcpyAsync to pinned memory
 * Timed like the GEMM (CUDA events, times[i] in seconds), then the destination is
 * poisoned, the op runs once more and every element is compared with its exact expected
 * value; mismatches counts the wrong ones (nonzero: LLM_CUDA_EWRONG). */
typedef struct {
    const char *op;
    size_t bytes;
    int warmup, reps;
    double *times;          /* out: reps entries (caller's) */
    long long mismatches;   /* out */
} llm_cuda_mem_args;
int llm_cuda_bench_mem(llm_cuda_mem_args *m, char *err, size_t errlen);

/* Per-op timing for the profiler (common/profile_dev.c) on a "cuda" backend be.
 * A pool of cap CUDA event pairs recorded on be's stream: begin/end bracket one op
 * (and push/pop an NVTX range named name), returning/taking a slot; nothing waits on the
 * device until resolve, which synchronises on the last end event and reports, for the
 * slots 0..n-1 in order of begin, the start (seconds after the origin event) and the
 * duration.  origin synchronises the stream and records a new origin event (the caller
 * reads its host clock right after); clear forgets the slots.  begin returns -1 when
 * the pool is full (resolve, then clear).  NULL/-1 on failure (message in err). */
typedef struct llm_cuda_prof llm_cuda_prof;
int llm_cuda_prof_new(llm_cuda_prof **out, llm_backend *be, int cap, char *err, size_t errlen);
void llm_cuda_prof_free(llm_cuda_prof *p);
int llm_cuda_prof_begin(llm_cuda_prof *p, const char *name);
void llm_cuda_prof_end(llm_cuda_prof *p, int slot);
int llm_cuda_prof_resolve(llm_cuda_prof *p, double *start, double *dur, int n);
void llm_cuda_prof_clear(llm_cuda_prof *p);
int llm_cuda_prof_origin(llm_cuda_prof *p);
/* Device memory in use (whole device) and in total, from cudaMemGetInfo: 0 or -1. */
int llm_cuda_prof_meminfo(llm_cuda_prof *p, size_t *used, size_t *total);
/* NVTX ranges for spans (a training step, a decode token). */
void llm_cuda_prof_range_push(const char *name);
void llm_cuda_prof_range_pop(void);

#ifdef __cplusplus
}
#endif

#endif
