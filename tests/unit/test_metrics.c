/* Unit tests for the metrics writer (common/metrics.c): step lines and Prometheus gauges,
 * with and without the device-health fields. */
#include "tests/unit/testutil.h"

#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/metrics.h"

typedef struct {
    char *dir, jsonl[512], prom[512];
} fx;

static int setup(void **state)
{
    fx *f = calloc(1, sizeof *f);
    f->dir = tu_tmpdir();
    snprintf(f->jsonl, sizeof f->jsonl, "%s/m.jsonl", f->dir);
    snprintf(f->prom, sizeof f->prom, "%s/m.prom", f->dir);
    *state = f;
    return 0;
}

static int teardown(void **state)
{
    fx *f = *state;
    tu_rmdir(f->dir);
    free(f->dir);
    free(f);
    return 0;
}

static char *slurp(const char *path)
{
    FILE *fp = fopen(path, "rb");
    assert_non_null(fp);
    static char buf[1 << 16];
    size_t n = fread(buf, 1, sizeof buf - 1, fp);
    fclose(fp);
    buf[n] = 0;
    return strdup(buf);
}

/* A step with the CPU fields filled and the device fields given. */
static llm_step_metrics step(double mem, double peak, double util, double temp, double power)
{
    llm_step_metrics s = {.step = 7, .max_steps = 100, .loss = 2.5, .lr = 3e-4,
                          .grad_norm = 1.25, .tokens_per_s = 12345.6, .ms = 80.5, .mfu = 0.25,
                          .rss_mb = 512.3, .skipped = 1, .data_ms = 0.125};
    s.gpu_mem_mb = mem;
    s.gpu_mem_peak_mb = peak;
    s.gpu_util = util;
    s.gpu_temp_c = temp;
    s.gpu_power_w = power;
    return s;
}

/* Write one step; *line gets the JSON line (malloc'd), returns the prom text (malloc'd). */
static char *write_step(fx *f, const llm_step_metrics *s, char **line)
{
    remove(f->jsonl);
    llm_metrics *m;
    llm_status st = {0};
    assert_int_equal(llm_metrics_open(&m, f->jsonl, f->prom, 0, &st), 0);
    assert_int_equal(llm_metrics_step(m, s, &st), 0);
    llm_metrics_close(m);
    *line = slurp(f->jsonl);
    return slurp(f->prom);
}

static double num(json_t *o, const char *k)
{
    json_t *v = json_object_get(o, k);
    assert_non_null(v);
    assert_true(json_is_number(v));
    return json_number_value(v);
}

/* Prometheus value of a gauge, NAN when absent. */
static double prom_value(const char *text, const char *name)
{
    char pat[128];
    snprintf(pat, sizeof pat, "\n%s ", name);
    const char *p = strstr(text, pat);
    return p ? strtod(p + strlen(pat), NULL) : NAN;
}

static const char *const dev_keys[] = {"gpu_mem_mb", "gpu_mem_peak_mb", "gpu_util",
                                       "gpu_temp_c", "gpu_power_w"};
static const char *const dev_gauges[] = {
    "llmkit_train_gpu_memory_used_bytes", "llmkit_train_gpu_memory_peak_bytes",
    "llmkit_train_gpu_utilization_ratio", "llmkit_train_gpu_temperature_celsius",
    "llmkit_train_gpu_power_watts"};

static void test_device_fields(void **state)
{
    fx *f = *state;
    llm_step_metrics s = step(1234.56, 2048.04, 87, 65, 412.34);
    char *line, *prom = write_step(f, &s, &line);
    json_error_t je;
    json_t *o = json_loads(line, 0, &je);
    assert_non_null(o);
    assert_true(num(o, "gpu_mem_mb") == 1234.6);       /* 0.1 MiB */
    assert_true(num(o, "gpu_mem_peak_mb") == 2048.0);
    assert_true(num(o, "gpu_util") == 87);
    assert_true(num(o, "gpu_temp_c") == 65);
    assert_true(num(o, "gpu_power_w") == 412.3);       /* 0.1 W */
    assert_true(num(o, "loss") == 2.5);
    /* after every CPU field: the CPU part of the line is unchanged */
    const char *d = strstr(line, "\"data_ms\""), *g = strstr(line, "\"gpu_mem_mb\"");
    assert_non_null(d);
    assert_non_null(g);
    assert_true(d < g);
    json_decref(o);

    assert_true(fabs(prom_value(prom, dev_gauges[0]) - 1234.56 * 1048576.0) < 1);
    assert_true(fabs(prom_value(prom, dev_gauges[1]) - 2048.04 * 1048576.0) < 1);
    assert_true(fabs(prom_value(prom, dev_gauges[2]) - 0.87) < 1e-12);
    assert_true(prom_value(prom, dev_gauges[3]) == 65);
    assert_true(fabs(prom_value(prom, dev_gauges[4]) - 412.34) < 1e-9);
    assert_non_null(strstr(prom, "# TYPE llmkit_train_gpu_power_watts gauge\n"));
    assert_true(prom_value(prom, "llmkit_train_step") == 7);
    free(line);
    free(prom);
}

/* Remove each ,"gpu_...":value pair from a JSON line in place. */
static void strip_gpu(char *line)
{
    char *p;
    while ((p = strstr(line, ",\"gpu_"))) {
        char *e = p + 1;
        while (*e && *e != ',' && *e != '}') e++;
        memmove(p, e, strlen(e) + 1);
    }
}

/* A CPU run: every device field -1.  The line is exactly the line of a GPU run without
 * its gpu keys, and has none itself. */
static void test_no_device(void **state)
{
    fx *f = *state;
    llm_step_metrics s = step(-1, -1, -1, -1, -1);
    char *line, *prom = write_step(f, &s, &line);
    assert_null(strstr(line, "gpu"));
    assert_null(strstr(prom, "gpu"));
    assert_non_null(strstr(line, "\"step\":7,\"loss\":2.5,"));
    assert_true(prom_value(prom, "llmkit_train_loss") == 2.5);
    llm_step_metrics g = step(1, 2, 3, 4, 5);
    char *gline, *gprom = write_step(f, &g, &gline);
    assert_non_null(strstr(gline, "gpu_power_w"));
    strip_gpu(gline);
    assert_string_equal(gline, line);
    free(gline);
    free(gprom);
    free(line);
    free(prom);
}

/* Some known, some not (NVML absent: memory only; NaN counts as unknown). */
static void test_partial(void **state)
{
    fx *f = *state;
    llm_step_metrics s = step(100, 200, -1, NAN, -1);
    char *line, *prom = write_step(f, &s, &line);
    json_error_t je;
    json_t *o = json_loads(line, 0, &je);
    assert_non_null(o);
    for (int i = 0; i < 5; i++) {
        int want = i < 2;
        assert_int_equal(json_object_get(o, dev_keys[i]) != NULL, want);
        assert_int_equal(!isnan(prom_value(prom, dev_gauges[i])), want);
    }
    assert_true(num(o, "gpu_mem_mb") == 100);
    json_decref(o);
    free(line);
    free(prom);
    /* zero is a value (an idle GPU), not "unknown" */
    s = step(0, 0, 0, 0, 0);
    prom = write_step(f, &s, &line);
    for (int i = 0; i < 5; i++) {
        assert_non_null(strstr(line, dev_keys[i]));
        assert_true(prom_value(prom, dev_gauges[i]) == 0);
    }
    free(line);
    free(prom);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_device_fields, setup, teardown),
        cmocka_unit_test_setup_teardown(test_no_device, setup, teardown),
        cmocka_unit_test_setup_teardown(test_partial, setup, teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
