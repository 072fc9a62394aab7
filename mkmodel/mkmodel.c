/* mkmodel/mkmodel.c — mkmodel's configuration: presets, quant mixes, per-class types, validation,
 * and the tensor plan (names, shapes, types in file order). Generation and writing live in
 * mkmodel/mkmodel_write.c.
 *
 * Shapes follow llama.cpp's GGUF conventions: ne[0] is the input dimension of a matrix, so a
 * projection from n_embd to m has ne = [n_embd, m]; expert tensors stack experts in ne[2]:
 * gate/up ne = [n_embd, n_ff_exp, n_expert], down ne = [n_ff_exp, n_embd, n_expert]; a shared
 * expert (qwen2moe) is one such expert of its own size: gate/up [n_embd, n_ff_shexp], down
 * [n_ff_shexp, n_embd]. gpt-oss's biases are vectors of their matrix's output size, the experts' stacked
 * like their weights: gate/up [n_ff_exp, n_expert], down [n_embd, n_expert]; its sinks are [n_head].
 */
#include "mkmodel/mkmodel.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "kernels/quant.h"

const char *const mp_mkmodel_preset_names[] = {"tiny", "flame", "qwen3-30b-a3b", "olmoe", "mixtral",
                                               "qwen2-57b-a14b", "gpt-oss-20b", NULL};

static const char *const class_names[MP_MK_N_CLASSES] = {
    [MP_MK_EMBD] = "embd",         [MP_MK_OUTPUT] = "output",     [MP_MK_ATTN_Q] = "attn-q",
    [MP_MK_ATTN_K] = "attn-k",     [MP_MK_ATTN_V] = "attn-v",     [MP_MK_ATTN_OUT] = "attn-output",
    [MP_MK_ROUTER] = "router",     [MP_MK_FFN_GATE] = "ffn-gate", [MP_MK_FFN_UP] = "ffn-up",
    [MP_MK_FFN_DOWN] = "ffn-down", [MP_MK_NORM] = "norm",         [MP_MK_BIAS] = "bias",
    [MP_MK_SHEXP_GATE_INP] = "shexp-gate-inp", [MP_MK_SHEXP_GATE] = "shexp-gate",
    [MP_MK_SHEXP_UP] = "shexp-up", [MP_MK_SHEXP_DOWN] = "shexp-down", [MP_MK_SINKS] = "sinks",
};

/* Whether the architecture has class cls's tensors: biases are qwen2moe's and gpt-oss's, a shared
 * expert qwen2moe's, sinks gpt-oss's. */
static bool class_used(const mp_mkmodel_config *c, mp_mk_class cls)
{
    const mp_arch_traits *tr = mp_arch_get(c->arch);
    switch (cls) {
    case MP_MK_BIAS: return tr->qkv_bias || tr->attn_out_bias || tr->moe_bias;
    case MP_MK_SHEXP_GATE_INP:
    case MP_MK_SHEXP_GATE:
    case MP_MK_SHEXP_UP:
    case MP_MK_SHEXP_DOWN: return tr->shared_expert;
    case MP_MK_SINKS: return tr->attn_sinks;
    default: return true;
    }
}

/* What a class the architecture lacks is called in the refusal, and which architectures have it. */
static const char *class_missing_what(mp_mk_class cls)
{
    switch (cls) {
    case MP_MK_BIAS: return "biases (qwen2moe and gpt-oss have)";
    case MP_MK_SINKS: return "attention sinks (gpt-oss has)";
    default: return "shared expert (qwen2moe has)";
    }
}

static void set_shape(mp_mkmodel_config *c, int64_t n_layer, int64_t n_embd, int64_t n_head,
                      int64_t n_head_kv, int64_t head_dim, int64_t n_expert, int64_t top_k,
                      int64_t n_ff_exp, int64_t n_vocab, int64_t n_ctx)
{
    c->n_layer = n_layer;
    c->n_embd = n_embd;
    c->n_head = n_head;
    c->n_head_kv = n_head_kv;
    c->head_dim = head_dim;
    c->n_expert = n_expert;
    c->n_expert_used = top_k;
    c->n_ff_exp = n_ff_exp;
    c->n_vocab = n_vocab;
    c->n_ctx = n_ctx;
}

static void defaults(mp_mkmodel_config *c, mp_arch arch)
{
    memset(c, 0, sizeof *c);
    c->arch = arch;
    c->skew = MP_MK_DEFAULT_SKEW;
    c->seed = 0;
    /* CI-sized: every row length is a multiple of 256 so that the K-quants (the q4_k_m default)
     * apply; a few MB in q4_k_m. */
    set_shape(c, 4, 256, 4, 2, 64, 16, 4, 256, 512, 512);
    switch (arch) {
    case MP_ARCH_QWEN3MOE: c->rope_freq_base = 1e6f; c->rms_eps = 1e-6f; break;
    case MP_ARCH_OLMOE: c->rope_freq_base = 1e4f; c->rms_eps = 1e-5f; break;
    case MP_ARCH_MIXTRAL: c->rope_freq_base = 1e6f; c->rms_eps = 1e-5f; break;
    case MP_ARCH_QWEN2MOE: /* the shared expert 4x an expert, as Qwen1.5-MoE-A2.7B's (5632 = 4 x 1408) */
        c->rope_freq_base = 1e6f;
        c->rms_eps = 1e-6f;
        c->n_ff_shexp = 4 * c->n_ff_exp;
        break;
    case MP_ARCH_GPTOSS:
        /* gpt-oss's window of 128 (at 512 positions, half the even layers' keys are out of it) and
         * its YaRN scaled to the tiny context: the trained context is factor x original, 4 x 128 =
         * 512, as gpt-oss's is 32 x 4096 = 131072 */
        c->rope_freq_base = 150000.0f;
        c->rms_eps = 1e-5f;
        c->n_swa = 128;
        c->rope_yarn_factor = 4.0f;
        c->rope_yarn_orig_ctx = 128;
        break;
    }
    /* gpt-oss's published GGUFs store the experts in MXFP4 (llama.cpp's MXFP4_MOE) */
    mp_mkmodel_set_mix(c, arch == MP_ARCH_GPTOSS ? "mxfp4_moe" : "q4_k_m", NULL);
}

/* Append name to the ", "-separated list in buf (the names an error message offers). */
static void list_append(char *buf, size_t cap, const char *name)
{
    const size_t off = strlen(buf);
    if (off < cap)
        snprintf(buf + off, cap - off, "%s%s", off ? ", " : "", name);
}

/* The architecture's name as --arch and the runtime's traits spell it. */
static const char *arch_cli_name(mp_arch a)
{
    const mp_arch_traits *tr = mp_arch_get(a);
    return tr ? tr->name : "?";
}

mp_status mp_mkmodel_arch(const char *arch_name, mp_mkmodel_config *cfg, mp_error *err)
{
    /* every architecture of the runtime's traits table, and "llama" for Mixtral (as its files say) */
    const int id = !strcmp(arch_name, "llama") ? MP_ARCH_MIXTRAL : mp_arch_from_name(arch_name);
    if (id < 0) {
        char list[160] = "";
        for (int a = 0; mp_arch_get((mp_arch)a); a++)
            list_append(list, sizeof list, arch_cli_name((mp_arch)a));
        return mp_fail(err, MP_ERR_ARG, "--arch '%s': expected one of %s", arch_name, list);
    }
    const mp_arch arch = (mp_arch)id;
    defaults(cfg, arch);
    snprintf(cfg->name, sizeof cfg->name, "moeplan-synthetic-%s", arch_cli_name(arch));
    return MP_OK;
}

mp_status mp_mkmodel_preset(const char *name, mp_mkmodel_config *cfg, mp_error *err)
{
    if (!strcmp(name, "tiny")) {
        defaults(cfg, MP_ARCH_QWEN3MOE);
    } else if (!strcmp(name, "flame")) {
        /* The routing geometry of FLAME-MoE-290M (25 MoE layers, 64 experts, top-6), for replaying
         * and comparing with its real traces; the dense sizes are kept small. */
        defaults(cfg, MP_ARCH_QWEN3MOE);
        set_shape(cfg, 25, 256, 4, 4, 64, 64, 6, 256, 2048, 2048);
    } else if (!strcmp(name, "qwen3-30b-a3b")) {
        defaults(cfg, MP_ARCH_QWEN3MOE);
        set_shape(cfg, 48, 2048, 32, 4, 128, 128, 8, 768, 151936, 40960);
        cfg->rope_freq_base = 1e6f;
        cfg->rms_eps = 1e-6f;
    } else if (!strcmp(name, "olmoe")) {
        defaults(cfg, MP_ARCH_OLMOE);
        set_shape(cfg, 16, 2048, 16, 16, 128, 64, 8, 1024, 50304, 4096);
    } else if (!strcmp(name, "mixtral")) {
        defaults(cfg, MP_ARCH_MIXTRAL);
        set_shape(cfg, 32, 4096, 32, 8, 128, 8, 2, 14336, 32000, 32768);
    } else if (!strcmp(name, "qwen2-57b-a14b")) {
        defaults(cfg, MP_ARCH_QWEN2MOE);
        set_shape(cfg, 28, 3584, 28, 4, 128, 64, 8, 2560, 151936, 32768);
        cfg->n_ff_shexp = 20480;
    } else if (!strcmp(name, "gpt-oss-20b")) {
        /* hidden 2880 = 90 blocks of 32 but no whole block of 256: the mxfp4_moe mix (MXFP4
         * experts, Q8_0 elsewhere) fits it as is; a K-quant mix's classes fall back */
        defaults(cfg, MP_ARCH_GPTOSS);
        set_shape(cfg, 24, 2880, 64, 8, 64, 32, 4, 2880, 201088, 131072);
        cfg->n_swa = 128;
        cfg->rope_yarn_factor = 32.0f;
        cfg->rope_yarn_orig_ctx = 4096;
    } else {
        char list[160] = "";
        for (int i = 0; mp_mkmodel_preset_names[i]; i++)
            list_append(list, sizeof list, mp_mkmodel_preset_names[i]);
        return mp_fail(err, MP_ERR_ARG, "--preset '%s': expected one of %s", name, list);
    }
    snprintf(cfg->preset, sizeof cfg->preset, "%s", name);
    snprintf(cfg->name, sizeof cfg->name, "moeplan-synthetic-%s", name);
    return MP_OK;
}

mp_status mp_mkmodel_set_mix(mp_mkmodel_config *cfg, const char *mix, mp_error *err)
{
    int matrix, experts = -1; /* experts: the routed experts' type where the mix gives them their own */
    if (!strcasecmp(mix, "mxfp4_moe")) {
        matrix = MP_TYPE_Q8_0;
        experts = MP_TYPE_MXFP4;
    } else if (!strcasecmp(mix, "q4_k_m"))
        matrix = MP_TYPE_Q4_K;
    else if (!strcasecmp(mix, "q5_k_m"))
        matrix = MP_TYPE_Q5_K;
    else if (!strcasecmp(mix, "q3_k_m"))
        matrix = MP_TYPE_Q3_K;
    else if (!strcasecmp(mix, "q2_k"))
        matrix = MP_TYPE_Q2_K;
    else if (!strcasecmp(mix, "q8_0"))
        matrix = MP_TYPE_Q8_0;
    else if (!strcasecmp(mix, "bf16"))
        matrix = MP_TYPE_BF16;
    else if (!strcasecmp(mix, "f16"))
        matrix = MP_TYPE_F16;
    else if (!strcasecmp(mix, "f32"))
        matrix = MP_TYPE_F32;
    else
        return mp_fail(err, MP_ERR_ARG, "--quant '%s': expected one of q2_k, q3_k_m, q4_k_m, q5_k_m, q8_0, mxfp4_moe, "
                       "bf16, f16, f32", mix);
    for (int c = 0; c < MP_MK_N_CLASSES; c++)
        cfg->types[c] = matrix;
    cfg->set_types = 0; /* the mix's, each free to fall back where its rows do not fit */
    /* Vectors and the router stay in F32 in every mix: they are tiny, and the router's logits
     * decide the routing this tool exists to control (llama.cpp's converter and quantizer keep
     * every 1-D tensor, biases and the shared expert's gate among them, in F32 too). */
    cfg->types[MP_MK_NORM] = MP_TYPE_F32;
    cfg->types[MP_MK_BIAS] = MP_TYPE_F32;
    cfg->types[MP_MK_ROUTER] = MP_TYPE_F32;
    cfg->types[MP_MK_SHEXP_GATE_INP] = MP_TYPE_F32;
    cfg->types[MP_MK_SINKS] = MP_TYPE_F32;
    if (matrix == MP_TYPE_Q4_K || matrix == MP_TYPE_Q5_K) {
        /* Q4_K_M's and Q5_K_M's recipe: the tensors most sensitive to quantization error get 6 bits. */
        cfg->types[MP_MK_ATTN_V] = MP_TYPE_Q6_K;
        cfg->types[MP_MK_FFN_DOWN] = MP_TYPE_Q6_K;
        cfg->types[MP_MK_OUTPUT] = MP_TYPE_Q6_K;
    } else if (matrix == MP_TYPE_Q3_K || matrix == MP_TYPE_Q2_K) {
        /* after llama.cpp's Q3_K_M and Q2_K: more bits where the error costs most */
        cfg->types[MP_MK_ATTN_V] = matrix == MP_TYPE_Q3_K ? MP_TYPE_Q5_K : MP_TYPE_Q4_K;
        cfg->types[MP_MK_FFN_DOWN] = MP_TYPE_Q4_K;
        cfg->types[MP_MK_OUTPUT] = MP_TYPE_Q6_K;
    }
    /* llama.cpp's recipes match ffn_down by name: the shared expert's down gets the experts' type */
    cfg->types[MP_MK_SHEXP_DOWN] = cfg->types[MP_MK_FFN_DOWN];
    /* llama.cpp's MXFP4_MOE matches by shape: the 3-D expert stacks only, a shared expert (2-D) stays
     * in the mix's Q8_0 */
    if (experts >= 0)
        cfg->types[MP_MK_FFN_GATE] = cfg->types[MP_MK_FFN_UP] = cfg->types[MP_MK_FFN_DOWN] = experts;
    int i = 0;
    for (; mix[i] && i < MP_MK_NAME_MAX - 1; i++)
        cfg->mix[i] = (char)(mix[i] >= 'A' && mix[i] <= 'Z' ? mix[i] - 'A' + 'a' : mix[i]);
    cfg->mix[i] = '\0';
    return MP_OK;
}

mp_status mp_mkmodel_set_type(mp_mkmodel_config *cfg, const char *group, const char *type_name,
                              mp_error *err)
{
    int type = mp_type_from_name(type_name);
    if (type < 0 || !mp_type_supported(type))
        return mp_fail(err, MP_ERR_ARG, "--type-%s '%s': expected one of %s", group, type_name, mp_type_names());
    int first = -1, last = -1;
    if (!strcmp(group, "attn")) {
        first = MP_MK_ATTN_Q;
        last = MP_MK_ATTN_OUT;
    } else if (!strcmp(group, "experts")) {
        first = MP_MK_FFN_GATE;
        last = MP_MK_FFN_DOWN;
    } else if (!strcmp(group, "shexp")) {
        first = MP_MK_SHEXP_GATE;
        last = MP_MK_SHEXP_DOWN;
    } else {
        for (int c = 0; c < MP_MK_N_CLASSES; c++)
            if (!strcmp(group, class_names[c]))
                first = last = c;
    }
    if (first < 0)
        return mp_fail(err, MP_ERR_ARG,
                       "--type-%s: unknown tensor class; expected embd, output, attn, attn-q, "
                       "attn-k, attn-v, attn-output, router, experts, ffn-gate, ffn-up, ffn-down, "
                       "norm, bias, shexp, shexp-gate-inp, shexp-gate, shexp-up, shexp-down, sinks",
                       group);
    for (int c = first; c <= last; c++) {
        cfg->types[c] = type;
        cfg->set_types |= 1u << c;
    }
    snprintf(cfg->mix, sizeof cfg->mix, "custom");
    return MP_OK;
}

/* The row length (ne[0]) of every tensor of a class. */
static int64_t class_row_len(const mp_mkmodel_config *c, mp_mk_class cls)
{
    switch (cls) {
    case MP_MK_EMBD:
    case MP_MK_OUTPUT:
    case MP_MK_ATTN_Q:
    case MP_MK_ATTN_K:
    case MP_MK_ATTN_V:
    case MP_MK_ROUTER:
    case MP_MK_FFN_GATE:
    case MP_MK_FFN_UP:
    case MP_MK_SHEXP_GATE_INP:
    case MP_MK_SHEXP_GATE:
    case MP_MK_SHEXP_UP: return c->n_embd;
    case MP_MK_ATTN_OUT: return c->n_head * c->head_dim;
    case MP_MK_FFN_DOWN: return c->n_ff_exp;
    case MP_MK_SHEXP_DOWN: return c->n_ff_shexp;
    case MP_MK_NORM:
    case MP_MK_BIAS:
    case MP_MK_SINKS: return 1; /* vectors of several lengths, in F32 only (vector_class): any length fits */
    case MP_MK_N_CLASSES: break;
    }
    return 0;
}

static const char *class_row_what(mp_mk_class cls)
{
    switch (cls) {
    case MP_MK_ATTN_OUT: return "heads x head dim";
    case MP_MK_FFN_DOWN: return "expert FFN size";
    case MP_MK_SHEXP_DOWN: return "shared expert FFN size";
    default: return "hidden size";
    }
}

int mp_mkmodel_fallback_type(int type, int64_t n)
{
    if (mp_type_row_bytes(type, n))
        return type;
    int next;
    switch (type) { /* llama.cpp's fallback (llama-quant.cpp) for rows that do not fill K-quant blocks */
    case MP_TYPE_Q2_K: case MP_TYPE_Q3_K: case MP_TYPE_IQ4_XS: next = MP_TYPE_IQ4_NL; break;
    case MP_TYPE_Q4_K: next = MP_TYPE_Q5_0; break;
    case MP_TYPE_Q5_K: next = MP_TYPE_Q5_1; break;
    case MP_TYPE_Q6_K: next = MP_TYPE_Q8_0; break;
    default: next = MP_TYPE_F16; break;
    }
    if (mp_type_row_bytes(next, n))
        return next;
    return mp_type_row_bytes(MP_TYPE_F16, n) ? MP_TYPE_F16 : MP_TYPE_F32;
}

size_t mp_mkmodel_describe_fallbacks(const mp_mkmodel_config *c, char *buf, size_t cap)
{
    size_t at = 0;
    int n = 0;
    if (cap)
        buf[0] = '\0';
    for (int cls = 0; cls < MP_MK_N_CLASSES; cls++) {
        if (!class_used(c, (mp_mk_class)cls))
            continue;
        const int64_t len = class_row_len(c, (mp_mk_class)cls);
        const int t = c->types[cls], f = mp_mkmodel_tensor_type(c, (mp_mk_class)cls, -1);
        if (f == t) /* fits, or set by --type-CLASS */
            continue;
        const int w = snprintf(buf + at, at < cap ? cap - at : 0, "%s%s %s -> %s (rows of %lld)", n ? ", " : "",
                               class_names[cls], mp_type_name(t), mp_type_name(f), (long long)len);
        at += w > 0 ? (size_t)w : 0;
        n++;
    }
    return (size_t)n;
}

/* Whether class cls's type falls back where its rows do not fit: a mix's, never a --type-CLASS's. */
static bool may_fall_back(const mp_mkmodel_config *c, mp_mk_class cls)
{
    return !(c->set_types & (1u << cls));
}

#define MK_MAX_DIM ((int64_t)1 << 24)

/* The classes the runtime reads in F32 only (model.c: norm weights, biases and sinks), as llama.cpp's
 * converter and quantizer keep every 1-D tensor. */
static bool vector_class(mp_mk_class cls)
{
    return cls == MP_MK_NORM || cls == MP_MK_BIAS || cls == MP_MK_SINKS;
}

/* The classes that decide rather than transform (the router, the shared expert's gate): the runtime
 * reads them in F32, F16 or BF16, never block-quantized. */
static bool decider_class(mp_mk_class cls)
{
    return cls == MP_MK_ROUTER || cls == MP_MK_SHEXP_GATE_INP;
}

/* The mix's own matrix type where its recipe has one that llama_layers lowers 6-bit classes to
 * (q4_k_m: Q4_K, q5_k_m: Q5_K), else -1. */
static int layer_mix_base(const mp_mkmodel_config *c)
{
    if (!strcmp(c->mix, "q4_k_m"))
        return MP_TYPE_Q4_K;
    if (!strcmp(c->mix, "q5_k_m"))
        return MP_TYPE_Q5_K;
    return -1;
}

/* mp_mkmodel_tensor_type before the row-length fallback */
static int mix_tensor_type(const mp_mkmodel_config *c, mp_mk_class cls, int64_t layer)
{
    const int t = c->types[cls];
    const int base = layer_mix_base(c);
    if (!c->llama_layers || layer < 0 || base < 0)
        return t;
    if ((cls == MP_MK_ATTN_K || cls == MP_MK_ATTN_V) && c->n_expert == 8)
        return MP_TYPE_Q8_0;
    if ((cls != MP_MK_ATTN_V && cls != MP_MK_FFN_DOWN && cls != MP_MK_SHEXP_DOWN) || t != MP_TYPE_Q6_K)
        return t;
    const int64_t n = c->n_layer, eighth = n / 8;
    const bool more = layer < eighth || layer >= 7 * n / 8 || (layer - eighth) % 3 == 2;
    return more ? t : base;
}

int mp_mkmodel_tensor_type(const mp_mkmodel_config *c, mp_mk_class cls, int64_t layer)
{
    const int t = mix_tensor_type(c, cls, layer);
    return may_fall_back(c, cls) ? mp_mkmodel_fallback_type(t, class_row_len(c, cls)) : t;
}

mp_status mp_mkmodel_validate(const mp_mkmodel_config *c, mp_error *err)
{
    struct {
        const char *flag;
        int64_t v;
        int64_t max;
    } dims[] = {
        {"--layers", c->n_layer, 4096},        {"--hidden", c->n_embd, 1 << 17},
        {"--heads", c->n_head, 1024},          {"--kv-heads", c->n_head_kv, 1024},
        {"--head-dim", c->head_dim, 4096},     {"--experts", c->n_expert, 65536},
        {"--top-k", c->n_expert_used, 65536},  {"--expert-ff", c->n_ff_exp, 1 << 20},
        {"--vocab", c->n_vocab, MK_MAX_DIM},   {"--ctx", c->n_ctx, 1 << 30},
    };
    for (size_t i = 0; i < sizeof dims / sizeof dims[0]; i++)
        if (dims[i].v < 1 || dims[i].v > dims[i].max)
            return mp_fail(err, MP_ERR_ARG, "%s %lld: expected an integer in 1..%lld", dims[i].flag,
                           (long long)dims[i].v, (long long)dims[i].max);
    const mp_arch_traits *tr = mp_arch_get(c->arch);
    if (tr->swa_period == 0 && c->n_swa)
        return mp_fail(err, MP_ERR_ARG, "--sliding-window %lld: architecture %s has no sliding-window layers "
                       "(gpt-oss has)", (long long)c->n_swa, arch_cli_name(c->arch));
    if (tr->swa_period > 0 && (c->n_swa < 1 || c->n_swa > 1 << 30))
        return mp_fail(err, MP_ERR_ARG, "--sliding-window %lld: expected an integer in 1..%lld", (long long)c->n_swa,
                       (long long)(1 << 30));
    if (c->rope_yarn_factor != 0.0f && !(c->rope_yarn_factor >= 1.0f && c->rope_yarn_factor <= 1e6f))
        return mp_fail(err, MP_ERR_ARG, "--yarn-factor %g: expected 0 (no YaRN) or a number in 1..1e6",
                       (double)c->rope_yarn_factor);
    if (c->rope_yarn_factor != 0.0f && (c->rope_yarn_orig_ctx < 1 || c->rope_yarn_orig_ctx > 1 << 30))
        return mp_fail(err, MP_ERR_ARG, "--yarn-ctx %lld: expected an integer in 1..%lld (YaRN's original context)",
                       (long long)c->rope_yarn_orig_ctx, (long long)(1 << 30));
    if (!tr->shared_expert && c->n_ff_shexp)
        return mp_fail(err, MP_ERR_ARG, "--shared-ff %lld: architecture %s has no shared expert (qwen2moe has)",
                       (long long)c->n_ff_shexp, arch_cli_name(c->arch));
    if (tr->shared_expert && (c->n_ff_shexp < 1 || c->n_ff_shexp > 1 << 20))
        return mp_fail(err, MP_ERR_ARG, "--shared-ff %lld: expected an integer in 1..%lld", (long long)c->n_ff_shexp,
                       (long long)(1 << 20));
    if (c->n_head % c->n_head_kv)
        return mp_fail(err, MP_ERR_ARG, "--heads %lld, --kv-heads %lld: expected heads to be a "
                       "multiple of kv-heads (grouped-query attention)",
                       (long long)c->n_head, (long long)c->n_head_kv);
    if (c->head_dim % 2)
        return mp_fail(err, MP_ERR_ARG, "--head-dim %lld: expected an even number (RoPE rotates "
                       "pairs)", (long long)c->head_dim);
    if (c->n_expert_used > c->n_expert)
        return mp_fail(err, MP_ERR_ARG, "--top-k %lld: expected at most --experts (%lld)",
                       (long long)c->n_expert_used, (long long)c->n_expert);
    if (c->arch == MP_ARCH_MIXTRAL && c->n_expert < 2)
        return mp_fail(err, MP_ERR_ARG, "--experts %lld: expected at least 2 for mixtral (its file says "
                       "'llama', which with one expert is a dense model, not a MoE)",
                       (long long)c->n_expert);
    if (c->n_expert > UINT16_MAX)
        return mp_fail(err, MP_ERR_ARG, "--experts %lld: expected at most 65535",
                       (long long)c->n_expert);
    if (!(c->skew >= 0.0 && c->skew <= 16.0))
        return mp_fail(err, MP_ERR_ARG, "--skew %g: expected a number in 0..16", c->skew);
    if (!(c->rope_freq_base > 0.0f) || !(c->rms_eps > 0.0f))
        return mp_fail(err, MP_ERR_ARG, "rope base %g / rms eps %g: expected positive numbers",
                       (double)c->rope_freq_base, (double)c->rms_eps);
    if (c->n_threads < 0 || c->n_threads > 1024)
        return mp_fail(err, MP_ERR_ARG, "--threads %d: expected 0..1024", c->n_threads);
    if (c->llama_layers && layer_mix_base(c) < 0)
        return mp_fail(err, MP_ERR_ARG, "--layer-mix llama: expected --quant q4_k_m or q5_k_m with no --type-CLASS "
                       "override (the mix is '%s')", c->mix);
    if (c->fuse_gate_up && c->split_experts)
        return mp_fail(err, MP_ERR_ARG, "--fuse-gate-up and --split-experts: expected one expert layout");
    if (c->fuse_gate_up && mp_mkmodel_tensor_type(c, MP_MK_FFN_GATE, 0) != mp_mkmodel_tensor_type(c, MP_MK_FFN_UP, 0))
        return mp_fail(err, MP_ERR_ARG, "--fuse-gate-up: ffn-gate is %s and ffn-up %s: expected one type for the "
                       "fused tensor", mp_type_name(mp_mkmodel_tensor_type(c, MP_MK_FFN_GATE, 0)),
                       mp_type_name(mp_mkmodel_tensor_type(c, MP_MK_FFN_UP, 0)));
    for (int cls = 0; cls < MP_MK_N_CLASSES; cls++) {
        int type = c->types[cls];
        if (!class_used(c, (mp_mk_class)cls)) {
            if (!may_fall_back(c, (mp_mk_class)cls))
                return mp_fail(err, MP_ERR_ARG, "--type-%s: architecture %s has no %s", class_names[cls],
                               arch_cli_name(c->arch), class_missing_what((mp_mk_class)cls));
            continue;
        }
        if (!mp_type_supported(type))
            return mp_fail(err, MP_ERR_ARG, "--type-%s: type id %d is not supported",
                           class_names[cls], type);
        /* a file the runtime would refuse is not written */
        if (vector_class((mp_mk_class)cls) && type != MP_TYPE_F32)
            return mp_fail(err, MP_ERR_ARG, "--type-%s %s: the runtime reads norms, biases and sinks in F32 only; use "
                           "--type-%s F32", class_names[cls], mp_type_name(type), class_names[cls]);
        if (decider_class((mp_mk_class)cls) && type != MP_TYPE_F32 && type != MP_TYPE_F16 && type != MP_TYPE_BF16)
            return mp_fail(err, MP_ERR_ARG, "--type-%s %s: the runtime reads the router and the shared expert's gate "
                           "in F32, F16 or BF16 only; use one of those", class_names[cls], mp_type_name(type));
        int64_t n = class_row_len(c, (mp_mk_class)cls);
        if (may_fall_back(c, (mp_mk_class)cls))
            continue; /* a mix's class: mp_mkmodel_tensor_type falls back where its rows do not fit */
        if (!mp_type_row_bytes(type, n))
            return mp_fail(err, MP_ERR_ARG,
                           "--type-%s %s: rows of %s tensors have %lld elements (%s), not a "
                           "multiple of %s's block of %lld; use --type-%s %s or change the shape",
                           class_names[cls], mp_type_name(type), class_names[cls], (long long)n,
                           class_row_what(cls), mp_type_name(type), (long long)mp_type_block_elems(type),
                           class_names[cls], mp_type_name(mp_mkmodel_fallback_type(type, n)));
    }
    /* Whole-tensor sizes must fit size_t arithmetic comfortably (the biggest is an expert stack). */
    double biggest = (double)c->n_embd * (double)c->n_ff_exp * (double)c->n_expert * 4.0;
    double embd = (double)c->n_embd * (double)c->n_vocab * 4.0;
    if (biggest > 1e15 || embd > 1e15)
        return mp_fail(err, MP_ERR_ARG, "shape: a tensor would exceed 1 PB; expected a smaller "
                       "model");
    return MP_OK;
}

typedef struct plan_builder {
    mp_mk_tensor *t;
    int64_t n, cap;
} plan_builder;

/* Tensor `tail` ("attn_q.bias"; "blk.N." before it for a layer's) of class cls. */
static int add_named(plan_builder *b, const mp_mkmodel_config *c, mp_mk_class cls, int64_t layer,
                     const char *tail, uint32_t n_dims, int64_t ne0, int64_t ne1, int64_t ne2)
{
    if (b->n == b->cap) {
        int64_t cap = b->cap ? b->cap * 2 : 64;
        mp_mk_tensor *t = realloc(b->t, (size_t)cap * sizeof *t);
        if (!t)
            return -1;
        b->t = t;
        b->cap = cap;
    }
    mp_mk_tensor *t = &b->t[b->n++];
    memset(t, 0, sizeof *t);
    const int w = layer >= 0 ? snprintf(t->name, sizeof t->name, "blk.%lld.%s", (long long)layer, tail)
                             : snprintf(t->name, sizeof t->name, "%s", tail);
    if (w < 0 || (size_t)w >= sizeof t->name)
        return -1; /* a name the GGUF writer's field cannot hold */
    t->n_dims = n_dims;
    t->ne[0] = ne0;
    t->ne[1] = ne1;
    t->ne[2] = ne2;
    t->ne[3] = 1;
    t->type = mp_mkmodel_tensor_type(c, cls, layer);
    t->cls = cls;
    t->bias_of = cls;
    t->layer = layer;
    t->up_stream = -1;
    return 0;
}

/* Weight `suffix`.weight of class cls. */
static int add(plan_builder *b, const mp_mkmodel_config *c, mp_mk_class cls, int64_t layer,
               const char *suffix, uint32_t n_dims, int64_t ne0, int64_t ne1, int64_t ne2)
{
    char tail[MP_MK_NAME_MAX];
    snprintf(tail, sizeof tail, "%s.weight", suffix);
    return add_named(b, c, cls, layer, tail, n_dims, ne0, ne1, ne2);
}

/* Bias `suffix`.bias (class bias) of a matrix of class of: a vector of the matrix's outputs, or for the
 * experts one per expert (n_dims 2, ne1 = n_expert). */
static int add_bias(plan_builder *b, const mp_mkmodel_config *c, mp_mk_class of, int64_t layer,
                    const char *suffix, uint32_t n_dims, int64_t ne0, int64_t ne1)
{
    char tail[MP_MK_NAME_MAX];
    snprintf(tail, sizeof tail, "%s.bias", suffix);
    if (add_named(b, c, MP_MK_BIAS, layer, tail, n_dims, ne0, ne1, 1))
        return -1;
    b->t[b->n - 1].bias_of = of;
    return 0;
}

/* Each layer's gate and up tensors replaced by one fused tensor, blk.N.ffn_gate_up_exps.weight
 * [n_embd, 2 n_ff, n_expert], in the gate's place: the writer takes each expert's gate rows from
 * the gate's stream, then its up rows from the up's (so the values are the separate file's). */
static void fuse_plan(plan_builder *b)
{
    int64_t k = 0;
    for (int64_t i = 0; i < b->n; i++) {
        mp_mk_tensor *t = &b->t[i];
        if (t->cls == MP_MK_FFN_UP && t->n_dims == 3)
            continue; /* folded into the gate before it */
        b->t[k] = *t;
        if (t->cls == MP_MK_FFN_GATE && t->n_dims == 3 && i + 1 < b->n && b->t[i + 1].cls == MP_MK_FFN_UP) {
            mp_mk_tensor *f = &b->t[k];
            snprintf(f->name, sizeof f->name, "blk.%lld.ffn_gate_up_exps.weight", (long long)f->layer);
            f->ne[1] *= 2;
            f->up_stream = b->t[i + 1].stream;
        }
        k++;
    }
    b->n = k;
}

/* The merged plan's expert tensors replaced by one 2-D tensor per expert (blk.N.ffn_gate.E.weight,
 * in the order gate, down, up of each expert, as llama.cpp's converter wrote them), each with its
 * merged tensor's stream and rows, so that the values are the merged file's. */
static int split_plan(plan_builder *b, const mp_mkmodel_config *c)
{
    int64_t n_split = 0;
    for (int64_t i = 0; i < b->n; i++)
        n_split += b->t[i].n_dims == 3;
    const int64_t E = c->n_expert, n = b->n - n_split + n_split * E;
    mp_mk_tensor *t = n > 0 && E > 0 ? calloc((size_t)n, sizeof *t) : NULL;
    if (!t)
        return -1;
    int64_t k = 0;
    for (int64_t i = 0; i < b->n; i++) {
        if (b->t[i].n_dims != 3) {
            t[k++] = b->t[i];
            continue;
        }
        if (b->t[i].cls != MP_MK_FFN_GATE)
            continue; /* written with its layer's gate, below */
        for (int64_t e = 0; e < E; e++)
            for (int64_t j = i; j < b->n && j < i + 3; j++) {
                /* gate (j = i), then down (i + 2), then up (i + 1): the order of the converter */
                const mp_mk_tensor *m = &b->t[j == i ? i : j == i + 1 ? i + 2 : i + 1];
                mp_mk_tensor *x = &t[k++];
                *x = *m;
                const char *kind = m->cls == MP_MK_FFN_GATE ? "ffn_gate" : m->cls == MP_MK_FFN_UP ? "ffn_up" : "ffn_down";
                snprintf(x->name, sizeof x->name, "blk.%lld.%s.%lld.weight", (long long)m->layer, kind, (long long)e);
                x->n_dims = 2;
                x->ne[2] = 1;
                x->row0 = e * m->ne[1];
            }
    }
    free(b->t);
    b->t = t;
    b->n = k;
    b->cap = n;
    return k == n ? 0 : -1;
}

mp_status mp_mkmodel_plan(const mp_mkmodel_config *c, mp_mk_tensor **tensors, int64_t *n,
                          mp_error *err)
{
    mp_status st = mp_mkmodel_validate(c, err);
    if (st)
        return st;
    plan_builder b = {0};
    const int64_t E = c->n_embd, Q = c->n_head * c->head_dim, KV = c->n_head_kv * c->head_dim;
    const int64_t F_sh = c->n_ff_shexp;
    const mp_arch_traits *tr = mp_arch_get(c->arch);
    int fail = 0;
    fail |= add(&b, c, MP_MK_EMBD, -1, "token_embd", 2, E, c->n_vocab, 1);
    for (int64_t il = 0; il < c->n_layer && !fail; il++) {
        fail |= add(&b, c, MP_MK_NORM, il, "attn_norm", 1, E, 1, 1);
        fail |= add(&b, c, MP_MK_ATTN_Q, il, "attn_q", 2, E, Q, 1);
        if (tr->qkv_bias)
            fail |= add_bias(&b, c, MP_MK_ATTN_Q, il, "attn_q", 1, Q, 1);
        fail |= add(&b, c, MP_MK_ATTN_K, il, "attn_k", 2, E, KV, 1);
        if (tr->qkv_bias)
            fail |= add_bias(&b, c, MP_MK_ATTN_K, il, "attn_k", 1, KV, 1);
        fail |= add(&b, c, MP_MK_ATTN_V, il, "attn_v", 2, E, KV, 1);
        if (tr->qkv_bias)
            fail |= add_bias(&b, c, MP_MK_ATTN_V, il, "attn_v", 1, KV, 1);
        fail |= add(&b, c, MP_MK_ATTN_OUT, il, "attn_output", 2, Q, E, 1);
        if (tr->attn_out_bias)
            fail |= add_bias(&b, c, MP_MK_ATTN_OUT, il, "attn_output", 1, E, 1);
        if (tr->attn_sinks) /* one logit per query head */
            fail |= add(&b, c, MP_MK_SINKS, il, "attn_sinks", 1, c->n_head, 1, 1);
        if (tr->qk_norm == MP_QK_NORM_PER_HEAD) { /* RMSNorm per head over head_dim (qwen3moe) */
            fail |= add(&b, c, MP_MK_NORM, il, "attn_q_norm", 1, c->head_dim, 1, 1);
            fail |= add(&b, c, MP_MK_NORM, il, "attn_k_norm", 1, c->head_dim, 1, 1);
        } else if (tr->qk_norm == MP_QK_NORM_FULL) { /* RMSNorm over all heads at once (olmoe) */
            fail |= add(&b, c, MP_MK_NORM, il, "attn_q_norm", 1, Q, 1, 1);
            fail |= add(&b, c, MP_MK_NORM, il, "attn_k_norm", 1, KV, 1, 1);
        }
        fail |= add(&b, c, MP_MK_NORM, il, tr->ffn_norm_name, 1, E, 1, 1); /* gpt-oss: post_attention_norm */
        fail |= add(&b, c, MP_MK_ROUTER, il, "ffn_gate_inp", 2, E, c->n_expert, 1);
        if (tr->moe_bias)
            fail |= add_bias(&b, c, MP_MK_ROUTER, il, "ffn_gate_inp", 1, c->n_expert, 1);
        fail |= add(&b, c, MP_MK_FFN_GATE, il, "ffn_gate_exps", 3, E, c->n_ff_exp, c->n_expert);
        fail |= add(&b, c, MP_MK_FFN_UP, il, "ffn_up_exps", 3, E, c->n_ff_exp, c->n_expert);
        fail |= add(&b, c, MP_MK_FFN_DOWN, il, "ffn_down_exps", 3, c->n_ff_exp, E, c->n_expert);
        if (tr->moe_bias) { /* after the three weights: split_plan and fuse_plan read those as adjacent */
            fail |= add_bias(&b, c, MP_MK_FFN_GATE, il, "ffn_gate_exps", 2, c->n_ff_exp, c->n_expert);
            fail |= add_bias(&b, c, MP_MK_FFN_UP, il, "ffn_up_exps", 2, c->n_ff_exp, c->n_expert);
            fail |= add_bias(&b, c, MP_MK_FFN_DOWN, il, "ffn_down_exps", 2, E, c->n_expert);
        }
        if (tr->shared_expert) { /* after the routed experts: split_plan and fuse_plan read their gate, up,
                                  * down as adjacent */
            fail |= add(&b, c, MP_MK_SHEXP_GATE_INP, il, "ffn_gate_inp_shexp", 1, E, 1, 1);
            fail |= add(&b, c, MP_MK_SHEXP_GATE, il, "ffn_gate_shexp", 2, E, F_sh, 1);
            fail |= add(&b, c, MP_MK_SHEXP_UP, il, "ffn_up_shexp", 2, E, F_sh, 1);
            fail |= add(&b, c, MP_MK_SHEXP_DOWN, il, "ffn_down_shexp", 2, F_sh, E, 1);
        }
    }
    fail |= add(&b, c, MP_MK_NORM, -1, "output_norm", 1, E, 1, 1);
    fail |= add(&b, c, MP_MK_OUTPUT, -1, "output", 2, E, c->n_vocab, 1);
    for (int64_t i = 0; i < b.n; i++)
        b.t[i].stream = i;
    if (!fail && c->split_experts)
        fail = split_plan(&b, c);
    if (!fail && c->fuse_gate_up)
        fuse_plan(&b);
    if (fail) {
        free(b.t);
        return mp_fail(err, MP_ERR_NOMEM, "mkmodel: out of memory for the tensor list");
    }
    *tensors = b.t;
    *n = b.n;
    return MP_OK;
}

uint64_t mp_mkmodel_data_bytes(const mp_mk_tensor *tensors, int64_t n)
{
    uint64_t total = 0;
    for (int64_t i = 0; i < n; i++) {
        const mp_mk_tensor *t = &tensors[i];
        total += (uint64_t)mp_type_row_bytes(t->type, t->ne[0]) * (uint64_t)t->ne[1] *
                 (uint64_t)t->ne[2] * (uint64_t)t->ne[3];
    }
    return total;
}
