/* runtime/model.c — architecture traits, descriptor validation and byte accounting (model.h).
 *
 * The GGUF loader (runtime/model_load.c) and in-memory builders (tests) both finish with
 * mp_model_validate, so the invariants of model.h hold for every descriptor the forward pass
 * sees, whichever way it was made.
 */
#include "runtime/model.h"

#include <inttypes.h>
#include <math.h>
#ifndef M_PI
#define M_PI 3.14159265358979323846
#endif
#include <stdio.h>
#include <string.h>

#include "kernels/quant.h"

static const mp_arch_traits arch_traits[] = {
    [MP_ARCH_QWEN3MOE] = {.name = "qwen3moe", .qk_norm = MP_QK_NORM_PER_HEAD, .rope = MP_ROPE_NEOX,
                          .default_weights_norm = true, .ffn_norm_name = "ffn_norm", .yarn_truncate = true},
    [MP_ARCH_OLMOE] = {.name = "olmoe", .qk_norm = MP_QK_NORM_FULL, .rope = MP_ROPE_NEOX,
                       .ffn_norm_name = "ffn_norm", .yarn_truncate = true},
    [MP_ARCH_MIXTRAL] = {.name = "mixtral", .qk_norm = MP_QK_NORM_NONE, .rope = MP_ROPE_NORM,
                         .default_weights_norm = true, .ffn_norm_name = "ffn_norm", .yarn_truncate = true},
    /* Qwen1.5-MoE / Qwen2-MoE: Qwen2's attention (Q/K/V biases, no q/k norm), top-k weights as
     * the softmax gave them, and a shared expert */
    [MP_ARCH_QWEN2MOE] = {.name = "qwen2moe", .qk_norm = MP_QK_NORM_NONE, .rope = MP_ROPE_NEOX, .qkv_bias = true,
                          .shared_expert = true, .ffn_norm_name = "ffn_norm", .yarn_truncate = true},
    /* gpt-oss-20b / -120b: biases on every projection but the head, sinks, a 128-position window
     * on even layers, softmax over the k chosen logits (= the renormalized top-k of the softmax),
     * YaRN over the whole correction range */
    [MP_ARCH_GPTOSS] = {.name = "gpt-oss", .qk_norm = MP_QK_NORM_NONE, .rope = MP_ROPE_NEOX,
                        .default_weights_norm = true, .qkv_bias = true, .attn_out_bias = true, .attn_sinks = true,
                        .swa_period = 2, .moe_bias = true, .act = MP_ACT_SWIGLU_OAI,
                        .ffn_norm_name = "post_attention_norm", .yarn_truncate = false},
};

const mp_arch_traits *mp_arch_get(mp_arch arch)
{
    if ((int)arch < 0 || (size_t)arch >= sizeof arch_traits / sizeof arch_traits[0])
        return NULL;
    return &arch_traits[arch];
}

int mp_arch_from_name(const char *name)
{
    for (size_t i = 0; i < sizeof arch_traits / sizeof arch_traits[0]; i++)
        if (!strcmp(arch_traits[i].name, name))
            return (int)i;
    return -1;
}

void mp_arch_names(char *buf, size_t cap)
{
    size_t off = 0;
    if (cap)
        buf[0] = '\0';
    for (size_t i = 0; i < sizeof arch_traits / sizeof arch_traits[0] && off < cap; i++)
        off += (size_t)snprintf(buf + off, cap - off, "%s%s", i ? ", " : "", arch_traits[i].name);
}

int64_t mp_layer_window(const mp_hparams *hp, int64_t il)
{
    const int period = mp_arch_get(hp->arch)->swa_period;
    if (period <= 0 || hp->n_swa <= 0 || il % period == period - 1)
        return 0;
    return hp->n_swa;
}

/* YaRN's dimension (of rot_dim) at which a frequency turns n_rot times over the original context */
static double yarn_corr_dim(double n_rot, double rot_dim, double base, double orig_ctx)
{
    return rot_dim * log(orig_ctx / (n_rot * 2.0 * M_PI)) / (2.0 * log(base));
}

void mp_rope_freqs(const mp_hparams *hp, double *theta, float *mscale)
{
    const int64_t half = hp->rot_dim / 2;
    const double base = hp->rope_freq_base, dim = (double)hp->rot_dim, factor = hp->rope_yarn_factor;
    for (int64_t i = 0; i < half; i++)
        theta[i] = pow(base, -2.0 * (double)i / dim);
    *mscale = 1.0f;
    if (!(factor > 1.0))
        return;
    double lo = yarn_corr_dim(hp->rope_yarn_beta_fast, dim, base, (double)hp->rope_yarn_orig_ctx);
    double hi = yarn_corr_dim(hp->rope_yarn_beta_slow, dim, base, (double)hp->rope_yarn_orig_ctx);
    if (hp->rope_yarn_truncate)
        lo = floor(lo), hi = ceil(hi);
    lo = lo > 0.0 ? lo : 0.0;
    hi = hi < dim - 1.0 ? hi : dim - 1.0;
    if (hi == lo)
        hi += 0.001;
    for (int64_t i = 0; i < half; i++) {
        double ramp = ((double)i - lo) / (hi - lo); /* 0: keep the frequency, 1: interpolate it */
        ramp = ramp < 0.0 ? 0.0 : ramp > 1.0 ? 1.0 : ramp;
        theta[i] = theta[i] / factor * ramp + theta[i] * (1.0 - ramp);
    }
    *mscale = (float)(0.1 * log(factor) + 1.0);
}

void mp_shape_format(const int64_t ne[4], char *buf, size_t cap)
{
    int nd = 4;
    while (nd > 1 && ne[nd - 1] == 1)
        nd--;
    size_t off = (size_t)snprintf(buf, cap, "[");
    for (int i = 0; i < nd && off < cap; i++)
        off += (size_t)snprintf(buf + off, cap - off, "%s%" PRId64, i ? ", " : "", ne[i]);
    if (off < cap)
        snprintf(buf + off, cap - off, "]");
}

static mp_status check_tensor(const char *where, const char *name, const mp_tensor *t,
                              int64_t ne0, int64_t ne1, int64_t ne2, bool float_only,
                              mp_error *err)
{
    if (!t->data)
        return mp_fail(err, MP_ERR_FORMAT, "%s: tensor %s: missing", where, name);
    const int64_t want[4] = {ne0, ne1, ne2, 1};
    if (memcmp(want, t->ne, sizeof want) != 0) {
        char ws[96], fs[96];
        mp_shape_format(want, ws, sizeof ws);
        mp_shape_format(t->ne, fs, sizeof fs);
        return mp_fail(err, MP_ERR_FORMAT, "%s: tensor %s: expected shape %s, found %s", where,
                       name, ws, fs);
    }
    const char *tn = mp_type_name(t->type);
    if (float_only ? t->type != MP_TYPE_F32 : !mp_type_supported(t->type)) {
        char ts[32];
        if (tn)
            snprintf(ts, sizeof ts, "%s", tn);
        else
            snprintf(ts, sizeof ts, "id %d", t->type);
        return mp_fail(err, MP_ERR_UNSUPPORTED, "%s: tensor %s: type %s is not supported%s", where,
                       name, ts, float_only ? " (norm weights and biases must be F32)" : "");
    }
    const size_t row_bytes = mp_type_row_bytes(t->type, ne0);
    if (row_bytes == 0 || t->row_bytes != row_bytes)
        return mp_fail(err, MP_ERR_FORMAT,
                       "%s: tensor %s: row of %" PRId64 " elements is not a whole number of %s "
                       "blocks or row_bytes %zu != %zu",
                       where, name, ne0, tn ? tn : "?", t->row_bytes, row_bytes);
    return MP_OK;
}

/* A float matrix that decides (a router, the shared expert's gate): F32, F16 or BF16, never
 * block-quantized (GGUF quantizers keep these unquantized for the same reason). */
static mp_status check_float_matrix(const char *where, const char *name, const mp_tensor *t, const char *what,
                                    mp_error *err)
{
    if (t->type != MP_TYPE_F32 && t->type != MP_TYPE_F16 && t->type != MP_TYPE_BF16)
        return mp_fail(err, MP_ERR_UNSUPPORTED, "%s: tensor %s: type %s is not supported (%s must be F32, F16 or "
                       "BF16)", where, name, mp_type_name(t->type) ? mp_type_name(t->type) : "?", what);
    return MP_OK;
}

/* The shared expert of layer il: its gate vector, gate/up (sharing an activation format, as the
 * routed experts do) and down. */
static mp_status validate_shared_expert(const char *where, int64_t il, const mp_layer *L, const mp_hparams *hp,
                                        mp_error *err)
{
    const int64_t E = hp->n_embd, F = hp->n_ff_shexp;
    char n[4][48];
    static const char *const suffix[] = {"ffn_gate_inp_shexp", "ffn_gate_shexp", "ffn_up_shexp", "ffn_down_shexp"};
    for (int i = 0; i < 4; i++)
        snprintf(n[i], sizeof n[i], "blk.%" PRId64 ".%s.weight", il, suffix[i]);
    mp_status st;
    if ((st = check_tensor(where, n[0], &L->gate_inp_shexp, E, 1, 1, false, err)) ||
        (st = check_float_matrix(where, n[0], &L->gate_inp_shexp, "the shared expert's gate", err)) ||
        (st = check_tensor(where, n[1], &L->gate_shexp, E, F, 1, false, err)) ||
        (st = check_tensor(where, n[2], &L->up_shexp, E, F, 1, false, err)) ||
        (st = check_tensor(where, n[3], &L->down_shexp, F, E, 1, false, err)))
        return st;
    if (mp_type_ops_get(L->gate_shexp.type)->vec_dot_type != mp_type_ops_get(L->up_shexp.type)->vec_dot_type)
        return mp_fail(err, MP_ERR_UNSUPPORTED, "%s: tensor %s: type %s pairs with a different activation format than "
                       "%s (%s); the shared expert's gate and up must use compatible types", where, n[2],
                       mp_type_name(L->up_shexp.type), n[1], mp_type_name(L->gate_shexp.type));
    return MP_OK;
}

/* The attention output's bias, the sinks, the router's and the experts' biases, as the traits ask
 * (all f32). */
static mp_status validate_gptoss_extras(const char *where, int64_t il, const mp_layer *L, const mp_hparams *hp,
                                        const mp_arch_traits *tr, mp_error *err)
{
    const struct {
        bool need;
        const char *suffix;
        const mp_tensor *t;
        int64_t ne0, ne1;
    } want[] = {
        {tr->attn_out_bias, "attn_output.bias", &L->bo, hp->n_embd, 1},
        {tr->attn_sinks, "attn_sinks.weight", &L->sinks, hp->n_head, 1},
        {tr->moe_bias, "ffn_gate_inp.bias", &L->gate_inp_b, hp->n_expert, 1},
        {tr->moe_bias, "ffn_gate_exps.bias", &L->gate_exps_b, hp->n_ff_exp, hp->n_expert},
        {tr->moe_bias, "ffn_up_exps.bias", &L->up_exps_b, hp->n_ff_exp, hp->n_expert},
        {tr->moe_bias, "ffn_down_exps.bias", &L->down_exps_b, hp->n_embd, hp->n_expert},
    };
    for (size_t i = 0; i < sizeof want / sizeof want[0]; i++) {
        if (!want[i].need)
            continue;
        char name[64];
        snprintf(name, sizeof name, "blk.%" PRId64 ".%s", il, want[i].suffix);
        mp_status st = check_tensor(where, name, want[i].t, want[i].ne0, want[i].ne1, 1, true, err);
        if (st)
            return st;
    }
    return MP_OK;
}

mp_status mp_model_validate(const mp_model *m, mp_error *err)
{
    const mp_hparams *hp = &m->hp;
    const char *where = m->path ? m->path : "(in-memory model)";
    const mp_arch_traits *tr = mp_arch_get(hp->arch);
    if (!tr)
        return mp_fail(err, MP_ERR_UNSUPPORTED, "%s: architecture id %d is not supported", where,
                       (int)hp->arch);
    if (hp->n_layer < 1 || hp->n_embd < 1 || hp->n_head < 1 || hp->n_head_kv < 1 ||
        hp->head_dim < 1 || hp->n_expert < 1 || hp->n_expert_used < 1 || hp->n_ff_exp < 1 ||
        hp->n_vocab < 1)
        return mp_fail(err, MP_ERR_FORMAT,
                       "%s: hyperparameters must be >= 1 (block_count %" PRId64 ", embedding %" PRId64
                       ", heads %" PRId64 "/%" PRId64 ", head dim %" PRId64 ", experts %" PRId64
                       " used %" PRId64 ", expert ffn %" PRId64 ", vocab %" PRId64 ")",
                       where, hp->n_layer, hp->n_embd, hp->n_head, hp->n_head_kv, hp->head_dim,
                       hp->n_expert, hp->n_expert_used, hp->n_ff_exp, hp->n_vocab);
    /* generous sanity limits, so that size products below cannot overflow */
    if (hp->n_layer > MP_MODEL_MAX_LAYERS || hp->n_embd > (1 << 20) || hp->n_head > 4096 || hp->head_dim > 8192 ||
        hp->n_expert > 65536 || hp->n_ff_exp > (1 << 20) || hp->n_ff_shexp < 0 || hp->n_ff_shexp > (1 << 22) ||
        hp->n_vocab > (1 << 24))
        return mp_fail(err, MP_ERR_LIMIT, "%s: hyperparameters exceed the supported limits", where);
    if (hp->n_head % hp->n_head_kv != 0)
        return mp_fail(err, MP_ERR_FORMAT,
                       "%s: head_count %" PRId64 " is not a multiple of head_count_kv %" PRId64,
                       where, hp->n_head, hp->n_head_kv);
    if (hp->n_expert_used > hp->n_expert)
        return mp_fail(err, MP_ERR_FORMAT,
                       "%s: expert_used_count %" PRId64 " exceeds expert_count %" PRId64, where,
                       hp->n_expert_used, hp->n_expert);
    if (hp->rot_dim < 2 || hp->rot_dim > hp->head_dim || hp->rot_dim % 2 != 0)
        return mp_fail(err, MP_ERR_FORMAT,
                       "%s: rope dimension %" PRId64 " must be even and in [2, head dim %" PRId64 "]",
                       where, hp->rot_dim, hp->head_dim);
    if (tr->shared_expert != (hp->n_ff_shexp > 0))
        return mp_fail(err, MP_ERR_FORMAT, "%s: shared expert FFN size %" PRId64 ": architecture %s %s one",
                       where, hp->n_ff_shexp, tr->name, tr->shared_expert ? "needs" : "has no");
    if ((tr->swa_period > 0) != (hp->n_swa > 0) || hp->n_swa < 0)
        return mp_fail(err, MP_ERR_FORMAT, "%s: sliding window %" PRId64 ": architecture %s %s one", where, hp->n_swa,
                       tr->name, tr->swa_period > 0 ? "needs" : "has no");
    if (hp->rope_yarn_factor != 0.0f &&
        (!(hp->rope_yarn_factor >= 1.0f) || !isfinite(hp->rope_yarn_factor) || hp->rope_yarn_orig_ctx < 1 ||
         !(hp->rope_yarn_beta_fast > 0.0f) || !(hp->rope_yarn_beta_slow > 0.0f) ||
         !isfinite(hp->rope_yarn_beta_fast) || !isfinite(hp->rope_yarn_beta_slow)))
        return mp_fail(err, MP_ERR_FORMAT, "%s: YaRN factor %g, original context %" PRId64 ", beta fast %g slow %g: "
                       "expected a finite factor >= 1, a context >= 1 and betas > 0", where,
                       (double)hp->rope_yarn_factor, hp->rope_yarn_orig_ctx, (double)hp->rope_yarn_beta_fast,
                       (double)hp->rope_yarn_beta_slow);
    if (!(hp->rms_eps > 0.0f) || !(hp->rope_freq_base > 0.0f) || !isfinite(hp->rms_eps) ||
        !isfinite(hp->rope_freq_base))
        return mp_fail(err, MP_ERR_FORMAT, "%s: rms epsilon %g and rope freq base %g must be finite and > 0",
                       where, (double)hp->rms_eps, (double)hp->rope_freq_base);

    const int64_t E = hp->n_embd, Q = hp->n_head * hp->head_dim, KV = hp->n_head_kv * hp->head_dim;
    mp_status st;
    if ((st = check_tensor(where, "token_embd.weight", &m->tok_embd, E, hp->n_vocab, 1, false, err)) ||
        (st = check_tensor(where, "output_norm.weight", &m->output_norm, E, 1, 1, true, err)) ||
        (st = check_tensor(where, "output.weight", &m->output, E, hp->n_vocab, 1, false, err)))
        return st;
    for (int64_t il = 0; il < hp->n_layer; il++) {
        const mp_layer *L = &m->layers[il];
        char n[16][48];
        static const char *const suffix[] = {"attn_norm", "attn_q", "attn_k", "attn_v",
                                             "attn_output", "attn_q_norm", "attn_k_norm", "ffn_norm",
                                             "ffn_gate_inp", "ffn_gate_exps", "ffn_up_exps",
                                             "ffn_down_exps"};
        for (int i = 0; i < 12; i++)
            snprintf(n[i], sizeof n[i], "blk.%" PRId64 ".%s.weight", il, i == 7 ? tr->ffn_norm_name : suffix[i]);
        if ((st = check_tensor(where, n[0], &L->attn_norm, E, 1, 1, true, err)) ||
            (st = check_tensor(where, n[1], &L->wq, E, Q, 1, false, err)) ||
            (st = check_tensor(where, n[2], &L->wk, E, KV, 1, false, err)) ||
            (st = check_tensor(where, n[3], &L->wv, E, KV, 1, false, err)) ||
            (st = check_tensor(where, n[4], &L->wo, Q, E, 1, false, err)) ||
            (st = check_tensor(where, n[7], &L->ffn_norm, E, 1, 1, true, err)) ||
            (st = check_tensor(where, n[9], &L->gate_exps, E, hp->n_ff_exp, hp->n_expert, false, err)) ||
            (st = check_tensor(where, n[10], &L->up_exps, E, hp->n_ff_exp, hp->n_expert, false, err)) ||
            (st = check_tensor(where, n[11], &L->down_exps, hp->n_ff_exp, E, hp->n_expert, false, err)))
            return st;
        /* the router decides which experts run: it stays in a float type, never block-quantized
         * (GGUF quantizers keep ffn_gate_inp unquantized for the same reason) */
        if ((st = check_tensor(where, n[8], &L->gate_inp, E, hp->n_expert, 1, false, err)))
            return st;
        if ((st = check_float_matrix(where, n[8], &L->gate_inp, "the router", err)))
            return st;
        /* the MoE block converts x once for both gate and up, so they must share the format */
        if (mp_type_ops_get(L->gate_exps.type)->vec_dot_type !=
            mp_type_ops_get(L->up_exps.type)->vec_dot_type)
            return mp_fail(err, MP_ERR_UNSUPPORTED,
                           "%s: tensor %s: type %s pairs with a different activation format than "
                           "%s (%s); gate and up experts must use compatible types",
                           where, n[10], mp_type_name(L->up_exps.type), n[9],
                           mp_type_name(L->gate_exps.type));
        if (tr->qk_norm != MP_QK_NORM_NONE) {
            const bool per_head = tr->qk_norm == MP_QK_NORM_PER_HEAD;
            if ((st = check_tensor(where, n[5], &L->q_norm, per_head ? hp->head_dim : Q, 1, 1, true, err)) ||
                (st = check_tensor(where, n[6], &L->k_norm, per_head ? hp->head_dim : KV, 1, 1, true, err)))
                return st;
        }
        if (tr->qkv_bias) {
            static const char *const bias[] = {"attn_q", "attn_k", "attn_v"};
            for (int i = 0; i < 3; i++)
                snprintf(n[12 + i], sizeof n[12 + i], "blk.%" PRId64 ".%s.bias", il, bias[i]);
            if ((st = check_tensor(where, n[12], &L->bq, Q, 1, 1, true, err)) ||
                (st = check_tensor(where, n[13], &L->bk, KV, 1, 1, true, err)) ||
                (st = check_tensor(where, n[14], &L->bv, KV, 1, 1, true, err)))
                return st;
        }
        if (tr->shared_expert && (st = validate_shared_expert(where, il, L, hp, err)))
            return st;
        if ((st = validate_gptoss_extras(where, il, L, hp, tr, err)))
            return st;
    }
    return MP_OK;
}

size_t mp_model_expert_bytes(const mp_model *m, int64_t il)
{
    if (il < 0 || il >= m->hp.n_layer)
        return 0;
    const mp_layer *L = &m->layers[il];
    /* each expert is one ne[0] x ne[1] slice of the stacked tensors */
    return L->gate_exps.row_bytes * (size_t)L->gate_exps.ne[1] +
           L->up_exps.row_bytes * (size_t)L->up_exps.ne[1] +
           L->down_exps.row_bytes * (size_t)L->down_exps.ne[1];
}

size_t mp_model_dense_bytes(const mp_model *m)
{
    size_t total = m->tok_embd.nbytes + m->output_norm.nbytes;
    if (m->output.data != m->tok_embd.data)
        total += m->output.nbytes;
    for (int64_t il = 0; il < m->hp.n_layer; il++) {
        const mp_layer *L = &m->layers[il];
        total += L->attn_norm.nbytes + L->wq.nbytes + L->wk.nbytes + L->wv.nbytes + L->wo.nbytes +
                 L->ffn_norm.nbytes + L->gate_inp.nbytes;
        if (L->q_norm.data)
            total += L->q_norm.nbytes;
        if (L->k_norm.data)
            total += L->k_norm.nbytes;
        /* the experts' biases too: a few KB an expert, kept with the dense weights on every tier */
        const mp_tensor *extra[] = {&L->bq, &L->bk, &L->bv, &L->gate_inp_shexp, &L->gate_shexp, &L->up_shexp,
                                    &L->down_shexp, &L->bo, &L->sinks, &L->gate_inp_b, &L->gate_exps_b,
                                    &L->up_exps_b, &L->down_exps_b};
        for (size_t i = 0; i < sizeof extra / sizeof extra[0]; i++)
            if (extra[i]->data)
                total += extra[i]->nbytes;
    }
    return total;
}

void mp_expert_quant_name(int gate_type, int up_type, int down_type, char out[MP_EXPERT_QUANT_MAX])
{
    const char *g = mp_type_name(gate_type), *u = mp_type_name(up_type), *d = mp_type_name(down_type);
    g = g ? g : "?";
    u = u ? u : "?";
    d = d ? d : "?";
    if (gate_type == up_type && up_type == down_type)
        snprintf(out, MP_EXPERT_QUANT_MAX, "%s", g);
    else if (gate_type == up_type)
        snprintf(out, MP_EXPERT_QUANT_MAX, "%s/%s", g, d);
    else
        snprintf(out, MP_EXPERT_QUANT_MAX, "%s/%s/%s", g, u, d);
}

void mp_model_expert_quant(const mp_layer *L, char out[MP_EXPERT_QUANT_MAX])
{
    mp_expert_quant_name(L->gate_exps.type, L->up_exps.type, L->down_exps.type, out);
}

bool mp_expert_quant_from_types(const char *quant_types, char out[MP_EXPERT_QUANT_MAX])
{
    static const char *const tensors[3] = {"ffn_gate_exps", "ffn_up_exps", "ffn_down_exps"};
    int type[3] = {-1, -1, -1};
    for (const char *p = quant_types; p && *p;) {
        const char *end = strchr(p, ','), *colon = strchr(p, ':');
        const size_t len = end ? (size_t)(end - p) : strlen(p);
        if (colon && colon < p + len) {
            char name[16];
            const size_t nl = (size_t)(colon - p);
            const char *tensor = colon + 1;
            const size_t tl = len - nl - 1;
            for (int t = 0; t < 3 && nl < sizeof name; t++)
                if (tl == strlen(tensors[t]) && !strncmp(tensor, tensors[t], tl)) {
                    memcpy(name, p, nl);
                    name[nl] = 0;
                    type[t] = mp_type_from_name(name);
                }
        }
        p = end ? end + 1 : p + len;
    }
    if (type[0] < 0 || type[1] < 0 || type[2] < 0)
        return false;
    mp_expert_quant_name(type[0], type[1], type[2], out);
    return true;
}
