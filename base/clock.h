/* base/clock.h — the one monotonic clock every timing in moeplan reads (CLOCK_MONOTONIC: never
 * steps back, unaffected by wall-clock changes), in nanoseconds and in seconds. */
#ifndef MP_BASE_CLOCK_H
#define MP_BASE_CLOCK_H

#include <stdint.h>
#include <time.h>

static inline int64_t mp_now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

static inline double mp_now_s(void)
{
    return (double)mp_now_ns() * 1e-9;
}

#endif
