/* simulator/calibrate_run.c — `moeplan calibrate`'s run (mp_calibrate, calibrate.h): the model, the
 * machine's facts, every measurement in order, and the cost file's JSON.
 *
 * The JSON follows schemas/costs.schema.json; the GPU measurements are either all there (a
 * usable CUDA device) or each named in $.missing with the reason, so the file always loads with
 * mp_costs_load (the command checks that before it writes).
 */
#include "simulator/calibrate.h"

#include <errno.h>
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>

#include "base/machine.h"
#include "base/sha256.h"
#include "kernels/quant.h"
#include "mp_config.h"
#include "runtime/decide.h"
#include "runtime/gpu_module.h"
#include "runtime/cpus.h"
#include "simulator/calibrate_impl.h"

/* ---- machine facts ---- */

static mp_status add_facts(const mp_calib_opts *o, const mp_model *m, cJSON *device, mp_error *err)
{
    char cpu[256], date[32], hex[65];
    mp_cpu_model_name(cpu, sizeof cpu);
    time_t now = time(NULL);
    struct tm tm;
    gmtime_r(&now, &tm);
    strftime(date, sizeof date, "%Y-%m-%dT%H:%M:%SZ", &tm);
    uint64_t size_bytes = 0;
    mp_calib_say(o, "calibrate: hashing %s (SHA-256; it also brings the weights into the page cache)",
                 o->model_path);
    mp_progress_next(o->hash_progress, "calibrate: SHA-256 of the model", MP_PROGRESS_BYTES, 0);
    mp_status st = mp_sha256_file_progress(o->model_path, "model", hex, &size_bytes,
                                           o->hash_progress, err);
    mp_progress_end(o->hash_progress); /* before the measurements' lines */
    if (st)
        return st;
    cJSON *threads = cJSON_CreateArray();
    for (int i = 0; threads && i < o->n_threads; i++)
        cJSON_AddItemToArray(threads, cJSON_CreateNumber(o->threads[i]));
    const size_t llc = mp_cpu_llc_bytes(); /* one rule for every reader of the cache size (base/machine.h) */
    if (!threads || !cJSON_AddStringToObject(device, "cpu", cpu) ||
        !cJSON_AddNumberToObject(device, "cpu_logical_cores", mp_cpu_count()) ||
        !cJSON_AddNumberToObject(device, "cpu_llc_bytes", (double)llc) ||
        !cJSON_AddStringToObject(device, "cpu_kernels", mp_kernels_isa()) ||
        !cJSON_AddItemToObject(device, "cpu_threads_measured", threads) ||
        !cJSON_AddStringToObject(device, "date", date) ||
        !cJSON_AddStringToObject(device, "moeplan_version", MP_VERSION) ||
        !cJSON_AddStringToObject(device, "model_path", o->model_path) ||
        !cJSON_AddNumberToObject(device, "model_bytes", (double)size_bytes) ||
        !cJSON_AddStringToObject(device, "model_sha256", hex) ||
        !cJSON_AddStringToObject(device, "model_architecture", mp_arch_get(m->hp.arch)->name) ||
        !cJSON_AddNumberToObject(device, "reps", o->reps) ||
        !cJSON_AddBoolToObject(device, "quick", o->quick))
        return mp_fail(err, MP_ERR_NOMEM, "calibrate: out of memory");
    return MP_OK;
}

/* The cost file's notes; the curves' rule (%g %%, %dx) from calibrate_impl.h's constants. */
static const char notes_fmt[] =
    "moeplan calibrate: every point is the median and p75-p25 spread of the recorded repetitions "
    "(device.reps) after unrecorded warm-ups. cpu_expert: one expert's gate+up+SwiGLU+down "
    "(activation quantization included) over `rows` routed rows with the runtime's kernels and "
    "task split, rotating over every expert of every layer of that kind so the weights come from "
    "memory, not the CPU caches (footprint in device.cpu_rotation_bytes); its points, and the CPU's "
    "concurrent points, timed in turn, one call each a pass, the points whose repetitions spread more "
    "than %g %% taking more, up to %dx device.reps. combine: the weighted "
    "sum of top_k expert outputs per row on the CPU. non_moe: a forward step of `rows` tokens "
    "(mp_session_eval, output head included) minus the time of its MoE blocks as the runtime's "
    "moe_timing hook reports it (router included in non_moe), measured with the GPU executor when a "
    "device is present (every expert resident; the step timed without hooks, so with CUDA graphs at "
    "one row, minus the MoE kernels' GPU time from CUDA events in a hooked twin step; "
    "device.non_moe_path says which) or else the CPU forward pass (a point stops after 20 s once it "
    "has 3 repetitions). "
    "GPU (when present): pinned copies timed by CUDA events, pageable copies by the host clock around "
    "the copy and its stream sync; sync is the GPU's idle gap in one decode round trip (D2H of one "
    "activation row, cudaStreamSynchronize, H2D of one row): from the end of the D2H to the start of "
    "the H2D the host issues after waking, which the simulator adds to the copies' own times "
    "(device.round_trip_host has the host-clock total); gpu_expert is mp_cuda_moe_experts with every "
    "row routed to one expert (top_k 1), rotating over the layer's experts. concurrent (in each expert "
    "entry): one call of the runtime's expert function (CPU: mp_moe_experts_cpu, the other routes "
    "marked resident; GPU: mp_cuda_moe_experts) with one row routed to `experts` distinct experts, "
    "which share the call's fixed costs. See docs/simulator.md (calibrate).";

static mp_status add_missing(cJSON *missing, const char *why, mp_error *err)
{
    static const char *const what[] = {"gpu_expert", "h2d", "d2h", "sync", "decode_layers"};
    mp_status st = MP_OK;
    for (int i = 0; i < 5 && !st; i++)
        st = mp_calib_missing(missing, what[i], why, err);
    return st;
}

/* The GPU microbenchmarks (gpu/calibrate_cuda.c) through the GPU module's table: MP_OK with why
 * empty after they ran, or MP_OK with why saying why there are none (no module, no device). */
static mp_status calib_gpu(const mp_model *m, const mp_calib_opts *o, cJSON *root, cJSON *device, char *why,
                           size_t why_cap, mp_error *err)
{
    const mp_calib_gpu_table *t = mp_gpu_module_table(MP_GPU_TABLE_CALIBRATE, sizeof *t, why, why_cap);
    if (!t)
        return MP_OK;
    why[0] = 0;
    return t->gpu(m, o, root, device, why, why_cap, err);
}

mp_status mp_calibrate(const mp_calib_opts *o, char **json_out, mp_error *err)
{
    *json_out = NULL;
    if (o->n_threads < 1 || o->n_rows < 1 || o->reps < 3)
        return mp_fail(err, MP_ERR_ARG, "calibrate: expected >= 1 thread count, >= 1 row count, >= 3 reps");
    mp_model *m = NULL;
    mp_status st = mp_model_load(o->model_path, &m, err);
    if (st)
        return st;
    if (o->far_units > 0) { /* before minutes of measurements */
        const int64_t K = m->hp.n_expert_used, granule = mp_decide_split_granule(m->layers[0].down_exps.type);
        const int most = mp_decide_far_split_most((int)K, m->hp.n_ff_exp, granule);
        if (o->far_units > most) {
            st = mp_fail(err, MP_ERR_ARG,
                         "--far-units %d: %s allows 1..%d (%d units a step over its top-%" PRId64
                         " routes at most; %" PRId64 " FFN rows, a unit at least %" PRId64 " of them)",
                         o->far_units, o->model_path, most, MP_DECIDE_MAX_K, K, m->hp.n_ff_exp, granule);
            mp_model_free(m);
            return st;
        }
    }
    if (o->grid_pool > 0 && o->grid_pool > m->hp.n_expert - m->hp.n_expert_used) {
        st = mp_fail(err, MP_ERR_ARG,
                     "--grid-pool %" PRId64 ": %s allows 1..%" PRId64 " (its %" PRId64 " experts a layer less the %" PRId64
                     " a step with every route cold needs outside the pool)",
                     o->grid_pool, o->model_path, m->hp.n_expert - m->hp.n_expert_used, m->hp.n_expert,
                     m->hp.n_expert_used);
        mp_model_free(m);
        return st;
    }
    if (o->rows[o->n_rows - 1] < MP_DECIDE_PREFILL_ROWS_MIN)
        mp_calib_say(o, "calibrate: note: --rows reaches %d: a prompt's steps past it are priced along the last "
                     "segment (decode's rows time the weights' read, not the arithmetic), so run and bench keep "
                     "their measured rule for prefill copies; --rows up to %d or more prices them",
                     o->rows[o->n_rows - 1], MP_DECIDE_PREFILL_ROWS_MIN);
    char notes[sizeof notes_fmt + 32];
    snprintf(notes, sizeof notes, notes_fmt, 100 * MP_CALIB_SPREAD_MAX, (int)MP_CALIB_CURVE_SAMPLES);
    /* root owns every part; they are filled in place, in the file's order (the NULL checks of the
     * Add* helpers below cover a failed create: they add nothing and return NULL) */
    cJSON *root = cJSON_CreateObject(), *missing = cJSON_CreateArray();
    cJSON *device = NULL, *cpu = NULL, *combine = NULL, *non_moe = NULL;
    if (!root || !missing || !cJSON_AddStringToObject(root, "format", "moeplan-costs") ||
        !cJSON_AddNumberToObject(root, "version", 1) || !cJSON_AddStringToObject(root, "notes", notes) ||
        !(device = cJSON_AddObjectToObject(root, "device")) || !(cpu = cJSON_AddArrayToObject(root, "cpu_expert")) ||
        !(combine = cJSON_AddArrayToObject(root, "combine")) || !(non_moe = cJSON_AddArrayToObject(root, "non_moe"))) {
        st = mp_fail(err, MP_ERR_NOMEM, "calibrate: out of memory");
        goto out;
    }
    if ((st = add_facts(o, m, device, err)))
        goto out;
    /* the tuned knobs (after the hash has brought the weights into the page cache), before every
     * other measurement: those run under them; then the knobs it measured under (docs/config.md),
     * as bench rows and traces record theirs */
    mp_knobs tuned;
    if (o->knobs)
        tuned = *o->knobs;
    else
        mp_knobs_defaults(&tuned);
    mp_calib_opts run = *o;
    run.knobs = &tuned;
    o = &run;
    cJSON *prefetch = NULL;
    if ((st = mp_calib_tune_prefetch(m, o, &tuned, &prefetch, err)))
        goto out;
    cJSON_AddItemToObject(device, "prefetch_tuning", prefetch);
    cJSON *amx = NULL;
    if ((st = mp_calib_tune_amx_rows(m, o, &tuned, &amx, err)))
        goto out;
    cJSON_AddItemToObject(device, "amx_tuning", amx);
    if (!mp_knobs_add_json(&tuned, device)) {
        st = mp_fail(err, MP_ERR_NOMEM, "calibrate: out of memory");
        goto out;
    }
    if ((st = mp_calib_cpu_experts(m, o, cpu, device, err)) || (st = mp_calib_combine(m, o, combine, err)))
        goto out;

    /* the GPU parts before non_moe: its one-row point subtracts the GPU experts' graph time */
    char why[768];
    if ((st = calib_gpu(m, o, root, device, why, sizeof why, err)))
        goto out;
    cJSON *context = NULL;
    if ((st = mp_calib_non_moe(m, o, non_moe, device, why[0] ? -1.0 : mp_calib_decode_moe_ns(m, root, 0), &context,
                               err)))
        goto out;
    if (context)
        cJSON_AddItemToObject(root, "non_moe_context", context);
    if ((!why[0] && (st = mp_calib_runtime_sync(m, o, root, device, err))) ||
        (!why[0] && (st = mp_calib_decode_layers(m, o, root, device, missing, err))))
        goto out;
    if ((st = mp_calib_host_read(o, root, err)))
        goto out;
    if (why[0]) {
        mp_calib_say(o, "calibrate: no GPU measurements: %s (gpu_expert, h2d, d2h, sync and decode_layers are "
                        "listed in $.missing; the simulator needs them for GPU placements)", why);
        if (!cJSON_AddStringToObject(device, "gpu", "none") || (st = add_missing(missing, why, err)))
            goto out;
    }
    if (cJSON_GetArraySize(missing) > 0) /* a GPU without the grid lists only decode_layers */
        cJSON_AddItemToObject(root, "missing", missing);
    else
        cJSON_Delete(missing);
    missing = NULL;
    char *text = cJSON_Print(root);
    if (!text) {
        st = mp_fail(err, MP_ERR_NOMEM, "calibrate: out of memory");
        goto out;
    }
    *json_out = text;
out:
    cJSON_Delete(root);
    cJSON_Delete(missing);
    mp_model_free(m);
    return st;
}
