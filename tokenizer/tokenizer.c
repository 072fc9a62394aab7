/* tokenizer/tokenizer.c — byte-level BPE encoding and decoding (GGUF "gpt2" tokenizers).
 *
 * Encoding: check UTF-8 → split out special tokens (when asked) → pre-tokenize each remaining
 * segment with the regex of tokenizer.ggml.pre → spell each piece's bytes as byte tokens → apply
 * merges, always the lowest-rank adjacent pair first (leftmost on ties), until none applies.
 * Invariants of a built tokenizer:
 *  - every byte value has a token (byte_token), so any valid UTF-8 text encodes;
 *  - every merge's left, right and concatenated texts are tokens (checked at build);
 *  - text_of(id) is the exact stored text, dec_of(id) its bytes (special tokens: their text).
 * Control tokens are matched in the text only with parse_special; user-defined tokens always
 * (they are vocabulary words such as "<think>" that the model saw as one token: the reference
 * tokenizer library and GGUF runtimes both split them out whatever the special-token setting).
 */
#include "tokenizer/tokenizer.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tokenizer/bytelevel.h"
#include "tokenizer/pretokenize.h"
#include "tokenizer/tokenizer_impl.h"

#define MP_TOK_MAX_VOCAB ((int64_t)1 << 24) /* far above any real vocabulary (152k) */
#define MP_TOK_MAX_EOG 4

struct mp_tokenizer {
    int32_t n_vocab;
    char *text;          /* (sum of text lengths) stored token texts, concatenated */
    uint64_t *text_off;  /* (n_vocab + 1) token i is text[text_off[i] .. text_off[i+1]) */
    char *dec;           /* decoded bytes of every token, concatenated */
    uint64_t *dec_off;   /* (n_vocab + 1) */
    int32_t *types;      /* (n_vocab) */

    int32_t *str_slots;  /* (str_cap) open addressing text -> id, -1 empty; first id wins */
    uint64_t str_cap;    /* power of two >= 2 n_vocab */

    uint64_t *pair_keys; /* (pair_cap) left << 32 | right, PAIR_EMPTY when free */
    int32_t *pair_rank;  /* (pair_cap) merge rank (index in the merges list) */
    int32_t *pair_out;   /* (pair_cap) id of the concatenated token */
    uint64_t pair_cap;   /* power of two >= 2 n_merges */

    int32_t byte_token[256]; /* token spelling each byte value */

    /* Special tokens bucketed by first byte, longest first, so that the first hit at a position
     * is the longest match there. */
    int32_t *special;          /* (n_special) token ids, control and user defined */
    uint32_t n_user_defined;   /* how many of them are user defined */
    uint32_t special_at[257];  /* bucket b is special[special_at[b] .. special_at[b+1]) */

    mp_pretok *pretok;   /* NULL for a SentencePiece vocabulary */
    int32_t bos, eos, eot, pad;
    bool add_bos;
    /* SentencePiece ("llama"): merges by score (spm.c's algorithm below), byte fallback through
     * the <0xXX> tokens (byte_token, -1 where absent: then unk) */
    bool spm;
    float *scores;       /* (n_vocab) */
    int32_t unk;
    bool add_space_prefix;
    const char *chat, *chat_why; /* mp_tokenizer_chat_template */
    int32_t eog[MP_TOK_MAX_EOG];
    int n_eog;
};

#define PAIR_EMPTY UINT64_MAX

static uint64_t hash_bytes(const char *s, size_t n)
{
    uint64_t h = 1469598103934665603ull; /* FNV-1a */
    for (size_t i = 0; i < n; i++) {
        h ^= (unsigned char)s[i];
        h *= 1099511628211ull;
    }
    return h ^ (h >> 29);
}

static uint64_t hash_pair(uint64_t key)
{
    key ^= key >> 33;
    key *= 0xff51afd7ed558ccdull;
    key ^= key >> 33;
    return key;
}

static uint64_t pow2_at_least(uint64_t n)
{
    uint64_t c = 16;
    while (c < n)
        c <<= 1;
    return c;
}

static const char *text_of(const mp_tokenizer *t, int32_t id, size_t *len)
{
    *len = t->text_off[id + 1] - t->text_off[id];
    return t->text + t->text_off[id];
}

static int32_t find_text(const mp_tokenizer *t, const char *s, size_t n)
{
    uint64_t mask = t->str_cap - 1;
    for (uint64_t i = hash_bytes(s, n) & mask;; i = (i + 1) & mask) {
        int32_t id = t->str_slots[i];
        if (id < 0)
            return -1;
        size_t len;
        const char *txt = text_of(t, id, &len);
        if (len == n && memcmp(txt, s, n) == 0)
            return id;
    }
}

/* Returns the slot of the merge (left, right), or -1. */
static int64_t find_pair(const mp_tokenizer *t, int32_t left, int32_t right)
{
    uint64_t key = (uint64_t)(uint32_t)left << 32 | (uint32_t)right;
    uint64_t mask = t->pair_cap - 1;
    for (uint64_t i = hash_pair(key) & mask;; i = (i + 1) & mask) {
        if (t->pair_keys[i] == key)
            return (int64_t)i;
        if (t->pair_keys[i] == PAIR_EMPTY)
            return -1;
    }
}

static bool is_special_type(int32_t type)
{
    return type == MP_TOK_TYPE_CONTROL || type == MP_TOK_TYPE_USER_DEFINED;
}

void mp_tokenizer_free(mp_tokenizer *t)
{
    if (!t)
        return;
    free(t->text);
    free(t->text_off);
    free(t->dec);
    free(t->dec_off);
    free(t->types);
    free(t->str_slots);
    free(t->pair_keys);
    free(t->pair_rank);
    free(t->pair_out);
    free(t->special);
    if (t->pretok)
        mp_pretok_free(t->pretok);
    free(t->scores);
    free(t);
}

/* Texts, types and the text -> id table. */
static mp_status build_texts(mp_tokenizer *t, const mp_tok_source *src, mp_error *err)
{
    int64_t n = src->n_vocab;
    uint64_t total = 0;
    for (int64_t i = 0; i < n; i++) {
        if (src->tokens[i].len > UINT32_MAX)
            return mp_fail(err, MP_ERR_FORMAT, "%s: tokenizer.ggml.tokens[%lld]: text of %llu bytes",
                           src->origin, (long long)i, (unsigned long long)src->tokens[i].len);
        total += src->tokens[i].len;
    }
    t->text = malloc(total + 1);
    t->text_off = malloc((size_t)(n + 1) * sizeof *t->text_off);
    t->types = malloc((size_t)n * sizeof *t->types);
    t->str_cap = pow2_at_least((uint64_t)n * 2);
    t->str_slots = malloc(t->str_cap * sizeof *t->str_slots);
    if (!t->text || !t->text_off || !t->types || !t->str_slots)
        return mp_fail(err, MP_ERR_NOMEM, "%s: tokenizer: out of memory", src->origin);
    memset(t->str_slots, 0xff, t->str_cap * sizeof *t->str_slots);
    uint64_t off = 0;
    for (int64_t i = 0; i < n; i++) {
        int32_t type = src->types ? src->types[i] : MP_TOK_TYPE_NORMAL;
        if (type < 0 || type > MP_TOK_TYPE_BYTE)
            return mp_fail(err, MP_ERR_FORMAT,
                           "%s: tokenizer.ggml.token_type[%lld]: value %d, expected 0..6",
                           src->origin, (long long)i, (int)type);
        t->types[i] = type;
        t->text_off[i] = off;
        if (src->tokens[i].len)
            memcpy(t->text + off, src->tokens[i].ptr, src->tokens[i].len);
        off += src->tokens[i].len;
    }
    t->text_off[n] = off;
    uint64_t mask = t->str_cap - 1;
    for (int32_t id = 0; id < (int32_t)n; id++) {
        size_t len;
        const char *s = text_of(t, id, &len);
        if (find_text(t, s, len) >= 0)
            continue; /* a repeated text keeps its first id, the one lookups must return */
        uint64_t i = hash_bytes(s, len) & mask;
        while (t->str_slots[i] >= 0)
            i = (i + 1) & mask;
        t->str_slots[i] = id;
    }
    return MP_OK;
}

/* Decoded bytes of every token: special tokens are their own text, the others are un-spelled
 * from the byte-level alphabet (a character outside it is kept as its UTF-8 bytes). */
static mp_status build_decoded(mp_tokenizer *t, const char *origin, mp_error *err)
{
    uint64_t total = t->text_off[t->n_vocab];
    t->dec = malloc(total + 1);
    t->dec_off = malloc(((size_t)t->n_vocab + 1) * sizeof *t->dec_off);
    if (!t->dec || !t->dec_off)
        return mp_fail(err, MP_ERR_NOMEM, "%s: tokenizer: out of memory", origin);
    uint64_t o = 0; /* decoding never lengthens a text: o <= text_off[id] */
    for (int32_t id = 0; id < t->n_vocab; id++) {
        t->dec_off[id] = o;
        size_t len;
        const uint8_t *s = (const uint8_t *)text_of(t, id, &len);
        if (is_special_type(t->types[id]) || mp_utf8_invalid_at(s, len) != len) {
            memcpy(t->dec + o, s, len);
            o += len;
            continue;
        }
        for (size_t i = 0; i < len;) {
            size_t n;
            uint32_t cp = mp_utf8_next(s + i, len - i, &n);
            int b = mp_bytelevel_byte(cp);
            if (b >= 0) {
                t->dec[o++] = (char)b;
            } else {
                memcpy(t->dec + o, s + i, n);
                o += n;
            }
            i += n;
        }
    }
    t->dec_off[t->n_vocab] = o;
    return MP_OK;
}

static mp_status build_merges(mp_tokenizer *t, const mp_tok_source *src, mp_error *err)
{
    for (int b = 0; b < 256; b++) {
        char spell[2];
        uint8_t byte = (uint8_t)b;
        size_t n = mp_bytelevel_encode(&byte, 1, spell);
        t->byte_token[b] = find_text(t, spell, n);
        if (t->byte_token[b] < 0)
            return mp_fail(err, MP_ERR_FORMAT,
                           "%s: tokenizer.ggml.tokens: no token spells byte 0x%02x ('%.*s'), "
                           "expected all 256 byte tokens of a byte-level vocabulary",
                           src->origin, b, (int)n, spell);
    }
    if (src->n_merges > INT32_MAX)
        return mp_fail(err, MP_ERR_LIMIT, "%s: tokenizer.ggml.merges: %lld merges, at most %d",
                       src->origin, (long long)src->n_merges, INT32_MAX);
    t->pair_cap = pow2_at_least((uint64_t)src->n_merges * 2);
    t->pair_keys = malloc(t->pair_cap * sizeof *t->pair_keys);
    t->pair_rank = malloc(t->pair_cap * sizeof *t->pair_rank);
    t->pair_out = malloc(t->pair_cap * sizeof *t->pair_out);
    char *cat = NULL;
    size_t cat_cap = 0;
    if (!t->pair_keys || !t->pair_rank || !t->pair_out)
        return mp_fail(err, MP_ERR_NOMEM, "%s: tokenizer: out of memory", src->origin);
    memset(t->pair_keys, 0xff, t->pair_cap * sizeof *t->pair_keys);
    mp_status st = MP_OK;
    for (int64_t r = 0; r < src->n_merges && st == MP_OK; r++) {
        const char *m = src->merges[r].ptr;
        size_t len = src->merges[r].len;
        const char *sp = len ? memchr(m, ' ', len) : NULL;
        if (!sp || sp == m || sp == m + len - 1) {
            st = mp_fail(err, MP_ERR_FORMAT,
                         "%s: tokenizer.ggml.merges[%lld] '%.*s': expected 'left right'",
                         src->origin, (long long)r, (int)(len > 64 ? 64 : len), m);
            break;
        }
        size_t ll = (size_t)(sp - m), rl = len - ll - 1;
        int32_t left = find_text(t, m, ll), right = find_text(t, sp + 1, rl);
        if (cat_cap < ll + rl) {
            free(cat);
            cat_cap = 2 * (ll + rl);
            if (!(cat = malloc(cat_cap))) {
                st = mp_fail(err, MP_ERR_NOMEM, "%s: tokenizer: out of memory", src->origin);
                break;
            }
        }
        memcpy(cat, m, ll);
        memcpy(cat + ll, sp + 1, rl);
        int32_t result = find_text(t, cat, ll + rl);
        if (left < 0 || right < 0 || result < 0) {
            st = mp_fail(err, MP_ERR_FORMAT,
                         "%s: tokenizer.ggml.merges[%lld] '%.*s': token '%.*s' is not in "
                         "tokenizer.ggml.tokens",
                         src->origin, (long long)r, (int)(len > 64 ? 64 : len), m,
                         left < 0 ? (int)ll : right < 0 ? (int)rl : (int)(ll + rl),
                         left < 0 ? m : right < 0 ? sp + 1 : cat);
            break;
        }
        if (find_pair(t, left, right) >= 0)
            continue; /* a repeated merge keeps its first (lowest) rank */
        uint64_t key = (uint64_t)(uint32_t)left << 32 | (uint32_t)right;
        uint64_t mask = t->pair_cap - 1, i = hash_pair(key) & mask;
        while (t->pair_keys[i] != PAIR_EMPTY)
            i = (i + 1) & mask;
        t->pair_keys[i] = key;
        t->pair_rank[i] = (int32_t)r;
        t->pair_out[i] = result;
    }
    free(cat);
    return st;
}

static int cmp_special(const void *a, const void *b, void *ctx)
{
    const mp_tokenizer *t = ctx;
    int32_t x = *(const int32_t *)a, y = *(const int32_t *)b;
    size_t lx, ly;
    const char *sx = text_of(t, x, &lx), *sy = text_of(t, y, &ly);
    if ((unsigned char)sx[0] != (unsigned char)sy[0])
        return (unsigned char)sx[0] < (unsigned char)sy[0] ? -1 : 1;
    if (lx != ly)
        return lx > ly ? -1 : 1; /* longest first */
    return x < y ? -1 : x > y;
}

static mp_status build_specials(mp_tokenizer *t, const char *origin, mp_error *err)
{
    uint32_t n = 0;
    for (int32_t id = 0; id < t->n_vocab; id++)
        n += is_special_type(t->types[id]);
    t->special = malloc((n ? n : 1) * sizeof *t->special);
    if (!t->special)
        return mp_fail(err, MP_ERR_NOMEM, "%s: tokenizer: out of memory", origin);
    n = 0;
    for (int32_t id = 0; id < t->n_vocab; id++) {
        if (!is_special_type(t->types[id]))
            continue;
        size_t len;
        const char *s = text_of(t, id, &len);
        /* A special text that is empty or not UTF-8 could match inside a character and split
         * the text into invalid pieces: refuse it. */
        if (len == 0 || mp_utf8_invalid_at((const uint8_t *)s, len) != len)
            return mp_fail(err, MP_ERR_FORMAT,
                           "%s: tokenizer.ggml.tokens[%d]: special token (type %d) must be "
                           "non-empty UTF-8 text",
                           origin, (int)id, (int)t->types[id]);
        if (find_text(t, s, len) != id)
            continue; /* a repeated text is matched as its first id */
        t->special[n++] = id;
        t->n_user_defined += t->types[id] == MP_TOK_TYPE_USER_DEFINED;
    }
    qsort_r(t->special, n, sizeof *t->special, cmp_special, t);
    uint32_t k = 0;
    for (int b = 0; b <= 256; b++) {
        while (k < n && (unsigned char)t->text[t->text_off[t->special[k]]] < b)
            k++;
        t->special_at[b] = k;
    }
    t->special_at[256] = n;
    return MP_OK;
}

/* A SentencePiece vocabulary's scores, byte tokens (<0xXX>) and decoded bytes: special tokens are
 * their text, a byte token its byte, any other text with U+2581 (the escaped space) as ' '. */
static mp_status build_spm(mp_tokenizer *t, const mp_tok_source *src, mp_error *err)
{
    if (!src->scores)
        return mp_fail(err, MP_ERR_FORMAT, "%s: tokenizer.ggml.scores: missing (a SentencePiece vocabulary "
                       "merges by them)", src->origin);
    if (src->unk < -1 || src->unk >= src->n_vocab)
        return mp_fail(err, MP_ERR_FORMAT, "%s: tokenizer.ggml.unknown_token_id: %lld, expected a token id below "
                       "%lld", src->origin, (long long)src->unk, (long long)src->n_vocab);
    t->spm = true;
    t->unk = (int32_t)src->unk;
    t->add_space_prefix = src->add_space_prefix;
    t->scores = malloc((size_t)t->n_vocab * sizeof *t->scores);
    const uint64_t total = t->text_off[t->n_vocab];
    t->dec = malloc(total + 1);
    t->dec_off = malloc(((size_t)t->n_vocab + 1) * sizeof *t->dec_off);
    if (!t->scores || !t->dec || !t->dec_off)
        return mp_fail(err, MP_ERR_NOMEM, "%s: tokenizer: out of memory", src->origin);
    for (int32_t id = 0; id < t->n_vocab; id++) {
        if (!isfinite(src->scores[id]))
            return mp_fail(err, MP_ERR_FORMAT, "%s: tokenizer.ggml.scores[%d]: not a finite number", src->origin,
                           (int)id);
        t->scores[id] = src->scores[id];
    }
    for (int b = 0; b < 256; b++) {
        char name[8];
        snprintf(name, sizeof name, "<0x%02X>", b);
        t->byte_token[b] = find_text(t, name, 6);
    }
    uint64_t o = 0; /* decoding never lengthens a text (U+2581 is 3 bytes, <0xXX> 6) */
    for (int32_t id = 0; id < t->n_vocab; id++) {
        t->dec_off[id] = o;
        size_t len;
        const char *x = text_of(t, id, &len);
        unsigned v;
        if (t->types[id] == MP_TOK_TYPE_BYTE && len == 6 && sscanf(x, "<0x%2X>", &v) == 1) {
            t->dec[o++] = (char)v;
            continue;
        }
        for (size_t i = 0; i < len;) {
            if (!is_special_type(t->types[id]) && len - i >= 3 && memcmp(x + i, "\xE2\x96\x81", 3) == 0) {
                t->dec[o++] = ' ';
                i += 3;
            } else {
                t->dec[o++] = x[i++];
            }
        }
    }
    t->dec_off[t->n_vocab] = o;
    return MP_OK;
}

static void add_eog(mp_tokenizer *t, int32_t id)
{
    if (id < 0 || t->n_eog == MP_TOK_MAX_EOG)
        return;
    for (int i = 0; i < t->n_eog; i++)
        if (t->eog[i] == id)
            return;
    t->eog[t->n_eog++] = id;
}

mp_status mp_tok_build(const mp_tok_source *src, mp_tokenizer **out, mp_error *err)
{
    *out = NULL;
    if (src->n_vocab < 256 || src->n_vocab > MP_TOK_MAX_VOCAB)
        return mp_fail(err, MP_ERR_FORMAT,
                       "%s: tokenizer.ggml.tokens: %lld tokens, expected 256..%lld", src->origin,
                       (long long)src->n_vocab, (long long)MP_TOK_MAX_VOCAB);
    const int64_t ids[4] = {src->bos, src->eos, src->eot, src->pad};
    const char *id_keys[4] = {"bos_token_id", "eos_token_id", "eot_token_id", "padding_token_id"};
    for (int i = 0; i < 4; i++)
        if (ids[i] < -1 || ids[i] >= src->n_vocab)
            return mp_fail(err, MP_ERR_FORMAT,
                           "%s: tokenizer.ggml.%s: %lld, expected a token id below %lld",
                           src->origin, id_keys[i], (long long)ids[i], (long long)src->n_vocab);
    mp_tokenizer *t = calloc(1, sizeof *t);
    if (!t)
        return mp_fail(err, MP_ERR_NOMEM, "%s: tokenizer: out of memory", src->origin);
    t->n_vocab = (int32_t)src->n_vocab;
    mp_status st = MP_OK;
    if (src->spm) {
        if ((st = build_texts(t, src, err)) != MP_OK || (st = build_spm(t, src, err)) != MP_OK ||
            (st = build_specials(t, src->origin, err)) != MP_OK) {
            mp_tokenizer_free(t);
            return st;
        }
    } else if ((st = mp_pretok_new(src->pre, &t->pretok, err)) != MP_OK) {
        mp_error_prefix(err, "%s: tokenizer.ggml.pre", src->origin);
        mp_tokenizer_free(t);
        return st;
    } else if ((st = build_texts(t, src, err)) != MP_OK || (st = build_decoded(t, src->origin, err)) != MP_OK ||
               (st = build_merges(t, src, err)) != MP_OK ||
               (st = build_specials(t, src->origin, err)) != MP_OK) {
        mp_tokenizer_free(t);
        return st;
    }
    t->bos = (int32_t)src->bos;
    t->eos = (int32_t)src->eos;
    t->eot = (int32_t)src->eot;
    t->pad = (int32_t)src->pad;
    t->add_bos = src->add_bos && t->bos >= 0;
    add_eog(t, t->eos);
    add_eog(t, t->eot);
    add_eog(t, mp_tokenizer_find(t, "<|im_end|>"));
    add_eog(t, mp_tokenizer_find(t, "<|endoftext|>"));
    if (src->has_chat) {
        t->chat = src->chat;
        t->chat_why = src->chat ? "the file's tokenizer.chat_template"
                                : "the file's tokenizer.chat_template is none moeplan knows (ChatML, [INST], <|user|>, "
                                  "<|start|>...<|message|>)";
    } else if (mp_tokenizer_find(t, "<|im_start|>") >= 0 && mp_tokenizer_find(t, "<|im_end|>") >= 0) {
        t->chat = "chatml";
        t->chat_why = "no tokenizer.chat_template; the vocabulary has <|im_start|> and <|im_end|>";
    } else {
        t->chat = NULL;
        t->chat_why = "no tokenizer.chat_template";
    }
    *out = t;
    return MP_OK;
}

const char *mp_tokenizer_chat_template(const mp_tokenizer *t, const char **why)
{
    if (why)
        *why = t->chat_why;
    return t->chat;
}

mp_status mp_tokenizer_from_vocab(const mp_vocab *v, const char *pre, mp_tokenizer **out,
                                  mp_error *err)
{
    *out = NULL;
    if (!v || !v->tokens || v->n_vocab < 0 || v->n_merges < 0 || (v->n_merges && !v->merges))
        return mp_fail(err, MP_ERR_ARG, "vocabulary: missing tokens or merges");
    mp_str *tokens = malloc(((size_t)v->n_vocab + 1) * sizeof *tokens);
    mp_str *merges = malloc(((size_t)v->n_merges + 1) * sizeof *merges);
    if (!tokens || !merges) {
        free(tokens);
        free(merges);
        return mp_fail(err, MP_ERR_NOMEM, "vocabulary: out of memory");
    }
    for (int64_t i = 0; i < v->n_vocab; i++)
        tokens[i] = (mp_str){v->tokens[i], v->tokens[i] ? strlen(v->tokens[i]) : 0};
    for (int64_t i = 0; i < v->n_merges; i++)
        merges[i] = (mp_str){v->merges[i], v->merges[i] ? strlen(v->merges[i]) : 0};
    mp_tok_source src = {
        .origin = "vocabulary",
        .pre = pre,
        .n_vocab = v->n_vocab,
        .tokens = tokens,
        .types = v->types,
        .n_merges = v->n_merges,
        .merges = merges,
        .bos = v->bos_id,
        .eos = v->eos_id,
        .eot = v->eot_id,
        .pad = -1,
        .add_bos = false,
    };
    mp_status st = mp_tok_build(&src, out, err);
    free(tokens);
    free(merges);
    return st;
}

int32_t mp_tokenizer_n_vocab(const mp_tokenizer *t) { return t->n_vocab; }
int32_t mp_tokenizer_bos(const mp_tokenizer *t) { return t->bos; }
int32_t mp_tokenizer_eos(const mp_tokenizer *t) { return t->eos; }
int32_t mp_tokenizer_eot(const mp_tokenizer *t) { return t->eot; }
bool mp_tokenizer_add_bos(const mp_tokenizer *t) { return t->add_bos; }
const char *mp_tokenizer_pre(const mp_tokenizer *t) { return t->pretok ? mp_pretok_name(t->pretok) : "spm"; }

int32_t mp_tokenizer_token_type(const mp_tokenizer *t, int32_t tok)
{
    return tok >= 0 && tok < t->n_vocab ? t->types[tok] : -1;
}

bool mp_tokenizer_is_eog(const mp_tokenizer *t, int32_t tok)
{
    for (int i = 0; i < t->n_eog; i++)
        if (t->eog[i] == tok)
            return true;
    return false;
}

int32_t mp_tokenizer_find(const mp_tokenizer *t, const char *text)
{
    return text ? find_text(t, text, strlen(text)) : -1;
}

size_t mp_tokenizer_decode_token(const mp_tokenizer *t, int32_t tok, char *buf, size_t cap)
{
    if (tok < 0 || tok >= t->n_vocab)
        return 0;
    size_t n = t->dec_off[tok + 1] - t->dec_off[tok];
    if (buf && cap)
        memcpy(buf, t->dec + t->dec_off[tok], n < cap ? n : cap);
    return n;
}

/* ---- encoding ---- */

typedef struct heap_item {
    int32_t rank; /* merge rank of the pair (pos, next[pos]) when pushed */
    int32_t pos;  /* left symbol */
} heap_item;

/* Scratch of one encode call (encode is reentrant: the tokenizer itself is never written). */
typedef struct enc_state {
    const mp_tokenizer *t;
    int32_t *out; /* (n_out) tokens so far, capacity out_cap */
    size_t n_out, out_cap;
    int32_t *sym;  /* (piece bytes) token of each live symbol, DEAD once merged away */
    int32_t *prev; /* (piece bytes) doubly linked list of live symbols, -1 at the ends */
    int32_t *next;
    heap_item *heap; /* (3 * piece bytes) min-heap on (rank, pos): n-1 initial pairs + 2/merge */
    size_t n_heap, piece_cap;
} enc_state;

#define DEAD (-1)

static bool push_token(enc_state *s, int32_t id)
{
    if (s->n_out == s->out_cap) {
        size_t cap = s->out_cap ? s->out_cap * 2 : 64;
        int32_t *p = realloc(s->out, cap * sizeof *p);
        if (!p)
            return false;
        s->out = p;
        s->out_cap = cap;
    }
    s->out[s->n_out++] = id;
    return true;
}

static bool heap_less(heap_item a, heap_item b)
{
    return a.rank < b.rank || (a.rank == b.rank && a.pos < b.pos);
}

/* A binary heap's push and pop over s->FIELD (s->N_FIELD items), ITEM_T items, BEFORE(a, b) true
 * when a pops first: the byte-level encoder's (merge rank) and the SentencePiece one's (score). */
#define DEFINE_HEAP(PUSH, POP, STATE_T, ITEM_T, FIELD, N_FIELD, BEFORE)      \
    static void PUSH(STATE_T *s, ITEM_T it)                                  \
    {                                                                        \
        size_t i = s->N_FIELD++;                                             \
        while (i > 0 && BEFORE(it, s->FIELD[(i - 1) / 2])) {                 \
            s->FIELD[i] = s->FIELD[(i - 1) / 2];                             \
            i = (i - 1) / 2;                                                 \
        }                                                                    \
        s->FIELD[i] = it;                                                    \
    }                                                                        \
    static ITEM_T POP(STATE_T *s)                                            \
    {                                                                        \
        ITEM_T top = s->FIELD[0], last = s->FIELD[--s->N_FIELD];             \
        size_t i = 0, n = s->N_FIELD;                                        \
        for (;;) {                                                           \
            size_t c = 2 * i + 1;                                            \
            if (c >= n)                                                      \
                break;                                                       \
            if (c + 1 < n && BEFORE(s->FIELD[c + 1], s->FIELD[c]))           \
                c++;                                                         \
            if (!BEFORE(s->FIELD[c], last))                                  \
                break;                                                       \
            s->FIELD[i] = s->FIELD[c];                                       \
            i = c;                                                           \
        }                                                                    \
        if (n)                                                               \
            s->FIELD[i] = last;                                              \
        return top;                                                          \
    }

DEFINE_HEAP(heap_push, heap_pop, enc_state, heap_item, heap, n_heap, heap_less)

static void push_pair(enc_state *s, int32_t pos)
{
    if (pos < 0 || s->next[pos] < 0)
        return;
    int64_t slot = find_pair(s->t, s->sym[pos], s->sym[s->next[pos]]);
    if (slot >= 0)
        heap_push(s, (heap_item){s->t->pair_rank[slot], pos});
}

/* Hot path: every piece of the text goes through here once. */
static mp_status encode_piece(const char *piece, size_t len, void *ctx, mp_error *err)
{
    enc_state *s = ctx;
    const mp_tokenizer *t = s->t;
    if (len > INT32_MAX)
        return mp_fail(err, MP_ERR_LIMIT, "tokenizer: a pre-token of %zu bytes, at most %d", len,
                       INT32_MAX);
    if (len > s->piece_cap) {
        size_t cap = len < 64 ? 64 : len;
        free(s->sym);
        free(s->prev);
        free(s->next);
        free(s->heap);
        s->sym = malloc(cap * sizeof *s->sym);
        s->prev = malloc(cap * sizeof *s->prev);
        s->next = malloc(cap * sizeof *s->next);
        s->heap = malloc(3 * cap * sizeof *s->heap);
        s->piece_cap = cap;
        if (!s->sym || !s->prev || !s->next || !s->heap) {
            s->piece_cap = 0;
            return mp_fail(err, MP_ERR_NOMEM, "tokenizer: out of memory");
        }
    }
    int32_t n = (int32_t)len;
    for (int32_t i = 0; i < n; i++) {
        s->sym[i] = t->byte_token[(unsigned char)piece[i]];
        s->prev[i] = i - 1;
        s->next[i] = i + 1 < n ? i + 1 : -1;
    }
    s->n_heap = 0;
    for (int32_t i = 0; i + 1 < n; i++)
        push_pair(s, i);
    while (s->n_heap) {
        heap_item it = heap_pop(s);
        int32_t pos = it.pos;
        if (s->sym[pos] == DEAD || s->next[pos] < 0)
            continue;
        int32_t right = s->next[pos];
        int64_t slot = find_pair(t, s->sym[pos], s->sym[right]);
        if (slot < 0 || t->pair_rank[slot] != it.rank)
            continue; /* stale: one of the two symbols changed since the push */
        s->sym[pos] = t->pair_out[slot];
        s->sym[right] = DEAD;
        s->next[pos] = s->next[right];
        if (s->next[pos] >= 0)
            s->prev[s->next[pos]] = pos;
        push_pair(s, s->prev[pos]);
        push_pair(s, pos);
    }
    for (int32_t i = 0; i >= 0; i = s->next[i])
        if (!push_token(s, s->sym[i]))
            return mp_fail(err, MP_ERR_NOMEM, "tokenizer: out of memory");
    return MP_OK;
}

/* ---- SentencePiece ("llama") encoding ----
 * The text's characters are the first symbols; the adjacent pair whose concatenation is a token of
 * the highest score (the leftmost of equal ones) merges, again and again; each symbol left is its
 * token, or, when its text is no token (a character outside the vocabulary), its bytes' <0xXX>
 * tokens (unk where one is missing). Spaces are U+2581, as the vocabulary spells them. */

typedef struct spm_item {
    float score;
    int32_t left, size; /* the pair (left, next[left]) and its bytes when pushed */
} spm_item;

typedef struct spm_state {
    const mp_tokenizer *t;
    const char *buf;
    int32_t *off, *sz, *prev, *next;
    spm_item *heap;
    size_t n_heap;
} spm_state;

static bool spm_before(spm_item a, spm_item b) /* a pops first */
{
    return a.score > b.score || (a.score == b.score && a.left < b.left);
}

DEFINE_HEAP(spm_heap_push, spm_pop, spm_state, spm_item, heap, n_heap, spm_before)

static void spm_push(spm_state *s, int32_t l)
{
    if (l < 0 || s->next[l] < 0)
        return;
    const int32_t r = s->next[l], size = s->sz[l] + s->sz[r];
    const int32_t id = find_text(s->t, s->buf + s->off[l], (size_t)size);
    if (id < 0)
        return;
    spm_heap_push(s, (spm_item){s->t->scores[id], l, size});
}

static mp_status encode_spm(enc_state *e, const char *text, size_t len, bool space_first, mp_error *err)
{
    const mp_tokenizer *t = e->t;
    if (len > INT32_MAX / 4)
        return mp_fail(err, MP_ERR_LIMIT, "tokenizer: a text fragment of %zu bytes, at most %d", len, INT32_MAX / 4);
    if (len == 0) /* an empty fragment (an empty text, two special tokens side by side): no space either */
        return MP_OK;
    const size_t cap = 3 * (len + 1); /* every byte a space at most, and the first one */
    char *buf = malloc(cap);
    spm_state s = {.t = t, .buf = buf};
    s.off = malloc(cap * sizeof *s.off), s.sz = malloc(cap * sizeof *s.sz);
    s.prev = malloc(cap * sizeof *s.prev), s.next = malloc(cap * sizeof *s.next);
    s.heap = malloc(2 * cap * sizeof *s.heap); /* n - 1 pairs at start, 2 more a merge */
    mp_status st = MP_OK;
    if (!buf || !s.off || !s.sz || !s.prev || !s.next || !s.heap) {
        st = mp_fail(err, MP_ERR_NOMEM, "tokenizer: out of memory");
        goto done;
    }
    size_t bl = 0;
    if (space_first) {
        memcpy(buf, "\xE2\x96\x81", 3);
        bl = 3;
    }
    for (size_t i = 0; i < len; i++) {
        if (text[i] == ' ') {
            memcpy(buf + bl, "\xE2\x96\x81", 3);
            bl += 3;
        } else {
            buf[bl++] = text[i];
        }
    }
    int32_t n = 0; /* one symbol a character (the text is valid UTF-8) */
    for (size_t i = 0; i < bl; n++) {
        size_t k;
        (void)mp_utf8_next((const uint8_t *)buf + i, bl - i, &k);
        s.off[n] = (int32_t)i;
        s.sz[n] = (int32_t)k;
        s.prev[n] = n - 1;
        s.next[n] = -1;
        if (n > 0)
            s.next[n - 1] = n;
        i += k;
    }
    for (int32_t i = 0; i + 1 < n; i++)
        spm_push(&s, i);
    while (s.n_heap) {
        const spm_item it = spm_pop(&s);
        const int32_t l = it.left, r = s.next[l];
        if (r < 0 || s.sz[l] == 0 || s.sz[r] == 0 || s.sz[l] + s.sz[r] != it.size)
            continue; /* stale: a symbol of the pair changed since the push */
        s.sz[l] += s.sz[r];
        s.sz[r] = 0;
        s.next[l] = s.next[r];
        if (s.next[l] >= 0)
            s.prev[s.next[l]] = l;
        spm_push(&s, s.prev[l]);
        spm_push(&s, l);
    }
    for (int32_t i = n ? 0 : -1; i >= 0 && st == MP_OK; i = s.next[i]) {
        const int32_t id = find_text(t, buf + s.off[i], (size_t)s.sz[i]);
        if (id >= 0) {
            if (!push_token(e, id))
                st = mp_fail(err, MP_ERR_NOMEM, "tokenizer: out of memory");
            continue;
        }
        for (int32_t b = 0; b < s.sz[i] && st == MP_OK; b++) { /* byte fallback */
            const int32_t bt = t->byte_token[(unsigned char)buf[s.off[i] + b]];
            if (!push_token(e, bt >= 0 ? bt : t->unk))
                st = mp_fail(err, MP_ERR_NOMEM, "tokenizer: out of memory");
        }
    }
done:
    free(buf);
    free(s.off);
    free(s.sz);
    free(s.prev);
    free(s.next);
    free(s.heap);
    return st;
}

/* Longest special token starting at text[pos], or -1; control tokens only with parse_special. */
static int32_t special_at(const mp_tokenizer *t, const char *text, size_t len, size_t pos,
                          bool parse_special, size_t *match_len)
{
    unsigned char b = (unsigned char)text[pos];
    for (uint32_t k = t->special_at[b]; k < t->special_at[b + 1]; k++) {
        if (!parse_special && t->types[t->special[k]] != MP_TOK_TYPE_USER_DEFINED)
            continue;
        size_t n;
        const char *s = text_of(t, t->special[k], &n);
        if (n <= len - pos && memcmp(text + pos, s, n) == 0) {
            *match_len = n;
            return t->special[k];
        }
    }
    return -1;
}

mp_status mp_tokenizer_encode(const mp_tokenizer *t, const char *text, size_t len,
                              bool parse_special, int32_t **tokens, size_t *n_tokens,
                              mp_error *err)
{
    *tokens = NULL;
    *n_tokens = 0;
    if (!text && len)
        return mp_fail(err, MP_ERR_ARG, "tokenizer: NULL text of %zu bytes", len);
    size_t bad = len ? mp_utf8_invalid_at((const uint8_t *)text, len) : 0;
    if (bad < len)
        return mp_fail(err, MP_ERR_ARG,
                       "text: byte offset %zu: invalid UTF-8 (byte 0x%02x), expected valid UTF-8",
                       bad, (unsigned char)text[bad]);
    enc_state s = {.t = t};
    mp_status st = MP_OK;
    if (t->add_bos && !push_token(&s, t->bos))
        st = mp_fail(err, MP_ERR_NOMEM, "tokenizer: out of memory");
    size_t seg = 0; /* start of the text not yet encoded */
    bool special_before = false;
    bool scan = parse_special ? t->special_at[256] > 0 : t->n_user_defined > 0;
    for (size_t pos = 0; st == MP_OK && pos <= len;) {
        size_t mlen = 0;
        int32_t id = -1;
        if (pos < len && scan)
            id = special_at(t, text, len, pos, parse_special, &mlen);
        if (id < 0 && pos < len) {
            pos++;
            continue;
        }
        if (t->spm) /* a space before the text's first fragment and after each special token */
            st = encode_spm(&s, text + seg, pos - seg, t->add_space_prefix && (seg == 0 || special_before), err);
        else if (pos > seg)
            st = mp_pretok_split(t->pretok, text + seg, pos - seg, encode_piece, &s, err);
        special_before = id >= 0;
        if (st == MP_OK && id >= 0 && !push_token(&s, id))
            st = mp_fail(err, MP_ERR_NOMEM, "tokenizer: out of memory");
        if (id < 0)
            break; /* pos == len: the last segment is done */
        pos += mlen;
        seg = pos;
    }
    free(s.sym);
    free(s.prev);
    free(s.next);
    free(s.heap);
    if (st != MP_OK) {
        free(s.out);
        return st;
    }
    if (!s.out && !(s.out = malloc(sizeof *s.out))) /* a valid pointer even for no tokens */
        return mp_fail(err, MP_ERR_NOMEM, "tokenizer: out of memory");
    *tokens = s.out;
    *n_tokens = s.n_out;
    return MP_OK;
}
