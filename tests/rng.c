/* tests/rng.c — the tests' random numbers (tests/rng.h). */
#include <math.h>
#include <stdlib.h>
#include <time.h>

#include "tests/rng.h"

uint64_t g_seed;
static uint64_t g_rng;

void seed_rng(void)
{
    const char *env = getenv("MP_TEST_SEED");
    if (env) {
        g_seed = strtoull(env, NULL, 10);
    } else {
        struct timespec ts;
        clock_gettime(CLOCK_REALTIME, &ts);
        g_seed = (uint64_t)ts.tv_sec * 1000000007ull + (uint64_t)ts.tv_nsec;
    }
    g_rng = g_seed;
}

uint64_t rnd_u64(void)
{
    uint64_t z = (g_rng += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

double rnd_uniform(void) /* [0, 1) */
{
    return (double)(rnd_u64() >> 11) * 0x1p-53;
}

float rnd_gauss(void)
{
    const double u1 = rnd_uniform() + 1e-300, u2 = rnd_uniform();
    return (float)(sqrt(-2.0 * log(u1)) * cos(2.0 * M_PI * u2));
}
