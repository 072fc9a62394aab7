// kernels/cuda/norm.cu — RMSNorm on the device, the first CUDA kernel (tested against
// kernels/cpu/ops_scalar.c's mp_rmsnorm on random inputs in tests/gpu/).
#include <cuda_runtime.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/cuda/common.cuh"

// The block-wide f32 sum of each thread's partial (warp shuffles, then the warps' sums): the
// same order for every norm kernel here, which is what makes add_rmsnorm bit-identical.
__device__ __forceinline__ float block_sum(float sum)
{
    __shared__ float warp_sums[32];
    for (int off = 16; off > 0; off >>= 1)
        sum += __shfl_down_sync(0xffffffffu, sum, off);
    if ((threadIdx.x & 31) == 0)
        warp_sums[threadIdx.x >> 5] = sum;
    __syncthreads();
    if (threadIdx.x < 32) {
        int n_warps = (blockDim.x + 31) >> 5;
        sum = threadIdx.x < n_warps ? warp_sums[threadIdx.x] : 0.0f;
        for (int off = 16; off > 0; off >>= 1)
            sum += __shfl_down_sync(0xffffffffu, sum, off);
        if (threadIdx.x == 0)
            warp_sums[0] = sum;
    }
    __syncthreads();
    return warp_sums[0];
}

// One row by the whole block: x += y when y is given (written back), then out = x · rsqrt(mean(x²)
// + eps) · w (w NULL: no weights). out may alias x. Every norm kernel here goes through this one
// body — the same per-thread order and the same block_sum — which is what makes the fused
// kernels bit-identical to the launches they replace.
// R: elements per thread held in registers (rows up to R x blockDim; longer rows take the loop
// below). The row kernels launch with norm_threads(n) threads and the smallest R that holds the
// row, so that a 2,048-element row is 2 elements on each of 1,024 threads: one 256-thread block
// per row with 16 predicated slots each (before commit c7c1139) spent ~1,000 dependent
// instructions per warp on one row, 7.5 us in Nsight Compute with 0.15 instructions issued per
// cycle (H200, 2026-12-01).
#define NORM_REG_ELEMS 16
template <int R = NORM_REG_ELEMS>
__device__ __forceinline__ void norm_row(float *outr, float *xr, const float *yr, const float *w, int64_t n,
                                         float eps, float *mirror = NULL)
{
    float sum = 0.0f;
    if (n <= (int64_t)R * blockDim.x) {
        /* the row's elements of this thread stay in registers between the two passes, and the
         * first pass's loads are issued together; the same elements in the same order as the
         * loop below, so the same sum and the same outputs */
        float v[R], wv[R];
        /* every load first (x, y and w), then the stores: a store to x or out between two loads
         * would make the compiler keep the program order (the rows may alias), and each load
         * would then wait out the previous one's latency; 7.4 µs per 2048-element row on the
         * H200 (bench/results/2026-11-29-h200-cupti-profile-gpu-2.md) where one latency is
         * about 1 µs */
#pragma unroll
        for (int j = 0; j < R; j++) {
            const int64_t i = threadIdx.x + (int64_t)j * blockDim.x;
            v[j] = 0.0f;
            wv[j] = 1.0f;
            if (i < n) {
                v[j] = yr ? xr[i] + yr[i] : xr[i];
                if (w)
                    wv[j] = w[i];
            }
        }
#pragma unroll
        for (int j = 0; j < R; j++) {
            const int64_t i = threadIdx.x + (int64_t)j * blockDim.x;
            if (i < n) {
                if (yr)
                    xr[i] = v[j];
                sum += v[j] * v[j];
            }
        }
        const float scale = rsqrtf(block_sum(sum) / (float)n + eps);
#pragma unroll
        for (int j = 0; j < R; j++) {
            const int64_t i = threadIdx.x + (int64_t)j * blockDim.x;
            if (i < n) {
                const float o = v[j] * scale * wv[j];
                outr[i] = o;
                if (mirror)
                    mirror[i] = o;
            }
        }
        return;
    }
    for (int64_t i = threadIdx.x; i < n; i += blockDim.x) {
        if (yr) {
            const float v = xr[i] + yr[i];
            xr[i] = v;
            sum += v * v;
        } else {
            sum += xr[i] * xr[i];
        }
    }
    const float scale = rsqrtf(block_sum(sum) / (float)n + eps);
    for (int64_t i = threadIdx.x; i < n; i += blockDim.x) {
        const float o = xr[i] * scale * (w ? w[i] : 1.0f);
        outr[i] = o;
        if (mirror)
            mirror[i] = o;
    }
}

// One block per row; a block-wide float32 sum of squares, then a scaled write. Memory-bound.
template <int R>
__global__ void rmsnorm_kernel(float *out, const float *x, const float *w, int64_t n, float eps)
{
    mpc_pdl_wait(); // PDL (common.cuh): nothing above reads an earlier kernel's output
    mpc_pdl_trigger();
    /* x is only read: norm_row writes x back only when given a y */
    norm_row<R>(out + blockIdx.x * n, (float *)x + blockIdx.x * n, NULL, w, n, eps);
}

// x += y, then out = rmsnorm(x) * w, one block per row: the residual add fused into the next
// norm (one launch and one pass over x less), bit-identical to the two launches.
template <int R>
__global__ void add_rmsnorm_kernel(float *out, float *x, const float *y, const float *w, int64_t n,
                                   float eps)
{
    mpc_pdl_wait(); // PDL (common.cuh): nothing above reads an earlier kernel's output
    mpc_pdl_trigger();
    norm_row<R>(out + blockIdx.x * n, x + blockIdx.x * n, y + blockIdx.x * n, w, n, eps);
}

// What follows the Q/K/V projections of a step, in one launch: one block per (row, head) of Q,
// K and V. Q and K heads: optional per-head RMSNorm (norm_row with rmsnorm_kernel's block size),
// then RoPE of every pair (mpc_rope_rotate by the rows' table of angles, mp_cuda_rope_table), written back; K heads also go to the F16 cache at row
// d_pos[row]; V heads only go to the cache. Five launches before (q norm, k norm, rope q, rope k,
// K+V store), bit-identical results.
#define QKV_FINISH_THREADS 256
__global__ void qkv_finish_kernel(float *q, float *k, const float *v, const float *qw, const float *kw,
                                  int norm, int64_t n_head, int64_t n_head_kv, int64_t hd, int64_t rot_dim,
                                  const int32_t *pos, const float2 *cs, int style, float eps, uint16_t *kc,
                                  uint16_t *vc)
{
    mpc_pdl_wait(); // PDL (common.cuh): nothing above reads an earlier kernel's output
    mpc_pdl_trigger();
    extern __shared__ float head[]; // (hd) the head being finished
    const int64_t heads = n_head + 2 * n_head_kv, n_kv = n_head_kv * hd;
    const int64_t r = blockIdx.x / heads, h = blockIdx.x % heads;
    const int64_t p = pos[r];
    if (h >= n_head + n_head_kv) { // a V head: to the cache as it is
        const int64_t j = h - n_head - n_head_kv;
        const float *src = v + r * n_kv + j * hd;
        uint16_t *dst = vc + p * n_kv + j * hd;
        for (int64_t i = threadIdx.x; i < hd; i += blockDim.x)
            dst[i] = __half_as_ushort(__float2half_rn(src[i]));
        return;
    }
    const bool is_q = h < n_head;
    float *x = is_q ? q + (r * n_head + h) * hd : k + r * n_kv + (h - n_head) * hd;
    for (int64_t i = threadIdx.x; i < hd; i += blockDim.x)
        head[i] = x[i]; /* each thread reads back only the elements it wrote */
    if (norm) // block-uniform: every thread takes the branch or none does
        norm_row(head, head, NULL, is_q ? qw : kw, hd, eps);
    __syncthreads();
    for (int64_t i = threadIdx.x; i < rot_dim / 2; i += blockDim.x)
        mpc_rope_rotate(head, i, rot_dim, cs[r * (rot_dim / 2) + i], style);
    __syncthreads();
    for (int64_t i = threadIdx.x; i < hd; i += blockDim.x)
        x[i] = head[i];
    if (!is_q) {
        uint16_t *dst = kc + p * n_kv + (h - n_head) * hd;
        for (int64_t i = threadIdx.x; i < hd; i += blockDim.x)
            dst[i] = __half_as_ushort(__float2half_rn(head[i]));
    }
}

// The same with one warp per (row, head), QKV_WARP_HEADS heads per block: the prefill profile
// (bench/results/2026-11-29-h200-cupti-profile-gpu-2.md) put qkv_finish_kernel at 100.7 µs per
// layer for 336 rows, one 256-thread block with four barriers per 128-element head. Bit-identical
// to it: the head sits in shared memory as there; the norm's partial sums are the ones norm_row's
// 256 threads hold (virtual thread t = lane + 32 w sums elements t, t + 256, ... in that order),
// reduced as block_sum reduces them (a shuffle-down tree per virtual warp, then one over the 8
// warp sums with zeros above them), and the scale, weights and RoPE pairs are the same
// expressions (mpc_rope_rotate). Prefill takes it (H200, 2026-11-29: pp512 3,565 -> 3,712 tok/s,
// pp2048 2,328 -> 2,389 against the block kernel; bench/NOTES-gpu-exec.md run 11).
#define QKV_WARP_HEADS 8
#define QKV_WARP_MAX_HD 1024 // shared memory: QKV_WARP_HEADS heads of this many floats, 32 KiB
__global__ void __launch_bounds__(QKV_WARP_HEADS * 32)
qkv_finish_warp_kernel(float *q, float *k, const float *v, const float *qw, const float *kw, int norm,
                       int64_t n_head, int64_t n_head_kv, int64_t hd, int64_t rot_dim, const int32_t *pos,
                       const float2 *cs, int style, float eps, uint16_t *kc, uint16_t *vc, int64_t n_items)
{
    mpc_pdl_wait(); // PDL (common.cuh): nothing above reads an earlier kernel's output
    mpc_pdl_trigger();
    extern __shared__ float heads_sh[]; // (QKV_WARP_HEADS, hd)
    const int lane = threadIdx.x & 31, w = threadIdx.x >> 5;
    const int64_t item = (int64_t)blockIdx.x * QKV_WARP_HEADS + w;
    if (item >= n_items) // warp-uniform, and nothing below waits on the whole block
        return;
    float *head = heads_sh + (int64_t)w * hd;
    const int64_t heads = n_head + 2 * n_head_kv, n_kv = n_head_kv * hd;
    const int64_t r = item / heads, h = item % heads;
    const int64_t p = pos[r];
    if (h >= n_head + n_head_kv) { // a V head: to the cache as it is
        const int64_t j = h - n_head - n_head_kv;
        const float *src = v + r * n_kv + j * hd;
        uint16_t *dst = vc + p * n_kv + j * hd;
        for (int64_t i = lane; i < hd; i += 32)
            dst[i] = __half_as_ushort(__float2half_rn(src[i]));
        return;
    }
    const bool is_q = h < n_head;
    float *x = is_q ? q + (r * n_head + h) * hd : k + r * n_kv + (h - n_head) * hd;
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
        const float *wt = is_q ? qw : kw;
        for (int64_t i = lane; i < hd; i += 32)
            head[i] = head[i] * scale * (wt ? wt[i] : 1.0f);
        __syncwarp();
    }
    for (int64_t i = lane; i < rot_dim / 2; i += 32)
        mpc_rope_rotate(head, i, rot_dim, cs[r * (rot_dim / 2) + i], style);
    __syncwarp();
    for (int64_t i = lane; i < hd; i += 32)
        x[i] = head[i];
    if (!is_q) {
        uint16_t *dst = kc + p * n_kv + (h - n_head) * hd;
        for (int64_t i = lane; i < hd; i += 32)
            dst[i] = __half_as_ushort(__float2half_rn(head[i]));
    }
}

// Which kernel: the warp kernel from QKV_WARP_MIN_ROWS rows, the block kernel below them. At one
// row the warp kernel's 5 blocks (Qwen3-30B-A3B: 40 heads) leave most SMs idle: decode tg128 went
// 231.5 -> 225.9 tok/s with it (2026-11-29, the same A/B run as the prefill gain above).
#define QKV_WARP_MIN_ROWS 16

extern "C" int mp_cuda_qkv_finish(float *d_q, float *d_k, const float *d_v, const float *d_q_norm,
                                  const float *d_k_norm, int norm, int64_t n_rows, int64_t n_head,
                                  int64_t n_head_kv, int64_t head_dim, int64_t rot_dim, const int32_t *d_pos,
                                  const float *d_rope_cs, int style, float eps, uint16_t *d_kcache,
                                  uint16_t *d_vcache, void *stream)
{
    if (n_rows < 0 || n_head < 1 || n_head_kv < 1 || n_head % n_head_kv || head_dim < 2 || rot_dim < 2 ||
        rot_dim > head_dim || rot_dim % 2 || head_dim > 4096 || !d_q || !d_k || !d_v || !d_pos || !d_rope_cs ||
        !d_kcache || !d_vcache || (style != MP_CUDA_ROPE_NEOX && style != MP_CUDA_ROPE_NORM))
        return MP_CUDA_EINVAL;
    const int64_t blocks = n_rows * (n_head + 2 * n_head_kv);
    if (blocks == 0)
        return 0;
    if (n_rows >= QKV_WARP_MIN_ROWS && head_dim <= QKV_WARP_MAX_HD) {
        mpc_launch(qkv_finish_warp_kernel, dim3((unsigned)((blocks + QKV_WARP_HEADS - 1) / QKV_WARP_HEADS)),
                   dim3(QKV_WARP_HEADS * 32), (size_t)(QKV_WARP_HEADS * head_dim) * sizeof(float),
                   (cudaStream_t)stream, d_q, d_k, d_v, d_q_norm, d_k_norm, norm, n_head, n_head_kv, head_dim,
                   rot_dim, d_pos, (const float2 *)d_rope_cs, style, eps, d_kcache, d_vcache, blocks);
        return mpc_launch_status();
    }
    mpc_launch(qkv_finish_kernel, dim3((unsigned)blocks), dim3(QKV_FINISH_THREADS),
               (size_t)head_dim * sizeof(float), (cudaStream_t)stream, d_q, d_k, d_v, d_q_norm, d_k_norm, norm,
               n_head, n_head_kv, head_dim, rot_dim, d_pos, (const float2 *)d_rope_cs, style, eps, d_kcache, d_vcache);
    return mpc_launch_status();
}

// (x += y when y is given,) out = rmsnorm(x) * w, and out quantized to vdt (Q8_0 or Q8_K) into q,
// one block per row: the norm by norm_row as in add_rmsnorm_kernel / rmsnorm_kernel, then each warp
// quantizes blocks of the row it and its block wrote (mpc_quantize_*_warp, as the quantize
// kernels do). One launch where a decode step had two before every quantized projection.
// The normalized row is also kept in shared memory when it fits (shared_row): the quantizing
// warps read it there instead of back from global memory.
template <int R>
__global__ void rmsnorm_quant_kernel(float *out, float *x, const float *y, const float *w, int64_t n,
                                     float eps, int vdt, uint8_t *q, size_t q_row_bytes, int shared_row)
{
    mpc_pdl_wait(); // PDL (common.cuh): nothing above reads an earlier kernel's output
    mpc_pdl_trigger();
    extern __shared__ float row_sh[];
    float *outr = out + blockIdx.x * n;
    norm_row<R>(outr, x + blockIdx.x * n, y ? y + blockIdx.x * n : NULL, w, n, eps, shared_row ? row_sh : NULL);
    __syncthreads(); // the row is written; every warp may now read all of it
    const float *src = shared_row ? row_sh : outr;
    const int warp = threadIdx.x / MPC_WARP, lane = threadIdx.x % MPC_WARP, n_warps = blockDim.x / MPC_WARP;
    uint8_t *qr = q + blockIdx.x * q_row_bytes;
    if (vdt == MP_TYPE_Q8_0)
        for (int64_t ib = warp; ib < n / 32; ib += n_warps)
            mpc_quantize_q8_0_warp(src + ib * 32, qr + ib * 34, lane);
    else
        for (int64_t ib = warp; ib < n / 256; ib += n_warps)
            mpc_quantize_q8_K_warp(src + ib * 256, qr + ib * 292, lane);
}

// Threads per row for the row kernels (rmsnorm, add_rmsnorm, rmsnorm_quant: one choice, so that
// the fused kernels stay bit-identical to the separate ones): 2 elements per thread up to 1,024
// threads, at least 256. Against one 256-thread block per row: all-GPU tg128 266.8 -> 279.5 tok/s
// on the H200 (2026-12-01, bench/NOTES-gpu-exec.md run 17).
static int norm_threads(int64_t n)
{
    int64_t t = (n / 2 + 31) / 32 * 32;
    return t < 256 ? 256 : t > 1024 ? 1024 : (int)t;
}

// The register slots per thread for a row of n over t threads: 1, 2, 4, 8 or 16 (0: the loop).
static int norm_regs(int64_t n, int t)
{
    for (int r = 1; r <= NORM_REG_ELEMS; r *= 2)
        if (n <= (int64_t)r * t)
            return r;
    return 0;
}

#define NORM_DISPATCH(R, launch)          \
    switch (R) {                          \
    case 1: launch(1); break;             \
    case 2: launch(2); break;             \
    case 4: launch(4); break;             \
    case 8: launch(8); break;             \
    default: launch(NORM_REG_ELEMS); break; \
    }

extern "C" int mp_cuda_rmsnorm_quant(float *d_out, float *d_x, const float *d_y, const float *d_w, int64_t rows,
                                     int64_t n, float eps, int vdt, void *d_q, void *stream)
{
    if (rows <= 0)
        return 0;
    const size_t rb = mpc_row_bytes(vdt, n);
    const size_t align = vdt == MP_TYPE_Q8_K ? 4 : 2; /* the blocks' float / f16 fields */
    if (!d_out || !d_x || !d_q || d_out == d_x || n < 1 || rb == 0 || (vdt != MP_TYPE_Q8_0 && vdt != MP_TYPE_Q8_K) ||
        (uintptr_t)d_q % align || rb % align)
        return MP_CUDA_EINVAL;
    const int shared_row = n * sizeof(float) <= 32768; /* the row in shared memory (2048: 8 KiB) */
    const int t = norm_threads(n);
#define LAUNCH(R)                                                                                   \
    mpc_launch(rmsnorm_quant_kernel<R>, dim3((unsigned)rows), dim3(t),                                  \
               shared_row ? (size_t)n * sizeof(float) : 0, (cudaStream_t)stream, d_out, d_x, d_y, d_w, n, eps, \
               vdt, (uint8_t *)d_q, rb, shared_row)
    NORM_DISPATCH(norm_regs(n, t), LAUNCH)
#undef LAUNCH
    return mpc_launch_status();
}

extern "C" int mp_cuda_add_rmsnorm(float *d_out, float *d_x, const float *d_y, const float *d_w,
                                   int64_t rows, int64_t n, float eps, void *stream)
{
    if (rows <= 0)
        return 0;
    if (!d_out || !d_x || !d_y || d_out == d_x || n < 1)
        return MP_CUDA_EINVAL;
    const int t = norm_threads(n);
#define LAUNCH(R)                                                                                   \
    mpc_launch(add_rmsnorm_kernel<R>, dim3((unsigned)rows), dim3(t), 0, (cudaStream_t)stream, d_out, d_x, d_y, d_w, \
               n, eps)
    NORM_DISPATCH(norm_regs(n, t), LAUNCH)
#undef LAUNCH
    return cudaGetLastError() == cudaSuccess ? 0 : MP_CUDA_ELAUNCH;
}

extern "C" int mp_cuda_available(char *why, size_t why_cap)
{
    int count = 0;
    cudaError_t e = cudaGetDeviceCount(&count);
    if (e != cudaSuccess || count == 0) {
        snprintf(why, why_cap, "no CUDA device (%s)",
                 e != cudaSuccess ? cudaGetErrorString(e) : "device count is 0");
        return 0;
    }
    cudaDeviceProp prop;
    if (cudaGetDeviceProperties(&prop, 0) != cudaSuccess || prop.major < 7) {
        snprintf(why, why_cap, "CUDA device 0 is unsupported (compute capability %d.%d < 7.0)",
                 prop.major, prop.minor);
        return 0;
    }
    // code this device can load: machine code of its architecture, or PTX of one at most its own
    // (meson.build's cuda_gencode); else every launch would fail with "no kernel image"
    cudaFuncAttributes fa;
    const cudaError_t ke = cudaFuncGetAttributes(&fa, rmsnorm_kernel<1>);
    if (ke != cudaSuccess) {
        cudaGetLastError();
        snprintf(why, why_cap,
                 "CUDA device 0 (%s, compute capability %d.%d) cannot load this build's kernels (%s): rebuild "
                 "with -Dsm_arch=%d%d",
                 prop.name, prop.major, prop.minor, cudaGetErrorString(ke), prop.major, prop.minor);
        return 0;
    }
    return 1;
}

extern "C" int mp_cuda_rmsnorm(float *d_out, const float *d_x, const float *d_w, int64_t rows,
                               int64_t n, float eps, void *stream)
{
    if (rows <= 0)
        return 0;
    const int t = norm_threads(n);
#define LAUNCH(R) \
    mpc_launch(rmsnorm_kernel<R>, dim3((unsigned)rows), dim3(t), 0, (cudaStream_t)stream, d_out, d_x, d_w, n, eps)
    NORM_DISPATCH(norm_regs(n, t), LAUNCH)
#undef LAUNCH
    return cudaGetLastError() == cudaSuccess ? 0 : -1;
}

extern "C" int mp_cuda_rmsnorm_host(float *out, const float *x, const float *w, int64_t rows,
                                    int64_t n, float eps)
{
    float *d_x = NULL, *d_w = NULL, *d_out = NULL;
    size_t bytes = (size_t)(rows * n) * sizeof(float);
    int rc = -1;
    if (cudaMalloc(&d_x, bytes) != cudaSuccess || cudaMalloc(&d_out, bytes) != cudaSuccess ||
        cudaMalloc(&d_w, (size_t)n * sizeof(float)) != cudaSuccess)
        goto done;
    if (cudaMemcpy(d_x, x, bytes, cudaMemcpyHostToDevice) != cudaSuccess ||
        cudaMemcpy(d_w, w, (size_t)n * sizeof(float), cudaMemcpyHostToDevice) != cudaSuccess)
        goto done;
    if (mp_cuda_rmsnorm(d_out, d_x, d_w, rows, n, eps, 0) != 0)
        goto done;
    if (cudaMemcpy(out, d_out, bytes, cudaMemcpyDeviceToHost) != cudaSuccess)
        goto done;
    rc = 0;
done:
    cudaFree(d_x);
    cudaFree(d_w);
    cudaFree(d_out);
    return rc;
}
