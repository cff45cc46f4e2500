/* clock.h — the monotonic clock, for timings, rates and timeouts: in seconds, or in
 * nanoseconds where differences must be exact (deadlines, "quiet since"). */
#ifndef LLM_CLOCK_H
#define LLM_CLOCK_H

#include <stdint.h>
#include <time.h>

static inline double llm_now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static inline uint64_t llm_now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

#endif
