/* tokenizer/tokenizer_impl.h — private to the tokenizer: the one constructor that both the GGUF
 * loader and mp_tokenizer_from_vocab feed, so that every check lives in one place.
 */
#ifndef MP_TOKENIZER_TOKENIZER_IMPL_H
#define MP_TOKENIZER_TOKENIZER_IMPL_H

#include "tokenizer/tokenizer.h"

typedef struct mp_tok_source {
    const char *origin;   /* error prefix: "file PATH" or "vocabulary" */
    const char *pre;      /* tokenizer.ggml.pre */
    int64_t n_vocab;
    const mp_str *tokens; /* (n_vocab) byte-level spelled token texts; copied by the build */
    const int32_t *types; /* (n_vocab) token types, or NULL: all normal */
    int64_t n_merges;
    const mp_str *merges; /* (n_merges) "left right", rank = index */
    int64_t bos, eos, eot, pad; /* -1 when absent */
    bool add_bos;
    /* SentencePiece ("llama") vocabularies: scores decide the merges (no merges list, no pre) */
    bool spm;
    const float *scores;   /* (n_vocab) */
    int64_t unk;           /* -1 when absent */
    bool add_space_prefix; /* a space before the text and after each special token */
    /* tokenizer.chat_template: has_chat when the key is there, chat its template
     * (mp_chat_template_classify; NULL: none moeplan knows) */
    bool has_chat;
    const char *chat;
} mp_tok_source;

mp_status mp_tok_build(const mp_tok_source *src, mp_tokenizer **out, mp_error *err);

#endif
