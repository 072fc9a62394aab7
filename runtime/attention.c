/* runtime/attention.c — causal grouped-query attention over the F32 KV cache.
 *
 * Query head h reads key/value head h / (n_head / n_head_kv). Row i (position p = pos0 + i)
 * attends to cache positions [0, p], or (p - window, p] on a sliding-window layer
 * (mp_layer_window): causality and the window are the loop bounds, not a mask. With sinks
 * (gpt-oss) head h's softmax has one more logit, sinks[h], whose probability is dropped: the
 * weights of the keys sum to less than 1. Scores and softmax are float32. One pool task per (row,
 * head); each thread has its own score row.
 */
#include <math.h>

#include "kernels/ops.h"
#include "runtime/state.h"

typedef struct attn_job {
    mp_session *s;
    int64_t il, pos0, window;
    const float *sinks; /* (n_head) or NULL */
} attn_job;

static void attn_task(void *ctx, int64_t task, int thread)
{
    const attn_job *j = ctx;
    mp_session *s = j->s;
    const mp_hparams *hp = &s->m->hp;
    const int64_t hd = hp->head_dim, n_head = hp->n_head;
    const int64_t row = task / n_head, h = task % n_head;
    const int64_t kvh = h / (n_head / hp->n_head_kv);
    const int64_t end = j->pos0 + row + 1; /* keys [t0, end) */
    const int64_t t0 = j->window > 0 && end > j->window ? end - j->window : 0, n_keys = end - t0;
    const float *q = s->q + (row * n_head + h) * hd;
    float *sc = s->scores + (int64_t)thread * s->n_ctx;
    const float scale = 1.0f / sqrtf((float)hd);
    for (int64_t t = 0; t < n_keys; t++)
        sc[t] = mp_dot_f32(q, mp_kv_row(s->k_cache, s, j->il, t0 + t) + kvh * hd, hd) * scale;
    mp_softmax_sink(sc, n_keys, j->sinks ? j->sinks[h] : -INFINITY);
    float *out = s->att + (row * n_head + h) * hd;
    for (int64_t d = 0; d < hd; d++)
        out[d] = 0.0f;
    for (int64_t t = 0; t < n_keys; t++)
        mp_axpy(out, sc[t], mp_kv_row(s->v_cache, s, j->il, t0 + t) + kvh * hd, hd);
}

void mp_attention(mp_session *s, int64_t il, int64_t n, int64_t pos0)
{
    attn_job j = {s, il, pos0, mp_layer_window(&s->m->hp, il), s->m->layers[il].sinks.data};
    mp_pool_run(s->pool, n * s->m->hp.n_head, attn_task, &j);
}
