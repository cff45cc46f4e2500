/* cublas_dl.h — cuBLAS/cuBLASLt opened at run time (kernels/cuda/cublas_dl.c). */
#ifndef LLM_CUBLAS_DL_H
#define LLM_CUBLAS_DL_H

#include <stddef.h>

#ifdef __cplusplus
extern "C" {
#endif

/* Open cuBLAS and cuBLASLt (libcublasLt.so.N, libcublas.so.N of the headers built
 * against) once per process; 0, or -1 with "cuBLAS: cannot load ...: <dlerror>" in err.
 * The backend calls it before its first cuBLAS call; the forwarding functions load on
 * their own when called first and fail with CUBLAS_STATUS_NOT_INITIALIZED when the
 * libraries cannot be opened.  Under the emulator (CUDA=emu) it always succeeds. */
int llm_cuda_blas_load(char *err, size_t errlen);

/* "cuBLAS MAJOR.MINOR.PATCH (path of libcublasLt)" in buf, opening it first: 0, or -1
 * with why not (as llm_cuda_blas_load).  The emulator: "cuBLAS: emulated". */
int llm_cuda_blas_info(char *buf, size_t n);

/* Open the named libraries (NULL: the defaults above), resolve every function the
 * backend uses, close them again: 0, or -1 with the reason.  For tests. */
int llm_cuda_blas_probe(const char *lt_name, const char *blas_name, char *err, size_t errlen);

#ifdef __cplusplus
}
#endif

#endif
