/* tests/unit/test_trace.c — trace writer + reader: round trip of random routing, order and
 * argument checks, overwrite refusal, the reader's version checks (version 2 written, versions 1
 * and 2 read alike), f16 conversion. */
#include <criterion/criterion.h>
#include <math.h>
#include <sqlite3.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "kernels/quant.h"
#include "collector/trace.h"
#include "collector/trace_check.h"
#include "collector/trace_read.h"
#include "tests/unit/analyzer_fixture.h"

static char tmpdir[256];

static void setup(void)
{
    snprintf(tmpdir, sizeof tmpdir, "/tmp/mp_test_trace_XXXXXX");
    cr_assert_not_null(mkdtemp(tmpdir));
}

static void teardown(void)
{
    char cmd[300];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", tmpdir);
    cr_assert_eq(system(cmd), 0);
}

static void path_in(char *out, size_t n, const char *name)
{
    snprintf(out, n, "%s/%s", tmpdir, name);
}

static mp_trace_writer *open_with_nodes(const char *path, int n_nodes, int n_experts, int top_k,
                                        mp_trace_weight_format wf)
{
    mp_error err;
    mp_trace_writer *w;
    cr_assert_eq(mp_trace_writer_open(path, false, &w, &err), MP_OK, "%s", err.msg);
    mp_trace_run_info info;
    mp_trace_run_info_init(&info);
    info.source = "moeplan";
    info.n_experts = n_experts;
    info.top_k = top_k;
    info.model_path = "model.gguf";
    cr_assert_eq(mp_trace_set_run(w, &info, &err), MP_OK, "%s", err.msg);
    for (int i = 0; i < n_nodes; i++) {
        char name[32];
        snprintf(name, sizeof name, "blk.%d.ffn_moe", i);
        mp_trace_node nd = {.node_index = i, .node_type = "moe", .node_name = name, .layer = i,
                            .n_experts = n_experts, .top_k = top_k, .expert_bytes = 1000 + i,
                            .weight_format = wf};
        cr_assert_eq(mp_trace_add_node(w, &nd, &err), MP_OK, "%s", err.msg);
    }
    return w;
}

/* Write random routing through the hooks, read it back, compare exactly (f32) or to f16. */
static void round_trip(int n_experts, mp_trace_weight_format wf, bool async)
{
    unsigned seed = (unsigned)time(NULL);
    srand(seed);
    char path[300];
    path_in(path, sizeof path, "rt.db");
    const int n_nodes = 3, top_k = 4, n_req = 3, n_gen = 5;
    mp_trace_writer *w = open_with_nodes(path, n_nodes, n_experts, top_k, wf);
    mp_trace_hooks_state hs;
    mp_hooks h;
    mp_trace_async *as = NULL;
    mp_error err;
    if (async)
        cr_assert_eq(mp_trace_async_start(w, &as, &h, &err), MP_OK, "%s", err.msg);
    else
        h = mp_trace_hooks(&hs, w);
    enum { MAXV = 16 * 4 * 3 * 3 * 8 };
    static int32_t all_ids[MAXV];
    static float all_w[MAXV];
    static int all_node[MAXV];
    int nv = 0;
    for (int r = 0; r < n_req; r++) {
        int32_t prompt[7] = {1, 2, 3, 4, 5, 6, r};
        int n_prompt = 3 + r;
        h.request_begin(h.user, 10 + r, prompt, n_prompt);
        for (int s = 0; s <= n_gen; s++) {
            int rows = s == 0 ? n_prompt : 1;
            h.step_begin(h.user, 10 + r, s, s == 0 ? MP_PHASE_PREFILL : MP_PHASE_DECODE, rows,
                         s == 0 ? 0 : n_prompt + s - 1);
            for (int l = 0; l < n_nodes; l++) {
                int32_t ids[32];
                float wt[32];
                for (int i = 0; i < rows * top_k; i++) {
                    ids[i] = rand() % n_experts;
                    wt[i] = (float)rand() / (float)RAND_MAX;
                    all_ids[nv] = ids[i];
                    all_node[nv] = l;
                    all_w[nv++] = wt[i];
                }
                h.routing(h.user, l, rows, top_k, ids, wt);
                uint8_t served[32]; /* node 1 says nothing (NULL) */
                for (int i = 0; i < rows * top_k; i++)
                    served[i] = (uint8_t)((i + l + s + r) % MP_SERVED_N);
                mp_moe_timing t = {.cpu_expert_ns = 100 * l + s, .hits = l, .misses = rows, .tier_hits = s,
                                   .tier_late = l, .tier_admissions = r, .tier_evictions = s + l,
                                   .tier_copy_bytes = 1000 * r + s, .served = l == 1 ? NULL : served};
                h.moe_timing(h.user, l, &t);
                memset(served, 0xee, sizeof served); /* the hooks copied what they keep */
            }
            h.step_end(h.user, 1000 + s);
        }
        h.request_end(h.user, n_gen);
    }
    if (async)
        cr_assert_eq(mp_trace_async_stop(as, &err), MP_OK, "%s", err.msg);
    else
        cr_assert_eq(hs.status, MP_OK, "%s", hs.error.msg);
    cr_assert_eq(mp_trace_finish(w, &err), MP_OK, "%s", err.msg);
    mp_trace_writer_close(w);

    mp_trace_reader *r;
    cr_assert_eq(mp_trace_reader_open(path, &r, &err), MP_OK, "%s", err.msg);
    const mp_trace_run *run = mp_trace_reader_run(r);
    cr_assert_str_eq(run->status, "complete");
    cr_assert_str_eq(run->source, "moeplan");
    cr_assert(run->has_footer);
    cr_assert_eq(run->footer_n_requests, n_req);
    cr_assert_eq(run->footer_n_steps, n_req * (n_gen + 1));
    cr_assert_eq(run->footer_n_routing, n_req * (n_gen + 1) * n_nodes);
    cr_assert_eq(run->footer_n_timing, n_req * (n_gen + 1) * n_nodes);
    cr_assert_eq(mp_trace_reader_n_nodes(r), n_nodes);
    const mp_trace_node_info *nd = mp_trace_reader_node(r, 2);
    cr_assert_not_null(nd);
    cr_assert_str_eq(nd->node_name, "blk.2.ffn_moe");
    cr_assert_eq(nd->expert_bytes, 1002);
    cr_assert_eq(nd->id_bytes, n_experts <= 256 ? 1 : 2);
    cr_assert_null(mp_trace_reader_node(r, 7));
    cr_assert_eq(mp_trace_reader_n_requests(r), n_req);
    const mp_trace_request_info *rq = mp_trace_reader_requests(r);
    cr_assert_eq(rq[1].request_id, 11);
    cr_assert_eq(rq[1].ord, 1);
    cr_assert_eq(rq[1].n_prompt_tokens, 4);
    cr_assert_eq(rq[1].n_gen_tokens, n_gen);
    cr_assert_eq(strlen(rq[1].prompt_sha256), 64);
    cr_assert_str_neq(rq[0].prompt_sha256, rq[1].prompt_sha256);

    mp_trace_routing_iter *it;
    cr_assert_eq(mp_trace_routing_begin(r, &it, &err), MP_OK, "%s", err.msg);
    mp_trace_routing_rec rec;
    int rc, n_rec = 0, pos = 0;
    int64_t prev_key = -1;
    while ((rc = mp_trace_routing_next(it, &rec, &err)) == 1) {
        cr_assert_gt(rec.key, prev_key, "routing not in key order");
        prev_key = rec.key;
        cr_assert_eq(rec.node_index, n_rec % n_nodes);
        int32_t ids[32];
        float wt[32];
        int64_t n = rec.n_rows * top_k;
        const mp_trace_node_info *ni = mp_trace_reader_node(r, rec.node_index);
        cr_assert_eq(mp_trace_decode_ids(rec.expert_ids, rec.expert_ids_bytes, ni->id_bytes, n,
                                         ids, &err), MP_OK, "%s", err.msg);
        cr_assert_eq(mp_trace_decode_weights(rec.weights, rec.weights_bytes, ni->weight_format, n,
                                             wt, &err), MP_OK, "%s", err.msg);
        for (int64_t i = 0; i < n; i++, pos++) {
            cr_assert_eq(ids[i], all_ids[pos], "seed %u: id %d != %d", seed, ids[i], all_ids[pos]);
            float tol = wf == MP_TRACE_W_F16 ? 1.0f / 2048 : 0.0f;
            cr_assert_leq(fabsf(wt[i] - all_w[pos]), tol, "seed %u: weight %g != %g", seed,
                          (double)wt[i], (double)all_w[pos]);
        }
        n_rec++;
    }
    cr_assert_eq(rc, 0, "%s", err.msg);
    cr_assert_eq(pos, nv);
    mp_trace_routing_end(it);

    /* The route_choices view (plain SQL decoding of the BLOBs) agrees with the C decoders. */
    double want_id_sum = 0, want_w_sum = 0, want_node_id_sum = 0;
    for (int i = 0; i < nv; i++) {
        want_id_sum += all_ids[i];
        want_node_id_sum += (double)all_ids[i] * (all_node[i] + 1); /* ids land at their node */
        want_w_sum += wf == MP_TRACE_W_F16 ? mp_f16_to_f32(mp_f32_to_f16(all_w[i]))
                                           : all_w[i];
    }
    sqlite3 *db;
    sqlite3_stmt *q;
    cr_assert_eq(sqlite3_open_v2(path, &db, SQLITE_OPEN_READONLY, NULL), SQLITE_OK);
    cr_assert_eq(sqlite3_prepare_v2(db, "SELECT count(*), sum(expert_id), sum(weight),"
                                        " max(rank), sum(row), sum(expert_id * (node_index + 1))"
                                        " FROM route_choices", -1, &q, NULL),
                 SQLITE_OK, "%s", sqlite3_errmsg(db));
    cr_assert_eq(sqlite3_step(q), SQLITE_ROW);
    cr_assert_eq(sqlite3_column_int64(q, 0), nv);
    cr_assert_eq(sqlite3_column_double(q, 1), want_id_sum, "seed %u", seed);
    cr_assert_leq(fabs(sqlite3_column_double(q, 2) - want_w_sum), 1e-9 * nv, "seed %u: %g vs %g",
                  seed, sqlite3_column_double(q, 2), want_w_sum);
    cr_assert_eq(sqlite3_column_int64(q, 3), top_k - 1);
    cr_assert_eq(sqlite3_column_double(q, 5), want_node_id_sum, "seed %u", seed);
    sqlite3_finalize(q);
    sqlite3_close(db);

    /* A request range sees only that request. */
    cr_assert_eq(mp_trace_routing_begin_range(r, 11, 11, &it, &err), MP_OK);
    int n_in = 0;
    while ((rc = mp_trace_routing_next(it, &rec, &err)) == 1) {
        cr_assert_eq(rec.request_id, 11);
        n_in++;
    }
    cr_assert_eq(n_in, (n_gen + 1) * n_nodes);
    mp_trace_routing_end(it);

    mp_trace_step_iter *si;
    cr_assert_eq(mp_trace_steps_begin(r, &si, &err), MP_OK);
    mp_trace_step_rec sr;
    cr_assert_eq(mp_trace_steps_next(si, &sr, &err), 1);
    cr_assert_eq(sr.request_id, 10);
    cr_assert_str_eq(sr.phase, "prefill");
    cr_assert_eq(sr.n_rows, 3);
    cr_assert_eq(sr.duration_ns, 1000);
    cr_assert_eq(mp_trace_steps_next(si, &sr, &err), 1);
    cr_assert_str_eq(sr.phase, "decode");
    cr_assert_eq(sr.pos, 3);
    mp_trace_steps_end(si);

    mp_trace_timing_iter *ti;
    cr_assert_eq(mp_trace_timing_begin(r, &ti, &err), MP_OK);
    mp_trace_timing_rec tr;
    int n_t = 0;
    while (mp_trace_timing_next(ti, &tr, &err) == 1) {
        cr_assert_eq(tr.t.cpu_expert_ns, 100 * tr.node_index + tr.step);
        cr_assert_eq(tr.t.tier_hits, tr.step);
        cr_assert_eq(tr.t.tier_late, tr.node_index);
        cr_assert_eq(tr.t.tier_admissions, tr.request_id - 10);
        cr_assert_eq(tr.t.tier_evictions, tr.step + tr.node_index);
        cr_assert_eq(tr.t.tier_copy_bytes, 1000 * (tr.request_id - 10) + tr.step);
        const int64_t routes = (tr.step == 0 ? 3 + tr.request_id - 10 : 1) * top_k;
        if (tr.node_index == 1) {
            cr_assert_null(tr.t.served);
            cr_assert_eq(tr.served_bytes, 0);
        } else {
            cr_assert_not_null(tr.t.served);
            cr_assert_eq(tr.served_bytes, (size_t)routes);
            for (int64_t i = 0; i < routes; i++)
                cr_assert_eq(tr.t.served[i], (i + tr.node_index + tr.step + tr.request_id - 10) % MP_SERVED_N,
                             "request %lld step %lld node %lld route %lld", (long long)tr.request_id,
                             (long long)tr.step, (long long)tr.node_index, (long long)i);
        }
        n_t++;
    }
    cr_assert_eq(n_t, n_req * (n_gen + 1) * n_nodes);
    mp_trace_timing_end(ti);
    mp_trace_reader_close(r);
    /* finish left WAL mode: no -wal file remains beside the trace */
    char wal[320];
    snprintf(wal, sizeof wal, "%s-wal", path);
    cr_assert_neq(access(wal, F_OK), 0, "a -wal file remains after finish");
}

TestSuite(trace, .init = setup, .fini = teardown);

Test(trace, round_trip_f16_u8_ids) { round_trip(128, MP_TRACE_W_F16, false); }
Test(trace, round_trip_f32_u16_ids) { round_trip(300, MP_TRACE_W_F32, false); }
Test(trace, round_trip_async_writer_f16) { round_trip(128, MP_TRACE_W_F16, true); }
Test(trace, round_trip_async_writer_f32) { round_trip(300, MP_TRACE_W_F32, true); }

Test(trace, async_writer_reports_the_first_error)
{
    char path[300];
    path_in(path, sizeof path, "async_err.db");
    mp_trace_writer *w = open_with_nodes(path, 2, 8, 1, MP_TRACE_W_F16);
    mp_error err;
    mp_trace_async *as;
    mp_hooks h;
    cr_assert_eq(mp_trace_async_start(w, &as, &h, &err), MP_OK, "%s", err.msg);
    int32_t id = 1;
    float wt = 1.0f;
    h.request_begin(h.user, 0, NULL, -1);
    for (int s = 0; s < 4; s++) {
        h.step_begin(h.user, 0, s, s ? MP_PHASE_DECODE : MP_PHASE_PREFILL, 1, s);
        h.routing(h.user, 0, 1, 1, &id, &wt);
        h.routing(h.user, s == 2 ? 5 : 1, 1, 1, &id, &wt); /* layer 5 has no node */
        h.step_end(h.user, 10);
    }
    h.request_end(h.user, 3);
    cr_assert_eq(mp_trace_async_stop(as, &err), MP_ERR_ARG);
    cr_assert(strstr(err.msg, "routing for layer 5, which has no node"), "%s", err.msg);
    mp_trace_writer_close(w);
}

Test(trace, refuses_existing_file_unless_forced)
{
    char path[300];
    path_in(path, sizeof path, "x.db");
    FILE *f = fopen(path, "w");
    fputs("keep me", f);
    fclose(f);
    mp_error err;
    mp_trace_writer *w;
    cr_assert_eq(mp_trace_writer_open(path, false, &w, &err), MP_ERR_IO);
    cr_assert(strstr(err.msg, "exists"), "%s", err.msg);
    cr_assert(strstr(err.msg, path), "%s", err.msg);
    cr_assert_eq(mp_trace_writer_open(path, true, &w, &err), MP_OK, "%s", err.msg);
    mp_trace_writer_close(w);
}

Test(trace, writer_rejects_bad_calls)
{
    char path[300];
    path_in(path, sizeof path, "bad.db");
    mp_trace_writer *w = open_with_nodes(path, 2, 8, 2, MP_TRACE_W_F16);
    mp_error err;
    int32_t ids[2] = {1, 8};
    float wt[2] = {0.5f, 0.5f};
    /* routing outside a step */
    cr_assert_eq(mp_trace_add_routing(w, 0, 1, 2, ids, wt, &err), MP_ERR_ARG);
    cr_assert_eq(mp_trace_request_begin(w, 5, NULL, NULL, -1, NULL, -1, &err), MP_OK, "%s", err.msg);
    /* step numbers start at 0 */
    cr_assert_eq(mp_trace_step_begin(w, 1, MP_PHASE_PREFILL, 1, 0, &err), MP_ERR_ARG);
    cr_assert(strstr(err.msg, "step 1 where 0 was expected"), "%s", err.msg);
    cr_assert_eq(mp_trace_step_begin(w, 0, MP_PHASE_PREFILL, 1, 0, &err), MP_OK, "%s", err.msg);
    /* id 8 is outside [0, 8) */
    cr_assert_eq(mp_trace_add_routing(w, 0, 1, 2, ids, wt, &err), MP_ERR_ARG);
    cr_assert(strstr(err.msg, "expert id 8 outside [0, 8)"), "%s", err.msg);
    ids[1] = 7;
    cr_assert_eq(mp_trace_add_routing(w, 5, 1, 2, ids, wt, &err), MP_ERR_ARG);
    cr_assert(strstr(err.msg, "node 5"), "%s", err.msg);
    cr_assert_eq(mp_trace_add_routing(w, 0, 2, 2, ids, wt, &err), MP_ERR_ARG);
    cr_assert_eq(mp_trace_add_routing(w, 0, 1, 2, ids, wt, &err), MP_OK, "%s", err.msg);
    /* a node twice in a step */
    cr_assert_eq(mp_trace_add_routing(w, 0, 1, 2, ids, wt, &err), MP_ERR_ARG);
    cr_assert(strstr(err.msg, "request 5 step 0 node 0: routing recorded twice"), "%s", err.msg);
    /* a step is stored with every node's routing or none: node 1 is missing */
    cr_assert_eq(mp_trace_step_end(w, -1, &err), MP_ERR_ARG);
    cr_assert(strstr(err.msg, "request 5 step 0: routing for 1 of 2 nodes (first missing: node 1)"),
              "%s", err.msg);
    cr_assert_eq(mp_trace_add_routing(w, 1, 1, 2, ids, wt, &err), MP_OK, "%s", err.msg);
    cr_assert_eq(mp_trace_step_end(w, -1, &err), MP_OK, "%s", err.msg);
    /* a step without routing at all is kept, without a routing row */
    cr_assert_eq(mp_trace_step_begin(w, 1, MP_PHASE_DECODE, 1, 1, &err), MP_OK, "%s", err.msg);
    cr_assert_eq(mp_trace_step_end(w, -1, &err), MP_OK, "%s", err.msg);
    /* finish with a request open */
    cr_assert_eq(mp_trace_finish(w, &err), MP_ERR_ARG);
    cr_assert_eq(mp_trace_request_end(w, 0, -1, &err), MP_OK);
    /* request ids must increase */
    cr_assert_eq(mp_trace_request_begin(w, 5, NULL, NULL, -1, NULL, -1, &err), MP_ERR_ARG);
    cr_assert_eq(mp_trace_finish(w, &err), MP_OK, "%s", err.msg);
    mp_trace_counts c = mp_trace_writer_counts(w);
    cr_assert_eq(c.n_requests, 1);
    cr_assert_eq(c.n_routing, 2, "routing records count (step, node) pairs");
    cr_assert_eq(c.n_steps, 2);
    mp_trace_writer_close(w);
}

Test(trace, unfinished_run_reads_as_running_without_footer)
{
    char path[300];
    path_in(path, sizeof path, "open.db");
    mp_trace_writer *w = open_with_nodes(path, 1, 8, 1, MP_TRACE_W_F16);
    mp_error err;
    int32_t id = 3;
    float wt = 1.0f;
    cr_assert_eq(mp_trace_request_begin(w, 0, "p0", NULL, -1, NULL, -1, &err), MP_OK);
    cr_assert_eq(mp_trace_step_begin(w, 0, MP_PHASE_DECODE, 1, 0, &err), MP_OK);
    cr_assert_eq(mp_trace_add_routing(w, 0, 1, 1, &id, &wt, &err), MP_OK);
    cr_assert_eq(mp_trace_step_end(w, 5, &err), MP_OK);
    cr_assert_eq(mp_trace_step_begin(w, 1, MP_PHASE_DECODE, 1, 1, &err), MP_OK);
    cr_assert_eq(mp_trace_add_routing(w, 0, 1, 1, &id, &wt, &err), MP_OK);
    mp_trace_writer_close(w); /* step 1 never committed */
    mp_trace_reader *r;
    cr_assert_eq(mp_trace_reader_open(path, &r, &err), MP_OK, "%s", err.msg);
    cr_assert_str_eq(mp_trace_reader_run(r)->status, "running");
    cr_assert(!mp_trace_reader_run(r)->has_footer);
    cr_assert_str_eq(mp_trace_reader_requests(r)[0].external_id, "p0");
    mp_trace_routing_iter *it;
    mp_trace_routing_rec rec;
    cr_assert_eq(mp_trace_routing_begin(r, &it, &err), MP_OK);
    cr_assert_eq(mp_trace_routing_next(it, &rec, &err), 1);
    cr_assert_eq(mp_trace_routing_next(it, &rec, &err), 0, "the uncommitted step was kept");
    mp_trace_routing_end(it);
    mp_trace_reader_close(r);
}

Test(trace, reader_refuses_foreign_and_other_versions)
{
    char path[300];
    path_in(path, sizeof path, "foreign.db");
    sqlite3 *db;
    cr_assert_eq(sqlite3_open(path, &db), SQLITE_OK);
    cr_assert_eq(sqlite3_exec(db, "CREATE TABLE t(x)", NULL, NULL, NULL), SQLITE_OK);
    sqlite3_close(db);
    mp_error err;
    mp_trace_reader *r;
    cr_assert_eq(mp_trace_reader_open(path, &r, &err), MP_ERR_FORMAT);
    cr_assert(strstr(err.msg, "not a moeplan trace"), "%s", err.msg);

    path_in(path, sizeof path, "v3.db");
    cr_assert_eq(sqlite3_open(path, &db), SQLITE_OK);
    cr_assert_eq(sqlite3_exec(db, mp_trace_schema_sql, NULL, NULL, NULL), SQLITE_OK);
    cr_assert_eq(sqlite3_exec(db, "PRAGMA user_version=3", NULL, NULL, NULL), SQLITE_OK);
    sqlite3_close(db);
    cr_assert_eq(mp_trace_reader_open(path, &r, &err), MP_ERR_FORMAT);
    cr_assert(strstr(err.msg, "schema version 3, this moeplan reads versions 1 and 2"), "%s",
              err.msg);
    cr_assert(strstr(err.msg, path), "%s", err.msg);

    path_in(path, sizeof path, "text.db");
    FILE *f = fopen(path, "w");
    fputs("this is not sqlite at all, just some text long enough to be a header.....", f);
    fclose(f);
    cr_assert_neq(mp_trace_reader_open(path, &r, &err), MP_OK);
    cr_assert(strstr(err.msg, path), "%s", err.msg);
    path_in(path, sizeof path, "missing.db");
    cr_assert_eq(mp_trace_reader_open(path, &r, &err), MP_ERR_IO);
}

/* Nodes of different shapes (top-k, u8/u16 ids, f16/f32 weights, sparse node indices) in one
 * step row: the reader's slices are each node's routing, and the same trace rewritten to schema
 * version 1 (one row per node) reads back record for record, byte for byte. */
Test(trace, version_2_slices_mixed_nodes_like_version_1)
{
    unsigned seed = (unsigned)time(NULL);
    srand(seed);
    char path[300];
    path_in(path, sizeof path, "mixed.db");
    mp_error err;
    mp_trace_writer *w;
    cr_assert_eq(mp_trace_writer_open(path, false, &w, &err), MP_OK, "%s", err.msg);
    mp_trace_run_info info;
    mp_trace_run_info_init(&info);
    info.source = "moeplan";
    cr_assert_eq(mp_trace_set_run(w, &info, &err), MP_OK, "%s", err.msg);
    static const struct { int index, n_experts, top_k; mp_trace_weight_format wf; } shape[] = {
        {0, 8, 2, MP_TRACE_W_F16}, {3, 300, 4, MP_TRACE_W_F32}, {7, 16, 1, MP_TRACE_W_F16},
        {9, 1000, 3, MP_TRACE_W_F16}};
    enum { NN = 4 };
    for (int i = 0; i < NN; i++) {
        mp_trace_node nd = {.node_index = shape[i].index, .node_type = "moe", .node_name = "n",
                            .layer = i, .n_experts = shape[i].n_experts, .top_k = shape[i].top_k,
                            .expert_bytes = -1, .weight_format = shape[i].wf};
        cr_assert_eq(mp_trace_add_node(w, &nd, &err), MP_OK, "%s", err.msg);
    }
    for (int r = 0; r < 2; r++) {
        cr_assert_eq(mp_trace_request_begin(w, r, NULL, NULL, -1, NULL, -1, &err), MP_OK);
        for (int st = 0; st < 3; st++) {
            const int rows = st == 0 ? 5 : 1;
            cr_assert_eq(mp_trace_step_begin(w, st, st ? MP_PHASE_DECODE : MP_PHASE_PREFILL, rows,
                                             -1, &err), MP_OK, "%s", err.msg);
            for (int i = NN - 1; i >= 0; i--) { /* any order: the writer places each block */
                int32_t ids[5 * 4];
                float wt[5 * 4];
                for (int v = 0; v < rows * shape[i].top_k; v++) {
                    ids[v] = rand() % shape[i].n_experts;
                    wt[v] = (float)rand() / (float)RAND_MAX;
                }
                cr_assert_eq(mp_trace_add_routing(w, shape[i].index, rows, shape[i].top_k, ids,
                                                  wt, &err), MP_OK, "%s", err.msg);
            }
            cr_assert_eq(mp_trace_step_end(w, -1, &err), MP_OK, "%s", err.msg);
        }
        cr_assert_eq(mp_trace_request_end(w, 2, -1, &err), MP_OK);
    }
    cr_assert_eq(mp_trace_finish(w, &err), MP_OK, "%s", err.msg);
    mp_trace_writer_close(w);

    /* read version 2, keep every record's bytes */
    enum { MAXREC = 2 * 3 * NN };
    static uint8_t blobs[MAXREC][2][5 * 4 * 4];
    static mp_trace_routing_rec got[MAXREC];
    mp_trace_reader *r;
    cr_assert_eq(mp_trace_reader_open(path, &r, &err), MP_OK, "%s", err.msg);
    cr_assert_eq(mp_trace_reader_version(r), 2);
    mp_trace_routing_iter *it;
    cr_assert_eq(mp_trace_routing_begin(r, &it, &err), MP_OK);
    int n = 0, rc;
    mp_trace_routing_rec rec;
    while ((rc = mp_trace_routing_next(it, &rec, &err)) == 1) {
        cr_assert_lt(n, MAXREC);
        const int i = n % NN;
        cr_assert_eq(rec.node_index, shape[i].index);
        cr_assert_eq(rec.request_id, n / (3 * NN));
        cr_assert_eq(rec.step, n / NN % 3);
        const int64_t vals = rec.n_rows * shape[i].top_k;
        cr_assert_eq(rec.expert_ids_bytes, (size_t)vals * (shape[i].n_experts > 256 ? 2 : 1));
        cr_assert_eq(rec.weights_bytes, (size_t)vals * (shape[i].wf == MP_TRACE_W_F16 ? 2 : 4));
        int32_t ids[5 * 4];
        cr_assert_eq(mp_trace_decode_ids(rec.expert_ids, rec.expert_ids_bytes,
                                         shape[i].n_experts > 256 ? 2 : 1, vals, ids, &err), MP_OK);
        for (int64_t v = 0; v < vals; v++)
            cr_assert(ids[v] >= 0 && ids[v] < shape[i].n_experts, "seed %u: id %d at node %d",
                      seed, ids[v], shape[i].index);
        got[n] = rec;
        memcpy(blobs[n][0], rec.expert_ids, rec.expert_ids_bytes);
        memcpy(blobs[n][1], rec.weights, rec.weights_bytes);
        n++;
    }
    cr_assert_eq(rc, 0, "%s", err.msg);
    cr_assert_eq(n, MAXREC);
    mp_trace_routing_end(it);
    /* a request range (version 2 keys) */
    cr_assert_eq(mp_trace_routing_begin_range(r, 1, 1, &it, &err), MP_OK);
    int n1 = 0;
    while (mp_trace_routing_next(it, &rec, &err) == 1) {
        cr_assert_eq(rec.request_id, 1);
        n1++;
    }
    cr_assert_eq(n1, 3 * NN);
    mp_trace_routing_end(it);
    mp_trace_reader_close(r);

    to_v1(path);
    cr_assert_eq(mp_trace_reader_open(path, &r, &err), MP_OK, "%s", err.msg);
    cr_assert_eq(mp_trace_reader_version(r), 1);
    cr_assert_eq(mp_trace_routing_begin(r, &it, &err), MP_OK);
    for (int k = 0; k < MAXREC; k++) {
        cr_assert_eq(mp_trace_routing_next(it, &rec, &err), 1, "%s", err.msg);
        cr_assert_eq(rec.key, got[k].key);
        cr_assert_eq(rec.request_id, got[k].request_id);
        cr_assert_eq(rec.step, got[k].step);
        cr_assert_eq(rec.node_index, got[k].node_index);
        cr_assert_eq(rec.n_rows, got[k].n_rows);
        cr_assert_eq(rec.expert_ids_bytes, got[k].expert_ids_bytes);
        cr_assert_eq(rec.weights_bytes, got[k].weights_bytes);
        cr_assert(!memcmp(rec.expert_ids, blobs[k][0], rec.expert_ids_bytes), "record %d", k);
        cr_assert(!memcmp(rec.weights, blobs[k][1], rec.weights_bytes), "record %d", k);
    }
    cr_assert_eq(mp_trace_routing_next(it, &rec, &err), 0);
    mp_trace_routing_end(it);
    cr_assert_eq(mp_trace_routing_begin_range(r, 1, 1, &it, &err), MP_OK);
    n1 = 0;
    while (mp_trace_routing_next(it, &rec, &err) == 1) {
        cr_assert_eq(rec.request_id, 1);
        n1++;
    }
    cr_assert_eq(n1, 3 * NN);
    mp_trace_routing_end(it);
    mp_trace_reader_close(r);
}

/* A step row whose BLOBs are short or long: every node still gets a record, no slice reads past
 * the BLOB, and the mismatch shows at the node where the sizes stop adding up. */
Test(trace, version_2_short_and_long_blobs_are_reported_not_repaired)
{
    char path[300];
    path_in(path, sizeof path, "short.db");
    mp_trace_writer *w = open_with_nodes(path, 3, 8, 2, MP_TRACE_W_F16);
    mp_error err;
    int32_t ids[2] = {1, 2};
    float wt[2] = {0.5f, 0.5f};
    cr_assert_eq(mp_trace_request_begin(w, 0, NULL, NULL, -1, NULL, -1, &err), MP_OK);
    cr_assert_eq(mp_trace_step_begin(w, 0, MP_PHASE_PREFILL, 1, 0, &err), MP_OK);
    for (int nd = 0; nd < 3; nd++)
        cr_assert_eq(mp_trace_add_routing(w, nd, 1, 2, ids, wt, &err), MP_OK, "%s", err.msg);
    cr_assert_eq(mp_trace_step_end(w, -1, &err), MP_OK);
    cr_assert_eq(mp_trace_request_end(w, 0, -1, &err), MP_OK);
    cr_assert_eq(mp_trace_finish(w, &err), MP_OK);
    mp_trace_writer_close(w);
    /* ids: 6 bytes -> 3 (node 0 whole, node 1 one byte, node 2 none); weights: 12 -> 15 */
    sql(path, "UPDATE routing SET expert_ids = substr(expert_ids, 1, 3), "
              "weights = weights || X'010203'");
    mp_trace_reader *r;
    cr_assert_eq(mp_trace_reader_open(path, &r, &err), MP_OK, "%s", err.msg);
    mp_trace_routing_iter *it;
    cr_assert_eq(mp_trace_routing_begin(r, &it, &err), MP_OK);
    mp_trace_routing_rec rec;
    const size_t want_ids[3] = {2, 1, 0}, want_w[3] = {4, 4, 7};
    for (int nd = 0; nd < 3; nd++) {
        cr_assert_eq(mp_trace_routing_next(it, &rec, &err), 1);
        cr_assert_eq(rec.node_index, nd);
        cr_assert_eq(rec.expert_ids_bytes, want_ids[nd], "node %d: %zu", nd, rec.expert_ids_bytes);
        cr_assert_eq(rec.weights_bytes, want_w[nd], "node %d: %zu", nd, rec.weights_bytes);
        cr_assert_eq(rec.expert_ids == NULL, want_ids[nd] == 0);
    }
    cr_assert_eq(mp_trace_routing_next(it, &rec, &err), 0);
    mp_trace_routing_end(it);
    mp_trace_reader_close(r);
}

/* A step row over the reader's direct-read size (1 MiB: here 11,000 rows × 2 nodes × (16 B of
 * u16 ids + 32 B of f32 weights) = 1.06 MB) is read node by node through incremental BLOB I/O:
 * the same records, and a cut BLOB still shows at the last node. */
Test(trace, version_2_long_prefill_is_read_in_slices)
{
    unsigned seed = (unsigned)time(NULL);
    srand(seed);
    enum { ROWS = 11000, K = 8, NE = 300 };
    char path[300];
    path_in(path, sizeof path, "long.db");
    mp_trace_writer *w = open_with_nodes(path, 2, NE, K, MP_TRACE_W_F32);
    mp_error err;
    static int32_t ids[2][ROWS * K];
    static float wt[2][ROWS * K];
    for (int nd = 0; nd < 2; nd++)
        for (int v = 0; v < ROWS * K; v++) {
            ids[nd][v] = rand() % NE;
            wt[nd][v] = (float)rand() / (float)RAND_MAX;
        }
    cr_assert_eq(mp_trace_request_begin(w, 0, NULL, NULL, -1, NULL, -1, &err), MP_OK);
    cr_assert_eq(mp_trace_step_begin(w, 0, MP_PHASE_PREFILL, ROWS, 0, &err), MP_OK);
    for (int nd = 0; nd < 2; nd++)
        cr_assert_eq(mp_trace_add_routing(w, nd, ROWS, K, ids[nd], wt[nd], &err), MP_OK, "%s",
                     err.msg);
    cr_assert_eq(mp_trace_step_end(w, -1, &err), MP_OK, "%s", err.msg);
    cr_assert_eq(mp_trace_step_begin(w, 1, MP_PHASE_DECODE, 1, ROWS, &err), MP_OK);
    for (int nd = 0; nd < 2; nd++)
        cr_assert_eq(mp_trace_add_routing(w, nd, 1, K, ids[nd], wt[nd], &err), MP_OK);
    cr_assert_eq(mp_trace_step_end(w, -1, &err), MP_OK);
    cr_assert_eq(mp_trace_request_end(w, 1, -1, &err), MP_OK);
    cr_assert_eq(mp_trace_finish(w, &err), MP_OK);
    mp_trace_writer_close(w);

    static int32_t got_ids[ROWS * K];
    static float got_w[ROWS * K];
    for (int pass = 0; pass < 2; pass++) {
        mp_trace_reader *r;
        cr_assert_eq(mp_trace_reader_open(path, &r, &err), MP_OK, "%s", err.msg);
        mp_trace_routing_iter *it;
        cr_assert_eq(mp_trace_routing_begin(r, &it, &err), MP_OK);
        mp_trace_routing_rec rec;
        for (int k = 0; k < 4; k++) { /* (step 0, node 0), (0, 1), (1, 0), (1, 1) */
            const int nd = k % 2, rows = k < 2 ? ROWS : 1;
            cr_assert_eq(mp_trace_routing_next(it, &rec, &err), 1, "%s", err.msg);
            cr_assert_eq(rec.node_index, nd);
            cr_assert_eq(rec.step, k / 2);
            cr_assert_eq(rec.n_rows, rows);
            if (pass == 1 && k == 1) { /* the cut byte */
                cr_assert_eq(rec.expert_ids_bytes, (size_t)rows * K * 2 - 1);
                continue;
            }
            cr_assert_eq(mp_trace_decode_ids(rec.expert_ids, rec.expert_ids_bytes, 2, rows * K,
                                             got_ids, &err), MP_OK, "%s", err.msg);
            cr_assert_eq(mp_trace_decode_weights(rec.weights, rec.weights_bytes, "f32", rows * K,
                                                 got_w, &err), MP_OK, "%s", err.msg);
            cr_assert(!memcmp(got_ids, ids[nd], sizeof(int32_t) * (size_t)(rows * K)),
                      "seed %u: ids of step %d node %d differ", seed, k / 2, nd);
            cr_assert(!memcmp(got_w, wt[nd], sizeof(float) * (size_t)(rows * K)),
                      "seed %u: weights of step %d node %d differ", seed, k / 2, nd);
        }
        cr_assert_eq(mp_trace_routing_next(it, &rec, &err), 0);
        mp_trace_routing_end(it);
        mp_trace_reader_close(r);
        sql(path, "UPDATE routing SET expert_ids = substr(expert_ids, 1, length(expert_ids) - 1) "
                  "WHERE key = 0");
    }
}

Test(trace, decode_helpers_check_sizes)
{
    mp_error err;
    uint8_t blob[4] = {1, 2, 3, 4};
    int32_t ids[4];
    float w[2];
    cr_assert_eq(mp_trace_decode_ids(blob, 4, 2, 2, ids, &err), MP_OK);
    cr_assert_eq(ids[0], 0x0201);
    cr_assert_eq(ids[1], 0x0403);
    cr_assert_eq(mp_trace_decode_ids(blob, 3, 2, 2, ids, &err), MP_ERR_FORMAT);
    cr_assert(strstr(err.msg, "3 bytes"), "%s", err.msg);
    cr_assert_eq(mp_trace_decode_ids(blob, 4, 3, 1, ids, &err), MP_ERR_FORMAT);
    cr_assert_eq(mp_trace_decode_weights(blob, 4, "f16", 2, w, &err), MP_OK);
    cr_assert_eq(mp_trace_decode_weights(blob, 4, "f32", 2, w, &err), MP_ERR_FORMAT);
    cr_assert_eq(mp_trace_decode_weights(blob, 4, "bf16", 2, w, &err), MP_ERR_FORMAT);
}

/* One step of one row, top-2, at node 0: the timing row says a tier slot served expert 3 and the
 * CPU expert 5; then the columns named in drop go (a trace written before they existed). */
static void old_timing_trace(const char *path, const char *const *drop, int n_drop)
{
    mp_trace_writer *w = open_with_nodes(path, 1, 8, 2, MP_TRACE_W_F16);
    mp_trace_hooks_state hs;
    mp_hooks h = mp_trace_hooks(&hs, w);
    mp_error err;
    int32_t prompt[2] = {1, 2};
    h.request_begin(h.user, 0, prompt, 2);
    h.step_begin(h.user, 0, 0, MP_PHASE_PREFILL, 1, 0);
    int32_t ids[2] = {3, 5};
    float wt[2] = {0.5f, 0.5f};
    h.routing(h.user, 0, 1, 2, ids, wt);
    const uint8_t served[2] = {MP_SERVED_TIER, MP_SERVED_CPU};
    mp_moe_timing t = {.cpu_expert_ns = 7, .hits = 1, .misses = 1, .tier_hits = 1, .served = served};
    h.moe_timing(h.user, 0, &t);
    h.step_end(h.user, 10);
    h.request_end(h.user, 0);
    cr_assert_eq(hs.status, MP_OK, "%s", hs.error.msg);
    cr_assert_eq(mp_trace_finish(w, &err), MP_OK, "%s", err.msg);
    mp_trace_writer_close(w);
    sqlite3 *db;
    cr_assert_eq(sqlite3_open(path, &db), SQLITE_OK);
    for (int i = 0; i < n_drop; i++) {
        char sql[96];
        snprintf(sql, sizeof sql, "ALTER TABLE timing DROP COLUMN %s", drop[i]);
        cr_assert_eq(sqlite3_exec(db, sql, NULL, NULL, NULL), SQLITE_OK, "%s", sqlite3_errmsg(db));
    }
    sqlite3_close(db);
}

/* The checker's adaptive-tier totals of the trace at path, after an iteration to its end. */
static mp_trace_tier_totals checked_tier(const char *path)
{
    mp_error err;
    mp_trace_check *c;
    cr_assert_eq(mp_trace_check_open(path, NULL, NULL, &c, &err), MP_OK, "%s", err.msg);
    mp_trace_check_iter *it;
    cr_assert_eq(mp_trace_check_begin(c, -1, &it, &err), MP_OK, "%s", err.msg);
    mp_trace_checked_rec rec;
    int rc;
    while ((rc = mp_trace_check_next(it, &rec, &err)) == 1)
        ;
    cr_assert_eq(rc, 0, "%s", err.msg);
    mp_trace_check_end(it);
    const mp_trace_tier_totals tot = *mp_trace_check_tier(c);
    mp_trace_check_close(c);
    return tot;
}

/* Open the trace at path and read its first timing row into *tr; the caller ends *ti, then
 * closes *r (tr->t.served lives until then). */
static void open_first_timing_row(const char *path, mp_trace_reader **r, mp_trace_timing_iter **ti,
                                  mp_trace_timing_rec *tr)
{
    mp_error err;
    cr_assert_eq(mp_trace_reader_open(path, r, &err), MP_OK, "%s", err.msg);
    cr_assert_eq(mp_trace_timing_begin(*r, ti, &err), MP_OK, "%s", err.msg);
    cr_assert_eq(mp_trace_timing_next(*ti, tr, &err), 1, "%s", err.msg);
}

/* A trace written before the adaptive tier's columns and served existed (same schema version):
 * its timing rows read with the tier's counts 0 and no served codes, and the checker finds no
 * tier. Made by dropping the columns from a fresh trace. */
Test(trace, timing_without_tier_columns_reads)
{
    char path[300];
    path_in(path, sizeof path, "old.db");
    const char *cols[] = {"tier_hits", "tier_late", "tier_admissions", "tier_evictions", "tier_copy_bytes", "served"};
    old_timing_trace(path, cols, 6);
    mp_trace_reader *r;
    mp_trace_timing_iter *ti;
    mp_trace_timing_rec tr;
    open_first_timing_row(path, &r, &ti, &tr);
    cr_assert_eq(tr.t.cpu_expert_ns, 7);
    cr_assert_eq(tr.t.tier_hits, 0);
    cr_assert_eq(tr.t.tier_copy_bytes, 0);
    cr_assert_null(tr.t.served);
    cr_assert_eq(tr.served_bytes, 0);
    mp_trace_timing_end(ti);
    mp_trace_reader_close(r);
    const mp_trace_tier_totals tot = checked_tier(path);
    cr_assert(!tot.present, "no tier columns: no tier");
    cr_assert_eq(tot.routes, 0);
    cr_assert_eq(tot.hits, 0);
}

/* A trace written after the tier's columns but before served: the tier's counts read, the served
 * codes are absent (NULL); with the column, they read as written. Either way the checker sums the
 * row's tier counts (one tier hit of 2 routes). */
Test(trace, timing_without_served_column_reads)
{
    for (int drop = 0; drop < 2; drop++) {
        char path[300];
        path_in(path, sizeof path, drop ? "old_served.db" : "served.db");
        const char *cols[] = {"served"};
        old_timing_trace(path, cols, drop);
        mp_trace_reader *r;
        mp_trace_timing_iter *ti;
        mp_trace_timing_rec tr;
        open_first_timing_row(path, &r, &ti, &tr);
        cr_assert_eq(tr.t.tier_hits, 1);
        if (drop) {
            cr_assert_null(tr.t.served);
            cr_assert_eq(tr.served_bytes, 0);
        } else {
            cr_assert_eq(tr.served_bytes, 2);
            cr_assert_eq(tr.t.served[0], MP_SERVED_TIER);
            cr_assert_eq(tr.t.served[1], MP_SERVED_CPU);
        }
        mp_error err;
        cr_assert_eq(mp_trace_timing_next(ti, &tr, &err), 0, "%s", err.msg);
        mp_trace_timing_end(ti);
        mp_trace_reader_close(r);
        const mp_trace_tier_totals tot = checked_tier(path);
        cr_assert(tot.present && !tot.overflow, "drop %d", drop);
        cr_assert_eq(tot.routes, 2, "drop %d", drop);
        cr_assert_eq(tot.hits, 1, "drop %d", drop);
        cr_assert_eq(tot.late + tot.admissions + tot.evictions + tot.copy_bytes, 0, "drop %d", drop);
    }
}
