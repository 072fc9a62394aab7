/* tests/unit/test_analyzer_simulation.c — the strict reader of simulate's JSON for `analyze
 * --simulation` (analyzer/simulation.h): what it takes from a good document (held-out speed where
 * the split has decisions, else in-sample; budgets ordered; policies in order of appearance), the
 * verdict per budget (best placement without all-gpu and belady, best whole-layer placement, the
 * smallest budget within 5 % of the largest's best), and one test per refusal, each one line
 * naming the JSON path and what was expected. */
#include <criterion/criterion.h>
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "analyzer/report.h"
#include "analyzer/simulation.h"

/* A policy's metrics: held-out with decisions (its speed counts) unless HO is 0. */
#define POL(name, in_tok, ho_dec, ho_tok)                                                          \
    "{\"policy\": \"" name "\", \"resident_initial\": 3, \"in_sample\": {\"decisions\": 10, "   \
    "\"tok_s\": " #in_tok ", \"ms_per_token\": 1, \"hit_rate\": 0.5, \"layer_hit_rate\": [0.5]}, " \
    "\"held_out\": {\"decisions\": " #ho_dec ", \"tok_s\": " ho_tok ", \"ms_per_token\": "         \
    ho_tok "}}"

/* budgets listed largest first: the reader orders them */
static const char good[] =
    "{\"format\": \"moeplan-simulation\", \"version\": 1, \"trace\": \"t.db\", \"costs\": \"c.json\","
    " \"trace_geometry\": {\"moe_layers\": 2, \"experts\": 8, \"top_k\": 2, \"requests\": 3},"
    " \"config\": {\"train_frac\": 0.5},"
    " \"budgets\": ["
    "  {\"budget_bytes\": 4000, \"slots\": 4, \"policies\": [" POL("all-gpu", 100, 5, "100") ", "
    POL("all-cpu", 10, 5, "10") ", " POL("first-n-cpu", 30, 5, "40") ", " POL("plan", 50, 5, "60")
    ", " POL("belady", 90, 5, "90") "]},"
    "  {\"budget_bytes\": 1000, \"slots\": 1, \"policies\": [" POL("all-cpu", 10, 5, "10") ", "
    POL("plan", 20, 0, "null") ", " POL("best-layers", 15, 5, "16") "]},"
    "  {\"budget_bytes\": 2000, \"slots\": 2, \"policies\": [" POL("plan", 30, 5, "58") "]}"
    " ]}";

Test(analyzer_simulation, reads_what_the_report_needs)
{
    mp_an_simulation s;
    mp_error err;
    cr_assert_eq(mp_an_simulation_parse(good, strlen(good), "s.json", &s, &err), MP_OK, "%s", err.msg);
    cr_assert_str_eq(s.trace, "t.db");
    cr_assert_eq(s.moe_layers, 2);
    cr_assert_eq(s.experts, 8);
    cr_assert_eq(s.top_k, 2);
    cr_assert_eq(s.n_budgets, 3);
    cr_assert_eq(s.n_policies, 6);
    cr_assert_str_eq(s.policy[3], "plan");
    cr_assert_str_eq(s.policy[5], "best-layers");
    /* ordered by size: 1000, 2000, 4000 are listed 2nd, 3rd, 1st */
    cr_assert(s.order[0] == 1 && s.order[1] == 2 && s.order[2] == 0);
    const int plan = mp_an_simulation_policy(&s, "plan");
    cr_assert(s.pt[0][plan].held_out && s.pt[0][plan].tok_s == 60);
    cr_assert(!s.pt[1][plan].held_out && s.pt[1][plan].tok_s == 20, "no held-out decisions: in-sample");
    cr_assert(!s.pt[2][mp_an_simulation_policy(&s, "all-gpu")].ran);
    cr_assert_eq(mp_an_simulation_policy(&s, "lru"), -1);

    mp_an_sim_verdict v;
    mp_an_sim_verdict_at(&s, 0, &v);
    cr_assert_str_eq(s.policy[v.best], "plan", "all-gpu and belady are no placement under the budget");
    cr_assert_str_eq(s.policy[v.whole_layer], "first-n-cpu");
    cr_assert_str_eq(s.policy[v.all_cpu], "all-cpu");
    cr_assert_str_eq(s.policy[v.all_gpu], "all-gpu");
    mp_an_sim_verdict_at(&s, 1, &v);
    cr_assert_str_eq(s.policy[v.best], "plan");
    cr_assert_str_eq(s.policy[v.whole_layer], "best-layers");
    cr_assert_eq(v.all_gpu, -1);
    mp_an_sim_verdict_at(&s, 2, &v);
    cr_assert(v.all_cpu == -1 && v.whole_layer == -1);
    /* 58 tok/s at 2000 bytes is within 5 % of 60 at 4000; 20 at 1000 is not */
    cr_assert_eq(mp_an_sim_enough_budget(&s), 2);
}

/* good with the first occurrence of from replaced by to: refused with want in its one line */
static void refused(const char *from, const char *to, const char *want)
{
    char doc[sizeof good + 512];
    const char *at = strstr(good, from);
    cr_assert_not_null(at, "the fixture lacks %s", from);
    snprintf(doc, sizeof doc, "%.*s%s%s", (int)(at - good), good, to, at + strlen(from));
    mp_an_simulation s;
    mp_error err;
    cr_assert_eq(mp_an_simulation_parse(doc, strlen(doc), "s.json", &s, &err), MP_ERR_FORMAT,
                 "accepted: %s -> %s", from, to);
    cr_assert(strstr(err.msg, want), "'%s' lacks '%s'", err.msg, want);
    cr_assert(!strncmp(err.msg, "simulation s.json: ", 19), "%s", err.msg);
    cr_assert_null(strchr(err.msg, '\n'));
    cr_assert_eq(s.n_budgets, 0, "a refused document leaves nothing behind");
}

Test(analyzer_simulation, refusals_name_the_path)
{
    refused("\"moeplan-simulation\"", "\"moeplan-costs\"",
            "$.format: expected \"moeplan-simulation\"");
    refused("\"version\": 1", "\"version\": 2", "$.version: 2: expected 1");
    refused("\"trace\": \"t.db\"", "\"trace\": 5", "$.trace: expected the trace's path");
    refused("\"moe_layers\": 2", "\"moe_layers\": 0", "$.trace_geometry.moe_layers: expected an integer in 1..4096");
    refused("\"top_k\": 2, ", "", "$.trace_geometry.top_k: missing");
    refused("\"budgets\": [", "\"budgets\": 3, \"x\": [", "$.budgets: expected an array of 1..64 budgets");
    refused("\"budget_bytes\": 1000", "\"budget_bytes\": 4000",
            "$.budgets[1]: budget_bytes 4000 again: expected each budget once");
    refused("\"budget_bytes\": 1000", "\"budget_bytes\": 1000.5", "$.budgets[1].budget_bytes: expected an integer");
    refused("\"policies\": [{\"policy\": \"all-cpu\"", "\"policies\": [], \"p\": [{\"policy\": \"all-cpu\"",
            "$.budgets[1].policies: expected an array of 1..32 policies");
    refused("\"policy\": \"plan\"", "\"policy\": \"<b>\"", "$.budgets[0].policies[3].policy: expected a policy name");
    refused("\"policy\": \"first-n-cpu\"", "\"policy\": \"plan\"",
            "$.budgets[0].policies[3].policy: \"plan\" again: expected each policy once per budget");
    refused("\"tok_s\": 100", "\"tok_s\": -1", "$.budgets[0].policies[0].in_sample.tok_s: expected a number > 0, or null");
    refused("\"tok_s\": 100, \"ms_per_token\": 1", "\"tok_s\": null, \"ms_per_token\": 1",
            "$.budgets[0].policies[0].in_sample: tok_s and ms_per_token: expected both numbers or both null");
    refused("\"decisions\": 10", "\"decisions\": -3", "$.budgets[0].policies[0].in_sample.decisions: expected an integer");
    refused("\"held_out\": {\"decisions\": 5", "\"held_out\": {\"decisions\": 5, \"x\": {\"x\": 1, \"x\": 2}",
            "key \"x\" repeated");
    /* the split the report would show has no speed */
    refused("\"in_sample\": {\"decisions\": 10, \"tok_s\": 20, \"ms_per_token\": 1",
            "\"in_sample\": {\"decisions\": 10, \"tok_s\": null, \"ms_per_token\": null",
            "$.budgets[1].policies[1].in_sample.tok_s: null: expected the predicted tok/s");
    refused("{\"format\"", "[{\"format\"", "not valid JSON");
    refused(" ]}", " ]} {}", "text after the JSON value");
}

Test(analyzer_simulation, not_an_object_and_empty)
{
    mp_an_simulation s;
    mp_error err;
    cr_assert_eq(mp_an_simulation_parse("[1]", 3, "s.json", &s, &err), MP_ERR_FORMAT);
    cr_assert(strstr(err.msg, "simulation s.json: $: expected a JSON object"), "%s", err.msg);
    cr_assert_eq(mp_an_simulation_parse("", 0, "s.json", &s, &err), MP_ERR_FORMAT);
    cr_assert(strstr(err.msg, "simulation s.json: byte 0: "), "%s", err.msg);
    cr_assert_eq(mp_an_simulation_load("/nonexistent/s.json", &s, &err), MP_ERR_IO);
    cr_assert(strstr(err.msg, "/nonexistent/s.json"), "%s", err.msg);
}
