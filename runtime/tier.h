/* runtime/tier.h — the adaptive expert tier: per-layer caches of GPU expert slots that an online
 * policy fills while the model runs. One module for both sides: the GPU executor carries out its
 * moves (gpu/gpu_tier.c) and the simulator charges them (simulator/sim_engine.c), so that a
 * prediction is made for the moves the runtime will make. CUDA-free.
 *
 * A layer's tier has cap[l] slots besides the placement's static residents ("pinned"), which the
 * tier never admits nor evicts. After each invocation of a layer (the layer in one step), the caller
 * reports the distinct experts the invocation routed to with their rows (mp_tier_after); the policy
 * may then admit some of the non-pinned ones, each into a free slot or in place of a victim, and
 * returns these moves. An admitted expert is LOADING until the caller says its copy landed
 * (mp_tier_landed), then READY; only READY experts serve routes.
 *
 * Policies (demand admission: only experts the invocation routed to are candidates):
 *   lru          the least recently used resident makes room;
 *   lfu          counts of routed rows; a candidate replaces the weakest resident when it beats it
 *                by the factor 1 + epsilon;
 *   decayed-lfu  the same on score_t = alpha · score_{t-1} + beta · rows_t (per invocation);
 *   window-lfu   the same on the rows of the last `window` invocations;
 *   cost         the decayed score (beta 1) read as routes expected over the score's memory, and a
 *                swap made only when it pays: (score(cand) − score(victim)) × route_saving_ns >
 *                copy_cost_ns (mp_decide_admit, runtime/decide.h); a free slot's victim scores 0.
 *
 * Invariants:
 *  - an expert is in at most one slot of its layer; a pinned expert is in none;
 *  - a victim is READY, never LOADING: a copy in flight is never overwritten;
 *  - at most max_loading experts are LOADING at once over all layers (0: no bound);
 *  - ties are broken by expert index, so every replay is deterministic.
 * The caller's part: a move's victim serves no route from the next invocation of its layer on, and
 * the copy into its slot starts only after every invocation that read the victim has finished (the
 * runtime applies the moves of a step when the step has drained, and the simulator charges them
 * from then).
 */
#ifndef MP_RUNTIME_TIER_H
#define MP_RUNTIME_TIER_H

#include <stdbool.h>
#include <stdint.h>

#include "base/error.h"

typedef enum mp_tier_policy {
    MP_TIER_OFF = 0,
    MP_TIER_LRU = 1,
    MP_TIER_LFU = 2,
    MP_TIER_DECAYED_LFU = 3,
    MP_TIER_WINDOW_LFU = 4,
    MP_TIER_COST = 5,
} mp_tier_policy;

/* "off", "lru", "lfu", "decayed-lfu", "window-lfu", "cost"; one line naming them on anything else. */
mp_status mp_tier_policy_parse(const char *text, mp_tier_policy *out, mp_error *err);
const char *mp_tier_policy_name(mp_tier_policy p);

typedef struct mp_tier_params {
    mp_tier_policy policy;
    double alpha, beta, epsilon; /* decayed-lfu (alpha also cost's memory): 0 < alpha <= 1, beta > 0,
                                  * epsilon >= 0 */
    uint32_t window;             /* window-lfu: invocations remembered, 1..65536 */
    uint32_t max_rows;           /* rows of the widest invocation (window-lfu's memory) */
    uint32_t top_k;
    uint32_t max_loading;        /* copies in flight at once over all layers; 0: no bound */
    double route_saving_ns;      /* cost: what one route saves served by a slot instead of cold */
    double copy_cost_ns;         /* cost: what one admission's copy costs the steps it overlaps */
} mp_tier_params;

/* The tier's size as --adaptive-slots gives it, for run/bench/collect and simulate alike: "N" expert
 * slots (1 .. 2^32; *share 0) or "P%" of the budget's room for experts (0 < P <= 100; *slots 0).
 * One line naming the flag's value and the grammar on anything else. */
mp_status mp_tier_size_parse(const char *text, uint64_t *slots, double *share, mp_error *err);

/* The slots a size asks for beside a budget whose room for experts holds room_slots experts:
 * slots, or share × room_slots rounded down but at least one where the room holds one (a small
 * model's room may hold fewer than 1 / share experts: a tier asked for gets one); neither given
 * (both 0): MP_TIER_DEFAULT_SHARE of it. */
#define MP_TIER_DEFAULT_SHARE 0.10
uint64_t mp_tier_size_slots(uint64_t slots, double share, uint64_t room_slots);

/* The tier's copies in flight at once over all layers, as --adaptive-inflight gives it for
 * run/bench/collect and simulate alike: an integer 1 .. MP_TIER_MAX_INFLIGHT, refused in one line
 * otherwise; and the bound a run has: the flag's value, or (0: not given) 2 × top_k. */
#define MP_TIER_MAX_INFLIGHT 4096
mp_status mp_tier_inflight_parse(const char *text, uint32_t *inflight, mp_error *err);
uint32_t mp_tier_inflight(uint32_t inflight, uint32_t top_k);

/* The defaults of every policy parameter (alpha 0.9, beta 1, epsilon 0, window 64, max_loading 0). */
void mp_tier_params_default(mp_tier_params *p);

/* The valid range of a policy parameter ("alpha", "beta", "epsilon", "window"): NULL when v lies in
 * it, else the range as text ("0 < alpha <= 1", "beta > 0", "epsilon >= 0", "an integer window
 * 1..65536"); "a known parameter" for another name. mp_tier_new checks the parameters its policy
 * reads with it, and a command line can check its flags with it before. */
const char *mp_tier_param_range(const char *param, double v);

typedef enum mp_tier_state { MP_TIER_NONE = 0, MP_TIER_LOADING = 1, MP_TIER_READY = 2 } mp_tier_state;

typedef struct mp_tier_move {
    uint32_t layer, slot;
    uint32_t expert; /* admitted: LOADING until mp_tier_landed(layer, slot) */
    int32_t victim;  /* evicted from the slot, or -1 (the slot was free) */
} mp_tier_move;

typedef struct mp_tier_stats {
    uint64_t invocations;
    uint64_t hits;       /* routes to READY tier experts */
    uint64_t late;       /* routes to LOADING tier experts (served cold: the copy had not landed) */
    uint64_t admissions, evictions;
    uint64_t refused;    /* candidates the rule or the in-flight bound turned away */
} mp_tier_stats;

typedef struct mp_tier mp_tier;

/* A tier of n_layers × n_experts with cap[l] slots in layer l; pinned (n_layers, n_experts), 1 for a
 * static resident, may be NULL. MP_ERR_ARG naming the parameter out of range; MP_ERR_NOMEM. */
mp_status mp_tier_new(mp_tier **out, uint32_t n_layers, uint32_t n_experts, const uint32_t *cap,
                      const uint8_t *pinned, const mp_tier_params *p, mp_error *err);
void mp_tier_free(mp_tier *t);

/* Spread `slots` over the layers that have at least one expert outside the pinned set (pinned NULL:
 * every layer), equally, the remainder to the first ones; no layer gets more slots than it has
 * experts outside the pinned set. cap: (n_layers). Returns the slots given out. */
uint64_t mp_tier_split(uint64_t slots, uint32_t n_layers, uint32_t n_experts, const uint8_t *pinned, uint32_t *cap);

/* The tier beside a static placement, one rule for the runtime (a profile's placement) and the
 * simulator (a policy's placement, whose ranking is the profile it emits): of `slots` slots, as
 * many as the budget has room left for beside the placement (free_slots) are spread over the
 * layers with experts outside it (mp_tier_split); the rest are carved out of the placement, its
 * lowest-ranked residents first, but never out of a layer it holds whole (a whole layer runs
 * without the round trip to the host, which a layer with a tier slot pays at every step).
 * resident (n_layers, n_experts) is the placement, changed in place: the carved experts leave it;
 * order: n_order cells (layer · n_experts + expert) best first, the residents among them ranked
 * (NULL: nothing is carved); cap (n_layers) gets the tier's slots per layer; warm (room for
 * `slots` cells) the carved experts best first, *n_warm of them, which the tier starts with
 * (mp_tier_place, in that order): at the first step the placement and the tier together hold the
 * placement's experts, and no layer changes between whole and hybrid. Returns the slots given. */
uint64_t mp_tier_carve(uint8_t *resident, uint32_t n_layers, uint32_t n_experts, const uint32_t *order,
                       uint64_t n_order, uint64_t slots, uint64_t free_slots, uint32_t *cap, uint32_t *warm,
                       uint64_t *n_warm);

/* After an invocation of layer l: used[0 .. n_used) the distinct experts it routed to, rows_of[e]
 * (indexed by expert) their rows. Counts hits and late routes, updates the policy, and writes its
 * moves to out (at most max_out; n_used is always enough); returns their number. */
uint32_t mp_tier_after(mp_tier *t, uint32_t l, const uint16_t *used, const uint32_t *rows_of, uint32_t n_used,
                       mp_tier_move *out, uint32_t max_out);

/* The copy into slot `slot` of layer l has landed: its expert becomes READY. */
void mp_tier_landed(mp_tier *t, uint32_t l, uint32_t slot);

/* Put expert e into a free slot of layer l before the run starts, READY at once (no copy, nothing
 * counted); false when the layer has no free slot or e is pinned or already placed. */
bool mp_tier_place(mp_tier *t, uint32_t l, uint32_t e);

mp_tier_state mp_tier_state_of(const mp_tier *t, uint32_t l, uint32_t e);
/* Layer l's states by expert (n_experts mp_tier_state values), changed in place by the calls above:
 * a replay reads it once per invocation instead of calling mp_tier_state_of per route. */
const uint8_t *mp_tier_states(const mp_tier *t, uint32_t l);
int32_t mp_tier_slot_of(const mp_tier *t, uint32_t l, uint32_t e);     /* -1: none */
int32_t mp_tier_expert_in(const mp_tier *t, uint32_t l, uint32_t slot); /* -1: free */
uint32_t mp_tier_cap(const mp_tier *t, uint32_t l);
uint32_t mp_tier_loading(const mp_tier *t);
const mp_tier_stats *mp_tier_stats_of(const mp_tier *t);

#endif
