/* runtime/bench.c — see bench.h. Timing uses CLOCK_MONOTONIC; ids come from splitmix64 so the
 * sequence depends only on (seed, kind, N) and not on the C library's rand(). */
#include "runtime/bench.h"
#include "base/machine.h"
#include "runtime/decide.h"
#include "base/clock.h"
#include "runtime/gpu.h"

#include <math.h>
#include <pthread.h>
#include <sched.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static int cmp_double(const void *a, const void *b)
{
    const double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

void mp_bench_stats_compute(const double *v, int n, mp_bench_stats *out)
{
    *out = (mp_bench_stats){0};
    if (n < 1)
        return;
    double sorted[n > 0 ? n : 1]; /* n is the repetition count (<= 1000, checked by the caller) */
    memcpy(sorted, v, (size_t)n * sizeof *v);
    qsort(sorted, (size_t)n, sizeof *sorted, cmp_double);
    out->min = sorted[0];
    out->max = sorted[n - 1];
    out->median = n % 2 ? sorted[n / 2] : 0.5 * (sorted[n / 2 - 1] + sorted[n / 2]);
    double sum = 0;
    for (int i = 0; i < n; i++)
        sum += v[i];
    out->mean = sum / n;
    double ss = 0;
    for (int i = 0; i < n; i++)
        ss += (v[i] - out->mean) * (v[i] - out->mean);
    out->stddev = n > 1 ? sqrt(ss / (n - 1)) : 0.0;
}

static uint64_t splitmix64(uint64_t *x)
{
    uint64_t z = (*x += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

void mp_bench_tokens(uint64_t seed, mp_bench_kind kind, int64_t n_vocab, int32_t *ids, int64_t n)
{
    uint64_t x = seed ^ ((uint64_t)kind << 62) ^ ((uint64_t)n * 0x2545f4914f6cdd1dull);
    for (int64_t i = 0; i < n; i++)
        ids[i] = (int32_t)(splitmix64(&x) % (uint64_t)n_vocab);
}

int64_t mp_bench_positions(mp_bench_kind kind, int64_t n)
{
    return kind == MP_BENCH_PP ? n : 1 + n;
}

/* One repetition from an empty cache and, under route replay, from the replay's first row: every
 * run decodes the same tokens with the same routes, so its repetitions measure the same work (and
 * plan's check the rows its prediction covers). Returns tok/s of the timed part in *tok_s. */
static mp_status run_once(mp_session *s, mp_bench_kind kind, const int32_t *ids, int64_t n,
                          float *logits, double *tok_s, mp_error *err)
{
    mp_status st;
    mp_session_reset(s);
    mp_session_restart_routes(s);
    double t0, t1;
    if (kind == MP_BENCH_PP) {
        t0 = mp_now_s();
        st = mp_session_eval(s, ids, n, false, logits, err);
        t1 = mp_now_s();
    } else {
        /* ids[0] is the 1-token prompt (untimed); ids[1..n] are fed one decode step each */
        if ((st = mp_session_eval(s, ids, 1, false, logits, err)))
            return st;
        t0 = mp_now_s();
        for (int64_t i = 1; i <= n && !st; i++)
            st = mp_session_eval(s, ids + i, 1, false, logits, err);
        t1 = mp_now_s();
    }
    if (st)
        return st;
    const double dt = t1 - t0 > 1e-9 ? t1 - t0 : 1e-9;
    *tok_s = (double)n / dt;
    return MP_OK;
}

mp_status mp_bench_run_test(mp_session *s, mp_bench_kind kind, int64_t n, uint64_t seed,
                            int64_t n_vocab, int reps, float *logits, double *samples_tok_s,
                            mp_bench_progress_fn progress, void *progress_ctx, mp_error *err)
{
    const int64_t n_ids = mp_bench_positions(kind, n);
    if (n < 1 || reps < 1 || n_vocab < 1)
        return mp_fail(err, MP_ERR_ARG, "bench: test size %lld, %d repetitions and %lld vocabulary "
                       "entries must be positive", (long long)n, reps, (long long)n_vocab);
    if (n_ids > mp_session_n_ctx(s))
        return mp_fail(err, MP_ERR_LIMIT, "bench: %s %lld needs %lld positions, more than the "
                       "context of %lld", kind == MP_BENCH_PP ? "pp" : "tg", (long long)n,
                       (long long)n_ids, (long long)mp_session_n_ctx(s));
    int32_t *ids = malloc((size_t)n_ids * sizeof *ids);
    if (!ids)
        return mp_fail(err, MP_ERR_NOMEM, "bench: out of memory for %lld token ids",
                       (long long)n_ids);
    mp_bench_tokens(seed, kind, n_vocab, ids, n_ids);
    mp_status st = MP_OK;
    double unused;
    for (int rep = -1; rep < reps && !st; rep++) {
        if (progress)
            progress(progress_ctx, rep, reps);
        st = run_once(s, kind, ids, n, logits, rep < 0 ? &unused : &samples_tok_s[rep], err);
    }
    mp_session_reset(s);
    free(ids);
    return st;
}

/* ---- host read bandwidth ---- */

/* each repetition of mp_bench_host_read_gbs: long enough that the 20 ms before it and a core's
 * pause are small beside it */
#define HOST_READ_SECONDS 0.15

/* A reader: streams its share over and over until told to stop, counting the bytes it has read per
 * chunk, so that the caller can take what all read in an interval of its own clock. */
#define STREAM_CHUNK ((size_t)1 << 20)
typedef struct stream_share {
    const uint64_t *begin;
    size_t n_words; /* a multiple of STREAM_CHUNK / 8 */
    uint64_t sum;   /* kept so the compiler cannot drop the loads */
    const int *go, *stop;
    uint64_t bytes; /* read so far (atomic) */
} stream_share;

/* Sum the share with vectors of W bytes, four in flight, so that a core's instructions do not
 * bound what it can stream: 16-byte (SSE2, every x86-64) or, where the CPU has AVX2, 32-byte. */
#define STREAM_SUM(W)                                                                              \
    typedef uint64_t vec __attribute__((vector_size(W), aligned(W)));                              \
    while (!__atomic_load_n(w->go, __ATOMIC_ACQUIRE))                                              \
        sched_yield(); /* the caller is still creating threads, maybe on this core */              \
    vec a = {0}, b = a, c = a, d = a;                                                              \
    const size_t chunk_words = STREAM_CHUNK / 8, n = STREAM_CHUNK / (W);                           \
    for (size_t at = 0; !__atomic_load_n(w->stop, __ATOMIC_ACQUIRE);                               \
         at = at + 2 * chunk_words <= w->n_words ? at + chunk_words : 0) {                         \
        const vec *p = (const vec *)(w->begin + at);                                               \
        for (size_t i = 0; i < n; i += 4) {                                                        \
            a += p[i];                                                                             \
            b += p[i + 1];                                                                         \
            c += p[i + 2];                                                                         \
            d += p[i + 3];                                                                         \
        }                                                                                          \
        __atomic_fetch_add(&w->bytes, (uint64_t)STREAM_CHUNK, __ATOMIC_RELAXED);                   \
    }                                                                                              \
    const vec s = a + b + c + d;                                                                   \
    for (size_t k = 0; k < (W) / 8; k++)                                                           \
        w->sum += s[k];                                                                            \
    return NULL;

static void *stream_words(void *arg)
{
    stream_share *w = arg;
    STREAM_SUM(16)
}

#if defined(__x86_64__) || defined(__i386__)
__attribute__((target("avx2"))) static void *stream_words_avx2(void *arg)
{
    stream_share *w = arg;
    STREAM_SUM(32)
}
#define STREAM_WORDS_WIDE() (__builtin_cpu_supports("avx2") ? stream_words_avx2 : stream_words)
#else /* the 16-byte words are the widest a vector register of the other families holds */
#define STREAM_WORDS_WIDE() stream_words
#endif

static uint64_t streamed(stream_share *w, int n)
{
    uint64_t b = 0;
    for (int t = 0; t < n; t++)
        b += __atomic_load_n(&w[t].bytes, __ATOMIC_RELAXED);
    return b;
}

/* The probe's buffer: `threads` shares of whole chunks, at least one a thread (a host of many
 * threads reads more than `bytes` then: 512 threads, 512 MiB), every page touched before any
 * timing; NULL when memory is short. */
static uint64_t *stream_buffer(size_t bytes, int threads, size_t *share)
{
    const size_t chunk_words = STREAM_CHUNK / 8;
    *share = threads > 0 ? bytes / 8 / (size_t)threads / chunk_words * chunk_words : 0;
    if (threads < 1)
        return NULL;
    if (*share < chunk_words)
        *share = chunk_words;
    uint64_t *buf = aligned_alloc(4096, *share * 8 * (size_t)threads);
    if (buf)
        memset(buf, 1, *share * 8 * (size_t)threads);
    return buf;
}

/* One repetition: `threads` readers stream their shares; once they are up to speed (20 ms), the
 * interval is `seconds` of sleep (g NULL) or the GPU's reads of its host copy for that long
 * (mp_gpu_bus_read); *cpu_gbs and *bus_gbs are what each drew in it. Taking what the cores read in
 * an interval, rather than the time until the slowest of them has read its share, keeps a core
 * that the host lends elsewhere for a moment from setting the rate of all (on the H200 host the
 * latter gave 52-100 GB/s where the former gave 99-107 in the same processes, 2026-12-04). */
static mp_status stream_once(const uint64_t *buf, size_t share, int threads, mp_gpu *g, double seconds,
                             pthread_t *tid, stream_share *w, double *cpu_gbs, double *bus_gbs, mp_error *err)
{
    *cpu_gbs = *bus_gbs = 0;
    void *(*reader)(void *) = STREAM_WORDS_WIDE();
    int go = 0, stop = 0, started = 0;
    for (; started < threads; started++) {
        w[started] = (stream_share){buf + share * (size_t)started, share, 0, &go, &stop, 0};
        if (pthread_create(&tid[started], NULL, reader, &w[started]))
            break;
    }
    __atomic_store_n(&go, 1, __ATOMIC_RELEASE);
    mp_status st = MP_OK;
    if (started == threads) {
        const struct timespec up = {0, 20 * 1000 * 1000};
        nanosleep(&up, NULL);
        const uint64_t c0 = streamed(w, started);
        const double t0 = mp_now_s();
        uint64_t bus = 0;
        if (g) {
            st = mp_gpu_bus_read(g, seconds, &bus, err);
        } else {
            const struct timespec win = {(time_t)seconds, (long)((seconds - (double)(time_t)seconds) * 1e9)};
            nanosleep(&win, NULL);
        }
        const double dt = mp_now_s() - t0;
        const uint64_t c1 = streamed(w, started);
        if (!st && dt > 0)
            *cpu_gbs = (double)(c1 - c0) / dt / 1e9, *bus_gbs = (double)bus / dt / 1e9;
    }
    __atomic_store_n(&stop, 1, __ATOMIC_RELEASE);
    for (int t = 0; t < started; t++)
        pthread_join(tid[t], NULL);
    if (!st && started < threads) {
        *cpu_gbs = *bus_gbs = 0;
        st = mp_fail(err, MP_ERR_NOMEM, "cannot start %d threads", threads);
    }
    return st;
}

/* On the H200 machine's Emerald Rapids host (320 MB of L3 the VM reports), calibrate --quick's
 * former fixed 256 MiB read 252-285 GB/s against 110 from DRAM with 1 GiB, and plan's check then
 * scaled the CPU costs by the ratio of the two: predictions off by -61 % to +673 % on the shape
 * sweep's small models (2026-12-05). */
size_t mp_bench_host_probe_bytes(bool quick)
{
    const size_t base = quick ? (size_t)256 << 20 : (size_t)1 << 30, llc4 = 4 * mp_cpu_llc_bytes();
    return llc4 > base ? llc4 : base;
}

double mp_bench_host_read_gbs(size_t bytes, int threads, int reps)
{
    size_t share = 0;
    uint64_t *buf = threads > 0 && reps > 0 ? stream_buffer(bytes, threads, &share) : NULL;
    pthread_t *tid = buf ? calloc((size_t)threads, sizeof *tid) : NULL;
    stream_share *w = buf ? calloc((size_t)threads, sizeof *w) : NULL;
    double best = 0;
    mp_error err;
    for (int r = 0; tid && w && r < reps; r++) {
        double cpu = 0, unused = 0;
        if (stream_once(buf, share, threads, NULL, HOST_READ_SECONDS, tid, w, &cpu, &unused, &err)) {
            best = 0; /* fewer threads than asked: no valid number */
            break;
        }
        best = cpu > best ? cpu : best;
    }
    free(buf);
    free(tid);
    free(w);
    return best;
}

mp_status mp_bench_host_bus(mp_gpu *g, size_t bytes, int threads, int reps, double seconds,
                            mp_bench_two_readers *out, mp_error *err)
{
    *out = (mp_bench_two_readers){0};
    size_t share = 0;
    if (threads < 1 || reps < 1 || !(seconds > 0))
        return mp_fail(err, MP_ERR_ARG, "host+bus probe: %d threads, %d repetitions of %g s: expected each > 0",
                       threads, reps, seconds);
    uint64_t *buf = stream_buffer(bytes, threads, &share);
    pthread_t *tid = calloc((size_t)threads, sizeof *tid);
    stream_share *w = calloc((size_t)threads, sizeof *w);
    mp_status st = MP_OK;
    if (!buf || !tid || !w)
        st = mp_fail(err, MP_ERR_NOMEM, "host+bus probe: out of memory for a %zu-byte buffer",
                     share * 8 * (size_t)threads);
    for (int r = 0; r < reps && !st; r++) {
        double cpu = 0, bus = 0;
        if ((st = stream_once(buf, share, threads, g, seconds, tid, w, &cpu, &bus, err)))
            mp_error_prefix(err, "host+bus probe");
        else if (bus > 0 && cpu + bus > out->cpu_gbs + out->bus_gbs)
            *out = (mp_bench_two_readers){cpu, bus};
    }
    if (st)
        *out = (mp_bench_two_readers){0};
    free(buf);
    free(tid);
    free(w);
    return st;
}

void mp_bench_decode_bound(double step_ms, double gap_ms, double warm_ms, double cpu_bytes, double host_gbs,
                           double sync_ms, double cold_bytes, double bus_gbs, double together_gbs,
                           mp_bench_bound *out)
{
    /* the warm steps' GPU work lies inside the gaps: at most all of them */
    const double warm = fmin(fmax(warm_ms, 0), fmax(gap_ms, 0));
    out->gpu_ms = fmax(step_ms - gap_ms + warm, 0);
    out->warm_ms = fmin(warm, out->gpu_ms);
    out->cpu_ms = host_gbs > 0 ? cpu_bytes / (host_gbs * 1e9) * 1e3 : 0;
    out->sync_ms = sync_ms;
    out->bound_ms = (out->gpu_ms > out->cpu_ms ? out->gpu_ms : out->cpu_ms) + out->sync_ms;
    out->serial_ms = out->gpu_ms + out->cpu_ms + out->sync_ms;
    /* GB/s are bytes per ns: the decision model's floor for the cold bytes */
    out->hostbus_ms = host_gbs > 0 && (bus_gbs > 0 || together_gbs > 0)
                          ? out->gpu_ms + mp_decide_hostbus_ns(cold_bytes, host_gbs, bus_gbs, together_gbs) * 1e-6 +
                                out->sync_ms
                          : 0;
}
