/* simulator/report.c — table, JSON and SVG of a simulation (see report.h). Every number printed
 * comes from an mp_sim_result; nothing is estimated here. */
#include "base/json.h"
#include "base/fault.h"
#include "simulator/report.h"

#include <cjson/cJSON.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "base/svg.h"
#include "base/atomic_file.h"
#include "runtime/placement.h"

const mp_sim_metrics *mp_sim_rank_metrics(const mp_sim_result *r)
{
    return r->test.decisions ? &r->test : &r->train;
}

static double mib(uint64_t b) { return (double)b / (1024.0 * 1024.0); }

static void pct_or_dash(FILE *f, const mp_sim_metrics *m)
{
    if (m->decisions)
        fprintf(f, " %8.2f", 100.0 * mp_sim_hit_rate(m));
    else
        fprintf(f, " %8s", "-");
}

/* --adaptive at one budget: each static policy's placement with the tier beside it. */
static void adaptive_table(FILE *f, const mp_sim_report *rep, const mp_sim_budget_run *run)
{
    int first = -1;
    for (int p = 0; p < MP_POL_COUNT && first < 0; p++)
        if (run->ran_adaptive[p])
            first = p;
    if (first < 0)
        return;
    const mp_sim_result *a = &run->adaptive[first];
    char per[32];
    mp_format_bytes(rep->cfg->slot_bytes ? rep->cfg->slot_bytes : rep->cfg->gpu->expert_bytes, per, sizeof per);
    fprintf(f, "  adaptive tier %s: %llu of the budget's %llu slots (%s each): the room the placement leaves, then its "
               "lowest-ranked experts outside whole layers (the slots column: what each got); at most "
               "%u copies in flight, a step's moves copied when it ends\n",
            mp_tier_policy_name(a->tier_policy), (unsigned long long)a->tier_asked,
            (unsigned long long)run->slots, per, a->tier_inflight);
    fprintf(f, "  %-18s %8s %8s %10s %9s %6s %8s %9s %9s %9s %10s\n", "policy+tier", "hit%in", "hit%out", "ms/token",
            "tok/s", "slots", "tier-hit%", "late", "admits", "evicts", "copy MiB");
    for (int p = 0; p < MP_POL_COUNT; p++) {
        if (!run->ran_adaptive[p])
            continue;
        const mp_sim_result *r = &run->adaptive[p];
        const mp_sim_metrics *m = mp_sim_rank_metrics(r);
        char name[40];
        snprintf(name, sizeof name, "%s+%s", mp_sim_policy_name(p), mp_tier_policy_name(r->tier_policy));
        fprintf(f, "  %-18s", name);
        pct_or_dash(f, &r->train);
        pct_or_dash(f, &r->test);
        fprintf(f, " %10.4f %9.1f %6llu %9.2f %9llu %9llu %9llu %10.2f\n",
                m->tokens ? m->time_ns / 1e6 / (double)m->tokens : 0, mp_sim_tok_s(m),
                (unsigned long long)r->tier_slots, m->decisions ? 100.0 * (double)m->tier_hits / (double)m->decisions : 0,
                (unsigned long long)m->late, (unsigned long long)m->admissions, (unsigned long long)m->evictions,
                mib(m->h2d_weight_bytes));
    }
    int none = 0;
    for (int p = 0; p < MP_POL_COUNT; p++)
        none += run->ran_adaptive[p] && !run->adaptive[p].tier_slots;
    if (none)
        fprintf(f, "  (%d of them got no slot: their placement keeps every expert on the GPU, or fills the budget "
                   "holding only whole layers; they replay without a tier, and the runtime refuses such a run: "
                   "docs/placement.md)\n", none);
}

void mp_sim_report_table(FILE *f, const mp_sim_report *rep)
{
    const mp_sim_trace *t = rep->trace;
    fprintf(f, "trace %s: %u MoE layers x %u experts, top-%u, %u requests, %llu steps; train = first %.0f%% of requests\n",
            rep->trace_path, t->n_layers, t->n_experts, t->top_k, t->n_requests, (unsigned long long)t->n_steps,
            100 * rep->cfg->train_frac);
    fprintf(f, "costs %s: expert %s %lldx%lld, %llu bytes; CPU %d threads; %s host buffers\n", rep->costs_path,
            rep->cfg->gpu->quant, (long long)rep->cfg->gpu->n_embd, (long long)rep->cfg->gpu->n_ff,
            (unsigned long long)rep->cfg->gpu->expert_bytes, rep->cfg->cpu->threads,
            rep->cfg->pageable ? "pageable" : "pinned");
    char context[320];
    mp_costs_context_describe(rep->cfg->costs, context, sizeof context);
    if (rep->cfg->non_moe_source == MP_NON_MOE_TRACE)
        fprintf(f, "non-MoE time per step: trace (measured step duration - MoE timing)\n");
    else
        fprintf(f, "non-MoE time per step: costs (non_moe curve by the step's rows; %s)\n", context);
    /* the host the CPU's costs are for: a prediction holds for a host reading at that level */
    const mp_costs *costs = rep->cfg->costs;
    const double level = mp_costs_host_level_gbs(costs);
    if (rep->cfg->host_read_gbs > 0)
        fprintf(f, "CPU costs: for a host reading %.1f GB/s (--host-read-gbs; calibrated at %.1f)\n",
                rep->cfg->host_read_gbs, level);
    else if (costs->host_read_level_probes > 0)
        fprintf(f, "CPU costs: for a host reading %.1f GB/s, as while calibrate's decode grid measured them (the median "
                   "of %d probes; --host-read-gbs predicts for another)\n", level, costs->host_read_level_probes);
    else if (level > 0)
        fprintf(f, "CPU costs: for a host reading %.1f GB/s, as when calibrate probed it (--host-read-gbs predicts "
                   "for another)\n", level);
    if (rep->cfg->bus_gbs > 0)
        fprintf(f, "bus: a link moving %.1f GB/s host to device (--bus-gbs; calibrated at %.1f): the experts' copies "
                   "and far routes' reads scale by it\n", rep->cfg->bus_gbs, mp_costs_bus_gbs(costs));
    const mp_cost_decode *d = &rep->cfg->costs->decode;
    if (d->hybrid_step_layers >= 2)
        fprintf(f, "one-row steps with hybrid layers: %.1f us once per step beside the grid's levels (measured "
                   "with one hybrid layer of %lld)\n",
                d->hybrid_step.median_ns / 1e3, (long long)d->hybrid_step_layers);
    for (int b = 0; b < rep->n_runs; b++) {
        const mp_sim_budget_run *run = &rep->runs[b];
        char budget[32]; /* in the unit that shows it: a tiny model's budgets are a few MiB */
        mp_format_bytes(run->budget_bytes, budget, sizeof budget);
        fprintf(f, "\nbudget %s (%llu bytes): %llu expert slots of %llu\n", budget,
                (unsigned long long)run->budget_bytes, (unsigned long long)run->slots,
                (unsigned long long)t->n_layers * t->n_experts);
        fprintf(f, "  %-13s %8s %8s %10s %9s %10s %9s %9s %10s %s\n", "policy", "hit%in", "hit%out", "ms/token",
                "tok/s", "H2D MiB", "admits", "evicts", "cpu-lay/t", "(held-out where it exists)");
        for (int p = 0; p < MP_POL_COUNT; p++) {
            if (!run->ran[p])
                continue;
            const mp_sim_result *r = &run->res[p];
            const mp_sim_metrics *m = mp_sim_rank_metrics(r);
            fprintf(f, "  %-13s", mp_sim_policy_name(p));
            pct_or_dash(f, &r->train);
            pct_or_dash(f, &r->test);
            double ms = m->tokens ? m->time_ns / 1e6 / (double)m->tokens : 0;
            fprintf(f, " %10.4f %9.1f %10.2f %9llu %9llu %10.2f\n", ms, mp_sim_tok_s(m),
                    mib(m->h2d_weight_bytes + m->h2d_act_bytes), (unsigned long long)m->admissions,
                    (unsigned long long)m->evictions,
                    m->tokens ? (double)m->cpu_invocations / (double)m->tokens : 0.0);
        }
        if (rep->llamacpp_ot && rep->llamacpp_ot[b])
            fprintf(f, "  llama.cpp:    %s\n", rep->llamacpp_ot[b]);
        adaptive_table(f, rep, run);
    }
    if (rep->sweep) {
        const mp_sim_sweep *sw = rep->sweep;
        fprintf(f, "\nsweep: %s over %s (the other parameters as configured; held-out where it exists)\n",
                mp_sim_policy_name(sw->policy), sw->param);
        fprintf(f, "  %-12s %10s %8s %8s %10s %9s %9s %9s\n", "budget", sw->param, "hit%in", "hit%out",
                "ms/token", "tok/s", "admits", "evicts");
        for (int b = 0; b < rep->n_runs; b++)
            for (int v = 0; v < sw->n_values; v++) {
                const mp_sim_result *r = &sw->res[(size_t)v * rep->n_runs + b];
                const mp_sim_metrics *m = mp_sim_rank_metrics(r);
                char budget[32];
                mp_format_bytes(rep->runs[b].budget_bytes, budget, sizeof budget);
                fprintf(f, "  %-12s %10g", budget, sw->values[v]);
                pct_or_dash(f, &r->train);
                pct_or_dash(f, &r->test);
                fprintf(f, " %10.4f %9.1f %9llu %9llu\n", m->tokens ? m->time_ns / 1e6 / (double)m->tokens : 0,
                        mp_sim_tok_s(m), (unsigned long long)m->admissions, (unsigned long long)m->evictions);
            }
    }
    if (rep->sens.done) {
        fprintf(f, "\nsensitivity (each cost x0.8 / x1.2: best policy per budget; policies that changed rank):\n");
        for (int c = 0; c < MP_COST_PARTS; c++)
            for (int k = 0; k < 2; k++) {
                fprintf(f, "  %-10s x%.1f:", mp_sim_cost_part_name(c), k ? 1.2 : 0.8);
                for (int b = 0; b < rep->n_runs && b < 16; b++)
                    fprintf(f, "  %s (%d moved)", mp_sim_policy_name(rep->sens.best[c][k][b]),
                            rep->sens.rank_changes[c][k][b]);
                fprintf(f, "\n");
            }
    }
}

static cJSON *metrics_json(const mp_sim_metrics *m, uint32_t n_layers)
{
    cJSON *o = cJSON_CreateObject();
    if (!o)
        return NULL;
    cJSON_AddNumberToObject(o, "decisions", (double)m->decisions);
    cJSON_AddNumberToObject(o, "hits", (double)m->hits);
    if (m->decisions)
        cJSON_AddNumberToObject(o, "hit_rate", mp_sim_hit_rate(m));
    else
        cJSON_AddNullToObject(o, "hit_rate");
    cJSON_AddNumberToObject(o, "late_misses", (double)m->late);
    cJSON_AddNumberToObject(o, "tier_hits", (double)m->tier_hits);
    cJSON_AddNumberToObject(o, "tier_refused", (double)m->tier_refused);
    cJSON_AddNumberToObject(o, "tier_promoted", (double)m->tier_promoted);
    cJSON_AddNumberToObject(o, "tokens", (double)m->tokens);
    cJSON_AddNumberToObject(o, "steps", (double)m->steps);
    cJSON_AddNumberToObject(o, "time_ns", m->time_ns);
    if (m->tokens) {
        cJSON_AddNumberToObject(o, "ms_per_token", m->time_ns / 1e6 / (double)m->tokens);
        cJSON_AddNumberToObject(o, "tok_s", mp_sim_tok_s(m));
    } else {
        cJSON_AddNullToObject(o, "ms_per_token");
        cJSON_AddNullToObject(o, "tok_s");
    }
    /* the CPU experts' time within time_ns: a run's own CPU expert time compares with it */
    cJSON_AddNumberToObject(o, "cpu_expert_ns", m->cpu_ns);
    cJSON_AddNumberToObject(o, "cpu_layer_invocations", (double)m->cpu_invocations);
    cJSON_AddNumberToObject(o, "h2d_weight_bytes", (double)m->h2d_weight_bytes);
    cJSON_AddNumberToObject(o, "h2d_activation_bytes", (double)m->h2d_act_bytes);
    cJSON_AddNumberToObject(o, "d2h_activation_bytes", (double)m->d2h_act_bytes);
    cJSON_AddNumberToObject(o, "admissions", (double)m->admissions);
    cJSON_AddNumberToObject(o, "evictions", (double)m->evictions);
    cJSON_AddNumberToObject(o, "routes_far", (double)m->routes_far);
    cJSON_AddNumberToObject(o, "routes_split", (double)m->routes_split);
    cJSON_AddNumberToObject(o, "experts_copied", (double)m->experts_copied);
    /* the floor of reading the cold experts from host memory, and the layer steps held to it */
    cJSON_AddNumberToObject(o, "floor_ns", m->floor_ns);
    cJSON_AddNumberToObject(o, "floored_layer_steps", (double)m->floored);
    cJSON *layers = cJSON_AddArrayToObject(o, "layer_hit_rate");
    for (uint32_t l = 0; layers && l < n_layers; l++)
        mp_json_append(layers, m->layer_decisions[l]
                                         ? cJSON_CreateNumber((double)m->layer_hits[l] / (double)m->layer_decisions[l])
                                         : cJSON_CreateNull());
    return o;
}

mp_status mp_sim_report_json(const char *path, const mp_sim_report *rep, mp_error *err)
{
    const mp_sim_trace *t = rep->trace;
    const mp_json_mark mark = mp_json_begin(); /* a failed cJSON allocation drops a member */
    cJSON *root = cJSON_CreateObject();
    if (!root)
        return mp_fail(err, MP_ERR_NOMEM, "report %s: out of memory", path);
    cJSON_AddStringToObject(root, "format", "moeplan-simulation");
    cJSON_AddNumberToObject(root, "version", 1);
    cJSON_AddStringToObject(root, "trace", rep->trace_path);
    cJSON_AddStringToObject(root, "costs", rep->costs_path);
    cJSON *geo = cJSON_AddObjectToObject(root, "trace_geometry");
    cJSON_AddNumberToObject(geo, "moe_layers", t->n_layers);
    cJSON_AddNumberToObject(geo, "experts", t->n_experts);
    cJSON_AddNumberToObject(geo, "top_k", t->top_k);
    cJSON_AddNumberToObject(geo, "requests", t->n_requests);
    cJSON_AddNumberToObject(geo, "steps", (double)t->n_steps);
    cJSON *layers = cJSON_AddArrayToObject(geo, "model_layers");
    for (uint32_t l = 0; layers && l < t->n_layers; l++)
        mp_json_append(layers, cJSON_CreateNumber(t->model_layer[l]));
    cJSON *cfg = cJSON_AddObjectToObject(root, "config");
    cJSON_AddNumberToObject(cfg, "train_frac", rep->cfg->train_frac);
    cJSON_AddNumberToObject(cfg, "non_expert_bytes", (double)rep->cfg->non_expert_bytes);
    cJSON_AddNumberToObject(cfg, "expert_bytes", (double)rep->cfg->gpu->expert_bytes);
    cJSON_AddStringToObject(cfg, "expert_quant", rep->cfg->gpu->quant);
    cJSON_AddNumberToObject(cfg, "cpu_threads", rep->cfg->cpu->threads);
    cJSON_AddNumberToObject(cfg, "alpha", rep->cfg->alpha);
    cJSON_AddNumberToObject(cfg, "beta", rep->cfg->beta);
    cJSON_AddNumberToObject(cfg, "epsilon", rep->cfg->epsilon);
    cJSON_AddNumberToObject(cfg, "window", rep->cfg->window);
    cJSON_AddBoolToObject(cfg, "pageable", rep->cfg->pageable);
    cJSON_AddStringToObject(cfg, "non_moe_source", mp_sim_non_moe_source_name(rep->cfg->non_moe_source));
    cJSON *budgets = cJSON_AddArrayToObject(root, "budgets");
    for (int b = 0; budgets && b < rep->n_runs; b++) {
        const mp_sim_budget_run *run = &rep->runs[b];
        cJSON *bo = cJSON_CreateObject();
        if (!mp_json_append(budgets, bo))
            bo = NULL; /* freed: the adds below become no-ops */
        cJSON_AddNumberToObject(bo, "budget_bytes", (double)run->budget_bytes);
        cJSON_AddNumberToObject(bo, "slots", (double)run->slots);
        if (rep->llamacpp) {
            const mp_sim_llamacpp *lc = &rep->llamacpp[b];
            cJSON *lo = cJSON_AddObjectToObject(bo, "llamacpp");
            if (lc->command)
                cJSON_AddStringToObject(lo, "command", lc->command);
            cJSON_AddNumberToObject(lo, "weights_bytes", (double)lc->weights_bytes);
            cJSON_AddNumberToObject(lo, "kv_bytes", (double)lc->kv_bytes);
            cJSON_AddNumberToObject(lo, "kv_cells", (double)lc->kv_cells);
            cJSON_AddNumberToObject(lo, "compute_bytes", (double)lc->compute_bytes);
            if (lc->command) {
                cJSON_AddNumberToObject(lo, "gpu_expert_bytes", (double)lc->gpu_expert_bytes);
                cJSON_AddNumberToObject(lo, "ms_per_token", lc->ms_layers);
                cJSON_AddNumberToObject(lo, "plan_ms_per_token", lc->ms_plan);
                cJSON_AddNumberToObject(lo, "all_cpu_ms_per_token", lc->ms_all_cpu);
            }
        }
        cJSON *pols = cJSON_AddArrayToObject(bo, "policies");
        for (int p = 0; pols && p < MP_POL_COUNT; p++) {
            if (!run->ran[p])
                continue;
            cJSON *po = cJSON_CreateObject();
            if (!mp_json_append(pols, po))
                po = NULL; /* freed: the adds below become no-ops */
            cJSON_AddStringToObject(po, "policy", mp_sim_policy_name(p));
            cJSON_AddNumberToObject(po, "resident_initial", (double)run->res[p].resident_initial);
            mp_json_attach(po, "in_sample", metrics_json(&run->res[p].train, t->n_layers));
            mp_json_attach(po, "held_out", metrics_json(&run->res[p].test, t->n_layers));
            if (run->ran_adaptive[p]) { /* the same placement with the adaptive tier beside it */
                const mp_sim_result *a = &run->adaptive[p];
                cJSON *ao = cJSON_AddObjectToObject(po, "adaptive");
                cJSON_AddStringToObject(ao, "policy", mp_tier_policy_name(a->tier_policy));
                cJSON_AddNumberToObject(ao, "slots_asked", (double)a->tier_asked);
                cJSON_AddNumberToObject(ao, "slots", (double)a->tier_slots);
                cJSON_AddNumberToObject(ao, "inflight", a->tier_inflight);
                cJSON_AddNumberToObject(ao, "resident_initial", (double)a->resident_initial);
                mp_json_attach(ao, "in_sample", metrics_json(&a->train, t->n_layers));
                mp_json_attach(ao, "held_out", metrics_json(&a->test, t->n_layers));
            }
        }
    }
    if (rep->sweep) {
        const mp_sim_sweep *sw = rep->sweep;
        cJSON *so = cJSON_AddObjectToObject(root, "sweep");
        cJSON_AddStringToObject(so, "policy", mp_sim_policy_name(sw->policy));
        cJSON_AddStringToObject(so, "param", sw->param);
        cJSON *pts = cJSON_AddArrayToObject(so, "points");
        for (int v = 0; pts && v < sw->n_values; v++) {
            cJSON *po = cJSON_CreateObject();
            if (!mp_json_append(pts, po))
                po = NULL; /* freed: the adds below become no-ops */
            cJSON_AddNumberToObject(po, "value", sw->values[v]);
            cJSON *bs = cJSON_AddArrayToObject(po, "budgets");
            for (int b = 0; bs && b < rep->n_runs; b++) {
                const mp_sim_result *r = &sw->res[(size_t)v * rep->n_runs + b];
                cJSON *bo = cJSON_CreateObject();
                if (!mp_json_append(bs, bo))
                    bo = NULL; /* freed: the adds below become no-ops */
                cJSON_AddNumberToObject(bo, "budget_bytes", (double)rep->runs[b].budget_bytes);
                mp_json_attach(bo, "in_sample", metrics_json(&r->train, t->n_layers));
                mp_json_attach(bo, "held_out", metrics_json(&r->test, t->n_layers));
            }
        }
    }
    if (rep->sens.done) {
        cJSON *sens = cJSON_AddArrayToObject(root, "sensitivity");
        for (int c = 0; sens && c < MP_COST_PARTS; c++)
            for (int k = 0; k < 2; k++) {
                cJSON *so = cJSON_CreateObject();
                if (!mp_json_append(sens, so))
                    so = NULL; /* freed: the adds below become no-ops */
                cJSON_AddStringToObject(so, "cost", mp_sim_cost_part_name(c));
                cJSON_AddNumberToObject(so, "factor", k ? 1.2 : 0.8);
                cJSON *best = cJSON_AddArrayToObject(so, "best_policy");
                cJSON *moved = cJSON_AddArrayToObject(so, "policies_moved");
                for (int b = 0; b < rep->n_runs && b < 16; b++) {
                    mp_json_append(best, cJSON_CreateString(mp_sim_policy_name(rep->sens.best[c][k][b])));
                    mp_json_append(moved, cJSON_CreateNumber(rep->sens.rank_changes[c][k][b]));
                }
            }
    }
    char *text = mp_json_failed_since(mark) ? NULL : cJSON_Print(root);
    cJSON_Delete(root);
    if (!text)
        return mp_fail(err, MP_ERR_NOMEM, "report %s: out of memory", path);
    mp_status st = mp_write_file_atomic(path, text, strlen(text), "report", err);
    free(text);
    return st;
}

/* Grouped bars: one group per budget, one bar per policy, height = tok/s (held-out if any). */
mp_status mp_sim_report_svg(const char *path, const mp_sim_report *rep, mp_error *err)
{
    static const char *const colors[] = {"#4e79a7", "#f28e2b", "#e15759", "#76b7b2", "#59a14f", "#edc948",
                                         "#b07aa1", "#ff9da7", "#9c755f", "#bab0ac", "#1f77b4", "#2ca02c", "#d62728"};
    int n_pol = 0;
    double max_tok_s = 0;
    bool shown[MP_POL_COUNT] = {0};
    for (int b = 0; b < rep->n_runs; b++)
        for (int p = 0; p < MP_POL_COUNT; p++)
            if (rep->runs[b].ran[p]) {
                shown[p] = true;
                double v = mp_sim_tok_s(mp_sim_rank_metrics(&rep->runs[b].res[p]));
                max_tok_s = v > max_tok_s ? v : max_tok_s;
            }
    for (int p = 0; p < MP_POL_COUNT; p++)
        n_pol += shown[p];
    if (max_tok_s <= 0)
        max_tok_s = 1;
    const int bar_w = 14, gap = 30, left = 70, top = 40, height = 300;
    int group_w = n_pol * bar_w + gap;
    int width = left + rep->n_runs * group_w + 180;
    size_t cap = 4096 + (size_t)rep->n_runs * n_pol * 256 + MP_POL_COUNT * 200;
    char *svg = mp_fault_malloc(cap);
    /* budget labels: as many digits as it takes to tell the budgets apart (a few MiB each for
     * a tiny model, where "%.2f GiB" printed 0.00 for all of them) */
    enum { LABEL = 32 };
    char *label = mp_fault_malloc((size_t)(rep->n_runs > 0 ? rep->n_runs : 1) * LABEL);
    double *budget = mp_fault_malloc((size_t)(rep->n_runs > 0 ? rep->n_runs : 1) * sizeof *budget);
    if (!svg || !label || !budget) {
        free(svg), free(label), free(budget);
        return mp_fail(err, MP_ERR_NOMEM, "report %s: out of memory", path);
    }
    for (int b = 0; b < rep->n_runs; b++)
        budget[b] = (double)rep->runs[b].budget_bytes;
    mp_svg_bytes_labels(label, LABEL, budget, rep->n_runs);
    size_t n = 0;
#define EMIT(...) n += (size_t)snprintf(svg + n, cap > n ? cap - n : 0, __VA_ARGS__)
    EMIT("<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"%d\" height=\"%d\" font-family=\"sans-serif\" "
         "font-size=\"11\">\n", width, top + height + 60);
    EMIT("<text x=\"%d\" y=\"20\" font-size=\"14\">simulated tok/s by budget and policy (held-out where it "
         "exists)</text>\n", left);
    EMIT("<line x1=\"%d\" y1=\"%d\" x2=\"%d\" y2=\"%d\" stroke=\"black\"/>\n", left, top, left, top + height);
    for (int i = 0; i <= 4; i++) {
        int y = top + height - height * i / 4;
        EMIT("<text x=\"%d\" y=\"%d\" text-anchor=\"end\">%.1f</text>\n", left - 4, y + 4, max_tok_s * i / 4);
        EMIT("<line x1=\"%d\" y1=\"%d\" x2=\"%d\" y2=\"%d\" stroke=\"#ddd\"/>\n", left, y, width - 180, y);
    }
    for (int b = 0; b < rep->n_runs; b++) {
        int x0 = left + gap / 2 + b * group_w, k = 0;
        for (int p = 0; p < MP_POL_COUNT; p++) {
            if (!shown[p])
                continue;
            if (rep->runs[b].ran[p]) {
                double v = mp_sim_tok_s(mp_sim_rank_metrics(&rep->runs[b].res[p]));
                int h = (int)lround(height * v / max_tok_s);
                EMIT("<rect x=\"%d\" y=\"%d\" width=\"%d\" height=\"%d\" fill=\"%s\"><title>%s: %.2f tok/s</title>"
                     "</rect>\n", x0 + k * bar_w, top + height - h, bar_w - 2, h, colors[p % 13],
                     mp_sim_policy_name(p), v);
            }
            k++;
        }
        EMIT("<text class=\"budget\" x=\"%d\" y=\"%d\" text-anchor=\"middle\">%s</text>\n",
             x0 + n_pol * bar_w / 2, top + height + 16, label + (size_t)b * LABEL);
    }
    int ly = top;
    for (int p = 0; p < MP_POL_COUNT; p++) {
        if (!shown[p])
            continue;
        EMIT("<rect x=\"%d\" y=\"%d\" width=\"10\" height=\"10\" fill=\"%s\"/><text x=\"%d\" y=\"%d\">%s</text>\n",
             width - 170, ly, colors[p % 13], width - 155, ly + 9, mp_sim_policy_name(p));
        ly += 16;
    }
    EMIT("</svg>\n");
#undef EMIT
    free(label), free(budget);
    if (n >= cap) {
        free(svg);
        return mp_fail(err, MP_ERR_INTERNAL, "report %s: SVG buffer too small", path);
    }
    mp_status st = mp_write_file_atomic(path, svg, n, "report", err);
    free(svg);
    return st;
}
