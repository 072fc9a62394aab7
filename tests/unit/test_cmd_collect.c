/* tests/unit/test_cmd_collect.c — `moeplan collect` end to end on the tiny Qwen3-MoE fixture
 * (tests/fixtures/hf): the trace is complete and consistent with the run (requests, steps, rows,
 * routing per layer, ids in range, renormalized weights), both writer paths record identical
 * routing, the results JSON matches, the run row names the writer's version, commit and build, and
 * bad inputs fail before a trace exists. */
#include <cjson/cJSON.h>
#include <criterion/criterion.h>
#include <math.h>
#include <sqlite3.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "collector/trace_read.h"
#include "base/build_info.h"
#include "base/knobs.h"
#include "tests/unit/cli_util.h"

static char tmpdir[256], model[512], prompts[300];

static void setup(void)
{
    snprintf(tmpdir, sizeof tmpdir, "/tmp/mp_test_cmd_collect_XXXXXX");
    cr_assert_not_null(mkdtemp(tmpdir));
    const char *root = getenv("MP_SOURCE_ROOT");
    cr_assert_not_null(root, "MP_SOURCE_ROOT is not set (run through meson test)");
    snprintf(model, sizeof model, "%s/tests/fixtures/hf/qwen3moe-tiny-f32.gguf", root);
    snprintf(prompts, sizeof prompts, "%s/p.jsonl", tmpdir);
    FILE *f = fopen(prompts, "w");
    fputs("\"Hello world\"\n{\"prompt\": \"What is a mixture of experts?\", \"id\": \"moe\", "
          "\"max_tokens\": 4}\n[\"not\", \"used\"]\n", f);
    fclose(f);
}

static void teardown(void)
{
    char cmd[300];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", tmpdir);
    cr_assert_eq(system(cmd), 0);
}

TestSuite(cmd_collect, .init = setup, .fini = teardown);

static int moeplan(const char *args, char *err_out, size_t cap)
{
    return mp_test_moeplan(tmpdir, args, MP_TEST_STDERR, err_out, cap);
}

static void write_prompts(const char *text)
{
    FILE *f = fopen(prompts, "w");
    fputs(text, f);
    fclose(f);
}

Test(cmd_collect, trace_is_complete_and_consistent)
{
    write_prompts("\"Hello world\"\n{\"prompt\": \"What is a mixture of experts?\", \"id\": \"moe\", "
                  "\"max_tokens\": 4}\n");
    char args[2048], err[4096], trace[300], results[300];
    snprintf(trace, sizeof trace, "%s/run.db", tmpdir);
    snprintf(results, sizeof results, "%s/run.results.json", tmpdir);
    snprintf(args, sizeof args, "collect -m '%s' --prompts '%s' --trace '%s' --max-tokens 7 "
             "--no-progress", model, prompts, trace);
    cr_assert_eq(moeplan(args, err, sizeof err), 0, "%s", err);

    mp_trace_reader *r;
    mp_error e;
    cr_assert_eq(mp_trace_reader_open(trace, &r, &e), MP_OK, "%s", e.msg);
    const mp_trace_run *run = mp_trace_reader_run(r);
    cr_assert_str_eq(run->status, "complete");
    cr_assert_str_eq(run->source, "moeplan");
    cr_assert_str_eq(run->architecture, "qwen3moe");
    cr_assert_eq(strlen(run->model_sha256), 64);
    cr_assert_eq(run->n_experts, 8);
    cr_assert_eq(run->top_k, 2);
    cr_assert_eq(mp_trace_reader_n_nodes(r), 3);
    for (int i = 0; i < 3; i++)
        cr_assert_gt(mp_trace_reader_nodes(r)[i].expert_bytes, 0);
    cr_assert_eq(mp_trace_reader_n_requests(r), 2);
    const mp_trace_request_info *q = mp_trace_reader_requests(r);
    cr_assert_str_eq(q[0].external_id, "0");
    cr_assert_str_eq(q[1].external_id, "moe");
    cr_assert_null(q[1].prompt_text, "prompt text stored without --store-prompts");
    cr_assert_leq(q[0].n_gen_tokens, 7);
    cr_assert_leq(q[1].n_gen_tokens, 4);

    /* steps: prefill rows = prompt tokens, then 1-row decode steps at consecutive positions */
    int64_t rows_of[2][64] = {{0}}, n_steps[2] = {0, 0};
    mp_trace_step_iter *si;
    mp_trace_step_rec s;
    cr_assert_eq(mp_trace_steps_begin(r, &si, &e), MP_OK);
    while (mp_trace_steps_next(si, &s, &e) == 1) {
        cr_assert_eq(s.step, n_steps[s.request_id]);
        if (s.step == 0) {
            cr_assert_str_eq(s.phase, "prefill");
            cr_assert_eq(s.n_rows, q[s.request_id].n_prompt_tokens);
        } else {
            cr_assert_str_eq(s.phase, "decode");
            cr_assert_eq(s.n_rows, 1);
            cr_assert_eq(s.pos, q[s.request_id].n_prompt_tokens + s.step - 1);
        }
        rows_of[s.request_id][s.step] = s.n_rows;
        n_steps[s.request_id]++;
    }
    mp_trace_steps_end(si);
    /* the last sampled token is not evaluated: decode steps = generated tokens - 1 */
    cr_assert_eq(n_steps[0], q[0].n_gen_tokens);
    cr_assert_eq(n_steps[1], q[1].n_gen_tokens);

    /* routing: one record per (step, layer), ids in range and distinct, weights sum to 1 */
    mp_trace_routing_iter *it;
    mp_trace_routing_rec rec;
    int64_t n_rec = 0;
    cr_assert_eq(mp_trace_routing_begin(r, &it, &e), MP_OK);
    while (mp_trace_routing_next(it, &rec, &e) == 1) {
        cr_assert_eq(rec.node_index, n_rec % 3);
        cr_assert_eq(rec.n_rows, rows_of[rec.request_id][rec.step]);
        int32_t ids[256];
        float w[256];
        int64_t n = rec.n_rows * 2;
        cr_assert_lt(n, 256);
        cr_assert_eq(mp_trace_decode_ids(rec.expert_ids, rec.expert_ids_bytes, 1, n, ids, &e), MP_OK);
        cr_assert_eq(mp_trace_decode_weights(rec.weights, rec.weights_bytes, "f16", n, w, &e), MP_OK);
        for (int64_t row = 0; row < rec.n_rows; row++) {
            cr_assert(ids[2 * row] >= 0 && ids[2 * row] < 8 && ids[2 * row + 1] < 8);
            cr_assert_neq(ids[2 * row], ids[2 * row + 1]);
            cr_assert_leq(fabsf(w[2 * row] + w[2 * row + 1] - 1.0f), 2e-3f);
        }
        n_rec++;
    }
    mp_trace_routing_end(it);
    cr_assert_eq(n_rec, (n_steps[0] + n_steps[1]) * 3);
    cr_assert_eq(run->footer_n_routing, n_rec);
    cr_assert_eq(run->footer_n_timing, n_rec);
    int64_t n_gen_1 = q[1].n_gen_tokens;
    mp_trace_reader_close(r);

    /* results JSON beside the trace */
    FILE *f = fopen(results, "r");
    cr_assert_not_null(f, "no results file at %s", results);
    char buf[8192];
    size_t nb = fread(buf, 1, sizeof buf - 1, f);
    buf[nb] = 0;
    fclose(f);
    cJSON *j = cJSON_Parse(buf);
    cr_assert_not_null(j);
    cJSON *ps = cJSON_GetObjectItem(j, "prompts");
    cr_assert_eq(cJSON_GetArraySize(ps), 2);
    cJSON *p1 = cJSON_GetArrayItem(ps, 1);
    cr_assert_str_eq(cJSON_GetObjectItem(p1, "id")->valuestring, "moe");
    cr_assert_eq((int64_t)cJSON_GetObjectItem(p1, "n_gen_tokens")->valuedouble, n_gen_1);
    cJSON_Delete(j);
}

/* The run's config_json records every knob the run had (base/knobs.h) and which the environment
 * set: a trace says how it ran. */
Test(cmd_collect, run_config_records_the_knobs)
{
    write_prompts("\"Hello world\"\n");
    char args[2048], err[4096], trace[300];
    snprintf(trace, sizeof trace, "%s/knobs.db", tmpdir);
    snprintf(args, sizeof args, "collect -m '%s' --prompts '%s' --trace '%s' --max-tokens 3 --no-progress", model,
             prompts, trace);
    for (int i = 0; i < mp_knob_count(); i++)
        unsetenv(mp_knob_at(i)->name);
    cr_assert_eq(setenv("MP_MOE_PIPE_UNITS", "5", 1), 0);
    cr_assert_eq(setenv("MP_GPU_HOST_EXPERTS", "copy", 1), 0);
    const int rc = moeplan(args, err, sizeof err);
    unsetenv("MP_MOE_PIPE_UNITS");
    unsetenv("MP_GPU_HOST_EXPERTS");
    cr_assert_eq(rc, 0, "%s", err);
    mp_trace_reader *r;
    mp_error e;
    cr_assert_eq(mp_trace_reader_open(trace, &r, &e), MP_OK, "%s", e.msg);
    cJSON *cfg = cJSON_Parse(mp_trace_reader_run(r)->config_json);
    cr_assert_not_null(cfg);
    const cJSON *knobs = cJSON_GetObjectItemCaseSensitive(cfg, "knobs");
    cr_assert(cJSON_IsObject(knobs), "%s", mp_trace_reader_run(r)->config_json);
    cr_assert_eq(cJSON_GetArraySize(knobs), mp_knob_count());
    mp_knobs want;
    mp_knobs_defaults(&want);
    want.moe_pipe_units = 5;
    want.gpu_host_experts = MP_GPU_HOST_COPY;
    for (int i = 0; i < mp_knob_count(); i++) {
        const cJSON *v = cJSON_GetObjectItemCaseSensitive(knobs, mp_knob_at(i)->name);
        char text[64];
        cr_assert_not_null(v, "%s not recorded", mp_knob_at(i)->name);
        if (cJSON_IsString(v))
            cr_assert_str_eq(v->valuestring, mp_knob_value_text(&want, i, text, sizeof text), "%s",
                             mp_knob_at(i)->name);
        else
            cr_assert_eq((int64_t)v->valuedouble, mp_knob_value(&want, i), "%s", mp_knob_at(i)->name);
    }
    /* the template the prompts took: the generated vocabulary has ChatML's tokens and no key */
    const cJSON *tpl = cJSON_GetObjectItemCaseSensitive(cfg, "chat_template");
    cr_assert(cJSON_IsString(tpl) && !strcmp(tpl->valuestring, "chatml"), "%s", mp_trace_reader_run(r)->config_json);
    const cJSON *set = cJSON_GetObjectItemCaseSensitive(cfg, "knobs_set");
    cr_assert_eq(cJSON_GetArraySize(set), 2);
    cr_assert_str_eq(cJSON_GetObjectItemCaseSensitive(set, "MP_MOE_PIPE_UNITS")->valuestring, "env");
    cr_assert_str_eq(cJSON_GetObjectItemCaseSensitive(set, "MP_GPU_HOST_EXPERTS")->valuestring, "env");
    cJSON_Delete(cfg);
    mp_trace_reader_close(r);
}

/* A model of another architecture collects without --raw-prompts: its prompts take the template its
 * file or vocabulary gives (mkmodel's vocabulary has ChatML's tokens), as `run` takes them, and the
 * summary says which. */
Test(cmd_collect, other_architectures_take_the_files_template)
{
    write_prompts("\"Hello world\"\n");
    char args[2048], out[8192], olmoe[300], trace[300];
    snprintf(olmoe, sizeof olmoe, "%s/olmoe.gguf", tmpdir);
    snprintf(trace, sizeof trace, "%s/olmoe.db", tmpdir);
    snprintf(args, sizeof args, "mkmodel --arch olmoe --quiet -o '%s'", olmoe);
    cr_assert_eq(moeplan(args, out, sizeof out), 0, "%s", out);
    snprintf(args, sizeof args, "collect -m '%s' --prompts '%s' --trace '%s' --max-tokens 2 --no-progress", olmoe,
             prompts, trace);
    cr_assert_eq(mp_test_moeplan(tmpdir, args, MP_TEST_MERGED, out, sizeof out), 0, "%s", out);
    cr_assert_not_null(strstr(out, "prompts: in the chatml chat template (no tokenizer.chat_template; the vocabulary "
                                   "has <|im_start|> and <|im_end|>)"), "%s", out);
    snprintf(args, sizeof args, "collect -m '%s' --prompts '%s' --trace '%s' --max-tokens 2 --no-progress "
             "--raw-prompts --force", olmoe, prompts, trace);
    cr_assert_eq(mp_test_moeplan(tmpdir, args, MP_TEST_MERGED, out, sizeof out), 0, "%s", out);
    cr_assert_not_null(strstr(out, "prompts: as they are (--raw-prompts)"), "%s", out);
}

Test(cmd_collect, sync_and_async_writers_record_identical_routing)
{
    write_prompts("[\"Hello world\", \"Routing is deterministic under greedy decoding\"]");
    char args[2048], err[4096];
    for (int sync = 0; sync < 2; sync++) {
        snprintf(args, sizeof args, "collect -m '%s' --prompts '%s' --trace '%s/%s.db' "
                 "--max-tokens 5 --no-progress --batch 8 %s", model, prompts, tmpdir,
                 sync ? "sync" : "async", sync ? "--sync-writer" : "");
        cr_assert_eq(moeplan(args, err, sizeof err), 0, "%s", err);
    }
    sqlite3 *db;
    char path[300], sql[600];
    snprintf(path, sizeof path, "%s/sync.db", tmpdir);
    cr_assert_eq(sqlite3_open(path, &db), SQLITE_OK);
    snprintf(sql, sizeof sql, "ATTACH '%s/async.db' AS b", tmpdir);
    cr_assert_eq(sqlite3_exec(db, sql, NULL, NULL, NULL), SQLITE_OK);
    sqlite3_stmt *st;
    cr_assert_eq(sqlite3_prepare_v2(db,
        "SELECT (SELECT count(*) FROM main.routing), (SELECT count(*) FROM b.routing),"
        " (SELECT count(*) FROM main.routing x JOIN b.routing y ON x.key = y.key"
        "  AND x.expert_ids = y.expert_ids AND x.weights = y.weights),"
        " (SELECT count(*) FROM main.steps WHERE phase = 'prefill')", -1, &st, NULL), SQLITE_OK,
        "%s", sqlite3_errmsg(db));
    cr_assert_eq(sqlite3_step(st), SQLITE_ROW);
    int64_t a = sqlite3_column_int64(st, 0), b = sqlite3_column_int64(st, 1),
            same = sqlite3_column_int64(st, 2), prefill_steps = sqlite3_column_int64(st, 3);
    sqlite3_finalize(st);
    sqlite3_close(db);
    cr_assert_gt(a, 0);
    cr_assert_eq(a, b);
    cr_assert_eq(same, a, "%lld of %lld routing records differ", (long long)(a - same), (long long)a);
    /* --batch 8 splits the 47-token prompt into prefill chunks: several prefill steps */
    cr_assert_gt(prefill_steps, 2);
}

/* The run row names the moeplan that wrote it: version, commit and build options, as the binary's
 * --version says; a trace whose run table lacks the commit and build columns (as traces written
 * before they existed do) still opens and validates. */
Test(cmd_collect, trace_records_the_writers_build)
{
    write_prompts("[\"Hello world\"]");
    char args[2048], err[4096], trace[300];
    snprintf(trace, sizeof trace, "%s/run.db", tmpdir);
    snprintf(args, sizeof args, "collect -m '%s' --prompts '%s' --trace '%s' --max-tokens 2 "
             "--no-progress", model, prompts, trace);
    cr_assert_eq(moeplan(args, err, sizeof err), 0, "%s", err);

    sqlite3 *db;
    sqlite3_stmt *st;
    cr_assert_eq(sqlite3_open(trace, &db), SQLITE_OK);
    cr_assert_eq(sqlite3_prepare_v2(db, "SELECT moeplan_version, moeplan_commit, moeplan_build FROM run",
                                    -1, &st, NULL), SQLITE_OK, "%s", sqlite3_errmsg(db));
    cr_assert_eq(sqlite3_step(st), SQLITE_ROW);
    cr_assert_str_eq((const char *)sqlite3_column_text(st, 0), MP_VERSION);
    cr_assert_str_eq((const char *)sqlite3_column_text(st, 1), mp_build_commit());
    cr_assert_str_eq((const char *)sqlite3_column_text(st, 2), mp_build_options());
    sqlite3_finalize(st);
    cr_assert_gt(strlen(mp_build_commit()), 0);
    cr_assert_not_null(strstr(mp_build_options(), "buildtype="), "%s", mp_build_options());

    /* the run table without the two columns: a copy of the others (ALTER TABLE DROP COLUMN
     * refuses this table's commented DDL) */
    cr_assert_eq(sqlite3_prepare_v2(db, "SELECT group_concat(name, ', ') FROM pragma_table_info('run')"
                                        " WHERE name NOT IN ('moeplan_commit', 'moeplan_build')",
                                    -1, &st, NULL), SQLITE_OK, "%s", sqlite3_errmsg(db));
    cr_assert_eq(sqlite3_step(st), SQLITE_ROW);
    char sql[1024];
    snprintf(sql, sizeof sql, "CREATE TABLE run_without AS SELECT %s FROM run; DROP TABLE run;"
             " ALTER TABLE run_without RENAME TO run", (const char *)sqlite3_column_text(st, 0));
    sqlite3_finalize(st);
    cr_assert_eq(sqlite3_exec(db, sql, NULL, NULL, NULL), SQLITE_OK, "%s", sqlite3_errmsg(db));
    cr_assert_eq(sqlite3_prepare_v2(db, "SELECT moeplan_commit FROM run", -1, &st, NULL), SQLITE_ERROR);
    sqlite3_close(db);
    mp_trace_reader *r;
    mp_error e;
    cr_assert_eq(mp_trace_reader_open(trace, &r, &e), MP_OK, "%s", e.msg);
    cr_assert_str_eq(mp_trace_reader_run(r)->moeplan_version, MP_VERSION);
    mp_trace_reader_close(r);
    snprintf(args, sizeof args, "analyze --validate-only '%s'", trace);
    cr_assert_eq(moeplan(args, err, sizeof err), 0, "%s", err);
}

/* Files in tmpdir that look like a writer's temporary ("*.tmp.*", "-wal", "-shm"). */
static int temporaries(void)
{
    char cmd[512];
    snprintf(cmd, sizeof cmd, "ls -a '%s' | grep -cE '\\.tmp\\.|-wal$|-shm$|-journal$'", tmpdir);
    FILE *p = popen(cmd, "r");
    int n = 0;
    cr_assert_eq(fscanf(p, "%d", &n), 1);
    pclose(p);
    return n;
}

static int count_lines(const char *s)
{
    int n = 0;
    for (; *s; s++)
        n += *s == '\n';
    return n;
}

Test(cmd_collect, bad_inputs_fail_before_a_trace_exists)
{
    char args[2048], err[4096], trace[300];
    snprintf(trace, sizeof trace, "%s/bad.db", tmpdir);
    write_prompts("{\"prompt\": \"a\", \"max_token\": 3}\n");
    snprintf(args, sizeof args, "collect -m '%s' --prompts '%s' --trace '%s'", model, prompts, trace);
    cr_assert_eq(moeplan(args, err, sizeof err), 1);
    cr_assert(strstr(err, "moeplan collect: error: ") && strstr(err, "line 1: unknown key"), "%s", err);
    cr_assert_neq(access(trace, F_OK), 0, "a trace was created for a bad prompt file");
    write_prompts("\"ok\"\n");
    snprintf(args, sizeof args, "collect -m '%s' --prompts '%s' --trace '%s'", prompts, prompts, trace);
    cr_assert_eq(moeplan(args, err, sizeof err), 1);
    cr_assert_neq(access(trace, F_OK), 0);
    snprintf(args, sizeof args, "collect -m '%s' --prompts '%s' --trace '%s'", model, prompts, model);
    cr_assert_eq(moeplan(args, err, sizeof err), 2);
    cr_assert(strstr(err, "the same file as the model"), "%s", err);
    snprintf(args, sizeof args, "collect -m '%s' --prompts '%s' --trace '%s' --max-tokens 9999",
             model, prompts, trace);
    cr_assert_eq(moeplan(args, err, sizeof err), 1);
    cr_assert(strstr(err, "exceed the context"), "%s", err);
    /* that failure came after the trace was created: its temporary is gone, no trace appears */
    cr_assert_neq(access(trace, F_OK), 0, "a failed run left a trace");
    cr_assert_eq(temporaries(), 0, "a failed run left a temporary");

    /* an existing trace and results file survive failing --force runs byte for byte */
    char results[320];
    snprintf(results, sizeof results, "%s/bad.results.json", tmpdir);
    FILE *f = fopen(prompts, "w"); /* 60 prompts: a trace of ~200 KB, past the cap below */
    for (int i = 0; i < 60; i++)
        fprintf(f, "\"Hello world number %d, tell me about experts\"\n", i);
    fclose(f);
    snprintf(args, sizeof args, "collect -m '%s' --prompts '%s' --trace '%s' --max-tokens 8 "
             "--no-progress", model, prompts, trace);
    cr_assert_eq(moeplan(args, err, sizeof err), 0, "%s", err);
    size_t n_trace, n_results;
    char *old_trace = mp_test_slurp_n(trace, &n_trace), *old_results = mp_test_slurp_n(results, &n_results);
    const char *failing[] = {"--max-tokens 9999", "--max-tokens 8 --trace-max-bytes 100000"};
    const char *why[] = {"exceed the context", "size limit of 100000 bytes (--trace-max-bytes)"};
    for (int i = 0; i < 2; i++) {
        snprintf(args, sizeof args, "collect -m '%s' --prompts '%s' --trace '%s' --force "
                 "--no-progress %s", model, prompts, trace, failing[i]);
        cr_assert_eq(moeplan(args, err, sizeof err), 1, "%s", err);
        cr_assert(strstr(err, why[i]), "%s", err);
        cr_assert_eq(count_lines(err), 1, "%s", err);
        size_t n1, n2;
        char *now_trace = mp_test_slurp_n(trace, &n1), *now_results = mp_test_slurp_n(results, &n2);
        cr_assert(n1 == n_trace && !memcmp(now_trace, old_trace, n1), "%s changed the trace", failing[i]);
        cr_assert(n2 == n_results && !memcmp(now_results, old_results, n2), "%s changed the results",
                  failing[i]);
        free(now_trace), free(now_results);
        cr_assert_eq(temporaries(), 0, "%s left a temporary", failing[i]);
    }
    free(old_trace), free(old_results);
}
