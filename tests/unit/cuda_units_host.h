/* tests/unit/cuda_units_host.h — the GPU weight units and dequantizer run on the CPU
 * (cuda_units_host.cu), for test_cuda_units.c. */
#ifndef MP_TESTS_CUDA_UNITS_HOST_H
#define MP_TESTS_CUDA_UNITS_HOST_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* *out = the dot of a weight row of `type` (n elements) with the activation row x in the type's
 * partner format (mp_cuda_vec_dot_type), summed unit by unit through gemv.cuh's mpc_unit<type,
 * vec>. -1 for a type without such a unit (vec: without a 128-bit one), else 0. */
int mpc_host_row_dot(int type, int vec, const void *w, const void *x, int64_t n, float *out);
/* out[0 .. n) = convert.cuh's mpc_dequant_elem of each element; -1 for a type it lacks. */
int mpc_host_dequant_row(int type, const void *w, float *out, int64_t n);
/* out[0 .. n) = s1 * q - s2 of each element as the tensor-core kernels take a block of 32
 * (moe_mma.cuh's mpc_mma_block); -1 for a type they do not take that way. */
int mpc_host_mma_row(int type, const void *w, float *out, int64_t n);
/* out[0 .. n) (n a multiple of 256) = s1 * q - s2 of each element as the pipelined tensor-core
 * kernel reads a stage (moe_mma2.cuh's mma2_w); -1 for a type it does not stage. */
int mpc_host_mma2_row(int type, const void *w, float *out, int64_t n);
/* *out = the dot of a weight row of `type` (n a multiple of 256) with an activation row x in its
 * partner format, group by group as the pipelined kernel sums it (moe_mma2.cuh's stages, its
 * activations' group sums); -1 for a type it does not stage. */
int mpc_host_mma2_dot(int type, const void *w, const void *x, int64_t n, float *out);
/* The alignment that kernel asks of a type's weight rows (mma2_w's RA); 0 for a type it does not
 * stage. */
size_t mpc_host_mma2_align(int type);
/* 1 when one of the tensor-core expert kernels decodes the type (moe_mma2.cuh's mpc_mma_type, the
 * rule the launchers ask), else 0. */
int mpc_host_mma_takes(int type);
/* The alignment the GPU launchers ask of a type's weight rows (gemv.cuh's mpc_weight_align, units
 * without 128-bit loads). */
size_t mpc_host_weight_align(int type);

#ifdef __cplusplus
}
#endif

#endif
