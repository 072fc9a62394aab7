/* collector/import_common.c — the two-pass import driver shared by every foreign format.
 *
 * Pass 1 (check) validates each record exactly as the writer would and learns the node table;
 * pass 2 (write) replays the same parse into an mp_trace_writer. Because pass 1 has already
 * accepted every record, pass 2 can fail only on I/O.
 *
 * Invariants: records of one foreign request are contiguous (a request that reappears after
 * another is refused); within a request, steps are numbered from 0 by node wrap-around; all
 * records of one step have the same n_rows; a node keeps one (name, type, top_k) identity.
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

#define MAX_NODES (MP_TRACE_MAX_NODE_INDEX + 1)
#define NAME_MAX_BYTES 128

typedef struct import_node {
    char name[NAME_MAX_BYTES], type[NAME_MAX_BYTES];
    int64_t top_k, layer;
} import_node;

struct mp_import_ctx {
    int pass;                 /* 1: check, 2: write */
    const char *name;
    mp_trace_writer *w;       /* pass 2 only */
    int64_t n_experts_given;  /* 0: infer */
    int64_t n_experts;        /* pass 2: the node table's n_experts */
    mp_trace_weight_format wf;
    bool weights_uniform;     /* the input had no weights: each choice got 1/top_k */
    mp_progress *progress;    /* NULL: none; pass 1 counts input bytes, pass 2 records */
    import_node **nodes;      /* (MAX_NODES) by node_index; NULL: not seen */
    int64_t max_id;           /* largest id seen, -1 before any */
    /* request and step being assembled */
    bool have_req;
    int64_t req_key, req_ord, step, last_node, step_rows, n_prompt_rows, n_decode_steps;
    int step_phase;
    int64_t *done_keys;       /* open-addressing set of finished request keys (cap power of 2) */
    size_t done_cap, done_n;
    int64_t n_steps, n_routing;
    /* pass 1: every step must route every node (the trace stores a step's nodes in one row);
     * a partial step is found with the step's record count against the most seen so far (and,
     * at the end, against the nodes seen): its first record's place names it */
    int64_t step_nodes, max_step_nodes, first_step_nodes;
    char step_at[96], first_step_at[96];
    bool have_partial;
    int64_t partial_nodes;
    char partial_at[96];
};

const char *mp_import_name(const mp_import_ctx *c) { return c->name; }
int64_t mp_import_n_experts_limit(const mp_import_ctx *c) { return c->n_experts_given; }
void mp_import_note_uniform_weights(mp_import_ctx *c) { c->weights_uniform = true; }

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

static mp_status close_request(mp_import_ctx *c, mp_error *err)
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
    import_node *nd = c->nodes[r->node_index];
    const char *name = r->node_name ? r->node_name : "", *type = r->node_type ? r->node_type : "";
    if (!nd) {
        if (c->pass == 2)
            return mp_fail(err, MP_ERR_INTERNAL, "%s: %s: node %lld unseen in the first pass", nm,
                           at, (long long)r->node_index);
        if (strlen(name) >= NAME_MAX_BYTES || strlen(type) >= NAME_MAX_BYTES)
            return mp_fail(err, MP_ERR_FORMAT, "%s: %s: node name or type longer than %d bytes",
                           nm, at, NAME_MAX_BYTES - 1);
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
        if ((s = close_request(c, err)))
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

static void free_nodes(import_node **nodes)
{
    if (!nodes)
        return;
    for (int i = 0; i < MAX_NODES; i++)
        free(nodes[i]);
    free(nodes);
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

static void ctx_reset(mp_import_ctx *c)
{
    c->have_req = false;
    c->req_ord = 0;
    c->n_steps = c->n_routing = 0;
    c->done_n = 0;
    for (size_t i = 0; i < c->done_cap; i++)
        c->done_keys[i] = INT64_MIN;
}

static mp_status run_pass(mp_import_ctx *c, mp_import_format f, const char *data, size_t n,
                          mp_error *err)
{
    mp_status s = parser_of(f)(data, n, c, err);
    if (s == MP_OK)
        s = close_request(c, err);
    if (s == MP_OK && c->pass == 1 && c->n_routing == 0)
        s = mp_fail(err, MP_ERR_FORMAT, "%s: no routing records (expected %s data)", c->name,
                    mp_import_format_name(f));
    if (s == MP_OK && c->pass == 1) {
        int64_t n_nodes = 0;
        for (int i = 0; i < MAX_NODES; i++)
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
    c.nodes = calloc(MAX_NODES, sizeof *c.nodes);
    if (!c.nodes)
        return mp_fail(err, MP_ERR_NOMEM, "%s: out of memory", name);
    mp_status s = run_pass(&c, f, data, n, err);
    free_nodes(c.nodes);
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
    for (int i = 0; i < MAX_NODES; i++)
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
    for (int i = 0; i < MAX_NODES; i++)
        if (c->nodes[i])
            top_k = top_k < 0 || top_k == c->nodes[i]->top_k ? c->nodes[i]->top_k : -2;
    info.top_k = top_k >= 0 ? top_k : -1; /* NULL when nodes differ */
    if ((s = mp_trace_set_run(c->w, &info, err)))
        goto fail;
    int64_t rank = 0;
    for (int i = 0; i < MAX_NODES; i++) {
        import_node *nd = c->nodes[i];
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
    ctx_reset(c);
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
    c.nodes = calloc(MAX_NODES, sizeof *c.nodes);
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
    for (int i = 0; i < MAX_NODES; i++)
        res->n_nodes += c.nodes[i] != NULL;
    s = write_trace(&c, f, in_path, out_path, opt->force, data, n, err);
done:
    if (map)
        munmap(map, n);
    free_nodes(c.nodes);
    free(c.done_keys);
    return s;
}
