/* clock.h — the monotonic clock in seconds, for timings, rates and timeouts. */
#ifndef LLM_CLOCK_H
#define LLM_CLOCK_H

#include <time.h>

static inline double llm_now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

#endif
