/* gpu/gpu_error.c — the GPU executor's one-line errors: a CUDA runtime call or a kernel launch
 * that failed, named by what the executor was doing (gpu_impl.h). */
#include <cuda_runtime_api.h>

#include "gpu/gpu_impl.h"
#include "kernels/cuda/cuda_ops.h"

mp_status mp_gpu_cuda_fail(mp_error *err, const char *what, cudaError_t e)
{
    return mp_fail(err, MP_ERR_DEVICE, "GPU executor: %s: %s", what, cudaGetErrorString(e));
}

mp_status mp_gpu_kernel_fail(mp_error *err, const char *what, int code)
{
    cudaError_t e = cudaGetLastError();
    return mp_fail(err, MP_ERR_DEVICE, "GPU executor: %s: %s%s%s", what, mp_cuda_strerror(code),
                   e != cudaSuccess ? ": " : "", e != cudaSuccess ? cudaGetErrorString(e) : "");
}
