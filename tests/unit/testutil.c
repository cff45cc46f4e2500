#include "tests/unit/testutil.h"

#include "kernels/backend.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

uint64_t tu_next(tu_rng *r)
{
    uint64_t z = (r->s += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

float tu_uniform(tu_rng *r, float lo, float hi)
{
    return lo + (hi - lo) * (float)((tu_next(r) >> 40) / 16777216.0);
}

void tu_fill(tu_rng *r, float *x, size_t n, float lo, float hi)
{
    for (size_t i = 0; i < n; i++)
        x[i] = tu_uniform(r, lo, hi);
}

float *tu_rnd(tu_rng *r, size_t n, float lo, float hi)
{
    float *x = malloc(sizeof(float) * (n ? n : 1));
    assert_non_null(x);
    tu_fill(r, x, n, lo, hi);
    return x;
}

float *tu_dup(const float *x, size_t n)
{
    float *y = malloc(sizeof(float) * (n ? n : 1));
    assert_non_null(y);
    memcpy(y, x, sizeof(float) * n);
    return y;
}

double tu_max_rel_err(const float *a, const float *b, size_t n, double floor, size_t *worst)
{
    double m = 0;
    size_t w = 0;
    for (size_t i = 0; i < n; i++) {
        double d = fabs((double)a[i] - (double)b[i]);
        double s = fabs((double)b[i]);
        double e = d / (s > floor ? s : floor);
        if (!(e <= m)) { /* also catches NaN */
            m = isnan(e) ? INFINITY : e;
            w = i;
        }
    }
    if (worst)
        *worst = w;
    return m;
}

char *tu_slurp(const char *path, size_t *n)
{
    FILE *f = fopen(path, "rb");
    if (!f)
        return NULL;
    size_t cap = 1 << 16, len = 0, r;
    char *b = malloc(cap + 1);
    while (b && (r = fread(b + len, 1, cap - len, f)) > 0) {
        len += r;
        if (len == cap) {
            char *nb = realloc(b, 2 * cap + 1);
            if (!nb)
                free(b);
            b = nb;
            cap *= 2;
        }
    }
    fclose(f);
    if (b) {
        b[len] = 0;
        if (n)
            *n = len;
    }
    return b;
}

char *tu_tmpdir(void)
{
    char *p = strdup("/tmp/llmkit-unit.XXXXXX");
    if (p && !mkdtemp(p)) {
        free(p);
        return NULL;
    }
    return p;
}

char *tu_dir;

int tu_dir_setup(void **state)
{
    (void)state;
    tu_dir = tu_tmpdir();
    return tu_dir ? 0 : -1;
}

int tu_dir_teardown(void **state)
{
    (void)state;
    tu_rmdir(tu_dir);
    free(tu_dir);
    tu_dir = NULL;
    return 0;
}

const char *tu_path(const char *name)
{
    static char buf[4][512];
    static int k;
    k = (k + 1) % 4;
    snprintf(buf[k], sizeof buf[k], "%s/%s", tu_dir, name);
    return buf[k];
}

void tu_rmdir(const char *path)
{
    char cmd[512];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", path);
    if (system(cmd) != 0)
        fprintf(stderr, "warning: could not remove %s\n", path);
}

const char *tu_data(const char *rel)
{
    static char buf[1024];
    const char *d = getenv("LLM_DATA");
    if (d)
        snprintf(buf, sizeof buf, "%s/%s", d, rel);
    else {
        const char *root = getenv("LLM_ROOT");
        snprintf(buf, sizeof buf, "%s/../shared/data/%s", root ? root : ".", rel);
    }
    return access(buf, R_OK) == 0 ? buf : NULL;
}

double tu_scaled_err(const float *a, const float *b, size_t n)
{
    double d = 0, s = 0;
    for (size_t i = 0; i < n; i++) {
        double e = fabs((double)a[i] - b[i]);
        if (!(e <= d))
            d = isnan(e) ? INFINITY : e;
        if (fabs((double)b[i]) > s)
            s = fabs((double)b[i]);
    }
    return s > 0 ? d / s : d;
}

void tu_fill_ids(tu_rng *r, int32_t *in, int32_t *tg, size_t n, int V)
{
    for (size_t i = 0; i < n; i++) {
        in[i] = (int32_t)(tu_next(r) % (uint64_t)V);
        tg[i] = (int32_t)(tu_next(r) % (uint64_t)V);
    }
}

int tu_cpu_backends(llm_backend *ref, llm_backend *fast)
{
    char err[256];
    if (llm_backend_init(ref, "cpu-ref", 1, err, sizeof err) != 0)
        return -1;
    if (llm_backend_init(fast, "cpu", 2, err, sizeof err) != 0) {
        llm_backend_free(ref);
        return -1;
    }
    return 0;
}

void tu_cpu_backends_free(llm_backend *ref, llm_backend *fast)
{
    llm_backend_free(ref);
    llm_backend_free(fast);
}
