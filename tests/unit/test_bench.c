/* tests/unit/test_bench.c — `moeplan bench` as a user runs it, and the statistics and token-id
 * helpers of runtime/bench.h.
 *
 * The CLI tests run the built binary on tests/fixtures/hf/qwen3moe-tiny-f32.gguf (small and quick to
 * load) and check the output's structure: one JSON row per (test, size) with R positive samples and
 * consistent statistics, the placement and budget and the build that measured in every row, the
 * markdown table, strict flag parsing (exit 2, one line), and a test longer than the context
 * (exit 1, no stdout). Speeds are never compared against a number: only that they are measured
 * (> 0). The helper tests use fresh random inputs, seeded from the clock (or MP_TEST_SEED); the
 * seed is printed on failure. */
#include <cjson/cJSON.h>
#include <criterion/criterion.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "runtime/bench.h"
#include "base/build_info.h"
#include "runtime/gpu.h"
#include "base/knobs.h"
#include "tests/unit/cli_util.h"

static char tmpdir[256];
static char model[4096];

static void setup(void)
{
    snprintf(tmpdir, sizeof tmpdir, "/tmp/mp_test_bench_XXXXXX");
    cr_assert_not_null(mkdtemp(tmpdir));
    const char *root = getenv("MP_SOURCE_ROOT");
    cr_assert_not_null(root, "MP_SOURCE_ROOT is not set (run through meson test)");
    snprintf(model, sizeof model, "%s/tests/fixtures/hf/qwen3moe-tiny-f32.gguf", root);
}

static void teardown(void)
{
    char cmd[300];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", tmpdir);
    cr_assert_eq(system(cmd), 0);
}

TestSuite(bench, .init = setup, .fini = teardown);

/* Run `moeplan bench -m MODEL ARGS`; stderr into err, stdout into a malloc'd string (*out). */
static int bench(const char *args, char *err, size_t cap, char **out)
{
    char full[8192];
    snprintf(full, sizeof full, "bench -m '%s' %s", model, args);
    const int rc = mp_test_moeplan(tmpdir, full, MP_TEST_STDERR, err, cap);
    *out = mp_test_stdout(tmpdir);
    return rc;
}

static const char *str_of(const cJSON *o, const char *k)
{
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, k);
    cr_assert(cJSON_IsString(v), "field %s is not a string", k);
    return v->valuestring;
}

static double num_of(const cJSON *o, const char *k)
{
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, k);
    cr_assert(cJSON_IsNumber(v), "field %s is not a number", k);
    return v->valuedouble;
}

/* Every row: R positive samples whose statistics match the reported ones. */
static void check_row(const cJSON *row, const char *test, const char *kind, double n, int reps)
{
    cr_assert_str_eq(str_of(row, "test"), test);
    cr_assert_str_eq(str_of(row, "kind"), kind);
    cr_assert_eq(num_of(row, "n_tokens"), n);
    cr_assert_eq(num_of(row, "repetitions"), reps);
    char why[256];
    /* every test here passes --executor cpu, except the default one, which gets the GPU on a
     * machine that has one */
    const bool gpu = !strcmp(str_of(row, "executor"), "gpu");
    cr_assert(gpu ? mp_gpu_available(why, sizeof why) : !strcmp(str_of(row, "executor"), "cpu"),
              "executor %s", str_of(row, "executor"));
    cr_assert_str_eq(str_of(row, "moeplan_version"), MP_VERSION);
    cr_assert_str_eq(str_of(row, "moeplan_commit"), mp_build_commit());
    cr_assert_str_eq(str_of(row, "moeplan_build"), mp_build_options());
    cr_assert_str_eq(str_of(row, "model_file"), "qwen3moe-tiny-f32.gguf");
    cr_assert_str_eq(str_of(row, "arch"), "qwen3moe");
    cr_assert_str_eq(str_of(row, "quant"), "F32");
    cr_assert_gt(num_of(row, "model_size_bytes"), 0);
    cr_assert_gt(num_of(row, "threads"), 0);
    cr_assert_gt(strlen(str_of(row, "isa")), 0);
    const cJSON *s = cJSON_GetObjectItemCaseSensitive(row, "samples_tok_s");
    cr_assert(cJSON_IsArray(s));
    cr_assert_eq(cJSON_GetArraySize(s), reps, "%s: %d samples, want %d", test,
                 cJSON_GetArraySize(s), reps);
    double lo = INFINITY, hi = -INFINITY, sum = 0;
    const cJSON *v;
    cJSON_ArrayForEach(v, s) {
        cr_assert(cJSON_IsNumber(v));
        cr_assert_gt(v->valuedouble, 0.0, "%s: sample %g tok/s", test, v->valuedouble);
        lo = fmin(lo, v->valuedouble);
        hi = fmax(hi, v->valuedouble);
        sum += v->valuedouble;
    }
    cr_assert_eq(num_of(row, "min_tok_s"), lo);
    cr_assert_eq(num_of(row, "max_tok_s"), hi);
    const double med = num_of(row, "median_tok_s");
    cr_assert(med >= lo && med <= hi, "%s: median %g outside [%g, %g]", test, med, lo, hi);
    cr_assert_float_eq(num_of(row, "mean_tok_s"), sum / reps, 1e-9 * hi);
    cr_assert_geq(num_of(row, "stddev_tok_s"), 0.0);
}

Test(bench, json_rows_with_placement_and_budget)
{
    char err[16384], *out;
    const int rc = bench("-p 16,32 -n 8 -r 3 -t 1 -o json --placement layers:1 --gpu-budget 1GiB --executor cpu",
                         err, sizeof err, &out);
    cr_assert_eq(rc, 0, "rc %d: %s", rc, err);
    cJSON *root = cJSON_Parse(out);
    cr_assert_not_null(root, "stdout is not JSON: %s", out);
    const cJSON *rows = cJSON_GetObjectItemCaseSensitive(root, "rows");
    cr_assert(cJSON_IsArray(rows));
    cr_assert_eq(cJSON_GetArraySize(rows), 3);
    check_row(cJSON_GetArrayItem(rows, 0), "pp16", "pp", 16, 3);
    check_row(cJSON_GetArrayItem(rows, 1), "pp32", "pp", 32, 3);
    check_row(cJSON_GetArrayItem(rows, 2), "tg8", "tg", 8, 3);
    const cJSON *row;
    cJSON_ArrayForEach(row, rows) {
        cr_assert_str_eq(str_of(row, "placement"), "layers:1");
        cr_assert_str_eq(str_of(row, "gpu_budget"), "1GiB");
        cr_assert_eq(num_of(row, "gpu_budget_bytes"), 1073741824.0);
        cr_assert_eq(num_of(row, "threads"), 1);
        /* layers:1 keeps the first layer's experts on the host, the rest resident */
        cr_assert_gt(num_of(row, "gpu_expert_bytes"), 0);
        cr_assert_gt(num_of(row, "host_expert_bytes"), 0);
        /* the decode bound is a GPU executor's: null on CPU rows, and no bandwidth probe ran */
        cr_assert(cJSON_IsNull(cJSON_GetObjectItemCaseSensitive(row, "bound")));
        /* so are its counters: no step, no CPU expert time */
        cr_assert_eq(num_of(row, "gpu_steps"), 0);
        cr_assert_eq(num_of(row, "cpu_expert_us"), 0);
        cr_assert_eq(num_of(row, "rt_gpu_us"), 0);
        cr_assert_eq(num_of(row, "rt_gpu_later_pct"), 0);
        cr_assert_eq(num_of(row, "rt_warm_pct"), 0);
        cr_assert_eq(num_of(row, "rt_warm_gpu_us"), 0);
    }
    cr_assert_null(strstr(err, "host read bandwidth"), "%s", err);
    cr_assert_eq(num_of(cJSON_GetArrayItem(rows, 2), "n_prompt"), 1);
    cr_assert_eq(num_of(cJSON_GetArrayItem(rows, 2), "n_gen"), 8);
    cr_assert_not_null(strstr(str_of(root, "note"), "executor cpu"));
    cr_assert_str_eq(str_of(root, "moeplan_version"), MP_VERSION);
    cr_assert_str_eq(str_of(root, "moeplan_commit"), mp_build_commit());
    /* progress: a warm-up and every repetition of every test */
    cr_assert_not_null(strstr(err, "pp32: warm-up"), "%s", err);
    cr_assert_not_null(strstr(err, "tg8: repetition 3/3"), "%s", err);
    cJSON_Delete(root);
    free(out);
}

/* Every JSON row records the knobs the run had: every knob of the table, and which came from the
 * environment or a flag (--no-simd is the flag form of MP_ISA=scalar). */
Test(bench, json_rows_record_the_knobs)
{
    for (int i = 0; i < mp_knob_count(); i++)
        unsetenv(mp_knob_at(i)->name);
    cr_assert_eq(setenv("MP_POOL_PIN", "1", 1), 0);
    cr_assert_eq(setenv("MP_ISA", "avx2", 1), 0);
    char err[16384], *out;
    const int rc = bench("-p 8 -n 2 -r 1 -t 1 -o json --executor cpu --no-simd", err, sizeof err, &out);
    unsetenv("MP_POOL_PIN");
    unsetenv("MP_ISA");
    cr_assert_eq(rc, 0, "rc %d: %s", rc, err);
    cJSON *root = cJSON_Parse(out);
    cr_assert_not_null(root, "stdout is not JSON: %s", out);
    const cJSON *rows = cJSON_GetObjectItemCaseSensitive(root, "rows"), *row;
    cr_assert_eq(cJSON_GetArraySize(rows), 2);
    cJSON_ArrayForEach(row, rows) {
        cr_assert_str_eq(str_of(row, "isa"), "scalar");
        const cJSON *knobs = cJSON_GetObjectItemCaseSensitive(row, "knobs");
        cr_assert(cJSON_IsObject(knobs));
        cr_assert_eq(cJSON_GetArraySize(knobs), mp_knob_count());
        for (int i = 0; i < mp_knob_count(); i++)
            cr_assert_not_null(cJSON_GetObjectItemCaseSensitive(knobs, mp_knob_at(i)->name), "%s not recorded",
                               mp_knob_at(i)->name);
        cr_assert_str_eq(str_of(knobs, "MP_ISA"), "scalar", "the flag wins over the environment");
        cr_assert_eq(num_of(knobs, "MP_POOL_PIN"), 1);
        cr_assert_eq(num_of(knobs, "MP_MOE_PIPE_UNITS"), 8);
        cr_assert_str_eq(str_of(knobs, "MP_GPU_HOST_EXPERTS"), "pinned");
        const cJSON *set = cJSON_GetObjectItemCaseSensitive(row, "knobs_set");
        cr_assert_eq(cJSON_GetArraySize(set), 2);
        cr_assert_str_eq(str_of(set, "MP_ISA"), "flag");
        cr_assert_str_eq(str_of(set, "MP_POOL_PIN"), "env");
    }
    cJSON_Delete(root);
    free(out);
}

Test(bench, defaults_to_cpu_placement_without_budget)
{
    char err[16384], *out;
    const int rc = bench("-p 8 -n 0 -r 1 -o json", err, sizeof err, &out);
    cr_assert_eq(rc, 0, "rc %d: %s", rc, err);
    cJSON *root = cJSON_Parse(out);
    cr_assert_not_null(root, "stdout is not JSON: %s", out);
    const cJSON *rows = cJSON_GetObjectItemCaseSensitive(root, "rows");
    cr_assert_eq(cJSON_GetArraySize(rows), 1);
    const cJSON *row = cJSON_GetArrayItem(rows, 0);
    check_row(row, "pp8", "pp", 8, 1);
    /* the default executor: the GPU with `fill` under the free memory where a device exists */
    char why[256];
    const bool gpu = mp_gpu_available(why, sizeof why);
    cr_assert_str_eq(str_of(row, "executor"), gpu ? "gpu" : "cpu");
    cr_assert_str_eq(str_of(row, "placement"), gpu ? "fill" : "cpu");
    cr_assert(cJSON_IsNull(cJSON_GetObjectItemCaseSensitive(row, "gpu_budget")));
    cr_assert_eq(num_of(row, "gpu_expert_bytes"), 0);
    cJSON_Delete(root);
    free(out);
}

Test(bench, markdown_table_by_default)
{
    char err[16384], *out;
    const int rc = bench("-p 16 -n 4 -r 2 --placement gpu --executor cpu", err, sizeof err, &out);
    cr_assert_eq(rc, 0, "rc %d: %s", rc, err);
    cr_assert_not_null(strstr(out, "| model |"), "%s", out);
    cr_assert_not_null(strstr(out, "| pp16 |"), "%s", out);
    cr_assert_not_null(strstr(out, "| tg4 |"), "%s", out);
    cr_assert_not_null(strstr(out, "executor cpu: every expert ran on the CPU"), "%s", out);
    int table_rows = 0;
    for (const char *p = out; (p = strstr(p, "| qwen3moe-tiny-f32.gguf |")); p++) {
        table_rows++;
        const char *eol = strchr(p, '\n');
        cr_assert_not_null(eol);
        cr_assert(memmem(p, (size_t)(eol - p), "| gpu |", 7), "placement missing: %.*s",
                  (int)(eol - p), p);
    }
    cr_assert_eq(table_rows, 2, "%s", out);
    free(out);
}

/* --dry-run plans what the tests would run with and stops: the plan on stdout (md: one line;
 * json: the budget's parts, the experts per layer), nothing measured on stderr, and a budget too
 * small for the tests' context and batch refused as a real run refuses it (exit 1, one line). */
Test(bench, dry_run_prints_the_plan_and_runs_nothing)
{
    char err[16384], *out;
    int rc = bench("-p 16,32 -n 8 -t 1 --dry-run --executor cpu --placement layers:1 --gpu-budget 1GiB",
                   err, sizeof err, &out);
    cr_assert_eq(rc, 0, "rc %d: %s", rc, err);
    cr_assert_eq(strncmp(out, "plan: executor cpu; context 32; layers:1: 16/24 experts on the GPU", 66), 0,
                 "%s", out);
    cr_assert_eq(strchr(out, '\n'), out + strlen(out) - 1, "not one line: %s", out);
    cr_assert_null(strstr(err, "repetition"), "something ran: %s", err);
    cr_assert_null(strstr(err, "warm-up"), "something ran: %s", err);
    free(out);

    /* every expert on the GPU, no budget: the fixed part and all the experts' bytes */
    rc = bench("-p 16 -n 8 -t 1 --dry-run --executor cpu --placement gpu -o json", err, sizeof err, &out);
    cr_assert_eq(rc, 0, "rc %d: %s", rc, err);
    cJSON *all = cJSON_Parse(out);
    cr_assert_not_null(all, "stdout is not JSON: %s", out);
    cr_assert_eq(num_of(all, "host_expert_bytes"), 0);
    cr_assert_eq(num_of(all, "experts_resident"), 24);
    const double experts = num_of(all, "gpu_expert_bytes");
    const double budget = num_of(all, "gpu_dense_bytes") + num_of(all, "gpu_kv_bytes") +
                          num_of(all, "gpu_scratch_bytes") + floor(experts / 2);
    cJSON_Delete(all);
    free(out);
    /* a budget with room for half the experts */
    char args[256];
    snprintf(args, sizeof args, "-p 16 -n 8 -t 1 --dry-run --executor cpu --placement fill --gpu-budget %.0f -o json",
             budget);
    rc = bench(args, err, sizeof err, &out);
    cr_assert_eq(rc, 0, "rc %d: %s", rc, err);
    cJSON *root = cJSON_Parse(out);
    cr_assert_not_null(root, "stdout is not JSON: %s", out);
    cr_assert_str_eq(str_of(root, "executor"), "cpu");
    cr_assert_str_eq(str_of(root, "placement"), "fill");
    cr_assert_eq(num_of(root, "gpu_budget_bytes"), budget);
    cr_assert_eq(num_of(root, "n_ctx"), 32, "the context holds the staging batch"); /* pp16 needs 16 */
    const double fixed = num_of(root, "gpu_dense_bytes") + num_of(root, "gpu_kv_bytes") +
                         num_of(root, "gpu_scratch_bytes");
    const double gpu = num_of(root, "gpu_expert_bytes"), host = num_of(root, "host_expert_bytes");
    cr_assert_leq(fixed + gpu, budget, "the plan exceeds its budget");
    cr_assert_eq(gpu + host, experts);
    cr_assert_eq(gpu, 12 * experts / 24, "fill should place 12 of the 24 equal experts: %g of %g bytes", gpu,
                 experts);
    const cJSON *per = cJSON_GetObjectItemCaseSensitive(root, "resident_per_layer");
    cr_assert(cJSON_IsArray(per) && cJSON_GetArraySize(per) == 3);
    double sum = 0;
    const cJSON *v;
    cJSON_ArrayForEach(v, per) {
        cr_assert(cJSON_IsNumber(v) && v->valuedouble >= 0 && v->valuedouble <= 8);
        sum += v->valuedouble;
    }
    cr_assert_eq(sum, num_of(root, "experts_resident"));
    cr_assert_eq(num_of(root, "experts"), 24);
    /* every expert of the fixture has the same bytes: the split is proportional */
    cr_assert_float_eq(gpu / (gpu + host), sum / 24.0, 1e-12);
    cJSON_Delete(root);
    free(out);

    rc = bench("-p 16 -n 8 -t 1 --dry-run --executor cpu --placement layers:1 --gpu-budget 1MiB", err, sizeof err,
               &out);
    cr_assert_eq(rc, 1, "rc %d: %s", rc, err);
    cr_assert_not_null(strstr(err, "do not fit"), "%s", err);
    cr_assert_eq(strchr(err, '\n'), err + strlen(err) - 1, "not one line: %s", err);
    cr_assert_str_empty(out);
    free(out);
}

Test(bench, bad_flags_exit_2_with_one_line)
{
    static const char *bad[] = {
        "-p 1x",     "-p 16,,8",  "-p ''",      "-p 16, ",     "-n -3",   "-r 0",   "-r 1001",
        "-r 2.5",    "-t 0",      "-t abc",     "--bogus 1",   "-o xml",  "-p",     "--ctx 0",
        "--seed -1", "-p 0 -n 0", "--placement nowhere", "--gpu-budget 12XB", "stray",
    };
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
        char err[4096], *out;
        const int rc = bench(bad[i], err, sizeof err, &out);
        cr_assert_eq(rc, 2, "'%s': exit %d, want 2: %s", bad[i], rc, err);
        cr_assert_eq(strncmp(err, "moeplan bench: error: ", 22), 0, "'%s': %s", bad[i], err);
        cr_assert_eq(strchr(err, '\n'), err + strlen(err) - 1, "'%s': not one line: %s", bad[i], err);
        cr_assert_str_empty(out, "'%s' printed to stdout: %s", bad[i], out);
        free(out);
    }
    /* a number out of range says what it takes */
    static const char *said[][2] = {
        {"-r 0", "invalid value '0' for -r: expected an integer 1..1000"},
        {"-t abc", "invalid value 'abc' for -t: expected an integer 1..1024"},
        {"-p 16,,8", "invalid value '16,,8' for -p: expected 0, or up to 32 sizes 1..1048576, comma-separated"},
        {"--seed -1", "invalid value '-1' for --seed: expected an unsigned 64-bit integer"},
    };
    for (size_t i = 0; i < sizeof said / sizeof *said; i++) {
        char err[4096], *out;
        cr_assert_eq(bench(said[i][0], err, sizeof err, &out), 2, "%s", err);
        cr_assert_not_null(strstr(err, said[i][1]), "'%s': %s", said[i][0], err);
        free(out);
    }
}

Test(bench, test_longer_than_context_is_refused)
{
    char err[4096], *out;
    /* the fixture's trained context is 256 positions */
    int rc = bench("-p 300 -n 0", err, sizeof err, &out);
    cr_assert_eq(rc, 1, "%s", err);
    cr_assert_not_null(strstr(err, "pp300 needs 300 positions"), "%s", err);
    cr_assert_not_null(strstr(err, "--ctx"), "%s", err);
    cr_assert_str_empty(out);
    free(out);
    /* tg N needs 1 + N positions */
    rc = bench("-p 0 -n 50 --ctx 50", err, sizeof err, &out);
    cr_assert_eq(rc, 1, "%s", err);
    cr_assert_not_null(strstr(err, "tg50 needs 51 positions"), "%s", err);
    cr_assert_str_empty(out);
    free(out);
}

Test(bench, missing_model_fails_naming_it)
{
    char err[4096];
    const int rc = mp_test_moeplan(tmpdir, "bench -m /nonexistent/model.gguf", MP_TEST_STDERR,
                                   err, sizeof err);
    cr_assert_eq(rc, 1, "%s", err);
    cr_assert_eq(strncmp(err, "moeplan bench: error: ", 22), 0, "%s", err);
    cr_assert_not_null(strstr(err, "/nonexistent/model.gguf"), "%s", err);
}

/* ---- helpers of runtime/bench.h on fresh random inputs ---- */

static uint64_t test_seed(void)
{
    const char *env = getenv("MP_TEST_SEED");
    return env ? strtoull(env, NULL, 10) : (uint64_t)time(NULL);
}

static int cmp(const void *a, const void *b)
{
    const double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

Test(bench, stats_match_a_direct_computation)
{
    const uint64_t seed = test_seed();
    srand((unsigned)seed);
    for (int iter = 0; iter < 200; iter++) {
        const int n = 1 + rand() % 40;
        double v[40], sorted[40];
        for (int i = 0; i < n; i++)
            v[i] = sorted[i] = 1.0 + 1000.0 * rand() / RAND_MAX;
        double copy[40];
        memcpy(copy, v, sizeof copy);
        mp_bench_stats st;
        mp_bench_stats_compute(v, n, &st);
        cr_assert_arr_eq(v, copy, (size_t)n * sizeof *v, "input modified (seed %llu)",
                         (unsigned long long)seed);
        qsort(sorted, (size_t)n, sizeof *sorted, cmp);
        const double med = n % 2 ? sorted[n / 2] : (sorted[n / 2 - 1] + sorted[n / 2]) / 2;
        double mean = 0, ss = 0;
        for (int i = 0; i < n; i++)
            mean += v[i] / n;
        for (int i = 0; i < n; i++)
            ss += (v[i] - mean) * (v[i] - mean);
        const double sd = n > 1 ? sqrt(ss / (n - 1)) : 0;
        cr_assert_eq(st.min, sorted[0], "seed %llu", (unsigned long long)seed);
        cr_assert_eq(st.max, sorted[n - 1], "seed %llu", (unsigned long long)seed);
        cr_assert_eq(st.median, med, "seed %llu n %d", (unsigned long long)seed, n);
        cr_assert_float_eq(st.mean, mean, 1e-9, "seed %llu", (unsigned long long)seed);
        cr_assert_float_eq(st.stddev, sd, 1e-9, "seed %llu", (unsigned long long)seed);
    }
}

Test(bench, token_ids_are_valid_and_deterministic)
{
    const uint64_t seed = test_seed();
    srand((unsigned)seed);
    const int64_t n_vocab = 1000 + rand() % 200000, n = 64 + rand() % 4096;
    int32_t *a = malloc((size_t)n * sizeof *a), *b = malloc((size_t)n * sizeof *b);
    cr_assert(a && b);
    mp_bench_tokens(seed, MP_BENCH_PP, n_vocab, a, n);
    mp_bench_tokens(seed, MP_BENCH_PP, n_vocab, b, n);
    cr_assert_arr_eq(a, b, (size_t)n * sizeof *a, "seed %llu", (unsigned long long)seed);
    for (int64_t i = 0; i < n; i++)
        cr_assert(a[i] >= 0 && a[i] < n_vocab, "seed %llu: id %d of vocab %lld",
                  (unsigned long long)seed, a[i], (long long)n_vocab);
    /* another seed gives another sequence (64 equal ids out of >= 1000 would be a bug) */
    mp_bench_tokens(seed + 1, MP_BENCH_PP, n_vocab, b, n);
    cr_assert_neq(memcmp(a, b, 64 * sizeof *a), 0, "seed %llu", (unsigned long long)seed);
    cr_assert_eq(mp_bench_positions(MP_BENCH_PP, 512), 512);
    cr_assert_eq(mp_bench_positions(MP_BENCH_TG, 128), 129);
    free(a);
    free(b);
}

/* The decode bound's arithmetic (runtime/bench.h), by hand: a 10 ms step with 4 ms of GPU idle
 * gaps leaves a 6 ms GPU part; 2 GB of CPU expert bytes at 100 GB/s is 20 ms; with 1 ms of round
 * trips the bound is max(6, 20) + 1 = 21 ms. The host+bus bound reads every cold byte at both
 * readers' rates: measured at once where given, else each alone summed. Then with the GPU part the
 * larger. */
Test(bench, decode_bound_by_hand)
{
    mp_bench_bound b;
    mp_bench_decode_bound(10.0, 4.0, 0, 2e9, 100.0, 1.0, 0, 0, 0, &b);
    cr_assert_float_eq(b.gpu_ms, 6.0, 1e-12);
    cr_assert_float_eq(b.cpu_ms, 20.0, 1e-12);
    cr_assert_float_eq(b.sync_ms, 1.0, 1e-12);
    cr_assert_float_eq(b.bound_ms, 21.0, 1e-12);
    cr_assert_float_eq(b.serial_ms, 6.0 + 20.0 + 1.0, 1e-12); /* no overlap: every part */
    cr_assert_eq(b.hostbus_ms, 0, "the bus's rate unknown: no host+bus bound");
    /* the same step beside 1 GB of far routes, a 50 GB/s bus: 3 GB of cold bytes at 150 GB/s */
    mp_bench_decode_bound(10.0, 4.0, 0, 2e9, 100.0, 1.0, 3e9, 50.0, 0, &b);
    cr_assert_float_eq(b.hostbus_ms, 6.0 + 20.0 + 1.0, 1e-12);
    cr_assert_float_eq(b.serial_ms, 27.0, 1e-12);
    /* the two readers measured at once drew 120 GB/s: 3 GB take 25 ms; the bus's rate alone is not
     * needed then */
    mp_bench_decode_bound(10.0, 4.0, 0, 2e9, 100.0, 1.0, 3e9, 50.0, 120.0, &b);
    cr_assert_float_eq(b.hostbus_ms, 6.0 + 25.0 + 1.0, 1e-12);
    mp_bench_decode_bound(10.0, 4.0, 0, 2e9, 100.0, 1.0, 3e9, 0, 120.0, &b);
    cr_assert_float_eq(b.hostbus_ms, 6.0 + 25.0 + 1.0, 1e-12);
    /* a together probe below the cores' own rate (a slow moment) never makes the floor slower than
     * the cores alone: 3 GB at 100 GB/s */
    mp_bench_decode_bound(10.0, 4.0, 0, 2e9, 100.0, 1.0, 3e9, 50.0, 80.0, &b);
    cr_assert_float_eq(b.hostbus_ms, 6.0 + 30.0 + 1.0, 1e-12);
    mp_bench_decode_bound(10.0, 1.0, 0, 1e8, 100.0, 0.5, 0, 0, 0, &b); /* cpu 1 ms < gpu 9 ms */
    cr_assert_float_eq(b.bound_ms, 9.5, 1e-12);
    mp_bench_decode_bound(1.0, 2.0, 0, 0, 0, 0, 0, 0, 0, &b); /* gaps over the step (noise): no negative part */
    cr_assert_float_eq(b.gpu_ms, 0.0, 1e-12);
    /* 1.5 ms of the 4 ms of gaps were the GPU's resident experts in warm layer steps (no cold route,
     * nothing to overlap them): the GPU part holds them, and every bound with it */
    mp_bench_decode_bound(10.0, 4.0, 1.5, 2e9, 100.0, 1.0, 3e9, 50.0, 120.0, &b);
    cr_assert_float_eq(b.gpu_ms, 7.5, 1e-12);
    cr_assert_float_eq(b.warm_ms, 1.5, 1e-12);
    cr_assert_float_eq(b.bound_ms, 21.0, 1e-12); /* the CPU's 20 ms stays the longer */
    cr_assert_float_eq(b.serial_ms, 7.5 + 20.0 + 1.0, 1e-12);
    cr_assert_float_eq(b.hostbus_ms, 7.5 + 25.0 + 1.0, 1e-12);
    mp_bench_decode_bound(10.0, 1.0, 0.5, 1e8, 100.0, 0.5, 0, 0, 0, &b); /* cpu 1 ms < gpu 9.5 ms */
    cr_assert_float_eq(b.bound_ms, 10.0, 1e-12);
    /* warm work is inside the gaps: never more of it than they hold (noise), never negative */
    mp_bench_decode_bound(10.0, 4.0, 5.0, 0, 0, 0, 0, 0, 0, &b);
    cr_assert_float_eq(b.gpu_ms, 10.0, 1e-12);
    cr_assert_float_eq(b.warm_ms, 4.0, 1e-12);
    mp_bench_decode_bound(10.0, 4.0, -1.0, 0, 0, 0, 0, 0, 0, &b);
    cr_assert_float_eq(b.gpu_ms, 6.0, 1e-12);
    cr_assert_float_eq(b.warm_ms, 0.0, 1e-12);
}

/* The host bandwidth probe returns a positive rate for a small buffer, also one smaller than a chunk
 * a thread, and 0 when it is asked for nonsense (no threads, no repetitions). */
Test(bench, host_read_bandwidth_probe)
{
    const double gbs = mp_bench_host_read_gbs((size_t)64 << 20, 2, 2);
    cr_assert(gbs > 0.1 && gbs < 10000, "%g GB/s", gbs);
    cr_assert_eq(mp_bench_host_read_gbs((size_t)64 << 20, 0, 2), 0);
    cr_assert_eq(mp_bench_host_read_gbs((size_t)64 << 20, 2, 0), 0);
    /* fewer bytes than a 1 MiB chunk a thread (a host of many threads with a small probe): the buffer
     * grows to one chunk a thread and the probe still measures */
    const double small = mp_bench_host_read_gbs(4096, 4, 1);
    cr_assert(small > 0.1 && small < 10000, "%g GB/s", small);
}
