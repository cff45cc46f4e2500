/* gpu_check_resln.c — residual_layernorm_forward (the residual add fused with the
 * layernorm) against the fp64 reference and cpu-ref at the layernorm's shapes and
 * bounds; bit for bit against the backend's own residual_forward then layernorm_forward
 * (what the model relies on when it switches the fusion on); and in place, res aliasing
 * a, then b, with mean/rstd NULL (the inference stream). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/backend.h"
#include "tests/gpu/gpu_check.h"
#include "tests/gpu/ref64.h"

/* res and out of a (res, out) pair, device buffers, as one host array of 2n floats */
static float *get2(gc *x, const float *gres, const float *gout, size_t n)
{
    float *h = xmalloc(2 * n * sizeof *h);
    x->g.to_host(&x->g, h, gres, n * sizeof *h);
    x->g.to_host(&x->g, h + n, gout, n * sizeof *h);
    return h;
}

void gpu_check_resln(gc *x, int N, int C)
{
    char sh[64];
    snprintf(sh, sizeof sh, "N%d C%d", N, C);
    if (!x->g.residual_layernorm_forward) {
        row_check(x, "res_layernorm_fwd missing", sh, 1, 0, 0);
        return;
    }
    size_t n = (size_t)N * C;
    float *a = rnd(x, n, -2, 3), *b = rnd(x, n, -1, 1);
    float *w = rnd(x, C, 0.5f, 1.5f), *bias = rnd(x, C, -0.5f, 0.5f);
    float *ga = gput(x, a, n * 4), *gb = gput(x, b, n * 4);
    float *gw = gput(x, w, C * 4), *gbias = gput(x, bias, C * 4);
    float *gres = gpoison(x, n), *gout = gpoison(x, n);
    float *gmean = gpoison(x, N), *grstd = gpoison(x, N);
    x->g.residual_layernorm_forward(&x->g, gres, gout, gmean, grstd, ga, gb, gw, gbias, N, C);
    float *ro = get2(x, gres, gout, n), *mean = gget(x, gmean, N), *rstd = gget(x, grstd, N);

    /* reference: the sums in fp64, the layernorm in fp64 of the fp32 sums (its input) */
    float *sum = xmalloc(n * 4);
    double *rsum = xmalloc(n * 8), *rout = xmalloc(n * 8), *rm = xmalloc(N * 8), *rr = xmalloc(N * 8);
    for (size_t i = 0; i < n; i++) {
        sum[i] = a[i] + b[i];
        rsum[i] = (double)a[i] + b[i];
    }
    r64_layernorm_forward(rout, rm, rr, sum, w, bias, N, C);
    float *cro = NULL, *cm = NULL, *cr = NULL;
    if (x->have_ref && x->r.residual_layernorm_forward) {
        cro = xmalloc(2 * n * 4); cm = xmalloc(N * 4); cr = xmalloc(N * 4);
        x->r.residual_layernorm_forward(&x->r, cro, cro + n, cm, cr, a, b, w, bias, N, C);
    }
    row(x, "res_layernorm_fwd res", sh, ro, rsum, cro, n, B_EW);
    row(x, "res_layernorm_fwd out", sh, ro + n, rout, cro ? cro + n : NULL, n, B_RED);
    row(x, "res_layernorm_fwd mean", sh, mean, rm, cm, N, B_RED);
    row(x, "res_layernorm_fwd rstd", sh, rstd, rr, cr, N, B_RED);

    /* the backend's two ops: the same bits */
    float *gres2 = gpoison(x, n), *gout2 = gpoison(x, n);
    float *gm2 = gpoison(x, N), *gr2 = gpoison(x, N);
    x->g.residual_forward(&x->g, gres2, ga, gb, n);
    x->g.layernorm_forward(&x->g, gout2, gm2, gr2, gres2, gw, gbias, N, C);
    float *ro2 = get2(x, gres2, gout2, n), *m2 = gget(x, gm2, N), *r2 = gget(x, gr2, N);
    row_det(x, "res_layernorm = res+ln", sh, ro, ro2, 2 * n);
    int same = !memcmp(mean, m2, N * 4) && !memcmp(rstd, r2, N * 4);
    row_check(x, "res_layernorm = ln stats", sh, !same, 0, same);
    free(ro2); free(m2); free(r2);

    /* in place: res is a (k = 0), then b (k = 1); no statistics */
    for (int k = 0; k < 2; k++) {
        float *gx = gput(x, k ? b : a, n * 4);
        x->g.residual_layernorm_forward(&x->g, gx, gout2, NULL, NULL, k ? ga : gx, k ? gx : gb,
                                        gw, gbias, N, C);
        float *ip = get2(x, gx, gout2, n);
        row_det(x, k ? "res_layernorm in place b" : "res_layernorm in place a", sh, ip, ro, 2 * n);
        free(ip);
        x->g.free(&x->g, gx);
    }

    free(a); free(b); free(w); free(bias); free(ro); free(mean); free(rstd); free(sum);
    free(rsum); free(rout); free(rm); free(rr); free(cro); free(cm); free(cr);
    void *bufs[] = {ga, gb, gw, gbias, gres, gout, gmean, grstd, gres2, gout2, gm2, gr2};
    for (size_t i = 0; i < sizeof bufs / sizeof *bufs; i++) x->g.free(&x->g, bufs[i]);
}
