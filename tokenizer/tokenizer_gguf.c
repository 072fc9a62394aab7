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

mp_status mp_tokenizer_load(const mp_gguf *g, mp_tokenizer **out, mp_error *err)
{
    *out = NULL;
    char origin[512];
    snprintf(origin, sizeof origin, "file %s", mp_gguf_path(g));
    mp_str model, pre;
    mp_status st = mp_gguf_get_str(g, "tokenizer.ggml.model", &model, err);
    if (st != MP_OK)
        return st;
    if (!mp_str_eq(model, "gpt2"))
        return mp_fail(err, MP_ERR_UNSUPPORTED,
                       "%s: tokenizer.ggml.model '%.*s': unsupported, expected 'gpt2' "
                       "(byte-level BPE)",
                       origin, (int)(model.len > 64 ? 64 : model.len), model.ptr);
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
    if (mp_gguf_find_key(g, "tokenizer.ggml.token_type") >= 0) {
        mp_gguf_vtype et;
        uint64_t n;
        if ((st = mp_gguf_get_arr(g, "tokenizer.ggml.token_type", &et, &n, err)) != MP_OK)
            goto done;
        if (n != n_tokens) {
            st = mp_fail(err, MP_ERR_FORMAT,
                         "%s: tokenizer.ggml.token_type: %llu entries, expected %llu (one per "
                         "token)",
                         origin, (unsigned long long)n, (unsigned long long)n_tokens);
            goto done;
        }
        if (!(types = malloc((size_t)(n ? n : 1) * sizeof *types))) {
            st = mp_fail(err, MP_ERR_NOMEM, "%s: tokenizer: out of memory", origin);
            goto done;
        }
        for (uint64_t i = 0; i < n; i++) {
            int64_t v;
            if ((st = mp_gguf_get_arr_i64(g, "tokenizer.ggml.token_type", i, &v, err)) != MP_OK)
                goto done;
            if (v < 0 || v > MP_TOK_TYPE_BYTE) {
                st = mp_fail(err, MP_ERR_FORMAT,
                             "%s: tokenizer.ggml.token_type[%llu]: value %lld, expected 0..6",
                             origin, (unsigned long long)i, (long long)v);
                goto done;
            }
            types[i] = (int32_t)v;
        }
    }
    if ((st = opt_id(g, "tokenizer.ggml.bos_token_id", &src.bos, err)) != MP_OK ||
        (st = opt_id(g, "tokenizer.ggml.eos_token_id", &src.eos, err)) != MP_OK ||
        (st = opt_id(g, "tokenizer.ggml.eot_token_id", &src.eot, err)) != MP_OK ||
        (st = opt_id(g, "tokenizer.ggml.padding_token_id", &src.pad, err)) != MP_OK)
        goto done;
    if (mp_gguf_find_key(g, "tokenizer.ggml.add_bos_token") >= 0 &&
        (st = mp_gguf_get_bool(g, "tokenizer.ggml.add_bos_token", &src.add_bos, err)) != MP_OK)
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
