/* tests/gpu/test_cuda_gemm.c — the cuBLAS prefill GEMM against a double-precision product of the
 * CPU-dequantized weights and the f32 activations.
 *
 * Tolerance: the GEMM rounds each weight and each activation to F16 (relative error <= 2^-11
 * each) or BF16 (2^-8 each), then accumulates in f32; so per output
 *   |gpu - ref| <= (2 · 2^-11 + 2^-11 + n · 2^-24) · Σ|w_i x_i|            (F16)
 *   |gpu - ref| <= (2 · 2^-8 + 2^-8 + n · 2^-24) · Σ|w_i x_i|              (BF16)
 * (the product of two rounded operands, plus slack for the rounding of the product sum). A wrong
 * tile offset or transposition moves an output by ~Σ|w x| / sqrt(n), far above either. */
#include "mp_config.h"
#if MP_HAVE_CUDA && !defined(MP_NO_CUDA)
#include "kernels/cuda/cuda_ops.h"
#include "tests/gpu/gpu_util.h"

static void check_gemm(void *blas, int type, int64_t n_out, int64_t n_in, int64_t n_x,
                       int64_t tile_rows)
{
    const size_t rb = mp_type_row_bytes(type, n_in);
    uint8_t *w = malloc(rb * (size_t)n_out);
    rnd_weights(type, n_out, n_in, rb, w);
    float *x = malloc(sizeof(float) * (size_t)(n_x * n_in));
    rnd_floats(x, n_x * n_in, 1.0f);
    const int64_t y_stride = n_out + 5;
    void *d_w = dev_put(w, rb * (size_t)n_out);
    float *d_x = dev_put(x, sizeof(float) * (size_t)(n_x * n_in));
    float *d_y = dev_alloc(sizeof(float) * (size_t)(n_x * y_stride));
    const size_t sb = mp_cuda_gemm_scratch_bytes(n_in, n_x, tile_rows);
    void *d_s = dev_alloc(sb);
    MPC_OK(mp_cuda_gemm(blas, type, d_w, rb, n_out, n_in, d_x, n_x, d_y, y_stride, tile_rows, d_s,
                        sb, NULL));
    float *got = malloc(sizeof(float) * (size_t)(n_x * y_stride));
    dev_get(got, d_y, sizeof(float) * (size_t)(n_x * y_stride));
    float *wd = malloc(sizeof(float) * (size_t)(n_out * n_in));
    for (int64_t r = 0; r < n_out; r++)
        mp_type_ops_scalar(type)->dequantize_row(w + (size_t)r * rb, wd + r * n_in, n_in);
    const double rel = (type == MP_TYPE_BF16 ? 3.0 * 0x1p-8 : 3.0 * 0x1p-11) + (double)n_in * 0x1p-24;
    for (int64_t i = 0; i < n_x; i++)
        for (int64_t r = 0; r < n_out; r++) {
            double ref = 0.0;
            for (int64_t j = 0; j < n_in; j++)
                ref += (double)wd[r * n_in + j] * x[i * n_in + j];
            const double tol = rel * abs_dot(wd + r * n_in, x + i * n_in, n_in) + 1e-30;
            const float g = got[i * y_stride + r];
            cr_assert(fabs(g - ref) <= tol,
                      "seed %llu: gemm %s n_out %ld n_in %ld n_x %ld tile %ld: x row %ld, weight "
                      "row %ld: gpu %.9g, ref %.9g, |diff| %.3g > tol %.3g",
                      (unsigned long long)g_seed, mp_type_name(type), (long)n_out, (long)n_in,
                      (long)n_x, (long)tile_rows, (long)i, (long)r, g, ref, fabs(g - ref), tol);
        }
    cr_assert_eq(mp_cuda_gemm(blas, type, d_w, rb, n_out, n_in, d_x, n_x, d_y, y_stride, tile_rows,
                              d_s, sb - 1, NULL), MP_CUDA_ENOMEM);
    cudaFree(d_w); cudaFree(d_x); cudaFree(d_y); cudaFree(d_s);
    free(w); free(x); free(got); free(wd);
}

Test(cuda_gemm, prefill_every_type)
{
    seed_rng();
    void *blas = NULL;
    MPC_OK(mp_cuda_blas_create(&blas, NULL));
    for (size_t t = 0; t < N_GPU_TYPES; t++) {
        check_gemm(blas, k_gpu_types[t], 300, 512, 37, 128);  /* 3 tiles, the last partial */
        check_gemm(blas, k_gpu_types[t], 768, 2048, 64, 4096); /* one tile: an expert's gate */
    }
    check_gemm(blas, MP_TYPE_Q6_K, 2048, 768, 129, 1000); /* down projection, odd rows */
    mp_cuda_blas_destroy(blas);
}
#endif
