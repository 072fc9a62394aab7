// kernels/cuda/attention.cu — causal GQA attention over an F16 KV cache (decode and prefill).
//
// A sliding-window layer (window > 0) attends to each row's last `window` keys: chunks and key tiles
// before a row's window are neither computed nor merged; with sinks (gpt-oss) each head's softmax
// denominator also counts exp(sink - max), the sink's share dropped (att_denominator).
//
// KV cache: F16 (half the bytes of F32 — the cache counts against --gpu-budget — and the
// precision loss, 2^-11 relative per element, is far below the activations' Q8 quantization
// the matmuls already apply). Scores, softmax and the weighted sum are f32.
//
// Steps of up to ATT_SMALL_ROWS rows (decode) split the keys ("flash-decoding"): block
// (row·head, chunk of 64 keys) computes the chunk's scores, their max m, Σ exp(s - m) = l and
// o = Σ exp(s - m) v, and writes (m, l, o) to scratch; a merge launch rescales the row's chunks by
// exp(m_c - max m) and divides. Chunks past a row's causal bound are neither computed nor merged,
// so a launch sized for the whole context (the graph-replayed decode) costs what the row's keys
// cost. Larger steps (prefill) walk the keys in tiles of 32 query rows (attn_tile_kernel), so
// that a K/V row is read once per tile of rows rather than once per row.
//
// H200, bench_cuda attn (bench/results/2026-12-02-h200-attention-tiles/): a decode row with a
// warp per key (4 keys' loads in flight) took 11.8 / 13.2 / 33.3 µs at 129 / 601 / 4001 keys,
// the half-warp-per-key loads below 8.0 / 9.9 / 26.1; two threads per key (each reading its own
// row, uncoalesced) lost at 601 and 4001 keys (16.2, 58.8). Prefill as split-K with 256-key
// chunks took 710 µs for 512 rows, the tiles 173 µs. (The first version looped a thread per
// dimension over a chunk's keys one load at a time: 74 µs per decode layer, run 5 of
// bench/NOTES-gpu-exec.md.)
#include <climits>

#include "kernels/cuda/common.cuh"

// the chunking is the scratch size's too (kernels/cuda_sizes.h)
#define ATT_CHUNK MP_CUDA_ATT_CHUNK
#define ATT_SMALL_ROWS MP_CUDA_ATT_SMALL_ROWS
#define ATT_THREADS 128
#define ATT_WARPS (ATT_THREADS / MPC_WARP)
#define ATT_MAX_HD 256

// keys of row `row`: its position + 1, from the device (graph-replayable decode) or pos0 + row
__device__ __forceinline__ int64_t att_keys(const int32_t *pos, int64_t pos0, int64_t row)
{
    return (pos ? (int64_t)pos[row] : pos0 + row) + 1;
}

// the first key a row of n_keys keys attends to: n_keys - window on a sliding-window layer
// (window > 0, mp_layer_window), else 0
__device__ __forceinline__ int64_t att_first(int64_t n_keys, int64_t window)
{
    return window > 0 && n_keys > window ? n_keys - window : 0;
}

// The softmax denominator with a sink (gpt-oss): l (the keys' Σ exp(s - m)) plus the sink logit's
// share exp(sink - m), whose probability is dropped (sinks NULL: l)
__device__ __forceinline__ float att_denominator(float l, float m, const float *sinks, int64_t h)
{
    return sinks ? l + expf(sinks[h] - m) : l;
}

__device__ __forceinline__ float block_reduce(float v, float *red, bool is_max)
{
    const int lane = threadIdx.x % MPC_WARP, warp = threadIdx.x / MPC_WARP;
    v = is_max ? mpc_warp_max(v) : mpc_warp_sum(v);
    if (lane == 0)
        red[warp] = v;
    __syncthreads();
    float r = red[0];
    for (int w = 1; w < ATT_WARPS; w++)
        r = is_max ? fmaxf(r, red[w]) : r + red[w];
    __syncthreads(); // red is reused by the next reduction
    return r;
}

// Split-K partial for steps of up to ATT_SMALL_ROWS rows: block (row·head, chunk of ATT_CHUNK
// keys), HDP the head dimension rounded up (64, 128 or 256; the dimensions past hd are skipped).
// Scores: half a warp per key, lane l holding dimension pairs l, l + 16, ... (each load
// instruction reads two keys' rows, coalesced); every K load of a warp's keys is issued before
// the first sum, so the chunk arrives in one memory round trip, then 4 shuffles a key. Weighted
// sum: thread (dimension pair, key group) sums w_t v_t over its group's keys, loads unrolled the
// same way; the groups meet in shared memory. (V rows copied to shared memory with cp.async while
// the scores are computed lost: 8.6 / 11.4 / 32.9 µs a row at 129 / 601 / 4,001 keys against
// 7.6 / 10.1 / 27.7, bench/NOTES-gpu-exec.md run 35.)
template <int HDP>
__global__ void __launch_bounds__(ATT_THREADS)
attn_partial_kernel(const float *__restrict__ q, const uint16_t *__restrict__ kc, const uint16_t *__restrict__ vc,
                    float *__restrict__ part, int64_t pos0, const int32_t *__restrict__ pos, int64_t n_head,
                    int64_t n_head_kv, int64_t hd, int64_t n_splits, int64_t window)
{
    constexpr int NP = HDP / 2;                // dimension pairs
    constexpr int PPL = NP / 16;               // pairs per lane of a key's half warp
    constexpr int KPW = ATT_CHUNK / ATT_WARPS; // keys per warp
    static_assert(NP <= ATT_THREADS && KPW % 2 == 0, "a pair per weighted-sum thread, two keys a load");
    constexpr int KG = ATT_THREADS / NP;       // key groups of the weighted sum
    constexpr int KPG = ATT_CHUNK / KG;        // keys per key group
    constexpr int VB = KPG < 16 ? KPG : 16;    // V loads in flight per thread
    mpc_pdl_wait(); // PDL (common.cuh): nothing above reads an earlier kernel's output
    mpc_pdl_trigger();
    __shared__ float sc[ATT_CHUNK];
    __shared__ float red[ATT_WARPS];
    __shared__ float os[KG][HDP];
    const int tid = threadIdx.x, lane = tid % MPC_WARP, warp = tid / MPC_WARP, kh = lane / 16, l16 = lane % 16;
    const int64_t rh = blockIdx.x, split = blockIdx.y;
    const int64_t row = rh / n_head, h = rh % n_head, kvh = h / (n_head / n_head_kv);
    const int64_t n_keys = att_keys(pos, pos0, row), t0 = split * ATT_CHUNK, lo = att_first(n_keys, window);
    if (t0 >= n_keys || t0 + ATT_CHUNK <= lo) // past the causal bound or before the window: not merged
        return;
    const int len = (int)(t0 + ATT_CHUNK < n_keys ? ATT_CHUNK : n_keys - t0);
    const int first = (int)(lo > t0 ? lo - t0 : 0); // keys of the chunk before the window weigh 0
    const int np = (int)(hd / 2);
    const int64_t n_kv = n_head_kv * hd;
    float2 qv[PPL];
#pragma unroll
    for (int j = 0; j < PPL; j++) {
        const int p = l16 + 16 * j;
        qv[j] = p < np ? make_float2(q[rh * hd + 2 * p], q[rh * hd + 2 * p + 1]) : make_float2(0.0f, 0.0f);
    }
    const float scale = 1.0f / sqrtf((float)hd);
    {
        float s[KPW / 2];
#pragma unroll
        for (int i = 0; i < KPW / 2; i++) {
            const int key = warp * KPW + 2 * i + kh;
            const __half2 *kr = (const __half2 *)(kc + (t0 + key) * n_kv + kvh * hd);
            float acc = 0.0f;
#pragma unroll
            for (int j = 0; j < PPL; j++) {
                const int p = l16 + 16 * j;
                if (key < len && p < np) {
                    const float2 k = __half22float2(kr[p]);
                    acc += qv[j].x * k.x + qv[j].y * k.y;
                }
            }
            s[i] = acc;
        }
#pragma unroll
        for (int i = 0; i < KPW / 2; i++) {
            for (int off = 8; off > 0; off >>= 1) // within the key's half warp
                s[i] += __shfl_xor_sync(0xffffffffu, s[i], off);
            const int key = warp * KPW + 2 * i + kh;
            if (l16 == 0 && key < len)
                sc[key] = key >= first ? s[i] * scale : -INFINITY;
        }
    }
    __syncthreads();
    float m = -INFINITY;
    for (int t = tid; t < len; t += ATT_THREADS)
        m = fmaxf(m, sc[t]);
    m = block_reduce(m, red, true);
    float l = 0.0f;
    for (int t = tid; t < len; t += ATT_THREADS) {
        sc[t] = expf(sc[t] - m);
        l += sc[t];
    }
    l = block_reduce(l, red, false); // its barriers also publish sc's new values
    {
        const int g = tid / NP, p = tid % NP, k0 = g * KPG;
        const __half2 *vb = (const __half2 *)(vc + (t0 + k0) * n_kv + kvh * hd) + p;
        float2 o = make_float2(0.0f, 0.0f);
#pragma unroll
        for (int tb = 0; tb < KPG; tb += VB) {
            float2 v[VB];
#pragma unroll
            for (int t = 0; t < VB; t++)
                v[t] = p < np && k0 + tb + t < len ? __half22float2(vb[(int64_t)(tb + t) * (n_kv / 2)])
                                                  : make_float2(0.0f, 0.0f);
#pragma unroll
            for (int t = 0; t < VB; t++) {
                const float w = k0 + tb + t < len ? sc[k0 + tb + t] : 0.0f;
                o.x += w * v[t].x;
                o.y += w * v[t].y;
            }
        }
        os[g][2 * p] = o.x;
        os[g][2 * p + 1] = o.y;
    }
    __syncthreads();
    float *out = part + (rh * n_splits + split) * (hd + 2); // (m, l, o[hd])
    if (tid == 0) {
        out[0] = m;
        out[1] = l;
    }
    for (int d = tid; d < hd; d += ATT_THREADS) {
        float acc = 0.0f;
#pragma unroll
        for (int g = 0; g < KG; g++)
            acc += os[g][d];
        out[2 + d] = acc;
    }
}

// Split-K merge: block b merges heads G·b ... G·b + G - 1 of the flattened (row, head) order.
// QB = 0: G = 1, f32 out only. QB = 32 (Q8_0) or 256 (Q8_K): G heads make whole activation
// blocks of QB elements (att_merge_group), and the block also converts them into q (rows of
// q_row_bytes) with the quantizers of mp_cuda_quantize_act, bit-identical to it: the output
// projection's GEMV then needs no conversion launch of its own.
template <int QB>
__global__ void attn_merge_kernel(const float *part, float *out, int64_t pos0, const int32_t *pos, int64_t n_head,
                                  int64_t hd, int64_t chunk, int64_t n_splits, int G, uint8_t *q, size_t q_row_bytes,
                                  int64_t window, const float *sinks)
{
    mpc_pdl_wait(); // PDL (common.cuh): nothing above reads an earlier kernel's output
    mpc_pdl_trigger();
    extern __shared__ float att_mo[]; // QB > 0: the G heads' merged outputs
    for (int i = threadIdx.x; i < G * hd; i += blockDim.x) { // element d of head g; the heads side by side
        const int g = i / (int)hd, d = i % (int)hd;
        const int64_t rh = (int64_t)blockIdx.x * G + g;
        const float *p = part + rh * n_splits * (hd + 2);
        const int64_t n_keys = att_keys(pos, pos0, rh / n_head), s0 = att_first(n_keys, window) / chunk;
        int64_t used = (n_keys + chunk - 1) / chunk;
        used = used < n_splits ? used : n_splits;
        float M = -INFINITY;
        for (int64_t s = s0; s < used; s++)
            M = fmaxf(M, p[s * (hd + 2)]);
        float L = 0.0f, o = 0.0f;
        for (int64_t s = s0; s < used; s++) {
            const float w = expf(p[s * (hd + 2)] - M);
            L += w * p[s * (hd + 2) + 1];
            o += w * p[s * (hd + 2) + 2 + d];
        }
        const float v = o * (1.0f / att_denominator(L, M, sinks, rh % n_head));
        out[rh * hd + d] = v;
        if constexpr (QB > 0)
            att_mo[i] = v;
    }
    if constexpr (QB > 0) {
        __syncthreads();
        const int64_t rh0 = (int64_t)blockIdx.x * G, b0 = (rh0 % n_head) * hd / QB; // first block in the row
        uint8_t *qr = q + (rh0 / n_head) * q_row_bytes;
        const int lane = threadIdx.x % MPC_WARP, nb = (int)(G * hd / QB);
        for (int b = threadIdx.x / MPC_WARP; b < nb; b += blockDim.x / MPC_WARP) {
            if constexpr (QB == 32)
                mpc_quantize_q8_0_warp(att_mo + b * QB, qr + (b0 + b) * 34, lane);
            else
                mpc_quantize_q8_K_warp(att_mo + b * QB, qr + (b0 + b) * 292, lane);
        }
    }
}

// Heads per merge block for the output converted to vdt in the merge: the fewest whole heads
// that make whole blocks of the format (32 or 256 elements), when a row's heads divide into such
// groups and their outputs fit the block's shared memory; 0 otherwise (the caller converts in a
// launch of its own).
static int att_merge_group(int vdt, int64_t n_head, int64_t hd)
{
    const int64_t qb = vdt == MP_TYPE_Q8_0 ? 32 : vdt == MP_TYPE_Q8_K ? 256 : 0;
    if (!qb)
        return 0;
    int64_t a = hd, b = qb; // gcd
    while (b) {
        const int64_t t = a % b;
        a = b;
        b = t;
    }
    const int64_t G = qb / a;
    return n_head % G == 0 && G * hd * (int64_t)sizeof(float) <= 16 * 1024 ? (int)G : 0;
}

// The merge of a split-K or key-split tiled step: with act_vdt a format att_merge_group takes, the
// converted rows into d_act too, and *converted set. 0 or a launch error code.
static int merge_launch(const float *d_part, float *d_out, int64_t n_rows, int64_t pos0, const int32_t *d_pos,
                        int64_t n_head, int64_t hd, int64_t chunk, int64_t n_splits, int act_vdt, void *d_act,
                        int *converted, int64_t window, const float *d_sinks, cudaStream_t st)
{
    const int G = d_act ? att_merge_group(act_vdt, n_head, hd) : 0, heads = G ? G : 1;
    const size_t rb = mpc_row_bytes(act_vdt, n_head * hd), smem = G ? sizeof(float) * (size_t)(G * hd) : 0;
    // a thread per output element, the heads' merges side by side (128 threads looping over two
    // heads took 0.7-2.0 µs longer a decode row than the plain merge and a conversion launch)
    int64_t threads = (heads * hd + MPC_WARP - 1) / MPC_WARP * MPC_WARP;
    threads = threads < 1024 ? threads : 1024;
    const dim3 grid((unsigned)(n_rows * n_head / heads)), block((unsigned)threads);
    if (G && act_vdt == MP_TYPE_Q8_0)
        mpc_launch(attn_merge_kernel<32>, grid, block, smem, st, d_part, d_out, pos0, d_pos, n_head, hd, chunk,
                   n_splits, G, (uint8_t *)d_act, rb, window, d_sinks);
    else if (G)
        mpc_launch(attn_merge_kernel<256>, grid, block, smem, st, d_part, d_out, pos0, d_pos, n_head, hd, chunk,
                   n_splits, G, (uint8_t *)d_act, rb, window, d_sinks);
    else
        mpc_launch(attn_merge_kernel<0>, grid, block, smem, st, d_part, d_out, pos0, d_pos, n_head, hd, chunk,
                   n_splits, 1, (uint8_t *)NULL, (size_t)0, window, d_sinks);
    *converted = G > 0;
    return mpc_launch_status();
}

static int g_att_tiles = 1; // mp_cuda_attention_set_tiles

extern "C" void mp_cuda_attention_set_tiles(int on)
{
    g_att_tiles = on;
}

// ---- steps of more than ATT_SMALL_ROWS rows: tiles of query rows ----
// Block (head, tile of ATT_TR query rows) walks the keys in tiles of ATT_TK up to its last row's
// causal bound with an online softmax: per row a running max m and sum l, the output rescaled by
// exp(m_old - m_new) when the max grows. Each K and V row is read once per tile of 32 query rows
// (split-K read it once per row: at 512 rows that was ~1 GB of cache traffic per layer).
// Thread t computes the scores of rows 2(t / 8) + {0, 1} and keys t % 8 + 8j (j < 4): a Q value
// serves four keys and a K value two rows; and it accumulates the output of rows 4(t / 16) + i
// (i < 4), dimensions (t % 16) · HDP/16 onwards. Shared memory rows are padded (Q by 4 floats, K
// by one pair) so that the 8 rows a warp reads at once sit in different banks.
#define ATT_TR 32  // query rows per tile
#define ATT_TK 32  // keys per tile
#define ATT_TT 128 // threads
// blocks an SM holds, which caps the registers (65,536 a SM): the 64 tile 6 (80 registers; the
// compiler picks 96 unbounded, 5 blocks), the 128 tile 4 (127), the 256 tile 3 (168; its 69 KB of
// shared memory allow 3 as well; unbounded it takes 223, 2 blocks), sm_90
#define ATT_TILE_BLOCKS(HDP) ((HDP) == 64 ? 6 : (HDP) == 128 ? 4 : 3)
static_assert(ATT_TR * ATT_TK == 8 * ATT_TT && ATT_TR == 4 * (ATT_TT / 16) && ATT_TK == 4 * 8 && ATT_TR == MPC_WARP,
              "the thread maps above; warp 0 reads the tile's rows' positions");

template <int HDP> struct att_tile_layout {
    static constexpr int QS = HDP + 4, KS = HDP + 2, PS = ATT_TK + 1; // row strides (elements)
    static constexpr size_t q_off = 0;                                    // f32 [ATT_TR][QS]
    static constexpr size_t k_off = q_off + sizeof(float) * ATT_TR * QS;  // f16 [ATT_TK][KS]
    static constexpr size_t v_off = k_off + sizeof(__half) * ATT_TK * KS; // f16 [ATT_TK][HDP]
    static constexpr size_t p_off = v_off + sizeof(__half) * ATT_TK * HDP; // f32 [ATT_TR][PS]
    static constexpr size_t a_off = p_off + sizeof(float) * ATT_TR * PS;  // f32 rescale [ATT_TR], l [ATT_TR]
    static constexpr size_t bytes = a_off + sizeof(float) * 2 * ATT_TR;
    static_assert(k_off % 16 == 0 && v_off % 16 == 0 && p_off % 16 == 0, "vector loads from shared memory");
};

// OD f16 values from shared memory (16-byte aligned for OD >= 8, 8-byte for OD = 4) as floats
template <int OD> __device__ __forceinline__ void att_ld_halves(const __half *p, float *f)
{
    if constexpr (OD >= 8) {
#pragma unroll
        for (int c = 0; c < OD / 8; c++) {
            const uint4 u = ((const uint4 *)p)[c];
            const __half2 *h = (const __half2 *)&u;
#pragma unroll
            for (int e = 0; e < 4; e++) {
                const float2 v = __half22float2(h[e]);
                f[8 * c + 2 * e] = v.x;
                f[8 * c + 2 * e + 1] = v.y;
            }
        }
    } else {
        static_assert(OD == 4, "HDP 64, 128 or 256");
        const uint2 u = *(const uint2 *)p;
        const __half2 *h = (const __half2 *)&u;
#pragma unroll
        for (int e = 0; e < 2; e++) {
            const float2 v = __half22float2(h[e]);
            f[2 * e] = v.x;
            f[2 * e + 1] = v.y;
        }
    }
}

// The tile's weighted sum into the thread's rows 4rg + i, dimensions dg·OD + e. A key past a
// row's causal bound has p = 0, but 0 · v is NaN where v is not finite (an F16 overflow, a cache
// row written later), so tiles that cross a row's bound (MASK) skip those keys per row, nks[] the
// rows' key counts; the others, most of a prefill's, take no compare.
template <int HDP, bool MASK>
__device__ __forceinline__ void att_tile_pv(const __half *vs, const float *ps, float (&o)[4][HDP / 16], int t_end,
                                            int rg, int dg, int k0, const int *nks)
{
    using L = att_tile_layout<HDP>;
    constexpr int OD = HDP / 16;
    for (int t = 0; t < t_end; t++) {
        float v[OD];
        att_ld_halves<OD>(vs + t * HDP + dg * OD, v);
#pragma unroll
        for (int i = 0; i < 4; i++) {
            if (MASK && k0 + t >= nks[4 * rg + i])
                continue;
            const float pv = ps[(4 * rg + i) * L::PS + t];
#pragma unroll
            for (int e = 0; e < OD; e++)
                o[i][e] += pv * v[e];
        }
    }
}

template <int HDP>
__global__ void __launch_bounds__(ATT_TT, ATT_TILE_BLOCKS(HDP))
attn_tile_kernel(const float *__restrict__ q, const uint16_t *__restrict__ kc, const uint16_t *__restrict__ vc,
                 float *__restrict__ out, float *__restrict__ part, int64_t split_keys, int64_t n_splits,
                 int64_t n_rows, int64_t pos0, const int32_t *__restrict__ pos, int64_t n_head, int64_t n_head_kv,
                 int64_t hd, int64_t window, const float *__restrict__ sinks)
{
    using L = att_tile_layout<HDP>;
    constexpr int NP = HDP / 2, OD = HDP / 16;
    mpc_pdl_wait(); // PDL (common.cuh): nothing above reads an earlier kernel's output
    mpc_pdl_trigger();
    extern __shared__ __align__(16) unsigned char att_smem[];
    float *qs = (float *)(att_smem + L::q_off), *ps = (float *)(att_smem + L::p_off);
    __half *ks = (__half *)(att_smem + L::k_off), *vs = (__half *)(att_smem + L::v_off);
    float *rescale = (float *)(att_smem + L::a_off), *lsum = rescale + ATT_TR, *msum = rescale; // (m: after the loop)
    __shared__ int kmax_s, kmin_s, klo_s, nks[ATT_TR]; // the block's key bounds: the most and least of its
                                                       // rows', and the first key any row attends to
    const int tid = threadIdx.x;
    const int64_t h = blockIdx.x, kvh = h / (n_head / n_head_kv), n_kv = n_head_kv * hd;
    const int64_t n_tiles = (n_rows + ATT_TR - 1) / ATT_TR;
    const int64_t r0 = (n_tiles - 1 - (int64_t)blockIdx.y) * ATT_TR; // the tiles with the most keys first
    if (tid < MPC_WARP) { // ATT_TR == a warp: one row's keys a lane
        const int64_t r = r0 + tid;
        const int nk = r < n_rows ? (int)att_keys(pos, pos0, r) : 0;
        int hi = nk, lo = nk, first = r < n_rows ? (int)att_first(nk, window) : INT_MAX;
        for (int off = 16; off > 0; off >>= 1) {
            hi = max(hi, __shfl_xor_sync(0xffffffffu, hi, off));
            lo = min(lo, __shfl_xor_sync(0xffffffffu, lo, off));
            first = min(first, __shfl_xor_sync(0xffffffffu, first, off));
        }
        nks[tid] = nk;
        if (tid == 0) {
            kmax_s = hi;
            kmin_s = lo;
            klo_s = first / ATT_TK * ATT_TK; // whole key tiles: the loop's tiles stay aligned
        }
    }
    for (int i = tid; i < ATT_TR * HDP; i += ATT_TT) {
        const int r = i / HDP, d = i % HDP;
        qs[r * L::QS + d] = r0 + r < n_rows && d < hd ? q[((r0 + r) * n_head + h) * hd + d] : 0.0f;
    }
    __syncthreads();
    // keys [kbeg, kmax): split z of the block's keys when part is given, else all of them; on a
    // sliding-window layer none before the first any row attends to
    const int kz = part ? (int)(blockIdx.z * split_keys) : 0, kbeg = kz > klo_s ? kz : klo_s;
    const int kmax = part && kz + split_keys < kmax_s ? (int)(kz + split_keys) : kmax_s, np = (int)(hd / 2);
    if (kbeg >= kmax) // no row of the tile reaches this split: the merge does not read it
        return;
    const float scale = 1.0f / sqrtf((float)hd);
    const int sr = tid / 8, sk = tid % 8; // scores: rows 2sr, 2sr + 1; keys sk + 8j
    int nk_r[2], lo_r[2];
    float m_r[2], l_r[2];
#pragma unroll
    for (int i = 0; i < 2; i++) {
        const int64_t r = r0 + 2 * sr + i;
        nk_r[i] = r < n_rows ? (int)att_keys(pos, pos0, r) : 0;
        lo_r[i] = (int)att_first(nk_r[i], window);
        m_r[i] = -INFINITY;
        l_r[i] = 0.0f;
    }
    const int rg = tid / 16, dg = tid % 16; // output: rows 4rg + i, dimensions dg·OD + e
    float o[4][OD];
#pragma unroll
    for (int i = 0; i < 4; i++)
#pragma unroll
        for (int e = 0; e < OD; e++)
            o[i][e] = 0.0f;
    for (int k0 = kbeg; k0 < kmax; k0 += ATT_TK) {
#pragma unroll
        for (int it = 0; it < ATT_TK * NP / ATT_TT; it++) {
            const int i = tid + it * ATT_TT, t = i / NP, p = i % NP;
            __half2 kv = __float2half2_rn(0.0f), vv = kv;
            if (k0 + t < kmax && p < np) {
                const int64_t off = (int64_t)(k0 + t) * n_kv + kvh * hd;
                kv = ((const __half2 *)(kc + off))[p];
                vv = ((const __half2 *)(vc + off))[p];
            }
            ((__half2 *)(ks + t * L::KS))[p] = kv;
            ((__half2 *)(vs + t * HDP))[p] = vv;
        }
        __syncthreads();
        float s[2][4];
#pragma unroll
        for (int i = 0; i < 2; i++)
#pragma unroll
            for (int j = 0; j < 4; j++)
                s[i][j] = 0.0f;
#pragma unroll 8
        for (int p = 0; p < NP; p++) {
            const float2 q0 = *(const float2 *)(qs + (2 * sr) * L::QS + 2 * p);
            const float2 q1 = *(const float2 *)(qs + (2 * sr + 1) * L::QS + 2 * p);
#pragma unroll
            for (int j = 0; j < 4; j++) {
                const float2 k = __half22float2(((const __half2 *)(ks + (sk + 8 * j) * L::KS))[p]);
                s[0][j] += q0.x * k.x + q0.y * k.y;
                s[1][j] += q1.x * k.x + q1.y * k.y;
            }
        }
#pragma unroll
        for (int i = 0; i < 2; i++) {
            float mx = -INFINITY;
#pragma unroll
            for (int j = 0; j < 4; j++) {
                const int key = k0 + sk + 8 * j;
                s[i][j] = key < nk_r[i] && key >= lo_r[i] ? s[i][j] * scale : -INFINITY;
                mx = fmaxf(mx, s[i][j]);
            }
            for (int off = 1; off < 8; off <<= 1) // the row's 8 threads are lanes 8a ... 8a + 7
                mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, off));
            const float mn = fmaxf(m_r[i], mx), base = mn == -INFINITY ? 0.0f : mn;
            const float a = expf(m_r[i] - base); // 0 while the row had no key
            float sum = 0.0f;
#pragma unroll
            for (int j = 0; j < 4; j++) {
                const float pj = expf(s[i][j] - base);
                ps[(2 * sr + i) * L::PS + sk + 8 * j] = pj;
                sum += pj;
            }
            for (int off = 1; off < 8; off <<= 1)
                sum += __shfl_xor_sync(0xffffffffu, sum, off);
            l_r[i] = l_r[i] * a + sum;
            m_r[i] = mn;
            if (sk == 0)
                rescale[2 * sr + i] = a;
        }
        __syncthreads();
#pragma unroll
        for (int i = 0; i < 4; i++) {
            const float a = rescale[4 * rg + i];
#pragma unroll
            for (int e = 0; e < OD; e++)
                o[i][e] *= a;
        }
        const int t_end = kmax - k0 < ATT_TK ? kmax - k0 : ATT_TK;
        if (k0 + t_end <= kmin_s) // every key of the tile is below every row's bound (block-uniform)
            att_tile_pv<HDP, false>(vs, ps, o, t_end, rg, dg, k0, nks);
        else
            att_tile_pv<HDP, true>(vs, ps, o, t_end, rg, dg, k0, nks);
        __syncthreads(); // the next tile overwrites ks, vs, ps and rescale
    }
    if (sk == 0) {
        lsum[2 * sr] = l_r[0];
        lsum[2 * sr + 1] = l_r[1];
        msum[2 * sr] = m_r[0];
        msum[2 * sr + 1] = m_r[1];
    }
    __syncthreads();
#pragma unroll
    for (int i = 0; i < 4; i++) {
        const int64_t r = r0 + 4 * rg + i;
        if (r >= n_rows)
            continue;
        if (part) { // (m, l, o) unnormalized, as a split-K chunk, for the rows that reach the split
            const int64_t nk = att_keys(pos, pos0, r);
            if (nk <= kz || att_first(nk, window) >= kz + split_keys) // the merge skips it too
                continue;
            float *po = part + ((r * n_head + h) * n_splits + blockIdx.z) * (hd + 2);
            if (dg == 0) {
                po[0] = msum[4 * rg + i];
                po[1] = lsum[4 * rg + i];
            }
#pragma unroll
            for (int e = 0; e < OD; e++) {
                const int d = dg * OD + e;
                if (d < hd)
                    po[2 + d] = o[i][e];
            }
            continue;
        }
        const float inv = 1.0f / att_denominator(lsum[4 * rg + i], msum[4 * rg + i], sinks, h);
#pragma unroll
        for (int e = 0; e < OD; e++) {
            const int d = dg * OD + e;
            if (d < hd)
                out[(r * n_head + h) * hd + d] = o[i][e] * inv;
        }
    }
}

// mp_cuda_attention_scratch_bytes: kernels/cuda_sizes.h

// The tiled kernel for a step of more than ATT_SMALL_ROWS rows: 1 launched (or a launch error
// code), 0 when the device lacks the shared memory of HDP's tile (the caller then runs split-K in
// steps of ATT_SMALL_ROWS rows). A step with fewer (head, row tile) blocks than 4 per SM also
// splits its keys over blocks (each at least 4 key tiles) as far as the scratch holds their
// partials, merged by attn_merge_kernel: 16 rows at 8,000 keys are otherwise 32 blocks walking 250
// key tiles each.
template <int HDP> static int tile_launch(const float *d_q, const uint16_t *d_k, const uint16_t *d_v, float *d_out,
                                          int64_t n_rows, int64_t pos0, const int32_t *d_pos, int64_t n_keys_max,
                                          int64_t n_head, int64_t n_head_kv, int64_t hd, float *d_part,
                                          size_t scratch_bytes, int act_vdt, void *d_act, int *converted,
                                          int64_t window, const float *d_sinks, cudaStream_t st)
{
    const size_t bytes = att_tile_layout<HDP>::bytes;
    if (bytes > 48 * 1024) {
        static int fits = -1; // per process (one device): whether the tile fits, once the attribute is set
        if (fits < 0) { // the dynamic bytes beside the kernel's static shared memory, within the opt-in limit
            int dev = 0, optin = 0;
            cudaFuncAttributes fa;
            fits = cudaGetDevice(&dev) == cudaSuccess &&
                   cudaDeviceGetAttribute(&optin, cudaDevAttrMaxSharedMemoryPerBlockOptin, dev) == cudaSuccess &&
                   cudaFuncGetAttributes(&fa, attn_tile_kernel<HDP>) == cudaSuccess &&
                   (size_t)optin >= bytes + fa.sharedSizeBytes &&
                   cudaFuncSetAttribute(attn_tile_kernel<HDP>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                        (int)bytes) == cudaSuccess;
            (void)cudaGetLastError();
        }
        if (!fits)
            return 0;
    }
    const int sms = mpc_sm_count();
    const int64_t n_tiles = (n_rows + ATT_TR - 1) / ATT_TR, blocks = n_head * n_tiles, want = 4 * (int64_t)(sms > 0 ? sms : 1);
    const int64_t key_tiles = (n_keys_max + ATT_TK - 1) / ATT_TK;
    int64_t splits = 1;
    if (blocks < want) {
        const int64_t slots = (int64_t)(scratch_bytes / ((size_t)(hd + 2) * sizeof(float))) / (n_rows * n_head);
        splits = (want + blocks - 1) / blocks;
        splits = splits < key_tiles / 4 ? splits : key_tiles / 4;
        splits = splits < slots ? splits : slots;
        splits = splits < 65535 ? splits : 65535;
    }
    const int64_t split_keys = splits > 1 ? (key_tiles + splits - 1) / splits * ATT_TK : n_keys_max;
    splits = splits > 1 ? (n_keys_max + split_keys - 1) / split_keys : 1;
    const dim3 grid((unsigned)n_head, (unsigned)n_tiles, (unsigned)splits);
    mpc_launch(attn_tile_kernel<HDP>, grid, dim3(ATT_TT), bytes, st, d_q, d_k, d_v, d_out,
               splits > 1 ? d_part : (float *)NULL, split_keys, splits, n_rows, pos0, d_pos, n_head, n_head_kv, hd,
               window, d_sinks);
    if (cudaGetLastError() != cudaSuccess)
        return MP_CUDA_ELAUNCH;
    const int rc = splits > 1 ? merge_launch(d_part, d_out, n_rows, pos0, d_pos, n_head, hd, split_keys, splits,
                                             act_vdt, d_act, converted, window, d_sinks, st)
                              : mpc_launch_status();
    return rc ? rc : 1;
}

static int split_launch(const float *d_q, const uint16_t *d_k, const uint16_t *d_v, float *d_out, int64_t n_rows,
                        int64_t pos0, const int32_t *d_pos, int64_t n_splits, int64_t n_head, int64_t n_head_kv,
                        int64_t hd, float *d_part, int act_vdt, void *d_act, int *converted, int64_t window,
                        const float *d_sinks, cudaStream_t st)
{
    const dim3 grid((unsigned)(n_rows * n_head), (unsigned)n_splits);
    if (hd <= 64)
        mpc_launch(attn_partial_kernel<64>, grid, dim3(ATT_THREADS), 0, st, d_q, d_k, d_v, d_part, pos0, d_pos,
                   n_head, n_head_kv, hd, n_splits, window);
    else if (hd <= 128)
        mpc_launch(attn_partial_kernel<128>, grid, dim3(ATT_THREADS), 0, st, d_q, d_k, d_v, d_part, pos0, d_pos,
                   n_head, n_head_kv, hd, n_splits, window);
    else
        mpc_launch(attn_partial_kernel<256>, grid, dim3(ATT_THREADS), 0, st, d_q, d_k, d_v, d_part, pos0, d_pos,
                   n_head, n_head_kv, hd, n_splits, window);
    if (cudaGetLastError() != cudaSuccess)
        return MP_CUDA_ELAUNCH;
    return merge_launch(d_part, d_out, n_rows, pos0, d_pos, n_head, hd, ATT_CHUNK, n_splits, act_vdt, d_act, converted,
                        window, d_sinks, st);
}

static int attention(const float *d_q, const uint16_t *d_k, const uint16_t *d_v, float *d_out,
                     int64_t n_rows, int64_t pos0, const int32_t *d_pos, int64_t n_keys_max,
                     int64_t n_head, int64_t n_head_kv, int64_t head_dim, void *d_scratch,
                     size_t scratch_bytes, int act_vdt, void *d_act, int64_t window, const float *d_sinks,
                     void *stream)
{
    if (window < 0 || window > INT_MAX || n_rows < 0 || pos0 < 0 || n_head < 1 || n_head_kv < 1 || n_head % n_head_kv ||
        head_dim < 2 || head_dim % 2 || head_dim > ATT_MAX_HD || !d_q || !d_k || !d_v || !d_out ||
        n_keys_max < 1)
        return MP_CUDA_EINVAL;
    if (n_rows == 0)
        return 0;
    const int64_t n_splits = (n_keys_max + ATT_CHUNK - 1) / ATT_CHUNK;
    if (n_splits > 65535) // gridDim.y: contexts beyond 4M keys
        return MP_CUDA_EINVAL;
    cudaStream_t st = (cudaStream_t)stream;
    if (!d_scratch ||
        scratch_bytes < mp_cuda_attention_scratch_bytes(n_rows, n_head, head_dim, n_keys_max))
        return MP_CUDA_ENOMEM;
    int converted = 0; // the output rows converted to act_vdt by the merge
    int tiled = 0;
    if (n_rows > ATT_SMALL_ROWS && g_att_tiles) {
        float *part = (float *)d_scratch;
        tiled = head_dim <= 64    ? tile_launch<64>(d_q, d_k, d_v, d_out, n_rows, pos0, d_pos, n_keys_max, n_head,
                                                    n_head_kv, head_dim, part, scratch_bytes, act_vdt, d_act,
                                                    &converted, window, d_sinks, st)
                : head_dim <= 128 ? tile_launch<128>(d_q, d_k, d_v, d_out, n_rows, pos0, d_pos, n_keys_max, n_head,
                                                     n_head_kv, head_dim, part, scratch_bytes, act_vdt, d_act,
                                                     &converted, window, d_sinks, st)
                                  : tile_launch<256>(d_q, d_k, d_v, d_out, n_rows, pos0, d_pos, n_keys_max, n_head,
                                                     n_head_kv, head_dim, part, scratch_bytes, act_vdt, d_act,
                                                     &converted, window, d_sinks, st);
        if (tiled < 0)
            return tiled;
    }
    // one launch pair, or the tile's fallback in steps of ATT_SMALL_ROWS rows
    const size_t rb = mpc_row_bytes(act_vdt, n_head * head_dim);
    for (int64_t r = 0; !tiled && r < n_rows; r += ATT_SMALL_ROWS) {
        const int64_t rows = n_rows - r < ATT_SMALL_ROWS ? n_rows - r : ATT_SMALL_ROWS;
        const int rc = split_launch(d_q + r * n_head * head_dim, d_k, d_v, d_out + r * n_head * head_dim, rows,
                                    pos0 + r, d_pos ? d_pos + r : NULL, n_splits, n_head, n_head_kv, head_dim,
                                    (float *)d_scratch, act_vdt, d_act ? (char *)d_act + r * rb : NULL, &converted,
                                    window, d_sinks, st);
        if (rc)
            return rc;
    }
    if (d_act && act_vdt != MP_TYPE_F32 && !converted) // a launch of its own
        return mp_cuda_quantize_act(act_vdt, d_out, n_head * head_dim, n_rows, n_head * head_dim, d_act, st);
    return 0;
}

extern "C" int mp_cuda_attention(const float *d_q, const uint16_t *d_k, const uint16_t *d_v,
                                 float *d_out, int64_t n_rows, int64_t pos0, int64_t n_head,
                                 int64_t n_head_kv, int64_t head_dim, void *d_scratch,
                                 size_t scratch_bytes, void *stream)
{
    return attention(d_q, d_k, d_v, d_out, n_rows, pos0, NULL, pos0 + n_rows, n_head, n_head_kv,
                     head_dim, d_scratch, scratch_bytes, MP_TYPE_F32, NULL, 0, NULL, stream);
}

extern "C" int mp_cuda_attention_at(const float *d_q, const uint16_t *d_k, const uint16_t *d_v,
                                    float *d_out, int64_t n_rows, const int32_t *d_pos,
                                    int64_t n_keys_max, int64_t n_head, int64_t n_head_kv,
                                    int64_t head_dim, void *d_scratch, size_t scratch_bytes,
                                    int act_vdt, void *d_act, int64_t window, const float *d_sinks,
                                    void *stream)
{
    if (!d_pos || (d_act && act_vdt != MP_TYPE_F32 &&
                   ((act_vdt != MP_TYPE_Q8_0 && act_vdt != MP_TYPE_Q8_K) || !mpc_row_bytes(act_vdt, n_head * head_dim))))
        return MP_CUDA_EINVAL; // an activation format, and rows of whole blocks
    return attention(d_q, d_k, d_v, d_out, n_rows, 0, d_pos, n_keys_max, n_head, n_head_kv,
                     head_dim, d_scratch, scratch_bytes, act_vdt, d_act, window, d_sinks, stream);
}
