// kernels/cuda/convert.cu — activation quantization (f32 → Q8_0 / Q8_K), dequantization of
// weight rows, the embedding gather, and the small per-type facts of cuda_ops.h.
//
// Invariant: every output here is bit-identical to the CPU reference (kernels/cpu/quantize.c,
// quant_scalar.c): the same float32 operations in the same order, written with the _rn
// intrinsics so that neither --use_fast_math nor FMA contraction can change a rounding. The
// tests compare bytes, not tolerances.
#include "kernels/cuda/common.cuh"
#include "kernels/cuda/convert.cuh"

extern "C" const char *mp_cuda_strerror(int code)
{
    switch (code) {
    case 0: return "success";
    case MP_CUDA_EINVAL: return "invalid argument (type, shape or alignment)";
    case MP_CUDA_ELAUNCH: return "CUDA kernel launch or runtime call failed";
    case MP_CUDA_EBLAS: return "cuBLAS call failed";
    case MP_CUDA_ENOMEM: return "scratch buffer too small or allocation failed";
    default: return "unknown error";
    }
}

// mp_cuda_vec_dot_type, mp_cuda_row_bytes: kernels/cuda_sizes.h (the budget reads them too)

// ---- activation quantization: one warp per block ----

__global__ void quantize_q8_0_kernel(const float *x, int64_t x_stride, int64_t n_rows, int64_t n,
                                     uint8_t *q, size_t q_row_bytes)
{
    mpc_pdl_wait(); // PDL (common.cuh): nothing above reads an earlier kernel's output
    mpc_pdl_trigger();
    const int64_t nb = n / 32;
    const int64_t gw = ((int64_t)blockIdx.x * blockDim.x + threadIdx.x) / MPC_WARP;
    const int lane = threadIdx.x % MPC_WARP;
    if (gw >= n_rows * nb)
        return;
    const int64_t row = gw / nb, ib = gw % nb;
    mpc_quantize_q8_0_warp(x + row * x_stride + ib * 32, q + row * q_row_bytes + ib * 34, lane);
}

__global__ void quantize_q8_K_kernel(const float *x, int64_t x_stride, int64_t n_rows, int64_t n,
                                     uint8_t *q, size_t q_row_bytes)
{
    mpc_pdl_wait(); // PDL (common.cuh): nothing above reads an earlier kernel's output
    mpc_pdl_trigger();
    const int64_t nb = n / 256;
    const int64_t gw = ((int64_t)blockIdx.x * blockDim.x + threadIdx.x) / MPC_WARP;
    const int lane = threadIdx.x % MPC_WARP;
    if (gw >= n_rows * nb)
        return;
    const int64_t row = gw / nb, ib = gw % nb;
    mpc_quantize_q8_K_warp(x + row * x_stride + ib * 256, q + row * q_row_bytes + ib * 292, lane);
}

__global__ void copy_rows_kernel(const float *x, int64_t x_stride, int64_t n_rows, int64_t n,
                                 float *y)
{
    const int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n_rows * n)
        y[i] = x[(i / n) * x_stride + i % n];
}

extern "C" int mp_cuda_quantize_act(int vdt, const float *d_x, int64_t x_stride, int64_t n_rows,
                                    int64_t n, void *d_q, void *stream)
{
    const size_t rb = mpc_row_bytes(vdt, n);
    if (n_rows < 0 || rb == 0 || x_stride < n)
        return MP_CUDA_EINVAL;
    if (n_rows == 0)
        return 0;
    cudaStream_t st = (cudaStream_t)stream;
    if (vdt == MP_TYPE_F32) {
        const int64_t total = n_rows * n;
        copy_rows_kernel<<<(unsigned)((total + 255) / 256), 256, 0, st>>>(d_x, x_stride, n_rows, n,
                                                                         (float *)d_q);
        return mpc_launch_status();
    }
    if (vdt != MP_TYPE_Q8_0 && vdt != MP_TYPE_Q8_K)
        return MP_CUDA_EINVAL;
    const int64_t warps = n_rows * (n / (vdt == MP_TYPE_Q8_0 ? 32 : 256));
    const unsigned blocks = (unsigned)((warps + 7) / 8);
    if (vdt == MP_TYPE_Q8_0)
        mpc_launch(quantize_q8_0_kernel, dim3(blocks), dim3(256), 0, st, d_x, x_stride, n_rows, n,
                   (uint8_t *)d_q, rb);
    else
        mpc_launch(quantize_q8_K_kernel, dim3(blocks), dim3(256), 0, st, d_x, x_stride, n_rows, n,
                   (uint8_t *)d_q, rb);
    return mpc_launch_status();
}

// ---- dequantization ----

template <int T>
__global__ void dequantize_rows_kernel(const uint8_t *src, size_t row_bytes, int64_t n_rows,
                                       int64_t n, float *out)
{
    const int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n_rows * n)
        return;
    out[i] = mpc_dequant_elem<T>(src + (i / n) * row_bytes, i % n);
}

template <int T>
__global__ void get_rows_kernel(const uint8_t *table, size_t row_bytes, int64_t n_vocab, int64_t n,
                                const int32_t *tokens, int64_t n_tok, float *out, int *bad)
{
    const int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n_tok * n)
        return;
    const int32_t tok = tokens[i / n];
    if (tok < 0 || tok >= n_vocab) {
        out[i] = 0.0f;
        if (bad)
            *bad = 1;
        return;
    }
    out[i] = mpc_dequant_elem<T>(table + (int64_t)tok * row_bytes, i % n);
}

template <int T>
static void launch_dequant(const void *src, size_t row_bytes, int64_t rows, int64_t n, float *out,
                           cudaStream_t st)
{
    const int64_t total = rows * n;
    dequantize_rows_kernel<T><<<(unsigned)((total + 255) / 256), 256, 0, st>>>(
        (const uint8_t *)src, row_bytes, rows, n, out);
}

template <int T>
static void launch_get_rows(const void *table, size_t row_bytes, int64_t n_vocab, int64_t n,
                            const int32_t *tok, int64_t n_tok, float *out, int *bad,
                            cudaStream_t st)
{
    const int64_t total = n_tok * n;
    get_rows_kernel<T><<<(unsigned)((total + 255) / 256), 256, 0, st>>>(
        (const uint8_t *)table, row_bytes, n_vocab, n, tok, n_tok, out, bad);
}

extern "C" int mp_cuda_dequantize_rows(int type, const void *d_src, size_t row_bytes,
                                       int64_t n_rows, int64_t n, float *d_out, void *stream)
{
    const size_t rb = mpc_row_bytes(type, n);
    if (n_rows < 0 || rb == 0 || row_bytes < rb || type == MP_TYPE_Q8_K)
        return MP_CUDA_EINVAL;
    if (n_rows == 0)
        return 0;
    cudaStream_t st = (cudaStream_t)stream;
#define MPC_CALL(T) launch_dequant<T>(d_src, row_bytes, n_rows, n, d_out, st)
    MPC_TYPE_SWITCH(type, MPC_CALL)
#undef MPC_CALL
    return mpc_launch_status();
}

extern "C" int mp_cuda_get_rows(int type, const void *d_table, size_t row_bytes, int64_t n_vocab,
                                int64_t n, const int32_t *d_tokens, int64_t n_tok, float *d_out,
                                int *d_bad, void *stream)
{
    const size_t rb = mpc_row_bytes(type, n);
    if (n_tok < 0 || n_vocab < 1 || rb == 0 || row_bytes < rb || type == MP_TYPE_Q8_K)
        return MP_CUDA_EINVAL;
    if (n_tok == 0)
        return 0;
    cudaStream_t st = (cudaStream_t)stream;
#define MPC_CALL(T) launch_get_rows<T>(d_table, row_bytes, n_vocab, n, d_tokens, n_tok, d_out, d_bad, st)
    MPC_TYPE_SWITCH(type, MPC_CALL)
#undef MPC_CALL
    return mpc_launch_status();
}
