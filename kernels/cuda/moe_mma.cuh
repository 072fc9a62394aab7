// kernels/cuda/moe_mma.cuh — what the two tensor-core expert kernels share (moe_mma.cu: the first
// kernel and the host side; moe_mma2.cu: the pipelined kernel): the int8 MMA, the block's group of
// routes, the scaled add of a group's integer sums, the epilogue. Not a public header.
#ifndef MP_KERNELS_CUDA_MOE_MMA_CUH
#define MP_KERNELS_CUDA_MOE_MMA_CUH

#include "kernels/cuda/gemv.cuh" // the blocks of 32's units (mpc_b32_unit, mpc_unit)
#include "kernels/cuda/moe.cuh"

#define MMA_THREADS 128 // 4 warps per block, in both kernels

// The types of a block of 32 the first kernel (moe_mma.cu) takes.
__host__ __device__ constexpr bool mpc_mma_b32(int t)
{
    return t == MP_TYPE_Q4_0 || t == MP_TYPE_Q8_0 || t == MP_TYPE_Q4_1 || t == MP_TYPE_Q5_0 || t == MP_TYPE_Q5_1 ||
           t == MP_TYPE_IQ4_NL || t == MP_TYPE_MXFP4;
}

// Block ib of a weight row of such a type T as the tensor cores take it: its 32 levels as signed
// bytes in element order (q[k]: elements 4k .. 4k+3) and the scales of x = s1 * q - s2: Q4_0 the
// nibble - 8, Q5_0 the five bits - 16, Q8_0 as stored, IQ4_NL and MXFP4 the looked-up level
// (MXFP4's doubled E2M1 value under the halved scale), Q4_1 and Q5_1 as stored (0 .. 31) with their
// min m as s2 = -m. Host-callable: tests/unit/cuda_units_host.cu checks it against the CPU's
// dequantizer.
template <int T>
__host__ __device__ __forceinline__ void mpc_mma_block(const uint8_t *row, int64_t ib, uint32_t q[8], float &s1,
                                                       float &s2)
{
    static_assert(mpc_mma_b32(T), "a block of 32 the tensor cores take");
    s2 = 0.0f;
    if (T == MP_TYPE_Q8_0) {
        s1 = mpc_q8_0_block(row, ib, q); // a Q8_0 weight block has an activation block's bytes
    } else if (T == MP_TYPE_Q4_0) {
        mpc_unit<MP_TYPE_Q4_0, false> b;
        b.load(row, ib);
        for (int k = 0; k < 4; k++) {
            q[k] = mpc_vsub4((uint32_t)b.q[k] & 0x0F0F0F0Fu, 0x08080808u);
            q[k + 4] = mpc_vsub4(((uint32_t)b.q[k] >> 4) & 0x0F0F0F0Fu, 0x08080808u);
        }
        s1 = b.d;
    } else {
        mpc_b32_unit<T> b;
        b.load(row, ib);
        for (int k = 0; k < 8; k++)
            q[k] = T == MP_TYPE_Q5_0 ? mpc_vsub4((uint32_t)b.q[k], 0x10101010u) : (uint32_t)b.q[k];
        s1 = b.d;
        if (mpc_b32_layout<T>::has_min) // (else s2 stays +0: -0 would turn a level's -0 into +0)
            s2 = -b.m;
    }
}

// D = A (16x16, row) * B (16x8, col) + D, int8 inputs, int32 accumulators (exact). Fragments (PTX
// ISA, mma.m16n8k16 with .s8): with g = lane / 4 and t = lane % 4, a0 = A[g][4t .. 4t+3],
// a1 = A[g+8][4t .. 4t+3] (four int8 per register, low byte first); b0 = B[4t .. 4t+3][g];
// d0, d1 = D[g][2t, 2t+1], d2, d3 = D[g+8][2t, 2t+1].
__device__ __forceinline__ void mma_16816_s8(int *d, uint32_t a0, uint32_t a1, uint32_t b0)
{
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
    asm volatile("mma.sync.aligned.m16n8k16.row.col.s32.s8.s8.s32 {%0, %1, %2, %3}, {%4, %5}, {%6}, "
                 "{%0, %1, %2, %3};\n"
                 : "+r"(d[0]), "+r"(d[1]), "+r"(d[2]), "+r"(d[3])
                 : "r"(a0), "r"(a1), "r"(b0));
#endif
}

// ---- what both tensor-core kernels share ----

// The block's group of routes (blockIdx.y): false when the launch has fewer groups or the expert's
// weights are not resident (its routes are skipped by the combine); both are the same for every
// thread of the block. Else expert is the group's expert, e0/e1 its weights, cnt its routes, and
// aroute/arow (shared) each route's id and activation row (act + (route / act_div) *
// act_row_bytes; -1 / NULL past cnt), visible to the whole block.
template <int MATS>
__device__ __forceinline__ bool mma_group(const mpc_expert_t &w0, const mpc_expert_t &w1, int64_t n_expert,
                                          const uint8_t *act, size_t act_row_bytes, int64_t act_div,
                                          const int32_t *perm, const int4 *groups, const int32_t *n_groups,
                                          int &expert, const uint8_t *&e0, const uint8_t *&e1, int &cnt,
                                          int32_t *aroute, const uint8_t **arow)
{
    if ((int64_t)blockIdx.y >= (int64_t)*n_groups)
        return false;
    const int4 grp = groups[blockIdx.y];
    expert = grp.x;
    e0 = mpc_expert_ptr(w0, grp.x, n_expert);
    e1 = MATS == 2 ? mpc_expert_ptr(w1, grp.x, n_expert) : e0;
    if (!e0 || !e1)
        return false;
    cnt = grp.z;
    const int tid = threadIdx.x;
    if (tid < MPC_MMA_GROUP) {
        const int32_t r = tid < cnt ? perm[grp.y + tid] : -1;
        aroute[tid] = r;
        arow[tid] = r >= 0 ? act + (size_t)(r / act_div) * act_row_bytes : NULL;
    }
    __syncthreads();
    return true;
}

// One scale group's exact integer sums t of an m16n8 tile, scaled into acc:
// acc += d_a * (s1 * I - s2 * sum(q_a)); rows r0 (d0, u0) and r0 + 8 (d1, u1), columns c0 (s1a,
// s2a) and c0 + 1 (s1b, s2b), in the mma D layout.
__device__ __forceinline__ void mma_scale_add(float *acc, const int *t, float d0, float d1, float u0, float u1,
                                              float s1a, float s2a, float s1b, float s2b)
{
    acc[0] += d0 * (s1a * (float)t[0] - s2a * u0);
    acc[1] += d0 * (s1b * (float)t[1] - s2b * u0);
    acc[2] += d1 * (s1a * (float)t[2] - s2a * u1);
    acc[3] += d1 * (s1b * (float)t[3] - s2b * u1);
}

// A tile's outputs (the mma D layout: acc[.][0..1] route m0, acc[.][2..3] route m0 + 8; columns j0,
// j0 + 1): for MATS 2 expert e's activation of gate (acc[0]) and up (acc[1]) (mpc_expert_act: its
// biases and kind, as the CUDA-core kernels apply them), for MATS 1 the sums, at out[route * N + j];
// routes past cnt and columns past N are not written.
template <int MATS>
__device__ __forceinline__ void mma_store(const float (&acc)[MATS][4], int m0, int64_t j0, int cnt, int64_t N,
                                          const int32_t *aroute, const mpc_act_t &act, int64_t e, float *out)
{
#pragma unroll
    for (int i = 0; i < 4; i++) {
        const int m = m0 + (i >= 2 ? 8 : 0);
        const int64_t j = j0 + (i & 1);
        if (m >= cnt || j >= N)
            continue;
        const int64_t r = aroute[m];
        if (MATS == 2) {
            out[r * N + j] = mpc_expert_act(act, e, N, j, acc[0][i], acc[MATS - 1][i]);
        } else {
            out[r * N + j] = acc[0][i];
        }
    }
}

// The pipelined kernel (moe_mma2.cu) for weight type `type` and MATS matrices (2: gate and up and
// the experts' activation `act`; 1: down), with moe_mma.cu's launch arguments. mpc_moe_mma2_fits:
// whether it takes such a launch (a type with a stage layout, moe_mma2.cuh; K % 256 == 0; weight
// rows and bases aligned as the stage's copy needs; activation rows 4-byte aligned; its opt-in
// shared memory granted, asked once per kernel); mpc_moe_mma2_launch
// launches it (only where it fits).
bool mpc_moe_mma2_fits(int type, int mats, const mpc_expert_t &w0, const mpc_expert_t &w1, int64_t K,
                       const uint8_t *act, size_t act_rb);
void mpc_moe_mma2_launch(int type, int mats, mpc_expert_t w0, mpc_expert_t w1, int64_t n_expert, int64_t K,
                         int64_t N, const uint8_t *act, size_t act_rb, int64_t act_div, const int32_t *perm,
                         const int4 *groups, const int32_t *n_groups, int64_t max_groups, const mpc_act_t &fn,
                         float *out, cudaStream_t st);

#endif
