// kernels/cuda/moe_mma.cu — the grouped experts of a prefill step on the tensor cores.
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
// Tiling: a block (4 warps) owns one group of <= 32 routes of one expert and 32 output features
// (each warp 8: one n8 tile, two m16 tiles of routes); K goes through shared memory 128
// elements at a time as int8: activations copied as they are, weights unpacked four at a time
// with byte-wise (SWAR) shifts, masks and subtractions; scales as F32.
// gate/up: two weight tiles, SwiGLU in the epilogue, h per route; down: one, y per route; the
// combine over routes stays moe.cu's (slot order, one rounding).
#include "kernels/cuda/moe_mma.cuh"

#define MMA_N 32                 // output features per block: 4 warps x n8
#define MMA_KC 128               // K elements per shared-memory stage
#define MMA_LD (MMA_KC + 16)     // bytes per shared row: 36 words, so a fragment load's 32 lanes hit 32 banks
#define MMA_MAXG (MMA_KC / 16)   // scale groups per stage (G >= 16)

// ---- weight formats: q4(i) the int8s of elements i .. i+3 packed in a word (i % 4 == 0; 16-bit
// loads suffice: every offset is even), and scales(g): s1 and s2 of scale group g ----

template <int T> struct mma_w;

template <> struct mma_w<MP_TYPE_Q4_0> {
    static const int G = 32;
    static const int A = MP_TYPE_Q8_0;
    __device__ static uint32_t q4(const uint8_t *row, int64_t i)
    {
        const int l = (int)(i % 32);
        const uint32_t w = mpc_ld32_a2(row + (i / 32) * 18 + 2 + l % 16);
        return __vsub4((w >> (l < 16 ? 0 : 4)) & 0x0F0F0F0Fu, 0x08080808u); // nibble - 8, byte-wise
    }
    __device__ static void scales(const uint8_t *row, int64_t g, float &s1, float &s2)
    {
        s1 = mpc_f16(mpc_ld16(row + g * 18));
        s2 = 0.0f;
    }
};

template <> struct mma_w<MP_TYPE_Q8_0> {
    static const int G = 32;
    static const int A = MP_TYPE_Q8_0;
    __device__ static uint32_t q4(const uint8_t *row, int64_t i) { return mpc_ld32_a2(row + (i / 32) * 34 + 2 + i % 32); }
    __device__ static void scales(const uint8_t *row, int64_t g, float &s1, float &s2)
    {
        s1 = mpc_f16(mpc_ld16(row + g * 34));
        s2 = 0.0f;
    }
};

template <> struct mma_w<MP_TYPE_Q4_K> {
    static const int G = 32;
    static const int A = MP_TYPE_Q8_K;
    __device__ static uint32_t q4(const uint8_t *row, int64_t i)
    {
        const uint8_t *b = row + (i / 256) * 144;
        const int e = (int)(i % 256), c = e / 64, hi = (e % 64) >= 32, l = e % 32;
        return (mpc_ld32_a2(b + 16 + 32 * c + l) >> (4 * hi)) & 0x0F0F0F0Fu;
    }
    __device__ static void scales(const uint8_t *row, int64_t g, float &s1, float &s2)
    {
        const uint8_t *b = row + (g / 8) * 144;
        int sc, m;
        mpc_q4k_scale_min([&](int i) -> int { return b[4 + i]; }, (int)(g % 8), sc, m);
        s1 = __fmul_rn(mpc_f16(mpc_ld16(b)), (float)sc);
        s2 = __fmul_rn(mpc_f16(mpc_ld16(b + 2)), (float)m);
    }
};

template <> struct mma_w<MP_TYPE_Q6_K> {
    static const int G = 16;
    static const int A = MP_TYPE_Q8_K;
    __device__ static uint32_t q4(const uint8_t *row, int64_t i)
    {
        const uint8_t *b = row + (i / 256) * 210;
        const int e = (int)(i % 256), h = e / 128, s = (e % 128) / 32, l = e % 32;
        const uint32_t lo = (mpc_ld32_a2(b + 64 * h + 32 * (s & 1) + l) >> (s < 2 ? 0 : 4)) & 0x0F0F0F0Fu;
        const uint32_t hi = ((mpc_ld32_a2(b + 128 + 32 * h + l) >> (2 * s)) & 0x03030303u) << 4;
        return __vsub4(lo | hi, 0x20202020u); // (low nibble | top bits << 4) - 32, byte-wise
    }
    __device__ static void scales(const uint8_t *row, int64_t g, float &s1, float &s2)
    {
        const uint8_t *b = row + (g / 16) * 210;
        s1 = __fmul_rn(mpc_f16(mpc_ld16(b + 208)), (float)(int8_t)b[192 + g % 16]);
        s2 = 0.0f;
    }
};

// ---- partner activation formats: q4(i) the int8s of elements i .. i+3 as one word (the bytes as
// they are), the block scale over element i, and (Q8_K) the sum of q over the 32-element
// sub-block holding i ----

template <int A> struct mma_a;

template <> struct mma_a<MP_TYPE_Q8_0> {
    __device__ static uint32_t q4(const uint8_t *row, int64_t i) { return mpc_ld32_a2(row + (i / 32) * 34 + 2 + i % 32); }
    __device__ static float d(const uint8_t *row, int64_t i) { return mpc_f16(mpc_ld16(row + (i / 32) * 34)); }
    __device__ static int sum32(const uint8_t *, int64_t) { return 0; }
};

template <> struct mma_a<MP_TYPE_Q8_K> {
    __device__ static uint32_t q4(const uint8_t *row, int64_t i) { return mpc_ld32_a2(row + (i / 256) * 292 + 4 + i % 256); }
    __device__ static float d(const uint8_t *row, int64_t i)
    {
        return __uint_as_float(mpc_ld32_a2(row + (i / 256) * 292));
    }
    __device__ static int sum32(const uint8_t *row, int64_t i)
    {
        const uint8_t *bs = row + (i / 256) * 292 + 260 + 4 * ((i % 256) / 32); // two int16 bsums
        return (int)(int16_t)mpc_ld16(bs) + (int)(int16_t)mpc_ld16(bs + 2);
    }
};

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
    typedef mma_a<W::A> A;
    const int G = W::G;
    __shared__ __align__(16) int8_t wq[MATS][MMA_N][MMA_LD];
    __shared__ __align__(16) int8_t aq[MPC_MMA_GROUP][MMA_LD];
    __shared__ float ws1[MATS][MMA_N][MMA_MAXG], ws2[MATS][MMA_N][MMA_MAXG];
    __shared__ float ad[MPC_MMA_GROUP][MMA_MAXG], asum[MPC_MMA_GROUP][MMA_MAXG];
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
        // a multiple of G (rows are whole blocks); the stage is always MMA_KC wide (compile-time
        // index arithmetic), the part past K staged as zeros and its groups not multiplied
        const int kc = (int)(K - k0 < MMA_KC ? K - k0 : MMA_KC);
        const int ng = kc / G;
        const int NG = MMA_KC / G;
        // stage: weight integers and scales, activation integers, scales and sub-block sums
        for (int u = tid; u < MATS * MMA_N * MMA_KC / 4; u += MMA_THREADS) { // 4 elements at a time
            const int mat = u / (MMA_N * MMA_KC / 4), n = (u / (MMA_KC / 4)) % MMA_N, k = 4 * (u % (MMA_KC / 4));
            const int64_t j = n_base + n;
            uint32_t q = 0;
            if (j < N && k < kc)
                q = W::q4((mat ? e1 : e0) + (size_t)j * (mat ? w1.row_bytes : w0.row_bytes), k0 + k);
            *(uint32_t *)&wq[mat][n][k] = q;
        }
        for (int idx = tid; idx < MATS * MMA_N * NG; idx += MMA_THREADS) {
            const int mat = idx / (MMA_N * NG), n = (idx / NG) % MMA_N, gg = idx % NG;
            const int64_t j = n_base + n;
            float s1 = 0.0f, s2 = 0.0f;
            if (j < N && gg < ng)
                W::scales((mat ? e1 : e0) + (size_t)j * (mat ? w1.row_bytes : w0.row_bytes), k0 / G + gg, s1, s2);
            ws1[mat][n][gg] = s1;
            ws2[mat][n][gg] = s2;
        }
        for (int u = tid; u < MPC_MMA_GROUP * MMA_KC / 4; u += MMA_THREADS) {
            const int m = u / (MMA_KC / 4), k = 4 * (u % (MMA_KC / 4));
            *(uint32_t *)&aq[m][k] = arow[m] && k < kc ? A::q4(arow[m], k0 + k) : 0u;
        }
        for (int idx = tid; idx < MPC_MMA_GROUP * NG; idx += MMA_THREADS) {
            const int m = idx / NG, gg = idx % NG;
            const int64_t i = k0 + (int64_t)gg * G;
            const bool live = arow[m] && gg < ng;
            ad[m][gg] = live ? A::d(arow[m], i) : 0.0f;
            asum[m][gg] = live && T == MP_TYPE_Q4_K ? (float)A::sum32(arow[m], i) : 0.0f;
        }
        __syncthreads();

        for (int gg = 0; gg < ng; gg++) {
            int t[2][MATS][4] = {};
#pragma unroll
            for (int kk = 0; kk < G; kk += 16) {
                const int kb = gg * G + kk + 4 * tq;
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
            // the group's exact integer sums, scaled: d_a * (s1 * I - s2 * sum(q_a))
#pragma unroll
            for (int mt = 0; mt < 2; mt++) {
                const int r0 = mt * 16 + gq, r1 = r0 + 8;
                const int c0 = n0 + 2 * tq, c1 = c0 + 1;
#pragma unroll
                for (int mat = 0; mat < MATS; mat++)
                    mma_scale_add(acc[mt][mat], t[mt][mat], ad[r0][gg], ad[r1][gg], asum[r0][gg], asum[r1][gg],
                                  ws1[mat][c0][gg], ws2[mat][c0][gg], ws1[mat][c1][gg], ws2[mat][c1][gg]);
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

template <int T, int MATS>
static void launch(mpc_expert_t w0, mpc_expert_t w1, int64_t n_expert, int64_t K, int64_t N, const uint8_t *act,
                   size_t act_rb, int64_t act_div, const int32_t *perm, const int4 *groups,
                   const int32_t *n_groups, int64_t max_groups, float *out, cudaStream_t st)
{
    if (mpc_moe_mma2_launch(T, MATS, w0, w1, n_expert, K, N, act, act_rb, act_div, perm, groups, n_groups,
                            max_groups, out, st)) // the pipelined kernel, moe_mma2.cu
        return;
    const dim3 grid((unsigned)((N + MMA_N - 1) / MMA_N), (unsigned)max_groups);
    moe_mma_kernel<T, MATS><<<grid, MMA_THREADS, 0, st>>>(w0, w1, n_expert, K, N, act, act_rb, act_div, perm,
                                                         groups, n_groups, out);
}

#define MMA_SWITCH(type, CALL)                      \
    switch (type) {                                 \
    case MP_TYPE_Q4_0: CALL(MP_TYPE_Q4_0); break;   \
    case MP_TYPE_Q8_0: CALL(MP_TYPE_Q8_0); break;   \
    case MP_TYPE_Q4_K: CALL(MP_TYPE_Q4_K); break;   \
    case MP_TYPE_Q6_K: CALL(MP_TYPE_Q6_K); break;   \
    default: return MP_CUDA_EINVAL;                 \
    }

int mpc_moe_mma_gate_up(int type, mpc_expert_t gate, mpc_expert_t up, int64_t n_expert, int64_t n_embd,
                        int64_t n_ff, const uint8_t *xq, size_t xq_row_bytes, int64_t top_k,
                        const int32_t *perm, const int4 *groups, const int32_t *n_groups, int64_t max_groups,
                        float *h, cudaStream_t st)
{
#define MMA_CALL(T) launch<T, 2>(gate, up, n_expert, n_embd, n_ff, xq, xq_row_bytes, top_k, perm, groups, n_groups, max_groups, h, st)
    MMA_SWITCH(type, MMA_CALL)
#undef MMA_CALL
    return mpc_launch_status();
}

int mpc_moe_mma_down(int type, mpc_expert_t down, int64_t n_expert, int64_t n_ff, int64_t n_embd,
                     const uint8_t *hq, size_t hq_row_bytes, const int32_t *perm, const int4 *groups,
                     const int32_t *n_groups, int64_t max_groups, float *y, cudaStream_t st)
{
#define MMA_CALL(T) launch<T, 1>(down, down, n_expert, n_ff, n_embd, hq, hq_row_bytes, 1, perm, groups, n_groups, max_groups, y, st)
    MMA_SWITCH(type, MMA_CALL)
#undef MMA_CALL
    return mpc_launch_status();
}
