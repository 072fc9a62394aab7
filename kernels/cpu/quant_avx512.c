/* kernels/cpu/quant_avx512.c — AVX-512 (F + BW + VL + VNNI) kernels: vec_dot for every weight
 * type, the multi-row dots for GEMM tiles, and dequantize_row.
 *
 * Only called after dispatch.c saw avx512f, avx512bw, avx512vl and avx512vnni (the Sapphire
 * Rapids production host has all four; a CPU without VNNI keeps the AVX2 table). Built with
 * -ffp-contract=off: the dequantizers issue exactly the scalar reference's float operations (mul,
 * then sub), so they are bit-identical to it; the dot products use explicit FMAs.
 *
 * What AVX-512 buys over quant_avx2.c: 64-byte vectors for the float types and the K-quants (a
 * Q8_K activation chunk of 64 against 64 weights unpacked from a broadcast 32-byte load, a Q6_K
 * quarter block; Q4_K's and Q6_K's one-row kernels unpack in the order of the block's bytes against
 * an activation permuted to match, which their GEMVs do once a call) and VNNI, which fuses the integer multiply-adds: vpdpwssd (s16 x s16 pairs into
 * int32) applies the K-quant sub-block scales and accumulates in one instruction, vpdpbusd (u8 x
 * s8, four products into an int32 lane) replaces maddubs + madd in the blocks of 32's dots and
 * maddubs in the K-quant ones (whose sums pack two chunks into one vpdpwssd). The blocks of 32 put
 * two dots in a vector (two weight rows, or two activation rows), not two blocks of one dot: two
 * blocks of one dot cost more in lane inserts and scale blends than they saved
 * (bench/NOTES-kernels.md), two dots share the activation's load and bias and convert four scales
 * at once.
 *
 * Integer invariants:
 *  - the blocks of 32: the weights go in unsigned (the level plus 128, 16 or 8, or q as stored)
 *    and each block's sums start at minus that offset times the activation's sums of four, so
 *    vpdpbusd gives the exact signed sums (4 products of at most 255 * 127 in an int32); the Q4_0 /
 *    Q8_0 GEMM moves each weight's sign onto its activation instead (|w| as u8, 128 for a Q8_0
 *    weight of -128 is right; activation quants are in [-127, 127], quant_impl.h): the same sums;
 *  - Q4_K (q in 0..15), Q5_K (q in 0..31) and Q6_K (u = q + 32 in 0..63): vpdpbusd sums of 4
 *    products are at most 4 * 15 * 127 = 7620, 4 * 31 * 127 = 15748 and 4 * 63 * 127 = 32004,
 *    so packs (signed saturation to int16) keeps them exact, for the same reason.
 * No alignment is assumed: every vector load is unaligned, and tails are scalar (no masked
 * loads, so nothing is ever read past a row's last byte).
 *
 * Test-only build: with MP_AVX512_EMULATED defined, the intrinsics come from SIMDe's portable
 * implementation (tests/unit/simde_avx512.h) and the table is exported as
 * mp_type_ops_avx512_emulated, so that tests/unit/test_quant_avx512_emul.c can run this file's
 * logic on a CPU without AVX-512. The production build never defines it.
 */
#ifdef MP_AVX512_EMULATED
#include "simde_avx512.h"
#define mp_type_ops_avx512 mp_type_ops_avx512_emulated /* renames quant_impl.h's prototype too */
#else
#include <immintrin.h>
#endif
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/cpu/quant_impl.h"
#include "kernels/cpu/four_rows.h"

/* The row loops take n_x (activation rows) as a parameter; inlining them into each caller makes
 * vec_dot the n_x = 1 specialization, with its accumulators in registers instead of an array
 * on the stack (which cost a store-to-load round trip per block: Q8_0 ran 10% below AVX2). */
#define ALWAYS_INLINE inline __attribute__((always_inline))

static inline float hsum256(__m256 v)
{
    __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    s = _mm_add_ps(s, _mm_movehl_ps(s, s));
    s = _mm_add_ss(s, _mm_movehdup_ps(s));
    return _mm_cvtss_f32(s);
}

/* (extractf64x4 is AVX-512F; the 32x8 form would need DQ) */
static inline float hsum512(__m512 v)
{
    const __m256 hi = _mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(v), 1));
    return hsum256(_mm256_add_ps(_mm512_castps512_ps256(v), hi));
}

/* one f16 scale through the F16C instruction that AVX-512F implies */
static inline float f16(mp_f16 h)
{
    return _mm_cvtss_f32(_mm_cvtph_ps(_mm_cvtsi32_si128(h)));
}

static inline __m512i loadu512(const void *p)
{
    return _mm512_loadu_si512(p);
}

static inline __m256i loadu256(const void *p)
{
    return _mm256_loadu_si256((const __m256i *)p);
}

static inline __m128i loadu128(const void *p)
{
    return _mm_loadu_si128((const __m128i *)p);
}

/* [lo | hi] as one 512-bit vector */
static inline __m512i join256(__m256i lo, __m256i hi)
{
    return _mm512_inserti64x4(_mm512_castsi256_si512(lo), hi, 1);
}

/* [v | 0] */
static inline __m512i zext256(__m256i v)
{
    return _mm512_inserti64x4(_mm512_setzero_si512(), v, 0);
}

/* ---- float weights (activation row is F32) ---- */

static float vec_dot_f32(int64_t n, const void *w, const void *x)
{
    const uint8_t *pw = w; /* (n,) f32, possibly unaligned */
    const float *px = x;   /* (n,) f32 */
    __m512 acc0 = _mm512_setzero_ps(), acc1 = acc0, acc2 = acc0, acc3 = acc0;
    int64_t i = 0;
    for (; i + 64 <= n; i += 64) {
        mp_prefetch_weights(pw + 4 * i, 256);
        acc0 = _mm512_fmadd_ps(_mm512_loadu_ps((const float *)(pw + 4 * i)), _mm512_loadu_ps(px + i), acc0);
        acc1 = _mm512_fmadd_ps(_mm512_loadu_ps((const float *)(pw + 4 * i + 64)), _mm512_loadu_ps(px + i + 16), acc1);
        acc2 = _mm512_fmadd_ps(_mm512_loadu_ps((const float *)(pw + 4 * i + 128)), _mm512_loadu_ps(px + i + 32), acc2);
        acc3 = _mm512_fmadd_ps(_mm512_loadu_ps((const float *)(pw + 4 * i + 192)), _mm512_loadu_ps(px + i + 48), acc3);
    }
    for (; i + 16 <= n; i += 16)
        acc0 = _mm512_fmadd_ps(_mm512_loadu_ps((const float *)(pw + 4 * i)), _mm512_loadu_ps(px + i), acc0);
    float sum = hsum512(_mm512_add_ps(_mm512_add_ps(acc0, acc1), _mm512_add_ps(acc2, acc3)));
    for (; i < n; i++) {
        float wi;
        memcpy(&wi, pw + 4 * i, sizeof(wi));
        sum += wi * px[i];
    }
    return sum;
}

static inline __m512 load_f16x16(const uint8_t *p)
{
    return _mm512_cvtph_ps(loadu256(p));
}

static inline __m512 load_bf16x16(const uint8_t *p)
{
    return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(loadu256(p)), 16));
}

#define DEFINE_VEC_DOT_HALF(NAME, LOAD16, TO_F32, HALF_T)                                           \
    static float NAME(int64_t n, const void *w, const void *x)                                      \
    {                                                                                               \
        const uint8_t *pw = w; /* (n,) 16-bit floats */                                             \
        const float *px = x;   /* (n,) f32 */                                                       \
        __m512 acc0 = _mm512_setzero_ps(), acc1 = acc0, acc2 = acc0, acc3 = acc0;                   \
        int64_t i = 0;                                                                              \
        for (; i + 64 <= n; i += 64) {                                                              \
            mp_prefetch_weights(pw + 2 * i, 128);                                                   \
            acc0 = _mm512_fmadd_ps(LOAD16(pw + 2 * i), _mm512_loadu_ps(px + i), acc0);              \
            acc1 = _mm512_fmadd_ps(LOAD16(pw + 2 * i + 32), _mm512_loadu_ps(px + i + 16), acc1);    \
            acc2 = _mm512_fmadd_ps(LOAD16(pw + 2 * i + 64), _mm512_loadu_ps(px + i + 32), acc2);    \
            acc3 = _mm512_fmadd_ps(LOAD16(pw + 2 * i + 96), _mm512_loadu_ps(px + i + 48), acc3);    \
        }                                                                                           \
        for (; i + 16 <= n; i += 16)                                                                \
            acc0 = _mm512_fmadd_ps(LOAD16(pw + 2 * i), _mm512_loadu_ps(px + i), acc0);              \
        float sum = hsum512(_mm512_add_ps(_mm512_add_ps(acc0, acc1), _mm512_add_ps(acc2, acc3)));   \
        for (; i < n; i++) {                                                                        \
            HALF_T h;                                                                               \
            memcpy(&h, pw + 2 * i, sizeof(h));                                                      \
            sum += TO_F32(h) * px[i];                                                               \
        }                                                                                           \
        return sum;                                                                                 \
    }

DEFINE_VEC_DOT_HALF(vec_dot_f16, load_f16x16, mp_f16_to_f32, mp_f16)
DEFINE_VEC_DOT_HALF(vec_dot_bf16, load_bf16x16, mp_bf16_to_f32, mp_bf16)

#define DEFINE_DEQUANTIZE_HALF(NAME, LOAD16, TO_F32, HALF_T)                                        \
    static void NAME(const void *src, float *dst, int64_t n)                                        \
    {                                                                                               \
        const uint8_t *p = src; /* (n,) 16-bit floats */                                            \
        int64_t i = 0;                                                                              \
        for (; i + 16 <= n; i += 16)                                                                \
            _mm512_storeu_ps(dst + i, LOAD16(p + 2 * i));                                           \
        for (; i < n; i++) {                                                                        \
            HALF_T h;                                                                               \
            memcpy(&h, p + 2 * i, sizeof(h));                                                       \
            dst[i] = TO_F32(h);                                                                     \
        }                                                                                           \
    }

DEFINE_DEQUANTIZE_HALF(dequantize_f16, load_f16x16, mp_f16_to_f32, mp_f16)
DEFINE_DEQUANTIZE_HALF(dequantize_bf16, load_bf16x16, mp_bf16_to_f32, mp_bf16)

/* ---- Q4_0 and Q8_0 weights (activation row is Q8_0) ---- */

/* The 32 weights of block ib of a Q4_0 or Q8_0 row, as signed bytes in element order (Q4_0:
 * low nibbles are elements 0..15, q - 8). */
static inline __m256i q8_weights(const uint8_t *w, int is_q4, int64_t ib)
{
    if (is_q4) {
        const __m128i b = loadu128(((const mp_block_q4_0 *)w)[ib].qs);
        const __m256i both = _mm256_inserti128_si256(_mm256_castsi128_si256(b), _mm_srli_epi16(b, 4), 1);
        return _mm256_sub_epi8(_mm256_and_si256(both, _mm256_set1_epi8(0x0F)), _mm256_set1_epi8(8));
    }
    return loadu256(((const mp_block_q8_0 *)w)[ib].qs);
}

static inline float q8_weight_scale(const uint8_t *w, int is_q4, int64_t ib)
{
    return is_q4 ? f16(((const mp_block_q4_0 *)w)[ib].d) : f16(((const mp_block_q8_0 *)w)[ib].d);
}

/* ---- Q4_0 / Q8_0: the whole-call GEMM (mp_type_ops.gemm) ----
 *
 * A dot of one weight row and one activation row costs the multi-row dots (below) about 8 vector ops
 * a block for 32 products: ~40 G MAC/s a core against ~95 for the K-quants' GEMM tile (bench_kernels
 * --gemm, development VM). Here the activation rows go in pairs, one per 256-bit half, packed once
 * per call: each block's 32 quants of the two rows side by side and their scales as [d0 x 8 | d1 x
 * 8] floats, so that a block of a pair is one load, a masked negation (the weights' signs), one dot,
 * one scale product, a convert and an FMA. A half's eight lanes hold the same exact sums of four as
 * the pair vectors' (lo, hi) lanes of vec_dot (below), times the same float d_w d_x, even and odd
 * blocks in two chains as there, their sum summed by hsum256 in pair_sums' order: the results equal
 * vec_dot's bit for bit. */

static void vec_dot_multi_q4_0(int64_t n, const void *w, const void *x, size_t x_stride, int n_x, float *out);
static void vec_dot_multi_q8_0(int64_t n, const void *w, const void *x, size_t x_stride, int n_x, float *out);

#define Q8_PAIRS_PER_PASS 4 /* activation pairs packed at a time (one group): 32 KB for 2048 columns, in L1 */
#define Q8_PAIRS_PER_GROUP 4 /* pairs whose accumulators (2 each) stay in registers per weight row */

typedef struct q8_pair_block {
    _Alignas(64) int8_t q[64];  /* the pair's quants of one block: row 0's 32, row 1's 32 */
    _Alignas(64) float d[16];   /* [d0 x 8 | d1 x 8]; a pair's missing second row: 0 */
} q8_pair_block;

static void gemm_q8(int64_t n, const void *w, size_t row_bytes, int64_t n_rows, const void *x, size_t x_stride,
                    int64_t n_x, float *y, int64_t y_stride, int is_q4)
{
    const int64_t nb = n / MP_QK8_0;
    const size_t block_bytes = is_q4 ? sizeof(mp_block_q4_0) : sizeof(mp_block_q8_0);
    const uint8_t *wb = w, *xb = x;
    q8_pair_block *pk = aligned_alloc(64, (size_t)Q8_PAIRS_PER_PASS * (size_t)nb * sizeof *pk);
    if (!pk) { /* no room to pack: the multi-row dots, tile by tile */
        for (int64_t i0 = 0; i0 < n_x; i0 += MP_GEMM_TILE)
            for (int64_t r = 0; r < n_rows; r++) {
                float out[MP_GEMM_TILE];
                const int t = (int)(n_x - i0 < MP_GEMM_TILE ? n_x - i0 : MP_GEMM_TILE);
                (is_q4 ? vec_dot_multi_q4_0 : vec_dot_multi_q8_0)(n, wb + (size_t)r * row_bytes,
                                                                  xb + (size_t)i0 * x_stride, x_stride, t, out);
                for (int i = 0; i < t; i++)
                    y[(i0 + i) * y_stride + r] = out[i];
            }
        return;
    }
    const int64_t n_pairs = (n_x + 1) / 2;
    for (int64_t p0 = 0; p0 < n_pairs; p0 += Q8_PAIRS_PER_PASS) {
        const int64_t np = n_pairs - p0 < Q8_PAIRS_PER_PASS ? n_pairs - p0 : Q8_PAIRS_PER_PASS;
        for (int64_t p = 0; p < np; p++) {
            const int64_t t0 = 2 * (p0 + p);
            const bool two = t0 + 1 < n_x;
            const mp_block_q8_0 *a = (const mp_block_q8_0 *)(xb + (size_t)t0 * x_stride);
            const mp_block_q8_0 *c = two ? (const mp_block_q8_0 *)(xb + (size_t)(t0 + 1) * x_stride) : NULL;
            for (int64_t ib = 0; ib < nb; ib++) {
                q8_pair_block *k = &pk[p * nb + ib];
                const __m256i qa = loadu256(a[ib].qs), qc = two ? loadu256(c[ib].qs) : _mm256_setzero_si256();
                _mm512_store_si512(k->q, join256(qa, qc));
                const __m256 da = _mm256_set1_ps(f16(a[ib].d)), dc = _mm256_set1_ps(two ? f16(c[ib].d) : 0.0f);
                _mm512_store_ps(k->d, _mm512_castpd_ps(_mm512_insertf64x4(_mm512_castpd256_pd512(_mm256_castps_pd(da)),
                                                                          _mm256_castps_pd(dc), 1)));
            }
        }
        for (int64_t r = 0; r < n_rows; r++) {
            const uint8_t *wr = wb + (size_t)r * row_bytes;
            for (int64_t g = 0; g < np; g += Q8_PAIRS_PER_GROUP) {
                const int ng = (int)(np - g < Q8_PAIRS_PER_GROUP ? np - g : Q8_PAIRS_PER_GROUP);
                __m512 acc[Q8_PAIRS_PER_GROUP][2];
                for (int j = 0; j < Q8_PAIRS_PER_GROUP; j++)
                    acc[j][0] = acc[j][1] = _mm512_setzero_ps();
                for (int64_t ib = 0; ib < nb; ib++) {
                    if ((ib & 3) == 0) /* the weight row streams from memory, as the dots' (above) */
                        mp_prefetch_weights(wr + (size_t)ib * block_bytes, 4 * block_bytes);
                    const __m256i wq = q8_weights(wr, is_q4, ib);
                    const __m512i wq2 = join256(wq, wq);
                    const __m512i w_abs = _mm512_abs_epi8(wq2);
                    const uint64_t neg = _mm512_movepi8_mask(wq2); /* (the emulated build has no __mmask64) */
                    const __m512 dw = _mm512_set1_ps(q8_weight_scale(wr, is_q4, ib));
                    for (int j = 0; j < ng; j++) {
                        const q8_pair_block *k = &pk[(g + j) * nb + ib];
                        const __m512i q = _mm512_load_si512(k->q);
                        const __m512i xs = _mm512_mask_sub_epi8(q, neg, _mm512_setzero_si512(), q);
                        const __m512i isum = _mm512_dpbusd_epi32(_mm512_setzero_si512(), w_abs, xs);
                        acc[j][ib & 1] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(isum),
                                                         _mm512_mul_ps(dw, _mm512_load_ps(k->d)), acc[j][ib & 1]);
                    }
                }
                for (int j = 0; j < ng; j++) {
                    const int64_t t0 = 2 * (p0 + g + j);
                    const __m512 s = _mm512_add_ps(acc[j][0], acc[j][1]);
                    y[t0 * y_stride + r] = hsum256(_mm512_castps512_ps256(s));
                    if (t0 + 1 < n_x)
                        y[(t0 + 1) * y_stride + r] =
                            hsum256(_mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(s), 1)));
                }
            }
        }
    }
    free(pk);
}

static void gemm_q4_0(int64_t n, const void *w, size_t row_bytes, int64_t n_rows, const void *x, size_t x_stride,
                      int64_t n_x, float *y, int64_t y_stride)
{
    gemm_q8(n, w, row_bytes, n_rows, x, x_stride, n_x, y, y_stride, 1);
}

static void gemm_q8_0(int64_t n, const void *w, size_t row_bytes, int64_t n_rows, const void *x, size_t x_stride,
                      int64_t n_x, float *y, int64_t y_stride)
{
    gemm_q8(n, w, row_bytes, n_rows, x, x_stride, n_x, y, y_stride, 0);
}

static void dequantize_q4_0(const void *src, float *dst, int64_t n)
{
    const mp_block_q4_0 *b = src; /* (n / 32,) */
    const __m512i eight = _mm512_set1_epi32(8);
    for (int64_t ib = 0; ib < n / MP_QK4_0; ib++) {
        const __m512 d = _mm512_set1_ps(f16(b[ib].d));
        const __m512i q = _mm512_cvtepu8_epi32(loadu128(b[ib].qs)); /* (16,) bytes, both nibbles */
        const __m512i lo = _mm512_sub_epi32(_mm512_and_si512(q, _mm512_set1_epi32(0x0F)), eight);
        const __m512i hi = _mm512_sub_epi32(_mm512_srli_epi32(q, 4), eight);
        _mm512_storeu_ps(dst + ib * MP_QK4_0, _mm512_mul_ps(d, _mm512_cvtepi32_ps(lo)));
        _mm512_storeu_ps(dst + ib * MP_QK4_0 + 16, _mm512_mul_ps(d, _mm512_cvtepi32_ps(hi)));
    }
}

static void dequantize_q8_0(const void *src, float *dst, int64_t n)
{
    const mp_block_q8_0 *b = src; /* (n / 32,) */
    for (int64_t ib = 0; ib < n / MP_QK8_0; ib++) {
        const __m512 d = _mm512_set1_ps(f16(b[ib].d));
        for (int k = 0; k < 2; k++) {
            const __m512 v = _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(loadu128(b[ib].qs + 16 * k)));
            _mm512_storeu_ps(dst + ib * MP_QK8_0 + 16 * k, _mm512_mul_ps(v, d));
        }
    }
}

/* ---- K-quants (activation row is Q8_K) ---- */

/* Lane i of a 32 x int16 vector takes word INDEX of a vector of scales: the permutexvar
 * indices that spread sub-block scales over the int16 words of two packed chunk sums. */
#define R4(v) v, v, v, v
/* Q4_K pair of chunks p (see q4_K_block_dot): in each 128-bit lane, words 0-3 belong to
 * sub-block 4p + (lane >= 2), words 4-7 to sub-block 4p + 2 + (lane >= 2) */
static const uint16_t k_q4_K_scale_idx[2][32] = {
    {R4(0), R4(2), R4(0), R4(2), R4(1), R4(3), R4(1), R4(3)},
    {R4(4), R4(6), R4(4), R4(6), R4(5), R4(7), R4(5), R4(7)}};
/* Q6_K pair of chunks p (see q6_K_block_dot): in 128-bit lane j, words 0-3 belong to group
 * 8p + j, words 4-7 to group 8p + 4 + j */
static const uint16_t k_q6_K_scale_idx[2][32] = {
    {R4(0), R4(4), R4(1), R4(5), R4(2), R4(6), R4(3), R4(7)},
    {R4(8), R4(12), R4(9), R4(13), R4(10), R4(14), R4(11), R4(15)}};
/* Q6_K in the decode's lane order (q6_K_unpack_lanes): in 128-bit lane j of pair p's packed sums,
 * words 0-3 belong to group 4p + (j & 1) + 8 (j >= 2), words 4-7 to the group two after it */
static const uint16_t k_q6_K_lane_scale_idx[2][32] = {
    {R4(0), R4(2), R4(1), R4(3), R4(8), R4(10), R4(9), R4(11)},
    {R4(4), R4(6), R4(5), R4(7), R4(12), R4(14), R4(13), R4(15)}};
/* Q4_K in the decode's lane order (q4_K_unpack_lanes): in 128-bit lane j of pair p's packed sums,
 * words 0-3 belong to sub-block 4p + 2 (j >= 2), words 4-7 to the one after it */
static const uint16_t k_q4_K_lane_scale_idx[2][32] = {
    {R4(0), R4(1), R4(0), R4(1), R4(2), R4(3), R4(2), R4(3)},
    {R4(4), R4(5), R4(4), R4(5), R4(6), R4(7), R4(6), R4(7)}};
#undef R4

static inline float q8_K_scale(const mp_block_q8_K *y)
{
    float d;
    memcpy(&d, &y->d, sizeof(d)); /* the activation row may sit at any 4-byte offset or none */
    return d;
}

/* The 64 weights of Q4_K chunk c (elements 64c..64c+63 = sub-blocks 2c, 2c+1), in element
 * order, from qs[32c..32c+31] (low nibbles: sub-block 2c, high: 2c+1): a 256-bit broadcast
 * load puts the 32 bytes in both halves, the upper half's words shift right by 4 (masked), and
 * one AND keeps the nibbles. The weights then meet the activations as they lie in memory (one
 * 64-byte load, no lane inserts). */
static inline __m512i q4_K_chunk(const uint8_t *qs)
{
    const __m512i q = _mm512_broadcast_i64x4(loadu256(qs));
    const __m512i shifted = _mm512_mask_mov_epi16(q, 0xFFFF0000u, _mm512_srli_epi16(q, 4)); /* one masked vpsrlw */
    return _mm512_and_si512(shifted, _mm512_set1_epi8(0x0F));
}

/* A Q4_K block's 8 six-bit scales (bytes 0-7) and mins (bytes 8-15), unpacked in SIMD
 * registers from the block's first 16 bytes (d, dmin, the 12 packed bytes as dwords w0-w2): the
 * same bit moves as mp_q4_K_unpack_scales, dword lanes [sc 0-3, sc 4-7, m 0-3, m 4-7]. */
static inline __m128i q4_K_scales_mins(const void *b)
{
    const __m128i v = loadu128(b);                                                  /* [d dmin, w0, w1, w2] */
    const __m128i lo = _mm_srlv_epi32(_mm_shuffle_epi32(v, 0xED), _mm_setr_epi32(0, 0, 0, 4)); /* [w0, w2, w1, w2 >> 4] */
    const __m128i top = _mm_srli_epi32(_mm_shuffle_epi32(v, 0x84), 2);             /* [., w0 >> 2, ., w1 >> 2] */
    const __m128i top_bits = _mm_and_si128(top, _mm_setr_epi32(0, 0x30303030, 0, 0x30303030));
    /* (lo & masks) | top_bits */
    return _mm_ternarylogic_epi32(lo, _mm_setr_epi32(0x3F3F3F3F, 0x0F0F0F0F, 0x3F3F3F3F, 0x0F0F0F0F), top_bits, 0xEA);
}

/* Q5_K chunk c: Q4_K's, each byte topped up with its fifth bit, bit 2c (lower half: sub-block
 * 2c) or 2c + 1 (upper half) of qh[l], broadcast to both halves and shifted per half (masked). */
static inline __m512i q5_K_chunk(const uint8_t *qs, const uint8_t *qh, int c)
{
    const __m512i h = _mm512_broadcast_i64x4(loadu256(qh));
    const __m512i shifted = _mm512_mask_mov_epi16(_mm512_srli_epi16(h, 2 * c), 0xFFFF0000u, _mm512_srli_epi16(h, 2 * c + 1));
    const __m512i top = _mm512_slli_epi16(_mm512_and_si512(shifted, _mm512_set1_epi8(1)), 4);
    return _mm512_or_si512(q4_K_chunk(qs), top);
}

/* A K-quant block's scaled integer sums for one Q8_K row, added to sumi: vpdpbusd sums 4 products
 * u * y per int32 lane of each chunk of 64, at most 4 * 63 * 127 = 32004 (Q6_K's u; Q5_K 4 * 31 *
 * 127, Q4_K 4 * 15 * 127, Q3_K 4 * 7 * 127, Q2_K 4 * 3 * 127), so two chunks' lanes pack losslessly
 * into int16 words (packs, per 128-bit lane) and one vpdpwssd a chunk pair applies the scales its
 * words belong to (scale[p]: k_q4_K_scale_idx's or k_q6_K_scale_idx's spread of the block's
 * scales): two scale vectors per block instead of one per chunk. */
static ALWAYS_INLINE __m512i packed_sums_v(const __m512i u[4], const __m512i scale[2], const __m512i v[4], __m512i sumi)
{
    for (int p = 0; p < 2; p++) {
        const __m512i s0 = _mm512_dpbusd_epi32(_mm512_setzero_si512(), u[2 * p], v[2 * p]);
        const __m512i s1 = _mm512_dpbusd_epi32(_mm512_setzero_si512(), u[2 * p + 1], v[2 * p + 1]);
        sumi = _mm512_dpwssd_epi32(sumi, _mm512_packs_epi32(s0, s1), scale[p]);
    }
    return sumi;
}

/* A Q8_K block's 256 quants as they lie (element order), four chunks of 64 */
static inline void q8_K_chunks(const mp_block_q8_K *y, __m512i v[4])
{
    for (int c = 0; c < 4; c++)
        v[c] = loadu512(y->qs + 64 * c);
}

/* packed_sums_v against the Q8_K row's quants as they lie (the weights in element order) */
static ALWAYS_INLINE __m512i packed_sums(const __m512i u[4], const __m512i scale[2], const mp_block_q8_K *y, __m512i sumi)
{
    __m512i v[4];
    q8_K_chunks(y, v);
    return packed_sums_v(u, scale, v, sumi);
}

/* The affine K-quants (Q4_K, Q5_K, Q2_K: x = d sc q - dmin m): [d, dmin, 0, 0] from the two
 * adjacent f16s at p in one conversion, and a block's contribution for one Q8_K row: acc += d yd
 * sumi (16 lanes), accm -= dmin yd summ (the min terms, their own 8-lane chain). */
static inline __m128 d_dmin(const void *p)
{
    uint32_t v;
    memcpy(&v, p, sizeof(v));
    return _mm_cvtph_ps(_mm_cvtsi32_si128((int)v));
}

static ALWAYS_INLINE void affine_add(__m128 dm, const mp_block_q8_K *y, __m512i sumi, __m256i summ, __m512 *acc,
                                     __m256 *accm)
{
    const __m128 dm_y = _mm_mul_ps(dm, _mm_set1_ps(q8_K_scale(y))); /* [d yd, dmin yd, 0, 0] */
    *acc = _mm512_fmadd_ps(_mm512_broadcastss_ps(dm_y), _mm512_cvtepi32_ps(sumi), *acc);
    *accm = _mm256_fnmadd_ps(_mm256_broadcastss_ps(_mm_movehdup_ps(dm_y)), _mm256_cvtepi32_ps(summ), *accm);
}

/* One Q4_K or Q5_K weight block (head: its first 16 bytes, d, dmin and the packed scales, the
 * same in both; q: its four chunks unpacked) against n_x Q8_K blocks (x_stride bytes apart):
 * acc[i] += the block's contribution, as 16 float lanes; each of the four scale vectors' words a
 * sub-block's scale (k_q4_K_scale_idx). */
static ALWAYS_INLINE __m256i affine_K_scales(const void *head, const uint16_t idx[2][32], __m512i scale[2])
{
    const __m128i sm = q4_K_scales_mins(head);
    const __m512i sc16 = _mm512_castsi128_si512(_mm_cvtepu8_epi16(sm));
    for (int p = 0; p < 2; p++)
        scale[p] = _mm512_permutexvar_epi16(loadu512(idx[p]), sc16);
    /* each min repeated for its two bsums: lanes (2j, 2j+1) = m[j] */
    return _mm256_cvtepu8_epi16(_mm_unpackhi_epi8(sm, sm));
}

static ALWAYS_INLINE void affine_K_block_dot(const void *head, const __m512i q[4], const uint8_t *x, size_t x_stride,
                                             int n_x, __m512 *acc, __m256 *accm)
{
    __m512i scale[2];
    const __m256i mins16 = affine_K_scales(head, k_q4_K_scale_idx, scale);
    const __m128 dm = d_dmin(head);
    for (int i = 0; i < n_x; i++) {
        const mp_block_q8_K *y = (const mp_block_q8_K *)(x + (size_t)i * x_stride);
        affine_add(dm, y, packed_sums(q, scale, y, _mm512_setzero_si512()),
                   _mm256_madd_epi16(loadu256(y->bsums), mins16), &acc[i], &accm[i]);
    }
}

static ALWAYS_INLINE void q4_K_block_dot(const mp_block_q4_K *b, const uint8_t *x, size_t x_stride, int n_x,
                                         __m512 *acc, __m256 *accm)
{
    __m512i q[4];
    for (int c = 0; c < 4; c++)
        q[c] = q4_K_chunk(b->qs + 32 * c);
    affine_K_block_dot(b, q, x, x_stride, n_x, acc, accm);
}

static ALWAYS_INLINE void q5_K_block_dot(const mp_block_q5_K *b, const uint8_t *x, size_t x_stride, int n_x,
                                         __m512 *acc, __m256 *accm)
{
    __m512i q[4];
    for (int c = 0; c < 4; c++)
        q[c] = q5_K_chunk(b->qs + 32 * c, b->qh, c);
    affine_K_block_dot(b, q, x, x_stride, n_x, acc, accm);
}

/* Q4_K's one-row kernels (vec_dot, gemv) in the lane order: a 64-byte load of qs[64h..64h+63]
 * holds sub-blocks 4h and 4h + 2 in its low nibbles and 4h + 1, 4h + 3 in its high ones (32 bytes
 * each), so an AND and a shift + AND unpack a half block: 6 vector operations a block against
 * q4_K_chunk's 12 for the element order the multi-row dots keep (they share one unpacking among
 * their activation rows). The activation meets the weights permuted the same way
 * (q4_K_act_lanes): once per GEMV call, or per block in vec_dot (4 inserts), whose bits the GEMV
 * equals. */
static inline void q4_K_unpack_lanes(const uint8_t *qs, __m512i u[4])
{
    for (int h = 0; h < 2; h++) {
        const __m512i q = loadu512(qs + 64 * h);
        u[2 * h] = _mm512_and_si512(q, _mm512_set1_epi8(0x0F));
        u[2 * h + 1] = _mm512_and_si512(_mm512_srli_epi16(q, 4), _mm512_set1_epi8(0x0F));
    }
}

/* A Q8_K block's 256 quants in q4_K_unpack_lanes' order: v[2h + k] = elements 128h + 32k .. +31, then
 * 128h + 64 + 32k .. +31 */
static inline void q4_K_act_lanes(const int8_t *qs, __m512i v[4])
{
    for (int h = 0; h < 2; h++)
        for (int k = 0; k < 2; k++)
            v[2 * h + k] = join256(loadu256(qs + 128 * h + 32 * k), loadu256(qs + 128 * h + 64 + 32 * k));
}

/* One Q4_K block against one Q8_K block y whose quants are v (q4_K_act_lanes) */
static ALWAYS_INLINE void q4_K_lanes_block_dot(const mp_block_q4_K *b, const __m512i v[4], const mp_block_q8_K *y,
                                               __m512 *acc, __m256 *accm)
{
    __m512i u[4], scale[2];
    q4_K_unpack_lanes(b->qs, u);
    const __m256i mins16 = affine_K_scales(b, k_q4_K_lane_scale_idx, scale);
    affine_add(d_dmin(b), y, packed_sums_v(u, scale, v, _mm512_setzero_si512()),
               _mm256_madd_epi16(loadu256(y->bsums), mins16), acc, accm);
}

/* The 256 six-bit quants of a Q6_K block as u = q + 32 in 0..63, in element order: u[k] holds
 * elements 64k..64k+63 (see the scalar dequantizer for the layout). Half h of the block is
 * ql[64h..64h+63] (low nibbles: elements +0..63, high: +64..127) and qh[32h..32h+31], whose
 * bit pairs 0-1, 2-3, 4-5, 6-7 top up elements +0..31, +32..63, +64..95, +96..127: qh is
 * broadcast to both 256-bit halves and each half's words shift by its own count (masked). */
static inline void q6_K_unpack(const mp_block_q6_K *b, __m512i u[4])
{
    const __m512i m4 = _mm512_set1_epi8(0x0F), m2 = _mm512_set1_epi8(0x30);
    const uint32_t lower = 0x0000FFFFu, upper = 0xFFFF0000u; /* word masks of the 256-bit halves */
    for (int h = 0; h < 2; h++) {
        const __m512i ql = loadu512(b->ql + 64 * h);
        const __m512i qh = _mm512_broadcast_i64x4(loadu256(b->qh + 32 * h));
        const __m512i top01 = _mm512_mask_mov_epi16(_mm512_slli_epi16(qh, 2), lower, _mm512_slli_epi16(qh, 4));
        const __m512i top23 = _mm512_mask_mov_epi16(qh, upper, _mm512_srli_epi16(qh, 2));
        /* (ql & m4) | (top & m2): vpternlogd, imm 0xEA = (a & b) | c */
        u[2 * h] = _mm512_ternarylogic_epi32(ql, m4, _mm512_and_si512(top01, m2), 0xEA);
        u[2 * h + 1] = _mm512_ternarylogic_epi32(_mm512_srli_epi16(ql, 4), m4, _mm512_and_si512(top23, m2), 0xEA);
    }
}

/* The K-quants of 16 groups of 16 (Q6_K, Q3_K, Q2_K): the scale vectors of the two chunk pairs from
 * the 16 group scales as int16 words (k_q6_K_scale_idx's spread). */
static inline void g16_scale_vectors(__m256i sc16, const uint16_t idx[2][32], __m512i scale[2])
{
    for (int p = 0; p < 2; p++)
        scale[p] = _mm512_permutexvar_epi16(loadu512(idx[p]), _mm512_castsi256_si512(sc16));
}

/* Q6_K and Q3_K, stored as u = q + 2^shift (32, 4) in groups of 16 with signed scales sc16 and one d:
 * sum(q y) = sum(u y) - 2^shift sum(y), sum(y) of a group its bsum, so each group's -2^shift sc
 * starts the sums (|sc| <= 128: the products fit int16). One block (u, sc16, d) against n_x Q8_K
 * blocks. */
/* The scale vectors (idx's spread of sc16) and the groups' offset starts, -2^shift sc */
static ALWAYS_INLINE __m256i offset_g16_scales(__m256i sc16, int shift, const uint16_t idx[2][32], __m512i scale[2])
{
    g16_scale_vectors(sc16, idx, scale);
    return _mm256_sub_epi16(_mm256_setzero_si256(), _mm256_slli_epi16(sc16, shift));
}

/* One block's contribution for one Q8_K row y, whose quants are v (in u's order): acc += d yd sumi */
static ALWAYS_INLINE void offset_g16_add(const __m512i u[4], const __m512i scale[2], __m256i sc16_off, float d,
                                         const mp_block_q8_K *y, const __m512i v[4], __m512 *acc)
{
    const __m512i sumi = packed_sums_v(u, scale, v, zext256(_mm256_madd_epi16(loadu256(y->bsums), sc16_off)));
    *acc = _mm512_fmadd_ps(_mm512_set1_ps(d * q8_K_scale(y)), _mm512_cvtepi32_ps(sumi), *acc);
}

static ALWAYS_INLINE void offset_g16_block_dot(const __m512i u[4], __m256i sc16, int shift, float d, const uint8_t *x,
                                               size_t x_stride, int n_x, __m512 *acc)
{
    __m512i scale[2];
    const __m256i sc16_off = offset_g16_scales(sc16, shift, k_q6_K_scale_idx, scale);
    for (int i = 0; i < n_x; i++) {
        const mp_block_q8_K *y = (const mp_block_q8_K *)(x + (size_t)i * x_stride);
        __m512i v[4];
        q8_K_chunks(y, v);
        offset_g16_add(u, scale, sc16_off, d, y, v, &acc[i]);
    }
}

static ALWAYS_INLINE void q6_K_block_dot(const mp_block_q6_K *b, const uint8_t *x, size_t x_stride, int n_x,
                                         __m512 *acc, __m256 *accm)
{
    (void)accm; /* Q6_K has no min terms */
    __m512i u[4];
    q6_K_unpack(b, u);
    offset_g16_block_dot(u, _mm256_cvtepi8_epi16(loadu128(b->scales)), 5, f16(b->d), x, x_stride, n_x, acc);
}

/* Q6_K's one-row kernels in the lane order: v[s] (s = 0..3) holds elements 32s .. 32s + 31 of the
 * block's first half, then the same of its second (128 + 32s ...). Their top bits are bit pair s of
 * qh[0..63] as one 64-byte load (both halves' qh side by side), their low four bits ql[0..31] and
 * ql[64..95] (s = 0, 2: low and high nibbles) or ql[32..63] and ql[96..127] (s = 1, 3), two 256-bit
 * loads joined: 15 vector operations a block against q6_K_unpack's 20. */
static inline void q6_K_unpack_lanes(const mp_block_q6_K *b, __m512i u[4])
{
    const __m512i m4 = _mm512_set1_epi8(0x0F), m2 = _mm512_set1_epi8(0x30);
    const __m512i qh = loadu512(b->qh);
    const __m512i top[4] = {_mm512_slli_epi16(qh, 4), _mm512_slli_epi16(qh, 2), qh, _mm512_srli_epi16(qh, 2)};
    for (int s = 0; s < 2; s++) {
        const __m512i ql = join256(loadu256(b->ql + 32 * s), loadu256(b->ql + 64 + 32 * s));
        /* (ql & m4) | (top & m2): vpternlogd, imm 0xEA = (a & b) | c */
        u[s] = _mm512_ternarylogic_epi32(ql, m4, _mm512_and_si512(top[s], m2), 0xEA);
        u[s + 2] = _mm512_ternarylogic_epi32(_mm512_srli_epi16(ql, 4), m4, _mm512_and_si512(top[s + 2], m2), 0xEA);
    }
}

/* A Q8_K block's 256 quants in q6_K_unpack_lanes' order */
static inline void q6_K_act_lanes(const int8_t *qs, __m512i v[4])
{
    for (int s = 0; s < 4; s++)
        v[s] = join256(loadu256(qs + 32 * s), loadu256(qs + 128 + 32 * s));
}

static ALWAYS_INLINE void q6_K_lanes_block_dot(const mp_block_q6_K *b, const __m512i v[4], const mp_block_q8_K *y,
                                               __m512 *acc, __m256 *accm)
{
    (void)accm; /* Q6_K has no min terms */
    __m512i u[4], scale[2];
    q6_K_unpack_lanes(b, u);
    const __m256i sc16_off = offset_g16_scales(_mm256_cvtepi8_epi16(loadu128(b->scales)), 5, k_q6_K_lane_scale_idx, scale);
    offset_g16_add(u, scale, sc16_off, f16(b->d), y, v, acc);
}

/* The activation blocks a lane-order GEMV permutes on its stack (rows of up to 16384 elements,
 * 16 KiB); longer rows take vec_dot, row by row */
#define LANES_GEMV_BLOCKS 64

/* vec_dot and gemv of a type whose one-row kernels work in a lane order: ACT_LANES permutes a Q8_K
 * block's quants to it (per block in vec_dot, once a call in gemv, so the two agree bit for bit),
 * BLOCK_DOT adds one weight block against them. */
#define DEFINE_LANES_KERNELS(DOT, GEMV, BLOCK_T, ACT_LANES, BLOCK_DOT)                                    \
    static float DOT(int64_t n, const void *w, const void *x)                                             \
    {                                                                                                     \
        const BLOCK_T *bw = w; /* (n / 256,) */                                                           \
        const mp_block_q8_K *bx = x;                                                                      \
        __m512 acc = _mm512_setzero_ps();                                                                 \
        __m256 accm = _mm256_setzero_ps();                                                                \
        for (int64_t ib = 0; ib < n / MP_QK_K; ib++) {                                                    \
            mp_prefetch_weights(bw + ib, sizeof(*bw));                                                    \
            __m512i v[4];                                                                                 \
            ACT_LANES(bx[ib].qs, v);                                                                      \
            BLOCK_DOT(&bw[ib], v, &bx[ib], &acc, &accm);                                                  \
        }                                                                                                 \
        return hsum512(acc) + hsum256(accm);                                                              \
    }                                                                                                     \
    static void GEMV(int64_t n, const void *w, size_t row_bytes, int64_t n_rows, const void *x, float *y) \
    {                                                                                                     \
        const int64_t nb = n / MP_QK_K;                                                                   \
        const uint8_t *wb = w; /* (n_rows, row_bytes) */                                                  \
        if (nb > LANES_GEMV_BLOCKS) {                                                                     \
            for (int64_t r = 0; r < n_rows; r++)                                                          \
                y[r] = DOT(n, wb + (size_t)r * row_bytes, x);                                             \
            return;                                                                                       \
        }                                                                                                 \
        const mp_block_q8_K *bx = x;                                                                      \
        __m512i v[LANES_GEMV_BLOCKS][4];                                                                  \
        for (int64_t ib = 0; ib < nb; ib++)                                                               \
            ACT_LANES(bx[ib].qs, v[ib]);                                                                  \
        for (int64_t r = 0; r < n_rows; r++) {                                                            \
            const BLOCK_T *bw = (const BLOCK_T *)(wb + (size_t)r * row_bytes);                            \
            __m512 acc = _mm512_setzero_ps();                                                             \
            __m256 accm = _mm256_setzero_ps();                                                            \
            for (int64_t ib = 0; ib < nb; ib++) {                                                         \
                mp_prefetch_weights(bw + ib, sizeof(*bw));                                                \
                BLOCK_DOT(&bw[ib], v[ib], &bx[ib], &acc, &accm);                                          \
            }                                                                                             \
            y[r] = hsum512(acc) + hsum256(accm);                                                          \
        }                                                                                                 \
    }

DEFINE_LANES_KERNELS(vec_dot_q4_K_q8_K, gemv_q4_K, mp_block_q4_K, q4_K_act_lanes, q4_K_lanes_block_dot)
DEFINE_LANES_KERNELS(vec_dot_q6_K_q8_K, gemv_q6_K, mp_block_q6_K, q6_K_act_lanes, q6_K_lanes_block_dot)

/* Q2_K / Q3_K chunk c (elements 64c .. 64c+63: runs 2c and 2c + 1 of 32, quant.h): bits 2j of
 * qs[32h + l] (h = c / 2; j = 2 (c % 2) in the lower half, j + 1 in the upper) from one 256-bit
 * broadcast shifted per half (masked), and for Q3_K bit 2c (lower) or 2c + 1 (upper) of hmask[l] as
 * + 4: u = q + 4 in 0..7. */
static inline __m512i k2_chunk(const uint8_t *qs, const uint8_t *hmask, int c)
{
    /* per-half shift counts, one vpsrlvw each: [4 (c % 2) x 16 | 4 (c % 2) + 2 x 16], [2c x 16 | 2c + 1 x 16] */
    const __m512i q = _mm512_broadcast_i64x4(loadu256(qs + 32 * (c / 2)));
    const int j = 2 * (c % 2);
    const __m512i qn = _mm512_inserti64x4(_mm512_set1_epi16((short)(2 * j)), _mm256_set1_epi16((short)(2 * j + 2)), 1);
    const __m512i sh = _mm512_srlv_epi16(q, qn);
    if (!hmask)
        return _mm512_and_si512(sh, _mm512_set1_epi8(3));
    const __m512i h = _mm512_broadcast_i64x4(loadu256(hmask));
    const __m512i hn = _mm512_inserti64x4(_mm512_set1_epi16((short)(2 * c)), _mm256_set1_epi16((short)(2 * c + 1)), 1);
    const __m512i top = _mm512_slli_epi16(_mm512_and_si512(_mm512_srlv_epi16(h, hn), _mm512_set1_epi8(1)), 2);
    return _mm512_ternarylogic_epi32(sh, _mm512_set1_epi8(3), top, 0xEA); /* (sh & 3) | top */
}

/* One Q2_K weight block against n_x Q8_K blocks: sum(x y) = d sum_g sc_g sum(q y) - dmin sum_g m_g
 * bsum_g. */
static ALWAYS_INLINE void q2_K_block_dot(const mp_block_q2_K *b, const uint8_t *x, size_t x_stride, int n_x,
                                         __m512 *acc, __m256 *accm)
{
    __m512i u[4], scale[2];
    for (int c = 0; c < 4; c++)
        u[c] = k2_chunk(b->qs, NULL, c);
    const __m128i s8 = loadu128(b->scales), m4 = _mm_set1_epi8(0x0F);
    g16_scale_vectors(_mm256_cvtepu8_epi16(_mm_and_si128(s8, m4)), k_q6_K_scale_idx, scale);
    const __m256i mins16 = _mm256_cvtepu8_epi16(_mm_and_si128(_mm_srli_epi16(s8, 4), m4));
    const __m128 dm = d_dmin(&b->d); /* d and dmin adjacent */
    for (int i = 0; i < n_x; i++) {
        const mp_block_q8_K *y = (const mp_block_q8_K *)(x + (size_t)i * x_stride);
        affine_add(dm, y, packed_sums(u, scale, y, _mm512_setzero_si512()),
                   _mm256_madd_epi16(loadu256(y->bsums), mins16), &acc[i], &accm[i]);
    }
}

/* One Q3_K weight block against n_x Q8_K blocks: u = q + 4, its scales s_g - 32 (quant_impl.h's
 * mp_q3_K_scale_words, as the AVX2 kernel takes them). */
static ALWAYS_INLINE void q3_K_block_dot(const mp_block_q3_K *b, const uint8_t *x, size_t x_stride, int n_x,
                                         __m512 *acc, __m256 *accm)
{
    (void)accm; /* Q3_K has no min terms */
    __m512i u[4];
    for (int c = 0; c < 4; c++)
        u[c] = k2_chunk(b->qs, b->hmask, c);
    uint32_t w[4];
    mp_q3_K_scale_words(b->scales, w);
    const __m128i s8 = _mm_sub_epi8(_mm_setr_epi32((int)w[0], (int)w[1], (int)w[2], (int)w[3]), _mm_set1_epi8(32));
    offset_g16_block_dot(u, _mm256_cvtepi8_epi16(s8), 2, f16(b->d), x, x_stride, n_x, acc);
}

/* One K-quant weight row against n_x <= MP_GEMM_TILE Q8_K rows; vec_dot is its n_x = 1 case. */
#define DEFINE_K_ROWS_DOT(NAME, BLOCK_T, BLOCK_DOT)                                                 \
    static ALWAYS_INLINE void NAME(int64_t n, const void *w, const void *x, size_t x_stride, int n_x, float *out) \
    {                                                                                               \
        const BLOCK_T *bw = w; /* (n / 256,) */                                                     \
        const uint8_t *px = x; /* (n_x, x_stride) rows of Q8_K blocks */                            \
        __m512 acc[MP_GEMM_TILE];                                                                   \
        __m256 accm[MP_GEMM_TILE]; /* a second chain, 8 lanes: Q4_K's min terms */                \
        for (int i = 0; i < MP_GEMM_TILE; i++) {                                                    \
            acc[i] = _mm512_setzero_ps();                                                           \
            accm[i] = _mm256_setzero_ps();                                                          \
        }                                                                                           \
        if (n_x > MP_GEMM_TILE)                                                                     \
            n_x = MP_GEMM_TILE;                                                                     \
        for (int64_t ib = 0; ib < n / MP_QK_K; ib++) {                                              \
            mp_prefetch_weights(bw + ib, sizeof(*bw));                                              \
            BLOCK_DOT(&bw[ib], px + ib * sizeof(mp_block_q8_K), x_stride, n_x, acc, accm);         \
        }                                                                                           \
        for (int i = 0; i < n_x; i++)                                                               \
            out[i] = hsum512(acc[i]) + hsum256(accm[i]);                                            \
    }

DEFINE_K_ROWS_DOT(q4_K_rows_dot, mp_block_q4_K, q4_K_block_dot)
DEFINE_K_ROWS_DOT(q5_K_rows_dot, mp_block_q5_K, q5_K_block_dot)
DEFINE_K_ROWS_DOT(q6_K_rows_dot, mp_block_q6_K, q6_K_block_dot)
DEFINE_K_ROWS_DOT(q2_K_rows_dot, mp_block_q2_K, q2_K_block_dot)
DEFINE_K_ROWS_DOT(q3_K_rows_dot, mp_block_q3_K, q3_K_block_dot)

/* The table's vec_dot (n_x = 1) and vec_dot_multi of a row loop. */
#define DEFINE_K_MULTI(ROWS, MULTI)                                                                 \
    static void MULTI(int64_t n, const void *w, const void *x, size_t x_stride, int n_x, float *out) \
    {                                                                                               \
        ROWS(n, w, x, x_stride, n_x, out);                                                          \
    }
#define DEFINE_K_VEC_DOTS(ROWS, DOT, MULTI)                                                         \
    static float DOT(int64_t n, const void *w, const void *x)                                       \
    {                                                                                               \
        float out;                                                                                  \
        ROWS(n, w, x, 0, 1, &out);                                                                  \
        return out;                                                                                 \
    }                                                                                               \
    DEFINE_K_MULTI(ROWS, MULTI)

/* Q4_K and Q6_K: vec_dot from DEFINE_LANES_KERNELS */
DEFINE_K_MULTI(q4_K_rows_dot, vec_dot_multi_q4_K)
DEFINE_K_VEC_DOTS(q5_K_rows_dot, vec_dot_q5_K_q8_K, vec_dot_multi_q5_K)
DEFINE_K_MULTI(q6_K_rows_dot, vec_dot_multi_q6_K)
DEFINE_K_VEC_DOTS(q2_K_rows_dot, vec_dot_q2_K_q8_K, vec_dot_multi_q2_K)
DEFINE_K_VEC_DOTS(q3_K_rows_dot, vec_dot_q3_K_q8_K, vec_dot_multi_q3_K)

static void dequantize_q4_K(const void *src, float *dst, int64_t n)
{
    const mp_block_q4_K *b = src; /* (n / 256,) */
    for (int64_t ib = 0; ib < n / MP_QK_K; ib++) {
        uint8_t sc[8], m[8];
        mp_q4_K_unpack_scales(b[ib].scales, sc, m);
        const float d = f16(b[ib].d), dmin = f16(b[ib].dmin);
        float *y = dst + ib * MP_QK_K;
        for (int c = 0; c < 4; c++) {
            const __m512 d0 = _mm512_set1_ps(d * (float)sc[2 * c]), m0 = _mm512_set1_ps(dmin * (float)m[2 * c]);
            const __m512 d1 = _mm512_set1_ps(d * (float)sc[2 * c + 1]), m1 = _mm512_set1_ps(dmin * (float)m[2 * c + 1]);
            for (int k = 0; k < 2; k++) {
                const __m512i q32 = _mm512_cvtepu8_epi32(loadu128(b[ib].qs + 32 * c + 16 * k));
                const __m512 lo = _mm512_cvtepi32_ps(_mm512_and_si512(q32, _mm512_set1_epi32(0x0F)));
                const __m512 hi = _mm512_cvtepi32_ps(_mm512_srli_epi32(q32, 4));
                /* mul then sub, never fused: the gguf reference rounds twice */
                _mm512_storeu_ps(y + 64 * c + 16 * k, _mm512_sub_ps(_mm512_mul_ps(d0, lo), m0));
                _mm512_storeu_ps(y + 64 * c + 32 + 16 * k, _mm512_sub_ps(_mm512_mul_ps(d1, hi), m1));
            }
        }
    }
}

static void dequantize_q6_K(const void *src, float *dst, int64_t n)
{
    const mp_block_q6_K *b = src; /* (n / 256,) */
    for (int64_t ib = 0; ib < n / MP_QK_K; ib++) {
        __m512i u[4];
        q6_K_unpack(&b[ib], u);
        const float d = f16(b[ib].d);
        float *y = dst + ib * MP_QK_K;
        for (int k = 0; k < 4; k++) {
            uint8_t bytes[64];
            _mm512_storeu_si512(bytes, u[k]);
            for (int j = 0; j < 4; j++) { /* group 4k + j: elements 64k + 16j .. +15 */
                const __m512 dl = _mm512_set1_ps(d * (float)b[ib].scales[4 * k + j]);
                const __m512i q = _mm512_sub_epi32(_mm512_cvtepu8_epi32(loadu128(bytes + 16 * j)), _mm512_set1_epi32(32));
                _mm512_storeu_ps(y + 64 * k + 16 * j, _mm512_mul_ps(dl, _mm512_cvtepi32_ps(q)));
            }
        }
    }
}

/* ---- the blocks of 32 (activation row Q8_0): two dots per 512-bit vector ----
 *
 * A pair vector holds the partial sums of two dots a and b in its 128-bit lanes, [a lo | b lo | a hi |
 * b hi]: lo the products of a block's elements 0..15 (its bytes' low nibbles), hi those of 16..31,
 * each int32 lane the exact sum of four. The weights go in as unsigned bytes, as vpdpbusd takes them:
 * IQ4_NL's and MXFP4's levels looked up plus 128, Q4_0's nibbles (v + 8), Q8_0's bytes plus 128,
 * Q5_0's u = v + 16 (its fifth bits added from qh by a byte mask), Q4_1's and Q5_1's q as stored;
 * each block's sums start at minus that offset times the
 * activation's sums of four, so one vpdpbusd a block and pair gives the exact sums with no sign moved.
 * Each lane converts its block sum to float and adds it times d_w d_x (Q4_1, Q5_1: then its activation
 * sum times m_w d_x), even and odd blocks in two FMA chains a lane; a dot's eight lanes of their sum
 * are summed last in one fixed order (pair_sums). The decode GEMV puts two weight rows in a vector against one
 * activation row, the multi-row dot two activation rows, vec_dot one row against itself: a dot's
 * arithmetic is the same lane for lane in all three, so they agree bit for bit, and a row's result
 * does not depend on the rows beside it (how threads slice a matrix changes no bit). Against the AVX2
 * dots these replace at this level (two 8-lane accumulators, the sign moved onto the activation, a
 * broadcast scale per block) the work per block and dot is about halved: the unpacking, sums and
 * FMAs run two dots wide and the scales of four dots are converted together. */

enum { P_IQ4_NL, P_MXFP4, P_Q4_1, P_Q5_0, P_Q5_1, P_Q4_0, P_Q8_0 };

static const int8_t k_iq4_nl_levels[16] = MP_IQ4_NL_LEVELS;
static const int8_t k_mxfp4_levels[16] = MP_MXFP4_LEVELS;

/* a block's layout: its bytes, where its 16 code bytes, its fifth bits (-1: none) and its f16 min
 * (-1: none) start; the scale is at byte 0 (an f16, or MXFP4's E8M0) */
static ALWAYS_INLINE size_t pk_bytes(int k)
{
    return k == P_IQ4_NL ? sizeof(mp_block_iq4_nl) : k == P_MXFP4 ? sizeof(mp_block_mxfp4)
           : k == P_Q4_1 ? sizeof(mp_block_q4_1) : k == P_Q5_0 ? sizeof(mp_block_q5_0)
           : k == P_Q5_1 ? sizeof(mp_block_q5_1) : k == P_Q4_0 ? sizeof(mp_block_q4_0) : sizeof(mp_block_q8_0);
}
static ALWAYS_INLINE size_t pk_qs(int k)
{
    return k == P_IQ4_NL ? offsetof(mp_block_iq4_nl, qs) : k == P_MXFP4 ? offsetof(mp_block_mxfp4, qs)
           : k == P_Q4_1 ? offsetof(mp_block_q4_1, qs) : k == P_Q5_0 ? offsetof(mp_block_q5_0, qs)
           : k == P_Q5_1 ? offsetof(mp_block_q5_1, qs) : k == P_Q4_0 ? offsetof(mp_block_q4_0, qs)
                         : offsetof(mp_block_q8_0, qs);
}
static ALWAYS_INLINE int pk_qh(int k)
{
    return k == P_Q5_0 ? (int)offsetof(mp_block_q5_0, qh) : k == P_Q5_1 ? (int)offsetof(mp_block_q5_1, qh) : -1;
}
static ALWAYS_INLINE int pk_min(int k)
{
    return k == P_Q4_1 ? (int)offsetof(mp_block_q4_1, m) : k == P_Q5_1 ? (int)offsetof(mp_block_q5_1, m) : -1;
}
/* what the stored unsigned weight exceeds the level by */
static ALWAYS_INLINE int pk_offset(int k)
{
    return k == P_IQ4_NL || k == P_MXFP4 || k == P_Q8_0 ? 128 : k == P_Q5_0 ? 16 : k == P_Q4_0 ? 8 : 0;
}

/* IQ4_NL's or MXFP4's 16 levels + 128 in every 128-bit lane, for vpshufb (zero for the others) */
static ALWAYS_INLINE __m512i pk_lut(int k)
{
    if (k != P_IQ4_NL && k != P_MXFP4)
        return _mm512_setzero_si512();
    const __m128i lv = loadu128(k == P_MXFP4 ? k_mxfp4_levels : k_iq4_nl_levels);
    return _mm512_broadcast_i32x4(_mm_xor_si128(lv, _mm_set1_epi8((char)0x80)));
}

/* the unsigned weights of two blocks at ba, bb: [a lo | b lo | a hi | b hi] */
static ALWAYS_INLINE __m512i pair_weights(int k, const uint8_t *ba, const uint8_t *bb, __m512i lut)
{
    if (k == P_Q8_0) { /* 32 signed bytes a block: lane halves swapped into place, plus 128 */
        const __m512i z = _mm512_inserti64x4(_mm512_castsi256_si512(loadu256(ba + pk_qs(k))), loadu256(bb + pk_qs(k)), 1);
        return _mm512_xor_si512(_mm512_shuffle_i32x4(z, z, 0xD8), _mm512_set1_epi8((char)0x80));
    }
    const __m256i q = _mm256_inserti128_si256(_mm256_castsi128_si256(loadu128(ba + pk_qs(k))), loadu128(bb + pk_qs(k)), 1);
    const __m512i z = _mm512_and_si512(_mm512_inserti64x4(_mm512_castsi256_si512(q), _mm256_srli_epi16(q, 4), 1),
                                       _mm512_set1_epi8(0x0F));
    if (k == P_IQ4_NL || k == P_MXFP4)
        return _mm512_shuffle_epi8(lut, z);
    if (pk_qh(k) < 0)
        return z;
    uint32_t ha, hb; /* bit e: element e's fifth bit */
    memcpy(&ha, ba + pk_qh(k), 4);
    memcpy(&hb, bb + pk_qh(k), 4);
    const uint64_t fifth = (uint64_t)((ha & 0xFFFFu) | (hb & 0xFFFFu) << 16) |
                           (uint64_t)((ha >> 16) | (hb >> 16) << 16) << 32; /* a byte mask, bit = byte */
    return _mm512_mask_add_epi8(z, fifth, z, _mm512_set1_epi8(16));
}

/* four blocks' scales (at p[i] + off) times the activation's dx: f16 scales converted and
 * multiplied; MXFP4's E8M0 exponents by one vscalefps, dx 2^(e - 128): the same correctly rounded
 * product of dx and a power of two as mp_e8m0x4's scale times dx, in 4 vector ops instead of 7 */
static ALWAYS_INLINE __m128 pk_scales_dx(int k, const uint8_t *const p[4], size_t off, __m128 dx)
{
    if (k != P_MXFP4)
        return _mm_mul_ps(mp_f16x4(p, off), dx);
    return _mm_scalef_ps(dx, _mm_cvtepi32_ps(_mm_sub_epi32(mp_u8x4(p, off), _mm_set1_epi32(128))));
}

static ALWAYS_INLINE float pk_scale(int k, const uint8_t *b)
{
    if (k == P_MXFP4)
        return mp_e8m0_half(b[0]);
    mp_f16 d;
    memcpy(&d, b, 2);
    return f16(d);
}

static ALWAYS_INLINE float pk_min_scale(int k, const uint8_t *b)
{
    mp_f16 m;
    memcpy(&m, b + pk_min(k), 2);
    return f16(m);
}

/* scales s (lanes 0..3) as the pair vectors of dots (0, 1) and (2, 3) */
static ALWAYS_INLINE __m512 pair_scale(__m128 s, int pair)
{
    const __m512i idx = pair ? _mm512_setr_epi32(2, 2, 2, 2, 3, 3, 3, 3, 2, 2, 2, 2, 3, 3, 3, 3)
                             : _mm512_setr_epi32(0, 0, 0, 0, 1, 1, 1, 1, 0, 0, 0, 0, 1, 1, 1, 1);
    return _mm512_permutexvar_ps(idx, _mm512_castps128_ps512(s));
}

/* one block of a pair: acc += its sums times the scales (sd: d_w d_x; sm: m_w d_x, min kinds) */
static ALWAYS_INLINE __m512 pair_block(int k, __m512 acc, __m512i w, __m512i xv, __m512 sd, __m512 sm)
{
    const __m512i zero = _mm512_setzero_si512();
    if (pk_min(k) >= 0) {
        const __m512i xs = _mm512_dpbusd_epi32(zero, _mm512_set1_epi8(1), xv);
        acc = _mm512_fmadd_ps(_mm512_cvtepi32_ps(_mm512_dpbusd_epi32(zero, w, xv)), sd, acc);
        return _mm512_fmadd_ps(_mm512_cvtepi32_ps(xs), sm, acc);
    }
    const __m512i start = _mm512_sub_epi32(zero, _mm512_dpbusd_epi32(zero, _mm512_set1_epi8((char)pk_offset(k)), xv));
    return _mm512_fmadd_ps(_mm512_cvtepi32_ps(_mm512_dpbusd_epi32(start, w, xv)), sd, acc);
}

/* a pair's two dots: out[0] = a, out[1] = b */
static ALWAYS_INLINE void pair_sums(__m512 acc, float *out)
{
    const __m256 t = _mm256_add_ps(_mm512_castps512_ps256(acc),
                                   _mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(acc), 1)));
    for (int h = 0; h < 2; h++) {
        const __m128 v = h ? _mm256_extractf128_ps(t, 1) : _mm256_castps256_ps128(t);
        const __m128 s = _mm_add_ps(v, _mm_movehl_ps(v, v));
        out[h] = _mm_cvtss_f32(_mm_add_ss(s, _mm_movehdup_ps(s)));
    }
}

/* Weight rows p[0..2np) (np pairs: 1 or 2) against one activation row x: y[i] = dot(p[i], x). ahead:
 * the bytes from a row's block to the one its prefetch asks for (0: none). */
static ALWAYS_INLINE void pair_rows_x_block(int k, int np, const uint8_t *const p[4], const uint8_t *x, int64_t ib,
                                            size_t ahead, __m512i lut, __m512 acc[2])
{
    const size_t off = (size_t)ib * pk_bytes(k);
    if (ahead && (ib & 3) == 0)
        for (int i = 0; i < 2 * np; i++) {
            __builtin_prefetch(p[i] + off + ahead, 0, 3);
            __builtin_prefetch(p[i] + off + ahead + 64, 0, 3);
        }
    const mp_block_q8_0 *bx = (const mp_block_q8_0 *)x + ib;
    const __m512i xz = _mm512_castsi256_si512(loadu256(bx->qs));
    const __m512i xv = _mm512_shuffle_i32x4(xz, xz, 0x50); /* [lo | lo | hi | hi] */
    const __m128 dx = _mm_set1_ps(f16(bx->d));
    const __m128 sd = pk_scales_dx(k, p, off, dx);
    const __m128 sm = pk_min(k) >= 0 ? _mm_mul_ps(mp_f16x4(p, off + (size_t)pk_min(k)), dx) : sd;
    for (int j = 0; j < np; j++) {
        const __m512i w = pair_weights(k, p[2 * j] + off, p[2 * j + 1] + off, lut);
        acc[j] = pair_block(k, acc[j], w, xv, pair_scale(sd, j), pair_scale(sm, j));
    }
}

static ALWAYS_INLINE void pair_rows_x(int k, int np, int64_t n, const uint8_t *const p[4], const uint8_t *x,
                                      size_t ahead, float y[4])
{
    const __m512i lut = pk_lut(k);
    /* even and odd blocks' accumulators, unrolled so that they stay in registers */
    __m512 even[2] = {_mm512_setzero_ps(), _mm512_setzero_ps()}, odd[2] = {_mm512_setzero_ps(), _mm512_setzero_ps()};
    const int64_t nb = n / MP_QK8_0;
    int64_t ib = 0;
    for (; ib + 2 <= nb; ib += 2) {
        pair_rows_x_block(k, np, p, x, ib, ahead, lut, even);
        pair_rows_x_block(k, np, p, x, ib + 1, ahead, lut, odd);
    }
    if (ib < nb)
        pair_rows_x_block(k, np, p, x, ib, ahead, lut, even);
    for (int j = 0; j < np; j++)
        pair_sums(_mm512_add_ps(even[j], odd[j]), y + 2 * j);
}

static ALWAYS_INLINE void pair_row_xs_block(int k, int np, const uint8_t *w, const uint8_t *const q[4], int64_t ib,
                                            __m512i lut, __m512 acc[2])
{
    const size_t off = (size_t)ib * pk_bytes(k), xoff = (size_t)ib * sizeof(mp_block_q8_0);
    if ((ib & 3) == 0)
        mp_prefetch_weights(w + off, 4 * pk_bytes(k));
    const __m512i wv = pair_weights(k, w + off, w + off, lut); /* [lo | lo | hi | hi] */
    const __m128 dx = mp_f16x4(q, xoff + offsetof(mp_block_q8_0, d));
    const __m128 sd = _mm_mul_ps(_mm_set1_ps(pk_scale(k, w + off)), dx);
    const __m128 sm = pk_min(k) >= 0 ? _mm_mul_ps(_mm_set1_ps(pk_min_scale(k, w + off)), dx) : sd;
    for (int j = 0; j < np; j++) {
        const __m512i xz = _mm512_inserti64x4(
            _mm512_castsi256_si512(loadu256(q[2 * j] + xoff + offsetof(mp_block_q8_0, qs))),
            loadu256(q[2 * j + 1] + xoff + offsetof(mp_block_q8_0, qs)), 1);
        const __m512i xv = _mm512_shuffle_i32x4(xz, xz, 0xD8); /* [x0 lo | x1 lo | x0 hi | x1 hi] */
        acc[j] = pair_block(k, acc[j], wv, xv, pair_scale(sd, j), pair_scale(sm, j));
    }
}

/* One weight row w against activation rows q[0..2np): y[i] = dot(w, q[i]). */
static ALWAYS_INLINE void pair_row_xs(int k, int np, int64_t n, const uint8_t *w, const uint8_t *const q[4],
                                      float y[4])
{
    const __m512i lut = pk_lut(k);
    __m512 even[2] = {_mm512_setzero_ps(), _mm512_setzero_ps()}, odd[2] = {_mm512_setzero_ps(), _mm512_setzero_ps()};
    const int64_t nb = n / MP_QK8_0;
    int64_t ib = 0;
    for (; ib + 2 <= nb; ib += 2) {
        pair_row_xs_block(k, np, w, q, ib, lut, even);
        pair_row_xs_block(k, np, w, q, ib + 1, lut, odd);
    }
    if (ib < nb)
        pair_row_xs_block(k, np, w, q, ib, lut, even);
    for (int j = 0; j < np; j++)
        pair_sums(_mm512_add_ps(even[j], odd[j]), y + 2 * j);
}

/* the GEMV: four rows a step (two pairs), prefetched one group ahead (four_rows.h) */
static ALWAYS_INLINE void pair_gemv(int k, int64_t n, const uint8_t *w, size_t row_bytes, int64_t n_rows,
                                    const uint8_t *x, float *y)
{
    const size_t ahead = mp_four_rows_ahead(row_bytes);
    int64_t r = 0;
    for (; r + 4 <= n_rows; r += 4) {
        const uint8_t *const p[4] = {w + (size_t)r * row_bytes, w + (size_t)(r + 1) * row_bytes,
                                     w + (size_t)(r + 2) * row_bytes, w + (size_t)(r + 3) * row_bytes};
        pair_rows_x(k, 2, n, p, x, ahead, y + r);
    }
    if (r < n_rows) { /* 1..3 rows: the last one repeated where a pair lacks a row */
        const uint8_t *p[4];
        for (int i = 0; i < 4; i++)
            p[i] = w + (size_t)(r + i < n_rows ? r + i : n_rows - 1) * row_bytes;
        float t[4];
        if (n_rows - r <= 2)
            pair_rows_x(k, 1, n, p, x, 0, t);
        else
            pair_rows_x(k, 2, n, p, x, 0, t);
        for (int64_t i = 0; r + i < n_rows; i++)
            y[r + i] = t[i];
    }
}

static ALWAYS_INLINE void pair_multi(int k, int64_t n, const uint8_t *w, const uint8_t *x, size_t x_stride,
                                     int n_x, float *out)
{
    const uint8_t *q[4];
    for (int i = 0; i < 4; i++)
        q[i] = x + (size_t)(i < n_x ? i : n_x - 1) * x_stride;
    float t[4];
    if (n_x <= 2)
        pair_row_xs(k, 1, n, w, q, t);
    else
        pair_row_xs(k, 2, n, w, q, t);
    for (int i = 0; i < n_x; i++)
        out[i] = t[i];
}

#define DEFINE_PAIR_KERNELS(NAME, KIND)                                                                        \
    static float vec_dot_##NAME##_q8_0(int64_t n, const void *w, const void *x)                                \
    {                                                                                                          \
        const uint8_t *p[4] = {w, w, w, w};                                                                     \
        float t[4];                                                                                            \
        pair_rows_x(KIND, 1, n, p, x, mp_prefetch_distance, t);                                                \
        return t[0];                                                                                           \
    }                                                                                                          \
    static void vec_dot_multi_##NAME(int64_t n, const void *w, const void *x, size_t x_stride, int n_x,        \
                                     float *out)                                                               \
    {                                                                                                          \
        pair_multi(KIND, n, w, x, x_stride, n_x < MP_GEMM_TILE ? n_x : MP_GEMM_TILE, out);                     \
    }                                                                                                          \
    static void gemv_##NAME(int64_t n, const void *w, size_t row_bytes, int64_t n_rows, const void *x, float *y) \
    {                                                                                                          \
        pair_gemv(KIND, n, w, row_bytes, n_rows, x, y);                                                        \
    }

DEFINE_PAIR_KERNELS(iq4_nl, P_IQ4_NL)
DEFINE_PAIR_KERNELS(mxfp4, P_MXFP4)
DEFINE_PAIR_KERNELS(q4_1, P_Q4_1)
DEFINE_PAIR_KERNELS(q5_0, P_Q5_0)
DEFINE_PAIR_KERNELS(q5_1, P_Q5_1)
DEFINE_PAIR_KERNELS(q4_0, P_Q4_0)
DEFINE_PAIR_KERNELS(q8_0, P_Q8_0)

/* ---- IQ4_XS (activation row is Q8_K) ----
 *
 * Chunk c of a block (elements 64c .. 64c+63: sub-blocks 2c and 2c + 1) is qs[32c .. 32c+31]: each
 * 16 bytes' low nibbles, then their high nibbles. The levels go in unsigned (IQ4_NL's level + 128,
 * 1..241, one vpshufb per 128-bit lane), so vpdpbusd gives sum(u y) = sum(v y) + 128 sum(y) in int32
 * lanes (4 * 241 * 127 at most: too large for Q4_K's int16 packing); each lane's sum is converted and
 * multiplied by its sub-block's scale s_j - 32 in F32 (lanes 0-7 sub-block 2c, 8-15 sub-block
 * 2c + 1), and the 128 sum(y) terms come off in their own 8-lane chain from the bsums. */

/* The eight sub-block scales s_j - 32 as int32 lanes: the low nibbles from the scales_l word
 * shifted by 4j, bits 2j, 2j + 1 of scales_h on top. */
static inline __m256i iq4_xs_scales(const mp_block_iq4_xs *b)
{
    uint32_t l;
    memcpy(&l, b->scales_l, sizeof(l));
    const __m256i lo = _mm256_and_si256(_mm256_srlv_epi32(_mm256_set1_epi32((int)l), _mm256_setr_epi32(0, 4, 8, 12, 16, 20, 24, 28)),
                                        _mm256_set1_epi32(0x0F));
    const __m256i hi = _mm256_and_si256(_mm256_srlv_epi32(_mm256_set1_epi32(b->scales_h), _mm256_setr_epi32(0, 2, 4, 6, 8, 10, 12, 14)),
                                        _mm256_set1_epi32(3));
    return _mm256_sub_epi32(_mm256_or_si256(lo, _mm256_slli_epi32(hi, 4)), _mm256_set1_epi32(32));
}

static ALWAYS_INLINE void iq4_xs_block_dot(const mp_block_iq4_xs *b, const uint8_t *x, size_t x_stride, int n_x,
                                           __m512 *acc, __m256 *accm)
{
    const __m512i lut = _mm512_broadcast_i32x4(_mm_xor_si128(loadu128(k_iq4_nl_levels), _mm_set1_epi8((char)0x80)));
    __m512i u[4];
    for (int c = 0; c < 4; c++) {
        /* lanes [qs 0-15, qs 0-15, qs 16-31, qs 16-31], lanes 1 and 3 shifted to their high nibbles */
        const __m512i qz = _mm512_castsi256_si512(loadu256(b->qs + 32 * c));
        const __m512i q = _mm512_shuffle_i32x4(qz, qz, 0x50);
        const __m512i nib = _mm512_and_si512(_mm512_mask_mov_epi16(q, 0xFF00FF00u, _mm512_srli_epi16(q, 4)),
                                             _mm512_set1_epi8(0x0F));
        u[c] = _mm512_shuffle_epi8(lut, nib);
    }
    const __m256i s32 = iq4_xs_scales(b);
    const __m512 sf = _mm512_castps256_ps512(_mm256_cvtepi32_ps(s32));
    __m512 scale[4]; /* [s_2c x 8 | s_2c+1 x 8] */
    for (int c = 0; c < 4; c++)
        scale[c] = _mm512_permutexvar_ps(_mm512_inserti64x4(_mm512_set1_epi32(2 * c), _mm256_set1_epi32(2 * c + 1), 1), sf);
    /* each scale twice, as int16 words beside the bsums of its sub-block's two groups of 16 */
    const __m256i sc16 = _mm256_or_si256(_mm256_and_si256(s32, _mm256_set1_epi32(0xFFFF)), _mm256_slli_epi32(s32, 16));
    const float d = f16(b->d);
    for (int i = 0; i < n_x; i++) {
        const mp_block_q8_K *y = (const mp_block_q8_K *)(x + (size_t)i * x_stride);
        __m512 t = _mm512_mul_ps(_mm512_cvtepi32_ps(_mm512_dpbusd_epi32(_mm512_setzero_si512(), u[0], loadu512(y->qs))),
                                 scale[0]);
        for (int c = 1; c < 4; c++)
            t = _mm512_fmadd_ps(_mm512_cvtepi32_ps(_mm512_dpbusd_epi32(_mm512_setzero_si512(), u[c], loadu512(y->qs + 64 * c))),
                                scale[c], t);
        const float dy = d * q8_K_scale(y);
        acc[i] = _mm512_fmadd_ps(_mm512_set1_ps(dy), t, acc[i]);
        accm[i] = _mm256_fnmadd_ps(_mm256_set1_ps(128.0f * dy), _mm256_cvtepi32_ps(_mm256_madd_epi16(loadu256(y->bsums), sc16)),
                                   accm[i]);
    }
}

DEFINE_K_ROWS_DOT(iq4_xs_rows_dot, mp_block_iq4_xs, iq4_xs_block_dot)
DEFINE_K_VEC_DOTS(iq4_xs_rows_dot, vec_dot_iq4_xs_q8_K, vec_dot_multi_iq4_xs)

/* ---- the table ---- */

#define OPS(T, VDT, DQ, Q, VD, MULTI) \
    {.type = (T), .vec_dot_type = (VDT), .dequantize_row = (DQ), .quantize_row = (Q), .vec_dot = (VD), \
     .vec_dot_multi = (MULTI)}
/* The Q4_0/Q8_0 GEMMs from 4 activation rows: at 2 and 3 the multi-row dots are faster (33 / 44
 * against 44 / 46 G MAC/s for Q8_0), from 4 these (53, 71 at 6, 79 at 32 against 50; development
 * VM, Zen 5, bench_kernels --gemm 2,3,4,5,6 and 2,8,32,64, bench/NOTES-kernels.md) */
#define Q8_GEMM_MIN_ROWS 4
/* the blocks of 32's decode GEMV (two weight rows a vector, above); Q4_0 and Q8_0 add the GEMM */
#define OPS_GEMV(T, VDT, DQ, Q, VD, MULTI, GEMV) \
    {.type = (T), .vec_dot_type = (VDT), .dequantize_row = (DQ), .quantize_row = (Q), .vec_dot = (VD), \
     .vec_dot_multi = (MULTI), .gemv = (GEMV)}
/* A type whose one-row kernels (vec_dot, gemv) work in a lane order and whose multi-row dots do not */
#define OPS_LANES(T, DQ, Q, VD, MULTI, GEMV) \
    {.type = (T), .vec_dot_type = MP_TYPE_Q8_K, .dequantize_row = (DQ), .quantize_row = (Q), .vec_dot = (VD), \
     .vec_dot_multi = (MULTI), .multi_other_order = true, .gemv = (GEMV)}
#define OPS_GEMM(T, VDT, DQ, Q, VD, MULTI, GEMM, GEMV) \
    {.type = (T), .vec_dot_type = (VDT), .dequantize_row = (DQ), .quantize_row = (Q), .vec_dot = (VD), \
     .vec_dot_multi = (MULTI), .gemm = (GEMM), .gemm_min_rows = Q8_GEMM_MIN_ROWS, .gemv = (GEMV)}

static const mp_type_ops k_avx512_ops[] = {
    OPS(MP_TYPE_F32, MP_TYPE_F32, mp_dequantize_row_f32_scalar, mp_quantize_row_f32_ref, vec_dot_f32, NULL),
    OPS(MP_TYPE_F16, MP_TYPE_F32, dequantize_f16, mp_quantize_row_f16_ref, vec_dot_f16, NULL),
    OPS(MP_TYPE_BF16, MP_TYPE_F32, dequantize_bf16, mp_quantize_row_bf16_ref, vec_dot_bf16, NULL),
    OPS_GEMM(MP_TYPE_Q4_0, MP_TYPE_Q8_0, dequantize_q4_0, mp_quantize_row_q4_0_ref, vec_dot_q4_0_q8_0,
             vec_dot_multi_q4_0, gemm_q4_0, gemv_q4_0),
    OPS_GEMM(MP_TYPE_Q8_0, MP_TYPE_Q8_0, dequantize_q8_0, mp_quantize_row_q8_0_ref, vec_dot_q8_0_q8_0,
             vec_dot_multi_q8_0, gemm_q8_0, gemv_q8_0),
    /* Q4_K: the one-row kernels in the lane order (q4_K_unpack_lanes), the multi-row dots in element order */
    OPS_LANES(MP_TYPE_Q4_K, dequantize_q4_K, mp_quantize_row_q4_K_ref, vec_dot_q4_K_q8_K, vec_dot_multi_q4_K,
              gemv_q4_K),
    /* IQ4_NL, MXFP4, Q4_1, Q5_0, Q5_1: two dots a 512-bit vector (above); IQ4_XS: the AVX2 kernel (one
     * 256-bit register holds a sub-block); rows dequantized by the scalar reference */
    OPS_GEMV(MP_TYPE_Q4_1, MP_TYPE_Q8_0, mp_dequantize_row_q4_1_scalar, mp_quantize_row_q4_1_ref,
             vec_dot_q4_1_q8_0, vec_dot_multi_q4_1, gemv_q4_1),
    OPS_GEMV(MP_TYPE_Q5_0, MP_TYPE_Q8_0, mp_dequantize_row_q5_0_scalar, mp_quantize_row_q5_0_ref,
             vec_dot_q5_0_q8_0, vec_dot_multi_q5_0, gemv_q5_0),
    OPS_GEMV(MP_TYPE_Q5_1, MP_TYPE_Q8_0, mp_dequantize_row_q5_1_scalar, mp_quantize_row_q5_1_ref,
             vec_dot_q5_1_q8_0, vec_dot_multi_q5_1, gemv_q5_1),
    OPS_GEMV(MP_TYPE_IQ4_NL, MP_TYPE_Q8_0, mp_dequantize_row_iq4_nl_scalar, mp_quantize_row_iq4_nl_ref,
             vec_dot_iq4_nl_q8_0, vec_dot_multi_iq4_nl, gemv_iq4_nl),
    OPS_GEMV(MP_TYPE_MXFP4, MP_TYPE_Q8_0, mp_dequantize_row_mxfp4_scalar, mp_quantize_row_mxfp4_ref,
             vec_dot_mxfp4_q8_0, vec_dot_multi_mxfp4, gemv_mxfp4),
    OPS(MP_TYPE_IQ4_XS, MP_TYPE_Q8_K, mp_dequantize_row_iq4_xs_scalar, mp_quantize_row_iq4_xs_ref,
        vec_dot_iq4_xs_q8_K, vec_dot_multi_iq4_xs),
    /* Q2_K's, Q3_K's and Q5_K's rows are dequantized by the scalar reference (loaders and tests only) */
    OPS(MP_TYPE_Q2_K, MP_TYPE_Q8_K, mp_dequantize_row_q2_K_scalar, mp_quantize_row_q2_K_ref, vec_dot_q2_K_q8_K,
        vec_dot_multi_q2_K),
    OPS(MP_TYPE_Q3_K, MP_TYPE_Q8_K, mp_dequantize_row_q3_K_scalar, mp_quantize_row_q3_K_ref, vec_dot_q3_K_q8_K,
        vec_dot_multi_q3_K),
    OPS(MP_TYPE_Q5_K, MP_TYPE_Q8_K, mp_dequantize_row_q5_K_scalar, mp_quantize_row_q5_K_ref, vec_dot_q5_K_q8_K,
        vec_dot_multi_q5_K),
    OPS_LANES(MP_TYPE_Q6_K, dequantize_q6_K, mp_quantize_row_q6_K_ref, vec_dot_q6_K_q8_K, vec_dot_multi_q6_K,
              gemv_q6_K),
};

const mp_type_ops *mp_type_ops_avx512(int type)
{
    for (size_t i = 0; i < sizeof(k_avx512_ops) / sizeof(k_avx512_ops[0]); i++)
        if (k_avx512_ops[i].type == type)
            return &k_avx512_ops[i];
    return NULL;
}
