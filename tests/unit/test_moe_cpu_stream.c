/* tests/unit/test_moe_cpu_stream.c — bench/moe_cpu_stream (its path in MP_MOE_CPU_STREAM, set by
 * tests/meson.build) on the tiny preset: the timing line, --profile's breakdown, --compare's two
 * variants, a split route's part read in row segments and packed, and bad input refused with a
 * one-line error and a non-zero exit. */
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
    cr_assert_eq(count(out, "us a call: before the region"), 1, "%s", out);
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

/* --part N/D: a split far route's CPU side (the expert's first FFN rows, a segment of every down
 * row). The tiny preset's experts (FFN 256) have one granule of rows, so a second model with FFN
 * 512 is split; run_part runs moe_cpu_stream on it with the part 1/2 and ARGS (exit status). */
static int run_part(const char *args, char *out, size_t cap)
{
    char cmd[512];
    snprintf(cmd, sizeof cmd, "mkmodel --preset tiny --expert-ff 512 --quiet --force -o '%s/ff512.gguf'", tmpdir);
    cr_assert_eq(mp_test_moeplan(tmpdir, cmd, MP_TEST_MERGED, out, cap), 0, "%s", out);
    snprintf(cmd, sizeof cmd, "-m '%s/ff512.gguf' --layers 2 --part 1/2 %s", tmpdir, args);
    return mp_test_run("MP_MOE_CPU_STREAM", tmpdir, cmd, MP_TEST_MERGED, out, cap);
}

/* Runs run_part(ARGS), which must print one timing line for label a and one for label b, and
 * gives the MB a call of each. */
static void timed_pair(const char *args, const char *a, const char *b, double *mb_a, double *mb_b)
{
    char out[8192];
    cr_assert_eq(run_part(args, out, sizeof out), 0, "%s", out);
    const char *labels[2] = {a, b};
    double *mb[2] = {mb_a, mb_b};
    for (int i = 0; i < 2; i++) {
        char line[160];
        snprintf(line, sizeof line, "%s: per call median", labels[i]);
        cr_assert_eq(count(out, line), 1, "%s", out);
        const char *at = strstr(strstr(out, line), "GB/s at the mean (");
        cr_assert(at && sscanf(at + 18, "%lf", mb[i]) == 1, "%s", out);
    }
}

/* --compare-part times the part beside whole routes */
Test(moe_cpu_stream, part_times_a_split_route_beside_whole_ones)
{
    double part_mb = 0, whole_mb = 0;
    timed_pair("--tokens 4 --threads 2 --routes 1 --compare-part", "first route's part 1/2 (256 FFN rows)",
               "whole routes", &part_mb, &whole_mb);
    /* the part reads half of the one route's expert bytes */
    cr_assert(whole_mb > 0 && part_mb < whole_mb, "part %g MB, whole %g MB", part_mb, whole_mb);
}

/* --compare-packed: the same part read from a second copy of down whose rows' segments are packed;
 * the bench checks first that both reads give the same bits (exit 1 otherwise). */
Test(moe_cpu_stream, packed_part_gives_the_same_bits_and_is_timed)
{
    double seg_mb = 0, packed_mb = 0;
    timed_pair("--tokens 4 --threads 2 --routes 1 --compare-packed", "part 1/2 (256 FFN rows), down in row segments",
               "the same part, down packed", &seg_mb, &packed_mb);
    cr_assert(seg_mb > 0 && seg_mb == packed_mb, "%g MB against %g MB: the same bytes either way", seg_mb, packed_mb);
    char out[8192];
    cr_assert_eq(run_part("--compare-packed", out, sizeof out), 2, "%s", out);
    cr_assert_not_null(strstr(out, "give --routes 1"), "%s", out);
    cr_assert_eq(count(out, "\n"), 1, "one line: %s", out);
}

Test(moe_cpu_stream, bad_part_flags_are_refused)
{
    char out[8192];
    cr_assert_eq(run("--layers 2 --part 1/2", out, sizeof out), 2, "%s", out);
    cr_assert_not_null(strstr(out, "cannot be split so"), "tiny's FFN of 256 rows: %s", out);
    cr_assert_eq(run("--layers 2 --part 2/2", out, sizeof out), 2, "%s", out);
    cr_assert_not_null(strstr(out, "--part '2/2'"), "%s", out);
    cr_assert_eq(run("--layers 2 --compare-part", out, sizeof out), 2, "%s", out);
    cr_assert_not_null(strstr(out, "needs --part"), "%s", out);
    cr_assert_eq(run("--layers 2 --routes 1 --compare-packed", out, sizeof out), 2, "%s", out);
    cr_assert_not_null(strstr(out, "--compare-packed needs --part"), "%s", out);
    cr_assert_eq(run("--layers 2 --routes 5", out, sizeof out), 2, "%s", out);
    cr_assert_not_null(strstr(out, "--routes 5"), "%s", out);
}
