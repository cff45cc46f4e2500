/* cuda_backend.h — the CUDA backend of kernels/backend.h (built with CUDA=1 only). */
#ifndef LLM_CUDA_BACKEND_H
#define LLM_CUDA_BACKEND_H

#include <stddef.h>
#include "kernels/backend.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Fill be with the "cuda" backend on the device llm_cuda_select_device(-1, ...) makes
 * current (cuda_ext.h: LLM_CUDA_DEVICE, else the current device when the process chose
 * one, as the NCCL setup does for its rank, else the launcher's local rank, else 0): a
 * stream, cuBLAS and cuBLASLt handles and their workspaces.  threads is recorded for host-side helpers.  Returns 0, or -1 with
 * "no CUDA device: <reason>" (or another reason) in err when no usable GPU or driver is
 * present; be is then left empty.  Release with llm_backend_cuda_free. */
int llm_backend_cuda_init(llm_backend *be, int threads, char *err, size_t errlen);

/* 1 when the CUDA runtime sees at least one device (nothing is created on it), else 0:
 * no driver, no GPU, or a runtime error, which is cleared. */
int llm_backend_cuda_available(void);

/* Release what llm_backend_cuda_init acquired (not the buffers allocated through be). */
void llm_backend_cuda_free(llm_backend *be);

#ifdef __cplusplus
}
#endif

#endif
