/* gpu_check_graph.c — gpu_check's rows for recorded decode steps (backend.h
 * graph_capture / graph_launch, llm_infer_forward): a small random GPT-2 decoded on the
 * backend with recordings and on the same backend with them withheld, three cache slots
 * then two (a slot finishes: a second recording), the logits of every step equal bit for
 * bit, and on cuda the recordings counted (made once per row count, launched after);
 * then the same decode taking greedy ids on the device (llm_infer_argmax, whose ln_f,
 * lm-head and argmax are recorded too): recorded = direct = the logits' greedy choices. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "common/ckpt.h"
#include "common/infer.h"
#include "common/model.h"
#include "common/sampler.h"
#include "kernels/backend.h"
#include "kernels/cuda/cuda_ext.h"
#include "tests/gpu/gc_model.h"
#include "tests/gpu/gpu_check.h"

enum { GS_SLOTS = 3, GS_PROMPT = 4, GS_STEPS = 9 };

/* The model at path on be with a context of GS_SLOTS slots, and their GS_PROMPT-token
 * prompts run (rows: room for them all); which: each prompt's last row.  0 or nonzero
 * (st set); *m and *c are set either way, for the caller to free. */
static int prefill(llm_backend *be, const char *path, llm_infer_model **m, llm_infer_ctx **c,
                   llm_infer_row *rows, int *which, llm_status *st)
{
    int rc = llm_infer_model_open(m, path, be, 0, st) ||
             llm_infer_ctx_new(c, *m, GS_SLOTS, GS_SLOTS * GS_PROMPT, st);
    int n = 0;
    for (int s = 0; s < GS_SLOTS; s++) {
        for (int t = 0; t < GS_PROMPT; t++)
            rows[n++] = (llm_infer_row){(int32_t)((s * 31 + t * 7) % 100), s, t};
        which[s] = s * GS_PROMPT + GS_PROMPT - 1;
    }
    return rc || llm_infer_forward(*c, rows, n, st);
}

/* Prefill GS_SLOTS prompts, then GS_STEPS decode steps (the last slot stops after the
 * fourth), each step's logits appended to out (host).  0, or -1 with msg. */
static int decode(llm_backend *be, const char *path, float *out, int Vp, char *msg, size_t len)
{
    llm_status st = {0};
    llm_infer_model *m = NULL;
    llm_infer_ctx *c = NULL;
    llm_infer_row rows[GS_SLOTS * GS_PROMPT];
    int which[GS_SLOTS], tok[GS_SLOTS] = {0};
    int rc = prefill(be, path, &m, &c, rows, which, &st);
    for (int k = 0; !rc && k <= GS_STEPS; k++) {
        int live = k < 4 ? GS_SLOTS : GS_SLOTS - 1;
        if (k > 0) {
            for (int s = 0; s < live; s++) {
                rows[s] = (llm_infer_row){tok[s], s, GS_PROMPT + k - 1};
                which[s] = s;
            }
            rc = llm_infer_forward(c, rows, live, &st);
        }
        float *o = out + (size_t)k * GS_SLOTS * Vp;
        if (!rc) rc = llm_infer_logits(c, which, live, o, &st);
        for (int s = 0; !rc && s < live; s++) {   /* greedy */
            int best = 0;
            for (int v = 1; v < 100; v++)
                if (o[(size_t)s * Vp + v] > o[(size_t)s * Vp + best]) best = v;
            tok[s] = best;
        }
    }
    if (rc) snprintf(msg, len, "%.200s", st.msg);
    llm_infer_ctx_free(c);
    llm_infer_model_free(m);
    return rc ? -1 : 0;
}

/* A row: between the graph counts c0 and c1, rec recordings and run launches */
static void counts_row(gc *x, const char *op, const long c0[2], const long c1[2], long rec,
                       long run)
{
    long r = c1[0] - c0[0], l = c1[1] - c0[1];
    char cs[64];
    snprintf(cs, sizeof cs, "recorded %ld launched %ld", r, l);
    row_check(x, op, cs, (double)(r != rec || l != run), 0.0, r == rec && l == run);
}

/* The same decode taking greedy ids on the device (llm_infer_argmax: ln_f, lm-head and
 * argmax of every row recorded like the forward where the backend records) into ids
 * ((GS_STEPS + 1) x GS_SLOTS, -1 where a slot has stopped).  0, or -1 with msg. */
static int decode_ids(llm_backend *be, const char *path, int32_t *ids, char *msg, size_t len)
{
    llm_status st = {0};
    llm_infer_model *m = NULL;
    llm_infer_ctx *c = NULL;
    llm_infer_row rows[GS_SLOTS * GS_PROMPT];
    int which[GS_SLOTS];
    int rc = prefill(be, path, &m, &c, rows, which, &st);
    for (int k = 0; !rc && k <= GS_STEPS; k++) {
        int live = k < 4 ? GS_SLOTS : GS_SLOTS - 1;
        int32_t *o = ids + (size_t)k * GS_SLOTS;
        if (k > 0) {
            for (int s = 0; s < live; s++) {
                rows[s] = (llm_infer_row){o[s - GS_SLOTS], s, GS_PROMPT + k - 1};
                which[s] = s;
            }
            rc = llm_infer_forward(c, rows, live, &st);
        }
        for (int s = live; s < GS_SLOTS; s++) o[s] = -1;
        if (!rc) rc = llm_infer_argmax(c, which, live, o, &st);
    }
    if (rc) snprintf(msg, len, "%.200s", st.msg);
    llm_infer_ctx_free(c);
    llm_infer_model_free(m);
    return rc ? -1 : 0;
}

/* Greedy ids by llm_infer_argmax, recorded and direct, against the greedy choices of the
 * logits in lg (decode's output of the same model): equal at every step; on cuda the
 * forward and the head each recorded twice and launched five times. */
static void check_ids(gc *x, llm_backend *direct, const char *path, const float *lg, int Vp,
                      const char *sh)
{
    enum { NI = (GS_STEPS + 1) * GS_SLOTS };
    int32_t a[NI], b[NI], want[NI];
    char msg[256] = "";
    for (int k = 0; k <= GS_STEPS; k++)
        for (int s = 0; s < GS_SLOTS; s++) {
            const float *o = lg + ((size_t)k * GS_SLOTS + s) * Vp;
            want[k * GS_SLOTS + s] = k >= 4 && s == GS_SLOTS - 1 ? -1 : llm_argmax(o, 100);
        }
    long c0[2] = {0, 0}, c1[2] = {0, 0};
    if (x->cuda) llm_backend_cuda_graph_counts(&x->g, c0);
    int ok = !decode_ids(&x->g, path, a, msg, sizeof msg);
    if (x->cuda) llm_backend_cuda_graph_counts(&x->g, c1);
    ok = ok && !decode_ids(direct, path, b, msg, sizeof msg);
    if (!ok) {
        row_check(x, "decode ids recorded = direct", msg, 1, 0, 0);
        return;
    }
    int same = !memcmp(a, b, sizeof a) && !memcmp(a, want, sizeof a);
    row_check(x, "decode ids recorded = direct = logits", sh, same ? 0.0 : 1.0, 0.0, same);
    if (x->cuda) counts_row(x, "decode ids graphs used", c0, c1, 4, 10);
}

void gpu_check_graph(gc *x)
{
    char msg[256] = "", path[] = "/tmp/gpu_check_graph_XXXXXX";
    const char *sh = "L2 C64 slots 3->2";
    if (!x->g.graph_capture) {
        /* a build without recordings (LLM_CUDA_GRAPHS=0): nothing to compare */
        printf("gpu_check: backend '%s' records no graphs: skipped\n", x->g.name);
        return;
    }
    if (!x->have_ref || !x->g.embed_rows) {
        row_check(x, "decode recorded = direct", sh, 1, 0, 0);
        return;
    }
    llm_model_config cfg = {.arch = "gpt2", .n_layer = 2, .n_head = 4, .n_embd = 64,
                            .vocab_size = 100, .padded_vocab = 128, .max_seq_len = 32};
    int fd = mkstemp(path);
    if (fd < 0 || gc_write_model(path, &cfg, &x->r, 4242, msg, sizeof msg)) {
        row_check(x, "decode recorded = direct", "writing the model failed", 1, 0, 0);
        if (fd >= 0) remove(path);
        return;
    }
    size_t n = (size_t)(GS_STEPS + 1) * GS_SLOTS * cfg.padded_vocab;
    float *a = xmalloc(n * sizeof *a), *b = xmalloc(n * sizeof *b), *r = xmalloc(n * sizeof *r);
    memset(a, 0, n * sizeof *a);
    memset(b, 0, n * sizeof *b);
    memset(r, 0, n * sizeof *r);
    llm_backend direct = x->g;   /* the same device, recordings withheld */
    direct.graph_capture = NULL;
    direct.graph_launch = NULL;
    direct.graph_free = NULL;
    long c0[2] = {0, 0}, c1[2] = {0, 0};
    if (x->cuda) llm_backend_cuda_graph_counts(&x->g, c0);
    int ok = !decode(&x->g, path, a, cfg.padded_vocab, msg, sizeof msg);
    if (x->cuda) llm_backend_cuda_graph_counts(&x->g, c1);
    ok = ok && !decode(&direct, path, b, cfg.padded_vocab, msg, sizeof msg) &&
         !decode(&x->r, path, r, cfg.padded_vocab, msg, sizeof msg);
    if (!ok) {
        row_check(x, "decode recorded = direct", msg, 1, 0, 0);
    } else {
        int same = !memcmp(a, b, n * sizeof *a);
        row_check(x, "decode recorded = direct", sh, same ? 0.0 : 1.0, 0.0, same);
        row_check(x, "decode recorded vs cpu-ref", sh, errff(a, r, n), 1e-4, errff(a, r, n) <= 1e-4);
        /* 3 rows: seen at step 1, recorded at 2, launched at 3; 2 rows from step 4: seen,
         * recorded, launched 4 more times */
        if (x->cuda) counts_row(x, "decode graphs used", c0, c1, 2, 5);
        if (x->g.argmax_rows)
            check_ids(x, &direct, path, a, cfg.padded_vocab, sh);
    }
    remove(path);
    close(fd);
    free(a); free(b); free(r);
}
