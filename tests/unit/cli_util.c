/* tests/unit/cli_util.c — see cli_util.h. */
#include "tests/unit/cli_util.h"

#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/wait.h>

int mp_test_moeplan(const char *dir, const char *args, mp_test_capture what, char *out, size_t cap)
{
    return mp_test_run("MP_MOEPLAN", dir, args, what, out, cap);
}

/* Run the shell command line cmd in dir's files: out gets what `what` says (NUL-terminated, at
 * most cap - 1 bytes). The exit status; fails the test if the process did not exit normally. */
static int run_captured(const char *cmd, const char *dir, mp_test_capture what, char *out, size_t cap)
{
    char line[12288], path[4096];
    if (what == MP_TEST_MERGED) {
        snprintf(line, sizeof line, "%s >'%s/out' 2>&1", cmd, dir);
        snprintf(path, sizeof path, "%s/out", dir);
    } else {
        snprintf(line, sizeof line, "%s >'%s/stdout' 2>'%s/stderr'", cmd, dir, dir);
        snprintf(path, sizeof path, "%s/stderr", dir);
    }
    int st = system(line);
    cr_assert(WIFEXITED(st), "did not exit normally: %s", line);
    FILE *f = fopen(path, "r");
    cr_assert_not_null(f, "cannot read %s", path);
    size_t n = fread(out, 1, cap - 1, f);
    out[n] = 0;
    fclose(f);
    return WEXITSTATUS(st);
}

int mp_test_run(const char *exe_env, const char *dir, const char *args, mp_test_capture what, char *out,
                size_t cap)
{
    const char *exe = getenv(exe_env);
    cr_assert_not_null(exe, "%s is not set (run through meson test)", exe_env);
    char cmd[8192];
    snprintf(cmd, sizeof cmd, "'%s' %s", exe, args);
    return run_captured(cmd, dir, what, out, cap);
}

int mp_test_bench_script(const char *dir, const char *script, const char *env, char *err, size_t cap)
{
    const char *root = getenv("MP_SOURCE_ROOT"), *moeplan = getenv("MP_MOEPLAN");
    cr_assert(root && moeplan, "MP_SOURCE_ROOT / MP_MOEPLAN are not set (run through meson test)");
    char cmd[8192];
    snprintf(cmd, sizeof cmd, "MOEPLAN='%s' OUT='%s/out' WORK='%s' %s bash '%s/bench/%s'", moeplan, dir, dir, env,
             root, script);
    return run_captured(cmd, dir, MP_TEST_STDERR, err, cap);
}

double mp_test_json_num(const cJSON *o, const char *key)
{
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, key);
    cr_assert(cJSON_IsNumber(v), "%s is not a number", key);
    return v->valuedouble;
}

const char *mp_test_json_str(const cJSON *o, const char *key)
{
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, key);
    cr_assert(cJSON_IsString(v), "%s is not a string", key);
    return v->valuestring;
}

char *mp_test_slurp_n(const char *path, size_t *size)
{
    FILE *f = fopen(path, "rb");
    cr_assert_not_null(f, "cannot read %s", path);
    cr_assert_eq(fseek(f, 0, SEEK_END), 0);
    const long n = ftell(f);
    cr_assert_geq(n, 0);
    cr_assert_eq(fseek(f, 0, SEEK_SET), 0);
    char *s = malloc((size_t)n + 1);
    cr_assert_not_null(s);
    cr_assert_eq(fread(s, 1, (size_t)n, f), (size_t)n, "short read of %s", path);
    s[n] = 0;
    fclose(f);
    if (size)
        *size = (size_t)n;
    return s;
}

char *mp_test_slurp(const char *path)
{
    return mp_test_slurp_n(path, NULL);
}

char *mp_test_stdout(const char *dir)
{
    char path[4096];
    snprintf(path, sizeof path, "%s/stdout", dir);
    return mp_test_slurp(path);
}

void mp_test_strp_loads(const char *path)
{
    const char *root = getenv("MP_SOURCE_ROOT");
    cr_assert_not_null(root, "MP_SOURCE_ROOT is not set (run through meson test)");
    char cmd[8192];
    snprintf(cmd, sizeof cmd, "python3 '%s/tests/strp_compat.py' check '%s' 2>&1", root, path);
    FILE *f = popen(cmd, "r");
    cr_assert_not_null(f, "cannot run %s", cmd);
    char out[2048];
    const size_t n = fread(out, 1, sizeof out - 1, f);
    out[n] = 0;
    const int st = pclose(f);
    cr_assert(WIFEXITED(st) && WEXITSTATUS(st) == 0, "%s does not load in the other STRP readers: %s", path, out);
}

void mp_test_tiny_model(const char *dir, const char *model)
{
    static char out[1 << 16];
    char args[600];
    snprintf(args, sizeof args, "mkmodel --preset tiny --quiet -o '%s'", model);
    cr_assert_eq(mp_test_moeplan(dir, args, MP_TEST_MERGED, out, sizeof out), 0, "%s", out);
}

void mp_test_collect_tiny(const char *dir, const char *model, const char *prompts_file, const char *prompts_json,
                          const char *trace)
{
    char path[4096];
    snprintf(path, sizeof path, "%s/%s", dir, prompts_file);
    FILE *f = fopen(path, "w");
    cr_assert_not_null(f, "%s", path);
    fputs(prompts_json, f);
    cr_assert_eq(fclose(f), 0, "%s", path);
    static char out[1 << 16];
    char args[1024];
    snprintf(args, sizeof args, "collect -m '%s' --prompts '%s' --raw-prompts --trace '%s' --max-tokens 12 "
             "--no-progress --executor cpu", model, prompts_file, trace);
    cr_assert_eq(mp_test_moeplan(dir, args, MP_TEST_MERGED, out, sizeof out), 0, "%s", out);
}
