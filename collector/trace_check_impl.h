/* collector/trace_check_impl.h — what the fail-closed checker's files share, for them alone: the
 * checker's and its iterator's state, the one way a problem is reported, the (request, step) order
 * and the request lookup's order. trace_check.c is stage 1 (the tables at open), trace_check_iter.c
 * stage 2 (steps and routing records), trace_check_timing.c the timing rows read in stage 2's scan
 * (served codes, the tier's totals). Not a public header; consumers use trace_check.h.
 *
 * Invariants: every problem, whichever file finds it, goes through problem(), which counts it on
 * the trace and hands it to the sink, so n_problems is the trace's whole count and "no problem so
 * far" means the same everywhere; the checker's lookup tables (pos, node_ok, reqs, max_experts)
 * are written by stage 1 alone; locations in stage 2 are written with AT / AT_ARGS, one form for
 * every record and timing row.
 */
#ifndef MP_COLLECTOR_TRACE_CHECK_IMPL_H
#define MP_COLLECTOR_TRACE_CHECK_IMPL_H

#include <stdarg.h>
#include <stdbool.h>
#include <stdint.h>

#include "collector/trace_check.h"

typedef struct req_key {
    int64_t request_id, ord;
} req_key;

/* req_key order, by request_id: the checker sorts its requests so, and looks a step's up so. */
static inline int by_request_id(const void *pa, const void *pb)
{
    const req_key *a = pa, *b = pb;
    return (a->request_id > b->request_id) - (a->request_id < b->request_id);
}

struct mp_trace_check {
    mp_trace_reader *r;
    const char *path;          /* the reader's */
    mp_trace_problem_fn sink;
    void *sink_user;
    int64_t n_problems;
    int32_t n_nodes;
    uint8_t *node_ok;          /* (n_nodes) bytes per router weight (2, 4) if the node row is
                                * usable for decoding, else 0: compared once, not per record */
    int16_t pos[MP_TRACE_MAX_NODE_INDEX + 1]; /* node_index -> position, -1 if absent */
    req_key *reqs;             /* (n_requests) sorted by request_id */
    int64_t n_requests;
    int64_t max_experts;       /* over usable nodes: the repeated-id stamp's size */
    mp_trace_served_node *served; /* (n_nodes) the last complete iteration's served totals */
    mp_trace_tier_totals tier;    /* the last complete iteration's tier totals */
};

struct mp_trace_check_iter {
    mp_trace_check *c;
    const mp_trace_node_info *nodes;
    int64_t only_node;
    mp_trace_step_iter *steps;
    mp_trace_routing_iter *routing;
    bool started, finished;
    mp_status stopped;         /* the error that ended the iteration, returned again */
    mp_error stop_err;
    bool *has_steps;           /* (n_requests) by ord */
    /* current step */
    bool have_step, step_ok;
    mp_trace_step_rec step;
    int32_t step_phase;
    int64_t step_ord;          /* ord of the step's request, -1 if unknown */
    int32_t nodes_seen;        /* routing records of this step so far (positions 0..nodes_seen-1) */
    int64_t prev_req, prev_step, prev_ord;
    int64_t n_steps_read, n_routing_read;
    /* decode buffers */
    uint16_t *ids;             /* (cap) */
    float *weights;            /* (cap) */
    int64_t cap;
    uint32_t *stamp;           /* (max_experts) row serial of the last use: the repeated-id check */
    uint32_t row_serial;
    /* the timing rows, merge-joined with the steps: trec is the next one when trec_rc is 1 (0:
     * none left); served (n_nodes) the codes counted so far, rows_total the rows of the steps that
     * passed, tier the tier's counts so far, n_timing_read the rows read */
    mp_trace_timing_iter *timing;
    mp_trace_timing_rec trec;
    int trec_rc;
    mp_trace_served_node *served;
    int64_t rows_total;
    mp_trace_tier_totals tier;
    int64_t n_timing_read;
};

/* Report one problem: MP_OK lets the caller skip the item and go on, MP_ERR_FORMAT stops. Without
 * a sink every problem stops; its message is then in *stop. */
static inline mp_status problemv(mp_trace_check *c, mp_error *stop, const char *fmt, va_list ap)
{
    mp_error line;
    mp_failv(&line, MP_ERR_FORMAT, fmt, ap);
    c->n_problems++;
    const mp_status rc = c->sink ? c->sink(c->sink_user, line.msg) : MP_ERR_FORMAT;
    if (rc != MP_OK && stop)
        *stop = line;
    return rc == MP_OK ? MP_OK : MP_ERR_FORMAT;
}

static inline mp_status problem(mp_trace_check *c, mp_error *stop, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
static inline mp_status problem(mp_trace_check *c, mp_error *stop, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    mp_status rc = problemv(c, stop, fmt, ap);
    va_end(ap);
    return rc;
}

/* Report a problem and give up on the current item (a step or a record): MP_OK lets the caller
 * go on with the next one, MP_ERR_FORMAT (stop) ends the iteration. */
#define PROBLEM(...) return problem(it->c, &it->stop_err, __VA_ARGS__)

/* (request, step) order, the key steps, routing and timing rows are merge-joined by. */
static inline int cmp_key(int64_t r1, int64_t s1, int64_t r2, int64_t s2)
{
    if (r1 != r2)
        return r1 < r2 ? -1 : 1;
    return (s1 > s2) - (s1 < s2);
}

#define AT "trace %s: request %lld (ord %lld), step %lld, node %lld"
#define AT_ARGS it->c->path, (long long)rec->request_id, (long long)it->step_ord, \
                (long long)rec->step, (long long)rec->node_index

/* In trace_check_timing.c. timing_upto: the timing rows up to the current step (all that are left
 * once the steps have ended), each read once. timing_keep: after an iteration that reached its end
 * without a problem, its served and tier totals become the trace's (mp_trace_check_served,
 * mp_trace_check_tier). */
mp_status mp_trace_check_timing_upto(mp_trace_check_iter *it, mp_error *err);
void mp_trace_check_timing_keep(mp_trace_check_iter *it);

#endif
