/* tests/unit/test_import.c — importers: the real FLAME-MoE CSV subset decoded back value by
 * value, onnxruntime logs and Strata dumps built here, and one test per malformed-input case
 * (each checks the one-line message names the place, and that no output file is left). */
#include <criterion/criterion.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "collector/import.h"
#include "collector/trace_read.h"

#include <sqlite3.h>

static char tmpdir[256], out_path[300], in_path[300];

static void setup(void)
{
    snprintf(tmpdir, sizeof tmpdir, "/tmp/mp_test_import_XXXXXX");
    cr_assert_not_null(mkdtemp(tmpdir));
    snprintf(out_path, sizeof out_path, "%s/out.db", tmpdir);
    snprintf(in_path, sizeof in_path, "%s/in", tmpdir);
}

static void teardown(void)
{
    char cmd[300];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", tmpdir);
    cr_assert_eq(system(cmd), 0);
}

TestSuite(import, .init = setup, .fini = teardown);

static void write_file(const char *path, const void *data, size_t n)
{
    FILE *f = fopen(path, "wb");
    cr_assert_not_null(f);
    cr_assert_eq(fwrite(data, 1, n, f), n);
    fclose(f);
}

static mp_status import(mp_import_format fmt, int64_t n_experts, mp_error *err)
{
    mp_import_options opt = {.format = fmt, .n_experts = n_experts,
                             .weight_format = MP_TRACE_W_F32};
    mp_import_result res;
    return mp_import_file(in_path, out_path, &opt, &res, err);
}

/* The import failed with a message containing want, and left nothing in tmpdir but the input. */
static void expect_refused(mp_import_format fmt, int64_t n_experts, const char *want)
{
    mp_error err;
    cr_assert_neq(import(fmt, n_experts, &err), MP_OK, "accepted; expected '%s'", want);
    cr_assert(strstr(err.msg, want), "message '%s' lacks '%s'", err.msg, want);
    cr_assert(strstr(err.msg, in_path), "message '%s' does not name the file", err.msg);
    cr_assert_null(strchr(err.msg, '\n'));
    cr_assert_neq(access(out_path, F_OK), 0, "an output was left behind");
    char cmd[400];
    snprintf(cmd, sizeof cmd, "test $(ls -A '%s' | wc -l) -eq 1", tmpdir);
    cr_assert_eq(system(cmd), 0, "temporary files were left in %s", tmpdir);
}

/* ---------------- CSV: the real trace ---------------- */

Test(import, real_flame_csv_round_trips_value_by_value)
{
    char fixture[512];
    const char *root = getenv("MP_SOURCE_ROOT");
    cr_assert_not_null(root, "MP_SOURCE_ROOT is not set (run through meson test)");
    snprintf(fixture, sizeof fixture, "%s/tests/fixtures/traces/flame-moe-290m-prefill-seq0-7.csv",
             root);
    mp_import_options opt = {.format = MP_IMPORT_AUTO, .weight_format = MP_TRACE_W_F32};
    mp_import_result res;
    mp_error err;
    cr_assert_eq(mp_import_file(fixture, out_path, &opt, &res, &err), MP_OK, "%s", err.msg);
    cr_assert_eq(res.format, MP_IMPORT_CSV);
    cr_assert_eq(res.n_requests, 8);
    cr_assert_eq(res.n_steps, 8);
    cr_assert_eq(res.n_nodes, 25);
    cr_assert_eq(res.n_routing, 8 * 25);
    cr_assert_eq(res.n_experts, 64);

    /* Read the CSV independently: ids[seq][pos][layer-2][k], weights likewise. */
    static int32_t ids[8][64][25][6];
    static float w[8][64][25][6];
    FILE *f = fopen(fixture, "r");
    cr_assert_not_null(f);
    char line[512];
    cr_assert_not_null(fgets(line, sizeof line, f));
    int rows = 0;
    while (fgets(line, sizeof line, f)) {
        int s, p, l, e[6];
        float x[6];
        cr_assert_eq(sscanf(line, "%d,%d,%d,%d,%d,%d,%d,%d,%d,%f,%f,%f,%f,%f,%f", &s, &p, &l, &e[0],
                            &e[1], &e[2], &e[3], &e[4], &e[5], &x[0], &x[1], &x[2], &x[3], &x[4],
                            &x[5]), 15);
        for (int i = 0; i < 6; i++) {
            ids[s][p][l - 2][i] = e[i];
            w[s][p][l - 2][i] = x[i];
        }
        rows++;
    }
    fclose(f);
    cr_assert_eq(rows, 8 * 64 * 25);

    mp_trace_reader *r;
    cr_assert_eq(mp_trace_reader_open(out_path, &r, &err), MP_OK, "%s", err.msg);
    const mp_trace_run *run = mp_trace_reader_run(r);
    cr_assert_str_eq(run->status, "complete");
    cr_assert_str_eq(run->source, "csv");
    cr_assert_str_eq(run->source_path, fixture);
    cr_assert_eq(run->footer_n_routing, 200);
    cr_assert_eq(mp_trace_reader_n_nodes(r), 25);
    cr_assert_eq(mp_trace_reader_nodes(r)[0].node_index, 2);
    cr_assert_eq(mp_trace_reader_nodes(r)[24].layer, 26);
    cr_assert_str_eq(mp_trace_reader_requests(r)[3].external_id, "3");
    mp_trace_routing_iter *it;
    cr_assert_eq(mp_trace_routing_begin(r, &it, &err), MP_OK);
    mp_trace_routing_rec rec;
    int n = 0, rc;
    int32_t got_ids[64 * 6];
    float got_w[64 * 6];
    while ((rc = mp_trace_routing_next(it, &rec, &err)) == 1) {
        cr_assert_eq(rec.step, 0);
        cr_assert_eq(rec.n_rows, 64);
        cr_assert_eq(mp_trace_decode_ids(rec.expert_ids, rec.expert_ids_bytes, 1, 64 * 6, got_ids,
                                         &err), MP_OK, "%s", err.msg);
        cr_assert_eq(mp_trace_decode_weights(rec.weights, rec.weights_bytes, "f32", 64 * 6, got_w,
                                             &err), MP_OK, "%s", err.msg);
        int l = (int)rec.node_index - 2;
        for (int p = 0; p < 64; p++)
            for (int i = 0; i < 6; i++) {
                cr_assert_eq(got_ids[p * 6 + i], ids[rec.request_id][p][l][i],
                             "seq %lld pos %d layer %d", (long long)rec.request_id, p, l + 2);
                cr_assert_eq(got_w[p * 6 + i], w[rec.request_id][p][l][i]);
            }
        n++;
    }
    cr_assert_eq(rc, 0, "%s", err.msg);
    cr_assert_eq(n, 200);
    mp_trace_routing_end(it);
    mp_trace_reader_close(r);

    /* The output now exists: a second import is refused without --force, accepted with it. */
    cr_assert_eq(mp_import_file(fixture, out_path, &opt, &res, &err), MP_ERR_IO);
    cr_assert(strstr(err.msg, "exists"), "%s", err.msg);
    opt.force = true;
    cr_assert_eq(mp_import_file(fixture, out_path, &opt, &res, &err), MP_OK, "%s", err.msg);
}

static const char csv_head[] = "seq,pos,layer,e0,e1,w0,w1\n";

static void csv_case(const char *body, int64_t n_experts, const char *want)
{
    char buf[2048];
    snprintf(buf, sizeof buf, "%s%s", csv_head, body);
    write_file(in_path, buf, strlen(buf));
    expect_refused(MP_IMPORT_CSV, n_experts, want);
}

Test(import, csv_bad_header) {
    write_file(in_path, "seq,pos,layer,e0,w0,w1\n0,0,0,1,0.5,0.5\n", 38);
    expect_refused(MP_IMPORT_CSV, 0, "line 1:");
}
Test(import, csv_non_numeric_weight) { csv_case("0,0,0,1,2,0.5,abc\n", 0, "line 2: w1 'abc' is not a finite number"); }
Test(import, csv_non_numeric_id) { csv_case("0,0,0,1,2,0.5,0.5\n0,0,1,x,2,0.5,0.5\n", 0, "line 3: e0 'x'"); }
Test(import, csv_wrong_field_count) { csv_case("0,0,0,1,2,0.5\n", 0, "line 2: expected 7 fields, got 6"); }
Test(import, csv_too_many_fields) { csv_case("0,0,0,1,2,0.5,0.5,9\n", 0, "line 2: expected 7 fields"); }
Test(import, csv_id_out_of_range) { csv_case("0,0,0,1,9,0.5,0.5\n", 8, "line 2: e1 9 outside [0, 8)"); }
Test(import, csv_negative_weight) { csv_case("0,0,0,1,2,0.5,-0.5\n", 0, "line 2: w1 -0.5 is negative"); }
Test(import, csv_repeated_expert) { csv_case("0,0,0,3,3,0.5,0.5\n", 0, "line 2: e1: expert 3 chosen twice"); }
Test(import, csv_missing_layer_at_a_position) {
    csv_case("0,0,0,1,2,0.5,0.5\n0,0,1,1,2,0.5,0.5\n0,1,0,1,2,0.5,0.5\n0,1,2,1,2,0.5,0.5\n", 0,
             "line 5: seq 0 pos 1: layer 2, expected 1");
}
/* Every step must route every node (a trace stores a step's nodes in one row): a step that
 * lacks one is refused at its first line, before anything is written. */
Test(import, csv_step_missing_a_layer) {
    csv_case("0,0,0,1,2,0.5,0.5\n0,0,1,1,2,0.5,0.5\n1,0,0,1,2,0.5,0.5\n", 0,
             "seq 1 (from line 4): a step with routing for 1 of the 2 nodes seen, expected every "
             "node in every step");
}
Test(import, csv_position_gap) {
    csv_case("0,0,0,1,2,0.5,0.5\n0,2,0,1,2,0.5,0.5\n", 0, "line 3: seq 0: pos 2, expected 1");
}
Test(import, csv_seq_reappears) {
    csv_case("0,0,0,1,2,0.5,0.5\n1,0,0,1,2,0.5,0.5\n0,0,0,1,2,0.5,0.5\n", 0,
             "request 0 appears again");
}
/* A NUL ended a field for the number parsers: "1<NUL>junk" read as 1. */
Test(import, csv_nul_byte) {
    char buf[64];
    const size_t n = (size_t)snprintf(buf, sizeof buf, "%s0,0,0,1,2,0.5,0.5x\n", csv_head);
    buf[n - 2] = '\0';
    write_file(in_path, buf, n);
    expect_refused(MP_IMPORT_CSV, 0, "line 2 (offset 43): NUL byte");
}
Test(import, csv_empty_file) {
    write_file(in_path, "", 0);
    expect_refused(MP_IMPORT_CSV, 0, "empty file");
}
Test(import, csv_header_only) {
    write_file(in_path, csv_head, strlen(csv_head));
    expect_refused(MP_IMPORT_CSV, 0, "no routing records");
}

/* Quoted fields (any of them: spreadsheet and pandas QUOTE_ALL exports), CRLF line ends and a
 * UTF-8 byte order mark read as the plain file does, and are detected as CSV. */
static char *routes_text(const char *path)
{
    sqlite3 *db;
    cr_assert_eq(sqlite3_open_v2(path, &db, SQLITE_OPEN_READONLY, NULL), SQLITE_OK);
    sqlite3_stmt *st;
    cr_assert_eq(sqlite3_prepare_v2(db, "SELECT group_concat(v, ';') FROM (SELECT request_id || ','"
                                    " || step || ',' || node_index || ',' || row || ',' || rank ||"
                                    " ',' || expert_id || ',' || weight AS v FROM route_choices"
                                    " ORDER BY request_id, step, node_index, row, rank)", -1, &st,
                                    NULL), SQLITE_OK, "%s", sqlite3_errmsg(db));
    cr_assert_eq(sqlite3_step(st), SQLITE_ROW);
    char *text = strdup((const char *)sqlite3_column_text(st, 0));
    sqlite3_finalize(st);
    sqlite3_close(db);
    return text;
}

static const char csv_plain[] = "seq,pos,layer,e0,e1,w0,w1\n0,0,0,1,2,0.5,0.25\n0,0,1,3,2,0.75,0.125\n"
                                "0,1,0,0,2,0.5,0.5\n0,1,1,1,3,0.625,0.25\n7,0,0,2,1,1,0\n7,0,1,0,3,0.5,0.5\n";

Test(import, csv_quoted_fields_crlf_and_a_byte_order_mark_read_as_the_plain_file)
{
    write_file(in_path, csv_plain, strlen(csv_plain));
    mp_error err;
    cr_assert_eq(import(MP_IMPORT_CSV, 0, &err), MP_OK, "%s", err.msg);
    char *plain = routes_text(out_path);
    unlink(out_path);
    /* every field quoted, CRLF, a BOM; and a few fields quoted the other way round */
    static const char *const variants[] = {
        "\xEF\xBB\xBF\"seq\",\"pos\",\"layer\",\"e0\",\"e1\",\"w0\",\"w1\"\r\n"
        "\"0\",\"0\",\"0\",\"1\",\"2\",\"0.5\",\"0.25\"\r\n\"0\",\"0\",\"1\",\"3\",\"2\",\"0.75\",\"0.125\"\r\n"
        "\"0\",\"1\",\"0\",\"0\",\"2\",\"0.5\",\"0.5\"\r\n\"0\",\"1\",\"1\",\"1\",\"3\",\"0.625\",\"0.25\"\r\n"
        "\"7\",\"0\",\"0\",\"2\",\"1\",\"1\",\"0\"\r\n\"7\",\"0\",\"1\",\"0\",\"3\",\"0.5\",\"0.5\"\r\n",
        "\"seq\",\"pos\",\"layer\",e0,e1,\"w0\",w1\n0,0,0,\"1\",2,0.5,\"0.25\"\n0,0,1,3,2,0.75,0.125\n"
        "0,1,0,0,2,0.5,0.5\n0,1,1,1,3,0.625,0.25\n\"7\",0,0,2,1,1,0\n7,0,1,0,3,0.5,0.5",
    };
    for (size_t i = 0; i < sizeof variants / sizeof variants[0]; i++) {
        write_file(in_path, variants[i], strlen(variants[i]));
        cr_assert_eq(import(MP_IMPORT_AUTO, 0, &err), MP_OK, "variant %zu: %s", i, err.msg);
        char *got = routes_text(out_path);
        cr_assert_str_eq(got, plain, "variant %zu", i);
        free(got);
        unlink(out_path);
    }
    free(plain);
}

/* Expert ids without router weights: every choice weighs 1/top_k, and the trace says so. */
Test(import, csv_ids_only_get_weight_one_over_top_k)
{
    static const char ids_only[] = "seq,pos,layer,e0,e1,e2\n0,0,0,1,2,3\n0,0,1,3,2,0\n0,1,0,0,2,4\n"
                                   "0,1,1,1,3,2\n";
    write_file(in_path, ids_only, strlen(ids_only));
    for (int wf = 0; wf < 2; wf++) {
        mp_import_options opt = {.format = MP_IMPORT_AUTO, .weight_format = wf ? MP_TRACE_W_F16
                                                                                : MP_TRACE_W_F32};
        mp_import_result res;
        mp_error err;
        cr_assert_eq(mp_import_file(in_path, out_path, &opt, &res, &err), MP_OK, "%s", err.msg);
        cr_assert(res.weights_uniform);
        cr_assert_eq(res.n_routing, 2);
        mp_trace_reader *r;
        cr_assert_eq(mp_trace_reader_open(out_path, &r, &err), MP_OK, "%s", err.msg);
        cr_assert(strstr(mp_trace_reader_run(r)->config_json, "\"weights\":\"uniform: the input "
                         "has no router weights, each choice was given 1/top_k\""), "%s",
                  mp_trace_reader_run(r)->config_json);
        mp_trace_routing_iter *it;
        cr_assert_eq(mp_trace_routing_begin(r, &it, &err), MP_OK);
        mp_trace_routing_rec rec;
        int32_t ids[6];
        float w[6];
        int n = 0, rc;
        while ((rc = mp_trace_routing_next(it, &rec, &err)) == 1) {
            cr_assert_eq(mp_trace_decode_ids(rec.expert_ids, rec.expert_ids_bytes, 1, 6, ids, &err),
                         MP_OK);
            cr_assert_eq(mp_trace_decode_weights(rec.weights, rec.weights_bytes, wf ? "f16" : "f32",
                                                 6, w, &err), MP_OK, "%s", err.msg);
            for (int i = 0; i < 6; i++)
                cr_assert_float_eq(w[i], 1.0f / 3.0f, wf ? 1e-3 : 0, "weight %d: %g", i, (double)w[i]);
            cr_assert_eq(ids[0], rec.node_index == 0 ? 1 : 3); /* e0 of pos 0, in router order */
            n++;
        }
        cr_assert_eq(rc, 0);
        cr_assert_eq(n, 2);
        mp_trace_routing_end(it);
        mp_trace_reader_close(r);
        unlink(out_path);
    }
    /* a file with weights does not say so */
    write_file(in_path, csv_plain, strlen(csv_plain));
    mp_import_options opt = {.format = MP_IMPORT_CSV, .weight_format = MP_TRACE_W_F32};
    mp_import_result res;
    mp_error err;
    cr_assert_eq(mp_import_file(in_path, out_path, &opt, &res, &err), MP_OK, "%s", err.msg);
    cr_assert(!res.weights_uniform);
}

static void raw_case(const char *text, const char *want)
{
    write_file(in_path, text, strlen(text));
    expect_refused(MP_IMPORT_CSV, 0, want);
}

Test(import, csv_header_forms_refused)
{
    raw_case("seq,pos,layer,e0,e1,w0\n0,0,0,1,2,0.5\n",
             "line 1: 1 columns after e0..e1, expected w0..w1 (as many w as e) or none");
    raw_case("seq,pos,layer,e0,x\n0,0,0,1,2\n", "line 1: column 5 is 'x', expected 'w0'");
    raw_case("seq,pos,layer,w0\n0,0,0,1\n", "line 1: column 4 is 'w0', expected 'e0'");
    raw_case("\"seq\",\"pos\",\"layer,e0,e1\n", "line 1: column 3: a quoted field without its "
             "closing quote");
    raw_case("seq,pos\n", "line 1: expected the header seq,pos,layer,e0..,w0..");
}

Test(import, csv_quotes_and_ids_only_rows_refused_with_their_place)
{
    raw_case("seq,pos,layer,e0,e1\n0,0,0,1,2\n0,0,1,\"3,2\n", "line 3: column 4: a quoted field "
             "without its closing quote, or text after it");
    raw_case("seq,pos,layer,e0,e1\n0,0,0,\"1\"2,2\n", "line 2: column 4: a quoted field");
    raw_case("seq,pos,layer,e0,e1\n0,0,0,1,2,0.5,0.5\n", "line 2: expected 5 fields, got more "
             "than 5");
    raw_case("seq,pos,layer,e0,e1\n0,0,0,\"1\"\"\",2\n", "line 2: e0 '1\"\"' is not an expert id");
    raw_case("seq,pos,layer,e0,e1\n0,0,0,\"\",2\n", "line 2: e0 '' is not an expert id");
}

/* ---------------- onnxruntime logs ---------------- */

#define REC(req, node, ids, w, rows) \
    "moe_routing {\"request_id\": " #req ", \"node_name\": \"n" #node "\", \"node_index\": " #node \
    ", \"node_type\": \"QMoE\", \"expert_ids\": " ids ", \"router_weights\": " w \
    ", \"num_rows\": " #rows ", \"top_k\": 2, \"execution_device_id\": 0}\n"

static const char ort_good[] =
    "INFO loading model\n"
    "[qmoe_prompt_runner] 1/2 prompt_start\n"
    REC(7, 0, "[1,2,3,4]", "[0.5,0.5,0.75,0.25]", 2)
    REC(7, 1, "[[1,2],[3,4]]", "[[0.5,0.5],[0.75,0.25]]", 2)
    REC(7, 0, "[5,0]", "[0.875,0.125]", 1)
    REC(7, 1, "[5,1]", "[0.875,0.125]", 1)
    "[qmoe_prompt_runner] 1/2 prompt_end\n"
    "[qmoe_prompt_runner] 2/2 prompt_start\n"
    REC(9, 0, "[3,2]", "[0.5,0.5]", 1)
    REC(9, 1, "[3,2]", "[0.5,0.5]", 1)
    "[qmoe_prompt_runner] 2/2 prompt_end\n"
    "moe_routing_complete {\"prompts\": 2, \"prompt_runs\": 2, \"routing_records\": 6}\n";

Test(import, ort_log_requests_steps_and_values)
{
    write_file(in_path, ort_good, strlen(ort_good));
    mp_error err;
    cr_assert_eq(import(MP_IMPORT_AUTO, 8, &err), MP_OK, "%s", err.msg);
    mp_trace_reader *r;
    cr_assert_eq(mp_trace_reader_open(out_path, &r, &err), MP_OK, "%s", err.msg);
    cr_assert_str_eq(mp_trace_reader_run(r)->source, "onnxruntime");
    cr_assert_eq(mp_trace_reader_run(r)->n_experts, 8);
    cr_assert_eq(mp_trace_reader_n_requests(r), 2);
    const mp_trace_request_info *q = mp_trace_reader_requests(r);
    cr_assert_str_eq(q[0].external_id, "7");
    cr_assert_eq(q[0].n_prompt_tokens, 2);
    cr_assert_eq(q[0].n_gen_tokens, 1);
    cr_assert_str_eq(q[1].external_id, "9");
    mp_trace_step_iter *si;
    mp_trace_step_rec s;
    cr_assert_eq(mp_trace_steps_begin(r, &si, &err), MP_OK);
    const char *phases[3] = {"prefill", "decode", "prefill"};
    const int64_t rows[3] = {2, 1, 1}, pos[3] = {0, 2, 0};
    for (int i = 0; i < 3; i++) {
        cr_assert_eq(mp_trace_steps_next(si, &s, &err), 1);
        cr_assert_str_eq(s.phase, phases[i]);
        cr_assert_eq(s.n_rows, rows[i]);
        cr_assert_eq(s.pos, pos[i]);
    }
    cr_assert_eq(mp_trace_steps_next(si, &s, &err), 0);
    mp_trace_steps_end(si);
    mp_trace_routing_iter *it;
    mp_trace_routing_rec rec;
    cr_assert_eq(mp_trace_routing_begin(r, &it, &err), MP_OK);
    cr_assert_eq(mp_trace_routing_next(it, &rec, &err), 1);
    cr_assert_eq(mp_trace_routing_next(it, &rec, &err), 1); /* node 1, nested arrays */
    int32_t ids[4];
    float w[4];
    cr_assert_eq(mp_trace_decode_ids(rec.expert_ids, rec.expert_ids_bytes, 1, 4, ids, &err), MP_OK);
    cr_assert_eq(mp_trace_decode_weights(rec.weights, rec.weights_bytes, "f32", 4, w, &err), MP_OK);
    cr_assert(ids[0] == 1 && ids[1] == 2 && ids[2] == 3 && ids[3] == 4);
    cr_assert(w[2] == 0.75f && w[3] == 0.25f);
    mp_trace_routing_end(it);
    mp_trace_reader_close(r);
}

static void ort_case(const char *from, const char *to, int64_t n_experts, const char *want)
{
    /* ort_good with its first occurrence of `from` replaced by `to` */
    char buf[8192];
    const char *p = strstr(ort_good, from);
    cr_assert_not_null(p, "fixture lacks '%s'", from);
    snprintf(buf, sizeof buf, "%.*s%s%s", (int)(p - ort_good), ort_good, to, p + strlen(from));
    write_file(in_path, buf, strlen(buf));
    expect_refused(MP_IMPORT_ORT_LOG, n_experts, want);
}

Test(import, ort_truncation_marker_is_refused) {
    ort_case("moe_routing_complete", "moe_routing_truncated {\"dropped\": 3}\nmoe_routing_complete",
             8, "line 12: moe_routing_truncated");
}
Test(import, ort_bad_json) { ort_case("\"top_k\": 2, \"exec", "\"top_k\": 2,, \"exec", 8, "line 3: moe_routing: expected a JSON object"); }
Test(import, ort_repeated_key) { ort_case("\"top_k\": 2,", "\"top_k\": 2, \"top_k\": 3,", 8, "line 3: moe_routing: key \"top_k\" repeated"); }
Test(import, ort_text_after_the_record) { ort_case("\"execution_device_id\": 0}", "\"execution_device_id\": 0} {}", 8, "line 3: moe_routing: expected a JSON object and nothing after it"); }
Test(import, ort_wrong_id_count) { ort_case("[1,2,3,4]", "[1,2,3]", 8, "line 3: moe_routing: \"expert_ids\": expected 4 integers"); }
Test(import, ort_wrong_weight_count) { ort_case("[0.5,0.5,0.75,0.25]", "[0.5,0.5,0.75]", 8, "line 3: moe_routing: \"router_weights\": expected 4"); }
Test(import, ort_id_out_of_range) { ort_case("[5,0]", "[8,0]", 8, "line 5: row 0: expert id 8 outside [0, 8)"); }
Test(import, ort_non_integer_id) { ort_case("[5,0]", "[5.5,0]", 8, "line 5"); }
Test(import, ort_missing_field) { ort_case("\"node_index\": 1,", "", 8, "line 4: moe_routing: expected integer \"node_index\""); }
Test(import, ort_rows_disagree_in_a_step) { ort_case("[[1,2],[3,4]]", "[1,2]", 8, "line 4"); }
Test(import, ort_missing_footer) { ort_case("moe_routing_complete", "INFO done", 8, "without a moe_routing_complete footer"); }
Test(import, ort_footer_count_mismatch) { ort_case("\"routing_records\": 6", "\"routing_records\": 7", 8, "footer says 7 routing records, the log holds 6"); }
Test(import, ort_footer_prompt_runs_mismatch) { ort_case("\"prompt_runs\": 2", "\"prompt_runs\": 3", 8, "footer says 3 prompt runs"); }
Test(import, ort_unbalanced_markers) { ort_case("[qmoe_prompt_runner] 1/2 prompt_end\n", "", 8, "prompt_start while a prompt is open"); }
Test(import, ort_node_identity_changes) { ort_case("\"n1\", \"node_index\": 1", "\"other\", \"node_index\": 1", 8, "line 6: node 1 is 'n1' (QMoE, top-2) here but 'other'"); }
Test(import, ort_step_missing_a_node) {
    /* request 7's decode step routes node 0 twice and node 1 never: two one-node steps */
    ort_case("\"n1\", \"node_index\": 1, \"node_type\": \"QMoE\", \"expert_ids\": [5,1]",
             "\"n0\", \"node_index\": 0, \"node_type\": \"QMoE\", \"expert_ids\": [5,1]", 8,
             "line 5: a step with routing for 1 of the 2 nodes seen, expected every node");
}
Test(import, ort_request_reappears) {
    ort_case("moe_routing_complete {\"prompts\": 2, \"prompt_runs\": 2, \"routing_records\": 6}",
             REC(7, 0, "[5,0]", "[0.875,0.125]", 1)
             "moe_routing_complete {\"prompts\": 2, \"prompt_runs\": 2, \"routing_records\": 7}",
             8, "request 7 appears again");
}
Test(import, ort_routing_after_footer) {
    char buf[8192];
    snprintf(buf, sizeof buf, "%s%s", ort_good, REC(9, 0, "[3,2]", "[0.5,0.5]", 1));
    write_file(in_path, buf, strlen(buf));
    expect_refused(MP_IMPORT_ORT_LOG, 8, "line 13: routing after the moe_routing_complete footer");
}

/* ---------------- Strata binary ---------------- */

static size_t put_rec(uint8_t *p, int32_t layer, int32_t k, const int32_t *ids, const float *w)
{
    size_t o = 0;
    int32_t head[2] = {layer, k};
    for (int i = 0; i < 2; i++, o += 4)
        for (int b = 0; b < 4; b++)
            p[o + b] = (uint8_t)((uint32_t)head[i] >> (8 * b));
    for (int i = 0; i < k; i++, o += 4)
        for (int b = 0; b < 4; b++)
            p[o + b] = (uint8_t)((uint32_t)ids[i] >> (8 * b));
    for (int i = 0; i < k; i++, o += 4) {
        uint32_t x;
        memcpy(&x, &w[i], 4);
        for (int b = 0; b < 4; b++)
            p[o + b] = (uint8_t)(x >> (8 * b));
    }
    return o;
}

static size_t strata_file(uint8_t *buf)
{
    size_t n = 0;
    int32_t ids[2][2] = {{1, 2}, {3, 0}};
    float w[2] = {0.625f, 0.375f};
    for (int tok = 0; tok < 3; tok++)
        for (int layer = 0; layer < 2; layer++)
            n += put_rec(buf + n, layer, 2, ids[(tok + layer) % 2], w);
    return n;
}

Test(import, strata_tokens_become_steps)
{
    uint8_t buf[1024];
    size_t n = strata_file(buf);
    write_file(in_path, buf, n);
    mp_error err;
    cr_assert_eq(import(MP_IMPORT_STRATA, 0, &err), MP_OK, "%s", err.msg);
    mp_trace_reader *r;
    cr_assert_eq(mp_trace_reader_open(out_path, &r, &err), MP_OK, "%s", err.msg);
    cr_assert_str_eq(mp_trace_reader_run(r)->source, "strata");
    cr_assert_eq(mp_trace_reader_run(r)->n_experts, 4); /* inferred: largest id 3 */
    cr_assert_eq(mp_trace_reader_run(r)->footer_n_steps, 3);
    cr_assert_eq(mp_trace_reader_run(r)->footer_n_routing, 6);
    mp_trace_routing_iter *it;
    mp_trace_routing_rec rec;
    cr_assert_eq(mp_trace_routing_begin(r, &it, &err), MP_OK);
    for (int i = 0; i < 6; i++) {
        cr_assert_eq(mp_trace_routing_next(it, &rec, &err), 1);
        cr_assert_eq(rec.step, i / 2);
        cr_assert_eq(rec.node_index, i % 2);
        int32_t ids[2];
        float w[2];
        cr_assert_eq(mp_trace_decode_ids(rec.expert_ids, rec.expert_ids_bytes, 1, 2, ids, &err), MP_OK);
        cr_assert_eq(mp_trace_decode_weights(rec.weights, rec.weights_bytes, "f32", 2, w, &err), MP_OK);
        cr_assert_eq(ids[0], ((i / 2 + i % 2) % 2) ? 3 : 1);
        cr_assert_eq(w[0], 0.625f);
    }
    cr_assert_eq(mp_trace_routing_next(it, &rec, &err), 0);
    mp_trace_routing_end(it);
    mp_trace_reader_close(r);
}

Test(import, strata_record_cut_short_reports_offset)
{
    uint8_t buf[1024];
    size_t n = strata_file(buf);
    write_file(in_path, buf, n - 3); /* the last record (24 bytes at offset 120) loses 3 bytes */
    expect_refused(MP_IMPORT_STRATA, 0, "record 5 at offset 120: record cut short: 13 bytes left, expected 16");
}

Test(import, strata_header_cut_short)
{
    uint8_t buf[1024];
    size_t n = strata_file(buf);
    memset(buf + n, 1, 5); /* 5 stray bytes after the last record */
    write_file(in_path, buf, n + 5);
    expect_refused(MP_IMPORT_STRATA, 0, "record 6 at offset 144: record cut short: 5 bytes left");
}

Test(import, strata_bad_k_and_layer)
{
    uint8_t buf[1024];
    size_t n = strata_file(buf);
    buf[24 + 4] = 0;  /* record 1: k = 0 */
    write_file(in_path, buf, n);
    expect_refused(MP_IMPORT_STRATA, 0, "record 1 at offset 24: k = 0");
    n = strata_file(buf);
    buf[48 + 3] = 0x80; /* record 2: negative layer */
    write_file(in_path, buf, n);
    expect_refused(MP_IMPORT_STRATA, 0, "record 2 at offset 48: layer");
}

Test(import, strata_nan_weight)
{
    uint8_t buf[1024];
    size_t n = strata_file(buf);
    uint32_t nan_bits = 0x7fc00000;
    memcpy(buf + 24 + 16, &nan_bits, 4); /* record 1, weight 0 */
    write_file(in_path, buf, n);
    expect_refused(MP_IMPORT_STRATA, 0, "record 1 at offset 24: row 0: weight nan");
}

/* ---------------- paths ---------------- */

Test(import, output_equal_to_input_is_refused)
{
    write_file(in_path, ort_good, strlen(ort_good));
    mp_import_options opt = {.format = MP_IMPORT_AUTO};
    mp_import_result res;
    mp_error err;
    cr_assert_eq(mp_import_file(in_path, in_path, &opt, &res, &err), MP_ERR_ARG);
    cr_assert(strstr(err.msg, "the same file as the input"), "%s", err.msg);
}

Test(import, missing_input_and_unwritable_output)
{
    mp_import_options opt = {.format = MP_IMPORT_AUTO};
    mp_import_result res;
    mp_error err;
    cr_assert_eq(mp_import_file(in_path, out_path, &opt, &res, &err), MP_ERR_IO);
    cr_assert(strstr(err.msg, in_path), "%s", err.msg);
    write_file(in_path, ort_good, strlen(ort_good));
    cr_assert_eq(mp_import_file(in_path, "/nonexistent-dir/x.db", &opt, &res, &err), MP_ERR_IO);
    cr_assert(strstr(err.msg, "/nonexistent-dir/x.db"), "%s", err.msg);
}
