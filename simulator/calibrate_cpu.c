/* simulator/calibrate_cpu.c — the CPU benchmarks of `moeplan calibrate` (see calibrate.h):
 * one expert's FFN vs routed rows and threads, and the combine. (What is measured through the
 * runtime's own forward pass is in calibrate_runtime.c.)
 *
 * The expert benchmark does what runtime/moe_cpu.c does for one active expert, with the same
 * kernels and the same task split: activations converted once to the gate's vec_dot_type, one
 * pool region for gate + up + SwiGLU over chunks of n_ff output rows, the hidden converted to
 * the down's vec_dot_type, one region for down over chunks of n_embd rows. Each repetition runs
 * a different expert, stepping through every expert of every layer of the same kind, so that
 * between two uses of one expert's weights the whole kind's experts (device.cpu_rotation_bytes,
 * GiBs on real models) stream through the caches: the numbers are memory-bound like a decode
 * step's, not cache-flattered. A model smaller than a few LLCs cannot be cold; calibrate says so.
 *
 * Invariant: the rows and threads of every point are the options' lists, so every curve's x is
 * strictly increasing (the options are sorted and free of repeats).
 */
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "base/machine.h"
#include "kernels/ops.h"
#include "kernels/quant.h"
#include "runtime/hooks.h"
#include "runtime/gpu.h"
#include "runtime/matmul.h"
#include "runtime/model.h"
#include "runtime/moe.h"
#include "runtime/placement.h"
#include "runtime/session.h"
#include "runtime/threadpool.h"
#include "simulator/calibrate_impl.h"

/* A kind of expert: layers whose expert tensors share types and shape. */
typedef struct expert_kind {
    int gate_type, up_type, down_type;
    int64_t n_embd, n_ff;
    int64_t layers[MP_MODEL_MAX_LAYERS]; /* (n_layers) layer ids of this kind */
    int n_layers;
} expert_kind;

typedef struct expert_bench {
    const mp_model *m;
    const expert_kind *kind;
    const mp_type_ops *gate_ops, *up_ops, *down_ops;
    int64_t layer, expert, rows, chunk;
    const char *xq;       /* (rows, x_row_bytes) activations in the gate's vec_dot_type */
    size_t x_row_bytes;
    float *gate, *up;     /* (rows, n_ff) gate outputs (then SwiGLU hidden), up outputs */
    const char *hq;       /* (rows, h_row_bytes) hidden in the down's vec_dot_type */
    size_t h_row_bytes;
    float *down;          /* (rows, n_embd) expert output */
} expert_bench;

static void slice(const mp_type_ops *ops, const mp_tensor *t, int64_t e, int64_t r0, int64_t r1, const char *x,
                  size_t x_row_bytes, int64_t n_x, float *y, int64_t y_stride)
{
    const void *w = mp_expert_slice(t, e);
    if (n_x == 1)
        mp_gemv_rows(ops, w, t->row_bytes, t->ne[0], r0, r1, x, y + r0);
    else
        mp_gemm_rows(ops, w, t->row_bytes, t->ne[0], r0, r1, x, x_row_bytes, n_x, y + r0, y_stride);
}

static void gate_up_task(void *ctx, int64_t task, int thread)
{
    const expert_bench *b = ctx;
    const mp_layer *L = &b->m->layers[b->layer];
    const int64_t F = b->kind->n_ff, r0 = task * b->chunk, r1 = r0 + b->chunk < F ? r0 + b->chunk : F;
    slice(b->gate_ops, &L->gate_exps, b->expert, r0, r1, b->xq, b->x_row_bytes, b->rows, b->gate, F);
    slice(b->up_ops, &L->up_exps, b->expert, r0, r1, b->xq, b->x_row_bytes, b->rows, b->up, F);
    for (int64_t i = 0; i < b->rows; i++)
        mp_swiglu(b->gate + i * F + r0, b->gate + i * F + r0, b->up + i * F + r0, r1 - r0);
}

static void down_task(void *ctx, int64_t task, int thread)
{
    const expert_bench *b = ctx;
    const mp_layer *L = &b->m->layers[b->layer];
    const int64_t D = b->kind->n_embd, r0 = task * b->chunk, r1 = r0 + b->chunk < D ? r0 + b->chunk : D;
    slice(b->down_ops, &L->down_exps, b->expert, r0, r1, b->hq, b->h_row_bytes, b->rows, b->down, D);
}

/* One expert over b->rows rows of x (rows, n_embd) f32: what a CPU miss costs, conversions included. */
static void run_expert(expert_bench *b, mp_pool *pool, const float *x, char *xq, char *hq)
{
    const int64_t D = b->kind->n_embd, F = b->kind->n_ff;
    const int n_threads = mp_pool_n_threads(pool);
    const int x_vdt = b->gate_ops->vec_dot_type, h_vdt = b->down_ops->vec_dot_type;
    b->x_row_bytes = mp_type_row_bytes(x_vdt, D);
    if (x_vdt == MP_TYPE_F32) {
        b->xq = (const char *)x;
    } else {
        mp_act_quantize(pool, x_vdt, x, D, b->rows, D, xq);
        b->xq = xq;
    }
    b->chunk = mp_matmul_chunk_rows(F, n_threads);
    mp_pool_run(pool, (F + b->chunk - 1) / b->chunk, gate_up_task, b);
    b->h_row_bytes = mp_type_row_bytes(h_vdt, F);
    if (h_vdt == MP_TYPE_F32) {
        b->hq = (const char *)b->gate;
    } else {
        mp_act_quantize(pool, h_vdt, b->gate, F, b->rows, F, hq);
        b->hq = hq;
    }
    b->chunk = mp_matmul_chunk_rows(D, n_threads);
    mp_pool_run(pool, (D + b->chunk - 1) / b->chunk, down_task, b);
}

/* The `points` curve's timing of point i (mp_calib_curve): one expert over o->rows[i] rows, the next
 * expert of the rotation over the kind's layers, so the weights come from memory. */
typedef struct rows_run {
    expert_bench b;
    const mp_calib_opts *o;
    mp_pool *pool;
    const float *x;
    char *xq, *hq;
    int64_t *next;
} rows_run;

static double time_rows(void *user, int i)
{
    rows_run *r = user;
    const int64_t E = r->b.m->hp.n_expert, next = (*r->next)++;
    r->b.rows = r->o->rows[i];
    r->b.layer = r->b.kind->layers[(next / E) % r->b.kind->n_layers];
    r->b.expert = next % E;
    const int64_t t0 = mp_now_ns();
    run_expert(&r->b, r->pool, r->x, r->xq, r->hq);
    return (double)(mp_now_ns() - t0);
}

/* a point's progress line's tail where it took more than --reps samples */
static const char *more_note(int n)
{
    static char note[64];
    snprintf(note, sizeof note, " (%d samples)", n);
    return note;
}

static void say_more(const mp_calib_opts *o, int n_more, const char *curve)
{
    if (n_more)
        mp_calib_say(o, "calibrate: %d point(s) of the %s curve spread more than %.0f %% of their median over %d "
                        "repetitions and took more, interleaved, up to %d", n_more, curve, 100 * MP_CALIB_SPREAD_MAX,
                     o->reps, MP_CALIB_CURVE_SAMPLES * o->reps);
}

/* The `concurrent` curve of a CPU entry: mp_moe_experts_cpu — the runtime's own function — over
 * one row routed to k distinct experts, for k in mp_calib_concurrent_ks, the points timed in turn
 * (mp_calib_curve). Each call takes the next layer of the kind and, after each pass over the layers,
 * the next group of experts, so the weights come from memory. A decode step's CPU experts run as one
 * such call: their threads' start and join, the activation conversion and the combine are paid
 * once, and the experts' weights stream together. */
typedef struct concurrent_run {
    const mp_model *m;
    const expert_kind *kind;
    mp_pool *pool;
    mp_moe_scratch *scratch;
    const float *x;
    float *out;
    const int *ks;
    int32_t *ids;
    float *w;
    uint64_t *resident;
    int64_t *next;
} concurrent_run;

/* point i: the row's K routes on the rotation's next K experts (mp_calib_rotation); the last K - ks[i]
 * are marked resident, as the hybrid runtime marks the GPU's, and skipped */
static double time_concurrent(void *user, int i)
{
    concurrent_run *r = user;
    const int64_t E = r->m->hp.n_expert, K = r->m->hp.n_expert_used;
    const int64_t layer = r->kind->layers[mp_calib_rotation((*r->next)++, r->kind->n_layers, K, E, r->ids)];
    memset(r->resident, 0, (size_t)((E + 63) / 64) * sizeof *r->resident);
    for (int64_t j = r->ks[i]; j < K; j++)
        r->resident[r->ids[j] / 64] |= 1ull << (r->ids[j] % 64);
    const int64_t t0 = mp_now_ns();
    mp_moe_experts_cpu(r->m, layer, r->x, 1, r->ids, r->w, r->resident, NULL, NULL, r->out, r->pool, r->scratch);
    return (double)(mp_now_ns() - t0);
}

static mp_status cpu_concurrent(const mp_model *m, const mp_calib_opts *o, const expert_kind *kind, mp_pool *pool,
                                const float *x, float *out, double *ns, int *n_ns, int64_t *next, cJSON *entry,
                                const char *quant, mp_error *err)
{
    const int64_t E = m->hp.n_expert, K = m->hp.n_expert_used, words = (E + 63) / 64;
    const int stride = MP_CALIB_CURVE_SAMPLES * o->reps;
    int ks[MP_CALIB_MAX_KS];
    const int n_ks = mp_calib_concurrent_ks(m, ks);
    mp_moe_scratch *scratch = mp_moe_scratch_new(&m->hp, 1, mp_pool_n_threads(pool), o->knobs);
    int32_t *ids = malloc((size_t)K * sizeof *ids);
    float *w = malloc((size_t)K * sizeof *w);
    uint64_t *resident = malloc((size_t)words * sizeof *resident);
    cJSON *points = cJSON_CreateArray();
    mp_status st = MP_OK;
    if (!scratch || !ids || !w || !resident || !points) {
        st = mp_fail(err, MP_ERR_NOMEM, "calibrate: out of memory");
        goto out;
    }
    for (int64_t j = 0; j < K; j++)
        w[j] = 1.0f / (float)K;
    concurrent_run r = {m, kind, pool, scratch, x, out, ks, ids, w, resident, next};
    const int n_more = mp_calib_curve(o, n_ks, time_concurrent, &r, ns, n_ns);
    for (int ki = 0; ki < n_ks; ki++) {
        cJSON *p = mp_calib_point("experts", ks[ki], ns + (size_t)ki * stride, n_ns[ki]);
        if (!p) {
            st = mp_fail(err, MP_ERR_NOMEM, "calibrate: out of memory");
            goto out;
        }
        cJSON_AddItemToArray(points, p);
        mp_calib_say(o, "calibrate: cpu experts %s threads %d, %d experts x 1 row in one call: median %.1f us%s", quant,
                     mp_pool_n_threads(pool), ks[ki], cJSON_GetObjectItem(p, "median_ns")->valuedouble / 1000.0,
                     n_ns[ki] > o->reps ? more_note(n_ns[ki]) : "");
    }
    say_more(o, n_more, "concurrent experts");
    cJSON_AddItemToObject(entry, "concurrent", points);
    points = NULL;
out:
    cJSON_Delete(points);
    mp_moe_scratch_free(scratch);
    free(ids);
    free(w);
    free(resident);
    return st;
}

/* Map every page of [p, p + n) into this process: the model is mmap'd, and a page the process has
 * not touched yet costs a page fault on first use. The runtime's steady state has taken those
 * faults long ago (the GPU executor even page-locks host experts at start), but a benchmark that
 * rotates over thousands of experts would take one per 4 KiB in every repetition and measure
 * the kernel's fault path instead of the expert. MADV_POPULATE_READ (Linux 5.14) does it in one
 * call; elsewhere a read of one byte per page does. */
#ifndef MADV_POPULATE_READ
#define MADV_POPULATE_READ 22
#endif
static void prefault(const void *p, size_t n)
{
    const size_t page = (size_t)sysconf(_SC_PAGESIZE);
    uintptr_t a = (uintptr_t)p & ~(uintptr_t)(page - 1), end = (uintptr_t)p + n;
    if (madvise((void *)a, end - a, MADV_POPULATE_READ) == 0)
        return;
    volatile unsigned char sink = 0;
    for (; a < end; a += page)
        sink ^= *(const volatile unsigned char *)(a < (uintptr_t)p ? (uintptr_t)p : a);
    (void)sink;
}

void mp_calib_prefault_experts(const mp_layer *L)
{
    prefault(L->gate_exps.data, L->gate_exps.nbytes);
    prefault(L->up_exps.data, L->up_exps.nbytes);
    prefault(L->down_exps.data, L->down_exps.nbytes);
}

static int find_kinds(const mp_model *m, expert_kind *kinds, int max_kinds)
{
    int n = 0;
    for (int64_t il = 0; il < m->hp.n_layer; il++) {
        const mp_layer *L = &m->layers[il];
        int k = 0;
        while (k < n && !(kinds[k].gate_type == L->gate_exps.type && kinds[k].up_type == L->up_exps.type &&
                          kinds[k].down_type == L->down_exps.type))
            k++;
        if (k == n) {
            if (n == max_kinds)
                continue; /* more kinds than any quant mix makes: the first ones are measured */
            kinds[n] = (expert_kind){L->gate_exps.type, L->up_exps.type, L->down_exps.type, m->hp.n_embd,
                                     m->hp.n_ff_exp, {0}, 0};
            n++;
        }
        if (kinds[k].n_layers < (int)(sizeof kinds[k].layers / sizeof kinds[k].layers[0]))
            kinds[k].layers[kinds[k].n_layers++] = il;
    }
    return n;
}

mp_status mp_calib_cpu_experts(const mp_model *m, const mp_calib_opts *o, cJSON *arr, cJSON *device,
                               mp_error *err)
{
    enum { MAX_KINDS = 8 };
    expert_kind *kinds = calloc(MAX_KINDS, sizeof *kinds);
    if (!kinds)
        return mp_fail(err, MP_ERR_NOMEM, "calibrate: out of memory");
    const int n_kinds = find_kinds(m, kinds, MAX_KINDS);
    const int64_t D = m->hp.n_embd, F = m->hp.n_ff_exp, E = m->hp.n_expert;
    const int max_rows = o->rows[o->n_rows - 1];
    float *x = malloc((size_t)max_rows * (size_t)D * sizeof(float));              /* (max_rows, D) */
    char *xq = malloc((size_t)max_rows * mp_act_row_bytes_max(D));                  /* (max_rows, D act) */
    float *gate = malloc((size_t)max_rows * (size_t)F * sizeof(float));             /* (max_rows, F) */
    float *up = malloc((size_t)max_rows * (size_t)F * sizeof(float));               /* (max_rows, F) */
    char *hq = malloc((size_t)max_rows * mp_act_row_bytes_max(F));                  /* (max_rows, F act) */
    float *down = malloc((size_t)max_rows * (size_t)D * sizeof(float));             /* (max_rows, D) */
    const int stride = MP_CALIB_CURVE_SAMPLES * o->reps;
    double *ns = malloc((size_t)MP_CALIB_CURVE_POINTS_MAX * (size_t)stride * sizeof(double));
    int n_ns[MP_CALIB_CURVE_POINTS_MAX];
    cJSON *rot = cJSON_CreateArray();
    mp_status st = MP_OK;
    if (!x || !xq || !gate || !up || !hq || !down || !ns || !rot) {
        st = mp_fail(err, MP_ERR_NOMEM, "calibrate: out of memory for %d rows of experts", max_rows);
        goto out;
    }
    uint64_t rng = 1;
    mp_calib_fill(x, (int64_t)max_rows * D, &rng);
    const size_t llc = mp_cpu_llc_bytes();
    for (int k = 0; k < n_kinds; k++) {
        const expert_kind *kind = &kinds[k];
        char quant[MP_EXPERT_QUANT_MAX];
        mp_model_expert_quant(&m->layers[kind->layers[0]], quant);
        const size_t expert_bytes = mp_model_expert_bytes(m, kind->layers[0]);
        const double rotation_bytes = (double)expert_bytes * (double)E * kind->n_layers;
        cJSON_AddItemToArray(rot, cJSON_CreateNumber(rotation_bytes));
        if (llc > 0 && rotation_bytes < MP_CALIB_LLC_MEMORY * (double)llc)
            mp_calib_say(o, "calibrate: note: %s experts total %.1f MiB, under %dx the %.1f MiB last-level cache: "
                            "the CPU expert times are cache-warm, not memory-bound", quant,
                         rotation_bytes / 1048576.0, MP_CALIB_LLC_MEMORY, (double)llc / 1048576.0);
        for (int li = 0; li < kind->n_layers; li++)
            mp_calib_prefault_experts(&m->layers[kind->layers[li]]);
        int64_t next = 0; /* rotation counter over (layer, expert) of this kind */
        for (int ti = 0; ti < o->n_threads; ti++) {
            const int t = o->threads[ti];
            mp_pool *pool = mp_pool_new(t, o->knobs && o->knobs->pool_pin);
            cJSON *entry = cJSON_CreateObject(), *points = cJSON_CreateArray();
            if (!pool || !entry || !points || !cJSON_AddStringToObject(entry, "quant", quant) ||
                !cJSON_AddNumberToObject(entry, "n_embd", (double)D) ||
                !cJSON_AddNumberToObject(entry, "n_ff", (double)F) ||
                !cJSON_AddNumberToObject(entry, "expert_bytes", (double)expert_bytes) ||
                !cJSON_AddNumberToObject(entry, "threads", t)) {
                mp_pool_free(pool);
                cJSON_Delete(entry);
                cJSON_Delete(points);
                st = mp_fail(err, MP_ERR_NOMEM, "calibrate: out of memory (thread pool of %d)", t);
                goto out;
            }
            cJSON_AddItemToObject(entry, "points", points);
            cJSON_AddItemToArray(arr, entry);
            rows_run rr = {{m, kind, mp_type_ops_get(kind->gate_type), mp_type_ops_get(kind->up_type),
                            mp_type_ops_get(kind->down_type), 0, 0, 0, 0, NULL, 0, gate, up, NULL, 0, down},
                           o, pool, x, xq, hq, &next};
            const int n_more = mp_calib_curve(o, o->n_rows, time_rows, &rr, ns, n_ns);
            for (int ri = 0; ri < o->n_rows; ri++) {
                cJSON *p = mp_calib_point("rows", o->rows[ri], ns + (size_t)ri * stride, n_ns[ri]);
                if (!p) {
                    mp_pool_free(pool);
                    st = mp_fail(err, MP_ERR_NOMEM, "calibrate: out of memory");
                    goto out;
                }
                cJSON_AddItemToArray(points, p);
                mp_calib_say(o, "calibrate: cpu expert %s %" PRId64 "x%" PRId64 " threads %d rows %d: median %.1f us%s",
                             quant, D, F, t, o->rows[ri], cJSON_GetObjectItem(p, "median_ns")->valuedouble / 1000.0,
                             n_ns[ri] > o->reps ? more_note(n_ns[ri]) : "");
            }
            say_more(o, n_more, "rows");
            if (m->hp.n_expert_used >= 2 &&
                (st = cpu_concurrent(m, o, kind, pool, x, down, ns, n_ns, &next, entry, quant, err))) {
                mp_pool_free(pool);
                goto out;
            }
            mp_pool_free(pool);
        }
    }
    cJSON_AddItemToObject(device, "cpu_rotation_bytes", rot);
    rot = NULL;
out:
    cJSON_Delete(rot);
    free(kinds);
    free(x);
    free(xq);
    free(gate);
    free(up);
    free(hq);
    free(down);
    free(ns);
    return st;
}

/* ---- combine ---- */

typedef struct combine_bench {
    const float *parts;   /* (rows * top_k, n_embd) expert outputs, slot-major per row */
    const float *weights; /* (rows, top_k) */
    float *out;           /* (rows, n_embd) */
    int64_t n_embd, top_k;
} combine_bench;

static void combine_task(void *ctx, int64_t row, int thread)
{
    const combine_bench *c = ctx;
    float *o = c->out + row * c->n_embd;
    memset(o, 0, (size_t)c->n_embd * sizeof *o);
    for (int64_t k = 0; k < c->top_k; k++)
        mp_axpy(o, c->weights[row * c->top_k + k], c->parts + (row * c->top_k + k) * c->n_embd, c->n_embd);
}

mp_status mp_calib_combine(const mp_model *m, const mp_calib_opts *o, cJSON *arr, mp_error *err)
{
    const int64_t D = m->hp.n_embd, K = m->hp.n_expert_used;
    const int max_rows = o->rows[o->n_rows - 1], t = o->threads[o->n_threads - 1];
    float *parts = malloc((size_t)max_rows * (size_t)K * (size_t)D * sizeof(float));
    float *weights = malloc((size_t)max_rows * (size_t)K * sizeof(float));
    float *out = malloc((size_t)max_rows * (size_t)D * sizeof(float));
    double *ns = malloc((size_t)o->reps * sizeof(double));
    mp_pool *pool = mp_pool_new(t, o->knobs && o->knobs->pool_pin);
    mp_status st = MP_OK;
    if (!parts || !weights || !out || !ns || !pool) {
        st = mp_fail(err, MP_ERR_NOMEM, "calibrate: out of memory for the combine of %d rows", max_rows);
        goto out;
    }
    uint64_t rng = 2;
    mp_calib_fill(parts, (int64_t)max_rows * K * D, &rng);
    mp_calib_fill(weights, (int64_t)max_rows * K, &rng);
    for (int ri = 0; ri < o->n_rows; ri++) {
        combine_bench c = {parts, weights, out, D, K};
        for (int rep = -mp_calib_warmups(o); rep < o->reps; rep++) {
            const int64_t t0 = mp_now_ns();
            mp_pool_run(pool, o->rows[ri], combine_task, &c);
            if (rep >= 0)
                ns[rep] = (double)(mp_now_ns() - t0);
        }
        cJSON *p = mp_calib_point("rows", o->rows[ri], ns, o->reps);
        if (!p) {
            st = mp_fail(err, MP_ERR_NOMEM, "calibrate: out of memory");
            goto out;
        }
        cJSON_AddItemToArray(arr, p);
        mp_calib_say(o, "calibrate: combine top-%" PRId64 " x %" PRId64 " threads %d rows %d: median %.1f us", K, D, t,
                     o->rows[ri], cJSON_GetObjectItem(p, "median_ns")->valuedouble / 1000.0);
    }
out:
    mp_pool_free(pool);
    free(parts);
    free(weights);
    free(out);
    free(ns);
    return st;
}
