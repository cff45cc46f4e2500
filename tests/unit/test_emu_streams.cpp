/* test_emu_streams.cpp — tests/emu's streams and events: by default every operation runs
 * when issued; with copies lagging (LLM_EMU_STREAMS=late|ahead, emu_set_stream_mode) a
 * consumer that does not wait for a copy on another stream reads the old contents, one
 * that waits on the right event reads the new; waits on events never recorded fail. */
#include <cuda_runtime.h>

#include <string.h>

extern "C" {
#include "tests/unit/testutil.h"
}

namespace {

void add_kernel(float *dst, const float *src, int n)
{
    int i = (int)(blockIdx.x * blockDim.x + threadIdx.x);
    if (i < n) dst[i] += src[i];
}

void add(float *dst, const float *src, int n, cudaStream_t s)
{
    emu_call("add_kernel", [&](auto... a) { add_kernel(a...); }, 1, 64, 0, s)(dst, src, n);
    assert_int_equal(cudaGetLastError(), cudaSuccess);
}

struct fixture {
    cudaStream_t compute, copy;
    cudaEvent_t ev;
    float *pin, *slot, *dst, *acc;
};

void setup(fixture *f)
{
    assert_int_equal(cudaStreamCreateWithFlags(&f->compute, cudaStreamNonBlocking), cudaSuccess);
    assert_int_equal(cudaStreamCreateWithFlags(&f->copy, cudaStreamNonBlocking), cudaSuccess);
    assert_int_equal(cudaEventCreateWithFlags(&f->ev, cudaEventDisableTiming), cudaSuccess);
    assert_int_equal(cudaHostAlloc((void **)&f->pin, 64 * sizeof(float), 0), cudaSuccess);
    assert_int_equal(cudaMalloc((void **)&f->slot, 64 * sizeof(float)), cudaSuccess);
    assert_int_equal(cudaMalloc((void **)&f->dst, 64 * sizeof(float)), cudaSuccess);
    assert_int_equal(cudaMalloc((void **)&f->acc, 64 * sizeof(float)), cudaSuccess);
    assert_int_equal(cudaMemset(f->slot, 0, 64 * sizeof(float)), cudaSuccess);
    assert_int_equal(cudaMemset(f->acc, 0, 64 * sizeof(float)), cudaSuccess);
}

void teardown(fixture *f)
{
    assert_int_equal(cudaFree(f->acc), cudaSuccess);
    assert_int_equal(cudaFree(f->dst), cudaSuccess);
    assert_int_equal(cudaFree(f->slot), cudaSuccess);
    assert_int_equal(cudaFreeHost(f->pin), cudaSuccess);
    assert_int_equal(cudaEventDestroy(f->ev), cudaSuccess);
    assert_int_equal(cudaStreamDestroy(f->copy), cudaSuccess);
    assert_int_equal(cudaStreamDestroy(f->compute), cudaSuccess);
}

/* pinned -> slot on the copy stream, then (waiting on the copy's event when wait) slot ->
 * dst on the compute stream and acc += dst; returns acc[0] read back */
float upload(fixture *f, float v, int wait)
{
    for (int i = 0; i < 64; i++) f->pin[i] = v;
    assert_int_equal(cudaMemcpyAsync(f->slot, f->pin, 64 * sizeof(float), cudaMemcpyHostToDevice,
                                     f->copy), cudaSuccess);
    assert_int_equal(cudaEventRecord(f->ev, f->copy), cudaSuccess);
    if (wait) assert_int_equal(cudaStreamWaitEvent(f->compute, f->ev, 0), cudaSuccess);
    assert_int_equal(cudaMemcpyAsync(f->dst, f->slot, 64 * sizeof(float), cudaMemcpyDeviceToDevice,
                                     f->compute), cudaSuccess);
    add(f->acc, f->dst, 64, f->compute);
    float back[64];
    assert_int_equal(cudaMemcpyAsync(back, f->acc, sizeof back, cudaMemcpyDeviceToHost, f->compute),
                     cudaSuccess);
    assert_int_equal(cudaStreamSynchronize(f->compute), cudaSuccess);
    for (int i = 1; i < 64; i++) assert_true(back[i] == back[0]);
    return back[0];
}

void test_eager(void **state)
{
    (void)state;
    emu_set_stream_mode("");
    fixture f;
    setup(&f);
    /* everything runs when issued: even the missing wait reads the new data */
    assert_true(upload(&f, 2.0f, 1) == 2.0f);
    assert_true(upload(&f, 3.0f, 0) == 5.0f);
    /* an event never recorded: legal on a GPU, refused here */
    cudaEvent_t never;
    assert_int_equal(cudaEventCreate(&never), cudaSuccess);
    assert_int_equal(cudaStreamWaitEvent(f.compute, never, 0), cudaErrorInvalidValue);
    assert_int_equal(cudaGetLastError(), cudaErrorInvalidValue);
    assert_int_equal(cudaEventRecord(never, f.copy), cudaSuccess);
    assert_int_equal(cudaStreamWaitEvent(f.compute, never, 0), cudaSuccess);
    assert_int_equal(cudaEventDestroy(never), cudaSuccess);
    teardown(&f);
}

void test_late(void **state)
{
    (void)state;
    emu_set_stream_mode("late");
    fixture f;
    setup(&f);
    assert_true(upload(&f, 2.0f, 1) == 2.0f);
    /* no wait: the compute stream copies the slot before the copy stream filled it */
    assert_true(upload(&f, 3.0f, 0) == 4.0f);
    /* the lagging copy of 3 runs only now, and reads the pinned buffer as it is now (7):
     * a host slot must not be rewritten before its copy is done */
    assert_true(upload(&f, 7.0f, 1) == 11.0f);
    /* an event synchronises only up to its record; a later record does not move a wait
     * issued before it */
    float *p2;
    assert_int_equal(cudaHostAlloc((void **)&p2, 64 * sizeof(float), 0), cudaSuccess);
    for (int i = 0; i < 64; i++) { f.pin[i] = 1.0f; p2[i] = 9.0f; }
    assert_int_equal(cudaMemcpyAsync(f.slot, f.pin, 64 * sizeof(float), cudaMemcpyHostToDevice, f.copy),
                     cudaSuccess);
    assert_int_equal(cudaEventRecord(f.ev, f.copy), cudaSuccess);
    assert_int_equal(cudaStreamWaitEvent(f.compute, f.ev, 0), cudaSuccess);
    assert_int_equal(cudaMemcpyAsync(f.slot, p2, 64 * sizeof(float), cudaMemcpyHostToDevice, f.copy),
                     cudaSuccess);
    assert_int_equal(cudaEventRecord(f.ev, f.copy), cudaSuccess);
    assert_int_equal(cudaMemcpyAsync(f.dst, f.slot, 64 * sizeof(float), cudaMemcpyDeviceToDevice,
                                     f.compute), cudaSuccess);
    assert_int_equal(cudaStreamSynchronize(f.compute), cudaSuccess);
    float back[64];
    /* a pageable destination: synchronous, after the compute stream's queue */
    assert_int_equal(cudaMemcpyAsync(back, f.dst, sizeof back, cudaMemcpyDeviceToHost, f.compute),
                     cudaSuccess);
    assert_true(back[0] == 1.0f);   /* the second copy still lags */
    assert_int_equal(cudaEventSynchronize(f.ev), cudaSuccess);
    assert_int_equal(cudaMemcpyAsync(back, f.slot, sizeof back, cudaMemcpyDeviceToHost, f.compute),
                     cudaSuccess);
    assert_true(back[0] == 9.0f);
    /* a queued copy from a pinned block finishes before the block is freed */
    for (int i = 0; i < 64; i++) p2[i] = 4.0f;
    assert_int_equal(cudaMemcpyAsync(f.slot, p2, 64 * sizeof(float), cudaMemcpyHostToDevice, f.copy),
                     cudaSuccess);
    assert_int_equal(cudaFreeHost(p2), cudaSuccess);
    assert_int_equal(cudaMemcpy(back, f.slot, sizeof back, cudaMemcpyDeviceToHost), cudaSuccess);
    assert_true(back[0] == 4.0f);
    teardown(&f);
    emu_set_stream_mode("");
}

void test_ahead(void **state)
{
    (void)state;
    emu_set_stream_mode("ahead");
    fixture f;
    setup(&f);
    add(f.acc, f.slot, 64, f.compute);   /* a kernel: the compute stream now queues copies */
    /* consumer of the slot queued on the compute stream, then the copy stream refills the
     * slot: without waiting for the compute stream, the refill lands first */
    for (int i = 0; i < 64; i++) f.pin[i] = 5.0f;
    assert_int_equal(cudaMemcpyAsync(f.slot, f.pin, 64 * sizeof(float), cudaMemcpyHostToDevice, f.copy),
                     cudaSuccess);
    assert_int_equal(cudaEventRecord(f.ev, f.copy), cudaSuccess);
    assert_int_equal(cudaStreamWaitEvent(f.compute, f.ev, 0), cudaSuccess);
    assert_int_equal(cudaMemcpyAsync(f.dst, f.slot, 64 * sizeof(float), cudaMemcpyDeviceToDevice,
                                     f.compute), cudaSuccess);
    cudaEvent_t used;
    assert_int_equal(cudaEventCreate(&used), cudaSuccess);
    assert_int_equal(cudaEventRecord(used, f.compute), cudaSuccess);
    for (int i = 0; i < 64; i++) f.pin[i] = 6.0f;
    assert_int_equal(cudaMemcpyAsync(f.slot, f.pin, 64 * sizeof(float), cudaMemcpyHostToDevice, f.copy),
                     cudaSuccess);
    float back[64];
    assert_int_equal(cudaStreamSynchronize(f.compute), cudaSuccess);
    assert_int_equal(cudaMemcpy(back, f.dst, sizeof back, cudaMemcpyDeviceToHost), cudaSuccess);
    assert_true(back[0] == 6.0f);   /* the 5s were overwritten before the compute copy */
    /* the same with the copy stream waiting for the compute stream's event */
    for (int i = 0; i < 64; i++) f.pin[i] = 5.0f;
    assert_int_equal(cudaMemcpyAsync(f.slot, f.pin, 64 * sizeof(float), cudaMemcpyHostToDevice, f.copy),
                     cudaSuccess);
    assert_int_equal(cudaEventRecord(f.ev, f.copy), cudaSuccess);
    assert_int_equal(cudaStreamWaitEvent(f.compute, f.ev, 0), cudaSuccess);
    assert_int_equal(cudaMemcpyAsync(f.dst, f.slot, 64 * sizeof(float), cudaMemcpyDeviceToDevice,
                                     f.compute), cudaSuccess);
    assert_int_equal(cudaEventRecord(used, f.compute), cudaSuccess);
    assert_int_equal(cudaStreamWaitEvent(f.copy, used, 0), cudaSuccess);
    for (int i = 0; i < 64; i++) f.pin[i] = 6.0f;   /* (a host slot reuse: the 5s left it) */
    assert_int_equal(cudaMemcpyAsync(f.slot, f.pin, 64 * sizeof(float), cudaMemcpyHostToDevice, f.copy),
                     cudaSuccess);
    assert_int_equal(cudaStreamSynchronize(f.compute), cudaSuccess);
    assert_int_equal(cudaMemcpy(back, f.dst, sizeof back, cudaMemcpyDeviceToHost), cudaSuccess);
    assert_true(back[0] == 5.0f);
    assert_int_equal(cudaEventDestroy(used), cudaSuccess);
    teardown(&f);
    emu_set_stream_mode("");
}

}  // namespace

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_eager),
        cmocka_unit_test(test_late),
        cmocka_unit_test(test_ahead),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
