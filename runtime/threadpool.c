/* runtime/threadpool.c — persistent worker threads for the data-parallel regions of the forward
 * pass (see threadpool.h).
 *
 * One region at a time, started by the caller (thread 0) as generation g. The n tasks are cut
 * into one block per thread, block b = [n·b/T, n·(b+1)/T) of T threads, each with its own claim
 * counter on its own cache line:
 *   caller:  writes (fn, ctx, n_tasks) into slot[g & 1], sets every block's counter to
 *            (g << 32 | first index of the block), publishes generation = g (waking sleepers),
 *            runs tasks itself, then waits until n_done == n;
 *   workers: see the new generation (spinning, then sleeping on a futex), claim the tasks of
 *            their own block by compare-and-swap on its counter, then steal from the other
 *            blocks the same way; each adds the count of tasks it ran to n_done once, at the end.
 * Why blocks: with one shared counter and a shared done-count, each task cost two read-modify-
 * writes of contended cache lines; a decode step's expert call has ~130 tasks over 16 threads,
 * and those transfers, not the work, set its time. Now a claim touches a line its thread owns
 * unless it steals, and n_done is written once per thread and region.
 *
 * Invariants:
 *  - every task index in [0, n_tasks) is handed out exactly once: a claim is a CAS that moves
 *    block b's counter from (g, i) to (g, i + 1) with i below the block's end; a thread whose CAS
 *    fails re-reads the counter;
 *  - mp_pool_run returns only when n_done == n_tasks: a thread adds its count after its last task
 *    ran, so every task has completed; it does not wait for workers that claimed nothing (a
 *    descheduled worker on a busy machine does not stall the caller: its block is stolen);
 *  - slot[g & 1] is written only while no task of g - 2 or g can be claimed (every counter names
 *    g - 1 or was never g); a late worker that read a slot while it changed cannot act on it,
 *    because its CAS against (g', i) fails once the counter names another generation. Slot
 *    fields are relaxed atomics so that this benign overlap is not a data race;
 *  - a sleeper first counts itself in n_sleeping and re-checks `generation` (sequentially
 *    consistent), so the caller, which bumps `generation` and then reads n_sleeping, either wakes
 *    it or the worker sees the new generation: no lost wake-up.
 *
 * Why spin first: a decode step runs hundreds of regions a few microseconds apart; a futex sleep
 * and wake per region costs more than the region's work. After MP_POOL_SPIN_US of empty polls (a
 * time, not a count: a pause instruction's latency differs several-fold between CPUs: 20,000 took
 * 505 us on the development machine's Zen 5) a worker sleeps, so an idle pool (between requests,
 * or while the tokenizer runs) burns no CPU. The GPU executor's pool runs only the hybrid layers'
 * CPU experts, whose regions can be a layer or a token apart: a worker that slept there starts its
 * next call late (2 threads, one 2 MB route a call with 1 ms between calls: the last worker
 * started 71 us late).
 *
 * Pinning (Linux, pin_workers: MP_POOL_PIN=1 for a session; off by default: on the H200 host the
 * offloaded decode table with far routes ran within the host's own drift pinned or not, layers:48
 * without far routes ran 5-11 % faster pinned in three alternated pairs, and an 8-layer Mixtral
 * shape kept its median (72.1 against 71.8 tok/s) with half the spread between processes (6.5
 * against 12.7 %, four alternated pairs), and olmoe's accuracy-matrix rows came no closer to the
 * prediction pinned (11 and 12 of 12 within 10 %, against 10 and 12; bench/NOTES-gpu-exec.md and
 * NOTES-simulator.md of 2026-12-02); a pinned pool cannot move away from a CPU another process
 * takes): when the pool has no more threads than the process may run on, worker i is pinned to
 * the i-th CPU of the process's affinity set, so that the scheduler does not move a thread in
 * the middle of streaming its share of an expert (its hardware prefetch streams and L2 stay on one
 * core); the caller, thread 0, stays where the application put it, and the set's
 * first CPU is left to it. An oversubscribed pool (more threads than CPUs, as the tests on a
 * 2-core machine) is never pinned: waiting threads must be able to move away from the one they
 * wait for.
 */
#include "runtime/threadpool.h"

#include <limits.h>
#include <pthread.h>
#include <sched.h>
#include <stdint.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdlib.h>
#include <unistd.h>

#ifdef __linux__
#include <linux/futex.h>
#include <sys/syscall.h>
#endif

#include "base/clock.h"
#include "base/knobs.h"
#include "runtime/cpus.h"

/* The spin before a worker sleeps, in ns, for pools made from now on (mp_pool_set_spin_us). */
static _Atomic int64_t g_spin_ns = MP_KNOB_POOL_SPIN_US * 1000;
/* Polls between two looks at the clock while spinning (a look costs ~20-50 ns, a pause more). */
#define MP_POOL_SPIN_CLOCK_POLLS 64

void mp_pool_set_spin_us(int64_t us)
{
    atomic_store(&g_spin_ns, us * 1000);
}

typedef struct region {
    _Atomic(mp_pool_fn) fn;
    _Atomic(void *) ctx;
    atomic_int_fast64_t n_tasks;
} region;

/* One thread's share of the current region: (generation << 32) | next task index of block b. */
typedef struct block {
    _Alignas(64) atomic_uint_fast64_t next;
} block;

struct mp_pool {
    int n_threads;          /* >= 1, including the caller */
    int64_t spin_ns;        /* a worker's spin before it sleeps */
    int n_pinned;           /* workers pinned to a CPU (see the top of this file) */
    pthread_t *workers;     /* n_threads - 1 */
    struct worker_arg *args;
    block *blocks;          /* (n_threads), cache-line aligned */

    region slot[2];                      /* region g lives in slot[g & 1] */
    _Alignas(64) atomic_uint generation; /* the current region; the futex word */
    _Alignas(64) atomic_int_fast64_t n_done; /* tasks of the current region completed */
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

/* Block b of a region of n tasks over T threads: [n·b/T, n·(b+1)/T). */
static int64_t block_start(int64_t n, int b, int T)
{
    return n * b / T;
}

/* Claim and run tasks of region g, own block first, then the others', until none is left or
 * another region has begun. The tasks run are counted into n_done as each block is left (one
 * write per block worked on, not per task), so the caller's wait ends with the last task. */
static void run_tasks(mp_pool *p, unsigned g, int thread)
{
    const region *r = &p->slot[g & 1];
    const int T = p->n_threads;
    for (int i = 0; i < T; i++) {
        const int b = (thread + i) % T;
        atomic_uint_fast64_t *ctr = &p->blocks[b].next;
        uint64_t c = atomic_load_explicit(ctr, memory_order_acquire);
        if ((unsigned)(c >> 32) != g)
            return; /* the region is over (or never reached this thread) */
        /* read once per block, after a counter named g: should the slot be rewritten for g + 2
         * meanwhile, every counter names another generation first, and no claim below succeeds */
        const int64_t end = block_start(atomic_load_explicit(&r->n_tasks, memory_order_relaxed), b + 1, T);
        const mp_pool_fn fn = atomic_load_explicit(&r->fn, memory_order_relaxed);
        void *ctx = atomic_load_explicit(&r->ctx, memory_order_relaxed);
        int64_t ran = 0;
        bool over = false;
        for (;;) {
            if ((unsigned)(c >> 32) != g) {
                over = true; /* the region is over */
                break;
            }
            const int64_t idx = (int64_t)(c & 0xffffffffu);
            if (idx >= end)
                break; /* block b is used up: the next one */
            if (!atomic_compare_exchange_weak_explicit(ctr, &c, c + 1, memory_order_acq_rel,
                                                       memory_order_acquire))
                continue; /* c now holds the block's current counter */
            fn(ctx, idx, thread);
            ran++;
            c = atomic_load_explicit(ctr, memory_order_acquire);
        }
        if (ran)
            atomic_fetch_add_explicit(&p->n_done, ran, memory_order_release);
        if (over)
            return;
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
        int64_t since = -1; /* the spin's start: its first look at the clock */
        while ((g = atomic_load_explicit(&p->generation, memory_order_acquire)) == seen) {
            if (p->spin_ns > 0) {
                bool spin = ++spins % MP_POOL_SPIN_CLOCK_POLLS != 0;
                if (!spin) {
                    const int64_t t = mp_now_ns();
                    since = since < 0 ? t : since;
                    spin = t - since < p->spin_ns;
                }
                if (spin) {
                    mp_cpu_relax();
                    continue;
                }
            }
            atomic_fetch_add(&p->n_sleeping, 1);
            if (atomic_load(&p->generation) == seen)
                wait_generation(p, seen);
            atomic_fetch_sub(&p->n_sleeping, 1);
            spins = 0;
            since = -1;
        }
        seen = g;
        if (atomic_load_explicit(&p->stop, memory_order_acquire))
            return NULL;
        run_tasks(p, g, a->thread);
    }
}

/* Pins thread t to one CPU; true when it took. */
static bool pin_worker(pthread_t t, int cpu)
{
#ifdef __linux__
    cpu_set_t set;
    CPU_ZERO(&set);
    CPU_SET(cpu, &set);
    return pthread_setaffinity_np(t, sizeof set, &set) == 0;
#else
    (void)t, (void)cpu;
    return false;
#endif
}

mp_pool *mp_pool_new(int n_threads, bool pin_workers)
{
    if (n_threads < 1)
        return NULL;
    mp_pool *p = calloc(1, sizeof *p);
    if (!p)
        return NULL;
    p->n_threads = n_threads;
    p->spin_ns = atomic_load(&g_spin_ns);
    atomic_init(&p->generation, 0);
    p->blocks = aligned_alloc(64, (size_t)n_threads * sizeof *p->blocks);
    if (!p->blocks) {
        free(p);
        return NULL;
    }
    for (int i = 0; i < n_threads; i++)
        atomic_init(&p->blocks[i].next, 0);
    atomic_init(&p->n_done, 0);
    for (int i = 0; i < 2; i++) {
        atomic_init(&p->slot[i].fn, NULL);
        atomic_init(&p->slot[i].ctx, NULL);
        atomic_init(&p->slot[i].n_tasks, 0);
    }
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
        free(p->blocks);
        free(p);
        return NULL;
    }
    /* one CPU a core first: n_threads up to the cores never share one */
    int cpus[1024], cores;
    const bool pin = pin_workers && mp_cpu_allowed(cpus, 1024, &cores) >= n_threads;
    for (int i = 0; i < n_threads - 1; i++) {
        p->args[i].pool = p;
        p->args[i].thread = i + 1;
        if (pthread_create(&p->workers[i], NULL, worker_main, &p->args[i]) != 0) {
            /* stop the ones already started, then fail */
            p->n_threads = i + 1;
            mp_pool_free(p);
            return NULL;
        }
        if (pin && pin_worker(p->workers[i], cpus[i + 1]))
            p->n_pinned++;
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
    free(p->blocks);
    free(p);
}

int mp_pool_n_threads(const mp_pool *p)
{
    return p->n_threads;
}

int mp_pool_n_pinned(const mp_pool *p)
{
    return p->n_pinned;
}

void mp_pool_run(mp_pool *p, int64_t n_tasks, mp_pool_fn fn, void *ctx)
{
    if (n_tasks <= 0)
        return;
    /* one task, no workers, or more tasks than a claim can count: no region at all */
    if (p->n_threads == 1 || n_tasks == 1 || n_tasks > (int64_t)UINT32_MAX) {
        for (int64_t t = 0; t < n_tasks; t++)
            fn(ctx, t, 0);
        return;
    }
    const unsigned g = atomic_load_explicit(&p->generation, memory_order_relaxed) + 1;
    region *r = &p->slot[g & 1];
    atomic_store_explicit(&r->fn, fn, memory_order_relaxed);
    atomic_store_explicit(&r->ctx, ctx, memory_order_relaxed);
    atomic_store_explicit(&r->n_tasks, n_tasks, memory_order_relaxed);
    atomic_store_explicit(&p->n_done, 0, memory_order_relaxed);
    for (int b = 0; b < p->n_threads; b++)
        atomic_store_explicit(&p->blocks[b].next, (uint64_t)g << 32 | (uint64_t)block_start(n_tasks, b, p->n_threads),
                              memory_order_release);
    atomic_store_explicit(&p->generation, g, memory_order_seq_cst);
    if (atomic_load_explicit(&p->n_sleeping, memory_order_seq_cst) > 0)
        wake_all(p);

    run_tasks(p, g, 0);

    int spins = 0; /* the caller waits for tasks still running elsewhere */
    while (atomic_load_explicit(&p->n_done, memory_order_acquire) < n_tasks)
        mp_wait_step(&spins);
}
