/* collector/trace_check_merge.c — several traces read as one (see mp_trace_check_merge in
 * trace_check.h): each further trace must be of the same model, shapes and node table as the
 * first, and another run, not the same file, a copy of it or the same foreign file imported twice.
 *
 * Invariants: it reads only what the checker already holds (the reader's run row and node table,
 * loaded at open), so it adds no I/O but the same-file test; each problem is one line naming both
 * paths, through the sink.
 */
#include "collector/trace_check.h"

#include <cjson/cJSON.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "base/atomic_file.h"
#include "base/json.h"

/* One problem of a merge through the sink; stop (MP_ERR_FORMAT) when the sink says so. */
static mp_status merge_problem(mp_trace_problem_fn sink, void *user, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
static mp_status merge_problem(mp_trace_problem_fn sink, void *user, const char *fmt, ...)
{
    char msg[1024];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    return sink(user, msg) != MP_OK ? MP_ERR_FORMAT : MP_OK;
}
#define MERGE_PROBLEM(...)                                                                        \
    do {                                                                                          \
        if (merge_problem(sink, sink_user, __VA_ARGS__) != MP_OK)                                 \
            return MP_ERR_FORMAT;                                                                 \
    } while (0)

static bool merge_str_eq(const char *a, const char *b)
{
    return (!a && !b) || (a && b && !strcmp(a, b));
}

static const char *merge_or_null(const char *s)
{
    return s ? s : "NULL";
}

/* The writer's run id (config_json.run_id, 32 hex digits), if the trace has one. */
static bool merge_run_id(const mp_trace_run *run, char out[40])
{
    out[0] = '\0';
    cJSON *cfg = run->config_json ? cJSON_Parse(run->config_json) : NULL;
    const cJSON *id = cJSON_GetObjectItemCaseSensitive(cfg, "run_id");
    if (cJSON_IsString(id) && strlen(id->valuestring) < 40)
        snprintf(out, 40, "%s", id->valuestring);
    cJSON_Delete(cfg);
    return out[0] != '\0';
}

mp_status mp_trace_check_merge(const mp_trace_check *first, const char *p0, const mp_trace_check *other,
                               const char *p, mp_trace_problem_fn sink, void *sink_user)
{
    const mp_trace_reader *r0 = mp_trace_check_reader(first), *r1 = mp_trace_check_reader(other);
    const mp_trace_run *a = mp_trace_reader_run(r0), *b = mp_trace_reader_run(r1);
    if (!merge_str_eq(a->model_sha256, b->model_sha256))
        MERGE_PROBLEM("trace %s: model SHA-256 %s differs from %s's %s: only traces of the same model "
                "merge",
                p, merge_or_null(b->model_sha256), p0, merge_or_null(a->model_sha256));
    if (a->n_experts != b->n_experts || a->top_k != b->top_k || a->n_layers != b->n_layers ||
        a->n_moe_layers != b->n_moe_layers || !merge_str_eq(a->architecture, b->architecture))
        MERGE_PROBLEM("trace %s: shape (%s, %lld layers, %lld MoE layers, %lld experts, top-%lld) "
                "differs from %s's (%s, %lld, %lld, %lld, top-%lld)",
                p, merge_or_null(b->architecture), (long long)b->n_layers, (long long)b->n_moe_layers,
                (long long)b->n_experts, (long long)b->top_k, p0, merge_or_null(a->architecture),
                (long long)a->n_layers, (long long)a->n_moe_layers, (long long)a->n_experts,
                (long long)a->top_k);
    const int64_t n0 = mp_trace_reader_n_nodes(r0), n1 = mp_trace_reader_n_nodes(r1);
    const mp_trace_node_info *x0 = mp_trace_reader_nodes(r0);
    const mp_trace_node_info *x1 = mp_trace_reader_nodes(r1);
    for (int64_t i = 0; i < (n0 > n1 ? n0 : n1); i++) {
        if (i >= n0 || i >= n1) {
            const mp_trace_node_info *x = i >= n0 ? &x1[i] : &x0[i];
            MERGE_PROBLEM("trace %s: node %lld ('%s'): present in %s only, expected the same node "
                    "table in every merged trace",
                    p, (long long)x->node_index, merge_or_null(x->node_name), i >= n0 ? p : p0);
            continue;
        }
        if (x0[i].node_index != x1[i].node_index || !merge_str_eq(x0[i].node_type, x1[i].node_type) ||
            !merge_str_eq(x0[i].node_name, x1[i].node_name) || x0[i].layer != x1[i].layer ||
            x0[i].n_experts != x1[i].n_experts || x0[i].top_k != x1[i].top_k ||
            x0[i].expert_bytes != x1[i].expert_bytes)
            MERGE_PROBLEM("trace %s: node row %lld: (index %lld, type '%s', name '%s', layer %lld, %lld "
                    "experts, top-%lld, %lld bytes) disagrees with %s's (%lld, '%s', '%s', %lld, "
                    "%lld, top-%lld, %lld bytes)",
                    p, (long long)i, (long long)x1[i].node_index, merge_or_null(x1[i].node_type),
                    merge_or_null(x1[i].node_name), (long long)x1[i].layer, (long long)x1[i].n_experts,
                    (long long)x1[i].top_k, (long long)x1[i].expert_bytes, p0,
                    (long long)x0[i].node_index, merge_or_null(x0[i].node_type),
                    merge_or_null(x0[i].node_name), (long long)x0[i].layer, (long long)x0[i].n_experts,
                    (long long)x0[i].top_k, (long long)x0[i].expert_bytes);
    }
    /* the same run given twice would count every request twice: the same file (by device and
     * inode), a copy of it (the same run id, or for traces written before run ids the same run
     * row and footer), or the same foreign file imported twice */
    if (mp_same_file(p0, p))
        MERGE_PROBLEM("trace %s: the same file as %s: its requests would be counted twice, expected "
                "distinct traces", p, p0);
    char id0[40], id1[40];
    const mp_json_mark mark = mp_json_begin();
    const bool has0 = merge_run_id(a, id0), has1 = merge_run_id(b, id1);
    if (mp_json_failed_since(mark))
        return MP_ERR_NOMEM; /* not "no run id": out of memory */
    if ((has0 && has1 && !strcmp(id0, id1)) ||
        (!has0 && !has1 && merge_str_eq(a->start_time, b->start_time) &&
         merge_str_eq(a->end_time, b->end_time) && merge_str_eq(a->config_json, b->config_json) &&
         a->footer_n_steps == b->footer_n_steps && a->footer_n_routing == b->footer_n_routing))
        MERGE_PROBLEM("trace %s: the same run as %s (%s%s): a copy, whose requests would be counted "
                "twice, expected distinct runs", p, p0, has0 ? "run id " : "run row and footer",
                has0 ? id0 : "");
    if (a->source_path && b->source_path && !strcmp(a->source_path, b->source_path))
        MERGE_PROBLEM("trace %s: imported from the same file as %s (%s): its requests would be "
                "counted twice, expected distinct traces", p, p0, a->source_path);
    return MP_OK;
}
