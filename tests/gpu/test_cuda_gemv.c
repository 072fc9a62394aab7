/* tests/gpu/test_cuda_gemv.c — mp_cuda_gemv against the CPU scalar vec_dot, every weight type.
 *
 * Inputs: random weight rows (every quant bit pattern, gpu_util.h) and random activations,
 * converted to the partner format by the CPU's mp_quantize_activation, so GPU and CPU dot the
 * same bytes. Both compute each unit's integer part exactly; they differ only in how the f32
 * per-block terms are scaled and summed. Tolerance: the classic bound for summing n terms in
 * f32 in any order, n · 2^-24 · Σ|w_i x_i|, doubled for the K-quants' two partial terms
 * (d·Σqy and dmin·Σy can each exceed |w x|), doubled again for the two sides:
 *   |gpu - cpu| <= 4 · n · 2^-24 · Σ|w_i| |x_i|   (+ 1e-30 for all-zero rows)
 * With n = 2048 that is 5e-4 of Σ|w x|; a wrong element, scale or nibble moves the result by
 * ~Σ|w x| / sqrt(n) = 2e-2 of it, 40 times more. */
#include "mp_config.h"
#if MP_HAVE_CUDA && !defined(MP_NO_CUDA)
#include "kernels/cuda/cuda_ops.h"
#include "tests/gpu/gpu_util.h"


/* w_offset: bytes the weights are shifted from the allocation (tests unaligned rows). */
static void check_gemv(int type, int64_t n_out, int64_t n_in, int n_x, size_t w_offset)
{
    const mp_type_ops *ops = mp_type_ops_scalar(type);
    const int vdt = ops->vec_dot_type;
    const size_t rb = mp_type_row_bytes(type, n_in), xb = mp_type_row_bytes(vdt, n_in);
    uint8_t *w = malloc(rb * (size_t)n_out);
    rnd_weights(type, n_out, n_in, rb, w);
    float *x = malloc(sizeof(float) * (size_t)(n_x * n_in));
    rnd_floats(x, n_x * n_in, 1.0f);
    uint8_t *xq = malloc(xb * (size_t)n_x);
    for (int i = 0; i < n_x; i++)
        cr_assert_eq(mp_quantize_activation(vdt, x + i * n_in, xq + (size_t)i * xb, n_in), 0);

    /* y_stride > n_out: outputs land in a strided buffer, the gaps must stay untouched */
    const int64_t y_stride = n_out + 3;
    float *got = malloc(sizeof(float) * (size_t)(n_x * y_stride));
    uint8_t *d_wa = dev_alloc(rb * (size_t)n_out + w_offset);
    CUDA_OK(cudaMemcpy(d_wa + w_offset, w, rb * (size_t)n_out, cudaMemcpyHostToDevice));
    void *d_x = dev_put(xq, xb * (size_t)n_x);
    float *d_y = dev_alloc(sizeof(float) * (size_t)(n_x * y_stride));
    CUDA_OK(cudaMemset(d_y, 0xFF, sizeof(float) * (size_t)(n_x * y_stride))); /* NaN canary */
    MPC_OK(mp_cuda_gemv(type, d_wa + w_offset, rb, n_out, n_in, d_x, xb, n_x, d_y, y_stride, NULL));
    dev_get(got, d_y, sizeof(float) * (size_t)(n_x * y_stride));

    float *wrow = malloc(sizeof(float) * (size_t)n_in), *xrow = malloc(sizeof(float) * (size_t)n_in);
    for (int i = 0; i < n_x; i++) {
        if (vdt == MP_TYPE_F32)
            memcpy(xrow, x + i * n_in, sizeof(float) * (size_t)n_in);
        else if (vdt == MP_TYPE_Q8_0)
            mp_type_ops_scalar(MP_TYPE_Q8_0)->dequantize_row(xq + (size_t)i * xb, xrow, n_in);
        else
            mp_dequantize_row_q8_K(xq + (size_t)i * xb, xrow, n_in);
        for (int64_t r = 0; r < n_out; r++) {
            const float ref = ops->vec_dot(n_in, w + (size_t)r * rb, xq + (size_t)i * xb);
            ops->dequantize_row(w + (size_t)r * rb, wrow, n_in);
            const double tol = 4.0 * (double)n_in * 0x1p-24 * abs_dot(wrow, xrow, n_in) + 1e-30;
            const float g = got[i * y_stride + r];
            cr_assert(fabs((double)g - (double)ref) <= tol,
                      "seed %llu: gemv %s n_out %ld n_in %ld n_x %d offset %zu: x row %d, weight "
                      "row %ld: gpu %.9g, cpu %.9g, |diff| %.3g > tol %.3g",
                      (unsigned long long)g_seed, mp_type_name(type), (long)n_out, (long)n_in,
                      n_x, w_offset, i, (long)r, g, ref, fabs((double)g - ref), tol);
        }
        for (int64_t r = n_out; r < y_stride; r++)
            cr_assert(isnan(got[i * y_stride + r]),
                      "seed %llu: gemv %s wrote past n_out (x row %d, column %ld)",
                      (unsigned long long)g_seed, mp_type_name(type), i, (long)r);
    }
    cudaFree(d_wa); cudaFree(d_x); cudaFree(d_y);
    free(w); free(x); free(xq); free(got); free(wrow); free(xrow);
}

Test(cuda_gemv, decode_shapes_every_type)
{
    seed_rng();
    for (size_t t = 0; t < N_GPU_TYPES; t++) {
        check_gemv(k_gpu_types[t], 768, 2048, 1, 0);  /* expert gate/up */
        check_gemv(k_gpu_types[t], 2048, 768, 1, 0);  /* expert down */
        check_gemv(k_gpu_types[t], 37, 256, 1, 0);    /* rows not a multiple of the 4 rows per block */
        check_gemv(k_gpu_types[t], 5, 4096, 1, 0);    /* more units than lanes, few rows */
    }
}

Test(cuda_gemv, batched_rows_every_type)
{
    seed_rng();
    for (size_t t = 0; t < N_GPU_TYPES; t++) {
        check_gemv(k_gpu_types[t], 129, 2048, 2, 0);
        check_gemv(k_gpu_types[t], 67, 512, 5, 0);
        check_gemv(k_gpu_types[t], 33, 768, 8, 0);
        check_gemv(k_gpu_types[t], 19, 256, 11, 0); /* > 8: groups of 8 + 3 */
    }
}

Test(cuda_gemv, unaligned_and_odd_shapes)
{
    seed_rng();
    /* float weights at 2-byte offsets or odd widths take the scalar path; blocks of 2-byte
     * aligned types may start anywhere even */
    check_gemv(MP_TYPE_F16, 41, 2048, 1, 2);
    check_gemv(MP_TYPE_BF16, 41, 2048, 3, 2);
    check_gemv(MP_TYPE_F32, 23, 100, 1, 4);
    check_gemv(MP_TYPE_F32, 23, 37, 4, 0);
    check_gemv(MP_TYPE_F16, 9, 13, 2, 0);
    check_gemv(MP_TYPE_Q8_0, 17, 96, 3, 2);
    check_gemv(MP_TYPE_Q4_0, 17, 96, 1, 2);
    check_gemv(MP_TYPE_Q6_K, 17, 512, 2, 2);
    check_gemv(MP_TYPE_Q4_K, 17, 512, 2, 4);
    check_gemv(MP_TYPE_Q5_K, 17, 512, 2, 4);
    check_gemv(MP_TYPE_Q2_K, 17, 512, 2, 4);
    check_gemv(MP_TYPE_Q3_K, 17, 512, 2, 2); /* 110-byte blocks: 2-byte aligned rows */
    check_gemv(MP_TYPE_Q5_0, 17, 96, 2, 2);   /* 22-byte blocks */
    check_gemv(MP_TYPE_IQ4_NL, 17, 96, 3, 2);
    check_gemv(MP_TYPE_Q4_1, 17, 96, 1, 4);
    check_gemv(MP_TYPE_Q5_1, 17, 96, 2, 4);
    check_gemv(MP_TYPE_MXFP4, 17, 96, 2, 1);  /* 17-byte blocks: rows at any byte */
    check_gemv(MP_TYPE_MXFP4, 9, 64, 1, 3);
    check_gemv(MP_TYPE_IQ4_XS, 17, 512, 2, 2); /* 136-byte blocks at a 2-byte offset */
}

Test(cuda_gemv, output_head_shape)
{
    seed_rng();
    /* a 151936-row head is checked on a slice of the same width (the CPU reference is slow) */
    check_gemv(MP_TYPE_Q6_K, 4099, 2048, 1, 0);
    check_gemv(MP_TYPE_Q8_0, 4099, 2048, 1, 0);
}

Test(cuda_gemv, rejects_bad_arguments)
{
    seed_rng();
    uint8_t *d = dev_alloc(1 << 16);
    float *y = dev_alloc(1024);
    /* Q4_K rows must be 4-byte aligned; n_in must be a multiple of the block; unknown types */
    cr_assert_eq(mp_cuda_gemv(MP_TYPE_Q4_K, d + 2, 144, 1, 256, d, 292, 1, y, 1, NULL), MP_CUDA_EINVAL);
    cr_assert_eq(mp_cuda_gemv(MP_TYPE_Q4_K, d, 144, 1, 128, d, 292, 1, y, 1, NULL), MP_CUDA_EINVAL);
    cr_assert_eq(mp_cuda_gemv(MP_TYPE_Q8_K, d, 292, 1, 256, d, 292, 1, y, 1, NULL), MP_CUDA_EINVAL);
    /* 4: an id GGUF retired; 16: IQ2_XXS, which has no kernel */
    cr_assert_eq(mp_cuda_gemv(4, d, 64, 1, 32, d, 34, 1, y, 1, NULL), MP_CUDA_EINVAL);
    cr_assert_eq(mp_cuda_gemv(16, d, 66, 1, 256, d, 292, 1, y, 1, NULL), MP_CUDA_EINVAL);
    /* row stride shorter than a row */
    cr_assert_eq(mp_cuda_gemv(MP_TYPE_Q8_0, d, 33, 2, 32, d, 34, 1, y, 2, NULL), MP_CUDA_EINVAL);
    cudaFree(d);
    cudaFree(y);
}
#endif
