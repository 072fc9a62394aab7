/* tests/unit/test_simulate.c — from a real trace file to results: the trace loader (collector
 * reader -> mp_sim_trace), and `moeplan simulate` end to end (table, JSON, SVG, STRP profile and
 * manifest), with its one-line errors on bad input; non-MoE time from the
 * cost file and from a trace's measured durations and timing (--non-moe), computed by hand. */
#include <criterion/criterion.h>
#include <criterion/logging.h>
#include <cjson/cJSON.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "collector/import.h"
#include "collector/trace.h"
#include "kernels/quant.h"
#include "runtime/decide.h"
#include "runtime/model.h"
#include "runtime/placement.h"
#include "runtime/strp.h"
#include "simulator/sim_load.h"
#include "tests/unit/analyzer_fixture.h"
#include "tests/unit/cli_util.h"

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
    mp_sim_load_options as_decode = {.as_decode = true};
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
    cr_assert_not_null(strstr(err.msg, "run status is 'running'"), "%s", err.msg);
    cr_assert_not_null(strstr(err.msg, db), "%s", err.msg);
    /* the last step's routing row cut short: its last node's record has too few ids */
    snprintf(cmd, sizeof cmd, "sqlite3 '%s' \"update run set status='complete'; update routing set expert_ids = substr(expert_ids, 1, length(expert_ids) - 1) where key = (select max(key) from routing)\"", db);
    cr_assert_eq(system(cmd), 0);
    cr_assert_eq(mp_sim_load_trace(db, NULL, &t, &facts, &err), MP_ERR_FORMAT);
    cr_assert_not_null(strstr(err.msg, "request 1 (ord 1), step 0, node 7"), "%s", err.msg);
    cr_assert_not_null(strstr(err.msg, "5 expert ids, expected rows × top-k = 3 × 2 = 6"), "%s", err.msg);
    /* the last step's routing row gone: a step without routing (then fewer records than the footer) */
    snprintf(cmd, sizeof cmd, "sqlite3 '%s' \"delete from routing where key = (select max(key) from routing)\"", db);
    cr_assert_eq(system(cmd), 0);
    cr_assert_eq(mp_sim_load_trace(db, NULL, &t, &facts, &err), MP_ERR_FORMAT);
    cr_assert_not_null(strstr(err.msg, "request 1, step 0: routing for 0 of 2 nodes"), "%s", err.msg);
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

/* The fixture cost file, parsed (the caller edits it and hands it to write_json). */
static cJSON *fixture_costs(void)
{
    FILE *f = fopen(costs_path(), "rb");
    cr_assert_not_null(f, "%s missing", costs_path());
    static char text[1 << 16];
    const size_t n = fread(text, 1, sizeof text - 1, f);
    text[n] = 0;
    fclose(f);
    cJSON *root = cJSON_Parse(text);
    cr_assert_not_null(root, "%s is not JSON", costs_path());
    return root;
}

/* root written to dir/name, then freed. */
static void write_json(cJSON *root, const char *name)
{
    char path[700];
    snprintf(path, sizeof path, "%s/%s", dir, name);
    char *text = cJSON_Print(root);
    cr_assert_not_null(text);
    FILE *f = fopen(path, "wb");
    cr_assert_not_null(f, "%s", path);
    fputs(text, f);
    fclose(f);
    cJSON_free(text);
    cJSON_Delete(root);
}

/* The entry of `policy` at budget index b of a simulate JSON report (NULL if absent). */
static cJSON *find_policy(cJSON *root, int b, const char *policy)
{
    cJSON *pols = cJSON_GetObjectItem(cJSON_GetArrayItem(cJSON_GetObjectItem(root, "budgets"), b), "policies");
    for (int i = 0; i < cJSON_GetArraySize(pols); i++)
        if (!strcmp(cJSON_GetObjectItem(cJSON_GetArrayItem(pols, i), "policy")->valuestring, policy))
            return cJSON_GetArrayItem(pols, i);
    return NULL;
}

Test(simulate, cli_end_to_end)
{
    static char out[1 << 16];
    char args[2048];
    /* expert Q4_K = 1e6 bytes; 1e6 non-expert + 3 experts */
    snprintf(args, sizeof args,
             "simulate t.db --costs '%s' --expert Q4_K --budget 1000000B,4000000B,9000000B --non-expert-bytes 1000000 "
             "--train-frac 0.5 --json r.json --svg r.svg --emit-profile p.strp --sensitivity",
             costs_path());
    cr_assert_eq(run_cli(args, out, sizeof out), 0, "%s", out);
    cr_assert_not_null(strstr(out, "2 MoE layers x 4 experts, top-2, 2 requests"), "%s", out);
    cr_assert_not_null(strstr(out, "budget 3.81 MiB (4000000 bytes): 3 expert slots of 8"), "%s", out);
    cr_assert_not_null(strstr(out, "sensitivity (each cost x0.8 / x1.2"), "%s", out);
    cr_assert_not_null(strstr(out, "non_moe    x1.2:"), "%s", out);
    /* 1e6 budget: no slots; the profile is written for the first budget */
    char path[700];
    snprintf(path, sizeof path, "%s/p.strp", dir);
    mp_strp p;
    mp_error err;
    mp_strp_geometry g = {8, 4}; /* model layers 0..7 */
    cr_assert_eq(mp_strp_read_file(path, &g, &p, &err), MP_OK, "%s", err.msg);
    mp_test_strp_loads(path);
    /* no resident pairs; the counts rank the 8 experts of MoE layers 4 and 7, none of the dense ones */
    cr_assert_eq(p.slots, 0);
    cr_assert_eq(p.n_ranked, 0);
    cr_assert_eq(p.n_tail, 8);
    for (uint32_t i = 0; i < p.n_tail; i++)
        cr_assert(p.tail[i].layer == 4 || p.tail[i].layer == 7, "tail %u: layer %u", i, p.tail[i].layer);
    cr_assert_eq(p.table, MP_STRP_TABLE_U64_COUNT);
    /* train = request 0: layer 4 routes e0 x3, e1 x2, e2 x1 */
    cr_assert_eq(p.counts[4 * 4 + 0], 3);
    cr_assert_eq(p.counts[4 * 4 + 1], 2);
    cr_assert_eq(p.counts[7 * 4 + 2], 3);
    cr_assert_eq(p.counts[0], 0);
    mp_strp_free(&p);
    cJSON *root = read_json("r.json");
    cr_assert_eq(cJSON_GetArraySize(cJSON_GetObjectItem(root, "sensitivity")), 14); /* 7 costs x 2 factors */
    cJSON *budgets = cJSON_GetObjectItem(root, "budgets");
    cr_assert_eq(cJSON_GetArraySize(budgets), 3);
    cJSON *b2 = cJSON_GetArrayItem(budgets, 2);
    cr_assert_eq(cJSON_GetObjectItem(b2, "slots")->valuedouble, 8);
    cJSON *pols = cJSON_GetObjectItem(b2, "policies");
    cr_assert_eq(cJSON_GetArraySize(pols), 14); /* every policy but profile (no --placement-profile) */
    cJSON *held = cJSON_GetObjectItem(cJSON_GetArrayItem(pols, 0), "held_out");
    cr_assert_eq(cJSON_GetObjectItem(held, "hit_rate")->valuedouble, 1.0); /* all-gpu */
    cJSON_Delete(root);
    snprintf(path, sizeof path, "%s/p.strp.json", dir);
    cr_assert_eq(access(path, R_OK), 0);
    /* the budgets' labels: distinct and right (1e6 B = 977 KiB, 4e6 B = 3.81 MiB, 9e6 B = 8.58 MiB),
     * in budget order */
    snprintf(path, sizeof path, "%s/r.svg", dir);
    FILE *f = fopen(path, "r");
    cr_assert_not_null(f, "no %s", path);
    static char svg[1 << 16];
    svg[fread(svg, 1, sizeof svg - 1, f)] = '\0';
    fclose(f);
    static const char *const want[] = {">977 KiB</text>", ">3.81 MiB</text>", ">8.58 MiB</text>"};
    const char *at = svg;
    for (int i = 0; i < 3; i++) {
        const char *hit = strstr(at, want[i]);
        cr_assert_not_null(hit, "budget label %s missing or out of order in %s", want[i], path);
        at = hit + 1;
    }
    cr_assert_null(strstr(svg, "0.00 GiB"), "%s", path);
}

/* What a cost file's host probes do not give, said in notes: a decode grid without $.host_bus
 * (written before calibrate measured the two readers at once) has a floor of the readers' rates
 * alone, summed (with host_bus, no note); a level the older probe measured does not compare with a
 * --host-read-gbs from the window probe (with host_read.probe "window", no note). */
Test(simulate, notes_what_the_host_probes_do_not_give)
{
    static char out[1 << 16];
    char args[2048];
    snprintf(args, sizeof args, "simulate t.db --costs '%s' --expert Q4_K --budget 4000000B --non-expert-bytes 1000000",
             costs_path());
    cr_assert_eq(run_cli(args, out, sizeof out), 0, "%s", out);
    cr_assert_not_null(strstr(out, "note: the floor of reading cold experts from host memory sums the cores' and the "
                                   "bus's rates, each measured alone ("),
                       "%s", out);
    cr_assert_not_null(strstr(out, "has no host_bus, the two readers measured at once: calibrate again to have it)"),
                       "%s", out);
    cJSON *root = fixture_costs();
    cJSON *hb = cJSON_AddObjectToObject(root, "host_bus");
    cJSON_AddNumberToObject(hb, "gbs", 60);
    cJSON_AddNumberToObject(hb, "cpu_gbs", 40);
    cJSON_AddNumberToObject(hb, "bus_gbs", 20);
    cJSON_AddNumberToObject(hb, "threads", 16);
    cJSON_AddNumberToObject(hb, "probes", 3);
    write_json(root, "costs-hb.json");
    snprintf(args, sizeof args, "simulate t.db --costs costs-hb.json --expert Q4_K --budget 4000000B "
             "--non-expert-bytes 1000000");
    cr_assert_eq(run_cli(args, out, sizeof out), 0, "%s", out);
    cr_assert_null(strstr(out, "has no host_bus"), "%s", out);
    /* --host-read-gbs against a level an older probe measured (the fixture names no probe): said;
     * against a window probe's level: not */
    snprintf(args, sizeof args, "simulate t.db --costs '%s' --expert Q4_K --budget 4000000B --non-expert-bytes 1000000 "
             "--host-read-gbs 40", costs_path());
    cr_assert_eq(run_cli(args, out, sizeof out), 0, "%s", out);
    cr_assert_not_null(strstr(out, "note: --host-read-gbs 40.0 scales the CPU's costs from "), "%s", out);
    cr_assert_not_null(strstr(out, "which an older probe measured"), "%s", out);
    root = fixture_costs();
    cJSON_AddStringToObject(cJSON_GetObjectItem(root, "host_read"), "probe", "window");
    write_json(root, "costs-window.json");
    snprintf(args, sizeof args, "simulate t.db --costs costs-window.json --expert Q4_K --budget 4000000B "
             "--non-expert-bytes 1000000 --host-read-gbs 40");
    cr_assert_eq(run_cli(args, out, sizeof out), 0, "%s", out);
    cr_assert_null(strstr(out, "an older probe"), "%s", out);
}

/* A decode grid in coarser far units than this build's rule (the fixture: top-2 of 768 FFN rows of
 * Q4_K, whole routes; the rule: thirds) is used as it is, and said in a note where far routes ran
 * (decode steps of all-cpu run one far, cpu_share_of_decode_steps_from_the_grid below); a grid in
 * the rule's units is not. */
static void write_timed_trace(void);

/* simulate of write_timed_trace's trace as decode with cost_file (a path, quoted), its output
 * into out; it must succeed */
static void simulate_timed(const char *cost_file, char *out, size_t cap)
{
    char args[2048];
    snprintf(args, sizeof args, "simulate timed.db --costs '%s' --expert Q4_K --budget 3000000B "
             "--non-expert-bytes 1000000 --train-frac 1 --as-decode", cost_file);
    cr_assert_eq(run_cli(args, out, cap), 0, "%s", out);
}

Test(simulate, notes_far_units_coarser_than_the_rule)
{
    cr_assert_eq(mp_decide_far_split_of_grid(2, 768, "Q4_K"), 3);
    write_timed_trace();
    static char out[1 << 16];
    simulate_timed(costs_path(), out, sizeof out);
    cr_assert_not_null(strstr(out, "note: far routes (the GPU reading cold experts over the bus"), "%s", out);
    cr_assert_not_null(strstr(out, "decode grid counts far work in 1/1 of an expert, this build's rule in 1/3 "
                                   "(runtime/decide.h, mp_decide_far_split)"),
                       "%s", out);
    /* the same points counted in thirds (far 1 is a third of an expert now): no note */
    cJSON *root = fixture_costs();
    cJSON_AddNumberToObject(cJSON_GetObjectItem(root, "decode_layers"), "far_split", 3);
    write_json(root, "costs-thirds.json");
    simulate_timed("costs-thirds.json", out, sizeof out);
    cr_assert_not_null(strstr(out, "note: far routes (the GPU reading cold experts over the bus"), "%s", out);
    cr_assert_null(strstr(out, "this build's rule in"), "%s", out);
}

/* A decode grid measured on a noisy host (mp_cost_decode_spread: its points' spread over their median
 * above MP_COST_GRID_NOISY on average) is said in a note; the fixture's steady grid is not. */
Test(simulate, notes_a_grid_measured_on_a_noisy_host)
{
    write_timed_trace();
    static char out[1 << 16];
    simulate_timed(costs_path(), out, sizeof out);
    cr_assert_null(strstr(out, "while it was measured"), "%s", out);
    cJSON *root = fixture_costs();
    const cJSON *p;
    cJSON_ArrayForEach(p, cJSON_GetObjectItem(cJSON_GetObjectItem(root, "decode_layers"), "points"))
        cJSON_SetNumberValue(cJSON_GetObjectItem(p, "spread_ns"), 0.5 * cJSON_GetObjectItem(p, "median_ns")->valuedouble);
    write_json(root, "costs-noisy.json");
    simulate_timed("costs-noisy.json", out, sizeof out);
    cr_assert_not_null(strstr(out, "costs-noisy.json's decode grid spread 50.0 % of a layer's time on average while "
                                   "it was measured (quiet hosts: under 20 %)"),
                       "%s", out);
}

/* A CPU expert curve whose call of fewer experts took much longer than one of more
 * (mp_cost_cpu_curve_inverted) is said in a note; a curve rising with the experts is not. */
Test(simulate, notes_a_cpu_curve_measured_on_a_noisy_host)
{
    write_timed_trace();
    static char out[1 << 16];
    const double medians[2][2] = {{300e3, 520e3}, {900e3, 300e3}};
    const char *names[2] = {"costs-curve.json", "costs-curve-noisy.json"};
    for (int v = 0; v < 2; v++) {
        cJSON *root = fixture_costs();
        cJSON *curve = cJSON_AddArrayToObject(cJSON_GetArrayItem(cJSON_GetObjectItem(root, "cpu_expert"), 0),
                                              "concurrent");
        for (int k = 0; k < 2; k++) {
            cJSON *p = cJSON_CreateObject();
            cJSON_AddNumberToObject(p, "experts", k + 1);
            cJSON_AddNumberToObject(p, "median_ns", medians[v][k]);
            cJSON_AddNumberToObject(p, "spread_ns", 1000);
            cJSON_AddItemToArray(curve, p);
        }
        write_json(root, names[v]);
        simulate_timed(names[v], out, sizeof out);
        if (v == 0)
            cr_assert_null(strstr(out, "for less work"), "%s", out);
        else
            cr_assert_not_null(strstr(out, "in costs-curve-noisy.json a CPU call of 1 Q4_K expert took 900.0 us and one "
                                           "of 2 300.0 (3.0x for less work; quiet hosts: at most 1.5x)"),
                               "%s", out);
    }
}

/* A cost file that says which CPU kernels calibrate ran: a note when this process dispatches another
 * level (its CPU experts would not run at the calibration's times), none when it does not say. */
Test(simulate, notes_a_calibration_of_other_cpu_kernels)
{
    static char out[1 << 16], text[1 << 16];
    char args[2048], path[700];
    snprintf(args, sizeof args, "simulate t.db --costs '%s' --expert Q4_K --budget 4000000B --non-expert-bytes 1000000",
             costs_path());
    cr_assert_eq(run_cli(args, out, sizeof out), 0, "%s", out);
    cr_assert_null(strstr(out, "CPU kernels"), "a file without device.cpu_kernels: no note\n%s", out);
    FILE *f = fopen(costs_path(), "rb");
    cr_assert_not_null(f);
    const size_t n = fread(text, 1, sizeof text - 1, f);
    text[n] = 0;
    fclose(f);
    const char *from = "\"cpu\": \"none (fixture)\"";
    char *at = strstr(text, from);
    cr_assert_not_null(at, "the fixture's device lacks %s", from);
    snprintf(path, sizeof path, "%s/costs-sse2.json", dir);
    f = fopen(path, "wb");
    cr_assert_not_null(f);
    fwrite(text, 1, (size_t)(at - text), f);
    fputs("\"cpu\": \"none (fixture)\", \"cpu_kernels\": \"sse2\"", f); /* a level no process dispatches */
    fputs(at + strlen(from), f);
    fclose(f);
    snprintf(args, sizeof args, "simulate t.db --costs costs-sse2.json --expert Q4_K --budget 4000000B "
             "--non-expert-bytes 1000000");
    cr_assert_eq(run_cli(args, out, sizeof out), 0, "%s", out);
    cr_assert_not_null(strstr(out, "note: the costs were calibrated with the sse2 CPU kernels, this process dispatches "),
                       "%s", out);
    /* amx and avx512 share their one-row kernels: a file of the other of the two is noted for the
     * CPU experts of several rows, and not at all for decode (--as-decode). The command runs at this
     * process's level (the CPU's best), whatever MP_ISA the tests run under. */
    const char *isa = mp_kernels_isa(), *twin = !strcmp(isa, "amx") ? "avx512" : !strcmp(isa, "avx512") ? "amx" : NULL;
    if (!twin) {
        cr_log_info("this CPU dispatches %s, whose one-row kernels no other level shares: the amx/avx512 part of "
                    "this test needs an AVX-512 CPU", isa);
        return;
    }
    char *outer = getenv("MP_ISA") ? strdup(getenv("MP_ISA")) : NULL;
    cr_assert_eq(setenv("MP_ISA", isa, 1), 0);
    snprintf(path, sizeof path, "%s/costs-twin.json", dir);
    f = fopen(path, "wb");
    cr_assert_not_null(f);
    fwrite(text, 1, (size_t)(at - text), f);
    fprintf(f, "\"cpu\": \"none (fixture)\", \"cpu_kernels\": \"%s\"", twin);
    fputs(at + strlen(from), f);
    fclose(f);
    snprintf(args, sizeof args, "simulate t.db --costs costs-twin.json --expert Q4_K --budget 4000000B "
             "--non-expert-bytes 1000000");
    cr_assert_eq(run_cli(args, out, sizeof out), 0, "%s", out);
    cr_assert_not_null(strstr(out, "their one-row (decode) kernels are the same"), "%s", out);
    snprintf(args, sizeof args, "simulate t.db --costs costs-twin.json --expert Q4_K --budget 4000000B "
             "--non-expert-bytes 1000000 --as-decode");
    cr_assert_eq(run_cli(args, out, sizeof out), 0, "%s", out);
    cr_assert_null(strstr(out, "CPU kernels"), "decode runs the same kernels at %s and %s: no note\n%s", twin, isa,
                   out);
    if (outer)
        setenv("MP_ISA", outer, 1);
    else
        unsetenv("MP_ISA");
    free(outer);
}

/* A trace whose layers' experts differ in size (its node table: layer 0 1,000,000 bytes, the
 * fixture's Q4_K; layer 1 9,437,184, its F16), simulated without a model: the node table tells the
 * layers apart and each is charged its own type's entries. The fixture has no F16 CPU entry: one
 * line naming the layer and its bytes; with one (its Q4_K curve x 10), a note names both types and
 * every layer on the CPU costs more than with --expert Q4_K (every layer charged Q4_K): the prefill
 * steps by layer 1's own curve (the decode steps' grid keeps its mean: 0.52 against 0.42 ms). */
Test(simulate, layers_of_several_expert_sizes_by_the_trace)
{
    static char out[1 << 16];
    char args[2048];
    char *kdb = make_trace(dir, "k.db", (trace_opts){.n_experts = 4, .expert_bytes = 1000000});
    sql(kdb, "UPDATE nodes SET expert_bytes = 9437184 WHERE node_index = 1");
    snprintf(args, sizeof args, "simulate k.db --costs '%s' --budget 4000000B --non-expert-bytes 1000000",
             costs_path());
    cr_assert_eq(run_cli(args, out, sizeof out), 1, "%s", out);
    cr_assert_not_null(strstr(out, "no single CPU expert entry for trace layer 1's experts of 9437184 bytes"), "%s",
                       out);
    cr_assert_eq(strchr(out, '\n'), out + strlen(out) - 1, "not one line: %s", out);
    cJSON *root = fixture_costs();
    cJSON *cpu = cJSON_GetObjectItem(root, "cpu_expert");
    cJSON *f16 = cJSON_Duplicate(cJSON_GetArrayItem(cpu, 1), 1); /* 16 threads, as the grid */
    cJSON_ReplaceItemInObject(f16, "quant", cJSON_CreateString("F16"));
    cJSON_ReplaceItemInObject(f16, "expert_bytes", cJSON_CreateNumber(9437184));
    cJSON *pt;
    cJSON_ArrayForEach(pt, cJSON_GetObjectItem(f16, "points"))
        cJSON_SetNumberValue(cJSON_GetObjectItem(pt, "median_ns"), cJSON_GetObjectItem(pt, "median_ns")->valuedouble * 10);
    cJSON_AddItemToArray(cpu, f16);
    write_json(root, "costs-two.json");
    double ms[2];
    for (int i = 0; i < 2; i++) {
        snprintf(args, sizeof args, "simulate k.db --costs costs-two.json %s --budget 4000000B --non-expert-bytes "
                 "1000000 --policy all-cpu --threads 16 --json s%d.json", i ? "--expert Q4_K" : "", i);
        cr_assert_eq(run_cli(args, out, sizeof out), 0, "%s", out);
        if (!i)
            cr_assert_not_null(strstr(out, "several expert types (1 layers of Q4_K (1.00 MB), 1 layers of F16 (9.44 MB))"),
                               "%s", out);
        char name[16];
        snprintf(name, sizeof name, "s%d.json", i);
        cJSON *sim = read_json(name);
        cJSON *all = find_policy(sim, 0, "all-cpu");
        cr_assert_not_null(all);
        ms[i] = cJSON_GetObjectItem(cJSON_GetObjectItem(all, "in_sample"), "ms_per_token")->valuedouble;
        cJSON_Delete(sim);
    }
    cr_assert_gt(ms[0], ms[1] * 1.1, "per layer %g ms/token, every layer Q4_K %g", ms[0], ms[1]);
    free(kdb);
}

/* A cost file with two GPU expert entries of the trace's shape and bytes (the fixture's Q4_K and a
 * copy named Q8_0; its F16 entry has other bytes): without -m or --expert, simulate picks the one
 * the trace's run names (its quant_types, as collect writes it: "Q4_K:ffn_gate_exps,..."), and
 * refuses in one line when the run names neither. */
Test(simulate, two_cost_entries_of_one_shape_by_the_trace_quant)
{
    static char out[1 << 16];
    char args[2048];
    char *qdb = make_trace(dir, "q.db", (trace_opts){.n_experts = 4, .expert_bytes = 1000000});
    cJSON *root = fixture_costs();
    const char *lists[2] = {"gpu_expert", "cpu_expert"};
    for (int l = 0; l < 2; l++) {
        cJSON *list = cJSON_GetObjectItem(root, lists[l]);
        const int count = cJSON_GetArraySize(list);
        for (int i = 0; i < count; i++) {
            if (strcmp(cJSON_GetObjectItem(cJSON_GetArrayItem(list, i), "quant")->valuestring, "Q4_K"))
                continue;
            cJSON *twin = cJSON_Duplicate(cJSON_GetArrayItem(list, i), 1);
            cJSON_ReplaceItemInObject(twin, "quant", cJSON_CreateString("Q8_0"));
            cJSON_AddItemToArray(list, twin);
        }
    }
    write_json(root, "costs-twins.json");
    sql(qdb, "UPDATE run SET quant_types = 'Q4_K:ffn_gate_exps,Q4_K:ffn_up_exps,Q4_K:ffn_down_exps'");
    snprintf(args, sizeof args, "simulate q.db --costs costs-twins.json --budget 4000000B --non-expert-bytes 1000000 "
             "--policy all-cpu --threads 16 --json q.json --force");
    cr_assert_eq(run_cli(args, out, sizeof out), 0, "%s", out);
    cJSON *sim = read_json("q.json");
    const cJSON *q = cJSON_GetObjectItem(cJSON_GetObjectItem(sim, "config"), "expert_quant");
    cr_assert(cJSON_IsString(q) && !strcmp(q->valuestring, "Q4_K"), "%s", cJSON_IsString(q) ? q->valuestring : "none");
    cJSON_Delete(sim);
    /* the Q8_0 twin chosen: its decode grid (the fixture's, of Q4_K) is then refused for it */
    sql(qdb, "UPDATE run SET quant_types = 'Q8_0:ffn_gate_exps,Q8_0:ffn_up_exps,Q8_0:ffn_down_exps'");
    cr_assert_eq(run_cli(args, out, sizeof out), 1, "%s", out);
    cr_assert_not_null(strstr(out, "measured for another model (experts of Q4_K, this model Q8_0)"), "%s", out);
    sql(qdb, "UPDATE run SET quant_types = 'Q5_K:ffn_gate_exps,Q5_K:ffn_up_exps,Q5_K:ffn_down_exps'");
    cr_assert_eq(run_cli("simulate q.db --costs costs-twins.json --budget 4000000B --non-expert-bytes 1000000", out,
                         sizeof out),
                 1, "%s", out);
    cr_assert_not_null(strstr(out, "0 GPU expert entries match (quant any; the trace's run names Q5_K,"), "%s", out);
    cr_assert_eq(strchr(out, '\n'), out + strlen(out) - 1, "not one line: %s", out);
    free(qdb);
}

/* --progress: the progress line on stderr even where stderr is not a terminal, its last line
 * counting every routing decision of every replay: 2 requests x 3 rows x 2 layers x top-2 = 24
 * per replay; lru beside all-gpu and all-cpu at two budgets is 6 replays, 144 decisions. Without
 * it (and without a terminal, as here) there is no line; --no-progress after it turns it off. */
Test(simulate, progress_line_counts_every_replay)
{
    static char out[1 << 16];
    char args[2048];
    const char *flags[3] = {"--progress", "", "--progress --no-progress"};
    for (int i = 0; i < 3; i++) {
        snprintf(args, sizeof args, "simulate t.db --costs '%s' --expert Q4_K --budget 2000000B,3000000B "
                 "--non-expert-bytes 1000000 --policy lru %s", costs_path(), flags[i]);
        cr_assert_eq(run_cli(args, out, sizeof out), 0, "%s", out);
        const char *line = strstr(out, "simulate: 144/144 decisions (100.0 %), ");
        if (i == 0) {
            cr_assert_not_null(line, "%s", out);
            cr_assert_not_null(strstr(line, "replay 6/6, "), "%s", out);
            cr_assert_null(strstr(line, "ETA"), "the last line has no ETA: %s", out);
        } else {
            cr_assert_null(strstr(out, "decisions ("), "%s: %s", flags[i], out);
        }
    }
}

Test(simulate, cli_errors_are_one_line)
{
    static char out[8192];
    char args[2048];
    snprintf(args, sizeof args, "simulate t.db --costs '%s' --expert Q4_K --budget 1MB --non-expert-bytes 2MB",
             costs_path());
    cr_assert_eq(run_cli(args, out, sizeof out), 1, "%s", out);
    cr_assert_not_null(strstr(out, "moeplan simulate: error: simulate: budget 1000000 bytes is smaller than what "
                                   "the runtime holds besides experts (2000000 bytes"), "%s", out);
    cr_assert_eq(strchr(out, '\n'), out + strlen(out) - 1, "not one line: %s", out);
    snprintf(args, sizeof args, "simulate t.db --costs '%s' --budget 1GB --non-expert-bytes 1MB", costs_path());
    cr_assert_eq(run_cli(args, out, sizeof out), 1, "%s", out);
    cr_assert_not_null(strstr(out, "2 GPU expert entries match"), "%s", out);
    /* a budget means what --gpu-budget means: without the model nothing says what it holds */
    snprintf(args, sizeof args, "simulate t.db --costs '%s' --expert Q4_K --budget 1GB", costs_path());
    cr_assert_eq(run_cli(args, out, sizeof out), 1, "%s", out);
    cr_assert_not_null(strstr(out, "--budget counts everything the runtime holds on the GPU (weights, KV cache, "
                                   "scratch, experts), as --gpu-budget does: expected -m MODEL"), "%s", out);
    cr_assert_eq(strchr(out, '\n'), out + strlen(out) - 1, "not one line: %s", out);
    /* the runtime's size grammar, and no empty item */
    const char *bad_budgets[][2] = {
        {"50MiB,", "an empty item at offset 6"}, {"50MiB,,60MiB", "an empty item at offset 6"},
        {",50MiB", "an empty item at offset 0"}, {"0", "expected a positive size"}, {"1e9", "expected a positive size"},
        {"-5GB", "expected a positive size"}};
    for (size_t i = 0; i < sizeof bad_budgets / sizeof bad_budgets[0]; i++) {
        snprintf(args, sizeof args, "simulate t.db --costs x.json --budget '%s'", bad_budgets[i][0]);
        cr_assert_eq(run_cli(args, out, sizeof out), 2, "%s: %s", bad_budgets[i][0], out);
        cr_assert_not_null(strstr(out, bad_budgets[i][1]), "%s: %s", bad_budgets[i][0], out);
    }
    snprintf(args, sizeof args, "simulate t.db --costs '%s' --expert Q4_K --budget 16gib --non-expert-bytes 1MB",
             costs_path()); /* units are case-insensitive, as --gpu-budget's */
    cr_assert_eq(run_cli(args, out, sizeof out), 0, "%s", out);
    cr_assert_eq(run_cli("simulate t.db --costs r.csv --budget 1GB", out, sizeof out), 1, "%s", out);
    cr_assert_not_null(strstr(out, "costs r.csv: offset"), "%s", out);
    cr_assert_eq(run_cli("simulate t.db --costs x.json --budget 12parsecs", out, sizeof out), 2, "%s", out);
    cr_assert_eq(run_cli("simulate t.db --costs x.json --budget 1GB --policy fastest", out, sizeof out), 2, "%s", out);
    cr_assert_not_null(strstr(out, "unknown policy"), "%s", out);
    const char *bad_lists[][2] = {
        {"--policy ''", "--policy '': an empty item at offset 0"},
        {"--policy static-topn,,plan", "--policy 'static-topn,,plan': an empty item at offset 12"},
        {"--policy plan,", "an empty item at offset 5"},
        {"--train-frac 0", "--train-frac 0: expected a share > 0 and <= 1"},
        {"--train-frac 1.5", "expected a share > 0 and <= 1"}};
    for (size_t i = 0; i < sizeof bad_lists / sizeof bad_lists[0]; i++) {
        snprintf(args, sizeof args, "simulate t.db --costs x.json --budget 1GB %s", bad_lists[i][0]);
        cr_assert_eq(run_cli(args, out, sizeof out), 2, "%s: %s", bad_lists[i][0], out);
        cr_assert_not_null(strstr(out, bad_lists[i][1]), "%s: %s", bad_lists[i][0], out);
    }
    cr_assert_eq(run_cli("simulate t.db --costs x.json --budget 1GB --profile-policy lru", out, sizeof out), 2, "%s",
                 out);
    cr_assert_eq(run_cli("simulate --help", out, sizeof out), 0, "%s", out);
    cr_assert_not_null(strstr(out, "--emit-profile"), "%s", out);
}

/* --adaptive: every static policy but all-gpu again with the tier beside its placement, in the
 * table and as each policy's "adaptive" object in the JSON; its slots come out of the budget's. */
Test(simulate, adaptive_tier_beside_static_policies)
{
    static char out[1 << 16];
    char args[2048];
    /* 1e6 non-expert + 3 experts of 1e6, and 8 (every expert): the tier takes 1 of them */
    snprintf(args, sizeof args,
             "simulate t.db --costs '%s' --expert Q4_K --budget 4000000B,9000000B --non-expert-bytes 1000000 "
             "--train-frac 0.5 --policy static-topn,lru --adaptive lru --adaptive-slots 1 --json a.json --progress",
             costs_path());
    cr_assert_eq(run_cli(args, out, sizeof out), 0, "%s", out);
    /* replays: all-gpu, all-cpu, static-topn, lru at 2 budgets, and all-cpu, static-topn beside a tier */
    cr_assert_not_null(strstr(out, "replay 12/12, "), "%s", out);
    cr_assert_not_null(strstr(out, "adaptive tier lru: 1 of the budget's 3 slots"), "%s", out);
    cr_assert_not_null(strstr(out, "at most 4 copies in flight"), "2 x top-2: %s", out);
    cr_assert_not_null(strstr(out, "  static-topn+lru "), "%s", out);
    cr_assert_not_null(strstr(out, "  all-cpu+lru "), "%s", out);
    cr_assert_null(strstr(out, "all-gpu+lru"), "%s", out);
    cr_assert_null(strstr(out, "lru+lru"), "%s", out);
    /* at 8 slots static-topn keeps every expert: its tier gets none, which the table says (the
     * runtime refuses that run); all-cpu's gets its slot at both budgets */
    cr_assert_not_null(strstr(out, "(1 of them got no slot: "), "%s", out);
    cr_assert_null(strstr(out, "(2 of them"), "%s", out);
    cJSON *root = read_json("a.json");
    for (int b = 0; b < 2; b++) {
        cJSON *top = find_policy(root, b, "static-topn"), *ad = cJSON_GetObjectItem(top, "adaptive");
        cr_assert_not_null(ad, "budget %d", b);
        cr_assert_str_eq(cJSON_GetObjectItem(ad, "policy")->valuestring, "lru");
        cr_assert_eq(cJSON_GetObjectItem(ad, "slots_asked")->valuedouble, 1);
        /* the tier is carved out of the placement's lowest-ranked expert at 3 slots (2 of 3 stay); at 8
         * every layer is whole and none is carved (a tier slot would cost a whole layer its round trip) */
        cr_assert_eq(cJSON_GetObjectItem(ad, "slots")->valuedouble, b ? 0 : 1);
        cr_assert_eq(cJSON_GetObjectItem(ad, "inflight")->valuedouble, 4);
        cr_assert_eq(cJSON_GetObjectItem(ad, "resident_initial")->valuedouble, b ? 8 : 2);
        cr_assert_eq(cJSON_GetObjectItem(top, "resident_initial")->valuedouble, b ? 8 : 3);
        cJSON *held = cJSON_GetObjectItem(ad, "held_out");
        cr_assert_not_null(cJSON_GetObjectItem(held, "tier_hits"));
        cr_assert_not_null(cJSON_GetObjectItem(held, "late_misses"));
        cr_assert_not_null(cJSON_GetObjectItem(held, "h2d_weight_bytes"));
        cr_assert_leq(cJSON_GetObjectItem(held, "tier_hits")->valuedouble, cJSON_GetObjectItem(held, "hits")->valuedouble);
        cr_assert_null(cJSON_GetObjectItem(find_policy(root, b, "lru"), "adaptive"));
        cr_assert_null(cJSON_GetObjectItem(find_policy(root, b, "all-gpu"), "adaptive"));
        cr_assert_not_null(cJSON_GetObjectItem(find_policy(root, b, "all-cpu"), "adaptive"));
    }
    cJSON_Delete(root);
    /* a share of each budget's slots, the runtime's grammar: 50 % of 3 and of 8 slots ask 1 and 4 */
    snprintf(args, sizeof args,
             "simulate t.db --costs '%s' --expert Q4_K --budget 4000000B,9000000B --non-expert-bytes 1000000 "
             "--train-frac 0.5 --policy static-topn --adaptive lru --adaptive-slots 50%% --json a.json --force",
             costs_path());
    cr_assert_eq(run_cli(args, out, sizeof out), 0, "%s", out);
    root = read_json("a.json");
    for (int b = 0; b < 2; b++) {
        cJSON *ad = cJSON_GetObjectItem(find_policy(root, b, "static-topn"), "adaptive");
        cr_assert_not_null(ad, "budget %d", b);
        cr_assert_eq(cJSON_GetObjectItem(ad, "slots_asked")->valuedouble, b ? 4 : 1);
    }
    cJSON_Delete(root);
    /* refusals, each one line: usage errors (2) before any work, a tier the budget does not hold (1) */
    const char *bad[][3] = {
        {"--adaptive fifo --adaptive-slots 1",
         "--adaptive: adaptive tier policy 'fifo': expected off, lru, lfu, decayed-lfu, window-lfu or cost", "2"},
        {"--adaptive-slots 2", "--adaptive-slots applies to an adaptive tier: expected --adaptive POLICY", "2"},
        {"--adaptive cost --adaptive-slots 1 --adaptive-inflight 0", "--adaptive-inflight '0': expected copies in "
                                                                     "flight, an integer 1..4096", "2"},
        {"--adaptive cost --adaptive-slots x", "--adaptive-slots 'x': expected N expert slots (1..2^32) or P% of the "
                                               "budget's room for experts", "2"},
        {"--adaptive cost --adaptive-slots 101%", "--adaptive-slots '101%': expected N expert slots or P% of the budget's "
                                                  "room for experts, 0 < P <= 100", "2"},
        {"--adaptive cost --adaptive-slots 4", "the adaptive tier's 4 slots exceed the budget's 3 expert slots", "1"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        snprintf(args, sizeof args, "simulate t.db --costs '%s' --expert Q4_K --budget 4000000B "
                 "--non-expert-bytes 1000000 --policy static-topn %s", costs_path(), bad[i][0]);
        cr_assert_eq(run_cli(args, out, sizeof out), atoi(bad[i][2]), "%s: %s", bad[i][0], out);
        cr_assert_not_null(strstr(out, bad[i][1]), "%s: %s", bad[i][0], out);
        cr_assert_eq(strchr(out, '\n'), out + strlen(out) - 1, "not one line: %s", out);
    }
}

/* --placement-profile: a profile emitted for static-topn replays as static-topn did (policy
 * 'profile', the profile's slots when the budget holds them); refusals in one line */
Test(simulate, replays_a_given_profile)
{
    static char out[1 << 16];
    char args[2048];
    const char *common = "--expert Q4_K --non-expert-bytes 1000000 --train-frac 0.5";
    snprintf(args, sizeof args, "simulate t.db --costs '%s' %s --budget 3000000B --policy static-topn "
             "--profile-policy static-topn --emit-profile topn.strp", costs_path(), common);
    cr_assert_eq(run_cli(args, out, sizeof out), 0, "%s", out);
    char topn_path[700];
    snprintf(topn_path, sizeof topn_path, "%s/topn.strp", dir);
    mp_test_strp_loads(topn_path);
    snprintf(args, sizeof args, "simulate t.db --costs '%s' %s --budget 3000000B,9000000B --policy static-topn "
             "--placement-profile topn.strp --json pp.json", costs_path(), common);
    cr_assert_eq(run_cli(args, out, sizeof out), 0, "%s", out);
    cJSON *root = read_json("pp.json");
    for (int b = 0; b < 2; b++) {
        cJSON *topn = find_policy(root, b, "static-topn"), *prof = find_policy(root, b, "profile");
        cr_assert(topn && prof, "budget %d: both policies reported", b);
        /* the profile holds 2 slots: at the larger budget static-topn keeps more, the profile not */
        cr_assert_eq(cJSON_GetObjectItem(prof, "resident_initial")->valuedouble, 2, "budget %d", b);
        if (b == 0)
            for (int split = 0; split < 2; split++) {
                const char *key = split ? "held_out" : "in_sample";
                cJSON *x = cJSON_GetObjectItem(prof, key), *y = cJSON_GetObjectItem(topn, key);
                cr_assert_float_eq(cJSON_GetObjectItem(x, "time_ns")->valuedouble,
                                   cJSON_GetObjectItem(y, "time_ns")->valuedouble, 1e-6, "%s", key);
                cr_assert_eq(cJSON_GetObjectItem(x, "hits")->valuedouble, cJSON_GetObjectItem(y, "hits")->valuedouble);
            }
        else
            cr_assert_gt(cJSON_GetObjectItem(topn, "resident_initial")->valuedouble, 2);
    }
    cJSON_Delete(root);
    /* refusals */
    cr_assert_eq(run_cli("simulate t.db --costs x.json --budget 1GB --policy profile", out, sizeof out), 2, "%s", out);
    cr_assert_not_null(strstr(out, "--policy profile needs --placement-profile P.strp"), "%s", out);
    char path[700];
    snprintf(path, sizeof path, "%s/other.strp", dir);
    mp_strp_pair pair = {0, 1};
    mp_strp other = {.n_layers = 3, .n_experts = 4, .slots = 1, .n_ranked = 1, .ranked = &pair,
                     .table = MP_STRP_TABLE_NONE};
    mp_error err;
    cr_assert_eq(mp_strp_write_file(path, &other, &err), MP_OK, "%s", err.msg);
    mp_test_strp_loads(path);
    snprintf(args, sizeof args, "simulate t.db --costs '%s' %s --budget 3000000B --placement-profile other.strp",
             costs_path(), common);
    cr_assert_eq(run_cli(args, out, sizeof out), 1, "%s", out);
    cr_assert_not_null(strstr(out, "other.strp"), "%s", out);
    cr_assert_eq(strchr(out, '\n'), out + strlen(out) - 1, "not one line: %s", out);
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
    cJSON *swept = read_json("s.json"), *sw = cJSON_GetObjectItem(swept, "sweep");
    cr_assert_not_null(sw);
    cr_assert_str_eq(cJSON_GetObjectItem(sw, "param")->valuestring, "alpha");
    cJSON *pts = cJSON_GetObjectItem(sw, "points");
    cr_assert_eq(cJSON_GetArraySize(pts), 2);
    const char *alphas[2] = {"0.5", "0.95"};
    for (int v = 0; v < 2; v++) {
        snprintf(args, sizeof args, "simulate t.db --costs '%s' %s --policy decayed-lfu --alpha %s --json a.json --force",
                 costs_path(), common, alphas[v]);
        cr_assert_eq(run_cli(args, out, sizeof out), 0, "%s", out);
        cJSON *one = read_json("a.json");
        cJSON *pt = cJSON_GetArrayItem(pts, v);
        cr_assert_float_eq(cJSON_GetObjectItem(pt, "value")->valuedouble, atof(alphas[v]), 1e-12);
        for (int b = 0; b < 2; b++) {
            cJSON *bo = cJSON_GetArrayItem(cJSON_GetObjectItem(pt, "budgets"), b);
            cJSON *dl = find_policy(one, b, "decayed-lfu");
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
    cJSON_Delete(swept);
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

/* The fixture's costs as if calibrated for the HF tiny model (3 layers x 8 experts top-2, F32
 * 64x48, 36864-byte experts): dir/tiny-costs.json. */
static void write_tiny_costs(void)
{
    cJSON *root = fixture_costs();
    cJSON_DeleteItemFromArray(cJSON_GetObjectItem(root, "gpu_expert"), 1);
    cJSON *entries[] = {cJSON_GetArrayItem(cJSON_GetObjectItem(root, "gpu_expert"), 0),
                        cJSON_GetArrayItem(cJSON_GetObjectItem(root, "cpu_expert"), 0),
                        cJSON_GetArrayItem(cJSON_GetObjectItem(root, "cpu_expert"), 1),
                        cJSON_GetObjectItem(root, "decode_layers")};
    for (int i = 0; i < 4; i++) {
        cJSON_ReplaceItemInObject(entries[i], "quant", cJSON_CreateString("F32"));
        cJSON_ReplaceItemInObject(entries[i], "n_embd", cJSON_CreateNumber(64));
        cJSON_ReplaceItemInObject(entries[i], "n_ff", cJSON_CreateNumber(48));
        cJSON_ReplaceItemInObject(entries[i], "expert_bytes", cJSON_CreateNumber(36864));
    }
    cJSON_ReplaceItemInObject(entries[3], "n_expert", cJSON_CreateNumber(8));
    write_json(root, "tiny-costs.json");
}

/* --budget means what --gpu-budget means: with -m, its fixed part is what the runtime holds
 * besides experts (weights, KV cache for --ctx-size, scratch for --batch-size), computed by the
 * runtime's own budget code; --non-expert-bytes replaces it. And a profile made for a budget loads
 * under --gpu-budget of that budget with exactly its resident experts. */
Test(simulate, budget_means_what_gpu_budget_means)
{
    static char out[8192];
    char args[4096], model[1024], expect[256];
    snprintf(model, sizeof model, "%s/tests/fixtures/hf/qwen3moe-tiny-f32.gguf", getenv("MP_SOURCE_ROOT"));
    mp_model *m = NULL;
    mp_error err;
    cr_assert_eq(mp_model_load(model, &m, &err), MP_OK, "%s", err.msg);
    mp_placement_geom g;
    mp_gpu_budget b;
    cr_assert_eq(mp_placement_geom_from_model(m, &g, &err), MP_OK, "%s", err.msg);
    const int64_t ctx = 96, batch = 64;
    cr_assert_eq(mp_gpu_budget_compute(&g, 0, ctx, batch, &b, &err), MP_OK, "%s", err.msg);
    cr_assert_gt(b.kv_bytes, 0);
    cr_assert_gt(b.scratch_bytes, 0);
    /* a trace of this model */
    char prompts[700];
    snprintf(prompts, sizeof prompts, "%s/p.json", dir);
    FILE *f = fopen(prompts, "w");
    fputs("[\"routing a few tokens\", \"and a second request\"]", f);
    fclose(f);
    snprintf(args, sizeof args, "collect -m '%s' --prompts p.json --trace c.db --max-tokens 6 --raw-prompts --no-progress",
             model);
    cr_assert_eq(run_cli(args, out, sizeof out), 0, "%s", out);
    write_tiny_costs();
    snprintf(args, sizeof args, "simulate c.db --costs tiny-costs.json --budget 1000B -m '%s' --ctx-size %lld "
             "--batch-size %lld", model, (long long)ctx, (long long)batch);
    cr_assert_eq(run_cli(args, out, sizeof out), 1, "%s", out);
    snprintf(expect, sizeof expect, "smaller than what the runtime holds besides experts (%llu bytes",
             (unsigned long long)b.fixed_bytes);
    cr_assert_not_null(strstr(out, expect), "expected '%s' in: %s", expect, out);
    /* an explicit --non-expert-bytes wins over the model's */
    snprintf(args, sizeof args, "simulate c.db --costs tiny-costs.json --budget 1000B -m '%s' --non-expert-bytes 2000",
             model);
    cr_assert_eq(run_cli(args, out, sizeof out), 1, "%s", out);
    cr_assert_not_null(strstr(out, "besides experts (2000 bytes"), "%s", out);
    /* a profile for room of 5 experts beyond the fixed part, loaded under that --gpu-budget */
    const uint64_t eb = g.expert_bytes[0], budget = b.fixed_bytes + 5 * eb + eb / 2;
    for (int pol = 0; pol < 2; pol++) {
        const char *policy = pol ? "plan" : "static-topn";
        snprintf(args, sizeof args, "simulate c.db --costs tiny-costs.json --budget %lluB -m '%s' --ctx-size %lld "
                 "--batch-size %lld --policy %s --emit-profile p%d.strp", (unsigned long long)budget, model,
                 (long long)ctx, (long long)batch, policy, pol);
        cr_assert_eq(run_cli(args, out, sizeof out), 0, "%s", out);
        cr_assert_not_null(strstr(out, "note: each budget holds"), "%s", out);
        char prof[800];
        snprintf(prof, sizeof prof, "%s/p%d.strp", dir, pol);
        mp_strp p;
        cr_assert_eq(mp_strp_read_file(prof, NULL, &p, &err), MP_OK, "%s", err.msg);
        mp_test_strp_loads(prof);
        cr_assert_leq(p.slots, 5, "%s: %u slots for room of 5", policy, p.slots);
        mp_placement_opts po = {0};
        mp_status pst;
        char budget_text[32];
        snprintf(budget_text, sizeof budget_text, "%lluB", (unsigned long long)budget);
        cr_assert(mp_placement_opts_set(&po, "--profile", prof, &pst, &err) && !pst, "%s", err.msg);
        cr_assert(mp_placement_opts_set(&po, "--gpu-budget", budget_text, &pst, &err) && !pst, "%s", err.msg);
        mp_placement pl;
        cr_assert_eq(mp_placement_for_model(m, &po, ctx, batch, &pl, &err), MP_OK, "%s: %s", policy, err.msg);
        cr_assert_eq(pl.n_resident_total, (int64_t)p.slots, "%s: the runtime placed %lld of the profile's %u", policy,
                     (long long)pl.n_resident_total, p.slots);
        for (uint32_t i = 0; i < p.slots; i++)
            cr_assert(mp_placement_resident(&pl, p.ranked[i].layer, p.ranked[i].expert));
        mp_placement_free(&pl);
        mp_strp_free(&p);
    }
    /* a missing model is one line naming it */
    snprintf(args, sizeof args, "simulate t.db --costs '%s' --budget 1GB -m absent.gguf", costs_path());
    cr_assert_eq(run_cli(args, out, sizeof out), 1, "%s", out);
    cr_assert_not_null(strstr(out, "absent.gguf"), "%s", out);
    cr_assert_eq(strchr(out, '\n'), out + strlen(out) - 1, "not one line: %s", out);
    mp_placement_geom_free(&g);
    mp_model_free(m);
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

/* ---- --non-moe trace: the trace's measured step durations minus its MoE timing ----
 *
 * timed.db, written with the collector's writer: request 5 of one 2-row prefill step (rows route
 * {0,1} and {2,3}) and two decode steps (route {0,1}), MoE layers 0 and 1 of 4 experts, top-2,
 * 1e6-byte experts, with durations and timing rows. A node's MoE time is max(gpu_expert_ns,
 * d2h_ns + cpu_expert_ns + h2d_ns) + merge_ns (sync_ns stays non-MoE, see simulator/sim_load.c):
 *   step 0: node 0 max(50000, 20000 + 100000 + 30000) + 10000 = 160000; node 1 max(400000, 100000)
 *           = 400000 (its sync_ns 999999 not counted); duration 2000000 -> non-MoE 1440000
 *   step 1: node 0 200000; node 1 300000 + merge 100000 = 400000; duration 900000 -> 300000
 *   step 2: node 0 100000 (sync_ns 50000 not counted); node 1 200000; duration 800000 -> 500000
 * With --as-decode the prefill's two rows each take the decode steps' median (300000 + 500000) / 2
 * = 400000. */
static char timed[600];

static void write_timed_trace(void)
{
    snprintf(timed, sizeof timed, "%s/timed.db", dir);
    mp_error err;
    mp_trace_writer *w;
    cr_assert_eq(mp_trace_writer_open(timed, false, &w, &err), MP_OK, "%s", err.msg);
    mp_trace_run_info info;
    mp_trace_run_info_init(&info);
    info.source = "moeplan";
    info.n_experts = 4;
    info.top_k = 2;
    info.n_moe_layers = 2;
    cr_assert_eq(mp_trace_set_run(w, &info, &err), MP_OK, "%s", err.msg);
    for (int i = 0; i < 2; i++) {
        char name[32];
        snprintf(name, sizeof name, "blk.%d.ffn_moe", i);
        mp_trace_node nd = {.node_index = i, .node_type = "moe", .node_name = name, .layer = i, .n_experts = 4,
                            .top_k = 2, .expert_bytes = 1000000, .weight_format = MP_TRACE_W_F32};
        cr_assert_eq(mp_trace_add_node(w, &nd, &err), MP_OK, "%s", err.msg);
    }
    const mp_moe_timing tim[3][2] = {
        {{.gpu_expert_ns = 50000, .cpu_expert_ns = 100000, .d2h_ns = 20000, .h2d_ns = 30000, .merge_ns = 10000},
         {.gpu_expert_ns = 400000, .cpu_expert_ns = 100000, .sync_ns = 999999}},
        {{.gpu_expert_ns = 200000}, {.cpu_expert_ns = 300000, .merge_ns = 100000}},
        {{.gpu_expert_ns = 100000, .sync_ns = 50000}, {.gpu_expert_ns = 200000}},
    };
    const int64_t duration_ns[3] = {2000000, 900000, 800000};
    const int32_t prefill_ids[4] = {0, 1, 2, 3}, decode_ids[2] = {0, 1};
    const float wts[4] = {0.75f, 0.25f, 0.75f, 0.25f};
    cr_assert_eq(mp_trace_request_begin(w, 5, NULL, NULL, -1, NULL, 0, &err), MP_OK, "%s", err.msg);
    for (int s = 0; s < 3; s++) {
        const int rows = s == 0 ? 2 : 1;
        cr_assert_eq(mp_trace_step_begin(w, s, s ? MP_PHASE_DECODE : MP_PHASE_PREFILL, rows, s ? s + 1 : 0, &err),
                     MP_OK, "%s", err.msg);
        for (int nd = 0; nd < 2; nd++) {
            cr_assert_eq(mp_trace_add_routing(w, nd, rows, 2, s ? decode_ids : prefill_ids, wts, &err), MP_OK, "%s",
                         err.msg);
            cr_assert_eq(mp_trace_add_timing(w, nd, &tim[s][nd], &err), MP_OK, "%s", err.msg);
        }
        cr_assert_eq(mp_trace_step_end(w, duration_ns[s], &err), MP_OK, "%s", err.msg);
    }
    cr_assert_eq(mp_trace_request_end(w, 2, 4000000, &err), MP_OK, "%s", err.msg);
    cr_assert_eq(mp_trace_finish(w, &err), MP_OK, "%s", err.msg);
    mp_trace_writer_close(w);
}

Test(simulate, loads_measured_non_moe_times)
{
    write_timed_trace();
    mp_sim_trace t;
    mp_sim_trace_facts facts;
    mp_error err;
    mp_sim_load_options o = {.non_moe = true};
    cr_assert_eq(mp_sim_load_trace(timed, &o, &t, &facts, &err), MP_OK, "%s", err.msg);
    cr_assert_eq(t.n_steps, 3);
    cr_assert_not_null(t.non_moe_ns);
    cr_assert_float_eq(t.non_moe_ns[0], 1440000, 1e-9);
    cr_assert_float_eq(t.non_moe_ns[1], 300000, 1e-9);
    cr_assert_float_eq(t.non_moe_ns[2], 500000, 1e-9);
    mp_sim_trace_free(&t);
    o.as_decode = true;
    cr_assert_eq(mp_sim_load_trace(timed, &o, &t, &facts, &err), MP_OK, "%s", err.msg);
    cr_assert_eq(t.n_steps, 4);
    cr_assert_float_eq(t.non_moe_ns[0], 400000, 1e-9);
    cr_assert_float_eq(t.non_moe_ns[1], 400000, 1e-9);
    cr_assert_float_eq(t.non_moe_ns[2], 300000, 1e-9);
    cr_assert_float_eq(t.non_moe_ns[3], 500000, 1e-9);
    mp_sim_trace_free(&t);
    o.non_moe = false; /* not asked: not loaded */
    cr_assert_eq(mp_sim_load_trace(timed, &o, &t, &facts, &err), MP_OK, "%s", err.msg);
    cr_assert_null(t.non_moe_ns);
    mp_sim_trace_free(&t);
}

/* The named policy's in-sample metric `key` in report `json_name` (train-frac 1: all in-sample). */
static double policy_metric(const char *json_name, const char *policy, const char *key)
{
    cJSON *root = read_json(json_name);
    cJSON *po = find_policy(root, 0, policy);
    cr_assert_not_null(po, "no policy %s in %s", policy, json_name);
    const double v = cJSON_GetObjectItem(cJSON_GetObjectItem(po, "in_sample"), key)->valuedouble;
    cJSON_Delete(root);
    return v;
}

static const char *json_source(const char *json_name)
{
    static char src[32];
    cJSON *root = read_json(json_name);
    cJSON *s = cJSON_GetObjectItem(cJSON_GetObjectItem(root, "config"), "non_moe_source");
    cr_assert(cJSON_IsString(s), "no config.non_moe_source in %s", json_name);
    snprintf(src, sizeof src, "%s", s->valuestring);
    cJSON_Delete(root);
    return src;
}

/* All-GPU with the fixture costs (Q4_K, no `concurrent` curve): a one-row expert costs 10000 ns and
 * all-resident layers make no round trip, so a layer costs 20000 ns per decode step and 40000 ns
 * for the prefill (4 distinct one-row experts). Non-MoE from the cost file: 500000 ns at 1 row,
 * 500000 + 49500000 / 2047 ns at 2 rows (the curve's 1..2048 segment). Per token (4 tokens):
 *   costs:             (500000 + 49500000/2047 + 80000 + 2 x (500000 + 40000)) / 4
 *   trace:             (1440000 + 80000 + 300000 + 40000 + 500000 + 40000) / 4 = 600000 ns
 *   costs, as-decode:  4 x (500000 + 40000) / 4 = 540000 ns
 *   trace, as-decode:  (2 x (400000 + 40000) + 340000 + 540000) / 4 = 440000 ns
 * All-CPU's MoE time is the same under both sources: its difference is the non-MoE sums'. */
Test(simulate, cli_non_moe_from_trace_by_hand)
{
    write_timed_trace();
    static char out[1 << 16];
    char args[2048];
    const char *common = "--expert Q4_K --budget 3000000B --non-expert-bytes 1000000 --train-frac 1";
    struct { const char *flags, *json; double ms; } cases[] = {
        {"", "c.json", (500000 + 49500000.0 / 2047 + 80000 + 2 * 540000) / 4 / 1e6},
        {"--non-moe costs", "c2.json", (500000 + 49500000.0 / 2047 + 80000 + 2 * 540000) / 4 / 1e6},
        {"--non-moe trace", "t.json", 0.6},
        {"--as-decode", "cd.json", 0.54},
        {"--as-decode --non-moe trace", "td.json", 0.44},
    };
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        snprintf(args, sizeof args, "simulate timed.db --costs '%s' %s %s --json %s", costs_path(), common,
                 cases[i].flags, cases[i].json);
        cr_assert_eq(run_cli(args, out, sizeof out), 0, "%s: %s", cases[i].flags, out);
        const bool trace = strstr(cases[i].flags, "trace") != NULL;
        cr_assert_not_null(strstr(out, trace ? "non-MoE time per step: trace" : "non-MoE time per step: costs"),
                           "%s", out);
        cr_assert_str_eq(json_source(cases[i].json), trace ? "trace" : "costs");
        double ms = policy_metric(cases[i].json, "all-gpu", "ms_per_token");
        cr_assert_float_eq(ms, cases[i].ms, 1e-12, "%s: %.9f ms/token, expected %.9f", cases[i].flags, ms,
                           cases[i].ms);
    }
    double cpu_trace = policy_metric("t.json", "all-cpu", "time_ns");
    double cpu_costs = policy_metric("c.json", "all-cpu", "time_ns");
    cr_assert_float_eq(cpu_trace - cpu_costs, 2240000 - (500000 + 49500000.0 / 2047 + 1000000), 1e-6);
}

/* The CPU experts' share of the predicted time (cpu_expert_ns: what a run's own CPU expert time
 * compares with). As decode steps all-CPU runs both routes of each of the 2 layers cold at every one
 * of the 4 steps: the fixture's grid has, for 2 cold routes, 230000 ns far off and 160000 with one
 * far (CPU share 110000), so the decision model runs one far and the CPU's share is 8 x 110000;
 * all-GPU runs none on the CPU. */
Test(simulate, cpu_share_of_decode_steps_from_the_grid)
{
    write_timed_trace();
    static char out[1 << 16];
    char args[2048];
    snprintf(args, sizeof args, "simulate timed.db --costs '%s' --expert Q4_K --budget 3000000B --non-expert-bytes "
             "1000000 --train-frac 1 --as-decode --json cpu.json", costs_path());
    cr_assert_eq(run_cli(args, out, sizeof out), 0, "%s", out);
    cr_assert_float_eq(policy_metric("cpu.json", "all-cpu", "routes_far"), 8, 1e-9);
    cr_assert_float_eq(policy_metric("cpu.json", "all-cpu", "cpu_expert_ns"), 8 * 110000.0, 1e-6);
    cr_assert(policy_metric("cpu.json", "all-cpu", "cpu_expert_ns") < policy_metric("cpu.json", "all-cpu", "time_ns"));
    cr_assert_eq(policy_metric("cpu.json", "all-gpu", "cpu_expert_ns"), 0);
    /* at a host twice the calibration's bandwidth the CPU's costs halve: its share of the point
     * with it, whatever far routes the decision model then picks (55000 with one far, 100000 without) */
    snprintf(args, sizeof args, "simulate timed.db --costs '%s' --expert Q4_K --budget 3000000B --non-expert-bytes "
             "1000000 --train-frac 1 --as-decode --json cpu2.json --host-read-gbs 100", costs_path());
    cr_assert_eq(run_cli(args, out, sizeof out), 0, "%s", out);
    const double far = policy_metric("cpu2.json", "all-cpu", "routes_far");
    cr_assert_float_eq(policy_metric("cpu2.json", "all-cpu", "cpu_expert_ns"), far > 0 ? 8 * 55000.0 : 8 * 100000.0,
                       1e-6, "far routes %.0f", far);
    /* on a link a tenth of the calibration's (its best pinned copy: 1004096 bytes in 25 us, 40.2 GB/s)
     * a far expert's megabyte takes 249 us of the bus, so the one-far point (160 us) costs 347 us and
     * all-cpu runs no far route: 8 steps of the far-off point, 230 us; the header says so */
    snprintf(args, sizeof args, "simulate timed.db --costs '%s' --expert Q4_K --budget 3000000B --non-expert-bytes "
             "1000000 --train-frac 1 --as-decode --json bus.json --bus-gbs 4.016", costs_path());
    cr_assert_eq(run_cli(args, out, sizeof out), 0, "%s", out);
    cr_assert_eq(policy_metric("bus.json", "all-cpu", "routes_far"), 0);
    cr_assert_float_eq(policy_metric("bus.json", "all-cpu", "cpu_expert_ns"), 8 * 200000.0, 1e-6);
    cr_assert_not_null(strstr(out, "bus: a link moving 4.0 GB/s host to device (--bus-gbs; calibrated at 40.2)"),
                       "%s", out);
    snprintf(args, sizeof args, "simulate timed.db --costs '%s' --budget 3000000B --bus-gbs -3", costs_path());
    cr_assert_eq(run_cli(args, out, sizeof out), 2, "%s", out);
    cr_assert_not_null(strstr(out, "--bus-gbs '-3': expected a bandwidth > 0 in GB/s"), "%s", out);
}

/* Fail closed: one line naming the trace and the (request, step), suggesting --non-moe costs. */
static void expect_refusal(const char *flags, const char *trace, const char *want)
{
    static char out[8192];
    char args[2048];
    snprintf(args, sizeof args, "simulate %s --costs '%s' --expert Q4_K --budget 3000000B --non-expert-bytes 1000000 %s",
             trace, costs_path(), flags);
    cr_assert_eq(run_cli(args, out, sizeof out), 1, "%s", out);
    char named[256];
    snprintf(named, sizeof named, "moeplan simulate: error: trace %s: step (request ", trace);
    cr_assert_not_null(strstr(out, named), "%s", out);
    cr_assert_not_null(strstr(out, want), "expected '%s' in: %s", want, out);
    cr_assert_not_null(strstr(out, "(or use --non-moe costs)"), "%s", out);
    cr_assert_eq(strchr(out, '\n'), out + strlen(out) - 1, "not one line: %s", out);
}

static void timed_sql(const char *stmt)
{
    char cmd[1200];
    snprintf(cmd, sizeof cmd, "sqlite3 '%s' \"%s\"", timed, stmt);
    cr_assert_eq(system(cmd), 0, "%s", cmd);
}

Test(simulate, cli_non_moe_trace_refusals)
{
    static char out[8192];
    /* an import has no durations (the CSV trace t.db) */
    expect_refusal("--non-moe trace", "t.db", "step (request 0, step 0): duration_ns is NULL");
    write_timed_trace();
    /* a bad value is a usage error */
    cr_assert_eq(run_cli("simulate timed.db --costs x.json --budget 1GB --non-moe measured", out, sizeof out), 2, "%s",
                 out);
    cr_assert_not_null(strstr(out, "--non-moe 'measured': expected costs or trace"), "%s", out);
    /* MoE time above the step's duration: step 2's MoE is 300000 ns */
    timed_sql("update steps set duration_ns = 299999 where request_id = 5 and step = 2");
    expect_refusal("--non-moe trace", "timed.db",
                   "step (request 5, step 2): MoE time 300000 ns (timing, all nodes) exceeds the step's duration_ns 299999");
    timed_sql("update steps set duration_ns = 300000 where request_id = 5 and step = 2"); /* equal: non-MoE 0 */
    char args[2048];
    snprintf(args, sizeof args, "simulate timed.db --costs '%s' --expert Q4_K --budget 3000000B --non-expert-bytes 1000000 "
             "--non-moe trace", costs_path());
    cr_assert_eq(run_cli(args, out, sizeof out), 0, "%s", out);
    /* one step's duration unknown */
    timed_sql("update steps set duration_ns = NULL where request_id = 5 and step = 1");
    expect_refusal("--non-moe trace", "timed.db", "step (request 5, step 1): duration_ns is NULL");
    /* the cost file's non-MoE time does not need them */
    snprintf(args, sizeof args, "simulate timed.db --costs '%s' --expert Q4_K --budget 3000000B --non-expert-bytes 1000000",
             costs_path());
    cr_assert_eq(run_cli(args, out, sizeof out), 0, "%s", out);
    timed_sql("update steps set duration_ns = 900000 where request_id = 5 and step = 1");
    /* a timing row missing: (request 5, step 1, node 1) */
    timed_sql("delete from timing where request_id = 5 and step = 1 and node_index = 1");
    expect_refusal("--non-moe trace", "timed.db", "step (request 5, step 1): no timing row for node 1");
    /* no decode step: a prefill step replayed as one-row steps has nothing to take */
    char cmd[700];
    snprintf(cmd, sizeof cmd, "rm -f '%s'", timed);
    cr_assert_eq(system(cmd), 0);
    write_timed_trace();
    timed_sql("update steps set phase = 'prefill'");
    expect_refusal("--as-decode --non-moe trace", "timed.db", "step (request 5, step 0)");
    expect_refusal("--as-decode --non-moe trace", "timed.db", "no decode step");
    /* without --as-decode every step keeps its own measured time */
    snprintf(args, sizeof args, "simulate timed.db --costs '%s' --expert Q4_K --budget 3000000B --non-expert-bytes 1000000 "
             "--non-moe trace", costs_path());
    cr_assert_eq(run_cli(args, out, sizeof out), 0, "%s", out);
}

/* The fixture as a cost file in dir with the first `from` replaced by `to`. */
static void costs_with(const char *name, const char *from, const char *to)
{
    FILE *f = fopen(costs_path(), "rb");
    cr_assert_not_null(f);
    static char text[1 << 16], mut[1 << 17];
    const size_t n = fread(text, 1, sizeof text - 1, f);
    text[n] = 0;
    fclose(f);
    const char *at = strstr(text, from);
    cr_assert_not_null(at, "the fixture lacks %s", from);
    snprintf(mut, sizeof mut, "%.*s%s%s", (int)(at - text), text, to, at + strlen(from));
    char path[700];
    snprintf(path, sizeof path, "%s/%s", dir, name);
    f = fopen(path, "wb");
    cr_assert_not_null(f);
    fputs(mut, f);
    fclose(f);
}

/* How one-row steps are read from the cost file is said in one line of the table's header, never
 * silently: the measured context curve, the older linear term (with what to do), or none; and a
 * grid's once-per-step cost of hybrid steps in one more. */
Test(simulate, the_table_names_the_one_row_model)
{
    write_timed_trace();
    static char out[1 << 16];
    char args[2048];
    costs_with("linear.json", "\"sync\":", "\"non_moe_context\": {\"keys\": 33.5, \"per_key_ns\": 179.6}, \"sync\":");
    costs_with("curve.json", "\"sync\":",
               "\"non_moe_context\": {\"points\": [{\"keys\": 33.5, \"median_ns\": 500000, \"spread_ns\": 0}, "
               "{\"keys\": 160.5, \"median_ns\": 563500, \"spread_ns\": 0}]}, \"sync\":");
    const struct { const char *costs, *line; } cases[] = {
        {"linear.json", "non-MoE time per step: costs (non_moe curve by the step's rows; one-row steps by their keys "
                        "of context: linear, 179.6 ns per key from 33.5 keys (a cost file from before the measured "
                        "curve: run `moeplan calibrate` again for it))\n"},
        {"curve.json", "non-MoE time per step: costs (non_moe curve by the step's rows; one-row steps by their keys of "
                       "context: the measured curve of 2 points, 33.5 .. 160.5 keys)\n"},
        {NULL, "non-MoE time per step: costs (non_moe curve by the step's rows; one-row steps: no context term (the "
               "cost file has none: run `moeplan calibrate` again for it))\n"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        snprintf(args, sizeof args, "simulate timed.db --costs '%s' --expert Q4_K --budget 3000000B "
                 "--non-expert-bytes 1000000", cases[i].costs ? cases[i].costs : costs_path());
        cr_assert_eq(run_cli(args, out, sizeof out), 0, "%s", out);
        const char *at = strstr(out, cases[i].line);
        cr_assert_not_null(at, "%s", out);
        cr_assert_null(strstr(at + 1, "non-MoE time per step"), "said twice: %s", out);
        cr_assert_null(strstr(out, "once per step"), "%s", out);
    }
    costs_with("once.json", "\"expert_bytes\": 1000000,\n                    \"points\"",
               "\"expert_bytes\": 1000000, \"hybrid_step\": {\"median_ns\": 37000, \"spread_ns\": 0, \"layers\": 25}, "
               "\"points\"");
    snprintf(args, sizeof args, "simulate timed.db --costs once.json --expert Q4_K --budget 3000000B "
             "--non-expert-bytes 1000000");
    cr_assert_eq(run_cli(args, out, sizeof out), 0, "%s", out);
    cr_assert_not_null(strstr(out, "\none-row steps with hybrid layers: 37.0 us once per step beside the grid's levels "
                                   "(measured with one hybrid layer of 25)\n"), "%s", out);
}

/* A cost file whose GPU is synthetic (bench/synth_gpu_costs.py) simulates, and says in a note that
 * its predictions say nothing about a machine; a measured file says nothing of the kind. */
Test(simulate, synthetic_gpu_costs_are_said)
{
    write_timed_trace();
    static char out[1 << 16];
    char args[2048];
    costs_with("synth.json", "\"gpu\": \"none (fixture)\"", "\"gpu\": \"synthetic (bench/synth_gpu_costs.py)\"");
    snprintf(args, sizeof args, "simulate timed.db --costs synth.json --expert Q4_K --budget 3000000B "
             "--non-expert-bytes 1000000");
    cr_assert_eq(run_cli(args, out, sizeof out), 0, "%s", out);
    cr_assert_not_null(strstr(out, "note: synth.json's GPU is 'synthetic (bench/synth_gpu_costs.py)': its GPU costs "
                                   "are made up"), "%s", out);
    snprintf(args, sizeof args, "simulate timed.db --costs '%s' --expert Q4_K --budget 3000000B --non-expert-bytes "
             "1000000", costs_path());
    cr_assert_eq(run_cli(args, out, sizeof out), 0, "%s", out);
    cr_assert_null(strstr(out, "are made up"), "%s", out);
}

/* --host-read-gbs scales the CPU's costs from the level the grid measured them at (host_read.
 * level_gbs), not from the best probe (gbs): with the level at 25 GB/s, a host at 50 halves them,
 * as the fixture's own level (gbs 50, no level_gbs) does at 100 (cpu_share_of_decode_steps_from_
 * the_grid). */
Test(simulate, host_read_scales_from_the_grids_level)
{
    write_timed_trace();
    static char out[1 << 16];
    char args[2048];
    costs_with("level.json", "\"host_read\": {\"gbs\": 50,",
               "\"host_read\": {\"gbs\": 50, \"level_gbs\": 25, \"level_probes\": 3,");
    snprintf(args, sizeof args, "simulate timed.db --costs level.json --expert Q4_K --budget 3000000B "
             "--non-expert-bytes 1000000 --train-frac 1 --as-decode --json lv.json --host-read-gbs 50");
    cr_assert_eq(run_cli(args, out, sizeof out), 0, "%s", out);
    snprintf(args, sizeof args, "simulate timed.db --costs '%s' --expert Q4_K --budget 3000000B --non-expert-bytes "
             "1000000 --train-frac 1 --as-decode --json fx.json --host-read-gbs 100", costs_path());
    cr_assert_eq(run_cli(args, out, sizeof out), 0, "%s", out);
    cr_assert_float_eq(policy_metric("lv.json", "all-cpu", "cpu_expert_ns"),
                       policy_metric("fx.json", "all-cpu", "cpu_expert_ns"), 1e-6);
    cr_assert(policy_metric("lv.json", "all-cpu", "cpu_expert_ns") < 8 * 110000.0);
    /* the header says which host the CPU's costs are for */
    cr_assert_not_null(strstr(out, "CPU costs: for a host reading 100.0 GB/s (--host-read-gbs; calibrated at 50.0)\n"),
                       "%s", out);
    snprintf(args, sizeof args, "simulate timed.db --costs level.json --expert Q4_K --budget 3000000B "
             "--non-expert-bytes 1000000");
    cr_assert_eq(run_cli(args, out, sizeof out), 0, "%s", out);
    cr_assert_not_null(strstr(out, "CPU costs: for a host reading 25.0 GB/s, as while calibrate's decode grid "
                                   "measured them (the median of 3 probes;"), "%s", out);
    /* a level above the best probe is refused, naming it */
    costs_with("bad-level.json", "\"host_read\": {\"gbs\": 50,",
               "\"host_read\": {\"gbs\": 50, \"level_gbs\": 60, \"level_probes\": 3,");
    snprintf(args, sizeof args, "simulate timed.db --costs bad-level.json --expert Q4_K --budget 3000000B "
             "--non-expert-bytes 1000000");
    cr_assert_eq(run_cli(args, out, sizeof out), 1, "%s", out);
    cr_assert_not_null(strstr(out, "$.host_read.level_gbs: 60: expected a bandwidth > 0 and at most gbs (50)"), "%s",
                       out);
}
