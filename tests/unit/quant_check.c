/* tests/unit/quant_check.c — shared by the quantized-kernel tests (test_quant.c, and
 * test_quant_avx512_emul.c for the SIMDe-emulated AVX-512 table): random inputs valid for each
 * type, activation rows with their error bounds, and the checks that compare a SIMD table with
 * the scalar reference (vec_dot within float-rounding tolerance, dequantize_row bit for bit,
 * GEMV/GEMM bit-identical to vec_dot).
 *
 * Invariant: every check draws fresh random inputs from the generator seeded by seed_rng() (the
 * clock, or MP_TEST_SEED), and every failure message prints g_seed so the run can be replayed.
 */
#include <criterion/criterion.h>
#include <float.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "quant_check.h"

/* ---- random bytes (the generator: tests/rng.c) ---- */

void rnd_bytes(uint8_t *p, size_t n)
{
    for (size_t i = 0; i < n; i++)
        p[i] = (uint8_t)rnd_u64();
}

/* ---- helpers ---- */

/* ---- helpers ---- */

/* 64-byte aligned memory (C11 wants the size to be a multiple of the alignment); tests add
 * their own misalignment on top to mimic GGUF rows */
void *alloc64(size_t bytes)
{
    void *p = aligned_alloc(64, (bytes + 63) / 64 * 64);
    cr_assert(p, "out of memory (%zu bytes)", bytes);
    return p;
}

const int k_weight_types[N_WEIGHT_TYPES] = {MP_TYPE_F32,  MP_TYPE_F16,  MP_TYPE_BF16,   MP_TYPE_Q4_0,
                                            MP_TYPE_Q4_1, MP_TYPE_Q5_0, MP_TYPE_Q5_1,   MP_TYPE_Q8_0,
                                            MP_TYPE_IQ4_NL, MP_TYPE_MXFP4, MP_TYPE_Q2_K, MP_TYPE_Q3_K,
                                            MP_TYPE_Q4_K, MP_TYPE_Q5_K, MP_TYPE_Q6_K, MP_TYPE_IQ4_XS};

int same_float(float a, float b)
{
    if (isnan(a) || isnan(b))
        return isnan(a) && isnan(b);
    uint32_t ua, ub;
    memcpy(&ua, &a, 4);
    memcpy(&ub, &b, 4);
    return ua == ub;
}

void store_f16(uint8_t *p, float v)
{
    const mp_f16 h = mp_f32_to_f16(v);
    memcpy(p, &h, 2);
}

/* Fill a row of weights of `type` with random content that is valid for the type: random
 * quant bits everywhere, scales drawn from sane f16 ranges (so every packed-scale bit pattern
 * of Q4_K/Q5_K and every 6-bit code of Q6_K occurs). */
void random_weight_row(int type, uint8_t *row, int64_t n)
{
    const size_t bytes = mp_type_row_bytes(type, n);
    switch (type) {
    case MP_TYPE_F32:
        for (int64_t i = 0; i < n; i++) {
            const float v = rnd_gauss();
            memcpy(row + 4 * i, &v, 4);
        }
        return;
    case MP_TYPE_F16:
        for (int64_t i = 0; i < n; i++)
            store_f16(row + 2 * i, rnd_gauss());
        return;
    case MP_TYPE_BF16:
        for (int64_t i = 0; i < n; i++) {
            const mp_bf16 h = mp_f32_to_bf16(rnd_gauss());
            memcpy(row + 2 * i, &h, 2);
        }
        return;
    }
    rnd_bytes(row, bytes);
    const size_t bb = mp_type_block_bytes(type);
    for (size_t off = 0; off < bytes; off += bb) {
        const float scale = (float)(0.001 + 0.02 * rnd_uniform());
        switch (type) {
        case MP_TYPE_Q4_0:
        case MP_TYPE_Q8_0:
        case MP_TYPE_Q5_0:
        case MP_TYPE_IQ4_NL:
        case MP_TYPE_IQ4_XS: /* its packed sub-block scales stay random: every pattern is valid */
            store_f16(row + off, (rnd_u64() & 1) ? scale : -scale);
            break;
        case MP_TYPE_Q4_1:
        case MP_TYPE_Q5_1: /* the offset of either sign */
            store_f16(row + off, scale);
            store_f16(row + off + 2, (float)((rnd_u64() & 1 ? 1 : -1) * 16 * scale * rnd_uniform()));
            break;
        case MP_TYPE_MXFP4: /* exponents around 2^-7 (e 121 .. 128) */
            row[off] = (uint8_t)(121 + rnd_u64() % 8);
            break;
        case MP_TYPE_Q4_K:
        case MP_TYPE_Q5_K:
            store_f16(row + off, scale);
            store_f16(row + off + 2, (float)(0.001 + 0.02 * rnd_uniform()));
            break;
        case MP_TYPE_Q6_K:
            store_f16(row + off + 208, (rnd_u64() & 1) ? scale : -scale);
            break;
        case MP_TYPE_Q2_K:
            store_f16(row + off + 80, scale);
            store_f16(row + off + 82, (float)(0.001 + 0.02 * rnd_uniform()));
            break;
        case MP_TYPE_Q3_K:
            store_f16(row + off + 108, (rnd_u64() & 1) ? scale : -scale);
            break;
        }
    }
}

void random_floats(float *x, int64_t n)
{
    const float scale = (float)pow(10.0, 4.0 * rnd_uniform() - 2.0);
    for (int64_t i = 0; i < n; i++)
        x[i] = rnd_gauss() * scale;
}

/* An activation row in the format `ops` wants, plus its dequantization. */


act_row make_act(int vec_dot_type, int64_t n, size_t misalign)
{
    act_row a;
    const size_t bytes = mp_type_row_bytes(vec_dot_type, n);
    a.raw = alloc64(bytes + 64);
    a.q = a.raw + misalign;
    a.x = malloc(n * sizeof(float));
    a.xhat = malloc(n * sizeof(float));
    a.bound = malloc(n * sizeof(float));
    random_floats(a.x, n);
    cr_assert_eq(mp_quantize_activation(vec_dot_type, a.x, a.q, n), 0);
    const int64_t blk = mp_type_block_elems(vec_dot_type);
    if (vec_dot_type == MP_TYPE_F32) {
        memcpy(a.xhat, a.x, n * sizeof(float));
        memset(a.bound, 0, n * sizeof(float));
    } else {
        if (vec_dot_type == MP_TYPE_Q8_0)
            mp_type_ops_scalar(MP_TYPE_Q8_0)->dequantize_row(a.q, a.xhat, n);
        else
            mp_dequantize_row_q8_K(a.q, a.xhat, n);
        for (int64_t b = 0; b < n / blk; b++) {
            float amax = 0.0f;
            for (int64_t i = 0; i < blk; i++)
                amax = fmaxf(amax, fabsf(a.x[b * blk + i]));
            /* half a step of d = amax/127, plus for Q8_0 the f16 rounding of d (relative
             * 2^-11) multiplied by |q| <= 127; 1% slack for the float arithmetic */
            const double d = amax / 127.0;
            const double e = vec_dot_type == MP_TYPE_Q8_0 ? d * (0.5 + 127.0 * 0x1p-11) : d * 0.5;
            for (int64_t i = 0; i < blk; i++)
                a.bound[b * blk + i] = (float)(e * 1.01);
        }
    }
    return a;
}

void free_act(act_row *a)
{
    free(a->raw);
    free(a->x);
    free(a->xhat);
    free(a->bound);
}

/* ---- a SIMD table against the scalar reference ---- */

void check_vec_dot_vs_scalar(const mp_type_ops *(*table)(int type), const char *variant)
{
    for (int t = 0; t < N_WEIGHT_TYPES; t++) {
        const int type = k_weight_types[t];
        const mp_type_ops *ref = mp_type_ops_scalar(type), *simd = table(type);
        cr_assert(simd != ref, "%s %s: no SIMD table", variant, mp_type_name(type));
        cr_assert_eq(simd->vec_dot_type, ref->vec_dot_type);
        const int64_t be = mp_type_block_elems(type);
        for (int trial = 0; trial < 200; trial++) {
            /* float weights: any length (vector tails); quantized: 1..20 blocks, sometimes many */
            int64_t n = be == 1 ? 1 + (int64_t)(rnd_u64() % 300) : be * (1 + (int64_t)(rnd_u64() % 20));
            if (trial % 50 == 0)
                n = 4096;
            const size_t wbytes = mp_type_row_bytes(type, n);
            /* weights 2 bytes past 32-byte alignment (4 for F32), activations 4 past */
            const size_t wmis = type == MP_TYPE_F32 ? 4 : 2;
            uint8_t *w = alloc64(wbytes + 64);
            random_weight_row(type, w + wmis, n);
            act_row a = make_act(ref->vec_dot_type, n, 4);
            float *what = malloc(n * sizeof(float));
            ref->dequantize_row(w + wmis, what, n);
            double ref_abs = 0;
            for (int64_t i = 0; i < n; i++)
                ref_abs += fabs((double)what[i] * a.xhat[i]);
            const float rs = ref->vec_dot(n, w + wmis, a.q), ss = simd->vec_dot(n, w + wmis, a.q);
            /* both are float-rounded sums of the same exact terms in different orders */
            const int64_t terms = be == 1 ? n : 4 * (n / be) + 8;
            const double tol = 2.0 * (double)(terms + 4) * FLT_EPSILON * ref_abs + 1e-30;
            cr_assert(fabs((double)rs - ss) <= tol,
                      "seed %llu: %s %s n=%lld trial %d: simd %.9g vs scalar %.9g (tol %.3g)",
                      (unsigned long long)g_seed, variant, mp_type_name(type), (long long)n, trial, ss, rs, tol);
            free_act(&a);
            free(w);
            free(what);
        }
    }
}

void check_dequantize_vs_scalar(const mp_type_ops *(*table)(int type), const char *variant)
{
    for (int t = 0; t < N_WEIGHT_TYPES; t++) {
        const int type = k_weight_types[t];
        const int64_t be = mp_type_block_elems(type);
        for (int trial = 0; trial < 50; trial++) {
            const int64_t n = be == 1 ? 1 + (int64_t)(rnd_u64() % 300) : be * (1 + (int64_t)(rnd_u64() % 8));
            const size_t wbytes = mp_type_row_bytes(type, n);
            uint8_t *w = alloc64(wbytes + 64);
            if (type == MP_TYPE_F16 || type == MP_TYPE_BF16)
                rnd_bytes(w + 2, wbytes); /* every bit pattern: subnormals, Inf, NaN */
            else
                random_weight_row(type, w + 2 + (type == MP_TYPE_F32 ? 2 : 0), n);
            const uint8_t *row = w + 2 + (type == MP_TYPE_F32 ? 2 : 0);
            float *a = malloc(n * sizeof(float)), *b = malloc(n * sizeof(float));
            mp_type_ops_scalar(type)->dequantize_row(row, a, n);
            table(type)->dequantize_row(row, b, n);
            for (int64_t i = 0; i < n; i++)
                cr_assert(same_float(a[i], b[i]), "seed %llu: %s %s n=%lld elem %lld: simd %a scalar %a",
                          (unsigned long long)g_seed, variant, mp_type_name(type), (long long)n, (long long)i,
                          (double)b[i], (double)a[i]);
            free(w);
            free(a);
            free(b);
        }
    }
}

/* ---- the row loops ---- */

static void check_rows_n(const mp_type_ops *ops, const char *variant, int64_t n_cols);

/* |dot(W[r], x_i)| summed term by term (double), from the scalar dequantizations: what the float
 * rounding of a sum of these terms can be off by scales with it */
static double abs_terms(const mp_type_ops *ops, const uint8_t *w_row, const uint8_t *x_row, int64_t n)
{
    float *wf = malloc(n * sizeof(float)), *xf = malloc(n * sizeof(float));
    cr_assert(wf && xf);
    mp_type_ops_scalar(ops->type)->dequantize_row(w_row, wf, n);
    if (ops->vec_dot_type == MP_TYPE_Q8_K)
        mp_dequantize_row_q8_K(x_row, xf, n);
    else if (ops->vec_dot_type == MP_TYPE_F32)
        memcpy(xf, x_row, n * sizeof(float));
    else
        mp_type_ops_scalar(ops->vec_dot_type)->dequantize_row(x_row, xf, n);
    double s = 0;
    for (int64_t i = 0; i < n; i++)
        s += fabs((double)wf[i] * xf[i]);
    free(wf);
    free(xf);
    return s;
}

/* y[i * y_stride + r] of a tile GEMM (ops->gemm, through mp_gemm_rows) against the scalar
 * vec_dot of row r0 + r and activation i, within the float rounding of vec_dot's check */
static void check_gemm_result(const mp_type_ops *ops, const char *variant, const uint8_t *w, size_t row_bytes,
                              int64_t n_cols, int64_t r0, int64_t r1, const uint8_t *x, size_t x_stride,
                              int64_t n_x, const float *y, int64_t y_stride)
{
    const mp_type_ops *ref = mp_type_ops_scalar(ops->type);
    const int64_t be = mp_type_block_elems(ops->type);
    const int64_t terms = be == 1 ? n_cols : 4 * (n_cols / be) + 8;
    for (int64_t i = 0; i < n_x; i++)
        for (int64_t r = r0; r < r1; r++) {
            const uint8_t *wr = w + r * row_bytes, *xi = x + i * x_stride;
            const double want = ref->vec_dot(n_cols, wr, xi);
            const double tol = 2.0 * (double)(terms + 4) * FLT_EPSILON * abs_terms(ops, wr, xi, n_cols) + 1e-30;
            const float got = y[i * y_stride + (r - r0)];
            cr_assert(fabs((double)got - want) <= tol,
                      "seed %llu: %s %s gemm (%lld rows, %lld activations, %lld columns) x %lld row %lld: "
                      "%.9g vs scalar %.9g (tol %.3g)",
                      (unsigned long long)g_seed, variant, mp_type_name(ops->type), (long long)(r1 - r0),
                      (long long)n_x, (long long)n_cols, (long long)i, (long long)r, got, want, tol);
        }
}

static void check_whole_gemm(const mp_type_ops *ops, const char *variant, bool exact);

void check_tile_gemm(const mp_type_ops *ops, const char *variant)
{
    check_whole_gemm(ops, variant, false);
}

void check_gemm_bits(const mp_type_ops *ops, const char *variant)
{
    check_whole_gemm(ops, variant, true);
}

/* exact: every result equals vec_dot's bit for bit; else within float rounding of the scalar dot */
static void check_whole_gemm(const mp_type_ops *table, const char *variant, bool exact)
{
    cr_assert(table && table->gemm, "%s: no whole-call GEMM", variant);
    /* a tile GEMM from one activation row on: MP_AMX_ROWS (calibrate's choice) may lower the
     * table's rows to any count; the exact GEMMs from their own threshold, which is fixed */
    mp_type_ops from_one = *table;
    if (!exact)
        from_one.gemm_min_rows = 1;
    const mp_type_ops *ops = &from_one;
    const int64_t be = mp_type_block_elems(ops->type);
    /* row counts around the 16-row blocks, activation counts around the groups of 16 and the
     * passes of 64, widths of 1 .. 12 blocks, a model's 2048, and a wide row whose packed
     * activations pass L1 (4096 + 3 blocks) */
    for (int trial = 0; trial < 40; trial++) {
        const int64_t n_cols = trial % 10 == 0   ? 2048
                               : trial % 10 == 5 ? 4096 + 3 * be
                                                 : be * (1 + (int64_t)(rnd_u64() % 12));
        const int64_t n_rows = 1 + (int64_t)(rnd_u64() % 40), n_x = ops->gemm_min_rows + (int64_t)(rnd_u64() % 80);
        const int64_t r0 = (int64_t)(rnd_u64() % 3), r1 = r0 + n_rows;
        const size_t row_bytes = mp_type_row_bytes(ops->type, n_cols);
        const size_t x_stride = mp_type_row_bytes(ops->vec_dot_type, n_cols) + 4 * (rnd_u64() % 3);
        const int64_t y_stride = n_rows + (int64_t)(rnd_u64() % 5);
        uint8_t *w = alloc64(r1 * row_bytes + 64), *x = alloc64(n_x * x_stride + 64);
        uint8_t *wa = w + 2, *xa = x + 4; /* unaligned, as production's rows may be */
        for (int64_t r = 0; r < r1; r++)
            random_weight_row(ops->type, wa + r * row_bytes, n_cols);
        float *xf = malloc(n_cols * sizeof(float));
        for (int64_t i = 0; i < n_x; i++) {
            random_floats(xf, n_cols);
            cr_assert_eq(mp_quantize_activation(ops->vec_dot_type, xf, xa + i * x_stride, n_cols), 0);
        }
        float *y = malloc((n_x * y_stride + 1) * sizeof(float));
        for (int64_t i = 0; i < n_x * y_stride + 1; i++)
            y[i] = -12345.0f;
        mp_gemm_rows(ops, wa, row_bytes, n_cols, r0, r1, xa, x_stride, n_x, y, y_stride);
        if (!exact)
            check_gemm_result(ops, variant, wa, row_bytes, n_cols, r0, r1, xa, x_stride, n_x, y, y_stride);
        for (int64_t i = 0; exact && i < n_x; i++)
            for (int64_t r = r0; r < r1; r++) {
                const float want = ops->vec_dot(n_cols, wa + r * row_bytes, xa + i * x_stride);
                cr_assert(same_float(y[i * y_stride + (r - r0)], want),
                          "seed %llu: %s %s gemm (%lld rows, %lld activations, %lld columns) x %lld row %lld: %.9g, "
                          "vec_dot %.9g", (unsigned long long)g_seed, variant, mp_type_name(ops->type),
                          (long long)n_rows, (long long)n_x, (long long)n_cols, (long long)i, (long long)r,
                          y[i * y_stride + (r - r0)], want);
            }
        for (int64_t i = 0; i < n_x; i++)
            for (int64_t c = n_rows; c < y_stride; c++)
                cr_assert_eq(y[i * y_stride + c], -12345.0f, "%s %s gemm wrote past its row range", variant,
                             mp_type_name(ops->type));
        cr_assert_eq(y[n_x * y_stride], -12345.0f, "%s %s gemm wrote past its last activation", variant,
                     mp_type_name(ops->type));
        free(w);
        free(x);
        free(xf);
        free(y);
    }
}

/* rows of 2, 9 (a 2304-wide row, as a model's) and 65 blocks, and rows of a third of
 * mp_gemm_rows's block of weight bytes or a little more, so that its ranges cross blocks */
void check_rows(const mp_type_ops *ops, const char *variant)
{
    const int64_t be = mp_type_block_elems(ops->type);
    const size_t block_bytes = mp_type_row_bytes(ops->type, be);
    const int64_t wide = (int64_t)((MP_GEMM_BLOCK_BYTES / 3 + block_bytes - 1) / block_bytes) * be;
    if (be == 1) {
        check_rows_n(ops, variant, 96);
    } else {
        const int64_t blocks[] = {2, 9, 65};
        for (size_t i = 0; i < sizeof blocks / sizeof blocks[0]; i++)
            check_rows_n(ops, variant, blocks[i] * be);
    }
    check_rows_n(ops, variant, wide);
}

static void check_rows_n(const mp_type_ops *ops, const char *variant, int64_t n_cols)
{
    const int64_t n_rows = 13, n_x = 7; /* a partial GEMM tile at the end */
    const size_t row_bytes = mp_type_row_bytes(ops->type, n_cols);
    const size_t x_stride = mp_type_row_bytes(ops->vec_dot_type, n_cols) + 4; /* padded rows */
    uint8_t *w = alloc64(n_rows * row_bytes + 64);
    for (int64_t r = 0; r < n_rows; r++)
        random_weight_row(ops->type, w + r * row_bytes, n_cols);
    uint8_t *x = alloc64(n_x * x_stride + 64);
    float *xf = malloc(n_cols * sizeof(float));
    for (int64_t i = 0; i < n_x; i++) {
        random_floats(xf, n_cols);
        cr_assert_eq(mp_quantize_activation(ops->vec_dot_type, xf, x + i * x_stride, n_cols), 0);
    }
    const int64_t r0 = 2, r1 = 11, y_stride = 10;
    float y[16];
    /* row ranges whose counts leave every remainder of a GEMV's groups of 2 and 4 rows: each row's
     * result is vec_dot's bit for bit, whatever rows it is computed beside */
    const int64_t ranges[][2] = {{r0, r1}, {0, 13}, {1, 4}, {5, 7}, {12, 13}, {3, 9}};
    for (size_t g = 0; g < sizeof ranges / sizeof ranges[0]; g++) {
        const int64_t a = ranges[g][0], b = ranges[g][1];
        y[b - a] = -12345.0f;
        mp_gemv_rows(ops, w, row_bytes, n_cols, a, b, x, y);
        for (int64_t r = a; r < b; r++)
            cr_assert(same_float(y[r - a], ops->vec_dot(n_cols, w + r * row_bytes, x)),
                      "seed %llu: %s %s gemv row %lld of %lld..%lld (%lld columns) differs from vec_dot",
                      (unsigned long long)g_seed, variant, mp_type_name(ops->type), (long long)r, (long long)a,
                      (long long)b, (long long)n_cols);
        cr_assert_eq(y[b - a], -12345.0f, "%s %s: gemv wrote past its row range", variant, mp_type_name(ops->type));
    }
    float *yy = malloc(n_x * y_stride * sizeof(float));
    /* 7 activation rows: a tile of 4 and one of 3; 5: a tile of 4 and one of 1 (the GEMV where there is one) */
    for (int64_t nx = n_x; nx >= 5; nx -= 2) {
        for (int64_t i = 0; i < n_x * y_stride; i++)
            yy[i] = -12345.0f;
        mp_gemm_rows(ops, w, row_bytes, n_cols, r0, r1, x, x_stride, nx, yy, y_stride);
        /* a whole-call GEMM: within rounding here (check_gemm_bits holds the bit-exact ones to vec_dot) */
        const bool whole = ops->gemm && nx >= ops->gemm_min_rows;
        /* multi-row dots in another lane order than vec_dot's: within rounding, as a whole-call GEMM */
        const bool bits = !whole && !ops->multi_other_order;
        if (!bits)
            check_gemm_result(ops, variant, w, row_bytes, n_cols, r0, r1, x, x_stride, nx, yy, y_stride);
        for (int64_t i = 0; i < nx && !whole; i++) {
            for (int64_t r = r0; r < r1 && bits; r++) {
                /* vec_dot_multi and the GEMV do each row's arithmetic in vec_dot's order: equal bits */
                const float want = ops->vec_dot(n_cols, w + r * row_bytes, x + i * x_stride);
                cr_assert(same_float(yy[i * y_stride + (r - r0)], want),
                          "seed %llu: %s %s gemm of %lld rows, x %lld row %lld: %.9g vs vec_dot %.9g",
                          (unsigned long long)g_seed, variant, mp_type_name(ops->type), (long long)nx, (long long)i,
                          (long long)r, yy[i * y_stride + (r - r0)], want);
            }
            cr_assert_eq(yy[i * y_stride + (r1 - r0)], -12345.0f, "gemm wrote past its row range");
        }
        if (nx < n_x)
            cr_assert_eq(yy[nx * y_stride], -12345.0f, "gemm wrote past its activation rows");
    }
    free(w);
    free(x);
    free(xf);
    free(yy);
}

/* MXFP4 at every E8M0 exponent (0 and 1 are subnormal scales, 2^-128 and 2^-127; 255 the largest,
 * 2^127), each row's blocks all at one exponent: ops' vec_dot against the scalar one within float
 * rounding, and its GEMV over the rows (four at a time where it has one) equal to its vec_dot bit
 * for bit, whose scales it converts its own way. */
void check_mxfp4_exponents(const mp_type_ops *ops, const char *variant)
{
    enum { NB = 3, N = 32 * NB, ROWS = 6 };
    static const int8_t levels[16] = MP_MXFP4_LEVELS;
    const mp_type_ops *ref = mp_type_ops_scalar(MP_TYPE_MXFP4);
    const size_t rb = mp_type_row_bytes(MP_TYPE_MXFP4, N);
    uint8_t *w = alloc64(ROWS * rb + 64), *x = alloc64(NB * sizeof(mp_block_q8_0) + 64);
    for (int ib = 0; ib < NB; ib++)
        for (int i = 0; i < 32; i++)
            ((mp_block_q8_0 *)x)[ib].qs[i] = (int8_t)((int)(rnd_u64() % 255) - 127);
    for (int e = 0; e < 256; e++) {
        /* the activation's scale: 1 below e 128 (d_w d_x stays as small as the weights' scale, so
         * e = 0 and 1 give nonzero subnormal products), f16's smallest above (e = 255 stays finite) */
        const int dx_exp = e < 128 ? 0 : -24;
        for (int ib = 0; ib < NB; ib++)
            ((mp_block_q8_0 *)x)[ib].d = e < 128 ? 0x3C00 : 0x0001;
        rnd_bytes(w, ROWS * rb);
        for (int r = 0; r < ROWS; r++)
            for (int ib = 0; ib < NB; ib++)
                ((mp_block_mxfp4 *)(w + r * rb))[ib].e = (uint8_t)e;
        float y[ROWS];
        mp_gemv_rows(ops, w, rb, N, 0, ROWS, x, y);
        for (int r = 0; r < ROWS; r++) {
            double mag = 0.0; /* sum |w x| in double: a weight alone may pass FLT_MAX at e = 253 */
            for (int i = 0; i < N; i++) {
                const mp_block_mxfp4 *b = (const mp_block_mxfp4 *)(w + r * rb) + i / 32;
                const int nib = (b->qs[i % 16] >> (i % 32 < 16 ? 0 : 4)) & 0x0F;
                mag += fabs((double)levels[nib] * ldexp(1.0, e - 128 + dx_exp) *
                            (double)((const mp_block_q8_0 *)x)[i / 32].qs[i % 32]);
            }
            const float want = ref->vec_dot(N, w + r * rb, x), got = ops->vec_dot(N, w + r * rb, x);
            cr_assert(isfinite(want) && fabs((double)got - want) <= 64.0 * FLT_EPSILON * mag + 0x1p-149,
                      "seed %llu: %s MXFP4 e %d row %d: vec_dot %a, scalar %a", (unsigned long long)g_seed, variant,
                      e, r, (double)got, (double)want);
            cr_assert(same_float(y[r], got), "seed %llu: %s MXFP4 e %d row %d: gemv %a, vec_dot %a",
                      (unsigned long long)g_seed, variant, e, r, (double)y[r], (double)got);
        }
    }
    free(w);
    free(x);
}
