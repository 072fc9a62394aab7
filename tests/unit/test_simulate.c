/* tests/unit/test_simulate.c — from a real trace file to results: the trace loader (collector
 * reader -> mp_sim_trace), and `moeplan simulate` end to end (table, JSON, SVG, STRP profile and
 * manifest, llama.cpp override), with its one-line errors on bad input. */
#include <criterion/criterion.h>
#include <cjson/cJSON.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "collector/import.h"
#include "runtime/model.h"
#include "runtime/strp.h"
#include "simulator/sim_load.h"

static char dir[256], csv[512], db[512];

/* 2 requests (seq) x 3 tokens, MoE layers 4 and 7, 4 experts, top-2. As one prefill step per
 * request (the CSV importer's shape). */
static const char *csv_text = "seq,pos,layer,e0,e1,w0,w1\n"
                              "0,0,4,0,1,0.5,0.3\n0,0,7,2,3,0.6,0.2\n"
                              "0,1,4,0,2,0.5,0.3\n0,1,7,2,0,0.6,0.2\n"
                              "0,2,4,1,0,0.5,0.3\n0,2,7,3,2,0.6,0.2\n"
                              "1,0,4,0,3,0.5,0.3\n1,0,7,2,1,0.6,0.2\n"
                              "1,1,4,0,1,0.5,0.3\n1,1,7,2,3,0.6,0.2\n"
                              "1,2,4,3,0,0.5,0.3\n1,2,7,0,2,0.6,0.2\n";

static void setup(void)
{
    snprintf(dir, sizeof dir, "/tmp/mp_test_simulate_XXXXXX");
    cr_assert_not_null(mkdtemp(dir));
    snprintf(csv, sizeof csv, "%s/r.csv", dir);
    snprintf(db, sizeof db, "%s/t.db", dir);
    FILE *f = fopen(csv, "w");
    fputs(csv_text, f);
    fclose(f);
    mp_import_options o = {.format = MP_IMPORT_CSV, .n_experts = 4, .weight_format = MP_TRACE_W_F32};
    mp_import_result res;
    mp_error err;
    cr_assert_eq(mp_import_file(csv, db, &o, &res, &err), MP_OK, "%s", err.msg);
}
static void teardown(void)
{
    char cmd[600];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
    cr_assert_eq(system(cmd), 0);
}
TestSuite(simulate, .init = setup, .fini = teardown);

Test(simulate, loads_a_trace)
{
    mp_sim_trace t;
    mp_sim_trace_facts facts;
    mp_error err;
    cr_assert_eq(mp_sim_load_trace(db, NULL, &t, &facts, &err), MP_OK, "%s", err.msg);
    cr_assert_eq(t.n_layers, 2);
    cr_assert_eq(t.model_layer[0], 4);
    cr_assert_eq(t.model_layer[1], 7);
    cr_assert_eq(t.n_experts, 4);
    cr_assert_eq(t.top_k, 2);
    cr_assert_eq(t.n_requests, 2);
    cr_assert_eq(t.n_steps, 2);
    cr_assert_eq(t.steps[0].rows, 3);
    const uint16_t *l1 = mp_sim_step_ids(&t, &t.steps[0], 1); /* request 0, layer 7: 2 3 / 2 0 / 3 2 */
    const uint16_t want[] = {2, 3, 2, 0, 3, 2};
    cr_assert(!memcmp(l1, want, sizeof want));
    mp_sim_trace_free(&t);
    mp_sim_load_options as_decode = {true};
    cr_assert_eq(mp_sim_load_trace(db, &as_decode, &t, &facts, &err), MP_OK, "%s", err.msg);
    cr_assert_eq(t.n_steps, 6);
    cr_assert_eq(t.steps[4].rows, 1);
    cr_assert_eq(t.steps[4].request, 1);
    const uint16_t *s4 = mp_sim_step_ids(&t, &t.steps[4], 0); /* request 1, token 1, layer 4: 0 1 */
    cr_assert_eq(s4[0], 0);
    cr_assert_eq(s4[1], 1);
    mp_sim_trace_free(&t);
}

Test(simulate, refuses_incomplete_and_foreign_traces)
{
    char cmd[1200];
    snprintf(cmd, sizeof cmd, "sqlite3 '%s' \"update run set status='running'\"", db);
    cr_assert_eq(system(cmd), 0);
    mp_sim_trace t;
    mp_sim_trace_facts facts;
    mp_error err;
    cr_assert_eq(mp_sim_load_trace(db, NULL, &t, &facts, &err), MP_ERR_FORMAT);
    cr_assert_not_null(strstr(err.msg, "status 'running'"), "%s", err.msg);
    cr_assert_not_null(strstr(err.msg, db), "%s", err.msg);
    /* the last step's routing row cut short: its last node's record has too few ids */
    snprintf(cmd, sizeof cmd, "sqlite3 '%s' \"update run set status='complete'; update routing set expert_ids = substr(expert_ids, 1, length(expert_ids) - 1) where key = (select max(key) from routing)\"", db);
    cr_assert_eq(system(cmd), 0);
    cr_assert_eq(mp_sim_load_trace(db, NULL, &t, &facts, &err), MP_ERR_FORMAT);
    cr_assert_not_null(strstr(err.msg, "routing record (request"), "%s", err.msg);
    cr_assert_not_null(strstr(err.msg, "expert_ids blob of"), "%s", err.msg);
    /* the last step's routing row gone: fewer records than the footer counts */
    snprintf(cmd, sizeof cmd, "sqlite3 '%s' \"delete from routing where key = (select max(key) from routing)\"", db);
    cr_assert_eq(system(cmd), 0);
    cr_assert_eq(mp_sim_load_trace(db, NULL, &t, &facts, &err), MP_ERR_FORMAT);
    cr_assert_not_null(strstr(err.msg, "routing records: expected the footer's"), "%s", err.msg);
    cr_assert_neq(mp_sim_load_trace(csv, NULL, &t, &facts, &err), MP_OK); /* not a trace at all */
}

static int run_cli(const char *args, char *out, size_t cap)
{
    const char *exe = getenv("MP_MOEPLAN");
    cr_assert_not_null(exe, "MP_MOEPLAN is not set (run through meson test)");
    char cmd[4096];
    snprintf(cmd, sizeof cmd, "cd '%s' && '%s' %s 2>&1", dir, exe, args);
    FILE *f = popen(cmd, "r");
    size_t n = fread(out, 1, cap - 1, f);
    out[n] = 0;
    int st = pclose(f);
    return WIFEXITED(st) ? WEXITSTATUS(st) : -1;
}

static char costs[600];

static const char *costs_path(void)
{
    snprintf(costs, sizeof costs, "%s/tests/fixtures/costs/fixture.json", getenv("MP_SOURCE_ROOT"));
    return costs;
}

Test(simulate, cli_end_to_end)
{
    static char out[1 << 16];
    char args[2048];
    /* expert Q4_K = 1e6 bytes; 1e6 non-expert + 3 experts */
    snprintf(args, sizeof args,
             "simulate t.db --costs '%s' --expert Q4_K --budget 1000000B,4000000B,9000000B --non-expert-bytes 1000000 "
             "--train-frac 0.5 --json r.json --svg r.svg --emit-profile p.strp --emit-llamacpp --sensitivity",
             costs_path());
    cr_assert_eq(run_cli(args, out, sizeof out), 0, "%s", out);
    cr_assert_not_null(strstr(out, "2 MoE layers x 4 experts, top-2, 2 requests"), "%s", out);
    cr_assert_not_null(strstr(out, "budget 0.00 GiB (4000000 bytes): 3 expert slots of 8"), "%s", out);
    cr_assert_not_null(strstr(out, "llama.cpp:    (every layer fits: no override needed)"), "%s", out);
    cr_assert_not_null(strstr(out, "-ot 'blk\\.(4|7)\\.ffn_.*_exps\\.=CPU'"), "%s", out);
    cr_assert_not_null(strstr(out, "sensitivity (each cost x0.8 / x1.2"), "%s", out);
    cr_assert_not_null(strstr(out, "non_moe    x1.2:"), "%s", out);
    /* 1e6 budget: no slots; the profile is written for the first budget */
    char path[700];
    snprintf(path, sizeof path, "%s/p.strp", dir);
    mp_strp p;
    mp_error err;
    mp_strp_geometry g = {8, 4}; /* model layers 0..7 */
    cr_assert_eq(mp_strp_read_file(path, &g, &p, &err), MP_OK, "%s", err.msg);
    cr_assert_eq(p.slots, 0);
    cr_assert_eq(p.n_ranked, 8);
    cr_assert_eq(p.table, MP_STRP_TABLE_U64_COUNT);
    /* train = request 0: layer 4 routes e0 x3, e1 x2, e2 x1 */
    cr_assert_eq(p.counts[4 * 4 + 0], 3);
    cr_assert_eq(p.counts[4 * 4 + 1], 2);
    cr_assert_eq(p.counts[7 * 4 + 2], 3);
    cr_assert_eq(p.counts[0], 0);
    mp_strp_free(&p);
    snprintf(path, sizeof path, "%s/r.json", dir);
    FILE *f = fopen(path, "rb");
    cr_assert_not_null(f);
    static char json[1 << 20];
    size_t n = fread(json, 1, sizeof json - 1, f);
    json[n] = 0;
    fclose(f);
    cJSON *root = cJSON_Parse(json);
    cr_assert_not_null(root, "report is not JSON");
    cr_assert_eq(cJSON_GetArraySize(cJSON_GetObjectItem(root, "sensitivity")), 14); /* 7 costs x 2 factors */
    cJSON *budgets = cJSON_GetObjectItem(root, "budgets");
    cr_assert_eq(cJSON_GetArraySize(budgets), 3);
    cJSON *b2 = cJSON_GetArrayItem(budgets, 2);
    cr_assert_eq(cJSON_GetObjectItem(b2, "slots")->valuedouble, 8);
    cJSON *pols = cJSON_GetObjectItem(b2, "policies");
    cr_assert_eq(cJSON_GetArraySize(pols), 13);
    cJSON *held = cJSON_GetObjectItem(cJSON_GetArrayItem(pols, 0), "held_out");
    cr_assert_eq(cJSON_GetObjectItem(held, "hit_rate")->valuedouble, 1.0); /* all-gpu */
    cJSON_Delete(root);
    snprintf(path, sizeof path, "%s/p.strp.json", dir);
    cr_assert_eq(access(path, R_OK), 0);
    snprintf(path, sizeof path, "%s/r.svg", dir);
    cr_assert_eq(access(path, R_OK), 0);
}

Test(simulate, cli_errors_are_one_line)
{
    static char out[8192];
    char args[2048];
    snprintf(args, sizeof args, "simulate t.db --costs '%s' --expert Q4_K --budget 1MB --non-expert-bytes 2MB",
             costs_path());
    cr_assert_eq(run_cli(args, out, sizeof out), 1, "%s", out);
    cr_assert_not_null(strstr(out, "moeplan simulate: error: simulate: budget 1000000 bytes is smaller than the "
                                   "non-expert weights (2000000 bytes)"), "%s", out);
    cr_assert_eq(strchr(out, '\n'), out + strlen(out) - 1, "not one line: %s", out);
    snprintf(args, sizeof args, "simulate t.db --costs '%s' --budget 1GB", costs_path());
    cr_assert_eq(run_cli(args, out, sizeof out), 1, "%s", out);
    cr_assert_not_null(strstr(out, "2 GPU expert entries match"), "%s", out);
    cr_assert_eq(run_cli("simulate t.db --costs r.csv --budget 1GB", out, sizeof out), 1, "%s", out);
    cr_assert_not_null(strstr(out, "costs r.csv: offset"), "%s", out);
    cr_assert_eq(run_cli("simulate t.db --costs x.json --budget 12parsecs", out, sizeof out), 2, "%s", out);
    cr_assert_eq(run_cli("simulate t.db --costs x.json --budget 1GB --policy fastest", out, sizeof out), 2, "%s", out);
    cr_assert_not_null(strstr(out, "unknown policy"), "%s", out);
    cr_assert_eq(run_cli("simulate t.db --costs x.json --budget 1GB --profile-policy lru", out, sizeof out), 2, "%s",
                 out);
    cr_assert_eq(run_cli("simulate --help", out, sizeof out), 0, "%s", out);
    cr_assert_not_null(strstr(out, "--emit-profile"), "%s", out);
}

static cJSON *read_json(const char *name)
{
    char path[700];
    snprintf(path, sizeof path, "%s/%s", dir, name);
    FILE *f = fopen(path, "rb");
    cr_assert_not_null(f, "%s missing", path);
    static char text[1 << 20];
    size_t n = fread(text, 1, sizeof text - 1, f);
    text[n] = 0;
    fclose(f);
    cJSON *root = cJSON_Parse(text);
    cr_assert_not_null(root, "%s is not JSON", path);
    return root;
}

/* --sweep alpha=...: each point equals a run of decayed-lfu with that --alpha, at every budget */
Test(simulate, sweep_points_equal_single_runs)
{
    static char out[1 << 16];
    char args[2048];
    const char *common = "--expert Q4_K --budget 2000000B,3000000B --non-expert-bytes 1000000 --train-frac 0.5";
    snprintf(args, sizeof args, "simulate t.db --costs '%s' %s --policy lru --sweep alpha=0.5,0.95 --json s.json",
             costs_path(), common);
    cr_assert_eq(run_cli(args, out, sizeof out), 0, "%s", out);
    cr_assert_not_null(strstr(out, "sweep: decayed-lfu over alpha"), "%s", out);
    cJSON *sw = cJSON_GetObjectItem(read_json("s.json"), "sweep");
    cr_assert_not_null(sw);
    cr_assert_str_eq(cJSON_GetObjectItem(sw, "param")->valuestring, "alpha");
    cJSON *pts = cJSON_GetObjectItem(sw, "points");
    cr_assert_eq(cJSON_GetArraySize(pts), 2);
    const char *alphas[2] = {"0.5", "0.95"};
    for (int v = 0; v < 2; v++) {
        snprintf(args, sizeof args, "simulate t.db --costs '%s' %s --policy decayed-lfu --alpha %s --json a.json",
                 costs_path(), common, alphas[v]);
        cr_assert_eq(run_cli(args, out, sizeof out), 0, "%s", out);
        cJSON *one = read_json("a.json");
        cJSON *pt = cJSON_GetArrayItem(pts, v);
        cr_assert_float_eq(cJSON_GetObjectItem(pt, "value")->valuedouble, atof(alphas[v]), 1e-12);
        for (int b = 0; b < 2; b++) {
            cJSON *bo = cJSON_GetArrayItem(cJSON_GetObjectItem(pt, "budgets"), b);
            cJSON *pols = cJSON_GetObjectItem(cJSON_GetArrayItem(cJSON_GetObjectItem(one, "budgets"), b), "policies");
            cJSON *dl = NULL;
            for (int i = 0; i < cJSON_GetArraySize(pols); i++)
                if (!strcmp(cJSON_GetObjectItem(cJSON_GetArrayItem(pols, i), "policy")->valuestring, "decayed-lfu"))
                    dl = cJSON_GetArrayItem(pols, i);
            cr_assert_not_null(dl);
            for (int split = 0; split < 2; split++) {
                const char *key = split ? "held_out" : "in_sample";
                cJSON *x = cJSON_GetObjectItem(bo, key), *y = cJSON_GetObjectItem(dl, key);
                cr_assert_float_eq(cJSON_GetObjectItem(x, "time_ns")->valuedouble,
                                   cJSON_GetObjectItem(y, "time_ns")->valuedouble, 1e-6, "alpha %s budget %d %s",
                                   alphas[v], b, key);
                cr_assert_eq(cJSON_GetObjectItem(x, "admissions")->valuedouble,
                             cJSON_GetObjectItem(y, "admissions")->valuedouble);
                cr_assert_eq(cJSON_GetObjectItem(x, "hits")->valuedouble, cJSON_GetObjectItem(y, "hits")->valuedouble);
            }
        }
        cJSON_Delete(one);
    }
    /* bad sweeps are usage errors, in one line */
    static const char *const bad[][2] = {
        {"--sweep gamma=1", "expected PARAM=V1,V2,... with PARAM alpha, beta"},
        {"--sweep alpha=0", "value '0': expected 0 < alpha <= 1"},
        {"--sweep window=1.5", "value '1.5': expected an integer window"},
        {"--sweep epsilon=-1", "expected epsilon >= 0"},
        {"--sweep beta=1 --sweep alpha=1", "--sweep given twice"},
        {"--sweep alpha=", "--sweep alpha: no values"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        snprintf(args, sizeof args, "simulate t.db --costs x.json --budget 1GB %s", bad[i][0]);
        cr_assert_eq(run_cli(args, out, sizeof out), 2, "%s: %s", bad[i][0], out);
        cr_assert_not_null(strstr(out, bad[i][1]), "%s: %s", bad[i][0], out);
        cr_assert_eq(strchr(out, '\n'), out + strlen(out) - 1, "not one line: %s", out);
    }
}

Test(simulate, model_gives_the_non_expert_bytes)
{
    static char out[8192];
    char args[4096], model[1024], expect[256];
    snprintf(model, sizeof model, "%s/tests/fixtures/hf/qwen3moe-tiny-f32.gguf", getenv("MP_SOURCE_ROOT"));
    mp_model *m = NULL;
    mp_error err;
    cr_assert_eq(mp_model_load(model, &m, &err), MP_OK, "%s", err.msg);
    const size_t dense = mp_model_dense_bytes(m);
    mp_model_free(m);
    /* a budget of 1000 bytes is below any model's non-expert weights: the refusal names them */
    snprintf(args, sizeof args, "simulate t.db --costs '%s' --expert Q4_K --budget 1000B -m '%s'", costs_path(), model);
    cr_assert_eq(run_cli(args, out, sizeof out), 1, "%s", out);
    snprintf(expect, sizeof expect, "is smaller than the non-expert weights (%zu bytes)", dense);
    cr_assert_not_null(strstr(out, expect), "expected '%s' in: %s", expect, out);
    /* an explicit --non-expert-bytes wins over the model's */
    snprintf(args, sizeof args, "simulate t.db --costs '%s' --expert Q4_K --budget 1000B -m '%s' --non-expert-bytes 2000",
             costs_path(), model);
    cr_assert_eq(run_cli(args, out, sizeof out), 1, "%s", out);
    cr_assert_not_null(strstr(out, "non-expert weights (2000 bytes)"), "%s", out);
    /* a missing model is one line naming it */
    snprintf(args, sizeof args, "simulate t.db --costs '%s' --budget 1GB -m absent.gguf", costs_path());
    cr_assert_eq(run_cli(args, out, sizeof out), 1, "%s", out);
    cr_assert_not_null(strstr(out, "absent.gguf"), "%s", out);
    cr_assert_eq(strchr(out, '\n'), out + strlen(out) - 1, "not one line: %s", out);
}

Test(simulate, model_of_another_shape_is_refused)
{
    static char out[8192];
    char args[4096], model[1024];
    snprintf(model, sizeof model, "%s/tests/fixtures/hf/qwen3moe-tiny-f32.gguf", getenv("MP_SOURCE_ROOT"));
    snprintf(args, sizeof args, "mkmodel --arch qwen3moe --quant f32 --quiet -o other.gguf");
    cr_assert_eq(run_cli(args, out, sizeof out), 0, "%s", out);
    char prompts[700];
    snprintf(prompts, sizeof prompts, "%s/p.json", dir);
    FILE *f = fopen(prompts, "w");
    fputs("[\"routing\"]", f);
    fclose(f);
    snprintf(args, sizeof args, "collect -m '%s' --prompts p.json --trace c.db --max-tokens 2 --raw-prompts --no-progress",
             model);
    cr_assert_eq(run_cli(args, out, sizeof out), 0, "%s", out);
    /* the trace's experts are the HF fixture's (hidden 64, FFN 48); other.gguf's are not */
    snprintf(args, sizeof args, "simulate c.db --costs '%s' --expert Q4_K --budget 1GB -m other.gguf", costs_path());
    cr_assert_eq(run_cli(args, out, sizeof out), 1, "%s", out);
    cr_assert_not_null(strstr(out, "other.gguf: experts of"), "%s", out);
    cr_assert_not_null(strstr(out, "do not match trace c.db"), "%s", out);
    cr_assert_eq(strchr(out, '\n'), out + strlen(out) - 1, "not one line: %s", out);
}
