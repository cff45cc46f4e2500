/* Unit tests for the result check of the GPU collectives (bench_dist.c, plain C): the
 * inputs llm_bench_coll_fill writes, put through each collective as NCCL defines it (here
 * on the CPU), pass llm_bench_coll_check on every rank; a wrong, misplaced, NaN or missing
 * element fails it.  And the refusals of the cuda path without a GPU. */
#include "tests/unit/testutil.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "common/bench.h"
#include "common/dist.h"

static const char *colls[] = {"allreduce", "allgather", "reducescatter", "broadcast"};

/* out (rank's output) = coll over in[0..world-1] as NCCL computes it, sums in rank order
 * (reverse: the other order) */
static void simulate(const char *coll, size_t n, int world, int rank, float **in, float *out, int reverse)
{
    size_t c = n / (size_t)world, nin, nout;
    llm_bench_coll_counts(coll, n, world, &nin, &nout);
    for (size_t j = 0; j < nout; j++) {
        if (!strcmp(coll, "broadcast")) {
            out[j] = in[0][j];
        } else if (!strcmp(coll, "allgather")) {
            out[j] = in[j / c][j % c];
        } else {
            size_t i = !strcmp(coll, "reducescatter") ? (size_t)rank * c + j : j;
            float s = 0;
            for (int k = 0; k < world; k++)
                s += in[reverse ? world - 1 - k : k][i];
            out[j] = s;
        }
    }
}

static void test_counts_and_values(void **state)
{
    (void)state;
    size_t in, out;
    llm_bench_coll_counts("allgather", 12, 4, &in, &out);
    assert_true(in == 3 && out == 12);
    llm_bench_coll_counts("reducescatter", 12, 4, &in, &out);
    assert_true(in == 12 && out == 3);
    llm_bench_coll_counts("allreduce", 12, 4, &in, &out);
    assert_true(in == 12 && out == 12);
    llm_bench_coll_counts("broadcast", 12, 4, &in, &out);
    assert_true(in == 12 && out == 12);
    for (int r = 0; r < 200; r += 7)
        for (size_t i = 0; i < 1000; i += 13) {
            float v = llm_bench_coll_value(r, i);
            assert_true(v == floorf(v) && v >= -125 && v <= 185);
        }
    /* rank-dependent and position-dependent */
    assert_true(llm_bench_coll_value(0, 5) != llm_bench_coll_value(1, 5));
    assert_true(llm_bench_coll_value(0, 5) != llm_bench_coll_value(0, 6));
}

static void test_roundtrip(void **state)
{
    (void)state;
    static const int worlds[] = {1, 2, 3, 8};
    for (size_t w = 0; w < sizeof worlds / sizeof *worlds; w++) {
        int world = worlds[w];
        size_t n = (size_t)world * 300;   /* > 251: the value pattern wraps */
        float **in = calloc((size_t)world, sizeof *in);
        float *out = malloc(n * sizeof *out);
        assert_non_null(in);
        assert_non_null(out);
        for (size_t k = 0; k < 4; k++) {
            const char *coll = colls[k];
            size_t nin, nout, first;
            llm_bench_coll_counts(coll, n, world, &nin, &nout);
            for (int r = 0; r < world; r++) {
                in[r] = malloc(nin * sizeof **in);
                assert_non_null(in[r]);
                llm_bench_coll_fill(coll, n, r, world, in[r]);
            }
            for (int r = 0; r < world; r++)
                for (int rev = 0; rev < 2; rev++) {
                    simulate(coll, n, world, r, in, out, rev);
                    assert_int_equal(llm_bench_coll_check(coll, n, r, world, out, &first), 0);
                    assert_true(first == (size_t)-1);
                    assert_true(out[nout - 1] == llm_bench_coll_expect(coll, n, r, world, nout - 1));
                }
            /* one wrong element, then a NaN as well */
            int r = world - 1;
            simulate(coll, n, world, r, in, out, 0);
            out[nout / 2] += 1;
            assert_int_equal(llm_bench_coll_check(coll, n, r, world, out, &first), 1);
            assert_true(first == nout / 2);
            out[1] = NAN;
            assert_int_equal(llm_bench_coll_check(coll, n, r, world, out, &first), 2);
            assert_true(first == 1);
            /* an output left as it was (a collective that did nothing): this rank's input,
             * or the NaN poison */
            if (world > 1 && strcmp(coll, "reducescatter") != 0) {
                memset(out, 0, nout * sizeof *out);
                memcpy(out, in[1], (nin < nout ? nin : nout) * sizeof *out);
                assert_true(llm_bench_coll_check(coll, n, 1, world, out, &first) > 0);
            }
            for (size_t j = 0; j < nout; j++)
                out[j] = NAN;
            assert_true(llm_bench_coll_check(coll, n, 0, world, out, &first) == (long long)nout);
            for (int q = 0; q < world; q++)
                free(in[q]);
        }
        /* allgather: two ranks' parts swapped */
        if (world > 1) {
            size_t nin, nout, first, c = n / (size_t)world;
            llm_bench_coll_counts("allgather", n, world, &nin, &nout);
            for (int q = 0; q < world; q++) {
                in[q] = malloc(nin * sizeof **in);
                llm_bench_coll_fill("allgather", n, q, world, in[q]);
            }
            simulate("allgather", n, world, 0, in, out, 0);
            memcpy(out, in[1], c * sizeof *out);
            memcpy(out + c, in[0], c * sizeof *out);
            assert_true(llm_bench_coll_check("allgather", n, 0, world, out, &first) > 0);
            assert_true(first == 0);
            for (int q = 0; q < world; q++)
                free(in[q]);
            /* reducescatter: another rank's shard */
            llm_bench_coll_counts("reducescatter", n, world, &nin, &nout);
            for (int q = 0; q < world; q++) {
                in[q] = malloc(nin * sizeof **in);
                llm_bench_coll_fill("reducescatter", n, q, world, in[q]);
            }
            simulate("reducescatter", n, world, 1, in, out, 0);
            assert_true(llm_bench_coll_check("reducescatter", n, 0, world, out, &first) > 0);
            for (int q = 0; q < world; q++)
                free(in[q]);
        }
        free(in);
        free(out);
    }
}

/* Sums over many ranks stay exact in float, in any order. */
static void test_exact_at_scale(void **state)
{
    (void)state;
    const int world = 4096;
    for (size_t i = 0; i < 600; i += 37) {
        float up = 0, down = 0;
        for (int k = 0; k < world; k++) {
            up += llm_bench_coll_value(k, i);
            down += llm_bench_coll_value(world - 1 - k, i);
        }
        float want = llm_bench_coll_expect("allreduce", 600, 0, world, i);
        assert_true(up == want && down == want);
    }
}

/* No GPU here: the cuda path refuses with what is missing. */
static void test_refusals(void **state)
{
    (void)state;
    llm_status st = {0};
    llm_bench_row rows[2];
    assert_int_equal(llm_bench_collective_cuda("alltoall", NULL, 1024, 0, 1, rows, &st), LLM_EUSAGE);
    llm_status_clear(&st);
    llm_dist *d = NULL;
    llm_dist_opts o = {NULL, 60, 1, NULL, NULL};
    assert_int_equal(llm_dist_init(&d, &o, &st), 0);
    if (llm_dist_world(d) > 1) {   /* started by a launcher: not this test's business */
        llm_dist_free(d);
        skip();
    }
    int rc = llm_dist_nccl_self(d, &st);
    if (rc == 0) {   /* a GPU and NCCL are here */
        assert_string_equal(llm_dist_kind(d), "nccl");
        llm_dist_free(d);
        skip();
    }
    assert_int_equal(rc, LLM_ENODEV);
    assert_string_not_equal(llm_dist_kind(d), "nccl");
    llm_status_clear(&st);
    void *comm = NULL, *stream = NULL;
    assert_int_equal(llm_dist_nccl_handles(d, &comm, &stream), -1);
    /* not an NCCL communicator: EUSAGE with NCCL built in, ENODEV without */
    rc = llm_bench_collective_cuda("allreduce", d, 1024, 0, 1, rows, &st);
    assert_true(rc == LLM_EUSAGE || rc == LLM_ENODEV);
    llm_dist_free(d);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_counts_and_values),
        cmocka_unit_test(test_roundtrip),
        cmocka_unit_test(test_exact_at_scale),
        cmocka_unit_test(test_refusals),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
