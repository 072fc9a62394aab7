// kernels/cuda/moe_dec.cu — the decode experts for the K-quant mixes (Q4_K gate/up; Q6_K, Q5_K or
// Q4_K down, as llama.cpp's Q4_K_M and Q5_K_M give the experts' down tensors by layer): the
// per-route path of mp_cuda_moe_experts (fewer rows than the grouped path's 16) where these types
// and alignments hold; moe.cu's unit kernels serve every other case.
//
// Why separate kernels: Nsight Compute on the H200 (bench/results/2026-12-01-h200-ncu-decode.txt)
// had the unit kernels at 27.5 % (gate/up) and 13.1 % (down) of DRAM bandwidth. gate/up used 117
// registers (4 blocks per SM, three waves of 1,536 blocks); down ran one warp per output element
// with 24 of 32 lanes busy (768 / 32 units) and its routes one after the other, in 0.3 of a wave.
// And both loaded more than the row holds: two lanes per Q4_K quant byte (low and high nibbles
// of a sub-block pair), 64 bytes per 24 of a Q6_K run.
//
// gate/up (dec_gate_up_q4k): a lane owns a Q4_K sub-block pair (64 elements: the low and high
// nibbles of 32 quant bytes, one 128-bit pair of loads, each byte read once), so a 2,048-element
// row is one pass of a warp; a warp computes R (DEC_GU_ROWS, 2) rows j of gate and of up for its route, every
// row's loads issued before the first dot. x's pair is loaded once per pass for all of them.
// down (dec_down): a group of 8 lanes owns one (output element d, route k) dot, each lane an
// eighth of every super-block, each byte read once: Q6_K, half t / 4 and the 8-element run t % 4
// of every 128-element quarter (24 bytes: 16 of low nibbles, 8 of high bits); Q4_K and Q5_K, 16
// of the 128 quant bytes (32 elements of two sub-blocks) and, Q5_K, the 16 bytes of their high
// bits. Rows of DEC_DOWN_WARP_MIN_SB super-blocks or more (Mixtral's 14,336) take a warp per dot,
// four super-blocks at a time: an 8-lane group would walk 56 of them one after the other. A block
// of 256 threads computes DB output elements for all top_k routes, DB chosen so that one pass of
// its groups covers DB · top_k items (top-8: 4; top-2: 16), keeps weight_k · dot in shared memory
// and sums them in slot order: the combine is fused, deterministic, one rounding per output
// element, as moe.cu's down kernels.
// Integer products per sub-block are exact (dp4a), as the CPU's vec_dot; only the float scaling
// and the summation order differ.
// Measured on the H200 (`bench_cuda 100 decode`, one decode MoE call of the 30B shapes as a graph,
// bench/NOTES-gpu-exec.md run 30): 26.2 µs with the unit kernels, 19.5 with these; all-GPU tg128
// 299 → 319 tok/s (297-298 → 334-335 in a later run alternating the two). Tried and dropped: 8 outputs
// per down block, 4 rows per gate/up warp, the down experts sent toward L2 by gate/up, the down
// rows staged in shared memory by 16-byte loads, and h converted to Q8_K inside the down kernel
// (all slower).
#include "kernels/cuda/common.cuh"
#include "kernels/cuda/moe.cuh"

#define DEC_GU_WARPS 4
#define DEC_DOWN_THREADS 256

// The 6-bit scales and mins of sub-blocks 2 jp and 2 jp + 1 of a Q4_K (or Q5_K) super-block, its 12
// scale bytes held in three words.
__device__ __forceinline__ void dec_q4k_pair_scales(uint32_t s0, uint32_t s1, uint32_t s2, int jp, int &sc0, int &m0,
                                                    int &sc1, int &m1)
{
    auto byte = [&](int i) -> int {
        const uint32_t w = i < 4 ? s0 : i < 8 ? s1 : s2;
        return (int)((w >> (8 * (i & 3))) & 0xFFu);
    };
    mpc_q4k_scale_min(byte, 2 * jp, sc0, m0);
    mpc_q4k_scale_min(byte, 2 * jp + 1, sc1, m1);
}

// One lane's part of a Q4_K (Q5_K) dot over two sub-blocks: d and dmin (the block's first word dd)
// and the Q8_K scale dy times the integer sums; |sc · i| < 2^23 per sub-block, so the integer sums
// are exact in float.
__device__ __forceinline__ float dec_q4k_sum(uint32_t dd, float dy, int sc0, int i0, int sc1, int i1, int m0, int ys0,
                                             int m1, int ys1)
{
    const float d = mpc_f16((uint16_t)(dd & 0xFFFFu)), dmin = mpc_f16((uint16_t)(dd >> 16));
    return __fmul_rn(d, dy) * (float)(sc0 * i0 + sc1 * i1) - __fmul_rn(dmin, dy) * (float)(m0 * ys0 + m1 * ys1);
}

// One lane's Q4_K sub-block pair jp (sub-blocks 2jp, 2jp + 1) of a super-block b (16-byte aligned).
struct dec_q4k_pair {
    uint32_t dd, s0, s1, s2;
    uint4 a, c;
    __device__ __forceinline__ void load(const uint8_t *b, int jp)
    {
        dd = *(const uint32_t *)b;
        const uint32_t *sw = (const uint32_t *)(b + 4);
        s0 = sw[0];
        s1 = sw[1];
        s2 = sw[2];
        const uint4 *qs = (const uint4 *)(b + 16 + 32 * jp);
        a = qs[0];
        c = qs[1];
    }
    // Dot with the Q8_K pair y[0..16) (64 int8 in words), its scale dy and the two sub-blocks'
    // sums of y (ys0, ys1).
    __device__ __forceinline__ float dot(const int *y, float dy, int ys0, int ys1, int jp) const
    {
        auto byte = [&](int i) -> int {
            const uint32_t w = i < 4 ? s0 : i < 8 ? s1 : s2;
            return (int)((w >> (8 * (i & 3))) & 0xFFu);
        };
        int sc0, m0, sc1, m1;
        mpc_q4k_scale_min(byte, 2 * jp, sc0, m0);
        mpc_q4k_scale_min(byte, 2 * jp + 1, sc1, m1);
        const uint32_t w[8] = {a.x, a.y, a.z, a.w, c.x, c.y, c.z, c.w};
        int i0 = 0, i1 = 0;
#pragma unroll
        for (int k = 0; k < 8; k++) {
            i0 = __dp4a((int)(w[k] & 0x0F0F0F0Fu), y[k], i0);
            i1 = __dp4a((int)((w[k] >> 4) & 0x0F0F0F0Fu), y[8 + k], i1);
        }
        const float d = mpc_f16((uint16_t)(dd & 0xFFFFu)), dmin = mpc_f16((uint16_t)(dd >> 16));
        // |sc · i| < 2^23 per sub-block: the integer sums are exact in float
        return __fmul_rn(d, dy) * (float)(sc0 * i0 + sc1 * i1) - __fmul_rn(dmin, dy) * (float)(m0 * ys0 + m1 * ys1);
    }
};

template <int R>
__global__ void __launch_bounds__(DEC_GU_WARPS * MPC_WARP)
dec_gate_up_q4k(mpc_expert_t gate, mpc_expert_t up, int64_t n_expert, int64_t n_pairs, const uint8_t *xq,
                size_t xq_row_bytes, const int32_t *ids, int64_t top_k, int64_t n_ff, float *h, int64_t r_base)
{
    mpc_pdl_wait(); // PDL (common.cuh): nothing above reads an earlier kernel's output
    mpc_pdl_trigger();
    const int lane = threadIdx.x % MPC_WARP;
    const int64_t r = r_base + blockIdx.y; // route = row * top_k + k
    const int64_t j0 = ((int64_t)blockIdx.x * DEC_GU_WARPS + threadIdx.x / MPC_WARP) * R;
    if (j0 >= n_ff)
        return;
    const uint8_t *gw = mpc_route_ptr(gate, ids, r, top_k, n_expert), *uw = mpc_route_ptr(up, ids, r, top_k, n_expert);
    if (!gw || !uw) {
        if (lane < R && j0 + lane < n_ff)
            h[r * n_ff + j0 + lane] = 0.0f;
        return;
    }
    const uint8_t *x = xq + (r / top_k) * xq_row_bytes;
    float g[R], u[R];
#pragma unroll
    for (int i = 0; i < R; i++)
        g[i] = u[i] = 0.0f;
    for (int64_t p = lane; p < n_pairs; p += MPC_WARP) {
        const int64_t sb = p / 4;
        const int jp = (int)(p % 4);
        dec_q4k_pair wg[R], wu[R];
#pragma unroll
        for (int i = 0; i < R; i++) { // a row past n_ff reads the last row again; its sum is dropped
            const int64_t j = j0 + i < n_ff ? j0 + i : n_ff - 1;
            wg[i].load(gw + j * gate.row_bytes + sb * 144, jp);
            wu[i].load(uw + j * up.row_bytes + sb * 144, jp);
        }
        const uint8_t *xb = x + sb * 292; // Q8_K, 4-byte aligned
        const float dy = *(const float *)xb;
        const int *yp = (const int *)(xb + 4 + 64 * jp);
        int y[16];
#pragma unroll
        for (int k = 0; k < 16; k++)
            y[k] = yp[k];
        const uint32_t b01 = *(const uint32_t *)(xb + 260 + 8 * jp), b23 = *(const uint32_t *)(xb + 264 + 8 * jp);
        const int ys0 = (int)(int16_t)(b01 & 0xFFFFu) + (int)(int16_t)(b01 >> 16);
        const int ys1 = (int)(int16_t)(b23 & 0xFFFFu) + (int)(int16_t)(b23 >> 16);
#pragma unroll
        for (int i = 0; i < R; i++) {
            g[i] += wg[i].dot(y, dy, ys0, ys1, jp);
            u[i] += wu[i].dot(y, dy, ys0, ys1, jp);
        }
    }
#pragma unroll
    for (int i = 0; i < R; i++) {
        g[i] = mpc_warp_sum(g[i]);
        u[i] = mpc_warp_sum(u[i]);
    }
    if (lane == 0)
#pragma unroll
        for (int i = 0; i < R; i++)
            if (j0 + i < n_ff)
                h[r * n_ff + j0 + i] = g[i] / (1.0f + expf(-g[i])) * u[i];
}

// Lane (hh, tq)'s 32 elements of a Q6_K super-block b (2-byte aligned) dotted with the Q8_K
// super-block yb: elements 128 hh + 32 s + 8 tq + i (s, i < 4, 8).
__device__ __forceinline__ float dec_q6k_dot(const uint8_t *b, const uint8_t *yb, int hh, int tq)
{
    uint32_t l0[2], l1[2], qh[2], sc[2];
    mpc_ld_words<2>(b + 64 * hh + 8 * tq, l0);      // ql of quarters 0 and 2 (low, high nibbles)
    mpc_ld_words<2>(b + 64 * hh + 32 + 8 * tq, l1); // ql of quarters 1 and 3
    mpc_ld_words<2>(b + 128 + 32 * hh + 8 * tq, qh);
    mpc_ld_words<2>(b + 192 + 8 * hh, sc);
    const float d = mpc_f16(mpc_ld16(b + 208));
    const float dy = *(const float *)yb;
    const int *y = (const int *)(yb + 4 + 128 * hh + 8 * tq);
    int total = 0;
#pragma unroll
    for (int s = 0; s < 4; s++) {
        const uint32_t *l = (s & 1) ? l1 : l0;
        int is = 0;
#pragma unroll
        for (int w = 0; w < 2; w++) {
            const uint32_t lo = s < 2 ? l[w] & 0x0F0F0F0Fu : (l[w] >> 4) & 0x0F0F0F0Fu;
            const uint32_t hi = ((qh[w] >> (2 * s)) & 0x03030303u) << 4;
            is = __dp4a((int)__vsub4(lo | hi, 0x20202020u), y[8 * s + w], is); // stored q + 32
        }
        const int si = 2 * s + (tq >> 1); // scale 8 hh + si: the 16-element half this run lies in
        total += (int)(int8_t)((sc[si >> 2] >> (8 * (si & 3))) & 0xFFu) * is;
    }
    // |total| <= 4 · 128 · 8 · 32 · 127 < 2^24: exact in float
    return __fmul_rn(d, dy) * (float)total;
}

// Lane t's (0..8) eighth of a Q4_K super-block b (16-byte aligned) dotted with the Q8_K
// super-block yb: bytes [16 h, 16 h + 16) of 64-element chunk jp's 32 quant bytes (jp = t / 2,
// h = t % 2), whose low nibbles are elements 64 jp + 16 h + i of sub-block 2 jp and whose high
// nibbles elements 64 jp + 32 + 16 h + i of sub-block 2 jp + 1 (i < 16). Q5_K (HIGH) adds each
// element's fifth bit from qh: bit 2 jp (low nibbles) or 2 jp + 1 (high) of qh[16 h + i].
template <bool HIGH>
__device__ __forceinline__ float dec_q45k_dot(const uint8_t *b, const uint8_t *yb, int t)
{
    const int jp = t >> 1, h = t & 1;
    const uint32_t dd = *(const uint32_t *)b;
    const uint32_t *sw = (const uint32_t *)(b + 4);
    const uint32_t s0 = sw[0], s1 = sw[1], s2 = sw[2];
    const uint4 q = *(const uint4 *)(b + (HIGH ? 48 : 16) + 32 * jp + 16 * h);
    uint32_t lo[4] = {q.x & 0x0F0F0F0Fu, q.y & 0x0F0F0F0Fu, q.z & 0x0F0F0F0Fu, q.w & 0x0F0F0F0Fu};
    uint32_t hi[4] = {(q.x >> 4) & 0x0F0F0F0Fu, (q.y >> 4) & 0x0F0F0F0Fu, (q.z >> 4) & 0x0F0F0F0Fu,
                      (q.w >> 4) & 0x0F0F0F0Fu};
    if (HIGH) {
        const uint4 qh = *(const uint4 *)(b + 16 + 16 * h);
        const uint32_t hw[4] = {qh.x, qh.y, qh.z, qh.w};
#pragma unroll
        for (int k = 0; k < 4; k++) {
            lo[k] |= ((hw[k] >> (2 * jp)) & 0x01010101u) << 4;
            hi[k] |= ((hw[k] >> (2 * jp + 1)) & 0x01010101u) << 4;
        }
    }
    int sc0, m0, sc1, m1;
    dec_q4k_pair_scales(s0, s1, s2, jp, sc0, m0, sc1, m1);
    const int *y0 = (const int *)(yb + 4 + 64 * jp + 16 * h), *y1 = (const int *)(yb + 4 + 64 * jp + 32 + 16 * h);
    int i0 = 0, i1 = 0;
#pragma unroll
    for (int k = 0; k < 4; k++) {
        i0 = __dp4a((int)lo[k], y0[k], i0);
        i1 = __dp4a((int)hi[k], y1[k], i1);
    }
    const int16_t *bs = (const int16_t *)(yb + 260); // Q8_K's sums of 16 elements
    const int ys0 = bs[4 * jp + h], ys1 = bs[4 * jp + 2 + h];
    const float dy = *(const float *)yb;
    return dec_q4k_sum(dd, dy, sc0, i0, sc1, i1, m0, ys0, m1, ys1);
}

// The down types of dec_down: the super-block's bytes and a lane's eighth of its dot.
struct dec_q6k {
    static constexpr int bytes = 210;
    __device__ __forceinline__ static float dot(const uint8_t *b, const uint8_t *yb, int t)
    {
        return dec_q6k_dot(b, yb, t / 4, t % 4);
    }
};
struct dec_q4k {
    static constexpr int bytes = 144;
    __device__ __forceinline__ static float dot(const uint8_t *b, const uint8_t *yb, int t)
    {
        return dec_q45k_dot<false>(b, yb, t);
    }
};
struct dec_q5k {
    static constexpr int bytes = 176;
    __device__ __forceinline__ static float dot(const uint8_t *b, const uint8_t *yb, int t)
    {
        return dec_q45k_dot<true>(b, yb, t);
    }
};

// A block of 256 threads computes DB output elements d of one row for all its top_k routes: an
// item (d, k) is one group of LPI lanes (8: one super-block at a time, each lane an eighth of it;
// 32: four super-blocks at a time), items in passes of 256 / LPI.
template <int DB, int LPI, typename Blk>
__global__ void __launch_bounds__(DEC_DOWN_THREADS)
dec_down(mpc_expert_t down, int64_t n_expert, int64_t n_sb, const uint8_t *hq, size_t hq_row_bytes,
         const int32_t *ids, const float *weights, int64_t top_k, int64_t n_embd, float *out, int accumulate,
         int64_t row_base)
{
    constexpr int GROUPS = DEC_DOWN_THREADS / LPI, SB_STEP = LPI / 8;
    __shared__ float part[DB * 32]; // [d_local][k]: weight_k · (down_e[d] · h_k); top_k <= 32
    mpc_pdl_wait(); // PDL (common.cuh): nothing above reads an earlier kernel's output
    mpc_pdl_trigger();
    const int lane = threadIdx.x % LPI, grp = threadIdx.x / LPI, t = lane % 8, sb0 = lane / 8;
    const int64_t row = row_base + blockIdx.y, d0 = (int64_t)blockIdx.x * DB;
    const int items = DB * (int)top_k;
    for (int it0 = 0; it0 < items; it0 += GROUPS) { // the same count for every lane
        const int it = it0 + grp, k = it / DB, dl = it % DB;
        const int64_t d = d0 + dl, r = row * top_k + k;
        const uint8_t *dw = it < items && d < n_embd ? mpc_route_ptr(down, ids, r, top_k, n_expert) : NULL;
        float acc = 0.0f;
        if (dw) {
            const uint8_t *wrow = dw + d * down.row_bytes, *hrow = hq + r * hq_row_bytes;
#pragma unroll 3
            for (int64_t sb = sb0; sb < n_sb; sb += SB_STEP)
                acc += Blk::dot(wrow + sb * Blk::bytes, hrow + sb * 292, t);
        }
#pragma unroll
        for (int off = LPI / 2; off > 0; off >>= 1)
            acc += __shfl_xor_sync(0xffffffffu, acc, off);
        if (lane == 0 && it < items)
            part[dl * 32 + k] = dw ? weights[r] * acc : 0.0f;
    }
    __syncthreads();
    const int64_t d = d0 + threadIdx.x;
    if (threadIdx.x < DB && d < n_embd) {
        float s = 0.0f;
        for (int k = 0; k < (int)top_k; k++) // slot order, one rounding into out
            s += part[threadIdx.x * 32 + k];
        float *o = out + row * n_embd + d;
        *o = accumulate ? *o + s : s;
    }
}

// ---- launchers ----

// The shape, measured on the H200 (bench_cuda 100 decode, bench/NOTES-gpu-exec.md run 30): 2 rows
// per gate/up warp (1 row the same, 19.8 against 19.5 µs for the call; 4 rows 22.4); for down, 4
// outputs per block of top-8 routes, one pass of its 32 groups (8 outputs, two passes: 22.4).
#define DEC_GU_ROWS 2
// down: a whole warp per dot from this many super-blocks a row (n_ff / 256), else 8 lanes.
#define DEC_DOWN_WARP_MIN_SB 8

int mpc_moe_dec_gate_up_q4k(mpc_expert_t gate, mpc_expert_t up, int64_t n_expert, int64_t n_embd, int64_t n_ff,
                            const uint8_t *xq, size_t xq_rb, const int32_t *ids, int64_t top_k, int64_t routes,
                            float *h, cudaStream_t st)
{
    const int64_t per_block = (int64_t)DEC_GU_WARPS * DEC_GU_ROWS, pairs = n_embd / 64;
    for (int64_t r0 = 0; r0 < routes; r0 += MOE_MAX_GRID_Y) {
        const int64_t nr = routes - r0 < MOE_MAX_GRID_Y ? routes - r0 : MOE_MAX_GRID_Y;
        const dim3 grid((unsigned)((n_ff + per_block - 1) / per_block), (unsigned)nr);
        mpc_launch(dec_gate_up_q4k<DEC_GU_ROWS>, grid, dim3(DEC_GU_WARPS * MPC_WARP), 0, st, gate, up, n_expert,
                   pairs, xq, xq_rb, ids, top_k, n_ff, h, r0);
    }
    return cudaGetLastError() == cudaSuccess ? 0 : MP_CUDA_ELAUNCH;
}

static int g_dec_down_lanes = -1; // mp_cuda_moe_set_dec_down: -1 by rule, 0 off, 8 or 32

extern "C" void mp_cuda_moe_set_dec_down(int lanes)
{
    g_dec_down_lanes = lanes == 0 || lanes == 8 || lanes == 32 ? lanes : -1;
}

bool mpc_moe_dec_down_ok(int type, bool vec, int64_t n_ff)
{
    if (g_dec_down_lanes == 0 || n_ff % 256)
        return false;
    return type == MP_TYPE_Q6_K || ((type == MP_TYPE_Q4_K || type == MP_TYPE_Q5_K) && vec);
}

// The outputs per block: one pass of the block's groups over DB · top_k items (at least 4 outputs
// with 8-lane groups: the measured top-8 shape), a power of two.
static int dec_down_outs(int groups, int64_t top_k)
{
    int db = 1;
    while (db < 32 && (int64_t)(2 * db) * top_k <= groups)
        db *= 2;
    return groups == 32 && db < 4 ? 4 : db;
}

template <typename Blk>
static void launch_dec_down(int lanes, int db, dim3 grid, cudaStream_t st, mpc_expert_t down, int64_t n_expert,
                            int64_t n_sb, const uint8_t *hq, size_t hq_rb, const int32_t *ids, const float *weights,
                            int64_t top_k, int64_t n_embd, float *out, int accumulate, int64_t q0)
{
#define DEC_DOWN_CASE(DB, LPI)                                                                                     \
    if (db == DB && lanes == LPI) {                                                                                \
        mpc_launch(dec_down<DB, LPI, Blk>, grid, dim3(DEC_DOWN_THREADS), 0, st, down, n_expert, n_sb, hq, hq_rb, \
                   ids, weights, top_k, n_embd, out, accumulate, q0);                                              \
        return;                                                                                                    \
    }
    DEC_DOWN_CASE(4, 8) DEC_DOWN_CASE(8, 8) DEC_DOWN_CASE(16, 8) DEC_DOWN_CASE(32, 8)
    DEC_DOWN_CASE(1, 32) DEC_DOWN_CASE(2, 32) DEC_DOWN_CASE(4, 32) DEC_DOWN_CASE(8, 32)
#undef DEC_DOWN_CASE
}

int mpc_moe_dec_down(int type, mpc_expert_t down, int64_t n_expert, int64_t n_ff, int64_t n_embd, const uint8_t *hq,
                     size_t hq_rb, const int32_t *ids, const float *weights, int64_t top_k, int64_t n_rows,
                     float *out, int accumulate, cudaStream_t st)
{
    const int64_t n_sb = n_ff / 256;
    const int lanes = g_dec_down_lanes > 0 ? g_dec_down_lanes : n_sb >= DEC_DOWN_WARP_MIN_SB ? 32 : 8;
    const int db = dec_down_outs(DEC_DOWN_THREADS / lanes, top_k);
    for (int64_t q0 = 0; q0 < n_rows; q0 += MOE_MAX_GRID_Y) {
        const int64_t nq = n_rows - q0 < MOE_MAX_GRID_Y ? n_rows - q0 : MOE_MAX_GRID_Y;
        const dim3 grid((unsigned)((n_embd + db - 1) / db), (unsigned)nq);
        if (type == MP_TYPE_Q6_K)
            launch_dec_down<dec_q6k>(lanes, db, grid, st, down, n_expert, n_sb, hq, hq_rb, ids, weights, top_k,
                                     n_embd, out, accumulate, q0);
        else if (type == MP_TYPE_Q5_K)
            launch_dec_down<dec_q5k>(lanes, db, grid, st, down, n_expert, n_sb, hq, hq_rb, ids, weights, top_k,
                                     n_embd, out, accumulate, q0);
        else
            launch_dec_down<dec_q4k>(lanes, db, grid, st, down, n_expert, n_sb, hq, hq_rb, ids, weights, top_k,
                                     n_embd, out, accumulate, q0);
    }
    return cudaGetLastError() == cudaSuccess ? 0 : MP_CUDA_ELAUNCH;
}
