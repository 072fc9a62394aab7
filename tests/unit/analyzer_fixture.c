/* tests/unit/analyzer_fixture.c — small traces for the analyzer's tests, written with the
 * collector's writer (see analyzer_fixture.h). */
#include <criterion/criterion.h>
#include <sqlite3.h>
#include <stdio.h>
#include <stdlib.h>

#include "tests/unit/analyzer_fixture.h"

/* 2 nodes (index 0, 1), top-2; 3 requests (ids 0, 1, 2) of a 4-row prefill + 2 decode steps. */
char *make_trace(const char *dir, const char *name, trace_opts o)
{
    char *path = malloc(512);
    snprintf(path, 512, "%s/%s", dir, name);
    mp_error err;
    mp_trace_writer *w;
    cr_assert_eq(mp_trace_writer_open(path, false, &w, &err), MP_OK, "%s", err.msg);
    mp_trace_run_info info;
    mp_trace_run_info_init(&info);
    info.source = "moeplan";
    info.model_sha256 = o.sha ? o.sha : "ab" "00000000000000000000000000000000000000000000000000000000000000";
    info.n_experts = o.n_experts ? o.n_experts : 8;
    info.top_k = TOP_K;
    info.n_moe_layers = N_NODES;
    info.source_path = o.source_path;
    cr_assert_eq(mp_trace_set_run(w, &info, &err), MP_OK, "%s", err.msg);
    for (int i = 0; i < N_NODES; i++) {
        char nm[64];
        snprintf(nm, sizeof nm, "%s.%d", o.node_prefix ? o.node_prefix : "blk", i);
        mp_trace_node nd = {.node_index = i, .node_type = "moe", .node_name = nm, .layer = i,
                            .n_experts = info.n_experts, .top_k = TOP_K, .expert_bytes = o.expert_bytes ? o.expert_bytes : 4096,
                            .weight_format = o.wf};
        cr_assert_eq(mp_trace_add_node(w, &nd, &err), MP_OK, "%s", err.msg);
    }
    for (int r = 0; r < N_REQ; r++) {
        cr_assert_eq(mp_trace_request_begin(w, r, NULL, NULL, -1, NULL, 1000 * r, &err), MP_OK,
                     "%s", err.msg);
        for (int s = 0; s < 3; s++) {
            const int rows = s == 0 ? 4 : 1;
            cr_assert_eq(mp_trace_step_begin(w, s, s == 0 ? MP_PHASE_PREFILL : MP_PHASE_DECODE,
                                             rows, s == 0 ? 0 : 3 + s, &err),
                         MP_OK, "%s", err.msg);
            for (int nd = 0; nd < N_NODES; nd++) {
                int32_t ids[4 * TOP_K];
                float wt[4 * TOP_K];
                for (int row = 0; row < rows; row++) {
                    ids[row * TOP_K] = (row + nd + s + r) % info.n_experts;
                    ids[row * TOP_K + 1] = (row + nd + s + r + 1) % info.n_experts;
                    wt[row * TOP_K] = 0.75f;
                    wt[row * TOP_K + 1] = 0.25f;
                }
                cr_assert_eq(mp_trace_add_routing(w, nd, rows, TOP_K, ids, wt, &err), MP_OK, "%s",
                             err.msg);
            }
            cr_assert_eq(mp_trace_step_end(w, 100, &err), MP_OK, "%s", err.msg);
        }
        cr_assert_eq(mp_trace_request_end(w, 2, 1000 * r + 500, &err), MP_OK, "%s", err.msg);
    }
    cr_assert_eq(mp_trace_finish(w, &err), MP_OK, "%s", err.msg);
    mp_trace_writer_close(w);
    return path;
}

void sql(const char *path, const char *stmt)
{
    sqlite3 *db;
    cr_assert_eq(sqlite3_open(path, &db), SQLITE_OK);
    char *msg = NULL;
    int rc = sqlite3_exec(db, stmt, NULL, NULL, &msg);
    cr_assert_eq(rc, SQLITE_OK, "%s: %s", stmt, msg ? msg : "");
    sqlite3_close(db);
}


/* Version 2 -> version 1: split each step row into per-node rows (the node's byte offset within
 * a row is the sum of top_k × bytes of the nodes before it, times the step's rows). */
void to_v1(const char *path)
{
    sql(path,
        "DROP VIEW route_choices;"
        "CREATE TABLE routing_v1 (key INTEGER PRIMARY KEY, n_rows INTEGER NOT NULL,"
        " expert_ids BLOB NOT NULL, weights BLOB NOT NULL,"
        " request_id INTEGER GENERATED ALWAYS AS (key >> 36) VIRTUAL,"
        " step INTEGER GENERATED ALWAYS AS ((key >> 12) & 16777215) VIRTUAL,"
        " node_index INTEGER GENERATED ALWAYS AS (key & 4095) VIRTUAL);"
        "INSERT INTO routing_v1 (key, n_rows, expert_ids, weights)"
        " SELECT ((r.key >> 24) << 36) | ((r.key & 16777215) << 12) | n.node_index, r.n_rows,"
        "  substr(r.expert_ids, 1 + r.n_rows * (SELECT coalesce(sum(p.top_k * p.id_bytes), 0)"
        "   FROM nodes p WHERE p.node_index < n.node_index), r.n_rows * n.top_k * n.id_bytes),"
        "  substr(r.weights, 1 + r.n_rows * (SELECT coalesce(sum(p.top_k * CASE p.weight_format"
        "   WHEN 'f16' THEN 2 ELSE 4 END), 0) FROM nodes p WHERE p.node_index < n.node_index),"
        "   r.n_rows * n.top_k * CASE n.weight_format WHEN 'f16' THEN 2 ELSE 4 END)"
        " FROM routing r, nodes n;"
        "DROP TABLE routing;"
        "ALTER TABLE routing_v1 RENAME TO routing;"
        "PRAGMA user_version = 1;");
}
