/* simulator/calibrate_grid.c — `moeplan calibrate`'s decode layer grid (see calibrate_impl.h): a
 * one-row step's time per layer through the GPU executor with c of its top_k routes cold (a route
 * source chooses them), f of those far, far routes on or off, on a pool as large as the device
 * holds, the runs interleaved over the points and repeated where they spread; and what a step with
 * hybrid layers pays once (hybrid_step: one hybrid layer beside resident ones). The decision model
 * (runtime/decide.h) chooses far routes from this grid and the simulator charges hybrid layers by
 * it, so every point is timed as production decodes: sustained runs of one-row steps, CUDA graphs,
 * the batch that brings far routes' staging buffers.
 */
#include <errno.h>
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "base/machine.h"
#include "runtime/bench.h"
#include "runtime/executor.h"
#include "runtime/gpu.h"
#include "runtime/placement.h"
#include "runtime/session.h"
#include "simulator/calibrate_impl.h"

/* Routes with exactly `cold` of top_k on experts outside the pool in each of the first n_hybrid
 * layers: the pool holds experts [0, resident) of such a layer; each row draws top_k - cold distinct
 * ids below `resident` and `cold` at or above it, in random slots (the kernels run the first far
 * routes in slot order), with random weights summing to 1. The layers from n_hybrid on hold every
 * expert and draw top_k distinct ids of all of them, spread as a model's own routing spreads them. */
typedef struct grid_routes {
    uint64_t rng;
    int64_t n_expert, resident, n_hybrid;
    int cold;
} grid_routes;

static uint64_t grid_next(grid_routes *g)
{
    g->rng = g->rng * 6364136223846793005ull + 1442695040888963407ull;
    return g->rng >> 33;
}

static int grid_route(void *user, int64_t layer, int64_t n_rows, int64_t top_k, int32_t *ids, float *w)
{
    grid_routes *g = user;
    const bool hybrid = layer < g->n_hybrid;
    for (int64_t r = 0; r < n_rows; r++) {
        int32_t *row = ids + r * top_k;
        for (int64_t k = 0; k < top_k; k++) {
            const bool cold = hybrid && k < g->cold;
            const int64_t lo = cold ? g->resident : 0;
            const int64_t span = !hybrid ? g->n_expert : cold ? g->n_expert - g->resident : g->resident;
            bool dup;
            do {
                row[k] = (int32_t)(lo + (int64_t)(grid_next(g) % (uint64_t)span));
                dup = false;
                for (int64_t j = 0; j < k; j++)
                    dup |= row[j] == row[k];
            } while (dup);
        }
        for (int64_t k = top_k - 1; k > 0; k--) { /* cold routes into random slots */
            const int64_t j = (int64_t)(grid_next(g) % (uint64_t)(k + 1));
            const int32_t t = row[k];
            row[k] = row[j];
            row[j] = t;
        }
        float sum = 0;
        for (int64_t k = 0; k < top_k; k++)
            sum += w[r * top_k + k] = 0.5f + (float)(grid_next(g) & 0xff) / 256.0f;
        for (int64_t k = 0; k < top_k; k++)
            w[r * top_k + k] /= sum;
    }
    return 0;
}

int64_t mp_calib_grid_pool(int64_t n_expert, int64_t top_k, uint64_t row_bytes, uint64_t free_bytes,
                           uint64_t fixed_bytes, uint64_t reserve_bytes, uint64_t llc_bytes)
{
    int64_t most = n_expert - top_k; /* every route cold needs top_k experts outside the pool */
    if (most <= 0)
        return 0;
    if (row_bytes == 0)
        return most;
    const double cold_bytes = (double)MP_CALIB_LLC_MEMORY * (double)llc_bytes;
    if (llc_bytes && (double)n_expert * (double)row_bytes >= cold_bytes) { /* cold routes from memory */
        const int64_t cold_least = (int64_t)ceil(cold_bytes / (double)row_bytes);
        const int64_t cap = n_expert - cold_least > top_k ? n_expert - cold_least : top_k;
        most = cap < most ? cap : most;
    }
    const uint64_t held = fixed_bytes + reserve_bytes;
    const uint64_t fit = free_bytes > held ? (free_bytes - held) / row_bytes : 0;
    return fit < (uint64_t)most ? (int64_t)fit : most;
}

double mp_calib_hybrid_step_ns(double step_ns, double non_moe_ns, double resident_ns, double level_ns,
                               int64_t n_layer)
{
    if (n_layer < 2) /* one layer: the step with one hybrid layer is the grid's own */
        return 0;
    return (step_ns - non_moe_ns - resident_ns - level_ns) * (double)n_layer / (double)(n_layer - 1);
}

/* What calibrate measured of the non-MoE time (root's non_moe one-row point and its non_moe_context
 * curve), read as the cost model reads it (mp_costs_decode_non_moe_ns): the grid and the hybrid step
 * take from their steps what simulate charges at the same keys. */
typedef struct grid_non_moe {
    mp_costs c; /* only non_moe and non_moe_by_keys are set, on the arrays below */
    double x1, xk[MP_CALIB_CONTEXT_MAX];
    mp_cost_stat y1, yk[MP_CALIB_CONTEXT_MAX];
} grid_non_moe;

static bool grid_non_moe_from(const cJSON *root, grid_non_moe *g)
{
    memset(g, 0, sizeof *g);
    const cJSON *p0 = cJSON_GetArrayItem(cJSON_GetObjectItemCaseSensitive(root, "non_moe"), 0);
    const cJSON *rows = cJSON_GetObjectItemCaseSensitive(p0, "rows");
    const cJSON *med = cJSON_GetObjectItemCaseSensitive(p0, "median_ns");
    if (!cJSON_IsNumber(rows) || rows->valuedouble != 1 || !cJSON_IsNumber(med))
        return false;
    g->x1 = 1;
    g->y1.median_ns = med->valuedouble;
    g->c.non_moe = (mp_cost_curve){1, &g->x1, &g->y1};
    const cJSON *ctx = cJSON_GetObjectItemCaseSensitive(root, "non_moe_context");
    const cJSON *pts = cJSON_GetObjectItemCaseSensitive(ctx, "points");
    const cJSON *p;
    int n = 0;
    cJSON_ArrayForEach(p, pts) {
        const cJSON *k = cJSON_GetObjectItemCaseSensitive(p, "keys");
        const cJSON *v = cJSON_GetObjectItemCaseSensitive(p, "median_ns");
        if (n < MP_CALIB_CONTEXT_MAX && cJSON_IsNumber(k) && cJSON_IsNumber(v)) {
            g->xk[n] = k->valuedouble;
            g->yk[n++].median_ns = v->valuedouble;
        }
    }
    if (n >= 2)
        g->c.non_moe_by_keys = (mp_cost_curve){n, g->xk, g->yk};
    return true;
}

/* How the grid runs each point, and why (H200 host, 2026-12-02):
 *  - GRID_STEPS one-row steps back to back after a 1-token prompt, as bench and production decode
 *    (and as the non-MoE curve's first point, whose keys they share): the 8 steps at positions 2-9
 *    that the grid timed before ran Mixtral's whole-CPU layer at 2082 us where bench's processes
 *    took 2307-2570, and flame's c = 0 point 48 us/token under bench's;
 *  - but no run longer than GRID_RUN_NS once it has GRID_MIN_STEPS: a run is sustained decode
 *    either way (Mixtral's all-cold step takes ~69 ms, so 29 steps; the old burst was 8, 0.55 s),
 *    and 64 steps of every point would make Mixtral's pass 36 s;
 *  - at most GRID_PASSES_MAX passes: a pass takes flame (35 points, ~1.3 ms a step) ~3 s,
 *    qwen3-30b-a3b (54 points, ~10 ms, every run 64 steps) ~36 s, Mixtral (9 points, 6.8-150 ms)
 *    ~17 s: the 15 passes of calibrate's default --reps would take 9 minutes on the 30B preset.
 *    3 passes of 64 steps time more steps per point (192) than 15 of the old 8 (120), the steps of
 *    one pass in one interval; the passes still interleave the points, so that the host's drift
 *    spreads over all. */
enum { GRID_WARM = 2, GRID_STEPS = MP_CALIB_CONTEXT_WINDOW, GRID_MIN_STEPS = 16, GRID_PASSES_MAX = 3 };
/* Then a point whose passes spread more than MP_CALIB_SPREAD_MAX of their median takes more passes,
 * interleaved over such points only, up to GRID_SAMPLES_MAX samples, while the extra passes have taken
 * less time than the first ones did. */
enum { GRID_SAMPLES_MAX = 8 };
/* After the first pass, a point with far units GRID_CONTEND_MARGIN x slower than the best of its
 * cold count takes no more passes (mp_calib_grid_contenders): its one pass stands in the file. Such
 * a point is the best only on a host whose cores run 1.5x slower than the grid saw; the simulator's
 * --host-read-gbs reads it then from its one pass. The 30B preset in thirds (H100 host, 2026-12-06):
 * 126 points, three passes of all of them 350 s on one machine; on another, 74 points past 1.5x
 * kept their first pass (145 s) and the passes after it took 35 s each. */
#define GRID_CONTEND_MARGIN 1.5
#define GRID_RUN_NS ((int64_t)2000000000)

/* One run of a point: GRID_WARM untimed one-row steps (the first captures the decode graph anew
 * after a change of the far plan; *warm_ns the last one's time), then, when timed, a reset, a
 * 1-token prompt and *steps one-row steps in one interval (positions 1 .. *steps: GRID_STEPS, or
 * fewer, at least GRID_MIN_STEPS, once they have taken GRID_RUN_NS): *step_ns their mean, *gs the
 * executor's counters over them. */
static mp_status sustained_run(mp_session *s, const mp_model *m, bool timed, float *logits, double *step_ns,
                               int *steps, double *warm_ns, mp_gpu_stats *gs, mp_error *err)
{
    mp_gpu *g = mp_session_gpu(s);
    mp_status st = MP_OK;
    int32_t tok = 7;
    mp_session_reset(s);
    for (int i = 0; i < GRID_WARM && !st; i++) {
        const int64_t t0 = mp_now_ns();
        tok = (int32_t)((tok * 7919 + 13) % m->hp.n_vocab);
        st = mp_session_eval(s, &tok, 1, false, logits, err);
        *warm_ns = (double)(mp_now_ns() - t0);
    }
    if (st || !timed)
        return st;
    mp_session_reset(s);
    if ((st = mp_session_eval(s, &tok, 1, false, logits, err))) /* the prompt: position 0 */
        return st;
    mp_gpu_stats_reset(g);
    const int64_t t0 = mp_now_ns();
    int n = 0;
    while (!st && n < GRID_STEPS && (n < GRID_MIN_STEPS || mp_now_ns() - t0 < GRID_RUN_NS)) {
        tok = (int32_t)((tok * 7919 + 13) % m->hp.n_vocab);
        st = mp_session_eval(s, &tok, 1, false, logits, err);
        n++;
    }
    *step_ns = (double)(mp_now_ns() - t0) / n;
    *steps = n;
    mp_gpu_get_stats(g, gs);
    return st;
}

/* The keys the timed steps of a run of `steps` attend on average (positions 1 .. steps). */
static double grid_keys(int steps)
{
    return 1 + (steps + 1) / 2.0;
}

/* Whether the executor ran a run's `steps` steps as asked: L layers, n_hybrid of them hybrid, each
 * with `far` far routes (of which `split` split with the CPU) and cold - far CPU routes, every
 * other route on the GPU (else why says what ran: the point would describe another step). */
static bool ran_as_asked(const mp_gpu_stats *gs, int steps, int64_t L, int64_t n_hybrid, int64_t K, int cold, int far,
                         int split, char *why, size_t why_cap)
{
    const int64_t lsteps = (int64_t)steps * n_hybrid;
    if (gs->hybrid_layers == lsteps && gs->routes_far == lsteps * far && gs->routes_split == lsteps * split &&
        gs->routes_cpu == lsteps * (cold - far) && gs->routes_gpu == (int64_t)steps * L * K - lsteps * cold)
        return true;
    snprintf(why, why_cap, "%" PRId64 " hybrid layer steps with %" PRId64 " GPU, %" PRId64 " far (%" PRId64
             " split) and %" PRId64 " CPU routes, expected %" PRId64 " with %" PRId64 ", %d (%d) and %" PRId64 " each",
             gs->hybrid_layers, gs->routes_gpu, gs->routes_far, gs->routes_split, gs->routes_cpu, lsteps, K - cold,
             far, split, (int64_t)(cold - far));
    return false;
}

/* The far plan of a grid point on every layer: far routes off (f < 0), or on with f units (of
 * `split` per expert) of c cold routes. */
static void grid_plan(mp_far_layer *plan, int64_t L, int c, int f, int split)
{
    for (int64_t il = 0; il < L; il++) {
        memset(&plan[il], 0, sizeof plan[il]);
        plan[il].on = f >= 0;
        plan[il].split = (uint8_t)split;
        plan[il].table[c] = (uint8_t)(f > 0 ? f : 0);
    }
}

/* A temporary placement file (path: a mkstemp template): layers below n_hybrid hold experts
 * 0 .. pool - 1, the others all. why (cap 320) when it cannot be written. */
static bool pool_file(char *path, int64_t L, int64_t pool, int64_t n_hybrid, char *why)
{
    const int fd = mkstemp(path);
    FILE *f = fd >= 0 ? fdopen(fd, "w") : NULL;
    if (!f) {
        snprintf(why, 320, "temporary placement file: %s", strerror(errno));
        if (fd >= 0)
            close(fd), unlink(path);
        return false;
    }
    for (int64_t il = 0; il < L; il++) {
        if (il >= n_hybrid)
            fprintf(f, "%" PRId64 ": all\n", il);
        else if (pool > 0)
            fprintf(f, "%" PRId64 ": 0-%" PRId64 "\n", il, pool - 1);
        else
            fprintf(f, "%" PRId64 ": none\n", il);
    }
    if (fclose(f)) {
        snprintf(why, 320, "temporary placement file: %s", strerror(errno));
        unlink(path);
        return false;
    }
    return true;
}

/* A grid session: the GPU executor with the pool file's placement, the route source, and a batch
 * that gives it its staging buffers and the page-locked host copy (far routes need them). */
#define GRID_CTX 256
static mp_status grid_session(const mp_model *m, const mp_calib_opts *o, int64_t pool, int64_t n_hybrid,
                              mp_route_source *src, mp_placement *pl, mp_session **s, char *why)
{
    char path[] = "/tmp/moeplan-calib-XXXXXX";
    if (!pool_file(path, m->hp.n_layer, pool, n_hybrid, why))
        return MP_ERR_IO;
    mp_session_params sp = {.n_ctx = GRID_CTX, .n_threads = o->threads[o->n_threads - 1],
                            .n_batch = MP_CALIB_DECODE_BATCH_FAR, .route_src = src, .knobs = o->knobs};
    mp_error perr;
    const mp_status st = mp_calib_gpu_session(m, "--placement-file", path, &sp, pl, s, &perr);
    unlink(path);
    if (st) {
        snprintf(why, 320, "the GPU executor did not start: %.280s", perr.msg);
        mp_placement_free(pl);
    }
    return st;
}

/* Device memory for the grid's sessions: free now, what a session holds besides its pool (weights,
 * KV cache, scratch and staging: mp_gpu_budget_compute's upper bound), and one expert of every layer
 * (*row_bytes) and of each (layer_bytes, n_layer: may be NULL). */
static mp_status grid_memory(const mp_model *m, uint64_t *free_bytes, uint64_t *fixed_bytes, uint64_t *row_bytes,
                             mp_error *err)
{
    uint64_t total = 0;
    mp_placement_geom geo;
    mp_gpu_budget b;
    mp_status st = mp_gpu_memory_info(free_bytes, &total, err);
    if (st || (st = mp_placement_geom_from_model(m, &geo, err)))
        return st;
    st = mp_gpu_budget_compute(&geo, 0, GRID_CTX, MP_CALIB_DECODE_BATCH_FAR, &b, err);
    *fixed_bytes = b.fixed_bytes;
    *row_bytes = 0;
    for (int64_t il = 0; il < geo.n_layer; il++)
        *row_bytes += geo.expert_bytes[il];
    mp_placement_geom_free(&geo);
    return st;
}

/* decode_layers.hybrid_step (costs.h): the grid's all-cold point with far routes off on the first
 * layer alone, every other layer holding all its experts, timed as a grid point; each pass gives
 * mp_calib_hybrid_step_ns of its step against the non-MoE time at its keys, the other layers'
 * resident charge (resident_ns: their gpu_expert concurrent point at top_k, what simulate charges)
 * and the grid's level of that point (level_ns). Needs room on the device for every expert but the
 * first layer's cold ones; without it (or with one layer) it is left out and calibrate says why. */
static mp_status hybrid_step(const mp_model *m, const mp_calib_opts *o, const grid_non_moe *nm, double level_ns,
                             double resident_ns, int64_t pool, int passes, uint64_t room_bytes, cJSON *grid,
                             mp_error *err)
{
    const int64_t L = m->hp.n_layer, E = m->hp.n_expert, K = m->hp.n_expert_used;
    char why[320] = "";
    if (L < 2)
        snprintf(why, sizeof why, "the model has one layer");
    else if (room_bytes < (uint64_t)(L - 1) * (uint64_t)E * mp_model_expert_bytes(m, 1) +
                              (uint64_t)pool * mp_model_expert_bytes(m, 0))
        snprintf(why, sizeof why, "every expert but the first layer's cold ones does not fit on the device");
    grid_routes routes = {.rng = 29, .n_expert = E, .resident = pool, .n_hybrid = 1, .cold = (int)K};
    mp_route_source src = {.user = &routes, .route = grid_route};
    mp_placement pl = {0};
    mp_session *s = NULL;
    mp_status st = MP_OK;
    double *ns = malloc((size_t)passes * sizeof(double));
    float *logits = malloc((size_t)m->hp.n_vocab * sizeof(float));
    if (!ns || !logits) {
        st = mp_fail(err, MP_ERR_NOMEM, "calibrate: out of memory");
        goto out;
    }
    if (!why[0] && grid_session(m, o, pool, 1, &src, &pl, &s, why) == MP_OK) {
        mp_gpu_set_measure(mp_session_gpu(s), true); /* as the grid's steps */
        double warm = 0, step = 0;
        int steps = 0;
        mp_gpu_stats gs;
        for (int pass = -1; pass < passes && !why[0]; pass++) {
            if ((st = sustained_run(s, m, true, logits, &step, &steps, &warm, &gs, err)))
                goto out;
            if (ran_as_asked(&gs, steps, L, 1, K, (int)K, 0, 0, why, sizeof why) && pass >= 0)
                ns[pass] = mp_calib_hybrid_step_ns(step, mp_costs_decode_non_moe_ns(&nm->c, grid_keys(steps)),
                                                   resident_ns, level_ns, L);
        }
    }
    if (why[0]) {
        mp_calib_say(o, "calibrate: decode layer grid: the once-per-step cost of hybrid steps not measured: %s", why);
        goto out;
    }
    cJSON *p = mp_calib_point(NULL, 0, ns, passes);
    if (!p || !cJSON_AddNumberToObject(p, "layers", (double)L) || !cJSON_AddItemToObject(grid, "hybrid_step", p)) {
        cJSON_Delete(p);
        st = mp_fail(err, MP_ERR_NOMEM, "calibrate: out of memory");
        goto out;
    }
    mp_calib_say(o, "calibrate: decode layer grid: a step with hybrid layers pays %.1f us once (one hybrid layer, "
                    "every route cold, beside %" PRId64 " resident layers; spread %.1f us)",
                 cJSON_GetObjectItem(p, "median_ns")->valuedouble / 1e3, L - 1,
                 cJSON_GetObjectItem(p, "spread_ns")->valuedouble / 1e3);
out:
    mp_session_free(s);
    mp_placement_free(&pl);
    free(ns);
    free(logits);
    return st;
}

/* The grid's session and what a point's run needs. */
typedef struct grid_run {
    mp_session *s;
    const mp_model *m;
    grid_routes *routes;
    mp_far_layer *plan;
    const grid_non_moe *nm;
    float *logits;
    int split, far_routes;
} grid_run;

/* Point (cold c, far work f, -1: off) on every layer: a sustained run, timed or not (the warm-up,
 * *warm_ns its last step). Timed, the layer time (the step's mean less the non-MoE curve at its
 * keys, over n_layer) and the CPU and GPU parts of a hybrid layer step into *layer, *cpu, *gpu.
 * why set (and MP_OK) where the executor did not run the point as asked. */
static mp_status grid_point(grid_run *x, int c, int f, bool timed, double *warm_ns, double *layer, double *cpu,
                            double *gpu, char *why, size_t why_cap, mp_error *err)
{
    const int64_t L = x->m->hp.n_layer, K = x->m->hp.n_expert_used;
    x->routes->cold = c;
    grid_plan(x->plan, L, c, f, x->split);
    if (!mp_gpu_set_far_plan(mp_session_gpu(x->s), x->plan)) {
        snprintf(why, why_cap, "the executor refused far routes on every layer");
        return MP_OK;
    }
    double step = 0;
    int steps = 0;
    mp_gpu_stats gs;
    mp_status st = sustained_run(x->s, x->m, timed, x->logits, &step, &steps, warm_ns, &gs, err);
    if (st || !timed)
        return st;
    int fr = 0, part = 0;
    mp_decide_far_units(f, x->split, x->far_routes, &fr, &part);
    if (!ran_as_asked(&gs, steps, L, L, K, c, fr, part > 0, why, why_cap))
        return MP_OK;
    *layer = (step - mp_costs_decode_non_moe_ns(&x->nm->c, grid_keys(steps))) / (double)L;
    *cpu = (double)gs.cpu_expert_ns / (double)gs.hybrid_layers;
    *gpu = gs.rt_measured ? (double)gs.rt_gpu_ns / (double)gs.rt_measured : 0;
    return MP_OK;
}

mp_status mp_calib_decode_layers(const mp_model *m, const mp_calib_opts *o, cJSON *root, cJSON *device,
                                 cJSON *missing, mp_error *err)
{
    const int64_t L = m->hp.n_layer, E = m->hp.n_expert, K = m->hp.n_expert_used;
    const int threads = o->threads[o->n_threads - 1];
    const int passes = o->reps < GRID_PASSES_MAX ? o->reps : GRID_PASSES_MAX;
    char why[320] = "";
    grid_non_moe nm;
    if (!grid_non_moe_from(root, &nm))
        return mp_calib_missing(missing, "decode_layers", "no one-row non-MoE point to take from its steps", err);
    /* The pool: as many experts of every layer as the device holds beside the session, up to
     * E - top_k (every route cold needs top_k outside it): the placements production runs hold many
     * experts a layer, and the routes spread over them (flame, H200, 2026-12-02: a pool of 58 with
     * the routes spread over it cost +2.35 us a layer step over the pool of 6 the grid held before,
     * which fit the GPU's L2 for the whole model); and, where the model is larger than a few of the
     * CPU's last-level caches, few enough that the cold routes read from memory
     * (mp_calib_grid_pool). */
    uint64_t free_bytes = 0, fixed_bytes = 0, row_bytes = 0;
    mp_error merr;
    if (grid_memory(m, &free_bytes, &fixed_bytes, &row_bytes, &merr)) {
        snprintf(why, sizeof why, "the device's free memory: %.280s", merr.msg);
        return mp_calib_missing(missing, "decode_layers", why, err);
    }
    const uint64_t llc = mp_cpu_llc_bytes();
    int64_t resident = mp_calib_grid_pool(E, K, row_bytes, free_bytes, fixed_bytes, MP_EXECUTOR_RESERVE_BYTES,
                                          llc);
    if (o->grid_pool > 0 && o->grid_pool < resident) /* --grid-pool: the cold routes over more experts */
        resident = o->grid_pool;
    const int cold_min = (int)(K - resident > 0 ? K - resident : 0);
    grid_routes routes = {.rng = 17, .n_expert = E, .resident = resident, .n_hybrid = L, .cold = cold_min};
    mp_route_source src = {.user = &routes, .route = grid_route};
    mp_placement pl = {0};
    mp_session *s = NULL;
    mp_status st = MP_OK;
    const int64_t t_start = mp_now_ns();
    unsigned long long steal0 = 0, total0 = 0, steal1 = 0, total1 = 0; /* the hypervisor's share meanwhile */
    const bool stat0 = mp_cpu_times(NULL, &steal0, &total0);
    if (grid_session(m, o, resident, L, &src, &pl, &s, why))
        return mp_calib_missing(missing, "decode_layers", why, err);
    mp_gpu *g = mp_session_gpu(s);
    mp_gpu_set_measure(g, true);
    const int far_routes = mp_gpu_far_max(g) < (int)K ? mp_gpu_far_max(g) : (int)K;
    /* far work in units of 1/split of an expert (runtime/decide.h): quarter experts for a top-2
     * model, thirds from top-3 on where the rows allow; --far-units chooses (mp_calibrate checked it) */
    const int split = far_routes < 1 ? 1
                      : o->far_units > 0
                          ? o->far_units
                          : mp_decide_far_split((int)K, m->hp.n_ff_exp, mp_decide_split_granule(m->layers[0].down_exps.type));
    const int far_max = far_routes * split;
    /* the points: (cold c, far f) for c = cold_min .. K, f = -1 (off) .. min(c x split, far_max) */
    enum { MOST_POINTS = (MP_DECIDE_MAX_K + 1) * (MP_DECIDE_MAX_K + 2) };
    int n_pts = 0, pc[MOST_POINTS], pfar[MOST_POINTS];
    for (int c = cold_min; c <= K; c++)
        for (int f = -1; f <= (c * split < far_max ? c * split : far_max) && n_pts < MOST_POINTS; f++)
            pc[n_pts] = c, pfar[n_pts++] = f;
    char units[64] = "";
    if (split > 1)
        snprintf(units, sizeof units, " in units of 1/%d of an expert", split);
    mp_calib_say(o, "calibrate: decode layer grid: %d points (cold routes %d..%" PRId64 " of top-%" PRId64 ", far "
                    "work 0..%d%s, on and off), %d passes over them of %d one-row steps each after a 1-token prompt, "
                    "or as many as %.0f s hold (passes interleave the points, so that the host's drift spreads over "
                    "all), a pool of %" PRId64 " experts a layer (of %" PRId64
                    "; %.1f GiB free on the device; the cold routes over the other experts, %.0f MiB of the "
                    "model beside a %.0f MiB last-level cache)",
                 n_pts, cold_min, K, K, far_max, units, passes, GRID_STEPS, GRID_RUN_NS / 1e9, resident, E,
                 (double)free_bytes / (1 << 30), (double)(E - resident) * (double)row_bytes / 1048576.0,
                 (double)llc / 1048576.0);
    if (far_max < 1)
        mp_calib_say(o, "calibrate: decode layer grid: far routes not measured: the executor has none (no "
                        "page-locked host copy of the experts)");
    cJSON *grid = cJSON_CreateObject(), *pts = cJSON_CreateArray();
    mp_far_layer *plan = calloc((size_t)L, sizeof *plan);
    /* point i's samples at i * GRID_SAMPLES_MAX, nsamp[i] of them */
    double *layer = malloc((size_t)n_pts * GRID_SAMPLES_MAX * sizeof(double));
    double *cpu = malloc((size_t)n_pts * GRID_SAMPLES_MAX * sizeof(double));
    double *gpu = malloc((size_t)n_pts * GRID_SAMPLES_MAX * sizeof(double));
    int nsamp[MOST_POINTS] = {0}, noisy[MOST_POINTS];
    bool contend[MOST_POINTS];
    for (int i = 0; i < n_pts; i++)
        contend[i] = true;
    float *logits = malloc((size_t)m->hp.n_vocab * sizeof(float));
    grid_run run = {s, m, &routes, plan, &nm, logits, split, far_routes};
    char quant[MP_EXPERT_QUANT_MAX];
    mp_model_expert_quant(&m->layers[0], quant);
    if (!grid || !pts || !plan || !layer || !cpu || !gpu || !logits || !cJSON_AddStringToObject(grid, "quant", quant) ||
        !cJSON_AddNumberToObject(grid, "n_embd", (double)m->hp.n_embd) ||
        !cJSON_AddNumberToObject(grid, "n_ff", (double)m->hp.n_ff_exp) ||
        !cJSON_AddNumberToObject(grid, "n_expert", (double)E) || !cJSON_AddNumberToObject(grid, "top_k", (double)K) ||
        !cJSON_AddNumberToObject(grid, "far_max", far_max > 0 ? far_max : 0) ||
        !cJSON_AddNumberToObject(grid, "far_split", split) ||
        !cJSON_AddNumberToObject(grid, "threads", threads) ||
        !cJSON_AddNumberToObject(grid, "expert_bytes", (double)mp_model_expert_bytes(m, 0)) ||
        !cJSON_AddNumberToObject(grid, "pool", (double)resident) ||
        !cJSON_AddNumberToObject(grid, "steps", GRID_STEPS)) {
        st = mp_fail(err, MP_ERR_NOMEM, "calibrate: out of memory");
        goto out;
    }
    /* pass -1 warms every point up (graph captures, the host copy's pages) and times a step of each,
     * from which the time the passes take is said before they start */
    double eta_ns = 0, first_pass_s = 0;
    for (int pass = -1; pass < passes && !why[0]; pass++) {
        for (int i = 0; i < n_pts && !why[0]; i++) {
            if (!contend[i])
                continue;
            double warm = 0;
            const size_t at = (size_t)i * GRID_SAMPLES_MAX + (size_t)nsamp[i];
            if ((st = grid_point(&run, pc[i], pfar[i], pass >= 0, &warm, &layer[at], &cpu[at], &gpu[at], why,
                                 sizeof why, err)))
                goto out;
            if (pass < 0) { /* GRID_STEPS steps, or as many as GRID_RUN_NS holds (at least GRID_MIN_STEPS) */
                const double run_ns = warm * GRID_STEPS < (double)GRID_RUN_NS ? warm * GRID_STEPS
                                      : warm * GRID_MIN_STEPS > (double)GRID_RUN_NS ? warm * GRID_MIN_STEPS
                                                                                    : (double)GRID_RUN_NS;
                eta_ns += (warm * (GRID_WARM + 1) + run_ns) * passes;
            } else if (!why[0]) {
                nsamp[i]++;
            }
        }
        /* the host's read bandwidth between passes: the level these CPU costs hold ($.host_read) */
        if (!why[0] && pass >= 0 &&
            ((st = mp_calib_host_probe(o, root, err)) || (st = mp_calib_host_bus_probe(o, root, g, err))))
            goto out;
        const double elapsed = (double)(mp_now_ns() - t_start) / 1e9;
        if (!why[0] && pass < 0)
            mp_calib_say(o, "calibrate: decode layer grid: at most about %.0f s for %d passes (the warm-up's step times), "
                            "up to as long again for more passes over the points that spread, then the "
                            "once-per-step cost of hybrid steps", eta_ns / 1e9, passes);
        else if (!why[0] && pass == 0)
            mp_calib_say(o, "calibrate: decode layer grid: pass 1 of %d done [%.0f s]", passes, elapsed);
        else if (!why[0]) /* the passes after the first, over the same points: their time so far says the rest */
            mp_calib_say(o, "calibrate: decode layer grid: pass %d of %d done [%.0f s, %.0f s left]", pass + 1, passes,
                         elapsed, (elapsed - first_pass_s) / pass * (passes - pass - 1));
        if (pass == 0)
            first_pass_s = elapsed;
        if (!why[0] && pass == 0 && passes > 1) {
            const int n_in = mp_calib_grid_contenders(layer, nsamp, pc, pfar, n_pts, GRID_SAMPLES_MAX,
                                                      GRID_CONTEND_MARGIN, contend);
            if (n_in < n_pts)
                mp_calib_say(o, "calibrate: decode layer grid: %d of %d points ran more than %.1fx the best of their "
                                "cold count: their first pass stands, the other %d take the passes after it",
                             n_pts - n_in, n_pts, GRID_CONTEND_MARGIN, n_in);
        }
    }
    /* more passes over the points that spread (MP_CALIB_SPREAD_MAX), while they take less time than the
     * first passes did */
    const int64_t t_extra = mp_now_ns(), first_ns = t_extra - t_start;
    for (int extra = 1; !why[0] && passes > 1 && mp_now_ns() - t_extra < first_ns; extra++) {
        /* (a point out of the running has one sample: no spread) */
        const int n_noisy = mp_calib_noisy_points(layer, nsamp, n_pts, GRID_SAMPLES_MAX, MP_CALIB_SPREAD_MAX,
                                                  GRID_SAMPLES_MAX, noisy);
        if (!n_noisy)
            break;
        mp_calib_say(o, "calibrate: decode layer grid: %d point(s) spread more than %.0f %% of their median: pass "
                        "%d, over those points only", n_noisy, 100 * MP_CALIB_SPREAD_MAX, passes + extra);
        for (int j = 0; j < n_noisy && !why[0]; j++) {
            const int i = noisy[j];
            double warm = 0;
            const size_t at = (size_t)i * GRID_SAMPLES_MAX + (size_t)nsamp[i];
            if ((st = grid_point(&run, pc[i], pfar[i], true, &warm, &layer[at], &cpu[at], &gpu[at], why, sizeof why,
                                 err)))
                goto out;
            if (!why[0])
                nsamp[i]++;
        }
        if (!why[0] && ((st = mp_calib_host_probe(o, root, err)) || (st = mp_calib_host_bus_probe(o, root, g, err))))
            goto out;
    }
    if (why[0]) {
        mp_calib_say(o, "calibrate: decode layer grid not measured: %s", why);
        st = mp_calib_missing(missing, "decode_layers", why, err);
        goto out;
    }
    double spread_sum = 0, spread_max = 0, level_all_cold = -1;
    int n_spread = 0; /* the points of more than one pass: one has no spread */
    for (int i = 0; i < n_pts; i++) {
        const int c = pc[i], f = pfar[i] > 0 ? pfar[i] : 0;
        double *lt = layer + (size_t)i * GRID_SAMPLES_MAX;
        const double cpu_ns = mp_calib_median(cpu + (size_t)i * GRID_SAMPLES_MAX, nsamp[i]);
        const double gpu_ns = mp_calib_median(gpu + (size_t)i * GRID_SAMPLES_MAX, nsamp[i]);
        cJSON *p = mp_calib_point(NULL, 0, lt, nsamp[i]); /* sorts lt */
        if (!p || !cJSON_AddNumberToObject(p, "cold", c) || !cJSON_AddNumberToObject(p, "far", f) ||
            !cJSON_AddBoolToObject(p, "far_on", pfar[i] >= 0) || !cJSON_AddNumberToObject(p, "cpu_ns", round(cpu_ns)) ||
            !cJSON_AddNumberToObject(p, "gpu_ns", round(gpu_ns)) || !cJSON_AddNumberToObject(p, "passes", nsamp[i])) {
            cJSON_Delete(p);
            st = mp_fail(err, MP_ERR_NOMEM, "calibrate: out of memory");
            goto out;
        }
        cJSON_AddItemToArray(pts, p);
        const double med = cJSON_GetObjectItem(p, "median_ns")->valuedouble;
        const double rel = med > 0 ? cJSON_GetObjectItem(p, "spread_ns")->valuedouble / med : 0;
        if (nsamp[i] > 1) {
            spread_sum += rel;
            spread_max = rel > spread_max ? rel : spread_max;
            n_spread++;
        }
        if (c == K && pfar[i] < 0)
            level_all_cold = med;
        char mode[48];
        if (pfar[i] < 0)
            snprintf(mode, sizeof mode, "far routes off");
        else
            snprintf(mode, sizeof mode, split > 1 ? "far routes on, %d/%d far" : "far routes on, %d far", f, split);
        mp_calib_say(o, "calibrate: decode layer, %d of %" PRId64 " routes cold, %s: %.1f us (CPU %.1f, GPU %.1f) per "
                        "layer, spread %.1f %% over %d passes", c, K, mode, med / 1e3, cpu_ns / 1e3, gpu_ns / 1e3,
                     100 * rel, nsamp[i]);
    }
    cJSON_AddItemToObject(grid, "points", pts);
    pts = NULL;
    char stolen[96] = "";
    if (stat0 && mp_cpu_times(NULL, &steal1, &total1) && total1 > total0 && steal1 >= steal0)
        snprintf(stolen, sizeof stolen, "; the hypervisor took %.1f %% of the CPUs' time meanwhile (steal)",
                 100.0 * (double)(steal1 - steal0) / (double)(total1 - total0));
    mp_calib_say(o, "calibrate: decode layer grid: %d points in %.1f s; repetition spread (p75 - p25) %.1f %% of the "
                    "layer time on average, %.1f %% at most (the %d points of more than one pass)%s",
                 n_pts, (double)(mp_now_ns() - t_start) / 1e9, 100 * spread_sum / (n_spread ? n_spread : 1),
                 100 * spread_max, n_spread, stolen);
    const cJSON *hb = cJSON_GetObjectItemCaseSensitive(root, "host_bus");
    if (hb)
        mp_calib_say(o, "calibrate: host memory read by the cores and the bus at once: %.1f + %.1f = %.1f GB/s, the "
                        "best of %.0f probes between the grid's passes (the floor's rate)",
                     cJSON_GetObjectItemCaseSensitive(hb, "cpu_gbs")->valuedouble,
                     cJSON_GetObjectItemCaseSensitive(hb, "bus_gbs")->valuedouble,
                     cJSON_GetObjectItemCaseSensitive(hb, "gbs")->valuedouble,
                     cJSON_GetObjectItemCaseSensitive(hb, "probes")->valuedouble);
    /* the grid's session holds the device's memory: free it before the next */
    mp_session_free(s);
    s = NULL;
    mp_placement_free(&pl);
    const double resident_ns = mp_calib_decode_moe_ns(m, root, 1);
    if (resident_ns >= 0 && level_all_cold >= 0 &&
        (st = hybrid_step(m, o, &nm, level_all_cold, resident_ns, resident, passes,
                          free_bytes > fixed_bytes + MP_EXECUTOR_RESERVE_BYTES
                              ? free_bytes - fixed_bytes - MP_EXECUTOR_RESERVE_BYTES
                              : 0,
                          grid, err)))
        goto out;
    cJSON_AddItemToObject(root, "decode_layers", grid);
    grid = NULL;
    char path_text[1024];
    snprintf(path_text, sizeof path_text,
             "runtime: GPU executor, decode with CUDA graphs and a route source giving every layer `cold` routes "
             "outside its pool (`pool` experts a layer, as many as the device held, the other routes spread over it); "
             "far routes set per point (mp_gpu_set_far_plan); passes interleave the points; after the first, a point "
             "with far units over %.1fx the best of its cold count takes no more; points whose passes spread more "
             "than %.0f %% of their median take more, up to %d (`passes`); a point's pass: `steps` one-row steps "
             "after a 1-token prompt (fewer, at least %d, once they have taken %.0f s); median_ns: their mean wall "
             "time minus the non-MoE curve at their keys, over n_layer; hybrid_step: the all-cold point on the "
             "first layer alone (mp_calib_hybrid_step_ns)",
             GRID_CONTEND_MARGIN, 100 * MP_CALIB_SPREAD_MAX, GRID_SAMPLES_MAX, GRID_MIN_STEPS, GRID_RUN_NS / 1e9);
    if (!cJSON_AddStringToObject(device, "decode_layers_path", path_text))
        st = mp_fail(err, MP_ERR_NOMEM, "calibrate: out of memory");
out:
    cJSON_Delete(grid);
    cJSON_Delete(pts);
    free(plan);
    free(layer);
    free(cpu);
    free(gpu);
    free(logits);
    mp_session_free(s);
    mp_placement_free(&pl);
    return st;
}
