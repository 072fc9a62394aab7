/* runtime/moe_cpu.c — the MoE block on the CPU (see moe.h).
 *
 *   router:   logits (n_rows, n_expert) = x · gate_inpᵀ (+ bias); softmax over all experts (f32);
 *             top-k (ties to the lower id); renormalize the k weights if expert_weights_norm.
 *             A route source, when set, replaces all of this.
 *   group:    the n_rows × top_k (row, slot) routes are sorted by expert ("entries"), so that
 *             an expert's rows are contiguous and its weights are streamed once per call.
 *   experts:  one pool region for gate+up+SwiGLU over (expert, chunk of n_ff rows) tasks, one for
 *             down over (expert, chunk of n_embd rows) tasks: a prefill batch reuses each weight
 *             row for all of the expert's rows (mp_gemm_rows). Up to MP_MOE_PIPE_ROWS rows (decode)
 *             run both in ONE region instead ("pipelined"): the threads claim gate/up units, then
 *             down units; the thread that finishes an expert's last gate/up unit converts its
 *             hidden rows, and that expert's down units may start while other experts' gate/up
 *             still run. No barrier between the halves, so the memory stays busy through the
 *             step (a decode step spreads each expert over all threads either way). A half's
 *             units are about MP_MOE_PIPE_UNITS a thread, of at least 16 rows, at most
 *             MP_MOE_UNIT_MAX_KB of weights above that, and at least MP_MOE_UNIT_KB while every
 *             thread still has one.
 *             Expert biases (gpt-oss) are added to gate and up before the activation (the
 *             architecture's, mp_ffn_act) and to down in the combine.
 *   combine:  out[row] = Σ_k weight[row, k] · (down[entry(row, k)] + down bias of its expert), in
 *             slot order, in float32.
 *             Pipelined, every expert's down units cut n_embd at the same rows, and the thread
 *             that finishes the last unit of a row range combines that range (no pass over all
 *             of out on the caller after the region, reading rows the other cores wrote).
 *   part:     a call's split route (mp_moe_part) keeps its expert's FFN rows [0, ff_rows). Its
 *             units are cut as any expert's (the pipelined counts stay per unit) and carry the
 *             expert's ff_rows: a gate/up unit clamps its rows to it (one past it computes
 *             nothing), a down unit dots the first ff_rows columns, and only the first ff_rows
 *             hidden values are converted.
 *
 * Invariants: offset[e] .. offset[e] + count[e] are expert e's entries; entry_of[row * top_k + k]
 * is the entry of (row, slot k); every expert slice is read by exactly one task per region part;
 * an entry's gate and hidden values are written (and read) below its expert's ff_rows only.
 * The whole decode step's time is here and in matmul.c: expert weights dominate the bytes.
 */
#include <assert.h>
#include <inttypes.h>
#include <math.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/bits.h"
#include "kernels/ops.h"
#include "kernels/quant.h"
#include "runtime/decide.h"
#include "runtime/matmul.h"
#include "runtime/moe.h"
#include "base/clock.h"
#include "base/knobs.h"
#include "runtime/threadpool.h"

typedef struct expert_task {
    int32_t expert;
    int64_t first, cnt; /* the expert's entries */
    int64_t r0, r1;     /* output rows of the expert matrix */
    int64_t ff_rows;    /* the expert's FFN rows computed: n_ff, or a part's ff_rows */
} expert_task;

/* A pipelined call's plan, all the workers read of the caller's bookkeeping (a few cache lines:
 * the caller rewrites it every call, and lines the workers have read cost it a transfer each). */
typedef struct pipe_expert {
    int32_t expert;
    int64_t first, cnt;
    int64_t ff_rows;    /* n_ff, or a part's ff_rows */
} pipe_expert;

struct mp_moe_scratch {
    int64_t max_rows, n_embd, n_ff, n_expert, top_k;
    int n_threads;
    float *router;       /* (max_rows, n_expert) logits, then probabilities */
    int32_t *ids;        /* (max_rows, top_k) chosen experts */
    float *weights;      /* (max_rows, top_k) their combine weights */
    uint8_t *served;     /* (max_rows, top_k) MP_SERVED_CPU: the hooks' served codes, every route's */
    int64_t *count;      /* (n_expert) entries routed to each expert */
    int64_t *offset;     /* (n_expert + 1) first entry of each expert */
    int64_t *entry_row;  /* (max_rows * top_k) entry -> source row */
    int64_t *entry_of;   /* (max_rows * top_k) row * top_k + slot -> entry */
    char *xq;            /* (max_rows, act bytes of n_embd) x in the gate/up vec_dot_type */
    char *xg;            /* (max_rows * top_k, act bytes of n_embd) xq rows gathered by entry */
    float *gate;         /* (max_rows * top_k, n_ff) gate outputs, then SwiGLU hidden (a part's
                          * entries: the first ff_rows of each row) */
    float *up;           /* (max_rows * top_k, n_ff) */
    char *hq;            /* (max_rows * top_k, act bytes of n_ff) hidden in the down vec_dot_type */
    float *down;         /* (max_rows * top_k, n_embd) expert outputs */
    expert_task *tasks;  /* (2 * max_tasks): a region's tasks (two-region calls) */
    pipe_expert *active; /* (max_rows * top_k) pipelined: the active experts, by id */
    int64_t max_tasks;
    atomic_int *left;    /* (n_expert) pipelined: gate/up units of active expert a not yet finished */
    atomic_int *ready;   /* (n_expert) pipelined: active expert a's hidden rows are converted */
    atomic_int *range_left; /* (n_embd / 16 + 1) pipelined: down units of the row range not yet done */
    bool pipelined;      /* calls of up to MP_MOE_PIPE_ROWS rows take one region (see above) */
    int pipe_units;      /* units per thread of each pipelined half (MP_MOE_PIPE_UNITS) */
    int64_t unit_bytes;  /* the least weight bytes of a pipelined unit (MP_MOE_UNIT_KB; 0: none) */
    int64_t unit_max_bytes; /* the most, above 16 rows (MP_MOE_UNIT_MAX_KB; 0: none) */
    /* profiling (mp_moe_scratch_profile): the sums, and per pipelined task (= pool thread) its
     * start, the end of its gate/up units, its down units' time, its ready waits and its end */
    mp_moe_cpu_profile *prof;
    int64_t (*ptimes)[5];
};

/* Rows up to which a call runs its experts in one pipelined region (the units per thread each
 * half is cut into there: MP_MOE_PIPE_UNITS; more units, a shorter tail when the threads run at
 * uneven speeds). */
#define MP_MOE_PIPE_ROWS 4
#define MP_MOE_PROFILE_TASKS 1024

void mp_moe_scratch_free(mp_moe_scratch *s)
{
    if (!s)
        return;
    free(s->router);
    free(s->ids);
    free(s->weights);
    free(s->served);
    free(s->count);
    free(s->offset);
    free(s->entry_row);
    free(s->entry_of);
    free(s->xq);
    free(s->xg);
    free(s->gate);
    free(s->up);
    free(s->hq);
    free(s->down);
    free(s->tasks);
    free(s->active);
    free(s->left);
    free(s->ready);
    free(s->range_left);
    free(s->prof);
    free(s->ptimes);
    free(s);
}

mp_moe_scratch *mp_moe_scratch_new(const mp_hparams *hp, int64_t max_rows, int n_threads, const mp_knobs *knobs)
{
    mp_knobs defaults;
    knobs = mp_knobs_or_defaults(knobs, &defaults);
    mp_moe_scratch *s = calloc(1, sizeof *s);
    if (!s || max_rows < 1)
        return s ? (free(s), NULL) : NULL;
    s->max_rows = max_rows;
    s->n_embd = hp->n_embd;
    s->n_ff = hp->n_ff_exp;
    s->n_expert = hp->n_expert;
    s->top_k = hp->n_expert_used;
    s->n_threads = n_threads;
    const size_t entries = (size_t)max_rows * (size_t)hp->n_expert_used;
    const int64_t widest = hp->n_ff_exp > hp->n_embd ? hp->n_ff_exp : hp->n_embd;
    s->max_tasks = hp->n_expert * ((widest + 15) / 16); /* chunks are >= 16 rows */
    s->router = malloc((size_t)max_rows * (size_t)hp->n_expert * sizeof(float));
    s->ids = malloc(entries * sizeof(int32_t));
    s->weights = malloc(entries * sizeof(float));
    s->served = malloc(entries);
    s->count = malloc((size_t)hp->n_expert * sizeof(int64_t));
    s->offset = malloc(((size_t)hp->n_expert + 1) * sizeof(int64_t));
    s->entry_row = malloc(entries * sizeof(int64_t));
    s->entry_of = malloc(entries * sizeof(int64_t));
    s->xq = malloc((size_t)max_rows * mp_act_row_bytes_max(hp->n_embd));
    s->xg = malloc(entries * mp_act_row_bytes_max(hp->n_embd));
    s->gate = malloc(entries * (size_t)hp->n_ff_exp * sizeof(float));
    s->up = malloc(entries * (size_t)hp->n_ff_exp * sizeof(float));
    s->hq = malloc(entries * mp_act_row_bytes_max(hp->n_ff_exp));
    s->down = malloc(entries * (size_t)hp->n_embd * sizeof(float));
    s->tasks = malloc(2 * (size_t)s->max_tasks * sizeof(expert_task));
    s->active = malloc(entries * sizeof *s->active);
    s->left = malloc((size_t)hp->n_expert * sizeof *s->left);
    s->ready = malloc((size_t)hp->n_expert * sizeof *s->ready);
    s->range_left = malloc((size_t)(hp->n_embd / 16 + 1) * sizeof *s->range_left);
    s->pipelined = true;
    if (knobs->moe_cpu_profile)
        mp_moe_scratch_profile(s, true); /* out of memory: no profile, said by its absence */
    s->pipe_units = (int)knobs->moe_pipe_units; /* A/B of the units per thread */
    s->unit_bytes = knobs->moe_unit_kb * 1024;
    s->unit_max_bytes = knobs->moe_unit_max_kb * 1024;
    if (!s->router || !s->ids || !s->weights || !s->served || !s->count || !s->offset || !s->entry_row ||
        !s->entry_of || !s->xq || !s->xg || !s->gate || !s->up || !s->hq || !s->down || !s->tasks || !s->active ||
        !s->left || !s->ready || !s->range_left) {
        mp_moe_scratch_free(s);
        return NULL;
    }
    memset(s->served, MP_SERVED_CPU, entries);
    return s;
}

void mp_moe_scratch_set_pipelined(mp_moe_scratch *s, bool on)
{
    s->pipelined = on;
}

bool mp_moe_scratch_profile(mp_moe_scratch *s, bool on)
{
    if (!on) {
        free(s->prof);
        free(s->ptimes);
        s->prof = NULL;
        s->ptimes = NULL;
        return true;
    }
    if (!s->prof)
        s->prof = malloc(sizeof *s->prof);
    if (!s->ptimes)
        s->ptimes = malloc(MP_MOE_PROFILE_TASKS * sizeof *s->ptimes);
    if (!s->prof || !s->ptimes)
        return mp_moe_scratch_profile(s, false), false;
    memset(s->prof, 0, sizeof *s->prof);
    return true;
}

bool mp_moe_scratch_profile_get(const mp_moe_scratch *s, mp_moe_cpu_profile *out)
{
    if (s->prof)
        *out = *s->prof;
    else
        memset(out, 0, sizeof *out);
    return s->prof != NULL;
}

void mp_moe_cpu_profile_format(const mp_moe_cpu_profile *p, char *buf, size_t cap)
{
    if (!p->calls || !p->slot_ns) {
        snprintf(buf, cap, "no pipelined calls");
        return;
    }
    const double c = (double)p->calls * 1e3, sl = (double)p->slot_ns / 100.0;
    snprintf(buf, cap, "%.1f us a call: before the region %.1f, region %.1f, after it %.1f; first start %.1f, "
             "last start %.1f, gate/up done %.1f; "
             "thread time: late %.1f %%, gate/up %.1f %%, down %.1f %%, waiting for hidden rows %.1f %%, tail %.1f %%",
             (double)p->wall_ns / c, (double)p->pre_ns / c, (double)p->region_ns / c, (double)p->post_ns / c,
             (double)p->first_start_ns / c,
             (double)p->last_start_ns / c, (double)p->gu_done_ns / c, (double)p->late_ns / sl,
             (double)p->gate_up_ns / sl, (double)p->down_ns / sl, (double)p->ready_wait_ns / sl,
             (double)p->tail_ns / sl);
}

int32_t *mp_moe_scratch_ids(mp_moe_scratch *s)
{
    return s->ids;
}

float *mp_moe_scratch_weights(mp_moe_scratch *s)
{
    return s->weights;
}

/* ---- routing ---- */

static void route_rows(const mp_hparams *hp, mp_moe_scratch *s, int64_t n_rows)
{
    const int64_t E = hp->n_expert, K = hp->n_expert_used;
    for (int64_t r = 0; r < n_rows; r++) {
        float *p = s->router + r * E;
        int32_t *ids = s->ids + r * K;
        float *w = s->weights + r * K;
        mp_softmax(p, E);
        mp_topk(p, E, K, ids, w);
        if (hp->expert_weights_norm) {
            float sum = 0.0f;
            for (int64_t k = 0; k < K; k++)
                sum += w[k];
            for (int64_t k = 0; k < K; k++)
                w[k] /= sum;
        }
    }
}

mp_status mp_moe_check_routes(const mp_hparams *hp, int64_t il, int64_t n_rows,
                              const int32_t *ids, const float *weights, mp_error *err)
{
    const int64_t E = hp->n_expert, K = hp->n_expert_used;
    for (int64_t r = 0; r < n_rows; r++) {
        for (int64_t k = 0; k < K; k++) {
            const int32_t id = ids[r * K + k];
            const float w = weights[r * K + k];
            if (id < 0 || id >= E)
                return mp_fail(err, MP_ERR_FORMAT,
                               "route source: layer %" PRId64 ": row %" PRId64 " slot %" PRId64
                               ": expert id %d out of range [0, %" PRId64 ")",
                               il, r, k, (int)id, E);
            if (!isfinite(w))
                return mp_fail(err, MP_ERR_FORMAT,
                               "route source: layer %" PRId64 ": row %" PRId64 " slot %" PRId64
                               ": weight is not finite", il, r, k);
            for (int64_t j = 0; j < k; j++)
                if (ids[r * K + j] == id)
                    return mp_fail(err, MP_ERR_FORMAT,
                                   "route source: layer %" PRId64 ": row %" PRId64
                                   ": expert %d appears twice", il, r, (int)id);
        }
    }
    return MP_OK;
}

static bool is_resident(const uint64_t *resident, int64_t e)
{
    return resident && mp_bit_get(resident, e);
}

/* Counting sort of the routes by expert; within an expert, entries keep row order. Routes to
 * resident experts (bit set in resident, may be NULL) get no entry: entry_of is -1 for them.
 * Returns the number of entries. */
static int64_t group_by_expert(mp_moe_scratch *s, int64_t n_rows, const uint64_t *resident)
{
    const int64_t E = s->n_expert, K = s->top_k, n = n_rows * K;
    memset(s->count, 0, (size_t)E * sizeof *s->count);
    for (int64_t i = 0; i < n; i++)
        if (!is_resident(resident, s->ids[i]))
            s->count[s->ids[i]]++;
    s->offset[0] = 0;
    for (int64_t e = 0; e < E; e++)
        s->offset[e + 1] = s->offset[e] + s->count[e];
    int64_t *fill = s->count; /* reused as a cursor, restored below */
    for (int64_t e = 0; e < E; e++)
        fill[e] = s->offset[e];
    for (int64_t i = 0; i < n; i++) {
        if (is_resident(resident, s->ids[i])) {
            s->entry_of[i] = -1;
            continue;
        }
        const int64_t entry = fill[s->ids[i]]++;
        s->entry_row[entry] = i / K;
        s->entry_of[i] = entry;
    }
    for (int64_t e = 0; e < E; e++)
        s->count[e] = s->offset[e + 1] - s->offset[e];
    return s->offset[E];
}

/* Rows per unit when n_active experts' n_out output rows are cut into about `units` units: at least
 * 16 (mp_chunk_rows), at most one expert's n_out. plan_tasks and the pipelined call cut alike. */
static int64_t unit_rows(int64_t n_active, int64_t n_out, int64_t units)
{
    const int64_t chunk = mp_chunk_rows(n_active * n_out, units);
    return chunk < n_out ? chunk : n_out;
}

/* A pipelined half's rows per unit: unit_rows's, at most unit_max_bytes of weights (row_bytes a
 * row: the bytes a unit reads per row, of every tensor it reads) above 16 rows, so that one large
 * expert's half is not cut into units whose last one leaves the other threads waiting long; and at
 * least unit_bytes, but not so many that the half has fewer units than threads (an idle thread
 * reads nothing); never above n_out. */
static int64_t pipe_unit_rows(int64_t n_active, int64_t n_out, int64_t units, int n_threads, size_t row_bytes,
                              int64_t unit_bytes, int64_t unit_max_bytes)
{
    int64_t chunk = unit_rows(n_active, n_out, units);
    if (unit_max_bytes > 0 && row_bytes > 0) {
        int64_t cap = unit_max_bytes / (int64_t)row_bytes;
        cap = cap > 16 ? cap : 16;
        chunk = chunk < cap ? chunk : cap;
    }
    if (unit_bytes > 0 && row_bytes > 0) {
        int64_t floor_rows = (unit_bytes + (int64_t)row_bytes - 1) / (int64_t)row_bytes;
        const int64_t a_thread = (n_active * n_out + n_threads - 1) / n_threads;
        floor_rows = floor_rows < a_thread ? floor_rows : a_thread;
        chunk = chunk > floor_rows ? chunk : floor_rows;
    }
    return chunk < n_out ? chunk : n_out;
}

/* The FFN rows of expert e a call computes: a part's ff_rows for its expert, all n_ff otherwise. */
static int64_t ff_rows_of(const mp_moe_part *part, int64_t e, int64_t n_ff)
{
    return part && part->expert == e ? part->ff_rows : n_ff;
}

/* (expert, chunk of n_out rows) tasks over the active experts, written to tasks: about
 * units_per_thread per thread (mp_chunk_rows). */
static int64_t plan_tasks(mp_moe_scratch *s, int64_t n_out, int units_per_thread, const mp_moe_part *part,
                          expert_task *tasks)
{
    int64_t n_active = 0;
    for (int64_t e = 0; e < s->n_expert; e++)
        n_active += s->count[e] > 0;
    const int64_t chunk = unit_rows(n_active, n_out, (int64_t)units_per_thread * s->n_threads);
    int64_t n = 0;
    for (int64_t e = 0; e < s->n_expert; e++) {
        if (!s->count[e])
            continue;
        const int64_t ff_rows = ff_rows_of(part, e, s->n_ff);
        for (int64_t r0 = 0; r0 < n_out; r0 += chunk)
            tasks[n++] = (expert_task){(int32_t)e, s->offset[e], s->count[e], r0,
                                       r0 + chunk < n_out ? r0 + chunk : n_out, ff_rows};
    }
    return n;
}

/* ---- experts ---- */

typedef struct expert_job {
    const mp_layer *L;
    mp_moe_scratch *s;
    const mp_type_ops *gate_ops, *up_ops, *down_ops;
    const char *x;          /* gate/up activations: entry rows, x_row_bytes apart */
    size_t x_row_bytes;
    bool x_shared;          /* one source row: every entry reads row 0 of x */
    const char *h;          /* down activations: entry rows, h_row_bytes apart */
    size_t h_row_bytes;
    const void *const *slices; /* (3, n_expert) expert weights, or NULL: the tensors' */
    int64_t n_expert;
    int h_vdt;              /* the down activations' type (F32: the SwiGLU rows themselves) */
    const mp_moe_part *part; /* the call's part with its down by unit, or NULL */
    mp_ffn_act act;
} expert_job;

/* y[i * y_stride + r - r0] = dot(row r of w, x_i) for rows [r0, r1) of w (row_bytes apart), their
 * first n_cols columns, and the n_x activation rows x_i (x_row_bytes apart): a GEMV for one. */
static void matmul_rows(const mp_type_ops *ops, const char *w, size_t row_bytes, int64_t n_cols, int64_t r0,
                        int64_t r1, const char *x, size_t x_row_bytes, int64_t n_x, float *y, int64_t y_stride)
{
    if (n_x == 1)
        mp_gemv_rows(ops, w, row_bytes, n_cols, r0, r1, x, y);
    else
        mp_gemm_rows(ops, w, row_bytes, n_cols, r0, r1, x, x_row_bytes, n_x, y, y_stride);
}

/* Rows [r0, r1) of expert e's slice of t (k: 0 gate, 1 up, 2 down; the table's, else the tensor's),
 * their first n_cols columns (t->ne[0]: all), times the n_x activation rows. */
static void matmul_slice(const expert_job *j, const mp_type_ops *ops, const mp_tensor *t, int k,
                         int32_t e, int64_t n_cols, int64_t r0, int64_t r1, const char *x,
                         size_t x_row_bytes, int64_t n_x, float *y, int64_t y_stride)
{
    const char *w = j->slices ? j->slices[k * j->n_expert + e] : mp_expert_slice(t, e);
    matmul_rows(ops, w, t->row_bytes, n_cols, r0, r1, x, x_row_bytes, n_x, y + r0, y_stride);
}

/* Gate, up and SwiGLU of the task's FFN rows below its expert's ff_rows (a part's units past
 * ff_rows compute nothing). */
static void gate_up_unit(const expert_job *j, const expert_task *t)
{
    mp_moe_scratch *s = j->s;
    const int64_t first = t->first, cnt = t->cnt, F = s->n_ff, D = s->n_embd;
    const int64_t r0 = t->r0, r1 = t->r1 < t->ff_rows ? t->r1 : t->ff_rows;
    if (r0 >= r1)
        return;
    const char *x = j->x_shared ? j->x : j->x + (size_t)first * j->x_row_bytes;
    float *g = s->gate + first * F, *u = s->up + first * F;
    matmul_slice(j, j->gate_ops, &j->L->gate_exps, 0, t->expert, D, r0, r1, x, j->x_row_bytes, cnt, g, F);
    matmul_slice(j, j->up_ops, &j->L->up_exps, 1, t->expert, D, r0, r1, x, j->x_row_bytes, cnt, u, F);
    if (j->L->gate_exps_b.data) {
        const float *gb = (const float *)j->L->gate_exps_b.data + (int64_t)t->expert * F;
        const float *ub = (const float *)j->L->up_exps_b.data + (int64_t)t->expert * F;
        for (int64_t i = 0; i < cnt; i++)
            for (int64_t r = r0; r < r1; r++)
                g[i * F + r] += gb[r], u[i * F + r] += ub[r];
    }
    void (*act)(float *, const float *, const float *, int64_t) = j->act == MP_ACT_SWIGLU_OAI ? mp_swiglu_oai
                                                                                              : mp_swiglu;
    for (int64_t i = 0; i < cnt; i++)
        act(g + i * F + r0, g + i * F + r0, u + i * F + r0, r1 - r0);
}

/* Entries [first, first + cnt)'s hidden values [0, ff_rows) into their down activations (type
 * vdt, h_row_bytes apart in hq). */
static void convert_hidden(const expert_job *j, int vdt, int64_t first, int64_t cnt, int64_t ff_rows)
{
    const mp_moe_scratch *s = j->s;
    for (int64_t r = first; r < first + cnt; r++)
        (void)mp_quantize_activation(vdt, s->gate + r * s->n_ff, s->hq + (size_t)r * j->h_row_bytes, ff_rows);
}

static void gate_up_task(void *ctx, int64_t task, int thread)
{
    (void)thread;
    const expert_job *j = ctx;
    gate_up_unit(j, &j->s->tasks[task]);
}

/* Rows MP_MOE_UNIT_CHUNK at a time, a part's down by unit (mp_moe_part.down_units): unit 0's dots
 * into the output, each further unit's into acc and added, so that the units' rows stream whole. */
#define MP_MOE_UNIT_CHUNK 64
#define MP_MOE_UNIT_ROWS_MAX 16 /* entries of the expert read by unit (a split route: decode, < 16 rows); an
                                 * expert with more reads its row segments from the slice */

static void down_by_units(const expert_job *j, const expert_task *t)
{
    const mp_moe_part *pt = j->part;
    const mp_tensor *d = &j->L->down_exps;
    mp_moe_scratch *s = j->s;
    const int64_t D = s->n_embd, first = t->first, cnt = t->cnt;
    const char *h = j->h + (size_t)first * j->h_row_bytes;
    float *y = s->down + first * D;
    float acc[MP_MOE_UNIT_ROWS_MAX * MP_MOE_UNIT_CHUNK];
    for (int64_t r = t->r0; r < t->r1; r += MP_MOE_UNIT_CHUNK) {
        const int64_t r1 = r + MP_MOE_UNIT_CHUNK < t->r1 ? r + MP_MOE_UNIT_CHUNK : t->r1, n = r1 - r;
        const char *w = pt->down_units;
        for (int64_t u = 0, c0 = 0; c0 < t->ff_rows; c0 = pt->unit_end[u++]) {
            const int64_t cols = pt->unit_end[u] - c0;
            const size_t rb = mp_type_row_bytes(d->type, cols);
            const char *x = h + mp_type_row_bytes(j->h_vdt, c0);
            if (u == 0) {
                matmul_rows(j->down_ops, w, rb, cols, r, r1, x, j->h_row_bytes, cnt, y + r, D);
            } else {
                matmul_rows(j->down_ops, w, rb, cols, r, r1, x, j->h_row_bytes, cnt, acc, MP_MOE_UNIT_CHUNK);
                for (int64_t i = 0; i < cnt; i++)
                    for (int64_t k = 0; k < n; k++)
                        y[i * D + r + k] += acc[i * MP_MOE_UNIT_CHUNK + k];
            }
            w += rb * (size_t)d->ne[1];
        }
    }
}

static void down_unit(const expert_job *j, const expert_task *t)
{
    mp_moe_scratch *s = j->s;
    const int64_t first = t->first, cnt = t->cnt;
    if (j->part && t->expert == j->part->expert && t->ff_rows < s->n_ff && cnt <= MP_MOE_UNIT_ROWS_MAX) {
        down_by_units(j, t);
        return;
    }
    matmul_slice(j, j->down_ops, &j->L->down_exps, 2, t->expert, t->ff_rows, t->r0, t->r1,
                 j->h + (size_t)first * j->h_row_bytes, j->h_row_bytes, cnt,
                 s->down + first * s->n_embd, s->n_embd);
}

static void down_task(void *ctx, int64_t task, int thread)
{
    (void)thread;
    const expert_job *j = ctx;
    down_unit(j, &j->s->tasks[task]);
}

/* ---- pipelined: both halves in one region ---- */

typedef struct pipe_job {
    const expert_job *j;
    /* unit i of a half: active expert i / per, rows [(i % per) chunk, + chunk) of n_out; the
     * units of plan_tasks, in its order, without a table */
    int64_t chunk_gu, per_gu, chunk_dn, per_dn;
    int64_t n_gu, n_dn;        /* units of each half */
    atomic_int_fast64_t next_gu, next_dn;
    float *out;                /* the rows the region combines */
    const float *down_b;       /* the down biases the combine adds (NULL: none) */
    int64_t n_rows;
} pipe_job;

static expert_task pipe_unit(const mp_moe_scratch *s, int64_t i, int64_t chunk, int64_t per, int64_t n_out)
{
    const pipe_expert *a = &s->active[i / per];
    const int64_t r0 = (i % per) * chunk;
    return (expert_task){a->expert, a->first, a->cnt, r0, r0 + chunk < n_out ? r0 + chunk : n_out,
                         a->ff_rows};
}

/* out[row, r0 .. r1) for rows [row0, row1) of the call: zero, then weight · (down + its expert's
 * down bias down_b, when there is one) of each route in slot order (mp_axpy element by element:
 * the same bits as combining whole rows). */
static void combine_range(const mp_moe_scratch *s, const float *down_b, float *out, int64_t row0, int64_t row1,
                          int64_t r0, int64_t r1)
{
    const int64_t D = s->n_embd, K = s->top_k;
    for (int64_t row = row0; row < row1; row++) {
        float *o = out + row * D + r0;
        memset(o, 0, (size_t)(r1 - r0) * sizeof *o);
        for (int64_t k = 0; k < K; k++)
            if (s->entry_of[row * K + k] >= 0) {
                const float w = s->weights[row * K + k];
                mp_axpy(o, w, s->down + s->entry_of[row * K + k] * D + r0, r1 - r0);
                if (down_b)
                    mp_axpy(o, w, down_b + (int64_t)s->ids[row * K + k] * D + r0, r1 - r0);
            }
    }
}

/* One worker per pool thread: gate/up units while any are left, then down units. A down unit
 * waits for its expert's hidden rows, which only threads already inside gate/up units (the
 * gate/up units are all claimed before any thread takes a down unit) still have to finish: the
 * wait always ends. It waits as the pool's caller does (mp_wait_step: yielding now and then, so
 * that a machine with more threads than free cores lets the finishing thread run). */
static void pipe_task(void *ctx, int64_t task, int thread)
{
    (void)thread;
    pipe_job *p = ctx;
    const expert_job *j = p->j;
    mp_moe_scratch *s = j->s;
    /* profiling: [0] start, [1] gate/up done, [2] in down units, [3] waiting for ready, [4] end */
    int64_t *pt = s->ptimes && task < MP_MOE_PROFILE_TASKS ? s->ptimes[task] : NULL;
    if (pt)
        pt[0] = mp_now_ns(), pt[2] = pt[3] = 0;
    for (;;) {
        const int64_t i = atomic_fetch_add_explicit(&p->next_gu, 1, memory_order_relaxed);
        if (i >= p->n_gu)
            break;
        const expert_task t = pipe_unit(s, i, p->chunk_gu, p->per_gu, s->n_ff);
        gate_up_unit(j, &t);
        /* acq_rel: the last finisher sees every unit's SwiGLU rows of this expert */
        if (atomic_fetch_sub_explicit(&s->left[i / p->per_gu], 1, memory_order_acq_rel) == 1) {
            if (j->h_vdt != MP_TYPE_F32)
                convert_hidden(j, j->h_vdt, t.first, t.cnt, t.ff_rows);
            atomic_store_explicit(&s->ready[i / p->per_gu], 1, memory_order_release);
        }
    }
    if (pt)
        pt[1] = mp_now_ns();
    for (;;) {
        const int64_t i = atomic_fetch_add_explicit(&p->next_dn, 1, memory_order_relaxed);
        if (i >= p->n_dn)
            break;
        const expert_task t = pipe_unit(s, i, p->chunk_dn, p->per_dn, s->n_embd);
        int spins = 0;
        const int64_t w0 = pt ? mp_now_ns() : 0;
        while (!atomic_load_explicit(&s->ready[i / p->per_dn], memory_order_acquire))
            mp_wait_step(&spins);
        const int64_t w1 = pt ? mp_now_ns() : 0;
        down_unit(j, &t);
        /* acq_rel: the last finisher of a row range sees every expert's down rows of it */
        if (atomic_fetch_sub_explicit(&s->range_left[i % p->per_dn], 1, memory_order_acq_rel) == 1)
            combine_range(s, p->down_b, p->out, 0, p->n_rows, t.r0, t.r1);
        if (pt)
            pt[3] += w1 - w0, pt[2] += mp_now_ns() - w1;
    }
    if (pt)
        pt[4] = mp_now_ns();
}

/* Adds a pipelined call's region (tasks: one per pool thread, started at r0, returned at r1) to
 * the profile. The pool runs every task once; a task whose own thread came late runs on the
 * thread that stole it, after that thread's own, and shows as a late start. */
static void profile_region(mp_moe_scratch *s, int tasks, int64_t r0, int64_t r1)
{
    mp_moe_cpu_profile *p = s->prof;
    p->region_ns += r1 - r0;
    int64_t first = INT64_MAX, last = 0, gu = 0;
    for (int i = 0; i < tasks && i < MP_MOE_PROFILE_TASKS; i++) {
        const int64_t *t = s->ptimes[i];
        const int64_t start = t[0] - r0, gu_end = t[1] - r0, end = t[4] - r0;
        first = start < first ? start : first;
        last = start > last ? start : last;
        gu = gu_end > gu ? gu_end : gu;
        p->slot_ns += r1 - r0;
        p->late_ns += start;
        p->gate_up_ns += gu_end - start;
        p->down_ns += t[2];
        p->ready_wait_ns += t[3];
        p->tail_ns += (r1 - r0) - end;
    }
    p->first_start_ns += first;
    p->last_start_ns += last;
    p->gu_done_ns += gu;
}

typedef struct combine_job {
    const mp_moe_scratch *s;
    const float *down_b; /* the layer's down biases (n_expert, n_embd), or NULL */
    float *out;
} combine_job;

static void combine_task(void *ctx, int64_t row, int thread)
{
    const combine_job *j = ctx;
    combine_range(j->s, j->down_b, j->out, row, row + 1, 0, j->s->n_embd);
}

int64_t mp_moe_experts_cpu(const mp_model *m, int64_t il, const float *x, int64_t n_rows,
                           const int32_t *ids, const float *weights, const uint64_t *resident,
                           const void *const *slices, const mp_moe_part *part, float *out,
                           mp_pool *pool, mp_moe_scratch *s)
{
    const mp_hparams *hp = &m->hp;
    const mp_layer *L = &m->layers[il];
    const int64_t K = hp->n_expert_used, D = hp->n_embd, F = hp->n_ff_exp;
    const int64_t call0 = s->prof ? mp_now_ns() : 0;
    if (ids != s->ids)
        memcpy(s->ids, ids, (size_t)(n_rows * K) * sizeof *ids);
    if (weights != s->weights)
        memcpy(s->weights, weights, (size_t)(n_rows * K) * sizeof *weights);
    const int64_t n_entries = group_by_expert(s, n_rows, resident);
    if (n_entries == 0) {
        memset(out, 0, (size_t)(n_rows * D) * sizeof *out);
        return 0;
    }

    /* gate/up activations: one conversion per source row, then gathered by entry */
    expert_job j = {L, s, mp_type_ops_get(L->gate_exps.type), mp_type_ops_get(L->up_exps.type),
                    mp_type_ops_get(L->down_exps.type), NULL, 0, false, NULL, 0, slices, hp->n_expert, 0,
                    part && part->down_units ? part : NULL, mp_arch_get(hp->arch)->act};
    const int x_vdt = j.gate_ops->vec_dot_type;
    const char *xsrc = (const char *)x;
    j.x_row_bytes = mp_type_row_bytes(x_vdt, D);
    if (x_vdt != MP_TYPE_F32) {
        mp_act_quantize(pool, x_vdt, x, D, n_rows, D, s->xq);
        xsrc = s->xq;
    }
    if (n_rows == 1) {
        j.x = xsrc;
        j.x_shared = true;
    } else {
        for (int64_t i = 0; i < n_entries; i++)
            memcpy(s->xg + (size_t)i * j.x_row_bytes,
                   xsrc + (size_t)s->entry_row[i] * j.x_row_bytes, j.x_row_bytes);
        j.x = s->xg;
    }
    const int h_vdt = j.down_ops->vec_dot_type;
    j.h_vdt = h_vdt;
    /* a hybrid layer's GPU adds every route's down bias (moe.h) */
    const float *down_b = resident ? NULL : L->down_exps_b.data;
    assert(!part || (part->expert >= 0 && part->expert < hp->n_expert && part->ff_rows > 0 &&
                     part->ff_rows <= F && part->ff_rows % mp_decide_split_granule(L->down_exps.type) == 0));
    assert(!j.part || (part->n_units >= 1 && part->unit_end[part->n_units - 1] >= part->ff_rows));
    j.h_row_bytes = mp_type_row_bytes(h_vdt, F);
    j.h = h_vdt == MP_TYPE_F32 ? (const char *)s->gate : s->hq;
    const bool pipelined = s->pipelined && n_rows <= MP_MOE_PIPE_ROWS;
    if (pipelined) {
        pipe_job p = {.j = &j, .n_rows = n_rows, .down_b = down_b};
        int64_t n_active = 0;
        for (int64_t e = 0; e < s->n_expert; e++)
            if (s->count[e])
                s->active[n_active++] = (pipe_expert){(int32_t)e, s->offset[e], s->count[e],
                                                      ff_rows_of(part, e, F)};
        /* plan_tasks's units: about pipe_units per thread in each half */
        const int64_t units = (int64_t)s->pipe_units * s->n_threads;
        const size_t gu_row = L->gate_exps.row_bytes + L->up_exps.row_bytes;
        p.chunk_gu = pipe_unit_rows(n_active, F, units, s->n_threads, gu_row, s->unit_bytes, s->unit_max_bytes);
        p.chunk_dn = pipe_unit_rows(n_active, D, units, s->n_threads, L->down_exps.row_bytes, s->unit_bytes,
                                    s->unit_max_bytes);
        p.per_gu = (F + p.chunk_gu - 1) / p.chunk_gu;
        p.per_dn = (D + p.chunk_dn - 1) / p.chunk_dn;
        p.n_gu = n_active * p.per_gu;
        p.n_dn = n_active * p.per_dn;
        /* left[a]: active expert a's gate/up units; ready[a]: not yet; range_left[r]: one down
         * unit per active expert (combined in the region) */
        for (int64_t a = 0; a < n_active; a++) {
            atomic_store_explicit(&s->left[a], (int)p.per_gu, memory_order_relaxed);
            atomic_store_explicit(&s->ready[a], 0, memory_order_relaxed);
        }
        for (int64_t r = 0; r < p.per_dn; r++)
            atomic_store_explicit(&s->range_left[r], (int)n_active, memory_order_relaxed);
        p.out = out;
        /* the pool's region start publishes these stores to the workers */
        const int64_t r0 = s->prof ? mp_now_ns() : 0;
        if (s->prof)
            s->prof->pre_ns += r0 - call0;
        mp_pool_run(pool, mp_pool_n_threads(pool), pipe_task, &p);
        if (s->prof)
            profile_region(s, mp_pool_n_threads(pool), r0, mp_now_ns());
    } else {
        mp_pool_run(pool, plan_tasks(s, F, MP_MATMUL_TASKS_PER_THREAD, part, s->tasks), gate_up_task, &j);
        if (h_vdt != MP_TYPE_F32) {
            /* entries [split, split + n_split): a part's expert's, with hidden values below its
             * ff_rows only (none without a part, or when its expert is resident) */
            const int64_t n_split = part ? s->count[part->expert] : 0;
            const int64_t split = n_split ? s->offset[part->expert] : n_entries, after = split + n_split;
            mp_act_quantize(pool, h_vdt, s->gate, F, split, F, s->hq);
            if (n_split)
                convert_hidden(&j, h_vdt, split, n_split, part->ff_rows);
            mp_act_quantize(pool, h_vdt, s->gate + after * F, F, n_entries - after, F,
                            s->hq + (size_t)after * j.h_row_bytes);
        }
        mp_pool_run(pool, plan_tasks(s, D, MP_MATMUL_TASKS_PER_THREAD, part, s->tasks), down_task, &j);
    }

    const int64_t post0 = s->prof ? mp_now_ns() : 0;
    if (!pipelined) { /* a pipelined call combined its rows inside the region */
        combine_job cj = {s, down_b, out};
        mp_pool_run(pool, n_rows, combine_task, &cj);
    }
    if (s->prof) {
        const int64_t end = mp_now_ns();
        s->prof->calls++;
        s->prof->wall_ns += end - call0;
        s->prof->post_ns += end - post0;
    }
    return n_entries;
}

mp_status mp_moe_route_cpu(const mp_model *m, int64_t il, const float *x, int64_t n_rows,
                           mp_pool *pool, mp_moe_scratch *s, const mp_route_source *route_src,
                           mp_error *err)
{
    const mp_hparams *hp = &m->hp;
    const int64_t K = hp->n_expert_used;
    if (n_rows < 1 || n_rows > s->max_rows)
        return mp_fail(err, MP_ERR_INTERNAL, "moe: %" PRId64 " rows, scratch holds %" PRId64,
                       n_rows, s->max_rows);
    if (route_src) {
        const int rc = route_src->route(route_src->user, il, n_rows, K, s->ids, s->weights);
        if (rc < 0)
            return mp_fail(err, (mp_status)rc, "route source stopped the run at layer %" PRId64, il);
        return mp_moe_check_routes(hp, il, n_rows, s->ids, s->weights, err);
    }
    const mp_layer *L = &m->layers[il];
    mp_matmul(pool, &L->gate_inp, x, n_rows, s->router, s->xq);
    if (L->gate_inp_b.data)
        for (int64_t r = 0; r < n_rows; r++)
            mp_axpy(s->router + r * hp->n_expert, 1.0f, L->gate_inp_b.data, hp->n_expert);
    route_rows(hp, s, n_rows);
    return MP_OK;
}

mp_status mp_moe_forward_cpu(const mp_model *m, int64_t il, const float *x, float *out,
                             int64_t n_rows, mp_pool *pool, mp_moe_scratch *s,
                             const mp_hooks *hooks, const mp_route_source *route_src,
                             mp_error *err)
{
    const int64_t K = m->hp.n_expert_used;
    mp_status st = mp_moe_route_cpu(m, il, x, n_rows, pool, s, route_src, err);
    if (st)
        return st;
    if (hooks && hooks->routing)
        hooks->routing(hooks->user, il, n_rows, K, s->ids, s->weights);
    const int64_t t0_ns = hooks && hooks->moe_timing ? mp_now_ns() : 0;

    mp_moe_experts_cpu(m, il, x, n_rows, s->ids, s->weights, NULL, NULL, NULL, out, pool, s);

    if (hooks && hooks->moe_timing) {
        mp_moe_timing t = {0};
        t.cpu_expert_ns = mp_now_ns() - t0_ns;
        t.misses = n_rows * K; /* the CPU path serves every route from host memory */
        t.served = s->served;
        hooks->moe_timing(hooks->user, il, &t);
    }
    return MP_OK;
}
