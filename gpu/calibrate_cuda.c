/* gpu/calibrate_cuda.c — the GPU benchmarks of `moeplan calibrate` (in the GPU module;
 * plain C on the CUDA runtime API and kernels/cuda/cuda_ops.h).
 *
 *  - h2d / d2h by size (4 KiB .. 64 MiB): pinned copies are timed by CUDA events around the
 *    cudaMemcpyAsync (the time the copy occupies the link, which the simulator shares between
 *    activation copies and admissions); pageable copies by the host clock around
 *    cudaMemcpyAsync + cudaStreamSynchronize, since the driver stages them through its own
 *    buffer while the host waits — that wait is what a runtime copying pageable memory pays.
 *  - sync: the decode round trip of a MoE layer with CPU misses as the hybrid runtime does it:
 *    D2H of one activation row into pinned memory, cudaStreamSynchronize (the doorbell: the
 *    host learns the routing and has the rows), then H2D of one row back. Events on the stream
 *    give the GPU's idle gap between the end of the D2H and the start of the H2D; with no CPU
 *    work in between that gap is the round trip's own cost (host wake-up + submission), which
 *    the simulator adds to the copies' times. The host-clock total is kept in device.
 *  - tier_admit: the host's time to enqueue what one adaptive tier admission enqueues (the three
 *    weight copies of the first layer's expert from page-locked memory, the slot's event, the
 *    upload of one layer's slot tables): the part of an admission's cost that the copy's bytes do
 *    not say (runtime/decide.h, mp_decide_tier_costs).
 *  - gpu_expert: mp_cuda_moe_experts with r rows all routed to one expert (top_k 1), per kind
 *    of expert, rotating over the experts of one layer of that kind (uploaded once: hundreds of
 *    MiB on real models, several times the GPU's L2).
 *  - beside_bus (mp_calib_beside_bus): not a cost, a regime: the bus reading host memory while
 *    the caller times the cores (the prefetch distance's choice, simulator/calibrate_tune.c).
 */
#include "mp_config.h"

#include <cuda_runtime_api.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/cuda/cuda_ops.h"
#include "kernels/quant.h"
#include "runtime/bench.h"
#include "simulator/calibrate_impl.h"

#define MAX_COPY_BYTES ((size_t)64 << 20)

static mp_status cuda_fail(mp_error *err, const char *what, cudaError_t e)
{
    return mp_fail(err, MP_ERR_DEVICE, "calibrate: CUDA %s: %s", what, cudaGetErrorString(e));
}

#define CK(call)                                       \
    do {                                               \
        cudaError_t e_ = (call);                       \
        if (e_ != cudaSuccess) {                       \
            st = cuda_fail(err, #call, e_);            \
            goto out;                                  \
        }                                              \
    } while (0)

static float event_ms(cudaEvent_t a, cudaEvent_t b)
{
    float ms = 0;
    cudaEventElapsedTime(&ms, a, b);
    return ms;
}

/* The copy curves: {"pinned": [...], "pageable": [...]} for one direction. */
static mp_status copies(const mp_calib_opts *o, bool to_device, void *d_buf, void *h_pinned, void *h_pageable,
                        cudaStream_t s, cudaEvent_t ev0, cudaEvent_t ev1, double *ns, cJSON *out, mp_error *err)
{
    static const size_t full[] = {4096, 16384, 65536, 262144, 1 << 20, 4 << 20, 16 << 20, 64 << 20};
    static const size_t quick[] = {4096, 65536, 1 << 20, 16 << 20};
    const size_t *sizes = o->quick ? quick : full;
    const int n_sizes = o->quick ? 4 : 8;
    const enum cudaMemcpyKind kind = to_device ? cudaMemcpyHostToDevice : cudaMemcpyDeviceToHost;
    const char *dir = to_device ? "h2d" : "d2h";
    mp_status st = MP_OK;
    for (int pinned = 1; pinned >= 0; pinned--) {
        cJSON *arr = cJSON_CreateArray();
        if (!arr)
            return mp_fail(err, MP_ERR_NOMEM, "calibrate: out of memory");
        cJSON_AddItemToObject(out, pinned ? "pinned" : "pageable", arr);
        void *h = pinned ? h_pinned : h_pageable;
        for (int si = 0; si < n_sizes; si++) {
            const size_t n = sizes[si];
            void *dst = to_device ? d_buf : h, *src = to_device ? h : d_buf;
            for (int rep = -2; rep < o->reps; rep++) {
                const int64_t t0 = mp_now_ns();
                CK(cudaEventRecord(ev0, s));
                CK(cudaMemcpyAsync(dst, src, n, kind, s));
                CK(cudaEventRecord(ev1, s));
                CK(cudaStreamSynchronize(s));
                const int64_t host_ns = mp_now_ns() - t0;
                if (rep >= 0)
                    ns[rep] = pinned ? 1e6 * event_ms(ev0, ev1) : (double)host_ns;
            }
            cJSON *p = mp_calib_point("bytes", (double)n, ns, o->reps);
            if (!p)
                return mp_fail(err, MP_ERR_NOMEM, "calibrate: out of memory");
            cJSON_AddItemToArray(arr, p);
            const double med = cJSON_GetObjectItem(p, "median_ns")->valuedouble;
            mp_calib_say(o, "calibrate: %s %s %zu bytes: median %.1f us (%.2f GB/s)", dir,
                         pinned ? "pinned" : "pageable", n, med / 1000.0, med > 0 ? (double)n / med : 0.0);
        }
    }
out:
    return st;
}

/* The decode round trip (see the file comment): sync in root, the host-clock total in device. */
static mp_status round_trip(const mp_model *m, const mp_calib_opts *o, void *d_buf, void *h_pinned, cudaStream_t s,
                            cudaEvent_t ev[4], double *ns, cJSON *root, cJSON *device, mp_error *err)
{
    const size_t row_bytes = (size_t)m->hp.n_embd * sizeof(float);
    double *host_ns = malloc((size_t)o->reps * sizeof(double));
    mp_status st = MP_OK;
    if (!host_ns)
        return mp_fail(err, MP_ERR_NOMEM, "calibrate: out of memory");
    for (int rep = -3; rep < o->reps; rep++) {
        const int64_t t0 = mp_now_ns();
        CK(cudaEventRecord(ev[0], s));
        CK(cudaMemcpyAsync(h_pinned, d_buf, row_bytes, cudaMemcpyDeviceToHost, s));
        CK(cudaEventRecord(ev[1], s));
        CK(cudaStreamSynchronize(s)); /* the doorbell: the host now has routing and rows */
        CK(cudaEventRecord(ev[2], s));
        CK(cudaMemcpyAsync((char *)d_buf + row_bytes, h_pinned, row_bytes, cudaMemcpyHostToDevice, s));
        CK(cudaEventRecord(ev[3], s));
        CK(cudaStreamSynchronize(s));
        const int64_t total_ns = mp_now_ns() - t0;
        if (rep >= 0) {
            ns[rep] = 1e6 * event_ms(ev[1], ev[2]);
            host_ns[rep] = (double)total_ns;
        }
    }
    cJSON *sync = mp_calib_point(NULL, 0, ns, o->reps);
    cJSON *total = mp_calib_point("bytes_each_way", (double)row_bytes, host_ns, o->reps);
    if (!sync || !total) {
        cJSON_Delete(sync);
        cJSON_Delete(total);
        st = mp_fail(err, MP_ERR_NOMEM, "calibrate: out of memory");
        goto out;
    }
    cJSON_AddItemToObject(root, "sync", sync);
    cJSON_AddItemToObject(device, "round_trip_host", total);
    mp_calib_say(o, "calibrate: decode round trip: GPU idle gap %.1f us, host total %.1f us (%zu bytes each way)",
                 cJSON_GetObjectItem(sync, "median_ns")->valuedouble / 1000.0,
                 cJSON_GetObjectItem(total, "median_ns")->valuedouble / 1000.0, row_bytes);
out:
    free(host_ns);
    return st;
}

/* $.tier_admit: the host time of one admission's calls (see the top). The copies read d_buf's
 * first bytes back from h_pinned (at most MAX_COPY_BYTES in all, as the expert's slices). */
static mp_status tier_admit(const mp_model *m, const mp_calib_opts *o, void *d_buf, void *h_pinned, cudaStream_t s,
                            cudaEvent_t ev, double *ns, cJSON *root, mp_error *err)
{
    const mp_layer *L = &m->layers[0];
    const mp_tensor *ts[3] = {&L->gate_exps, &L->up_exps, &L->down_exps};
    size_t bytes[3], total = 0;
    for (int t = 0; t < 3; t++)
        total += bytes[t] = ts[t]->row_bytes * (size_t)ts[t]->ne[1];
    const size_t table = (size_t)(3 * m->hp.n_expert) * sizeof(void *);
    mp_status st = MP_OK;
    if (total + table > MAX_COPY_BYTES) { /* one admission's bytes beyond the copy buffers: scaled */
        for (int t = 0; t < 3; t++)
            bytes[t] = bytes[t] * (MAX_COPY_BYTES - table) / total;
    }
    for (int rep = -3; rep < o->reps; rep++) {
        CK(cudaStreamSynchronize(s));
        const int64_t t0 = mp_now_ns();
        size_t off = 0;
        for (int t = 0; t < 3; t++, off += bytes[t - 1])
            CK(cudaMemcpyAsync((char *)d_buf + off, (char *)h_pinned + off, bytes[t], cudaMemcpyHostToDevice, s));
        CK(cudaEventRecord(ev, s));
        CK(cudaMemcpyAsync((char *)d_buf + off, (char *)h_pinned + off, table, cudaMemcpyHostToDevice, s));
        const int64_t t1 = mp_now_ns();
        if (rep >= 0)
            ns[rep] = (double)(t1 - t0);
    }
    CK(cudaStreamSynchronize(s));
    cJSON *p = mp_calib_point(NULL, 0, ns, o->reps);
    if (!p || !cJSON_AddNumberToObject(p, "expert_bytes", (double)total)) {
        cJSON_Delete(p);
        return mp_fail(err, MP_ERR_NOMEM, "calibrate: out of memory");
    }
    cJSON_AddItemToObject(root, "tier_admit", p);
    mp_calib_say(o, "calibrate: adaptive tier admission: %.1f us of host calls (3 copies, an event, a slot table)",
                 cJSON_GetObjectItem(p, "median_ns")->valuedouble / 1000.0);
out:
    return st;
}

/* One timed call of mp_cuda_moe_experts: upload the n_ids routes in ids, then the call between
 * CUDA events, enqueued (exec NULL) or as a replay of capture_experts's graph exec, which holds
 * the call and its events; *ns its GPU time. what names the call in an error. */
static mp_status time_experts(const mp_cuda_moe_args *a, cudaGraphExec_t exec, const int32_t *ids, int n_ids,
                              int32_t *d_ids, cudaStream_t s, cudaEvent_t ev0, cudaEvent_t ev1, const char *what,
                              double *ns, mp_error *err)
{
    mp_status st = MP_OK;
    CK(cudaMemcpyAsync(d_ids, ids, (size_t)n_ids * sizeof(int32_t), cudaMemcpyHostToDevice, s));
    if (exec) {
        CK(cudaGraphLaunch(exec, s));
    } else {
        CK(cudaEventRecord(ev0, s));
        int rc = mp_cuda_moe_experts(a, s);
        if (rc)
            return mp_fail(err, MP_ERR_DEVICE, "calibrate: mp_cuda_moe_experts (%s): %s", what,
                           mp_cuda_strerror(rc));
        CK(cudaEventRecord(ev1, s));
    }
    CK(cudaStreamSynchronize(s));
    *ns = 1e6 * event_ms(ev0, ev1);
out:
    return st;
}

/* One call of mp_cuda_moe_experts between two event records, captured as a CUDA graph: replayed,
 * the events time the kernels as a decode graph runs them, without the gaps of the host
 * submitting each launch (which an enqueued call's events include: 18.7 µs measured for one
 * expert and one row on the H200, most of it submission). what names the call in an error. */
static mp_status capture_experts(const mp_cuda_moe_args *a, cudaStream_t s, cudaEvent_t ev0, cudaEvent_t ev1,
                                 const char *what, cudaGraphExec_t *exec, mp_error *err)
{
    mp_status st = MP_OK;
    cudaGraph_t graph = NULL;
    *exec = NULL;
    CK(cudaStreamBeginCapture(s, cudaStreamCaptureModeThreadLocal));
    /* external event-record nodes: a plain record inside a capture is only a dependency within
     * the graph, never recorded for the host (gpu/gpu_impl.h, mp_gpu_record) */
    cudaError_t rec0 = cudaEventRecordWithFlags(ev0, s, cudaEventRecordExternal);
    const int rc = mp_cuda_moe_experts(a, s);
    cudaError_t rec1 = cudaEventRecordWithFlags(ev1, s, cudaEventRecordExternal);
    cudaError_t end = cudaStreamEndCapture(s, &graph);
    if (rc)
        st = mp_fail(err, MP_ERR_DEVICE, "calibrate: mp_cuda_moe_experts (%s, captured): %s", what,
                     mp_cuda_strerror(rc));
    else if (rec0 != cudaSuccess || rec1 != cudaSuccess || end != cudaSuccess)
        st = cuda_fail(err, "capturing the experts' call",
                       rec0 != cudaSuccess ? rec0 : rec1 != cudaSuccess ? rec1 : end);
    else if ((end = cudaGraphInstantiate(exec, graph, 0)) != cudaSuccess)
        st = cuda_fail(err, "cudaGraphInstantiate", end);
out:
    if (graph)
        cudaGraphDestroy(graph);
    return st;
}

/* The gpu_expert entries: one per kind of expert (the first layer of each kind is uploaded). */
static mp_status gpu_experts(const mp_model *m, const mp_calib_opts *o, cudaStream_t s, cudaEvent_t ev0,
                             cudaEvent_t ev1, double *ns, cJSON *arr, cJSON *device, mp_error *err)
{
    bool graphs = true; /* the concurrent curve as replayed graphs, while capturing works */
    const int64_t D = m->hp.n_embd, F = m->hp.n_ff_exp, E = m->hp.n_expert;
    const int64_t K = m->hp.n_expert_used;
    /* buffers for max_rows rows of one route, or one row of K routes */
    const int max_rows = o->rows[o->n_rows - 1] > K ? o->rows[o->n_rows - 1] : (int)K;
    void *d_w[3] = {NULL, NULL, NULL};
    float *d_x = NULL, *d_w8 = NULL, *d_out = NULL;
    int32_t *d_ids = NULL;
    void *d_scratch = NULL;
    float *x = malloc((size_t)max_rows * (size_t)D * sizeof(float)); /* (max_rows, D) */
    float *ones = malloc((size_t)max_rows * sizeof(float));
    int32_t *ids = malloc((size_t)max_rows * sizeof(int32_t));
    mp_status st = MP_OK;
    if (!x || !ones || !ids) {
        st = mp_fail(err, MP_ERR_NOMEM, "calibrate: out of memory");
        goto out;
    }
    uint64_t rng = 4;
    mp_calib_fill(x, (int64_t)max_rows * D, &rng);
    for (int i = 0; i < max_rows; i++)
        ones[i] = 1.0f;
    CK(cudaMalloc((void **)&d_x, (size_t)max_rows * (size_t)D * sizeof(float)));
    CK(cudaMalloc((void **)&d_out, (size_t)max_rows * (size_t)D * sizeof(float)));
    CK(cudaMalloc((void **)&d_w8, (size_t)max_rows * sizeof(float)));
    CK(cudaMalloc((void **)&d_ids, (size_t)max_rows * sizeof(int32_t)));
    CK(cudaMemcpy(d_x, x, (size_t)max_rows * (size_t)D * sizeof(float), cudaMemcpyHostToDevice));
    CK(cudaMemcpy(d_w8, ones, (size_t)max_rows * sizeof(float), cudaMemcpyHostToDevice));
    for (int64_t il = 0; il < m->hp.n_layer; il++) {
        const mp_layer *L = &m->layers[il];
        char quant[MP_EXPERT_QUANT_MAX];
        mp_model_expert_quant(L, quant);
        bool seen = false;
        for (int64_t j = 0; j < il && !seen; j++)
            seen = m->layers[j].gate_exps.type == L->gate_exps.type && m->layers[j].up_exps.type == L->up_exps.type &&
                   m->layers[j].down_exps.type == L->down_exps.type;
        if (seen)
            continue;
        const mp_tensor *t[3] = {&L->gate_exps, &L->up_exps, &L->down_exps};
        for (int k = 0; k < 3; k++) {
            cudaFree(d_w[k]);
            d_w[k] = NULL;
            CK(cudaMalloc(&d_w[k], t[k]->nbytes));
            CK(cudaMemcpy(d_w[k], t[k]->data, t[k]->nbytes, cudaMemcpyHostToDevice));
        }
        const size_t scratch_bytes = mp_cuda_moe_scratch_bytes(L->gate_exps.type, L->down_exps.type, D, F, max_rows, K);
        cudaFree(d_scratch);
        d_scratch = NULL;
        CK(cudaMalloc(&d_scratch, scratch_bytes));
        cJSON *entry = cJSON_CreateObject(), *points = cJSON_CreateArray();
        if (!entry || !points || !cJSON_AddStringToObject(entry, "quant", quant) ||
            !cJSON_AddNumberToObject(entry, "n_embd", (double)D) || !cJSON_AddNumberToObject(entry, "n_ff", (double)F) ||
            !cJSON_AddNumberToObject(entry, "expert_bytes", (double)mp_model_expert_bytes(m, il))) {
            cJSON_Delete(entry);
            cJSON_Delete(points);
            st = mp_fail(err, MP_ERR_NOMEM, "calibrate: out of memory");
            goto out;
        }
        cJSON_AddItemToObject(entry, "points", points);
        cJSON_AddItemToArray(arr, entry);
        mp_cuda_moe_args a;
        memset(&a, 0, sizeof a);
        for (int k = 0; k < 3; k++) {
            mp_cuda_expert_tensor *et = k == 0 ? &a.gate : k == 1 ? &a.up : &a.down;
            *et = (mp_cuda_expert_tensor){t[k]->type, d_w[k], t[k]->row_bytes * (size_t)t[k]->ne[1], NULL,
                                          t[k]->row_bytes, NULL};
        }
        a.n_embd = D;
        a.n_ff = F;
        a.n_expert = E;
        a.top_k = 1;
        a.d_x = d_x;
        a.d_ids = d_ids;
        a.d_weights = d_w8;
        a.d_out = d_out;
        a.d_scratch = d_scratch;
        a.scratch_bytes = scratch_bytes;
        int64_t next = 0;
        for (int ri = 0; ri < o->n_rows; ri++) {
            a.n_rows = o->rows[ri];
            char what[64];
            snprintf(what, sizeof what, "%s, %d rows", quant, o->rows[ri]);
            for (int rep = -3; rep < o->reps; rep++, next++) {
                for (int i = 0; i < o->rows[ri]; i++)
                    ids[i] = (int32_t)(next % E);
                double t_ns = 0;
                if ((st = time_experts(&a, NULL, ids, o->rows[ri], d_ids, s, ev0, ev1, what, &t_ns, err)))
                    goto out;
                if (rep >= 0)
                    ns[rep] = t_ns;
            }
            cJSON *p = mp_calib_point("rows", o->rows[ri], ns, o->reps);
            if (!p) {
                st = mp_fail(err, MP_ERR_NOMEM, "calibrate: out of memory");
                goto out;
            }
            cJSON_AddItemToArray(points, p);
            mp_calib_say(o, "calibrate: gpu expert %s %" PRId64 "x%" PRId64 " rows %d: median %.1f us", quant, D, F,
                         o->rows[ri], cJSON_GetObjectItem(p, "median_ns")->valuedouble / 1000.0);
        }
        /* concurrent: one row routed to k distinct experts in one call (a decode step's layer),
         * the same k as the CPU side's curve (calibrate_cpu.c) */
        if (K >= 2) {
            cJSON *conc = cJSON_CreateArray();
            if (!conc) {
                st = mp_fail(err, MP_ERR_NOMEM, "calibrate: out of memory");
                goto out;
            }
            cJSON_AddItemToObject(entry, "concurrent", conc);
            a.n_rows = 1;
            int ks[MP_CALIB_MAX_KS];
            const int n_ks = mp_calib_concurrent_ks(m, ks);
            for (int ki = 0; ki < n_ks; ki++) {
                const int k = ks[ki];
                a.top_k = k;
                char what[64];
                snprintf(what, sizeof what, "%s, 1 row, %d experts", quant, k);
                cudaGraphExec_t exec = NULL; /* decode runs its experts in graphs: timed as one */
                if (graphs) {
                    mp_error cerr;
                    if (capture_experts(&a, s, ev0, ev1, what, &exec, &cerr)) {
                        /* not fatal: enqueued calls still time the experts, with the host's launch
                         * gaps in them (said, and recorded in device) */
                        cudaGetLastError();
                        graphs = false;
                        mp_calib_say(o, "calibrate: concurrent GPU experts timed enqueued: %s", cerr.msg);
                        if (!cJSON_AddStringToObject(device, "gpu_concurrent_timing", cerr.msg)) {
                            st = mp_fail(err, MP_ERR_NOMEM, "calibrate: out of memory");
                            goto out;
                        }
                    }
                }
                for (int rep = -3; rep < o->reps && !st; rep++, next++) {
                    for (int j = 0; j < k; j++) /* k consecutive ids mod E: distinct, as E >= K >= k */
                        ids[j] = (int32_t)((next * K + j) % E);
                    double t_ns = 0;
                    st = time_experts(&a, exec, ids, k, d_ids, s, ev0, ev1, what, &t_ns, err);
                    if (rep >= 0)
                        ns[rep] = t_ns;
                }
                const bool replayed = exec != NULL;
                if (exec)
                    cudaGraphExecDestroy(exec);
                if (st)
                    goto out;
                cJSON *p = mp_calib_point("experts", k, ns, o->reps);
                if (!p) {
                    st = mp_fail(err, MP_ERR_NOMEM, "calibrate: out of memory");
                    goto out;
                }
                cJSON_AddItemToArray(conc, p);
                mp_calib_say(o, "calibrate: gpu experts %s, %d experts x 1 row in one call (%s): median %.1f us", quant,
                             k, replayed ? "graph" : "enqueued", cJSON_GetObjectItem(p, "median_ns")->valuedouble / 1000.0);
            }
            a.top_k = 1;
        }
    }
out:
    for (int k = 0; k < 3; k++)
        cudaFree(d_w[k]);
    cudaFree(d_x);
    cudaFree(d_out);
    cudaFree(d_w8);
    cudaFree(d_ids);
    cudaFree(d_scratch);
    free(x);
    free(ones);
    free(ids);
    return st;
}

mp_status mp_calib_gpu(const mp_model *m, const mp_calib_opts *o, cJSON *root, cJSON *device, char *why,
                       size_t why_cap, mp_error *err)
{
    if (!mp_cuda_available(why, why_cap))
        return MP_OK;
    why[0] = 0;
    mp_status st = MP_OK;
    cudaStream_t s = NULL;
    cudaEvent_t ev[4] = {NULL, NULL, NULL, NULL};
    void *d_buf = NULL, *h_pinned = NULL;
    void *h_pageable = malloc(MAX_COPY_BYTES);
    double *ns = malloc((size_t)o->reps * sizeof(double));
    cJSON *h2d = cJSON_CreateObject(), *d2h = cJSON_CreateObject(), *gpu = cJSON_CreateArray();
    if (!h_pageable || !ns || !h2d || !d2h || !gpu) {
        st = mp_fail(err, MP_ERR_NOMEM, "calibrate: out of memory for the copy buffers");
        goto out;
    }
    memset(h_pageable, 1, MAX_COPY_BYTES); /* resident pages: first-touch faults are not the copy's */
    struct cudaDeviceProp prop;
    int dev = 0, driver = 0, runtime = 0;
    CK(cudaGetDevice(&dev));
    CK(cudaGetDeviceProperties(&prop, dev));
    cudaDriverGetVersion(&driver);
    cudaRuntimeGetVersion(&runtime);
    char cc[16];
    snprintf(cc, sizeof cc, "%d.%d", prop.major, prop.minor);
    if (!cJSON_AddStringToObject(device, "gpu", prop.name) || !cJSON_AddStringToObject(device, "gpu_compute_capability", cc) ||
        !cJSON_AddNumberToObject(device, "gpu_memory_bytes", (double)prop.totalGlobalMem) ||
        !cJSON_AddNumberToObject(device, "cuda_driver_version", driver) ||
        !cJSON_AddNumberToObject(device, "cuda_runtime_version", runtime)) {
        st = mp_fail(err, MP_ERR_NOMEM, "calibrate: out of memory");
        goto out;
    }
    mp_calib_say(o, "calibrate: GPU %s (compute %s, %.1f GiB)", prop.name, cc,
                 (double)prop.totalGlobalMem / 1073741824.0);
    CK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
    for (int i = 0; i < 4; i++)
        CK(cudaEventCreate(&ev[i]));
    CK(cudaMalloc(&d_buf, MAX_COPY_BYTES));
    CK(cudaMallocHost(&h_pinned, MAX_COPY_BYTES));
    memset(h_pinned, 1, MAX_COPY_BYTES);
    if ((st = copies(o, true, d_buf, h_pinned, h_pageable, s, ev[0], ev[1], ns, h2d, err)) ||
        (st = copies(o, false, d_buf, h_pinned, h_pageable, s, ev[0], ev[1], ns, d2h, err)) ||
        (st = round_trip(m, o, d_buf, h_pinned, s, ev, ns, root, device, err)) ||
        (st = tier_admit(m, o, d_buf, h_pinned, s, ev[0], ns, root, err)) ||
        (st = gpu_experts(m, o, s, ev[0], ev[1], ns, gpu, device, err)))
        goto out;
    cJSON_AddItemToObject(root, "gpu_expert", gpu);
    cJSON_AddItemToObject(root, "h2d", h2d);
    cJSON_AddItemToObject(root, "d2h", d2h);
    gpu = h2d = d2h = NULL;
out:
    cJSON_Delete(h2d);
    cJSON_Delete(d2h);
    cJSON_Delete(gpu);
    for (int i = 0; i < 4; i++)
        if (ev[i])
            cudaEventDestroy(ev[i]);
    if (s)
        cudaStreamDestroy(s);
    cudaFree(d_buf);
    cudaFreeHost(h_pinned);
    free(h_pageable);
    free(ns);
    return st;
}

/* ---- the bus beside the cores ---- */

/* The host buffer the copy engine reads is the host probes' (mp_bench_host_probe_bytes: 1 GiB and
 * at least four times the CPU's last-level cache, so that every copy reads host memory), in slices */
#define BUS_SLICE_BYTES ((size_t)64 << 20)
/* Copies in flight between two waits: 8 x 64 MiB, about 10 ms at PCIe Gen5's 55 GB/s */
#define BUS_BATCH 8

typedef struct bus_load {
    int device;
    char *host;
    size_t host_bytes; /* a multiple of BUS_SLICE_BYTES, two slices at least */
    void *dev;
    cudaStream_t s;
    cudaEvent_t done;
    int run;          /* 1 while fn runs (atomic) */
    uint64_t moved;   /* bytes whose copies completed */
    cudaError_t fail; /* the first error of the issuing thread */
    const char *what;
} bus_load;

/* The issuing thread: batches of copies, each waited on through a blocking event (no spin) */
static void *bus_loop(void *arg)
{
    bus_load *b = arg;
    size_t off = 0;
    cudaError_t e = cudaSetDevice(b->device);
    if (e != cudaSuccess) {
        b->fail = e, b->what = "cudaSetDevice";
        return NULL;
    }
    while (__atomic_load_n(&b->run, __ATOMIC_ACQUIRE)) {
        for (int k = 0; k < BUS_BATCH; k++) {
            if ((e = cudaMemcpyAsync(b->dev, b->host + off, BUS_SLICE_BYTES, cudaMemcpyHostToDevice, b->s)) !=
                cudaSuccess) {
                b->fail = e, b->what = "cudaMemcpyAsync";
                return NULL;
            }
            off = off + 2 * BUS_SLICE_BYTES <= b->host_bytes ? off + BUS_SLICE_BYTES : 0;
        }
        if ((e = cudaEventRecord(b->done, b->s)) != cudaSuccess || (e = cudaEventSynchronize(b->done)) != cudaSuccess) {
            b->fail = e, b->what = "cudaEventSynchronize";
            return NULL;
        }
        b->moved += (uint64_t)BUS_BATCH * BUS_SLICE_BYTES;
    }
    return NULL;
}

mp_status mp_calib_beside_bus(void (*fn)(void *), void *arg, double *gbs, char *why, size_t why_cap, mp_error *err)
{
    *gbs = 0;
    if (!mp_cuda_available(why, why_cap))
        return MP_OK;
    why[0] = 0;
    mp_status st = MP_OK;
    const size_t probe = mp_bench_host_probe_bytes(false);
    bus_load b = {.run = 1, .host_bytes = (probe + BUS_SLICE_BYTES - 1) / BUS_SLICE_BYTES * BUS_SLICE_BYTES};
    if (b.host_bytes < 2 * BUS_SLICE_BYTES)
        b.host_bytes = 2 * BUS_SLICE_BYTES;
    pthread_t tid;
    bool started = false;
    CK(cudaGetDevice(&b.device));
    CK(cudaStreamCreateWithFlags(&b.s, cudaStreamNonBlocking));
    CK(cudaEventCreateWithFlags(&b.done, cudaEventBlockingSync | cudaEventDisableTiming));
    CK(cudaMalloc(&b.dev, BUS_SLICE_BYTES));
    cudaError_t e = cudaMallocHost((void **)&b.host, b.host_bytes);
    if (e == cudaErrorMemoryAllocation) { /* a host short of memory: the cores alone, said in why */
        cudaGetLastError();
        b.host = NULL;
        snprintf(why, why_cap, "no %zu MiB of page-locked host memory for the bus to read (%s)", b.host_bytes >> 20,
                 cudaGetErrorString(e));
        goto out;
    }
    CK(e);
    memset(b.host, 1, b.host_bytes); /* resident pages */
    if (pthread_create(&tid, NULL, bus_loop, &b)) {
        st = mp_fail(err, MP_ERR_INTERNAL, "calibrate: cannot start the thread that loads the bus");
        goto out;
    }
    started = true;
    const int64_t t0 = mp_now_ns();
    fn(arg);
    const int64_t t1 = mp_now_ns();
    __atomic_store_n(&b.run, 0, __ATOMIC_RELEASE);
    pthread_join(tid, NULL);
    started = false;
    if (b.fail != cudaSuccess) {
        st = cuda_fail(err, b.what, b.fail);
        goto out;
    }
    /* the copies that completed while fn ran, at most one batch after it: the bus's rate beside it */
    *gbs = t1 > t0 ? (double)b.moved / (double)(mp_now_ns() - t0) : 0;
out:
    if (started) {
        __atomic_store_n(&b.run, 0, __ATOMIC_RELEASE);
        pthread_join(tid, NULL);
    }
    if (b.s)
        cudaStreamSynchronize(b.s);
    cudaFreeHost(b.host);
    cudaFree(b.dev);
    if (b.done)
        cudaEventDestroy(b.done);
    if (b.s)
        cudaStreamDestroy(b.s);
    return st;
}
