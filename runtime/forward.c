/* runtime/forward.c — the transformer forward pass over one chunk of rows.
 *
 * Reads top to bottom: embedding, then per layer
 *   RMSNorm → Q/K/V (+ biases) → q/k norm → RoPE → (K, V into the cache) → attention (a window, sinks)
 *   → wo (+ bias) → residual,
 *   RMSNorm → MoE block (one call; + the shared expert) → residual,
 * then the final norm and the output head for the rows whose logits are wanted.
 * Architectures differ only in the traits consulted below (q/k norm, RoPE style, Q/K/V and output
 * biases, a shared expert) and in attention.c (window, sinks); the MoE block's details (router and
 * expert biases, activation, renormalization, route replay, hooks) live in moe_cpu.c.
 *
 * Time: at decode, nearly all of it is in the weight streaming of mp_matmul and the MoE block;
 * attention grows with the context; everything else is a few microseconds per layer.
 */
#include <inttypes.h>
#include <math.h>
#include <string.h>

#include "kernels/ops.h"
#include "kernels/quant.h"
#include "runtime/matmul.h"
#include "runtime/state.h"

typedef struct row_job {
    mp_session *s;
    const mp_tensor *norm_w; /* (n_embd) f32 */
    const float *in;         /* (n, n_embd) */
    float *out;              /* (n, n_embd) */
} row_job;

static void rmsnorm_task(void *ctx, int64_t row, int thread)
{
    const row_job *j = ctx;
    const mp_hparams *hp = &j->s->m->hp;
    mp_rmsnorm(j->out + row * hp->n_embd, j->in + row * hp->n_embd, j->norm_w->data, hp->n_embd,
               hp->rms_eps);
}

static void rmsnorm_rows(mp_session *s, const mp_tensor *w, const float *in, float *out, int64_t n)
{
    row_job j = {s, w, in, out};
    mp_pool_run(s->pool, n, rmsnorm_task, &j);
}

typedef struct qk_job {
    mp_session *s;
    const mp_layer *L;
    float *k;   /* (n, n_head_kv * head_dim): the layer's cache rows at pos0 */
} qk_job;

/* q/k normalization and RoPE of one row, in place. */
static void qk_task(void *ctx, int64_t row, int thread)
{
    const qk_job *j = ctx;
    const mp_hparams *hp = &j->s->m->hp;
    const mp_arch_traits *tr = mp_arch_get(hp->arch);
    const int64_t hd = hp->head_dim, nq = hp->n_head * hd, nk = hp->n_head_kv * hd;
    float *q = j->s->q + row * nq;
    float *k = j->k + row * nk;
    if (tr->qk_norm == MP_QK_NORM_PER_HEAD) {
        for (int64_t h = 0; h < hp->n_head; h++)
            mp_rmsnorm(q + h * hd, q + h * hd, j->L->q_norm.data, hd, hp->rms_eps);
        for (int64_t h = 0; h < hp->n_head_kv; h++)
            mp_rmsnorm(k + h * hd, k + h * hd, j->L->k_norm.data, hd, hp->rms_eps);
    } else if (tr->qk_norm == MP_QK_NORM_FULL) {
        mp_rmsnorm(q, q, j->L->q_norm.data, nq, hp->rms_eps);
        mp_rmsnorm(k, k, j->L->k_norm.data, nk, hp->rms_eps);
    }
    const float *cs = j->s->rope_cs + row * hp->rot_dim;
    void (*rope)(float *, int64_t, const float *) =
        tr->rope == MP_ROPE_NEOX ? mp_rope_neox_cs : mp_rope_norm_cs;
    for (int64_t h = 0; h < hp->n_head; h++)
        rope(q + h * hd, hp->rot_dim, cs);
    for (int64_t h = 0; h < hp->n_head_kv; h++)
        rope(k + h * hd, hp->rot_dim, cs);
}

static void add_rows(float *x, const float *y, int64_t n)
{
    for (int64_t i = 0; i < n; i++)
        x[i] += y[i];
}

/* rows (n, width) += bias (width) */
static void add_bias(float *rows, const mp_tensor *bias, int64_t n, int64_t width)
{
    const float *b = bias->data;
    for (int64_t r = 0; r < n; r++)
        add_rows(rows + r * width, b, width);
}

typedef struct shexp_job {
    const float *gate, *out; /* (n) logits, (n, n_embd) */
    float *proj;             /* (n, n_embd) */
    int64_t D;
} shexp_job;

static void shexp_add_task(void *ctx, int64_t row, int thread)
{
    const shexp_job *j = ctx;
    const float s = 1.0f / (1.0f + expf(-j->gate[row]));
    float *p = j->proj + row * j->D;
    const float *o = j->out + row * j->D;
    for (int64_t d = 0; d < j->D; d++)
        p[d] += s * o[d];
}

typedef struct swiglu_job {
    float *g;
    const float *u;
    int64_t F;
} swiglu_job;

static void swiglu_task(void *ctx, int64_t row, int thread)
{
    const swiglu_job *j = ctx;
    mp_swiglu(j->g + row * j->F, j->g + row * j->F, j->u + row * j->F, j->F);
}

/* The shared expert of layer L on the normed rows s->xb, added into s->proj (the routed experts'
 * sum): proj += sigmoid(xb · gate_inp_shexp) * down_shexp(silu(gate_shexp xb) * up_shexp xb). */
static void shared_expert(mp_session *s, const mp_layer *L, int64_t n)
{
    const int64_t D = s->m->hp.n_embd, F = s->m->hp.n_ff_shexp;
    float *g = s->shexp, *u = g + s->n_batch * F, *out = u + s->n_batch * F, *gate = out + s->n_batch * D;
    mp_matmul(s->pool, &L->gate_shexp, s->xb, n, g, s->qbuf);
    mp_matmul(s->pool, &L->up_shexp, s->xb, n, u, s->qbuf);
    swiglu_job sj = {g, u, F};
    mp_pool_run(s->pool, n, swiglu_task, &sj);
    mp_matmul(s->pool, &L->down_shexp, g, n, out, s->qbuf);
    mp_matmul(s->pool, &L->gate_inp_shexp, s->xb, n, gate, s->qbuf);
    shexp_job j = {gate, out, s->proj, D};
    mp_pool_run(s->pool, n, shexp_add_task, &j);
}

mp_status mp_forward(mp_session *s, const int32_t *tokens, int64_t n, bool all_logits,
                     float *logits, mp_error *err)
{
    const mp_model *m = s->m;
    const mp_hparams *hp = &m->hp;
    const int64_t D = hp->n_embd, pos0 = s->n_past;

    /* embedding: dequantize each token's row */
    const mp_type_ops *embd_ops = mp_type_ops_get(m->tok_embd.type);
    for (int64_t i = 0; i < n; i++)
        embd_ops->dequantize_row((const char *)m->tok_embd.data + (size_t)tokens[i] * m->tok_embd.row_bytes,
                                 s->x + i * D, D);
    for (int64_t i = 0; i < n; i++)
        mp_rope_cache(s->rope_cs + i * hp->rot_dim, hp->rot_dim, pos0 + i, s->rope_theta, s->rope_mscale);

    const mp_hooks *hk = s->hooks;
    for (int64_t il = 0; il < hp->n_layer; il++) {
        const mp_layer *L = &m->layers[il];
        if (hk && hk->layer_begin)
            hk->layer_begin(hk->user, il);

        /* attention block */
        rmsnorm_rows(s, &L->attn_norm, s->x, s->xb, n);
        float *k = mp_kv_row(s->k_cache, s, il, pos0); /* (n, n_head_kv * head_dim) */
        float *v = mp_kv_row(s->v_cache, s, il, pos0);
        mp_matmul(s->pool, &L->wq, s->xb, n, s->q, s->qbuf);
        mp_matmul(s->pool, &L->wk, s->xb, n, k, s->qbuf);
        mp_matmul(s->pool, &L->wv, s->xb, n, v, s->qbuf);
        if (L->bq.data) {
            const int64_t Q = hp->n_head * hp->head_dim, KV = hp->n_head_kv * hp->head_dim;
            add_bias(s->q, &L->bq, n, Q);
            add_bias(k, &L->bk, n, KV);
            add_bias(v, &L->bv, n, KV);
        }
        qk_job qj = {s, L, k};
        mp_pool_run(s->pool, n, qk_task, &qj);
        mp_attention(s, il, n, pos0);
        mp_matmul(s->pool, &L->wo, s->att, n, s->proj, s->qbuf);
        if (L->bo.data)
            add_bias(s->proj, &L->bo, n, D);
        add_rows(s->x, s->proj, n * D);

        /* MoE block */
        rmsnorm_rows(s, &L->ffn_norm, s->x, s->xb, n);
        mp_status st = mp_moe_forward_cpu(m, il, s->xb, s->proj, n, s->pool, s->moe, s->hooks,
                                          s->route_src, err);
        if (st) {
            if (hk && hk->layer_end)
                hk->layer_end(hk->user, il);
            return st; /* the cache rows of this chunk are not counted: n_past is unchanged */
        }
        if (L->gate_shexp.data)
            shared_expert(s, L, n);
        add_rows(s->x, s->proj, n * D);
        if (hk && hk->layer_end)
            hk->layer_end(hk->user, il);
    }
    s->n_past += n;

    if (logits) {
        /* only the rows whose logits are wanted go through the head (152k rows for Qwen3) */
        const int64_t first = all_logits ? 0 : n - 1, n_out = n - first;
        rmsnorm_rows(s, &m->output_norm, s->x + first * D, s->xb, n_out);
        mp_matmul(s->pool, &m->output, s->xb, n_out, logits, s->qbuf);
    }
    return MP_OK;
}
