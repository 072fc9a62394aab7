/* runtime/model.h — model descriptors: hyperparameters and weight views of a MoE transformer.
 *
 * One descriptor type serves every architecture; an architecture is the set of its differences
 * (mp_arch_traits): qwen3moe, olmoe, mixtral, qwen2moe and gpt-oss differ in q/k normalization, RoPE
 * style, whether top-k router weights are renormalized, biases on Q/K/V, a shared expert (qwen2moe:
 * a dense SwiGLU FFN every token passes through beside its routed experts, scaled by a sigmoid
 * gate), and gpt-oss's set: a bias on the attention output, a learned sink logit per head in every
 * softmax, a sliding window on every other layer, biases on the router and on each expert's gate,
 * up and down, and the clamped SwiGLU its experts were trained with (mp_ffn_act). Weights are
 * views into the GGUF mapping (no copies); a model can also be assembled in memory from arrays
 * (tests do).
 *
 * Invariants after mp_model_load:
 *  - every tensor the architecture needs exists with exactly the expected shape and a supported
 *    type; every row length is a multiple of its type's block size;
 *  - n_head % n_head_kv == 0; n_expert_used <= n_expert; rot_dim <= head_dim and is even;
 *  - n_swa > 0 exactly when the architecture has sliding-window layers (swa_period > 0).
 */
#ifndef MP_RUNTIME_MODEL_H
#define MP_RUNTIME_MODEL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "base/error.h"
#include "gguf/gguf.h"
#include "kernels/quant.h"

/* Layers a model may have: above any published MoE model (DeepSeek-V3: 61), and it bounds what
 * is allocated per layer from a file's block_count. */
#define MP_MODEL_MAX_LAYERS 4096

typedef enum mp_arch {
    MP_ARCH_QWEN3MOE = 0, MP_ARCH_OLMOE = 1, MP_ARCH_MIXTRAL = 2, MP_ARCH_QWEN2MOE = 3, MP_ARCH_GPTOSS = 4
} mp_arch;
typedef enum mp_qk_norm { MP_QK_NORM_NONE = 0, MP_QK_NORM_PER_HEAD = 1, MP_QK_NORM_FULL = 2 } mp_qk_norm;
typedef enum mp_rope_style { MP_ROPE_NEOX = 0, MP_ROPE_NORM = 1 } mp_rope_style;
/* An expert's (and the shared expert's) activation of its gate g and up u rows:
 *  SWIGLU:     silu(g) * u
 *  SWIGLU_OAI: gpt-oss's: g' = min(g, limit), u' = clamp(u, -limit, limit),
 *              g' * sigmoid(alpha * g') * (u' + 1) (kernels/ops.h: mp_swiglu_oai and its constants) */
typedef enum mp_ffn_act { MP_ACT_SWIGLU = 0, MP_ACT_SWIGLU_OAI = 1 } mp_ffn_act;

typedef struct mp_arch_traits {
    const char *name;           /* GGUF general.architecture */
    mp_qk_norm qk_norm;         /* qwen3moe: per head; olmoe: over all heads; mixtral: none */
    mp_rope_style rope;         /* qwen3moe, olmoe: NeoX; mixtral: interleaved (norm) */
    bool default_weights_norm;  /* renormalize top-k weights when the GGUF does not say */
    bool qkv_bias;              /* Q, K and V projections add a bias (qwen2moe) */
    bool shared_expert;         /* a shared expert with a sigmoid gate in every layer (qwen2moe) */
    bool attn_out_bias;         /* the attention output projection adds a bias (gpt-oss) */
    bool attn_sinks;            /* a learned logit per query head joins each softmax, then is dropped */
    int swa_period;             /* > 0: layer il attends to a window of n_swa positions unless
                                 * il % swa_period == swa_period - 1 (gpt-oss: 2, even layers slide) */
    bool moe_bias;              /* the router and each expert's gate, up and down add biases */
    mp_ffn_act act;             /* the experts' activation */
    const char *ffn_norm_name;  /* the pre-MoE norm's tensor: "ffn_norm", gpt-oss "post_attention_norm" */
    bool yarn_truncate;         /* YaRN's correction range rounded out (gpt-oss: exact; GGUF has no key) */
} mp_arch_traits;

const mp_arch_traits *mp_arch_get(mp_arch arch);
int mp_arch_from_name(const char *name); /* -1 if unknown */
/* "qwen3moe, olmoe, ..." from the traits table, for error messages (cut to cap). */
void mp_arch_names(char *buf, size_t cap);

typedef struct mp_hparams {
    mp_arch arch;
    int64_t n_layer;
    int64_t n_embd;        /* hidden size */
    int64_t n_head;        /* query heads */
    int64_t n_head_kv;     /* key/value heads (GQA) */
    int64_t head_dim;      /* key/value length per head */
    int64_t rot_dim;       /* rotary dimensions (= head_dim unless rope.dimension_count says) */
    int64_t n_expert;
    int64_t n_expert_used; /* top-k */
    int64_t n_ff_exp;      /* expert FFN hidden size */
    int64_t n_ff_shexp;    /* the shared expert's FFN hidden size; 0 without one */
    int64_t n_vocab;
    int64_t n_ctx_train;
    float rope_freq_base;
    /* YaRN context extension (rope.scaling.type "yarn"; factor 0: plain RoPE): frequencies past the
     * correction range are interpolated by 1/factor, those below it kept, a linear ramp between;
     * cos and sin are scaled by 0.1 ln(factor) + 1 (mp_rope_freqs computes all of it) */
    float rope_yarn_factor;
    int64_t rope_yarn_orig_ctx; /* rope.scaling.original_context_length */
    float rope_yarn_beta_fast, rope_yarn_beta_slow;
    bool rope_yarn_truncate;    /* the correction range rounded out to whole dimensions (as
                                 * transformers does unless a config says "truncate": false) */
    int64_t n_swa;         /* the sliding window's positions (attention.sliding_window); 0: none */
    float rms_eps;
    bool expert_weights_norm; /* renormalize the top-k router weights to sum to 1 */
} mp_hparams;

/* A weight tensor: a view with its type and shape. ne[0] is the row length (elements). */
typedef struct mp_tensor {
    int type;           /* mp_type */
    int64_t ne[4];      /* unused dims are 1 */
    const void *data;
    size_t row_bytes;   /* bytes of one row of ne[0] elements */
    size_t nbytes;      /* whole tensor */
} mp_tensor;

typedef struct mp_layer {
    mp_tensor attn_norm;   /* (n_embd) f32 */
    mp_tensor wq;          /* (n_embd -> n_head * head_dim): ne = [n_embd, n_head*head_dim] */
    mp_tensor wk;          /* ne = [n_embd, n_head_kv*head_dim] */
    mp_tensor wv;          /* ne = [n_embd, n_head_kv*head_dim] */
    mp_tensor wo;          /* ne = [n_head*head_dim, n_embd] */
    mp_tensor q_norm;      /* per head: (head_dim); full: (n_head*head_dim); absent: data NULL */
    mp_tensor k_norm;      /* per head: (head_dim); full: (n_head_kv*head_dim) */
    mp_tensor ffn_norm;    /* (n_embd) f32 */
    mp_tensor gate_inp;    /* router: ne = [n_embd, n_expert] */
    mp_tensor gate_exps;   /* ne = [n_embd, n_ff_exp, n_expert] */
    mp_tensor up_exps;     /* ne = [n_embd, n_ff_exp, n_expert] */
    mp_tensor down_exps;   /* ne = [n_ff_exp, n_embd, n_expert] */
    /* Q/K/V biases (f32: (n_head*head_dim), (n_head_kv*head_dim)); data NULL unless qkv_bias */
    mp_tensor bq, bk, bv;
    /* the shared expert (data NULL unless shared_expert): out = sigmoid(x · gate_inp_shexp) *
     * down_shexp(silu(gate_shexp x) * up_shexp x) */
    mp_tensor gate_inp_shexp; /* ne = [n_embd] (one output row), F32/F16/BF16 like the router */
    mp_tensor gate_shexp;     /* ne = [n_embd, n_ff_shexp] */
    mp_tensor up_shexp;       /* ne = [n_embd, n_ff_shexp] */
    mp_tensor down_shexp;     /* ne = [n_ff_shexp, n_embd] */
    /* gpt-oss (data NULL unless its trait): the attention output's bias (n_embd) f32, the sink
     * logits (n_head) f32, the router's bias (n_expert) f32 and the experts' biases f32:
     * gate and up ne = [n_ff_exp, n_expert], down ne = [n_embd, n_expert] */
    mp_tensor bo, sinks;
    mp_tensor gate_inp_b, gate_exps_b, up_exps_b, down_exps_b;
} mp_layer;

typedef struct mp_model {
    mp_hparams hp;
    mp_gguf *gguf;          /* owner of the mapping; NULL for in-memory models */
    char *path;             /* NULL for in-memory models */
    mp_tensor tok_embd;     /* ne = [n_embd, n_vocab] */
    mp_tensor output_norm;  /* (n_embd) */
    mp_tensor output;       /* ne = [n_embd, n_vocab]; = tok_embd when tied */
    mp_layer *layers;       /* n_layer */
    /* A file that stores each expert as its own tensor (blk.N.ffn_gate.E.weight: GGUFs written
     * before llama.cpp merged them) gets its experts copied into one tensor per layer and kind in
     * this anonymous mapping (model_load.c), so that every expert tensor has the merged layout;
     * NULL for files with merged tensors, whose expert tensors are views into the GGUF mapping. */
    void *expert_copy;
    size_t expert_copy_bytes;
} mp_model;

mp_status mp_model_load(const char *path, mp_model **out, mp_error *err);
/* Build a descriptor over an already open GGUF (takes ownership of g on success). */
mp_status mp_model_from_gguf(mp_gguf *g, mp_model **out, mp_error *err);
/* Frees a descriptor made by mp_model_load / mp_model_from_gguf (closes its GGUF). */
void mp_model_free(mp_model *m);
/* Check the invariants above on any descriptor (the loader calls it; in-memory builders should):
 * hyperparameter ranges, and every tensor present with its exact shape and a supported type
 * (norm weights F32; router F32/F16/BF16; other matrices any weight type of kernels/quant.h).
 * Errors name m->path (or "(in-memory model)") and the tensor. */
mp_status mp_model_validate(const mp_model *m, mp_error *err);
/* "[2048, 768, 128]" (trailing 1s dropped) for error messages. */
void mp_shape_format(const int64_t ne[4], char *buf, size_t cap);

/* The window of layer il's attention in positions: a query at position p attends to keys
 * (p - window, p]; 0 for full causal attention. */
int64_t mp_layer_window(const mp_hparams *hp, int64_t il);
/* RoPE's angle per position of each rotated pair i < rot_dim / 2 (theta[i]: the angle of position
 * p is p * theta[i], in double as the CPU's table computes it) and the factor of cos and sin (1
 * without YaRN): the one rule both executors rotate by. */
void mp_rope_freqs(const mp_hparams *hp, double *theta, float *mscale);

/* Bytes of one expert of layer il (gate + up + down slices), from the tensor types and shapes. */
size_t mp_model_expert_bytes(const mp_model *m, int64_t il);
/* Bytes of everything that is not a routed expert (attention, norms, router, shared experts,
 * embeddings, head). */
size_t mp_model_dense_bytes(const mp_model *m);
/* The expert types of a layer as cost files name them: the gate type when gate, up and down
 * agree ("Q8_0"), else "GATE/DOWN" ("Q4_K/Q6_K") or "GATE/UP/DOWN"; at most MP_EXPERT_QUANT_MAX - 1 characters. */
void mp_model_expert_quant(const mp_layer *L, char out[MP_EXPERT_QUANT_MAX]);
/* The same name from the three types (MP_TYPE_*). */
void mp_expert_quant_name(int gate_type, int up_type, int down_type, char out[MP_EXPERT_QUANT_MAX]);
/* The name from a trace's quant_types as collect writes it ("Q4_K:ffn_gate_exps,Q4_K:ffn_up_exps,
 * Q6_K:ffn_down_exps", the first layer's tensors, in any order): true and out set when the text
 * names a known type for each of the three, else false. */
bool mp_expert_quant_from_types(const char *quant_types, char out[MP_EXPERT_QUANT_MAX]);

/* The byte slice of expert e within an expert tensor (ne[2] = n_expert). */
static inline const void *mp_expert_slice(const mp_tensor *t, int64_t e)
{
    return (const char *)t->data + (size_t)e * t->row_bytes * (size_t)t->ne[1];
}

#endif
