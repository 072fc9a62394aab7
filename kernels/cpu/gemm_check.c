/* kernels/cpu/gemm_check.c — a table's whole-call GEMM (mp_type_ops.gemm) against its own vec_dot, on
 * one small fixed problem, before dispatch hands that GEMM any work.
 *
 * The tile GEMMs (quant_amx.c) run instructions that only some CPUs have: their logic is tested
 * everywhere through a model of those instructions, their hardware only where it exists. This check
 * is the guard in between: dispatch.c runs it once per process before it offers the level, and a
 * GEMM that disagrees is never used (the level below runs, and MP_ISA's warning says why). The
 * problem: 17 weight rows (a tile of 16 and one more) of 512 columns, valid random blocks, against
 * 17 activation rows (a group of 16 and one more), so that every tile shape change runs; each
 * result must equal vec_dot's within the float rounding of two sums of the same exact terms.
 */
#include <float.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/cpu/quant_impl.h"

enum { CHECK_ROWS = 17, CHECK_X = 17, CHECK_COLS = 512 };

static uint64_t next(uint64_t *s)
{
    *s ^= *s << 13;
    *s ^= *s >> 7;
    *s ^= *s << 17;
    return *s;
}

/* uniform in [0, 1) */
static float unit(uint64_t *s)
{
    return (float)(next(s) >> 40) * (1.0f / 16777216.0f);
}

/* Byte offsets of a block's f16 scales (-1: none), for the types that have whole-call GEMMs. */
static void scale_offsets(int type, int *a, int *b)
{
    *a = *b = -1;
    switch (type) {
    case MP_TYPE_Q4_0:
    case MP_TYPE_Q5_0:
    case MP_TYPE_Q8_0:
    case MP_TYPE_IQ4_NL:
    case MP_TYPE_IQ4_XS: /* its packed sub-block scales stay random: every pattern is valid */
    case MP_TYPE_MXFP4:  /* its exponent byte, set apart below (0: the f16 written there is overwritten) */
        *a = 0;
        break;
    case MP_TYPE_Q4_K:
    case MP_TYPE_Q5_K:
        *a = 0;
        *b = 2;
        break;
    case MP_TYPE_Q6_K:
        *a = (int)offsetof(mp_block_q6_K, d);
        break;
    case MP_TYPE_Q2_K:
        *a = (int)offsetof(mp_block_q2_K, d);
        *b = (int)offsetof(mp_block_q2_K, dmin);
        break;
    case MP_TYPE_Q3_K:
        *a = (int)offsetof(mp_block_q3_K, d);
        break;
    }
}

/* |w_i x_i| summed over a row pair, from the dequantized operands */
static double abs_terms(const mp_type_ops *ops, const uint8_t *w, const uint8_t *x, float *wf, float *xf)
{
    ops->dequantize_row(w, wf, CHECK_COLS);
    if (ops->vec_dot_type == MP_TYPE_Q8_K)
        mp_dequantize_row_q8_K_scalar(x, xf, CHECK_COLS);
    else
        mp_dequantize_row_q8_0_scalar(x, xf, CHECK_COLS);
    double s = 0;
    for (int i = 0; i < CHECK_COLS; i++)
        s += fabs((double)wf[i] * xf[i]);
    return s;
}

int mp_gemm_self_check(const mp_type_ops *ops)
{
    if (!ops || !ops->gemm)
        return 0;
    int sa, sb;
    scale_offsets(ops->type, &sa, &sb);
    const size_t row_bytes = mp_type_row_bytes(ops->type, CHECK_COLS);
    const size_t x_stride = mp_type_row_bytes(ops->vec_dot_type, CHECK_COLS);
    const size_t block = mp_type_block_bytes(ops->type);
    if (sa < 0 || row_bytes == 0 || x_stride == 0 || block == 0)
        return -1; /* a type this check cannot fill: the GEMM is not offered */
    uint8_t *w = malloc(CHECK_ROWS * row_bytes + 2), *x = malloc(CHECK_X * x_stride + 4);
    float *xf = malloc(CHECK_COLS * sizeof(float)), *wf = malloc(CHECK_COLS * sizeof(float));
    float *y = malloc(CHECK_X * CHECK_ROWS * sizeof(float));
    int bad = !w || !x || !xf || !wf || !y;
    uint64_t s = 0x9E3779B97F4A7C15ull;
    uint8_t *wa = w + 2, *xa = x + 4; /* unaligned, as production's rows may be */
    for (size_t i = 0; !bad && i < CHECK_ROWS * row_bytes; i++)
        wa[i] = (uint8_t)next(&s);
    for (size_t off = 0; !bad && off < CHECK_ROWS * row_bytes; off += block) {
        const mp_f16 d = mp_f32_to_f16(0.001f + 0.02f * unit(&s)), m = mp_f32_to_f16(0.001f + 0.02f * unit(&s));
        memcpy(wa + off + sa, &d, sizeof d);
        if (sb >= 0)
            memcpy(wa + off + sb, &m, sizeof m);
        if (ops->type == MP_TYPE_MXFP4) /* scales 2^-7 .. 2^-4 (e 121 .. 124) */
            wa[off] = (uint8_t)(121 + next(&s) % 4);
    }
    for (int i = 0; !bad && i < CHECK_X; i++) {
        for (int c = 0; c < CHECK_COLS; c++)
            xf[c] = 2.0f * unit(&s) - 1.0f;
        if (ops->vec_dot_type == MP_TYPE_Q8_K) /* the reference quantizers: the dispatched ones give their bits */
            mp_quantize_row_q8_K_ref(xf, xa + (size_t)i * x_stride, CHECK_COLS);
        else if (ops->vec_dot_type == MP_TYPE_Q8_0)
            mp_quantize_row_q8_0_ref(xf, xa + (size_t)i * x_stride, CHECK_COLS);
        else
            bad = 1;
    }
    if (!bad)
        ops->gemm(CHECK_COLS, wa, row_bytes, CHECK_ROWS, xa, x_stride, CHECK_X, y, CHECK_ROWS);
    const int64_t be = mp_type_block_elems(ops->type), terms = 4 * (CHECK_COLS / be) + 8;
    for (int i = 0; !bad && i < CHECK_X; i++)
        for (int r = 0; !bad && r < CHECK_ROWS; r++) {
            const uint8_t *wr = wa + (size_t)r * row_bytes, *xi = xa + (size_t)i * x_stride;
            const double want = ops->vec_dot(CHECK_COLS, wr, xi);
            /* each within (terms + 4) eps of the exact sum: twice that apart at most, and twice again */
            const double tol = 4.0 * (double)(terms + 4) * FLT_EPSILON * abs_terms(ops, wr, xi, wf, xf) + 1e-30;
            const float got = y[i * CHECK_ROWS + r];
            bad = !(fabs((double)got - want) <= tol); /* a NaN fails too */
        }
    free(w);
    free(x);
    free(xf);
    free(wf);
    free(y);
    return bad ? -1 : 0;
}
