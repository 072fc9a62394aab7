/* kernels/cpu/simd_none.c — the x86 levels' entry points on a CPU of another family (an aarch64
 * host such as a Grace Hopper's): no tables, so dispatch.c's probe finds the scalar level there
 * (probe_cpu_isa reads cpuid on x86 only) and every type runs the scalar reference. Built instead
 * of quant_avx2.c, quant_avx512.c and quant_amx.c where the host is not x86 (kernels/meson.build). */
#include "kernels/cpu/quant_impl.h"

const mp_type_ops *mp_type_ops_avx2(int type)
{
    (void)type;
    return NULL;
}

const mp_type_ops *mp_type_ops_avx512(int type)
{
    (void)type;
    return NULL;
}

const mp_type_ops *mp_type_ops_amx(int type)
{
    (void)type;
    return NULL;
}

int mp_amx_enable(void)
{
    return -1;
}

void mp_amx_set_rows(int type, int rows)
{
    (void)type, (void)rows;
}

/* dispatch.c calls these only at the avx2 level and above, which such a CPU never reaches; the
 * references give the same bytes */
void mp_quantize_row_q8_K_avx2(const float *src, void *dst, int64_t n)
{
    mp_quantize_row_q8_K_ref(src, dst, n);
}

void mp_quantize_row_q8_0_avx2(const float *src, void *dst, int64_t n)
{
    mp_quantize_row_q8_0_ref(src, dst, n);
}
