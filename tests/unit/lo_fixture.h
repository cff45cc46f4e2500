/* lo_fixture.h — the cmocka fixture of the lo-op tests (test_mixed.c, test_lo_ops.c):
 * the two CPU backends, and the same with their lo ops' work space forced down to a few
 * rows (several chunks per op; the GEMMs' dw/dbias sums split across them).  Included
 * by one test file each: static definitions. */
#ifndef LLM_TEST_LO_FIXTURE_H
#define LLM_TEST_LO_FIXTURE_H

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

#endif
