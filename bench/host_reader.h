/* bench/host_reader.h — a thread that streams host memory, for the probes that load the host
 * (membw_pcie.cu: the cores beside the GPU's reads; host_load.cu: a neighbour taking bandwidth).
 *
 * A reader sums its share of a buffer much larger than the last-level cache, a MiB at a time,
 * wrapping at its end, until *run turns 0, and counts the bytes it has read (atomic: read them
 * while it runs). With cpu >= 0 it first pins itself there. */
#ifndef MP_BENCH_HOST_READER_H
#define MP_BENCH_HOST_READER_H

#include <pthread.h>
#include <sched.h>
#include <stddef.h>
#include <stdint.h>

#define MP_READER_CHUNK (1u << 20) /* a reader counts its bytes per MiB read */

typedef struct {
    const uint64_t *base;
    size_t words;      /* its share, a multiple of MP_READER_CHUNK / 8, at least one */
    volatile int *run; /* 1: read, 0: stop */
    int cpu;           /* pinned here; -1: not pinned */
    uint64_t bytes;    /* read so far (atomic) */
    uint64_t sum;      /* what it summed, for its caller to keep (so the loads stay) */
} mp_host_reader;

/* The calling thread pinned to CPU cpu (< 0: left where it is). */
static void mp_host_thread_pin(int cpu)
{
    if (cpu < 0)
        return;
    cpu_set_t set;
    CPU_ZERO(&set);
    CPU_SET(cpu, &set);
    pthread_setaffinity_np(pthread_self(), sizeof set, &set);
}

static void *mp_host_reader_loop(void *arg)
{
    mp_host_reader *r = (mp_host_reader *)arg;
    mp_host_thread_pin(r->cpu);
    uint64_t s0 = 0, s1 = 0, s2 = 0, s3 = 0;
    const size_t per_chunk = MP_READER_CHUNK / 8;
    size_t at = 0;
    while (__atomic_load_n(r->run, __ATOMIC_ACQUIRE)) {
        const uint64_t *p = r->base + at;
        for (size_t i = 0; i < per_chunk; i += 4) {
            s0 += p[i];
            s1 += p[i + 1];
            s2 += p[i + 2];
            s3 += p[i + 3];
        }
        __atomic_fetch_add(&r->bytes, (uint64_t)MP_READER_CHUNK, __ATOMIC_RELAXED);
        at = at + 2 * per_chunk <= r->words ? at + per_chunk : 0;
    }
    r->sum = s0 + s1 + s2 + s3;
    return NULL;
}

#endif
