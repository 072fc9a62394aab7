/* tests/unit/test_quant_amx_emul.c — kernels/cpu/quant_amx.c's logic on any CPU with AVX-512.
 *
 * tests/meson.build compiles a test-only copy of quant_amx.c with -DMP_AMX_EMULATED: its tile
 * instructions then come from a scalar model (tests/unit/amx_emul.h, which also refuses shapes the
 * hardware would refuse), its AVX-512 code runs natively, and its table is exported as
 * mp_type_ops_amx_emulated. The tile GEMMs are compared with the scalar vec_dot on fresh random
 * rows (quant_check.c's check_tile_gemm: row and activation counts around the 16-row tiles and the
 * passes of 64, unaligned rows, nothing written outside the output's range). What this cannot show
 * is that the hardware behaves as the model says; test_quant.c's amx test checks the native table
 * on a CPU with AMX. On a CPU without AVX-512 the executable reports SKIP with the reason and exits 77
 * (its own main below), which meson counts as skipped, not passed.
 */
#include <criterion/criterion.h>
#include <stdio.h>

#include "tests/criterion_run.h"
#include "kernels/cpu/quant_impl.h" /* mp_gemm_self_check */
#include "kernels/quant.h"
#include "quant_check.h"

const mp_type_ops *mp_type_ops_amx_emulated(int type);

/* the weight types with tile GEMMs */
static const int types[] = {MP_TYPE_Q4_0,   MP_TYPE_Q5_0, MP_TYPE_IQ4_NL, MP_TYPE_MXFP4, MP_TYPE_Q8_0,
                            MP_TYPE_Q4_K,   MP_TYPE_Q5_K, MP_TYPE_Q6_K,   MP_TYPE_IQ4_XS};
#define N_TILE_TYPES (int)(sizeof types / sizeof types[0])

Test(quant_amx_emul, table_is_avx512_with_tile_gemms)
{
    for (int t = 0; t < N_TILE_TYPES; t++) {
        const mp_type_ops *emu = mp_type_ops_amx_emulated(types[t]), *avx = mp_type_ops_isa(types[t], "avx512");
        cr_assert_not_null(emu, "%s: no emulated AMX table", mp_type_name(types[t]));
        cr_assert_not_null(emu->gemm, "%s: no tile GEMM", mp_type_name(types[t]));
        cr_assert_eq(emu->vec_dot, avx->vec_dot, "%s: decode runs avx512's dot", mp_type_name(types[t]));
        cr_assert_eq(emu->vec_dot_multi, avx->vec_dot_multi);
        cr_assert_eq(emu->dequantize_row, avx->dequantize_row);
        cr_assert_eq(emu->quantize_row, avx->quantize_row);
    }
    for (int i = 0, type; (type = mp_weight_type_at(i)) >= 0; i++) { /* dispatch.c's rows: the same types */
        const mp_type_ops *emu = mp_type_ops_amx_emulated(type);
        cr_assert_eq(emu != NULL, mp_kernels_amx_rows(type, true) > 0, "%s: a tile GEMM %s, rows in dispatch.c's table %d",
                     mp_type_name(type), emu ? "exists" : "does not exist", mp_kernels_amx_rows(type, true));
        if (emu)
            cr_assert_eq(emu->gemm_min_rows, mp_kernels_amx_rows(type, false), "%s", mp_type_name(type));
    }
    cr_assert_null(mp_type_ops_amx_emulated(MP_TYPE_Q2_K), "Q2_K has no tile GEMM");
    cr_assert_null(mp_type_ops_amx_emulated(MP_TYPE_F16), "F16 has no tile GEMM");
    cr_assert_null(mp_type_ops_amx_emulated(MP_TYPE_Q4_1), "Q4_1 has no tile GEMM (its offsets need block sums)");
}

Test(quant_amx_emul, tile_gemms_match_scalar)
{
    seed_rng();
    for (int t = 0; t < N_TILE_TYPES; t++)
        check_tile_gemm(mp_type_ops_amx_emulated(types[t]), "amx-emulated");
}

Test(quant_amx_emul, row_loops_match_scalar)
{
    seed_rng();
    for (int t = 0; t < N_TILE_TYPES; t++)
        check_rows(mp_type_ops_amx_emulated(types[t]), "amx-emulated");
}

/* The check dispatch runs before it offers the amx level (kernels/cpu/gemm_check.c): every tile GEMM
 * passes it; a GEMM of another type, or one that writes zeros, fails it. */
static void gemm_of_zeros(int64_t n, const void *w, size_t row_bytes, int64_t n_rows, const void *x,
                                size_t x_stride, int64_t n_x, float *y, int64_t y_stride)
{
    (void)n, (void)w, (void)row_bytes, (void)x, (void)x_stride;
    for (int64_t i = 0; i < n_x; i++)
        for (int64_t r = 0; r < n_rows; r++)
            y[i * y_stride + r] = 0.0f;
}

Test(quant_amx_emul, the_dispatch_check_passes_and_catches)
{
    for (int t = 0; t < N_TILE_TYPES; t++)
        cr_assert_eq(mp_gemm_self_check(mp_type_ops_amx_emulated(types[t])), 0, "%s", mp_type_name(types[t]));
    cr_assert_eq(mp_gemm_self_check(mp_type_ops_isa(MP_TYPE_Q4_K, "avx512")), 0, "no gemm: nothing to check");
    mp_type_ops wrong = *mp_type_ops_amx_emulated(MP_TYPE_Q6_K);
    wrong.gemm = mp_type_ops_amx_emulated(MP_TYPE_Q4_K)->gemm;
    cr_assert_neq(mp_gemm_self_check(&wrong), 0, "Q4_K's GEMM passed for Q6_K rows");
    wrong = *mp_type_ops_amx_emulated(MP_TYPE_Q8_0);
    wrong.gemm = mp_type_ops_amx_emulated(MP_TYPE_Q4_0)->gemm;
    cr_assert_neq(mp_gemm_self_check(&wrong), 0, "Q4_0's GEMM passed for Q8_0 rows");
    wrong.gemm = gemm_of_zeros;
    cr_assert_neq(mp_gemm_self_check(&wrong), 0, "a GEMM of zeros passed");
}

int main(int argc, char **argv)
{
    if (!mp_type_ops_isa(MP_TYPE_Q4_K, "avx512")) {
        printf("SKIP: this CPU has no AVX-512 (isa %s): the emulated tiles' AVX-512 code cannot run here\n",
               mp_kernels_isa());
        return 77;
    }
    return mp_criterion_run_all(argc, argv);
}
