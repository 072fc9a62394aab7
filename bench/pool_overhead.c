/* bench/pool_overhead.c — what one parallel region of the thread pool (runtime/threadpool.h)
 * costs beyond its work: median wall time of mp_pool_run over regions of n tasks that each do a
 * fixed ~0.5 µs of arithmetic, for n = 1 task per thread, 4 per thread and 128 (a decode step's
 * expert call on 16 threads has ~130 tasks in two regions). The work alone is n × 0.5 µs ÷ T;
 * the rest is the pool's: publishing the region, waking or reaching spinning workers, claiming
 * tasks, and counting them done.
 *
 *   bench/pool_overhead [THREADS [REPS]]   (default: all CPUs, 2000 regions per size)
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#include "base/knobs.h"
#include "runtime/knobs_apply.h"
#include "runtime/cpus.h"
#include "runtime/threadpool.h"
#include "base/clock.h"

static volatile double sink;

static void work_task(void *ctx, int64_t task, int thread)
{
    (void)thread;
    const int iters = *(const int *)ctx;
    double a = (double)task;
    for (int i = 0; i < iters; i++)
        a = a * 1.0000001 + 0.5;
    sink = a;
}

static int cmp_i64(const void *a, const void *b)
{
    const int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;
    return x < y ? -1 : x > y;
}

int main(int argc, char **argv)
{
    mp_knobs knobs; /* the environment's MP_* knobs, as moeplan reads them */
    mp_error kerr;
    if (mp_knobs_start(&knobs, &kerr)) {
        fprintf(stderr, "%s: %s\n", "pool_overhead", kerr.msg);
        return 2;
    }
    const int T = argc > 1 ? atoi(argv[1]) : mp_cpu_usable();
    const int reps = argc > 2 ? atoi(argv[2]) : 2000;
    if (T < 1 || reps < 10) {
        fprintf(stderr, "usage: pool_overhead [THREADS >= 1 [REPS >= 10]]\n");
        return 2;
    }
    mp_pool *pool = mp_pool_new(T, knobs.pool_pin);
    int64_t *ns = malloc((size_t)reps * sizeof *ns);
    if (!pool || !ns) {
        fprintf(stderr, "pool_overhead: out of memory\n");
        return 1;
    }
    /* calibrate the task's iterations to ~0.5 µs on one thread */
    int iters = 100;
    for (;;) {
        const int64_t t0 = mp_now_ns();
        for (int i = 0; i < 1000; i++)
            work_task(&iters, i, 0);
        const double per_ns = (double)(mp_now_ns() - t0) / 1000.0;
        if (per_ns > 400 || iters > (1 << 24))
            break;
        iters *= 2;
    }
    const int64_t t0 = mp_now_ns();
    for (int i = 0; i < 1000; i++)
        work_task(&iters, i, 0);
    const double task_ns = (double)(mp_now_ns() - t0) / 1000.0;
    printf("pool_overhead: %d threads, task %.0f ns, %d regions per size, median per region\n", T, task_ns, reps);
    printf("| tasks | median us | work alone us | overhead us |\n| ---: | ---: | ---: | ---: |\n");
    const int64_t sizes[] = {T, 4 * (int64_t)T, 128};
    for (size_t si = 0; si < sizeof sizes / sizeof sizes[0]; si++) {
        const int64_t n = sizes[si];
        for (int r = -reps / 10; r < reps; r++) {
            const int64_t a = mp_now_ns();
            mp_pool_run(pool, n, work_task, &iters);
            if (r >= 0)
                ns[r] = mp_now_ns() - a;
        }
        qsort(ns, (size_t)reps, sizeof *ns, cmp_i64);
        const double med = (double)ns[reps / 2] / 1000.0;
        const double work = (double)((n + T - 1) / T) * task_ns / 1000.0;
        printf("| %lld | %.2f | %.2f | %.2f |\n", (long long)n, med, work, med - work);
    }
    mp_pool_free(pool);
    free(ns);
    return 0;
}
