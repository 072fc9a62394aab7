/* simulator/policies.c — placement policies: static placements built from train statistics, and
 * online caches updated after every invocation (LFU, decayed LFU, windowed LFU, LRU, Belady).
 *
 * Online policies keep one cache per layer (capacities set by the engine); they only ever admit
 * experts the current invocation routed to (demand admission) and evict residents. Ties are
 * broken by expert index so that every replay is deterministic.
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

struct pol_state {
    mp_sim_policy kind;
    const mp_sim_trace *t;
    uint32_t L, E;
    double alpha, beta, epsilon;
    uint32_t window;
    double *score;        /* (L, E) LFU count / decayed score (scaled by layer_scale) / window count */
    double *layer_scale;  /* (L) decayed LFU: alpha^-invocations, so that old scores need no decay */
    uint64_t *last_use;   /* (L, E) LRU: invocation tick of the last use */
    uint64_t tick;
    /* windowed LFU: per layer a ring of the last `window` invocations' (expert, rows) lists */
    uint32_t win_width;   /* most experts one invocation can route to: min(E, top_k * max_rows) */
    uint16_t *win_e;      /* (L, window, win_width) */
    uint32_t *win_rows;   /* (L, window, win_width) */
    uint32_t *win_n;      /* (L, window) experts in each remembered invocation */
    uint32_t *win_head, *win_len; /* (L) */
    /* Belady: per cell, the steps at which the layer routes to the expert (CSR) */
    uint64_t *occ_start;  /* (L * E + 1) */
    uint32_t *occ;        /* (total uses) step indices, ascending per cell */
    uint64_t *occ_ptr;    /* (L * E) the next use not yet passed */
    uint16_t *cand;       /* (E) scratch: admission candidates */
};

void pol_free(pol_state *p)
{
    if (!p)
        return;
    free(p->score);
    free(p->layer_scale);
    free(p->last_use);
    free(p->win_e);
    free(p->win_rows);
    free(p->win_n);
    free(p->win_head);
    free(p->win_len);
    free(p->occ_start);
    free(p->occ);
    free(p->occ_ptr);
    free(p->cand);
    free(p);
}

static mp_status belady_index(pol_state *p, mp_error *err)
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

mp_status pol_init(pol_state **out, const mp_sim_trace *t, const mp_sim_config *cfg, mp_sim_policy policy,
                   mp_error *err)
{
    *out = NULL;
    pol_state *p = calloc(1, sizeof *p);
    if (!p)
        return mp_fail(err, MP_ERR_NOMEM, "simulate: out of memory");
    p->kind = policy;
    p->t = t;
    p->L = t->n_layers;
    p->E = t->n_experts;
    p->alpha = cfg->alpha;
    p->beta = cfg->beta;
    p->epsilon = policy == MP_POL_DECAYED_LFU ? cfg->epsilon : 0.0;
    p->window = cfg->window;
    const size_t cells = (size_t)p->L * p->E;
    mp_status s = MP_OK;
    if (policy == MP_POL_DECAYED_LFU &&
        (mp_sim_param_range("alpha", cfg->alpha) || mp_sim_param_range("beta", cfg->beta) ||
         mp_sim_param_range("epsilon", cfg->epsilon)))
        s = mp_fail(err, MP_ERR_ARG, "simulate: decayed-lfu: alpha %g, beta %g, epsilon %g: expected 0 < alpha <= 1, "
                    "beta > 0, epsilon >= 0", cfg->alpha, cfg->beta, cfg->epsilon);
    if (!s && policy == MP_POL_WINDOW_LFU && mp_sim_param_range("window", (double)cfg->window))
        s = mp_fail(err, MP_ERR_ARG, "simulate: window-lfu: window %u: expected 1..65536 invocations", cfg->window);
    if (!s) {
        p->score = calloc(cells, sizeof *p->score);
        p->layer_scale = malloc(sizeof *p->layer_scale * p->L);
        p->last_use = calloc(cells, sizeof *p->last_use);
        p->cand = malloc(sizeof *p->cand * p->E);
        if (!p->score || !p->layer_scale || !p->last_use || !p->cand)
            s = mp_fail(err, MP_ERR_NOMEM, "simulate: out of memory for policy state");
    }
    for (uint32_t l = 0; !s && l < p->L; l++)
        p->layer_scale[l] = 1.0;
    if (!s && policy == MP_POL_WINDOW_LFU) {
        size_t slots = (size_t)p->L * p->window;
        uint64_t width = (uint64_t)t->top_k * t->max_rows;
        p->win_width = width < p->E ? (uint32_t)width : p->E;
        p->win_e = malloc(sizeof *p->win_e * slots * p->win_width);
        p->win_rows = malloc(sizeof *p->win_rows * slots * p->win_width);
        p->win_n = calloc(slots, sizeof *p->win_n);
        p->win_head = calloc(p->L, sizeof *p->win_head);
        p->win_len = calloc(p->L, sizeof *p->win_len);
        if (!p->win_e || !p->win_rows || !p->win_n || !p->win_head || !p->win_len)
            s = mp_fail(err, MP_ERR_NOMEM, "simulate: window-lfu: out of memory for a window of %u", p->window);
    }
    if (!s && policy == MP_POL_BELADY)
        s = belady_index(p, err);
    if (s) {
        pol_free(p);
        return s;
    }
    *out = p;
    return MP_OK;
}

/* Candidates: the invocation's experts that are not resident, by score desc (index asc on ties).
 * Swap rule: while the best candidate beats the weakest resident by the factor (1 + epsilon),
 * evict that resident and admit the candidate. Fill free slots first. */
static void lfu_admit(pol_state *p, sim_engine *s, uint32_t l, const uint16_t *used, uint32_t n_used)
{
    const double *score = p->score + (size_t)l * p->E;
    const uint8_t *res = sim_resident_row(s, l);
    uint16_t *cand = p->cand;
    uint32_t n = 0;
    for (uint32_t u = 0; u < n_used; u++)
        if (!res[used[u]]) {
            uint16_t e = used[u];
            uint32_t j = n++;
            while (j > 0 && (score[cand[j - 1]] < score[e] || (score[cand[j - 1]] == score[e] && cand[j - 1] > e))) {
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
        const uint16_t *list = sim_resident_list(s, l, &n_res);
        for (uint32_t j = 0; j < n_res; j++) {
            uint32_t e = list[j]; /* the weakest; the lowest index on ties */
            if (victim == UINT32_MAX || score[e] < score[victim] || (score[e] == score[victim] && e < victim))
                victim = e;
        }
        if (!(score[cand[i]] > (1.0 + p->epsilon) * score[victim]))
            return; /* candidates are sorted: no later one passes either */
        sim_evict(s, l, victim);
        sim_admit(s, l, cand[i]);
    }
}

static void lru_admit(pol_state *p, sim_engine *s, uint32_t l, const uint16_t *used, uint32_t n_used)
{
    const uint64_t *last = p->last_use + (size_t)l * p->E;
    const uint8_t *res = sim_resident_row(s, l);
    uint32_t cap = sim_cap(s, l);
    for (uint32_t u = 0; u < n_used; u++) {
        uint16_t e = used[u];
        if (res[e])
            continue;
        if (sim_n_resident(s, l) < cap) {
            sim_admit(s, l, e);
            continue;
        }
        if (cap == 0)
            return;
        uint32_t victim = UINT32_MAX, n_res;
        const uint16_t *list = sim_resident_list(s, l, &n_res);
        for (uint32_t i = 0; i < n_res; i++) {
            uint32_t x = list[i]; /* the least recently used; the lowest index on ties */
            if (victim == UINT32_MAX || last[x] < last[victim] || (last[x] == last[victim] && x < victim))
                victim = x;
        }
        if (last[victim] == p->tick)
            return; /* every resident serves this invocation */
        sim_evict(s, l, victim);
        sim_admit(s, l, e);
    }
}

static uint64_t belady_next(const pol_state *p, size_t cell)
{
    return p->occ_ptr[cell] < p->occ_start[cell + 1] ? p->occ[p->occ_ptr[cell]] : UINT64_MAX;
}

void pol_belady_initial(pol_state *p, sim_engine *s)
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

static void belady_admit(pol_state *p, sim_engine *s, uint32_t l, const uint16_t *used, uint32_t n_used)
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

/* Hot path of the online policies: called once per (step, layer). */
void pol_after(pol_state *p, sim_engine *s, uint32_t l, uint64_t step, const uint16_t *used,
               const uint32_t *rows_of, uint32_t n_used)
{
    (void)step;
    double *score = p->score + (size_t)l * p->E;
    switch (p->kind) {
    case MP_POL_LFU:
        for (uint32_t u = 0; u < n_used; u++)
            score[used[u]] += rows_of[used[u]];
        lfu_admit(p, s, l, used, n_used);
        return;
    case MP_POL_DECAYED_LFU: {
        /* score_t = alpha * score_{t-1} + beta * rows_t, stored divided by alpha^t: only the
         * experts used now change, and comparisons within a layer are unaffected */
        double scale = p->layer_scale[l] /= p->alpha;
        for (uint32_t u = 0; u < n_used; u++)
            score[used[u]] += p->beta * rows_of[used[u]] * scale;
        if (scale > 1e150) {
            for (uint32_t e = 0; e < p->E; e++)
                score[e] /= scale;
            p->layer_scale[l] = 1.0;
        }
        lfu_admit(p, s, l, used, n_used);
        return;
    }
    case MP_POL_WINDOW_LFU: {
        size_t ring = (size_t)l * p->window;
        if (p->win_len[l] == p->window) { /* forget the oldest invocation */
            size_t old = ring + p->win_head[l];
            for (uint32_t i = 0; i < p->win_n[old]; i++)
                score[p->win_e[old * p->win_width + i]] -= p->win_rows[old * p->win_width + i];
            p->win_head[l] = (p->win_head[l] + 1) % p->window;
            p->win_len[l]--;
        }
        size_t slot = ring + (p->win_head[l] + p->win_len[l]) % p->window;
        p->win_n[slot] = n_used;
        for (uint32_t u = 0; u < n_used; u++) {
            p->win_e[slot * p->win_width + u] = used[u];
            p->win_rows[slot * p->win_width + u] = rows_of[used[u]];
            score[used[u]] += rows_of[used[u]];
        }
        p->win_len[l]++;
        lfu_admit(p, s, l, used, n_used);
        return;
    }
    case MP_POL_LRU:
        p->tick++;
        for (uint32_t u = 0; u < n_used; u++)
            p->last_use[(size_t)l * p->E + used[u]] = p->tick;
        lru_admit(p, s, l, used, n_used);
        return;
    case MP_POL_BELADY:
        belady_admit(p, s, l, used, n_used);
        return;
    default:
        return;
    }
}
