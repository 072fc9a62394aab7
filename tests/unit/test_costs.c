/* tests/unit/test_costs.c — costs.json loader (every rejection names the JSON path) and the curve
 * interpolation, on tests/fixtures/costs/fixture.json (synthetic round numbers, not measurements). */
#include <criterion/criterion.h>
#include <cjson/cJSON.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "runtime/costs.h"
#include "runtime/decide.h"
#include "runtime/gpu.h"

static char *fixture_text(size_t *len)
{
    const char *root = getenv("MP_SOURCE_ROOT");
    cr_assert_not_null(root, "MP_SOURCE_ROOT is not set (run through meson test)");
    char path[1024];
    snprintf(path, sizeof path, "%s/tests/fixtures/costs/fixture.json", root);
    FILE *f = fopen(path, "rb");
    cr_assert_not_null(f, "cannot open %s", path);
    char *buf = malloc(1 << 16);
    *len = fread(buf, 1, (1 << 16) - 1, f);
    buf[*len] = 0;
    fclose(f);
    return buf;
}

/* The fixture's text with the first occurrence of `from` (asserted present) replaced by `to`
 * (malloc'd). */
static char *fixture_with(const char *from, const char *to)
{
    size_t len;
    char *text = fixture_text(&len);
    const char *at = strstr(text, from);
    cr_assert_not_null(at, "fixture lacks '%s'", from);
    char *mut = malloc(len + strlen(to) + 1);
    cr_assert_not_null(mut);
    const size_t head = (size_t)(at - text);
    memcpy(mut, text, head);
    strcpy(mut + head, to);
    strcat(mut, at + strlen(from));
    free(text);
    return mut;
}

/* The fixture with the first occurrence of `from` replaced by `to`; must be rejected with a
 * message containing needle. */
static void expect_reject(const char *from, const char *to, const char *needle)
{
    char *mut = fixture_with(from, to);
    mp_costs c;
    mp_error err;
    mp_status st = mp_costs_parse(mut, strlen(mut), "f.json", &c, &err);
    cr_assert_eq(st, MP_ERR_FORMAT, "'%s' -> '%s' accepted (status %d)", from, to, st);
    cr_assert_not_null(strstr(err.msg, needle), "'%s' -> '%s': message '%s' lacks '%s'", from, to, err.msg, needle);
    cr_assert_not_null(strstr(err.msg, "costs f.json: "), "%s", err.msg);
    cr_assert_null(c.gpu_expert);
    free(mut);
}

/* The fixture with the first occurrence of `from` replaced by `to`, parsed into c (asserted to
 * succeed; the caller frees c). */
static void expect_parse(const char *from, const char *to, mp_costs *c)
{
    char *mut = fixture_with(from, to);
    mp_error err;
    cr_assert_eq(mp_costs_parse(mut, strlen(mut), "f.json", c, &err), MP_OK, "'%s' -> '%s': %s", from, to, err.msg);
    free(mut);
}

/* A grid point may say how many passes it took (calibrate's extra passes for noisy points): read and
 * not costed, so the file's costs are the same with it. */
Test(costs, reads_a_points_passes)
{
    size_t len;
    char *text = fixture_text(&len);
    char *mut = fixture_with(", \"cpu_ns\": 0, \"gpu_ns\": 70000", ", \"cpu_ns\": 0, \"gpu_ns\": 70000, \"passes\": 7");
    mp_costs a, b;
    mp_error err;
    cr_assert_eq(mp_costs_parse(mut, strlen(mut), "f.json", &a, &err), MP_OK, "%s", err.msg);
    cr_assert_eq(mp_costs_parse(text, len, "f.json", &b, &err), MP_OK, "%s", err.msg);
    cr_assert_eq(a.decode.n_points, b.decode.n_points);
    int with_passes = 0;
    for (int i = 0; i < a.decode.n_points; i++) {
        mp_cost_decode_point pa = a.decode.points[i];
        cr_assert_eq(b.decode.points[i].passes, 0, "point %d: the fixture gives no passes", i);
        if (pa.passes) {
            cr_assert_eq(pa.passes, 7, "point %d", i);
            with_passes++;
        }
        pa.passes = 0;
        cr_assert_eq(memcmp(&pa, &b.decode.points[i], sizeof pa), 0, "point %d", i);
    }
    cr_assert_eq(with_passes, 1);
    mp_costs_free(&a);
    mp_costs_free(&b);
    free(mut);
    free(text);
}

/* A grid's steadiness, its points' spread over their median: points of one pass (spread 0 by
 * construction) and points of steps under MP_COST_GRID_STEADY_NS do not count, points whose passes
 * the file does not give do; noisy above MP_COST_GRID_NOISY on average over at least
 * MP_COST_GRID_STEADY_MIN points, whatever the largest. */
Test(costs, a_grids_spread_counts_the_points_of_several_passes)
{
    cr_assert_eq(MP_COST_GRID_STEADY_MIN, 4, "the points below: four that count");
    mp_cost_decode_point pts[7] = {
        {.cold = 0, .layer = {100000, 45000}, .passes = 3},
        {.cold = 1, .layer = {200000, 20000}, .passes = 0},
        {.cold = 2, .layer = {400000, 80000}, .passes = 7},
        {.cold = 3, .layer = {300000, 45000}, .passes = 2},
        {.cold = 4, .layer = {2000000, 0}, .passes = 1},   /* one pass */
        {.cold = 5, .layer = {99000, 99000}, .passes = 5}, /* a step under the floor: jitter */
        {.cold = 6, .layer = {0, 0}, .passes = 5},         /* no median */
    };
    mp_cost_decode d = {.n_points = 7, .points = pts};
    mp_cost_spread sp;
    cr_assert(mp_cost_decode_spread(&d, &sp), "22.5 %% on average of 45, 10, 20 and 15: noisy");
    cr_assert_eq(sp.n, 4);
    cr_assert_float_eq(sp.mean, 0.225, 1e-12);
    cr_assert_float_eq(sp.max, 0.45, 1e-12);
    pts[0].layer.spread_ns = 25000; /* 17.5 %% on average */
    cr_assert_not(mp_cost_decode_spread(&d, &sp));
    cr_assert_float_eq(sp.mean, 0.175, 1e-12);
    cr_assert_float_eq(sp.max, 0.25, 1e-12);
    pts[0].layer.spread_ns = pts[1].layer.spread_ns = pts[2].layer.spread_ns = pts[3].layer.spread_ns = 200000;
    pts[3].passes = 1; /* three points left, each of 50-200 %%: too few to say */
    cr_assert_not(mp_cost_decode_spread(&d, &sp));
    cr_assert_eq(sp.n, 3);
    cr_assert_gt(sp.mean, MP_COST_GRID_NOISY);
    d.n_points = 0;
    cr_assert_not(mp_cost_decode_spread(&d, &sp), "no grid");
}

/* A CPU expert curve on a noisy host: a call of fewer experts took more than MP_COST_CURVE_INVERTED x
 * one of more. The largest such ratio over every CPU entry is reported, with its entry and points;
 * a curve rising as the work does is not noisy, nor a ratio at the limit itself. */
Test(costs, a_cpu_curve_whose_fewer_experts_took_longer_is_noisy)
{
    double x1[4] = {1, 2, 3, 4}, x2[3] = {1, 2, 8};
    mp_cost_stat quiet[4] = {{48e3, 1e3}, {71e3, 2e3}, {91e3, 2e3}, {118e3, 3e3}};
    mp_cost_stat busy[3] = {{2388e3, 1400e3}, {396e3, 34e3}, {2584e3, 900e3}}; /* gpt-oss-20b, 2026-12-07 */
    mp_cost_expert e[2] = {
        {.quant = "Q4_K", .threads = 16, .concurrent = {4, x1, quiet}},
        {.quant = "MXFP4", .threads = 8, .concurrent = {3, x2, busy}},
    };
    mp_costs c = {.cpu_expert = e, .n_cpu_expert = 2};
    mp_cost_inversion inv;
    cr_assert(mp_cost_cpu_curve_inverted(&c, &inv));
    cr_assert_eq(inv.entry, &e[1]);
    cr_assert_float_eq(inv.k_lo, 1, 0);
    cr_assert_float_eq(inv.k_hi, 2, 0);
    cr_assert_float_eq(inv.lo_ns, 2388e3, 0);
    cr_assert_float_eq(inv.hi_ns, 396e3, 0);
    c.n_cpu_expert = 1; /* the quiet curve alone: its largest ratio, 71 / 91 */
    cr_assert_not(mp_cost_cpu_curve_inverted(&c, &inv));
    cr_assert_eq(inv.entry, &e[0]);
    cr_assert_float_eq(inv.lo_ns / inv.hi_ns, 71.0 / 91.0, 1e-12);
    quiet[2].median_ns = MP_COST_CURVE_INVERTED * quiet[3].median_ns; /* at the limit: not past it */
    cr_assert_not(mp_cost_cpu_curve_inverted(&c, &inv));
    cr_assert_float_eq(inv.lo_ns / inv.hi_ns, MP_COST_CURVE_INVERTED, 1e-12);
    quiet[2].median_ns *= 1.01;
    cr_assert(mp_cost_cpu_curve_inverted(&c, &inv));
    cr_assert_float_eq(inv.k_lo, 3, 0);
    e[0].concurrent.n_points = 0; /* no curve of two points: nothing to say */
    cr_assert_not(mp_cost_cpu_curve_inverted(&c, &inv));
    cr_assert_null(inv.entry);
    c.n_cpu_expert = 0;
    cr_assert_not(mp_cost_cpu_curve_inverted(&c, &inv));
    cr_assert_null(inv.entry);
}

Test(costs, loads_the_fixture)
{
    size_t len;
    char *text = fixture_text(&len);
    mp_costs c;
    mp_error err;
    cr_assert_eq(mp_costs_parse(text, len, "fixture", &c, &err), MP_OK, "%s", err.msg);
    cr_assert_eq(c.n_gpu_expert, 2);
    cr_assert_eq(c.n_cpu_expert, 2);
    cr_assert_str_eq(c.gpu_expert[0].quant, "Q4_K");
    cr_assert_eq(c.gpu_expert[0].n_embd, 2048);
    cr_assert_eq(c.gpu_expert[0].expert_bytes, 1000000);
    cr_assert_eq(c.gpu_expert[0].by_rows.n_points, 3);
    cr_assert_eq(c.gpu_expert[0].by_rows.y[2].spread_ns, 900);
    cr_assert_eq(c.cpu_expert[1].threads, 16);
    cr_assert_eq(c.sync.median_ns, 20000);
    cr_assert_eq(c.h2d_pinned.n_points, 2);
    cr_assert_eq(c.non_moe.x[1], 2048);
    mp_costs_free(&c);
    free(text);
}

Test(costs, curve_interpolation_by_hand)
{
    size_t len;
    char *text = fixture_text(&len);
    mp_costs c;
    mp_error err;
    cr_assert_eq(mp_costs_parse(text, len, "fixture", &c, &err), MP_OK, "%s", err.msg);
    const mp_cost_curve *g = &c.gpu_expert[0].by_rows; /* (1,10000) (8,12000) (64,40000) */
    cr_assert_float_eq(mp_cost_curve_ns(g, 0), 0, 1e-9);
    cr_assert_float_eq(mp_cost_curve_ns(g, 0.5), 10000, 1e-9);     /* latency floor */
    cr_assert_float_eq(mp_cost_curve_ns(g, 1), 10000, 1e-9);
    cr_assert_float_eq(mp_cost_curve_ns(g, 4.5), 11000, 1e-9);     /* halfway 1..8 */
    cr_assert_float_eq(mp_cost_curve_ns(g, 8), 12000, 1e-9);
    cr_assert_float_eq(mp_cost_curve_ns(g, 36), 26000, 1e-9);      /* halfway 8..64 */
    cr_assert_float_eq(mp_cost_curve_ns(g, 120), 68000, 1e-9);     /* slope 500/row beyond */
    const mp_cost_curve *one = &c.gpu_expert[1].by_rows;           /* (1,30000) only */
    cr_assert_float_eq(mp_cost_curve_ns(one, 3), 90000, 1e-9);     /* proportional */
    /* h2d pinned (4096, 5000) (1004096, 25000): 20000 ns per 1e6 bytes = 50 GB/s beyond latency */
    cr_assert_float_eq(mp_cost_curve_ns(&c.h2d_pinned, 2004096), 45000, 1e-6);
    mp_costs_free(&c);
    free(text);
}

Test(costs, finds_entries_by_quant_shape_and_threads)
{
    size_t len;
    char *text = fixture_text(&len);
    mp_costs c;
    mp_error err;
    cr_assert_eq(mp_costs_parse(text, len, "fixture", &c, &err), MP_OK, "%s", err.msg);
    cr_assert_eq(mp_costs_find_gpu(&c, "F16", 2048, 768), &c.gpu_expert[1]);
    cr_assert_null(mp_costs_find_gpu(&c, "Q4_K", 2048, 769));
    cr_assert_null(mp_costs_find_gpu(&c, "Q8_0", 2048, 768));
    cr_assert_eq(mp_costs_find_cpu(&c, "Q4_K", 2048, 768, 16), &c.cpu_expert[1]);
    cr_assert_eq(mp_costs_find_cpu(&c, "Q4_K", 2048, 768, 12), &c.cpu_expert[0]); /* most below */
    cr_assert_eq(mp_costs_find_cpu(&c, "Q4_K", 2048, 768, 64), &c.cpu_expert[1]);
    cr_assert_eq(mp_costs_find_cpu(&c, "Q4_K", 2048, 768, 4), &c.cpu_expert[0]);  /* fewest above */
    cr_assert_null(mp_costs_find_cpu(&c, "F16", 2048, 768, 8));
    mp_costs_free(&c);
    free(text);
}

Test(costs, rejects_missing_fields_with_json_path)
{
    expect_reject("\"sync\": {\"median_ns\": 20000, \"spread_ns\": 2000},", "", "$.sync: missing");
    expect_reject("\"median_ns\": 20000, \"spread_ns\": 2000", "\"median_ns\": 20000", "$.sync.spread_ns: missing");
    expect_reject("\"expert_bytes\": 9437184,", "", "$.gpu_expert[1].expert_bytes: missing");
    expect_reject("\"threads\": 16,", "", "$.cpu_expert[1].threads: missing");
    expect_reject("{\"rows\": 8, \"median_ns\": 12000,", "{\"rows\": 8,", "$.gpu_expert[0].points[1].median_ns: missing");
    expect_reject("\"pageable\": [{\"bytes\": 4096, \"median_ns\": 9000, \"spread_ns\": 200}]", "\"x\": 1",
                  "$.d2h.x: unknown key");
    expect_reject("\"format\": \"moeplan-costs\",", "", "$.format: missing");
}

Test(costs, rejects_bad_values_with_json_path)
{
    expect_reject("\"median_ns\": 20000", "\"median_ns\": -1", "$.sync.median_ns: expected a finite number >= 0");
    expect_reject("\"median_ns\": 20000", "\"median_ns\": 1e999", "$.sync.median_ns: expected a finite number");
    expect_reject("\"median_ns\": 20000", "\"median_ns\": \"fast\"", "$.sync.median_ns: expected a finite number");
    expect_reject("\"median_ns\": 20000", "\"median_ns\": null", "$.sync.median_ns: expected a finite number");
    expect_reject("{\"rows\": 8,", "{\"rows\": 0.5,", "$.gpu_expert[0].points[1].rows: expected a finite number >= 1");
    expect_reject("{\"rows\": 8,", "{\"rows\": 8.5,", "$.gpu_expert[0].points[1].rows: expected an integer");
    expect_reject("{\"rows\": 8,", "{\"rows\": 1,", "$.gpu_expert[0].points[1].rows: 1: expected > the previous point's 1");
    expect_reject("\"spread_ns\": 300}", "\"spread_ns\": -300}", "$.h2d.pinned[1].spread_ns: expected a finite number >= 0");
    expect_reject("\"combine\": [{\"rows\": 1, \"median_ns\": 3000, \"spread_ns\": 100}]", "\"combine\": []",
                  "$.combine: expected at least one point");
    expect_reject("\"combine\": [{\"rows\": 1, \"median_ns\": 3000, \"spread_ns\": 100}]", "\"combine\": 5",
                  "$.combine: expected an array");
    expect_reject("\"quant\": \"F16\"", "\"quant\": \"\"", "$.gpu_expert[1].quant: expected a type name");
    expect_reject("\"quant\": \"F16\"", "\"quant\": \"A_VERY_LONG_TYPE_NAME_OF_NO_TYPE\"", "$.gpu_expert[1].quant");
    expect_reject("\"threads\": 16", "\"threads\": 0", "$.cpu_expert[1].threads: expected a finite number >= 1");
    expect_reject("\"version\": 1", "\"version\": 2", "$.version: 2: expected 1");
    expect_reject("\"moeplan-costs\"", "\"other\"", "$.format: expected \"moeplan-costs\"");
    expect_reject("\"sync\":", "\"sync\": {\"median_ns\": 1, \"spread_ns\": 1}, \"sync\":", "$.sync: repeated key");
    expect_reject("\"notes\": \"TEST FIXTURE: round synthetic numbers chosen so expected results can be computed by "
                  "hand; not a measurement of any machine\"",
                  "\"notes\": 5", "$.notes: expected a string");
}

Test(costs, rejects_empty_expert_lists)
{
    const char *keys[] = {"gpu_expert", "cpu_expert"};
    for (int k = 0; k < 2; k++) {
        size_t len;
        char *text = fixture_text(&len);
        cJSON *root = cJSON_Parse(text);
        cr_assert_not_null(root);
        cr_assert(cJSON_ReplaceItemInObjectCaseSensitive(root, keys[k], cJSON_CreateArray()));
        char *mut = cJSON_PrintUnformatted(root);
        mp_costs c;
        mp_error err;
        cr_assert_eq(mp_costs_parse(mut, strlen(mut), "e.json", &c, &err), MP_ERR_FORMAT, "%s accepted empty", keys[k]);
        char needle[64];
        snprintf(needle, sizeof needle, "$.%s: expected a non-empty array", keys[k]);
        cr_assert_not_null(strstr(err.msg, needle), "%s", err.msg);
        cJSON_free(mut);
        cJSON_Delete(root);
        free(text);
    }
}

Test(costs, rejects_broken_json_with_offset)
{
    const char *text = "{\"format\": \"moeplan-costs\", \"version\": 1,, }";
    mp_costs c;
    mp_error err;
    cr_assert_eq(mp_costs_parse(text, strlen(text), "b.json", &c, &err), MP_ERR_FORMAT);
    /* the second comma is at offset 41; cJSON stops at it or just after */
    unsigned off = 0;
    cr_assert_eq(sscanf(err.msg, "costs b.json: offset %u: expected valid JSON", &off), 1, "%s", err.msg);
    cr_assert(off >= 41 && off <= 42, "%s", err.msg);
    const char *two = "{} {}";
    cr_assert_eq(mp_costs_parse(two, strlen(two), "b.json", &c, &err), MP_ERR_FORMAT);
    cr_assert_not_null(strstr(err.msg, "offset 3: expected end of input"), "%s", err.msg);
    cr_assert_eq(mp_costs_parse("[]", 2, "b.json", &c, &err), MP_ERR_FORMAT);
    cr_assert_not_null(strstr(err.msg, "$: expected an object"), "%s", err.msg);
    cr_assert_eq(mp_costs_load("/nonexistent/costs.json", &c, &err), MP_ERR_IO);
    cr_assert_not_null(strstr(err.msg, "/nonexistent/costs.json: cannot open"), "%s", err.msg);
}

Test(costs, loads_from_file)
{
    const char *root = getenv("MP_SOURCE_ROOT");
    cr_assert_not_null(root);
    char path[1024];
    snprintf(path, sizeof path, "%s/tests/fixtures/costs/fixture.json", root);
    mp_costs c;
    mp_error err;
    cr_assert_eq(mp_costs_load(path, &c, &err), MP_OK, "%s", err.msg);
    cr_assert_eq(c.cpu_expert[0].by_rows.y[1].median_ns, 150000);
    mp_costs_free(&c);
}

/* The fixture with the GPU keys in drop removed and listed in $.missing (extra: more entries). */
static char *without_gpu(const char *const *drop, int n_drop, const char *extra_what)
{
    size_t len;
    char *text = fixture_text(&len);
    cJSON *root = cJSON_Parse(text);
    cr_assert_not_null(root);
    cJSON *missing = cJSON_AddArrayToObject(root, "missing");
    for (int i = 0; i < n_drop + (extra_what != NULL); i++) {
        const char *what = i < n_drop ? drop[i] : extra_what;
        if (i < n_drop)
            cJSON_DeleteItemFromObjectCaseSensitive(root, what);
        cJSON *e = cJSON_CreateObject();
        cJSON_AddStringToObject(e, "what", what);
        cJSON_AddStringToObject(e, "why", "no CUDA device");
        cJSON_AddItemToArray(missing, e);
    }
    char *out = cJSON_PrintUnformatted(root);
    cJSON_Delete(root);
    free(text);
    return out;
}

Test(costs, cpu_only_file_lists_what_is_missing)
{
    const char *all[] = {"gpu_expert", "h2d", "d2h", "sync", "decode_layers"};
    mp_costs c;
    mp_error err;
    char *t = without_gpu(all, 5, NULL);
    cr_assert_eq(mp_costs_parse(t, strlen(t), "cpu.json", &c, &err), MP_OK, "%s", err.msg);
    cr_assert_eq(c.absent, MP_COST_ABSENT_GPU_EXPERT | MP_COST_ABSENT_H2D | MP_COST_ABSENT_D2H | MP_COST_ABSENT_SYNC |
                               MP_COST_ABSENT_DECODE);
    cr_assert_eq(c.decode.n_points, 0);
    cr_assert_eq(c.n_gpu_expert, 0);
    cr_assert_eq(c.h2d_pinned.n_points, 0);
    cr_assert_eq(c.n_cpu_expert, 2);
    cr_assert_eq(mp_costs_require_gpu(&c, "cpu.json", &err), MP_ERR_ARG);
    cr_assert_not_null(strstr(err.msg, "costs cpu.json: no GPU measurements (gpu_expert, h2d, d2h, sync, "
                                       "decode_layers listed in $.missing)"),
                       "%s", err.msg);
    mp_costs_free(&c);
    cJSON_free(t);

    /* only sync missing: the rest loads, and the simulator is still refused */
    const char *sync_only[] = {"sync"};
    t = without_gpu(sync_only, 1, NULL);
    cr_assert_eq(mp_costs_parse(t, strlen(t), "s.json", &c, &err), MP_OK, "%s", err.msg);
    cr_assert_eq(c.absent, MP_COST_ABSENT_SYNC);
    cr_assert_eq(c.n_gpu_expert, 2);
    cr_assert_eq(mp_costs_require_gpu(&c, "s.json", &err), MP_ERR_ARG);
    cr_assert_not_null(strstr(err.msg, "(sync listed in $.missing)"), "%s", err.msg);
    mp_costs_free(&c);
    cJSON_free(t);

    /* the complete fixture needs nothing */
    size_t len;
    char *text = fixture_text(&len);
    cr_assert_eq(mp_costs_parse(text, len, "f.json", &c, &err), MP_OK, "%s", err.msg);
    cr_assert_eq(c.absent, 0);
    cr_assert_eq(mp_costs_require_gpu(&c, "f.json", &err), MP_OK);
    mp_costs_free(&c);
    free(text);
}

Test(costs, rejects_inconsistent_missing_lists)
{
    const char *sync_only[] = {"sync"};
    const struct {
        const char *extra, *needle;
    } cases[] = {
        {"h2d", "$.h2d: present and also listed in $.missing"},
        {"sync", "$.missing[1].what: \"sync\" listed twice"},
        {"cpu_expert", "$.missing[1].what: expected one of \"gpu_expert\", \"h2d\", \"d2h\", \"sync\", "
                       "\"decode_layers\""},
    };
    for (int i = 0; i < 3; i++) {
        char *t = without_gpu(sync_only, 1, cases[i].extra);
        mp_costs c;
        mp_error err;
        cr_assert_eq(mp_costs_parse(t, strlen(t), "m.json", &c, &err), MP_ERR_FORMAT, "%s accepted", cases[i].extra);
        cr_assert_not_null(strstr(err.msg, cases[i].needle), "%s", err.msg);
        cJSON_free(t);
    }
    /* deleted without a word: still "missing" */
    expect_reject("\"sync\": {\"median_ns\": 20000, \"spread_ns\": 2000},", "",
                  "$.sync: missing (expected the measurement, or an entry in $.missing saying why not)");
    expect_reject("\"notes\":", "\"missing\": [{\"what\": \"sync\"}], \"notes\":", "$.missing[0].why: missing");
    expect_reject("\"notes\":", "\"missing\": {}, \"notes\":", "$.missing: expected an array");
    expect_reject("\"notes\":", "\"missing\": [{\"what\": \"sync\", \"why\": 3}], \"notes\":",
                  "$.missing[0].why: expected a string");
}

/* The optional `concurrent` curve (k distinct one-row experts in one call): read when present,
 * with the same checks as any curve plus at least two points; absent in the fixture (n_points 0). */
static char *with_concurrent(const char *curve)
{
    const char *from = "\"points\": [{\"rows\": 1, \"median_ns\": 10000";
    char to[4096];
    snprintf(to, sizeof to, "\"concurrent\": %s, %s", curve, from);
    return fixture_with(from, to);
}

Test(costs, reads_the_optional_concurrent_curve)
{
    size_t len;
    char *text = fixture_text(&len);
    mp_costs c;
    mp_error err;
    cr_assert_eq(mp_costs_parse(text, len, "fixture", &c, &err), MP_OK, "%s", err.msg);
    cr_assert_eq(c.gpu_expert[0].concurrent.n_points, 0);
    cr_assert_eq(c.cpu_expert[0].concurrent.n_points, 0);
    mp_costs_free(&c);
    free(text);

    char *mut = with_concurrent("[{\"experts\": 1, \"median_ns\": 10000, \"spread_ns\": 1},"
                                " {\"experts\": 8, \"median_ns\": 17000, \"spread_ns\": 2}]");
    cr_assert_eq(mp_costs_parse(mut, strlen(mut), "f.json", &c, &err), MP_OK, "%s", err.msg);
    cr_assert_eq(c.gpu_expert[0].concurrent.n_points, 2);
    cr_assert_eq(c.gpu_expert[0].concurrent.x[1], 8);
    cr_assert_eq(c.gpu_expert[0].concurrent.y[1].median_ns, 17000);
    mp_costs_free(&c);
    free(mut);

    static const struct { const char *curve, *needle; } bad[] = {
        {"[{\"experts\": 1, \"median_ns\": 10000, \"spread_ns\": 1}]",
         "$.gpu_expert[0].concurrent: expected at least two points"},
        {"[{\"experts\": 2, \"median_ns\": 1, \"spread_ns\": 1}, {\"experts\": 2, \"median_ns\": 1, \"spread_ns\": 1}]",
         "$.gpu_expert[0].concurrent[1].experts: 2: expected > the previous point's 2"},
        {"[{\"rows\": 1, \"median_ns\": 1, \"spread_ns\": 1}, {\"rows\": 2, \"median_ns\": 1, \"spread_ns\": 1}]",
         "$.gpu_expert[0].concurrent[0].rows: unknown key"},
        {"[{\"experts\": 1, \"median_ns\": -1, \"spread_ns\": 1}, {\"experts\": 2, \"median_ns\": 1, \"spread_ns\": 1}]",
         "$.gpu_expert[0].concurrent[0].median_ns: expected a finite number >= 0"},
        {"{}", "$.gpu_expert[0].concurrent: expected an array"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        mut = with_concurrent(bad[i].curve);
        cr_assert_eq(mp_costs_parse(mut, strlen(mut), "f.json", &c, &err), MP_ERR_FORMAT, "%s accepted", bad[i].curve);
        cr_assert_not_null(strstr(err.msg, bad[i].needle), "%s: message '%s' lacks '%s'", bad[i].curve, err.msg,
                           bad[i].needle);
        free(mut);
    }
}

/* The fixture with `member` ("\"key\": value, ") inserted before its "sync" member, parsed into
 * c (asserted to succeed). */
static void parse_with_member(const char *member, mp_costs *c)
{
    char to[4096];
    snprintf(to, sizeof to, "%s\"sync\":", member);
    expect_parse("\"sync\":", to, c);
}

Test(costs, reads_the_decode_grid_and_host_read)
{
    size_t len;
    char *text = fixture_text(&len);
    mp_costs c;
    mp_error err;
    cr_assert_eq(mp_costs_parse(text, len, "fixture", &c, &err), MP_OK, "%s", err.msg);
    const mp_cost_decode *d = &c.decode;
    cr_assert_eq(d->n_points, 8);
    cr_assert_str_eq(d->quant, "Q4_K");
    cr_assert_eq(d->n_embd, 2048);
    cr_assert_eq(d->n_ff, 768);
    cr_assert_eq(d->n_expert, 4);
    cr_assert_eq(d->top_k, 2);
    cr_assert_eq(d->far_max, 1);
    cr_assert_eq(d->threads, 16);
    cr_assert_eq(d->expert_bytes, 1000000);
    cr_assert_eq(d->points[5].cold, 1);
    cr_assert_eq(d->points[5].far, 1);
    cr_assert(d->points[5].far_on);
    cr_assert(!d->points[1].far_on);
    cr_assert_eq(d->points[5].layer.median_ns, 90000);
    cr_assert_eq(d->points[5].layer.spread_ns, 2000);
    cr_assert_eq(d->points[5].cpu_ns, 0);
    cr_assert_eq(d->points[5].gpu_ns, 70000);
    cr_assert_eq(c.host_read_gbs, 50);
    cr_assert_eq(c.host_read_spread_gbs, 2);
    cr_assert_eq(c.host_read_threads, 16);
    /* no level_gbs (files before the grid's probes): the level is gbs */
    cr_assert_eq(c.host_read_level_gbs, 50);
    cr_assert(!c.host_read_window, "no probe named: the older probe");
    cr_assert_eq(c.host_read_level_probes, 0);
    cr_assert_eq(mp_costs_host_level_gbs(&c), 50);
    /* with it: read back; a level without its probe count, a count without its level, a level of 0
     * are refused naming the member */
    char *lv = fixture_with("\"host_read\": {\"gbs\": 50,", "\"host_read\": {\"gbs\": 50, \"level_gbs\": 42.5, "
                                                         "\"level_probes\": 5,");
    mp_costs l;
    cr_assert_eq(mp_costs_parse(lv, strlen(lv), "lv.json", &l, &err), MP_OK, "%s", err.msg);
    cr_assert(l.host_read_level_gbs == 42.5 && l.host_read_level_probes == 5 && mp_costs_host_level_gbs(&l) == 42.5);
    mp_costs_free(&l);
    free(lv);
    expect_reject("\"host_read\": {\"gbs\": 50,", "\"host_read\": {\"gbs\": 50, \"level_gbs\": 40,",
                  "$.host_read.level_probes: missing");
    char *win = fixture_with("\"host_read\": {\"gbs\": 50,", "\"host_read\": {\"gbs\": 50, \"probe\": \"window\",");
    cr_assert_eq(mp_costs_parse(win, strlen(win), "win.json", &l, &err), MP_OK, "%s", err.msg);
    cr_assert(l.host_read_window);
    mp_costs_free(&l);
    free(win);
    expect_reject("\"host_read\": {\"gbs\": 50,", "\"host_read\": {\"gbs\": 50, \"probe\": \"once\",",
                  "$.host_read.probe: expected \"window\"");
    expect_reject("\"host_read\": {\"gbs\": 50,", "\"host_read\": {\"gbs\": 50, \"level_probes\": 3,",
                  "$.host_read.level_probes: given without level_gbs");
    expect_reject("\"host_read\": {\"gbs\": 50,", "\"host_read\": {\"gbs\": 50, \"level_gbs\": 0, \"level_probes\": 3,",
                  "$.host_read.level_gbs: 0: expected a bandwidth > 0 and at most gbs (50)");
    /* the decision grid keeps each point's CPU share beside its level: the all-cold far-off point's
     * 200 us of CPU time, the far-on point's 0 (its one cold route ran far) */
    mp_decode_costs dc;
    const mp_decode_shape shape = {NULL, 2048, 768, 4, 2, 16, 0};
    mp_error derr;
    cr_assert_eq(mp_decode_costs_from(&c, "fixture", &shape, &dc, &derr), MP_OK, "%s", derr.msg);
    cr_assert_eq(mp_decide_decode_cpu_ns(&dc, NULL, 2), c.decode.points[2].cpu_ns);
    cr_assert_eq(c.decode.points[2].cpu_ns, 200000);
    const mp_far_layer on = {.on = true, .table = {0, 1, 2}}; /* 2 units of 2 cold: past far_max */
    cr_assert_eq(mp_decide_decode_cpu_ns(&dc, &on, 1), 0);
    cr_assert_eq(mp_decide_decode_ns(&dc, &on, 1), 90000);
    cr_assert_eq(mp_decide_decode_cpu_ns(&dc, NULL, 1), 100000);
    cr_assert(isnan(mp_decide_decode_cpu_ns(&dc, &on, 2)), "a point the grid lacks: NaN");
    cr_assert(isnan(mp_decide_decode_cpu_ns(&dc, NULL, 3)), "beyond top_k: NaN");
    mp_costs_free(&c);
    free(text);
}

/* $.host_bus, the cores and the bus reading host memory at once: absent in older files (0: the floor
 * sums each reader alone), read back where present and carried into the decision grid's floor;
 * a sum that is not its readers', a reader of 0 or an unknown member is refused naming the member. */
Test(costs, reads_the_two_readers_probe)
{
    size_t len;
    char *text = fixture_text(&len);
    mp_costs c;
    mp_error err;
    cr_assert_eq(mp_costs_parse(text, len, "fixture", &c, &err), MP_OK, "%s", err.msg);
    cr_assert_eq(c.host_bus_gbs, 0, "absent: not measured");
    mp_costs_free(&c);
    free(text);
    const char *from = "\"host_read\": {";
    char *hb = fixture_with(from, "\"host_bus\": {\"gbs\": 117.25, \"cpu_gbs\": 74.5, \"bus_gbs\": 42.75, "
                                  "\"threads\": 16, \"probes\": 4}, \"host_read\": {");
    cr_assert_eq(mp_costs_parse(hb, strlen(hb), "hb.json", &c, &err), MP_OK, "%s", err.msg);
    cr_assert(c.host_bus_gbs == 117.25 && c.host_bus_cpu_gbs == 74.5 && c.host_bus_bus_gbs == 42.75 &&
              c.host_bus_probes == 4);
    mp_decode_costs dc;
    const mp_decode_shape shape = {NULL, 2048, 768, 4, 2, 16, 0};
    cr_assert_eq(mp_decode_costs_from(&c, "hb.json", &shape, &dc, &err), MP_OK, "%s", err.msg);
    cr_assert_eq(dc.together_bytes_per_ns, 117.25);
    /* what a probe now compares with: the grid's level (here gbs: the fixture has no level), by the
     * older probe (no host_read.probe) */
    cr_assert_eq(dc.level_bytes_per_ns, c.host_read_gbs);
    cr_assert(!dc.level_by_window);
    cr_assert_float_eq(mp_decide_floor_ns(&dc, 117.25e6), 1e6, 1e-6); /* 117.25 MB at 117.25 bytes/ns */
    mp_costs_free(&c);
    free(hb);
    expect_reject(from, "\"host_bus\": {\"gbs\": 120, \"cpu_gbs\": 74.5, \"bus_gbs\": 42.75, \"threads\": 16, "
                        "\"probes\": 4}, \"host_read\": {",
                  "$.host_bus.gbs: 120: expected cpu_gbs + bus_gbs (117.25)");
    expect_reject(from, "\"host_bus\": {\"gbs\": 74.5, \"cpu_gbs\": 74.5, \"bus_gbs\": 0, \"threads\": 16, "
                        "\"probes\": 4}, \"host_read\": {",
                  "$.host_bus: cpu_gbs 74.5, bus_gbs 0: expected both readers' bandwidths > 0");
    expect_reject(from, "\"host_bus\": {\"gbs\": 1, \"cpu_gbs\": 0.5, \"bus_gbs\": 0.5, \"threads\": 16, "
                        "\"probes\": 1, \"level\": 3}, \"host_read\": {",
                  "$.host_bus");
    expect_reject(from, "\"host_bus\": {\"gbs\": 1, \"cpu_gbs\": 0.5, \"bus_gbs\": 0.5, \"threads\": 16}, "
                        "\"host_read\": {",
                  "$.host_bus.probes: missing");
}

/* Far work in units of 1/far_split of an expert: a file without far_split counts whole routes; with
 * it, a point may run up to cold x far_split units, and the decision grid takes them as such. */
Test(costs, reads_far_units_of_a_split_grid)
{
    size_t len;
    char *text = fixture_text(&len);
    mp_costs c;
    mp_error err;
    cr_assert_eq(mp_costs_parse(text, len, "fixture", &c, &err), MP_OK, "%s", err.msg);
    cr_assert_eq(c.decode.far_split, 1, "absent: whole routes");
    mp_costs_free(&c);
    cJSON *root = cJSON_Parse(text);
    cJSON *d = cJSON_GetObjectItem(root, "decode_layers");
    cJSON_AddNumberToObject(d, "far_split", 4);
    cJSON_ReplaceItemInObject(d, "far_max", cJSON_CreateNumber(8));
    cJSON *p = cJSON_GetArrayItem(cJSON_GetObjectItem(d, "points"), 5); /* cold 1, far 1, on */
    cJSON_ReplaceItemInObject(p, "far", cJSON_CreateNumber(3));
    char *mut = cJSON_PrintUnformatted(root);
    cr_assert_eq(mp_costs_parse(mut, strlen(mut), "split.json", &c, &err), MP_OK, "%s", err.msg);
    cr_assert_eq(c.decode.far_split, 4);
    cr_assert_eq(c.decode.far_max, 8);
    cr_assert_eq(c.decode.points[5].far, 3);
    mp_decode_costs dc;
    const mp_decode_shape shape = {NULL, 2048, 768, 4, 2, 16, 0};
    cr_assert_eq(mp_decode_costs_from(&c, "split.json", &shape, &dc, &err), MP_OK, "%s", err.msg);
    cr_assert_eq(dc.far_split, 4);
    cr_assert_eq(dc.on_ns[1][3], 90000);
    cr_assert(isnan(dc.on_ns[1][1]));
    mp_costs_free(&c);
    free(mut);
    /* 5 units of one cold route: more than the route */
    cJSON_ReplaceItemInObject(p, "far", cJSON_CreateNumber(5));
    mut = cJSON_PrintUnformatted(root);
    cr_assert_eq(mp_costs_parse(mut, strlen(mut), "split.json", &c, &err), MP_ERR_FORMAT);
    cr_assert_not_null(strstr(err.msg, "$.decode_layers.points[5].far: 5: expected at most cold x far_split (4)"),
                       "%s", err.msg);
    free(mut);
    cJSON_Delete(root);
    free(text);
}

Test(costs, refuses_bad_decode_grids)
{
#define P5 "{\"cold\": 1, \"far\": 1, \"far_on\": true, \"median_ns\": 90000"
    static const struct { const char *from, *to, *needle; } bad[] = {
        {"\"top_k\": 2,", "\"top_k\": 0,", "$.decode_layers.top_k: expected a finite number >= 1"},
        {"\"top_k\": 2,", "\"top_k\": 33,", "$.decode_layers.top_k: 33: expected at most 32"},
        {"\"top_k\": 2,", "\"top_k\": 5,", "$.decode_layers.top_k: 5: expected at most 32 and at most n_expert"},
        {"\"far_max\": 1,", "\"far_max\": 3,", "$.decode_layers.far_max: 3: expected at most top_k x far_split (2)"},
        {"\"far_max\": 1,", "\"far_max\": 1, \"far_split\": 0,", "$.decode_layers.far_split: expected a finite number >= 1"},
        {"\"far_max\": 1,", "\"far_max\": 1, \"far_split\": 17,", "$.decode_layers.far_split: 17: expected at most 32 / top_k (2)"},
        {"\"far_max\": 1,", "\"far_max\": 9, \"far_split\": 4,", "$.decode_layers.far_max: 9: expected at most top_k x far_split (8)"},
        {"\"far_max\": 1,", "\"far_max\": 1, \"far_split\": 1.5,", "$.decode_layers.far_split: expected an integer"},
        {"\"threads\": 16, \"expert_bytes\"", "\"threads\": 0, \"expert_bytes\"",
         "$.decode_layers.threads: expected a finite number >= 1"},
        {"\"n_expert\": 4,", "", "$.decode_layers.n_expert: missing"},
        {"\"quant\": \"Q4_K\", \"n_embd\": 2048, \"n_ff\": 768, \"n_expert\"",
         "\"quant\": 4, \"n_embd\": 2048, \"n_ff\": 768, \"n_expert\"", "$.decode_layers.quant: expected a type name"},
        {"{\"cold\": 2, \"far\": 0, \"far_on\": false", "{\"cold\": 3, \"far\": 0, \"far_on\": false",
         "$.decode_layers.points[2].cold: 3: expected at most top_k (2)"},
        {"{\"cold\": 0, \"far\": 0, \"far_on\": true", "{\"cold\": 0, \"far\": 1, \"far_on\": true",
         "$.decode_layers.points[3].far: 1: expected at most cold x far_split (0) and far_max (1)"},
        {"{\"cold\": 1, \"far\": 0, \"far_on\": false", "{\"cold\": 1, \"far\": 1, \"far_on\": false",
         "$.decode_layers.points[1].far: 1 with far_on false: expected 0"},
        {"{\"cold\": 1, \"far\": 0, \"far_on\": false", "{\"cold\": 1, \"far\": 0, \"far_on\": 0",
         "$.decode_layers.points[1].far_on: expected true or false"},
        {"{\"cold\": 2, \"far\": 0, \"far_on\": false", "{\"cold\": 1, \"far\": 0, \"far_on\": false",
         "$.decode_layers.points[2]: cold 1, far 0, far_on false: repeats point 1"},
        {P5, "{\"cold\": 1, \"far\": 1, \"far_on\": true, \"median_ns\": -1",
         "$.decode_layers.points[5].median_ns: expected a finite number >= 0"},
        {", \"cpu_ns\": 0, \"gpu_ns\": 70000", ", \"gpu_ns\": 70000", "$.decode_layers.points[5].cpu_ns: missing"},
        {", \"cpu_ns\": 0, \"gpu_ns\": 70000", ", \"cpu_ns\": 0, \"gpu_ns\": 70000, \"rows\": 1",
         "$.decode_layers.points[5].rows: unknown key"},
        {", \"cpu_ns\": 0, \"gpu_ns\": 70000", ", \"cpu_ns\": 0, \"gpu_ns\": 70000, \"passes\": 0",
         "$.decode_layers.points[5].passes: expected a finite number >= 1"},
        {", \"cpu_ns\": 0, \"gpu_ns\": 70000", ", \"cpu_ns\": 0, \"gpu_ns\": 70000, \"passes\": 2.5",
         "$.decode_layers.points[5].passes: expected an integer"},
        {", \"cpu_ns\": 0, \"gpu_ns\": 70000", ", \"cpu_ns\": 0, \"gpu_ns\": 70000, \"passes\": 2e6",
         "$.decode_layers.points[5].passes: 2000000: expected at most 1000000"},
        {"\"gbs\": 50,", "\"gbs\": 0,", "$.host_read.gbs: expected a bandwidth > 0"},
        {"\"spread_gbs\": 2,", "", "$.host_read.spread_gbs: missing"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++)
        expect_reject(bad[i].from, bad[i].to, bad[i].needle);
}

/* A cost file from before the decode grid (and the host's read bandwidth) existed: refused, with
 * the command that makes a new one, whether or not it has the members that came before. */
Test(costs, refuses_files_without_the_grid_saying_to_calibrate_again)
{
    size_t len;
    char *text = fixture_text(&len);
    for (int old_members = 0; old_members < 2; old_members++)
        for (int drop = 0; drop < 2; drop++) {
            cJSON *root = cJSON_Parse(text);
            cr_assert_not_null(root);
            cJSON_DeleteItemFromObjectCaseSensitive(root, drop ? "host_read" : "decode_layers");
            if (old_members) { /* what older calibrations wrote instead */
                cJSON *h = cJSON_AddObjectToObject(root, "hybrid_layer");
                cJSON_AddNumberToObject(h, "median_ns", 21000);
                cJSON_AddNumberToObject(h, "spread_ns", 700);
            }
            char *mut = cJSON_PrintUnformatted(root);
            mp_costs c;
            mp_error err;
            cr_assert_eq(mp_costs_parse(mut, strlen(mut), "old.json", &c, &err), MP_ERR_FORMAT);
            cr_assert_not_null(strstr(err.msg, drop ? "costs old.json: $.host_read: missing" :
                                                      "costs old.json: $.decode_layers: missing"), "%s", err.msg);
            cr_assert_not_null(strstr(err.msg, "run `moeplan calibrate -m MODEL` again"), "%s", err.msg);
            cJSON_free(mut);
            cJSON_Delete(root);
        }
    free(text);
}

Test(costs, reads_the_optional_non_moe_context)
{
    size_t len;
    char *text = fixture_text(&len);
    mp_costs c;
    mp_error err;
    cr_assert_eq(mp_costs_parse(text, len, "fixture", &c, &err), MP_OK, "%s", err.msg);
    cr_assert(!c.non_moe_linear && c.non_moe_by_keys.n_points == 0, "absent: no context term");
    mp_costs_free(&c);
    free(text);
    parse_with_member("\"non_moe_context\": {\"keys\": 32.5, \"per_key_ns\": 41.25}, ", &c);
    cr_assert(c.non_moe_linear);
    cr_assert_eq(c.non_moe_keys, 32.5);
    cr_assert_eq(c.non_moe_per_key_ns, 41.25);
    mp_costs_free(&c);
    expect_reject("\"sync\":", "\"non_moe_context\": {\"keys\": 3}, \"sync\":", "$.non_moe_context.per_key_ns: missing");
    expect_reject("\"sync\":", "\"non_moe_context\": {\"keys\": -1, \"per_key_ns\": 1}, \"sync\":",
                  "$.non_moe_context.keys: expected a finite number >= 0");
    expect_reject("\"sync\":", "\"non_moe_context\": {\"keys\": 1, \"per_key_ns\": 1, \"rows\": 1}, \"sync\":",
                  "$.non_moe_context.rows: unknown key");
}

/* The measured context curve: a one-row step's non-MoE time by its keys, piecewise-linear through
 * the points, each end extended with its segment's slope (33.5 keys 500 us, 160.5 keys 563.5 us,
 * 2080.5 keys 803.5 us: 500 ns per key, then 125). */
Test(costs, the_context_curve_by_hand)
{
    mp_costs c;
    parse_with_member("\"non_moe_context\": {\"points\": [{\"keys\": 33.5, \"median_ns\": 500000, \"spread_ns\": 10},"
                      "{\"keys\": 160.5, \"median_ns\": 563500, \"spread_ns\": 10},"
                      "{\"keys\": 2080.5, \"median_ns\": 803500, \"spread_ns\": 10}]}, ", &c);
    cr_assert(!c.non_moe_linear);
    cr_assert_eq(c.non_moe_by_keys.n_points, 3);
    cr_assert_float_eq(mp_costs_decode_non_moe_ns(&c, 33.5), 500000, 1e-6);
    cr_assert_float_eq(mp_costs_decode_non_moe_ns(&c, 97), 500000 + 500 * 63.5, 1e-6);
    cr_assert_float_eq(mp_costs_decode_non_moe_ns(&c, 257), 563500 + 125 * 96.5, 1e-6);
    cr_assert_float_eq(mp_costs_decode_non_moe_ns(&c, 4096), 803500 + 125 * 2015.5, 1e-6); /* beyond: 125 */
    cr_assert_float_eq(mp_costs_decode_non_moe_ns(&c, 1.5), 500000 - 500 * 32, 1e-6);     /* below: 500 */
    char line[320];
    mp_costs_context_describe(&c, line, sizeof line);
    cr_assert_str_eq(line, "one-row steps by their keys of context: the measured curve of 3 points, 33.5 .. 2080.5 keys");
    mp_costs_free(&c);
    /* a curve that falls (noise) is not extended below its first point, and no time is negative */
    parse_with_member("\"non_moe_context\": {\"points\": [{\"keys\": 10, \"median_ns\": 900, \"spread_ns\": 0},"
                      "{\"keys\": 20, \"median_ns\": 100, \"spread_ns\": 0}]}, ", &c);
    cr_assert_float_eq(mp_costs_decode_non_moe_ns(&c, 2), 900, 1e-9);
    cr_assert_float_eq(mp_costs_decode_non_moe_ns(&c, 15), 500, 1e-9);
    cr_assert_float_eq(mp_costs_decode_non_moe_ns(&c, 40), 100, 1e-9); /* the last slope, at least 0 */
    mp_costs_free(&c);
}

/* A file from before the curve: the one linear term, still read, and said so (with what to do);
 * a file with neither: the non_moe curve's one-row point whatever the keys, said as well. */
Test(costs, older_context_terms_stay_readable_and_are_named)
{
    mp_costs c;
    char line[320];
    parse_with_member("\"non_moe_context\": {\"keys\": 33.5, \"per_key_ns\": 179.6}, ", &c);
    cr_assert(c.non_moe_linear);
    cr_assert_eq(c.non_moe_by_keys.n_points, 0);
    cr_assert_float_eq(mp_costs_decode_non_moe_ns(&c, 257), 500000 + 179.6 * (257 - 33.5), 1e-6);
    cr_assert_float_eq(mp_costs_decode_non_moe_ns(&c, 1), 500000 - 179.6 * 32.5, 1e-6);
    mp_costs_context_describe(&c, line, sizeof line);
    cr_assert_str_eq(line, "one-row steps by their keys of context: linear, 179.6 ns per key from 33.5 keys (a cost "
                           "file from before the measured curve: run `moeplan calibrate` again for it)");
    mp_costs_free(&c);
    size_t len;
    char *text = fixture_text(&len);
    mp_error err;
    cr_assert_eq(mp_costs_parse(text, len, "fixture", &c, &err), MP_OK, "%s", err.msg);
    cr_assert_float_eq(mp_costs_decode_non_moe_ns(&c, 1), 500000, 1e-9);
    cr_assert_float_eq(mp_costs_decode_non_moe_ns(&c, 4000), 500000, 1e-9);
    mp_costs_context_describe(&c, line, sizeof line);
    cr_assert_not_null(strstr(line, "no context term"), "%s", line);
    mp_costs_free(&c);
    free(text);
}

Test(costs, context_curves_that_are_refused)
{
    const char *at = "\"sync\":";
    expect_reject(at, "\"non_moe_context\": {\"points\": [{\"keys\": 33.5, \"median_ns\": 1, \"spread_ns\": 0}]}, \"sync\":",
                  "$.non_moe_context.points: expected at least 2 points");
    expect_reject(at, "\"non_moe_context\": {\"points\": [{\"keys\": 33.5, \"median_ns\": 1, \"spread_ns\": 0}, "
                      "{\"keys\": 33.5, \"median_ns\": 2, \"spread_ns\": 0}]}, \"sync\":",
                  "$.non_moe_context.points[1].keys: 33.5: expected > the previous point's 33.5");
    expect_reject(at, "\"non_moe_context\": {\"points\": [{\"keys\": 0.5, \"median_ns\": 1, \"spread_ns\": 0}, "
                      "{\"keys\": 3, \"median_ns\": 2, \"spread_ns\": 0}]}, \"sync\":",
                  "$.non_moe_context.points[0].keys: expected a finite number >= 1");
    expect_reject(at, "\"non_moe_context\": {\"points\": [], \"keys\": 3, \"per_key_ns\": 1}, \"sync\":",
                  "$.non_moe_context.keys: unknown key");
    expect_reject(at, "\"non_moe_context\": {\"points\": [{\"keys\": 3, \"median_ns\": 1, \"spread_ns\": 0, "
                      "\"rows\": 1}, {\"keys\": 4, \"median_ns\": 1, \"spread_ns\": 0}]}, \"sync\":",
                  "$.non_moe_context.points[0].rows: unknown key");
}

/* The grid's optional pool, steps and once-per-step cost of hybrid steps: read when present (0
 * when a file predates them), each refused out of range with its path. */
Test(costs, the_grids_pool_steps_and_hybrid_step)
{
    size_t len;
    char *text = fixture_text(&len);
    mp_costs c;
    mp_error err;
    cr_assert_eq(mp_costs_parse(text, len, "fixture", &c, &err), MP_OK, "%s", err.msg);
    cr_assert(c.decode.pool == 0 && c.decode.steps == 0 && c.decode.hybrid_step_layers == 0);
    mp_costs_free(&c);
    free(text);
    const char *from = "\"expert_bytes\": 1000000,\n                    \"points\"";
    const char *to = "\"expert_bytes\": 1000000, \"pool\": 2, \"steps\": 64, "
                     "\"hybrid_step\": {\"median_ns\": 37000, \"spread_ns\": 900, \"layers\": 25}, \"points\"";
    text = fixture_text(&len);
    char *at = strstr(text, from);
    cr_assert_not_null(at, "the fixture's decode_layers changed");
    char mut[1 << 16];
    snprintf(mut, sizeof mut, "%.*s%s%s", (int)(at - text), text, to, at + strlen(from));
    cr_assert_eq(mp_costs_parse(mut, strlen(mut), "f.json", &c, &err), MP_OK, "%s", err.msg);
    cr_assert_eq(c.decode.pool, 2);
    cr_assert_eq(c.decode.steps, 64);
    cr_assert_eq(c.decode.hybrid_step.median_ns, 37000);
    cr_assert_eq(c.decode.hybrid_step.spread_ns, 900);
    cr_assert_eq(c.decode.hybrid_step_layers, 25);
    mp_costs_free(&c);
    free(text);
    expect_reject(from, "\"expert_bytes\": 1000000, \"pool\": 4, \"points\"",
                  "$.decode_layers.pool: 4: expected at most n_expert - 1 (3)");
    expect_reject(from, "\"expert_bytes\": 1000000, \"steps\": 0, \"points\"",
                  "$.decode_layers.steps: expected a finite number >= 1");
    expect_reject(from, "\"expert_bytes\": 1000000, \"hybrid_step\": {\"median_ns\": 1, \"spread_ns\": 0, \"layers\": 1}, "
                        "\"points\"",
                  "$.decode_layers.hybrid_step.layers: expected a finite number >= 2");
    expect_reject(from, "\"expert_bytes\": 1000000, \"hybrid_step\": {\"median_ns\": 1, \"layers\": 3}, \"points\"",
                  "$.decode_layers.hybrid_step.spread_ns: missing");
}

/* $.tier_admit is optional: absent, the admission's host calls are unknown (median -1, and the
 * decode costs' admit_ns NaN, which --adaptive cost refuses); present, it is read and checked. */
Test(costs, tier_admit_optional_and_checked)
{
    size_t len;
    char *text = fixture_text(&len);
    mp_costs c;
    mp_error err;
    cr_assert_eq(mp_costs_parse(text, len, "fixture", &c, &err), MP_OK, "%s", err.msg);
    cr_assert_lt(c.tier_admit.median_ns, 0, "the fixture has no tier_admit");
    mp_costs_free(&c);
    char *mut = fixture_with("\"sync\":", "\"tier_admit\": {\"median_ns\": 9000, \"spread_ns\": 500, "
                                           "\"expert_bytes\": 1000000}, \"sync\":");
    cr_assert_eq(mp_costs_parse(mut, strlen(mut), "f.json", &c, &err), MP_OK, "%s", err.msg);
    cr_assert_eq(c.tier_admit.median_ns, 9000);
    cr_assert_eq(c.tier_admit_bytes, 1000000);
    mp_costs_free(&c);
    free(mut);
    free(text);
    expect_reject("\"sync\":", "\"tier_admit\": {\"median_ns\": -5, \"spread_ns\": 0, \"expert_bytes\": 1}, \"sync\":",
                  "$.tier_admit.median_ns: expected a finite number >= 0");
    expect_reject("\"sync\":", "\"tier_admit\": {\"median_ns\": 5, \"spread_ns\": 0, \"expert_bytes\": 1, \"x\": 1}, \"sync\":",
                  "$.tier_admit.x");
    expect_reject("\"sync\":", "\"tier_admit\": {\"median_ns\": 5, \"spread_ns\": 0}, \"sync\":",
                  "$.tier_admit.expert_bytes");
}

/* $.device.cpu_kernels, the kernel level calibrate ran: optional (the fixture has none: ""), read
 * where present, refused when it is no level's name */
Test(costs, device_cpu_kernels_optional_and_checked)
{
    size_t len;
    char *text = fixture_text(&len);
    mp_costs c;
    mp_error err;
    cr_assert_eq(mp_costs_parse(text, len, "fixture", &c, &err), MP_OK, "%s", err.msg);
    cr_assert_str_eq(c.cpu_kernels, "");
    mp_costs_free(&c);
    const char *from = "\"cpu\": \"none (fixture)\"";
    expect_parse(from, "\"cpu\": \"none (fixture)\", \"cpu_kernels\": \"avx512\"", &c);
    cr_assert_str_eq(c.cpu_kernels, "avx512");
    mp_costs_free(&c);
    free(text);
    const char *bad[] = {"5", "\"\"", "\"AVX512\"", "\"avx 512\"", "\"avx512avx512avx512\""};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        char to_bad[128];
        snprintf(to_bad, sizeof to_bad, "\"cpu\": \"none (fixture)\", \"cpu_kernels\": %s", bad[i]);
        expect_reject(from, to_bad, "$.device.cpu_kernels: expected the name of a CPU kernel level");
    }
}

/* $.device.knobs: each knob this build knows, by its table entry, as the environment spells it; a
 * retired or unknown name, or a value neither a string nor an integer, is not kept (the member is
 * free-form: not refused). */
Test(costs, device_knobs_read_by_table_entry)
{
    mp_costs c;
    const char *from = "\"cpu\": \"none (fixture)\"";
    expect_parse(from, "\"cpu\": \"x\", \"knobs\": {\"MP_ISA\": \"amx\", \"MP_GPU_GRAPHS\": 0, "
                 "\"MP_MOE_PIPE_UNITS\": 16, \"MP_MOE_PART_STREAM\": 1, \"MP_NOT_A_KNOB\": 3, "
                 "\"MP_POOL_PIN\": 0.5, \"MP_CUDA_PDL\": [1]}", &c);
    const int isa = mp_knob_index("MP_ISA"), graphs = mp_knob_index("MP_GPU_GRAPHS");
    const int units = mp_knob_index("MP_MOE_PIPE_UNITS"), pin = mp_knob_index("MP_POOL_PIN");
    const int pdl = mp_knob_index("MP_CUDA_PDL");
    cr_assert(isa >= 0 && graphs >= 0 && units >= 0 && pin >= 0 && pdl >= 0);
    cr_assert(c.knobs.set[isa] && c.knobs.set[graphs] && c.knobs.set[units]);
    cr_assert_str_eq(c.knobs.value[isa], "amx");
    cr_assert_str_eq(c.knobs.value[graphs], "0");
    cr_assert_str_eq(c.knobs.value[units], "16");
    cr_assert(!c.knobs.set[pin] && !c.knobs.set[pdl], "a value neither a string nor an integer is kept");
    int n_set = 0;
    for (int i = 0; i < MP_KNOBS_MAX; i++)
        n_set += c.knobs.set[i];
    cr_assert_eq(n_set, 3, "retired or unknown names kept: %d set", n_set);
    mp_costs_free(&c);
    expect_parse(from, "\"cpu\": \"x\", \"knobs\": \"MP_ISA=amx\"", &c); /* not an object: nothing */
    for (int i = 0; i < MP_KNOBS_MAX; i++)
        cr_assert(!c.knobs.set[i]);
    mp_costs_free(&c);
}

/* $.device's machine (cpu, cpu_logical_cores, gpu): read where calibrate's form is found, else left
 * unknown ("" / 0) without refusing the file: the member is free-form. */
Test(costs, device_machine_read_where_said)
{
    size_t len;
    char *text = fixture_text(&len);
    mp_costs c;
    mp_error err;
    cr_assert_eq(mp_costs_parse(text, len, "fixture", &c, &err), MP_OK, "%s", err.msg);
    cr_assert_str_eq(c.machine.cpu, "none (fixture)");
    cr_assert_str_eq(c.machine.gpu, "none (fixture)");
    cr_assert_eq(c.machine.cores, 0);
    mp_costs_free(&c);
    const char *from = "\"cpu\": \"none (fixture)\"";
    expect_parse(from, "\"cpu\": \"Xeon 8480\", \"cpu_logical_cores\": 16", &c);
    cr_assert_str_eq(c.machine.cpu, "Xeon 8480");
    cr_assert_eq(c.machine.cores, 16);
    mp_costs_free(&c);
    /* not calibrate's form: not read, not refused */
    const char *odd[] = {"\"cpu\": 5, \"cpu_logical_cores\": \"16\"", "\"cpu\": null, \"cpu_logical_cores\": 2.5",
                         "\"cpu\": [], \"cpu_logical_cores\": 0", "\"cpu\": {}, \"cpu_logical_cores\": -3"};
    for (size_t i = 0; i < sizeof odd / sizeof odd[0]; i++) {
        expect_parse(from, odd[i], &c);
        cr_assert_str_eq(c.machine.cpu, "", "%s", odd[i]);
        cr_assert_eq(c.machine.cores, 0, "%s", odd[i]);
        mp_costs_free(&c);
    }
    /* a name longer than the field: unknown rather than cut (a cut name would compare as another) */
    char longname[400];
    snprintf(longname, sizeof longname, "\"cpu\": \"%0300d\"", 7);
    expect_parse(from, longname, &c);
    cr_assert_str_eq(c.machine.cpu, "");
    mp_costs_free(&c);
    free(text);
}
