/* runtime/session.c — session lifetime, KV cache, request bookkeeping, and mp_session_eval, which
 * splits a batch into n_batch-row chunks (each a "step" for the hooks) and runs the forward pass
 * (runtime/forward.c) on each.
 *
 * Phases reported to the hooks: positions below the prompt length given to
 * mp_session_begin_request are prefill, the rest decode. Without a begun request a chunk is
 * prefill when it starts the cache or has more than one row, else decode.
 */
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "runtime/cpus.h"
#include "runtime/gpu.h"
#include "runtime/matmul.h"
#include "runtime/state.h"
#include "base/clock.h"

void mp_session_free(mp_session *s)
{
    if (!s)
        return;
    mp_gpu_free(s->gpu);
    mp_pool_free(s->pool);
    mp_moe_scratch_free(s->moe);
    free(s->k_cache);
    free(s->v_cache);
    free(s->x);
    free(s->xb);
    free(s->q);
    free(s->att);
    free(s->proj);
    free(s->rope_cs);
    free(s->rope_theta);
    free(s->scores);
    free(s->qbuf);
    free(s->shexp);
    free(s);
}

static void *alloc_floats(int64_t a, int64_t b, int64_t c)
{
    return calloc((size_t)a * (size_t)b * (size_t)c, sizeof(float));
}

mp_status mp_session_resolve_sizes(const mp_model *m, const mp_session_params *p, int64_t *n_ctx_out,
                                   int64_t *n_batch_out, mp_error *err)
{
    const mp_hparams *hp = &m->hp;
    int64_t n_ctx = p->n_ctx, n_batch = p->n_batch;
    if (n_ctx < 0 || n_batch < 0 || p->n_threads < 0)
        return mp_fail(err, MP_ERR_ARG, "session: n_ctx %" PRId64 ", n_batch %" PRId64
                       " and n_threads %d must not be negative", n_ctx, n_batch, p->n_threads);
    if (n_ctx == 0)
        n_ctx = hp->n_ctx_train < 4096 ? hp->n_ctx_train : 4096;
    if (n_batch == 0)
        n_batch = 512;
    if (n_batch > n_ctx)
        n_batch = n_ctx;
    *n_ctx_out = n_ctx;
    *n_batch_out = n_batch;
    return MP_OK;
}

mp_status mp_session_new(const mp_model *m, const mp_session_params *p, mp_session **out,
                         mp_error *err)
{
    *out = NULL;
    const mp_hparams *hp = &m->hp;
    int64_t n_ctx, n_batch;
    mp_status rst = mp_session_resolve_sizes(m, p, &n_ctx, &n_batch, err);
    if (rst)
        return rst;
    int n_threads = p->n_threads;
    if (n_threads == 0)
        n_threads = mp_cpu_threads_default();
    if (n_ctx > (int64_t)1 << 22 || n_threads > 1024 || n_batch > 65536)
        return mp_fail(err, MP_ERR_LIMIT, "session: n_ctx %" PRId64 " (max 4194304), n_batch %"
                       PRId64 " (max 65536) or n_threads %d (max 1024) too large",
                       n_ctx, n_batch, n_threads);

    mp_session *s = calloc(1, sizeof *s);
    if (!s)
        return mp_fail(err, MP_ERR_NOMEM, "session: out of memory");
    s->m = m;
    s->n_ctx = n_ctx;
    s->n_batch = n_batch;
    s->n_threads = n_threads;
    s->hooks = p->hooks;
    s->route_src = p->route_src;
    s->n_prompt = -1;
    if (p->knobs)
        s->knobs = *p->knobs;
    else
        mp_knobs_defaults(&s->knobs);
    const int64_t Q = hp->n_head * hp->head_dim, KV = hp->n_head_kv * hp->head_dim;
    int64_t widest = Q > hp->n_embd ? Q : hp->n_embd;
    if (hp->n_ff_shexp > widest)
        widest = hp->n_ff_shexp;
    s->pool = mp_pool_new(n_threads, s->knobs.pool_pin);
    s->moe = mp_moe_scratch_new(hp, n_batch, n_threads, &s->knobs);
    const bool cpu_kv = p->placement == NULL; /* the GPU executor keeps its cache on the device */
    s->k_cache = cpu_kv ? alloc_floats(hp->n_layer, n_ctx, KV) : NULL;
    s->v_cache = cpu_kv ? alloc_floats(hp->n_layer, n_ctx, KV) : NULL;
    s->x = alloc_floats(n_batch, hp->n_embd, 1);
    s->xb = alloc_floats(n_batch, hp->n_embd, 1);
    s->q = alloc_floats(n_batch, Q, 1);
    s->att = alloc_floats(n_batch, Q, 1);
    s->proj = alloc_floats(n_batch, hp->n_embd, 1);
    s->rope_cs = alloc_floats(n_batch, hp->rot_dim, 1);
    s->rope_theta = malloc((size_t)(hp->rot_dim / 2) * sizeof *s->rope_theta);
    if (s->rope_theta)
        mp_rope_freqs(hp, s->rope_theta, &s->rope_mscale);
    s->scores = alloc_floats(n_threads, n_ctx, 1);
    s->qbuf = malloc((size_t)n_batch * mp_act_row_bytes_max(widest));
    const bool cpu_shexp = cpu_kv && hp->n_ff_shexp > 0;
    s->shexp = cpu_shexp ? alloc_floats(n_batch, 2 * hp->n_ff_shexp + hp->n_embd + 1, 1) : NULL;
    if (!s->pool || !s->moe || (cpu_kv && (!s->k_cache || !s->v_cache)) || !s->x || !s->xb || !s->q || !s->att ||
        !s->proj || !s->rope_cs || !s->rope_theta || !s->scores || !s->qbuf || (cpu_shexp && !s->shexp)) {
        const double kv_mib = 2.0 * (double)hp->n_layer * (double)n_ctx * (double)KV * 4 / 1048576;
        mp_session_free(s);
        return mp_fail(err, MP_ERR_NOMEM,
                       "session: out of memory for n_ctx %" PRId64 " (KV cache %.0f MiB), n_batch %"
                       PRId64 ", %d threads", n_ctx, kv_mib, n_batch, n_threads);
    }
    if (p->placement) {
        mp_status st = mp_gpu_new(s, p->placement, &s->gpu, err);
        if (st) {
            mp_session_free(s);
            return st;
        }
    }
    *out = s;
    return MP_OK;
}

void mp_session_set_hooks(mp_session *s, const mp_hooks *hooks)
{
    s->hooks = hooks;
}

mp_gpu *mp_session_gpu(mp_session *s)
{
    return s->gpu;
}

mp_status mp_session_eval(mp_session *s, const int32_t *tokens, int64_t n, bool all_logits,
                          float *logits, mp_error *err)
{
    const int64_t n_vocab = s->m->hp.n_vocab;
    if (n < 1)
        return mp_fail(err, MP_ERR_ARG, "eval: %" PRId64 " tokens (need at least 1)", n);
    if (n > s->n_ctx - s->n_past)
        return mp_fail(err, MP_ERR_LIMIT,
                       "eval: %" PRId64 " tokens at position %" PRId64 " exceed the context of %"
                       PRId64 " tokens", n, s->n_past, s->n_ctx);
    for (int64_t i = 0; i < n; i++)
        if (tokens[i] < 0 || tokens[i] >= n_vocab)
            return mp_fail(err, MP_ERR_ARG, "eval: token %" PRId64 " is id %d, outside the "
                           "vocabulary [0, %" PRId64 ")", i, (int)tokens[i], n_vocab);
    for (int64_t done = 0; done < n;) {
        const int64_t chunk = n - done < s->n_batch ? n - done : s->n_batch;
        const bool last = done + chunk == n;
        float *chunk_logits = NULL;
        if (logits && all_logits)
            chunk_logits = logits + done * n_vocab;
        else if (logits && last)
            chunk_logits = logits;
        const int64_t t0_ns = s->hooks ? mp_now_ns() : 0;
        if (s->hooks && s->hooks->step_begin) {
            bool prefill = s->n_prompt >= 0 ? s->n_past < s->n_prompt
                                            : (s->n_past == 0 || chunk > 1);
            s->hooks->step_begin(s->hooks->user, s->request_id, s->step,
                                 prefill ? MP_PHASE_PREFILL : MP_PHASE_DECODE, chunk, s->n_past);
        }
        mp_status st = s->gpu ? mp_gpu_forward(s, tokens + done, chunk, all_logits, chunk_logits, err)
                              : mp_forward(s, tokens + done, chunk, all_logits, chunk_logits, err);
        if (st)
            return st;
        if (s->hooks && s->hooks->step_end)
            s->hooks->step_end(s->hooks->user, mp_now_ns() - t0_ns);
        s->step++;
        done += chunk;
    }
    return MP_OK;
}

int64_t mp_session_n_past(const mp_session *s)
{
    return s->n_past;
}

int64_t mp_session_n_ctx(const mp_session *s)
{
    return s->n_ctx;
}

int64_t mp_session_n_batch(const mp_session *s)
{
    return s->n_batch;
}

int mp_session_n_threads(const mp_session *s)
{
    return s->n_threads;
}

int mp_session_n_pinned(const mp_session *s)
{
    return s->pool ? mp_pool_n_pinned(s->pool) : 0;
}

void mp_session_reset(mp_session *s)
{
    /* the cache rows need no clearing: attention reads only rows [0, n_past) */
    s->n_past = 0;
    s->step = 0;
    s->n_prompt = -1;
}

void mp_session_restart_routes(mp_session *s)
{
    if (s->route_src && s->route_src->restart)
        s->route_src->restart(s->route_src->user);
}

void mp_session_begin_request(mp_session *s, int64_t request_id, const int32_t *prompt_tokens,
                              int64_t n_prompt_tokens)
{
    mp_session_reset(s);
    s->request_id = request_id;
    s->n_prompt = n_prompt_tokens;
    if (s->hooks && s->hooks->request_begin)
        s->hooks->request_begin(s->hooks->user, request_id, prompt_tokens, n_prompt_tokens);
}

void mp_session_end_request(mp_session *s, int64_t n_generated_tokens)
{
    if (s->hooks && s->hooks->request_end)
        s->hooks->request_end(s->hooks->user, n_generated_tokens);
}
