/* cuda_off.cu — LLM_CUDA_OFF: leave optional parts of the CUDA backend out.
 *
 * A comma-separated list of names; each takes one optional part away so that the model
 * runs the fallback backend.h documents for it.  It is a diagnosis for a new GPU,
 * driver or kernel: when a result is wrong on the device, the part whose absence makes
 * it right is the one to look at (scripts/gpu-check.sh does this by itself).  Names:
 *   the optional ops, by their backend.h names: adamw_segs, argmax_rows, embed_hint,
 *     layernorm_backward_lo, matmul_backward_dgelu_lo, matmul_forward_gelu_lo,
 *     residual_layernorm_forward, xent_fused, device_stats;
 *   graphs (graph_capture/launch/free), host_alloc (host_alloc/free: plain malloc);
 *   inside the backend: flash (the lse attention's batched-GEMM form only, as
 *     LLM_CUDA_FLASH=0), cublaslt (every GEMM through cuBLAS instead of cuBLASLt: no
 *     fused bias/GELU epilogues), copy_stream (uploads queued on the compute stream),
 *     staging (every upload synchronous);
 *   all: every one of them.
 * An unknown name fails the backend's start: a misspelt name must not measure the
 * default while claiming otherwise. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/cuda/cuda_internal.h"
#include "kernels/cuda/cuda_ext.h"

static const char *const lc_off_names[] = {
    "adamw_segs", "argmax_rows", "embed_hint", "layernorm_backward_lo",
    "matmul_backward_dgelu_lo", "matmul_forward_gelu_lo", "residual_layernorm_forward",
    "xent_fused", "device_stats", "graphs", "host_alloc", "flash", "cublaslt",
    "copy_stream", "staging",
};
#define LC_OFF_N ((int)(sizeof lc_off_names / sizeof *lc_off_names))

static void lc_off_one(llm_backend *be, lc_ctx *c, int i)
{
    switch (i) {
    case 0: be->adamw_segs = NULL; break;
    case 1: be->argmax_rows = NULL; break;
    case 2: be->embed_hint = NULL; break;
    case 3: be->layernorm_backward_lo = NULL; break;
    case 4: be->matmul_backward_dgelu_lo = NULL; break;
    case 5: be->matmul_forward_gelu_lo = NULL; break;
    case 6: be->residual_layernorm_forward = NULL; break;
    case 7: be->xent_fused = NULL; break;
    case 8: be->device_stats = NULL; break;
    case 9: be->graph_capture = NULL; be->graph_launch = NULL; be->graph_free = NULL; break;
    case 10: be->host_alloc = NULL; be->host_free = NULL; break;
    case 11: c->flash_off = 1; break;
    case 12: c->lt_off = 1; break;
    case 13:   /* the staging ring then copies on the compute stream (stage_state 1) */
        if (c->copy) {
            (void)cudaStreamDestroy(c->copy);
            c->copy = NULL;
        }
        break;
    case 14: c->stage_state = -1; break;
    }
}

/* LLM_CUDA_FAULT=xent_fused, a test hook for the bisection of scripts/gpu-check.sh
 * (tests/cli/gpu_emu.sh): xent_fused's losses come out zero, as from a broken part,
 * while its fallback (xent_forward, xent_backward) stays right. */
typedef void (*lc_xent_fused_fn)(llm_backend *, float *, void *, const int32_t *, float, int,
                                 int, int, int);
static lc_xent_fused_fn lc_fault_real;

static void lc_fault_xent(llm_backend *be, float *losses, void *logits, const int32_t *targets,
                          float dloss, int N, int V, int Vp, int lo)
{
    lc_fault_real(be, losses, logits, targets, dloss, N, V, Vp, lo);
    be->zero(be, losses, (size_t)N * sizeof(float));
}

extern "C" int lc_apply_off(llm_backend *be, lc_ctx *c, const char *spec, char *err,
                            size_t errlen)
{
    const char *fault = getenv("LLM_CUDA_FAULT");
    if (fault && *fault) {
        if (strcmp(fault, "xent_fused") || !be->xent_fused) {
            snprintf(err, errlen, "LLM_CUDA_FAULT: only xent_fused can be broken (test hook)");
            return -1;
        }
        lc_fault_real = be->xent_fused;
        be->xent_fused = lc_fault_xent;
    }
    if (!spec || !*spec) return 0;
    size_t len = strlen(spec);
    if (len > 1024) {
        snprintf(err, errlen, "LLM_CUDA_OFF: longer than 1024 characters");
        return -1;
    }
    char buf[1025];
    memcpy(buf, spec, len + 1);
    for (char *p = buf, *next; p; p = next) {
        next = strchr(p, ',');
        if (next) *next++ = '\0';
        while (*p == ' ') p++;
        size_t n = strlen(p);
        while (n && p[n - 1] == ' ') p[--n] = '\0';
        if (!n) continue;
        if (!strcmp(p, "all")) {
            for (int i = 0; i < LC_OFF_N; i++) lc_off_one(be, c, i);
            continue;
        }
        int i = 0;
        while (i < LC_OFF_N && strcmp(p, lc_off_names[i])) i++;
        if (i == LC_OFF_N) {   /* the list is too long for an error line */
            snprintf(err, errlen, "LLM_CUDA_OFF: unknown part '%.64s' (the parts: "
                     "LLM_CUDA_OFF in llm-train(1))", p);
            return -1;
        }
        lc_off_one(be, c, i);
    }
    return 0;
}

extern "C" const char *llm_backend_cuda_off_name(int i)
{
    return i >= 0 && i < LC_OFF_N ? lc_off_names[i] : NULL;
}
