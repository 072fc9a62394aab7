/* tests/unit/simde_avx512.h — the AVX-512 intrinsics for the TEST-ONLY emulated build of
 * kernels/cpu/quant_avx512.c (compiled with -DMP_AVX512_EMULATED by tests/meson.build).
 *
 * SIMDe (Debian's libsimde-dev) implements the Intel intrinsics portably; with
 * SIMDE_ENABLE_NATIVE_ALIASES its implementations answer to the native names (_mm512_..., __m512),
 * so the kernel file compiles unchanged and its logic runs on any x86-64 CPU. The SIMDe release
 * in Debian 12 (0.7.4~rc2) lacks five conversions the kernels use; they are written below,
 * element by element (obviously right is what matters here, not speed), with the f16 widening
 * taken from SIMDe's own F16C emulation rather than from the scalar reference under test.
 * Invariant: nothing in this header is ever part of the production library.
 */
#ifndef MP_TESTS_SIMDE_AVX512_H
#define MP_TESTS_SIMDE_AVX512_H

#define SIMDE_ENABLE_NATIVE_ALIASES
#include <simde/x86/avx512.h>
#include <simde/x86/f16c.h>
#include <stdint.h>

static inline simde__m512 mp_emu_mm512_cvtepi32_ps(simde__m512i a)
{
    int32_t in[16];
    float out[16];
    simde_mm512_storeu_si512(in, a);
    for (int i = 0; i < 16; i++)
        out[i] = (float)in[i];
    return simde_mm512_loadu_ps(out);
}

static inline simde__m512i mp_emu_mm512_cvtepi8_epi32(simde__m128i a)
{
    int8_t in[16];
    int32_t out[16];
    simde_mm_storeu_si128(in, a);
    for (int i = 0; i < 16; i++)
        out[i] = in[i];
    return simde_mm512_loadu_si512(out);
}

static inline simde__m512i mp_emu_mm512_cvtepu8_epi32(simde__m128i a)
{
    uint8_t in[16];
    int32_t out[16];
    simde_mm_storeu_si128(in, a);
    for (int i = 0; i < 16; i++)
        out[i] = in[i];
    return simde_mm512_loadu_si512(out);
}

static inline simde__m512i mp_emu_mm512_cvtepu16_epi32(simde__m256i a)
{
    uint16_t in[16];
    int32_t out[16];
    simde_mm256_storeu_si256(in, a);
    for (int i = 0; i < 16; i++)
        out[i] = in[i];
    return simde_mm512_loadu_si512(out);
}

static inline simde__m512 mp_emu_mm512_cvtph_ps(simde__m256i a)
{
    float out[16];
    simde_mm256_storeu_ps(out, simde_mm256_cvtph_ps(simde_mm256_castsi256_si128(a)));
    simde_mm256_storeu_ps(out + 8, simde_mm256_cvtph_ps(simde_mm256_extracti128_si256(a, 1)));
    return simde_mm512_loadu_ps(out);
}

#undef _mm512_cvtepi32_ps
#undef _mm512_cvtepi8_epi32
#undef _mm512_cvtepu8_epi32
#undef _mm512_cvtepu16_epi32
#undef _mm512_cvtph_ps
#define _mm512_cvtepi32_ps(a) mp_emu_mm512_cvtepi32_ps(a)
#define _mm512_cvtepi8_epi32(a) mp_emu_mm512_cvtepi8_epi32(a)
#define _mm512_cvtepu8_epi32(a) mp_emu_mm512_cvtepu8_epi32(a)
#define _mm512_cvtepu16_epi32(a) mp_emu_mm512_cvtepu16_epi32(a)
#define _mm512_cvtph_ps(a) mp_emu_mm512_cvtph_ps(a)

#endif
