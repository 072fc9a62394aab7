/* runtime/bench.h — the measuring core of `moeplan bench` (runtime/cmd_bench.c prints it).
 *
 * A test is pp N (one prefill of N tokens into an empty cache) or tg N (a 1-token prompt, then N
 * single-token decode steps; only the N steps are timed). Token ids are pseudo-random, valid
 * (0 <= id < n_vocab) and a pure function of (seed, test kind, N), so two runs feed the model the
 * same ids. Every timed eval computes the last row's logits, as a real request would.
 *
 * Invariants: mp_bench_run_test leaves the session reset; samples_tok_s[i] > 0 for every rep it
 * reports (a zero or negative elapsed time is clamped to one nanosecond, never divided by).
 */
#ifndef MP_RUNTIME_BENCH_H
#define MP_RUNTIME_BENCH_H

#include <stdint.h>

#include "base/error.h"
#include "runtime/session.h"

typedef enum mp_bench_kind { MP_BENCH_PP = 0, MP_BENCH_TG = 1 } mp_bench_kind;

typedef struct mp_bench_stats {
    double median, min, max, mean, stddev; /* tok/s; stddev is the sample one (n-1), 0 for n=1 */
} mp_bench_stats;

/* Statistics over v (n >= 1 values; v is not modified). */
void mp_bench_stats_compute(const double *v, int n, mp_bench_stats *out);

/* Fill ids (n) with deterministic pseudo-random token ids in [0, n_vocab). */
void mp_bench_tokens(uint64_t seed, mp_bench_kind kind, int64_t n_vocab, int32_t *ids, int64_t n);

/* Positions a test needs in the KV cache: N for pp N, 1 + N for tg N. */
int64_t mp_bench_positions(mp_bench_kind kind, int64_t n);

/* Run one test: one untimed warm-up, then reps timed repetitions, each from an empty cache and
 * the route source's first row (mp_session_restart_routes).
 * samples_tok_s: (reps) tokens per second of each timed repetition. logits: (n_vocab) scratch.
 * progress, if not NULL, is called before each repetition (rep -1 is the warm-up). */
typedef void (*mp_bench_progress_fn)(void *ctx, int rep, int reps);
mp_status mp_bench_run_test(mp_session *s, mp_bench_kind kind, int64_t n, uint64_t seed,
                            int64_t n_vocab, int reps, float *logits, double *samples_tok_s,
                            mp_bench_progress_fn progress, void *progress_ctx, mp_error *err);

/* Host memory read bandwidth in GB/s (10^9 bytes/s): `threads` threads each stream a contiguous
 * share of a buffer of `bytes` (pages touched first, so no fault is timed) over and over, and the
 * rate is what all of them read in 0.15 s once up to speed, the best of `reps`; what a
 * multithreaded matrix-vector product over weights in host memory draws. The buffer holds at least
 * 1 MiB a thread (more than `bytes` where the threads are many). 0 when threads or reps < 1, or the
 * buffer or a thread cannot be had. Used by bench/membw.c, `moeplan bench` for the
 * decode bound, calibrate ($.host_read) and plan's check. */
double mp_bench_host_read_gbs(size_t bytes, int threads, int reps);

/* The buffer of every host-read probe (calibrate's level, plan's check, bench's decode bound), one
 * rule so that their numbers compare: 1 GiB (quick: 256 MiB, calibrate --quick), and at least four
 * times the CPU's last-level cache, so that the probe reads DRAM, as a decode's experts do. */
size_t mp_bench_host_probe_bytes(bool quick);

/* Host memory read by two readers at once, in GB/s over one interval of the host's clock: the cores
 * (`threads` threads streaming a buffer of `bytes`, as mp_bench_host_read_gbs) and the bus (the
 * GPU executor g reading its page-locked copy of the cold experts with the far routes' loads,
 * mp_gpu_bus_read) for `seconds`; the repetition of `reps` whose sum was largest. What far routes
 * and CPU experts can draw together: on the H200 hosts 135-160 GB/s (cores 83-109 + bus 42-49)
 * where the cores alone read 112-155 (bench/NOTES-gpu-exec.md run 39). All 0 (MP_OK) when g has no
 * such copy; an error when the buffer, a thread or the GPU's reads fail. */
#define MP_BENCH_HOST_BUS_SECONDS 0.3 /* each repetition of bench's and calibrate's probes */
typedef struct mp_bench_two_readers {
    double cpu_gbs, bus_gbs;
} mp_bench_two_readers;
mp_status mp_bench_host_bus(mp_gpu *g, size_t bytes, int threads, int reps, double seconds,
                            mp_bench_two_readers *out, mp_error *err);

/* The bound of a hybrid decode step, all per step in milliseconds:
 *   gpu  = the step's wall time minus the gaps at its hybrid layers, plus the GPU's work inside the
 *          gaps of warm layer steps (every route on a resident expert: no cold read to overlap)
 *          (the GPU part; the resident experts of a step with cold routes overlap its cold reads);
 *   cpu  = the bytes of the CPU's experts / the host's read bandwidth (the CPU part at bandwidth);
 *   sync = hybrid layers x the round trip's overhead per layer (measured);
 *   bound = max(gpu, cpu) + sync: optimistic, since a layer's GPU and CPU work depend on each
 *   other in layer order;
 *   serial = gpu + cpu + sync: no overlap at all, which is what a step whose hybrid layers keep
 *   nothing of theirs on the GPU (layers:N) can reach at best at batch 1;
 *   hostbus = gpu + cold / rate + sync: serial, with every cold expert byte (the CPU's and the far
 *   routes') read by the cores and the bus at once, at the decision model's floor rate
 *   (runtime/decide.h mp_decide_hostbus_ns: together_gbs, the two readers measured at once, where
 *   > 0, else host + bus); 0 when neither the bus's rate nor the two readers' is known. */
typedef struct mp_bench_bound {
    double gpu_ms, warm_ms, cpu_ms, sync_ms, bound_ms, serial_ms, hostbus_ms; /* warm: of gpu, the warm steps' */
} mp_bench_bound;
void mp_bench_decode_bound(double step_ms, double gap_ms, double warm_ms, double cpu_bytes, double host_gbs,
                           double sync_ms, double cold_bytes, double bus_gbs, double together_gbs,
                           mp_bench_bound *out);

#endif
