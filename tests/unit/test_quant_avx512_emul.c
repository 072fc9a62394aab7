/* tests/unit/test_quant_avx512_emul.c — kernels/cpu/quant_avx512.c's logic on any x86-64 CPU.
 *
 * tests/meson.build compiles a test-only copy of quant_avx512.c with -DMP_AVX512_EMULATED: its
 * intrinsics then come from SIMDe's portable AVX-512 (tests/unit/simde_avx512.h) and its table is
 * exported as mp_type_ops_avx512_emulated. The same checks as test_quant.c's SIMD tests
 * (quant_check.c) compare that table with the scalar reference, on fresh random inputs at
 * unaligned addresses, with the same tolerances: vec_dot within float rounding, dequantize_row
 * bit for bit, GEMV/GEMM (vec_dot_multi) bit-identical to vec_dot. What this cannot show is that
 * the native instructions behave as SIMDe models them; test_quant.c checks the native table on a
 * CPU with AVX-512. Built only when the SIMDe headers exist (scripts/setup.sh installs them);
 * otherwise meson registers a test that reports SKIP with the reason.
 */
#include <criterion/criterion.h>

#include "kernels/quant.h"
#include "quant_check.h"

const mp_type_ops *mp_type_ops_avx512_emulated(int type);

Test(quant_avx512_emul, table_keeps_the_scalar_contract)
{
    for (int t = 0; t < N_WEIGHT_TYPES; t++) {
        const int type = k_weight_types[t];
        const mp_type_ops *emu = mp_type_ops_avx512_emulated(type), *ref = mp_type_ops_scalar(type);
        cr_assert_not_null(emu, "%s: no emulated AVX-512 table", mp_type_name(type));
        cr_assert_eq(emu->type, type);
        cr_assert_eq(emu->vec_dot_type, ref->vec_dot_type, "%s vec_dot_type", mp_type_name(type));
        cr_assert_eq(emu->quantize_row, ref->quantize_row, "%s quantize_row", mp_type_name(type));
    }
    cr_assert_null(mp_type_ops_avx512_emulated(MP_TYPE_Q8_K), "Q8_K has no weight kernels");
}

Test(quant_avx512_emul, vec_dot_matches_scalar)
{
    seed_rng();
    check_vec_dot_vs_scalar(mp_type_ops_avx512_emulated, "avx512-emulated");
}

Test(quant_avx512_emul, dequantize_matches_scalar_exactly)
{
    seed_rng();
    check_dequantize_vs_scalar(mp_type_ops_avx512_emulated, "avx512-emulated");
}

Test(quant_avx512_emul, gemv_gemm_match_vec_dot)
{
    seed_rng();
    for (int t = 0; t < N_WEIGHT_TYPES; t++)
        check_rows(mp_type_ops_avx512_emulated(k_weight_types[t]), "avx512-emulated");
}

/* MXFP4 at every E8M0 exponent: vec_dot against the scalar one, the GEMV's own scale conversion
 * against vec_dot's bits */
Test(quant_avx512_emul, mxfp4_every_exponent)
{
    seed_rng();
    check_mxfp4_exponents(mp_type_ops_avx512_emulated(MP_TYPE_MXFP4), "avx512-emulated");
}

/* the whole-call GEMMs of Q4_0 and Q8_0 (activation rows in pairs) equal vec_dot bit for bit */
Test(quant_avx512_emul, q8_gemms_equal_vec_dot)
{
    seed_rng();
    check_gemm_bits(mp_type_ops_avx512_emulated(MP_TYPE_Q4_0), "avx512-emulated");
    check_gemm_bits(mp_type_ops_avx512_emulated(MP_TYPE_Q8_0), "avx512-emulated");
}
