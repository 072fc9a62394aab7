/* tests/fuzz/fuzz_tokenizer.c — fuzz target for the tokenizer and the vocabulary builder.
 *
 * Input: byte 0 picks the pre-tokenizer (bit 0), parse_special (bit 1) and whether to learn a
 * vocabulary from the input itself (bit 2); the rest is the text. Invariants checked (abort on
 * violation): encode succeeds exactly when the text is valid UTF-8, every id is in range, and the
 * decoded tokens give the text back; a vocabulary learned from any valid text loads as a tokenizer.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tokenizer/bytelevel.h"
#include "tokenizer/tokenizer.h"

static const char *const k_pres[2] = {"gpt-2", "qwen2"};

static void check(bool ok, const char *what)
{
    if (!ok) {
        fprintf(stderr, "fuzz_tokenizer: invariant failed: %s\n", what);
        abort();
    }
}

static void round_trip(const mp_tokenizer *t, const char *text, size_t len, bool special)
{
    int32_t *ids;
    size_t n;
    mp_error err;
    mp_status st = mp_tokenizer_encode(t, text, len, special, &ids, &n, &err);
    bool valid = mp_utf8_invalid_at((const uint8_t *)text, len) == len;
    check(valid ? st == MP_OK : st == MP_ERR_ARG, "encode status matches UTF-8 validity");
    if (st != MP_OK)
        return;
    char *back = malloc(len + 1);
    size_t o = 0;
    for (size_t i = 0; i < n; i++) {
        check(ids[i] >= 0 && ids[i] < mp_tokenizer_n_vocab(t), "id in range");
        size_t k = mp_tokenizer_decode_token(t, ids[i], back + o, len - o);
        check(o + k <= len, "decoded length within the text");
        o += k;
    }
    check(o == len && memcmp(back, text, len) == 0, "decode(encode(text)) == text");
    free(back);
    free(ids);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    static mp_tokenizer *shared[2];
    static mp_vocab shared_vocab[2];
    if (size == 0)
        return 0;
    int pre = data[0] & 1;
    bool special = (data[0] & 2) != 0, learn = (data[0] & 4) != 0;
    const char *text = (const char *)data + 1;
    size_t len = size - 1;
    mp_error err;
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
