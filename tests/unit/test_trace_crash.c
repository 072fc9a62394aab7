/* tests/unit/test_trace_crash.c — the trace survives a kill -9 mid-run (valid SQLite, integrity
 * ok, run detectably incomplete, every committed step whole), and a write failure (file size cap
 * reached, as a full disk) stops the run with a clear error and status 'aborted'. */
#include <criterion/criterion.h>
#include <signal.h>
#include <sqlite3.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "collector/trace.h"
#include "collector/trace_read.h"

static char tmpdir[256], path[300];

static void setup(void)
{
    snprintf(tmpdir, sizeof tmpdir, "/tmp/mp_test_crash_XXXXXX");
    cr_assert_not_null(mkdtemp(tmpdir));
    snprintf(path, sizeof path, "%s/t.db", tmpdir);
}

static void teardown(void)
{
    char cmd[300];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", tmpdir);
    cr_assert_eq(system(cmd), 0);
}

TestSuite(trace_crash, .init = setup, .fini = teardown);

enum { N_NODES = 4, TOP_K = 8, N_EXPERTS = 64 };

static mp_status start(mp_trace_writer **w, mp_error *err)
{
    mp_status s;
    if ((s = mp_trace_writer_open(path, false, w, err)))
        return s;
    mp_trace_run_info info;
    mp_trace_run_info_init(&info);
    info.source = "moeplan";
    if ((s = mp_trace_set_run(*w, &info, err)))
        return s;
    for (int i = 0; i < N_NODES; i++) {
        mp_trace_node n = {.node_index = i, .node_type = "moe", .node_name = "blk", .layer = i,
                           .n_experts = N_EXPERTS, .top_k = TOP_K, .expert_bytes = -1};
        if ((s = mp_trace_add_node(*w, &n, err)))
            return s;
    }
    return MP_OK;
}

/* One step of rows × TOP_K routing on every node. */
static mp_status one_step(mp_trace_writer *w, int64_t step, int64_t rows, mp_error *err)
{
    static int32_t ids[64 * TOP_K];
    static float wt[64 * TOP_K];
    for (int64_t i = 0; i < rows * TOP_K; i++) {
        ids[i] = (int32_t)((i % TOP_K) * 7 + step) % N_EXPERTS;
        wt[i] = 1.0f / TOP_K;
    }
    mp_status s;
    if ((s = mp_trace_step_begin(w, step, step ? MP_PHASE_DECODE : MP_PHASE_PREFILL, rows, step,
                                 err)))
        return s;
    for (int n = 0; n < N_NODES; n++)
        if ((s = mp_trace_add_routing(w, n, rows, TOP_K, ids, wt, err)))
            return s;
    return mp_trace_step_end(w, 1000, err);
}

static int64_t count(sqlite3 *db, const char *sql)
{
    sqlite3_stmt *st;
    cr_assert_eq(sqlite3_prepare_v2(db, sql, -1, &st, NULL), SQLITE_OK, "%s", sqlite3_errmsg(db));
    cr_assert_eq(sqlite3_step(st), SQLITE_ROW);
    int64_t v = sqlite3_column_int64(st, 0);
    sqlite3_finalize(st);
    return v;
}

Test(trace_crash, kill_9_mid_run_leaves_a_valid_incomplete_trace)
{
    int ready[2];
    cr_assert_eq(pipe(ready), 0);
    pid_t pid = fork();
    cr_assert_neq(pid, -1);
    if (pid == 0) {
        /* Child: write forever; after 50 committed steps tell the parent, then keep writing so
         * that the kill lands in the middle of a step. */
        close(ready[0]);
        mp_trace_writer *w;
        mp_error err;
        if (start(&w, &err) || mp_trace_request_begin(w, 0, NULL, NULL, -1, NULL, -1, &err))
            _exit(3);
        for (int64_t step = 0;; step++) {
            if (one_step(w, step, step ? 1 : 64, &err))
                _exit(4);
            if (step == 50 && write(ready[1], "x", 1) != 1)
                _exit(5);
        }
    }
    close(ready[1]);
    char c;
    cr_assert_eq(read(ready[0], &c, 1), 1, "the writer child failed before 50 steps");
    usleep(20000);
    cr_assert_eq(kill(pid, SIGKILL), 0);
    int status;
    cr_assert_eq(waitpid(pid, &status, 0), pid);
    cr_assert(WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL, "child exited on its own");

    sqlite3 *db;
    cr_assert_eq(sqlite3_open_v2(path, &db, SQLITE_OPEN_READWRITE, NULL), SQLITE_OK);
    sqlite3_stmt *st;
    cr_assert_eq(sqlite3_prepare_v2(db, "PRAGMA integrity_check", -1, &st, NULL), SQLITE_OK);
    cr_assert_eq(sqlite3_step(st), SQLITE_ROW);
    cr_assert_str_eq((const char *)sqlite3_column_text(st, 0), "ok");
    sqlite3_finalize(st);
    int64_t steps = count(db, "SELECT count(*) FROM steps");
    cr_assert_geq(steps, 51);
    /* every committed step is whole: its routing row (every node's block) is there, nothing of
     * a later step */
    cr_assert_eq(count(db, "SELECT count(*) FROM routing"), steps);
    cr_assert_eq(count(db, "SELECT count(*) FROM routing r JOIN steps s ON s.request_id ="
                           " r.request_id AND s.step = r.step WHERE length(r.expert_ids) !="
                           " s.n_rows * (SELECT sum(top_k * id_bytes) FROM nodes)"), 0);
    cr_assert_eq(count(db, "SELECT count(*) FROM routing r WHERE NOT EXISTS (SELECT 1 FROM steps s"
                           " WHERE s.request_id = r.request_id AND s.step = r.step)"), 0);
    cr_assert_eq(count(db, "SELECT count(*) FROM footer"), 0);
    sqlite3_close(db);

    mp_trace_reader *r;
    mp_error err;
    cr_assert_eq(mp_trace_reader_open(path, &r, &err), MP_OK, "%s", err.msg);
    cr_assert_str_eq(mp_trace_reader_run(r)->status, "running");
    cr_assert(!mp_trace_reader_run(r)->has_footer);
    mp_trace_reader_close(r);
}

Test(trace_crash, size_cap_stops_the_run_as_aborted)
{
    mp_trace_writer *w;
    mp_error err;
    cr_assert_eq(start(&w, &err), MP_OK, "%s", err.msg);
    cr_assert_eq(mp_trace_writer_limit_bytes(w, 256 * 1024, &err), MP_OK, "%s", err.msg);
    cr_assert_eq(mp_trace_request_begin(w, 0, NULL, NULL, -1, NULL, -1, &err), MP_OK);
    mp_status s = MP_OK;
    int64_t step = 0;
    for (; step < 100000 && s == MP_OK; step++)
        s = one_step(w, step, 64, &err);
    cr_assert_eq(s, MP_ERR_IO, "the cap never stopped the run");
    cr_assert(strstr(err.msg, "reached its size limit of 262144 bytes"), "%s", err.msg);
    cr_assert(strstr(err.msg, path), "%s", err.msg);
    /* every later call fails with the same first error */
    mp_error err2;
    cr_assert_eq(mp_trace_finish(w, &err2), MP_ERR_IO);
    cr_assert_str_eq(err2.msg, err.msg);
    mp_trace_counts counts = mp_trace_writer_counts(w);
    mp_trace_writer_close(w);

    mp_trace_reader *r;
    cr_assert_eq(mp_trace_reader_open(path, &r, &err2), MP_OK, "%s", err2.msg);
    const mp_trace_run *run = mp_trace_reader_run(r);
    cr_assert_str_eq(run->status, "aborted");
    cr_assert_not_null(run->error);
    cr_assert(strstr(run->error, "size limit"), "%s", run->error);
    cr_assert(!run->has_footer);
    mp_trace_routing_iter *it;
    mp_trace_routing_rec rec;
    int64_t n = 0;
    cr_assert_eq(mp_trace_routing_begin(r, &it, &err2), MP_OK);
    while (mp_trace_routing_next(it, &rec, &err2) == 1)
        n++;
    mp_trace_routing_end(it);
    cr_assert_eq(n, counts.n_routing, "routing in the file != committed count");
    cr_assert_eq(n, (step - 1) * N_NODES);
    mp_trace_reader_close(r);
}

Test(trace_crash, unwritable_path_is_a_clear_error)
{
    mp_trace_writer *w;
    mp_error err;
    char bad[400];
    snprintf(bad, sizeof bad, "%s/no-such-dir/t.db", tmpdir);
    cr_assert_eq(mp_trace_writer_open(bad, false, &w, &err), MP_ERR_IO);
    cr_assert(strstr(err.msg, bad), "%s", err.msg);
    cr_assert(strstr(err.msg, "cannot create"), "%s", err.msg);
}
