/* tests/unit/test_route_replay.c — route replay end to end on real routing: the FLAME-MoE-290M
 * fixture (tests/fixtures/traces) is imported, a `flame`-geometry model is made, and `moeplan
 * collect --route-replay` must record exactly the replayed routing, row for row, per layer, also
 * past the end of the trace (wrap). Refusals: another geometry, an incomplete trace, a corrupt
 * record, the replayed trace as output; `moeplan run --route-replay` too. */
#include <criterion/criterion.h>
#include <sqlite3.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "collector/trace_read.h"
#include "tests/unit/cli_util.h"

static char tmpdir[256], src_db[320], model[320], prompts[320], csv[512];
static const char *root;

static int sh(const char *args, char *out, size_t cap)
{
    return mp_test_moeplan(tmpdir, args, MP_TEST_MERGED, out, cap);
}

static void setup(void)
{
    snprintf(tmpdir, sizeof tmpdir, "/tmp/mp_test_route_replay_XXXXXX");
    cr_assert_not_null(mkdtemp(tmpdir));
    root = getenv("MP_SOURCE_ROOT");
    cr_assert_not_null(root, "MP_SOURCE_ROOT is not set (run through meson test)");
    snprintf(csv, sizeof csv, "%s/tests/fixtures/traces/flame-moe-290m-prefill-seq0-7.csv", root);
    snprintf(src_db, sizeof src_db, "%s/flame.db", tmpdir);
    snprintf(model, sizeof model, "%s/flame.gguf", tmpdir);
    snprintf(prompts, sizeof prompts, "%s/p.json", tmpdir);
    char args[2048], out[8192];
    /* f16 weights in both traces, so that the comparison is exact (f16 -> f32 -> f16 is lossless) */
    snprintf(args, sizeof args, "import csv '%s' --trace '%s' --experts 64 --weights f16", csv,
             src_db);
    cr_assert_eq(sh(args, out, sizeof out), 0, "%s", out);
    /* FLAME's routing geometry (25 × 64, top-6) with a tiny dense part: q8_0 blocks of 32 */
    snprintf(args, sizeof args, "mkmodel --preset flame --hidden 64 --heads 2 --kv-heads 2 "
             "--head-dim 32 --expert-ff 32 --quant q8_0 --quiet -o '%s'", model);
    cr_assert_eq(sh(args, out, sizeof out), 0, "%s", out);
}

static void teardown(void)
{
    char cmd[512];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", tmpdir);
    cr_assert_eq(system(cmd), 0);
}
TestSuite(route_replay, .init = setup, .fini = teardown);

/* Every node's rows in trace order: ids (rows, k) and weights (rows, k), per node in node order. */
typedef struct stream {
    int64_t n_nodes, k, rows[64];
    int32_t *ids[64];
    float *w[64];
} stream;

static void load_stream(const char *path, stream *s)
{
    memset(s, 0, sizeof *s);
    mp_trace_reader *r;
    mp_error e;
    cr_assert_eq(mp_trace_reader_open(path, &r, &e), MP_OK, "%s", e.msg);
    s->n_nodes = mp_trace_reader_n_nodes(r);
    cr_assert(s->n_nodes > 0 && s->n_nodes <= 64);
    const mp_trace_node_info *nodes = mp_trace_reader_nodes(r);
    s->k = nodes[0].top_k;
    mp_trace_routing_iter *it;
    cr_assert_eq(mp_trace_routing_begin(r, &it, &e), MP_OK);
    mp_trace_routing_rec rec;
    int rc;
    while ((rc = mp_trace_routing_next(it, &rec, &e)) == 1) {
        int64_t i = 0;
        while (i < s->n_nodes && nodes[i].node_index != rec.node_index)
            i++;
        cr_assert_lt(i, s->n_nodes);
        const int64_t n = rec.n_rows * s->k, at = s->rows[i] * s->k;
        s->ids[i] = realloc(s->ids[i], (size_t)(at + n) * sizeof(int32_t));
        s->w[i] = realloc(s->w[i], (size_t)(at + n) * sizeof(float));
        cr_assert_eq(mp_trace_decode_ids(rec.expert_ids, rec.expert_ids_bytes, nodes[i].id_bytes,
                                         n, s->ids[i] + at, &e), MP_OK, "%s", e.msg);
        cr_assert_eq(mp_trace_decode_weights(rec.weights, rec.weights_bytes,
                                             nodes[i].weight_format, n, s->w[i] + at, &e), MP_OK,
                     "%s", e.msg);
        s->rows[i] += rec.n_rows;
    }
    cr_assert_eq(rc, 0, "%s", e.msg);
    mp_trace_routing_end(it);
    mp_trace_reader_close(r);
}

static void free_stream(stream *s)
{
    for (int i = 0; i < 64; i++) {
        free(s->ids[i]);
        free(s->w[i]);
    }
}

static void write_text(const char *path, const char *text)
{
    FILE *f = fopen(path, "w");
    cr_assert_not_null(f);
    fputs(text, f);
    fclose(f);
}

/* Collect with replay and check every recorded row against the source's row (r mod its length). */
static void collect_and_compare(const char *prompt_json, int64_t max_tokens, bool expect_wrap)
{
    write_text(prompts, prompt_json);
    char trace[320], args[4096], out[8192];
    snprintf(trace, sizeof trace, "%s/out.db", tmpdir);
    snprintf(args, sizeof args, "collect -m '%s' --prompts '%s' --trace '%s' --raw-prompts "
             "--max-tokens %lld --no-progress --force --route-replay '%s' --executor cpu "
             "--placement fill --gpu-budget 80MiB", model, prompts, trace, (long long)max_tokens, src_db);
    cr_assert_eq(sh(args, out, sizeof out), 0, "%s", out);
    cr_assert(strstr(out, "routing replayed from") != NULL, "%s", out);
    stream src, got;
    load_stream(src_db, &src);
    load_stream(trace, &got);
    cr_assert_eq(got.n_nodes, 25);
    cr_assert_eq(src.n_nodes, 25);
    cr_assert_eq(got.k, 6);
    for (int64_t i = 0; i < 25; i++) {
        cr_assert_eq(src.rows[i], 512, "node %lld: %lld rows", (long long)i, (long long)src.rows[i]);
        cr_assert_eq(got.rows[i], got.rows[0]);
        for (int64_t r = 0; r < got.rows[i]; r++) {
            const int64_t sr = r % src.rows[i];
            cr_assert(!memcmp(got.ids[i] + r * 6, src.ids[i] + sr * 6, 6 * sizeof(int32_t)),
                      "layer %lld row %lld: ids differ (first %d vs %d)", (long long)i,
                      (long long)r, got.ids[i][r * 6], src.ids[i][sr * 6]);
            cr_assert(!memcmp(got.w[i] + r * 6, src.w[i] + sr * 6, 6 * sizeof(float)),
                      "layer %lld row %lld: weights differ (first %g vs %g)", (long long)i,
                      (long long)r, (double)got.w[i][r * 6], (double)src.w[i][sr * 6]);
        }
    }
    cr_assert(expect_wrap ? got.rows[0] > 512 : got.rows[0] <= 512, "%lld rows",
              (long long)got.rows[0]);
    cr_assert_gt(got.rows[0], 8); /* prefill and decode both replayed */
    char wraps[64];
    snprintf(wraps, sizeof wraps, "%lld rows per layer, %lld wrap(s)", (long long)got.rows[0],
             (long long)((got.rows[0] - 1) / 512));
    cr_assert(strstr(out, wraps) != NULL, "want '%s' in %s", wraps, out);
    /* the run metadata says what was replayed and placed */
    sqlite3 *db;
    cr_assert_eq(sqlite3_open_v2(trace, &db, SQLITE_OPEN_READONLY, NULL), SQLITE_OK);
    sqlite3_stmt *st;
    cr_assert_eq(sqlite3_prepare_v2(db, "SELECT json_extract(config_json, '$.route_replay'), "
                                    "json_extract(config_json, '$.placement'), budget_bytes "
                                    "FROM run", -1, &st, NULL), SQLITE_OK);
    cr_assert_eq(sqlite3_step(st), SQLITE_ROW);
    cr_assert_str_eq((const char *)sqlite3_column_text(st, 0), src_db);
    cr_assert_str_eq((const char *)sqlite3_column_text(st, 1), "fill");
    cr_assert_eq(sqlite3_column_int64(st, 2), 80 << 20);
    sqlite3_finalize(st);
    sqlite3_close(db);
    free_stream(&src);
    free_stream(&got);
}

Test(route_replay, collect_records_exactly_the_replayed_routing)
{
    collect_and_compare("[\"The quick brown fox jumps over the lazy dog.\", "
                        "\"Mixture of experts models route each token to a few experts.\"]", 6,
                        false);
}

Test(route_replay, collect_wraps_past_the_end_of_the_trace)
{
    /* more than 512 rows per layer: the streams restart at the trace's first row */
    char json[8192] = "[";
    for (int p = 0; p < 3; p++) {
        strcat(json, p ? ", \"" : "\"");
        for (int i = 0; i < 40; i++)
            strcat(json, "experts route tokens and placement decides speed ");
        strcat(json, "\"");
    }
    strcat(json, "]");
    collect_and_compare(json, 4, true);
}

static bool exists(const char *path)
{
    struct stat sb;
    return stat(path, &sb) == 0;
}

Test(route_replay, refuses_another_geometry_before_writing_a_trace)
{
    char tiny[512], trace[320], args[4096], out[8192];
    snprintf(tiny, sizeof tiny, "%s/tests/fixtures/hf/qwen3moe-tiny-f32.gguf", root);
    snprintf(trace, sizeof trace, "%s/t.db", tmpdir);
    write_text(prompts, "[\"hello\"]");
    snprintf(args, sizeof args, "collect -m '%s' --prompts '%s' --trace '%s' --no-progress "
             "--route-replay '%s'", tiny, prompts, trace, src_db);
    cr_assert_eq(sh(args, out, sizeof out), 1, "%s", out);
    cr_assert(strstr(out, "moeplan collect: error: route replay: trace") != NULL, "%s", out);
    cr_assert(strstr(out, "has 25 MoE nodes × 64 experts × top-6") != NULL, "%s", out);
    cr_assert(strstr(out, "the model has 3 layers × 8 experts × top-2") != NULL, "%s", out);
    cr_assert(!exists(trace), "a refused run left a trace");
    snprintf(args, sizeof args, "run -m '%s' -p hello -n 2 --route-replay '%s'", tiny, src_db);
    cr_assert_eq(sh(args, out, sizeof out), 1, "%s", out);
    cr_assert(strstr(out, "moeplan run: error: route replay: trace") != NULL, "%s", out);
    cr_assert(strstr(out, "the model has 3 layers × 8 experts × top-2") != NULL, "%s", out);
    /* the replayed trace as the output */
    snprintf(args, sizeof args, "collect -m '%s' --prompts '%s' --trace '%s' --force "
             "--no-progress --route-replay '%s'", model, prompts, src_db, src_db);
    cr_assert_eq(sh(args, out, sizeof out), 2, "%s", out);
    cr_assert(strstr(out, "the same file as the --route-replay trace") != NULL, "%s", out);
    /* not a trace at all */
    snprintf(args, sizeof args, "run -m '%s' -p hello -n 2 --route-replay '%s'", model, prompts);
    cr_assert_eq(sh(args, out, sizeof out), 1, "%s", out);
    cr_assert(strstr(out, "moeplan run: error: ") != NULL, "%s", out);
}

static void sql(const char *path, const char *stmt)
{
    sqlite3 *db;
    cr_assert_eq(sqlite3_open(path, &db), SQLITE_OK);
    char *msg = NULL;
    cr_assert_eq(sqlite3_exec(db, stmt, NULL, NULL, &msg), SQLITE_OK, "%s", msg ? msg : "");
    sqlite3_close(db);
}

Test(route_replay, refuses_incomplete_and_corrupt_traces)
{
    char bad[320], args[4096], out[8192], cmd[1024];
    snprintf(bad, sizeof bad, "%s/bad.db", tmpdir);
    snprintf(cmd, sizeof cmd, "cp '%s' '%s'", src_db, bad);
    cr_assert_eq(system(cmd), 0);
    sql(bad, "UPDATE run SET status = 'aborted'");
    snprintf(args, sizeof args, "run -m '%s' -p hello -n 2 --raw --route-replay '%s'", model, bad);
    cr_assert_eq(sh(args, out, sizeof out), 1, "%s", out);
    cr_assert(strstr(out, "run status is 'aborted', expected 'complete'") != NULL, "%s",
              out);
    /* a record whose ids blob is short: the run stops, naming request, step and node */
    sql(bad, "UPDATE run SET status = 'complete'; UPDATE routing SET expert_ids = x'0102' "
             "WHERE key = (SELECT min(key) FROM routing)");
    cr_assert_eq(sh(args, out, sizeof out), 1, "%s", out);
    cr_assert(strstr(out, "route replay: trace") != NULL, "%s", out);
    cr_assert(strstr(out, "request 0 (ord 0), step 0, node 2") != NULL, "%s", out);
    /* an expert id out of range */
    snprintf(cmd, sizeof cmd, "cp '%s' '%s'", src_db, bad);
    cr_assert_eq(system(cmd), 0);
    sql(bad, "UPDATE routing SET expert_ids = x'4100' || substr(expert_ids, 3) "
             "WHERE key = (SELECT min(key) FROM routing)");
    cr_assert_eq(sh(args, out, sizeof out), 1, "%s", out);
    cr_assert(strstr(out, "row 0, slot 0: expert id 65 outside [0, 64)") != NULL, "%s", out);
    /* and the good trace replays through run */
    snprintf(args, sizeof args, "run -m '%s' -p hello -n 3 --raw --route-replay '%s'", model,
             src_db);
    cr_assert_eq(sh(args, out, sizeof out), 0, "%s", out);
    cr_assert(strstr(out, "rows per layer, 0 wrap(s)") != NULL, "%s", out);
}
