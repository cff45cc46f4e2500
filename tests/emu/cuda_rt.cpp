/* cuda_rt.cpp — the CUDA runtime stand-ins of tests/emu/include/cuda_runtime.h. */
#include <cuda_runtime.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <map>
#include <string>
#include <mutex>

namespace {

/* The emulated device: one, unless LLM_EMU_DEVICES=0 says none.  Memory is counted
 * against a nominal 16 GiB so that cudaMemGetInfo and out-of-memory paths behave. */
const size_t TOTAL = (size_t)16 << 30;

struct Rt {
    std::mutex mu;
    std::map<void *, size_t> dev;           /* device allocations */
    std::map<std::string, int> smem_optin;  /* kernel -> dynamic shared memory allowed */
    std::map<const void *, bool> syncs;     /* launch site -> reached a barrier when it ran */
    size_t used = 0;
    cudaError_t last = cudaSuccess;
};

Rt &rt()
{
    static Rt r;
    return r;
}

cudaError_t fail(cudaError_t e)
{
    if (e != cudaSuccess) rt().last = e;
    return e;
}

int devices()
{
    const char *s = getenv("LLM_EMU_DEVICES");
    return s && *s == '0' ? 0 : 1;
}

double now_ms()
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec * 1e3 + ts.tv_nsec / 1e6;
}

}  // namespace

struct emu_stream {
    unsigned flags;
};
struct emu_event {
    double t;
    int recorded;
};

const char *cudaGetErrorString(cudaError_t e)
{
    switch (e) {
    case cudaSuccess: return "no error";
    case cudaErrorInvalidValue: return "invalid argument";
    case cudaErrorMemoryAllocation: return "out of memory";
    case cudaErrorInvalidConfiguration: return "invalid configuration argument";
    case cudaErrorInvalidDevice: return "invalid device ordinal";
    case cudaErrorNoDevice: return "no CUDA-capable device is detected";
    case cudaErrorLaunchFailure: return "unspecified launch failure";
    }
    return "unknown error";
}

cudaError_t cudaGetLastError(void)
{
    cudaError_t e = rt().last;
    rt().last = cudaSuccess;
    return e;
}
cudaError_t cudaPeekAtLastError(void) { return rt().last; }

cudaError_t cudaGetDeviceCount(int *n)
{
    *n = devices();
    return *n ? cudaSuccess : fail(cudaErrorNoDevice);
}
cudaError_t cudaSetDevice(int d) { return d >= 0 && d < devices() ? cudaSuccess : fail(cudaErrorInvalidDevice); }
cudaError_t cudaGetDevice(int *d)
{
    *d = 0;
    return devices() ? cudaSuccess : fail(cudaErrorNoDevice);
}
cudaError_t cudaGetDeviceProperties(cudaDeviceProp *p, int d)
{
    if (d < 0 || d >= devices()) return fail(cudaErrorInvalidDevice);
    memset(p, 0, sizeof *p);
    snprintf(p->name, sizeof p->name, "llmkit emulated device (tests/emu)");
    p->totalGlobalMem = TOTAL;
    p->major = 9;
    p->multiProcessorCount = 4;
    return cudaSuccess;
}
cudaError_t cudaDeviceGetAttribute(int *v, cudaDeviceAttr a, int d)
{
    if (d < 0 || d >= devices()) return fail(cudaErrorInvalidDevice);
    switch (a) {
    case cudaDevAttrClockRate: *v = 1000000; return cudaSuccess;           /* kHz */
    case cudaDevAttrMultiProcessorCount: *v = 4; return cudaSuccess;
    case cudaDevAttrMemoryClockRate: *v = 1000000; return cudaSuccess;     /* kHz */
    case cudaDevAttrGlobalMemoryBusWidth: *v = 256; return cudaSuccess;    /* bits */
    }
    return fail(cudaErrorInvalidValue);
}
cudaError_t cudaDeviceGetPCIBusId(char *bus, int len, int d)
{
    if (d < 0 || d >= devices() || len < 13) return fail(cudaErrorInvalidValue);
    snprintf(bus, (size_t)len, "0000:00:00.0");
    return cudaSuccess;
}
cudaError_t cudaDeviceSynchronize(void) { return cudaSuccess; }

cudaError_t cudaMalloc(void **p, size_t bytes)
{
    Rt &r = rt();
    std::lock_guard<std::mutex> g(r.mu);
    *p = NULL;
    if (bytes > TOTAL - r.used) return fail(cudaErrorMemoryAllocation);
    void *q = NULL;
    if (posix_memalign(&q, 256, bytes ? bytes : 1)) return fail(cudaErrorMemoryAllocation);
    memset(q, 0xa5, bytes);   /* device memory starts as garbage, not zeros */
    r.dev[q] = bytes;
    r.used += bytes;
    *p = q;
    return cudaSuccess;
}
cudaError_t cudaFree(void *p)
{
    if (!p) return cudaSuccess;
    Rt &r = rt();
    std::lock_guard<std::mutex> g(r.mu);
    auto it = r.dev.find(p);
    if (it == r.dev.end()) return fail(cudaErrorInvalidValue);
    r.used -= it->second;
    r.dev.erase(it);
    free(p);
    return cudaSuccess;
}
cudaError_t cudaMallocHost(void **p, size_t bytes)
{
    *p = malloc(bytes ? bytes : 1);
    return *p ? cudaSuccess : fail(cudaErrorMemoryAllocation);
}
cudaError_t cudaHostAlloc(void **p, size_t bytes, unsigned flags)
{
    (void)flags;
    return cudaMallocHost(p, bytes);
}
cudaError_t cudaFreeHost(void *p)
{
    free(p);
    return cudaSuccess;
}
cudaError_t cudaMemGetInfo(size_t *free_b, size_t *total_b)
{
    if (!devices()) return fail(cudaErrorNoDevice);
    *total_b = TOTAL;
    *free_b = TOTAL - rt().used;
    return cudaSuccess;
}
cudaError_t cudaMemcpy(void *dst, const void *src, size_t n, cudaMemcpyKind k)
{
    (void)k;
    if (n && (!dst || !src)) return fail(cudaErrorInvalidValue);
    if (n) memmove(dst, src, n);
    return cudaSuccess;
}
cudaError_t cudaMemcpyAsync(void *dst, const void *src, size_t n, cudaMemcpyKind k, cudaStream_t s)
{
    (void)s;
    return cudaMemcpy(dst, src, n, k);
}
cudaError_t cudaMemset(void *p, int v, size_t n)
{
    if (n && !p) return fail(cudaErrorInvalidValue);
    if (n) memset(p, v, n);
    return cudaSuccess;
}
cudaError_t cudaMemsetAsync(void *p, int v, size_t n, cudaStream_t s)
{
    (void)s;
    return cudaMemset(p, v, n);
}

cudaError_t cudaStreamCreate(cudaStream_t *s) { return cudaStreamCreateWithFlags(s, 0); }
cudaError_t cudaStreamCreateWithFlags(cudaStream_t *s, unsigned flags)
{
    *s = new emu_stream{flags};
    return cudaSuccess;
}
cudaError_t cudaStreamDestroy(cudaStream_t s)
{
    delete s;
    return cudaSuccess;
}
cudaError_t cudaStreamSynchronize(cudaStream_t s)
{
    (void)s;
    return cudaSuccess;
}
cudaError_t cudaStreamWaitEvent(cudaStream_t s, cudaEvent_t e, unsigned flags)
{
    (void)s;
    (void)e;
    (void)flags;
    return cudaSuccess;
}
cudaError_t cudaEventCreate(cudaEvent_t *e) { return cudaEventCreateWithFlags(e, 0); }
cudaError_t cudaEventCreateWithFlags(cudaEvent_t *e, unsigned flags)
{
    (void)flags;
    *e = new emu_event{0.0, 0};
    return cudaSuccess;
}
cudaError_t cudaEventDestroy(cudaEvent_t e)
{
    delete e;
    return cudaSuccess;
}
cudaError_t cudaEventRecord(cudaEvent_t e, cudaStream_t s)
{
    (void)s;
    if (!e) return fail(cudaErrorInvalidValue);
    e->t = now_ms();
    e->recorded = 1;
    return cudaSuccess;
}
cudaError_t cudaEventSynchronize(cudaEvent_t e) { return e ? cudaSuccess : fail(cudaErrorInvalidValue); }
cudaError_t cudaEventQuery(cudaEvent_t e) { return e ? cudaSuccess : fail(cudaErrorInvalidValue); }
cudaError_t cudaEventElapsedTime(float *ms, cudaEvent_t a, cudaEvent_t b)
{
    if (!a || !b || !a->recorded || !b->recorded) return fail(cudaErrorInvalidValue);
    *ms = (float)(b->t - a->t);
    return cudaSuccess;
}

cudaError_t cudaFuncSetAttribute(emu_named kernel, cudaFuncAttribute a, int bytes)
{
    if (a != cudaFuncAttributeMaxDynamicSharedMemorySize || bytes < 0 || bytes > 227 * 1024)
        return fail(cudaErrorInvalidValue);
    rt().smem_optin[kernel.name] = bytes;
    return cudaSuccess;
}

void emu_kernel_run(const char *kernel, const void *site, dim3 grid, dim3 block, size_t smem,
                    const std::function<void()> &body)
{
    Rt &r = rt();
    size_t threads = (size_t)block.x * block.y * block.z;
    size_t allowed = 48 * 1024;
    auto it = r.smem_optin.find(kernel);
    if (it != r.smem_optin.end() && (size_t)it->second > allowed) allowed = (size_t)it->second;
    if (!threads || threads > 1024 || block.z > 64 || !grid.x || !grid.y || !grid.z ||
        grid.y > 65535 || grid.z > 65535) {
        fprintf(stderr, "emu: launch: grid %ux%ux%u, block %ux%ux%u\n", grid.x, grid.y, grid.z,
                block.x, block.y, block.z);
        fail(cudaErrorInvalidConfiguration);
        return;
    }
    if (smem > allowed) {
        fprintf(stderr, "emu: launch of %s: %zu bytes of dynamic shared memory, %zu allowed\n",
                kernel, smem, allowed);
        fail(cudaErrorInvalidValue);
        return;
    }
    /* A launch site whose kernel reached no barrier or shuffle when it ran with fibers
     * runs its threads as plain calls from then on (LLM_EMU_FIBERS=1: never); should it reach one after all, the
     * launch fails loudly. */
    const char *o = getenv("LLM_EMU_ORDER"), *fib = getenv("LLM_EMU_FIBERS");   /* 0..4: emu_launch */
    auto sy = r.syncs.find(site);
    bool direct = !(fib && *fib == '1') && sy != r.syncs.end() && !sy->second;
    if (emu_launch(grid, block, smem, body, o ? atoi(o) : 0, 1, direct)) {
        fprintf(stderr, "emu: kernel %s failed: %s\n", kernel, emu_error());
        fail(cudaErrorLaunchFailure);
        return;
    }
    if (!direct) r.syncs[site] = emu_last_syncs > 0;
}
