/* tests/unit/test_plan.c — `moeplan plan` end to end on the tiny preset: the profile and its
 * manifest are written for one budget, the check decodes with them and the trace's routing, and
 * the predicted (for the whole trace, and for the check's rows under the profile just written) and
 * measured speeds stand side by side; on the CPU executor (this machine has no
 * GPU) a warning says the two do not compare, whatever the difference.
 * Bad input is refused in one line: missing arguments, an online policy, a budget list, an
 * existing profile without --force, a trace of one row. Speeds are never compared with a number. */
#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "runtime/strp.h"
#include "simulator/plan_check.h"
#include "tests/unit/cli_util.h"

static char dir[256], costs[700];

static void setup(void)
{
    snprintf(dir, sizeof dir, "/tmp/mp_test_plan_XXXXXX");
    cr_assert_not_null(mkdtemp(dir));
    cr_assert_eq(chdir(dir), 0); /* the commands' relative paths are the test's files */
    snprintf(costs, sizeof costs, "%s/tests/fixtures/costs/tiny-before-curve.json", getenv("MP_SOURCE_ROOT"));
    mp_test_tiny_model(dir, "tiny.gguf");
    mp_test_collect_tiny(dir, "tiny.gguf", "p.json", "[\"Explain mixture of experts\", \"Why is the sky blue\"]",
                         "t.db");
}

static void teardown(void)
{
    char cmd[300];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
    cr_assert_eq(system(cmd), 0);
}

TestSuite(plan, .init = setup, .fini = teardown);

Test(plan, makes_a_profile_and_checks_it)
{
    static char out[1 << 16];
    char args[2048];
    /* 64 MiB: the tiny model's weights, KV cache and scratch, and room for experts */
    snprintf(args, sizeof args, "plan t.db -m tiny.gguf --costs '%s' --budget 64MiB -o p.strp --verify-tokens 8 "
             "--executor cpu -r 3", costs);
    cr_assert_eq(mp_test_moeplan(dir, args, MP_TEST_MERGED, out, sizeof out), 0, "%s", out);
    cr_assert_not_null(strstr(out, "profile p.strp (plan, "), "%s", out);
    const char *pred = strstr(out, "plan: plan at 64MiB: predicted "), *meas = strstr(out, "plan: measured ");
    cr_assert(pred && meas && pred < meas, "%s", out);
    cr_assert_not_null(strstr(pred, "rows as decode steps"), "%s", out);
    /* the check's own prediction: its 9 rows (a 1-token prompt and 8 steps) under the profile */
    const char *chk = strstr(out, "plan: the check's 9 rows: predicted ");
    cr_assert(chk && pred < chk && chk < meas, "%s", out);
    cr_assert_not_null(strstr(meas, "tg8, median of 3"), "%s", out);
    /* whatever the difference, a CPU check is said not to compare (the prediction is the GPU's) */
    cr_assert_not_null(strstr(out, "plan: warning: the check ran on the CPU executor, the prediction is the GPU "
                                   "executor's: the two do not compare"), "%s", out);
    cr_assert_null(strstr(out, "plan: warning: measured and predicted differ by "), "%s", out);
    /* nor predicted again at its CPU experts' level (the CPU executor's experts are not the plan's) */
    cr_assert_null(strstr(out, "plan: at the level the check's CPU experts ran"), "%s", out);
    /* the baselines plan must not lose to were simulated beside it */
    /* the fixture's tiny costs predate the context curve: said once (the check's simulation prints no
     * table), with what to do */
    const char *needle = "linear, 37.169 ns per key from ", *old_ctx = strstr(out, needle);
    cr_assert_not_null(old_ctx, "%s", out);
    cr_assert_not_null(strstr(old_ctx, "(a cost file from before the measured curve: run `moeplan calibrate` again "
                                       "for it)"), "%s", out);
    cr_assert_null(strstr(old_ctx + strlen(needle), "ns per key from "), "said twice: %s", out);
    cr_assert_not_null(strstr(out, "first-n-cpu"), "%s", out);
    cr_assert_not_null(strstr(out, "static-topn"), "%s", out);
    char path[300];
    snprintf(path, sizeof path, "%s/p.strp", dir);
    mp_strp p;
    mp_error err;
    cr_assert_eq(mp_strp_read_file(path, NULL, &p, &err), MP_OK, "%s", err.msg);
    mp_test_strp_loads(path);
    cr_assert_gt(p.slots, 0, "room in the budget: experts placed");
    cr_assert_eq(p.n_ranked, p.slots, "the pairs are the resident set");
    /* made from the whole trace's train split, not only the check's rows: the first of the two
     * requests (a prompt and 12 tokens) routes more than the check's 9 rows x 4 layers x top-4 */
    cr_assert_not_null(p.counts);
    uint64_t routes = 0;
    for (size_t i = 0; i < (size_t)p.n_layers * p.n_experts; i++)
        routes += p.counts[i];
    cr_assert_gt(routes, 9 * 4 * 4, "%llu train routes in the profile", (unsigned long long)routes);
    mp_strp_free(&p);
    snprintf(path, sizeof path, "%s/p.strp.json", dir);
    cr_assert_eq(access(path, R_OK), 0);
    /* an existing profile is replaced only with --force */
    cr_assert_eq(mp_test_moeplan(dir, args, MP_TEST_MERGED, out, sizeof out), 1, "%s", out);
    cr_assert_not_null(strstr(out, "moeplan plan: error: p.strp exists (use --force to replace it)"), "%s", out);
    /* the profile only */
    snprintf(args, sizeof args, "plan t.db -m tiny.gguf --costs '%s' --budget 64MiB -o q.strp --verify-tokens 0",
             costs);
    cr_assert_eq(mp_test_moeplan(dir, args, MP_TEST_MERGED, out, sizeof out), 0, "%s", out);
    cr_assert_null(strstr(out, "plan: measured"), "%s", out);
    snprintf(path, sizeof path, "%s/q.strp", dir);
    mp_test_strp_loads(path);
}

Test(plan, bad_input_is_one_line)
{
    static char out[8192];
    char args[2048];
    const struct { const char *args, *needle; int rc; } bad[] = {
        {"plan t.db -m tiny.gguf --budget 64MiB -o p.strp", "needs TRACE.db, -m MODEL, --costs, --budget and -o", 2},
        {"plan t.db -m tiny.gguf --costs c.json --budget 64MiB -o p.strp --policy lru", "--policy 'lru': expected a "
                                                                                        "static policy", 2},
        {"plan t.db -m tiny.gguf --costs c.json --budget 8GiB,16GiB -o p.strp", "--budget '8GiB,16GiB': one size", 2},
        {"plan t.db -m tiny.gguf --costs c.json --budget 64MiB -o p.strp -r 0", "invalid value '0' for -r: expected an integer 1..100", 2},
        {"plan t.db -m tiny.gguf --costs c.json --budget 64MiB -o p.strp --bogus 1", "unknown option '--bogus'", 2},
        {"plan missing.db -m tiny.gguf --costs c.json --budget 64MiB -o p.strp", "missing.db", 1},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        cr_assert_eq(mp_test_moeplan(dir, bad[i].args, MP_TEST_MERGED, out, sizeof out), bad[i].rc, "%s: %s",
                     bad[i].args, out);
        cr_assert_not_null(strstr(out, bad[i].needle), "%s: %s", bad[i].args, out);
        cr_assert_eq(strchr(out, '\n'), out + strlen(out) - 1, "not one line: %s", out);
    }
    snprintf(args, sizeof args, "plan --help");
    cr_assert_eq(mp_test_moeplan(dir, args, MP_TEST_MERGED, out, sizeof out), 0, "%s", out);
    cr_assert_not_null(strstr(out, "usage: moeplan plan TRACE.db"), "%s", out);
}

/* The cause a missed check names (mp_plan_miss_cause): the H100 shape sweep's top-8 of 40 row, its
 * CPU experts 0.084 ms/token against 0.054 predicted, the prediction at their level -4.5 %, the
 * probe 141.2 GB/s against 143.8 at calibration: not the host's memory, which read as calibrated,
 * but the cores' time beyond the bytes. The same with the probe at 100 GB/s: the host's memory. */
Test(plan, miss_cause_names_what_moved)
{
    char c[400];
    mp_plan_miss m = {.level_made = true, .level_err = -4.5, .cpu_ms = 0.084, .pred_cpu_ms = 0.054, .level_gbs = 92.8,
                      .cal_gbs = 143.8, .now_gbs = 141.2, .by_window = true};
    mp_plan_miss_cause(&m, c, sizeof c);
    cr_assert(strncmp(c, "the CPU experts: they took 0.084 ms/token where the calibration predicts 0.054", 78) == 0,
              "%s", c);
    cr_assert(strstr(c, "(141.2 GB/s now, 143.8 then)") != NULL, "%s", c);
    cr_assert(strstr(c, "--host-read-gbs 92.8") != NULL, "%s", c);
    m.now_gbs = 100;
    mp_plan_miss_cause(&m, c, sizeof c);
    cr_assert(strncmp(c, "the host's memory: the check's CPU experts took 0.084", 52) == 0, "%s", c);
    m.now_gbs = 141.2, m.by_window = false; /* an older probe does not compare: the memory, as before */
    mp_plan_miss_cause(&m, c, sizeof c);
    cr_assert(strncmp(c, "the host's memory:", 18) == 0, "%s", c);
    m.by_window = true, m.cal_kernels = "avx2", m.run_kernels = "avx512"; /* the kernels come first */
    mp_plan_miss_cause(&m, c, sizeof c);
    cr_assert(strncmp(c, "the CPU kernels: the calibration ran avx2, this process avx512", 62) == 0, "%s", c);
    m.cal_kernels = m.run_kernels = NULL, m.level_err = 25; /* not even at their level: what else differs */
    mp_plan_miss_cause(&m, c, sizeof c);
    cr_assert(strncmp(c, "an uncosted path or a stale calibration", 39) == 0, "%s", c);
    m.other_knobs = "MP_PREFETCH_BYTES 4096 (calibrated at 2048)";
    mp_plan_miss_cause(&m, c, sizeof c);
    cr_assert(strncmp(c, "other knobs: MP_PREFETCH_BYTES", 30) == 0, "%s", c);
    m.other_machine = "an H200";
    mp_plan_miss_cause(&m, c, sizeof c);
    cr_assert(strncmp(c, "another machine: the calibration measured an H200", 49) == 0, "%s", c);
    m.other_machine = NULL, m.other_knobs = NULL, m.now_gbs = 100;
    mp_plan_miss_cause(&m, c, sizeof c);
    cr_assert(strncmp(c, "the host's read bandwidth differs", 33) == 0, "%s", c);
}
