/* Unit tests for the inference engine: KV-cache decoding against the training forward,
 * batched prompts of different lengths, greedy generation, batched == one at a time,
 * stopping rules and bad input. */
#include "tests/unit/testutil.h"

#include <math.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/infer.h"
#include "common/infer_sched.h"
#include "common/model.h"
#include "common/profile.h"
#include "common/sampler.h"
#include "tests/unit/test_infer_util.h"

typedef struct {
    char *dir, path[512];
    llm_model_config cfg;
    llm_backend be;
    llm_model *train;       /* the training model (model.c) with the same weights */
    llm_infer_model *m;
} fixture;

static int setup(void **state)
{
    fixture *f = calloc(1, sizeof *f);
    f->dir = tu_tmpdir();
    snprintf(f->path, sizeof f->path, "%s/m.llmk", f->dir);
    f->cfg = (llm_model_config){.arch = "gpt2", .n_layer = 2, .n_head = 4, .n_embd = 64,
                                .vocab_size = 300, .padded_vocab = 384, .max_seq_len = 32};
    char err[128];
    assert_int_equal(llm_backend_init(&f->be, "cpu", 2, err, sizeof err), 0);
    tiu_make_model(f->path, &f->cfg, &f->be, 1234, 4.0f, 0, &f->train);
    llm_status st = {0};
    int rc = llm_infer_model_open(&f->m, f->path, &f->be, 1, &st);
    if (rc)
        fprintf(stderr, "open: %s\n", st.msg);
    assert_int_equal(rc, 0);
    *state = f;
    return 0;
}

static int teardown(void **state)
{
    fixture *f = *state;
    llm_infer_model_free(f->m);
    llm_model_free(f->train);
    llm_backend_free(&f->be);
    tu_rmdir(f->dir);
    free(f->dir);
    free(f);
    return 0;
}

/* Full-sequence logits (T, Vp) from the training forward. */
static float *full_logits(fixture *f, const int32_t *ids, int T)
{
    llm_status st = {0};
    assert_int_equal(llm_model_forward(f->train, ids, NULL, 1, T, NULL, &st), 0);
    size_t n = (size_t)T * f->cfg.padded_vocab;
    float *out = malloc(n * sizeof(float));
    assert_non_null(out);
    assert_int_equal(llm_model_logits_to_host(f->train, 0, (size_t)T, out, &st), 0);
    return out;
}

/* Error of a logits row relative to its scale: max |a-b| / max |b| over the real
 * vocabulary (elementwise relative error is meaningless for logits near 0). */
static double row_err(const float *a, const float *b, int V)
{
    double mx = 0, d = 0;
    for (int i = 0; i < V; i++) {
        mx = fmax(mx, fabs(b[i]));
        d = fmax(d, fabs((double)a[i] - b[i]));
    }
    return d / fmax(mx, 1e-30);
}

static void test_kv_matches_full_batch1(void **state)
{
    fixture *f = *state;
    llm_status st = {0};
    int T = 32, P = 9, V = f->cfg.vocab_size, Vp = f->cfg.padded_vocab;
    int32_t ids[32];
    tu_rng r = {7};
    for (int i = 0; i < T; i++)
        ids[i] = (int32_t)(tu_next(&r) % (uint64_t)V);
    float *ref = full_logits(f, ids, T);
    llm_infer_ctx *c = NULL;
    assert_int_equal(llm_infer_ctx_new(&c, f->m, 1, 16, &st), 0);
    float *lg = malloc((size_t)T * Vp * sizeof(float));
    /* prefill P positions, logits for all of them */
    llm_infer_row rows[32];
    int which[32];
    for (int i = 0; i < P; i++) {
        rows[i] = (llm_infer_row){ids[i], 0, i};
        which[i] = i;
    }
    assert_int_equal(llm_infer_forward(c, rows, P, &st), 0);
    assert_int_equal(llm_infer_logits(c, which, P, lg, &st), 0);
    for (int t = P; t < T; t++) {   /* then one position at a time */
        llm_infer_row row = {ids[t], 0, t};
        int w = 0;
        assert_int_equal(llm_infer_forward(c, &row, 1, &st), 0);
        assert_int_equal(llm_infer_logits(c, &w, 1, lg + (size_t)t * Vp, &st), 0);
    }
    double worst = 0;
    for (int t = 0; t < T; t++)
        worst = fmax(worst, row_err(lg + (size_t)t * Vp, ref + (size_t)t * Vp, V));
    printf("# kv vs full forward, batch 1: max rel err %.3g\n", worst);
    assert_true(worst < 1e-5);
    free(lg);
    free(ref);
    llm_infer_ctx_free(c);
}

/* Logits of any rows of the last forward, in any order, repeated or not, equal those of
 * each row asked alone (consecutive rows are read in place, others gathered). */
static void test_logits_any_rows(void **state)
{
    fixture *f = *state;
    llm_status st = {0};
    enum { P = 7 };
    int V = f->cfg.vocab_size, Vp = f->cfg.padded_vocab;
    llm_infer_ctx *c = NULL;
    assert_int_equal(llm_infer_ctx_new(&c, f->m, 1, 16, &st), 0);
    llm_infer_row rows[P];
    tu_rng r = {5};
    for (int i = 0; i < P; i++)
        rows[i] = (llm_infer_row){(int32_t)(tu_next(&r) % (uint64_t)V), 0, i};
    assert_int_equal(llm_infer_forward(c, rows, P, &st), 0);
    float *one = malloc((size_t)P * Vp * sizeof(float));
    float *got = malloc((size_t)8 * Vp * sizeof(float));
    assert_non_null(one);
    assert_non_null(got);
    for (int i = 0; i < P; i++)
        assert_int_equal(llm_infer_logits(c, &i, 1, one + (size_t)i * Vp, &st), 0);
    static const int lists[][8] = {{0, 1, 2, 3, 4, 5, 6}, {2, 3, 4}, {6, 0, 3}, {4, 4, 5},
                                   {6, 5, 4, 3, 2, 1, 0}, {1, 2, 3, 5, 6}};
    static const int lens[] = {7, 3, 3, 3, 7, 5};
    for (size_t l = 0; l < sizeof lens / sizeof *lens; l++) {
        memset(got, 0xff, (size_t)8 * Vp * sizeof(float));
        assert_int_equal(llm_infer_logits(c, lists[l], lens[l], got, &st), 0);
        for (int i = 0; i < lens[l]; i++)
            assert_memory_equal(got + (size_t)i * Vp, one + (size_t)lists[l][i] * Vp,
                                (size_t)Vp * sizeof(float));
    }
    free(got);
    free(one);
    llm_infer_ctx_free(c);
}

/* A stand-in for a device's argmax_rows on the CPU backend's host memory: a plain scan
 * (the first strictly greater wins), independent of llm_argmax; counts its rows. */
static int stub_rows;
static void stub_argmax_rows(llm_backend *be, int32_t *ids, const float *logits, int N, int V,
                             int ld)
{
    (void)be;
    assert_true(ld >= V);
    for (int i = 0; i < N; i++) {
        const float *x = logits + (size_t)i * ld;
        int best = 0;
        for (int v = 1; v < V; v++)
            if (x[v] > x[best])
                best = v;
        ids[i] = best;
    }
    stub_rows += N;
}

/* llm_infer_argmax = llm_infer_logits + llm_argmax over the real vocabulary, for rows in
 * any order and more than one 64-row chunk: on the cpu backend (logits read in place),
 * on it posing as device memory without argmax_rows (logits copied back), with an
 * argmax_rows (ids copied back), and that through the profiler (op argmax_rows). */
static void test_argmax_equals_logits(void **state)
{
    fixture *f = *state;
    llm_status st = {0};
    enum { S = 4, P = 20, N = S * P };
    int V = f->cfg.vocab_size, Vp = f->cfg.padded_vocab;
    llm_infer_row rows[N];
    tu_rng r = {77};
    for (int s = 0; s < S; s++)
        for (int i = 0; i < P; i++)
            rows[s * P + i] = (llm_infer_row){(int32_t)(tu_next(&r) % (uint64_t)V), s, i};
    float *lg = malloc((size_t)N * Vp * sizeof(float));
    assert_non_null(lg);
    int all[N], ref[N];
    for (int i = 0; i < N; i++)
        all[i] = i;
    llm_infer_ctx *c = NULL;
    assert_int_equal(llm_infer_ctx_new(&c, f->m, S, N, &st), 0);
    assert_int_equal(llm_infer_forward(c, rows, N, &st), 0);
    assert_int_equal(llm_infer_logits(c, all, N, lg, &st), 0);
    int distinct = 0;
    for (int i = 0; i < N; i++) {
        ref[i] = llm_argmax(lg + (size_t)i * Vp, V);
        distinct += i == 0 || ref[i] != ref[i - 1];
    }
    assert_true(distinct > N / 4);   /* the rows do not all agree */
    llm_infer_ctx_free(c);
    int back[N], odd[7] = {79, 3, 64, 63, 3, 0, 40};
    for (int i = 0; i < N; i++)
        back[i] = N - 1 - i;
    for (int variant = 0; variant < 4; variant++) {
        llm_backend be = f->be, pb;   /* the same CPU backend state, other capabilities */
        if (variant >= 1)
            be.host_memory = 0;
        if (variant >= 2)
            be.argmax_rows = stub_argmax_rows;
        llm_profile *prof = NULL;   /* variant 3: through the profiler's wrapper */
        if (variant == 3) {
            assert_int_equal(llm_profile_new(&prof, &be, 0, &st), 0);
            llm_profile_backend(prof, &pb);
        }
        llm_infer_model *m = NULL;
        assert_int_equal(llm_infer_model_open(&m, f->path, prof ? &pb : &be, 0, &st), 0);
        assert_int_equal(llm_infer_ctx_new(&c, m, S, N, &st), 0);
        assert_int_equal(llm_infer_forward(c, rows, N, &st), 0);
        int32_t ids[N];
        stub_rows = 0;
        memset(ids, 0xff, sizeof ids);
        assert_int_equal(llm_infer_argmax(c, all, N, ids, &st), 0);   /* 64 + 16 rows */
        for (int i = 0; i < N; i++)
            assert_int_equal(ids[i], ref[i]);
        memset(ids, 0xff, sizeof ids);
        assert_int_equal(llm_infer_argmax(c, back, N, ids, &st), 0);
        for (int i = 0; i < N; i++)
            assert_int_equal(ids[i], ref[back[i]]);
        memset(ids, 0xff, sizeof ids);
        assert_int_equal(llm_infer_argmax(c, odd, 7, ids, &st), 0);
        for (int i = 0; i < 7; i++)
            assert_int_equal(ids[i], ref[odd[i]]);
        assert_int_equal(llm_infer_argmax(c, odd + 2, 1, ids, &st), 0);
        assert_int_equal(ids[0], ref[64]);
        assert_int_equal(stub_rows, variant >= 2 ? 2 * N + 8 : 0);
        int bad = N;
        assert_int_equal(llm_infer_argmax(c, &bad, 1, ids, &st), LLM_EUSAGE);
        if (prof) {   /* one argmax_rows call per chunk, timed and counted as the others */
            llm_profile_entry *v;
            int ne;
            assert_int_equal(llm_profile_entries(prof, 1, &v, &ne, &st), 0);
            double sum = 0;
            const llm_profile_entry *e = NULL;
            for (int i = 0; i < ne; i++) {
                sum += v[i].seconds;
                if (v[i].op == LLM_OP_ARGMAX_ROWS)
                    e = &v[i];
            }
            assert_non_null(e);
            assert_string_equal(llm_op_name(e->op), "argmax_rows");
            assert_int_equal(e->calls, 2 + 2 + 1 + 1);
            llm_op_cost one = llm_cost_argmax_rows(1, V);
            assert_true(e->flop == (2 * N + 8) * one.flop && e->bytes == (2 * N + 8) * one.bytes);
            assert_true(fabs(sum - llm_profile_total_seconds(prof)) <= 1e-9 * (1 + sum));
            free(v);
        }
        llm_infer_ctx_free(c);
        llm_infer_model_free(m);
        llm_profile_free(prof);
    }
    free(lg);
}

static void test_kv_matches_full_batched(void **state)
{
    fixture *f = *state;
    llm_status st = {0};
    enum { S = 4 };
    int V = f->cfg.vocab_size, Vp = f->cfg.padded_vocab;
    int plen[S] = {5, 17, 1, 11}, total[S] = {20, 32, 14, 25};
    int32_t ids[S][32];
    float *ref[S], *got[S];
    tu_rng r = {99};
    for (int s = 0; s < S; s++) {
        for (int i = 0; i < total[s]; i++)
            ids[s][i] = (int32_t)(tu_next(&r) % (uint64_t)V);
        ref[s] = full_logits(f, ids[s], total[s]);
        got[s] = calloc((size_t)32 * Vp, sizeof(float));
    }
    llm_infer_ctx *c = NULL;
    assert_int_equal(llm_infer_ctx_new(&c, f->m, S, 8, &st), 0);   /* prefill in chunks of 8 */
    for (int s = 0; s < S; s++) {
        for (int p0 = 0; p0 < plen[s]; p0 += 8) {
            int k = plen[s] - p0 < 8 ? plen[s] - p0 : 8, which[8];
            llm_infer_row rows[8];
            for (int i = 0; i < k; i++) {
                rows[i] = (llm_infer_row){ids[s][p0 + i], s, p0 + i};
                which[i] = i;
            }
            assert_int_equal(llm_infer_forward(c, rows, k, &st), 0);
            assert_int_equal(llm_infer_logits(c, which, k, got[s] + (size_t)p0 * Vp, &st), 0);
        }
    }
    /* decode all sequences together, each at its own position, until each is done */
    int len[S];
    for (int s = 0; s < S; s++)
        len[s] = plen[s];
    for (;;) {
        llm_infer_row rows[S];
        int who[S], which[S], n = 0;
        for (int s = 0; s < S; s++)
            if (len[s] < total[s]) {
                rows[n] = (llm_infer_row){ids[s][len[s]], s, len[s]};
                who[n] = s;
                which[n] = n;
                n++;
            }
        if (!n)
            break;
        float *lg = malloc((size_t)n * Vp * sizeof(float));
        assert_int_equal(llm_infer_forward(c, rows, n, &st), 0);
        assert_int_equal(llm_infer_logits(c, which, n, lg, &st), 0);
        for (int i = 0; i < n; i++) {
            int s = who[i];
            memcpy(got[s] + (size_t)len[s] * Vp, lg + (size_t)i * Vp, (size_t)Vp * sizeof(float));
            len[s]++;
        }
        free(lg);
    }
    double worst = 0;
    for (int s = 0; s < S; s++) {
        for (int t = 0; t < total[s]; t++)
            worst = fmax(worst, row_err(got[s] + (size_t)t * Vp, ref[s] + (size_t)t * Vp, V));
        free(ref[s]);
        free(got[s]);
    }
    printf("# kv vs full forward, 4 prompts of lengths 5/17/1/11 decoded together: max rel err %.3g\n",
           worst);
    assert_true(worst < 1e-5);
    llm_infer_ctx_free(c);
}

static llm_infer_request req_of(long index, const uint32_t *prompt, int n, int max_tokens,
                                float temp, int top_k, float top_p, uint64_t seed)
{
    llm_infer_request q;
    memset(&q, 0, sizeof q);
    q.index = index;
    q.prompt = (uint32_t *)prompt;
    q.n_prompt = n;
    q.max_tokens = max_tokens;
    q.sp = (llm_sampler_params){temp, top_k, top_p, seed};
    return q;
}

static void run_reqs(fixture *f, int slots, llm_infer_request *reqs, int n, tiu_io *io)
{
    llm_status st = {0};
    llm_infer_ctx *c = NULL;
    assert_int_equal(llm_infer_ctx_new(&c, f->m, slots, 16, &st), 0);
    tiu_io_init(io, reqs, n);
    llm_infer_io x = {tiu_next, NULL, tiu_done, io, io, NULL, NULL};
    llm_infer_stats stats = {0};
    int rc = llm_infer_run(c, f->m, slots, &x, &stats, &st);
    if (rc)
        fprintf(stderr, "run: %s\n", st.msg);
    assert_int_equal(rc, 0);
    assert_int_equal(io->ndone, n);
    llm_infer_stats_free(&stats);
    llm_infer_ctx_free(c);
}

static void test_greedy_is_training_argmax(void **state)
{
    fixture *f = *state;
    uint32_t prompt[6] = {3, 141, 59, 26, 5, 35};
    llm_infer_request q = req_of(0, prompt, 6, 20, 0.0f, 0, 1.0f, 1);
    tiu_io io;
    run_reqs(f, 1, &q, 1, &io);
    assert_int_equal(io.ntok[0], 20);
    assert_string_equal(io.reason[0], "length");
    int T = 6 + 20, Vp = f->cfg.padded_vocab, V = f->cfg.vocab_size, checked = 0;
    int32_t ids[32];
    for (int i = 0; i < 6; i++)
        ids[i] = (int32_t)prompt[i];
    for (int i = 0; i < 20; i++)
        ids[6 + i] = (int32_t)io.toks[0][i];
    float *ref = full_logits(f, ids, T);
    for (int t = 5; t < T - 1; t++) {
        const float *row = ref + (size_t)t * Vp;
        int a = 0;
        for (int v = 1; v < V; v++)
            if (row[v] > row[a])
                a = v;
        float second = -INFINITY;
        for (int v = 0; v < V; v++)
            if (v != a && row[v] > second)
                second = row[v];
        if (row[a] - second < 1e-4f)
            continue;   /* a near tie may legitimately go either way */
        assert_int_equal(ids[t + 1], a);
        checked++;
    }
    printf("# greedy: %d of 20 tokens equal the training forward's argmax (rest near ties)\n",
           checked);
    assert_true(checked >= 15);
    free(ref);
    tiu_io_free(&io);
}

/* A stop flag (llm-infer sets it on SIGINT/SIGTERM) ends the run: the requests in flight
 * are answered with their tokens so far and "interrupted", nothing more is read. */
static volatile sig_atomic_t stop_flag;

static int done_then_stop(void *u, const llm_infer_result *r, llm_status *st)
{
    if (r->req->index == 0)
        stop_flag = 1;
    return tiu_done(u, r, st);
}

static void test_stop_flag_interrupts(void **state)
{
    fixture *f = *state;
    uint32_t p[2] = {7, 8};
    llm_infer_request reqs[5];
    for (int i = 0; i < 5; i++)
        reqs[i] = req_of(i, p, 2, i == 0 ? 3 : 12, 1.0f, 0, 1.0f, 20 + (uint64_t)i);
    tiu_io io;
    tiu_io_init(&io, reqs, 5);
    llm_status st = {0};
    llm_infer_ctx *c = NULL;
    assert_int_equal(llm_infer_ctx_new(&c, f->m, 3, 16, &st), 0);
    stop_flag = 0;
    llm_infer_io x = {tiu_next, NULL, done_then_stop, &io, &io, NULL, &stop_flag};
    llm_infer_stats stats = {0};
    assert_int_equal(llm_infer_run(c, f->m, 3, &x, &stats, &st), LLM_EINTR);
    assert_non_null(strstr(st.msg, "2 request(s) cut short"));
    assert_int_equal(io.at, 3);     /* requests 3 and 4 were never read */
    assert_int_equal(io.ndone, 3);
    assert_string_equal(io.reason[0], "length");
    for (int i = 1; i < 3; i++) {
        assert_string_equal(io.reason[i], "interrupted");
        assert_true(io.ntok[i] >= 1 && io.ntok[i] < 12);
    }
    assert_null(io.reason[3]);
    llm_infer_stats_free(&stats);
    llm_infer_ctx_free(c);
    tiu_io_free(&io);
}

static void test_batched_equals_single(void **state)
{
    fixture *f = *state;
    uint32_t p0[3] = {1, 2, 3}, p1[9] = {9, 8, 7, 6, 5, 4, 3, 2, 1}, p2[1] = {42},
             p3[14] = {5, 5, 5, 5, 5, 5, 5, 100, 200, 250, 7, 8, 9, 10}, p4[2] = {77, 78};
    llm_infer_request reqs[5] = {
        req_of(0, p0, 3, 12, 0.9f, 0, 1.0f, 11),  req_of(1, p1, 9, 20, 1.2f, 40, 1.0f, 12),
        req_of(2, p2, 1, 25, 0.0f, 0, 1.0f, 13),  req_of(3, p3, 14, 18, 0.8f, 0, 0.9f, 14),
        req_of(4, p4, 2, 9, 1.0f, 5, 0.7f, 15),
    };
    tiu_io one, many, many2;
    run_reqs(f, 1, reqs, 5, &one);
    run_reqs(f, 3, reqs, 5, &many);
    run_reqs(f, 5, reqs, 5, &many2);
    for (int i = 0; i < 5; i++) {
        assert_int_equal(one.ntok[i], many.ntok[i]);
        assert_int_equal(one.ntok[i], many2.ntok[i]);
        assert_memory_equal(one.toks[i], many.toks[i], (size_t)one.ntok[i] * sizeof(uint32_t));
        assert_memory_equal(one.toks[i], many2.toks[i], (size_t)one.ntok[i] * sizeof(uint32_t));
        assert_string_equal(one.reason[i], many.reason[i]);
    }
    /* a different seed gives a different sample (sanity: the seed is used) */
    llm_infer_request alt = reqs[1];
    alt.sp.seed = 999;
    alt.index = 0;
    tiu_io other;
    run_reqs(f, 1, &alt, 1, &other);
    assert_true(other.ntok[0] != one.ntok[1] ||
                memcmp(other.toks[0], one.toks[1], (size_t)one.ntok[1] * sizeof(uint32_t)) != 0);
    tiu_io_free(&one);
    tiu_io_free(&many);
    tiu_io_free(&many2);
    tiu_io_free(&other);
}

/* The cpu backend's matmul_rows changes method past rows_invariant rows (sgemm; for
 * quantized weights, unquantized activations), so a decode step of more requests than
 * that runs in groups: each request still gets the tokens it gets alone.  A wrapper
 * negates every result of a call past the limit, so a step run whole changes every
 * token and fails here. */
static void (*inner_matmul_rows)(llm_backend *, float *, const float *, const void *, int,
                                 const float *, int, int, int);
static int calls_past_limit;

static void negated_past_limit(llm_backend *be, float *out, const float *inp, const void *w,
                               int w_dt, const float *bias, int N, int C, int OC)
{
    inner_matmul_rows(be, out, inp, w, w_dt, bias, N, C, OC);
    if (be->rows_invariant > 0 && N > be->rows_invariant) {
        calls_past_limit++;
        for (size_t i = 0; i < (size_t)N * OC; i++)
            out[i] = -out[i];
    }
}

static void test_decode_step_within_invariant_rows(void **state)
{
    fixture *f = *state;
    assert_string_equal(f->m->be->name, "cpu");
    assert_int_equal(f->m->be->rows_invariant, 63);   /* sgemm from 64 rows on */
    enum { NR = 70 };
    uint32_t prompts[NR][4];
    llm_infer_request reqs[NR];
    for (int pass = 0; pass < 2; pass++) {
        for (int i = 0; i < NR; i++) {
            for (int j = 0; j < 4; j++)
                prompts[i][j] = (uint32_t)((i * 37 + j * 11 + 3) % 300);
            /* pass 0: all greedy (the ids-only step); pass 1: sampled ones among them */
            float temp = pass == 1 && i % 3 == 0 ? 0.9f : 0.0f;
            reqs[i] = req_of(i, prompts[i], 1 + i % 4, 10, temp, 0, 1.0f, 100 + (uint64_t)i);
        }
        tiu_io one, all;
        run_reqs(f, 1, reqs, NR, &one);
        inner_matmul_rows = f->m->be->matmul_rows;
        f->m->be->matmul_rows = negated_past_limit;
        calls_past_limit = 0;
        run_reqs(f, NR, reqs, NR, &all);   /* 70 requests decode together: 2 x 35 rows */
        f->m->be->matmul_rows = inner_matmul_rows;
        assert_int_equal(calls_past_limit, 0);
        for (int i = 0; i < NR; i++) {
            assert_int_equal(one.ntok[i], all.ntok[i]);
            assert_memory_equal(one.toks[i], all.toks[i], (size_t)one.ntok[i] * sizeof(uint32_t));
        }
        tiu_io_free(&one);
        tiu_io_free(&all);
    }
}

static void test_context_and_errors(void **state)
{
    fixture *f = *state;
    uint32_t longp[40], near[30], ok[2] = {1, 2}, bad[2] = {1, 299 + 5};
    for (int i = 0; i < 40; i++)
        longp[i] = (uint32_t)(i * 7 % 300);
    memcpy(near, longp, sizeof near);
    llm_infer_request reqs[4] = {
        req_of(0, longp, 40, 5, 0.0f, 0, 1.0f, 1),   /* longer than the context: error */
        req_of(1, near, 30, 10, 0.0f, 0, 1.0f, 1),   /* 30 + 3 tokens fill 32 positions */
        req_of(2, ok, 2, 0, 0.0f, 0, 1.0f, 1),       /* max_tokens 0 */
        req_of(3, bad, 2, 4, 0.0f, 0, 1.0f, 1),      /* id out of range: error */
    };
    tiu_io io;
    run_reqs(f, 2, reqs, 4, &io);
    assert_string_equal(io.reason[0], "error");
    assert_string_equal(io.reason[1], "context");
    assert_int_equal(io.ntok[1], 3);
    assert_string_equal(io.reason[2], "length");
    assert_int_equal(io.ntok[2], 0);
    assert_string_equal(io.reason[3], "error");
    tiu_io_free(&io);
}

static void test_bad_model_files(void **state)
{
    fixture *f = *state;
    llm_status st = {0};
    llm_infer_model *m = NULL;
    char p[600];
    snprintf(p, sizeof p, "%s/missing.llmk", f->dir);
    assert_int_equal(llm_infer_model_open(&m, p, &f->be, 1, &st), LLM_ENOINPUT);
    assert_null(m);
    /* a file without ln_f.bias */
    llm_ckpt_writer *w = NULL;
    assert_int_equal(llm_ckpt_writer_new(&w, &st), 0);
    assert_int_equal(llm_ckpt_set_section(w, "model", llm_model_config_node(&f->cfg), &st), 0);
    for (int i = 0; i < llm_ckpt_count(f->m->ck); i++) {
        const llm_tensor *t = llm_ckpt_tensor(f->m->ck, i);
        if (strcmp(t->name, "ln_f.bias") == 0)
            continue;
        assert_int_equal(llm_ckpt_add(w, t->name, t->dtype, t->ndim, t->shape, t->data, 0, &st), 0);
    }
    snprintf(p, sizeof p, "%s/partial.llmk", f->dir);
    assert_int_equal(llm_ckpt_write(w, p, &st), 0);
    llm_ckpt_writer_free(w);
    assert_int_equal(llm_infer_model_open(&m, p, &f->be, 1, &st), LLM_EDATA);
    assert_non_null(strstr(st.msg, "ln_f.bias"));
    /* garbage */
    snprintf(p, sizeof p, "%s/garbage.llmk", f->dir);
    FILE *g = fopen(p, "wb");
    fputs("this is not a model file at all, not even close", g);
    fclose(g);
    assert_int_equal(llm_infer_model_open(&m, p, &f->be, 1, &st), LLM_EDATA);
    /* forward with bad rows */
    llm_infer_ctx *c = NULL;
    assert_int_equal(llm_infer_ctx_new(&c, f->m, 1, 4, &st), 0);
    llm_infer_row r1 = {300, 0, 0}, r2 = {1, 0, 32}, r3 = {1, 1, 0};
    assert_int_equal(llm_infer_forward(c, &r1, 1, &st), LLM_EUSAGE);
    assert_int_equal(llm_infer_forward(c, &r2, 1, &st), LLM_EUSAGE);
    assert_int_equal(llm_infer_forward(c, &r3, 1, &st), LLM_EUSAGE);
    llm_infer_ctx_free(c);
}

/* A long run's inter-token intervals: memory stays bounded, the mean counts every one,
 * the percentiles are of a uniform sample. */
static void test_stats_tpot_bounded(void **state)
{
    (void)state;
    llm_infer_stats s = {0};
    size_t n = 3 * LLM_INFER_TPOT_KEEP;
    for (size_t i = 0; i < n; i++)
        assert_int_equal(llm_infer_stats_add_tpot(&s, (double)(i % 1000)), 0);
    assert_true(s.n_tpot == LLM_INFER_TPOT_KEEP && s.cap_tpot <= LLM_INFER_TPOT_KEEP);
    assert_true(s.tpot_seen == n);
    assert_true(fabs(s.tpot_sum / (double)n - 499.5) < 1.0);
    double p50 = llm_percentile(s.tpot_ms, s.n_tpot, 50);
    assert_true(fabs(p50 - 499.5) < 10.0);
    llm_infer_stats_free(&s);
}

static void test_refuses_backend_without_kernels(void **state)
{
    (void)state;
    llm_backend be;
    memset(&be, 0, sizeof be);
    be.name = "cuda";
    llm_status st = {0};
    assert_int_equal(llm_infer_backend_ready(&be, &st), LLM_ENODEV);
    assert_non_null(strstr(st.msg, "cuda"));
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_kv_matches_full_batch1),
        cmocka_unit_test(test_kv_matches_full_batched),
        cmocka_unit_test(test_logits_any_rows),
        cmocka_unit_test(test_greedy_is_training_argmax),
        cmocka_unit_test(test_argmax_equals_logits),
        cmocka_unit_test(test_batched_equals_single),
        cmocka_unit_test(test_decode_step_within_invariant_rows),
        cmocka_unit_test(test_context_and_errors),
        cmocka_unit_test(test_bad_model_files),
        cmocka_unit_test(test_refuses_backend_without_kernels),
        cmocka_unit_test(test_stats_tpot_bounded),
        cmocka_unit_test(test_stop_flag_interrupts),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
