/* simulator/sim.h — deterministic replay of MoE routing under a GPU expert budget and a cost model.
 *
 * The replay walks the trace's steps in order (request by request) and, in each step, the MoE
 * layers in forward order. At each (step, layer) invocation:
 *   - experts resident on the GPU (and whose admission copy has finished) are hits: GPU time;
 *   - misses run on the CPU: D2H of the rows that need them, the round trip (sync), the CPU
 *     expert time, and H2D of their partial outputs, all overlapped with the GPU hits; then the
 *     combine of CPU partials into the GPU output. Every layer that sends anything to the CPU pays
 *     the round trip: that is why concentrating CPU work can beat spreading it.
 *   - then the policy may admit experts: asynchronous H2D copies of the weights on a transfer
 *     stream, starting only after this invocation ends; an admitted expert is a hit at a later
 *     invocation only if its copy finished before that invocation starts. Weight copies and the
 *     activation H2D copies share the link: an activation copy that lands while weights are in
 *     flight delays those weights by its duration.
 * Non-MoE time per step (attention, norms, router, head: everything outside the MoE blocks) comes
 * from the cost file by the step's rows (MP_NON_MOE_COSTS), or from the trace's measured step
 * durations (MP_NON_MOE_TRACE: mp_sim_trace.non_moe_ns, one value per step, see sim_load.h); either
 * way it is spread evenly before the layers so that transfer timing sees it.
 *
 * Hit rate is counted over routing decisions (one row choosing one expert). Requests are split
 * into train (the first train_frac of requests, in trace order) and test (held out): placements
 * that need statistics (static, plan) are built from train only; every metric is reported for
 * both parts. Online policies run through train (warm-up) and continue into test.
 *
 * Invariants of an mp_sim_trace (checked by mp_sim_trace_add_step): every step has rows >= 1 and
 * one (rows, top_k) block of expert ids per layer; ids < n_experts; no expert twice in a row;
 * a request's steps are contiguous.
 */
#ifndef MP_SIMULATOR_SIM_H
#define MP_SIMULATOR_SIM_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "base/error.h"
#include "runtime/strp.h"
#include "runtime/costs.h"
#include "runtime/tier.h"

typedef struct mp_sim_step {
    uint32_t request;  /* request id (contiguous in the trace) */
    uint32_t rows;     /* tokens in this step: 1 for decode */
    uint64_t ids_off;  /* into ids: n_layers blocks of (rows, top_k) */
} mp_sim_step;

typedef struct mp_sim_trace {
    uint32_t n_layers;     /* MoE layers (nodes), in forward order */
    uint32_t n_experts;
    uint32_t top_k;
    uint32_t *model_layer; /* (n_layers) model block index of each MoE layer (for STRP), increasing;
                            * always set by mp_sim_trace_init */
    mp_sim_step *steps;    /* (n_steps) */
    uint64_t n_steps, cap_steps;
    uint16_t *ids;         /* (sum of rows * n_layers * top_k) */
    uint64_t n_ids, cap_ids;
    uint32_t n_requests;
    uint32_t max_rows;
    uint32_t last_request;
    /* (n_steps) measured non-MoE time of each step in ns (finite, >= 0), or NULL when the source
     * gave none; set once, after the last step, by mp_sim_trace_set_non_moe. */
    double *non_moe_ns;
    /* (n_layers) bytes of one expert of each layer as the trace's node table gives them (0: not
     * given), or NULL (a trace built in memory); set by the loader. */
    uint64_t *expert_bytes;
} mp_sim_trace;

/* model_layer may be NULL (identity: layer i is block i). */
mp_status mp_sim_trace_init(mp_sim_trace *t, uint32_t n_layers, uint32_t n_experts, uint32_t top_k,
                            const uint32_t *model_layer, mp_error *err);
/* The model's blocks up to the last MoE layer: the layer count of the trace's STRP profiles. */
static inline uint32_t mp_sim_trace_blocks(const mp_sim_trace *t)
{
    return t->model_layer[t->n_layers - 1] + 1;
}
/* Append one step: ids is (n_layers, rows, top_k). `where` names the source record in errors. */
mp_status mp_sim_trace_add_step(mp_sim_trace *t, uint32_t request, uint32_t rows, const uint16_t *ids,
                                const char *where, mp_error *err);
/* Attach the measured non-MoE time of every step: non_moe_ns is (n_steps), n must be t->n_steps,
 * every value finite and >= 0 (copied). `where` names the source in errors. */
mp_status mp_sim_trace_set_non_moe(mp_sim_trace *t, const double *non_moe_ns, uint64_t n, const char *where,
                                   mp_error *err);
void mp_sim_trace_free(mp_sim_trace *t);
/* Keep the steps that hold the first max_rows routing rows (at least the first step), the rest
 * dropped: a replay of a trace's beginning (plan's measured check decodes that many rows). */
void mp_sim_trace_keep_rows(mp_sim_trace *t, uint64_t max_rows);
static inline const uint16_t *mp_sim_step_ids(const mp_sim_trace *t, const mp_sim_step *s, uint32_t layer)
{
    return t->ids + s->ids_off + (uint64_t)layer * s->rows * t->top_k;
}

typedef enum mp_sim_policy {
    MP_POL_ALL_GPU = 0,     /* baseline: every expert resident, budget ignored */
    MP_POL_ALL_CPU,         /* baseline: no expert resident */
    MP_POL_STATIC_TOPN,     /* hindsight static: global top-N by train counts (marginal hit gain) */
    MP_POL_STATIC_EQUAL,    /* static: per-layer equal split, top by train counts */
    MP_POL_FIRST_N_CPU,     /* whole layers: the first layers on the CPU (llama.cpp --n-cpu-moe) */
    MP_POL_LAST_N_CPU,      /* whole layers: the mirror, the last layers on the CPU */
    MP_POL_BEST_LAYERS,     /* whole layers: the layers whose residency saves most time (-ot) */
    MP_POL_LFU,             /* cumulative LFU (per-layer caches, equal split) */
    MP_POL_DECAYED_LFU,     /* score = alpha * score + beta * rows; swap if cpu_max > (1+eps) gpu_min */
    MP_POL_WINDOW_LFU,      /* counts over the layer's last `window` invocations */
    MP_POL_LRU,
    MP_POL_COST,            /* decayed score, a swap only when its routes pay for its copy (runtime/decide.h) */
    MP_POL_BELADY,          /* offline optimum of hits for per-layer caches; free admissions */
    MP_POL_PLAN,            /* per-layer capacities chosen by simulated time (exact DP) */
    MP_POL_PROFILE,         /* a given STRP profile's placement (mp_sim_config.profile) */
    MP_POL_COUNT
} mp_sim_policy;

const char *mp_sim_policy_name(mp_sim_policy p);
int mp_sim_policy_from_name(const char *name); /* -1 if unknown */
bool mp_sim_policy_is_online(mp_sim_policy p);
/* The valid range of an online policy's parameter ("alpha", "beta", "epsilon": decayed-lfu;
 * "window": window-lfu): NULL when v lies in it, else the range as text ("0 < alpha <= 1",
 * "beta > 0", "epsilon >= 0", "an integer window 1..65536"); "a known parameter" for another
 * name. The adaptive tier's own check (mp_tier_param_range), for the command line's --sweep. */
const char *mp_sim_param_range(const char *param, double v);

/* Cost multipliers (sensitivity analysis): 1.0 = as measured. */
typedef enum mp_sim_cost_part {
    MP_COST_GPU = 0, MP_COST_CPU, MP_COST_H2D, MP_COST_D2H, MP_COST_SYNC, MP_COST_COMBINE, MP_COST_NON_MOE,
    MP_COST_PARTS
} mp_sim_cost_part;
const char *mp_sim_cost_part_name(mp_sim_cost_part p);

/* Where a step's non-MoE time comes from. Either way MP_COST_NON_MOE scales it. */
typedef enum mp_sim_non_moe_source {
    MP_NON_MOE_COSTS = 0, /* the cost file's non_moe curve, by the step's rows */
    MP_NON_MOE_TRACE,     /* the trace's measured value for the step (mp_sim_trace.non_moe_ns) */
} mp_sim_non_moe_source;
const char *mp_sim_non_moe_source_name(mp_sim_non_moe_source s); /* "costs", "trace" */

/* The cost entries of one trace layer's experts (mp_sim_config.layer_experts). */
typedef struct mp_sim_layer_experts {
    const mp_cost_expert *gpu, *cpu;
} mp_sim_layer_experts;

typedef struct mp_sim_config {
    const mp_costs *costs;
    const char *costs_name;     /* the cost file, for errors (NULL: "(memory)") */
    const mp_cost_expert *gpu;  /* the entries for the model's expert quant/shape */
    const mp_cost_expert *cpu;
    /* A model whose layers' experts differ in type (llama.cpp's Q4_K_M gives about half the layers'
     * expert down tensors 6 bits): each trace layer's entries (its experts' size: the GPU entry's
     * expert_bytes); NULL: every layer is gpu's and cpu's. At most 8 distinct pairs. */
    const mp_sim_layer_experts *layer_experts;
    uint64_t budget_bytes;      /* GPU memory for the model, as --gpu-budget counts it: everything
                                 * the runtime holds (non_expert_bytes) + resident experts */
    uint64_t non_expert_bytes;  /* weights, KV cache and scratch (mp_gpu_budget_compute) */
    uint64_t slot_bytes;        /* what one resident expert takes of the budget (0: gpu's
                                 * expert_bytes): the largest layer's, so that any placement fits */
    double train_frac;          /* in [0, 1]: share of requests (in trace order) used to plan */
    double alpha, beta, epsilon; /* decayed LFU (alpha also cost's memory) */
    uint32_t window;            /* windowed LFU: invocations per layer */
    bool pageable;              /* host buffers pageable instead of pinned */
    bool no_copies;             /* steps of several rows never copy cold experts, and no step runs
                                 * far routes (a runtime without staging buffers: !mp_gpu_staging) */
    mp_sim_non_moe_source non_moe_source; /* MP_NON_MOE_TRACE needs the trace's non_moe_ns */
    double scale[MP_COST_PARTS];
    /* The host memory's read bandwidth to predict for, in GB/s (0: the cost file's host_read, as
     * calibrated): the CPU's expert costs scale by host_read / this (decode experts stream their
     * weights: bandwidth-bound), and the floor uses it. A host whose bandwidth drifts (busy
     * neighbours) decodes at the bandwidth it has. */
    double host_read_gbs;
    /* The GPU link's host-to-device bandwidth to predict for, in GB/s (0: the cost file's best pinned
     * copy, as calibrated): the experts' copies and the far units' reads (mp_decode_costs_scale's bus
     * part) scale by calibrated / this, and the floor uses it. Another process's copies on the same
     * link, or a narrower slot, leave the far routes less. */
    double bus_gbs;
    /* MP_POL_PROFILE: the profile to replay (geometry = the trace's), or NULL. Its first
     * min(profile slots, budget slots) ranked experts are resident, as the runtime's --profile
     * places them when the budget holds them. */
    const mp_strp *profile;
    /* The adaptive tier on a static policy's placement, as the runtime runs it (runtime/tier.h;
     * MP_TIER_OFF: none; online policies refuse it): adaptive_slots of them, or adaptive_share of
     * the budget's (both 0: MP_TIER_DEFAULT_SHARE; mp_tier_size_slots), given beside the static
     * policy's placement by the runtime's rule (mp_tier_carve: the room it leaves, then its
     * lowest-ranked experts outside whole layers), the rest of it pinned. The tier's parameters are
     * the runtime's (mp_tier_params_default;
     * cost: its prices from the decode grid), at most adaptive_inflight copies in flight (0: 2 ×
     * top_k); a step's moves start their copies when the step ends, and its landed copies serve
     * from the next step. */
    mp_tier_policy adaptive;
    uint64_t adaptive_slots;
    double adaptive_share;
    uint32_t adaptive_inflight;
    /* Called during a replay with the routing decisions it has replayed so far, every
     * MP_SIM_PROGRESS_STEPS steps and after its last step (NULL: never): how a caller shows the
     * progress of a long replay; the replay itself never prints. */
    void (*progress)(void *user, uint64_t decisions);
    void *progress_user;
} mp_sim_config;

#define MP_SIM_PROGRESS_STEPS 1024

void mp_sim_config_init(mp_sim_config *c); /* defaults: train 0.7, alpha 0.9, beta 1, eps 0.1, window 64 */

typedef struct mp_sim_metrics {
    uint64_t decisions, hits;   /* routing decisions (row, expert) and those served by the GPU */
    uint64_t late;              /* misses of admitted experts whose copy had not finished */
    uint64_t tier_hits;         /* hits of the adaptive tier's slots (in hits too; online policies:
                                 * all their hits) */
    uint64_t tier_refused;      /* candidates the tier's policy turned away (runtime/tier.h) */
    uint64_t tier_promoted;     /* admissions whose expert its step staged for a prefill copy: into
                                 * the slot from staging at the step's end, no copy on the link
                                 * (the runtime's promotion, gpu/gpu_tier.c); not in h2d_weight_bytes */
    uint64_t tokens, steps;
    double time_ns;
    /* the CPU experts' time within time_ns (overlapped with the GPU's side): one-row steps of
     * hybrid layers take their decode grid point's CPU share, other steps their CPU experts' costs.
     * A run's own CPU expert time (bench's cpu_expert_us, mp_gpu_stats.cpu_expert_ns) compares with
     * it route mix for route mix: their ratio is the host's level against the calibration's */
    double cpu_ns;
    uint64_t cpu_invocations;   /* layer invocations that sent rows to the CPU (paid a round trip) */
    uint64_t h2d_weight_bytes, h2d_act_bytes, d2h_act_bytes;
    uint64_t admissions, evictions;
    uint64_t routes_far;        /* decode routes the GPU runs reading their weights over the bus */
    uint64_t routes_split;      /* of those, split with the CPU along the FFN rows (runtime/decide.h) */
    uint64_t experts_copied;    /* cold experts copied for steps of several rows */
    /* the floor: reading every invocation's cold experts from host memory at the host's and the
     * bus's bandwidth together (runtime/decide.h); time_ns >= floor_ns, the replay checks it */
    double floor_ns;
    uint64_t floored;           /* layer invocations charged their floor (costs below physics) */
    uint64_t *layer_decisions, *layer_hits; /* (n_layers) */
} mp_sim_metrics;

typedef struct mp_sim_result {
    mp_sim_policy policy;
    uint64_t slots;             /* resident experts the budget allows (all layers) */
    uint64_t resident_initial;  /* experts resident when the replay starts */
    uint64_t tier_slots;        /* the adaptive tier's slots (online policies: the cache; 0: none) */
    uint64_t tier_asked;        /* the adaptive tier's slots asked at this budget (mp_tier_size_slots) */
    mp_tier_policy tier_policy; /* its policy (MP_TIER_OFF: none) */
    uint32_t tier_inflight;     /* its bound on copies in flight (0: none) */
    mp_sim_metrics train, test;
    /* The placement to export: the resident experts as its pairs, most valuable first, slots =
     * n_ranked, and the train routing counts as its table, which ranks every other expert after
     * them (profile.tail). Static policies: their placement; online ones: the first `slots` of
     * the train ranking. */
    mp_strp profile;
} mp_sim_result;

/* Slots for a budget: (budget - non_expert) / slot_bytes, at most n_layers * n_experts. Fails
 * (MP_ERR_LIMIT) when the budget does not hold the non-expert part. */
mp_status mp_sim_slots(const mp_sim_trace *t, const mp_sim_config *cfg, uint64_t *slots, mp_error *err);

mp_status mp_sim_run(const mp_sim_trace *t, const mp_sim_config *cfg, mp_sim_policy policy,
                     mp_sim_result *out, mp_error *err);
void mp_sim_result_free(mp_sim_result *r);

static inline double mp_sim_hit_rate(const mp_sim_metrics *m)
{
    return m->decisions ? (double)m->hits / (double)m->decisions : 0.0;
}
static inline double mp_sim_tok_s(const mp_sim_metrics *m)
{
    return m->time_ns > 0 ? (double)m->tokens * 1e9 / m->time_ns : 0.0;
}

#endif
