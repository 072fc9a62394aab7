/* gpu/gpu_moe.c — one MoE layer on the GPU executor (mp_gpu_moe_layer): routing, resident
 * experts, and the hybrid path for experts that live in host memory (gpu.h has the picture).
 *
 * Per layer and step:
 *   1. routing: the router GEMV + softmax/top-k on the device, or the route source on the host
 *      (uploaded);
 *   2. every expert resident: one mp_cuda_moe_experts launch pair writes d_proj. Done.
 *   3. otherwise: the rows (f32), ids and weights go to pinned host memory (copied, with an event;
 *      in a decode graph step, published into mapped memory with a flag); the resident experts
 *      start on the GPU (into d_proj); the host waits for the rows (the round trip), then
 *        - prefill: a share of the cold experts, the ones that cost the CPU most, as many as
 *          balance the link's copies against the CPU's rest (mp_decide_copies), is copied to
 *          staging slots and run on the GPU (accumulating into d_proj); every batch is enqueued
 *          before the CPU starts, two staging buffers alternating on the copy stream; those the
 *          adaptive tier admits go on from staging into its slots (gpu_tier.c);
 *        - decode, far routes (mp_gpu_far_on: the layer's decision, runtime/decide.h): the
 *          resident experts' launch also ran the first table[c] of the step's c cold routes,
 *          their weights gathered from the page-locked host copy over the bus
 *          (kernels/cuda/moe.cuh); the host leaves those to the GPU;
 *        - the CPU computes the remaining routes (mp_moe_experts_cpu, f32, slot order) into
 *          h_part, which is uploaded and added to d_proj: one f32 add of two f32 partials.
 * Nothing is rounded below f32 on the way, so the result equals the GPU-only combine up to the
 * order of the f32 additions.
 */
#include "mp_config.h"

#include <inttypes.h>
#include <limits.h>
#include <string.h>

#include "kernels/cuda/cuda_ops.h"
#include "gpu/gpu_impl.h"
#include "runtime/decide.h"
#include "runtime/moe.h"
#include "runtime/threadpool.h"

/* A route source's decode routes: every layer's were uploaded at the start of the step (one
 * copy; gpu_forward.c); larger steps upload each layer's before its MoE. */
static bool decode_routes(const mp_gpu *g, int64_t n)
{
    return g->s->route_src && n == 1;
}

/* The step's routes of layer il on the device: the route source's decode routes (uploaded at the
 * start of the step), else the router's (or a prefill step's upload) */
static void step_routes(const mp_gpu *g, int64_t il, int64_t n, const int32_t **ids, const float **weights)
{
    const int64_t K = g->s->m->hp.n_expert_used;
    *ids = decode_routes(g, n) ? g->d_rids + il * K : g->d_ids;
    *weights = decode_routes(g, n) ? g->d_rw + il * K : g->d_w;
}

/* The experts' down biases of every route of the layer (gpt-oss), once its experts have all written
 * d_proj: the GPU adds them whichever side ran a route (moe.h: the CPU's partial carries none) */
static mp_status down_biases(mp_gpu *g, int64_t il, int64_t n, mp_error *err)
{
    const gpu_layer *G = &g->layers[il];
    const mp_hparams *hp = &g->s->m->hp;
    if (!G->down_exps_b)
        return MP_OK;
    const int32_t *ids;
    const float *w;
    step_routes(g, il, n, &ids, &w);
    KCHECK(mp_cuda_moe_down_bias(g->d_proj, ids, w, G->down_exps_b, n, hp->n_expert_used, hp->n_embd, hp->n_expert,
                                 g->stream), "expert down biases");
    return MP_OK;
}

static mp_cuda_moe_args moe_args(mp_gpu *g, int64_t il, int64_t n, const void *const *slots,
                                 int64_t E, int accumulate)
{
    const mp_layer *L = &g->s->m->layers[il];
    const mp_hparams *hp = &g->s->m->hp;
    mp_cuda_moe_args a = {0};
    const mp_tensor *ts[3] = {&L->gate_exps, &L->up_exps, &L->down_exps};
    mp_cuda_expert_tensor *out[3] = {&a.gate, &a.up, &a.down};
    for (int t = 0; t < 3; t++) {
        out[t]->type = ts[t]->type;
        out[t]->d_base = NULL;
        out[t]->expert_bytes = ts[t]->row_bytes * (size_t)ts[t]->ne[1];
        out[t]->d_slots = slots + t * E;
        out[t]->row_bytes = ts[t]->row_bytes;
    }
    a.n_embd = hp->n_embd;
    a.n_ff = hp->n_ff_exp;
    a.n_expert = hp->n_expert;
    a.top_k = hp->n_expert_used;
    a.n_rows = n;
    a.d_x = g->d_xb;
    a.d_xq = g->moe_xq; /* converted by the layer's norm (gpu_forward.c), or NULL */
    step_routes(g, il, n, &a.d_ids, &a.d_weights);
    a.act = mp_arch_get(hp->arch)->act == MP_ACT_SWIGLU_OAI ? MP_CUDA_ACT_SWIGLU_OAI : MP_CUDA_ACT_SWIGLU;
    a.d_gate_b = g->layers[il].gate_exps_b;
    a.d_up_b = g->layers[il].up_exps_b;
    a.d_out = g->d_proj;
    a.accumulate = accumulate;
    a.d_scratch = g->d_moe_scratch;
    a.scratch_bytes = g->moe_scratch_bytes;
    if (mp_gpu_far_on(g, il, n)) { /* some cold routes read host memory */
        for (int t = 0; t < 3; t++)
            out[t]->d_far = (const void *const *)g->d_far + (il * 3 + t) * hp->n_expert;
        a.d_far_of_cold = g->d_far_of_cold + il * (MP_GPU_MAX_TOP_K + 1);
        /* the split table only where the layer counts far work in parts of an expert (the gather
         * without one is the plain copy) */
        if (g->far[il].split > 1)
            a.d_far_split_of_cold = g->d_far_split_of_cold + il * (MP_GPU_MAX_TOP_K + 1);
        /* gathered into the staging buffers (decode steps never copy): as many as a step may
         * run, whatever the table says now, so that a captured graph serves any */
        a.far_max = g->far_max;
        a.d_far_stage = g->d_stage;
        a.far_stage_bytes = 2 * (size_t)g->stage_experts * g->expert_bytes_max;
    }
    return a;
}

/* The pool's three slot tables of a layer are separate allocations; the kernel wants gate, up and
 * down tables E entries apart, so resident launches pass the tensors one by one. */
static mp_status launch_resident(mp_gpu *g, int64_t il, int64_t n, mp_error *err)
{
    /* (with far routes, also the cold routes that read host memory: moe_args) */
    const gpu_layer *G = &g->layers[il];
    mp_cuda_moe_args a = moe_args(g, il, n, NULL, 0, 0);
    a.gate.d_slots = G->d_slots[0];
    a.up.d_slots = G->d_slots[1];
    a.down.d_slots = G->d_slots[2];
    KCHECK(mp_cuda_moe_experts(&a, g->stream), "MoE experts");
    return MP_OK;
}

/* Stage one batch of cold experts (ids list[0..cnt)) into staging buffer b on the copy stream and
 * run them on the compute stream, accumulating into d_proj when accumulate. */
static mp_status stage_batch(mp_gpu *g, int64_t il, int64_t n, const int32_t *list, int cnt,
                             int accumulate, mp_error *err)
{
    const mp_layer *L = &g->s->m->layers[il];
    const int64_t E = g->s->m->hp.n_expert;
    const int b = g->stage_next;
    g->stage_next ^= 1;
    /* the host table: the ring's next, whose last upload has run by now (a layer step holds fewer
     * batches than the ring has tables, and the previous step has drained before this one's
     * routes reached the host), so this wait does not block */
    const int ti = g->stage_tab_next;
    g->stage_tab_next = (ti + 1) % g->n_stage_tabs;
    CCHECK(cudaEventSynchronize(g->ev_stage_tab[ti]), "staging");
    const void **tab = g->h_stage_tabs + (size_t)ti * (size_t)(3 * E);
    memset(tab, 0, (size_t)(3 * E) * sizeof *tab);
    /* the device's buffer b is free once the kernel that read it two batches ago has run: the
     * copy stream waits for that, the host does not */
    CCHECK(cudaStreamWaitEvent(g->copy_stream, g->ev_stage_free[b], 0), "staging");
    size_t nb[3], off[3];
    mp_gpu_expert_layout(L, nb, off);
    for (int j = 0; j < cnt; j++) {
        char *dst = g->d_stage + ((size_t)b * (size_t)g->stage_experts + (size_t)j) * g->expert_bytes_max;
        for (int t = 0; t < 3; t++) {
            CCHECK(cudaMemcpyAsync(dst + off[t], mp_gpu_host_slice(g, il, t, list[j]), nb[t], cudaMemcpyHostToDevice,
                                   g->copy_stream), "expert weight copy");
            tab[t * E + list[j]] = dst + off[t];
            g->stats.bytes_copied += (int64_t)nb[t];
        }
    }
    CCHECK(cudaMemcpyAsync((void *)g->d_stage_slots[b], tab, (size_t)(3 * E) * sizeof *tab,
                           cudaMemcpyHostToDevice, g->copy_stream), "staging table copy");
    CCHECK(cudaEventRecord(g->ev_stage_tab[ti], g->copy_stream), "cudaEventRecord");
    CCHECK(cudaEventRecord(g->ev_stage_ready[b], g->copy_stream), "cudaEventRecord");
    CCHECK(cudaStreamWaitEvent(g->stream, g->ev_stage_ready[b], 0), "staging");
    mp_cuda_moe_args a = moe_args(g, il, n, (const void *const *)g->d_stage_slots[b], E, accumulate);
    a.d_far_of_cold = NULL; /* copies are prefill's, far routes decode's (mp_gpu_far_on) */
    a.far_max = 0;
    KCHECK(mp_cuda_moe_experts(&a, g->stream), "MoE experts (copied)");
    /* experts the adaptive tier admitted in this invocation go to their slots from here */
    mp_status st = mp_gpu_tier_promote(g, il, list, cnt, g->d_stage + (size_t)b * (size_t)g->stage_experts * g->expert_bytes_max,
                                       err);
    if (st)
        return st;
    CCHECK(cudaEventRecord(g->ev_stage_free[b], g->stream), "cudaEventRecord");
    g->stats.experts_copied += cnt;
    return MP_OK;
}

/* Stage list[*done .. n_copy) in batches of stage_experts, at most max_batches of them;
 * the first accumulates onto d_proj only when something already wrote it (*gpu_wrote). */
static mp_status stage_some(mp_gpu *g, int64_t il, int64_t n, const int32_t *list, int n_copy,
                            int max_batches, int *done, bool *gpu_wrote, mp_error *err)
{
    for (int b = 0; b < max_batches && *done < n_copy; b++) {
        const int cnt = n_copy - *done < g->stage_experts ? n_copy - *done : (int)g->stage_experts;
        mp_status st = stage_batch(g, il, n, list + *done, cnt, *gpu_wrote, err);
        if (st)
            return st;
        *gpu_wrote = true;
        *done += cnt;
    }
    return MP_OK;
}

/* One sample into an exponentially weighted mean (0: none yet), keeping `keep` of the old value:
 * the prefill CPU's measured time over its price (cpu_k). */
static void ewma(double *e, double sample, double keep)
{
    *e = *e > 0 ? keep * *e + (1.0 - keep) * sample : sample;
}

double mp_gpu_cpu_rows(const mp_gpu *g, int64_t il, int64_t rows)
{
    const uint32_t max = g->pl.cpu_rows_max;
    if (!g->pl.cpu_rows_ns || max == 0)
        return (double)rows;
    const double *t = g->pl.cpu_rows_ns + (size_t)il * (max + 1);
    return rows <= (int64_t)max ? t[rows] : t[max] * (double)rows / (double)max;
}

double mp_gpu_cpu_fixed(const mp_gpu *g, int64_t il)
{
    return g->pl.cpu_rows_ns ? g->pl.cpu_rows_ns[(size_t)il * (g->pl.cpu_rows_max + 1)] : 0;
}

bool mp_gpu_copy_enabled(const mp_gpu *g, int64_t n)
{
    if (g->copy_fixed)
        return g->copy_min_rows > 0 && n >= g->copy_min_rows;
    return mp_decide_step_copies(n);
}

/* A decode step's cold routes of layer il (experts without a slot), in slot order: their ids into
 * cold (room for top_k), their count returned. */
static int cold_routes(const mp_gpu *g, int64_t il, const int32_t *h_ids, int32_t *cold)
{
    int c = 0;
    for (int64_t i = 0; i < g->s->m->hp.n_expert_used; i++)
        if (!mp_gpu_live(g, il, h_ids[i]))
            cold[c++] = h_ids[i];
    return c;
}

/* Each route's path in hybrid layer il's step, for the hooks (mp_moe_timing.served), in h_ids'
 * order: the placement's resident experts, the tier's slots (live, not resident), far routes (the
 * first n_far cold routes in slot order: cold_routes' order, the kernels' rule), prefill copies
 * (set in h_mask, not live), the CPU (the rest). */
static const uint8_t *fill_served(mp_gpu *g, int64_t il, int64_t n, const int32_t *h_ids, int64_t n_far)
{
    const int64_t K = g->s->m->hp.n_expert_used;
    uint8_t *out = g->h_served + il * g->s->n_batch * K;
    const uint64_t *mask = g->h_mask;
    for (int64_t i = 0; i < n * K; i++) {
        const int32_t e = h_ids[i];
        if (mp_placement_resident(&g->pl, il, e))
            out[i] = MP_SERVED_GPU;
        else if (mp_gpu_live(g, il, e))
            out[i] = MP_SERVED_TIER;
        else if (n_far > 0)
            out[i] = MP_SERVED_FAR, n_far--;
        else if (mp_bit_get(mask, e))
            out[i] = MP_SERVED_COPY;
        else
            out[i] = MP_SERVED_CPU;
    }
    return out;
}

/* The GPU serves expert e in the current step (copied, or far): the CPU skips it (h_mask). */
static void leave_to_gpu(mp_gpu *g, int32_t e)
{
    mp_bit_put(g->h_mask, e, true);
}

bool mp_gpu_far_on(const mp_gpu *g, int64_t il, int64_t n)
{
    /* not beside weight copies (a fixed threshold of one row copies decode experts too): the
     * kernels' far routes are the first cold ones, and a copied expert is cold as well, so it
     * would run twice */
    return n == 1 && g->d_far_of_cold && g->far[il].on && !(g->d_stage && mp_gpu_copy_enabled(g, n));
}

bool mp_gpu_gpu_part(const mp_gpu *g, int64_t il, int64_t n)
{
    return g->layers[il].n_resident > 0 || mp_gpu_far_on(g, il, n) || mp_gpu_tier_serves(g, il);
}

/* Handoff mode: wait until the GPU has published layer il's rows (its flag in mapped memory). The
 * stream is checked every millisecond, so that a failed kernel is an error here, not a hang. */
static mp_status wait_published(mp_gpu *g, int64_t il, mp_error *err)
{
    int64_t next_check = 0;
    for (uint32_t spins = 1;; spins++) {
        if (__atomic_load_n(&g->h_flags[il], __ATOMIC_ACQUIRE) == 1)
            return MP_OK;
        mp_cpu_relax();
        if (spins % 1024)
            continue;
        const int64_t now = mp_gpu_now_ns();
        if (!next_check) {
            next_check = now + 1000000;
        } else if (now >= next_check) {
            const cudaError_t e = cudaStreamQuery(g->stream);
            if (e == cudaSuccess && __atomic_load_n(&g->h_flags[il], __ATOMIC_ACQUIRE) != 1)
                return mp_fail(err, MP_ERR_INTERNAL, "GPU executor: the decode step finished without "
                               "handing layer %" PRId64 "'s rows to the host", il);
            if (e != cudaSuccess && e != cudaErrorNotReady)
                return mp_gpu_cuda_fail(err, "routing handoff", e);
            next_check = now + 1000000;
        }
    }
}

int mp_gpu_copy_choice(mp_gpu *g, int64_t il, size_t expert_bytes, double *cpu_units)
{
    const int64_t E = g->s->m->hp.n_expert;
    int n_cold = 0, n_copy = 0;
    for (int64_t e = 0; e < E; e++)
        if (g->h_count[e] > 0 && !mp_gpu_live(g, il, e)) {
            g->h_cold[n_cold] = (int32_t)e;
            g->h_cold_rows[n_cold] = g->h_count[e];
            /* the CPU's time for these rows (the GPU's compute of a copied expert is a few
             * microseconds and runs while the next copy streams) */
            g->h_cold_cpu[n_cold++] = mp_gpu_cpu_rows(g, il, g->h_count[e]);
        }
    if (g->copy_fixed) {
        for (int i = 0; i < n_cold; i++) {
            g->h_cold_copy[i] = g->copy_min_rows > 0 && g->h_cold_rows[i] >= g->copy_min_rows;
            if (g->h_cold_copy[i])
                g->h_copy_list[n_copy++] = g->h_cold[i];
        }
    } else {
        /* the decision model's rule (the planner's) on the CPU's price and the measured link: the
         * cores and the link share the layer's cold experts. An expert the planner's table prices
         * at nothing is not copied, as the planner charges it; without a table, until the CPU is
         * measured, experts of MP_GPU_COPY_MIN_ROWS rows and more are */
        for (int i = 0; i < n_cold; i++)
            g->h_cold_cpu[i] *= g->cpu_k;
        mp_decide_copies(n_cold, g->h_cold_rows, g->h_cold_cpu, (double)expert_bytes * g->pcie_ns_per_byte,
                         g->pl.cpu_rows_ns ? 0 : MP_GPU_COPY_MIN_ROWS, g->h_cold_order, g->h_cold_copy);
        for (int i = 0; i < n_cold; i++)
            if (g->h_cold_copy[i])
                g->h_copy_list[n_copy++] = g->h_cold[i];
    }
    double units = 0;
    for (int i = 0; i < n_cold; i++)
        if (!g->h_cold_copy[i])
            units += mp_gpu_cpu_rows(g, il, g->h_cold_rows[i]);
    *cpu_units = units > 0 ? units + mp_gpu_cpu_fixed(g, il) : 0;
    return n_copy;
}

mp_status mp_gpu_fetch_routes(mp_gpu *g, int64_t n, mp_error *err)
{
    mp_session *s = g->s;
    const mp_hparams *hp = &s->m->hp;
    const int64_t K = hp->n_expert_used, B = s->n_batch;
    for (int64_t il = 0; il < hp->n_layer; il++) {
        int32_t *h_ids = g->h_ids + il * B * K;
        float *h_w = g->h_w + il * B * K;
        const int rc = s->route_src->route(s->route_src->user, il, n, K, h_ids, h_w);
        if (rc < 0)
            return mp_fail(err, (mp_status)rc, "route source stopped the run at layer %" PRId64, il);
        mp_status st = mp_moe_check_routes(hp, il, n, h_ids, h_w, err);
        if (st)
            return st;
        if (n == 1) { /* packed for the step's single upload */
            memcpy(g->h_route1 + il * K, h_ids, (size_t)K * 4);
            memcpy(g->h_route1 + (hp->n_layer + il) * K, h_w, (size_t)K * 4);
        }
    }
    return MP_OK;
}

bool mp_gpu_layer_hybrid(const mp_gpu *g, int64_t il)
{
    return g->layers[il].n_resident < g->s->m->hp.n_expert;
}

/* Enqueue layer il's routing, the handoff of its rows and routes to the host (hybrid layers), and
 * its resident experts (and far routes) into d_proj. */
static mp_status moe_begin(mp_gpu *g, int64_t il, int64_t n, mp_error *err)
{
    mp_session *s = g->s;
    const mp_hparams *hp = &s->m->hp;
    const gpu_layer *G = &g->layers[il];
    const int64_t E = hp->n_expert, K = hp->n_expert_used, D = hp->n_embd, B = s->n_batch;
    int32_t *h_ids = g->h_ids + il * B * K;
    float *h_w = g->h_w + il * B * K;
    const bool want_routing = s->hooks && s->hooks->routing;
    const bool want_timing = s->hooks && s->hooks->moe_timing;
    mp_moe_timing *t = &g->timing[il];
    memset(t, 0, sizeof *t);
    mp_status st;

    /* 1. routing: the route source's choice (fetched for every layer before the step, see
     * mp_gpu_fetch_routes) is in pinned memory: a decode step uploaded every layer's at its
     * start, larger steps upload it here; a graph replays either with whatever the host put there
     * for the current step. Else the router on the GPU. A replayed decode step runs the router
     * too, its output unused: production decode pays it, and a replayed run is meant to cost what
     * production costs (sim_accuracy.sh compares the two); replayed prefill steps skip it. */
    const bool host_routes = s->route_src != NULL;
    const bool hybrid = G->n_resident < E;
    if (host_routes && !decode_routes(g, n)) {
        CCHECK(cudaMemcpyAsync(g->d_ids, h_ids, (size_t)(n * K) * 4, cudaMemcpyHostToDevice, g->stream),
               "route upload");
        CCHECK(cudaMemcpyAsync(g->d_w, h_w, (size_t)(n * K) * 4, cudaMemcpyHostToDevice, g->stream),
               "route upload");
    } else if (n == 1) {
        /* decode: the GEMV and the top-k in one launch; in a graph step whose layer is hybrid, the
         * same launch hands the row (and routes) to the host through mapped memory (against a GEMV,
         * a top-k and a publish launch: −0.4 µs per layer, −1.3 on a hybrid layer, H200,
         * bench/NOTES-gpu-exec.md run 25). Router weights are F32, F16 or BF16 (model_load.c). */
        const gpu_tensor *R = &G->gate_inp;
        const bool published = hybrid && g->handoff;
        KCHECK(mp_cuda_router_gemv(R->type, R->d, R->row_bytes, E, D, g->d_xb, G->gate_inp_b, g->d_router, K,
                                   hp->expert_weights_norm, g->d_ids, g->d_w, g->d_count,
                                   published ? g->h_x : NULL, published && !host_routes ? h_ids : NULL, h_w,
                                   published ? &g->h_flags[il] : NULL, published ? &g->h_stamps[3 * il] : NULL,
                                   g->stream), "router");
    } else {
        const gpu_tensor *R = &G->gate_inp;
        if (n >= g->gemm_min_rows)
            KCHECK(mp_cuda_gemm(g->blas, R->type, R->d, R->row_bytes, E, D, g->d_xb, n, g->d_router, E,
                                MP_GPU_GEMM_TILE, g->d_gemm_scratch, g->gemm_scratch_bytes, g->stream),
                   "router gemm");
        else
            KCHECK(mp_cuda_gemv(R->type, R->d, R->row_bytes, E, D, g->d_xb, (size_t)D * 4, (int)n,
                                g->d_router, E, g->stream), "router gemv");
        if (G->gate_inp_b)
            KCHECK(mp_cuda_add_bias(g->d_router, G->gate_inp_b, n, E, g->stream), "router bias");
        KCHECK(mp_cuda_router(g->d_router, n, E, K, hp->expert_weights_norm, g->d_ids, g->d_w, NULL,
                              g->stream), "router");
    }

    /* 2. the host gets the rows of a hybrid layer, and the routes when it needs them (CPU
     * experts or the routing hook): in a graph step the router's launch handed them over, else
     * they are copied down; then the resident experts run (on a hybrid layer, while the host
     * works). An all-resident layer is done after this. */
    if (hybrid && !g->handoff) {
        CCHECK(cudaMemcpyAsync(g->h_x, g->d_xb, (size_t)(n * D) * sizeof(float), cudaMemcpyDeviceToHost,
                               g->stream), "row copy");
    }
    if ((hybrid || want_routing) && !host_routes && !(hybrid && g->handoff)) {
        CCHECK(cudaMemcpyAsync(h_ids, g->d_ids, (size_t)(n * K) * 4, cudaMemcpyDeviceToHost, g->stream),
               "routing copy");
        CCHECK(cudaMemcpyAsync(h_w, g->d_w, (size_t)(n * K) * 4, cudaMemcpyDeviceToHost, g->stream),
               "routing copy");
    }
    if (hybrid && !g->handoff) {
        CCHECK(mp_gpu_record(g, g->ev_host), "cudaEventRecord");
        if (g->measure)
            CCHECK(mp_gpu_record(g, g->ev_rt[2 * il]), "cudaEventRecord");
    }
    if (mp_gpu_gpu_part(g, il, n)) {
        if (want_timing)
            CCHECK(cudaEventRecord(g->ev_moe[2 * il], g->stream), "cudaEventRecord");
        if ((st = launch_resident(g, il, n, err)))
            return st;
        if (want_timing)
            CCHECK(cudaEventRecord(g->ev_moe[2 * il + 1], g->stream), "cudaEventRecord");
    }
    if (!hybrid)
        t->hits = n * K;
    if (!hybrid && want_timing) { /* every route on a resident expert */
        uint8_t *served = g->h_served + il * B * K;
        memset(served, MP_SERVED_GPU, (size_t)(n * K));
        t->served = served;
    }
    return MP_OK;
}

mp_status mp_gpu_moe_host(mp_gpu *g, int64_t il, int64_t n, mp_error *err)
{
    mp_session *s = g->s;
    const mp_model *m = s->m;
    const mp_hparams *hp = &m->hp;
    const gpu_layer *G = &g->layers[il];
    const int64_t E = hp->n_expert, K = hp->n_expert_used, D = hp->n_embd, B = s->n_batch;
    const int32_t *h_ids = g->h_ids + il * B * K;
    const float *h_w = g->h_w + il * B * K;
    mp_moe_timing *t = &g->timing[il];
    mp_status st;
    if (G->n_resident == E)
        return MP_OK; /* counted by the forward pass (graph replays skip this function) */
    const int64_t t0_ns = mp_gpu_now_ns();
    if (g->handoff) {
        if ((st = wait_published(g, il, err)))
            return st;
    } else {
        CCHECK(cudaEventSynchronize(g->ev_host), "routing round trip");
    }
    t->sync_ns = mp_gpu_now_ns() - t0_ns;
    g->stats.sync_wait_ns += t->sync_ns;
    t->d2h_bytes = (int64_t)((size_t)(n * D) * sizeof(float)) + (s->route_src ? 0 : 2 * n * K * 4);

    /* which routes run where: resident (the placement's or the tier's), copied (prefill), CPU */
    memcpy(g->h_mask, g->live + il * g->pl.words_per_layer, (size_t)g->pl.words_per_layer * sizeof *g->h_mask);
    int64_t hits = 0;
    for (int64_t i = 0; i < n * K; i++)
        hits += mp_gpu_live(g, il, h_ids[i]);
    int32_t *copy_list = g->h_copy_list; /* distinct experts: at most n_expert */
    int n_copy = 0;
    int64_t copied_routes = 0;
    double cpu_units = 0; /* the CPU's part of a step with copies, priced before cpu_k */
    if (g->d_stage && mp_gpu_copy_enabled(g, n)) {
        memset(g->h_count, 0, (size_t)E * sizeof *g->h_count);
        for (int64_t i = 0; i < n * K; i++)
            g->h_count[h_ids[i]]++;
        n_copy = mp_gpu_copy_choice(g, il, mp_model_expert_bytes(m, il), &cpu_units);
        for (int j = 0; j < n_copy; j++) {
            leave_to_gpu(g, copy_list[j]);
            copied_routes += g->h_count[copy_list[j]];
        }
    }
    /* decode: far routes, table[c] units of the c cold routes in slot order (the kernels' rule:
     * kernels/cuda/moe.cuh mpc_route_ptr, at most far_max routes): the GPU runs them already, the
     * last one, when split, from FFN row r0 on, and the CPU computes its rows below r0 */
    int64_t far_routes = 0;
    mp_moe_part part = {.expert = -1};
    const bool far = mp_gpu_far_on(g, il, n);
    if (far) {
        int32_t cold[MP_GPU_MAX_TOP_K];
        const int c = cold_routes(g, il, h_ids, cold);
        int z = 0, part_units = 0; /* the split's rows: far_split_r0, made from part_units at the plan */
        mp_decide_far_units(g->far[il].table[c], g->far[il].split, g->far_max, &z, &part_units);
        const int32_t r0 = g->far_split_r0[il * (MP_GPU_MAX_TOP_K + 1) + c];
        for (int j = 0; j < z; j++) {
            if (j < z - 1 || r0 <= 0) {
                leave_to_gpu(g, cold[j]);
                continue;
            }
            part = (mp_moe_part){.expert = cold[j], .ff_rows = r0};
            const void *units = g->h_unit_slices ? g->h_unit_slices[il * m->hp.n_expert + cold[j]] : NULL;
            if (units) { /* MP_GPU_PART_BY_UNIT */
                part.down_units = units;
                part.unit_end = g->h_unit_end + il * (MP_GPU_MAX_TOP_K + 1);
                part.n_units = g->h_n_units[il];
            }
        }
        far_routes = z;
    }
    /* the tier's moves for these routes (carried out when the step has drained), decided before the
     * copies so that an admitted expert being staged goes to its slot from staging */
    mp_gpu_tier_observe(g, il, n, h_ids);
    /* every staging batch goes out before the CPU starts (none waits on the host), so the link
     * and the cores work side by side, as the copy rule counts on. From pageable host experts a
     * copy's enqueue waits for the copy stream to reach it (which waits for the kernel two batches
     * back): there two batches go out first and the rest after the CPU's work, which would
     * otherwise start only once all but the last two had run */
    bool gpu_wrote = mp_gpu_gpu_part(g, il, n);
    int done = 0;
    if ((st = stage_some(g, il, n, copy_list, n_copy, g->host_registered ? INT_MAX : 2, &done, &gpu_wrote, err)))
        return st;
    const int64_t c0_ns = mp_gpu_now_ns();
    /* always written (zeros without CPU routes): moe_end adds it unconditionally, so that a
     * captured decode graph is the same at every step */
    const bool split = part.expert >= 0;
    const int64_t n_cpu = mp_moe_experts_cpu(m, il, g->h_x, n, h_ids, h_w, g->h_mask,
                                             g->h_slices + il * 3 * m->hp.n_expert, split ? &part : NULL,
                                             g->h_part, s->pool, s->moe) -
                          split; /* the split route is a far route */
    t->cpu_expert_ns = mp_gpu_now_ns() - c0_ns;
    g->stats.cpu_expert_ns += t->cpu_expert_ns;
    if (n_cpu >= MP_GPU_COST_MIN_ROUTES && cpu_units > 0) /* a prefill-sized sample of the CPU's level */
        ewma(&g->cpu_k, (double)t->cpu_expert_ns / cpu_units, 0.7);
    if ((st = stage_some(g, il, n, copy_list, n_copy, INT_MAX, &done, &gpu_wrote, err))) /* pageable: the rest */
        return st;
    g->copied_this_step = n_copy > 0;
    if (g->measure) {
        g->rt_pending[il] = true;
        g->rt_cpu_ns[il] = t->cpu_expert_ns;
        g->rt_warm[il] = hits == n * K;
    }
    if (g->handoff) /* h_part is written: the GPU's wait kernel may read it */
        __atomic_store_n(&g->h_flags[hp->n_layer + il], 1, __ATOMIC_RELEASE);
    t->h2d_bytes = (int64_t)((size_t)(n * D) * sizeof(float));
    t->hits = hits;
    t->misses = n * K - hits;
    if (s->hooks && s->hooks->moe_timing)
        t->served = fill_served(g, il, n, h_ids, far_routes);
    g->stats.hybrid_layers++;
    g->stats.moe_layers++;
    g->stats.routes_gpu += hits;
    g->stats.routes_copied += copied_routes;
    g->stats.routes_far += far_routes;
    if (split) {
        g->stats.routes_split++;
        g->stats.routes_split_by_unit += part.down_units != NULL;
        g->stats.split_cpu_bytes += (int64_t)((double)mp_model_expert_bytes(m, il) * (double)part.ff_rows /
                                              (double)hp->n_ff_exp);
    }
    g->stats.routes_cpu += n_cpu;
    return MP_OK;
}

/* Enqueue the CPU's partial of hybrid layer il into d_proj: from mapped host memory once the host's
 * flag is set (g->handoff), else copied up and added. */
static mp_status moe_end(mp_gpu *g, int64_t il, int64_t n, mp_error *err)
{
    const int64_t D = g->s->m->hp.n_embd;
    if (g->layers[il].n_resident == g->s->m->hp.n_expert)
        return MP_OK;
    if (g->handoff) { /* the partial straight from host memory once the host's flag is set; nothing
                       * but the resident experts and far routes writes d_proj (no copies in this
                       * mode) */
        KCHECK(mp_cuda_host_wait_add(g->d_proj, g->h_part, n * D, mp_gpu_gpu_part(g, il, n),
                                     &g->h_flags[g->s->m->hp.n_layer + il],
                                     &g->h_stamps[3 * il + 1], MP_GPU_HANDOFF_TIMEOUT_S, g->stream),
               "partial handoff");
        return MP_OK;
    }
    if (g->measure)
        CCHECK(mp_gpu_record(g, g->ev_rt[2 * il + 1]), "cudaEventRecord");
    const size_t x_bytes = (size_t)(n * D) * sizeof(float);
    const bool gpu_wrote = mp_gpu_gpu_part(g, il, n) || g->copied_this_step;
    float *dst = gpu_wrote ? g->d_tmp : g->d_proj;
    CCHECK(cudaMemcpyAsync(dst, g->h_part, x_bytes, cudaMemcpyHostToDevice, g->stream), "partial copy");
    if (gpu_wrote)
        KCHECK(mp_cuda_add(g->d_proj, g->d_tmp, n * D, g->stream), "combine");
    g->copied_this_step = false;
    return MP_OK;
}

mp_status mp_gpu_moe_layer(mp_gpu *g, int64_t il, int64_t n, mp_error *err)
{
    mp_status st = moe_begin(g, il, n, err);
    if (st)
        return st;
    if (mp_gpu_layer_hybrid(g, il) &&
        ((!g->handoff && (st = mp_gpu_moe_host(g, il, n, err))) || (st = moe_end(g, il, n, err))))
        return st;
    return down_biases(g, il, n, err);
}
