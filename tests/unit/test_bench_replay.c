/* tests/unit/test_bench_replay.c — `moeplan bench --route-replay TRACE` as a user runs it.
 *
 * A tiny model is generated (`moeplan mkmodel --preset tiny`) and a trace collected from it; bench
 * then takes its routing from that trace. Checked: the rows (JSON and markdown) name the trace and
 * the replay's summary, and the replay served exactly the rows the tests consumed (warm-up and
 * repetitions, 1 + N per tg N, N per pp N), every run from the trace's first row (a run shorter
 * than the trace never wraps; one longer wraps once a run); a model of another geometry is refused with one line naming both; a trace that does not
 * exist, one that is not complete, and one with a corrupt record are refused with one line and
 * nothing on stdout (the corrupt record's message names the record). */
#include <cjson/cJSON.h>
#include <criterion/criterion.h>
#include <sqlite3.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "collector/trace_read.h"
#include "tests/unit/cli_util.h"

static char tmpdir[256], model[320], model8[320], trace[320], prompts[320];

static int sh(const char *args, char *out, size_t cap)
{
    return mp_test_moeplan(tmpdir, args, MP_TEST_STDERR, out, cap);
}

/* What the last command printed on stdout (malloc'd). */
static void setup(void)
{
    snprintf(tmpdir, sizeof tmpdir, "/tmp/mp_test_bench_replay_XXXXXX");
    cr_assert_not_null(mkdtemp(tmpdir));
    snprintf(model, sizeof model, "%s/tiny.gguf", tmpdir);
    snprintf(model8, sizeof model8, "%s/tiny8.gguf", tmpdir);
    snprintf(trace, sizeof trace, "%s/t.db", tmpdir);
    snprintf(prompts, sizeof prompts, "%s/p.json", tmpdir);
    FILE *f = fopen(prompts, "w");
    cr_assert_not_null(f);
    fputs("[\"The quick brown fox\", \"jumps over the lazy dog\"]", f);
    fclose(f);
    char args[2048], err[8192];
    snprintf(args, sizeof args, "mkmodel --preset tiny --quiet -o '%s'", model);
    cr_assert_eq(sh(args, err, sizeof err), 0, "%s", err);
    snprintf(args, sizeof args, "mkmodel --preset tiny --experts 8 --quiet -o '%s'", model8);
    cr_assert_eq(sh(args, err, sizeof err), 0, "%s", err);
    snprintf(args, sizeof args, "collect -m '%s' --prompts '%s' --trace '%s' --raw-prompts "
             "--max-tokens 3 --no-progress", model, prompts, trace);
    cr_assert_eq(sh(args, err, sizeof err), 0, "%s", err);
}

static void teardown(void)
{
    char cmd[512];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", tmpdir);
    cr_assert_eq(system(cmd), 0);
}

TestSuite(bench_replay, .init = setup, .fini = teardown);

/* Routing rows of the trace's first MoE node (every node has as many). */
static int64_t trace_rows(const char *path)
{
    mp_trace_reader *r;
    mp_error e;
    cr_assert_eq(mp_trace_reader_open(path, &r, &e), MP_OK, "%s", e.msg);
    const int64_t node = mp_trace_reader_nodes(r)[0].node_index;
    mp_trace_routing_iter *it;
    cr_assert_eq(mp_trace_routing_begin(r, &it, &e), MP_OK, "%s", e.msg);
    mp_trace_routing_rec rec;
    int64_t rows = 0;
    int rc;
    while ((rc = mp_trace_routing_next(it, &rec, &e)) == 1)
        if (rec.node_index == node)
            rows += rec.n_rows;
    cr_assert_eq(rc, 0, "%s", e.msg);
    mp_trace_routing_end(it);
    mp_trace_reader_close(r);
    return rows;
}

static int lines(const char *s)
{
    int n = 0;
    for (; *s; s++)
        n += *s == '\n';
    return n;
}

Test(bench_replay, rows_name_the_trace_and_the_replay_serves_every_step)
{
    const int64_t R = trace_rows(trace);
    cr_assert_gt(R, 4, "trace of %lld rows", (long long)R);
    char args[2048], err[16384], want[1024];
    /* tg N replays the first 1 + N rows at each run (warm-up + reps runs): runs shorter than the
     * trace, together longer, never wrap; a stream that went on across runs would */
    const int64_t half = R / 2, runs = 3;
    cr_assert_gt(runs * (1 + half), R);
    snprintf(args, sizeof args, "bench -m '%s' -p 0 -n %lld -r %lld --ctx %lld --executor cpu "
             "--route-replay '%s' -o json", model, (long long)half, (long long)(runs - 1),
             (long long)(half + 1), trace);
    cr_assert_eq(sh(args, err, sizeof err), 0, "%s", err);
    char *out = mp_test_stdout(tmpdir);
    snprintf(want, sizeof want, "\"routing replayed from %s: %lld rows per layer, 0 wrap(s)\"", trace,
             (long long)(runs * (1 + half)));
    cr_assert(strstr(out, want) != NULL, "want %s in:\n%s", want, out);
    free(out);

    /* a run longer than the trace wraps once at each run */
    const int64_t n = R, reps = 2, consumed = (reps + 1) * (1 + n);
    snprintf(args, sizeof args, "bench -m '%s' -p 0 -n %lld -r %lld --ctx %lld --route-replay '%s' "
             "-o json", model, (long long)n, (long long)reps, (long long)(n + 1), trace);
    cr_assert_eq(sh(args, err, sizeof err), 0, "%s", err);
    out = mp_test_stdout(tmpdir);
    cJSON *root = cJSON_Parse(out);
    cr_assert_not_null(root, "not JSON: %s", out);
    const cJSON *rows = cJSON_GetObjectItemCaseSensitive(root, "rows");
    cr_assert_eq(cJSON_GetArraySize(rows), 1);
    const cJSON *row = cJSON_GetArrayItem(rows, 0);
    const cJSON *rr = cJSON_GetObjectItemCaseSensitive(row, "route_replay");
    cr_assert(cJSON_IsString(rr) && !strcmp(rr->valuestring, trace), "route_replay: %s", out);
    const cJSON *sum = cJSON_GetObjectItemCaseSensitive(row, "route_replay_summary");
    cr_assert(cJSON_IsString(sum), "%s", out);
    snprintf(want, sizeof want, "routing replayed from %s: %lld rows per layer, %lld wrap(s)", trace,
             (long long)consumed, (long long)(reps + 1));
    cr_assert_str_eq(sum->valuestring, want);
    const cJSON *fixed = cJSON_GetObjectItemCaseSensitive(row, "gpu_fixed_bytes");
    const cJSON *dense = cJSON_GetObjectItemCaseSensitive(row, "gpu_dense_bytes");
    const cJSON *kv = cJSON_GetObjectItemCaseSensitive(row, "gpu_kv_bytes");
    const cJSON *scratch = cJSON_GetObjectItemCaseSensitive(row, "gpu_scratch_bytes");
    cr_assert(cJSON_IsNumber(fixed) && cJSON_IsNumber(dense) && cJSON_IsNumber(kv) &&
              cJSON_IsNumber(scratch));
    cr_assert_gt(dense->valuedouble, 0);
    cr_assert_gt(kv->valuedouble, 0);
    cr_assert_eq(fixed->valuedouble, dense->valuedouble + kv->valuedouble + scratch->valuedouble);
    cJSON_Delete(root);
    free(out);

    /* pp N consumes N rows per run; the markdown table names the trace, a line the summary */
    snprintf(args, sizeof args, "bench -m '%s' -p 3 -n 0 -r 1 --executor cpu --route-replay '%s'",
             model, trace);
    cr_assert_eq(sh(args, err, sizeof err), 0, "%s", err);
    out = mp_test_stdout(tmpdir);
    cr_assert(strstr(out, "| routing |") != NULL, "%s", out);
    cr_assert(strstr(out, "| replay t.db | cpu | - | - | pp3 |") != NULL, "%s", out);
    snprintf(want, sizeof want, "route replay: routing replayed from %s: 6 rows per layer, "
             "0 wrap(s).\n", trace);
    cr_assert(strstr(out, want) != NULL, "want '%s' in:\n%s", want, out);
    free(out);

    /* without replay the rows say so */
    snprintf(args, sizeof args, "bench -m '%s' -p 2 -n 0 -r 1 -o json", model);
    cr_assert_eq(sh(args, err, sizeof err), 0, "%s", err);
    out = mp_test_stdout(tmpdir);
    root = cJSON_Parse(out);
    cr_assert_not_null(root);
    row = cJSON_GetArrayItem(cJSON_GetObjectItemCaseSensitive(root, "rows"), 0);
    cr_assert(cJSON_IsNull(cJSON_GetObjectItemCaseSensitive(row, "route_replay")), "%s", out);
    cr_assert(cJSON_IsNull(cJSON_GetObjectItemCaseSensitive(row, "route_replay_summary")), "%s", out);
    cJSON_Delete(root);
    free(out);
}

Test(bench_replay, another_geometry_is_refused_naming_both)
{
    char args[2048], err[8192];
    snprintf(args, sizeof args, "bench -m '%s' -p 0 -n 4 -r 1 --route-replay '%s'", model8, trace);
    cr_assert_eq(sh(args, err, sizeof err), 1, "%s", err);
    cr_assert_eq(lines(err), 1, "want one line:\n%s", err);
    cr_assert(strncmp(err, "moeplan bench: error: route replay: trace ", 42) == 0, "%s", err);
    cr_assert(strstr(err, "has 4 MoE nodes × 16 experts × top-4") != NULL, "%s", err);
    cr_assert(strstr(err, "the model has 4 layers × 8 experts × top-4") != NULL, "%s", err);
    char *out = mp_test_stdout(tmpdir);
    cr_assert_str_eq(out, "");
    free(out);
}

static void sql(const char *path, const char *stmt)
{
    sqlite3 *db;
    cr_assert_eq(sqlite3_open(path, &db), SQLITE_OK);
    char *msg = NULL;
    cr_assert_eq(sqlite3_exec(db, stmt, NULL, NULL, &msg), SQLITE_OK, "%s", msg ? msg : "");
    sqlite3_close(db);
}

Test(bench_replay, missing_incomplete_and_corrupt_traces_are_refused)
{
    char args[2048], err[8192], bad[400], cmd[1024];
    /* a trace file that does not exist */
    snprintf(bad, sizeof bad, "%s/nonexistent.db", tmpdir);
    snprintf(args, sizeof args, "bench -m '%s' -p 0 -n 4 -r 1 --route-replay '%s'", model, bad);
    cr_assert_eq(sh(args, err, sizeof err), 1, "%s", err);
    cr_assert_eq(lines(err), 1, "want one line:\n%s", err);
    cr_assert(strncmp(err, "moeplan bench: error: ", 22) == 0, "%s", err);
    cr_assert(strstr(err, bad) != NULL, "the message does not name %s: %s", bad, err);
    char *out = mp_test_stdout(tmpdir);
    cr_assert_str_eq(out, "");
    free(out);
    /* no value */
    snprintf(args, sizeof args, "bench -m '%s' -p 0 -n 4 --route-replay", model);
    cr_assert_eq(sh(args, err, sizeof err), 2, "%s", err);
    cr_assert(strstr(err, "option --route-replay needs a value") != NULL, "%s", err);
    /* a trace whose run did not complete */
    snprintf(bad, sizeof bad, "%s/bad.db", tmpdir);
    snprintf(cmd, sizeof cmd, "cp '%s' '%s'", trace, bad);
    cr_assert_eq(system(cmd), 0);
    sql(bad, "UPDATE run SET status = 'aborted'");
    snprintf(args, sizeof args, "bench -m '%s' -p 0 -n 4 -r 1 --route-replay '%s'", model, bad);
    cr_assert_eq(sh(args, err, sizeof err), 1, "%s", err);
    cr_assert_eq(lines(err), 1, "want one line:\n%s", err);
    cr_assert(strstr(err, "run status is 'aborted', expected 'complete'") != NULL, "%s", err);
    /* an expert id out of range in the first record: refused when the trace is opened (replay
     * reads and checks it all then), before any test runs */
    sql(bad, "UPDATE run SET status = 'complete'; UPDATE routing SET expert_ids = x'4100' || "
             "substr(expert_ids, 3) WHERE key = (SELECT min(key) FROM routing)");
    cr_assert_eq(sh(args, err, sizeof err), 1, "%s", err);
    const char *msg = strstr(err, "moeplan bench: error: ");
    cr_assert_not_null(msg, "%s", err);
    cr_assert_eq(lines(msg), 1, "want one error line:\n%s", err);
    cr_assert(strstr(msg, "moeplan bench: error: route replay: trace") == msg, "%s", err);
    cr_assert(strstr(msg, "row 0, slot 0: expert id 65 outside [0, 16)") != NULL, "%s", err);
    out = mp_test_stdout(tmpdir);
    cr_assert_str_eq(out, "");
    free(out);
}
