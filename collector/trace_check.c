/* collector/trace_check.c — the fail-closed trace reader (see trace_check.h).
 *
 * Invariants: an iterator hands out a record only if it and everything before it in the trace
 * passed (after the first problem nothing more is handed out, the checks go on for the sink);
 * every problem goes through problem(), which counts it on the trace.
 */
#include "collector/trace_check.h"

#include <cjson/cJSON.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "collector/trace.h"
#include "kernels/quant.h"
#include "base/atomic_file.h"
#include "base/json.h"

typedef struct req_key {
    int64_t request_id, ord;
} req_key;

struct mp_trace_check {
    mp_trace_reader *r;
    const char *path;          /* the reader's */
    mp_trace_problem_fn sink;
    void *sink_user;
    int64_t n_problems;
    int32_t n_nodes;
    uint8_t *node_ok;          /* (n_nodes) bytes per router weight (2, 4) if the node row is
                                * usable for decoding, else 0: compared once, not per record */
    int16_t pos[MP_TRACE_MAX_NODE_INDEX + 1]; /* node_index -> position, -1 if absent */
    req_key *reqs;             /* (n_requests) sorted by request_id */
    int64_t n_requests;
    int64_t max_experts;       /* over usable nodes: the repeated-id stamp's size */
    mp_trace_served_node *served; /* (n_nodes) the last complete iteration's served totals */
    mp_trace_tier_totals tier;    /* the last complete iteration's tier totals */
};

struct mp_trace_check_iter {
    mp_trace_check *c;
    const mp_trace_node_info *nodes;
    int64_t only_node;
    mp_trace_step_iter *steps;
    mp_trace_routing_iter *routing;
    bool started, finished;
    mp_status stopped;         /* the error that ended the iteration, returned again */
    mp_error stop_err;
    bool *has_steps;           /* (n_requests) by ord */
    /* current step */
    bool have_step, step_ok;
    mp_trace_step_rec step;
    int32_t step_phase;
    int64_t step_ord;          /* ord of the step's request, -1 if unknown */
    int32_t nodes_seen;        /* routing records of this step so far (positions 0..nodes_seen-1) */
    int64_t prev_req, prev_step, prev_ord;
    int64_t n_steps_read, n_routing_read;
    /* decode buffers */
    uint16_t *ids;             /* (cap) */
    float *weights;            /* (cap) */
    int64_t cap;
    uint32_t *stamp;           /* (max_experts) row serial of the last use: the repeated-id check */
    uint32_t row_serial;
    /* the timing rows, merge-joined with the steps: trec is the next one when trec_rc is 1 (0:
     * none left); served (n_nodes) the codes counted so far, rows_total the rows of the steps that
     * passed, tier the tier's counts so far, n_timing_read the rows read */
    mp_trace_timing_iter *timing;
    mp_trace_timing_rec trec;
    int trec_rc;
    mp_trace_served_node *served;
    int64_t rows_total;
    mp_trace_tier_totals tier;
    int64_t n_timing_read;
};

static float f16_table[65536];
static bool f16_ready;

/* Report one problem: MP_OK lets the caller skip the item and go on, MP_ERR_FORMAT stops. Without
 * a sink every problem stops; its message is then in *stop. */
static mp_status problemv(mp_trace_check *c, mp_error *stop, const char *fmt, va_list ap)
{
    mp_error line;
    mp_failv(&line, MP_ERR_FORMAT, fmt, ap);
    c->n_problems++;
    const mp_status rc = c->sink ? c->sink(c->sink_user, line.msg) : MP_ERR_FORMAT;
    if (rc != MP_OK && stop)
        *stop = line;
    return rc == MP_OK ? MP_OK : MP_ERR_FORMAT;
}

static mp_status problem(mp_trace_check *c, mp_error *stop, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
static mp_status problem(mp_trace_check *c, mp_error *stop, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    mp_status rc = problemv(c, stop, fmt, ap);
    va_end(ap);
    return rc;
}

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

static int by_request_id(const void *pa, const void *pb)
{
    const req_key *a = pa, *b = pb;
    return (a->request_id > b->request_id) - (a->request_id < b->request_id);
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
    if (!f16_ready) {
        for (uint32_t h = 0; h < 65536; h++)
            f16_table[h] = mp_f16_to_f32((mp_f16)h);
        f16_ready = true;
    }
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
const mp_trace_served_node *mp_trace_check_served(const mp_trace_check *c) { return c->served; }
const mp_trace_tier_totals *mp_trace_check_tier(const mp_trace_check *c) { return &c->tier; }

bool mp_trace_tier_sum(mp_trace_tier_totals *sum, const mp_trace_tier_totals *add)
{
    sum->present |= add->present;
    sum->overflow |= add->overflow;
    sum->overflow |= __builtin_add_overflow(sum->routes, add->routes, &sum->routes);
    sum->overflow |= __builtin_add_overflow(sum->hits, add->hits, &sum->hits);
    sum->overflow |= __builtin_add_overflow(sum->late, add->late, &sum->late);
    sum->overflow |= __builtin_add_overflow(sum->admissions, add->admissions, &sum->admissions);
    sum->overflow |= __builtin_add_overflow(sum->evictions, add->evictions, &sum->evictions);
    sum->overflow |= __builtin_add_overflow(sum->copy_bytes, add->copy_bytes, &sum->copy_bytes);
    return !sum->overflow;
}

/* ---- stage 2 ---- */

/* Report a problem and give up on the current item (a step or a record): MP_OK lets the caller
 * go on with the next one, MP_ERR_FORMAT (stop) ends the iteration. */
#define PROBLEM(...) return problem(it->c, &it->stop_err, __VA_ARGS__)

static int64_t lookup_ord(const mp_trace_check *c, int64_t request_id)
{
    req_key k = {request_id, 0};
    const req_key *hit = bsearch(&k, c->reqs, (size_t)c->n_requests, sizeof k, by_request_id);
    return hit ? hit->ord : -1;
}

/* Close the current step: every node must have had its routing record. */
static mp_status close_step(mp_trace_check_iter *it)
{
    if (!it->have_step || !it->step_ok || it->nodes_seen == it->c->n_nodes)
        return MP_OK;
    it->step_ok = false;
    PROBLEM("trace %s: request %lld, step %lld: routing for %d of %d nodes, expected one record "
            "per node (first missing: node %lld)",
            it->c->path, (long long)it->step.request_id, (long long)it->step.step, it->nodes_seen,
            it->c->n_nodes, (long long)it->nodes[it->nodes_seen].node_index);
}

static mp_status load_step(mp_trace_check_iter *it, mp_error *err)
{
    mp_trace_check *c = it->c;
    if (close_step(it) != MP_OK)
        return MP_ERR_FORMAT;
    int rc = mp_trace_steps_next(it->steps, &it->step, err);
    if (rc < 0)
        return (mp_status)rc;
    it->have_step = rc == 1;
    if (!it->have_step)
        return MP_OK;
    it->n_steps_read++;
    it->nodes_seen = 0;
    it->step_ok = false;
    const mp_trace_step_rec *s = &it->step;
    const int64_t ord = lookup_ord(c, s->request_id);
    const bool new_request = s->request_id != it->prev_req;
    const int64_t prev_req = it->prev_req, prev_step = it->prev_step;
    it->prev_req = s->request_id;
    it->prev_step = s->step;
    it->step_ord = ord;
    if (ord < 0)
        PROBLEM("trace %s: request %lld, step %lld: the request is missing from the requests "
                "table, expected every step to belong to a recorded request",
                c->path, (long long)s->request_id, (long long)s->step);
    if (new_request) {
        if (it->has_steps[ord])
            PROBLEM("trace %s: request %lld (ord %lld), step %lld: the request's steps resume "
                    "after another request's, expected each request's steps together",
                    c->path, (long long)s->request_id, (long long)ord, (long long)s->step);
        if (ord <= it->prev_ord)
            PROBLEM("trace %s: request %lld (ord %lld), step %lld: out of order, runs after "
                    "request %lld (ord %lld), expected ord order",
                    c->path, (long long)s->request_id, (long long)ord, (long long)s->step,
                    (long long)prev_req, (long long)it->prev_ord);
        it->prev_ord = ord;
        it->has_steps[ord] = true;
        if (s->step != 0)
            PROBLEM("trace %s: request %lld (ord %lld), step %lld: first step is %lld, expected 0 "
                    "(steps %s missing)",
                    c->path, (long long)s->request_id, (long long)ord, (long long)s->step,
                    (long long)s->step, s->step > 1 ? "0.." : "0");
    } else if (s->step != prev_step + 1) {
        PROBLEM("trace %s: request %lld (ord %lld), step %lld: follows step %lld, expected step "
                "%lld (%s)",
                c->path, (long long)s->request_id, (long long)ord, (long long)s->step,
                (long long)prev_step, (long long)(prev_step + 1),
                s->step <= prev_step ? "a repeated step" : "a gap");
    }
    if (!s->phase || (strcmp(s->phase, "prefill") && strcmp(s->phase, "decode")))
        PROBLEM("trace %s: request %lld (ord %lld), step %lld: phase '%s', expected 'prefill' or "
                "'decode'",
                c->path, (long long)s->request_id, (long long)ord, (long long)s->step,
                s->phase ? s->phase : "NULL");
    if (s->n_rows < 1)
        PROBLEM("trace %s: request %lld (ord %lld), step %lld: %lld rows, expected at least 1",
                c->path, (long long)s->request_id, (long long)ord, (long long)s->step,
                (long long)s->n_rows);
    it->step_phase = !strcmp(s->phase, "decode") ? 1 : 0;
    it->step_ok = true;
    return MP_OK;
}

static int cmp_key(int64_t r1, int64_t s1, int64_t r2, int64_t s2)
{
    if (r1 != r2)
        return r1 < r2 ? -1 : 1;
    return (s1 > s2) - (s1 < s2);
}

#define AT "trace %s: request %lld (ord %lld), step %lld, node %lld"
#define AT_ARGS it->c->path, (long long)rec->request_id, (long long)it->step_ord, \
                (long long)rec->step, (long long)rec->node_index

/* "0 gpu, 1 tier, ...": the codes and their names, for messages. */
static const char *served_codes(char *buf, size_t cap)
{
    size_t at = 0;
    buf[0] = '\0';
    for (int code = 0; code < MP_SERVED_N && at < cap; code++)
        at += (size_t)snprintf(buf + at, cap - at, "%s%d %s", code ? ", " : "", code, mp_served_name(code));
    return buf;
}

/* One timing row's served codes at the current step: rows × top-k of them, each a path, counted
 * as the row's hits, tier_hits and misses say; then added to the node's totals. */
static mp_status check_served(mp_trace_check_iter *it, const mp_trace_timing_rec *rec)
{
    const mp_trace_check *c = it->c;
    const int32_t p = rec->node_index >= 0 && rec->node_index <= MP_TRACE_MAX_NODE_INDEX
                          ? c->pos[rec->node_index] : -1;
    if (p < 0 || p >= c->n_nodes)
        PROBLEM(AT ": timing with served codes for a node absent from the node table, expected one of "
                "the nodes table's", AT_ARGS);
    if (!c->node_ok[p])
        return MP_OK; /* reported at open */
    const int64_t k = it->nodes[p].top_k, rows = it->step.n_rows;
    int64_t want; /* rows × k, by a multiplication: a division per row cost more than the check */
    if (__builtin_mul_overflow(rows, k, &want) || rec->served_bytes != (uint64_t)want)
        PROBLEM(AT ": served BLOB of %zu codes, expected rows × top-k = %lld × %lld", AT_ARGS,
                rec->served_bytes, (long long)rows, (long long)k);
    int64_t n[MP_SERVED_N] = {0};
    const uint8_t *code = rec->t.served;
    for (size_t i = 0; i < rec->served_bytes; i++) {
        if (code[i] >= MP_SERVED_N) {
            char names[128];
            PROBLEM(AT ", row %lld, slot %lld: served code %u, expected one of %s", AT_ARGS,
                    (long long)(i / (size_t)k), (long long)(i % (size_t)k), code[i], served_codes(names, sizeof names));
        }
        n[code[i]]++;
    }
    const int64_t gpu = n[MP_SERVED_GPU] + n[MP_SERVED_TIER], tier = n[MP_SERVED_TIER];
    const int64_t host = n[MP_SERVED_CPU] + n[MP_SERVED_FAR] + n[MP_SERVED_COPY];
    if (gpu != rec->t.hits || tier != rec->t.tier_hits || host != rec->t.misses) {
        char got[160];
        size_t at = 0;
        for (int i = 0; i < MP_SERVED_N; i++)
            at += (size_t)snprintf(got + at, sizeof got - at, "%s%s %lld", i ? ", " : "", mp_served_name(i),
                                   (long long)n[i]);
        PROBLEM(AT ": served codes %s, but hits %lld, tier_hits %lld, misses %lld: expected %s + %s = hits, "
                "%s = tier_hits, %s + %s + %s = misses", AT_ARGS, got, (long long)rec->t.hits,
                (long long)rec->t.tier_hits, (long long)rec->t.misses, mp_served_name(MP_SERVED_GPU),
                mp_served_name(MP_SERVED_TIER), mp_served_name(MP_SERVED_TIER), mp_served_name(MP_SERVED_CPU),
                mp_served_name(MP_SERVED_FAR), mp_served_name(MP_SERVED_COPY));
    }
    for (int i = 0; i < MP_SERVED_N; i++)
        it->served[p].by_path[i] += n[i];
    return MP_OK;
}

/* One timing row's tier counts, added to the iteration's when it has any. */
static void tier_row(mp_trace_check_iter *it, const mp_moe_timing *t)
{
    if (!(t->tier_hits | t->tier_late | t->tier_admissions | t->tier_evictions))
        return; /* no tier at this node and step (copy bytes come with admissions) */
    mp_trace_tier_totals row = {.present = true, .hits = t->tier_hits, .late = t->tier_late,
                                .admissions = t->tier_admissions, .evictions = t->tier_evictions,
                                .copy_bytes = t->tier_copy_bytes};
    row.overflow = __builtin_add_overflow(t->hits, t->misses, &row.routes);
    mp_trace_tier_sum(&it->tier, &row);
}

/* The timing rows up to the current step (all that are left once the steps have ended), each read
 * once: its tier counts summed; its served codes, if any, checked: those of an earlier step lack it
 * in the steps table; those of this step are checked against its rows, unless the step itself
 * failed (reported with the step). Hot on a live trace: a row per (step, node). */
static mp_status timing_upto(mp_trace_check_iter *it, mp_error *err)
{
    while (it->trec_rc == 1) {
        const mp_trace_timing_rec *rec = &it->trec;
        const int cmp = it->have_step ? cmp_key(rec->request_id, rec->step, it->step.request_id, it->step.step) : -1;
        if (cmp > 0)
            return MP_OK;
        it->n_timing_read++;
        tier_row(it, &rec->t);
        mp_status st = MP_OK;
        if (!rec->t.served)
            ; /* no codes to check */
        else if (cmp < 0)
            st = problem(it->c, &it->stop_err, "trace %s: request %lld, step %lld, node %lld: timing with served "
                         "codes for a step that the steps table lacks", it->c->path, (long long)rec->request_id,
                         (long long)rec->step, (long long)rec->node_index);
        else if (it->step_ok)
            st = check_served(it, rec);
        if (st != MP_OK)
            return st;
        const int rc = mp_trace_timing_next(it->timing, &it->trec, err);
        if (rc < 0)
            return (mp_status)rc;
        it->trec_rc = rc;
    }
    return MP_OK;
}

/* Leave the current step for the next one (none: the end), then its timing rows. */
static mp_status next_step(mp_trace_check_iter *it, mp_error *err)
{
    mp_status st = load_step(it, err);
    if (st != MP_OK)
        return st;
    if (it->have_step && it->step_ok)
        it->rows_total += it->step.n_rows;
    return timing_upto(it, err);
}

static mp_status grow(mp_trace_check_iter *it, int64_t n, mp_error *err)
{
    if (n <= it->cap)
        return MP_OK;
    uint16_t *ids = realloc(it->ids, (size_t)n * sizeof *ids);
    if (ids)
        it->ids = ids;
    float *w = realloc(it->weights, (size_t)n * sizeof *w);
    if (w)
        it->weights = w;
    if (!ids || !w)
        return mp_fail(err, MP_ERR_NOMEM, "trace %s: out of memory for a record of %lld routes",
                       it->c->path, (long long)n);
    it->cap = n;
    return MP_OK;
}

/* Check and decode one routing record; *ok says whether it may be handed out. Hot: one pass over
 * the record's ids and weights, every check in the same loop. */
static mp_status check_record(mp_trace_check_iter *it, const mp_trace_routing_rec *rec, int32_t p,
                              bool *ok, mp_error *err)
{
    *ok = false;
    const mp_trace_node_info *nd = &it->nodes[p];
    const int64_t k = nd->top_k, E = nd->n_experts;
    if (rec->n_rows != it->step.n_rows)
        PROBLEM(AT ": %lld rows, expected the step's %lld", AT_ARGS, (long long)rec->n_rows,
                (long long)it->step.n_rows);
    if (rec->n_rows < 1)
        return MP_OK; /* reported with the step */
    if (rec->n_rows > INT64_MAX / k)
        PROBLEM(AT ": %lld rows, expected a count whose routes fit in 64 bits", AT_ARGS,
                (long long)rec->n_rows);
    const int64_t n = rec->n_rows * k;
    const int64_t wb = it->c->node_ok[p];
    if (rec->expert_ids_bytes % (size_t)nd->id_bytes)
        PROBLEM(AT ": expert_ids BLOB of %zu bytes is truncated (not a multiple of %lld-byte "
                "ids), expected %lld bytes",
                AT_ARGS, rec->expert_ids_bytes, (long long)nd->id_bytes, (long long)(n * nd->id_bytes));
    if ((int64_t)(rec->expert_ids_bytes / (size_t)nd->id_bytes) != n)
        PROBLEM(AT ": %lld expert ids, expected rows × top-k = %lld × %lld = %lld", AT_ARGS,
                (long long)(rec->expert_ids_bytes / (size_t)nd->id_bytes), (long long)rec->n_rows,
                (long long)k, (long long)n);
    if (rec->weights_bytes % (size_t)wb)
        PROBLEM(AT ": weights BLOB of %zu bytes is truncated (not a multiple of %lld-byte %s "
                "weights), expected %lld bytes",
                AT_ARGS, rec->weights_bytes, (long long)wb, nd->weight_format, (long long)(n * wb));
    if ((int64_t)(rec->weights_bytes / (size_t)wb) != n)
        PROBLEM(AT ": %lld router weights, expected rows × top-k = %lld × %lld = %lld", AT_ARGS,
                (long long)(rec->weights_bytes / (size_t)wb), (long long)rec->n_rows, (long long)k,
                (long long)n);
    mp_status st = grow(it, n, err);
    if (st != MP_OK)
        return st;
    const uint8_t *ib = rec->expert_ids, *wbuf = rec->weights;
    /* decode and check in one sweep: ids little-endian, then range and repeats per row */
    for (int64_t row = 0; row < rec->n_rows; row++) {
        it->row_serial++;
        for (int64_t j = 0; j < k; j++) {
            const int64_t i = row * k + j;
            const uint32_t id = nd->id_bytes == 1 ? ib[i] : (uint32_t)(ib[2 * i] | ib[2 * i + 1] << 8);
            if (id >= (uint32_t)E)
                PROBLEM(AT ", row %lld, slot %lld: expert id %u outside [0, %lld)", AT_ARGS,
                        (long long)row, (long long)j, id, (long long)E);
            if (it->stamp[id] == it->row_serial)
                PROBLEM(AT ", row %lld, slot %lld: expert id %u repeated within the row, "
                        "expected top-k distinct experts",
                        AT_ARGS, (long long)row, (long long)j, id);
            it->stamp[id] = it->row_serial;
            it->ids[i] = (uint16_t)id;
            float w;
            if (wb == 2) {
                w = f16_table[wbuf[2 * i] | wbuf[2 * i + 1] << 8];
            } else {
                uint32_t u = (uint32_t)wbuf[4 * i] | (uint32_t)wbuf[4 * i + 1] << 8 |
                             (uint32_t)wbuf[4 * i + 2] << 16 | (uint32_t)wbuf[4 * i + 3] << 24;
                memcpy(&w, &u, sizeof w);
            }
            if (!isfinite(w) || w < 0)
                PROBLEM(AT ", row %lld, slot %lld: router weight %g, expected a finite "
                        "non-negative number",
                        AT_ARGS, (long long)row, (long long)j, (double)w);
            it->weights[i] = w;
        }
    }
    *ok = true;
    return MP_OK;
}

void mp_trace_check_end(mp_trace_check_iter *it)
{
    if (!it)
        return;
    mp_trace_routing_end(it->routing);
    mp_trace_steps_end(it->steps);
    mp_trace_timing_end(it->timing);
    free(it->served);
    free(it->has_steps);
    free(it->ids);
    free(it->weights);
    free(it->stamp);
    free(it);
}

mp_status mp_trace_check_begin(mp_trace_check *c, int64_t only_node, mp_trace_check_iter **out,
                               mp_error *err)
{
    *out = NULL;
    mp_trace_check_iter *it = calloc(1, sizeof *it);
    if (!it)
        return mp_fail(err, MP_ERR_NOMEM, "trace %s: out of memory", c->path);
    it->c = c;
    it->nodes = mp_trace_reader_nodes(c->r);
    it->only_node = only_node;
    it->prev_req = -1;
    it->prev_ord = -1;
    it->has_steps = calloc((size_t)c->n_requests + 1, sizeof *it->has_steps);
    it->stamp = calloc((size_t)c->max_experts + 1, sizeof *it->stamp);
    it->served = calloc((size_t)c->n_nodes + 1, sizeof *it->served);
    mp_status st = MP_OK;
    if (!it->has_steps || !it->stamp || !it->served)
        st = mp_fail(err, MP_ERR_NOMEM, "trace %s: out of memory", c->path);
    if (!st)
        st = mp_trace_steps_begin(c->r, &it->steps, err);
    if (!st)
        st = mp_trace_routing_begin(c->r, &it->routing, err);
    if (!st)
        st = mp_trace_timing_begin_counts(c->r, &it->timing, err);
    if (!st && (it->trec_rc = mp_trace_timing_next(it->timing, &it->trec, err)) < 0)
        st = (mp_status)it->trec_rc;
    if (st) {
        mp_trace_check_end(it);
        return st;
    }
    *out = it;
    return MP_OK;
}

/* After the last routing record: the remaining steps, requests without steps, the footer. */
static mp_status finish(mp_trace_check_iter *it, mp_error *err)
{
    mp_trace_check *c = it->c;
    mp_status st;
    while (it->have_step)
        if ((st = next_step(it, err)) != MP_OK)
            return st;
    const mp_trace_request_info *q = mp_trace_reader_requests(c->r);
    for (int64_t o = 0; o < c->n_requests; o++)
        if (!it->has_steps[o] &&
            problem(c, &it->stop_err, "trace %s: request ord %lld (request %lld): no steps, "
                    "expected the request's prefill and decode steps", c->path, (long long)o,
                    (long long)q[o].request_id) != MP_OK)
            return MP_ERR_FORMAT;
    const mp_trace_run *run = mp_trace_reader_run(c->r);
    if (!run->has_footer)
        return MP_OK; /* reported at open */
    int64_t n_cupti; /* the timing rows were all read by now: counted, not counted again */
    if ((st = mp_trace_reader_count_rows(c->r, "cupti", &n_cupti, err)))
        return st;
    const struct {
        const char *name, *table;
        int64_t footer, found;
    } counts[] = {
        {"n_steps", "the steps table has %lld rows", run->footer_n_steps, it->n_steps_read},
        {"n_routing", "the routing table has %lld records", run->footer_n_routing, it->n_routing_read},
        {"n_timing", "the timing table has %lld rows", run->footer_n_timing, it->n_timing_read},
        {"n_cupti", "the cupti table has %lld rows", run->footer_n_cupti, n_cupti},
    };
    for (int i = 0; i < 4; i++) {
        if (counts[i].footer == counts[i].found)
            continue;
        char found[96];
        snprintf(found, sizeof found, counts[i].table, (long long)counts[i].found);
        if (problem(c, &it->stop_err, "trace %s: footer: %s %lld, but %s", c->path, counts[i].name,
                    (long long)counts[i].footer, found) != MP_OK)
            return MP_ERR_FORMAT;
    }
    return MP_OK;
}

/* The next record to hand out (1), the end (0), or an error; the body of mp_trace_check_next. */
static int advance(mp_trace_check_iter *it, mp_trace_checked_rec *out, mp_error *err)
{
    mp_trace_check *c = it->c;
    mp_status st;
    if (!it->started) {
        it->started = true;
        if ((st = next_step(it, err)) != MP_OK)
            return st;
    }
    mp_trace_routing_rec rec;
    int rc;
    while ((rc = mp_trace_routing_next(it->routing, &rec, err)) == 1) {
        it->n_routing_read++;
        while (it->have_step &&
               cmp_key(it->step.request_id, it->step.step, rec.request_id, rec.step) < 0)
            if ((st = next_step(it, err)) != MP_OK)
                return st;
        if (!it->have_step ||
            cmp_key(it->step.request_id, it->step.step, rec.request_id, rec.step) > 0) {
            if (problem(c, &it->stop_err, "trace %s: request %lld, step %lld, node %lld: routing "
                        "for a step that the steps table lacks", c->path, (long long)rec.request_id,
                        (long long)rec.step, (long long)rec.node_index) != MP_OK)
                return MP_ERR_FORMAT;
            continue;
        }
        const int32_t p = rec.node_index >= 0 && rec.node_index <= MP_TRACE_MAX_NODE_INDEX
                              ? c->pos[rec.node_index] : -1;
        if (p < 0 || p >= c->n_nodes) {
            if (problem(c, &it->stop_err, "trace %s: request %lld (ord %lld), step %lld, node "
                        "%lld: the node is absent from the node table", c->path,
                        (long long)rec.request_id, (long long)it->step_ord, (long long)rec.step,
                        (long long)rec.node_index) != MP_OK)
                return MP_ERR_FORMAT;
            continue;
        }
        if (!it->step_ok)
            continue;
        if (p > it->nodes_seen &&
            problem(c, &it->stop_err, "trace %s: request %lld (ord %lld), step %lld: no routing "
                    "for node %lld, expected one record per node", c->path,
                    (long long)rec.request_id, (long long)it->step_ord, (long long)rec.step,
                    (long long)it->nodes[it->nodes_seen].node_index) != MP_OK)
            return MP_ERR_FORMAT;
        it->nodes_seen = p + 1;
        if (!c->node_ok[p])
            continue;
        bool ok;
        if ((st = check_record(it, &rec, p, &ok, err)) != MP_OK)
            return st;
        if (!ok || c->n_problems > 0)
            continue; /* after a problem nothing more is handed out: only the checks go on */
        if (it->only_node >= 0 && rec.node_index != it->only_node)
            continue;
        *out = (mp_trace_checked_rec){
            .request_id = rec.request_id,
            .request_ord = it->step_ord,
            .step = rec.step,
            .node_index = rec.node_index,
            .node = p,
            .phase = it->step_phase,
            .n_rows = rec.n_rows,
            .top_k = it->nodes[p].top_k,
            .n_experts = it->nodes[p].n_experts,
            .expert_ids = it->ids,
            .weights = it->weights,
        };
        return 1;
    }
    if (rc < 0)
        return rc;
    if ((st = finish(it, err)) != MP_OK)
        return st;
    if (c->n_problems == 0) { /* the whole trace passed: its served and tier totals are complete */
        for (int32_t p = 0; p < c->n_nodes; p++) {
            c->served[p] = it->served[p];
            c->served[p].routes = it->rows_total * it->nodes[p].top_k;
        }
        c->tier = it->tier;
    }
    return 0;
}

int mp_trace_check_next(mp_trace_check_iter *it, mp_trace_checked_rec *rec, mp_error *err)
{
    if (it->finished) {
        if (it->stopped)
            mp_fail(err, it->stopped, "%s", it->stop_err.msg);
        return it->stopped;
    }
    const int rc = advance(it, rec, err);
    if (rc == 1)
        return 1;
    it->finished = true;
    if (rc == MP_ERR_FORMAT && it->stop_err.msg[0] && err)
        *err = it->stop_err; /* a problem stopped it: the problem is the error */
    it->stopped = rc < 0 ? (mp_status)rc : MP_OK;
    if (rc < 0)
        it->stop_err = err ? *err : it->stop_err;
    return rc;
}

/* ---- several traces as one (merge rules) ---- */

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
