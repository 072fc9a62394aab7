/* tests/unit/test_simulate_shards.c — `moeplan simulate A.db B.db`: two traces of one model
 * collected (CPU executor, tiny preset) from disjoint prompt sets replay exactly as the one trace
 * collected from both sets; the same file twice, a copy of a run, and a trace of another model
 * are refused in one line naming both files. */
#include <cjson/cJSON.h>
#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "tests/unit/cli_util.h"

static char dir[256], costs[700];

static void setup(void)
{
    snprintf(dir, sizeof dir, "/tmp/mp_test_shards_XXXXXX");
    cr_assert_not_null(mkdtemp(dir));
    cr_assert_eq(chdir(dir), 0);
    snprintf(costs, sizeof costs, "%s/examples/costs-h200-tiny.json", getenv("MP_SOURCE_ROOT"));
    mp_test_tiny_model(dir, "tiny.gguf");
    mp_test_collect_tiny(dir, "tiny.gguf", "a.json", "[\"Explain mixture of experts\", \"Name three colours\"]", "a.db");
    mp_test_collect_tiny(dir, "tiny.gguf", "b.json", "[\"Why is the sky blue\"]", "b.db");
    mp_test_collect_tiny(dir, "tiny.gguf", "ab.json",
                         "[\"Explain mixture of experts\", \"Name three colours\", \"Why is the sky blue\"]", "ab.db");
}

static void teardown(void)
{
    char cmd[300];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
    cr_assert_eq(system(cmd), 0);
}

TestSuite(shards, .init = setup, .fini = teardown);

static cJSON *simulate_json(const char *traces, const char *json)
{
    static char out[1 << 17];
    char args[2048];
    snprintf(args, sizeof args, "simulate %s -m tiny.gguf --costs '%s' --budget 50MiB,52MiB,56MiB --json %s", traces,
             costs, json);
    cr_assert_eq(mp_test_moeplan(dir, args, MP_TEST_MERGED, out, sizeof out), 0, "%s", out);
    char *text = mp_test_slurp(json);
    cJSON *root = cJSON_Parse(text);
    free(text);
    cr_assert_not_null(root);
    return root;
}

Test(shards, two_traces_replay_as_the_one_of_both_prompt_sets)
{
    cJSON *merged = simulate_json("a.db b.db", "m.json"), *whole = simulate_json("ab.db", "w.json");
    cJSON *mb = cJSON_GetObjectItem(merged, "budgets"), *wb = cJSON_GetObjectItem(whole, "budgets");
    cr_assert_eq(cJSON_GetArraySize(mb), 3);
    /* every policy's every metric at every budget, train and held-out: the same numbers */
    cr_assert(cJSON_Compare(mb, wb, true), "merged %s\nwhole %s", cJSON_PrintUnformatted(mb), cJSON_PrintUnformatted(wb));
    cr_assert_str_eq(cJSON_GetObjectItem(merged, "trace")->valuestring, "a.db + b.db");
    /* and the requests stayed three (not b's request 0 folded into a's) */
    static char out[1 << 17];
    char args[2048];
    snprintf(args, sizeof args, "simulate a.db b.db -m tiny.gguf --costs '%s' --budget 50MiB --policy plan", costs);
    cr_assert_eq(mp_test_moeplan(dir, args, MP_TEST_MERGED, out, sizeof out), 0, "%s", out);
    cr_assert_not_null(strstr(out, "top-4, 3 requests"), "%s", out);
    cJSON_Delete(merged);
    cJSON_Delete(whole);
}

static void refused(const char *traces, const char *line, const char *also)
{
    static char out[1 << 14];
    char args[2048];
    snprintf(args, sizeof args, "simulate %s -m tiny.gguf --costs '%s' --budget 50MiB --json never.json", traces,
             costs);
    cr_assert_eq(mp_test_moeplan(dir, args, MP_TEST_MERGED, out, sizeof out), 1, "%s", out);
    cr_assert_not_null(strstr(out, line), "%s", out);
    cr_assert_not_null(strstr(out, also), "%s", out);
    cr_assert_eq(strchr(out, '\n'), out + strlen(out) - 1, "one line: %s", out);
    cr_assert_neq(access("never.json", F_OK), 0, "nothing written");
}

Test(shards, refuses_what_does_not_merge)
{
    refused("a.db a.db", "moeplan simulate: error: trace a.db: the same file as a.db", "counted twice");
    cr_assert_eq(system("cp a.db copy.db"), 0);
    refused("a.db copy.db", "moeplan simulate: error: trace copy.db: the same run as a.db (run id ", "counted twice");
    static char out[1 << 16];
    cr_assert_eq(mp_test_moeplan(dir, "mkmodel --preset tiny --seed 3 --quiet -o other.gguf", MP_TEST_MERGED, out,
                                 sizeof out), 0, "%s", out);
    mp_test_collect_tiny(dir, "other.gguf", "b.json", "[\"Why is the sky blue\"]", "other.db");
    refused("a.db other.db", "moeplan simulate: error: trace other.db: model SHA-256 ", "differs from a.db's");
}
