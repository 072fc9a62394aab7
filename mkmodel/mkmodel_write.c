/* mkmodel/mkmodel_write.c — generate a synthetic MoE model's weights and stream them into a GGUF.
 *
 * Every row of every tensor comes from its own xoshiro256** stream seeded by (seed, tensor index,
 * row), so rows can be generated and quantized by any thread in any order and the file is the same
 * bytes for a given config whatever the thread count. Memory is one chunk of rows (about 8 MiB of
 * float32 input, quantized into an output buffer of at most that size) plus a row of scratch per
 * thread, whatever the model size.
 *
 * Weight scales keep activations near unit RMS through any depth:
 *  - matrices that read the residual stream (q, k, v, router, expert and shared expert gate/up, the
 *    shared expert's gate vector, LM head): N(0, 1/fan_in) elements, so each output has variance ~1
 *    for a unit-RMS normalized input;
 *  - matrices that write the residual stream (attn_output, ffn_down_exps, ffn_down_shexp) are
 *    further scaled by 1/sqrt(2 n_layer) (GPT-2's residual scaling), so 2 n_layer updates add about
 *    unit variance;
 *  - norm weights are 1; token embeddings are N(0, 1); biases are N(0, MK_BIAS_STD^2), large enough
 *    that a model run without them (or with them misplaced) gives other logits, times the residual
 *    scale for those that write the residual stream (gpt-oss's attn_output and expert down biases);
 *    gpt-oss's sinks are N(0, MK_SINK_STD^2), logits of the size of an attention score.
 * "N(0, s^2)" is approximated by the sum of four uniforms (Irwin–Hall, within ±3.46 s): one PRNG
 * call per element keeps generation far cheaper than quantization, with Gaussian-like rows.
 *
 * Router skew (the popularity profile): hidden dimension 0 is a constant "bias channel". Every
 * token embedding has the value MK_BIAS_CHANNEL there, every matrix that writes the residual
 * stream has output row 0 set to zero, and every matrix other than the router ignores input 0
 * (a constant input would add one shared vector to every token, which the routers would read as
 * a random preference). So x[0] stays exactly MK_BIAS_CHANNEL in every layer, and after RMSNorm
 * (hidden state RMS ~1) the router input's dimension 0 is ~MK_BIAS_CHANNEL. Router row e has
 * element 0 = -skew * ln(rank_l(e) + 1): the logit of the expert of rank r gets a bias of
 * -s ln(r + 1), so the router's softmax prior over ranks is Zipf(s) (p_r ∝ (r + 1)^-s), while the
 * random elements add a per-token N(0, ~1) term that gives each token its own choice. rank_l is
 * a random permutation of the experts per layer. An architecture whose router has a bias (gpt-oss)
 * gets the prior there instead, exactly: bias[e] = -skew * ln(rank_l(e) + 1), and its router ignores
 * input 0 like every other matrix; so a --skew 0 router has no preference of its own either, where
 * a random bias would be one.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "kernels/quant.h"
#include "gguf/gguf.h"
#include "base/atomic_file.h"
#include "mkmodel/mkmodel.h"
#include "mkmodel/mkmodel_blocks.h"
#include "runtime/cpus.h"
#include "runtime/threadpool.h"
#include "tokenizer/tokenizer.h"

#define MK_BIAS_CHANNEL 1.0f
/* biases: about 0.2 in magnitude (|x| < 0.5 for 95 % of them), against q/k/v and expert gate/up
 * outputs of ~1 */
#define MK_BIAS_STD 0.25f
/* sinks: attention scores q.k / sqrt(head_dim) are ~N(0, 1) here, so a sink of 0 takes 1/(n + 1) of
 * a softmax over n keys of score 0 and one of +-1 between about a third and three times that */
#define MK_SINK_STD 1.0f
#define MK_CHUNK_F32_BYTES ((size_t)8 << 20)

/* ---- PRNG ---- */

static uint64_t splitmix64(uint64_t *state)
{
    uint64_t z = (*state += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

typedef struct rng {
    uint64_t s[4];
} rng;

/* Stream (stream, index) of a seed: each key is folded in through splitmix64's finalizer, so
 * distinct keys give unrelated states. */
static rng rng_seed(uint64_t seed, uint64_t stream, uint64_t index)
{
    uint64_t sm = seed;
    uint64_t h = splitmix64(&sm);
    sm = h ^ stream;
    h = splitmix64(&sm);
    sm = h ^ index;
    rng r;
    for (int i = 0; i < 4; i++)
        r.s[i] = splitmix64(&sm);
    return r;
}

static inline uint64_t rotl(uint64_t x, int k) { return (x << k) | (x >> (64 - k)); }

static inline uint64_t rng_next(rng *r)
{
    uint64_t *s = r->s;
    uint64_t result = rotl(s[1] * 5, 7) * 9;
    uint64_t t = s[1] << 17;
    s[2] ^= s[0];
    s[3] ^= s[1];
    s[1] ^= s[2];
    s[0] ^= s[3];
    s[2] ^= t;
    s[3] = rotl(s[3], 45);
    return result;
}

/* Approximately N(0, 1): four 16-bit uniforms summed (mean 2, variance 4/12), standardized. */
static inline float rng_normal(rng *r)
{
    uint64_t u = rng_next(r);
    uint32_t sum = (uint32_t)(u & 0xFFFF) + (uint32_t)((u >> 16) & 0xFFFF) +
                   (uint32_t)((u >> 32) & 0xFFFF) + (uint32_t)(u >> 48);
    const float inv = 1.0f / 65536.0f, sqrt3 = 1.7320508f;
    return ((float)sum * inv - 2.0f + 2.0f * inv) * sqrt3;
}

/* Streams: one per purpose so that no two purposes share random numbers. */
enum { STREAM_PERM = 1, STREAM_TENSOR = 2 };

static void layer_ranks(const mp_mkmodel_config *cfg, int64_t il, int64_t *rank /* (n_expert) */)
{
    /* A Fisher–Yates shuffle of 0..n-1 is a uniformly random permutation; read it as expert ->
     * rank. */
    for (int64_t e = 0; e < cfg->n_expert; e++)
        rank[e] = e;
    rng r = rng_seed(cfg->seed, STREAM_PERM, (uint64_t)il);
    for (int64_t i = cfg->n_expert - 1; i > 0; i--) {
        int64_t j = (int64_t)(rng_next(&r) % (uint64_t)(i + 1));
        int64_t tmp = rank[i];
        rank[i] = rank[j];
        rank[j] = tmp;
    }
}

int64_t mp_mkmodel_expert_rank(const mp_mkmodel_config *cfg, int64_t il, int64_t e)
{
    if (e < 0 || e >= cfg->n_expert || cfg->n_expert <= 0)
        return -1;
    int64_t *rank = malloc((size_t)cfg->n_expert * sizeof *rank);
    if (!rank)
        return -1;
    layer_ranks(cfg, il, rank);
    int64_t r = rank[e];
    free(rank);
    return r;
}

/* ---- weights ---- */

typedef struct gen_ctx {
    const mp_mkmodel_config *cfg;
    const mp_mk_tensor *t;
    int64_t tensor_index;
    const int64_t *rank;     /* (n_expert) ranks of this layer's experts; the router and its bias only */
    int64_t row_begin;       /* first row of the chunk */
    int64_t n_rows;          /* rows in the chunk */
    int64_t rows_per_task;
    size_t row_bytes;
    float **scratch;         /* per thread: (ne[0]) floats */
    uint8_t *out;            /* (n_rows, row_bytes) quantized chunk */
} gen_ctx;

static float residual_scale(const mp_mkmodel_config *cfg)
{
    return 1.0f / sqrtf(2.0f * (float)cfg->n_layer);
}

/* Whether the router's prior is its bias (an architecture with router biases) rather than its
 * weight's input 0. */
static bool prior_in_bias(const mp_mkmodel_config *cfg)
{
    return mp_arch_get(cfg->arch)->moe_bias;
}

/* A bias row (t->cls MP_MK_BIAS): N(0, MK_BIAS_STD^2) by its matrix's rules; the router's is the
 * designed prior. */
static void gen_bias_row(const gen_ctx *g, int64_t row, float *dst)
{
    const mp_mkmodel_config *cfg = g->cfg;
    const mp_mk_tensor *t = g->t;
    const int64_t n = t->ne[0];
    if (t->bias_of == MP_MK_ROUTER) { /* (n_expert): logit bias -s ln(rank + 1) */
        for (int64_t e = 0; e < n; e++)
            dst[e] = (float)(-cfg->skew * log((double)g->rank[e] + 1.0));
        return;
    }
    rng r = rng_seed(cfg->seed, STREAM_TENSOR + (uint64_t)g->tensor_index, (uint64_t)row);
    /* attn_output's and each expert's down bias (rows of n_embd) write the residual stream */
    const bool writes_residual = t->bias_of == MP_MK_ATTN_OUT || t->bias_of == MP_MK_FFN_DOWN;
    const float std = MK_BIAS_STD * (writes_residual ? residual_scale(cfg) : 1.0f);
    for (int64_t j = 0; j < n; j++)
        dst[j] = rng_normal(&r) * std;
    if (writes_residual) /* the bias channel must stay constant */
        dst[0] = 0.0f;
}

/* Row `row` of tensor t (rows are flattened over ne[1..3]) into dst (ne[0] floats). */
static void gen_row(const gen_ctx *g, int64_t row, float *dst)
{
    const mp_mkmodel_config *cfg = g->cfg;
    const mp_mk_tensor *t = g->t;
    const int64_t n = t->ne[0];
    if (t->cls == MP_MK_NORM) {
        for (int64_t j = 0; j < n; j++)
            dst[j] = 1.0f;
        return;
    }
    if (t->cls == MP_MK_BIAS) {
        gen_bias_row(g, row, dst);
        return;
    }
    rng r = rng_seed(cfg->seed, STREAM_TENSOR + (uint64_t)g->tensor_index, (uint64_t)row);
    float std = 1.0f / sqrtf((float)n);
    int zero_row = 0;
    switch (t->cls) {
    case MP_MK_EMBD: std = 1.0f; break;
    case MP_MK_SINKS: std = MK_SINK_STD; break;
    case MP_MK_ATTN_OUT: zero_row = row == 0; std *= residual_scale(cfg); break;
    case MP_MK_FFN_DOWN:
    case MP_MK_SHEXP_DOWN: zero_row = row % cfg->n_embd == 0; std *= residual_scale(cfg); break;
    default: break;
    }
    if (zero_row) { /* output row 0 writes the bias channel, which must stay constant */
        memset(dst, 0, (size_t)n * sizeof *dst);
        return;
    }
    for (int64_t j = 0; j < n; j++)
        dst[j] = rng_normal(&r) * std;
    switch (t->cls) {
    case MP_MK_EMBD: dst[0] = MK_BIAS_CHANNEL; break;
    case MP_MK_OUTPUT:
    case MP_MK_ATTN_Q:
    case MP_MK_ATTN_K:
    case MP_MK_ATTN_V:
    case MP_MK_FFN_GATE:
    case MP_MK_FFN_UP:
    case MP_MK_SHEXP_GATE_INP:
    case MP_MK_SHEXP_GATE:
    case MP_MK_SHEXP_UP:
        /* Only the router reads the bias channel: a constant input here would add the same
         * vector to every token's q/k/v or expert output, a shared direction that the routers
         * would then read as a random, seed-dependent preference. */
        dst[0] = 0.0f;
        break;
    case MP_MK_ROUTER:
        dst[0] = prior_in_bias(cfg) ? 0.0f : (float)(-cfg->skew * log((double)g->rank[row] + 1.0)) / MK_BIAS_CHANNEL;
        break;
    default: break;
    }
}

static void quantize_into(int type, const float *src, void *dst, int64_t n)
{
    if (type == MP_TYPE_F32) {
        memcpy(dst, src, (size_t)n * sizeof *src);
        return;
    }
    mp_type_ops_get(type)->quantize_row(src, dst, n);
}

static uint64_t rng_next_opaque(void *r)
{
    return rng_next(r);
}

/* Routed and shared expert matrices in a quantized type are drawn directly as quantized blocks
 * (mkmodel_blocks.c): they are nearly all of a large model's bytes, and the K-quant scale search
 * over Gaussian floats would take hours for the qwen3-30b-a3b preset. Same scale and bias-channel
 * zeros as gen_row. */
static bool direct_blocks(const mp_mk_tensor *t)
{
    switch (t->cls) {
    case MP_MK_FFN_GATE:
    case MP_MK_FFN_UP:
    case MP_MK_FFN_DOWN:
    case MP_MK_SHEXP_GATE:
    case MP_MK_SHEXP_UP:
    case MP_MK_SHEXP_DOWN: return mp_mk_blocks_supported(t->type);
    default: return false;
    }
}

static void gen_row_blocks(const gen_ctx *g, int64_t row, void *dst)
{
    const mp_mkmodel_config *cfg = g->cfg;
    const mp_mk_tensor *t = g->t;
    rng r = rng_seed(cfg->seed, STREAM_TENSOR + (uint64_t)g->tensor_index, (uint64_t)row);
    float std = 1.0f / sqrtf((float)t->ne[0]);
    const bool down = t->cls == MP_MK_FFN_DOWN || t->cls == MP_MK_SHEXP_DOWN;
    bool zero_row = false;
    if (down) {
        std *= residual_scale(cfg);
        zero_row = row % cfg->n_embd == 0; /* writes the bias channel */
    }
    mp_mk_random_row(t->type, t->ne[0], std, !down, zero_row, rng_next_opaque, &r, dst);
}

/* Pool task: generate and quantize rows [task * rows_per_task, ...) of the chunk. */
static void gen_task(void *ctx, int64_t task, int thread)
{
    const gen_ctx *g = ctx;
    int64_t begin = task * g->rows_per_task;
    int64_t end = begin + g->rows_per_task;
    if (end > g->n_rows)
        end = g->n_rows;
    float *row = g->scratch[thread];
    const bool direct = direct_blocks(g->t);
    for (int64_t i = begin; i < end; i++) {
        uint8_t *dst = g->out + (size_t)i * g->row_bytes;
        if (direct) {
            gen_row_blocks(g, g->t->row0 + g->row_begin + i, dst);
            continue;
        }
        gen_row(g, g->t->row0 + g->row_begin + i, row);
        quantize_into(g->t->type, row, dst, g->t->ne[0]);
    }
}

/* ---- metadata ---- */

/* The runtime's traits name, but Mixtral's: llama.cpp writes Mixtral as "llama" + expert keys. */
static const char *gguf_arch_name(mp_arch a)
{
    const mp_arch_traits *tr = mp_arch_get(a);
    return a == MP_ARCH_MIXTRAL ? "llama" : tr ? tr->name : "?";
}

/* llama.cpp's general.file_type (llama_ftype) for the mix, or for the expert type once custom. */
static uint32_t file_type(const mp_mkmodel_config *cfg)
{
    if (!strcmp(cfg->mix, "q4_k_m"))
        return 15; /* MOSTLY_Q4_K_M */
    if (!strcmp(cfg->mix, "q5_k_m"))
        return 17; /* MOSTLY_Q5_K_M */
    if (!strcmp(cfg->mix, "q3_k_m"))
        return 12; /* MOSTLY_Q3_K_M */
    if (!strcmp(cfg->mix, "q2_k"))
        return 10; /* MOSTLY_Q2_K */
    if (!strcmp(cfg->mix, "mxfp4_moe"))
        return 38; /* MOSTLY_MXFP4_MOE */
    switch (cfg->types[MP_MK_FFN_GATE]) {
    case MP_TYPE_F32: return 0;
    case MP_TYPE_F16: return 1;
    case MP_TYPE_Q4_0: return 2;
    case MP_TYPE_Q4_1: return 3;
    case MP_TYPE_Q5_0: return 8;
    case MP_TYPE_Q5_1: return 9;
    case MP_TYPE_Q8_0: return 7;
    case MP_TYPE_IQ4_NL: return 25;
    case MP_TYPE_IQ4_XS: return 30; /* MOSTLY_IQ4_XS */
    case MP_TYPE_MXFP4: return 38; /* MOSTLY_MXFP4_MOE */
    case MP_TYPE_Q2_K: return 10; /* MOSTLY_Q2_K */
    case MP_TYPE_Q3_K: return 11; /* MOSTLY_Q3_K_S */
    case MP_TYPE_Q4_K: return 14; /* MOSTLY_Q4_K_S */
    case MP_TYPE_Q5_K: return 16; /* MOSTLY_Q5_K_S */
    case MP_TYPE_Q6_K: return 18;
    case MP_TYPE_BF16: return 32;
    }
    return 0;
}

#define TRY(call)                                                                                  \
    do {                                                                                           \
        mp_status st_ = (call);                                                                    \
        if (st_)                                                                                   \
            return st_;                                                                            \
    } while (0)

static mp_status add_arch_u32(mp_gguf_writer *w, const char *arch, const char *key, int64_t v,
                              mp_error *err)
{
    char full[128];
    snprintf(full, sizeof full, "%s.%s", arch, key);
    return mp_gguf_add_u32(w, full, (uint32_t)v, err);
}

static mp_status add_arch_f32(mp_gguf_writer *w, const char *arch, const char *key, float v,
                              mp_error *err)
{
    char full[128];
    snprintf(full, sizeof full, "%s.%s", arch, key);
    return mp_gguf_add_f32(w, full, v, err);
}

static mp_status add_arch_str(mp_gguf_writer *w, const char *arch, const char *key, const char *v, mp_error *err)
{
    char full[128];
    snprintf(full, sizeof full, "%s.%s", arch, key);
    return mp_gguf_add_str(w, full, v, err);
}

static mp_status write_hparams(mp_gguf_writer *w, const mp_mkmodel_config *c, mp_error *err)
{
    const char *a = gguf_arch_name(c->arch);
    TRY(mp_gguf_add_str(w, "general.architecture", a, err));
    TRY(mp_gguf_add_str(w, "general.name", c->name, err));
    TRY(mp_gguf_add_u32(w, "general.file_type", file_type(c), err));
    TRY(mp_gguf_add_u32(w, "general.quantization_version", 2, err));
    TRY(add_arch_u32(w, a, "block_count", c->n_layer, err));
    TRY(add_arch_u32(w, a, "context_length", c->n_ctx, err));
    TRY(add_arch_u32(w, a, "embedding_length", c->n_embd, err));
    /* Mixtral's and olmoe's feed_forward_length is the expert FFN size; qwen3moe and qwen2moe carry
     * a dense FFN size there, which we set to the active expert width (768 x 8 = 6144 for
     * Qwen3-30B-A3B, 1408 x 4 = 5632 for Qwen1.5-MoE-A2.7B, as in the real checkpoints) and give the
     * expert size its own key. */
    if (c->arch == MP_ARCH_QWEN3MOE || c->arch == MP_ARCH_QWEN2MOE)
        TRY(add_arch_u32(w, a, "feed_forward_length", c->n_ff_exp * c->n_expert_used, err));
    else
        TRY(add_arch_u32(w, a, "feed_forward_length", c->n_ff_exp, err));
    TRY(add_arch_u32(w, a, "attention.head_count", c->n_head, err));
    TRY(add_arch_u32(w, a, "attention.head_count_kv", c->n_head_kv, err));
    /* olmoe, mixtral and qwen2moe files carry no head size (it is hidden / heads) unless it differs;
     * qwen3moe's and gpt-oss's configs name a head_dim, which their converters write. */
    if (c->arch == MP_ARCH_QWEN3MOE || c->arch == MP_ARCH_GPTOSS || c->head_dim * c->n_head != c->n_embd) {
        TRY(add_arch_u32(w, a, "attention.key_length", c->head_dim, err));
        TRY(add_arch_u32(w, a, "attention.value_length", c->head_dim, err));
    }
    if (c->arch == MP_ARCH_MIXTRAL) {
        TRY(add_arch_u32(w, a, "rope.dimension_count", c->head_dim, err));
        TRY(add_arch_u32(w, a, "vocab_size", c->n_vocab, err));
    }
    TRY(add_arch_f32(w, a, "rope.freq_base", c->rope_freq_base, err));
    if (c->rope_yarn_factor > 0.0f) { /* the keys llama.cpp's converter writes for a config's rope_scaling */
        TRY(add_arch_str(w, a, "rope.scaling.type", "yarn", err));
        TRY(add_arch_f32(w, a, "rope.scaling.factor", c->rope_yarn_factor, err));
        TRY(add_arch_u32(w, a, "rope.scaling.original_context_length", c->rope_yarn_orig_ctx, err));
    }
    if (mp_arch_get(c->arch)->swa_period > 0)
        TRY(add_arch_u32(w, a, "attention.sliding_window", c->n_swa, err));
    TRY(add_arch_f32(w, a, "attention.layer_norm_rms_epsilon", c->rms_eps, err));
    TRY(add_arch_u32(w, a, "expert_count", c->n_expert, err));
    TRY(add_arch_u32(w, a, "expert_used_count", c->n_expert_used, err));
    if (c->arch != MP_ARCH_MIXTRAL)
        TRY(add_arch_u32(w, a, "expert_feed_forward_length", c->n_ff_exp, err));
    /* qwen2moe: no expert_weights_norm key, so the top-k weights stay as the softmax gave them */
    if (mp_arch_get(c->arch)->shared_expert)
        TRY(add_arch_u32(w, a, "expert_shared_feed_forward_length", c->n_ff_shexp, err));
    /* What made this file, so that a trace of it can be tied back to its generator. */
    char version[64];
    snprintf(version, sizeof version, "moeplan mkmodel %s", MP_VERSION);
    TRY(mp_gguf_add_str(w, "moeplan.generator", version, err));
    TRY(mp_gguf_add_str(w, "moeplan.preset", c->preset, err));
    TRY(mp_gguf_add_str(w, "moeplan.quant_mix", c->mix, err));
    if (c->llama_layers)
        TRY(mp_gguf_add_str(w, "moeplan.layer_mix", "llama", err));
    TRY(mp_gguf_add_u64(w, "moeplan.seed", c->seed, err));
    TRY(mp_gguf_add_f32(w, "moeplan.skew", (float)c->skew, err));
    return MP_OK;
}

static mp_status write_vocab(mp_gguf_writer *w, const mp_mkmodel_config *c, mp_error *err)
{
    /* Byte-level BPE for every architecture: it is what the runtime's tokenizer reads. qwen3moe
     * and qwen2moe keep Qwen2's pre-tokenizer, gpt-oss o200k's (gpt-4o); olmoe and mixtral use
     * GPT-2's (see docs/mkmodel.md). */
    const char *pre = c->arch == MP_ARCH_QWEN3MOE || c->arch == MP_ARCH_QWEN2MOE ? "qwen2"
                      : c->arch == MP_ARCH_GPTOSS                                ? "gpt-4o"
                                                                                 : "gpt-2";
    size_t corpus_len = 0;
    const char *corpus = mp_vocab_default_corpus(&corpus_len);
    mp_vocab v;
    memset(&v, 0, sizeof v);
    mp_status st = mp_vocab_build(corpus, corpus_len, c->n_vocab, pre, &v, err);
    if (st)
        return mp_error_prefix(err, "--vocab %lld", (long long)c->n_vocab);
    if (v.n_vocab != c->n_vocab) {
        mp_vocab_free(&v);
        return mp_fail(err, MP_ERR_INTERNAL, "vocabulary builder returned %lld tokens, asked %lld",
                       (long long)v.n_vocab, (long long)c->n_vocab);
    }
    st = mp_gguf_add_str(w, "tokenizer.ggml.model", "gpt2", err);
    if (!st)
        st = mp_gguf_add_str(w, "tokenizer.ggml.pre", pre, err);
    if (!st)
        st = mp_gguf_add_arr_str(w, "tokenizer.ggml.tokens", (const char *const *)v.tokens,
                                 (uint64_t)v.n_vocab, err);
    if (!st)
        st = mp_gguf_add_arr(w, "tokenizer.ggml.token_type", MP_GGUF_INT32, v.types,
                             (uint64_t)v.n_vocab, err);
    if (!st)
        st = mp_gguf_add_arr_str(w, "tokenizer.ggml.merges", (const char *const *)v.merges,
                                 (uint64_t)v.n_merges, err);
    if (!st && v.bos_id >= 0)
        st = mp_gguf_add_u32(w, "tokenizer.ggml.bos_token_id", (uint32_t)v.bos_id, err);
    if (!st && v.eos_id >= 0)
        st = mp_gguf_add_u32(w, "tokenizer.ggml.eos_token_id", (uint32_t)v.eos_id, err);
    if (!st && v.eot_id >= 0 && v.eot_id != v.eos_id)
        st = mp_gguf_add_u32(w, "tokenizer.ggml.eot_token_id", (uint32_t)v.eot_id, err);
    /* Qwen pads with its BOS text, <|endoftext|>. */
    if (!st && v.bos_id >= 0)
        st = mp_gguf_add_u32(w, "tokenizer.ggml.padding_token_id", (uint32_t)v.bos_id, err);
    if (!st)
        st = mp_gguf_add_bool(w, "tokenizer.ggml.add_bos_token", false, err);
    mp_vocab_free(&v);
    return st;
}

/* ---- data ---- */

typedef struct progress {
    mp_mkmodel_progress_fn fn;
    void *user;
    uint64_t done, total;
} progress;

static mp_status write_tensor(mp_gguf_writer *w, mp_pool *pool, const mp_mkmodel_config *cfg,
                              const mp_mk_tensor *t, float **scratch, uint8_t *out,
                              size_t out_cap, progress *pr, mp_error *err)
{
    const int64_t rows = t->ne[1] * t->ne[2] * t->ne[3];
    const size_t row_bytes = mp_type_row_bytes(t->type, t->ne[0]);
    int64_t chunk_rows = (int64_t)(out_cap / ((size_t)t->ne[0] * sizeof(float)));
    if (chunk_rows < 1)
        chunk_rows = 1;
    const int n_threads = mp_pool_n_threads(pool);
    /* Several tasks per thread so that uneven rows (the zeroed bias-channel rows) balance out. */
    int64_t rows_per_task = chunk_rows / (4 * n_threads);
    if (rows_per_task < 1)
        rows_per_task = 1;

    int64_t *rank = NULL;
    if (t->bias_of == MP_MK_ROUTER) { /* the router or its bias */
        rank = malloc((size_t)cfg->n_expert * sizeof *rank);
        if (!rank)
            return mp_fail(err, MP_ERR_NOMEM, "%s: out of memory", t->name);
        layer_ranks(cfg, t->layer, rank);
    }
    gen_ctx g = {.cfg = cfg, .t = t, .tensor_index = t->stream, .rank = rank,
                 .rows_per_task = rows_per_task, .row_bytes = row_bytes, .scratch = scratch,
                 .out = out};
    mp_status st = MP_OK;
    for (int64_t begin = 0; begin < rows && !st; begin += chunk_rows) {
        g.row_begin = begin;
        g.n_rows = rows - begin < chunk_rows ? rows - begin : chunk_rows;
        int64_t n_tasks = (g.n_rows + rows_per_task - 1) / rows_per_task;
        mp_pool_run(pool, n_tasks, gen_task, &g);
        size_t nbytes = (size_t)g.n_rows * row_bytes;
        st = mp_gguf_write_data(w, out, nbytes, err);
        pr->done += nbytes;
        if (!st && pr->fn && !pr->fn(pr->user, pr->done, pr->total))
            st = mp_fail(err, MP_ERR_IO, "%s: interrupted after %llu of %llu bytes of tensor data",
                         t->name, (unsigned long long)pr->done, (unsigned long long)pr->total);
    }
    free(rank);
    return st;
}

static mp_status check_output_path(const char *path, bool force, mp_error *err)
{
    if (!path || !*path)
        return mp_fail(err, MP_ERR_ARG, "-o: expected an output path");
    return mp_output_check(path, "file", force, NULL, 0, err);
}

mp_status mp_mkmodel_write(const mp_mkmodel_config *cfg, const char *path, bool force,
                           mp_mkmodel_progress_fn progress_fn, void *progress_user, mp_error *err)
{
    mp_mk_tensor *tensors = NULL;
    int64_t n_tensors = 0;
    mp_status st = check_output_path(path, force, err);
    if (!st)
        st = mp_mkmodel_plan(cfg, &tensors, &n_tensors, err);
    if (st)
        return st;

    int n_threads = cfg->n_threads > 0 ? cfg->n_threads : mp_cpu_usable();
    if (n_threads < 1)
        n_threads = 1;
    int64_t max_row = 0;
    for (int64_t i = 0; i < n_tensors; i++)
        if (tensors[i].ne[0] > max_row)
            max_row = tensors[i].ne[0];
    /* The quantized chunk is never bigger than its float32 input, except for a single row longer
     * than the chunk budget (then the chunk is that one row). */
    size_t out_cap = MK_CHUNK_F32_BYTES;
    if ((size_t)max_row * sizeof(float) > out_cap)
        out_cap = (size_t)max_row * sizeof(float);

    mp_pool *pool = mp_pool_new(n_threads, false); /* quantizing: where the threads run does not matter */
    float **scratch = calloc((size_t)n_threads, sizeof *scratch);
    uint8_t *out = malloc(out_cap);
    int ok = pool && scratch && out;
    for (int i = 0; ok && i < n_threads; i++)
        ok = (scratch[i] = malloc((size_t)max_row * sizeof(float))) != NULL;
    mp_gguf_writer *w = NULL;
    if (!ok)
        st = mp_fail(err, MP_ERR_NOMEM, "mkmodel: out of memory for %d threads' buffers",
                     n_threads);
    if (!st)
        st = mp_gguf_writer_open(path, &w, err);
    if (!st) /* also writes general.alignment */
        st = mp_gguf_writer_set_alignment(w, 32, err);
    if (!st)
        st = write_hparams(w, cfg, err);
    if (!st)
        st = write_vocab(w, cfg, err);
    for (int64_t i = 0; i < n_tensors && !st; i++)
        st = mp_gguf_add_tensor_info(w, tensors[i].name, tensors[i].n_dims, tensors[i].ne,
                                     tensors[i].type, err);
    progress pr = {.fn = progress_fn, .user = progress_user, .done = 0,
                   .total = mp_mkmodel_data_bytes(tensors, n_tensors)};
    for (int64_t i = 0; i < n_tensors && !st; i++) {
        if (tensors[i].up_stream < 0) {
            st = write_tensor(w, pool, cfg, &tensors[i], scratch, out, out_cap, &pr, err);
            continue;
        }
        /* a fused gate_up tensor: each expert's gate rows, then its up rows, from their streams */
        const mp_mk_tensor *f = &tensors[i];
        const int64_t F = f->ne[1] / 2;
        for (int64_t e = 0; e < f->ne[2] && !st; e++)
            for (int half = 0; half < 2 && !st; half++) {
                mp_mk_tensor part = *f;
                part.ne[1] = F;
                part.ne[2] = 1;
                part.row0 = e * F;
                part.stream = half ? f->up_stream : f->stream;
                part.cls = part.bias_of = half ? MP_MK_FFN_UP : MP_MK_FFN_GATE;
                st = write_tensor(w, pool, cfg, &part, scratch, out, out_cap, &pr, err);
            }
    }
    if (w) {
        if (!st)
            st = mp_gguf_writer_finish(w, err);
        else
            mp_gguf_writer_abort(w);
    }
    for (int i = 0; scratch && i < n_threads; i++)
        free(scratch[i]);
    free(scratch);
    free(out);
    if (pool)
        mp_pool_free(pool);
    free(tensors);
    return st;
}
