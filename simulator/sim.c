/* simulator/sim.c — the simulator's vocabulary (policies, parameters, cost parts, non-MoE
 * sources by name; the config's defaults) and the cost tables every charge reads (sim_tab: built
 * once per replay from the cost file, the trace and the config; see sim.h for the model). The
 * replay itself is sim_replay.c, its state sim_engine.c. */
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
    [MP_POL_LRU] = "lru",                 [MP_POL_COST] = "cost",
    [MP_POL_BELADY] = "belady",
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
    return mp_tier_param_range(param, v);
}

bool mp_sim_policy_is_online(mp_sim_policy p)
{
    return p == MP_POL_LFU || p == MP_POL_DECAYED_LFU || p == MP_POL_WINDOW_LFU || p == MP_POL_LRU ||
           p == MP_POL_COST || p == MP_POL_BELADY;
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
    for (int k = 0; k < tab->n_kinds; k++) {
        free(tab->kinds[k].gpu_ns);
        free(tab->kinds[k].cpu_ns);
    }
    free(tab->layer_kind);
    free(tab->d2h_ns);
    free(tab->h2d_act_ns);
    free(tab->combine_ns);
    free(tab->non_moe_ns);
    memset(tab, 0, sizeof *tab);
}

/* Kind kd's tables from its cost entries (kd->grid_cold_scale set), with the tables' factors
 * k_parts. */
static mp_status kind_build(sim_kind *kd, const mp_cost_expert *gpu, const mp_cost_expert *cpu, const mp_costs *c,
                            const double *k_parts, const mp_cost_curve *h2d, uint32_t max_rows, mp_error *err)
{
    kd->gpu_ns = calloc((size_t)max_rows + 1, sizeof(double));
    kd->cpu_ns = calloc((size_t)max_rows + 1, sizeof(double));
    if (!kd->gpu_ns || !kd->cpu_ns)
        return mp_fail(err, MP_ERR_NOMEM, "simulate: out of memory for cost tables of %u rows", max_rows);
    mp_decide_expert_table(gpu, k_parts[MP_COST_GPU], max_rows, &kd->gpu_fixed_ns, kd->gpu_ns);
    mp_decide_expert_table(cpu, k_parts[MP_COST_CPU] * mp_decide_cpu_anchor(c, cpu, kd->grid_cold_scale), max_rows,
                           &kd->cpu_fixed_ns, kd->cpu_ns);
    /* weights are copied from pinned host memory when the runtime can pin them */
    kd->weight_h2d_ns = k_parts[MP_COST_H2D] * mp_cost_curve_ns(h2d, (double)kd->expert_bytes);
    return MP_OK;
}

/* The kinds of cfg's layers: kinds[0] from cfg->gpu / cpu (expert size: cfg->gpu's, the trace's
 * where it gave one), then each distinct pair of cfg->layer_experts; with more than one, the
 * layers' kind indices and each kind's share of the grid's cold part: its expert bytes over the
 * layers' mean (the cores and the bus read them; the grid measured every layer at once). */
static mp_status kinds_build(sim_tab *tab, const mp_sim_config *cfg, const mp_sim_trace *t, const double *k_parts,
                             const mp_cost_curve *h2d, mp_error *err)
{
    const mp_cost_expert *gk[SIM_MAX_KINDS] = {cfg->gpu}, *ck[SIM_MAX_KINDS] = {cfg->cpu};
    int n = 1;
    if (cfg->layer_experts) {
        if (!(tab->layer_kind = calloc(t->n_layers ? t->n_layers : 1, 1)))
            return mp_fail(err, MP_ERR_NOMEM, "simulate: out of memory");
        for (uint32_t l = 0; l < t->n_layers; l++) {
            const mp_sim_layer_experts *le = &cfg->layer_experts[l];
            int k = 0;
            while (k < n && !(gk[k] == le->gpu && ck[k] == le->cpu))
                k++;
            if (k == n) {
                if (n == SIM_MAX_KINDS)
                    return mp_fail(err, MP_ERR_ARG, "simulate: the model's layers have more than %d kinds of experts",
                                   SIM_MAX_KINDS);
                gk[n] = le->gpu, ck[n++] = le->cpu;
            }
            tab->layer_kind[l] = (uint8_t)k;
        }
    }
    double bytes_sum = 0;
    for (uint32_t l = 0; l < t->n_layers && tab->layer_kind; l++)
        bytes_sum += (double)gk[tab->layer_kind[l]]->expert_bytes;
    const double mean = t->n_layers ? bytes_sum / t->n_layers : 0;
    for (int k = 0; k < n; k++) {
        sim_kind *kd = &tab->kinds[k];
        kd->expert_bytes = gk[k]->expert_bytes;
        kd->grid_cold_scale = mp_decide_grid_share(kd->expert_bytes, n > 1 ? mean : 0);
        tab->n_kinds = k + 1; /* before the build: sim_tab_free frees what it allocated */
        mp_status st = kind_build(kd, gk[k], ck[k], cfg->costs, k_parts, h2d, tab->max_rows, err);
        if (st)
            return st;
    }
    return MP_OK;
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
    if (!(cfg->host_read_gbs >= 0) || !isfinite(cfg->host_read_gbs))
        return mp_fail(err, MP_ERR_ARG, "simulate: host read bandwidth %g GB/s: expected a finite number > 0 "
                       "(or 0: the cost file's)", cfg->host_read_gbs);
    if (!(cfg->bus_gbs >= 0) || !isfinite(cfg->bus_gbs))
        return mp_fail(err, MP_ERR_ARG, "simulate: bus bandwidth %g GB/s: expected a finite number > 0 "
                       "(or 0: the cost file's)", cfg->bus_gbs);
    const mp_decode_shape shape = {cfg->gpu->quant, cfg->gpu->n_embd, cfg->gpu->n_ff, t->n_experts, (int)t->top_k,
                                   cfg->cpu->threads, cfg->gpu->expert_bytes};
    mp_status st = mp_decode_costs_from(c, cfg->costs_name, &shape, &tab->dc, err);
    if (st)
        return mp_error_prefix(err, "simulate");
    size_t n = (size_t)max_rows + 1;
    double **tabs[] = {&tab->d2h_ns, &tab->h2d_act_ns, &tab->combine_ns, &tab->non_moe_ns};
    for (int i = 0; i < 4; i++)
        if (!(*tabs[i] = calloc(n, sizeof(double)))) {
            sim_tab_free(tab);
            return mp_fail(err, MP_ERR_NOMEM, "simulate: out of memory for cost tables of %u rows", max_rows);
        }
    tab->max_rows = max_rows;
    tab->act_row_bytes = (uint64_t)cfg->gpu->n_embd * sizeof(float);
    tab->copies = !cfg->no_copies;
    const mp_cost_curve *h2d = cfg->pageable ? &c->h2d_pageable : &c->h2d_pinned;
    const mp_cost_curve *d2h = cfg->pageable ? &c->d2h_pageable : &c->d2h_pinned;
    double k[MP_COST_PARTS];
    memcpy(k, cfg->scale, sizeof k);
    /* predicted at the host's bandwidth now (--host-read-gbs; 1 where either level is not known) */
    k[MP_COST_CPU] *= mp_decide_host_factor(&tab->dc, cfg->host_read_gbs);
    /* the bus now (--bus-gbs): the experts' copies and the far units' reads scale by it, the
     * activation rows' copies (a few KB: their time is the link's latency) do not */
    const double k_bus = mp_decide_bus_factor(&tab->dc, cfg->bus_gbs);
    mp_decode_costs_now(&tab->dc, cfg->host_read_gbs, cfg->bus_gbs);
    double k_kinds[MP_COST_PARTS];
    memcpy(k_kinds, k, sizeof k_kinds);
    k_kinds[MP_COST_H2D] *= k_bus;
    if ((st = kinds_build(tab, cfg, t, k_kinds, h2d, err))) {
        sim_tab_free(tab);
        return st;
    }
    for (uint32_t r = 1; r <= max_rows; r++) {
        double bytes = (double)r * (double)tab->act_row_bytes;
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
    /* the grid scaled like the tables (sensitivity, the host's bandwidth): the runtime's rule */
    mp_decode_costs_scale(&tab->dc, k[MP_COST_CPU], k[MP_COST_GPU], k[MP_COST_H2D] * k_bus, k[MP_COST_SYNC]);
    /* far routes need what copies need (the staging buffers: no_copies) and the page-locked host
     * copy (not there when host buffers are pageable): without them the runtime runs none, so
     * every layer's decision is off, in the replay and the planner alike */
    if (cfg->no_copies || cfg->pageable)
        tab->dc.far_max = 0;
    return MP_OK;
}
