/* collector/route_replay.c — route replay from a trace (see collector/route_replay.h).
 *
 * The whole trace's routing is read once, at open, through the collector's fail-closed reader
 * (collector/trace_check.h: every record checked, as the analyzer and the simulator read it) into
 * one array of rows per layer; a step's routes are then copies out of memory. (Reading the trace as the run goes, one iterator
 * per layer each skipping the other nodes' records, cost a decode step 0.18 ms at 48 layers on
 * the H200 host, 2026-11-29: 4.46 against 4.28 ms per token all-GPU, bench/results/
 * 2026-11-29-h200-decode-ab.txt. That made every replayed measurement slower than production.)
 */
#include "collector/route_replay.h"

#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/sha256.h"
#include "collector/trace_check.h"
#include "collector/trace_read.h"

#define RR_MAX_RECORD_VALUES ((int64_t)1 << 26) /* ids of one record (n_rows × top_k) */
#define RR_MAX_VALUES ((int64_t)1 << 27) /* ids of the whole trace held in memory (1 GiB with weights) */

typedef struct rr_layer {
    int64_t node_index;
    int32_t *ids;                /* (n_rows, top_k) every routing row of the node, in trace order */
    float *w;                    /* (n_rows, top_k) */
    int64_t n_rows, cap_rows;
    int64_t cursor;              /* the next row to replay */
    int64_t rows_served;
    int64_t wraps;
} rr_layer;

struct mp_route_replay {
    mp_trace_check *c;
    mp_trace_reader *r;          /* c's */
    char *path;
    int64_t n_layer, n_expert, top_k;
    rr_layer *layers;            /* (n_layer) */
    mp_error err;                /* why the source stopped a run */
    char sha256[65];
};


void mp_route_replay_close(mp_route_replay *rr)
{
    if (!rr)
        return;
    for (int64_t i = 0; rr->layers && i < rr->n_layer; i++) {
        free(rr->layers[i].ids);
        free(rr->layers[i].w);
    }
    free(rr->layers);
    mp_trace_check_close(rr->c);
    free(rr->path);
    free(rr);
}

/* Read every routing record of the trace into its layer's rows (the checked iterator: ids in range
 * and distinct, weights finite), and refuse a node without rows or a trace larger than
 * RR_MAX_VALUES routes. */
static mp_status load_routes(mp_route_replay *rr, mp_error *err)
{
    mp_trace_check_iter *it = NULL;
    mp_status st = mp_trace_check_begin(rr->c, -1, &it, err);
    if (st)
        return mp_error_prefix(err, "route replay");
    const int64_t K = rr->top_k;
    int64_t total = 0;
    for (;;) {
        mp_trace_checked_rec rec;
        const int rc = mp_trace_check_next(it, &rec, err);
        if (rc <= 0) {
            st = rc < 0 ? mp_error_prefix(err, "route replay") : MP_OK;
            break;
        }
        rr_layer *L = NULL;
        for (int64_t l = 0; l < rr->n_layer && !L; l++) /* nodes are few: a scan */
            if (rr->layers[l].node_index == rec.node_index)
                L = &rr->layers[l];
        if (!L)
            continue;
        if (rec.n_rows < 1 || rec.n_rows > RR_MAX_RECORD_VALUES / K) {
            st = mp_fail(err, MP_ERR_LIMIT, "route replay: trace %s: routing (request %" PRId64 ", step %" PRId64
                         ", node %" PRId64 "): %" PRId64 " rows, expected 1..%" PRId64, rr->path, rec.request_id,
                         rec.step, rec.node_index, rec.n_rows, RR_MAX_RECORD_VALUES / K);
            break;
        }
        total += rec.n_rows * K;
        if (total > RR_MAX_VALUES) {
            st = mp_fail(err, MP_ERR_LIMIT, "route replay: trace %s: more than %" PRId64 " routes: replay holds "
                         "the trace in memory; replay a shorter trace", rr->path, RR_MAX_VALUES);
            break;
        }
        if (L->n_rows + rec.n_rows > L->cap_rows) {
            int64_t cap = L->cap_rows ? 2 * L->cap_rows : 256;
            while (cap < L->n_rows + rec.n_rows)
                cap *= 2;
            int32_t *ids = realloc(L->ids, (size_t)(cap * K) * sizeof *ids);
            if (ids)
                L->ids = ids;
            float *w = realloc(L->w, (size_t)(cap * K) * sizeof *w);
            if (w)
                L->w = w;
            if (!ids || !w) {
                st = mp_fail(err, MP_ERR_NOMEM, "route replay: out of memory for %" PRId64 " routing rows",
                             cap);
                break;
            }
            L->cap_rows = cap;
        }
        const int64_t n = rec.n_rows * K;
        int32_t *ids = L->ids + L->n_rows * K;
        float *w = L->w + L->n_rows * K;
        for (int64_t i = 0; i < n; i++) { /* checked: ids < n_experts, weights finite, >= 0 */
            ids[i] = rec.expert_ids[i];
            w[i] = rec.weights[i];
        }
        L->n_rows += rec.n_rows;
    }
    mp_trace_check_end(it);
    for (int64_t l = 0; !st && l < rr->n_layer; l++)
        if (rr->layers[l].n_rows == 0)
            st = mp_fail(err, MP_ERR_FORMAT, "route replay: trace %s: node %" PRId64 " has no routing rows",
                         rr->path, rr->layers[l].node_index);
    return st;
}

mp_status mp_route_replay_open(const char *trace_path, int64_t n_layer, int64_t n_expert,
                               int64_t top_k, mp_route_replay **out, mp_error *err)
{
    *out = NULL;
    mp_route_replay *rr = calloc(1, sizeof *rr);
    if (!rr || !(rr->path = strdup(trace_path))) {
        free(rr);
        return mp_fail(err, MP_ERR_NOMEM, "route replay: out of memory");
    }
    rr->n_layer = n_layer;
    rr->n_expert = n_expert;
    rr->top_k = top_k;
    mp_status st = mp_trace_check_open(trace_path, NULL, NULL, &rr->c, err); /* fail closed */
    if (st) {
        mp_error_prefix(err, "route replay");
        goto fail;
    }
    rr->r = mp_trace_check_reader(rr->c);
    const int64_t n_nodes = mp_trace_reader_n_nodes(rr->r);
    const mp_trace_node_info *nodes = mp_trace_reader_nodes(rr->r);
    bool match = n_nodes == n_layer;
    for (int64_t i = 0; match && i < n_nodes; i++)
        match = nodes[i].n_experts == n_expert && nodes[i].top_k == top_k;
    if (!match) {
        const int64_t ne = n_nodes ? nodes[0].n_experts : -1, k = n_nodes ? nodes[0].top_k : -1;
        st = mp_fail(err, MP_ERR_FORMAT, "route replay: trace %s has %" PRId64 " MoE nodes × %"
                     PRId64 " experts × top-%" PRId64 "%s, the model has %" PRId64 " layers × %"
                     PRId64 " experts × top-%" PRId64 ": the geometry must match", trace_path,
                     n_nodes, ne, k, n_nodes > 1 ? " (node 0)" : "", n_layer, n_expert, top_k);
        for (int64_t i = 1; i < n_nodes && n_nodes == n_layer; i++)
            if (nodes[i].n_experts != ne || nodes[i].top_k != k) {
                mp_fail(err, MP_ERR_FORMAT, "route replay: trace %s: node %" PRId64 " has %" PRId64
                        " experts × top-%" PRId64 ", the model %" PRId64 " × top-%" PRId64
                        ": the geometry must match", trace_path, nodes[i].node_index,
                        nodes[i].n_experts, nodes[i].top_k, n_expert, top_k);
                break;
            }
        goto fail;
    }
    rr->layers = calloc((size_t)n_layer, sizeof *rr->layers);
    if (!rr->layers) {
        st = mp_fail(err, MP_ERR_NOMEM, "route replay: out of memory");
        goto fail;
    }
    for (int64_t i = 0; i < n_layer; i++)
        rr->layers[i].node_index = nodes[i].node_index;
    if ((st = load_routes(rr, err)) || (st = mp_sha256_file(trace_path, "trace", rr->sha256, NULL, err)))
        goto fail;
    *out = rr;
    return MP_OK;
fail:
    mp_route_replay_close(rr);
    return st;
}

static int replay_route(void *user, int64_t layer, int64_t n_rows, int64_t top_k,
                        int32_t *expert_ids, float *weights)
{
    mp_route_replay *rr = user;
    if (layer < 0 || layer >= rr->n_layer || top_k != rr->top_k)
        return mp_fail(&rr->err, MP_ERR_INTERNAL, "route replay: asked for layer %" PRId64
                       " top-%" PRId64 ", opened for %" PRId64 " layers top-%" PRId64, layer,
                       top_k, rr->n_layer, rr->top_k);
    rr_layer *L = &rr->layers[layer];
    for (int64_t r = 0; r < n_rows; r++) {
        if (L->cursor == L->n_rows) { /* the stream ran out: from the trace's first row again */
            L->cursor = 0;
            L->wraps++;
        }
        memcpy(expert_ids + r * top_k, L->ids + L->cursor * top_k, (size_t)top_k * sizeof *expert_ids);
        memcpy(weights + r * top_k, L->w + L->cursor * top_k, (size_t)top_k * sizeof *weights);
        L->cursor++;
    }
    L->rows_served += n_rows;
    return 0;
}

/* Every layer's stream from the trace's first row again (what it served stays counted). */
static void replay_restart(void *user)
{
    mp_route_replay *rr = user;
    for (int64_t il = 0; il < rr->n_layer; il++)
        rr->layers[il].cursor = 0;
}

mp_route_source mp_route_replay_source(mp_route_replay *rr)
{
    return (mp_route_source){.user = rr, .route = replay_route, .restart = replay_restart};
}

const mp_error *mp_route_replay_error(const mp_route_replay *rr)
{
    return &rr->err;
}

int64_t mp_route_replay_rows(const mp_route_replay *rr)
{
    return rr->n_layer ? rr->layers[0].rows_served : 0;
}

int64_t mp_route_replay_wraps(const mp_route_replay *rr)
{
    return rr->n_layer ? rr->layers[0].wraps : 0;
}

const char *mp_route_replay_sha256(const mp_route_replay *rr)
{
    return rr->sha256;
}

/* ---- the function table for `moeplan run` ---- */

static mp_status api_open(const char *path, int64_t n_layer, int64_t n_expert, int64_t top_k,
                          void **state, mp_route_source *src, mp_error *err)
{
    mp_route_replay *rr;
    mp_status st = mp_route_replay_open(path, n_layer, n_expert, top_k, &rr, err);
    if (st)
        return st;
    *state = rr;
    *src = mp_route_replay_source(rr);
    return MP_OK;
}

static const mp_error *api_error(const void *state)
{
    return mp_route_replay_error(state);
}

static void api_describe(const void *state, char *buf, size_t cap)
{
    const mp_route_replay *rr = state;
    snprintf(buf, cap, "routing replayed from %s: %" PRId64 " rows per layer, %" PRId64
             " wrap(s)", rr->path, mp_route_replay_rows(rr), mp_route_replay_wraps(rr));
}

static void api_close(void *state)
{
    mp_route_replay_close(state);
}

const mp_route_replay_api mp_route_replay_ops = {
    .open = api_open, .error = api_error, .describe = api_describe, .close = api_close};
