/* kernels/cuda/cuda_ops.h — C entry points of the CUDA kernels (built only with MP_HAVE_CUDA).
 * Device pointers are marked d_; every function returns 0 or a negative CUDA-derived code and
 * never exits. */
#ifndef MP_KERNELS_CUDA_OPS_H
#define MP_KERNELS_CUDA_OPS_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* 1 if a CUDA device of compute capability >= 7.0 is usable; else 0 with the reason in why. */
int mp_cuda_available(char *why, size_t why_cap);

/* Row-wise RMSNorm on the device: d_out[r] = d_x[r] / rms(d_x[r]) * d_w, rows × n. */
int mp_cuda_rmsnorm(float *d_out, const float *d_x, const float *d_w, int64_t rows, int64_t n,
                    float eps, void *stream);

/* Host convenience for tests: copies in, runs mp_cuda_rmsnorm, copies out, synchronizes. */
int mp_cuda_rmsnorm_host(float *out, const float *x, const float *w, int64_t rows, int64_t n,
                         float eps);

#ifdef __cplusplus
}
#endif
#endif
