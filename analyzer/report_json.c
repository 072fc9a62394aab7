/* analyzer/report_json.c — summary.json, the machine-readable summary of the report; its schema
 * is schemas/report.schema.json (keep them in step). Shares are fractions in [0, 1]; values that
 * do not exist for a node (a transition table over too many experts) are null.
 */
#include <cjson/cJSON.h>
#include <stdlib.h>
#include <string.h>

#include "base/json.h"
#include "analyzer/report.h"

const char *const mp_an_report_files[] = {
    "summary.json", "report.html", "nodes.csv", "popularity.csv", "experts_global.csv",
    "coverage.csv", "coverage_global.csv", "capacity.csv", "rank_threshold.csv", "locality.csv",
    "weight_reuse.csv", "drift.csv", "requests.csv", "heatmap.svg", "coverage.svg",
    "rank_threshold.svg", "heldout.svg", "locality.svg", "weight_reuse.svg", "drift.svg",
    "requests.svg", NULL};

static cJSON *str_or_null(const char *s)
{
    return s ? cJSON_CreateString(s) : cJSON_CreateNull();
}

static cJSON *quantiles(const mp_an_request_dist *d, int m)
{
    cJSON *o = cJSON_CreateObject();
    cJSON_AddNumberToObject(o, "requests", (double)d->n[m]);
    cJSON_AddNumberToObject(o, "mean", d->mean[m]);
    cJSON_AddNumberToObject(o, "p10", mp_an_hist_quantile(d->hist[m], d->n[m], 0.10));
    cJSON_AddNumberToObject(o, "p50", mp_an_hist_quantile(d->hist[m], d->n[m], 0.50));
    cJSON_AddNumberToObject(o, "p90", mp_an_hist_quantile(d->hist[m], d->n[m], 0.90));
    return o;
}

static cJSON *capacity(const int64_t *experts, const uint64_t *bytes, int64_t bytes_per_expert)
{
    cJSON *a = cJSON_CreateArray();
    for (int t = 0; t < MP_AN_N_TARGETS; t++) {
        cJSON *o = cJSON_CreateObject();
        cJSON_AddNumberToObject(o, "target", mp_an_targets[t]);
        cJSON_AddNumberToObject(o, "experts", (double)experts[t]);
        cJSON_AddNumberToObject(o, "bytes", bytes ? (double)bytes[t]
                                                  : (double)(experts[t] * bytes_per_expert));
        mp_json_append(a, o);
    }
    return a;
}

/* One scope's routes by path (mp_served_name spells the keys) and those without served codes. */
static void add_paths(cJSON *o, const mp_trace_served_node *v)
{
    int64_t known = 0;
    cJSON_AddNumberToObject(o, "routes", (double)v->routes);
    for (int c = 0; c < MP_SERVED_N; c++) {
        cJSON_AddNumberToObject(o, mp_served_name(c), (double)v->by_path[c]);
        known += v->by_path[c];
    }
    cJSON_AddNumberToObject(o, "unknown", (double)(v->routes - known));
}

/* The routes of every step by the path that served them (timing.served), whatever --rows
 * selects: totals, then per node. */
static cJSON *routes_served(const mp_an_report *r)
{
    mp_trace_served_node all = {0};
    cJSON *o = cJSON_CreateObject(), *by_node = cJSON_CreateArray();
    for (int32_t i = 0; i < r->in->n_nodes; i++) {
        const mp_trace_served_node *v = &r->served[i];
        all.routes += v->routes;
        for (int c = 0; c < MP_SERVED_N; c++)
            all.by_path[c] += v->by_path[c];
        cJSON *n = cJSON_CreateObject();
        cJSON_AddNumberToObject(n, "node_index", (double)r->in->nodes[i].node_index);
        cJSON_AddNumberToObject(n, "layer", (double)r->in->nodes[i].layer);
        add_paths(n, v);
        mp_json_append(by_node, n);
    }
    add_paths(o, &all);
    mp_json_attach(o, "by_node", by_node);
    return o;
}

static cJSON *build(const mp_an_report *r)
{
    const mp_an_stats *s = r->st;
    const mp_an_summary *sum = r->sum;
    cJSON *root = cJSON_CreateObject();
    cJSON_AddStringToObject(root, "generator", "moeplan analyze");
    cJSON_AddStringToObject(root, "moeplan_version", MP_VERSION);
    cJSON_AddNumberToObject(root, "report_version", 1);
    cJSON *traces = cJSON_AddArrayToObject(root, "traces");
    for (int i = 0; i < r->in->n_traces; i++) {
        const mp_trace_run *run = mp_trace_reader_run(r->in->trace[i]);
        cJSON *t = cJSON_CreateObject();
        cJSON_AddStringToObject(t, "path", r->in->meta[i].path);
        mp_json_attach(t, "source", str_or_null(run->source));
        mp_json_attach(t, "source_path", str_or_null(run->source_path));
        mp_json_attach(t, "model_sha256", str_or_null(run->model_sha256));
        mp_json_attach(t, "architecture", str_or_null(run->architecture));
        cJSON_AddNumberToObject(t, "requests", (double)r->in->meta[i].n_requests);
        mp_json_append(traces, t);
    }
    mp_json_attach(root, "model", str_or_null(r->opt->model_path));
    bool bytes_known = true;
    for (int32_t i = 0; i < r->st->n_nodes; i++)
        bytes_known &= r->st->nodes[i].expert_bytes > 0;
    cJSON_AddStringToObject(root, "expert_bytes_source",
                            !bytes_known ? "unknown" : r->in->bytes_from_model ? "model" : "trace");
    cJSON_AddStringToObject(root, "rows", mp_an_rows_name(r->opt->rows));

    if (r->tier && r->tier->present) { /* the GPU executor's adaptive tier, from the timing rows */
        const mp_trace_tier_totals *t = r->tier;
        cJSON *at = cJSON_AddObjectToObject(root, "adaptive_tier");
        cJSON_AddNumberToObject(at, "routes", (double)t->routes);
        cJSON_AddNumberToObject(at, "tier_hits", (double)t->hits);
        cJSON_AddNumberToObject(at, "tier_share", t->routes ? (double)t->hits / (double)t->routes : 0.0);
        cJSON_AddNumberToObject(at, "late", (double)t->late);
        cJSON_AddNumberToObject(at, "admissions", (double)t->admissions);
        cJSON_AddNumberToObject(at, "evictions", (double)t->evictions);
        cJSON_AddNumberToObject(at, "copy_bytes", (double)t->copy_bytes);
    }
    mp_json_attach(root, "routes_served", routes_served(r));
    cJSON *tot = cJSON_AddObjectToObject(root, "totals");
    cJSON_AddNumberToObject(tot, "requests", (double)r->in->n_requests);
    cJSON_AddNumberToObject(tot, "nodes", s->n_nodes);
    cJSON_AddNumberToObject(tot, "max_experts", (double)sum->max_experts);
    cJSON_AddNumberToObject(tot, "token_rows", (double)s->total_rows);
    cJSON_AddNumberToObject(tot, "routes", (double)s->total_routes);

    cJSON *cap = cJSON_AddObjectToObject(root, "global_budget");
    cJSON_AddStringToObject(cap, "greedy_gain", sum->by_bytes ? "per_byte" : "per_expert");
    cJSON_AddNumberToObject(cap, "experts_total", (double)sum->n_global);
    cJSON_AddNumberToObject(cap, "bytes_total", (double)sum->global_bytes[sum->n_global]);
    mp_json_attach(cap, "capacity", capacity(sum->global_cap_experts, sum->global_cap_bytes, 0));

    cJSON *con = cJSON_AddObjectToObject(root, "concentration");
    cJSON_AddNumberToObject(con, "mean_entropy_norm", sum->mean_entropy_norm);
    cJSON_AddNumberToObject(con, "mean_gini", sum->mean_gini);

    cJSON *gen = cJSON_AddObjectToObject(root, "generalization");
    cJSON_AddStringToObject(gen, "train_by", r->opt->train_requests ? "requests" : "prefix");
    if (r->opt->train_requests)
        cJSON_AddNullToObject(gen, "train_frac");
    else
        cJSON_AddNumberToObject(gen, "train_frac", r->opt->train_frac);
    cJSON_AddNumberToObject(gen, "train_requests", (double)r->n_train_requests);
    cJSON_AddNumberToObject(gen, "train_routes", (double)sum->train_routes);
    cJSON_AddNumberToObject(gen, "heldout_routes", (double)sum->heldout_routes);
    const int64_t half = sum->n_global / 2;
    cJSON_AddNumberToObject(gen, "half_budget_in_sample", sum->global_in_sample[half]);
    cJSON_AddNumberToObject(gen, "half_budget_heldout", sum->global_heldout[half]);
    cJSON_AddNumberToObject(gen, "half_budget_all", sum->global_cov[half]);
    cJSON *drift = cJSON_AddArrayToObject(gen, "drift");
    for (int seg = 0; seg < mp_an_n_segments(r->in->n_requests); seg++) {
        cJSON *d = cJSON_CreateObject();
        cJSON_AddNumberToObject(d, "segment", seg);
        cJSON_AddNumberToObject(d, "routes", (double)sum->seg_routes[seg]);
        cJSON_AddNumberToObject(d, "heldout_half_coverage", sum->seg_heldout_half[seg]);
        mp_json_append(drift, d);
    }

    cJSON *loc = cJSON_AddObjectToObject(root, "locality");
    cJSON_AddNumberToObject(loc, "reuse_window_tokens", (double)r->opt->reuse_window);
    uint64_t stay = 0, cold = 0;
    for (int32_t i = 0; i < s->n_nodes; i++)
        stay += s->acc[i].reuse[0], cold += s->acc[i].cold;
    cJSON_AddNumberToObject(loc, "stay_frac", (double)stay / (double)s->total_routes);
    cJSON_AddNumberToObject(loc, "cold_routes", (double)cold);
    cJSON_AddNumberToObject(loc, "censored_routes", (double)s->censored);
    cJSON *wr = cJSON_AddArrayToObject(loc, "weight_reuse");
    for (int b = 0; b < MP_AN_WEIGHT_BINS; b++) {
        if (!s->weight_routes[b])
            continue;
        cJSON *o = cJSON_CreateObject();
        cJSON_AddNumberToObject(o, "weight_lo", (double)b / MP_AN_WEIGHT_BINS);
        cJSON_AddNumberToObject(o, "weight_hi", (double)(b + 1) / MP_AN_WEIGHT_BINS);
        cJSON_AddNumberToObject(o, "routes", (double)s->weight_routes[b]);
        cJSON_AddNumberToObject(o, "reused_frac", (double)s->weight_reused[b] / (double)s->weight_routes[b]);
        mp_json_append(wr, o);
    }

    cJSON *req = cJSON_AddObjectToObject(root, "requests");
    cJSON_AddNumberToObject(req, "n", (double)r->req->n_requests);
    static const char *const metric[4] = {"distinct_frac", "entropy_norm",
                                          "history_top_half_share", "history_tv_distance"};
    for (int m = 0; m < 4; m++)
        mp_json_attach(req, metric[m], quantiles(r->req, m));

    cJSON *nodes = cJSON_AddArrayToObject(root, "nodes");
    for (int32_t i = 0; i < s->n_nodes; i++) {
        const mp_an_node *n = &s->nodes[i];
        const mp_an_node_summary *ns = &sum->node[i];
        cJSON *o = cJSON_CreateObject();
        cJSON_AddNumberToObject(o, "node_index", (double)n->node_index);
        cJSON_AddStringToObject(o, "node_type", n->type);
        cJSON_AddStringToObject(o, "node_name", n->name);
        cJSON_AddNumberToObject(o, "layer", (double)n->layer);
        cJSON_AddNumberToObject(o, "n_experts", (double)n->n_experts);
        cJSON_AddNumberToObject(o, "top_k", (double)n->top_k);
        if (n->expert_bytes > 0)
            cJSON_AddNumberToObject(o, "expert_bytes", (double)n->expert_bytes);
        else
            cJSON_AddNullToObject(o, "expert_bytes");
        cJSON_AddNumberToObject(o, "routes", (double)s->acc[i].routes);
        cJSON_AddNumberToObject(o, "entropy_bits", ns->entropy_bits);
        cJSON_AddNumberToObject(o, "entropy_norm", ns->entropy_norm);
        cJSON_AddNumberToObject(o, "gini", ns->gini);
        cJSON_AddNumberToObject(o, "top_half_share", ns->coverage[n->n_experts / 2]);
        cJSON_AddNumberToObject(o, "stay_frac", ns->stay_frac);
        if (ns->has_same_layer)
            cJSON_AddNumberToObject(o, "same_layer_pred", ns->same_layer_pred);
        else
            cJSON_AddNullToObject(o, "same_layer_pred");
        if (ns->has_next_layer)
            cJSON_AddNumberToObject(o, "next_layer_pred", ns->next_layer_pred);
        else
            cJSON_AddNullToObject(o, "next_layer_pred");
        cJSON_AddNumberToObject(o, "half_in_sample", ns->cov_in_sample[n->n_experts / 2]);
        cJSON_AddNumberToObject(o, "half_heldout", ns->cov_heldout[n->n_experts / 2]);
        mp_json_attach(o, "capacity", capacity(ns->capacity, NULL, n->expert_bytes));
        if (ns->same_routing_as >= 0)
            cJSON_AddNumberToObject(o, "same_routing_as", (double)s->nodes[ns->same_routing_as].node_index);
        else
            cJSON_AddNullToObject(o, "same_routing_as");
        mp_json_append(nodes, o);
    }
    cJSON *files = cJSON_AddArrayToObject(root, "files");
    for (int i = 0; mp_an_report_files[i]; i++)
        mp_json_append(files, cJSON_CreateString(mp_an_report_files[i]));
    for (int i = 0; r->sim && mp_an_simulation_files[i]; i++)
        mp_json_append(files, cJSON_CreateString(mp_an_simulation_files[i]));
    return root;
}

mp_status mp_an_write_json(const mp_an_report *r, const char *dir, mp_error *err)
{
    const mp_json_mark mark = mp_json_begin(); /* a failed cJSON allocation drops a member */
    cJSON *root = build(r);
    char *text = root && !mp_json_failed_since(mark) ? cJSON_Print(root) : NULL;
    cJSON_Delete(root);
    if (!text)
        return mp_fail(err, MP_ERR_NOMEM, "analyzer: out of memory building summary.json");
    mp_an_out out;
    FILE *f = mp_an_open_out(&out, dir, "summary.json", err);
    if (!f) {
        free(text);
        return err->code;
    }
    fputs(text, f);
    fputc('\n', f);
    free(text);
    return mp_an_close_out(&out, err);
}
