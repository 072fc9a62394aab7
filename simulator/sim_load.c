/* simulator/sim_load.c — load a moeplan trace (collector/trace_read.h) into an mp_sim_trace.
 *
 * Fails closed on anything the replay cannot interpret: a trace that is not complete (status and
 * footer), nodes of unequal geometry, a step missing a node or with rows that differ between its
 * nodes, blobs of the wrong size, routing records fewer or more than the footer says. Each error
 * names the trace file and the routing record (request, step, node).
 */
#include "simulator/sim_load.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "collector/trace_read.h"

static mp_status fail_rec(mp_error *err, const char *path, const mp_trace_routing_rec *rec, const char *what)
{
    return mp_fail(err, MP_ERR_FORMAT, "trace %s: routing record (request %lld, step %lld, node %lld): %s", path,
                   (long long)rec->request_id, (long long)rec->step, (long long)rec->node_index, what);
}

mp_status mp_sim_load_trace(const char *path, const mp_sim_load_options *opt, mp_sim_trace *out,
                            mp_sim_trace_facts *facts, mp_error *err)
{
    memset(out, 0, sizeof *out);
    memset(facts, 0, sizeof *facts);
    mp_trace_reader *r;
    mp_status st = mp_trace_reader_open(path, &r, err);
    if (st)
        return st;
    const mp_trace_run *run = mp_trace_reader_run(r);
    int64_t n_nodes = mp_trace_reader_n_nodes(r);
    const mp_trace_node_info *nodes = mp_trace_reader_nodes(r);
    uint32_t *model_layer = NULL;
    int32_t *ids32 = NULL;
    uint16_t *block = NULL;
    mp_trace_routing_iter *it = NULL;
    if (!run->status || strcmp(run->status, "complete") != 0 || !run->has_footer) {
        st = mp_fail(err, MP_ERR_FORMAT, "trace %s: status '%s'%s: expected a complete trace (status 'complete' and a footer)",
                     path, run->status ? run->status : "NULL", run->has_footer ? "" : ", no footer");
        goto done;
    }
    if (n_nodes < 1 || n_nodes > MP_STRP_MAX_DIM) {
        st = mp_fail(err, MP_ERR_FORMAT, "trace %s: %lld nodes: expected 1..%u MoE nodes", path, (long long)n_nodes,
                     MP_STRP_MAX_DIM);
        goto done;
    }
    model_layer = malloc(sizeof *model_layer * (size_t)n_nodes);
    if (!model_layer) {
        st = mp_fail(err, MP_ERR_NOMEM, "trace %s: out of memory", path);
        goto done;
    }
    for (int64_t i = 0; i < n_nodes; i++) {
        const mp_trace_node_info *n = &nodes[i];
        if (n->node_index < 0 || (i > 0 && n->node_index <= nodes[i - 1].node_index) || n->n_experts != nodes[0].n_experts || n->top_k != nodes[0].top_k || n->layer < 0 ||
            n->layer >= MP_STRP_MAX_DIM || (i > 0 && n->layer <= nodes[i - 1].layer)) {
            st = mp_fail(err, MP_ERR_FORMAT,
                         "trace %s: node %lld (index %lld, layer %lld, %lld experts, top-%lld): expected increasing "
                         "node indices and layers with the experts and top-k of node 0 (%lld, %lld)",
                         path, (long long)i, (long long)n->node_index, (long long)n->layer, (long long)n->n_experts,
                         (long long)n->top_k, (long long)nodes[0].n_experts, (long long)nodes[0].top_k);
            goto done;
        }
        model_layer[i] = (uint32_t)n->layer;
    }
    if (nodes[0].n_experts < 1 || nodes[0].n_experts > MP_STRP_MAX_DIM || nodes[0].top_k < 1 ||
        nodes[0].top_k > nodes[0].n_experts) {
        st = mp_fail(err, MP_ERR_FORMAT, "trace %s: nodes have %lld experts, top-%lld: expected 1 <= top-k <= experts <= %u",
                     path, (long long)nodes[0].n_experts, (long long)nodes[0].top_k, MP_STRP_MAX_DIM);
        goto done;
    }
    const uint32_t L = (uint32_t)n_nodes, E = (uint32_t)nodes[0].n_experts, K = (uint32_t)nodes[0].top_k;
    if ((st = mp_sim_trace_init(out, L, E, K, model_layer, err)))
        goto done;
    facts->expert_bytes = nodes[0].expert_bytes;
    facts->n_embd = run->n_embd;
    facts->n_ff = run->n_ff_expert;
    snprintf(facts->model_sha256, sizeof facts->model_sha256, "%s", run->model_sha256 ? run->model_sha256 : "");
    snprintf(facts->quant, sizeof facts->quant, "%s", run->quant_types ? run->quant_types : "");

    if ((st = mp_trace_routing_begin(r, &it, err)))
        goto done;
    /* One step at a time: L records in node order with equal n_rows, then the step is added. */
    uint64_t cap_rows = 0;
    int64_t cur_req = -1, cur_step = -1, n_records = 0;
    uint32_t have = 0, rows = 0;
    mp_trace_routing_rec rec;
    int rc;
    char where[160];
    while ((rc = mp_trace_routing_next(it, &rec, err)) == 1) {
        n_records++;
        if (rec.request_id != cur_req || rec.step != cur_step) {
            if (have != 0) {
                st = fail_rec(err, path, &rec, "the previous step lacks nodes: expected every node in every step");
                goto done;
            }
            cur_req = rec.request_id;
            cur_step = rec.step;
            rows = 0;
        }
        if (rec.node_index != nodes[have].node_index) {
            st = fail_rec(err, path, &rec, "node out of sequence: expected every node of the step, in order");
            goto done;
        }
        if (rec.n_rows < 1 || (uint64_t)rec.n_rows > UINT32_MAX / ((uint64_t)K * L) || (have > 0 && rec.n_rows != rows)) {
            st = fail_rec(err, path, &rec, "n_rows invalid or different from the step's first node");
            goto done;
        }
        rows = (uint32_t)rec.n_rows;
        uint64_t n = (uint64_t)rows * K;
        if (have == 0 && rows > cap_rows) {
            free(ids32);
            free(block);
            ids32 = malloc(sizeof *ids32 * n);
            block = malloc(sizeof *block * n * L);
            if (!ids32 || !block) {
                st = mp_fail(err, MP_ERR_NOMEM, "trace %s: out of memory for a step of %u rows", path, rows);
                goto done;
            }
            cap_rows = rows;
        }
        if ((st = mp_trace_decode_ids(rec.expert_ids, rec.expert_ids_bytes, nodes[have].id_bytes, (int64_t)n, ids32, err))) {
            mp_error_prefix(err, "trace %s: routing record (request %lld, step %lld, node %lld)", path,
                            (long long)rec.request_id, (long long)rec.step, (long long)rec.node_index);
            goto done;
        }
        for (uint64_t i = 0; i < n; i++) {
            if (ids32[i] < 0 || (uint32_t)ids32[i] >= E) {
                st = fail_rec(err, path, &rec, "expert id out of range");
                goto done;
            }
            block[(uint64_t)have * n + i] = (uint16_t)ids32[i];
        }
        if (++have == L) {
            if (rec.request_id < 0 || rec.request_id > UINT32_MAX) {
                st = fail_rec(err, path, &rec, "request id out of range");
                goto done;
            }
            snprintf(where, sizeof where, "trace %s: step (request %lld, step %lld)", path, (long long)rec.request_id,
                     (long long)rec.step);
            if (opt && opt->as_decode) {
                /* every row becomes a one-row step: real routing replayed as if decoded */
                uint16_t *one = malloc(sizeof *one * (size_t)L * K);
                if (!one) {
                    st = mp_fail(err, MP_ERR_NOMEM, "trace %s: out of memory", path);
                    goto done;
                }
                for (uint32_t row = 0; row < rows && !st; row++) {
                    for (uint32_t l = 0; l < L; l++)
                        memcpy(one + (size_t)l * K, block + (uint64_t)l * n + (uint64_t)row * K, sizeof *one * K);
                    st = mp_sim_trace_add_step(out, (uint32_t)rec.request_id, 1, one, where, err);
                }
                free(one);
            } else {
                st = mp_sim_trace_add_step(out, (uint32_t)rec.request_id, rows, block, where, err);
            }
            if (st)
                goto done;
            have = 0;
        }
    }
    if (rc < 0) {
        st = (mp_status)rc;
        goto done;
    }
    if (have != 0) {
        st = mp_fail(err, MP_ERR_FORMAT, "trace %s: the last step (request %lld, step %lld) lacks nodes %u..%u", path,
                     (long long)cur_req, (long long)cur_step, have, L - 1);
        goto done;
    }
    if (n_records != run->footer_n_routing) {
        st = mp_fail(err, MP_ERR_FORMAT, "trace %s: %lld routing records: expected the footer's %lld", path,
                     (long long)n_records, (long long)run->footer_n_routing);
        goto done;
    }
    if (out->n_steps == 0)
        st = mp_fail(err, MP_ERR_FORMAT, "trace %s: no routing records: expected at least one step", path);
done:
    if (it)
        mp_trace_routing_end(it);
    free(model_layer);
    free(ids32);
    free(block);
    mp_trace_reader_close(r);
    if (st)
        mp_sim_trace_free(out);
    return st;
}
