/* simulator/calibrate_runtime.c — what `moeplan calibrate` measures through the runtime's own
 * forward pass (see calibrate.h), so that the costs are what production pays:
 *   non_moe          the time per step outside the MoE experts (the GPU executor with every expert
 *                    resident, CUDA graphs at one row; else the CPU forward pass);
 *   sync             the decode round trip's overhead per hybrid layer (placement layers:1);
 *   cpu_decode_layer the CPU experts of one decode layer step, every layer's experts in host
 *                    memory (placement cpu): top_k cold experts, as production streams them;
 *   far_decode_layer the same step's CPU experts while the GPU runs the executor's far routes
 *                    of it (the CPU's share of the host memory with the bus's readers beside it);
 *   hybrid_layer     the fixed cost of a layer that holds an expert off the GPU.
 */
#include <errno.h>
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

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
    mp_session_params sp = {.n_ctx = n_ctx, .n_threads = t, .n_batch = max_rows, .hooks = &hooks};
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
                              int64_t n_batch, mp_gpu_stats **per_rep_out, double **ns, int *far, mp_error *why,
                              mp_error *err)
{
    const int64_t n_ctx = 256;
    mp_placement pl = {0};
    mp_session *s = NULL;
    mp_status st = MP_OK;
    float *logits = malloc((size_t)m->hp.n_vocab * sizeof(float));
    mp_gpu_stats *per_rep = calloc((size_t)o->reps, sizeof *per_rep);
    mp_session_params sp = {.n_ctx = n_ctx, .n_threads = o->threads[o->n_threads - 1], .n_batch = n_batch};
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
    if (far)
        *far = mp_gpu_far(g);
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
    mp_status st = decode_stats(m, o, "layers:1", STEPS, true, DECODE_BATCH, &gs, &ns, NULL, &perr, err);
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

/* root[key] = the point of a decode layer step's measurements ns (o->reps of them) with its experts,
 * far routes (far > 0 only) and threads, and device[key + "_path"] = path; the point (owned by
 * root), or NULL when out of memory. */
static cJSON *add_layer_point(cJSON *root, cJSON *device, const char *key, int64_t experts, int far,
                              const mp_calib_opts *o, double *ns, const char *path)
{
    cJSON *p = mp_calib_point("experts", (double)experts, ns, o->reps);
    if (!p || (far > 0 && !cJSON_AddNumberToObject(p, "far", far)) ||
        !cJSON_AddNumberToObject(p, "threads", o->threads[o->n_threads - 1]) || !cJSON_AddItemToObject(root, key, p)) {
        cJSON_Delete(p); /* not owned by root */
        return NULL;
    }
    char path_key[64];
    snprintf(path_key, sizeof path_key, "%s_path", key);
    return cJSON_AddStringToObject(device, path_key, path) ? p : NULL;
}

/* The concurrent curve's time for k experts of the first CPU entry of the model's kind (-1: none). */
static double micro_concurrent_ns(const cJSON *root, int64_t k)
{
    const cJSON *e = cJSON_GetArrayItem(cJSON_GetObjectItemCaseSensitive(root, "cpu_expert"), 0);
    const cJSON *p;
    cJSON_ArrayForEach(p, cJSON_GetObjectItemCaseSensitive(e, "concurrent")) {
        const cJSON *x = cJSON_GetObjectItemCaseSensitive(p, "experts");
        const cJSON *y = cJSON_GetObjectItemCaseSensitive(p, "median_ns");
        if (cJSON_IsNumber(x) && cJSON_IsNumber(y) && x->valuedouble == (double)k)
            return y->valuedouble;
    }
    return -1;
}

mp_status mp_calib_cpu_decode_layer(const mp_model *m, const mp_calib_opts *o, cJSON *root, cJSON *device,
                                    mp_error *err)
{
    char why[256];
    if (!mp_gpu_available(why, sizeof why))
        return MP_OK;
    enum { STEPS = 4 }; /* decode steps per repetition: n_layer layer steps each */
    const int64_t K = m->hp.n_expert_used;
    mp_gpu_stats *gs = NULL;
    double *ns = NULL;
    mp_error perr;
    mp_status st = decode_stats(m, o, "cpu", STEPS, false, DECODE_BATCH, &gs, &ns, NULL, &perr, err);
    if (st)
        goto out;
    if (!gs) {
        mp_calib_say(o, "calibrate: cpu_decode_layer not measured (%s)", perr.msg);
        goto out;
    }
    for (int rep = 0; rep < o->reps; rep++) {
        /* every route of every layer step on the CPU, or the point would not be top_k experts */
        if (gs[rep].hybrid_layers < 1 || gs[rep].routes_cpu != gs[rep].hybrid_layers * K) {
            mp_calib_say(o, "calibrate: cpu_decode_layer not measured (%" PRId64 " CPU routes in %" PRId64
                            " layer steps, expected %" PRId64 " each)", gs[rep].routes_cpu,
                         gs[rep].hybrid_layers, K);
            goto out;
        }
        ns[rep] = (double)gs[rep].cpu_expert_ns / (double)gs[rep].hybrid_layers;
    }
    cJSON *p = add_layer_point(root, device, "cpu_decode_layer", K, 0, o, ns,
                               "runtime: GPU executor, placement cpu (every expert in host memory), decode "
                               "with CUDA graphs, mean CPU expert time per layer step (mp_gpu_stats "
                               "cpu_expert_ns / hybrid_layers)");
    if (!p) {
        st = mp_fail(err, MP_ERR_NOMEM, "calibrate: out of memory");
        goto out;
    }
    const double micro = micro_concurrent_ns(root, K);
    mp_calib_say(o, "calibrate: CPU experts of a decode layer in the runtime (placement cpu, %" PRId64
                    " experts, %d steps x %d reps): median %.1f us (microbenchmark: %.1f us)",
                 K, STEPS, o->reps, cJSON_GetObjectItem(p, "median_ns")->valuedouble / 1000.0,
                 micro >= 0 ? micro / 1000.0 : -1.0);
out:
    free(gs);
    free(ns);
    return st;
}

/* ---- far routes: the CPU experts of a decode layer step beside the GPU's far routes ---- */

mp_status mp_calib_far_decode_layer(const mp_model *m, const mp_calib_opts *o, cJSON *root, cJSON *device,
                                    mp_error *err)
{
    char why[256];
    if (!mp_gpu_available(why, sizeof why))
        return MP_OK;
    enum { STEPS = 4 };
    const int64_t K = m->hp.n_expert_used;
    mp_gpu_stats *gs = NULL;
    double *ns = NULL;
    int far = 0;
    mp_error perr;
    mp_status st = decode_stats(m, o, "cpu", STEPS, true, DECODE_BATCH_FAR, &gs, &ns, &far, &perr, err);
    if (st)
        goto out;
    if (!gs || far < 1) {
        mp_calib_say(o, "calibrate: far_decode_layer not measured (%s)",
                     !gs ? perr.msg : "the executor runs no far routes: MP_GPU_FAR=0, or no page-locked host copy");
        goto out;
    }
    double overhead = 0;
    for (int rep = 0; rep < o->reps; rep++) {
        /* every layer step all-cold: far routes `far` of K, the rest on the CPU */
        if (gs[rep].hybrid_layers < 1 || gs[rep].routes_far != gs[rep].hybrid_layers * far ||
            gs[rep].routes_cpu != gs[rep].hybrid_layers * (K - far)) {
            mp_calib_say(o, "calibrate: far_decode_layer not measured (%" PRId64 " far and %" PRId64 " CPU routes in %"
                            PRId64 " layer steps, expected %d and %" PRId64 " each)", gs[rep].routes_far,
                         gs[rep].routes_cpu, gs[rep].hybrid_layers, far, K - far);
            goto out;
        }
        ns[rep] = (double)gs[rep].cpu_expert_ns / (double)gs[rep].hybrid_layers;
        overhead += gs[rep].rt_measured ? (double)gs[rep].rt_overhead_ns / (double)gs[rep].rt_measured / o->reps : 0;
    }
    cJSON *p = add_layer_point(root, device, "far_decode_layer", K, far, o, ns,
                               "runtime: GPU executor, placement cpu, decode with CUDA graphs and the executor's "
                               "far routes, mean CPU expert time per layer step (mp_gpu_stats cpu_expert_ns / "
                               "hybrid_layers) while the GPU reads the far routes' weights");
    if (!p) {
        st = mp_fail(err, MP_ERR_NOMEM, "calibrate: out of memory");
        goto out;
    }
    /* the round trip's overhead stays that of a CPU-bound step when the far routes finish first */
    mp_calib_say(o, "calibrate: CPU experts of a decode layer beside %d far routes (placement cpu, %" PRId64
                    " CPU experts, %d steps x %d reps): median %.1f us; round-trip overhead %.1f us",
                 far, K - far, STEPS, o->reps, cJSON_GetObjectItem(p, "median_ns")->valuedouble / 1000.0,
                 overhead / 1000.0);
out:
    free(gs);
    free(ns);
    return st;
}

/* ---- the fixed cost of a hybrid layer ---- */

/* Routes that never reach the last expert: random distinct ids below n_expert - 1, random weights
 * summing to 1. */
typedef struct avoid_last {
    uint64_t rng;
    int64_t n_expert;
} avoid_last;

static int avoid_last_route(void *user, int64_t layer, int64_t n_rows, int64_t top_k, int32_t *ids, float *w)
{
    (void)layer;
    avoid_last *a = user;
    for (int64_t r = 0; r < n_rows; r++) {
        float sum = 0.0f;
        for (int64_t k = 0; k < top_k; k++) {
            int32_t id;
            bool dup;
            do {
                a->rng = a->rng * 6364136223846793005ull + 1442695040888963407ull;
                id = (int32_t)((a->rng >> 33) % (uint64_t)(a->n_expert - 1));
                dup = false;
                for (int64_t j = 0; j < k; j++)
                    dup |= ids[r * top_k + j] == id;
            } while (dup);
            ids[r * top_k + k] = id;
            w[r * top_k + k] = 0.5f + (float)((a->rng >> 20) & 0xff) / 256.0f;
            sum += w[r * top_k + k];
        }
        for (int64_t k = 0; k < top_k; k++)
            w[r * top_k + k] /= sum;
    }
    return 0;
}

/* Decode wall time per step (ns[0 .. reps)) under placement option opt = val, with routes that
 * avoid the last expert. */
static mp_status time_decode(const mp_model *m, const mp_calib_opts *o, const char *opt, const char *val,
                             double *ns, mp_error *err)
{
    enum { STEPS = 16 };
    avoid_last routes = {.rng = 11, .n_expert = m->hp.n_expert};
    mp_route_source src = {&routes, avoid_last_route};
    mp_session_params sp = {.n_ctx = 256, .n_threads = o->threads[o->n_threads - 1], .n_batch = 8,
                            .route_src = &src};
    mp_placement pl = {0};
    mp_session *s = NULL;
    float *logits = malloc((size_t)m->hp.n_vocab * sizeof(float));
    mp_status st = logits ? mp_calib_gpu_session(m, opt, val, &sp, &pl, &s, err)
                          : mp_fail(err, MP_ERR_NOMEM, "calibrate: out of memory");
    int32_t tok = 1;
    for (int rep = -mp_calib_warmups(o) - 1; !st && rep < o->reps; rep++) { /* one more warm-up: graph capture */
        if (mp_session_n_past(s) + STEPS > sp.n_ctx)
            mp_session_reset(s);
        const int64_t t0 = mp_calib_now_ns();
        for (int i = 0; i < STEPS && !st; i++) {
            tok = (int32_t)((tok * 7919 + 13) % m->hp.n_vocab);
            st = mp_session_eval(s, &tok, 1, false, logits, err);
        }
        if (rep >= 0)
            ns[rep] = (double)(mp_calib_now_ns() - t0) / STEPS;
    }
    mp_session_free(s);
    mp_placement_free(&pl);
    free(logits);
    return st;
}

mp_status mp_calib_hybrid_layer(const mp_model *m, const mp_calib_opts *o, cJSON *root, cJSON *device,
                                mp_error *err)
{
    char why[256];
    const int64_t L = m->hp.n_layer, E = m->hp.n_expert;
    if (!mp_gpu_available(why, sizeof why) || E < 2)
        return MP_OK;
    /* every layer keeps all experts but the last on the GPU; the routes never reach the last */
    char path[] = "/tmp/moeplan-calib-XXXXXX";
    const int fd = mkstemp(path);
    FILE *f = fd >= 0 ? fdopen(fd, "w") : NULL;
    if (!f) {
        if (fd >= 0)
            close(fd);
        mp_calib_say(o, "calibrate: hybrid_layer not measured (temporary placement file: %s)", strerror(errno));
        return MP_OK;
    }
    for (int64_t il = 0; il < L; il++)
        fprintf(f, "%" PRId64 ": 0-%" PRId64 "\n", il, E - 2);
    const bool written = fclose(f) == 0;
    double *a = malloc((size_t)o->reps * sizeof(double)), *b = malloc((size_t)o->reps * sizeof(double));
    mp_status st = MP_OK;
    mp_error perr;
    if (!a || !b) {
        st = mp_fail(err, MP_ERR_NOMEM, "calibrate: out of memory");
    } else if (!written || time_decode(m, o, "--placement", "gpu", b, &perr) ||
               time_decode(m, o, "--placement-file", path, a, &perr)) {
        mp_calib_say(o, "calibrate: hybrid_layer not measured (%s)", written ? perr.msg : "placement file not written");
    } else {
        mp_calib_sort(b, o->reps);
        const double base = mp_calib_quantile(b, o->reps, 0.5);
        for (int i = 0; i < o->reps; i++) /* per hybrid layer; noise below the all-resident step is 0 */
            a[i] = a[i] > base ? (a[i] - base) / (double)L : 0.0;
        cJSON *p = mp_calib_point(NULL, 0, a, o->reps);
        if (!p || !cJSON_AddItemToObject(root, "hybrid_layer", p) ||
            !cJSON_AddStringToObject(device, "hybrid_layer_path",
                                     "runtime: GPU executor, decode with CUDA graphs and routes that avoid "
                                     "the last expert; every layer holding all experts but the last against "
                                     "every expert resident, step-time difference per layer"))
            st = mp_fail(err, MP_ERR_NOMEM, "calibrate: out of memory");
        else
            mp_calib_say(o, "calibrate: hybrid layer with nothing for the CPU: %.1f us per layer beyond its GPU "
                            "experts (decode %.1f us/step all resident)",
                         cJSON_GetObjectItem(p, "median_ns")->valuedouble / 1000.0, base / 1000.0);
    }
    unlink(path);
    free(a);
    free(b);
    return st;
}
