/* tests/fuzz/fuzz_tokenizer.c — fuzz target for the tokenizer and the vocabulary builder.
 *
 * Input: byte 0 picks the pre-tokenizer (bit 0: gpt-2 or qwen2; bit 4 set: gpt-4o), parse_special
 * (bit 1), whether to learn a vocabulary from the input itself (bit 2) and, with bit 3, a
 * SentencePiece vocabulary instead (a fixed one: <unk>, <s>, </s>, the 256 byte tokens, a few
 * hundred pieces of the corpus with scores); the rest is the text. Invariants checked (abort on
 * violation): encode succeeds exactly when the text is valid UTF-8, every id is in range, and the
 * decoded tokens give the text back (with the SentencePiece space prefix in front of a non-empty
 * text without special tokens); a vocabulary learned from any valid text loads as a tokenizer.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tokenizer/bytelevel.h"
#include "tokenizer/tokenizer.h"
#include "tokenizer/tokenizer_impl.h"

static const char *const k_pres[3] = {"gpt-2", "qwen2", "gpt-4o"};

static void check(bool ok, const char *what)
{
    if (!ok) {
        fprintf(stderr, "fuzz_tokenizer: invariant failed: %s\n", what);
        abort();
    }
}

static void round_trip_prefix(const mp_tokenizer *t, const char *text, size_t len, bool special, const char *prefix);

static void round_trip(const mp_tokenizer *t, const char *text, size_t len, bool special)
{
    round_trip_prefix(t, text, len, special, "");
}

/* decode(encode(text)) == prefix + text */
static void round_trip_prefix(const mp_tokenizer *t, const char *text, size_t len, bool special, const char *prefix)
{
    int32_t *ids;
    size_t n;
    mp_error err;
    mp_status st = mp_tokenizer_encode(t, text, len, special, &ids, &n, &err);
    bool valid = mp_utf8_invalid_at((const uint8_t *)text, len) == len;
    check(valid ? st == MP_OK : st == MP_ERR_ARG, "encode status matches UTF-8 validity");
    if (st != MP_OK)
        return;
    const size_t pl = strlen(prefix), want = pl + len;
    char *back = malloc(want + 1);
    size_t o = 0;
    for (size_t i = 0; i < n; i++) {
        check(ids[i] >= 0 && ids[i] < mp_tokenizer_n_vocab(t), "id in range");
        if (i == 0 && mp_tokenizer_add_bos(t) && ids[0] == mp_tokenizer_bos(t))
            continue;
        size_t k = mp_tokenizer_decode_token(t, ids[i], back + o, want - o);
        check(o + k <= want, "decoded length within the text");
        o += k;
    }
    check(o == want && memcmp(back, prefix, pl) == 0 && memcmp(back + pl, text, len) == 0,
          "decode(encode(text)) == text");
    free(back);
    free(ids);
}

/* A SentencePiece vocabulary: <unk>, <s>, </s>, the 256 byte tokens, then the pieces of the
 * corpus's first words with a U+2581 in front and their prefixes, scored by length. */
static mp_tokenizer *spm_tokenizer(void)
{
    enum { N_MAX = 1024 };
    static char store[N_MAX][40];
    static mp_str tokens[N_MAX];
    static float scores[N_MAX];
    static int32_t types[N_MAX];
    int64_t n = 0;
    const char *fixed[3] = {"<unk>", "<s>", "</s>"};
    for (int i = 0; i < 3; i++, n++) {
        snprintf(store[n], sizeof store[n], "%s", fixed[i]);
        types[n] = i == 0 ? MP_TOK_TYPE_UNKNOWN : MP_TOK_TYPE_CONTROL;
    }
    for (int b = 0; b < 256; b++, n++) {
        snprintf(store[n], sizeof store[n], "<0x%02X>", b);
        types[n] = MP_TOK_TYPE_BYTE;
    }
    snprintf(store[n], sizeof store[n], "\xE2\x96\x81"); /* the escaped space alone, as every such vocabulary has */
    types[n++] = MP_TOK_TYPE_NORMAL;
    size_t clen, at = 0;
    const char *corpus = mp_vocab_default_corpus(&clen);
    while (n < N_MAX - 8 && at < clen) {
        size_t w = at;
        while (w < clen && corpus[w] != ' ' && corpus[w] != '\n' && w - at < 30)
            w++;
        for (size_t k = 1; k <= w - at && n < N_MAX - 1; k++) { /* "\u2581" + the word's first k bytes */
            if (k < w - at && (corpus[at + k] & 0xC0) == 0x80)
                continue; /* not inside a character */
            char piece[40] = "\xE2\x96\x81";
            memcpy(piece + 3, corpus + at, k);
            piece[3 + k] = 0;
            bool seen = false;
            for (int64_t j = 0; j < n && !seen; j++)
                seen = strcmp(store[j], piece) == 0;
            if (seen)
                continue;
            memcpy(store[n], piece, k + 4);
            types[n] = MP_TOK_TYPE_NORMAL;
            n++;
        }
        at = w + 1;
    }
    for (int64_t i = 0; i < n; i++) {
        tokens[i] = (mp_str){store[i], strlen(store[i])};
        scores[i] = types[i] == MP_TOK_TYPE_NORMAL ? (float)tokens[i].len - (float)i * 1e-4f : 0.0f;
    }
    mp_tok_source src = {.origin = "fuzz", .n_vocab = n, .tokens = tokens, .types = types, .bos = 1,
                         .eos = 2, .eot = -1, .pad = -1, .add_bos = true, .spm = true, .scores = scores,
                         .unk = 0, .add_space_prefix = true};
    mp_tokenizer *t;
    mp_error err;
    check(mp_tok_build(&src, &t, &err) == MP_OK, "the SentencePiece vocabulary loads");
    return t;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    static mp_tokenizer *spm;
    static mp_tokenizer *shared[3];
    static mp_vocab shared_vocab[3];
    if (size == 0)
        return 0;
    int pre = data[0] & 16 ? 2 : data[0] & 1; /* bit 4 came later: older seeds keep their meaning */
    bool special = (data[0] & 2) != 0, learn = (data[0] & 4) != 0;
    const char *text = (const char *)data + 1;
    size_t len = size - 1;
    mp_error err;
    if (data[0] & 8) { /* SentencePiece: the space prefix unless the text is empty or has "<s>"/"</s>" */
        if (!spm)
            spm = spm_tokenizer();
        bool has_special = false; /* or U+2581 itself, which encodes as the space it stands for */
        for (size_t i = 0; i + 3 <= len && !has_special; i++)
            has_special = (special && (!memcmp(text + i, "<s>", 3) || (i + 4 <= len && !memcmp(text + i, "</s>", 4)))) ||
                          !memcmp(text + i, "\xE2\x96\x81", 3);
        if (!has_special)
            round_trip_prefix(spm, text, len, special, len ? " " : "");
        else { /* encode must still succeed on valid UTF-8 and stay in range */
            int32_t *ids;
            size_t n;
            if (mp_tokenizer_encode(spm, text, len, special, &ids, &n, &err) == MP_OK) {
                for (size_t i = 0; i < n; i++)
                    check(ids[i] >= 0 && ids[i] < mp_tokenizer_n_vocab(spm), "id in range");
                free(ids);
            }
        }
        return 0;
    }
    if (!shared[pre]) {
        size_t clen;
        const char *corpus = mp_vocab_default_corpus(&clen);
        check(mp_vocab_build(corpus, clen, 1024, k_pres[pre], &shared_vocab[pre], &err) == MP_OK,
              "default vocabulary builds");
        check(mp_tokenizer_from_vocab(&shared_vocab[pre], k_pres[pre], &shared[pre], &err) ==
                  MP_OK,
              "default vocabulary loads");
    }
    round_trip(shared[pre], text, len, special);
    if (learn && len <= 4096) {
        mp_vocab v;
        mp_status st = mp_vocab_build(text, len, 300, k_pres[pre], &v, &err);
        bool valid = mp_utf8_invalid_at((const uint8_t *)text, len) == len;
        check(valid ? st == MP_OK : st == MP_ERR_ARG, "builder status matches UTF-8 validity");
        if (st == MP_OK) {
            mp_tokenizer *t;
            check(mp_tokenizer_from_vocab(&v, k_pres[pre], &t, &err) == MP_OK,
                  "learned vocabulary loads");
            round_trip(t, text, len, special);
            mp_tokenizer_free(t);
            mp_vocab_free(&v);
        }
    }
    return 0;
}
