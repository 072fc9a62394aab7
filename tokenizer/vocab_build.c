/* tokenizer/vocab_build.c — learn a byte-level BPE vocabulary from a corpus (for `moeplan mkmodel`).
 *
 * Layout of the vocabulary it returns (n_vocab tokens):
 *   ids 0..255                    the byte tokens, id = byte value, spelled in the byte-level
 *                                 alphabet, type NORMAL (as GPT-2-style vocabularies store them);
 *   ids 256..256+L-1              the L learned tokens, in merge order, type NORMAL;
 *   next 3 ids                    <|endoftext|> (bos), <|im_start|>, <|im_end|> (eos and eot),
 *                                 type CONTROL;
 *   the rest                      "[PAD<id>]", type UNUSED, up to n_vocab.
 * Training: the corpus is cut into words by the pre-tokenizer `pre`; each step merges the most
 * frequent adjacent pair of tokens (ties: the smallest (left id, right id)), so the result depends
 * on nothing but the corpus, n_vocab and pre. It stops at MP_VOCAB_MAX_MERGES merges, when the
 * vocabulary is full, or when no pair occurs twice. A merge whose text already is a token (two
 * pairs can spell the same text) reuses that token instead of adding a second copy.
 * Cost: O(corpus) to count words, then per merge a scan of the unique words' symbols plus
 * re-counting the words that contain the pair.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tokenizer/bytelevel.h"
#include "tokenizer/pretokenize.h"
#include "tokenizer/tokenizer.h"

/* Why 4096: a tiny test model needs realistic token lengths (common words become single tokens),
 * not 150k merges; on the built-in ~30 KB corpus few pairs beyond this occur twice anyway, and
 * keeping the count bounded keeps mkmodel fast for any n_vocab (the rest is padding). */
#define MP_VOCAB_MAX_MERGES 4096
#define MP_VOCAB_MIN_PAIR_COUNT 2
#define MP_VOCAB_MAX_N ((int64_t)1 << 24)

static const char *const k_special[] = {"<|endoftext|>", "<|im_start|>", "<|im_end|>"};
#define N_SPECIAL 3

typedef struct word {
    uint32_t off;   /* symbols are syms[off .. off + len) */
    uint32_t len;   /* shrinks as merges apply */
    int64_t count;  /* occurrences in the corpus */
    const char *text; /* into the corpus, for the word table */
    uint32_t text_len;
} word;

typedef struct pair_ent {
    int64_t count;
    uint64_t key; /* left << 32 | right */
} pair_ent;

typedef struct trainer {
    /* words */
    word *words;
    uint32_t n_words, words_cap;
    uint32_t *word_slots; /* (word_slot_cap) open addressing text -> word index, UINT32_MAX free */
    uint64_t word_slot_cap;
    int32_t *syms; /* (total word bytes) token ids */
    uint64_t n_syms;
    /* pair counts */
    uint64_t *pair_keys; /* (pair_cap) UINT64_MAX free */
    int64_t *pair_counts;
    uint64_t pair_cap, n_pairs;
    pair_ent *heap; /* max-heap on (count, -key); entries go stale, checked against pair_counts */
    uint64_t n_heap, heap_cap;
    /* tokens */
    char **tokens;
    uint64_t n_tokens, tokens_cap;
    uint32_t *tok_slots; /* (tok_slot_cap) text -> id */
    uint64_t tok_slot_cap;
    bool oom;
} trainer;

static uint64_t hash_bytes(const char *s, size_t n)
{
    uint64_t h = 1469598103934665603ull;
    for (size_t i = 0; i < n; i++) {
        h ^= (unsigned char)s[i];
        h *= 1099511628211ull;
    }
    return h ^ (h >> 29);
}

static uint64_t hash_key(uint64_t k)
{
    k ^= k >> 33;
    k *= 0xff51afd7ed558ccdull;
    return k ^ (k >> 33);
}

/* ---- word table ---- */

static bool word_table_grow(trainer *tr)
{
    uint64_t cap = tr->word_slot_cap ? tr->word_slot_cap * 2 : 1024;
    uint32_t *slots = malloc(cap * sizeof *slots);
    if (!slots)
        return false;
    memset(slots, 0xff, cap * sizeof *slots);
    for (uint32_t w = 0; w < tr->n_words; w++) {
        uint64_t i = hash_bytes(tr->words[w].text, tr->words[w].text_len) & (cap - 1);
        while (slots[i] != UINT32_MAX)
            i = (i + 1) & (cap - 1);
        slots[i] = w;
    }
    free(tr->word_slots);
    tr->word_slots = slots;
    tr->word_slot_cap = cap;
    return true;
}

static mp_status add_word(const char *piece, size_t len, void *ctx, mp_error *err)
{
    trainer *tr = ctx;
    if (len > UINT32_MAX || tr->n_words == UINT32_MAX - 1)
        return mp_fail(err, MP_ERR_LIMIT, "vocabulary corpus: too large");
    if (2 * ((uint64_t)tr->n_words + 1) > tr->word_slot_cap && !word_table_grow(tr))
        return mp_fail(err, MP_ERR_NOMEM, "vocabulary corpus: out of memory");
    uint64_t mask = tr->word_slot_cap - 1;
    uint64_t i = hash_bytes(piece, len) & mask;
    for (; tr->word_slots[i] != UINT32_MAX; i = (i + 1) & mask) {
        word *w = &tr->words[tr->word_slots[i]];
        if (w->text_len == len && memcmp(w->text, piece, len) == 0) {
            w->count++;
            return MP_OK;
        }
    }
    if (tr->n_words == tr->words_cap) {
        uint32_t cap = tr->words_cap ? tr->words_cap * 2 : 1024;
        word *p = realloc(tr->words, cap * sizeof *p);
        if (!p)
            return mp_fail(err, MP_ERR_NOMEM, "vocabulary corpus: out of memory");
        tr->words = p;
        tr->words_cap = cap;
    }
    tr->words[tr->n_words] = (word){.count = 1, .text = piece, .text_len = (uint32_t)len};
    tr->word_slots[i] = tr->n_words++;
    return MP_OK;
}

/* ---- pair counts and the heap ---- */

static bool heap_above(pair_ent a, pair_ent b)
{
    return a.count > b.count || (a.count == b.count && a.key < b.key);
}

static void heap_push(trainer *tr, pair_ent e)
{
    if (tr->n_heap == tr->heap_cap) {
        uint64_t cap = tr->heap_cap ? tr->heap_cap * 2 : 4096;
        pair_ent *p = realloc(tr->heap, cap * sizeof *p);
        if (!p) {
            tr->oom = true;
            return;
        }
        tr->heap = p;
        tr->heap_cap = cap;
    }
    uint64_t i = tr->n_heap++;
    while (i > 0) {
        uint64_t parent = (i - 1) / 2;
        if (!heap_above(e, tr->heap[parent]))
            break;
        tr->heap[i] = tr->heap[parent];
        i = parent;
    }
    tr->heap[i] = e;
}

static pair_ent heap_pop(trainer *tr)
{
    pair_ent top = tr->heap[0], last = tr->heap[--tr->n_heap];
    uint64_t i = 0, n = tr->n_heap;
    for (;;) {
        uint64_t c = 2 * i + 1;
        if (c >= n)
            break;
        if (c + 1 < n && heap_above(tr->heap[c + 1], tr->heap[c]))
            c++;
        if (!heap_above(tr->heap[c], last))
            break;
        tr->heap[i] = tr->heap[c];
        i = c;
    }
    if (n)
        tr->heap[i] = last;
    return top;
}

static int64_t *pair_slot(trainer *tr, uint64_t key)
{
    if (2 * (tr->n_pairs + 1) > tr->pair_cap) {
        uint64_t cap = tr->pair_cap ? tr->pair_cap * 2 : 4096;
        uint64_t *keys = malloc(cap * sizeof *keys);
        int64_t *counts = malloc(cap * sizeof *counts);
        if (!keys || !counts) {
            free(keys);
            free(counts);
            tr->oom = true;
            return NULL;
        }
        memset(keys, 0xff, cap * sizeof *keys);
        for (uint64_t j = 0; j < tr->pair_cap; j++) {
            if (tr->pair_keys[j] == UINT64_MAX)
                continue;
            uint64_t i = hash_key(tr->pair_keys[j]) & (cap - 1);
            while (keys[i] != UINT64_MAX)
                i = (i + 1) & (cap - 1);
            keys[i] = tr->pair_keys[j];
            counts[i] = tr->pair_counts[j];
        }
        free(tr->pair_keys);
        free(tr->pair_counts);
        tr->pair_keys = keys;
        tr->pair_counts = counts;
        tr->pair_cap = cap;
    }
    uint64_t mask = tr->pair_cap - 1, i = hash_key(key) & mask;
    for (; tr->pair_keys[i] != UINT64_MAX; i = (i + 1) & mask)
        if (tr->pair_keys[i] == key)
            return &tr->pair_counts[i];
    tr->pair_keys[i] = key;
    tr->pair_counts[i] = 0;
    tr->n_pairs++;
    return &tr->pair_counts[i];
}

static void pair_add(trainer *tr, int32_t left, int32_t right, int64_t delta)
{
    uint64_t key = (uint64_t)(uint32_t)left << 32 | (uint32_t)right;
    int64_t *c = pair_slot(tr, key);
    if (!c)
        return;
    *c += delta;
    if (*c > 0)
        heap_push(tr, (pair_ent){*c, key});
}

static void word_pairs(trainer *tr, const word *w, int64_t sign)
{
    const int32_t *s = tr->syms + w->off;
    for (uint32_t i = 0; i + 1 < w->len; i++)
        pair_add(tr, s[i], s[i + 1], sign * w->count);
}

/* ---- tokens ---- */

static bool tok_table_insert(trainer *tr, uint32_t id)
{
    uint64_t mask = tr->tok_slot_cap - 1;
    const char *s = tr->tokens[id];
    uint64_t i = hash_bytes(s, strlen(s)) & mask;
    while (tr->tok_slots[i] != UINT32_MAX)
        i = (i + 1) & mask;
    tr->tok_slots[i] = id;
    return true;
}

static int64_t tok_find(const trainer *tr, const char *s)
{
    uint64_t mask = tr->tok_slot_cap - 1;
    for (uint64_t i = hash_bytes(s, strlen(s)) & mask; tr->tok_slots[i] != UINT32_MAX;
         i = (i + 1) & mask)
        if (strcmp(tr->tokens[tr->tok_slots[i]], s) == 0)
            return tr->tok_slots[i];
    return -1;
}

static char *concat(const char *a, const char *sep, const char *b)
{
    size_t la = strlen(a), ls = strlen(sep), lb = strlen(b);
    char *s = malloc(la + ls + lb + 1);
    if (s) {
        memcpy(s, a, la);
        memcpy(s + la, sep, ls);
        memcpy(s + la + ls, b, lb + 1);
    }
    return s;
}

static void trainer_free(trainer *tr)
{
    free(tr->words);
    free(tr->word_slots);
    free(tr->syms);
    free(tr->pair_keys);
    free(tr->pair_counts);
    free(tr->heap);
    free(tr->tok_slots);
}

void mp_vocab_free(mp_vocab *v)
{
    if (!v)
        return;
    if (v->tokens)
        for (int64_t i = 0; i < v->n_vocab; i++)
            free(v->tokens[i]);
    if (v->merges)
        for (int64_t i = 0; i < v->n_merges; i++)
            free(v->merges[i]);
    free(v->tokens);
    free(v->types);
    free(v->merges);
    memset(v, 0, sizeof *v);
}

/* Learn merges; tokens[0 .. n_tokens) and merges are filled in v. */
static mp_status learn(trainer *tr, mp_vocab *v, int64_t max_learned, mp_error *err)
{
    for (uint32_t w = 0; w < tr->n_words; w++)
        word_pairs(tr, &tr->words[w], +1);
    while (!tr->oom && v->n_merges < MP_VOCAB_MAX_MERGES && tr->n_heap) {
        pair_ent best = heap_pop(tr);
        int64_t *cur = pair_slot(tr, best.key);
        if (!cur || *cur != best.count)
            continue; /* stale entry */
        if (best.count < MP_VOCAB_MIN_PAIR_COUNT)
            break;
        int32_t left = (int32_t)(best.key >> 32), right = (int32_t)(uint32_t)best.key;
        char *text = concat(v->tokens[left], "", v->tokens[right]);
        char *merge = concat(v->tokens[left], " ", v->tokens[right]);
        if (!text || !merge) {
            free(text);
            free(merge);
            return mp_fail(err, MP_ERR_NOMEM, "vocabulary: out of memory");
        }
        int64_t result = tok_find(tr, text);
        if (result < 0) {
            if ((int64_t)tr->n_tokens - 256 >= max_learned) {
                free(text);
                free(merge);
                break; /* the vocabulary is full */
            }
            result = (int64_t)tr->n_tokens++;
            v->tokens[result] = text;
            tok_table_insert(tr, (uint32_t)result);
        } else {
            free(text);
        }
        v->merges[v->n_merges++] = merge;
        /* Re-count only the words that contain the pair. */
        for (uint32_t wi = 0; wi < tr->n_words; wi++) {
            word *w = &tr->words[wi];
            int32_t *s = tr->syms + w->off;
            bool has = false;
            for (uint32_t i = 0; i + 1 < w->len && !has; i++)
                has = s[i] == left && s[i + 1] == right;
            if (!has)
                continue;
            word_pairs(tr, w, -1);
            uint32_t o = 0;
            for (uint32_t i = 0; i < w->len; i++) {
                if (i + 1 < w->len && s[i] == left && s[i + 1] == right) {
                    s[o++] = (int32_t)result;
                    i++;
                } else {
                    s[o++] = s[i];
                }
            }
            w->len = o;
            word_pairs(tr, w, +1);
        }
    }
    if (tr->oom)
        return mp_fail(err, MP_ERR_NOMEM, "vocabulary: out of memory");
    return MP_OK;
}

mp_status mp_vocab_build(const char *corpus, size_t corpus_len, int64_t n_vocab, const char *pre,
                         mp_vocab *out, mp_error *err)
{
    memset(out, 0, sizeof *out);
    out->bos_id = out->eos_id = out->eot_id = -1;
    if (n_vocab < 256 + N_SPECIAL || n_vocab > MP_VOCAB_MAX_N)
        return mp_fail(err, MP_ERR_ARG, "vocabulary: n_vocab %lld, expected %d..%lld",
                       (long long)n_vocab, 256 + N_SPECIAL, (long long)MP_VOCAB_MAX_N);
    if (!corpus && corpus_len)
        return mp_fail(err, MP_ERR_ARG, "vocabulary: NULL corpus");
    size_t bad = corpus_len ? mp_utf8_invalid_at((const uint8_t *)corpus, corpus_len) : 0;
    if (bad < corpus_len)
        return mp_fail(err, MP_ERR_ARG,
                       "vocabulary corpus: byte offset %zu: invalid UTF-8 (byte 0x%02x), "
                       "expected valid UTF-8",
                       bad, (unsigned char)corpus[bad]);
    mp_pretok *pt;
    mp_status st = mp_pretok_new(pre, &pt, err);
    if (st != MP_OK)
        return st;
    trainer tr = {0};
    st = mp_pretok_split(pt, corpus, corpus_len, add_word, &tr, err);
    mp_pretok_free(pt);
    if (st != MP_OK)
        goto fail;

    uint64_t total = 0;
    for (uint32_t w = 0; w < tr.n_words; w++)
        total += tr.words[w].text_len;
    tr.syms = malloc((total ? total : 1) * sizeof *tr.syms);
    out->tokens = calloc((size_t)n_vocab, sizeof *out->tokens);
    out->types = malloc((size_t)n_vocab * sizeof *out->types);
    out->merges = calloc(MP_VOCAB_MAX_MERGES, sizeof *out->merges);
    tr.tok_slot_cap = 1024;
    while (tr.tok_slot_cap < 2 * (uint64_t)(256 + MP_VOCAB_MAX_MERGES + N_SPECIAL))
        tr.tok_slot_cap *= 2;
    tr.tok_slots = malloc(tr.tok_slot_cap * sizeof *tr.tok_slots);
    if (!tr.syms || !out->tokens || !out->types || !out->merges || !tr.tok_slots) {
        st = mp_fail(err, MP_ERR_NOMEM, "vocabulary: out of memory");
        goto fail;
    }
    out->n_vocab = n_vocab; /* from here mp_vocab_free frees what is filled (NULLs are fine) */
    memset(tr.tok_slots, 0xff, tr.tok_slot_cap * sizeof *tr.tok_slots);
    uint64_t off = 0;
    for (uint32_t w = 0; w < tr.n_words; w++) {
        word *wd = &tr.words[w];
        wd->off = (uint32_t)off;
        wd->len = wd->text_len;
        for (uint32_t i = 0; i < wd->text_len; i++)
            tr.syms[off + i] = (unsigned char)wd->text[i];
        off += wd->text_len;
    }
    tr.tokens = out->tokens;
    for (int b = 0; b < 256; b++) {
        char spell[3] = {0};
        uint8_t byte = (uint8_t)b;
        mp_bytelevel_encode(&byte, 1, spell);
        if (!(out->tokens[b] = strdup(spell))) {
            st = mp_fail(err, MP_ERR_NOMEM, "vocabulary: out of memory");
            goto fail;
        }
        tok_table_insert(&tr, (uint32_t)b);
    }
    tr.n_tokens = 256;
    if ((st = learn(&tr, out, n_vocab - 256 - N_SPECIAL, err)) != MP_OK)
        goto fail;

    int64_t id = (int64_t)tr.n_tokens;
    for (int64_t i = 0; i < id; i++)
        out->types[i] = MP_TOK_TYPE_NORMAL;
    for (int k = 0; k < N_SPECIAL; k++, id++) {
        /* Pre-tokenization cuts "<|", letters and "|>" apart, so no learned token can spell a
         * special text; checked all the same because a duplicate would shadow the special id. */
        if (tok_find(&tr, k_special[k]) >= 0) {
            st = mp_fail(err, MP_ERR_INTERNAL, "vocabulary: learned token spells '%s'",
                         k_special[k]);
            goto fail;
        }
        if (!(out->tokens[id] = strdup(k_special[k]))) {
            st = mp_fail(err, MP_ERR_NOMEM, "vocabulary: out of memory");
            goto fail;
        }
        out->types[id] = MP_TOK_TYPE_CONTROL;
    }
    out->bos_id = (int32_t)(tr.n_tokens + 0);
    out->eos_id = out->eot_id = (int32_t)(tr.n_tokens + 2);
    for (; id < n_vocab; id++) {
        char pad[32];
        snprintf(pad, sizeof pad, "[PAD%lld]", (long long)id);
        if (!(out->tokens[id] = strdup(pad))) {
            st = mp_fail(err, MP_ERR_NOMEM, "vocabulary: out of memory");
            goto fail;
        }
        out->types[id] = MP_TOK_TYPE_UNUSED;
    }
    trainer_free(&tr);
    return MP_OK;
fail:
    trainer_free(&tr);
    mp_vocab_free(out);
    out->bos_id = out->eos_id = out->eot_id = -1;
    return st;
}
