/* tests/gpu/test_calibrate.c — `moeplan calibrate --quick` on a machine with a CUDA device: the
 * cost file has every GPU part (gpu_expert for the tiny model's expert kind, h2d/d2h pinned and
 * pageable, sync, the decode layer grid), nothing in $.missing, and loads with mp_costs_load. Where no CUDA device
 * exists, gpu_main.c skips the executable (exit 77) saying why. No assertion is about speed. */
#include <cjson/cJSON.h>
#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "runtime/costs.h"
#include "runtime/decide.h"
#include "runtime/model.h"

static int run_cli(const char *dir, const char *args, char *out, size_t cap)
{
    const char *exe = getenv("MP_MOEPLAN");
    cr_assert_not_null(exe, "MP_MOEPLAN is not set (run through meson test)");
    char cmd[4096];
    snprintf(cmd, sizeof cmd, "cd '%s' && '%s' %s 2>&1", dir, exe, args);
    FILE *f = popen(cmd, "r");
    cr_assert_not_null(f);
    size_t n = fread(out, 1, cap - 1, f);
    out[n] = 0;
    int st = pclose(f);
    return WIFEXITED(st) ? WEXITSTATUS(st) : -1;
}

static void check_curve(const mp_cost_curve *c, int min_points, const char *what)
{
    cr_assert(c->n_points >= min_points, "%s: %d points", what, c->n_points);
    for (int i = 0; i < c->n_points; i++)
        cr_assert(c->y[i].median_ns > 0, "%s: point %d: median %g ns, expected > 0", what, i, c->y[i].median_ns);
}

/* In a fresh folder made from dir (a mkdtemp template): a tiny model `model` from mkmodel_flags,
 * calibrated with --quick and calibrate_flags; out holds calibrate's output, path the cost file,
 * *c what it loaded. */
static void calibrate_tiny(char *dir, const char *model, const char *mkmodel_flags, const char *calibrate_flags,
                           char *out, size_t cap, char path[128], mp_costs *c)
{
    cr_assert_not_null(mkdtemp(dir));
    char args[512];
    snprintf(args, sizeof args, "mkmodel --preset tiny %s --quiet -o %s", mkmodel_flags, model);
    cr_assert_eq(run_cli(dir, args, out, cap), 0, "%s", out);
    snprintf(args, sizeof args, "calibrate -m %s --out costs.json --quick %s", model, calibrate_flags);
    cr_assert_eq(run_cli(dir, args, out, cap), 0, "%s", out);
    snprintf(path, 128, "%s/costs.json", dir);
    mp_error err;
    cr_assert_eq(mp_costs_load(path, c, &err), MP_OK, "%s", err.msg);
}

/* The decision grid of the cost file at path for dir/model on `threads` threads (the file must match
 * the model: mp_decode_costs_of_model checks it). */
static void load_decode_costs(const char *dir, const char *model, const char *path, int threads, mp_decode_costs *dc)
{
    char file[256];
    snprintf(file, sizeof file, "%s/%s", dir, model);
    mp_model *m = NULL;
    mp_error err;
    cr_assert_eq(mp_model_load(file, &m, &err), MP_OK, "%s", err.msg);
    mp_costs c;
    cr_assert_eq(mp_costs_load(path, &c, &err), MP_OK, "%s", err.msg);
    cr_assert_eq(mp_decode_costs_of_model(&c, path, m, threads, dc, &err), MP_OK, "%s", err.msg);
    mp_costs_free(&c);
    mp_model_free(m);
}

static void remove_dir(const char *dir)
{
    char cmd[200];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
    cr_assert_eq(system(cmd), 0);
}

Test(gpu_calibrate, quick_run_has_every_gpu_part)
{
    char dir[] = "/tmp/mp_test_gpu_calibrate_XXXXXX", path[128];
    static char out[1 << 16];
    mp_costs c;
    mp_error err;
    calibrate_tiny(dir, "tiny.gguf", "", "--rows 1,4,16", out, sizeof out, path, &c);
    cr_assert_not_null(strstr(out, "calibrate: GPU "), "%s", out);
    cr_assert_null(strstr(out, "no GPU measurements"), "%s", out);
    cr_assert_eq(c.absent, 0, "absent bits %#x", c.absent);
    cr_assert_eq(mp_costs_require_gpu(&c, path, &err), MP_OK, "%s", err.msg);
    cr_assert_eq(c.n_gpu_expert, 1);
    cr_assert_str_eq(c.gpu_expert[0].quant, "Q4_K/Q6_K");
    cr_assert_eq(c.gpu_expert[0].by_rows.n_points, 3);
    check_curve(&c.gpu_expert[0].by_rows, 3, "gpu_expert");
    check_curve(&c.h2d_pinned, 4, "h2d.pinned");
    check_curve(&c.h2d_pageable, 4, "h2d.pageable");
    check_curve(&c.d2h_pinned, 4, "d2h.pinned");
    check_curve(&c.d2h_pageable, 4, "d2h.pageable");
    cr_assert_eq(c.h2d_pinned.x[0], 4096);
    /* 16 MiB take longer than 4 KiB on any link: 4096x the bytes */
    cr_assert(c.h2d_pinned.y[c.h2d_pinned.n_points - 1].median_ns > c.h2d_pinned.y[0].median_ns,
              "h2d pinned: 16 MiB %g ns, 4 KiB %g ns", c.h2d_pinned.y[c.h2d_pinned.n_points - 1].median_ns,
              c.h2d_pinned.y[0].median_ns);
    cr_assert(c.sync.spread_ns >= 0);
    /* sync is the runtime's own round trip (a decode with the first layer's experts on the CPU),
     * a positive time; the bare copy + sync + copy stays in device.sync_microbenchmark */
    cr_assert(c.sync.median_ns > 0, "sync %g ns", c.sync.median_ns);
    cr_assert_not_null(strstr(out, "calibrate: decode round trip in the runtime"), "%s", out);
    /* the prefetch distances timed beside the bus as well: six points and the bus's rate */
    cr_assert_not_null(strstr(out, "; beside the bus ("), "%s", out);
    FILE *cf = fopen(path, "r");
    cr_assert_not_null(cf, "%s", path);
    static char text[1 << 20];
    const size_t n_text = fread(text, 1, sizeof text - 1, cf);
    fclose(cf);
    text[n_text] = 0;
    cJSON *file = cJSON_Parse(text);
    cr_assert_not_null(file, "%s: not JSON", path);
    const cJSON *bus = cJSON_GetObjectItem(cJSON_GetObjectItem(cJSON_GetObjectItem(file, "device"),
                                                                "prefetch_tuning"), "beside_bus");
    cr_assert_eq(cJSON_GetArraySize(cJSON_GetObjectItem(bus, "points")), 6, "beside_bus: %s", out);
    /* a GPU's link reads host memory at more than 1 GB/s */
    cr_assert(cJSON_GetObjectItem(bus, "gbs")->valuedouble > 1, "beside_bus.gbs %g",
              cJSON_GetObjectItem(bus, "gbs")->valuedouble);
    cJSON_Delete(file);
    /* one call of 1 .. top_k one-row experts, on the GPU as on the CPU */
    cr_assert(c.gpu_expert[0].concurrent.n_points >= 2);
    cr_assert_eq(c.gpu_expert[0].concurrent.n_points, c.cpu_expert[0].concurrent.n_points);
    /* the non-MoE time comes from the GPU executor here, and is a positive time per step */
    check_curve(&c.non_moe, 3, "non_moe");
    /* the one-row steps by context: the tiny preset's context of 512 holds windows from positions
     * 1, 128, 256 and 448 (mean keys 33.5 .. 480.5); the first is the non_moe curve's one-row point */
    const mp_cost_curve *k = &c.non_moe_by_keys;
    cr_assert(!c.non_moe_linear, "the older linear term: %s", out);
    cr_assert_eq(k->n_points, 4, "non_moe_context: %d points", k->n_points);
    const double keys[4] = {33.5, 160.5, 288.5, 480.5};
    for (int i = 0; i < 4; i++)
        cr_assert_float_eq(k->x[i], keys[i], 1e-9, "point %d at %g keys", i, k->x[i]);
    cr_assert_float_eq(k->y[0].median_ns, c.non_moe.y[0].median_ns, 1e-9);
    cr_assert_float_eq(mp_costs_decode_non_moe_ns(&c, 33.5), c.non_moe.y[0].median_ns, 1e-9);
    /* the decode grid: the tiny model's experts (16, top-4), every count of cold routes 0..4 with
     * far routes off, and with them on for every measured far count; each point a positive layer
     * time, and the all-cold step's CPU time on the CPU side */
    const mp_cost_decode *d = &c.decode;
    cr_assert_not_null(strstr(out, "calibrate: decode layer grid:"), "%s", out);
    cr_assert_eq(d->top_k, 4);
    cr_assert_eq(d->n_expert, 16);
    cr_assert_str_eq(d->quant, "Q4_K/Q6_K");
    cr_assert_eq(d->threads, c.cpu_expert[c.n_cpu_expert - 1].threads);
    /* far work in units of 1/far_split of an expert: for top-4, thirds where the rows allow */
    cr_assert_eq(d->far_split, mp_decide_far_split(4, d->n_ff, 256), "far_split %d, n_ff %lld", d->far_split,
                 (long long)d->n_ff);
    cr_assert(d->far_max >= 1 && d->far_max <= 4 * d->far_split, "far_max %d: the executor has far routes here",
              d->far_max);
    int off = 0, on = 0;
    for (int i = 0; i < d->n_points; i++) {
        const mp_cost_decode_point *p = &d->points[i];
        cr_assert(p->layer.median_ns > 0, "point %d: %g ns", i, p->layer.median_ns);
        cr_assert(p->cold == 0 || p->cpu_ns > 0 || p->far == p->cold * d->far_split, "point %d: cold %d, CPU %g ns", i,
                  p->cold, p->cpu_ns);
        off += !p->far_on;
        on += p->far_on;
    }
    cr_assert_eq(off, 5, "far-off points: one per cold count 0..4");
    /* the pool as large as a step with every route cold allows (16 - 4: the device holds it), the
     * points' steps, and the once-per-step cost from one hybrid layer of the model's 4 */
    cr_assert_eq(d->pool, 12);
    cr_assert_eq(d->steps, 64);
    cr_assert_eq(d->hybrid_step_layers, 4, "hybrid_step: %s", out);
    cr_assert(d->hybrid_step.median_ns >= 0);
    int want_on = 0;
    for (int cold = 0; cold <= 4; cold++)
        want_on += 1 + (cold * d->far_split < d->far_max ? cold * d->far_split : d->far_max);
    cr_assert_eq(on, want_on);
    /* the host's read bandwidth, positive, on the same threads */
    cr_assert(c.host_read_gbs > 0, "host_read %g GB/s", c.host_read_gbs);
    cr_assert_eq(c.host_read_threads, d->threads);
    /* the cores and the bus reading host memory at once, probed after each of the grid's passes
     * (the executor has far routes here, so a page-locked copy): both readers drew something, and
     * the decode costs take their sum for the floor */
    cr_assert(c.host_bus_cpu_gbs > 0 && c.host_bus_bus_gbs > 0, "host_bus %g + %g GB/s", c.host_bus_cpu_gbs,
              c.host_bus_bus_gbs);
    cr_assert_float_eq(c.host_bus_gbs, c.host_bus_cpu_gbs + c.host_bus_bus_gbs, 0.011);
    cr_assert(c.host_bus_probes >= 1, "host_bus probes %d", c.host_bus_probes);
    cr_assert_not_null(strstr(out, "calibrate: host memory read by the cores and the bus at once: "), "%s", out);
    /* and the file runs the simulator: the grid matches the model */
    mp_decode_costs dc;
    load_decode_costs(dir, "tiny.gguf", path, d->threads, &dc);
    cr_assert_eq(dc.together_bytes_per_ns, c.host_bus_gbs);
    mp_costs_free(&c);
    FILE *f = fopen(path, "r");
    cr_assert_not_null(f);
    static char json[1 << 20];
    const size_t nj = fread(json, 1, sizeof json - 1, f);
    fclose(f);
    json[nj] = 0;
    cr_assert_not_null(strstr(json, "\"gpu executor, every expert resident"),
                       "device.non_moe_path is not the GPU executor's");
    cr_assert_not_null(strstr(json, "\"sync_microbenchmark\""), "device.sync_microbenchmark missing");
    /* every grid point says its passes: the first ones (every point without far units has them),
     * one for a point with far units out of the running after the first (over 1.5x the best of its
     * cold count, which calibrate then said), or up to 8 where its spread asked for more, which
     * calibrate then said */
    cJSON *root = cJSON_Parse(json), *pt;
    cr_assert_not_null(root);
    const cJSON *pts = cJSON_GetObjectItemCaseSensitive(cJSON_GetObjectItemCaseSensitive(root, "decode_layers"), "points");
    int first = 1 << 30, most = 0, n_out = 0;
    cJSON_ArrayForEach(pt, pts)
    {
        const cJSON *np = cJSON_GetObjectItemCaseSensitive(pt, "passes");
        cr_assert(cJSON_IsNumber(np) && np->valueint >= 1 && np->valueint <= 8, "a point without 1..8 passes");
        if (cJSON_GetObjectItemCaseSensitive(pt, "far")->valueint == 0)
            first = np->valueint < first ? np->valueint : first;
        most = np->valueint > most ? np->valueint : most;
    }
    cr_assert(first >= 1 && first <= 3, "the first passes: %d", first);
    cJSON_ArrayForEach(pt, pts)
    {
        const int np = cJSON_GetObjectItemCaseSensitive(pt, "passes")->valueint;
        if (np >= first)
            continue;
        /* out of the running: a point with far units, over 1.5x the least median of its cold count */
        const int cold = cJSON_GetObjectItemCaseSensitive(pt, "cold")->valueint;
        const double med = cJSON_GetObjectItemCaseSensitive(pt, "median_ns")->valuedouble;
        cr_assert(np == 1 && cJSON_GetObjectItemCaseSensitive(pt, "far")->valueint > 0, "a point of %d passes", np);
        double least = med;
        const cJSON *q;
        cJSON_ArrayForEach(q, pts)
        if (cJSON_GetObjectItemCaseSensitive(q, "cold")->valueint == cold)
        {
            const double mq = cJSON_GetObjectItemCaseSensitive(q, "median_ns")->valuedouble;
            least = mq < least ? mq : least;
        }
        /* its one pass against the others' medians of more: a margin for their own drift */
        cr_assert_gt(med, 1.2 * least, "cold %d: %g ns, the best %g", cold, med, least);
        n_out++;
    }
    cJSON_Delete(root);
    if (n_out)
        cr_assert_not_null(strstr(out, "the best of their cold count: their first pass stands"), "%s", out);
    if (most > first)
        cr_assert_not_null(strstr(out, "spread more than 5 % of their median: pass"), "%s", out);
    remove_dir(dir);
}

/* --far-units: a top-8 model with 768 FFN rows (three Q6_K blocks) calibrated in half experts, the
 * rule's thirds being its default. The grid counts far work 0..min(2c, far_max) for every
 * cold count c from top_k - pool (--grid-pool 6 of the 8 the device would hold: cold counts 2..8),
 * each point ran as asked (calibrate refuses a point whose step did not), and the file loads for
 * the model with its split. */
Test(gpu_calibrate, far_units_and_grid_pool_on_a_top8_grid)
{
    char dir[] = "/tmp/mp_test_gpu_calibrate_XXXXXX", path[128];
    static char out[1 << 16];
    mp_costs c;
    calibrate_tiny(dir, "k8.gguf", "--layers 2 --top-k 8 --expert-ff 768", "--rows 1 --far-units 2 --grid-pool 6", out,
                   sizeof out, path, &c);
    cr_assert_not_null(strstr(out, "in units of 1/2 of an expert"), "%s", out);
    const mp_cost_decode *d = &c.decode;
    cr_assert_eq(d->top_k, 8);
    cr_assert_eq(d->n_ff, 768);
    cr_assert_eq(mp_decide_far_split(8, 768, 256), 3, "the rule's default for this shape");
    cr_assert_eq(d->far_split, 2);
    cr_assert_eq(d->pool, 6, "--grid-pool 6");
    cr_assert(d->far_max >= 2 && d->far_max <= 16 && d->far_max % 2 == 0, "far_max %d", d->far_max);
    int on = 0, off = 0, odd = 0;
    for (int i = 0; i < d->n_points; i++) {
        const mp_cost_decode_point *p = &d->points[i];
        cr_assert(p->layer.median_ns > 0, "point %d: %g ns", i, p->layer.median_ns);
        on += p->far_on;
        off += !p->far_on;
        odd += p->far_on && p->far % 2;
    }
    cr_assert_eq(off, 7, "far-off points: one per cold count 2..8");
    int want_on = 0, want_odd = 0;
    for (int cold = 8 - (int)d->pool; cold <= 8; cold++) {
        const int hi = 2 * cold < d->far_max ? 2 * cold : d->far_max;
        want_on += 1 + hi;
        want_odd += (hi + 1) / 2;
    }
    cr_assert_eq(on, want_on, "far-on points");
    cr_assert_eq(odd, want_odd, "points with a split route");
    mp_decode_costs dc;
    load_decode_costs(dir, "k8.gguf", path, d->threads, &dc);
    cr_assert_eq(dc.far_split, 2);
    mp_costs_free(&c);
    remove_dir(dir);
}
