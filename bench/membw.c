/* bench/membw.c — host memory read bandwidth, the bound that CPU decode is measured against.
 *
 * Streams a buffer much larger than the last-level cache with T threads, each summing its own
 * contiguous share (what a multithreaded matrix-vector product does with weight rows), and
 * reports the best of R repetitions in GB/s (10^9 bytes/s): mp_bench_host_read_gbs
 * (runtime/bench.h), which `moeplan bench` and calibrate also use: what every thread read in a
 * window of the host's clock.
 * --compare alternates it, one repetition each, with the earlier probe: each thread reads its share
 * once and the rate is the bytes over the time until the slowest has finished.
 * Usage: mp_membw [--gib N=4] [--threads T=all] [--reps R=5] [--compare] */
#include <pthread.h>
#include <sched.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "base/clock.h"
#include "runtime/bench.h"

typedef struct share {
    const uint64_t *p;
    size_t n; /* words, a multiple of 16 */
    uint64_t sum;
    const int *go;
} share;

/* the earlier probe's loop: 32-byte vectors, four in flight, once over the share */
__attribute__((target("avx2"))) static void *read_once(void *arg)
{
    share *s = arg;
    typedef uint64_t vec __attribute__((vector_size(32), aligned(32)));
    while (!__atomic_load_n(s->go, __ATOMIC_ACQUIRE))
        sched_yield();
    const vec *p = (const vec *)s->p;
    vec a = {0}, b = a, c = a, d = a;
    for (size_t i = 0; i < s->n / 4; i += 4)
        a += p[i], b += p[i + 1], c += p[i + 2], d += p[i + 3];
    const vec t = a + b + c + d;
    s->sum = t[0] + t[1] + t[2] + t[3];
    return NULL;
}

/* the earlier probe: the threads wait for a flag, each reads its share once, timed from the flag
 * until the last has finished */
static double until_the_slowest(const uint64_t *buf, size_t words, int threads)
{
    pthread_t tid[1024];
    share sh[1024];
    const size_t n = words / (size_t)threads / 16 * 16;
    int go = 0;
    for (int t = 0; t < threads; t++) {
        sh[t] = (share){buf + n * (size_t)t, n, 0, &go};
        if (pthread_create(&tid[t], NULL, read_once, &sh[t]))
            return 0;
    }
    const double t0 = mp_now_s();
    __atomic_store_n(&go, 1, __ATOMIC_RELEASE);
    for (int t = 0; t < threads; t++)
        pthread_join(tid[t], NULL);
    const double dt = mp_now_s() - t0;
    return dt > 0 ? (double)(n * (size_t)threads * 8) / dt / 1e9 : 0;
}

int main(int argc, char **argv)
{
    double gib = 4;
    int threads = (int)sysconf(_SC_NPROCESSORS_ONLN), reps = 5;
    bool compare = false;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--gib") && i + 1 < argc)
            gib = atof(argv[++i]);
        else if (!strcmp(argv[i], "--threads") && i + 1 < argc)
            threads = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--reps") && i + 1 < argc)
            reps = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--compare"))
            compare = true;
        else {
            fprintf(stderr, "usage: mp_membw [--gib N] [--threads T] [--reps R] [--compare]\n");
            return 2;
        }
    }
    if (gib <= 0 || threads < 1 || threads > 1024 || reps < 1) {
        fprintf(stderr, "mp_membw: --gib must be > 0, --threads in 1..1024, --reps >= 1\n");
        return 2;
    }
    const size_t bytes = (size_t)(gib * 1073741824.0);
    if (compare) {
        uint64_t *buf = aligned_alloc(4096, bytes & ~(size_t)4095);
        if (!buf) {
            fprintf(stderr, "mp_membw: cannot allocate %zu bytes\n", bytes);
            return 1;
        }
        memset(buf, 1, bytes & ~(size_t)4095);
        printf("| rep | window GB/s | until the slowest GB/s |\n| ---: | ---: | ---: |\n");
        for (int r = 0; r < reps; r++) {
            const double w = mp_bench_host_read_gbs(bytes, threads, 1);
            const double s = until_the_slowest(buf, (bytes & ~(size_t)4095) / 8, threads);
            printf("| %d | %.1f | %.1f |\n", r, w, s);
            fflush(stdout);
        }
        free(buf);
        return 0;
    }
    const double gbs = mp_bench_host_read_gbs(bytes, threads, reps);
    if (gbs <= 0) {
        fprintf(stderr, "mp_membw: cannot allocate %zu bytes or start %d threads\n", bytes, threads);
        return 1;
    }
    printf("membw: %.1f GB/s read (best of %d, %d threads, %.2f GiB buffer)\n", gbs, reps, threads,
           (double)bytes / 1073741824.0);
    return 0;
}
