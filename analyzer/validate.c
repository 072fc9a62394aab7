/* analyzer/validate.c — stage 1 of validation (see validate.h): each trace's tables through the
 * collector's checker (collector/trace_check.h), then what only a merge can get wrong: traces of
 * different models or node tables, and the same run given twice. */
#include "analyzer/validate.h"
#include "base/atomic_file.h"
#include "base/json.h"

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

/* The writer's run id (config_json.run_id, 32 hex digits), if the trace has one. */
static bool run_id(const mp_trace_run *run, char out[40])
{
    out[0] = '\0';
    cJSON *cfg = run->config_json ? cJSON_Parse(run->config_json) : NULL;
    const cJSON *id = cJSON_GetObjectItemCaseSensitive(cfg, "run_id");
    if (cJSON_IsString(id) && strlen(id->valuestring) < 40)
        snprintf(out, 40, "%s", id->valuestring);
    cJSON_Delete(cfg);
    return out[0] != '\0';
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
    /* the same run given twice would count every request twice: the same file (by device and
     * inode), a copy of it (the same run id, or for traces written before run ids the same run
     * row and footer), or the same foreign file imported twice */
    if (mp_same_file(p0, p))
        PROBLEM("trace %s: the same file as %s: its requests would be counted twice, expected "
                "distinct traces", p, p0);
    char id0[40], id1[40];
    const mp_json_mark mark = mp_json_begin();
    const bool has0 = run_id(a, id0), has1 = run_id(b, id1);
    if (mp_json_failed_since(mark))
        return MP_ERR_NOMEM; /* not "no run id": out of memory */
    if ((has0 && has1 && !strcmp(id0, id1)) ||
        (!has0 && !has1 && str_eq_null(a->start_time, b->start_time) &&
         str_eq_null(a->end_time, b->end_time) && str_eq_null(a->config_json, b->config_json) &&
         a->footer_n_steps == b->footer_n_steps && a->footer_n_routing == b->footer_n_routing))
        PROBLEM("trace %s: the same run as %s (%s%s): a copy, whose requests would be counted "
                "twice, expected distinct runs", p, p0, has0 ? "run id " : "run row and footer",
                has0 ? id0 : "");
    if (a->source_path && b->source_path && !strcmp(a->source_path, b->source_path))
        PROBLEM("trace %s: imported from the same file as %s (%s): its requests would be "
                "counted twice, expected distinct traces", p, p0, a->source_path);
    return MP_OK;
}

static void copy_str(char *dst, size_t cap, const char *src)
{
    snprintf(dst, cap, "%s", src ? src : "");
}

/* The collector's checker reports into the analyzer's problem list. */
static mp_status to_problems(void *user, const char *msg)
{
    return mp_an_problem(user, "%s", msg);
}

mp_status mp_an_input_open(mp_an_input *in, const char *const *paths, int n_paths,
                           const char *model_path, mp_an_problems *pb, mp_error *err)
{
    memset(in, 0, sizeof *in);
    in->check = calloc((size_t)n_paths, sizeof *in->check);
    in->trace = calloc((size_t)n_paths, sizeof *in->trace);
    in->meta = calloc((size_t)n_paths, sizeof *in->meta);
    if (!in->check || !in->trace || !in->meta)
        return mp_fail(err, MP_ERR_NOMEM, "analyzer: out of memory");
    for (int i = 0; i < n_paths; i++) {
        /* stage 1 of this trace: the collector's fail-closed checks of its tables */
        mp_status st = mp_trace_check_open(paths[i], to_problems, pb, &in->check[i], err);
        if (st != MP_OK)
            return st == MP_ERR_FORMAT && pb->n > 0 ? MP_ERR_FORMAT : st;
        in->trace[i] = mp_trace_check_reader(in->check[i]);
        in->n_traces = i + 1;
        in->meta[i].path = paths[i];
        in->meta[i].request_base = in->n_requests;
        in->meta[i].n_requests = mp_trace_reader_n_requests(in->trace[i]);
        in->n_requests += in->meta[i].n_requests;
        const mp_status ms = i > 0 ? check_same_model(in, i, pb) : MP_OK;
        if (ms == MP_ERR_NOMEM)
            return mp_fail(err, ms, "analyzer: out of memory comparing %s with %s", paths[i], paths[0]);
        if (ms != MP_OK)
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
        mp_trace_check_close(in->check[i]);
    free(in->check);
    free(in->trace);
    free(in->meta);
    free(in->nodes);
    memset(in, 0, sizeof *in);
}
