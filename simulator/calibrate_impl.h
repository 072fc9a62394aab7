/* simulator/calibrate_impl.h — what the calibrate parts share (internal to simulator/calibrate*.c).
 *
 * Every benchmark collects `n` samples in ns and turns them into one JSON point with
 * mp_calib_point: the samples are sorted in place, the median and p75 - p25 taken by linear
 * interpolation between order statistics, rounded to whole ns.
 */
#ifndef MP_SIMULATOR_CALIBRATE_IMPL_H
#define MP_SIMULATOR_CALIBRATE_IMPL_H

#include <cjson/cJSON.h>
#include <stdint.h>

#include "base/error.h"
#include "runtime/model.h"
#include "runtime/placement.h"
#include "runtime/session.h"
#include "base/clock.h"
#include "simulator/calibrate.h"

/* Unrecorded repetitions before a measurement's first recorded one (fewer with --quick). */
int mp_calib_warmups(const mp_calib_opts *o);
/* A progress line through o->progress (if set), printf-style. */
void mp_calib_say(const mp_calib_opts *o, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* Sort ns (n >= 1) ascending, in place: what mp_calib_quantile needs. */
void mp_calib_sort(double *ns, int n);
/* Quantile q in [0, 1] of ns (n >= 1), which must be sorted ascending. */
double mp_calib_quantile(const double *sorted, int n, double q);
/* The median of ns (n >= 1), sorting them in place. */
double mp_calib_median(double *ns, int n);
/* (p75 - p25) / median of n samples (left as they are); 0 for fewer than 2 or a median <= 0. */
double mp_calib_rel_spread(const double *ns, int n);
/* The points that take another repetition: point i's n[i] samples lie at samples + i * stride;
 * those spread (mp_calib_rel_spread) more than max_rel with fewer than max_n samples (and fewer than
 * stride) are written to idx in order. Returns how many. */
int mp_calib_noisy_points(const double *samples, const int *n, int n_pts, int stride, double max_rel, int max_n,
                          int *idx);
/* The decode grid's points that take the passes after the first (keep[i]): every point with no far
 * unit (far[i] <= 0: far routes off, or on with none run: the levels the others are weighed
 * against, charged on every step that runs none), and each point with far units whose median so far
 * is at most margin x the least median of its cold count (cold[i]). Point i's n[i] samples lie at
 * samples + i * stride (n[i] >= 1; at most stride). The others stay at their first pass: a point
 * margin x slower than the best of its cold count is chosen only on a host whose parts run margin x
 * slower than the grid measured them. Returns how many are kept. */
int mp_calib_grid_contenders(const double *samples, const int *n, const int *cold, const int *far, int n_pts,
                             int stride, double margin, bool *keep);
/* A point whose samples spread (p75 - p25) more than MP_CALIB_SPREAD_MAX of their median takes more
 * samples, interleaved over such points only (the decode grid's passes, the CPU expert curves):
 * olmoe's grid (H200 host, 2026-12-02) had 12 of its 54 points above 5 %, and its (8 cold, 2 far)
 * point, at a spread of 14 % over 3 passes, put every first-n-cpu row of the accuracy matrix 4-10 %
 * above bench (bench/NOTES-simulator.md). */
#define MP_CALIB_SPREAD_MAX 0.05
/* One timing of point i of a curve, in ns (mp_calib_curve). */
typedef double (*mp_calib_timing)(void *user, int point);
/* A curve's n_pts points (at most MP_CALIB_CURVE_POINTS_MAX) timed in turn, so that the host's drift
 * spreads over all of them rather than landing on the points timed while it lasted: mp_calib_warmups
 * passes unrecorded, o->reps passes recorded, then passes over the points that spread more than
 * MP_CALIB_SPREAD_MAX (mp_calib_noisy_points), up to MP_CALIB_CURVE_SAMPLES x o->reps samples a
 * point, while those passes have taken less time than the recorded ones did. Point i's n[i] samples
 * go to samples + i x MP_CALIB_CURVE_SAMPLES x o->reps. Returns how many points took more than
 * o->reps samples. */
#define MP_CALIB_MAX_KS 32
enum {
    MP_CALIB_CURVE_SAMPLES = 3,
    MP_CALIB_CURVE_POINTS_MAX = MP_CALIB_LIST_MAX > MP_CALIB_MAX_KS ? MP_CALIB_LIST_MAX : MP_CALIB_MAX_KS
};
int mp_calib_curve(const mp_calib_opts *o, int n_pts, mp_calib_timing time_point, void *user, double *samples, int *n);
/* {x_key: x, "median_ns", "spread_ns"} from n samples (sorted in place); NULL on out of memory. */
cJSON *mp_calib_point(const char *x_key, double x, double *ns, int n);
/* The expert counts of the `concurrent` curves: 1, 2, .., min(top_k, 8), then doubling, and top_k
 * (at most MP_CALIB_MAX_KS, above); returns how many. */
int mp_calib_concurrent_ks(const mp_model *m, int *ks);
/* Step `next` of a rotation over n_layers layers and every expert of each: the layer (an index into
 * the caller's list of n_layers) and, in ids, the step's top_k distinct experts, top_k consecutive
 * ids mod n_expert (n_expert >= top_k), the group moving on after each pass over the layers: a
 * group taken from next alone would repeat in a layer whenever the layers' count and n_expert /
 * top_k share factors (48 layers, 128 / 8: every layer always read the same 8 experts, 1.2 GB in
 * all, warm in the caches). */
int64_t mp_calib_rotation(int64_t next, int64_t n_layers, int64_t top_k, int64_t n_expert, int32_t *ids);
/* A footprint of at least this many CPU last-level caches reads from memory when streamed through:
 * smaller, calibrate's CPU times are cache-warm (said), and the grid's pool keeps its cold routes
 * on at least this much of a model that is larger (mp_calib_grid_pool). */
#define MP_CALIB_LLC_MEMORY 4
/* Random floats in [-1, 1) from a fixed-seed generator (benchmarks need values, not zeros:
 * quantizers and kernels take no shortcut on them). */
void mp_calib_fill(float *x, int64_t n, uint64_t *state);


/* Every page of layer L's expert tensors mapped into this process (calibrate_cpu.c): the model is
 * mmap'd, and a benchmark that rotates over thousands of experts would otherwise time the kernel's
 * page-fault path in each repetition. */
void mp_calib_prefault_experts(const mp_layer *L);

/* The tuned knobs (calibrate_tune.c). MP_PREFETCH_BYTES: where k has it at its default, a decode
 * step's CPU experts (one row, top_k experts, the largest thread count) timed at each candidate
 * distance, alternated round by round; the fastest median is taken when it beats the default's by
 * more than MP_CALIB_PREFETCH_MARGIN in most rounds (mp_calib_prefetch_pick), set in k (source calibrated) and in
 * the kernels, and *out gets {"knob", "threads", "experts_a_call", "rounds", "calls_a_round",
 * "margin", "points": [{"bytes", "median_ns", "spread_ns"}], "chosen"}. Where the environment set
 * it, nothing is timed and *out is {"knob", "chosen", "why"}. */
#define MP_CALIB_PREFETCH_MARGIN 0.05
mp_status mp_calib_tune_prefetch(const mp_model *m, const mp_calib_opts *o, mp_knobs *k, cJSON **out,
                                 mp_error *err);
/* Of n candidates (bytes[i], its rounds x calls samples at ns + i x rounds x calls, a round's calls
 * together; a median <= 0: not measured), the one of the least median over all its samples where
 * that median is under (1 - margin) x the default's and its round's median beats the default's in
 * at least rounds - rounds / 4 of the rounds (all of 3, 4 of 5: a host that drifted in one round
 * does not pick it); else dflt (also when dflt is not among them, or out of memory). ns is left as it is. */
int64_t mp_calib_prefetch_pick(const int64_t *bytes, const double *ns, int n, int rounds, int calls, int64_t dflt,
                               double margin);

/* MP_AMX_ROWS (calibrate_amx.c): where k has it at its default and the kernels run AMX tiles, each
 * expert type of the model with a tile GEMM timed on the runtime's expert call (the largest thread
 * count, every row of a call routed to the same top_k experts) at 2-32 rows, tiles against dots;
 * per type the rows from which the tiles lose least (mp_calib_amx_pick), set in k (source
 * calibrated, "TYPE:ROWS,...") and in the kernels; *out gets {"knob", "threads", "experts_a_call",
 * "rounds", "calls_a_round", "margin", "types": [{"type", "layers", "table", "chosen", "points":
 * [{"rows", "tiles_ns", "dots_ns"}]}], "chosen"}. Not measured (the environment set it, no tiles
 * here, no type with a tile GEMM): *out is {"knob", "chosen", "why"}. */
#define MP_CALIB_AMX_MARGIN 0.01
mp_status mp_calib_tune_amx_rows(const mp_model *m, const mp_calib_opts *o, mp_knobs *k, cJSON **out,
                                 mp_error *err);
/* Of the grid's rows[0 .. n) (ascending) with the tiles' and the dots' median ns at each (<= 0: not
 * measured), the rows t (one of them, or rows[n - 1] + 1: none) from which the tiles lose least
 * against the faster arm, by the mean over the grid of (the mix's ns / the faster's) - 1; dflt
 * unless t loses less than it by more than margin. */
int mp_calib_amx_pick(const double *tiles, const double *dots, const int *rows, int n, int dflt, double margin);

/* Appends the cpu_expert entries to arr; adds facts (rotation footprint, caches) to device. */
mp_status mp_calib_cpu_experts(const mp_model *m, const mp_calib_opts *o, cJSON *arr, cJSON *device,
                               mp_error *err);
/* The combine curve (rows) at the largest thread count. */
mp_status mp_calib_combine(const mp_model *m, const mp_calib_opts *o, cJSON *arr, mp_error *err);
/* The non-MoE curve (rows) from mp_session_eval at the largest thread count. decode_moe_ns >= 0
 * (a GPU): the MoE time of a one-row step as the cost model charges it (every layer's `concurrent`
 * GPU point at top_k experts, measured as CUDA graphs); the one-row steps are then measured by the
 * context sweep (graph-replayed windows of 64 steps from each of mp_calib_context_starts), each
 * window's step minus it, so that the model rebuilds the measured steps: the first window (positions
 * 1 .. 64) is the one-row point, and *context gets $.non_moe_context {"points": every window's}
 * (NULL when the context holds one window). < 0: every point subtracts the MoE time of a step run
 * with the timing hooks, as multi-row points do. */
mp_status mp_calib_non_moe(const mp_model *m, const mp_calib_opts *o, cJSON *arr, cJSON *device,
                           double decode_moe_ns, cJSON **context, mp_error *err);
/* The starts of the context sweep's windows of `window` one-row steps in a context of n_ctx
 * positions: 1 (after a 1-token prompt: where bench's tg and production decode start), then 128,
 * 256, ... doubling (the time of attention bends most at short contexts) while a window fits
 * before the last one, and the last window of the context (n_ctx - window): into starts (cap
 * entries), ascending, each window clear of the next. Returns how many (0 when not even one fits). */
int mp_calib_context_starts(int64_t n_ctx, int window, int64_t *starts, int cap);
/* The GPU time of layers from_layer .. n_layer - 1 for one row routed to top_k experts each, from
 * root's gpu_expert entries (the last `concurrent` point of the entry of the layer's quant and
 * shape): what simulate charges those layers all resident; < 0 when an entry or its point is
 * missing. */
double mp_calib_decode_moe_ns(const mp_model *m, const cJSON *root, int64_t from_layer);
/* The decode grid's pool: experts per layer resident, as many as the device's free_bytes hold
 * beside the session's own fixed_bytes and reserve_bytes left free, one expert of every layer
 * taking row_bytes (0: no limit), and at most n_expert - top_k (a step with every route cold needs
 * top_k experts outside the pool); 0 when n_expert <= top_k. Where the model's experts (n_expert x
 * row_bytes) are at least MP_CALIB_LLC_MEMORY x llc_bytes (the CPU's last-level cache; 0: not known),
 * also at most n_expert - ceil(MP_CALIB_LLC_MEMORY x llc_bytes / row_bytes) but not under top_k: the
 * grid's cold routes then spread over experts that read from memory, as production's do at a
 * budget below the model (a pool of all but top_k left 3 layers x 10 experts, 100 MB, beside a
 * 105 MiB cache, and plan's check found its CPU experts 2x slower than the grid's). A smaller model's
 * cold routes read from the caches in production too, and its pool stays. */
int64_t mp_calib_grid_pool(int64_t n_expert, int64_t top_k, uint64_t row_bytes, uint64_t free_bytes,
                           uint64_t fixed_bytes, uint64_t reserve_bytes, uint64_t llc_bytes);
/* The once-per-step cost of hybrid steps (decode_layers.hybrid_step) from a step of n_layer layers
 * with one hybrid layer: step_ns its wall time, non_moe_ns the non-MoE time at its keys, resident_ns
 * what the model charges its other layers (resident), level_ns the grid's level of the hybrid
 * layer's point (measured with every layer hybrid, so holding S / n_layer). The model charges such a
 * step non_moe + resident + level - S / n_layer + S (simulator/sim_internal.h, sim_hybrid_layer_ns),
 * which is step_ns for S = (step - non_moe - resident - level) x n_layer / (n_layer - 1). 0 for one
 * layer (that step is the grid's). Not clamped: the repetitions' median is (mp_calib_point). */
double mp_calib_hybrid_step_ns(double step_ns, double non_moe_ns, double resident_ns, double level_ns,
                               int64_t n_layer);

/* The runtime measurements share these (calibrate_runtime.c, calibrate_grid.c): one-row steps are
 * timed in windows of MP_CALIB_CONTEXT_WINDOW back to back (the context sweep's windows, the decode
 * grid's runs), the context curve has at most MP_CALIB_CONTEXT_MAX points, and an executor whose
 * decode runs far routes as production does holds a batch of MP_CALIB_DECODE_BATCH_FAR rows (at least
 * MP_GPU_COPY_MIN_ROWS: the staging buffers far routes need come with it). */
#define MP_CALIB_CONTEXT_WINDOW 64
#define MP_CALIB_CONTEXT_MAX 24
#define MP_CALIB_DECODE_BATCH_FAR 64
_Static_assert(MP_CALIB_DECODE_BATCH_FAR >= MP_GPU_COPY_MIN_ROWS, "the grid's sessions have staging (mp_gpu_staging)");

/* A GPU-executor session of m with placement option opt (--placement, --placement-file) set to
 * val, sized by sp (n_ctx, n_batch, threads): sp->placement = pl on success; on failure
 * sp->placement is NULL, *s stays NULL and err says why ("placement: ..." when the placement could
 * not be built). */
mp_status mp_calib_gpu_session(const mp_model *m, const char *opt, const char *val, mp_session_params *sp,
                               mp_placement *pl, mp_session **s, mp_error *err);
/* With a usable GPU and the microbenchmark's "sync" in root: replaces it (kept in device as
 * "sync_microbenchmark") by the round trip's overhead as the GPU executor pays it in a decode step
 * (placement layers:1, CUDA graphs, mp_gpu_set_measure): the host's wake-up, its bookkeeping and
 * the flags' latency, which the microbenchmark's bare copy + sync + copy leaves out.
 * Without a device, or when the model cannot run on it, root is left as it is (said on stderr). */
mp_status mp_calib_runtime_sync(const mp_model *m, const mp_calib_opts *o, cJSON *root, cJSON *device,
                                mp_error *err);
/* $.decode_layers: the decode layer grid (runtime/decide.h) through the GPU executor, after the
 * non-MoE curve (each point is a step's wall time minus it at the step's keys), with a pool of
 * mp_calib_grid_pool experts a layer, each point a run of one-row steps after a 1-token prompt, and
 * its once-per-step cost of hybrid steps (hybrid_step) when the device holds every expert but one
 * layer's cold ones; with a usable GPU only. When the executor cannot measure it, an entry in
 * missing says why (not an error). */
mp_status mp_calib_decode_layers(const mp_model *m, const mp_calib_opts *o, cJSON *root, cJSON *device,
                                 cJSON *missing, mp_error *err);
/* One probe of the cores' read bandwidth of host memory (the largest thread count), kept in root's
 * scratch array for mp_calib_host_read: the decode grid takes one after each pass. */
mp_status mp_calib_host_probe(const mp_calib_opts *o, cJSON *root, mp_error *err);
/* One probe of host memory read by the cores and the bus at once (runtime/bench.h
 * mp_bench_host_bus, g the grid's executor), kept in root's $.host_bus when its sum is the best so
 * far ({"gbs", "cpu_gbs", "bus_gbs", "threads", "probes"}; runtime/costs.h); nothing when g has no
 * page-locked host copy, or when the probe fails (said, not an error: the floor then sums each reader
 * alone). The decode grid takes one after each pass, beside mp_calib_host_probe. */
mp_status mp_calib_host_bus_probe(const mp_calib_opts *o, cJSON *root, mp_gpu *g, mp_error *err);
/* $.host_read: the cores' read bandwidth of host memory at the largest thread count (the best of a
 * few rounds and of the grid's probes; the spread is best minus worst) and, where the grid took
 * probes (mp_calib_host_probe), level_gbs: their median, the level its CPU costs were measured at,
 * with level_probes. Consumes the scratch array. */
mp_status mp_calib_host_read(const mp_calib_opts *o, cJSON *root, mp_error *err);
/* Append {"what", "why"} to $.missing. */
mp_status mp_calib_missing(cJSON *missing, const char *what, const char *why, mp_error *err);

/* GPU parts (gpu/calibrate_cuda.c, in the GPU module: calibrate_run.c calls it through the module's
 * table, mp_calib_gpu_table). Adds "gpu_expert", "h2d", "d2h" and
 * "sync" to root and the GPU's facts to device; or, when no usable device exists, returns MP_OK
 * with the reason in why (root untouched). Errors are CUDA failures on a usable device. */
mp_status mp_calib_gpu(const mp_model *m, const mp_calib_opts *o, cJSON *root, cJSON *device, char *why,
                       size_t why_cap, mp_error *err);

/* fn(arg) on the calling thread while the GPU's copy engine reads a page-locked host buffer larger
 * than the CPU's caches over and over (host to device, 64 MiB a copy, as far routes and expert
 * copies read host memory beside a hybrid layer's CPU experts; the thread that issues them waits on
 * blocking events, taking no core). *gbs: what the bus read over fn's time. Without a usable device,
 * or without the page-locked host memory the bus reads: MP_OK, fn not called, why says why (*gbs 0).
 * Errors are other CUDA failures on a usable device. */
mp_status mp_calib_beside_bus(void (*fn)(void *), void *arg, double *gbs, char *why, size_t why_cap, mp_error *err);

typedef struct mp_calib_gpu_table {
    size_t size; /* sizeof(mp_calib_gpu_table) of the module's build: the loader checks it */
    mp_status (*gpu)(const mp_model *m, const mp_calib_opts *o, cJSON *root, cJSON *device, char *why,
                     size_t why_cap, mp_error *err);
    mp_status (*beside_bus)(void (*fn)(void *), void *arg, double *gbs, char *why, size_t why_cap, mp_error *err);
} mp_calib_gpu_table;

#endif
