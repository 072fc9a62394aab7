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
#include "simulator/calibrate.h"

int64_t mp_calib_now_ns(void);
/* Unrecorded repetitions before a measurement's first recorded one (fewer with --quick). */
int mp_calib_warmups(const mp_calib_opts *o);
/* A progress line through o->progress (if set), printf-style. */
void mp_calib_say(const mp_calib_opts *o, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* Sort ns (n >= 1) ascending, in place: what mp_calib_quantile needs. */
void mp_calib_sort(double *ns, int n);
/* Quantile q in [0, 1] of ns (n >= 1), which must be sorted ascending. */
double mp_calib_quantile(const double *sorted, int n, double q);
/* {x_key: x, "median_ns", "spread_ns"} from n samples (sorted in place); NULL on out of memory. */
cJSON *mp_calib_point(const char *x_key, double x, double *ns, int n);
/* The expert counts of the `concurrent` curves: 1, 2, .., min(top_k, 8), then doubling, and top_k
 * (at most MP_CALIB_MAX_KS); returns how many. */
#define MP_CALIB_MAX_KS 32
int mp_calib_concurrent_ks(const mp_model *m, int *ks);
/* Random floats in [-1, 1) from a fixed-seed generator (benchmarks need values, not zeros:
 * quantizers and kernels take no shortcut on them). */
void mp_calib_fill(float *x, int64_t n, uint64_t *state);


/* Appends the cpu_expert entries to arr; adds facts (rotation footprint, caches) to device. */
mp_status mp_calib_cpu_experts(const mp_model *m, const mp_calib_opts *o, cJSON *arr, cJSON *device,
                               mp_error *err);
/* The combine curve (rows) at the largest thread count. */
mp_status mp_calib_combine(const mp_model *m, const mp_calib_opts *o, cJSON *arr, mp_error *err);
/* The non-MoE curve (rows) from mp_session_eval at the largest thread count. decode_moe_ns >= 0
 * (a GPU): the MoE time of a one-row step as the cost model charges it (every layer's `concurrent`
 * GPU point at top_k experts, measured as CUDA graphs); the one-row point is then the
 * graph-replayed step near the start of the context minus it, so that the model rebuilds the
 * measured step, and *context gets $.non_moe_context (the point's mean keys and the step's cost
 * per key, from the same steps near 2,048 keys; NULL when not measured). < 0: every point
 * subtracts the MoE time of a step run with the timing hooks, as multi-row points do. */
mp_status mp_calib_non_moe(const mp_model *m, const mp_calib_opts *o, cJSON *arr, cJSON *device,
                           double decode_moe_ns, cJSON **context, mp_error *err);
/* Every layer's GPU time for one row routed to top_k experts, from root's gpu_expert entries (the
 * last `concurrent` point of the entry of the layer's quant and shape); < 0 when an entry or its
 * point is missing. */
double mp_calib_decode_moe_ns(const mp_model *m, const cJSON *root);

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
 * non-MoE curve (each point is a step's wall time minus it); with a usable GPU only. When the
 * executor cannot measure it, an entry in missing says why (not an error). */
mp_status mp_calib_decode_layers(const mp_model *m, const mp_calib_opts *o, cJSON *root, cJSON *device,
                                 cJSON *missing, mp_error *err);
/* $.host_read: the cores' read bandwidth of host memory at the largest thread count (best of a
 * few rounds; the spread is best minus worst). */
mp_status mp_calib_host_read(const mp_calib_opts *o, cJSON *root, mp_error *err);
/* Append {"what", "why"} to $.missing. */
mp_status mp_calib_missing(cJSON *missing, const char *what, const char *why, mp_error *err);

/* GPU parts (gpu/calibrate_cuda.c, in the GPU module: calibrate.c calls it through the module's
 * table, mp_calib_gpu_table). Adds "gpu_expert", "h2d", "d2h" and
 * "sync" to root and the GPU's facts to device; or, when no usable device exists, returns MP_OK
 * with the reason in why (root untouched). Errors are CUDA failures on a usable device. */
mp_status mp_calib_gpu(const mp_model *m, const mp_calib_opts *o, cJSON *root, cJSON *device, char *why,
                       size_t why_cap, mp_error *err);

typedef struct mp_calib_gpu_table {
    size_t size; /* sizeof(mp_calib_gpu_table) of the module's build: the loader checks it */
    mp_status (*gpu)(const mp_model *m, const mp_calib_opts *o, cJSON *root, cJSON *device, char *why,
                     size_t why_cap, mp_error *err);
} mp_calib_gpu_table;

#endif
