/* simulator/calibrate_tune.c — the knobs `moeplan calibrate` chooses on its host (base/knobs.h,
 * MP_KNOB_COSTS_TUNED) before it measures anything else, so that every cost is measured under the
 * chosen values and a run given the cost file takes them (runtime/knobs_apply.h,
 * mp_knobs_take_costs).
 *
 * MP_PREFETCH_BYTES: how far ahead the CPU dots prefetch their weight rows. The best distance is
 * the host's (its cores, its memory's latency under load): 2048 bytes was the best of 512-4096 on
 * one thread of a Sapphire Rapids core and beat 8192 by 8-27 % on a Xeon VM's two threads, while one
 * AMD Zen 5 core read 10-23 % faster with none (bench/NOTES-kernels.md). So calibrate times a decode
 * step's CPU experts — mp_moe_experts_cpu, the runtime's own call, one row routed to top_k experts
 * on the largest thread count — at each candidate distance, the candidates alternated round by
 * round, each call on the experts after the last call's (every expert of every layer in turn, so
 * that a model larger than the caches is read from memory, and a smaller one from the caches, as its
 * decode reads it), and keeps the default unless another is faster by more than the margin.
 *
 * Where a GPU is usable it times them twice: the cores alone, then beside the bus (the copy engine
 * reading host memory, mp_calib_beside_bus), as a hybrid layer's CPU experts run beside far routes
 * and copies; the choice weighs both regimes' rounds alike. The cores alone are not production's
 * regime there: on an Emerald Rapids host they ran an olmoe-like shape (top-10 of 58, 11 MB experts)
 * 14 % faster at 16384 than at 2048, and that choice decoded it beside the bus 1.02x 2048 and 0.89x
 * 4096 (bench/results/2026-12-06-h100-prefetch-chosen/). Timed in both regimes, calibrate chose 8192
 * for that shape and for Mixtral on that host type, which decoded 1.05x and 1.07x 2048, within the
 * noise of the best fixed distance (bench/results/2026-12-06-h100-prefetch-beside-bus/).
 */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/clock.h"
#include "kernels/quant.h"
#include "runtime/gpu_module.h"
#include "runtime/moe.h"
#include "runtime/threadpool.h"
#include "simulator/calibrate_impl.h"

/* The distances timed, in bytes (the default among them) */
static const int64_t k_candidates[] = {0, 1024, 2048, 4096, 8192, 16384};
#define N_CANDIDATES ((int)(sizeof k_candidates / sizeof k_candidates[0]))
/* Calls a candidate runs back to back in each round */
#define CALLS_A_ROUND 8

/* the median of ns[0 .. n) (n >= 1), ns left as it is; tmp holds n */
static double median_of(const double *ns, int n, double *tmp)
{
    memcpy(tmp, ns, (size_t)n * sizeof *tmp);
    return mp_calib_median(tmp, n);
}

int64_t mp_calib_prefetch_pick(const int64_t *bytes, const double *ns, int n, int rounds, int calls, int64_t dflt,
                               double margin)
{
    const int per = rounds * calls;
    double *tmp = per > 0 ? malloc((size_t)per * sizeof *tmp) : NULL;
    int best = -1, at_default = -1;
    double best_ns = 0, default_ns = 0;
    for (int i = 0; tmp && i < n; i++) {
        const double med = median_of(ns + (size_t)i * per, per, tmp);
        if (!(med > 0))
            continue;
        if (bytes[i] == dflt)
            at_default = i, default_ns = med;
        if (best < 0 || med < best_ns)
            best = i, best_ns = med;
    }
    int64_t pick = dflt;
    if (best >= 0 && at_default >= 0 && best_ns < default_ns * (1.0 - margin)) {
        int won = 0; /* the rounds whose median the candidate beats the default's in */
        for (int r = 0; r < rounds; r++)
            won += median_of(ns + (size_t)best * per + (size_t)r * calls, calls, tmp) <
                   median_of(ns + (size_t)at_default * per + (size_t)r * calls, calls, tmp);
        if (won >= rounds - rounds / 4)
            pick = bytes[best];
    }
    free(tmp);
    return pick;
}

/* {"knob", "chosen", "why"} for a distance not measured here */
static cJSON *not_measured(int64_t chosen, const char *why)
{
    cJSON *o = cJSON_CreateObject();
    if (o && (!cJSON_AddStringToObject(o, "knob", "MP_PREFETCH_BYTES") ||
              !cJSON_AddNumberToObject(o, "chosen", (double)chosen) || !cJSON_AddStringToObject(o, "why", why))) {
        cJSON_Delete(o);
        return NULL;
    }
    return o;
}

/* One regime's timing of every candidate: rounds x CALLS_A_ROUND samples a candidate, at
 * ns[candidate * stride + base ...] (mp_calib_beside_bus calls it through tune_timed) */
typedef struct tune_run {
    const mp_model *m;
    const int64_t *layers;
    int64_t n_layers;
    mp_pool *pool;
    mp_moe_scratch *scratch;
    const float *x;
    float *out;
    int32_t *ids;
    float *w;
    int rounds, stride, base;
    bool quick;
    double *ns;
} tune_run;

/* Times every candidate over the layers with experts */
static void time_candidates(const tune_run *t)
{
    const int64_t E = t->m->hp.n_expert, K = t->m->hp.n_expert_used;
    int64_t next = 0; /* the rotation's step: every expert of every layer in turn (mp_calib_rotation) */
    for (int64_t j = 0; j < K; j++)
        t->w[j] = 1.0f / (float)K;
    for (int r = t->quick ? 0 : -1; r < t->rounds; r++) { /* round -1: a warm-up, not recorded */
        for (int c = 0; c < N_CANDIDATES; c++) {
            const int ci = (c + (r < 0 ? 0 : r)) % N_CANDIDATES; /* each round starts one candidate on */
            mp_kernels_set_prefetch_bytes(k_candidates[ci]);
            for (int call = 0; call < CALLS_A_ROUND; call++, next++) {
                const int64_t layer = t->layers[mp_calib_rotation(next, t->n_layers, K, E, t->ids)];
                const int64_t t0 = mp_now_ns();
                mp_moe_experts_cpu(t->m, layer, t->x, 1, t->ids, t->w, NULL, NULL, NULL, t->out, t->pool, t->scratch);
                if (r >= 0)
                    t->ns[ci * t->stride + t->base + r * CALLS_A_ROUND + call] = (double)(mp_now_ns() - t0);
            }
        }
    }
}

static void tune_timed(void *arg)
{
    time_candidates(arg);
}

/* The candidates' points of one regime (samples at ns[candidate * stride + base], `per` of them, sorted in place) into
 * points, and their medians after "label" on line (at: its length so far) */
static bool add_points(cJSON *points, double *ns, int stride, int base, int per, const char *label,
                       char *line, size_t cap, int *at)
{
    if (*at > 0 && (size_t)*at < cap)
        *at += snprintf(line + *at, cap - (size_t)*at, "%s", label);
    for (int ci = 0; ci < N_CANDIDATES; ci++) {
        cJSON *p = mp_calib_point("bytes", (double)k_candidates[ci], ns + ci * stride + base, per);
        if (!p || !cJSON_AddItemToArray(points, p)) {
            cJSON_Delete(p);
            return false;
        }
        if (*at > 0 && (size_t)*at < cap)
            *at += snprintf(line + *at, cap - (size_t)*at, " %" PRId64 " B %.1f us%s", k_candidates[ci],
                            cJSON_GetObjectItem(p, "median_ns")->valuedouble / 1000.0,
                            ci + 1 < N_CANDIDATES ? "," : "");
    }
    return true;
}

mp_status mp_calib_tune_prefetch(const mp_model *m, const mp_calib_opts *o, mp_knobs *k, cJSON **out, mp_error *err)
{
    *out = NULL;
    const int knob = mp_knob_index("MP_PREFETCH_BYTES");
    char text[32];
    if (k->source[knob] != MP_KNOB_DEFAULT) { /* the environment's value is measured, as every knob's */
        if (!(*out = not_measured(k->prefetch_bytes, "set in the environment: measured at that value")))
            return mp_fail(err, MP_ERR_NOMEM, "calibrate: out of memory");
        return MP_OK;
    }
    const int threads = o->threads[o->n_threads - 1], rounds = o->quick ? 3 : 5;
    const int64_t D = m->hp.n_embd, K = m->hp.n_expert_used;
    const int per = rounds * CALLS_A_ROUND; /* a regime's samples of a candidate */
    mp_pool *pool = mp_pool_new(threads, k->pool_pin);
    mp_moe_scratch *scratch = mp_moe_scratch_new(&m->hp, 1, threads, k);
    float *x = malloc((size_t)D * sizeof *x), *y = malloc((size_t)D * sizeof *y), *w = malloc((size_t)K * sizeof *w);
    int32_t *ids = malloc((size_t)K * sizeof *ids);
    int64_t *layers = malloc((size_t)m->hp.n_layer * sizeof *layers), n_layers = 0;
    /* both regimes' samples, candidate-major: the cores alone, then beside the bus */
    double *ns = malloc((size_t)N_CANDIDATES * 2 * (size_t)per * sizeof *ns);
    cJSON *res = cJSON_CreateObject(), *points = NULL, *beside = NULL, *bpoints = NULL;
    mp_status st = MP_OK;
    if (!pool || !scratch || !x || !y || !w || !ids || !layers || !ns || !res) {
        st = mp_fail(err, MP_ERR_NOMEM, "calibrate: out of memory (the prefetch distance's measurement)");
        goto done;
    }
    uint64_t rng = 7;
    mp_calib_fill(x, D, &rng);
    for (int64_t il = 0; il < m->hp.n_layer; il++)
        if (mp_model_expert_bytes(m, il) > 0) {
            mp_calib_prefault_experts(&m->layers[il]);
            layers[n_layers++] = il;
        }
    if (!n_layers) { /* no layer has experts: nothing a distance would change */
        if (!(*out = not_measured(k->prefetch_bytes, "not chosen: the model has no expert tensors")))
            st = mp_fail(err, MP_ERR_NOMEM, "calibrate: out of memory");
        goto done;
    }
    tune_run run = {.m = m, .layers = layers, .n_layers = n_layers, .pool = pool, .scratch = scratch, .x = x,
                    .out = y, .ids = ids, .w = w, .rounds = rounds, .stride = 2 * per, .base = 0, .quick = o->quick,
                    .ns = ns};
    time_candidates(&run);
    /* then beside the bus, where a GPU is usable: a hybrid layer's CPU experts run while far routes
     * and copies read host memory over it, and the distance the cores alone favour may lose there
     * (bench/NOTES-kernels.md, "calibrate chooses the prefetch distance") */
    char why[320] = "no GPU module";
    double bus_gbs = 0;
    const mp_calib_gpu_table *gt = mp_gpu_module_table(MP_GPU_TABLE_CALIBRATE, sizeof *gt, why, sizeof why);
    run.base = per;
    if (gt && (st = gt->beside_bus(tune_timed, &run, &bus_gbs, why, sizeof why, err)))
        goto done;
    const bool with_bus = gt && !why[0];
    if (!with_bus) /* one regime: its samples packed, a candidate's `per` after the last's */
        for (int ci = 1; ci < N_CANDIDATES; ci++)
            memmove(ns + ci * per, ns + ci * 2 * per, (size_t)per * sizeof *ns);
    const int regimes = with_bus ? 2 : 1;
    if (!cJSON_AddStringToObject(res, "knob", "MP_PREFETCH_BYTES") ||
        !cJSON_AddNumberToObject(res, "threads", threads) || !cJSON_AddNumberToObject(res, "experts_a_call", (double)K) ||
        !cJSON_AddNumberToObject(res, "rounds", rounds) || !cJSON_AddNumberToObject(res, "calls_a_round", CALLS_A_ROUND) ||
        !cJSON_AddNumberToObject(res, "margin", MP_CALIB_PREFETCH_MARGIN) ||
        !(points = cJSON_AddArrayToObject(res, "points")) || !(beside = cJSON_AddObjectToObject(res, "beside_bus")) ||
        (with_bus ? !cJSON_AddNumberToObject(beside, "gbs", bus_gbs) ||
                        !(bpoints = cJSON_AddArrayToObject(beside, "points"))
                  : !cJSON_AddStringToObject(beside, "why", why))) {
        st = mp_fail(err, MP_ERR_NOMEM, "calibrate: out of memory");
        goto done;
    }
    /* the choice over both regimes' rounds, before the points: mp_calib_point sorts each
     * candidate's samples in place */
    const int64_t chosen = mp_calib_prefetch_pick(k_candidates, ns, N_CANDIDATES, regimes * rounds, CALLS_A_ROUND,
                                                  k->prefetch_bytes, MP_CALIB_PREFETCH_MARGIN);
    char line[768], label[64];
    int at = snprintf(line, sizeof line, "calibrate: prefetch distance, %d threads, %" PRId64 " experts a call:", threads, K);
    snprintf(label, sizeof label, "; beside the bus (%.1f GB/s):", bus_gbs);
    if (!add_points(points, ns, regimes * per, 0, per, "", line, sizeof line, &at) ||
        (with_bus && !add_points(bpoints, ns, 2 * per, per, per, label, line, sizeof line, &at))) {
        st = mp_fail(err, MP_ERR_NOMEM, "calibrate: out of memory");
        goto done;
    }
    snprintf(text, sizeof text, "%" PRId64, chosen);
    bool taken;
    if ((st = mp_knobs_take_calibrated(k, "MP_PREFETCH_BYTES", text, &taken, err)) || !taken) {
        /* the table marks it tuned (base/knobs.c) and the caller left it at its default */
        st = st ? mp_error_prefix(err, "calibrate")
                : mp_fail(err, MP_ERR_INTERNAL, "calibrate: MP_PREFETCH_BYTES %s: not taken as a calibrated knob", text);
        goto done;
    }
    if (!cJSON_AddNumberToObject(res, "chosen", (double)chosen)) {
        st = mp_fail(err, MP_ERR_NOMEM, "calibrate: out of memory");
        goto done;
    }
    mp_calib_say(o, "%s; chosen %" PRId64 "%s%s%s%s", line, chosen,
                 chosen == MP_PREFETCH_BYTES_DEFAULT ? " (the default: no other faster by the margin)" : "",
                 with_bus ? "" : "; the cores alone (", with_bus ? "" : why, with_bus ? "" : ")");
    *out = res;
    res = NULL;
done:
    mp_kernels_set_prefetch_bytes(k->prefetch_bytes); /* the choice, or the value as it was */
    cJSON_Delete(res);
    mp_moe_scratch_free(scratch);
    mp_pool_free(pool);
    free(x);
    free(y);
    free(w);
    free(ids);
    free(layers);
    free(ns);
    return st;
}
