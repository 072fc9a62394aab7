/* simulator/sim_load.c — load a moeplan trace into an mp_sim_trace.
 *
 * The routing comes through the collector's fail-closed reader (collector/trace_check.h), the
 * one the analyzer uses: a trace the analyzer refuses (status, footer counts, steps, node table,
 * ids, weights, damaged pages) is refused here with the same one-line message. On top of it the
 * replay needs nodes of one geometry (experts, top-k) on increasing layers, at most
 * MP_STRP_MAX_DIM of them, and request ids that fit in 32 bits.
 *
 * With mp_sim_load_options.non_moe, each routed step's measured non-MoE time is read beside its
 * routing (the steps and timing tables, streamed in the same (request, step) order), and fails
 * closed the same way, naming the (request, step): a NULL duration, a missing timing row, a
 * negative timing value, MoE time above the step's duration. Nothing is ever filled in from
 * the cost file: the caller chose the trace's numbers.
 */
#include "simulator/sim_load.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "collector/trace_check.h"
#include "collector/trace_read.h"
#include "runtime/model.h"

/* The measured non-MoE time of the routed steps, read in routing order (one entry per traced
 * step; with as_decode a traced step becomes n_sim one-row steps of the mp_sim_trace). */
typedef struct non_moe_reader {
    const char *path;
    const mp_trace_node_info *nodes; /* (n_nodes) as the routing's, node_index increasing */
    uint32_t n_nodes;
    mp_trace_step_iter *steps;
    mp_trace_timing_iter *timing;
    mp_trace_timing_rec tim; /* look-ahead row of timing, valid while tim_rc == 1 (0: end) */
    int tim_rc;
    struct nm_step {
        int64_t request, step; /* the traced step's identity, for errors */
        double measured_ns;    /* duration - MoE time, ns */
        bool decode;           /* a decode step of one row (as_decode replays it as is) */
        uint32_t n_sim;        /* mp_sim_trace steps it became */
    } *rec;                    /* (cap), n used */
    uint64_t n, cap;
} non_moe_reader;

static void nm_free(non_moe_reader *nm)
{
    if (nm->steps)
        mp_trace_steps_end(nm->steps);
    if (nm->timing)
        mp_trace_timing_end(nm->timing);
    free(nm->rec);
    memset(nm, 0, sizeof *nm);
}

static mp_status nm_begin(non_moe_reader *nm, mp_trace_reader *r, const char *path, mp_error *err)
{
    memset(nm, 0, sizeof *nm);
    nm->path = path;
    nm->nodes = mp_trace_reader_nodes(r);
    nm->n_nodes = (uint32_t)mp_trace_reader_n_nodes(r);
    mp_status st = mp_trace_steps_begin(r, &nm->steps, err);
    if (!st)
        st = mp_trace_timing_begin(r, &nm->timing, err);
    if (!st && (nm->tim_rc = mp_trace_timing_next(nm->timing, &nm->tim, err)) < 0)
        st = (mp_status)nm->tim_rc;
    return st;
}

static mp_status nm_fail(const non_moe_reader *nm, mp_error *err, int64_t request, int64_t step, const char *what)
{
    return mp_fail(err, MP_ERR_FORMAT,
                   "trace %s: step (request %lld, step %lld): %s (or use --non-moe costs)", nm->path,
                   (long long)request, (long long)step, what);
}

/* (a, b) before (c, d) in (request, step) order. */
static bool before(int64_t a, int64_t b, int64_t c, int64_t d)
{
    return a < c || (a == c && b < d);
}

/* The MoE block's share of a step's wall time at one node, from its timing row. The expert FFN
 * time on each side (gpu_expert_ns, cpu_expert_ns), the activation copies (d2h_ns, h2d_ns) and
 * the combine (merge_ns) are what the replay itself charges for a layer, so they are what is
 * taken out; the GPU's experts run while the host computes its own (and its copies), hence the
 * max, as in sim_layer_ns. sync_ns stays in the remainder: the GPU executor measures it as the
 * host's wait for the device's event (gpu/gpu_moe.c), and the device is then still running
 * the kernels queued before the MoE block (attention, norms, router, and any all-resident layers
 * before it), so it is mostly non-MoE time and cannot be split from the round trip's own latency.
 * Values are >= 0 (checked); doubles hold them exactly up to 2^53 ns. */
static double node_moe_ns(const mp_moe_timing *t)
{
    double gpu_ns = (double)t->gpu_expert_ns;
    double host_ns = (double)t->d2h_ns + (double)t->cpu_expert_ns + (double)t->h2d_ns;
    return (gpu_ns > host_ns ? gpu_ns : host_ns) + (double)t->merge_ns;
}

/* Read the traced step (request, step) of `rows` rows: its steps row and its timing rows. */
static mp_status nm_step(non_moe_reader *nm, int64_t request, int64_t step, uint32_t rows, uint32_t n_sim,
                         mp_error *err)
{
    mp_trace_step_rec sr;
    int rc;
    char what[256];
    /* steps without routing are not replayed: skip them */
    while ((rc = mp_trace_steps_next(nm->steps, &sr, err)) == 1 && before(sr.request_id, sr.step, request, step))
        ;
    if (rc < 0)
        return (mp_status)rc;
    if (rc == 0 || sr.request_id != request || sr.step != step)
        return nm_fail(nm, err, request, step, "no row in the steps table: expected one for every routed step");
    if (sr.duration_ns < 0)
        return nm_fail(nm, err, request, step,
                       "duration_ns is NULL or negative: expected the step's measured wall time for the trace's non-MoE time");
    const bool decode = sr.phase && !strcmp(sr.phase, "decode");
    if (!decode && !(sr.phase && !strcmp(sr.phase, "prefill")))
        return nm_fail(nm, err, request, step, "phase is neither 'prefill' nor 'decode'");
    while (nm->tim_rc == 1 && before(nm->tim.request_id, nm->tim.step, request, step))
        if ((nm->tim_rc = mp_trace_timing_next(nm->timing, &nm->tim, err)) < 0)
            return (mp_status)nm->tim_rc;
    double moe_ns = 0;
    for (uint32_t l = 0; l < nm->n_nodes; l++) {
        const mp_trace_timing_rec *tr = &nm->tim;
        if (nm->tim_rc != 1 || tr->request_id != request || tr->step != step ||
            tr->node_index != nm->nodes[l].node_index) {
            snprintf(what, sizeof what, "no timing row for node %lld: expected one per MoE node of every routed step",
                     (long long)nm->nodes[l].node_index);
            return nm_fail(nm, err, request, step, what);
        }
        const mp_moe_timing *t = &tr->t;
        if (t->gpu_expert_ns < 0 || t->cpu_expert_ns < 0 || t->d2h_ns < 0 || t->h2d_ns < 0 || t->merge_ns < 0) {
            snprintf(what, sizeof what, "timing of node %lld: a NULL or negative time: expected times >= 0",
                     (long long)tr->node_index);
            return nm_fail(nm, err, request, step, what);
        }
        moe_ns += node_moe_ns(t);
        if ((nm->tim_rc = mp_trace_timing_next(nm->timing, &nm->tim, err)) < 0)
            return (mp_status)nm->tim_rc;
    }
    if (nm->tim_rc == 1 && nm->tim.request_id == request && nm->tim.step == step) {
        snprintf(what, sizeof what, "timing row for node %lld, which the nodes table lacks",
                 (long long)nm->tim.node_index);
        return nm_fail(nm, err, request, step, what);
    }
    const double non_moe_ns = (double)sr.duration_ns - moe_ns;
    if (non_moe_ns < 0) {
        snprintf(what, sizeof what,
                 "MoE time %.0f ns (timing, all nodes) exceeds the step's duration_ns %lld: expected MoE time <= "
                 "the step's wall time", moe_ns, (long long)sr.duration_ns);
        return nm_fail(nm, err, request, step, what);
    }
    if (nm->n == nm->cap) {
        uint64_t cap = nm->cap ? 2 * nm->cap : 1024;
        struct nm_step *grown = realloc(nm->rec, sizeof *grown * cap);
        if (!grown)
            return mp_fail(err, MP_ERR_NOMEM, "trace %s: out of memory for %llu steps' non-MoE times", nm->path,
                           (unsigned long long)cap);
        nm->rec = grown;
        nm->cap = cap;
    }
    nm->rec[nm->n++] = (struct nm_step){request, step, non_moe_ns, decode && rows == 1, n_sim};
    return MP_OK;
}

static int by_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

/* One value per mp_sim_trace step, attached to out. With as_decode, a traced step that is not a
 * one-row decode step is replayed as one-row steps, which a measurement of many rows does not
 * describe: each gets the median of the decode steps' values (the mean of the middle two for an
 * even count), the trace's own measure of a one-row step. */
static mp_status nm_finish(non_moe_reader *nm, bool as_decode, mp_sim_trace *out, mp_error *err)
{
    double median_ns = -1;
    double *values = NULL;
    if (as_decode) {
        uint64_t n_decode = 0;
        if (!(values = malloc(sizeof *values * (nm->n ? nm->n : 1))))
            return mp_fail(err, MP_ERR_NOMEM, "trace %s: out of memory", nm->path);
        for (uint64_t i = 0; i < nm->n; i++)
            if (nm->rec[i].decode)
                values[n_decode++] = nm->rec[i].measured_ns;
        for (uint64_t i = 0; i < nm->n && !n_decode; i++)
            if (!nm->rec[i].decode) {
                free(values);
                return nm_fail(nm, err, nm->rec[i].request, nm->rec[i].step,
                               "not a one-row decode step, so replayed as one-row steps (--as-decode), and the "
                               "trace has no decode step: expected decode steps, whose median non-MoE time such "
                               "steps take");
            }
        if (n_decode) {
            qsort(values, n_decode, sizeof *values, by_double);
            median_ns = n_decode % 2 ? values[n_decode / 2] : (values[n_decode / 2 - 1] + values[n_decode / 2]) / 2;
        }
        free(values);
    }
    if (!(values = malloc(sizeof *values * out->n_steps)))
        return mp_fail(err, MP_ERR_NOMEM, "trace %s: out of memory for %llu non-MoE times", nm->path,
                       (unsigned long long)out->n_steps);
    uint64_t k = 0;
    for (uint64_t i = 0; i < nm->n; i++)
        for (uint32_t j = 0; j < nm->rec[i].n_sim && k < out->n_steps; j++)
            values[k++] = as_decode && !nm->rec[i].decode ? median_ns : nm->rec[i].measured_ns;
    char where[600];
    snprintf(where, sizeof where, "trace %s", nm->path);
    mp_status st = mp_sim_trace_set_non_moe(out, values, k, where, err);
    free(values);
    return st;
}

/* The node table as the replay needs it: 1..MP_STRP_MAX_DIM nodes of one geometry (experts,
 * top-k) on increasing node indices and layers; model_layer (n_nodes) gets each node's block. */
static mp_status check_nodes(const char *path, const mp_trace_node_info *nodes, int64_t n_nodes,
                             uint32_t *model_layer, mp_error *err)
{
    for (int64_t i = 0; i < n_nodes; i++) {
        const mp_trace_node_info *n = &nodes[i];
        if (n->node_index < 0 || (i > 0 && n->node_index <= nodes[i - 1].node_index) ||
            n->n_experts != nodes[0].n_experts || n->top_k != nodes[0].top_k || n->layer < 0 ||
            n->layer >= MP_STRP_MAX_DIM || (i > 0 && n->layer <= nodes[i - 1].layer))
            return mp_fail(err, MP_ERR_FORMAT,
                           "trace %s: node %lld (index %lld, layer %lld, %lld experts, top-%lld): expected increasing "
                           "node indices and layers with the experts and top-k of node 0 (%lld, %lld)",
                           path, (long long)i, (long long)n->node_index, (long long)n->layer, (long long)n->n_experts,
                           (long long)n->top_k, (long long)nodes[0].n_experts, (long long)nodes[0].top_k);
        model_layer[i] = (uint32_t)n->layer;
    }
    if (nodes[0].n_experts < 1 || nodes[0].n_experts > MP_STRP_MAX_DIM || nodes[0].top_k < 1 ||
        nodes[0].top_k > nodes[0].n_experts)
        return mp_fail(err, MP_ERR_FORMAT,
                       "trace %s: nodes have %lld experts, top-%lld: expected 1 <= top-k <= experts <= %u", path,
                       (long long)nodes[0].n_experts, (long long)nodes[0].top_k, MP_STRP_MAX_DIM);
    return MP_OK;
}

/* An empty mp_sim_trace of the trace's geometry, and what the run says about the model. */
static mp_status trace_geometry(mp_trace_reader *r, const char *path, mp_sim_trace *out, mp_sim_trace_facts *facts,
                                mp_error *err)
{
    const int64_t n_nodes = mp_trace_reader_n_nodes(r);
    const mp_trace_node_info *nodes = mp_trace_reader_nodes(r);
    if (n_nodes < 1 || n_nodes > MP_STRP_MAX_DIM)
        return mp_fail(err, MP_ERR_FORMAT, "trace %s: %lld nodes: expected 1..%u MoE nodes", path,
                       (long long)n_nodes, MP_STRP_MAX_DIM);
    uint32_t *model_layer = malloc(sizeof *model_layer * (size_t)n_nodes);
    if (!model_layer)
        return mp_fail(err, MP_ERR_NOMEM, "trace %s: out of memory", path);
    mp_status st = check_nodes(path, nodes, n_nodes, model_layer, err);
    if (!st)
        st = mp_sim_trace_init(out, (uint32_t)n_nodes, (uint32_t)nodes[0].n_experts, (uint32_t)nodes[0].top_k,
                               model_layer, err);
    free(model_layer);
    if (st)
        return st;
    if (!(out->expert_bytes = calloc((size_t)n_nodes, sizeof *out->expert_bytes)))
        return mp_fail(err, MP_ERR_NOMEM, "trace %s: out of memory", path);
    for (int64_t i = 0; i < n_nodes; i++)
        out->expert_bytes[i] = nodes[i].expert_bytes > 0 ? (uint64_t)nodes[i].expert_bytes : 0;
    const mp_trace_run *run = mp_trace_reader_run(r);
    facts->expert_bytes = nodes[0].expert_bytes;
    facts->n_embd = run->n_embd;
    facts->n_ff = run->n_ff_expert;
    snprintf(facts->model_sha256, sizeof facts->model_sha256, "%s", run->model_sha256 ? run->model_sha256 : "");
    /* as cost files name the experts ("Q4_K/Q6_K") where the text is collect's, else as it is */
    char name[MP_EXPERT_QUANT_MAX];
    if (run->quant_types && mp_expert_quant_from_types(run->quant_types, name))
        snprintf(facts->quant, sizeof facts->quant, "%s", name);
    else
        snprintf(facts->quant, sizeof facts->quant, "%s", run->quant_types ? run->quant_types : "");
    return MP_OK;
}

/* One traced step gathered from its records, which the checker hands out in node order, each
 * with the step's rows: ids is (n_layers, rows, top_k) once `have` reaches n_layers. */
typedef struct step_block {
    uint16_t *ids;     /* (n_layers, cap_rows, top_k) */
    uint64_t cap_rows;
    int64_t request, step;
    uint32_t have, rows;
} step_block;

/* Add rec to the step it belongs to; *whole when it completes the step. */
static mp_status gather(step_block *b, const mp_trace_checked_rec *rec, const mp_sim_trace *t, const char *path,
                        bool *whole, mp_error *err)
{
    const uint32_t L = t->n_layers, K = t->top_k;
    *whole = false;
    if (rec->request_id != b->request || rec->step != b->step) {
        b->request = rec->request_id;
        b->step = rec->step;
        b->have = 0;
    }
    if (rec->node != (int32_t)b->have)
        return mp_fail(err, MP_ERR_INTERNAL, "trace %s: routing (request %lld, step %lld, node %lld): "
                       "out of sequence after the trace checks", path, (long long)rec->request_id,
                       (long long)rec->step, (long long)rec->node_index);
    if ((uint64_t)rec->n_rows > UINT32_MAX / ((uint64_t)K * L))
        return mp_fail(err, MP_ERR_LIMIT, "trace %s: routing (request %lld, step %lld): %lld rows: expected "
                       "at most %llu for %u nodes x top-%u", path, (long long)rec->request_id,
                       (long long)rec->step, (long long)rec->n_rows,
                       (unsigned long long)(UINT32_MAX / ((uint64_t)K * L)), L, K);
    b->rows = (uint32_t)rec->n_rows;
    const uint64_t n = (uint64_t)b->rows * K;
    if (b->have == 0 && b->rows > b->cap_rows) {
        free(b->ids);
        if (!(b->ids = malloc(sizeof *b->ids * n * L))) {
            b->cap_rows = 0;
            return mp_fail(err, MP_ERR_NOMEM, "trace %s: out of memory for a step of %u rows", path, b->rows);
        }
        b->cap_rows = b->rows;
    }
    memcpy(b->ids + (uint64_t)b->have * n, rec->expert_ids, sizeof *b->ids * n);
    if (++b->have < L)
        return MP_OK;
    if (rec->request_id < 0 || rec->request_id > UINT32_MAX)
        return mp_fail(err, MP_ERR_LIMIT, "trace %s: routing (request %lld, step %lld): request id out "
                       "of range: expected 0..2^32-1", path, (long long)rec->request_id, (long long)rec->step);
    b->have = 0;
    *whole = true;
    return MP_OK;
}

/* The gathered step into out: as it is, or with as_decode every row as its own one-row step (real
 * routing replayed as if decoded). */
static mp_status add_block(mp_sim_trace *out, const step_block *b, bool as_decode, const char *path, mp_error *err)
{
    char where[160];
    snprintf(where, sizeof where, "trace %s: step (request %lld, step %lld)", path, (long long)b->request,
             (long long)b->step);
    if (!as_decode)
        return mp_sim_trace_add_step(out, (uint32_t)b->request, b->rows, b->ids, where, err);
    const uint32_t L = out->n_layers, K = out->top_k;
    const uint64_t n = (uint64_t)b->rows * K;
    uint16_t *one = malloc(sizeof *one * (size_t)L * K); /* (n_layers, 1, top_k) */
    if (!one)
        return mp_fail(err, MP_ERR_NOMEM, "trace %s: out of memory", path);
    mp_status st = MP_OK;
    for (uint32_t row = 0; row < b->rows && !st; row++) {
        for (uint32_t l = 0; l < L; l++)
            memcpy(one + (size_t)l * K, b->ids + (uint64_t)l * n + (uint64_t)row * K, sizeof *one * K);
        st = mp_sim_trace_add_step(out, (uint32_t)b->request, 1, one, where, err);
    }
    free(one);
    return st;
}

/* Every step of the trace's routing, from the checked records of it, into out (and, when nm is
 * given, each step's measured non-MoE time beside it). */
static mp_status read_routing(mp_trace_check_iter *it, const char *path, bool as_decode, non_moe_reader *nm,
                              mp_sim_trace *out, mp_error *err)
{
    step_block b = {.request = -1, .step = -1};
    mp_trace_checked_rec rec;
    mp_status st = MP_OK;
    int rc;
    while ((rc = mp_trace_check_next(it, &rec, err)) == 1) {
        bool whole;
        if ((st = gather(&b, &rec, out, path, &whole, err)))
            break;
        if (!whole)
            continue;
        if (nm && (st = nm_step(nm, b.request, b.step, b.rows, as_decode ? b.rows : 1, err)))
            break;
        if ((st = add_block(out, &b, as_decode, path, err)))
            break;
    }
    free(b.ids);
    if (st)
        return st;
    if (rc < 0)
        return (mp_status)rc;
    if (out->n_steps == 0)
        return mp_fail(err, MP_ERR_FORMAT, "trace %s: no routing records: expected at least one step", path);
    return MP_OK;
}

mp_status mp_sim_load_trace(const char *path, const mp_sim_load_options *opt, mp_sim_trace *out,
                            mp_sim_trace_facts *facts, mp_error *err)
{
    memset(out, 0, sizeof *out);
    memset(facts, 0, sizeof *facts);
    const bool as_decode = opt && opt->as_decode, want_non_moe = opt && opt->non_moe;
    mp_trace_check *chk;
    mp_status st = mp_trace_check_open(path, NULL, NULL, &chk, err); /* no sink: fail closed */
    if (st)
        return st;
    mp_trace_reader *r = mp_trace_check_reader(chk);
    mp_trace_check_iter *it = NULL;
    non_moe_reader nm = {0};
    st = trace_geometry(r, path, out, facts, err);
    if (!st)
        st = mp_trace_check_begin(chk, -1, &it, err);
    if (!st && want_non_moe)
        st = nm_begin(&nm, r, path, err);
    if (!st)
        st = read_routing(it, path, as_decode, want_non_moe ? &nm : NULL, out, err);
    if (!st && want_non_moe)
        st = nm_finish(&nm, as_decode, out, err);
    nm_free(&nm);
    mp_trace_check_end(it);
    mp_trace_check_close(chk);
    if (st)
        mp_sim_trace_free(out);
    return st;
}

/* The first problem stops the merge: it is the error. */
static mp_status first_problem(void *user, const char *msg)
{
    mp_error *e = user;
    if (!e->code)
        mp_fail(e, MP_ERR_FORMAT, "%s", msg);
    return MP_ERR_FORMAT;
}

/* Every trace's tables through the checker's stage 1, and each against the first by the merge
 * rules; the routing itself is checked as each trace is read. */
static mp_status check_merge(const char *const *paths, int n_paths, mp_error *err)
{
    mp_trace_check **c = calloc((size_t)n_paths, sizeof *c);
    if (!c)
        return mp_fail(err, MP_ERR_NOMEM, "simulate: out of memory");
    mp_error problem = {0};
    mp_status st = MP_OK;
    for (int i = 0; i < n_paths && !st; i++) {
        st = mp_trace_check_open(paths[i], first_problem, &problem, &c[i], err);
        if (!st && i > 0)
            st = mp_trace_check_merge(c[0], paths[0], c[i], paths[i], first_problem, &problem);
        if (st == MP_ERR_NOMEM && !problem.code)
            mp_fail(err, st, "simulate: out of memory comparing %s with %s", paths[i], paths[0]);
    }
    if (st && problem.code)
        *err = problem;
    for (int i = 0; i < n_paths; i++)
        mp_trace_check_close(c[i]);
    free(c);
    return st;
}

/* Several traces of one model: the merge rules first (collector/trace_check.h: same model SHA-256,
 * shapes and node table; no run given twice), then each trace's steps after the ones
 * before, its requests renumbered past theirs so that requests of different traces stay
 * distinct. Counts add because every step is kept as it is. */
mp_status mp_sim_load_traces(const char *const *paths, int n_paths, const mp_sim_load_options *opt,
                             mp_sim_trace *out, mp_sim_trace_facts *facts, mp_error *err)
{
    if (n_paths == 1)
        return mp_sim_load_trace(paths[0], opt, out, facts, err);
    memset(out, 0, sizeof *out);
    mp_status st = check_merge(paths, n_paths, err);
    if (st)
        return st;
    if ((st = mp_sim_load_trace(paths[0], opt, out, facts, err)))
        return st;
    double *non_moe = NULL; /* (n_steps) of every trace, when they have it */
    uint64_t n_non_moe = 0;
    uint32_t base = 0; /* the next trace's requests start past every request so far */
    for (uint64_t s = 0; s < out->n_steps; s++)
        base = out->steps[s].request >= base ? out->steps[s].request + 1 : base;
    if (out->non_moe_ns) {
        non_moe = malloc(sizeof *non_moe * (out->n_steps ? out->n_steps : 1));
        if (!non_moe) {
            mp_sim_trace_free(out);
            return mp_fail(err, MP_ERR_NOMEM, "simulate: out of memory merging traces");
        }
        memcpy(non_moe, out->non_moe_ns, sizeof *non_moe * out->n_steps);
        n_non_moe = out->n_steps;
        free(out->non_moe_ns); /* steps are appended first; the times are attached at the end */
        out->non_moe_ns = NULL;
    }
    for (int k = 1; !st && k < n_paths; k++) {
        mp_sim_trace t;
        mp_sim_trace_facts f;
        if ((st = mp_sim_load_trace(paths[k], opt, &t, &f, err)))
            break;
        uint32_t next = base;
        for (uint64_t s = 0; !st && s < t.n_steps; s++) {
            const mp_sim_step *step = &t.steps[s];
            if ((uint64_t)step->request + base >= UINT32_MAX)
                st = mp_fail(err, MP_ERR_LIMIT, "trace %s: request %u: more than 2^32 requests in the traces",
                             paths[k], step->request);
            else
                st = mp_sim_trace_add_step(out, base + step->request, step->rows, t.ids + step->ids_off, paths[k],
                                           err);
            next = base + step->request >= next ? base + step->request + 1 : next;
        }
        if (!st && non_moe) {
            double *grown = realloc(non_moe, sizeof *non_moe * (n_non_moe + t.n_steps + 1));
            if (!grown)
                st = mp_fail(err, MP_ERR_NOMEM, "simulate: out of memory merging traces");
            else {
                non_moe = grown;
                memcpy(non_moe + n_non_moe, t.non_moe_ns, sizeof *non_moe * t.n_steps);
                n_non_moe += t.n_steps;
            }
        }
        base = next;
        mp_sim_trace_free(&t);
    }
    if (!st && non_moe)
        st = mp_sim_trace_set_non_moe(out, non_moe, n_non_moe, paths[0], err);
    free(non_moe);
    if (st)
        mp_sim_trace_free(out);
    return st;
}
