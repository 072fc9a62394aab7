/* tokenizer/pretokenize.h — regex pre-tokenization for byte-level BPE (tokenizer.ggml.pre).
 *
 * A pre-tokenizer splits text into pieces that BPE merges never cross. The pieces cover the text
 * exactly, in order, without gaps or overlaps: regex matches are pieces, and any text between two
 * matches (none for the supported patterns, which match every character) is a piece too.
 * Input must be valid UTF-8 (the caller checks; see mp_utf8_invalid_at).
 */
#ifndef MP_TOKENIZER_PRETOKENIZE_H
#define MP_TOKENIZER_PRETOKENIZE_H

#include <stddef.h>

#include "base/error.h"

typedef struct mp_pretok mp_pretok;

/* pre: "gpt-2" (also "olmo", which uses the same pattern), "qwen2" or "gpt-4o" (o200k_base, as
 * gpt-oss files name it). Anything else is MP_ERR_UNSUPPORTED naming the value. */
mp_status mp_pretok_new(const char *pre, mp_pretok **out, mp_error *err);
void mp_pretok_free(mp_pretok *p);
const char *mp_pretok_name(const mp_pretok *p);
/* Comma-separated list of the accepted pre values, for error messages and docs. */
const char *mp_pretok_names(void);

/* Called once per piece, in text order; a non-OK return stops the split and is returned. */
typedef mp_status (*mp_pretok_fn)(const char *piece, size_t len, void *ctx, mp_error *err);

/* Split len bytes of valid UTF-8. Thread-safe for one mp_pretok used by several threads. */
mp_status mp_pretok_split(const mp_pretok *p, const char *text, size_t len, mp_pretok_fn fn,
                          void *ctx, mp_error *err);

#endif
