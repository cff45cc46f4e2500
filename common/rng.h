/* rng.h — splitmix64: a stream of well-mixed 64-bit values from a 64-bit state, for
 * seeding generators and for cheap random numbers (test data, benchmark ids). */
#ifndef LLM_RNG_H
#define LLM_RNG_H

#include <stdint.h>

static inline uint64_t llm_splitmix64(uint64_t *x)
{
    uint64_t z = (*x += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

#endif
