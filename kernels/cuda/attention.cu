// kernels/cuda/attention.cu — causal GQA attention over an F16 KV cache (decode and prefill).
//
// KV cache: F16 (half the bytes of F32 — the cache counts against --gpu-budget — and the
// precision loss, 2^-11 relative per element, is far below the activations' Q8 quantization
// the matmuls already apply). Scores, softmax and the weighted sum are f32.
//
// Split-K ("flash-decoding"): the keys of a query row are cut into chunks; block
// (row·head, chunk) computes the chunk's scores, their max m, Σ exp(s - m) = l and
// o = Σ exp(s - m) v, and writes (m, l, o) to scratch; a merge launch rescales the row's chunks by
// exp(m_c - max m) and divides. Chunks past a row's causal bound are neither computed nor merged,
// so a launch sized for the whole context (the graph-replayed decode) costs what the row's keys
// cost. Prefill uses the same kernels with one block per (row, head, chunk). Chunks hold 64 keys
// for steps of up to ATT_SMALL_ROWS rows (more blocks for a decode row's few keys) and 256 for
// larger steps (a quarter of the scratch, which grows with rows × context).
//
// Inside a block each warp takes every ATT_WARPS-th key of the chunk; a lane holds head-dim pairs
// lane, lane + 32, ... (half2 loads, coalesced across the warp): scores are one warp reduction
// per key, and the weighted sum of V accumulates in registers, summed over the warps at the end.
// (The first version looped a thread per dimension over the chunk's 256 keys one load at a time:
// 74 µs per decode layer on the H200, half the decode step; bench/NOTES-gpu-exec.md, run 5.)
#include "kernels/cuda/common.cuh"

// the chunking is the scratch size's too (kernels/cuda_sizes.h)
#define ATT_CHUNK_SMALL MP_CUDA_ATT_CHUNK_SMALL
#define ATT_CHUNK_MAX MP_CUDA_ATT_CHUNK_MAX
#define ATT_SMALL_ROWS MP_CUDA_ATT_SMALL_ROWS
#define ATT_THREADS 128
#define ATT_WARPS (ATT_THREADS / MPC_WARP)
#define ATT_MAX_HD 256
#define ATT_PAIRS (ATT_MAX_HD / 2 / MPC_WARP) // head-dim pairs per lane, at most

static int64_t att_chunk(int64_t n_rows)
{
    return mp_cuda_att_chunk(n_rows);
}

// keys of row `row`: its position + 1, from the device (graph-replayable decode) or pos0 + row
__device__ __forceinline__ int64_t att_keys(const int32_t *pos, int64_t pos0, int64_t row)
{
    return (pos ? (int64_t)pos[row] : pos0 + row) + 1;
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

__global__ void __launch_bounds__(ATT_THREADS)
attn_partial_kernel(const float *q, const uint16_t *kc, const uint16_t *vc, float *part,
                    int64_t pos0, const int32_t *pos, int64_t n_head, int64_t n_head_kv, int64_t hd,
                    int64_t chunk, int64_t n_splits)
{
    mpc_pdl_wait(); // PDL (common.cuh): nothing above reads an earlier kernel's output
    mpc_pdl_trigger();
    __shared__ float sc[ATT_CHUNK_MAX];
    __shared__ float red[ATT_WARPS];
    __shared__ float os[ATT_WARPS][ATT_MAX_HD];
    const int tid = threadIdx.x, lane = tid % MPC_WARP, warp = tid / MPC_WARP;
    const int64_t rh = blockIdx.x, split = blockIdx.y;
    const int64_t row = rh / n_head, h = rh % n_head, kvh = h / (n_head / n_head_kv);
    const int64_t n_keys = att_keys(pos, pos0, row), t0 = split * chunk;
    if (t0 >= n_keys) // past the causal bound: the merge does not read this chunk
        return;
    const int len = (int)(t0 + chunk < n_keys ? chunk : n_keys - t0);
    const int64_t n_kv = n_head_kv * hd, np = hd / 2;
    float2 qv[ATT_PAIRS];
#pragma unroll
    for (int j = 0; j < ATT_PAIRS; j++) {
        const int64_t p = lane + j * MPC_WARP;
        qv[j] = p < np ? make_float2(q[rh * hd + 2 * p], q[rh * hd + 2 * p + 1]) : make_float2(0.0f, 0.0f);
    }
    const float scale = 1.0f / sqrtf((float)hd);
    const __half2 *kb = (const __half2 *)(kc + t0 * n_kv + kvh * hd);
    const __half2 *vb = (const __half2 *)(vc + t0 * n_kv + kvh * hd);
    const int64_t stride2 = n_kv / 2;
#pragma unroll 4
    for (int t = warp; t < len; t += ATT_WARPS) {
        float s = 0.0f;
#pragma unroll
        for (int j = 0; j < ATT_PAIRS; j++) {
            const int64_t p = lane + j * MPC_WARP;
            if (p < np) {
                const float2 k = __half22float2(kb[t * stride2 + p]);
                s += qv[j].x * k.x + qv[j].y * k.y;
            }
        }
        s = mpc_warp_sum(s);
        if (lane == 0)
            sc[t] = s * scale;
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
    float2 o[ATT_PAIRS];
#pragma unroll
    for (int j = 0; j < ATT_PAIRS; j++)
        o[j] = make_float2(0.0f, 0.0f);
#pragma unroll 4
    for (int t = warp; t < len; t += ATT_WARPS) {
        const float w = sc[t];
#pragma unroll
        for (int j = 0; j < ATT_PAIRS; j++) {
            const int64_t p = lane + j * MPC_WARP;
            if (p < np) {
                const float2 v = __half22float2(vb[t * stride2 + p]);
                o[j].x += w * v.x;
                o[j].y += w * v.y;
            }
        }
    }
#pragma unroll
    for (int j = 0; j < ATT_PAIRS; j++) {
        const int64_t p = lane + j * MPC_WARP;
        if (p < np) {
            os[warp][2 * p] = o[j].x;
            os[warp][2 * p + 1] = o[j].y;
        }
    }
    __syncthreads();
    float *out = part + (rh * n_splits + split) * (hd + 2); // (m, l, o[hd])
    if (tid == 0) {
        out[0] = m;
        out[1] = l;
    }
    for (int64_t d = tid; d < hd; d += ATT_THREADS) {
        float acc = 0.0f;
        for (int w = 0; w < ATT_WARPS; w++)
            acc += os[w][d];
        out[2 + d] = acc;
    }
}

__global__ void attn_merge_kernel(const float *part, float *out, int64_t pos0, const int32_t *pos,
                                  int64_t n_head, int64_t hd, int64_t chunk, int64_t n_splits)
{
    mpc_pdl_wait(); // PDL (common.cuh): nothing above reads an earlier kernel's output
    mpc_pdl_trigger();
    const int64_t rh = blockIdx.x;
    const float *p = part + rh * n_splits * (hd + 2);
    int64_t used = (att_keys(pos, pos0, rh / n_head) + chunk - 1) / chunk;
    used = used < n_splits ? used : n_splits;
    float M = -INFINITY;
    for (int64_t s = 0; s < used; s++)
        M = fmaxf(M, p[s * (hd + 2)]);
    float L = 0.0f;
    for (int64_t s = 0; s < used; s++)
        L += expf(p[s * (hd + 2)] - M) * p[s * (hd + 2) + 1];
    const float inv = 1.0f / L;
    for (int64_t d = threadIdx.x; d < hd; d += blockDim.x) {
        float o = 0.0f;
        for (int64_t s = 0; s < used; s++)
            o += expf(p[s * (hd + 2)] - M) * p[s * (hd + 2) + 2 + d];
        out[rh * hd + d] = o * inv;
    }
}

// mp_cuda_attention_scratch_bytes: kernels/cuda_sizes.h

static int attention(const float *d_q, const uint16_t *d_k, const uint16_t *d_v, float *d_out,
                     int64_t n_rows, int64_t pos0, const int32_t *d_pos, int64_t n_keys_max,
                     int64_t n_head, int64_t n_head_kv, int64_t head_dim, void *d_scratch,
                     size_t scratch_bytes, void *stream)
{
    if (n_rows < 0 || pos0 < 0 || n_head < 1 || n_head_kv < 1 || n_head % n_head_kv ||
        head_dim < 2 || head_dim % 2 || head_dim > ATT_MAX_HD || !d_q || !d_k || !d_v || !d_out ||
        n_keys_max < 1)
        return MP_CUDA_EINVAL;
    if (n_rows == 0)
        return 0;
    const int64_t chunk = att_chunk(n_rows), n_splits = (n_keys_max + chunk - 1) / chunk;
    if (n_splits > 65535) // gridDim.y: contexts beyond 4M keys
        return MP_CUDA_EINVAL;
    if (!d_scratch ||
        scratch_bytes < mp_cuda_attention_scratch_bytes(n_rows, n_head, head_dim, n_keys_max))
        return MP_CUDA_ENOMEM;
    cudaStream_t st = (cudaStream_t)stream;
    const dim3 grid((unsigned)(n_rows * n_head), (unsigned)n_splits);
    mpc_launch(attn_partial_kernel, dim3(grid), dim3(ATT_THREADS), 0, st, d_q, d_k, d_v, (float *)d_scratch,
               pos0, d_pos, n_head, n_head_kv, head_dim, chunk, n_splits);
    if (cudaGetLastError() != cudaSuccess)
        return MP_CUDA_ELAUNCH;
    mpc_launch(attn_merge_kernel, dim3((unsigned)(n_rows * n_head)), dim3(128), 0, st, (const float *)d_scratch,
               d_out, pos0, d_pos, n_head, head_dim, chunk, n_splits);
    return mpc_launch_status();
}

extern "C" int mp_cuda_attention(const float *d_q, const uint16_t *d_k, const uint16_t *d_v,
                                 float *d_out, int64_t n_rows, int64_t pos0, int64_t n_head,
                                 int64_t n_head_kv, int64_t head_dim, void *d_scratch,
                                 size_t scratch_bytes, void *stream)
{
    return attention(d_q, d_k, d_v, d_out, n_rows, pos0, NULL, pos0 + n_rows, n_head, n_head_kv,
                     head_dim, d_scratch, scratch_bytes, stream);
}

extern "C" int mp_cuda_attention_at(const float *d_q, const uint16_t *d_k, const uint16_t *d_v,
                                    float *d_out, int64_t n_rows, const int32_t *d_pos,
                                    int64_t n_keys_max, int64_t n_head, int64_t n_head_kv,
                                    int64_t head_dim, void *d_scratch, size_t scratch_bytes,
                                    void *stream)
{
    if (!d_pos)
        return MP_CUDA_EINVAL;
    return attention(d_q, d_k, d_v, d_out, n_rows, 0, d_pos, n_keys_max, n_head, n_head_kv,
                     head_dim, d_scratch, scratch_bytes, stream);
}
