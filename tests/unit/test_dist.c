/* Unit tests for common/dist (one process): shards, the single-process communicator,
 * rank discovery from the environment, and the --dist-init id exchange (file and TCP,
 * between forked processes).  Multi-rank MPI runs are in tests/cli/dist.sh. */
#include "tests/unit/testutil.h"

#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "common/dist.h"
#include "common/dist_impl.h"

static void clear_env(void)
{
    const char *v[] = {"RANK", "WORLD_SIZE", "LOCAL_RANK", "SLURM_PROCID", "SLURM_NTASKS",
                       "SLURM_LOCALID", "OMPI_COMM_WORLD_SIZE", "PMIX_RANK", "PMI_SIZE",
                       "PMI_RANK", "MPI_LOCALNRANKS"};
    for (size_t i = 0; i < sizeof v / sizeof *v; i++)
        unsetenv(v[i]);
}

static void test_shards(void **state)
{
    (void)state;
    const size_t ns[] = {0, 1, 2, 7, 124439, 1000003};
    for (size_t k = 0; k < sizeof ns / sizeof *ns; k++)
        for (int w = 1; w <= 9; w++) {
            size_t prev = 0, mn = (size_t)-1, mx = 0;
            for (int r = 0; r < w; r++) {
                size_t lo, hi;
                llm_dist_shard(ns[k], w, r, &lo, &hi);
                assert_int_equal(lo, prev);        /* contiguous, in rank order */
                assert_true(hi >= lo);
                mn = hi - lo < mn ? hi - lo : mn;
                mx = hi - lo > mx ? hi - lo : mx;
                prev = hi;
            }
            assert_int_equal(prev, ns[k]);          /* covers everything */
            assert_true(mx - mn <= 1);              /* balanced */
        }
}

static void test_single(void **state)
{
    (void)state;
    clear_env();
    llm_dist *d;
    llm_status st = {0};
    llm_dist_opts o = {NULL, 5, 0, NULL};
    assert_int_equal(llm_dist_init(&d, &o, &st), 0);
    assert_int_equal(llm_dist_rank(d), 0);
    assert_int_equal(llm_dist_world(d), 1);
    assert_string_equal(llm_dist_kind(d), "single");
    float x[5] = {1, 2, 3, 4, 5}, y[5] = {0};
    double z[2] = {1.5, -2};
    assert_int_equal(llm_dist_allreduce(d, x, 5, LLM_DIST_F32, LLM_DIST_AVG, &st), 0);
    assert_int_equal(llm_dist_allreduce(d, z, 2, LLM_DIST_F64, LLM_DIST_SUM, &st), 0);
    assert_true(x[4] == 5 && z[0] == 1.5);
    assert_int_equal(llm_dist_reduce_scatter(d, x, y, 5, LLM_DIST_F32, LLM_DIST_SUM, &st), 0);
    assert_memory_equal(x, y, sizeof x);            /* one rank: its shard is everything */
    assert_int_equal(llm_dist_allgather(d, x, 5, LLM_DIST_F32, &st), 0);
    assert_int_equal(llm_dist_broadcast(d, x, 5, LLM_DIST_F32, 0, &st), 0);
    assert_int_equal(llm_dist_barrier(d, &st), 0);
    llm_dist_abort(d, 70);                          /* returns for one process */
    llm_dist_free(d);
    /* NULL is a single process too */
    assert_int_equal(llm_dist_world(NULL), 1);
    assert_int_equal(llm_dist_allreduce(NULL, x, 5, LLM_DIST_F32, LLM_DIST_SUM, &st), 0);
}

static void test_env_errors(void **state)
{
    (void)state;
    llm_dist *d = NULL;
    llm_status st = {0};
    llm_dist_opts o = {NULL, 5, 0, NULL};
    clear_env();
    setenv("WORLD_SIZE", "2", 1);
    setenv("RANK", "0", 1);
    /* CPU ranks from the environment without an MPI launcher cannot talk */
    assert_int_equal(llm_dist_init(&d, &o, &st), LLM_EUSAGE);
    assert_non_null(strstr(st.msg, "2 ranks"));
    setenv("RANK", "2", 1);
    llm_status_clear(&st);
    assert_int_equal(llm_dist_init(&d, &o, &st), LLM_EUSAGE);
    assert_non_null(strstr(st.msg, "RANK"));
    setenv("RANK", "x", 1);
    assert_int_equal(llm_dist_init(&d, &o, &st), LLM_EUSAGE);
    clear_env();
    setenv("SLURM_NTASKS", "1", 1);
    setenv("SLURM_PROCID", "0", 1);
    assert_int_equal(llm_dist_init(&d, &o, &st), 0);   /* srun -n 1: one process */
    assert_int_equal(llm_dist_world(d), 1);
    llm_dist_free(d);
    clear_env();
    o.init = "file:/tmp/x";                            /* --dist-init is for GPU ranks */
    assert_int_equal(llm_dist_init(&d, &o, &st), LLM_EUSAGE);
    /* a GPU run with several ranks needs NCCL in the build */
    o.init = NULL;
    o.device = 1;
    setenv("WORLD_SIZE", "2", 1);
    setenv("RANK", "1", 1);
#ifndef LLM_NCCL
    assert_int_equal(llm_dist_init(&d, &o, &st), LLM_EUSAGE);
    assert_non_null(strstr(st.msg, "NCCL"));
#endif
    clear_env();
}

/* rank 0 in this process, ranks 1..world-1 forked; each child checks the blob. */
static void exchange(const char *init, int world)
{
    unsigned char want[128];
    for (int i = 0; i < 128; i++)
        want[i] = (unsigned char)(i * 7 + 3);
    pid_t kids[4];
    for (int r = 1; r < world; r++) {
        kids[r] = fork();
        assert_true(kids[r] >= 0);
        if (kids[r] == 0) {
            unsigned char got[128] = {0};
            llm_status st = {0};
            int rc = llm_dist__exchange(init, r, world, got, sizeof got, 10, &st);
            _exit(rc == 0 && !memcmp(got, want, sizeof got) ? 0 : 1);
        }
    }
    usleep(100 * 1000);  /* the others start waiting first: they must poll / retry */
    llm_status st = {0};
    assert_int_equal(llm_dist__exchange(init, 0, world, want, sizeof want, 10, &st), 0);
    for (int r = 1; r < world; r++) {
        int ws = 0;
        assert_int_equal(waitpid(kids[r], &ws, 0), kids[r]);
        assert_true(WIFEXITED(ws) && WEXITSTATUS(ws) == 0);
    }
}

static void test_exchange(void **state)
{
    (void)state;
    char *dir = tu_tmpdir(), spec[512];
    snprintf(spec, sizeof spec, "file:%s/nccl-id", dir);
    exchange(spec, 3);
    int port = 20000 + (int)(getpid() % 20000);
    snprintf(spec, sizeof spec, "tcp://127.0.0.1:%d", port);
    exchange(spec, 3);
    llm_status st = {0};
    unsigned char b[4] = {0};
    /* nobody serves: a bounded wait, then an error naming the address */
    snprintf(spec, sizeof spec, "tcp://127.0.0.1:%d", port + 1);
    assert_int_equal(llm_dist__exchange(spec, 1, 2, b, 4, 0.3, &st), LLM_EIO);
    assert_int_equal(llm_dist__exchange("udp://x", 1, 2, b, 4, 0.3, &st), LLM_EUSAGE);
    assert_int_equal(llm_dist__exchange("tcp://nohostport", 1, 2, b, 4, 0.3, &st), LLM_EUSAGE);
    tu_rmdir(dir);
    free(dir);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_shards),
        cmocka_unit_test(test_single),
        cmocka_unit_test(test_env_errors),
        cmocka_unit_test(test_exchange),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
