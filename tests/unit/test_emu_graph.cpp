/* test_emu_graph.cpp — tests/emu's stream capture and graphs, which the CUDA backend's
 * recorded decode steps (cuda_graph.cu) are checked through: a recording stores launches
 * and copies without running them, a launch runs them in order on what memory holds
 * then, as often as launched; a bad launch fails at once; what thread-local capture
 * forbids (allocating, synchronising, a synchronous or pageable copy, cuBLAS, events on
 * the recorded stream) fails or invalidates the recording; graphs are released. */
#include <cuda_runtime.h>

#include <string.h>

extern "C" {
#include "tests/unit/testutil.h"
}

namespace {

void scale_kernel(float *x, float s, int n)
{
    int i = (int)(blockIdx.x * blockDim.x + threadIdx.x);
    if (i < n) x[i] *= s;
}

void scale(float *x, float s, int n, cudaStream_t st, int threads = 64)
{
    emu_call("scale_kernel", [&](auto... a) { scale_kernel(a...); }, 1, threads, 0, st)(x, s, n);
}

void test_record_replay(void **state)
{
    (void)state;
    long alive = emu_graphs_alive();
    cudaStream_t s;
    float *d, *e, *pin;
    assert_int_equal(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking), cudaSuccess);
    assert_int_equal(cudaMalloc((void **)&d, 64 * sizeof(float)), cudaSuccess);
    assert_int_equal(cudaMalloc((void **)&e, 64 * sizeof(float)), cudaSuccess);
    assert_int_equal(cudaHostAlloc((void **)&pin, 64 * sizeof(float), 0), cudaSuccess);
    for (int i = 0; i < 64; i++) pin[i] = (float)i;
    assert_int_equal(cudaMemcpy(d, pin, 64 * sizeof(float), cudaMemcpyHostToDevice), cudaSuccess);

    /* recorded: d *= 2, e = d, d *= 3, e[0..3] = 0 -- nothing runs yet */
    assert_int_equal(cudaStreamBeginCapture(s, cudaStreamCaptureModeThreadLocal), cudaSuccess);
    scale(d, 2.0f, 64, s);
    assert_int_equal(cudaMemcpyAsync(e, d, 64 * sizeof(float), cudaMemcpyDeviceToDevice, s), cudaSuccess);
    scale(d, 3.0f, 64, s);
    assert_int_equal(cudaMemsetAsync(e, 0, 4 * sizeof(float), s), cudaSuccess);
    cudaGraph_t g;
    assert_int_equal(cudaStreamEndCapture(s, &g), cudaSuccess);
    assert_int_equal(cudaGetLastError(), cudaSuccess);
    assert_true(d[5] == 5.0f);
    cudaGraphExec_t x;
    assert_int_equal(cudaGraphInstantiate(&x, g, 0), cudaSuccess);
    assert_int_equal(cudaGraphDestroy(g), cudaSuccess);

    /* each launch on the values of the time: 5 -> 10 (e) -> 30, then 30 -> 60 -> 180 */
    assert_int_equal(cudaGraphLaunch(x, s), cudaSuccess);
    assert_int_equal(cudaStreamSynchronize(s), cudaSuccess);
    assert_true(d[5] == 30.0f && e[5] == 10.0f && e[2] == 0.0f);
    d[5] = 1.0f;   /* new data, same recording */
    assert_int_equal(cudaGraphLaunch(x, s), cudaSuccess);
    assert_int_equal(cudaStreamSynchronize(s), cudaSuccess);
    assert_true(d[5] == 6.0f && e[5] == 2.0f && d[7] == 7.0f * 36.0f);
    assert_int_equal(cudaGraphExecDestroy(x), cudaSuccess);
    assert_int_equal(emu_graphs_alive(), alive);

    /* a bad configuration fails at the launch, while recording */
    assert_int_equal(cudaStreamBeginCapture(s, cudaStreamCaptureModeThreadLocal), cudaSuccess);
    scale(d, 2.0f, 64, s, 2048);
    assert_int_equal(cudaGetLastError(), cudaErrorInvalidConfiguration);
    assert_int_equal(cudaStreamEndCapture(s, &g), cudaSuccess);
    assert_int_equal(cudaGraphDestroy(g), cudaSuccess);

    assert_int_equal(cudaFreeHost(pin), cudaSuccess);
    assert_int_equal(cudaFree(e), cudaSuccess);
    assert_int_equal(cudaFree(d), cudaSuccess);
    assert_int_equal(cudaStreamDestroy(s), cudaSuccess);
}

/* Each forbidden call fails (or is refused) and invalidates the recording; nothing of
 * the recording ran. */
void test_forbidden(void **state)
{
    (void)state;
    long alive = emu_graphs_alive();
    cudaStream_t s, other;
    cudaEvent_t ev;
    float *d, host[4] = {0};
    assert_int_equal(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking), cudaSuccess);
    assert_int_equal(cudaStreamCreateWithFlags(&other, cudaStreamNonBlocking), cudaSuccess);
    assert_int_equal(cudaEventCreateWithFlags(&ev, cudaEventDisableTiming), cudaSuccess);
    assert_int_equal(cudaMalloc((void **)&d, 64 * sizeof(float)), cudaSuccess);
    assert_int_equal(cudaMemset(d, 0, 64 * sizeof(float)), cudaSuccess);
    assert_int_equal(cudaEventRecord(ev, other), cudaSuccess);
    for (int k = 0; k < 8; k++) {
        assert_int_equal(cudaStreamBeginCapture(s, cudaStreamCaptureModeThreadLocal), cudaSuccess);
        d[0] = 1.0f;
        scale(d, 5.0f, 64, s);
        void *p = NULL;
        cudaError_t rc = cudaSuccess;
        switch (k) {
        case 0: rc = cudaMalloc(&p, 16); break;
        case 1: rc = cudaStreamSynchronize(other); break;
        case 2: rc = cudaDeviceSynchronize(); break;
        case 3: rc = cudaMemcpy(host, d, sizeof host, cudaMemcpyDeviceToHost); break;
        case 4: rc = cudaMemcpyAsync(host, d, sizeof host, cudaMemcpyDeviceToHost, s); break;
        case 5: rc = cudaStreamWaitEvent(s, ev, 0); break;
        case 6: rc = cudaEventRecord(ev, s); break;
        case 7: rc = cudaStreamBeginCapture(s, cudaStreamCaptureModeThreadLocal); break;
        }
        assert_int_not_equal(rc, cudaSuccess);
        assert_null(p);
        (void)cudaGetLastError();
        cudaGraph_t g = NULL;
        cudaError_t end = cudaStreamEndCapture(s, &g);
        if (k == 7) {   /* a second begin is refused; the first recording is intact */
            assert_int_equal(end, cudaSuccess);
            assert_int_equal(cudaGraphDestroy(g), cudaSuccess);
        } else {
            assert_int_equal(end, cudaErrorStreamCaptureInvalidated);
            assert_null(g);
        }
        assert_true(d[0] == 1.0f);   /* the recorded kernel never ran */
        (void)cudaGetLastError();
    }
    /* the legacy stream cannot be recorded; ending what never began is refused */
    assert_int_not_equal(cudaStreamBeginCapture(0, cudaStreamCaptureModeThreadLocal), cudaSuccess);
    cudaGraph_t g;
    assert_int_equal(cudaStreamEndCapture(s, &g), cudaErrorIllegalState);
    (void)cudaGetLastError();
    assert_int_equal(emu_graphs_alive(), alive);
    assert_int_equal(cudaFree(d), cudaSuccess);
    assert_int_equal(cudaEventDestroy(ev), cudaSuccess);
    assert_int_equal(cudaStreamDestroy(other), cudaSuccess);
    assert_int_equal(cudaStreamDestroy(s), cudaSuccess);
}

}  // namespace

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_record_replay),
        cmocka_unit_test(test_forbidden),
    };
    return cmocka_run_group_tests_name("emu_graph", tests, NULL, NULL);
}
