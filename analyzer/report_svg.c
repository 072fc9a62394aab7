/* analyzer/report_svg.c — the report's four charts:
 *   heatmap.svg         layer × expert popularity (share relative to uniform, log scale)
 *   coverage.svg        share of routes served vs expert bytes kept: one global budget spread by
 *                       greedy marginal gain, and the same top-k in every layer
 *   rank_threshold.svg  coverage of the top-t and the complement (N−t)/N, representative layers
 *   heldout.svg         popularity learned on the training requests: in-sample vs held-out
 * Long curves are thinned to at most MAX_POINTS points (the chart is 600 units wide).
 */
#include <math.h>
#include <stdlib.h>

#include "runtime/fault.h"
#include "analyzer/report.h"
#include "analyzer/svg.h"

#define MAX_POINTS 600

const char *const mp_an_chart_files[MP_AN_N_CHARTS] = {"heatmap.svg", "coverage.svg",
                                                        "rank_threshold.svg", "heldout.svg"};
const char *const mp_an_chart_ids[MP_AN_N_CHARTS] = {"chart-heatmap", "chart-coverage",
                                                      "chart-rank-threshold", "chart-heldout"};
static const char *const colors[] = {"#1f77b4", "#d62728", "#2ca02c", "#9467bd", "#ff7f0e",
                                     "#8c564b"};

/* Columns of the heat map: experts, grouped when there are more than MAX_HEAT_COLS so that the
 * SVG stays small (65,536 experts × 48 layers would be 3 M rectangles). */
#define MAX_HEAT_COLS 256

static void heatmap(const mp_an_report *r, FILE *f, double *value, char **labels)
{
    const mp_an_stats *s = r->st;
    const int64_t max_e = r->sum->max_experts;
    const int64_t group = (max_e + MAX_HEAT_COLS - 1) / MAX_HEAT_COLS;
    const int64_t cols = (max_e + group - 1) / group;
    for (int32_t i = 0; i < s->n_nodes; i++) {
        const int64_t E = s->nodes[i].n_experts;
        for (int64_t c = 0; c < cols; c++) {
            uint64_t n = 0;
            int64_t members = 0;
            for (int64_t e = c * group; e < (c + 1) * group && e < E; e++, members++)
                n += s->acc[i].count[e];
            double v = 0;
            if (members && n && s->acc[i].routes) {
                /* share relative to a uniform router (routes / E per expert): 1/8× maps to 0,
                 * 8× to 1 */
                const double rel = (double)n * (double)E / ((double)s->acc[i].routes * (double)members);
                v = (log2(rel) + 3) / 6;
            }
            value[(size_t)i * (size_t)cols + (size_t)c] = v;
        }
        snprintf(labels[i], 32, "layer %lld", (long long)s->nodes[i].layer);
    }
    char x_label[64];
    if (group > 1)
        snprintf(x_label, sizeof x_label, "expert id (groups of %lld)", (long long)group);
    else
        snprintf(x_label, sizeof x_label, "expert id");
    mp_svg_heatmap(f, mp_an_chart_ids[0],
                   "Expert popularity per layer (colour: share vs uniform, 1/8x .. 8x, log)", value,
                   s->n_nodes, (int)cols, (int)group, (const char *const *)labels, x_label,
                   "MoE layer");
}

/* Fill x/y with at most MAX_POINTS samples of the curve i -> (xf(i), yf(i)), i = 0..n. */
static int thin(int64_t n, double *x, double *y, const double *xs, const double *ys)
{
    int m = 0;
    const int64_t step = n / MAX_POINTS + 1;
    for (int64_t i = 0; i <= n; i += step, m++)
        x[m] = xs[i], y[m] = ys[i];
    if ((n % step) != 0)
        x[m] = xs[n], y[m] = ys[n], m++;
    return m;
}

static mp_status coverage(const mp_an_report *r, FILE *f)
{
    const mp_an_stats *s = r->st;
    const mp_an_summary *sum = r->sum;
    const int64_t n = sum->n_global;
    int64_t maxE = sum->max_experts;
    double *gx = mp_fault_malloc((size_t)(n + 1) * sizeof *gx), *gy = mp_fault_malloc((size_t)(n + 1) * sizeof *gy);
    double *ux = mp_fault_malloc((size_t)(maxE + 1) * sizeof *ux), *uy = mp_fault_malloc((size_t)(maxE + 1) * sizeof *uy);
    double *tx = mp_fault_malloc((MAX_POINTS + 2) * sizeof *tx), *ty = mp_fault_malloc((MAX_POINTS + 2) * sizeof *ty);
    if (!gx || !gy || !ux || !uy || !tx || !ty) {
        free(gx), free(gy), free(ux), free(uy), free(tx), free(ty);
        return MP_ERR_NOMEM;
    }
    double total_bytes = 0;
    for (int32_t i = 0; i < s->n_nodes; i++)
        total_bytes += (double)s->nodes[i].n_experts * (double)s->nodes[i].expert_bytes;
    const bool bytes = sum->by_bytes;
    for (int64_t p = 0; p <= n; p++) {
        gx[p] = bytes ? (double)sum->global_bytes[p] : (double)p;
        gy[p] = sum->global_cov[p];
    }
    /* the same k in every layer (k capped at each layer's expert count) */
    for (int64_t k = 0; k <= maxE; k++) {
        double b = 0, served = 0, kept = 0;
        for (int32_t i = 0; i < s->n_nodes; i++) {
            const int64_t kk = k < s->nodes[i].n_experts ? k : s->nodes[i].n_experts;
            b += (double)kk * (double)s->nodes[i].expert_bytes;
            kept += (double)kk;
            served += r->sum->node[i].coverage[kk] * (double)s->acc[i].routes;
        }
        ux[k] = bytes ? b : kept;
        uy[k] = served / (double)s->total_routes;
    }
    int m1 = thin(n, tx, ty, gx, gy);
    mp_svg_series series[2] = {
        {"global budget (greedy)", tx, ty, m1, colors[0], false},
        {"same top-k per layer", ux, uy, (int)maxE + 1, colors[1], true},
    };
    const double mean_bytes = n ? total_bytes / (double)n : 0;
    mp_svg_chart c = {
        .id = mp_an_chart_ids[1],
        .title = "Coverage: share of routes served by the experts kept",
        .x_label = bytes ? "expert bytes kept (all layers)" : "experts kept (all layers)",
        .y_label = "share of routes served",
        .x_min = 0, .x_max = bytes ? total_bytes : (double)n, .y_min = 0, .y_max = 1,
        .top_label = bytes ? "experts kept (all layers, at the mean expert size)" : NULL,
        .top_scale = bytes && mean_bytes > 0 ? 1.0 / mean_bytes : 0,
        .x_bytes = bytes,
    };
    mp_svg_line_chart(f, &c, series, 2);
    free(gx), free(gy), free(ux), free(uy), free(tx), free(ty);
    return MP_OK;
}

static mp_status rank_threshold(const mp_an_report *r, FILE *f)
{
    const mp_an_stats *s = r->st;
    int32_t rep[5];
    const int n_rep = mp_an_representative_nodes(s->n_nodes, rep);
    const int64_t E = s->nodes[rep[0]].n_experts;
    mp_svg_series series[6];
    double *xs[6] = {0}, *ys[6] = {0};
    char labels[6][64];
    int ns = 0;
    mp_status st = MP_OK;
    for (int k = 0; k < n_rep; k++) {
        const int64_t N = s->nodes[rep[k]].n_experts;
        xs[ns] = mp_fault_malloc((size_t)(N + 1) * sizeof(double));
        if (!xs[ns]) {
            st = MP_ERR_NOMEM;
            goto out;
        }
        ys[ns] = mp_fault_malloc((MAX_POINTS + 2) * 2 * sizeof(double));
        if (!ys[ns]) {
            ns++;
            st = MP_ERR_NOMEM;
            goto out;
        }
        for (int64_t t = 0; t <= N; t++)
            xs[ns][t] = (double)t;
        snprintf(labels[ns], sizeof labels[ns], "layer %lld: top-t share", (long long)s->nodes[rep[k]].layer);
        /* thinned into ys[ns]: x in the first half, y in the second */
        const int m = thin(N, ys[ns], ys[ns] + MAX_POINTS + 2, xs[ns], r->sum->node[rep[k]].coverage);
        series[ns] = (mp_svg_series){labels[ns], ys[ns], ys[ns] + MAX_POINTS + 2, m, colors[k], false};
        ns++;
    }
    /* the complement (N-t)/N is a straight line: its two ends */
    static const double comp_y[2] = {1, 0};
    double comp_x[2] = {0, (double)E};
    series[ns] = (mp_svg_series){"complement (N-t)/N", comp_x, comp_y, 2, "#333", true};
    ns++;
    const int64_t b = s->nodes[rep[0]].expert_bytes;
    mp_svg_chart c = {
        .id = mp_an_chart_ids[2],
        .title = "Rank threshold t: top-t share and complement, representative layers",
        .x_label = "rank threshold t (experts in the shortlist)",
        .y_label = "share",
        .x_min = 0, .x_max = (double)E, .y_min = 0, .y_max = 1,
        .top_label = b > 0 ? "shortlist bytes t*b (per layer)" : NULL,
        .top_scale = (double)b,
        .top_bytes = true,
    };
    mp_svg_line_chart(f, &c, series, ns);
out:
    for (int k = 0; k < ns; k++)
        free(xs[k]), free(ys[k]);
    return st;
}

static mp_status heldout(const mp_an_report *r, FILE *f)
{
    const mp_an_summary *sum = r->sum;
    const int64_t n = sum->n_global;
    double *x = mp_fault_malloc((size_t)(n + 1) * sizeof *x);
    double *t[3];
    for (int k = 0; k < 3; k++)
        t[k] = mp_fault_malloc((MAX_POINTS + 2) * 2 * sizeof(double));
    if (!x || !t[0] || !t[1] || !t[2]) {
        free(x), free(t[0]), free(t[1]), free(t[2]);
        return MP_ERR_NOMEM;
    }
    for (int64_t p = 0; p <= n; p++)
        x[p] = (double)p / (double)n;
    const double *ys[3] = {sum->global_in_sample, sum->global_heldout, sum->global_cov};
    static const char *const names[3] = {"in-sample (train)", "held-out", "all (learned on all)"};
    mp_svg_series series[3];
    for (int k = 0; k < 3; k++) {
        int m = thin(n, t[k], t[k] + MAX_POINTS + 2, x, ys[k]);
        series[k] = (mp_svg_series){names[k], t[k], t[k] + MAX_POINTS + 2, m, colors[k], k == 2};
    }
    mp_svg_chart c = {
        .id = mp_an_chart_ids[3],
        .title = "Generalization: popularity learned on training requests",
        .x_label = "global budget (fraction of all experts)",
        .y_label = "share of routes served",
        .x_min = 0, .x_max = 1, .y_min = 0, .y_max = 1,
    };
    mp_svg_line_chart(f, &c, series, sum->heldout_routes ? 3 : 1);
    free(x), free(t[0]), free(t[1]), free(t[2]);
    return MP_OK;
}

mp_status mp_an_svg_chart(const mp_an_report *r, int which, FILE *f, mp_error *err)
{
    mp_status st = MP_OK;
    if (which == 0) {
        const int32_t rows = r->st->n_nodes;
        double *value = mp_fault_malloc((size_t)rows * (size_t)r->sum->max_experts * sizeof *value);
        char **labels = mp_fault_calloc((size_t)rows, sizeof *labels);
        char *label_buf = mp_fault_malloc((size_t)rows * 32);
        if (value && labels && label_buf) {
            for (int32_t i = 0; i < rows; i++)
                labels[i] = label_buf + 32 * i;
            heatmap(r, f, value, labels);
        } else {
            st = MP_ERR_NOMEM;
        }
        free(value), free(labels), free(label_buf);
    } else if (which == 1) {
        st = coverage(r, f);
    } else if (which == 2) {
        st = rank_threshold(r, f);
    } else {
        st = heldout(r, f);
    }
    if (st != MP_OK)
        return mp_fail(err, st, "analyzer: out of memory drawing %s", mp_an_chart_files[which]);
    return MP_OK;
}

mp_status mp_an_write_svg(const mp_an_report *r, const char *dir, mp_error *err)
{
    for (int k = 0; k < MP_AN_N_CHARTS; k++) {
        mp_an_out out;
        FILE *f = mp_an_open_out(&out, dir, mp_an_chart_files[k], err);
        if (!f)
            return err->code;
        fprintf(f, "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n");
        mp_status st = mp_an_svg_chart(r, k, f, err);
        if (st != MP_OK) {
            mp_an_abort_out(&out);
            return st;
        }
        if ((st = mp_an_close_out(&out, err)) != MP_OK)
            return st;
    }
    return MP_OK;
}
