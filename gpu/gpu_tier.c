/* gpu/gpu_tier.c — the adaptive expert tier on the GPU executor: its slots in device memory, and
 * the shared policy's moves (runtime/tier.h) carried out.
 *
 * Per step:
 *   - during the step, after each hybrid layer's CPU work, the experts the layer routed to go to
 *     the policy (mp_gpu_tier_observe); its moves wait in a list;
 *   - when the step has drained, before the next is enqueued (mp_gpu_tier_apply):
 *       1. the experts whose copy landed (the slot's event) become live: the host's live bits and
 *          the device's slot tables point at their slot;
 *       2. each waiting move's victim stops being live (bit cleared, table entries NULL);
 *       3. the slot tables that changed go up in one copy on the compute stream, ahead of the next
 *          step's work (a captured decode graph reads them when it runs, so it needs no capture);
 *       4. the moves' weight copies wait on the tier's own stream for that upload (an event); they
 *          are enqueued once the next step is under way (mp_gpu_tier_copies, after its graph's
 *          launch: the host's calls are then off the path between two steps), from the page-locked
 *          host copy, each followed by its slot's event.
 * A prefill step that stages cold experts on the GPU (gpu_moe.c) observes the layer before staging;
 * an admitted expert that is staged goes into its slot from the staging buffer instead, device to
 * device on the compute stream after the staged experts' launch (mp_gpu_tier_promote): after the
 * layer's reads of the victim's slot, and landed by the time the step drains, so it serves from the
 * next step without a host copy.
 * A slot's memory is written only by its own copy, which starts after every step that read the
 * slot's previous expert has drained and after that expert's table entries went NULL; a LOADING
 * slot is never a victim (the policy's invariant). So no step reads a slot while it is written,
 * and no step waits for a copy: an expert whose copy is in flight keeps running on the CPU (or far).
 * The host decides which routes the CPU runs from the live bits and the kernels from the tables;
 * both change only here, between steps, so they agree.
 */
#include "mp_config.h"

#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/fault.h"
#include "gpu/gpu_impl.h"
#include "runtime/tier.h"

struct gpu_tier {
    char *d_arena;             /* the slots, slot_bytes apart, layer by layer */
    size_t slot_bytes;
    uint32_t *first;           /* (n_layer) the layer's first slot in the arena */
    uint32_t *layer_of;        /* (n_slots) */
    uint32_t n_slots;
    uint64_t *live;            /* (n_layer, words_per_layer): g->live points here */
    cudaStream_t stream;       /* the tier's weight copies */
    cudaEvent_t *ev_land;      /* (n_slots) the slot's copy has landed */
    uint32_t *loading;         /* slots whose copy is in flight */
    int64_t *held;             /* (n_slots) MP_GPU_TIER_HOLD: steps the slot's landed copy still waits */
    uint32_t n_loading;
    cudaEvent_t ev_tables;     /* the tables' upload has executed */
    mp_tier_move *moves;       /* the step's moves, applied when it has drained */
    uint8_t *staged;           /* (cap_moves) the move's expert was copied from a prefill staging
                                * buffer during the step (mp_gpu_tier_promote): no host copy */
    uint32_t n_moves, cap_moves;
    uint32_t layer_moves;      /* moves[layer_moves .. n_moves): the last observed layer's */
    uint16_t *used;            /* (n_expert) scratch: an invocation's distinct experts */
    uint32_t *rows_of;         /* (n_expert) scratch: their rows, zero between calls */
    int64_t lo, hi;            /* layers whose tables changed since the last upload: [lo, hi) */
    char stopped[200];         /* why the tier stopped ("" while it runs) */
    bool clear_pending;        /* stopped, its experts still live until the step under way drains */
    uint32_t warm;             /* slots filled at start from the profile's ranking */
    bool moves_applied;        /* mp_gpu_tier_apply handled the waiting moves' victims and recorded
                                * ev_tables after their tables: their copies may go out */
};

size_t mp_gpu_tier_bytes(const mp_gpu *g, const mp_placement *pl)
{
    if (pl->tier_policy == MP_TIER_OFF || !pl->tier_cap)
        return 0;
    size_t n = 0;
    for (int64_t il = 0; il < pl->n_layer; il++)
        n += pl->tier_cap[il];
    return n * g->expert_bytes_max;
}

bool mp_gpu_tier_serves(const mp_gpu *g, int64_t il)
{
    return g->tier && mp_tier_cap(g->tier, (uint32_t)il) > 0;
}

static void mark(mp_gpu *g, int64_t il)
{
    gpu_tier *t = g->gt;
    t->lo = il < t->lo ? il : t->lo;
    t->hi = il + 1 > t->hi ? il + 1 : t->hi;
}

/* Expert e of layer il served from `slot` (NULL: not served): the live bit and the three table
 * entries of the host's copy (uploaded by mp_gpu_tier_apply). */
static void set_live(mp_gpu *g, int64_t il, int64_t e, const char *slot)
{
    gpu_tier *t = g->gt;
    const int64_t E = g->s->m->hp.n_expert;
    size_t off[3];
    mp_gpu_expert_layout(&g->s->m->layers[il], NULL, off);
    mp_bit_put(t->live + il * g->pl.words_per_layer, e, slot != NULL);
    for (int k = 0; k < 3; k++)
        g->h_tables[(il * 3 + k) * E + e] = slot ? slot + off[k] : NULL;
    mark(g, il);
}

static char *slot_ptr(const gpu_tier *t, uint32_t s)
{
    return t->d_arena + (size_t)s * t->slot_bytes;
}

/* Expert e of layer il's weights, from the page-locked host copy into the slot at dst (laid out as
 * mp_gpu_expert_layout says, as set_live names them), enqueued on stream; *bytes their sum. */
static cudaError_t enqueue_expert(const mp_gpu *g, int64_t il, int64_t e, char *dst, cudaStream_t stream,
                                  int64_t *bytes)
{
    size_t nb[3], off[3];
    mp_gpu_expert_layout(&g->s->m->layers[il], nb, off);
    *bytes = 0;
    for (int k = 0; k < 3; k++) {
        const cudaError_t c = cudaMemcpyAsync(dst + off[k], mp_gpu_host_slice(g, il, k, e), nb[k],
                                              cudaMemcpyHostToDevice, stream);
        if (c != cudaSuccess)
            return c;
        *bytes += (int64_t)nb[k];
    }
    return cudaSuccess;
}

/* The slot tables of the layers that changed since the last upload, in one copy on the compute
 * stream (ahead of whatever is enqueued next there). */
static mp_status upload_tables(mp_gpu *g, mp_error *err)
{
    gpu_tier *t = g->gt;
    const int64_t E = g->s->m->hp.n_expert;
    if (t->hi <= t->lo)
        return MP_OK;
    const size_t off = (size_t)(t->lo * 3 * E), n = (size_t)((t->hi - t->lo) * 3 * E);
    CCHECK(cudaMemcpyAsync((void *)(g->d_tables + off), g->h_tables + off, n * sizeof *g->h_tables,
                           cudaMemcpyHostToDevice, g->stream), "adaptive tier: slot table upload");
    t->lo = g->s->m->hp.n_layer, t->hi = 0;
    return MP_OK;
}

mp_status mp_gpu_tier_setup(mp_gpu *g, const mp_placement *pl, mp_error *err)
{
    g->live = g->pl.bits;
    if (pl->tier_policy == MP_TIER_OFF || !pl->tier_slots || !pl->tier_cap)
        return MP_OK;
    const mp_hparams *hp = &g->s->m->hp;
    const int64_t L = hp->n_layer, E = hp->n_expert;
    if (!g->host_registered)
        return mp_fail(err, MP_ERR_ARG, "adaptive tier: the host experts are not page-locked (%s): its copies "
                       "would stall the decode steps; run without --adaptive",
                       g->host_why[0] ? g->host_why : "no host copy");
    mp_tier_params tp;
    mp_tier_params_default(&tp);
    tp.policy = pl->tier_policy;
    tp.top_k = (uint32_t)hp->n_expert_used;
    tp.max_rows = (uint32_t)g->s->n_batch;
    tp.max_loading = pl->tier_inflight;
    if (tp.policy == MP_TIER_COST) {
        if (!pl->decode_costs)
            return mp_fail(err, MP_ERR_ARG, "--adaptive cost: expected --costs FILE (from `moeplan calibrate`): its "
                           "admissions are priced by this model's decode costs; or choose lru, lfu, decayed-lfu "
                           "or window-lfu");
        if (!isfinite(pl->decode_costs->admit_ns))
            return mp_fail(err, MP_ERR_ARG, "--adaptive cost: the cost file has no $.tier_admit (written before the "
                           "adaptive tier): run `moeplan calibrate -m MODEL` again, or choose lru, lfu, decayed-lfu "
                           "or window-lfu");
        mp_decide_tier_costs(pl->decode_costs, &tp.route_saving_ns, &tp.copy_cost_ns);
    }
    gpu_tier *t = calloc(1, sizeof *t);
    if (!t)
        return mp_fail(err, MP_ERR_NOMEM, "GPU executor: out of memory");
    g->gt = t;
    uint8_t *pinned = mp_placement_cells(&g->pl);
    t->first = calloc((size_t)L, sizeof *t->first);
    t->live = malloc((size_t)(L * g->pl.words_per_layer) * sizeof *t->live);
    t->used = malloc((size_t)E * sizeof *t->used);
    t->rows_of = calloc((size_t)E, sizeof *t->rows_of);
    const int64_t width = E < g->s->n_batch * hp->n_expert_used ? E : g->s->n_batch * hp->n_expert_used;
    t->cap_moves = (uint32_t)(L * width);
    t->moves = malloc((size_t)t->cap_moves * sizeof *t->moves);
    t->staged = calloc((size_t)t->cap_moves, 1);
    if (!pinned || !t->first || !t->live || !t->used || !t->rows_of || !t->moves || !t->staged) {
        free(pinned);
        return mp_fail(err, MP_ERR_NOMEM, "GPU executor: out of memory");
    }
    for (int64_t il = 0; il < L; il++) {
        t->first[il] = t->n_slots;
        t->n_slots += pl->tier_cap[il];
    }
    mp_status st = mp_tier_new(&g->tier, (uint32_t)L, (uint32_t)E, pl->tier_cap, pinned, &tp, err);
    free(pinned);
    if (st)
        return st;
    t->layer_of = malloc((size_t)t->n_slots * sizeof *t->layer_of);
    t->loading = malloc((size_t)t->n_slots * sizeof *t->loading);
    t->ev_land = calloc((size_t)t->n_slots, sizeof *t->ev_land);
    t->held = calloc((size_t)t->n_slots, sizeof *t->held);
    if (!t->layer_of || !t->loading || !t->ev_land || !t->held)
        return mp_fail(err, MP_ERR_NOMEM, "GPU executor: out of memory");
    for (int64_t il = 0; il < L; il++)
        for (uint32_t k = 0; k < pl->tier_cap[il]; k++)
            t->layer_of[t->first[il] + k] = (uint32_t)il;
    memcpy(t->live, g->pl.bits, (size_t)(L * g->pl.words_per_layer) * sizeof *t->live);
    g->live = t->live;
    t->lo = L, t->hi = 0;
    t->slot_bytes = g->expert_bytes_max;
    t->d_arena = g->d_tier;
    /* the profile's next-ranked experts fill the slots first (READY at the first step) */
    for (uint32_t i = 0; i < pl->n_tier_warm; i++) {
        const uint32_t il = pl->tier_warm[i][0], e = pl->tier_warm[i][1];
        if (il >= (uint32_t)L || e >= (uint32_t)E || !mp_tier_place(g->tier, il, e))
            continue;
        const uint32_t s = t->first[il] + (uint32_t)mp_tier_slot_of(g->tier, il, e);
        int64_t bytes;
        /* on the compute stream, ahead of the tables' upload and every step; start-up ends with a
         * device synchronization */
        CCHECK(enqueue_expert(g, il, e, slot_ptr(t, s), g->stream, &bytes), "adaptive tier: first experts' upload");
        set_live(g, il, e, slot_ptr(t, s));
        t->warm++;
    }
    mp_status st2 = upload_tables(g, err); /* before the first step on the same stream */
    if (st2)
        return st2;
    CCHECK(cudaStreamCreateWithFlags(&t->stream, cudaStreamNonBlocking), "cudaStreamCreate (tier copies)");
    CCHECK(cudaEventCreateWithFlags(&t->ev_tables, cudaEventDisableTiming), "cudaEventCreate");
    for (uint32_t s = 0; s < t->n_slots; s++)
        CCHECK(cudaEventCreateWithFlags(&t->ev_land[s], cudaEventDisableTiming), "cudaEventCreate");
    return MP_OK;
}

void mp_gpu_tier_free(mp_gpu *g)
{
    gpu_tier *t = g->gt;
    if (!t)
        return;
    if (t->stream) {
        cudaStreamSynchronize(t->stream);
        cudaStreamDestroy(t->stream);
    }
    if (t->ev_tables)
        cudaEventDestroy(t->ev_tables);
    for (uint32_t s = 0; t->ev_land && s < t->n_slots; s++)
        if (t->ev_land[s])
            cudaEventDestroy(t->ev_land[s]);
    cudaGetLastError();
    mp_tier_free(g->tier);
    g->tier = NULL;
    free(t->first);
    free(t->layer_of);
    free(t->live);
    free(t->ev_land);
    free(t->loading);
    free(t->held);
    free(t->moves);
    free(t->staged);
    free(t->used);
    free(t->rows_of);
    free(t);
    g->gt = NULL;
    g->live = g->pl.bits;
}

void mp_gpu_tier_observe(mp_gpu *g, int64_t il, int64_t n, const int32_t *ids)
{
    gpu_tier *t = g->gt;
    if (!t || !mp_tier_cap(g->tier, (uint32_t)il))
        return;
    const int64_t K = g->s->m->hp.n_expert_used;
    if (t->stopped[0]) { /* no moves; until the step under way drains its experts still serve */
        int64_t served = 0;
        for (int64_t i = 0; i < n * K; i++)
            served += mp_gpu_live(g, il, ids[i]) && !mp_placement_resident(&g->pl, il, ids[i]);
        g->timing[il].tier_hits = served;
        g->stats.tier_hits += served;
        return;
    }
    uint32_t n_used = 0;
    for (int64_t i = 0; i < n * K; i++) /* first appearance order: the trace's order, as the simulator reads it */
        if (!t->rows_of[ids[i]]++)
            t->used[n_used++] = (uint16_t)ids[i];
    const mp_tier_stats before = *mp_tier_stats_of(g->tier);
    t->layer_moves = t->n_moves;
    t->n_moves += mp_tier_after(g->tier, (uint32_t)il, t->used, t->rows_of, n_used, t->moves + t->n_moves,
                                t->cap_moves - t->n_moves);
    const mp_tier_stats *after = mp_tier_stats_of(g->tier);
    /* the tier's counters change only here: the invocation's share goes to the step's record of the
     * layer (collect's timing rows) and to the executor's statistics */
    mp_moe_timing *tm = &g->timing[il];
    tm->tier_hits = (int64_t)(after->hits - before.hits);
    tm->tier_late = (int64_t)(after->late - before.late);
    tm->tier_admissions = (int64_t)(after->admissions - before.admissions);
    tm->tier_evictions = (int64_t)(after->evictions - before.evictions);
    tm->tier_copy_bytes = tm->tier_admissions * (int64_t)mp_model_expert_bytes(g->s->m, il);
    g->stats.tier_hits += tm->tier_hits;
    g->stats.tier_late += tm->tier_late;
    g->stats.tier_admissions += tm->tier_admissions;
    g->stats.tier_evictions += tm->tier_evictions;
    for (uint32_t u = 0; u < n_used; u++)
        t->rows_of[t->used[u]] = 0;
}

/* A weight copy could not be enqueued: the tier stops, the run goes on with the placement alone.
 * Nothing is admitted any more and the waiting moves are dropped; copies already in flight land in
 * slots no table will name. The step under way still reads the tables it started with, so the tier
 * experts stop being live (bits cleared, table entries NULL) when it has drained (clear_stopped,
 * from mp_gpu_tier_apply), for the host and the device at once as every other change. */
static mp_status stop(mp_gpu *g, const char *what, const char *why, mp_error *err)
{
    (void)err;
    gpu_tier *t = g->gt;
    snprintf(t->stopped, sizeof t->stopped, "stopped: %s failed: %s", what, why);
    cudaGetLastError();
    memset(t->staged, 0, t->n_moves);
    t->n_moves = 0;
    t->n_loading = 0;
    t->clear_pending = true;
    return MP_OK;
}

mp_status mp_gpu_tier_promote(mp_gpu *g, int64_t il, const int32_t *list, int cnt, const char *stage,
                              mp_error *err)
{
    gpu_tier *t = g->gt;
    if (!t || t->stopped[0])
        return MP_OK;
    size_t nb[3], off[3];
    mp_gpu_expert_layout(&g->s->m->layers[il], nb, off);
    const size_t span = off[2] + nb[2];
    for (uint32_t i = t->layer_moves; i < t->n_moves; i++) {
        const mp_tier_move *mv = &t->moves[i];
        if (mv->layer != (uint32_t)il || t->staged[i])
            continue;
        for (int j = 0; j < cnt; j++) {
            if (list[j] != (int32_t)mv->expert)
                continue;
            /* on the compute stream after the staged experts' launch: after every read of the
             * victim's slot in this step (the layer's resident launch came first), before the
             * staging buffer is written again (its free event is recorded after this) */
            const uint32_t s = t->first[il] + mv->slot;
            cudaError_t e = cudaMemcpyAsync(slot_ptr(t, s), stage + (size_t)j * g->expert_bytes_max, span,
                                            cudaMemcpyDeviceToDevice, g->stream);
            if (e != cudaSuccess)
                return stop(g, "a promotion from staging", cudaGetErrorString(e), err);
            if ((e = cudaEventRecord(t->ev_land[s], g->stream)) != cudaSuccess)
                return stop(g, "a promotion's event", cudaGetErrorString(e), err);
            t->held[s] = g->tier_hold;
            t->loading[t->n_loading++] = s;
            t->staged[i] = 1;
            g->stats.tier_promoted++;
            break;
        }
    }
    return MP_OK;
}

static mp_status clear_stopped(mp_gpu *g, mp_error *err)
{
    gpu_tier *t = g->gt;
    const mp_hparams *hp = &g->s->m->hp;
    t->clear_pending = false;
    for (int64_t il = 0; il < hp->n_layer; il++)
        for (int64_t e = 0; e < hp->n_expert; e++)
            if (mp_gpu_live(g, il, e) && !mp_placement_resident(&g->pl, il, e))
                set_live(g, il, e, NULL);
    return upload_tables(g, err);
}

mp_status mp_gpu_tier_apply(mp_gpu *g, mp_error *err)
{
    gpu_tier *t = g->gt;
    if (!t)
        return MP_OK;
    if (t->stopped[0])
        return t->clear_pending ? clear_stopped(g, err) : MP_OK;
    /* 1. copies that landed */
    for (uint32_t i = 0; i < t->n_loading;) {
        const uint32_t s = t->loading[i];
        const cudaError_t e = cudaEventQuery(t->ev_land[s]);
        if (e == cudaErrorNotReady) {
            i++;
            continue;
        }
        if (e != cudaSuccess)
            return mp_gpu_cuda_fail(err, "adaptive tier: expert copy", e);
        if (t->held[s]-- > 0) { /* MP_GPU_TIER_HOLD: served cold a while longer */
            i++;
            continue;
        }
        const uint32_t il = t->layer_of[s], k = s - t->first[il];
        mp_tier_landed(g->tier, il, k);
        set_live(g, il, mp_tier_expert_in(g->tier, il, k), slot_ptr(t, s));
        t->loading[i] = t->loading[--t->n_loading];
    }
    /* 2. the victims */
    for (uint32_t i = 0; i < t->n_moves; i++)
        if (t->moves[i].victim >= 0)
            set_live(g, t->moves[i].layer, t->moves[i].victim, NULL);
    /* 3. the tables that changed, ahead of the next step */
    mp_status st = upload_tables(g, err);
    if (st)
        return st;
    /* 4. the copies wait for the tables' upload; they are enqueued once the next step is under way
     * (mp_gpu_tier_copies), off the path between two steps */
    if (t->n_moves)
        CCHECK(cudaEventRecord(t->ev_tables, g->stream), "cudaEventRecord");
    t->moves_applied = t->n_moves > 0;
    return MP_OK;
}

mp_status mp_gpu_tier_copies(mp_gpu *g, mp_error *err)
{
    gpu_tier *t = g->gt;
    /* (a step that failed before it drained left its moves unapplied: they wait for the next
     * apply, so that no copy overwrites a slot whose expert the tables still name) */
    if (!t || t->stopped[0] || !t->n_moves || !t->moves_applied)
        return MP_OK;
    t->moves_applied = false;
    CCHECK(cudaStreamWaitEvent(t->stream, t->ev_tables, 0), "cudaStreamWaitEvent");
    for (uint32_t i = 0; i < t->n_moves; i++) {
        const mp_tier_move *mv = &t->moves[i];
        if (t->staged[i]) { /* copied from staging during its step: landed when the step drained */
            t->staged[i] = 0;
            continue;
        }
        const uint32_t s = t->first[mv->layer] + mv->slot;
        const bool injected = mp_fault_point(); /* tests: a copy that cannot be enqueued */
        int64_t bytes = 0;
        cudaError_t e = injected ? cudaErrorUnknown
                                 : enqueue_expert(g, mv->layer, mv->expert, slot_ptr(t, s), t->stream, &bytes);
        if (e != cudaSuccess)
            return stop(g, "an expert copy", injected ? "injected fault" : cudaGetErrorString(e), err);
        g->stats.tier_bytes += bytes;
        e = cudaEventRecord(t->ev_land[s], t->stream);
        if (e != cudaSuccess)
            return stop(g, "an expert copy's event", cudaGetErrorString(e), err);
        t->held[s] = g->tier_hold;
        t->loading[t->n_loading++] = s;
    }
    t->n_moves = 0;
    return MP_OK;
}

void mp_gpu_tier_report(const mp_gpu *g, char *buf, size_t cap)
{
    if (!g->gt) {
        snprintf(buf, cap, "off");
        return;
    }
    if (g->gt->stopped[0]) {
        snprintf(buf, cap, "%s", g->gt->stopped);
        return;
    }
    const mp_tier_stats *s = mp_tier_stats_of(g->tier);
    snprintf(buf, cap, "%" PRIu32 " slots (%" PRIu32 " filled at start from the profile's ranking); %" PRIu64
             " routes served, %" PRIu64 " late, %" PRIu64 " admissions (%" PRId64 " from prefill staging), %" PRIu64
             " evictions, %" PRIu64 " refused",
             g->gt->n_slots, g->gt->warm, s->hits, s->late, s->admissions, g->stats.tier_promoted, s->evictions,
             s->refused);
}
