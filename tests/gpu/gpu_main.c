/* tests/gpu/gpu_main.c — entry point of every GPU test executable.
 *
 * Where no usable CUDA device exists (CI, laptops) the whole executable reports SKIP with the
 * reason and exits 77, which meson counts as skipped, never as passed. Elsewhere it runs the
 * Criterion tests as usual. */
#include <criterion/criterion.h>
#include <stdio.h>

#include "tests/criterion_run.h"
#include "mp_config.h"
#if MP_HAVE_CUDA && !defined(MP_NO_CUDA)
#include "kernels/cuda/cuda_ops.h"
#endif

int main(int argc, char **argv)
{
#if !MP_HAVE_CUDA || defined(MP_NO_CUDA)
    printf("SKIP: GPU tests not run: this build has no CUDA (nvcc was not found)\n");
    return 77;
#else
    char why[256];
    if (!mp_cuda_available(why, sizeof why)) {
        printf("SKIP: GPU tests not run: %s\n", why);
        return 77;
    }
    return mp_criterion_run_all(argc, argv);
#endif
}
