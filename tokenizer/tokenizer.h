/* tokenizer/tokenizer.h — GGUF `gpt2`-style byte-level BPE tokenizer, and the SentencePiece ("llama")
 * one (merges by score, byte fallback; docs/tokenizer.md).
 *
 * Loaded from tokenizer.ggml.{model,pre,tokens,token_type,merges,bos_token_id,eos_token_id,...}.
 * Pre-tokenization splits text with the regex of tokenizer.ggml.pre (PCRE2, UTF + Unicode
 * properties): "gpt-2", "olmo", "qwen2" or "gpt-4o" (unknown values are an error naming the value).
 * Special tokens (token_type CONTROL or USER_DEFINED) are matched verbatim before splitting:
 * CONTROL tokens when parse_special is set, USER_DEFINED tokens always (as the reference
 * tokenizers do: they are vocabulary words, e.g. "<think>"). Invariant: decode(encode(text)) == text for any valid UTF-8 text without
 * special-token strings.
 */
#ifndef MP_TOKENIZER_TOKENIZER_H
#define MP_TOKENIZER_TOKENIZER_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "base/error.h"
#include "gguf/gguf.h"

typedef struct mp_tokenizer mp_tokenizer;

/* Token types (tokenizer.ggml.token_type values). */
enum {
    MP_TOK_TYPE_UNDEFINED = 0,
    MP_TOK_TYPE_NORMAL = 1,
    MP_TOK_TYPE_UNKNOWN = 2,
    MP_TOK_TYPE_CONTROL = 3,
    MP_TOK_TYPE_USER_DEFINED = 4,
    MP_TOK_TYPE_UNUSED = 5,
    MP_TOK_TYPE_BYTE = 6,
};

mp_status mp_tokenizer_load(const mp_gguf *g, mp_tokenizer **out, mp_error *err);
void mp_tokenizer_free(mp_tokenizer *t);

int32_t mp_tokenizer_n_vocab(const mp_tokenizer *t);
int32_t mp_tokenizer_bos(const mp_tokenizer *t); /* -1 if none */
int32_t mp_tokenizer_eos(const mp_tokenizer *t); /* -1 if none */
int32_t mp_tokenizer_eot(const mp_tokenizer *t); /* -1 if none */
/* Token type (MP_TOK_TYPE_*), or -1 for an id out of range. */
int32_t mp_tokenizer_token_type(const mp_tokenizer *t, int32_t tok);
/* Canonical name of the pre-tokenizer in use ("gpt-2", "olmo", "qwen2", "gpt-4o"; "spm" for a
 * SentencePiece vocabulary). */
const char *mp_tokenizer_pre(const mp_tokenizer *t);
bool mp_tokenizer_add_bos(const mp_tokenizer *t);
/* True for end-of-generation tokens (eos, eot, <|im_end|>, <|endoftext|> when present). */
bool mp_tokenizer_is_eog(const mp_tokenizer *t, int32_t tok);
/* Id of a token's exact stored text (byte-level spelling: " the" is "\xC4\xA0the"; special
 * tokens are stored as their text, e.g. "<|im_end|>"), or -1. A repeated text gives its first id. */
int32_t mp_tokenizer_find(const mp_tokenizer *t, const char *text);

/* Encode len bytes of text (need not be NUL-terminated). *tokens is malloc'd (caller frees; it
 * is non-NULL on success even when *n_tokens is 0). When mp_tokenizer_add_bos(t) is true the
 * BOS token comes first (callers must not add it again). Invalid UTF-8 is an MP_ERR_ARG error
 * naming the byte offset. Reentrant: one tokenizer may encode on several threads at once. */
mp_status mp_tokenizer_encode(const mp_tokenizer *t, const char *text, size_t len,
                              bool parse_special, int32_t **tokens, size_t *n_tokens,
                              mp_error *err);
/* Bytes of one token's text (byte-level decoded). Returns the byte count (may exceed cap: then
 * only cap bytes are written). Special tokens render as their text. */
size_t mp_tokenizer_decode_token(const mp_tokenizer *t, int32_t tok, char *buf, size_t cap);

/* Chat templates, one user message in the form a chat model was trained on: "chatml" (qwen2/qwen3):
 * <|im_start|>user\n{msg}<|im_end|>\n<|im_start|>assistant\n; "mistral" (Mixtral-Instruct):
 * [INST] {msg} [/INST]; "tulu" (OLMoE-Instruct): <|user|>\n{msg}\n<|assistant|>\n; "harmony"
 * (gpt-oss): <|start|>user<|message|>{msg}<|end|><|start|>assistant. Returns a malloc'd
 * NUL-terminated string. */
mp_status mp_chat_apply(const char *template_name, const char *user_msg, char **out, mp_error *err);
/* The template of a GGUF's tokenizer.chat_template (Jinja; len bytes, untrusted): the first of
 * chatml (it has <|im_start|>), mistral ([INST]), tulu (<|user|> and <|assistant|>), harmony
 * (<|start|> and <|message|>), or NULL. */
const char *mp_chat_template_classify(const char *text, size_t len);
/* The template prompts of this model take, one rule for `run` and `collect`: the file's
 * tokenizer.chat_template's (mp_chat_template_classify); without that key, chatml where the
 * vocabulary has <|im_start|> and <|im_end|>; else NULL (the text goes as it is). *why, when not
 * NULL, says which in a few words ("the file's tokenizer.chat_template", ...). */
const char *mp_tokenizer_chat_template(const mp_tokenizer *t, const char **why);

/* ---- vocabulary builder for mkmodel ----
 * Learns byte-level BPE merges on the given corpus until n_merges merges exist (or the corpus
 * runs out), then appends the special tokens and pads with "[PAD<i>]" tokens to n_vocab.
 * Output arrays are malloc'd; free with mp_vocab_free. Deterministic. */
typedef struct mp_vocab {
    char **tokens;      /* n_vocab token strings (byte-level encoded, as GGUF stores them) */
    int32_t *types;     /* n_vocab token types: 1 normal, 3 control, 4 user defined, 5 unused, 6 byte */
    int64_t n_vocab;
    char **merges;      /* n_merges "left right" strings */
    int64_t n_merges;
    int32_t bos_id, eos_id, eot_id; /* eot: <|im_end|> */
} mp_vocab;

/* Build a tokenizer from an in-memory vocabulary (tests, mkmodel) without a GGUF file: the same
 * checks as mp_tokenizer_load; pre as tokenizer.ggml.pre; add_bos is false. */
mp_status mp_tokenizer_from_vocab(const mp_vocab *v, const char *pre, mp_tokenizer **out,
                                  mp_error *err);

/* n_vocab >= 259 (256 byte tokens + 3 special tokens); pre selects the pre-tokenizer that cuts
 * the corpus into words (merges never cross a word boundary). */
mp_status mp_vocab_build(const char *corpus, size_t corpus_len, int64_t n_vocab,
                         const char *pre, mp_vocab *out, mp_error *err);
void mp_vocab_free(mp_vocab *v);
/* A built-in English + code corpus (a few tens of KB) for mkmodel's default vocabulary. */
const char *mp_vocab_default_corpus(size_t *len);

#endif
