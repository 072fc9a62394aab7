/* tests/unit/quant_check.h — helpers and SIMD-vs-scalar checks shared by the quant tests
 * (see quant_check.c). Test code only: the checks fail through Criterion's cr_assert. */
#ifndef MP_TESTS_QUANT_CHECK_H
#define MP_TESTS_QUANT_CHECK_H

#include <stddef.h>
#include <stdint.h>

#include "kernels/quant.h"
#include "tests/rng.h"

void rnd_bytes(uint8_t *p, size_t n); /* from the generator of tests/rng.h */

void *alloc64(size_t bytes); /* 64-byte aligned; asserts on failure */
int same_float(float a, float b); /* same bits, or both NaN */
void store_f16(uint8_t *p, float v);

#define N_WEIGHT_TYPES 16
extern const int k_weight_types[N_WEIGHT_TYPES]; /* every weight type with kernels */

/* a row of `type` with random content valid for the type (row: (row_bytes(type, n),)) */
void random_weight_row(int type, uint8_t *row, int64_t n);
void random_floats(float *x, int64_t n); /* (n,) gaussian at a random scale */

/* An activation row in the format `ops` wants, plus its dequantization. */
typedef struct act_row {
    uint8_t *raw;     /* allocation */
    uint8_t *q;       /* (row_bytes,) in vec_dot_type, maybe at an unaligned address */
    float *x;         /* (n,) the float row before quantization */
    float *xhat;      /* (n,) dequantized q */
    float *bound;     /* (n,) |x - xhat| bound per element */
} act_row;
act_row make_act(int vec_dot_type, int64_t n, size_t misalign);
void free_act(act_row *a);

/* table(type) against mp_type_ops_scalar(type) for every weight type, on fresh random rows at
 * unaligned addresses; `variant` names the table in failure messages. */
void check_vec_dot_vs_scalar(const mp_type_ops *(*table)(int type), const char *variant);
void check_dequantize_vs_scalar(const mp_type_ops *(*table)(int type), const char *variant);
/* mp_gemv_rows / mp_gemm_rows with `ops` equal its vec_dot bit for bit */
void check_rows(const mp_type_ops *ops, const char *variant);
/* ops->gemm through mp_gemm_rows against the scalar vec_dot within float rounding, on random row and
 * activation counts around the tile sizes, unaligned rows; nothing written outside y's range */
void check_tile_gemm(const mp_type_ops *ops, const char *variant);
/* the same shapes for a whole-call GEMM whose results must equal vec_dot's bit for bit */
void check_gemm_bits(const mp_type_ops *ops, const char *variant);
/* ops (MXFP4's) at every E8M0 exponent: vec_dot against the scalar one, the GEMV against vec_dot's bits */
void check_mxfp4_exponents(const mp_type_ops *ops, const char *variant);

#endif
