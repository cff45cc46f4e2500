/* backend.c — choose a backend by device name ("cpu", "cpu-ref", "cuda", "auto"). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "common/env.h"
#include "kernels/backend.h"
#ifdef LLM_CUDA
#include "kernels/cuda/cuda_backend.h"
#endif

/* The backends' environment variables, checked before any is read: a typo is an error,
 * not the default. */
static int settings_check(char *err, size_t errlen)
{
    static const char *const gemm[] = {"omp", "blas", NULL}, *const bit[] = {"0", "1", NULL},
                             *const flash[] = {"0", "1", "wmma", NULL};
    static const struct {
        const char *name;
        const char *const *words;
    } vars[] = {{"LLM_CPU_GEMM", gemm}, {"LLM_CUDA_TF32", bit}, {"LLM_CUDA_FLASH", flash},
                {"LLM_CUDA_GRAPHS", bit}};
    llm_status st = {0};
    for (size_t i = 0; i < sizeof vars / sizeof *vars; i++) {
        int k;
        if (llm_env_word(vars[i].name, vars[i].words, &k, &st)) {
            snprintf(err, errlen, "%s", st.msg);
            return -1;
        }
    }
    return 0;
}

int llm_backend_init(llm_backend *be, const char *device, int threads, char *err, size_t errlen)
{
    char dummy[1];
    if (!err || !errlen) {
        err = dummy;
        errlen = sizeof dummy;
    }
    err[0] = '\0';
    memset(be, 0, sizeof *be);
    if (settings_check(err, errlen))
        return LLM_BACKEND_ESETTING;
    if (!device)
        device = "auto";
    if (strcmp(device, "cpu") == 0 || strcmp(device, "cpu-ref") == 0) {
        if (llm_backend_cpu_init(be, threads, device[3] == '-') != 0) {
            snprintf(err, errlen, "device '%s': out of memory", device);
            return -1;
        }
        return 0;
    }
    if (strcmp(device, "cuda") == 0 || strcmp(device, "auto") == 0) {
#ifdef LLM_CUDA
        if (llm_backend_cuda_init(be, threads, err, errlen) == 0)
            return 0;
#else
        snprintf(err, errlen, "device 'cuda': not available in this build (CPU only; rebuild with make CUDA=1)");
#endif
        if (strcmp(device, "cuda") == 0)
            return -1;
        /* auto: fall back to the CPU, keeping why CUDA was not usable only when a GPU is
         * there (a bad LLM_CUDA_DEVICE, a failed CUDA call): worth a warning, unlike none */
#ifdef LLM_CUDA
        if (!llm_backend_cuda_available())
#endif
            err[0] = '\0';
        memset(be, 0, sizeof *be);
        if (llm_backend_cpu_init(be, threads, 0) != 0) {
            snprintf(err, errlen, "device 'cpu': out of memory");
            return -1;
        }
        return 0;
    }
    snprintf(err, errlen, "unknown device '%s' (expected cpu, cpu-ref, cuda or auto)", device);
    return -1;
}

int llm_backend_known(const char *device)
{
    static const char *const names[] = {"cpu", "cpu-ref", "cuda", "auto"};
    if (!device)
        return 1;
    for (size_t i = 0; i < sizeof names / sizeof *names; i++)
        if (!strcmp(device, names[i]))
            return 1;
    return 0;
}

const char *llm_backend_resolve(const char *device)
{
    if (device && strcmp(device, "auto") != 0)
        return device;
#ifdef LLM_CUDA
    if (llm_backend_cuda_available())
        return "cuda";
#endif
    return "cpu";
}

void llm_backend_free(llm_backend *be)
{
    if (!be || !be->name)
        return;
#ifdef LLM_CUDA
    if (strcmp(be->name, "cuda") == 0) {
        llm_backend_cuda_free(be);
        memset(be, 0, sizeof *be);
        return;
    }
#endif
    llm_backend_cpu_free(be);
    memset(be, 0, sizeof *be);
}

void *llm_backend_host_alloc(llm_backend *be, size_t bytes)
{
    if (!bytes)
        bytes = 1;
    return be && be->host_alloc ? be->host_alloc(be, bytes) : malloc(bytes);
}

void llm_backend_host_free(llm_backend *be, void *p)
{
    if (!p)
        return;
    if (be && be->host_free)
        be->host_free(be, p);
    else
        free(p);
}

int llm_backend_device_lost(llm_backend *be, int wait, char *why, size_t whylen)
{
    if (why && whylen)
        why[0] = '\0';
    return be && be->device_lost ? be->device_lost(be, wait, why, whylen) != 0 : 0;
}

int llm_backend_threads(int threads)
{
    if (threads > 0)
        return threads;
    long n = sysconf(_SC_NPROCESSORS_ONLN);
    return n > 0 ? (int)n : 1;
}

int llm_backend_open(llm_backend *be, const char *device, int threads, llm_status *st)
{
    char err[256];
    int rc = llm_backend_init(be, device, threads, err, sizeof err);
    return rc ? llm_err(st, llm_backend_code(rc), "%s", err) : LLM_OK;
}
