/* tokenizer/vocab_corpus.c — mp_vocab_default_corpus: the built-in English + code corpus that
 * mkmodel's default vocabulary is learned from. The text lives in vocab_corpus.txt (original
 * writing for this project) and is embedded at build time by embed_text.py.
 */
#include "tokenizer/tokenizer.h"

extern const char mp_vocab_corpus_text[];
extern const size_t mp_vocab_corpus_text_len;

const char *mp_vocab_default_corpus(size_t *len)
{
    if (len)
        *len = mp_vocab_corpus_text_len;
    return mp_vocab_corpus_text;
}
