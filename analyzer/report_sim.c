/* analyzer/report_sim.c — the report's simulation part (`analyze --simulation FILE`): the
 * predicted tok/s of every policy at every budget as simulation.csv and simulation.svg (a line per
 * policy over the budgets, embedded in report.html), and the per-budget verdict report.html
 * states. Every number comes from the simulation file (analyzer/simulation.h): nothing is
 * predicted here. */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "analyzer/report.h"
#include "base/svg.h"

const char *const mp_an_simulation_files[] = {"simulation.csv", "simulation.svg", NULL};

/* Policies that place whole layers' experts (what llama.cpp's -ot and --n-cpu-moe can express),
 * and those that are no placement under the budget: all-gpu ignores it, belady is the offline
 * bound of the caches. */
static const char *const whole_layer[] = {"first-n-cpu", "last-n-cpu", "best-layers"};
static const char *const not_ranked[] = {"all-gpu", "belady"};

static bool listed(const char *name, const char *const *list, size_t n)
{
    for (size_t i = 0; i < n; i++)
        if (!strcmp(name, list[i]))
            return true;
    return false;
}

void mp_an_sim_verdict_at(const mp_an_simulation *s, int b, mp_an_sim_verdict *v)
{
    v->best = v->whole_layer = -1;
    v->all_cpu = mp_an_simulation_policy(s, "all-cpu");
    v->all_gpu = mp_an_simulation_policy(s, "all-gpu");
    for (int p = 0; p < s->n_policies; p++) {
        const mp_an_sim_point *pt = &s->pt[b][p];
        if (!pt->ran)
            continue;
        if (!listed(s->policy[p], not_ranked, 2) && (v->best < 0 || pt->tok_s > s->pt[b][v->best].tok_s))
            v->best = p;
        if (listed(s->policy[p], whole_layer, 3) &&
            (v->whole_layer < 0 || pt->tok_s > s->pt[b][v->whole_layer].tok_s))
            v->whole_layer = p;
    }
    if (v->all_cpu >= 0 && !s->pt[b][v->all_cpu].ran)
        v->all_cpu = -1;
    if (v->all_gpu >= 0 && !s->pt[b][v->all_gpu].ran)
        v->all_gpu = -1;
}

int mp_an_sim_enough_budget(const mp_an_simulation *s)
{
    const int last = s->order[s->n_budgets - 1];
    mp_an_sim_verdict top;
    mp_an_sim_verdict_at(s, last, &top);
    if (top.best < 0)
        return -1;
    const double goal = 0.95 * s->pt[last][top.best].tok_s;
    for (int i = 0; i < s->n_budgets; i++) {
        mp_an_sim_verdict v;
        mp_an_sim_verdict_at(s, s->order[i], &v);
        if (v.best >= 0 && s->pt[s->order[i]][v.best].tok_s >= goal)
            return s->order[i];
    }
    return last;
}

/* A colour per policy; the two baselines are dashed. */
static const char *const palette[] = {"#1f77b4", "#d62728", "#2ca02c", "#9467bd", "#ff7f0e",
                                      "#8c564b", "#e377c2", "#7f7f7f", "#bcbd22", "#17becf",
                                      "#393b79", "#637939", "#8c6d31", "#843c39", "#7b4173",
                                      "#3182bd"};

void mp_an_sim_chart(const mp_an_report *r, FILE *f)
{
    const mp_an_simulation *s = r->sim;
    double x[MP_AN_SIM_MAX_POLICIES][MP_AN_SIM_MAX_BUDGETS];
    double y[MP_AN_SIM_MAX_POLICIES][MP_AN_SIM_MAX_BUDGETS];
    mp_svg_series series[MP_AN_SIM_MAX_POLICIES];
    int n_series = 0;
    double y_max = 0;
    for (int p = 0; p < s->n_policies; p++) {
        int n = 0;
        for (int i = 0; i < s->n_budgets; i++) {
            const int b = s->order[i];
            if (!s->pt[b][p].ran)
                continue;
            x[p][n] = s->budget_bytes[b];
            y[p][n] = s->pt[b][p].tok_s;
            y_max = y[p][n] > y_max ? y[p][n] : y_max;
            n++;
        }
        if (n == 0)
            continue;
        const bool baseline = !strcmp(s->policy[p], "all-gpu") || !strcmp(s->policy[p], "all-cpu");
        series[n_series++] = (mp_svg_series){
            .label = s->policy[p], .x = x[p], .y = y[p], .n = n,
            .color = palette[p % (int)(sizeof palette / sizeof palette[0])],
            .dashed = baseline, .markers = true};
    }
    const double lo = s->budget_bytes[s->order[0]], hi = s->budget_bytes[s->order[s->n_budgets - 1]];
    const mp_svg_chart c = {
        .id = "chart-simulation",
        .title = "Predicted decode speed by GPU budget and placement policy",
        .x_label = "GPU budget", .y_label = "tokens/s (held-out where it exists)",
        .x_min = hi > lo ? lo : 0, .x_max = hi > 0 ? hi : 1, .y_min = 0,
        .y_max = y_max > 0 ? y_max * 1.05 : 1, .x_bytes = true};
    mp_svg_line_chart(f, &c, series, n_series); /* a failed write surfaces at the file's close */
}

mp_status mp_an_write_simulation(const mp_an_report *r, const char *dir, mp_error *err)
{
    const mp_an_simulation *s = r->sim;
    mp_an_out out;
    FILE *f = mp_an_open_out(&out, dir, "simulation.csv", err);
    if (!f)
        return err->code;
    fprintf(f, "budget_bytes,policy,split,tok_s,ms_per_token\n");
    for (int i = 0; i < s->n_budgets; i++)
        for (int p = 0; p < s->n_policies; p++) {
            const int b = s->order[i];
            const mp_an_sim_point *pt = &s->pt[b][p];
            if (pt->ran)
                fprintf(f, "%.0f,\"%s\",%s,%.6g,%.6g\n", s->budget_bytes[b], s->policy[p],
                        pt->held_out ? "held_out" : "in_sample", pt->tok_s, pt->ms_per_token);
        }
    mp_status st = mp_an_close_out(&out, err);
    if (st)
        return st;
    if (!(f = mp_an_open_out(&out, dir, "simulation.svg", err)))
        return err->code;
    fprintf(f, "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n");
    mp_an_sim_chart(r, f);
    return mp_an_close_out(&out, err);
}
