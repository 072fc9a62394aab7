// kernels/cuda/moe_mma.cu — the grouped experts of a prefill step on the tensor cores: the
// arithmetic both tensor-core kernels share, the first kernel, and the host side that picks one.
//
// Why: the grouped path of moe.cu computes every route's dot products on the CUDA cores (a warp
// per output row, dp4a over the route group's activations): 80 % of an H200 prefill step, 1.27 +
// 1.40 ms per layer at 336 rows (CUPTI, bench/NOTES-gpu-exec.md run 5), where reading the layer's
// experts once takes ~0.1 ms.
//
// How, keeping the CPU's arithmetic: a quantized weight is s1 * q - s2 per scale group of G
// elements (the blocks of 32: G 32, s1 = d, s2 = -m for Q4_1/Q5_1's min, IQ4_NL/MXFP4's q their
// looked-up level; Q4_K, Q5_K: G 32, s1 = d * sc, s2 = dmin * m; Q2_K: G 16, the same; Q3_K, Q6_K:
// G 16, s1 = d * sc; IQ4_XS: G 32, s1 = d * sc, q the looked-up level), with a small integer q; the partner activation (Q8_0 or Q8_K, exactly the CPU's
// bytes) is d_a * q_a with q_a an int8. Per group, sum(q * q_a) runs on the tensor cores as int8
// mma.sync m16n8k16 with int32 accumulation (exact), and the block applies the scales in F32:
// acc += d_a * (s1 * I - s2 * sum(q_a)). So the result equals the CPU's vec_dot up to the order of
// the F32 additions across groups, as the GEMV kernels do — the hybrid runtime's parity property
// holds on this path too.
//
// Two kernels. The pipelined one (moe_mma2.cu) takes every launch whose rows it can stage: a type
// with a stage layout (moe_mma2.cuh: the K-quants Q2_K..Q6_K, IQ4_XS, Q8_0, Q4_0), K a multiple of
// 256, weight rows aligned as the stage's copy needs, 4-byte aligned activation rows
// (mpc_moe_mma2_fits). The super-block types' rows always are, in the runtime's layouts (K is
// whole super-blocks; pool and staging slots are 256-byte aligned). The first kernel, below, takes the other launches of
// the blocks of 32 (K not a multiple of 256, as gpt-oss's 2880; rows not 16-byte aligned, as
// MXFP4's 17-byte blocks; Q4_1, Q5_0, Q5_1, IQ4_NL, MXFP4): a block (4 warps) owns one group of <=
// 32 routes of one expert and 32 output features (each warp 8: one n8 tile, two m16 tiles of
// routes); K goes through shared memory 128 elements at a time as int8, a thread staging a whole
// block of 32 of a weight or activation row (mpc_mma_block: the levels by byte-wise shifts, masks
// and subtractions or the look-up, as two 16-byte stores) and its scales as F32. (Staging four
// elements a task, each thread finding its block's bytes again, took 3.5x as long: gpt-oss-20b's
// MXFP4 experts at 64 rows 2,114 against 573 us, H100, bench_cuda 10 prefill, 2026-12-05.)
// gate/up: two weight tiles, the experts' activation in the epilogue (their biases and gpt-oss's
// clamped SwiGLU included), h per route; down: one, y per route; the combine over routes stays
// moe.cu's (slot order, one rounding); gpt-oss's down biases are added after it.
#include "kernels/cuda/moe_mma.cuh"
#include "kernels/cuda/moe_mma2.cuh" // mpc_mma_type

#define MMA_N 32                 // output features per block: 4 warps x n8
#define MMA_KC 128               // K elements per shared-memory stage
#define MMA_LD (MMA_KC + 16)     // bytes per shared row: 36 words, so a fragment load's 32 lanes hit 32 banks
#define MMA_G 32                 // elements per scale group (a block of 32, and its Q8_0 activations)
#define MMA_MAXG (MMA_KC / MMA_G) // scale groups per stage


__device__ __forceinline__ uint32_t ld_w(const int8_t *p)
{
    return *(const uint32_t *)p;
}

// MATS 2: gate (w0) and up (w1), out = h (N = n_ff) with SwiGLU; MATS 1: down (w0), out = y
// (N = n_embd). Activation rows: act + (route / act_div) * act_row_bytes.
template <int T, int MATS>
__global__ void __launch_bounds__(MMA_THREADS)
moe_mma_kernel(mpc_expert_t w0, mpc_expert_t w1, int64_t n_expert, int64_t K, int64_t N, const uint8_t *act,
               size_t act_row_bytes, int64_t act_div, const int32_t *perm, const int4 *groups,
               const int32_t *n_groups, mpc_act_t fn, float *out)
{
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
    constexpr bool has_min = mpc_b32_layout<T>::has_min; // Q4_1, Q5_1
    const int MG2 = has_min ? MMA_MAXG : 1; // mins and activation sums: only the types with a min
    __shared__ __align__(16) int8_t wq[MATS][MMA_N][MMA_LD];
    __shared__ __align__(16) int8_t aq[MPC_MMA_GROUP][MMA_LD];
    __shared__ float ws1[MATS][MMA_N][MMA_MAXG];
    __shared__ float ws2[MATS][MMA_N][MG2];
    __shared__ float ad[MPC_MMA_GROUP][MMA_MAXG];
    __shared__ float asum[MPC_MMA_GROUP][MG2];
    __shared__ const uint8_t *arow[MPC_MMA_GROUP];
    __shared__ int32_t aroute[MPC_MMA_GROUP];

    const uint8_t *e0, *e1;
    int expert, cnt;
    if (!mma_group<MATS>(w0, w1, n_expert, act, act_row_bytes, act_div, perm, groups, n_groups, expert, e0, e1, cnt,
                         aroute, arow))
        return;
    const int tid = threadIdx.x, lane = tid % MPC_WARP, warp = tid / MPC_WARP;
    const int gq = lane / 4, tq = lane % 4, n0 = warp * 8;
    const int64_t n_base = (int64_t)blockIdx.x * MMA_N;

    float acc[2][MATS][4] = {};

    for (int64_t k0 = 0; k0 < K; k0 += MMA_KC) {
        // a multiple of MMA_G (rows are whole blocks); the stage is always MMA_KC wide (compile-time
        // index arithmetic), the part past K staged as zeros and its groups not multiplied
        const int kc = (int)(K - k0 < MMA_KC ? K - k0 : MMA_KC);
        const int ng = kc / MMA_G;
        // stage: a task is one block of 32 of a weight or an activation row (mpc_mma_block,
        // mpc_q8_0_block): its 32 integers as two 16-byte stores, its scales
        for (int u = tid; u < MATS * MMA_N * MMA_MAXG; u += MMA_THREADS) {
            const int gb = u % MMA_MAXG, n = (u / MMA_MAXG) % MMA_N, mat = u / (MMA_N * MMA_MAXG);
            const int64_t j = n_base + n;
            uint32_t q[8] = {};
            float s1 = 0.0f, s2 = 0.0f;
            if (j < N && gb < ng)
                mpc_mma_block<T>((mat ? e1 : e0) + (size_t)j * (mat ? w1.row_bytes : w0.row_bytes), k0 / MMA_G + gb, q,
                                 s1, s2);
            uint4 *dst = (uint4 *)&wq[mat][n][gb * MMA_G];
            dst[0] = make_uint4(q[0], q[1], q[2], q[3]);
            dst[1] = make_uint4(q[4], q[5], q[6], q[7]);
            ws1[mat][n][gb] = s1;
            if (has_min)
                ws2[mat][n][gb % MG2] = s2;
        }
        for (int u = tid; u < MPC_MMA_GROUP * MMA_MAXG; u += MMA_THREADS) {
            const int gb = u % MMA_MAXG, m = u / MMA_MAXG;
            uint32_t q[8] = {};
            float d = 0.0f;
            if (arow[m] && gb < ng)
                d = mpc_q8_0_block(arow[m], k0 / MMA_G + gb, q);
            uint4 *dst = (uint4 *)&aq[m][gb * MMA_G];
            dst[0] = make_uint4(q[0], q[1], q[2], q[3]);
            dst[1] = make_uint4(q[4], q[5], q[6], q[7]);
            ad[m][gb] = d;
            if (has_min) { // sum(q_a) of the group, for the min's term
                int su = 0;
#pragma unroll
                for (int k = 0; k < 8; k++)
                    su = __dp4a((int)q[k], 0x01010101, su);
                asum[m][gb % MG2] = (float)su;
            }
        }
        __syncthreads();

        for (int gg = 0; gg < ng; gg++) {
            int t[2][MATS][4] = {};
#pragma unroll
            for (int kk = 0; kk < MMA_G; kk += 16) {
                const int kb = gg * MMA_G + kk + 4 * tq;
                uint32_t b[MATS];
#pragma unroll
                for (int mat = 0; mat < MATS; mat++)
                    b[mat] = ld_w(&wq[mat][n0 + gq][kb]);
#pragma unroll
                for (int mt = 0; mt < 2; mt++) {
                    const uint32_t a0 = ld_w(&aq[mt * 16 + gq][kb]), a1 = ld_w(&aq[mt * 16 + gq + 8][kb]);
#pragma unroll
                    for (int mat = 0; mat < MATS; mat++)
                        mma_16816_s8(t[mt][mat], a0, a1, b[mat]);
                }
            }
            // the group's exact integer sums, scaled: d_a * (s1 * I - s2 * sum(q_a)), s2 = 0 without a min
#pragma unroll
            for (int mt = 0; mt < 2; mt++) {
                const int r0 = mt * 16 + gq, r1 = r0 + 8;
                const int c0 = n0 + 2 * tq, c1 = c0 + 1;
                const float u0 = has_min ? asum[r0][gg % MG2] : 0.0f, u1 = has_min ? asum[r1][gg % MG2] : 0.0f;
#pragma unroll
                for (int mat = 0; mat < MATS; mat++)
                    mma_scale_add(acc[mt][mat], t[mt][mat], ad[r0][gg], ad[r1][gg], u0, u1, ws1[mat][c0][gg],
                                  has_min ? ws2[mat][c0][gg % MG2] : 0.0f, ws1[mat][c1][gg],
                                  has_min ? ws2[mat][c1][gg % MG2] : 0.0f);
            }
        }
        __syncthreads();
    }

#pragma unroll
    for (int mt = 0; mt < 2; mt++)
        mma_store<MATS>(acc[mt], mt * 16 + gq, n_base + n0 + 2 * tq, cnt, N, aroute, fn, expert, out);
#endif
}

// ---- host side ----

static int g_mma_ptx = -1; // PTX architecture the tensor-core kernels were compiled for (0: unknown)

bool mpc_moe_mma_ok(int gate_type, int down_type)
{
    if (!mpc_mma_type(gate_type) || !mpc_mma_type(down_type))
        return false;
    if (g_mma_ptx < 0) {
        // a build for an architecture below sm_80 compiles the kernels empty: never use them then
        cudaFuncAttributes fa;
        g_mma_ptx = cudaFuncGetAttributes(&fa, moe_mma_kernel<MP_TYPE_Q8_0, 1>) == cudaSuccess ? fa.ptxVersion : 0;
        cudaGetLastError();
    }
    return g_mma_ptx >= 80;
}

extern "C" int mp_cuda_moe_mma_type(int type)
{
    return mpc_mma_type(type);
}

int mpc_moe_mma_plan(const mp_cuda_moe_args *a, const uint8_t *xq, size_t xq_rb, const uint8_t *hq, size_t hq_rb)
{
    if (!mpc_moe_mma_ok(a->gate.type, a->down.type))
        return MPC_MMA_NONE;
    const mpc_expert_t gate = mpc_expert_of(a->gate), up = mpc_expert_of(a->up), down = mpc_expert_of(a->down);
    const bool gu2 = mpc_moe_mma2_fits(a->gate.type, 2, gate, up, a->n_embd, xq, xq_rb);
    const bool dn2 = mpc_moe_mma2_fits(a->down.type, 1, down, down, a->n_ff, hq, hq_rb);
    if (gu2 && dn2)
        return MPC_MMA_PIPELINED;
    if ((gu2 || mpc_mma_b32(a->gate.type)) && (dn2 || mpc_mma_b32(a->down.type)))
        return MPC_MMA_FIRST;
    return MPC_MMA_NONE; /* a K-quant launch the pipelined kernel cannot stage: the CUDA cores */
}

// One launch of weight type `type`: the pipelined kernel where it fits, else the first kernel
// (the blocks of 32); mpc_moe_mma_plan has said that one of the two takes it.
template <int MATS>
static int launch(int type, mpc_expert_t w0, mpc_expert_t w1, int64_t n_expert, int64_t K, int64_t N,
                  const uint8_t *act, size_t act_rb, int64_t act_div, const int32_t *perm, const int4 *groups,
                  const int32_t *n_groups, int64_t max_groups, const mpc_act_t &fn, float *out, cudaStream_t st)
{
    if (mpc_moe_mma2_fits(type, MATS, w0, w1, K, act, act_rb)) {
        mpc_moe_mma2_launch(type, MATS, w0, w1, n_expert, K, N, act, act_rb, act_div, perm, groups, n_groups,
                            max_groups, fn, out, st);
        return mpc_launch_status();
    }
    const dim3 grid((unsigned)((N + MMA_N - 1) / MMA_N), (unsigned)max_groups);
    switch (type) {
#define MMA_CASE(T)                                                                                          \
    case T:                                                                                                  \
        moe_mma_kernel<T, MATS><<<grid, MMA_THREADS, 0, st>>>(w0, w1, n_expert, K, N, act, act_rb, act_div, perm, \
                                                              groups, n_groups, fn, out);                    \
        break;
        MMA_CASE(MP_TYPE_Q8_0)
        MMA_CASE(MP_TYPE_Q4_0)
        MMA_CASE(MP_TYPE_Q4_1)
        MMA_CASE(MP_TYPE_Q5_0)
        MMA_CASE(MP_TYPE_Q5_1)
        MMA_CASE(MP_TYPE_IQ4_NL)
        MMA_CASE(MP_TYPE_MXFP4)
#undef MMA_CASE
    default:
        return MP_CUDA_EINVAL;
    }
    return mpc_launch_status();
}

int mpc_moe_mma_gate_up(int type, mpc_expert_t gate, mpc_expert_t up, int64_t n_expert, int64_t n_embd,
                        int64_t n_ff, const uint8_t *xq, size_t xq_row_bytes, int64_t top_k,
                        const int32_t *perm, const int4 *groups, const int32_t *n_groups, int64_t max_groups,
                        mpc_act_t fn, float *h, cudaStream_t st)
{
    return launch<2>(type, gate, up, n_expert, n_embd, n_ff, xq, xq_row_bytes, top_k, perm, groups, n_groups,
                     max_groups, fn, h, st);
}

int mpc_moe_mma_down(int type, mpc_expert_t down, int64_t n_expert, int64_t n_ff, int64_t n_embd,
                     const uint8_t *hq, size_t hq_row_bytes, const int32_t *perm, const int4 *groups,
                     const int32_t *n_groups, int64_t max_groups, float *y, cudaStream_t st)
{
    const mpc_act_t none = {NULL, NULL, MP_CUDA_ACT_SWIGLU}; // (down: no activation)
    return launch<1>(type, down, down, n_expert, n_ff, n_embd, hq, hq_row_bytes, 1, perm, groups, n_groups,
                     max_groups, none, y, st);
}
