/* simulator/sim_replay.c — the replay (mp_sim_run, sim.h): the train steps' statistics, the
 * policy's placement (static, Belady's cache, or the adaptive tier's slots: an online policy's
 * alone, or --adaptive's beside a static placement), each step's layers charged through the cost
 * tables (sim.c) while the engine's state (sim_engine.c) follows the admissions, the far routes
 * decided as the runtime decides them, and the profile a static policy makes. */
#include "simulator/sim_engine.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

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
static void replay(sim_engine *s, const mp_sim_trace *t, const sim_stats *st, belady_state *bel, mp_sim_result *r,
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
            const sim_kind *kd = sim_kind_of(tab, l);
            if (s->tier && !s->step_sync && s->fifo_len)
                sim_tier_land(s, start_ns); /* copies finished by now serve this invocation */
            const uint8_t *tier_state = s->tier ? mp_tier_states(s->tier, l) : s->no_tier;
            double gpu_ns = 0, cpu_ns = 0, copy_ns = 0, copied_gpu_ns = 0;
            uint64_t hits = 0;
            uint32_t n_cold = 0;
            for (uint32_t u = 0; u < n_used; u++) {
                uint16_t e = used[u];
                uint32_t c = rows_of[e];
                const bool tier_hit = tier_state[e] == MP_TIER_READY;
                if (s->resident[base + e] || tier_hit) {
                    gpu_ns += kd->gpu_ns[c];
                    hits += c;
                    m->tier_hits += tier_hit ? c : 0;
                    continue;
                }
                if (tier_state[e] == MP_TIER_LOADING) /* admitted, its copy not landed: served cold */
                    m->late += c;
                s->cold[n_cold] = e;
                s->cold_cpu[n_cold] = kd->cpu_ns[c];
                s->cold_rows[n_cold++] = c;
            }
            /* the cold experts the runtime copies to the GPU (runtime/decide.h), the rest on the CPU */
            const uint32_t n_copied =
                sim_copy_set(tab, kd, rows, n_cold, s->cold_rows, s->cold_cpu, s->cold_order, s->cold_copy);
            for (uint32_t i = 0; i < n_cold; i++) {
                if (s->cold_copy[i]) {
                    copy_ns += kd->weight_h2d_ns;
                    copied_gpu_ns += kd->gpu_ns[s->cold_rows[i]];
                    s->copied[s->cold[i]] = 1;
                } else {
                    cpu_ns += s->cold_cpu[i];
                }
            }
            if (hits || n_copied)
                gpu_ns += kd->gpu_fixed_ns;
            if (n_cold > n_copied)
                cpu_ns += kd->cpu_fixed_ns;
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
                sim_share_link(s, act_h2d_at_ns, tab->h2d_act_ns[rows_rt]);
            }
            const double floor_ns = mp_decide_floor_ns(&tab->dc, (double)n_cold * (double)kd->expert_bytes);
            /* a one-row step of a hybrid layer: the decode grid, with the layer's far decision */
            uint32_t far = 0, split = 0;
            const bool hybrid = rows == 1 && s->n_resident[l] < E;
            double layer_ns = hybrid ? sim_decode_layer_ns(tab, kd, &s->far[l], n_cold, &far, &split) : NAN;
            if (isnan(layer_ns)) {
                layer_ns = sim_layer_ns(tab, kd, gpu_ns, cpu_ns, copy_ns, copied_gpu_ns, n_cold, rows_rt), far = 0, split = 0;
                m->cpu_ns += cpu_ns;
            } else {
                const double grid_cpu_ns = sim_decode_cpu_ns(tab, kd, &s->far[l], n_cold);
                m->cpu_ns += isfinite(grid_cpu_ns) ? grid_cpu_ns : cpu_ns;
            }
            if (hybrid) {
                layer_ns = sim_hybrid_layer_ns(tab, kd, layer_ns, n_cold, !hybrid_step);
                hybrid_step = true;
            }
            m->routes_far += far;
            m->routes_split += split;
            m->experts_copied += n_copied;
            m->h2d_weight_bytes += (uint64_t)n_copied * kd->expert_bytes;
            m->floor_ns += floor_ns;
            m->floored += floor_ns > 0 && layer_ns <= floor_ns;
            s->clock_ns = start_ns + layer_ns;
            m->decisions += n_ids;
            m->hits += hits;
            m->layer_decisions[l] += n_ids;
            m->layer_hits[l] += hits;
            if (s->tier)
                sim_tier_after(s, l, used, rows_of, n_used, rows);
            else if (bel)
                belady_after(bel, s, l, used, n_used);
            for (uint32_t u = 0; u < n_used; u++)
                rows_of[used[u]] = 0;
            for (uint32_t i = 0; i < n_cold; i++)
                s->copied[s->cold[i]] = 0;
        }
        if (s->step_sync) /* the step has drained: its landed copies serve, its moves' copies start */
            sim_tier_step_end(s);
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
    const bool online = mp_sim_policy_is_online(policy);
    const bool adaptive = !online && cfg->adaptive != MP_TIER_OFF;
    if (online && cfg->adaptive != MP_TIER_OFF)
        return mp_fail(err, MP_ERR_ARG, "simulate: an adaptive tier beside online policy %s: expected a static "
                       "policy's placement under it", mp_sim_policy_name(policy));
    const uint64_t tier_asked = adaptive ? mp_tier_size_slots(cfg->adaptive_slots, cfg->adaptive_share, r->slots) : 0;
    if (adaptive && tier_asked > r->slots)
        return mp_fail(err, MP_ERR_LIMIT, "simulate: the adaptive tier's %llu slots exceed the budget's %llu expert "
                       "slots: expected at most them", (unsigned long long)tier_asked,
                       (unsigned long long)r->slots);
    r->tier_asked = tier_asked;
    const uint32_t L = t->n_layers, E = t->n_experts;
    const size_t cells = (size_t)L * E;
    sim_tab tab;
    if ((st = sim_tab_build(&tab, cfg, t, err)))
        return st;
    sim_stats stats = {0};
    sim_engine s = {.t = t, .tab = &tab, .L = L, .E = E, .step_sync = adaptive,
                    .progress = cfg->progress, .progress_user = cfg->progress_user};
    belady_state *bel = NULL;
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
    uint8_t *no_tier = calloc(E, 1);
    uint32_t *tier_cap = calloc(L, sizeof *tier_cap);
    uint8_t *placed = NULL; /* adaptive: the static placement before the tier was carved out of it */
    uint32_t *warm = NULL;  /* adaptive: the carved experts, best first (n_warm) */
    uint64_t n_warm = 0;
    s.no_tier = no_tier;
    s.resident = calloc(cells, 1);
    s.res_list = malloc(sizeof *s.res_list * cells);
    s.res_pos = malloc(sizeof *s.res_pos * cells);
    s.n_resident = calloc(L, sizeof *s.n_resident);
    s.cap = calloc(L, sizeof *s.cap);
    s.far = calloc(L, sizeof *s.far);
    s.copied = calloc(E, 1);
    s.cold = malloc(sizeof *s.cold * E);
    s.cold_rows = malloc(sizeof *s.cold_rows * E);
    s.cold_cpu = malloc(sizeof *s.cold_cpu * E);
    s.cold_order = malloc(sizeof *s.cold_order * E);
    s.cold_copy = malloc(sizeof *s.cold_copy * E);
    if ((st = stats_build(t, cfg->train_frac, &stats, err)))
        goto done;
    if (!rows_of || !used || !no_tier || !tier_cap || !s.resident || !s.res_list || !s.res_pos || !s.n_resident ||
        !s.cap || !s.far || !s.copied || !s.cold || !s.cold_rows || !s.cold_cpu || !s.cold_order || !s.cold_copy) {
        st = mp_fail(err, MP_ERR_NOMEM, "simulate: out of memory for the replay state");
        goto done;
    }
    if ((st = metrics_init(&r->train, L, err)) || (st = metrics_init(&r->test, L, err)))
        goto done;
    if (!online) { /* the static placement: the budget's slots */
        if ((st = pol_static_placement(t, cfg, &tab, &stats, policy, r->slots, s.resident, err)))
            goto done;
        if (adaptive) { /* the tier carved out of it as the runtime carves it out of the profile this run
                         * emits (its residents in global count order: make_profile), which keeps the
                         * placement before the carving */
            if (!(placed = malloc(cells)) || !(warm = malloc(sizeof *warm * (tier_asked ? tier_asked : 1)))) {
                st = mp_fail(err, MP_ERR_NOMEM, "simulate: out of memory for the adaptive tier");
                goto done;
            }
            memcpy(placed, s.resident, cells);
            uint64_t n_placed = 0;
            for (size_t c = 0; c < cells; c++)
                n_placed += s.resident[c];
            r->tier_slots = mp_tier_carve(s.resident, L, E, stats.global, cells, tier_asked,
                                          r->slots > n_placed ? r->slots - n_placed : 0, tier_cap, warm, &n_warm);
        }
        for (size_t c = 0; c < cells; c++)
            if (s.resident[c])
                sim_set_resident(&s, (uint32_t)(c / E), (uint32_t)(c % E));
        for (uint32_t l = 0; l < L; l++)
            s.cap[l] = s.n_resident[l];
    }
    if (online) /* per-layer caches: the slots split evenly over the layers */
        r->tier_slots = mp_tier_split(r->slots, L, E, NULL, s.cap);
    if (policy == MP_POL_BELADY) {
        if ((st = belady_init(&bel, t, err)))
            goto done;
        belady_initial(bel, &s); /* the offline optimum also starts optimally */
    } else if (online || adaptive) {
        mp_tier_params tp;
        mp_tier_params_default(&tp);
        tp.top_k = t->top_k;
        tp.max_rows = t->max_rows;
        if (online) { /* the command line's parameters; copies unbounded */
            tp.policy = pol_tier_policy(policy);
            tp.alpha = cfg->alpha;
            tp.beta = cfg->beta;
            tp.epsilon = policy == MP_POL_DECAYED_LFU ? cfg->epsilon : 0.0;
            tp.window = cfg->window;
        } else { /* the runtime's (gpu/gpu_tier.c) */
            tp.policy = cfg->adaptive;
            tp.max_loading = mp_tier_inflight(cfg->adaptive_inflight, t->top_k);
        }
        if (tp.policy == MP_TIER_COST) /* priced by this machine's decode grid, as the runtime prices it */
            mp_decide_tier_costs(&tab.dc, &tp.route_saving_ns, &tp.copy_cost_ns);
        r->tier_policy = tp.policy;
        r->tier_inflight = tp.max_loading;
        if ((st = mp_tier_new(&s.tier, L, E, online ? s.cap : tier_cap, online ? NULL : s.resident, &tp, err))) {
            mp_error_prefix(err, "simulate");
            goto done;
        }
        for (uint64_t i = 0; adaptive && i < n_warm; i++) /* the carved experts, READY at the start */
            mp_tier_place(s.tier, warm[i] / E, warm[i] % E);
        s.cap_moves = E;
        s.staged = malloc(s.cap_moves);
        if (!(s.moves = malloc(sizeof *s.moves * s.cap_moves)) || !s.staged) {
            st = mp_fail(err, MP_ERR_NOMEM, "simulate: out of memory for the adaptive tier's moves");
            goto done;
        }
    }
    decide_far(&s, t, &stats, policy == MP_POL_PROFILE ? cfg->profile : NULL, online);
    for (uint32_t l = 0; l < L; l++)
        r->resident_initial += s.n_resident[l];
    replay(&s, t, &stats, bel, r, rows_of, used);
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
    st = make_profile(t, &stats, online ? NULL : placed ? placed : s.resident, r->slots, &r->profile, err);
done:
    free(placed);
    free(warm);
    belady_free(bel);
    mp_tier_free(s.tier);
    stats_free(&stats);
    sim_tab_free(&tab);
    free(rows_of);
    free(used);
    free(no_tier);
    free(tier_cap);
    free(s.resident);
    free(s.res_list);
    free(s.res_pos);
    free(s.n_resident);
    free(s.cap);
    free(s.far);
    free(s.copied);
    free(s.cold);
    free(s.cold_rows);
    free(s.cold_cpu);
    free(s.cold_order);
    free(s.cold_copy);
    free(s.moves);
    free(s.staged);
    free(s.fifo);
    free(step_non_moe_ns);
    if (st)
        mp_sim_result_free(r);
    return st;
}
