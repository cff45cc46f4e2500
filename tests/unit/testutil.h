/* testutil.h — helpers shared by the C unit tests (cmocka). */
#ifndef LLM_TESTUTIL_H
#define LLM_TESTUTIL_H

#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

/* Deterministic PRNG for tests (splitmix64). */
typedef struct { uint64_t s; } tu_rng;
uint64_t tu_next(tu_rng *r);
float tu_uniform(tu_rng *r, float lo, float hi);
void tu_fill(tu_rng *r, float *x, size_t n, float lo, float hi);
/* Fresh malloc'd arrays (at least one element; the test fails when out of memory): n
 * uniforms in [lo,hi) from r; a copy of x(n). */
float *tu_rnd(tu_rng *r, size_t n, float lo, float hi);
float *tu_dup(const float *x, size_t n);

/* max |a-b| / max(|b|, floor) over n elements; *worst gets the index (may be NULL). */
double tu_max_rel_err(const float *a, const float *b, size_t n, double floor, size_t *worst);

/* n pairs of random token ids in [0, V): in[i] then tg[i] from r, alternating. */
void tu_fill_ids(tu_rng *r, int32_t *in, int32_t *tg, size_t n, int V);

/* The two CPU backends kernel tests compare: *ref "cpu-ref" (1 thread), *fast "cpu"
 * (2 threads).  0, or -1 when either cannot start; tu_cpu_backends_free frees both. */
struct llm_backend;
int tu_cpu_backends(struct llm_backend *ref, struct llm_backend *fast);
void tu_cpu_backends_free(struct llm_backend *ref, struct llm_backend *fast);

/* max |a-b| / max |b| over n elements (max |a-b| when b is all zero); a NaN difference
 * counts as infinite. */
double tu_scaled_err(const float *a, const float *b, size_t n);

/* The whole file at path in a malloc'd buffer with a NUL after it (*n bytes; n may be
 * NULL); NULL when it cannot be read. */
char *tu_slurp(const char *path, size_t *n);

/* A fresh temporary directory (removed by tu_rmdir). Returns a malloc'd path. */
char *tu_tmpdir(void);
void tu_rmdir(const char *path);
/* A scratch directory for a test group: pass tu_dir_setup and tu_dir_teardown to
 * cmocka_run_group_tests; tu_dir is the directory while the group runs, and
 * tu_path(name) is tu_dir/name (one of 4 rotating buffers: up to 4 in one call). */
extern char *tu_dir;
int tu_dir_setup(void **state);
int tu_dir_teardown(void **state);
const char *tu_path(const char *name);

/* Path of a file in the shared data folder ($LLM_DATA or ../shared/data relative to the
 * project root $LLM_ROOT); NULL when it does not exist. Static buffer. */
const char *tu_data(const char *rel);

#endif
