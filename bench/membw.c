/* bench/membw.c — host memory read bandwidth, the bound that CPU decode is measured against.
 *
 * Streams a buffer much larger than the last-level cache with T threads, each summing its own
 * contiguous share (what a multithreaded matrix-vector product does with weight rows), and
 * reports the best of R repetitions in GB/s (10^9 bytes/s).
 * Usage: mp_membw [--gib N=4] [--threads T=all] [--reps R=5] */
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

typedef struct worker {
    const uint64_t *begin;
    size_t n_words;
    uint64_t sum; /* kept so the compiler cannot drop the loads */
    pthread_barrier_t *start;
} worker;

static void *read_share(void *arg)
{
    worker *w = arg;
    pthread_barrier_wait(w->start);
    uint64_t a = 0, b = 0, c = 0, d = 0;
    size_t i = 0;
    for (; i + 4 <= w->n_words; i += 4) {
        a += w->begin[i];
        b += w->begin[i + 1];
        c += w->begin[i + 2];
        d += w->begin[i + 3];
    }
    w->sum = a + b + c + d;
    return NULL;
}

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

int main(int argc, char **argv)
{
    double gib = 4;
    int threads = (int)sysconf(_SC_NPROCESSORS_ONLN), reps = 5;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--gib") && i + 1 < argc)
            gib = atof(argv[++i]);
        else if (!strcmp(argv[i], "--threads") && i + 1 < argc)
            threads = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--reps") && i + 1 < argc)
            reps = atoi(argv[++i]);
        else {
            fprintf(stderr, "usage: mp_membw [--gib N] [--threads T] [--reps R]\n");
            return 2;
        }
    }
    if (gib <= 0 || threads < 1 || threads > 1024 || reps < 1) {
        fprintf(stderr, "mp_membw: --gib must be > 0, --threads in 1..1024, --reps >= 1\n");
        return 2;
    }
    size_t bytes = (size_t)(gib * 1073741824.0) & ~(size_t)4095;
    uint64_t *buf = aligned_alloc(4096, bytes);
    if (!buf) {
        fprintf(stderr, "mp_membw: cannot allocate %zu bytes\n", bytes);
        return 1;
    }
    memset(buf, 1, bytes); /* touch every page so the timing sees no page faults */
    size_t n_words = bytes / 8, share = n_words / (size_t)threads & ~(size_t)3;
    double best = 0;
    uint64_t total = 0;
    for (int r = 0; r < reps; r++) {
        pthread_t *tid = calloc((size_t)threads, sizeof *tid);
        worker *w = calloc((size_t)threads, sizeof *w);
        pthread_barrier_t start;
        pthread_barrier_init(&start, NULL, (unsigned)threads + 1);
        for (int t = 0; t < threads; t++) {
            w[t] = (worker){buf + share * (size_t)t, share, 0, &start};
            pthread_create(&tid[t], NULL, read_share, &w[t]);
        }
        pthread_barrier_wait(&start);
        double t0 = now_s();
        for (int t = 0; t < threads; t++) {
            pthread_join(tid[t], NULL);
            total += w[t].sum;
        }
        double gbs = (double)(share * (size_t)threads * 8) / (now_s() - t0) / 1e9;
        if (gbs > best)
            best = gbs;
        pthread_barrier_destroy(&start);
        free(tid);
        free(w);
    }
    printf("membw: %.1f GB/s read (best of %d, %d threads, %.2f GiB buffer, checksum %llu)\n", best, reps,
           threads, (double)bytes / 1073741824.0, (unsigned long long)(total & 0xff));
    free(buf);
    return 0;
}
