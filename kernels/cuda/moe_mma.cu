// kernels/cuda/moe_mma.cu — the grouped experts of a prefill step on the tensor cores: the
// arithmetic both tensor-core kernels share, the first kernel, and the host side that picks one.
//
// Why: the grouped path of moe.cu computes every route's dot products on the CUDA cores (a warp
// per output row, dp4a over the route group's activations): 80 % of an H200 prefill step, 1.27 +
// 1.40 ms per layer at 336 rows (CUPTI, bench/NOTES-gpu-exec.md run 5), where reading the layer's
// experts once takes ~0.1 ms.
//
// How, keeping the CPU's arithmetic: a quantized weight is s1 * q - s2 per scale group of G
// elements (Q4_0, Q8_0: G 32, s1 = d; Q4_K: G 32, s1 = d * sc, s2 = dmin * m; Q6_K: G 16,
// s1 = d * sc), with a small integer q; the partner activation (Q8_0 or Q8_K, exactly the CPU's
// bytes) is d_a * q_a with q_a an int8. Per group, sum(q * q_a) runs on the tensor cores as int8
// mma.sync m16n8k16 with int32 accumulation (exact), and the block applies the scales in F32:
// acc += d_a * (s1 * I - s2 * sum(q_a)). So the result equals the CPU's vec_dot up to the order of
// the F32 additions across groups, as the GEMV kernels do — the hybrid runtime's parity property
// holds on this path too.
//
// Two kernels. The pipelined one (moe_mma2.cu) takes every launch whose rows it can stage: K a
// multiple of 256, 16-byte aligned weight rows (Q4_K, Q8_0, Q4_0), 4-byte aligned activation rows
// (mpc_moe_mma2_fits). K-quant rows always are, in the runtime's layouts (K is whole super-blocks;
// pool and staging slots are 256-byte aligned). The first kernel, below, takes the Q8_0 and Q4_0
// launches whose K is not a multiple of 256: a block (4 warps) owns one group of <= 32 routes of
// one expert and 32 output features (each warp 8: one n8 tile, two m16 tiles of routes); K goes
// through shared memory 128 elements at a time as int8: activations copied as they are, weights
// unpacked four at a time with byte-wise (SWAR) shifts, masks and subtractions; scales as F32.
// gate/up: two weight tiles, SwiGLU in the epilogue, h per route; down: one, y per route; the
// combine over routes stays moe.cu's (slot order, one rounding).
#include "kernels/cuda/moe_mma.cuh"

#define MMA_N 32                 // output features per block: 4 warps x n8
#define MMA_KC 128               // K elements per shared-memory stage
#define MMA_LD (MMA_KC + 16)     // bytes per shared row: 36 words, so a fragment load's 32 lanes hit 32 banks
#define MMA_G 32                 // elements per scale group (Q8_0, Q4_0 and their Q8_0 activations)
#define MMA_MAXG (MMA_KC / MMA_G) // scale groups per stage

// ---- weight formats: q4(i) the int8s of elements i .. i+3 packed in a word (i % 4 == 0; 16-bit
// loads suffice: every offset is even), and scale(g): s1 of scale group g (s2 is 0 for both) ----

template <int T> struct mma_w;

template <> struct mma_w<MP_TYPE_Q4_0> {
    __device__ static uint32_t q4(const uint8_t *row, int64_t i)
    {
        const int l = (int)(i % 32);
        const uint32_t w = mpc_ld32_a2(row + (i / 32) * 18 + 2 + l % 16);
        return __vsub4((w >> (l < 16 ? 0 : 4)) & 0x0F0F0F0Fu, 0x08080808u); // nibble - 8, byte-wise
    }
    __device__ static float scale(const uint8_t *row, int64_t g) { return mpc_f16(mpc_ld16(row + g * 18)); }
};

template <> struct mma_w<MP_TYPE_Q8_0> {
    __device__ static uint32_t q4(const uint8_t *row, int64_t i) { return mpc_ld32_a2(row + (i / 32) * 34 + 2 + i % 32); }
    __device__ static float scale(const uint8_t *row, int64_t g) { return mpc_f16(mpc_ld16(row + g * 34)); }
};

// The partner activation (Q8_0): the int8s of elements i .. i+3 as one word (the bytes as they are),
// and the block scale over element i. A Q8_0 weight row has the same bytes.
typedef mma_w<MP_TYPE_Q8_0> mma_a;

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
               const int32_t *n_groups, float *out)
{
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
    typedef mma_w<T> W;
    __shared__ __align__(16) int8_t wq[MATS][MMA_N][MMA_LD];
    __shared__ __align__(16) int8_t aq[MPC_MMA_GROUP][MMA_LD];
    __shared__ float ws1[MATS][MMA_N][MMA_MAXG];
    __shared__ float ad[MPC_MMA_GROUP][MMA_MAXG];
    __shared__ const uint8_t *arow[MPC_MMA_GROUP];
    __shared__ int32_t aroute[MPC_MMA_GROUP];

    const uint8_t *e0, *e1;
    int cnt;
    if (!mma_group<MATS>(w0, w1, n_expert, act, act_row_bytes, act_div, perm, groups, n_groups, e0, e1, cnt,
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
        // stage: weight integers and scales, activation integers and scales
        for (int u = tid; u < MATS * MMA_N * MMA_KC / 4; u += MMA_THREADS) { // 4 elements at a time
            const int mat = u / (MMA_N * MMA_KC / 4), n = (u / (MMA_KC / 4)) % MMA_N, k = 4 * (u % (MMA_KC / 4));
            const int64_t j = n_base + n;
            uint32_t q = 0;
            if (j < N && k < kc)
                q = W::q4((mat ? e1 : e0) + (size_t)j * (mat ? w1.row_bytes : w0.row_bytes), k0 + k);
            *(uint32_t *)&wq[mat][n][k] = q;
        }
        for (int idx = tid; idx < MATS * MMA_N * MMA_MAXG; idx += MMA_THREADS) {
            const int mat = idx / (MMA_N * MMA_MAXG), n = (idx / MMA_MAXG) % MMA_N, gg = idx % MMA_MAXG;
            const int64_t j = n_base + n;
            ws1[mat][n][gg] = j < N && gg < ng
                                  ? W::scale((mat ? e1 : e0) + (size_t)j * (mat ? w1.row_bytes : w0.row_bytes),
                                             k0 / MMA_G + gg)
                                  : 0.0f;
        }
        for (int u = tid; u < MPC_MMA_GROUP * MMA_KC / 4; u += MMA_THREADS) {
            const int m = u / (MMA_KC / 4), k = 4 * (u % (MMA_KC / 4));
            *(uint32_t *)&aq[m][k] = arow[m] && k < kc ? mma_a::q4(arow[m], k0 + k) : 0u;
        }
        for (int idx = tid; idx < MPC_MMA_GROUP * MMA_MAXG; idx += MMA_THREADS) {
            const int m = idx / MMA_MAXG, gg = idx % MMA_MAXG;
            ad[m][gg] = arow[m] && gg < ng ? mma_a::scale(arow[m], k0 / MMA_G + gg) : 0.0f;
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
            // the group's exact integer sums, scaled: d_a * (s1 * I - s2 * sum(q_a)), s2 = 0 here
#pragma unroll
            for (int mt = 0; mt < 2; mt++) {
                const int r0 = mt * 16 + gq, r1 = r0 + 8;
                const int c0 = n0 + 2 * tq, c1 = c0 + 1;
#pragma unroll
                for (int mat = 0; mat < MATS; mat++)
                    mma_scale_add(acc[mt][mat], t[mt][mat], ad[r0][gg], ad[r1][gg], 0.0f, 0.0f,
                                  ws1[mat][c0][gg], 0.0f, ws1[mat][c1][gg], 0.0f);
            }
        }
        __syncthreads();
    }

#pragma unroll
    for (int mt = 0; mt < 2; mt++)
        mma_store<MATS>(acc[mt], mt * 16 + gq, n_base + n0 + 2 * tq, cnt, N, aroute, out);
#endif
}

// ---- host side ----

static int g_mma_ptx = -1; // PTX architecture the tensor-core kernels were compiled for (0: unknown)

static bool mma_type(int t)
{
    return t == MP_TYPE_Q4_0 || t == MP_TYPE_Q8_0 || t == MP_TYPE_Q4_K || t == MP_TYPE_Q6_K;
}

// The types the first kernel serves.
static bool first_type(int t)
{
    return t == MP_TYPE_Q4_0 || t == MP_TYPE_Q8_0;
}

bool mpc_moe_mma_ok(int gate_type, int down_type)
{
    if (!mma_type(gate_type) || !mma_type(down_type))
        return false;
    if (g_mma_ptx < 0) {
        // a build for an architecture below sm_80 compiles the kernels empty: never use them then
        cudaFuncAttributes fa;
        g_mma_ptx = cudaFuncGetAttributes(&fa, moe_mma_kernel<MP_TYPE_Q8_0, 1>) == cudaSuccess ? fa.ptxVersion : 0;
        cudaGetLastError();
    }
    return g_mma_ptx >= 80;
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
    if ((gu2 || first_type(a->gate.type)) && (dn2 || first_type(a->down.type)))
        return MPC_MMA_FIRST;
    return MPC_MMA_NONE; /* a K-quant launch the pipelined kernel cannot stage: the CUDA cores */
}

// One launch of weight type `type`: the pipelined kernel where it fits, else the first kernel
// (Q8_0, Q4_0); mpc_moe_mma_plan has said that one of the two takes it.
template <int MATS>
static int launch(int type, mpc_expert_t w0, mpc_expert_t w1, int64_t n_expert, int64_t K, int64_t N,
                  const uint8_t *act, size_t act_rb, int64_t act_div, const int32_t *perm, const int4 *groups,
                  const int32_t *n_groups, int64_t max_groups, float *out, cudaStream_t st)
{
    if (mpc_moe_mma2_fits(type, MATS, w0, w1, K, act, act_rb)) {
        mpc_moe_mma2_launch(type, MATS, w0, w1, n_expert, K, N, act, act_rb, act_div, perm, groups, n_groups,
                            max_groups, out, st);
        return mpc_launch_status();
    }
    const dim3 grid((unsigned)((N + MMA_N - 1) / MMA_N), (unsigned)max_groups);
    if (type == MP_TYPE_Q8_0)
        moe_mma_kernel<MP_TYPE_Q8_0, MATS><<<grid, MMA_THREADS, 0, st>>>(w0, w1, n_expert, K, N, act, act_rb, act_div,
                                                                         perm, groups, n_groups, out);
    else if (type == MP_TYPE_Q4_0)
        moe_mma_kernel<MP_TYPE_Q4_0, MATS><<<grid, MMA_THREADS, 0, st>>>(w0, w1, n_expert, K, N, act, act_rb, act_div,
                                                                         perm, groups, n_groups, out);
    else
        return MP_CUDA_EINVAL;
    return mpc_launch_status();
}

int mpc_moe_mma_gate_up(int type, mpc_expert_t gate, mpc_expert_t up, int64_t n_expert, int64_t n_embd,
                        int64_t n_ff, const uint8_t *xq, size_t xq_row_bytes, int64_t top_k,
                        const int32_t *perm, const int4 *groups, const int32_t *n_groups, int64_t max_groups,
                        float *h, cudaStream_t st)
{
    return launch<2>(type, gate, up, n_expert, n_embd, n_ff, xq, xq_row_bytes, top_k, perm, groups, n_groups,
                     max_groups, h, st);
}

int mpc_moe_mma_down(int type, mpc_expert_t down, int64_t n_expert, int64_t n_ff, int64_t n_embd,
                     const uint8_t *hq, size_t hq_row_bytes, const int32_t *perm, const int4 *groups,
                     const int32_t *n_groups, int64_t max_groups, float *y, cudaStream_t st)
{
    return launch<1>(type, down, down, n_expert, n_ff, n_embd, hq, hq_row_bytes, 1, perm, groups, n_groups,
                     max_groups, y, st);
}
