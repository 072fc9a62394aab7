/* kernels/cpu/quant_impl.h — internal seams between the CPU kernel files (not a public header).
 *
 * quant_scalar.c and quantize.c provide the reference kernels; quant_avx2.c (compiled with
 * -mavx2 -mfma -mf16c, and only ever called after cpuid said yes) provides the AVX2 variants;
 * dispatch.c assembles them into mp_type_ops tables. A future quant_avx512.c plugs in the same
 * way: one mp_type_ops_<isa>() function returning a table per type, or NULL where it has none.
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

#include "kernels/quant.h"

/* ---- scalar reference: dequantize_row (dst: (n,) float) ---- */
void mp_dequantize_row_f32_scalar(const void *src, float *dst, int64_t n);
void mp_dequantize_row_f16_scalar(const void *src, float *dst, int64_t n);
void mp_dequantize_row_bf16_scalar(const void *src, float *dst, int64_t n);
void mp_dequantize_row_q4_0_scalar(const void *src, float *dst, int64_t n);
void mp_dequantize_row_q8_0_scalar(const void *src, float *dst, int64_t n);
void mp_dequantize_row_q4_K_scalar(const void *src, float *dst, int64_t n);
void mp_dequantize_row_q6_K_scalar(const void *src, float *dst, int64_t n);
void mp_dequantize_row_q8_K_scalar(const void *src, float *dst, int64_t n);

/* ---- scalar reference: vec_dot (weight row · activation row in the type's vec_dot_type) ---- */
float mp_vec_dot_f32_scalar(int64_t n, const void *w, const void *x);
float mp_vec_dot_f16_scalar(int64_t n, const void *w, const void *x);
float mp_vec_dot_bf16_scalar(int64_t n, const void *w, const void *x);
float mp_vec_dot_q4_0_q8_0_scalar(int64_t n, const void *w, const void *x);
float mp_vec_dot_q8_0_q8_0_scalar(int64_t n, const void *w, const void *x);
float mp_vec_dot_q4_K_q8_K_scalar(int64_t n, const void *w, const void *x);
float mp_vec_dot_q6_K_q8_K_scalar(int64_t n, const void *w, const void *x);

/* ---- reference quantizers (quantize.c), all ISAs share them ---- */
void mp_quantize_row_f32_ref(const float *src, void *dst, int64_t n);
void mp_quantize_row_f16_ref(const float *src, void *dst, int64_t n);
void mp_quantize_row_bf16_ref(const float *src, void *dst, int64_t n);
void mp_quantize_row_q4_0_ref(const float *src, void *dst, int64_t n);
void mp_quantize_row_q8_0_ref(const float *src, void *dst, int64_t n);
void mp_quantize_row_q4_K_ref(const float *src, void *dst, int64_t n);
void mp_quantize_row_q6_K_ref(const float *src, void *dst, int64_t n);
void mp_quantize_row_q8_K_ref(const float *src, void *dst, int64_t n);

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

/* ---- AVX2 variants: the table for a type, or NULL if the type has no AVX2 kernels ---- */
const mp_type_ops *mp_type_ops_avx2(int type);

#endif
