/* collector/trace_check_iter.c — the fail-closed trace reader's stage 2 (see trace_check.h): an
 * iterator that streams steps and routing merge-joined by (request, step), checks every step and
 * every record (numbering, phase, rows, one record per node per step, BLOB sizes, ids in range and
 * distinct within a row, weights finite and >= 0), drives the timing rows' checks through the
 * same scan (trace_check_timing.c), and at the end checks requests without steps and the footer's
 * counts.
 *
 * Invariants: an iterator hands out a record only if it and everything before it in the trace
 * passed (after the first problem nothing more is handed out, the checks go on for the sink);
 * a record's ids and weights are decoded into buffers of the largest record so far, valid until
 * the next call; memory does not grow with the number of steps.
 */
#include "collector/trace_check_impl.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/quant.h"

/* f16 -> f32 for every bit pattern: check_record decodes f16 router weights by lookup. Built by
 * the first iteration. */
static float f16_table[65536];
static bool f16_ready;

static int64_t lookup_ord(const mp_trace_check *c, int64_t request_id)
{
    req_key k = {request_id, 0};
    const req_key *hit = bsearch(&k, c->reqs, (size_t)c->n_requests, sizeof k, by_request_id);
    return hit ? hit->ord : -1;
}

/* Close the current step: every node must have had its routing record. */
static mp_status close_step(mp_trace_check_iter *it)
{
    if (!it->have_step || !it->step_ok || it->nodes_seen == it->c->n_nodes)
        return MP_OK;
    it->step_ok = false;
    PROBLEM("trace %s: request %lld, step %lld: routing for %d of %d nodes, expected one record "
            "per node (first missing: node %lld)",
            it->c->path, (long long)it->step.request_id, (long long)it->step.step, it->nodes_seen,
            it->c->n_nodes, (long long)it->nodes[it->nodes_seen].node_index);
}

static mp_status load_step(mp_trace_check_iter *it, mp_error *err)
{
    mp_trace_check *c = it->c;
    if (close_step(it) != MP_OK)
        return MP_ERR_FORMAT;
    int rc = mp_trace_steps_next(it->steps, &it->step, err);
    if (rc < 0)
        return (mp_status)rc;
    it->have_step = rc == 1;
    if (!it->have_step)
        return MP_OK;
    it->n_steps_read++;
    it->nodes_seen = 0;
    it->step_ok = false;
    const mp_trace_step_rec *s = &it->step;
    const int64_t ord = lookup_ord(c, s->request_id);
    const bool new_request = s->request_id != it->prev_req;
    const int64_t prev_req = it->prev_req, prev_step = it->prev_step;
    it->prev_req = s->request_id;
    it->prev_step = s->step;
    it->step_ord = ord;
    if (ord < 0)
        PROBLEM("trace %s: request %lld, step %lld: the request is missing from the requests "
                "table, expected every step to belong to a recorded request",
                c->path, (long long)s->request_id, (long long)s->step);
    if (new_request) {
        if (it->has_steps[ord])
            PROBLEM("trace %s: request %lld (ord %lld), step %lld: the request's steps resume "
                    "after another request's, expected each request's steps together",
                    c->path, (long long)s->request_id, (long long)ord, (long long)s->step);
        if (ord <= it->prev_ord)
            PROBLEM("trace %s: request %lld (ord %lld), step %lld: out of order, runs after "
                    "request %lld (ord %lld), expected ord order",
                    c->path, (long long)s->request_id, (long long)ord, (long long)s->step,
                    (long long)prev_req, (long long)it->prev_ord);
        it->prev_ord = ord;
        it->has_steps[ord] = true;
        if (s->step != 0)
            PROBLEM("trace %s: request %lld (ord %lld), step %lld: first step is %lld, expected 0 "
                    "(steps %s missing)",
                    c->path, (long long)s->request_id, (long long)ord, (long long)s->step,
                    (long long)s->step, s->step > 1 ? "0.." : "0");
    } else if (s->step != prev_step + 1) {
        PROBLEM("trace %s: request %lld (ord %lld), step %lld: follows step %lld, expected step "
                "%lld (%s)",
                c->path, (long long)s->request_id, (long long)ord, (long long)s->step,
                (long long)prev_step, (long long)(prev_step + 1),
                s->step <= prev_step ? "a repeated step" : "a gap");
    }
    if (!s->phase || (strcmp(s->phase, "prefill") && strcmp(s->phase, "decode")))
        PROBLEM("trace %s: request %lld (ord %lld), step %lld: phase '%s', expected 'prefill' or "
                "'decode'",
                c->path, (long long)s->request_id, (long long)ord, (long long)s->step,
                s->phase ? s->phase : "NULL");
    if (s->n_rows < 1)
        PROBLEM("trace %s: request %lld (ord %lld), step %lld: %lld rows, expected at least 1",
                c->path, (long long)s->request_id, (long long)ord, (long long)s->step,
                (long long)s->n_rows);
    it->step_phase = !strcmp(s->phase, "decode") ? 1 : 0;
    it->step_ok = true;
    return MP_OK;
}

/* Leave the current step for the next one (none: the end), then its timing rows. */
static mp_status next_step(mp_trace_check_iter *it, mp_error *err)
{
    mp_status st = load_step(it, err);
    if (st != MP_OK)
        return st;
    if (it->have_step && it->step_ok)
        it->rows_total += it->step.n_rows;
    return mp_trace_check_timing_upto(it, err);
}

static mp_status grow(mp_trace_check_iter *it, int64_t n, mp_error *err)
{
    if (n <= it->cap)
        return MP_OK;
    uint16_t *ids = realloc(it->ids, (size_t)n * sizeof *ids);
    if (ids)
        it->ids = ids;
    float *w = realloc(it->weights, (size_t)n * sizeof *w);
    if (w)
        it->weights = w;
    if (!ids || !w)
        return mp_fail(err, MP_ERR_NOMEM, "trace %s: out of memory for a record of %lld routes",
                       it->c->path, (long long)n);
    it->cap = n;
    return MP_OK;
}

/* Check and decode one routing record; *ok says whether it may be handed out. Hot: one pass over
 * the record's ids and weights, every check in the same loop. */
static mp_status check_record(mp_trace_check_iter *it, const mp_trace_routing_rec *rec, int32_t p,
                              bool *ok, mp_error *err)
{
    *ok = false;
    const mp_trace_node_info *nd = &it->nodes[p];
    const int64_t k = nd->top_k, E = nd->n_experts;
    if (rec->n_rows != it->step.n_rows)
        PROBLEM(AT ": %lld rows, expected the step's %lld", AT_ARGS, (long long)rec->n_rows,
                (long long)it->step.n_rows);
    if (rec->n_rows < 1)
        return MP_OK; /* reported with the step */
    if (rec->n_rows > INT64_MAX / k)
        PROBLEM(AT ": %lld rows, expected a count whose routes fit in 64 bits", AT_ARGS,
                (long long)rec->n_rows);
    const int64_t n = rec->n_rows * k;
    const int64_t wb = it->c->node_ok[p];
    if (rec->expert_ids_bytes % (size_t)nd->id_bytes)
        PROBLEM(AT ": expert_ids BLOB of %zu bytes is truncated (not a multiple of %lld-byte "
                "ids), expected %lld bytes",
                AT_ARGS, rec->expert_ids_bytes, (long long)nd->id_bytes, (long long)(n * nd->id_bytes));
    if ((int64_t)(rec->expert_ids_bytes / (size_t)nd->id_bytes) != n)
        PROBLEM(AT ": %lld expert ids, expected rows × top-k = %lld × %lld = %lld", AT_ARGS,
                (long long)(rec->expert_ids_bytes / (size_t)nd->id_bytes), (long long)rec->n_rows,
                (long long)k, (long long)n);
    if (rec->weights_bytes % (size_t)wb)
        PROBLEM(AT ": weights BLOB of %zu bytes is truncated (not a multiple of %lld-byte %s "
                "weights), expected %lld bytes",
                AT_ARGS, rec->weights_bytes, (long long)wb, nd->weight_format, (long long)(n * wb));
    if ((int64_t)(rec->weights_bytes / (size_t)wb) != n)
        PROBLEM(AT ": %lld router weights, expected rows × top-k = %lld × %lld = %lld", AT_ARGS,
                (long long)(rec->weights_bytes / (size_t)wb), (long long)rec->n_rows, (long long)k,
                (long long)n);
    mp_status st = grow(it, n, err);
    if (st != MP_OK)
        return st;
    const uint8_t *ib = rec->expert_ids, *wbuf = rec->weights;
    /* decode and check in one sweep: ids little-endian, then range and repeats per row */
    for (int64_t row = 0; row < rec->n_rows; row++) {
        it->row_serial++;
        for (int64_t j = 0; j < k; j++) {
            const int64_t i = row * k + j;
            const uint32_t id = nd->id_bytes == 1 ? ib[i] : (uint32_t)(ib[2 * i] | ib[2 * i + 1] << 8);
            if (id >= (uint32_t)E)
                PROBLEM(AT ", row %lld, slot %lld: expert id %u outside [0, %lld)", AT_ARGS,
                        (long long)row, (long long)j, id, (long long)E);
            if (it->stamp[id] == it->row_serial)
                PROBLEM(AT ", row %lld, slot %lld: expert id %u repeated within the row, "
                        "expected top-k distinct experts",
                        AT_ARGS, (long long)row, (long long)j, id);
            it->stamp[id] = it->row_serial;
            it->ids[i] = (uint16_t)id;
            float w;
            if (wb == 2) {
                w = f16_table[wbuf[2 * i] | wbuf[2 * i + 1] << 8];
            } else {
                uint32_t u = (uint32_t)wbuf[4 * i] | (uint32_t)wbuf[4 * i + 1] << 8 |
                             (uint32_t)wbuf[4 * i + 2] << 16 | (uint32_t)wbuf[4 * i + 3] << 24;
                memcpy(&w, &u, sizeof w);
            }
            if (!isfinite(w) || w < 0)
                PROBLEM(AT ", row %lld, slot %lld: router weight %g, expected a finite "
                        "non-negative number",
                        AT_ARGS, (long long)row, (long long)j, (double)w);
            it->weights[i] = w;
        }
    }
    *ok = true;
    return MP_OK;
}

void mp_trace_check_end(mp_trace_check_iter *it)
{
    if (!it)
        return;
    mp_trace_routing_end(it->routing);
    mp_trace_steps_end(it->steps);
    mp_trace_timing_end(it->timing);
    free(it->served);
    free(it->has_steps);
    free(it->ids);
    free(it->weights);
    free(it->stamp);
    free(it);
}

mp_status mp_trace_check_begin(mp_trace_check *c, int64_t only_node, mp_trace_check_iter **out,
                               mp_error *err)
{
    *out = NULL;
    if (!f16_ready) {
        for (uint32_t h = 0; h < 65536; h++)
            f16_table[h] = mp_f16_to_f32((mp_f16)h);
        f16_ready = true;
    }
    mp_trace_check_iter *it = calloc(1, sizeof *it);
    if (!it)
        return mp_fail(err, MP_ERR_NOMEM, "trace %s: out of memory", c->path);
    it->c = c;
    it->nodes = mp_trace_reader_nodes(c->r);
    it->only_node = only_node;
    it->prev_req = -1;
    it->prev_ord = -1;
    it->has_steps = calloc((size_t)c->n_requests + 1, sizeof *it->has_steps);
    it->stamp = calloc((size_t)c->max_experts + 1, sizeof *it->stamp);
    it->served = calloc((size_t)c->n_nodes + 1, sizeof *it->served);
    mp_status st = MP_OK;
    if (!it->has_steps || !it->stamp || !it->served)
        st = mp_fail(err, MP_ERR_NOMEM, "trace %s: out of memory", c->path);
    if (!st)
        st = mp_trace_steps_begin(c->r, &it->steps, err);
    if (!st)
        st = mp_trace_routing_begin(c->r, &it->routing, err);
    if (!st)
        st = mp_trace_timing_begin_counts(c->r, &it->timing, err);
    if (!st && (it->trec_rc = mp_trace_timing_next(it->timing, &it->trec, err)) < 0)
        st = (mp_status)it->trec_rc;
    if (st) {
        mp_trace_check_end(it);
        return st;
    }
    *out = it;
    return MP_OK;
}

/* After the last routing record: the remaining steps, requests without steps, the footer. */
static mp_status finish(mp_trace_check_iter *it, mp_error *err)
{
    mp_trace_check *c = it->c;
    mp_status st;
    while (it->have_step)
        if ((st = next_step(it, err)) != MP_OK)
            return st;
    const mp_trace_request_info *q = mp_trace_reader_requests(c->r);
    for (int64_t o = 0; o < c->n_requests; o++)
        if (!it->has_steps[o] &&
            problem(c, &it->stop_err, "trace %s: request ord %lld (request %lld): no steps, "
                    "expected the request's prefill and decode steps", c->path, (long long)o,
                    (long long)q[o].request_id) != MP_OK)
            return MP_ERR_FORMAT;
    const mp_trace_run *run = mp_trace_reader_run(c->r);
    if (!run->has_footer)
        return MP_OK; /* reported at open */
    int64_t n_cupti; /* the timing rows were all read by now: counted, not counted again */
    if ((st = mp_trace_reader_count_rows(c->r, "cupti", &n_cupti, err)))
        return st;
    const struct {
        const char *name, *table;
        int64_t footer, found;
    } counts[] = {
        {"n_steps", "the steps table has %lld rows", run->footer_n_steps, it->n_steps_read},
        {"n_routing", "the routing table has %lld records", run->footer_n_routing, it->n_routing_read},
        {"n_timing", "the timing table has %lld rows", run->footer_n_timing, it->n_timing_read},
        {"n_cupti", "the cupti table has %lld rows", run->footer_n_cupti, n_cupti},
    };
    for (int i = 0; i < 4; i++) {
        if (counts[i].footer == counts[i].found)
            continue;
        char found[96];
        snprintf(found, sizeof found, counts[i].table, (long long)counts[i].found);
        if (problem(c, &it->stop_err, "trace %s: footer: %s %lld, but %s", c->path, counts[i].name,
                    (long long)counts[i].footer, found) != MP_OK)
            return MP_ERR_FORMAT;
    }
    return MP_OK;
}

/* The next record to hand out (1), the end (0), or an error; the body of mp_trace_check_next. */
static int advance(mp_trace_check_iter *it, mp_trace_checked_rec *out, mp_error *err)
{
    mp_trace_check *c = it->c;
    mp_status st;
    if (!it->started) {
        it->started = true;
        if ((st = next_step(it, err)) != MP_OK)
            return st;
    }
    mp_trace_routing_rec rec;
    int rc;
    while ((rc = mp_trace_routing_next(it->routing, &rec, err)) == 1) {
        it->n_routing_read++;
        while (it->have_step &&
               cmp_key(it->step.request_id, it->step.step, rec.request_id, rec.step) < 0)
            if ((st = next_step(it, err)) != MP_OK)
                return st;
        if (!it->have_step ||
            cmp_key(it->step.request_id, it->step.step, rec.request_id, rec.step) > 0) {
            if (problem(c, &it->stop_err, "trace %s: request %lld, step %lld, node %lld: routing "
                        "for a step that the steps table lacks", c->path, (long long)rec.request_id,
                        (long long)rec.step, (long long)rec.node_index) != MP_OK)
                return MP_ERR_FORMAT;
            continue;
        }
        const int32_t p = rec.node_index >= 0 && rec.node_index <= MP_TRACE_MAX_NODE_INDEX
                              ? c->pos[rec.node_index] : -1;
        if (p < 0 || p >= c->n_nodes) {
            if (problem(c, &it->stop_err, "trace %s: request %lld (ord %lld), step %lld, node "
                        "%lld: the node is absent from the node table", c->path,
                        (long long)rec.request_id, (long long)it->step_ord, (long long)rec.step,
                        (long long)rec.node_index) != MP_OK)
                return MP_ERR_FORMAT;
            continue;
        }
        if (!it->step_ok)
            continue;
        if (p > it->nodes_seen &&
            problem(c, &it->stop_err, "trace %s: request %lld (ord %lld), step %lld: no routing "
                    "for node %lld, expected one record per node", c->path,
                    (long long)rec.request_id, (long long)it->step_ord, (long long)rec.step,
                    (long long)it->nodes[it->nodes_seen].node_index) != MP_OK)
            return MP_ERR_FORMAT;
        it->nodes_seen = p + 1;
        if (!c->node_ok[p])
            continue;
        bool ok;
        if ((st = check_record(it, &rec, p, &ok, err)) != MP_OK)
            return st;
        if (!ok || c->n_problems > 0)
            continue; /* after a problem nothing more is handed out: only the checks go on */
        if (it->only_node >= 0 && rec.node_index != it->only_node)
            continue;
        *out = (mp_trace_checked_rec){
            .request_id = rec.request_id,
            .request_ord = it->step_ord,
            .step = rec.step,
            .node_index = rec.node_index,
            .node = p,
            .phase = it->step_phase,
            .n_rows = rec.n_rows,
            .top_k = it->nodes[p].top_k,
            .n_experts = it->nodes[p].n_experts,
            .expert_ids = it->ids,
            .weights = it->weights,
        };
        return 1;
    }
    if (rc < 0)
        return rc;
    if ((st = finish(it, err)) != MP_OK)
        return st;
    if (c->n_problems == 0) /* the whole trace passed: its served and tier totals are complete */
        mp_trace_check_timing_keep(it);
    return 0;
}

int mp_trace_check_next(mp_trace_check_iter *it, mp_trace_checked_rec *rec, mp_error *err)
{
    if (it->finished) {
        if (it->stopped)
            mp_fail(err, it->stopped, "%s", it->stop_err.msg);
        return it->stopped;
    }
    const int rc = advance(it, rec, err);
    if (rc == 1)
        return 1;
    it->finished = true;
    if (rc == MP_ERR_FORMAT && it->stop_err.msg[0] && err)
        *err = it->stop_err; /* a problem stopped it: the problem is the error */
    it->stopped = rc < 0 ? (mp_status)rc : MP_OK;
    if (rc < 0)
        it->stop_err = err ? *err : it->stop_err;
    return rc;
}
