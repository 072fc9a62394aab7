/* simulator/sim.c — the replay engine (see sim.h for the model it implements).
 *
 * Invariants during a replay: n_resident[l] <= cap[l]; a cell is in the in-flight FIFO only while
 * its copy may still be running; link_free_ns is when the H2D link finishes the queued weight
 * copies; clock_ns only grows. Everything is deterministic: no randomness, no wall clock.
 */
#include "simulator/sim_internal.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

static const char *const policy_names[MP_POL_COUNT] = {
    [MP_POL_ALL_GPU] = "all-gpu",         [MP_POL_ALL_CPU] = "all-cpu",
    [MP_POL_STATIC_TOPN] = "static-topn", [MP_POL_STATIC_EQUAL] = "static-equal",
    [MP_POL_FIRST_N_CPU] = "first-n-cpu", [MP_POL_LAST_N_CPU] = "last-n-cpu",
    [MP_POL_BEST_LAYERS] = "best-layers", [MP_POL_LFU] = "lfu",
    [MP_POL_DECAYED_LFU] = "decayed-lfu", [MP_POL_WINDOW_LFU] = "window-lfu",
    [MP_POL_LRU] = "lru",                 [MP_POL_BELADY] = "belady",
    [MP_POL_PLAN] = "plan",               [MP_POL_PROFILE] = "profile",
};

const char *mp_sim_policy_name(mp_sim_policy p)
{
    return p >= 0 && p < MP_POL_COUNT ? policy_names[p] : "unknown";
}

int mp_sim_policy_from_name(const char *name)
{
    for (int p = 0; p < MP_POL_COUNT; p++)
        if (!strcmp(name, policy_names[p]))
            return p;
    return -1;
}

const char *mp_sim_param_range(const char *param, double v)
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

bool mp_sim_policy_is_online(mp_sim_policy p)
{
    return p == MP_POL_LFU || p == MP_POL_DECAYED_LFU || p == MP_POL_WINDOW_LFU || p == MP_POL_LRU ||
           p == MP_POL_BELADY;
}

const char *mp_sim_cost_part_name(mp_sim_cost_part p)
{
    static const char *const names[MP_COST_PARTS] = {"gpu_expert", "cpu_expert", "h2d", "d2h",
                                                     "sync", "combine", "non_moe"};
    return p >= 0 && p < MP_COST_PARTS ? names[p] : "unknown";
}

const char *mp_sim_non_moe_source_name(mp_sim_non_moe_source s)
{
    return s == MP_NON_MOE_COSTS ? "costs" : s == MP_NON_MOE_TRACE ? "trace" : "unknown";
}

void mp_sim_config_init(mp_sim_config *c)
{
    memset(c, 0, sizeof *c);
    c->train_frac = 0.7;
    c->alpha = 0.9;
    c->beta = 1.0;
    c->epsilon = 0.1;
    c->window = 64;
    for (int i = 0; i < MP_COST_PARTS; i++)
        c->scale[i] = 1.0;
}

/* ---- cost tables ---- */

void sim_tab_free(sim_tab *tab)
{
    free(tab->gpu_ns);
    free(tab->cpu_ns);
    free(tab->d2h_ns);
    free(tab->h2d_act_ns);
    free(tab->combine_ns);
    free(tab->non_moe_ns);
    memset(tab, 0, sizeof *tab);
}

/* An expert entry's cost of one invocation as fixed + Σ marginal(rows): with a `concurrent` curve
 * (k distinct one-row experts in one call), the line through its first and last points gives the
 * fixed part (its value at 0 experts) and the cost of one more one-row expert (its slope); an
 * expert of r rows adds that slope plus by_rows(r) - by_rows(1). So k one-row experts cost exactly
 * what the runtime measured for k, and one expert of r rows costs by_rows(r) up to the difference
 * of the two one-expert measurements. Without the curve: fixed 0, marginal = by_rows (experts
 * one after another, the model of cost files that predate it). */
static void expert_split(const mp_cost_expert *e, double *fixed_ns, double *slope_ns)
{
    const mp_cost_curve *c = &e->concurrent;
    *fixed_ns = 0;
    *slope_ns = -1; /* no curve */
    if (c->n_points < 2)
        return;
    const int n = c->n_points;
    const double x0 = c->x[0], x1 = c->x[n - 1], y0 = c->y[0].median_ns, y1 = c->y[n - 1].median_ns;
    double slope = (y1 - y0) / (x1 - x0), fixed = y0 - slope * x0;
    if (slope < 0) /* more experts measured faster: noise; charge the mean */
        slope = 0, fixed = (y0 + y1) / 2;
    if (fixed < 0) /* superlinear: no fixed part */
        fixed = 0, slope = y1 / x1;
    *fixed_ns = fixed;
    *slope_ns = slope;
}

static double marginal_ns(const mp_cost_expert *e, double slope_ns, uint32_t rows)
{
    if (slope_ns < 0)
        return mp_cost_curve_ns(&e->by_rows, rows);
    double v = slope_ns + mp_cost_curve_ns(&e->by_rows, rows) - mp_cost_curve_ns(&e->by_rows, 1);
    return v > 0 ? v : 0;
}

/* The grid's point of cold routes c with far routes off, or NULL. */
static const mp_cost_decode_point *decode_off_point(const mp_costs *c, int cold)
{
    for (int i = 0; i < c->decode.n_points; i++)
        if (!c->decode.points[i].far_on && c->decode.points[i].cold == cold)
            return &c->decode.points[i];
    return NULL;
}

double mp_sim_cpu_anchor(const mp_costs *c, const mp_cost_expert *cpu)
{
    const int K = c->decode.top_k;
    const mp_cost_decode_point *p = decode_off_point(c, K);
    if (!p || cpu->threads != c->decode.threads || p->cpu_ns <= 0)
        return 1.0;
    double fixed, slope;
    expert_split(cpu, &fixed, &slope);
    const double model = fixed + (double)K * marginal_ns(cpu, slope, 1);
    return model > 0 ? p->cpu_ns / model : 1.0;
}

/* The grid scaled like the tables (sensitivity): a point's time is max(CPU, GPU side) plus the
 * rest (the round trip's own cost), so the longer side takes its part's factor and the rest the
 * round trip's (MP_COST_SYNC). */
static void scale_grid(const mp_costs *c, const double *k, mp_decode_costs *dc)
{
    for (int i = 0; i < c->decode.n_points; i++) {
        const mp_cost_decode_point *p = &c->decode.points[i];
        const bool cpu_long = p->cpu_ns >= p->gpu_ns;
        const double side = cpu_long ? p->cpu_ns : p->gpu_ns;
        const double rest = p->layer.median_ns > side ? p->layer.median_ns - side : 0;
        const double t = (p->layer.median_ns - rest) * k[cpu_long ? MP_COST_CPU : MP_COST_GPU] + rest * k[MP_COST_SYNC];
        if (p->far_on)
            dc->on_ns[p->cold][p->far] = t;
        else
            dc->off_ns[p->cold] = t;
    }
}

mp_status sim_tab_build(sim_tab *tab, const mp_sim_config *cfg, const mp_sim_trace *t, mp_error *err)
{
    memset(tab, 0, sizeof *tab);
    const mp_costs *c = cfg->costs;
    const uint32_t max_rows = t->max_rows;
    if (!c || !cfg->gpu || !cfg->cpu)
        return mp_fail(err, MP_ERR_ARG, "simulate: no cost model (costs and its GPU/CPU expert entries)");
    for (int i = 0; i < MP_COST_PARTS; i++)
        if (!isfinite(cfg->scale[i]) || cfg->scale[i] < 0)
            return mp_fail(err, MP_ERR_ARG, "simulate: cost scale of %s: expected a finite number >= 0",
                           mp_sim_cost_part_name(i));
    const mp_decode_shape shape = {cfg->gpu->quant, cfg->gpu->n_embd, cfg->gpu->n_ff, t->n_experts, (int)t->top_k,
                                   cfg->cpu->threads, cfg->gpu->expert_bytes};
    mp_status st = mp_decode_costs_from(c, cfg->costs_name, &shape, &tab->dc, err);
    if (st)
        return mp_error_prefix(err, "simulate");
    size_t n = (size_t)max_rows + 1;
    double **tabs[] = {&tab->gpu_ns, &tab->cpu_ns, &tab->d2h_ns, &tab->h2d_act_ns, &tab->combine_ns, &tab->non_moe_ns};
    for (int i = 0; i < 6; i++)
        if (!(*tabs[i] = calloc(n, sizeof(double)))) {
            sim_tab_free(tab);
            return mp_fail(err, MP_ERR_NOMEM, "simulate: out of memory for cost tables of %u rows", max_rows);
        }
    tab->max_rows = max_rows;
    tab->act_row_bytes = (uint64_t)cfg->gpu->n_embd * sizeof(float);
    tab->expert_bytes = cfg->gpu->expert_bytes;
    tab->copies = !cfg->no_copies;
    const mp_cost_curve *h2d = cfg->pageable ? &c->h2d_pageable : &c->h2d_pinned;
    const mp_cost_curve *d2h = cfg->pageable ? &c->d2h_pageable : &c->d2h_pinned;
    if (!(cfg->host_read_gbs >= 0) || !isfinite(cfg->host_read_gbs))
        return mp_fail(err, MP_ERR_ARG, "simulate: host read bandwidth %g GB/s: expected a finite number > 0 "
                       "(or 0: the cost file's)", cfg->host_read_gbs);
    double k[MP_COST_PARTS];
    memcpy(k, cfg->scale, sizeof k);
    if (cfg->host_read_gbs > 0 && c->host_read_gbs > 0) { /* predicted at the host's bandwidth now */
        k[MP_COST_CPU] *= c->host_read_gbs / cfg->host_read_gbs;
        tab->dc.host_bytes_per_ns = cfg->host_read_gbs;
    }
    double gpu_fixed, gpu_slope, cpu_fixed, cpu_slope;
    expert_split(cfg->gpu, &gpu_fixed, &gpu_slope);
    expert_split(cfg->cpu, &cpu_fixed, &cpu_slope);
    tab->gpu_fixed_ns = k[MP_COST_GPU] * gpu_fixed;
    const double cpu_k = k[MP_COST_CPU] * mp_sim_cpu_anchor(c, cfg->cpu);
    tab->cpu_fixed_ns = cpu_k * cpu_fixed;
    for (uint32_t r = 1; r <= max_rows; r++) {
        double bytes = (double)r * (double)tab->act_row_bytes;
        tab->gpu_ns[r] = k[MP_COST_GPU] * marginal_ns(cfg->gpu, gpu_slope, r);
        tab->cpu_ns[r] = cpu_k * marginal_ns(cfg->cpu, cpu_slope, r);
        tab->d2h_ns[r] = k[MP_COST_D2H] * mp_cost_curve_ns(d2h, bytes);
        tab->h2d_act_ns[r] = k[MP_COST_H2D] * mp_cost_curve_ns(h2d, bytes);
        tab->combine_ns[r] = k[MP_COST_COMBINE] * mp_cost_curve_ns(&c->combine, r);
        tab->non_moe_ns[r] = k[MP_COST_NON_MOE] * mp_cost_curve_ns(&c->non_moe, r);
    }
    tab->costs = c;
    tab->non_moe_k = k[MP_COST_NON_MOE];
    tab->sync_ns = k[MP_COST_SYNC] * c->sync.median_ns;
    if (c->decode.hybrid_step_layers >= 2) { /* the host's side of a step: scaled as the round trip */
        tab->hybrid_step_ns = k[MP_COST_SYNC] * c->decode.hybrid_step.median_ns;
        tab->hybrid_share_ns = tab->hybrid_step_ns / (double)c->decode.hybrid_step_layers;
    }
    scale_grid(c, k, &tab->dc);
    mp_decode_costs_settle(&tab->dc);
    /* weights are copied from pinned host memory when the runtime can pin them */
    tab->weight_h2d_ns = k[MP_COST_H2D] * mp_cost_curve_ns(h2d, (double)tab->expert_bytes);
    return MP_OK;
}

/* ---- engine state ---- */

typedef struct inflight {
    uint32_t cell;   /* layer * n_experts + expert */
    double end_ns;   /* unshifted: the copy ends at end_ns + shift_ns */
} inflight;

struct sim_engine {
    const mp_sim_trace *t;
    const sim_tab *tab;
    /* (n_steps) the trace's measured non-MoE ns per step, already scaled (--non-moe trace), or
     * NULL: the cost file's, tab->non_moe_ns by rows */
    const double *step_non_moe_ns;
    uint32_t L, E;
    uint8_t *resident;    /* (L, E) slot held (copy may be in flight) */
    double *ready_ns;     /* (L, E) when the expert's copy finishes; 0 if loaded before start;
                           * unshifted (add shift_ns) while the cell has copies queued */
    uint32_t *n_queued;   /* (L, E) copies of the cell still in the FIFO */
    uint32_t *n_resident; /* (L) */
    uint16_t *res_list;   /* (L, E) per layer, its n_resident resident experts first */
    uint32_t *res_pos;    /* (L, E) position of a resident expert in its layer's res_list */
    uint32_t *cap;        /* (L) */
    mp_far_layer *far;    /* (L) each layer's far routes (runtime/decide.h), decided once placed */
    bool ideal;           /* admissions are free and instant (Belady's bound) */
    double clock_ns, link_free_ns;
    inflight *fifo;       /* ring of in-flight weight copies, in link order */
    uint32_t fifo_head, fifo_len, fifo_cap;
    /* Delay added to every copy still queued: an activation copy shifts them all alike, so the
     * shift is kept once here instead of rewriting each entry (O(1) per activation copy). */
    double shift_ns;
    mp_sim_metrics *m;    /* the split being replayed */
    bool oom;
    void (*progress)(void *user, uint64_t decisions); /* mp_sim_config's */
    void *progress_user;
};

/* When the expert's weights are on the GPU (hot: once per routed expert and invocation). */
static inline double ready_at(const sim_engine *s, size_t cell)
{
    return s->n_queued[cell] ? s->ready_ns[cell] + s->shift_ns : s->ready_ns[cell];
}

/* Retire the copies finished by at_ns; a cell's last queued copy fixes its ready time. */
static void retire_copies(sim_engine *s, double at_ns)
{
    while (s->fifo_len && s->fifo[s->fifo_head].end_ns + s->shift_ns <= at_ns) {
        const inflight *f = &s->fifo[s->fifo_head];
        if (--s->n_queued[f->cell] == 0)
            s->ready_ns[f->cell] = f->end_ns + s->shift_ns;
        s->fifo_head = (s->fifo_head + 1) % s->fifo_cap;
        s->fifo_len--;
    }
}

bool sim_is_resident(const sim_engine *s, uint32_t layer, uint32_t expert)
{
    return s->resident[(size_t)layer * s->E + expert];
}
const uint8_t *sim_resident_row(const sim_engine *s, uint32_t layer)
{
    return s->resident + (size_t)layer * s->E;
}
const uint16_t *sim_resident_list(const sim_engine *s, uint32_t layer, uint32_t *n)
{
    *n = s->n_resident[layer];
    return s->res_list + (size_t)layer * s->E;
}

/* Residency changes go through these two, which keep res_list/res_pos in step with resident. */
static void set_resident(sim_engine *s, uint32_t layer, uint32_t expert)
{
    size_t cell = (size_t)layer * s->E + expert;
    s->resident[cell] = 1;
    s->res_pos[cell] = s->n_resident[layer];
    s->res_list[(size_t)layer * s->E + s->n_resident[layer]++] = (uint16_t)expert;
}
static void clear_resident(sim_engine *s, uint32_t layer, uint32_t expert)
{
    size_t cell = (size_t)layer * s->E + expert;
    uint16_t *list = s->res_list + (size_t)layer * s->E;
    uint32_t pos = s->res_pos[cell], last = --s->n_resident[layer];
    list[pos] = list[last];
    s->res_pos[(size_t)layer * s->E + list[pos]] = pos;
    s->resident[cell] = 0;
}

uint32_t sim_n_resident(const sim_engine *s, uint32_t layer) { return s->n_resident[layer]; }
uint32_t sim_cap(const sim_engine *s, uint32_t layer) { return s->cap[layer]; }

void sim_evict(sim_engine *s, uint32_t layer, uint32_t expert)
{
    size_t cell = (size_t)layer * s->E + expert;
    if (!s->resident[cell])
        return;
    clear_resident(s, layer, expert);
    s->m->evictions++;
}

void sim_admit(sim_engine *s, uint32_t layer, uint32_t expert)
{
    size_t cell = (size_t)layer * s->E + expert;
    if (s->resident[cell] || s->n_resident[layer] >= s->cap[layer])
        return;
    set_resident(s, layer, expert);
    s->m->admissions++;
    s->m->h2d_weight_bytes += s->tab->expert_bytes;
    if (s->ideal) {
        s->ready_ns[cell] = s->clock_ns;
        return;
    }
    /* the copy may start only after the deciding invocation, and waits for the link */
    retire_copies(s, s->clock_ns);
    double begin = s->clock_ns > s->link_free_ns ? s->clock_ns : s->link_free_ns;
    double end = begin + s->tab->weight_h2d_ns;
    s->link_free_ns = end;
    if (s->fifo_len == s->fifo_cap) {
        uint32_t cap = s->fifo_cap ? 2 * s->fifo_cap : 256;
        inflight *f = malloc(sizeof *f * cap);
        if (!f) {
            s->oom = true;
            return;
        }
        for (uint32_t i = 0; i < s->fifo_len; i++)
            f[i] = s->fifo[(s->fifo_head + i) % s->fifo_cap];
        free(s->fifo);
        s->fifo = f;
        s->fifo_head = 0;
        s->fifo_cap = cap;
    }
    s->fifo[(s->fifo_head + s->fifo_len++) % s->fifo_cap] = (inflight){(uint32_t)cell, end - s->shift_ns};
    s->ready_ns[cell] = end - s->shift_ns;
    s->n_queued[cell]++;
}

void sim_place(sim_engine *s, uint32_t layer, uint32_t expert)
{
    size_t cell = (size_t)layer * s->E + expert;
    if (s->resident[cell] || s->n_resident[layer] >= s->cap[layer])
        return;
    set_resident(s, layer, expert);
    s->ready_ns[cell] = 0;
}

/* An activation copy of dur_ns lands on the H2D link at at_ns: weight copies still running then
 * are pushed back by its duration (the link is shared; activations go first, the decode waits on
 * them). */
static void share_link(sim_engine *s, double at_ns, double dur_ns)
{
    retire_copies(s, at_ns);
    if (!s->fifo_len)
        return;
    s->shift_ns += dur_ns;
    s->link_free_ns += dur_ns;
}

/* Each hybrid layer's far routes, as the runtime decides them (runtime/decide.h): from the share
 * of the layer's routes that reach its non-resident experts in the routing the placement carries.
 * The runtime reads it from the profile's table: for a profile this replay writes, the train
 * counts (make_profile); for a given profile (policy profile), that profile's own counts or
 * frequencies, whatever this trace's train split says. Online policies start from nothing and
 * change residency as they go, so they take the uniform share of their capacity. */
static void decide_far(sim_engine *s, const mp_sim_trace *t, const sim_stats *st, const mp_strp *given,
                       bool online)
{
    const bool table = given && (given->counts || given->freq);
    for (uint32_t l = 0; l < s->L; l++) {
        memset(&s->far[l], 0, sizeof s->far[l]);
        if (!online && s->n_resident[l] == s->E)
            continue;
        double cold = 0, all = 0;
        const size_t row = table && t->model_layer[l] < given->n_layers ? (size_t)t->model_layer[l] * given->n_experts
                                                                         : 0;
        if (!online)
            mp_decide_layer_routes(!table ? st->train.count + (size_t)l * s->E : given->counts ? given->counts + row : NULL,
                                   table && !given->counts ? given->freq + row : NULL, s->resident + (size_t)l * s->E,
                                   s->E, &cold, &all);
        const int64_t n_res = online ? s->cap[l] : s->n_resident[l];
        mp_decide_far_layer(&s->tab->dc, mp_decide_cold_share(cold, all, n_res, s->E), &s->far[l]);
    }
}

/* ---- statistics of the train steps ---- */

static void stats_free(sim_stats *st)
{
    mp_popularity_free(&st->train);
    free(st->order);
    free(st->global);
    memset(st, 0, sizeof *st);
}

/* The train split: the first floor(train_frac * n_requests) requests, in trace order, and at least
 * one: a trace of one request (one long prompt) would otherwise plan every static policy from
 * nothing. Returns the steps it covers, [0, train_steps). */
static uint64_t train_steps(const mp_sim_trace *t, double train_frac)
{
    uint32_t n_train = (uint32_t)floor(train_frac * t->n_requests + 1e-9);
    if (n_train == 0 && train_frac > 0 && t->n_requests > 0)
        n_train = 1;
    uint32_t seen = 0;
    uint64_t s = 0;
    for (; s < t->n_steps; s++) {
        if (s == 0 || t->steps[s].request != t->steps[s - 1].request)
            seen++;
        if (seen > n_train)
            break;
    }
    return s;
}

static mp_status stats_build(const mp_sim_trace *t, double train_frac, sim_stats *st, mp_error *err)
{
    memset(st, 0, sizeof *st);
    const size_t cells = (size_t)t->n_layers * t->n_experts;
    mp_status status = mp_popularity_init_uniform(&st->train, (int32_t)t->n_layers, t->n_experts, err);
    if (status)
        return mp_error_prefix(err, "simulate");
    st->order = malloc(sizeof *st->order * cells);
    st->global = malloc(sizeof *st->global * cells);
    if (!st->order || !st->global) {
        stats_free(st);
        return mp_fail(err, MP_ERR_NOMEM, "simulate: out of memory for statistics");
    }
    st->train_steps = train_steps(t, train_frac);
    for (uint64_t s = 0; s < st->train_steps; s++) {
        const mp_sim_step *step = &t->steps[s];
        for (uint32_t l = 0; l < t->n_layers; l++)
            mp_popularity_add(&st->train, (int32_t)l, mp_sim_step_ids(t, step, l), (uint64_t)step->rows * t->top_k);
    }
    for (uint32_t l = 0; l < t->n_layers; l++)
        mp_popularity_rank(mp_popularity_node(&st->train, (int32_t)l), t->n_experts,
                           st->order + (size_t)l * t->n_experts, NULL);
    if ((status = mp_popularity_rank_cells(&st->train, NULL, st->global, err))) {
        stats_free(st);
        return mp_error_prefix(err, "simulate");
    }
    return MP_OK;
}

/* ---- the replay ---- */

mp_status mp_sim_slots(const mp_sim_trace *t, const mp_sim_config *cfg, uint64_t *slots, mp_error *err)
{
    if (!cfg->gpu || cfg->gpu->expert_bytes == 0)
        return mp_fail(err, MP_ERR_ARG, "simulate: no expert size (cost file GPU expert entry)");
    if (cfg->budget_bytes < cfg->non_expert_bytes)
        return mp_fail(err, MP_ERR_LIMIT,
                       "simulate: budget %llu bytes is smaller than what the runtime holds besides experts "
                       "(%llu bytes: weights, KV cache, scratch): expected a budget that holds them",
                       (unsigned long long)cfg->budget_bytes, (unsigned long long)cfg->non_expert_bytes);
    const uint64_t slot = cfg->slot_bytes ? cfg->slot_bytes : cfg->gpu->expert_bytes;
    uint64_t n = (cfg->budget_bytes - cfg->non_expert_bytes) / slot;
    uint64_t cells = (uint64_t)t->n_layers * t->n_experts;
    *slots = n < cells ? n : cells;
    return MP_OK;
}

static void metrics_free(mp_sim_metrics *m)
{
    free(m->layer_decisions);
    free(m->layer_hits);
    m->layer_decisions = m->layer_hits = NULL;
}

void mp_sim_result_free(mp_sim_result *r)
{
    metrics_free(&r->train);
    metrics_free(&r->test);
    mp_strp_free(&r->profile);
}

/* The profile: its resident experts as the pairs, in global count order, and slots = n_ranked
 * (the readers that refuse n_ranked > slots load it); the train counts as its table, from which
 * every reader derives the rest of the ranking (mp_strp_rank_tail: every other expert of the MoE
 * layers by count, the order a runtime with more room takes them in). The resident set is the
 * static placement, or with resident NULL the first n_top experts of the global count order. */
static mp_status make_profile(const mp_sim_trace *t, const sim_stats *st, const uint8_t *resident, uint64_t n_top,
                              mp_strp *p, mp_error *err)
{
    size_t cells = (size_t)t->n_layers * t->n_experts;
    uint32_t model_layers = mp_sim_trace_blocks(t);
    memset(p, 0, sizeof *p);
    p->n_layers = model_layers;
    p->n_experts = t->n_experts;
    p->ranked = malloc(sizeof *p->ranked * cells);
    p->counts = calloc((size_t)model_layers * t->n_experts, sizeof *p->counts);
    if (!p->ranked || !p->counts) {
        mp_strp_free(p);
        return mp_fail(err, MP_ERR_NOMEM, "simulate: out of memory for the profile");
    }
    p->table = MP_STRP_TABLE_U64_COUNT;
    for (size_t i = 0; i < cells; i++) {
        uint32_t c = st->global[i];
        if (resident ? resident[c] != 0 : i < n_top) {
            uint32_t l = c / t->n_experts, e = c % t->n_experts;
            p->ranked[p->n_ranked++] = (mp_strp_pair){(uint16_t)t->model_layer[l], (uint16_t)e};
        }
    }
    p->slots = p->n_ranked;
    for (size_t c = 0; c < cells; c++)
        p->counts[(size_t)t->model_layer[c / t->n_experts] * t->n_experts + c % t->n_experts] = st->train.count[c];
    mp_status status = mp_strp_validate(p, "simulated profile", err);
    if (!status && (status = mp_strp_rank_tail(p, err)))
        mp_error_prefix(err, "simulate: the profile's ranking");
    return status;
}

static mp_status metrics_init(mp_sim_metrics *m, uint32_t n_layers, mp_error *err)
{
    memset(m, 0, sizeof *m);
    m->layer_decisions = calloc(n_layers, sizeof *m->layer_decisions);
    m->layer_hits = calloc(n_layers, sizeof *m->layer_hits);
    if (!m->layer_decisions || !m->layer_hits)
        return mp_fail(err, MP_ERR_NOMEM, "simulate: out of memory for metrics");
    return MP_OK;
}

/* Replay every step. Hot loop: per (step, layer), one pass over the rows' expert ids to count
 * rows per expert, one pass over the distinct experts to time them; nothing else per decision. */
static void replay(sim_engine *s, const mp_sim_trace *t, const sim_stats *st, pol_state *pol, mp_sim_result *r,
                   uint32_t *rows_of, uint16_t *used)
/* rows_of (n_experts): rows routed to each expert in the current invocation, zero between;
 * used (n_experts): the distinct experts of the invocation */
{
    const sim_tab *tab = s->tab;
    const uint32_t L = t->n_layers, E = t->n_experts, K = t->top_k;
    uint32_t request = UINT32_MAX;
    uint64_t pos = 0; /* tokens of the current request before this step (its requests are contiguous) */
    for (uint64_t si = 0; si < t->n_steps; si++) {
        const mp_sim_step *step = &t->steps[si];
        mp_sim_metrics *m = si < st->train_steps ? &r->train : &r->test;
        s->m = m;
        const uint32_t rows = step->rows;
        if (step->request != request)
            request = step->request, pos = 0;
        const double step_start_ns = s->clock_ns;
        /* a decode step attends pos + 1 keys */
        const double non_moe_ns = s->step_non_moe_ns ? s->step_non_moe_ns[si]
                                  : rows == 1        ? sim_decode_non_moe_ns(tab, (double)(pos + 1))
                                                     : tab->non_moe_ns[rows];
        pos += rows;
        bool hybrid_step = false; /* a one-row hybrid layer seen in this step (sim_hybrid_layer_ns) */
        const double non_moe_share_ns = non_moe_ns / L;
        for (uint32_t l = 0; l < L; l++) {
            s->clock_ns += non_moe_share_ns;
            const double start_ns = s->clock_ns;
            const uint16_t *ids = mp_sim_step_ids(t, step, l);
            const uint64_t n_ids = (uint64_t)rows * K;
            uint32_t n_used = 0;
            for (uint64_t i = 0; i < n_ids; i++) {
                uint16_t e = ids[i];
                if (!rows_of[e]++)
                    used[n_used++] = e;
            }
            const size_t base = (size_t)l * E;
            double gpu_ns = 0, cpu_ns = 0, copy_ns = 0, copied_gpu_ns = 0;
            uint64_t hits = 0;
            uint32_t n_cold = 0, n_copied = 0;
            for (uint32_t u = 0; u < n_used; u++) {
                uint16_t e = used[u];
                uint32_t c = rows_of[e];
                if (s->resident[base + e] && ready_at(s, base + e) <= start_ns) {
                    gpu_ns += tab->gpu_ns[c];
                    hits += c;
                    continue;
                }
                n_cold++;
                if (s->resident[base + e])
                    m->late += c;
                if (rows > 1 && sim_copies(tab, c)) { /* the runtime copies it (runtime/decide.h) */
                    copy_ns += tab->weight_h2d_ns;
                    copied_gpu_ns += tab->gpu_ns[c];
                    n_copied++;
                } else {
                    cpu_ns += tab->cpu_ns[c];
                }
            }
            if (hits || n_copied)
                gpu_ns += tab->gpu_fixed_ns;
            if (n_cold > n_copied)
                cpu_ns += tab->cpu_fixed_ns;
            /* the round trip: every step of a layer holding an expert off the GPU (the host sees
             * the routes only through it), and any step with a miss (a copy still in flight) */
            uint32_t rows_rt = 0;
            if (n_cold || s->n_resident[l] < E) {
                rows_rt = rows;
                uint64_t act_bytes = rows_rt * tab->act_row_bytes;
                m->cpu_invocations++;
                m->d2h_act_bytes += act_bytes;
                m->h2d_act_bytes += act_bytes;
                double act_h2d_at_ns = start_ns + tab->d2h_ns[rows_rt] + tab->sync_ns + cpu_ns;
                share_link(s, act_h2d_at_ns, tab->h2d_act_ns[rows_rt]);
            }
            const double floor_ns = mp_decide_floor_ns(&tab->dc, (double)n_cold * (double)tab->expert_bytes);
            /* a one-row step of a hybrid layer: the decode grid, with the layer's far decision */
            uint32_t far = 0;
            const bool hybrid = rows == 1 && s->n_resident[l] < E;
            double layer_ns = hybrid ? sim_decode_layer_ns(tab, &s->far[l], n_cold, &far) : NAN;
            if (isnan(layer_ns))
                layer_ns = sim_layer_ns(tab, gpu_ns, cpu_ns, copy_ns, copied_gpu_ns, n_cold, rows_rt), far = 0;
            if (hybrid) {
                layer_ns = sim_hybrid_layer_ns(tab, layer_ns, n_cold, !hybrid_step);
                hybrid_step = true;
            }
            m->routes_far += far;
            m->experts_copied += n_copied;
            m->h2d_weight_bytes += (uint64_t)n_copied * tab->expert_bytes;
            m->floor_ns += floor_ns;
            m->floored += floor_ns > 0 && layer_ns <= floor_ns;
            s->clock_ns = start_ns + layer_ns;
            m->decisions += n_ids;
            m->hits += hits;
            m->layer_decisions[l] += n_ids;
            m->layer_hits[l] += hits;
            if (pol)
                pol_after(pol, s, l, si, used, rows_of, n_used);
            for (uint32_t u = 0; u < n_used; u++)
                rows_of[used[u]] = 0;
        }
        m->tokens += rows;
        m->steps++;
        m->time_ns += s->clock_ns - step_start_ns;
        if (s->progress && ((si + 1) % MP_SIM_PROGRESS_STEPS == 0 || si + 1 == t->n_steps))
            s->progress(s->progress_user, r->train.decisions + r->test.decisions);
    }
}

mp_status mp_sim_run(const mp_sim_trace *t, const mp_sim_config *cfg, mp_sim_policy policy, mp_sim_result *r,
                     mp_error *err)
{
    memset(r, 0, sizeof *r);
    r->policy = policy;
    if (policy < 0 || policy >= MP_POL_COUNT)
        return mp_fail(err, MP_ERR_ARG, "simulate: unknown policy %d", (int)policy);
    if (!t->n_steps)
        return mp_fail(err, MP_ERR_ARG, "simulate: the trace has no steps");
    if (!(cfg->train_frac >= 0 && cfg->train_frac <= 1))
        return mp_fail(err, MP_ERR_ARG, "simulate: train fraction %g: expected 0..1", cfg->train_frac);
    if (cfg->non_moe_source != MP_NON_MOE_COSTS && cfg->non_moe_source != MP_NON_MOE_TRACE)
        return mp_fail(err, MP_ERR_ARG, "simulate: non-MoE source %d: expected costs or trace", (int)cfg->non_moe_source);
    if (cfg->non_moe_source == MP_NON_MOE_TRACE && !t->non_moe_ns)
        return mp_fail(err, MP_ERR_ARG,
                       "simulate: non-MoE time from the trace asked, but the trace carries no measured non-MoE "
                       "times: expected them loaded with the trace (or use the cost file's)");
    mp_status st = mp_sim_slots(t, cfg, &r->slots, err);
    if (st)
        return st;
    const uint32_t L = t->n_layers, E = t->n_experts;
    const size_t cells = (size_t)L * E;
    sim_tab tab;
    if ((st = sim_tab_build(&tab, cfg, t, err)))
        return st;
    sim_stats stats = {0};
    sim_engine s = {.t = t, .tab = &tab, .L = L, .E = E, .ideal = policy == MP_POL_BELADY,
                    .progress = cfg->progress, .progress_user = cfg->progress_user};
    pol_state *pol = NULL;
    double *step_non_moe_ns = NULL; /* (n_steps) the trace's, scaled like the cost file's */
    if (cfg->non_moe_source == MP_NON_MOE_TRACE) {
        if (!(step_non_moe_ns = malloc(sizeof *step_non_moe_ns * t->n_steps))) {
            sim_tab_free(&tab);
            return mp_fail(err, MP_ERR_NOMEM, "simulate: out of memory for %llu non-MoE times",
                           (unsigned long long)t->n_steps);
        }
        for (uint64_t i = 0; i < t->n_steps; i++)
            step_non_moe_ns[i] = cfg->scale[MP_COST_NON_MOE] * t->non_moe_ns[i];
        s.step_non_moe_ns = step_non_moe_ns;
    }
    uint32_t *rows_of = calloc(E, sizeof *rows_of);
    uint16_t *used = malloc(sizeof *used * E);
    s.resident = calloc(cells, 1);
    s.ready_ns = calloc(cells, sizeof *s.ready_ns);
    s.n_queued = calloc(cells, sizeof *s.n_queued);
    s.res_list = malloc(sizeof *s.res_list * cells);
    s.res_pos = malloc(sizeof *s.res_pos * cells);
    s.n_resident = calloc(L, sizeof *s.n_resident);
    s.cap = calloc(L, sizeof *s.cap);
    s.far = calloc(L, sizeof *s.far);
    if ((st = stats_build(t, cfg->train_frac, &stats, err)))
        goto done;
    if (!rows_of || !used || !s.resident || !s.ready_ns || !s.n_queued || !s.res_list || !s.res_pos || !s.n_resident ||
        !s.cap || !s.far) {
        st = mp_fail(err, MP_ERR_NOMEM, "simulate: out of memory for the replay state");
        goto done;
    }
    if ((st = metrics_init(&r->train, L, err)) || (st = metrics_init(&r->test, L, err)))
        goto done;
    if (mp_sim_policy_is_online(policy)) {
        /* per-layer caches of equal size: the slots split evenly, the remainder to the first layers */
        for (uint32_t l = 0; l < L; l++)
            s.cap[l] = (uint32_t)(r->slots / L + (l < r->slots % L));
        if ((st = pol_init(&pol, t, cfg, policy, err)))
            goto done;
    } else {
        if ((st = pol_static_placement(t, cfg, &tab, &stats, policy, r->slots, s.resident, err)))
            goto done;
        for (size_t c = 0; c < cells; c++)
            if (s.resident[c])
                set_resident(&s, (uint32_t)(c / E), (uint32_t)(c % E));
        for (uint32_t l = 0; l < L; l++)
            s.cap[l] = s.n_resident[l];
    }
    if (policy == MP_POL_BELADY)
        pol_belady_initial(pol, &s); /* the offline optimum also starts optimally */
    decide_far(&s, t, &stats, policy == MP_POL_PROFILE ? cfg->profile : NULL, mp_sim_policy_is_online(policy));
    for (uint32_t l = 0; l < L; l++)
        r->resident_initial += s.n_resident[l];
    replay(&s, t, &stats, pol, r, rows_of, used);
    if (s.oom) {
        st = mp_fail(err, MP_ERR_NOMEM, "simulate: out of memory for in-flight copies");
        goto done;
    }
    /* no prediction beats reading the cold experts from host memory (every layer step is held to
     * its floor: a failure here is a bug in the replay, not in the costs) */
    for (int part = 0; part < 2; part++) {
        const mp_sim_metrics *m = part ? &r->test : &r->train;
        if (m->time_ns < m->floor_ns * (1 - 1e-9)) {
            st = mp_fail(err, MP_ERR_INTERNAL, "simulate: %s predicted %.0f ns, below the floor of %.0f ns that "
                         "host memory allows for its cold experts", mp_sim_policy_name(policy), m->time_ns,
                         m->floor_ns);
            goto done;
        }
    }
    /* an online policy has no fixed placement: export the train ranking, the budget's slots resident */
    st = make_profile(t, &stats, mp_sim_policy_is_online(policy) ? NULL : s.resident, r->slots, &r->profile, err);
done:
    pol_free(pol);
    stats_free(&stats);
    sim_tab_free(&tab);
    free(rows_of);
    free(used);
    free(s.resident);
    free(s.ready_ns);
    free(s.n_queued);
    free(s.res_list);
    free(s.res_pos);
    free(s.n_resident);
    free(s.cap);
    free(s.far);
    free(s.fifo);
    free(step_non_moe_ns);
    if (st)
        mp_sim_result_free(r);
    return st;
}
