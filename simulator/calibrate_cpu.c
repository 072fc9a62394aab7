/* simulator/calibrate_cpu.c — the CPU benchmarks of `moeplan calibrate` (see calibrate.h):
 * one expert's FFN vs routed rows and threads, the combine, and the non-MoE time per step.
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

#include "kernels/ops.h"
#include "kernels/quant.h"
#include "runtime/hooks.h"
#include "runtime/gpu.h"
#include "runtime/matmul.h"
#include "runtime/moe.h"
#include "runtime/placement.h"
#include "runtime/session.h"
#include "runtime/threadpool.h"
#include "simulator/calibrate_impl.h"

/* A kind of expert: layers whose expert tensors share types and shape. */
typedef struct expert_kind {
    int gate_type, up_type, down_type;
    int64_t n_embd, n_ff;
    int64_t layers[4096]; /* (n_layers) layer ids of this kind */
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

static int warmups(const mp_calib_opts *o)
{
    return o->quick ? 1 : 3;
}

/* The `concurrent` curve of a CPU entry: mp_moe_experts_cpu — the runtime's own function — over
 * one row routed to k distinct experts, for k in mp_calib_concurrent_ks.
 * Each repetition takes the next k experts of the next layer of the kind, so the weights come from
 * memory. A decode step's CPU experts run as one such call: their threads' start and join, the
 * activation conversion and the combine are paid once, and the experts' weights stream together. */
static mp_status cpu_concurrent(const mp_model *m, const mp_calib_opts *o, const expert_kind *kind, mp_pool *pool,
                                const float *x, float *out, double *ns, int64_t *next, cJSON *entry,
                                const char *quant, mp_error *err)
{
    const int64_t E = m->hp.n_expert, K = m->hp.n_expert_used, words = (E + 63) / 64;
    int ks[MP_CALIB_MAX_KS];
    const int n_ks = mp_calib_concurrent_ks(m, ks);
    mp_moe_scratch *scratch = mp_moe_scratch_new(&m->hp, 1, mp_pool_n_threads(pool));
    int32_t *ids = malloc((size_t)K * sizeof *ids);
    float *w = malloc((size_t)K * sizeof *w);
    uint64_t *resident = malloc((size_t)words * sizeof *resident);
    cJSON *points = cJSON_CreateArray();
    mp_status st = MP_OK;
    if (!scratch || !ids || !w || !resident || !points) {
        st = mp_fail(err, MP_ERR_NOMEM, "calibrate: out of memory");
        goto out;
    }
    for (int ki = 0; ki < n_ks; ki++) {
        const int k = ks[ki];
        for (int64_t j = 0; j < K; j++)
            w[j] = 1.0f / (float)K;
        for (int rep = -warmups(o); rep < o->reps; rep++, (*next)++) {
            const int64_t layer = kind->layers[*next % kind->n_layers];
            /* the row's K routes go to K consecutive ids mod E (distinct, as E >= K); the last
             * K - k are marked resident, as the hybrid runtime marks the GPU's, and skipped */
            memset(resident, 0, (size_t)words * sizeof *resident);
            for (int64_t j = 0; j < K; j++) {
                ids[j] = (int32_t)((*next * K + j) % E);
                if (j >= k)
                    resident[ids[j] / 64] |= 1ull << (ids[j] % 64);
            }
            const int64_t t0 = mp_calib_now_ns();
            mp_moe_experts_cpu(m, layer, x, 1, ids, w, resident, out, pool, scratch);
            if (rep >= 0)
                ns[rep] = (double)(mp_calib_now_ns() - t0);
        }
        cJSON *p = mp_calib_point("experts", k, ns, o->reps);
        if (!p) {
            st = mp_fail(err, MP_ERR_NOMEM, "calibrate: out of memory");
            goto out;
        }
        cJSON_AddItemToArray(points, p);
        mp_calib_say(o, "calibrate: cpu experts %s threads %d, %d experts x 1 row in one call: median %.1f us", quant,
                     mp_pool_n_threads(pool), k, cJSON_GetObjectItem(p, "median_ns")->valuedouble / 1000.0);
    }
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
    double *ns = malloc((size_t)o->reps * sizeof(double));
    cJSON *rot = cJSON_CreateArray();
    mp_status st = MP_OK;
    if (!x || !xq || !gate || !up || !hq || !down || !ns || !rot) {
        st = mp_fail(err, MP_ERR_NOMEM, "calibrate: out of memory for %d rows of experts", max_rows);
        goto out;
    }
    uint64_t rng = 1;
    mp_calib_fill(x, (int64_t)max_rows * D, &rng);
    long llc = sysconf(_SC_LEVEL3_CACHE_SIZE);
    for (int k = 0; k < n_kinds; k++) {
        const expert_kind *kind = &kinds[k];
        char quant[16];
        mp_calib_quant_name(&m->layers[kind->layers[0]], quant);
        const size_t expert_bytes = mp_model_expert_bytes(m, kind->layers[0]);
        const double rotation_bytes = (double)expert_bytes * (double)E * kind->n_layers;
        cJSON_AddItemToArray(rot, cJSON_CreateNumber(rotation_bytes));
        if (llc > 0 && rotation_bytes < 4.0 * (double)llc)
            mp_calib_say(o, "calibrate: note: %s experts total %.1f MiB, under 4x the %.1f MiB last-level cache: "
                            "the CPU expert times are cache-warm, not memory-bound", quant,
                         rotation_bytes / 1048576.0, (double)llc / 1048576.0);
        for (int li = 0; li < kind->n_layers; li++) {
            const mp_layer *L = &m->layers[kind->layers[li]];
            prefault(L->gate_exps.data, L->gate_exps.nbytes);
            prefault(L->up_exps.data, L->up_exps.nbytes);
            prefault(L->down_exps.data, L->down_exps.nbytes);
        }
        int64_t next = 0; /* rotation counter over (layer, expert) of this kind */
        for (int ti = 0; ti < o->n_threads; ti++) {
            const int t = o->threads[ti];
            mp_pool *pool = mp_pool_new(t);
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
            for (int ri = 0; ri < o->n_rows; ri++) {
                expert_bench b = {m, kind, mp_type_ops_get(kind->gate_type), mp_type_ops_get(kind->up_type),
                                  mp_type_ops_get(kind->down_type), 0, 0, o->rows[ri], 0, NULL, 0,
                                  gate, up, NULL, 0, down};
                for (int rep = -warmups(o); rep < o->reps; rep++, next++) {
                    b.layer = kind->layers[(next / E) % kind->n_layers];
                    b.expert = next % E;
                    const int64_t t0 = mp_calib_now_ns();
                    run_expert(&b, pool, x, xq, hq);
                    if (rep >= 0)
                        ns[rep] = (double)(mp_calib_now_ns() - t0);
                }
                cJSON *p = mp_calib_point("rows", o->rows[ri], ns, o->reps);
                if (!p) {
                    mp_pool_free(pool);
                    st = mp_fail(err, MP_ERR_NOMEM, "calibrate: out of memory");
                    goto out;
                }
                cJSON_AddItemToArray(points, p);
                mp_calib_say(o, "calibrate: cpu expert %s %" PRId64 "x%" PRId64 " threads %d rows %d: median %.1f us",
                             quant, D, F, t, o->rows[ri],
                             cJSON_GetObjectItem(p, "median_ns")->valuedouble / 1000.0);
            }
            if (m->hp.n_expert_used >= 2 &&
                (st = cpu_concurrent(m, o, kind, pool, x, down, ns, &next, entry, quant, err))) {
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
    mp_pool *pool = mp_pool_new(t);
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
        for (int rep = -warmups(o); rep < o->reps; rep++) {
            const int64_t t0 = mp_calib_now_ns();
            mp_pool_run(pool, o->rows[ri], combine_task, &c);
            if (rep >= 0)
                ns[rep] = (double)(mp_calib_now_ns() - t0);
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

/* ---- non-MoE time per step ---- */

#define NON_MOE_POINT_NS ((int64_t)20 * 1000000000)

static void add_moe_ns(void *user, int64_t layer, const mp_moe_timing *t)
{
    *(int64_t *)user += t->cpu_expert_ns + t->gpu_expert_ns;
}

/* A GPU-executor session of m with placement option opt (--placement, --placement-file) set to
 * val, sized by sp (n_ctx, n_batch, threads): sp->placement = pl on success; on failure
 * sp->placement is NULL, *s stays NULL and err says why ("placement: ..." when the placement could
 * not be built). */
static mp_status gpu_session_opt(const mp_model *m, const char *opt, const char *val, mp_session_params *sp,
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

/* The same under `--placement spec`. */
static mp_status gpu_session(const mp_model *m, const char *spec, mp_session_params *sp, mp_placement *pl,
                             mp_session **s, mp_error *err)
{
    return gpu_session_opt(m, "--placement", spec, sp, pl, s, err);
}

mp_status mp_calib_non_moe(const mp_model *m, const mp_calib_opts *o, cJSON *arr, cJSON *device,
                           double decode_moe_ns, mp_error *err)
{
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
        if (gpu_session(m, "gpu", &sp, &pl, &s, &perr) != MP_OK) {
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
        /* a big model's long steps take seconds on the CPU: after 3 recorded repetitions a point
         * stops once it has used NON_MOE_POINT_NS, so the default list fits a 10-minute run */
        int n_rec = 0;
        double step_sum = 0, moe_sum = 0;
        const int64_t point_t0 = mp_calib_now_ns();
        for (int rep = -warmups(o); rep < o->reps; rep++) {
            if (n_rec >= 3 && mp_calib_now_ns() - point_t0 > NON_MOE_POINT_NS)
                break;
            if (mp_session_n_past(s) + rows * (gpu ? 2 : 1) > n_ctx)
                mp_session_reset(s);
            for (int i = 0; i < rows; i++) {
                rng = rng * 6364136223846793005ull + 1442695040888963407ull;
                tokens[i] = (int32_t)((rng >> 33) % (uint64_t)m->hp.n_vocab);
            }
            moe_ns = 0;
            const bool modelled = gpu && rows == 1 && decode_moe_ns >= 0;
            if (modelled) { /* what the cost model charges a one-row step's GPU experts */
                moe_ns = (int64_t)decode_moe_ns;
                /* the session starts with the hooks on (the CPU path times its MoE with them): a
                 * hooked step enqueues every layer instead of replaying graphs, and its timing
                 * hook would add the measured MoE time on top of the modelled one */
                mp_session_set_hooks(s, NULL);
            } else if (gpu) { /* the MoE kernels' GPU time, from a step with the timing hooks */
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
            if (modelled && moe_ns != (int64_t)decode_moe_ns) {
                st = mp_fail(err, MP_ERR_INTERNAL, "calibrate: the one-row non-MoE step ran with timing hooks");
                goto out;
            }
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

/* ---- the round trip, as the runtime pays it ---- */

mp_status mp_calib_runtime_sync(const mp_model *m, const mp_calib_opts *o, cJSON *root, cJSON *device,
                                mp_error *err)
{
    char why[256];
    if (!mp_gpu_available(why, sizeof why) || !cJSON_GetObjectItemCaseSensitive(root, "sync"))
        return MP_OK;
    enum { STEPS = 8 }; /* decode steps per repetition */
    const int t = o->threads[o->n_threads - 1];
    const int64_t n_ctx = 256;
    mp_placement pl = {0};
    mp_session *s = NULL;
    mp_status st = MP_OK;
    mp_error perr;
    float *logits = malloc((size_t)m->hp.n_vocab * sizeof(float));
    double *ns = malloc((size_t)o->reps * sizeof(double));
    if (!logits || !ns) {
        st = mp_fail(err, MP_ERR_NOMEM, "calibrate: out of memory");
        goto out;
    }
    mp_session_params sp = {.n_ctx = n_ctx, .n_threads = t, .n_batch = 8};
    if (gpu_session(m, "layers:1", &sp, &pl, &s, &perr) != MP_OK) {
        mp_calib_say(o, "calibrate: the runtime's round trip was not measured (%s); sync is the "
                        "microbenchmark's", perr.msg);
        goto out;
    }
    mp_gpu *g = mp_session_gpu(s);
    mp_gpu_set_measure(g, true);
    uint64_t rng = 5;
    int32_t tok = 1;
    for (int rep = -warmups(o); rep < o->reps; rep++) {
        if (mp_session_n_past(s) + STEPS > n_ctx)
            mp_session_reset(s);
        mp_gpu_stats_reset(g);
        for (int i = 0; i < STEPS; i++) {
            rng = rng * 6364136223846793005ull + 1442695040888963407ull;
            tok = (int32_t)((rng >> 33) % (uint64_t)m->hp.n_vocab);
            if ((st = mp_session_eval(s, &tok, 1, false, logits, err)))
                goto out;
        }
        mp_gpu_stats gs;
        mp_gpu_get_stats(g, &gs);
        if (gs.rt_measured < 1) {
            mp_calib_say(o, "calibrate: the runtime's round trip was not measured (no hybrid layer step timed); "
                            "sync is the microbenchmark's");
            goto out;
        }
        if (rep >= 0)
            ns[rep] = (double)gs.rt_overhead_ns / (double)gs.rt_measured;
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
    mp_session_free(s);
    mp_placement_free(&pl);
    free(logits);
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
    mp_status st = logits ? gpu_session_opt(m, opt, val, &sp, &pl, &s, err)
                          : mp_fail(err, MP_ERR_NOMEM, "calibrate: out of memory");
    int32_t tok = 1;
    for (int rep = -warmups(o) - 1; !st && rep < o->reps; rep++) { /* one more warm-up: graph capture */
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
