/* bench/host_load.cu — a neighbour that takes host memory bandwidth, for measuring decode on a
 * busy host.
 *
 * The machines moeplan is measured on are virtual: other tenants share the host's memory
 * controllers, and the host's read bandwidth drifts with them (59-180 GB/s seen on H200 machines
 * of one kind). A decode whose CPU side holds its share of the bound on a quiet host must hold it
 * on a busy one too. This program is the busy neighbour, on demand:
 *
 *   d2h   the GPU's copy engine writes a pinned host buffer over and over (device to host): host
 *         memory traffic that takes no core and leaves the bus's host-to-device direction, the one
 *         far routes and copies read through, to moeplan;
 *   cpu   T threads, pinned to the host's last T CPUs (skipping the last --skip K), read a
 *         buffer much larger than the last-level cache (they take cores as well as bandwidth:
 *         run moeplan on the others);
 *   wr    the same threads write it with non-temporal stores instead: memory traffic that leaves
 *         the GPU's link alone (d2h writes through it) and takes more of the memory per core than
 *         a reader (no cache fills; the memory turns from reads to writes and back), so that
 *         fewer cores bring the host down to a given read bandwidth.
 *
 * It runs until SIGTERM or SIGINT (or --seconds), touches --ready FILE once the load is running,
 * and prints what it moved on exit: "host_load: d2h 48.1 GB/s over 12.3 s".
 *
 * Usage: host_load [--mode d2h|cpu|wr] [--gib N=2] [--threads T=4] [--skip K=0]
 *                  [--seconds S=0: until a signal] [--ready FILE] */
#include <cuda_runtime.h>
#include <emmintrin.h>
#include <pthread.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <unistd.h>

#include "base/clock.h"
#include "host_reader.h"

/* 0 once SIGTERM or SIGINT came (sig_atomic_t is an int on the Linux ABIs: the readers poll it) */
static volatile int running = 1;
static volatile uint64_t sink; /* the readers' sums land here, so that their loads stay */
static void on_signal(int sig)
{
    (void)sig;
    running = 0;
}

static int fail(const char *what, cudaError_t e)
{
    fprintf(stderr, "host_load: %s: %s\n", what, cudaGetErrorString(e));
    return 1;
}

static void touch(const char *path)
{
    if (!path)
        return;
    FILE *f = fopen(path, "w");
    if (f)
        fclose(f);
}

static int load_d2h(size_t bytes, double seconds, const char *ready)
{
    const size_t slice = 64u << 20;
    if (bytes < 2 * slice)
        bytes = 2 * slice;
    bytes -= bytes % slice;
    void *host = NULL, *dev = NULL;
    cudaError_t e;
    /* the waiting thread sleeps: a thread spinning in cudaStreamSynchronize takes a core from the
     * decode beside it, whose pool then waits a time slice for the preempted worker (an expert
     * call's p90 went from 0.25 to 2.4 ms with a spinning neighbour, H200 host, 2026-12-04) */
    if ((e = cudaSetDeviceFlags(cudaDeviceScheduleBlockingSync)) != cudaSuccess)
        return fail("cudaSetDeviceFlags", e);
    if ((e = cudaHostAlloc(&host, bytes, cudaHostAllocDefault)) != cudaSuccess)
        return fail("cudaHostAlloc", e);
    memset(host, 1, bytes);
    if ((e = cudaMalloc(&dev, slice)) != cudaSuccess)
        return fail("cudaMalloc", e);
    cudaStream_t st;
    if ((e = cudaStreamCreateWithFlags(&st, cudaStreamNonBlocking)) != cudaSuccess)
        return fail("cudaStreamCreate", e);
    touch(ready);
    const double t0 = mp_now_s();
    uint64_t moved = 0;
    size_t off = 0;
    while (running && (seconds <= 0 || mp_now_s() - t0 < seconds)) {
        for (int k = 0; k < 16; k++) { /* 16 slices in flight, then one sync: about 20 ms */
            if ((e = cudaMemcpyAsync((char *)host + off, dev, slice, cudaMemcpyDeviceToHost, st)) != cudaSuccess)
                return fail("cudaMemcpyAsync", e);
            off = off + 2 * slice <= bytes ? off + slice : 0;
            moved += slice;
        }
        if ((e = cudaStreamSynchronize(st)) != cudaSuccess)
            return fail("cudaStreamSynchronize", e);
    }
    const double dt = mp_now_s() - t0;
    struct rusage ru;
    getrusage(RUSAGE_SELF, &ru);
    const double cpu_s = (double)ru.ru_utime.tv_sec + (double)ru.ru_stime.tv_sec +
                         1e-6 * (double)(ru.ru_utime.tv_usec + ru.ru_stime.tv_usec);
    fprintf(stderr, "host_load: d2h %.1f GB/s over %.1f s, %.2f s of CPU time (setup included)\n",
            (double)moved / dt / 1e9, dt, cpu_s);
    cudaStreamDestroy(st);
    cudaFree(dev);
    cudaFreeHost(host);
    return 0;
}

/* A writer: stores its share of the buffer a MiB at a time with non-temporal stores (no line is
 * read for ownership), wrapping at its end, until *run turns 0; counts its bytes in r->bytes. */
static void *writer_loop(void *arg)
{
    mp_host_reader *r = (mp_host_reader *)arg;
    mp_host_thread_pin(r->cpu);
    const size_t per_chunk = MP_READER_CHUNK / 8;
    size_t at = 0;
    __m128i v = _mm_set1_epi64x(0x0101010101010101ll);
    while (__atomic_load_n(r->run, __ATOMIC_ACQUIRE)) {
        __m128i *p = (__m128i *)(r->base + at); /* the load's own buffer: const only for the readers */
        for (size_t i = 0; i < per_chunk / 2; i += 4) {
            _mm_stream_si128(p + i, v);
            _mm_stream_si128(p + i + 1, v);
            _mm_stream_si128(p + i + 2, v);
            _mm_stream_si128(p + i + 3, v);
        }
        _mm_sfence();
        v = _mm_add_epi64(v, _mm_set1_epi64x(1));
        __atomic_fetch_add(&r->bytes, (uint64_t)MP_READER_CHUNK, __ATOMIC_RELAXED);
        at = at + 2 * per_chunk <= r->words ? at + per_chunk : 0;
    }
    return NULL;
}

static int load_cpu(size_t bytes, int threads, int skip, double seconds, const char *ready, bool write)
{
    const long ncpu = sysconf(_SC_NPROCESSORS_ONLN);
    if (threads + skip > ncpu) {
        fprintf(stderr, "host_load: --threads %d and --skip %d: this host has %ld CPUs\n", threads, skip, ncpu);
        return 2;
    }
    const long first = ncpu - skip - threads;
    const size_t share = bytes / 8 / (size_t)threads & ~(size_t)(MP_READER_CHUNK / 8 - 1);
    if (share < 2 * MP_READER_CHUNK / 8) {
        fprintf(stderr, "host_load: --gib too small for %d threads\n", threads);
        return 2;
    }
    uint64_t *buf = (uint64_t *)aligned_alloc(1 << 21, share * 8 * (size_t)threads);
    if (!buf) {
        fprintf(stderr, "host_load: cannot allocate %zu bytes\n", share * 8 * (size_t)threads);
        return 1;
    }
    madvise(buf, share * 8 * (size_t)threads, MADV_HUGEPAGE);
    memset(buf, 1, share * 8 * (size_t)threads);
    pthread_t *tid = (pthread_t *)calloc((size_t)threads, sizeof *tid);
    mp_host_reader *rd = (mp_host_reader *)calloc((size_t)threads, sizeof *rd);
    int started = 0, rc = 0;
    const double t0 = mp_now_s();
    if (!tid || !rd) {
        fprintf(stderr, "host_load: out of memory\n");
        rc = 1;
    }
    for (; !rc && started < threads; started++) {
        const int t = started;
        rd[t] = (mp_host_reader){buf + share * (size_t)t, share, &running, (int)(first + t), 0, 0};
        if (pthread_create(&tid[t], NULL, write ? writer_loop : mp_host_reader_loop, &rd[t])) {
            fprintf(stderr, "host_load: cannot start thread %d\n", t);
            rc = 1;
            break;
        }
    }
    if (!rc) {
        touch(ready);
        while (running && (seconds <= 0 || mp_now_s() - t0 < seconds))
            usleep(10000);
    }
    running = 0;
    uint64_t moved = 0, sum = 0;
    for (int t = 0; t < started; t++) {
        pthread_join(tid[t], NULL);
        moved += rd[t].bytes;
        sum += rd[t].sum;
    }
    const double dt = mp_now_s() - t0;
    if (!rc)
        fprintf(stderr, "host_load: %s %d threads on CPUs %ld-%ld %.1f GB/s over %.1f s\n", write ? "wr" : "cpu",
                threads, first, first + threads - 1, (double)moved / dt / 1e9, dt);
    sink = sum;
    free(rd);
    free(tid);
    free(buf);
    return rc;
}

static void usage(void)
{
    printf("usage: host_load [--mode d2h|cpu|wr] [--gib N=2] [--threads T=4] [--skip K=0] [--seconds S=0]\n"
           "                 [--ready FILE]\n"
           "  d2h: the GPU's copy engine writes a pinned host buffer (no core taken);\n"
           "  cpu: T reader threads on the host's last T CPUs, less the last K;\n"
           "  wr:  T writer threads there (non-temporal stores: the GPU's link left alone).\n"
           "  Runs until SIGTERM/SIGINT or S seconds; prints the GB/s it moved on exit.\n");
}

int main(int argc, char **argv)
{
    const char *mode = "d2h", *ready = NULL;
    double gib = 2, seconds = 0;
    int threads = 4, skip = 0;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--help") || !strcmp(argv[i], "-h")) {
            usage();
            return 0;
        } else if (!strcmp(argv[i], "--mode") && i + 1 < argc)
            mode = argv[++i];
        else if (!strcmp(argv[i], "--gib") && i + 1 < argc)
            gib = atof(argv[++i]);
        else if (!strcmp(argv[i], "--threads") && i + 1 < argc)
            threads = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--skip") && i + 1 < argc)
            skip = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--seconds") && i + 1 < argc)
            seconds = atof(argv[++i]);
        else if (!strcmp(argv[i], "--ready") && i + 1 < argc)
            ready = argv[++i];
        else {
            fprintf(stderr, "host_load: unknown argument '%s' (see --help)\n", argv[i]);
            return 2;
        }
    }
    if (gib < 0.25 || gib > 1024 || threads < 1 || threads > 1024 || skip < 0 || skip > 1024 || seconds < 0) {
        fprintf(stderr, "host_load: expected --gib in 0.25..1024, --threads in 1..1024, --skip in 0..1024, --seconds >= 0\n");
        return 2;
    }
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_signal;
    sigaction(SIGTERM, &sa, NULL);
    sigaction(SIGINT, &sa, NULL);
    const size_t bytes = (size_t)(gib * 1073741824.0);
    if (!strcmp(mode, "d2h"))
        return load_d2h(bytes, seconds, ready);
    if (!strcmp(mode, "cpu") || !strcmp(mode, "wr"))
        return load_cpu(bytes, threads, skip, seconds, ready, !strcmp(mode, "wr"));
    fprintf(stderr, "host_load: --mode '%s': expected d2h, cpu or wr\n", mode);
    return 2;
}
