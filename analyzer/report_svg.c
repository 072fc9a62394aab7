/* analyzer/report_svg.c — the report's charts:
 *   heatmap.svg         layer × expert popularity (share relative to uniform, log scale)
 *   coverage.svg        share of routes served vs expert bytes kept: one global budget spread by
 *                       greedy marginal gain, the same top-k in every layer, and uniform routing
 *   rank_threshold.svg  coverage of the top-t and the complement (N−t)/N, representative layers
 *   heldout.svg         popularity learned on the training requests: in-sample vs held-out
 *   locality.svg        reuse distance and run length (locality.csv), against i.i.d. uniform
 *   weight_reuse.svg    near-future reuse by router weight (weight_reuse.csv)
 *   drift.svg           held-out top-half coverage per order segment (drift.csv)
 *   requests.svg        per-request distributions over requests (requests.csv), as CDFs
 * Every "uniform" reference is what the same statistic would be if each row chose its top-k
 * experts uniformly at random, independently of every other row. Long curves are thinned to at
 * most MAX_POINTS points (the chart is 600 units wide).
 */
#include <math.h>
#include <stdlib.h>

#include "base/fault.h"
#include "analyzer/report.h"
#include "base/svg.h"

#define MAX_POINTS 600

const char *const mp_an_chart_files[MP_AN_N_CHARTS] = {
    "heatmap.svg", "coverage.svg", "rank_threshold.svg", "heldout.svg",
    "locality.svg", "weight_reuse.svg", "drift.svg", "requests.svg"};
const char *const mp_an_chart_ids[MP_AN_N_CHARTS] = {
    "chart-heatmap", "chart-coverage", "chart-rank-threshold", "chart-heldout",
    "chart-locality", "chart-weight-reuse", "chart-drift", "chart-requests"};
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
    static const char *const scale[] = {"\u2264 1/8x", "1/4x", "1/2x", "1x", "2x", "4x",
                                        "\u2265 8x"};
    const mp_svg_heat h = {
        .id = mp_an_chart_ids[0],
        .title = "Expert popularity per layer: share of the layer's routes vs a uniform router",
        .x_label = x_label, .y_label = "MoE layer",
        .value = value, .rows = s->n_nodes, .cols = (int)cols, .col_scale = (int)group,
        .row_labels = (const char *const *)labels,
        .scale_title = "vs uniform", .scale_labels = scale, .n_scale = 7,
    };
    mp_svg_heatmap(f, &h);
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

typedef struct uniform_node {
    double gain;  /* routes per unit kept (byte, or expert when bytes are unknown) */
    double width; /* units the node's experts take */
    double share; /* the node's share of all routes */
} uniform_node;

static int by_gain_desc(const void *a, const void *b)
{
    const double x = ((const uniform_node *)a)->gain, y = ((const uniform_node *)b)->gain;
    return x < y ? 1 : x > y ? -1 : 0;
}

/* Under uniform routing every expert of node i serves routes_i / N_i, so the greedy takes whole
 * nodes in order of routes per unit and coverage grows linearly within each. */
int mp_an_uniform_coverage(const mp_an_report *r, double **x, double **y)
{
    const mp_an_stats *s = r->st;
    const bool bytes = r->sum->by_bytes;
    uniform_node *u = mp_fault_malloc((size_t)s->n_nodes * sizeof *u);
    *x = mp_fault_malloc((size_t)(s->n_nodes + 1) * sizeof **x);
    *y = mp_fault_malloc((size_t)(s->n_nodes + 1) * sizeof **y);
    if (!u || !*x || !*y) {
        free(u), free(*x), free(*y);
        *x = *y = NULL;
        return -1;
    }
    for (int32_t i = 0; i < s->n_nodes; i++) {
        const double unit = bytes ? (double)s->nodes[i].expert_bytes : 1;
        u[i].width = (double)s->nodes[i].n_experts * unit;
        u[i].share = s->total_routes ? (double)s->acc[i].routes / (double)s->total_routes : 0;
        u[i].gain = u[i].width > 0 ? u[i].share / u[i].width : 0;
    }
    qsort(u, (size_t)s->n_nodes, sizeof *u, by_gain_desc);
    (*x)[0] = (*y)[0] = 0;
    for (int32_t i = 0; i < s->n_nodes; i++) {
        (*x)[i + 1] = (*x)[i] + u[i].width;
        (*y)[i + 1] = (*y)[i] + u[i].share;
    }
    free(u);
    return s->n_nodes + 1;
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
    double *rx = NULL, *ry = NULL;
    const int m_uniform = mp_an_uniform_coverage(r, &rx, &ry);
    if (m_uniform < 0) {
        free(gx), free(gy), free(ux), free(uy), free(tx), free(ty);
        return MP_ERR_NOMEM;
    }
    mp_svg_series series[3] = {
        {"global budget (greedy)", tx, ty, m1, colors[0], false, false},
        {"same top-k per layer", ux, uy, (int)maxE + 1, colors[1], true, false},
        {"uniform routing", rx, ry, m_uniform, "#777", true, false},
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
        .x_bytes = bytes, .x_integer = !bytes, .top_integer = true,
    };
    mp_svg_line_chart(f, &c, series, 3);
    free(gx), free(gy), free(ux), free(uy), free(tx), free(ty), free(rx), free(ry);
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
        series[ns] = (mp_svg_series){labels[ns], ys[ns], ys[ns] + MAX_POINTS + 2, m, colors[k], false, false};
        ns++;
    }
    /* the complement (N-t)/N is a straight line: its two ends */
    static const double comp_y[2] = {1, 0};
    double comp_x[2] = {0, (double)E};
    series[ns] = (mp_svg_series){"complement (N-t)/N", comp_x, comp_y, 2, "#333", true, false};
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
        .top_bytes = true, .x_integer = true,
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
        series[k] = (mp_svg_series){names[k], t[k], t[k] + MAX_POINTS + 2, m, colors[k], k == 2, false};
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

/* Under uniform i.i.d. routing a node's expert is chosen by a row with probability k/N: the
 * chance that it comes back within d rows, averaged over nodes by their routes. */
static double uniform_reuse_within(const mp_an_stats *s, double d)
{
    double sum = 0;
    for (int32_t i = 0; i < s->n_nodes; i++) {
        const double p = (double)s->nodes[i].top_k / (double)s->nodes[i].n_experts;
        sum += (double)s->acc[i].routes * (1 - pow(1 - p, d));
    }
    return s->total_routes ? sum / (double)s->total_routes : 0;
}

/* x = log2 tokens: the share of routes whose expert the node used fewer than 2^x tokens before
 * (reuse distance < 2^x; cold routes never count), and the share of runs at least 2^x long. */
static mp_status locality(const mp_an_report *r, FILE *f)
{
    const mp_an_stats *s = r->st;
    uint64_t reuse[MP_AN_LOG2_BUCKETS] = {0}, runs[MP_AN_LOG2_BUCKETS] = {0}, n_runs = 0;
    int top = 1;
    for (int32_t i = 0; i < s->n_nodes; i++)
        for (int b = 0; b < MP_AN_LOG2_BUCKETS; b++) {
            reuse[b] += s->acc[i].reuse[b], runs[b] += s->acc[i].runs[b], n_runs += s->acc[i].runs[b];
            if ((s->acc[i].reuse[b] || s->acc[i].runs[b]) && b + 1 > top)
                top = b + 1;
        }
    double x[MP_AN_LOG2_BUCKETS + 1], y_reuse[MP_AN_LOG2_BUCKETS + 1], y_uni[MP_AN_LOG2_BUCKETS + 1],
        y_runs[MP_AN_LOG2_BUCKETS + 1];
    uint64_t below = 0, at_least = n_runs;
    for (int k = 0; k <= top; k++) {
        x[k] = k;
        y_reuse[k] = s->total_routes ? (double)below / (double)s->total_routes : 0;
        y_uni[k] = uniform_reuse_within(s, pow(2, k) - 1);
        y_runs[k] = n_runs ? (double)at_least / (double)n_runs : 0;
        if (k < MP_AN_LOG2_BUCKETS)
            below += reuse[k], at_least -= runs[k];
    }
    mp_svg_series series[3] = {
        {"routes reused within d", x, y_reuse, top + 1, colors[0], false, true},
        {"same, uniform routing", x, y_uni, top + 1, "#777", true, false},
        {"runs at least d long", x, y_runs, top + 1, colors[1], false, true},
    };
    mp_svg_chart c = {
        .id = mp_an_chart_ids[4],
        .title = "Locality: reuse distance (routes) and run length (runs)",
        .x_label = "d: tokens of the same layer (log scale; reuse: distance below d)",
        .y_label = "share",
        .x_min = 0, .x_max = top, .y_min = 0, .y_max = 1, .x_pow2 = true,
    };
    mp_svg_line_chart(f, &c, series, 3);
    return MP_OK;
}

static mp_status weight_reuse(const mp_an_report *r, FILE *f)
{
    const mp_an_stats *s = r->st;
    double x[MP_AN_WEIGHT_BINS], y[MP_AN_WEIGHT_BINS], all_x[2] = {0, 1}, all_y[2], uni_y[2];
    int n = 0;
    uint64_t routes = 0, reused = 0;
    for (int b = 0; b < MP_AN_WEIGHT_BINS; b++) {
        routes += s->weight_routes[b], reused += s->weight_reused[b];
        if (!s->weight_routes[b])
            continue;
        x[n] = (b + 0.5) / MP_AN_WEIGHT_BINS;
        y[n++] = (double)s->weight_reused[b] / (double)s->weight_routes[b];
    }
    all_y[0] = all_y[1] = routes ? (double)reused / (double)routes : 0;
    uni_y[0] = uni_y[1] = uniform_reuse_within(s, (double)s->cfg.reuse_window);
    mp_svg_series series[3] = {
        {"routes in the weight bin", x, y, n, colors[0], false, true},
        {"all routes", all_x, all_y, 2, colors[1], true, false},
        {"uniform routing", all_x, uni_y, 2, "#777", true, false},
    };
    char title[128];
    snprintf(title, sizeof title, "Near-future reuse by router weight (expert back within %lld tokens)",
             (long long)s->cfg.reuse_window);
    mp_svg_chart c = {
        .id = mp_an_chart_ids[5], .title = title,
        .x_label = "router weight of the route (bins of 0.05)",
        .y_label = "share of routes reused",
        .x_min = 0, .x_max = 1, .y_min = 0, .y_max = 1,
    };
    mp_svg_line_chart(f, &c, series, 3);
    return MP_OK;
}

static mp_status drift(const mp_an_report *r, FILE *f)
{
    const mp_an_stats *s = r->st;
    const int32_t n_seg = mp_an_n_segments(r->in->n_requests);
    double x[MP_AN_SEGMENTS], y[MP_AN_SEGMENTS], ux[2] = {0, n_seg > 1 ? n_seg - 1 : 1}, uy[2];
    for (int k = 0; k < n_seg; k++)
        x[k] = k, y[k] = r->sum->seg_heldout_half[k];
    /* uniform: the top half of a node's N experts serves floor(N/2)/N of its routes */
    double half = 0;
    for (int32_t i = 0; i < s->n_nodes; i++)
        half += (double)s->acc[i].routes * (double)(s->nodes[i].n_experts / 2) /
                (double)s->nodes[i].n_experts;
    uy[0] = uy[1] = s->total_routes ? half / (double)s->total_routes : 0;
    mp_svg_series series[2] = {
        {"training top half", x, y, n_seg, colors[0], false, true},
        {"uniform routing", ux, uy, 2, "#777", true, false},
    };
    mp_svg_chart c = {
        .id = mp_an_chart_ids[6],
        .title = "Drift: each order segment's routes served by the training top half",
        .x_label = "segment of the requests, in order",
        .y_label = "share of the segment's routes",
        .x_min = 0, .x_max = ux[1], .y_min = 0, .y_max = 1, .x_integer = true,
    };
    mp_svg_line_chart(f, &c, series, 2);
    return MP_OK;
}

/* The four per-request distributions as CDFs over requests, from their histograms. */
static mp_status requests(const mp_an_report *r, FILE *f)
{
    static const char *const names[4] = {"distinct-expert fraction", "normalized entropy",
                                         "share in history top half", "TV distance to history"};
    enum { STEP = 4, POINTS = MP_AN_HIST_BINS / STEP + 1 };
    double *buf = mp_fault_malloc(4 * 2 * POINTS * sizeof *buf);
    if (!buf)
        return MP_ERR_NOMEM;
    mp_svg_series series[4];
    int ns = 0;
    for (int m = 0; m < 4; m++) {
        if (!r->req->n[m])
            continue;
        double *x = buf + (size_t)ns * 2 * POINTS, *y = x + POINTS;
        uint64_t acc = 0;
        int n = 0;
        x[n] = 0, y[n++] = 0;
        for (int b = 0; b < MP_AN_HIST_BINS; b++) {
            acc += r->req->hist[m][b];
            if ((b + 1) % STEP == 0)
                x[n] = (double)(b + 1) / MP_AN_HIST_BINS, y[n++] = (double)acc / (double)r->req->n[m];
        }
        series[ns++] = (mp_svg_series){names[m], x, y, n, colors[m], false, false};
    }
    mp_svg_chart c = {
        .id = mp_an_chart_ids[7],
        .title = "Per request, against the requests before it (CDF over requests)",
        .x_label = "value", .y_label = "share of requests at or below",
        .x_min = 0, .x_max = 1, .y_min = 0, .y_max = 1,
    };
    mp_svg_line_chart(f, &c, series, ns);
    free(buf);
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
    } else {
        mp_status (*const draw[])(const mp_an_report *, FILE *) = {
            NULL, coverage, rank_threshold, heldout, locality, weight_reuse, drift, requests};
        st = draw[which](r, f);
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
