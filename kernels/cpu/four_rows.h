/* kernels/cpu/four_rows.h — what the SIMD dots that take four dots a step share (quant_avx2.c,
 * quant_avx512.c; both built with AVX2 and F16C): four blocks' scale bytes or scales converted at
 * once, and how far ahead a GEMV of four rows at once prefetches. Include it after kernels/cpu/quant_impl.h and the
 * intrinsics (immintrin.h, or the emulated AVX-512 build's SIMDe header). */
#ifndef MP_KERNELS_CPU_FOUR_ROWS_H
#define MP_KERNELS_CPU_FOUR_ROWS_H

#include <stdint.h>
#include <string.h>

/* the f16s at p[i] + off as four floats */
static inline __m128 mp_f16x4(const uint8_t *const p[4], size_t off)
{
    uint16_t h[4];
    for (int i = 0; i < 4; i++)
        memcpy(&h[i], p[i] + off, 2);
    const uint64_t v = (uint64_t)h[0] | (uint64_t)h[1] << 16 | (uint64_t)h[2] << 32 | (uint64_t)h[3] << 48;
    return _mm_cvtph_ps(_mm_cvtsi64_si128((long long)v));
}

/* the bytes at p[i] + off as four int32 lanes */
static inline __m128i mp_u8x4(const uint8_t *const p[4], size_t off)
{
    const uint32_t b4 = (uint32_t)p[0][off] | (uint32_t)p[1][off] << 8 | (uint32_t)p[2][off] << 16 |
                        (uint32_t)p[3][off] << 24;
    return _mm_cvtepu8_epi32(_mm_cvtsi32_si128((int)b4));
}

/* the E8M0 exponents at p[i] + off as four floats, mp_e8m0_half's: 2^(e - 128), subnormal for e < 2 */
static inline __m128 mp_e8m0x4(const uint8_t *const p[4], size_t off)
{
    const __m128i e = mp_u8x4(p, off);
    const __m128i normal = _mm_slli_epi32(_mm_sub_epi32(e, _mm_set1_epi32(1)), 23);
    const __m128i sub = _mm_sllv_epi32(_mm_set1_epi32(0x00200000), e);
    return _mm_castsi128_ps(_mm_blendv_epi8(normal, sub, _mm_cmplt_epi32(e, _mm_set1_epi32(2))));
}

/* A GEMV that reads four rows at once has each row's prefetch ask for that row's bytes of the next
 * group of four (4 row_bytes ahead: one group's time before they are read; the last group's reach
 * past its call, which never faults): one distance ahead in bytes (mp_prefetch_weights') lands in the
 * rows beside. On the H100 machine's host (Emerald Rapids, 16 threads, gpt-oss-20b's 1530-byte MXFP4
 * rows, moe_cpu_stream over 24 layers) 2048 bytes ahead of each row gave 732 / 736 us a call, 6144
 * (one group) 602 / 617. MP_PREFETCH_BYTES=0 (mp_prefetch_distance 0) turns it off as it does every
 * kernel's prefetch. */
static inline size_t mp_four_rows_ahead(size_t row_bytes)
{
    return mp_prefetch_distance ? 4 * row_bytes : 0;
}

#endif
