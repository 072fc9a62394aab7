/* collector/import_common.c — the context every format parser emits its records into
 * (import_internal.h): requests, steps and nodes assembled from a record stream, checked in the
 * first pass and written in the second.
 *
 * Invariants: records of one foreign request are contiguous (a request that reappears after
 * another is refused); within a request, steps are numbered from 0 by node wrap-around; all
 * records of one step have the same n_rows; a node keeps one (name, type, top_k) identity.
 */
#include "collector/import_internal.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

const char *mp_import_name(const mp_import_ctx *c) { return c->name; }
int64_t mp_import_n_experts_limit(const mp_import_ctx *c) { return c->n_experts_given; }
void mp_import_note_uniform_weights(mp_import_ctx *c) { c->weights_uniform = true; }

static uint64_t mix(int64_t k)
{
    uint64_t x = (uint64_t)k * 0x9E3779B97F4A7C15ull;
    return x ^ (x >> 29);
}

/* Returns true if key was already in the set (and leaves it there); else inserts it. */
static mp_status done_insert(mp_import_ctx *c, int64_t key, bool *was, mp_error *err)
{
    if (2 * (c->done_n + 1) > c->done_cap) {
        size_t cap = c->done_cap ? 2 * c->done_cap : 64;
        int64_t *t = malloc(cap * sizeof *t);
        if (!t)
            return mp_fail(err, MP_ERR_NOMEM, "%s: out of memory", c->name);
        for (size_t i = 0; i < cap; i++)
            t[i] = INT64_MIN;
        for (size_t i = 0; i < c->done_cap; i++)
            if (c->done_keys[i] != INT64_MIN) {
                size_t j = mix(c->done_keys[i]) & (cap - 1);
                while (t[j] != INT64_MIN)
                    j = (j + 1) & (cap - 1);
                t[j] = c->done_keys[i];
            }
        free(c->done_keys);
        c->done_keys = t;
        c->done_cap = cap;
    }
    size_t j = mix(key) & (c->done_cap - 1);
    while (c->done_keys[j] != INT64_MIN) {
        if (c->done_keys[j] == key) {
            *was = true;
            return MP_OK;
        }
        j = (j + 1) & (c->done_cap - 1);
    }
    c->done_keys[j] = key == INT64_MIN ? INT64_MIN + 1 : key;
    c->done_n++;
    *was = false;
    return MP_OK;
}

static mp_status close_step(mp_import_ctx *c, mp_error *err)
{
    if (c->step < 0)
        return MP_OK;
    if (c->pass == 1) {
        if (c->n_steps == 0) {
            c->first_step_nodes = c->step_nodes;
            snprintf(c->first_step_at, sizeof c->first_step_at, "%s", c->step_at);
        }
        if (c->step_nodes > c->max_step_nodes) {
            if (c->max_step_nodes > 0 && !c->have_partial) { /* every earlier step is short */
                c->have_partial = true;
                c->partial_nodes = c->first_step_nodes;
                snprintf(c->partial_at, sizeof c->partial_at, "%s", c->first_step_at);
            }
            c->max_step_nodes = c->step_nodes;
        } else if (c->step_nodes < c->max_step_nodes && !c->have_partial) {
            c->have_partial = true;
            c->partial_nodes = c->step_nodes;
            snprintf(c->partial_at, sizeof c->partial_at, "%s", c->step_at);
        }
    }
    c->n_steps++;
    if (c->pass == 2)
        return mp_trace_step_end(c->w, -1, err);
    return MP_OK;
}

mp_status mp_import_close_request(mp_import_ctx *c, mp_error *err)
{
    mp_status s;
    if (!c->have_req)
        return MP_OK;
    if ((s = close_step(c, err)))
        return s;
    if (c->pass == 2 && (s = mp_trace_request_end(c->w, c->n_decode_steps, -1, err)))
        return s;
    c->have_req = false;
    return MP_OK;
}

mp_status mp_import_emit(mp_import_ctx *c, const mp_import_rec *r, mp_error *err)
{
    mp_status s;
    const char *nm = c->name, *at = r->where;
    if (r->node_index < 0 || r->node_index > MP_TRACE_MAX_NODE_INDEX)
        return mp_fail(err, MP_ERR_FORMAT, "%s: %s: node index %lld outside [0, %d]", nm, at,
                       (long long)r->node_index, MP_TRACE_MAX_NODE_INDEX);
    if (r->top_k < 1 || r->top_k > 65536)
        return mp_fail(err, MP_ERR_FORMAT, "%s: %s: top_k %lld, expected 1..65536", nm, at,
                       (long long)r->top_k);
    if (r->n_rows < 1 || r->n_rows > (INT64_C(1) << 24))
        return mp_fail(err, MP_ERR_FORMAT, "%s: %s: %lld rows, expected 1..%lld", nm, at,
                       (long long)r->n_rows, (long long)(INT64_C(1) << 24));
    int64_t n = r->n_rows * r->top_k;
    for (int64_t i = 0; i < n; i++) {
        int64_t row = i / r->top_k;
        if (r->ids[i] < 0 || r->ids[i] > 65535 ||
            (c->n_experts_given > 0 && r->ids[i] >= c->n_experts_given))
            return mp_fail(err, MP_ERR_FORMAT, "%s: %s: row %lld: expert id %d outside [0, %lld)",
                           nm, at, (long long)row, r->ids[i],
                           (long long)(c->n_experts_given > 0 ? c->n_experts_given : 65536));
        if (!isfinite(r->weights[i]) || r->weights[i] < 0)
            return mp_fail(err, MP_ERR_FORMAT, "%s: %s: row %lld: weight %g, expected a finite "
                           "value >= 0", nm, at, (long long)row, (double)r->weights[i]);
        for (int64_t j = row * r->top_k; j < i; j++)
            if (r->ids[j] == r->ids[i])
                return mp_fail(err, MP_ERR_FORMAT, "%s: %s: row %lld: expert %d chosen twice", nm,
                               at, (long long)row, r->ids[i]);
        if (r->ids[i] > c->max_id)
            c->max_id = r->ids[i];
    }
    mp_import_node *nd = c->nodes[r->node_index];
    const char *name = r->node_name ? r->node_name : "", *type = r->node_type ? r->node_type : "";
    if (!nd) {
        if (c->pass == 2)
            return mp_fail(err, MP_ERR_INTERNAL, "%s: %s: node %lld unseen in the first pass", nm,
                           at, (long long)r->node_index);
        if (strlen(name) >= MP_IMPORT_NAME_BYTES || strlen(type) >= MP_IMPORT_NAME_BYTES)
            return mp_fail(err, MP_ERR_FORMAT, "%s: %s: node name or type longer than %d bytes",
                           nm, at, MP_IMPORT_NAME_BYTES - 1);
        nd = c->nodes[r->node_index] = calloc(1, sizeof *nd);
        if (!nd)
            return mp_fail(err, MP_ERR_NOMEM, "%s: out of memory", nm);
        snprintf(nd->name, sizeof nd->name, "%s", name);
        snprintf(nd->type, sizeof nd->type, "%s", type);
        nd->top_k = r->top_k;
        nd->layer = r->layer;
    } else if (strcmp(nd->name, name) || strcmp(nd->type, type) || nd->top_k != r->top_k ||
               nd->layer != r->layer) {
        return mp_fail(err, MP_ERR_FORMAT, "%s: %s: node %lld is '%s' (%s, top-%lld) here but "
                       "'%s' (%s, top-%lld) earlier", nm, at, (long long)r->node_index, name, type,
                       (long long)r->top_k, nd->name, nd->type, (long long)nd->top_k);
    }

    if (!c->have_req || r->request_key != c->req_key) {
        if ((s = mp_import_close_request(c, err)))
            return s;
        bool was;
        if ((s = done_insert(c, r->request_key, &was, err)))
            return s;
        if (was)
            return mp_fail(err, MP_ERR_FORMAT, "%s: %s: request %s appears again after other "
                           "requests (records of a request must be contiguous)", nm, at,
                           r->request_ext ? r->request_ext : "?");
        if (c->req_ord > MP_TRACE_MAX_REQUEST_ID)
            return mp_fail(err, MP_ERR_LIMIT, "%s: %s: more than %lld requests", nm, at,
                           (long long)MP_TRACE_MAX_REQUEST_ID);
        c->have_req = true;
        c->req_key = r->request_key;
        c->step = -1;
        c->last_node = -1;
        c->n_decode_steps = 0;
        int first_phase = r->phase < 0 ? MP_PHASE_PREFILL : r->phase;
        int64_t n_prompt = first_phase == MP_PHASE_PREFILL ? r->n_rows : -1;
        if (c->pass == 2 && (s = mp_trace_request_begin(c->w, c->req_ord, r->request_ext, NULL,
                                                        n_prompt, NULL, -1, err)))
            return s;
        c->n_prompt_rows = n_prompt;
        c->req_ord++;
    }
    if (r->node_index <= c->last_node || c->step < 0) {
        if ((s = close_step(c, err)))
            return s;
        c->step++;
        if (c->step > MP_TRACE_MAX_STEP)
            return mp_fail(err, MP_ERR_LIMIT, "%s: %s: more than %lld steps in one request", nm,
                           at, (long long)MP_TRACE_MAX_STEP);
        c->step_rows = r->n_rows;
        c->step_nodes = 0;
        snprintf(c->step_at, sizeof c->step_at, "%s", at ? at : "?");
        c->step_phase = r->phase >= 0 ? r->phase : c->step == 0 ? MP_PHASE_PREFILL : MP_PHASE_DECODE;
        if (c->step_phase == MP_PHASE_DECODE)
            c->n_decode_steps++;
        int64_t pos = c->step_phase == MP_PHASE_DECODE && r->phase < 0 && c->n_prompt_rows >= 0
                          ? c->n_prompt_rows + c->step - 1
                          : (r->phase < 0 ? 0 : -1);
        if (c->pass == 2 &&
            (s = mp_trace_step_begin(c->w, c->step, (mp_phase)c->step_phase, r->n_rows, pos, err)))
            return s;
    } else if (r->n_rows != c->step_rows) {
        return mp_fail(err, MP_ERR_FORMAT, "%s: %s: %lld rows for node %lld, but this step has %lld "
                       "rows", nm, at, (long long)r->n_rows, (long long)r->node_index,
                       (long long)c->step_rows);
    }
    c->last_node = r->node_index;
    c->n_routing++;
    c->step_nodes++;
    if (c->pass == 1) { /* the record found, and the input read up to it */
        mp_progress_add2(c->progress, 1);
        mp_progress_set(c->progress, (int64_t)r->offset);
        return MP_OK;
    }
    mp_progress_add(c->progress, 1);
    return mp_trace_add_routing(c->w, r->node_index, r->n_rows, r->top_k, r->ids, r->weights, err);
}

void mp_import_free_nodes(mp_import_node **nodes)
{
    if (!nodes)
        return;
    for (int i = 0; i < MP_IMPORT_MAX_NODES; i++)
        free(nodes[i]);
    free(nodes);
}

void mp_import_ctx_reset(mp_import_ctx *c)
{
    c->have_req = false;
    c->req_ord = 0;
    c->n_steps = c->n_routing = 0;
    c->done_n = 0;
    for (size_t i = 0; i < c->done_cap; i++)
        c->done_keys[i] = INT64_MIN;
}
