/* gpu/gpu_exec.c — the GPU executor's lifetime: device checks, the memory plan and budget,
 * weight upload, the expert pool (see gpu.h).
 *
 * Order in mp_gpu_exec_new (build): (1) size every device allocation from the model, the session and
 * the placement (plan_memory); (2) refuse when the sum exceeds the budget, naming each term
 * (check_budget); (3) streams and events, four device arenas (weights, KV, scratch + staging, pool)
 * carved, page-locked host buffers, cuBLAS (create_streams, alloc_device, alloc_pinned,
 * setup_blas); (4) upload dense weights and the resident experts (256-byte aligned slots, so the
 * MoE kernel may use 128-bit loads); (5) the cold experts' host copy, the copy cost and the far
 * routes (setup_host_experts).
 */
#include "mp_config.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "base/machine.h"
#include "runtime/decide.h"
#include "runtime/gpu.h"
#include "runtime/cpus.h"

#include "kernels/cuda/cuda_ops.h"
#include "kernels/quant.h"
#include "gpu/gpu_impl.h"
#include "runtime/matmul.h"

int mp_gpu_exec_available(char *why, size_t why_cap)
{
    return mp_cuda_available(why, why_cap);
}

mp_status mp_gpu_exec_memory_info(uint64_t *free_bytes, uint64_t *total_bytes, mp_error *err)
{
    size_t f = 0, t = 0;
    cudaError_t e = cudaMemGetInfo(&f, &t);
    if (e != cudaSuccess)
        return mp_gpu_cuda_fail(err, "cudaMemGetInfo", e);
    *free_bytes = f;
    *total_bytes = t;
    return MP_OK;
}

/* ---- the memory plan ---- */

typedef struct carve {
    char *base;
    size_t used;
} carve;

static void *take(carve *c, size_t bytes)
{
    void *p = c->base ? c->base + c->used : NULL;
    c->used += mp_gpu_align(bytes ? bytes : 1);
    return p;
}

/* Scratch layout; called twice: once with c.base NULL to size it, once to carve it. The sizes are
 * g->sp's (mp_gpu_scratch_plan, runtime/placement.h), which the budget sums in the same order. */
static void carve_scratch(mp_gpu *g, carve *c)
{
    const mp_gpu_scratch *z = &g->sp;
    g->d_x = take(c, z->rows_embd);
    g->d_xb = take(c, z->rows_embd);
    g->d_proj = take(c, z->rows_embd);
    g->d_tmp = take(c, z->rows_embd);
    g->d_q = take(c, z->rows_q);
    g->d_att = take(c, z->rows_q);
    g->d_k = take(c, z->rows_kv);
    g->d_v = take(c, z->rows_kv);
    g->d_router = take(c, z->router);
    g->d_ids = take(c, z->routes);
    g->d_w = take(c, z->routes);
    g->d_tok = take(c, z->rows_i32);
    g->d_pos = take(c, z->rows_i32);
    g->d_rope = take(c, z->rope);
    g->d_rope_theta = g->d_rope ? (double *)(g->d_rope + g->s->n_batch * g->s->m->hp.head_dim) : NULL;
    g->d_bad = take(c, sizeof(int));
    g->d_count = take(c, sizeof(unsigned));
    g->d_rids = take(c, z->replay);
    g->d_rw = g->d_rids ? (float *)(g->d_rids + g->s->m->hp.n_layer * g->s->m->hp.n_expert_used) : NULL;
    g->d_logits = take(c, z->logits);
    g->d_act = take(c, z->act);
    g->d_shexp = z->shexp ? take(c, z->shexp) : NULL; /* carved only with a shared expert */
    g->moe_scratch_bytes = z->moe;
    g->d_moe_scratch = take(c, z->moe);
    g->att_scratch_bytes = z->att;
    g->d_att_scratch = take(c, z->att);
    g->gemm_scratch_bytes = z->gemm;
    g->d_gemm_scratch = take(c, z->gemm);
    take(c, z->blas_ws); /* the cuBLAS workspace: last, found by mp_gpu_exec_new */
}

/* ---- upload ---- */

/* With c->base NULL nothing is copied: the pass only sizes the arena (as carve_scratch does). */
static mp_status upload(carve *c, const mp_tensor *t, const void **d_out, mp_error *err)
{
    if (!t->data) {
        *d_out = NULL;
        return MP_OK;
    }
    void *d = take(c, t->nbytes);
    if (!c->base) {
        *d_out = NULL;
        return MP_OK;
    }
    cudaError_t e = cudaMemcpy(d, t->data, t->nbytes, cudaMemcpyHostToDevice);
    if (e != cudaSuccess)
        return mp_gpu_cuda_fail(err, "weight upload", e);
    *d_out = d;
    return MP_OK;
}

static mp_status upload_matrix(carve *c, const mp_tensor *t, gpu_tensor *out, mp_error *err)
{
    out->type = t->type;
    out->row_bytes = t->row_bytes;
    out->n_in = t->ne[0];
    out->n_out = t->ne[1];
    return upload(c, t, &out->d, err);
}

/* The dense weights and the per-layer slot tables into the arena at c->base; called first with
 * c->base NULL to size the arena (c->used), then to copy. */
static mp_status upload_weights(mp_gpu *g, carve *cv, mp_error *err)
{
    const mp_model *m = g->s->m;
    carve c = *cv;
    mp_status st;
    const void *p = NULL;
    if ((st = upload_matrix(&c, &m->tok_embd, &g->tok_embd, err)))
        return st;
    if (m->output.data == m->tok_embd.data) {
        g->output = g->tok_embd;
    } else if ((st = upload_matrix(&c, &m->output, &g->output, err))) {
        return st;
    }
    if ((st = upload(&c, &m->output_norm, &p, err)))
        return st;
    g->output_norm = p;
    const size_t table_bytes = (size_t)m->hp.n_expert * sizeof(void *);
    for (int64_t il = 0; il < m->hp.n_layer; il++) {
        const mp_layer *L = &m->layers[il];
        gpu_layer *G = &g->layers[il];
        if ((st = upload_matrix(&c, &L->wq, &G->wq, err)) ||
            (st = upload_matrix(&c, &L->wk, &G->wk, err)) ||
            (st = upload_matrix(&c, &L->wv, &G->wv, err)) ||
            (st = upload_matrix(&c, &L->wo, &G->wo, err)) ||
            (st = upload_matrix(&c, &L->gate_inp, &G->gate_inp, err)))
            return st;
        if ((st = upload(&c, &L->attn_norm, &p, err)))
            return st;
        G->attn_norm = p;
        if ((st = upload(&c, &L->ffn_norm, &p, err)))
            return st;
        G->ffn_norm = p;
        if ((st = upload(&c, &L->q_norm, &p, err)))
            return st;
        G->q_norm = p;
        if ((st = upload(&c, &L->k_norm, &p, err)))
            return st;
        G->k_norm = p;
        /* small f32 vectors (data NULL: absent, the device pointer NULL too) */
        const mp_tensor *bias[9] = {&L->bq, &L->bk, &L->bv, &L->bo, &L->sinks, &L->gate_inp_b,
                                    &L->gate_exps_b, &L->up_exps_b, &L->down_exps_b};
        const float **gbias[9] = {&G->bq, &G->bk, &G->bv, &G->bo, &G->sinks, &G->gate_inp_b,
                                  &G->gate_exps_b, &G->up_exps_b, &G->down_exps_b};
        for (int i = 0; i < 9; i++) {
            if ((st = upload(&c, bias[i], &p, err)))
                return st;
            *gbias[i] = p;
        }
        if (L->gate_shexp.data &&
            ((st = upload_matrix(&c, &L->gate_inp_shexp, &G->gate_inp_shexp, err)) ||
             (st = upload_matrix(&c, &L->gate_shexp, &G->gate_shexp, err)) ||
             (st = upload_matrix(&c, &L->up_shexp, &G->up_shexp, err)) ||
             (st = upload_matrix(&c, &L->down_shexp, &G->down_shexp, err))))
            return st;
    }
    g->d_tables = take(&c, table_bytes * 3 * (size_t)m->hp.n_layer);
    for (int64_t il = 0; il < m->hp.n_layer; il++)
        for (int t = 0; t < 3; t++)
            g->layers[il].d_slots[t] = g->d_tables ? g->d_tables + (il * 3 + t) * m->hp.n_expert : NULL;
    *cv = c;
    return MP_OK;
}

/* Copy the resident experts into the pool and fill the slot tables (their host copy, h_tables,
 * then one upload). */
static mp_status upload_experts(mp_gpu *g, mp_error *err)
{
    const mp_model *m = g->s->m;
    const int64_t E = m->hp.n_expert;
    carve c = {g->d_pool, 0};
    const void **table = g->h_tables;
    for (int64_t il = 0; il < m->hp.n_layer; il++) {
        const mp_layer *L = &m->layers[il];
        gpu_layer *G = &g->layers[il];
        const mp_tensor *ts[3] = {&L->gate_exps, &L->up_exps, &L->down_exps};
        G->resident = g->pl.bits + il * g->pl.words_per_layer;
        G->n_resident = g->pl.n_resident[il];
        for (int64_t e = 0; e < E; e++) {
            const bool res = mp_placement_resident(&g->pl, il, e);
            for (int t = 0; t < 3; t++) {
                table[(il * 3 + t) * E + e] = NULL;
                if (!res)
                    continue;
                const size_t bytes = ts[t]->row_bytes * (size_t)ts[t]->ne[1];
                void *d = take(&c, bytes);
                CCHECK(cudaMemcpy(d, mp_expert_slice(ts[t], e), bytes, cudaMemcpyHostToDevice), "expert upload");
                table[(il * 3 + t) * E + e] = d;
            }
        }
    }
    CCHECK(cudaMemcpy((void *)g->d_tables, table, (size_t)(m->hp.n_layer * 3 * E) * sizeof *table,
                      cudaMemcpyHostToDevice), "slot table upload");
    return MP_OK;
}

/* ---- lifetime ---- */

void mp_gpu_exec_free(mp_gpu *g)
{
    if (!g)
        return;
    if (g->stream)
        cudaStreamSynchronize(g->stream);
    if (g->copy_stream)
        cudaStreamSynchronize(g->copy_stream);
    mp_gpu_tier_free(g);
    mp_gpu_host_experts_free(g);
    mp_cuda_blas_destroy(g->blas);
    cudaFree(g->d_weights);
    cudaFree(g->d_kv);
    cudaFree(g->d_scratch);
    cudaFree(g->d_pool);
    cudaFree(g->d_tier);
    cudaFreeHost(g->h_tables);
    cudaFreeHost(g->h_io);
    cudaFreeHost(g->h_route1);
    cudaFreeHost(g->h_ids);
    cudaFreeHost(g->h_w);
    cudaFreeHost(g->h_x);
    cudaFreeHost(g->h_part);
    cudaFreeHost(g->h_flags);
    cudaFreeHost(g->h_stamps);
    cudaFreeHost(g->h_step);
    cudaFreeHost(g->h_logits);
    cudaFreeHost(g->h_stage_tabs);
    for (int i = 0; g->ev_stage_tab && i < g->n_stage_tabs; i++)
        if (g->ev_stage_tab[i])
            cudaEventDestroy(g->ev_stage_tab[i]);
    free(g->ev_stage_tab);
    for (int b = 0; b < 2; b++) {
        if (g->ev_stage_ready[b])
            cudaEventDestroy(g->ev_stage_ready[b]);
        if (g->ev_stage_free[b])
            cudaEventDestroy(g->ev_stage_free[b]);
    }
    if (g->ev_moe)
        for (int64_t i = 0; i < 2 * g->s->m->hp.n_layer; i++)
            if (g->ev_moe[i])
                cudaEventDestroy(g->ev_moe[i]);
    free(g->ev_moe);
    if (g->ev_rt)
        for (int64_t i = 0; i < 2 * g->s->m->hp.n_layer; i++)
            if (g->ev_rt[i])
                cudaEventDestroy(g->ev_rt[i]);
    free(g->ev_rt);
    free(g->rt_pending);
    mp_gpu_drop_graphs(g);
    free(g->far);
    free(g->far_split_r0);
    free(g->rt_cpu_ns);
    free(g->rt_warm);
    if (g->ev_host)
        cudaEventDestroy(g->ev_host);
    if (g->ev_io)
        cudaEventDestroy(g->ev_io);
    if (g->stream)
        cudaStreamDestroy(g->stream);
    if (g->copy_stream)
        cudaStreamDestroy(g->copy_stream);
    for (int i = 0; i < 2; i++) {
        if (g->side[i])
            cudaStreamDestroy(g->side[i]);
        if (g->ev_join[i])
            cudaEventDestroy(g->ev_join[i]);
    }
    if (g->ev_fork)
        cudaEventDestroy(g->ev_fork);
    free(g->h_mask);
    free(g->h_count);
    free(g->h_copy_list);
    free(g->h_cold);
    free(g->h_cold_rows);
    free(g->h_cold_cpu);
    free(g->h_cold_order);
    free(g->h_cold_copy);
    free(g->h_served);
    free(g->timing);
    free(g->layers);
    mp_placement_free(&g->pl);
    free(g);
}

static mp_status copy_placement(const mp_placement *src, mp_placement *dst, mp_error *err)
{
    *dst = *src; /* the executor keeps the map and the counts; what else src owns stays src's */
    dst->profile_image = NULL;
    dst->profile_image_bytes = 0;
    dst->cold_routes = dst->all_routes = NULL;
    dst->decode_costs = NULL;
    dst->cpu_rows_ns = NULL;
    dst->tier_cap = NULL; /* read from src by mp_gpu_tier_setup, which keeps its own */
    dst->tier_warm = NULL;
    dst->n_tier_warm = 0;
    const size_t words = (size_t)(src->n_layer * src->words_per_layer);
    dst->bits = malloc(words * sizeof *dst->bits);
    dst->n_resident = malloc((size_t)src->n_layer * sizeof *dst->n_resident);
    if (!dst->bits || !dst->n_resident) {
        free(dst->bits);
        free(dst->n_resident);
        memset(dst, 0, sizeof *dst);
        return mp_fail(err, MP_ERR_NOMEM, "GPU executor: out of memory");
    }
    memcpy(dst->bits, src->bits, words * sizeof *dst->bits);
    memcpy(dst->n_resident, src->n_resident, (size_t)src->n_layer * sizeof *dst->n_resident);
    if (src->cpu_rows_ns) {
        const size_t n = (size_t)src->n_layer * (src->cpu_rows_max + 1);
        if (!(dst->cpu_rows_ns = malloc(n * sizeof *dst->cpu_rows_ns))) {
            mp_placement_free(dst);
            return mp_fail(err, MP_ERR_NOMEM, "GPU executor: out of memory");
        }
        memcpy(dst->cpu_rows_ns, src->cpu_rows_ns, n * sizeof *dst->cpu_rows_ns);
    }
    return MP_OK;
}

/* The executor's switches, from the session's knobs (base/knobs.h): MP_GPU_GEMM_MIN_ROWS
 * (as mp_gpu_exec_set_gemm_min_rows), MP_GPU_GRAPHS=0 (decode steps enqueued: a profiler's view of
 * every launch), MP_GPU_HOST_EXPERTS (gpu_host.c), MP_GPU_STEP_STAMPS=1, MP_GPU_INIT_TRACE=1, and
 * the CUDA kernels' MP_CUDA_PDL. */
static void knob_switches(mp_gpu *g, const mp_knobs *k)
{
    g->gemm_min_rows = k->gpu_gemm_min_rows; /* never below MP_GPU_GEMM_MIN_ROWS: the table's range */
    g->step_stamps = k->gpu_step_stamps;
    if (!k->gpu_graphs) {
        g->graphs_off = true;
        snprintf(g->graphs_why, sizeof g->graphs_why, "off (MP_GPU_GRAPHS=0)");
    }
    g->host_mode = k->gpu_host_experts;
    g->part_by_unit = k->gpu_part_by_unit;
    g->init_trace = k->gpu_init_trace;
    g->tier_hold = k->gpu_tier_hold;
    /* process-wide in the kernels: the last executor made sets it (sessions of one process share
     * their knobs in practice: main reads them once) */
    mp_cuda_set_pdl(k->cuda_pdl ? -1 : 0); /* on: where the device has it (compute capability 9.0+) */
}

/* MP_GPU_STEP_STAMPS=1: allocate the two stamps and map the GPU's timer to the host clock. Each of
 * 8 rounds stamps once between two host readings t0 < t1, so the offset lies in [stamp - t1,
 * stamp - t0]; the rounds' intersection is the estimate (its middle) and its half width the error. */
static mp_status calibrate_stamps(mp_gpu *g, mp_error *err)
{
    CCHECK(cudaMallocHost((void **)&g->h_step, 2 * sizeof *g->h_step), "cudaMallocHost");
    int64_t lo = INT64_MIN, hi = INT64_MAX;
    for (int round = 0; round < 8; round++) {
        g->h_step[0] = 0;
        const int64_t t0 = mp_gpu_now_ns();
        KCHECK(mp_cuda_stamp(&g->h_step[0], g->stream), "step stamp");
        CCHECK(cudaStreamSynchronize(g->stream), "step stamp");
        const int64_t t1 = mp_gpu_now_ns(), gpu = (int64_t)g->h_step[0];
        if (gpu - t1 > lo)
            lo = gpu - t1;
        if (gpu - t0 < hi)
            hi = gpu - t0;
    }
    if (lo > hi) /* the two clocks drifted apart within the rounds: no mapping */
        return mp_fail(err, MP_ERR_DEVICE, "GPU executor: MP_GPU_STEP_STAMPS: the GPU's timer does not "
                       "keep pace with the host clock (%" PRId64 " ns apart)", lo - hi);
    g->stamp_off_ns = lo + (hi - lo) / 2;
    g->stamp_err_ns = g->stats.stamp_err_ns = (hi - lo) / 2;
    return MP_OK;
}

/* MP_GPU_INIT_TRACE=1: each phase of mp_gpu_exec_new on stderr as it starts (where a start hangs; a
 * diagnostic that prints from the library on purpose: a hung start returns no error to print) */
static void init_phase(const mp_gpu *g, const char *what)
{
    if (g->init_trace)
        fprintf(stderr, "moeplan: GPU executor: %s\n", what);
}

/* ---- mp_gpu_exec_new, phase by phase ---- */

/* What the executor supports: a device, a placement of this model's shape, the kernels' limits. */
static mp_status check_support(const mp_hparams *hp, const mp_placement *pl, mp_error *err)
{
    char why[256];
    if (!mp_cuda_available(why, sizeof why))
        return mp_fail(err, MP_ERR_DEVICE, "GPU executor: %s", why);
    if (pl->n_layer != hp->n_layer || pl->n_expert != hp->n_expert)
        return mp_fail(err, MP_ERR_ARG, "GPU executor: the placement has %" PRId64 " layers × %"
                       PRId64 " experts, the model %" PRId64 " × %" PRId64,
                       pl->n_layer, pl->n_expert, hp->n_layer, hp->n_expert);
    if (hp->n_expert > 1024 || hp->n_expert_used > MP_GPU_MAX_TOP_K || hp->head_dim > 256)
        return mp_fail(err, MP_ERR_LIMIT, "GPU executor: %" PRId64 " experts (max 1024), top-%" PRId64
                       " (max %d) or head_dim %" PRId64 " (max 256) unsupported",
                       hp->n_expert, hp->n_expert_used, MP_GPU_MAX_TOP_K, hp->head_dim);
    return MP_OK;
}

/* The host-side tables: per layer (device tensors, hook timing, events, round trips, far
 * decisions), the step's expert mask and counts, and the executor's copy of the placement. */
static mp_status alloc_host_tables(mp_gpu *g, const mp_placement *pl, mp_error *err)
{
    const mp_hparams *hp = &g->s->m->hp;
    g->layers = calloc((size_t)hp->n_layer, sizeof *g->layers);
    g->timing = calloc((size_t)hp->n_layer, sizeof *g->timing);
    g->ev_moe = calloc((size_t)(2 * hp->n_layer), sizeof *g->ev_moe);
    g->ev_rt = calloc((size_t)(2 * hp->n_layer), sizeof *g->ev_rt);
    g->rt_pending = calloc((size_t)hp->n_layer, sizeof *g->rt_pending);
    g->rt_cpu_ns = calloc((size_t)hp->n_layer, sizeof *g->rt_cpu_ns);
    g->rt_warm = calloc((size_t)hp->n_layer, sizeof *g->rt_warm);
    g->far = calloc((size_t)hp->n_layer, sizeof *g->far);
    g->far_split_r0 = calloc((size_t)hp->n_layer * (MP_GPU_MAX_TOP_K + 1), sizeof *g->far_split_r0);
    g->h_mask = calloc((size_t)pl->words_per_layer, sizeof *g->h_mask);
    g->h_count = calloc((size_t)hp->n_expert, sizeof *g->h_count);
    g->h_copy_list = calloc((size_t)hp->n_expert, sizeof *g->h_copy_list);
    g->h_cold = calloc((size_t)hp->n_expert, sizeof *g->h_cold);
    g->h_cold_rows = calloc((size_t)hp->n_expert, sizeof *g->h_cold_rows);
    g->h_cold_cpu = calloc((size_t)hp->n_expert, sizeof *g->h_cold_cpu);
    g->h_cold_order = calloc((size_t)hp->n_expert, sizeof *g->h_cold_order);
    g->h_cold_copy = calloc((size_t)hp->n_expert, sizeof *g->h_cold_copy);
    g->h_served = calloc((size_t)(hp->n_layer * g->s->n_batch * hp->n_expert_used), 1);
    if (!g->layers || !g->timing || !g->ev_moe || !g->ev_rt || !g->rt_pending || !g->rt_cpu_ns || !g->rt_warm || !g->far || !g->far_split_r0 ||
        !g->h_mask || !g->h_count || !g->h_copy_list || !g->h_served || !g->h_cold || !g->h_cold_rows ||
        !g->h_cold_cpu || !g->h_cold_order || !g->h_cold_copy)
        return mp_fail(err, MP_ERR_NOMEM, "GPU executor: out of memory");
    g->decode_costs = pl->decode_costs != NULL;
    g->cpu_k = pl->cpu_rows_ns ? 1.0 : 0.0; /* the planner's level, else unknown until measured */
    return copy_placement(pl, &g->pl, err);
}

/* g->costs_machine: what differs between the machine the decode costs dc measured and this one
 * (gpu: this device's name), said once on stderr where far routes can run (the row and the report
 * say it anyway), and a grid measured on a noisy host (mp_cost_decode_spread); nothing without
 * costs. */
static void compare_costs_machine(mp_gpu *g, const mp_decode_costs *dc, const char *gpu)
{
    if (!dc)
        return;
    char cpu[128];
    mp_cpu_model_name(cpu, sizeof cpu);
    if (mp_decide_other_machine(dc->machine.cpu, dc->machine.cores, dc->machine.gpu, cpu, mp_cpu_count(), gpu,
                                g->costs_machine, sizeof g->costs_machine) &&
        g->n_hybrid_layers > 0)
        fprintf(stderr, "moeplan: warning: --costs was calibrated on another machine (%s): the far routes it "
                "decides may lose here; run `moeplan calibrate` on this machine\n", g->costs_machine);
    if (dc->noisy_spread > 0 && g->n_hybrid_layers > 0)
        fprintf(stderr, "moeplan: warning: --costs' decode grid spread %.0f %% of a layer's time on average while "
                "it was measured (quiet hosts: under %.0f %%): the far routes it decides follow that noise; run "
                "`moeplan calibrate` again on a quiet machine\n", 100 * dc->noisy_spread, 100 * MP_COST_GRID_NOISY);
}

/* (1) Every device allocation's size, before any is made, into g->mem by term (and
 * expert_bytes_max, n_hybrid_layers). *staging: the executor gets staging buffers (hybrid layers
 * and prefill-sized batches); with them, *far_bytes of far-route tables. */
static mp_status plan_memory(mp_gpu *g, const mp_placement *pl, bool *staging, size_t *far_bytes, mp_error *err)
{
    const mp_session *s = g->s;
    const mp_hparams *hp = &s->m->hp;
    size_t pool = 0;
    for (int64_t il = 0; il < hp->n_layer; il++) {
        const size_t slot = mp_gpu_expert_layout(&s->m->layers[il], NULL, NULL);
        g->expert_bytes_max = slot > g->expert_bytes_max ? slot : g->expert_bytes_max;
        pool += slot * (size_t)pl->n_resident[il];
        g->n_hybrid_layers += pl->n_resident[il] < hp->n_expert;
    }
    mp_placement_geom geo;
    mp_status gst = mp_placement_geom_from_model(s->m, &geo, err);
    if (gst)
        return gst;
    mp_gpu_scratch_plan(&geo, s->n_ctx, s->n_batch, &g->sp);
    g->stage_experts = mp_gpu_stage_experts(&geo);
    mp_placement_geom_free(&geo);
    carve sc = {NULL, 0}, wc = {NULL, 0};
    carve_scratch(g, &sc);
    if (sc.used != g->sp.total) /* the budget counted g->sp.total */
        return mp_fail(err, MP_ERR_INTERNAL, "GPU executor: scratch carved %zu bytes, planned %zu", sc.used,
                       g->sp.total);
    mp_status st = upload_weights(g, &wc, err); /* sizing pass: copies nothing */
    if (st)
        return st;
    const int64_t KV = hp->n_head_kv * hp->head_dim;
    g->mem.weights = wc.used;
    g->mem.kv = 2 * mp_gpu_align((size_t)(s->n_ctx * KV) * 2) * (size_t)hp->n_layer;
    g->mem.scratch = sc.used;
    *staging = g->n_hybrid_layers > 0 && mp_gpu_staging(s->n_batch);
    /* far routes' tables: where each cold expert is in the host copy, and each layer's decision
     * (the host copy that they read is made with the staging buffers) */
    *far_bytes = mp_gpu_align((size_t)(3 * hp->n_layer * hp->n_expert) * sizeof(void *)) +
                 mp_gpu_align((size_t)hp->n_layer * (MP_GPU_MAX_TOP_K + 1)) +
                 mp_gpu_align((size_t)hp->n_layer * (MP_GPU_MAX_TOP_K + 1) * sizeof(int32_t));
    g->mem.staging = *staging ? 2 * ((size_t)g->stage_experts * g->expert_bytes_max +
                                     mp_gpu_align((size_t)(3 * hp->n_expert) * sizeof(void *))) +
                                    *far_bytes
                              : 0;
    g->mem.pool = pool;
    g->mem.tier = mp_gpu_tier_bytes(g, pl);
    g->mem.total = g->mem.weights + g->mem.kv + g->mem.scratch + g->mem.staging + g->mem.pool + g->mem.tier;
    return MP_OK;
}

/* (2) The plan against the placement's budget (every term named) and the device's free memory;
 * the device's name. */
static mp_status check_budget(mp_gpu *g, const mp_placement *pl, mp_error *err)
{
    if (pl->budget.budget_bytes && g->mem.total > pl->budget.budget_bytes) {
        char b[6][32];
        mp_format_bytes(pl->budget.budget_bytes, b[0], sizeof b[0]);
        mp_format_bytes(g->mem.weights + g->mem.kv + g->mem.scratch + g->mem.staging, b[1], sizeof b[1]);
        mp_format_bytes(g->mem.pool, b[2], sizeof b[2]);
        mp_format_bytes(g->mem.total, b[3], sizeof b[3]);
        mp_format_bytes(g->mem.kv, b[4], sizeof b[4]);
        mp_format_bytes(g->mem.tier, b[5], sizeof b[5]);
        return mp_fail(err, MP_ERR_LIMIT, "GPU executor: needs %s (fixed %s incl. KV cache %s, "
                       "expert pool %s, adaptive tier %s) but the GPU budget is %s: lower --ctx or --batch, "
                       "--adaptive-slots, or place fewer experts on the GPU", b[3], b[1], b[4], b[2], b[5], b[0]);
    }
    size_t free_b = 0, total_b = 0;
    CCHECK(cudaMemGetInfo(&free_b, &total_b), "cudaMemGetInfo");
    if (g->mem.total > free_b) {
        char need[32], have[32];
        mp_format_bytes(g->mem.total, need, sizeof need);
        mp_format_bytes(free_b, have, sizeof have);
        return mp_fail(err, MP_ERR_LIMIT, "GPU executor: needs %s of device memory, %s free: use "
                       "--gpu-budget with --placement fill (or fewer experts)", need, have);
    }
    struct cudaDeviceProp prop;
    CCHECK(cudaGetDeviceProperties(&prop, 0), "cudaGetDeviceProperties");
    snprintf(g->name, sizeof g->name, "%s (sm_%d%d, %.1f GiB)", prop.name, prop.major, prop.minor,
             (double)total_b / (1024.0 * 1024 * 1024));
    compare_costs_machine(g, pl->decode_costs, prop.name);
    return MP_OK;
}

/* (3) The streams (the forward pass's, the prefill copies', the K/V side streams) and events. */
static mp_status create_streams(mp_gpu *g, mp_error *err)
{
    CCHECK(cudaStreamCreateWithFlags(&g->stream, cudaStreamNonBlocking), "cudaStreamCreate");
    CCHECK(cudaStreamCreateWithFlags(&g->copy_stream, cudaStreamNonBlocking), "cudaStreamCreate");
    CCHECK(cudaEventCreateWithFlags(&g->ev_fork, cudaEventDisableTiming), "cudaEventCreate");
    for (int i = 0; i < 2; i++) {
        CCHECK(cudaStreamCreateWithFlags(&g->side[i], cudaStreamNonBlocking), "cudaStreamCreate");
        CCHECK(cudaEventCreateWithFlags(&g->ev_join[i], cudaEventDisableTiming), "cudaEventCreate");
    }
    CCHECK(cudaEventCreateWithFlags(&g->ev_host, cudaEventDisableTiming), "cudaEventCreate");
    CCHECK(cudaEventCreateWithFlags(&g->ev_io, cudaEventDisableTiming), "cudaEventCreate");
    for (int b = 0; b < 2; b++) {
        CCHECK(cudaEventCreateWithFlags(&g->ev_stage_ready[b], cudaEventDisableTiming), "cudaEventCreate");
        CCHECK(cudaEventCreateWithFlags(&g->ev_stage_free[b], cudaEventDisableTiming), "cudaEventCreate");
    }
    for (int64_t i = 0; i < 2 * g->s->m->hp.n_layer; i++) {
        CCHECK(cudaEventCreate(&g->ev_moe[i]), "cudaEventCreate");
        CCHECK(cudaEventCreate(&g->ev_rt[i]), "cudaEventCreate");
    }
    return MP_OK;
}

/* (3) The device arenas of the plan, carved: scratch (the cuBLAS workspace at its end), after it
 * the staging buffers and far-route tables, the KV cache; weights and pool are filled by
 * upload_weights and upload_experts. */
static mp_status alloc_device(mp_gpu *g, bool staging, size_t far_bytes, mp_error *err)
{
    const mp_session *s = g->s;
    const mp_hparams *hp = &s->m->hp;
    CCHECK(cudaMalloc((void **)&g->d_weights, g->mem.weights), "cudaMalloc (weights)");
    CCHECK(cudaMalloc((void **)&g->d_kv, g->mem.kv), "cudaMalloc (KV cache)");
    CCHECK(cudaMalloc((void **)&g->d_scratch, g->mem.scratch + g->mem.staging), "cudaMalloc (scratch)");
    if (g->mem.pool)
        CCHECK(cudaMalloc((void **)&g->d_pool, g->mem.pool), "cudaMalloc (expert pool)");
    if (g->mem.tier)
        CCHECK(cudaMalloc((void **)&g->d_tier, g->mem.tier), "cudaMalloc (adaptive tier)");
    carve sc = {g->d_scratch, 0};
    carve_scratch(g, &sc);
    CCHECK(cudaMemcpy(g->d_rope_theta, g->s->rope_theta, (size_t)(hp->rot_dim / 2) * sizeof(double),
                      cudaMemcpyHostToDevice), "RoPE angles upload");
    if (staging) {
        carve stc = {g->d_scratch + g->mem.scratch, 0};
        g->d_stage = take(&stc, 2 * (size_t)g->stage_experts * g->expert_bytes_max);
        for (int b = 0; b < 2; b++)
            g->d_stage_slots[b] = take(&stc, (size_t)(3 * hp->n_expert) * sizeof(void *));
        /* a layer step enqueues all its batches before the CPU's work: one host table each (and
         * one spare), reused only once its upload has run */
        g->n_stage_tabs = (int)((hp->n_expert + g->stage_experts - 1) / g->stage_experts) + 1;
        CCHECK(cudaMallocHost((void **)&g->h_stage_tabs,
                              (size_t)g->n_stage_tabs * (size_t)(3 * hp->n_expert) * sizeof(void *)),
               "cudaMallocHost");
        if (!(g->ev_stage_tab = calloc((size_t)g->n_stage_tabs, sizeof *g->ev_stage_tab)))
            return mp_fail(err, MP_ERR_NOMEM, "GPU executor: out of memory");
        for (int i = 0; i < g->n_stage_tabs; i++)
            CCHECK(cudaEventCreateWithFlags(&g->ev_stage_tab[i], cudaEventDisableTiming), "cudaEventCreate");
        g->d_far = take(&stc, far_bytes); /* the tables of far routes after it (mp_gpu_far_setup) */
    }
    const int64_t KV = hp->n_head_kv * hp->head_dim;
    carve kc = {g->d_kv, 0};
    for (int64_t il = 0; il < hp->n_layer; il++) {
        g->layers[il].k_cache = take(&kc, (size_t)(s->n_ctx * KV) * 2);
        g->layers[il].v_cache = take(&kc, (size_t)(s->n_ctx * KV) * 2);
    }
    return MP_OK;
}

/* (3) The page-locked host buffers: tokens and positions, routes, rows and partials, the handoff
 * flags and stamps, logits. The handoff and stamp kernels use host pointers as device pointers: a
 * device without unified addressing gets neither (decode graphs and step stamps off). */
static mp_status alloc_pinned(mp_gpu *g, mp_error *err)
{
    const mp_hparams *hp = &g->s->m->hp;
    const size_t B = (size_t)g->s->n_batch, K = (size_t)hp->n_expert_used, D = (size_t)hp->n_embd;
    const size_t L = (size_t)hp->n_layer;
    CCHECK(cudaMallocHost((void **)&g->h_io, 2 * B * sizeof(int32_t)), "cudaMallocHost");
    CCHECK(cudaMallocHost((void **)&g->h_tables, 3 * L * (size_t)hp->n_expert * sizeof *g->h_tables), "cudaMallocHost");
    CCHECK(cudaMallocHost((void **)&g->h_ids, L * B * K * sizeof(int32_t)), "cudaMallocHost");
    CCHECK(cudaMallocHost((void **)&g->h_w, L * B * K * sizeof(float)), "cudaMallocHost");
    CCHECK(cudaMallocHost((void **)&g->h_route1, 2 * L * K * sizeof(uint32_t)), "cudaMallocHost");
    CCHECK(cudaMallocHost((void **)&g->h_x, B * D * sizeof(float)), "cudaMallocHost");
    CCHECK(cudaMallocHost((void **)&g->h_part, B * D * sizeof(float)), "cudaMallocHost");
    CCHECK(cudaMallocHost((void **)&g->h_flags, 2 * L * sizeof *g->h_flags), "cudaMallocHost");
    CCHECK(cudaMallocHost((void **)&g->h_stamps, 3 * L * sizeof *g->h_stamps), "cudaMallocHost");
    memset(g->h_stamps, 0, 3 * L * sizeof *g->h_stamps);
    CCHECK(cudaMallocHost((void **)&g->h_logits, (size_t)MP_GPU_HEAD_ROWS * (size_t)hp->n_vocab * sizeof(float)),
           "cudaMallocHost");
    int unified = 0;
    if (cudaDeviceGetAttribute(&unified, cudaDevAttrUnifiedAddressing, 0) != cudaSuccess || !unified) {
        cudaGetLastError();
        g->graphs_off = true; /* a decode graph's hybrid layers hand off through mapped memory */
        snprintf(g->graphs_why, sizeof g->graphs_why, "off (no unified addressing%s)",
                 g->step_stamps ? "; MP_GPU_STEP_STAMPS: no stamps either" : "");
        g->step_stamps = false;
    }
    return g->step_stamps ? calibrate_stamps(g, err) : MP_OK;
}

/* (3) cuBLAS on the executor's stream, its workspace the last MP_GPU_BLAS_WS_BYTES of the scratch
 * arena (carve_scratch), so that the budget counts it. */
static mp_status setup_blas(mp_gpu *g, mp_error *err)
{
    int rc = mp_cuda_blas_create(&g->blas, g->stream);
    if (!rc)
        rc = mp_cuda_blas_set_workspace(g->blas, g->d_scratch + g->mem.scratch - MP_GPU_BLAS_WS_BYTES,
                                        MP_GPU_BLAS_WS_BYTES);
    return rc ? mp_gpu_kernel_fail(err, "cuBLAS setup", rc) : MP_OK;
}

/* (5) The cold experts in host memory (gpu_host.c: a page-locked copy with staging buffers or an
 * adaptive tier, whose copies read it) and, with the staging buffers, the measured copy cost and
 * the far routes' tables and decisions; then the tier (none: g->live is the placement's bits). */
static mp_status setup_host_experts(mp_gpu *g, const mp_placement *pl, bool staging, mp_error *err)
{
    const bool copy = staging || g->mem.tier > 0;
    init_phase(g, copy ? "copying and page-locking the host experts" : "host experts");
    mp_status st = mp_gpu_host_experts(g, copy, err);
    if (!st && (st = mp_gpu_tier_setup(g, pl, err)) == MP_OK && g->gt)
        init_phase(g, "adaptive tier");
    if (st || !staging)
        return st;
    init_phase(g, "timing an expert copy");
    mp_gpu_measure_copy(g);
    if ((st = mp_gpu_far_setup(g, err)))
        return st;
    return mp_gpu_far_decide(g, pl, err);
}

/* Everything after the checks, in order; on failure mp_gpu_exec_new frees what was made. */
static mp_status build(mp_gpu *g, const mp_placement *pl, mp_error *err)
{
    bool staging = false;
    size_t far_bytes = 0;
    mp_status st;
    if ((st = alloc_host_tables(g, pl, err)))
        return st;
    init_phase(g, "planning device memory");
    if ((st = plan_memory(g, pl, &staging, &far_bytes, err)) || (st = check_budget(g, pl, err)))
        return st;
    init_phase(g, "streams, events, device and pinned memory, cuBLAS");
    if ((st = create_streams(g, err)) || (st = alloc_device(g, staging, far_bytes, err)) ||
        (st = alloc_pinned(g, err)) || (st = setup_blas(g, err)))
        return st;
    init_phase(g, "weights and resident experts");
    carve wc = {g->d_weights, 0};
    if ((st = upload_weights(g, &wc, err)) || (st = upload_experts(g, err)) ||
        (st = setup_host_experts(g, pl, staging, err)))
        return st;
    init_phase(g, "synchronizing");
    CCHECK(cudaMemset(g->d_bad, 0, sizeof(int)), "cudaMemset");
    CCHECK(cudaMemset(g->d_count, 0, sizeof(unsigned)), "cudaMemset");
    CCHECK(cudaDeviceSynchronize(), "cudaDeviceSynchronize");
    init_phase(g, "ready");
    return MP_OK;
}

mp_status mp_gpu_exec_new(mp_session *s, const mp_placement *pl, mp_gpu **out, mp_error *err)
{
    *out = NULL;
    mp_status st = check_support(&s->m->hp, pl, err);
    if (st)
        return st;
    /* low-latency waits for the decode round trip; harmless if the context already exists */
    cudaSetDeviceFlags(cudaDeviceScheduleSpin);
    cudaGetLastError();
    mp_gpu *g = calloc(1, sizeof *g);
    if (!g)
        return mp_fail(err, MP_ERR_NOMEM, "GPU executor: out of memory");
    g->s = s;
    g->copy_min_rows = MP_GPU_COPY_MIN_ROWS;
    knob_switches(g, &s->knobs);
    if ((st = build(g, pl, err))) {
        mp_gpu_exec_free(g);
        return st;
    }
    *out = g;
    return MP_OK;
}

void mp_gpu_exec_get_memory(const mp_gpu *g, mp_gpu_memory *out)
{
    *out = g->mem;
}

void mp_gpu_exec_get_stats(const mp_gpu *g, mp_gpu_stats *out)
{
    *out = g->stats;
}

void mp_gpu_exec_stats_reset(mp_gpu *g)
{
    memset(&g->stats, 0, sizeof g->stats);
    g->stats.stamp_err_ns = g->stamp_err_ns;
    g->last_sync_ns = 0; /* the next step's host gap is not counted */
}

const char *mp_gpu_exec_device_name(const mp_gpu *g)
{
    return g->name;
}

const char *mp_gpu_exec_costs_machine(const mp_gpu *g)
{
    return g->costs_machine;
}

void mp_gpu_exec_report(const mp_gpu *g, char *buf, size_t cap)
{
    char t[6][32];
    mp_format_bytes(g->mem.total, t[0], sizeof t[0]);
    mp_format_bytes(g->mem.weights, t[1], sizeof t[1]);
    mp_format_bytes(g->mem.kv, t[2], sizeof t[2]);
    mp_format_bytes(g->mem.scratch + g->mem.staging, t[3], sizeof t[3]);
    mp_format_bytes(g->mem.pool, t[4], sizeof t[4]);
    const mp_gpu_stats *st = &g->stats;
    const double routes = (double)mp_gpu_stats_routes(st);
    const double pct = routes > 0 ? 100.0 / routes : 0.0;
    snprintf(buf, cap, "%s; memory %s (weights %s, KV %s, scratch %s, expert pool %s); routes gpu "
             "%.1f %%, cpu %.1f %%, copied %.1f %% (%" PRId64 " expert copies), far %.1f %%; %" PRId64
             " of %" PRId64 " MoE layer steps hybrid, host wait %.1f us each",
             g->name, t[0], t[1], t[2], t[3], t[4], pct * (double)st->routes_gpu,
             pct * (double)st->routes_cpu, pct * (double)st->routes_copied, st->experts_copied,
             pct * (double)st->routes_far,
             st->hybrid_layers, st->moe_layers,
             st->hybrid_layers ? (double)st->sync_wait_ns / 1e3 / (double)st->hybrid_layers : 0.0);
    {
        const size_t len = strlen(buf);
        char copy[160] = "not copied";
        if (g->d_stage && g->copy_fixed)
            snprintf(copy, sizeof copy, "copied at >= %" PRId64 " rows", g->copy_min_rows);
        else if (g->d_stage && g->pl.cpu_rows_ns)
            snprintf(copy, sizeof copy, "copied by cost (link %.1f GB/s, CPU at %.2fx the --costs price)",
                     g->pcie_ns_per_byte > 0 ? 1.0 / g->pcie_ns_per_byte : 0.0, g->cpu_k);
        else if (g->d_stage)
            snprintf(copy, sizeof copy, "copied by cost (link %.1f GB/s, CPU %.1f us per route)",
                     g->pcie_ns_per_byte > 0 ? 1.0 / g->pcie_ns_per_byte : 0.0, g->cpu_k / 1e3);
        char host[160];
        mp_gpu_exec_host_report(g, host, sizeof host);
        char far[160] = "off: no page-locked host copy";
        if (!g->n_hybrid_layers)
            snprintf(far, sizeof far, "off: no host experts");
        else if (!g->d_stage && g->host_registered)
            snprintf(far, sizeof far, "off: no staging buffers (batches below %d rows)", MP_GPU_COPY_MIN_ROWS);
        else if (g->d_far_of_cold && !g->decode_costs)
            snprintf(far, sizeof far, "off: no decode costs (--costs, from `moeplan calibrate`)");
        else if (g->d_far_of_cold) {
            int split = 1; /* the decode costs' units, the same on every layer */
            for (int64_t il = 0; il < g->s->m->hp.n_layer; il++)
                split = g->far[il].on && g->far[il].split > split ? g->far[il].split : split;
            char units[96] = "";
            if (split > 1)
                snprintf(units, sizeof units, ", in 1/%d experts: %" PRId64 " routes split with the CPU%s", split,
                         st->routes_split, st->routes_split_by_unit ? ", down by unit" : "");
            snprintf(far, sizeof far, "on %" PRId64 " of %" PRId64 " hybrid layers (by the decode costs%s%s)",
                     g->n_far_layers, g->n_hybrid_layers, g->costs_machine[0] ? " of another machine" : "", units);
        }
        snprintf(buf + len, cap - len, "; %s, %s; far routes %s; decode graphs: %s",
                 host, copy, far,
                 g->graphs_off        ? g->graphs_why
                 : !g->step_graph     ? "not used"
                 : g->n_hybrid_layers ? "one per step, hybrid layers handing off through mapped host memory"
                                      : "one per step");
    }
    if (g->gt) {
        const size_t len = strlen(buf);
        char tier[200], tb[32];
        mp_gpu_tier_report(g, tier, sizeof tier);
        mp_format_bytes(g->mem.tier, tb, sizeof tb);
        snprintf(buf + len, cap - len, "; adaptive tier (%s, %s): %s", mp_tier_policy_name(g->pl.tier_policy), tb, tier);
    }
    if (st->rt_measured) {
        const size_t len = strlen(buf);
        snprintf(buf + len, cap - len, "; GPU gap %.1f us, round-trip overhead %.1f us per hybrid "
                 "layer step (%" PRId64 " measured)", (double)st->rt_gap_ns / 1e3 / (double)st->rt_measured,
                 (double)st->rt_overhead_ns / 1e3 / (double)st->rt_measured, st->rt_measured);
    }
    if (st->rt_warm) {
        const size_t len = strlen(buf);
        snprintf(buf + len, cap - len, ", %.1f %% of them warm (every route resident: %.1f us of GPU work, "
                 "nothing to overlap)", 100.0 * (double)st->rt_warm / (double)st->rt_measured,
                 (double)st->rt_warm_gpu_ns / 1e3 / (double)st->rt_warm);
    }
}

void mp_gpu_exec_set_measure(mp_gpu *g, bool on)
{
    g->measure = on;
}

void mp_gpu_exec_set_copy_min_rows(mp_gpu *g, int64_t min_rows)
{
    g->copy_min_rows = min_rows;
    g->copy_fixed = true;
}

void mp_gpu_exec_set_gemm_min_rows(mp_gpu *g, int64_t min_rows)
{
    /* never below the default: the GEMM scratch was sized for steps of at least that many rows */
    g->gemm_min_rows = min_rows > MP_GPU_GEMM_MIN_ROWS ? min_rows : MP_GPU_GEMM_MIN_ROWS;
}

int64_t mp_gpu_exec_copy_min_rows(const mp_gpu *g)
{
    return g->d_stage && g->copy_fixed ? g->copy_min_rows : 0;
}
