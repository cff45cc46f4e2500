/* Unit tests for the benchmark schema, writers, timing and tiny benchmark runs
 * (schema and arithmetic only; never speed). */
#include "tests/unit/testutil.h"

#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/bench.h"
#include "kernels/cpu/quant_kern.h"
#include "common/bench_model.h"

static void test_parse(void **state)
{
    (void)state;
    llm_bench_format f;
    assert_int_equal(llm_bench_format_parse("jsonl", &f), 0);
    assert_int_equal(f, LLM_BENCH_JSONL);
    assert_int_equal(llm_bench_format_parse("csv", &f), 0);
    assert_int_equal(f, LLM_BENCH_CSV);
    assert_int_equal(llm_bench_format_parse("xml", &f), -1);
    assert_int_equal(llm_bench_format_parse(NULL, &f), -1);
    size_t s;
    assert_int_equal(llm_bench_parse_size("64M", &s), 0);
    assert_true(s == 64u << 20);
    assert_int_equal(llm_bench_parse_size("4KiB", &s), 0);
    assert_true(s == 4096);
    assert_int_equal(llm_bench_parse_size("123", &s), 0);
    assert_true(s == 123);
    assert_int_equal(llm_bench_parse_size("1G", &s), 0);
    assert_true(s == 1u << 30);
    assert_int_equal(llm_bench_parse_size("-1", &s), -1);
    assert_int_equal(llm_bench_parse_size("12X", &s), -1);
    assert_int_equal(llm_bench_parse_size("", &s), -1);
    assert_int_equal(llm_bench_parse_size("2048G", &s), -1);
    assert_int_equal(llm_bench_parse_size("99999999999999999999999", &s), -1);
}

static void test_times_and_kv(void **state)
{
    (void)state;
    llm_bench_row r;
    llm_bench_row_init(&r, "gemm", "sgemm");
    assert_string_equal(r.device, "cpu");
    assert_true(r.peak_pct < 0);
    assert_true(strlen(r.date) == 20 && r.date[19] == 'Z');
    assert_true(r.host[0] && r.commit[0]);
    /* the kernels' instruction set, then OpenBLAS's kernel set */
    char isa[16];
    snprintf(isa, sizeof isa, "%s ", llm_qk_isa_name(llm_qk_isa_best()));
    assert_true(strncmp(r.cpu, isa, strlen(isa)) == 0);
    assert_non_null(strstr(r.cpu, " openblas="));
    double t[5] = {0.5, 0.1, 0.3, 0.2, 0.4};
    llm_bench_row_times(&r, t, 5, 3e9, 1e9, "GFLOP/s");
    assert_true(r.t_min == 0.1 && r.t_med == 0.3 && r.t_max == 0.5);
    assert_true(fabs(r.rate - 10.0) < 1e-12);
    double t2[4] = {4, 1, 3, 2};
    llm_bench_row_times(&r, t2, 4, 5, 1, "x/s");
    assert_true(r.t_med == 2.5 && r.rate == 2.0);
    for (int i = 0; i < LLM_BENCH_MAX_KV + 3; i++) {
        char k[16];
        snprintf(k, sizeof k, "k%d", i);
        llm_bench_row_kv(&r, k, i);
    }
    assert_int_equal(r.nkv, LLM_BENCH_MAX_KV);
    llm_bench_row_kv(&r, "k1", 42);
    assert_true(llm_bench_row_get(&r, "k1", -1) == 42);
    assert_true(llm_bench_row_get(&r, "nope", -1) == -1);
}

static int ncalls;
static void count_fn(void *ctx) { (void)ctx; ncalls++; }

static void test_time_loop(void **state)
{
    (void)state;
    double t[3];
    ncalls = 0;
    llm_bench_time(count_fn, NULL, 2, 3, t);
    assert_int_equal(ncalls, 5);
    for (int i = 0; i < 3; i++) assert_true(t[i] >= 0 && t[i] < 1);
}

static char *write_rows(llm_bench_format fmt, const llm_bench_row *rows, int n)
{
    char *buf = NULL;
    size_t len = 0;
    FILE *m = open_memstream(&buf, &len);
    assert_int_equal(llm_bench_write(m, fmt, rows, n), 0);
    fclose(m);
    return buf;
}

static const char *fields[] = {"benchmark", "op", "device", "dtype", "shape", "threads",
                               "ranks", "warmup", "reps", "time_min_s", "time_median_s",
                               "time_max_s", "work", "rate", "unit", "peak_pct", "note",
                               "commit", "host", "cpu", "date"};

static void check_schema(json_t *row)
{
    for (size_t i = 0; i < sizeof fields / sizeof fields[0]; i++)
        if (!json_object_get(row, fields[i])) fail_msg("row lacks '%s'", fields[i]);
}

static void test_writers(void **state)
{
    (void)state;
    llm_bench_row rows[2];
    llm_bench_row_init(&rows[0], "mem", "copy");
    double t[3] = {1, 2, 3};
    llm_bench_row_times(&rows[0], t, 3, 4e9, 1e9, "GB/s");
    snprintf(rows[0].shape, sizeof rows[0].shape, "bytes=1,\"odd\"");
    llm_bench_row_init(&rows[1], "allreduce", "out-of-place");
    llm_bench_row_times(&rows[1], t, 3, 8, 1e9, "GB/s");
    llm_bench_row_kv(&rows[1], "busbw", 0);
    rows[1].peak_pct = 50;

    char *s = write_rows(LLM_BENCH_JSON, rows, 2);
    json_error_t err;
    json_t *doc = json_loads(s, 0, &err);
    assert_non_null(doc);
    json_t *res = json_object_get(doc, "results");
    assert_int_equal(json_array_size(res), 2);
    for (int i = 0; i < 2; i++) check_schema(json_array_get(res, i));
    assert_true(json_is_null(json_object_get(json_array_get(res, 0), "peak_pct")));
    assert_true(json_number_value(json_object_get(json_array_get(res, 1), "peak_pct")) == 50);
    assert_true(json_is_number(json_object_get(json_array_get(res, 1), "busbw")));
    assert_string_equal(json_string_value(json_object_get(json_array_get(res, 0), "shape")),
                        "bytes=1,\"odd\"");
    json_decref(doc);
    free(s);

    s = write_rows(LLM_BENCH_JSONL, rows, 2);
    int lines = 0;
    for (char *save = NULL, *l = strtok_r(s, "\n", &save); l; l = strtok_r(NULL, "\n", &save)) {
        json_t *row = json_loads(l, 0, &err);
        assert_non_null(row);
        check_schema(row);
        json_decref(row);
        lines++;
    }
    assert_int_equal(lines, 2);
    free(s);

    s = write_rows(LLM_BENCH_CSV, rows, 2);
    /* header + 2 rows; the header has the union of extra keys; quoting keeps 1 line/row */
    int nl = 0;
    for (char *c = s; *c; c++) nl += *c == '\n';
    assert_int_equal(nl, 3);
    assert_non_null(strstr(s, ",busbw,note,"));
    assert_non_null(strstr(s, "\"bytes=1,\"\"odd\"\"\""));
    free(s);

    s = write_rows(LLM_BENCH_TABLE, rows, 2);
    assert_non_null(strstr(s, "allreduce"));
    assert_non_null(strstr(s, "# commit "));
    assert_null(strstr(s, "precision"));
    free(s);

    /* a row with a precision (train): a "precision" member after dtype, a CSV column when
     * any row has one, a table field; rows without one write no such field */
    snprintf(rows[1].precision, sizeof rows[1].precision, "bf16");
    s = write_rows(LLM_BENCH_JSON, rows, 2);
    doc = json_loads(s, 0, &err);
    assert_non_null(doc);
    res = json_object_get(doc, "results");
    assert_null(json_object_get(json_array_get(res, 0), "precision"));
    assert_string_equal(json_string_value(json_object_get(json_array_get(res, 1), "precision")), "bf16");
    assert_non_null(strstr(s, "\"dtype\": \"f32\",\n      \"precision\": \"bf16\""));
    json_decref(doc);
    free(s);
    s = write_rows(LLM_BENCH_CSV, rows, 2);
    assert_non_null(strstr(s, "benchmark,op,device,dtype,precision,shape,"));
    assert_non_null(strstr(s, ",f32,bf16,"));   /* the allreduce row */
    assert_non_null(strstr(s, ",f32,,\"bytes=1"));  /* the mem row: empty */
    free(s);
    s = write_rows(LLM_BENCH_TABLE, rows, 2);
    assert_non_null(strstr(s, " precision=bf16\n"));
    free(s);
}

static void test_tiny_runs(void **state)
{
    (void)state;
    llm_status st = {0};
    llm_bench_row r;
    llm_bench_gemm_opts g = {8, 16, 4, "f32", 1, 1, 3, 100.0, 1};
    assert_int_equal(llm_bench_gemm(&g, &r, &st), 0);
    assert_string_equal(r.bench, "gemm");
    assert_string_equal(r.dtype, "f32");
    assert_string_equal(r.shape, "M=8,N=16,K=4");
    assert_true(r.work == 2.0 * 8 * 16 * 4);
    assert_true(r.rate > 0 && r.peak_pct > 0);
    assert_int_equal(r.reps, 3);
    g.dtype = "f64";
    assert_int_equal(llm_bench_gemm(&g, &r, &st), 0);
    assert_string_equal(r.op, "dgemm");
    g.dtype = "int4";
    assert_int_equal(llm_bench_gemm(&g, &r, &st), LLM_EUSAGE);
    g.dtype = "f32";
    g.M = 0;
    assert_int_equal(llm_bench_gemm(&g, &r, &st), LLM_EUSAGE);

    assert_int_equal(llm_bench_mem("triad", 4096, 1, 1, 2, &r, &st), 0);
    assert_true(r.work == 3.0 * 4096);
    assert_string_equal(r.unit, "GB/s");
    assert_int_equal(llm_bench_mem("scale", 4096, 1, 1, 2, &r, &st), LLM_EUSAGE);

    assert_int_equal(llm_bench_collective("allreduce", 1024, 1, 3, &r, &st), 0);
    assert_int_equal(r.ranks, 1);
    assert_true(llm_bench_row_get(&r, "size", -1) == 1024);
    assert_true(llm_bench_row_get(&r, "busbw", -1) == 0);    /* 2(n-1)/n at n = 1 */
    assert_true(llm_bench_row_get(&r, "algbw", -1) == r.rate);
    assert_non_null(strstr(r.note, "1 rank"));
    assert_int_equal(llm_bench_collective("broadcast", 1024, 1, 3, &r, &st), 0);
    assert_true(llm_bench_row_get(&r, "busbw", -1) == r.rate);
    assert_int_equal(llm_bench_collective("alltoall", 1024, 1, 3, &r, &st), LLM_EUSAGE);
}

static void test_busbw_factors(void **state)
{
    (void)state;
    /* nccl-tests: allreduce 2(n-1)/n, allgather/reducescatter (n-1)/n, broadcast 1 */
    assert_true(llm_bench_busbw_factor("allreduce", 8) == 2.0 * 7 / 8);
    assert_true(llm_bench_busbw_factor("allgather", 4) == 0.75);
    assert_true(llm_bench_busbw_factor("reducescatter", 2) == 0.5);
    assert_true(llm_bench_busbw_factor("broadcast", 16) == 1.0);
    assert_true(llm_bench_busbw_factor("allreduce", 1) == 0);
    assert_true(llm_bench_busbw_factor("x", 2) < 0);
}

static void test_peak(void **state)
{
    (void)state;
    double p = llm_bench_cpu_peak_gflops(1);
    assert_true(p > 0 && isfinite(p));
}

/* The GPU peak table against the datasheet numbers it documents (no GPU needed). */
static void test_gpu_peaks(void **state)
{
    (void)state;
#define NEAR(x, want) assert_true(fabs((x) - (want)) <= 1e-3 * (want))
    /* H100 SXM / H200: 132 SMs, 1980 MHz; tensor dtypes at the 1830 MHz tensor clock */
    NEAR(llm_bench_gpu_peak_gflops(9, 0, 132, 1980, "f32"), 66908.2);
    NEAR(llm_bench_gpu_peak_gflops(9, 0, 132, 1980, "tf32"), 494714.9);
    NEAR(llm_bench_gpu_peak_gflops(9, 0, 132, 1980, "bf16"), 989429.8);
    NEAR(llm_bench_gpu_peak_gflops(9, 0, 132, 1980, "f16"), 989429.8);
    /* below the cap the reported clock counts */
    NEAR(llm_bench_gpu_peak_gflops(9, 0, 132, 1500, "bf16"), 132 * 4096 * 1.5e3 * 1e-3);
    /* A100 108 SMs, 1410 MHz: 19.5, 156, 312 TFLOP/s */
    NEAR(llm_bench_gpu_peak_gflops(8, 0, 108, 1410, "f32"), 19491.8);
    NEAR(llm_bench_gpu_peak_gflops(8, 0, 108, 1410, "tf32"), 155934.7);
    NEAR(llm_bench_gpu_peak_gflops(8, 0, 108, 1410, "bf16"), 311869.4);
    /* V100 SXM2 80 SMs, 1530 MHz: 15.7 f32, 125 f16; no bf16 or tf32 */
    NEAR(llm_bench_gpu_peak_gflops(7, 0, 80, 1530, "f32"), 15667.2);
    NEAR(llm_bench_gpu_peak_gflops(7, 0, 80, 1530, "f16"), 125337.6);
    assert_true(llm_bench_gpu_peak_gflops(7, 0, 80, 1530, "bf16") < 0);
    /* consumer Ampere: f32 only */
    NEAR(llm_bench_gpu_peak_gflops(8, 6, 82, 1695, "f32"), 35582.0);
    assert_true(llm_bench_gpu_peak_gflops(8, 6, 82, 1695, "f16") < 0);
    /* unknown architecture, dtype or device facts */
    assert_true(llm_bench_gpu_peak_gflops(12, 0, 100, 2000, "f32") < 0);
    assert_true(llm_bench_gpu_peak_gflops(9, 0, 132, 1980, "f64") < 0);
    assert_true(llm_bench_gpu_peak_gflops(9, 0, 0, 1980, "f32") < 0);
    assert_true(llm_bench_gpu_peak_gflops(9, 0, 132, 0, "f32") < 0);
    /* DRAM: 2 x clock x bus / 8 (H200: 3201 MHz x 6144 bits = 4917 GB/s) */
    NEAR(llm_bench_gpu_peak_gbs(3201, 6144), 4916.7);
    assert_true(llm_bench_gpu_peak_gbs(0, 6144) < 0 && llm_bench_gpu_peak_gbs(3201, 0) < 0);
#undef NEAR
}

/* Without a GPU (or without CUDA in the build) the cuda rows refuse with LLM_ENODEV;
 * usage errors come first. */
static void test_gpu_refuses(void **state)
{
    (void)state;
    llm_status st = {0};
    llm_bench_row r;
    llm_bench_gemm_opts g = {8, 8, 8, "f64", 0, 0, 1, 0, 0};
    assert_int_equal(llm_bench_gemm_cuda(&g, &r, &st), LLM_EUSAGE);
    llm_status_clear(&st);
    double gf = 0, gb = 0;
    if (llm_bench_gpu_peaks("f32", &gf, &gb, NULL, 0, &st) == 0) skip();   /* a GPU is here */
    assert_int_equal(st.code, LLM_ENODEV);
    llm_status_clear(&st);
    g.dtype = "bf16";
    assert_int_equal(llm_bench_gemm_cuda(&g, &r, &st), LLM_ENODEV);
    assert_true(strstr(st.msg, "no CUDA device") || strstr(st.msg, "not available in this build"));
    llm_status_clear(&st);
    assert_int_equal(llm_bench_mem_cuda("triad", 1024, 0, 1, &r, &st), LLM_ENODEV);
}

/* llm_bench_train in each precision on a tiny random model: the row says which, the
 * matmul dtype follows it, MFU is rate x flop per token / peak as in fp32. */
static void test_train_precision(void **state)
{
    (void)state;
    llm_model_config mc = {"gpt2", 1, 2, 16, 64, 128, 16};
    const char *names[3] = {"fp32", "bf16", "fp16"}, *dts[3] = {"f32", "bf16", "f16"};
    llm_precision ps[3] = {LLM_PREC_FP32, LLM_PREC_BF16, LLM_PREC_FP16};
    for (int i = 0; i < 3; i++) {
        llm_bench_model_opts o = {NULL, &mc, "cpu", 1, 0, 2, 2, 8, 0, 100.0, ps[i], 0, 0};
        llm_bench_row r;
        llm_status st = {0};
        assert_int_equal(llm_bench_train(&o, &r, &st), 0);
        assert_string_equal(r.bench, "train");
        assert_string_equal(r.precision, names[i]);
        assert_string_equal(r.dtype, dts[i]);
        assert_true(r.work == 16 && r.rate > 0);
        double fpt = llm_bench_row_get(&r, "flops_per_token", -1);
        assert_true(fpt == llm_bench_train_flops_per_token(&mc, 8));
        assert_true(fabs(llm_bench_row_get(&r, "mfu", -1) - 100.0 * r.rate * fpt / 100e9) <= 1e-9 * r.peak_pct);
    }
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_parse),         cmocka_unit_test(test_times_and_kv),
        cmocka_unit_test(test_time_loop),     cmocka_unit_test(test_writers),
        cmocka_unit_test(test_tiny_runs),     cmocka_unit_test(test_busbw_factors),
        cmocka_unit_test(test_peak),          cmocka_unit_test(test_gpu_peaks),
        cmocka_unit_test(test_gpu_refuses),   cmocka_unit_test(test_train_precision),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
