/* tests/gpu/test_cuda_convert.c — device activation quantization, dequantization and embedding
 * gather against the CPU reference. These kernels promise bit-identical output (the same float32
 * operations in the same order, see kernels/cuda/convert.cu), so the comparisons are exact:
 * bytes for quantized activations, float bit patterns for dequantized rows. */
#include "mp_config.h"
#if MP_HAVE_CUDA && !defined(MP_NO_CUDA)
#include "kernels/cuda/cuda_ops.h"
#include "tests/gpu/gpu_util.h"


/* Rows of n floats x_stride apart; row r is scaled by 10^(r % 5 - 2) so that the scales span
 * several binades, and row 1's first block is all zeros (d = 0 must give zero quants). */
static float *make_rows(int64_t rows, int64_t n, int64_t x_stride)
{
    float *x = malloc(sizeof(float) * (size_t)(rows * x_stride));
    for (int64_t r = 0; r < rows; r++) {
        rnd_floats(x + r * x_stride, x_stride, powf(10.0f, (float)(r % 5) - 2.0f));
        if (r == 1)
            memset(x + r * x_stride, 0, sizeof(float) * (n < 256 ? (size_t)n : 256));
    }
    return x;
}

static void check_quantize(int vdt, int64_t rows, int64_t n, int64_t x_stride)
{
    float *x = make_rows(rows, n, x_stride);
    const size_t rb = mp_type_row_bytes(vdt, n);
    uint8_t *ref = malloc(rb * (size_t)rows), *got = malloc(rb * (size_t)rows);
    for (int64_t r = 0; r < rows; r++)
        cr_assert_eq(mp_quantize_activation(vdt, x + r * x_stride, ref + (size_t)r * rb, n), 0);
    float *d_x = dev_put(x, sizeof(float) * (size_t)(rows * x_stride));
    void *d_q = dev_alloc(rb * (size_t)rows);
    MPC_OK(mp_cuda_quantize_act(vdt, d_x, x_stride, rows, n, d_q, NULL));
    dev_get(got, d_q, rb * (size_t)rows);
    for (size_t i = 0; i < rb * (size_t)rows; i++)
        cr_assert_eq(got[i], ref[i],
                     "seed %llu: %s rows %ld n %ld: byte %zu (row %zu, offset %zu in the row): "
                     "gpu 0x%02x, cpu 0x%02x", (unsigned long long)g_seed, mp_type_name(vdt),
                     (long)rows, (long)n, i, i / rb, i % rb, got[i], ref[i]);
    cudaFree(d_x);
    cudaFree(d_q);
    free(x); free(ref); free(got);
}

Test(cuda_convert, quantize_activations_match_cpu_bytes)
{
    seed_rng();
    check_quantize(MP_TYPE_Q8_0, 1, 2048, 2048);
    check_quantize(MP_TYPE_Q8_0, 37, 96, 101); /* 3 blocks, odd row stride */
    check_quantize(MP_TYPE_Q8_0, 16, 768, 768);
    check_quantize(MP_TYPE_Q8_K, 1, 2048, 2048);
    check_quantize(MP_TYPE_Q8_K, 13, 768, 800);
    check_quantize(MP_TYPE_Q8_K, 8, 256, 256);
    check_quantize(MP_TYPE_F32, 5, 100, 103);
}

Test(cuda_convert, quantize_rejects_bad_shapes)
{
    seed_rng();
    /* n not a multiple of the block, stride shorter than a row, not an activation format */
    cr_assert_eq(mp_cuda_quantize_act(MP_TYPE_Q8_0, (const float *)16, 64, 1, 48, (void *)16, NULL),
                 MP_CUDA_EINVAL);
    cr_assert_eq(mp_cuda_quantize_act(MP_TYPE_Q8_K, (const float *)16, 128, 2, 256, (void *)16, NULL),
                 MP_CUDA_EINVAL);
    cr_assert_eq(mp_cuda_quantize_act(MP_TYPE_Q4_K, (const float *)16, 256, 1, 256, (void *)16, NULL),
                 MP_CUDA_EINVAL);
}

static void check_dequant(int type, int64_t rows, int64_t n, size_t pad_bytes)
{
    const size_t rb = mp_type_row_bytes(type, n), stride = rb + pad_bytes;
    uint8_t *w = calloc((size_t)rows, stride);
    rnd_weights(type, rows, n, stride, w);
    float *ref = malloc(sizeof(float) * (size_t)(rows * n)), *got = malloc(sizeof(float) * (size_t)(rows * n));
    const mp_type_ops *ops = mp_type_ops_scalar(type);
    for (int64_t r = 0; r < rows; r++)
        ops->dequantize_row(w + (size_t)r * stride, ref + r * n, n);
    void *d_w = dev_put(w, stride * (size_t)rows);
    float *d_out = dev_alloc(sizeof(float) * (size_t)(rows * n));
    MPC_OK(mp_cuda_dequantize_rows(type, d_w, stride, rows, n, d_out, NULL));
    dev_get(got, d_out, sizeof(float) * (size_t)(rows * n));
    for (int64_t i = 0; i < rows * n; i++)
        cr_assert(memcmp(&got[i], &ref[i], sizeof(float)) == 0,
                  "seed %llu: %s dequantize: row %ld element %ld: gpu %.9g, cpu %.9g",
                  (unsigned long long)g_seed, mp_type_name(type), (long)(i / n), (long)(i % n),
                  got[i], ref[i]);
    cudaFree(d_w);
    cudaFree(d_out);
    free(w); free(ref); free(got);
}

Test(cuda_convert, dequantize_rows_bit_identical)
{
    seed_rng();
    for (size_t t = 0; t < N_GPU_TYPES; t++) {
        const int type = k_gpu_types[t];
        const int64_t be = mp_type_block_elems(type);
        check_dequant(type, 3, 2048, 0);
        /* 768 (a Qwen expert's width) with padded rows; F-types also at an odd width */
        check_dequant(type, 5, 768, 2 * (size_t)(type == MP_TYPE_Q4_K ? 2 : 1));
        if (be == 1)
            check_dequant(type, 7, 37, 0);
    }
}

Test(cuda_convert, get_rows_gathers_tokens_and_flags_bad_ids)
{
    seed_rng();
    const int64_t n_vocab = 1000, n = 512;
    const int types[] = {MP_TYPE_Q4_K, MP_TYPE_Q5_K, MP_TYPE_Q6_K, MP_TYPE_Q8_0, MP_TYPE_F16, MP_TYPE_BF16, MP_TYPE_MXFP4};
    for (size_t t = 0; t < sizeof types / sizeof *types; t++) {
        const int type = types[t];
        const size_t rb = mp_type_row_bytes(type, n);
        uint8_t *table = malloc(rb * (size_t)n_vocab);
        rnd_weights(type, n_vocab, n, rb, table);
        int32_t tok[9];
        for (int i = 0; i < 8; i++)
            tok[i] = (int32_t)(rnd_u64() % (uint64_t)n_vocab);
        tok[3] = (int32_t)(n_vocab - 1);
        tok[8] = 0;
        void *d_table = dev_put(table, rb * (size_t)n_vocab);
        int32_t *d_tok = dev_put(tok, sizeof tok);
        float *d_out = dev_alloc(sizeof(float) * 9 * (size_t)n);
        int *d_bad = dev_alloc(sizeof(int));
        CUDA_OK(cudaMemset(d_bad, 0, sizeof(int)));
        MPC_OK(mp_cuda_get_rows(type, d_table, rb, n_vocab, n, d_tok, 9, d_out, d_bad, NULL));
        float *got = malloc(sizeof(float) * 9 * (size_t)n), *ref = malloc(sizeof(float) * (size_t)n);
        int bad = -1;
        dev_get(got, d_out, sizeof(float) * 9 * (size_t)n);
        dev_get(&bad, d_bad, sizeof bad);
        cr_assert_eq(bad, 0, "seed %llu: %s: valid tokens flagged bad", (unsigned long long)g_seed,
                     mp_type_name(type));
        for (int i = 0; i < 9; i++) {
            mp_type_ops_scalar(type)->dequantize_row(table + (size_t)tok[i] * rb, ref, n);
            for (int64_t j = 0; j < n; j++)
                cr_assert(memcmp(&got[i * n + j], &ref[j], sizeof(float)) == 0,
                          "seed %llu: %s get_rows: token %d (slot %d) element %ld: gpu %.9g, cpu %.9g",
                          (unsigned long long)g_seed, mp_type_name(type), tok[i], i, (long)j,
                          got[i * n + j], ref[j]);
        }
        /* an id past the vocabulary: a zero row and the flag, not an out-of-bounds read */
        tok[2] = (int32_t)n_vocab;
        tok[5] = -1;
        CUDA_OK(cudaMemcpy(d_tok, tok, sizeof tok, cudaMemcpyHostToDevice));
        MPC_OK(mp_cuda_get_rows(type, d_table, rb, n_vocab, n, d_tok, 9, d_out, d_bad, NULL));
        dev_get(got, d_out, sizeof(float) * 9 * (size_t)n);
        dev_get(&bad, d_bad, sizeof bad);
        cr_assert_eq(bad, 1, "seed %llu: %s: out-of-range token not flagged",
                     (unsigned long long)g_seed, mp_type_name(type));
        for (int64_t j = 0; j < n; j++)
            cr_assert(got[2 * n + j] == 0.0f && got[5 * n + j] == 0.0f,
                      "seed %llu: %s: bad token row not zeroed at %ld", (unsigned long long)g_seed,
                      mp_type_name(type), (long)j);
        cudaFree(d_table); cudaFree(d_tok); cudaFree(d_out); cudaFree(d_bad);
        free(table); free(got); free(ref);
    }
}
#endif
