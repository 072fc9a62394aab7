/* tests/gpu/gpu_util.h — helpers shared by the GPU tests (one copy per test executable).
 *
 * - random numbers: tests/rng.h (seeded once per test from the clock or MP_TEST_SEED, to replay a
 *   failure); every assertion message starts with "seed %llu" so a failure can be rerun exactly;
 * - random weight rows: valid blocks of every type with random quants and random (finite, small)
 *   scales — every bit pattern of the quant fields occurs, unlike rows made by a quantizer;
 * - device buffers: dev_put / dev_get / dev_alloc assert on CUDA errors with the call's name.
 * Only included where MP_HAVE_CUDA is set (gpu_main.c skips the executables elsewhere). */
#ifndef MP_TESTS_GPU_UTIL_H
#define MP_TESTS_GPU_UTIL_H

#include <criterion/criterion.h>
#include <cuda_runtime_api.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "kernels/quant.h"
#include "tests/rng.h"

static inline void rnd_floats(float *x, int64_t n, float scale)
{
    for (int64_t i = 0; i < n; i++)
        x[i] = scale * rnd_gauss();
}

static inline void put_f16(uint8_t *p, float v)
{
    const mp_f16 h = mp_f32_to_f16(v);
    memcpy(p, &h, sizeof h);
}

/* One random row of n elements of a weight type into dst (mp_type_row_bytes(type, n) bytes). */
static inline void rnd_weight_row(int type, int64_t n, uint8_t *dst)
{
    const size_t rb = mp_type_row_bytes(type, n);
    if (type == MP_TYPE_F32 || type == MP_TYPE_F16 || type == MP_TYPE_BF16) {
        for (int64_t i = 0; i < n; i++) {
            const float v = 0.05f * rnd_gauss();
            if (type == MP_TYPE_F32) {
                memcpy(dst + 4 * i, &v, 4);
            } else if (type == MP_TYPE_F16) {
                put_f16(dst + 2 * i, v);
            } else {
                const mp_bf16 b = mp_f32_to_bf16(v);
                memcpy(dst + 2 * i, &b, 2);
            }
        }
        return;
    }
    for (size_t i = 0; i < rb; i += 8) {
        const uint64_t v = rnd_u64();
        memcpy(dst + i, &v, rb - i < 8 ? rb - i : 8);
    }
    const size_t bb = mp_type_block_bytes(type);
    for (size_t off = 0; off < rb; off += bb) {
        uint8_t *b = dst + off;
        switch (type) {
        case MP_TYPE_Q4_0:
        case MP_TYPE_Q8_0:
        case MP_TYPE_Q5_0:
            put_f16(b, 0.002f * rnd_gauss());
            break;
        case MP_TYPE_Q4_1:
        case MP_TYPE_Q5_1: /* x = d q + m: an offset of either sign */
            put_f16(b, 0.002f * (float)(rnd_uniform() + 0.1));
            put_f16(b + 2, 0.02f * rnd_gauss());
            break;
        case MP_TYPE_IQ4_NL: /* levels up to 127 */
        case MP_TYPE_IQ4_XS: /* and sub-block scales up to 32 */
            put_f16(b, 0.0002f * rnd_gauss());
            break;
        case MP_TYPE_MXFP4: /* levels up to 12: scales 2^-10 .. 2^-7 */
            b[0] = (uint8_t)(118 + rnd_u64() % 4);
            break;
        case MP_TYPE_Q4_K:
        case MP_TYPE_Q5_K:
            put_f16(b, 0.0005f * (float)(rnd_uniform() + 0.1));
            put_f16(b + 2, 0.0005f * (float)(rnd_uniform() + 0.1));
            break;
        case MP_TYPE_Q6_K:
            put_f16(b + 208, 0.00005f * (float)(rnd_uniform() + 0.1));
            break;
        case MP_TYPE_Q2_K:
            put_f16(b + 80, 0.002f * (float)(rnd_uniform() + 0.1));
            put_f16(b + 82, 0.002f * (float)(rnd_uniform() + 0.1));
            break;
        case MP_TYPE_Q3_K:
            put_f16(b + 108, 0.0005f * (float)(rnd_uniform() + 0.1));
            break;
        default:
            break;
        }
    }
}

/* Every weight type the kernels load, for the tests that run them all. */
static const int k_gpu_types[] = {MP_TYPE_F32,  MP_TYPE_F16,  MP_TYPE_BF16, MP_TYPE_Q4_0,   MP_TYPE_Q4_1,
                                  MP_TYPE_Q5_0, MP_TYPE_Q5_1, MP_TYPE_Q8_0, MP_TYPE_IQ4_NL, MP_TYPE_MXFP4,
                                  MP_TYPE_Q2_K, MP_TYPE_Q3_K, MP_TYPE_Q4_K, MP_TYPE_Q5_K,   MP_TYPE_Q6_K,
                                  MP_TYPE_IQ4_XS};
#define N_GPU_TYPES (sizeof k_gpu_types / sizeof k_gpu_types[0])

static inline void rnd_weights(int type, int64_t rows, int64_t n, size_t row_bytes, uint8_t *dst)
{
    for (int64_t r = 0; r < rows; r++)
        rnd_weight_row(type, n, dst + (size_t)r * row_bytes);
}

#define CUDA_OK(call)                                                                          \
    do {                                                                                       \
        cudaError_t e_ = (call);                                                               \
        cr_assert(e_ == cudaSuccess, "seed %llu: %s failed: %s", (unsigned long long)g_seed,   \
                  #call, cudaGetErrorString(e_));                                              \
    } while (0)

static inline void *dev_alloc(size_t bytes)
{
    void *d = NULL;
    CUDA_OK(cudaMalloc(&d, bytes ? bytes : 1));
    return d;
}

static inline void *dev_put(const void *h, size_t bytes)
{
    void *d = dev_alloc(bytes);
    CUDA_OK(cudaMemcpy(d, h, bytes, cudaMemcpyHostToDevice));
    return d;
}

static inline void dev_get(void *h, const void *d, size_t bytes)
{
    CUDA_OK(cudaDeviceSynchronize());
    CUDA_OK(cudaMemcpy(h, d, bytes, cudaMemcpyDeviceToHost));
}

/* Asserts that a mp_cuda_* call returned 0 and that the kernels it queued ran cleanly. */
#define MPC_OK(call)                                                                           \
    do {                                                                                       \
        int rc_ = (call);                                                                      \
        cr_assert_eq(rc_, 0, "seed %llu: %s returned %d", (unsigned long long)g_seed, #call,   \
                     rc_);                                                                     \
        CUDA_OK(cudaDeviceSynchronize());                                                      \
    } while (0)

/* Σ |a_i| |b_i| in double: the magnitude float summation errors are relative to. */
static inline double abs_dot(const float *a, const float *b, int64_t n)
{
    double s = 0.0;
    for (int64_t i = 0; i < n; i++)
        s += fabs((double)a[i]) * fabs((double)b[i]);
    return s;
}

#endif
