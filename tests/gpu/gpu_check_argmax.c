/* gpu_check_argmax.c — gpu_check's rows for greedy tokens on the device: the backend's
 * argmax_rows against common/sampler.c llm_argmax row by row (ties at several places,
 * -inf rows, NaN entries and a NaN first entry, signed zeros, +inf, the maximum in the
 * unaligned head, the float4 body and the scalar tail; padded rows whose padding would
 * win if it were read; rows starting off a 16-byte boundary), and a greedy decode of a
 * small random GPT-2 whose tokens from llm_infer_argmax equal llm_argmax of
 * llm_infer_logits at every step. */
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
#include "tests/gpu/gc_model.h"
#include "tests/gpu/gpu_check.h"

/* Row r of a test matrix (V values at x): one of several patterns by r. */
static void fill_row(gc *x, float *row, int V, int r)
{
    for (int i = 0; i < V; i++) row[i] = runi(x, -8.0f, 8.0f);
    int a = (int)(rnext(x) % (uint64_t)V), b = (int)(rnext(x) % (uint64_t)V);
    int c = (int)(rnext(x) % (uint64_t)V);
    switch (r % 10) {
    case 0: break;                                          /* random */
    case 1: row[a] = row[b] = row[c] = 9.0f; break;         /* a three-way tie */
    case 2: for (int i = 0; i < V; i++) row[i] = -INFINITY; break;
    case 3:                              /* NaNs (not first) among numbers, a tie at 10 */
        for (int i = 1; i < V; i += 3) row[i] = NAN;
        if (a) row[a] = NAN;
        row[b] = row[c] = 10.0f;
        break;
    case 4: row[0] = NAN; row[a] = 20.0f; break;            /* a NaN first entry: 0 */
    case 5: for (int i = 0; i < V; i++) row[i] = 1.5f; break;   /* all equal */
    case 6:                                                 /* -0 and +0 tie at the top */
        for (int i = 0; i < V; i++) row[i] = -1.0f - row[i] * row[i];
        row[a] = b % 2 ? -0.0f : 0.0f;
        row[b] = b % 2 ? 0.0f : -0.0f;
        break;
    case 7: row[a] = INFINITY; row[b] = INFINITY; row[c] = NAN; break;
    case 8: row[V - 1] = 30.0f; if (V > 2) row[V - 2] = 30.0f; break;   /* the tail */
    case 9: row[V > 2 ? 2 : 0] = 30.0f; row[V - 1] = 30.0f; break;      /* the head */
    }
}

/* n rows of V at leading dimension ld, the matrix starting off floats into its buffer
 * (off 1..3: rows off a 16-byte boundary); padding set to +inf, which a read past V
 * would return. */
static void check_rows(gc *x, int n, int V, int ld, int off)
{
    char sh[64];
    snprintf(sh, sizeof sh, "N%d V%d ld%d%s", n, V, ld, off ? " +off" : "");
    size_t tot = (size_t)n * ld + (size_t)off;
    float *h = xmalloc(tot * sizeof *h);
    for (size_t i = 0; i < tot; i++) h[i] = INFINITY;
    for (int r = 0; r < n; r++) fill_row(x, h + off + (size_t)r * ld, V, r);
    float *d = gput(x, h, tot * sizeof *h);
    int32_t *dids = x->g.alloc(&x->g, (size_t)n * sizeof(int32_t));
    int32_t *ids = xmalloc((size_t)n * sizeof *ids);
    if (!dids) { fprintf(stderr, "gpu_check: device allocation failed\n"); exit(2); }
    memset(ids, 0xff, (size_t)n * sizeof *ids);
    x->g.argmax_rows(&x->g, dids, d + off, n, V, ld);
    x->g.to_host(&x->g, ids, dids, (size_t)n * sizeof *ids);
    int bad = 0, first = -1;
    for (int r = 0; r < n; r++)
        if (ids[r] != llm_argmax(h + off + (size_t)r * ld, V)) {
            if (first < 0) first = r;
            bad++;
        }
    if (bad)
        fprintf(stderr, "gpu_check: argmax_rows %s: row %d gave %d, llm_argmax %d\n", sh, first,
                ids[first], llm_argmax(h + off + (size_t)first * ld, V));
    row_check(x, "argmax_rows = llm_argmax", sh, bad, 0, bad == 0);
    x->g.free(&x->g, d);
    x->g.free(&x->g, dids);
    free(h);
    free(ids);
}

enum { GA_SLOTS = 3, GA_PROMPT = 5, GA_STEPS = 8 };

/* Greedy decode on x->g: at every step (the prefill's last rows, then GA_STEPS steps of
 * GA_SLOTS rows) the ids of llm_infer_argmax and llm_argmax of llm_infer_logits on the
 * same forward; the argmax ids are fed back.  *diff: rows that differ; -1 on failure. */
static int decode_pair(gc *x, const char *path, const llm_model_config *cfg, int *diff)
{
    llm_status st = {0};
    llm_infer_model *m = NULL;
    llm_infer_ctx *c = NULL;
    int Vp = cfg->padded_vocab;
    int rc = llm_infer_model_open(&m, path, &x->g, 0, &st) ||
             llm_infer_ctx_new(&c, m, GA_SLOTS, GA_SLOTS * GA_PROMPT, &st);
    llm_infer_row rows[GA_SLOTS * GA_PROMPT];
    int which[GA_SLOTS], n = 0;
    int32_t ids[GA_SLOTS];
    float *lg = xmalloc((size_t)GA_SLOTS * Vp * sizeof *lg);
    *diff = 0;
    for (int s = 0; s < GA_SLOTS; s++)
        for (int t = 0; t < GA_PROMPT; t++)
            rows[n++] = (llm_infer_row){(int32_t)((s * 37 + t * 11) % cfg->vocab_size), s, t};
    if (!rc) rc = llm_infer_forward(c, rows, n, &st);
    for (int s = 0; s < GA_SLOTS; s++) which[s] = s * GA_PROMPT + GA_PROMPT - 1;
    for (int k = 0; !rc && k <= GA_STEPS; k++) {
        if (k > 0) {
            for (int s = 0; s < GA_SLOTS; s++) {
                rows[s] = (llm_infer_row){ids[s], s, GA_PROMPT + k - 1};
                which[s] = s;
            }
            rc = llm_infer_forward(c, rows, GA_SLOTS, &st);
        }
        if (!rc) rc = llm_infer_logits(c, which, GA_SLOTS, lg, &st);
        if (!rc) rc = llm_infer_argmax(c, which, GA_SLOTS, ids, &st);
        for (int s = 0; !rc && s < GA_SLOTS; s++)
            *diff += ids[s] != llm_argmax(lg + (size_t)s * Vp, cfg->vocab_size);
    }
    if (rc) fprintf(stderr, "gpu_check: argmax decode: %s\n", st.msg);
    free(lg);
    llm_infer_ctx_free(c);
    llm_infer_model_free(m);
    return rc ? -1 : 0;
}

void gpu_check_argmax(gc *x, int tiny)
{
    if (!x->g.argmax_rows) {   /* optional in backend.h; the CUDA backend has it */
        if (x->cuda) row_check(x, "backend fills argmax_rows", x->g.name, 1, 0, 0);
        else printf("gpu_check: backend '%s' has no argmax_rows: its rows skipped\n", x->g.name);
    } else {
        check_rows(x, 1, 1, 1, 0);
        check_rows(x, 1, 2, 2, 0);
        check_rows(x, 3, 7, 8, 1);
        check_rows(x, 10, 37, 37, 0);       /* every pattern once; rows off 16 bytes */
        check_rows(x, 10, 33, 40, 3);
        check_rows(x, 20, 1031, 1031, 2);   /* fewer float4 than threads */
        check_rows(x, 10, 9000, 9000, 0);   /* two or three float4 a thread, no 4-load pass */
        check_rows(x, 32, 1000, 1003, 0);
        check_rows(x, 64, 4099, 4104, 0);
        check_rows(x, 1, 50257, 50304, 0);
        check_rows(x, 3, 50257, 50257, 1);
        check_rows(x, 40, 17000, 17001, 0); /* a pass of 4 x 1024 float4, then the rest */
        if (!tiny) {
            check_rows(x, 32, 50257, 50304, 0);
            check_rows(x, 64, 50257, 50304, 0);
            check_rows(x, 64, 50257, 50257, 1);
        }
    }
    /* the vocabulary not a multiple of 4, padded to 384 */
    llm_model_config cfg = {.arch = "gpt2", .n_layer = 2, .n_head = 4, .n_embd = 64,
                            .vocab_size = 301, .padded_vocab = 384, .max_seq_len = 32};
    const char *sh = "L2 C64 V301 slots 3";
    char path[] = "/tmp/gpu_check_argmax_XXXXXX";
    int fd = mkstemp(path), diff = 0;
    llm_backend cpu;
    if (fd < 0 || llm_backend_cpu_init(&cpu, 1, 1)) {
        row_check(x, "greedy ids argmax = logits", "no temporary model", 1, 0, 0);
        if (fd >= 0) { close(fd); remove(path); }
        return;
    }
    char msg[256] = "";
    int ok = !gc_write_model(path, &cfg, &cpu, 777, msg, sizeof msg);
    if (!ok) fprintf(stderr, "gpu_check: argmax model: %s\n", msg);
    ok = ok && !decode_pair(x, path, &cfg, &diff);
    llm_backend_cpu_free(&cpu);
    close(fd);
    remove(path);
    row_check(x, "greedy ids argmax = logits", sh, ok ? diff : 1, 0, ok && diff == 0);
}
