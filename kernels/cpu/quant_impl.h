/* kernels/cpu/quant_impl.h — internal seams between the CPU kernel files (not a public header).
 *
 * quant_scalar.c and quantize.c provide the reference kernels; quant_avx2.c (compiled with
 * -mavx2 -mfma -mf16c, and only ever called after cpuid said yes) provides the AVX2 variants;
 * quant_avx512.c (-mavx512f -mavx512bw -mavx512vl -mavx512vnni) the AVX-512 ones; dispatch.c
 * assembles them into mp_type_ops tables: one mp_type_ops_<isa>() function per SIMD file
 * returning a table per type, or NULL where it has none.
 *
 * Invariants shared by every vec_dot here:
 *  - activation quants (Q8_0, Q8_K) lie in [-127, 127]: our quantizers never emit -128, which
 *    keeps the AVX2 signed-by-unsigned byte products (maddubs) from saturating;
 *  - n is a multiple of the weight type's block size (checked by callers, see quant.h).
 */
#ifndef MP_KERNELS_CPU_QUANT_IMPL_H
#define MP_KERNELS_CPU_QUANT_IMPL_H

#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "kernels/quant.h"

/* ---- scalar reference: dequantize_row (dst: (n,) float) ---- */
void mp_dequantize_row_f32_scalar(const void *src, float *dst, int64_t n);
void mp_dequantize_row_f16_scalar(const void *src, float *dst, int64_t n);
void mp_dequantize_row_bf16_scalar(const void *src, float *dst, int64_t n);
void mp_dequantize_row_q4_0_scalar(const void *src, float *dst, int64_t n);
void mp_dequantize_row_q8_0_scalar(const void *src, float *dst, int64_t n);
void mp_dequantize_row_q4_1_scalar(const void *src, float *dst, int64_t n);
void mp_dequantize_row_q5_0_scalar(const void *src, float *dst, int64_t n);
void mp_dequantize_row_q5_1_scalar(const void *src, float *dst, int64_t n);
void mp_dequantize_row_iq4_nl_scalar(const void *src, float *dst, int64_t n);
void mp_dequantize_row_mxfp4_scalar(const void *src, float *dst, int64_t n);
void mp_dequantize_row_iq4_xs_scalar(const void *src, float *dst, int64_t n);
void mp_dequantize_row_q2_K_scalar(const void *src, float *dst, int64_t n);
void mp_dequantize_row_q3_K_scalar(const void *src, float *dst, int64_t n);
void mp_dequantize_row_q4_K_scalar(const void *src, float *dst, int64_t n);
void mp_dequantize_row_q5_K_scalar(const void *src, float *dst, int64_t n);
void mp_dequantize_row_q6_K_scalar(const void *src, float *dst, int64_t n);
void mp_dequantize_row_q8_K_scalar(const void *src, float *dst, int64_t n);

/* ---- scalar reference: vec_dot (weight row · activation row in the type's vec_dot_type) ---- */
float mp_vec_dot_f32_scalar(int64_t n, const void *w, const void *x);
float mp_vec_dot_f16_scalar(int64_t n, const void *w, const void *x);
float mp_vec_dot_bf16_scalar(int64_t n, const void *w, const void *x);
float mp_vec_dot_q4_0_q8_0_scalar(int64_t n, const void *w, const void *x);
float mp_vec_dot_q8_0_q8_0_scalar(int64_t n, const void *w, const void *x);
float mp_vec_dot_q4_1_q8_0_scalar(int64_t n, const void *w, const void *x);
float mp_vec_dot_q5_0_q8_0_scalar(int64_t n, const void *w, const void *x);
float mp_vec_dot_q5_1_q8_0_scalar(int64_t n, const void *w, const void *x);
float mp_vec_dot_iq4_nl_q8_0_scalar(int64_t n, const void *w, const void *x);
float mp_vec_dot_mxfp4_q8_0_scalar(int64_t n, const void *w, const void *x);
float mp_vec_dot_iq4_xs_q8_K_scalar(int64_t n, const void *w, const void *x);
float mp_vec_dot_q2_K_q8_K_scalar(int64_t n, const void *w, const void *x);
float mp_vec_dot_q3_K_q8_K_scalar(int64_t n, const void *w, const void *x);
float mp_vec_dot_q4_K_q8_K_scalar(int64_t n, const void *w, const void *x);
float mp_vec_dot_q5_K_q8_K_scalar(int64_t n, const void *w, const void *x);
float mp_vec_dot_q6_K_q8_K_scalar(int64_t n, const void *w, const void *x);

/* ---- reference quantizers (quantize.c), all ISAs share them ---- */
void mp_quantize_row_f32_ref(const float *src, void *dst, int64_t n);
void mp_quantize_row_f16_ref(const float *src, void *dst, int64_t n);
void mp_quantize_row_bf16_ref(const float *src, void *dst, int64_t n);
void mp_quantize_row_q4_0_ref(const float *src, void *dst, int64_t n);
void mp_quantize_row_q8_0_ref(const float *src, void *dst, int64_t n);
void mp_quantize_row_q4_1_ref(const float *src, void *dst, int64_t n);
void mp_quantize_row_q5_0_ref(const float *src, void *dst, int64_t n);
void mp_quantize_row_q5_1_ref(const float *src, void *dst, int64_t n);
void mp_quantize_row_iq4_nl_ref(const float *src, void *dst, int64_t n);
void mp_quantize_row_mxfp4_ref(const float *src, void *dst, int64_t n);
void mp_quantize_row_iq4_xs_ref(const float *src, void *dst, int64_t n);
void mp_quantize_row_q2_K_ref(const float *src, void *dst, int64_t n);
void mp_quantize_row_q3_K_ref(const float *src, void *dst, int64_t n);
void mp_quantize_row_q4_K_ref(const float *src, void *dst, int64_t n);
void mp_quantize_row_q5_K_ref(const float *src, void *dst, int64_t n);
void mp_quantize_row_q6_K_ref(const float *src, void *dst, int64_t n);
void mp_quantize_row_q8_K_ref(const float *src, void *dst, int64_t n);

/* The 16 six-bit group codes s_g (0..63) of a Q3_K block from its 12 packed bytes (quant.h), four
 * groups per 32-bit word (little-endian; x86 only, as the SIMD files): groups 0-3 take the low
 * nibbles of bytes 0-3 and bits 0-1 of bytes 8-11, groups 4-7 the low nibbles of bytes 4-7 and bits
 * 2-3, groups 8-11 and 12-15 the high nibbles and bits 4-5, 6-7. The SIMD files subtract the 32 in
 * a register: a byte store and a vector load of the result stalled the AVX2 dot at 5.8 GB/s (12.9
 * without, bench/NOTES-kernels.md). */
static inline void mp_q3_K_scale_words(const uint8_t *packed, uint32_t w[4])
{
    uint32_t a[3];
    memcpy(a, packed, sizeof(a));
    w[0] = (a[0] & 0x0F0F0F0Fu) | ((a[2] & 0x03030303u) << 4);
    w[1] = (a[1] & 0x0F0F0F0Fu) | (((a[2] >> 2) & 0x03030303u) << 4);
    w[2] = ((a[0] >> 4) & 0x0F0F0F0Fu) | (((a[2] >> 4) & 0x03030303u) << 4);
    w[3] = ((a[1] >> 4) & 0x0F0F0F0Fu) | (((a[2] >> 6) & 0x03030303u) << 4);
}

/* The 16 group scales s_g - 32, in -32..31. */
static inline void mp_q3_K_scales(const uint8_t *packed, int8_t s[16])
{
    uint32_t w[4];
    mp_q3_K_scale_words(packed, w);
    uint8_t u[16];
    memcpy(u, w, sizeof(u));
    for (int g = 0; g < 16; g++)
        s[g] = (int8_t)(u[g] - 32);
}

/* Unpack the 6-bit scale and min of sub-block j (0..7) of a Q4_K block's 12 packed bytes. */
static inline void mp_q4_K_scale_min(const uint8_t *packed, int j, uint8_t *scale, uint8_t *min)
{
    if (j < 4) {
        *scale = packed[j] & 63;
        *min = packed[j + 4] & 63;
    } else {
        *scale = (uint8_t)((packed[j + 4] & 0x0F) | ((packed[j - 4] >> 6) << 4));
        *min = (uint8_t)((packed[j + 4] >> 4) | ((packed[j] >> 6) << 4));
    }
}

/* The 8 six-bit scales and mins of a Q4_K block, unpacked four at a time from 32-bit words
 * (little-endian; the SIMD files are x86-only): bytes 0-3 hold scales 0-3 and the top bits of
 * scales 4-7, bytes 4-7 the same for mins, bytes 8-11 the low nibbles of scales/mins 4-7. */
static inline void mp_q4_K_unpack_scales(const uint8_t *packed, uint8_t sc[8], uint8_t m[8])
{
    uint32_t a[3];
    memcpy(a, packed, sizeof(a));
    const uint32_t sc_lo = a[0] & 0x3F3F3F3Fu, m_lo = a[1] & 0x3F3F3F3Fu;
    const uint32_t sc_hi = (a[2] & 0x0F0F0F0Fu) | ((a[0] >> 2) & 0x30303030u);
    const uint32_t m_hi = ((a[2] >> 4) & 0x0F0F0F0Fu) | ((a[1] >> 2) & 0x30303030u);
    memcpy(sc, &sc_lo, 4);
    memcpy(sc + 4, &sc_hi, 4);
    memcpy(m, &m_lo, 4);
    memcpy(m + 4, &m_hi, 4);
}

/* Software prefetch of the weight stream, mp_prefetch_distance bytes ahead of the loads (0: no
 * prefetch instructions); mp_kernels_set_prefetch_bytes sets it, quant.h says why it is a setting.
 * Prefetches never fault, so running past the row end is harmless. */
extern size_t mp_prefetch_distance;
/* A Q8_K block's 16 sums of 16 quants (the K-quant dots use them for the mins), from its qs */
static inline void mp_q8_K_bsums(mp_block_q8_K *b)
{
    for (int g = 0; g < MP_QK_K / 16; g++) {
        int sum = 0;
        for (int l = 0; l < 16; l++)
            sum += b->qs[16 * g + l];
        b->bsums[g] = (int16_t)sum;
    }
}

static inline void mp_prefetch_weights(const void *p, size_t bytes)
{
    const size_t ahead = mp_prefetch_distance;
    if (!ahead)
        return;
    for (size_t off = 0; off < bytes; off += 64)
        __builtin_prefetch((const char *)p + ahead + off, 0, 3); /* prefetcht0 */
}

/* ---- SIMD variants: the table for a type, or NULL if the ISA has no kernels for it ---- */
const mp_type_ops *mp_type_ops_avx2(int type);   /* quant_avx2.c: AVX2 + FMA + F16C */
/* quant_avx2.c: the activation quantizers, bit for bit the *_ref ones (quantize.c) */
void mp_quantize_row_q8_K_avx2(const float *src, void *dst, int64_t n);
void mp_quantize_row_q8_0_avx2(const float *src, void *dst, int64_t n);
const mp_type_ops *mp_type_ops_avx512(int type); /* quant_avx512.c: AVX-512 F/BW/VL + VNNI */
/* quant_amx.c: the AVX-512 table of the types with an AMX tile GEMM (gemm), from the rows of
 * mp_kernels_amx_rows */
const mp_type_ops *mp_type_ops_amx(int type);
/* quant_amx.c: the activation rows from which type's tile GEMM runs (dispatch.c's mp_kernels_set_amx_rows
 * calls it, on a CPU with the amx level only) */
void mp_amx_set_rows(int type, int rows);
/* quant_amx.c: asks Linux for the tile registers' state (arch_prctl); 0 when granted */
int mp_amx_enable(void);
/* gemm_check.c: ops->gemm against ops->vec_dot on one fixed problem of 17 weight rows, 17 activation
 * rows and 512 columns (every tile shape change runs): 0 when each result is within float rounding
 * (or ops has no gemm), -1 otherwise or when the check cannot run. Dispatch runs it before it
 * offers a level whose GEMMs run instructions tested only where the CPU has them. */
int mp_gemm_self_check(const mp_type_ops *ops);

#endif
