/* collector/import.c — the two-pass import driver shared by every foreign format, and the
 * formats' names, detection and parsers (import.h).
 *
 * Pass 1 (check) validates each record exactly as the writer would and learns the node table;
 * pass 2 (write) replays the same parse into an mp_trace_writer. Because pass 1 has already
 * accepted every record, pass 2 can fail only on I/O.
 */
#include "collector/import_internal.h"
#include "base/atomic_file.h"
#include "base/input_file.h"

#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

const char *mp_import_format_name(mp_import_format f)
{
    switch (f) {
    case MP_IMPORT_ORT_LOG: return "onnxruntime-log";
    case MP_IMPORT_STRATA: return "strata";
    case MP_IMPORT_CSV: return "csv";
    default: return NULL;
    }
}

int mp_import_format_parse(const char *name)
{
    if (!strcmp(name, "auto"))
        return MP_IMPORT_AUTO;
    for (int f = MP_IMPORT_ORT_LOG; f <= MP_IMPORT_CSV; f++)
        if (!strcmp(name, mp_import_format_name((mp_import_format)f)))
            return f;
    return -1;
}

mp_import_format mp_import_detect(const char *data, size_t n)
{
    if (mp_import_csv_looks_like(data, n))
        return MP_IMPORT_CSV;
    size_t look = n < 65536 ? n : 65536;
    if (memmem(data, look, "moe_routing", 11))
        return MP_IMPORT_ORT_LOG;
    return MP_IMPORT_STRATA;
}

static mp_import_parse_fn parser_of(mp_import_format f)
{
    switch (f) {
    case MP_IMPORT_ORT_LOG: return mp_import_parse_ort_log;
    case MP_IMPORT_STRATA: return mp_import_parse_strata;
    case MP_IMPORT_CSV: return mp_import_parse_csv;
    default: return NULL;
    }
}

static mp_status run_pass(mp_import_ctx *c, mp_import_format f, const char *data, size_t n,
                          mp_error *err)
{
    mp_status s = parser_of(f)(data, n, c, err);
    if (s == MP_OK)
        s = mp_import_close_request(c, err);
    if (s == MP_OK && c->pass == 1 && c->n_routing == 0)
        s = mp_fail(err, MP_ERR_FORMAT, "%s: no routing records (expected %s data)", c->name,
                    mp_import_format_name(f));
    if (s == MP_OK && c->pass == 1) {
        int64_t n_nodes = 0;
        for (int i = 0; i < MP_IMPORT_MAX_NODES; i++)
            n_nodes += c->nodes[i] != NULL;
        if (c->max_step_nodes < n_nodes) /* no step has them all: the first one is short */
            s = mp_fail(err, MP_ERR_FORMAT, "%s: %s: a step with routing for %lld of the %lld "
                        "nodes seen, expected every node in every step", c->name,
                        c->first_step_at, (long long)c->first_step_nodes, (long long)n_nodes);
        else if (c->have_partial)
            s = mp_fail(err, MP_ERR_FORMAT, "%s: %s: a step with routing for %lld of the %lld "
                        "nodes seen, expected every node in every step", c->name, c->partial_at,
                        (long long)c->partial_nodes, (long long)n_nodes);
    }
    return s;
}

mp_status mp_import_check_buffer(mp_import_format f, const char *name, const char *data, size_t n,
                                 int64_t n_experts, mp_error *err)
{
    if (f == MP_IMPORT_AUTO)
        f = mp_import_detect(data, n);
    mp_import_ctx c = {.pass = 1, .name = name, .n_experts_given = n_experts, .max_id = -1};
    c.nodes = calloc(MP_IMPORT_MAX_NODES, sizeof *c.nodes);
    if (!c.nodes)
        return mp_fail(err, MP_ERR_NOMEM, "%s: out of memory", name);
    mp_status s = run_pass(&c, f, data, n, err);
    mp_import_free_nodes(c.nodes);
    free(c.done_keys);
    return s;
}

/* Write the trace (pass 2): it appears at out_path only when complete. */
static mp_status write_trace(mp_import_ctx *c, mp_import_format f, const char *in_path,
                             const char *out_path, bool force, const char *data, size_t n,
                             mp_error *err)
{
    mp_status s;
    if ((s = mp_trace_writer_create(out_path, force, &c->w, err)))
        return s;
    int64_t n_nodes = 0;
    for (int i = 0; i < MP_IMPORT_MAX_NODES; i++)
        n_nodes += c->nodes[i] != NULL;
    char config[384];
    snprintf(config, sizeof config, "{\"import_format\":\"%s\",\"n_experts_inferred\":%s%s}",
             mp_import_format_name(f), c->n_experts_given > 0 ? "false" : "true",
             c->weights_uniform ? ",\"weights\":\"uniform: the input has no router weights, "
                                  "each choice was given 1/top_k\"" : "");
    mp_trace_run_info info;
    mp_trace_run_info_init(&info);
    info.source = f == MP_IMPORT_ORT_LOG ? "onnxruntime" : f == MP_IMPORT_STRATA ? "strata" : "csv";
    info.source_path = in_path;
    info.n_moe_layers = n_nodes;
    info.n_experts = c->n_experts;
    info.config_json = config;
    int64_t top_k = -1;
    for (int i = 0; i < MP_IMPORT_MAX_NODES; i++)
        if (c->nodes[i])
            top_k = top_k < 0 || top_k == c->nodes[i]->top_k ? c->nodes[i]->top_k : -2;
    info.top_k = top_k >= 0 ? top_k : -1; /* NULL when nodes differ */
    if ((s = mp_trace_set_run(c->w, &info, err)))
        goto fail;
    int64_t rank = 0;
    for (int i = 0; i < MP_IMPORT_MAX_NODES; i++) {
        mp_import_node *nd = c->nodes[i];
        if (!nd)
            continue;
        if (nd->top_k > c->n_experts) {
            s = mp_fail(err, MP_ERR_FORMAT, "%s: node %d has top-%lld but only %lld experts",
                        c->name, i, (long long)nd->top_k, (long long)c->n_experts);
            goto fail;
        }
        mp_trace_node tn = {.node_index = i, .node_type = nd->type, .node_name = nd->name,
                            .layer = nd->layer >= 0 ? nd->layer : rank, .n_experts = c->n_experts,
                            .top_k = nd->top_k, .expert_bytes = -1, .weight_format = c->wf};
        if ((s = mp_trace_add_node(c->w, &tn, err)))
            goto fail;
        rank++;
    }
    mp_progress_next(c->progress, "import: write", "records", c->n_routing); /* pass 1's count */
    c->pass = 2;
    mp_import_ctx_reset(c);
    if ((s = run_pass(c, f, data, n, err)) || (s = mp_trace_finish(c->w, err)))
        goto fail;
    mp_trace_writer_close(c->w);
    c->w = NULL;
    return MP_OK;
fail:
    mp_trace_writer_close(c->w);
    c->w = NULL;
    return s;
}

mp_status mp_import_file(const char *in_path, const char *out_path, const mp_import_options *opt,
                         mp_import_result *res, mp_error *err)
{
    memset(res, 0, sizeof *res);
    struct stat si;
    int fd;
    mp_status os = mp_input_open(in_path, NULL, MP_INPUT_NO_CAP, &fd, &si, err);
    if (os)
        return os;
    const mp_file_ref in_ref = {in_path, "the input"};
    if ((os = mp_output_check(out_path, "trace", opt->force, &in_ref, 1, err))) {
        close(fd);
        return os;
    }
    if (opt->n_experts < 0 || opt->n_experts > 65536) {
        close(fd);
        return mp_fail(err, MP_ERR_ARG, "--experts %lld: expected 1..65536",
                       (long long)opt->n_experts);
    }
    size_t n = (size_t)si.st_size;
    const char *data = "";
    void *map = NULL;
    if (n > 0) {
        map = mmap(NULL, n, PROT_READ, MAP_PRIVATE, fd, 0);
        if (map == MAP_FAILED) {
            close(fd);
            return mp_fail(err, MP_ERR_IO, "%s: cannot map: %s", in_path, strerror(errno));
        }
        data = map;
    }
    close(fd);
    mp_import_format f = opt->format == MP_IMPORT_AUTO ? mp_import_detect(data, n) : opt->format;
    mp_import_ctx c = {.pass = 1, .name = in_path, .n_experts_given = opt->n_experts,
                       .wf = opt->weight_format, .max_id = -1, .progress = opt->progress};
    mp_progress_set_total(c.progress, (int64_t)n);
    mp_progress_count2(c.progress, "records");
    c.nodes = calloc(MP_IMPORT_MAX_NODES, sizeof *c.nodes);
    mp_status s = MP_OK;
    if (!c.nodes) {
        s = mp_fail(err, MP_ERR_NOMEM, "%s: out of memory", in_path);
        goto done;
    }
    if ((s = run_pass(&c, f, data, n, err)))
        goto done;
    c.n_experts = c.n_experts_given > 0 ? c.n_experts_given : c.max_id + 1;
    res->format = f;
    res->n_requests = c.req_ord;
    res->n_steps = c.n_steps;
    res->n_routing = c.n_routing;
    res->n_experts = c.n_experts;
    res->n_experts_inferred = c.n_experts_given == 0;
    res->weights_uniform = c.weights_uniform;
    for (int i = 0; i < MP_IMPORT_MAX_NODES; i++)
        res->n_nodes += c.nodes[i] != NULL;
    s = write_trace(&c, f, in_path, out_path, opt->force, data, n, err);
done:
    if (map)
        munmap(map, n);
    mp_import_free_nodes(c.nodes);
    free(c.done_keys);
    return s;
}
