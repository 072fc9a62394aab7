/* analyzer/stats.h — the streaming statistics engine of `moeplan analyze`.
 *
 * The engine is fed routing records one at a time, in trace order (request by request, step by
 * step, node by node), after validation and row selection (analyzer/rows.h). It never holds a
 * record after the call returns; everything it keeps is bounded by n_nodes × n_experts (counts,
 * last-use tables), n_nodes × n_experts² for the two transition tables (only where n_experts is at
 * most MP_AN_TRANSITION_MAX_EXPERTS), and one previous step's ids (the next-layer window). Trace
 * length never grows the engine.
 *
 * Conventions:
 *  - A node is addressed by its position in the node table (0 .. n_nodes-1), ordered by
 *    node_index; `layer` is the node's transformer block.
 *  - A "route" (routing decision) is one (token row, node, k-slot): n_rows × top_k per record.
 *  - "Token time" t of a node counts the rows fed to that node so far (0-based); reuse distance
 *    is measured in it, across request boundaries (an expert cache persists across requests).
 *  - Ranks are zero-based, by descending count, ties broken towards the lower expert id.
 */
#ifndef MP_ANALYZER_STATS_H
#define MP_ANALYZER_STATS_H

#include <stdbool.h>
#include <stdint.h>

#include "collector/popularity.h"
#include "collector/trace_check.h"
#include "base/error.h"

#define MP_AN_SEGMENTS 10       /* requests are cut into this many order segments (drift) */
#define MP_AN_LOG2_BUCKETS 40   /* histograms of distances/lengths: bucket b holds [2^b, 2^(b+1)) */
#define MP_AN_WEIGHT_BINS 20    /* router weight histogram over [0, 1], last bin includes 1 */
#define MP_AN_MAX_TOPK MP_TRACE_MAX_TOPK /* the trace checker refuses more */
#define MP_AN_TRANSITION_MAX_EXPERTS 256 /* transition tables are n_nodes × E² u32 counts */
#define MP_AN_N_TARGETS 5
#define MP_AN_PENDING 32        /* transition increments in flight (power of two) */
extern const double mp_an_targets[MP_AN_N_TARGETS]; /* 0.50 0.80 0.90 0.95 0.99 coverage */

typedef enum mp_an_rows {
    MP_AN_ROWS_ALL = 0,    /* every row of every step (default) */
    MP_AN_ROWS_DECODE = 1, /* decode steps only */
    MP_AN_ROWS_FINAL = 2,  /* onnxruntime's semantics: last row of the prefill + decode rows */
} mp_an_rows;

const char *mp_an_rows_name(mp_an_rows rows);

typedef struct mp_an_node {
    int64_t node_index;   /* the trace's node_index */
    int64_t layer;        /* transformer block */
    int64_t n_experts;    /* N, <= 65536 */
    int64_t top_k;        /* <= MP_AN_MAX_TOPK */
    int64_t expert_bytes; /* bytes of one expert; 0 when unknown (byte columns are then 0) */
    char type[64];
    char name[128];
} mp_an_node;

typedef struct mp_an_record {
    int64_t request_ord; /* order of the request in the merged traces: 0, 1, 2, ... */
    int64_t step;        /* step within the request */
    int32_t node;        /* position in the node table */
    int32_t phase;       /* mp_phase: 0 prefill, 1 decode */
    bool train;          /* the request belongs to the training set (generalization) */
    int32_t segment;     /* 0 .. MP_AN_SEGMENTS-1: which order segment the request falls in */
    int64_t n_rows;
    int64_t top_k;
    const uint16_t *expert_ids; /* (n_rows, top_k), validated: < n_experts, distinct per row */
    const float *weights;       /* (n_rows, top_k), validated: finite, >= 0 */
} mp_an_record;

/* The stream state of one expert of one node: everything a route reads and writes besides its
 * counters, in one 24-byte record (one cache line fetch per route instead of four arrays). */
typedef struct mp_an_expert_use {
    int64_t last_t;    /* token time of the expert's last use, -1 before the first */
    int64_t run_start; /* token time at which the expert's current run began */
    uint8_t wbin;      /* router weight bin of the last use (MP_AN_WEIGHT_BINS) */
    uint8_t slot;      /* k-slot of the last use */
} mp_an_expert_use;

/* Per-node accumulators. Arrays of E = the node's n_experts unless said otherwise. */
typedef struct mp_an_node_acc {
    const uint64_t *count;       /* (E) routes per expert, all requests: the node's row of
                                  * mp_an_stats.pop (a view) */
    const uint64_t *train_count; /* (E) the same, training requests only (mp_an_stats.pop_train) */
    mp_an_expert_use *use; /* (E) */
    uint32_t *same_layer;  /* (E, E) top-1 at t -> top-1 at t+1, same node; NULL if E is big */
    uint32_t *next_layer;  /* (E, E) top-1 here -> top-1 of the next node, same token */
    int64_t t;             /* rows fed so far (token time) */
    int32_t prev_top1;     /* top-1 expert of the previous row of this request, -1 if none */
    int64_t prev_request;  /* request of that row */
    uint64_t routes, train_routes;
    uint64_t seg_routes[MP_AN_SEGMENTS];
    uint64_t cold;                         /* first use of an expert in the stream */
    uint64_t reuse[MP_AN_LOG2_BUCKETS];    /* reuse distance d (tokens) in bucket floor(log2 d) */
    uint64_t runs[MP_AN_LOG2_BUCKETS];     /* completed runs of consecutive tokens, by length */
    uint64_t same_layer_rows, next_layer_rows; /* rows that fed each transition table */
    /* 128-bit fingerprint of the node's routing, row by row: each row's set of experts (slot
     * order and weights left out) folded into the stream in token order. Two nodes with equal
     * fingerprints and row counts chose the same experts for every token (a copied router). */
    uint64_t route_print[2];
} mp_an_node_acc;

typedef struct mp_an_config {
    mp_an_rows rows;
    int64_t reuse_window; /* tokens: a route counts as reused if its expert returns within it */
} mp_an_config;

typedef struct mp_an_stats {
    mp_an_config cfg;
    int32_t n_nodes;
    mp_an_node *nodes;   /* (n_nodes) copied at init */
    mp_an_node_acc *acc; /* (n_nodes) */
    /* Popularity, the collector's counter: routes per (node, expert) of all requests, of the
     * training requests, and of each order segment (drift). */
    mp_popularity pop, pop_train, pop_seg[MP_AN_SEGMENTS];
    uint64_t total_routes;
    uint64_t total_rows; /* token rows summed over nodes */
    uint64_t n_requests_seen;
    int64_t last_request; /* -1 before the first record */
    /* router weight vs near-future reuse, over all nodes: routes by weight bin, and those whose
     * expert came back within cfg.reuse_window tokens; same by k-slot (position in the row). */
    uint64_t weight_routes[MP_AN_WEIGHT_BINS], weight_reused[MP_AN_WEIGHT_BINS];
    uint64_t slot_routes[MP_AN_MAX_TOPK], slot_reused[MP_AN_MAX_TOPK];
    uint64_t censored; /* routes too close to the end to know whether they were reused */
    /* next-layer window: the previous record's top-1 per row, to pair with the next node */
    int32_t prev_node;
    int64_t prev_req, prev_step, prev_rows;
    uint16_t *prev_top1; /* (prev_cap) */
    int64_t prev_cap;
    /* Transition-table increments are deferred by MP_AN_PENDING cells (a few records): each cell
     * is prefetched when its row is seen and incremented when it leaves this ring, so its cache
     * miss is long over by then. Sums commute; finish applies what is left. The tables are only
     * complete after mp_an_stats_finish. */
    uint32_t *pending[MP_AN_PENDING];
    uint32_t pending_at;
    bool finished;
} mp_an_stats;

mp_status mp_an_stats_init(mp_an_stats *s, const mp_an_node *nodes, int32_t n_nodes,
                           const mp_an_config *cfg, mp_error *err);
/* Feed one record (already validated and row-selected). Never fails for validated input except
 * for out of memory (the next-layer window grows to the largest step). */
mp_status mp_an_stats_add(mp_an_stats *s, const mp_an_record *r, mp_error *err);
/* Close open runs, resolve pending reuse questions and apply the deferred transition increments;
 * call once after the last record (and before reading the transition tables). */
void mp_an_stats_finish(mp_an_stats *s);
void mp_an_stats_free(mp_an_stats *s);

/* A 64-bit mixer (the SplitMix64 finalizer): consecutive ids map to unrelated words, so sums of
 * mixed ids tell sets apart. */
static inline uint64_t mp_an_mix64(uint64_t x)
{
    x ^= x >> 30;
    x *= 0xbf58476d1ce4e5b9ULL;
    x ^= x >> 27;
    x *= 0x94d049bb133111ebULL;
    return x ^ (x >> 31);
}

/* Histogram bucket of a positive distance/length: floor(log2 v), clamped (inline: it runs once
 * per routing decision). */
static inline int mp_an_log2_bucket(uint64_t v)
{
    if (v == 0)
        return 0;
    const int b = 63 - __builtin_clzll(v);
    return b < MP_AN_LOG2_BUCKETS ? b : MP_AN_LOG2_BUCKETS - 1;
}

/* Drift segments: requests in merged order cut into min(MP_AN_SEGMENTS, n_requests) segments
 * of (nearly) equal request counts, numbered 0, 1, ... without gaps: every segment holds at
 * least one request. */
int32_t mp_an_n_segments(int64_t n_requests);
int32_t mp_an_segment_of(int64_t ord, int64_t n_requests);

/* Per-request distributions, summarized: quantiles over requests. */
#define MP_AN_HIST_BINS 1000
typedef struct mp_an_request_dist {
    int64_t n_requests;
    /* histograms over [0, 1] of: mean distinct-expert fraction per node, mean normalized entropy,
     * share of routes in the top half of the earlier requests' popularity, total-variation
     * distance from the earlier requests' distribution (the last two: requests with a history) */
    uint32_t hist[4][MP_AN_HIST_BINS];
    int64_t n[4]; /* requests in each histogram */
    double mean[4];
} mp_an_request_dist;
double mp_an_hist_quantile(const uint32_t *hist, int64_t n, double q);

#endif
