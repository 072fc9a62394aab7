/* simulator/calibrate.c — what every part of `moeplan calibrate` shares (calibrate_impl.h): the
 * options' defaults, the clock and messages, the statistics of repeated timings and their JSON
 * points, random inputs, the missing list. The run itself is calibrate_run.c; the measurements
 * are calibrate_cpu.c, calibrate_runtime.c and, in the GPU module, gpu/calibrate_cuda.c.
 */
#include "simulator/calibrate.h"

#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "base/clock.h"
#include "kernels/quant.h"
#include "runtime/cpus.h"
#include "simulator/calibrate_impl.h"

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

int64_t mp_calib_rotation(int64_t next, int64_t n_layers, int64_t top_k, int64_t n_expert, int32_t *ids)
{
    const int64_t group = next / n_layers;
    for (int64_t j = 0; j < top_k; j++)
        ids[j] = (int32_t)((group * top_k + j) % n_expert);
    return next % n_layers;
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

double mp_calib_rel_spread(const double *ns, int n)
{
    if (n < 2)
        return 0;
    double *x = malloc((size_t)n * sizeof *x);
    if (!x)
        return 0;
    memcpy(x, ns, (size_t)n * sizeof *x);
    mp_calib_sort(x, n);
    const double med = mp_calib_quantile(x, n, 0.5);
    const double rel = med > 0 ? (mp_calib_quantile(x, n, 0.75) - mp_calib_quantile(x, n, 0.25)) / med : 0;
    free(x);
    return rel;
}

int mp_calib_noisy_points(const double *samples, const int *n, int n_pts, int stride, double max_rel, int max_n,
                          int *idx)
{
    int k = 0;
    for (int i = 0; i < n_pts; i++)
        if (n[i] < max_n && n[i] < stride && mp_calib_rel_spread(samples + (size_t)i * stride, n[i]) > max_rel)
            idx[k++] = i;
    return k;
}

int mp_calib_curve(const mp_calib_opts *o, int n_pts, mp_calib_timing time_point, void *user, double *samples, int *n)
{
    const int stride = MP_CALIB_CURVE_SAMPLES * o->reps;
    for (int i = 0; i < n_pts; i++)
        n[i] = 0;
    for (int pass = -mp_calib_warmups(o); pass < 0; pass++)
        for (int i = 0; i < n_pts; i++)
            time_point(user, i);
    const int64_t t0 = mp_now_ns();
    for (int pass = 0; pass < o->reps; pass++)
        for (int i = 0; i < n_pts; i++)
            samples[(size_t)i * stride + (size_t)n[i]++] = time_point(user, i);
    const int64_t t_extra = mp_now_ns(), recorded_ns = t_extra - t0;
    int idx[MP_CALIB_CURVE_POINTS_MAX];
    while (mp_now_ns() - t_extra < recorded_ns) {
        const int n_noisy = mp_calib_noisy_points(samples, n, n_pts, stride, MP_CALIB_SPREAD_MAX, stride, idx);
        if (!n_noisy)
            break;
        for (int j = 0; j < n_noisy; j++) {
            const int i = idx[j];
            samples[(size_t)i * stride + (size_t)n[i]++] = time_point(user, i);
        }
    }
    int n_more = 0;
    for (int i = 0; i < n_pts; i++)
        n_more += n[i] > o->reps;
    return n_more;
}

double mp_calib_median(double *ns, int n)
{
    mp_calib_sort(ns, n);
    return mp_calib_quantile(ns, n, 0.5);
}

/* median of point i's samples (copied: the samples stay in their order) */
static double point_median(const double *samples, int n, int stride)
{
    double x[64];
    n = n < stride ? n : stride;
    n = n < (int)(sizeof x / sizeof x[0]) ? n : (int)(sizeof x / sizeof x[0]);
    if (n < 1)
        return NAN;
    memcpy(x, samples, (size_t)n * sizeof x[0]);
    return mp_calib_median(x, n);
}

int mp_calib_grid_contenders(const double *samples, const int *n, const int *cold, const int *far, int n_pts,
                             int stride, double margin, bool *keep)
{
    double *med = malloc((size_t)(n_pts > 0 ? n_pts : 1) * sizeof *med);
    int kept = 0;
    for (int i = 0; med && i < n_pts; i++)
        med[i] = point_median(samples + (size_t)i * stride, n[i], stride);
    for (int i = 0; i < n_pts; i++) {
        double least = med ? med[i] : NAN;
        for (int j = 0; med && j < n_pts; j++)
            if (cold[j] == cold[i] && med[j] < least) /* NaN compares false */
                least = med[j];
        /* an unmeasured point (NaN), or no memory to weigh them: every point stays in */
        keep[i] = far[i] <= 0 || !med || !(med[i] > margin * least);
        kept += keep[i];
    }
    free(med);
    return kept;
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
        char quant[MP_EXPERT_QUANT_MAX];
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
    const int ncpu = mp_cpu_threads_default();
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

int mp_calib_warmups(const mp_calib_opts *o)
{
    return o->quick ? 1 : 3;
}
