/* gpu_check_embed.c — the embedding backward with its grouping made ahead (embed_hint).
 *
 * The model hints the token ids it has just uploaded, so that a backend that groups
 * positions by token (CUDA) does it on the host during the forward instead of reading
 * the ids back mid-backward.  What must hold, on any backend:
 *   hinted   = unhinted, bit for bit (the same grouping, the same order of sums);
 *   a training pass (llm_model_forward_backward, llm_model_forward + backward) hints,
 *            and its gradients equal those of the model on the cpu-ref backend;
 *   a hint is dropped when its ids are overwritten (a stale grouping would send the
 *            rows to the wrong tokens: a wrong sum, not a crash), when another buffer
 *            or another B*T is asked for, and when its buffer is freed;
 * and on CUDA the counters show which path ran (grouped ahead, or read back). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/model.h"
#include "kernels/backend.h"
#include "kernels/cuda/cuda_ext.h"
#include "tests/gpu/gpu_check.h"
#include "tests/gpu/ref64.h"

/* dwte, dwpe = d0 + the backward of ids (device) from dout (device); returns dwte. */
static float *run_bwd(gc *x, float *gdwte, float *gdwpe, const float *dwte0, const float *dwpe0,
                      const float *gd, const int32_t *gids, int B, int T, int C, int Vp)
{
    llm_backend *g = &x->g;
    g->to_device(g, gdwte, dwte0, (size_t)Vp * C * 4);
    g->to_device(g, gdwpe, dwpe0, (size_t)T * C * 4);
    g->embed_backward(g, gdwte, gdwpe, gd, gids, B, T, C);
    return gget(x, gdwte, (size_t)Vp * C);
}

/* row passes when dwte matches the double reference for ids (ids' own grouping) */
static void ref_row(gc *x, const char *op, const char *sh, const float *dwte, const float *dwte0,
                    const float *dwpe0, const float *dout, const int32_t *ids, int B, int T,
                    int C, int Vp)
{
    double *rte = dcopy(dwte0, (size_t)Vp * C), *rpe = dcopy(dwpe0, (size_t)T * C);
    r64_embed_backward(rte, rpe, dout, ids, B, T, C);
    row(x, op, sh, dwte, rte, NULL, (size_t)Vp * C, B_RED);
    free(rte);
    free(rpe);
}

static void counts(gc *x, long c[2])
{
    c[0] = c[1] = 0;
    if (x->cuda) llm_backend_cuda_embed_counts(&x->g, c);
}

static void check_hint(gc *x, int B, int T, int C, int V, int Vp)
{
    llm_backend *g = &x->g;
    char sh[64];
    snprintf(sh, sizeof sh, "B%d T%d C%d V%d", B, T, C, V);
    size_t N = (size_t)B * T;
    int32_t *ids = rtok(x, N, V), *ids2 = rtok(x, N, V);
    float *dout = rnd(x, N * C, -1, 1);
    float *dwte0 = rnd(x, (size_t)Vp * C, -1, 1), *dwpe0 = rnd(x, (size_t)T * C, -1, 1);
    int32_t *gids = gput(x, ids, N * 4), *gids2 = gput(x, ids2, N * 4);
    float *gd = gput(x, dout, N * C * 4);
    float *gdwte = gpoison(x, (size_t)Vp * C), *gdwpe = gpoison(x, (size_t)T * C);
    long c0[2], c1[2];

    /* unhinted, then hinted: the same bits; the hinted call grouped ahead */
    float *plain = run_bwd(x, gdwte, gdwpe, dwte0, dwpe0, gd, gids, B, T, C, Vp);
    if (g->embed_hint) g->embed_hint(g, gids, ids, N);
    counts(x, c0);
    float *hinted = run_bwd(x, gdwte, gdwpe, dwte0, dwpe0, gd, gids, B, T, C, Vp);
    counts(x, c1);
    row_det(x, "embed_hint hinted = plain", sh, hinted, plain, (size_t)Vp * C);
    if (x->cuda)
        row_check(x, "embed_hint grouped ahead", sh, (double)(c1[0] - c0[0]), 1.0,
                  c1[0] - c0[0] == 1 && c1[1] == c0[1]);
    /* the hint holds until the ids change: a second backward uses it again */
    float *again = run_bwd(x, gdwte, gdwpe, dwte0, dwpe0, gd, gids, B, T, C, Vp);
    row_det(x, "embed_hint reused = plain", sh, again, plain, (size_t)Vp * C);
    free(hinted); free(again);

    /* hinted, then the buffer overwritten with other ids: the backward must group the
     * new ones (read back), not reuse the hint */
    if (g->embed_hint) g->embed_hint(g, gids, ids, N);
    g->to_device(g, gids, ids2, N * 4);
    counts(x, c0);
    float *over = run_bwd(x, gdwte, gdwpe, dwte0, dwpe0, gd, gids, B, T, C, Vp);
    counts(x, c1);
    ref_row(x, "embed_hint dropped on upload", sh, over, dwte0, dwpe0, dout, ids2, B, T, C, Vp);
    if (x->cuda)
        row_check(x, "embed_hint upload -> read back", sh, (double)(c1[1] - c0[1]), 1.0,
                  c1[1] - c0[1] == 1 && c1[0] == c0[0]);
    free(over);

    /* a hint for one buffer does not serve another (gids2 holds ids2, hinted as ids) */
    g->to_device(g, gids, ids, N * 4);
    if (g->embed_hint) g->embed_hint(g, gids, ids, N);
    float *other = run_bwd(x, gdwte, gdwpe, dwte0, dwpe0, gd, gids2, B, T, C, Vp);
    ref_row(x, "embed_hint other buffer", sh, other, dwte0, dwpe0, dout, ids2, B, T, C, Vp);
    free(other);

    /* nor another batch shape over the same buffer (the first T ids as B=1) */
    if (B > 1) {
        if (g->embed_hint) g->embed_hint(g, gids, ids, N);
        float *one = run_bwd(x, gdwte, gdwpe, dwte0, dwpe0, gd, gids, 1, T, C, Vp);
        ref_row(x, "embed_hint other B*T", sh, one, dwte0, dwpe0, dout, ids, 1, T, C, Vp);
        free(one);
    }

    /* freed and allocated again (possibly at the same address) with other ids uploaded
     * before any hint: the old hint must be gone */
    if (g->embed_hint) g->embed_hint(g, gids, ids, N);
    g->free(g, gids);
    gids = gput(x, ids2, N * 4);
    float *fresh = run_bwd(x, gdwte, gdwpe, dwte0, dwpe0, gd, gids, B, T, C, Vp);
    ref_row(x, "embed_hint dropped on free", sh, fresh, dwte0, dwpe0, dout, ids2, B, T, C, Vp);
    free(fresh);

    free(plain); free(ids); free(ids2); free(dout); free(dwte0); free(dwpe0);
    g->free(g, gids); g->free(g, gids2); g->free(g, gd);
    g->free(g, gdwte); g->free(g, gdwpe);
}

/* A small GPT-2 trained one pass on x->g and on cpu-ref from the same parameters: on cuda
 * every embedding backward of the passes used the hint (none read the ids back), and the
 * gradients agree with cpu-ref's. */
static void check_model_pass(gc *x)
{
    if (!x->have_ref) return;
    llm_model_config cfg = {.arch = "gpt2", .n_layer = 2, .n_head = 2, .n_embd = 32,
                            .vocab_size = 97, .padded_vocab = 128, .max_seq_len = 32};
    enum { B = 3, T = 17 };
    llm_status st = {0};
    llm_model *mg = NULL, *mr = NULL;
    if (llm_model_new(&mg, &cfg, &x->g, &st) || llm_model_new(&mr, &cfg, &x->r, &st)) {
        row_check(x, "embed_hint training pass", st.msg, 1.0, 0.0, 0);
        llm_model_free(mg);
        llm_model_free(mr);
        return;
    }
    llm_model_init_gpt2(mr, 77);
    size_t np = llm_model_num_params(&cfg);
    x->g.to_device(&x->g, llm_model_params(mg), llm_model_params(mr), np * sizeof(float));
    llm_model_params_changed(mg);
    int32_t *in = rtok(x, (size_t)B * T, cfg.vocab_size), *tg = rtok(x, (size_t)B * T, cfg.vocab_size);
    long c0[2], c1[2];
    counts(x, c0);
    float lg = 0, lr = 0;
    int rc = llm_model_zero_grad(mg, &st) || llm_model_zero_grad(mr, &st) ||
             llm_model_forward_backward(mg, in, tg, B, T, 1.0f, &lg, &st) ||
             llm_model_forward(mg, in, tg, B, T, &lg, &st) || llm_model_backward(mg, 1.0f, &st) ||
             llm_model_forward_backward(mr, in, tg, B, T, 1.0f, &lr, &st) ||
             llm_model_forward(mr, in, tg, B, T, &lr, &st) || llm_model_backward(mr, 1.0f, &st);
    counts(x, c1);
    if (rc) {
        row_check(x, "embed_hint training pass", st.msg, 1.0, 0.0, 0);
    } else {
        float *gg = gget(x, llm_model_grads(mg), np);
        double *gr = dcopy(llm_model_grads(mr), np);
        row(x, "embed_hint training grads", "L2 C32 B3 T17", gg, gr, NULL, np, B_BWD);
        if (x->cuda)
            row_check(x, "embed_hint training grouped ahead", "2 passes",
                      (double)(c1[0] - c0[0]), 2.0, c1[0] - c0[0] == 2 && c1[1] == c0[1]);
        free(gg);
        free(gr);
    }
    free(in);
    free(tg);
    llm_model_free(mg);
    llm_model_free(mr);
}

void gpu_check_embed_hint(gc *x, int tiny)
{
    check_model_pass(x);
    check_hint(x, 1, 1, 1, 1, 1);
    check_hint(x, 3, 37, 61, 7, 7);   /* many repeats of each token */
    check_hint(x, 5, 129, 96, 500, 512);
    if (!tiny) check_hint(x, 4, 1024, 768, 50257, 50304);
}
