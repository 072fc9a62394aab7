/* collector/trace_check.c — the fail-closed trace reader (see trace_check.h), stage 1: the tables
 * at open (PRAGMA quick_check; run, nodes, requests), the checker's lookup tables built from them,
 * and its life (open, close). Stage 2's iterator over steps and routing records is
 * trace_check_iter.c, the timing rows' checks in the same scan trace_check_timing.c, several traces
 * as one trace_check_merge.c; what they share is trace_check_impl.h.
 *
 * Invariants: a checker is handed out only when every stage 1 check passed or was reported to the
 * sink; its lookup tables (pos, node_ok, reqs, max_experts) are built once, here, and only read
 * by stage 2; every problem goes through problem(), which counts it on the trace.
 */
#include "collector/trace_check_impl.h"

#include <cjson/cJSON.h>
#include <stdlib.h>
#include <string.h>

#include "base/json.h"

/* stage 1: a problem that stops returns from the check function */
#define PROBLEM1(...)                                                                             \
    do {                                                                                          \
        if (problem(c, err, __VA_ARGS__) != MP_OK)                                                \
            return MP_ERR_FORMAT;                                                                 \
    } while (0)

static const char *or_null(const char *s)
{
    return s ? s : "NULL";
}

/* An importer that met a truncation marker (onnxruntime's moe_routing_truncated) records it in
 * the run's config_json as "truncated": true (or a truncation object); such a trace has lost
 * routing and is refused even if its run says complete. */
static bool has_truncation_marker(const mp_trace_run *run)
{
    if (!run->config_json)
        return false;
    cJSON *cfg = cJSON_Parse(run->config_json);
    if (!cfg)
        return false;
    const cJSON *t = cJSON_GetObjectItemCaseSensitive(cfg, "truncated");
    bool marked = t && !cJSON_IsFalse(t) && !cJSON_IsNull(t);
    cJSON_Delete(cfg);
    return marked;
}

static mp_status check_run(mp_trace_check *c, mp_error *err)
{
    const char *path = c->path;
    const mp_trace_run *run = mp_trace_reader_run(c->r);
    if (!run->status || strcmp(run->status, "complete"))
        PROBLEM1("trace %s: run status is '%s', expected 'complete' (the run was interrupted, "
                 "aborted%s%s, or is still being written)",
                 path, or_null(run->status), run->error ? ": " : "", run->error ? run->error : "");
    if (!run->has_footer)
        PROBLEM1("trace %s: footer: missing, expected the footer row that closes a complete run",
                 path);
    const mp_json_mark mark = mp_json_begin();
    const bool truncated = has_truncation_marker(run);
    if (mp_json_failed_since(mark)) /* not "no marker": a failed parse must not pass a trace */
        return mp_fail(err, MP_ERR_NOMEM, "trace %s: out of memory reading run.config_json", path);
    if (truncated)
        PROBLEM1("trace %s: run.config_json: carries a truncation marker (source %s, %s): the "
                 "imported routing lost records, expected an untruncated trace",
                 path, or_null(run->source), or_null(run->source_path));
    return MP_OK;
}

static bool node_usable(const mp_trace_node_info *x)
{
    return x->n_experts >= 1 && x->n_experts <= 65536 && x->top_k >= 1 &&
           x->top_k <= x->n_experts && x->top_k <= MP_TRACE_MAX_TOPK &&
           (x->id_bytes == 2 || (x->id_bytes == 1 && x->n_experts <= 256));
}

static mp_status check_nodes(mp_trace_check *c, mp_error *err)
{
    const char *path = c->path;
    const int64_t n = mp_trace_reader_n_nodes(c->r);
    const mp_trace_node_info *nd = mp_trace_reader_nodes(c->r);
    const mp_trace_run *run = mp_trace_reader_run(c->r);
    if (n < 1)
        PROBLEM1("trace %s: nodes: empty, expected one row per MoE layer", path);
    int64_t max_experts = 0;
    for (int64_t i = 0; i < n; i++) {
        const mp_trace_node_info *x = &nd[i];
        if (x->node_index < 0 || x->node_index > MP_TRACE_MAX_NODE_INDEX)
            PROBLEM1("trace %s: node row %lld: node_index %lld, expected 0..%d", path,
                     (long long)i, (long long)x->node_index, MP_TRACE_MAX_NODE_INDEX);
        if (i > 0 && x->node_index == nd[i - 1].node_index)
            PROBLEM1("trace %s: node %lld: two rows, expected one per node_index", path,
                     (long long)x->node_index);
        if (x->n_experts < 1 || x->n_experts > 65536 || x->top_k < 1 || x->top_k > x->n_experts ||
            x->top_k > MP_TRACE_MAX_TOPK)
            PROBLEM1("trace %s: node %lld: %lld experts, top-%lld, expected 1..65536 experts and "
                     "top-k in 1..min(n_experts, %d)",
                     path, (long long)x->node_index, (long long)x->n_experts, (long long)x->top_k,
                     MP_TRACE_MAX_TOPK);
        if (!(x->id_bytes == 1 && x->n_experts <= 256) && x->id_bytes != 2)
            PROBLEM1("trace %s: node %lld: id_bytes %lld cannot hold ids of %lld experts, expected "
                     "1 (<= 256 experts) or 2",
                     path, (long long)x->node_index, (long long)x->id_bytes,
                     (long long)x->n_experts);
        if (mp_trace_weight_bytes(x->weight_format) == 0)
            PROBLEM1("trace %s: node %lld: weight_format '%s', expected 'f16' or 'f32'", path,
                     (long long)x->node_index, or_null(x->weight_format));
        if (run->n_experts >= 0 && x->n_experts != run->n_experts)
            PROBLEM1("trace %s: node %lld: %lld experts but the run says %lld", path,
                     (long long)x->node_index, (long long)x->n_experts, (long long)run->n_experts);
        if (run->top_k >= 0 && x->top_k != run->top_k)
            PROBLEM1("trace %s: node %lld: top-%lld but the run says top-%lld", path,
                     (long long)x->node_index, (long long)x->top_k, (long long)run->top_k);
        if (x->expert_bytes > (int64_t)1 << 40)
            PROBLEM1("trace %s: node %lld: expert_bytes %lld, expected at most 2^40 (1 TiB) per "
                     "expert", path, (long long)x->node_index, (long long)x->expert_bytes);
        if (x->n_experts > max_experts)
            max_experts = x->n_experts;
    }
    if (run->n_moe_layers >= 0 && run->n_moe_layers != n)
        PROBLEM1("trace %s: nodes: %lld rows but the run says %lld MoE layers", path, (long long)n,
                 (long long)run->n_moe_layers);
    /* n <= 4096 (the schema's node_index range) and max_experts <= 65536: no overflow */
    if (n * max_experts > MP_TRACE_MAX_NODE_EXPERTS)
        PROBLEM1("trace %s: nodes: %lld nodes x %lld experts = %lld (node, expert) pairs, expected "
                 "at most %lld", path, (long long)n, (long long)max_experts,
                 (long long)(n * max_experts), (long long)MP_TRACE_MAX_NODE_EXPERTS);
    return MP_OK;
}

static mp_status check_requests(mp_trace_check *c, mp_error *err)
{
    const char *path = c->path;
    const int64_t n = mp_trace_reader_n_requests(c->r);
    const mp_trace_request_info *q = mp_trace_reader_requests(c->r);
    for (int64_t i = 0; i < n; i++) {
        if (q[i].ord != i)
            PROBLEM1("trace %s: request %lld: ord %lld, expected %lld (requests are numbered 0, 1, "
                     "2, ... in the order they ran: one is missing or repeated)",
                     path, (long long)q[i].request_id, (long long)q[i].ord, (long long)i);
        if (i > 0 && q[i].request_id <= q[i - 1].request_id)
            PROBLEM1("trace %s: request %lld (ord %lld): out of order, expected a request_id above "
                     "%lld (that of ord %lld)",
                     path, (long long)q[i].request_id, (long long)q[i].ord,
                     (long long)q[i - 1].request_id, (long long)q[i - 1].ord);
        if (i > 0 && q[i].start_ns >= 0 && q[i - 1].end_ns >= 0 && q[i].start_ns < q[i - 1].end_ns)
            PROBLEM1("trace %s: request %lld (ord %lld): starts at %lld ns, before request %lld "
                     "ended (%lld ns): overlapping requests, expected one at a time",
                     path, (long long)q[i].request_id, (long long)q[i].ord,
                     (long long)q[i].start_ns, (long long)q[i - 1].request_id,
                     (long long)q[i - 1].end_ns);
        if (q[i].start_ns >= 0 && q[i].end_ns >= 0 && q[i].end_ns < q[i].start_ns)
            PROBLEM1("trace %s: request %lld: ends (%lld ns) before it starts (%lld ns)", path,
                     (long long)q[i].request_id, (long long)q[i].end_ns, (long long)q[i].start_ns);
        /* a repeated external id means the same prompt entry was recorded twice */
        if (q[i].external_id)
            for (int64_t j = 0; j < i; j++)
                if (q[j].external_id && !strcmp(q[j].external_id, q[i].external_id)) {
                    PROBLEM1("trace %s: request %lld (ord %lld): external id '%s' repeats request "
                             "%lld, expected each prompt once",
                             path, (long long)q[i].request_id, (long long)q[i].ord,
                             q[i].external_id, (long long)q[j].request_id);
                    break;
                }
    }
    const mp_trace_run *run = mp_trace_reader_run(c->r);
    if (run->has_footer && run->footer_n_requests != n)
        PROBLEM1("trace %s: footer: n_requests %lld, but the requests table has %lld rows", path,
                 (long long)run->footer_n_requests, (long long)n);
    return MP_OK;
}

void mp_trace_check_close(mp_trace_check *c)
{
    if (!c)
        return;
    mp_trace_reader_close(c->r);
    free(c->node_ok);
    free(c->reqs);
    free(c->served);
    free(c);
}

mp_status mp_trace_check_open(const char *path, mp_trace_problem_fn sink, void *sink_user,
                              mp_trace_check **out, mp_error *err)
{
    *out = NULL;
    mp_trace_check *c = calloc(1, sizeof *c);
    if (!c)
        return mp_fail(err, MP_ERR_NOMEM, "trace %s: out of memory", path);
    c->sink = sink;
    c->sink_user = sink_user;
    mp_status st = mp_trace_reader_open(path, &c->r, err);
    if (st) {
        free(c);
        return st;
    }
    c->path = mp_trace_reader_path(c->r);
    if ((st = mp_trace_reader_quick_check(c->r, err))) {
        if (st != MP_ERR_FORMAT || problem(c, err, "%s", err->msg) != MP_OK) {
            mp_trace_check_close(c);
            return st;
        }
        st = MP_OK;
    }
    if ((st = check_run(c, err)) || (st = check_nodes(c, err)) || (st = check_requests(c, err))) {
        mp_trace_check_close(c);
        return st;
    }
    const int64_t n_nodes = mp_trace_reader_n_nodes(c->r);
    const mp_trace_node_info *nd = mp_trace_reader_nodes(c->r);
    c->n_nodes = (int32_t)(n_nodes <= MP_TRACE_MAX_NODE_INDEX + 1 ? n_nodes : 0);
    c->n_requests = mp_trace_reader_n_requests(c->r);
    memset(c->pos, 0xff, sizeof c->pos);
    c->node_ok = calloc((size_t)c->n_nodes + 1, sizeof *c->node_ok);
    c->reqs = malloc(((size_t)c->n_requests + 1) * sizeof *c->reqs);
    c->served = calloc((size_t)c->n_nodes + 1, sizeof *c->served);
    if (!c->node_ok || !c->reqs || !c->served) {
        mp_trace_check_close(c);
        return mp_fail(err, MP_ERR_NOMEM, "trace %s: out of memory", path);
    }
    for (int32_t i = 0; i < c->n_nodes; i++) {
        const mp_trace_node_info *x = &nd[i];
        if (x->node_index >= 0 && x->node_index <= MP_TRACE_MAX_NODE_INDEX)
            c->pos[x->node_index] = (int16_t)i;
        const bool ok = node_usable(x);
        c->node_ok[i] = ok ? (uint8_t)mp_trace_weight_bytes(x->weight_format) : 0;
        if (ok && x->n_experts > c->max_experts)
            c->max_experts = x->n_experts;
    }
    const mp_trace_request_info *q = mp_trace_reader_requests(c->r);
    for (int64_t o = 0; o < c->n_requests; o++)
        c->reqs[o] = (req_key){q[o].request_id, o};
    qsort(c->reqs, (size_t)c->n_requests, sizeof *c->reqs, by_request_id);
    *out = c;
    return MP_OK;
}

mp_trace_reader *mp_trace_check_reader(const mp_trace_check *c) { return c->r; }
int64_t mp_trace_check_problems(const mp_trace_check *c) { return c->n_problems; }
