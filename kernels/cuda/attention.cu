// kernels/cuda/attention.cu — causal GQA attention over an F16 KV cache (decode and prefill).
//
// KV cache: F16 (half the bytes of F32 — the cache counts against --gpu-budget — and the
// precision loss, 2^-11 relative per element, is far below the activations' Q8 quantization
// the matmuls already apply). Scores, softmax and the weighted sum are f32.
//
// Split-K ("flash-decoding"): the keys of a query row are cut into chunks of ATT_CHUNK; block
// (row·head, chunk) computes the chunk's scores into shared memory, their max m, Σ exp(s - m)
// = l and o = Σ exp(s - m) v, and writes (m, l, o) to scratch; a merge launch rescales the
// chunks by exp(m_c - max m) and divides. Decode (1 row) at long context thus spreads over
// context / 256 blocks per head instead of one; prefill uses the same kernels with one block
// per (row, head, chunk) — simple, and the causal bound skips every chunk past the row.
#include "kernels/cuda/common.cuh"

#define ATT_CHUNK 256
#define ATT_THREADS 128
#define ATT_MAX_HD 256

__global__ void __launch_bounds__(ATT_THREADS)
attn_partial_kernel(const float *q, const uint16_t *kc, const uint16_t *vc, float *part,
                    int64_t pos0, const int32_t *pos, int64_t n_head, int64_t n_head_kv, int64_t hd,
                    int64_t n_splits)
{
    __shared__ float qs[ATT_MAX_HD];
    __shared__ float sc[ATT_CHUNK];
    __shared__ float red[ATT_THREADS / MPC_WARP];
    const int tid = threadIdx.x, lane = tid % MPC_WARP, warp = tid / MPC_WARP;
    const int64_t rh = blockIdx.x, split = blockIdx.y;
    const int64_t row = rh / n_head, h = rh % n_head, kvh = h / (n_head / n_head_kv);
    // the row's position: from the device (graph-replayable decode) or pos0 + row
    const int64_t n_keys = (pos ? (int64_t)pos[row] : pos0 + row) + 1, t0 = split * ATT_CHUNK;
    const int64_t t1 = t0 + ATT_CHUNK < n_keys ? t0 + ATT_CHUNK : n_keys;
    float *out = part + (rh * n_splits + split) * (hd + 2); // (m, l, o[hd])
    if (t0 >= n_keys) { // past the causal bound: an empty chunk
        for (int64_t d = tid; d < hd + 2; d += ATT_THREADS)
            out[d] = d == 0 ? -INFINITY : 0.0f;
        return;
    }
    const int64_t n_kv = n_head_kv * hd;
    for (int64_t d = tid; d < hd; d += ATT_THREADS)
        qs[d] = q[rh * hd + d];
    __syncthreads();
    const float scale = 1.0f / sqrtf((float)hd);
    for (int64_t t = t0 + warp; t < t1; t += ATT_THREADS / MPC_WARP) {
        const uint16_t *k = kc + t * n_kv + kvh * hd;
        float s = 0.0f;
        for (int64_t d = lane; d < hd; d += MPC_WARP)
            s += qs[d] * mpc_f16(k[d]);
        s = mpc_warp_sum(s);
        if (lane == 0)
            sc[t - t0] = s * scale;
    }
    __syncthreads();
    const int64_t len = t1 - t0;
    float m = -INFINITY;
    for (int64_t t = tid; t < len; t += ATT_THREADS)
        m = fmaxf(m, sc[t]);
    m = mpc_warp_max(m);
    if (lane == 0)
        red[warp] = m;
    __syncthreads();
    m = red[0];
    for (int w = 1; w < ATT_THREADS / MPC_WARP; w++)
        m = fmaxf(m, red[w]);
    __syncthreads(); // red is reused below
    float l = 0.0f;
    for (int64_t t = tid; t < len; t += ATT_THREADS) {
        sc[t] = expf(sc[t] - m);
        l += sc[t];
    }
    l = mpc_warp_sum(l);
    if (lane == 0)
        red[warp] = l;
    __syncthreads();
    if (tid == 0) {
        float tot = 0.0f;
        for (int w = 0; w < ATT_THREADS / MPC_WARP; w++)
            tot += red[w];
        out[0] = m;
        out[1] = tot;
    }
    for (int64_t d = tid; d < hd; d += ATT_THREADS) {
        float o = 0.0f;
        for (int64_t t = 0; t < len; t++)
            o += sc[t] * mpc_f16(vc[(t0 + t) * n_kv + kvh * hd + d]);
        out[2 + d] = o;
    }
}

__global__ void attn_merge_kernel(const float *part, float *out, int64_t hd, int64_t n_splits)
{
    const int64_t rh = blockIdx.x;
    const float *p = part + rh * n_splits * (hd + 2);
    float M = -INFINITY;
    for (int64_t s = 0; s < n_splits; s++)
        M = fmaxf(M, p[s * (hd + 2)]);
    float L = 0.0f;
    for (int64_t s = 0; s < n_splits; s++)
        L += expf(p[s * (hd + 2)] - M) * p[s * (hd + 2) + 1];
    const float inv = 1.0f / L;
    for (int64_t d = threadIdx.x; d < hd; d += blockDim.x) {
        float o = 0.0f;
        for (int64_t s = 0; s < n_splits; s++)
            o += expf(p[s * (hd + 2)] - M) * p[s * (hd + 2) + 2 + d];
        out[rh * hd + d] = o * inv;
    }
}

extern "C" size_t mp_cuda_attention_scratch_bytes(int64_t n_rows, int64_t n_head,
                                                  int64_t head_dim, int64_t n_keys_max)
{
    if (n_rows < 1 || n_head < 1 || head_dim < 1 || n_keys_max < 1)
        return 0;
    const int64_t n_splits = (n_keys_max + ATT_CHUNK - 1) / ATT_CHUNK;
    return (size_t)(n_rows * n_head * n_splits * (head_dim + 2)) * sizeof(float);
}

static int attention(const float *d_q, const uint16_t *d_k, const uint16_t *d_v, float *d_out,
                     int64_t n_rows, int64_t pos0, const int32_t *d_pos, int64_t n_keys_max,
                     int64_t n_head, int64_t n_head_kv, int64_t head_dim, void *d_scratch,
                     size_t scratch_bytes, void *stream)
{
    if (n_rows < 0 || pos0 < 0 || n_head < 1 || n_head_kv < 1 || n_head % n_head_kv ||
        head_dim < 1 || head_dim > ATT_MAX_HD || !d_q || !d_k || !d_v || !d_out || n_keys_max < 1)
        return MP_CUDA_EINVAL;
    if (n_rows == 0)
        return 0;
    const int64_t n_splits = (n_keys_max + ATT_CHUNK - 1) / ATT_CHUNK;
    if (n_splits > 65535) // gridDim.y: contexts beyond 16M keys
        return MP_CUDA_EINVAL;
    if (!d_scratch ||
        scratch_bytes < mp_cuda_attention_scratch_bytes(n_rows, n_head, head_dim, n_keys_max))
        return MP_CUDA_ENOMEM;
    cudaStream_t st = (cudaStream_t)stream;
    const dim3 grid((unsigned)(n_rows * n_head), (unsigned)n_splits);
    attn_partial_kernel<<<grid, ATT_THREADS, 0, st>>>(d_q, d_k, d_v, (float *)d_scratch, pos0, d_pos,
                                                      n_head, n_head_kv, head_dim, n_splits);
    if (cudaGetLastError() != cudaSuccess)
        return MP_CUDA_ELAUNCH;
    attn_merge_kernel<<<(unsigned)(n_rows * n_head), 128, 0, st>>>((const float *)d_scratch, d_out,
                                                                   head_dim, n_splits);
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
