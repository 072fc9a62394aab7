/* tests/unit/test_moe_cpu_stream.c — bench/moe_cpu_stream (its path in MP_MOE_CPU_STREAM, set by
 * tests/meson.build) on the tiny preset: the timing line, --profile's breakdown, --compare's two
 * variants, and bad input refused with a one-line error and a non-zero exit. */
#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tests/unit/cli_util.h"

static char tmpdir[64];

static void setup(void)
{
    snprintf(tmpdir, sizeof tmpdir, "/tmp/mp_test_mcs_XXXXXX");
    cr_assert_not_null(mkdtemp(tmpdir));
    char args[256], out[4096];
    snprintf(args, sizeof args, "mkmodel --preset tiny --quiet -o '%s/tiny.gguf'", tmpdir);
    cr_assert_eq(mp_test_moeplan(tmpdir, args, MP_TEST_MERGED, out, sizeof out), 0, "%s", out);
}

static void teardown(void)
{
    char cmd[128];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", tmpdir);
    cr_assert_eq(system(cmd), 0);
}

TestSuite(moe_cpu_stream, .init = setup, .fini = teardown);

/* Run moe_cpu_stream -m TINY ARGS; stdout and stderr merged into out; returns the exit status. */
static int run(const char *args, char *out, size_t cap)
{
    char all[512];
    snprintf(all, sizeof all, "-m '%s/tiny.gguf' %s", tmpdir, args);
    return mp_test_run("MP_MOE_CPU_STREAM", tmpdir, all, MP_TEST_MERGED, out, cap);
}

static int count(const char *s, const char *needle)
{
    int n = 0;
    for (const char *p = strstr(s, needle); p; p = strstr(p + 1, needle))
        n++;
    return n;
}

Test(moe_cpu_stream, profile_says_where_a_call_goes)
{
    char out[8192];
    cr_assert_eq(run("--layers 2 --tokens 4 --threads 2 --profile", out, sizeof out), 0, "%s", out);
    cr_assert_eq(count(out, "per call median"), 1, "%s", out);
    cr_assert_eq(count(out, "profile: per call"), 1, "%s", out);
    double before = -1, region = -1, after = -1;
    const char *p = strstr(out, "before the region");
    cr_assert_not_null(p, "%s", out);
    cr_assert_eq(sscanf(p, "before the region %lf, region %lf, after it %lf", &before, &region, &after), 3, "%s", p);
    cr_assert(before >= 0 && region > 0 && after >= 0, "%s", p);
    cr_assert_not_null(strstr(out, "thread time: late"), "%s", out);
    cr_assert_not_null(strstr(out, "contiguous stream"), "%s", out);
}

Test(moe_cpu_stream, compare_times_both_variants)
{
    char out[8192];
    cr_assert_eq(run("--layers 2 --tokens 4 --threads 2 --compare", out, sizeof out), 0, "%s", out);
    cr_assert_eq(count(out, "pipelined: per call median"), 1, "%s", out);
    cr_assert_eq(count(out, "two regions: per call median"), 1, "%s", out);
}

Test(moe_cpu_stream, bad_input_is_refused)
{
    char out[8192];
    cr_assert_eq(run("--layers 9 --threads 2", out, sizeof out), 2, "%s", out);
    cr_assert_not_null(strstr(out, "has 4 layers: --layers"), "%s", out);
    cr_assert_eq(count(out, "\n"), 1, "one line: %s", out);
    cr_assert_eq(run("--layers 2 --threads 0", out, sizeof out), 2, "%s", out);
    cr_assert_not_null(strstr(out, "--threads '0'"), "%s", out);
    cr_assert_eq(run("--layers 2 --compare --compare-pin", out, sizeof out), 2, "%s", out);
    cr_assert_not_null(strstr(out, "one A/B each"), "%s", out);
}
