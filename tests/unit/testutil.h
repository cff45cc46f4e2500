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

/* max |a-b| / max(|b|, floor) over n elements; *worst gets the index (may be NULL). */
double tu_max_rel_err(const float *a, const float *b, size_t n, double floor, size_t *worst);

/* max |a-b| / max |b| over n elements (max |a-b| when b is all zero); a NaN difference
 * counts as infinite. */
double tu_scaled_err(const float *a, const float *b, size_t n);

/* A fresh temporary directory (removed by tu_rmdir). Returns a malloc'd path. */
char *tu_tmpdir(void);
void tu_rmdir(const char *path);

/* Path of a file in the shared data folder ($LLM_DATA or ../shared/data relative to the
 * project root $LLM_ROOT); NULL when it does not exist. Static buffer. */
const char *tu_data(const char *rel);

#endif
