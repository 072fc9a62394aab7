/* tests/unit/test_cuda_units.c — the GPU's weight units (kernels/cuda/gemv.cuh), element
 * dequantizer (convert.cuh) and the tensor-core kernels' blocks of 32 (moe_mma.cuh) and stages
 * (moe_mma2.cuh), run on the CPU through tests/unit/cuda_units_host.cu, against the scalar
 * reference on fresh random rows of every weight type: a row's dot summed unit by unit within
 * float rounding of vec_dot, and the dequantizer bit for bit. This checks what each unit decodes
 * (offsets, shifts, scales, look-ups) where no GPU is (CI); the device's own instructions and the
 * kernels around the units are the GPU tests' (tests/gpu/). Built where nvcc is. */
#include <criterion/criterion.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/quant.h"
#include "quant_check.h"
#include "tests/gpu/gpu_util.h" /* abs_dot */
#include "tests/unit/cuda_units_host.h"

/* got, `what`'s dot of weight row w (n elements at `misalign`; wd: w dequantized) with activation
 * row a, is the scalar vec_dot's within float rounding: two sums of the same products in other
 * orders (per unit, per group, per block) differ by ~n eps of Σ|w x| at most. */
static void check_dot(int type, const uint8_t *w, const float *wd, const act_row *a, int64_t n, size_t misalign,
                      float got, const char *what)
{
    const float want = mp_type_ops_scalar(type)->vec_dot(n, w, a->q);
    const double mag = abs_dot(wd, a->xhat, n);
    cr_assert(fabs((double)got - (double)want) <= 2e-5 * mag + 1e-30,
              "seed %llu: %s, %lld elements at +%zu: %s %.9g, scalar vec_dot %.9g (sum |w x| %.4g)",
              (unsigned long long)g_seed, mp_type_name(type), (long long)n, misalign, what, (double)got,
              (double)want, mag);
}

/* One row of n elements at `misalign` bytes past 64-byte alignment, through unit kind vec. */
static void check_row(int type, int vec, int64_t n, size_t misalign)
{
    const mp_type_ops *ref = mp_type_ops_scalar(type);
    const size_t rb = mp_type_row_bytes(type, n);
    uint8_t *raw = alloc64(rb + 64), *w = raw + misalign;
    random_weight_row(type, w, n);
    act_row a = make_act(ref->vec_dot_type, n, 0);
    float got = NAN;
    cr_assert_eq(mpc_host_row_dot(type, vec, w, a.q, n, &got), 0, "%s: no GPU unit%s", mp_type_name(type),
                 vec ? " with 128-bit loads" : "");
    float *wd = malloc(sizeof(float) * (size_t)n), *gd = malloc(sizeof(float) * (size_t)n);
    ref->dequantize_row(w, wd, n);
    check_dot(type, w, wd, &a, n, misalign, got, vec ? "GPU units (128-bit)" : "GPU units");
    cr_assert_eq(mpc_host_dequant_row(type, w, gd, n), 0, "%s: no GPU dequantizer", mp_type_name(type));
    for (int64_t i = 0; i < n; i++)
        cr_assert(same_float(gd[i], wd[i]), "seed %llu: %s element %lld of %lld: GPU dequantizer %a, scalar %a",
                  (unsigned long long)g_seed, mp_type_name(type), (long long)i, (long long)n, (double)gd[i],
                  (double)wd[i]);
    free(wd);
    free(gd);
    free_act(&a);
    free(raw);
}

Test(cuda_units, every_type_decodes_as_the_cpu_reference)
{
    seed_rng();
    const int64_t sizes[] = {256, 768, 2048};
    for (int t = 0; t < N_WEIGHT_TYPES; t++) {
        const int type = k_weight_types[t];
        const size_t align = mpc_host_weight_align(type);
        for (size_t s = 0; s < sizeof sizes / sizeof sizes[0]; s++)
            for (int rep = 0; rep < 4; rep++)
                check_row(type, 0, sizes[s], align * (size_t)rep); /* every alignment the launchers allow */
        if (mp_type_block_elems(type) == 32)
            check_row(type, 0, 96, align); /* three blocks */
    }
}

/* the 128-bit units: F32, F16, BF16 and Q4_K from 16-byte aligned rows */
Test(cuda_units, the_wide_units_decode_as_the_narrow_ones)
{
    seed_rng();
    const int types[] = {MP_TYPE_F32, MP_TYPE_F16, MP_TYPE_BF16, MP_TYPE_Q4_K};
    for (size_t t = 0; t < sizeof types / sizeof types[0]; t++)
        for (int rep = 0; rep < 4; rep++)
            check_row(types[t], 1, 512 * (rep + 1), 16 * (size_t)rep);
    float out;
    cr_assert_eq(mpc_host_row_dot(MP_TYPE_Q8_0, 1, NULL, NULL, 32, &out), -1, "Q8_0 has no 128-bit unit");
    cr_assert_eq(mpc_host_row_dot(MP_TYPE_Q8_K, 0, NULL, NULL, 256, &out), -1, "Q8_K is no weight type");
}

/* A random row of n elements of `type` at misalign bytes past a 64-byte boundary, decoded by one of
 * the tensor-core decoders (decode: mpc_host_mma_row or mpc_host_mma2_row, `what` naming it):
 * every element equals the scalar dequantizer's bit for bit. */
static void check_mma_decode(int type, int64_t n, size_t misalign, int (*decode)(int, const void *, float *, int64_t),
                             const char *what)
{
    uint8_t *raw = alloc64(mp_type_row_bytes(type, n) + 64), *w = raw + misalign;
    random_weight_row(type, w, n);
    float *want = malloc(sizeof(float) * (size_t)n), *got = malloc(sizeof(float) * (size_t)n);
    mp_type_ops_scalar(type)->dequantize_row(w, want, n);
    cr_assert_eq(decode(type, w, got, n), 0, "%s: no tensor-core %s", mp_type_name(type), what);
    for (int64_t i = 0; i < n; i++)
        cr_assert(same_float(got[i], want[i]),
                  "seed %llu: %s element %lld of %lld at +%zu: tensor-core %s %a, scalar %a", (unsigned long long)g_seed,
                  mp_type_name(type), (long long)i, (long long)n, misalign, what, (double)got[i], (double)want[i]);
    free(want);
    free(got);
    free(raw);
}

/* The blocks of 32 as the tensor-core expert kernels stage them (signed levels, s1 and s2): every
 * element's s1 * q - s2 is the scalar dequantizer's value bit for bit, at every alignment the
 * launchers allow (MXFP4's quants at odd addresses), rows of one, three and 90 blocks (gpt-oss's
 * 2880); and the types without such a form are refused. */
Test(cuda_units, tensor_core_blocks_decode_as_the_cpu_reference)
{
    seed_rng();
    const int types[] = {MP_TYPE_Q4_0, MP_TYPE_Q8_0, MP_TYPE_Q4_1, MP_TYPE_Q5_0, MP_TYPE_Q5_1, MP_TYPE_IQ4_NL,
                         MP_TYPE_MXFP4};
    const int64_t sizes[] = {32, 96, 2880};
    for (size_t t = 0; t < sizeof types / sizeof types[0]; t++)
        for (size_t s = 0; s < sizeof sizes / sizeof sizes[0]; s++)
            for (int rep = 0; rep < 4; rep++)
                check_mma_decode(types[t], sizes[s], mpc_host_weight_align(types[t]) * (size_t)rep, mpc_host_mma_row,
                                 "block");
    float out[256];
    uint8_t zero[256] = {0};
    cr_assert_eq(mpc_host_mma_row(MP_TYPE_Q4_K, zero, out, 256), -1, "Q4_K's blocks are the pipelined kernel's");
}

/* The pipelined tensor-core kernel's stages (one super-block, or eight Q8_0 / Q4_0 blocks, per 256
 * elements): every element's s1 * q - s2, read as the kernel reads the stage (mma2_w's q4 and
 * scales), is the scalar dequantizer's value bit for bit, for every type it stages, rows of one,
 * three and eleven stages at four offsets of the alignment it asks (Q3_K's and Q6_K's 2-byte
 * aligned rows at odd half words); the kernel's per-group sums over them (the mins' activation
 * sums included) are the CPU's vec_dot up to float rounding; and every quantized weight type has a
 * tensor-core decoder. */
Test(cuda_units, tensor_core_stages_decode_as_the_cpu_reference)
{
    seed_rng();
    const int types[] = {MP_TYPE_Q4_0, MP_TYPE_Q8_0, MP_TYPE_Q2_K, MP_TYPE_Q3_K,
                         MP_TYPE_Q4_K, MP_TYPE_Q5_K, MP_TYPE_Q6_K, MP_TYPE_IQ4_XS};
    const int64_t sizes[] = {256, 768, 2816};
    for (size_t t = 0; t < sizeof types / sizeof types[0]; t++) {
        const int type = types[t];
        const size_t ra = mpc_host_mma2_align(type);
        cr_assert(ra == 2 || ra == 4 || ra == 16, "%s: no stage alignment", mp_type_name(type));
        for (size_t s = 0; s < sizeof sizes / sizeof sizes[0]; s++)
            for (int rep = 0; rep < 4; rep++)
                check_mma_decode(type, sizes[s], ra * (size_t)rep, mpc_host_mma2_row, "stage");
    }
    /* the kernel's arithmetic over those stages, the mins' activation sums included: the CPU's vec_dot
     * up to float rounding (as check_row's units) */
    for (size_t t = 0; t < sizeof types / sizeof types[0]; t++)
        for (size_t s = 0; s < sizeof sizes / sizeof sizes[0]; s++) {
            const int type = types[t];
            const int64_t n = sizes[s];
            const mp_type_ops *ref = mp_type_ops_scalar(type);
            uint8_t *w = alloc64(mp_type_row_bytes(type, n));
            random_weight_row(type, w, n);
            act_row a = make_act(ref->vec_dot_type, n, 0);
            float *wd = malloc(sizeof(float) * (size_t)n), got = NAN;
            ref->dequantize_row(w, wd, n);
            cr_assert_eq(mpc_host_mma2_dot(type, w, a.q, n, &got), 0, "%s: no stage", mp_type_name(type));
            check_dot(type, w, wd, &a, n, 0, got, "tensor-core groups");
            free(wd);
            free_act(&a);
            free(w);
        }
    float out[256];
    uint8_t zero[256] = {0};
    cr_assert_eq(mpc_host_mma2_row(MP_TYPE_Q5_0, zero, out, 256), -1, "Q5_0 is the first kernel's");
    /* every quantized weight type the GPU loads has one of the two decoders; the float types none */
    for (int i = 0, type; (type = mp_weight_type_at(i)) >= 0; i++) {
        const int quantized = type != MP_TYPE_F32 && type != MP_TYPE_F16 && type != MP_TYPE_BF16;
        cr_assert_eq(mpc_host_mma_takes(type), quantized, "%s: tensor-core decoder %s", mp_type_name(type),
                     quantized ? "missing" : "for a float type");
    }
}
