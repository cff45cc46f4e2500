/* lo_fixture.h — the cmocka fixture of the lo-op tests (test_mixed.c, test_lo_ops.c):
 * the two CPU backends, and the same with their lo ops' work space forced down to a few
 * rows (several chunks per op; the GEMMs' dw/dbias sums split across them).  Included
 * by one test file each: static definitions. */
#ifndef LLM_TEST_LO_FIXTURE_H
#define LLM_TEST_LO_FIXTURE_H

#include <stdlib.h>

#include "common/ckpt.h"
#include "common/quant.h"
#include "kernels/backend.h"
#include "kernels/cpu/cpu_ops.h"
#include "tests/unit/testutil.h"

static llm_backend REF, FAST;
static llm_backend *BACKENDS[2] = {&REF, &FAST};

static int setup(void **state)
{
    (void)state;
    return tu_cpu_backends(&REF, &FAST);
}

static int setup_chunked(void **state)
{
    if (setup(state) != 0)
        return -1;
    ((llm_cpu_ctx *)REF.ctx)->lo_chunk = 700;
    ((llm_cpu_ctx *)FAST.ctx)->lo_chunk = 700;
    print_message("# lo ops' work space forced to 700 floats\n");
    return 0;
}

static int teardown(void **state)
{
    (void)state;
    tu_cpu_backends_free(&REF, &FAST);
    return 0;
}

static const char *lo_name(int lo) { return lo == LLM_DT_F16 ? "f16" : "bf16"; }

/* The value of lo bits h; v rounded to lo (via fp32, as the kernels round). */
static float lo_val(uint16_t h, int lo)
{
    return lo == LLM_DT_F16 ? llm_quant_f16_to_f32(h) : llm_quant_bf16_to_f32(h);
}

static uint16_t lo_bits(double v, int lo)
{
    return lo == LLM_DT_F16 ? llm_quant_f32_to_f16((float)v) : llm_quant_f32_to_bf16((float)v);
}

/* n random values in [a,b) as lo bits (malloc'd); *vals (may be NULL) gets their values
 * (malloc'd, the caller frees). */
static uint16_t *rnd_lo(tu_rng *r, size_t n, float a, float b, int lo, float **vals)
{
    float *x = tu_rnd(r, n, a, b);
    uint16_t *h = malloc(2 * (n ? n : 1));
    assert_non_null(h);
    for (size_t i = 0; i < n; i++) {
        h[i] = lo_bits(x[i], lo);
        x[i] = lo_val(h[i], lo);
    }
    if (vals)
        *vals = x;
    else
        free(x);
    return h;
}

#endif
