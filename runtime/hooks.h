/* runtime/hooks.h — the narrow interface through which the runtime reports what it does.
 *
 * The collector implements these callbacks; the runtime never links SQL. With tracing off the
 * session holds a NULL hooks pointer and the hot path does nothing else: no allocation, no copy,
 * no synchronization. Every pointer passed to a callback is valid only during the call.
 */
#ifndef MP_RUNTIME_HOOKS_H
#define MP_RUNTIME_HOOKS_H

#include <stddef.h>
#include <stdint.h>

#include "base/error.h"

typedef enum mp_phase { MP_PHASE_PREFILL = 0, MP_PHASE_DECODE = 1 } mp_phase;

/* The path that served one route (one (row, slot) of a layer's top-k): the codes of
 * mp_moe_timing.served, stored as they are in the trace's timing.served (docs/trace-format.md).
 * Append only: a stored code keeps its meaning. */
typedef enum mp_served {
    MP_SERVED_GPU = 0,  /* an expert the placement keeps resident on the GPU */
    MP_SERVED_TIER = 1, /* an adaptive-tier slot on the GPU (runtime/tier.h) */
    MP_SERVED_CPU = 2,  /* the host's CPU experts */
    MP_SERVED_FAR = 3,  /* a decode far route: the GPU reads the host's copy over the bus */
    MP_SERVED_COPY = 4, /* a prefill copy: the expert staged to the GPU for the step */
    MP_SERVED_N = 5
} mp_served;

/* The path's name ("gpu", "tier", "cpu", "far", "copy"; "unknown" outside the codes): the one
 * spelling every report and message uses. */
static inline const char *mp_served_name(int code)
{
    static const char *const names[MP_SERVED_N] = {"gpu", "tier", "cpu", "far", "copy"};
    return code >= 0 && code < MP_SERVED_N ? names[code] : "unknown";
}

/* Per (step, MoE layer) timing of the expert block. Zero where a path did not run. */
typedef struct mp_moe_timing {
    int64_t gpu_expert_ns;
    int64_t cpu_expert_ns;
    int64_t h2d_bytes, h2d_ns;
    int64_t d2h_bytes, d2h_ns;
    int64_t sync_ns;
    int64_t merge_ns;
    int64_t hits;    /* routes served by resident (GPU) experts */
    int64_t misses;  /* routes served from host memory */
    /* the adaptive tier (runtime/tier.h; 0 without one): routes its slots served (in hits too),
     * routes to experts whose copy had not landed (in misses), and the admissions, evictions and
     * copy bytes the layer's invocation decided (the copies go out when the step has drained) */
    int64_t tier_hits, tier_late, tier_admissions, tier_evictions, tier_copy_bytes;
    /* The path of every route (mp_served codes): n_rows × top_k of them, row-major in the order of
     * the layer's routing call (its expert_ids), which precedes this call in the step. GPU and TIER
     * codes count to hits, TIER alone to tier_hits, the others to misses. NULL: the executor does
     * not say. Valid during the call only, as every pointer here. */
    const uint8_t *served;
} mp_moe_timing;

typedef struct mp_hooks {
    void *user;
    void (*request_begin)(void *user, int64_t request_id, const int32_t *prompt_tokens,
                          int64_t n_prompt_tokens);
    void (*step_begin)(void *user, int64_t request_id, int64_t step, mp_phase phase,
                       int64_t n_rows, int64_t pos);
    /* Routing of one MoE layer for this step: expert_ids and weights are n_rows × top_k,
     * row-major, weights after any renormalization (what the combine uses). */
    void (*routing)(void *user, int64_t layer, int64_t n_rows, int64_t top_k,
                    const int32_t *expert_ids, const float *weights);
    void (*moe_timing)(void *user, int64_t layer, const mp_moe_timing *timing);
    void (*step_end)(void *user, int64_t duration_ns);
    /* Optional (NULL: not called). Bracket all the work of transformer block `layer` within the
     * current step, as the host issues it, on the thread that issues it (the CPU forward in
     * forward.c; the GPU executor enqueues the layer's kernels between them). Balanced in every
     * step that reaches step_end: each layer_begin is followed by its layer_end before the next
     * layer_begin or step_end (the CPU forward also calls layer_end when the layer fails; a
     * failed step gets no step_end, and users must not rely on it). Correlation points for
     * device activity: the collector tags GPU work with (request, step, node) through them
     * (collect --cupti). */
    void (*layer_begin)(void *user, int64_t layer);
    void (*layer_end)(void *user, int64_t layer);
    void (*request_end)(void *user, int64_t n_generated_tokens);
} mp_hooks;

/* Optional routing override (route replay): fill ids/weights (n_rows × top_k) for this layer
 * and step instead of the router's choice. Returns 0, or a negative mp_status to stop the run.
 * Called once per layer and step, in layer order: the CPU forward asks as it reaches each layer,
 * the GPU executor asks for all layers at the start of the step (no activations are passed, so
 * the answer cannot depend on them). restart (may be NULL): the next step's routes are the
 * source's first again (mp_session_restart_routes: a benchmark's runs, which decode the same
 * tokens, replay the same rows). */
typedef struct mp_route_source {
    void *user;
    int (*route)(void *user, int64_t layer, int64_t n_rows, int64_t top_k, int32_t *expert_ids,
                 float *weights);
    void (*restart)(void *user);
} mp_route_source;

/* Route replay (--route-replay TRACE) as a set of functions handed down by a layer above the
 * runtime: the runtime never links the trace reader, so `moeplan run` gets these from the CLI
 * (cli/main.c passes collector/route_replay.h's implementation to mp_cmd_run_with). */
typedef struct mp_route_replay_api {
    /* Open a replay of path for a model of n_layer MoE layers × n_expert experts × top_k;
     * refuses (MP_ERR_FORMAT, with both geometries) a trace that does not match. */
    mp_status (*open)(const char *path, int64_t n_layer, int64_t n_expert, int64_t top_k,
                      void **state, mp_route_source *src, mp_error *err);
    /* Why the source stopped a run (code MP_OK if it did not). */
    const mp_error *(*error)(const void *state);
    /* One phrase for the run summary: rows replayed per layer, wraps. */
    void (*describe)(const void *state, char *buf, size_t cap);
    void (*close)(void *state);
} mp_route_replay_api;

#endif
