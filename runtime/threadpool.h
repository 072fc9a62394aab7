/* runtime/threadpool.h — a pool of worker threads for data-parallel kernels.
 *
 * mp_pool_run(pool, n_tasks, fn, ctx) calls fn(ctx, task, thread) once for every task in
 * [0, n_tasks), spread over the pool's threads (the caller is thread 0), and returns when all are
 * done. Asked to (a session does when MP_POOL_PIN=1), workers are pinned to CPUs when the pool
 * fits the machine (threadpool.c). Workers spin briefly before sleeping, because a decode step issues hundreds of
 * small parallel regions and a futex wake per region would cost more than the work.
 */
#ifndef MP_RUNTIME_THREADPOOL_H
#define MP_RUNTIME_THREADPOOL_H

#include <sched.h>
#include <stdbool.h>
#include <stdint.h>

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#define mp_cpu_relax() _mm_pause()
#elif defined(__aarch64__)
#define mp_cpu_relax() __asm__ __volatile__("yield" ::: "memory")
#else
#define mp_cpu_relax() ((void)0)
#endif

typedef struct mp_pool mp_pool;
typedef void (*mp_pool_fn)(void *ctx, int64_t task, int thread);

/* n_threads >= 1, including the caller; pin_workers: pin each worker to a CPU of its own when the
 * process's affinity set has at least n_threads CPUs */
mp_pool *mp_pool_new(int n_threads, bool pin_workers);
void mp_pool_free(mp_pool *p);
int mp_pool_n_threads(const mp_pool *p);
/* Workers pinned to a CPU of their own (threadpool.c: with pin_workers, when the pool fits the
 * process's CPUs); 0 when none. The caller, thread 0, is never pinned by the pool. */
int mp_pool_n_pinned(const mp_pool *p);
void mp_pool_run(mp_pool *p, int64_t n_tasks, mp_pool_fn fn, void *ctx);
/* How long a worker of the pools made from now on polls for the next region before it sleeps
 * (MP_POOL_SPIN_US, set process-wide with the kernels' switches; 0: it sleeps at once). */
void mp_pool_set_spin_us(int64_t us);


/* A thread polling for another thread's store yields after this many polls, so that an
 * oversubscribed machine (more threads than free cores) lets the awaited thread run. */
#define MP_POOL_WAIT_SPINS_BEFORE_YIELD 2000

/* One poll of such a wait (*spins starts at 0): a pause, and a sched_yield every
 * MP_POOL_WAIT_SPINS_BEFORE_YIELD polls. */
static inline void mp_wait_step(int *spins)
{
    if (++*spins < MP_POOL_WAIT_SPINS_BEFORE_YIELD) {
        mp_cpu_relax();
    } else {
        sched_yield();
        *spins = 0;
    }
}

#endif
