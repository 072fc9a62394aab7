/* tests/unit/test_analyzer_cli.c — `moeplan analyze` end to end through the binary: the report
 * directory appears whole or not at all, errors are one line with exit 1 (usage: 2), row modes
 * count what they should, summary.json lists files that exist, --simulation adds its section or
 * is refused in one line, and report.html renders in headless Chromium, the simulation's chart
 * included (scripts/setup.sh installs it; without it this test FAILS, it never skips). */
#include <cjson/cJSON.h>
#include <criterion/criterion.h>
#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "tests/unit/analyzer_fixture.h"

static char tmpdir[256];

static void setup(void)
{
    snprintf(tmpdir, sizeof tmpdir, "/tmp/mp_test_ancli_XXXXXX");
    cr_assert_not_null(mkdtemp(tmpdir));
}

static void teardown(void)
{
    char cmd[300];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", tmpdir);
    cr_assert_eq(system(cmd), 0);
}

TestSuite(analyzer_cli, .init = setup, .fini = teardown);

typedef struct run_result {
    int status;
    char out[16384], err[16384];
} run_result;

static void slurp(const char *path, char *buf, size_t cap)
{
    buf[0] = '\0';
    FILE *f = fopen(path, "r");
    if (!f)
        return;
    size_t n = fread(buf, 1, cap - 1, f);
    buf[n] = '\0';
    fclose(f);
}

/* Run `moeplan ARGS` (a shell fragment), capturing stdout and stderr. */
static void moeplan(run_result *r, const char *args)
{
    const char *exe = getenv("MP_MOEPLAN");
    cr_assert_not_null(exe, "MP_MOEPLAN is not set (run through meson test)");
    char cmd[8192];
    snprintf(cmd, sizeof cmd, "'%s' %s >'%s/stdout' 2>'%s/stderr'", exe, args, tmpdir, tmpdir);
    int st = system(cmd);
    cr_assert(WIFEXITED(st), "moeplan did not exit normally: %s", cmd);
    r->status = WEXITSTATUS(st);
    char p[512];
    snprintf(p, sizeof p, "%s/stdout", tmpdir);
    slurp(p, r->out, sizeof r->out);
    snprintf(p, sizeof p, "%s/stderr", tmpdir);
    slurp(p, r->err, sizeof r->err);
}

static bool exists(const char *path)
{
    struct stat sb;
    return stat(path, &sb) == 0;
}

/* Nothing but the expected entries in tmpdir: no report.tmp.* left behind. */
static void no_temporaries(void)
{
    DIR *d = opendir(tmpdir);
    struct dirent *e;
    while ((e = readdir(d)))
        cr_assert_null(strstr(e->d_name, ".tmp."), "left behind: %s", e->d_name);
    closedir(d);
}

static cJSON *load_summary(const char *dir)
{
    char p[600];
    static char buf[1 << 20];
    snprintf(p, sizeof p, "%s/summary.json", dir);
    slurp(p, buf, sizeof buf);
    cJSON *j = cJSON_Parse(buf);
    cr_assert_not_null(j, "summary.json does not parse");
    return j;
}

static double num(const cJSON *o, const char *a, const char *b)
{
    const cJSON *x = cJSON_GetObjectItemCaseSensitive(o, a);
    if (b)
        x = cJSON_GetObjectItemCaseSensitive(x, b);
    cr_assert(cJSON_IsNumber(x), "%s.%s is not a number", a, b ? b : "");
    return x->valuedouble;
}

/* Run `moeplan analyze 'TRACE' --out 'OUT' FLAGS`, require exit status 0 and return OUT's
 * summary.json parsed (the caller frees it with cJSON_Delete); r keeps the run's output. */
static cJSON *analyze_and_load_summary(run_result *r, const char *trace, const char *out,
                                       const char *flags)
{
    char args[2048];
    snprintf(args, sizeof args, "analyze '%s' --out '%s'%s%s", trace, out, *flags ? " " : "", flags);
    moeplan(r, args);
    cr_assert_eq(r->status, 0, "%s: stderr: %s", args, r->err);
    return load_summary(out);
}

Test(analyzer_cli, report_is_complete_and_consistent)
{
    char *t = make_trace(tmpdir, "t.db", (trace_opts){0});
    char out[512], args[2048];
    snprintf(out, sizeof out, "%s/report", tmpdir);
    run_result r;
    cJSON *j = analyze_and_load_summary(&r, t, out, "");
    cr_assert_str_empty(r.err);
    /* 3 requests × (4 prefill + 2 decode rows) × 2 nodes × top-2 */
    cr_assert_eq(num(j, "totals", "routes"), 72);
    cr_assert_eq(num(j, "totals", "token_rows"), 36);
    const cJSON *files = cJSON_GetObjectItemCaseSensitive(j, "files");
    cr_assert_geq(cJSON_GetArraySize(files), 15);
    const cJSON *f;
    cJSON_ArrayForEach(f, files) {
        char p[700];
        snprintf(p, sizeof p, "%s/%s", out, f->valuestring);
        cr_assert(exists(p), "summary.json lists %s but it is missing", f->valuestring);
    }
    /* expert bytes from the node table: the 50 % capacity in bytes is experts × 4096 */
    const cJSON *cap = cJSON_GetArrayItem(cJSON_GetObjectItemCaseSensitive(
                                              cJSON_GetObjectItemCaseSensitive(j, "global_budget"),
                                              "capacity"), 0);
    cr_assert_eq(num(cap, "bytes", NULL), num(cap, "experts", NULL) * 4096);
    cJSON_Delete(j);
    no_temporaries();

    /* an existing report is kept unless --force */
    snprintf(args, sizeof args, "analyze '%s' --out '%s'", t, out);
    moeplan(&r, args);
    cr_assert_eq(r.status, 1);
    cr_assert_not_null(strstr(r.err, "exists"), "%s", r.err);
    j = analyze_and_load_summary(&r, t, out, "--force --rows decode");
    cr_assert_eq(num(j, "totals", "routes"), 3 * 2 * 2 * 2, "decode rows only");
    cJSON_Delete(j);
    j = analyze_and_load_summary(&r, t, out, "--force --rows final --train-requests 0:2");
    cr_assert_eq(num(j, "totals", "routes"), 3 * 3 * 2 * 2, "last prefill row + decode rows");
    cr_assert_eq(num(j, "generalization", "train_requests"), 1);
    cJSON_Delete(j);
    no_temporaries();
    free(t);
}

/* --progress: the line counts the routing records of all traces against their footers (two
 * traces of the same model, 18 records each); --validate-only reads them too. */
Test(analyzer_cli, progress_counts_the_records_of_all_traces)
{
    char *a = make_trace(tmpdir, "a.db", (trace_opts){0});
    char *b = make_trace(tmpdir, "b.db", (trace_opts){0});
    char args[2048];
    run_result r;
    snprintf(args, sizeof args, "analyze '%s' '%s' --out '%s/rep' --progress", a, b, tmpdir);
    moeplan(&r, args);
    cr_assert_eq(r.status, 0, "%s", r.err);
    static const char both[] = "analyze: 36/36 records (100.0 %), ", one[] = "analyze: 18/18 records (100.0 %), ";
    cr_assert(!strncmp(r.err, both, strlen(both)), "%s", r.err);
    cr_assert(strchr(r.err, '\n') && !strchr(r.err, '\n')[1], "one line, the last: %s", r.err);
    snprintf(args, sizeof args, "analyze '%s' --validate-only --progress", a);
    moeplan(&r, args);
    cr_assert_eq(r.status, 0, "%s", r.err);
    cr_assert(!strncmp(r.err, one, strlen(one)), "%s", r.err);
    free(a), free(b);
}

/* Fewer requests than MP_AN_SEGMENTS: one segment per request, numbered 0, 1, 2 (not 0, 3, 6),
 * the same in drift.csv and summary.json; each segment's routes are its request's routes
 * (6 rows x 2 nodes x top-2 = 24). */
Test(analyzer_cli, drift_segments_are_numbered_without_gaps)
{
    char *t = make_trace(tmpdir, "t.db", (trace_opts){0});
    char out[512];
    snprintf(out, sizeof out, "%s/report", tmpdir);
    run_result r;
    cJSON *j = analyze_and_load_summary(&r, t, out, "");
    char p[700], csv[4096];
    snprintf(p, sizeof p, "%s/drift.csv", out);
    slurp(p, csv, sizeof csv);
    char *line = strchr(csv, '\n');
    cr_assert_not_null(line);
    for (int seg = 0; seg < N_REQ; seg++) {
        int s, first, last, routes;
        cr_assert_eq(sscanf(line + 1, "%d,%d,%d,%d,", &s, &first, &last, &routes), 4, "%s", csv);
        cr_assert_eq(s, seg, "%s", csv);
        cr_assert_eq(first, seg, "%s", csv);
        cr_assert_eq(last, seg, "%s", csv);
        cr_assert_eq(routes, 6 * N_NODES * TOP_K, "%s", csv);
        line = strchr(line + 1, '\n');
        cr_assert_not_null(line);
    }
    cr_assert_eq(line[1], '\0', "more segments than requests: %s", csv);
    const cJSON *drift = cJSON_GetObjectItemCaseSensitive(
        cJSON_GetObjectItemCaseSensitive(j, "generalization"), "drift");
    cr_assert_eq(cJSON_GetArraySize(drift), N_REQ);
    for (int seg = 0; seg < N_REQ; seg++)
        cr_assert_eq(num(cJSON_GetArrayItem(drift, seg), "segment", NULL), seg);
    cJSON_Delete(j);
    free(t);
}

/* --force replaces a report directory and nothing else: a directory holding an input trace, a
 * subdirectory or a foreign file is refused before any work, with everything in it kept. */
Test(analyzer_cli, force_replaces_only_a_report_directory)
{
    char out[512], args[2048], p[700];
    snprintf(out, sizeof out, "%s/report", tmpdir);
    cr_assert_eq(mkdir(out, 0777), 0);
    char *t = make_trace(out, "t.db", (trace_opts){0}); /* the input inside --out */
    run_result r;
    snprintf(args, sizeof args, "analyze '%s' --out '%s' --force", t, out);
    moeplan(&r, args);
    cr_assert_eq(r.status, 1, "%s", r.err);
    cr_assert_not_null(strstr(r.err, "holds 't.db', which is not a file of a moeplan report"), "%s", r.err);
    cr_assert(exists(t), "the input trace was deleted");
    /* the same trace hard-linked under a report file's name is found by inode */
    snprintf(p, sizeof p, "%s/summary.json", out);
    cr_assert_eq(link(t, p), 0);
    char *t2 = make_trace(tmpdir, "t2.db", (trace_opts){0});
    cr_assert_eq(rename(t, t2), 0); /* t2 is now the inode that summary.json names */
    snprintf(args, sizeof args, "analyze '%s' --out '%s' --force", t2, out);
    moeplan(&r, args);
    cr_assert_eq(r.status, 1, "%s", r.err);
    cr_assert_not_null(strstr(r.err, "its summary.json is the input trace"), "%s", r.err);
    cr_assert(exists(p));
    cr_assert_eq(unlink(p), 0);
    /* a subdirectory */
    snprintf(p, sizeof p, "%s/keep", out);
    cr_assert_eq(mkdir(p, 0777), 0);
    moeplan(&r, args);
    cr_assert_eq(r.status, 1, "%s", r.err);
    cr_assert_not_null(strstr(r.err, "holds 'keep'"), "%s", r.err);
    cr_assert(exists(p));
    cr_assert_eq(rmdir(p), 0);
    /* an empty directory, then the report it became, are replaced */
    moeplan(&r, args);
    cr_assert_eq(r.status, 0, "%s", r.err);
    moeplan(&r, args);
    cr_assert_eq(r.status, 0, "%s", r.err);
    no_temporaries();
    snprintf(p, sizeof p, "%s/report.old.", tmpdir);
    DIR *d = opendir(tmpdir);
    for (struct dirent *e; (e = readdir(d));)
        cr_assert_null(strstr(e->d_name, ".old."), "left behind: %s", e->d_name);
    closedir(d);
    /* a missing parent directory is named before any work */
    snprintf(args, sizeof args, "analyze '%s' --out '%s/no/such/dir'", t2, tmpdir);
    moeplan(&r, args);
    cr_assert_eq(r.status, 1, "%s", r.err);
    cr_assert_not_null(strstr(r.err, "No such file or directory"), "%s", r.err);
    cr_assert_null(strstr(r.err, ".tmp."), "%s", r.err);
    free(t);
    free(t2);
}

Test(analyzer_cli, bad_trace_one_line_error_nothing_written)
{
    char *t = make_trace(tmpdir, "t.db", (trace_opts){0});
    /* request 1, step 2 (one row), node 1's block: bytes 3-4 */
    sql(t, "UPDATE routing SET expert_ids = substr(expert_ids, 1, 2) || X'0707' || "
           "substr(expert_ids, 5) WHERE key = (1 << 24) | 2");
    char out[512], args[2048];
    snprintf(out, sizeof out, "%s/report", tmpdir);
    snprintf(args, sizeof args, "analyze '%s' --out '%s'", t, out);
    run_result r;
    moeplan(&r, args);
    cr_assert_eq(r.status, 1);
    cr_assert(!exists(out), "a report was written for a bad trace");
    no_temporaries();
    const char *prefix = "moeplan analyze: error: trace ";
    cr_assert_eq(strncmp(r.err, prefix, strlen(prefix)), 0, "%s", r.err);
    cr_assert_not_null(strstr(r.err, "request 1 (ord 1), step 2, node 1, row 0, slot 1: expert id 7 "
                                     "repeated"), "%s", r.err);
    cr_assert_eq(strchr(r.err, '\n'), r.err + strlen(r.err) - 1, "not one line: %s", r.err);

    /* --validate-only lists every problem */
    sql(t, "UPDATE run SET status = 'running'");
    snprintf(args, sizeof args, "analyze '%s' --validate-only", t);
    moeplan(&r, args);
    cr_assert_eq(r.status, 1);
    cr_assert_not_null(strstr(r.err, "problem: trace"), "%s", r.err);
    cr_assert_not_null(strstr(r.err, "status is 'running'"), "%s", r.err);
    cr_assert_not_null(strstr(r.err, "expert id 7 repeated"), "%s", r.err);
    cr_assert_not_null(strstr(r.err, "2 problems found"), "%s", r.err);
    free(t);
}

Test(analyzer_cli, usage_errors)
{
    char *t = make_trace(tmpdir, "t.db", (trace_opts){0});
    run_result r;
    char args[2048];
    moeplan(&r, "analyze");
    cr_assert_eq(r.status, 2);
    moeplan(&r, "analyze --help");
    cr_assert_eq(r.status, 0);
    cr_assert_not_null(strstr(r.out, "usage: moeplan analyze"));
    snprintf(args, sizeof args, "analyze '%s'", t);
    moeplan(&r, args);
    cr_assert_eq(r.status, 2, "--out is required");
    snprintf(args, sizeof args, "analyze '%s' --out x --rows some", t);
    moeplan(&r, args);
    cr_assert_eq(r.status, 2);
    cr_assert_not_null(strstr(r.err, "--rows 'some'"), "%s", r.err);
    snprintf(args, sizeof args, "analyze '%s' --out x --train-frac 1", t);
    moeplan(&r, args);
    cr_assert_eq(r.status, 2);
    snprintf(args, sizeof args, "analyze '%s' --out '%s'", t, t);
    moeplan(&r, args);
    cr_assert_eq(r.status, 2, "output equal to an input");
    /* flags that exclude each other are refused, not one silently ignored */
    const char *exclusive[][2] = {
        {"--validate-only --out x", "give it or --out DIR, not both"},
        {"--out x --train-frac 0.5 --train-requests 0:1", "give one"},
        {"--out x --max-problems 5", "--max-problems applies to --validate-only"},
    };
    for (int i = 0; i < 3; i++) {
        snprintf(args, sizeof args, "analyze '%s' %s", t, exclusive[i][0]);
        moeplan(&r, args);
        cr_assert_eq(r.status, 2, "%s accepted", exclusive[i][0]);
        cr_assert_not_null(strstr(r.err, exclusive[i][1]), "%s", r.err);
    }
    snprintf(args, sizeof args, "analyze '%s' --out '%s/r' --train-requests 0:99", t, tmpdir);
    moeplan(&r, args);
    cr_assert_eq(r.status, 1);
    cr_assert_not_null(strstr(r.err, "request 99: not in trace"), "%s", r.err);
    snprintf(args, sizeof args, "analyze '%s/missing.db' --out '%s/r'", tmpdir, tmpdir);
    moeplan(&r, args);
    cr_assert_eq(r.status, 1);
    cr_assert_not_null(strstr(r.err, "missing.db"), "%s", r.err);
    no_temporaries();
    free(t);
}

/* simulate --json's shape for the fixture's model (2 layers x 8 experts, top-2): three budgets,
 * the baselines, a whole-layer and two per-expert placements (held-out metrics). */
static void write_simulation(const char *path, int experts)
{
    FILE *f = fopen(path, "w");
    cr_assert_not_null(f);
    fprintf(f, "{\"format\": \"moeplan-simulation\", \"version\": 1, \"trace\": \"t.db\", "
               "\"trace_geometry\": {\"moe_layers\": 2, \"experts\": %d, \"top_k\": 2}, "
               "\"budgets\": [", experts);
    static const char *const pol[] = {"all-gpu", "all-cpu", "first-n-cpu", "static-topn", "plan"};
    for (int b = 0; b < 3; b++) {
        fprintf(f, "%s{\"budget_bytes\": %d, \"slots\": %d, \"policies\": [", b ? ", " : "",
                (b + 1) << 20, 2 * (b + 1));
        for (int p = 0; p < 5; p++) {
            const double tok_s = p == 0 ? 100 : p == 1 ? 20 : 20 + (10 + 5 * p) * (b + 1);
            fprintf(f, "%s{\"policy\": \"%s\", \"in_sample\": {\"decisions\": 40, \"tok_s\": %g, "
                       "\"ms_per_token\": %g}, \"held_out\": {\"decisions\": 32, \"tok_s\": %g, "
                       "\"ms_per_token\": %g}}", p ? ", " : "", pol[p], tok_s, 1000 / tok_s,
                    tok_s * 0.9, 1000 / (tok_s * 0.9));
        }
        fprintf(f, "]}");
    }
    fprintf(f, "]}\n");
    fclose(f);
}

/* --simulation: the report gains simulation.csv and .svg (listed in summary.json) and a section;
 * a bad file or one of another model is refused in one line before any work, nothing written;
 * with --validate-only it is a usage error. */
Test(analyzer_cli, simulation_section_and_refusals)
{
    char *t = make_trace(tmpdir, "t.db", (trace_opts){0});
    char out[512], sim[512], args[2048], p[700];
    snprintf(out, sizeof out, "%s/report", tmpdir);
    snprintf(sim, sizeof sim, "%s/sim.json", tmpdir);
    run_result r;
    write_simulation(sim, 64);
    snprintf(args, sizeof args, "analyze '%s' --out '%s' --simulation '%s'", t, out, sim);
    moeplan(&r, args);
    cr_assert_eq(r.status, 1);
    char want[1024];
    snprintf(want, sizeof want, "moeplan analyze: error: simulation %s: $.trace_geometry: 2 MoE "
             "layers x 64 experts, top-2, but the analyzed traces have 2 x 8, top-2: expected a "
             "simulation of these traces' model\n", sim);
    cr_assert_str_eq(r.err, want);
    cr_assert(!exists(out));
    FILE *f = fopen(sim, "w");
    fputs("{\"format\": \"moeplan-simulation\", \"version\": 1}", f);
    fclose(f);
    moeplan(&r, args);
    cr_assert_eq(r.status, 1);
    cr_assert(strstr(r.err, "simulation ") && strstr(r.err, "sim.json: $.trace: missing\n"), "%s", r.err);
    cr_assert(!exists(out));
    no_temporaries();
    snprintf(args, sizeof args, "analyze '%s' --validate-only --simulation '%s'", t, sim);
    moeplan(&r, args);
    cr_assert_eq(r.status, 2);
    cr_assert(strstr(r.err, "--simulation adds to a report"), "%s", r.err);

    write_simulation(sim, 8);
    char simulation_flag[600];
    snprintf(simulation_flag, sizeof simulation_flag, "--simulation '%s'", sim);
    cJSON *j = analyze_and_load_summary(&r, t, out, simulation_flag);
    int listed = 0;
    const cJSON *e;
    cJSON_ArrayForEach(e, cJSON_GetObjectItemCaseSensitive(j, "files")) {
        snprintf(p, sizeof p, "%s/%s", out, e->valuestring);
        cr_assert(exists(p), "summary.json lists %s but it is missing", e->valuestring);
        listed += !strcmp(e->valuestring, "simulation.csv") || !strcmp(e->valuestring, "simulation.svg");
    }
    cr_assert_eq(listed, 2);
    cJSON_Delete(j);
    static char text[1 << 20];
    snprintf(p, sizeof p, "%s/simulation.csv", out);
    slurp(p, text, sizeof text);
    cr_assert(!strncmp(text, "budget_bytes,policy,split,tok_s,ms_per_token\n1048576,\"all-gpu\","
                             "held_out,90,11.1111\n", 78), "%s", text);
    snprintf(p, sizeof p, "%s/report.html", out);
    slurp(p, text, sizeof text);
    /* at 3 MiB, held out: plan (0.9 x (20 + 30 x 3) = 99) against all-CPU (18) and first-n-cpu
     * (0.9 x (20 + 20 x 3) = 72) */
    cr_assert(strstr(text, "the best placement (<b>plan</b>) predicts <b>99.0 tok/s</b>, 5.50x every "
                           "expert on the CPU, 1.38x the best whole-layer placement (first-n-cpu"),
              "%s", strstr(text, "sim-glance") ? strstr(text, "sim-glance") : text);
    cr_assert(strstr(text, "id=\"chart-simulation\"") && strstr(text, "id=\"sim-table\""));
    /* a report with the simulation's files is a report: --force replaces it */
    snprintf(args, sizeof args, "analyze '%s' --out '%s' --force", t, out);
    moeplan(&r, args);
    cr_assert_eq(r.status, 0, "%s", r.err);
    snprintf(p, sizeof p, "%s/simulation.csv", out);
    cr_assert(!exists(p), "the new report has no simulation");
    no_temporaries();
    free(t);
}

static long file_size(const char *path)
{
    struct stat sb;
    return stat(path, &sb) == 0 ? (long)sb.st_size : -1;
}

Test(analyzer_cli, report_renders_in_headless_chromium, .timeout = 300)
{
    cr_assert_eq(system("command -v chromium >/dev/null 2>&1"), 0,
                 "chromium is not installed: run scripts/setup.sh (Debian package 'chromium')");
    char *t = make_trace(tmpdir, "t.db", (trace_opts){0});
    char out[512], args[2048], sim[512];
    snprintf(out, sizeof out, "%s/report", tmpdir);
    snprintf(sim, sizeof sim, "%s/sim.json", tmpdir);
    write_simulation(sim, 8); /* the simulation's chart is laid out too */
    snprintf(args, sizeof args, "analyze '%s' --out '%s' --simulation '%s'", t, out, sim);
    run_result r;
    moeplan(&r, args);
    cr_assert_eq(r.status, 0, "%s", r.err);
    /* a blank page of the same size is the baseline a rendered report must exceed */
    char blank[600];
    snprintf(blank, sizeof blank, "%s/blank.html", tmpdir);
    FILE *f = fopen(blank, "w");
    fputs("<!DOCTYPE html><html><body></body></html>\n", f);
    fclose(f);
    /* probe.html: the report with a script that measures what the browser laid out, each chart's
     * box, the smallest text on it in CSS pixels (font size x the SVG's scale) and what it drew,
     * written into the DOM that --dump-dom prints */
    static char page[1 << 20];
    char p[600];
    snprintf(p, sizeof p, "%s/report.html", out);
    slurp(p, page, sizeof page);
    char *end = strstr(page, "</body>");
    cr_assert_not_null(end, "report.html has no </body>");
    *end = '\0';
    snprintf(p, sizeof p, "%s/probe.html", tmpdir);
    f = fopen(p, "w");
    cr_assert_not_null(f);
    fprintf(f, "%s<script>\n"
               "var out = [];\n"
               "document.querySelectorAll('svg[id^=chart-]').forEach(function (s) {\n"
               "  var r = s.getBoundingClientRect(), scale = r.width / s.viewBox.baseVal.width;\n"
               "  var min = 1e9;\n"
               "  s.querySelectorAll('text').forEach(function (t) {\n"
               "    min = Math.min(min, parseFloat(getComputedStyle(t).fontSize) * scale); });\n"
               "  out.push(s.id + ' ' + Math.round(r.width) + ' ' + Math.round(r.height) + ' ' +\n"
               "           min.toFixed(1) + ' ' + s.querySelectorAll('polyline, rect.cell').length);\n"
               "});\n"
               "var cell = document.querySelector('#chart-heatmap rect.cell').getBoundingClientRect();\n"
               "out.push('heatmap-row ' + cell.height.toFixed(1) + ' ' +\n"
               "         document.querySelectorAll('#chart-heatmap-scale text').length);\n"
               "var pre = document.createElement('pre'); pre.id = 'probe';\n"
               "pre.textContent = out.join('\\n'); document.body.appendChild(pre);\n"
               "</script></body></html>\n", page);
    fclose(f);
    const char *flags = "--headless --no-sandbox --disable-gpu --hide-scrollbars "
                        "--window-size=1200,2400";
    char cmd[4096];
    snprintf(cmd, sizeof cmd,
             "cd '%s' && timeout 120 chromium %s --user-data-dir='%s/chr' --dump-dom "
             "'file://%s/probe.html' > dom.html 2>/dev/null && "
             "timeout 120 chromium %s --user-data-dir='%s/chr' --screenshot='%s/report.png' "
             "'file://%s/report.html' >/dev/null 2>&1 && "
             "timeout 120 chromium %s --user-data-dir='%s/chr' --screenshot='%s/blank.png' "
             "'file://%s' >/dev/null 2>&1",
             tmpdir, flags, tmpdir, tmpdir, flags, tmpdir, tmpdir, out, flags, tmpdir, tmpdir, blank);
    cr_assert_eq(system(cmd), 0, "chromium failed: %s", cmd);
    static char dom[1 << 20];
    snprintf(p, sizeof p, "%s/dom.html", tmpdir);
    slurp(p, dom, sizeof dom);
    static const char *const want[] = {"id=\"title\"", "id=\"glance\"", "id=\"capacity\"",
                                       "id=\"hot\"", "<polyline", "id=\"nodes\"",
                                       "href=\"nodes.csv\"", "href=\"locality.csv\"",
                                       "id=\"sim-glance\"", "id=\"sim-verdict\"",
                                       "id=\"sim-table\"", "href=\"simulation.csv\"", NULL};
    for (int i = 0; want[i]; i++)
        cr_assert_not_null(strstr(dom, want[i]), "the rendered DOM lacks %s", want[i]);
    /* every chart laid out at a readable size, with text of at least 9 CSS px and something
     * drawn; heat-map rows at least 14 px; the colour bar labelled at its 7 values */
    const char *probe = strstr(dom, "<pre id=\"probe\">");
    cr_assert_not_null(probe, "the probe script did not run");
    probe += strlen("<pre id=\"probe\">");
    static const char *const charts[] = {"chart-heatmap", "chart-coverage", "chart-rank-threshold",
                                         "chart-heldout", "chart-locality", "chart-weight-reuse",
                                         "chart-drift", "chart-requests", "chart-simulation"};
    for (size_t c = 0; c < sizeof charts / sizeof charts[0]; c++) {
        char key[64];
        snprintf(key, sizeof key, "%s ", charts[c]);
        const char *line = strstr(probe, key);
        cr_assert_not_null(line, "%s was not rendered: %s", charts[c], probe);
        int w, h, drawn;
        double min_font;
        cr_assert_eq(sscanf(line + strlen(key), "%d %d %lf %d", &w, &h, &min_font, &drawn), 4, "%s", line);
        cr_assert_geq(w, 600, "%s: %d px wide", charts[c], w);
        cr_assert_geq(h, 200, "%s: %d px high", charts[c], h);
        cr_assert_geq(min_font, 9.0, "%s: text of %.1f px", charts[c], min_font);
        cr_assert_gt(drawn, 0, "%s: nothing drawn", charts[c]);
    }
    const char *row = strstr(probe, "heatmap-row ");
    cr_assert_not_null(row, "%s", probe);
    double row_px;
    int scale_labels;
    cr_assert_eq(sscanf(row + strlen("heatmap-row "), "%lf %d", &row_px, &scale_labels), 2);
    cr_assert_geq(row_px, 14.0, "heat-map rows of %.1f px", row_px);
    cr_assert_eq(scale_labels, 8, "colour bar: a title and 7 values expected, %d texts", scale_labels);
    char png[600];
    snprintf(png, sizeof png, "%s/report.png", tmpdir);
    const long report_bytes = file_size(png);
    snprintf(png, sizeof png, "%s/blank.png", tmpdir);
    const long blank_bytes = file_size(png);
    cr_assert_gt(blank_bytes, 0, "no blank screenshot");
    /* PNG compresses a blank page to almost nothing; drawn charts and tables do not */
    cr_assert_gt(report_bytes, 10 * blank_bytes, "screenshot looks blank: %ld bytes vs blank %ld",
                 report_bytes, blank_bytes);
    free(t);
}

/* ---- summary.json against schemas/report.schema.json ----
 * A small validator of the JSON Schema keywords the schema uses: type, required, properties,
 * items, $ref (#/$defs/...), const, enum, minimum, maximum, minItems, maxItems. */

static const cJSON *schema_root;

static bool type_is(const cJSON *v, const char *t)
{
    if (!strcmp(t, "object")) return cJSON_IsObject(v);
    if (!strcmp(t, "array")) return cJSON_IsArray(v);
    if (!strcmp(t, "string")) return cJSON_IsString(v);
    if (!strcmp(t, "null")) return cJSON_IsNull(v);
    if (!strcmp(t, "number")) return cJSON_IsNumber(v);
    if (!strcmp(t, "integer")) return cJSON_IsNumber(v) && v->valuedouble == (double)(long long)v->valuedouble;
    return false;
}

static bool same_value(const cJSON *a, const cJSON *b)
{
    return cJSON_Compare(a, b, true) ||
           (cJSON_IsNumber(a) && cJSON_IsNumber(b) && a->valuedouble == b->valuedouble);
}

static void check_schema(const cJSON *v, const cJSON *s, const char *where)
{
    const cJSON *ref = cJSON_GetObjectItemCaseSensitive(s, "$ref");
    if (ref) {
        cr_assert_eq(strncmp(ref->valuestring, "#/$defs/", 8), 0);
        s = cJSON_GetObjectItemCaseSensitive(cJSON_GetObjectItemCaseSensitive(schema_root, "$defs"),
                                             ref->valuestring + 8);
        cr_assert_not_null(s, "%s: unknown $ref %s", where, ref->valuestring);
    }
    const cJSON *k;
    if ((k = cJSON_GetObjectItemCaseSensitive(s, "type"))) {
        bool ok = false;
        if (cJSON_IsString(k))
            ok = type_is(v, k->valuestring);
        else {
            const cJSON *t;
            cJSON_ArrayForEach(t, k) ok |= type_is(v, t->valuestring);
        }
        cr_assert(ok, "%s: wrong type", where);
    }
    if ((k = cJSON_GetObjectItemCaseSensitive(s, "const")))
        cr_assert(same_value(v, k), "%s: not the constant", where);
    if ((k = cJSON_GetObjectItemCaseSensitive(s, "enum"))) {
        bool ok = false;
        const cJSON *e;
        cJSON_ArrayForEach(e, k) ok |= same_value(v, e);
        cr_assert(ok, "%s: not one of the enum", where);
    }
    if ((k = cJSON_GetObjectItemCaseSensitive(s, "minimum")) && cJSON_IsNumber(v))
        cr_assert_geq(v->valuedouble, k->valuedouble, "%s: below minimum", where);
    if ((k = cJSON_GetObjectItemCaseSensitive(s, "maximum")) && cJSON_IsNumber(v))
        cr_assert_leq(v->valuedouble, k->valuedouble, "%s: above maximum", where);
    if ((k = cJSON_GetObjectItemCaseSensitive(s, "minItems")))
        cr_assert_geq(cJSON_GetArraySize(v), k->valueint, "%s: too few items", where);
    if ((k = cJSON_GetObjectItemCaseSensitive(s, "maxItems")))
        cr_assert_leq(cJSON_GetArraySize(v), k->valueint, "%s: too many items", where);
    if ((k = cJSON_GetObjectItemCaseSensitive(s, "required"))) {
        const cJSON *r;
        cJSON_ArrayForEach(r, k)
            cr_assert_not_null(cJSON_GetObjectItemCaseSensitive(v, r->valuestring),
                               "%s: missing %s", where, r->valuestring);
    }
    char sub[512];
    if ((k = cJSON_GetObjectItemCaseSensitive(s, "properties")) && cJSON_IsObject(v)) {
        const cJSON *p;
        cJSON_ArrayForEach(p, k) {
            const cJSON *x = cJSON_GetObjectItemCaseSensitive(v, p->string);
            snprintf(sub, sizeof sub, "%s.%s", where, p->string);
            if (x)
                check_schema(x, p, sub);
        }
    }
    if ((k = cJSON_GetObjectItemCaseSensitive(s, "items")) && cJSON_IsArray(v)) {
        int i = 0;
        const cJSON *x;
        cJSON_ArrayForEach(x, v) {
            snprintf(sub, sizeof sub, "%s[%d]", where, i++);
            check_schema(x, k, sub);
        }
    }
}

Test(analyzer_cli, summary_conforms_to_the_schema)
{
    const char *root = getenv("MP_SOURCE_ROOT");
    cr_assert_not_null(root);
    char p[1024];
    snprintf(p, sizeof p, "%s/schemas/report.schema.json", root);
    static char text[1 << 16];
    slurp(p, text, sizeof text);
    cJSON *schema = cJSON_Parse(text);
    cr_assert_not_null(schema, "the schema does not parse");
    schema_root = schema;
    char *t = make_trace(tmpdir, "t.db", (trace_opts){0});
    const char *variants[2] = {"", "--rows final --train-requests 0:1,0:2"};
    for (int i = 0; i < 2; i++) {
        char out[512];
        snprintf(out, sizeof out, "%s/report%d", tmpdir, i);
        run_result r;
        cJSON *j = analyze_and_load_summary(&r, t, out, variants[i]);
        check_schema(j, schema, "summary");
        cJSON_Delete(j);
    }
    cJSON_Delete(schema);
    free(t);
}

Test(analyzer_cli, many_experts_two_byte_ids)
{
    /* 1,000 experts: u16 ids, no transition tables (null in the JSON), heat map grouped */
    char *t = make_trace(tmpdir, "t.db", (trace_opts){.n_experts = 1000});
    char out[512];
    snprintf(out, sizeof out, "%s/report", tmpdir);
    run_result r;
    cJSON *j = analyze_and_load_summary(&r, t, out, "");
    const cJSON *n0 = cJSON_GetArrayItem(cJSON_GetObjectItemCaseSensitive(j, "nodes"), 0);
    cr_assert(cJSON_IsNull(cJSON_GetObjectItemCaseSensitive(n0, "same_layer_pred")));
    cr_assert_eq(cJSON_GetObjectItemCaseSensitive(n0, "n_experts")->valueint, 1000);
    cJSON_Delete(j);
    char p[600];
    static char svg[1 << 20];
    snprintf(p, sizeof p, "%s/heatmap.svg", out);
    slurp(p, svg, sizeof svg);
    cr_assert_not_null(strstr(svg, "expert id (groups of 4)"), "heat map not grouped");
    free(t);
}

/* The adaptive tier's counts in the timing rows (what collect --adaptive records) are summed into
 * summary.json's adaptive_tier; a trace without them has none. Two rows: (request 0, step 0, node
 * 0) and (request 0, step 1, node 1). */
Test(analyzer_cli, adaptive_tier_from_the_timing_rows)
{
    char *t = make_trace(tmpdir, "t.db", (trace_opts){0});
    char out[512], args[2048];
    snprintf(out, sizeof out, "%s/report", tmpdir);
    run_result r;
    cJSON *j = analyze_and_load_summary(&r, t, out, "");
    cr_assert_null(cJSON_GetObjectItemCaseSensitive(j, "adaptive_tier"), "no timing rows, no tier");
    cJSON_Delete(j);
    sql(t, "INSERT INTO timing(key, gpu_expert_ns, cpu_expert_ns, h2d_bytes, h2d_ns, d2h_bytes, d2h_ns, sync_ns,"
           " merge_ns, hits, misses, tier_hits, tier_late, tier_admissions, tier_evictions, tier_copy_bytes)"
           " VALUES (0, 1, 1, 0, 0, 0, 0, 0, 0, 5, 3, 2, 1, 1, 0, 4096),"
           " (4097, 1, 1, 0, 0, 0, 0, 0, 0, 1, 1, 1, 0, 2, 2, 8192)");
    sql(t, "UPDATE footer SET n_timing = 2"); /* the footer counts them, as the writer's would */
    j = analyze_and_load_summary(&r, t, out, "--force");
    cr_assert_eq(num(j, "adaptive_tier", "routes"), 10);
    cr_assert_eq(num(j, "adaptive_tier", "tier_hits"), 3);
    cr_assert_float_eq(num(j, "adaptive_tier", "tier_share"), 0.3, 1e-12);
    cr_assert_eq(num(j, "adaptive_tier", "late"), 1);
    cr_assert_eq(num(j, "adaptive_tier", "admissions"), 3);
    cr_assert_eq(num(j, "adaptive_tier", "evictions"), 2);
    cr_assert_eq(num(j, "adaptive_tier", "copy_bytes"), 12288);
    cJSON_Delete(j);
    /* counts whose sum passes 2^63: refused in one line, no report */
    sql(t, "UPDATE timing SET tier_evictions = 4611686018427387904");
    snprintf(out, sizeof out, "%s/report2", tmpdir);
    snprintf(args, sizeof args, "analyze '%s' --out '%s'", t, out);
    moeplan(&r, args);
    cr_assert_eq(r.status, 1, "stderr: %s", r.err);
    cr_assert(strstr(r.err, "timing: the adaptive tier's counts pass 2^63 when summed") && strstr(r.err, t),
              "%s", r.err);
    cr_assert(!exists(out), "no report");
    free(t);
}

/* The served codes of the timing rows (what collect records on the GPU executor) are summed into
 * summary.json's routes_served, per path and per node, over every step whatever --rows selects;
 * routes without codes are unknown. The fixture: 2 nodes × 3 requests × (4 + 1 + 1) rows × top-2. */
Test(analyzer_cli, routes_served_from_the_timing_rows)
{
    char *t = make_trace(tmpdir, "t.db", (trace_opts){0});
    char out[512], args[2048];
    snprintf(out, sizeof out, "%s/report", tmpdir);
    run_result r;
    cJSON *j = analyze_and_load_summary(&r, t, out, "");
    cr_assert_eq(num(j, "routes_served", "routes"), 72);
    cr_assert_eq(num(j, "routes_served", "unknown"), 72, "no timing rows: every route unknown");
    cr_assert_eq(num(j, "routes_served", "gpu"), 0);
    cJSON_Delete(j);
    /* request 0's prefill at node 0: gpu 2, tier 2, cpu 2, far 1, copy 1; request 2's first decode
     * step at node 1: far, gpu; its second: a row without codes */
    sql(t, "INSERT INTO timing(key, gpu_expert_ns, cpu_expert_ns, h2d_bytes, h2d_ns, d2h_bytes, d2h_ns, sync_ns,"
           " merge_ns, hits, misses, tier_hits, served) VALUES"
           " (0, 0, 0, 0, 0, 0, 0, 0, 0, 4, 4, 2, x'0001020304000102'),"
           " ((2 << 36) | (1 << 12) | 1, 0, 0, 0, 0, 0, 0, 0, 0, 1, 1, 0, x'0300'),"
           " ((2 << 36) | (2 << 12) | 1, 0, 0, 0, 0, 0, 0, 0, 0, 2, 0, 0, NULL)");
    sql(t, "UPDATE footer SET n_timing = 3");
    const char *rows[2] = {"", "--rows decode"};
    for (int v = 0; v < 2; v++) {
        char flags[64];
        snprintf(flags, sizeof flags, "--force %s", rows[v]);
        j = analyze_and_load_summary(&r, t, out, flags);
        const cJSON *rs = cJSON_GetObjectItemCaseSensitive(j, "routes_served");
        const char *keys[7] = {"routes", "gpu", "tier", "cpu", "far", "copy", "unknown"};
        const double all[7] = {72, 3, 2, 2, 2, 1, 62}, node[2][7] = {{36, 2, 2, 2, 1, 1, 28}, {36, 1, 0, 0, 1, 0, 34}};
        for (int k = 0; k < 7; k++)
            cr_assert_eq(num(rs, keys[k], NULL), all[k], "%s: %s", rows[v], keys[k]);
        const cJSON *by = cJSON_GetObjectItemCaseSensitive(rs, "by_node");
        cr_assert_eq(cJSON_GetArraySize(by), 2);
        for (int n = 0; n < 2; n++) {
            const cJSON *o = cJSON_GetArrayItem(by, n);
            cr_assert_eq(num(o, "node_index", NULL), n);
            cr_assert_eq(num(o, "layer", NULL), n);
            for (int k = 0; k < 7; k++)
                cr_assert_eq(num(o, keys[k], NULL), node[n][k], "%s: node %d %s", rows[v], n, keys[k]);
        }
        cJSON_Delete(j);
    }
    /* a row whose codes contradict its counts is refused, naming the place */
    sql(t, "UPDATE timing SET hits = 5 WHERE key = 0");
    snprintf(args, sizeof args, "analyze '%s' --out '%s' --force", t, out);
    moeplan(&r, args);
    cr_assert_eq(r.status, 1);
    cr_assert(strstr(r.err, "request 0 (ord 0), step 0, node 0: served codes gpu 2, tier 2, cpu 2, far 1, copy 1, "
                            "but hits 5"), "stderr: %s", r.err);
    free(t);
}
