/* mkmodel/mkmodel.h — synthetic GGUF MoE models: presets, quant mixes, router skew, streaming write.
 *
 * `moeplan mkmodel` writes a GGUF file that the runtime (and llama.cpp) can load: the keys, tensor
 * names and shapes of a real qwen3moe / olmoe / mixtral / qwen2moe / gpt-oss checkpoint, random weights from a
 * seeded PRNG, a byte-level BPE vocabulary learned on a built-in corpus, and routers with a controllable
 * popularity skew (a per-layer Zipf profile over a per-layer random expert permutation).
 *
 * Invariants:
 *  - the output depends only on the config (shapes, types, skew, seed), never on the thread count:
 *    every tensor row is generated from its own PRNG stream, seeded by (seed, tensor, row);
 *  - memory stays bounded by one chunk of rows per tensor (a few MiB per thread), whatever the
 *    model size; data streams through mp_gguf_writer to PATH.tmp.<pid>, renamed when complete;
 *  - an existing output file is never touched unless `force` is set.
 */
#ifndef MP_MKMODEL_MKMODEL_H
#define MP_MKMODEL_MKMODEL_H

#include <stdbool.h>
#include <stdint.h>

#include "base/error.h"
#include "runtime/model.h"

/* Tensor classes: each can get its own quant type (--type-CLASS). */
typedef enum mp_mk_class {
    MP_MK_EMBD = 0,     /* token_embd */
    MP_MK_OUTPUT,       /* output (the LM head) */
    MP_MK_ATTN_Q,       /* blk.N.attn_q */
    MP_MK_ATTN_K,       /* blk.N.attn_k */
    MP_MK_ATTN_V,       /* blk.N.attn_v */
    MP_MK_ATTN_OUT,     /* blk.N.attn_output */
    MP_MK_ROUTER,       /* blk.N.ffn_gate_inp */
    MP_MK_FFN_GATE,     /* blk.N.ffn_gate_exps */
    MP_MK_FFN_UP,       /* blk.N.ffn_up_exps */
    MP_MK_FFN_DOWN,     /* blk.N.ffn_down_exps */
    MP_MK_NORM,         /* every *_norm vector */
    MP_MK_BIAS,         /* every bias: blk.N.attn_{q,k,v}.bias (qwen2moe, gpt-oss); attn_output.bias,
                         * ffn_gate_inp.bias, ffn_{gate,up,down}_exps.bias (gpt-oss) */
    MP_MK_SHEXP_GATE_INP, /* blk.N.ffn_gate_inp_shexp: the shared expert's sigmoid gate (qwen2moe) */
    MP_MK_SHEXP_GATE,   /* blk.N.ffn_gate_shexp (qwen2moe) */
    MP_MK_SHEXP_UP,     /* blk.N.ffn_up_shexp (qwen2moe) */
    MP_MK_SHEXP_DOWN,   /* blk.N.ffn_down_shexp (qwen2moe) */
    MP_MK_SINKS,        /* blk.N.attn_sinks: a logit per query head (gpt-oss) */
    MP_MK_N_CLASSES
} mp_mk_class;

#define MP_MK_NAME_MAX 64

typedef struct mp_mkmodel_config {
    char preset[MP_MK_NAME_MAX]; /* preset it started from ("" for --arch), recorded in the file */
    char name[MP_MK_NAME_MAX];   /* general.name */
    char mix[MP_MK_NAME_MAX];    /* quant mix name ("custom" once a class is overridden) */
    mp_arch arch;
    int64_t n_layer;
    int64_t n_embd;
    int64_t n_head;
    int64_t n_head_kv;
    int64_t head_dim;
    int64_t n_expert;
    int64_t n_expert_used;  /* top-k */
    int64_t n_ff_exp;       /* expert FFN hidden size */
    int64_t n_ff_shexp;     /* the shared expert's FFN hidden size; 0 for an architecture without one
                             * (mp_arch_traits.shared_expert), > 0 for one with one */
    int64_t n_vocab;
    int64_t n_ctx;          /* context_length written to the file */
    int64_t n_swa;          /* attention.sliding_window: > 0 exactly where the architecture has
                             * sliding-window layers (mp_arch_traits.swa_period: gpt-oss) */
    float rope_freq_base;
    float rope_yarn_factor; /* rope.scaling.factor with rope.scaling.type "yarn"; 0: no rope.scaling keys */
    int64_t rope_yarn_orig_ctx; /* rope.scaling.original_context_length (with a factor only) */
    float rms_eps;
    int types[MP_MK_N_CLASSES]; /* mp_type per class */
    uint32_t set_types;     /* bit c: class c's type was set by --type-CLASS (never falls back) */
    double skew;            /* Zipf exponent s of the router prior: expert of rank r gets
                             * logit bias -s * ln(r + 1); 0 = no preference */
    uint64_t seed;
    int n_threads;          /* quantization threads; 0 = the CPUs this process may use (does not change output) */
    bool split_experts;     /* each expert its own 2-D tensor (blk.N.ffn_gate.E.weight), as GGUFs
                             * written before llama.cpp merged them; the same values as merged */
    bool fuse_gate_up;      /* gate and up in one tensor per layer (blk.N.ffn_gate_up_exps.weight:
                             * each expert's gate rows, then its up rows), as llama.cpp's converter
                             * writes with --fuse-gate-up-exps; the same values as separate */
    bool llama_layers;      /* --layer-mix llama: the q4_k_m / q5_k_m mix's 6-bit classes by layer
                             * as llama.cpp's quantizer gives them (mp_mkmodel_tensor_type) */
} mp_mkmodel_config;

/* The default router skew: tuned so that the `flame` geometry (64 experts, top-6) gives the top
 * half of experts about the share of routes the real FLAME-MoE-290M trace shows (docs/mkmodel.md). */
#define MP_MK_DEFAULT_SKEW 0.05

/* Preset names, NULL-terminated, for --help. */
extern const char *const mp_mkmodel_preset_names[];

/* Fill cfg from a preset ("tiny", "flame", "qwen3-30b-a3b", "olmoe", "mixtral", "qwen2-57b-a14b",
 * "gpt-oss-20b") with its architecture's mix (q4_k_m; gpt-oss mxfp4_moe), the default skew and seed 0.
 * Unknown names are an MP_ERR_ARG error listing the presets. */
mp_status mp_mkmodel_preset(const char *name, mp_mkmodel_config *cfg, mp_error *err);
/* Fill cfg with an architecture's small defaults (the tiny shapes) for --arch NAME. */
mp_status mp_mkmodel_arch(const char *arch_name, mp_mkmodel_config *cfg, mp_error *err);
/* Set every class from a mix: "q2_k", "q3_k_m", "q4_k_m", "q5_k_m", "q8_0", "mxfp4_moe" (llama.cpp's
 * MXFP4_MOE: routed experts MXFP4, the other matrices Q8_0), "bf16", "f16", "f32". Norms, biases,
 * sinks, the router and the shared expert's gate stay F32 (and Q4_K_M puts attn_v, ffn_down_exps,
 * ffn_down_shexp and output in Q6_K). */
mp_status mp_mkmodel_set_mix(mp_mkmodel_config *cfg, const char *mix, mp_error *err);
/* Override a class group's type: group is one of "embd", "output", "attn" (q,k,v,output), "attn-q",
 * "attn-k", "attn-v", "attn-output", "router", "experts" (gate,up,down), "ffn-gate", "ffn-up",
 * "ffn-down", "norm", "bias", "shexp" (the shared expert's gate,up,down), "shexp-gate-inp",
 * "shexp-gate", "shexp-up", "shexp-down", "sinks"; type a name such as "Q4_K" (case-insensitive).
 * mp_mkmodel_validate refuses a class the architecture does not have, and a type the runtime does
 * not load for the class (norm, bias, sinks: F32 only; router, shexp-gate-inp: F32, F16, BF16). */
mp_status mp_mkmodel_set_type(mp_mkmodel_config *cfg, const char *group, const char *type_name,
                              mp_error *err);
/* The type a mix's class falls back to where its rows of n elements do not divide into the mix's
 * type's blocks (a hidden size or expert FFN size not a multiple of 256 under a K-quant mix), as
 * llama.cpp's quantizer falls back: Q2_K, Q3_K and IQ4_XS to IQ4_NL, Q4_K to Q5_0, Q5_K to Q5_1, Q6_K to
 * Q8_0, and F16 where n is not even a multiple of 32 (any type). type itself where it fits. */
int mp_mkmodel_fallback_type(int type, int64_t n);
/* The classes that fall back, as "ffn-down Q6_K -> Q8_0 (rows of 96), ..." into buf (truncated at
 * cap); returns how many. */
size_t mp_mkmodel_describe_fallbacks(const mp_mkmodel_config *cfg, char *buf, size_t cap);
/* The type of class cls's tensor in layer `layer` (-1: not a layer's). types[cls], except with
 * llama_layers (the q4_k_m or q5_k_m mix): llama.cpp's Q4_K_M / Q5_K_M give attn_v and ffn_down
 * (ffn_down_exps and ffn_down_shexp) 6 bits only in the first and last eighth of the layers and in every third layer between (its
 * use_more_bits), the mix's own type (Q4_K, Q5_K) elsewhere; and a model of 8 experts attn_k and
 * attn_v in Q8_0 (llama.cpp's rule for Mixtral-shaped models). mp_mkmodel_validate refuses
 * llama_layers with any other mix (a --type-CLASS override makes the mix "custom"). A class whose
 * rows do not divide into that type's blocks takes mp_mkmodel_fallback_type, unless --type-CLASS
 * set it (mp_mkmodel_validate refuses that shape then). */
int mp_mkmodel_tensor_type(const mp_mkmodel_config *cfg, mp_mk_class cls, int64_t layer);
/* Check shapes and types: positive sizes, n_head % n_head_kv == 0, top-k <= experts, a shared
 * expert FFN size exactly where the architecture has a shared expert (--shared-ff), a sliding window
 * exactly where it has sliding-window layers (--sliding-window), a YaRN factor of 0 or >= 1 with an
 * original context, no --type-CLASS for a class the architecture lacks, the vector and router
 * classes in types the runtime loads them in, every tensor's row length a multiple of its type's
 * block (the error names the tensor class, the row length and suggests a type that fits). */
mp_status mp_mkmodel_validate(const mp_mkmodel_config *cfg, mp_error *err);

/* One tensor of the model, in file order. */
typedef struct mp_mk_tensor {
    char name[MP_MK_NAME_MAX];
    uint32_t n_dims;
    int64_t ne[4];     /* ne[0] = row length (input dim); unused dims are 1 */
    int type;          /* mp_type */
    mp_mk_class cls;
    mp_mk_class bias_of; /* a bias (cls MP_MK_BIAS): the class of the matrix it adds to, whose
                          * scale and bias-channel rule its values follow; cls otherwise */
    int64_t layer;     /* -1 for token_embd, output_norm, output */
    int64_t stream;    /* the generator's stream: the tensor's index in the merged plan */
    int64_t row0;      /* its first row in that tensor's rows (an expert of a split plan: E x ne[1]) */
    int64_t up_stream; /* a fused gate_up tensor: the up rows' stream (each expert: ne[1] / 2 rows of
                        * `stream`, then as many of this); -1 otherwise */
} mp_mk_tensor;

/* The tensor list of a validated config (malloc'd array; caller frees). */
mp_status mp_mkmodel_plan(const mp_mkmodel_config *cfg, mp_mk_tensor **tensors, int64_t *n,
                          mp_error *err);
/* Bytes of tensor data the file will hold (without padding and metadata). */
uint64_t mp_mkmodel_data_bytes(const mp_mk_tensor *tensors, int64_t n);

/* Progress: called from the writing thread after each chunk with the bytes of tensor data written
 * so far. Returning false cancels the write (MP_ERR_IO "interrupted"; the temporary file is
 * removed), which is how the CLI honours Ctrl-C during a multi-hour generation. */
typedef bool (*mp_mkmodel_progress_fn)(void *user, uint64_t done_bytes, uint64_t total_bytes);

/* Generate and write the model to path (validates cfg first). Refuses an existing path unless
 * force. progress may be NULL. */
mp_status mp_mkmodel_write(const mp_mkmodel_config *cfg, const char *path, bool force,
                           mp_mkmodel_progress_fn progress, void *progress_user, mp_error *err);

/* The router's rank of expert e in layer il (0 = most preferred): a permutation of the experts
 * drawn per layer from the seed. Exposed so that tests can compare measured routing with it. */
int64_t mp_mkmodel_expert_rank(const mp_mkmodel_config *cfg, int64_t il, int64_t e);

/* ---- measuring what the router does (mkmodel/mkmodel_measure.c) ----
 * Run n_seq sequences of seq_len tokens of the built-in corpus (sequences start evenly spread over
 * it, the KV cache reset between them, as a batch of unrelated prompts) through the model at path
 * and count the routes of every (layer, expert). counts is malloc'd (n_layer x n_expert). */
typedef struct mp_mk_routes {
    int64_t n_layer, n_expert, top_k;
    int64_t n_tokens;   /* tokens evaluated */
    int64_t *counts;    /* (n_layer, n_expert) routes per expert */
} mp_mk_routes;

mp_status mp_mkmodel_measure_routes(const char *path, int64_t n_seq, int64_t seq_len, int n_threads,
                                    mp_mk_routes *out, mp_error *err);
void mp_mk_routes_free(mp_mk_routes *r);
/* Share of routes served by the most-used half of each layer's experts, pooled over layers. */
double mp_mk_routes_top_half_share(const mp_mk_routes *r);
/* The same for one layer. */
double mp_mk_routes_layer_top_half_share(const mp_mk_routes *r, int64_t layer);

#endif
