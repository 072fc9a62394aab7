/* tests/unit/test_trace_check.c — one fail-closed reader for every consumer: each way of breaking
 * a trace is refused by the analyzer's validation, the simulator's loader and route replay alike,
 * with the same one-line problem (collector/trace_check.h). Also: a copy of a trace is the same
 * run for the analyzer, the footer's timing and cupti counts are checked, damaged pages are
 * refused, and a geometry beyond MP_TRACE_MAX_NODE_EXPERTS is refused before anything is
 * allocated for it. */
#include <criterion/criterion.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "analyzer/validate.h"
#include "collector/route_replay.h"
#include "collector/trace_check.h"
#include "simulator/sim_load.h"
#include "tests/unit/analyzer_fixture.h"

static char tmpdir[256];

static void setup(void)
{
    snprintf(tmpdir, sizeof tmpdir, "/tmp/mp_test_trace_check_XXXXXX");
    cr_assert_not_null(mkdtemp(tmpdir));
}

static void teardown(void)
{
    char cmd[300];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", tmpdir);
    cr_assert_eq(system(cmd), 0);
}

TestSuite(trace_check, .init = setup, .fini = teardown, .timeout = 60);

/* The analyzer's first problem (both stages, limit 1), or "" if it accepts the trace. */
static void analyzer_verdict(const char *path, char *out, size_t cap)
{
    mp_an_problems pb;
    mp_error err;
    cr_assert_eq(mp_an_problems_init(&pb, 1, &err), MP_OK);
    mp_an_input in;
    const char *paths[1] = {path};
    mp_status st = mp_an_input_open(&in, paths, 1, NULL, &pb, &err);
    if (st == MP_OK)
        st = mp_an_scan(&in, &pb, NULL, NULL, &err);
    mp_an_input_close(&in);
    snprintf(out, cap, "%s", pb.n ? pb.msg[0] : st ? err.msg : "");
    mp_an_problems_free(&pb);
}

static void simulator_verdict(const char *path, char *out, size_t cap)
{
    mp_sim_trace t;
    mp_sim_trace_facts facts;
    mp_error err;
    if (mp_sim_load_trace(path, NULL, &t, &facts, &err) == MP_OK) {
        mp_sim_trace_free(&t);
        snprintf(out, cap, "%s", "");
        return;
    }
    snprintf(out, cap, "%s", err.msg);
}

/* Route replay of every row of the fixture (18 per layer) and one more (a wrap reads the end). */
static void replay_verdict(const char *path, char *out, size_t cap)
{
    mp_route_replay *rr;
    mp_error err;
    out[0] = '\0';
    if (mp_route_replay_open(path, N_NODES, 8, TOP_K, &rr, &err) != MP_OK) {
        snprintf(out, cap, "%s", err.msg);
        return;
    }
    mp_route_source src = mp_route_replay_source(rr);
    int32_t ids[TOP_K];
    float w[TOP_K];
    for (int row = 0; row < 19 && !out[0]; row++)
        for (int layer = 0; layer < N_NODES && !out[0]; layer++)
            if (src.route(src.user, layer, 1, TOP_K, ids, w) != 0)
                snprintf(out, cap, "%s", mp_route_replay_error(rr)->msg);
    mp_route_replay_close(rr);
}

/* Break a fresh trace with stmt; all three consumers must refuse it with a message holding
 * needle. */
static void all_refuse(const char *stmt, const char *needle)
{
    char *p = make_trace(tmpdir, "t.db", (trace_opts){0});
    if (stmt)
        sql(p, stmt);
    char a[1024], s[1024], r[1024];
    analyzer_verdict(p, a, sizeof a);
    simulator_verdict(p, s, sizeof s);
    replay_verdict(p, r, sizeof r);
    cr_assert(strstr(a, needle), "analyzer: '%s' lacks '%s' (%s)", a, needle, stmt);
    cr_assert(strstr(s, needle), "simulator: '%s' lacks '%s' (%s)", s, needle, stmt);
    cr_assert(strstr(r, needle), "route replay: '%s' lacks '%s' (%s)", r, needle, stmt);
    cr_assert(strstr(s, p) && !strchr(s, '\n'), "%s", s);
    unlink(p);
    free(p);
}

/* All three consumers accept the trace at p. */
static void all_accept(const char *p)
{
    char a[1024], s[1024], r[1024];
    analyzer_verdict(p, a, sizeof a);
    simulator_verdict(p, s, sizeof s);
    replay_verdict(p, r, sizeof r);
    cr_assert_str_eq(a, "");
    cr_assert_str_eq(s, "");
    cr_assert_str_eq(r, "");
}

Test(trace_check, a_good_trace_is_accepted_by_all)
{
    char *p = make_trace(tmpdir, "t.db", (trace_opts){0});
    all_accept(p);
    free(p);
}

Test(trace_check, footer_counts)
{
    all_refuse("UPDATE footer SET n_routing = n_routing + 1", "footer: n_routing 19, but the routing table has 18");
    all_refuse("UPDATE footer SET n_steps = 8", "footer: n_steps 8, but the steps table has 9 rows");
    all_refuse("UPDATE footer SET n_timing = 3", "footer: n_timing 3, but the timing table has 0 rows");
    all_refuse("UPDATE footer SET n_cupti = 1", "footer: n_cupti 1, but the cupti table has 0 rows");
    all_refuse("UPDATE footer SET n_requests = 4", "footer: n_requests 4, but the requests table has 3");
}

Test(trace_check, missing_and_repeated_steps)
{
    /* request 1's decode step 1 gone, with its routing */
    all_refuse("DELETE FROM steps WHERE request_id = 1 AND step = 1; DELETE FROM routing WHERE key = (1 << 24) | 1; "
               "UPDATE footer SET n_steps = 8, n_routing = 16",
               "request 1 (ord 1), step 2: follows step 0, expected step 1 (a gap)");
    /* request 2's steps renumbered from 1 */
    all_refuse("UPDATE steps SET step = step + 100 WHERE request_id = 2; UPDATE steps SET step = step - 99 "
               "WHERE request_id = 2; UPDATE routing SET key = key + 100 WHERE key >> 24 = 2; "
               "UPDATE routing SET key = key - 99 WHERE key >> 24 = 2",
               "request 2 (ord 2), step 1: first step is 1, expected 0");
}

Test(trace_check, weights_nan_negative_and_empty)
{
    /* request 0, step 1 (one row): node 0's first f16 weight */
    all_refuse("UPDATE routing SET weights = x'007E' || substr(weights, 3) WHERE key = 1",
               "request 0 (ord 0), step 1, node 0, row 0, slot 0: router weight nan");
    all_refuse("UPDATE routing SET weights = x'00BC' || substr(weights, 3) WHERE key = 1",
               "router weight -1, expected a finite non-negative number");
    all_refuse("UPDATE routing SET weights = x'' WHERE key = 1",
               "request 0 (ord 0), step 1, node 0: 0 router weights, expected rows × top-k = 1 × 2 = 2");
}

Test(trace_check, ids_out_of_range_and_repeated)
{
    all_refuse("UPDATE routing SET expert_ids = x'09' || substr(expert_ids, 2) WHERE key = 1",
               "row 0, slot 0: expert id 9 outside [0, 8)");
    all_refuse("UPDATE routing SET expert_ids = x'0202' || substr(expert_ids, 3) WHERE key = 1",
               "row 0, slot 1: expert id 2 repeated within the row");
}

/* A timing row (what the GPU executor's hooks record) at key = request << 36 | step << 12 | node,
 * counted in the footer as the writer's would be. */
static const char *timing_row(char *buf, size_t cap, long long key, int hits, int misses, int tier_hits,
                              const char *served)
{
    snprintf(buf, cap, "INSERT INTO timing(key, gpu_expert_ns, cpu_expert_ns, h2d_bytes, h2d_ns, d2h_bytes, d2h_ns,"
             " sync_ns, merge_ns, hits, misses, tier_hits, served) VALUES (%lld, 0, 0, 0, 0, 0, 0, 0, 0, %d, %d, %d, %s);"
             " UPDATE footer SET n_timing = n_timing + 1", key, hits, misses, tier_hits, served);
    return buf;
}

/* Request 0's prefill (4 rows × top-2) at node 0: gpu 2, tier 2, cpu 2, far 1, copy 1. */
#define SERVED8 "x'0001020304000102'"

Test(trace_check, served_codes_against_the_step_and_the_counts)
{
    char q[1024];
    all_refuse(timing_row(q, sizeof q, 0, 4, 4, 2, "x'000102'"),
               "request 0 (ord 0), step 0, node 0: served BLOB of 3 codes, expected rows × top-k = 4 × 2");
    all_refuse(timing_row(q, sizeof q, 1, 4, 4, 2, "x''"),
               "request 0 (ord 0), step 0, node 1: served BLOB of 0 codes, expected rows × top-k = 4 × 2");
    all_refuse(timing_row(q, sizeof q, 0, 4, 4, 2, "x'0001020304000105'"),
               "request 0 (ord 0), step 0, node 0, row 3, slot 1: served code 5, expected one of 0 gpu, 1 tier, "
               "2 cpu, 3 far, 4 copy");
    const char *counts = "served codes gpu 2, tier 2, cpu 2, far 1, copy 1, but hits %d, tier_hits %d, misses %d: "
                         "expected gpu + tier = hits, tier = tier_hits, cpu + far + copy = misses";
    const int wrong[3][3] = {{5, 4, 2}, {4, 4, 1}, {4, 3, 2}}; /* hits, misses, tier_hits: one off each */
    for (int i = 0; i < 3; i++) {
        char want[300];
        snprintf(want, sizeof want, counts, wrong[i][0], wrong[i][2], wrong[i][1]);
        all_refuse(timing_row(q, sizeof q, 0, wrong[i][0], wrong[i][1], wrong[i][2], SERVED8), want);
    }
    /* request 1, step 2 (one row) at a step and node the tables lack */
    all_refuse(timing_row(q, sizeof q, (1LL << 36) | (7 << 12), 1, 1, 0, "x'0002'"),
               "request 1, step 7, node 0: timing with served codes for a step that the steps table lacks");
    all_refuse(timing_row(q, sizeof q, (1LL << 36) | (2 << 12) | 5, 1, 1, 0, "x'0002'"),
               "request 1 (ord 1), step 2, node 5: timing with served codes for a node absent from the node table");
}

/* Codes that agree with their rows pass every consumer, and the checker sums them per node; rows
 * without codes (NULL) are not checked and count as unknown. */
Test(trace_check, served_codes_that_agree_are_summed)
{
    char *p = make_trace(tmpdir, "t.db", (trace_opts){0});
    char q[1024];
    sql(p, timing_row(q, sizeof q, 0, 4, 4, 2, SERVED8));
    sql(p, timing_row(q, sizeof q, (2LL << 36) | (1 << 12) | 1, 1, 1, 0, "x'0300'")); /* far, gpu */
    sql(p, timing_row(q, sizeof q, (2LL << 36) | (2 << 12) | 1, 7, 7, 7, "NULL"));   /* not said */
    all_accept(p);
    mp_trace_check *c;
    mp_error err;
    cr_assert_eq(mp_trace_check_open(p, NULL, NULL, &c, &err), MP_OK, "%s", err.msg);
    cr_assert_eq(mp_trace_check_served(c)[0].routes, 0, "nothing before an iteration");
    mp_trace_check_iter *it;
    cr_assert_eq(mp_trace_check_begin(c, 1, &it, &err), MP_OK, "%s", err.msg);
    mp_trace_checked_rec rec;
    int rc;
    while ((rc = mp_trace_check_next(it, &rec, &err)) == 1)
        ;
    cr_assert_eq(rc, 0, "%s", err.msg);
    mp_trace_check_end(it);
    const mp_trace_served_node *sv = mp_trace_check_served(c);
    /* every node: 3 requests × (4 + 1 + 1) rows × top-2 = 36 routes */
    const int64_t want[2][MP_SERVED_N] = {{2, 2, 2, 1, 1}, {1, 0, 0, 1, 0}};
    for (int nd = 0; nd < N_NODES; nd++) {
        cr_assert_eq(sv[nd].routes, 36, "node %d", nd);
        for (int code = 0; code < MP_SERVED_N; code++)
            cr_assert_eq(sv[nd].by_path[code], want[nd][code], "node %d, %s", nd, mp_served_name(code));
    }
    mp_trace_check_close(c);
    free(p);
}

/* The checker's tier totals after iterating the trace at path to its end (rc: what next returned
 * last: 0, or the problem's status). */
static mp_trace_tier_totals checked_tier(const char *path, int *rc)
{
    mp_trace_check *c;
    mp_error err;
    cr_assert_eq(mp_trace_check_open(path, NULL, NULL, &c, &err), MP_OK, "%s", err.msg);
    cr_assert(!mp_trace_check_tier(c)->present, "nothing before an iteration");
    mp_trace_check_iter *it;
    cr_assert_eq(mp_trace_check_begin(c, -1, &it, &err), MP_OK, "%s", err.msg);
    mp_trace_checked_rec rec;
    while ((*rc = mp_trace_check_next(it, &rec, &err)) == 1)
        ;
    mp_trace_check_end(it);
    const mp_trace_tier_totals tot = *mp_trace_check_tier(c);
    mp_trace_check_close(c);
    return tot;
}

/* The adaptive tier's counts of every timing row, with served codes or without (those are not
 * checked: one at a step the tables lack passes), are summed by the checker in its scan of the
 * timing rows, NULL read as 0, over the rows with any tier hit, late route, admission or eviction
 * (copy bytes alone do not make one), with those rows' routes (hits + misses): summary.json's
 * adaptive_tier. An iteration that meets a problem leaves none; sums past 2^63 are flagged. */
Test(trace_check, tier_counts_of_every_timing_row_are_summed)
{
    char *p = make_trace(tmpdir, "t.db", (trace_opts){0});
    sql(p, "INSERT INTO timing(key, gpu_expert_ns, cpu_expert_ns, h2d_bytes, h2d_ns, d2h_bytes, d2h_ns, sync_ns,"
           " merge_ns, hits, misses, tier_hits, tier_late, tier_admissions, tier_evictions, tier_copy_bytes, served)"
           " VALUES (0, 0, 0, 0, 0, 0, 0, 0, 0, 4, 4, 2, 1, 1, 0, 4096, " SERVED8 "),"
           " (1, 0, 0, 0, 0, 0, 0, 0, 0, 5, 3, 0, 0, 2, 1, 8192, NULL),"
           " (4096, 0, 0, 0, 0, 0, 0, 0, 0, 1, 1, NULL, NULL, NULL, NULL, NULL, NULL),"
           " (4097, 0, 0, 0, 0, 0, 0, 0, 0, 1, 1, 0, 0, 0, 0, 512, NULL),"
           " ((1 << 36) | (7 << 12), 0, 0, 0, 0, 0, 0, 0, 0, 2, 0, 1, 0, 0, 0, 0, NULL);"
           " UPDATE footer SET n_timing = 5");
    all_accept(p);
    int rc;
    mp_trace_tier_totals t = checked_tier(p, &rc);
    cr_assert_eq(rc, 0);
    cr_assert(t.present && !t.overflow);
    cr_assert_eq(t.routes, 8 + 8 + 2);
    cr_assert_eq(t.hits, 2 + 0 + 1);
    cr_assert_eq(t.late, 1);
    cr_assert_eq(t.admissions, 1 + 2);
    cr_assert_eq(t.evictions, 1);
    cr_assert_eq(t.copy_bytes, 4096 + 8192);
    sql(p, "UPDATE timing SET tier_evictions = 4611686018427387904 WHERE key IN (4096, 4097)");
    t = checked_tier(p, &rc);
    cr_assert_eq(rc, 0);
    cr_assert(t.present && t.overflow, "1 + 2 × 2^62 evictions pass 2^63");
    sql(p, "UPDATE footer SET n_timing = 6");
    t = checked_tier(p, &rc);
    cr_assert_eq(rc, MP_ERR_FORMAT);
    cr_assert(!t.present, "a trace with a problem has no totals");
    free(p);
}

Test(trace_check, node_table_and_run_disagree)
{
    all_refuse("UPDATE run SET n_experts = 16", "node 0: 8 experts but the run says 16");
    all_refuse("UPDATE run SET n_moe_layers = 3", "nodes: 2 rows but the run says 3 MoE layers");
    all_refuse("UPDATE run SET status = 'running'", "run status is 'running', expected 'complete'");
    all_refuse("DELETE FROM footer", "footer: missing");
    /* 2^62 bytes per expert overflowed the analyzer's capacity sums (negative bytes printed) */
    all_refuse("UPDATE nodes SET expert_bytes = 4611686018427387904 WHERE node_index = 1",
               "node 1: expert_bytes 4611686018427387904, expected at most 2^40");
}

/* 17 nodes of 65,536 experts: 1,114,112 pairs, over the limit, refused from the node table (the
 * routing, which does not match, is never read). */
Test(trace_check, geometry_beyond_the_limit_is_refused_before_allocating)
{
    all_refuse("UPDATE run SET n_experts = 65536, n_moe_layers = 17; "
               "UPDATE nodes SET n_experts = 65536, id_bytes = 2; "
               "WITH RECURSIVE k(i) AS (SELECT 2 UNION ALL SELECT i + 1 FROM k WHERE i < 16) "
               "INSERT INTO nodes SELECT i, 'moe', 'blk.' || i, i, 65536, 2, 4096, 2, 'f16' FROM k",
               "nodes: 17 nodes x 65536 experts = 1114112 (node, expert) pairs, expected at most 1048576");
}

/* Bytes of one page overwritten: SQLite's quick_check (or the read itself) refuses the file. */
Test(trace_check, damaged_pages_are_refused)
{
    char *p = make_trace(tmpdir, "t.db", (trace_opts){0});
    FILE *f = fopen(p, "r+b");
    cr_assert_not_null(f);
    fseek(f, 0, SEEK_END);
    const long size = ftell(f);
    cr_assert_gt(size, 4 * 4096);
    /* the last page (the routing table's or an index's): its header and cell pointers */
    fseek(f, size - 4096, SEEK_SET);
    static const char junk[64] = "\x0d\xff\xff\xff\xff\x00\x00\x00 not a b-tree page at all";
    fwrite(junk, 1, sizeof junk, f);
    fclose(f);
    char a[1024], s[1024], r[1024];
    analyzer_verdict(p, a, sizeof a);
    simulator_verdict(p, s, sizeof s);
    replay_verdict(p, r, sizeof r);
    cr_assert_str_neq(a, "", "the analyzer accepted a damaged trace");
    cr_assert_str_neq(s, "", "the simulator accepted a damaged trace");
    cr_assert_str_neq(r, "", "route replay accepted a damaged trace");
    cr_assert(strstr(s, p), "%s", s);
    free(p);
}

/* A copy of a trace is the same run (its run id), whatever the file is called; two runs of the
 * same fixture are not. */
Test(trace_check, a_copied_trace_is_the_same_run)
{
    char *a = make_trace(tmpdir, "a.db", (trace_opts){0}), *b = make_trace(tmpdir, "b.db", (trace_opts){0});
    char cmd[1200], copy[600];
    snprintf(copy, sizeof copy, "%s/copy.db", tmpdir);
    snprintf(cmd, sizeof cmd, "cp '%s' '%s'", a, copy);
    cr_assert_eq(system(cmd), 0);
    mp_an_problems pb;
    mp_error err;
    mp_an_input in;
    const char *two[2] = {a, b}, *copied[2] = {a, copy};
    cr_assert_eq(mp_an_problems_init(&pb, 1, &err), MP_OK);
    cr_assert_eq(mp_an_input_open(&in, two, 2, NULL, &pb, &err), MP_OK, "%s", err.msg);
    cr_assert_eq(pb.n, 0, "%s", pb.msg[0]);
    mp_an_input_close(&in);
    cr_assert_eq(mp_an_input_open(&in, copied, 2, NULL, &pb, &err), MP_ERR_FORMAT);
    cr_assert_eq(pb.n, 1);
    cr_assert(strstr(pb.msg[0], "the same run as") && strstr(pb.msg[0], "run id "), "%s", pb.msg[0]);
    mp_an_input_close(&in);
    mp_an_problems_free(&pb);
    free(a), free(b);
}
