/* tests/unit/test_trace_materialize.c — `moeplan trace materialize` (collector/trace_materialize.h):
 * the routes table holds exactly the rows of the route_choices view, in its key order, whatever the
 * regrouping buffer (one group, several, cells larger than the buffer), the schema version (1, 2)
 * and the weight format; a second run leaves the trace alone; what the fail-closed reader refuses
 * is refused with the reader's line and the trace left byte for byte; a failure at any fault point
 * leaves the trace as it was and no temporary; and the command's exit statuses and lines. */
#include <criterion/criterion.h>
#include <sqlite3.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "collector/trace_check.h"
#include "collector/trace_materialize.h"
#include "base/fault.h"
#include "tests/unit/analyzer_fixture.h"
#include "tests/unit/cli_util.h"

static char tmpdir[256];

static void setup(void)
{
    snprintf(tmpdir, sizeof tmpdir, "/tmp/mp_test_materialize_XXXXXX");
    cr_assert_not_null(mkdtemp(tmpdir));
}

static void teardown(void)
{
    char cmd[300];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", tmpdir);
    cr_assert_eq(system(cmd), 0);
}

TestSuite(trace_materialize, .init = setup, .fini = teardown, .timeout = 120);

/* One integer from a query on the trace, with another trace attached as v (NULL: none). */
static int64_t scalar_with(const char *path, const char *attach, const char *query)
{
    sqlite3 *db;
    cr_assert_eq(sqlite3_open_v2(path, &db, SQLITE_OPEN_READONLY, NULL), SQLITE_OK);
    if (attach) {
        char *a = sqlite3_mprintf("ATTACH %Q AS v", attach);
        cr_assert_eq(sqlite3_exec(db, a, NULL, NULL, NULL), SQLITE_OK, "%s", sqlite3_errmsg(db));
        sqlite3_free(a);
    }
    sqlite3_stmt *st;
    cr_assert_eq(sqlite3_prepare_v2(db, query, -1, &st, NULL), SQLITE_OK, "%s: %s", query,
                 sqlite3_errmsg(db));
    cr_assert_eq(sqlite3_step(st), SQLITE_ROW, "%s: %s", query, sqlite3_errmsg(db));
    const int64_t v = sqlite3_column_int64(st, 0);
    sqlite3_finalize(st);
    sqlite3_close(db);
    return v;
}

static int64_t scalar(const char *path, const char *query)
{
    return scalar_with(path, NULL, query);
}

static bool same_bytes(const char *path, const char *b, size_t n)
{
    size_t m;
    char *c = mp_test_slurp_n(path, &m);
    const bool same = m == n && !memcmp(b, c, n);
    free(c);
    return same;
}

/* Nothing in tmpdir but want files (no temporary left). */
static void files_left(int want)
{
    char cmd[400];
    snprintf(cmd, sizeof cmd, "test $(ls -A '%s' | wc -l) -eq %d", tmpdir, want);
    cr_assert_eq(system(cmd), 0, "files other than the traces are left in %s", tmpdir);
}

/* The table's rows are the view's of the same routing in view_path (v2: the trace itself), both
 * ways, and as many. */
static void expect_rows_of_the_view(const char *path, const char *view_path, int64_t n_routes)
{
    const int64_t n_view = scalar_with(path, view_path, "SELECT count(*) FROM v.route_choices");
    cr_assert_gt(n_view, 0);
    cr_assert_eq(n_routes, n_view);
    cr_assert_eq(scalar(path, "SELECT count(*) FROM routes"), n_view);
    cr_assert_eq(scalar_with(path, view_path, "SELECT count(*) FROM (SELECT request_id, step, "
                             "node_index, row, rank, expert_id, weight FROM main.routes EXCEPT "
                             "SELECT request_id, step, node_index, row, rank, expert_id, weight "
                             "FROM v.route_choices)"), 0);
    cr_assert_eq(scalar_with(path, view_path, "SELECT count(*) FROM (SELECT request_id, step, "
                             "node_index, row, rank, expert_id, weight FROM v.route_choices EXCEPT "
                             "SELECT request_id, step, node_index, row, rank, expert_id, weight "
                             "FROM main.routes)"), 0);
    /* and the index answers by token: the rows of one step and node in (row, rank) order */
    cr_assert_eq(scalar(path, "SELECT count(*) FROM routes WHERE request_id = 1 AND step = 0 AND "
                              "node_index = 1"), 4 * TOP_K);
}

Test(trace_materialize, the_table_holds_the_view_rows_whatever_the_buffer_version_and_format)
{
    /* buffers of 1 and 3 routes: every cell (about 4.5 routes) is larger and goes direct; 7 and 12:
     * groups of one or a few cells; 1000: the whole trace in one group */
    const uint64_t buffers[] = {1, 3, 7, 12, 1000};
    for (int version = 1; version <= 2; version++)
        for (int wf = 0; wf < 2; wf++)
            for (size_t b = 0; b < sizeof buffers / sizeof buffers[0]; b++) {
                char name[64];
                snprintf(name, sizeof name, "v%d_w%d_b%zu.db", version, wf, b);
                trace_opts o = {.wf = wf ? MP_TRACE_W_F32 : MP_TRACE_W_F16,
                                .n_experts = wf ? 300 : 0}; /* 300: 2-byte ids */
                char *path = make_trace(tmpdir, name, o), *twin = NULL;
                if (version == 1) { /* the version 1 fixture has no view: its v2 twin's */
                    snprintf(name, sizeof name, "v%d_w%d_b%zu.v2.db", version, wf, b);
                    twin = make_trace(tmpdir, name, o);
                    to_v1(path);
                }
                mp_trace_materialize_result res;
                mp_error err;
                cr_assert_eq(mp_trace_materialize_buffered(path, buffers[b], NULL, &res, &err),
                             MP_OK, "%s", err.msg);
                cr_assert(!res.already);
                cr_assert_gt(res.bytes_after, res.bytes_before);
                expect_rows_of_the_view(path, twin ? twin : path, res.n_routes);
                /* the trace is still what every reader accepts */
                mp_trace_check *c;
                cr_assert_eq(mp_trace_check_open(path, NULL, NULL, &c, &err), MP_OK, "%s", err.msg);
                mp_trace_check_close(c);
                free(path);
                free(twin);
            }
    files_left(30);
}

Test(trace_materialize, a_second_run_leaves_the_trace_alone)
{
    char *path = make_trace(tmpdir, "t.db", (trace_opts){0});
    mp_trace_materialize_result res;
    mp_error err;
    cr_assert_eq(mp_trace_materialize(path, NULL, &res, &err), MP_OK, "%s", err.msg);
    struct stat a, b;
    cr_assert_eq(stat(path, &a), 0);
    size_t n;
    char *before = mp_test_slurp_n(path, &n);
    cr_assert_eq(mp_trace_materialize(path, NULL, &res, &err), MP_OK, "%s", err.msg);
    cr_assert(res.already);
    cr_assert_eq(res.n_routes, 0);
    cr_assert_eq(res.bytes_before, (int64_t)n);
    cr_assert_eq(stat(path, &b), 0);
    cr_assert_eq(a.st_ino, b.st_ino, "the trace was rewritten");
    cr_assert(same_bytes(path, before, n));
    free(before);
    free(path);
    files_left(1);
}

/* A trace the reader refuses: the same line, the trace untouched, nothing beside it. */
static void expect_refused(const char *breakage)
{
    char *path = make_trace(tmpdir, "t.db", (trace_opts){0});
    sql(path, breakage);
    size_t n;
    char *before = mp_test_slurp_n(path, &n);
    mp_trace_check *c;
    mp_error want, err;
    mp_status st = mp_trace_check_open(path, NULL, NULL, &c, &want);
    if (st == MP_OK) { /* a record-level problem: the iterator finds it */
        mp_trace_check_iter *it;
        cr_assert_eq(mp_trace_check_begin(c, -1, &it, &want), MP_OK);
        mp_trace_checked_rec rec;
        int rc;
        while ((rc = mp_trace_check_next(it, &rec, &want)) == 1)
            ;
        st = rc < 0 ? (mp_status)rc : MP_OK;
        mp_trace_check_end(it);
        mp_trace_check_close(c);
    }
    cr_assert_eq(st, MP_ERR_FORMAT, "the reader accepted the trace after: %s", breakage);
    mp_trace_materialize_result res;
    cr_assert_eq(mp_trace_materialize(path, NULL, &res, &err), MP_ERR_FORMAT);
    cr_assert_str_eq(err.msg, want.msg);
    cr_assert(same_bytes(path, before, n), "the refused trace changed");
    files_left(1);
    free(before);
    unlink(path);
    free(path);
}

Test(trace_materialize, what_the_reader_refuses_is_refused_and_left_as_it_was)
{
    expect_refused("UPDATE run SET status = 'running'"); /* a run that did not finish */
    expect_refused("DELETE FROM footer");
    /* a record that is broken: an id past n_experts in the last step's row */
    expect_refused("UPDATE routing SET expert_ids = X'0909' || substr(expert_ids, 3) "
                   "WHERE key = (SELECT max(key) FROM routing)");
}

Test(trace_materialize, a_failure_at_any_fault_point_leaves_the_trace_as_it_was)
{
    char *path = make_trace(tmpdir, "t.db", (trace_opts){0});
    size_t n;
    char *before = mp_test_slurp_n(path, &n);
    int failures = 0;
    for (int64_t nth = 1; nth < 1000; nth++) {
        mp_trace_materialize_result res;
        mp_error err;
        mp_fault_arm(nth, true); /* a disk that stays full */
        const mp_status st = mp_trace_materialize(path, NULL, &res, &err);
        mp_fault_arm(0, false);
        if (st == MP_OK)
            break;
        failures++;
        cr_assert(strstr(err.msg, path) && !strchr(err.msg, '\n'), "%s", err.msg);
        cr_assert(same_bytes(path, before, n), "fault %lld: the trace changed", (long long)nth);
        files_left(1);
    }
    cr_assert_gt(failures, 0, "no fault point was reached");
    expect_rows_of_the_view(path, path, scalar(path, "SELECT count(*) FROM routes"));
    files_left(1);
    free(before);
    free(path);
}

Test(trace_materialize, the_command)
{
    char *path = make_trace(tmpdir, "t.db", (trace_opts){0});
    char args[700], out[4096];
    cr_assert_eq(mp_test_moeplan(tmpdir, "trace", MP_TEST_STDERR, out, sizeof out), 2);
    cr_assert_str_eq(out, "moeplan trace: error: expected materialize TRACE.db (see moeplan trace "
                          "--help)\n");
    cr_assert_eq(mp_test_moeplan(tmpdir, "trace materialise t.db", MP_TEST_STDERR, out, sizeof out), 2);
    cr_assert(strstr(out, "unknown subcommand: materialise"), "%s", out);
    cr_assert_eq(mp_test_moeplan(tmpdir, "trace materialize", MP_TEST_STDERR, out, sizeof out), 2);
    snprintf(args, sizeof args, "trace materialize '%s/none.db'", tmpdir);
    cr_assert_eq(mp_test_moeplan(tmpdir, args, MP_TEST_STDERR, out, sizeof out), 1);
    cr_assert(strstr(out, "moeplan trace: error: trace ") && strstr(out, "none.db"), "%s", out);
    /* progress asked for: the steps' last lines on stderr, the result on stdout */
    snprintf(args, sizeof args, "trace materialize '%s' --progress", path);
    cr_assert_eq(mp_test_moeplan(tmpdir, args, MP_TEST_STDERR, out, sizeof out), 0, "%s", out);
    cr_assert(strstr(out, "materialize: count: 18/18 records (100.0 %)") &&
              strstr(out, "materialize: write: 72/72 routes (100.0 %)") &&
              strstr(out, "materialize: index by token: "), "%s", out);
    char *so = mp_test_stdout(tmpdir);
    cr_assert(strstr(so, "t.db: routes table: 72 rows;"), "%s", so);
    free(so);
    /* a second time: nothing to do, and no progress without --progress (stderr is no terminal) */
    snprintf(args, sizeof args, "trace materialize '%s'", path);
    cr_assert_eq(mp_test_moeplan(tmpdir, args, MP_TEST_STDERR, out, sizeof out), 0);
    cr_assert_str_eq(out, "");
    so = mp_test_stdout(tmpdir);
    cr_assert(strstr(so, "t.db: has the routes table already; left as it is"), "%s", so);
    free(so);
    free(path);
}
