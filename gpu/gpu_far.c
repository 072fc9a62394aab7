/* gpu/gpu_far.c — far routes (runtime/decide.h): a decode step's cold routes that the GPU runs
 * itself, its kernels reading the experts' weights from the page-locked host copy over the bus.
 * Here: the device table of every cold expert's host address (mp_gpu_far_setup, once at start),
 * each layer's decision from the session's decode costs (mp_gpu_far_decide), and the per-layer
 * tables the decode kernels read (mp_gpu_exec_set_far_plan: how many of a step's c cold routes run
 * far, and the FFN rows the CPU keeps of a split one).
 *
 * Invariant: g->far[] (the host's decisions) and the device's tables change together or not at
 * all; a layer whose far routes turn on or off drops the captured decode graphs, which launch them.
 */
#include <stdlib.h>
#include <string.h>

#include <cuda_runtime_api.h>

#include "base/clock.h"
#include "gpu/gpu_impl.h"
#include "kernels/cuda/cuda_ops.h"
#include "runtime/bench.h"
#include "runtime/decide.h"
#include "runtime/placement.h"

mp_status mp_gpu_far_setup(mp_gpu *g, mp_error *err)
{
    const mp_hparams *hp = &g->s->m->hp;
    const int64_t NL = hp->n_layer, E = hp->n_expert;
    g->d_far_of_cold = NULL;
    g->far_max = 0;
    if (!g->d_far || !g->d_stage || !g->host_registered || g->n_hybrid_layers == 0)
        return MP_OK; /* none possible: no page-locked copy, or nothing cold */
    void *dev = NULL;
    if (cudaHostGetDevicePointer(&dev, g->h_arena, 0) != cudaSuccess || !dev) {
        cudaGetLastError();
        return MP_OK; /* the copy is not mapped for this device: no far routes */
    }
    const size_t n = (size_t)(NL * 3 * E);
    const void **tab = calloc(n, sizeof *tab);
    if (!tab)
        return mp_fail(err, MP_ERR_NOMEM, "GPU executor: out of memory");
    for (int64_t il = 0; il < NL; il++)
        for (int64_t e = 0; e < E; e++) {
            if (mp_placement_resident(&g->pl, il, e))
                continue;
            for (int t = 0; t < 3; t++)
                tab[(il * 3 + t) * E + e] = (const char *)dev + ((const char *)mp_gpu_host_slice(g, il, t, e) -
                                                                 g->h_arena);
        }
    const cudaError_t ce = cudaMemcpy((void *)g->d_far, tab, n * sizeof *tab, cudaMemcpyHostToDevice);
    free(tab);
    if (ce != cudaSuccess)
        return mp_gpu_cuda_fail(err, "far route table upload", ce);
    g->d_far_of_cold = (uint8_t *)g->d_far + mp_gpu_align(n * sizeof(void *));
    g->d_far_split_of_cold = (int32_t *)(g->d_far_of_cold + mp_gpu_align((size_t)NL * (MP_GPU_MAX_TOP_K + 1)));
    /* the far routes' weights are gathered into the staging buffers (mp_cuda_moe_args) */
    const int64_t K = hp->n_expert_used;
    g->far_max = (int)(K < 2 * g->stage_experts ? K : 2 * g->stage_experts);
    if (!mp_gpu_exec_set_far_plan(g, NULL)) { /* every layer off until decided */
        g->d_far_of_cold = NULL;
        g->d_far_split_of_cold = NULL;
        g->far_max = 0;
        return mp_fail(err, MP_ERR_DEVICE, "GPU executor: cannot upload the far route tables");
    }
    return MP_OK;
}

/* Far routes by the decision model: each hybrid layer's decision from the session's decode costs
 * and the placement's cold share (its profile's routing counts, else uniform). Without decode
 * costs, or without a page-locked host copy, none. */
mp_status mp_gpu_far_decide(mp_gpu *g, const mp_placement *pl, mp_error *err)
{
    const int64_t L = g->s->m->hp.n_layer, E = g->s->m->hp.n_expert;
    if (!g->d_far_of_cold || !pl->decode_costs)
        return MP_OK;
    mp_far_layer *plan = calloc((size_t)L, sizeof *plan);
    if (!plan)
        return mp_fail(err, MP_ERR_NOMEM, "GPU executor: out of memory");
    for (int64_t il = 0; il < L; il++)
        if (pl->n_resident[il] < E)
            mp_decide_far_layer(pl->decode_costs,
                                mp_decide_cold_share(pl->cold_routes ? pl->cold_routes[il] : 0,
                                                     pl->all_routes ? pl->all_routes[il] : 0, pl->n_resident[il], E),
                                &plan[il]);
    const bool ok = mp_gpu_exec_set_far_plan(g, plan);
    free(plan);
    return ok ? MP_OK : mp_fail(err, MP_ERR_DEVICE, "GPU executor: cannot upload the far route tables");
}

int mp_gpu_exec_far_max(const mp_gpu *g)
{
    return g->d_far_of_cold ? g->far_max : 0;
}

int64_t mp_gpu_exec_far_layers(const mp_gpu *g)
{
    return g->n_far_layers;
}

bool mp_gpu_exec_set_far_plan(mp_gpu *g, const mp_far_layer *layers)
{
    const mp_model *m = g->s->m;
    const int64_t L = m->hp.n_layer, E = m->hp.n_expert, F = m->hp.n_ff_exp;
    if (!g->d_far_of_cold) {
        for (int64_t il = 0; layers && il < L; il++)
            if (layers[il].on)
                return false;
        return true; /* all off: nothing to change */
    }
    enum { W = MP_GPU_MAX_TOP_K + 1 };
    uint8_t tab[W];
    int32_t r0[W];
    bool changed = false;
    int64_t on = 0;
    for (int64_t il = 0; il < L; il++) {
        mp_far_layer fl = {0};
        if (layers && g->layers[il].n_resident < E) /* an all-resident layer has no cold route */
            fl = layers[il];
        const int64_t granule = mp_decide_split_granule(m->layers[il].down_exps.type);
        for (int c = 0; c < W; c++) {
            int routes = 0, part = 0;
            mp_decide_far_units(fl.on ? fl.table[c] : 0, fl.split, g->far_max, &routes, &part);
            tab[c] = (uint8_t)routes;
            /* 0 where the expert cannot be split: the GPU runs that route whole */
            r0[c] = (int32_t)mp_decide_split_rows(F, granule, fl.split, part);
        }
        if (cudaMemcpy(g->d_far_of_cold + il * W, tab, sizeof tab, cudaMemcpyHostToDevice) != cudaSuccess ||
            cudaMemcpy(g->d_far_split_of_cold + il * W, r0, sizeof r0, cudaMemcpyHostToDevice) != cudaSuccess) {
            /* the device keeps its old tables: keep the host's decisions in step */
            cudaGetLastError();
            return false;
        }
        /* a layer turned on or off, or to or from split routes, launches other kernels */
        changed |= fl.on != g->far[il].on || (fl.split > 1) != (g->far[il].split > 1);
        g->far[il] = fl;
        memcpy(g->far_split_r0 + il * W, r0, sizeof r0);
        on += fl.on;
    }
    g->n_far_layers = on;
    mp_gpu_host_units(g);
    if (changed) /* the captured graphs launch the old kernels */
        mp_gpu_drop_graphs(g);
    return true;
}

/* The probe reads the host copy's first mp_bench_host_probe_bytes (the cores' probe's size: past the
 * CPU's last-level cache) or all of it where it is smaller, BUS_READ_SLICE bytes a launch in turn,
 * into a device buffer of BUS_READ_DST bytes that the reads wrap around. */
#define BUS_READ_SLICE ((size_t)256 << 20)
#define BUS_READ_DST ((size_t)16 << 20)

mp_status mp_gpu_exec_bus_read(mp_gpu *g, double seconds, uint64_t *bytes, mp_error *err)
{
    *bytes = 0;
    void *src = NULL, *dst = NULL;
    if (!g->host_registered || !g->h_arena || cudaHostGetDevicePointer(&src, g->h_arena, 0) != cudaSuccess || !src) {
        cudaGetLastError();
        return MP_OK; /* no page-locked copy mapped for this device: nothing to read */
    }
    const size_t probe = mp_bench_host_probe_bytes(false);
    size_t n = g->h_arena_bytes < probe ? g->h_arena_bytes : probe;
    n &= ~(size_t)16383;
    if (n == 0)
        return MP_OK;
    const size_t slice = n < BUS_READ_SLICE ? n : BUS_READ_SLICE;
    size_t off = 0;
    cudaError_t ce = cudaMalloc(&dst, BUS_READ_DST);
    if (ce != cudaSuccess) {
        cudaGetLastError(); /* a full device: the steps after this go on */
        return mp_gpu_cuda_fail(err, "bus probe buffer", ce);
    }
    const double t0 = mp_now_s();
    uint64_t done = 0;
    mp_status st = MP_OK;
    while (mp_now_s() - t0 < seconds) { /* four launches in flight, then wait: the window's end is
                                         * overrun by at most four */
        for (int k = 0; k < 4 && !st; k++) {
            const size_t len = n - off < slice ? n - off : slice;
            if (mp_cuda_bus_read((const char *)src + off, len, dst, BUS_READ_DST, g->stream))
                st = mp_gpu_cuda_fail(err, "bus probe", cudaGetLastError());
            else
                done += len;
            off = off + len < n ? off + len : 0;
        }
        if (!st && (ce = cudaStreamSynchronize(g->stream)) != cudaSuccess)
            st = mp_gpu_cuda_fail(err, "bus probe", ce);
        if (st)
            break;
    }
    cudaFree(dst);
    *bytes = st ? 0 : done;
    return st;
}
