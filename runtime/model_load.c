/* runtime/model_load.c — build a model descriptor from a GGUF file (model.h).
 *
 * Hyperparameters come from `<arch>.*` metadata keys, tensors from llama.cpp's tensor names
 * (token_embd.weight, blk.N.attn_q.weight, ...). Weights are views into the GGUF mapping; nothing
 * is copied, except the experts of files in the two other layouts llama.cpp reads
 * (gguf/gguf_experts.h): each expert its own 2-D tensor (blk.N.ffn_gate.E.weight, ffn_up.E,
 * ffn_down.E: what llama.cpp's converter wrote for Mixtral until it merged them into
 * blk.N.ffn_gate_exps in 2024), or gate and up fused in one tensor (blk.N.ffn_gate_up_exps.weight,
 * the converter's --fuse-gate-up-exps): those are copied once into one anonymous mapping
 * (m->expert_copy), a merged tensor per layer and kind, so that the rest of moeplan sees one layout;
 * the file's pages of each copied expert are dropped as it is copied. Every tensor is checked by mp_model_validate (present, exact shape, supported
 * type); the first problem becomes a one-line error naming the file and the tensor or key.
 *
 * Mixtral: llama.cpp's converter writes Mixtral as general.architecture = "llama" with an
 * expert_count; both "mixtral" and "llama" with expert_count > 1 load with the mixtral traits.
 */
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "base/arena.h"
#include "gguf/gguf_experts.h"
#include "kernels/quant.h"
#include "runtime/model.h"

typedef struct loader {
    const mp_gguf *g;
    const char *path;
    char prefix[64]; /* "<arch>." as the keys spell it */
} loader;

static bool has_key(const loader *ld, const char *key, char *full, size_t cap)
{
    snprintf(full, cap, "%s%s", ld->prefix, key);
    return mp_gguf_find_key(ld->g, full) >= 0;
}

/* Required positive integer key. */
static mp_status get_count(const loader *ld, const char *key, int64_t *out, mp_error *err)
{
    char full[128];
    if (!has_key(ld, key, full, sizeof full))
        return mp_fail(err, MP_ERR_FORMAT, "%s: metadata key %s: missing", ld->path, full);
    mp_status st = mp_gguf_get_i64(ld->g, full, out, err);
    if (st)
        return st;
    if (*out < 1)
        return mp_fail(err, MP_ERR_FORMAT, "%s: metadata key %s: expected a value >= 1, found %" PRId64,
                       ld->path, full, *out);
    return MP_OK;
}

static mp_status get_count_opt(const loader *ld, const char *key, int64_t dflt, int64_t *out,
                               mp_error *err)
{
    char full[128];
    if (!has_key(ld, key, full, sizeof full)) {
        *out = dflt;
        return MP_OK;
    }
    return get_count(ld, key, out, err);
}

static mp_status get_f32_opt(const loader *ld, const char *key, bool required, float dflt,
                             float *out, mp_error *err)
{
    char full[128];
    if (!has_key(ld, key, full, sizeof full)) {
        if (required)
            return mp_fail(err, MP_ERR_FORMAT, "%s: metadata key %s: missing", ld->path, full);
        *out = dflt;
        return MP_OK;
    }
    return mp_gguf_get_f32(ld->g, full, out, err);
}

static void view(const mp_gguf *g, const char *name, mp_tensor *t)
{
    memset(t, 0, sizeof *t);
    const mp_gguf_tensor *gt = mp_gguf_find_tensor(g, name);
    if (!gt)
        return; /* data NULL: mp_model_validate reports it if the architecture needs it */
    t->type = gt->type;
    for (int i = 0; i < 4; i++)
        t->ne[i] = gt->ne[i];
    t->data = gt->data;
    t->nbytes = (size_t)gt->nbytes;
    t->row_bytes = mp_type_row_bytes(gt->type, gt->ne[0]);
}

/* rope.scaling.*: none, or YaRN (llama.cpp's keys; the betas default to the YaRN paper's 32 and 1).
 * Any other scaling is refused rather than ignored: the model would run with wrong angles. */
static mp_status read_rope_scaling(const loader *ld, const mp_arch_traits *tr, mp_hparams *hp, mp_error *err)
{
    char full[128];
    if (!has_key(ld, "rope.scaling.type", full, sizeof full))
        return MP_OK;
    mp_str type;
    mp_status st = mp_gguf_get_str(ld->g, full, &type, err);
    if (st)
        return st;
    if (type.len == 4 && !memcmp(type.ptr, "none", 4))
        return MP_OK;
    if (!(type.len == 4 && !memcmp(type.ptr, "yarn", 4)))
        return mp_fail(err, MP_ERR_UNSUPPORTED, "%s: metadata key %s: '%.*s' is not supported (expected none or "
                       "yarn)", ld->path, full, (int)(type.len < 40 ? type.len : 40), type.ptr);
    float factor = 0;
    if ((st = get_f32_opt(ld, "rope.scaling.factor", true, 0, &factor, err)) ||
        (st = get_count(ld, "rope.scaling.original_context_length", &hp->rope_yarn_orig_ctx, err)) ||
        (st = get_f32_opt(ld, "rope.scaling.yarn_beta_fast", false, 32.0f, &hp->rope_yarn_beta_fast, err)) ||
        (st = get_f32_opt(ld, "rope.scaling.yarn_beta_slow", false, 1.0f, &hp->rope_yarn_beta_slow, err)))
        return st;
    if (!(factor >= 1.0f) || !isfinite(factor))
        return mp_fail(err, MP_ERR_FORMAT, "%s: metadata key %srope.scaling.factor: %g, expected a finite value >= 1",
                       ld->path, ld->prefix, (double)factor);
    hp->rope_yarn_factor = factor;
    hp->rope_yarn_truncate = tr->yarn_truncate;
    return MP_OK;
}

static mp_status read_hparams(loader *ld, mp_hparams *hp, mp_error *err)
{
    const mp_gguf *g = ld->g;
    mp_str arch_str;
    if (mp_gguf_find_key(g, "general.architecture") < 0)
        return mp_fail(err, MP_ERR_FORMAT, "%s: metadata key general.architecture: missing", ld->path);
    mp_status st = mp_gguf_get_str(g, "general.architecture", &arch_str, err);
    if (st)
        return st;
    char arch[48], names[160];
    mp_arch_names(names, sizeof names);
    if (arch_str.len >= sizeof arch)
        return mp_fail(err, MP_ERR_UNSUPPORTED, "%s: architecture '%.40s...' is not supported "
                       "(supported: %s)", ld->path, arch_str.ptr, names);
    memcpy(arch, arch_str.ptr, arch_str.len);
    arch[arch_str.len] = '\0';
    snprintf(ld->prefix, sizeof ld->prefix, "%s.", arch);

    int id = mp_arch_from_name(arch);
    if (id < 0 && !strcmp(arch, "llama")) {
        char full[128];
        int64_t n_expert = 0;
        if (has_key(ld, "expert_count", full, sizeof full) &&
            mp_gguf_get_i64(g, full, &n_expert, NULL) == MP_OK && n_expert > 1)
            id = MP_ARCH_MIXTRAL;
        else
            return mp_fail(err, MP_ERR_UNSUPPORTED, "%s: architecture 'llama' without experts is "
                           "not a MoE model (supported: %s)", ld->path, names);
    }
    if (id < 0)
        return mp_fail(err, MP_ERR_UNSUPPORTED,
                       "%s: architecture '%s' is not supported (supported: %s)",
                       ld->path, arch, names);
    const mp_arch_traits *tr = mp_arch_get((mp_arch)id);
    memset(hp, 0, sizeof *hp);
    hp->arch = (mp_arch)id;

    if ((st = get_count(ld, "block_count", &hp->n_layer, err)) ||
        (st = get_count(ld, "context_length", &hp->n_ctx_train, err)) ||
        (st = get_count(ld, "embedding_length", &hp->n_embd, err)) ||
        (st = get_count(ld, "attention.head_count", &hp->n_head, err)) ||
        (st = get_count_opt(ld, "attention.head_count_kv", hp->n_head, &hp->n_head_kv, err)) ||
        (st = get_count_opt(ld, "attention.key_length", hp->n_embd / hp->n_head, &hp->head_dim, err)) ||
        (st = get_count_opt(ld, "rope.dimension_count", hp->head_dim, &hp->rot_dim, err)) ||
        (st = get_count(ld, "expert_count", &hp->n_expert, err)) ||
        (st = get_count(ld, "expert_used_count", &hp->n_expert_used, err)))
        return st;
    /* before anything is allocated per layer (0xFFFFFFFF layers reached a 3 GB calloc) */
    if (hp->n_layer > MP_MODEL_MAX_LAYERS)
        return mp_fail(err, MP_ERR_LIMIT, "%s: metadata key %sblock_count: %" PRId64 ", expected "
                       "1..%d", ld->path, ld->prefix, hp->n_layer, MP_MODEL_MAX_LAYERS);
    int64_t value_len = hp->head_dim;
    if ((st = get_count_opt(ld, "attention.value_length", hp->head_dim, &value_len, err)))
        return st;
    if (value_len != hp->head_dim)
        return mp_fail(err, MP_ERR_UNSUPPORTED,
                       "%s: attention.value_length %" PRId64 " != key_length %" PRId64
                       " is not supported", ld->path, value_len, hp->head_dim);
    /* qwen3moe and olmoe write the expert FFN size under its own key; Mixtral's experts are
     * the llama FFN, so its size is feed_forward_length */
    char full[128];
    if (has_key(ld, "expert_feed_forward_length", full, sizeof full))
        st = get_count(ld, "expert_feed_forward_length", &hp->n_ff_exp, err);
    else
        st = get_count(ld, "feed_forward_length", &hp->n_ff_exp, err);
    if (st)
        return st;
    const float base_default = hp->arch == MP_ARCH_QWEN3MOE ? 1e6f : 10000.0f;
    if ((st = get_f32_opt(ld, "rope.freq_base", false, base_default, &hp->rope_freq_base, err)) ||
        (st = get_f32_opt(ld, "attention.layer_norm_rms_epsilon", true, 0, &hp->rms_eps, err)))
        return st;
    if (tr->shared_expert && (st = get_count(ld, "expert_shared_feed_forward_length", &hp->n_ff_shexp, err)))
        return st;
    if (tr->swa_period > 0 && (st = get_count(ld, "attention.sliding_window", &hp->n_swa, err)))
        return st;
    if ((st = read_rope_scaling(ld, tr, hp, err)))
        return st;
    hp->expert_weights_norm = tr->default_weights_norm;
    if (has_key(ld, "expert_weights_norm", full, sizeof full) &&
        (st = mp_gguf_get_bool(g, full, &hp->expert_weights_norm, err)))
        return st;
    return MP_OK;
}

/* ---- experts stored one tensor per expert ---- */

static mp_tensor *merged_of(mp_layer *L, int kind)
{
    return kind == MP_GGUF_EXPERT_GATE ? &L->gate_exps : kind == MP_GGUF_EXPERT_UP ? &L->up_exps : &L->down_exps;
}

/* The file's pages wholly inside [a, a + n): the copy serves from now on (a read-only private file
 * mapping: dropping its pages only unmaps them) */
static void drop_file_pages(const void *a, size_t n)
{
    const uintptr_t page = (uintptr_t)sysconf(_SC_PAGESIZE);
    const uintptr_t lo = ((uintptr_t)a + page - 1) & ~(page - 1), hi = ((uintptr_t)a + n) & ~(page - 1);
    if (hi > lo)
        madvise((void *)lo, hi - lo, MADV_DONTNEED);
}

/* Every layer's kinds without a merged tensor whose experts the file stores one tensor each or
 * fused with the other kind (gguf/gguf_experts.h checks them: all n_expert there, one type and
 * shape): copied into one anonymous mapping, a merged tensor per layer and kind. */
static mp_status merge_split_experts(const loader *ld, mp_model *m, mp_error *err)
{
    const int64_t E = m->hp.n_expert;
    size_t total = 0;
    for (int64_t il = 0; il < m->hp.n_layer; il++)
        for (int k = 0; k < MP_GGUF_EXPERT_KINDS; k++) {
            mp_gguf_experts x;
            if (merged_of(&m->layers[il], k)->data)
                continue;
            mp_status st = mp_gguf_layer_experts(ld->g, il, k, E, &x, err);
            if (st)
                return st;
            if (x.fused && (x.merged->n_dims != 3 || x.n_expert != E))
                return mp_fail(err, MP_ERR_FORMAT, "%s: tensor blk.%" PRId64 ".ffn_gate_up_exps.weight: %u dimensions, %"
                               PRId64 " experts: expected 3 dimensions [cols, 2 x rows, %" PRId64 "]", ld->path, il,
                               x.merged->n_dims, x.n_expert, E);
            if (x.present)
                total += ((size_t)x.expert_bytes * (size_t)E + 63) / 64 * 64;
        }
    if (total == 0)
        return MP_OK; /* merged tensors (or none: mp_model_validate names what is missing) */
    size_t bytes;
    void *arena = mp_huge_arena(total, &bytes); /* the CPU streams these */
    if (arena == MAP_FAILED)
        return mp_fail(err, MP_ERR_NOMEM, "%s: the experts are stored one tensor each or with gate and up fused, and "
                       "laying them out one tensor per kind needs %.2f GiB of memory that could not be had", ld->path,
                       (double)bytes / (1u << 30));
    m->expert_copy = arena;
    m->expert_copy_bytes = bytes;
    char *at = arena;
    for (int64_t il = 0; il < m->hp.n_layer; il++)
        for (int k = 0; k < MP_GGUF_EXPERT_KINDS; k++) {
            mp_tensor *t = merged_of(&m->layers[il], k);
            mp_gguf_experts x;
            if (t->data || mp_gguf_layer_experts(ld->g, il, k, E, &x, err) || !x.present)
                continue; /* (checked above) */
            const size_t slice = (size_t)x.expert_bytes;
            for (int64_t e = 0; e < E; e++) {
                const uint8_t *s = mp_gguf_expert_data(ld->g, il, k, &x, e);
                memcpy(at + (size_t)e * slice, s, slice);
                drop_file_pages(s, slice);
            }
            *t = (mp_tensor){.type = x.type, .ne = {x.ne0, x.ne1, E, 1}, .data = at,
                             .row_bytes = mp_type_row_bytes(x.type, x.ne0), .nbytes = slice * (size_t)E};
            at += (slice * (size_t)E + 63) / 64 * 64;
        }
    return MP_OK;
}

static void free_model_shell(mp_model *m)
{
    if (m->expert_copy)
        munmap(m->expert_copy, m->expert_copy_bytes);
    free(m->layers);
    free(m->path);
    free(m);
}

mp_status mp_model_from_gguf(mp_gguf *g, mp_model **out, mp_error *err)
{
    *out = NULL;
    loader ld = {.g = g, .path = mp_gguf_path(g) ? mp_gguf_path(g) : "(gguf)"};
    mp_model *m = calloc(1, sizeof *m);
    if (!m)
        return mp_fail(err, MP_ERR_NOMEM, "%s: out of memory for the model descriptor", ld.path);
    m->path = strdup(ld.path);
    mp_status st = m->path ? MP_OK : mp_fail(err, MP_ERR_NOMEM, "out of memory");
    if (!st)
        st = read_hparams(&ld, &m->hp, err);
    if (!st) {
        const mp_gguf_tensor *embd = mp_gguf_find_tensor(g, "token_embd.weight");
        if (!embd)
            st = mp_fail(err, MP_ERR_FORMAT, "%s: tensor token_embd.weight: missing", ld.path);
        else
            m->hp.n_vocab = embd->ne[1];
    }
    if (!st && !(m->layers = calloc((size_t)m->hp.n_layer, sizeof *m->layers)))
        st = mp_fail(err, MP_ERR_NOMEM, "%s: out of memory for %" PRId64 " layers", ld.path,
                     m->hp.n_layer);
    if (st) {
        free(m->layers);
        free(m->path);
        free(m);
        return st;
    }
    view(g, "token_embd.weight", &m->tok_embd);
    view(g, "output_norm.weight", &m->output_norm);
    view(g, "output.weight", &m->output);
    if (!m->output.data)
        m->output = m->tok_embd; /* tied embeddings */
    for (int64_t il = 0; il < m->hp.n_layer; il++) {
        mp_layer *L = &m->layers[il];
        char name[64];
#define LAYER_VIEW(field, suffix)                                                 \
        snprintf(name, sizeof name, "blk.%" PRId64 "." suffix, il);               \
        view(g, name, &L->field)
        LAYER_VIEW(attn_norm, "attn_norm.weight");
        LAYER_VIEW(wq, "attn_q.weight");
        LAYER_VIEW(wk, "attn_k.weight");
        LAYER_VIEW(wv, "attn_v.weight");
        LAYER_VIEW(wo, "attn_output.weight");
        LAYER_VIEW(q_norm, "attn_q_norm.weight");
        LAYER_VIEW(k_norm, "attn_k_norm.weight");
        snprintf(name, sizeof name, "blk.%" PRId64 ".%s.weight", il, mp_arch_get(m->hp.arch)->ffn_norm_name);
        view(g, name, &L->ffn_norm);
        LAYER_VIEW(gate_inp, "ffn_gate_inp.weight");
        LAYER_VIEW(gate_exps, "ffn_gate_exps.weight");
        LAYER_VIEW(up_exps, "ffn_up_exps.weight");
        LAYER_VIEW(down_exps, "ffn_down_exps.weight");
        LAYER_VIEW(gate_inp_shexp, "ffn_gate_inp_shexp.weight");
        LAYER_VIEW(gate_shexp, "ffn_gate_shexp.weight");
        LAYER_VIEW(up_shexp, "ffn_up_shexp.weight");
        LAYER_VIEW(down_shexp, "ffn_down_shexp.weight");
        LAYER_VIEW(bq, "attn_q.bias");
        LAYER_VIEW(bk, "attn_k.bias");
        LAYER_VIEW(bv, "attn_v.bias");
        LAYER_VIEW(bo, "attn_output.bias");
        LAYER_VIEW(sinks, "attn_sinks.weight");
        LAYER_VIEW(gate_inp_b, "ffn_gate_inp.bias");
        LAYER_VIEW(gate_exps_b, "ffn_gate_exps.bias");
        LAYER_VIEW(up_exps_b, "ffn_up_exps.bias");
        LAYER_VIEW(down_exps_b, "ffn_down_exps.bias");
#undef LAYER_VIEW
        /* an architecture ignores the tensors it does not use rather than half-using them */
        const mp_arch_traits *tr = mp_arch_get(m->hp.arch);
        if (tr->qk_norm == MP_QK_NORM_NONE) {
            memset(&L->q_norm, 0, sizeof L->q_norm);
            memset(&L->k_norm, 0, sizeof L->k_norm);
        }
        if (!tr->qkv_bias)
            L->bq = L->bk = L->bv = (mp_tensor){0};
        if (!tr->shared_expert)
            L->gate_inp_shexp = L->gate_shexp = L->up_shexp = L->down_shexp = (mp_tensor){0};
        if (!tr->attn_out_bias)
            L->bo = (mp_tensor){0};
        if (!tr->attn_sinks)
            L->sinks = (mp_tensor){0};
        if (!tr->moe_bias)
            L->gate_inp_b = L->gate_exps_b = L->up_exps_b = L->down_exps_b = (mp_tensor){0};
    }
    if ((st = merge_split_experts(&ld, m, err)) || (st = mp_model_validate(m, err))) {
        free_model_shell(m);
        return st;
    }
    m->gguf = g;
    *out = m;
    return MP_OK;
}

mp_status mp_model_load(const char *path, mp_model **out, mp_error *err)
{
    *out = NULL;
    mp_gguf *g = NULL;
    mp_status st = mp_gguf_open(path, &g, err);
    if (st)
        return st;
    if ((st = mp_model_from_gguf(g, out, err)))
        mp_gguf_close(g);
    return st;
}

void mp_model_free(mp_model *m)
{
    if (!m)
        return;
    if (m->gguf)
        mp_gguf_close(m->gguf);
    free_model_shell(m);
}
