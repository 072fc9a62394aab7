// kernels/cuda/elementwise.cu — RoPE, SwiGLU, residual add and the F16 KV-cache store.
//
// All are one thread per output element (or per rotated pair), memory-bound and tiny next to the
// GEMVs. RoPE computes its angles in float64 from the host's per-position angles (mp_rope_freqs)
// as mp_rope_cache does and rotates with _rn
// intrinsics (no FMA), so it matches the CPU up to the last ulp of the double cos/sin; the
// KV store's f32 → f16 rounding is IEEE round-to-nearest-even, as mp_f32_to_f16.
#include "kernels/cuda/common.cuh"

__global__ void rope_kernel(float *x, int64_t n_rows, int64_t row_stride, int64_t n_head,
                            int64_t head_dim, int64_t rot_dim, const int32_t *pos, const double *theta,
                            float mscale, int style)
{
    const int64_t half = rot_dim / 2;
    const int64_t t = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (t >= n_rows * n_head * half)
        return;
    const int64_t i = t % half, h = (t / half) % n_head, r = t / (half * n_head);
    mpc_rope_rotate(x + r * row_stride + h * head_dim, i, rot_dim, mpc_rope_cs(i, pos[r], theta, mscale), style);
}

extern "C" int mp_cuda_rope(float *d_x, int64_t n_rows, int64_t row_stride, int64_t n_head,
                            int64_t head_dim, int64_t rot_dim, const int32_t *d_pos,
                            const double *d_theta, float mscale, int style, void *stream)
{
    if (n_rows < 0 || n_head < 1 || head_dim < 2 || rot_dim < 2 || rot_dim > head_dim ||
        rot_dim % 2 || row_stride < n_head * head_dim || !d_x || !d_pos || !d_theta ||
        (style != MP_CUDA_ROPE_NEOX && style != MP_CUDA_ROPE_NORM))
        return MP_CUDA_EINVAL;
    const int64_t total = n_rows * n_head * (rot_dim / 2);
    if (total == 0)
        return 0;
    rope_kernel<<<(unsigned)((total + 255) / 256), 256, 0, (cudaStream_t)stream>>>(
        d_x, n_rows, row_stride, n_head, head_dim, rot_dim, d_pos, d_theta, mscale, style);
    return mpc_launch_status();
}

// The rows' angles: cs[r · rot_dim/2 + i] = pair i's (cos, sin) at position pos[r]. One launch
// per step: a layer's Q/K finish then reads them where it computed them (float64 cos and sin:
// about a microsecond of every finish block's time, the same for all layers of a step).
__global__ void rope_table_kernel(float2 *cs, const int32_t *pos, int64_t n_rows, int64_t rot_dim,
                                  const double *theta, float mscale)
{
    mpc_pdl_wait(); // PDL (common.cuh): nothing above reads an earlier kernel's output
    mpc_pdl_trigger();
    const int64_t half = rot_dim / 2;
    const int64_t t = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (t < n_rows * half)
        cs[t] = mpc_rope_cs(t % half, pos[t / half], theta, mscale);
}

extern "C" int mp_cuda_rope_table(float *d_cs, const int32_t *d_pos, int64_t n_rows, int64_t rot_dim,
                                  const double *d_theta, float mscale, void *stream)
{
    if (n_rows < 0 || rot_dim < 2 || rot_dim % 2 || !d_cs || !d_pos || !d_theta)
        return MP_CUDA_EINVAL;
    const int64_t total = n_rows * (rot_dim / 2);
    if (total == 0)
        return 0;
    mpc_launch(rope_table_kernel, dim3((unsigned)((total + 127) / 128)), dim3(128), 0, (cudaStream_t)stream,
               (float2 *)d_cs, d_pos, n_rows, rot_dim, d_theta, mscale);
    return mpc_launch_status();
}

__global__ void swiglu_kernel(float *out, const float *gate, const float *up, int64_t n)
{
    const int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) {
        const float g = gate[i];
        out[i] = g / (1.0f + expf(-g)) * up[i];
    }
}

extern "C" int mp_cuda_swiglu(float *d_out, const float *d_gate, const float *d_up, int64_t n,
                              void *stream)
{
    if (n < 0 || !d_out || !d_gate || !d_up)
        return MP_CUDA_EINVAL;
    if (n == 0)
        return 0;
    swiglu_kernel<<<(unsigned)((n + 255) / 256), 256, 0, (cudaStream_t)stream>>>(d_out, d_gate,
                                                                                d_up, n);
    return mpc_launch_status();
}

__global__ void add_kernel(float *y, const float *x, int64_t n)
{
    mpc_pdl_wait(); // PDL (common.cuh): nothing above reads an earlier kernel's output
    mpc_pdl_trigger();
    const int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n)
        y[i] += x[i];
}

extern "C" int mp_cuda_add(float *d_y, const float *d_x, int64_t n, void *stream)
{
    if (n < 0 || !d_y || !d_x)
        return MP_CUDA_EINVAL;
    if (n == 0)
        return 0;
    mpc_launch(add_kernel, dim3((unsigned)((n + 255) / 256)), dim3(256), 0, (cudaStream_t)stream, d_y, d_x, n);
    return mpc_launch_status();
}

__global__ void add_bias_kernel(float *x, const float *b, int64_t width, int64_t n)
{
    mpc_pdl_wait();
    mpc_pdl_trigger();
    const int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n)
        x[i] += b[i % width];
}

extern "C" int mp_cuda_add_bias(float *d_x, const float *d_b, int64_t n_rows, int64_t width, void *stream)
{
    if (n_rows < 0 || width < 1 || !d_x || !d_b)
        return MP_CUDA_EINVAL;
    const int64_t n = n_rows * width;
    if (n == 0)
        return 0;
    mpc_launch(add_bias_kernel, dim3((unsigned)((n + 255) / 256)), dim3(256), 0, (cudaStream_t)stream, d_x, d_b,
               width, n);
    return mpc_launch_status();
}

__global__ void add_gated_kernel(float *y, const float *x, const float *logit, int64_t width, int64_t n)
{
    mpc_pdl_wait();
    mpc_pdl_trigger();
    const int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n)
        y[i] += x[i] / (1.0f + expf(-logit[i / width]));
}

extern "C" int mp_cuda_add_gated(float *d_y, const float *d_x, const float *d_logit, int64_t n_rows, int64_t width,
                                 void *stream)
{
    if (n_rows < 0 || width < 1 || !d_y || !d_x || !d_logit)
        return MP_CUDA_EINVAL;
    const int64_t n = n_rows * width;
    if (n == 0)
        return 0;
    mpc_launch(add_gated_kernel, dim3((unsigned)((n + 255) / 256)), dim3(256), 0, (cudaStream_t)stream, d_y, d_x,
               d_logit, width, n);
    return mpc_launch_status();
}

__global__ void kv_store_kernel(uint16_t *cache, const float *src, int64_t n)
{
    const int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n)
        cache[i] = __half_as_ushort(__float2half_rn(src[i]));
}

__global__ void kv_store_at_kernel(uint16_t *cache, const float *src, const int32_t *pos,
                                   int64_t n_kv, int64_t n)
{
    const int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n)
        cache[(int64_t)pos[i / n_kv] * n_kv + i % n_kv] = __half_as_ushort(__float2half_rn(src[i]));
}

__global__ void kv_store2_at_kernel(uint16_t *kc, uint16_t *vc, const float *k, const float *v,
                                    const int32_t *pos, int64_t n_kv, int64_t n)
{
    const int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= 2 * n)
        return;
    const bool is_v = i >= n;
    const int64_t j = is_v ? i - n : i;
    (is_v ? vc : kc)[(int64_t)pos[j / n_kv] * n_kv + j % n_kv] =
        __half_as_ushort(__float2half_rn((is_v ? v : k)[j]));
}

extern "C" int mp_cuda_kv_store2_at(uint16_t *d_kcache, uint16_t *d_vcache, const float *d_k,
                                    const float *d_v, int64_t n_rows, int64_t n_kv,
                                    const int32_t *d_pos, void *stream)
{
    if (n_rows < 0 || n_kv < 1 || !d_kcache || !d_vcache || !d_k || !d_v || !d_pos)
        return MP_CUDA_EINVAL;
    const int64_t n = n_rows * n_kv;
    if (n == 0)
        return 0;
    kv_store2_at_kernel<<<(unsigned)((2 * n + 255) / 256), 256, 0, (cudaStream_t)stream>>>(
        d_kcache, d_vcache, d_k, d_v, d_pos, n_kv, n);
    return mpc_launch_status();
}

extern "C" int mp_cuda_kv_store_at(uint16_t *d_cache, const float *d_src, int64_t n_rows,
                                   int64_t n_kv, const int32_t *d_pos, void *stream)
{
    if (n_rows < 0 || n_kv < 1 || !d_cache || !d_src || !d_pos)
        return MP_CUDA_EINVAL;
    const int64_t n = n_rows * n_kv;
    if (n == 0)
        return 0;
    kv_store_at_kernel<<<(unsigned)((n + 255) / 256), 256, 0, (cudaStream_t)stream>>>(
        d_cache, d_src, d_pos, n_kv, n);
    return mpc_launch_status();
}

extern "C" int mp_cuda_kv_store(uint16_t *d_cache, const float *d_src, int64_t n_rows,
                                int64_t n_kv, int64_t pos0, void *stream)
{
    if (n_rows < 0 || n_kv < 1 || pos0 < 0 || !d_cache || !d_src)
        return MP_CUDA_EINVAL;
    const int64_t n = n_rows * n_kv;
    if (n == 0)
        return 0;
    kv_store_kernel<<<(unsigned)((n + 255) / 256), 256, 0, (cudaStream_t)stream>>>(
        d_cache + pos0 * n_kv, d_src, n);
    return mpc_launch_status();
}

// ---- PDL switch (common.cuh) ----
static int g_pdl = -1; // -1: decide at the next launch; 0 off; 1 on

extern "C" void mp_cuda_set_pdl(int on)
{
    g_pdl = on < 0 ? -1 : on != 0;
}

int mpc_pdl_enabled(void)
{
    if (g_pdl < 0) { // the first launch decides: on for a device of compute capability 9.0+ that runs
                     // code compiled for sm_90 or newer: a newer device that compiles the build's
                     // compute_80 PTX (meson.build's cuda_gencode) gets kernels without the waits
        int dev = 0, major = 0;
        cudaFuncAttributes fa;
        const bool hopper = cudaGetDevice(&dev) == cudaSuccess &&
                            cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, dev) == cudaSuccess &&
                            major >= 9 && cudaFuncGetAttributes(&fa, kv_store_kernel) == cudaSuccess &&
                            fa.ptxVersion >= 90;
        cudaGetLastError();
        g_pdl = hopper;
    }
    return g_pdl;
}

int mpc_sm_count(void)
{
    static int sms = -1;
    if (sms < 0) {
        int dev = 0, v = 0;
        if (cudaGetDevice(&dev) != cudaSuccess || cudaDeviceGetAttribute(&v, cudaDevAttrMultiProcessorCount, dev) != cudaSuccess)
            v = 0;
        cudaGetLastError();
        sms = v > 0 ? v : 0;
    }
    return sms;
}
