/* tests/unit/test_analyzer_validate.c — fail-closed validation: one test per way a trace can be
 * wrong. A good trace is written with the collector's writer, then broken with raw SQL, and the
 * first problem must name the trace, the place (request, step, node, row, slot) and what was
 * expected; --validate-only style (a higher limit) must list several problems.
 *
 * The writer stores schema version 2: one routing row per (request, step), key = request << 24 |
 * step, node 0's (n_rows, 2) block then node 1's (u8 ids: 2 × n_rows bytes per node; f16
 * weights 4 × n_rows, f32 8 × n_rows). Ways to break a trace that only per-node rows allow
 * (a node absent from the node table, one node missing in a step) are tested on the trace
 * rewritten to version 1 (to_v1), which the reader still accepts. */
#include <criterion/criterion.h>
#include <sqlite3.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "analyzer/validate.h"
#include "collector/trace.h"
#include "tests/unit/analyzer_fixture.h"

static char tmpdir[256];

static void setup(void)
{
    snprintf(tmpdir, sizeof tmpdir, "/tmp/mp_test_anval_XXXXXX");
    cr_assert_not_null(mkdtemp(tmpdir));
}

static void teardown(void)
{
    char cmd[300];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", tmpdir);
    cr_assert_eq(system(cmd), 0);
}

TestSuite(analyzer_validate, .init = setup, .fini = teardown);

static char *good(const char *name)
{
    return make_trace(tmpdir, name, (trace_opts){0});
}

/* Validate (both stages) with a problem limit; returns the problems (caller frees). */
static mp_an_problems validate(const char *const *paths, int n, int64_t max)
{
    mp_an_problems pb;
    mp_error err;
    cr_assert_eq(mp_an_problems_init(&pb, max, &err), MP_OK);
    mp_an_input in;
    mp_status st = mp_an_input_open(&in, paths, n, NULL, &pb, &err);
    cr_assert(st == MP_OK || st == MP_ERR_FORMAT, "unexpected error: %s", err.msg);
    if (st == MP_OK) {
        st = mp_an_scan(&in, &pb, NULL, NULL, &err);
        cr_assert(st == MP_OK || st == MP_ERR_FORMAT, "unexpected error: %s", err.msg);
    }
    mp_an_input_close(&in);
    return pb;
}

/* The first problem of one trace must contain every one of the given fragments. */
static void expect_first(const char *path, const char *const *want)
{
    const char *paths[1] = {path};
    mp_an_problems pb = validate(paths, 1, 1);
    cr_assert_eq(pb.n, 1, "expected a problem in %s", path);
    cr_assert_not_null(strstr(pb.msg[0], path), "problem does not name the trace: %s", pb.msg[0]);
    for (int i = 0; want[i]; i++)
        cr_assert_not_null(strstr(pb.msg[0], want[i]), "'%s' not in: %s", want[i], pb.msg[0]);
    cr_assert_null(strchr(pb.msg[0], '\n'));
    mp_an_problems_free(&pb);
}
#define EXPECT(path, ...) expect_first(path, (const char *const[]){__VA_ARGS__, NULL})

Test(analyzer_validate, good_trace_has_no_problem)
{
    char *p = good("good.db");
    const char *paths[1] = {p};
    mp_an_problems pb = validate(paths, 1, 100);
    cr_assert_eq(pb.n, 0, "unexpected: %s", pb.n ? pb.msg[0] : "");
    mp_an_problems_free(&pb);
    to_v1(p); /* the same trace in schema version 1 */
    pb = validate(paths, 1, 100);
    cr_assert_eq(pb.n, 0, "unexpected (version 1): %s", pb.n ? pb.msg[0] : "");
    mp_an_problems_free(&pb);
    free(p);
}

Test(analyzer_validate, run_not_complete)
{
    char *p = good("t.db");
    sql(p, "UPDATE run SET status='running'");
    EXPECT(p, "run status is 'running'", "expected 'complete'");
    free(p);
}

Test(analyzer_validate, footer_missing)
{
    char *p = good("t.db");
    sql(p, "DELETE FROM footer");
    EXPECT(p, "footer: missing");
    free(p);
}

Test(analyzer_validate, footer_counts_disagree)
{
    char *p = good("t.db");
    sql(p, "UPDATE footer SET n_routing = n_routing + 1");
    EXPECT(p, "footer: n_routing 19", "routing table has 18 records");
    free(p);
    p = good("t2.db");
    sql(p, "UPDATE footer SET n_steps = 4");
    EXPECT(p, "footer: n_steps 4", "9 rows");
    free(p);
}

Test(analyzer_validate, truncation_marker)
{
    char *p = good("t.db");
    sql(p, "UPDATE run SET config_json='{\"truncated\": {\"dropped\": 12}}'");
    EXPECT(p, "truncation marker");
    free(p);
}

Test(analyzer_validate, merged_traces_of_different_models)
{
    char *a = good("a.db");
    char *b = make_trace(tmpdir, "b.db", (trace_opts){.sha = "cd" "00000000000000000000000000000000000000000000000000000000000000"});
    const char *paths[2] = {a, b};
    mp_an_problems pb = validate(paths, 2, 1);
    cr_assert_eq(pb.n, 1);
    cr_assert_not_null(strstr(pb.msg[0], "model SHA-256 cd00"), "%s", pb.msg[0]);
    cr_assert_not_null(strstr(pb.msg[0], b), "%s", pb.msg[0]);
    mp_an_problems_free(&pb);
    free(a), free(b);
}

Test(analyzer_validate, merged_traces_of_different_shapes)
{
    char *a = good("a.db");
    char *b = make_trace(tmpdir, "b.db", (trace_opts){.n_experts = 16});
    const char *paths[2] = {a, b};
    mp_an_problems pb = validate(paths, 2, 1);
    cr_assert_eq(pb.n, 1);
    cr_assert_not_null(strstr(pb.msg[0], "16 experts"), "%s", pb.msg[0]);
    mp_an_problems_free(&pb);
    free(a), free(b);
}

Test(analyzer_validate, merged_traces_node_identity_disagrees)
{
    char *a = good("a.db");
    char *b = make_trace(tmpdir, "b.db", (trace_opts){.node_prefix = "other"});
    const char *paths[2] = {a, b};
    mp_an_problems pb = validate(paths, 2, 1);
    cr_assert_eq(pb.n, 1);
    cr_assert_not_null(strstr(pb.msg[0], "node row 0"), "%s", pb.msg[0]);
    cr_assert_not_null(strstr(pb.msg[0], "'other.0'"), "%s", pb.msg[0]);
    cr_assert_not_null(strstr(pb.msg[0], "disagrees"), "%s", pb.msg[0]);
    mp_an_problems_free(&pb);
    free(a), free(b);
}

Test(analyzer_validate, merged_traces_good_and_repeated)
{
    char *a = good("a.db"), *b = good("b.db");
    const char *paths[2] = {a, b};
    mp_an_problems pb = validate(paths, 2, 10);
    cr_assert_eq(pb.n, 0, "two distinct traces of one model merge: %s", pb.n ? pb.msg[0] : "");
    mp_an_problems_free(&pb);
    const char *twice[2] = {a, a};
    pb = validate(twice, 2, 1);
    cr_assert_eq(pb.n, 1);
    cr_assert_not_null(strstr(pb.msg[0], "counted twice"), "%s", pb.msg[0]);
    mp_an_problems_free(&pb);
    free(a), free(b);
}

Test(analyzer_validate, request_missing)
{
    char *p = good("t.db");
    sql(p, "DELETE FROM requests WHERE request_id = 1; UPDATE requests SET ord = 1 WHERE "
           "request_id = 2; UPDATE footer SET n_requests = 2");
    EXPECT(p, "request 1, step 0", "missing from the requests table");
    free(p);
}

Test(analyzer_validate, request_ord_gap)
{
    char *p = good("t.db");
    sql(p, "UPDATE requests SET ord = 5 WHERE request_id = 2");
    EXPECT(p, "request 2: ord 5, expected 2");
    free(p);
}

Test(analyzer_validate, request_repeated)
{
    char *p = good("t.db");
    sql(p, "UPDATE requests SET external_id = 'prompt-7' WHERE request_id IN (0, 2)");
    EXPECT(p, "request 2 (ord 2): external id 'prompt-7' repeats request 0");
    free(p);
}

Test(analyzer_validate, request_overlapping)
{
    char *p = good("t.db");
    sql(p, "UPDATE requests SET start_ns = 400 WHERE request_id = 1");
    EXPECT(p, "request 1 (ord 1): starts at 400 ns, before request 0 ended (500 ns)", "overlapping");
    free(p);
}

Test(analyzer_validate, request_out_of_order)
{
    char *p = good("t.db");
    sql(p, "UPDATE requests SET ord = ord + 10; UPDATE requests SET ord = 0 WHERE request_id = 2;"
           "UPDATE requests SET ord = 1 WHERE request_id = 0; UPDATE requests SET ord = 2 WHERE "
           "request_id = 1");
    EXPECT(p, "request 0 (ord 1): out of order");
    free(p);
}

Test(analyzer_validate, request_without_steps)
{
    char *p = good("t.db");
    sql(p, "DELETE FROM routing WHERE request_id = 2; DELETE FROM steps WHERE request_id = 2;"
           "UPDATE footer SET n_steps = 6, n_routing = 12");
    EXPECT(p, "request ord 2 (request 2): no steps");
    free(p);
}

Test(analyzer_validate, step_gap)
{
    char *p = good("t.db");
    sql(p, "DELETE FROM steps WHERE request_id = 1 AND step = 1");
    EXPECT(p, "request 1 (ord 1), step 2: follows step 0, expected step 1 (a gap)");
    free(p);
}

Test(analyzer_validate, step_zero_missing)
{
    char *p = good("t.db");
    sql(p, "DELETE FROM steps WHERE request_id = 0 AND step = 0; DELETE FROM routing WHERE "
           "request_id = 0 AND step = 0");
    EXPECT(p, "request 0 (ord 0), step 1: first step is 1, expected 0");
    free(p);
}

Test(analyzer_validate, routing_without_step_row)
{
    char *p = good("t.db");
    /* a routing row for step 7 of request 0: key = 0 << 24 | 7 */
    sql(p, "INSERT INTO routing (key, n_rows, expert_ids, weights) SELECT 7, n_rows, "
           "expert_ids, weights FROM routing WHERE key = 2");
    EXPECT(p, "request 0, step 7, node 0: routing for a step that the steps table lacks");
    free(p);
    /* version 1: one node's record (key = 0 << 36 | 7 << 12 | 1) */
    p = good("t1.db");
    to_v1(p);
    sql(p, "INSERT INTO routing (key, n_rows, expert_ids, weights) SELECT (7 << 12) | 1, n_rows, "
           "expert_ids, weights FROM routing WHERE key = (2 << 12) | 1");
    EXPECT(p, "request 0, step 7, node 1: routing for a step that the steps table lacks");
    free(p);
}

Test(analyzer_validate, node_absent_from_node_table)
{
    char *p = good("t.db");
    to_v1(p); /* version 2 cannot name a node outside the node table */
    sql(p, "INSERT INTO routing (key, n_rows, expert_ids, weights) SELECT (1 << 12) | 9, n_rows, "
           "expert_ids, weights FROM routing WHERE key = (1 << 12) | 1");
    EXPECT(p, "request 0 (ord 0), step 1, node 9: the node is absent from the node table");
    free(p);
}

Test(analyzer_validate, node_missing_in_step)
{
    char *p = good("t.db");
    to_v1(p); /* version 2 holds every node of a step or none (below) */
    sql(p, "DELETE FROM routing WHERE key = (1 << 36) | (1 << 12) | 1");
    EXPECT(p, "request 1, step 1: routing for 1 of 2 nodes", "first missing: node 1");
    free(p);
    p = good("t2.db");
    sql(p, "DELETE FROM routing WHERE key = (1 << 24) | 1; UPDATE footer SET n_routing = 16");
    EXPECT(p, "request 1, step 1: routing for 0 of 2 nodes", "first missing: node 0");
    free(p);
}

Test(analyzer_validate, rows_disagree_with_step)
{
    char *p = good("t.db");
    sql(p, "UPDATE routing SET n_rows = 3 WHERE key = (2 << 24) | 0");
    EXPECT(p, "request 2 (ord 2), step 0, node 0: 3 rows, expected the step's 4");
    free(p);
}

Test(analyzer_validate, id_count_not_rows_times_topk)
{
    char *p = good("t.db");
    /* u8 ids: drop the step's last id (node 1's; two would be a row, one is a count mismatch) */
    sql(p, "UPDATE routing SET expert_ids = substr(expert_ids, 1, length(expert_ids) - 1) "
           "WHERE key = (1 << 24) | 0");
    EXPECT(p, "request 1 (ord 1), step 0, node 1: 7 expert ids, expected rows × top-k = 4 × 2 = 8");
    free(p);
    /* an id missing inside the BLOB: node 0's slice keeps its size (its ids shift, which may
     * break a row), the missing byte shows as a count at the last node */
    p = good("t2.db");
    sql(p, "UPDATE routing SET expert_ids = substr(expert_ids, 1, 1) || substr(expert_ids, 3) "
           "WHERE key = (1 << 24) | 0");
    const char *paths[1] = {p};
    mp_an_problems pb = validate(paths, 1, 100);
    bool saw = false;
    for (int64_t i = 0; i < pb.n; i++)
        saw |= strstr(pb.msg[i], "request 1 (ord 1), step 0, node 1: 7 expert ids, expected rows "
                                 "× top-k = 4 × 2 = 8") != NULL;
    cr_assert(saw, "%lld problems, first: %s", (long long)pb.n, pb.n ? pb.msg[0] : "");
    mp_an_problems_free(&pb);
    free(p);
    /* a BLOB longer than the nodes' blocks: the surplus goes to the last node */
    p = good("t3.db");
    sql(p, "UPDATE routing SET expert_ids = expert_ids || X'01' WHERE key = (2 << 24) | 1");
    EXPECT(p, "request 2 (ord 2), step 1, node 1: 3 expert ids, expected rows × top-k = 1 × 2 = 2");
    free(p);
}

Test(analyzer_validate, weight_count_not_rows_times_topk)
{
    char *p = make_trace(tmpdir, "t.db", (trace_opts){.wf = MP_TRACE_W_F32});
    sql(p, "UPDATE routing SET weights = substr(weights, 1, length(weights) - 4) WHERE key = 2");
    EXPECT(p, "request 0 (ord 0), step 2, node 1: 1 router weights, expected rows × top-k = 1 × 2 = 2");
    free(p);
}

Test(analyzer_validate, truncated_blobs)
{
    char *p = make_trace(tmpdir, "t.db", (trace_opts){.wf = MP_TRACE_W_F32});
    sql(p, "UPDATE routing SET weights = substr(weights, 1, length(weights) - 1) WHERE key = 1");
    EXPECT(p, "request 0 (ord 0), step 1, node 1: weights BLOB of 7 bytes is truncated");
    free(p);
    /* 2-byte ids (300 experts): cut one byte */
    p = make_trace(tmpdir, "t2.db", (trace_opts){.n_experts = 300});
    sql(p, "UPDATE routing SET expert_ids = substr(expert_ids, 1, length(expert_ids) - 1) WHERE "
           "key = (1 << 24) | 0");
    EXPECT(p, "request 1 (ord 1), step 0, node 1: expert_ids BLOB of 15 bytes is truncated");
    free(p);
}

Test(analyzer_validate, expert_id_out_of_range)
{
    char *p = good("t.db");
    /* row 1, slot 1 of request 2's prefill at node 0 becomes 8 (of 8 experts) */
    sql(p, "UPDATE routing SET expert_ids = substr(expert_ids, 1, 3) || X'08' || "
           "substr(expert_ids, 5) WHERE key = (2 << 24) | 0");
    EXPECT(p, "request 2 (ord 2), step 0, node 0, row 1, slot 1: expert id 8 outside [0, 8)");
    free(p);
}

Test(analyzer_validate, repeated_id_within_row)
{
    char *p = good("t.db");
    /* node 1's block of the one-row step starts at byte 3 */
    sql(p, "UPDATE routing SET expert_ids = substr(expert_ids, 1, 2) || X'0303' || "
           "substr(expert_ids, 5) WHERE key = (1 << 24) | 2");
    EXPECT(p, "request 1 (ord 1), step 2, node 1, row 0, slot 1: expert id 3 repeated within the row");
    free(p);
}

Test(analyzer_validate, non_finite_and_negative_weights)
{
    char *p = make_trace(tmpdir, "t.db", (trace_opts){.wf = MP_TRACE_W_F32});
    sql(p, "UPDATE routing SET weights = substr(weights, 1, 4) || X'0000C07F' || "
           "substr(weights, 9) WHERE key = 1");
    EXPECT(p, "request 0 (ord 0), step 1, node 0, row 0, slot 1: router weight nan",
           "finite non-negative");
    free(p);
    p = make_trace(tmpdir, "t2.db", (trace_opts){.wf = MP_TRACE_W_F16});
    /* f16 -1.0 = 0xBC00 (little-endian 00 BC) */
    sql(p, "UPDATE routing SET weights = substr(weights, 1, 4) || X'00BC' || substr(weights, 7) "
           "WHERE key = 2");
    EXPECT(p, "request 0 (ord 0), step 2, node 1, row 0, slot 0: router weight -1");
    free(p);
}

/* f16 weights at the edges: infinity (0x7C00), NaN (0x7E00) and a negative subnormal (0x8001)
 * are refused; -0 (0x8000) is a valid zero weight. */
Test(analyzer_validate, f16_special_weights)
{
    static const struct { const char *blob, *want; } cases[] = {
        {"X'007C'", "router weight inf"}, {"X'007E'", "router weight nan"},
        {"X'0180'", "router weight -"}};
    for (size_t c = 0; c < sizeof cases / sizeof *cases; c++) {
        char name[32], q[256];
        snprintf(name, sizeof name, "f16_%zu.db", c);
        char *p = make_trace(tmpdir, name, (trace_opts){.wf = MP_TRACE_W_F16});
        snprintf(q, sizeof q, "UPDATE routing SET weights = substr(weights, 1, 6) || %s || "
                              "substr(weights, 9) WHERE key = (1 << 24) | 2",
                 cases[c].blob);
        sql(p, q);
        EXPECT(p, "request 1 (ord 1), step 2, node 1, row 0, slot 1: ", cases[c].want);
        free(p);
    }
    char *p = make_trace(tmpdir, "f16_zero.db", (trace_opts){.wf = MP_TRACE_W_F16});
    /* node 1, row 0, slot 0 of the 4-row prefill: byte 17 */
    sql(p, "UPDATE routing SET weights = substr(weights, 1, 16) || X'0080' || substr(weights, 19) "
           "WHERE key = (1 << 24) | 0");
    const char *paths[1] = {p};
    mp_an_problems pb = validate(paths, 1, 100);
    cr_assert_eq(pb.n, 0, "-0 weight refused: %s", pb.n ? pb.msg[0] : "");
    mp_an_problems_free(&pb);
    free(p);
}

Test(analyzer_validate, bad_node_table)
{
    char *p = good("t.db");
    /* a trace not written by moeplan's writer may break the schema's CHECKs */
    sql(p, "PRAGMA ignore_check_constraints = 1; UPDATE nodes SET weight_format = 'bf16' WHERE "
           "node_index = 1");
    EXPECT(p, "node 1: weight_format 'bf16', expected 'f16' or 'f32'");
    free(p);
}

Test(analyzer_validate, validate_only_lists_every_problem)
{
    char *p = good("t.db");
    sql(p, "UPDATE run SET status='aborted', error='disk full';"
           "UPDATE routing SET expert_ids = X'0909' || substr(expert_ids, 3) WHERE key = 1;"
           "DELETE FROM steps WHERE request_id = 2 AND step = 1");
    const char *paths[1] = {p};
    mp_an_problems pb = validate(paths, 1, 100);
    cr_assert_geq(pb.n, 3, "got %lld problems", (long long)pb.n);
    cr_assert_not_null(strstr(pb.msg[0], "status is 'aborted'"), "%s", pb.msg[0]);
    cr_assert_not_null(strstr(pb.msg[0], "disk full"), "%s", pb.msg[0]);
    bool saw_id = false, saw_gap = false;
    for (int64_t i = 0; i < pb.n; i++) {
        saw_id |= strstr(pb.msg[i], "step 1, node 0, row 0, slot 0: expert id 9 outside") != NULL;
        saw_gap |= strstr(pb.msg[i], "request 2 (ord 2), step 2: follows step 0") != NULL;
    }
    cr_assert(saw_id && saw_gap, "missing problems (id %d, gap %d)", saw_id, saw_gap);
    mp_an_problems_free(&pb);
    /* the limit is honoured */
    pb = validate(paths, 1, 2);
    cr_assert_eq(pb.n, 2);
    mp_an_problems_free(&pb);
    free(p);
}

/* ---- --model: node shapes and bytes per expert against a GGUF ---- */

#include "kernels/quant.h"
#include "gguf/gguf.h"

/* A GGUF with 2 blocks of 8 experts, top-2, whose experts are gate/up [16, 8, 8] and down
 * [8, 16, 8] in f32: 3 × 512 = 1536 bytes per expert. */
static char *make_model_as(bool split, int skip_expert);

static char *make_model(void)
{
    return make_model_as(false, -1);
}

/* split: each expert its own 2-D tensor (blk.N.ffn_gate.E.weight), expert skip_expert of layer 1's
 * down left out (-1: none) */
static char *make_model_as(bool split, int skip_expert)
{
    char *path = malloc(512);
    snprintf(path, 512, "%s/%s.gguf", tmpdir, split ? "split" : "model");
    mp_error err;
    mp_gguf_writer *w;
    cr_assert_eq(mp_gguf_writer_open(path, &w, &err), MP_OK, "%s", err.msg);
    cr_assert_eq(mp_gguf_add_str(w, "general.architecture", "qwen3moe", &err), MP_OK);
    cr_assert_eq(mp_gguf_add_u32(w, "qwen3moe.block_count", 2, &err), MP_OK);
    cr_assert_eq(mp_gguf_add_u32(w, "qwen3moe.expert_count", 8, &err), MP_OK);
    cr_assert_eq(mp_gguf_add_u32(w, "qwen3moe.expert_used_count", 2, &err), MP_OK);
    static const char *const part[3] = {"gate", "up", "down"};
    int n_written = 0;
    for (int l = 0; l < 2; l++)
        for (int p = 0; p < 3; p++) {
            char name[64];
            const int64_t ne[3] = {p == 2 ? 8 : 16, p == 2 ? 16 : 8, 8};
            if (!split) {
                snprintf(name, sizeof name, "blk.%d.ffn_%s_exps.weight", l, part[p]);
                cr_assert_eq(mp_gguf_add_tensor_info(w, name, 3, ne, MP_TYPE_F32, &err), MP_OK, "%s", err.msg);
                n_written += 8;
                continue;
            }
            for (int e = 0; e < 8; e++) {
                if (l == 1 && p == 2 && e == skip_expert)
                    continue;
                snprintf(name, sizeof name, "blk.%d.ffn_%s.%d.weight", l, part[p], e);
                cr_assert_eq(mp_gguf_add_tensor_info(w, name, 2, ne, MP_TYPE_F32, &err), MP_OK, "%s", err.msg);
                n_written++;
            }
        }
    static float zeros[16 * 8];
    for (int i = 0; i < n_written; i++) /* one expert's matrix at a time */
        cr_assert_eq(mp_gguf_write_data(w, zeros, sizeof zeros, &err), MP_OK, "%s", err.msg);
    cr_assert_eq(mp_gguf_writer_finish(w, &err), MP_OK, "%s", err.msg);
    return path;
}

static mp_an_problems validate_with_model(const char *trace, const char *model, mp_an_input *in)
{
    mp_an_problems pb;
    mp_error err;
    cr_assert_eq(mp_an_problems_init(&pb, 10, &err), MP_OK);
    const char *paths[1] = {trace};
    mp_status st = mp_an_input_open(in, paths, 1, model, &pb, &err);
    cr_assert(st == MP_OK || st == MP_ERR_FORMAT, "unexpected error: %s", err.msg);
    return pb;
}

Test(analyzer_validate, model_agrees)
{
    char *model = make_model();
    char *t = make_trace(tmpdir, "t.db", (trace_opts){.expert_bytes = 1536});
    mp_an_input in;
    mp_an_problems pb = validate_with_model(t, model, &in);
    cr_assert_eq(pb.n, 0, "%s", pb.n ? pb.msg[0] : "");
    mp_an_problems_free(&pb);
    mp_an_input_close(&in);
    /* a trace without byte counts takes the model's */
    char *u = make_trace(tmpdir, "u.db", (trace_opts){.expert_bytes = -1});
    pb = validate_with_model(u, model, &in);
    cr_assert_eq(pb.n, 0, "%s", pb.n ? pb.msg[0] : "");
    cr_assert_eq(in.nodes[1].expert_bytes, 1536);
    cr_assert(in.bytes_from_model);
    mp_an_problems_free(&pb);
    mp_an_input_close(&in);
    free(model), free(t), free(u);
}

/* A model file that stores each expert as its own tensor: the same bytes per expert; an expert left
 * out is named */
Test(analyzer_validate, model_with_one_tensor_per_expert)
{
    char *model = make_model_as(true, -1);
    char *t = make_trace(tmpdir, "t.db", (trace_opts){.expert_bytes = 1536});
    mp_an_input in;
    mp_an_problems pb = validate_with_model(t, model, &in);
    cr_assert_eq(pb.n, 0, "%s", pb.n ? pb.msg[0] : "");
    mp_an_problems_free(&pb);
    mp_an_input_close(&in);
    free(model);
    model = make_model_as(true, 5);
    pb = validate_with_model(t, model, &in);
    cr_assert_eq(pb.n, 1, "layer 1's node only");
    cr_assert_not_null(strstr(pb.msg[0], "node 1 (layer 1): "), "%s", pb.msg[0]);
    cr_assert_not_null(strstr(pb.msg[0], "tensor blk.1.ffn_down.5.weight: missing (layer 1 stores its experts one "
                                         "tensor each: expected 8 of them)"), "%s", pb.msg[0]);
    mp_an_problems_free(&pb);
    mp_an_input_close(&in);
    free(model), free(t);
}

Test(analyzer_validate, model_bytes_per_expert_disagree)
{
    char *model = make_model();
    char *t = make_trace(tmpdir, "t.db", (trace_opts){0}); /* 4096 bytes per expert */
    mp_an_input in;
    mp_an_problems pb = validate_with_model(t, model, &in);
    cr_assert_eq(pb.n, 2, "one per node");
    cr_assert_not_null(strstr(pb.msg[0], "node 0 (layer 0): 4096 bytes per expert, but model"), "%s",
                       pb.msg[0]);
    cr_assert_not_null(strstr(pb.msg[0], "says 1536"), "%s", pb.msg[0]);
    mp_an_problems_free(&pb);
    mp_an_input_close(&in);
    free(model), free(t);
}

Test(analyzer_validate, model_shapes_disagree)
{
    char *model = make_model();
    char *t = make_trace(tmpdir, "t.db", (trace_opts){.n_experts = 16, .expert_bytes = 1536});
    mp_an_input in;
    mp_an_problems pb = validate_with_model(t, model, &in);
    cr_assert_geq(pb.n, 1);
    cr_assert_not_null(strstr(pb.msg[0], "node 0 (layer 0): 16 experts, top-2, but model"), "%s",
                       pb.msg[0]);
    cr_assert_not_null(strstr(pb.msg[0], "has 8 experts, top-2"), "%s", pb.msg[0]);
    mp_an_problems_free(&pb);
    mp_an_input_close(&in);
    free(model), free(t);
}
