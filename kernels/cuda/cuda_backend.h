/* cuda_backend.h — the CUDA backend of kernels/backend.h (built with CUDA=1 only). */
#ifndef LLM_CUDA_BACKEND_H
#define LLM_CUDA_BACKEND_H

#include <stddef.h>
#include "kernels/backend.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Fill be with the "cuda" backend on the calling thread's current CUDA device (device 0
 * unless the process selected another, as the NCCL setup does for a rank's GPU), or on
 * the one LLM_CUDA_DEVICE names: a stream, cuBLAS and cuBLASLt handles and their
 * workspaces.  threads is recorded for host-side helpers.  Returns 0, or -1 with
 * "no CUDA device: <reason>" (or another reason) in err when no usable GPU or driver is
 * present; be is then left empty.  Release with llm_backend_cuda_free. */
int llm_backend_cuda_init(llm_backend *be, int threads, char *err, size_t errlen);

/* Release what llm_backend_cuda_init acquired (not the buffers allocated through be). */
void llm_backend_cuda_free(llm_backend *be);

#ifdef __cplusplus
}
#endif

#endif
