/* analyzer/summary.h — what the analyzer derives from the accumulators once the stream is over:
 * ranks, coverage curves, capacity, the global budget spread across layers, generalization,
 * drift, concentration (entropy, Gini) and the transition summaries. Pure functions of
 * mp_an_stats; the reports (analyzer/report.h) print only what is here or in the accumulators.
 *
 * Invariants: coverage arrays are non-decreasing, start at 0 and end at 1 (or 0 when the node
 * saw no route); order[] is a permutation of the node's experts; rank[order[r]] == r.
 */
#ifndef MP_ANALYZER_SUMMARY_H
#define MP_ANALYZER_SUMMARY_H

#include "analyzer/stats.h"

typedef struct mp_an_node_summary {
    uint16_t *order;       /* (E) experts by descending count, ties to the lower id */
    int32_t *rank;         /* (E) zero-based rank of each expert */
    double *coverage;      /* (E+1) share of the node's routes served by its top-n, n = 0..E */
    uint16_t *train_order; /* (E) ranks learned on the training requests only */
    double *cov_in_sample; /* (E+1) training routes served by the training top-n */
    double *cov_heldout;   /* (E+1) held-out routes served by the training top-n */
    double *cov_oracle;    /* (E+1) held-out routes served by the held-out top-n (upper bound) */
    int64_t capacity[MP_AN_N_TARGETS]; /* experts needed for each target (mp_an_targets) */
    double entropy_bits;   /* of the node's expert distribution */
    double entropy_norm;   /* entropy_bits / log2(E): 1 = uniform */
    double gini;           /* 0 = uniform, -> 1 = one expert takes everything */
    double stay_frac;      /* routes whose expert the previous token also used (distance 1) */
    double same_layer_pred; /* rows whose next token's top-1 is among the top_k most frequent
                               successors of this row's top-1 (same node) */
    double next_layer_pred; /* same, for the next node's top-1 of the same token */
    bool has_same_layer, has_next_layer;
    double seg_heldout_half[MP_AN_SEGMENTS]; /* each segment's routes served by train top-E/2 */
    /* Identical routing: the first node (position, lower than this one) that saw the same rows
     * and chose the same set of experts as this node for every one of them (equal row counts,
     * experts, top-k and route fingerprints, stats.h), or -1. */
    int32_t same_routing_as;
} mp_an_node_summary;

typedef struct mp_an_pick {
    int32_t node;
    uint16_t expert;
} mp_an_pick;

typedef struct mp_an_summary {
    int32_t n_nodes;
    mp_an_node_summary *node; /* (n_nodes) */
    /* One global budget spread across layers: experts taken greedily by marginal coverage per
     * byte (per expert when some node's bytes are unknown); pick i is the i-th taken. */
    int64_t n_global;          /* sum of the nodes' expert counts */
    bool by_bytes;             /* greedy gain per byte (all expert bytes known) */
    mp_an_pick *global_order;  /* (n_global) greedy on all requests */
    double *global_cov;        /* (n_global+1) share of all routes served by the first n picks */
    uint64_t *global_bytes;    /* (n_global+1) bytes of the first n picks */
    double *global_in_sample;  /* (n_global+1) greedy on training counts, training routes */
    double *global_heldout;    /* (n_global+1) same picks, held-out routes */
    int64_t global_cap_experts[MP_AN_N_TARGETS];
    uint64_t global_cap_bytes[MP_AN_N_TARGETS];
    uint64_t train_routes, heldout_routes;
    double seg_heldout_half[MP_AN_SEGMENTS]; /* over all nodes */
    uint64_t seg_routes[MP_AN_SEGMENTS];
    /* Global per expert id: counts summed over nodes of the same id (nodes may differ in E). */
    int64_t max_experts;
    uint64_t *expert_count; /* (max_experts) */
    int32_t *expert_rank;   /* (max_experts) */
    double mean_entropy_norm, mean_gini;
    int32_t n_same_routing; /* nodes whose same_routing_as is set */
} mp_an_summary;

mp_status mp_an_summarize(const mp_an_stats *s, mp_an_summary *out, mp_error *err);
void mp_an_summary_free(mp_an_summary *sum);

/* Smallest n with coverage[n] >= target (coverage has n_experts+1 entries). */
int64_t mp_an_capacity(const double *coverage, int64_t n_experts, double target);

#endif
