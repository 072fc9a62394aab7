/* analyzer/stats.c — the streaming accumulators of analyzer/stats.h.
 *
 * Everything here is O(1) per route except the transition tables (O(top_k) per row) and the
 * top-1 search (O(top_k) per row). Memory is fixed at init except the next-layer window, which
 * grows to the largest step seen (a bounded, per-step quantity).
 */
#include "analyzer/stats.h"

#include <stdlib.h>
#include <string.h>

const double mp_an_targets[MP_AN_N_TARGETS] = {0.50, 0.80, 0.90, 0.95, 0.99};

const char *mp_an_rows_name(mp_an_rows rows)
{
    switch (rows) {
    case MP_AN_ROWS_ALL: return "all";
    case MP_AN_ROWS_DECODE: return "decode";
    case MP_AN_ROWS_FINAL: return "final";
    }
    return "?";
}

static inline int weight_bin(float w)
{
    const int b = (int)(w * MP_AN_WEIGHT_BINS); /* w >= 0: validated */
    return b < MP_AN_WEIGHT_BINS ? b : MP_AN_WEIGHT_BINS - 1;
}

mp_status mp_an_stats_init(mp_an_stats *s, const mp_an_node *nodes, int32_t n_nodes,
                           const mp_an_config *cfg, mp_error *err)
{
    memset(s, 0, sizeof *s);
    s->cfg = *cfg;
    s->n_nodes = n_nodes;
    s->last_request = -1;
    s->prev_node = -1;
    if (n_nodes <= 0)
        return mp_fail(err, MP_ERR_ARG, "analyzer: the trace has no MoE nodes");
    for (int32_t i = 0; i < n_nodes; i++)
        if (nodes[i].n_experts < 1 || nodes[i].n_experts > 65536 || nodes[i].top_k < 1 ||
            nodes[i].top_k > MP_AN_MAX_TOPK || nodes[i].top_k > nodes[i].n_experts)
            return mp_fail(err, MP_ERR_UNSUPPORTED,
                           "analyzer: node %lld: %lld experts, top-%lld (supported: 1..65536 "
                           "experts, top-k 1..%d)",
                           (long long)nodes[i].node_index, (long long)nodes[i].n_experts,
                           (long long)nodes[i].top_k, MP_AN_MAX_TOPK);
    s->nodes = calloc((size_t)n_nodes, sizeof *s->nodes);
    s->acc = calloc((size_t)n_nodes, sizeof *s->acc);
    int64_t *n_experts = malloc((size_t)n_nodes * sizeof *n_experts);
    if (!s->nodes || !s->acc || !n_experts) {
        free(n_experts);
        goto nomem;
    }
    memcpy(s->nodes, nodes, (size_t)n_nodes * sizeof *nodes);
    for (int32_t i = 0; i < n_nodes; i++)
        n_experts[i] = nodes[i].n_experts;
    mp_status st = mp_popularity_init(&s->pop, n_nodes, n_experts, err);
    if (!st)
        st = mp_popularity_init(&s->pop_train, n_nodes, n_experts, err);
    for (int seg = 0; !st && seg < MP_AN_SEGMENTS; seg++)
        st = mp_popularity_init(&s->pop_seg[seg], n_nodes, n_experts, err);
    free(n_experts);
    if (st) {
        mp_an_stats_free(s);
        return st;
    }
    for (int32_t i = 0; i < n_nodes; i++) {
        size_t E = (size_t)nodes[i].n_experts;
        mp_an_node_acc *a = &s->acc[i];
        a->count = mp_popularity_node(&s->pop, i);
        a->train_count = mp_popularity_node(&s->pop_train, i);
        a->use = calloc(E, sizeof *a->use);
        if (!a->use)
            goto nomem;
        for (size_t e = 0; e < E; e++)
            a->use[e].last_t = -1;
        if (E <= MP_AN_TRANSITION_MAX_EXPERTS) {
            a->same_layer = calloc(E * E, sizeof *a->same_layer);
            if (!a->same_layer)
                goto nomem;
            bool next_same_shape = i + 1 < n_nodes && nodes[i + 1].n_experts == (int64_t)E;
            if (next_same_shape && !(a->next_layer = calloc(E * E, sizeof *a->next_layer)))
                goto nomem;
        }
        a->prev_top1 = -1;
        a->prev_request = -1;
    }
    return MP_OK;
nomem:
    mp_an_stats_free(s);
    return mp_fail(err, MP_ERR_NOMEM, "analyzer: out of memory for %d nodes' statistics", n_nodes);
}

void mp_an_stats_free(mp_an_stats *s)
{
    if (s->acc)
        for (int32_t i = 0; i < s->n_nodes; i++) {
            mp_an_node_acc *a = &s->acc[i];
            free(a->use), free(a->same_layer), free(a->next_layer);
        }
    mp_popularity_free(&s->pop);
    mp_popularity_free(&s->pop_train);
    for (int seg = 0; seg < MP_AN_SEGMENTS; seg++)
        mp_popularity_free(&s->pop_seg[seg]);
    free(s->acc);
    free(s->nodes);
    free(s->prev_top1);
    memset(s, 0, sizeof *s);
}

static inline void bump_later(mp_an_stats *s, uint32_t *cell)
{
    __builtin_prefetch(cell, 1);
    uint32_t *due = s->pending[s->pending_at];
    s->pending[s->pending_at] = cell;
    s->pending_at = (s->pending_at + 1) & (MP_AN_PENDING - 1);
    if (due)
        (*due)++;
}

static inline int row_top1(const uint16_t *ids, const float *w, int64_t k)
{
    int64_t best = 0;
    for (int64_t j = 1; j < k; j++)
        if (w[j] > w[best])
            best = j;
    return ids[best];
}

mp_status mp_an_stats_add(mp_an_stats *s, const mp_an_record *r, mp_error *err)
{
    mp_an_node_acc *a = &s->acc[r->node];
    const int64_t E = s->nodes[r->node].n_experts, k = r->top_k;
    const int64_t window = s->cfg.reuse_window;
    const bool pair_next = s->prev_node == r->node - 1 && s->prev_req == r->request_ord &&
                           s->prev_step == r->step && s->prev_rows == r->n_rows &&
                           s->acc[s->prev_node].next_layer != NULL;
    uint32_t *next_tab = pair_next ? s->acc[s->prev_node].next_layer : NULL;

    if (r->request_ord != s->last_request) {
        s->last_request = r->request_ord;
        s->n_requests_seen++;
    }
    if (a->prev_request != r->request_ord)
        a->prev_top1 = -1; /* transitions never cross a request boundary */
    /* the next node pairs with this record's rows: make room for their top-1 ids */
    if (r->n_rows > s->prev_cap) {
        uint16_t *p = realloc(s->prev_top1, (size_t)r->n_rows * sizeof *p);
        if (!p)
            return mp_fail(err, MP_ERR_NOMEM, "analyzer: out of memory for a step of %lld rows",
                           (long long)r->n_rows);
        s->prev_top1 = p;
        s->prev_cap = r->n_rows;
    }

    const uint64_t routes = (uint64_t)(r->n_rows * k);
    mp_popularity_add(&s->pop, r->node, r->expert_ids, routes);
    mp_popularity_add(&s->pop_seg[r->segment], r->node, r->expert_ids, routes);
    if (r->train)
        mp_popularity_add(&s->pop_train, r->node, r->expert_ids, routes);
    /* Hot loop: where the analyzer's time goes, one iteration per routing decision. */
    for (int64_t row = 0; row < r->n_rows; row++) {
        const uint16_t *ids = r->expert_ids + row * k;
        const float *w = r->weights + row * k;
        const int64_t t = a->t;
        /* transitions count top-1 -> top-1: one table update per row, not k (the tables are
         * bigger than the caches). The cells are prefetched now and incremented a few records
         * later (bump_later), so their cache misses never stall the loop. */
        const int top1 = row_top1(ids, w, k);
        if (a->same_layer && a->prev_top1 >= 0) {
            bump_later(s, &a->same_layer[(size_t)a->prev_top1 * (size_t)E + (size_t)top1]);
            a->same_layer_rows++;
        }
        if (next_tab) {
            bump_later(s, &next_tab[(size_t)s->prev_top1[row] * (size_t)E + (size_t)top1]);
            s->acc[s->prev_node].next_layer_rows++;
        }
        uint64_t set0 = 0, set1 = 0; /* order-free hashes of the row's expert set */
        for (int64_t j = 0; j < k; j++) {
            const uint16_t e = ids[j];
            set0 += mp_an_mix64(e + 1);
            set1 += mp_an_mix64(e + 0x9e3779b97f4a7c15ULL);
            mp_an_expert_use *u = &a->use[e];
            const int64_t last = u->last_t;
            if (last < 0) {
                a->cold++;
                u->run_start = t;
            } else {
                const int64_t d = t - last;
                a->reuse[mp_an_log2_bucket((uint64_t)d)]++;
                /* the previous use of e is now resolved: reused within the window or not */
                const uint64_t reused = d <= window;
                s->weight_routes[u->wbin]++;
                s->weight_reused[u->wbin] += reused;
                s->slot_routes[u->slot]++;
                s->slot_reused[u->slot] += reused;
                if (d != 1) {
                    a->runs[mp_an_log2_bucket((uint64_t)(last - u->run_start + 1))]++;
                    u->run_start = t;
                }
            }
            u->last_t = t;
            u->wbin = (uint8_t)weight_bin(w[j]);
            u->slot = (uint8_t)j;
        }
        a->route_print[0] = mp_an_mix64(a->route_print[0] ^ set0);
        a->route_print[1] = mp_an_mix64(a->route_print[1] + set1 * 0xd6e8feb86659fd93ULL);
        s->prev_top1[row] = (uint16_t)top1;
        a->prev_top1 = top1;
        a->t++;
    }
    a->prev_request = r->request_ord;
    a->routes += routes;
    a->seg_routes[r->segment] += routes;
    if (r->train)
        a->train_routes += routes;
    s->total_routes += routes;
    s->total_rows += (uint64_t)r->n_rows;
    s->prev_node = r->node;
    s->prev_req = r->request_ord;
    s->prev_step = r->step;
    s->prev_rows = r->n_rows;
    return MP_OK;
}

void mp_an_stats_finish(mp_an_stats *s)
{
    if (s->finished)
        return;
    s->finished = true;
    for (int i = 0; i < MP_AN_PENDING; i++)
        if (s->pending[i]) {
            (*s->pending[i])++;
            s->pending[i] = NULL;
        }
    for (int32_t i = 0; i < s->n_nodes; i++) {
        mp_an_node_acc *a = &s->acc[i];
        for (int64_t e = 0; e < s->nodes[i].n_experts; e++) {
            const mp_an_expert_use *u = &a->use[e];
            const int64_t last = u->last_t;
            if (last < 0)
                continue;
            a->runs[mp_an_log2_bucket((uint64_t)(last - u->run_start + 1))]++;
            /* a last use is "not reused" only if a whole window of tokens followed it */
            if (a->t - 1 - last >= s->cfg.reuse_window) {
                s->weight_routes[u->wbin]++;
                s->slot_routes[u->slot]++;
            } else {
                s->censored++;
            }
        }
    }
}

/* ---- drift segments and per-request distributions (stats.h) ---- */

int32_t mp_an_n_segments(int64_t n_requests)
{
    return (int32_t)(n_requests < MP_AN_SEGMENTS ? (n_requests > 0 ? n_requests : 1) : MP_AN_SEGMENTS);
}

int32_t mp_an_segment_of(int64_t ord, int64_t n_requests)
{
    const int32_t n_seg = mp_an_n_segments(n_requests);
    int64_t s = ord * n_seg / (n_requests > 0 ? n_requests : 1);
    return (int32_t)(s < n_seg ? s : n_seg - 1);
}

double mp_an_hist_quantile(const uint32_t *hist, int64_t n, double q)
{
    if (n <= 0)
        return 0;
    const double want = q * (double)n;
    double acc = 0;
    for (int b = 0; b < MP_AN_HIST_BINS; b++) {
        acc += hist[b];
        if (acc >= want)
            return (b + 0.5) / MP_AN_HIST_BINS;
    }
    return 1;
}
