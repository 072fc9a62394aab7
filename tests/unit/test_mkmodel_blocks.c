/* tests/unit/test_mkmodel_blocks.c — mkmodel's directly drawn quantized rows, read back through the
 * kernels' scalar dequantizer: the requested spread, a mean near zero, and exact zeros where the
 * bias channel needs them. Fresh random seeds, printed on failure. */
#include <criterion/criterion.h>
#include <math.h>
#include <stdlib.h>
#include <time.h>

#include "kernels/quant.h"
#include "mkmodel/mkmodel_blocks.h"

static uint64_t next_bits(void *state)
{
    /* splitmix64: enough for a test's stream */
    uint64_t *s = state, z = (*s += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

Test(mkmodel_blocks, rows_have_the_requested_spread_and_exact_zeros)
{
    const int types[] = {MP_TYPE_Q2_K, MP_TYPE_Q3_K, MP_TYPE_Q4_K,   MP_TYPE_Q5_K,  MP_TYPE_Q6_K, MP_TYPE_Q8_0,
                         MP_TYPE_Q4_0, MP_TYPE_Q4_1, MP_TYPE_Q5_0, MP_TYPE_Q5_1, MP_TYPE_IQ4_NL, MP_TYPE_MXFP4, MP_TYPE_IQ4_XS};
    const uint64_t seed0 = (uint64_t)time(NULL);
    const int64_t n = 2048, rows = 64;
    float *x = malloc(sizeof(float) * n);
    for (size_t t = 0; t < sizeof types / sizeof types[0]; t++) {
        const int type = types[t];
        cr_assert(mp_mk_blocks_supported(type));
        const float std = 0.02f + 0.1f * (float)(seed0 % 7);
        void *row = malloc(mp_type_row_bytes(type, n));
        uint64_t state = seed0 + (uint64_t)t;
        double sum = 0, sum2 = 0;
        for (int64_t r = 0; r < rows; r++) {
            mp_mk_random_row(type, n, std, true, false, next_bits, &state, row);
            mp_type_ops_scalar(type)->dequantize_row(row, x, n);
            cr_assert_eq(x[0], 0.0f, "seed %llu, %s row %lld: element 0 is %g, expected exactly 0",
                         (unsigned long long)seed0, mp_type_name(type), (long long)r, x[0]);
            for (int64_t i = 0; i < n; i++) {
                cr_assert(isfinite(x[i]));
                sum += x[i];
                sum2 += (double)x[i] * x[i];
            }
        }
        const double count = (double)(rows * n), mean = sum / count;
        const double sd = sqrt(sum2 / count - mean * mean);
        /* 4-bit formats centre on the code 8 of 0..15, a mean offset of -0.5 step = -0.11 std;
         * IQ4_NL's levels average -5.9 of their 70 spread: -0.09 std */
        cr_assert(fabs(mean) < 0.15 * std, "seed %llu, %s: mean %g for std %g",
                  (unsigned long long)seed0, mp_type_name(type), mean, std);
        cr_assert(fabs(sd - std) < 0.1 * std, "seed %llu, %s: std %g, requested %g",
                  (unsigned long long)seed0, mp_type_name(type), sd, std);
        mp_mk_random_row(type, n, std, false, true, next_bits, &state, row);
        mp_type_ops_scalar(type)->dequantize_row(row, x, n);
        for (int64_t i = 0; i < n; i++)
            cr_assert_eq(x[i], 0.0f, "%s: zero row has %g at %lld", mp_type_name(type), x[i], (long long)i);
        free(row);
    }
    free(x);
}

Test(mkmodel_blocks, float_types_are_not_drawn_directly)
{
    cr_assert(!mp_mk_blocks_supported(MP_TYPE_F32));
    cr_assert(!mp_mk_blocks_supported(MP_TYPE_F16));
    cr_assert(!mp_mk_blocks_supported(MP_TYPE_BF16));
}
