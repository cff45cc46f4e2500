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

/* How many to_device uploads went through the pinned staging ring without waiting
 * [0] (up to 1 MiB each) and how many synchronised [1] (larger ones).  For tests. */
void llm_backend_cuda_upload_counts(llm_backend *be, long counts[2]);

/* 1 when device_stats has loaded NVML (after its first call), else 0. */
int llm_backend_cuda_nvml_loaded(llm_backend *be);

#ifdef __cplusplus
}
#endif

#endif
