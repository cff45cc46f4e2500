/* gpu_check_xfer.c — gpu_check's host <-> device transfer checks: to_device returns
 * before the GPU has the data (small uploads are staged in pinned buffers and queued),
 * so the host buffer must be free for reuse at once, and every later op on the backend
 * must see the uploads in order: many uploads in a row (the staging ring wraps), the
 * same buffer twice in a row, uploads between ops reading the buffer, and one upload
 * larger than a staging slot. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/backend.h"
#include "kernels/cuda/cuda_ext.h"
#include "tests/gpu/gpu_check.h"

void gpu_check_xfer(gc *x)
{
    llm_backend *g = &x->g;
    enum { NBUF = 10, N = 1000, ROUNDS = 103 };
    long before[2] = {0, 0}, after[2] = {0, 0};
    if (x->cuda) llm_backend_cuda_upload_counts(g, before);
    float *h = xmalloc(N * sizeof *h), *back = xmalloc(N * sizeof *back);
    float *d[NBUF];
    for (int j = 0; j < NBUF; j++) d[j] = gpoison(x, N);
    size_t bad = 0;

    /* 103 uploads over 10 buffers, the host buffer scribbled over after each */
    int last[NBUF];
    for (int k = 0; k < ROUNDS; k++) {
        for (int i = 0; i < N; i++) h[i] = (float)(k * N + i);
        g->to_device(g, d[k % NBUF], h, N * sizeof *h);
        last[k % NBUF] = k;
        for (int i = 0; i < N; i++) h[i] = -1.0f;
    }
    for (int j = 0; j < NBUF; j++) {
        g->to_host(g, back, d[j], N * sizeof *back);
        for (int i = 0; i < N; i++) bad += back[i] != (float)(last[j] * N + i);
    }

    /* the same buffer twice in a row, then an op reading it: the second upload wins */
    for (int i = 0; i < N; i++) h[i] = 1.0f;
    g->to_device(g, d[0], h, N * sizeof *h);
    for (int i = 0; i < N; i++) h[i] = 2.0f;
    g->to_device(g, d[0], h, N * sizeof *h);
    g->copy(g, d[1], d[0], N * sizeof *h);
    g->to_host(g, back, d[1], N * sizeof *back);
    for (int i = 0; i < N; i++) bad += back[i] != 2.0f;

    /* upload, op, upload again into the buffer the op read, op: d2 = 0 + 3 + 5 */
    g->zero(g, d[2], N * sizeof(float));
    for (int i = 0; i < N; i++) h[i] = 3.0f;
    g->to_device(g, d[3], h, N * sizeof *h);
    g->accumulate(g, d[2], d[3], N);
    for (int i = 0; i < N; i++) h[i] = 5.0f;
    g->to_device(g, d[3], h, N * sizeof *h);
    g->accumulate(g, d[2], d[3], N);
    g->to_host(g, back, d[2], N * sizeof *back);
    for (int i = 0; i < N; i++) bad += back[i] != 8.0f;

    /* larger than a staging slot (1 MiB): the synchronous path */
    size_t nb = (3u << 20) / sizeof(float) + 7;
    float *hb = xmalloc(nb * sizeof *hb), *bb = xmalloc(nb * sizeof *bb);
    for (size_t i = 0; i < nb; i++) hb[i] = (float)(i % 100003);
    float *db = gpoison(x, nb);   /* gput: itself an upload larger than a slot */
    g->to_device(g, db, hb, nb * sizeof *hb);
    memset(hb, 0, nb * sizeof *hb);
    g->to_host(g, bb, db, nb * sizeof *bb);
    for (size_t i = 0; i < nb; i++) bad += bb[i] != (float)(i % 100003);

    char sh[64];
    if (x->cuda) {
        llm_backend_cuda_upload_counts(g, after);
        snprintf(sh, sizeof sh, "staged %ld sync %ld", after[0] - before[0], after[1] - before[1]);
    } else {
        snprintf(sh, sizeof sh, "%d uploads", ROUNDS + 5);
    }
    /* on cuda both paths must have run: >= 108 staged, >= 2 synchronous */
    int paths = !x->cuda || (after[0] - before[0] >= ROUNDS + 5 && after[1] - before[1] >= 2);
    row_check(x, "to_device order/reuse", sh, (double)bad, 0.0, bad == 0 && paths);
    free(h); free(back); free(hb); free(bb);
    for (int j = 0; j < NBUF; j++) g->free(g, d[j]);
    g->free(g, db);
}

/* ---- the copy stream under load ----
 * Uploads travel on a copy stream into a ring of device slots and reach their buffer by
 * a copy on the compute stream (cuda_backend.cu), so a missing wait shows up as data: a
 * consumer that reads its buffer before the upload arrived, or a slot overwritten before
 * the compute stream moved its previous contents out, or a buffer overwritten while an
 * earlier op still reads it.  Uploads of different contents, each consumed (added into
 * an accumulator) right after; the compute stream kept busy with a large op so that the
 * copies run ahead of it on a GPU; no synchronisation until the sums are read back:
 *   A  the same buffer again and again
 *   B  two buffers in turn
 *   C  bursts of NB uploads into NB buffers (more than the ring's slots), then the ops
 * Every upload's contents are distinct, so each sum checks every upload it holds. */
enum { XS_NB = 6, XS_A = 40, XS_B = 40, XS_C = 10 };

static float xs_val(int k, size_t i) { return (float)(k * 7 + (int)(i % 13) + 1); }

void gpu_check_xfer_streams(gc *x, int tiny)
{
    llm_backend *g = &x->g;
    /* M: the busy op's length, 2 x 256 MiB on a GPU (a fraction of a millisecond) */
#ifdef LLM_CUDA_EMU
    size_t M = (size_t)1 << 14;
#else
    size_t M = tiny || !x->cuda ? ((size_t)1 << 14) : ((size_t)1 << 26);
#endif
    size_t N = tiny ? 1000 : 4099;
    long before[2] = {0, 0}, after[2] = {0, 0};
    if (x->cuda) llm_backend_cuda_upload_counts(g, before);
    float *h = xmalloc(N * sizeof *h), *back = xmalloc(N * sizeof *back);
    double *want = xmalloc(XS_NB * N * sizeof *want);
    float *d[XS_NB], *acc[XS_NB];
    for (int j = 0; j < XS_NB; j++) {
        d[j] = gpoison(x, N);
        acc[j] = gpoison(x, N);
    }
    /* zeroed by alloc: the busy op adds zeros, only its time matters */
    float *busy = g->alloc(g, M * sizeof(float)), *busy2 = g->alloc(g, M * sizeof(float));
    if (!busy || !busy2) {
        fprintf(stderr, "gpu_check: device allocation of 2 x %zu floats failed\n", M);
        exit(2);
    }
    size_t bad = 0;
    int k = 0, ups = 0;

    for (int phase = 0; phase < 3; phase++) {
        for (int j = 0; j < XS_NB; j++) g->zero(g, acc[j], N * sizeof(float));
        memset(want, 0, XS_NB * N * sizeof *want);
        int rounds = phase == 0 ? XS_A : phase == 1 ? XS_B : XS_C;
        for (int r = 0; r < rounds; r++) {
            if (phase < 2) {
                int j = phase == 0 ? 0 : 1 + r % 2;
                if (r % 8 == 0) g->accumulate(g, busy, busy2, M);
                for (size_t i = 0; i < N; i++) h[i] = xs_val(k, i);
                g->to_device(g, d[j], h, N * sizeof *h);
                ups++;
                for (size_t i = 0; i < N; i++) want[j * N + i] += xs_val(k, i);
                k++;
                for (size_t i = 0; i < N; i++) h[i] = -1.0f;   /* the host buffer is free */
                g->accumulate(g, acc[j], d[j], N);
            } else {
                g->accumulate(g, busy, busy2, M);
                for (int j = 0; j < XS_NB; j++) {
                    for (size_t i = 0; i < N; i++) h[i] = xs_val(k, i);
                    g->to_device(g, d[j], h, N * sizeof *h);
                    ups++;
                    for (size_t i = 0; i < N; i++) want[j * N + i] += xs_val(k, i);
                    k++;
                    for (size_t i = 0; i < N; i++) h[i] = -1.0f;
                }
                for (int j = 0; j < XS_NB; j++) g->accumulate(g, acc[j], d[j], N);
            }
        }
        for (int j = 0; j < XS_NB; j++) {
            g->to_host(g, back, acc[j], N * sizeof *back);
            for (size_t i = 0; i < N; i++) bad += back[i] != (float)want[j * N + i];
        }
    }

    char sh[64];
    int paths = 1;
    if (x->cuda) {
        llm_backend_cuda_upload_counts(g, after);
        snprintf(sh, sizeof sh, "%d uploads, staged %ld", ups, after[0] - before[0]);
        /* every one of them through a staging slot (a synchronous upload would hide a
         * missing wait); the poisoned buffers' uploads (gpoison) count too */
        paths = after[0] - before[0] >= ups;
    } else {
        snprintf(sh, sizeof sh, "%d uploads", ups);
    }
    row_check(x, "to_device copy stream", sh, (double)bad, 0.0, bad == 0 && paths);
    free(h); free(back); free(want);
    for (int j = 0; j < XS_NB; j++) { g->free(g, d[j]); g->free(g, acc[j]); }
    g->free(g, busy);
    g->free(g, busy2);
}
