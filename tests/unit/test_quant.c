/* tests/unit/test_quant.c — the quantized kernels against the gguf package and each other.
 *
 * - fixtures (tests/fixtures/quant/<type>.bin, made by tests/fixtures/gen_quant_fixtures.py from
 *   the PyPI gguf package): dequantize_row, scalar and every SIMD level the CPU has (AVX2,
 *   AVX-512), must equal gguf's floats exactly: every kernel issues the same float32 operations
 *   in the same order as gguf's numpy code (and the kernels are built with -ffp-contract=off),
 *   so no ulp of slack is needed;
 *   quantize_row of F16/BF16/Q4_0/Q8_0 must equal gguf's bytes;
 * - vec_dot (scalar) against a double-precision dot of the dequantized operands (only float
 *   rounding may differ), and against the unquantized activations (the activation quantization
 *   error bound, computed per block);
 * - every SIMD level the CPU has (mp_type_ops_isa: "avx2", "avx512", "amx"; skipped with a message
 *   where it has none) against the scalar reference on fresh random inputs at unaligned
 *   addresses (checks in quant_check.c); the seed comes from the clock (or MP_TEST_SEED) and is
 *   printed on failure;
 * - the row loops, the K-quant quantizers' error, the f16/bf16 conversions, the type table, the
 *   dispatch (cpuid, force_scalar, MP_ISA).
 */
#include <criterion/criterion.h>
#include <float.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#if defined(__x86_64__)
#include <cpuid.h>
#include <sys/syscall.h>
#include <unistd.h>
#endif

#include "kernels/cuda_sizes.h"
#include "kernels/quant.h"
#include "quant_check.h"

/* The SIMD levels, widest last; each test covers those the CPU has. mp_type_ops_isa() takes a
 * name, the checks take a function of the type: one small adapter per level. */
static const mp_type_ops *avx2_table(int type)
{
    return mp_type_ops_isa(type, "avx2");
}

static const mp_type_ops *avx512_table(int type)
{
    return mp_type_ops_isa(type, "avx512");
}

static const mp_type_ops *amx_table(int type)
{
    return mp_type_ops_isa(type, "amx");
}

static const struct simd_level {
    const char *name;
    const mp_type_ops *(*table)(int type);
} k_simd_levels[] = {{"avx2", avx2_table}, {"avx512", avx512_table}, {"amx", amx_table}};
#define N_SIMD_LEVELS (int)(sizeof(k_simd_levels) / sizeof(k_simd_levels[0]))

static int cpu_has_level(int level)
{
    return mp_type_ops_isa(MP_TYPE_F32, k_simd_levels[level].name) != NULL;
}

/* how many levels the CPU has; skips the test with a message when it has none */
static int simd_levels_or_skip(void)
{
    int n = 0;
    for (int l = 0; l < N_SIMD_LEVELS; l++)
        n += cpu_has_level(l);
    if (n == 0)
        cr_skip_test("no SIMD level on this CPU (isa %s): nothing to compare", mp_kernels_isa());
    return n;
}

/* ---- fixtures ---- */

typedef struct fixture {
    int type;
    uint32_t n_rows, n_cols;
    float *src;     /* (n_rows, n_cols) or NULL */
    uint8_t *quant; /* (n_rows, row_bytes) */
    float *deq;     /* (n_rows, n_cols) */
    size_t row_bytes;
} fixture;

static void read_exact(FILE *f, void *p, size_t n, const char *path)
{
    cr_assert_eq(fread(p, 1, n, f), n, "fixture %s is truncated", path);
}

static fixture load_fixture(const char *name)
{
    const char *root = getenv("MP_SOURCE_ROOT");
    cr_assert(root, "MP_SOURCE_ROOT is not set (run through meson test)");
    char path[4096];
    snprintf(path, sizeof(path), "%s/tests/fixtures/quant/%s.bin", root, name);
    FILE *f = fopen(path, "rb");
    cr_assert(f, "cannot open fixture %s", path);
    char magic[4];
    uint32_t hdr[5];
    read_exact(f, magic, 4, path);
    read_exact(f, hdr, sizeof(hdr), path);
    cr_assert(memcmp(magic, "MPQF", 4) == 0 && hdr[0] == 1, "fixture %s: bad magic/version", path);
    fixture fx = {.type = (int)hdr[1], .n_rows = hdr[2], .n_cols = hdr[3]};
    fx.row_bytes = mp_type_row_bytes(fx.type, fx.n_cols);
    cr_assert(fx.row_bytes > 0, "fixture %s: type %d with %u columns", path, fx.type, fx.n_cols);
    const size_t nf = (size_t)fx.n_rows * fx.n_cols;
    if (hdr[4]) {
        fx.src = malloc(nf * sizeof(float));
        read_exact(f, fx.src, nf * sizeof(float), path);
    }
    fx.quant = malloc(fx.n_rows * fx.row_bytes);
    fx.deq = malloc(nf * sizeof(float));
    read_exact(f, fx.quant, fx.n_rows * fx.row_bytes, path);
    read_exact(f, fx.deq, nf * sizeof(float), path);
    cr_assert_eq(fgetc(f), EOF, "fixture %s: trailing bytes", path);
    fclose(f);
    return fx;
}

static void free_fixture(fixture *fx)
{
    free(fx->src);
    free(fx->quant);
    free(fx->deq);
}

static const char *k_fixtures[] = {"f16",  "bf16", "q4_0", "q4_1", "q5_0",  "q5_1",   "q8_0",
                                   "mxfp4", "iq4_nl", "q2_K", "q3_K", "q4_K", "q5_K", "q6_K", "iq4_xs"};

static void check_dequantize_fixture(const mp_type_ops *ops, const fixture *fx, const char *name,
                                     const char *variant)
{
    /* copy each row to an address 2 bytes past 32-byte alignment, as GGUF rows may be */
    uint8_t *buf = alloc64(fx->row_bytes + 64);
    float *out = malloc(fx->n_cols * sizeof(float));
    for (uint32_t r = 0; r < fx->n_rows; r++) {
        memcpy(buf + 2, fx->quant + r * fx->row_bytes, fx->row_bytes);
        ops->dequantize_row(buf + 2, out, fx->n_cols);
        for (uint32_t i = 0; i < fx->n_cols; i++) {
            const float want = fx->deq[(size_t)r * fx->n_cols + i];
            cr_assert(same_float(out[i], want), "%s %s dequantize row %u elem %u: got %a want %a",
                      name, variant, r, i, (double)out[i], (double)want);
        }
    }
    free(buf);
    free(out);
}

Test(quant, dequantize_matches_gguf)
{
    for (size_t k = 0; k < sizeof(k_fixtures) / sizeof(k_fixtures[0]); k++) {
        fixture fx = load_fixture(k_fixtures[k]);
        check_dequantize_fixture(mp_type_ops_scalar(fx.type), &fx, k_fixtures[k], "scalar");
        check_dequantize_fixture(mp_type_ops_get(fx.type), &fx, k_fixtures[k], mp_kernels_isa());
        for (int l = 0; l < N_SIMD_LEVELS; l++)
            if (cpu_has_level(l))
                check_dequantize_fixture(k_simd_levels[l].table(fx.type), &fx, k_fixtures[k], k_simd_levels[l].name);
        free_fixture(&fx);
    }
}

Test(quant, quantize_matches_gguf)
{
    const char *names[] = {"f16", "bf16", "q4_0", "q4_1", "q5_0", "q5_1", "q8_0", "mxfp4"};
    for (size_t k = 0; k < sizeof(names) / sizeof(names[0]); k++) {
        fixture fx = load_fixture(names[k]);
        cr_assert(fx.src, "fixture %s has no source rows", names[k]);
        uint8_t *out = malloc(fx.row_bytes);
        for (uint32_t r = 0; r < fx.n_rows; r++) {
            mp_type_ops_scalar(fx.type)->quantize_row(fx.src + (size_t)r * fx.n_cols, out, fx.n_cols);
            const uint8_t *want = fx.quant + r * fx.row_bytes;
            for (size_t b = 0; b < fx.row_bytes; b++)
                cr_assert_eq(out[b], want[b], "%s quantize row %u byte %zu: got 0x%02x want 0x%02x",
                             names[k], r, b, out[b], want[b]);
            /* the dispatched table shares the reference quantizer: same bytes */
            uint8_t *out2 = malloc(fx.row_bytes);
            mp_type_ops_get(fx.type)->quantize_row(fx.src + (size_t)r * fx.n_cols, out2, fx.n_cols);
            cr_assert(memcmp(out, out2, fx.row_bytes) == 0, "%s: dispatched quantizer differs", names[k]);
            free(out2);
        }
        free(out);
        free_fixture(&fx);
    }
}

Test(quant, vec_dot_scalar_matches_double_reference)
{
    seed_rng();
    const int64_t sizes_blocks[] = {1, 2, 3, 8, 16};
    for (int t = 0; t < N_WEIGHT_TYPES; t++) {
        const int type = k_weight_types[t];
        const mp_type_ops *ops = mp_type_ops_scalar(type);
        const int64_t blk = mp_type_block_elems(type) == 1 ? 32 : mp_type_block_elems(type);
        for (size_t s = 0; s < sizeof(sizes_blocks) / sizeof(sizes_blocks[0]); s++) {
            for (int rep = 0; rep < 8; rep++) {
                const int64_t n = sizes_blocks[s] * blk + (mp_type_block_elems(type) == 1 ? rep : 0);
                const size_t wbytes = mp_type_row_bytes(type, n);
                uint8_t *w = alloc64(wbytes + 64);
                float *what = malloc(n * sizeof(float));
                if (rep % 2 == 0 || type == MP_TYPE_F32 || type == MP_TYPE_F16 || type == MP_TYPE_BF16) {
                    random_weight_row(type, w, n);
                } else { /* weights as our quantizer makes them from floats */
                    float *wf = malloc(n * sizeof(float));
                    random_floats(wf, n);
                    ops->quantize_row(wf, w, n);
                    free(wf);
                }
                ops->dequantize_row(w, what, n);
                act_row a = make_act(ops->vec_dot_type, n, 0);
                double ref = 0, ref_abs = 0, ref_x = 0, act_err = 0;
                for (int64_t i = 0; i < n; i++) {
                    ref += (double)what[i] * a.xhat[i];
                    ref_abs += fabs((double)what[i] * a.xhat[i]);
                    ref_x += (double)what[i] * a.x[i];
                    act_err += fabs((double)what[i]) * a.bound[i];
                }
                const float got = ops->vec_dot(n, w, a.q);
                /* float rounding only: one rounding per accumulated term (n terms for float
                 * weights, a few per block for the quantized ones) on top of exact integers */
                const int64_t terms = mp_type_block_elems(type) == 1 ? n : 4 * (n / blk) + 8;
                const double tol = (double)(terms + 4) * FLT_EPSILON * ref_abs + 1e-30;
                cr_assert(fabs(got - ref) <= tol,
                          "seed %llu: %s n=%lld: vec_dot %.9g vs dequantized reference %.9g (tol %.3g)",
                          (unsigned long long)g_seed, mp_type_name(type), (long long)n, got, ref, tol);
                cr_assert(fabs(got - ref_x) <= tol + act_err,
                          "seed %llu: %s n=%lld: vec_dot %.9g vs float activations %.9g (bound %.3g)",
                          (unsigned long long)g_seed, mp_type_name(type), (long long)n, got, ref_x,
                          tol + act_err);
                free_act(&a);
                free(w);
                free(what);
            }
        }
    }
}

/* ---- SIMD levels against the scalar reference ---- */

Test(quant, simd_vec_dot_matches_scalar)
{
    simd_levels_or_skip();
    seed_rng();
    for (int l = 0; l < N_SIMD_LEVELS; l++)
        if (cpu_has_level(l))
            check_vec_dot_vs_scalar(k_simd_levels[l].table, k_simd_levels[l].name);
}

Test(quant, simd_dequantize_matches_scalar_exactly)
{
    simd_levels_or_skip();
    seed_rng();
    for (int l = 0; l < N_SIMD_LEVELS; l++)
        if (cpu_has_level(l))
            check_dequantize_vs_scalar(k_simd_levels[l].table, k_simd_levels[l].name);
}

Test(quant, gemv_gemm_match_vec_dot)
{
    seed_rng();
    for (int t = 0; t < N_WEIGHT_TYPES; t++) {
        check_rows(mp_type_ops_scalar(k_weight_types[t]), "scalar");
        check_rows(mp_type_ops_get(k_weight_types[t]), mp_kernels_isa());
        for (int l = 0; l < N_SIMD_LEVELS; l++)
            if (cpu_has_level(l))
                check_rows(k_simd_levels[l].table(k_weight_types[t]), k_simd_levels[l].name);
    }
}

/* MXFP4 at every E8M0 exponent, every level (check_mxfp4_exponents) */
Test(quant, mxfp4_every_exponent)
{
    seed_rng();
    check_mxfp4_exponents(mp_type_ops_scalar(MP_TYPE_MXFP4), "scalar");
    for (int l = 0; l < N_SIMD_LEVELS; l++)
        if (cpu_has_level(l))
            check_mxfp4_exponents(k_simd_levels[l].table(MP_TYPE_MXFP4), k_simd_levels[l].name);
}

/* The AVX-512 level's whole-call GEMMs of Q4_0 and Q8_0 (activation rows in pairs) equal its vec_dot
 * bit for bit, on row and activation counts around their groups and passes, odd counts included. */
Test(quant, avx512_q8_gemms_equal_vec_dot)
{
    if (!mp_type_ops_isa(MP_TYPE_Q8_0, "avx512"))
        cr_skip_test("this CPU has no AVX-512 (isa %s): quant_avx512_emul runs these GEMMs' logic", mp_kernels_isa());
    seed_rng();
    check_gemm_bits(mp_type_ops_isa(MP_TYPE_Q4_0, "avx512"), "avx512");
    check_gemm_bits(mp_type_ops_isa(MP_TYPE_Q8_0, "avx512"), "avx512");
}

/* The AMX level's tile GEMMs (Q4_0, Q5_0, IQ4_NL, MXFP4, Q8_0, Q4_K, Q5_K, Q6_K, IQ4_XS) against
 * the scalar vec_dot, on the hardware; the same code's logic runs everywhere with AVX-512 in
 * quant_amx_emul. */
Test(quant, amx_tile_gemms_match_scalar)
{
    if (!mp_type_ops_isa(MP_TYPE_Q4_K, "amx"))
        cr_skip_test("this CPU (or its OS) gives no AMX tiles (isa %s): the native tile GEMMs are not run here; "
                     "quant_amx_emul runs their logic", mp_kernels_isa());
    seed_rng();
    const int types[] = {MP_TYPE_Q4_0, MP_TYPE_Q5_0, MP_TYPE_IQ4_NL, MP_TYPE_MXFP4, MP_TYPE_Q8_0,
                         MP_TYPE_Q4_K, MP_TYPE_Q5_K, MP_TYPE_Q6_K,   MP_TYPE_IQ4_XS};
    for (int t = 0; t < (int)(sizeof types / sizeof types[0]); t++) {
        const mp_type_ops *ops = mp_type_ops_isa(types[t], "amx"), *avx512 = mp_type_ops_isa(types[t], "avx512");
        cr_assert_neq(ops, avx512, "amx %s: its tile GEMM failed the check at start (%s)", mp_type_name(types[t]),
                      mp_kernels_isa_warning() ? mp_kernels_isa_warning() : "no warning");
        cr_assert(ops->gemm, "amx %s: no tile GEMM", mp_type_name(types[t]));
        cr_assert_eq(ops->vec_dot, avx512->vec_dot, "amx %s: decode runs avx512's dot", mp_type_name(types[t]));
        check_tile_gemm(ops, "amx");
    }
}

/* ---- quantizers: error bounds of the K-quants, round trips ---- */

static double rel_rms_error(int type, const float *x, int64_t n)
{
    const mp_type_ops *ops = mp_type_ops_scalar(type);
    uint8_t *q = malloc(mp_type_row_bytes(type, n));
    float *y = malloc(n * sizeof(float));
    ops->quantize_row(x, q, n);
    ops->dequantize_row(q, y, n);
    double se = 0, sx = 0;
    for (int64_t i = 0; i < n; i++) {
        se += ((double)y[i] - x[i]) * ((double)y[i] - x[i]);
        sx += (double)x[i] * x[i];
    }
    free(q);
    free(y);
    return sqrt(se / sx);
}

/* The baseline a scale search must beat: per group of `group` elements, asymmetric 4-bit
 * (min..max over 15 steps, min clamped to <= 0 as Q4_K's) or symmetric 6-bit (amax over 31
 * steps), scales kept as exact floats. */
static double naive_rel_rms_error(const float *x, int64_t n, int group, int asym)
{
    double se = 0, sx = 0;
    for (int64_t g = 0; g < n / group; g++) {
        const float *v = x + g * group;
        float lo = 0, hi = 0, amax = 0;
        for (int i = 0; i < group; i++) {
            lo = fminf(lo, v[i]);
            hi = fmaxf(hi, v[i]);
            amax = fmaxf(amax, fabsf(v[i]));
        }
        for (int i = 0; i < group; i++) {
            double y;
            if (asym) {
                const double s = (hi - lo) / 15.0;
                y = s > 0 ? lo + s * nearbyint((v[i] - lo) / s) : lo;
            } else {
                const double s = amax / 31.0;
                y = s > 0 ? s * nearbyint(v[i] / s) : 0;
            }
            se += (y - v[i]) * (y - v[i]);
            sx += (double)v[i] * v[i];
        }
    }
    return sqrt(se / sx);
}

Test(quant, kquant_error_in_expected_range)
{
    seed_rng();
    const int64_t n = 256 * 64;
    float *x = malloc(n * sizeof(float));
    for (int64_t i = 0; i < n; i++)
        x[i] = rnd_gauss() * 0.02f; /* the scale of real weight matrices */
    /* Gaussian data. Uniform-rounding theory: RMS error = step / sqrt(12). Q4_K: step = range of
     * 32 samples (~4 sigma) / 15 -> 0.077 sigma before the scale search improves on it; Q6_K:
     * step = 2 * max of 16 samples (~1.8 sigma) / 63 -> 0.017 sigma; Q4_0 (no min, 32 per
     * block, max maps to -8) -> ~0.1 sigma; Q8_0 -> ~0.0045 sigma. Bounds leave ~20% slack
     * over those figures, and the K-quants must beat the simpler format of their width. */
    const double e_q4_K = rel_rms_error(MP_TYPE_Q4_K, x, n);
    const double e_q5_K = rel_rms_error(MP_TYPE_Q5_K, x, n);
    const double e_q2_K = rel_rms_error(MP_TYPE_Q2_K, x, n), e_q3_K = rel_rms_error(MP_TYPE_Q3_K, x, n);
    const double e_q6_K = rel_rms_error(MP_TYPE_Q6_K, x, n);
    const double e_q4_0 = rel_rms_error(MP_TYPE_Q4_0, x, n);
    const double e_q8_0 = rel_rms_error(MP_TYPE_Q8_0, x, n);
    cr_log_info("relative RMS error: Q4_K %.4f Q6_K %.4f Q4_0 %.4f Q8_0 %.4f", e_q4_K, e_q6_K, e_q4_0, e_q8_0);
    cr_assert(e_q4_K < 0.085, "seed %llu: Q4_K relative RMS error %.4f", (unsigned long long)g_seed, e_q4_K);
    cr_assert(e_q4_K > 0.02, "seed %llu: Q4_K error %.4f too small for 4 bits: not quantizing?",
              (unsigned long long)g_seed, e_q4_K);
    /* Q5_K: Q4_K's design with twice the levels: about half Q4_K's error, and above Q6_K's */
    cr_log_info("relative RMS error: Q5_K %.4f Q3_K %.4f Q2_K %.4f", e_q5_K, e_q3_K, e_q2_K);
    /* Q3_K (8 levels, symmetric, groups of 16) about twice Q4_K's error, Q2_K (4 levels with a min)
     * about twice Q3_K's: bounds ~20 % over the measured 0.144 and 0.264 */
    cr_assert(e_q3_K > e_q4_K && e_q3_K < 0.17, "seed %llu: Q3_K %.4f (Q4_K %.4f)", (unsigned long long)g_seed,
              e_q3_K, e_q4_K);
    cr_assert(e_q2_K > e_q3_K && e_q2_K < 0.32, "seed %llu: Q2_K %.4f (Q3_K %.4f)", (unsigned long long)g_seed,
              e_q2_K, e_q3_K);
    cr_assert(e_q5_K < 0.6 * e_q4_K, "seed %llu: Q5_K %.4f against Q4_K %.4f", (unsigned long long)g_seed, e_q5_K,
              e_q4_K);
    cr_assert(e_q5_K > e_q6_K, "seed %llu: Q5_K %.4f below Q6_K %.4f", (unsigned long long)g_seed, e_q5_K, e_q6_K);
    cr_assert(e_q6_K < 0.02, "seed %llu: Q6_K relative RMS error %.4f", (unsigned long long)g_seed, e_q6_K);
    cr_assert(e_q6_K > 0.004, "seed %llu: Q6_K error %.4f too small for 6 bits", (unsigned long long)g_seed, e_q6_K);
    cr_assert(e_q4_K < e_q4_0, "seed %llu: Q4_K %.4f not better than Q4_0 %.4f", (unsigned long long)g_seed,
              e_q4_K, e_q4_0);
    cr_assert(e_q8_0 < 0.006, "seed %llu: Q8_0 relative RMS error %.4f", (unsigned long long)g_seed, e_q8_0);
    /* the scale search must beat plain min/max rounding even though that baseline keeps its
     * sub-block scales in full float precision while ours are quantized to 6 / 8 bits */
    const double naive_q4 = naive_rel_rms_error(x, n, 32, 1), naive_q6 = naive_rel_rms_error(x, n, 16, 0);
    cr_log_info("min/max rounding with float scales: 4-bit asymmetric %.4f, 6-bit symmetric %.4f", naive_q4, naive_q6);
    cr_assert(e_q4_K < naive_q4, "seed %llu: Q4_K %.4f vs min/max rounding %.4f", (unsigned long long)g_seed,
              e_q4_K, naive_q4);
    cr_assert(e_q6_K < naive_q6, "seed %llu: Q6_K %.4f vs max rounding %.4f", (unsigned long long)g_seed,
              e_q6_K, naive_q6);
    /* the other blocks of 32: a fifth bit halves the error of Q4_0 and Q4_1 (Q4_1's step is the
     * block's range / 15, ~4.1 sigma / 15 -> 0.079 sigma); IQ4_NL's non-uniform levels and scale
     * search beat Q4_0; MXFP4's power-of-two scale and E2M1 levels lose to IQ4_NL */
    const double e_q4_1 = rel_rms_error(MP_TYPE_Q4_1, x, n), e_q5_0 = rel_rms_error(MP_TYPE_Q5_0, x, n);
    const double e_q5_1 = rel_rms_error(MP_TYPE_Q5_1, x, n), e_iq4 = rel_rms_error(MP_TYPE_IQ4_NL, x, n);
    const double e_mx = rel_rms_error(MP_TYPE_MXFP4, x, n), e_xs = rel_rms_error(MP_TYPE_IQ4_XS, x, n);
    cr_log_info("relative RMS error: Q4_1 %.4f Q5_0 %.4f Q5_1 %.4f IQ4_NL %.4f MXFP4 %.4f", e_q4_1, e_q5_0, e_q5_1,
                e_iq4, e_mx);
    /* measured 0.078 / 0.042 / 0.038 / 0.074 / 0.115 against Q4_0's 0.086; bounds ~20 % over */
    const unsigned long long sd = (unsigned long long)g_seed;
    cr_assert(e_q4_1 < e_q4_0 && e_q4_1 < 0.095, "seed %llu: Q4_1 %.4f (Q4_0 %.4f)", sd, e_q4_1, e_q4_0);
    cr_assert(e_q5_0 < 0.6 * e_q4_0 && e_q5_0 > 0.03, "seed %llu: Q5_0 %.4f (Q4_0 %.4f)", sd, e_q5_0, e_q4_0);
    cr_assert(e_q5_1 < 0.6 * e_q4_1 && e_q5_1 > 0.025, "seed %llu: Q5_1 %.4f (Q4_1 %.4f)", sd, e_q5_1, e_q4_1);
    cr_assert(e_iq4 < 0.95 * e_q4_0, "seed %llu: IQ4_NL %.4f not better than Q4_0 %.4f", sd, e_iq4, e_q4_0);
    cr_assert(e_mx > e_iq4 && e_mx < 0.14, "seed %llu: MXFP4 %.4f (IQ4_NL %.4f)", sd, e_mx, e_iq4);
    /* IQ4_XS: IQ4_NL's blocks with the scales quantized to 6 bits under one f16 (measured 0.0751
     * against 0.0746) */
    cr_assert(e_xs < 1.1 * e_iq4 && e_xs < e_q4_0, "seed %llu: IQ4_XS %.4f (IQ4_NL %.4f, Q4_0 %.4f)", sd, e_xs, e_iq4,
              e_q4_0);
    /* offset data (all positive sub-blocks) exercises Q4_K's mins */
    for (int64_t i = 0; i < n; i++)
        x[i] = 0.05f + fabsf(rnd_gauss()) * 0.02f;
    const double e_pos = rel_rms_error(MP_TYPE_Q4_K, x, n);
    cr_assert(e_pos < 0.03, "seed %llu: Q4_K on positive data %.4f", (unsigned long long)g_seed, e_pos);
    free(x);
}

Test(quant, quantize_zero_and_constant_rows)
{
    const int64_t n = 512;
    float *x = calloc(n, sizeof(float)), *y = malloc(n * sizeof(float));
    uint8_t *q = malloc(mp_type_row_bytes(MP_TYPE_F32, n));
    for (int t = 0; t < N_WEIGHT_TYPES; t++) {
        const mp_type_ops *ops = mp_type_ops_scalar(k_weight_types[t]);
        for (int pass = 0; pass < 2; pass++) {
            for (int64_t i = 0; i < n; i++)
                x[i] = pass == 0 ? 0.0f : -0.25f;
            ops->quantize_row(x, q, n);
            ops->dequantize_row(q, y, n);
            for (int64_t i = 0; i < n; i++)
                cr_assert(fabsf(y[i] - x[i]) <= 0.25f * 0x1p-9f, "%s constant %g: elem %lld -> %g",
                          mp_type_name(ops->type), x[i], (long long)i, y[i]);
        }
    }
    free(x);
    free(y);
    free(q);
}

Test(quant, q8_K_activation_layout)
{
    seed_rng();
    const int64_t n = 512;
    float x[512], y[512];
    for (int64_t i = 0; i < n; i++)
        x[i] = rnd_gauss();
    x[7] = -50.0f; /* the extreme of block 0 is negative: must map to -127, not -128 */
    uint8_t q[2 * sizeof(mp_block_q8_K)];
    mp_quantize_row_q8_K(x, q, n);
    mp_dequantize_row_q8_K(q, y, n);
    for (int b = 0; b < 2; b++) {
        mp_block_q8_K blk;
        memcpy(&blk, q + b * sizeof(blk), sizeof(blk));
        float amax = 0;
        for (int i = 0; i < 256; i++)
            amax = fmaxf(amax, fabsf(x[256 * b + i]));
        for (int g = 0; g < 16; g++) {
            int s = 0;
            for (int i = 0; i < 16; i++) {
                cr_assert(blk.qs[16 * g + i] >= -127, "seed %llu: quant -128 emitted", (unsigned long long)g_seed);
                s += blk.qs[16 * g + i];
            }
            cr_assert_eq(blk.bsums[g], s, "seed %llu: bsums[%d] of block %d", (unsigned long long)g_seed, g, b);
        }
        for (int i = 0; i < 256; i++)
            cr_assert(fabsf(y[256 * b + i] - x[256 * b + i]) <= amax / 127.0f * 0.5001f,
                      "seed %llu: Q8_K elem %d: %g vs %g", (unsigned long long)g_seed, 256 * b + i,
                      y[256 * b + i], x[256 * b + i]);
    }
    mp_block_q8_K blk0;
    memcpy(&blk0, q, sizeof(blk0));
    cr_assert_eq(blk0.qs[7], -127);
}

/* ---- f16 / bf16 conversions ---- */

static double f16_value(uint16_t h) /* independent decoder, in double */
{
    const int e = (h >> 10) & 0x1F, m = h & 0x3FF;
    const double s = (h & 0x8000) ? -1.0 : 1.0;
    if (e == 0)
        return s * ldexp(m, -24);
    if (e == 31)
        return m ? NAN : s * INFINITY;
    return s * ldexp(1024 + m, e - 25);
}

Test(quant, f16_round_trip_all_patterns)
{
    for (uint32_t h = 0; h < 65536; h++) {
        const float f = mp_f16_to_f32((mp_f16)h);
        const double want = f16_value((uint16_t)h);
        if (isnan(want)) {
            cr_assert(isnan(f), "f16 0x%04x must decode to NaN", h);
            const mp_f16 back = mp_f32_to_f16(f);
            cr_assert((back & 0x7E00) == 0x7E00 && (back & 0x8000) == (h & 0x8000),
                      "f16 NaN 0x%04x -> 0x%04x is not a quiet NaN of the same sign", h, back);
            cr_assert_eq(back & 0x1FF, h & 0x1FF, "NaN payload of 0x%04x lost", h);
            continue;
        }
        cr_assert((double)f == want && !signbit(f) == !signbit(want), "f16 0x%04x -> %a want %a", h,
                  (double)f, want);
        cr_assert_eq(mp_f32_to_f16(f), h, "f16 0x%04x does not round-trip", h);
    }
}

/* f32 -> f16 must pick the nearest f16, ties to the even encoding; checked by brute force on
 * random bit patterns and on every midpoint between neighbouring f16 values. */
static void check_f32_to_f16(float f)
{
    const mp_f16 h = mp_f32_to_f16(f);
    if (isnan(f)) {
        cr_assert((h & 0x7C00) == 0x7C00 && (h & 0x3FF), "NaN %a -> 0x%04x", (double)f, h);
        return;
    }
    const double v = f16_value(h), x = f;
    cr_assert(!signbit(v) == !signbit(x), "%a -> 0x%04x: sign", x, h);
    const double ax = fabs(x);
    const uint16_t mag = h & 0x7FFF;
    if (mag == 0x7C00) { /* Inf: only if x >= 65520 (the midpoint above the largest finite) */
        cr_assert(ax >= 65520.0, "%a rounded to Inf", x);
        return;
    }
    cr_assert(ax < 65520.0, "%a should round to Inf, got 0x%04x", x, h);
    const double err = fabs(ax - fabs(v));
    const double lower = mag > 0 ? f16_value(mag - 1) : -1.0, upper = f16_value(mag + 1);
    const double err_lo = mag > 0 ? fabs(ax - lower) : INFINITY, err_hi = fabs(ax - upper);
    cr_assert(err <= err_lo && err <= err_hi, "%a -> 0x%04x is not the nearest f16", x, h);
    if (err == err_lo || err == err_hi)
        cr_assert((mag & 1) == 0, "%a is a tie and 0x%04x is not even", x, h);
}

Test(quant, f32_to_f16_rounds_to_nearest_even)
{
    seed_rng();
    for (int i = 0; i < 1000000; i++) {
        const uint32_t u = (uint32_t)rnd_u64();
        float f;
        memcpy(&f, &u, 4);
        check_f32_to_f16(f);
        check_f32_to_f16(f * 0x1p-100f); /* lots of subnormal/zero results */
    }
    for (uint32_t h = 0; h < 0x7C00; h++) { /* every midpoint and its neighbours */
        const double mid = (f16_value((uint16_t)h) + f16_value((uint16_t)(h + 1))) / 2;
        const float f = (float)mid; /* exact: midpoints need only 12 significant bits */
        check_f32_to_f16(f);
        check_f32_to_f16(-f);
        check_f32_to_f16(nextafterf(f, 0.0f));
        check_f32_to_f16(nextafterf(f, INFINITY));
    }
    cr_assert_eq(mp_f32_to_f16(INFINITY), 0x7C00);
    cr_assert_eq(mp_f32_to_f16(-INFINITY), 0xFC00);
    cr_assert_eq(mp_f32_to_f16(-0.0f), 0x8000);
    cr_assert_eq(mp_f32_to_f16(65504.0f), 0x7BFF);
    cr_assert_eq(mp_f32_to_f16(65520.0f), 0x7C00);
    cr_assert_eq(mp_f32_to_f16(0x1p-25f), 0x0000);                  /* tie to even: 0 */
    cr_assert_eq(mp_f32_to_f16(0x1.8p-24f), 0x0002);                /* tie 1.5 -> 2 */
    cr_assert_eq(mp_f32_to_f16(1.0f + 0x1p-11f), 0x3C00);           /* tie -> even 1.0 */
    cr_assert_eq(mp_f32_to_f16(1.0f + 0x1.8p-10f), 0x3C02);         /* tie -> even */
}

Test(quant, bf16_round_trip_and_rounding)
{
    seed_rng();
    for (uint32_t h = 0; h < 65536; h++) {
        const float f = mp_bf16_to_f32((mp_bf16)h);
        uint32_t u;
        memcpy(&u, &f, 4);
        cr_assert_eq(u, h << 16, "bf16 0x%04x decodes to 0x%08x", h, u);
        if (isnan(f))
            cr_assert_eq(mp_f32_to_bf16(f), h | 0x40, "bf16 NaN 0x%04x must come back quiet", h);
        else
            cr_assert_eq(mp_f32_to_bf16(f), h, "bf16 0x%04x does not round-trip", h);
    }
    for (int i = 0; i < 1000000; i++) {
        const uint32_t u = (uint32_t)rnd_u64();
        float f;
        memcpy(&f, &u, 4);
        const mp_bf16 h = mp_f32_to_bf16(f);
        if (isnan(f)) {
            cr_assert(isnan(mp_bf16_to_f32(h)), "seed %llu: NaN 0x%08x -> 0x%04x", (unsigned long long)g_seed, u, h);
            continue;
        }
        /* truncation is one of the two neighbours; the remainder decides, ties to even */
        const uint32_t trunc = u >> 16, rem = u & 0xFFFF;
        const uint32_t want = rem > 0x8000 || (rem == 0x8000 && (trunc & 1)) ? trunc + 1 : trunc;
        cr_assert_eq(h, want, "seed %llu: f32 0x%08x -> bf16 0x%04x want 0x%04x", (unsigned long long)g_seed,
                     u, h, want);
    }
    cr_assert_eq(mp_f32_to_bf16(3.4028235e38f), 0x7F80, "largest float rounds up to Inf");
    cr_assert_eq(mp_f32_to_bf16(1.0f + 0x1p-8f), 0x3F80, "tie to even (down)");
    cr_assert_eq(mp_f32_to_bf16(1.0f + 0x1.8p-7f), 0x3F82, "tie to even (up)");
}

/* ---- type table and dispatch ---- */

/* Every type the loader takes has the GPU's row size and activation format (kernels/cuda_sizes.h,
 * which the CUDA kernels and the budget read): a type added to the CPU table alone fails here, in
 * CI, rather than in a GPU step. Q8_K is an activation format, no weight. */
Test(quant, every_loaded_type_has_the_gpu_sizes)
{
    int n = 0;
    for (int t = 0; t < 64; t++) {
        if (!mp_type_supported(t))
            continue;
        n++;
        cr_assert_eq(mp_cuda_vec_dot_type(t), mp_type_ops_scalar(t)->vec_dot_type, "%s", mp_type_name(t));
        for (int64_t k = 1; k <= 3; k++) {
            const int64_t elems = k * mp_type_block_elems(t);
            cr_assert_eq(mp_cuda_row_bytes(t, elems), mp_type_row_bytes(t, elems), "%s", mp_type_name(t));
        }
    }
    cr_assert_eq(n, N_WEIGHT_TYPES, "the weight types of quant_check.c");
    cr_assert_eq(mp_cuda_vec_dot_type(MP_TYPE_Q8_K), -1);
}

Test(quant, type_table)
{
    struct { int type; const char *name; int64_t elems; size_t bytes; int weight; } want[] = {
        {MP_TYPE_F32, "F32", 1, 4, 1},      {MP_TYPE_F16, "F16", 1, 2, 1},
        {MP_TYPE_BF16, "BF16", 1, 2, 1},    {MP_TYPE_Q4_0, "Q4_0", 32, 18, 1},
        {MP_TYPE_Q4_1, "Q4_1", 32, 20, 1},  {MP_TYPE_Q5_0, "Q5_0", 32, 22, 1},
        {MP_TYPE_Q5_1, "Q5_1", 32, 24, 1},  {MP_TYPE_IQ4_NL, "IQ4_NL", 32, 18, 1},
        {MP_TYPE_MXFP4, "MXFP4", 32, 17, 1}, {MP_TYPE_IQ4_XS, "IQ4_XS", 256, 136, 1},
        {MP_TYPE_Q8_0, "Q8_0", 32, 34, 1},  {MP_TYPE_Q4_K, "Q4_K", 256, 144, 1},
        {MP_TYPE_Q2_K, "Q2_K", 256, 84, 1},  {MP_TYPE_Q3_K, "Q3_K", 256, 110, 1},
        {MP_TYPE_Q5_K, "Q5_K", 256, 176, 1}, {MP_TYPE_Q6_K, "Q6_K", 256, 210, 1},
        {MP_TYPE_Q8_K, "Q8_K", 256, 292, 0},
    };
    for (size_t i = 0; i < sizeof(want) / sizeof(want[0]); i++) {
        cr_assert_eq(mp_type_block_elems(want[i].type), want[i].elems, "%s elems", want[i].name);
        cr_assert_eq(mp_type_block_bytes(want[i].type), want[i].bytes, "%s bytes", want[i].name);
        cr_assert_str_eq(mp_type_name(want[i].type), want[i].name);
        cr_assert_eq(mp_type_supported(want[i].type), want[i].weight, "%s supported", want[i].name);
        cr_assert_eq(mp_type_from_name(want[i].name), want[i].type);
        cr_assert_eq(mp_type_row_bytes(want[i].type, 3 * want[i].elems), 3 * want[i].bytes);
        if (want[i].elems > 1)
            cr_assert_eq(mp_type_row_bytes(want[i].type, want[i].elems + 1), 0, "%s partial block", want[i].name);
        if (want[i].weight) {
            cr_assert(mp_type_ops_scalar(want[i].type) && mp_type_ops_get(want[i].type), "%s ops", want[i].name);
            cr_assert_eq(mp_type_ops_get(want[i].type)->type, want[i].type);
        }
    }
    cr_assert_eq(mp_type_from_name("q4_k"), MP_TYPE_Q4_K);
    cr_assert_eq(mp_type_from_name("Q4_"), -1);
    cr_assert_eq(mp_type_from_name("IQ2_XXS"), -1);
    cr_assert_eq(mp_type_from_name("iq4_nl"), MP_TYPE_IQ4_NL);
    cr_assert_eq(mp_type_from_name(NULL), -1);
    cr_assert_null(mp_type_name(4));
    /* the one list messages print: every weight type's name, not the activation-only Q8_K */
    int listed = 0;
    for (size_t i = 0; i < sizeof(want) / sizeof(want[0]); i++) {
        const char *at = strstr(mp_type_names(), want[i].name);
        cr_assert_eq(at != NULL, want[i].weight != 0, "%s in '%s'", want[i].name, mp_type_names());
        listed += want[i].weight;
    }
    cr_assert_eq(listed, N_WEIGHT_TYPES);
    cr_assert_eq(mp_type_block_bytes(99), 0);
    cr_assert_eq(mp_type_row_bytes(99, 32), 0);
    cr_assert_eq(mp_type_row_bytes(MP_TYPE_Q4_K, -256), 0);
    cr_assert_eq(mp_type_row_bytes(MP_TYPE_F32, INT64_MAX), 0, "overflow must give 0");
    cr_assert_null(mp_type_ops_get(MP_TYPE_Q8_K), "Q8_K has no weight kernels");
    cr_assert_eq(mp_quantize_activation(MP_TYPE_Q4_K, NULL, NULL, 0), -1);
}

/* The highest level this CPU has, from an independent reading of cpuid (leaf 7 for VNNI, AMX). */
static const char *cpu_top_isa(void)
{
#if defined(__x86_64__)
    __builtin_cpu_init();
    const int avx2 = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") &&
                     __builtin_cpu_supports("f16c");
    unsigned eax, ebx, ecx = 0, edx;
    const int vnni = __get_cpuid_count(7, 0, &eax, &ebx, &ecx, &edx) && (ecx & (1u << 11));
    const int avx512 = avx2 && __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
                       __builtin_cpu_supports("avx512vl") && vnni;
    /* AMX-TILE and AMX-INT8 (leaf 7 EDX bits 24, 25), and Linux's grant of the tile state
     * (arch_prctl ARCH_REQ_XCOMP_PERM 0x1023, XFEATURE_XTILEDATA 18) */
    const int amx = avx512 && ((edx >> 24) & 3) == 3 && syscall(SYS_arch_prctl, 0x1023, 18) == 0;
    return amx ? "amx" : avx512 ? "avx512" : avx2 ? "avx2" : "scalar";
#else
    return "scalar";
#endif
}

/* The level dispatched when MP_ISA names none: the CPU's highest (amx where its tile GEMMs pass
 * their check at start, which quant's amx_tile_gemms_match_scalar holds them to) */
static const char *expected_isa(void)
{
    return cpu_top_isa();
}

/* The SIMD activation quantizers (Q8_K, Q8_0; used whenever the CPU has AVX2) against the scalar
 * references, byte for byte, on fresh random rows with what rounding and the scales make hard:
 * exact halves (a block whose amax is 127 has scale 1), values a hair either side of them, NaN
 * and infinite elements, signed zeros, subnormals, all-zero blocks and a huge amax. */
Test(quant, simd_activation_quantizers_match_reference)
{
    mp_kernels_set_isa_cap(NULL);
    mp_kernels_force_scalar(0);
    if (!strcmp(mp_kernels_isa(), "scalar"))
        cr_skip_test("this CPU has no AVX2: the activation quantizers run the reference only");
    seed_rng();
    const int types[] = {MP_TYPE_Q8_K, MP_TYPE_Q8_0};
    const int64_t n = 1024; /* 4 Q8_K blocks, 32 Q8_0 blocks */
    float *x = malloc(n * sizeof(float));
    uint8_t *ref = malloc(mp_type_row_bytes(MP_TYPE_Q8_K, n) + mp_type_row_bytes(MP_TYPE_Q8_0, n));
    uint8_t *got = malloc(mp_type_row_bytes(MP_TYPE_Q8_K, n) + mp_type_row_bytes(MP_TYPE_Q8_0, n));
    cr_assert(x && ref && got);
    for (int rep = 0; rep < 400; rep++) {
        const int pattern = rep % 8;
        for (int64_t i = 0; i < n; i++) {
            const float h = (float)((int)(rnd_u64() % 255) - 127) + 0.5f; /* an exact half in (-127, 127) */
            switch (pattern) {
            case 0: x[i] = rnd_gauss() * (float)(1.0 + rnd_uniform() * 100.0); break;
            case 1: x[i] = i % 32 == 0 ? 127.0f : h; break;
            case 2: x[i] = i % 32 == 0 ? -127.0f : nextafterf(h, rnd_u64() & 1 ? INFINITY : -INFINITY); break;
            case 3: x[i] = rnd_u64() % 17 == 0 ? NAN : rnd_gauss(); break;
            case 4: x[i] = rnd_u64() % 29 == 0 ? (rnd_u64() & 1 ? INFINITY : -INFINITY) : rnd_gauss(); break;
            case 5: x[i] = (i / 32) % 3 == 0 ? (rnd_u64() & 1 ? 0.0f : -0.0f) : rnd_gauss() * 1e-40f; break;
            case 6: x[i] = rnd_gauss() * 1e37f; break;
            default: x[i] = (float)(rnd_u64() % 255) - 127.0f; break;
            }
        }
        for (int t = 0; t < 2; t++) {
            const size_t bytes = mp_type_row_bytes(types[t], n);
            mp_kernels_force_scalar(1);
            cr_assert_eq(mp_quantize_activation(types[t], x, ref, n), 0);
            mp_kernels_force_scalar(0);
            cr_assert_eq(mp_quantize_activation(types[t], x, got, n), 0);
            for (size_t b = 0; b < bytes; b++)
                cr_assert_eq(got[b], ref[b], "seed %llu: %s pattern %d (%s): byte %zu of %zu: %u, reference %u",
                             (unsigned long long)g_seed, mp_type_name(types[t]), pattern, mp_kernels_isa(), b,
                             bytes, got[b], ref[b]);
        }
    }
    free(x);
    free(ref);
    free(got);
}

Test(quant, dispatch_follows_cpu_and_force_scalar)
{
    mp_kernels_set_isa_cap(NULL); /* this test is about the default; the cap has its own test */
    mp_kernels_force_scalar(0);
    cr_assert_str_eq(mp_kernels_isa(), expected_isa());
    mp_kernels_force_scalar(1);
    cr_assert_str_eq(mp_kernels_isa(), "scalar");
    for (int t = 0; t < N_WEIGHT_TYPES; t++)
        cr_assert_eq(mp_type_ops_get(k_weight_types[t]), mp_type_ops_scalar(k_weight_types[t]));
    mp_kernels_force_scalar(0);
    cr_assert_str_eq(mp_kernels_isa(), expected_isa());
    for (int t = 0; t < N_WEIGHT_TYPES; t++)
        cr_assert_eq(mp_type_ops_get(k_weight_types[t]), mp_type_ops_isa(k_weight_types[t], expected_isa()));
}

/* One-row (decode) calls run the same kernels at amx as at avx512 (its table is avx512's with `gemm`
 * added), so cost files of the two compare for decode; every other level is its own. */
Test(quant, one_row_level)
{
    cr_assert_str_eq(mp_kernels_isa_one_row("amx"), "avx512");
    cr_assert_str_eq(mp_kernels_isa_one_row("avx512"), "avx512");
    cr_assert_str_eq(mp_kernels_isa_one_row("avx2"), "avx2");
    cr_assert_str_eq(mp_kernels_isa_one_row("scalar"), "scalar");
    cr_assert_null(mp_kernels_isa_one_row(NULL));
    const mp_type_ops *amx = mp_type_ops_isa(MP_TYPE_Q4_K, "amx"), *avx512 = mp_type_ops_isa(MP_TYPE_Q4_K, "avx512");
    if (amx) /* the rule's reason, where the CPU has both tables */
        cr_assert(amx->vec_dot == avx512->vec_dot && amx->vec_dot_multi == avx512->vec_dot_multi);
}

/* The ISA cap (MP_ISA, set at start through mp_kernels_set_isa_cap) caps the level; a level above
 * the CPU's leaves the CPU's best and says so, a name that is no level is refused; force_scalar
 * wins over the cap. mp_type_ops_isa refuses levels the CPU lacks. */
Test(quant, isa_cap)
{
    const char *levels[] = {"scalar", "avx2", "avx512", "amx"};
    const int n_levels = (int)(sizeof levels / sizeof levels[0]);
    const char *best = expected_isa(), *top = cpu_top_isa();
    int top_rank = 0;
    for (int i = 0; i < n_levels; i++)
        if (strcmp(levels[i], top) == 0)
            top_rank = i;
    for (int i = 0; i < n_levels; i++) {
        cr_assert_eq(mp_kernels_set_isa_cap(levels[i]), 0);
        const char *want = i <= top_rank ? levels[i] : top; /* a cap above the top: the top */
        cr_assert_str_eq(mp_kernels_isa(), want, "cap %s on a CPU whose top level is %s", levels[i], top);
        for (int t = 0; t < N_WEIGHT_TYPES; t++) {
            const mp_type_ops *ops = mp_type_ops_get(k_weight_types[t]);
            cr_assert_eq(ops, mp_type_ops_isa(k_weight_types[t], want), "cap %s: %s table", levels[i],
                         mp_type_name(k_weight_types[t]));
            cr_assert_eq(ops->vec_dot_type, mp_type_ops_scalar(k_weight_types[t])->vec_dot_type);
            cr_assert_eq(ops->quantize_row, mp_type_ops_scalar(k_weight_types[t])->quantize_row);
        }
        if (i > top_rank) {
            cr_assert_null(mp_type_ops_isa(MP_TYPE_Q4_K, levels[i]), "%s table on a CPU without it", levels[i]);
            const char *w = mp_kernels_isa_warning(); /* a cap the CPU lacks is not silent */
            cr_assert(w && strstr(w, "this CPU's best is") && strstr(w, levels[i]), "%s", w ? w : "(none)");
        } else {
            cr_assert_not_null(mp_type_ops_isa(MP_TYPE_Q4_K, levels[i]));
            cr_assert_null(mp_kernels_isa_warning(), "an honored cap needs no warning");
        }
    }
    cr_assert_eq(mp_kernels_set_isa_cap("avx1024"), -1, "a name that is no level");
    cr_assert_str_eq(mp_kernels_isa(), best, "a refused name sets no cap");
    cr_assert_null(mp_kernels_isa_warning());
    cr_assert_null(mp_type_ops_isa(MP_TYPE_Q4_K, "avx1024"));
    cr_assert_null(mp_type_ops_isa(MP_TYPE_Q4_K, NULL));
    cr_assert_null(mp_type_ops_isa(MP_TYPE_Q8_K, "scalar"), "Q8_K has no weight kernels");
    cr_assert_eq(mp_kernels_set_isa_cap("avx2"), 0);
    mp_kernels_force_scalar(1);
    cr_assert_str_eq(mp_kernels_isa(), "scalar", "force_scalar wins over the cap");
    mp_kernels_force_scalar(0);
    cr_assert_eq(mp_kernels_set_isa_cap(NULL), 0);
    cr_assert_str_eq(mp_kernels_isa(), best);
}
