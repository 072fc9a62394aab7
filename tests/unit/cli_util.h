/* tests/unit/cli_util.h — running the built `moeplan` (or another built program) from a test (its
 * path is in MP_MOEPLAN, set by tests/meson.build) and reading what it printed. */
#ifndef MP_TESTS_CLI_UTIL_H
#define MP_TESTS_CLI_UTIL_H

#include <stddef.h>

#include <cjson/cJSON.h>

typedef enum mp_test_capture {
    MP_TEST_STDERR, /* out gets stderr; stdout is kept in DIR/stdout */
    MP_TEST_MERGED, /* out gets stdout and stderr interleaved (DIR/out) */
} mp_test_capture;

/* Run `moeplan ARGS` (ARGS is shell text, quoted by the caller), capture into out (NUL-terminated,
 * at most cap - 1 bytes) through files in dir, and return the exit status. Fails the test if
 * MP_MOEPLAN is unset or the process did not exit normally. */
int mp_test_moeplan(const char *dir, const char *args, mp_test_capture what, char *out, size_t cap);
/* The same for another built program, its path in the environment variable exe_env (set by
 * tests/meson.build, e.g. MP_MOE_CPU_STREAM). */
int mp_test_run(const char *exe_env, const char *dir, const char *args, mp_test_capture what, char *out,
                size_t cap);

/* Run the script bench/SCRIPT of the source tree (MP_SOURCE_ROOT) with bash, env (shell
 * assignments, "" for none) before it, MOEPLAN the built binary, OUT=DIR/out and WORK=DIR: its
 * stdout kept in DIR/stdout, its stderr into err (as mp_test_moeplan's). The exit status. */
int mp_test_bench_script(const char *dir, const char *script, const char *env, char *err, size_t cap);

/* o's member key, failing the test unless it is a number / a string. */
double mp_test_json_num(const cJSON *o, const char *key);
const char *mp_test_json_str(const cJSON *o, const char *key);

/* The whole file at path as a malloc'd NUL-terminated string (fails the test if it cannot be read);
 * mp_test_stdout(dir) is DIR/stdout, what mp_test_moeplan kept of the last run's stdout. */
char *mp_test_slurp(const char *path);
/* The same, with its size in *size (the file may hold NUL bytes). */
char *mp_test_slurp_n(const char *path, size_t *size);
char *mp_test_stdout(const char *dir);

/* In dir (the current directory): DIR/MODEL, the tiny preset made by `moeplan mkmodel`, and
 * DIR/TRACE collected from it on the CPU executor over the JSON array of prompts given as text
 * (written to DIR/PROMPTS_FILE), 12 tokens each. Fails the test on any error. */
void mp_test_tiny_model(const char *dir, const char *model);
void mp_test_collect_tiny(const char *dir, const char *model, const char *prompts_file, const char *prompts_json,
                          const char *trace);

/* Fail the test unless the STRP profile at path loads in the readers that refuse n_ranked > slots
 * (Strata's, the llama.cpp fork's), as tests/strp_compat.py's reader (no moeplan code) reads them. */
void mp_test_strp_loads(const char *path);

#endif
