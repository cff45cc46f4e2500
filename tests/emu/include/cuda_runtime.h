/* cuda_runtime.h for tests/emu: the part of the CUDA runtime API the backend uses, on the
 * CPU (tests/emu/cuda_rt.cpp).  Device memory is host memory; every stream operation
 * runs synchronously when it is issued (unless LLM_EMU_STREAMS lets copies lag behind,
 * see cuda_rt.cpp), and cudaStreamWaitEvent on an event never recorded fails; kernel launches (rewritten from <<<...>>> by
 * tests/emu/unchevron.py into emu_call) run through emu_launch and fail, as on a GPU,
 * for a bad configuration (more than 1024 threads, grid y/z over 65535, more dynamic
 * shared memory than 48 KiB without cudaFuncSetAttribute, or over 227 KiB). */
#ifndef LLM_EMU_CUDA_RUNTIME_H
#define LLM_EMU_CUDA_RUNTIME_H

#include <stddef.h>
#include <stdint.h>

/* The runtime API has C linkage and compiles as C too (common/dist_nccl.c and
 * bench_nccl.c include it in the emulated build with NCCL, tests/emu/nccl_emu.cpp);
 * the launch machinery below the API is C++ only. */
#ifdef __cplusplus
#include "tests/emu/cuda_emu.h"
#define EMU_DEFAULT(v) = v
extern "C" {
#else
#define EMU_DEFAULT(v)
#endif

typedef enum cudaError {
    cudaSuccess = 0,
    cudaErrorInvalidValue = 1,
    cudaErrorMemoryAllocation = 2,
    cudaErrorInvalidConfiguration = 9,
    cudaErrorInvalidDevice = 101,
    cudaErrorNoDevice = 100,
    cudaErrorInvalidResourceHandle = 400,
    cudaErrorIllegalState = 401,
    cudaErrorNotReady = 600,
    cudaErrorIllegalAddress = 700,
    cudaErrorLaunchFailure = 719,
    cudaErrorStreamCaptureUnsupported = 900,
    cudaErrorStreamCaptureInvalidated = 901,
} cudaError_t;

typedef struct emu_stream *cudaStream_t;
typedef struct emu_event *cudaEvent_t;
typedef struct emu_graph *cudaGraph_t;
typedef struct emu_graph_exec *cudaGraphExec_t;
typedef enum cudaStreamCaptureMode {
    cudaStreamCaptureModeGlobal = 0,
    cudaStreamCaptureModeThreadLocal = 1,
    cudaStreamCaptureModeRelaxed = 2,
} cudaStreamCaptureMode;

typedef enum cudaMemcpyKind {
    cudaMemcpyHostToHost = 0,
    cudaMemcpyHostToDevice = 1,
    cudaMemcpyDeviceToHost = 2,
    cudaMemcpyDeviceToDevice = 3,
    cudaMemcpyDefault = 4,
} cudaMemcpyKind;
typedef enum cudaDeviceAttr {
    cudaDevAttrClockRate = 13,
    cudaDevAttrMultiProcessorCount = 16,
    cudaDevAttrMemoryClockRate = 36,
    cudaDevAttrGlobalMemoryBusWidth = 37,
    cudaDevAttrMaxSharedMemoryPerBlockOptin = 97,
} cudaDeviceAttr;
typedef enum cudaFuncAttribute { cudaFuncAttributeMaxDynamicSharedMemorySize = 8 } cudaFuncAttribute;
/* cudaPointerGetAttributes: device memory of cudaMalloc, page-locked host memory of
 * cudaHostAlloc/cudaMallocHost, else unregistered (ordinary host memory) */
typedef enum cudaMemoryType {
    cudaMemoryTypeUnregistered = 0,
    cudaMemoryTypeHost = 1,
    cudaMemoryTypeDevice = 2,
    cudaMemoryTypeManaged = 3,
} cudaMemoryType;
typedef struct cudaPointerAttributes {
    enum cudaMemoryType type;
    int device;
    void *devicePointer, *hostPointer;
} cudaPointerAttributes;

#define cudaStreamNonBlocking 0x01
#define cudaEventDisableTiming 0x02
#define cudaHostAllocDefault 0x00

typedef struct cudaDeviceProp {
    char name[256];
    size_t totalGlobalMem;
    int major, minor, multiProcessorCount;
} cudaDeviceProp;

const char *cudaGetErrorString(cudaError_t e);
cudaError_t cudaGetLastError(void);
cudaError_t cudaPeekAtLastError(void);
cudaError_t cudaGetDeviceCount(int *n);
cudaError_t cudaSetDevice(int d);
cudaError_t cudaGetDevice(int *d);
cudaError_t cudaGetDeviceProperties(cudaDeviceProp *p, int d);
cudaError_t cudaDeviceGetAttribute(int *v, cudaDeviceAttr a, int d);
cudaError_t cudaDeviceGetPCIBusId(char *bus, int len, int d);
cudaError_t cudaDeviceSynchronize(void);
cudaError_t cudaMalloc(void **p, size_t bytes);
cudaError_t cudaFree(void *p);
cudaError_t cudaMallocHost(void **p, size_t bytes);
cudaError_t cudaHostAlloc(void **p, size_t bytes, unsigned flags);
cudaError_t cudaFreeHost(void *p);
cudaError_t cudaMemGetInfo(size_t *free_b, size_t *total_b);
cudaError_t cudaMemcpy(void *dst, const void *src, size_t n, cudaMemcpyKind k);
cudaError_t cudaMemcpyAsync(void *dst, const void *src, size_t n, cudaMemcpyKind k,
                            cudaStream_t s EMU_DEFAULT(0));
cudaError_t cudaMemset(void *p, int v, size_t n);
cudaError_t cudaMemsetAsync(void *p, int v, size_t n, cudaStream_t s EMU_DEFAULT(0));
cudaError_t cudaStreamCreate(cudaStream_t *s);
cudaError_t cudaStreamCreateWithFlags(cudaStream_t *s, unsigned flags);
cudaError_t cudaStreamDestroy(cudaStream_t s);
cudaError_t cudaStreamSynchronize(cudaStream_t s);
cudaError_t cudaStreamQuery(cudaStream_t s);
cudaError_t cudaStreamWaitEvent(cudaStream_t s, cudaEvent_t e, unsigned flags EMU_DEFAULT(0));
cudaError_t cudaEventCreate(cudaEvent_t *e);
cudaError_t cudaEventCreateWithFlags(cudaEvent_t *e, unsigned flags);
cudaError_t cudaEventDestroy(cudaEvent_t e);
cudaError_t cudaEventRecord(cudaEvent_t e, cudaStream_t s EMU_DEFAULT(0));
cudaError_t cudaEventSynchronize(cudaEvent_t e);
cudaError_t cudaEventQuery(cudaEvent_t e);
cudaError_t cudaEventElapsedTime(float *ms, cudaEvent_t a, cudaEvent_t b);
cudaError_t cudaPointerGetAttributes(cudaPointerAttributes *a, const void *p);

/* Stream capture (CUDA graphs), as the thread-local mode has it: while a stream is
 * recorded, its kernel launches and device/pinned copies and memsets are stored, not run
 * (a bad launch configuration still fails at once); anything that synchronises,
 * allocates or frees, copies synchronously or from pageable memory, records or waits on
 * an event on the recorded stream, or calls cuBLAS on it fails (or, for cuBLAS,
 * invalidates the recording) and cudaStreamEndCapture then reports it invalidated.  A
 * launched graph runs its operations in order, at once, after its stream's queue. */
cudaError_t cudaStreamBeginCapture(cudaStream_t s, cudaStreamCaptureMode mode);
cudaError_t cudaStreamEndCapture(cudaStream_t s, cudaGraph_t *g);
cudaError_t cudaGraphInstantiate(cudaGraphExec_t *e, cudaGraph_t g,
                                 unsigned long long flags EMU_DEFAULT(0));
cudaError_t cudaGraphLaunch(cudaGraphExec_t e, cudaStream_t s);
cudaError_t cudaGraphDestroy(cudaGraph_t g);
cudaError_t cudaGraphExecDestroy(cudaGraphExec_t e);
/* graphs and executable graphs alive now (for tests: a leak shows) */
long emu_graphs_alive(void);
/* The sticky error the context is in (cudaSuccess: none).  LLM_EMU_FAULT=launch:N[:NAME]
 * makes the N-th kernel run (counted from 1; of the kernels whose name as written at the
 * launch begins with NAME, when given; a graph's replays count) fault as an illegal
 * memory access does on a GPU: the kernel does not run and its launch reports nothing
 * (the fault is asynchronous: cudaGetLastError right after it is still cudaSuccess);
 * from the next call on, every runtime call that reaches the device (copies, memsets,
 * launches, synchronisations, allocations, events, graphs), and cudaGetLastError and
 * cudaPeekAtLastError after such a call, return cudaErrorIllegalAddress, which nothing
 * clears; cuBLAS calls fail with CUBLAS_STATUS_EXECUTION_FAILED.  Frees still release
 * the memory (the context's memory is gone on a GPU too) but report the error.  Any
 * other value of LLM_EMU_FAULT ends the process with a message. */
cudaError_t emu_sticky_error(void);

#ifdef __cplusplus
}   /* extern "C" */

/* The dynamic shared memory a kernel may use beyond 48 KiB, per device (the current one
 * when set; the launch's stream's when launched) and kernel, keyed by the kernel's name
 * as written (unchevron.py rewrites cudaFuncSetAttribute(kern, ...) into
 * cudaFuncSetAttribute(emu_named{"kern"}, ...) and launches likewise). */
struct emu_named {
    const char *name;
};
cudaError_t cudaFuncSetAttribute(emu_named kernel, cudaFuncAttribute a, int v);

/* kern<<<grid, block, smem, stream>>>(args) is rewritten to
 * emu_call("kern", [&](auto... a) { kern(a...); }, grid, block, smem, stream)(args):
 * the launch, checked like the hardware's, then every thread of every block through
 * emu_launch; a failure is the next cudaGetLastError(). */
void emu_kernel_run(const char *kernel, const void *site, dim3 grid, dim3 block, size_t smem,
                    const std::function<void()> &body, cudaStream_t stream);
/* Run what is queued on s (every stream when s is 0) before a kernel or cuBLAS call on s
 * reads the memory; a no-op unless LLM_EMU_STREAMS lets copies lag (cuda_rt.cpp). */
void emu_stream_flush(cudaStream_t s);
/* Test hook: the LLM_EMU_STREAMS mode ("late", "ahead", else eager) from now on. */
void emu_set_stream_mode(const char *mode);
/* one address per launch site (per lambda type) */
template <class F> static inline const void *emu_site(void)
{
    static char k;
    return &k;
}
/* Bytes of a launch's parameters laid out in order (each at its alignment): a kernel's
 * parameters travel in a constant bank of 4 KB (32 KB from CUDA 12.1 on Volta and later;
 * the emulated build holds every launch to the 4 KB of any toolkit, at compile time). */
template <class... A> constexpr size_t emu_param_bytes(void)
{
    size_t off = 0;
    ((off = (off + alignof(A) - 1) / alignof(A) * alignof(A) + sizeof(A)), ...);
    return off;
}
template <class F> struct emu_launcher {
    const char *name;
    F f;
    dim3 grid, block;
    size_t smem;
    cudaStream_t stream;
    template <class... A> void operator()(A... a) const
    {
        static_assert(emu_param_bytes<A...>() <= 4096, "kernel parameters beyond 4 KB");
        /* by value: a recorded launch (stream capture) runs after this returns */
        F fn = f;
        emu_kernel_run(name, emu_site<F>(), grid, block, smem, [fn, a...] { fn(a...); }, stream);
    }
};
template <class F>
static inline emu_launcher<F> emu_call(const char *name, F f, dim3 grid, dim3 block, size_t smem = 0,
                                       cudaStream_t stream = 0)
{
    return emu_launcher<F>{name, f, grid, block, smem, stream};
}

/* Run op on s in stream order, as a copy would (tests/emu/nccl_emu.cpp's collectives). */
void emu_stream_issue(cudaStream_t s, const std::function<void()> &op);
#endif   /* __cplusplus */

#endif
