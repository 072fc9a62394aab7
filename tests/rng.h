/* tests/rng.h — the tests' random numbers (tests/rng.c): splitmix64, seeded once per test from the
 * clock or MP_TEST_SEED (to replay a failure); g_seed goes in every failure message. Shared by the
 * quant tests (tests/unit/quant_check.c) and the GPU tests (tests/gpu/gpu_util.h). */
#ifndef MP_TESTS_RNG_H
#define MP_TESTS_RNG_H

#include <stdint.h>

extern uint64_t g_seed;
void seed_rng(void);
uint64_t rnd_u64(void);
double rnd_uniform(void); /* [0, 1) */
float rnd_gauss(void);    /* standard normal (Box-Muller) */

#endif
