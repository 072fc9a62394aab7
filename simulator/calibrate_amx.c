/* simulator/calibrate_amx.c — MP_AMX_ROWS chosen on the host (a tuned knob, as calibrate_tune.c's
 * prefetch distance): the activation rows from which each weight type's prefill GEMM runs on AMX
 * tiles rather than the avx512 dots.
 *
 * The crossover is the host's and its thread count's. One thread of a development VM's Xeon put the
 * K-quants' tiles ahead from 5 rows, one of an H100 machine's Emerald Rapids host from 6-8 (Q4_K) and
 * 12 (Q6_K) (bench/NOTES-kernels.md), and the kernels' table takes the larger. End to end a CPU
 * prefill does not resolve a few rows either way: two arms with the same rows differed by up to 10 %
 * in a round on that host (bench/results/2026-12-07-h100-amx-rows-calibrated/). So calibrate times
 * the runtime's own call, mp_moe_experts_cpu on the largest thread count, with every row of a call
 * routed to the same top_k experts (each expert then multiplies that many rows, as a prompt's
 * experts do) in the two regions a prompt's step runs (not decode's pipelined one), the experts
 * rotated over every layer that holds the type (so that their weights come from memory, as a
 * prompt's do), at each of k_rows with the type's tiles on and off, the two
 * alternated call group by call group and round by round. The other types keep their rows in force:
 * both arms pay them alike. On 16 threads of that host it kept the table's Q4_K 8 and Q6_K 12 (tiles
 * 1.19x and 1.38x the dots' time at 4 rows, 0.85x and 0.94x at 8 and 12); on the VM's 2 threads it
 * chose Q4_K 4-6.
 *
 * The choice (mp_calib_amx_pick): the rows t of the grid (or one past it: tiles never inside it)
 * whose mix — the tiles from t rows, the dots below — loses least against the faster arm at each
 * row count, on average relative to it; the table's rows unless another loses less by more than
 * MP_CALIB_AMX_MARGIN. */
#include <inttypes.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/clock.h"
#include "kernels/quant.h"
#include "runtime/knobs_apply.h"
#include "runtime/moe.h"
#include "runtime/threadpool.h"
#include "simulator/calibrate_impl.h"

/* The rows an expert multiplies in a timed call: decode's 1 is never a GEMM; a prompt of 512
 * tokens gives each of 128 experts 32 rows on average at top-8, and past 32 the tiles led by
 * 1.5-2x on both hosts measured */
static const int k_rows[] = {2, 3, 4, 6, 8, 12, 16, 24, 32};
#define N_ROWS ((int)(sizeof k_rows / sizeof k_rows[0]))
#define CALLS_A_ROUND 4 /* calls an arm runs back to back at one row count in a round */
#define MAX_TYPES 8     /* the model's types with a tile GEMM that are timed (a model has 1-3) */

/* the mean over the grid of (the mix from rows t on / the faster arm) - 1 */
static double mix_loss(const double *tiles, const double *dots, const int *rows, int n, int t)
{
    double sum = 0;
    int counted = 0;
    for (int i = 0; i < n; i++) {
        if (!(tiles[i] > 0) || !(dots[i] > 0))
            continue;
        const double best = tiles[i] < dots[i] ? tiles[i] : dots[i];
        sum += (rows[i] >= t ? tiles[i] : dots[i]) / best - 1.0;
        counted++;
    }
    return counted ? sum / counted : 0;
}

int mp_calib_amx_pick(const double *tiles, const double *dots, const int *rows, int n, int dflt, double margin)
{
    if (n < 1)
        return dflt;
    int best = dflt;
    double best_loss = mix_loss(tiles, dots, rows, n, dflt);
    const double dflt_loss = best_loss;
    for (int i = 0; i <= n; i++) { /* each row count of the grid, then one past it */
        const int t = i < n ? rows[i] : rows[n - 1] + 1;
        const double loss = mix_loss(tiles, dots, rows, n, t);
        if (loss < best_loss)
            best = t, best_loss = loss;
    }
    return dflt_loss - best_loss > margin ? best : dflt;
}

/* {"knob", "chosen", "why"}: the rows not measured here */
static cJSON *not_measured(const char *chosen, const char *why)
{
    cJSON *o = cJSON_CreateObject();
    if (o && (!cJSON_AddStringToObject(o, "knob", "MP_AMX_ROWS") || !cJSON_AddStringToObject(o, "chosen", chosen) ||
              !cJSON_AddStringToObject(o, "why", why))) {
        cJSON_Delete(o);
        return NULL;
    }
    return o;
}

/* Whether layer L holds an expert tensor of type */
static bool layer_has(const mp_layer *L, int type)
{
    return L->gate_exps.type == type || L->up_exps.type == type || L->down_exps.type == type;
}

/* Whether type's prefill GEMM runs on tiles here: the amx level dispatched, and its table the type's */
static bool tiles_in_force(int type)
{
    const mp_type_ops *ops = mp_type_ops_get(type);
    return !strcmp(mp_kernels_isa(), "amx") && mp_kernels_amx_rows(type, true) > 0 && ops->gemm &&
           ops == mp_type_ops_isa(type, "amx") && ops != mp_type_ops_isa(type, "avx512");
}

typedef struct amx_run {
    const mp_model *m;
    mp_pool *pool;
    mp_moe_scratch *scratch;
    const float *x;
    float *out, *w;
    int32_t *ids;
    int64_t *layers, n_layers;
    int64_t next; /* the rotation's step (mp_calib_rotation) */
} amx_run;

/* One call of `rows` rows, each routed to the rotation's next top_k experts: its ns */
static double time_call(amx_run *r, int rows)
{
    const int64_t E = r->m->hp.n_expert, K = r->m->hp.n_expert_used;
    const int64_t layer = r->layers[mp_calib_rotation(r->next++, r->n_layers, K, E, r->ids)];
    for (int row = 1; row < rows; row++)
        memcpy(r->ids + (size_t)row * K, r->ids, (size_t)K * sizeof *r->ids);
    const int64_t t0 = mp_now_ns();
    mp_moe_experts_cpu(r->m, layer, r->x, rows, r->ids, r->w, NULL, NULL, NULL, r->out, r->pool, r->scratch);
    return (double)(mp_now_ns() - t0);
}

/* Times type's tiles against its dots at every row count of the grid: medians into tiles[], dots[];
 * the rows in force before are restored */
static void time_type(amx_run *r, int type, int rounds, double *tiles, double *dots, double *samples)
{
    const int in_force = mp_kernels_amx_rows(type, false), per = rounds * CALLS_A_ROUND;
    const int64_t K = r->m->hp.n_expert_used;
    for (int64_t j = 0; j < (int64_t)k_rows[N_ROWS - 1] * K; j++)
        r->w[j] = 1.0f / (float)K;
    r->n_layers = 0;
    for (int64_t il = 0; il < r->m->hp.n_layer; il++)
        if (mp_model_expert_bytes(r->m, il) > 0 && layer_has(&r->m->layers[il], type))
            r->layers[r->n_layers++] = il;
    /* samples: (row count, arm) major, a round's calls together */
    for (int round = -1; round < rounds; round++) { /* round -1: a warm-up, not recorded */
        for (int i = 0; i < N_ROWS; i++) {
            const int i_rows = (i + (round < 0 ? 0 : round)) % N_ROWS; /* each round starts one on */
            for (int a = 0; a < 2; a++) {
                const int arm = (a + round + 1) % 2; /* 0 tiles, 1 dots: each first in every other round */
                mp_kernels_set_amx_rows(type, arm == 0 ? 1 : INT_MAX);
                for (int c = 0; c < CALLS_A_ROUND; c++) {
                    const double ns = time_call(r, k_rows[i_rows]);
                    if (round >= 0)
                        samples[((size_t)i_rows * 2 + (size_t)arm) * (size_t)per + (size_t)round * CALLS_A_ROUND +
                                (size_t)c] = ns;
                }
            }
        }
    }
    mp_kernels_set_amx_rows(type, in_force);
    for (int i = 0; i < N_ROWS; i++) {
        tiles[i] = mp_calib_median(samples + ((size_t)i * 2) * (size_t)per, per);
        dots[i] = mp_calib_median(samples + ((size_t)i * 2 + 1) * (size_t)per, per);
    }
}

mp_status mp_calib_tune_amx_rows(const mp_model *m, const mp_calib_opts *o, mp_knobs *k, cJSON **out, mp_error *err)
{
    *out = NULL;
    const int knob = mp_knob_index("MP_AMX_ROWS");
    if (k->source[knob] != MP_KNOB_DEFAULT) { /* the environment's value is measured, as every knob's */
        if (!(*out = not_measured(k->amx_rows, "set in the environment: measured at that value")))
            return mp_fail(err, MP_ERR_NOMEM, "calibrate: out of memory");
        return MP_OK;
    }
    /* the model's expert types whose prefill runs on tiles here */
    int types[MAX_TYPES], n_types = 0;
    for (int64_t il = 0; il < m->hp.n_layer; il++) {
        if (mp_model_expert_bytes(m, il) <= 0)
            continue;
        const mp_layer *L = &m->layers[il];
        const int of_layer[3] = {L->gate_exps.type, L->up_exps.type, L->down_exps.type};
        for (int t = 0; t < 3; t++) {
            bool seen = false;
            for (int j = 0; j < n_types; j++)
                seen |= types[j] == of_layer[t];
            if (!seen && n_types < MAX_TYPES && tiles_in_force(of_layer[t]))
                types[n_types++] = of_layer[t];
        }
    }
    if (!n_types) {
        char why[160];
        snprintf(why, sizeof why, "not chosen: %s",
                 strcmp(mp_kernels_isa(), "amx") ? "the CPU kernels run no AMX tiles here (their level: "
                                                 : "no expert type of the model has a tile GEMM (the kernels' level: ");
        snprintf(why + strlen(why), sizeof why - strlen(why), "%s)", mp_kernels_isa());
        if (!(*out = not_measured("", why)))
            return mp_fail(err, MP_ERR_NOMEM, "calibrate: out of memory");
        mp_calib_say(o, "calibrate: AMX rows %s", why);
        return MP_OK;
    }
    const int threads = o->threads[o->n_threads - 1], rounds = o->quick ? 3 : 5, max_rows = k_rows[N_ROWS - 1];
    const int per = rounds * CALLS_A_ROUND;
    const int64_t D = m->hp.n_embd, K = m->hp.n_expert_used;
    amx_run r = {.m = m};
    r.pool = mp_pool_new(threads, k->pool_pin);
    r.scratch = mp_moe_scratch_new(&m->hp, max_rows, threads, k);
    if (r.scratch) /* a prompt's step (more rows than decode's) runs its experts in two regions: as here */
        mp_moe_scratch_set_pipelined(r.scratch, false);
    float *x = malloc((size_t)max_rows * (size_t)D * sizeof *x);
    r.out = malloc((size_t)max_rows * (size_t)D * sizeof *r.out);
    r.w = malloc((size_t)max_rows * (size_t)K * sizeof *r.w); /* a weight per (row, slot) */
    r.ids = malloc((size_t)max_rows * (size_t)K * sizeof *r.ids);
    r.layers = malloc((size_t)m->hp.n_layer * sizeof *r.layers);
    double *samples = malloc((size_t)N_ROWS * 2 * (size_t)per * sizeof *samples);
    cJSON *res = cJSON_CreateObject(), *by_type = NULL;
    mp_status st = MP_OK;
    if (!r.pool || !r.scratch || !x || !r.out || !r.w || !r.ids || !r.layers || !samples || !res ||
        !cJSON_AddStringToObject(res, "knob", "MP_AMX_ROWS") || !cJSON_AddNumberToObject(res, "threads", threads) ||
        !cJSON_AddNumberToObject(res, "experts_a_call", (double)K) || !cJSON_AddNumberToObject(res, "rounds", rounds) ||
        !cJSON_AddNumberToObject(res, "calls_a_round", CALLS_A_ROUND) ||
        !cJSON_AddNumberToObject(res, "margin", MP_CALIB_AMX_MARGIN) ||
        !(by_type = cJSON_AddArrayToObject(res, "types"))) {
        st = mp_fail(err, MP_ERR_NOMEM, "calibrate: out of memory (the AMX rows' measurement)");
        goto done;
    }
    uint64_t rng = 11;
    mp_calib_fill(x, (int64_t)max_rows * D, &rng);
    r.x = x;
    for (int64_t il = 0; il < m->hp.n_layer; il++)
        if (mp_model_expert_bytes(m, il) > 0)
            mp_calib_prefault_experts(&m->layers[il]);
    char chosen[MP_KNOB_TEXT_MAX] = "";
    size_t at = 0;
    for (int t = 0; t < n_types; t++) {
        double tiles[N_ROWS], dots[N_ROWS];
        time_type(&r, types[t], rounds, tiles, dots, samples);
        const int dflt = mp_kernels_amx_rows(types[t], true);
        const int pick = mp_calib_amx_pick(tiles, dots, k_rows, N_ROWS, dflt, MP_CALIB_AMX_MARGIN);
        cJSON *entry = cJSON_CreateObject(), *points = NULL;
        if (!entry || !cJSON_AddItemToArray(by_type, entry)) {
            cJSON_Delete(entry);
            st = mp_fail(err, MP_ERR_NOMEM, "calibrate: out of memory");
            goto done;
        }
        if (!cJSON_AddStringToObject(entry, "type", mp_type_name(types[t])) ||
            !cJSON_AddNumberToObject(entry, "layers", (double)r.n_layers) ||
            !cJSON_AddNumberToObject(entry, "table", dflt) || !cJSON_AddNumberToObject(entry, "chosen", pick) ||
            !(points = cJSON_AddArrayToObject(entry, "points"))) {
            st = mp_fail(err, MP_ERR_NOMEM, "calibrate: out of memory");
            goto done;
        }
        char line[640];
        int used = snprintf(line, sizeof line, "calibrate: AMX rows, %s (%" PRId64 " layers), %d threads, %" PRId64
                            " experts a call, tiles against dots:", mp_type_name(types[t]), r.n_layers, threads, K);
        for (int i = 0; i < N_ROWS; i++) {
            cJSON *p = cJSON_CreateObject();
            if (!p || !cJSON_AddItemToArray(points, p)) {
                cJSON_Delete(p);
                st = mp_fail(err, MP_ERR_NOMEM, "calibrate: out of memory");
                goto done;
            }
            if (!cJSON_AddNumberToObject(p, "rows", k_rows[i]) ||
                !cJSON_AddNumberToObject(p, "tiles_ns", tiles[i]) || !cJSON_AddNumberToObject(p, "dots_ns", dots[i])) {
                st = mp_fail(err, MP_ERR_NOMEM, "calibrate: out of memory");
                goto done;
            }
            if (used > 0 && (size_t)used < sizeof line)
                used += snprintf(line + used, sizeof line - (size_t)used, " %d %.2fx%s", k_rows[i],
                                 dots[i] > 0 ? tiles[i] / dots[i] : 0, i + 1 < N_ROWS ? "," : "");
        }
        mp_calib_say(o, "%s; chosen from %d rows%s", line, pick, pick == dflt ? " (the table's)" : "");
        if (at < sizeof chosen)
            at += (size_t)snprintf(chosen + at, sizeof chosen - at, "%s%s:%d", at ? "," : "", mp_type_name(types[t]),
                                   pick);
    }
    bool taken;
    if ((st = mp_knobs_take_calibrated(k, "MP_AMX_ROWS", chosen, &taken, err)) || !taken) {
        st = st ? mp_error_prefix(err, "calibrate")
                : mp_fail(err, MP_ERR_INTERNAL, "calibrate: MP_AMX_ROWS %s: not taken as a calibrated knob", chosen);
        goto done;
    }
    if (!cJSON_AddStringToObject(res, "chosen", chosen)) {
        st = mp_fail(err, MP_ERR_NOMEM, "calibrate: out of memory");
        goto done;
    }
    *out = res;
    res = NULL;
done:
    mp_knobs_apply_kernels(k); /* the choice, or the rows as they were */
    cJSON_Delete(res);
    mp_moe_scratch_free(r.scratch);
    mp_pool_free(r.pool);
    free(x);
    free(r.out);
    free(r.w);
    free(r.ids);
    free(r.layers);
    free(samples);
    return st;
}
