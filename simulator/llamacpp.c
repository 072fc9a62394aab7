/* simulator/llamacpp.c — llama.cpp's GPU memory for a GGUF and the command line that places
 * whole layers' experts (see llamacpp.h for the sizes and their sources). */
#include "simulator/llamacpp.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const char *const expert_roots[] = {"ffn_gate_up", "ffn_gate", "ffn_up", "ffn_down"};

bool mp_llamacpp_expert_tensor(const char *name, size_t len, uint32_t *block)
{
    if (len < 5 || memcmp(name, "blk.", 4))
        return false;
    size_t i = 4;
    uint64_t n = 0;
    while (i < len && name[i] >= '0' && name[i] <= '9' && n < UINT32_MAX)
        n = n * 10 + (uint64_t)(name[i++] - '0');
    if (i == 4 || i >= len || name[i] != '.' || n >= UINT32_MAX)
        return false;
    const char *tail = name + i + 1;
    const size_t tail_len = len - i - 1;
    for (size_t r = 0; r < sizeof expert_roots / sizeof expert_roots[0]; r++) {
        const size_t rl = strlen(expert_roots[r]);
        if (tail_len < rl || memcmp(tail, expert_roots[r], rl))
            continue;
        const char *s = tail + rl;
        const size_t sl = tail_len - rl;
        /* the regex has no anchor after "exps": any suffix (.weight, .bias, _scale) matches */
        if ((sl >= 5 && !memcmp(s, "_exps", 5)) || (sl >= 7 && !memcmp(s, "_chexps", 7))) {
            *block = (uint32_t)n;
            return true;
        }
        /* blk.N.ffn_gate.E.weight: a file that stores each expert as its own tensor, which
         * llama.cpp's loader merges into one tensor per layer and kind: the block's expert bytes */
        size_t d = 1;
        while (d < sl && s[d] >= '0' && s[d] <= '9')
            d++;
        if (sl > 2 && s[0] == '.' && d > 1 && d < sl && s[d] == '.') {
            *block = (uint32_t)n;
            return true;
        }
    }
    return false;
}

/* {arch}.KEY as an integer: a scalar, or element `block` of a per-layer array. */
static mp_status arch_int(const mp_gguf *g, const char *arch, const char *key, int64_t block, int64_t *out,
                          mp_error *err)
{
    char full[160];
    snprintf(full, sizeof full, "%s.%s", arch, key);
    mp_gguf_vtype et;
    uint64_t n;
    const int64_t i = mp_gguf_find_key(g, full);
    if (i >= 0 && mp_gguf_kv_arr_info(g, i, &et, &n)) {
        if ((uint64_t)block >= n)
            return mp_fail(err, MP_ERR_FORMAT, "%s: %s has %llu entries, expected one per block (%lld+)",
                           mp_gguf_path(g), full, (unsigned long long)n, (long long)block + 1);
        return mp_gguf_get_arr_i64(g, full, (uint64_t)block, out, err);
    }
    return mp_gguf_get_i64(g, full, out, err);
}

static bool has_arch_key(const mp_gguf *g, const char *arch, const char *key)
{
    char full[160];
    snprintf(full, sizeof full, "%s.%s", arch, key);
    return mp_gguf_find_key(g, full) >= 0;
}

void mp_llamacpp_gpu_free(mp_llamacpp_gpu *x)
{
    free(x->expert_bytes);
    memset(x, 0, sizeof *x);
}

mp_status mp_llamacpp_gpu_from_gguf(const mp_gguf *g, int64_t n_ctx, mp_llamacpp_gpu *out, mp_error *err)
{
    memset(out, 0, sizeof *out);
    mp_str arch_s;
    mp_status st = mp_gguf_get_str(g, "general.architecture", &arch_s, err);
    if (st)
        return st;
    char arch[64];
    snprintf(arch, sizeof arch, "%.*s", (int)(arch_s.len < 63 ? arch_s.len : 63), arch_s.ptr);
    int64_t n_block, n_embd, n_head, n_vocab = 0, n_expert_used = 0, n_ff_exp = 0;
    if ((st = arch_int(g, arch, "block_count", 0, &n_block, err)) ||
        (st = arch_int(g, arch, "embedding_length", 0, &n_embd, err)) ||
        (st = arch_int(g, arch, "attention.head_count", 0, &n_head, err)))
        return st;
    if (n_block < 1 || n_block > 65536 || n_head < 1 || n_embd < 1)
        return mp_fail(err, MP_ERR_FORMAT, "%s: %s.block_count %lld, embedding_length %lld, head_count %lld: "
                       "expected positive sizes", mp_gguf_path(g), arch, (long long)n_block, (long long)n_embd,
                       (long long)n_head);
    if (has_arch_key(g, arch, "expert_used_count") &&
        (st = arch_int(g, arch, "expert_used_count", 0, &n_expert_used, err)))
        return st;
    if (has_arch_key(g, arch, "expert_feed_forward_length") &&
        (st = arch_int(g, arch, "expert_feed_forward_length", 0, &n_ff_exp, err)))
        return st;
    out->n_ctx = (n_ctx + MP_LLAMACPP_CTX_PAD - 1) / MP_LLAMACPP_CTX_PAD * MP_LLAMACPP_CTX_PAD;
    out->n_blocks = (uint32_t)n_block;
    out->expert_bytes = calloc((size_t)n_block, sizeof *out->expert_bytes);
    if (!out->expert_bytes)
        return mp_fail(err, MP_ERR_NOMEM, "llama.cpp: out of memory for %lld blocks", (long long)n_block);
    /* KV cache: key_length and value_length default to n_embd / n_head (llama.cpp's hparams) */
    uint64_t kv_row = 0; /* sum over blocks of n_embd_k_gqa + n_embd_v_gqa */
    for (int64_t il = 0; il < n_block; il++) {
        int64_t head_kv = n_head, k_len = n_embd / n_head, v_len = n_embd / n_head;
        if ((has_arch_key(g, arch, "attention.head_count_kv") &&
             (st = arch_int(g, arch, "attention.head_count_kv", il, &head_kv, err))) ||
            (has_arch_key(g, arch, "attention.key_length") &&
             (st = arch_int(g, arch, "attention.key_length", 0, &k_len, err))) ||
            (has_arch_key(g, arch, "attention.value_length") &&
             (st = arch_int(g, arch, "attention.value_length", 0, &v_len, err)))) {
            mp_llamacpp_gpu_free(out);
            return st;
        }
        kv_row += (uint64_t)(head_kv * (k_len + v_len));
    }
    out->kv_bytes = (uint64_t)out->n_ctx * kv_row * MP_LLAMACPP_KV_ELEM_BYTES;
    /* weights: token_embd stays on the CPU; a tied output is a GPU copy of it */
    uint64_t tok_embd_bytes = 0;
    bool has_output = false;
    for (int64_t i = 0; i < mp_gguf_n_tensors(g); i++) {
        const mp_gguf_tensor *t = mp_gguf_tensor_at(g, i);
        uint32_t block;
        if (mp_llamacpp_expert_tensor(t->name.ptr, t->name.len, &block)) {
            if (block < out->n_blocks)
                out->expert_bytes[block] += t->nbytes;
            else
                out->weights_bytes += t->nbytes; /* a block past block_count: llama.cpp ignores it */
        } else if (mp_str_eq(t->name, "token_embd.weight")) {
            tok_embd_bytes = t->nbytes;
            n_vocab = t->n_dims >= 2 ? t->ne[1] : 0;
        } else {
            has_output |= mp_str_eq(t->name, "output.weight");
            out->weights_bytes += t->nbytes;
        }
    }
    if (!has_output)
        out->weights_bytes += tok_embd_bytes;
    const uint64_t per_row = (uint64_t)n_vocab + (uint64_t)n_head * (uint64_t)out->n_ctx +
                             2 * (uint64_t)n_expert_used * (uint64_t)n_ff_exp +
                             (uint64_t)n_expert_used * (uint64_t)n_embd + 8 * (uint64_t)n_embd;
    out->compute_bytes = 4 * (uint64_t)MP_LLAMACPP_UBATCH * per_row;
    out->fixed_bytes = out->weights_bytes + out->kv_bytes + out->compute_bytes;
    return MP_OK;
}

void mp_llamacpp_gpu_set_compute_bytes(mp_llamacpp_gpu *x, uint64_t compute_bytes)
{
    x->compute_bytes = compute_bytes;
    x->compute_given = true;
    x->fixed_bytes = x->weights_bytes + x->kv_bytes + x->compute_bytes;
}

/* Append to buf at *n, keeping the NUL; false once it does not fit. */
static bool put(char *buf, size_t cap, size_t *n, const char *fmt, const char *s, long long v)
{
    if (*n >= cap)
        return false;
    int w = s ? snprintf(buf + *n, cap - *n, fmt, s) : snprintf(buf + *n, cap - *n, fmt, v);
    if (w < 0 || (size_t)w >= cap - *n) {
        *n = cap;
        return false;
    }
    *n += (size_t)w;
    return true;
}

bool mp_llamacpp_command(const char *model_path, int64_t n_ctx, const mp_llamacpp_gpu *x, const bool *cpu_block,
                         char *buf, size_t cap)
{
    size_t n = 0;
    bool ok = put(buf, cap, &n, "%s", "llama-server -m '", 0);
    for (const char *p = model_path; ok && *p; p++) { /* ' becomes '\'' inside single quotes */
        const char one[2] = {*p, 0};
        ok = put(buf, cap, &n, "%s", *p == '\'' ? "'\\''" : one, 0);
    }
    ok = ok && put(buf, cap, &n, "' -ngl 99 -c %lld", NULL, (long long)n_ctx);
    /* the CPU blocks are a prefix when every expert block below the last CPU one is on the CPU */
    int64_t last_cpu = -1, n_cpu = 0;
    bool prefix = true;
    for (uint32_t b = 0; b < x->n_blocks; b++)
        if (x->expert_bytes[b] && cpu_block[b])
            last_cpu = b, n_cpu++;
    for (int64_t b = 0; b < last_cpu; b++)
        if (x->expert_bytes[b] && !cpu_block[b])
            prefix = false;
    if (!n_cpu)
        return ok;
    if (prefix) /* llama.cpp's --n-cpu-moe N: the expert tensors of blocks 0..N-1 (common/arg.cpp) */
        return ok && put(buf, cap, &n, " --n-cpu-moe %lld", NULL, last_cpu + 1);
    ok = ok && put(buf, cap, &n, "%s", " -ot 'blk\\.(", 0);
    int64_t k = 0;
    for (uint32_t b = 0; ok && b < x->n_blocks; b++)
        if (x->expert_bytes[b] && cpu_block[b])
            ok = put(buf, cap, &n, k++ ? "|%lld" : "%lld", NULL, (long long)b);
    return ok && put(buf, cap, &n, "%s", ")" MP_LLAMACPP_EXPS_REGEX "=CPU'", 0);
}
