/* gpu/cupti_capture.c — CUPTI activity capture (cupti.h), built where the CUDA toolkit has CUPTI.
 *
 * Buffers: CUPTI asks for empty buffers (buffer_requested) and hands full ones back
 * (buffer_completed), from any thread, at any time. Both only move buffers between two lists under
 * g_mu: `free_list` (ready to lend) and `done` (filled, waiting for mp_cupti_cap_flush, FIFO). The
 * records are parsed on the flushing thread only. A flush synchronizes the device and forces
 * CUPTI to hand every buffer over, so all records of the work issued before it are in `done`:
 * external-correlation records are collected first (pass 1), then kernel / memcpy records are
 * joined to them by correlation id (pass 2), and the table is emptied.
 *
 * Invariants (under g_mu): g_active is the one running session or NULL; a buffer is in exactly
 * one of: lent to CUPTI, free_list, done; n_buffers counts them all.
 */
#include <cuda_runtime_api.h>
#include <cupti.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "gpu/module.h"
#include "base/clock.h"

/* The record layouts of the CUPTI this file is compiled against (the library fills the newest
 * version its major release knows; headers and library come from the same toolkit). */
#if CUPTI_API_VERSION >= 130000
typedef CUpti_ActivityKernel10 kernel_rec;
typedef CUpti_ActivityMemcpy6 memcpy_rec;
#else
typedef CUpti_ActivityKernel9 kernel_rec;
typedef CUpti_ActivityMemcpy5 memcpy_rec;
#endif

enum {
    BUF_BYTES = 1 << 20,     /* CUPTI's own samples use 8 KiB..8 MiB; 1 MiB holds ~4k kernels */
    BUF_HEADER = 64,         /* our bookkeeping before the bytes lent to CUPTI (8-aligned) */
    FREE_KEEP = 8,           /* buffers kept for reuse after a flush; more are freed */
};

typedef struct buf {
    struct buf *next;
    size_t valid_bytes;      /* set by buffer_completed */
} buf;

typedef struct corr_pair {
    uint32_t correlation_id; /* CUDA API call */
    uint64_t external_id;    /* ours, mp_cupti_external_id */
} corr_pair;

struct mp_cupti_capture {
    buf *free_list;
    buf *done_head, *done_tail;
    int64_t n_buffers;
    mp_cupti_counts counts;
    corr_pair *corr;         /* (n_corr) pass-1 table of the flush in progress */
    size_t n_corr, cap_corr;
    int depth;               /* ids pushed through mp_cupti_cap_push and not popped */
};

static pthread_mutex_t g_mu = PTHREAD_MUTEX_INITIALIZER;
static mp_cupti *g_active;

static const CUpti_ActivityKind g_kinds[] = {
    CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL, CUPTI_ACTIVITY_KIND_MEMCPY,
    CUPTI_ACTIVITY_KIND_EXTERNAL_CORRELATION, CUPTI_ACTIVITY_KIND_RUNTIME,
    CUPTI_ACTIVITY_KIND_DRIVER,
};
enum { N_KINDS = sizeof g_kinds / sizeof g_kinds[0] };

static const char *cupti_str(CUptiResult r)
{
    const char *s = NULL;
    if (cuptiGetResultString(r, &s) != CUPTI_SUCCESS || !s)
        s = "unknown CUPTI error";
    return s;
}

static void CUPTIAPI buffer_requested(uint8_t **buffer, size_t *size, size_t *max_records)
{
    *buffer = NULL;
    *size = 0;
    *max_records = 0;
    pthread_mutex_lock(&g_mu);
    mp_cupti *c = g_active;
    buf *b = NULL;
    if (c && c->free_list) {
        b = c->free_list;
        c->free_list = b->next;
    } else if (c && (b = aligned_alloc(BUF_HEADER, BUF_HEADER + BUF_BYTES))) {
        c->n_buffers++;
        if (c->n_buffers > c->counts.max_buffers)
            c->counts.max_buffers = c->n_buffers;
    }
    /* no buffer: CUPTI drops the records and counts them (read in buffer_completed) */
    pthread_mutex_unlock(&g_mu);
    if (b) {
        *buffer = (uint8_t *)b + BUF_HEADER;
        *size = BUF_BYTES;
    }
}

static void CUPTIAPI buffer_completed(CUcontext ctx, uint32_t stream_id, uint8_t *buffer,
                                      size_t size, size_t valid_bytes)
{
    size_t dropped = 0;
    if (cuptiActivityGetNumDroppedRecords(ctx, stream_id, &dropped) != CUPTI_SUCCESS)
        dropped = 0;
    pthread_mutex_lock(&g_mu);
    mp_cupti *c = g_active;
    buf *b = buffer ? (buf *)(buffer - BUF_HEADER) : NULL;
    if (c) {
        c->counts.n_dropped += (int64_t)dropped;
        if (b) {
            b->valid_bytes = valid_bytes;
            b->next = NULL;
            if (c->done_tail)
                c->done_tail->next = b;
            else
                c->done_head = b;
            c->done_tail = b;
        }
    } else {
        free(b); /* handed back after the session stopped */
    }
    pthread_mutex_unlock(&g_mu);
}

mp_status mp_cupti_cap_start(mp_cupti **out, mp_error *err)
{
    *out = NULL;
    int n_dev = 0;
    cudaError_t ce = cudaGetDeviceCount(&n_dev);
    if (ce != cudaSuccess || n_dev == 0)
        return mp_fail(err, MP_ERR_DEVICE, "no CUDA device (%s): CUPTI has nothing to trace",
                       ce != cudaSuccess ? cudaGetErrorString(ce) : "device count is 0");
    mp_cupti *c = calloc(1, sizeof *c);
    if (!c)
        return mp_fail(err, MP_ERR_NOMEM, "cupti: out of memory");
    c->counts.buffer_bytes = BUF_BYTES;
    pthread_mutex_lock(&g_mu);
    bool busy = g_active != NULL;
    if (!busy)
        g_active = c;
    pthread_mutex_unlock(&g_mu);
    if (busy) {
        free(c);
        return mp_fail(err, MP_ERR_ARG, "cupti: a CUPTI session is already running in this "
                       "process");
    }
    CUptiResult r = cuptiActivityRegisterCallbacks(buffer_requested, buffer_completed);
    int enabled = 0;
    while (r == CUPTI_SUCCESS && enabled < N_KINDS)
        if ((r = cuptiActivityEnable(g_kinds[enabled])) == CUPTI_SUCCESS)
            enabled++;
    if (r != CUPTI_SUCCESS) {
        mp_fail(err, MP_ERR_DEVICE, "CUPTI unavailable: %s: %s",
                enabled < N_KINDS ? "cuptiActivityEnable" : "cuptiActivityRegisterCallbacks",
                cupti_str(r));
        while (enabled > 0)
            cuptiActivityDisable(g_kinds[--enabled]);
        pthread_mutex_lock(&g_mu);
        g_active = NULL;
        pthread_mutex_unlock(&g_mu);
        free(c);
        return err->code;
    }
    *out = c;
    return MP_OK;
}

mp_status mp_cupti_cap_push(mp_cupti *c, int64_t request_id, int64_t step, int64_t node_index,
                        mp_error *err)
{
    if (request_id < 0 || request_id > MP_TRACE_MAX_REQUEST_ID || step < 0 ||
        step > MP_TRACE_MAX_STEP || node_index < -1 || node_index > MP_TRACE_MAX_NODE_INDEX)
        return mp_fail(err, MP_ERR_ARG, "cupti: (request %lld, step %lld, node %lld) does not fit "
                       "an external id", (long long)request_id, (long long)step,
                       (long long)node_index);
    CUptiResult r = cuptiActivityPushExternalCorrelationId(
        CUPTI_EXTERNAL_CORRELATION_KIND_CUSTOM0, mp_cupti_external_id(request_id, step, node_index));
    if (r != CUPTI_SUCCESS)
        return mp_fail(err, MP_ERR_DEVICE, "cupti: cuptiActivityPushExternalCorrelationId: %s",
                       cupti_str(r));
    c->depth++;
    return MP_OK;
}

mp_status mp_cupti_cap_pop(mp_cupti *c, mp_error *err)
{
    uint64_t last = 0;
    CUptiResult r = cuptiActivityPopExternalCorrelationId(CUPTI_EXTERNAL_CORRELATION_KIND_CUSTOM0,
                                                          &last);
    if (r != CUPTI_SUCCESS)
        return mp_fail(err, MP_ERR_DEVICE, "cupti: cuptiActivityPopExternalCorrelationId: %s",
                       cupti_str(r));
    if (c->depth > 0)
        c->depth--;
    return MP_OK;
}

static int cmp_corr(const void *a, const void *b)
{
    uint32_t x = ((const corr_pair *)a)->correlation_id, y = ((const corr_pair *)b)->correlation_id;
    return x < y ? -1 : x > y;
}

static mp_status add_corr(mp_cupti *c, uint32_t correlation_id, uint64_t external_id,
                          mp_error *err)
{
    if (c->n_corr == c->cap_corr) {
        size_t cap = c->cap_corr ? 2 * c->cap_corr : 4096;
        corr_pair *p = realloc(c->corr, cap * sizeof *p);
        if (!p)
            return mp_fail(err, MP_ERR_NOMEM, "cupti: out of memory (correlation table of %zu "
                           "entries)", cap);
        c->corr = p;
        c->cap_corr = cap;
    }
    c->corr[c->n_corr++] = (corr_pair){correlation_id, external_id};
    return MP_OK;
}

/* One record into r: kernel or memcpy; false for every other kind. */
static bool to_trace_rec(const CUpti_Activity *a, mp_trace_cupti_rec *r, uint32_t *corr)
{
    static const char *const copy_kinds[] = {"unknown", "HtoD", "DtoH", "HtoA", "AtoH", "AtoA",
                                             "AtoD",    "DtoA", "DtoD", "HtoH", "PtoP"};
    memset(r, 0, sizeof *r);
    if (a->kind == CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL || a->kind == CUPTI_ACTIVITY_KIND_KERNEL) {
        const kernel_rec *k = (const kernel_rec *)a;
        *r = (mp_trace_cupti_rec){.kind = "kernel", .name = k->name, .start_ns = (int64_t)k->start,
                                  .end_ns = (int64_t)k->end, .bytes = -1,
                                  .device_id = k->deviceId, .stream_id = k->streamId,
                                  .correlation_id = k->correlationId};
        *corr = k->correlationId;
        return true;
    }
    if (a->kind == CUPTI_ACTIVITY_KIND_MEMCPY) {
        const memcpy_rec *m = (const memcpy_rec *)a;
        *r = (mp_trace_cupti_rec){.kind = "memcpy",
                                  .name = m->copyKind < sizeof copy_kinds / sizeof *copy_kinds
                                              ? copy_kinds[m->copyKind] : "unknown",
                                  .start_ns = (int64_t)m->start, .end_ns = (int64_t)m->end,
                                  .bytes = (int64_t)m->bytes, .device_id = m->deviceId,
                                  .stream_id = m->streamId, .correlation_id = m->correlationId};
        *corr = m->correlationId;
        return true;
    }
    return false;
}

/* Pass 1 (correlation records) or pass 2 (kernel / memcpy records, to the sink) over one buffer. */
static mp_status scan(mp_cupti *c, const buf *b, int pass, mp_cupti_sink_fn sink, void *user,
                      mp_error *err)
{
    uint8_t *bytes = (uint8_t *)b + BUF_HEADER;
    CUpti_Activity *a = NULL;
    mp_status s;
    for (;;) {
        CUptiResult r = cuptiActivityGetNextRecord(bytes, b->valid_bytes, &a);
        if (r == CUPTI_ERROR_MAX_LIMIT_REACHED)
            return MP_OK;
        if (r != CUPTI_SUCCESS)
            return mp_fail(err, MP_ERR_DEVICE, "cupti: cannot read an activity buffer: %s",
                           cupti_str(r));
        if (pass == 1) {
            if (a->kind != CUPTI_ACTIVITY_KIND_EXTERNAL_CORRELATION)
                continue;
            const CUpti_ActivityExternalCorrelation *x = (const CUpti_ActivityExternalCorrelation *)a;
            if (x->externalKind == CUPTI_EXTERNAL_CORRELATION_KIND_CUSTOM0 &&
                (s = add_corr(c, x->correlationId, x->externalId, err)))
                return s;
            continue;
        }
        mp_trace_cupti_rec rec;
        uint32_t corr;
        if (!to_trace_rec(a, &rec, &corr))
            continue;
        if (rec.start_ns <= 0 || rec.end_ns < rec.start_ns) { /* not finished when flushed */
            c->counts.n_incomplete++;
            continue;
        }
        if (!sink) { /* delivered after the last flush: nowhere to store it */
            c->counts.n_unwritten++;
            continue;
        }
        rec.request_id = rec.step = rec.node_index = -1;
        corr_pair key = {.correlation_id = corr};
        const corr_pair *hit = c->n_corr ? bsearch(&key, c->corr, c->n_corr, sizeof *c->corr,
                                                   cmp_corr)
                                         : NULL;
        if (hit)
            mp_cupti_external_id_decode(hit->external_id, &rec.request_id, &rec.step,
                                        &rec.node_index);
        if ((s = sink(user, &rec, err)))
            return s;
        c->counts.n_kernel += rec.kind[0] == 'k';
        c->counts.n_memcpy += rec.kind[0] == 'm';
        c->counts.n_uncorrelated += !hit;
        c->counts.n_no_node += hit && rec.node_index < 0;
    }
}

/* Hand everything CUPTI holds over and feed it to sink (NULL: count as unwritten). */
static mp_status drain(mp_cupti *c, mp_cupti_sink_fn sink, void *user, mp_error *err)
{
    mp_status s = MP_OK;
    cudaError_t ce = cudaDeviceSynchronize(); /* every issued activity gets its timestamps */
    CUptiResult r = cuptiActivityFlushAll(CUPTI_ACTIVITY_FLAG_FLUSH_FORCED);
    pthread_mutex_lock(&g_mu);
    buf *list = c->done_head;
    c->done_head = c->done_tail = NULL;
    pthread_mutex_unlock(&g_mu);
    if (ce != cudaSuccess)
        s = mp_fail(err, MP_ERR_DEVICE, "cupti: cudaDeviceSynchronize before a flush: %s",
                    cudaGetErrorString(ce));
    else if (r != CUPTI_SUCCESS)
        s = mp_fail(err, MP_ERR_DEVICE, "cupti: cuptiActivityFlushAll: %s", cupti_str(r));
    c->n_corr = 0;
    for (buf *b = list; b && !s; b = b->next)
        s = scan(c, b, 1, NULL, NULL, err);
    if (!s && c->n_corr > 1)
        qsort(c->corr, c->n_corr, sizeof *c->corr, cmp_corr);
    for (buf *b = list; b && !s; b = b->next)
        s = scan(c, b, 2, sink, user, err);
    c->n_corr = 0;
    /* recycle: keep a few buffers for the next step, free the rest (memory stays bounded) */
    pthread_mutex_lock(&g_mu);
    int64_t kept = 0;
    for (buf *f = c->free_list; f; f = f->next)
        kept++;
    while (list) {
        buf *next = list->next;
        if (kept < FREE_KEEP) {
            list->next = c->free_list;
            c->free_list = list;
            kept++;
        } else {
            free(list);
            c->n_buffers--;
        }
        list = next;
    }
    pthread_mutex_unlock(&g_mu);
    return s;
}

mp_status mp_cupti_cap_flush(mp_cupti *c, mp_cupti_sink_fn sink, void *sink_user, mp_error *err)
{
    const int64_t t0 = mp_now_ns();
    if (!sink)
        return mp_fail(err, MP_ERR_ARG, "cupti: flush needs a sink");
    mp_status s = drain(c, sink, sink_user, err);
    c->counts.n_flushes++;
    c->counts.flush_ns += mp_now_ns() - t0;
    return s;
}

mp_cupti_counts mp_cupti_cap_get_counts(const mp_cupti *c)
{
    pthread_mutex_lock(&g_mu); /* n_dropped and max_buffers move in CUPTI's callbacks */
    mp_cupti_counts n = c->counts;
    pthread_mutex_unlock(&g_mu);
    return n;
}

mp_status mp_cupti_cap_stop(mp_cupti *c, mp_cupti_counts *final, mp_error *err)
{
    if (!c)
        return MP_OK;
    mp_status s = MP_OK;
    mp_error e2;
    while (c->depth > 0) {
        mp_status p = mp_cupti_cap_pop(c, s ? &e2 : err);
        if (p) {
            s = s ? s : p;
            c->depth = 0;
        }
    }
    for (int i = N_KINDS - 1; i >= 0; i--)
        cuptiActivityDisable(g_kinds[i]);
    mp_status d = drain(c, NULL, NULL, s ? &e2 : err);
    s = s ? s : d;
    if (final)
        *final = mp_cupti_cap_get_counts(c);
    pthread_mutex_lock(&g_mu);
    g_active = NULL; /* a buffer CUPTI hands back from now on is freed by buffer_completed */
    while (c->free_list) {
        buf *next = c->free_list->next;
        free(c->free_list);
        c->free_list = next;
    }
    pthread_mutex_unlock(&g_mu);
    free(c->corr);
    free(c);
    return s;
}
