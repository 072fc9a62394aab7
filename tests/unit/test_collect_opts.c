/* tests/unit/test_collect_opts.c — `moeplan collect` options and the pre-flight path checks:
 * outputs that equal an input or each other, existing outputs without --force, bad numbers. */
#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "collector/collect_opts.h"

static char tmpdir[256], model[300], prompts[300];

static void setup(void)
{
    snprintf(tmpdir, sizeof tmpdir, "/tmp/mp_test_collect_XXXXXX");
    cr_assert_not_null(mkdtemp(tmpdir));
    snprintf(model, sizeof model, "%s/m.gguf", tmpdir);
    snprintf(prompts, sizeof prompts, "%s/p.jsonl", tmpdir);
    FILE *f = fopen(model, "w");
    fputs("GGUF", f);
    fclose(f);
    f = fopen(prompts, "w");
    fputs("\"hi\"\n", f);
    fclose(f);
    cr_assert_eq(chdir(tmpdir), 0);
}

static void teardown(void)
{
    char cmd[300];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", tmpdir);
    cr_assert_eq(system(cmd), 0);
}

TestSuite(collect_opts, .init = setup, .fini = teardown);

static mp_status parse(mp_collect_opts *o, mp_error *err, const char *trace, const char *extra1,
                       const char *extra2)
{
    char *argv[12] = {"collect", "-m", model, "--prompts", prompts, "--trace", (char *)trace};
    int argc = 7;
    if (extra1)
        argv[argc++] = (char *)extra1;
    if (extra2)
        argv[argc++] = (char *)extra2;
    return mp_collect_opts_parse(argc, argv, o, err);
}

Test(collect_opts, defaults_and_results_beside_the_trace)
{
    mp_collect_opts o;
    mp_error err;
    cr_assert_eq(parse(&o, &err, "out/run1.db", NULL, NULL), MP_OK, "%s", err.msg);
    cr_assert_str_eq(o.results_path, "out/run1.results.json");
    cr_assert_eq(o.max_tokens, 128);
    cr_assert(o.progress == MP_PROGRESS_AUTO && !o.force && !o.raw_prompts && !o.sync_writer && !o.cupti);
    cr_assert_eq(parse(&o, &err, "t.db", "--results", "r.json"), MP_OK);
    cr_assert_str_eq(o.results_path, "r.json");
    cr_assert_eq(parse(&o, &err, "t.db", "--no-progress", "--raw-prompts"), MP_OK);
    cr_assert(o.progress == MP_PROGRESS_OFF && o.raw_prompts);
    cr_assert_eq(parse(&o, &err, "t.db", "--progress", NULL), MP_OK);
    cr_assert_eq(o.progress, MP_PROGRESS_ON);
    cr_assert_eq(parse(&o, &err, "t.db", "--cupti", "--sync-writer"), MP_OK, "%s", err.msg);
    cr_assert(o.cupti && o.sync_writer && o.progress == MP_PROGRESS_AUTO);
    cr_assert_eq(mp_collect_check_paths(&o, &err), MP_OK, "%s", err.msg);
}

Test(collect_opts, usage_errors)
{
    mp_collect_opts o;
    mp_error err;
    char *argv[] = {"collect", "--trace", "t.db"};
    cr_assert_eq(mp_collect_opts_parse(3, argv, &o, &err), MP_ERR_ARG);
    cr_assert(strstr(err.msg, "expected -m MODEL"), "%s", err.msg);
    cr_assert_eq(parse(&o, &err, "t.db", "--max-tokens", "0"), MP_ERR_ARG);
    cr_assert(strstr(err.msg, "--max-tokens 0"), "%s", err.msg);
    cr_assert_eq(parse(&o, &err, "t.db", "--threads", "x"), MP_ERR_ARG);
    cr_assert_eq(parse(&o, &err, "t.db", "--bogus", "1"), MP_ERR_ARG);
    cr_assert(strstr(err.msg, "unknown option '--bogus'"), "%s", err.msg);
    cr_assert_eq(parse(&o, &err, "t.db", "--max-tokens", NULL), MP_ERR_ARG);
    cr_assert(strstr(err.msg, "needs a value"), "%s", err.msg);
}

Test(collect_opts, output_equal_to_an_input_or_the_other_output)
{
    mp_collect_opts o;
    mp_error err;
    cr_assert_eq(parse(&o, &err, "./m.gguf", "--force", NULL), MP_OK);
    cr_assert_eq(mp_collect_check_paths(&o, &err), MP_ERR_ARG);
    cr_assert(strstr(err.msg, "the same file as the model"), "%s", err.msg);
    cr_assert_eq(parse(&o, &err, "t.db", "--results", "p.jsonl"), MP_OK);
    cr_assert_eq(mp_collect_check_paths(&o, &err), MP_ERR_ARG);
    cr_assert(strstr(err.msg, "the same file as the prompt file"), "%s", err.msg);
    cr_assert_eq(parse(&o, &err, "t.db", "--results", "./t.db"), MP_OK);
    cr_assert_eq(mp_collect_check_paths(&o, &err), MP_ERR_ARG);
    cr_assert(strstr(err.msg, "the same file as the trace"), "%s", err.msg);
    /* a symlink to the model is the model */
    cr_assert_eq(symlink(model, "link.db"), 0);
    cr_assert_eq(parse(&o, &err, "link.db", "--force", NULL), MP_OK);
    cr_assert_eq(mp_collect_check_paths(&o, &err), MP_ERR_ARG);
}

Test(collect_opts, existing_outputs_need_force)
{
    mp_collect_opts o;
    mp_error err;
    FILE *f = fopen("t.db", "w");
    fclose(f);
    cr_assert_eq(parse(&o, &err, "t.db", NULL, NULL), MP_OK);
    cr_assert_eq(mp_collect_check_paths(&o, &err), MP_ERR_IO);
    cr_assert(strstr(err.msg, "trace t.db: file exists (use --force"), "%s", err.msg);
    cr_assert_eq(parse(&o, &err, "t.db", "--force", NULL), MP_OK);
    cr_assert_eq(mp_collect_check_paths(&o, &err), MP_OK, "%s", err.msg);
    f = fopen("u.results.json", "w");
    fclose(f);
    cr_assert_eq(parse(&o, &err, "u.db", NULL, NULL), MP_OK);
    cr_assert_eq(mp_collect_check_paths(&o, &err), MP_ERR_IO);
    cr_assert(strstr(err.msg, "results file u.results.json: file exists"), "%s", err.msg);
}

Test(collect_opts, missing_inputs)
{
    mp_collect_opts o;
    mp_error err;
    cr_assert_eq(unlink(prompts), 0);
    cr_assert_eq(parse(&o, &err, "t.db", NULL, NULL), MP_OK);
    cr_assert_eq(mp_collect_check_paths(&o, &err), MP_ERR_IO);
    cr_assert(strstr(err.msg, "p.jsonl: cannot open"), "%s", err.msg);
}
