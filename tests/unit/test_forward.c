/* tests/unit/test_forward.c — the forward pass, the MoE block, the sampler and the thread pool.
 *
 * Models are assembled in memory from random F32 arrays (seeded from the clock; the seed is in
 * every failure message) and checked against an independent float64 reference forward written
 * here with straight loops: it shares no code with the runtime (its own RMSNorm, RoPE, softmax,
 * top-k, SwiGLU and attention). Reference and runtime must agree on the logits of every row for
 * each architecture's traits; prefill must agree with token-by-token decode (the KV cache),
 * chunked prefill with one-shot prefill, and the hooks must see exactly the routing used.
 * Also: quantized weights (Q8_0, Q4_0, Q4_K, Q6_K, F16) against the reference on the dequantized
 * weights, GGUF loading (round trip and one-line errors, files written with mp_gguf_writer),
 * `moeplan run` end to end and its flag checks, the sampler, the thread pool, RoPE tables.
 */
#include <criterion/criterion.h>
#include <sys/stat.h>
#include <sched.h>
#include <math.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "kernels/quant.h"
#ifndef M_PI
#define M_PI 3.14159265358979323846
#endif
#include "runtime/model.h"
#include "runtime/sampler.h"
#include "runtime/session.h"
#include "runtime/cpus.h"
#include "runtime/threadpool.h"

/* ---------------------------------------------------------------- random in-memory models */

static uint64_t rng_state;

static double rnd(void) /* uniform in [-1, 1) */
{
    rng_state = rng_state * 6364136223846793005ull + 1442695040888963407ull;
    return (double)(rng_state >> 11) / 4503599627370496.0 - 1.0;
}

static uint64_t time_seed(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (uint64_t)ts.tv_sec * 1000003u ^ (uint64_t)ts.tv_nsec;
}

typedef struct test_model {
    mp_model m;
    mp_layer layers[4];
    float *bufs[64];
    int n_bufs;
} test_model;

static void f32_tensor(test_model *tm, mp_tensor *t, int64_t ne0, int64_t ne1, int64_t ne2,
                       double scale, double offset)
{
    const int64_t n = ne0 * ne1 * ne2;
    float *d = malloc((size_t)n * sizeof *d);
    cr_assert(d);
    for (int64_t i = 0; i < n; i++)
        d[i] = (float)(offset + scale * rnd());
    tm->bufs[tm->n_bufs++] = d;
    t->type = MP_TYPE_F32;
    t->ne[0] = ne0;
    t->ne[1] = ne1;
    t->ne[2] = ne2;
    t->ne[3] = 1;
    t->data = d;
    t->row_bytes = (size_t)ne0 * sizeof(float);
    t->nbytes = (size_t)n * sizeof(float);
}

/* Small shapes that still exercise GQA (n_head != n_head_kv), head_dim != n_embd / n_head,
 * partial rotary dimensions, and top-k > 1 of several experts. */
static mp_hparams small_hparams(mp_arch arch)
{
    mp_hparams hp = {0};
    hp.arch = arch;
    hp.n_layer = 2;
    hp.n_embd = 24;
    hp.n_head = 4;
    hp.n_head_kv = arch == MP_ARCH_OLMOE ? 4 : 2;
    hp.head_dim = arch == MP_ARCH_QWEN3MOE ? 10 : 6;
    hp.rot_dim = arch == MP_ARCH_MIXTRAL ? 4 : hp.head_dim; /* partial rotary on one of them */
    hp.n_expert = 8;
    hp.n_expert_used = 3;
    hp.n_ff_exp = 20;
    hp.n_vocab = 40;
    hp.n_ctx_train = 64;
    hp.rope_freq_base = arch == MP_ARCH_QWEN3MOE ? 1e6f : 10000.0f;
    hp.rms_eps = 1e-6f;
    hp.expert_weights_norm = mp_arch_get(arch)->default_weights_norm;
    hp.n_ff_shexp = mp_arch_get(arch)->shared_expert ? 28 : 0;
    if (arch == MP_ARCH_GPTOSS) { /* a window shorter than the tests' prompts, YaRN over it */
        hp.n_swa = 3;
        hp.rope_freq_base = 150000.0f;
        hp.rope_yarn_factor = 32.0f;
        hp.rope_yarn_orig_ctx = 512; /* with head_dim 6: one pair kept, one blended, one divided */
        hp.rope_yarn_beta_fast = 32.0f;
        hp.rope_yarn_beta_slow = 1.0f;
    }
    return hp;
}

static test_model *build_model(const mp_hparams *hp, uint64_t seed)
{
    rng_state = seed;
    test_model *tm = calloc(1, sizeof *tm);
    cr_assert(tm);
    cr_assert(hp->n_layer <= 4);
    tm->m.hp = *hp;
    tm->m.layers = tm->layers;
    const int64_t E = hp->n_embd, Q = hp->n_head * hp->head_dim, KV = hp->n_head_kv * hp->head_dim;
    const mp_qk_norm qk = mp_arch_get(hp->arch)->qk_norm;
    f32_tensor(tm, &tm->m.tok_embd, E, hp->n_vocab, 1, 1.0, 0.0);
    f32_tensor(tm, &tm->m.output_norm, E, 1, 1, 0.2, 1.0);
    f32_tensor(tm, &tm->m.output, E, hp->n_vocab, 1, 1.0 / sqrt((double)E), 0.0);
    for (int64_t il = 0; il < hp->n_layer; il++) {
        mp_layer *L = &tm->layers[il];
        f32_tensor(tm, &L->attn_norm, E, 1, 1, 0.2, 1.0);
        f32_tensor(tm, &L->wq, E, Q, 1, 1.5 / sqrt((double)E), 0.0);
        f32_tensor(tm, &L->wk, E, KV, 1, 1.5 / sqrt((double)E), 0.0);
        f32_tensor(tm, &L->wv, E, KV, 1, 1.0 / sqrt((double)E), 0.0);
        f32_tensor(tm, &L->wo, Q, E, 1, 1.0 / sqrt((double)Q), 0.0);
        if (qk == MP_QK_NORM_PER_HEAD) {
            f32_tensor(tm, &L->q_norm, hp->head_dim, 1, 1, 0.2, 1.0);
            f32_tensor(tm, &L->k_norm, hp->head_dim, 1, 1, 0.2, 1.0);
        } else if (qk == MP_QK_NORM_FULL) {
            f32_tensor(tm, &L->q_norm, Q, 1, 1, 0.2, 1.0);
            f32_tensor(tm, &L->k_norm, KV, 1, 1, 0.2, 1.0);
        }
        f32_tensor(tm, &L->ffn_norm, E, 1, 1, 0.2, 1.0);
        f32_tensor(tm, &L->gate_inp, E, hp->n_expert, 1, 2.0 / sqrt((double)E), 0.0);
        f32_tensor(tm, &L->gate_exps, E, hp->n_ff_exp, hp->n_expert, 1.5 / sqrt((double)E), 0.0);
        f32_tensor(tm, &L->up_exps, E, hp->n_ff_exp, hp->n_expert, 1.5 / sqrt((double)E), 0.0);
        f32_tensor(tm, &L->down_exps, hp->n_ff_exp, E, hp->n_expert, 1.0 / sqrt((double)hp->n_ff_exp), 0.0);
        if (mp_arch_get(hp->arch)->qkv_bias) {
            f32_tensor(tm, &L->bq, Q, 1, 1, 0.5, 0.0);
            f32_tensor(tm, &L->bk, KV, 1, 1, 0.5, 0.0);
            f32_tensor(tm, &L->bv, KV, 1, 1, 0.5, 0.0);
        }
        if (mp_arch_get(hp->arch)->attn_out_bias)
            f32_tensor(tm, &L->bo, E, 1, 1, 0.5, 0.0);
        if (mp_arch_get(hp->arch)->attn_sinks)
            f32_tensor(tm, &L->sinks, hp->n_head, 1, 1, 2.0, 0.0);
        if (mp_arch_get(hp->arch)->moe_bias) {
            f32_tensor(tm, &L->gate_inp_b, hp->n_expert, 1, 1, 1.0, 0.0);
            f32_tensor(tm, &L->gate_exps_b, hp->n_ff_exp, hp->n_expert, 1, 0.5, 0.0);
            f32_tensor(tm, &L->up_exps_b, hp->n_ff_exp, hp->n_expert, 1, 0.5, 0.0);
            f32_tensor(tm, &L->down_exps_b, E, hp->n_expert, 1, 0.5, 0.0);
        }
        if (hp->n_ff_shexp) {
            const int64_t F = hp->n_ff_shexp;
            f32_tensor(tm, &L->gate_inp_shexp, E, 1, 1, 2.0 / sqrt((double)E), 0.0);
            f32_tensor(tm, &L->gate_shexp, E, F, 1, 1.5 / sqrt((double)E), 0.0);
            f32_tensor(tm, &L->up_shexp, E, F, 1, 1.5 / sqrt((double)E), 0.0);
            f32_tensor(tm, &L->down_shexp, F, E, 1, 1.0 / sqrt((double)F), 0.0);
        }
    }
    mp_error err = {0};
    cr_assert_eq(mp_model_validate(&tm->m, &err), MP_OK, "validate: %s", err.msg);
    return tm;
}

static void free_model(test_model *tm)
{
    for (int i = 0; i < tm->n_bufs; i++)
        free(tm->bufs[i]);
    free(tm);
}

/* ---------------------------------------------------------------- float64 reference */

typedef struct ref_routing {
    int ids[64][4][8];     /* [row][layer][slot] */
    double w[64][4][8];
    bool near_tie;         /* the k-th and (k+1)-th router probabilities were within 1e-5 */
} ref_routing;

static double tv(const mp_tensor *t, int64_t i) /* element i of an F32 tensor */
{
    return (double)((const float *)t->data)[i];
}

/* y[r] = Σ_c W[r][c] x[c] over the slice of W starting at element `base` */
static void ref_matvec(const mp_tensor *t, int64_t base, int64_t n_in, int64_t n_out,
                       const double *x, double *y)
{
    for (int64_t r = 0; r < n_out; r++) {
        double s = 0;
        for (int64_t c = 0; c < n_in; c++)
            s += tv(t, base + r * n_in + c) * x[c];
        y[r] = s;
    }
}

static void ref_rmsnorm(double *v, int64_t n, const mp_tensor *w, int64_t w_off, double eps)
{
    double ss = 0;
    for (int64_t i = 0; i < n; i++)
        ss += v[i] * v[i];
    const double scale = 1.0 / sqrt(ss / (double)n + eps);
    for (int64_t i = 0; i < n; i++)
        v[i] = v[i] * scale * tv(w, w_off + i);
}

/* RoPE; with YaRN as the published code computes it (no rounding of the range, which these
 * hyperparameters keep inside [0, rot_dim / 2)): pair i turns r = L f_i / 2 pi times over the
 * original context L; r > beta_fast keeps f_i, r < beta_slow divides it by the factor s, and
 * between the two the blend is linear in ln r (the code's ramp over the pair index); cos and sin
 * scale by 0.1 ln s + 1 */
static void ref_rope(double *h, const mp_hparams *hp, int64_t pos)
{
    const bool neox = mp_arch_get(hp->arch)->rope == MP_ROPE_NEOX;
    const double s = hp->rope_yarn_factor;
    for (int64_t i = 0; i < hp->rot_dim / 2; i++) {
        double f = pow((double)hp->rope_freq_base, -2.0 * (double)i / (double)hp->rot_dim), scale = 1.0;
        if (s > 1.0) {
            const double r = (double)hp->rope_yarn_orig_ctx * f / (2.0 * M_PI);
            const double a = hp->rope_yarn_beta_slow, b = hp->rope_yarn_beta_fast;
            const double ramp = r > b ? 0.0 : r < a ? 1.0 : log(b / r) / log(b / a);
            f = ramp * f / s + (1.0 - ramp) * f;
            scale = 0.1 * log(s) + 1.0;
        }
        const double theta = (double)pos * f;
        const int64_t a = neox ? i : 2 * i, b = neox ? i + hp->rot_dim / 2 : 2 * i + 1;
        const double x0 = h[a], x1 = h[b];
        h[a] = scale * (x0 * cos(theta) - x1 * sin(theta));
        h[b] = scale * (x0 * sin(theta) + x1 * cos(theta));
    }
}

/* Full causal forward over n tokens from position 0; logits (n, n_vocab). forced: if non-NULL,
 * routing [row][layer] is taken from it instead of the router. */
static void ref_forward(const mp_model *m, const int32_t *tok, int64_t n, double *logits,
                        ref_routing *rr, const ref_routing *forced)
{
    const mp_hparams *hp = &m->hp;
    const int64_t E = hp->n_embd, hd = hp->head_dim, NQ = hp->n_head * hd, NKV = hp->n_head_kv * hd;
    const int64_t F = hp->n_ff_exp, NE = hp->n_expert, K = hp->n_expert_used;
    const mp_qk_norm qk = mp_arch_get(hp->arch)->qk_norm;
    cr_assert(n <= 64 && hp->n_layer <= 4 && K <= 8);
    double *x = calloc((size_t)(n * E), sizeof *x);
    double *kc = calloc((size_t)(n * NKV), sizeof *kc), *vc = calloc((size_t)(n * NKV), sizeof *vc);
    double *xn = malloc((size_t)E * sizeof *xn), *q = malloc((size_t)NQ * sizeof *q);
    double *att = malloc((size_t)NQ * sizeof *att), *o = malloc((size_t)E * sizeof *o);
    double *sc = malloc((size_t)n * sizeof *sc), *pr = malloc((size_t)NE * sizeof *pr);
    double *g = malloc((size_t)F * sizeof *g), *u = malloc((size_t)F * sizeof *u);
    double *y = malloc((size_t)E * sizeof *y), *moe = malloc((size_t)E * sizeof *moe);
    rr->near_tie = false;
    for (int64_t t = 0; t < n; t++)
        for (int64_t c = 0; c < E; c++)
            x[t * E + c] = tv(&m->tok_embd, tok[t] * E + c);
    for (int64_t il = 0; il < hp->n_layer; il++) {
        const mp_layer *L = &m->layers[il];
        /* keys and values of every position first (causality is in the attention loop) */
        for (int64_t t = 0; t < n; t++) {
            memcpy(xn, x + t * E, (size_t)E * sizeof *xn);
            ref_rmsnorm(xn, E, &L->attn_norm, 0, hp->rms_eps);
            ref_matvec(&L->wk, 0, E, NKV, xn, kc + t * NKV);
            ref_matvec(&L->wv, 0, E, NKV, xn, vc + t * NKV);
            if (L->bk.data)
                for (int64_t i = 0; i < NKV; i++) {
                    kc[t * NKV + i] += tv(&L->bk, i);
                    vc[t * NKV + i] += tv(&L->bv, i);
                }
            if (qk == MP_QK_NORM_PER_HEAD)
                for (int64_t h = 0; h < hp->n_head_kv; h++)
                    ref_rmsnorm(kc + t * NKV + h * hd, hd, &L->k_norm, 0, hp->rms_eps);
            else if (qk == MP_QK_NORM_FULL)
                ref_rmsnorm(kc + t * NKV, NKV, &L->k_norm, 0, hp->rms_eps);
            for (int64_t h = 0; h < hp->n_head_kv; h++)
                ref_rope(kc + t * NKV + h * hd, hp, t);
        }
        for (int64_t t = 0; t < n; t++) {
            memcpy(xn, x + t * E, (size_t)E * sizeof *xn);
            ref_rmsnorm(xn, E, &L->attn_norm, 0, hp->rms_eps);
            ref_matvec(&L->wq, 0, E, NQ, xn, q);
            if (L->bq.data)
                for (int64_t i = 0; i < NQ; i++)
                    q[i] += tv(&L->bq, i);
            if (qk == MP_QK_NORM_PER_HEAD)
                for (int64_t h = 0; h < hp->n_head; h++)
                    ref_rmsnorm(q + h * hd, hd, &L->q_norm, 0, hp->rms_eps);
            else if (qk == MP_QK_NORM_FULL)
                ref_rmsnorm(q, NQ, &L->q_norm, 0, hp->rms_eps);
            for (int64_t h = 0; h < hp->n_head; h++)
                ref_rope(q + h * hd, hp, t);
            /* keys s0..t: a sliding-window layer sees the last n_swa positions */
            const bool slides = mp_arch_get(hp->arch)->swa_period > 0 && il % 2 == 0;
            const int64_t s0 = slides && t >= hp->n_swa ? t - hp->n_swa + 1 : 0;
            for (int64_t h = 0; h < hp->n_head; h++) {
                const int64_t kvh = h * hp->n_head_kv / hp->n_head;
                double mx = -INFINITY, sum = 0;
                for (int64_t s = s0; s <= t; s++) {
                    double d = 0;
                    for (int64_t i = 0; i < hd; i++)
                        d += q[h * hd + i] * kc[s * NKV + kvh * hd + i];
                    sc[s] = d / sqrt((double)hd);
                    if (sc[s] > mx)
                        mx = sc[s];
                }
                const double sink = L->sinks.data ? tv(&L->sinks, h) : -INFINITY;
                mx = sink > mx ? sink : mx;
                for (int64_t s = s0; s <= t; s++)
                    sum += (sc[s] = exp(sc[s] - mx));
                sum += exp(sink - mx); /* the sink's share of the softmax is dropped */
                for (int64_t i = 0; i < hd; i++) {
                    double a = 0;
                    for (int64_t s = s0; s <= t; s++)
                        a += sc[s] / sum * vc[s * NKV + kvh * hd + i];
                    att[h * hd + i] = a;
                }
            }
            ref_matvec(&L->wo, 0, NQ, E, att, o);
            if (L->bo.data)
                for (int64_t c = 0; c < E; c++)
                    o[c] += tv(&L->bo, c);
            for (int64_t c = 0; c < E; c++)
                x[t * E + c] += o[c];
            /* MoE */
            memcpy(xn, x + t * E, (size_t)E * sizeof *xn);
            ref_rmsnorm(xn, E, &L->ffn_norm, 0, hp->rms_eps);
            int *ids = rr->ids[t][il];
            double *w = rr->w[t][il];
            if (forced) {
                memcpy(ids, forced->ids[t][il], sizeof rr->ids[t][il]);
                memcpy(w, forced->w[t][il], sizeof rr->w[t][il]);
            } else {
                ref_matvec(&L->gate_inp, 0, E, NE, xn, pr);
                if (L->gate_inp_b.data)
                    for (int64_t e = 0; e < NE; e++)
                        pr[e] += tv(&L->gate_inp_b, e);
                double mx = -INFINITY, sum = 0;
                for (int64_t e = 0; e < NE; e++)
                    mx = pr[e] > mx ? pr[e] : mx;
                for (int64_t e = 0; e < NE; e++)
                    sum += (pr[e] = exp(pr[e] - mx));
                for (int64_t e = 0; e < NE; e++)
                    pr[e] /= sum;
                bool taken[256] = {false};
                for (int64_t k = 0; k < K; k++) { /* selection: first maximum wins ties */
                    int best = -1;
                    for (int64_t e = 0; e < NE; e++)
                        if (!taken[e] && (best < 0 || pr[e] > pr[best]))
                            best = (int)e;
                    taken[best] = true;
                    ids[k] = best;
                    w[k] = pr[best];
                }
                double next = -1;
                for (int64_t e = 0; e < NE; e++)
                    if (!taken[e] && pr[e] > next)
                        next = pr[e];
                if (w[K - 1] - next < 1e-5)
                    rr->near_tie = true;
                if (hp->expert_weights_norm) {
                    double ws = 0;
                    for (int64_t k = 0; k < K; k++)
                        ws += w[k];
                    for (int64_t k = 0; k < K; k++)
                        w[k] /= ws;
                }
            }
            for (int64_t c = 0; c < E; c++)
                moe[c] = 0;
            for (int64_t k = 0; k < K; k++) {
                const int64_t e = ids[k];
                ref_matvec(&L->gate_exps, e * F * E, E, F, xn, g);
                ref_matvec(&L->up_exps, e * F * E, E, F, xn, u);
                if (L->gate_exps_b.data)
                    for (int64_t i = 0; i < F; i++) {
                        g[i] += tv(&L->gate_exps_b, e * F + i);
                        u[i] += tv(&L->up_exps_b, e * F + i);
                    }
                if (mp_arch_get(hp->arch)->act == MP_ACT_SWIGLU_OAI) /* gpt-oss: alpha 1.702, limit 7 */
                    for (int64_t i = 0; i < F; i++) {
                        const double gc = g[i] < 7.0 ? g[i] : 7.0, uc = u[i] < -7.0 ? -7.0 : u[i] > 7.0 ? 7.0 : u[i];
                        g[i] = gc / (1.0 + exp(-1.702 * gc)) * (uc + 1.0);
                    }
                else
                    for (int64_t i = 0; i < F; i++)
                        g[i] = g[i] / (1.0 + exp(-g[i])) * u[i];
                ref_matvec(&L->down_exps, e * E * F, F, E, g, y);
                if (L->down_exps_b.data)
                    for (int64_t c = 0; c < E; c++)
                        y[c] += tv(&L->down_exps_b, e * E + c);
                for (int64_t c = 0; c < E; c++)
                    moe[c] += w[k] * y[c];
            }
            if (hp->n_ff_shexp) { /* the shared expert under its sigmoid gate */
                const int64_t FS = hp->n_ff_shexp;
                double *gs = malloc((size_t)FS * sizeof *gs), *us = malloc((size_t)FS * sizeof *us), gl;
                ref_matvec(&L->gate_shexp, 0, E, FS, xn, gs);
                ref_matvec(&L->up_shexp, 0, E, FS, xn, us);
                for (int64_t i = 0; i < FS; i++)
                    gs[i] = gs[i] / (1.0 + exp(-gs[i])) * us[i];
                ref_matvec(&L->down_shexp, 0, FS, E, gs, y);
                ref_matvec(&L->gate_inp_shexp, 0, E, 1, xn, &gl);
                for (int64_t c = 0; c < E; c++)
                    moe[c] += y[c] / (1.0 + exp(-gl));
                free(gs), free(us);
            }
            for (int64_t c = 0; c < E; c++)
                x[t * E + c] += moe[c];
        }
    }
    for (int64_t t = 0; t < n; t++) {
        memcpy(xn, x + t * E, (size_t)E * sizeof *xn);
        ref_rmsnorm(xn, E, &m->output_norm, 0, hp->rms_eps);
        ref_matvec(&m->output, 0, E, hp->n_vocab, xn, logits + t * hp->n_vocab);
    }
    free(x); free(kc); free(vc); free(xn); free(q); free(att); free(o); free(sc); free(pr);
    free(g); free(u); free(y); free(moe);
}

/* ---------------------------------------------------------------- helpers */

static mp_session *new_session(const mp_model *m, int threads, int64_t n_batch, int64_t n_ctx,
                               const mp_hooks *hooks, const mp_route_source *rs)
{
    mp_session_params p = {.n_ctx = n_ctx, .n_threads = threads, .n_batch = n_batch,
                           .hooks = hooks, .route_src = rs};
    mp_session *s = NULL;
    mp_error err = {0};
    cr_assert_eq(mp_session_new(m, &p, &s, &err), MP_OK, "session: %s", err.msg);
    return s;
}

static void random_tokens(int32_t *tok, int64_t n, int64_t n_vocab)
{
    for (int64_t i = 0; i < n; i++)
        tok[i] = (int32_t)((rnd() + 1.0) * 0.5 * (double)n_vocab) % (int32_t)n_vocab;
}

static bool close_to(double a, double b, double tol)
{
    return fabs(a - b) <= tol * (1.0 + fabs(b));
}

/* A model whose reference routing has no near tie for these tokens (a near tie could be broken
 * differently by float32 and float64, which is not a defect). */
static test_model *model_without_ties(const mp_hparams *hp, uint64_t *seed, int32_t *tok, int64_t n,
                                      double *ref_logits, ref_routing *rr)
{
    for (int attempt = 0; attempt < 20; attempt++) {
        test_model *tm = build_model(hp, *seed);
        random_tokens(tok, n, hp->n_vocab);
        ref_forward(&tm->m, tok, n, ref_logits, rr, NULL);
        if (!rr->near_tie)
            return tm;
        free_model(tm);
        *seed += 7919;
    }
    cr_assert_fail("no tie-free model in 20 seeds from %llu", (unsigned long long)*seed);
    return NULL;
}

/* ---------------------------------------------------------------- forward vs reference */

static void check_against_reference(mp_arch arch, bool renorm_flip)
{
    mp_hparams hp = small_hparams(arch);
    if (renorm_flip)
        hp.expert_weights_norm = !hp.expert_weights_norm;
    uint64_t seed = time_seed();
    enum { N = 9 };
    int32_t tok[N];
    double *ref = malloc(N * (size_t)hp.n_vocab * sizeof *ref);
    static ref_routing rr;
    test_model *tm = model_without_ties(&hp, &seed, tok, N, ref, &rr);
    float *got = malloc(N * (size_t)hp.n_vocab * sizeof *got);
    mp_session *s = new_session(&tm->m, 3, 0, 32, NULL, NULL);
    mp_error err = {0};
    cr_assert_eq(mp_session_eval(s, tok, N, true, got, &err), MP_OK, "%s", err.msg);
    cr_assert_eq(mp_session_n_past(s), N);
    for (int64_t i = 0; i < N * hp.n_vocab; i++)
        cr_assert(close_to(got[i], ref[i], 2e-4),
                  "%s (renorm %d) seed %llu: logit %lld (row %lld): runtime %.7g, reference %.7g",
                  mp_arch_get(arch)->name, hp.expert_weights_norm, (unsigned long long)seed,
                  (long long)i, (long long)(i / hp.n_vocab), got[i], ref[i]);
    mp_session_free(s);
    free_model(tm);
    free(ref);
    free(got);
}

Test(forward, qwen3moe_matches_reference) { check_against_reference(MP_ARCH_QWEN3MOE, false); }
Test(forward, olmoe_matches_reference) { check_against_reference(MP_ARCH_OLMOE, false); }
Test(forward, mixtral_matches_reference) { check_against_reference(MP_ARCH_MIXTRAL, false); }
Test(forward, qwen3moe_without_renorm_matches_reference) { check_against_reference(MP_ARCH_QWEN3MOE, true); }
Test(forward, olmoe_with_renorm_matches_reference) { check_against_reference(MP_ARCH_OLMOE, true); }
/* Q/K/V biases and the shared expert under its gate */
Test(forward, qwen2moe_matches_reference) { check_against_reference(MP_ARCH_QWEN2MOE, false); }
Test(forward, gptoss_matches_reference) { check_against_reference(MP_ARCH_GPTOSS, false); }

/* The reference must itself be able to fail: a different architecture's traits give different
 * logits on the same weights (guards against a comparison that cannot fail). */
Test(forward, traits_change_the_result)
{
    mp_hparams hp = small_hparams(MP_ARCH_QWEN3MOE);
    uint64_t seed = time_seed();
    enum { N = 5 };
    int32_t tok[N];
    double *ref = malloc(N * (size_t)hp.n_vocab * sizeof *ref);
    static ref_routing rr;
    test_model *tm = model_without_ties(&hp, &seed, tok, N, ref, &rr);
    float *got = malloc(N * (size_t)hp.n_vocab * sizeof *got);
    tm->m.hp.expert_weights_norm = false; /* runtime without renormalization */
    mp_session *s = new_session(&tm->m, 2, 0, 16, NULL, NULL);
    mp_error err = {0};
    cr_assert_eq(mp_session_eval(s, tok, N, true, got, &err), MP_OK, "%s", err.msg);
    double max_diff = 0;
    for (int64_t i = 0; i < N * hp.n_vocab; i++)
        max_diff = fmax(max_diff, fabs(got[i] - ref[i]));
    cr_assert_gt(max_diff, 1e-3, "seed %llu: renormalization made no difference", (unsigned long long)seed);
    mp_session_free(s);
    free_model(tm);
    free(ref);
    free(got);
}

/* ---------------------------------------------------------------- KV cache and chunking */

static void prefill_vs_decode(mp_arch arch)
{
    mp_hparams hp = small_hparams(arch);
    uint64_t seed = time_seed();
    enum { N = 12 };
    int32_t tok[N];
    double *ref = malloc(N * (size_t)hp.n_vocab * sizeof *ref);
    static ref_routing rr;
    test_model *tm = model_without_ties(&hp, &seed, tok, N, ref, &rr);
    const int64_t V = hp.n_vocab;
    float *all = malloc(N * (size_t)V * sizeof *all), *one = malloc((size_t)V * sizeof *one);
    float *chunked = malloc(N * (size_t)V * sizeof *chunked);
    mp_error err = {0};

    mp_session *s = new_session(&tm->m, 4, 0, 32, NULL, NULL);
    cr_assert_eq(mp_session_eval(s, tok, N, true, all, &err), MP_OK, "%s", err.msg);
    mp_session_reset(s);
    cr_assert_eq(mp_session_n_past(s), 0);
    for (int64_t i = 0; i < N; i++) {
        cr_assert_eq(mp_session_eval(s, tok + i, 1, false, one, &err), MP_OK, "%s", err.msg);
        for (int64_t v = 0; v < V; v++)
            cr_assert(close_to(one[v], all[i * V + v], 1e-5),
                      "%s seed %llu: decode row %lld logit %lld: %.7g vs prefill %.7g",
                      mp_arch_get(arch)->name, (unsigned long long)seed, (long long)i,
                      (long long)v, one[v], all[i * V + v]);
    }
    mp_session_free(s);

    /* n_batch 5: chunks of 5, 5, 2 rows, one thread (a different task split too) */
    s = new_session(&tm->m, 1, 5, 32, NULL, NULL);
    cr_assert_eq(mp_session_eval(s, tok, N, true, chunked, &err), MP_OK, "%s", err.msg);
    for (int64_t i = 0; i < N * V; i++)
        cr_assert(close_to(chunked[i], all[i], 1e-5), "%s seed %llu: chunked logit %lld: %.7g vs %.7g",
                  mp_arch_get(arch)->name, (unsigned long long)seed, (long long)i, chunked[i], all[i]);
    /* last-row-only logits of a chunked eval equal the last row of all logits */
    mp_session_reset(s);
    cr_assert_eq(mp_session_eval(s, tok, N, false, one, &err), MP_OK, "%s", err.msg);
    for (int64_t v = 0; v < V; v++)
        cr_assert(close_to(one[v], all[(N - 1) * V + v], 1e-5));
    mp_session_free(s);
    free_model(tm);
    free(ref);
    free(all);
    free(one);
    free(chunked);
}

Test(forward, prefill_equals_decode_qwen3moe) { prefill_vs_decode(MP_ARCH_QWEN3MOE); }
Test(forward, prefill_equals_decode_olmoe) { prefill_vs_decode(MP_ARCH_OLMOE); }
Test(forward, prefill_equals_decode_mixtral) { prefill_vs_decode(MP_ARCH_MIXTRAL); }
Test(forward, prefill_equals_decode_qwen2moe) { prefill_vs_decode(MP_ARCH_QWEN2MOE); }
Test(forward, prefill_equals_decode_gptoss) { prefill_vs_decode(MP_ARCH_GPTOSS); }

Test(forward, context_limit_and_bad_tokens)
{
    mp_hparams hp = small_hparams(MP_ARCH_QWEN3MOE);
    test_model *tm = build_model(&hp, time_seed());
    mp_session *s = new_session(&tm->m, 2, 0, 8, NULL, NULL);
    int32_t tok[9] = {1, 2, 3, 4, 5, 6, 7, 8, 9};
    mp_error err = {0};
    cr_assert_eq(mp_session_eval(s, tok, 9, false, NULL, &err), MP_ERR_LIMIT);
    cr_assert(strstr(err.msg, "9 tokens") && strstr(err.msg, "8 tokens"), "%s", err.msg);
    cr_assert_eq(mp_session_eval(s, tok, 6, false, NULL, &err), MP_OK, "%s", err.msg);
    cr_assert_eq(mp_session_eval(s, tok, 3, false, NULL, &err), MP_ERR_LIMIT);
    cr_assert_eq(mp_session_n_past(s), 6);
    int32_t bad[2] = {3, (int32_t)hp.n_vocab};
    cr_assert_eq(mp_session_eval(s, bad, 2, false, NULL, &err), MP_ERR_ARG);
    cr_assert(strstr(err.msg, "token 1"), "%s", err.msg);
    bad[1] = -1;
    cr_assert_eq(mp_session_eval(s, bad, 2, false, NULL, &err), MP_ERR_ARG);
    cr_assert_eq(mp_session_eval(s, tok, 0, false, NULL, &err), MP_ERR_ARG);
    cr_assert_eq(mp_session_n_past(s), 6);
    mp_session_free(s);
    free_model(tm);
}

/* ---------------------------------------------------------------- hooks and routing */

typedef struct capture {
    int64_t n_routing_calls;
    int32_t ids[64][4][8];   /* [row][layer][slot] of the last step */
    float w[64][4][8];
    int64_t step_rows[16], step_pos[16], step_ends;
    mp_phase step_phase[16];
    int64_t n_steps, row_base;
    int64_t request_id_seen;
    int64_t n_timing_calls, top_k;
} capture;

static void cap_step_begin(void *user, int64_t request_id, int64_t step, mp_phase phase,
                           int64_t n_rows, int64_t pos)
{
    capture *c = user;
    cr_assert_eq(step, c->n_steps);
    c->request_id_seen = request_id;
    c->step_rows[c->n_steps] = n_rows;
    c->step_pos[c->n_steps] = pos;
    c->step_phase[c->n_steps] = phase;
    c->row_base = pos;
    c->n_steps++;
}

static void cap_step_end(void *user, int64_t duration_ns)
{
    capture *c = user;
    cr_assert_geq(duration_ns, 0);
    c->step_ends++;
}

static void cap_routing(void *user, int64_t layer, int64_t n_rows, int64_t top_k,
                        const int32_t *ids, const float *w)
{
    capture *c = user;
    c->n_routing_calls++;
    for (int64_t r = 0; r < n_rows; r++)
        for (int64_t k = 0; k < top_k; k++) {
            c->ids[c->row_base + r][layer][k] = ids[r * top_k + k];
            c->w[c->row_base + r][layer][k] = w[r * top_k + k];
        }
    c->top_k = top_k;
}

/* The CPU forward serves every route on the CPU and says so for each (mp_moe_timing.served). */
static void cap_timing(void *user, int64_t layer, const mp_moe_timing *t)
{
    capture *c = user;
    const int64_t routes = c->step_rows[c->n_steps - 1] * c->top_k;
    c->n_timing_calls++;
    cr_assert_eq(t->misses, routes, "layer %lld", (long long)layer);
    cr_assert_eq(t->hits, 0);
    cr_assert_not_null(t->served, "layer %lld: no served codes", (long long)layer);
    for (int64_t i = 0; i < routes; i++)
        cr_assert_eq(t->served[i], MP_SERVED_CPU, "layer %lld route %lld: %s", (long long)layer, (long long)i,
                     mp_served_name(t->served[i]));
}

static void check_hooks_routing(bool renorm)
{
    mp_hparams hp = small_hparams(MP_ARCH_QWEN3MOE);
    hp.expert_weights_norm = renorm;
    uint64_t seed = time_seed();
    enum { N = 7 };
    int32_t tok[N];
    double *ref = malloc(N * (size_t)hp.n_vocab * sizeof *ref);
    static ref_routing rr;
    test_model *tm = model_without_ties(&hp, &seed, tok, N, ref, &rr);
    static capture c;
    memset(&c, 0, sizeof c);
    mp_hooks hooks = {.user = &c, .step_begin = cap_step_begin, .routing = cap_routing,
                      .moe_timing = cap_timing, .step_end = cap_step_end};
    mp_session *s = new_session(&tm->m, 2, 4, 32, &hooks, NULL);
    mp_error err = {0};
    mp_session_begin_request(s, 42, tok, 5);
    cr_assert_eq(mp_session_eval(s, tok, 5, false, NULL, &err), MP_OK, "%s", err.msg);
    cr_assert_eq(mp_session_eval(s, tok + 5, 1, false, NULL, &err), MP_OK, "%s", err.msg);
    cr_assert_eq(mp_session_eval(s, tok + 6, 1, false, NULL, &err), MP_OK, "%s", err.msg);
    /* steps: 4 + 1 prompt rows (n_batch 4), then two decode rows */
    cr_assert_eq(c.n_steps, 4);
    cr_assert_eq(c.step_ends, 4);
    cr_assert_eq(c.request_id_seen, 42);
    const int64_t want_rows[4] = {4, 1, 1, 1}, want_pos[4] = {0, 4, 5, 6};
    const mp_phase want_phase[4] = {MP_PHASE_PREFILL, MP_PHASE_PREFILL, MP_PHASE_DECODE, MP_PHASE_DECODE};
    for (int i = 0; i < 4; i++) {
        cr_assert_eq(c.step_rows[i], want_rows[i], "step %d", i);
        cr_assert_eq(c.step_pos[i], want_pos[i], "step %d", i);
        cr_assert_eq(c.step_phase[i], want_phase[i], "step %d", i);
    }
    cr_assert_eq(c.n_routing_calls, 4 * hp.n_layer);
    cr_assert_eq(c.n_timing_calls, 4 * hp.n_layer);
    for (int64_t t = 0; t < N; t++)
        for (int64_t il = 0; il < hp.n_layer; il++) {
            double wsum = 0;
            for (int64_t k = 0; k < hp.n_expert_used; k++) {
                cr_assert_eq(c.ids[t][il][k], rr.ids[t][il][k], "seed %llu row %lld layer %lld slot %lld",
                             (unsigned long long)seed, (long long)t, (long long)il, (long long)k);
                cr_assert(close_to(c.w[t][il][k], rr.w[t][il][k], 1e-5), "seed %llu: weight %.7g vs %.7g",
                          (unsigned long long)seed, c.w[t][il][k], rr.w[t][il][k]);
                if (k > 0)
                    cr_assert_geq(c.w[t][il][k - 1], c.w[t][il][k]);
                wsum += c.w[t][il][k];
            }
            if (renorm)
                cr_assert(fabs(wsum - 1.0) < 1e-5, "renormalized weights sum to %.7g", wsum);
            else
                cr_assert(wsum < 1.0 - 1e-4, "softmax weights of 3 of 8 experts sum to %.7g", wsum);
        }
    mp_session_free(s);
    free_model(tm);
    free(ref);
}

Test(moe, hooks_see_routing_renormalized) { check_hooks_routing(true); }
Test(moe, hooks_see_routing_not_renormalized) { check_hooks_routing(false); }

Test(moe, topk_ties_go_to_lower_ids)
{
    mp_hparams hp = small_hparams(MP_ARCH_OLMOE); /* no renormalization: weights are 1/8 */
    test_model *tm = build_model(&hp, time_seed());
    for (int64_t il = 0; il < hp.n_layer; il++) /* every expert gets the same router logit */
        memset((void *)tm->layers[il].gate_inp.data, 0, tm->layers[il].gate_inp.nbytes);
    static capture c;
    memset(&c, 0, sizeof c);
    mp_hooks hooks = {.user = &c, .step_begin = cap_step_begin, .routing = cap_routing};
    mp_session *s = new_session(&tm->m, 3, 0, 16, &hooks, NULL);
    int32_t tok[3] = {5, 9, 1};
    mp_error err = {0};
    cr_assert_eq(mp_session_eval(s, tok, 3, false, NULL, &err), MP_OK, "%s", err.msg);
    for (int t = 0; t < 3; t++)
        for (int il = 0; il < hp.n_layer; il++)
            for (int k = 0; k < hp.n_expert_used; k++) {
                cr_assert_eq(c.ids[t][il][k], k, "row %d layer %d slot %d: expert %d", t, il, k,
                             c.ids[t][il][k]);
                cr_assert(fabsf(c.w[t][il][k] - 1.0f / 8.0f) < 1e-6f);
            }
    mp_session_free(s);
    free_model(tm);
}

/* layer_begin / layer_end bracket each layer's work (routing included) inside every step, in
 * layer order, and stay balanced when a layer fails. Events: 'S' step_begin, 'B'/'E' layer
 * begin/end (value: layer), 'R' routing (layer), 'T' step_end. */
typedef struct layer_log {
    char type[512];
    int64_t value[512];
    int n;
} layer_log;

static void log_ev(layer_log *l, char t, int64_t v)
{
    cr_assert_lt(l->n, 512);
    l->type[l->n] = t;
    l->value[l->n++] = v;
}
static void ll_step_begin(void *u, int64_t rq, int64_t step, mp_phase ph, int64_t rows, int64_t pos)
{
    log_ev(u, 'S', step);
}
static void ll_step_end(void *u, int64_t ns) { log_ev(u, 'T', 0); }
static void ll_begin(void *u, int64_t layer) { log_ev(u, 'B', layer); }
static void ll_end(void *u, int64_t layer) { log_ev(u, 'E', layer); }
static void ll_routing(void *u, int64_t layer, int64_t rows, int64_t k, const int32_t *ids,
                       const float *w)
{
    log_ev(u, 'R', layer);
}

static int fail_at_layer_1(void *user, int64_t layer, int64_t n_rows, int64_t top_k, int32_t *ids,
                           float *w)
{
    if (layer == 1)
        return MP_ERR_IO;
    for (int64_t i = 0; i < n_rows * top_k; i++) {
        ids[i] = (int32_t)(i % top_k);
        w[i] = 1.0f / (float)top_k;
    }
    return 0;
}

Test(forward, layer_hooks_bracket_each_layer)
{
    mp_hparams hp = small_hparams(MP_ARCH_QWEN3MOE);
    test_model *tm = build_model(&hp, time_seed());
    static layer_log l;
    memset(&l, 0, sizeof l);
    mp_hooks hooks = {.user = &l, .step_begin = ll_step_begin, .step_end = ll_step_end,
                      .routing = ll_routing, .layer_begin = ll_begin, .layer_end = ll_end};
    mp_session *s = new_session(&tm->m, 2, 2, 16, &hooks, NULL);
    int32_t tok[5] = {3, 1, 4, 1, 5};
    mp_error err = {0};
    cr_assert_eq(mp_session_eval(s, tok, 5, false, NULL, &err), MP_OK, "%s", err.msg);
    /* 3 steps (2 + 2 + 1 rows), each: S, (B il, R il, E il) per layer, T */
    int i = 0;
    for (int64_t step = 0; step < 3; step++) {
        cr_assert_eq(l.type[i], 'S', "event %d: %c", i, l.type[i]);
        cr_assert_eq(l.value[i++], step);
        for (int64_t il = 0; il < hp.n_layer; il++) {
            const char want[3] = {'B', 'R', 'E'};
            for (int k = 0; k < 3; k++, i++)
                cr_assert(l.type[i] == want[k] && l.value[i] == il,
                          "step %lld layer %lld: event %d is %c %lld, expected %c", (long long)step,
                          (long long)il, i, l.type[i], (long long)l.value[i], want[k]);
        }
        cr_assert_eq(l.type[i++], 'T');
    }
    cr_assert_eq(i, l.n);
    mp_session_free(s);

    /* a layer that fails still gets its layer_end; nothing runs after it */
    memset(&l, 0, sizeof l);
    mp_route_source src = {.user = NULL, .route = fail_at_layer_1};
    s = new_session(&tm->m, 2, 0, 16, &hooks, &src);
    cr_assert_neq(mp_session_eval(s, tok, 2, false, NULL, &err), MP_OK);
    const char *want = "SBREBE";
    cr_assert_eq(l.n, (int)strlen(want));
    for (int k = 0; k < l.n; k++)
        cr_assert_eq(l.type[k], want[k], "event %d: %c, expected %c", k, l.type[k], want[k]);
    cr_assert_eq(l.value[4], 1);
    cr_assert_eq(l.value[5], 1);
    mp_session_free(s);
    free_model(tm);
}

typedef struct forced_src {
    const ref_routing *routes;
    int64_t row_base; /* position of the step's first row */
    int64_t calls;
    int fail_at_layer; /* -1: never */
    int bad_id;        /* 1: return an out-of-range id */
} forced_src;

static int forced_route(void *user, int64_t layer, int64_t n_rows, int64_t top_k, int32_t *ids,
                        float *w)
{
    forced_src *f = user;
    f->calls++;
    if (layer == f->fail_at_layer)
        return MP_ERR_IO;
    for (int64_t r = 0; r < n_rows; r++)
        for (int64_t k = 0; k < top_k; k++) {
            ids[r * top_k + k] = f->routes->ids[f->row_base + r][layer][k];
            w[r * top_k + k] = (float)f->routes->w[f->row_base + r][layer][k];
        }
    if (f->bad_id)
        ids[0] = 99;
    return 0;
}

Test(moe, route_source_overrides_the_router)
{
    mp_hparams hp = small_hparams(MP_ARCH_MIXTRAL);
    uint64_t seed = time_seed();
    enum { N = 6 };
    int32_t tok[N];
    double *ref = malloc(N * (size_t)hp.n_vocab * sizeof *ref);
    static ref_routing rr, forced;
    test_model *tm = model_without_ties(&hp, &seed, tok, N, ref, &rr);
    /* a routing the router would not choose: the least likely-looking fixed pattern */
    for (int t = 0; t < N; t++)
        for (int il = 0; il < hp.n_layer; il++)
            for (int k = 0; k < hp.n_expert_used; k++) {
                forced.ids[t][il][k] = (int)((t + 3 * il + 2 * k) % hp.n_expert);
                forced.w[t][il][k] = 0.5 / (double)(k + 1);
            }
    ref_forward(&tm->m, tok, N, ref, &rr, &forced);
    static capture c;
    memset(&c, 0, sizeof c);
    mp_hooks hooks = {.user = &c, .step_begin = cap_step_begin, .routing = cap_routing};
    forced_src fs = {&forced, 0, 0, -1, 0};
    mp_route_source src = {.user = &fs, .route = forced_route};
    mp_session *s = new_session(&tm->m, 2, 0, 16, &hooks, &src);
    float *got = malloc(N * (size_t)hp.n_vocab * sizeof *got);
    mp_error err = {0};
    cr_assert_eq(mp_session_eval(s, tok, N, true, got, &err), MP_OK, "%s", err.msg);
    cr_assert_eq(fs.calls, hp.n_layer);
    for (int64_t i = 0; i < N * hp.n_vocab; i++)
        cr_assert(close_to(got[i], ref[i], 2e-4), "seed %llu logit %lld: %.7g vs %.7g",
                  (unsigned long long)seed, (long long)i, got[i], ref[i]);
    for (int t = 0; t < N; t++)
        for (int il = 0; il < hp.n_layer; il++)
            for (int k = 0; k < hp.n_expert_used; k++) {
                cr_assert_eq(c.ids[t][il][k], forced.ids[t][il][k]);
                cr_assert_eq(c.w[t][il][k], (float)forced.w[t][il][k]);
            }
    /* a route source error stops the run; an out-of-range id is rejected with its place */
    mp_session_reset(s); /* step numbers restart */
    c.n_steps = 0;
    fs.fail_at_layer = 1;
    cr_assert_eq(mp_session_eval(s, tok, 2, false, NULL, &err), MP_ERR_IO);
    cr_assert(strstr(err.msg, "layer 1"), "%s", err.msg);
    cr_assert_eq(mp_session_n_past(s), 0);
    fs.fail_at_layer = -1;
    fs.bad_id = 1;
    c.n_steps = 0; /* the failed step did not count */
    cr_assert_eq(mp_session_eval(s, tok, 2, false, NULL, &err), MP_ERR_FORMAT);
    cr_assert(strstr(err.msg, "expert id 99"), "%s", err.msg);
    mp_session_free(s);
    free_model(tm);
    free(ref);
    free(got);
}

/* ---------------------------------------------------------------- model validation */

Test(model, validate_names_tensor_and_shapes)
{
    mp_hparams hp = small_hparams(MP_ARCH_QWEN3MOE);
    test_model *tm = build_model(&hp, time_seed());
    mp_error err = {0};
    tm->layers[1].up_exps.ne[1] = 19;
    cr_assert_eq(mp_model_validate(&tm->m, &err), MP_ERR_FORMAT);
    cr_assert_str_eq(err.msg, "(in-memory model): tensor blk.1.ffn_up_exps.weight: expected shape "
                              "[24, 20, 8], found [24, 19, 8]");
    tm->layers[1].up_exps.ne[1] = 20;
    cr_assert_eq(mp_model_validate(&tm->m, &err), MP_OK, "%s", err.msg);

    const void *kn = tm->layers[0].k_norm.data;
    tm->layers[0].k_norm.data = NULL;
    cr_assert_eq(mp_model_validate(&tm->m, &err), MP_ERR_FORMAT);
    cr_assert_str_eq(err.msg, "(in-memory model): tensor blk.0.attn_k_norm.weight: missing");
    tm->layers[0].k_norm.data = kn;

    tm->layers[0].ffn_norm.type = MP_TYPE_F16;
    cr_assert_eq(mp_model_validate(&tm->m, &err), MP_ERR_UNSUPPORTED);
    cr_assert(strstr(err.msg, "blk.0.ffn_norm.weight") && strstr(err.msg, "F32"), "%s", err.msg);
    tm->layers[0].ffn_norm.type = MP_TYPE_F32;

    tm->m.hp.n_head_kv = 3;
    cr_assert_eq(mp_model_validate(&tm->m, &err), MP_ERR_FORMAT);
    cr_assert(strstr(err.msg, "head_count 4") && strstr(err.msg, "head_count_kv 3"), "%s", err.msg);
    tm->m.hp.n_head_kv = 2;
    tm->m.hp.n_expert_used = 9;
    cr_assert_eq(mp_model_validate(&tm->m, &err), MP_ERR_FORMAT);
    tm->m.hp.n_expert_used = 3;
    tm->m.hp.rot_dim = 11;
    cr_assert_eq(mp_model_validate(&tm->m, &err), MP_ERR_FORMAT);
    tm->m.hp.rot_dim = 10;
    cr_assert_eq(mp_model_validate(&tm->m, &err), MP_OK, "%s", err.msg);

    /* bytes: one expert = gate + up + down slices; dense = everything else */
    const size_t expert = (size_t)(2 * 24 * 20 + 20 * 24) * sizeof(float);
    cr_assert_eq(mp_model_expert_bytes(&tm->m, 1), expert);
    size_t dense = (size_t)(24 * 40 * 2 + 24) * sizeof(float);
    dense += 2 * (size_t)(24 + 24 * 40 + 24 * 20 * 2 + 40 * 24 + 10 * 2 + 24 + 24 * 8) * sizeof(float);
    cr_assert_eq(mp_model_dense_bytes(&tm->m), dense);
    free_model(tm);
}

Test(model, arch_traits)
{
    cr_assert_eq(mp_arch_from_name("qwen3moe"), MP_ARCH_QWEN3MOE);
    cr_assert_eq(mp_arch_from_name("olmoe"), MP_ARCH_OLMOE);
    cr_assert_eq(mp_arch_from_name("mixtral"), MP_ARCH_MIXTRAL);
    cr_assert_eq(mp_arch_from_name("deepseek2"), -1);
    cr_assert_eq(mp_arch_get(MP_ARCH_QWEN3MOE)->qk_norm, MP_QK_NORM_PER_HEAD);
    cr_assert_eq(mp_arch_get(MP_ARCH_OLMOE)->qk_norm, MP_QK_NORM_FULL);
    cr_assert_eq(mp_arch_get(MP_ARCH_MIXTRAL)->qk_norm, MP_QK_NORM_NONE);
    cr_assert_eq(mp_arch_get(MP_ARCH_MIXTRAL)->rope, MP_ROPE_NORM);
    cr_assert(mp_arch_get(MP_ARCH_QWEN3MOE)->default_weights_norm);
    cr_assert(!mp_arch_get(MP_ARCH_OLMOE)->default_weights_norm);
    cr_assert_eq(mp_arch_from_name("qwen2moe"), MP_ARCH_QWEN2MOE);
    const mp_arch_traits *q2 = mp_arch_get(MP_ARCH_QWEN2MOE);
    cr_assert(q2->qkv_bias && q2->shared_expert && !q2->default_weights_norm && q2->qk_norm == MP_QK_NORM_NONE);
    cr_assert(!mp_arch_get(MP_ARCH_QWEN3MOE)->qkv_bias && !mp_arch_get(MP_ARCH_MIXTRAL)->shared_expert);
    const mp_arch_traits *go = mp_arch_get(MP_ARCH_GPTOSS);
    cr_assert_eq(mp_arch_from_name("gpt-oss"), MP_ARCH_GPTOSS);
    cr_assert(go->qkv_bias && go->attn_out_bias && go->attn_sinks && go->moe_bias && go->swa_period == 2 &&
              go->act == MP_ACT_SWIGLU_OAI && !go->yarn_truncate && !strcmp(go->ffn_norm_name, "post_attention_norm"));
    cr_assert_null(mp_arch_get((mp_arch)7));
}

/* ---------------------------------------------------------------- sampler */

static void random_logits(float *l, int64_t n)
{
    for (int64_t i = 0; i < n; i++)
        l[i] = (float)(4.0 * rnd());
}

Test(sampler, greedy_is_argmax_ties_to_lower_id)
{
    rng_state = time_seed();
    float l[100];
    random_logits(l, 100);
    l[37] = 10.0f;
    l[81] = 10.0f;
    mp_sampler_params p = {.temperature = 0.0f, .top_k = 0, .top_p = 1.0f, .seed = 1};
    mp_sampler *s = mp_sampler_new(&p, 100);
    cr_assert_eq(mp_sampler_sample(s, l), 37);
    mp_sampler_free(s);
}

Test(sampler, seeded_determinism_and_distribution)
{
    const uint64_t seed = time_seed();
    rng_state = seed;
    enum { V = 50, DRAWS = 400 };
    float base[V], l[V];
    random_logits(base, V);
    mp_sampler_params p = {.temperature = 0.8f, .top_k = 0, .top_p = 1.0f, .seed = seed};
    mp_sampler *a = mp_sampler_new(&p, V), *b = mp_sampler_new(&p, V);
    p.seed = seed + 1;
    mp_sampler *c = mp_sampler_new(&p, V);
    int differ = 0, distinct = 0, seen[V] = {0};
    for (int i = 0; i < DRAWS; i++) {
        memcpy(l, base, sizeof l);
        const int32_t ta = mp_sampler_sample(a, l);
        memcpy(l, base, sizeof l);
        const int32_t tb = mp_sampler_sample(b, l);
        memcpy(l, base, sizeof l);
        const int32_t tc = mp_sampler_sample(c, l);
        cr_assert_eq(ta, tb, "seed %llu draw %d", (unsigned long long)seed, i);
        cr_assert(ta >= 0 && ta < V);
        differ += ta != tc;
        if (!seen[ta]++)
            distinct++;
    }
    cr_assert_gt(differ, 0, "seed %llu: another seed gave the same %d draws", (unsigned long long)seed, DRAWS);
    cr_assert_gt(distinct, 3, "seed %llu: temperature 0.8 sampled only %d tokens", (unsigned long long)seed, distinct);
    mp_sampler_free(a);
    mp_sampler_free(b);
    mp_sampler_free(c);
}

Test(sampler, top_k_one_and_tiny_top_p_are_greedy)
{
    const uint64_t seed = time_seed();
    rng_state = seed;
    enum { V = 1000 };
    static float base[V], l[V];
    mp_sampler_params pk = {.temperature = 1.5f, .top_k = 1, .top_p = 1.0f, .seed = seed};
    mp_sampler_params pp = {.temperature = 1.5f, .top_k = 0, .top_p = 1e-6f, .seed = seed};
    mp_sampler *sk = mp_sampler_new(&pk, V), *sp = mp_sampler_new(&pp, V);
    for (int i = 0; i < 50; i++) {
        random_logits(base, V);
        if (i % 5 == 0)
            base[V - 1] = base[3] = 9.0f; /* a tie: the lower id wins */
        int32_t greedy = -1;
        for (int32_t v = 0; v < V; v++)
            if (greedy < 0 || base[v] > base[greedy])
                greedy = v;
        memcpy(l, base, sizeof l);
        cr_assert_eq(mp_sampler_sample(sk, l), greedy, "seed %llu draw %d", (unsigned long long)seed, i);
        memcpy(l, base, sizeof l);
        cr_assert_eq(mp_sampler_sample(sp, l), greedy, "seed %llu draw %d", (unsigned long long)seed, i);
    }
    mp_sampler_free(sk);
    mp_sampler_free(sp);
}

Test(sampler, top_k_restricts_to_the_k_best)
{
    const uint64_t seed = time_seed();
    rng_state = seed;
    enum { V = 300 };
    static float base[V], l[V];
    random_logits(base, V);
    float sorted[V];
    memcpy(sorted, base, sizeof sorted);
    for (int i = 0; i < V; i++) /* the 5th largest value */
        for (int j = i + 1; j < V; j++)
            if (sorted[j] > sorted[i]) {
                float t = sorted[i]; sorted[i] = sorted[j]; sorted[j] = t;
            }
    mp_sampler_params p = {.temperature = 5.0f, .top_k = 5, .top_p = 1.0f, .seed = seed};
    mp_sampler *s = mp_sampler_new(&p, V);
    int distinct = 0, seen[V] = {0};
    for (int i = 0; i < 300; i++) {
        memcpy(l, base, sizeof l);
        const int32_t t = mp_sampler_sample(s, l);
        cr_assert_geq(base[t], sorted[4], "seed %llu: token %d outside the top 5", (unsigned long long)seed, t);
        if (!seen[t]++)
            distinct++;
    }
    cr_assert_gt(distinct, 1, "seed %llu", (unsigned long long)seed);
    mp_sampler_free(s);
}

/* ---------------------------------------------------------------- thread pool */

typedef struct count_job {
    atomic_int *hits;
    int n_threads;
    atomic_int bad_thread;
} count_job;

static void count_task(void *ctx, int64_t task, int thread)
{
    count_job *j = ctx;
    if (thread < 0 || thread >= j->n_threads)
        atomic_store(&j->bad_thread, 1);
    atomic_fetch_add(&j->hits[task], 1);
}

Test(threadpool, every_task_runs_exactly_once)
{
    enum { MAX_TASKS = 300 };
    static atomic_int hits[MAX_TASKS];
    const int thread_counts[] = {1, 2, 3, 5, 8};
    for (size_t ti = 0; ti < sizeof thread_counts / sizeof thread_counts[0]; ti++) {
        const int nt = thread_counts[ti];
        mp_pool *pool = mp_pool_new(nt, false);
        cr_assert(pool);
        cr_assert_eq(mp_pool_n_threads(pool), nt);
        for (int region = 0; region < 400; region++) {
            const int64_t n = (region * 37) % MAX_TASKS; /* includes 0 and 1 */
            for (int64_t t = 0; t < MAX_TASKS; t++)
                atomic_store(&hits[t], 0);
            count_job j = {hits, nt, 0};
            mp_pool_run(pool, n, count_task, &j);
            for (int64_t t = 0; t < MAX_TASKS; t++)
                cr_assert_eq(atomic_load(&hits[t]), t < n ? 1 : 0,
                             "threads %d region %d tasks %lld: task %lld ran %d times", nt, region,
                             (long long)n, (long long)t, atomic_load(&hits[t]));
            cr_assert_eq(atomic_load(&j.bad_thread), 0);
            if (region % 100 == 99) { /* let the workers fall asleep, then wake them */
                struct timespec ts = {0, 2000000};
                nanosleep(&ts, NULL);
            }
        }
        mp_pool_free(pool);
    }
    cr_assert_null(mp_pool_new(0, false));
    cr_assert_geq(mp_cpu_count(), 1);
}

/* Pinning (MP_POOL_PIN=1): a pool that fits the process's CPUs pins each worker to one CPU of its
 * own (the i-th of the affinity set for worker i), never the caller; without the switch, and for
 * an oversubscribed pool, none. Each task records the CPU set its thread may run on. */
typedef struct pin_job {
    int n_threads;
    atomic_int one_cpu[64];  /* per thread: 1 + the only CPU it may run on, 0 if several */
    atomic_int ran[64];
} pin_job;

static void pin_task(void *ctx, int64_t task, int thread)
{
    pin_job *j = ctx;
    cpu_set_t set;
    (void)task;
    if (sched_getaffinity(0, sizeof set, &set) == 0 && thread < 64) {
        int only = -1;
        if (CPU_COUNT(&set) == 1)
            for (int c = 0; c < CPU_SETSIZE; c++)
                if (CPU_ISSET(c, &set))
                    only = c;
        atomic_store(&j->one_cpu[thread], only + 1);
        atomic_store(&j->ran[thread], 1);
    }
    struct timespec ts = {0, 200000}; /* long enough that every worker gets a task */
    nanosleep(&ts, NULL);
}

Test(threadpool, workers_pinned_when_the_pool_fits)
{
    cpu_set_t set;
    cr_assert_eq(sched_getaffinity(0, sizeof set, &set), 0);
    int cpus[CPU_SETSIZE], n_cpus = 0;
    for (int c = 0; c < CPU_SETSIZE; c++)
        if (CPU_ISSET(c, &set))
            cpus[n_cpus++] = c;
    const int nt = n_cpus < 8 ? n_cpus : 8;
    for (int off = 0; off < 2; off++) {
        mp_pool *pool = mp_pool_new(nt, !off);
        cr_assert(pool);
        cr_assert_eq(mp_pool_n_pinned(pool), off || nt == 1 ? 0 : nt - 1, "%d threads on %d CPUs, pin %s: "
                     "%d workers pinned", nt, n_cpus, off ? "off" : "on", mp_pool_n_pinned(pool));
        static pin_job j;
        memset(&j, 0, sizeof j);
        j.n_threads = nt;
        mp_pool_run(pool, 4 * nt, pin_task, &j);
        for (int t = 1; t < nt; t++)
            if (atomic_load(&j.ran[t]))
                cr_assert_eq(atomic_load(&j.one_cpu[t]), off ? 0 : cpus[t] + 1,
                             "worker %d: may run on %s, want %s", t,
                             atomic_load(&j.one_cpu[t]) ? "one CPU" : "several", off ? "several" : "its CPU");
        if (atomic_load(&j.ran[0]))
            cr_assert(atomic_load(&j.one_cpu[0]) == 0 || n_cpus == 1, "the caller was pinned");
        mp_pool_free(pool);
    }
    /* more threads than CPUs: nothing pinned */
    mp_pool *over = mp_pool_new(n_cpus + 1, true);
    cr_assert(over);
    cr_assert_eq(mp_pool_n_pinned(over), 0);
    mp_pool_free(over);
    /* a session's pool as its knobs say: not pinned by default, pinned with MP_POOL_PIN=1 */
    mp_hparams hp = small_hparams(MP_ARCH_QWEN3MOE);
    test_model *tm = build_model(&hp, 1);
    mp_knobs pin;
    mp_error err = {0};
    mp_knobs_defaults(&pin);
    cr_assert_eq(mp_knobs_set(&pin, "MP_POOL_PIN", "1", MP_KNOB_ENV, &err), MP_OK, "%s", err.msg);
    for (int with = 0; with < 2; with++) {
        mp_session_params p = {.n_ctx = 16, .n_threads = nt, .knobs = with ? &pin : NULL};
        mp_session *s = NULL;
        cr_assert_eq(mp_session_new(&tm->m, &p, &s, &err), MP_OK, "session: %s", err.msg);
        cr_assert_eq(mp_session_n_pinned(s), with && nt > 1 ? nt - 1 : 0, "%d threads, %s: %d workers pinned", nt,
                     with ? "MP_POOL_PIN=1" : "the default knobs", mp_session_n_pinned(s));
        mp_session_free(s);
    }
    free_model(tm);
}

/* Tasks that sometimes stall (a yield or a 50 µs sleep, as a descheduled thread would), with more
 * threads than cores: every task still runs exactly once, blocks left by a stalled thread are
 * stolen, and regions of fewer tasks than threads work. */
static void stall_task(void *ctx, int64_t task, int thread)
{
    count_job *j = ctx;
    if (thread < 0 || thread >= j->n_threads)
        atomic_store(&j->bad_thread, 1);
    const uint64_t h = (uint64_t)task * 0x9E3779B97F4A7C15ull ^ (uint64_t)thread;
    if (h % 61 == 0) {
        struct timespec ts = {0, 50000};
        nanosleep(&ts, NULL);
    } else if (h % 7 == 0) {
        sched_yield();
    }
    atomic_fetch_add(&j->hits[task], 1);
}

Test(threadpool, stalled_threads_and_oversubscription_keep_exactly_once)
{
    enum { MAX_TASKS = 200 };
    static atomic_int hits[MAX_TASKS];
    const int nt = 16; /* CI machines have 2 cores */
    mp_pool *pool = mp_pool_new(nt, false);
    cr_assert(pool);
    const int64_t sizes[] = {2, 3, 15, 16, 17, 31, 128, 199};
    for (int region = 0; region < 200; region++) {
        const int64_t n = sizes[region % (int)(sizeof sizes / sizeof sizes[0])];
        for (int64_t t = 0; t < MAX_TASKS; t++)
            atomic_store(&hits[t], 0);
        count_job j = {hits, nt, 0};
        mp_pool_run(pool, n, stall_task, &j);
        for (int64_t t = 0; t < MAX_TASKS; t++)
            cr_assert_eq(atomic_load(&hits[t]), t < n ? 1 : 0, "region %d tasks %lld: task %lld ran %d times",
                         region, (long long)n, (long long)t, atomic_load(&hits[t]));
        cr_assert_eq(atomic_load(&j.bad_thread), 0);
    }
    mp_pool_free(pool);
}

/* The thread count must not change the result (each output row is computed by one task). */
Test(forward, thread_count_does_not_change_logits)
{
    mp_hparams hp = small_hparams(MP_ARCH_QWEN3MOE);
    const uint64_t seed = time_seed();
    test_model *tm = build_model(&hp, seed);
    int32_t tok[6];
    random_tokens(tok, 6, hp.n_vocab);
    float a[6 * 40], b[6 * 40];
    mp_error err = {0};
    mp_session *s1 = new_session(&tm->m, 1, 0, 16, NULL, NULL);
    mp_session *s5 = new_session(&tm->m, 5, 0, 16, NULL, NULL);
    cr_assert_eq(mp_session_eval(s1, tok, 6, true, a, &err), MP_OK, "%s", err.msg);
    cr_assert_eq(mp_session_eval(s5, tok, 6, true, b, &err), MP_OK, "%s", err.msg);
    cr_assert_eq(memcmp(a, b, sizeof a), 0, "seed %llu", (unsigned long long)seed);
    mp_session_free(s1);
    mp_session_free(s5);
    free_model(tm);
}

/* ---------------------------------------------------------------- GGUF loading */

#include <unistd.h>

#include "runtime/commands.h"
#include "gguf/gguf.h"
#include "tokenizer/tokenizer.h"
#include "tests/unit/cli_util.h"

typedef struct gguf_opts {
    const char *arch;          /* general.architecture */
    const char *skip_tensor;   /* leave this tensor out */
    const char *skip_key;      /* leave this "<arch>.<key>" out */
    const char *bad_tensor;    /* write this tensor with ne[1] - 1 rows */
    bool tied;                 /* no output.weight */
    bool vocab;                /* tokenizer metadata (n_vocab must be >= 259) */
    bool add_bos;              /* with vocab: tokenizer.ggml.add_bos_token = true */
    bool split_experts;        /* each expert its own 2-D tensor: blk.N.ffn_gate.E.weight, ... */
    bool fuse_gate_up;         /* gate and up in one tensor, blk.N.ffn_gate_up_exps.weight */
    int64_t fused_experts;     /* with fuse_gate_up: the experts the fused tensor holds (0: all) */
    int shard;                 /* with n_shards > 1: which file of a split model this one is (0: the first) */
    int n_shards;              /* the tensors go round-robin to the files; the first holds the metadata */
    const char *rope_scaling;  /* rope.scaling.type written as this (NULL: yarn where the model has it) */
    float yarn_factor;         /* rope.scaling.factor written as this (0: the model's) */
} gguf_opts;

static int g_tensor_counter; /* each_tensor's running index: which shard a tensor goes to */

static bool in_this_shard(const gguf_opts *o)
{
    return o->n_shards <= 1 || g_tensor_counter++ % o->n_shards == o->shard;
}

static void add_tensor(mp_gguf_writer *w, const gguf_opts *o, const char *name, const mp_tensor *t)
{
    if (!t->data || (o->skip_tensor && !strcmp(name, o->skip_tensor)) || !in_this_shard(o))
        return;
    int64_t ne[4] = {t->ne[0], t->ne[1], t->ne[2], 1};
    if (o->bad_tensor && !strcmp(name, o->bad_tensor))
        ne[1] -= 1;
    const uint32_t nd = ne[2] > 1 ? 3 : ne[1] > 1 ? 2 : 1;
    mp_error err = {0};
    cr_assert_eq(mp_gguf_add_tensor_info(w, name, nd, ne, t->type, &err), MP_OK, "%s", err.msg);
}

static void write_tensor(mp_gguf_writer *w, const gguf_opts *o, const char *name, const mp_tensor *t)
{
    if (!t->data || (o->skip_tensor && !strcmp(name, o->skip_tensor)) || !in_this_shard(o))
        return;
    size_t n = t->nbytes;
    if (o->bad_tensor && !strcmp(name, o->bad_tensor))
        n = t->nbytes / (size_t)(t->ne[1] * t->ne[2]) * (size_t)((t->ne[1] - 1) * t->ne[2]);
    mp_error err = {0};
    cr_assert_eq(mp_gguf_write_data(w, t->data, n, &err), MP_OK, "%s", err.msg);
}

static int32_t g_counted;

static void count_tensor(mp_gguf_writer *w, const gguf_opts *o, const char *name, const mp_tensor *t)
{
    (void)w;
    if (t->data && !(o->skip_tensor && !strcmp(name, o->skip_tensor)))
        g_counted++;
}

/* Visit every tensor of the model with its GGUF name. */
static void each_tensor(const mp_model *m, const gguf_opts *o, mp_gguf_writer *w,
                        void (*fn)(mp_gguf_writer *, const gguf_opts *, const char *, const mp_tensor *))
{
    fn(w, o, "token_embd.weight", &m->tok_embd);
    fn(w, o, "output_norm.weight", &m->output_norm);
    if (!o->tied)
        fn(w, o, "output.weight", &m->output);
    for (int64_t il = 0; il < m->hp.n_layer; il++) {
        const mp_layer *L = &m->layers[il];
        const struct { const char *s; const mp_tensor *t; } list[] = {
            {"attn_norm", &L->attn_norm}, {"attn_q", &L->wq}, {"attn_k", &L->wk},
            {"attn_v", &L->wv}, {"attn_output", &L->wo}, {"attn_q_norm", &L->q_norm},
            {"attn_k_norm", &L->k_norm}, {mp_arch_get(m->hp.arch)->ffn_norm_name, &L->ffn_norm},
            {"ffn_gate_inp", &L->gate_inp}, {"ffn_gate_exps", &L->gate_exps},
            {"ffn_up_exps", &L->up_exps}, {"ffn_down_exps", &L->down_exps}};
        for (size_t i = 0; i < sizeof list / sizeof list[0]; i++) {
            char name[64];
            const mp_tensor *t = list[i].t;
            if (o->fuse_gate_up && t == &L->up_exps)
                continue; /* in the fused tensor, written with the gate */
            if (o->fuse_gate_up && t == &L->gate_exps) { /* each expert's gate rows, then its up rows */
                const int64_t E = o->fused_experts ? o->fused_experts : t->ne[2];
                const size_t half = t->nbytes / (size_t)t->ne[2];
                char *d = malloc(2 * half * (size_t)E);
                cr_assert_not_null(d);
                for (int64_t e = 0; e < E; e++) {
                    memcpy(d + 2 * half * (size_t)e, (const char *)t->data + half * (size_t)e, half);
                    memcpy(d + 2 * half * (size_t)e + half, (const char *)L->up_exps.data + half * (size_t)e, half);
                }
                mp_tensor f = *t;
                f.ne[1] *= 2;
                f.ne[2] = E;
                f.nbytes = 2 * half * (size_t)E;
                f.data = d;
                snprintf(name, sizeof name, "blk.%lld.ffn_gate_up_exps.weight", (long long)il);
                fn(w, o, name, &f);
                free(d);
                continue;
            }
            if (o->split_experts && t->ne[2] > 1) { /* "ffn_gate_exps" -> blk.N.ffn_gate.E.weight */
                for (int64_t e = 0; e < t->ne[2]; e++) {
                    mp_tensor x = *t;
                    x.ne[2] = 1;
                    x.nbytes = t->nbytes / (size_t)t->ne[2];
                    x.data = (const char *)t->data + (size_t)e * x.nbytes;
                    snprintf(name, sizeof name, "blk.%lld.%.*s.%lld.weight", (long long)il,
                             (int)(strlen(list[i].s) - 5), list[i].s, (long long)e);
                    fn(w, o, name, &x);
                }
                continue;
            }
            snprintf(name, sizeof name, "blk.%lld.%s.weight", (long long)il, list[i].s);
            fn(w, o, name, t);
        }
        const struct { const char *s; const mp_tensor *t; } extra[] = {
            {"attn_q.bias", &L->bq}, {"attn_k.bias", &L->bk}, {"attn_v.bias", &L->bv},
            {"ffn_gate_inp_shexp.weight", &L->gate_inp_shexp}, {"ffn_gate_shexp.weight", &L->gate_shexp},
            {"ffn_up_shexp.weight", &L->up_shexp}, {"ffn_down_shexp.weight", &L->down_shexp},
            {"attn_output.bias", &L->bo}, {"attn_sinks.weight", &L->sinks}, {"ffn_gate_inp.bias", &L->gate_inp_b},
            {"ffn_gate_exps.bias", &L->gate_exps_b}, {"ffn_up_exps.bias", &L->up_exps_b},
            {"ffn_down_exps.bias", &L->down_exps_b}};
        for (size_t i = 0; i < sizeof extra / sizeof extra[0]; i++) {
            char name[64];
            snprintf(name, sizeof name, "blk.%lld.%s", (long long)il, extra[i].s);
            fn(w, o, name, extra[i].t);
        }
    }
}

static void write_gguf(const char *path, const mp_model *m, const gguf_opts *o)
{
    const mp_hparams *hp = &m->hp;
    mp_gguf_writer *w = NULL;
    mp_error err = {0};
    cr_assert_eq(mp_gguf_writer_open(path, &w, &err), MP_OK, "%s", err.msg);
    const char *arch = o->arch ? o->arch : mp_arch_get(hp->arch)->name;
    if (o->n_shards > 1) { /* llama.cpp's gguf-split keys; the metadata in the first file only */
        const uint16_t no = (uint16_t)o->shard, count = (uint16_t)o->n_shards;
        cr_assert_eq(mp_gguf_add_val(w, "split.no", MP_GGUF_UINT16, &no, &err), MP_OK, "%s", err.msg);
        cr_assert_eq(mp_gguf_add_val(w, "split.count", MP_GGUF_UINT16, &count, &err), MP_OK, "%s", err.msg);
        const gguf_opts all = {.tied = o->tied, .split_experts = o->split_experts, .skip_tensor = o->skip_tensor};
        g_counted = 0;
        each_tensor(m, &all, NULL, count_tensor);
        const int32_t total = g_counted;
        cr_assert_eq(mp_gguf_add_i32(w, "split.tensors.count", total, &err), MP_OK, "%s", err.msg);
        if (o->shard != 0) {
            g_tensor_counter = 0;
            each_tensor(m, o, w, add_tensor);
            g_tensor_counter = 0;
            each_tensor(m, o, w, write_tensor);
            cr_assert_eq(mp_gguf_writer_finish(w, &err), MP_OK, "%s", err.msg);
            return;
        }
    }
    cr_assert_eq(mp_gguf_add_str(w, "general.architecture", arch, &err), MP_OK);
    const struct { const char *k; uint32_t v; } u32s[] = {
        {"block_count", (uint32_t)hp->n_layer}, {"context_length", (uint32_t)hp->n_ctx_train},
        {"embedding_length", (uint32_t)hp->n_embd}, {"attention.head_count", (uint32_t)hp->n_head},
        {"attention.head_count_kv", (uint32_t)hp->n_head_kv},
        {"attention.key_length", (uint32_t)hp->head_dim},
        {"attention.value_length", (uint32_t)hp->head_dim},
        {"rope.dimension_count", (uint32_t)hp->rot_dim}, {"expert_count", (uint32_t)hp->n_expert},
        {"expert_used_count", (uint32_t)hp->n_expert_used},
        {hp->arch == MP_ARCH_MIXTRAL ? "feed_forward_length" : "expert_feed_forward_length",
         (uint32_t)hp->n_ff_exp},
        {hp->n_ff_shexp ? "expert_shared_feed_forward_length" : NULL, (uint32_t)hp->n_ff_shexp}};
    char key[128];
    for (size_t i = 0; i < sizeof u32s / sizeof u32s[0]; i++) {
        if (!u32s[i].k || (o->skip_key && !strcmp(o->skip_key, u32s[i].k)))
            continue;
        snprintf(key, sizeof key, "%s.%s", arch, u32s[i].k);
        cr_assert_eq(mp_gguf_add_u32(w, key, u32s[i].v, &err), MP_OK, "%s", err.msg);
    }
    snprintf(key, sizeof key, "%s.rope.freq_base", arch);
    cr_assert_eq(mp_gguf_add_f32(w, key, hp->rope_freq_base, &err), MP_OK);
    snprintf(key, sizeof key, "%s.attention.layer_norm_rms_epsilon", arch);
    cr_assert_eq(mp_gguf_add_f32(w, key, hp->rms_eps, &err), MP_OK);
    snprintf(key, sizeof key, "%s.expert_weights_norm", arch);
    cr_assert_eq(mp_gguf_add_bool(w, key, hp->expert_weights_norm, &err), MP_OK);
    if (hp->n_swa) {
        snprintf(key, sizeof key, "%s.attention.sliding_window", arch);
        cr_assert_eq(mp_gguf_add_u32(w, key, (uint32_t)hp->n_swa, &err), MP_OK);
    }
    if (hp->rope_yarn_factor > 0 || o->rope_scaling) { /* llama.cpp's keys; the betas left to their defaults */
        snprintf(key, sizeof key, "%s.rope.scaling.type", arch);
        cr_assert_eq(mp_gguf_add_str(w, key, o->rope_scaling ? o->rope_scaling : "yarn", &err), MP_OK);
        snprintf(key, sizeof key, "%s.rope.scaling.factor", arch);
        cr_assert_eq(mp_gguf_add_f32(w, key, o->yarn_factor ? o->yarn_factor : hp->rope_yarn_factor, &err), MP_OK);
        snprintf(key, sizeof key, "%s.rope.scaling.original_context_length", arch);
        cr_assert_eq(mp_gguf_add_u32(w, key, (uint32_t)(hp->rope_yarn_orig_ctx ? hp->rope_yarn_orig_ctx : hp->n_ctx_train),
                                     &err), MP_OK);
    }
    mp_vocab v = {0};
    if (o->vocab) {
        size_t clen = 0;
        const char *corpus = mp_vocab_default_corpus(&clen);
        cr_assert_eq(mp_vocab_build(corpus, clen, hp->n_vocab, "qwen2", &v, &err), MP_OK, "%s", err.msg);
        cr_assert_eq(mp_gguf_add_str(w, "tokenizer.ggml.model", "gpt2", &err), MP_OK);
        cr_assert_eq(mp_gguf_add_str(w, "tokenizer.ggml.pre", "qwen2", &err), MP_OK);
        cr_assert_eq(mp_gguf_add_arr_str(w, "tokenizer.ggml.tokens", (const char *const *)v.tokens,
                                         (uint64_t)v.n_vocab, &err), MP_OK, "%s", err.msg);
        cr_assert_eq(mp_gguf_add_arr(w, "tokenizer.ggml.token_type", MP_GGUF_INT32, v.types,
                                     (uint64_t)v.n_vocab, &err), MP_OK, "%s", err.msg);
        cr_assert_eq(mp_gguf_add_arr_str(w, "tokenizer.ggml.merges", (const char *const *)v.merges,
                                         (uint64_t)v.n_merges, &err), MP_OK, "%s", err.msg);
        cr_assert_eq(mp_gguf_add_u32(w, "tokenizer.ggml.bos_token_id", (uint32_t)v.bos_id, &err), MP_OK);
        cr_assert_eq(mp_gguf_add_u32(w, "tokenizer.ggml.eos_token_id", (uint32_t)v.eos_id, &err), MP_OK);
        cr_assert_eq(mp_gguf_add_u32(w, "tokenizer.ggml.eot_token_id", (uint32_t)v.eot_id, &err), MP_OK);
        if (o->add_bos)
            cr_assert_eq(mp_gguf_add_bool(w, "tokenizer.ggml.add_bos_token", true, &err), MP_OK);
        mp_vocab_free(&v);
    }
    g_tensor_counter = 0;
    each_tensor(m, o, w, add_tensor);
    g_tensor_counter = 0;
    each_tensor(m, o, w, write_tensor);
    cr_assert_eq(mp_gguf_writer_finish(w, &err), MP_OK, "%s", err.msg);
}

static char gguf_dir[128];

static const char *tmp_path(const char *name)
{
    static char p[256];
    if (!gguf_dir[0]) {
        snprintf(gguf_dir, sizeof gguf_dir, "/tmp/mp_test_forward_XXXXXX");
        cr_assert_not_null(mkdtemp(gguf_dir));
    }
    snprintf(p, sizeof p, "%s/%s", gguf_dir, name);
    return p;
}

static void expect_load_error(const mp_model *m, const gguf_opts *o, mp_status code,
                              const char *needle)
{
    const char *path = tmp_path("bad.gguf");
    write_gguf(path, m, o);
    mp_model *loaded = NULL;
    mp_error err = {0};
    cr_assert_eq(mp_model_load(path, &loaded, &err), code, "got %d: %s", err.code, err.msg);
    cr_assert_null(loaded);
    cr_assert(strstr(err.msg, path), "error does not name the file: %s", err.msg);
    cr_assert(strstr(err.msg, needle), "error lacks '%s': %s", needle, err.msg);
    cr_assert_null(strchr(err.msg, '\n'));
    unlink(path);
}

/* The logits of 5 random tokens through two models (an in-memory one and its file) are equal, bit
 * for bit (the vocabulary is at most 40 in these tests) */
static void expect_same_logits(const mp_model *want, const mp_model *got, uint64_t seed)
{
    mp_error err = {0};
    cr_assert_leq(want->hp.n_vocab, 40, "the logit buffers hold 40 a token");
    int32_t tok[5];
    random_tokens(tok, 5, want->hp.n_vocab);
    float a1[5 * 40], a2[5 * 40];
    mp_session *s1 = new_session(want, 2, 0, 8, NULL, NULL), *s2 = new_session(got, 2, 0, 8, NULL, NULL);
    cr_assert_eq(mp_session_eval(s1, tok, 5, true, a1, &err), MP_OK, "%s", err.msg);
    cr_assert_eq(mp_session_eval(s2, tok, 5, true, a2, &err), MP_OK, "%s", err.msg);
    cr_assert_eq(memcmp(a1, a2, sizeof a1), 0, "%s seed %llu", mp_arch_get(want->hp.arch)->name,
                 (unsigned long long)seed);
    mp_session_free(s1);
    mp_session_free(s2);
}

/* A file that stores each expert as its own tensor (as llama.cpp's converter wrote Mixtral before it
 * merged them) loads with merged expert tensors holding the same bytes, and gives the same logits;
 * an expert left out, or one of another shape, is a one-line error naming the tensor. */
Test(model, experts_stored_one_tensor_each)
{
    const mp_arch archs[] = {MP_ARCH_QWEN3MOE, MP_ARCH_OLMOE, MP_ARCH_MIXTRAL, MP_ARCH_QWEN2MOE, MP_ARCH_GPTOSS};
    for (int a = 0; a < 5; a++) {
        mp_hparams hp = small_hparams(archs[a]);
        const uint64_t seed = time_seed();
        test_model *tm = build_model(&hp, seed);
        const char *path = tmp_path("split.gguf");
        const gguf_opts o = {.split_experts = true};
        write_gguf(path, &tm->m, &o);
        mp_model *m = NULL;
        mp_error err = {0};
        cr_assert_eq(mp_model_load(path, &m, &err), MP_OK, "%s", err.msg);
        cr_assert_not_null(m->expert_copy, "the experts were not merged");
        for (int64_t il = 0; il < hp.n_layer; il++) {
            const mp_tensor *x[3] = {&m->layers[il].gate_exps, &m->layers[il].up_exps, &m->layers[il].down_exps};
            const mp_tensor *y[3] = {&tm->m.layers[il].gate_exps, &tm->m.layers[il].up_exps,
                                     &tm->m.layers[il].down_exps};
            for (int k = 0; k < 3; k++) {
                cr_assert(x[k]->type == y[k]->type && x[k]->ne[0] == y[k]->ne[0] && x[k]->ne[1] == y[k]->ne[1] &&
                          x[k]->ne[2] == y[k]->ne[2] && x[k]->nbytes == y[k]->nbytes &&
                          x[k]->row_bytes == y[k]->row_bytes, "layer %lld kind %d: another tensor", (long long)il, k);
                cr_assert_eq(memcmp(x[k]->data, y[k]->data, y[k]->nbytes), 0, "layer %lld kind %d: other bytes",
                             (long long)il, k);
                cr_assert_eq((uintptr_t)x[k]->data % 64, 0, "a merged tensor not 64-byte aligned");
            }
        }
        expect_same_logits(&tm->m, m, seed);
        mp_model_free(m);
        unlink(path);
        char want[160];
        snprintf(want, sizeof want, "tensor blk.1.ffn_up.2.weight: missing (layer 1 stores its experts one tensor "
                 "each: expected %lld of them)", (long long)hp.n_expert);
        expect_load_error(&tm->m, &(gguf_opts){.split_experts = true, .skip_tensor = "blk.1.ffn_up.2.weight"},
                          MP_ERR_FORMAT, want);
        expect_load_error(&tm->m, &(gguf_opts){.split_experts = true, .bad_tensor = "blk.0.ffn_down.1.weight"},
                          MP_ERR_FORMAT, "tensor blk.0.ffn_down.1.weight: ");
        expect_load_error(&tm->m, &(gguf_opts){.split_experts = true, .bad_tensor = "blk.0.ffn_down.1.weight"},
                          MP_ERR_FORMAT, "expected one type and shape for a layer's experts");
        free_model(tm);
    }
    rmdir(gguf_dir); /* empty by now: its models are unlinked */
}

/* A file whose gate and up experts share one tensor per layer (blk.N.ffn_gate_up_exps.weight, each
 * expert's gate rows then its up rows: llama.cpp's --fuse-gate-up-exps) loads with separate tensors
 * holding the same bytes, and gives the same logits; an odd row count, or fewer experts than the
 * model has, is a one-line error naming the tensor. */
Test(model, experts_with_gate_and_up_fused)
{
    mp_hparams hp = small_hparams(MP_ARCH_QWEN3MOE);
    const uint64_t seed = time_seed();
    test_model *tm = build_model(&hp, seed);
    const char *path = tmp_path("fused.gguf");
    write_gguf(path, &tm->m, &(gguf_opts){.fuse_gate_up = true});
    mp_model *m = NULL;
    mp_error err = {0};
    cr_assert_eq(mp_model_load(path, &m, &err), MP_OK, "%s", err.msg);
    cr_assert_not_null(m->expert_copy, "the fused experts were not laid out one tensor per kind");
    for (int64_t il = 0; il < hp.n_layer; il++) {
        const mp_tensor *x[2] = {&m->layers[il].gate_exps, &m->layers[il].up_exps};
        const mp_tensor *y[2] = {&tm->m.layers[il].gate_exps, &tm->m.layers[il].up_exps};
        for (int k = 0; k < 2; k++)
            cr_assert(x[k]->ne[1] == y[k]->ne[1] && x[k]->nbytes == y[k]->nbytes &&
                          memcmp(x[k]->data, y[k]->data, y[k]->nbytes) == 0,
                      "layer %lld kind %d: other bytes", (long long)il, k);
    }
    expect_same_logits(&tm->m, m, seed);
    mp_model_free(m);
    unlink(path);
    expect_load_error(&tm->m, &(gguf_opts){.fuse_gate_up = true, .bad_tensor = "blk.1.ffn_gate_up_exps.weight"},
                      MP_ERR_FORMAT, "tensor blk.1.ffn_gate_up_exps.weight: ");
    expect_load_error(&tm->m, &(gguf_opts){.fuse_gate_up = true, .bad_tensor = "blk.1.ffn_gate_up_exps.weight"},
                      MP_ERR_FORMAT, "rows per expert: expected an even count");
    char want[160];
    snprintf(want, sizeof want, "tensor blk.0.ffn_gate_up_exps.weight: 3 dimensions, %lld experts: expected 3 "
             "dimensions", (long long)hp.n_expert - 1);
    expect_load_error(&tm->m, &(gguf_opts){.fuse_gate_up = true, .fused_experts = hp.n_expert - 1},
                      MP_ERR_FORMAT, want);
    free_model(tm);
    rmdir(gguf_dir);
}

/* A model split in several files (llama.cpp's gguf-split: PREFIX-0000k-of-0000n.gguf, the metadata
 * in the first) opens from its first file and gives the logits of the one-file model; another file
 * of the set, a missing one or a disagreeing shard number is a one-line error that names it. */
Test(model, a_model_split_in_files)
{
    mp_hparams hp = small_hparams(MP_ARCH_QWEN3MOE);
    const uint64_t seed = time_seed();
    test_model *tm = build_model(&hp, seed);
    char p[3][512];
    for (int k = 0; k < 3; k++) {
        snprintf(p[k], sizeof p[k], "%s", tmp_path("m"));
        snprintf(p[k] + strlen(p[k]), sizeof p[k] - strlen(p[k]), "-%05d-of-00003.gguf", k + 1);
        write_gguf(p[k], &tm->m, &(gguf_opts){.shard = k, .n_shards = 3});
    }
    mp_model *m = NULL;
    mp_error err = {0};
    cr_assert_eq(mp_model_load(p[0], &m, &err), MP_OK, "%s", err.msg);
    cr_assert_eq(mp_gguf_n_files(m->gguf), 3);
    struct stat a, b, c;
    cr_assert(stat(p[0], &a) == 0 && stat(p[1], &b) == 0 && stat(p[2], &c) == 0);
    cr_assert_eq(mp_gguf_file_size(m->gguf), (uint64_t)(a.st_size + b.st_size + c.st_size));
    expect_same_logits(&tm->m, m, seed);
    mp_model_free(m);
    /* the second file opened instead of the first */
    cr_assert_eq(mp_model_load(p[1], &m, &err), MP_ERR_FORMAT);
    cr_assert(strstr(err.msg, "shard 2 of a model split in 3 files: open the first") && strstr(err.msg, "m-00001-of-00003.gguf"),
              "%s", err.msg);
    /* a file missing */
    unlink(p[2]);
    cr_assert_eq(mp_model_load(p[0], &m, &err), MP_ERR_IO, "%s", err.msg);
    cr_assert(strstr(err.msg, "is split in 3 files: ") && strstr(err.msg, "m-00003-of-00003.gguf"), "%s", err.msg);
    cr_assert_null(strchr(err.msg, '\n'));
    /* the third file written as a second one */
    write_gguf(p[2], &tm->m, &(gguf_opts){.shard = 1, .n_shards = 3});
    cr_assert_eq(mp_model_load(p[0], &m, &err), MP_ERR_FORMAT);
    cr_assert(strstr(err.msg, "split.no 1 of split.count 3: expected shard 2 of 3"), "%s", err.msg);
    for (int k = 0; k < 3; k++)
        unlink(p[k]);
    free_model(tm);
    rmdir(gguf_dir); /* empty by now: its models are unlinked */
}

Test(model, gguf_round_trip_gives_the_same_logits)
{
    const mp_arch archs[] = {MP_ARCH_QWEN3MOE, MP_ARCH_OLMOE, MP_ARCH_MIXTRAL, MP_ARCH_QWEN2MOE, MP_ARCH_GPTOSS};
    for (int a = 0; a < 5; a++) {
        mp_hparams hp = small_hparams(archs[a]);
        const uint64_t seed = time_seed();
        test_model *tm = build_model(&hp, seed);
        const char *path = tmp_path("ok.gguf");
        gguf_opts o = {.tied = archs[a] == MP_ARCH_OLMOE};
        if (o.tied)
            tm->m.output = tm->m.tok_embd; /* the in-memory twin of a file without output.weight */
        write_gguf(path, &tm->m, &o);
        mp_model *m = NULL;
        mp_error err = {0};
        cr_assert_eq(mp_model_load(path, &m, &err), MP_OK, "%s", err.msg);
        const mp_hparams *x = &m->hp, *y = &tm->m.hp;
        cr_assert(x->arch == y->arch && x->n_layer == y->n_layer && x->n_embd == y->n_embd &&
                  x->n_head == y->n_head && x->n_head_kv == y->n_head_kv &&
                  x->head_dim == y->head_dim && x->rot_dim == y->rot_dim &&
                  x->n_expert == y->n_expert && x->n_expert_used == y->n_expert_used &&
                  x->n_ff_exp == y->n_ff_exp && x->n_vocab == y->n_vocab &&
                  x->n_ctx_train == y->n_ctx_train && x->rope_freq_base == y->rope_freq_base &&
                  x->rms_eps == y->rms_eps && x->expert_weights_norm == y->expert_weights_norm &&
                  x->n_swa == y->n_swa && x->rope_yarn_factor == y->rope_yarn_factor &&
                  x->rope_yarn_orig_ctx == y->rope_yarn_orig_ctx && x->rope_yarn_truncate == y->rope_yarn_truncate,
                  "hparams differ after the round trip");
        cr_assert_eq(m->output.data == m->tok_embd.data, o.tied);
        cr_assert_eq(mp_model_expert_bytes(m, 0), mp_model_expert_bytes(&tm->m, 0));
        cr_assert_eq(mp_model_dense_bytes(m), mp_model_dense_bytes(&tm->m));
        expect_same_logits(&tm->m, m, seed);
        mp_model_free(m);
        unlink(path);
        free_model(tm);
    }
    rmdir(gguf_dir); /* empty by now: its models are unlinked */
}

Test(model, gguf_errors_name_file_and_tensor)
{
    mp_hparams hp = small_hparams(MP_ARCH_QWEN3MOE);
    test_model *tm = build_model(&hp, time_seed());
    expect_load_error(&tm->m, &(gguf_opts){.skip_tensor = "blk.1.ffn_up_exps.weight"}, MP_ERR_FORMAT,
                      "tensor blk.1.ffn_up_exps.weight: missing");
    expect_load_error(&tm->m, &(gguf_opts){.skip_tensor = "blk.0.attn_q_norm.weight"}, MP_ERR_FORMAT,
                      "tensor blk.0.attn_q_norm.weight: missing");
    expect_load_error(&tm->m, &(gguf_opts){.bad_tensor = "blk.1.ffn_down_exps.weight"}, MP_ERR_FORMAT,
                      "tensor blk.1.ffn_down_exps.weight: expected shape [20, 24, 8], found [20, 23, 8]");
    expect_load_error(&tm->m, &(gguf_opts){.arch = "deepseek2"}, MP_ERR_UNSUPPORTED,
                      "architecture 'deepseek2' is not supported");
    /* RoPE scaling: another type is refused, not ignored; YaRN needs a factor >= 1 */
    expect_load_error(&tm->m, &(gguf_opts){.rope_scaling = "linear"}, MP_ERR_UNSUPPORTED,
                      "qwen3moe.rope.scaling.type: 'linear' is not supported (expected none or yarn)");
    expect_load_error(&tm->m, &(gguf_opts){.rope_scaling = "yarn", .yarn_factor = 0.5f}, MP_ERR_FORMAT,
                      "qwen3moe.rope.scaling.factor: 0.5, expected a finite value >= 1");
    expect_load_error(&tm->m, &(gguf_opts){.skip_key = "block_count"}, MP_ERR_FORMAT,
                      "qwen3moe.block_count: missing");
    expect_load_error(&tm->m, &(gguf_opts){.skip_key = "expert_feed_forward_length"}, MP_ERR_FORMAT,
                      "qwen3moe.feed_forward_length: missing");
    free_model(tm);
    /* qwen2moe's own tensors and key */
    hp = small_hparams(MP_ARCH_QWEN2MOE);
    tm = build_model(&hp, time_seed());
    expect_load_error(&tm->m, &(gguf_opts){.skip_tensor = "blk.1.attn_k.bias"}, MP_ERR_FORMAT,
                      "tensor blk.1.attn_k.bias: missing");
    expect_load_error(&tm->m, &(gguf_opts){.skip_tensor = "blk.0.ffn_gate_inp_shexp.weight"}, MP_ERR_FORMAT,
                      "tensor blk.0.ffn_gate_inp_shexp.weight: missing");
    expect_load_error(&tm->m, &(gguf_opts){.bad_tensor = "blk.1.ffn_down_shexp.weight"}, MP_ERR_FORMAT,
                      "tensor blk.1.ffn_down_shexp.weight: expected shape [28, 24], found [28, 23]");
    expect_load_error(&tm->m, &(gguf_opts){.skip_key = "expert_shared_feed_forward_length"}, MP_ERR_FORMAT,
                      "qwen2moe.expert_shared_feed_forward_length: missing");
    free_model(tm);
    mp_model *m = NULL;
    mp_error err = {0};
    cr_assert_eq(mp_model_load(tmp_path("absent.gguf"), &m, &err), MP_ERR_IO);
    rmdir(gguf_dir); /* empty by now: its models are unlinked */
}

/* `moeplan run` end to end on a tiny generated model with a tokenizer; flags parsed strictly. */
Test(run, cli_generates_and_rejects_bad_flags)
{
    mp_hparams hp = small_hparams(MP_ARCH_QWEN3MOE);
    hp.n_vocab = 300;
    test_model *tm = build_model(&hp, time_seed());
    char path[256];
    snprintf(path, sizeof path, "%s", tmp_path("run.gguf"));
    write_gguf(path, &tm->m, &(gguf_opts){.vocab = true});
    char *ok[] = {"run", "-m", path, "-p", "Hello world", "-n", "5", "-t", "2", "--temp", "0.7",
                  "--top-k", "20", "--top-p", "0.9", "--seed", "7", NULL};
    cr_assert_eq(mp_cmd_run(17, ok), 0);
    char *raw[] = {"run", "-m", path, "-p", "def f(x):", "--raw", "-n", "3", NULL};
    cr_assert_eq(mp_cmd_run(8, raw), 0);
    char *ctx[] = {"run", "-m", path, "-p", "a b c d e f g h i j k l m n o p", "--raw", "--ctx", "4", NULL};
    cr_assert_eq(mp_cmd_run(8, ctx), 1);
    const char *bad[][2] = {{"-n", "-1"}, {"-n", "12x"}, {"-t", "0"}, {"--temp", "nan"},
                            {"--top-p", "1.5"}, {"--seed", "-3"}, {"--ctx", ""}, {"--top-k", "1e3"}};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        char *argv[] = {"run", "-m", path, "-p", "hi", (char *)bad[i][0], (char *)bad[i][1], NULL};
        cr_assert_eq(mp_cmd_run(7, argv), 2, "%s %s", bad[i][0], bad[i][1]);
    }
    char *none[] = {"run", "-m", path, NULL};
    cr_assert_eq(mp_cmd_run(3, none), 2);
    char *missing[] = {"run", "-m", (char *)tmp_path("absent.gguf"), "-p", "hi", NULL};
    cr_assert_eq(mp_cmd_run(5, missing), 1);
    char *help[] = {"run", "--help", NULL};
    cr_assert_eq(mp_cmd_run(2, help), 0);
    unlink(path);
    rmdir(gguf_dir);
    free_model(tm);
}

/* The prompt's tokens from `moeplan run`'s summary line ("prompt tokens N"), -1 when absent. */
static long run_prompt_tokens(const char *model)
{
    static char out[1 << 14];
    char args[1024];
    snprintf(args, sizeof args, "run -m '%s' -p 'Hello world' -n 1 --raw -t 2", model);
    cr_assert_eq(mp_test_moeplan(gguf_dir, args, MP_TEST_STDERR, out, sizeof out), 0, "%s", out);
    const char *at = strstr(out, "prompt tokens ");
    return at ? strtol(at + strlen("prompt tokens "), NULL, 10) : -1;
}

/* A vocabulary that asks for a BOS gets exactly one in front of the prompt (the encoder adds it;
 * `run` once prepended it again). */
Test(run, one_bos_where_the_vocabulary_asks_for_it)
{
    mp_hparams hp = small_hparams(MP_ARCH_QWEN3MOE);
    hp.n_vocab = 300;
    test_model *tm = build_model(&hp, time_seed());
    char plain[256], bos[256];
    snprintf(plain, sizeof plain, "%s", tmp_path("plain.gguf"));
    snprintf(bos, sizeof bos, "%s", tmp_path("bos.gguf"));
    write_gguf(plain, &tm->m, &(gguf_opts){.vocab = true});
    write_gguf(bos, &tm->m, &(gguf_opts){.vocab = true, .add_bos = true});
    const long n_plain = run_prompt_tokens(plain), n_bos = run_prompt_tokens(bos);
    cr_assert_gt(n_plain, 0);
    cr_assert_eq(n_bos, n_plain + 1, "with add_bos_token: %ld prompt tokens, without: %ld", n_bos, n_plain);
    char cmd[300]; /* the models and the command's captured output */
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", gguf_dir);
    cr_assert_eq(system(cmd), 0);
    free_model(tm);
}

/* ---------------------------------------------------------------- quantized weights */

/* Quantize every matrix of an F32 model to `type` (norms and router stay F32), and replace the
 * F32 data by its dequantized values so that the float64 reference sees the very weights the
 * runtime multiplies. The runtime then differs from the reference only by the activation
 * quantization (Q8_0 / Q8_K) of its dot products. */
static void quantize_model(test_model *tm, test_model *qm, int type)
{
    const mp_type_ops *ops = mp_type_ops_get(type);
    cr_assert_not_null(ops);
    qm->m = tm->m;
    qm->m.layers = qm->layers;
    memcpy(qm->layers, tm->layers, sizeof qm->layers);
    for (int64_t il = -1; il < tm->m.hp.n_layer; il++) {
        mp_tensor *src[5], *dst[5];
        int n = 0;
        if (il < 0) {
            src[n] = &tm->m.tok_embd, dst[n++] = &qm->m.tok_embd;
            src[n] = &tm->m.output, dst[n++] = &qm->m.output;
        } else {
            mp_layer *a = &tm->layers[il], *b = &qm->layers[il];
            src[n] = &a->wq, dst[n++] = &b->wq;
            src[n] = &a->wo, dst[n++] = &b->wo;
            src[n] = &a->gate_exps, dst[n++] = &b->gate_exps;
            src[n] = &a->up_exps, dst[n++] = &b->up_exps;
            src[n] = &a->down_exps, dst[n++] = &b->down_exps;
        }
        for (int i = 0; i < n; i++) {
            const int64_t rows = src[i]->ne[1] * src[i]->ne[2], cols = src[i]->ne[0];
            const size_t rb = mp_type_row_bytes(type, cols);
            cr_assert_gt(rb, 0);
            char *q = malloc(rb * (size_t)rows);
            cr_assert(q);
            qm->bufs[qm->n_bufs++] = (float *)q;
            float *f = (float *)src[i]->data;
            for (int64_t r = 0; r < rows; r++) {
                ops->quantize_row(f + r * cols, q + (size_t)r * rb, cols);
                ops->dequantize_row(q + (size_t)r * rb, f + r * cols, cols);
            }
            *dst[i] = *src[i];
            dst[i]->type = type;
            dst[i]->data = q;
            dst[i]->row_bytes = rb;
            dst[i]->nbytes = rb * (size_t)rows;
        }
    }
    mp_error err = {0};
    cr_assert_eq(mp_model_validate(&qm->m, &err), MP_OK, "%s", err.msg);
}

static void quantized_matches_reference(int type, double tol)
{
    mp_hparams hp = small_hparams(MP_ARCH_QWEN3MOE);
    hp.n_layer = 1;
    hp.n_embd = 256; /* K-quant rows are whole 256-element blocks */
    hp.n_head = 4;
    hp.n_head_kv = 2;
    hp.head_dim = 64;
    hp.rot_dim = 64;
    hp.n_ff_exp = 256;
    hp.n_expert = 6;
    hp.n_expert_used = 2;
    uint64_t seed = time_seed();
    enum { N = 5 };
    int32_t tok[N];
    double *ref = malloc(N * (size_t)hp.n_vocab * sizeof *ref);
    static ref_routing rr;
    for (int attempt = 0;; attempt++) {
        test_model *tm = build_model(&hp, seed);
        test_model *qm = calloc(1, sizeof *qm);
        quantize_model(tm, qm, type);
        random_tokens(tok, N, hp.n_vocab);
        ref_forward(&tm->m, tok, N, ref, &rr, NULL); /* dequantized weights */
        /* activation rounding moves router probabilities by ~1e-3: compare logits only when
         * the runtime chose the reference's experts */
        bool clear = true;
        float *got = malloc(N * (size_t)hp.n_vocab * sizeof *got);
        static capture c;
        memset(&c, 0, sizeof c);
        mp_hooks hooks = {.user = &c, .step_begin = cap_step_begin, .routing = cap_routing};
        mp_session *s = new_session(&qm->m, 3, 2, 8, &hooks, NULL);
        mp_error err = {0};
        cr_assert_eq(mp_session_eval(s, tok, N, true, got, &err), MP_OK, "%s", err.msg);
        for (int t = 0; t < N; t++)
            for (int k = 0; k < hp.n_expert_used; k++)
                clear = clear && c.ids[t][0][k] == rr.ids[t][0][k];
        if (clear) {
            double ss = 0, ss_diff = 0, max_diff = 0;
            for (int64_t i = 0; i < N * hp.n_vocab; i++) {
                ss += ref[i] * ref[i];
                ss_diff += (got[i] - ref[i]) * (got[i] - ref[i]);
                max_diff = fmax(max_diff, fabs(got[i] - ref[i]));
            }
            const double rms = sqrt(ss / (double)(N * hp.n_vocab));
            const double rms_diff = sqrt(ss_diff / (double)(N * hp.n_vocab));
            cr_assert_gt(rms, 0.1);
            cr_assert(rms_diff < tol * rms && max_diff < 4 * tol * rms,
                      "%s seed %llu: |runtime - reference| rms %.4g max %.4g, logit rms %.4g",
                      mp_type_name(type), (unsigned long long)seed, rms_diff, max_diff, rms);
        }
        mp_session_free(s);
        free(got);
        free_model(qm);
        free_model(tm);
        if (clear)
            break;
        /* routing flipped by activation rounding near a tie: not a defect, try another model */
        cr_assert_lt(attempt, 10, "seed %llu: routing differed in 10 models", (unsigned long long)seed);
        seed += 104729;
    }
    free(ref);
}

Test(forward, q8_0_weights_match_reference) { quantized_matches_reference(MP_TYPE_Q8_0, 0.02); }
Test(forward, q4_0_weights_match_reference) { quantized_matches_reference(MP_TYPE_Q4_0, 0.02); }
Test(forward, q4_1_weights_match_reference) { quantized_matches_reference(MP_TYPE_Q4_1, 0.02); }
Test(forward, q5_0_weights_match_reference) { quantized_matches_reference(MP_TYPE_Q5_0, 0.02); }
Test(forward, q5_1_weights_match_reference) { quantized_matches_reference(MP_TYPE_Q5_1, 0.02); }
Test(forward, iq4_nl_weights_match_reference) { quantized_matches_reference(MP_TYPE_IQ4_NL, 0.02); }
Test(forward, mxfp4_weights_match_reference) { quantized_matches_reference(MP_TYPE_MXFP4, 0.02); }
Test(forward, iq4_xs_weights_match_reference) { quantized_matches_reference(MP_TYPE_IQ4_XS, 0.02); }
/* Tolerances: rounding the activations to 8 bits (Q8_0, Q8_K) costs ~0.6% per dot product,
 * compounded over seven matrices and two norms: ~1% of the logits' rms; a wrong block layout
 * or scale costs 100%. F16 weights keep float activations: only the weights' rounding. */
Test(forward, q4_k_weights_match_reference) { quantized_matches_reference(MP_TYPE_Q4_K, 0.02); }
Test(forward, q5_k_weights_match_reference) { quantized_matches_reference(MP_TYPE_Q5_K, 0.02); }
Test(forward, q3_k_weights_match_reference) { quantized_matches_reference(MP_TYPE_Q3_K, 0.02); }
Test(forward, q2_k_weights_match_reference) { quantized_matches_reference(MP_TYPE_Q2_K, 0.02); }
Test(forward, q6_k_weights_match_reference) { quantized_matches_reference(MP_TYPE_Q6_K, 0.02); }
Test(forward, f16_weights_match_reference) { quantized_matches_reference(MP_TYPE_F16, 0.001); }

/* ---------------------------------------------------------------- RoPE with a table */

#include "kernels/ops.h"

/* the table of plain RoPE (no YaRN) at base */
static void rope_cache_base(float *cs, int64_t rot, int64_t pos, double base)
{
    double theta[256];
    for (int64_t i = 0; i < rot / 2; i++)
        theta[i] = pow(base, -2.0 * (double)i / (double)rot);
    mp_rope_cache(cs, rot, pos, theta, 1.0f);
}

Test(ops, rope_tables_match_the_direct_rotation)
{
    const uint64_t seed = time_seed();
    rng_state = seed;
    enum { HD = 64 };
    float cs[HD], a[HD], b[HD], c[HD];
    const int64_t rots[] = {64, 32, 2};
    for (int ri = 0; ri < 3; ri++) {
        for (int64_t pos = 0; pos < 3000; pos += 37) {
            const int64_t rot = rots[ri];
            for (int i = 0; i < HD; i++)
                a[i] = b[i] = c[i] = (float)rnd();
            rope_cache_base(cs, rot, pos, 1e6f);
            mp_rope_neox(a, HD, rot, pos, 1e6f);
            mp_rope_neox_cs(b, rot, cs);
            cr_assert_eq(memcmp(a, b, sizeof a), 0, "seed %llu rot %lld pos %lld",
                         (unsigned long long)seed, (long long)rot, (long long)pos);
            float orig[HD];
            memcpy(orig, c, sizeof orig);
            mp_rope_norm_cs(c, rot, cs);
            for (int64_t i = 0; i < rot / 2; i++) {
                const double th = (double)pos * pow(1e6, -2.0 * (double)i / (double)rot);
                const double x0 = orig[2 * i], x1 = orig[2 * i + 1];
                cr_assert(fabs(c[2 * i] - (x0 * cos(th) - x1 * sin(th))) < 1e-5, "seed %llu", (unsigned long long)seed);
                cr_assert(fabs(c[2 * i + 1] - (x0 * sin(th) + x1 * cos(th))) < 1e-5, "seed %llu", (unsigned long long)seed);
            }
            for (int64_t i = rot; i < HD; i++) /* dimensions past rot_dim are untouched */
                cr_assert_eq(c[i], orig[i]);
        }
    }
}

/* The softmax with a sink (attention sinks): against float64 on fresh random logits, the sink's
 * share dropped; with sink -inf the same bits as mp_softmax */
Test(ops, softmax_sink_matches_float64_and_softmax)
{
    const uint64_t seed = time_seed();
    rng_state = seed;
    enum { N = 37 };
    float a[N], b[N], c[N];
    for (int rep = 0; rep < 20; rep++) {
        for (int i = 0; i < N; i++)
            a[i] = b[i] = c[i] = (float)(6.0 * rnd());
        const float sink = (float)(6.0 * rnd());
        double mx = sink, sum = 0;
        for (int i = 0; i < N; i++)
            mx = a[i] > mx ? a[i] : mx;
        for (int i = 0; i < N; i++)
            sum += exp(a[i] - mx);
        sum += exp(sink - mx);
        mp_softmax_sink(a, N, sink);
        double total = 0;
        for (int i = 0; i < N; i++) {
            const double want = exp((double)c[i] - mx) / sum;
            cr_assert(fabs(a[i] - want) <= 1e-6 * want + 1e-9, "seed %llu: %d: %.9g, want %.9g",
                      (unsigned long long)seed, i, a[i], want);
            total += a[i];
        }
        cr_assert(total < 1.0, "seed %llu: the sink's share is dropped", (unsigned long long)seed);
        memcpy(a, c, sizeof a);
        mp_softmax(b, N);
        mp_softmax_sink(a, N, -INFINITY);
        cr_assert_eq(memcmp(a, b, sizeof a), 0, "seed %llu", (unsigned long long)seed);
    }
}
