/* base/bits.h — sets of small integers as bits, 64 to a uint64_t word, bit i in word i / 64 at
 * position i % 64: the expert sets of a layer (a placement's residents, the GPU executor's live
 * experts and per-step mask, the CPU experts' resident mask, a placement file's layer). */
#ifndef MP_BASE_BITS_H
#define MP_BASE_BITS_H

#include <stdbool.h>
#include <stdint.h>

static inline bool mp_bit_get(const uint64_t *words, int64_t i)
{
    return (words[i >> 6] >> (i & 63)) & 1u;
}

static inline void mp_bit_put(uint64_t *words, int64_t i, bool on)
{
    const uint64_t b = (uint64_t)1 << (i & 63);
    words[i >> 6] = on ? words[i >> 6] | b : words[i >> 6] & ~b;
}

#endif
