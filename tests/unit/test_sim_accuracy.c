/* tests/unit/test_sim_accuracy.c — bench/sim_accuracy.sh end to end on the tiny preset.
 *
 * The script is run as a user runs it (PRESET=tiny, the H200 costs measured for that preset, one
 * prompt, two budgets × two policies, the CPU executor) with the built moeplan. Checked: the JSON report has one row
 * per (budget, policy) in order, each comparing the same placement (resident experts equal in the
 * simulation and the run), the bench replayed the whole trace once per run (the replay summary's
 * rows are 2 × the trace's rows, 1 wrap, with REPS=1), positive predicted and measured ms/token
 * with the error computed from them, and the executor that ran ("cpu" here, which the markdown
 * table must flag). Failures: a budget below the runtime's fixed GPU memory stops the script with
 * one "sim_accuracy: error: simulate ..." line and no report; an online policy is refused up
 * front. Speeds are never compared against a number. */
#include <cjson/cJSON.h>
#include <criterion/criterion.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>

#include <unistd.h>

#include "tests/unit/cli_util.h"

static char tmpdir[256];
static const char *root;

static void setup(void)
{
    snprintf(tmpdir, sizeof tmpdir, "/tmp/mp_test_sim_accuracy_XXXXXX");
    cr_assert_not_null(mkdtemp(tmpdir));
    root = getenv("MP_SOURCE_ROOT");
    cr_assert(root, "MP_SOURCE_ROOT is not set (run through meson test)");
}

static void teardown(void)
{
    char cmd[512];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", tmpdir);
    cr_assert_eq(system(cmd), 0);
}

TestSuite(sim_accuracy, .init = setup, .fini = teardown);

/* The script with env (shell assignments), as cli_util.h runs bench scripts; stderr into err. */
static int script(const char *env, char *err, size_t cap)
{
    return mp_test_bench_script(tmpdir, "sim_accuracy.sh", env, err, cap);
}


Test(sim_accuracy, tiny_preset_end_to_end, .timeout = 600)
{
    char env[1024], err[16384], path[512];
    snprintf(env, sizeof env, "PRESET=tiny COSTS='%s/examples/costs-h200-tiny.json' EXECUTOR=cpu "
             "BUDGETS='+2MiB +4MiB' POLICIES='plan static-topn' NPROMPTS=1 REPS=1 ROUNDS=2", root);
    cr_assert_eq(script(env, err, sizeof err), 0, "%s", err);
    snprintf(path, sizeof path, "%s/out/sim-accuracy.json", tmpdir);
    char *text = mp_test_slurp(path);
    cJSON *doc = cJSON_Parse(text);
    cr_assert_not_null(doc, "not JSON: %s", text);
    cr_assert_str_eq(mp_test_json_str(doc, "format"), "moeplan-sim-accuracy");
    const double T = mp_test_json_num(doc, "trace_rows_per_layer");
    cr_assert_gt(T, 1);
    cr_assert_gt(mp_test_json_num(doc, "gpu_fixed_bytes"), 0);
    cr_assert_eq(mp_test_json_num(doc, "rounds"), 2);
    const cJSON *rows = cJSON_GetObjectItemCaseSensitive(doc, "rows");
    cr_assert_eq(cJSON_GetArraySize(rows), 4);
    const char *want[4][2] = {{"+2MiB", "plan"}, {"+2MiB", "static-topn"}, {"+4MiB", "plan"},
                              {"+4MiB", "static-topn"}};
    char summary[256];
    /* each bench run (warm-up and repetition) decodes the trace's T rows once, from its first */
    snprintf(summary, sizeof summary, ": %.0f rows per layer, 0 wrap(s)", 2 * T);
    for (int i = 0; i < 4; i++) {
        const cJSON *r = cJSON_GetArrayItem(rows, i);
        cr_assert_str_eq(mp_test_json_str(r, "budget"), want[i][0]);
        cr_assert_str_eq(mp_test_json_str(r, "policy"), want[i][1]);
        cr_assert_eq(mp_test_json_num(r, "budget_bytes"),
                     mp_test_json_num(doc, "gpu_fixed_bytes") + (i < 2 ? 2 : 4) * 1048576.0);
        cr_assert_eq(mp_test_json_num(r, "resident_simulated"), mp_test_json_num(r, "resident_measured"), "row %d", i);
        cr_assert_leq(mp_test_json_num(r, "run_gpu_bytes"), mp_test_json_num(r, "budget_bytes"), "row %d", i);
        const double pred = mp_test_json_num(r, "predicted_ms_per_token");
        const double meas = mp_test_json_num(r, "measured_ms_per_token");
        cr_assert(pred > 0 && meas > 0, "row %d: %g / %g", i, pred, meas);
        cr_assert_float_eq(mp_test_json_num(r, "error_pct"), 100.0 * (pred - meas) / meas, 1e-9 * fabs(pred + meas));
        cr_assert_str_eq(mp_test_json_str(r, "executor"), "cpu");
        cr_assert(strstr(mp_test_json_str(r, "route_replay_summary"), summary) != NULL, "row %d: %s, want %s", i,
                  mp_test_json_str(r, "route_replay_summary"), summary);
        cr_assert(strstr(mp_test_json_str(r, "placement"), "profile ") == mp_test_json_str(r, "placement"), "%s",
                  mp_test_json_str(r, "placement"));
        /* two rounds, one bench file each; measured is the median of the pooled samples (one per
         * round: their mean), and each round's own median is kept */
        const cJSON *files = cJSON_GetObjectItemCaseSensitive(r, "bench_rounds");
        const cJSON *samples = cJSON_GetObjectItemCaseSensitive(r, "measured_tok_s_samples");
        const cJSON *per = cJSON_GetObjectItemCaseSensitive(r, "measured_ms_per_token_rounds");
        cr_assert_eq(cJSON_GetArraySize(files), 2, "row %d", i);
        cr_assert(strstr(cJSON_GetArrayItem(files, 1)->valuestring, ".r2.json") != NULL, "%s",
                  cJSON_GetArrayItem(files, 1)->valuestring);
        cr_assert_eq(cJSON_GetArraySize(samples), 2, "row %d", i);
        cr_assert_eq(cJSON_GetArraySize(per), 2, "row %d", i);
        const double s0 = cJSON_GetArrayItem(samples, 0)->valuedouble, s1 = cJSON_GetArrayItem(samples, 1)->valuedouble;
        cr_assert_float_eq(meas, 2000.0 / (s0 + s1), 1e-9 * meas, "row %d: %g from samples %g, %g", i, meas, s0, s1);
        const double r0 = cJSON_GetArrayItem(per, 0)->valuedouble, r1 = cJSON_GetArrayItem(per, 1)->valuedouble;
        cr_assert_float_eq(mp_test_json_num(r, "round_spread_pct"), 100.0 * fabs(r0 - r1) / meas, 1e-9 * 100,
                           "row %d", i);
    }
    /* a larger budget never holds fewer experts for the same policy */
    cr_assert_geq(mp_test_json_num(cJSON_GetArrayItem(rows, 3), "resident_simulated"),
                  mp_test_json_num(cJSON_GetArrayItem(rows, 1), "resident_simulated"));
    cJSON_Delete(doc);
    free(text);
    snprintf(path, sizeof path, "%s/out/sim-accuracy.md", tmpdir);
    text = mp_test_slurp(path);
    cr_assert(strstr(text, "**Measured with the CPU executor") != NULL, "%s", text);
    cr_assert(strstr(text, "| +4MiB | static-topn | ") != NULL, "%s", text);
    /* the CPU executor makes no round trips: its rows' round-trip columns are zeros */
    cr_assert(strstr(text, " | cpu | 0.0 | 0.0 | 0.0 | ") != NULL, "%s", text);
    free(text);
    /* the accuracy matrix's table reads these results and simulates each row again at its run's
     * levels (with the cost file beside them, as accuracy_matrix.sh keeps it): every row and the
     * re-simulated columns, into matrix.md */
    char cmd[2048];
    snprintf(cmd, sizeof cmd, "cp '%s/examples/costs-h200-tiny.json' '%s/out/costs.json' && python3 '%s/bench/"
             "accuracy_table.py' --resim '%s' '%s' out > '%s/table.txt' 2>&1", root, tmpdir, root,
             getenv("MP_MOEPLAN"), tmpdir, tmpdir);
    const int rc = system(cmd);
    snprintf(path, sizeof path, "%s/table.txt", tmpdir);
    text = mp_test_slurp(path);
    cr_assert_eq(rc, 0, "%s", text);
    cr_assert(strstr(text, "| predicted at the run's GB/s | error % | predicted at the run's CPU level | error % |"),
              "%s", text);
    cr_assert(strstr(text, "| out | +2MiB | plan | ") && strstr(text, "| out | +4MiB | static-topn | "), "%s", text);
    cr_assert(strstr(text, "4 rows; "), "%s", text);
    free(text);
    snprintf(path, sizeof path, "%s/matrix.md", tmpdir);
    cr_assert_eq(access(path, R_OK), 0, "no %s", path);
}

Test(sim_accuracy, a_failing_step_stops_with_one_line_and_no_report, .timeout = 600)
{
    char env[1024], err[16384], path[512];
    struct stat sb;
    /* 1 MiB is below the tiny model's weights + KV cache + scratch */
    snprintf(env, sizeof env, "PRESET=tiny COSTS='%s/examples/costs-h200-tiny.json' EXECUTOR=cpu "
             "BUDGETS=1MiB POLICIES=plan NPROMPTS=1", root);
    cr_assert_eq(script(env, err, sizeof err), 1, "%s", err);
    const char *e = strstr(err, "sim_accuracy: error: simulate 1MiB-plan failed");
    cr_assert_not_null(e, "%s", err);
    cr_assert(strstr(e, "smaller than what the runtime holds besides experts") != NULL, "%s", err);
    cr_assert_null(strchr(e, '\n') ? strchr(strchr(e, '\n') + 1, '\n') : NULL, "more than one "
                   "error line: %s", e);
    snprintf(path, sizeof path, "%s/out/sim-accuracy.md", tmpdir);
    cr_assert_neq(stat(path, &sb), 0, "a failed run wrote %s", path);
    cr_assert_eq(script("ROUNDS=0", err, sizeof err), 1, "%s", err);
    cr_assert(strstr(err, "sim_accuracy: error: ROUNDS '0': expected a positive integer") != NULL, "%s", err);
    /* an online policy has no profile: refused before any work */
    cr_assert_eq(script("POLICIES='plan lru'", err, sizeof err), 1, "%s", err);
    cr_assert(strstr(err, "sim_accuracy: error: POLICIES: 'lru' is not a static policy") != NULL,
              "%s", err);
}
