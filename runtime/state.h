/* runtime/state.h — the inside of an mp_session: its sizes, KV cache, activations and request
 * bookkeeping, shared by session.c (lifetime, requests, mp_session_eval), forward.c (the forward
 * pass) and attention.c; the GPU executor reads its sizes and hooks. Not a public contract.
 *
 * Invariants: every buffer is allocated once in mp_session_new for n_batch rows and n_ctx
 * positions; an eval never allocates. Cache rows [0, n_past) of every layer hold the keys and
 * values of the tokens evaluated since the last reset, keys after q/k norm and RoPE.
 */
#ifndef MP_RUNTIME_STATE_H
#define MP_RUNTIME_STATE_H

#include "runtime/moe.h"
#include "runtime/session.h"
#include "runtime/threadpool.h"

struct mp_session {
    const mp_model *m;
    int64_t n_ctx;           /* positions the cache holds */
    int64_t n_batch;         /* max rows per forward chunk */
    int64_t n_past;          /* positions filled, <= n_ctx */
    int n_threads;
    mp_pool *pool;
    const mp_hooks *hooks;             /* NULL: tracing off */
    const mp_route_source *route_src;  /* NULL: the router decides */
    mp_moe_scratch *moe;
    mp_gpu *gpu;                       /* NULL: the CPU forward pass (forward.c) */
    mp_knobs knobs;                    /* mp_session_params.knobs, or the defaults */

    float *k_cache;   /* (n_layer, n_ctx, n_head_kv * head_dim); NULL with a GPU executor */
    float *v_cache;   /* (n_layer, n_ctx, n_head_kv * head_dim) */

    float *x;         /* (n_batch, n_embd) residual stream */
    float *xb;        /* (n_batch, n_embd) normalized input of the current block */
    float *q;         /* (n_batch, n_head * head_dim) queries */
    float *att;       /* (n_batch, n_head * head_dim) attention output, before wo */
    float *proj;      /* (n_batch, n_embd) output of wo, then of the MoE block */
    float *rope_cs;   /* (n_batch, rot_dim) cos/sin pairs of each row's position */
    double *rope_theta; /* (rot_dim / 2) and rope_mscale: mp_rope_freqs of the model */
    float rope_mscale;
    float *scores;    /* (n_threads, n_ctx) attention scores, one row per thread */
    void *qbuf;       /* n_batch × mp_act_row_bytes_max(max(n_embd, n_head * head_dim, n_ff_shexp)) */
    float *shexp;     /* the shared expert's rows: gate and up (n_batch, n_ff_shexp) each, output
                       * (n_batch, n_embd), gate logit (n_batch); NULL without a shared expert or
                       * with a GPU executor */

    /* request bookkeeping for the hooks (see mp_session_begin_request) */
    int64_t request_id;
    int64_t step;         /* steps (forward chunks) since the request began */
    int64_t n_prompt;     /* positions < n_prompt are prefill; -1: no request begun */
};

static inline float *mp_kv_row(float *cache, const mp_session *s, int64_t il, int64_t pos)
{
    const int64_t kv_dim = s->m->hp.n_head_kv * s->m->hp.head_dim;
    return cache + (il * s->n_ctx + pos) * kv_dim;
}

/* Causal GQA attention of rows [0, n) at positions pos0 + i over cache rows [0, pos0 + n) of
 * layer il: s->att = softmax(q kᵀ / sqrt(head_dim)) v, parallel over (row, head). */
void mp_attention(mp_session *s, int64_t il, int64_t n, int64_t pos0);

/* One forward chunk: n <= n_batch rows at positions [n_past, n_past + n). logits: NULL, the
 * last row (n_vocab), or every row (n × n_vocab) when all_logits. Advances n_past. */
mp_status mp_forward(mp_session *s, const int32_t *tokens, int64_t n, bool all_logits,
                     float *logits, mp_error *err);

#endif
