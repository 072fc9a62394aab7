/* collector/trace_async.c — live capture with the SQLite work on a writer thread (trace.h).
 *
 * The hot path (the runtime's hook calls) appends tagged events to `cur`, a byte buffer that grows
 * to the largest step once and is then reused. Handoff at step_end / request_end: wait until the
 * writer thread has released `pending`, then pending = cur and cur = the released buffer.
 * The thread replays each buffer through the synchronous hooks (trace_write.c), so both paths
 * write exactly the same trace. CUPTI records (mp_trace_async_add_cupti, `collect --cupti`) ride
 * in the same buffer as EV_CUPTI events and are stored with mp_trace_add_cupti.
 *
 * Invariants (under mu): pending != NULL while the thread owns a buffer; cur is never pending;
 * `failed` mirrors the synchronous state's first error once the thread has seen it.
 */
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "collector/trace.h"

enum { EV_REQ_BEGIN = 1, EV_STEP_BEGIN, EV_ROUTING, EV_TIMING, EV_STEP_END, EV_REQ_END, EV_CUPTI };

typedef struct ev_head {
    int64_t type, a, b, c, d, e; /* meaning per type, see the hk_ functions below */
    int64_t payload_bytes;       /* bytes following this header */
} ev_head;

typedef struct ev_buf {
    uint8_t *data; /* (len) packed events: ev_head then payload, each 8-byte aligned */
    size_t len, cap;
} ev_buf;

struct mp_trace_async {
    mp_trace_hooks_state sync; /* replay target; touched by the writer thread only */
    mp_hooks sync_hooks;
    pthread_t thread;
    pthread_mutex_t mu;
    pthread_cond_t cv;
    ev_buf bufs[2];
    ev_buf *cur;     /* filled by the hot path */
    ev_buf *pending; /* being written by the thread, or NULL */
    bool quit;
    bool failed;     /* a copy of sync.status != MP_OK, read by the hot path */
    mp_status oom;   /* the hot path could not grow a buffer */
    /* the hot path's view of the open step: its rows (step_begin) and the layer and top-k of the
     * last routing call, which give a timing call's served codes their length */
    int64_t step_rows, routed_layer, routed_top_k;
};

static uint8_t *reserve(mp_trace_async *a, size_t bytes)
{
    ev_buf *b = a->cur;
    bytes = (bytes + 7) & ~(size_t)7;
    if (b->len + bytes > b->cap) { /* grows until the largest step fits, then never again */
        size_t cap = b->cap ? 2 * b->cap : 65536;
        while (cap < b->len + bytes)
            cap *= 2;
        uint8_t *d = realloc(b->data, cap);
        if (!d) {
            a->oom = MP_ERR_NOMEM;
            return NULL;
        }
        b->data = d;
        b->cap = cap;
    }
    uint8_t *p = b->data + b->len;
    b->len += bytes;
    return p;
}

static void put(mp_trace_async *a, ev_head h, const void *p1, size_t n1, const void *p2, size_t n2)
{
    if (__atomic_load_n(&a->failed, __ATOMIC_RELAXED) || a->oom)
        return;
    h.payload_bytes = (int64_t)(n1 + n2);
    uint8_t *d = reserve(a, sizeof h + n1 + n2);
    if (!d)
        return;
    memcpy(d, &h, sizeof h);
    if (n1)
        memcpy(d + sizeof h, p1, n1);
    if (n2)
        memcpy(d + sizeof h + n1, p2, n2);
}

static void replay_cupti(mp_trace_async *a, const ev_head *e, const uint8_t *p)
{
    if (a->sync.status != MP_OK)
        return;
    int64_t f[8]; /* start, end, bytes, device, stream, correlation, request, step; node in e->b */
    memcpy(f, p, sizeof f);
    /* an unknown kind reaches the writer as NULL, which refuses it as the synchronous path does */
    mp_trace_cupti_rec r = {.kind = e->a == 0 ? "kernel" : e->a == 1 ? "memcpy" : NULL,
                            .name = e->c ? (const char *)(p + sizeof f) : NULL,
                            .start_ns = f[0], .end_ns = f[1], .bytes = f[2], .device_id = f[3],
                            .stream_id = f[4], .correlation_id = f[5], .request_id = f[6],
                            .step = f[7], .node_index = e->b};
    a->sync.status = mp_trace_add_cupti(a->sync.w, &r, &a->sync.error);
}

static void replay(mp_trace_async *a, const ev_buf *b)
{
    const mp_hooks *h = &a->sync_hooks;
    for (size_t off = 0; off < b->len;) {
        ev_head e;
        memcpy(&e, b->data + off, sizeof e);
        const uint8_t *p = b->data + off + sizeof e;
        switch (e.type) {
        case EV_REQ_BEGIN:
            h->request_begin(h->user, e.a, (const int32_t *)p, e.b);
            break;
        case EV_STEP_BEGIN:
            h->step_begin(h->user, e.a, e.b, (mp_phase)e.c, e.d, e.e);
            break;
        case EV_ROUTING: /* payload: ids int32 (b × c) then weights float (b × c) */
            h->routing(h->user, e.a, e.b, e.c, (const int32_t *)p,
                       (const float *)(p + (size_t)(e.b * e.c) * 4));
            break;
        case EV_TIMING: { /* payload: the struct, then b served codes (b = 0: none) */
            mp_moe_timing t;
            memcpy(&t, p, sizeof t);
            t.served = e.b ? p + sizeof t : NULL;
            h->moe_timing(h->user, e.a, &t);
            break;
        }
        case EV_STEP_END:
            h->step_end(h->user, e.a);
            break;
        case EV_REQ_END:
            h->request_end(h->user, e.a);
            break;
        case EV_CUPTI: /* a: 0 kernel, 1 memcpy, 2 invalid; b: node; payload: int64 (8) fields then the name, NUL-terminated */
            replay_cupti(a, &e, p);
            break;
        }
        off += (sizeof e + (size_t)e.payload_bytes + 7) & ~(size_t)7;
    }
}

static void *writer_main(void *arg)
{
    mp_trace_async *a = arg;
    pthread_mutex_lock(&a->mu);
    for (;;) {
        while (!a->pending && !a->quit)
            pthread_cond_wait(&a->cv, &a->mu);
        if (!a->pending && a->quit)
            break;
        ev_buf *b = a->pending;
        pthread_mutex_unlock(&a->mu);
        replay(a, b); /* the SQLite work, off the hot path */
        pthread_mutex_lock(&a->mu);
        b->len = 0;
        a->pending = NULL;
        __atomic_store_n(&a->failed, a->sync.status != MP_OK, __ATOMIC_RELAXED);
        pthread_cond_broadcast(&a->cv);
    }
    pthread_mutex_unlock(&a->mu);
    return NULL;
}

/* Hand cur to the writer thread (waiting for the previous buffer to be written). */
static void flush(mp_trace_async *a)
{
    pthread_mutex_lock(&a->mu);
    while (a->pending)
        pthread_cond_wait(&a->cv, &a->mu);
    if (a->cur->len) {
        a->pending = a->cur;
        a->cur = a->cur == &a->bufs[0] ? &a->bufs[1] : &a->bufs[0];
        a->cur->len = 0;
        pthread_cond_broadcast(&a->cv);
    }
    pthread_mutex_unlock(&a->mu);
}

static void hk_request_begin(void *u, int64_t request_id, const int32_t *tokens, int64_t n)
{
    ev_head h = {.type = EV_REQ_BEGIN, .a = request_id, .b = n};
    put(u, h, tokens, tokens && n > 0 ? (size_t)n * 4 : 0, NULL, 0);
}

static void hk_step_begin(void *u, int64_t request_id, int64_t step, mp_phase phase, int64_t rows,
                          int64_t pos)
{
    mp_trace_async *a = u;
    ev_head h = {.type = EV_STEP_BEGIN, .a = request_id, .b = step, .c = phase, .d = rows, .e = pos};
    put(a, h, NULL, 0, NULL, 0);
    a->step_rows = rows;
    a->routed_layer = -1;
}

/* The per-layer cost of tracing on the hot path: two copies of (n_rows, top_k) here, and the
 * served codes' (n_rows, top_k) bytes with the timing. */
static void hk_routing(void *u, int64_t layer, int64_t rows, int64_t top_k, const int32_t *ids,
                       const float *weights)
{
    mp_trace_async *a = u;
    ev_head h = {.type = EV_ROUTING, .a = layer, .b = rows, .c = top_k};
    size_t n = rows > 0 && top_k > 0 ? (size_t)(rows * top_k) : 0;
    put(a, h, ids, n * 4, weights, n * 4);
    a->routed_layer = layer;
    a->routed_top_k = top_k;
}

/* The served codes are the step's rows × the layer's top-k (runtime/hooks.h: the layer's routing
 * call comes first); without that call their length is unknown and they are left out (NULL). */
static void hk_moe_timing(void *u, int64_t layer, const mp_moe_timing *t)
{
    mp_trace_async *a = u;
    const size_t n = t->served && layer == a->routed_layer && a->step_rows > 0 && a->routed_top_k > 0
                         ? (size_t)(a->step_rows * a->routed_top_k) : 0;
    ev_head h = {.type = EV_TIMING, .a = layer, .b = (int64_t)n};
    put(a, h, t, sizeof *t, t->served, n);
}

static void hk_step_end(void *u, int64_t duration_ns)
{
    ev_head h = {.type = EV_STEP_END, .a = duration_ns};
    put(u, h, NULL, 0, NULL, 0);
    flush(u);
}

static void hk_request_end(void *u, int64_t n_generated)
{
    ev_head h = {.type = EV_REQ_END, .a = n_generated};
    put(u, h, NULL, 0, NULL, 0);
    flush(u);
}

void mp_trace_async_add_cupti(mp_trace_async *a, const mp_trace_cupti_rec *r)
{
    const int64_t f[8] = {r->start_ns, r->end_ns, r->bytes, r->device_id, r->stream_id,
                          r->correlation_id, r->request_id, r->step};
    const int64_t kind = !r->kind ? 2 : !strcmp(r->kind, "kernel") ? 0 : !strcmp(r->kind, "memcpy") ? 1 : 2;
    const size_t name_bytes = r->name ? strlen(r->name) + 1 : 0;
    ev_head h = {.type = EV_CUPTI, .a = kind, .b = r->node_index, .c = name_bytes > 0};
    put(a, h, f, sizeof f, r->name, name_bytes);
}

mp_status mp_trace_async_start(mp_trace_writer *w, mp_trace_async **out, mp_hooks *hooks,
                               mp_error *err)
{
    *out = NULL;
    mp_trace_async *a = calloc(1, sizeof *a);
    if (!a)
        return mp_fail(err, MP_ERR_NOMEM, "trace: out of memory");
    a->sync_hooks = mp_trace_hooks(&a->sync, w);
    a->routed_layer = -1;
    a->cur = &a->bufs[0];
    pthread_mutex_init(&a->mu, NULL);
    pthread_cond_init(&a->cv, NULL);
    if (pthread_create(&a->thread, NULL, writer_main, a) != 0) {
        pthread_mutex_destroy(&a->mu);
        pthread_cond_destroy(&a->cv);
        free(a);
        return mp_fail(err, MP_ERR_INTERNAL, "trace: cannot start the writer thread");
    }
    *hooks = (mp_hooks){
        .user = a,
        .request_begin = hk_request_begin,
        .step_begin = hk_step_begin,
        .routing = hk_routing,
        .moe_timing = hk_moe_timing,
        .step_end = hk_step_end,
        .request_end = hk_request_end,
    };
    *out = a;
    return MP_OK;
}

mp_status mp_trace_async_stop(mp_trace_async *a, mp_error *err)
{
    if (!a)
        return MP_OK;
    flush(a); /* anything after the last step_end */
    pthread_mutex_lock(&a->mu);
    while (a->pending)
        pthread_cond_wait(&a->cv, &a->mu);
    a->quit = true;
    pthread_cond_broadcast(&a->cv);
    pthread_mutex_unlock(&a->mu);
    pthread_join(a->thread, NULL);
    mp_status s = a->sync.status;
    if (s != MP_OK && err)
        *err = a->sync.error;
    else if (a->oom)
        s = mp_fail(err, a->oom, "trace: out of memory while buffering a step");
    pthread_mutex_destroy(&a->mu);
    pthread_cond_destroy(&a->cv);
    free(a->bufs[0].data);
    free(a->bufs[1].data);
    free(a);
    return s;
}
