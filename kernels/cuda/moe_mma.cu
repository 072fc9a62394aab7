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
#include "kernels/cuda/moe.cuh"

#define MMA_N 32                 // output features per block: 4 warps x n8
#define MMA_KC 128               // K elements per shared-memory stage
#define MMA_LD (MMA_KC + 16)     // bytes per shared row: 36 words, so a fragment load's 32 lanes hit 32 banks
#define MMA_MAXG (MMA_KC / 16)   // scale groups per stage (G >= 16)
#define MMA_THREADS 128

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

__device__ __forceinline__ uint32_t ld_w(const int8_t *p)
{
    return *(const uint32_t *)p;
}

// ---- what both tensor-core kernels share ----

// The block's group of routes (blockIdx.y): false when the launch has fewer groups or the expert's
// weights are not resident (its routes are skipped by the combine); both are the same for every
// thread of the block. Else e0/e1 are its weights, cnt its routes, and aroute/arow (shared) each
// route's id and activation row (act + (route / act_div) * act_row_bytes; -1 / NULL past cnt),
// visible to the whole block.
template <int MATS>
__device__ __forceinline__ bool mma_group(const mpc_expert_t &w0, const mpc_expert_t &w1, int64_t n_expert,
                                          const uint8_t *act, size_t act_row_bytes, int64_t act_div,
                                          const int32_t *perm, const int4 *groups, const int32_t *n_groups,
                                          const uint8_t *&e0, const uint8_t *&e1, int &cnt, int32_t *aroute,
                                          const uint8_t **arow)
{
    if ((int64_t)blockIdx.y >= (int64_t)*n_groups)
        return false;
    const int4 grp = groups[blockIdx.y];
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
// j0 + 1): SwiGLU of gate (acc[0]) and up (acc[1]) for MATS 2, the sums for MATS 1, at
// out[route * N + j]; routes past cnt and columns past N are not written.
template <int MATS>
__device__ __forceinline__ void mma_store(const float (&acc)[MATS][4], int m0, int64_t j0, int cnt, int64_t N,
                                          const int32_t *aroute, float *out)
{
#pragma unroll
    for (int e = 0; e < 4; e++) {
        const int m = m0 + (e >= 2 ? 8 : 0);
        const int64_t j = j0 + (e & 1);
        if (m >= cnt || j >= N)
            continue;
        const int64_t r = aroute[m];
        if (MATS == 2) {
            const float g = acc[0][e], u = acc[MATS - 1][e];
            out[r * N + j] = g / (1.0f + expf(-g)) * u;
        } else {
            out[r * N + j] = acc[0][e];
        }
    }
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

// ---- pipelined (v2): K-quants, and Q8_0 / Q4_0 since the eighth session ----
//
// Why: the kernel above stages K through shared memory as unpacked int8, every weight word
// fetched, unpacked and stored by a thread before a barrier, with no loads in flight during the
// MMAs: Nsight Compute (bench/NOTES-gpu-exec.md run 10) put half its stalls on global loads at
// 25 % occupancy, ~20 TFLOP/s. Here the raw bytes of the next 256-element stage (one super-block
// per weight row, or eight Q8_0/Q4_0 blocks; one Q8_K block or eight Q8_0 blocks per route) are
// copied with cp.async while the current stage
// computes; a stage's scales are decoded once into shared memory; each lane unpacks its B
// fragment straight from the raw bytes. Tile: 32 routes x 64 features per block, each warp 16
// features (two n8 tiles). The arithmetic per scale group is the kernel above's, in the same
// order (exact integer sums, then acc += d_a * (s1 * I - s2 * sum(q_a)) group by group), so its
// results are the same numbers. Needs K % 256 == 0 and activation rows 4-byte aligned; Q4_K,
// Q8_0 and Q4_0 also 16-byte aligned weight rows and expert bases (the pool's and staging's
// 256-byte slots are).

#define MMA2_N 64  // features per block: 4 warps x 2 n8 tiles

__device__ __forceinline__ void cp_async16(void *dst, const void *src, int src_bytes)
{
    const unsigned d = (unsigned)__cvta_generic_to_shared(dst);
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(d), "l"(src), "r"(src_bytes));
}

__device__ __forceinline__ void cp_async4(void *dst, const void *src, int src_bytes)
{
    const unsigned d = (unsigned)__cvta_generic_to_shared(dst);
    asm volatile("cp.async.ca.shared.global [%0], [%1], 4, %2;\n" ::"r"(d), "l"(src), "r"(src_bytes));
}

// A weight row's super-block in shared memory: WB bytes per row, copied in NC chunks (copy(c));
// off: where the super-block starts in its row's copy (Q6_K rows are only 2-byte aligned, so
// their copy starts at the 4-byte word below); NG scale groups of G elements; q4(sb, e): the int8s
// of elements e .. e+3 (e % 4 == 0) from the super-block's bytes at sb; scales(sb, g).
template <int T> struct mma2_w;

template <> struct mma2_w<MP_TYPE_Q4_K> {
    static const int SB = 144, WB = 144, NC = 9, G = 32, NG = 8, A = MP_TYPE_Q8_K;
    __device__ static void copy(uint8_t *dst, const uint8_t *sb, int c, bool ok)
    {
        cp_async16(dst + 16 * c, sb + 16 * c, ok ? 16 : 0);
    }
    __device__ static int off(const uint8_t *) { return 0; }
    __device__ static uint32_t q4(const uint8_t *sb, int e)
    {
        const int c = e / 64, hi = (e % 64) >= 32, l = e % 32;
        return (*(const uint32_t *)(sb + 16 + 32 * c + l) >> (4 * hi)) & 0x0F0F0F0Fu;
    }
    __device__ static void scales(const uint8_t *sb, int g, float &s1, float &s2)
    {
        int sc, m;
        mpc_q4k_scale_min([&](int i) -> int { return sb[4 + i]; }, g, sc, m);
        s1 = __fmul_rn(mpc_f16(mpc_ld16(sb)), (float)sc);
        s2 = __fmul_rn(mpc_f16(mpc_ld16(sb + 2)), (float)m);
    }
};

template <> struct mma2_w<MP_TYPE_Q6_K> {
    static const int SB = 210, WB = 212, NC = 53, G = 16, NG = 16, A = MP_TYPE_Q8_K;
    __device__ static void copy(uint8_t *dst, const uint8_t *sb, int c, bool ok)
    {
        const uint8_t *w = (const uint8_t *)((uintptr_t)sb & ~(uintptr_t)3);
        cp_async4(dst + 4 * c, w + 4 * c, ok ? 4 : 0);
    }
    __device__ static int off(const uint8_t *sb) { return (int)((uintptr_t)sb & 3); }
    __device__ static uint32_t q4(const uint8_t *sb, int e)
    {
        const int h = e / 128, s = (e % 128) / 32, l = e % 32;
        const uint32_t lo = (mpc_ld32_a2(sb + 64 * h + 32 * (s & 1) + l) >> (s < 2 ? 0 : 4)) & 0x0F0F0F0Fu;
        const uint32_t hi = ((mpc_ld32_a2(sb + 128 + 32 * h + l) >> (2 * s)) & 0x03030303u) << 4;
        return __vsub4(lo | hi, 0x20202020u); // (low nibble | top bits << 4) - 32, byte-wise
    }
    __device__ static void scales(const uint8_t *sb, int g, float &s1, float &s2)
    {
        s1 = __fmul_rn(mpc_f16(mpc_ld16(sb + 208)), (float)(int8_t)sb[192 + g]);
        s2 = 0.0f;
    }
};

// Q8_0 and Q4_0: a stage is 8 blocks of 32 elements (272 / 144 bytes, 16-byte aligned when the
// row starts so and K % 256 == 0); a block's quants sit 2 bytes past its f16 scale, so fragments
// are read with 16-bit loads.
template <> struct mma2_w<MP_TYPE_Q8_0> {
    static const int SB = 272, WB = 272, NC = 17, G = 32, NG = 8, A = MP_TYPE_Q8_0;
    __device__ static void copy(uint8_t *dst, const uint8_t *sb, int c, bool ok)
    {
        cp_async16(dst + 16 * c, sb + 16 * c, ok ? 16 : 0);
    }
    __device__ static int off(const uint8_t *) { return 0; }
    __device__ static uint32_t q4(const uint8_t *sb, int e) { return mpc_ld32_a2(sb + 34 * (e / 32) + 2 + e % 32); }
    __device__ static void scales(const uint8_t *sb, int g, float &s1, float &s2)
    {
        s1 = mpc_f16(mpc_ld16(sb + 34 * g));
        s2 = 0.0f;
    }
};

template <> struct mma2_w<MP_TYPE_Q4_0> {
    static const int SB = 144, WB = 144, NC = 9, G = 32, NG = 8, A = MP_TYPE_Q8_0;
    __device__ static void copy(uint8_t *dst, const uint8_t *sb, int c, bool ok)
    {
        cp_async16(dst + 16 * c, sb + 16 * c, ok ? 16 : 0);
    }
    __device__ static int off(const uint8_t *) { return 0; }
    __device__ static uint32_t q4(const uint8_t *sb, int e)
    {
        const int l = e % 32;
        const uint32_t w = mpc_ld32_a2(sb + 18 * (e / 32) + 2 + l % 16);
        return __vsub4((w >> (l < 16 ? 0 : 4)) & 0x0F0F0F0Fu, 0x08080808u); // nibble - 8, byte-wise
    }
    __device__ static void scales(const uint8_t *sb, int g, float &s1, float &s2)
    {
        s1 = mpc_f16(mpc_ld16(sb + 18 * g));
        s2 = 0.0f;
    }
};

// A route's activation bytes of one stage, AB of them: q4(ab, e) the int8s of elements e .. e+3,
// d(ab, g) the scale of the stage's ND-th part holding group g (Q8_K: one float for all 256;
// Q8_0: an f16 per 32 elements).
template <int A> struct mma2_a;

template <> struct mma2_a<MP_TYPE_Q8_K> {
    static const int AB = 292, ND = 1;
    __device__ static uint32_t q4(const uint8_t *ab, int e) { return *(const uint32_t *)(ab + 4 + e); }
    __device__ static float d(const uint8_t *ab, int) { return *(const float *)ab; }
};

template <> struct mma2_a<MP_TYPE_Q8_0> {
    static const int AB = 272, ND = 8;
    __device__ static uint32_t q4(const uint8_t *ab, int e) { return mpc_ld32_a2(ab + 34 * (e / 32) + 2 + e % 32); }
    __device__ static float d(const uint8_t *ab, int g) { return mpc_f16(mpc_ld16(ab + 34 * g)); }
};

// Shared memory: two stages of raw bytes, then the stage's weight scales (s1, s2 per matrix,
// feature and group), the activation scales (ND per route) and, for Q4_K only, the activation
// sums its mins need (NS per route). Only what a type uses: the seventh session's Q8_0 version
// kept scales and sums per group for every type, which pushed Q6_K down past four blocks per SM
// and made it ~10 % slower (bench/NOTES-gpu-exec.md run 14).
template <int T, int MATS> struct mma2_smem {
    typedef mma2_w<T> W;
    typedef mma2_a<W::A> AT;
    static const int NS = T == MP_TYPE_Q4_K ? W::NG : 0;
    static const int wbytes = MATS * MMA2_N * W::WB;
    static const int raw = (wbytes + MPC_MMA_GROUP * AT::AB + 15) / 16 * 16; // one stage's raw bytes
    static const int bytes = 2 * raw + (2 * MATS * MMA2_N * W::NG + MPC_MMA_GROUP * (AT::ND + NS)) * 4;
};

template <int T, int MATS>
__global__ void __launch_bounds__(MMA_THREADS)
moe_mma2_kernel(mpc_expert_t w0, mpc_expert_t w1, int64_t n_expert, int64_t K, int64_t N, const uint8_t *act,
                size_t act_row_bytes, int64_t act_div, const int32_t *perm, const int4 *groups,
                const int32_t *n_groups, float *out)
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
    int cnt;
    if (!mma_group<MATS>(w0, w1, n_expert, act, act_row_bytes, act_div, perm, groups, n_groups, e0, e1, cnt,
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
        if (NS > 0) // Q4_K: the two int16 bsums of each group's 32 elements (Q8_K activations)
            for (int idx = tid; idx < MPC_MMA_GROUP * NS; idx += MMA_THREADS) {
                const int ns = NS > 0 ? NS : 1; // (the branch is compiled for every type)
                const uint8_t *bs = A + (idx / ns) * AT::AB + 260 + 4 * (idx % ns);
                asum[idx] = (float)((int)(int16_t)mpc_ld16(bs) + (int)(int16_t)mpc_ld16(bs + 2));
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
            mma_store<MATS>(acc[mt][nt], mt * 16 + gq, n_base + n0 + nt * 8 + 2 * tq, cnt, N, aroute, out);
#endif
}

// v2 serves every type where its alignment holds; MP_CUDA_MOE_MMA2=0 (or mp_cuda_moe_set_mma2(0))
// keeps every type on the kernel above (A/B runs, tests)
static int g_mma2 = -1;

extern "C" void mp_cuda_moe_set_mma2(int on)
{
    g_mma2 = on < 0 ? -1 : on != 0;
}

bool mpc_moe_mma2_on(void)
{
    if (g_mma2 < 0)
        g_mma2 = !mpc_env_switch("MP_CUDA_MOE_MMA2", "0", "1");
    return g_mma2 == 1;
}

template <int T, int MATS>
static bool launch_mma2(mpc_expert_t w0, mpc_expert_t w1, int64_t n_expert, int64_t K, int64_t N, const uint8_t *act,
                        size_t act_rb, int64_t act_div, const int32_t *perm, const int4 *groups,
                        const int32_t *n_groups, int64_t max_groups, float *out, cudaStream_t st)
{
    const bool a16 = T == MP_TYPE_Q6_K || (w0.row_bytes % 16 == 0 && w1.row_bytes % 16 == 0 &&
                                          (uintptr_t)w0.base % 16 == 0 && (uintptr_t)w1.base % 16 == 0);
    if (!mpc_moe_mma2_on() || K % 256 || !a16 || act_rb % 4 || (uintptr_t)act % 4)
        return false;
    typedef mma2_smem<T, MATS> SM;
    static bool attr_set = false; // more than 48 KiB of dynamic shared memory is opt-in, per kernel
    if (!attr_set) {
        if (cudaFuncSetAttribute(moe_mma2_kernel<T, MATS>, cudaFuncAttributeMaxDynamicSharedMemorySize, SM::bytes) !=
            cudaSuccess) {
            cudaGetLastError();
            return false;
        }
        attr_set = true;
    }
    const dim3 grid((unsigned)((N + MMA2_N - 1) / MMA2_N), (unsigned)max_groups);
    moe_mma2_kernel<T, MATS><<<grid, MMA_THREADS, SM::bytes, st>>>(w0, w1, n_expert, K, N, act, act_rb, act_div,
                                                                   perm, groups, n_groups, out);
    return true;
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
    if (launch_mma2<T, MATS>(w0, w1, n_expert, K, N, act, act_rb, act_div, perm, groups, n_groups, max_groups, out,
                             st))
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
