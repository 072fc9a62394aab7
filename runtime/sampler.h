/* runtime/sampler.h — token sampling: greedy, temperature, top-k, top-p, seeded.
 * Deterministic for a given seed and logits. temperature <= 0 means greedy (argmax, ties to the
 * lower id). Order of filters: top-k, then temperature softmax, then top-p. */
#ifndef MP_RUNTIME_SAMPLER_H
#define MP_RUNTIME_SAMPLER_H

#include <stdint.h>

typedef struct mp_sampler_params {
    float temperature; /* <= 0: greedy */
    int32_t top_k;     /* <= 0: off */
    float top_p;       /* >= 1: off */
    uint64_t seed;
} mp_sampler_params;

typedef struct mp_sampler mp_sampler;

mp_sampler *mp_sampler_new(const mp_sampler_params *p, int64_t n_vocab);
void mp_sampler_free(mp_sampler *s);
/* logits are modified (scratch). */
int32_t mp_sampler_sample(mp_sampler *s, float *logits);

#endif
