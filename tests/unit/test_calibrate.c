/* tests/unit/test_calibrate.c — `moeplan calibrate` end to end on a tiny synthetic model: the file
 * it writes loads with mp_costs_load and has the expected structure (every curve at the asked
 * rows, positive medians, the model's shape and expert bytes, the GPU parts present or listed in
 * $.missing); bad flags are usage errors; an existing output is refused without --force; and a
 * cost file without GPU measurements is refused by `moeplan simulate`.
 *
 * No assertion is about speed: the one ordering check (64 rows of one expert do not take less
 * than a quarter of 1 row's time, 64x the work) has a margin no scheduler hiccup can cross in
 * the median of 5 repetitions. */
#include <criterion/criterion.h>
#include <cjson/cJSON.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "collector/import.h"
#include "kernels/quant.h"
#include "runtime/model.h"
#include "simulator/calibrate_impl.h"
#include "runtime/costs.h"
#include "runtime/decide.h"
#include "tests/unit/cli_util.h"

static char dir[256], model[512];

static int run_cli(const char *args, char *out, size_t cap)
{
    const char *exe = getenv("MP_MOEPLAN");
    cr_assert_not_null(exe, "MP_MOEPLAN is not set (run through meson test)");
    char cmd[4096];
    snprintf(cmd, sizeof cmd, "cd '%s' && '%s' %s 2>&1", dir, exe, args);
    FILE *f = popen(cmd, "r");
    cr_assert_not_null(f);
    size_t n = fread(out, 1, cap - 1, f);
    out[n] = 0;
    int st = pclose(f);
    return WIFEXITED(st) ? WEXITSTATUS(st) : -1;
}

/* The tiny model takes seconds to make (its vocabulary is learned), so every test of one run
 * shares it: Criterion forks each test from one runner process, whose pid names the directory;
 * the runner removes it after the last test. */
static void model_dir(char *out, size_t cap, pid_t runner)
{
    snprintf(out, cap, "/tmp/mp_test_calibrate_model_%ld", (long)runner);
}

static void setup(void)
{
    snprintf(dir, sizeof dir, "/tmp/mp_test_calibrate_XXXXXX");
    cr_assert_not_null(mkdtemp(dir));
    char mdir[256];
    model_dir(mdir, sizeof mdir, getppid());
    snprintf(model, sizeof model, "%s/tiny.gguf", mdir);
    if (access(model, R_OK) != 0) {
        static char out[1 << 14];
        char args[600];
        mkdir(mdir, 0700);
        snprintf(args, sizeof args, "mkmodel --preset tiny --quiet -o '%s'", model);
        cr_assert_eq(run_cli(args, out, sizeof out), 0, "%s", out);
    }
    char link[600];
    snprintf(link, sizeof link, "%s/tiny.gguf", dir);
    cr_assert_eq(symlink(model, link), 0);
}

static void teardown(void)
{
    char cmd[600];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
    cr_assert_eq(system(cmd), 0);
}

ReportHook(POST_ALL)(struct criterion_global_stats *stats)
{
    char mdir[256], cmd[600];
    model_dir(mdir, sizeof mdir, getpid());
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", mdir);
    if (system(cmd) != 0)
        fprintf(stderr, "test_calibrate: could not remove %s\n", mdir);
}

TestSuite(calibrate, .init = setup, .fini = teardown);

static void path_in_dir(char *out, size_t cap, const char *name)
{
    snprintf(out, cap, "%s/%s", dir, name);
}

static void check_curve(const mp_cost_curve *c, const int *rows, int n, const char *what)
{
    cr_assert_eq(c->n_points, n, "%s: %d points, expected %d", what, c->n_points, n);
    for (int i = 0; i < n; i++) {
        cr_assert_eq(c->x[i], rows[i], "%s: point %d at %g rows, expected %d", what, i, c->x[i], rows[i]);
        cr_assert(c->y[i].median_ns > 0, "%s: point %d: median %g ns, expected > 0", what, i, c->y[i].median_ns);
        cr_assert(c->y[i].spread_ns >= 0, "%s: point %d: spread %g", what, i, c->y[i].spread_ns);
    }
}

Test(calibrate, quick_run_writes_a_cost_file_that_loads)
{
    static char out[1 << 16];
    cr_assert_eq(run_cli("calibrate -m tiny.gguf --out costs.json --quick --threads 1,2 --rows 64,1,4,4 --reps 5", out,
                         sizeof out),
                 0, "%s", out);
    /* progress on stderr names what it measures, and says what it could not */
    cr_assert_not_null(strstr(out, "calibrate: cpu expert"), "%s", out);
    cr_assert_not_null(strstr(out, "calibrate: non-MoE step"), "%s", out);
    cr_assert_not_null(strstr(out, "calibrate: wrote costs.json"), "%s", out);

    char path[600];
    path_in_dir(path, sizeof path, "costs.json");
    mp_costs c;
    mp_error err;
    cr_assert_eq(mp_costs_load(path, &c, &err), MP_OK, "%s", err.msg);
    mp_model *m;
    cr_assert_eq(mp_model_load(model, &m, &err), MP_OK, "%s", err.msg);

    const int rows[] = {1, 4, 64}; /* sorted, the repeat dropped */
    cr_assert_eq(c.n_cpu_expert, 2, "one expert kind (q4_k_m: Q4_K gate/up, Q6_K down) x 2 thread counts");
    for (int i = 0; i < c.n_cpu_expert; i++) {
        const mp_cost_expert *e = &c.cpu_expert[i];
        cr_assert_str_eq(e->quant, "Q4_K/Q6_K");
        cr_assert_eq(e->n_embd, m->hp.n_embd);
        cr_assert_eq(e->n_ff, m->hp.n_ff_exp);
        cr_assert_eq(e->expert_bytes, mp_model_expert_bytes(m, 0));
        cr_assert_eq(e->threads, i + 1);
        check_curve(&e->by_rows, rows, 3, "cpu_expert");
        /* 64 rows are 64x the work of 1 row: never 4x cheaper, whatever the noise */
        cr_assert(4 * e->by_rows.y[2].median_ns >= e->by_rows.y[0].median_ns,
                  "threads %d: 64 rows %g ns, 1 row %g ns", e->threads, e->by_rows.y[2].median_ns,
                  e->by_rows.y[0].median_ns);
        /* one call of 1 .. top_k one-row experts (the runtime's mp_moe_experts_cpu) */
        int ks[16];
        for (int k = 0; k < (int)m->hp.n_expert_used; k++)
            ks[k] = k + 1;
        check_curve(&e->concurrent, ks, (int)m->hp.n_expert_used, "cpu_expert concurrent");
    }
    cr_assert_not_null(strstr(out, "experts x 1 row in one call"), "%s", out);
    check_curve(&c.combine, rows, 3, "combine");
    check_curve(&c.non_moe, rows, 3, "non_moe");
    /* the host's read bandwidth, on the most threads measured, always there */
    cr_assert(c.host_read_gbs > 0, "host_read %g GB/s", c.host_read_gbs);
    cr_assert_eq(c.host_read_threads, 2);
    cr_assert_not_null(strstr(out, "calibrate: host read bandwidth (2 threads"), "%s", out);

    /* GPU parts: all present, or all listed in $.missing (this build or machine has no GPU) */
    const unsigned all = MP_COST_ABSENT_GPU_EXPERT | MP_COST_ABSENT_H2D | MP_COST_ABSENT_D2H | MP_COST_ABSENT_SYNC |
                         MP_COST_ABSENT_DECODE;
    cr_assert(c.absent == 0 || c.absent == all, "absent bits %#x", c.absent);
    if (c.absent) {
        cr_assert_eq(c.n_gpu_expert, 0);
        cr_assert_not_null(strstr(out, "calibrate: no GPU measurements: "), "%s", out);
        cr_assert_eq(mp_costs_require_gpu(&c, "costs.json", &err), MP_ERR_ARG);
    } else {
        cr_assert_eq(c.n_gpu_expert, 1);
        check_curve(&c.gpu_expert[0].by_rows, rows, 3, "gpu_expert");
        cr_assert_eq(c.gpu_expert[0].concurrent.n_points, c.cpu_expert[0].concurrent.n_points);
        cr_assert(c.h2d_pinned.n_points >= 4 && c.d2h_pageable.n_points >= 4);
    }

    /* machine facts are in the file */
    FILE *f = fopen(path, "rb");
    static char text[1 << 16];
    size_t n = fread(text, 1, sizeof text - 1, f);
    text[n] = 0;
    fclose(f);
    cJSON *root = cJSON_Parse(text);
    cr_assert_not_null(root);
    const cJSON *dev = cJSON_GetObjectItem(root, "device");
    const char *keys[] = {"cpu", "date", "moeplan_version", "model_sha256", "model_path", "gpu"};
    for (int i = 0; i < 6; i++)
        cr_assert(cJSON_IsString(cJSON_GetObjectItem(dev, keys[i])), "device.%s missing", keys[i]);
    cr_assert_eq(strlen(cJSON_GetObjectItem(dev, "model_sha256")->valuestring), 64);
    cr_assert(cJSON_GetObjectItem(dev, "model_bytes")->valuedouble > 0);
    /* the knobs it measured under, every one of the table's with its value */
    const cJSON *knobs = cJSON_GetObjectItem(dev, "knobs");
    cr_assert(cJSON_IsObject(knobs) && cJSON_IsObject(cJSON_GetObjectItem(dev, "knobs_set")), "device.knobs missing");
    cr_assert_eq(cJSON_GetArraySize(knobs), mp_knob_count());
    cr_assert(cJSON_IsNumber(cJSON_GetObjectItem(knobs, "MP_POOL_PIN")));
    cJSON_Delete(root);
    mp_model_free(m);
    mp_costs_free(&c);
}

/* sh run in the test's directory with MP_MOEPLAN as $M; its exit status */
static int run_sh(const char *sh)
{
    char cmd[4096];
    snprintf(cmd, sizeof cmd, "cd '%s' && M='%s' && %s", dir, getenv("MP_MOEPLAN"), sh);
    const int st = system(cmd);
    return WIFEXITED(st) ? WEXITSTATUS(st) : -1;
}

/* the JSON file name in the test's directory, parsed */
static cJSON *json_in_dir(const char *name)
{
    char path[600];
    path_in_dir(path, sizeof path, name);
    char *text = mp_test_slurp(path);
    cr_assert_not_null(text, "%s not written", path);
    cJSON *j = cJSON_Parse(text);
    cr_assert_not_null(j, "%s: not JSON: %s", path, text);
    free(text);
    return j;
}

/* calibrate chooses MP_PREFETCH_BYTES from its timed candidates and records it as calibrated; a
 * bench given that cost file takes the file's value where the environment leaves the knob unset
 * (and says so), keeps the environment's where it is set, and refuses a file that does not load */
Test(calibrate, chooses_the_prefetch_distance_that_runs_take)
{
    static char out[1 << 16];
    cr_assert_eq(run_cli("calibrate -m tiny.gguf --out costs.json --quick --threads 2 --rows 1 --reps 3", out, sizeof out),
                 0, "%s", out);
    cr_assert_not_null(strstr(out, "calibrate: prefetch distance, 2 threads, "), "%s", out);
    cJSON *root = json_in_dir("costs.json");
    cJSON *dev = cJSON_GetObjectItem(root, "device"), *t = cJSON_GetObjectItem(dev, "prefetch_tuning");
    cr_assert(cJSON_IsObject(t), "device.prefetch_tuning missing");
    cr_assert_str_eq(cJSON_GetObjectItem(t, "knob")->valuestring, "MP_PREFETCH_BYTES");
    const cJSON *points = cJSON_GetObjectItem(t, "points"), *p;
    cr_assert_eq(cJSON_GetArraySize(points), 6);
    bool chosen_timed = false;
    const double chosen = cJSON_GetObjectItem(t, "chosen")->valuedouble;
    cJSON_ArrayForEach(p, points)
    {
        cr_assert(cJSON_GetObjectItem(p, "median_ns")->valuedouble > 0);
        chosen_timed = chosen_timed || cJSON_GetObjectItem(p, "bytes")->valuedouble == chosen;
    }
    cr_assert(chosen_timed, "chosen %g is none of the timed distances", chosen);
    /* the second regime: beside the bus where a GPU is usable, else why not */
    const cJSON *bus = cJSON_GetObjectItem(t, "beside_bus"), *bp = cJSON_GetObjectItem(bus, "points");
    cr_assert(cJSON_IsObject(bus), "device.prefetch_tuning.beside_bus missing");
    if (bp) {
        cr_assert(cJSON_GetObjectItem(bus, "gbs")->valuedouble > 0);
        cr_assert_eq(cJSON_GetArraySize(bp), 6);
        cJSON_ArrayForEach(p, bp) cr_assert(cJSON_GetObjectItem(p, "median_ns")->valuedouble > 0);
    } else {
        const cJSON *why = cJSON_GetObjectItem(bus, "why");
        cr_assert(cJSON_IsString(why) && why->valuestring[0], "beside_bus has neither points nor why");
        cr_assert_not_null(strstr(out, "; the cores alone ("), "%s", out);
    }
    cr_assert_eq(cJSON_GetObjectItem(cJSON_GetObjectItem(dev, "knobs"), "MP_PREFETCH_BYTES")->valuedouble, chosen);
    cr_assert_str_eq(cJSON_GetObjectItem(cJSON_GetObjectItem(dev, "knobs_set"), "MP_PREFETCH_BYTES")->valuestring,
                     "calibrated");

    /* the file as another host's calibration would have it: 8192 chosen */
    cJSON_SetNumberValue(cJSON_GetObjectItem(cJSON_GetObjectItem(dev, "knobs"), "MP_PREFETCH_BYTES"), 8192);
    char *text = cJSON_Print(root), path[600];
    path_in_dir(path, sizeof path, "c8.json");
    FILE *f = fopen(path, "w");
    cr_assert(f && fputs(text, f) >= 0 && fclose(f) == 0);
    free(text);
    cJSON_Delete(root);
    const struct {
        const char *env;
        double now;
        const char *source;
        bool said;
    } runs[] = {{"", 8192, "calibrated", true}, {"MP_PREFETCH_BYTES=1024 ", 1024, "env", false}};
    for (int i = 0; i < 2; i++) {
        char sh[600];
        snprintf(sh, sizeof sh, "%s\"$M\" bench -m tiny.gguf --costs c8.json --executor cpu -t 1 -p 0 -n 2 -r 1 "
                 "-o json > b.json 2> b.err", runs[i].env);
        cr_assert_eq(run_sh(sh), 0, "%s", sh);
        cJSON *b = json_in_dir("b.json");
        const cJSON *row = cJSON_GetArrayItem(cJSON_GetObjectItem(b, "rows"), 0);
        cr_assert_eq(cJSON_GetObjectItem(cJSON_GetObjectItem(row, "knobs"), "MP_PREFETCH_BYTES")->valuedouble,
                     runs[i].now, "%s", runs[i].env);
        cr_assert_str_eq(cJSON_GetObjectItem(cJSON_GetObjectItem(row, "knobs_set"), "MP_PREFETCH_BYTES")->valuestring,
                         runs[i].source);
        cJSON_Delete(b);
        path_in_dir(path, sizeof path, "b.err");
        char *err = mp_test_slurp(path);
        cr_assert_eq(strstr(err, "moeplan: MP_PREFETCH_BYTES=8192, as calibrated in c8.json") != NULL, runs[i].said,
                     "%s", err);
        free(err);
    }
    /* a cost file that does not load stops the run before it starts, naming the flag */
    cr_assert_eq(run_sh("echo '{}' > bad.json && \"$M\" bench -m tiny.gguf --costs bad.json --executor cpu -p 0 -n 2 "
                        "-r 1 > b.json 2> b.err"),
                 1);
    path_in_dir(path, sizeof path, "b.err");
    char *err = mp_test_slurp(path);
    cr_assert_not_null(strstr(err, "moeplan bench: error: --costs: "), "%s", err);
    cr_assert_eq(strchr(err, '\n'), err + strlen(err) - 1, "one line: %s", err);
    free(err);
    /* a file giving the tuned knob a value this build refuses stops the run, naming file, member
     * and what the knob allows; with the knob set in the environment the file's value is not taken */
    cr_assert_eq(run_sh("sed 's/\"MP_PREFETCH_BYTES\":[^,}]*/\"MP_PREFETCH_BYTES\": \"8k\"/' c8.json > c8k.json && "
                        "grep -q '\"MP_PREFETCH_BYTES\": \"8k\"' c8k.json"),
                 0);
    cr_assert_eq(run_sh("\"$M\" bench -m tiny.gguf --costs c8k.json --executor cpu -t 1 -p 0 -n 2 -r 1 > b.json 2> b.err"),
                 1);
    err = mp_test_slurp(path);
    cr_assert_not_null(strstr(err, "moeplan bench: error: --costs c8k.json: $.device.knobs: MP_PREFETCH_BYTES=8k: "
                                   "expected "),
                       "%s", err);
    cr_assert_eq(strchr(err, '\n'), err + strlen(err) - 1, "one line: %s", err);
    free(err);
    cr_assert_eq(run_sh("MP_PREFETCH_BYTES=1024 \"$M\" bench -m tiny.gguf --costs c8k.json --executor cpu -t 1 -p 0 "
                        "-n 2 -r 1 > b.json 2> b.err"),
                 0);
}

/* The rotation: distinct ids a step, the layers in turn, and every expert of every layer read once a
 * whole turn, also where the layers' count and n_expert / top_k share factors (48 x 128 / 8) */
Test(calibrate, rotation_reads_every_expert_of_every_layer)
{
    const int64_t L = 48, E = 128, K = 8;
    static int seen[48][128];
    int32_t ids[8];
    for (int64_t next = 0; next < L * (E / K); next++) {
        const int64_t layer = mp_calib_rotation(next, L, K, E, ids);
        cr_assert_eq(layer, next % L);
        for (int64_t j = 0; j < K; j++) {
            cr_assert(ids[j] >= 0 && ids[j] < E);
            for (int64_t i = 0; i < j; i++)
                cr_assert_neq(ids[i], ids[j], "step %lld: expert %d twice", (long long)next, ids[j]);
            seen[layer][ids[j]]++;
        }
    }
    for (int64_t l = 0; l < L; l++)
        for (int64_t e = 0; e < E; e++)
            cr_assert_eq(seen[l][e], 1, "layer %lld expert %lld read %d times", (long long)l, (long long)e, seen[l][e]);
    /* top_k = n_expert, and a count that does not divide: still distinct */
    const int64_t ks[][2] = {{4, 4}, {7, 3}};
    for (int c = 0; c < 2; c++)
        for (int64_t next = 0; next < 50; next++) {
            mp_calib_rotation(next, 5, ks[c][1], ks[c][0], ids);
            for (int64_t j = 0; j < ks[c][1]; j++)
                for (int64_t i = 0; i < j; i++)
                    cr_assert_neq(ids[i], ids[j]);
        }
}

/* the pick: the fastest only where it beats the default by more than the margin, in most rounds */
enum { PICK_ROUNDS = 5, PICK_CALLS = 2, PICK_N = 4 };
/* candidate c's samples: per[r] in round r, both calls */
static void pick_fill(double *ns, int c, const double per[PICK_ROUNDS])
{
    for (int r = 0; r < PICK_ROUNDS; r++)
        for (int k = 0; k < PICK_CALLS; k++)
            ns[(c * PICK_ROUNDS + r) * PICK_CALLS + k] = per[r];
}

Test(calibrate, prefetch_pick_keeps_the_default_within_the_margin)
{
    const int64_t bytes[PICK_N] = {0, 1024, 2048, 4096};
    const struct {
        double per[PICK_N][PICK_ROUNDS];
        int64_t want;
        const char *what;
    } cases[] = {
        {{{100, 100, 100, 100, 100}, {100, 100, 100, 100, 100}, {100, 100, 100, 100, 100}, {100, 100, 100, 100, 100}},
         2048, "ties"},
        {{{96, 96, 96, 96, 96}, {99, 99, 99, 99, 99}, {100, 100, 100, 100, 100}, {101, 101, 101, 101, 101}},
         2048, "4 % faster: inside a 5 % margin"},
        {{{94, 94, 94, 94, 94}, {99, 99, 99, 99, 99}, {100, 100, 100, 100, 100}, {101, 101, 101, 101, 101}},
         0, "6 % faster in every round"},
        {{{100, 100, 100, 100, 100}, {99, 99, 99, 99, 99}, {100, 100, 100, 100, 100}, {80, 80, 80, 80, 80}},
         4096, "the fastest, not the first faster"},
        {{{90, 90, 90, 105, 105}, {100, 100, 100, 100, 100}, {100, 100, 100, 100, 100}, {100, 100, 100, 100, 100}},
         2048, "10 % faster overall, in 3 rounds of 5"},
        {{{90, 90, 90, 90, 105}, {100, 100, 100, 100, 100}, {100, 100, 100, 100, 100}, {100, 100, 100, 100, 100}},
         0, "in 4 rounds of 5"},
        {{{50, 50, 50, 50, 50}, {99, 99, 99, 99, 99}, {0, 0, 0, 0, 0}, {101, 101, 101, 101, 101}},
         2048, "the default not measured"},
        {{{0, 0, 0, 0, 0}, {0, 0, 0, 0, 0}, {0, 0, 0, 0, 0}, {0, 0, 0, 0, 0}}, 2048, "none measured"},
        {{{120, 120, 120, 120, 120}, {130, 130, 130, 130, 130}, {100, 100, 100, 100, 100}, {140, 140, 140, 140, 140}},
         2048, "the default the fastest"},
    };
    double ns[PICK_N * PICK_ROUNDS * PICK_CALLS];
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        for (int c = 0; c < PICK_N; c++)
            pick_fill(ns, c, cases[i].per[c]);
        double before[sizeof ns / sizeof ns[0]];
        memcpy(before, ns, sizeof ns);
        cr_assert_eq(mp_calib_prefetch_pick(bytes, ns, PICK_N, PICK_ROUNDS, PICK_CALLS, 2048, 0.05), cases[i].want,
                     "%s", cases[i].what);
        cr_assert_eq(memcmp(before, ns, sizeof ns), 0, "%s: the samples were changed", cases[i].what);
        cr_assert_eq(mp_calib_prefetch_pick(bytes, ns, PICK_N, PICK_ROUNDS, PICK_CALLS, 512, 0.05), 512,
                     "%s: a default not among them", cases[i].what);
    }
}

/* The AMX rows' pick: the grid's rows (or one past it) whose mix of tiles from there and dots below
 * loses least against the faster arm at each row count, the table's unless another loses less by
 * more than the margin; unmeasured points (<= 0) out of the count */
Test(calibrate, amx_pick_takes_the_mix_that_loses_least)
{
    const int rows[] = {2, 4, 8, 16};
    const struct {
        double tiles[4], dots[4];
        int dflt, want;
        const char *what;
    } cases[] = {
        {{90, 90, 90, 90}, {100, 100, 100, 100}, 8, 2, "tiles ahead everywhere: from the first row count"},
        {{120, 110, 90, 80}, {100, 100, 100, 100}, 2, 8, "tiles ahead from 8: the table's 2 loses"},
        {{120, 110, 90, 80}, {100, 100, 100, 100}, 8, 8, "the table's rows are the best: kept"},
        {{130, 120, 110, 105}, {100, 100, 100, 100}, 8, 17, "tiles behind everywhere: past the grid"},
        {{100.5, 100.5, 99.5, 99.5}, {100, 100, 100, 100}, 16, 16, "inside the margin: the table's"},
        {{104, 104, 104, 96}, {100, 100, 100, 100}, 2, 16, "4 % a point over three points: past the margin"},
        {{120, 95, 101, 80}, {100, 100, 100, 100}, 2, 4, "one point against the trend: the least loss, 4"},
        {{0, 90, 90, 90}, {100, 100, 100, 100}, 8, 2, "an unmeasured point counts for nothing"},
        {{0, 0, 0, 0}, {0, 0, 0, 0}, 8, 8, "none measured: the table's"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++)
        cr_assert_eq(mp_calib_amx_pick(cases[i].tiles, cases[i].dots, rows, 4, cases[i].dflt, 0.01), cases[i].want,
                     "%s: %d", cases[i].what,
                     mp_calib_amx_pick(cases[i].tiles, cases[i].dots, rows, 4, cases[i].dflt, 0.01));
}

/* calibrate chooses MP_AMX_ROWS where the kernels run AMX tiles: each expert type of the model timed
 * at the grid's rows, tiles against dots, the choice in the knobs (source calibrated) and taken by a
 * run given the file, one with the knob set keeping its own; a file naming a type without tiles
 * stops the run. Where the kernels run no tiles, the reason is what is checked. */
Test(calibrate, chooses_the_amx_rows_that_runs_take)
{
    static char out[1 << 16];
    const bool amx = !strcmp(mp_kernels_isa(), "amx");
    cr_assert_eq(run_cli("calibrate -m tiny.gguf --out costs.json --quick --threads 2 --rows 1 --reps 3", out, sizeof out),
                 0, "%s", out);
    cJSON *root = json_in_dir("costs.json");
    cJSON *dev = cJSON_GetObjectItem(root, "device"), *t = cJSON_GetObjectItem(dev, "amx_tuning");
    cr_assert(cJSON_IsObject(t), "device.amx_tuning missing");
    cr_assert_str_eq(cJSON_GetObjectItem(t, "knob")->valuestring, "MP_AMX_ROWS");
    const char *knob = cJSON_GetObjectItem(cJSON_GetObjectItem(dev, "knobs"), "MP_AMX_ROWS")->valuestring;
    if (!amx) {
        cr_log_info("this CPU's kernels run %s: the measured side of MP_AMX_ROWS is not checked here", mp_kernels_isa());
        cr_assert_str_eq(knob, "");
        cr_assert_not_null(strstr(cJSON_GetObjectItem(t, "why")->valuestring, "run no AMX tiles"));
        cJSON_Delete(root);
        return;
    }
    /* the tiny model's experts: Q4_K gate/up, Q6_K down */
    const cJSON *types = cJSON_GetObjectItem(t, "types"), *e;
    cr_assert_eq(cJSON_GetArraySize(types), 2);
    char want[64] = "";
    cJSON_ArrayForEach(e, types)
    {
        const char *type = cJSON_GetObjectItem(e, "type")->valuestring;
        const int chosen = cJSON_GetObjectItem(e, "chosen")->valueint, tt = mp_type_from_name(type);
        cr_assert_eq(cJSON_GetObjectItem(e, "table")->valueint, mp_kernels_amx_rows(tt, true), "%s", type);
        const cJSON *points = cJSON_GetObjectItem(e, "points"), *p;
        cr_assert_eq(cJSON_GetArraySize(points), 9, "%s", type);
        bool in_grid = chosen == 33;
        cJSON_ArrayForEach(p, points)
        {
            cr_assert(cJSON_GetObjectItem(p, "tiles_ns")->valuedouble > 0 &&
                      cJSON_GetObjectItem(p, "dots_ns")->valuedouble > 0, "%s", type);
            in_grid = in_grid || cJSON_GetObjectItem(p, "rows")->valueint == chosen;
        }
        cr_assert(in_grid, "%s: chosen %d is none of the grid's rows, nor one past it", type, chosen);
        snprintf(want + strlen(want), sizeof want - strlen(want), "%s%s:%d", want[0] ? "," : "", type, chosen);
        char line[96];
        snprintf(line, sizeof line, "calibrate: AMX rows, %s (", type);
        cr_assert_not_null(strstr(out, line), "%s", out);
    }
    cr_assert_str_eq(knob, want);
    cr_assert_str_eq(cJSON_GetObjectItem(t, "chosen")->valuestring, want);
    cr_assert_str_eq(cJSON_GetObjectItem(cJSON_GetObjectItem(dev, "knobs_set"), "MP_AMX_ROWS")->valuestring,
                     "calibrated");

    /* a run given the file as another host's calibration would have it takes its rows, and says so;
     * one with the knob set keeps its own */
    cJSON_ReplaceItemInObject(cJSON_GetObjectItem(dev, "knobs"), "MP_AMX_ROWS", cJSON_CreateString("Q4_K:3,Q6_K:40"));
    char *text = cJSON_Print(root), path[600];
    path_in_dir(path, sizeof path, "c3.json");
    FILE *f = fopen(path, "w");
    cr_assert(f && fputs(text, f) >= 0 && fclose(f) == 0);
    free(text);
    cJSON_Delete(root);
    const struct {
        const char *env, *now, *source;
    } runs[] = {{"", "Q4_K:3,Q6_K:40", "calibrated"}, {"MP_AMX_ROWS=Q6_K:9 ", "Q6_K:9", "env"}};
    for (int i = 0; i < 2; i++) {
        char sh[600];
        snprintf(sh, sizeof sh, "%s\"$M\" bench -m tiny.gguf --costs c3.json --executor cpu -t 1 -p 8 -n 0 -r 1 "
                 "-o json > b.json 2> b.err", runs[i].env);
        cr_assert_eq(run_sh(sh), 0, "%s", sh);
        cJSON *b = json_in_dir("b.json");
        const cJSON *row = cJSON_GetArrayItem(cJSON_GetObjectItem(b, "rows"), 0);
        cr_assert_str_eq(cJSON_GetObjectItem(cJSON_GetObjectItem(row, "knobs"), "MP_AMX_ROWS")->valuestring,
                         runs[i].now);
        cr_assert_str_eq(cJSON_GetObjectItem(cJSON_GetObjectItem(row, "knobs_set"), "MP_AMX_ROWS")->valuestring,
                         runs[i].source);
        cJSON_Delete(b);
        path_in_dir(path, sizeof path, "b.err");
        char *err = mp_test_slurp(path);
        cr_assert_eq(strstr(err, "moeplan: MP_AMX_ROWS=Q4_K:3,Q6_K:40, as calibrated in c3.json") != NULL, i == 0,
                     "%s", err);
        free(err);
    }
    /* a file naming a type without a tile GEMM stops the run, naming file, member and type */
    cr_assert_eq(run_sh("sed 's/Q6_K:40/Q3_K:40/' c3.json > cq3.json && \"$M\" bench -m tiny.gguf --costs cq3.json "
                        "--executor cpu -t 1 -p 8 -n 0 -r 1 > b.json 2> b.err"),
                 1);
    char *err = mp_test_slurp(path);
    cr_assert_not_null(strstr(err, "moeplan bench: error: --costs cq3.json: $.device.knobs: MP_AMX_ROWS=Q4_K:3,Q3_K:40: "
                                   "Q3_K has no AMX tile GEMM"),
                       "%s", err);
    free(err);
}

/* MP_AMX_ROWS not measured, on any host: with the tiles capped away (MP_ISA=avx512) or the knob set in
 * the environment, no type is timed, the reason is recorded and the knobs hold the value as it was */
Test(calibrate, amx_rows_not_measured_without_tiles_or_over_the_environment)
{
    cJSON *root, *dev, *t;
    const struct {
        const char *env, *why, *knob;
    } off[] = {{"MP_ISA=avx512", "run no AMX tiles", ""}, {"MP_AMX_ROWS=Q4_K:7", "set in the environment", "Q4_K:7"}};
    for (int i = 0; i < 2; i++) {
        char sh[600];
        snprintf(sh, sizeof sh, "%s \"$M\" calibrate -m tiny.gguf --out off.json --force --quick --threads 1 --rows 1 "
                 "--reps 3 > c.log 2>&1", off[i].env);
        cr_assert_eq(run_sh(sh), 0, "%s", sh);
        root = json_in_dir("off.json");
        dev = cJSON_GetObjectItem(root, "device");
        t = cJSON_GetObjectItem(dev, "amx_tuning");
        cr_assert_null(cJSON_GetObjectItem(t, "types"), "%s", off[i].env);
        cr_assert_not_null(strstr(cJSON_GetObjectItem(t, "why")->valuestring, off[i].why), "%s", off[i].env);
        cr_assert_str_eq(cJSON_GetObjectItem(cJSON_GetObjectItem(dev, "knobs"), "MP_AMX_ROWS")->valuestring,
                         off[i].knob);
        cJSON_Delete(root);
    }
}

Test(calibrate, rejects_bad_flags)
{
    static char out[1 << 14];
    const struct {
        const char *args, *needle;
    } bad[] = {
        {"calibrate --out c.json", "needs -m MODEL and --out FILE"},
        {"calibrate -m tiny.gguf", "needs -m MODEL and --out FILE"},
        {"calibrate -m tiny.gguf --out c.json --reps 2", "--reps: expected an integer 3..100000"},
        {"calibrate -m tiny.gguf --out c.json --reps 5x", "--reps"},
        {"calibrate -m tiny.gguf --out c.json --threads 0", "--threads '0': at character 1"},
        {"calibrate -m tiny.gguf --out c.json --threads 1,,2", "--threads '1,,2': at character 3"},
        {"calibrate -m tiny.gguf --out c.json --rows 1,4,x", "--rows '1,4,x': at character 5"},
        {"calibrate -m tiny.gguf --out c.json --rows 99999999", "expected a comma-separated list of integers 1..4096"},
        {"calibrate -m tiny.gguf --out c.json --bogus", "unknown option '--bogus'"},
        {"calibrate -m tiny.gguf --out c.json --thread 4", "unknown option '--thread'; did you mean --threads?"},
        {"calibrate -m tiny.gguf --out c.json --threads", "option --threads needs a value"},
        {"calibrate -m tiny.gguf --out c.json --far-units 0", "--far-units: expected an integer 1..32, got 0"},
        {"calibrate -m tiny.gguf --out c.json --far-units 2x", "--far-units: expected an integer"},
        {"calibrate -m tiny.gguf --out c.json --grid-pool 0", "--grid-pool: expected an integer 1..1048576, got 0"},
        {"calibrate -m tiny.gguf --out c.json --grid-pool -3", "--grid-pool: expected an integer"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        cr_assert_eq(run_cli(bad[i].args, out, sizeof out), 2, "%s: %s", bad[i].args, out);
        cr_assert_not_null(strstr(out, "moeplan calibrate: error: "), "%s: %s", bad[i].args, out);
        cr_assert_not_null(strstr(out, bad[i].needle), "%s: '%s' lacks '%s'", bad[i].args, out, bad[i].needle);
        cr_assert_eq(strchr(out, '\n'), out + strlen(out) - 1, "%s: not one line: %s", bad[i].args, out);
    }
    char path[600];
    path_in_dir(path, sizeof path, "c.json");
    cr_assert_neq(access(path, F_OK), 0, "a usage error wrote %s", path);
    cr_assert_eq(run_cli("calibrate --help", out, sizeof out), 0);
    cr_assert_not_null(strstr(out, "usage: moeplan calibrate -m MODEL --out costs.json"), "%s", out);
}

Test(calibrate, bad_model_is_one_line_and_writes_nothing)
{
    static char out[1 << 14];
    cr_assert_eq(run_cli("calibrate -m nope.gguf --out c.json --quick", out, sizeof out), 1, "%s", out);
    cr_assert_not_null(strstr(out, "moeplan calibrate: error: "), "%s", out);
    cr_assert_not_null(strstr(out, "nope.gguf"), "%s", out);
    char junk[600];
    path_in_dir(junk, sizeof junk, "junk.gguf");
    FILE *f = fopen(junk, "wb");
    fputs("GGUF not really", f);
    fclose(f);
    cr_assert_eq(run_cli("calibrate -m junk.gguf --out c.json --quick", out, sizeof out), 1, "%s", out);
    cr_assert_not_null(strstr(out, "junk.gguf"), "%s", out);
    char path[600];
    path_in_dir(path, sizeof path, "c.json");
    cr_assert_neq(access(path, F_OK), 0);
}

/* --far-units beyond what the model's rows allow, or --grid-pool beyond its experts, is refused once
 * the model is read, before a single measurement: tiny's experts have 256 FFN rows, one Q8_K block,
 * so its far work is whole experts. */
Test(calibrate, grid_options_beyond_the_model_fail_before_measuring)
{
    static char out[1 << 16];
    cr_assert_eq(run_cli("calibrate -m tiny.gguf --out c.json --quick --far-units 2", out, sizeof out), 1, "%s", out);
    cr_assert_not_null(strstr(out, "moeplan calibrate: error: --far-units 2: tiny.gguf allows 1..1 "), "%s", out);
    cr_assert_eq(strchr(out, '\n'), out + strlen(out) - 1, "not one line: %s", out);
    cr_assert_null(strstr(out, "calibrate: hashing"), "started measuring before failing: %s", out);
    /* a grid pool that leaves a step with every route cold fewer than top_k experts (tiny: 16, top-4) */
    cr_assert_eq(run_cli("calibrate -m tiny.gguf --out c.json --quick --grid-pool 13", out, sizeof out), 1, "%s", out);
    cr_assert_not_null(strstr(out, "moeplan calibrate: error: --grid-pool 13: tiny.gguf allows 1..12 "), "%s", out);
    cr_assert_eq(strchr(out, '\n'), out + strlen(out) - 1, "not one line: %s", out);
    cr_assert_null(strstr(out, "calibrate: hashing"), "started measuring before failing: %s", out);
    char path[600];
    path_in_dir(path, sizeof path, "c.json");
    cr_assert_neq(access(path, F_OK), 0);
}

/* The output is checked before a single measurement: a missing directory fails at once. */
Test(calibrate, missing_output_directory_fails_before_measuring)
{
    static char out[1 << 16];
    const char *args = "calibrate -m tiny.gguf --out no/such/dir/c.json --threads 1 --rows 1,2 --reps 3";
    cr_assert_eq(run_cli(args, out, sizeof out), 1, "%s", out);
    cr_assert_not_null(strstr(out, "moeplan calibrate: error: --out no/such/dir/c.json: directory no/such/dir: "
                                   "No such file or directory"), "%s", out);
    cr_assert_null(strstr(out, "calibrate: hashing"), "started measuring before failing: %s", out);
}

Test(calibrate, refuses_to_overwrite_without_force)
{
    static char out[1 << 16];
    char path[600];
    path_in_dir(path, sizeof path, "costs.json");
    FILE *f = fopen(path, "w");
    fputs("keep me\n", f);
    fclose(f);
    const char *args = "calibrate -m tiny.gguf --out costs.json --quick --threads 1 --rows 1,2 --reps 3";
    cr_assert_eq(run_cli(args, out, sizeof out), 1, "%s", out);
    cr_assert_not_null(strstr(out, "moeplan calibrate: error: --out costs.json: file exists (use --force"), "%s", out);
    char buf[64] = {0};
    f = fopen(path, "r");
    cr_assert_not_null(fgets(buf, sizeof buf, f));
    fclose(f);
    cr_assert_str_eq(buf, "keep me\n");
    char forced[256];
    snprintf(forced, sizeof forced, "%s --force", args);
    cr_assert_eq(run_cli(forced, out, sizeof out), 0, "%s", out);
    mp_costs c;
    mp_error err;
    cr_assert_eq(mp_costs_load(path, &c, &err), MP_OK, "%s", err.msg);
    mp_costs_free(&c);
}

/* A CPU-only cost file (the fixture without its GPU parts, each listed in $.missing) loads, and
 * `moeplan simulate` refuses it with one line saying what is missing. */
Test(calibrate, simulate_refuses_cost_file_without_gpu)
{
    char fixture[600];
    snprintf(fixture, sizeof fixture, "%s/tests/fixtures/costs/fixture.json", getenv("MP_SOURCE_ROOT"));
    FILE *f = fopen(fixture, "rb");
    cr_assert_not_null(f);
    static char text[1 << 16];
    size_t n = fread(text, 1, sizeof text - 1, f);
    text[n] = 0;
    fclose(f);
    cJSON *root = cJSON_Parse(text);
    cr_assert_not_null(root);
    cJSON *missing = cJSON_AddArrayToObject(root, "missing");
    const char *gpu_keys[] = {"gpu_expert", "h2d", "d2h", "sync"};
    for (int i = 0; i < 4; i++) {
        cJSON_DeleteItemFromObjectCaseSensitive(root, gpu_keys[i]);
        cJSON *e = cJSON_CreateObject();
        cJSON_AddStringToObject(e, "what", gpu_keys[i]);
        cJSON_AddStringToObject(e, "why", "no CUDA device (test)");
        cJSON_AddItemToArray(missing, e);
    }
    char *cpu_only = cJSON_Print(root);
    char path[600];
    path_in_dir(path, sizeof path, "cpu.json");
    f = fopen(path, "w");
    fputs(cpu_only, f);
    fclose(f);
    mp_costs c;
    mp_error err;
    cr_assert_eq(mp_costs_load(path, &c, &err), MP_OK, "%s", err.msg);
    cr_assert_eq(c.absent, MP_COST_ABSENT_GPU_EXPERT | MP_COST_ABSENT_H2D | MP_COST_ABSENT_D2H | MP_COST_ABSENT_SYNC);
    cr_assert_eq(c.n_cpu_expert, 2);
    mp_costs_free(&c);

    /* a trace to simulate: 1 request x 2 tokens, one MoE layer, 4 experts, top-2 */
    char csv[600], db[600];
    path_in_dir(csv, sizeof csv, "r.csv");
    path_in_dir(db, sizeof db, "t.db");
    f = fopen(csv, "w");
    fputs("seq,pos,layer,e0,e1,w0,w1\n0,0,0,0,1,0.5,0.3\n0,1,0,2,3,0.5,0.3\n", f);
    fclose(f);
    mp_import_options o = {.format = MP_IMPORT_CSV, .n_experts = 4, .weight_format = MP_TRACE_W_F32};
    mp_import_result res;
    cr_assert_eq(mp_import_file(csv, db, &o, &res, &err), MP_OK, "%s", err.msg);
    static char out[1 << 14];
    cr_assert_eq(run_cli("simulate t.db --costs cpu.json --budget 1GiB", out, sizeof out), 1, "%s", out);
    cr_assert_not_null(strstr(out, "moeplan simulate: error: costs cpu.json: no GPU measurements "
                                   "(gpu_expert, h2d, d2h, sync listed in $.missing)"),
                       "%s", out);
    cr_assert_eq(strchr(out, '\n'), out + strlen(out) - 1, "not one line: %s", out);
    cJSON_free(cpu_only);
    cJSON_Delete(root);
}

/* The one-row MoE time the non-MoE point subtracts: every layer's gpu_expert entry (by quant and
 * shape), its last concurrent point at top_k experts, from a given layer on; -1 when an entry or
 * that point is missing. */
Test(calibrate, decode_moe_time_from_the_gpu_entries)
{
    mp_model *m;
    mp_error e;
    cr_assert_eq(mp_model_load(model, &m, &e), MP_OK, "%s", e.msg);
    char quant[MP_EXPERT_QUANT_MAX], text[1024];
    mp_model_expert_quant(&m->layers[0], quant);
    for (int64_t il = 1; il < m->hp.n_layer; il++) { /* the tiny preset has one kind of expert */
        char q[MP_EXPERT_QUANT_MAX];
        mp_model_expert_quant(&m->layers[il], q);
        cr_assert_str_eq(q, quant);
    }
    const long D = (long)m->hp.n_embd, F = (long)m->hp.n_ff_exp, K = (long)m->hp.n_expert_used;
    const char *fmt = "{\"gpu_expert\": [{\"quant\": \"%s\", \"n_embd\": %ld, \"n_ff\": %ld, \"concurrent\": "
                      "[{\"experts\": 1, \"median_ns\": 100}, {\"experts\": %ld, \"median_ns\": 250}]}]}";
    snprintf(text, sizeof text, fmt, quant, D, F, K);
    cJSON *root = cJSON_Parse(text);
    cr_assert_float_eq(mp_calib_decode_moe_ns(m, root, 0), 250.0 * (double)m->hp.n_layer, 1e-9);
    /* from a layer on: the layers a step with one hybrid layer keeps resident */
    cr_assert_float_eq(mp_calib_decode_moe_ns(m, root, 1), 250.0 * (double)(m->hp.n_layer - 1), 1e-9);
    cJSON_Delete(root);
    snprintf(text, sizeof text, fmt, quant, D, F + 1, K); /* another shape */
    root = cJSON_Parse(text);
    cr_assert_lt(mp_calib_decode_moe_ns(m, root, 0), 0);
    cJSON_Delete(root);
    snprintf(text, sizeof text, fmt, quant, D, F, K - 1); /* the curve stops short of top_k */
    root = cJSON_Parse(text);
    cr_assert_lt(mp_calib_decode_moe_ns(m, root, 0), 0);
    cJSON_Delete(root);
    cr_assert_lt(mp_calib_decode_moe_ns(m, NULL, 0), 0);
    mp_model_free(m);
}

/* The context sweep's windows of 64 steps: from position 1, then 128, 256, ... while a window
 * fits before the context's last, and that last one; each window clear of the next. */
Test(calibrate, context_sweep_windows)
{
    int64_t s[24];
    const int64_t want4096[] = {1, 128, 256, 512, 1024, 2048, 4032};
    cr_assert_eq(mp_calib_context_starts(4096, 64, s, 24), 7);
    for (int i = 0; i < 7; i++)
        cr_assert_eq(s[i], want4096[i], "window %d starts at %lld", i, (long long)s[i]);
    const int64_t want2048[] = {1, 128, 256, 512, 1024, 1984}; /* the flame preset's context */
    cr_assert_eq(mp_calib_context_starts(2048, 64, s, 24), 6);
    for (int i = 0; i < 6; i++)
        cr_assert_eq(s[i], want2048[i], "window %d starts at %lld", i, (long long)s[i]);
    const int64_t want512[] = {1, 128, 256, 448}; /* the tiny preset's */
    cr_assert_eq(mp_calib_context_starts(512, 64, s, 24), 4);
    for (int i = 0; i < 4; i++)
        cr_assert_eq(s[i], want512[i]);
    cr_assert_eq(mp_calib_context_starts(200, 64, s, 24), 2); /* 1, and the last window, 136 */
    cr_assert_eq(s[1], 136);
    cr_assert_eq(mp_calib_context_starts(128, 64, s, 24), 1); /* no room for a second window */
    cr_assert_eq(mp_calib_context_starts(64, 64, s, 24), 0);  /* none for the first either */
    cr_assert_eq(mp_calib_context_starts(1 << 20, 64, s, 3), 3); /* cap: the first, one more, the last */
    cr_assert(s[0] == 1 && s[1] == 128 && s[2] == (1 << 20) - 64);
}

/* The grid's pool: up to n_expert - top_k experts a layer, as many as the device's free memory
 * holds beside the session and the reserve. */
Test(calibrate, grid_pool_under_a_memory_cap)
{
    const uint64_t G = (uint64_t)1 << 30, row = 25 * 127488; /* flame: one expert of each of 25 layers */
    cr_assert_eq(mp_calib_grid_pool(64, 6, row, 140 * G, G / 10, G, 0), 58); /* an H200: the whole E - K */
    /* room for 10 experts a layer, and for 9.99 */
    cr_assert_eq(mp_calib_grid_pool(64, 6, row, G + G / 10 + 10 * row, G / 10, G, 0), 10);
    cr_assert_eq(mp_calib_grid_pool(64, 6, row, G + G / 10 + 10 * row - 1, G / 10, G, 0), 9);
    cr_assert_eq(mp_calib_grid_pool(64, 6, row, G / 2, G / 10, G, 0), 0); /* below the reserve */
    cr_assert_eq(mp_calib_grid_pool(8, 2, 32 * 114229248ull, 140 * G, 2 * G, G, 0), 6); /* Mixtral on an H200 */
    cr_assert_eq(mp_calib_grid_pool(8, 2, 32 * 114229248ull, 16 * G, 2 * G, G, 0), 3);  /* on a 16 GiB card */
    cr_assert_eq(mp_calib_grid_pool(4, 4, row, 140 * G, 0, 0, 0), 0); /* top_k = n_expert: no pool */
    cr_assert_eq(mp_calib_grid_pool(16, 4, 0, 0, 0, 0, 0), 12);       /* no size known: no cap */
}

/* Beside a last-level cache: a model of at least 4 caches leaves its cold routes enough experts to
 * read from memory (at least top_k held); a smaller one keeps the pool the device holds */
Test(calibrate, grid_pool_leaves_the_cold_routes_memory)
{
    const uint64_t G = (uint64_t)1 << 30, M = (uint64_t)1 << 20, llc = 320 * M;
    const uint64_t mid = 3 * 3354624ull; /* 3 layers of 3.35 MB experts: 142 of them are 1.33 GiB */
    /* 4 x 320 MiB over 9.6 MiB a column: 134 experts outside, 8 in the pool, at least top_k 10 */
    cr_assert_eq(mp_calib_grid_pool(142, 10, mid, 140 * G, G / 10, G, llc), 10);
    cr_assert_eq(mp_calib_grid_pool(142, 10, mid, 140 * G, G / 10, G, 0), 132, "no cache known: as before");
    /* a 64 MiB cache: 27 experts outside */
    cr_assert_eq(mp_calib_grid_pool(142, 10, mid, 140 * G, G / 10, G, 64 * M), 142 - 27);
    /* the device's room still caps it */
    cr_assert_eq(mp_calib_grid_pool(142, 10, mid, G + G / 10 + 5 * mid, G / 10, G, 64 * M), 5);
    /* the 30B preset (48 layers of 3.06 MB experts, 128 of them): 10 outside, more than top_k's 8 */
    const uint64_t q30 = 48 * 3063808ull;
    cr_assert_eq(mp_calib_grid_pool(128, 8, q30, 140 * G, G / 10, G, llc), 128 - 10);
    /* flame (19 MB of experts): every cold route reads from the caches anyway; the pool stays */
    cr_assert_eq(mp_calib_grid_pool(64, 6, 25 * 127488, 140 * G, G / 10, G, llc), 58);
    /* exactly 4 caches of experts: all of them would be needed outside; top_k stay in the pool */
    cr_assert_eq(mp_calib_grid_pool(40, 4, 32 * M, 140 * G, 0, 0, llc), 4);
}

/* The once-per-step cost of hybrid steps from a step with one hybrid layer of L: a model of S =
 * 30 us on top of per-layer levels (a resident layer 10 us, the hybrid layer's own 40 us, the
 * non-MoE 500 us) measures the one-hybrid-layer step at 500 + 24 x 10 + 40 + 30 = 810 us and the
 * grid's level (every layer hybrid) at 40 + 30 / 25: the derivation gives 30 back. */
Test(calibrate, hybrid_step_from_one_hybrid_layer)
{
    const double L = 25, S = 30e3, res = 10e3, own = 40e3, nm = 500e3;
    const double step = nm + (L - 1) * res + own + S, level = own + S / L;
    cr_assert_float_eq(mp_calib_hybrid_step_ns(step, nm, (L - 1) * res, level, 25), S, 1e-6);
    /* a step no dearer than the grid's level says: no once */
    cr_assert_float_eq(mp_calib_hybrid_step_ns(nm + (L - 1) * res + level, nm, (L - 1) * res, level, 25), 0, 1e-6);
    cr_assert_eq(mp_calib_hybrid_step_ns(step, nm, 0, level, 1), 0); /* one layer: the grid's own step */
}

/* The decode grid's extra passes go to the points whose samples spread more than the bound: (p75 -
 * p25) / median of 3 samples a, b, c (sorted) is (c - a) / 2 / b. */
Test(calibrate, noisy_points_take_more_passes)
{
    cr_assert_float_eq(mp_calib_rel_spread((const double[]){110, 90, 100}, 3), 0.10, 1e-12);
    cr_assert_float_eq(mp_calib_rel_spread((const double[]){100, 100, 100, 100}, 4), 0, 1e-12);
    cr_assert_eq(mp_calib_rel_spread((const double[]){100}, 1), 0); /* one sample: no spread */
    cr_assert_eq(mp_calib_rel_spread((const double[]){-5, 0, 5}, 3), 0); /* a median <= 0 */
    /* 4 points, 4 slots each: quiet (2 %), noisy (10 %), noisy but full (max_n 3), one sample */
    const double s[16] = {98, 100, 102, 0, 90, 100, 110, 0, 90, 100, 110, 0, 100, 0, 0, 0};
    int n[4] = {3, 3, 3, 1}, idx[4] = {-1, -1, -1, -1};
    cr_assert_eq(mp_calib_noisy_points(s, n, 4, 4, 0.05, 4, idx), 2);
    cr_assert(idx[0] == 1 && idx[1] == 2, "%d %d", idx[0], idx[1]);
    n[2] = 4; /* point 2 holds max_n samples now (its 4th a 0: still wide) */
    cr_assert_eq(mp_calib_noisy_points(s, n, 4, 4, 0.05, 4, idx), 1);
    cr_assert_eq(idx[0], 1);
    /* at 11 %: point 1 (10 %) is quiet, point 2 fills its 4 slots (stride) whatever max_n says */
    cr_assert_eq(mp_calib_noisy_points(s, n, 4, 4, 0.11, 8, idx), 0);
}

/* A CPU curve's timings: point 0 alternates 100 and 150 us (20 % spread), point 1 holds 50 us; each
 * call spins its time, so that the recorded passes take time for the extra ones to be weighed
 * against; the order of the calls is kept. */
typedef struct fake_curve {
    int order[256], n_calls;
} fake_curve;

static double fake_timing(void *user, int i)
{
    fake_curve *f = user;
    const double ns = i == 0 ? ((f->n_calls / 2) % 2 ? 150e3 : 100e3) : 50e3;
    if (f->n_calls < 256)
        f->order[f->n_calls] = i;
    f->n_calls++;
    const int64_t t0 = mp_now_ns();
    while (mp_now_ns() - t0 < 2000) /* 2 us: the recorded passes' time */
        ;
    return ns;
}

/* mp_calib_curve: warm-up passes unrecorded, then the points in turn, one call each per pass (a burst
 * of the host's noise spreads over all of them); then only the points that spread take more samples,
 * at most MP_CALIB_CURVE_SAMPLES x reps, and the steady one keeps its reps. */
Test(calibrate, curve_points_in_turn_and_more_for_those_that_spread)
{
    mp_calib_opts o;
    mp_calib_defaults(&o, false);
    o.reps = 5;
    const int warm = mp_calib_warmups(&o), stride = MP_CALIB_CURVE_SAMPLES * o.reps;
    double *samples = calloc((size_t)(2 * stride), sizeof *samples);
    int n[2];
    fake_curve f = {.n_calls = 0};
    const int n_more = mp_calib_curve(&o, 2, fake_timing, &f, samples, n);
    cr_assert_eq(n_more, 1, "point 0 spread, point 1 did not");
    cr_assert_eq(n[1], o.reps);
    cr_assert(n[0] > o.reps && n[0] <= stride, "%d samples", n[0]);
    cr_assert_eq(f.n_calls, 2 * (warm + o.reps) + n[0] - o.reps);
    for (int c = 0; c < 2 * (warm + o.reps); c++)
        cr_assert_eq(f.order[c], c % 2, "call %d: point %d, expected the points in turn", c, f.order[c]);
    for (int c = 2 * (warm + o.reps); c < f.n_calls && c < 256; c++)
        cr_assert_eq(f.order[c], 0, "call %d: an extra sample of the steady point", c);
    for (int j = 0; j < o.reps; j++)
        cr_assert_float_eq(samples[stride + j], 50e3, 0);
    free(samples);
}

/* After the decode grid's first pass, the points with far units slower than margin x the best of
 * their cold count (far on or off) take no more passes; the far-off points and those with no far
 * unit always do. Two cold counts, 2 slots a point; medians of what each point holds. */
Test(calibrate, grid_points_out_of_the_running_after_the_first_pass)
{
    /* cold 1: off 100, on f=0 160 (no far unit: kept however slow), f=1 90, f=2 140, f=3 136;
     * cold 2: off 200, f=1 120 (two samples, median 120 of 110 and 130), f=2 181, f=4 NaN */
    const int cold[] = {1, 1, 1, 1, 1, 2, 2, 2, 2}, far[] = {-1, 0, 1, 2, 3, -1, 1, 2, 4};
    const double s[18] = {100, 0, 160, 0, 90, 0, 140, 0, 136, 0, 200, 0, 110, 130, 181, 0, NAN, 0};
    const int n[9] = {1, 1, 1, 1, 1, 1, 2, 1, 1};
    bool keep[9];
    /* margin 1.5: cold 1's best is 90 (f=1), so 140 and 136 go (both over 135); cold 2's best
     * 120, so 181 (over 180) goes; NaN stays */
    cr_assert_eq(mp_calib_grid_contenders(s, n, cold, far, 9, 2, 1.5, keep), 6);
    const bool want[9] = {true, true, true, false, false, true, true, false, true};
    for (int i = 0; i < 9; i++)
        cr_assert_eq(keep[i], want[i], "point %d (cold %d, far %d)", i, cold[i], far[i]);
    /* a wider margin keeps them all; the far-off and f=0 points stay at any margin */
    cr_assert_eq(mp_calib_grid_contenders(s, n, cold, far, 9, 2, 2.1, keep), 9);
    cr_assert_eq(mp_calib_grid_contenders(s, n, cold, far, 9, 2, 1.0, keep), 6);
    cr_assert(keep[0] && keep[1] && keep[2] && keep[5] && keep[6] && keep[8] && !keep[3] && !keep[4] && !keep[7]);
}


/* $.host_read from the rounds at the end and the probes the grid took between its passes: gbs the
 * best of them all, level_gbs their median with level_probes their count (the scratch array gone);
 * without probes (no grid: a machine without a CUDA device), no level. */
Test(calibrate, host_read_level_from_the_grids_probes)
{
    mp_calib_opts o;
    mp_calib_defaults(&o, true);
    mp_error err;
    for (int with = 0; with < 2; with++) {
        cJSON *root = cJSON_CreateObject();
        cr_assert_not_null(root);
        for (int i = 0; with && i < 3; i++)
            cr_assert_eq(mp_calib_host_probe(&o, root, &err), MP_OK, "%s", err.msg);
        cr_assert_eq(mp_calib_host_read(&o, root, &err), MP_OK, "%s", err.msg);
        cr_assert_null(cJSON_GetObjectItemCaseSensitive(root, "host_read_probes"), "the scratch array stays");
        const cJSON *h = cJSON_GetObjectItemCaseSensitive(root, "host_read");
        cr_assert_not_null(h);
        const double gbs = cJSON_GetObjectItemCaseSensitive(h, "gbs")->valuedouble;
        const cJSON *level = cJSON_GetObjectItemCaseSensitive(h, "level_gbs"),
                    *n = cJSON_GetObjectItemCaseSensitive(h, "level_probes");
        cr_assert_gt(gbs, 0);
        const cJSON *probe = cJSON_GetObjectItemCaseSensitive(h, "probe");
        cr_assert(cJSON_IsString(probe) && !strcmp(probe->valuestring, "window"), "the probe's method is said");
        if (with) {
            cr_assert(cJSON_IsNumber(level) && level->valuedouble > 0 && level->valuedouble <= gbs, "level %g, gbs %g",
                      level ? level->valuedouble : -1, gbs);
            cr_assert(cJSON_IsNumber(n) && n->valueint == 3);
        } else {
            cr_assert(!level && !n, "no probes, no level");
        }
        cJSON_Delete(root);
    }
}

static void keep_lines(void *user, const char *line)
{
    char *buf = user;
    const size_t at = strlen(buf);
    snprintf(buf + at, 4096 - at, "%s\n", line);
}

/* A probe more than MP_DECIDE_HOST_MOVED below the grid's level is warned about, one nearer is not.
 * The grid's probes are set far below any real host's (1 GB/s), so that the real probes calibrate
 * adds after them take no part in the lowest. */
Test(calibrate, a_host_that_moved_while_calibrating_is_warned_about)
{
    static const double grids[2][4] = {{1.0, 1.0, 1.0, 0.8}, {1.0, 1.0, 1.0, 0.95}};
    for (int i = 0; i < 2; i++) {
        mp_calib_opts o;
        mp_calib_defaults(&o, true);
        char lines[4096] = "";
        o.progress = keep_lines;
        o.progress_user = lines;
        mp_error err;
        cJSON *root = cJSON_CreateObject(), *a = cJSON_AddArrayToObject(root, "host_read_probes");
        cr_assert_not_null(a);
        for (int j = 0; j < 4; j++)
            cr_assert(cJSON_AddItemToArray(a, cJSON_CreateNumber(grids[i][j])));
        cr_assert_eq(mp_calib_host_read(&o, root, &err), MP_OK, "%s", err.msg);
        const cJSON *h = cJSON_GetObjectItemCaseSensitive(root, "host_read");
        cr_assert_float_eq(cJSON_GetObjectItemCaseSensitive(h, "level_gbs")->valuedouble, 1.0, 1e-9);
        const char *w = strstr(lines, "warning");
        if (i == 0)
            cr_assert(w && strstr(w, "0.8 GB/s") && strstr(w, "20 %") && strstr(w, "calibrate on a quiet machine"),
                      "%s", lines);
        else
            cr_assert_null(w, "%s", lines);
        cJSON_Delete(root);
    }
}

/* Cost files name experts by one rule (mp_expert_quant_name); a trace's quant_types, as collect
 * writes it, reads back to the same name (simulate then matches a cost entry by it), and text in
 * another form does not. */
Test(calibrate, expert_quant_names_from_types_and_trace_text)
{
    char q[MP_EXPERT_QUANT_MAX];
    mp_expert_quant_name(MP_TYPE_Q8_0, MP_TYPE_Q8_0, MP_TYPE_Q8_0, q);
    cr_assert_str_eq(q, "Q8_0");
    mp_expert_quant_name(MP_TYPE_Q4_K, MP_TYPE_Q4_K, MP_TYPE_Q6_K, q);
    cr_assert_str_eq(q, "Q4_K/Q6_K");
    mp_expert_quant_name(MP_TYPE_Q4_K, MP_TYPE_Q5_K, MP_TYPE_Q6_K, q);
    cr_assert_str_eq(q, "Q4_K/Q5_K/Q6_K");
    cr_assert(mp_expert_quant_from_types("Q4_K:ffn_gate_exps,Q4_K:ffn_up_exps,Q6_K:ffn_down_exps", q));
    cr_assert_str_eq(q, "Q4_K/Q6_K");
    cr_assert(mp_expert_quant_from_types("q6_k:ffn_down_exps,Q4_K:ffn_gate_exps,Q4_K:ffn_up_exps", q), "any order, any case");
    cr_assert_str_eq(q, "Q4_K/Q6_K");
    cr_assert(mp_expert_quant_from_types("BF16:ffn_gate_exps,BF16:ffn_up_exps,BF16:ffn_down_exps", q));
    cr_assert_str_eq(q, "BF16");
    /* the model's own name and the trace's agree */
    mp_model *m;
    mp_error e;
    cr_assert_eq(mp_model_load(model, &m, &e), MP_OK, "%s", e.msg);
    char text[128], mq[MP_EXPERT_QUANT_MAX];
    const mp_layer *L = &m->layers[0];
    snprintf(text, sizeof text, "%s:ffn_gate_exps,%s:ffn_up_exps,%s:ffn_down_exps", mp_type_name(L->gate_exps.type),
             mp_type_name(L->up_exps.type), mp_type_name(L->down_exps.type));
    mp_model_expert_quant(L, mq);
    cr_assert(mp_expert_quant_from_types(text, q), "%s", text);
    cr_assert_str_eq(q, mq);
    mp_model_free(m);
    const char *bad[] = {"", "Q4_K", "Q4_K:ffn_gate_exps,Q4_K:ffn_up_exps", "Q4_K:ffn_gate_exps,Q4_K:ffn_up_exps,Q9_X:ffn_down_exps",
                         "Q4_K:ffn_gate,Q4_K:ffn_up,Q6_K:ffn_down", "Q4_K/Q6_K", ":ffn_gate_exps,:ffn_up_exps,:ffn_down_exps",
                         "Q4_KQ4_KQ4_KQ4_KQ4_K:ffn_gate_exps,Q4_K:ffn_up_exps,Q6_K:ffn_down_exps"};
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++)
        cr_assert(!mp_expert_quant_from_types(bad[i], q), "'%s' read as %s", bad[i], q);
    cr_assert(!mp_expert_quant_from_types(NULL, q));
}

/* A name of three types has room for the longest: every weight type's name fits MP_TYPE_NAME_MAX,
 * GATE/UP/DOWN of the three longest comes back whole, and the down type reads back from such a name
 * (mp_decide_far_split_of_grid splits a far route by the down tensor's granule) */
Test(calibrate, expert_quant_names_of_the_longest_types_whole)
{
    int longest[3] = {-1, -1, -1}; /* three types of the longest names, longest first */
    for (int i = 0, t; (t = mp_weight_type_at(i)) >= 0; i++) {
        const char *n = mp_type_name(t);
        cr_assert(n && strlen(n) <= MP_TYPE_NAME_MAX, "type %d's name %s is over %d characters", t, n ? n : "(none)",
                  MP_TYPE_NAME_MAX);
        for (int j = 0; j < 3; j++)
            if (longest[j] < 0 || strlen(n) > strlen(mp_type_name(longest[j]))) {
                memmove(longest + j + 1, longest + j, (size_t)(2 - j) * sizeof *longest);
                longest[j] = t;
                break;
            }
    }
    cr_assert(longest[2] >= 0);
    char q[MP_EXPERT_QUANT_MAX], want[64];
    snprintf(want, sizeof want, "%s/%s/%s", mp_type_name(longest[0]), mp_type_name(longest[1]),
             mp_type_name(longest[2]));
    mp_expert_quant_name(longest[0], longest[1], longest[2], q);
    cr_assert_str_eq(q, want);
    mp_expert_quant_name(longest[0], longest[1], MP_TYPE_Q6_K, q);
    cr_assert_eq(mp_decide_far_split_of_grid(8, 768, q), 3, "%s", q);
}
