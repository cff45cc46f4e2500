/* cuda_stats.cu — device_stats: memory from the CUDA runtime and the backend's own
 * accounting, utilisation/temperature/power from NVML loaded at run time.
 *
 * NVML is dlopen'ed on the first call (never linked), so the CUDA build starts on a
 * machine without a driver, and a missing or failing NVML only leaves util/temp/power at
 * -1: no error and no message.  LLM_NVML_LIB names another library file (a test hook:
 * gpu_check points it at a missing file to exercise the absent-NVML path). */
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/cuda/cuda_internal.h"
extern "C" {
#include "kernels/cuda/cuda_ext.h"
}

/* The few NVML declarations used (nvml.h's ABI; the header is not needed). */
typedef int lc_nvml_ret;                      /* nvmlReturn_t: 0 = NVML_SUCCESS */
typedef struct lc_nvml_dev_st *lc_nvml_dev;   /* nvmlDevice_t */
typedef struct { unsigned int gpu, memory; } lc_nvml_util;   /* nvmlUtilization_t */
#define LC_NVML_TEMPERATURE_GPU 0

struct lc_nvml {
    void *lib;
    lc_nvml_dev dev;
    lc_nvml_ret (*shutdown)(void);
    lc_nvml_ret (*util)(lc_nvml_dev, lc_nvml_util *);
    lc_nvml_ret (*temp)(lc_nvml_dev, int, unsigned int *);
    lc_nvml_ret (*power)(lc_nvml_dev, unsigned int *);
};

/* Open NVML and find the device the backend runs on by its PCI bus id (CUDA and NVML
 * number devices differently, e.g. under CUDA_VISIBLE_DEVICES).  NULL when any step
 * fails. */
static struct lc_nvml *lc_nvml_open(lc_ctx *c)
{
    const char *name = getenv("LLM_NVML_LIB");
    void *lib = dlopen(name && *name ? name : "libnvidia-ml.so.1", RTLD_NOW | RTLD_LOCAL);
    if (!lib) return NULL;
    lc_nvml_ret (*init)(void) = (lc_nvml_ret (*)(void))dlsym(lib, "nvmlInit_v2");
    lc_nvml_ret (*by_pci)(const char *, lc_nvml_dev *) =
        (lc_nvml_ret (*)(const char *, lc_nvml_dev *))dlsym(lib, "nvmlDeviceGetHandleByPciBusId_v2");
    struct lc_nvml *n = (struct lc_nvml *)calloc(1, sizeof *n);
    if (!n || !init || !by_pci) goto fail;
    n->lib = lib;
    n->shutdown = (lc_nvml_ret (*)(void))dlsym(lib, "nvmlShutdown");
    n->util = (lc_nvml_ret (*)(lc_nvml_dev, lc_nvml_util *))dlsym(lib, "nvmlDeviceGetUtilizationRates");
    n->temp = (lc_nvml_ret (*)(lc_nvml_dev, int, unsigned int *))dlsym(lib, "nvmlDeviceGetTemperature");
    n->power = (lc_nvml_ret (*)(lc_nvml_dev, unsigned int *))dlsym(lib, "nvmlDeviceGetPowerUsage");
    if (!n->shutdown || init() != 0) goto fail;
    {
        char bus[64];
        if (cudaDeviceGetPCIBusId(bus, sizeof bus, c->device) == cudaSuccess &&
            by_pci(bus, &n->dev) == 0)
            return n;
        (void)cudaGetLastError();
        n->shutdown();
    }
fail:
    free(n);
    dlclose(lib);
    return NULL;
}

extern "C" void lc_stats_release(lc_ctx *c)
{
    struct lc_nvml *n = c->nvml;
    if (!n) return;
    n->shutdown();   /* NVML counts init/shutdown pairs: other users keep theirs */
    dlclose(n->lib);
    free(n);
    c->nvml = NULL;
}

static int lc_device_stats(llm_backend *be, struct llm_device_stats *out)
{
    lc_ctx *c = lc_get(be);
    out->mem_used_mb = out->mem_peak_mb = out->util_pct = out->temp_c = out->power_w = -1;
    if (!c) return -1;
    out->mem_peak_mb = (double)c->held_peak / 1048576.0;
    size_t fr = 0, tot = 0;
    /* not LC_CK: a metrics read must not print or leave an error for the next op */
    if (cudaMemGetInfo(&fr, &tot) == cudaSuccess) out->mem_used_mb = (double)(tot - fr) / 1048576.0;
    else (void)cudaGetLastError();
    if (!c->nvml_tried) {
        c->nvml_tried = 1;
        c->nvml = lc_nvml_open(c);
    }
    struct lc_nvml *n = c->nvml;
    if (n) {
        lc_nvml_util u;
        unsigned int v;
        if (n->util && n->util(n->dev, &u) == 0 && u.gpu <= 100) out->util_pct = u.gpu;
        if (n->temp && n->temp(n->dev, LC_NVML_TEMPERATURE_GPU, &v) == 0) out->temp_c = v;
        if (n->power && n->power(n->dev, &v) == 0) out->power_w = v / 1000.0;   /* mW */
    }
    return 0;
}

extern "C" void lc_fill_stats(llm_backend *be)
{
    be->device_stats = lc_device_stats;
}

extern "C" int llm_backend_cuda_mem_held(llm_backend *be, size_t *held, size_t *peak)
{
    lc_ctx *c = lc_get(be);
    if (!c) return -1;
    if (held) *held = c->held;
    if (peak) *peak = c->held_peak;
    return 0;
}

extern "C" int llm_backend_cuda_nvml_loaded(llm_backend *be)
{
    lc_ctx *c = lc_get(be);
    return c && c->nvml ? 1 : 0;
}
