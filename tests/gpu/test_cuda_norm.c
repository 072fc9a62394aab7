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
