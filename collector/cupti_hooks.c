/* collector/cupti_hooks.c — the hooks of `collect --cupti` (cupti.h): tag the GPU work of each
 * (request, step, layer) with an external correlation id, and store the records at step_end.
 *
 * Flushing at every step_end (not per request, not at the end) because the trace stores a record
 * only inside an open step (mp_trace_add_cupti), and because it bounds memory by one step's
 * activity. Records land in the transaction of the step being closed; each carries its own
 * (request, step, node), so one issued before the first step (e.g. a weight upload) is simply
 * stored uncorrelated there. Invariant: state->depth ids pushed by these hooks are on the
 * calling thread's CUPTI stack (0 between steps).
 */
#include <string.h>

#include "collector/cupti.h"

static void keep(mp_cupti_hooks_state *h, mp_status s)
{
    if (s != MP_OK && h->status == MP_OK)
        h->status = s;
}

static void push(mp_cupti_hooks_state *h, int64_t node)
{
    if (h->status != MP_OK)
        return;
    mp_status s = mp_cupti_push(h->cupti, h->request_id, h->step, node, &h->error);
    keep(h, s);
    if (s == MP_OK)
        h->depth++;
}

static void pop(mp_cupti_hooks_state *h)
{
    if (h->depth == 0)
        return;
    h->depth--;
    mp_error e;
    mp_status s = mp_cupti_pop(h->cupti, h->status == MP_OK ? &h->error : &e);
    keep(h, s);
}

static void hk_request_begin(void *u, int64_t request_id, const int32_t *tokens, int64_t n)
{
    mp_cupti_hooks_state *h = u;
    if (h->inner.request_begin)
        h->inner.request_begin(h->inner.user, request_id, tokens, n);
}

static void hk_step_begin(void *u, int64_t request_id, int64_t step, mp_phase phase,
                          int64_t n_rows, int64_t pos)
{
    mp_cupti_hooks_state *h = u;
    if (h->inner.step_begin)
        h->inner.step_begin(h->inner.user, request_id, step, phase, n_rows, pos);
    h->request_id = request_id;
    h->step = step;
    push(h, -1); /* work of the step outside any layer: embedding, output head */
}

static void hk_layer_begin(void *u, int64_t layer)
{
    mp_cupti_hooks_state *h = u;
    if (h->inner.layer_begin)
        h->inner.layer_begin(h->inner.user, layer);
    /* collect writes one node per layer with node_index = layer */
    push(h, layer >= 0 && layer <= MP_TRACE_MAX_NODE_INDEX ? layer : -1);
}

static void hk_layer_end(void *u, int64_t layer)
{
    mp_cupti_hooks_state *h = u;
    pop(h);
    if (h->inner.layer_end)
        h->inner.layer_end(h->inner.user, layer);
}

static void hk_routing(void *u, int64_t layer, int64_t n_rows, int64_t top_k, const int32_t *ids,
                       const float *weights)
{
    mp_cupti_hooks_state *h = u;
    if (h->inner.routing)
        h->inner.routing(h->inner.user, layer, n_rows, top_k, ids, weights);
}

static void hk_moe_timing(void *u, int64_t layer, const mp_moe_timing *t)
{
    mp_cupti_hooks_state *h = u;
    if (h->inner.moe_timing)
        h->inner.moe_timing(h->inner.user, layer, t);
}

static void hk_step_end(void *u, int64_t duration_ns)
{
    mp_cupti_hooks_state *h = u;
    while (h->depth > 0) /* the step's id, and a layer's if the forward pass left it open */
        pop(h);
    if (h->status == MP_OK)
        keep(h, mp_cupti_flush(h->cupti, h->sink, h->sink_user, &h->error));
    if (h->inner.step_end)
        h->inner.step_end(h->inner.user, duration_ns);
}

static void hk_request_end(void *u, int64_t n_generated)
{
    mp_cupti_hooks_state *h = u;
    if (h->inner.request_end)
        h->inner.request_end(h->inner.user, n_generated);
}

mp_hooks mp_cupti_hooks(mp_cupti_hooks_state *state, mp_cupti *c, const mp_hooks *inner,
                        mp_cupti_sink_fn sink, void *sink_user)
{
    memset(state, 0, sizeof *state);
    state->inner = *inner;
    state->cupti = c;
    state->sink = sink;
    state->sink_user = sink_user;
    state->status = MP_OK;
    return (mp_hooks){
        .user = state,
        .request_begin = hk_request_begin,
        .step_begin = hk_step_begin,
        .routing = hk_routing,
        .moe_timing = hk_moe_timing,
        .step_end = hk_step_end,
        .request_end = hk_request_end,
        .layer_begin = hk_layer_begin,
        .layer_end = hk_layer_end,
    };
}

mp_status mp_cupti_sink_trace(void *user, const mp_trace_cupti_rec *rec, mp_error *err)
{
    return mp_trace_add_cupti(user, rec, err);
}

mp_status mp_cupti_sink_async(void *user, const mp_trace_cupti_rec *rec, mp_error *err)
{
    mp_trace_async_add_cupti(user, rec);
    return MP_OK; /* the writer thread's errors (and out of memory) surface at async stop */
}
