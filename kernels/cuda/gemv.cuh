// kernels/cuda/gemv.cuh — the per-type weight "units" of the GEMV kernels (gemv.cu, moe.cu).
//
// A unit is the slice of a weight row one lane handles at a time, loaded once into registers
// and then dotted against one or more activation rows:
//   - quantized types: 32 elements (a block of 32: Q4_0, Q4_1, Q5_0, Q5_1, Q8_0, IQ4_NL, MXFP4; a Q4_K/Q5_K sub-block; a Q6_K (half, quarter)
//     run of 32 with its two 16-element scales), dotted with __dp4a on the int8 activation quants
//     of the partner format (Q8_0 or Q8_K, see cuda_ops.h). The integer part of every unit is
//     exact, as on the CPU; only the float scaling and the summation order differ, so results
//     agree with the CPU vec_dot within float32 summation error;
//   - F32/F16/BF16 (x in f32): 8 elements via 128-bit loads (VEC, when rows and x are 16-byte
//     aligned and n % 8 == 0), or 1 element (the fallback for any shape/alignment).
// Lane l of a warp takes units l, l + 32, ...: consecutive lanes read consecutive bytes.
#ifndef MP_KERNELS_CUDA_GEMV_CUH
#define MP_KERNELS_CUDA_GEMV_CUH

#include "kernels/cuda/common.cuh"

template <int T, bool VEC> struct mpc_unit;

// Elements per unit (float types: 8 with VEC, else 1).
template <int T, bool VEC> __host__ __device__ constexpr int mpc_unit_elems()
{
    return (T == MP_TYPE_F32 || T == MP_TYPE_F16 || T == MP_TYPE_BF16) ? (VEC ? 8 : 1) : 32;
}

// c + the four products of a's and b's signed bytes
__host__ __device__ __forceinline__ int mpc_dp4a(int a, int b, int c)
{
#ifdef __CUDA_ARCH__
    return __dp4a(a, b, c);
#else
    for (int k = 0; k < 4; k++)
        c += (int)(int8_t)(a >> (8 * k)) * (int)(int8_t)(b >> (8 * k));
    return c;
#endif
}

// Q8_0 activation block u of x: its 32 quants as 8 words into xw, its scale returned.
__host__ __device__ __forceinline__ float mpc_q8_0_block(const uint8_t *x, int64_t u, uint32_t xw[8])
{
    const uint8_t *b = x + u * 34;
    mpc_ld_words<8>(b + 2, xw);
    return mpc_f16(mpc_ld16(b));
}

template <> struct mpc_unit<MP_TYPE_Q4_0, false> {
    float d;
    int q[4]; // 16 bytes: low nibbles elements 0..15, high 16..31
    __host__ __device__ __forceinline__ void load(const uint8_t *row, int64_t u)
    {
        const uint8_t *b = row + u * 18;
        d = mpc_f16(mpc_ld16(b));
        mpc_ld_words<4>(b + 2, (uint32_t *)q);
    }
    __host__ __device__ __forceinline__ float dot(const uint8_t *x, int64_t u) const
    {
        uint32_t xw[8];
        const float dx = mpc_q8_0_block(x, u, xw);
        int isum = 0, xsum = 0;
MPC_UNROLL
        for (int k = 0; k < 4; k++) {
            const int xl = (int)xw[k], xh = (int)xw[k + 4];
            isum = mpc_dp4a(q[k] & 0x0F0F0F0F, xl, isum);
            isum = mpc_dp4a((q[k] >> 4) & 0x0F0F0F0F, xh, isum);
            xsum = mpc_dp4a(0x01010101, xl, xsum);
            xsum = mpc_dp4a(0x01010101, xh, xsum);
        }
        // stored nibbles are q + 8: sum((n - 8) x) = sum(n x) - 8 sum(x)
        return mpc_mul_rn(d, dx) * (float)(isum - 8 * xsum);
    }
};

template <> struct mpc_unit<MP_TYPE_Q8_0, false> {
    float d;
    int q[8];
    __host__ __device__ __forceinline__ void load(const uint8_t *row, int64_t u)
    {
        const uint8_t *b = row + u * 34;
        d = mpc_f16(mpc_ld16(b));
        mpc_ld_words<8>(b + 2, (uint32_t *)q);
    }
    __host__ __device__ __forceinline__ float dot(const uint8_t *x, int64_t u) const
    {
        uint32_t xw[8];
        const float dx = mpc_q8_0_block(x, u, xw);
        int isum = 0;
MPC_UNROLL
        for (int k = 0; k < 8; k++)
            isum = mpc_dp4a(q[k], (int)xw[k], isum);
        return mpc_mul_rn(d, dx) * (float)isum;
    }
};

// A unit's eight quant words (one byte per element) against run j (elements 32j .. 32j + 31) of the
// Q8_K block at b: the dp4a sum (Q4_K, Q5_K, IQ4_XS).
__host__ __device__ __forceinline__ int mpc_q8k_run_dot(const int *q, const uint8_t *b, int j)
{
    const int *y = (const int *)(b + 4 + 32 * j);
    int s = 0;
MPC_UNROLL
    for (int k = 0; k < 8; k++)
        s = mpc_dp4a(q[k], y[k], s);
    return s;
}

// The other blocks of 32 (Q4_1, Q5_0, Q5_1, IQ4_NL, MXFP4; kernels/quant.h): the unit is one
// block, its 32 levels as bytes in element order (q[k]: elements 4k..4k+3, signed for IQ4_NL and
// MXFP4, 0..31 for the others), x = d v + m. Q5_0 keeps its levels as u = v + 16.
template <int T> struct mpc_b32_layout {
    static constexpr int bytes = T == MP_TYPE_Q4_1 ? 20 : T == MP_TYPE_Q5_0 ? 22 : T == MP_TYPE_Q5_1 ? 24
                                 : T == MP_TYPE_IQ4_NL ? 18 : 17;
    static constexpr int qs = T == MP_TYPE_Q4_1 ? 4 : T == MP_TYPE_Q5_0 ? 6 : T == MP_TYPE_Q5_1 ? 8
                              : T == MP_TYPE_IQ4_NL ? 2 : 1;
    static constexpr int qh = T == MP_TYPE_Q5_0 ? 2 : T == MP_TYPE_Q5_1 ? 4 : -1; // -1: no fifth bits
    static constexpr bool has_min = T == MP_TYPE_Q4_1 || T == MP_TYPE_Q5_1;
    static constexpr bool lut = T == MP_TYPE_IQ4_NL || T == MP_TYPE_MXFP4;
};

template <int T> struct mpc_b32_unit {
    using L = mpc_b32_layout<T>;
    float d, m;
    int q[8];
    __host__ __device__ __forceinline__ void load(const uint8_t *row, int64_t u)
    {
        const uint8_t *b = row + u * L::bytes;
        uint32_t qs[4], qh = 0;
        mpc_ld_words<4>(b + L::qs, qs);
        if (L::qh >= 0)
            mpc_ld_words<1>(b + L::qh, &qh);
        d = T == MP_TYPE_MXFP4 ? mpc_e8m0_half(b[0]) : mpc_f16(mpc_ld16(b));
        m = L::has_min ? mpc_f16(mpc_ld16(b + 2)) : 0.0f;
MPC_UNROLL
        for (int k = 0; k < 4; k++) {
            uint32_t lo = qs[k] & 0x0F0F0F0Fu, hi = (qs[k] >> 4) & 0x0F0F0F0Fu;
            if (L::lut) {
                q[k] = mpc_lut16<T>(lo);
                q[k + 4] = mpc_lut16<T>(hi);
            } else {
                if (L::qh >= 0) {
                    lo |= mpc_bits_to_byte4(qh >> (4 * k));
                    hi |= mpc_bits_to_byte4(qh >> (16 + 4 * k));
                }
                q[k] = (int)lo;
                q[k + 4] = (int)hi;
            }
        }
    }
    __host__ __device__ __forceinline__ float dot(const uint8_t *x, int64_t u) const
    {
        uint32_t xw[8];
        const float dx = mpc_q8_0_block(x, u, xw);
        int isum = 0, xsum = 0;
MPC_UNROLL
        for (int k = 0; k < 8; k++) {
            isum = mpc_dp4a(q[k], (int)xw[k], isum);
            if (L::has_min || T == MP_TYPE_Q5_0)
                xsum = mpc_dp4a(0x01010101, (int)xw[k], xsum);
        }
        if (T == MP_TYPE_Q5_0) // stored u = v + 16: sum(v x) = sum(u x) - 16 sum(x)
            return mpc_mul_rn(d, dx) * (float)(isum - 16 * xsum);
        if (L::has_min)
            return mpc_mul_rn(d, dx) * (float)isum + mpc_mul_rn(m, dx) * (float)xsum;
        return mpc_mul_rn(d, dx) * (float)isum;
    }
};

template <> struct mpc_unit<MP_TYPE_Q4_1, false> : mpc_b32_unit<MP_TYPE_Q4_1> {};
template <> struct mpc_unit<MP_TYPE_Q5_0, false> : mpc_b32_unit<MP_TYPE_Q5_0> {};
template <> struct mpc_unit<MP_TYPE_Q5_1, false> : mpc_b32_unit<MP_TYPE_Q5_1> {};
template <> struct mpc_unit<MP_TYPE_IQ4_NL, false> : mpc_b32_unit<MP_TYPE_IQ4_NL> {};
template <> struct mpc_unit<MP_TYPE_MXFP4, false> : mpc_b32_unit<MP_TYPE_MXFP4> {};

// The 6-bit code s_j - 32 of sub-block j of the IQ4_XS block at b (kernels/quant.h's layout).
__host__ __device__ __forceinline__ int mpc_iq4_xs_scale(const uint8_t *b, int j)
{
    return (((b[4 + j / 2] >> (4 * (j % 2))) & 0x0F) | ((mpc_ld16(b + 2) >> (2 * j)) & 3) << 4) - 32;
}

// IQ4_XS unit u: super-block u / 8, sub-block j = u % 8: 32 levels (mpc_lut16) under the sub-block's
// 6-bit scale s - 32 and the block's d, against the Q8_K run of the same 32 elements.
template <> struct mpc_unit<MP_TYPE_IQ4_XS, false> {
    float d;
    int sc, j;
    int q[8];
    __host__ __device__ __forceinline__ void load(const uint8_t *row, int64_t u)
    {
        const uint8_t *b = row + (u / 8) * 136; // 2-byte aligned at least (checked by the launchers)
        j = (int)(u % 8);
        d = mpc_f16(mpc_ld16(b));
        sc = mpc_iq4_xs_scale(b, j);
        uint32_t qs[4];
        mpc_ld_words<4>(b + 8 + 16 * j, qs);
MPC_UNROLL
        for (int k = 0; k < 4; k++) {
            q[k] = mpc_lut16<MP_TYPE_IQ4_NL>(qs[k] & 0x0F0F0F0Fu);
            q[k + 4] = mpc_lut16<MP_TYPE_IQ4_NL>((qs[k] >> 4) & 0x0F0F0F0Fu);
        }
    }
    __host__ __device__ __forceinline__ float dot(const uint8_t *x, int64_t u) const
    {
        const uint8_t *b = x + (u / 8) * 292; // Q8_K, 4-byte aligned
        return mpc_mul_rn(d, *(const float *)b) * (float)(sc * mpc_q8k_run_dot(q, b, j));
    }
};

// Q4_K unit u: super-block u / 8, sub-block j = u % 8 (32 elements, one 6-bit scale and min).
template <> struct mpc_unit<MP_TYPE_Q4_K, false> {
    float d, dmin;
    int sc, m, j;
    int q[8]; // the sub-block's nibbles, one per byte
    __host__ __device__ __forceinline__ void load(const uint8_t *row, int64_t u)
    {
        const uint8_t *b = row + (u / 8) * 144; // 4-byte aligned (checked by the launchers)
        j = (int)(u % 8);
        d = mpc_f16(mpc_ld16(b));
        dmin = mpc_f16(mpc_ld16(b + 2));
        const uint8_t *p = b + 4;
        mpc_q4k_scale_min([&](int i) -> int { return p[i]; }, j, sc, m);
        const uint32_t *qs = (const uint32_t *)(b + 16 + 32 * (j / 2));
        const int shift = 4 * (j & 1);
MPC_UNROLL
        for (int k = 0; k < 8; k++)
            q[k] = (int)((qs[k] >> shift) & 0x0F0F0F0Fu);
    }
    __host__ __device__ __forceinline__ float dot(const uint8_t *x, int64_t u) const
    {
        const uint8_t *b = x + (u / 8) * 292; // Q8_K, 4-byte aligned
        const float dy = *(const float *)b;
        const int s = mpc_q8k_run_dot(q, b, j);
        const int16_t *bs = (const int16_t *)(b + 260);
        const int ysum = bs[2 * j] + bs[2 * j + 1];
        // x ~ d sc q - dmin m: the min part needs only sum(y) of the sub-block (two bsums)
        return mpc_mul_rn(d, dy) * (float)(sc * s) - mpc_mul_rn(dmin, dy) * (float)(m * ysum);
    }
};

// The same unit from 16-byte aligned rows (GGUF's: 32-byte aligned tensors, 144-byte blocks):
// d and dmin in one 32-bit load, the 12 scale bytes in three, the 32 quant bytes in two 128-bit
// loads — 6 load instructions per 32 elements instead of 13.
template <> struct mpc_unit<MP_TYPE_Q4_K, true> : mpc_unit<MP_TYPE_Q4_K, false> {
    __host__ __device__ __forceinline__ void load(const uint8_t *row, int64_t u)
    {
        const uint8_t *b = row + (u / 8) * 144;
        j = (int)(u % 8);
        const uint32_t dd = *(const uint32_t *)b;
        d = mpc_f16((uint16_t)(dd & 0xFFFFu));
        dmin = mpc_f16((uint16_t)(dd >> 16));
        const uint32_t *sw = (const uint32_t *)(b + 4);
        const uint32_t s0 = sw[0], s1 = sw[1], s2 = sw[2];
        // byte i of the packed scales
        auto byte = [&](int i) -> int {
            const uint32_t w = i < 4 ? s0 : i < 8 ? s1 : s2;
            return (int)((w >> (8 * (i & 3))) & 0xFFu);
        };
        mpc_q4k_scale_min(byte, j, sc, m);
        const uint4 *qs = (const uint4 *)(b + 16 + 32 * (j / 2));
        const uint4 a = qs[0], c = qs[1];
        const uint32_t w[8] = {a.x, a.y, a.z, a.w, c.x, c.y, c.z, c.w};
        const int shift = 4 * (j & 1);
MPC_UNROLL
        for (int k = 0; k < 8; k++)
            q[k] = (int)((w[k] >> shift) & 0x0F0F0F0Fu);
    }
};

// Q8_K runs of 32 activations in two 16-element groups: the dp4a sums of a unit's eight quant words
// q (one byte per element) against the run's eight words y, g0 over the first group (words 0..3)
// and g1 over the second, for the groups' own scales (Q2_K, Q3_K, Q6_K).
__host__ __device__ __forceinline__ void mpc_q8k_group_sums(const int *q, const int *y, int &g0, int &g1)
{
    g0 = 0, g1 = 0;
MPC_UNROLL
    for (int i = 0; i < 4; i++) {
        g0 = mpc_dp4a(q[i], y[i], g0);
        g1 = mpc_dp4a(q[i + 4], y[i + 4], g1);
    }
}

// Q2_K and Q3_K unit u: super-block u / 8, run k = u % 8 (half h = k / 4, j = k % 4) = elements
// 32k..32k+31: groups 2k (the first 16) and 2k + 1, whose quants are bits 2j of qs[32h + l]
// (kernels/quant.h). The dot takes the two groups' dp4a sums apart for their scales; the Q8_K
// bsums of the two groups give the sums of x that the mins (Q2_K) and the -4 offset (Q3_K) need.
template <> struct mpc_unit<MP_TYPE_Q2_K, false> {
    float d, dmin;
    int sc0, sc1, m0, m1, k;
    int q[8]; // 0..3, one per byte
    __host__ __device__ __forceinline__ void load(const uint8_t *row, int64_t u)
    {
        const uint8_t *b = row + (u / 8) * 84; // 4-byte aligned (checked by the launchers)
        k = (int)(u % 8);
        const int h = k / 4, j = k % 4;
        d = mpc_f16(mpc_ld16(b + 80));
        dmin = mpc_f16(mpc_ld16(b + 82));
        sc0 = b[2 * k] & 0x0F, m0 = b[2 * k] >> 4;
        sc1 = b[2 * k + 1] & 0x0F, m1 = b[2 * k + 1] >> 4;
        const uint32_t *qs = (const uint32_t *)(b + 16 + 32 * h);
MPC_UNROLL
        for (int i = 0; i < 8; i++)
            q[i] = (int)((qs[i] >> (2 * j)) & 0x03030303u);
    }
    __host__ __device__ __forceinline__ float dot(const uint8_t *x, int64_t u) const
    {
        const uint8_t *b = x + (u / 8) * 292; // Q8_K, 4-byte aligned
        const float dy = *(const float *)b;
        int g0, g1;
        mpc_q8k_group_sums(q, (const int *)(b + 4 + 32 * k), g0, g1);
        const int16_t *bs = (const int16_t *)(b + 260) + 2 * k;
        return mpc_mul_rn(d, dy) * (float)(sc0 * g0 + sc1 * g1) - mpc_mul_rn(dmin, dy) * (float)(m0 * bs[0] + m1 * bs[1]);
    }
};

template <> struct mpc_unit<MP_TYPE_Q3_K, false> {
    float d;
    int s0, s1, k;
    int q[8]; // u = q + 4 in 0..7, one per byte
    __host__ __device__ __forceinline__ void load(const uint8_t *row, int64_t u)
    {
        const uint8_t *b = row + (u / 8) * 110; // only 2-byte aligned
        k = (int)(u % 8);
        const int h = k / 4, j = k % 4;
        d = mpc_f16(mpc_ld16(b + 108));
        // group g's 6-bit scale: the low nibble of scales[g % 8] (high for g >= 8), bits 2 (g / 4)
        // of scales[8 + g % 4] above it
        const uint8_t *sc = b + 96;
        const int g0 = 2 * k, g1 = 2 * k + 1;
        s0 = (((sc[g0 % 8] >> (4 * (g0 / 8))) & 0x0F) | (((sc[8 + g0 % 4] >> (2 * (g0 / 4))) & 3) << 4)) - 32;
        s1 = (((sc[g1 % 8] >> (4 * (g1 / 8))) & 0x0F) | (((sc[8 + g1 % 4] >> (2 * (g1 / 4))) & 3) << 4)) - 32;
        uint32_t lw[8], hw[8];
        mpc_ld_words<8>(b + 32 + 32 * h, lw);
        mpc_ld_words<8>(b, hw);
MPC_UNROLL
        for (int i = 0; i < 8; i++)
            q[i] = (int)(((lw[i] >> (2 * j)) & 0x03030303u) | (((hw[i] >> k) & 0x01010101u) << 2));
    }
    __host__ __device__ __forceinline__ float dot(const uint8_t *x, int64_t u) const
    {
        const uint8_t *b = x + (u / 8) * 292;
        const float dy = *(const float *)b;
        int g0, g1;
        mpc_q8k_group_sums(q, (const int *)(b + 4 + 32 * k), g0, g1);
        const int16_t *bs = (const int16_t *)(b + 260) + 2 * k;
        // stored u = q + 4: sum(q y) = sum(u y) - 4 sum(y), sum(y) per 16 is a bsum
        return mpc_mul_rn(d, dy) * (float)(s0 * (g0 - 4 * bs[0]) + s1 * (g1 - 4 * bs[1]));
    }
};

// Q5_K unit u: Q4_K's (same scales, same dot), each nibble topped up with its fifth bit: bit j of
// qh[l] for element 32j + l (qh: 32 bytes after the 16-byte head, qs after them).
template <> struct mpc_unit<MP_TYPE_Q5_K, false> : mpc_unit<MP_TYPE_Q4_K, false> {
    __host__ __device__ __forceinline__ void load(const uint8_t *row, int64_t u)
    {
        const uint8_t *b = row + (u / 8) * 176; // 4-byte aligned (checked by the launchers)
        j = (int)(u % 8);
        d = mpc_f16(mpc_ld16(b));
        dmin = mpc_f16(mpc_ld16(b + 2));
        const uint8_t *p = b + 4;
        mpc_q4k_scale_min([&](int i) -> int { return p[i]; }, j, sc, m);
        const uint32_t *qh = (const uint32_t *)(b + 16);
        const uint32_t *qs = (const uint32_t *)(b + 48 + 32 * (j / 2));
        const int shift = 4 * (j & 1);
MPC_UNROLL
        for (int k = 0; k < 8; k++)
            q[k] = (int)(((qs[k] >> shift) & 0x0F0F0F0Fu) | (((qh[k] >> j) & 0x01010101u) << 4));
    }
};

// Q6_K unit u: super-block u / 8, j = u % 8 = (half h = j / 4, quarter s = j % 4): elements
// 128h + 32s + l, l < 32, whose low nibbles are ql[64h + 32(s & 1) + l] (high nibble if s >= 2)
// and top bits qh[32h + l] >> 2s; scales 8h + 2s (l < 16) and 8h + 2s + 1.
template <> struct mpc_unit<MP_TYPE_Q6_K, false> {
    float d;
    int sc0, sc1, j;
    int q[8]; // u = q + 32 in 0..63, one per byte
    __host__ __device__ __forceinline__ void load(const uint8_t *row, int64_t u)
    {
        const uint8_t *b = row + (u / 8) * 210; // only 2-byte aligned
        j = (int)(u % 8);
        const int h = j / 4, s = j % 4;
        d = mpc_f16(mpc_ld16(b + 208));
        sc0 = (int8_t)b[192 + 8 * h + 2 * s];
        sc1 = (int8_t)b[192 + 8 * h + 2 * s + 1];
        const uint8_t *ql = b + 64 * h + 32 * (s & 1), *qh = b + 128 + 32 * h;
        const int lshift = s >= 2 ? 4 : 0;
        uint32_t lw[8], hw[8];
        mpc_ld_words<8>(ql, lw);
        mpc_ld_words<8>(qh, hw);
MPC_UNROLL
        for (int k = 0; k < 8; k++) {
            const uint32_t lo = (lw[k] >> lshift) & 0x0F0F0F0Fu;
            const uint32_t hi = ((hw[k] >> (2 * s)) & 0x03030303u) << 4;
            q[k] = (int)(lo | hi);
        }
    }
    __host__ __device__ __forceinline__ float dot(const uint8_t *x, int64_t u) const
    {
        const uint8_t *b = x + (u / 8) * 292;
        const float dy = *(const float *)b;
        const int h = j / 4, s = j % 4;
        int g0, g1;
        mpc_q8k_group_sums(q, (const int *)(b + 4 + 128 * h + 32 * s), g0, g1);
        const int16_t *bs = (const int16_t *)(b + 260) + 8 * h + 2 * s;
        // stored u = q + 32: sum(q y) = sum(u y) - 32 sum(y), sum(y) per 16 is a bsum
        const int isum = sc0 * (g0 - 32 * bs[0]) + sc1 * (g1 - 32 * bs[1]);
        return mpc_mul_rn(d, dy) * (float)isum;
    }
};

// Float weight types, x in f32. VEC: 8 elements, one 128-bit load of F16/BF16 (two of F32).
template <int T> __host__ __device__ __forceinline__ float mpc_half_like(uint32_t bits16)
{
    return T == MP_TYPE_F16 ? mpc_f16((uint16_t)bits16) : mpc_bf16((uint16_t)bits16);
}

template <int T> struct mpc_float_unit_vec {
    float w[8];
    __host__ __device__ __forceinline__ void load(const uint8_t *row, int64_t u)
    {
        if (T == MP_TYPE_F32) {
            const float4 a = ((const float4 *)row)[2 * u], b = ((const float4 *)row)[2 * u + 1];
            w[0] = a.x; w[1] = a.y; w[2] = a.z; w[3] = a.w;
            w[4] = b.x; w[5] = b.y; w[6] = b.z; w[7] = b.w;
        } else {
            const uint4 v = ((const uint4 *)row)[u];
            const uint32_t p[4] = {v.x, v.y, v.z, v.w};
MPC_UNROLL
            for (int k = 0; k < 4; k++) {
                w[2 * k] = mpc_half_like<T>(p[k] & 0xFFFFu);
                w[2 * k + 1] = mpc_half_like<T>(p[k] >> 16);
            }
        }
    }
    __host__ __device__ __forceinline__ float dot(const uint8_t *x, int64_t u) const
    {
        const float4 a = ((const float4 *)x)[2 * u], b = ((const float4 *)x)[2 * u + 1];
        return w[0] * a.x + w[1] * a.y + w[2] * a.z + w[3] * a.w + w[4] * b.x + w[5] * b.y +
               w[6] * b.z + w[7] * b.w;
    }
};

template <int T> struct mpc_float_unit_scalar {
    float w;
    __host__ __device__ __forceinline__ void load(const uint8_t *row, int64_t u)
    {
        if (T == MP_TYPE_F32)
            w = mpc_u2f(mpc_ld32_a2(row + 4 * u));
        else
            w = mpc_half_like<T>(mpc_ld16(row + 2 * u));
    }
    __host__ __device__ __forceinline__ float dot(const uint8_t *x, int64_t u) const
    {
        return w * ((const float *)x)[u];
    }
};

template <> struct mpc_unit<MP_TYPE_F32, true> : mpc_float_unit_vec<MP_TYPE_F32> {};
template <> struct mpc_unit<MP_TYPE_F16, true> : mpc_float_unit_vec<MP_TYPE_F16> {};
template <> struct mpc_unit<MP_TYPE_BF16, true> : mpc_float_unit_vec<MP_TYPE_BF16> {};
template <> struct mpc_unit<MP_TYPE_F32, false> : mpc_float_unit_scalar<MP_TYPE_F32> {};
template <> struct mpc_unit<MP_TYPE_F16, false> : mpc_float_unit_scalar<MP_TYPE_F16> {};
template <> struct mpc_unit<MP_TYPE_BF16, false> : mpc_float_unit_scalar<MP_TYPE_BF16> {};

// The alignment a type's unit loads need of weight rows (address and row stride).
static inline size_t mpc_weight_align(int type, bool vec)
{
    if (vec)
        return 16;
    if (type == MP_TYPE_MXFP4) // 17-byte blocks: byte loads and any-aligned words only
        return 1;
    return type == MP_TYPE_Q4_K || type == MP_TYPE_Q5_K || type == MP_TYPE_Q2_K ? 4 : 2;
}

// Whether the 128-bit path applies: float weights with rows, x and strides 16-byte aligned;
// Q4_K rows 16-byte aligned.
static inline bool mpc_can_vec(int type, const void *w, size_t row_bytes, int64_t n, const void *x,
                               size_t x_stride)
{
    if (type == MP_TYPE_Q4_K) // 128-bit loads of the weights only; x is read in 32-bit words
        return ((uintptr_t)w % 16) == 0 && row_bytes % 16 == 0;
    if (type != MP_TYPE_F32 && type != MP_TYPE_F16 && type != MP_TYPE_BF16)
        return false;
    return n % 8 == 0 && ((uintptr_t)w % 16) == 0 && row_bytes % 16 == 0 &&
           ((uintptr_t)x % 16) == 0 && x_stride % 16 == 0;
}

#endif
