/* cuda_optim.cu — AdamW and the deterministic sum of squares (global grad norm). */
#include <math.h>

#include "kernels/cuda/cuda_internal.h"

__global__ void lc_adamw_kernel(float *p, const float *grad, float *m, float *v, size_t n,
                                float lr, float b1, float b2, float eps, float wd,
                                float bc1, float bc2, float grad_scale)
{
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n;
         i += (size_t)gridDim.x * blockDim.x) {
        float g = grad[i] * grad_scale;
        float mi = b1 * m[i] + (1.0f - b1) * g;
        float vi = b2 * v[i] + (1.0f - b2) * g * g;
        m[i] = mi;
        v[i] = vi;
        float mh = mi / bc1, vh = vi / bc2;
        p[i] -= lr * (mh / (sqrtf(vh) + eps) + wd * p[i]);
    }
}

static void lc_adamw(llm_backend *be, float *p, const float *grad, float *m, float *v, size_t n,
                     float lr, float b1, float b2, float eps, float wd, int t, float grad_scale)
{
    lc_ctx *c = lc_get(be);
    if (!n) return;
    /* bias corrections in double: 1 - b2^t is small, and powf's rounding would show */
    float bc1 = (float)(1.0 - pow((double)b1, t)), bc2 = (float)(1.0 - pow((double)b2, t));
    lc_adamw_kernel<<<lc_blocks(n, 256, 65535u * 4), 256, 0, c->stream>>>(
        p, grad, m, v, n, lr, b1, b2, eps, wd, bc1, bc2, grad_scale);
    LC_LAUNCHED(c);
}

#define LC_SSQ_THREADS 512
#define LC_SSQ_BLOCKS 1024

/* Stage 1: block b sums g^2 (in double) over a grid-stride slice; fixed tree per block. */
__global__ void lc_ssq_partial_kernel(double *part, const float *g, size_t n)
{
    __shared__ double sh[LC_SSQ_THREADS];
    double acc = 0.0;
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n;
         i += (size_t)gridDim.x * blockDim.x) {
        double x = g[i];
        acc += x * x;
    }
    sh[threadIdx.x] = acc;
    __syncthreads();
    for (int s = blockDim.x / 2; s > 0; s >>= 1) {
        if ((int)threadIdx.x < s) sh[threadIdx.x] += sh[threadIdx.x + s];
        __syncthreads();
    }
    if (threadIdx.x == 0) part[blockIdx.x] = sh[0];
}

/* Stage 2: one thread adds the partials in order. */
__global__ void lc_ssq_final_kernel(double *out, const double *part, int P)
{
    if (blockIdx.x != 0 || threadIdx.x != 0) return;
    double s = 0.0;
    for (int i = 0; i < P; i++) s += part[i];
    *out = s;
}

static double lc_sum_squares(llm_backend *be, const float *g, size_t n)
{
    lc_ctx *c = lc_get(be);
    if (!n) return 0.0;
    /* the grid depends only on n, so the result is the same on every run */
    unsigned P = lc_blocks(n, LC_SSQ_THREADS, LC_SSQ_BLOCKS);
    double *part = (double *)lc_scratch(c, (P + 1) * sizeof(double));
    if (!part) return NAN;
    lc_ssq_partial_kernel<<<P, LC_SSQ_THREADS, 0, c->stream>>>(part + 1, g, n);
    if (LC_LAUNCHED(c)) return NAN;
    lc_ssq_final_kernel<<<1, 1, 0, c->stream>>>(part, part + 1, (int)P);
    if (LC_LAUNCHED(c)) return NAN;
    double r = NAN;
    if (LC_CK(c, cudaMemcpyAsync(&r, part, sizeof r, cudaMemcpyDeviceToHost, c->stream)) ||
        LC_CK(c, cudaStreamSynchronize(c->stream)))
        return NAN;
    return r;
}

extern "C" void lc_fill_optim(llm_backend *be)
{
    be->adamw = lc_adamw;
    be->sum_squares = lc_sum_squares;
}
