/* kernels/cuda_sizes.h — the device memory the CUDA kernels (kernels/cuda/) ask of their callers, in
 * plain C and header-only: the kernels check the scratch they are given against these sizes, the
 * GPU executor allocates by them (gpu/gpu_exec.c), and the GPU budget counts by them before any
 * device exists (runtime/placement.c, mp_gpu_scratch_layout). One formula per buffer, so a budget
 * that holds a plan holds the run it plans, whatever the model's expert types and shapes.
 *
 * Nothing here calls CUDA; runtime/ includes it. The formulas are the kernels' own: the activation
 * format of each weight type (mp_cuda_vec_dot_type), the MoE kernels' per-route buffers and their
 * grouped prefill path (MP_CUDA_MOE_GROUP_MIN_ROWS rows and more), attention's split-key chunks,
 * the cuBLAS path's dequantized tiles.
 */
#ifndef MP_KERNELS_CUDA_SIZES_H
#define MP_KERNELS_CUDA_SIZES_H

#include <stddef.h>
#include <stdint.h>

#include "kernels/quant.h"

#ifdef __cplusplus
extern "C" {
#endif

/* MoE kernels: batches of at least MP_CUDA_MOE_GROUP_MIN_ROWS rows take the grouped path (routes
 * sorted by expert; each group of up to MP_CUDA_MOE_GROUP routes of one expert reads its weights
 * once). */
#define MP_CUDA_MOE_GROUP 8
#define MP_CUDA_MOE_GROUP_MIN_ROWS 16
/* Attention: steps of up to MP_CUDA_ATT_SMALL_ROWS rows split the keys in chunks of
 * MP_CUDA_ATT_CHUNK (more blocks for a decode row's few keys) and merge the chunks in a second
 * launch, through scratch; larger steps walk the keys in tiles of query rows and need none. */
#define MP_CUDA_ATT_CHUNK 64
#define MP_CUDA_ATT_SMALL_ROWS 8

static inline size_t mp_cuda_align256(size_t b)
{
    return (b + 255) & ~(size_t)255;
}

/* Bytes of a row of n elements of type t (0 if n is not a multiple of the block size or the type
 * is unknown): the GGUF block sizes. */
static inline size_t mp_cuda_row_bytes(int t, int64_t n)
{
    int64_t be;
    size_t bb;
    switch (t) {
    case MP_TYPE_F32: be = 1; bb = 4; break;
    case MP_TYPE_F16: be = 1; bb = 2; break;
    case MP_TYPE_BF16: be = 1; bb = 2; break;
    case MP_TYPE_Q4_0: be = 32; bb = 18; break;
    case MP_TYPE_Q4_1: be = 32; bb = 20; break;
    case MP_TYPE_Q5_0: be = 32; bb = 22; break;
    case MP_TYPE_Q5_1: be = 32; bb = 24; break;
    case MP_TYPE_Q8_0: be = 32; bb = 34; break;
    case MP_TYPE_IQ4_NL: be = 32; bb = 18; break;
    case MP_TYPE_MXFP4: be = 32; bb = 17; break;
    case MP_TYPE_Q2_K: be = 256; bb = 84; break;
    case MP_TYPE_Q3_K: be = 256; bb = 110; break;
    case MP_TYPE_Q4_K: be = 256; bb = 144; break;
    case MP_TYPE_Q5_K: be = 256; bb = 176; break;
    case MP_TYPE_Q6_K: be = 256; bb = 210; break;
    case MP_TYPE_IQ4_XS: be = 256; bb = 136; break;
    case MP_TYPE_Q8_K: be = 256; bb = 292; break;
    default: return 0;
    }
    if (n <= 0 || n % be)
        return 0;
    return (size_t)(n / be) * bb;
}

/* The activation format a weight type's GEMV reads (F32, Q8_0 or Q8_K); -1 if unsupported. */
static inline int mp_cuda_vec_dot_type(int weight_type)
{
    switch (weight_type) {
    case MP_TYPE_F32: case MP_TYPE_F16: case MP_TYPE_BF16: return MP_TYPE_F32;
    case MP_TYPE_Q4_0: case MP_TYPE_Q4_1: case MP_TYPE_Q5_0: case MP_TYPE_Q5_1: case MP_TYPE_Q8_0:
    case MP_TYPE_IQ4_NL: case MP_TYPE_MXFP4:
        return MP_TYPE_Q8_0;
    case MP_TYPE_Q2_K: case MP_TYPE_Q3_K: case MP_TYPE_Q4_K: case MP_TYPE_Q5_K: case MP_TYPE_Q6_K:
    case MP_TYPE_IQ4_XS:
        return MP_TYPE_Q8_K;
    default: return -1;
    }
}

/* Scratch of mp_cuda_moe_experts for n_rows rows of top_k routes (0: unsupported types): the rows
 * in the gate's activation format, every route's hidden row (f32) and in the down projection's
 * format; the grouped path adds its permutation, groups and per-route outputs. */
static inline size_t mp_cuda_moe_scratch_bytes(int gate_type, int down_type, int64_t n_embd, int64_t n_ff,
                                               int64_t n_rows, int64_t top_k)
{
    const int xv = mp_cuda_vec_dot_type(gate_type), hv = mp_cuda_vec_dot_type(down_type);
    if (xv < 0 || hv < 0 || n_rows < 1 || top_k < 1)
        return 0;
    const size_t routes = (size_t)(n_rows * top_k);
    size_t b = mp_cuda_align256((size_t)n_rows * mp_cuda_row_bytes(xv, n_embd)) +
               mp_cuda_align256(routes * (size_t)n_ff * sizeof(float)) +
               mp_cuda_align256(routes * mp_cuda_row_bytes(hv, n_ff));
    if (n_rows >= MP_CUDA_MOE_GROUP_MIN_ROWS)
        b += mp_cuda_align256(routes * 4) + mp_cuda_align256((routes / MP_CUDA_MOE_GROUP + 1024 + 1) * 16) + 256 +
             mp_cuda_align256(routes * (size_t)n_embd * sizeof(float));
    return b;
}

/* Scratch of mp_cuda_attention for any step of 1 ... n_rows rows with up to n_keys_max keys: per
 * (row, head, chunk) of a split-K step the partial output and its max and sum. Larger steps run
 * the tiled kernel, or, on a device without its shared memory, split-K in steps of
 * MP_CUDA_ATT_SMALL_ROWS rows: either way no more than a small step's. */
static inline size_t mp_cuda_attention_scratch_bytes(int64_t n_rows, int64_t n_head, int64_t head_dim,
                                                     int64_t n_keys_max)
{
    if (n_rows < 1 || n_head < 1 || head_dim < 1 || n_keys_max < 1)
        return 0;
    const int64_t rows = n_rows < MP_CUDA_ATT_SMALL_ROWS ? n_rows : MP_CUDA_ATT_SMALL_ROWS;
    const int64_t n_splits = (n_keys_max + MP_CUDA_ATT_CHUNK - 1) / MP_CUDA_ATT_CHUNK;
    return (size_t)(rows * n_head * n_splits * (head_dim + 2)) * sizeof(float);
}

/* Scratch of mp_cuda_gemm with n_x activation rows of n_in and tile_rows weight rows: both as f16
 * (or bf16). */
static inline size_t mp_cuda_gemm_scratch_bytes(int64_t n_in, int64_t n_x, int64_t tile_rows)
{
    if (n_in < 1 || n_x < 1 || tile_rows < 1)
        return 0;
    return mp_cuda_align256((size_t)(n_x * n_in) * 2) + mp_cuda_align256((size_t)(tile_rows * n_in) * 2);
}

#ifdef __cplusplus
}
#endif

#endif
