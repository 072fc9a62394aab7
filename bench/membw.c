/* bench/membw.c — host memory read bandwidth, the bound that CPU decode is measured against.
 *
 * Streams a buffer much larger than the last-level cache with T threads, each summing its own
 * contiguous share (what a multithreaded matrix-vector product does with weight rows), and
 * reports the best of R repetitions in GB/s (10^9 bytes/s): mp_bench_host_read_gbs
 * (runtime/bench.h), what every thread read in a window of the host's clock, which `moeplan bench`
 * and calibrate also use. (Timing each thread's one pass until the slowest had finished, the
 * earlier probe, read 72-117 GB/s where the window read 123-132, alternated in one process on the
 * H200 host: bench/results/2026-12-04-h200-host-probes/membw-compare.md.)
 * Usage: mp_membw [--gib N=4] [--threads T=all] [--reps R=5] */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "runtime/bench.h"

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
    const size_t bytes = (size_t)(gib * 1073741824.0);
    const double gbs = mp_bench_host_read_gbs(bytes, threads, reps);
    if (gbs <= 0) {
        fprintf(stderr, "mp_membw: cannot allocate %zu bytes or start %d threads\n", bytes, threads);
        return 1;
    }
    printf("membw: %.1f GB/s read (best of %d, %d threads, %.2f GiB buffer)\n", gbs, reps, threads,
           (double)bytes / 1073741824.0);
    return 0;
}
