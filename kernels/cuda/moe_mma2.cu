// kernels/cuda/moe_mma2.cu — the pipelined tensor-core kernel for the grouped experts of a
// prefill step (every quantized expert type, wherever its rows can be staged: mpc_moe_mma2_fits);
// moe_mma.cu holds the first kernel, the reasoning about the arithmetic, and the host side that
// picks one of the two.
#include "kernels/cuda/moe_mma.cuh"
#include "kernels/cuda/moe_mma2.cuh"

// ---- pipelined (v2): the K-quants, IQ4_XS, Q8_0 and Q4_0 ----
//
// Why: the first kernel (moe_mma.cu) stages K through shared memory as unpacked int8, every weight
// word fetched, unpacked and stored by a thread before a barrier, with no loads in flight during
// the MMAs: Nsight Compute on its Q4_K/Q6_K launches (bench/NOTES-gpu-exec.md run 10) put half its
// stalls on global loads at 25 % occupancy, ~20 TFLOP/s. This one took the 30B MoE prefill call at
// 512 rows from 1,953 to 925 µs (Q4_K/Q6_K) and from 2,418 to 736 µs (Q8_0) on the H200 (runs 13
// and 18). Here the raw bytes of the next 256-element stage (one super-block
// per weight row, or eight Q8_0/Q4_0 blocks; one Q8_K block or eight Q8_0 blocks per route) are
// copied with cp.async while the current stage
// computes; a stage's scales are decoded once into shared memory; each lane unpacks its B
// fragment straight from the raw bytes. Tile: 32 routes x 64 features per block, each warp 16
// features (two n8 tiles). The arithmetic per scale group is the first kernel's, in the same
// order (exact integer sums, then acc += d_a * (s1 * I - s2 * sum(q_a)) group by group), so its
// results are the same numbers. Needs K % 256 == 0, activation rows 4-byte aligned and weight rows
// and expert bases aligned as their stage's copy needs (moe_mma2.cuh's RA: 16 bytes for Q4_K, Q5_K,
// Q8_0, Q4_0; 4 for Q2_K and IQ4_XS; 2 for Q6_K and Q3_K; the pool's and staging's 256-byte slots
// are).

#define MMA2_N 64  // features per block: 4 warps x 2 n8 tiles

// Shared memory: two stages of raw bytes, then the stage's weight scales (s1, s2 per matrix,
// feature and group), the activation scales (ND per route) and, for the types with a min (Q4_K,
// Q5_K, Q2_K), the activation sums of each scale group (NS per route). Only what a type uses: a
// first Q8_0 version (branch mma2-q8, 2026-11-29) kept scales and sums per group for every type,
// which pushed Q6_K down past four blocks per SM and made it ~10 % slower
// (bench/NOTES-gpu-exec.md run 14).
template <int T, int MATS> struct mma2_smem {
    typedef mma2_w<T> W;
    typedef mma2_a<W::A> AT;
    static const int NS = W::MIN ? W::NG : 0;
    static_assert(!W::MIN || W::A == MP_TYPE_Q8_K, "a min needs the Q8_K bsums");
    static const int wbytes = MATS * MMA2_N * W::WB;
    static const int raw = (wbytes + MPC_MMA_GROUP * AT::AB + 15) / 16 * 16; // one stage's raw bytes
    static const int bytes = 2 * raw + (2 * MATS * MMA2_N * W::NG + MPC_MMA_GROUP * (AT::ND + NS)) * 4;
};

template <int T, int MATS>
__global__ void __launch_bounds__(MMA_THREADS)
moe_mma2_kernel(mpc_expert_t w0, mpc_expert_t w1, int64_t n_expert, int64_t K, int64_t N, const uint8_t *act,
                size_t act_row_bytes, int64_t act_div, const int32_t *perm, const int4 *groups,
                const int32_t *n_groups, mpc_act_t fn, float *out)
{
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
    typedef mma2_w<T> W;
    typedef mma2_smem<T, MATS> SM;
    typedef typename SM::AT AT;
    const int NG = W::NG, ND = AT::ND, NS = SM::NS;
    extern __shared__ __align__(16) uint8_t sm2[];
    float *ws1 = (float *)(sm2 + 2 * SM::raw);       // [MATS][MMA2_N][NG]
    float *ws2 = ws1 + MATS * MMA2_N * NG;           // [MATS][MMA2_N][NG]
    float *ad = ws2 + MATS * MMA2_N * NG;            // [MPC_MMA_GROUP][ND]
    float *asum = ad + MPC_MMA_GROUP * ND;           // [MPC_MMA_GROUP][NS]
    __shared__ const uint8_t *arow[MPC_MMA_GROUP];
    __shared__ int32_t aroute[MPC_MMA_GROUP];

    const uint8_t *e0, *e1;
    int expert, cnt;
    if (!mma_group<MATS>(w0, w1, n_expert, act, act_row_bytes, act_div, perm, groups, n_groups, expert, e0, e1, cnt,
                         aroute, arow))
        return;
    const int tid = threadIdx.x, lane = tid % MPC_WARP, warp = tid / MPC_WARP;
    const int gq = lane / 4, tq = lane % 4, n0 = warp * 16;
    const int64_t n_base = (int64_t)blockIdx.x * MMA2_N;

    // super-block s of weight row n (of this block) of matrix mat, in global memory (row 0 past N)
    auto wsrc = [&](int mat, int n, int64_t s) -> const uint8_t * {
        const int64_t j = n_base + n;
        return (mat ? e1 : e0) + (size_t)(j < N ? j : 0) * (mat ? w1.row_bytes : w0.row_bytes) + (size_t)s * W::SB;
    };
    // stage s's raw bytes into buffer b: rows past N and routes past cnt are zero-filled
    auto issue = [&](int64_t s, int b) {
        uint8_t *Wb = sm2 + b * SM::raw, *A = Wb + SM::wbytes;
        for (int u = tid; u < MATS * MMA2_N * W::NC; u += MMA_THREADS) {
            const int mat = u / (MMA2_N * W::NC), n = (u / W::NC) % MMA2_N, c = u % W::NC;
            W::copy(Wb + (mat * MMA2_N + n) * W::WB, wsrc(mat, n, s), c, n_base + n < N);
        }
        for (int u = tid; u < MPC_MMA_GROUP * (AT::AB / 4); u += MMA_THREADS) {
            const int m = u / (AT::AB / 4), w = u % (AT::AB / 4);
            const uint8_t *row = arow[m];
            cp_async4(A + m * AT::AB + 4 * w, row ? row + (size_t)s * AT::AB + 4 * w : act, row ? 4 : 0);
        }
        asm volatile("cp.async.commit_group;\n" ::);
    };

    float acc[2][2][MATS][4] = {};
    const int64_t S = K / 256;
    issue(0, 0);
    for (int64_t s = 0; s < S; s++) {
        const int b = (int)(s & 1);
        if (s + 1 < S) {
            issue(s + 1, b ^ 1);
            asm volatile("cp.async.wait_group 1;\n" ::);
        } else {
            asm volatile("cp.async.wait_group 0;\n" ::);
        }
        __syncthreads();
        const uint8_t *Wb = sm2 + b * SM::raw, *A = Wb + SM::wbytes;
        // the stage's scales: weights per (mat, row, group), activations per route
        for (int idx = tid; idx < MATS * MMA2_N * NG; idx += MMA_THREADS) {
            const int rn = idx / NG;
            const uint8_t *sb = Wb + rn * W::WB + W::off(wsrc(rn / MMA2_N, rn % MMA2_N, s));
            W::scales(sb, idx % NG, ws1[idx], ws2[idx]);
        }
        for (int idx = tid; idx < MPC_MMA_GROUP * ND; idx += MMA_THREADS)
            ad[idx] = AT::d(A + (idx / ND) * AT::AB, idx % ND);
        if (NS > 0) // a min: each group's sum(q_a), its G / 16 int16 bsums (Q8_K activations)
            for (int idx = tid; idx < MPC_MMA_GROUP * NS; idx += MMA_THREADS) {
                const int ns = NS > 0 ? NS : 1; // (the branch is compiled for every type)
                asum[idx] = (float)mma2_q8k_group_sum<W::G>(A + (idx / ns) * AT::AB, idx % ns);
            }
        __syncthreads();

        // this lane's B rows: feature n0 + nt * 8 + gq of each matrix
        const uint8_t *brow[2][MATS];
#pragma unroll
        for (int nt = 0; nt < 2; nt++)
#pragma unroll
            for (int mat = 0; mat < MATS; mat++) {
                const int n = n0 + nt * 8 + gq;
                brow[nt][mat] = Wb + (mat * MMA2_N + n) * W::WB + W::off(wsrc(mat, n, s));
            }
        for (int g = 0; g < NG; g++) {
            int t[2][2][MATS][4] = {};
#pragma unroll
            for (int kk = 0; kk < W::G; kk += 16) {
                const int e = g * W::G + kk + 4 * tq;
                uint32_t bw[2][MATS];
#pragma unroll
                for (int nt = 0; nt < 2; nt++)
#pragma unroll
                    for (int mat = 0; mat < MATS; mat++)
                        bw[nt][mat] = W::q4(brow[nt][mat], e);
#pragma unroll
                for (int mt = 0; mt < 2; mt++) {
                    const uint32_t a0 = AT::q4(A + (mt * 16 + gq) * AT::AB, e);
                    const uint32_t a1 = AT::q4(A + (mt * 16 + gq + 8) * AT::AB, e);
#pragma unroll
                    for (int nt = 0; nt < 2; nt++)
#pragma unroll
                        for (int mat = 0; mat < MATS; mat++)
                            mma_16816_s8(t[mt][nt][mat], a0, a1, bw[nt][mat]);
                }
            }
#pragma unroll
            for (int mt = 0; mt < 2; mt++) {
                const int r0 = mt * 16 + gq, r1 = r0 + 8;
                const int ga = ND > 1 ? g : 0; // the activation scale of group g
                const float d0 = ad[r0 * ND + ga], d1 = ad[r1 * ND + ga];
                const float u0 = NS > 0 ? asum[r0 * NS + g] : 0.0f, u1 = NS > 0 ? asum[r1 * NS + g] : 0.0f;
#pragma unroll
                for (int nt = 0; nt < 2; nt++) {
                    const int c0 = n0 + nt * 8 + 2 * tq, c1 = c0 + 1;
#pragma unroll
                    for (int mat = 0; mat < MATS; mat++) {
                        const float *s1 = ws1 + mat * MMA2_N * NG, *s2 = ws2 + mat * MMA2_N * NG;
                        mma_scale_add(acc[mt][nt][mat], t[mt][nt][mat], d0, d1, u0, u1, s1[c0 * NG + g],
                                      s2[c0 * NG + g], s1[c1 * NG + g], s2[c1 * NG + g]);
                    }
                }
            }
        }
        __syncthreads(); // the buffer and the scales are refilled next
    }

#pragma unroll
    for (int mt = 0; mt < 2; mt++)
#pragma unroll
        for (int nt = 0; nt < 2; nt++)
            mma_store<MATS>(acc[mt][nt], mt * 16 + gq, n_base + n0 + nt * 8 + 2 * tq, cnt, N, aroute, fn, expert,
                            out);
#endif
}

// Its opt-in shared memory (more than 48 KiB of dynamic shared memory is opt-in, per kernel),
// asked for once: whether it was granted.
template <int T, int MATS>
static bool mma2_ready(void)
{
    static int granted = -1;
    if (granted < 0) {
        granted = cudaFuncSetAttribute(moe_mma2_kernel<T, MATS>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                       mma2_smem<T, MATS>::bytes) == cudaSuccess;
        if (!granted)
            cudaGetLastError();
    }
    return granted;
}

// Whether the kernel for weight type T takes these rows: aligned as its stage's copy needs, and its
// shared memory granted.
template <int T>
static bool fits_type(int mats, const mpc_expert_t &w0, const mpc_expert_t &w1)
{
    const size_t ra = mma2_w<T>::RA;
    if (w0.row_bytes % ra || w1.row_bytes % ra || (uintptr_t)w0.base % ra || (uintptr_t)w1.base % ra)
        return false;
    return mats == 2 ? mma2_ready<T, 2>() : mma2_ready<T, 1>();
}

bool mpc_moe_mma2_fits(int type, int mats, const mpc_expert_t &w0, const mpc_expert_t &w1, int64_t K,
                       const uint8_t *act, size_t act_rb)
{
    if (K % 256 || act_rb % 4 || (uintptr_t)act % 4)
        return false;
    switch (type) {
#define MMA2_FITS(T) \
    case T: return fits_type<T>(mats, w0, w1);
        MPC_MMA2_TYPES(MMA2_FITS)
#undef MMA2_FITS
    default: return false;
    }
}

template <int T, int MATS>
static void launch_mma2(mpc_expert_t w0, mpc_expert_t w1, int64_t n_expert, int64_t K, int64_t N, const uint8_t *act,
                        size_t act_rb, int64_t act_div, const int32_t *perm, const int4 *groups,
                        const int32_t *n_groups, int64_t max_groups, const mpc_act_t &fn, float *out,
                        cudaStream_t st)
{
    const dim3 grid((unsigned)((N + MMA2_N - 1) / MMA2_N), (unsigned)max_groups);
    moe_mma2_kernel<T, MATS><<<grid, MMA_THREADS, mma2_smem<T, MATS>::bytes, st>>>(
        w0, w1, n_expert, K, N, act, act_rb, act_div, perm, groups, n_groups, fn, out);
}

void mpc_moe_mma2_launch(int type, int mats, mpc_expert_t w0, mpc_expert_t w1, int64_t n_expert, int64_t K,
                         int64_t N, const uint8_t *act, size_t act_rb, int64_t act_div, const int32_t *perm,
                         const int4 *groups, const int32_t *n_groups, int64_t max_groups, const mpc_act_t &fn,
                         float *out, cudaStream_t st)
{
#define MMA2_CASE(T)                                                                                          \
    case T:                                                                                                   \
        if (mats == 2)                                                                                        \
            launch_mma2<T, 2>(w0, w1, n_expert, K, N, act, act_rb, act_div, perm, groups, n_groups, max_groups, \
                              fn, out, st);                                                                       \
        else                                                                                                  \
            launch_mma2<T, 1>(w0, w1, n_expert, K, N, act, act_rb, act_div, perm, groups, n_groups, max_groups, \
                              fn, out, st);                                                                       \
        break;
    switch (type) {
        MPC_MMA2_TYPES(MMA2_CASE)
    default:
        break;
    }
#undef MMA2_CASE
}
