/* runtime/tier.c — the adaptive expert tier (see tier.h): per-layer slots, their states, the online
 * policies' scores and the one rule each policy admits by. The GPU executor and the simulator both
 * drive it, so each rule lives here once.
 *
 * Invariants (besides tier.h's):
 *  - a layer's slots fill in order and are never freed (a move replaces the victim in its slot), so
 *    slots [0, n_filled[l]) hold an expert and the rest are free;
 *  - state[l][e] is LOADING or READY exactly when slot_of[l][e] >= 0 and slot_expert holds e there;
 *  - loading is the number of LOADING experts over all layers;
 *  - decayed scores (decayed-lfu, cost) are stored multiplied by layer_scale[l] = alpha^-invocations,
 *    so an invocation touches only the experts it routed to (comparisons within a layer are
 *    unchanged; the cost rule divides the scale out).
 * Per invocation the work is the invocation's experts and the layer's slots, never all experts
 * (the simulator replays tens of millions of routing decisions a second through here).
 */
#include "runtime/tier.h"

#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "base/numparse.h"
#include "runtime/decide.h"

struct mp_tier {
    uint32_t L, E;
    mp_tier_params p;
    uint32_t *cap;          /* (L) */
    uint32_t *first;        /* (L) the layer's first slot in slot_expert */
    uint32_t *n_filled;     /* (L) slots holding an expert: [0, n_filled) */
    int32_t *slot_expert;   /* (sum of cap) the expert in each slot, -1 free */
    uint8_t *state;         /* (L, E) mp_tier_state */
    int32_t *slot_of;       /* (L, E) the expert's slot in its layer, -1 none */
    uint8_t *pinned;        /* (L, E) static residents: never candidates */
    uint32_t loading;
    double *score;          /* (L, E) lfu / window-lfu counts; decayed-lfu and cost scores x layer_scale */
    double *layer_scale;    /* (L) alpha^-invocations of the layer (decayed scores) */
    uint64_t *last_use;     /* (L, E) lru: the tick of the expert's last invocation */
    uint64_t tick;          /* lru: one per invocation, over all layers */
    /* window-lfu: per layer a ring of its last `window` invocations' (expert, rows) lists */
    uint32_t win_width;     /* most experts one invocation routes to: min(E, top_k × max_rows) */
    uint16_t *win_e;        /* (L, window, win_width) */
    uint32_t *win_rows;     /* (L, window, win_width) */
    uint32_t *win_n;        /* (L, window) experts in each remembered invocation */
    uint32_t *win_head, *win_len; /* (L) */
    uint16_t *cand;         /* (E) scratch: one invocation's candidates */
    mp_tier_stats stats;
};

static const char *const policy_names[] = {
    [MP_TIER_OFF] = "off", [MP_TIER_LRU] = "lru", [MP_TIER_LFU] = "lfu",
    [MP_TIER_DECAYED_LFU] = "decayed-lfu", [MP_TIER_WINDOW_LFU] = "window-lfu", [MP_TIER_COST] = "cost",
};
#define N_POLICIES (int)(sizeof policy_names / sizeof policy_names[0])

const char *mp_tier_policy_name(mp_tier_policy p)
{
    return (int)p >= 0 && (int)p < N_POLICIES ? policy_names[p] : "unknown";
}

mp_status mp_tier_policy_parse(const char *text, mp_tier_policy *out, mp_error *err)
{
    for (int p = 0; text && p < N_POLICIES; p++)
        if (!strcmp(text, policy_names[p])) {
            *out = (mp_tier_policy)p;
            return MP_OK;
        }
    return mp_fail(err, MP_ERR_ARG, "adaptive tier policy '%s': expected off, lru, lfu, decayed-lfu, window-lfu or "
                   "cost", text ? text : "");
}

const char *mp_tier_param_range(const char *param, double v)
{
    if (!strcmp(param, "alpha"))
        return isfinite(v) && v > 0 && v <= 1 ? NULL : "0 < alpha <= 1";
    if (!strcmp(param, "beta"))
        return isfinite(v) && v > 0 ? NULL : "beta > 0";
    if (!strcmp(param, "epsilon"))
        return isfinite(v) && v >= 0 ? NULL : "epsilon >= 0";
    if (!strcmp(param, "window"))
        return v >= 1 && v <= 65536 && v == floor(v) ? NULL : "an integer window 1..65536";
    return "a known parameter";
}

void mp_tier_params_default(mp_tier_params *p)
{
    memset(p, 0, sizeof *p);
    p->policy = MP_TIER_OFF;
    p->alpha = 0.9;
    p->beta = 1.0;
    p->epsilon = 0.0;
    p->window = 64;
}

/* The parameters the policy reads, in range: NULL, or the first one that is not, with its range. */
static const char *params_check(const mp_tier_params *p, const char **param, double *value)
{
    const mp_tier_policy k = p->policy;
    const struct { const char *name; double v; bool used; } checks[] = {
        {"alpha", p->alpha, k == MP_TIER_DECAYED_LFU || k == MP_TIER_COST},
        {"beta", p->beta, k == MP_TIER_DECAYED_LFU},
        {"epsilon", p->epsilon, k == MP_TIER_LFU || k == MP_TIER_DECAYED_LFU || k == MP_TIER_WINDOW_LFU},
        {"window", (double)p->window, k == MP_TIER_WINDOW_LFU},
    };
    for (size_t i = 0; i < sizeof checks / sizeof checks[0]; i++) {
        const char *range = checks[i].used ? mp_tier_param_range(checks[i].name, checks[i].v) : NULL;
        if (range) {
            *param = checks[i].name;
            *value = checks[i].v;
            return range;
        }
    }
    return NULL;
}

void mp_tier_free(mp_tier *t)
{
    if (!t)
        return;
    free(t->cap);
    free(t->first);
    free(t->n_filled);
    free(t->slot_expert);
    free(t->state);
    free(t->slot_of);
    free(t->pinned);
    free(t->score);
    free(t->layer_scale);
    free(t->last_use);
    free(t->win_e);
    free(t->win_rows);
    free(t->win_n);
    free(t->win_head);
    free(t->win_len);
    free(t->cand);
    free(t);
}

mp_status mp_tier_new(mp_tier **out, uint32_t n_layers, uint32_t n_experts, const uint32_t *cap,
                      const uint8_t *pinned, const mp_tier_params *p, mp_error *err)
{
    *out = NULL;
    const char *param = NULL, *range;
    double value = 0;
    if (n_layers < 1 || n_experts < 1 || n_experts > 65536)
        return mp_fail(err, MP_ERR_ARG, "adaptive tier: %u layers x %u experts: expected at least one layer and "
                       "1..65536 experts", n_layers, n_experts);
    if ((int)p->policy < 0 || (int)p->policy >= N_POLICIES)
        return mp_fail(err, MP_ERR_ARG, "adaptive tier: policy %d: expected off, lru, lfu, decayed-lfu, window-lfu "
                       "or cost", (int)p->policy);
    if ((range = params_check(p, &param, &value)))
        return mp_fail(err, MP_ERR_ARG, "adaptive tier (%s): %s %g: expected %s", mp_tier_policy_name(p->policy),
                       param, value, range);
    if (p->policy == MP_TIER_WINDOW_LFU && (p->top_k < 1 || p->max_rows < 1))
        return mp_fail(err, MP_ERR_ARG, "adaptive tier (window-lfu): top_k %u, max_rows %u: expected both >= 1 "
                       "(they size the window's memory)", p->top_k, p->max_rows);
    if (p->policy == MP_TIER_COST && !(isfinite(p->route_saving_ns) && p->route_saving_ns >= 0 &&
                                       isfinite(p->copy_cost_ns) && p->copy_cost_ns >= 0))
        return mp_fail(err, MP_ERR_ARG, "adaptive tier (cost): route saving %g ns, copy cost %g ns: expected finite "
                       "prices >= 0", p->route_saving_ns, p->copy_cost_ns);
    const size_t cells = (size_t)n_layers * n_experts;
    uint64_t total = 0;
    for (uint32_t l = 0; l < n_layers; l++) {
        uint32_t outside = n_experts; /* experts outside the pinned set */
        for (uint32_t e = 0; pinned && e < n_experts; e++)
            outside -= pinned[(size_t)l * n_experts + e] != 0;
        if (cap[l] > outside)
            return mp_fail(err, MP_ERR_ARG, "adaptive tier: layer %u: %u slots: expected at most its %u experts "
                           "outside the static placement", l, cap[l], outside);
        total += cap[l];
    }
    mp_tier *t = calloc(1, sizeof *t);
    if (!t)
        return mp_fail(err, MP_ERR_NOMEM, "adaptive tier: out of memory");
    t->L = n_layers;
    t->E = n_experts;
    t->p = *p;
    t->cap = malloc(sizeof *t->cap * n_layers);
    t->first = malloc(sizeof *t->first * n_layers);
    t->n_filled = calloc(n_layers, sizeof *t->n_filled);
    t->slot_expert = malloc(sizeof *t->slot_expert * (total ? total : 1));
    t->state = calloc(cells, 1);
    t->slot_of = malloc(sizeof *t->slot_of * cells);
    t->pinned = calloc(cells, 1);
    t->score = calloc(cells, sizeof *t->score);
    t->layer_scale = malloc(sizeof *t->layer_scale * n_layers);
    t->last_use = calloc(cells, sizeof *t->last_use);
    t->cand = malloc(sizeof *t->cand * n_experts);
    bool ok = t->cap && t->first && t->n_filled && t->slot_expert && t->state && t->slot_of && t->pinned &&
              t->score && t->layer_scale && t->last_use && t->cand;
    if (ok && p->policy == MP_TIER_WINDOW_LFU) {
        const size_t rings = (size_t)n_layers * p->window;
        const uint64_t width = (uint64_t)p->top_k * p->max_rows;
        t->win_width = width < n_experts ? (uint32_t)width : n_experts;
        t->win_e = malloc(sizeof *t->win_e * rings * t->win_width);
        t->win_rows = malloc(sizeof *t->win_rows * rings * t->win_width);
        t->win_n = calloc(rings, sizeof *t->win_n);
        t->win_head = calloc(n_layers, sizeof *t->win_head);
        t->win_len = calloc(n_layers, sizeof *t->win_len);
        ok = t->win_e && t->win_rows && t->win_n && t->win_head && t->win_len;
    }
    if (!ok) {
        mp_tier_free(t);
        return mp_fail(err, MP_ERR_NOMEM, "adaptive tier: out of memory for %u layers x %u experts%s", n_layers,
                       n_experts, p->policy == MP_TIER_WINDOW_LFU ? " and its window" : "");
    }
    uint32_t next = 0;
    for (uint32_t l = 0; l < n_layers; l++) {
        t->cap[l] = cap[l];
        t->first[l] = next;
        next += cap[l];
        t->layer_scale[l] = 1.0;
    }
    for (uint64_t s = 0; s < total; s++)
        t->slot_expert[s] = -1;
    for (size_t c = 0; c < cells; c++)
        t->slot_of[c] = -1;
    if (pinned)
        for (size_t c = 0; c < cells; c++)
            t->pinned[c] = pinned[c] != 0;
    *out = t;
    return MP_OK;
}

uint64_t mp_tier_split(uint64_t slots, uint32_t n_layers, uint32_t n_experts, const uint8_t *pinned, uint32_t *cap)
{
    /* Equal shares, as often as a layer's share outgrows its experts outside the pinned set: the
     * excess goes round again to the layers with room, and the last remainder (less than one slot
     * per such layer) to the first of them. */
    uint64_t given = 0;
    for (uint32_t l = 0; l < n_layers; l++)
        cap[l] = 0;
    for (;;) {
        uint32_t open = 0; /* layers with room */
        for (uint32_t l = 0; l < n_layers; l++) {
            uint32_t outside = n_experts;
            for (uint32_t e = 0; pinned && e < n_experts; e++)
                outside -= pinned[(size_t)l * n_experts + e] != 0;
            open += cap[l] < outside;
        }
        const uint64_t left = slots - given;
        if (!open || !left)
            return given;
        const uint64_t share = left / open;
        uint64_t extra = share ? 0 : left; /* the remainder round: one each to the first */
        for (uint32_t l = 0; l < n_layers; l++) {
            uint32_t outside = n_experts;
            for (uint32_t e = 0; pinned && e < n_experts; e++)
                outside -= pinned[(size_t)l * n_experts + e] != 0;
            const uint32_t room = outside - cap[l];
            if (!room)
                continue;
            uint64_t add = share ? share : extra ? 1 : 0;
            if (!share && extra)
                extra--;
            add = add < room ? add : room;
            cap[l] += (uint32_t)add;
            given += add;
        }
    }
}

/* ---- the policies ---- */

/* The policy's scores after an invocation that routed rows_of[e] rows to each used expert. */
static void update_scores(mp_tier *t, uint32_t l, const uint16_t *used, const uint32_t *rows_of, uint32_t n_used)
{
    double *score = t->score + (size_t)l * t->E;
    switch (t->p.policy) {
    case MP_TIER_LFU:
        for (uint32_t u = 0; u < n_used; u++)
            score[used[u]] += rows_of[used[u]];
        return;
    case MP_TIER_DECAYED_LFU:
    case MP_TIER_COST: {
        /* score_t = alpha · score_{t-1} + beta · rows_t, stored multiplied by alpha^-t: only the
         * experts used now change (cost: beta 1, the score in routes) */
        const double beta = t->p.policy == MP_TIER_COST ? 1.0 : t->p.beta;
        const double scale = t->layer_scale[l] /= t->p.alpha;
        for (uint32_t u = 0; u < n_used; u++)
            score[used[u]] += beta * rows_of[used[u]] * scale;
        if (scale > 1e150) {
            for (uint32_t e = 0; e < t->E; e++)
                score[e] /= scale;
            t->layer_scale[l] = 1.0;
        }
        return;
    }
    case MP_TIER_WINDOW_LFU: {
        const uint32_t W = t->p.window, width = t->win_width;
        const size_t ring = (size_t)l * W;
        if (t->win_len[l] == W) { /* forget the oldest invocation */
            const size_t old = ring + t->win_head[l];
            for (uint32_t i = 0; i < t->win_n[old]; i++)
                score[t->win_e[old * width + i]] -= t->win_rows[old * width + i];
            t->win_head[l] = (t->win_head[l] + 1) % W;
            t->win_len[l]--;
        }
        const size_t at = ring + (t->win_head[l] + t->win_len[l]) % W;
        const uint32_t n = n_used < width ? n_used : width; /* n_used <= top_k × rows: the caller's bound */
        t->win_n[at] = n;
        for (uint32_t u = 0; u < n; u++) {
            t->win_e[at * width + u] = used[u];
            t->win_rows[at * width + u] = rows_of[used[u]];
            score[used[u]] += rows_of[used[u]];
        }
        t->win_len[l]++;
        return;
    }
    case MP_TIER_LRU:
        t->tick++;
        for (uint32_t u = 0; u < n_used; u++)
            t->last_use[(size_t)l * t->E + used[u]] = t->tick;
        return;
    default:
        return;
    }
}

/* The layer's weakest READY expert by the policy's key (lru: the least recently used; the others:
 * the least score), the lowest index on ties; -1 when no slot is READY (LOADING ones are never
 * victims). Scans the layer's slots, not its experts. */
static int32_t weakest_ready(const mp_tier *t, uint32_t l)
{
    const int32_t *slots = t->slot_expert + t->first[l];
    const uint8_t *state = t->state + (size_t)l * t->E;
    const uint32_t n = t->n_filled[l];
    int32_t victim = -1;
    /* the best key kept in a register: this loop is most of a replay's time under lru */
    if (t->p.policy == MP_TIER_LRU) {
        const uint64_t *last = t->last_use + (size_t)l * t->E;
        uint64_t least = 0;
        for (uint32_t s = 0; s < n; s++) {
            const int32_t e = slots[s];
            if (state[e] != MP_TIER_READY)
                continue;
            const uint64_t k = last[e];
            if (victim < 0 || k < least || (k == least && e < victim))
                victim = e, least = k;
        }
        return victim;
    }
    const double *score = t->score + (size_t)l * t->E;
    double least = 0;
    for (uint32_t s = 0; s < n; s++) {
        const int32_t e = slots[s];
        if (state[e] != MP_TIER_READY)
            continue;
        const double k = score[e];
        if (victim < 0 || k < least || (k == least && e < victim))
            victim = e, least = k;
    }
    return victim;
}

/* Whether candidate c, which the invocation routed rows_now rows to, takes the place of victim v
 * (-1: a free slot) by the policy's rule. */
static bool admits(const mp_tier *t, uint32_t l, uint32_t c, uint32_t rows_now, int32_t v)
{
    const size_t base = (size_t)l * t->E;
    switch (t->p.policy) {
    case MP_TIER_LRU: /* a free slot always; else the victim must not serve this invocation */
        return v < 0 || t->last_use[base + (uint32_t)v] != t->tick;
    case MP_TIER_COST: { /* routes expected over the score's memory, priced (runtime/decide.h) */
        /* The candidate's routes to come are estimated from its uses before this invocation: its
         * score then, (score − rows_now) / alpha (cost adds each route with weight 1), which under a
         * steady rate of r routes an invocation is r / (1 − alpha), the routes of the score's
         * memory. The routes just served
         * ran cold already: counted as evidence, a first use alone would nearly pay for a copy of
         * small experts (flame on the H200: 3.6 admissions a step, 3-5 % of routes on the tier,
         * 5-11 % slower than the static profile; bench/NOTES-adaptive.md). */
        const double scale = t->layer_scale[l];
        const double before = (t->score[base + c] / scale - rows_now) / t->p.alpha;
        const double gain = before - (v < 0 ? 0.0 : t->score[base + (uint32_t)v] / scale);
        return mp_decide_admit(gain, t->p.route_saving_ns, t->p.copy_cost_ns);
    }
    default: /* lfu, decayed-lfu, window-lfu: a free slot always; else beat the victim by 1 + epsilon */
        return v < 0 || t->score[base + c] > (1.0 + t->p.epsilon) * t->score[base + (uint32_t)v];
    }
}

uint32_t mp_tier_after(mp_tier *t, uint32_t l, const uint16_t *used, const uint32_t *rows_of, uint32_t n_used,
                       mp_tier_move *out, uint32_t max_out)
{
    t->stats.invocations++;
    if (!t->cap[l]) /* no slot: nothing to serve, nothing to decide */
        return 0;
    const size_t base = (size_t)l * t->E;
    uint8_t *state = t->state + base;
    for (uint32_t u = 0; u < n_used; u++) {
        const uint16_t e = used[u];
        if (state[e] == MP_TIER_READY)
            t->stats.hits += rows_of[e];
        else if (state[e] == MP_TIER_LOADING)
            t->stats.late += rows_of[e];
    }
    if (t->p.policy == MP_TIER_OFF)
        return 0;
    update_scores(t, l, used, rows_of, n_used);
    /* candidates: the invocation's experts outside the static placement and the slots; lru in the
     * invocation's order, the others by score desc (index asc on ties): when the best fails the
     * rule against the weakest resident, every later one does too */
    const uint8_t *pinned = t->pinned + base;
    const double *score = t->score + base;
    const bool lru = t->p.policy == MP_TIER_LRU;
    uint16_t *cand = t->cand;
    uint32_t n = 0;
    for (uint32_t u = 0; u < n_used; u++) {
        const uint16_t e = used[u];
        if (state[e] != MP_TIER_NONE || pinned[e])
            continue;
        uint32_t j = n++;
        while (!lru && j > 0 && (score[cand[j - 1]] < score[e] || (score[cand[j - 1]] == score[e] && cand[j - 1] > e))) {
            cand[j] = cand[j - 1];
            j--;
        }
        cand[j] = e;
    }
    uint32_t n_out = 0, i = 0;
    for (; i < n; i++) {
        if (n_out == max_out || (t->p.max_loading && t->loading >= t->p.max_loading))
            break;
        const uint16_t c = cand[i];
        const bool free_slot = t->n_filled[l] < t->cap[l];
        const int32_t victim = free_slot ? -1 : weakest_ready(t, l);
        if ((!free_slot && victim < 0) || !admits(t, l, c, rows_of[c], victim))
            break;
        uint32_t slot;
        if (victim < 0) {
            slot = t->n_filled[l]++;
        } else {
            slot = (uint32_t)t->slot_of[base + (uint32_t)victim];
            state[victim] = MP_TIER_NONE;
            t->slot_of[base + (uint32_t)victim] = -1;
            t->stats.evictions++;
        }
        t->slot_expert[t->first[l] + slot] = c;
        t->slot_of[base + c] = (int32_t)slot;
        state[c] = MP_TIER_LOADING;
        t->loading++;
        t->stats.admissions++;
        out[n_out++] = (mp_tier_move){l, slot, c, victim};
    }
    t->stats.refused += n - i;
    return n_out;
}

void mp_tier_landed(mp_tier *t, uint32_t l, uint32_t slot)
{
    if (l >= t->L || slot >= t->n_filled[l])
        return;
    const int32_t e = t->slot_expert[t->first[l] + slot];
    uint8_t *state = t->state + (size_t)l * t->E;
    if (e >= 0 && state[e] == MP_TIER_LOADING) {
        state[e] = MP_TIER_READY;
        t->loading--;
    }
}

bool mp_tier_place(mp_tier *t, uint32_t l, uint32_t e)
{
    if (l >= t->L || e >= t->E)
        return false;
    const size_t cell = (size_t)l * t->E + e;
    if (t->pinned[cell] || t->state[cell] != MP_TIER_NONE || t->n_filled[l] >= t->cap[l])
        return false;
    const uint32_t slot = t->n_filled[l]++;
    t->slot_expert[t->first[l] + slot] = (int32_t)e;
    t->slot_of[cell] = (int32_t)slot;
    t->state[cell] = MP_TIER_READY;
    return true;
}

mp_tier_state mp_tier_state_of(const mp_tier *t, uint32_t l, uint32_t e)
{
    return l < t->L && e < t->E ? (mp_tier_state)t->state[(size_t)l * t->E + e] : MP_TIER_NONE;
}

const uint8_t *mp_tier_states(const mp_tier *t, uint32_t l)
{
    return t->state + (size_t)l * t->E;
}

int32_t mp_tier_slot_of(const mp_tier *t, uint32_t l, uint32_t e)
{
    return l < t->L && e < t->E ? t->slot_of[(size_t)l * t->E + e] : -1;
}

int32_t mp_tier_expert_in(const mp_tier *t, uint32_t l, uint32_t slot)
{
    return l < t->L && slot < t->cap[l] ? t->slot_expert[t->first[l] + slot] : -1;
}

uint32_t mp_tier_cap(const mp_tier *t, uint32_t l)
{
    return l < t->L ? t->cap[l] : 0;
}

uint32_t mp_tier_loading(const mp_tier *t)
{
    return t->loading;
}

const mp_tier_stats *mp_tier_stats_of(const mp_tier *t)
{
    return &t->stats;
}

uint64_t mp_tier_carve(uint8_t *resident, uint32_t n_layers, uint32_t n_experts, const uint32_t *order,
                       uint64_t n_order, uint64_t slots, uint64_t free_slots, uint32_t *cap, uint32_t *warm,
                       uint64_t *n_warm)
{
    /* the budget's room first: spread over the layers with experts outside the placement */
    uint64_t given = mp_tier_split(free_slots < slots ? free_slots : slots, n_layers, n_experts, resident, cap);
    uint64_t carved = 0;
    uint8_t *whole = order && given < slots ? malloc(n_layers) : NULL; /* none: nothing is carved */
    for (uint32_t l = 0; whole && l < n_layers; l++) {
        uint32_t in_layer = 0;
        for (uint32_t e = 0; e < n_experts; e++)
            in_layer += resident[(size_t)l * n_experts + e];
        whole[l] = in_layer == n_experts;
    }
    for (uint64_t i = n_order; whole && i-- > 0 && given < slots;) { /* then the lowest-ranked residents */
        const uint32_t c = order[i], l = c / n_experts;
        if (l >= n_layers || !resident[c] || whole[l])
            continue;
        resident[c] = 0;
        cap[l]++;
        warm[carved++] = c;
        given++;
    }
    free(whole);
    for (uint64_t i = 0; i < carved / 2; i++) { /* best first */
        const uint32_t x = warm[i];
        warm[i] = warm[carved - 1 - i];
        warm[carved - 1 - i] = x;
    }
    *n_warm = carved;
    return given;
}

mp_status mp_tier_size_parse(const char *text, uint64_t *slots, double *share, mp_error *err)
{
    *slots = 0;
    *share = 0;
    const size_t n = strlen(text);
    char *end = NULL;
    errno = 0;
    if (n > 1 && text[n - 1] == '%') {
        const double pct = strtod(text, &end);
        if (end != text + n - 1 || errno || !(pct > 0) || pct > 100)
            return mp_fail(err, MP_ERR_ARG, "--adaptive-slots '%s': expected N expert slots or P%% of the budget's "
                           "room for experts, 0 < P <= 100", text);
        *share = pct / 100.0;
        return MP_OK;
    }
    const unsigned long long v = n && text[0] != '-' && text[0] != '+' ? strtoull(text, &end, 10) : 0;
    if (!n || !end || *end || errno || v < 1 || v > (1ull << 32))
        return mp_fail(err, MP_ERR_ARG, "--adaptive-slots '%s': expected N expert slots (1..2^32) or P%% of the "
                       "budget's room for experts", text);
    *slots = v;
    return MP_OK;
}

mp_status mp_tier_inflight_parse(const char *text, uint32_t *inflight, mp_error *err)
{
    int64_t n;
    if (!mp_parse_i64(text, 1, MP_TIER_MAX_INFLIGHT, &n))
        return mp_fail(err, MP_ERR_ARG, "--adaptive-inflight '%s': expected copies in flight, an integer 1..%d",
                       text, MP_TIER_MAX_INFLIGHT);
    *inflight = (uint32_t)n;
    return MP_OK;
}

uint32_t mp_tier_inflight(uint32_t inflight, uint32_t top_k)
{
    return inflight ? inflight : 2 * top_k;
}

uint64_t mp_tier_size_slots(uint64_t slots, double share, uint64_t room_slots)
{
    if (slots)
        return slots;
    const uint64_t n = (uint64_t)((share > 0 ? share : MP_TIER_DEFAULT_SHARE) * (double)room_slots);
    return n || !room_slots ? n : 1;
}
