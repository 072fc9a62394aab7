/* mkmodel/mkmodel_measure.c — count the routes a (generated) model takes on the built-in corpus.
 *
 * This is how mkmodel's router skew is verified and tuned: it runs the real forward pass with a
 * routing hook, not a model of it. The statistic compared with real traces is the share of
 * routes served by the most-used half of each layer's experts.
 */
#include <stdlib.h>
#include <string.h>

#include "runtime/hooks.h"
#include "mkmodel/mkmodel.h"
#include "runtime/model.h"
#include "runtime/session.h"
#include "tokenizer/tokenizer.h"

static void on_routing(void *user, int64_t layer, int64_t n_rows, int64_t top_k,
                       const int32_t *expert_ids, const float *weights)
{
    mp_mk_routes *r = user;
    (void)weights;
    if (layer < 0 || layer >= r->n_layer)
        return;
    int64_t *row = r->counts + layer * r->n_expert;
    for (int64_t i = 0; i < n_rows * top_k; i++)
        if (expert_ids[i] >= 0 && expert_ids[i] < r->n_expert)
            row[expert_ids[i]]++;
}

mp_status mp_mkmodel_measure_routes(const char *path, int64_t n_seq, int64_t seq_len, int n_threads,
                                    mp_mk_routes *out, mp_error *err)
{
    memset(out, 0, sizeof *out);
    if (n_seq < 1 || seq_len < 1)
        return mp_fail(err, MP_ERR_ARG, "measure routes: %lld sequences of %lld tokens: expected "
                       "at least one of one", (long long)n_seq, (long long)seq_len);
    mp_model *m = NULL;
    mp_tokenizer *tok = NULL;
    mp_session *s = NULL;
    int32_t *tokens = NULL;
    size_t n_tokens = 0, corpus_len = 0;
    mp_status st = mp_model_load(path, &m, err);
    if (!st)
        st = mp_tokenizer_load(m->gguf, &tok, err);
    const char *corpus = mp_vocab_default_corpus(&corpus_len);
    if (!st)
        st = mp_tokenizer_encode(tok, corpus, corpus_len, false, &tokens, &n_tokens, err);
    if (!st && (int64_t)n_tokens < n_seq * seq_len)
        st = mp_fail(err, MP_ERR_ARG, "%s: the built-in corpus is %zu tokens with this vocabulary; "
                     "%lld x %lld asked", path, n_tokens, (long long)n_seq, (long long)seq_len);
    if (!st) {
        out->n_layer = m->hp.n_layer;
        out->n_expert = m->hp.n_expert;
        out->top_k = m->hp.n_expert_used;
        out->counts = calloc((size_t)(out->n_layer * out->n_expert), sizeof *out->counts);
        if (!out->counts)
            st = mp_fail(err, MP_ERR_NOMEM, "measure routes: out of memory");
    }
    mp_hooks hooks = {.user = out, .routing = on_routing};
    mp_session_params sp = {.n_ctx = seq_len, .n_threads = n_threads, .hooks = &hooks};
    if (!st)
        st = mp_session_new(m, &sp, &s, err);
    /* Sequences start evenly spread over the corpus, as a batch of unrelated prompts would. */
    int64_t stride = (int64_t)n_tokens / n_seq;
    for (int64_t q = 0; q < n_seq && !st; q++) {
        mp_session_reset(s);
        st = mp_session_eval(s, tokens + q * stride, seq_len, false, NULL, err);
        out->n_tokens += seq_len;
    }
    if (s)
        mp_session_free(s);
    free(tokens);
    if (tok)
        mp_tokenizer_free(tok);
    if (m)
        mp_model_free(m);
    if (st)
        mp_mk_routes_free(out);
    return st;
}

void mp_mk_routes_free(mp_mk_routes *r)
{
    free(r->counts);
    r->counts = NULL;
}

static int cmp_desc(const void *a, const void *b)
{
    int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;
    return (x < y) - (x > y);
}

/* Routes of one layer: (served by the most-used half, all). */
static void layer_split(const mp_mk_routes *r, int64_t layer, int64_t *top, int64_t *all)
{
    int64_t *sorted = malloc((size_t)r->n_expert * sizeof *sorted);
    *top = *all = 0;
    if (!sorted)
        return;
    memcpy(sorted, r->counts + layer * r->n_expert, (size_t)r->n_expert * sizeof *sorted);
    qsort(sorted, (size_t)r->n_expert, sizeof *sorted, cmp_desc);
    for (int64_t e = 0; e < r->n_expert; e++) {
        *all += sorted[e];
        if (e < r->n_expert / 2)
            *top += sorted[e];
    }
    free(sorted);
}

double mp_mk_routes_layer_top_half_share(const mp_mk_routes *r, int64_t layer)
{
    int64_t top, all;
    layer_split(r, layer, &top, &all);
    return all ? (double)top / (double)all : 0.0;
}

double mp_mk_routes_top_half_share(const mp_mk_routes *r)
{
    int64_t top = 0, all = 0;
    for (int64_t l = 0; l < r->n_layer; l++) {
        int64_t t, a;
        layer_split(r, l, &t, &a);
        top += t;
        all += a;
    }
    return all ? (double)top / (double)all : 0.0;
}
