// kernels/cuda/moe.cu — the MoE block on the device: router (softmax, top-k, renormalization)
// and the experts over grouped routes (gate/up + SwiGLU, then down + weighted combine).
//
// Decode shape this is designed for: 1 row, top-8 of 128 experts, n_embd 2048, n_ff 768.
//   gate/up:  one launch, grid (n_ff / 4 warps, n_routes): a warp computes gate and up row j of
//             route r's expert and writes h[r, j] = silu(g) * u. All 8 experts' weights stream
//             concurrently, 8 × 768 × 2 rows.
//   down:     one launch, grid (n_embd / 4 warps, n_rows): a warp owns output element (row, d) and
//             sums weights[row, k] · (down_e[d] · h[row, k]) over the k routes in f32 — the
//             combine is fused, deterministic, and rounds once per output element (no atomics).
// Activations are converted to the weights' partner formats (cuda_ops.h) in between, exactly as
// the CPU path does, so CPU experts and GPU experts see the same quantized inputs.
// Q4_K gate/up (16-byte aligned rows) and Q6_K down take moe_dec.cu's kernels on this path instead.
// Routes whose expert has no slot (d_slots[e] == NULL: not resident) or an id outside
// [0, n_expert) contribute nothing; the hybrid runtime adds the CPU's partial (accumulate).
#include "kernels/cuda/common.cuh"
#include "kernels/cuda/gemv.cuh"
#include "kernels/cuda/moe.cuh"

#define MOE_WARPS 4
// Batches of at least MOE_GROUP_MIN_ROWS rows take the grouped path: routes sorted by expert,
// each group of up to MOE_GROUP routes of one expert reads that expert's weights once (the
// constants live with the scratch sizes, kernels/cuda_sizes.h).
#define MOE_GROUP MP_CUDA_MOE_GROUP
#define MOE_GROUP_MIN_ROWS MP_CUDA_MOE_GROUP_MIN_ROWS

template <int T, bool VEC>
__global__ void __launch_bounds__(MOE_WARPS * MPC_WARP)
gate_up_kernel(mpc_expert_t gate, mpc_expert_t up, int64_t n_expert, int64_t n_units,
               const uint8_t *xq, size_t xq_row_bytes, const int32_t *ids, int64_t top_k,
               int64_t n_ff, float *h, int64_t r_base, mpc_act_t act)
{
    mpc_pdl_wait(); // PDL (common.cuh): nothing above reads an earlier kernel's output
    mpc_pdl_trigger();
    const int lane = threadIdx.x % MPC_WARP;
    const int64_t r = r_base + blockIdx.y; // route = row * top_k + k
    const int64_t j = (int64_t)blockIdx.x * MOE_WARPS + threadIdx.x / MPC_WARP;
    if (j >= n_ff)
        return;
    const uint8_t *gw = mpc_route_ptr(gate, ids, r, top_k, n_expert), *uw = mpc_route_ptr(up, ids, r, top_k, n_expert);
    if (!gw || !uw) {
        if (lane == 0)
            h[r * n_ff + j] = 0.0f;
        return;
    }
    const uint8_t *x = xq + (r / top_k) * xq_row_bytes;
    // gate and up rows together, two units each in flight per lane (see gemv.cu)
    const uint8_t *grow = gw + j * gate.row_bytes, *urow = uw + j * up.row_bytes;
    float g = 0.0f, u = 0.0f;
    for (int64_t v = lane; v < n_units; v += 2 * MPC_WARP) {
        const bool has1 = v + MPC_WARP < n_units;
        mpc_unit<T, VEC> g0, g1, u0, u1;
        g0.load(grow, v);
        u0.load(urow, v);
        if (has1) {
            g1.load(grow, v + MPC_WARP);
            u1.load(urow, v + MPC_WARP);
        }
        g += g0.dot(x, v);
        u += u0.dot(x, v);
        if (has1) {
            g += g1.dot(x, v + MPC_WARP);
            u += u1.dot(x, v + MPC_WARP);
        }
    }
    g = mpc_warp_sum(g);
    u = mpc_warp_sum(u);
    if (lane == 0)
        h[r * n_ff + j] = mpc_expert_act(act, ids[r], n_ff, j, g, u);
}

template <int T, bool VEC>
__global__ void __launch_bounds__(MOE_WARPS * MPC_WARP)
down_combine_kernel(mpc_expert_t down, int64_t n_expert, int64_t n_units, const uint8_t *hq,
                    size_t hq_row_bytes, const int32_t *ids, const float *weights, int64_t top_k,
                    int64_t n_embd, float *out, int accumulate, int64_t row_base)
{
    mpc_pdl_wait(); // PDL (common.cuh): nothing above reads an earlier kernel's output
    mpc_pdl_trigger();
    const int lane = threadIdx.x % MPC_WARP;
    const int64_t row = row_base + blockIdx.y;
    const int64_t d = (int64_t)blockIdx.x * MOE_WARPS + threadIdx.x / MPC_WARP;
    if (d >= n_embd)
        return;
    // the row's routes, one per lane (top_k <= 32), broadcast by shuffles: no dependent global
    // loads between one route's weights and the next
    const int32_t my_id = lane < top_k ? ids[row * top_k + lane] : -1;
    const float my_w = lane < top_k ? weights[row * top_k + lane] : 0.0f;
    // far routes: the row's cold routes, one bit per lane (mpc_cold_mask's bits)
    const uint32_t cold = down.far_of_cold ? __ballot_sync(0xffffffffu, lane < top_k && my_id >= 0 &&
                                                           my_id < n_expert && !down.slots[my_id]) : 0u;
    // each lane accumulates weight_k · (its units of route k) over all k in slot order, and the
    // warp sums once at the end: one f32 accumulator, one rounding into out
    float acc = 0.0f;
#pragma unroll 4
    for (int k = 0; k < (int)top_k; k++) {
        const int32_t e = __shfl_sync(0xffffffffu, my_id, k);
        const float wk = __shfl_sync(0xffffffffu, my_w, k);
        const uint8_t *dw = mpc_expert_ptr(down, e, n_expert);
        if (!dw && (cold >> k & 1u))
            dw = mpc_far_ptr(down, row, cold, k);
        if (!dw) // uniform over the warp
            continue;
        const uint8_t *wrow = dw + d * down.row_bytes, *h = hq + (row * top_k + k) * hq_row_bytes;
        for (int64_t u = lane; u < n_units; u += MPC_WARP) {
            mpc_unit<T, VEC> w0;
            w0.load(wrow, u);
            acc += wk * w0.dot(h, u);
        }
    }
    acc = mpc_warp_sum(acc);
    if (lane == 0)
        out[row * n_embd + d] = accumulate ? out[row * n_embd + d] + acc : acc;
}

// Steps of at least MOE_MMA_MIN_ROWS rows run quantized experts on the tensor cores (moe_mma.cu),
// by the kernel that takes them (mpc_moe_mma_plan): where the measurements against the CUDA-core
// grouped path cross, for every expert shape measured. H100, bench_cuda 10 prefill, 2026-12-05,
// grouped / tensor cores in us at 16 / 32 / 64 rows: Mixtral's top-2 of 8, Q4_K/Q6_K, 932 / 1658 /
// 3013 against 1389 / 1382 / 1389; 256 experts' top-8 (FFN 512) 358 / 534 / 785 against 368 / 517
// / 699; the 30B's top-8 of 128 497 (32) / 701 against 517 / 597, Q8_0 425 / 608 against 436 /
// 476; gpt-oss-20b's MXFP4 top-4 of 32 (the first kernel) 430 / 626 / 1015 against 514 / 566 /
// 573. Every shape crosses between 16 and 64 rows, most near 32, in rows rather than in routes an
// expert (those are 4-8 for Mixtral, under 1 for the 256 experts, 2-4 for the 30B at the crossing).
// At 32 the 30B pays 4-45 % by type (2026-12-06: Q3_K/Q4_K 419 / 616 / 797 at 32 / 64 / 96 against
// 565 / 664 / 670, Q2_K as Q3_K, Q5_K, IQ4_XS and Q4_K/Q6_K crossing below 64; the H200 crossed
// between 32 and 64 too: 2026-11-29): at most ~150 us a layer, in a prompt's last step only. Mixtral
// gains 1.2x. mp_cuda_moe_set_mma_min_rows overrides it (tests force the path from 16 rows; 0: never).
#define MOE_MMA_MIN_ROWS 32
static int64_t g_mma_min_rows = -1; // -1: MOE_MMA_MIN_ROWS; 0: never; else rows

extern "C" void mp_cuda_moe_set_mma_min_rows(int64_t rows)
{
    g_mma_min_rows = rows < 0 ? -1 : rows;
}

extern "C" int mp_cuda_moe_mma_available(void)
{
    return mpc_moe_mma_ok(MP_TYPE_Q8_0, MP_TYPE_Q8_0);
}

// Whether a step of n_rows rows whose tensor-core plan is `plan` (MPC_MMA_*) runs on the tensor cores.
static bool mma_rows(int plan, int64_t n_rows)
{
    const int64_t min = g_mma_min_rows >= 0 ? g_mma_min_rows : MOE_MMA_MIN_ROWS;
    return plan != MPC_MMA_NONE && min > 0 && n_rows >= min;
}

static size_t align256(size_t b)
{
    return (b + 255) & ~(size_t)255;
}

static mpc_act_t act_of(const mp_cuda_moe_args *a)
{
    return mpc_act_t{a->d_gate_b, a->d_up_b, a->act};
}

// mp_cuda_moe_scratch_bytes: kernels/cuda_sizes.h (its grouped path's buffers are carved below)


template <int T, bool VEC>
static void launch_gate_up(const mp_cuda_moe_args *a, mpc_expert_t gate, mpc_expert_t up, int64_t n_units,
                           const uint8_t *xq, size_t xq_rb, float *h, cudaStream_t st)
{
    const int64_t routes = a->n_rows * a->top_k;
    for (int64_t r0 = 0; r0 < routes; r0 += MOE_MAX_GRID_Y) {
        const int64_t nr = routes - r0 < MOE_MAX_GRID_Y ? routes - r0 : MOE_MAX_GRID_Y;
        const dim3 grid((unsigned)((a->n_ff + MOE_WARPS - 1) / MOE_WARPS), (unsigned)nr);
        mpc_launch(gate_up_kernel<T, VEC>, dim3(grid), dim3(MOE_WARPS * MPC_WARP), 0, st,
                   gate, up, a->n_expert, n_units, xq, xq_rb, a->d_ids, a->top_k, a->n_ff, h, r0, act_of(a));
    }
}

template <int T, bool VEC>
static void launch_down(const mp_cuda_moe_args *a, mpc_expert_t down, int64_t n_units, const uint8_t *hq,
                        size_t hq_rb, cudaStream_t st)
{
    for (int64_t q0 = 0; q0 < a->n_rows; q0 += MOE_MAX_GRID_Y) {
        const int64_t nq = a->n_rows - q0 < MOE_MAX_GRID_Y ? a->n_rows - q0 : MOE_MAX_GRID_Y;
        const dim3 grid((unsigned)((a->n_embd + MOE_WARPS - 1) / MOE_WARPS), (unsigned)nq);
        mpc_launch(down_combine_kernel<T, VEC>, dim3(grid), dim3(MOE_WARPS * MPC_WARP), 0, st,
                   down, a->n_expert, n_units, hq, hq_rb, a->d_ids, a->d_weights, a->top_k,
                   a->n_embd, a->d_out, a->accumulate, q0);
    }
}


// ---- far routes: their experts' weights gathered from host memory ----
//
// far_gather_kernel: block (x, y, z) copies chunk x of tensor z (gate, up, down) of far slot y =
// row · far_max + rank, when the row has that many far routes: the rank-th cold route's expert,
// from its host copy (read over the bus) into the stage. Reads are 16 bytes per thread, four in
// flight, a 16 KB chunk per block: the wide coalesced reads a bus transfer wants (the expert
// kernels' own loads, 4-16 bytes scattered over rows, read host memory at about two thirds of
// the rate; bench/NOTES-gpu-exec.md run 31).
// A split last far route (d_far_split_of_cold: r0 > 0) is gathered in part: byte p of a tensor
// (row p / row_bytes, byte p % row_bytes of it) is copied when row >= row_lo and byte >= col_lo,
// else written as zero without reading the host; gate/up: row_lo = r0, col_lo = 0; down: row_lo
// = 0, col_lo = the bytes of r0 elements. All-zero bytes decode to 0 in every type, so the expert
// kernels, unchanged, compute h[j] = silu(0) · 0 = 0 for j < r0 (with gate/up biases a finite value
// that the zero columns of down cancel) and down's dot over columns >= r0.
// A 16-byte vector wholly on one side is loaded (four in flight) or zero-filled; one that crosses
// a boundary is loaded whole with the others and stored with the CPU's bytes masked to zero. (It
// went byte by byte, 16 one-byte reads over the bus each: Qwen3-30B-A3B's Q6_K down rows of 630
// bytes cross a boundary twice a row, 4,096 such vectors an expert, and a split half expert took
// the GPU 203 us a layer step against 80 for a whole one; calibrate's grid, H200, 2026-12-04.)
// SPLIT: a split table is given (without one, the whole-copy code).
#define FAR_CHUNK 16384
#define FAR_THREADS 256

static size_t far_stride(const mp_cuda_moe_args *a)
{
    return align256(a->gate.expert_bytes) + align256(a->up.expert_bytes) + align256(a->down.expert_bytes);
}

extern "C" size_t mp_cuda_moe_far_stage_bytes(const mp_cuda_moe_args *a)
{
    if (!a || a->n_rows < 1 || a->far_max < 1)
        return 0;
    return (size_t)a->n_rows * (size_t)a->far_max * far_stride(a);
}

struct far_src {
    const void *const *tab[3]; // per tensor: expert e's host copy, as the device sees it
    size_t bytes[3];
    size_t off[3];             // the tensor's offset in a stage slot
    size_t row_bytes[3];
    const int32_t *split_of_cold; // mp_cuda_moe_args.d_far_split_of_cold (NULL: no split routes)
    int64_t n_ff;
    size_t down_data_bytes;    // bytes of n_ff elements of the down's type: a down row, padding excluded
};

// The GPU's part of a split route's tensor: the bytes p >= lo_byte (gate/up: from row r0 on;
// ~0: none) whose column p % row_bytes is >= col_lo (down: from the bytes of r0 elements on; 0:
// every column). A vector's test costs one 32-bit division at most (a tensor's bytes fit 32 bits
// when it has a column split: checked at the launch): with 64-bit divisions in every byte's test,
// the gather's blocks spent longer on them than on the bus (bench_cuda far, H200, 2026-12-04).
struct far_part {
    size_t lo_byte;
    uint32_t row_bytes, col_lo;
};

__device__ __forceinline__ uint32_t far_col(const far_part &q, size_t p)
{
    return (uint32_t)p % q.row_bytes;
}

__device__ __forceinline__ bool far_copied(const far_part &q, size_t p)
{
    return p >= q.lo_byte && (!q.col_lo || far_col(q, p) >= q.col_lo);
}

enum { FAR_ZERO = 0, FAR_COPY = 1, FAR_MIXED = 2 };

// Bytes [p, p + 16) of a split route's tensor: all copied, all zero, or mixed (a vector that
// reaches the next row is mixed under a column split: that row starts with the CPU's bytes).
__device__ __forceinline__ int far_vec_part(const far_part &q, size_t p)
{
    if (!q.col_lo)
        return p >= q.lo_byte ? FAR_COPY : p + 15 < q.lo_byte ? FAR_ZERO : FAR_MIXED;
    const uint32_t c = far_col(q, p);
    if (c + 15 >= q.row_bytes)
        return FAR_MIXED;
    return c >= q.col_lo ? FAR_COPY : c + 15 < q.col_lo ? FAR_ZERO : FAR_MIXED;
}

// A mixed vector v of bytes [p, p + 16) with the bytes not copied (the CPU's) set to zero: byte b
// of v is byte b % 4 of word b / 4 (little-endian).
__device__ __forceinline__ uint4 far_vec_masked(const far_part &q, size_t p, uint4 v)
{
    uint32_t w[4] = {v.x, v.y, v.z, v.w};
    uint32_t c = q.col_lo ? far_col(q, p) : 0;
#pragma unroll
    for (int i = 0; i < 4; i++) {
        uint32_t keep = 0;
#pragma unroll
        for (int b = 0; b < 4; b++) {
            const size_t at = p + (size_t)(4 * i + b);
            keep |= at >= q.lo_byte && (!q.col_lo || c >= q.col_lo) ? 0xffu << (8 * b) : 0u;
            if (q.col_lo && ++c == q.row_bytes)
                c = 0;
        }
        w[i] &= keep;
    }
    return make_uint4(w[0], w[1], w[2], w[3]);
}

template <bool SPLIT>
__global__ void __launch_bounds__(FAR_THREADS)
far_gather_kernel(mpc_expert_t gate, far_src src, int64_t n_expert, const int32_t *ids, int64_t top_k, uint8_t *stage)
{
    mpc_pdl_wait(); // the ids are the router's
    mpc_pdl_trigger();
    const int64_t row = blockIdx.y / gate.far_max;
    const int rank = (int)(blockIdx.y % gate.far_max), t = blockIdx.z;
    if ((size_t)blockIdx.x * FAR_CHUNK >= src.bytes[t])
        return;
    const int32_t *rid = ids + row * top_k;
    const uint32_t cold = mpc_cold_mask(gate, rid, top_k, n_expert);
    const int count = mpc_far_count(gate, cold);
    if (rank >= count)
        return;
    int k = 0; // the rank-th set bit of cold
    for (uint32_t m = cold, left = (uint32_t)rank;; m &= m - 1u, left--)
        if (!left) {
            k = __ffs(m) - 1;
            break;
        }
    // the row's last far route may be split: r0 clamped to 0..n_ff (n_ff: nothing copied)
    far_part q = {0, (uint32_t)src.row_bytes[t], 0};
    if (SPLIT && rank == count - 1) {
        const int32_t r0 = src.split_of_cold[__popc(cold)];
        if (r0 >= src.n_ff)
            q.lo_byte = ~(size_t)0;
        else if (r0 > 0 && t < 2)
            q.lo_byte = (size_t)r0 * src.row_bytes[t];
        else if (r0 > 0)
            q.col_lo = (uint32_t)(src.down_data_bytes * (size_t)r0 / (size_t)src.n_ff);
    }
    const bool split = q.lo_byte || q.col_lo;
    const uint8_t *expert = (const uint8_t *)src.tab[t][rid[k]];
    uint8_t *slot = stage + (blockIdx.y * gate.far_stride + src.off[t]);
    // the tensor's 16 KB chunks, gridDim.x blocks striding over them: a step whose rows have fewer
    // far routes than the grid's ranks leaves those blocks nothing to do, and they are few
    for (size_t at = (size_t)blockIdx.x * FAR_CHUNK; at < src.bytes[t]; at += (size_t)gridDim.x * FAR_CHUNK) {
        const uint8_t *from = expert + at;
        uint8_t *to = slot + at;
        const size_t n = src.bytes[t] - at < FAR_CHUNK ? src.bytes[t] - at : FAR_CHUNK;
        if (((uintptr_t)from | (uintptr_t)to | n) % 16 == 0) {
            const uint4 *f = (const uint4 *)from;
            uint4 *o = (uint4 *)to;
            const size_t n16 = n / 16;
            for (size_t i = threadIdx.x; i < n16; i += 4 * FAR_THREADS) {
                uint4 v[4];
                int part[4];
#pragma unroll
                for (int j = 0; j < 4; j++) {
                    const size_t vi = i + (size_t)j * FAR_THREADS;
                    part[j] = vi >= n16 ? FAR_ZERO : split ? far_vec_part(q, at + 16 * vi) : FAR_COPY;
                    if (vi < n16 && part[j] != FAR_ZERO)
                        v[j] = f[vi];
                }
#pragma unroll
                for (int j = 0; j < 4; j++) {
                    const size_t vi = i + (size_t)j * FAR_THREADS;
                    if (vi >= n16)
                        continue;
                    if (part[j] == FAR_COPY)
                        o[vi] = v[j];
                    else if (part[j] == FAR_ZERO)
                        o[vi] = make_uint4(0u, 0u, 0u, 0u);
                    else
                        o[vi] = far_vec_masked(q, at + 16 * vi, v[j]);
                }
            }
        } else {
            for (size_t i = threadIdx.x; i < n; i += FAR_THREADS)
                to[i] = (!split || far_copied(q, at + i)) ? from[i] : 0;
        }
    }
}

// Blocks per (row, rank, tensor) of the gather: about two waves of the device's SMs over all of
// them, at most one per chunk, at least one. Every block of a rank the step does not run exits at
// once, and those are what a layer step with few cold routes pays for: with one block per chunk,
// Mixtral's 38 MB tensors launched 14,000 blocks a layer step, and its layer step with far routes
// on and no route cold took 124 us more than with them off (calibrate's grid, H200, 2026-12-02).
// g_far_blocks > 0 (mp_cuda_moe_set_far_blocks) fixes the count instead.
static int g_far_blocks = 0;

extern "C" void mp_cuda_moe_set_far_blocks(int blocks)
{
    g_far_blocks = blocks > 0 ? blocks : 0;
}

static unsigned far_blocks_x(size_t chunks, int64_t ranks)
{
    const int sms = mpc_sm_count();
    int64_t b = g_far_blocks > 0 ? g_far_blocks : (2 * (int64_t)(sms > 0 ? sms : 132)) / (3 * (ranks > 0 ? ranks : 1));
    b = b < 1 ? 1 : b;
    return (unsigned)((size_t)b < chunks ? (size_t)b : chunks);
}

// bus_read_kernel: the far gather's loads (16-byte, four in flight per thread, 16 KB chunks, blocks
// striding over them) on one plain range of mapped host memory, stored into a device buffer of
// dst_n16 vectors that the chunks wrap around: what the far routes draw from host memory when
// nothing else limits them (mp_cuda_bus_read).
__global__ void __launch_bounds__(FAR_THREADS) bus_read_kernel(const uint4 *src, size_t n16, uint4 *dst, size_t dst_n16)
{
    mpc_pdl_wait(); // dst is also the launch before's
    mpc_pdl_trigger();
    const size_t per_chunk = FAR_CHUNK / 16;
    for (size_t at = (size_t)blockIdx.x * per_chunk; at < n16; at += (size_t)gridDim.x * per_chunk) {
        const size_t end = n16 - at < per_chunk ? n16 - at : per_chunk;
        uint4 *o = dst + at % dst_n16;
        for (size_t i = threadIdx.x; i < end; i += 4 * FAR_THREADS) {
            uint4 v[4];
#pragma unroll
            for (int j = 0; j < 4; j++)
                if (i + (size_t)j * FAR_THREADS < end)
                    v[j] = src[at + i + (size_t)j * FAR_THREADS];
#pragma unroll
            for (int j = 0; j < 4; j++)
                if (i + (size_t)j * FAR_THREADS < end)
                    o[i + (size_t)j * FAR_THREADS] = v[j];
        }
    }
}

extern "C" int mp_cuda_bus_read(const void *d_src, size_t bytes, void *d_dst, size_t dst_bytes, void *stream)
{
    if (!d_src || !d_dst || bytes < 16 || dst_bytes < FAR_CHUNK || ((uintptr_t)d_src | (uintptr_t)d_dst) % 16 ||
        dst_bytes % FAR_CHUNK)
        return MP_CUDA_EINVAL;
    const size_t n16 = bytes / 16, chunks = (n16 * 16 + FAR_CHUNK - 1) / FAR_CHUNK;
    const int sms = mpc_sm_count();
    const size_t blocks = 2 * (size_t)(sms > 0 ? sms : 132);
    mpc_launch(bus_read_kernel, dim3((unsigned)(blocks < chunks ? blocks : chunks)), dim3(FAR_THREADS), 0,
               (cudaStream_t)stream, (const uint4 *)d_src, n16, (uint4 *)d_dst, dst_bytes / 16);
    return mpc_launch_status();
}

// ---- grouped path (prefill): routes sorted by expert, one weight pass per group ----
//
// group_kernel (one block): counting sort of the routes by expert into perm, and a table of
// groups (expert, first index into perm, count <= gs: MOE_GROUP here, MPC_MMA_GROUP for the
// tensor-core path of moe_mma.cu, which takes the steps mma_rows() gives it). Order within an
// expert is arbitrary (atomics): every route's output is computed by itself, so the result does not
// depend on it. gate_up_grouped / down_grouped: a warp owns one output row j of the group's
// expert and dots it with the group's activation rows (each weight unit loaded once for all of
// them), writing h / y per route. combine_kernel: out[row] (+)= Σ_k w[row, k] · y[route] in slot
// order, routes of experts without a slot skipped.

__global__ void group_kernel(const int32_t *ids, int64_t routes, int64_t n_expert, int gs, int32_t *perm,
                             int4 *groups, int32_t *n_groups)
{
    extern __shared__ int32_t sh[]; // cnt[n_expert], cur[n_expert]
    int32_t *cnt = sh, *cur = sh + n_expert;
    for (int64_t e = threadIdx.x; e < n_expert; e += blockDim.x)
        cnt[e] = 0;
    __syncthreads();
    for (int64_t r = threadIdx.x; r < routes; r += blockDim.x) {
        const int32_t e = ids[r];
        if (e >= 0 && e < n_expert)
            atomicAdd(&cnt[e], 1);
    }
    __syncthreads();
    if (threadIdx.x == 0) {
        int32_t off = 0, g = 0;
        for (int64_t e = 0; e < n_expert; e++) {
            cur[e] = off;
            for (int32_t c0 = 0; c0 < cnt[e]; c0 += gs)
                groups[g++] = make_int4((int)e, off + c0, cnt[e] - c0 < gs ? cnt[e] - c0 : gs, 0);
            off += cnt[e];
        }
        *n_groups = g;
    }
    __syncthreads();
    for (int64_t r = threadIdx.x; r < routes; r += blockDim.x) {
        const int32_t e = ids[r];
        if (e >= 0 && e < n_expert)
            perm[atomicAdd(&cur[e], 1)] = (int32_t)r;
    }
}

template <int T, bool VEC>
__global__ void __launch_bounds__(MOE_WARPS * MPC_WARP)
gate_up_grouped(mpc_expert_t gate, mpc_expert_t up, int64_t n_expert, int64_t n_units,
                const uint8_t *xq, size_t xq_row_bytes, const int32_t *perm, const int4 *groups,
                const int32_t *n_groups, int64_t top_k, int64_t n_ff, float *h, mpc_act_t act)
{
    if ((int64_t)blockIdx.y >= (int64_t)*n_groups)
        return;
    const int lane = threadIdx.x % MPC_WARP;
    const int64_t j = (int64_t)blockIdx.x * MOE_WARPS + threadIdx.x / MPC_WARP;
    const int4 grp = groups[blockIdx.y];
    const uint8_t *gw = mpc_expert_ptr(gate, grp.x, n_expert), *uw = mpc_expert_ptr(up, grp.x, n_expert);
    if (j >= n_ff || !gw || !uw)
        return;
    const int cnt = grp.z;
    int32_t r[MOE_GROUP];
    const uint8_t *x[MOE_GROUP];
#pragma unroll
    for (int i = 0; i < MOE_GROUP; i++) {
        r[i] = i < cnt ? perm[grp.y + i] : 0;
        x[i] = xq + (size_t)(r[i] / top_k) * xq_row_bytes;
    }
    const uint8_t *grow = gw + j * gate.row_bytes, *urow = uw + j * up.row_bytes;
    float ga[MOE_GROUP], ua[MOE_GROUP];
#pragma unroll
    for (int i = 0; i < MOE_GROUP; i++)
        ga[i] = ua[i] = 0.0f;
    for (int64_t v = lane; v < n_units; v += MPC_WARP) {
        mpc_unit<T, VEC> g0, u0;
        g0.load(grow, v);
        u0.load(urow, v);
#pragma unroll
        for (int i = 0; i < MOE_GROUP; i++)
            if (i < cnt) {
                ga[i] += g0.dot(x[i], v);
                ua[i] += u0.dot(x[i], v);
            }
    }
#pragma unroll
    for (int i = 0; i < MOE_GROUP; i++)
        if (i < cnt) { // uniform over the warp
            const float g = mpc_warp_sum(ga[i]), u = mpc_warp_sum(ua[i]);
            if (lane == 0)
                h[(int64_t)r[i] * n_ff + j] = mpc_expert_act(act, grp.x, n_ff, j, g, u);
        }
}

template <int T, bool VEC>
__global__ void __launch_bounds__(MOE_WARPS * MPC_WARP)
down_grouped(mpc_expert_t down, int64_t n_expert, int64_t n_units, const uint8_t *hq,
             size_t hq_row_bytes, const int32_t *perm, const int4 *groups, const int32_t *n_groups,
             int64_t n_embd, float *y)
{
    if ((int64_t)blockIdx.y >= (int64_t)*n_groups)
        return;
    const int lane = threadIdx.x % MPC_WARP;
    const int64_t d = (int64_t)blockIdx.x * MOE_WARPS + threadIdx.x / MPC_WARP;
    const int4 grp = groups[blockIdx.y];
    const uint8_t *dw = mpc_expert_ptr(down, grp.x, n_expert);
    if (d >= n_embd || !dw)
        return;
    const int cnt = grp.z;
    int32_t r[MOE_GROUP];
    const uint8_t *hx[MOE_GROUP];
#pragma unroll
    for (int i = 0; i < MOE_GROUP; i++) {
        r[i] = i < cnt ? perm[grp.y + i] : 0;
        hx[i] = hq + (size_t)r[i] * hq_row_bytes;
    }
    const uint8_t *wrow = dw + d * down.row_bytes;
    float acc[MOE_GROUP];
#pragma unroll
    for (int i = 0; i < MOE_GROUP; i++)
        acc[i] = 0.0f;
    for (int64_t u = lane; u < n_units; u += MPC_WARP) {
        mpc_unit<T, VEC> w0;
        w0.load(wrow, u);
#pragma unroll
        for (int i = 0; i < MOE_GROUP; i++)
            if (i < cnt)
                acc[i] += w0.dot(hx[i], u);
    }
#pragma unroll
    for (int i = 0; i < MOE_GROUP; i++)
        if (i < cnt) {
            const float v = mpc_warp_sum(acc[i]);
            if (lane == 0)
                y[(int64_t)r[i] * n_embd + d] = v;
        }
}

__global__ void combine_kernel(mpc_expert_t down, int64_t n_expert, const float *y,
                               const int32_t *ids, const float *weights, int64_t top_k,
                               int64_t n_embd, float *out, int accumulate, int64_t row0)
{
    const int64_t row = row0 + blockIdx.y;
    const int64_t d = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (d >= n_embd)
        return;
    float acc = 0.0f;
    for (int64_t k = 0; k < top_k; k++) {
        const int64_t r = row * top_k + k;
        if (!mpc_expert_ptr(down, ids[r], n_expert))
            continue;
        acc += weights[r] * y[r * n_embd + d];
    }
    float *o = out + row * n_embd + d;
    *o = accumulate ? *o + acc : acc;
}

template <int T, bool VEC>
static void launch_gate_up_grouped(const mp_cuda_moe_args *a, int64_t n_units, const uint8_t *xq,
                                   size_t xq_rb, const int32_t *perm, const int4 *groups,
                                   const int32_t *n_groups, int64_t max_groups, float *h, cudaStream_t st)
{
    const dim3 grid((unsigned)((a->n_ff + MOE_WARPS - 1) / MOE_WARPS), (unsigned)max_groups);
    gate_up_grouped<T, VEC><<<grid, MOE_WARPS * MPC_WARP, 0, st>>>(
        mpc_expert_of(a->gate), mpc_expert_of(a->up), a->n_expert, n_units, xq, xq_rb, perm, groups,
        n_groups, a->top_k, a->n_ff, h, act_of(a));
}

template <int T, bool VEC>
static void launch_down_grouped(const mp_cuda_moe_args *a, int64_t n_units, const uint8_t *hq,
                                size_t hq_rb, const int32_t *perm, const int4 *groups,
                                const int32_t *n_groups, int64_t max_groups, float *y, cudaStream_t st)
{
    const dim3 grid((unsigned)((a->n_embd + MOE_WARPS - 1) / MOE_WARPS), (unsigned)max_groups);
    down_grouped<T, VEC><<<grid, MOE_WARPS * MPC_WARP, 0, st>>>(
        mpc_expert_of(a->down), a->n_expert, n_units, hq, hq_rb, perm, groups, n_groups, a->n_embd, y);
}

// Q4_K experts take the 128-bit loads (gemv.cuh) when their rows are 16-byte aligned.
#define MOE_TYPE_SWITCH(type, vec, CALL)                                       \
    switch (type) {                                                            \
    case MP_TYPE_F32: CALL(MP_TYPE_F32, false); break;                         \
    case MP_TYPE_F16: CALL(MP_TYPE_F16, false); break;                         \
    case MP_TYPE_BF16: CALL(MP_TYPE_BF16, false); break;                       \
    case MP_TYPE_Q4_0: CALL(MP_TYPE_Q4_0, false); break;                       \
    case MP_TYPE_Q8_0: CALL(MP_TYPE_Q8_0, false); break;                       \
    case MP_TYPE_Q4_1: CALL(MP_TYPE_Q4_1, false); break;                       \
    case MP_TYPE_Q5_0: CALL(MP_TYPE_Q5_0, false); break;                       \
    case MP_TYPE_Q5_1: CALL(MP_TYPE_Q5_1, false); break;                       \
    case MP_TYPE_IQ4_NL: CALL(MP_TYPE_IQ4_NL, false); break;                   \
    case MP_TYPE_MXFP4: CALL(MP_TYPE_MXFP4, false); break;                     \
    case MP_TYPE_Q4_K:                                                         \
        if (vec) CALL(MP_TYPE_Q4_K, true); else CALL(MP_TYPE_Q4_K, false);     \
        break;                                                                 \
    case MP_TYPE_Q2_K: CALL(MP_TYPE_Q2_K, false); break;                       \
    case MP_TYPE_Q3_K: CALL(MP_TYPE_Q3_K, false); break;                       \
    case MP_TYPE_Q5_K: CALL(MP_TYPE_Q5_K, false); break;                       \
    case MP_TYPE_Q6_K: CALL(MP_TYPE_Q6_K, false); break;                       \
    case MP_TYPE_IQ4_XS: CALL(MP_TYPE_IQ4_XS, false); break;                   \
    default: return MP_CUDA_EINVAL;                                            \
    }

static bool expert_vec(const mp_cuda_expert_tensor &t)
{
    if (t.row_bytes % 16)
        return false;
    return t.d_slots || ((uintptr_t)t.d_base % 16 == 0 && t.expert_bytes % 16 == 0);
}

static bool expert_tensor_ok(const mp_cuda_expert_tensor &t, int64_t n_in, int64_t n_out)
{
    const size_t rb = mpc_row_bytes(t.type, n_in);
    const size_t wa = mpc_weight_align(t.type, false);
    if (rb == 0 || t.row_bytes < rb || t.row_bytes % wa)
        return false;
    if (t.d_slots)
        return true;
    return t.d_base && (uintptr_t)t.d_base % wa == 0 && t.expert_bytes % wa == 0 &&
           t.expert_bytes >= (size_t)n_out * t.row_bytes;
}

extern "C" int mp_cuda_moe_experts(const mp_cuda_moe_args *a, void *stream)
{
    if (!a || a->n_rows < 0 || a->top_k < 1 || a->top_k > 32 || a->n_expert < 1 || a->n_embd < 1 ||
        a->n_ff < 1 ||
        a->gate.type != a->up.type || !expert_tensor_ok(a->gate, a->n_embd, a->n_ff) ||
        !expert_tensor_ok(a->up, a->n_embd, a->n_ff) ||
        !expert_tensor_ok(a->down, a->n_ff, a->n_embd) || !a->d_x || !a->d_ids ||
        !a->d_weights || !a->d_out || !a->d_gate_b != !a->d_up_b ||
        (a->act != MP_CUDA_ACT_SWIGLU && a->act != MP_CUDA_ACT_SWIGLU_OAI))
        return MP_CUDA_EINVAL;
    const bool far = a->d_far_of_cold != NULL;
    if (far && (!a->gate.d_slots || !a->up.d_slots || !a->down.d_slots || !a->gate.d_far || !a->up.d_far ||
                !a->down.d_far || a->n_rows >= MOE_GROUP_MIN_ROWS || a->far_max < 1 || a->far_max > a->top_k ||
                !a->d_far_stage || (uintptr_t)a->d_far_stage % 256 ||
                a->far_stage_bytes < mp_cuda_moe_far_stage_bytes(a)))
        return MP_CUDA_EINVAL; /* far routes: slot tables, host copies, a stage; per-route path only */
    if (a->d_far_split_of_cold && (!far || (uintptr_t)a->d_far_split_of_cold % 4 || a->gate.expert_bytes > UINT32_MAX ||
                                   a->up.expert_bytes > UINT32_MAX || a->down.expert_bytes > UINT32_MAX))
        return MP_CUDA_EINVAL; /* a split last far route: only among far routes, of tensors under 4 GiB */
    if (a->n_rows == 0)
        return 0;
    const int xv = mp_cuda_vec_dot_type(a->gate.type), hv = mp_cuda_vec_dot_type(a->down.type);
    const size_t xq_rb = mpc_row_bytes(xv, a->n_embd), hq_rb = mpc_row_bytes(hv, a->n_ff);
    const size_t need = mp_cuda_moe_scratch_bytes(a->gate.type, a->down.type, a->n_embd, a->n_ff,
                                                  a->n_rows, a->top_k);
    if (xq_rb == 0 || hq_rb == 0 || !a->d_scratch || a->scratch_bytes < need ||
        (uintptr_t)a->d_scratch % 256)
        return a->scratch_bytes < need ? MP_CUDA_ENOMEM : MP_CUDA_EINVAL;
    const int64_t routes = a->n_rows * a->top_k;
    uint8_t *xq = (uint8_t *)a->d_scratch;
    float *h = (float *)(xq + align256((size_t)a->n_rows * xq_rb));
    uint8_t *hq = (uint8_t *)h + align256((size_t)routes * (size_t)a->n_ff * sizeof(float));
    cudaStream_t st = (cudaStream_t)stream;

    int rc = 0;
    if (a->d_xq) /* converted by the caller (the fused norm + quantize) */
        xq = (uint8_t *)a->d_xq;
    else if ((rc = mp_cuda_quantize_act(xv, a->d_x, a->n_embd, a->n_rows, a->n_embd, xq, stream)))
        return rc;
    const int64_t gate_units = a->n_embd / (a->gate.type == MP_TYPE_F32 || a->gate.type == MP_TYPE_F16 ||
                                            a->gate.type == MP_TYPE_BF16 ? 1 : 32);
    const int64_t down_units = a->n_ff / (a->down.type == MP_TYPE_F32 || a->down.type == MP_TYPE_F16 ||
                                          a->down.type == MP_TYPE_BF16 ? 1 : 32);
    const int64_t max_groups = routes / MOE_GROUP + a->n_expert;
    /* experts with biases or another activation (gpt-oss): every kernel here but the Q4_K decode
     * gate/up applies them (mpc_expert_act) */
    const bool plain = !a->d_gate_b && a->act == MP_CUDA_ACT_SWIGLU;
    const bool mma = a->n_rows >= MOE_GROUP_MIN_ROWS && routes / MPC_MMA_GROUP + a->n_expert <= MOE_MAX_GRID_Y &&
                     a->n_expert <= 1024 && mma_rows(mpc_moe_mma_plan(a, xq, xq_rb, hq, hq_rb), a->n_rows);
    if (mma || (a->n_rows >= MOE_GROUP_MIN_ROWS && max_groups <= MOE_MAX_GRID_Y && a->n_expert <= 1024)) {
        /* grouped: the scratch after hq holds perm, groups, the group count and y; the routes are
         * sorted by expert into groups of MOE_GROUP (CUDA cores) or MPC_MMA_GROUP (tensor cores,
         * moe_mma.cu) routes, the experts write per-route outputs y, and the combine sums them */
        uint8_t *p = hq + align256((size_t)routes * hq_rb);
        int32_t *perm = (int32_t *)p;
        p += align256((size_t)routes * 4);
        int4 *groups = (int4 *)p;
        p += align256((size_t)(routes / MOE_GROUP + 1024 + 1) * 16);
        int32_t *n_groups = (int32_t *)p;
        float *y = (float *)(p + 256);
        group_kernel<<<1, 1024, (size_t)(2 * a->n_expert) * sizeof(int32_t), st>>>(
            a->d_ids, routes, a->n_expert, mma ? MPC_MMA_GROUP : MOE_GROUP, perm, groups, n_groups);
        const int64_t mg = routes / MPC_MMA_GROUP + a->n_expert;
        if (mma) {
            rc = mpc_moe_mma_gate_up(a->gate.type, mpc_expert_of(a->gate), mpc_expert_of(a->up), a->n_expert,
                                     a->n_embd, a->n_ff, xq, xq_rb, a->top_k, perm, groups, n_groups, mg,
                                     act_of(a), h, st);
            if (rc)
                return rc;
        } else {
            const bool gvec = expert_vec(a->gate) && expert_vec(a->up);
#define MPC_CALL(T, V) launch_gate_up_grouped<T, V>(a, gate_units, xq, xq_rb, perm, groups, n_groups, max_groups, h, st)
            MOE_TYPE_SWITCH(a->gate.type, gvec, MPC_CALL)
#undef MPC_CALL
            if (cudaGetLastError() != cudaSuccess)
                return MP_CUDA_ELAUNCH;
        }
        if ((rc = mp_cuda_quantize_act(hv, h, a->n_ff, routes, a->n_ff, hq, stream)))
            return rc;
        if (mma) {
            rc = mpc_moe_mma_down(a->down.type, mpc_expert_of(a->down), a->n_expert, a->n_ff, a->n_embd, hq, hq_rb,
                                  perm, groups, n_groups, mg, y, st);
            if (rc)
                return rc;
        } else {
            const bool dvec = expert_vec(a->down);
#define MPC_CALL(T, V) launch_down_grouped<T, V>(a, down_units, hq, hq_rb, perm, groups, n_groups, max_groups, y, st)
            MOE_TYPE_SWITCH(a->down.type, dvec, MPC_CALL)
#undef MPC_CALL
            if (cudaGetLastError() != cudaSuccess)
                return MP_CUDA_ELAUNCH;
        }
        for (int64_t r0 = 0; r0 < a->n_rows; r0 += MOE_MAX_GRID_Y) { /* a session's batch may pass 65535 rows */
            const int64_t nr = a->n_rows - r0 < MOE_MAX_GRID_Y ? a->n_rows - r0 : MOE_MAX_GRID_Y;
            const dim3 grid((unsigned)((a->n_embd + 255) / 256), (unsigned)nr);
            combine_kernel<<<grid, 256, 0, st>>>(mpc_expert_of(a->down), a->n_expert, y, a->d_ids, a->d_weights,
                                                 a->top_k, a->n_embd, a->d_out, a->accumulate, r0);
        }
        return mpc_launch_status();
    }
    /* per-route path; far routes (when asked) gathered into the stage first, read there */
    mpc_expert_t gate = mpc_expert_of(a->gate), up = mpc_expert_of(a->up), down = mpc_expert_of(a->down);
    if (far) {
        far_src src;
        const mp_cuda_expert_tensor *ts[3] = {&a->gate, &a->up, &a->down};
        mpc_expert_t *es[3] = {&gate, &up, &down};
        size_t off = 0, most = 0;
        const size_t stride = far_stride(a);
        src.split_of_cold = a->d_far_split_of_cold;
        src.n_ff = a->n_ff;
        src.down_data_bytes = mpc_row_bytes(a->down.type, a->n_ff);
        for (int t = 0; t < 3; t++) {
            src.tab[t] = ts[t]->d_far;
            src.bytes[t] = ts[t]->expert_bytes;
            src.off[t] = off;
            src.row_bytes[t] = ts[t]->row_bytes;
            es[t]->far_of_cold = a->d_far_of_cold;
            es[t]->far_stage = (const uint8_t *)a->d_far_stage + off;
            es[t]->far_stride = stride;
            es[t]->far_max = a->far_max;
            off += align256(ts[t]->expert_bytes);
            most = ts[t]->expert_bytes > most ? ts[t]->expert_bytes : most;
        }
        const dim3 grid(far_blocks_x((most + FAR_CHUNK - 1) / FAR_CHUNK, a->n_rows * a->far_max),
                        (unsigned)(a->n_rows * a->far_max), 3);
        void (*gather)(mpc_expert_t, far_src, int64_t, const int32_t *, int64_t, uint8_t *) =
            a->d_far_split_of_cold ? far_gather_kernel<true> : far_gather_kernel<false>;
        mpc_launch(gather, grid, dim3(FAR_THREADS), 0, st, gate, src, a->n_expert, a->d_ids, a->top_k,
                   (uint8_t *)a->d_far_stage);
        if (cudaGetLastError() != cudaSuccess)
            return MP_CUDA_ELAUNCH;
    }
    const bool vec = expert_vec(a->gate) && expert_vec(a->up);
    if (plain && a->gate.type == MP_TYPE_Q4_K && vec) { /* moe_dec.cu */
        rc = mpc_moe_dec_gate_up_q4k(gate, up, a->n_expert, a->n_embd, a->n_ff, xq, xq_rb, a->d_ids, a->top_k,
                                     routes, h, st);
        if (rc)
            return rc;
    } else {
#define MPC_CALL(T, V) launch_gate_up<T, V>(a, gate, up, gate_units, xq, xq_rb, h, st)
        MOE_TYPE_SWITCH(a->gate.type, vec, MPC_CALL)
#undef MPC_CALL
        if (cudaGetLastError() != cudaSuccess)
            return MP_CUDA_ELAUNCH;
    }
    if ((rc = mp_cuda_quantize_act(hv, h, a->n_ff, routes, a->n_ff, hq, stream)))
        return rc;
    if (mpc_moe_dec_down_ok(a->down.type, expert_vec(a->down), a->n_ff)) { /* moe_dec.cu */
        rc = mpc_moe_dec_down(a->down.type, down, a->n_expert, a->n_ff, a->n_embd, hq, hq_rb, a->d_ids,
                              a->d_weights, a->top_k, a->n_rows, a->d_out, a->accumulate, st);
        if (rc)
            return rc;
    } else {
        const bool dvec = expert_vec(a->down);
#define MPC_CALL(T, V) launch_down<T, V>(a, down, down_units, hq, hq_rb, st)
        MOE_TYPE_SWITCH(a->down.type, dvec, MPC_CALL)
#undef MPC_CALL
    }
    return mpc_launch_status();
}

// ---- the experts' down biases (gpt-oss) ----
// out[row, d] += Σ_k weights[row, k] · b[ids[row, k], d] in slot order, a thread per element; ids
// outside [0, n_expert) add nothing. After a layer's experts, whichever side ran each route.

__global__ void down_bias_kernel(float *out, const int32_t *ids, const float *weights, const float *b, int64_t n_rows,
                                 int64_t top_k, int64_t n_embd, int64_t n_expert)
{
    mpc_pdl_wait(); // PDL (common.cuh): nothing above reads an earlier kernel's output
    mpc_pdl_trigger();
    const int64_t t = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (t >= n_rows * n_embd)
        return;
    const int64_t row = t / n_embd, d = t % n_embd;
    float acc = 0.0f;
    for (int64_t k = 0; k < top_k; k++) {
        const int32_t e = ids[row * top_k + k];
        if (e >= 0 && e < n_expert)
            acc = __fmaf_rn(weights[row * top_k + k], b[(int64_t)e * n_embd + d], acc);
    }
    out[t] = __fadd_rn(out[t], acc);
}

extern "C" int mp_cuda_moe_down_bias(float *d_out, const int32_t *d_ids, const float *d_weights, const float *d_b,
                                     int64_t n_rows, int64_t top_k, int64_t n_embd, int64_t n_expert, void *stream)
{
    if (n_rows < 0 || top_k < 1 || n_embd < 1 || n_expert < 1 || !d_out || !d_ids || !d_weights || !d_b)
        return MP_CUDA_EINVAL;
    const int64_t n = n_rows * n_embd;
    if (n == 0)
        return 0;
    mpc_launch(down_bias_kernel, dim3((unsigned)((n + 255) / 256)), dim3(256), 0, (cudaStream_t)stream, d_out, d_ids,
               d_weights, d_b, n_rows, top_k, n_embd, n_expert);
    return mpc_launch_status();
}

// ---- router: one warp per row ----

#define ROUTER_MAX_EXPERT 1024
#define ROUTER_REG 8 // experts per lane held in registers: up to 256 without shared memory

// Expert i's top-k key from its probability v (router_kernel): the bits of v + 1 above the inverted
// id, so that the larger key is the larger probability and, on ties, the lower id; NaN keys 0
// above the id, below every number.
__device__ __forceinline__ unsigned long long router_key(float v, int64_t i)
{
    const unsigned long long hi = v != v ? 0ull : (unsigned long long)__float_as_uint(v) + 1ull;
    return hi << 32 | (unsigned long long)(~(uint32_t)i);
}

// Softmax, top-k and renormalization of one row of logits by one warp (lane = 0..31), into
// ids/weights[row * k ...] (and, when h_ids is not NULL, the same into h_ids/h_w[0 .. k): the
// hybrid decode's handoff to the host). Logits are read with ld.global.cg (L2, never a stale L1
// line: the fused decode router reads what other blocks of its launch wrote).
__device__ __forceinline__ void router_row(const float *logits, int64_t n_expert, int64_t k, int renorm,
                                           int32_t *ids, float *weights, float *probs, int64_t row, int lane,
                                           int32_t *h_ids, float *h_w)
{
    __shared__ float p[ROUTER_MAX_EXPERT];
    __shared__ unsigned char taken[ROUTER_MAX_EXPERT];
    const float *l = logits + row * n_expert;
    for (int64_t i = lane + ROUTER_REG * MPC_WARP; i < n_expert; i += MPC_WARP)
        taken[i] = 0;
    // Each lane holds experts lane, lane + 32, ... in registers (ROUTER_REG of them, for up to
    // 32 x ROUTER_REG experts; more go through shared memory, below).
    float lv[ROUTER_REG];
#pragma unroll
    for (int j = 0; j < ROUTER_REG; j++) {
        const int64_t i = lane + (int64_t)j * MPC_WARP;
        lv[j] = i < n_expert ? __ldcg(l + i) : -INFINITY;
    }
    float mx = -INFINITY;
#pragma unroll
    for (int j = 0; j < ROUTER_REG; j++)
        mx = fmaxf(mx, lv[j]);
    for (int64_t i = lane + ROUTER_REG * MPC_WARP; i < n_expert; i += MPC_WARP)
        mx = fmaxf(mx, __ldcg(l + i));
    mx = mpc_warp_max(mx);
    float sum = 0.0f;
#pragma unroll
    for (int j = 0; j < ROUTER_REG; j++)
        if (lane + (int64_t)j * MPC_WARP < n_expert) {
            lv[j] = expf(lv[j] - mx);
            sum += lv[j];
        }
    for (int64_t i = lane + ROUTER_REG * MPC_WARP; i < n_expert; i += MPC_WARP) {
        p[i] = expf(__ldcg(l + i) - mx);
        sum += p[i];
    }
    const float inv = __frcp_rn(mpc_warp_sum(sum));
#pragma unroll
    for (int j = 0; j < ROUTER_REG; j++) {
        const int64_t i = lane + (int64_t)j * MPC_WARP;
        if (i < n_expert) {
            lv[j] = lv[j] * inv;
            if (probs)
                probs[row * n_expert + i] = lv[j];
        }
    }
    for (int64_t i = lane + ROUTER_REG * MPC_WARP; i < n_expert; i += MPC_WARP) {
        p[i] = p[i] * inv;
        if (probs)
            probs[row * n_expert + i] = p[i];
    }
    // top-k: k rounds of a warp argmax, larger value first, ties to the lower id (as mp_topk).
    // An expert's key orders it so: (probability bits + 1) above its inverted id; a NaN
    // probability keys 0 above the id (taken only when nothing else is left, the lowest id
    // first, with weight -inf: what comparisons that are false for NaN would leave), and a taken
    // expert keys 0. Probabilities are >= 0, so their bits order as they do.
    // Lane kk keeps slot kk's id and weight, written once at the end.
    __syncwarp(); // taken[] of the shared-memory experts is cleared for every lane
    uint32_t taken_bits = 0; // bit j: expert lane + 32 j is taken (the register experts)
    float wsum = 0.0f, my_w = 0.0f;
    int my_id = 0;
    for (int64_t kk = 0; kk < k; kk++) {
        unsigned long long best = 0;
#pragma unroll
        for (int j = 0; j < ROUTER_REG; j++) {
            const int64_t i = lane + (int64_t)j * MPC_WARP;
            if (i < n_expert && !(taken_bits >> j & 1)) {
                const unsigned long long key = router_key(lv[j], i);
                best = key > best ? key : best;
            }
        }
        for (int64_t i = lane + ROUTER_REG * MPC_WARP; i < n_expert; i += MPC_WARP)
            if (!taken[i]) {
                const unsigned long long key = router_key(p[i], i);
                best = key > best ? key : best;
            }
        for (int off = 16; off > 0; off >>= 1) {
            const unsigned long long o = __shfl_xor_sync(0xffffffffu, best, off);
            best = o > best ? o : best;
        }
        const int bi = (int)~(uint32_t)(best & 0xffffffffull);
        const uint32_t hi = (uint32_t)(best >> 32);
        const float bv = hi ? __uint_as_float(hi - 1u) : -INFINITY;
        if (bi < ROUTER_REG * MPC_WARP) {
            if ((bi & (MPC_WARP - 1)) == lane)
                taken_bits |= 1u << (bi / MPC_WARP);
        } else if (lane == 0) {
            taken[bi] = 1;
        }
        if (lane == kk) {
            my_id = bi;
            my_w = bv;
        }
        wsum += bv; // in slot order, as the CPU sums them
        __syncwarp();
    }
    if (lane < k) {
        const float wt = renorm ? __fdiv_rn(my_w, wsum) : my_w;
        ids[row * k + lane] = my_id;
        weights[row * k + lane] = wt;
        if (h_ids) {
            h_ids[lane] = my_id;
            h_w[lane] = wt;
        }
    }
}

__global__ void router_kernel(const float *logits, int64_t n_expert, int64_t k, int renorm,
                              int32_t *ids, float *weights, float *probs)
{
    mpc_pdl_wait(); // PDL (common.cuh): nothing above reads an earlier kernel's output
    mpc_pdl_trigger();
    router_row(logits, n_expert, k, renorm, ids, weights, probs, blockIdx.x, threadIdx.x, NULL, NULL);
}

// ---- decode router: the router's GEMV and its top-k in one launch ----
// One row. Blocks of ROUTER_GEMV_WARPS warps compute the logits as gemv_kernel<T, VEC, 1> does (a
// warp per expert row, lanes over units two in flight, the same butterfly sum: the same bits).
// Each block then fences and counts itself done on a device counter; the last one runs
// router_row on all logits (the others' writes are visible: fence, then the counter, then L2
// reads) and sets the counter back to 0 for the next launch. With a handoff target (h_flag), the
// last block also publishes the row, ids and weights to host memory and sets the flag (handoff.cu
// has the ordering rules): one launch where a GEMV, a top-k and a publish launch were three.
#define ROUTER_GEMV_WARPS 4

template <int T, bool VEC>
__global__ void __launch_bounds__(ROUTER_GEMV_WARPS * MPC_WARP)
router_gemv_kernel(const uint8_t *w, size_t row_bytes, int64_t n_expert, int64_t n_units, const float *x,
                   const float *bias, float *logits, int64_t k, int renorm, int32_t *ids, float *weights, unsigned *count,
                   float *h_x, int64_t n_x, int32_t *h_ids, float *h_w, uint32_t *h_flag, uint64_t *h_stamp)
{
    const int lane = threadIdx.x % MPC_WARP, warp = threadIdx.x / MPC_WARP;
    const int64_t row = (int64_t)blockIdx.x * ROUTER_GEMV_WARPS + warp;
    const uint8_t *wrow = w + row * row_bytes;
    if (row < n_expert)
        mpc_prefetch_l2(wrow, row_bytes, lane);
    mpc_pdl_wait(); // PDL (common.cuh): nothing above reads an earlier kernel's output
    mpc_pdl_trigger();
    if (row < n_expert) {
        const uint8_t *xb = (const uint8_t *)x;
        float acc = 0.0f;
        for (int64_t u = lane; u < n_units; u += 2 * MPC_WARP) { // as gemv_kernel, one row
            const bool has1 = u + MPC_WARP < n_units;
            mpc_unit<T, VEC> w0, w1;
            w0.load(wrow, u);
            if (has1)
                w1.load(wrow, u + MPC_WARP);
            acc += w0.dot(xb, u);
            if (has1)
                acc += w1.dot(xb, u + MPC_WARP);
        }
        const float sum = mpc_warp_sum(acc);
        if (lane == 0)
            logits[row] = bias ? __fadd_rn(sum, bias[row]) : sum;
    }
    __threadfence();
    __syncthreads();
    __shared__ bool last;
    if (threadIdx.x == 0)
        last = atomicAdd(count, 1u) == gridDim.x - 1;
    __syncthreads();
    if (!last)
        return;
    __threadfence();
    if (warp == 0)
        router_row(logits, n_expert, k, renorm, ids, weights, NULL, 0, lane, h_flag ? h_ids : NULL, h_w);
    else if (h_flag) // the other warps hand the row to the host meanwhile
        for (int64_t i = threadIdx.x - MPC_WARP; i < n_x; i += (ROUTER_GEMV_WARPS - 1) * MPC_WARP)
            h_x[i] = x[i];
    if (h_flag)
        __threadfence_system();
    __syncthreads();
    if (threadIdx.x == 0) {
        *count = 0;
        if (h_flag)
            mpc_host_signal(h_flag, h_stamp);
    }
}

extern "C" int mp_cuda_router_gemv_supported(int type)
{
    return type == MP_TYPE_F32 || type == MP_TYPE_F16 || type == MP_TYPE_BF16;
}

extern "C" int mp_cuda_router_gemv(int type, const void *d_w, size_t row_bytes, int64_t n_expert, int64_t n_in,
                                   const float *d_x, const float *d_bias, float *d_logits, int64_t k, int renorm, int32_t *d_ids,
                                   float *d_weights, unsigned *d_count, float *h_x, int32_t *h_ids, float *h_w,
                                   uint32_t *h_flag, uint64_t *h_stamp, void *stream)
{
    const size_t rb = mpc_row_bytes(type, n_in);
    if (!mp_cuda_router_gemv_supported(type) || rb == 0 || row_bytes < rb || n_expert < 1 ||
        n_expert > ROUTER_MAX_EXPERT || k < 1 || k > 32 || k > n_expert || !d_w || !d_x || !d_logits || !d_ids ||
        !d_weights || !d_count || (h_flag && (!h_x || (h_ids && !h_w))) ||
        (uintptr_t)d_w % mpc_weight_align(type, false) || row_bytes % mpc_weight_align(type, false) ||
        (uintptr_t)d_x % 4)
        return MP_CUDA_EINVAL;
    // the same 128-bit choice as mp_cuda_gemv for this row (the same bits)
    const bool vec = mpc_can_vec(type, d_w, row_bytes, n_in, d_x, (size_t)n_in * sizeof(float));
    const int64_t n_units = n_in / (vec ? 8 : 1);
    const unsigned blocks = (unsigned)((n_expert + ROUTER_GEMV_WARPS - 1) / ROUTER_GEMV_WARPS);
    cudaStream_t st = (cudaStream_t)stream;
#define ROUTER_GEMV_LAUNCH(TT, V)                                                                          \
    mpc_launch(router_gemv_kernel<TT, V>, dim3(blocks), dim3(ROUTER_GEMV_WARPS * MPC_WARP), 0, st,       \
               (const uint8_t *)d_w, row_bytes, n_expert, n_units, d_x, d_bias, d_logits, k, renorm, d_ids,       \
               d_weights,                                                                                 \
               d_count, h_x, n_in, h_ids, h_w, h_flag, h_stamp)
    switch (type) {
    case MP_TYPE_F32:
        if (vec) ROUTER_GEMV_LAUNCH(MP_TYPE_F32, true); else ROUTER_GEMV_LAUNCH(MP_TYPE_F32, false);
        break;
    case MP_TYPE_F16:
        if (vec) ROUTER_GEMV_LAUNCH(MP_TYPE_F16, true); else ROUTER_GEMV_LAUNCH(MP_TYPE_F16, false);
        break;
    default:
        if (vec) ROUTER_GEMV_LAUNCH(MP_TYPE_BF16, true); else ROUTER_GEMV_LAUNCH(MP_TYPE_BF16, false);
        break;
    }
#undef ROUTER_GEMV_LAUNCH
    return mpc_launch_status();
}

extern "C" int mp_cuda_router(const float *d_logits, int64_t n_rows, int64_t n_expert, int64_t k,
                              int renorm, int32_t *d_ids, float *d_weights, float *d_probs,
                              void *stream)
{
    if (n_rows < 0 || n_expert < 1 || n_expert > ROUTER_MAX_EXPERT || k < 1 || k > 32 ||
        k > n_expert || !d_logits || !d_ids || !d_weights)
        return MP_CUDA_EINVAL;
    if (n_rows == 0)
        return 0;
    mpc_launch(router_kernel, dim3((unsigned)n_rows), dim3(MPC_WARP), 0, (cudaStream_t)stream, d_logits,
               n_expert, k, renorm, d_ids, d_weights, d_probs);
    return mpc_launch_status();
}
