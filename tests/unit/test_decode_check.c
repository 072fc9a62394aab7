/* tests/unit/test_decode_check.c — bench/decode_check.sh end to end on the tiny preset.
 *
 * The script is run as a user runs it (PRESET=tiny, H200 costs measured for that preset before the
 * context curve and the grid's pool, tests/fixtures/costs/tiny-before-curve.json, the CPU executor,
 * tg 3 and 7, one repetition) with the built moeplan. Checked: the JSON report has a
 * row per configuration and test, in order; each row's keys and model are the cost file's numbers
 * put together here independently (the non-MoE point moved by its per-key term to the row's mean
 * keys, plus each layer's charge: the GPU experts' concurrent point at top_k for resident layers,
 * the grid's far-off point of c = 0 or c = top_k for hybrid ones); bench ran the placement each
 * configuration names (the grid's pool on every layer, or on the first layer only, every other
 * layer resident); measured times are positive. With a cost file of the measured context curve,
 * the grid's pool and the once of hybrid steps, the script's model is the simulator's: the
 * non-MoE time of each step through mp_costs_decode_non_moe_ns (the script keeps a copy of it in
 * Python), the once charged as sim_hybrid_layer_ns charges it. An unknown configuration, and real
 * routing without a trace, are refused up front in one line. Speeds are never compared against a
 * number. */
#include <cjson/cJSON.h>
#include <criterion/criterion.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>

#include "runtime/costs.h"
#include "tests/unit/cli_util.h"

static char tmpdir[256];
static const char *root;

static void setup(void)
{
    snprintf(tmpdir, sizeof tmpdir, "/tmp/mp_test_decode_check_XXXXXX");
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

TestSuite(decode_check, .init = setup, .fini = teardown);

/* The script with env (shell assignments), as cli_util.h runs bench scripts; stderr into err. */
static int script(const char *env, char *err, size_t cap)
{
    return mp_test_bench_script(tmpdir, "decode_check.sh", env, err, cap);
}


/* The cost file's pieces of the model, read here. */
typedef struct costs_parts {
    double nm_ns, nm_keys, per_key_ns, conc_ns, off0_ns, offk_ns;
} costs_parts;

static costs_parts parts_of(const char *path, int top_k)
{
    char *text = mp_test_slurp(path);
    cJSON *c = cJSON_Parse(text);
    cr_assert_not_null(c);
    costs_parts p = {0};
    const cJSON *e;
    cJSON_ArrayForEach(e, cJSON_GetObjectItemCaseSensitive(c, "non_moe"))
        if (mp_test_json_num(e, "rows") == 1)
            p.nm_ns = mp_test_json_num(e, "median_ns");
    const cJSON *ctx = cJSON_GetObjectItemCaseSensitive(c, "non_moe_context");
    if (cJSON_GetObjectItemCaseSensitive(ctx, "per_key_ns")) { /* the linear term of an older file */
        p.nm_keys = mp_test_json_num(ctx, "keys");
        p.per_key_ns = mp_test_json_num(ctx, "per_key_ns");
    }
    const cJSON *conc = cJSON_GetObjectItemCaseSensitive(cJSON_GetArrayItem(cJSON_GetObjectItemCaseSensitive(c, "gpu_expert"), 0),
                                                         "concurrent");
    cJSON_ArrayForEach(e, conc)
        if (mp_test_json_num(e, "experts") == top_k)
            p.conc_ns = mp_test_json_num(e, "median_ns");
    cJSON_ArrayForEach(e, cJSON_GetObjectItemCaseSensitive(cJSON_GetObjectItemCaseSensitive(c, "decode_layers"), "points"))
        if (cJSON_IsFalse(cJSON_GetObjectItemCaseSensitive(e, "far_on"))) {
            if (mp_test_json_num(e, "cold") == 0)
                p.off0_ns = mp_test_json_num(e, "median_ns");
            if (mp_test_json_num(e, "cold") == top_k)
                p.offk_ns = mp_test_json_num(e, "median_ns");
        }
    cr_assert(p.nm_ns > 0 && p.conc_ns > 0 && p.off0_ns > 0 && p.offk_ns > 0, "the tiny cost file lacks a part");
    cJSON_Delete(c);
    free(text);
    return p;
}

Test(decode_check, tiny_preset_end_to_end, .timeout = 600)
{
    char env[1024], err[16384], path[512];
    snprintf(env, sizeof env, "PRESET=tiny COSTS='%s/tests/fixtures/costs/tiny-before-curve.json' EXECUTOR=cpu N_SHORT=3 "
             "N_LONG=7 REPS=1 THREADS=1 CONFIGS='gpu-router c0-grid cK-first'", root);
    cr_assert_eq(script(env, err, sizeof err), 0, "%s", err);
    snprintf(path, sizeof path, "%s/out/decode-check.json", tmpdir);
    char *text = mp_test_slurp(path);
    cJSON *doc = cJSON_Parse(text);
    cr_assert_not_null(doc, "not JSON: %s", text);
    cr_assert_str_eq(mp_test_json_str(doc, "format"), "moeplan-decode-check");
    const int L = (int)mp_test_json_num(doc, "layers"), K = (int)mp_test_json_num(doc, "top_k");
    cr_assert(L == 4 && K == 4, "the tiny preset is 4 layers of top-4: %d, %d", L, K);
    cr_assert_eq(mp_test_json_num(doc, "grid_pool"), 4); /* min(top_k, 16 - top_k) */
    snprintf(path, sizeof path, "%s/tests/fixtures/costs/tiny-before-curve.json", root);
    const costs_parts p = parts_of(path, K);
    const cJSON *rows = cJSON_GetObjectItemCaseSensitive(doc, "rows");
    cr_assert_eq(cJSON_GetArraySize(rows), 5);
    const struct {
        const char *cfg;
        int n;
        double moe_ns;
    } want[5] = {{"gpu-router", 3, L * p.conc_ns},
                 {"gpu-router", 7, L * p.conc_ns},
                 {"c0-grid", 3, L * p.off0_ns},
                 {"c0-grid", 7, L * p.off0_ns},
                 {"cK-first", 7, (L - 1) * p.conc_ns + p.offk_ns}};
    for (int i = 0; i < 5; i++) {
        const cJSON *r = cJSON_GetArrayItem(rows, i);
        cr_assert_str_eq(mp_test_json_str(r, "configuration"), want[i].cfg);
        cr_assert_eq(mp_test_json_num(r, "n_gen"), want[i].n);
        const double keys = (want[i].n + 3) / 2.0; /* positions 1 .. n attend 2 .. n + 1 keys */
        cr_assert_float_eq(mp_test_json_num(r, "keys"), keys, 1e-12);
        const double model_ms = (p.nm_ns + p.per_key_ns * (keys - p.nm_keys) + want[i].moe_ns) / 1e6;
        cr_assert_float_eq(mp_test_json_num(r, "model_ms_per_token"), model_ms, 1e-9, "row %d: %g, want %g", i,
                           mp_test_json_num(r, "model_ms_per_token"), model_ms);
        cr_assert_gt(mp_test_json_num(r, "measured_ms_per_token"), 0, "row %d", i);
    }
    cJSON_Delete(doc);
    free(text);
    /* the placements bench ran: the grid's pool everywhere, or on the first layer only */
    snprintf(path, sizeof path, "%s/out/bench/c0-grid-1.json", tmpdir);
    text = mp_test_slurp(path);
    cr_assert_not_null(strstr(text, "/out/traces/pool4.txt"), "%s", text);
    free(text);
    snprintf(path, sizeof path, "%s/out/traces/pool-first.txt", tmpdir);
    text = mp_test_slurp(path);
    cr_assert_str_eq(text, "0: 0-3\n1: 0-15\n2: 0-15\n3: 0-15\n");
    free(text);
    snprintf(path, sizeof path, "%s/out/decode-check.md", tmpdir);
    text = mp_test_slurp(path);
    cr_assert_not_null(strstr(text, "| cK-first | 7 | 5 | "), "%s", text);
    free(text);
}

Test(decode_check, an_unknown_configuration_is_refused_in_one_line)
{
    char err[16384];
    cr_assert_eq(script("PRESET=tiny CONFIGS='gpu-router c9-grid'", err, sizeof err), 1, "%s", err);
    cr_assert_str_eq(err, "decode_check: error: CONFIGS: unknown configuration 'c9-grid'\n");
    /* real routing needs a trace: only the flame preset has one by default */
    cr_assert_eq(script("PRESET=tiny CONFIGS=gpu-trace", err, sizeof err), 1, "%s", err);
    cr_assert_str_eq(err, "decode_check: error: CONFIGS: gpu-trace needs TRACE (a trace of the model's geometry)\n");
}

/* The tiny costs with the measured context curve (a concave one: 33.5 keys the file's one-row point,
 * 160.5 keys +10 us, 480.5 +14 us), the grid's pool (12 of 16) and a once of 5 us over 4 layers. The
 * rows' model: the curve averaged over the row's steps (tg 7 attends 2 .. 8 keys, below the first
 * point: along the first segment; tg 255 2 .. 256, across the bend at 160.5, where the mean of
 * the steps is not the curve at their mean keys), the resident layers, and the hybrid ones' levels
 * less their share of the once, which a step with hybrid layers pays whole. */
Test(decode_check, the_model_is_the_simulators_with_a_context_curve, .timeout = 600)
{
    char path[512], costs[512], env[1024], err[16384];
    snprintf(path, sizeof path, "%s/tests/fixtures/costs/tiny-before-curve.json", root);
    char *text = mp_test_slurp(path);
    cJSON *c = cJSON_Parse(text);
    cr_assert_not_null(c);
    free(text);
    const double nm0 =
        mp_test_json_num(cJSON_GetArrayItem(cJSON_GetObjectItemCaseSensitive(c, "non_moe"), 0), "median_ns");
    cJSON_DeleteItemFromObjectCaseSensitive(c, "non_moe_context");
    cJSON *ctx = cJSON_AddObjectToObject(c, "non_moe_context"), *pts = cJSON_AddArrayToObject(ctx, "points");
    const double keys[3] = {33.5, 160.5, 480.5}, add[3] = {0, 10000, 14000};
    for (int i = 0; i < 3; i++) {
        cJSON *p = cJSON_CreateObject();
        cJSON_AddNumberToObject(p, "keys", keys[i]);
        cJSON_AddNumberToObject(p, "median_ns", nm0 + add[i]);
        cJSON_AddNumberToObject(p, "spread_ns", 0);
        cJSON_AddItemToArray(pts, p);
    }
    cJSON *grid = cJSON_GetObjectItemCaseSensitive(c, "decode_layers"), *hs;
    cJSON_AddNumberToObject(grid, "pool", 12);
    cJSON_AddNumberToObject(grid, "steps", 64);
    hs = cJSON_AddObjectToObject(grid, "hybrid_step");
    cJSON_AddNumberToObject(hs, "median_ns", 5000);
    cJSON_AddNumberToObject(hs, "spread_ns", 0);
    cJSON_AddNumberToObject(hs, "layers", 4);
    snprintf(costs, sizeof costs, "%s/curve.json", tmpdir);
    char *out = cJSON_Print(c);
    FILE *f = fopen(costs, "w");
    cr_assert_not_null(f);
    fputs(out, f);
    fclose(f);
    cJSON_free(out);
    cJSON_Delete(c);
    mp_costs cm;
    mp_error e;
    cr_assert_eq(mp_costs_load(costs, &cm, &e), MP_OK, "%s", e.msg);
    snprintf(env, sizeof env, "PRESET=tiny COSTS='%s' EXECUTOR=cpu N_SHORT=7 N_LONG=255 REPS=1 THREADS=1 "
             "CONFIGS='gpu-router c0-grid cK-first'", costs);
    cr_assert_eq(script(env, err, sizeof err), 0, "%s", err);
    snprintf(path, sizeof path, "%s/out/decode-check.json", tmpdir);
    text = mp_test_slurp(path);
    cJSON *doc = cJSON_Parse(text);
    cr_assert_not_null(doc, "not JSON: %s", text);
    const int L = (int)mp_test_json_num(doc, "layers"), K = (int)mp_test_json_num(doc, "top_k");
    cr_assert_eq(mp_test_json_num(doc, "grid_pool"), 12);
    const costs_parts p = parts_of(costs, K);
    const double S = 5000, share = S / 4;
    const struct {
        const char *cfg;
        int n;
        double moe_ns;
    } want[5] = {{"gpu-router", 7, L * p.conc_ns},
                 {"gpu-router", 255, L * p.conc_ns},
                 {"c0-grid", 7, L * (p.off0_ns - share) + S},
                 {"c0-grid", 255, L * (p.off0_ns - share) + S},
                 {"cK-first", 255, (L - 1) * p.conc_ns + p.offk_ns - share + S}};
    const cJSON *rows = cJSON_GetObjectItemCaseSensitive(doc, "rows");
    cr_assert_eq(cJSON_GetArraySize(rows), 5);
    for (int i = 0; i < 5; i++) {
        const cJSON *r = cJSON_GetArrayItem(rows, i);
        cr_assert_str_eq(mp_test_json_str(r, "configuration"), want[i].cfg);
        double nm = 0; /* positions 1 .. n attend 2 .. n + 1 keys */
        for (int pos = 1; pos <= want[i].n; pos++)
            nm += mp_costs_decode_non_moe_ns(&cm, pos + 1) / want[i].n;
        if (want[i].n == 7)
            cr_assert_lt(nm, nm0, "below the curve's first point: along its first segment");
        const double model_ms = (nm + want[i].moe_ns) / 1e6;
        cr_assert_float_eq(mp_test_json_num(r, "model_ms_per_token"), model_ms, 1e-9, "row %d: %g, want %g", i,
                           mp_test_json_num(r, "model_ms_per_token"), model_ms);
    }
    cJSON_Delete(doc);
    free(text);
    mp_costs_free(&cm);
    snprintf(path, sizeof path, "%s/out/traces/pool-first.txt", tmpdir);
    text = mp_test_slurp(path);
    cr_assert_str_eq(text, "0: 0-11\n1: 0-15\n2: 0-15\n3: 0-15\n");
    free(text);
    snprintf(path, sizeof path, "%s/out/decode-check.md", tmpdir);
    text = mp_test_slurp(path);
    cr_assert_not_null(strstr(text, "the measured curve of 3 points"), "%s", text);
    free(text);
}
