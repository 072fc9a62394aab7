// kernels/cuda/moe_mma2.cuh — the pipelined tensor-core kernel's stages (moe_mma2.cu): how a
// 256-element stage of a weight row or an activation row sits in shared memory and how its int8
// levels and scales are read. Host-callable but for the copies: tests/unit/cuda_units_host.cu
// rebuilds every element as s1 * q - s2 from them and checks it against the CPU's dequantizer.
// Not a public header.
#ifndef MP_KERNELS_CUDA_MOE_MMA2_CUH
#define MP_KERNELS_CUDA_MOE_MMA2_CUH

#include "kernels/cuda/gemv.cuh"    // mpc_iq4_xs_scale, mpc_lut16, mpc_q4k_scale_min, mpc_ld32_a2
#include "kernels/cuda/moe_mma.cuh" // mpc_mma_b32: the first kernel's types

__device__ __forceinline__ void cp_async16(void *dst, const void *src, int src_bytes)
{
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
    const unsigned d = (unsigned)__cvta_generic_to_shared(dst);
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(d), "l"(src), "r"(src_bytes));
#endif
}

__device__ __forceinline__ void cp_async4(void *dst, const void *src, int src_bytes)
{
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
    const unsigned d = (unsigned)__cvta_generic_to_shared(dst);
    asm volatile("cp.async.ca.shared.global [%0], [%1], 4, %2;\n" ::"r"(d), "l"(src), "r"(src_bytes));
#endif
}

// A route's activation bytes of one stage, AB of them: q4(ab, e) the int8s of elements e .. e+3,
// d(ab, g) the scale of the stage's ND-th part holding group g (Q8_K: one float for all 256;
// Q8_0: an f16 per 32 elements). Q8_K's 16 int16 bsums (the sums of each 16 elements' int8s) sit
// at byte 260.
template <int A> struct mma2_a;

template <> struct mma2_a<MP_TYPE_Q8_K> {
    static const int AB = 292, ND = 1;
    __host__ __device__ static uint32_t q4(const uint8_t *ab, int e) { return *(const uint32_t *)(ab + 4 + e); }
    __host__ __device__ static float d(const uint8_t *ab, int) { return *(const float *)ab; }
};

template <> struct mma2_a<MP_TYPE_Q8_0> {
    static const int AB = 272, ND = 8;
    __host__ __device__ static uint32_t q4(const uint8_t *ab, int e)
    {
        return mpc_ld32_a2(ab + 34 * (e / 32) + 2 + e % 32);
    }
    __host__ __device__ static float d(const uint8_t *ab, int g) { return mpc_f16(mpc_ld16(ab + 34 * g)); }
};

// sum(q_a) of weight group g (G elements) from a Q8_K activation stage at ab: its G / 16 int16
// bsums (byte 260 on). The types with a min need it for s2's term.
template <int G>
__host__ __device__ __forceinline__ int mma2_q8k_group_sum(const uint8_t *ab, int g)
{
    static_assert(G % 16 == 0, "whole bsums");
    const uint8_t *bs = ab + 260 + 2 * (G / 16) * g;
    int su = 0;
MPC_UNROLL
    for (int k = 0; k < G / 16; k++)
        su += (int16_t)mpc_ld16(bs + 2 * k);
    return su;
}

// How a weight row's stage reaches shared memory: NC chunks (copy(c)), WB bytes per row, RA the
// alignment the kernel needs of weight rows and expert bases (mpc_moe_mma2_fits checks it), off
// where the stage starts in its row's copy.
// Whole rows in 16-byte chunks (Q4_K, Q5_K, Q8_0, Q4_0: their stages are 16-byte multiples).
template <int NC_> struct mma2_whole16 {
    static const int NC = NC_, WB = 16 * NC_, RA = 16;
    __device__ static void copy(uint8_t *dst, const uint8_t *sb, int c, bool ok)
    {
        cp_async16(dst + 16 * c, sb + 16 * c, ok ? 16 : 0);
    }
    __host__ __device__ static int off(const uint8_t *) { return 0; }
};

// Whole rows in 4-byte chunks (Q2_K's 84 bytes, IQ4_XS's 136).
template <int NC_> struct mma2_whole4 {
    static const int NC = NC_, WB = 4 * NC_, RA = 4;
    __device__ static void copy(uint8_t *dst, const uint8_t *sb, int c, bool ok)
    {
        cp_async4(dst + 4 * c, sb + 4 * c, ok ? 4 : 0);
    }
    __host__ __device__ static int off(const uint8_t *) { return 0; }
};

// Rows only 2-byte aligned (Q6_K's 210-byte stages, Q3_K's 110): the copy starts at the 4-byte word
// below the stage and takes one word more than it needs, so off is 0 or 2 and every 32-bit read
// of the stage is two 16-bit loads (mpc_ld32_a2). The word past a stage that ends on a half word
// holds bytes of the stage, so the copy never reads outside the words of the tensor.
template <int SB_> struct mma2_half4 {
    static const int NC = (SB_ + 2) / 4, WB = 4 * NC, RA = 2;
    static_assert(SB_ % 4 == 2, "a stage that ends on a half word");
    __device__ static void copy(uint8_t *dst, const uint8_t *sb, int c, bool ok)
    {
        const uint8_t *w = (const uint8_t *)((uintptr_t)sb & ~(uintptr_t)3);
        cp_async4(dst + 4 * c, w + 4 * c, ok ? 4 : 0);
    }
    __host__ __device__ static int off(const uint8_t *sb) { return (int)((uintptr_t)sb & 3); }
};

// A weight row's stage: SB bytes in global memory (256 elements: one super-block, or eight Q8_0 /
// Q4_0 blocks), NG scale groups of G elements, A its activations' type; q4(sb, e): the int8s of
// elements e .. e+3 (e % 4 == 0) from the stage's bytes at sb; scales(sb, g, s1, s2): element x =
// s1 * q - s2 in group g. MIN: s2 is not 0, so the kernel needs sum(q_a) per group (Q8_K's bsums).
template <int T> struct mma2_w;

template <> struct mma2_w<MP_TYPE_Q4_K> : mma2_whole16<9> {
    static const int SB = 144, G = 32, NG = 8, A = MP_TYPE_Q8_K;
    static const bool MIN = true;
    // the nibbles of elements e .. e+3 from the 128 quant bytes at qs: chunk e / 64's 32 bytes, low
    // nibbles for its first 32 elements, high for the next (Q5_K's too)
    __host__ __device__ static uint32_t nibbles(const uint8_t *qs, int e)
    {
        const int c = e / 64, hi = (e % 64) >= 32, l = e % 32;
        return (*(const uint32_t *)(qs + 32 * c + l) >> (4 * hi)) & 0x0F0F0F0Fu;
    }
    __host__ __device__ static uint32_t q4(const uint8_t *sb, int e) { return nibbles(sb + 16, e); }
    __host__ __device__ static void scales(const uint8_t *sb, int g, float &s1, float &s2)
    {
        int sc, m;
        mpc_q4k_scale_min([&](int i) -> int { return sb[4 + i]; }, g, sc, m);
        s1 = mpc_mul_rn(mpc_f16(mpc_ld16(sb)), (float)sc);
        s2 = mpc_mul_rn(mpc_f16(mpc_ld16(sb + 2)), (float)m);
    }
};

// Q5_K: Q4_K's nibbles (at byte 48) and scales, each topped up with its fifth bit: bit j of qh[l]
// (byte 16 + l) for element 32j + l.
template <> struct mma2_w<MP_TYPE_Q5_K> : mma2_whole16<11> {
    static const int SB = 176, G = 32, NG = 8, A = MP_TYPE_Q8_K;
    static const bool MIN = true;
    __host__ __device__ static uint32_t q4(const uint8_t *sb, int e)
    {
        const uint32_t fifth = (*(const uint32_t *)(sb + 16 + e % 32) >> (e / 32)) & 0x01010101u;
        return mma2_w<MP_TYPE_Q4_K>::nibbles(sb + 48, e) | fifth << 4;
    }
    __host__ __device__ static void scales(const uint8_t *sb, int g, float &s1, float &s2)
    {
        mma2_w<MP_TYPE_Q4_K>::scales(sb, g, s1, s2);
    }
};

// Q2_K: 16 groups of 16; element 128h + 32j + l (l < 32) is bits 2j of qs[32h + l] (byte 16 + ...),
// group g's scale and min the low and high nibbles of byte g, d and dmin at bytes 80 and 82.
template <> struct mma2_w<MP_TYPE_Q2_K> : mma2_whole4<21> {
    static const int SB = 84, G = 16, NG = 16, A = MP_TYPE_Q8_K;
    static const bool MIN = true;
    __host__ __device__ static uint32_t q4(const uint8_t *sb, int e)
    {
        const int h = e / 128, j = (e % 128) / 32;
        return (*(const uint32_t *)(sb + 16 + 32 * h + e % 32) >> (2 * j)) & 0x03030303u;
    }
    __host__ __device__ static void scales(const uint8_t *sb, int g, float &s1, float &s2)
    {
        s1 = mpc_mul_rn(mpc_f16(mpc_ld16(sb + 80)), (float)(sb[g] & 0x0F));
        s2 = mpc_mul_rn(mpc_f16(mpc_ld16(sb + 82)), (float)(sb[g] >> 4));
    }
};

// Q3_K: 16 groups of 16; element 128h + 32j + l (l < 32): bits 2j of qs[32h + l] (byte 32 + ...),
// less 4 where bit 4h + j of hmask[l] (byte l) is clear; group g's 6-bit scale - 32 from the 12
// bytes at 96 (the low nibble of byte g % 8, the high one for g >= 8, under bits 2 (g / 4) of byte
// 8 + g % 4); d at byte 108.
template <> struct mma2_w<MP_TYPE_Q3_K> : mma2_half4<110> {
    static const int SB = 110, G = 16, NG = 16, A = MP_TYPE_Q8_K;
    static const bool MIN = false;
    __host__ __device__ static uint32_t q4(const uint8_t *sb, int e)
    {
        const int h = e / 128, j = (e % 128) / 32, l = e % 32;
        const uint32_t lo = (mpc_ld32_a2(sb + 32 + 32 * h + l) >> (2 * j)) & 0x03030303u;
        const uint32_t hb = (mpc_ld32_a2(sb + l) >> (4 * h + j)) & 0x01010101u;
        return mpc_vsub4(lo | hb << 2, 0x04040404u); // (low bits | the mask bit << 2) - 4, byte-wise
    }
    __host__ __device__ static void scales(const uint8_t *sb, int g, float &s1, float &s2)
    {
        const uint8_t *sc = sb + 96;
        const int s = ((sc[g % 8] >> (4 * (g / 8))) & 0x0F) | ((sc[8 + g % 4] >> (2 * (g / 4))) & 3) << 4;
        s1 = mpc_mul_rn(mpc_f16(mpc_ld16(sb + 108)), (float)(s - 32));
        s2 = 0.0f;
    }
};

template <> struct mma2_w<MP_TYPE_Q6_K> : mma2_half4<210> {
    static const int SB = 210, G = 16, NG = 16, A = MP_TYPE_Q8_K;
    static const bool MIN = false;
    __host__ __device__ static uint32_t q4(const uint8_t *sb, int e)
    {
        const int h = e / 128, s = (e % 128) / 32, l = e % 32;
        const uint32_t lo = (mpc_ld32_a2(sb + 64 * h + 32 * (s & 1) + l) >> (s < 2 ? 0 : 4)) & 0x0F0F0F0Fu;
        const uint32_t hi = ((mpc_ld32_a2(sb + 128 + 32 * h + l) >> (2 * s)) & 0x03030303u) << 4;
        return mpc_vsub4(lo | hi, 0x20202020u); // (low nibble | top bits << 4) - 32, byte-wise
    }
    __host__ __device__ static void scales(const uint8_t *sb, int g, float &s1, float &s2)
    {
        s1 = mpc_mul_rn(mpc_f16(mpc_ld16(sb + 208)), (float)(int8_t)sb[192 + g]);
        s2 = 0.0f;
    }
};

// IQ4_XS: 8 groups of 32; element 32j + l is IQ4_NL's level of nibble l / 16 of qs[16j + l % 16]
// (byte 8 + ...), under d (byte 0) and the sub-block's 6-bit scale - 32 (mpc_iq4_xs_scale).
template <> struct mma2_w<MP_TYPE_IQ4_XS> : mma2_whole4<34> {
    static const int SB = 136, G = 32, NG = 8, A = MP_TYPE_Q8_K;
    static const bool MIN = false;
    __host__ __device__ static uint32_t q4(const uint8_t *sb, int e)
    {
        const int j = e / 32, l = e % 32;
        const uint32_t w = *(const uint32_t *)(sb + 8 + 16 * j + l % 16);
        return (uint32_t)mpc_lut16<MP_TYPE_IQ4_NL>((w >> (4 * (l / 16))) & 0x0F0F0F0Fu);
    }
    __host__ __device__ static void scales(const uint8_t *sb, int g, float &s1, float &s2)
    {
        s1 = mpc_mul_rn(mpc_f16(mpc_ld16(sb)), (float)mpc_iq4_xs_scale(sb, g));
        s2 = 0.0f;
    }
};

// Q8_0 and Q4_0: a stage is 8 blocks of 32 elements (272 / 144 bytes, 16-byte aligned when the
// row starts so and K % 256 == 0); a block's quants sit 2 bytes past its f16 scale, so fragments
// are read with 16-bit loads. A Q8_0 weight stage has the bytes of a Q8_0 activation stage: its
// reads are mma2_a's.
template <> struct mma2_w<MP_TYPE_Q8_0> : mma2_whole16<17> {
    static const int SB = 272, G = 32, NG = 8, A = MP_TYPE_Q8_0;
    static const bool MIN = false;
    __host__ __device__ static uint32_t q4(const uint8_t *sb, int e) { return mma2_a<MP_TYPE_Q8_0>::q4(sb, e); }
    __host__ __device__ static void scales(const uint8_t *sb, int g, float &s1, float &s2)
    {
        s1 = mma2_a<MP_TYPE_Q8_0>::d(sb, g);
        s2 = 0.0f;
    }
};

template <> struct mma2_w<MP_TYPE_Q4_0> : mma2_whole16<9> {
    static const int SB = 144, G = 32, NG = 8, A = MP_TYPE_Q8_0;
    static const bool MIN = false;
    __host__ __device__ static uint32_t q4(const uint8_t *sb, int e)
    {
        const int l = e % 32;
        const uint32_t w = mpc_ld32_a2(sb + 18 * (e / 32) + 2 + l % 16);
        return mpc_vsub4((w >> (l < 16 ? 0 : 4)) & 0x0F0F0F0Fu, 0x08080808u); // nibble - 8, byte-wise
    }
    __host__ __device__ static void scales(const uint8_t *sb, int g, float &s1, float &s2)
    {
        s1 = mpc_f16(mpc_ld16(sb + 18 * g));
        s2 = 0.0f;
    }
};

// The weight types the pipelined kernel stages: the ones with an mma2_w above.
#define MPC_MMA2_TYPES(X)                                                                                     \
    X(MP_TYPE_Q4_0) X(MP_TYPE_Q8_0) X(MP_TYPE_Q2_K) X(MP_TYPE_Q3_K) X(MP_TYPE_Q4_K) X(MP_TYPE_Q5_K)           \
    X(MP_TYPE_Q6_K) X(MP_TYPE_IQ4_XS)

#define MPC_MMA2_IS(T) t == T ||
__host__ __device__ constexpr bool mpc_mma2_type(int t)
{
    return MPC_MMA2_TYPES(MPC_MMA2_IS) false;
}
#undef MPC_MMA2_IS

// The types the tensor cores serve: the first kernel's blocks of 32 (mpc_mma_b32) and the
// pipelined kernel's stages (mpc_mma2_type).
__host__ __device__ constexpr bool mpc_mma_type(int t)
{
    return mpc_mma_b32(t) || mpc_mma2_type(t);
}

#endif
