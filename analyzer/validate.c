/* analyzer/validate.c — stage 1 of validation (see validate.h): run, footer presence, truncation
 * marker, node table, requests table, and agreement between merged traces. */
#include "analyzer/validate.h"

#include <cjson/cJSON.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

mp_status mp_an_problems_init(mp_an_problems *pb, int64_t max, mp_error *err)
{
    pb->max = max < 1 ? 1 : max;
    pb->n = 0;
    pb->msg = calloc((size_t)pb->max, sizeof *pb->msg);
    if (!pb->msg)
        return mp_fail(err, MP_ERR_NOMEM, "analyzer: out of memory for %lld problems",
                       (long long)max);
    return MP_OK;
}

void mp_an_problems_free(mp_an_problems *pb)
{
    if (pb->msg)
        for (int64_t i = 0; i < pb->n; i++)
            free(pb->msg[i]);
    free(pb->msg);
    pb->msg = NULL;
    pb->n = 0;
}

mp_status mp_an_problem(mp_an_problems *pb, const char *fmt, ...)
{
    if (pb->n >= pb->max)
        return MP_ERR_FORMAT;
    mp_error line;
    va_list ap;
    va_start(ap, fmt);
    mp_failv(&line, MP_ERR_FORMAT, fmt, ap); /* one line, newlines flattened */
    va_end(ap);
    pb->msg[pb->n++] = strdup(line.msg);
    return pb->n >= pb->max ? MP_ERR_FORMAT : MP_OK;
}

#define PROBLEM(...)                                                                              \
    do {                                                                                          \
        if (mp_an_problem(pb, __VA_ARGS__) != MP_OK)                                              \
            return MP_ERR_FORMAT;                                                                 \
    } while (0)

static bool str_eq_null(const char *a, const char *b)
{
    return (!a && !b) || (a && b && !strcmp(a, b));
}

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

static mp_status check_run(const char *path, const mp_trace_run *run, mp_an_problems *pb)
{
    if (!run->status || strcmp(run->status, "complete"))
        PROBLEM("trace %s: run status is '%s', expected 'complete' (the run was interrupted, "
                "aborted%s%s, or is still being written)",
                path, or_null(run->status), run->error ? ": " : "", run->error ? run->error : "");
    if (!run->has_footer)
        PROBLEM("trace %s: footer: missing, expected the footer row that closes a complete run",
                path);
    if (has_truncation_marker(run))
        PROBLEM("trace %s: run.config_json: carries a truncation marker (source %s, %s): the "
                "imported routing lost records, expected an untruncated trace",
                path, or_null(run->source), or_null(run->source_path));
    return MP_OK;
}

static mp_status check_nodes(const char *path, const mp_trace_reader *r, mp_an_problems *pb)
{
    const int64_t n = mp_trace_reader_n_nodes(r);
    const mp_trace_node_info *nd = mp_trace_reader_nodes(r);
    const mp_trace_run *run = mp_trace_reader_run(r);
    if (n < 1)
        PROBLEM("trace %s: nodes: empty, expected one row per MoE layer", path);
    for (int64_t i = 0; i < n; i++) {
        const mp_trace_node_info *x = &nd[i];
        if (x->n_experts < 1 || x->n_experts > 65536 || x->top_k < 1 || x->top_k > x->n_experts ||
            x->top_k > MP_AN_MAX_TOPK)
            PROBLEM("trace %s: node %lld: %lld experts, top-%lld, expected 1..65536 experts and "
                    "top-k in 1..min(n_experts, %d)",
                    path, (long long)x->node_index, (long long)x->n_experts, (long long)x->top_k,
                    MP_AN_MAX_TOPK);
        if (!(x->id_bytes == 1 && x->n_experts <= 256) && x->id_bytes != 2)
            PROBLEM("trace %s: node %lld: id_bytes %lld cannot hold ids of %lld experts, expected "
                    "1 (<= 256 experts) or 2",
                    path, (long long)x->node_index, (long long)x->id_bytes,
                    (long long)x->n_experts);
        if (mp_trace_weight_bytes(x->weight_format) == 0)
            PROBLEM("trace %s: node %lld: weight_format '%s', expected 'f16' or 'f32'", path,
                    (long long)x->node_index, or_null(x->weight_format));
        if (run->n_experts >= 0 && x->n_experts != run->n_experts)
            PROBLEM("trace %s: node %lld: %lld experts but the run says %lld", path,
                    (long long)x->node_index, (long long)x->n_experts, (long long)run->n_experts);
        if (run->top_k >= 0 && x->top_k != run->top_k)
            PROBLEM("trace %s: node %lld: top-%lld but the run says top-%lld", path,
                    (long long)x->node_index, (long long)x->top_k, (long long)run->top_k);
    }
    if (run->n_moe_layers >= 0 && run->n_moe_layers != n)
        PROBLEM("trace %s: nodes: %lld rows but the run says %lld MoE layers", path, (long long)n,
                (long long)run->n_moe_layers);
    return MP_OK;
}

static mp_status check_requests(const char *path, const mp_trace_reader *r, mp_an_problems *pb)
{
    const int64_t n = mp_trace_reader_n_requests(r);
    const mp_trace_request_info *q = mp_trace_reader_requests(r);
    for (int64_t i = 0; i < n; i++) {
        if (q[i].ord != i)
            PROBLEM("trace %s: request %lld: ord %lld, expected %lld (requests are numbered 0, 1, "
                    "2, ... in the order they ran: one is missing or repeated)",
                    path, (long long)q[i].request_id, (long long)q[i].ord, (long long)i);
        if (i > 0 && q[i].request_id <= q[i - 1].request_id)
            PROBLEM("trace %s: request %lld (ord %lld): out of order, expected a request_id above "
                    "%lld (that of ord %lld)",
                    path, (long long)q[i].request_id, (long long)q[i].ord,
                    (long long)q[i - 1].request_id, (long long)q[i - 1].ord);
        if (i > 0 && q[i].start_ns >= 0 && q[i - 1].end_ns >= 0 && q[i].start_ns < q[i - 1].end_ns)
            PROBLEM("trace %s: request %lld (ord %lld): starts at %lld ns, before request %lld "
                    "ended (%lld ns): overlapping requests, expected one at a time",
                    path, (long long)q[i].request_id, (long long)q[i].ord,
                    (long long)q[i].start_ns, (long long)q[i - 1].request_id,
                    (long long)q[i - 1].end_ns);
        if (q[i].start_ns >= 0 && q[i].end_ns >= 0 && q[i].end_ns < q[i].start_ns)
            PROBLEM("trace %s: request %lld: ends (%lld ns) before it starts (%lld ns)", path,
                    (long long)q[i].request_id, (long long)q[i].end_ns, (long long)q[i].start_ns);
        /* a repeated external id means the same prompt entry was recorded twice */
        if (q[i].external_id)
            for (int64_t j = 0; j < i; j++)
                if (q[j].external_id && !strcmp(q[j].external_id, q[i].external_id)) {
                    PROBLEM("trace %s: request %lld (ord %lld): external id '%s' repeats request "
                            "%lld, expected each prompt once",
                            path, (long long)q[i].request_id, (long long)q[i].ord,
                            q[i].external_id, (long long)q[j].request_id);
                    break;
                }
    }
    const mp_trace_run *run = mp_trace_reader_run(r);
    if (run->has_footer && run->footer_n_requests != n)
        PROBLEM("trace %s: footer: n_requests %lld, but the requests table has %lld rows", path,
                (long long)run->footer_n_requests, (long long)n);
    return MP_OK;
}

/* A merged trace must come from the same model and have the same node identities as the first. */
static mp_status check_same_model(const mp_an_input *in, int ti, mp_an_problems *pb)
{
    const char *p0 = in->meta[0].path, *p = in->meta[ti].path;
    const mp_trace_run *a = mp_trace_reader_run(in->trace[0]), *b = mp_trace_reader_run(in->trace[ti]);
    if (!str_eq_null(a->model_sha256, b->model_sha256))
        PROBLEM("trace %s: model SHA-256 %s differs from %s's %s: only traces of the same model "
                "merge",
                p, or_null(b->model_sha256), p0, or_null(a->model_sha256));
    if (a->n_experts != b->n_experts || a->top_k != b->top_k || a->n_layers != b->n_layers ||
        a->n_moe_layers != b->n_moe_layers || !str_eq_null(a->architecture, b->architecture))
        PROBLEM("trace %s: shape (%s, %lld layers, %lld MoE layers, %lld experts, top-%lld) "
                "differs from %s's (%s, %lld, %lld, %lld, top-%lld)",
                p, or_null(b->architecture), (long long)b->n_layers, (long long)b->n_moe_layers,
                (long long)b->n_experts, (long long)b->top_k, p0, or_null(a->architecture),
                (long long)a->n_layers, (long long)a->n_moe_layers, (long long)a->n_experts,
                (long long)a->top_k);
    const int64_t n0 = mp_trace_reader_n_nodes(in->trace[0]), n1 = mp_trace_reader_n_nodes(in->trace[ti]);
    const mp_trace_node_info *x0 = mp_trace_reader_nodes(in->trace[0]);
    const mp_trace_node_info *x1 = mp_trace_reader_nodes(in->trace[ti]);
    for (int64_t i = 0; i < (n0 > n1 ? n0 : n1); i++) {
        if (i >= n0 || i >= n1) {
            const mp_trace_node_info *x = i >= n0 ? &x1[i] : &x0[i];
            PROBLEM("trace %s: node %lld ('%s'): present in %s only, expected the same node "
                    "table in every merged trace",
                    p, (long long)x->node_index, or_null(x->node_name), i >= n0 ? p : p0);
            continue;
        }
        if (x0[i].node_index != x1[i].node_index || !str_eq_null(x0[i].node_type, x1[i].node_type) ||
            !str_eq_null(x0[i].node_name, x1[i].node_name) || x0[i].layer != x1[i].layer ||
            x0[i].n_experts != x1[i].n_experts || x0[i].top_k != x1[i].top_k ||
            x0[i].expert_bytes != x1[i].expert_bytes)
            PROBLEM("trace %s: node row %lld: (index %lld, type '%s', name '%s', layer %lld, %lld "
                    "experts, top-%lld, %lld bytes) disagrees with %s's (%lld, '%s', '%s', %lld, "
                    "%lld, top-%lld, %lld bytes)",
                    p, (long long)i, (long long)x1[i].node_index, or_null(x1[i].node_type),
                    or_null(x1[i].node_name), (long long)x1[i].layer, (long long)x1[i].n_experts,
                    (long long)x1[i].top_k, (long long)x1[i].expert_bytes, p0,
                    (long long)x0[i].node_index, or_null(x0[i].node_type),
                    or_null(x0[i].node_name), (long long)x0[i].layer, (long long)x0[i].n_experts,
                    (long long)x0[i].top_k, (long long)x0[i].expert_bytes);
    }
    /* the same run given twice would count every request twice: the same file (by real path),
     * or the same foreign file imported twice */
    char *r0 = realpath(p0, NULL), *r1 = realpath(p, NULL);
    const bool same_file = r0 && r1 && !strcmp(r0, r1);
    free(r0), free(r1);
    if (same_file)
        PROBLEM("trace %s: the same file as %s: its requests would be counted twice, expected "
                "distinct traces", p, p0);
    if (a->source_path && b->source_path && !strcmp(a->source_path, b->source_path))
        PROBLEM("trace %s: imported from the same file as %s (%s): its requests would be "
                "counted twice, expected distinct traces", p, p0, a->source_path);
    return MP_OK;
}

static void copy_str(char *dst, size_t cap, const char *src)
{
    snprintf(dst, cap, "%s", src ? src : "");
}

mp_status mp_an_input_open(mp_an_input *in, const char *const *paths, int n_paths,
                           const char *model_path, mp_an_problems *pb, mp_error *err)
{
    memset(in, 0, sizeof *in);
    in->trace = calloc((size_t)n_paths, sizeof *in->trace);
    in->meta = calloc((size_t)n_paths, sizeof *in->meta);
    if (!in->trace || !in->meta)
        return mp_fail(err, MP_ERR_NOMEM, "analyzer: out of memory");
    for (int i = 0; i < n_paths; i++) {
        mp_status st = mp_trace_reader_open(paths[i], &in->trace[i], err);
        if (st != MP_OK)
            return st;
        in->n_traces = i + 1;
        in->meta[i].path = paths[i];
        in->meta[i].request_base = in->n_requests;
        in->meta[i].n_requests = mp_trace_reader_n_requests(in->trace[i]);
        in->n_requests += in->meta[i].n_requests;
    }
    for (int i = 0; i < n_paths; i++) {
        const mp_trace_run *run = mp_trace_reader_run(in->trace[i]);
        if (check_run(paths[i], run, pb) != MP_OK || check_nodes(paths[i], in->trace[i], pb) != MP_OK ||
            check_requests(paths[i], in->trace[i], pb) != MP_OK ||
            (i > 0 && check_same_model(in, i, pb) != MP_OK))
            return MP_ERR_FORMAT;
    }
    /* the node table the statistics use: the first trace's (the others agree or were reported) */
    const int64_t n = mp_trace_reader_n_nodes(in->trace[0]);
    const mp_trace_node_info *nd = mp_trace_reader_nodes(in->trace[0]);
    in->n_nodes = (int32_t)n;
    in->nodes = calloc((size_t)(n > 0 ? n : 1), sizeof *in->nodes);
    if (!in->nodes)
        return mp_fail(err, MP_ERR_NOMEM, "analyzer: out of memory");
    for (int64_t i = 0; i < n; i++) {
        mp_an_node *x = &in->nodes[i];
        x->node_index = nd[i].node_index;
        x->layer = nd[i].layer;
        x->n_experts = nd[i].n_experts;
        x->top_k = nd[i].top_k;
        x->expert_bytes = nd[i].expert_bytes > 0 ? nd[i].expert_bytes : 0;
        copy_str(x->type, sizeof x->type, nd[i].node_type);
        copy_str(x->name, sizeof x->name, nd[i].node_name);
        if (x->n_experts > in->max_experts)
            in->max_experts = x->n_experts;
    }
    in->model_sha256 = mp_trace_reader_run(in->trace[0])->model_sha256;
    if (model_path)
        return mp_an_check_model(in, model_path, pb, err);
    return MP_OK;
}

void mp_an_input_close(mp_an_input *in)
{
    for (int i = 0; i < in->n_traces; i++)
        mp_trace_reader_close(in->trace[i]);
    free(in->trace);
    free(in->meta);
    free(in->nodes);
    memset(in, 0, sizeof *in);
}
