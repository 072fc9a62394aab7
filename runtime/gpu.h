/* runtime/gpu.h — the GPU executor: the forward pass on one CUDA device, with per-expert hybrid
 * placement (resident experts in a device pool, the others computed on the CPU from host memory).
 *
 * A session made with a placement (mp_session_params.placement) owns one mp_gpu; mp_session_eval
 * then runs mp_gpu_forward instead of the CPU forward pass. Everything lives on the device except
 * the non-resident experts: embeddings, attention weights, router, norms, output head, KV cache
 * (F16), activations, and the pool of resident experts. Per MoE layer with non-resident experts:
 *
 *   GPU: router → ids, weights ──D2H (ids, weights, x rows)──► host (pinned)
 *        resident experts → out (accumulate 0)                 CPU: non-resident routes → partial
 *        out += partial  ◄──────────────H2D (partial)──────────  (f32, pinned)
 *
 * so the CPU's work overlaps the GPU's resident experts, and both partials stay in float32 until
 * the one add (a GPU-only combine differs only in summation order: the parity contract).
 * Prefill (rows ≥ copy_min_rows) may instead copy a cold expert's weights to a staging slot and run
 * it on the GPU when rows × CPU cost per row exceeds bytes ÷ PCIe bandwidth (docs/runtime.md).
 *
 * Budget: mp_gpu_new computes every device allocation before making any (weights, KV cache,
 * scratch, cuBLAS workspace, staging, expert pool) and refuses, naming each term, when their sum
 * exceeds the placement's budget. The CUDA context itself (driver-reserved) is not counted.
 *
 * Invariants: no allocation, no host synchronization on the all-resident decode path except the
 * final logits copy; with hooks on, routing is copied back once per step (not per layer).
 *
 * The executor lives in the GPU module (gpu/, loaded at run time: runtime/gpu_module.h); the
 * functions below are the program's side of it (gpu_api.c), which hand each call to the module's
 * table (mp_gpu_executor_table) once mp_gpu_available or mp_gpu_new has loaded it. Without the
 * module (a build without CUDA, a machine without the CUDA libraries) mp_gpu_available says why and
 * mp_gpu_new and mp_gpu_memory_info fail with that line; no mp_gpu can exist, so the others are
 * never reached.
 */
#ifndef MP_RUNTIME_GPU_H
#define MP_RUNTIME_GPU_H

#include <stdbool.h>
#include <stdint.h>

#include "runtime/decide.h"
#include "base/error.h"
#include "runtime/placement.h"

typedef struct mp_session mp_session;
typedef struct mp_gpu mp_gpu;

/* What the executor did since the last mp_gpu_stats_reset (for bench rows and `run`'s summary). */
typedef struct mp_gpu_stats {
    int64_t steps;
    int64_t moe_layers;        /* (step, layer) MoE invocations */
    int64_t hybrid_layers;     /* of those, with at least one route to a non-resident expert */
    int64_t routes_gpu;        /* routes served by resident experts */
    int64_t routes_cpu;        /* routes computed on the CPU */
    int64_t routes_copied;     /* routes served by copying the expert's weights to the GPU */
    int64_t routes_far;        /* decode routes the GPU ran reading the expert's weights from host
                                * memory over the bus (far routes, mp_gpu_set_far_plan) */
    int64_t routes_split;      /* of those, split: the CPU computed their first FFN rows
                                * (runtime/decide.h), and read split_cpu_bytes of their weights */
    int64_t split_cpu_bytes;
    int64_t routes_split_by_unit; /* of the split routes, those whose CPU side read down laid out by
                                   * unit (MP_GPU_PART_BY_UNIT) */
    int64_t experts_copied;    /* expert weight copies (prefill, and decode's split with the CPU) */
    int64_t bytes_copied;      /* their bytes */
    int64_t sync_wait_ns;      /* host time waiting for the GPU's routing (the round trip) */
    int64_t cpu_expert_ns;     /* host time computing CPU experts */
    /* with mp_gpu_set_measure: per hybrid layer step, the GPU's gap between the end of the
     * rows' D2H copy and the start of the partial's H2D copy (host wake-up + CPU experts +
     * submission), or in a one-graph step between the rows' publish and the GPU seeing the host's
     * flag; and that gap minus the CPU expert time: the round trip's own overhead (one graph:
     * minus the later of the CPU's time and the GPU's wait kernel starting to poll, so that a
     * layer whose resident experts outlast the CPU counts no overhead for them) */
    int64_t rt_measured;       /* hybrid layer steps measured */
    int64_t rt_gap_ns;
    int64_t rt_overhead_ns;
    /* one graph: the GPU's side of those steps, from the rows' publish to its wait kernel's first
     * poll (resident experts and far routes); 0 in enqueued steps */
    int64_t rt_gpu_ns;
    int64_t rt_gpu_later;      /* of those steps, the ones whose GPU side outlasted the CPU's time */
    /* one graph: of those steps, the warm ones (every route on a resident expert: nothing for the
     * CPU or the bus), and their GPU side, work that no cold read of the layer can overlap */
    int64_t rt_warm;
    int64_t rt_warm_gpu_ns;
    int64_t graphs_captured;   /* decode steps captured as CUDA graphs */
    int64_t graph_launch_ns;   /* host time inside cudaGraphLaunch, all steps */
    int64_t one_graph_steps;   /* decode steps with hybrid layers run as one graph (handoffs
                                * through mapped host memory) */
    /* MP_GPU_STEP_STAMPS=1: where a decode step's wall time goes, without a profiler. Sums over
     * the stamped steps: the host between the previous step's drain and this step's launch
     * (copying the logits out, the caller), from the launch's return to the step's first kernel,
     * the GPU's span from its first kernel to its last, and from then to the host seeing the
     * drain. The GPU's timer is mapped to the host clock at start, to within stamp_err_ns. */
    int64_t stamped_steps, step_host_gaps; /* the gap counts only a step that follows its step */
    int64_t step_host_gap_ns, step_start_lag_ns, step_gpu_ns, step_drain_lag_ns;
    int64_t stamp_err_ns;
    /* the adaptive tier (runtime/tier.h): routes its slots served (counted in routes_gpu too),
     * routes to experts whose copy had not landed (served cold: late), its admissions, evictions
     * and bytes copied from host memory; tier_promoted: admissions copied from a prefill staging
     * buffer on the device instead (no host copy) */
    int64_t tier_hits, tier_late, tier_admissions, tier_evictions, tier_bytes, tier_promoted;
} mp_gpu_stats;

/* Device memory the executor allocates, by term (bytes). */
typedef struct mp_gpu_memory {
    uint64_t weights, kv, scratch, staging, pool, tier, total;
} mp_gpu_memory;

/* 1 if this build has the GPU executor and a usable device; else 0 with the reason in why. */
int mp_gpu_available(char *why, size_t why_cap);

/* Free and total memory of device 0 (MP_ERR_DEVICE without a device). */
mp_status mp_gpu_memory_info(uint64_t *free_bytes, uint64_t *total_bytes, mp_error *err);

/* Create the executor for session s (whose model, n_ctx, n_batch, pool and CPU MoE scratch are
 * set), with placement pl (copied; the caller may free it after). Uploads every device-resident
 * weight; progress is silent (callers print). */
mp_status mp_gpu_new(mp_session *s, const mp_placement *pl, mp_gpu **out, mp_error *err);
void mp_gpu_free(mp_gpu *g);

/* One forward chunk on the device (the contract of mp_forward in state.h). */
mp_status mp_gpu_forward(mp_session *s, const int32_t *tokens, int64_t n, bool all_logits,
                         float *logits, mp_error *err);

void mp_gpu_get_memory(const mp_gpu *g, mp_gpu_memory *out);
void mp_gpu_get_stats(const mp_gpu *g, mp_gpu_stats *out);
void mp_gpu_stats_reset(mp_gpu *g);
/* "NVIDIA H200 (sm_90, 139.8 GiB)" */
const char *mp_gpu_device_name(const mp_gpu *g);

/* Time the round trip of hybrid layers with CUDA events (a few microseconds per layer; bench). */
void mp_gpu_set_measure(mp_gpu *g, bool on);

/* Every route the stats counted, whichever path served it (gpu, cpu, copied, far). */
static inline int64_t mp_gpu_stats_routes(const mp_gpu_stats *st)
{
    return st->routes_gpu + st->routes_cpu + st->routes_copied + st->routes_far;
}


/* One line for run/bench: device, memory by term, routes by path, round-trip wait per hybrid
 * layer: "NVIDIA H200 (sm_90, 139.8 GiB); memory 18.20 GiB (weights 1.10 GiB, KV 0.38 GiB,
 * scratch 0.20 GiB, pool 16.52 GiB); routes gpu 98.1 %, cpu 1.9 %, copied 0.0 %; ..." */
void mp_gpu_report(const mp_gpu *g, char *buf, size_t cap);
/* Where the cold experts are in host memory: "host experts in a page-locked copy (9.84 GiB)",
 * "... in a pageable copy (...; why)", "... in the model's mapping, pageable", "no host experts";
 * with MP_GPU_PART_BY_UNIT's second copy of down, its size after the copy's ("; down by unit for
 * split routes: 3.10 GiB more"). */
void mp_gpu_host_report(const mp_gpu *g, char *buf, size_t cap);

/* Prefill weight-copy path: copy a cold expert to the GPU when it has at least min_rows rows in
 * the step (0: never copy). The default is chosen by cost at mp_gpu_new (docs/runtime.md). */
void mp_gpu_set_copy_min_rows(mp_gpu *g, int64_t min_rows);
int64_t mp_gpu_copy_min_rows(const mp_gpu *g);
/* Decode (1-row) steps: far routes (runtime/decide.h). A layer whose decision is on and whose step
 * has c cold routes runs the first table[c] of them (at most mp_gpu_far_max) on the GPU, whose
 * kernels read those experts' weights from the page-locked host copy over the bus while the CPU
 * computes the rest. At start the executor decides every hybrid layer from the session's decode
 * costs (mp_session_params.decode_costs; none without them). mp_gpu_set_far_plan replaces the
 * decisions (layers: n_layer of them; NULL: all off; all-resident layers stay off), between
 * steps; false, changing nothing, when a layer asks for far routes and the executor has none
 * (no page-locked host copy, no staging buffers, no hybrid layer) or a table upload fails. */
int mp_gpu_far_max(const mp_gpu *g); /* 0: no far routes possible */
bool mp_gpu_set_far_plan(mp_gpu *g, const mp_far_layer *layers);
int64_t mp_gpu_far_layers(const mp_gpu *g); /* layers with far routes on */
/* What differs between the machine the decode costs (--costs) were measured on and this one
 * (mp_decide_other_machine: "GPU A, this machine's B; ..."); "" when the same, not known, or no
 * costs. */
const char *mp_gpu_costs_machine(const mp_gpu *g);

/* Dense projections (attention, router, head) of steps with at least min_rows rows run as cuBLAS
 * GEMMs over activations rounded to the weights' 16-bit type; smaller steps run GEMVs over f32 (or
 * the quantized partner format). Raising the threshold (never below MP_GPU_GEMM_MIN_ROWS) keeps
 * every step on the GEMV path: the parity tests use it to compare hybrid and GPU-only runs of
 * F16/BF16 models without the 16-bit rounding of prefill activations, which amplifies
 * summation-order differences to about that type's precision. */
void mp_gpu_set_gemm_min_rows(mp_gpu *g, int64_t min_rows);

/* The bus's side of a probe of host memory with two readers (runtime/bench.h, mp_bench_host_bus):
 * the GPU reads the page-locked host copy of the cold experts (as much of it as the cores' probe
 * reads, mp_bench_host_probe_bytes, over and over) with the far routes' loads for `seconds` of the
 * host's clock, then waits for the last reads;
 * *bytes = what it read (0, MP_OK, when the executor has no such copy mapped). Between steps only. */
mp_status mp_gpu_bus_read(mp_gpu *g, double seconds, uint64_t *bytes, mp_error *err);

/* The module's table: one member per function of this header, in their order (gpu/module.c fills it). */
typedef struct mp_gpu_executor_table {
    size_t size; /* sizeof(mp_gpu_executor_table) of the module's build: the loader checks it */
    int (*available)(char *why, size_t why_cap);
    mp_status (*memory_info)(uint64_t *free_bytes, uint64_t *total_bytes, mp_error *err);
    mp_status (*new_)(mp_session *s, const mp_placement *pl, mp_gpu **out, mp_error *err);
    void (*free_)(mp_gpu *g);
    mp_status (*forward)(mp_session *s, const int32_t *tokens, int64_t n, bool all_logits, float *logits,
                         mp_error *err);
    void (*get_memory)(const mp_gpu *g, mp_gpu_memory *out);
    void (*get_stats)(const mp_gpu *g, mp_gpu_stats *out);
    void (*stats_reset)(mp_gpu *g);
    const char *(*device_name)(const mp_gpu *g);
    void (*set_measure)(mp_gpu *g, bool on);
    void (*report)(const mp_gpu *g, char *buf, size_t cap);
    void (*host_report)(const mp_gpu *g, char *buf, size_t cap);
    void (*set_copy_min_rows)(mp_gpu *g, int64_t min_rows);
    int64_t (*copy_min_rows)(const mp_gpu *g);
    int (*far_max)(const mp_gpu *g);
    bool (*set_far_plan)(mp_gpu *g, const mp_far_layer *layers);
    int64_t (*far_layers)(const mp_gpu *g);
    const char *(*costs_machine)(const mp_gpu *g);
    void (*set_gemm_min_rows)(mp_gpu *g, int64_t min_rows);
    mp_status (*bus_read)(mp_gpu *g, double seconds, uint64_t *bytes, mp_error *err);
} mp_gpu_executor_table;

#endif
