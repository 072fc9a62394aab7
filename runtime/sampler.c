/* runtime/sampler.c — token sampling (see sampler.h).
 *
 * Greedy: argmax, ties to the lower id. Otherwise: candidates = all ids, or the top_k largest
 * logits; probabilities = softmax(logit / temperature) over the candidates; top-p keeps the
 * smallest prefix of the candidates, sorted by probability (ties to the lower id), whose mass
 * reaches top_p; one uniform draw picks from what is kept.
 *
 * PRNG: xoshiro256** (Blackman & Vigna, 2018), its 256-bit state seeded by four outputs of
 * splitmix64 from the user's seed, as the xoshiro authors recommend. Same seed, same logits,
 * same token sequence, on every platform (integer-only generator; doubles from 53 bits).
 */
#include "runtime/sampler.h"

#include <math.h>
#include <stdbool.h>
#include <stdlib.h>

#include "kernels/ops.h"

typedef struct cand {
    float v;   /* logit, then probability */
    int32_t id;
} cand;

struct mp_sampler {
    mp_sampler_params p;
    int64_t n_vocab;
    uint64_t rng[4];
    cand *c; /* (n_vocab) */
};

static uint64_t splitmix64(uint64_t *x)
{
    uint64_t z = (*x += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

static uint64_t rotl(uint64_t x, int k)
{
    return (x << k) | (x >> (64 - k));
}

static uint64_t xoshiro_next(uint64_t s[4])
{
    const uint64_t result = rotl(s[1] * 5, 7) * 9;
    const uint64_t t = s[1] << 17;
    s[2] ^= s[0];
    s[3] ^= s[1];
    s[1] ^= s[2];
    s[0] ^= s[3];
    s[2] ^= t;
    s[3] = rotl(s[3], 45);
    return result;
}

/* uniform in [0, 1) */
static double uniform01(uint64_t s[4])
{
    return (double)(xoshiro_next(s) >> 11) * (1.0 / 9007199254740992.0);
}

mp_sampler *mp_sampler_new(const mp_sampler_params *p, int64_t n_vocab)
{
    if (n_vocab < 1)
        return NULL;
    mp_sampler *s = calloc(1, sizeof *s);
    if (!s)
        return NULL;
    s->c = malloc((size_t)n_vocab * sizeof *s->c);
    if (!s->c) {
        free(s);
        return NULL;
    }
    s->p = *p;
    s->n_vocab = n_vocab;
    uint64_t x = p->seed;
    for (int i = 0; i < 4; i++)
        s->rng[i] = splitmix64(&x);
    return s;
}

void mp_sampler_free(mp_sampler *s)
{
    if (!s)
        return;
    free(s->c);
    free(s);
}

/* descending value, ties to the lower id: a total order, so qsort's result is unique */
static int cand_cmp(const void *a, const void *b)
{
    const cand *x = a, *y = b;
    if (x->v != y->v)
        return x->v > y->v ? -1 : 1;
    return (x->id > y->id) - (x->id < y->id);
}

/* Move the k best candidates (by cand_cmp) to the front, sorted. O(n log k) with a min-heap of
 * the best k at the front (the root is the worst kept). */
static void select_top_k(cand *c, int64_t n, int64_t k)
{
#define WORSE(a, b) (cand_cmp(&(a), &(b)) > 0)
    for (int64_t i = k / 2 - 1; i >= 0; i--) {
        for (int64_t j = i;;) { /* sift down: the root is the worst */
            int64_t w = j, l = 2 * j + 1, r = l + 1;
            if (l < k && WORSE(c[l], c[w])) w = l;
            if (r < k && WORSE(c[r], c[w])) w = r;
            if (w == j) break;
            cand t = c[j]; c[j] = c[w]; c[w] = t;
            j = w;
        }
    }
    for (int64_t i = k; i < n; i++) {
        if (!WORSE(c[0], c[i]))
            continue;
        c[0] = c[i];
        for (int64_t j = 0;;) {
            int64_t w = j, l = 2 * j + 1, r = l + 1;
            if (l < k && WORSE(c[l], c[w])) w = l;
            if (r < k && WORSE(c[r], c[w])) w = r;
            if (w == j) break;
            cand t = c[j]; c[j] = c[w]; c[w] = t;
            j = w;
        }
    }
#undef WORSE
    qsort(c, (size_t)k, sizeof *c, cand_cmp);
}

int32_t mp_sampler_sample(mp_sampler *s, float *logits)
{
    const mp_sampler_params *p = &s->p;
    if (!(p->temperature > 0.0f))
        return (int32_t)mp_argmax(logits, s->n_vocab);

    int64_t n = s->n_vocab;
    cand *c = s->c;
    for (int64_t i = 0; i < n; i++)
        c[i] = (cand){logits[i], (int32_t)i};
    bool sorted = false;
    if (p->top_k > 0 && p->top_k < n) {
        select_top_k(c, n, p->top_k);
        n = p->top_k;
        sorted = true;
    }
    /* softmax(logit / T) in float64: tiny temperatures stay finite after max subtraction */
    double max = -INFINITY;
    for (int64_t i = 0; i < n; i++)
        if (c[i].v > max)
            max = c[i].v;
    double sum = 0.0;
    for (int64_t i = 0; i < n; i++) {
        const double e = exp(((double)c[i].v - max) / (double)p->temperature);
        c[i].v = (float)e;
        sum += e;
    }
    for (int64_t i = 0; i < n; i++)
        c[i].v = (float)((double)c[i].v / sum);
    if (p->top_p < 1.0f) {
        if (!sorted)
            qsort(c, (size_t)n, sizeof *c, cand_cmp);
        double mass = 0.0;
        int64_t keep = 0;
        while (keep < n) {
            mass += c[keep++].v;
            if (mass >= (double)p->top_p)
                break;
        }
        n = keep;
    }
    double total = 0.0;
    for (int64_t i = 0; i < n; i++)
        total += c[i].v;
    const double u = uniform01(s->rng) * total;
    double acc = 0.0;
    for (int64_t i = 0; i < n; i++) {
        acc += c[i].v;
        if (u < acc)
            return c[i].id;
    }
    return c[n - 1].id; /* u rounded up to the total: the last kept candidate */
}
