/* tests/unit/test_cmd_import.c — `moeplan import` as a user runs it: exit status 0 / 1 (bad input)
 * / 2 (usage), one-line "moeplan import: error: ..." messages, --help, and no output left behind. */
#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "tests/unit/cli_util.h"

static char tmpdir[256];

static void setup(void)
{
    snprintf(tmpdir, sizeof tmpdir, "/tmp/mp_test_cmd_import_XXXXXX");
    cr_assert_not_null(mkdtemp(tmpdir));
}

static void teardown(void)
{
    char cmd[300];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", tmpdir);
    cr_assert_eq(system(cmd), 0);
}

TestSuite(cmd_import, .init = setup, .fini = teardown);

/* Run `moeplan ARGS` (ARGS is shell text), capture stderr in err_out; returns the exit status. */
static int moeplan(const char *args, char *err_out, size_t cap)
{
    return mp_test_moeplan(tmpdir, args, MP_TEST_STDERR, err_out, cap);
}

static int lines(const char *s)
{
    int n = 0;
    for (; *s; s++)
        n += *s == '\n';
    return n;
}

Test(cmd_import, help_and_usage_errors)
{
    char err[4096];
    cr_assert_eq(moeplan("import --help", err, sizeof err), 0);
    cr_assert_eq(moeplan("import csv", err, sizeof err), 2);
    cr_assert(strstr(err, "moeplan import: error: expected FORMAT IN --trace OUT.db"), "%s", err);
    cr_assert_eq(lines(err), 1, "%s", err);
    cr_assert_eq(moeplan("import parquet in --trace out.db", err, sizeof err), 2);
    cr_assert(strstr(err, "unknown format 'parquet'"), "%s", err);
    cr_assert_eq(moeplan("import csv in --trace out.db --experts 0", err, sizeof err), 2);
    cr_assert(strstr(err, "--experts 0"), "%s", err);
    cr_assert_eq(moeplan("import csv in --trace in", err, sizeof err), 1); /* no file "in" */
    cr_assert(strstr(err, "in: cannot open"), "%s", err);
}

Test(cmd_import, bad_input_is_one_line_and_exit_1)
{
    char in[300], args[1024], err[4096], out[300];
    snprintf(in, sizeof in, "%s/t.csv", tmpdir);
    snprintf(out, sizeof out, "%s/t.db", tmpdir);
    FILE *f = fopen(in, "w");
    fputs("seq,pos,layer,e0,w0\n0,0,1,5,0.5\n0,1,1,x,0.5\n", f);
    fclose(f);
    snprintf(args, sizeof args, "import auto '%s' --trace '%s'", in, out);
    cr_assert_eq(moeplan(args, err, sizeof err), 1);
    cr_assert(strstr(err, "moeplan import: error: "), "%s", err);
    cr_assert(strstr(err, "line 3: e0 'x' is not an expert id"), "%s", err);
    cr_assert_eq(lines(err), 1, "%s", err);
    cr_assert_neq(access(out, F_OK), 0, "an output was left behind");
}

Test(cmd_import, imports_and_refuses_to_overwrite)
{
    char in[300], args[1024], err[4096], out[300];
    snprintf(in, sizeof in, "%s/t.csv", tmpdir);
    snprintf(out, sizeof out, "%s/t.db", tmpdir);
    FILE *f = fopen(in, "w");
    fputs("seq,pos,layer,e0,e1,w0,w1\n0,0,1,5,2,0.5,0.25\n0,1,1,3,2,0.5,0.25\n", f);
    fclose(f);
    snprintf(args, sizeof args, "import csv '%s' --trace '%s' --experts 8 --weights f16", in, out);
    cr_assert_eq(moeplan(args, err, sizeof err), 0, "%s", err);
    cr_assert_eq(access(out, F_OK), 0);
    cr_assert_eq(moeplan(args, err, sizeof err), 1);
    cr_assert(strstr(err, "file exists (use --force"), "%s", err);
    snprintf(args, sizeof args, "import csv '%s' --trace '%s' --force", in, out);
    cr_assert_eq(moeplan(args, err, sizeof err), 0, "%s", err);
}

/* An id-only CSV (no router weights) imports, and the command says what it stored instead. */
Test(cmd_import, ids_only_csv_says_weights_are_uniform)
{
    char in[300], args[1024], err[4096], out[300];
    snprintf(in, sizeof in, "%s/ids.csv", tmpdir);
    snprintf(out, sizeof out, "%s/t.db", tmpdir);
    FILE *f = fopen(in, "w");
    fputs("\"seq\",\"pos\",\"layer\",\"e0\",\"e1\"\r\n\"0\",\"0\",\"1\",\"5\",\"2\"\r\n", f);
    fclose(f);
    snprintf(args, sizeof args, "import auto '%s' --trace '%s'", in, out);
    cr_assert_eq(moeplan(args, err, sizeof err), 0, "%s", err);
    char *so = mp_test_stdout(tmpdir);
    cr_assert(strstr(so, "imported ") && strstr(so, "(csv): 1 requests"), "%s", so);
    cr_assert(strstr(so, "ids.csv has no router weights: every choice is stored with weight "
                         "1/top_k"), "%s", so);
    free(so);
}

/* --progress draws the two passes' lines (input bytes with the records found, then records
 * written); without it and without a terminal, stderr stays empty. */
Test(cmd_import, progress_lines_when_asked)
{
    char in[300], args[1024], err[4096], out[300];
    snprintf(in, sizeof in, "%s/t.csv", tmpdir);
    snprintf(out, sizeof out, "%s/t.db", tmpdir);
    FILE *f = fopen(in, "w");
    fputs("seq,pos,layer,e0,e1,w0,w1\n0,0,1,5,2,0.5,0.25\n0,1,1,3,2,0.5,0.25\n1,0,1,3,2,0.5,0.25\n", f);
    fclose(f);
    snprintf(args, sizeof args, "import csv '%s' --trace '%s' --progress", in, out);
    cr_assert_eq(moeplan(args, err, sizeof err), 0, "%s", err);
    cr_assert_eq(lines(err), 2, "%s", err);
    cr_assert(strstr(err, "import: check: 0.0/0.0 MiB (100.0 %), ") &&
              strstr(err, ", 2 records ("), "%s", err);
    cr_assert(strstr(err, "\nimport: write: 2/2 records (100.0 %), "), "%s", err);
    snprintf(args, sizeof args, "import csv '%s' --trace '%s' --force", in, out);
    cr_assert_eq(moeplan(args, err, sizeof err), 0, "%s", err);
    cr_assert_str_eq(err, "");
    snprintf(args, sizeof args, "import csv '%s' --trace '%s' --force --progress --no-progress", in,
             out);
    cr_assert_eq(moeplan(args, err, sizeof err), 0, "%s", err);
    cr_assert_str_eq(err, "", "the last of --progress and --no-progress wins");
}
