/* collector/trace_check.h — the fail-closed trace reader: every consumer of routing (the
 * analyzer, the simulator's loader, route replay) reads it through here, so a trace that one of
 * them refuses, none of them accepts.
 *
 * Built on the raw reader (trace_read.h), which reports what is stored; this module decides what
 * is valid, in two stages:
 *  1. mp_trace_check_open, from the tables alone: PRAGMA quick_check; run status 'complete',
 *     footer present, no truncation marker; a node table of 1..4096 sane nodes (1..65536 experts,
 *     top-k in 1..min(experts, 64), id_bytes that hold the ids, f16/f32 weights) agreeing with the
 *     run row, and at most MP_TRACE_MAX_NODE_EXPERTS (node, expert) pairs, so that what a
 *     consumer allocates per pair is bounded before it allocates; requests numbered 0, 1, 2, ...
 *     in request_id order, without overlaps or repeated external ids; the footer's request count.
 *  2. an iterator (mp_trace_check_begin/next) that streams steps and routing merge-joined by
 *     (request, step) and checks every record: step numbering, phase, rows; a record per node per
 *     step with the step's rows; id and weight BLOBs of rows × top-k; ids in [0, n_experts) and
 *     distinct within a row; weights finite and >= 0; merge-joined too, the timing rows, in one
 *     scan: those that carry served codes (timing.served) must be of a step and node of the tables
 *     and hold rows × top-k codes, each a path (mp_served), whose counts agree with the row's hits,
 *     misses and tier_hits; every row's adaptive-tier counts are summed. At the end: requests
 *     without steps, and the footer's steps, routing, timing and cupti counts against the tables.
 * Records are (request, step, node) whatever the schema version, so every check and location is
 * the same for both. Each problem is one line naming the trace and as much of (request, step,
 * node, row, slot) as applies.
 *
 * Problems go to a sink. Without one (NULL) the first problem is the error: open or next returns
 * MP_ERR_FORMAT with it, which is what the simulator and route replay want. With one (the
 * analyzer's --validate-only), the sink decides: MP_OK skips the offending item and goes on,
 * anything else stops. Only records without any problem are handed out, and none after the first
 * problem, so no consumer ever computes with invalid input.
 *
 * Memory: the reader's (nodes, requests), a has-steps flag per request, a stamp per expert for the
 * repeated-id check, the decode buffers of the largest record, the served totals per node and the
 * tier's totals: nothing grows with the number of steps.
 */
#ifndef MP_COLLECTOR_TRACE_CHECK_H
#define MP_COLLECTOR_TRACE_CHECK_H

#include <stdbool.h>
#include <stdint.h>

#include "collector/trace_read.h"

#define MP_TRACE_MAX_TOPK 64
/* n_nodes × max experts per node. The largest MoE models published have ~60 MoE layers × 384
 * experts (Kimi K2: 23,424 pairs); 2^20 leaves room and bounds the analyzer's per-pair
 * statistics (~100 bytes each) at ~100 MB. A 272 KB trace that declared 4,096 × 65,536 drove
 * the analyzer to 24 GB before this limit. */
#define MP_TRACE_MAX_NODE_EXPERTS ((int64_t)1 << 20)

/* A problem's one-line message; return MP_OK to skip the item and go on, else stop. */
typedef mp_status (*mp_trace_problem_fn)(void *user, const char *msg);

typedef struct mp_trace_check mp_trace_check;
typedef struct mp_trace_check_iter mp_trace_check_iter;

/* Open path and run stage 1. Returns MP_OK when the tables could be looked at (with a sink:
 * problems may have been reported; mp_trace_check_problems says how many), MP_ERR_FORMAT when a
 * problem stopped it, or another error (I/O, memory). On any error *out is NULL. */
mp_status mp_trace_check_open(const char *path, mp_trace_problem_fn sink, void *sink_user,
                              mp_trace_check **out, mp_error *err);
void mp_trace_check_close(mp_trace_check *c);
mp_trace_reader *mp_trace_check_reader(const mp_trace_check *c);
/* Problems reported so far, by this trace's open and iterators. */
int64_t mp_trace_check_problems(const mp_trace_check *c);

/* One valid routing record. Pointers are valid until the next call to next or end. */
typedef struct mp_trace_checked_rec {
    int64_t request_id;
    int64_t request_ord;        /* the request's position in the requests table */
    int64_t step;
    int64_t node_index;
    int32_t node;               /* position in the node table (node_index order) */
    int32_t phase;              /* mp_phase: 0 prefill, 1 decode */
    int64_t n_rows, top_k, n_experts;
    const uint16_t *expert_ids; /* (n_rows, top_k): < n_experts, distinct within a row */
    const float *weights;       /* (n_rows, top_k): finite, >= 0 */
} mp_trace_checked_rec;

/* Stream stage 2 over the whole trace. only_node >= 0 hands out that node's records only (every
 * record is still checked). */
mp_status mp_trace_check_begin(mp_trace_check *c, int64_t only_node, mp_trace_check_iter **out,
                               mp_error *err);
/* 1: a record; 0: the end (every end-of-trace check passed or was reported to the sink); < 0:
 * an mp_status, err filled (MP_ERR_FORMAT: a problem, without a sink or when the sink stopped). */
int mp_trace_check_next(mp_trace_check_iter *it, mp_trace_checked_rec *rec, mp_error *err);
void mp_trace_check_end(mp_trace_check_iter *it);

/* The routes of each node by the path that served them, from the timing rows' served codes:
 * routes = every route of every step (its rows × the node's top-k, whatever a consumer selects);
 * by_path[code] = those a timing row's served codes put on that path (mp_served); routes − the
 * sum of by_path had none (a timing row without codes, or no timing row). */
typedef struct mp_trace_served_node {
    int64_t routes;
    int64_t by_path[MP_SERVED_N];
} mp_trace_served_node;
/* (n_nodes, node-table order): the totals of the last iteration that reached its end without a
 * problem (mp_trace_check_next returned 0); all zero before. */
const mp_trace_served_node *mp_trace_check_served(const mp_trace_check *c);

/* The GPU executor's adaptive tier over the timing rows (what collect --adaptive records): its
 * counts (tier_hits, tier_late, tier_admissions, tier_evictions, tier_copy_bytes; NULL reads 0)
 * summed over the rows that have any of the first four (present false when none has: no tier, or a
 * trace from before its columns), and those rows' routes (hits + misses). overflow: a sum passed
 * 64 bits, the others are then not to be used. */
typedef struct mp_trace_tier_totals {
    bool present, overflow;
    int64_t routes;
    int64_t hits, late, admissions, evictions, copy_bytes;
} mp_trace_tier_totals;
/* The totals of the last iteration that reached its end without a problem; all zero before. */
const mp_trace_tier_totals *mp_trace_check_tier(const mp_trace_check *c);
/* Add add's totals to *sum (the sums of several traces gather in one, zeroed first); false, with
 * sum->overflow set, where a sum passes 64 bits (or add's had). */
bool mp_trace_tier_sum(mp_trace_tier_totals *sum, const mp_trace_tier_totals *add);

/* Several traces read as one (analyze and simulate of sharded collections): other, opened
 * after first, must come from the same model (SHA-256), have the same shapes and node table, and
 * be another run — not the same file, a copy of it (the same run id, or for traces without one the
 * same run row and footer) or the same foreign file imported twice, whose requests would count
 * twice. Each problem goes to sink as one line naming both paths. MP_ERR_FORMAT when the sink
 * says stop, MP_ERR_NOMEM, else MP_OK (problems may have been reported). */
mp_status mp_trace_check_merge(const mp_trace_check *first, const char *first_path, const mp_trace_check *other,
                               const char *other_path, mp_trace_problem_fn sink, void *sink_user);

#endif
