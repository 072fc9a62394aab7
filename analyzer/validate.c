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
        const mp_status ms = i > 0 ? mp_trace_check_merge(in->check[0], paths[0], in->check[i], paths[i],
                                                          to_problems, pb) : MP_OK;
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
