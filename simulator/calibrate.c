/* simulator/calibrate.c — `moeplan calibrate` orchestration: defaults, statistics, machine facts
 * and the cost file's JSON (see calibrate.h). The benchmarks live in calibrate_cpu.c and
 * calibrate_cuda.c.
 *
 * The JSON follows schemas/costs.schema.json; the GPU measurements are either all there (a
 * usable CUDA device) or each named in $.missing with the reason, so the file always loads with
 * mp_costs_load (the command checks that before it writes).
 */
#include "simulator/calibrate.h"

#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "base/sha256.h"
#include "kernels/quant.h"
#include "mp_config.h"
#include "runtime/threadpool.h"
#include "runtime/gpu_module.h"
#include "simulator/calibrate_impl.h"

int64_t mp_calib_now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

void mp_calib_say(const mp_calib_opts *o, const char *fmt, ...)
{
    if (!o->progress)
        return;
    char line[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(line, sizeof line, fmt, ap);
    va_end(ap);
    o->progress(o->progress_user, line);
}

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

void mp_calib_sort(double *ns, int n)
{
    qsort(ns, (size_t)n, sizeof *ns, cmp_double);
}

double mp_calib_quantile(const double *sorted, int n, double q)
{
    double pos = q * (n - 1);
    int lo = (int)floor(pos);
    int hi = lo + 1 < n ? lo + 1 : lo;
    return sorted[lo] + (pos - lo) * (sorted[hi] - sorted[lo]);
}

int mp_calib_concurrent_ks(const mp_model *m, int *ks)
{
    const int K = (int)m->hp.n_expert_used;
    int n = 0;
    for (int k = 1; k <= K && n < MP_CALIB_MAX_KS - 1; k = k < 8 ? k + 1 : 2 * k)
        ks[n++] = k;
    if (ks[n - 1] != K)
        ks[n++] = K;
    return n;
}

cJSON *mp_calib_point(const char *x_key, double x, double *ns, int n)
{
    mp_calib_sort(ns, n);
    /* a difference of two timings (non-MoE, sync) can dip below 0 by noise: a cost is >= 0 */
    double median = fmax(0, mp_calib_quantile(ns, n, 0.5));
    double spread = fmax(0, mp_calib_quantile(ns, n, 0.75) - mp_calib_quantile(ns, n, 0.25));
    cJSON *p = cJSON_CreateObject();
    if (!p)
        return NULL;
    if (x_key && !cJSON_AddNumberToObject(p, x_key, x)) {
        cJSON_Delete(p);
        return NULL;
    }
    if (!cJSON_AddNumberToObject(p, "median_ns", round(median)) ||
        !cJSON_AddNumberToObject(p, "spread_ns", round(spread))) {
        cJSON_Delete(p);
        return NULL;
    }
    return p;
}

void mp_calib_fill(float *x, int64_t n, uint64_t *state)
{
    for (int64_t i = 0; i < n; i++) {
        uint64_t z = (*state += 0x9E3779B97F4A7C15ull); /* splitmix64 */
        z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
        z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
        z ^= z >> 31;
        x[i] = (float)((double)(z >> 11) * 0x1p-52 - 1.0);
    }
}

double mp_calib_decode_moe_ns(const mp_model *m, const cJSON *root, int64_t from_layer)
{
    const cJSON *entries = cJSON_GetObjectItemCaseSensitive(root, "gpu_expert");
    double sum = 0;
    for (int64_t il = from_layer; il < m->hp.n_layer; il++) {
        char quant[16];
        mp_model_expert_quant(&m->layers[il], quant);
        double v = -1;
        const cJSON *e;
        cJSON_ArrayForEach(e, entries) {
            const cJSON *q = cJSON_GetObjectItemCaseSensitive(e, "quant");
            const cJSON *d = cJSON_GetObjectItemCaseSensitive(e, "n_embd");
            const cJSON *f = cJSON_GetObjectItemCaseSensitive(e, "n_ff");
            const cJSON *conc = cJSON_GetObjectItemCaseSensitive(e, "concurrent");
            if (!cJSON_IsString(q) || strcmp(q->valuestring, quant) || !cJSON_IsNumber(d) || !cJSON_IsNumber(f) ||
                d->valuedouble != (double)m->hp.n_embd || f->valuedouble != (double)m->hp.n_ff_exp ||
                cJSON_GetArraySize(conc) < 1)
                continue;
            const cJSON *last = cJSON_GetArrayItem(conc, cJSON_GetArraySize(conc) - 1);
            const cJSON *k = cJSON_GetObjectItemCaseSensitive(last, "experts");
            const cJSON *med = cJSON_GetObjectItemCaseSensitive(last, "median_ns");
            if (cJSON_IsNumber(k) && k->valuedouble == (double)m->hp.n_expert_used && cJSON_IsNumber(med))
                v = med->valuedouble;
        }
        if (v < 0)
            return -1;
        sum += v;
    }
    return sum;
}

void mp_calib_defaults(mp_calib_opts *o, bool quick)
{
    memset(o, 0, sizeof *o);
    o->quick = quick;
    const int ncpu = mp_cpu_count() > 0 ? mp_cpu_count() : 1;
    if (quick) {
        /* one and all threads: the two ends a placement chooses between */
        o->threads[o->n_threads++] = 1;
        if (ncpu > 1)
            o->threads[o->n_threads++] = ncpu;
        static const int rows[] = {1, 4, 16};
        for (int i = 0; i < 3; i++)
            o->rows[o->n_rows++] = rows[i];
        o->reps = 5;
        return;
    }
    for (int t = 1; t < ncpu && o->n_threads < MP_CALIB_LIST_MAX - 1; t *= 2)
        o->threads[o->n_threads++] = t;
    o->threads[o->n_threads++] = ncpu;
    static const int rows[] = {1, 2, 4, 8, 16, 32, 64, 128, 256};
    for (int i = 0; i < 9; i++)
        o->rows[o->n_rows++] = rows[i];
    o->reps = 15;
}

/* ---- machine facts ---- */

static void cpu_model(char *out, size_t cap)
{
    snprintf(out, cap, "unknown");
    FILE *f = fopen("/proc/cpuinfo", "r");
    if (!f)
        return;
    char line[512];
    while (fgets(line, sizeof line, f)) {
        if (strncmp(line, "model name", 10) != 0)
            continue;
        const char *v = strchr(line, ':');
        if (!v)
            continue;
        v++;
        while (*v == ' ' || *v == '\t')
            v++;
        snprintf(out, cap, "%s", v);
        out[strcspn(out, "\n")] = 0;
        break;
    }
    fclose(f);
}


static mp_status add_facts(const mp_calib_opts *o, const mp_model *m, cJSON *device, mp_error *err)
{
    char cpu[256], date[32], hex[65];
    cpu_model(cpu, sizeof cpu);
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
    long llc = sysconf(_SC_LEVEL3_CACHE_SIZE);
    if (!threads || !cJSON_AddStringToObject(device, "cpu", cpu) ||
        !cJSON_AddNumberToObject(device, "cpu_logical_cores", mp_cpu_count()) ||
        !cJSON_AddNumberToObject(device, "cpu_llc_bytes", llc > 0 ? (double)llc : 0) ||
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

static const char notes_text[] =
    "moeplan calibrate: every point is the median and p75-p25 spread of the recorded repetitions "
    "(device.reps) after unrecorded warm-ups. cpu_expert: one expert's gate+up+SwiGLU+down "
    "(activation quantization included) over `rows` routed rows with the runtime's kernels and "
    "task split, rotating over every expert of every layer of that kind so the weights come from "
    "memory, not the CPU caches (footprint in device.cpu_rotation_bytes). combine: the weighted "
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

mp_status mp_calib_missing(cJSON *missing, const char *what, const char *why, mp_error *err)
{
    cJSON *e = cJSON_CreateObject();
    if (!e || !cJSON_AddStringToObject(e, "what", what) || !cJSON_AddStringToObject(e, "why", why)) {
        cJSON_Delete(e);
        return mp_fail(err, MP_ERR_NOMEM, "calibrate: out of memory");
    }
    cJSON_AddItemToArray(missing, e);
    return MP_OK;
}

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
    /* root owns every part; they are filled in place, in the file's order (the NULL checks of the
     * Add* helpers below cover a failed create: they add nothing and return NULL) */
    cJSON *root = cJSON_CreateObject(), *missing = cJSON_CreateArray();
    cJSON *device = NULL, *cpu = NULL, *combine = NULL, *non_moe = NULL;
    if (!root || !missing || !cJSON_AddStringToObject(root, "format", "moeplan-costs") ||
        !cJSON_AddNumberToObject(root, "version", 1) || !cJSON_AddStringToObject(root, "notes", notes_text) ||
        !(device = cJSON_AddObjectToObject(root, "device")) || !(cpu = cJSON_AddArrayToObject(root, "cpu_expert")) ||
        !(combine = cJSON_AddArrayToObject(root, "combine")) || !(non_moe = cJSON_AddArrayToObject(root, "non_moe"))) {
        st = mp_fail(err, MP_ERR_NOMEM, "calibrate: out of memory");
        goto out;
    }
    if ((st = add_facts(o, m, device, err)))
        goto out;
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
