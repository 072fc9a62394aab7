/* mkmodel/mkmodel_blocks.h — random quantized rows drawn directly in the quantized domain
 * (mkmodel's fast path for expert tensors; see mkmodel_blocks.c for why and how). */
#ifndef MP_MKMODEL_MKMODEL_BLOCKS_H
#define MP_MKMODEL_MKMODEL_BLOCKS_H

#include <stdbool.h>
#include <stdint.h>

/* Types the direct generator writes: every quantized weight type (not F32, F16, BF16). */
bool mp_mk_blocks_supported(int type);

/* One row of n elements of `type` into dst (mp_type_row_bytes(type, n) bytes): elements with mean
 * about 0 and standard deviation about std; element 0 exactly 0 if zero_first (IQ4_NL, which has no
 * zero level: its whole first block); every element
 * exactly 0 if zero_row. next(rng_state) supplies 64 random bits per call. */
void mp_mk_random_row(int type, int64_t n, float std, bool zero_first, bool zero_row,
                      uint64_t (*next)(void *), void *rng_state, void *dst);

#endif
