/* tests/unit/test_analyzer_flame.c — the analyzer on routing a real trained model produced: the
 * FLAME-MoE-290M subset (tests/fixtures/traces, 8 sequences × 64 tokens × 25 layers, top-6 of
 * 64), imported by the collector's CSV importer and analyzed by mp_an_run. The test recounts the
 * CSV itself (its own parser, not the importer) and checks every (layer, expert) count, each
 * layer's top-half share, and the pooled top-half share that tests/fixtures/traces/
 * flame_top_half.py computes independently (48497 of 76800 routes). */
#include <criterion/criterion.h>
#include <cjson/cJSON.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "analyzer/analyze.h"
#include "collector/import.h"

#define LAYERS 64 /* layer numbers of the fixture are 2..26; index by number */
#define EXPERTS 64

static char tmpdir[256];

static void setup(void)
{
    snprintf(tmpdir, sizeof tmpdir, "/tmp/mp_test_anflame_XXXXXX");
    cr_assert_not_null(mkdtemp(tmpdir));
}

static void teardown(void)
{
    char cmd[300];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", tmpdir);
    cr_assert_eq(system(cmd), 0);
}

TestSuite(analyzer_flame, .init = setup, .fini = teardown);

static uint64_t csv_count[LAYERS][EXPERTS];

static void recount(const char *path)
{
    FILE *f = fopen(path, "r");
    cr_assert_not_null(f, "%s", path);
    char line[512];
    cr_assert_not_null(fgets(line, sizeof line, f));
    cr_assert_eq(strncmp(line, "seq,pos,layer,e0", 16), 0);
    memset(csv_count, 0, sizeof csv_count);
    while (fgets(line, sizeof line, f)) {
        int seq, pos, layer, e[6];
        cr_assert_eq(sscanf(line, "%d,%d,%d,%d,%d,%d,%d,%d,%d", &seq, &pos, &layer, &e[0], &e[1],
                            &e[2], &e[3], &e[4], &e[5]),
                     9, "%s", line);
        cr_assert(layer >= 0 && layer < LAYERS);
        for (int j = 0; j < 6; j++)
            csv_count[layer][e[j]]++;
    }
    fclose(f);
}

static int desc(const void *a, const void *b)
{
    uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
    return (x < y) - (x > y);
}

Test(analyzer_flame, popularity_and_top_half_match_an_independent_recount)
{
    const char *root = getenv("MP_SOURCE_ROOT");
    cr_assert_not_null(root, "MP_SOURCE_ROOT is not set (run through meson test)");
    char csv[1024], db[512], out[512];
    snprintf(csv, sizeof csv, "%s/tests/fixtures/traces/flame-moe-290m-prefill-seq0-7.csv", root);
    snprintf(db, sizeof db, "%s/flame.db", tmpdir);
    snprintf(out, sizeof out, "%s/report", tmpdir);
    mp_error err;
    mp_import_options io = {.format = MP_IMPORT_CSV, .n_experts = EXPERTS,
                            .weight_format = MP_TRACE_W_F32};
    mp_import_result ir;
    cr_assert_eq(mp_import_file(csv, db, &io, &ir, &err), MP_OK, "%s", err.msg);

    mp_an_options o;
    mp_an_options_init(&o);
    const char *traces[1] = {db};
    o.traces = traces;
    o.n_traces = 1;
    o.out_dir = out;
    mp_an_problems pb;
    cr_assert_eq(mp_an_problems_init(&pb, 1, &err), MP_OK);
    uint64_t decisions = 0;
    cr_assert_eq(mp_an_run(&o, &pb, &decisions, &err), MP_OK, "%s", err.msg);
    mp_an_problems_free(&pb);
    cr_assert_eq(decisions, 76800, "8 × 64 tokens × 25 layers × top-6");

    recount(csv);
    /* every (layer, expert) count of popularity.csv equals the recount */
    char path[600];
    snprintf(path, sizeof path, "%s/popularity.csv", out);
    FILE *f = fopen(path, "r");
    cr_assert_not_null(f);
    char line[512];
    cr_assert_not_null(fgets(line, sizeof line, f));
    int rows = 0;
    while (fgets(line, sizeof line, f)) {
        long long node, layer, expert;
        unsigned long long count;
        cr_assert_eq(sscanf(line, "%lld,%lld,%lld,%llu", &node, &layer, &expert, &count), 4);
        cr_assert_eq(count, csv_count[layer][expert], "layer %lld expert %lld", layer, expert);
        rows++;
    }
    fclose(f);
    cr_assert_eq(rows, 25 * EXPERTS);

    /* each layer's top-half share, and the pooled share */
    snprintf(path, sizeof path, "%s/summary.json", out);
    f = fopen(path, "r");
    static char buf[1 << 20];
    size_t n = fread(buf, 1, sizeof buf - 1, f);
    buf[n] = '\0';
    fclose(f);
    cJSON *j = cJSON_Parse(buf);
    cr_assert_not_null(j);
    const cJSON *nd;
    uint64_t hit = 0, total = 0;
    double pooled = 0;
    cJSON_ArrayForEach(nd, cJSON_GetObjectItemCaseSensitive(j, "nodes")) {
        const int layer = cJSON_GetObjectItemCaseSensitive(nd, "layer")->valueint;
        uint64_t v[EXPERTS], h = 0, t = 0;
        memcpy(v, csv_count[layer], sizeof v);
        qsort(v, EXPERTS, sizeof v[0], desc);
        for (int e = 0; e < EXPERTS; e++)
            t += v[e], h += e < EXPERTS / 2 ? v[e] : 0;
        const double share = cJSON_GetObjectItemCaseSensitive(nd, "top_half_share")->valuedouble;
        cr_assert_float_eq(share, (double)h / (double)t, 1e-12, "layer %d", layer);
        pooled += share * cJSON_GetObjectItemCaseSensitive(nd, "routes")->valuedouble;
        hit += h, total += t;
    }
    cr_assert_eq(hit, 48497, "flame_top_half.py's count");
    cr_assert_eq(total, 76800);
    cr_assert_float_eq(pooled / 76800.0, 48497.0 / 76800.0, 1e-9);
    /* the greedy global budget at half the experts can only do better than a top half per layer */
    const double half = cJSON_GetObjectItemCaseSensitive(
                            cJSON_GetObjectItemCaseSensitive(j, "generalization"), "half_budget_all")
                            ->valuedouble;
    cr_assert_geq(half + 1e-12, 48497.0 / 76800.0, "greedy %f", half);
    cJSON_Delete(j);
}
