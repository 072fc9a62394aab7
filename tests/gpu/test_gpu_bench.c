/* tests/gpu/test_gpu_bench.c — `moeplan bench` with the GPU executor and host experts, as a user
 * runs it: the decode row's bound and the host line.
 *
 * On a tiny generated model (q4_k_m mix) with the first two layers' experts on the CPU
 * (--placement layers:2), a pp64 and a tg16 row (the prompt makes the session's batch large
 * enough for the executor to stage expert copies, and so to hold the host experts in its
 * page-locked copy rather than the model's mapping): in the tg row the executor is the GPU's, some routes ran on the CPU, its
 * counters cover the timed steps (gpu_steps, hybrid layer steps and routes add up, the CPU experts
 * took some time), the
 * bound object is there and self-consistent (its bandwidth is the larger of the two probes, both
 * measured; bound <= serial bound; the shares are the median over the bounds; the host+bus bound
 * at the larger of two probes of the cores and the bus reading at once), and the host line
 * says how much of the host copy is in huge pages (a share in 0..100 %). Speeds are only checked
 * to be measured (> 0), never against a number. A cost file of another machine (the tiny model's
 * example with another GPU's name and CPU count) is said on stderr and in the row. */
#include <cjson/cJSON.h>
#include <criterion/criterion.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "tests/unit/cli_util.h"

static char tmpdir[256];

static void setup(void)
{
    snprintf(tmpdir, sizeof tmpdir, "/tmp/mp_test_gpu_bench_XXXXXX");
    cr_assert_not_null(mkdtemp(tmpdir));
}

static void teardown(void)
{
    char cmd[300];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", tmpdir);
    cr_assert_eq(system(cmd), 0);
}

TestSuite(gpu_bench, .init = setup, .fini = teardown);

static double num_of(const cJSON *o, const char *k)
{
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, k);
    cr_assert(cJSON_IsNumber(v), "field %s is not a number", k);
    return v->valuedouble;
}

Test(gpu_bench, hybrid_decode_row_has_a_consistent_bound_and_host_line)
{
    char err[16384], cmd[1024];
    snprintf(cmd, sizeof cmd, "mkmodel --preset tiny --quiet -o '%s/tiny.gguf'", tmpdir);
    cr_assert_eq(mp_test_moeplan(tmpdir, cmd, MP_TEST_STDERR, err, sizeof err), 0, "%s", err);
    snprintf(cmd, sizeof cmd,
             "bench -m '%s/tiny.gguf' -p 64 -n 16 -r 2 -t 2 -o json --executor gpu --placement layers:2",
             tmpdir);
    cr_assert_eq(mp_test_moeplan(tmpdir, cmd, MP_TEST_STDERR, err, sizeof err), 0, "%s", err);
    char *out = mp_test_stdout(tmpdir);
    cJSON *root = cJSON_Parse(out);
    cr_assert_not_null(root, "stdout is not JSON: %s", out);
    const cJSON *rows = cJSON_GetObjectItemCaseSensitive(root, "rows");
    cr_assert(cJSON_IsArray(rows) && cJSON_GetArraySize(rows) == 2);
    cr_assert(cJSON_IsNull(cJSON_GetObjectItemCaseSensitive(cJSON_GetArrayItem(rows, 0), "bound")),
              "a pp row with a decode bound");
    const cJSON *row = cJSON_GetArrayItem(rows, 1);
    const cJSON *ex = cJSON_GetObjectItemCaseSensitive(row, "executor");
    cr_assert(cJSON_IsString(ex) && !strcmp(ex->valuestring, "gpu"));
    cr_assert_gt(num_of(row, "routes_cpu"), 0.0);
    cr_assert_gt(num_of(row, "routes_gpu"), 0.0);
    /* the counters cover the 2 timed repetitions of 1 + 16 steps; 2 of the tiny model's 4 layers
     * are hybrid in each; every route of them is served once */
    cr_assert_eq(num_of(row, "gpu_steps"), 2 * 17.0);
    cr_assert_eq(num_of(row, "hybrid_layer_steps"), 2 * 17.0 * 2);
    cr_assert_eq(num_of(row, "routes_gpu") + num_of(row, "routes_cpu") + num_of(row, "routes_far") +
                     num_of(row, "routes_copied"), 2 * 17.0 * 4 * 4);
    cr_assert_gt(num_of(row, "cpu_expert_us"), 0.0);
    cr_assert_gt(num_of(row, "cpu_expert_gbs"), 0.0);
    /* each timed step's gap is the later of its two sides plus the round trip's own overhead, so
     * the mean GPU side is at most the mean gap; the share of steps it led is a percentage */
    const double later = num_of(row, "rt_gpu_later_pct");
    cr_assert(later >= 0 && later <= 100, "rt_gpu_later_pct %g", later);
    cr_assert_geq(num_of(row, "rt_gap_us") + 1e-6, num_of(row, "rt_gpu_us"));
    /* layers:2 keeps no expert of a hybrid layer on the GPU: no layer step is warm */
    cr_assert_eq(num_of(row, "rt_warm_pct"), 0);
    cr_assert_eq(num_of(row, "rt_warm_gpu_us"), 0);
    const double med = num_of(row, "median_tok_s");
    cr_assert_gt(med, 0.0);

    const cJSON *host = cJSON_GetObjectItemCaseSensitive(row, "host_experts");
    cr_assert(cJSON_IsString(host));
    double size = -1, pct = -1;
    char unit[8] = "";
    cr_assert_eq(sscanf(host->valuestring, "host experts in a page-locked copy (%lf %7[KMGTiB], %lf %% in huge pages)",
                        &size, unit, &pct), 3, "host line: %s", host->valuestring);
    cr_assert(size > 0 && pct >= 0 && pct <= 100, "host line: %s", host->valuestring);

    const cJSON *b = cJSON_GetObjectItemCaseSensitive(row, "bound");
    cr_assert(cJSON_IsObject(b), "a hybrid tg row without a bound");
    const double before = num_of(b, "host_read_gbs_before"), after = num_of(b, "host_read_gbs_after");
    cr_assert(before > 0 && after > 0, "probes %g / %g", before, after);
    cr_assert_eq(num_of(b, "host_read_gbs"), fmax(before, after));
    const double bound = num_of(b, "bound_ms"), serial = num_of(b, "serial_bound_ms");
    cr_assert(bound > 0 && serial >= bound, "bound %g ms, serial %g ms", bound, serial);
    cr_assert_float_eq(num_of(b, "share_of_bound"), med * bound / 1e3, 1e-9 * med * bound);
    cr_assert_float_eq(num_of(b, "share_of_serial_bound"), med * serial / 1e3, 1e-9 * med * serial);
    cr_assert_not_null(strstr(err, "host read bandwidth after the tests"), "%s", err);
    /* the host experts are in a page-locked copy (the host line): the cores and the bus read host
     * memory at once before and after the tests, and the host+bus bound reads the row's cold bytes at
     * the larger sum; without --costs that is its only rate */
    const double hb0 = num_of(b, "host_bus_gbs_before"), hb1 = num_of(b, "host_bus_gbs_after");
    cr_assert(hb0 > 0 && hb1 > 0, "two-reader probes %g / %g", hb0, hb1);
    cr_assert_eq(num_of(b, "hostbus_gbs"), fmax(hb0, hb1));
    const double hostbus = num_of(b, "hostbus_bound_ms");
    cr_assert_gt(hostbus, num_of(b, "gpu_ms") + num_of(b, "sync_ms"), "the cold bytes take no time: %g ms", hostbus);
    cr_assert_eq(num_of(b, "warm_gpu_ms"), 0);
    cr_assert_float_eq(num_of(b, "share_of_hostbus_bound"), med * hostbus / 1e3, 1e-9 * med * hostbus);
    cr_assert_not_null(strstr(err, "GB/s together"), "%s", err);
    cJSON_Delete(root);
    free(out);
}

/* Warm layer steps: with 12 of the tiny model's 16 experts resident in its first two layers (the
 * others all resident), some decode layer steps find every one of their 4 routes resident and the
 * others do not. The warm steps' GPU side (their resident experts, which no cold read overlaps)
 * goes into the bound's GPU part: gpu_ms is the step less the gaps plus that work, per token, and
 * the warm share is a percentage of the measured layer steps. */
Test(gpu_bench, warm_layer_steps_count_in_the_bounds_gpu_part)
{
    char err[16384], cmd[1024], file[300];
    snprintf(cmd, sizeof cmd, "mkmodel --preset tiny --quiet -o '%s/tiny.gguf'", tmpdir);
    cr_assert_eq(mp_test_moeplan(tmpdir, cmd, MP_TEST_STDERR, err, sizeof err), 0, "%s", err);
    snprintf(file, sizeof file, "%s/warm.txt", tmpdir);
    FILE *f = fopen(file, "w");
    cr_assert_not_null(f);
    fputs("0: 0-11\n1: 0-11\n2: all\n3: all\n", f);
    cr_assert_eq(fclose(f), 0);
    snprintf(cmd, sizeof cmd,
             "bench -m '%s/tiny.gguf' -p 64 -n 32 -r 2 -t 2 -o json --executor gpu --placement-file '%s'",
             tmpdir, file);
    cr_assert_eq(mp_test_moeplan(tmpdir, cmd, MP_TEST_STDERR, err, sizeof err), 0, "%s", err);
    char *out = mp_test_stdout(tmpdir);
    cJSON *root = cJSON_Parse(out);
    cr_assert_not_null(root, "stdout is not JSON: %s", out);
    const cJSON *row = cJSON_GetArrayItem(cJSON_GetObjectItemCaseSensitive(root, "rows"), 1);
    cr_assert_not_null(row);
    cr_assert_gt(num_of(row, "routes_cpu") + num_of(row, "routes_far"), 0.0, "no cold route ran");
    const double warm = num_of(row, "rt_warm_pct"), warm_us = num_of(row, "rt_warm_gpu_us");
    cr_assert(warm > 0 && warm < 100, "rt_warm_pct %g: expected warm and cold layer steps", warm);
    cr_assert_gt(warm_us, 0.0, "a warm step's resident experts took no GPU time");
    const cJSON *b = cJSON_GetObjectItemCaseSensitive(row, "bound");
    cr_assert(cJSON_IsObject(b), "a hybrid tg row without a bound");
    const double layers = num_of(row, "hybrid_layer_steps") / num_of(row, "gpu_steps");
    const double warm_ms = layers * warm / 100 * warm_us / 1e3, gap_ms = layers * num_of(row, "rt_gap_us") / 1e3;
    cr_assert_float_eq(num_of(b, "warm_gpu_ms"), warm_ms, 1e-6 * warm_ms + 1e-9);
    const double step_ms = 1e3 / num_of(row, "median_tok_s");
    cr_assert_float_eq(num_of(b, "gpu_ms"), fmax(0, step_ms - gap_ms + warm_ms), 1e-6 * step_ms);
    cr_assert_geq(num_of(b, "gpu_ms") + 1e-9, num_of(b, "warm_gpu_ms"));
    cJSON_Delete(root);
    free(out);
}

/* `moeplan plan`'s check on the GPU, with half the tiny model's experts on the CPU: beside the
 * measured speed, the check's CPU experts' measured time per token against the time predicted for
 * the same routes (both > 0) and the check's rows predicted again at that level (the host's memory
 * at predicted / measured times the calibration's), with that prediction's own error. -t 16: the
 * grid's threads, so that the two times compare. */
Test(gpu_bench, plan_check_predicts_again_at_its_cpu_level)
{
    static char out[1 << 16];
    char cmd[2048], costs[1024];
    cr_assert_eq(chdir(tmpdir), 0); /* the commands' relative paths are the test's files */
    snprintf(cmd, sizeof cmd, "mkmodel --preset tiny --quiet -o '%s/tiny.gguf'", tmpdir);
    cr_assert_eq(mp_test_moeplan(tmpdir, cmd, MP_TEST_MERGED, out, sizeof out), 0, "%s", out);
    mp_test_collect_tiny(tmpdir, "tiny.gguf", "p.json", "[\"Explain mixture of experts\", \"Why is the sky blue\"]",
                         "t.db");
    snprintf(costs, sizeof costs, "%s/examples/costs-h200-tiny.json", getenv("MP_SOURCE_ROOT"));
    /* the runtime's fixed part at --ctx 64 (bench's, the budget's own count), then room for about
     * half of the model's 64 experts */
    snprintf(cmd, sizeof cmd, "bench -m tiny.gguf -p 0 -n 1 -r 1 --ctx 64 --executor cpu -o json");
    cr_assert_eq(mp_test_moeplan(tmpdir, cmd, MP_TEST_STDERR, out, sizeof out), 0, "%s", out);
    char *js = mp_test_stdout(tmpdir);
    cJSON *root = cJSON_Parse(js);
    cr_assert_not_null(root, "%s", js);
    const double fixed = num_of(cJSON_GetArrayItem(cJSON_GetObjectItemCaseSensitive(root, "rows"), 0),
                                "gpu_fixed_bytes");
    cJSON_Delete(root);
    free(js);
    snprintf(cmd, sizeof cmd, "plan t.db -m tiny.gguf --costs '%s' --budget %.0fB --ctx 64 -o p.strp "
             "--verify-tokens 8 --executor gpu -r 3 -t 16", costs, fixed + 4.0 * 1048576);
    cr_assert_eq(mp_test_moeplan(tmpdir, cmd, MP_TEST_MERGED, out, sizeof out), 0, "%s", out);
    const char *m = strstr(out, "plan: measured "), *at = strstr(out, "plan: at the level the check's CPU experts ran (");
    cr_assert(m && at && m < at, "%s", out);
    double meas = 0, cpu = 0, cpu_pred = 0, level = 0, pred = 0, e = 0;
    cr_assert_eq(sscanf(m, "plan: measured %lf ms/token", &meas), 1, "%s", m);
    cr_assert_eq(sscanf(at, "plan: at the level the check's CPU experts ran (%lf ms/token of CPU experts, %lf "
                            "predicted: the host's memory at %lfx the calibration's): predicted %lf ms/token, %lf %%",
                        &cpu, &cpu_pred, &level, &pred, &e), 5, "%s", at);
    cr_assert(meas > 0 && cpu > 0 && cpu_pred > 0 && pred > 0, "%s", at);
    cr_assert_float_eq(level, cpu_pred / cpu, 0.01 + 0.001 / cpu, "%s", at);
    /* the error is the printed prediction's against the printed measurement (each rounded to 1 us) */
    cr_assert_float_eq(e, 100 * (pred - meas) / meas, 0.05 + 100 * 0.001 / meas, "%s", at);
    cr_assert_null(strstr(out, "the check ran on the CPU executor"), "%s", out);
}

/* bench of the tiny model (layers:2; -t 16: the grid's threads; `tokens`: -p and -n) with the shipped
 * tiny cost file that edit() changed (given the whole file), written as tmpdir/name: it must run
 * (what differs is a warning or a note); its stderr into err, and its JSON row's member `key` into
 * said ("" when null). */
static void bench_with_costs(void (*edit)(cJSON *costs), const char *name, const char *tokens, char *err,
                             size_t err_cap, const char *key, char *said, size_t cap)
{
    char cmd[2048], path[1024];
    /* --force: a test may bench twice (one model, two cost files) */
    snprintf(cmd, sizeof cmd, "mkmodel --preset tiny --quiet --force -o '%s/tiny.gguf'", tmpdir);
    cr_assert_eq(mp_test_moeplan(tmpdir, cmd, MP_TEST_STDERR, err, err_cap), 0, "%s", err);
    snprintf(path, sizeof path, "%s/examples/costs-h200-tiny.json", getenv("MP_SOURCE_ROOT"));
    char *text = mp_test_slurp(path);
    cr_assert_not_null(text, "%s", path);
    cJSON *costs = cJSON_Parse(text);
    cr_assert_not_null(costs, "%s", path);
    free(text);
    edit(costs);
    char *out = cJSON_Print(costs);
    cJSON_Delete(costs);
    snprintf(path, sizeof path, "%s/%s", tmpdir, name);
    FILE *f = fopen(path, "w");
    cr_assert(f && fputs(out, f) >= 0 && fclose(f) == 0);
    free(out);
    snprintf(cmd, sizeof cmd, "bench -m '%s/tiny.gguf' %s -r 1 -t 16 -o json --executor gpu --placement layers:2 "
             "--costs '%s'", tmpdir, tokens, path);
    cr_assert_eq(mp_test_moeplan(tmpdir, cmd, MP_TEST_STDERR, err, err_cap), 0, "%s", err);
    out = mp_test_stdout(tmpdir);
    cJSON *root = cJSON_Parse(out);
    cr_assert_not_null(root, "stdout is not JSON: %s", out);
    const char *v = mp_test_json_str(cJSON_GetArrayItem(cJSON_GetObjectItemCaseSensitive(root, "rows"), 0), key);
    snprintf(said, cap, "%s", v ? v : "");
    cJSON_Delete(root);
    free(out);
}

/* bench_with_costs of decode alone (-p 0 -n 8): the edits of the cost file's $.device */
static void bench_with_device(void (*edit)(cJSON *costs), const char *name, char *err, size_t err_cap, const char *key,
                              char *said, size_t cap)
{
    bench_with_costs(edit, name, "-p 0 -n 8", err, err_cap, key, said, cap);
}

static cJSON *device_of(cJSON *costs)
{
    cJSON *dev = cJSON_GetObjectItemCaseSensitive(costs, "device");
    cr_assert(cJSON_IsObject(dev));
    return dev;
}

static void another_machine(cJSON *costs)
{
    cJSON *dev = device_of(costs);
    cJSON_ReplaceItemInObjectCaseSensitive(dev, "gpu", cJSON_CreateString("Other GPU 9000"));
    cJSON_ReplaceItemInObjectCaseSensitive(dev, "cpu_logical_cores", cJSON_CreateNumber(4099));
}

/* --costs from another machine: the shipped tiny cost file with another GPU's name and another count
 * of CPUs; bench warns naming both facts with both values, the row says the same, and the run goes
 * on (it is a warning). */
Test(gpu_bench, costs_of_another_machine_are_said)
{
    char err[16384], said[1024];
    bench_with_device(another_machine, "other.json", err, sizeof err, "costs_other_machine", said, sizeof said);
    const char *w = strstr(err, "warning: --costs was calibrated on another machine (GPU Other GPU 9000, this machine's ");
    cr_assert_not_null(w, "%s", err);
    cr_assert_not_null(strstr(w, "4099 CPUs online, this machine "), "%s", w);
    cr_assert_not_null(strstr(w, "run `moeplan calibrate` on this machine"), "%s", w);
    cr_assert(strstr(said, "GPU Other GPU 9000, this machine's ") && strstr(said, "4099 CPUs online"), "%s", said);
}

static void other_knobs(cJSON *costs)
{
    cJSON *dev = device_of(costs);
    cJSON_DeleteItemFromObjectCaseSensitive(dev, "knobs");
    cJSON *knobs = cJSON_AddObjectToObject(dev, "knobs");
    cr_assert(knobs && cJSON_AddNumberToObject(knobs, "MP_GPU_GRAPHS", 0) &&
              cJSON_AddNumberToObject(knobs, "MP_HANG_DUMP_S", 600));
}

/* --costs calibrated under other knobs: the shipped tiny cost file recording MP_GPU_GRAPHS=0 and
 * MP_HANG_DUMP_S=600 (a knob that does not change the costs); bench, at the defaults, warns naming the
 * first alone with both values, its row says the same, and the run goes on. */
Test(gpu_bench, costs_of_other_knobs_are_said)
{
    char err[16384], said[1024];
    bench_with_device(other_knobs, "knobs.json", err, sizeof err, "costs_other_knobs", said, sizeof said);
    cr_assert_not_null(strstr(err, "was calibrated under other knobs (MP_GPU_GRAPHS=1 here, 0 in the costs)"), "%s", err);
    cr_assert_null(strstr(err, "MP_HANG_DUMP_S"), "%s", err);
    cr_assert_str_eq(said, "MP_GPU_GRAPHS=1 here, 0 in the costs");
}

static void as_shipped(cJSON *costs)
{
    (void)costs;
}

/* every CPU expert entry's points past 2 rows removed: decode's rows only */
static void decode_rows_only(cJSON *costs)
{
    cJSON *entry;
    cJSON_ArrayForEach(entry, cJSON_GetObjectItemCaseSensitive(costs, "cpu_expert")) {
        cJSON *points = cJSON_GetObjectItemCaseSensitive(entry, "points");
        cr_assert(cJSON_GetArraySize(points) > 2);
        while (cJSON_GetArraySize(points) > 2)
            cJSON_DeleteItemFromArray(points, cJSON_GetArraySize(points) - 1);
        cr_assert_eq(cJSON_GetObjectItemCaseSensitive(cJSON_GetArrayItem(points, 1), "rows")->valueint, 2);
    }
}

/* --costs whose CPU experts were measured at decode's rows only (1 and 2): a prompt's prices past
 * them would run along a flat line, so bench's prefill keeps the executor's measured rule for
 * copies and says so, naming the rows and the grid that prices them; the shipped file as it is
 * prices them and says nothing of it, nor does a bench of decode alone given the short file. */
Test(gpu_bench, prefill_prices_need_the_cpu_measured_at_a_prompts_rows)
{
    char err[16384], said[64];
    bench_with_costs(decode_rows_only, "decode-rows.json", "-p 64 -n 0", err, sizeof err, "test", said, sizeof said);
    const char *note = strstr(err, "measured the CPU experts up to 2 rows, under the 16 a prompt's prices need");
    cr_assert_not_null(note, "%s", err);
    cr_assert_not_null(strstr(note, "a prompt's copies, if any, follow the CPU time measured in the run; "
                                    "`moeplan calibrate --rows 1,4,16,64` prices them"), "%s", note);
    cr_assert_str_eq(said, "pp64");
    bench_with_costs(as_shipped, "shipped.json", "-p 64 -n 0", err, sizeof err, "test", said, sizeof said);
    cr_assert_null(strstr(err, "a prompt's prices need"), "%s", err);
    /* decode alone runs no prompt: nothing to say of its prices */
    bench_with_costs(decode_rows_only, "decode-rows.json", "-p 0 -n 8", err, sizeof err, "test", said, sizeof said);
    cr_assert_null(strstr(err, "a prompt's prices need"), "%s", err);
    cr_assert_str_eq(said, "tg8");
}
