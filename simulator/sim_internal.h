/* simulator/sim_internal.h — what the replay engine (sim.c, sim_replay.c, sim_engine.c) and the
 * policies (policies.c, plan.c) share: cost tables by rows, the layer-time formula, and the
 * residency state.
 * Not a public header: only simulator/ includes it. */
#ifndef MP_SIMULATOR_SIM_INTERNAL_H
#define MP_SIMULATOR_SIM_INTERNAL_H

#include <math.h>
#include <stdbool.h>
#include <stdint.h>

#include "collector/popularity.h"
#include "runtime/decide.h"
#include "runtime/tier.h"
#include "simulator/sim.h"

/* The expert costs of one kind of layer (the layers whose experts have one type and size: a
 * model's every layer, or, llama.cpp's Q4_K_M, the layers whose down tensors have 6 bits and the
 * others), tabulated for 0..max_rows routed rows (index = rows), scaled by mp_sim_config.scale, so
 * that the replay's hot loop does table reads, not curve searches. Index 0 is 0 ns. */
typedef struct sim_kind {
    /* An invocation's experts on one side cost fixed + the sum of their marginal costs by rows
     * (sim_tab_build: from the cost file's `concurrent` curve; fixed 0 and marginal = the one-expert
     * time when the file has none). */
    double *gpu_ns;      /* (max_rows + 1) marginal cost of one expert on the GPU */
    double *cpu_ns;      /* (max_rows + 1) marginal cost of one expert on the CPU */
    double gpu_fixed_ns; /* per invocation with at least one expert on the GPU */
    double cpu_fixed_ns; /* per invocation with at least one expert on the CPU */
    double weight_h2d_ns; /* one expert's weights host -> device */
    uint64_t expert_bytes;
    /* The decode grid measured every layer of the model hybrid, so a level is the layers' mean:
     * what the cold routes add to it (reading their experts, by the cores or over the bus) is
     * charged to a layer of this kind in the ratio of its expert bytes to the layers' mean (1 for a
     * model of one kind). */
    double grid_cold_scale;
} sim_kind;

#define SIM_MAX_KINDS 8

typedef struct sim_tab {
    uint32_t max_rows;
    sim_kind kinds[SIM_MAX_KINDS];
    int n_kinds;
    uint8_t *layer_kind; /* (trace layers) index into kinds; NULL: every layer kinds[0] */
    double *d2h_ns;      /* (max_rows + 1) activations of `rows` rows to the host */
    double *h2d_act_ns;  /* (max_rows + 1) partial outputs of `rows` rows back */
    double *combine_ns;  /* (max_rows + 1) */
    double *non_moe_ns;  /* (max_rows + 1) per step, by its rows (one-row steps: sim_decode_non_moe_ns) */
    const mp_costs *costs; /* the cost file, for what depends on more than rows (a one-row step's context) */
    double non_moe_k;    /* the scale of non-MoE costs (sensitivity) */
    double sync_ns;      /* one round trip */
    uint64_t act_row_bytes; /* n_embd f32: one row of activations or of partial output */
    /* One-row (decode) steps of hybrid layers: the cost file's decode grid (scaled as the table
     * above), which the decision model chooses far routes from and the replay charges
     * (runtime/decide.h); every layer step is also held to the floor of reading its cold experts
     * from host memory (mp_decide_floor_ns). */
    mp_decode_costs dc;
    /* What a one-row step with at least one hybrid layer pays once (the cost file's
     * decode_layers.hybrid_step, scaled as the round trip; 0 when the file has none), and the share
     * of it each of the grid's levels holds (the grid measured every layer hybrid): see
     * sim_hybrid_layer_ns. */
    double hybrid_step_ns, hybrid_share_ns;
    bool copies;         /* steps of several rows copy cold experts by the decision model */
} sim_tab;

/* The expert costs of trace layer l. */
static inline const sim_kind *sim_kind_of(const sim_tab *c, uint32_t l)
{
    return &c->kinds[c->layer_kind ? c->layer_kind[l] : 0];
}

mp_status sim_tab_build(sim_tab *tab, const mp_sim_config *cfg, const mp_sim_trace *t, mp_error *err);
void sim_tab_free(sim_tab *tab);

/* A one-row step of a hybrid layer (some expert off the GPU) with `cold` of its routes outside
 * the pool, on a layer of kind k whose far decision is fl: the grid's time (its cold part in k's
 * grid_cold_scale), held to the floor. The layer's far routes (for the metrics: the split one
 * counts) in *far, 1 in *split when the last is split. NaN when the grid lacks the point. */
static inline double sim_decode_layer_ns(const sim_tab *c, const sim_kind *k, const mp_far_layer *fl, uint32_t cold,
                                         uint32_t *far, uint32_t *split)
{
    double t = mp_decide_decode_ns(&c->dc, fl, (int)cold);
    if (k->grid_cold_scale != 1.0 && cold > 0) {
        const double t0 = mp_decide_decode_ns(&c->dc, fl, 0);
        if (!isnan(t0))
            t = t0 + (t - t0) * k->grid_cold_scale;
    }
    const double floor_ns = mp_decide_floor_ns(&c->dc, (double)cold * (double)k->expert_bytes);
    int routes = 0, part = 0;
    mp_decide_far_units(fl->on ? fl->table[cold] : 0, fl->split, (int)cold, &routes, &part);
    *far = (uint32_t)routes;
    *split = part > 0;
    return t > floor_ns ? t : isnan(t) ? t : floor_ns;
}

/* The CPU experts' time within that step (mp_decide_decode_cpu_ns in k's scale), NaN where the grid
 * lacks it. */
static inline double sim_decode_cpu_ns(const sim_tab *c, const sim_kind *k, const mp_far_layer *fl, uint32_t cold)
{
    return mp_decide_decode_cpu_ns(&c->dc, fl, (int)cold) * k->grid_cold_scale;
}

/* A one-row step's hybrid layer (one holding an expert off the GPU) as charged, from t_ns, its time
 * as sim_decode_layer_ns (or, where the grid lacks the point, sim_layer_ns) gives it. The grid
 * measured every layer hybrid, so each of its levels holds a share (hybrid_share_ns) of what a step
 * with hybrid layers pays once (hybrid_step_ns: the host's side of the step, measured as one hybrid
 * layer beside resident ones): the share comes off, held to the floor of the layer's n_cold cold
 * experts, and the step's first hybrid layer pays the whole once. So a step of h hybrid layers pays
 * its levels plus hybrid_step_ns x (1 - h / the grid's layers): what calibrate measured with one
 * hybrid layer and with all of them. One rule for the replay and the planner (which adds the once
 * per one-row step of a placement with a hybrid layer: plan_layer_costs). */
static inline double sim_hybrid_layer_ns(const sim_tab *c, const sim_kind *k, double t_ns, uint32_t n_cold, bool first)
{
    const double floor_ns = mp_decide_floor_ns(&c->dc, (double)n_cold * (double)k->expert_bytes);
    const double t = t_ns - c->hybrid_share_ns;
    return (t > floor_ns ? t : floor_ns) + (first ? c->hybrid_step_ns : 0);
}

/* The non-MoE time of a one-row step at `keys` keys of context (the cost file's one reading of it,
 * mp_costs_decode_non_moe_ns), scaled like the table. */
static inline double sim_decode_non_moe_ns(const sim_tab *c, double keys)
{
    return c->non_moe_k * mp_costs_decode_non_moe_ns(c->costs, keys);
}

/* Time of one layer invocation of several rows (and of one-row steps the grid lacks): GPU hits,
 * and the copies of cold experts the decision model copies (on the copy engine beside the hits,
 * each copied expert's kernel after its copy), overlapped with the round trip (D2H of the step's
 * rows, the host's wake-up, its CPU experts, H2D of the partial outputs, the combine); at least
 * the floor of reading n_cold cold experts from host memory. rows_rt is 0 when the layer makes no
 * round trip. The runtime makes one at every step of a layer that holds any expert outside the
 * GPU, whether or not this step's routes reach one: its host learns the routes only through the
 * round trip itself (so the callers pass the step's rows for such a layer, and for any step with
 * a miss). One formula for the replay and for the planner, so that the planner's predictions are
 * the replay's. */
static inline double sim_layer_ns(const sim_tab *c, const sim_kind *k, double gpu_ns, double cpu_ns, double copy_ns,
                                  double copied_gpu_ns, uint32_t n_cold, uint32_t rows_rt)
{
    const double gpu_side_ns = (gpu_ns > copy_ns ? gpu_ns : copy_ns) + copied_gpu_ns;
    double t = gpu_side_ns;
    if (rows_rt) {
        const double path_ns =
            c->d2h_ns[rows_rt] + c->sync_ns + cpu_ns + c->h2d_act_ns[rows_rt] + c->combine_ns[rows_rt];
        t = gpu_side_ns > path_ns ? gpu_side_ns : path_ns;
    }
    const double floor_ns = mp_decide_floor_ns(&c->dc, (double)n_cold * (double)k->expert_bytes);
    return t > floor_ns ? t : floor_ns;
}

/* Which of a layer step's n cold experts (rows[i] routed rows each, cpu_ns[i] = k->cpu_ns[rows[i]])
 * the runtime copies to the GPU (copy[i]; the count returned): the decision model's rule
 * (mp_decide_copies) on the cost file's CPU and copy times; none in a one-row step or without
 * copies. order: scratch of n ints. */
static inline uint32_t sim_copy_set(const sim_tab *c, const sim_kind *k, uint32_t step_rows, uint32_t n,
                                    const int64_t *rows, const double *cpu_ns, int *order, bool *copy)
{
    if (!c->copies || !mp_decide_step_copies(step_rows)) {
        for (uint32_t i = 0; i < n; i++)
            copy[i] = false;
        return 0;
    }
    return (uint32_t)mp_decide_copies((int)n, rows, cpu_ns, k->weight_h2d_ns, 0, order, copy);
}

typedef struct sim_engine sim_engine; /* sim_engine.h */

/* Static residency, as Belady sees and changes it (the online policies' slots are the adaptive
 * tier's, runtime/tier.h). */
bool sim_is_resident(const sim_engine *s, uint32_t layer, uint32_t expert);
/* The layer's residency flags (n_experts), valid until the next sim_admit/sim_evict changes them
 * (they change in place). */
const uint8_t *sim_resident_row(const sim_engine *s, uint32_t layer);
/* The layer's resident experts as a list (*n of them, in no particular order; changes in place
 * with admissions and evictions): victim searches scan cap entries, not n_experts. */
const uint16_t *sim_resident_list(const sim_engine *s, uint32_t layer, uint32_t *n);
uint32_t sim_n_resident(const sim_engine *s, uint32_t layer);
uint32_t sim_cap(const sim_engine *s, uint32_t layer);
/* Belady's admissions: free and instant (a hit from the layer's next invocation on), counted with
 * their bytes; need a free slot. */
void sim_admit(sim_engine *s, uint32_t layer, uint32_t expert);
void sim_evict(sim_engine *s, uint32_t layer, uint32_t expert);
/* Place an expert before the replay starts (no copy, nothing counted); needs a free slot. */
void sim_place(sim_engine *s, uint32_t layer, uint32_t expert);

/* Train statistics and rankings the policies build placements from: the collector's popularity
 * counter over the train steps, and its rankings. */
typedef struct sim_stats {
    mp_popularity train;  /* routes per (layer, expert) in the train steps: every layer has
                           * n_experts, so train.count is (n_layers, n_experts), cell l*E+e */
    uint16_t *order;      /* (n_layers, n_experts) per layer, experts by count desc, id asc */
    uint32_t *global;     /* (n_layers * n_experts) cells l*E+e by count desc, cell asc */
    uint64_t train_steps; /* steps [0, train_steps) are train */
} sim_stats;

/* Static placements: fill resident (n_layers, n_experts) for the policy; returns experts placed. */
mp_status pol_static_placement(const mp_sim_trace *t, const mp_sim_config *cfg, const sim_tab *tab,
                               const sim_stats *st, mp_sim_policy policy, uint64_t slots, uint8_t *resident,
                               mp_error *err);
/* The adaptive tier's policy of an online policy (MP_TIER_OFF for Belady and the static ones). */
mp_tier_policy pol_tier_policy(mp_sim_policy policy);
/* Belady: the future uses of every (layer, expert), the hook after each invocation (used, n_used:
 * the experts the invocation routed to), and the start with each layer's cache holding the
 * experts used soonest. */
typedef struct belady_state belady_state;
mp_status belady_init(belady_state **out, const mp_sim_trace *t, mp_error *err);
void belady_after(belady_state *p, sim_engine *s, uint32_t layer, const uint16_t *used, uint32_t n_used);
void belady_initial(belady_state *p, sim_engine *s);
void belady_free(belady_state *p);

/* Planner (plan.c): per-layer time of the train steps with the top-c experts resident, for
 * c = 0..n_experts: cost (n_layers, n_experts + 1), in ns; *once_ns (may be NULL) what a placement
 * with any capacity below n_experts pays besides: the once of each one-row train step
 * (sim_hybrid_layer_ns), which is no sum over layers. */
mp_status plan_layer_costs(const mp_sim_trace *t, const sim_tab *tab, const sim_stats *st, double *cost,
                           double *once_ns, mp_error *err);
/* Capacities minimizing the summed cost under sum(cap) <= slots (exact DP). cap: (n_layers). */
mp_status plan_capacities(const double *cost, uint32_t n_layers, uint32_t n_experts, uint64_t slots,
                          uint32_t *cap, mp_error *err);
/* The planner never recommends a loser: cap is replaced by the capacities of any baseline it
 * evaluated (all-cpu, first-n-cpu, static-equal, static-topn, all top-c placements) whose total
 * (summed cost, plus once_ns when a capacity is below n_experts) is lower. The DP is exact for the
 * summed costs, so this changes nothing unless rounding or a bug made it miss, or the once: it is
 * no sum over layers (every placement with a hybrid layer pays it), and the one placement that does
 * not pay it, every layer whole when the slots hold them, is first-n-cpu's. */
mp_status plan_no_loser(const double *cost, const sim_stats *st, uint32_t L, uint32_t E, uint64_t slots,
                        double once_ns, uint32_t *cap, mp_error *err);

#endif
