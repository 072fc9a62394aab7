// kernels/cuda/qkv.cuh — one Q or K head's finish by one warp: the optional per-head RMSNorm,
// then RoPE by the row's table of angles (mp_cuda_rope_table). Used by the Q/K/V finish of
// prefill steps (norm.cu, a warp per head) and by the decode attention's blocks, which finish
// their own heads (attention.cu, mp_cuda_attention_finish_at), so that the two give the same
// bits: a key stored by a prefill equals the one a decode step of the same row would store.
#pragma once
#include "kernels/cuda/common.cuh"

// The block kernel of the finish (norm.cu) runs this many threads; the warp version reproduces
// its norm's partial sums (virtual thread t = lane + 32 w sums elements t, t + 256, ...).
#define QKV_FINISH_THREADS 256

// head[0 .. hd) (the warp's, in shared memory) = the finished x[0 .. hd): RMS-normalized with
// weights w (NULL: ones) when norm, as norm_row's 256 threads would sum it, then rotated by the
// angles cs[0 .. rot_dim / 2). Every lane of the warp calls it; head is complete on return.
__device__ __forceinline__ void mpc_qk_finish_warp(float *head, const float *x, const float *w, int norm,
                                                   int64_t hd, int64_t rot_dim, const float2 *cs, int style,
                                                   float eps, int lane)
{
    for (int64_t i = lane; i < hd; i += 32)
        head[i] = x[i];
    __syncwarp();
    if (norm) {
        float part[QKV_FINISH_THREADS / 32]; // lane 0: virtual warp vw's shuffle-down sum
#pragma unroll
        for (int vw = 0; vw < QKV_FINISH_THREADS / 32; vw++) {
            float sum = 0.0f;
            for (int64_t i = lane + 32 * vw; i < hd; i += QKV_FINISH_THREADS)
                sum += head[i] * head[i];
            for (int off = 16; off > 0; off >>= 1)
                sum += __shfl_down_sync(0xffffffffu, sum, off);
            part[vw] = sum;
        }
        float sum = 0.0f; // block_sum's second phase: lane vw holds warp vw's sum, the rest zero
#pragma unroll
        for (int vw = 0; vw < QKV_FINISH_THREADS / 32; vw++) {
            const float s = __shfl_sync(0xffffffffu, part[vw], 0);
            if (lane == vw)
                sum = s;
        }
        for (int off = 16; off > 0; off >>= 1)
            sum += __shfl_down_sync(0xffffffffu, sum, off);
        const float scale = rsqrtf(__shfl_sync(0xffffffffu, sum, 0) / (float)hd + eps);
        for (int64_t i = lane; i < hd; i += 32)
            head[i] = head[i] * scale * (w ? w[i] : 1.0f);
        __syncwarp();
    }
    for (int64_t i = lane; i < rot_dim / 2; i += 32)
        mpc_rope_rotate(head, i, rot_dim, cs[i], style);
    __syncwarp();
}
