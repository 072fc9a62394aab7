// tests/unit/cuda_units_host.cu — the GPU's weight units (kernels/cuda/gemv.cuh) and element
// dequantizer (convert.cuh) run on the CPU, for test_cuda_units.c: their helpers are host-callable
// (the intrinsics have host definitions in common.cuh), so the layouts they decode are checked
// against the scalar reference on machines without a GPU, CI's included.
#include "kernels/cuda/gemv.cuh"
#include "kernels/cuda/convert.cuh"
#include "kernels/cuda/moe_mma.cuh"
#include "kernels/cuda/moe_mma2.cuh"

#include "tests/unit/cuda_units_host.h"

// Σ over the row's units of load + dot, in unit order (the GPU sums per lane, then across lanes:
// another order, so results agree within float rounding, not bit for bit).
template <int T, bool V>
static float row_dot(const void *w, const void *x, int64_t n)
{
    mpc_unit<T, V> un;
    float s = 0.0f;
    for (int64_t u = 0; u < n / mpc_unit_elems<T, V>(); u++) {
        un.load((const uint8_t *)w, u);
        s += un.dot((const uint8_t *)x, u);
    }
    return s;
}

template <int T>
static void dequant_row(const void *w, float *out, int64_t n)
{
    for (int64_t i = 0; i < n; i++)
        out[i] = mpc_dequant_elem<T>((const uint8_t *)w, i);
}

// Every weight type the GPU loads: a type missing here fails the test (it walks kernels/quant.h's
// whole table).
#define UNITS_TYPES(X) \
    X(MP_TYPE_F32) X(MP_TYPE_F16) X(MP_TYPE_BF16) X(MP_TYPE_Q4_0) X(MP_TYPE_Q4_1) X(MP_TYPE_Q5_0) X(MP_TYPE_Q5_1) \
    X(MP_TYPE_Q8_0) X(MP_TYPE_IQ4_NL) X(MP_TYPE_MXFP4) X(MP_TYPE_Q2_K) X(MP_TYPE_Q3_K) X(MP_TYPE_Q4_K)            \
    X(MP_TYPE_Q5_K) X(MP_TYPE_Q6_K) X(MP_TYPE_IQ4_XS)

// the types with a 128-bit unit (gemv.cuh's mpc_unit<T, true>, which mpc_can_vec picks)
template <int T> constexpr bool has_vec()
{
    return T == MP_TYPE_F32 || T == MP_TYPE_F16 || T == MP_TYPE_BF16 || T == MP_TYPE_Q4_K;
}

template <int T> static int dot_of(int vec, const void *w, const void *x, int64_t n, float *out)
{
    if constexpr (has_vec<T>()) {
        *out = vec ? row_dot<T, true>(w, x, n) : row_dot<T, false>(w, x, n);
        return 0;
    } else {
        if (vec)
            return -1;
        *out = row_dot<T, false>(w, x, n);
        return 0;
    }
}

extern "C" int mpc_host_row_dot(int type, int vec, const void *w, const void *x, int64_t n, float *out)
{
    switch (type) {
#define CASE(T) \
    case T: return dot_of<T>(vec, w, x, n, out);
        UNITS_TYPES(CASE)
#undef CASE
    default: return -1;
    }
}

extern "C" int mpc_host_dequant_row(int type, const void *w, float *out, int64_t n)
{
    switch (type) {
#define CASE(T)                      \
    case T:                          \
        dequant_row<T>(w, out, n);   \
        return 0;
        UNITS_TYPES(CASE)
#undef CASE
    default: return -1;
    }
}

extern "C" size_t mpc_host_weight_align(int type)
{
    return mpc_weight_align(type, false);
}

// s1 * q - s2 of every element, block by block through moe_mma.cuh's mpc_mma_block
template <int T>
static void mma_row(const void *w, float *out, int64_t n)
{
    for (int64_t ib = 0; ib < n / 32; ib++) {
        uint32_t q[8];
        float s1, s2;
        mpc_mma_block<T>((const uint8_t *)w, ib, q, s1, s2);
        for (int e = 0; e < 32; e++)
            out[32 * ib + e] = s1 * (float)(int8_t)(q[e / 4] >> (8 * (e % 4))) - s2;
    }
}

extern "C" int mpc_host_mma_row(int type, const void *w, float *out, int64_t n)
{
    switch (type) {
#define CASE(T)                    \
    case T:                        \
        mma_row<T>(w, out, n);     \
        return 0;
        CASE(MP_TYPE_Q4_0) CASE(MP_TYPE_Q8_0) CASE(MP_TYPE_Q4_1) CASE(MP_TYPE_Q5_0) CASE(MP_TYPE_Q5_1)
        CASE(MP_TYPE_IQ4_NL) CASE(MP_TYPE_MXFP4)
#undef CASE
    default: return -1;
    }
}

// s1 * q - s2 of every element, stage by stage through moe_mma2.cuh's mma2_w<T> (q4, scales), as
// the pipelined kernel reads a stage in shared memory
template <int T>
static void mma2_row(const void *w, float *out, int64_t n)
{
    typedef mma2_w<T> W;
    for (int64_t s = 0; s < n / 256; s++) {
        const uint8_t *sb = (const uint8_t *)w + s * W::SB;
        for (int g = 0; g < W::NG; g++) {
            float s1, s2;
            W::scales(sb, g, s1, s2);
            for (int e = g * W::G; e < (g + 1) * W::G; e += 4) {
                const uint32_t q = W::q4(sb, e);
                for (int k = 0; k < 4; k++)
                    out[256 * s + e + k] = s1 * (float)(int8_t)(q >> (8 * k)) - s2;
            }
        }
    }
}

extern "C" int mpc_host_mma2_row(int type, const void *w, float *out, int64_t n)
{
    switch (type) {
#define CASE(T)                    \
    case T:                        \
        mma2_row<T>(w, out, n);    \
        return 0;
        MPC_MMA2_TYPES(CASE)
#undef CASE
    default: return -1;
    }
}

// The dot of a weight row with an activation row (its stages in W::A's format) as the pipelined
// kernel computes it: per scale group the exact integer sum I of q * q_a, then acc += d_a * (s1 * I
// - s2 * sum(q_a)) (mma_scale_add's formula, sum(q_a) by mma2_q8k_group_sum), group after group.
template <int T>
static float mma2_dot(const void *w, const void *x, int64_t n)
{
    typedef mma2_w<T> W;
    typedef mma2_a<W::A> AT;
    float acc = 0.0f;
    for (int64_t s = 0; s < n / 256; s++) {
        const uint8_t *sb = (const uint8_t *)w + s * W::SB, *ab = (const uint8_t *)x + s * AT::AB;
        for (int g = 0; g < W::NG; g++) {
            int I = 0;
            for (int e = g * W::G; e < (g + 1) * W::G; e += 4)
                I = mpc_dp4a((int)W::q4(sb, e), (int)AT::q4(ab, e), I);
            float s1, s2;
            W::scales(sb, g, s1, s2);
            const float u = W::MIN ? (float)mma2_q8k_group_sum<W::G>(ab, g) : 0.0f;
            const float d = AT::d(ab, AT::ND > 1 ? g : 0);
            acc += d * (s1 * (float)I - s2 * u);
        }
    }
    return acc;
}

extern "C" int mpc_host_mma2_dot(int type, const void *w, const void *x, int64_t n, float *out)
{
    switch (type) {
#define CASE(T)                        \
    case T:                            \
        *out = mma2_dot<T>(w, x, n);   \
        return 0;
        MPC_MMA2_TYPES(CASE)
#undef CASE
    default: return -1;
    }
}

extern "C" size_t mpc_host_mma2_align(int type)
{
    switch (type) {
#define CASE(T) \
    case T: return (size_t)mma2_w<T>::RA;
        MPC_MMA2_TYPES(CASE)
#undef CASE
    default: return 0;
    }
}

extern "C" int mpc_host_mma_takes(int type)
{
    return mpc_mma_type(type);
}
