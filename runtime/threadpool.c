/* runtime/threadpool.c — persistent worker threads for the data-parallel regions of the forward
 * pass (see threadpool.h).
 *
 * One region at a time, started by the caller (thread 0):
 *   caller: publish (fn, ctx, n_tasks), reset next_task and n_finished, bump `generation`;
 *   workers: see the new generation (spinning, then sleeping on a futex), claim tasks with an
 *            atomic fetch-add on next_task until none are left, then increment n_finished;
 *   caller: claims tasks too, then waits until every worker has incremented n_finished.
 *
 * Invariants:
 *  - a region's fields (fn, ctx, n_tasks) are written only while every worker is idle (the caller
 *    returned from the previous region only after all workers finished it), and published by the
 *    release increment of `generation`;
 *  - every task in [0, n_tasks) is claimed by exactly one thread (fetch-add hands out each index
 *    once); mp_pool_run returns only after all claimed tasks have completed;
 *  - a worker that sleeps has first counted itself in n_sleeping and then re-checked
 *    `generation` (sequentially consistent), so the caller, which bumps `generation` and then
 *    reads n_sleeping, either wakes it or the worker sees the new generation: no lost wake-up.
 *
 * Why spin first: a decode step runs hundreds of regions a few microseconds apart; a futex sleep
 * and wake per region costs more than the region's work. After MP_POOL_SPIN_ITERS empty polls a
 * worker sleeps, so an idle pool (between requests, or while the tokenizer runs) burns no CPU.
 */
#include "runtime/threadpool.h"

#include <limits.h>
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <unistd.h>

#ifdef __linux__
#include <linux/futex.h>
#include <sys/syscall.h>
#endif

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#define mp_cpu_relax() _mm_pause()
#else
#define mp_cpu_relax() ((void)0)
#endif

/* ~50-100 us of polling on current x86 (a pause is ~40-140 cycles): longer than the gap between
 * the regions of one decode step, much shorter than the gap between tokens of a slow sampler. */
#define MP_POOL_SPIN_ITERS 20000
/* The caller waiting for stragglers yields after this many polls, so that an oversubscribed
 * machine (more threads than free cores) still makes progress. */
#define MP_POOL_WAIT_SPINS_BEFORE_YIELD 2000

struct mp_pool {
    int n_threads;          /* >= 1, including the caller */
    pthread_t *workers;     /* n_threads - 1 */
    struct worker_arg *args;

    /* the current region (see the invariants above) */
    mp_pool_fn fn;
    void *ctx;
    int64_t n_tasks;

    _Alignas(64) atomic_uint generation; /* bumped once per region; the futex word */
    _Alignas(64) atomic_int_fast64_t next_task;
    _Alignas(64) atomic_int n_finished;  /* workers done with the current region */
    _Alignas(64) atomic_int n_sleeping;
    atomic_int stop;
#ifndef __linux__
    pthread_mutex_t mu;
    pthread_cond_t cv;
#endif
};

struct worker_arg {
    mp_pool *pool;
    int thread; /* 1..n_threads-1 */
};

static void wait_generation(mp_pool *p, unsigned seen)
{
#ifdef __linux__
    /* returns at once if generation != seen (EAGAIN); spurious wake-ups are re-checked */
    syscall(SYS_futex, (unsigned *)&p->generation, FUTEX_WAIT_PRIVATE, seen, NULL, NULL, 0);
#else
    pthread_mutex_lock(&p->mu);
    while (atomic_load(&p->generation) == seen && !atomic_load(&p->stop))
        pthread_cond_wait(&p->cv, &p->mu);
    pthread_mutex_unlock(&p->mu);
#endif
}

static void wake_all(mp_pool *p)
{
#ifdef __linux__
    syscall(SYS_futex, (unsigned *)&p->generation, FUTEX_WAKE_PRIVATE, INT_MAX, NULL, NULL, 0);
#else
    pthread_mutex_lock(&p->mu);
    pthread_cond_broadcast(&p->cv);
    pthread_mutex_unlock(&p->mu);
#endif
}

static void run_tasks(mp_pool *p, int thread)
{
    const int64_t n = p->n_tasks;
    for (;;) {
        const int64_t t = atomic_fetch_add_explicit(&p->next_task, 1, memory_order_relaxed);
        if (t >= n)
            break;
        p->fn(p->ctx, t, thread);
    }
}

static void *worker_main(void *argp)
{
    struct worker_arg *a = argp;
    mp_pool *p = a->pool;
    /* generation is 0 at creation; a region may be published before this thread first runs,
     * so the starting point is that 0, never a later value read here */
    unsigned seen = 0;
    for (;;) {
        unsigned g;
        int spins = 0;
        while ((g = atomic_load_explicit(&p->generation, memory_order_acquire)) == seen) {
            if (++spins < MP_POOL_SPIN_ITERS) {
                mp_cpu_relax();
                continue;
            }
            atomic_fetch_add(&p->n_sleeping, 1);
            if (atomic_load(&p->generation) == seen)
                wait_generation(p, seen);
            atomic_fetch_sub(&p->n_sleeping, 1);
            spins = 0;
        }
        seen = g;
        if (atomic_load_explicit(&p->stop, memory_order_acquire))
            return NULL;
        run_tasks(p, a->thread);
        atomic_fetch_add_explicit(&p->n_finished, 1, memory_order_release);
    }
}

int mp_cpu_count(void)
{
    long n = sysconf(_SC_NPROCESSORS_ONLN);
    return n < 1 ? 1 : (n > 1024 ? 1024 : (int)n);
}

mp_pool *mp_pool_new(int n_threads)
{
    if (n_threads < 1)
        return NULL;
    mp_pool *p = calloc(1, sizeof *p);
    if (!p)
        return NULL;
    p->n_threads = n_threads;
    atomic_init(&p->generation, 0);
    atomic_init(&p->next_task, 0);
    atomic_init(&p->n_finished, 0);
    atomic_init(&p->n_sleeping, 0);
    atomic_init(&p->stop, 0);
#ifndef __linux__
    pthread_mutex_init(&p->mu, NULL);
    pthread_cond_init(&p->cv, NULL);
#endif
    if (n_threads == 1)
        return p;
    p->workers = calloc((size_t)n_threads - 1, sizeof *p->workers);
    p->args = calloc((size_t)n_threads - 1, sizeof *p->args);
    if (!p->workers || !p->args) {
        free(p->workers);
        free(p->args);
        free(p);
        return NULL;
    }
    for (int i = 0; i < n_threads - 1; i++) {
        p->args[i].pool = p;
        p->args[i].thread = i + 1;
        if (pthread_create(&p->workers[i], NULL, worker_main, &p->args[i]) != 0) {
            /* stop the ones already started, then fail */
            p->n_threads = i + 1;
            mp_pool_free(p);
            return NULL;
        }
    }
    return p;
}

void mp_pool_free(mp_pool *p)
{
    if (!p)
        return;
    if (p->n_threads > 1) {
        atomic_store_explicit(&p->stop, 1, memory_order_release);
        atomic_fetch_add_explicit(&p->generation, 1, memory_order_seq_cst);
        wake_all(p);
        for (int i = 0; i < p->n_threads - 1; i++)
            pthread_join(p->workers[i], NULL);
    }
#ifndef __linux__
    pthread_mutex_destroy(&p->mu);
    pthread_cond_destroy(&p->cv);
#endif
    free(p->workers);
    free(p->args);
    free(p);
}

int mp_pool_n_threads(const mp_pool *p)
{
    return p->n_threads;
}

void mp_pool_run(mp_pool *p, int64_t n_tasks, mp_pool_fn fn, void *ctx)
{
    if (n_tasks <= 0)
        return;
    /* one task, or no workers: no region at all (the common case of tiny regions in tests) */
    if (p->n_threads == 1 || n_tasks == 1) {
        for (int64_t t = 0; t < n_tasks; t++)
            fn(ctx, t, 0);
        return;
    }
    p->fn = fn;
    p->ctx = ctx;
    p->n_tasks = n_tasks;
    atomic_store_explicit(&p->next_task, 0, memory_order_relaxed);
    atomic_store_explicit(&p->n_finished, 0, memory_order_relaxed);
    atomic_fetch_add_explicit(&p->generation, 1, memory_order_seq_cst);
    if (atomic_load_explicit(&p->n_sleeping, memory_order_seq_cst) > 0)
        wake_all(p);

    run_tasks(p, 0);

    const int n_workers = p->n_threads - 1;
    int spins = 0;
    while (atomic_load_explicit(&p->n_finished, memory_order_acquire) < n_workers) {
        if (++spins < MP_POOL_WAIT_SPINS_BEFORE_YIELD) {
            mp_cpu_relax();
        } else {
            sched_yield();
            spins = 0;
        }
    }
}
