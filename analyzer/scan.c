/* analyzer/scan.c — stage 2 of validation (see validate.h): every step and routing record of
 * every trace, merge-joined by (request_id, step), checked, decoded and emitted.
 *
 * Memory per trace: a node_index -> position map (4096 entries), the requests' id -> ord lookup
 * and a has-steps flag per request (bounded by the requests table the reader already holds), and
 * the decode buffers of the largest record. Nothing grows with the number of steps or records.
 */
#include "analyzer/validate.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "collector/trace.h"
#include "kernels/quant.h"

typedef struct req_key {
    int64_t request_id, ord;
} req_key;

static int by_request_id(const void *pa, const void *pb)
{
    const req_key *a = pa, *b = pb;
    return (a->request_id > b->request_id) - (a->request_id < b->request_id);
}

/* Per-trace scan state. */
typedef struct scan {
    mp_an_input *in;
    mp_an_problems *pb;
    int ti;
    const char *path;
    int16_t pos[MP_TRACE_MAX_NODE_INDEX + 1]; /* node_index -> position, -1 if absent */
    uint8_t *node_ok; /* (n_nodes) bytes per router weight (2, 4) if the node row is usable for
                       * decoding, else 0: the format string is compared once, not per record */
    const mp_trace_node_info *tnodes;         /* this trace's node rows */
    int32_t n_nodes;
    req_key *reqs;       /* (n_requests) sorted by request_id */
    bool *has_steps;     /* (n_requests) by ord */
    int64_t n_requests;
    /* current step */
    mp_trace_step_iter *steps;
    bool have_step, step_ok;
    mp_trace_step_rec step;
    int32_t step_phase;
    int64_t step_ord;   /* ord of the step's request, -1 if unknown */
    int32_t nodes_seen; /* routing records of this step so far (positions 0..nodes_seen-1) */
    int64_t prev_req, prev_step, prev_ord;
    int64_t n_steps_read, n_routing_read;
    /* decode buffers */
    uint16_t *ids;   /* (cap) */
    float *weights;  /* (cap) */
    int64_t cap;
    uint32_t *stamp; /* (max_experts) row serial of the last use: the repeated-id check */
    uint32_t row_serial;
} scan;

static float f16_table[65536];
static bool f16_ready;

/* Record a problem and give up on the current item (a step or a record): MP_OK lets the caller
 * go on with the next one, MP_ERR_FORMAT (limit reached) stops the scan. */
#define PROBLEM(...) return mp_an_problem(sc->pb, __VA_ARGS__)

static int64_t lookup_ord(const scan *sc, int64_t request_id)
{
    req_key k = {request_id, 0};
    const req_key *hit = bsearch(&k, sc->reqs, (size_t)sc->n_requests, sizeof k, by_request_id);
    return hit ? hit->ord : -1;
}

/* Close the current step: every node must have had its routing record. */
static mp_status close_step(scan *sc)
{
    if (!sc->have_step || !sc->step_ok || sc->nodes_seen == sc->n_nodes)
        return MP_OK;
    sc->step_ok = false;
    PROBLEM("trace %s: request %lld, step %lld: routing for %d of %d nodes, expected one record "
            "per node (first missing: node %lld)",
            sc->path, (long long)sc->step.request_id, (long long)sc->step.step, sc->nodes_seen,
            sc->n_nodes, (long long)sc->tnodes[sc->nodes_seen].node_index);
    return MP_OK;
}

static mp_status next_step(scan *sc, mp_error *err)
{
    if (close_step(sc) != MP_OK)
        return MP_ERR_FORMAT;
    int rc = mp_trace_steps_next(sc->steps, &sc->step, err);
    if (rc < 0)
        return (mp_status)rc;
    sc->have_step = rc == 1;
    if (!sc->have_step)
        return MP_OK;
    sc->n_steps_read++;
    sc->nodes_seen = 0;
    sc->step_ok = false;
    const mp_trace_step_rec *s = &sc->step;
    const int64_t ord = lookup_ord(sc, s->request_id);
    const bool new_request = s->request_id != sc->prev_req;
    const int64_t prev_req = sc->prev_req, prev_step = sc->prev_step;
    sc->prev_req = s->request_id;
    sc->prev_step = s->step;
    sc->step_ord = ord;
    if (ord < 0)
        PROBLEM("trace %s: request %lld, step %lld: the request is missing from the requests "
                "table, expected every step to belong to a recorded request",
                sc->path, (long long)s->request_id, (long long)s->step);
    if (new_request) {
        if (sc->has_steps[ord])
            PROBLEM("trace %s: request %lld (ord %lld), step %lld: the request's steps resume "
                    "after another request's, expected each request's steps together",
                    sc->path, (long long)s->request_id, (long long)ord, (long long)s->step);
        if (ord <= sc->prev_ord)
            PROBLEM("trace %s: request %lld (ord %lld), step %lld: out of order, runs after "
                    "request %lld (ord %lld), expected ord order",
                    sc->path, (long long)s->request_id, (long long)ord, (long long)s->step,
                    (long long)prev_req, (long long)sc->prev_ord);
        sc->prev_ord = ord;
        sc->has_steps[ord] = true;
        if (s->step != 0)
            PROBLEM("trace %s: request %lld (ord %lld), step %lld: first step is %lld, expected 0 "
                    "(steps %s missing)",
                    sc->path, (long long)s->request_id, (long long)ord, (long long)s->step,
                    (long long)s->step, s->step > 1 ? "0.." : "0");
    } else if (s->step != prev_step + 1) {
        PROBLEM("trace %s: request %lld (ord %lld), step %lld: follows step %lld, expected step "
                "%lld (%s)",
                sc->path, (long long)s->request_id, (long long)ord, (long long)s->step,
                (long long)prev_step, (long long)(prev_step + 1),
                s->step <= prev_step ? "a repeated step" : "a gap");
    }
    if (!s->phase || (strcmp(s->phase, "prefill") && strcmp(s->phase, "decode")))
        PROBLEM("trace %s: request %lld (ord %lld), step %lld: phase '%s', expected 'prefill' or "
                "'decode'",
                sc->path, (long long)s->request_id, (long long)ord, (long long)s->step,
                s->phase ? s->phase : "NULL");
    if (s->n_rows < 1)
        PROBLEM("trace %s: request %lld (ord %lld), step %lld: %lld rows, expected at least 1",
                sc->path, (long long)s->request_id, (long long)ord, (long long)s->step,
                (long long)s->n_rows);
    sc->step_phase = !strcmp(s->phase, "decode") ? 1 : 0;
    sc->step_ok = true;
    return MP_OK;
}

static int cmp_key(int64_t r1, int64_t s1, int64_t r2, int64_t s2)
{
    if (r1 != r2)
        return r1 < r2 ? -1 : 1;
    return (s1 > s2) - (s1 < s2);
}

static mp_status grow(scan *sc, int64_t n, mp_error *err)
{
    if (n <= sc->cap)
        return MP_OK;
    uint16_t *ids = realloc(sc->ids, (size_t)n * sizeof *ids);
    if (ids)
        sc->ids = ids;
    float *w = realloc(sc->weights, (size_t)n * sizeof *w);
    if (w)
        sc->weights = w;
    if (!ids || !w)
        return mp_fail(err, MP_ERR_NOMEM, "analyzer: out of memory for a record of %lld routes",
                       (long long)n);
    sc->cap = n;
    return MP_OK;
}

#define AT "trace %s: request %lld (ord %lld), step %lld, node %lld"
#define AT_ARGS sc->path, (long long)rec->request_id, (long long)sc->step_ord, \
                (long long)rec->step, (long long)rec->node_index

/* Check and decode one routing record; *ok says whether it may be emitted. */
static mp_status check_record(scan *sc, const mp_trace_routing_rec *rec, int32_t p, bool *ok,
                              mp_error *err)
{
    *ok = false;
    const mp_trace_node_info *nd = &sc->tnodes[p];
    const int64_t k = nd->top_k, E = nd->n_experts;
    if (rec->n_rows != sc->step.n_rows)
        PROBLEM(AT ": %lld rows, expected the step's %lld", AT_ARGS, (long long)rec->n_rows,
                (long long)sc->step.n_rows);
    if (rec->n_rows < 1)
        return MP_OK; /* reported with the step */
    const int64_t n = rec->n_rows * k;
    const int64_t wb = sc->node_ok[p];
    if (rec->expert_ids_bytes % (size_t)nd->id_bytes)
        PROBLEM(AT ": expert_ids BLOB of %zu bytes is truncated (not a multiple of %lld-byte "
                "ids), expected %lld bytes",
                AT_ARGS, rec->expert_ids_bytes, (long long)nd->id_bytes, (long long)(n * nd->id_bytes));
    else if ((int64_t)(rec->expert_ids_bytes / (size_t)nd->id_bytes) != n)
        PROBLEM(AT ": %lld expert ids, expected rows × top-k = %lld × %lld = %lld", AT_ARGS,
                (long long)(rec->expert_ids_bytes / (size_t)nd->id_bytes), (long long)rec->n_rows,
                (long long)k, (long long)n);
    else if (rec->weights_bytes % (size_t)wb)
        PROBLEM(AT ": weights BLOB of %zu bytes is truncated (not a multiple of %lld-byte %s "
                "weights), expected %lld bytes",
                AT_ARGS, rec->weights_bytes, (long long)wb, nd->weight_format, (long long)(n * wb));
    else if ((int64_t)(rec->weights_bytes / (size_t)wb) != n)
        PROBLEM(AT ": %lld router weights, expected rows × top-k = %lld × %lld = %lld", AT_ARGS,
                (long long)(rec->weights_bytes / (size_t)wb), (long long)rec->n_rows, (long long)k,
                (long long)n);
    else {
        mp_status st = grow(sc, n, err);
        if (st != MP_OK)
            return st;
        const uint8_t *ib = rec->expert_ids, *wbuf = rec->weights;
        /* decode and check in one sweep: ids little-endian, then range and repeats per row */
        for (int64_t row = 0; row < rec->n_rows; row++) {
            sc->row_serial++;
            for (int64_t j = 0; j < k; j++) {
                const int64_t i = row * k + j;
                const uint32_t id = nd->id_bytes == 1 ? ib[i] : (uint32_t)(ib[2 * i] | ib[2 * i + 1] << 8);
                if (id >= (uint32_t)E)
                    PROBLEM(AT ", row %lld, slot %lld: expert id %u outside [0, %lld)", AT_ARGS,
                            (long long)row, (long long)j, id, (long long)E);
                if (sc->stamp[id] == sc->row_serial)
                    PROBLEM(AT ", row %lld, slot %lld: expert id %u repeated within the row, "
                            "expected top-k distinct experts",
                            AT_ARGS, (long long)row, (long long)j, id);
                sc->stamp[id] = sc->row_serial;
                sc->ids[i] = (uint16_t)id;
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
                sc->weights[i] = w;
            }
        }
        *ok = true;
        return MP_OK;
    }
    return MP_OK;
}

static mp_status scan_trace(scan *sc, mp_an_emit_fn emit, void *user, mp_error *err)
{
    mp_trace_reader *r = sc->in->trace[sc->ti];
    mp_trace_routing_iter *it = NULL;
    mp_status st = mp_trace_steps_begin(r, &sc->steps, err);
    if (st != MP_OK)
        return st;
    st = mp_trace_routing_begin(r, &it, err);
    if (st != MP_OK)
        return st;
    if ((st = next_step(sc, err)) != MP_OK)
        goto done;
    mp_trace_routing_rec rec;
    int rc;
    while ((rc = mp_trace_routing_next(it, &rec, err)) == 1) {
        sc->n_routing_read++;
        while (sc->have_step &&
               cmp_key(sc->step.request_id, sc->step.step, rec.request_id, rec.step) < 0)
            if ((st = next_step(sc, err)) != MP_OK)
                goto done;
        if (!sc->have_step ||
            cmp_key(sc->step.request_id, sc->step.step, rec.request_id, rec.step) > 0) {
            if ((st = mp_an_problem(sc->pb, "trace %s: request %lld, step %lld, node %lld: "
                                            "routing for a step that the steps table lacks",
                                    sc->path, (long long)rec.request_id, (long long)rec.step,
                                    (long long)rec.node_index)) != MP_OK)
                goto done;
            continue;
        }
        const int32_t p = rec.node_index >= 0 && rec.node_index <= MP_TRACE_MAX_NODE_INDEX
                              ? sc->pos[rec.node_index] : -1;
        if (p < 0) {
            if ((st = mp_an_problem(sc->pb, "trace %s: request %lld (ord %lld), step %lld, node "
                                            "%lld: the node is absent from the node table",
                                    sc->path, (long long)rec.request_id, (long long)sc->step_ord,
                                    (long long)rec.step, (long long)rec.node_index)) != MP_OK)
                goto done;
            continue;
        }
        if (!sc->step_ok)
            continue;
        if (p > sc->nodes_seen &&
            (st = mp_an_problem(sc->pb, "trace %s: request %lld (ord %lld), step %lld: no routing "
                                        "for node %lld, expected one record per node",
                                sc->path, (long long)rec.request_id, (long long)sc->step_ord,
                                (long long)rec.step,
                                (long long)sc->tnodes[sc->nodes_seen].node_index)) != MP_OK)
            goto done;
        sc->nodes_seen = p + 1;
        if (!sc->node_ok[p])
            continue;
        bool ok;
        if ((st = check_record(sc, &rec, p, &ok, err)) != MP_OK)
            goto done;
        if (!ok || !emit || sc->pb->n > 0)
            continue; /* after a problem nothing more is emitted: only validation goes on */
        mp_an_record out = {
            .request_ord = sc->in->meta[sc->ti].request_base + sc->step_ord,
            .step = rec.step,
            .node = p,
            .phase = sc->step_phase,
            .n_rows = rec.n_rows,
            .top_k = sc->tnodes[p].top_k,
            .expert_ids = sc->ids,
            .weights = sc->weights,
        };
        if ((st = emit(user, &out, err)) != MP_OK)
            goto done;
    }
    if (rc < 0) {
        st = (mp_status)rc;
        goto done;
    }
    while (sc->have_step)
        if ((st = next_step(sc, err)) != MP_OK)
            goto done;
    for (int64_t o = 0; o < sc->n_requests; o++)
        if (!sc->has_steps[o] &&
            (st = mp_an_problem(sc->pb, "trace %s: request ord %lld (request %lld): no steps, "
                                        "expected the request's prefill and decode steps",
                                sc->path, (long long)o,
                                (long long)mp_trace_reader_requests(r)[o].request_id)) != MP_OK)
            goto done;
    const mp_trace_run *run = mp_trace_reader_run(r);
    if (run->has_footer && run->footer_n_steps != sc->n_steps_read &&
        (st = mp_an_problem(sc->pb, "trace %s: footer: n_steps %lld, but the steps table has %lld "
                                    "rows",
                            sc->path, (long long)run->footer_n_steps,
                            (long long)sc->n_steps_read)) != MP_OK)
        goto done;
    if (run->has_footer && run->footer_n_routing != sc->n_routing_read &&
        (st = mp_an_problem(sc->pb, "trace %s: footer: n_routing %lld, but the routing table has "
                                    "%lld records",
                            sc->path, (long long)run->footer_n_routing,
                            (long long)sc->n_routing_read)) != MP_OK)
        goto done;
done:
    mp_trace_routing_end(it);
    mp_trace_steps_end(sc->steps);
    sc->steps = NULL;
    return st;
}

mp_status mp_an_scan(mp_an_input *in, mp_an_problems *pb, mp_an_emit_fn emit, void *user,
                     mp_error *err)
{
    if (!f16_ready) {
        for (uint32_t h = 0; h < 65536; h++)
            f16_table[h] = mp_f16_to_f32((mp_f16)h);
        f16_ready = true;
    }
    mp_status st = MP_OK;
    for (int ti = 0; ti < in->n_traces && st == MP_OK; ti++) {
        scan sc;
        memset(&sc, 0, sizeof sc);
        sc.in = in;
        sc.pb = pb;
        sc.ti = ti;
        sc.path = in->meta[ti].path;
        sc.prev_req = -1;
        sc.prev_ord = -1;
        mp_trace_reader *r = in->trace[ti];
        sc.tnodes = mp_trace_reader_nodes(r);
        sc.n_nodes = (int32_t)mp_trace_reader_n_nodes(r);
        sc.n_requests = mp_trace_reader_n_requests(r);
        memset(sc.pos, 0xff, sizeof sc.pos);
        sc.node_ok = calloc((size_t)sc.n_nodes + 1, sizeof *sc.node_ok);
        sc.reqs = malloc(((size_t)sc.n_requests + 1) * sizeof *sc.reqs);
        sc.has_steps = calloc((size_t)sc.n_requests + 1, sizeof *sc.has_steps);
        sc.stamp = calloc(65536, sizeof *sc.stamp);
        if (!sc.node_ok || !sc.reqs || !sc.has_steps || !sc.stamp) {
            st = mp_fail(err, MP_ERR_NOMEM, "analyzer: out of memory");
        } else {
            for (int32_t i = 0; i < sc.n_nodes; i++) {
                const mp_trace_node_info *x = &sc.tnodes[i];
                if (x->node_index >= 0 && x->node_index <= MP_TRACE_MAX_NODE_INDEX)
                    sc.pos[x->node_index] = (int16_t)i;
                const bool ok = x->n_experts >= 1 && x->n_experts <= 65536 && x->top_k >= 1 &&
                                x->top_k <= x->n_experts && x->top_k <= MP_AN_MAX_TOPK &&
                                (x->id_bytes == 2 || (x->id_bytes == 1 && x->n_experts <= 256));
                sc.node_ok[i] = ok ? (uint8_t)mp_trace_weight_bytes(x->weight_format) : 0;
            }
            const mp_trace_request_info *q = mp_trace_reader_requests(r);
            for (int64_t o = 0; o < sc.n_requests; o++)
                sc.reqs[o] = (req_key){q[o].request_id, o};
            qsort(sc.reqs, (size_t)sc.n_requests, sizeof *sc.reqs, by_request_id);
            st = scan_trace(&sc, emit, user, err);
        }
        free(sc.node_ok), free(sc.reqs), free(sc.has_steps), free(sc.stamp);
        free(sc.ids), free(sc.weights);
    }
    return st;
}
