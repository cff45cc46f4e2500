/* cuda_rt.cpp — the CUDA runtime stand-ins of tests/emu/include/cuda_runtime.h. */
#include <cuda_runtime.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <deque>
#include <functional>
#include <vector>
#include <map>
#include <string>
#include <mutex>

namespace {

/* The emulated devices: one, unless LLM_EMU_DEVICES says none (0) or up to 8.  They share
 * one memory, counted against a nominal 16 GiB so that cudaMemGetInfo and out-of-memory
 * paths behave; what is per device is the current device of each thread (cudaSetDevice),
 * a stream's device (the current one when it was made: a kernel launched on a stream of
 * another device fails, as on a GPU) and the shared-memory opt-in of each kernel. */
const size_t TOTAL = (size_t)16 << 30;

int lag_env()
{
    const char *m = getenv("LLM_EMU_STREAMS");
    return m && !strcmp(m, "late") ? 1 : m && !strcmp(m, "ahead") ? 2 : 0;
}

struct Rt {
    std::mutex mu;
    std::map<void *, size_t> dev;           /* device allocations */
    std::map<std::pair<int, std::string>, int> smem_optin;   /* (device, kernel) -> dynamic
                                                                 shared memory allowed */
    std::map<const void *, bool> syncs;     /* launch site -> reached a barrier when it ran */
    std::map<void *, size_t> pinned;        /* cudaHostAlloc / cudaMallocHost blocks */
    std::map<uint64_t, struct emu_stream *> streams;   /* live streams by id */
    uint64_t next_sid = 1;
    int lag = lag_env();                    /* LLM_EMU_STREAMS: 0 eager, 1 late, 2 ahead */
    int capturing = 0;                      /* streams being captured now */
    long graphs = 0;                        /* cudaGraph_t and cudaGraphExec_t alive */
    size_t used = 0;
    cudaError_t last = cudaSuccess;
    cudaError_t sticky = cudaSuccess;       /* the context's sticky error (LLM_EMU_FAULT) */
    bool faulted = false;                   /* a kernel faulted: sticky from the next call */
    long fault_at = 0;                      /* LLM_EMU_FAULT=launch:N[:NAME]: N (0: none) */
    std::string fault_name;                 /* ... NAME ("": every kernel) */
    long fault_seen = 0;                    /* launches of those kernels run so far */
};

/* LLM_EMU_FAULT=launch:N[:NAME] (cuda_runtime.h, emu_sticky_error); anything else is a
 * mistake of the test that set it: said, and the process ends */
void fault_env(Rt &r)
{
    const char *s = getenv("LLM_EMU_FAULT");
    if (!s || !*s) return;
    char *end = NULL;
    long n = strncmp(s, "launch:", 7) ? 0 : strtol(s + 7, &end, 10);
    if (n < 1 || !end || (*end && *end != ':')) {
        fprintf(stderr, "emu: LLM_EMU_FAULT='%s': expected launch:N or launch:N:KERNEL (N >= 1)\n", s);
        exit(70);
    }
    r.fault_at = n;
    if (*end == ':') r.fault_name = end + 1;
}

Rt &rt()
{
    static Rt r;
    static bool env = (fault_env(r), true);
    (void)env;
    return r;
}

cudaError_t fail(cudaError_t e)
{
    if (e != cudaSuccess) rt().last = e;
    return e;
}

/* The context's sticky error: set by the first call after the kernel that faulted (not
 * by the cudaGetLastError right after its launch, which the fault, asynchronous, does not
 * reach) */
cudaError_t sticky_now()
{
    Rt &r = rt();
    if (r.faulted) {
        r.faulted = false;
        r.sticky = cudaErrorIllegalAddress;
    }
    return r.sticky;
}
/* cudaSuccess, or the sticky error (also the last error) once the context has one */
cudaError_t sticky()
{
    cudaError_t e = sticky_now();
    return e != cudaSuccess ? fail(e) : cudaSuccess;
}
#define STICKY()                                        \
    do {                                                \
        if (sticky_now() != cudaSuccess) return sticky(); \
    } while (0)

int devices()
{
    const char *s = getenv("LLM_EMU_DEVICES");
    if (!s || !*s) return 1;
    int n = atoi(s);
    return n < 0 ? 0 : n > 8 ? 8 : n;
}

/* The largest dynamic shared memory a kernel may opt in to, in bytes: 227 KiB as on
 * sm_90, or LLM_EMU_SMEM_OPTIN KiB (48 to 227; 99 is sm_86/sm_89's, 163 sm_80's) */
int smem_optin_max()
{
    const char *s = getenv("LLM_EMU_SMEM_OPTIN");
    int k = s && *s ? atoi(s) : 227;
    return (k < 48 ? 48 : k > 227 ? 227 : k) * 1024;
}

/* The compute capability the devices report: 9.0, or LLM_EMU_CC=M.m (a device that
 * llm-bench's peak table does not know, for instance) */
void emu_cc(int *major, int *minor)
{
    const char *s = getenv("LLM_EMU_CC");
    int ma = 9, mi = 0;
    if (s && *s && sscanf(s, "%d.%d", &ma, &mi) != 2) ma = 9, mi = 0;
    *major = ma;
    *minor = mi;
}

thread_local int cur_dev = 0;   /* cudaSetDevice: per host thread, as in CUDA */

double now_ms()
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec * 1e3 + ts.tv_nsec / 1e6;
}

}  // namespace

/* Streams.  By default every stream operation runs when it is issued.  LLM_EMU_STREAMS
 * lets the copies and memsets queued on a stream lag behind (kernels and cuBLAS calls
 * still run at once, after their own stream's queue), in one of two orders that a GPU
 * may also take, so that a missing cudaStreamWaitEvent or an early reuse of a buffer
 * shows up as wrong data:
 *   late   every stream's copies wait until something needs them: a kernel or cuBLAS
 *          call on the stream, a cudaStreamWaitEvent on an event recorded after them,
 *          a synchronisation (stream, event, device), a synchronous cudaMemcpy/Memset,
 *          cudaFree(Host) or cudaStreamDestroy.  A consumer that does not wait for a
 *          copy on another stream reads what was there before.
 *   ahead  only streams that have launched kernels (compute streams) queue; the others
 *          (copy streams) run at once, ahead of the compute work queued before: a copy
 *          that does not wait for the compute stream to finish with its destination
 *          overwrites it too early.
 * A copy from or to host memory that is not pinned (cudaHostAlloc/cudaMallocHost) runs
 * at once after its stream's queue, as the driver stages it synchronously.  The queues
 * assume one host thread (the tests'); the default mode has none. */
struct emu_stream {
    unsigned flags;
    uint64_t id;
    int dev;                    /* the device current when it was made */
    std::deque<std::function<void()>> q;
    uint64_t queued, done;      /* operations issued / run */
    bool kernels;               /* has launched a kernel or cuBLAS call */
    /* stream capture: the operations recorded so far (nullptr: not capturing), and
     * whether something illegal invalidated the recording */
    std::vector<std::function<void()>> *cap = nullptr;
    bool cap_bad = false;
};
struct emu_graph {
    std::vector<std::function<void()>> ops;
};
struct emu_graph_exec {
    std::vector<std::function<void()>> ops;
};
struct emu_event {
    double t;
    int recorded;
    uint64_t sid, seq;          /* complete once stream sid has run seq operations */
};

namespace {

int lag_mode() { return rt().lag; }

emu_stream *stream_of(uint64_t id)
{
    std::lock_guard<std::mutex> g(rt().mu);
    auto it = rt().streams.find(id);
    return it == rt().streams.end() ? nullptr : it->second;
}

/* Run s's queue up to its seq-th operation (a destroyed stream has run everything). */
void run_to(uint64_t sid, uint64_t seq)
{
    if (!lag_mode()) return;   /* nothing is ever queued */
    emu_stream *s;
    while ((s = stream_of(sid)) && s->done < seq && !s->q.empty()) {
        std::function<void()> op = std::move(s->q.front());
        s->q.pop_front();
        s->done++;
        op();
    }
}

void run_all()
{
    if (!lag_mode()) return;
    for (int again = 1; again;) {
        again = 0;
        for (auto &kv : rt().streams)
            if (!kv.second->q.empty()) {
                run_to(kv.first, kv.second->queued);
                again = 1;
                break;   /* running may have changed the map's queues: look again */
            }
    }
}

bool queues(emu_stream *s)
{
    int m = lag_mode();
    return s && (m == 1 || (m == 2 && s->kernels));
}

/* Issue op on s: queued when s lags, else run after s's queue (the legacy stream 0 after
 * every queue). */
void issue(emu_stream *s, std::function<void()> op)
{
    if (queues(s)) {
        s->q.push_back(std::move(op));
        s->queued++;
        return;
    }
    if (s) run_to(s->id, s->queued);
    else run_all();
    if (s) { s->queued++; s->done++; }
    op();
}

/* p inside one of the blocks of m (start -> bytes; an empty block holds its start when
 * min1, as a 0-byte device allocation still has an address); the caller holds r.mu */
static bool in_blocks(const std::map<void *, size_t> &m, const void *p, bool min1)
{
    auto it = m.upper_bound((void *)p);
    if (it == m.begin()) return false;
    --it;
    size_t n = it->second ? it->second : (min1 ? 1 : 0);
    return (const char *)p < (const char *)it->first + n;
}

bool is_pinned(const void *p)
{
    Rt &r = rt();
    std::lock_guard<std::mutex> g(r.mu);
    return in_blocks(r.pinned, p, false);
}

bool is_device(const void *p)
{
    Rt &r = rt();
    std::lock_guard<std::mutex> g(r.mu);
    return in_blocks(r.dev, p, true);
}

/* Something thread-local capture forbids while a stream is recorded (a synchronisation,
 * an allocation, a synchronous copy): reported, and every recording invalidated; true
 * when the caller must fail with cudaErrorStreamCaptureUnsupported. */
bool capture_forbids(const char *what)
{
    Rt &r = rt();
    if (!r.capturing) return false;
    fprintf(stderr, "emu: %s while a stream is being captured\n", what);
    std::lock_guard<std::mutex> g(r.mu);
    for (auto &kv : r.streams)
        if (kv.second->cap) kv.second->cap_bad = true;
    return true;
}

}  // namespace

void emu_set_stream_mode(const char *mode)
{
    run_all();   /* nothing left queued under the old mode */
    rt().lag = mode && !strcmp(mode, "late") ? 1 : mode && !strcmp(mode, "ahead") ? 2 : 0;
}

void emu_stream_flush(cudaStream_t s)
{
    if (s && s->cap) {
        /* a cuBLAS call (kernels and copies are recorded before they get here): CUDA
         * would record it; the emulator does not, so the recording is refused */
        fprintf(stderr, "emu: cuBLAS on a stream being captured (not recorded by the emulator)\n");
        s->cap_bad = true;
        return;
    }
    if (!lag_mode()) return;
    if (!s) { run_all(); return; }
    s->kernels = true;
    run_to(s->id, s->queued);
}

const char *cudaGetErrorString(cudaError_t e)
{
    switch (e) {
    case cudaSuccess: return "no error";
    case cudaErrorInvalidValue: return "invalid argument";
    case cudaErrorMemoryAllocation: return "out of memory";
    case cudaErrorInvalidConfiguration: return "invalid configuration argument";
    case cudaErrorInvalidDevice: return "invalid device ordinal";
    case cudaErrorNoDevice: return "no CUDA-capable device is detected";
    case cudaErrorNotReady: return "device not ready";
    case cudaErrorIllegalAddress: return "an illegal memory access was encountered";
    case cudaErrorLaunchFailure: return "unspecified launch failure";
    case cudaErrorInvalidResourceHandle: return "invalid resource handle";
    case cudaErrorIllegalState: return "the operation is not permitted in the current state";
    case cudaErrorStreamCaptureUnsupported: return "operation not permitted when stream is capturing";
    case cudaErrorStreamCaptureInvalidated: return "operation failed due to a previous error during capture";
    }
    return "unknown error";
}

cudaError_t cudaGetLastError(void)
{
    if (rt().sticky != cudaSuccess) return rt().sticky;   /* not cleared */
    cudaError_t e = rt().last;
    rt().last = cudaSuccess;
    return e;
}
cudaError_t cudaPeekAtLastError(void) { return rt().sticky != cudaSuccess ? rt().sticky : rt().last; }
cudaError_t emu_sticky_error(void) { return sticky_now(); }

cudaError_t cudaGetDeviceCount(int *n)
{
    *n = devices();
    return *n ? cudaSuccess : fail(cudaErrorNoDevice);
}
cudaError_t cudaSetDevice(int d)
{
    if (d < 0 || d >= devices()) return fail(cudaErrorInvalidDevice);
    cur_dev = d;
    return cudaSuccess;
}
cudaError_t cudaGetDevice(int *d)
{
    *d = cur_dev;
    return devices() ? cudaSuccess : fail(cudaErrorNoDevice);
}
cudaError_t cudaGetDeviceProperties(cudaDeviceProp *p, int d)
{
    if (d < 0 || d >= devices()) return fail(cudaErrorInvalidDevice);
    memset(p, 0, sizeof *p);
    snprintf(p->name, sizeof p->name, "llmkit emulated device (tests/emu)");
    p->totalGlobalMem = TOTAL;
    emu_cc(&p->major, &p->minor);
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
    case cudaDevAttrMaxSharedMemoryPerBlockOptin: *v = smem_optin_max(); return cudaSuccess;
    }
    return fail(cudaErrorInvalidValue);
}
cudaError_t cudaDeviceGetPCIBusId(char *bus, int len, int d)
{
    if (d < 0 || d >= devices() || len < 13) return fail(cudaErrorInvalidValue);
    snprintf(bus, (size_t)len, "0000:00:00.0");
    return cudaSuccess;
}
cudaError_t cudaDeviceSynchronize(void);

cudaError_t cudaMalloc(void **p, size_t bytes)
{
    STICKY();
    if (capture_forbids("cudaMalloc")) return fail(cudaErrorStreamCaptureUnsupported);
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
    if (capture_forbids("cudaFree")) return fail(cudaErrorStreamCaptureUnsupported);
    run_all();   /* cudaFree waits for the device */
    Rt &r = rt();
    std::lock_guard<std::mutex> g(r.mu);
    auto it = r.dev.find(p);
    if (it == r.dev.end()) return fail(cudaErrorInvalidValue);
    r.used -= it->second;
    r.dev.erase(it);
    free(p);
    return sticky();   /* released, but the context's error is said */
}
cudaError_t cudaMallocHost(void **p, size_t bytes)
{
    STICKY();
    if (capture_forbids("cudaMallocHost")) return fail(cudaErrorStreamCaptureUnsupported);
    *p = malloc(bytes ? bytes : 1);
    if (!*p) return fail(cudaErrorMemoryAllocation);
    Rt &r = rt();
    std::lock_guard<std::mutex> g(r.mu);
    r.pinned[*p] = bytes ? bytes : 1;
    return cudaSuccess;
}
cudaError_t cudaHostAlloc(void **p, size_t bytes, unsigned flags)
{
    (void)flags;
    return cudaMallocHost(p, bytes);
}
cudaError_t cudaFreeHost(void *p)
{
    if (!p) return cudaSuccess;
    if (capture_forbids("cudaFreeHost")) return fail(cudaErrorStreamCaptureUnsupported);
    run_all();   /* as cudaFree: queued copies from the block finish first */
    Rt &r = rt();
    {
        std::lock_guard<std::mutex> g(r.mu);
        auto it = r.pinned.find(p);
        if (it == r.pinned.end()) return fail(cudaErrorInvalidValue);
        r.pinned.erase(it);
    }
    free(p);
    return sticky();   /* released, but the context's error is said */
}
cudaError_t cudaPointerGetAttributes(cudaPointerAttributes *a, const void *p)
{
    if (!a) return fail(cudaErrorInvalidValue);
    memset(a, 0, sizeof *a);
    int d = 0;
    cudaGetDevice(&d);
    a->device = d;
    if (is_device(p)) {
        a->type = cudaMemoryTypeDevice;
        a->devicePointer = (void *)p;
    } else if (is_pinned(p)) {
        a->type = cudaMemoryTypeHost;
        a->devicePointer = a->hostPointer = (void *)p;
    } else {
        a->type = cudaMemoryTypeUnregistered;
        a->device = -2;
        a->hostPointer = (void *)p;
    }
    return cudaSuccess;
}
void emu_stream_issue(cudaStream_t s, const std::function<void()> &op)
{
    std::function<void()> f = op;
    issue(s, [f] { f(); });
}
cudaError_t cudaMemGetInfo(size_t *free_b, size_t *total_b)
{
    STICKY();
    if (!devices()) return fail(cudaErrorNoDevice);
    *total_b = TOTAL;
    *free_b = TOTAL - rt().used;
    return cudaSuccess;
}
cudaError_t cudaMemcpy(void *dst, const void *src, size_t n, cudaMemcpyKind k)
{
    STICKY();
    if (capture_forbids("cudaMemcpy")) return fail(cudaErrorStreamCaptureUnsupported);
    (void)k;
    if (n && (!dst || !src)) return fail(cudaErrorInvalidValue);
    run_all();
    if (n) memmove(dst, src, n);
    return cudaSuccess;
}
cudaError_t cudaMemcpyAsync(void *dst, const void *src, size_t n, cudaMemcpyKind k, cudaStream_t s)
{
    STICKY();
    (void)k;
    if (n && (!dst || !src)) return fail(cudaErrorInvalidValue);
    if (!n) return cudaSuccess;
    bool pageable = (!is_device(dst) && !is_pinned(dst)) || (!is_device(src) && !is_pinned(src));
    if (s && s->cap) {   /* recorded: a copy node (never from or to pageable memory) */
        if (pageable) {
            fprintf(stderr, "emu: cudaMemcpyAsync of pageable memory on a stream being captured\n");
            s->cap_bad = true;
            return fail(cudaErrorStreamCaptureUnsupported);
        }
        s->cap->push_back([dst, src, n] { memmove(dst, src, n); });
        return cudaSuccess;
    }
    if (pageable && s) {   /* synchronous with the host: after the stream's queue */
        run_to(s->id, s->queued);
        s->queued++;
        s->done++;
        memmove(dst, src, n);
        return cudaSuccess;
    }
    issue(s, [dst, src, n] { memmove(dst, src, n); });
    return cudaSuccess;
}
cudaError_t cudaMemset(void *p, int v, size_t n)
{
    STICKY();
    if (capture_forbids("cudaMemset")) return fail(cudaErrorStreamCaptureUnsupported);
    if (n && !p) return fail(cudaErrorInvalidValue);
    run_all();
    if (n) memset(p, v, n);
    return cudaSuccess;
}
cudaError_t cudaMemsetAsync(void *p, int v, size_t n, cudaStream_t s)
{
    STICKY();
    if (n && !p) return fail(cudaErrorInvalidValue);
    if (n && s && s->cap) s->cap->push_back([p, v, n] { memset(p, v, n); });
    else if (n) issue(s, [p, v, n] { memset(p, v, n); });
    return cudaSuccess;
}

cudaError_t cudaStreamCreate(cudaStream_t *s) { return cudaStreamCreateWithFlags(s, 0); }
cudaError_t cudaStreamCreateWithFlags(cudaStream_t *s, unsigned flags)
{
    STICKY();
    Rt &r = rt();
    std::lock_guard<std::mutex> g(r.mu);
    *s = new emu_stream{flags, r.next_sid++, cur_dev, {}, 0, 0, false};
    r.streams[(*s)->id] = *s;
    return cudaSuccess;
}
cudaError_t cudaStreamDestroy(cudaStream_t s)
{
    if (!s) return fail(cudaErrorInvalidValue);
    if (s->cap) {
        fprintf(stderr, "emu: cudaStreamDestroy of a stream being captured\n");
        return fail(cudaErrorIllegalState);
    }
    /* work still queued completes (as on a GPU); events recorded on s count as done */
    run_to(s->id, s->queued);
    {
        std::lock_guard<std::mutex> g(rt().mu);
        rt().streams.erase(s->id);
    }
    delete s;
    return sticky();   /* released, but the context's error is said */
}
cudaError_t cudaStreamSynchronize(cudaStream_t s)
{
    STICKY();
    if (capture_forbids("cudaStreamSynchronize")) return fail(cudaErrorStreamCaptureUnsupported);
    if (s) run_to(s->id, s->queued);
    else run_all();
    return cudaSuccess;
}
cudaError_t cudaStreamWaitEvent(cudaStream_t s, cudaEvent_t e, unsigned flags)
{
    STICKY();
    if (s && s->cap) {   /* events inside a recording: not modelled (the backend has none) */
        fprintf(stderr, "emu: cudaStreamWaitEvent on a stream being captured (not modelled)\n");
        s->cap_bad = true;
        return fail(cudaErrorStreamCaptureUnsupported);
    }
    (void)flags;
    if (!e) return fail(cudaErrorInvalidValue);
    if (!e->recorded) {
        /* legal on a GPU (waits for nothing) but never what the code means */
        fprintf(stderr, "emu: cudaStreamWaitEvent on an event never recorded\n");
        return fail(cudaErrorInvalidValue);
    }
    /* the record as of now: a later cudaEventRecord on e does not move this wait */
    uint64_t sid = e->sid, seq = e->seq;
    issue(s, [sid, seq] { run_to(sid, seq); });
    return cudaSuccess;
}
cudaError_t cudaEventCreate(cudaEvent_t *e) { return cudaEventCreateWithFlags(e, 0); }
cudaError_t cudaEventCreateWithFlags(cudaEvent_t *e, unsigned flags)
{
    STICKY();
    (void)flags;
    *e = new emu_event{0.0, 0, 0, 0};
    return cudaSuccess;
}
cudaError_t cudaEventDestroy(cudaEvent_t e)
{
    delete e;
    return sticky();   /* released, but the context's error is said */
}
cudaError_t cudaEventRecord(cudaEvent_t e, cudaStream_t s)
{
    STICKY();
    if (s && s->cap) {
        fprintf(stderr, "emu: cudaEventRecord on a stream being captured (not modelled)\n");
        s->cap_bad = true;
        return fail(cudaErrorStreamCaptureUnsupported);
    }
    if (!e) return fail(cudaErrorInvalidValue);
    if (!s) run_all();   /* the legacy stream: after everything issued */
    e->t = now_ms();
    e->recorded = 1;
    e->sid = s ? s->id : 0;
    e->seq = s ? s->queued : 0;
    return cudaSuccess;
}
cudaError_t cudaEventSynchronize(cudaEvent_t e)
{
    STICKY();
    if (capture_forbids("cudaEventSynchronize")) return fail(cudaErrorStreamCaptureUnsupported);
    if (!e) return fail(cudaErrorInvalidValue);
    run_to(e->sid, e->seq);
    return cudaSuccess;
}
cudaError_t cudaStreamQuery(cudaStream_t s)
{
    /* as cudaEventQuery: the queued work finishes when asked */
    return cudaStreamSynchronize(s);
}
cudaError_t cudaEventQuery(cudaEvent_t e)
{
    /* the queued work finishes when asked, so an event is never found pending */
    return cudaEventSynchronize(e);
}
cudaError_t cudaEventElapsedTime(float *ms, cudaEvent_t a, cudaEvent_t b)
{
    STICKY();
    if (!a || !b || !a->recorded || !b->recorded) return fail(cudaErrorInvalidValue);
    *ms = (float)(b->t - a->t);
    return cudaSuccess;
}

cudaError_t cudaDeviceSynchronize(void)
{
    STICKY();
    if (capture_forbids("cudaDeviceSynchronize")) return fail(cudaErrorStreamCaptureUnsupported);
    run_all();
    return cudaSuccess;
}

/* LLM_EMU_LAUNCH_LOG=FILE: at exit, one line per kernel (by its name as written at the
 * launch) appended to FILE: "launch NAME THREADS SMEM", the most threads per block and
 * the most dynamic shared memory of its launches in this process, and "optin NAME BYTES",
 * the largest shared-memory opt-in it was given.  tests/gpu/launch_limits.py holds them
 * against what ptxas says each kernel needs (registers, static shared memory,
 * __launch_bounds__), the limits the emulator cannot know. */
namespace {
struct LaunchMax {
    size_t threads = 0, smem = 0, optin = 0;
    bool launched = false;
};
std::mutex launch_mu;
std::map<std::string, LaunchMax> &launch_log()
{
    static std::map<std::string, LaunchMax> m;
    return m;
}
void launch_log_write(void)
{
    const char *path = getenv("LLM_EMU_LAUNCH_LOG");
    if (!path || !*path) return;
    FILE *f = fopen(path, "a");
    if (!f) return;
    std::lock_guard<std::mutex> g(launch_mu);
    for (auto &kv : launch_log()) {
        if (kv.second.launched)
            fprintf(f, "launch %s %zu %zu\n", kv.first.c_str(), kv.second.threads, kv.second.smem);
        if (kv.second.optin) fprintf(f, "optin %s %zu\n", kv.first.c_str(), kv.second.optin);
    }
    fclose(f);
}
void launch_note(const char *kernel, size_t threads, size_t smem, size_t optin)
{
    static bool on = [] {
        const char *p = getenv("LLM_EMU_LAUNCH_LOG");
        launch_log();   /* made before the handler is registered, so destroyed after it runs */
        if (p && *p) atexit(launch_log_write);
        return p && *p;
    }();
    if (!on) return;
    std::string n(kernel);
    for (char &ch : n)
        if (ch == ' ') ch = '_';   /* one field: "k<LO, 64>" -> "k<LO,_64>" */
    std::lock_guard<std::mutex> g(launch_mu);
    LaunchMax &m = launch_log()[n];
    if (optin) {
        if (optin > m.optin) m.optin = optin;
        return;
    }
    m.launched = true;
    if (threads > m.threads) m.threads = threads;
    if (smem > m.smem) m.smem = smem;
}
}  // namespace

cudaError_t cudaFuncSetAttribute(emu_named kernel, cudaFuncAttribute a, int bytes)
{
    if (a != cudaFuncAttributeMaxDynamicSharedMemorySize || bytes < 0 || bytes > smem_optin_max())
        return fail(cudaErrorInvalidValue);
    if (bytes) launch_note(kernel.name, 0, 0, (size_t)bytes);
    std::lock_guard<std::mutex> g(rt().mu);
    rt().smem_optin[{cur_dev, kernel.name}] = bytes;
    return cudaSuccess;
}

namespace {

/* The launch configuration checks of the hardware: true when the launch may run on
 * device dev. */
bool launch_ok(const char *kernel, int dev, dim3 grid, dim3 block, size_t smem)
{
    Rt &r = rt();
    size_t threads = (size_t)block.x * block.y * block.z;
    size_t allowed = 48 * 1024;
    {
        std::lock_guard<std::mutex> g(r.mu);
        auto it = r.smem_optin.find({dev, kernel});
        if (it != r.smem_optin.end() && (size_t)it->second > allowed) allowed = (size_t)it->second;
    }
    if (!threads || threads > 1024 || block.z > 64 || !grid.x || !grid.y || !grid.z ||
        grid.y > 65535 || grid.z > 65535) {
        fprintf(stderr, "emu: launch: grid %ux%ux%u, block %ux%ux%u\n", grid.x, grid.y, grid.z,
                block.x, block.y, block.z);
        fail(cudaErrorInvalidConfiguration);
        return false;
    }
    if (smem > allowed) {
        fprintf(stderr, "emu: launch of %s on device %d: %zu bytes of dynamic shared memory, "
                "%zu allowed\n", kernel, dev, smem, allowed);
        fail(cudaErrorInvalidValue);
        return false;
    }
    return true;
}

/* Run a checked launch: every thread of every block. */
void kernel_exec(const char *kernel, const void *site, dim3 grid, dim3 block, size_t smem,
                 const std::function<void()> &body)
{
    Rt &r = rt();
    /* A launch site whose kernel reached no barrier or shuffle when it ran with fibers
     * runs its threads as plain calls from then on (LLM_EMU_FIBERS=1: never); should it reach one after all, the
     * launch fails loudly. */
    if (r.sticky != cudaSuccess || r.faulted) return;   /* a recorded launch replayed after the fault */
    if (r.fault_at && !strncmp(kernel, r.fault_name.c_str(), r.fault_name.size()) &&
        ++r.fault_seen == r.fault_at) {
        /* LLM_EMU_FAULT: the kernel faults; the launch reports nothing (asynchronous) */
        fprintf(stderr, "emu: kernel %s: injected fault (LLM_EMU_FAULT=launch:%ld%s%s): an "
                "illegal memory access; every later call fails\n", kernel, r.fault_at,
                r.fault_name.empty() ? "" : ":", r.fault_name.c_str());
        r.faulted = true;
        return;
    }
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

}  // namespace

void emu_kernel_run(const char *kernel, const void *site, dim3 grid, dim3 block, size_t smem,
                    const std::function<void()> &body, cudaStream_t stream)
{
    if (sticky_now() != cudaSuccess) {   /* launches fail at once (and run nothing) */
        sticky();
        return;
    }
    int dev = stream ? stream->dev : cur_dev;
    launch_note(kernel, (size_t)block.x * block.y * block.z, smem, 0);
    if (dev != cur_dev) {
        fprintf(stderr, "emu: launch of %s on a stream of device %d while device %d is current\n",
                kernel, dev, cur_dev);
        if (stream->cap) stream->cap_bad = true;
        fail(cudaErrorInvalidResourceHandle);
        return;
    }
    if (stream && stream->cap) {
        /* recorded: checked now (a bad configuration fails at the launch, as on a GPU),
         * run when the graph is */
        if (!launch_ok(kernel, dev, grid, block, smem)) return;
        std::function<void()> b = body;
        stream->cap->push_back([kernel, site, dev, grid, block, smem, b] {
            if (launch_ok(kernel, dev, grid, block, smem)) kernel_exec(kernel, site, grid, block, smem, b);
        });
        return;
    }
    emu_stream_flush(stream);   /* after what is queued on its stream */
    if (launch_ok(kernel, dev, grid, block, smem)) kernel_exec(kernel, site, grid, block, smem, body);
}

/* ---- stream capture and graphs ---- */

cudaError_t cudaStreamBeginCapture(cudaStream_t s, cudaStreamCaptureMode mode)
{
    STICKY();
    if (!s || s->cap || mode != cudaStreamCaptureModeThreadLocal) {
        /* the legacy stream cannot be captured; the emulator models thread-local mode only */
        fprintf(stderr, "emu: cudaStreamBeginCapture: %s\n",
                !s ? "the legacy stream" : s->cap ? "already capturing" : "a mode other than thread-local");
        return fail(!s || s->cap ? cudaErrorIllegalState : cudaErrorInvalidValue);
    }
    emu_stream_flush(s);
    s->cap = new std::vector<std::function<void()>>();
    s->cap_bad = false;
    rt().capturing++;
    return cudaSuccess;
}

cudaError_t cudaStreamEndCapture(cudaStream_t s, cudaGraph_t *g)
{
    if (!g) return fail(cudaErrorInvalidValue);
    *g = nullptr;
    if (!s || !s->cap) return fail(cudaErrorIllegalState);
    std::vector<std::function<void()>> *ops = s->cap;
    bool bad = s->cap_bad;
    s->cap = nullptr;
    s->cap_bad = false;
    rt().capturing--;
    if (bad) {
        delete ops;
        return fail(cudaErrorStreamCaptureInvalidated);
    }
    *g = new emu_graph{std::move(*ops)};
    delete ops;
    rt().graphs++;
    return cudaSuccess;
}

cudaError_t cudaGraphInstantiate(cudaGraphExec_t *e, cudaGraph_t g, unsigned long long flags)
{
    STICKY();
    if (!e || !g || flags) return fail(cudaErrorInvalidValue);
    *e = new emu_graph_exec{g->ops};
    rt().graphs++;
    return cudaSuccess;
}

cudaError_t cudaGraphLaunch(cudaGraphExec_t e, cudaStream_t s)
{
    STICKY();
    if (!e) return fail(cudaErrorInvalidValue);
    if (s && s->cap) {
        fprintf(stderr, "emu: cudaGraphLaunch into a stream being captured\n");
        s->cap_bad = true;
        return fail(cudaErrorStreamCaptureUnsupported);
    }
    emu_stream_flush(s);   /* after the stream's queue; its operations then run at once */
    cudaError_t before = rt().last;
    rt().last = cudaSuccess;
    for (auto &op : e->ops) op();
    cudaError_t rc = rt().last;
    if (rc == cudaSuccess) rt().last = before;
    return rc;
}

cudaError_t cudaGraphDestroy(cudaGraph_t g)
{
    if (!g) return fail(cudaErrorInvalidValue);
    delete g;
    rt().graphs--;
    return sticky();   /* released, but the context's error is said */
}

cudaError_t cudaGraphExecDestroy(cudaGraphExec_t e)
{
    if (!e) return fail(cudaErrorInvalidValue);
    delete e;
    rt().graphs--;
    return sticky();   /* released, but the context's error is said */
}

long emu_graphs_alive(void) { return rt().graphs; }
