/* tests/gpu/test_cuda_norm.c — CUDA RMSNorm against the CPU scalar reference on random inputs.
 * Where no CUDA device exists, gpu_main.c skips the executable (exit 77) saying why. */
#include <criterion/criterion.h>
#include <math.h>
#include <stdlib.h>
#include <time.h>

#include "kernels/ops.h"
#include "mp_config.h"
#if MP_HAVE_CUDA && !defined(MP_NO_CUDA)
#include "kernels/cuda/cuda_ops.h"
#endif

Test(cuda_norm, matches_scalar_reference)
{
#if MP_HAVE_CUDA && !defined(MP_NO_CUDA) /* else gpu_main.c skips before any test runs */
    const int64_t rows = 37, n = 2048;
    unsigned seed = (unsigned)time(NULL);
    srand(seed);
    float *x = malloc(sizeof(float) * rows * n), *w = malloc(sizeof(float) * n);
    float *ref = malloc(sizeof(float) * rows * n), *got = malloc(sizeof(float) * rows * n);
    for (int64_t i = 0; i < rows * n; i++)
        x[i] = (float)rand() / RAND_MAX * 4.0f - 2.0f;
    for (int64_t i = 0; i < n; i++)
        w[i] = (float)rand() / RAND_MAX + 0.5f;
    for (int64_t r = 0; r < rows; r++)
        mp_rmsnorm(ref + r * n, x + r * n, w, n, 1e-6f);
    cr_assert_eq(mp_cuda_rmsnorm_host(got, x, w, rows, n, 1e-6f), 0);
    for (int64_t i = 0; i < rows * n; i++)
        cr_assert(fabsf(got[i] - ref[i]) <= 1e-5f * (1.0f + fabsf(ref[i])),
                  "seed %u: element %ld: gpu %g, reference %g", seed, (long)i, got[i], ref[i]);
    free(x); free(w); free(ref); free(got);
#endif
}

#if MP_HAVE_CUDA && !defined(MP_NO_CUDA)
#include <cuda_runtime_api.h>
#include <string.h>

/* The fused residual add + norm equals mp_cuda_add then mp_cuda_rmsnorm bit for bit (x and out). */
Test(cuda_norm, add_rmsnorm_equals_add_then_rmsnorm)
{
    const int64_t rows = 19, n = 2048;
    unsigned seed = (unsigned)time(NULL);
    srand(seed);
    const size_t bytes = sizeof(float) * (size_t)(rows * n);
    float *x = malloc(bytes), *y = malloc(bytes), *w = malloc(sizeof(float) * n);
    float *x1 = malloc(bytes), *o1 = malloc(bytes), *x2 = malloc(bytes), *o2 = malloc(bytes);
    for (int64_t i = 0; i < rows * n; i++) {
        x[i] = (float)rand() / RAND_MAX * 4.0f - 2.0f;
        y[i] = (float)rand() / RAND_MAX * 2.0f - 1.0f;
    }
    for (int64_t i = 0; i < n; i++)
        w[i] = (float)rand() / RAND_MAX + 0.5f;
    float *dx, *dy, *dw, *dout;
    cr_assert_eq(cudaMalloc((void **)&dx, bytes), cudaSuccess);
    cr_assert_eq(cudaMalloc((void **)&dy, bytes), cudaSuccess);
    cr_assert_eq(cudaMalloc((void **)&dout, bytes), cudaSuccess);
    cr_assert_eq(cudaMalloc((void **)&dw, sizeof(float) * n), cudaSuccess);
    cudaMemcpy(dy, y, bytes, cudaMemcpyHostToDevice);
    cudaMemcpy(dw, w, sizeof(float) * n, cudaMemcpyHostToDevice);
    cudaMemcpy(dx, x, bytes, cudaMemcpyHostToDevice);
    cr_assert_eq(mp_cuda_add(dx, dy, rows * n, NULL), 0);
    cr_assert_eq(mp_cuda_rmsnorm(dout, dx, dw, rows, n, 1e-6f, NULL), 0);
    cudaMemcpy(x1, dx, bytes, cudaMemcpyDeviceToHost);
    cudaMemcpy(o1, dout, bytes, cudaMemcpyDeviceToHost);
    cudaMemcpy(dx, x, bytes, cudaMemcpyHostToDevice);
    cudaMemset(dout, 0, bytes);
    cr_assert_eq(mp_cuda_add_rmsnorm(dout, dx, dy, dw, rows, n, 1e-6f, NULL), 0);
    cudaMemcpy(x2, dx, bytes, cudaMemcpyDeviceToHost);
    cudaMemcpy(o2, dout, bytes, cudaMemcpyDeviceToHost);
    cr_assert_eq(memcmp(x1, x2, bytes), 0, "seed %u: x after the fused add differs", seed);
    cr_assert_eq(memcmp(o1, o2, bytes), 0, "seed %u: the fused norm differs", seed);
    cr_assert_eq(mp_cuda_add_rmsnorm(dx, dx, dy, dw, rows, n, 1e-6f, NULL), MP_CUDA_EINVAL);
    cudaFree(dx); cudaFree(dy); cudaFree(dw); cudaFree(dout);
    free(x); free(y); free(w); free(x1); free(o1); free(x2); free(o2);
}
#endif
