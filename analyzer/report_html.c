/* analyzer/report_html.c — report.html: one self-contained page (inline CSS, the charts
 * embedded as inline SVG, no scripts, no external resources) that also links the CSV, SVG and
 * JSON files beside it. It opens with the answers (how skewed, which experts, which budget, each
 * against uniform routing), then the charts that back them. Every piece of trace text is
 * escaped. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "analyzer/report.h"
#include "base/svg.h"

static void bytes_cell(FILE *f, double b)
{
    char buf[64];
    mp_svg_bytes(buf, sizeof buf, b);
    fprintf(f, "<td>%s</td>", b > 0 ? buf : "?");
}

/* Budget (in the uniform polyline's unit) at which uniform routing serves target: the polyline
 * inverted by linear interpolation; -1 if it never does. */
static double uniform_need(const double *x, const double *y, int n, double target)
{
    for (int i = 1; i < n; i++)
        if (y[i] >= target - 1e-12) {
            const double dy = y[i] - y[i - 1];
            return dy > 0 ? x[i - 1] + (x[i] - x[i - 1]) * (target - y[i - 1]) / dy : x[i - 1];
        }
    return -1;
}

/* Share served under uniform routing at budget b (same polyline). */
static double uniform_at(const double *x, const double *y, int n, double b)
{
    for (int i = 1; i < n; i++)
        if (b <= x[i]) {
            const double dx = x[i] - x[i - 1];
            return dx > 0 ? y[i - 1] + (y[i] - y[i - 1]) * (b - x[i - 1]) / dx : y[i];
        }
    return n ? y[n - 1] : 0;
}

static const char *const chart_heading[MP_AN_N_CHARTS] = {
    "Which experts: popularity per layer", "Which budget: coverage", "Per-layer shortlists",
    "Does it generalize: held-out requests", "Locality: reuse and runs",
    "Router weight and reuse", "Drift over the requests", "Per-request distributions"};

/* the CSV each chart draws */
static const char *const chart_data[MP_AN_N_CHARTS] = {
    "popularity.csv", "coverage_global.csv", "rank_threshold.csv", "coverage_global.csv",
    "locality.csv", "weight_reuse.csv", "drift.csv", "requests.csv"};

/* A predicted speed or time: whole numbers from 1000, else 3 or 4 significant digits. */
static void num_text(char *buf, size_t cap, double v)
{
    snprintf(buf, cap, v >= 1000 ? "%.0f" : v >= 10 ? "%.1f" : "%.3g", v);
}

/* The budgets' labels, in budget order: as many digits as tell them apart (49.5 MiB, 49.6 MiB). */
#define SIM_LABEL 32
static void budget_labels(const mp_an_simulation *s, char label[][SIM_LABEL])
{
    double bytes[MP_AN_SIM_MAX_BUDGETS];
    for (int i = 0; i < s->n_budgets; i++)
        bytes[i] = s->budget_bytes[s->order[i]];
    mp_svg_bytes_labels(&label[0][0], SIM_LABEL, bytes, s->n_budgets);
}

/* The at-a-glance line of --simulation: at the largest budget, the best placement against all-CPU
 * and the best whole-layer placement; the smallest budget within 5 % of it. */
static void sim_glance(FILE *f, const mp_an_simulation *s)
{
    const int last = s->order[s->n_budgets - 1];
    mp_an_sim_verdict v;
    mp_an_sim_verdict_at(s, last, &v);
    if (v.best < 0)
        return;
    char label[MP_AN_SIM_MAX_BUDGETS][SIM_LABEL], t[32];
    budget_labels(s, label);
    const double best = s->pt[last][v.best].tok_s;
    num_text(t, sizeof t, best);
    fprintf(f, "<li id=\"sim-glance\">Simulated: at the largest budget, %s, the best placement "
               "(<b>%s</b>) predicts <b>%s tok/s</b>", label[s->n_budgets - 1], s->policy[v.best], t);
    if (v.all_cpu >= 0)
        fprintf(f, ", %.2fx every expert on the CPU", best / s->pt[last][v.all_cpu].tok_s);
    if (v.whole_layer >= 0)
        fprintf(f, ", %.2fx the best whole-layer placement (%s, what llama.cpp's -ot and "
                   "--n-cpu-moe can express)", best / s->pt[last][v.whole_layer].tok_s,
                s->policy[v.whole_layer]);
    const int enough = mp_an_sim_enough_budget(s);
    for (int i = 0; enough >= 0 && enough != last && i < s->n_budgets; i++)
        if (s->order[i] == enough)
            fprintf(f, "; %s already comes within 5 %% of it", label[i]);
    fprintf(f, ".</li>\n");
}

/* --simulation: what each budget buys, as a verdict per budget, the chart and the whole table. */
static void sim_section(FILE *f, const mp_an_report *r)
{
    const mp_an_simulation *s = r->sim;
    fprintf(f, "<h2 id=\"simulation\">Is it worth exploiting: predicted speed by budget and "
               "placement</h2>\n<p>From <a href=\"simulation.csv\">the simulation</a> ");
    mp_svg_put_escaped(f, r->opt->simulation_path);
    fprintf(f, " (moeplan simulate of ");
    mp_svg_put_escaped(f, s->trace);
    fprintf(f, "): decode tok/s predicted on the held-out requests where the simulation has "
               "them, else in-sample. Per-expert placements keep the most routed experts (the "
               "table above) on the GPU; whole-layer placements keep whole layers.</p>\n"
               "<table id=\"sim-verdict\"><tr><th>GPU budget</th><th class=\"l\">best placement"
               "</th><th>tok/s</th><th>vs all on the CPU</th><th class=\"l\">best whole-layer"
               "</th><th>best vs whole-layer</th><th>of all on the GPU</th></tr>\n");
    char label[MP_AN_SIM_MAX_BUDGETS][SIM_LABEL], t[32], u[32];
    budget_labels(s, label);
    for (int i = 0; i < s->n_budgets; i++) {
        const int k = s->order[i];
        mp_an_sim_verdict v;
        mp_an_sim_verdict_at(s, k, &v);
        fprintf(f, "<tr><td>%s</td>", label[i]);
        if (v.best < 0) {
            fprintf(f, "<td class=\"l\">-</td><td>-</td><td>-</td><td class=\"l\">-</td><td>-"
                       "</td><td>-</td></tr>\n");
            continue;
        }
        const double best = s->pt[k][v.best].tok_s;
        num_text(t, sizeof t, best);
        fprintf(f, "<td class=\"l\">%s</td><td>%s</td>", s->policy[v.best], t);
        if (v.all_cpu >= 0)
            fprintf(f, "<td>%.2fx</td>", best / s->pt[k][v.all_cpu].tok_s);
        else
            fprintf(f, "<td>-</td>");
        if (v.whole_layer >= 0)
            fprintf(f, "<td class=\"l\">%s</td><td>%.2fx</td>", s->policy[v.whole_layer],
                    best / s->pt[k][v.whole_layer].tok_s);
        else
            fprintf(f, "<td class=\"l\">-</td><td>-</td>");
        if (v.all_gpu >= 0)
            fprintf(f, "<td>%.1f %%</td></tr>\n", 100 * best / s->pt[k][v.all_gpu].tok_s);
        else
            fprintf(f, "<td>-</td></tr>\n");
    }
    fprintf(f, "</table>\n<figure>\n");
    mp_an_sim_chart(r, f);
    fprintf(f, "<figcaption><a href=\"simulation.svg\">simulation.svg</a> (data: <a href=\""
               "simulation.csv\">simulation.csv</a>)</figcaption></figure>\n"
               "<table id=\"sim-table\"><tr><th class=\"l\">policy</th>");
    for (int i = 0; i < s->n_budgets; i++)
        fprintf(f, "<th>%s</th>", label[i]);
    fprintf(f, "</tr>\n");
    for (int p = 0; p < s->n_policies; p++) {
        fprintf(f, "<tr><td class=\"l\">%s</td>", s->policy[p]);
        for (int i = 0; i < s->n_budgets; i++) {
            const mp_an_sim_point *pt = &s->pt[s->order[i]][p];
            num_text(t, sizeof t, pt->tok_s);
            num_text(u, sizeof u, pt->ms_per_token);
            if (pt->ran)
                fprintf(f, "<td>%s tok/s<br>%s ms/token%s</td>", t, u,
                        pt->held_out ? "" : " (in-sample)");
            else
                fprintf(f, "<td>-</td>");
        }
        fprintf(f, "</tr>\n");
    }
    fprintf(f, "</table>\n");
}

mp_status mp_an_write_html(const mp_an_report *r, const char *dir, mp_error *err)
{
    const mp_an_stats *s = r->st;
    const mp_an_summary *sum = r->sum;
    mp_an_out out;
    FILE *f = mp_an_open_out(&out, dir, "report.html", err);
    if (!f)
        return err->code;
    fprintf(f, "<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">\n"
               "<title>moeplan analyze report</title>\n<style>\n"
               "body{font-family:sans-serif;margin:2em;max-width:1100px;color:#222}\n"
               "table{border-collapse:collapse;margin:1em 0}td,th{border:1px solid #ccc;"
               "padding:3px 8px;text-align:right}th{background:#f2f2f2}\n"
               "td.l,th.l{text-align:left}figure{margin:1.5em 0}\n</style></head><body>\n"
               "<h1 id=\"title\">MoE routing report</h1>\n<p>moeplan %s; rows: <b>%s</b>; ",
            MP_VERSION, mp_an_rows_name(r->opt->rows));
    fprintf(f, "%lld requests, %llu token rows, %llu routing decisions over %d MoE layers.</p>\n",
            (long long)r->in->n_requests, (unsigned long long)s->total_rows,
            (unsigned long long)s->total_routes, s->n_nodes);
    fprintf(f, "<h2>Traces</h2>\n<table id=\"traces\"><tr><th class=\"l\">path</th><th class=\"l\">"
               "source</th><th class=\"l\">model SHA-256</th><th>requests</th></tr>\n");
    for (int i = 0; i < r->in->n_traces; i++) {
        const mp_trace_run *run = mp_trace_reader_run(r->in->trace[i]);
        fprintf(f, "<tr><td class=\"l\">");
        mp_svg_put_escaped(f, r->in->meta[i].path);
        fprintf(f, "</td><td class=\"l\">");
        mp_svg_put_escaped(f, run->source);
        fprintf(f, "</td><td class=\"l\">");
        mp_svg_put_escaped(f, run->model_sha256 ? run->model_sha256 : "unknown");
        fprintf(f, "</td><td>%lld</td></tr>\n", (long long)r->in->meta[i].n_requests);
    }
    double *ux = NULL, *uy = NULL;
    const int n_uniform = mp_an_uniform_coverage(r, &ux, &uy);
    if (n_uniform < 0) {
        mp_an_abort_out(&out);
        return mp_fail(err, MP_ERR_NOMEM, "analyzer: out of memory writing report.html");
    }
    const int64_t half = sum->n_global / 2;
    const double half_unit = sum->by_bytes ? (double)sum->global_bytes[half] : (double)half;
    fprintf(f, "</table>\n<h2 id=\"glance\">At a glance</h2>\n<ul>\n"
               "<li>Skew: the most popular half of the experts (%lld of %lld, one budget across "
               "layers) serves <b>%.1f %%</b> of the routes; with uniform routing the same budget "
               "would serve %.1f %%.</li>\n",
            (long long)half, (long long)sum->n_global, 100 * sum->global_cov[half],
            100 * uniform_at(ux, uy, n_uniform, half_unit));
    fprintf(f, "<li>Learned on %lld training requests, that half serves %.1f %% of the held-out "
               "requests' routes (%.1f %% in-sample). Mean normalized entropy %.3f (1 = uniform), "
               "mean Gini %.3f (0 = uniform).</li>\n",
            (long long)r->n_train_requests, 100 * sum->global_heldout[half],
            100 * sum->global_in_sample[half], sum->mean_entropy_norm, sum->mean_gini);
    if (r->sim)
        sim_glance(f, r->sim);
    fprintf(f, "</ul>\n");
    if (sum->n_same_routing > 0) {
        /* one line per group, named by its first node */
        fprintf(f, "<ul id=\"same-routing\">\n");
        for (int32_t i = 0; i < s->n_nodes; i++) {
            bool first = true;
            for (int32_t j = i + 1; j < s->n_nodes; j++) {
                if (sum->node[j].same_routing_as != i)
                    continue;
                if (first)
                    fprintf(f, "<li><b>Identical routing</b>: layer %lld (node %lld)",
                            (long long)s->nodes[i].layer, (long long)s->nodes[i].node_index);
                fprintf(f, ", layer %lld (node %lld)", (long long)s->nodes[j].layer,
                        (long long)s->nodes[j].node_index);
                first = false;
            }
            if (!first)
                fprintf(f, " chose the same experts for every token (a copied router?).</li>\n");
        }
        fprintf(f, "</ul>\n");
    }
    fprintf(f, "<h2>Which budget: capacity (one budget across all layers, greedy per %s)</h2>\n"
               "<table id=\"capacity\"><tr><th>coverage</th><th>experts</th><th>bytes</th>"
               "<th>uniform routing would need</th></tr>\n",
            sum->by_bytes ? "byte" : "expert");
    for (int t = 0; t < MP_AN_N_TARGETS; t++) {
        fprintf(f, "<tr><td>%.0f %%</td><td>%lld of %lld</td>", mp_an_targets[t] * 100,
                (long long)sum->global_cap_experts[t], (long long)sum->n_global);
        bytes_cell(f, (double)sum->global_cap_bytes[t]);
        const double need = uniform_need(ux, uy, n_uniform, mp_an_targets[t]);
        if (need < 0)
            fprintf(f, "<td>-</td>");
        else if (sum->by_bytes)
            bytes_cell(f, need);
        else
            fprintf(f, "<td>%.0f experts</td>", ceil(need - 1e-9));
        fprintf(f, "</tr>\n");
    }
    free(ux), free(uy);
    /* the hottest (layer, expert) pairs: the first picks of the global greedy */
    const int64_t n_hot = sum->n_global < 10 ? sum->n_global : 10;
    fprintf(f, "</table>\n<h2>Which experts: the first %lld of the global budget</h2>\n"
               "<table id=\"hot\"><tr><th>pick</th><th>layer</th><th>expert</th>"
               "<th>share of the layer's routes</th><th>vs uniform</th></tr>\n",
            (long long)n_hot);
    for (int64_t p = 0; p < n_hot; p++) {
        const mp_an_pick *pk = &sum->global_order[p];
        const mp_an_node_acc *a = &s->acc[pk->node];
        const double sh = a->routes ? (double)a->count[pk->expert] / (double)a->routes : 0;
        fprintf(f, "<tr><td>%lld</td><td>%lld</td><td>%d</td><td>%.2f %%</td><td>%.2fx</td></tr>\n",
                (long long)p + 1, (long long)s->nodes[pk->node].layer, pk->expert, 100 * sh,
                sh * (double)s->nodes[pk->node].n_experts);
    }
    fprintf(f, "</table>\n");
    if (r->sim)
        sim_section(f, r);
    for (int k = 0; k < MP_AN_N_CHARTS; k++) {
        fprintf(f, "<h2>%s</h2>\n<figure>\n", chart_heading[k]);
        mp_status st = mp_an_svg_chart(r, k, f, err);
        if (st != MP_OK) {
            mp_an_abort_out(&out);
            return st;
        }
        fprintf(f, "<figcaption><a href=\"%s\">%s</a> (data: <a href=\"%s\">%s</a>)</figcaption>"
                   "</figure>\n",
                mp_an_chart_files[k], mp_an_chart_files[k], chart_data[k], chart_data[k]);
    }
    fprintf(f, "<h2>Layers</h2>\n<table id=\"nodes\"><tr><th>node</th><th class=\"l\">name</th>"
               "<th>layer</th><th>experts</th><th>top-k</th><th>expert bytes</th><th>routes</th>"
               "<th>entropy (norm.)</th><th>Gini</th><th>top-half share</th><th>stay</th>"
               "<th>experts for 90 %%</th><th>same routing as node</th></tr>\n");
    for (int32_t i = 0; i < s->n_nodes; i++) {
        const mp_an_node *n = &s->nodes[i];
        const mp_an_node_summary *ns = &sum->node[i];
        fprintf(f, "<tr><td>%lld</td><td class=\"l\">", (long long)n->node_index);
        mp_svg_put_escaped(f, n->name);
        fprintf(f, "</td><td>%lld</td><td>%lld</td><td>%lld</td>", (long long)n->layer,
                (long long)n->n_experts, (long long)n->top_k);
        bytes_cell(f, (double)n->expert_bytes);
        fprintf(f, "<td>%llu</td><td>%.3f</td><td>%.3f</td><td>%.3f</td><td>%.3f</td><td>%lld</td>",
                (unsigned long long)s->acc[i].routes, ns->entropy_norm, ns->gini,
                ns->coverage[n->n_experts / 2], ns->stay_frac, (long long)ns->capacity[2]);
        if (ns->same_routing_as >= 0)
            fprintf(f, "<td>%lld</td></tr>\n", (long long)s->nodes[ns->same_routing_as].node_index);
        else
            fprintf(f, "<td></td></tr>\n");
    }
    fprintf(f, "</table>\n<h2>Files</h2>\n<ul id=\"files\">\n");
    for (int i = 0; mp_an_report_files[i]; i++)
        fprintf(f, "<li><a href=\"%s\">%s</a></li>\n", mp_an_report_files[i], mp_an_report_files[i]);
    for (int i = 0; r->sim && mp_an_simulation_files[i]; i++)
        fprintf(f, "<li><a href=\"%s\">%s</a></li>\n", mp_an_simulation_files[i],
                mp_an_simulation_files[i]);
    fprintf(f, "</ul>\n<p>Column definitions: docs/analyzer.md.</p>\n</body></html>\n");
    return mp_an_close_out(&out, err);
}
