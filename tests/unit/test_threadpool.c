/* tests/unit/test_threadpool.c — the thread pool (runtime/threadpool.c): every task of every region
 * runs exactly once, with its thread index in range, whether the workers spin between regions or
 * sleep (MP_POOL_SPIN_US: 0 sleeps at once, a short spin sleeps in the gaps, a long one never
 * does), across regions of random sizes (none, fewer tasks than threads, many) and gaps longer than
 * the spin. A lost wake-up hangs the test (meson's timeout); a task run twice or skipped fails it. */
#include <criterion/criterion.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <time.h>

#include "base/knobs.h"
#include "runtime/threadpool.h"
#include "tests/rng.h"

enum { MAX_TASKS = 300 };

typedef struct counts {
    atomic_int ran[MAX_TASKS];
    atomic_int bad_thread;
    int n_threads;
} counts;

static void count_task(void *ctx, int64_t task, int thread)
{
    counts *c = ctx;
    atomic_fetch_add(&c->ran[task], 1);
    if (thread < 0 || thread >= c->n_threads)
        atomic_fetch_add(&c->bad_thread, 1);
}

static void sleep_us(long us)
{
    struct timespec t = {us / 1000000, (us % 1000000) * 1000};
    nanosleep(&t, NULL);
}

static void regions_under_spin(int64_t spin_us, int n_threads)
{
    mp_pool_set_spin_us(spin_us);
    mp_pool *p = mp_pool_new(n_threads, false);
    cr_assert(p);
    counts *c = calloc(1, sizeof *c);
    cr_assert(c);
    c->n_threads = n_threads;
    for (int r = 0; r < 120; r++) {
        const int64_t n = (int64_t)(rnd_u64() % (MAX_TASKS + 1)); /* 0 .. MAX_TASKS */
        for (int i = 0; i < MAX_TASKS; i++)
            atomic_store(&c->ran[i], 0);
        mp_pool_run(p, n, count_task, c);
        for (int64_t i = 0; i < MAX_TASKS; i++)
            cr_assert_eq(atomic_load(&c->ran[i]), i < n ? 1 : 0,
                         "seed %llu: spin %ld us, %d threads, region %d of %ld tasks: task %ld ran %d times",
                         (unsigned long long)g_seed, (long)spin_us, n_threads, r, (long)n, (long)i,
                         atomic_load(&c->ran[i]));
        if (r % 10 == 9)
            sleep_us(3000); /* longer than the short spins: their workers sleep before the next */
    }
    cr_assert_eq(atomic_load(&c->bad_thread), 0, "a task saw a thread index outside [0, %d)", n_threads);
    free(c);
    mp_pool_free(p);
}

Test(threadpool, every_task_once_whether_workers_spin_or_sleep)
{
    seed_rng();
    const int64_t spins[] = {0, 200, 2000, 100000};
    for (int i = 0; i < 4; i++) {
        regions_under_spin(spins[i], 3);
        regions_under_spin(spins[i], 5); /* more threads than CI's cores */
    }
    mp_pool_set_spin_us(MP_KNOB_POOL_SPIN_US); /* the default, for any later pool of this process */
}
