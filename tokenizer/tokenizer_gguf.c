/* tokenizer/tokenizer_gguf.c — mp_tokenizer_load: read the tokenizer.ggml.* metadata of a GGUF file
 * and hand it to mp_tok_build (which checks it and copies what it keeps: the tokenizer does not
 * point into the mapping and may outlive the mp_gguf).
 *
 * Kept apart from tokenizer.c so that programs that build tokenizers from memory do not link the
 * GGUF reader.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tokenizer/tokenizer.h"
#include "tokenizer/tokenizer_impl.h"

#define PRE_MAX_BYTES 64

/* Optional u32 token id: -1 when the key is absent. */
static mp_status opt_id(const mp_gguf *g, const char *key, int64_t *out, mp_error *err)
{
    *out = -1;
    if (mp_gguf_find_key(g, key) < 0)
        return MP_OK;
    uint32_t v;
    mp_status st = mp_gguf_get_u32(g, key, &v, err);
    if (st == MP_OK)
        *out = v;
    return st;
}

/* tokenizer.chat_template (optional): its template as mp_chat_template_classify reads it */
static mp_status read_chat(const mp_gguf *g, mp_tok_source *src, mp_error *err)
{
    src->has_chat = mp_gguf_find_key(g, "tokenizer.chat_template") >= 0;
    src->chat = NULL;
    if (!src->has_chat)
        return MP_OK;
    mp_str text;
    mp_status st = mp_gguf_get_str(g, "tokenizer.chat_template", &text, err);
    if (st == MP_OK)
        src->chat = mp_chat_template_classify(text.ptr, text.len);
    return st;
}

static mp_status read_str_array(const mp_gguf *g, const char *origin, const char *key,
                                mp_str **out, uint64_t *n, mp_error *err)
{
    *out = NULL;
    mp_gguf_vtype et;
    mp_status st = mp_gguf_get_arr(g, key, &et, n, err);
    if (st != MP_OK)
        return st;
    if (et != MP_GGUF_STRING)
        return mp_fail(err, MP_ERR_FORMAT, "%s: %s: array of type %d, expected strings", origin,
                       key, (int)et);
    if (*n > ((uint64_t)1 << 32))
        return mp_fail(err, MP_ERR_LIMIT, "%s: %s: %llu entries, too many", origin, key,
                       (unsigned long long)*n);
    mp_str *a = malloc((size_t)(*n ? *n : 1) * sizeof *a);
    if (!a)
        return mp_fail(err, MP_ERR_NOMEM, "%s: %s: out of memory", origin, key);
    for (uint64_t i = 0; i < *n; i++)
        if ((st = mp_gguf_get_arr_str(g, key, i, &a[i], err)) != MP_OK) {
            free(a);
            return st;
        }
    *out = a;
    return MP_OK;
}

/* tokenizer.ggml.token_type (optional: *types NULL when absent), one value 0..6 per token */
static mp_status read_types(const mp_gguf *g, const char *origin, uint64_t n_tokens, int32_t **types, mp_error *err)
{
    *types = NULL;
    if (mp_gguf_find_key(g, "tokenizer.ggml.token_type") < 0)
        return MP_OK;
    mp_gguf_vtype et;
    uint64_t n;
    mp_status st = mp_gguf_get_arr(g, "tokenizer.ggml.token_type", &et, &n, err);
    if (st != MP_OK)
        return st;
    if (n != n_tokens)
        return mp_fail(err, MP_ERR_FORMAT,
                       "%s: tokenizer.ggml.token_type: %llu entries, expected %llu (one per token)", origin,
                       (unsigned long long)n, (unsigned long long)n_tokens);
    int32_t *t = malloc((size_t)(n ? n : 1) * sizeof *t);
    if (!t)
        return mp_fail(err, MP_ERR_NOMEM, "%s: tokenizer: out of memory", origin);
    for (uint64_t i = 0; i < n; i++) {
        int64_t v;
        if ((st = mp_gguf_get_arr_i64(g, "tokenizer.ggml.token_type", i, &v, err)) != MP_OK) {
            free(t);
            return st;
        }
        if (v < 0 || v > MP_TOK_TYPE_BYTE) {
            free(t);
            return mp_fail(err, MP_ERR_FORMAT, "%s: tokenizer.ggml.token_type[%llu]: value %lld, expected 0..6",
                           origin, (unsigned long long)i, (long long)v);
        }
        t[i] = (int32_t)v;
    }
    *types = t;
    return MP_OK;
}

/* An optional bool key, dflt when absent. */
static mp_status opt_bool(const mp_gguf *g, const char *key, bool dflt, bool *out, mp_error *err)
{
    *out = dflt;
    return mp_gguf_find_key(g, key) < 0 ? MP_OK : mp_gguf_get_bool(g, key, out, err);
}

/* A SentencePiece ("llama") vocabulary: tokens, scores (one float each), token types, the special
 * ids, add_bos_token and add_space_prefix (both default true, as llama.cpp reads such files). */
static mp_status load_spm(const mp_gguf *g, const char *origin, mp_tokenizer **out, mp_error *err)
{
    mp_tok_source src = {.origin = origin, .spm = true};
    mp_str *tokens = NULL;
    int32_t *types = NULL;
    float *scores = NULL;
    uint64_t n_tokens = 0, n_scores = 0;
    mp_gguf_vtype et;
    mp_status st = read_str_array(g, origin, "tokenizer.ggml.tokens", &tokens, &n_tokens, err);
    if (st == MP_OK && mp_gguf_find_key(g, "tokenizer.ggml.scores") < 0)
        st = mp_fail(err, MP_ERR_FORMAT, "%s: tokenizer.ggml.scores: missing (a SentencePiece vocabulary merges by "
                     "them)", origin);
    if (st == MP_OK && (st = mp_gguf_get_arr(g, "tokenizer.ggml.scores", &et, &n_scores, err)) == MP_OK &&
        (et != MP_GGUF_FLOAT32 || n_scores != n_tokens))
        st = mp_fail(err, MP_ERR_FORMAT, "%s: tokenizer.ggml.scores: %llu entries of type %s, expected %llu f32 (one "
                     "per token)", origin, (unsigned long long)n_scores, mp_gguf_vtype_name(et),
                     (unsigned long long)n_tokens);
    if (st == MP_OK && !(scores = malloc((size_t)(n_tokens ? n_tokens : 1) * sizeof *scores)))
        st = mp_fail(err, MP_ERR_NOMEM, "%s: tokenizer: out of memory", origin);
    for (uint64_t i = 0; st == MP_OK && i < n_tokens; i++) {
        double v;
        if ((st = mp_gguf_get_arr_f64(g, "tokenizer.ggml.scores", i, &v, err)) == MP_OK)
            scores[i] = (float)v;
    }
    if (st == MP_OK)
        st = read_types(g, origin, n_tokens, &types, err);
    if (st == MP_OK && (st = opt_id(g, "tokenizer.ggml.bos_token_id", &src.bos, err)) == MP_OK &&
        (st = opt_id(g, "tokenizer.ggml.eos_token_id", &src.eos, err)) == MP_OK &&
        (st = opt_id(g, "tokenizer.ggml.eot_token_id", &src.eot, err)) == MP_OK &&
        (st = opt_id(g, "tokenizer.ggml.padding_token_id", &src.pad, err)) == MP_OK &&
        (st = opt_id(g, "tokenizer.ggml.unknown_token_id", &src.unk, err)) == MP_OK &&
        (st = opt_bool(g, "tokenizer.ggml.add_bos_token", true, &src.add_bos, err)) == MP_OK &&
        (st = opt_bool(g, "tokenizer.ggml.add_space_prefix", true, &src.add_space_prefix, err)) == MP_OK)
        st = read_chat(g, &src, err);
    if (st == MP_OK) {
        src.n_vocab = (int64_t)n_tokens;
        src.tokens = tokens;
        src.types = types;
        src.scores = scores;
        st = mp_tok_build(&src, out, err);
    }
    free(tokens);
    free(types);
    free(scores);
    return st;
}

mp_status mp_tokenizer_load(const mp_gguf *g, mp_tokenizer **out, mp_error *err)
{
    *out = NULL;
    char origin[512];
    snprintf(origin, sizeof origin, "file %s", mp_gguf_path(g));
    mp_str model, pre;
    mp_status st = mp_gguf_get_str(g, "tokenizer.ggml.model", &model, err);
    if (st != MP_OK)
        return st;
    const bool spm = mp_str_eq(model, "llama");
    if (!spm && !mp_str_eq(model, "gpt2"))
        return mp_fail(err, MP_ERR_UNSUPPORTED,
                       "%s: tokenizer.ggml.model '%.*s': unsupported, expected 'gpt2' "
                       "(byte-level BPE) or 'llama' (SentencePiece)",
                       origin, (int)(model.len > 64 ? 64 : model.len), model.ptr);
    if (spm)
        return load_spm(g, origin, out, err);
    if ((st = mp_gguf_get_str(g, "tokenizer.ggml.pre", &pre, err)) != MP_OK)
        return st;
    char pre_c[PRE_MAX_BYTES + 1];
    if (pre.len > PRE_MAX_BYTES || memchr(pre.ptr, '\0', pre.len))
        return mp_fail(err, MP_ERR_UNSUPPORTED, "%s: tokenizer.ggml.pre '%.*s': unsupported", origin,
                       (int)(pre.len > PRE_MAX_BYTES ? PRE_MAX_BYTES : pre.len), pre.ptr);
    memcpy(pre_c, pre.ptr, pre.len);
    pre_c[pre.len] = '\0';

    mp_tok_source src = {.origin = origin, .pre = pre_c};
    mp_str *tokens = NULL, *merges = NULL;
    int32_t *types = NULL;
    uint64_t n_tokens = 0, n_merges = 0;
    if ((st = read_str_array(g, origin, "tokenizer.ggml.tokens", &tokens, &n_tokens, err)) != MP_OK)
        goto done;
    /* No merges is a valid (byte-per-token) vocabulary; writers omit an empty merges array. */
    if (mp_gguf_find_key(g, "tokenizer.ggml.merges") >= 0 &&
        (st = read_str_array(g, origin, "tokenizer.ggml.merges", &merges, &n_merges, err)) != MP_OK)
        goto done;
    if ((st = read_types(g, origin, n_tokens, &types, err)) != MP_OK)
        goto done;
    if ((st = opt_id(g, "tokenizer.ggml.bos_token_id", &src.bos, err)) != MP_OK ||
        (st = opt_id(g, "tokenizer.ggml.eos_token_id", &src.eos, err)) != MP_OK ||
        (st = opt_id(g, "tokenizer.ggml.eot_token_id", &src.eot, err)) != MP_OK ||
        (st = opt_id(g, "tokenizer.ggml.padding_token_id", &src.pad, err)) != MP_OK)
        goto done;
    if (mp_gguf_find_key(g, "tokenizer.ggml.add_bos_token") >= 0 &&
        (st = mp_gguf_get_bool(g, "tokenizer.ggml.add_bos_token", &src.add_bos, err)) != MP_OK)
        goto done;
    if ((st = read_chat(g, &src, err)) != MP_OK)
        goto done;
    src.n_vocab = (int64_t)n_tokens;
    src.tokens = tokens;
    src.types = types;
    src.n_merges = (int64_t)n_merges;
    src.merges = merges;
    st = mp_tok_build(&src, out, err);
done:
    free(tokens);
    free(merges);
    free(types);
    return st;
}
