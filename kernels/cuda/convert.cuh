// kernels/cuda/convert.cuh — element-wise dequantization of weight rows on the device (used by
// the embedding gather, mp_cuda_dequantize_rows and the GEMM's F16 tiles).
//
// mpc_dequant_elem<T>(row, i) returns element i of a row of type T with exactly the float32
// operations of kernels/cpu/quant_scalar.c's dequantize_row (e.g. Q4_K: (d * sc) * q - dmin * m),
// written with _rn intrinsics so that nvcc cannot fuse them into an FMA: bit-identical results.
// Host-callable too (tests/unit/test_cuda_units checks it against the CPU without a GPU).
#ifndef MP_KERNELS_CUDA_CONVERT_CUH
#define MP_KERNELS_CUDA_CONVERT_CUH

#include "kernels/cuda/common.cuh"
#include "kernels/cuda/gemv.cuh" // the blocks of 32's layouts (mpc_b32_layout)

template <int T>
__host__ __device__ __forceinline__ float mpc_dequant_elem(const uint8_t *row, int64_t i)
{
    if (T == MP_TYPE_F32) {
        return mpc_u2f(mpc_ld32_a2(row + 4 * i));
    } else if (T == MP_TYPE_F16) {
        return mpc_f16(mpc_ld16(row + 2 * i));
    } else if (T == MP_TYPE_BF16) {
        return mpc_bf16(mpc_ld16(row + 2 * i));
    } else if (T == MP_TYPE_Q4_0) {
        const uint8_t *b = row + (i / 32) * 18;
        const int l = (int)(i % 32);
        const int q = l < 16 ? (b[2 + l] & 0x0F) : (b[2 + l - 16] >> 4);
        return mpc_mul_rn(mpc_f16(mpc_ld16(b)), (float)(q - 8));
    } else if (T == MP_TYPE_Q8_0) {
        const uint8_t *b = row + (i / 32) * 34;
        return mpc_mul_rn((float)(int8_t)b[2 + i % 32], mpc_f16(mpc_ld16(b)));
    } else if (T == MP_TYPE_Q4_1 || T == MP_TYPE_Q5_0 || T == MP_TYPE_Q5_1 || T == MP_TYPE_IQ4_NL ||
               T == MP_TYPE_MXFP4) {
        using L = mpc_b32_layout<T>;
        const uint8_t *b = row + (i / 32) * L::bytes;
        const int l = (int)(i % 32);
        int v = l < 16 ? (b[L::qs + l] & 0x0F) : (b[L::qs + l - 16] >> 4);
        if (L::qh >= 0)
            v |= ((b[L::qh + l / 8] >> (l % 8)) & 1) << 4;
        if (L::lut)
            v = (int)(int8_t)(mpc_lut16<T>((uint32_t)v) & 0xFF);
        else if (T == MP_TYPE_Q5_0)
            v -= 16;
        const float d = T == MP_TYPE_MXFP4 ? mpc_e8m0_half(b[0]) : mpc_f16(mpc_ld16(b));
        if (L::has_min)
            return mpc_add_rn(mpc_mul_rn(d, (float)v), mpc_f16(mpc_ld16(b + 2)));
        return mpc_mul_rn(d, (float)v);
    } else if (T == MP_TYPE_IQ4_XS) {
        const uint8_t *b = row + (i / 256) * 136;
        const int e = (int)(i % 256), j = e / 32, l = e % 32;
        const int s = mpc_iq4_xs_scale(b, j);
        const int q = (b[8 + 16 * j + l % 16] >> (4 * (l / 16))) & 0x0F;
        const int v = (int)(int8_t)(mpc_lut16<MP_TYPE_IQ4_NL>((uint32_t)q) & 0xFF);
        return mpc_mul_rn(mpc_mul_rn(mpc_f16(mpc_ld16(b)), (float)s), (float)v);
    } else if (T == MP_TYPE_Q4_K) {
        const uint8_t *b = row + (i / 256) * 144;
        const int e = (int)(i % 256), c = e / 64, hi = (e % 64) >= 32, l = e % 32;
        const int j = 2 * c + hi; // sub-block
        const uint8_t *p = b + 4; // packed scales
        int sc, m;
        mpc_q4k_scale_min([&](int i) -> int { return p[i]; }, j, sc, m);
        const int q = (b[16 + 32 * c + l] >> (4 * hi)) & 0x0F;
        const float d0 = mpc_mul_rn(mpc_f16(mpc_ld16(b)), (float)sc);
        const float m0 = mpc_mul_rn(mpc_f16(mpc_ld16(b + 2)), (float)m);
        return mpc_sub_rn(mpc_mul_rn(d0, (float)q), m0);
    } else if (T == MP_TYPE_Q2_K) {
        const uint8_t *b = row + (i / 256) * 84;
        const int e = (int)(i % 256), g = e / 16, l = e % 16;
        const int h = g / 8, j = (g % 8) / 2, s = g % 2;
        const int q = (b[16 + 32 * h + 16 * s + l] >> (2 * j)) & 3;
        const float dl = mpc_mul_rn(mpc_f16(mpc_ld16(b + 80)), (float)(b[g] & 0x0F));
        const float ml = mpc_mul_rn(mpc_f16(mpc_ld16(b + 82)), (float)(b[g] >> 4));
        return mpc_sub_rn(mpc_mul_rn(dl, (float)q), ml);
    } else if (T == MP_TYPE_Q3_K) {
        const uint8_t *b = row + (i / 256) * 110;
        const int e = (int)(i % 256), g = e / 16, l = e % 16;
        const int h = g / 8, j = (g % 8) / 2, s = g % 2, lb = 16 * s + l;
        const uint8_t *sc = b + 96;
        const int sg = (((sc[g % 8] >> (4 * (g / 8))) & 0x0F) | (((sc[8 + g % 4] >> (2 * (g / 4))) & 3) << 4)) - 32;
        const int q = ((b[32 + 32 * h + lb] >> (2 * j)) & 3) - ((b[lb] >> (4 * h + j)) & 1 ? 0 : 4);
        const float dl = mpc_mul_rn(mpc_f16(mpc_ld16(b + 108)), (float)sg);
        return mpc_mul_rn(dl, (float)q);
    } else if (T == MP_TYPE_Q5_K) {
        const uint8_t *b = row + (i / 256) * 176;
        const int e = (int)(i % 256), c = e / 64, hi = (e % 64) >= 32, l = e % 32;
        const int j = 2 * c + hi; // sub-block
        const uint8_t *p = b + 4; // packed scales
        int sc, m;
        mpc_q4k_scale_min([&](int i) -> int { return p[i]; }, j, sc, m);
        const int q = ((b[48 + 32 * c + l] >> (4 * hi)) & 0x0F) + (((b[16 + l] >> j) & 1) << 4);
        const float d0 = mpc_mul_rn(mpc_f16(mpc_ld16(b)), (float)sc);
        const float m0 = mpc_mul_rn(mpc_f16(mpc_ld16(b + 2)), (float)m);
        return mpc_sub_rn(mpc_mul_rn(d0, (float)q), m0);
    } else { // MP_TYPE_Q6_K
        const uint8_t *b = row + (i / 256) * 210;
        const int e = (int)(i % 256), h = e / 128, s = (e % 128) / 32, l = e % 32;
        const uint8_t *ql = b + 64 * h, *qh = b + 128 + 32 * h;
        const int lo = s < 2 ? (ql[32 * s + l] & 0x0F) : (ql[32 * (s - 2) + l] >> 4);
        const int q = (lo | (((qh[l] >> (2 * s)) & 3) << 4)) - 32;
        const float dl = mpc_mul_rn(mpc_f16(mpc_ld16(b + 208)), (float)(int8_t)b[192 + e / 16]);
        return mpc_mul_rn(dl, (float)q);
    }
}

#define MPC_TYPE_SWITCH(type, CALL)               \
    switch (type) {                               \
    case MP_TYPE_F32: CALL(MP_TYPE_F32); break;   \
    case MP_TYPE_F16: CALL(MP_TYPE_F16); break;   \
    case MP_TYPE_BF16: CALL(MP_TYPE_BF16); break; \
    case MP_TYPE_Q4_0: CALL(MP_TYPE_Q4_0); break; \
    case MP_TYPE_Q8_0: CALL(MP_TYPE_Q8_0); break; \
    case MP_TYPE_Q4_1: CALL(MP_TYPE_Q4_1); break; \
    case MP_TYPE_Q5_0: CALL(MP_TYPE_Q5_0); break; \
    case MP_TYPE_Q5_1: CALL(MP_TYPE_Q5_1); break; \
    case MP_TYPE_IQ4_NL: CALL(MP_TYPE_IQ4_NL); break; \
    case MP_TYPE_MXFP4: CALL(MP_TYPE_MXFP4); break; \
    case MP_TYPE_Q2_K: CALL(MP_TYPE_Q2_K); break; \
    case MP_TYPE_Q3_K: CALL(MP_TYPE_Q3_K); break; \
    case MP_TYPE_Q4_K: CALL(MP_TYPE_Q4_K); break; \
    case MP_TYPE_Q5_K: CALL(MP_TYPE_Q5_K); break; \
    case MP_TYPE_Q6_K: CALL(MP_TYPE_Q6_K); break; \
    case MP_TYPE_IQ4_XS: CALL(MP_TYPE_IQ4_XS); break; \
    default: return MP_CUDA_EINVAL;               \
    }

#endif
