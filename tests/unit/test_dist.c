/* Unit tests for common/dist (one process): shards, the single-process communicator,
 * rank discovery from the environment, and the --dist-init id exchange (file and TCP,
 * between forked processes); the overlapped (bucketed) ZeRO-0 step of
 * common/train_dist.c on one rank.  Under mpirun with several ranks (tests/cli/dist.sh
 * runs it on 2 and 3): the in-place reduce-scatter, the non-blocking all-reduce, and the
 * bucketed step against the unbucketed one. */
#include "tests/unit/testutil.h"

#include <math.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <sys/wait.h>
#include <unistd.h>

#include "common/data.h"
#include "common/dist.h"
#include "common/dist_impl.h"
#include "common/model.h"
#include "common/train_dist.h"
#include "kernels/backend.h"

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
    llm_dist_opts o = {NULL, 5, 0, NULL, NULL};
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
    assert_int_equal(llm_dist_reduce_scatter_inplace(d, y, 5, LLM_DIST_F32, LLM_DIST_SUM, &st), 0);
    assert_memory_equal(x, y, sizeof x);            /* in place: untouched */
    assert_int_equal(llm_dist_allgather(d, x, 5, LLM_DIST_F32, &st), 0);
    assert_int_equal(llm_dist_broadcast(d, x, 5, LLM_DIST_F32, 0, &st), 0);
    assert_int_equal(llm_dist_barrier(d, &st), 0);
    llm_dist_req *q = (llm_dist_req *)1;            /* one rank: nothing to wait for */
    int done = 0;
    assert_int_equal(llm_dist_iallreduce(d, x, 5, LLM_DIST_F32, LLM_DIST_AVG, &q, &st), 0);
    assert_null(q);
    assert_int_equal(llm_dist_test(d, q, &done, &st), 0);
    assert_int_equal(done, 1);
    assert_int_equal(llm_dist_wait(d, q, &st), 0);
    assert_true(x[4] == 5);
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
    llm_dist_opts o = {NULL, 5, 0, NULL, NULL};
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
            int rc = llm_dist__exchange(init, r, world, got, sizeof got, 10, NULL, &st);
            _exit(rc == 0 && !memcmp(got, want, sizeof got) ? 0 : 1);
        }
    }
    usleep(100 * 1000);  /* the others start waiting first: they must poll / retry */
    llm_status st = {0};
    assert_int_equal(llm_dist__exchange(init, 0, world, want, sizeof want, 10, NULL, &st), 0);
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
    assert_int_equal(llm_dist__exchange(spec, 1, 2, b, 4, 0.3, NULL, &st), LLM_EIO);
    assert_int_equal(llm_dist__exchange("udp://x", 1, 2, b, 4, 0.3, NULL, &st), LLM_EUSAGE);
    assert_int_equal(llm_dist__exchange("tcp://nohostport", 1, 2, b, 4, 0.3, NULL, &st), LLM_EUSAGE);
    /* file: in a directory that does not exist yet (a job's first run writes the id into
     * its output directory): rank 0 makes it */
    snprintf(spec, sizeof spec, "file:%s/runs/job/.nccl-id", dir);
    exchange(spec, 2);
    char sub[600];
    snprintf(sub, sizeof sub, "%s/runs/job/.nccl-id", dir);
    assert_int_equal(unlink(sub), 0);
    snprintf(sub, sizeof sub, "%s/runs/job", dir);
    assert_int_equal(rmdir(sub), 0);
    snprintf(sub, sizeof sub, "%s/runs", dir);
    assert_int_equal(rmdir(sub), 0);
    tu_rmdir(dir);
    free(dir);
}

/* connect to 127.0.0.1:port once: the socket or -1 */
static int dial_once(int port)
{
    struct sockaddr_in a = {0};
    a.sin_family = AF_INET;
    a.sin_port = htons((unsigned short)port);
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    int s = socket(AF_INET, SOCK_STREAM, 0);
    if (s >= 0 && connect(s, (struct sockaddr *)&a, sizeof a) == 0)
        return s;
    if (s >= 0)
        close(s);
    return -1;
}

/* connect to 127.0.0.1:port (retrying while rank 0 starts to listen); the socket or -1 */
static int dial(int port)
{
    struct sockaddr_in a = {0};
    a.sin_family = AF_INET;
    a.sin_port = htons((unsigned short)port);
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    for (int i = 0; i < 200; i++) {
        int s = socket(AF_INET, SOCK_STREAM, 0);
        if (s >= 0 && connect(s, (struct sockaddr *)&a, sizeof a) == 0)
            return s;
        if (s >= 0)
            close(s);
        usleep(10 * 1000);
    }
    return -1;
}

/* Rank 0 over TCP hands the id only to ranks that say who they are, each once, and gives
 * up after the timeout naming the ranks that never came. */
static void test_exchange_tcp_strangers(void **state)
{
    (void)state;
    int port = 20000 + (int)((getpid() + 7919) % 20000);
    char spec[64];
    snprintf(spec, sizeof spec, "tcp://127.0.0.1:%d", port);
    pid_t kid = fork();
    assert_true(kid >= 0);
    if (kid == 0) {
        /* a stranger that stays silent, one that sends garbage, one claiming rank 7 of 3,
         * then rank 1 for real; rank 2 never comes */
        int ok = 1;
        int quiet = dial(port);
        int junk = dial(port);
        ok &= quiet >= 0 && junk >= 0;
        if (junk >= 0) {
            ok &= write(junk, "GET / HT", 8) == 8;
            char c;
            ok &= read(junk, &c, 1) <= 0;   /* closed without the id */
            close(junk);
        }
        int big = dial(port);
        ok &= big >= 0;
        if (big >= 0) {
            unsigned char h[8] = {'L', 'L', 'M', 'K', 7, 0, 0, 0};
            char c;
            ok &= write(big, h, 8) == 8 && read(big, &c, 1) <= 0;
            close(big);
        }
        unsigned char got[16] = {0};
        llm_status st = {0};
        ok &= llm_dist__exchange(spec, 1, 3, got, sizeof got, 10, NULL, &st) == 0 && got[5] == 5;
        if (quiet >= 0)
            close(quiet);
        _exit(ok ? 0 : 1);
    }
    unsigned char blob[16];
    for (int i = 0; i < 16; i++)
        blob[i] = (unsigned char)i;
    llm_status st = {0};
    assert_int_equal(llm_dist__exchange(spec, 0, 3, blob, sizeof blob, 8, NULL, &st), LLM_EIO);
    assert_non_null(strstr(st.msg, "2 of 3 ranks"));
    assert_non_null(strstr(st.msg, "missing: 2"));
    int ws = 0;
    assert_int_equal(waitpid(kid, &ws, 0), kid);
    assert_true(WIFEXITED(ws) && WEXITSTATUS(ws) == 0);
}

/* Rank 0's message lists the ranks that never came, ending in "..." only when it leaves
 * some out (port 0: any free one) */
static void test_exchange_missing(void **state)
{
    (void)state;
    llm_status st = {0};
    unsigned char b[4] = {0};
    assert_int_equal(llm_dist__exchange("tcp://127.0.0.1:0", 0, 10, b, 4, 0.3, NULL, &st), LLM_EIO);
    assert_non_null(strstr(st.msg, "(missing: 1, 2, 3, 4, 5, 6, 7, 8, 9)"));
    assert_int_equal(llm_dist__exchange("tcp://127.0.0.1:0", 0, 100, b, 4, 0.3, NULL, &st), LLM_EIO);
    assert_non_null(strstr(st.msg, "(missing: 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11"));
    assert_non_null(strstr(st.msg, ", ...)"));
    assert_null(strstr(st.msg, "99"));
}

/* A stop request during each wait of the exchange: set by a SIGALRM handler (installed
 * with SA_RESTART, as llm-train's are) 0.2 s in; the wait ends with LLM_EINTR naming what
 * it waited for, long before its 60 s timeout. */
static volatile sig_atomic_t stop_flag;

static void on_alarm(int sig)
{
    stop_flag = sig;
}

static int stopped_exchange(const char *spec, int rank, int world, llm_status *st)
{
    struct sigaction sa, old;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_alarm;
    sigemptyset(&sa.sa_mask);
    sa.sa_flags = SA_RESTART;
    sigaction(SIGALRM, &sa, &old);
    stop_flag = 0;
    struct itimerval it = {{0, 0}, {0, 200 * 1000}};
    setitimer(ITIMER_REAL, &it, NULL);
    unsigned char b[16] = {0};
    double t0 = llm_now_s();
    int rc = llm_dist__exchange(spec, rank, world, b, sizeof b, 60, &stop_flag, st);
    double dt = llm_now_s() - t0;
    sigaction(SIGALRM, &old, NULL);
    assert_true(stop_flag);
    assert_true(dt < 10);
    return rc;
}

static void test_exchange_stop(void **state)
{
    (void)state;
    char *dir = tu_tmpdir(), spec[512];
    llm_status st = {0};
    /* another rank waiting for the file rank 0 never writes */
    snprintf(spec, sizeof spec, "file:%s/nccl-id", dir);
    assert_int_equal(stopped_exchange(spec, 1, 2, &st), LLM_EINTR);
    assert_non_null(strstr(st.msg, "waiting for rank 0's id in"));
    assert_non_null(strstr(st.msg, "nccl-id"));
    /* rank 0 serving ranks that never come: the listening port is closed again */
    int port = 20000 + (int)((getpid() + 104729) % 20000);
    snprintf(spec, sizeof spec, "tcp://127.0.0.1:%d", port);
    assert_int_equal(stopped_exchange(spec, 0, 3, &st), LLM_EINTR);
    assert_non_null(strstr(st.msg, "waiting for ranks 1, 2 at port"));
    int probe = dial_once(port);
    assert_true(probe < 0);
    /* another rank while nobody listens */
    assert_int_equal(stopped_exchange(spec, 1, 2, &st), LLM_EINTR);
    assert_non_null(strstr(st.msg, "waiting for rank 0 at tcp://127.0.0.1:"));
    /* another rank connected to a listener that never answers (its backlog took the
     * connection): the read of the id is a wait too */
    int l = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in a = {0};
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    socklen_t alen = sizeof a;
    assert_true(l >= 0 && !bind(l, (struct sockaddr *)&a, sizeof a) && !listen(l, 4) &&
                !getsockname(l, (struct sockaddr *)&a, &alen));
    snprintf(spec, sizeof spec, "tcp://127.0.0.1:%d", ntohs(a.sin_port));
    assert_int_equal(stopped_exchange(spec, 1, 2, &st), LLM_EINTR);
    assert_non_null(strstr(st.msg, "waiting for rank 0 at tcp://127.0.0.1:"));
    close(l);
    tu_rmdir(dir);
    free(dir);
}

/* Under an MPI launcher with several ranks (tests/cli/dist.sh runs this program on 3):
 * the in-place reduce-scatter against the plain sum, max and mean, for shards of unequal
 * length, in f32 and f64, and a size whose shards span two pieces of the MPI ring. */
static double val(int rank, size_t i)
{
    return (double)((i * 7 + (size_t)rank * 13) % 101) - 50.0;   /* sums exact in float */
}

/* The MPI communicator of the multi-rank group (MPI can be initialised once only). */
static llm_dist *mpi_d;

static int mpi_setup(void **state)
{
    (void)state;
    llm_status st = {0};
    llm_dist_opts o = {NULL, 60, 0, NULL, NULL};
    if (llm_dist_init(&mpi_d, &o, &st) || strcmp(llm_dist_kind(mpi_d), "mpi"))
        return -1;
    return 0;
}

static int mpi_teardown(void **state)
{
    (void)state;
    llm_dist_free(mpi_d);
    return 0;
}

static void test_mpi_reduce_scatter(void **state)
{
    (void)state;
    llm_dist *d = mpi_d;
    llm_status st = {0};
    int W = llm_dist_world(d), r = llm_dist_rank(d);
    const size_t ns[] = {1, 2, 7, 100, ((size_t)3 << 20) + 7};
    const llm_dist_op ops[] = {LLM_DIST_SUM, LLM_DIST_MAX, LLM_DIST_AVG};
    for (size_t k = 0; k < sizeof ns / sizeof *ns; k++)
        for (int t = 0; t < 2; t++)
            for (size_t q = 0; q < 3; q++) {
                size_t n = ns[k], lo, hi;
                if (t && n > 1000)
                    continue;   /* f64 takes the same path: keep it small */
                void *buf = malloc(n * (t ? 8 : 4));
                assert_non_null(buf);
                for (size_t i = 0; i < n; i++) {
                    if (t)
                        ((double *)buf)[i] = val(r, i);
                    else
                        ((float *)buf)[i] = (float)val(r, i);
                }
                assert_int_equal(llm_dist_reduce_scatter_inplace(d, buf, n, t ? LLM_DIST_F64
                                 : LLM_DIST_F32, ops[q], &st), 0);
                llm_dist_shard(n, W, r, &lo, &hi);
                for (size_t i = lo; i < hi; i++) {
                    double want = ops[q] == LLM_DIST_MAX ? -1e30 : 0;
                    for (int j = 0; j < W; j++)
                        want = ops[q] == LLM_DIST_MAX ? (val(j, i) > want ? val(j, i) : want)
                                                      : want + val(j, i);
                    if (ops[q] == LLM_DIST_AVG)
                        want /= W;
                    double got = t ? ((double *)buf)[i] : ((float *)buf)[i];
                    if (fabs(got - want) > 1e-6 * (1 + fabs(want)))
                        fail_msg("rank %d: n %zu op %d type %d: element %zu is %g, want %g", r, n,
                                 (int)ops[q], t, i, got, want);
                }
                free(buf);
            }
}

/* Several non-blocking all-reduces in flight at once (sizes from 1 element to more than
 * the per-call piece of the staging tests), progressed by llm_dist_test, then waited for
 * in order: sums exact, AVG divided. */
static void test_mpi_iallreduce(void **state)
{
    (void)state;
    llm_dist *d = mpi_d;
    llm_status st = {0};
    int W = llm_dist_world(d), r = llm_dist_rank(d);
    const size_t ns[] = {1, 7, 1000, ((size_t)1 << 20) + 3};
    enum { K = sizeof ns / sizeof *ns };
    float *b[K];
    double avg[5];
    llm_dist_req *q[K + 1];
    for (int k = 0; k < K; k++) {
        assert_non_null(b[k] = malloc(ns[k] * sizeof(float)));
        for (size_t i = 0; i < ns[k]; i++)
            b[k][i] = (float)val(r, i + (size_t)k);
        assert_int_equal(llm_dist_iallreduce(d, b[k], ns[k], LLM_DIST_F32, LLM_DIST_SUM, &q[k],
                                             &st), 0);
        assert_non_null(q[k]);
    }
    for (int i = 0; i < 5; i++)
        avg[i] = val(r, (size_t)i);
    assert_int_equal(llm_dist_iallreduce(d, avg, 5, LLM_DIST_F64, LLM_DIST_AVG, &q[K], &st), 0);
    /* progress: test until the first completes (at most 30 s: a peer may start late on
     * an oversubscribed machine) */
    int done = 0;
    for (double t0 = llm_now_s(); !done && llm_now_s() - t0 < 30;)
        assert_int_equal(llm_dist_test(d, q[0], &done, &st), 0);
    assert_int_equal(done, 1);
    for (int k = 0; k <= K; k++)
        assert_int_equal(llm_dist_wait(d, q[k], &st), 0);
    for (int k = 0; k < K; k++) {
        for (size_t i = 0; i < ns[k]; i++) {
            double want = 0;
            for (int j = 0; j < W; j++)
                want += val(j, i + (size_t)k);
            if (b[k][i] != (float)want)
                fail_msg("rank %d: n %zu element %zu is %g, want %g", r, ns[k], i, b[k][i], want);
        }
        free(b[k]);
    }
    for (int i = 0; i < 5; i++) {
        double want = 0;
        for (int j = 0; j < W; j++)
            want += val(j, (size_t)i);
        assert_true(fabs(avg[i] - want / W) < 1e-12);
    }
}

/* ---- the overlapped ZeRO-0 step (common/train_dist.c) ---- */

/* `steps` steps of a 3-layer model with accumulation `accum` and buckets of bucket_mb
 * (0: one all-reduce after the backward) on communicator d; the parameters afterwards
 * into params (malloc'd), and the last step's overlap statistics. */
static void overlap_run(llm_dist *d, const char *tokens, double bucket_mb, int accum, int steps,
                        float **params, int *ranges, int *buckets)
{
    llm_status st = {0};
    llm_backend be;
    char err[256];
    assert_int_equal(llm_backend_init(&be, "cpu", 1, err, sizeof err), 0);
    llm_model_config cfg = {"gpt2", 3, 2, 16, 64, 0, 16};
    llm_model *m;
    assert_int_equal(llm_model_new(&m, &cfg, &be, &st), 0);
    llm_model_init_gpt2(m, 7);
    int B = 2, T = 16;
    llm_data_opts o = {tokens, B, T, 64, 1, 1, 0};
    llm_data *data;
    assert_int_equal(llm_data_open(&data, &o, &st), 0);
    llm_train_dist *td;
    assert_int_equal(llm_train_dist_new(&td, d, m, &be, 0, &st), 0);
    llm_train_dist_set_bucket_mb(td, bucket_mb);
    assert_int_equal(llm_train_dist_set_batch(td, B, T, accum, &st), 0);
    llm_adamw_config hp = {1e-3f, 0.9f, 0.95f, 1e-8f, 0.1f, 1.0f};
    for (int t = 1; t <= steps; t++) {
        double loss, gn;
        int sk, together;
        if (llm_train_dist_agree_read(td, llm_train_dist_read(td, data, &st), &together, &st) ||
            llm_train_dist_step(td, &hp, t, 0, &loss, &gn, &sk, &st))
            fail_msg("step %d: %s", t, st.msg);
        assert_int_equal(sk, 0);
    }
    llm_train_dist_overlap_stats(td, ranges, buckets);
    size_t n = llm_model_num_params(llm_model_cfg(m));
    assert_non_null(*params = malloc(n * sizeof(float)));
    memcpy(*params, llm_model_params(m), n * sizeof(float));
    llm_train_dist_free(td);
    llm_data_free(data);
    llm_model_free(m);
    llm_backend_free(&be);
}

/* A token file of 4000 ids below 64 (llm.c format, uint16), the same on every rank. */
static char *token_file(char **dir)
{
    *dir = tu_tmpdir();
    char *path = malloc(strlen(*dir) + 16);
    assert_non_null(path);
    sprintf(path, "%s/tok.bin", *dir);
    FILE *f = fopen(path, "wb");
    assert_non_null(f);
    int32_t h[256] = {20240520, 1, 4000};
    fwrite(h, sizeof h, 1, f);
    for (int i = 0; i < 4000; i++) {
        uint16_t v = (uint16_t)((i * 37 + i / 7) % 64);
        fwrite(&v, 2, 1, f);
    }
    fclose(f);
    return path;
}

/* Bucketed == unbucketed (parameters after 2 steps of accumulation 2, 1e-6 of their
 * scale), for buckets of one layer each and of several layers; the model reports L + 2
 * ranges per step (the last micro-batch's backward only); bucket 0 reports none. */
static void overlap_check(llm_dist *d)
{
    char *dir, *tok = token_file(&dir);
    float *ref, *p;
    int ranges, buckets;
    overlap_run(d, tok, 0, 2, 2, &ref, &ranges, &buckets);
    assert_int_equal(ranges, 0);
    assert_int_equal(buckets, 0);
    size_t n = llm_model_num_params(&(llm_model_config){"gpt2", 3, 2, 16, 64, 128, 16});
    /* 0.01 MiB = 2621 floats < a layer (3280): ln_f joins layer 2, then one bucket per
     * layer and the embeddings; 0.03 MiB = 7864 floats: ln_f + 3 layers, embeddings */
    const double mbs[] = {0.01, 0.03, 1e-9};
    const int want[] = {4, 2, 5};
    for (int k = 0; k < 3; k++) {
        overlap_run(d, tok, mbs[k], 2, 2, &p, &ranges, &buckets);
        double e = tu_scaled_err(p, ref, n);
        printf("# %d rank(s), buckets of %g MiB: %d ranges, %d buckets, parameters differ by "
               "%.2g of their scale\n", llm_dist_world(d), mbs[k], ranges, buckets, e);
        assert_int_equal(ranges, 3 + 2);
        assert_int_equal(buckets, want[k]);
        assert_true(e <= 1e-6);
        if (llm_dist_world(d) == 1)
            assert_memory_equal(p, ref, n * sizeof(float));   /* nothing to reduce */
        free(p);
    }
    free(ref);
    free(tok);
    tu_rmdir(dir);
    free(dir);
}

static void test_overlap_single(void **state)
{
    (void)state;
    clear_env();
    llm_dist *d;
    llm_status st = {0};
    llm_dist_opts o = {NULL, 5, 0, NULL, NULL};
    assert_int_equal(llm_dist_init(&d, &o, &st), 0);
    overlap_check(d);
    llm_dist_free(d);
}

static void test_mpi_overlap(void **state)
{
    (void)state;
    overlap_check(mpi_d);
}

int main(void)
{
    const char *w = getenv("OMPI_COMM_WORLD_SIZE");
    if (w && atoi(w) > 1) {
        const struct CMUnitTest mpi[] = {cmocka_unit_test(test_mpi_reduce_scatter),
                                         cmocka_unit_test(test_mpi_iallreduce),
                                         cmocka_unit_test(test_mpi_overlap)};
        return cmocka_run_group_tests(mpi, mpi_setup, mpi_teardown);
    }
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_shards),
        cmocka_unit_test(test_single),
        cmocka_unit_test(test_env_errors),
        cmocka_unit_test(test_exchange),
        cmocka_unit_test(test_exchange_tcp_strangers),
        cmocka_unit_test(test_exchange_missing),
        cmocka_unit_test(test_exchange_stop),
        cmocka_unit_test(test_overlap_single),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
