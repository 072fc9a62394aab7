/* simulator/calibrate_runtime.c — what `moeplan calibrate` measures through the runtime's own
 * forward pass (see calibrate.h), so that the costs are what production pays:
 *   non_moe          the time per step outside the MoE experts (the GPU executor with every expert
 *                    resident, CUDA graphs at one row; else the CPU forward pass), and a one-row
 *                    step's by its keys of context (non_moe_context: the context sweep);
 *   sync             the decode round trip's overhead per hybrid layer (placement layers:1);
 *   host_read        the host memory's read bandwidth by the cores (the decode floor).
 * The decode layer grid, measured through the same executor, is calibrate_grid.c's.
 */
#include <inttypes.h>
#include <math.h>
#include <stdlib.h>

#include "runtime/bench.h"
#include "runtime/decide.h"
#include "runtime/executor.h"
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

int mp_calib_context_starts(int64_t n_ctx, int window, int64_t *starts, int cap)
{
    int n = 0;
    if (cap < 1 || window < 1 || n_ctx < 1 + window)
        return 0;
    starts[n++] = 1;
    const int64_t last = n_ctx - window;
    for (int64_t p = 128; p + window <= last && n < cap - 1; p *= 2)
        if (p >= starts[n - 1] + window)
            starts[n++] = p;
    if (last >= starts[n - 1] + window && n < cap)
        starts[n++] = last;
    return n;
}

/* The context sweep: one-row steps as `bench` and production decode run them (back to back,
 * graph-replayed, no hooks) in windows of MP_CALIB_CONTEXT_WINDOW steps at each of the n starts
 * (mp_calib_context_starts). Each sweep resets the session, runs a 1-token prompt, then per window
 * fills the context up to its start (untimed, steps of up to fill_rows random tokens) and times its
 * steps in one interval: ns[w * reps + rep] the window's mean step of each recorded sweep,
 * keys[w] the keys its steps attend on average. One unrecorded sweep first warms every window
 * (graph capture, the KV cache's pages) and times the sweep, from which the time left is said.
 * (Each step timed alone after a reset measured 3.80 ms where bench's tg128 measured 4.28 on the
 * H200, 2026-11-29: calibrate times what bench times.) */
#define CONTEXT_FILL_ROWS 512
static mp_status context_sweep(mp_session *s, const mp_model *m, const mp_calib_opts *o, const int64_t *starts,
                               int n, int fill_rows, int32_t *tokens, float *logits, uint64_t *rng, double *ns,
                               double *keys, mp_error *err)
{
    mp_status st;
    mp_session_set_hooks(s, NULL);
    for (int rep = -1; rep < o->reps; rep++) {
        const int64_t sweep_t0 = mp_now_ns();
        mp_session_reset(s);
        tokens[0] = random_token(rng, m->hp.n_vocab); /* the prompt: position 0 */
        if ((st = mp_session_eval(s, tokens, 1, false, logits, err)))
            return st;
        for (int w = 0; w < n; w++) {
            while (mp_session_n_past(s) < starts[w]) {
                const int64_t left = starts[w] - mp_session_n_past(s), k = left < fill_rows ? left : fill_rows;
                for (int64_t i = 0; i < k; i++)
                    tokens[i] = random_token(rng, m->hp.n_vocab);
                if ((st = mp_session_eval(s, tokens, k, false, logits, err)))
                    return st;
            }
            const int64_t t0 = mp_now_ns();
            for (int i = 0; i < MP_CALIB_CONTEXT_WINDOW; i++) {
                tokens[0] = random_token(rng, m->hp.n_vocab);
                if ((st = mp_session_eval(s, tokens, 1, false, logits, err)))
                    return st;
            }
            if (rep >= 0)
                ns[(size_t)w * o->reps + rep] = (double)(mp_now_ns() - t0) / MP_CALIB_CONTEXT_WINDOW;
            keys[w] = (double)starts[w] + (MP_CALIB_CONTEXT_WINDOW + 1) / 2.0; /* positions p attend p + 1 keys */
        }
        if (rep < 0)
            mp_calib_say(o, "calibrate: non-MoE context sweep: %d windows of %d one-row steps from positions "
                            "%" PRId64 " .. %" PRId64 ", %d sweeps: about %.0f s",
                         n, MP_CALIB_CONTEXT_WINDOW, starts[0], starts[n - 1], o->reps,
                         (double)(mp_now_ns() - sweep_t0) / 1e9 * o->reps);
    }
    return MP_OK;
}

/* The one-row GPU points: the context sweep's windows minus what simulate charges for their experts
 * (decode_moe_ns). The first window (positions 1 .. 64, as bench's tg runs them) is the non_moe
 * curve's one-row point, added to arr; *context gets {"points": [{keys, median_ns, spread_ns}]},
 * every window's (NULL when the context holds one window: too short to tell). */
static mp_status non_moe_decode(mp_session *s, const mp_model *m, const mp_calib_opts *o, cJSON *arr,
                                double decode_moe_ns, int64_t n_ctx, int fill_rows, int32_t *tokens,
                                float *logits, uint64_t *rng, cJSON **context, mp_error *err)
{
    int64_t starts[MP_CALIB_CONTEXT_MAX];
    double keys[MP_CALIB_CONTEXT_MAX];
    const int n = mp_calib_context_starts(n_ctx, MP_CALIB_CONTEXT_WINDOW, starts, MP_CALIB_CONTEXT_MAX);
    *context = NULL;
    if (n < 1)
        return mp_fail(err, MP_ERR_ARG, "calibrate: the context of %" PRId64 " tokens holds no %d decode steps",
                       n_ctx, MP_CALIB_CONTEXT_WINDOW + 1);
    double *ns = malloc((size_t)n * (size_t)o->reps * sizeof(double));
    if (!ns)
        return mp_fail(err, MP_ERR_NOMEM, "calibrate: out of memory");
    mp_status st = context_sweep(s, m, o, starts, n, fill_rows, tokens, logits, rng, ns, keys, err);
    cJSON *pts = NULL;
    if (!st && n >= 2 && (!(*context = cJSON_CreateObject()) || !(pts = cJSON_AddArrayToObject(*context, "points"))))
        st = mp_fail(err, MP_ERR_NOMEM, "calibrate: out of memory");
    for (int w = 0; !st && w < n; w++) {
        double *x = ns + (size_t)w * o->reps, step = 0;
        for (int i = 0; i < o->reps; i++) {
            step += x[i] / o->reps;
            x[i] -= decode_moe_ns; /* mp_calib_point keeps a point >= 0 */
        }
        cJSON *p = mp_calib_point("keys", keys[w], x, o->reps);
        cJSON *q = w == 0 ? mp_calib_point("rows", 1, x, o->reps) : NULL;
        if (!p || (w == 0 && !q)) {
            cJSON_Delete(p);
            cJSON_Delete(q);
            st = mp_fail(err, MP_ERR_NOMEM, "calibrate: out of memory");
            break;
        }
        if (pts)
            cJSON_AddItemToArray(pts, p);
        else
            cJSON_Delete(p);
        if (q)
            cJSON_AddItemToArray(arr, q);
        mp_calib_say(o, "calibrate: non-MoE step rows 1 at %.1f keys (%d back-to-back graph-replayed steps from "
                        "position %" PRId64 "): median %.1f us (mean step %.1f us, modelled MoE in it %.1f us)",
                     keys[w], MP_CALIB_CONTEXT_WINDOW, starts[w], mp_calib_quantile(x, o->reps, 0.5) / 1000.0,
                     step / 1000.0, decode_moe_ns / 1000.0);
    }
    if (!st && n < 2)
        mp_calib_say(o, "calibrate: non-MoE context: the context of %" PRId64 " tokens is too short to measure",
                     n_ctx);
    if (st) {
        cJSON_Delete(*context);
        *context = NULL;
    }
    free(ns);
    return st;
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
    /* the context the runtime gives a run by default (min(the model's, 4096)): the context sweep's
     * curve spans it (beyond it the simulator extends its last segment), and it leaves room for a
     * step of every size after some context, so attention sees a few hundred keys */
    int64_t n_ctx = m->hp.n_ctx_train > 0 && m->hp.n_ctx_train < 4096 ? m->hp.n_ctx_train : 4096;
    /* the runtime's default batch, so that the sweep fills the context between its windows in a
     * few steps (a step of any size only writes the KV cache that the timed steps read) */
    const int batch = max_rows > CONTEXT_FILL_ROWS ? max_rows : CONTEXT_FILL_ROWS;
    mp_session_params sp = {.n_ctx = n_ctx, .n_threads = t, .n_batch = batch, .hooks = &hooks, .knobs = o->knobs};
    mp_session *s = NULL;
    mp_placement pl = {0};
    int32_t *tokens = malloc((size_t)batch * sizeof(int32_t));
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
            if ((st = non_moe_decode(s, m, o, arr, decode_moe_ns, n_ctx, (int)mp_session_n_batch(s), tokens, logits,
                                     &rng, context, err)))
                goto out;
            continue;
        }
        /* a big model's long steps take seconds on the CPU: after 3 recorded repetitions a point
         * stops once it has used NON_MOE_POINT_NS, so the default list fits a 10-minute run */
        int n_rec = 0;
        double step_sum = 0, moe_sum = 0;
        const int64_t point_t0 = mp_now_ns();
        for (int rep = -mp_calib_warmups(o); rep < o->reps; rep++) {
            if (n_rec >= 3 && mp_now_ns() - point_t0 > NON_MOE_POINT_NS)
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
            const int64_t t0 = mp_now_ns();
            if ((st = mp_session_eval(s, tokens, rows, false, logits, err)))
                goto out;
            const int64_t step_ns = mp_now_ns() - t0;
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
                                     ? "gpu executor, every expert resident; 1 row: the CUDA-graph steps of the "
                                       "context sweep's first window (positions 1 .. 64) minus every layer's "
                                       "gpu_expert concurrent time at top_k (what simulate charges), and "
                                       "non_moe_context the same for every window; more rows: minus the MoE "
                                       "kernels' time from CUDA events"
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
_Static_assert(DECODE_BATCH < MP_GPU_COPY_MIN_ROWS, "no staging (mp_gpu_staging) for the round trip's runs");
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

/* ---- the host's read bandwidth ---- */

/* The probe's buffer: past the LLC (mp_bench_host_probe_bytes) */
static size_t host_probe_bytes(const mp_calib_opts *o)
{
    return mp_bench_host_probe_bytes(o->quick);
}

#define HOST_PROBES_KEY "host_read_probes" /* root's scratch array, consumed by mp_calib_host_read */

mp_status mp_calib_host_probe(const mp_calib_opts *o, cJSON *root, mp_error *err)
{
    const double gbs = mp_bench_host_read_gbs(host_probe_bytes(o), o->threads[o->n_threads - 1], 2);
    if (!(gbs > 0))
        return MP_OK; /* no buffer this time: the level takes the other probes */
    cJSON *a = cJSON_GetObjectItemCaseSensitive(root, HOST_PROBES_KEY);
    if (!a && !(a = cJSON_AddArrayToObject(root, HOST_PROBES_KEY)))
        return mp_fail(err, MP_ERR_NOMEM, "calibrate: out of memory");
    cJSON *n = cJSON_CreateNumber(gbs);
    if (!n || !cJSON_AddItemToArray(a, n)) {
        cJSON_Delete(n);
        return mp_fail(err, MP_ERR_NOMEM, "calibrate: out of memory");
    }
    return MP_OK;
}

mp_status mp_calib_host_bus_probe(const mp_calib_opts *o, cJSON *root, mp_gpu *g, mp_error *err)
{
    mp_bench_two_readers r;
    mp_error perr;
    if (mp_bench_host_bus(g, host_probe_bytes(o), o->threads[o->n_threads - 1], 2, MP_BENCH_HOST_BUS_SECONDS, &r,
                          &perr)) {
        /* the floor then sums each reader alone, as for a file without $.host_bus */
        mp_calib_say(o, "calibrate: host memory read by the cores and the bus at once: not measured this pass: %s",
                     perr.msg);
        return MP_OK;
    }
    if (!(r.bus_gbs > 0))
        return MP_OK; /* no page-locked host copy: the floor takes each reader alone */
    const double cpu = round(r.cpu_gbs * 100) / 100, bus = round(r.bus_gbs * 100) / 100;
    cJSON *hb = cJSON_GetObjectItemCaseSensitive(root, "host_bus");
    if (!hb) { /* the first probe: a record that the ones after update */
        if (!(hb = cJSON_AddObjectToObject(root, "host_bus")) || !cJSON_AddNumberToObject(hb, "gbs", 0) ||
            !cJSON_AddNumberToObject(hb, "cpu_gbs", 0) || !cJSON_AddNumberToObject(hb, "bus_gbs", 0) ||
            !cJSON_AddNumberToObject(hb, "threads", o->threads[o->n_threads - 1]) ||
            !cJSON_AddNumberToObject(hb, "probes", 0))
            return mp_fail(err, MP_ERR_NOMEM, "calibrate: out of memory");
    }
    cJSON *n = cJSON_GetObjectItemCaseSensitive(hb, "probes");
    cJSON_SetNumberValue(n, n->valuedouble + 1);
    const double sum = round((cpu + bus) * 100) / 100;
    if (sum > cJSON_GetObjectItemCaseSensitive(hb, "gbs")->valuedouble) { /* the best sum so far */
        cJSON_SetNumberValue(cJSON_GetObjectItemCaseSensitive(hb, "gbs"), sum);
        cJSON_SetNumberValue(cJSON_GetObjectItemCaseSensitive(hb, "cpu_gbs"), cpu);
        cJSON_SetNumberValue(cJSON_GetObjectItemCaseSensitive(hb, "bus_gbs"), bus);
    }
    return MP_OK;
}

mp_status mp_calib_host_read(const mp_calib_opts *o, cJSON *root, mp_error *err)
{
    enum { ROUNDS = 3 };
    const int threads = o->threads[o->n_threads - 1];
    const size_t bytes = host_probe_bytes(o);
    double gbs[ROUNDS], lo = 0, hi = 0;
    for (int r = 0; r < ROUNDS; r++) {
        gbs[r] = mp_bench_host_read_gbs(bytes, threads, 2);
        lo = r == 0 || gbs[r] < lo ? gbs[r] : lo;
        hi = gbs[r] > hi ? gbs[r] : hi;
    }
    if (!(hi > 0))
        return mp_fail(err, MP_ERR_NOMEM, "calibrate: host read bandwidth: no memory for a %zu-byte buffer or no "
                       "%d threads", bytes, threads);
    /* the probes the decode grid took between its passes (mp_calib_host_probe): their median is the
     * level its CPU costs were measured at; the best of every probe is the host's bandwidth (the
     * floor it gives must not be above what the host can do) */
    cJSON *probes = cJSON_DetachItemFromObjectCaseSensitive(root, HOST_PROBES_KEY);
    const int n = probes ? cJSON_GetArraySize(probes) : 0;
    double *v = n > 0 ? malloc((size_t)n * sizeof *v) : NULL, level = 0;
    if (n > 0 && !v) {
        cJSON_Delete(probes);
        return mp_fail(err, MP_ERR_NOMEM, "calibrate: out of memory");
    }
    for (int i = 0; i < n; i++) {
        v[i] = cJSON_GetArrayItem(probes, i)->valuedouble;
        hi = v[i] > hi ? v[i] : hi;
        lo = v[i] < lo ? v[i] : lo;
    }
    cJSON_Delete(probes);
    if (n > 0) {
        mp_calib_sort(v, n);
        level = mp_calib_quantile(v, n, 0.5);
    }
    free(v);
    cJSON *p = cJSON_CreateObject();
    if (!p || !cJSON_AddNumberToObject(p, "gbs", round(hi * 100) / 100) ||
        !cJSON_AddNumberToObject(p, "spread_gbs", round((hi - lo) * 100) / 100) ||
        !cJSON_AddNumberToObject(p, "threads", threads) || !cJSON_AddStringToObject(p, "probe", "window") ||
        (n > 0 && (!cJSON_AddNumberToObject(p, "level_gbs", round(level * 100) / 100) ||
                   !cJSON_AddNumberToObject(p, "level_probes", n))) ||
        !cJSON_AddItemToObject(root, "host_read", p)) {
        cJSON_Delete(p);
        return mp_fail(err, MP_ERR_NOMEM, "calibrate: out of memory");
    }
    if (n > 0)
        mp_calib_say(o, "calibrate: host read bandwidth (%d threads, %zu MiB): %.1f GB/s, the best of %d rounds and the "
                     "decode grid's %d probes (lowest %.1f); %.1f GB/s while the grid measured, the median of its "
                     "probes: the level its CPU costs hold", threads, bytes >> 20, hi, ROUNDS, n, lo, level);
    else
        mp_calib_say(o, "calibrate: host read bandwidth (%d threads, %zu MiB): %.1f GB/s, best of %d rounds (lowest "
                     "%.1f)", threads, bytes >> 20, hi, ROUNDS, lo);
    /* the rule bench and plan's check apply to a run's host (mp_decide_host_moved), here to
     * calibrate's own probes: a host that moved that far while calibrate measured is shared, and
     * runs that meet it so again are slower than the costs predict (olmoe, bench/NOTES-simulator.md
     * 2026-12-04: probes as low as 117 GB/s against a level of 152; its five rows outside 10 %, all
     * slower than predicted, had probed the host at 102-146) */
    if (n > 0 && mp_decide_host_moved(level, true, lo))
        mp_calib_say(o, "calibrate: warning: the host's memory read %.1f GB/s at the slowest of these probes, "
                     "%.0f %% below the level the costs hold (%.1f): another process was reading this machine's "
                     "memory; decode that meets such a host again runs slower than these costs predict (plan's "
                     "check says so); calibrate on a quiet machine for steadier costs",
                     lo, 100 * (1 - lo / level), level);
    return MP_OK;
}
