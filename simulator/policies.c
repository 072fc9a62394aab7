/* simulator/policies.c — placement policies: static placements built from train statistics, and
 * Belady's offline optimum. The online policies (lfu, decayed-lfu, window-lfu, lru, cost) are the
 * adaptive tier's (runtime/tier.c), which the replay drives as the runtime does; pol_tier_policy
 * names each one's.
 *
 * Belady keeps one cache per layer (capacities set by the engine) on the engine's residency,
 * admits only experts the current invocation routed to and evicts the resident used farthest in
 * the future. Ties are broken by expert index so that every replay is deterministic.
 */
#include "simulator/sim_internal.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

/* ---- static placements ---- */

static void place_layer_top(const sim_stats *st, uint32_t n_experts, uint32_t layer, uint32_t n, uint8_t *resident)
{
    const uint16_t *order = st->order + (size_t)layer * n_experts;
    for (uint32_t i = 0; i < n && i < n_experts; i++)
        resident[(size_t)layer * n_experts + order[i]] = 1;
}

static void place_whole_layer(uint32_t n_experts, uint32_t layer, uint8_t *resident)
{
    memset(resident + (size_t)layer * n_experts, 1, n_experts);
}

/* Whole layers by time saved: the layers whose full residency saves most train time. */
static mp_status place_best_layers(const mp_sim_trace *t, const sim_tab *tab, const sim_stats *st, uint64_t slots,
                                   uint8_t *resident, mp_error *err)
{
    const uint32_t L = t->n_layers, E = t->n_experts;
    double *cost = malloc(sizeof *cost * (size_t)L * (E + 1)); // (L, E + 1)
    uint32_t *layers = malloc(sizeof *layers * L);             // (L) by saving desc
    if (!cost || !layers) {
        free(cost);
        free(layers);
        return mp_fail(err, MP_ERR_NOMEM, "simulate: out of memory for layer costs");
    }
    mp_status s = plan_layer_costs(t, tab, st, cost, NULL, err); /* whole layers: the once is the same */
    if (!s) {
        for (uint32_t l = 0; l < L; l++)
            layers[l] = l;
        /* insertion sort by saving = cost(0 resident) - cost(all resident), desc; index asc on ties */
        for (uint32_t i = 1; i < L; i++) {
            uint32_t x = layers[i];
            double sx = cost[(size_t)x * (E + 1)] - cost[(size_t)x * (E + 1) + E];
            uint32_t j = i;
            while (j > 0) {
                uint32_t y = layers[j - 1];
                double sy = cost[(size_t)y * (E + 1)] - cost[(size_t)y * (E + 1) + E];
                if (sy >= sx)
                    break;
                layers[j] = y;
                j--;
            }
            layers[j] = x;
        }
        uint64_t full = slots / E;
        for (uint64_t i = 0; i < full && i < L; i++)
            place_whole_layer(E, layers[i], resident);
    }
    free(cost);
    free(layers);
    return s;
}

static mp_status place_plan(const mp_sim_trace *t, const sim_tab *tab, const sim_stats *st, uint64_t slots,
                            uint8_t *resident, mp_error *err)
{
    const uint32_t L = t->n_layers, E = t->n_experts;
    double *cost = malloc(sizeof *cost * (size_t)L * (E + 1)); // (L, E + 1)
    uint32_t *cap = malloc(sizeof *cap * L);                  // (L)
    mp_status s = MP_OK;
    double once_ns = 0;
    if (!cost || !cap)
        s = mp_fail(err, MP_ERR_NOMEM, "simulate: out of memory for the planner");
    if (!s)
        s = plan_layer_costs(t, tab, st, cost, &once_ns, err);
    if (!s)
        s = plan_capacities(cost, L, E, slots, cap, err);
    if (!s)
        s = plan_no_loser(cost, st, L, E, slots, once_ns, cap, err);
    for (uint32_t l = 0; !s && l < L; l++)
        place_layer_top(st, E, l, cap[l], resident);
    free(cost);
    free(cap);
    return s;
}

mp_status pol_static_placement(const mp_sim_trace *t, const mp_sim_config *cfg, const sim_tab *tab,
                               const sim_stats *st, mp_sim_policy policy, uint64_t slots, uint8_t *resident,
                               mp_error *err)
{
    const uint32_t L = t->n_layers, E = t->n_experts;
    const size_t cells = (size_t)L * E;
    uint64_t full = slots / E < L ? slots / E : L; /* whole layers that fit */
    switch (policy) {
    case MP_POL_ALL_GPU:
        memset(resident, 1, cells);
        return MP_OK;
    case MP_POL_ALL_CPU:
        return MP_OK;
    case MP_POL_STATIC_TOPN:
        /* marginal gain of one more resident expert = its train routes: greedy = global top-N */
        for (uint64_t i = 0; i < slots && i < cells; i++)
            resident[st->global[i]] = 1;
        return MP_OK;
    case MP_POL_STATIC_EQUAL:
        for (uint32_t l = 0; l < L; l++)
            place_layer_top(st, E, l, (uint32_t)(slots / L + (l < slots % L)), resident);
        return MP_OK;
    case MP_POL_FIRST_N_CPU: /* llama.cpp --n-cpu-moe N: layers 0..N-1 on the CPU */
        for (uint64_t i = 0; i < full; i++)
            place_whole_layer(E, L - 1 - (uint32_t)i, resident);
        return MP_OK;
    case MP_POL_LAST_N_CPU:
        for (uint64_t i = 0; i < full; i++)
            place_whole_layer(E, (uint32_t)i, resident);
        return MP_OK;
    case MP_POL_BEST_LAYERS:
        return place_best_layers(t, tab, st, slots, resident, err);
    case MP_POL_PLAN:
        return place_plan(t, tab, st, slots, resident, err);
    case MP_POL_PROFILE: { /* profiles name model blocks: map them to the trace's MoE layers */
        const mp_strp *p = cfg->profile;
        if (!p)
            return mp_fail(err, MP_ERR_ARG, "simulate: policy profile needs a profile (--placement-profile)");
        const uint32_t blocks = mp_sim_trace_blocks(t);
        if (p->n_layers != blocks || p->n_experts != E)
            return mp_fail(err, MP_ERR_ARG, "simulate: the profile is for %u layers x %u experts, the trace's model "
                           "has %u x %u", p->n_layers, p->n_experts, blocks, E);
        const uint64_t n = slots < mp_strp_resident(p) ? slots : mp_strp_resident(p);
        for (uint64_t i = 0; i < n; i++) {
            uint32_t l = 0; /* model_layer is increasing */
            while (l < L && t->model_layer[l] < p->ranked[i].layer)
                l++;
            if (l < L && t->model_layer[l] == p->ranked[i].layer)
                resident[(size_t)l * E + p->ranked[i].expert] = 1;
        }
        return MP_OK;
    }
    default:
        break;
    }
    return mp_fail(err, MP_ERR_INTERNAL, "simulate: %s is not a static policy", mp_sim_policy_name(policy));
}

/* ---- online policies ---- */

mp_tier_policy pol_tier_policy(mp_sim_policy policy)
{
    switch (policy) {
    case MP_POL_LFU:
        return MP_TIER_LFU;
    case MP_POL_DECAYED_LFU:
        return MP_TIER_DECAYED_LFU;
    case MP_POL_WINDOW_LFU:
        return MP_TIER_WINDOW_LFU;
    case MP_POL_LRU:
        return MP_TIER_LRU;
    case MP_POL_COST:
        return MP_TIER_COST;
    default:
        return MP_TIER_OFF;
    }
}

struct belady_state {
    const mp_sim_trace *t;
    uint32_t L, E;
    /* per cell, the steps at which the layer routes to the expert (CSR) */
    uint64_t *occ_start;  /* (L * E + 1) */
    uint32_t *occ;        /* (total uses) step indices, ascending per cell */
    uint64_t *occ_ptr;    /* (L * E) the next use not yet passed */
    uint16_t *cand;       /* (E) scratch: admission candidates */
};

void belady_free(belady_state *p)
{
    if (!p)
        return;
    free(p->occ_start);
    free(p->occ);
    free(p->occ_ptr);
    free(p->cand);
    free(p);
}

static mp_status belady_index(belady_state *p, mp_error *err)
{
    const mp_sim_trace *t = p->t;
    const size_t cells = (size_t)p->L * p->E;
    if (t->n_steps >= UINT32_MAX)
        return mp_fail(err, MP_ERR_LIMIT, "simulate: belady: %llu steps: expected fewer than 2^32",
                       (unsigned long long)t->n_steps);
    p->occ_start = calloc(cells + 1, sizeof *p->occ_start);
    p->occ_ptr = calloc(cells, sizeof *p->occ_ptr);
    uint8_t *seen = calloc(p->E, 1);
    if (!p->occ_start || !p->occ_ptr || !seen) {
        free(seen);
        return mp_fail(err, MP_ERR_NOMEM, "simulate: belady: out of memory");
    }
    /* two passes: count the (step, layer, expert) uses, then fill */
    for (int pass = 0; pass < 2; pass++) {
        for (uint64_t si = 0; si < t->n_steps; si++) {
            const mp_sim_step *step = &t->steps[si];
            for (uint32_t l = 0; l < p->L; l++) {
                const uint16_t *ids = mp_sim_step_ids(t, step, l);
                uint64_t n = (uint64_t)step->rows * t->top_k;
                for (uint64_t i = 0; i < n; i++) {
                    uint16_t e = ids[i];
                    if (seen[e])
                        continue;
                    seen[e] = 1;
                    size_t c = (size_t)l * p->E + e;
                    if (pass == 0)
                        p->occ_start[c + 1]++;
                    else
                        p->occ[p->occ_ptr[c]++] = (uint32_t)si;
                }
                for (uint64_t i = 0; i < n; i++)
                    seen[ids[i]] = 0;
            }
        }
        if (pass == 0) {
            for (size_t c = 0; c < cells; c++)
                p->occ_start[c + 1] += p->occ_start[c];
            p->occ = malloc(sizeof *p->occ * (p->occ_start[cells] ? p->occ_start[cells] : 1));
            if (!p->occ) {
                free(seen);
                return mp_fail(err, MP_ERR_NOMEM, "simulate: belady: out of memory for %llu uses",
                               (unsigned long long)p->occ_start[cells]);
            }
            memcpy(p->occ_ptr, p->occ_start, sizeof *p->occ_ptr * cells);
        }
    }
    memcpy(p->occ_ptr, p->occ_start, sizeof *p->occ_ptr * cells);
    free(seen);
    return MP_OK;
}

mp_status belady_init(belady_state **out, const mp_sim_trace *t, mp_error *err)
{
    *out = NULL;
    belady_state *p = calloc(1, sizeof *p);
    if (!p)
        return mp_fail(err, MP_ERR_NOMEM, "simulate: out of memory");
    p->t = t;
    p->L = t->n_layers;
    p->E = t->n_experts;
    mp_status s = MP_OK;
    if (!(p->cand = malloc(sizeof *p->cand * p->E)))
        s = mp_fail(err, MP_ERR_NOMEM, "simulate: out of memory for policy state");
    if (!s)
        s = belady_index(p, err);
    if (s) {
        belady_free(p);
        return s;
    }
    *out = p;
    return MP_OK;
}

static uint64_t belady_next(const belady_state *p, size_t cell)
{
    return p->occ_ptr[cell] < p->occ_start[cell + 1] ? p->occ[p->occ_ptr[cell]] : UINT64_MAX;
}

void belady_initial(belady_state *p, sim_engine *s)
{
    /* per layer, the cap experts used soonest (selection by repeated minimum: caps are small) */
    for (uint32_t l = 0; l < p->L; l++) {
        uint32_t cap = sim_cap(s, l);
        for (uint32_t k = 0; k < cap; k++) {
            uint32_t best = UINT32_MAX;
            uint64_t best_next = UINT64_MAX;
            for (uint32_t e = 0; e < p->E; e++) {
                uint64_t nx = belady_next(p, (size_t)l * p->E + e);
                if (!sim_is_resident(s, l, e) && nx < best_next) {
                    best = e;
                    best_next = nx;
                }
            }
            if (best == UINT32_MAX)
                break;
            sim_place(s, l, best);
        }
    }
}

void belady_after(belady_state *p, sim_engine *s, uint32_t l, const uint16_t *used, uint32_t n_used)
{
    const size_t base = (size_t)l * p->E;
    const uint8_t *res = sim_resident_row(s, l);
    for (uint32_t u = 0; u < n_used; u++)
        p->occ_ptr[base + used[u]]++; /* pass the current use */
    /* candidates by next use asc */
    uint16_t *cand = p->cand;
    uint32_t n = 0;
    for (uint32_t u = 0; u < n_used; u++) {
        uint16_t e = used[u];
        uint64_t nx = belady_next(p, base + e);
        if (res[e] || nx == UINT64_MAX)
            continue;
        uint32_t j = n++;
        while (j > 0 && belady_next(p, base + cand[j - 1]) > nx) {
            cand[j] = cand[j - 1];
            j--;
        }
        cand[j] = e;
    }
    uint32_t cap = sim_cap(s, l);
    for (uint32_t i = 0; i < n; i++) {
        if (sim_n_resident(s, l) < cap) {
            sim_admit(s, l, cand[i]);
            continue;
        }
        if (cap == 0)
            return;
        uint32_t victim = UINT32_MAX, n_res;
        uint64_t victim_next = 0;
        const uint16_t *list = sim_resident_list(s, l, &n_res);
        for (uint32_t j = 0; j < n_res; j++) {
            uint32_t e = list[j]; /* used farthest in the future; the lowest index on ties */
            uint64_t nx = belady_next(p, base + e);
            if (victim == UINT32_MAX || nx > victim_next || (nx == victim_next && e < victim)) {
                victim = e;
                victim_next = nx;
            }
        }
        if (victim_next <= belady_next(p, base + cand[i]))
            return;
        sim_evict(s, l, victim);
        sim_admit(s, l, cand[i]);
    }
}
