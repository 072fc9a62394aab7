/* simulator/calibrate_runtime.c — what `moeplan calibrate` measures through the runtime's own
 * forward pass (see calibrate.h), so that the costs are what production pays:
 *   non_moe          the time per step outside the MoE experts (the GPU executor with every expert
 *                    resident, CUDA graphs at one row; else the CPU forward pass);
 *   sync             the decode round trip's overhead per hybrid layer (placement layers:1);
 *   decode_layers    the grid the decision model chooses far routes from (runtime/decide.h):
 *                    a one-row step's time per layer with c of its top_k routes cold (a route
 *                    source chooses them), f of those far, far routes on or off;
 *   host_read        the host memory's read bandwidth by the cores (the decode floor).
 */
#include <errno.h>
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "runtime/bench.h"
#include "runtime/gpu.h"
#include "runtime/hooks.h"
#include "runtime/placement.h"
#include "runtime/session.h"
#include "simulator/calibrate_impl.h"

/* ---- non-MoE time per step ---- */

#define NON_MOE_POINT_NS ((int64_t)20 * 1000000000)

static void add_moe_ns(void *user, int64_t layer, const mp_moe_timing *t)
{
    *(int64_t *)user += t->cpu_expert_ns + t->gpu_expert_ns;
}

mp_status mp_calib_gpu_session(const mp_model *m, const char *opt, const char *val, mp_session_params *sp,
                               mp_placement *pl, mp_session **s, mp_error *err)
{
    mp_placement_opts po = {0};
    mp_status pst;
    sp->placement = NULL;
    if (!mp_placement_opts_set(&po, opt, val, &pst, err) || pst ||
        mp_placement_for_model(m, &po, sp->n_ctx, sp->n_batch, pl, err) != MP_OK)
        return mp_error_prefix(err, "placement");
    sp->placement = pl;
    mp_status st = mp_session_new(m, sp, s, err);
    if (st)
        sp->placement = NULL;
    return st;
}


/* The next random token id of a calibration run (one LCG per run, high bits). */
static int32_t random_token(uint64_t *rng, int64_t n_vocab)
{
    *rng = *rng * 6364136223846793005ull + 1442695040888963407ull;
    return (int32_t)((*rng >> 33) % (uint64_t)n_vocab);
}

/* One-row steps as `bench` and production decode run them: back to back, graph-replayed and
 * without hooks. Each repetition resets the session, fills it to position `start` (a 1-token
 * prompt, or steps of up to max_rows random tokens; untimed), then times `steps` one-row steps
 * in one interval: ns[0 .. reps) gets the mean step of each recorded repetition, *mean_keys the
 * keys those steps attended on average. (Timing each step alone, after a reset to the start of
 * the context, measured 3.80 ms where bench's tg128 measured 4.28 on the H200, 2026-11-29:
 * calibrate now times what bench times.) */
static mp_status decode_run(mp_session *s, const mp_model *m, const mp_calib_opts *o, int64_t start, int steps,
                            int max_rows, int32_t *tokens, float *logits, uint64_t *rng, double *ns,
                            double *mean_keys, mp_error *err)
{
    mp_status st;
    mp_session_set_hooks(s, NULL);
    for (int rep = -mp_calib_warmups(o); rep < o->reps; rep++) {
        mp_session_reset(s);
        while (mp_session_n_past(s) < start) {
            const int64_t left = start - mp_session_n_past(s), n = left < max_rows ? left : max_rows;
            for (int64_t i = 0; i < n; i++)
                tokens[i] = random_token(rng, m->hp.n_vocab);
            if ((st = mp_session_eval(s, tokens, n, false, logits, err)))
                return st;
        }
        const int64_t t0 = mp_calib_now_ns();
        for (int i = 0; i < steps; i++) {
            tokens[0] = random_token(rng, m->hp.n_vocab);
            if ((st = mp_session_eval(s, tokens, 1, false, logits, err)))
                return st;
        }
        if (rep >= 0)
            ns[rep] = (double)(mp_calib_now_ns() - t0) / steps;
    }
    *mean_keys = (double)start + (steps + 1) / 2.0; /* steps at positions start .. start + steps - 1 */
    return MP_OK;
}

/* The one-row GPU point: decode steps after a 1-token prompt (positions 1 .. 64, as bench's tg
 * runs them) minus what simulate charges for their experts (decode_moe_ns), and the context
 * term: the same steps from position ~1,984 (or the context's end), (long - short) / (their
 * keys' difference) per key. Adds the point to arr; *context gets {keys, per_key_ns} (NULL when
 * the context is too short to tell). */
#define NON_MOE_SHORT_KEYS 64
static mp_status non_moe_decode(mp_session *s, const mp_model *m, const mp_calib_opts *o, cJSON *arr,
                                double decode_moe_ns, int64_t n_ctx, int max_rows, int32_t *tokens,
                                float *logits, uint64_t *rng, double *ns, cJSON **context, mp_error *err)
{
    double keys_s = 0, keys_l = 0, *long_ns = malloc((size_t)o->reps * sizeof(double));
    mp_status st = long_ns ? MP_OK : mp_fail(err, MP_ERR_NOMEM, "calibrate: out of memory");
    *context = NULL;
    if (!st)
        st = decode_run(s, m, o, 1, NON_MOE_SHORT_KEYS, max_rows, tokens, logits, rng, ns, &keys_s, err);
    const int64_t hi = n_ctx < 2048 ? n_ctx : 2048, lo = hi - NON_MOE_SHORT_KEYS;
    const bool has_long = lo >= 4 * NON_MOE_SHORT_KEYS;
    if (!st && has_long)
        st = decode_run(s, m, o, lo, NON_MOE_SHORT_KEYS, max_rows, tokens, logits, rng, long_ns, &keys_l, err);
    if (st) {
        free(long_ns);
        return st;
    }
    double step_s = 0, per_key = 0;
    for (int i = 0; i < o->reps; i++)
        step_s += ns[i] / o->reps;
    if (has_long) { /* medians of the two positions' wall times (long_ns is scratch) */
        mp_calib_sort(long_ns, o->reps);
        const double long_med = mp_calib_quantile(long_ns, o->reps, 0.5);
        for (int i = 0; i < o->reps; i++)
            long_ns[i] = ns[i];
        mp_calib_sort(long_ns, o->reps);
        per_key = (long_med - mp_calib_quantile(long_ns, o->reps, 0.5)) / (keys_l - keys_s);
        per_key = per_key > 0 ? per_key : 0; /* noise: attention never gets cheaper with more keys */
        *context = cJSON_CreateObject();
        if (!*context || !cJSON_AddNumberToObject(*context, "keys", round(keys_s * 10) / 10) ||
            !cJSON_AddNumberToObject(*context, "per_key_ns", round(per_key * 1000) / 1000)) {
            cJSON_Delete(*context);
            *context = NULL;
            free(long_ns);
            return mp_fail(err, MP_ERR_NOMEM, "calibrate: out of memory");
        }
    }
    for (int i = 0; i < o->reps; i++)
        ns[i] -= decode_moe_ns; /* mp_calib_point keeps the point >= 0 */
    free(long_ns);
    cJSON *p = mp_calib_point("rows", 1, ns, o->reps);
    if (!p)
        return mp_fail(err, MP_ERR_NOMEM, "calibrate: out of memory");
    cJSON_AddItemToArray(arr, p);
    mp_calib_say(o, "calibrate: non-MoE step rows 1 (back-to-back graph-replayed steps, %.0f keys): median %.1f us (mean step %.1f "
                    "us, modelled MoE in it %.1f us); %s %.1f ns per key of context",
                 keys_s, cJSON_GetObjectItem(p, "median_ns")->valuedouble / 1000.0, step_s / 1000.0,
                 decode_moe_ns / 1000.0, has_long ? "measured at ~2,048 keys:" : "context too short to measure:",
                 per_key);
    return MP_OK;
}

mp_status mp_calib_non_moe(const mp_model *m, const mp_calib_opts *o, cJSON *arr, cJSON *device,
                           double decode_moe_ns, cJSON **context, mp_error *err)
{
    *context = NULL;
    const int t = o->threads[o->n_threads - 1];
    const int max_rows = o->rows[o->n_rows - 1];
    int64_t moe_ns = 0;
    mp_hooks hooks = {0};
    hooks.user = &moe_ns;
    hooks.moe_timing = add_moe_ns;
    /* room for a step of every size after some context, so attention sees a few hundred keys */
    int64_t n_ctx = m->hp.n_ctx_train > 0 && m->hp.n_ctx_train < 4096 ? m->hp.n_ctx_train : 4096;
    mp_session_params sp = {.n_ctx = n_ctx, .n_threads = t, .n_batch = max_rows, .hooks = &hooks, .knobs = o->knobs};
    mp_session *s = NULL;
    mp_placement pl = {0};
    int32_t *tokens = malloc((size_t)max_rows * sizeof(int32_t));
    float *logits = malloc((size_t)m->hp.n_vocab * sizeof(float));
    double *ns = malloc((size_t)o->reps * sizeof(double));
    mp_status st = MP_OK;
    if (!tokens || !logits || !ns) {
        st = mp_fail(err, MP_ERR_NOMEM, "calibrate: out of memory for the non-MoE steps");
        goto out;
    }
    /* With a GPU, the non-MoE time is the GPU executor's (every expert resident): a step is run
     * once with the timing hooks (CUDA events around each layer's MoE kernels give their GPU
     * time) and once without (how production runs: CUDA graphs at one row), and the second's
     * wall time minus the first's MoE time is recorded. Without a GPU (or when the model does not
     * fit), the CPU forward pass as before. */
    char why[256] = "";
    bool gpu = mp_gpu_available(why, sizeof why);
    if (gpu) {
        mp_error perr;
        if (mp_calib_gpu_session(m, "--placement", "gpu", &sp, &pl, &s, &perr) != MP_OK) {
            gpu = false;
            mp_calib_say(o, "calibrate: non-MoE on the CPU forward pass: the GPU executor could not "
                         "start (%s)", perr.msg);
        }
    }
    if (!s && (st = mp_session_new(m, &sp, &s, err)))
        goto out;
    n_ctx = mp_session_n_ctx(s);
    uint64_t rng = 3;
    for (int ri = 0; ri < o->n_rows; ri++) {
        const int rows = o->rows[ri];
        if (rows * (gpu ? 2 : 1) > n_ctx) {
            mp_calib_say(o, "calibrate: non-MoE rows %d skipped: the context holds %" PRId64 " tokens", rows, n_ctx);
            continue;
        }
        if (gpu && rows == 1 && decode_moe_ns >= 0) { /* what the cost model charges, and the context term */
            if ((st = non_moe_decode(s, m, o, arr, decode_moe_ns, n_ctx, max_rows, tokens, logits, &rng, ns,
                                     context, err)))
                goto out;
            continue;
        }
        /* a big model's long steps take seconds on the CPU: after 3 recorded repetitions a point
         * stops once it has used NON_MOE_POINT_NS, so the default list fits a 10-minute run */
        int n_rec = 0;
        double step_sum = 0, moe_sum = 0;
        const int64_t point_t0 = mp_calib_now_ns();
        for (int rep = -mp_calib_warmups(o); rep < o->reps; rep++) {
            if (n_rec >= 3 && mp_calib_now_ns() - point_t0 > NON_MOE_POINT_NS)
                break;
            if (mp_session_n_past(s) + rows * (gpu ? 2 : 1) > n_ctx)
                mp_session_reset(s);
            for (int i = 0; i < rows; i++)
                tokens[i] = random_token(&rng, m->hp.n_vocab);
            moe_ns = 0;
            if (gpu) { /* the MoE kernels' GPU time, from a step with the timing hooks */
                mp_session_set_hooks(s, &hooks);
                st = mp_session_eval(s, tokens, rows, false, logits, err);
                mp_session_set_hooks(s, NULL);
                if (st)
                    goto out;
            }
            const int64_t t0 = mp_calib_now_ns();
            if ((st = mp_session_eval(s, tokens, rows, false, logits, err)))
                goto out;
            const int64_t step_ns = mp_calib_now_ns() - t0;
            if (rep >= 0) { /* mp_calib_point keeps the point >= 0 if noise makes this negative */
                ns[n_rec++] = (double)(step_ns - moe_ns);
                step_sum += (double)step_ns;
                moe_sum += (double)moe_ns;
            }
        }
        cJSON *p = mp_calib_point("rows", rows, ns, n_rec);
        if (!p) {
            st = mp_fail(err, MP_ERR_NOMEM, "calibrate: out of memory");
            goto out;
        }
        cJSON_AddItemToArray(arr, p);
        /* the parts, so that a cost model's all-resident step can be checked against the measured
         * one: the MoE time here is the hooked (enqueued, event-timed) step's */
        mp_calib_say(o, "calibrate: non-MoE step threads %d rows %d: median %.1f us (%d reps; mean step %.1f us, "
                        "MoE in it %.1f us)", t, rows, cJSON_GetObjectItem(p, "median_ns")->valuedouble / 1000.0,
                     n_rec, n_rec ? step_sum / n_rec / 1000.0 : 0.0, n_rec ? moe_sum / n_rec / 1000.0 : 0.0);
    }
    if (cJSON_GetArraySize(arr) == 0) {
        st = mp_fail(err, MP_ERR_ARG, "calibrate: --rows: every count exceeds the model's context of %" PRId64 " tokens",
                     n_ctx);
        goto out;
    }
    if (!cJSON_AddNumberToObject(device, "non_moe_threads", t) ||
        !cJSON_AddStringToObject(device, "non_moe_path",
                                 !gpu ? "cpu forward pass (runtime/session.h)"
                                 : decode_moe_ns >= 0
                                     ? "gpu executor, every expert resident; 1 row: the CUDA-graph step minus "
                                       "every layer's gpu_expert concurrent time at top_k (what simulate "
                                       "charges); more rows: minus the MoE kernels' time from CUDA events"
                                     : "gpu executor, every expert resident (CUDA graphs at 1 row); MoE "
                                       "kernel time from CUDA events subtracted"))
        st = mp_fail(err, MP_ERR_NOMEM, "calibrate: out of memory");
out:
    mp_session_free(s);
    mp_placement_free(&pl);
    free(tokens);
    free(logits);
    free(ns);
    return st;
}

/* ---- decode steps through the runtime: the round trip, the CPU experts ---- */

/* Decode statistics under `--placement spec`: per repetition (after the warm-ups), `steps`
 * one-row steps of random tokens; *per_rep gets their mp_gpu_stats (o->reps of them, the caller
 * frees) and ns room for one number per repetition. With measure, the round trip's gaps are
 * timed (mp_gpu_set_measure). A session that cannot start is not an error: *per_rep stays NULL
 * and why says what failed. */
#define DECODE_BATCH 8     /* below MP_GPU_COPY_MIN_ROWS: no staging buffers, so no far routes */
#define DECODE_BATCH_FAR 64 /* with them: the far routes production decode runs */
static mp_status decode_stats(const mp_model *m, const mp_calib_opts *o, const char *spec, int steps, bool measure,
                              int64_t n_batch, mp_gpu_stats **per_rep_out, double **ns, mp_error *why,
                              mp_error *err)
{
    const int64_t n_ctx = 256;
    mp_placement pl = {0};
    mp_session *s = NULL;
    mp_status st = MP_OK;
    float *logits = malloc((size_t)m->hp.n_vocab * sizeof(float));
    mp_gpu_stats *per_rep = calloc((size_t)o->reps, sizeof *per_rep);
    mp_session_params sp = {.n_ctx = n_ctx, .n_threads = o->threads[o->n_threads - 1], .n_batch = n_batch,
                            .knobs = o->knobs};
    *per_rep_out = NULL;
    *ns = malloc((size_t)o->reps * sizeof(double));
    if (!logits || !per_rep || !*ns) {
        st = mp_fail(err, MP_ERR_NOMEM, "calibrate: out of memory");
        goto out;
    }
    if (mp_calib_gpu_session(m, "--placement", spec, &sp, &pl, &s, why) != MP_OK)
        goto out;
    mp_gpu *g = mp_session_gpu(s);
    mp_gpu_set_measure(g, measure);
    uint64_t rng = 5;
    for (int rep = -mp_calib_warmups(o); rep < o->reps; rep++) {
        if (mp_session_n_past(s) + steps > n_ctx)
            mp_session_reset(s);
        mp_gpu_stats_reset(g);
        for (int i = 0; i < steps; i++) {
            int32_t tok = random_token(&rng, m->hp.n_vocab);
            if ((st = mp_session_eval(s, &tok, 1, false, logits, err)))
                goto out;
        }
        if (rep >= 0)
            mp_gpu_get_stats(g, &per_rep[rep]);
    }
    *per_rep_out = per_rep;
    per_rep = NULL;
out:
    mp_session_free(s);
    mp_placement_free(&pl);
    free(logits);
    free(per_rep);
    return st;
}

mp_status mp_calib_runtime_sync(const mp_model *m, const mp_calib_opts *o, cJSON *root, cJSON *device,
                                mp_error *err)
{
    char why[256];
    if (!mp_gpu_available(why, sizeof why) || !cJSON_GetObjectItemCaseSensitive(root, "sync"))
        return MP_OK;
    enum { STEPS = 8 }; /* decode steps per repetition */
    mp_gpu_stats *gs = NULL;
    double *ns = NULL;
    mp_error perr;
    mp_status st = decode_stats(m, o, "layers:1", STEPS, true, DECODE_BATCH, &gs, &ns, &perr, err);
    if (st)
        goto out;
    if (!gs) {
        mp_calib_say(o, "calibrate: the runtime's round trip was not measured (%s); sync is the "
                        "microbenchmark's", perr.msg);
        goto out;
    }
    for (int rep = 0; rep < o->reps; rep++) {
        if (gs[rep].rt_measured < 1) {
            mp_calib_say(o, "calibrate: the runtime's round trip was not measured (no hybrid layer step timed); "
                            "sync is the microbenchmark's");
            goto out;
        }
        ns[rep] = (double)gs[rep].rt_overhead_ns / (double)gs[rep].rt_measured;
    }
    cJSON *p = mp_calib_point(NULL, 0, ns, o->reps);
    cJSON *micro = cJSON_DetachItemFromObjectCaseSensitive(root, "sync");
    if (!p || !micro) {
        cJSON_Delete(p);
        if (micro)
            cJSON_AddItemToObject(root, "sync", micro);
        st = mp_fail(err, MP_ERR_NOMEM, "calibrate: out of memory");
        goto out;
    }
    mp_calib_say(o, "calibrate: decode round trip in the runtime (layers:1, %d steps x %d reps): overhead %.1f us "
                    "per hybrid layer beyond its copies and CPU experts (microbenchmark: %.1f us)",
                 STEPS, o->reps, cJSON_GetObjectItem(p, "median_ns")->valuedouble / 1000.0,
                 cJSON_GetObjectItem(micro, "median_ns")->valuedouble / 1000.0);
    cJSON_AddItemToObject(device, "sync_microbenchmark", micro);
    cJSON_AddItemToObject(root, "sync", p);
    if (!cJSON_AddStringToObject(device, "sync_path",
                                 "runtime: GPU executor, placement layers:1, decode with CUDA graphs, mean "
                                 "round-trip overhead per hybrid layer step (mp_gpu_stats rt_overhead_ns)"))
        st = mp_fail(err, MP_ERR_NOMEM, "calibrate: out of memory");
out:
    free(gs);
    free(ns);
    return st;
}

/* ---- the decode layer grid ---- */

/* Routes with exactly `cold` of top_k on experts outside the pool in every layer: the pool holds
 * experts [0, resident) of each layer; each row draws top_k - cold distinct ids below `resident`
 * and `cold` at or above it, in random slots (the kernels run the first far routes in slot
 * order), with random weights summing to 1. */
typedef struct grid_routes {
    uint64_t rng;
    int64_t n_expert, resident;
    int cold;
} grid_routes;

static uint64_t grid_next(grid_routes *g)
{
    g->rng = g->rng * 6364136223846793005ull + 1442695040888963407ull;
    return g->rng >> 33;
}

static int grid_route(void *user, int64_t layer, int64_t n_rows, int64_t top_k, int32_t *ids, float *w)
{
    (void)layer;
    grid_routes *g = user;
    for (int64_t r = 0; r < n_rows; r++) {
        int32_t *row = ids + r * top_k;
        for (int64_t k = 0; k < top_k; k++) {
            const bool cold = k < g->cold;
            const int64_t lo = cold ? g->resident : 0, span = cold ? g->n_expert - g->resident : g->resident;
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

/* The non-MoE time of a one-row step at `keys` keys of context, from root's non_moe curve and its
 * context term (what calibrate measured before): < 0 when root has no one-row point. */
static double non_moe_at(const cJSON *root, double keys)
{
    const cJSON *p0 = cJSON_GetArrayItem(cJSON_GetObjectItemCaseSensitive(root, "non_moe"), 0);
    const cJSON *rows = cJSON_GetObjectItemCaseSensitive(p0, "rows"), *med = cJSON_GetObjectItemCaseSensitive(p0, "median_ns");
    if (!cJSON_IsNumber(rows) || rows->valuedouble != 1 || !cJSON_IsNumber(med))
        return -1;
    const cJSON *ctx = cJSON_GetObjectItemCaseSensitive(root, "non_moe_context");
    const cJSON *k0 = cJSON_GetObjectItemCaseSensitive(ctx, "keys"), *pk = cJSON_GetObjectItemCaseSensitive(ctx, "per_key_ns");
    double ns = med->valuedouble;
    if (cJSON_IsNumber(k0) && cJSON_IsNumber(pk))
        ns += pk->valuedouble * (keys - k0->valuedouble);
    return ns > 0 ? ns : 0;
}

/* One repetition of a grid point: from the start of the context, WARM one-row steps untimed (the
 * first captures the decode graph anew when the far routes changed), then STEPS timed; the layer
 * time (their mean wall time minus the non-MoE time at their keys, over n_layer), the CPU and GPU
 * side per layer step into *layer, *cpu, *gpu. *ok false, with why, when the executor did not run
 * the routes as asked (the point would describe another step). */
enum { GRID_WARM = 2, GRID_STEPS = 8 };
static mp_status grid_rep(mp_session *s, const mp_model *m, const cJSON *root, int cold, int far, float *logits,
                          double *layer, double *cpu, double *gpu, bool *ok, char *why, size_t why_cap, mp_error *err)
{
    mp_gpu *g = mp_session_gpu(s);
    const int64_t L = m->hp.n_layer, K = m->hp.n_expert_used;
    mp_status st = MP_OK;
    int32_t tok = 7;
    mp_session_reset(s);
    int64_t t0 = 0;
    for (int i = 0; i < GRID_WARM + GRID_STEPS && !st; i++) {
        if (i == GRID_WARM) {
            mp_gpu_stats_reset(g);
            t0 = mp_calib_now_ns();
        }
        tok = (int32_t)((tok * 7919 + 13) % m->hp.n_vocab);
        st = mp_session_eval(s, &tok, 1, false, logits, err);
    }
    if (st)
        return st;
    const double step_ns = (double)(mp_calib_now_ns() - t0) / GRID_STEPS;
    mp_gpu_stats gs;
    mp_gpu_get_stats(g, &gs);
    const int64_t lsteps = gs.hybrid_layers;
    *ok = lsteps == (int64_t)GRID_STEPS * L && gs.routes_far == lsteps * far && gs.routes_cpu == lsteps * (cold - far) &&
          gs.routes_gpu == lsteps * (K - cold);
    if (!*ok) {
        snprintf(why, why_cap, "%" PRId64 " hybrid layer steps with %" PRId64 " GPU, %" PRId64 " far and %" PRId64
                 " CPU routes, expected %" PRId64 " with %" PRId64 ", %d and %" PRId64 " each", lsteps, gs.routes_gpu,
                 gs.routes_far, gs.routes_cpu, (int64_t)GRID_STEPS * L, K - cold, far, (int64_t)(cold - far));
        return MP_OK;
    }
    /* the timed steps sit at positions GRID_WARM .. GRID_WARM + GRID_STEPS - 1 */
    const double nm = non_moe_at(root, GRID_WARM + (GRID_STEPS + 1) / 2.0);
    *layer = (step_ns - (nm > 0 ? nm : 0)) / (double)L;
    *cpu = (double)gs.cpu_expert_ns / (double)lsteps;
    *gpu = gs.rt_measured ? (double)gs.rt_gpu_ns / (double)gs.rt_measured : 0;
    return MP_OK;
}

static double median_of(double *x, int n)
{
    mp_calib_sort(x, n);
    return mp_calib_quantile(x, n, 0.5);
}

/* The far plan of a grid point on every layer: far routes off (f < 0), or on with f of c cold. */
static void grid_plan(mp_far_layer *plan, int64_t L, int c, int f)
{
    for (int64_t il = 0; il < L; il++) {
        memset(&plan[il], 0, sizeof plan[il]);
        plan[il].on = f >= 0;
        plan[il].table[c] = (uint8_t)(f > 0 ? f : 0);
    }
}

mp_status mp_calib_decode_layers(const mp_model *m, const mp_calib_opts *o, cJSON *root, cJSON *device,
                                 cJSON *missing, mp_error *err)
{
    const int64_t L = m->hp.n_layer, E = m->hp.n_expert, K = m->hp.n_expert_used;
    const int threads = o->threads[o->n_threads - 1];
    /* the pool holds `resident` experts of every layer: enough for K - cold hits down to cold_min */
    const int64_t resident = K <= E - K ? K : E - K;
    const int cold_min = (int)(K - resident);
    char path[] = "/tmp/moeplan-calib-XXXXXX";
    char why[320] = "";
    const int fd = resident > 0 ? mkstemp(path) : -1;
    FILE *pf = fd >= 0 ? fdopen(fd, "w") : NULL;
    if (resident > 0 && !pf) {
        if (fd >= 0)
            close(fd), unlink(path);
        snprintf(why, sizeof why, "temporary placement file: %s", strerror(errno));
        return mp_calib_missing(missing, "decode_layers", why, err);
    }
    for (int64_t il = 0; pf && il < L; il++)
        fprintf(pf, "%" PRId64 ": 0-%" PRId64 "\n", il, resident - 1);
    if (pf && fclose(pf)) {
        unlink(path);
        snprintf(why, sizeof why, "temporary placement file: %s", strerror(errno));
        return mp_calib_missing(missing, "decode_layers", why, err);
    }
    grid_routes routes = {.rng = 17, .n_expert = E, .resident = resident, .cold = cold_min};
    mp_route_source src = {&routes, grid_route};
    /* a batch that gives the executor its staging buffers, and so its far routes */
    mp_session_params sp = {.n_ctx = 256, .n_threads = threads, .n_batch = DECODE_BATCH_FAR, .route_src = &src,
                            .knobs = o->knobs};
    mp_placement pl = {0};
    mp_session *s = NULL;
    mp_error perr;
    mp_status st = MP_OK;
    const int64_t t_start = mp_calib_now_ns();
    if (resident > 0 ? mp_calib_gpu_session(m, "--placement-file", path, &sp, &pl, &s, &perr)
                     : mp_calib_gpu_session(m, "--placement", "cpu", &sp, &pl, &s, &perr)) {
        if (resident > 0)
            unlink(path);
        snprintf(why, sizeof why, "the GPU executor did not start: %.280s", perr.msg);
        return mp_calib_missing(missing, "decode_layers", why, err);
    }
    if (resident > 0)
        unlink(path);
    mp_gpu *g = mp_session_gpu(s);
    mp_gpu_set_measure(g, true);
    const int far_max = mp_gpu_far_max(g) < (int)K ? mp_gpu_far_max(g) : (int)K;
    /* the points: (cold c, far f) for c = cold_min .. K, f = -1 (off) .. min(c, far_max) */
    int n_pts = 0, pc[(MP_DECIDE_MAX_K + 1) * (MP_DECIDE_MAX_K + 2)], pfar[(MP_DECIDE_MAX_K + 1) * (MP_DECIDE_MAX_K + 2)];
    for (int c = cold_min; c <= K; c++)
        for (int f = -1; f <= (c < far_max ? c : far_max); f++)
            pc[n_pts] = c, pfar[n_pts++] = f;
    mp_calib_say(o, "calibrate: decode layer grid: %d points (cold routes %d..%" PRId64 " of top-%" PRId64 ", far "
                    "routes 0..%d on and off), %d passes over them of %d timed steps each (passes interleave the "
                    "points, so that the host's drift spreads over all), %" PRId64 " resident experts a layer",
                 n_pts, cold_min, K, K, far_max, o->reps, GRID_STEPS, resident);
    if (far_max < 1)
        mp_calib_say(o, "calibrate: decode layer grid: far routes not measured: the executor has none (no "
                        "page-locked host copy of the experts)");
    cJSON *grid = cJSON_CreateObject(), *pts = cJSON_CreateArray();
    mp_far_layer *plan = calloc((size_t)L, sizeof *plan);
    double *layer = malloc((size_t)n_pts * (size_t)o->reps * sizeof(double));
    double *cpu = malloc((size_t)n_pts * (size_t)o->reps * sizeof(double));
    double *gpu = malloc((size_t)n_pts * (size_t)o->reps * sizeof(double));
    float *logits = malloc((size_t)m->hp.n_vocab * sizeof(float));
    char quant[16];
    mp_model_expert_quant(&m->layers[0], quant);
    if (!grid || !pts || !plan || !layer || !cpu || !gpu || !logits || !cJSON_AddStringToObject(grid, "quant", quant) ||
        !cJSON_AddNumberToObject(grid, "n_embd", (double)m->hp.n_embd) ||
        !cJSON_AddNumberToObject(grid, "n_ff", (double)m->hp.n_ff_exp) ||
        !cJSON_AddNumberToObject(grid, "n_expert", (double)E) || !cJSON_AddNumberToObject(grid, "top_k", (double)K) ||
        !cJSON_AddNumberToObject(grid, "far_max", far_max > 0 ? far_max : 0) ||
        !cJSON_AddNumberToObject(grid, "threads", threads) ||
        !cJSON_AddNumberToObject(grid, "expert_bytes", (double)mp_model_expert_bytes(m, 0))) {
        st = mp_fail(err, MP_ERR_NOMEM, "calibrate: out of memory");
        goto out;
    }
    /* pass -1 warms every point up once (graph captures, the host copy's pages); it is not kept */
    for (int pass = -1; pass < o->reps && !why[0]; pass++) {
        for (int i = 0; i < n_pts && !why[0]; i++) {
            routes.cold = pc[i];
            grid_plan(plan, L, pc[i], pfar[i]);
            if (!mp_gpu_set_far_plan(g, plan)) {
                snprintf(why, sizeof why, "the executor refused far routes on every layer");
                break;
            }
            double lt = 0, ct = 0, gt = 0;
            bool ok = true;
            if ((st = grid_rep(s, m, root, pc[i], pfar[i] > 0 ? pfar[i] : 0, logits, &lt, &ct, &gt, &ok, why, sizeof why,
                               err)))
                goto out;
            if (!ok || pass < 0)
                continue;
            layer[(size_t)i * o->reps + pass] = lt;
            cpu[(size_t)i * o->reps + pass] = ct;
            gpu[(size_t)i * o->reps + pass] = gt;
        }
        if (!why[0] && pass >= 0) {
            const double elapsed = (double)(mp_calib_now_ns() - t_start) / 1e9;
            mp_calib_say(o, "calibrate: decode layer grid: pass %d of %d done [%.0f s, %.0f s left]", pass + 1, o->reps,
                         elapsed, elapsed / (pass + 2) * (o->reps - pass - 1));
        }
    }
    if (why[0]) {
        mp_calib_say(o, "calibrate: decode layer grid not measured: %s", why);
        st = mp_calib_missing(missing, "decode_layers", why, err);
        goto out;
    }
    double spread_sum = 0, spread_max = 0;
    for (int i = 0; i < n_pts; i++) {
        const int c = pc[i], f = pfar[i] > 0 ? pfar[i] : 0;
        double *lt = layer + (size_t)i * o->reps;
        const double cpu_ns = median_of(cpu + (size_t)i * o->reps, o->reps);
        const double gpu_ns = median_of(gpu + (size_t)i * o->reps, o->reps);
        cJSON *p = mp_calib_point(NULL, 0, lt, o->reps); /* sorts lt */
        if (!p || !cJSON_AddNumberToObject(p, "cold", c) || !cJSON_AddNumberToObject(p, "far", f) ||
            !cJSON_AddBoolToObject(p, "far_on", pfar[i] >= 0) || !cJSON_AddNumberToObject(p, "cpu_ns", round(cpu_ns)) ||
            !cJSON_AddNumberToObject(p, "gpu_ns", round(gpu_ns))) {
            cJSON_Delete(p);
            st = mp_fail(err, MP_ERR_NOMEM, "calibrate: out of memory");
            goto out;
        }
        cJSON_AddItemToArray(pts, p);
        const double med = cJSON_GetObjectItem(p, "median_ns")->valuedouble;
        const double rel = med > 0 ? cJSON_GetObjectItem(p, "spread_ns")->valuedouble / med : 0;
        spread_sum += rel;
        spread_max = rel > spread_max ? rel : spread_max;
        char mode[48];
        if (pfar[i] < 0)
            snprintf(mode, sizeof mode, "far routes off");
        else
            snprintf(mode, sizeof mode, "far routes on, %d far", f);
        mp_calib_say(o, "calibrate: decode layer, %d of %" PRId64 " routes cold, %s: %.1f us (CPU %.1f, GPU %.1f) per "
                        "layer, spread %.1f %%", c, K, mode, med / 1e3, cpu_ns / 1e3, gpu_ns / 1e3, 100 * rel);
    }
    cJSON_AddItemToObject(grid, "points", pts);
    pts = NULL;
    cJSON_AddItemToObject(root, "decode_layers", grid);
    grid = NULL;
    mp_calib_say(o, "calibrate: decode layer grid: %d points in %.1f s; repetition spread (p75 - p25) %.1f %% of the "
                    "layer time on average, %.1f %% at most", n_pts, (double)(mp_calib_now_ns() - t_start) / 1e9,
                 100 * spread_sum / (n_pts ? n_pts : 1), 100 * spread_max);
    if (!cJSON_AddStringToObject(device, "decode_layers_path",
                                 "runtime: GPU executor, decode with CUDA graphs and a route source giving every layer "
                                 "`cold` routes outside the pool; far routes set per point (mp_gpu_set_far_plan); "
                                 "passes interleave the points; median_ns: step wall time minus the non-MoE curve's "
                                 "one-row time, over n_layer"))
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

/* ---- the host's read bandwidth ---- */

mp_status mp_calib_host_read(const mp_calib_opts *o, cJSON *root, mp_error *err)
{
    enum { ROUNDS = 3 };
    const int threads = o->threads[o->n_threads - 1];
    const size_t bytes = o->quick ? (size_t)256 << 20 : (size_t)1 << 30; /* far past any LLC */
    double gbs[ROUNDS], lo = 0, hi = 0;
    for (int r = 0; r < ROUNDS; r++) {
        gbs[r] = mp_bench_host_read_gbs(bytes, threads, 2);
        lo = r == 0 || gbs[r] < lo ? gbs[r] : lo;
        hi = gbs[r] > hi ? gbs[r] : hi;
    }
    if (!(hi > 0))
        return mp_fail(err, MP_ERR_NOMEM, "calibrate: host read bandwidth: no memory for a %zu-byte buffer or no "
                       "%d threads", bytes, threads);
    /* the best round: the floor it gives must not be above what the host can do */
    cJSON *p = cJSON_CreateObject();
    if (!p || !cJSON_AddNumberToObject(p, "gbs", round(hi * 100) / 100) ||
        !cJSON_AddNumberToObject(p, "spread_gbs", round((hi - lo) * 100) / 100) ||
        !cJSON_AddNumberToObject(p, "threads", threads) || !cJSON_AddItemToObject(root, "host_read", p)) {
        cJSON_Delete(p);
        return mp_fail(err, MP_ERR_NOMEM, "calibrate: out of memory");
    }
    mp_calib_say(o, "calibrate: host read bandwidth (%d threads, %zu MiB): %.1f GB/s, best of %d rounds (lowest %.1f)",
                 threads, bytes >> 20, hi, ROUNDS, lo);
    return MP_OK;
}
