// kernels/cuda/gemv.cu — quantized matrix-vector products for decode (mp_cuda_gemv).
//
// Decode is memory-bound: every weight byte is read once per step, so the kernel's job is to
// stream W at full bandwidth. One warp per weight row (4 rows per 128-thread block), lanes over
// the row's units (gemv.cuh) so that a warp's loads cover contiguous bytes; the activation rows
// are small and stay in L1/L2. The batched variant (MAXNX = 8) loads and unpacks each weight unit
// once and dots it with up to 8 activation rows, so 2..8 rows cost about one row's weight
// traffic. Summation: each lane accumulates its units in f32, then a butterfly warp sum.
#include "kernels/cuda/common.cuh"
#include "kernels/cuda/gemv.cuh"

#define GEMV_WARPS 4

template <int T, bool VEC, int MAXNX>
__global__ void __launch_bounds__(GEMV_WARPS * MPC_WARP)
gemv_kernel(const uint8_t *w, size_t row_bytes, int64_t n_out, int64_t n_units, const uint8_t *x,
            size_t x_stride, int nx, float *y, int64_t y_stride)
{
    const int lane = threadIdx.x % MPC_WARP;
    const int64_t row = (int64_t)blockIdx.x * GEMV_WARPS + threadIdx.x / MPC_WARP;
    const uint8_t *wrow = w + row * row_bytes;
    // the weight row is no kernel's output: toward L2 while the kernel before still runs (PDL)
    if (row < n_out)
        mpc_prefetch_l2(wrow, row_bytes, lane);
    mpc_pdl_wait();
    mpc_pdl_trigger();
    if (row >= n_out)
        return;
    float acc[MAXNX];
#pragma unroll
    for (int i = 0; i < MAXNX; i++)
        acc[i] = 0.0f;
    // two units in flight per lane (both loaded before either is used): twice the bytes in
    // flight per warp hides more HBM latency; each lane still adds its units in order u, u+32, ...
    for (int64_t u = lane; u < n_units; u += 2 * MPC_WARP) {
        const bool has1 = u + MPC_WARP < n_units;
        mpc_unit<T, VEC> w0, w1;
        w0.load(wrow, u);
        if (has1)
            w1.load(wrow, u + MPC_WARP);
#pragma unroll
        for (int i = 0; i < MAXNX; i++)
            if (i < nx) {
                acc[i] += w0.dot(x + i * x_stride, u);
                if (has1)
                    acc[i] += w1.dot(x + i * x_stride, u + MPC_WARP);
            }
    }
#pragma unroll
    for (int i = 0; i < MAXNX; i++) {
        if (i < nx) {
            const float s = mpc_warp_sum(acc[i]);
            if (lane == i)
                y[i * y_stride + row] = s;
        }
    }
}

template <int T, bool VEC>
static void launch_gemv(const void *w, size_t row_bytes, int64_t n_out, int64_t n_in, const void *x,
                        size_t x_stride, int nx, float *y, int64_t y_stride, cudaStream_t st)
{
    const int64_t n_units = n_in / mpc_unit_elems<T, VEC>();
    const unsigned blocks = (unsigned)((n_out + GEMV_WARPS - 1) / GEMV_WARPS);
    if (nx == 1)
        mpc_launch(gemv_kernel<T, VEC, 1>, dim3(blocks), dim3(GEMV_WARPS * MPC_WARP), 0, st, (const uint8_t *)w,
                   row_bytes, n_out, n_units, (const uint8_t *)x, x_stride, 1, y, y_stride);
    else
        mpc_launch(gemv_kernel<T, VEC, 8>, dim3(blocks), dim3(GEMV_WARPS * MPC_WARP), 0, st, (const uint8_t *)w,
                   row_bytes, n_out, n_units, (const uint8_t *)x, x_stride, nx, y, y_stride);
}

extern "C" int mp_cuda_gemv(int type, const void *d_w, size_t row_bytes, int64_t n_out,
                            int64_t n_in, const void *d_x, size_t x_stride_bytes, int n_x,
                            float *d_y, int64_t y_stride, void *stream)
{
    const size_t rb = mpc_row_bytes(type, n_in);
    const int vdt = mp_cuda_vec_dot_type(type);
    if (vdt < 0 || rb == 0 || row_bytes < rb || n_out < 0 || n_x < 1 || !d_w || !d_x || !d_y)
        return MP_CUDA_EINVAL;
    if (n_x > 1 && (x_stride_bytes < mpc_row_bytes(vdt, n_in) || y_stride < n_out))
        return MP_CUDA_EINVAL;
    const bool vec = mpc_can_vec(type, d_w, row_bytes, n_in, d_x, x_stride_bytes);
    const size_t wa = mpc_weight_align(type, false);
    if ((uintptr_t)d_w % wa || row_bytes % wa)
        return MP_CUDA_EINVAL;
    // activation rows: f32 and Q8_K are read as 32-bit words, Q8_0 as 16-bit
    const size_t xa = vdt == MP_TYPE_Q8_0 ? 2 : 4;
    if ((uintptr_t)d_x % xa || (n_x > 1 && x_stride_bytes % xa))
        return MP_CUDA_EINVAL;
    if (n_out == 0)
        return 0;
    cudaStream_t st = (cudaStream_t)stream;
    for (int i0 = 0; i0 < n_x; i0 += 8) {
        const int nx = n_x - i0 < 8 ? n_x - i0 : 8;
        const void *x = (const uint8_t *)d_x + (size_t)i0 * x_stride_bytes;
        float *y = d_y + (int64_t)i0 * y_stride;
        switch (type) {
        case MP_TYPE_F32:
            if (vec) launch_gemv<MP_TYPE_F32, true>(d_w, row_bytes, n_out, n_in, x, x_stride_bytes, nx, y, y_stride, st);
            else launch_gemv<MP_TYPE_F32, false>(d_w, row_bytes, n_out, n_in, x, x_stride_bytes, nx, y, y_stride, st);
            break;
        case MP_TYPE_F16:
            if (vec) launch_gemv<MP_TYPE_F16, true>(d_w, row_bytes, n_out, n_in, x, x_stride_bytes, nx, y, y_stride, st);
            else launch_gemv<MP_TYPE_F16, false>(d_w, row_bytes, n_out, n_in, x, x_stride_bytes, nx, y, y_stride, st);
            break;
        case MP_TYPE_BF16:
            if (vec) launch_gemv<MP_TYPE_BF16, true>(d_w, row_bytes, n_out, n_in, x, x_stride_bytes, nx, y, y_stride, st);
            else launch_gemv<MP_TYPE_BF16, false>(d_w, row_bytes, n_out, n_in, x, x_stride_bytes, nx, y, y_stride, st);
            break;
        case MP_TYPE_Q4_0:
            launch_gemv<MP_TYPE_Q4_0, false>(d_w, row_bytes, n_out, n_in, x, x_stride_bytes, nx, y, y_stride, st);
            break;
        case MP_TYPE_Q8_0:
            launch_gemv<MP_TYPE_Q8_0, false>(d_w, row_bytes, n_out, n_in, x, x_stride_bytes, nx, y, y_stride, st);
            break;
        case MP_TYPE_Q4_1:
            launch_gemv<MP_TYPE_Q4_1, false>(d_w, row_bytes, n_out, n_in, x, x_stride_bytes, nx, y, y_stride, st);
            break;
        case MP_TYPE_Q5_0:
            launch_gemv<MP_TYPE_Q5_0, false>(d_w, row_bytes, n_out, n_in, x, x_stride_bytes, nx, y, y_stride, st);
            break;
        case MP_TYPE_Q5_1:
            launch_gemv<MP_TYPE_Q5_1, false>(d_w, row_bytes, n_out, n_in, x, x_stride_bytes, nx, y, y_stride, st);
            break;
        case MP_TYPE_IQ4_NL:
            launch_gemv<MP_TYPE_IQ4_NL, false>(d_w, row_bytes, n_out, n_in, x, x_stride_bytes, nx, y, y_stride, st);
            break;
        case MP_TYPE_MXFP4:
            launch_gemv<MP_TYPE_MXFP4, false>(d_w, row_bytes, n_out, n_in, x, x_stride_bytes, nx, y, y_stride, st);
            break;
        case MP_TYPE_Q4_K:
            if (vec) launch_gemv<MP_TYPE_Q4_K, true>(d_w, row_bytes, n_out, n_in, x, x_stride_bytes, nx, y, y_stride, st);
            else launch_gemv<MP_TYPE_Q4_K, false>(d_w, row_bytes, n_out, n_in, x, x_stride_bytes, nx, y, y_stride, st);
            break;
        case MP_TYPE_Q2_K:
            launch_gemv<MP_TYPE_Q2_K, false>(d_w, row_bytes, n_out, n_in, x, x_stride_bytes, nx, y, y_stride, st);
            break;
        case MP_TYPE_Q3_K:
            launch_gemv<MP_TYPE_Q3_K, false>(d_w, row_bytes, n_out, n_in, x, x_stride_bytes, nx, y, y_stride, st);
            break;
        case MP_TYPE_Q5_K:
            launch_gemv<MP_TYPE_Q5_K, false>(d_w, row_bytes, n_out, n_in, x, x_stride_bytes, nx, y, y_stride, st);
            break;
        case MP_TYPE_Q6_K:
            launch_gemv<MP_TYPE_Q6_K, false>(d_w, row_bytes, n_out, n_in, x, x_stride_bytes, nx, y, y_stride, st);
            break;
        case MP_TYPE_IQ4_XS:
            launch_gemv<MP_TYPE_IQ4_XS, false>(d_w, row_bytes, n_out, n_in, x, x_stride_bytes, nx, y, y_stride, st);
            break;
        default:
            return MP_CUDA_EINVAL;
        }
        if (cudaGetLastError() != cudaSuccess)
            return MP_CUDA_ELAUNCH;
    }
    return 0;
}
