/* tests/unit/test_analyzer_stats.c — the streaming statistics engine, row selection and the
 * derived summary, on small hand-made streams whose answers are worked out in the comments, and
 * on random streams checked against a naive recount (seed printed on failure). */
#include <criterion/criterion.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "analyzer/rows.h"
#include "analyzer/stats.h"
#include "analyzer/summary.h"

static mp_an_node node(int64_t index, int64_t E, int64_t k, int64_t bytes)
{
    mp_an_node n = {.node_index = index, .layer = index, .n_experts = E, .top_k = k,
                    .expert_bytes = bytes};
    snprintf(n.name, sizeof n.name, "blk.%lld", (long long)index);
    snprintf(n.type, sizeof n.type, "moe");
    return n;
}

static void init(mp_an_stats *s, const mp_an_node *nodes, int n, int64_t window)
{
    mp_error err;
    mp_an_config cfg = {.rows = MP_AN_ROWS_ALL, .reuse_window = window};
    cr_assert_eq(mp_an_stats_init(s, nodes, n, &cfg, &err), MP_OK, "%s", err.msg);
}

/* Feed n_rows rows of one node: ids (n_rows, k); weights all w. */
static void feed(mp_an_stats *s, int64_t req, int64_t step, int32_t nd, int phase, bool train,
                 const uint16_t *ids, int64_t n_rows, int64_t k, float w)
{
    float *ws = malloc((size_t)(n_rows * k) * sizeof *ws);
    for (int64_t i = 0; i < n_rows * k; i++)
        ws[i] = w;
    mp_an_record r = {.request_ord = req, .step = step, .node = nd, .phase = phase, .train = train,
                      .segment = 0, .n_rows = n_rows, .top_k = k, .expert_ids = ids, .weights = ws};
    mp_error err;
    cr_assert_eq(mp_an_stats_add(s, &r, &err), MP_OK, "%s", err.msg);
    free(ws);
}

Test(analyzer_stats, counts_ranks_ties_coverage_capacity)
{
    mp_an_node n = node(0, 4, 2, 1000);
    mp_an_stats s;
    init(&s, &n, 1, 8);
    /* rows [0,1] [1,2] [2,3] [1,3]: counts 0:1 1:3 2:2 3:2 */
    const uint16_t ids[] = {0, 1, 1, 2, 2, 3, 1, 3};
    feed(&s, 0, 0, 0, 0, true, ids, 4, 2, 0.5f);
    mp_an_stats_finish(&s);
    cr_assert_eq(s.acc[0].count[0], 1);
    cr_assert_eq(s.acc[0].count[1], 3);
    cr_assert_eq(s.acc[0].count[2], 2);
    cr_assert_eq(s.acc[0].count[3], 2);
    cr_assert_eq(s.total_routes, 8);
    mp_an_summary sum;
    mp_error err;
    cr_assert_eq(mp_an_summarize(&s, &sum, &err), MP_OK, "%s", err.msg);
    /* ranks: 1 first; 2 and 3 tie at 2 -> the lower id (2) ranks first; 0 last */
    cr_assert_eq(sum.node[0].rank[1], 0);
    cr_assert_eq(sum.node[0].rank[2], 1);
    cr_assert_eq(sum.node[0].rank[3], 2);
    cr_assert_eq(sum.node[0].rank[0], 3);
    const double want[5] = {0, 3.0 / 8, 5.0 / 8, 7.0 / 8, 1};
    for (int i = 0; i < 5; i++)
        cr_assert_float_eq(sum.node[0].coverage[i], want[i], 1e-12, "coverage[%d]", i);
    /* 50 % -> 2 experts (5/8), 80 % -> 3 (7/8), 90/95/99 % -> 4 */
    const int64_t cap[5] = {2, 3, 4, 4, 4};
    for (int t = 0; t < MP_AN_N_TARGETS; t++)
        cr_assert_eq(sum.node[0].capacity[t], cap[t], "target %g", mp_an_targets[t]);
    cr_assert_eq(sum.global_cap_bytes[0], 2000);
    mp_an_summary_free(&sum);
    mp_an_stats_free(&s);
}

Test(analyzer_stats, reuse_runs_and_weight_reuse)
{
    mp_an_node n = node(0, 4, 1, 0);
    mp_an_stats s;
    init(&s, &n, 1, 1);
    /* experts at t = 0..6: 0 0 1 0 0 0 2 (one row per step, weights 0.9 -> bin 18) */
    const uint16_t seq[7] = {0, 0, 1, 0, 0, 0, 2};
    for (int t = 0; t < 7; t++)
        feed(&s, 0, t, 0, 1, true, &seq[t], 1, 1, 0.9f);
    mp_an_stats_finish(&s);
    const mp_an_node_acc *a = &s.acc[0];
    /* cold: first uses of 0, 1, 2; distances: t1 d=1, t3 d=2, t4 d=1, t5 d=1 */
    cr_assert_eq(a->cold, 3);
    cr_assert_eq(a->reuse[0], 3);
    cr_assert_eq(a->reuse[1], 1);
    /* runs: 0 at t0-1 (2), 0 at t3-5 (3), 1 (1), 2 (1): lengths 1,1 in bucket 0; 2,3 in bucket 1 */
    cr_assert_eq(a->runs[0], 2);
    cr_assert_eq(a->runs[1], 2);
    /* window 1: t0 reused (t1), t1 not (next at t3), t3 t4 reused, t5 not (a whole window
     * followed), t2 not, t6 censored */
    cr_assert_eq(s.weight_routes[18], 6);
    cr_assert_eq(s.weight_reused[18], 3);
    cr_assert_eq(s.censored, 1);
    cr_assert_eq(s.slot_routes[0], 6);
    mp_an_summary sum;
    mp_error err;
    cr_assert_eq(mp_an_summarize(&s, &sum, &err), MP_OK, "%s", err.msg);
    cr_assert_float_eq(sum.node[0].stay_frac, 3.0 / 7, 1e-12);
    mp_an_summary_free(&sum);
    mp_an_stats_free(&s);
}

Test(analyzer_stats, transitions_same_layer_and_next_layer)
{
    mp_an_node nodes[2] = {node(0, 4, 1, 0), node(1, 4, 1, 0)};
    mp_an_stats s;
    init(&s, nodes, 2, 8);
    /* one prefill step of 4 rows: node 0 sees 0 1 0 2, node 1 sees 2 3 2 2 */
    const uint16_t n0[4] = {0, 1, 0, 2}, n1[4] = {2, 3, 2, 2};
    feed(&s, 0, 0, 0, 0, true, n0, 4, 1, 1.0f);
    feed(&s, 0, 0, 1, 0, true, n1, 4, 1, 1.0f);
    mp_an_stats_finish(&s);
    mp_an_summary sum;
    mp_error err;
    cr_assert_eq(mp_an_summarize(&s, &sum, &err), MP_OK, "%s", err.msg);
    /* node 0 same layer: 0->1, 1->0, 0->2: row 0 has {1:1, 2:1} (top-1 hits 1), row 1 {0:1}:
     * 2 of 3 */
    cr_assert_float_eq(sum.node[0].same_layer_pred, 2.0 / 3, 1e-12);
    /* next layer: 0->2, 1->3, 0->2, 2->2: every row's top successor takes all: 4 of 4 */
    cr_assert_float_eq(sum.node[0].next_layer_pred, 1.0, 1e-12);
    cr_assert(!sum.node[1].has_next_layer, "the last node has no next layer");
    /* node 1 same layer: 2->3, 3->2, 2->2: row 2 {3:1, 2:1} -> 1 hit; row 3 -> 1: 2 of 3 */
    cr_assert_float_eq(sum.node[1].same_layer_pred, 2.0 / 3, 1e-12);
    mp_an_summary_free(&sum);
    mp_an_stats_free(&s);
}

Test(analyzer_stats, transitions_do_not_cross_requests)
{
    mp_an_node n = node(0, 4, 1, 0);
    mp_an_stats s;
    init(&s, &n, 1, 8);
    const uint16_t a = 0, b = 1;
    feed(&s, 0, 0, 0, 0, true, &a, 1, 1, 1.0f);
    feed(&s, 1, 0, 0, 0, true, &b, 1, 1, 1.0f);
    cr_assert_eq(s.acc[0].same_layer_rows, 0);
    /* but reuse distance is measured across requests (a cache persists) */
    feed(&s, 2, 0, 0, 0, true, &a, 1, 1, 1.0f);
    cr_assert_eq(s.acc[0].reuse[1], 1, "distance 2 across requests");
    mp_an_stats_free(&s);
}

Test(analyzer_stats, generalization_prefix)
{
    mp_an_node n = node(0, 4, 1, 0);
    mp_an_stats s;
    init(&s, &n, 1, 8);
    /* request 0 (train): 0 0 0 1; request 1 (held out): 2 2 1 0 */
    const uint16_t r0[4] = {0, 0, 0, 1}, r1[4] = {2, 2, 1, 0};
    feed(&s, 0, 0, 0, 0, true, r0, 4, 1, 1.0f);
    feed(&s, 1, 0, 0, 0, false, r1, 4, 1, 1.0f);
    mp_an_stats_finish(&s);
    mp_an_summary sum;
    mp_error err;
    cr_assert_eq(mp_an_summarize(&s, &sum, &err), MP_OK, "%s", err.msg);
    const mp_an_node_summary *ns = &sum.node[0];
    /* training order 0, 1, 2, 3 */
    cr_assert_float_eq(ns->cov_in_sample[1], 0.75, 1e-12);
    cr_assert_float_eq(ns->cov_heldout[1], 0.25, 1e-12);
    cr_assert_float_eq(ns->cov_heldout[2], 0.50, 1e-12);
    cr_assert_float_eq(ns->cov_oracle[1], 0.50, 1e-12);
    cr_assert_eq(sum.train_routes, 4);
    cr_assert_eq(sum.heldout_routes, 4);
    cr_assert_float_eq(sum.global_heldout[1], 0.25, 1e-12);
    mp_an_summary_free(&sum);
    mp_an_stats_free(&s);
}

Test(analyzer_stats, entropy_and_gini)
{
    mp_an_node nodes[2] = {node(0, 4, 1, 0), node(1, 4, 1, 0)};
    mp_an_stats s;
    init(&s, nodes, 2, 8);
    const uint16_t uniform[4] = {0, 1, 2, 3}, one[4] = {2, 2, 2, 2};
    feed(&s, 0, 0, 0, 0, true, uniform, 4, 1, 1.0f);
    feed(&s, 0, 0, 1, 0, true, one, 4, 1, 1.0f);
    mp_an_stats_finish(&s);
    mp_an_summary sum;
    mp_error err;
    cr_assert_eq(mp_an_summarize(&s, &sum, &err), MP_OK, "%s", err.msg);
    cr_assert_float_eq(sum.node[0].entropy_bits, 2.0, 1e-12);
    cr_assert_float_eq(sum.node[0].entropy_norm, 1.0, 1e-12);
    cr_assert_float_eq(sum.node[0].gini, 0.0, 1e-12);
    cr_assert_float_eq(sum.node[1].entropy_bits, 0.0, 1e-12);
    cr_assert_float_eq(sum.node[1].gini, 0.75, 1e-12, "(n-1)/n for one expert of 4");
    mp_an_summary_free(&sum);
    mp_an_stats_free(&s);
}

Test(analyzer_stats, global_budget_greedy_per_byte)
{
    mp_an_node nodes[2] = {node(0, 2, 1, 100), node(1, 2, 1, 200)};
    mp_an_stats s;
    init(&s, nodes, 2, 8);
    /* node 0 counts [3, 1], node 1 counts [4, 0]: gains per byte .03 .01 | .02 0 */
    const uint16_t n0[4] = {0, 0, 0, 1}, n1[4] = {0, 0, 0, 0};
    feed(&s, 0, 0, 0, 0, true, n0, 4, 1, 1.0f);
    feed(&s, 0, 0, 1, 0, true, n1, 4, 1, 1.0f);
    mp_an_stats_finish(&s);
    mp_an_summary sum;
    mp_error err;
    cr_assert_eq(mp_an_summarize(&s, &sum, &err), MP_OK, "%s", err.msg);
    cr_assert(sum.by_bytes);
    const int32_t want_node[4] = {0, 1, 0, 1};
    const uint16_t want_expert[4] = {0, 0, 1, 1};
    const double want_cov[5] = {0, 3.0 / 8, 7.0 / 8, 1, 1};
    const uint64_t want_bytes[5] = {0, 100, 300, 400, 600};
    for (int p = 0; p < 4; p++) {
        cr_assert_eq(sum.global_order[p].node, want_node[p], "pick %d", p);
        cr_assert_eq(sum.global_order[p].expert, want_expert[p], "pick %d", p);
    }
    for (int p = 0; p < 5; p++) {
        cr_assert_float_eq(sum.global_cov[p], want_cov[p], 1e-12, "budget %d", p);
        cr_assert_eq(sum.global_bytes[p], want_bytes[p], "budget %d", p);
    }
    /* 50 % needs 2 picks (7/8) = 300 bytes */
    cr_assert_eq(sum.global_cap_experts[0], 2);
    cr_assert_eq(sum.global_cap_bytes[0], 300);
    /* global per expert id: id 0 = 3 + 4 */
    cr_assert_eq(sum.expert_count[0], 7);
    cr_assert_eq(sum.expert_rank[0], 0);
    mp_an_summary_free(&sum);
    mp_an_stats_free(&s);
}

/* ---- row selection ---- */

typedef struct collected {
    int n;
    int64_t req[64], step[64];
    int32_t node[64];
    uint16_t id[64];
} collected;

static mp_status collect(void *user, const mp_an_record *r, mp_error *err)
{
    collected *c = user;
    for (int64_t row = 0; row < r->n_rows; row++) {
        cr_assert_lt(c->n, 64);
        c->req[c->n] = r->request_ord;
        c->step[c->n] = r->step;
        c->node[c->n] = r->node;
        c->id[c->n] = r->expert_ids[row * r->top_k];
        c->n++;
    }
    return MP_OK;
}

/* Two nodes; request 0: prefill of 2 chunks (rows 10 11 | 12 13), decode 14; request 1: prefill
 * 20 21 22, decode 23, decode 24. Node 1's ids are node 0's + 30. */
static void run_rows(mp_an_rows mode, collected *c)
{
    mp_an_rowsel sel;
    mp_error err;
    memset(c, 0, sizeof *c);
    cr_assert_eq(mp_an_rowsel_init(&sel, mode, 2, collect, c, &err), MP_OK, "%s", err.msg);
    struct {
        int64_t req, step;
        int phase;
        int n;
        uint16_t ids[3];
    } steps[] = {
        {0, 0, 0, 2, {10, 11}}, {0, 1, 0, 2, {12, 13}}, {0, 2, 1, 1, {14}},
        {1, 0, 0, 3, {20, 21, 22}}, {1, 1, 1, 1, {23}}, {1, 2, 1, 1, {24}},
    };
    const float w[3] = {1, 1, 1};
    for (size_t i = 0; i < sizeof steps / sizeof steps[0]; i++)
        for (int nd = 0; nd < 2; nd++) {
            uint16_t ids[3];
            for (int j = 0; j < steps[i].n; j++)
                ids[j] = (uint16_t)(steps[i].ids[j] + 30 * nd);
            mp_an_record r = {.request_ord = steps[i].req, .step = steps[i].step, .node = nd,
                              .phase = steps[i].phase, .n_rows = steps[i].n, .top_k = 1,
                              .expert_ids = ids, .weights = w};
            cr_assert_eq(mp_an_rowsel_add(&sel, &r, &err), MP_OK, "%s", err.msg);
        }
    cr_assert_eq(mp_an_rowsel_flush(&sel, &err), MP_OK, "%s", err.msg);
    mp_an_rowsel_free(&sel);
}

Test(analyzer_rows, all_decode_final)
{
    collected c;
    run_rows(MP_AN_ROWS_ALL, &c);
    cr_assert_eq(c.n, 2 * 10);
    run_rows(MP_AN_ROWS_DECODE, &c);
    const uint16_t dec[] = {14, 44, 23, 53, 24, 54};
    cr_assert_eq(c.n, 6);
    for (int i = 0; i < 6; i++)
        cr_assert_eq(c.id[i], dec[i], "decode row %d", i);
    /* final: last row of the last prefill chunk (13, then 22), in node order, then decode rows */
    run_rows(MP_AN_ROWS_FINAL, &c);
    const uint16_t fin[] = {13, 43, 14, 44, 22, 52, 23, 53, 24, 54};
    const int32_t fin_node[] = {0, 1, 0, 1, 0, 1, 0, 1, 0, 1};
    cr_assert_eq(c.n, 10);
    for (int i = 0; i < 10; i++) {
        cr_assert_eq(c.id[i], fin[i], "final row %d: id %d", i, c.id[i]);
        cr_assert_eq(c.node[i], fin_node[i], "final row %d", i);
    }
    cr_assert_eq(c.step[0], 1, "the held row keeps its step");
}

Test(analyzer_rows, final_with_prefill_only_request)
{
    /* a request with no decode step still contributes its last prefill row (flushed at the end) */
    mp_an_rowsel sel;
    mp_error err;
    collected c;
    memset(&c, 0, sizeof c);
    cr_assert_eq(mp_an_rowsel_init(&sel, MP_AN_ROWS_FINAL, 1, collect, &c, &err), MP_OK);
    const uint16_t ids[3] = {1, 2, 3};
    const float w[3] = {1, 1, 1};
    mp_an_record r = {.request_ord = 0, .step = 0, .node = 0, .phase = 0, .n_rows = 3,
                      .top_k = 1, .expert_ids = ids, .weights = w};
    cr_assert_eq(mp_an_rowsel_add(&sel, &r, &err), MP_OK);
    r.request_ord = 1;
    cr_assert_eq(mp_an_rowsel_add(&sel, &r, &err), MP_OK);
    cr_assert_eq(c.n, 1, "request 0's last row is released by request 1's prefill");
    cr_assert_eq(mp_an_rowsel_flush(&sel, &err), MP_OK);
    cr_assert_eq(c.n, 2);
    cr_assert_eq(c.id[0], 3);
    cr_assert_eq(c.id[1], 3);
    cr_assert_eq(c.req[1], 1);
    mp_an_rowsel_free(&sel);
}

/* ---- random streams against a naive recount ---- */

Test(analyzer_stats, random_stream_matches_naive_recount)
{
    const unsigned seed = (unsigned)time(NULL);
    srand(seed);
    enum { NODES = 3, E = 16, K = 4, STEPS = 200 };
    mp_an_node nodes[NODES];
    for (int i = 0; i < NODES; i++)
        nodes[i] = node(i, E, K, 1000 * (i + 1));
    mp_an_stats s;
    init(&s, nodes, NODES, 4);
    static uint64_t naive[NODES][E];
    static int64_t last[NODES][E];
    static uint64_t naive_reuse[NODES][MP_AN_LOG2_BUCKETS];
    memset(naive, 0, sizeof naive);
    memset(naive_reuse, 0, sizeof naive_reuse);
    memset(last, 0xff, sizeof last);
    int64_t t[NODES] = {0};
    for (int step = 0; step < STEPS; step++) {
        const int rows = 1 + rand() % 5;
        for (int nd = 0; nd < NODES; nd++) {
            uint16_t ids[5 * K];
            float w[5 * K];
            for (int r = 0; r < rows; r++) {
                /* k distinct ids, skewed towards low ids */
                int used = 0;
                while (used < K) {
                    uint16_t e = (uint16_t)((rand() % E) * (rand() % E) / E);
                    bool dup = false;
                    for (int j = 0; j < used; j++)
                        dup |= ids[r * K + j] == e;
                    if (dup)
                        continue;
                    ids[r * K + used] = e;
                    w[r * K + used] = (float)rand() / (float)RAND_MAX;
                    naive[nd][e]++;
                    if (last[nd][e] >= 0)
                        naive_reuse[nd][mp_an_log2_bucket((uint64_t)(t[nd] - last[nd][e]))]++;
                    last[nd][e] = t[nd];
                    used++;
                }
                t[nd]++;
            }
            mp_an_record rec = {.request_ord = step / 20, .step = step % 20, .node = nd,
                                .phase = step % 20 == 0 ? 0 : 1, .train = step < 100,
                                .segment = step * MP_AN_SEGMENTS / STEPS, .n_rows = rows,
                                .top_k = K, .expert_ids = ids, .weights = w};
            mp_error err;
            cr_assert_eq(mp_an_stats_add(&s, &rec, &err), MP_OK, "%s", err.msg);
        }
    }
    mp_an_stats_finish(&s);
    mp_an_summary sum;
    mp_error err;
    cr_assert_eq(mp_an_summarize(&s, &sum, &err), MP_OK, "%s", err.msg);
    uint64_t total = 0;
    for (int nd = 0; nd < NODES; nd++) {
        for (int e = 0; e < E; e++) {
            cr_assert_eq(s.acc[nd].count[e], naive[nd][e], "seed %u: node %d expert %d", seed, nd, e);
            total += naive[nd][e];
        }
        for (int b = 0; b < MP_AN_LOG2_BUCKETS; b++)
            cr_assert_eq(s.acc[nd].reuse[b], naive_reuse[nd][b], "seed %u: reuse bucket %d", seed, b);
        const mp_an_node_summary *ns = &sum.node[nd];
        bool seen[E] = {false};
        for (int r = 0; r < E; r++) {
            cr_assert(!seen[ns->order[r]], "seed %u: order is a permutation", seed);
            seen[ns->order[r]] = true;
            cr_assert_eq(ns->rank[ns->order[r]], r, "seed %u", seed);
            if (r > 0) {
                const uint64_t a = naive[nd][ns->order[r - 1]], b = naive[nd][ns->order[r]];
                cr_assert(a > b || (a == b && ns->order[r - 1] < ns->order[r]),
                          "seed %u: node %d rank %d out of order", seed, nd, r);
            }
            cr_assert_geq(ns->coverage[r + 1], ns->coverage[r], "seed %u: monotone", seed);
        }
        cr_assert_float_eq(ns->coverage[E], 1.0, 1e-12, "seed %u", seed);
    }
    cr_assert_eq(s.total_routes, total, "seed %u", seed);
    /* every route is resolved exactly once for weight-vs-reuse, or censored */
    uint64_t resolved = s.censored;
    for (int b = 0; b < MP_AN_WEIGHT_BINS; b++)
        resolved += s.weight_routes[b];
    cr_assert_eq(resolved, total, "seed %u: %llu resolved of %llu", seed,
                 (unsigned long long)resolved, (unsigned long long)total);
    cr_assert_float_eq(sum.global_cov[sum.n_global], 1.0, 1e-12, "seed %u", seed);
    for (int64_t p = 0; p < sum.n_global; p++)
        cr_assert_geq(sum.global_cov[p + 1], sum.global_cov[p], "seed %u", seed);
    mp_an_summary_free(&sum);
    mp_an_stats_free(&s);
}

Test(analyzer_stats, transitions_follow_the_highest_weight)
{
    mp_an_node n = node(0, 4, 2, 0);
    mp_an_stats s;
    init(&s, &n, 1, 8);
    /* top-1 is the slot of highest weight, not slot 0: rows' top-1 are 1, 2, 1 */
    const uint16_t ids[6] = {0, 1, 2, 3, 1, 2};
    const float w[6] = {0.3f, 0.7f, 0.9f, 0.1f, 0.6f, 0.4f};
    mp_an_record r = {.request_ord = 0, .step = 0, .node = 0, .phase = 0, .train = true,
                      .n_rows = 3, .top_k = 2, .expert_ids = ids, .weights = w};
    mp_error err;
    cr_assert_eq(mp_an_stats_add(&s, &r, &err), MP_OK, "%s", err.msg);
    mp_an_stats_finish(&s); /* transition increments are deferred until then */
    cr_assert_eq(s.acc[0].same_layer[1 * 4 + 2], 1);
    cr_assert_eq(s.acc[0].same_layer[2 * 4 + 1], 1);
    cr_assert_eq(s.acc[0].same_layer_rows, 2);
    mp_an_stats_free(&s);
}

/* ---- chart axes and size labels (base/svg.h) ---- */
#include "base/svg.h"

Test(svg, ticks_are_round_1_2_5_steps)
{
    double t[16];
    /* 0..1600 experts: 8 ticks at most -> step 500 (200 would need 9) */
    int n = mp_svg_ticks(0, 1600, true, false, t, 8);
    cr_assert_eq(n, 4);
    for (int i = 0; i < n; i++)
        cr_assert_float_eq(t[i], 500.0 * i, 1e-9);
    /* 64 experts split in 5 would be 12.8: the 1-2-5 step is 10 */
    n = mp_svg_ticks(0, 64, true, false, t, 8);
    cr_assert_eq(n, 7);
    cr_assert_float_eq(t[1], 10, 1e-9);
    cr_assert_float_eq(t[6], 60, 1e-9);
    /* an integer axis never ticks between whole numbers: 0..3 -> 0 1 2 3 */
    n = mp_svg_ticks(0, 3, true, false, t, 8);
    cr_assert_eq(n, 4);
    cr_assert_float_eq(t[3], 3, 1e-9);
    /* shares: 0 0.2 .. 1, and never a negative zero */
    n = mp_svg_ticks(0, 1, false, false, t, 7);
    cr_assert_eq(n, 6);
    cr_assert_float_eq(t[1], 0.2, 1e-12);
    cr_assert(!signbit(t[0]));
    /* bytes: round in the unit of the top value: 0..100 MiB -> steps of 20 MiB */
    n = mp_svg_ticks(0, 100.0 * 1048576, false, true, t, 8);
    cr_assert_eq(n, 6);
    cr_assert_float_eq(t[1], 20.0 * 1048576, 1e-3);
    char buf[64];
    mp_svg_bytes(buf, sizeof buf, t[1]);
    cr_assert_str_eq(buf, "20 MiB");
}

Test(svg, byte_sizes_keep_their_integer_digits)
{
    char buf[64];
    mp_svg_bytes(buf, sizeof buf, 1000.0 * 1048576); /* %.3g alone would print 1e+03 */
    cr_assert_str_eq(buf, "1000 MiB");
    mp_svg_bytes(buf, sizeof buf, 1536);
    cr_assert_str_eq(buf, "1.5 KiB");
    mp_svg_bytes(buf, sizeof buf, 512);
    cr_assert_str_eq(buf, "512 B");
}

Test(svg, budget_labels_are_distinct_and_right)
{
    char l[4][32];
    /* the tiny model's budgets: a few MiB, where "%.2f GiB" printed 0.00 for all */
    const double small[3] = {1000000, 4000000, 9000000};
    mp_svg_bytes_labels(&l[0][0], sizeof l[0], small, 3);
    cr_assert_str_eq(l[0], "977 KiB"); /* 1e6 / 1024 = 976.56 */
    cr_assert_str_eq(l[1], "3.81 MiB"); /* 4e6 / 2^20 = 3.815 */
    cr_assert_str_eq(l[2], "8.58 MiB"); /* 9e6 / 2^20 = 8.583 */
    /* close budgets get more digits until they differ: 8 GiB and 8 GiB + 10 MiB */
    const double close[2] = {8.0 * 1073741824, 8.0 * 1073741824 + 10.0 * 1048576};
    mp_svg_bytes_labels(&l[0][0], sizeof l[0], close, 2);
    cr_assert_str_eq(l[0], "8 GiB");
    cr_assert_str_eq(l[1], "8.01 GiB"); /* 8.0098 */
    /* budgets one byte apart: exact bytes */
    const double bytes[2] = {4000000, 4000001};
    mp_svg_bytes_labels(&l[0][0], sizeof l[0], bytes, 2);
    cr_assert_neq(strcmp(l[0], l[1]), 0, "%s = %s", l[0], l[1]);
}

/* Identical routing: nodes that chose the same set of experts for every token. Six nodes see the
 * same 2 requests x 3 steps x 3 rows; the expectation is recomputed naively, row by row, from
 * the id arrays (sets compared, slot order ignored). */
Test(analyzer_stats, identical_routing_is_flagged_and_only_then)
{
    enum { NN = 6, E = 8, K = 2, ROWS = 3, REQ = 2, STEPS = 3, N_ROWS = REQ * STEPS * ROWS };
    mp_an_node nodes[NN];
    for (int i = 0; i < NN; i++)
        nodes[i] = node(i, E, K, 100);
    uint16_t ids[NN][N_ROWS][K];
    for (int row = 0; row < N_ROWS; row++) {
        const int a = (row * 3 + (row / ROWS) * 5) % E, b = (a + 1 + row % 3) % E;
        ids[0][row][0] = (uint16_t)a, ids[0][row][1] = (uint16_t)b;
        ids[1][row][0] = (uint16_t)b, ids[1][row][1] = (uint16_t)a;             /* slots swapped: same */
        ids[2][row][0] = (uint16_t)a, ids[2][row][1] = (uint16_t)b;             /* one row differs */
        ids[3][row][0] = (uint16_t)((a + 1) % E), ids[3][row][1] = (uint16_t)((b + 1) % E); /* relabelled */
        ids[4][row][0] = (uint16_t)a, ids[4][row][1] = (uint16_t)b;             /* exact copy */
        const int other = row % ROWS == 0 ? row + 1 : row % ROWS == 1 ? row - 1 : row; /* tokens swapped */
        const int oa = (other * 3 + (other / ROWS) * 5) % E, ob = (oa + 1 + other % 3) % E;
        ids[5][row][0] = (uint16_t)oa, ids[5][row][1] = (uint16_t)ob;
    }
    /* the last row of node 2: a different second expert */
    ids[2][N_ROWS - 1][1] = (uint16_t)((ids[2][N_ROWS - 1][1] + 1) % E == ids[2][N_ROWS - 1][0]
                                           ? (ids[2][N_ROWS - 1][1] + 2) % E
                                           : (ids[2][N_ROWS - 1][1] + 1) % E);
    mp_an_stats s;
    init(&s, nodes, NN, 8);
    for (int req = 0; req < REQ; req++)
        for (int step = 0; step < STEPS; step++)
            for (int nd = 0; nd < NN; nd++)
                feed(&s, req, step, nd, step ? 1 : 0, req == 0, &ids[nd][(req * STEPS + step) * ROWS][0],
                     ROWS, K, 0.5f);
    mp_an_stats_finish(&s);
    mp_an_summary sum;
    mp_error err;
    cr_assert_eq(mp_an_summarize(&s, &sum, &err), MP_OK, "%s", err.msg);
    /* naive: the first earlier node whose every row holds the same two experts */
    int flagged = 0;
    for (int i = 0; i < NN; i++) {
        int want = -1;
        for (int j = 0; j < i && want < 0; j++) {
            bool same = true;
            for (int row = 0; row < N_ROWS && same; row++)
                same = (ids[i][row][0] == ids[j][row][0] && ids[i][row][1] == ids[j][row][1]) ||
                       (ids[i][row][0] == ids[j][row][1] && ids[i][row][1] == ids[j][row][0]);
            if (same)
                want = j;
        }
        flagged += want >= 0;
        cr_assert_eq(sum.node[i].same_routing_as, want, "node %d: %d, expected %d", i,
                     sum.node[i].same_routing_as, want);
    }
    /* what the cases are: 1 and 4 repeat node 0; 2 (one row), 3 (relabelled), 5 (tokens
     * swapped within steps) do not */
    cr_assert_eq(flagged, 2);
    cr_assert_eq(sum.node[1].same_routing_as, 0);
    cr_assert_eq(sum.node[4].same_routing_as, 0);
    cr_assert_eq(sum.n_same_routing, 2);
    mp_an_summary_free(&sum);
    mp_an_stats_free(&s);
}
