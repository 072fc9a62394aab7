/* tests/unit/test_collect_cupti.c — `collect --cupti` where it can be checked without a GPU:
 * the external id packing, CUPTI records through both trace writer paths (the sinks the --cupti
 * hooks use), and the CLI's outcome, which depends on the machine: without CUPTI in the build or
 * without a CUDA device it must refuse in one line and leave no trace; with both it must write a
 * complete trace. The records of real kernels are checked by tests/gpu/test_cupti.c. */
#include <criterion/criterion.h>
#include <sqlite3.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>

#include "collector/cupti.h"
#include "collector/trace.h"
#include "mp_config.h"
#include "tests/unit/cli_util.h"
#include "tests/unit/trace_fixture.h"
#include "runtime/gpu.h"

static char tmpdir[256];

static void setup(void)
{
    snprintf(tmpdir, sizeof tmpdir, "/tmp/mp_test_collect_cupti_XXXXXX");
    cr_assert_not_null(mkdtemp(tmpdir));
}

static void teardown(void)
{
    char cmd[300];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", tmpdir);
    cr_assert_eq(system(cmd), 0);
}

TestSuite(collect_cupti, .init = setup, .fini = teardown);

static uint64_t g_rng;
static uint64_t rnd(void)
{
    uint64_t z = (g_rng += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

Test(collect_cupti, external_id_round_trip)
{
    const uint64_t seed = (uint64_t)time(NULL);
    g_rng = seed;
    for (int i = 0; i < 100000; i++) {
        int64_t rq = (int64_t)(rnd() % (MP_TRACE_MAX_REQUEST_ID + 1));
        int64_t st = (int64_t)(rnd() % (MP_TRACE_MAX_STEP + 1));
        int64_t nd = (int64_t)(rnd() % (MP_TRACE_MAX_NODE_INDEX + 2)) - 1; /* -1..4095 */
        if (i < 4) { /* the corners */
            rq = i & 1 ? MP_TRACE_MAX_REQUEST_ID : 0;
            st = i & 2 ? MP_TRACE_MAX_STEP : 0;
            nd = i & 1 ? -1 : MP_TRACE_MAX_NODE_INDEX;
        }
        uint64_t id = mp_cupti_external_id(rq, st, nd);
        int64_t r2, s2, n2;
        mp_cupti_external_id_decode(id, &r2, &s2, &n2);
        cr_assert(r2 == rq && s2 == st && n2 == nd,
                  "seed %llu: (%lld, %lld, %lld) came back as (%lld, %lld, %lld)",
                  (unsigned long long)seed, (long long)rq, (long long)st, (long long)nd,
                  (long long)r2, (long long)s2, (long long)n2);
        if (nd >= 0) /* with a node, the id is the trace's routing key */
            cr_assert_eq(id, (uint64_t)(rq << 36 | st << 12 | nd), "seed %llu",
                         (unsigned long long)seed);
        else
            cr_assert(id >> 63, "seed %llu: no-node bit missing", (unsigned long long)seed);
    }
}

/* ---- records through the writer paths ---- */

enum { N_RECS = 40 };
static char g_names[N_RECS][64];

/* Random records: kernels with long names, copies with byte counts, some uncorrelated. */
static void make_recs(mp_trace_cupti_rec *recs, uint64_t seed)
{
    g_rng = seed;
    for (int i = 0; i < N_RECS; i++) {
        const bool is_copy = rnd() % 3 == 0;
        snprintf(g_names[i], sizeof g_names[i], is_copy ? "HtoD" : "_Z%dkernel_%llu",
                 (int)(rnd() % 90) + 10, (unsigned long long)rnd());
        const int64_t start = (int64_t)(rnd() >> 4);
        recs[i] = (mp_trace_cupti_rec){
            .kind = is_copy ? "memcpy" : "kernel", .name = g_names[i], .start_ns = start,
            .end_ns = start + 1 + (int64_t)(rnd() % 100000),
            .bytes = is_copy ? (int64_t)(rnd() % (1 << 30)) : -1, .device_id = 0,
            .stream_id = (int64_t)(rnd() % 7), .correlation_id = i + 1,
            .request_id = i % 5 == 0 ? -1 : 0, .step = i % 5 == 0 ? -1 : i / 20,
            .node_index = i % 5 == 0 ? -1 : (int64_t)(rnd() % 4) - 1};
    }
}

/* Two steps of request 0; records 0..19 go into step 0, 20..39 into step 1, through sink. */
static void write_run(const char *path, bool async, const mp_trace_cupti_rec *recs)
{
    mp_trace_writer *w = open_three_node_trace(path);
    mp_error err;
    mp_trace_hooks_state hs;
    mp_trace_async *a = NULL;
    mp_hooks h;
    if (async)
        cr_assert_eq(mp_trace_async_start(w, &a, &h, &err), MP_OK, "%s", err.msg);
    else
        h = mp_trace_hooks(&hs, w);
    h.request_begin(h.user, 0, NULL, -1);
    for (int step = 0; step < 2; step++) {
        h.step_begin(h.user, 0, step, step ? MP_PHASE_DECODE : MP_PHASE_PREFILL, 1, step);
        for (int i = step * 20; i < step * 20 + 20; i++)
            cr_assert_eq(async ? mp_cupti_sink_async(a, &recs[i], &err)
                               : mp_cupti_sink_trace(w, &recs[i], &err),
                         MP_OK, "%s", err.msg);
        h.step_end(h.user, 1000);
    }
    h.request_end(h.user, 1);
    if (async)
        cr_assert_eq(mp_trace_async_stop(a, &err), MP_OK, "%s", err.msg);
    else
        cr_assert_eq(hs.status, MP_OK, "%s", hs.error.msg);
    cr_assert_eq(mp_trace_finish(w, &err), MP_OK, "%s", err.msg);
    cr_assert_eq(mp_trace_writer_counts(w).n_cupti, N_RECS);
    mp_trace_writer_close(w);
}

static void check_rows(const char *path, const mp_trace_cupti_rec *recs, uint64_t seed)
{
    sqlite3 *db;
    cr_assert_eq(sqlite3_open_v2(path, &db, SQLITE_OPEN_READONLY, NULL), SQLITE_OK);
    sqlite3_stmt *st;
    cr_assert_eq(sqlite3_prepare_v2(db, "SELECT kind, name, start_ns, end_ns, bytes, device_id, "
                                    "stream_id, correlation_id, request_id, step, node_index "
                                    "FROM cupti ORDER BY id", -1, &st, NULL), SQLITE_OK);
    int i = 0;
    while (sqlite3_step(st) == SQLITE_ROW) {
        cr_assert_lt(i, N_RECS);
        const mp_trace_cupti_rec *r = &recs[i];
        cr_assert_str_eq((const char *)sqlite3_column_text(st, 0), r->kind, "seed %llu row %d",
                         (unsigned long long)seed, i);
        cr_assert_str_eq((const char *)sqlite3_column_text(st, 1), r->name, "seed %llu row %d",
                         (unsigned long long)seed, i);
        const int64_t want[9] = {r->start_ns, r->end_ns, r->bytes, r->device_id, r->stream_id,
                                 r->correlation_id, r->request_id, r->step, r->node_index};
        for (int c = 0; c < 9; c++) {
            if (want[c] < 0)
                cr_assert_eq(sqlite3_column_type(st, 2 + c), SQLITE_NULL,
                             "seed %llu row %d column %d: -1 must be stored as NULL",
                             (unsigned long long)seed, i, 2 + c);
            else
                cr_assert_eq(sqlite3_column_int64(st, 2 + c), want[c],
                             "seed %llu row %d column %d", (unsigned long long)seed, i, 2 + c);
        }
        i++;
    }
    cr_assert_eq(i, N_RECS, "seed %llu: %d rows", (unsigned long long)seed, i);
    sqlite3_finalize(st);
    cr_assert_eq(sqlite3_prepare_v2(db, "SELECT n_cupti FROM footer", -1, &st, NULL), SQLITE_OK);
    cr_assert_eq(sqlite3_step(st), SQLITE_ROW);
    cr_assert_eq(sqlite3_column_int64(st, 0), N_RECS);
    sqlite3_finalize(st);
    sqlite3_close(db);
}

Test(collect_cupti, records_through_sync_and_async_writers)
{
    const uint64_t seed = (uint64_t)time(NULL);
    static mp_trace_cupti_rec recs[N_RECS];
    make_recs(recs, seed);
    for (int async = 0; async < 2; async++) {
        char path[300];
        snprintf(path, sizeof path, "%s/%s.db", tmpdir, async ? "async" : "sync");
        write_run(path, async, recs);
        check_rows(path, recs, seed);
    }
}

Test(collect_cupti, async_writer_refuses_a_bad_kind)
{
    char path[300];
    snprintf(path, sizeof path, "%s/bad.db", tmpdir);
    mp_trace_writer *w = open_three_node_trace(path);
    mp_error err;
    mp_trace_async *a;
    mp_hooks h;
    cr_assert_eq(mp_trace_async_start(w, &a, &h, &err), MP_OK, "%s", err.msg);
    h.request_begin(h.user, 0, NULL, -1);
    h.step_begin(h.user, 0, 0, MP_PHASE_PREFILL, 1, 0);
    mp_trace_cupti_rec r = {.kind = "memset", .name = "x", .start_ns = 1, .end_ns = 2,
                            .bytes = -1, .device_id = -1, .stream_id = -1, .correlation_id = -1,
                            .request_id = -1, .step = -1, .node_index = -1};
    mp_cupti_sink_async(a, &r, &err);
    h.step_end(h.user, 10);
    h.request_end(h.user, 0);
    cr_assert_neq(mp_trace_async_stop(a, &err), MP_OK);
    cr_assert(strstr(err.msg, "kind must be kernel or memcpy"), "%s", err.msg);
    mp_trace_writer_close(w);
}

/* ---- the CLI ---- */

Test(collect_cupti, help_lists_the_flag)
{
    char out[8192];
    cr_assert_eq(mp_test_moeplan(tmpdir, "collect --help", MP_TEST_MERGED, out, sizeof out), 0);
    cr_assert(strstr(out, "--cupti"), "%s", out);
}

Test(collect_cupti, outcome_matches_the_machine)
{
    const char *root = getenv("MP_SOURCE_ROOT");
    cr_assert_not_null(root, "MP_SOURCE_ROOT is not set (run through meson test)");
    char prompts[300], trace[300], args[2048], out[8192];
    snprintf(prompts, sizeof prompts, "%s/p.jsonl", tmpdir);
    snprintf(trace, sizeof trace, "%s/run.db", tmpdir);
    FILE *f = fopen(prompts, "w");
    fputs("\"Hello world\"\n", f);
    fclose(f);
    snprintf(args, sizeof args, "collect -m '%s/tests/fixtures/hf/qwen3moe-tiny-f32.gguf' "
             "--prompts '%s' --trace '%s' --max-tokens 3 --no-progress --cupti", root, prompts,
             trace);
    int rc = mp_test_moeplan(tmpdir, args, MP_TEST_MERGED, out, sizeof out);
    struct stat sb;
#if !MP_HAVE_CUPTI
    cr_assert_eq(rc, 1, "%s", out);
    cr_assert(strstr(out, "moeplan collect: error: --cupti: CUPTI unavailable"), "%s", out);
#else
    char why[768]; /* the question mp_cupti_start asks, through the GPU module */
    const bool device = mp_gpu_available(why, sizeof why);
    if (!device) {
        cr_assert_eq(rc, 1, "%s", out);
        cr_assert(strstr(out, "moeplan collect: error: --cupti: no CUDA device ("), "%s", out);
    } else { /* the run and the trace must be whole; with the GPU executor, tagged per node */
        cr_assert_eq(rc, 0, "%s", out);
        cr_assert(strstr(out, "cupti: "), "no cupti summary: %s", out);
        cr_assert_null(strstr(out, "warning: cupti"), "records lost: %s", out);
        sqlite3 *db;
        cr_assert_eq(sqlite3_open_v2(trace, &db, SQLITE_OPEN_READONLY, NULL), SQLITE_OK);
        sqlite3_stmt *st;
        cr_assert_eq(sqlite3_prepare_v2(db,
                     "SELECT r.status, f.n_cupti, (SELECT count(*) FROM cupti), "
                     "json_extract(r.config_json, '$.executor') = 'gpu', "
                     "(SELECT count(DISTINCT node_index) FROM cupti WHERE kind = 'kernel'), "
                     "(SELECT count(*) FROM nodes), "
                     "(SELECT count(*) FROM steps s WHERE NOT EXISTS (SELECT 1 FROM cupti c "
                     " WHERE c.request_id = s.request_id AND c.step = s.step AND c.kind = 'kernel'))"
                     " FROM run r, footer f", -1, &st, NULL), SQLITE_OK, "%s", sqlite3_errmsg(db));
        cr_assert_eq(sqlite3_step(st), SQLITE_ROW);
        cr_assert_str_eq((const char *)sqlite3_column_text(st, 0), "complete");
        cr_assert_eq(sqlite3_column_int64(st, 1), sqlite3_column_int64(st, 2));
        if (sqlite3_column_int(st, 3)) { /* every node ran kernels; every step has kernels */
            cr_assert_eq(sqlite3_column_int64(st, 4), sqlite3_column_int64(st, 5),
                         "kernels tagged with %lld of %lld nodes: %s",
                         (long long)sqlite3_column_int64(st, 4),
                         (long long)sqlite3_column_int64(st, 5), out);
            cr_assert_eq(sqlite3_column_int64(st, 6), 0, "%lld steps without a kernel",
                         (long long)sqlite3_column_int64(st, 6));
        }
        sqlite3_finalize(st);
        sqlite3_close(db);
        return;
    }
#endif
    /* refused before anything was written */
    cr_assert_neq(stat(trace, &sb), 0, "a refused run left %s behind", trace);
    cr_assert(!strchr(out, '\n') || strchr(out, '\n') == out + strlen(out) - 1,
              "the error is not one line: %s", out);
}
