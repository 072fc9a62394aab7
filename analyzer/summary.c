/* analyzer/summary.c — derived statistics (see summary.h). Runs once, after the stream; cost is
 * O(n_nodes × E log E) plus O(n_nodes × E² × k) for the transition summaries. */
#include "analyzer/summary.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

int64_t mp_an_capacity(const double *coverage, int64_t n_experts, double target)
{
    for (int64_t n = 0; n <= n_experts; n++)
        if (coverage[n] >= target - 1e-12)
            return n;
    return n_experts;
}

/* cov[n] = share of sum(count) served by the experts order[0..n-1]. */
static void coverage_of(const uint64_t *count, const uint16_t *order, int64_t E, double *cov)
{
    uint64_t total = 0, acc = 0;
    for (int64_t e = 0; e < E; e++)
        total += count[e];
    cov[0] = 0;
    for (int64_t n = 1; n <= E; n++) {
        acc += count[order[n - 1]];
        cov[n] = total ? (double)acc / (double)total : 0;
    }
}

/* Share of the table's mass (rows a: top-1 here; columns: the top-1 that followed) that falls in
 * each row's k largest entries: how often "prefetch the k usual successors of the top-1" holds
 * the next top-1 expert. */
static double successor_pred(const uint32_t *tab, int64_t E, int64_t k)
{
    /* The k largest entries of each row, kept in a small descending list: only their sum is
     * used, so which of tied entries is kept does not matter. One pass over the row (most
     * entries lose against the list's last one), not k passes. */
    uint64_t total = 0, hit = 0;
    uint32_t top[MP_AN_MAX_TOPK]; /* (k) descending */
    if (k > E)
        k = E;
    for (int64_t a = 0; a < E; a++) {
        const uint32_t *row = tab + a * E;
        int64_t n = 0;
        for (int64_t b = 0; b < E; b++) {
            const uint32_t v = row[b];
            total += v;
            if (n == k && v <= top[k - 1])
                continue;
            int64_t i = n < k ? n++ : k - 1;
            for (; i > 0 && top[i - 1] < v; i--)
                top[i] = top[i - 1];
            top[i] = v;
        }
        for (int64_t j = 0; j < n; j++)
            hit += top[j];
    }
    return total ? (double)hit / (double)total : 0;
}

static void concentration(const uint64_t *count, const uint16_t *order, int64_t E,
                          mp_an_node_summary *ns)
{
    uint64_t total = 0;
    for (int64_t e = 0; e < E; e++)
        total += count[e];
    double h = 0, weighted = 0;
    for (int64_t e = 0; e < E; e++) {
        if (count[e]) {
            double p = (double)count[e] / (double)total;
            h -= p * log2(p);
        }
    }
    /* Gini over counts sorted ascending: G = 2·Σ i·c_i / (n·Σc) − (n+1)/n, i = 1..n */
    for (int64_t i = 0; i < E; i++)
        weighted += (double)(i + 1) * (double)count[order[E - 1 - i]];
    ns->entropy_bits = h;
    ns->entropy_norm = E > 1 ? h / log2((double)E) : 0;
    ns->gini = total ? 2.0 * weighted / ((double)E * (double)total) - (double)(E + 1) / (double)E
                     : 0;
}

/* Greedy global budget: (node, expert) pairs by descending gain = count (per byte when by_bytes),
 * the collector's ranking of cells. Within a node the gain order equals the count order, so this
 * is the exact greedy by marginal gain. flat ids: offset[node] + expert. */
static mp_status greedy(const mp_an_stats *s, bool train, bool by_bytes, uint32_t *flat_order, mp_error *err)
{
    double *unit = NULL;
    if (by_bytes) {
        if (!(unit = malloc((size_t)s->n_nodes * sizeof *unit)))
            return mp_fail(err, MP_ERR_NOMEM, "analyzer: out of memory while summarizing");
        for (int32_t i = 0; i < s->n_nodes; i++)
            unit[i] = (double)s->nodes[i].expert_bytes;
    }
    mp_status st = mp_popularity_rank_cells(train ? &s->pop_train : &s->pop, unit, flat_order, err);
    free(unit);
    return st;
}

static mp_an_pick flat_pick(const mp_an_stats *s, uint32_t flat)
{
    const int64_t *offset = s->pop.offset;
    int32_t i = 0;
    while ((int64_t)flat >= offset[i + 1])
        i++;
    return (mp_an_pick){i, (uint16_t)(flat - offset[i])};
}

static mp_status node_summary(const mp_an_stats *s, int32_t i, mp_an_node_summary *ns)
{
    const mp_an_node_acc *a = &s->acc[i];
    const int64_t E = s->nodes[i].n_experts, k = s->nodes[i].top_k;
    uint64_t *test = malloc((size_t)E * sizeof *test);
    uint16_t *test_order = malloc((size_t)E * sizeof *test_order);
    ns->order = malloc((size_t)E * sizeof *ns->order);
    ns->rank = malloc((size_t)E * sizeof *ns->rank);
    ns->train_order = malloc((size_t)E * sizeof *ns->train_order);
    ns->coverage = malloc((size_t)(E + 1) * sizeof(double));
    ns->cov_in_sample = malloc((size_t)(E + 1) * sizeof(double));
    ns->cov_heldout = malloc((size_t)(E + 1) * sizeof(double));
    ns->cov_oracle = malloc((size_t)(E + 1) * sizeof(double));
    if (!test || !test_order || !ns->order || !ns->rank || !ns->train_order || !ns->coverage ||
        !ns->cov_in_sample || !ns->cov_heldout || !ns->cov_oracle) {
        free(test), free(test_order);
        return MP_ERR_NOMEM;
    }
    mp_popularity_rank(a->count, E, ns->order, ns->rank);
    coverage_of(a->count, ns->order, E, ns->coverage);
    for (int t = 0; t < MP_AN_N_TARGETS; t++)
        ns->capacity[t] = mp_an_capacity(ns->coverage, E, mp_an_targets[t]);
    concentration(a->count, ns->order, E, ns);

    for (int64_t e = 0; e < E; e++)
        test[e] = a->count[e] - a->train_count[e];
    mp_popularity_rank(a->train_count, E, ns->train_order, NULL);
    mp_popularity_rank(test, E, test_order, NULL);
    coverage_of(a->train_count, ns->train_order, E, ns->cov_in_sample);
    coverage_of(test, ns->train_order, E, ns->cov_heldout);
    coverage_of(test, test_order, E, ns->cov_oracle);
    for (int seg = 0; seg < MP_AN_SEGMENTS; seg++) {
        uint64_t hit = 0;
        for (int64_t r = 0; r < E / 2; r++)
            hit += mp_popularity_node(&s->pop_seg[seg], i)[ns->train_order[r]];
        ns->seg_heldout_half[seg] = a->seg_routes[seg] ? (double)hit / (double)a->seg_routes[seg] : 0;
    }

    uint64_t reused = 0;
    for (int b = 0; b < MP_AN_LOG2_BUCKETS; b++)
        reused += a->reuse[b];
    ns->stay_frac = a->routes ? (double)a->reuse[0] / (double)a->routes : 0;
    (void)reused;
    ns->has_same_layer = a->same_layer != NULL;
    ns->has_next_layer = a->next_layer != NULL;
    ns->same_layer_pred = a->same_layer ? successor_pred(a->same_layer, E, k) : 0;
    ns->next_layer_pred = a->next_layer ? successor_pred(a->next_layer, E, s->nodes[i + 1].top_k) : 0;
    free(test), free(test_order);
    return MP_OK;
}

mp_status mp_an_summarize(const mp_an_stats *s, mp_an_summary *out, mp_error *err)
{
    mp_status st = MP_OK;
    memset(out, 0, sizeof *out);
    out->n_nodes = s->n_nodes;
    out->node = calloc((size_t)s->n_nodes, sizeof *out->node);
    if (!out->node)
        goto nomem;
    out->by_bytes = true;
    for (int32_t i = 0; i < s->n_nodes; i++) {
        if (node_summary(s, i, &out->node[i]) != MP_OK)
            goto nomem;
        if (s->nodes[i].expert_bytes <= 0)
            out->by_bytes = false;
        if (s->nodes[i].n_experts > out->max_experts)
            out->max_experts = s->nodes[i].n_experts;
        out->train_routes += s->acc[i].train_routes;
        out->heldout_routes += s->acc[i].routes - s->acc[i].train_routes;
    }
    const int64_t n = out->n_global = s->pop.offset[s->n_nodes];
    uint32_t *flat = malloc((size_t)n * sizeof *flat);
    out->global_order = malloc((size_t)n * sizeof *out->global_order);
    out->global_cov = malloc((size_t)(n + 1) * sizeof(double));
    out->global_bytes = malloc((size_t)(n + 1) * sizeof(uint64_t));
    out->global_in_sample = malloc((size_t)(n + 1) * sizeof(double));
    out->global_heldout = malloc((size_t)(n + 1) * sizeof(double));
    out->expert_count = calloc((size_t)out->max_experts, sizeof(uint64_t));
    out->expert_rank = malloc((size_t)out->max_experts * sizeof(int32_t));
    uint16_t *expert_order = malloc((size_t)out->max_experts * sizeof *expert_order);
    if (!flat || !out->global_order || !out->global_cov || !out->global_bytes ||
        !out->global_in_sample || !out->global_heldout || !out->expert_count ||
        !out->expert_rank || !expert_order) {
        free(flat), free(expert_order);
        goto nomem;
    }
    /* all requests: coverage and bytes along the greedy order */
    if ((st = greedy(s, false, out->by_bytes, flat, err))) {
        free(flat), free(expert_order);
        goto fail;
    }
    uint64_t acc = 0, bytes = 0;
    out->global_cov[0] = 0, out->global_bytes[0] = 0;
    for (int64_t p = 0; p < n; p++) {
        mp_an_pick pk = flat_pick(s, flat[p]);
        out->global_order[p] = pk;
        acc += s->acc[pk.node].count[pk.expert];
        bytes += (uint64_t)(s->nodes[pk.node].expert_bytes > 0 ? s->nodes[pk.node].expert_bytes : 0);
        out->global_cov[p + 1] = s->total_routes ? (double)acc / (double)s->total_routes : 0;
        out->global_bytes[p + 1] = bytes;
    }
    for (int t = 0; t < MP_AN_N_TARGETS; t++) {
        out->global_cap_experts[t] = mp_an_capacity(out->global_cov, n, mp_an_targets[t]);
        out->global_cap_bytes[t] = out->global_bytes[out->global_cap_experts[t]];
    }
    /* training counts: the same greedy, judged in-sample and on the held-out routes */
    if ((st = greedy(s, true, out->by_bytes, flat, err))) {
        free(flat), free(expert_order);
        goto fail;
    }
    uint64_t in = 0, out_acc = 0;
    out->global_in_sample[0] = out->global_heldout[0] = 0;
    for (int64_t p = 0; p < n; p++) {
        mp_an_pick pk = flat_pick(s, flat[p]);
        uint64_t c = s->acc[pk.node].count[pk.expert], tr = s->acc[pk.node].train_count[pk.expert];
        in += tr;
        out_acc += c - tr;
        out->global_in_sample[p + 1] = out->train_routes ? (double)in / (double)out->train_routes : 0;
        out->global_heldout[p + 1] =
            out->heldout_routes ? (double)out_acc / (double)out->heldout_routes : 0;
    }
    free(flat);
    /* drift over all nodes, and concentration means */
    for (int seg = 0; seg < MP_AN_SEGMENTS; seg++) {
        double hit = 0;
        uint64_t routes = 0;
        for (int32_t i = 0; i < s->n_nodes; i++) {
            hit += out->node[i].seg_heldout_half[seg] * (double)s->acc[i].seg_routes[seg];
            routes += s->acc[i].seg_routes[seg];
        }
        out->seg_routes[seg] = routes;
        out->seg_heldout_half[seg] = routes ? hit / (double)routes : 0;
    }
    for (int32_t i = 0; i < s->n_nodes; i++) {
        out->mean_entropy_norm += out->node[i].entropy_norm / s->n_nodes;
        out->mean_gini += out->node[i].gini / s->n_nodes;
        for (int64_t e = 0; e < s->nodes[i].n_experts; e++)
            out->expert_count[e] += s->acc[i].count[e];
    }
    mp_popularity_rank(out->expert_count, out->max_experts, expert_order, out->expert_rank);
    free(expert_order);
    /* identical routing: each node against the nodes before it (n_nodes² fingerprint compares) */
    for (int32_t i = 0; i < s->n_nodes; i++) {
        const mp_an_node_acc *a = &s->acc[i];
        out->node[i].same_routing_as = -1;
        for (int32_t j = 0; j < i && a->t > 0; j++) {
            const mp_an_node_acc *b = &s->acc[j];
            if (b->t == a->t && s->nodes[j].n_experts == s->nodes[i].n_experts &&
                s->nodes[j].top_k == s->nodes[i].top_k && b->route_print[0] == a->route_print[0] &&
                b->route_print[1] == a->route_print[1]) {
                /* point at the group's first node */
                out->node[i].same_routing_as = out->node[j].same_routing_as >= 0 ? out->node[j].same_routing_as : j;
                out->n_same_routing++;
                break;
            }
        }
    }
    return MP_OK;
nomem:
    st = mp_fail(err, MP_ERR_NOMEM, "analyzer: out of memory while summarizing");
fail:
    mp_an_summary_free(out);
    return st;
}

void mp_an_summary_free(mp_an_summary *sum)
{
    if (sum->node)
        for (int32_t i = 0; i < sum->n_nodes; i++) {
            mp_an_node_summary *ns = &sum->node[i];
            free(ns->order), free(ns->rank), free(ns->coverage), free(ns->train_order);
            free(ns->cov_in_sample), free(ns->cov_heldout), free(ns->cov_oracle);
        }
    free(sum->node);
    free(sum->global_order), free(sum->global_cov), free(sum->global_bytes);
    free(sum->global_in_sample), free(sum->global_heldout);
    free(sum->expert_count), free(sum->expert_rank);
    memset(sum, 0, sizeof *sum);
}
