// kernels/cuda/gemm.cu — prefill matrix-matrix products through cuBLAS (mp_cuda_gemm).
//
// Why cuBLAS and not a hand-written MMQ kernel: prefill is compute-bound (512+ rows reuse every
// weight row), and a dense F16 tensor-core GEMM from cuBLAS runs near the H200's peak with no
// tuning, while dequantizing a tile of weights costs one read of the quantized bytes and a
// write + read of the F16 tile — small against n_x · n_out · n_in FLOPs once n_x is in the
// hundreds. A tiled int8 MMQ kernel would save the tile traffic; it is a later optimization.
// Tiles of tile_rows weight rows bound the scratch (the 151936-row output head would need
// 622 MB of F16 at once).
//
// Precision: weights are dequantized exactly (mpc_dequant_elem), then rounded to F16 (BF16 for
// BF16 weights, whose range F16 lacks); x is rounded to the same type; products accumulate in
// f32 (CUBLAS_COMPUTE_32F). F16 x must stay below 65504 in magnitude: GEMM inputs are RMS-normed
// or SwiGLU outputs, orders of magnitude below that.
#include <cublas_v2.h>
#include <cuda_bf16.h>

#include "kernels/cuda/common.cuh"
#include "kernels/cuda/convert.cuh"

template <int T, bool BF>
__global__ void dequant_tile_kernel(const uint8_t *w, size_t row_bytes, int64_t rows, int64_t n,
                                    uint16_t *out)
{
    const int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= rows * n)
        return;
    const float v = mpc_dequant_elem<T>(w + (i / n) * row_bytes, i % n);
    out[i] = BF ? __bfloat16_as_ushort(__float2bfloat16_rn(v)) : __half_as_ushort(__float2half_rn(v));
}

template <bool BF>
__global__ void to16_kernel(const float *x, int64_t n, uint16_t *out)
{
    const int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n)
        out[i] = BF ? __bfloat16_as_ushort(__float2bfloat16_rn(x[i])) : __half_as_ushort(__float2half_rn(x[i]));
}

extern "C" int mp_cuda_blas_create(void **handle, void *stream)
{
    cublasHandle_t h;
    if (!handle || cublasCreate(&h) != CUBLAS_STATUS_SUCCESS)
        return MP_CUDA_EBLAS;
    if (cublasSetStream(h, (cudaStream_t)stream) != CUBLAS_STATUS_SUCCESS) {
        cublasDestroy(h);
        return MP_CUDA_EBLAS;
    }
    *handle = h;
    return 0;
}

extern "C" int mp_cuda_blas_set_workspace(void *handle, void *d_ws, size_t bytes)
{
    if (!handle || cublasSetWorkspace((cublasHandle_t)handle, d_ws, bytes) != CUBLAS_STATUS_SUCCESS)
        return MP_CUDA_EBLAS;
    return 0;
}

extern "C" void mp_cuda_blas_destroy(void *handle)
{
    if (handle)
        cublasDestroy((cublasHandle_t)handle);
}

static size_t align256(size_t b)
{
    return (b + 255) & ~(size_t)255;
}

// mp_cuda_gemm_scratch_bytes: kernels/cuda_sizes.h

template <int T>
static void launch_tile(const uint8_t *w, size_t row_bytes, int64_t rows, int64_t n, uint16_t *out,
                        bool bf, cudaStream_t st)
{
    const int64_t total = rows * n;
    const unsigned blocks = (unsigned)((total + 255) / 256);
    if (bf)
        dequant_tile_kernel<T, true><<<blocks, 256, 0, st>>>(w, row_bytes, rows, n, out);
    else
        dequant_tile_kernel<T, false><<<blocks, 256, 0, st>>>(w, row_bytes, rows, n, out);
}

static int dequant_tile(int type, const uint8_t *w, size_t row_bytes, int64_t rows, int64_t n,
                        uint16_t *out, bool bf, cudaStream_t st)
{
#define MPC_CALL(T) launch_tile<T>(w, row_bytes, rows, n, out, bf, st)
    MPC_TYPE_SWITCH(type, MPC_CALL)
#undef MPC_CALL
    return mpc_launch_status();
}

extern "C" int mp_cuda_gemm(void *blas, int type, const void *d_w, size_t row_bytes, int64_t n_out,
                            int64_t n_in, const float *d_x, int64_t n_x, float *d_y,
                            int64_t y_stride, int64_t tile_rows, void *d_scratch,
                            size_t scratch_bytes, void *stream)
{
    const size_t rb = mpc_row_bytes(type, n_in);
    if (!blas || rb == 0 || row_bytes < rb || type == MP_TYPE_Q8_K || n_out < 0 || n_x < 0 ||
        y_stride < n_out || tile_rows < 1 || !d_w || !d_x || !d_y || n_in > INT32_MAX ||
        y_stride > INT32_MAX || n_x > INT32_MAX)
        return MP_CUDA_EINVAL;
    if (n_out == 0 || n_x == 0)
        return 0;
    if (!d_scratch || (uintptr_t)d_scratch % 256 ||
        scratch_bytes < mp_cuda_gemm_scratch_bytes(n_in, n_x, tile_rows))
        return MP_CUDA_ENOMEM;
    if (tile_rows > INT32_MAX)
        tile_rows = INT32_MAX;
    cudaStream_t st = (cudaStream_t)stream;
    cublasHandle_t h = (cublasHandle_t)blas;
    if (cublasSetStream(h, st) != CUBLAS_STATUS_SUCCESS)
        return MP_CUDA_EBLAS;
    const bool bf = type == MP_TYPE_BF16;
    const cudaDataType_t dt = bf ? CUDA_R_16BF : CUDA_R_16F;
    uint16_t *x16 = (uint16_t *)d_scratch; // (n_x, n_in)
    uint16_t *w16 = (uint16_t *)((uint8_t *)d_scratch + align256((size_t)(n_x * n_in) * 2));
    const int64_t nx_total = n_x * n_in;
    if (bf)
        to16_kernel<true><<<(unsigned)((nx_total + 255) / 256), 256, 0, st>>>(d_x, nx_total, x16);
    else
        to16_kernel<false><<<(unsigned)((nx_total + 255) / 256), 256, 0, st>>>(d_x, nx_total, x16);
    if (cudaGetLastError() != cudaSuccess)
        return MP_CUDA_ELAUNCH;
    const float alpha = 1.0f, beta = 0.0f;
    for (int64_t r0 = 0; r0 < n_out; r0 += tile_rows) {
        const int64_t m = n_out - r0 < tile_rows ? n_out - r0 : tile_rows;
        int rc = dequant_tile(type, (const uint8_t *)d_w + (size_t)r0 * row_bytes, row_bytes, m,
                              n_in, w16, bf, st);
        if (rc)
            return rc;
        // column-major view: C (m × n_x, ldc = y_stride) = Wtileᵀ (m × n_in) · X (n_in × n_x),
        // where the row-major tile (m, n_in) is the column-major (n_in × m) matrix A
        if (cublasGemmEx(h, CUBLAS_OP_T, CUBLAS_OP_N, (int)m, (int)n_x, (int)n_in, &alpha, w16, dt,
                         (int)n_in, x16, dt, (int)n_in, &beta, d_y + r0, CUDA_R_32F, (int)y_stride,
                         CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT) != CUBLAS_STATUS_SUCCESS)
            return MP_CUDA_EBLAS;
    }
    return 0;
}
