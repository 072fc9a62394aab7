/* collector/cupti.h — GPU kernel and memcpy activity from CUPTI, tagged with the (request, step,
 * node) that issued it, for `moeplan collect --cupti` (docs/collect.md, trace table `cupti`).
 *
 * How records find their (request, step, node): the caller pushes an external correlation id
 * (kind CUSTOM0) for the calling thread around the work of a step and of each layer; CUPTI then
 * emits, for every CUDA API call made meanwhile, an EXTERNAL_CORRELATION record pairing the call's
 * correlation id with ours, and the kernel / memcpy record of that call carries the same
 * correlation id. mp_cupti_flush joins the two.
 *
 * Invariants:
 *  - One session per process (CUPTI's buffer callbacks carry no user pointer): a second
 *    mp_cupti_start before mp_cupti_stop is refused.
 *  - Nothing is lost silently: every record CUPTI produced is either handed to the sink, or
 *    counted in mp_cupti_counts (dropped by CUPTI for lack of buffer space, incomplete, or still
 *    pending at stop).
 *  - Memory is bounded by what CUPTI records between two flushes: buffers are recycled at each
 *    flush and the correlation table is emptied (a flush synchronizes the device first, so every
 *    activity issued before it has been delivered).
 *
 * The capture itself (gpu/cupti_capture.c) lives in the GPU module (runtime/gpu_module.h) with everything
 * else that links CUDA; mp_cupti_start loads it (cupti_api.c hands every call to the module's
 * table). Without CUPTI in the build, without the module or without a CUDA device, mp_cupti_start
 * fails with a one-line reason and nothing else is reachable.
 */
#ifndef MP_COLLECTOR_CUPTI_H
#define MP_COLLECTOR_CUPTI_H

#include <stdbool.h>
#include <stdint.h>

#include "collector/trace.h"
#include "base/error.h"
#include "runtime/hooks.h"

typedef struct mp_cupti_capture mp_cupti; /* opaque: defined by the capture (gpu/cupti_capture.c) */

/* What a session has seen so far. */
typedef struct mp_cupti_counts {
    int64_t n_kernel, n_memcpy; /* records handed to the sink */
    int64_t n_uncorrelated;     /* of those, issued with no id pushed: request/step/node NULL */
    int64_t n_no_node;          /* of those, issued inside a step but outside any layer */
    int64_t n_dropped;          /* records CUPTI dropped (cuptiActivityGetNumDroppedRecords) */
    int64_t n_incomplete;       /* records without valid timestamps (not handed to the sink) */
    int64_t n_unwritten;        /* records still pending at mp_cupti_stop (not handed over) */
    int64_t n_flushes;
    int64_t flush_ns;           /* wall time spent in mp_cupti_flush, all flushes together */
    int64_t max_buffers;        /* most activity buffers held at once (× buffer_bytes) */
    int64_t buffer_bytes;
} mp_cupti_counts;

/* Where flushed records go (rec and its strings are valid during the call only). */
typedef mp_status (*mp_cupti_sink_fn)(void *user, const mp_trace_cupti_rec *rec, mp_error *err);

/* Check for a CUDA device, register the buffer callbacks and enable CONCURRENT_KERNEL, MEMCPY,
 * EXTERNAL_CORRELATION, and RUNTIME + DRIVER (the API records the correlation records hang on).
 * MP_ERR_DEVICE "no CUDA device (...)" or "CUPTI unavailable: ..." when it cannot run. */
mp_status mp_cupti_start(mp_cupti **out, mp_error *err);

/* Push / pop the external id of (request_id, step, node_index) for the calling thread; node_index
 * -1 for work of the step outside any layer. Pushes nest (the innermost id wins). */
mp_status mp_cupti_push(mp_cupti *c, int64_t request_id, int64_t step, int64_t node_index,
                        mp_error *err);
mp_status mp_cupti_pop(mp_cupti *c, mp_error *err);

/* Synchronize the device, force CUPTI to hand over every buffer, and pass each kernel / memcpy
 * record to sink in the order CUPTI delivered them. The first sink error stops the handing over
 * (the rest of the buffers are still recycled) and is returned. */
mp_status mp_cupti_flush(mp_cupti *c, mp_cupti_sink_fn sink, void *sink_user, mp_error *err);

/* A sink writing into a trace writer (user: the mp_trace_writer, inside a step). */
mp_status mp_cupti_sink_trace(void *user, const mp_trace_cupti_rec *rec, mp_error *err);

mp_cupti_counts mp_cupti_get_counts(const mp_cupti *c);

/* Pop whatever is still pushed, disable the activity kinds, count the records delivered since
 * the last flush as n_unwritten, and free everything. final (may be NULL) gets the last counts.
 * NULL c is a no-op. */
mp_status mp_cupti_stop(mp_cupti *c, mp_cupti_counts *final, mp_error *err);

/* The external id of (request, step, node): the trace's packed key (request_id << 36 |
 * step << 12 | node_index) with bit 63 set when there is no node (node_index -1). */
#define MP_CUPTI_NO_NODE_BIT (UINT64_C(1) << 63)
static inline uint64_t mp_cupti_external_id(int64_t request_id, int64_t step, int64_t node_index)
{
    uint64_t key = (uint64_t)request_id << 36 | (uint64_t)step << 12;
    return node_index < 0 ? key | MP_CUPTI_NO_NODE_BIT : key | (uint64_t)node_index;
}
static inline void mp_cupti_external_id_decode(uint64_t id, int64_t *request_id, int64_t *step,
                                               int64_t *node_index)
{
    *request_id = (int64_t)((id & ~MP_CUPTI_NO_NODE_BIT) >> 36);
    *step = (int64_t)((id >> 12) & 16777215);
    *node_index = id & MP_CUPTI_NO_NODE_BIT ? -1 : (int64_t)(id & 4095);
}

/* The module's table: mp_cupti_start ... mp_cupti_stop, in their order (gpu/module.c fills it). */
typedef struct mp_cupti_table {
    size_t size; /* sizeof(mp_cupti_table) of the module's build: the loader checks it */
    mp_status (*start)(mp_cupti **out, mp_error *err);
    mp_status (*push)(mp_cupti *c, int64_t request_id, int64_t step, int64_t node_index, mp_error *err);
    mp_status (*pop)(mp_cupti *c, mp_error *err);
    mp_status (*flush)(mp_cupti *c, mp_cupti_sink_fn sink, void *sink_user, mp_error *err);
    mp_cupti_counts (*get_counts)(const mp_cupti *c);
    mp_status (*stop)(mp_cupti *c, mp_cupti_counts *final, mp_error *err);
} mp_cupti_table;

/* ---- live capture: hooks that tag GPU work and store the records step by step ---- */

/* Wraps the trace hooks `inner` (synchronous or async): step_begin pushes (request, step),
 * layer_begin pushes (request, step, node = layer) and layer_end pops; step_end pops, flushes
 * CUPTI into sink (records then land in the step's transaction, whatever step they belong to),
 * and only then calls inner's step_end. Everything else is passed through. The first CUPTI or
 * sink error stops the tagging and is kept in state->status / state->error. */
typedef struct mp_cupti_hooks_state {
    mp_hooks inner;
    mp_cupti *cupti;
    mp_cupti_sink_fn sink;
    void *sink_user;
    int64_t request_id, step;
    int depth;        /* ids pushed by these hooks and not yet popped */
    mp_status status;
    mp_error error;
} mp_cupti_hooks_state;
mp_hooks mp_cupti_hooks(mp_cupti_hooks_state *state, mp_cupti *c, const mp_hooks *inner,
                        mp_cupti_sink_fn sink, void *sink_user);

/* A sink into the async writer's step buffer (user: the mp_trace_async). */
mp_status mp_cupti_sink_async(void *user, const mp_trace_cupti_rec *rec, mp_error *err);

#endif
