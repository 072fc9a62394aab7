/* kernels/cpu/quant_avx2.c — AVX2 + FMA + F16C kernels: vec_dot for every weight type, the
 * K-quant multi-row dots for GEMM tiles, and dequantize_row where a loader or test wants speed.
 *
 * Only called after dispatch.c saw avx2, fma and f16c in cpuid. Built with -ffp-contract=off:
 * the dequantizers issue exactly the scalar reference's float operations (mul, then sub), so
 * they are bit-identical to it and to the gguf package; the dot products use explicit FMAs.
 *
 * Where the time goes: decode streams every weight byte once per token, so these loops must
 * keep up with DRAM. The unpacking is not free: in cache the K-quant dots run at ~15 GB/s per
 * thread, so the weight stream is prefetched explicitly to overlap DRAM latency with it.
 * Integer invariants: 4-, 5- and 6-bit weights are unsigned in the products (Q4_K q in 0..15,
 * Q5_K q in 0..31, Q6_K u = q + 32 in 0..63) so maddubs never saturates: 2 * 63 * 128 < 32767. Signed-by-signed
 * products (Q4_0, Q8_0) move the sign of the weight onto the activation, which is safe because
 * activation quants are in [-127, 127] (quant_impl.h).
 * No alignment is assumed: every vector load is unaligned (GGUF rows sit at any 2-byte offset).
 */
#include <immintrin.h>
#include <math.h>
#include <string.h>

#include "kernels/cpu/quant_impl.h"
#include "kernels/cpu/four_rows.h"

static inline float hsum_ps(__m256 v)
{
    __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    s = _mm_add_ps(s, _mm_movehl_ps(s, s));
    s = _mm_add_ss(s, _mm_movehdup_ps(s));
    return _mm_cvtss_f32(s);
}

/* the per-block f16 scales through F16C (one instruction; the scalar converter branches) */
static inline float f16(mp_f16 h)
{
    return _cvtsh_ss(h);
}

static inline __m256i loadu256(const void *p)
{
    return _mm256_loadu_si256((const __m256i *)p);
}

static inline __m128i loadu128(const void *p)
{
    return _mm_loadu_si128((const __m128i *)p);
}

/* ---- float weights (activation row is F32) ---- */

static float vec_dot_f32(int64_t n, const void *w, const void *x)
{
    const uint8_t *pw = w; /* (n,) f32 */
    const float *px = x;   /* (n,) f32 */
    __m256 acc0 = _mm256_setzero_ps(), acc1 = acc0, acc2 = acc0, acc3 = acc0;
    int64_t i = 0;
    for (; i + 32 <= n; i += 32) {
        mp_prefetch_weights(pw + 4 * i, 128);
        acc0 = _mm256_fmadd_ps(_mm256_loadu_ps((const float *)(pw + 4 * i)), _mm256_loadu_ps(px + i), acc0);
        acc1 = _mm256_fmadd_ps(_mm256_loadu_ps((const float *)(pw + 4 * i + 32)), _mm256_loadu_ps(px + i + 8), acc1);
        acc2 = _mm256_fmadd_ps(_mm256_loadu_ps((const float *)(pw + 4 * i + 64)), _mm256_loadu_ps(px + i + 16), acc2);
        acc3 = _mm256_fmadd_ps(_mm256_loadu_ps((const float *)(pw + 4 * i + 96)), _mm256_loadu_ps(px + i + 24), acc3);
    }
    for (; i + 8 <= n; i += 8)
        acc0 = _mm256_fmadd_ps(_mm256_loadu_ps((const float *)(pw + 4 * i)), _mm256_loadu_ps(px + i), acc0);
    float sum = hsum_ps(_mm256_add_ps(_mm256_add_ps(acc0, acc1), _mm256_add_ps(acc2, acc3)));
    for (; i < n; i++) {
        float wi;
        memcpy(&wi, pw + 4 * i, sizeof(wi));
        sum += wi * px[i];
    }
    return sum;
}

static inline __m256 load_f16x8(const uint8_t *p)
{
    return _mm256_cvtph_ps(loadu128(p));
}

static inline __m256 load_bf16x8(const uint8_t *p)
{
    return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(loadu128(p)), 16));
}

#define DEFINE_VEC_DOT_HALF(NAME, LOAD8, TO_F32, HALF_T)                                            \
    static float NAME(int64_t n, const void *w, const void *x)                                      \
    {                                                                                               \
        const uint8_t *pw = w; /* (n,) 16-bit floats */                                             \
        const float *px = x;   /* (n,) f32 */                                                       \
        __m256 acc0 = _mm256_setzero_ps(), acc1 = acc0, acc2 = acc0, acc3 = acc0;                   \
        int64_t i = 0;                                                                              \
        for (; i + 32 <= n; i += 32) {                                                              \
            mp_prefetch_weights(pw + 2 * i, 64);                                                       \
            acc0 = _mm256_fmadd_ps(LOAD8(pw + 2 * i), _mm256_loadu_ps(px + i), acc0);               \
            acc1 = _mm256_fmadd_ps(LOAD8(pw + 2 * i + 16), _mm256_loadu_ps(px + i + 8), acc1);      \
            acc2 = _mm256_fmadd_ps(LOAD8(pw + 2 * i + 32), _mm256_loadu_ps(px + i + 16), acc2);     \
            acc3 = _mm256_fmadd_ps(LOAD8(pw + 2 * i + 48), _mm256_loadu_ps(px + i + 24), acc3);     \
        }                                                                                           \
        for (; i + 8 <= n; i += 8)                                                                  \
            acc0 = _mm256_fmadd_ps(LOAD8(pw + 2 * i), _mm256_loadu_ps(px + i), acc0);               \
        float sum = hsum_ps(_mm256_add_ps(_mm256_add_ps(acc0, acc1), _mm256_add_ps(acc2, acc3)));   \
        for (; i < n; i++) {                                                                        \
            HALF_T h;                                                                               \
            memcpy(&h, pw + 2 * i, sizeof(h));                                                      \
            sum += TO_F32(h) * px[i];                                                               \
        }                                                                                           \
        return sum;                                                                                 \
    }

DEFINE_VEC_DOT_HALF(vec_dot_f16, load_f16x8, mp_f16_to_f32, mp_f16)
DEFINE_VEC_DOT_HALF(vec_dot_bf16, load_bf16x8, mp_bf16_to_f32, mp_bf16)

static void dequantize_f16(const void *src, float *dst, int64_t n)
{
    const uint8_t *p = src; /* (n,) f16 */
    int64_t i = 0;
    for (; i + 8 <= n; i += 8)
        _mm256_storeu_ps(dst + i, load_f16x8(p + 2 * i));
    for (; i < n; i++) {
        mp_f16 h;
        memcpy(&h, p + 2 * i, sizeof(h));
        dst[i] = mp_f16_to_f32(h);
    }
}

static void dequantize_bf16(const void *src, float *dst, int64_t n)
{
    const uint8_t *p = src; /* (n,) bf16 */
    int64_t i = 0;
    for (; i + 8 <= n; i += 8)
        _mm256_storeu_ps(dst + i, load_bf16x8(p + 2 * i));
    for (; i < n; i++) {
        mp_bf16 h;
        memcpy(&h, p + 2 * i, sizeof(h));
        dst[i] = mp_bf16_to_f32(h);
    }
}

/* ---- Q4_0 and Q8_0 weights (activation row is Q8_0) ---- */

/* the 32 nibbles of a block of 32 in element order (low nibbles 0..15, high 16..31), as bytes */
static inline __m256i nibbles32(const uint8_t *qs)
{
    const __m128i b = loadu128(qs);
    return _mm256_and_si256(_mm256_set_m128i(_mm_srli_epi16(b, 4), b), _mm256_set1_epi8(0x0F));
}

/* the 32 nibbles of a Q4_0 block in element order, as signed bytes q - 8 */
static inline __m256i q4_0_unpack(const uint8_t *qs)
{
    return _mm256_sub_epi8(nibbles32(qs), _mm256_set1_epi8(8));
}

/* 0x10 in byte l where bit l of the little-endian word at qh is set (Q5_0/Q5_1's fifth bits) */
static inline __m256i fifth_bits(const uint8_t *qh)
{
    uint32_t bits;
    memcpy(&bits, qh, 4);
    const __m256i byte_of = _mm256_setr_epi8(0, 0, 0, 0, 0, 0, 0, 0, 1, 1, 1, 1, 1, 1, 1, 1, 2, 2, 2, 2, 2, 2, 2, 2,
                                             3, 3, 3, 3, 3, 3, 3, 3);
    const __m256i v = _mm256_shuffle_epi8(_mm256_set1_epi32((int)bits), byte_of);
    const __m256i sel = _mm256_set1_epi64x(0x8040201008040201ll);
    return _mm256_and_si256(_mm256_cmpeq_epi8(_mm256_and_si256(v, sel), sel), _mm256_set1_epi8(0x10));
}

/* The blocks of 32 that dot Q8_0 activations, by layout. Each yields its 32 integer levels as
 * bytes in element order, a scale d and (Q4_1, Q5_1) an offset m: x = d v + m. */
enum b32_kind { B32_Q4_0, B32_Q8_0, B32_Q4_1, B32_Q5_0, B32_Q5_1, B32_IQ4_NL, B32_MXFP4 };

static inline size_t b32_bytes(int kind)
{
    switch (kind) {
    case B32_Q4_0: return sizeof(mp_block_q4_0);
    case B32_Q8_0: return sizeof(mp_block_q8_0);
    case B32_Q4_1: return sizeof(mp_block_q4_1);
    case B32_Q5_0: return sizeof(mp_block_q5_0);
    case B32_Q5_1: return sizeof(mp_block_q5_1);
    case B32_IQ4_NL: return sizeof(mp_block_iq4_nl);
    default: return sizeof(mp_block_mxfp4);
    }
}

static inline int b32_has_min(int kind)
{
    return kind == B32_Q4_1 || kind == B32_Q5_1;
}

static inline __m256i lookup16(const int8_t *levels, __m256i nib)
{
    return _mm256_shuffle_epi8(_mm256_broadcastsi128_si256(loadu128(levels)), nib);
}

static const int8_t k_iq4_nl_levels[16] = MP_IQ4_NL_LEVELS;
static const int8_t k_mxfp4_levels[16] = MP_MXFP4_LEVELS;

/* The 32 levels of block ib, as bytes: signed (Q4_0 -8..7, Q8_0, Q5_0 -16..15, IQ4_NL, MXFP4) or
 * unsigned 0..31 (Q4_1, Q5_1), all within [-127, 127] so dot_i8x32_sums' sign trick holds. */
static inline __m256i b32_weights(const uint8_t *w, int kind, int64_t ib)
{
    const uint8_t *b = w + (size_t)ib * b32_bytes(kind);
    switch (kind) {
    case B32_Q4_0: return q4_0_unpack(b + offsetof(mp_block_q4_0, qs));
    case B32_Q8_0: return loadu256(b + offsetof(mp_block_q8_0, qs));
    case B32_Q4_1: return nibbles32(b + offsetof(mp_block_q4_1, qs));
    case B32_Q5_0:
        return _mm256_sub_epi8(_mm256_or_si256(nibbles32(b + offsetof(mp_block_q5_0, qs)),
                                               fifth_bits(b + offsetof(mp_block_q5_0, qh))),
                               _mm256_set1_epi8(16));
    case B32_Q5_1:
        return _mm256_or_si256(nibbles32(b + offsetof(mp_block_q5_1, qs)), fifth_bits(b + offsetof(mp_block_q5_1, qh)));
    case B32_IQ4_NL: return lookup16(k_iq4_nl_levels, nibbles32(b + offsetof(mp_block_iq4_nl, qs)));
    default: return lookup16(k_mxfp4_levels, nibbles32(b + offsetof(mp_block_mxfp4, qs)));
    }
}

static inline float b32_scale(const uint8_t *w, int kind, int64_t ib)
{
    const uint8_t *b = w + (size_t)ib * b32_bytes(kind);
    if (kind == B32_MXFP4)
        return mp_e8m0_half(b[0]);
    mp_f16 d; /* the first field of every other layout */
    memcpy(&d, b, 2);
    return f16(d);
}

static inline float b32_min(const uint8_t *w, int kind, int64_t ib)
{
    mp_f16 m; /* Q4_1 and Q5_1: the second field */
    memcpy(&m, w + (size_t)ib * b32_bytes(kind) + 2, 2);
    return f16(m);
}

/* One weight row against n_x Q8_0 activation rows, or four weight rows against one: the blocks of 32
 * with the four dots of a step in one vector. A block's dot of 32 products is eight int32 sums of four
 * (dot_i8x32_sums: lanes 0..3 elements 0..15, lanes 4..7 16..31); two horizontal adds fold four dots'
 * sums into [d0 d1 d2 d3 | d0 d1 d2 d3] (each a sum of sixteen, exact), one convert and one FMA by
 * [s0 s1 s2 s3 | ...] (s = d_w d_x) then take the block for all four, even and odd blocks in two
 * accumulators; Q4_1 and Q5_1 add their activation sums of sixteen times m_w d_x the same way. A dot
 * ends as the sum of its two lanes. The decode GEMV puts four weight rows in a step, the multi-row dot
 * four activation rows, vec_dot one row (its sums folded with themselves): a dot's arithmetic is the
 * same lane for lane in all three, so they agree bit for bit and a row's result does not depend on
 * the rows beside it. Against one dot a vector (a convert, a broadcast scale and an FMA per block and
 * dot, two scalar f16 conversions) this shares the converts, FMAs and activation loads four ways and
 * converts four scales at once. */

/* 32 signed weights · 32 signed activations -> 8 lanes of int32 sums of four; the sign of each weight
 * moves onto its activation (|x| <= 127 stays in range) */
static inline __m256i dot_i8x32_sums(__m256i w, __m256i x)
{
    const __m256i p16 = _mm256_maddubs_epi16(_mm256_sign_epi8(w, w), _mm256_sign_epi8(x, w));
    return _mm256_madd_epi16(p16, _mm256_set1_epi16(1));
}

/* four dots' eight sums each as [d0 d1 d2 d3 | d0 d1 d2 d3] (lo half: elements 0..15, hi: 16..31) */
static inline __m256i fold4(__m256i a, __m256i b, __m256i c, __m256i d)
{
    return _mm256_hadd_epi32(_mm256_hadd_epi32(a, b), _mm256_hadd_epi32(c, d));
}

/* the activation block's sums of four (Q4_1 / Q5_1's offset term) */
static inline __m256i xsums8(__m256i x)
{
    return _mm256_madd_epi16(_mm256_maddubs_epi16(_mm256_set1_epi8(1), x), _mm256_set1_epi16(1));
}

/* four blocks' scales (at p[i] + off): f16, or MXFP4's E8M0 */
static inline __m128 b32_scales4(int kind, const uint8_t *const p[4], size_t off)
{
    return kind == B32_MXFP4 ? mp_e8m0x4(p, off) : mp_f16x4(p, off);
}

static inline __m256 twice(__m128 s)
{
    return _mm256_set_m128(s, s);
}

/* Weight rows p[0..4) (nr = 4; nr = 1: p[0] alone) against one activation row x: y[i] = dot(p[i], x).
 * ahead: the bytes from a row's block to the one its prefetch asks for (0: none). */
static inline __attribute__((always_inline)) __m256 b32_rows4_x_block(int kind, int nr, const uint8_t *const p[4],
                                                                       const uint8_t *x, int64_t ib, size_t ahead,
                                                                       __m256 acc)
{
    const size_t off = (size_t)ib * b32_bytes(kind);
    if (ahead && (ib & 3) == 0)
        for (int i = 0; i < nr; i++) {
            __builtin_prefetch(p[i] + off + ahead, 0, 3);
            __builtin_prefetch(p[i] + off + ahead + 64, 0, 3);
        }
    const mp_block_q8_0 *bx = (const mp_block_q8_0 *)x + ib;
    const __m256i xq = loadu256(bx->qs);
    __m256i h;
    __m128 s, m = _mm_setzero_ps();
    const __m128 dx = _mm_set1_ps(f16(bx->d));
    if (nr == 1) {
        const __m256i d0 = dot_i8x32_sums(b32_weights(p[0], kind, ib), xq);
        h = fold4(d0, d0, d0, d0);
        s = _mm_set1_ps(b32_scale(p[0], kind, ib));
        if (b32_has_min(kind))
            m = _mm_set1_ps(b32_min(p[0], kind, ib));
    } else {
        h = fold4(dot_i8x32_sums(b32_weights(p[0], kind, ib), xq), dot_i8x32_sums(b32_weights(p[1], kind, ib), xq),
                  dot_i8x32_sums(b32_weights(p[2], kind, ib), xq), dot_i8x32_sums(b32_weights(p[3], kind, ib), xq));
        s = b32_scales4(kind, p, off);
        if (b32_has_min(kind))
            m = mp_f16x4(p, off + 2);
    }
    acc = _mm256_fmadd_ps(_mm256_cvtepi32_ps(h), twice(_mm_mul_ps(s, dx)), acc);
    if (b32_has_min(kind)) {
        const __m256i xs = xsums8(xq);
        acc = _mm256_fmadd_ps(_mm256_cvtepi32_ps(fold4(xs, xs, xs, xs)), twice(_mm_mul_ps(m, dx)), acc);
    }
    return acc;
}

/* the sums of a step's dots in lanes i and i + 4 of even + odd: y[i] for i < nr */
static inline void b32_sums(__m256 even, __m256 odd, int nr, float *y)
{
    float v[8];
    _mm256_storeu_ps(v, _mm256_add_ps(even, odd));
    for (int i = 0; i < nr; i++)
        y[i] = v[i] + v[i + 4];
}

static inline __attribute__((always_inline)) void b32_rows4_x(int kind, int nr, int64_t n, const uint8_t *const p[4],
                                                              const uint8_t *x, size_t ahead, float *y)
{
    const int64_t nb = n / MP_QK8_0;
    __m256 even = _mm256_setzero_ps(), odd = _mm256_setzero_ps(); /* unrolled: both stay in registers */
    int64_t ib = 0;
    for (; ib + 2 <= nb; ib += 2) {
        even = b32_rows4_x_block(kind, nr, p, x, ib, ahead, even);
        odd = b32_rows4_x_block(kind, nr, p, x, ib + 1, ahead, odd);
    }
    if (ib < nb)
        even = b32_rows4_x_block(kind, nr, p, x, ib, ahead, even);
    b32_sums(even, odd, nr, y);
}

/* One weight row w against activation rows q[0..nx) (nx 2..4; q[nx..4) repeat the last): y[i] =
 * dot(w, q[i]). */
static inline __attribute__((always_inline)) __m256 b32_row_x4_block(int kind, const uint8_t *w,
                                                                      const uint8_t *const q[4], int nx, int64_t ib,
                                                                      __m256 acc)
{
    const size_t xoff = (size_t)ib * sizeof(mp_block_q8_0);
    if ((ib & 1) == 0)
        mp_prefetch_weights(w + (size_t)ib * b32_bytes(kind), 2 * b32_bytes(kind));
    const __m256i wq = b32_weights(w, kind, ib);
    const __m256i x0 = loadu256(q[0] + xoff + offsetof(mp_block_q8_0, qs));
    const __m256i x1 = loadu256(q[1] + xoff + offsetof(mp_block_q8_0, qs));
    const __m256i h01 = _mm256_hadd_epi32(dot_i8x32_sums(wq, x0), dot_i8x32_sums(wq, x1));
    __m256i x2 = x0, x3 = x1, h;
    if (nx <= 2) { /* lanes 2, 3 (and 6, 7) are never read: one fold fewer, lanes 0, 1 the same exact sums */
        h = _mm256_hadd_epi32(h01, h01);
    } else {
        x2 = loadu256(q[2] + xoff + offsetof(mp_block_q8_0, qs));
        x3 = loadu256(q[3] + xoff + offsetof(mp_block_q8_0, qs));
        h = _mm256_hadd_epi32(h01, _mm256_hadd_epi32(dot_i8x32_sums(wq, x2), dot_i8x32_sums(wq, x3)));
    }
    const __m128 dx = mp_f16x4(q, xoff + offsetof(mp_block_q8_0, d));
    acc = _mm256_fmadd_ps(_mm256_cvtepi32_ps(h), twice(_mm_mul_ps(_mm_set1_ps(b32_scale(w, kind, ib)), dx)), acc);
    if (b32_has_min(kind)) {
        const __m256i xs = fold4(xsums8(x0), xsums8(x1), xsums8(x2), xsums8(x3));
        acc = _mm256_fmadd_ps(_mm256_cvtepi32_ps(xs), twice(_mm_mul_ps(_mm_set1_ps(b32_min(w, kind, ib)), dx)), acc);
    }
    return acc;
}

static inline __attribute__((always_inline)) void b32_row_x4(int kind, int64_t n, const uint8_t *w,
                                                             const uint8_t *const q[4], int nx, float y[4])
{
    const int64_t nb = n / MP_QK8_0;
    __m256 even = _mm256_setzero_ps(), odd = _mm256_setzero_ps();
    int64_t ib = 0;
    for (; ib + 2 <= nb; ib += 2) {
        even = b32_row_x4_block(kind, w, q, nx, ib, even);
        odd = b32_row_x4_block(kind, w, q, nx, ib + 1, odd);
    }
    if (ib < nb)
        even = b32_row_x4_block(kind, w, q, nx, ib, even);
    b32_sums(even, odd, 4, y);
}

/* the GEMV: four rows a step, prefetched one group ahead (four_rows.h) */
static inline __attribute__((always_inline)) void b32_gemv(int kind, int64_t n, const uint8_t *w, size_t row_bytes,
                                                           int64_t n_rows, const uint8_t *x, float *y)
{
    const size_t ahead = mp_four_rows_ahead(row_bytes);
    int64_t r = 0;
    for (; r + 4 <= n_rows; r += 4) {
        const uint8_t *const p[4] = {w + (size_t)r * row_bytes, w + (size_t)(r + 1) * row_bytes,
                                     w + (size_t)(r + 2) * row_bytes, w + (size_t)(r + 3) * row_bytes};
        b32_rows4_x(kind, 4, n, p, x, ahead, y + r);
    }
    for (; r < n_rows; r++) {
        const uint8_t *const p[4] = {w + (size_t)r * row_bytes, NULL, NULL, NULL};
        b32_rows4_x(kind, 1, n, p, x, 0, y + r);
    }
}

/* vec_dot, vec_dot_multi and the GEMV of one kind */
#define DEFINE_B32_DOTS(NAME, KIND)                                                                        \
    static float mp_vec_dot_##NAME##_q8_0_avx2(int64_t n, const void *w, const void *x)                    \
    {                                                                                                      \
        const uint8_t *const p[4] = {w, NULL, NULL, NULL};                                                 \
        float out;                                                                                         \
        b32_rows4_x(KIND, 1, n, p, x, mp_prefetch_distance, &out);                                         \
        return out;                                                                                        \
    }                                                                                                      \
    static void mp_vec_dot_multi_##NAME##_avx2(int64_t n, const void *w, const void *x, size_t x_stride,   \
                                               int n_x, float *out)                                        \
    {                                                                                                      \
        n_x = n_x < MP_GEMM_TILE ? n_x : MP_GEMM_TILE;                                                     \
        if (n_x == 1) { /* vec_dot's arithmetic, as the four-row vector's lane 0 */                          \
            out[0] = mp_vec_dot_##NAME##_q8_0_avx2(n, w, x);                                                \
            return;                                                                                        \
        }                                                                                                  \
        const uint8_t *q[4];                                                                               \
        for (int i = 0; i < 4; i++)                                                                        \
            q[i] = (const uint8_t *)x + (size_t)(i < n_x ? i : n_x - 1) * x_stride;                        \
        float t[4];                                                                                        \
        b32_row_x4(KIND, n, w, q, n_x, t);                                                                 \
        for (int i = 0; i < n_x; i++)                                                                      \
            out[i] = t[i];                                                                                 \
    }                                                                                                      \
    static void gemv_##NAME##_avx2(int64_t n, const void *w, size_t row_bytes, int64_t n_rows, const void *x, \
                                   float *y)                                                               \
    {                                                                                                      \
        b32_gemv(KIND, n, w, row_bytes, n_rows, x, y);                                                     \
    }

DEFINE_B32_DOTS(q4_0, B32_Q4_0)
DEFINE_B32_DOTS(q8_0, B32_Q8_0)
DEFINE_B32_DOTS(q4_1, B32_Q4_1)
DEFINE_B32_DOTS(q5_0, B32_Q5_0)
DEFINE_B32_DOTS(q5_1, B32_Q5_1)
DEFINE_B32_DOTS(iq4_nl, B32_IQ4_NL)
DEFINE_B32_DOTS(mxfp4, B32_MXFP4)

static void dequantize_q4_0(const void *src, float *dst, int64_t n)
{
    const mp_block_q4_0 *b = src; /* (n / 32,) */
    for (int64_t ib = 0; ib < n / MP_QK4_0; ib++) {
        const __m256 d = _mm256_set1_ps(f16(b[ib].d));
        const __m256i q = q4_0_unpack(b[ib].qs);
        for (int k = 0; k < 4; k++) {
            const __m128i q8 = k < 2 ? _mm256_castsi256_si128(q) : _mm256_extracti128_si256(q, 1);
            const __m128i part = (k & 1) ? _mm_srli_si128(q8, 8) : q8;
            const __m256 v = _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(part));
            _mm256_storeu_ps(dst + ib * MP_QK4_0 + 8 * k, _mm256_mul_ps(d, v));
        }
    }
}

static void dequantize_q8_0(const void *src, float *dst, int64_t n)
{
    const mp_block_q8_0 *b = src; /* (n / 32,) */
    for (int64_t ib = 0; ib < n / MP_QK8_0; ib++) {
        const __m256 d = _mm256_set1_ps(f16(b[ib].d));
        for (int k = 0; k < 4; k++) {
            const __m128i part = _mm_loadl_epi64((const __m128i *)(b[ib].qs + 8 * k));
            const __m256 v = _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(part));
            _mm256_storeu_ps(dst + ib * MP_QK8_0 + 8 * k, _mm256_mul_ps(v, d));
        }
    }
}

/* ---- Q2_K and Q3_K (activation row is Q8_K) ---- */

/* The 8 runs of 32 quants of a Q2_K/Q3_K block, one per byte in element order: run k = 4h + j is
 * elements 32k..32k+31, bits 2j of qs[32h..32h+31] (quant.h); Q3_K adds 4 where bit k of hmask[l]
 * is set, so that u = q + 4 in 0..7 (16-bit shifts by less than 8, masked per byte). */
static inline void k2_runs(const uint8_t *qs, const uint8_t *hmask, __m256i u[8])
{
    const __m256i m3 = _mm256_set1_epi8(3), one = _mm256_set1_epi8(1);
    const __m256i hm = hmask ? loadu256(hmask) : _mm256_setzero_si256();
    for (int h = 0; h < 2; h++) {
        const __m256i v = loadu256(qs + 32 * h);
        for (int j = 0; j < 4; j++) {
            const int k = 4 * h + j;
            u[k] = _mm256_and_si256(_mm256_srli_epi16(v, 2 * j), m3);
            if (hmask)
                u[k] = _mm256_or_si256(u[k], _mm256_slli_epi16(_mm256_and_si256(_mm256_srli_epi16(hm, k), one), 2));
        }
    }
}

/* The int32 sums of (group scale) * sum(u y) over a block's 16 groups of 16, for one Q8_K row:
 * run k's maddubs gives 16 int16 pair sums, lanes 0-7 of group 2k and 8-15 of group 2k + 1, which
 * one madd against [sc_2k x 8, sc_2k+1 x 8] scales. u in 0..7 keeps maddubs exact (2 * 7 * 127). */
static inline __m256i k2_scaled_sums(const __m256i u[8], const __m256i scale[8], const mp_block_q8_K *y)
{
    __m256i sumi = _mm256_setzero_si256();
    for (int k = 0; k < 8; k++)
        sumi = _mm256_add_epi32(sumi, _mm256_madd_epi16(_mm256_maddubs_epi16(u[k], loadu256(y->qs + 32 * k)), scale[k]));
    return sumi;
}

/* scale[k] = [s[2k] x 8 | s[2k + 1] x 8] for 16 int8 group scales s8 (signed): as int16 words,
 * each half of the block's scales broadcast to both 128-bit lanes, then one byte shuffle per run
 * (within a lane: the low lane picks word 2k % 8, the high lane word 2k % 8 + 1). */
static inline void k2_scale_vectors(__m128i s8, __m256i scale[8])
{
    const __m256i s16 = _mm256_cvtepi8_epi16(s8);
    const __m256i half[2] = {_mm256_permute2x128_si256(s16, s16, 0x00), _mm256_permute2x128_si256(s16, s16, 0x11)};
    for (int k = 0; k < 8; k++) {
        const int w = 2 * (k % 4); /* word of the half */
        const __m256i pick = _mm256_setr_epi8(
            2 * w, 2 * w + 1, 2 * w, 2 * w + 1, 2 * w, 2 * w + 1, 2 * w, 2 * w + 1, 2 * w, 2 * w + 1, 2 * w,
            2 * w + 1, 2 * w, 2 * w + 1, 2 * w, 2 * w + 1, 2 * w + 2, 2 * w + 3, 2 * w + 2, 2 * w + 3, 2 * w + 2,
            2 * w + 3, 2 * w + 2, 2 * w + 3, 2 * w + 2, 2 * w + 3, 2 * w + 2, 2 * w + 3, 2 * w + 2, 2 * w + 3,
            2 * w + 2, 2 * w + 3);
        scale[k] = _mm256_shuffle_epi8(half[k / 4], pick);
    }
}

static inline void q2_K_block_dot(const mp_block_q2_K *b, const uint8_t *x, size_t x_stride, int n_x, __m256 *acc)
{
    __m256i u[8], scale[8];
    k2_runs(b->qs, NULL, u);
    const __m128i s8 = loadu128(b->scales);
    k2_scale_vectors(_mm_and_si128(s8, _mm_set1_epi8(0x0F)), scale);
    const __m256i mins16 = _mm256_cvtepu8_epi16(_mm_and_si128(_mm_srli_epi16(s8, 4), _mm_set1_epi8(0x0F)));
    const float d = f16(b->d), dmin = f16(b->dmin);
    for (int i = 0; i < n_x; i++) {
        const mp_block_q8_K *y = (const mp_block_q8_K *)(x + (size_t)i * x_stride);
        const __m256i sumi = k2_scaled_sums(u, scale, y);
        const __m256i summ = _mm256_madd_epi16(loadu256(y->bsums), mins16);
        acc[i] = _mm256_fmadd_ps(_mm256_set1_ps(d * y->d), _mm256_cvtepi32_ps(sumi), acc[i]);
        acc[i] = _mm256_fnmadd_ps(_mm256_set1_ps(dmin * y->d), _mm256_cvtepi32_ps(summ), acc[i]);
    }
}

/* Q3_K: sum(q y) = sum(u y) - 4 sum(y), and sum(y) of a group is its bsum */
static inline void q3_K_block_dot(const mp_block_q3_K *b, const uint8_t *x, size_t x_stride, int n_x, __m256 *acc)
{
    __m256i u[8], scale[8];
    k2_runs(b->qs, b->hmask, u);
    uint32_t w[4];
    mp_q3_K_scale_words(b->scales, w);
    const __m128i s8 = _mm_sub_epi8(_mm_setr_epi32((int)w[0], (int)w[1], (int)w[2], (int)w[3]), _mm_set1_epi8(32));
    k2_scale_vectors(s8, scale);
    const __m256i sc16 = _mm256_cvtepi8_epi16(s8);
    const float d = f16(b->d);
    for (int i = 0; i < n_x; i++) {
        const mp_block_q8_K *y = (const mp_block_q8_K *)(x + (size_t)i * x_stride);
        const __m256i offs = _mm256_slli_epi32(_mm256_madd_epi16(loadu256(y->bsums), sc16), 2);
        const __m256i sumi = _mm256_sub_epi32(k2_scaled_sums(u, scale, y), offs);
        acc[i] = _mm256_fmadd_ps(_mm256_set1_ps(d * y->d), _mm256_cvtepi32_ps(sumi), acc[i]);
    }
}

/* vec_dot and the GEMM tile of a K-quant whose block dot is BLOCK_DOT */
#define DEFINE_K_AVX2(DOT, MULTI, BLOCK_T, BLOCK_DOT)                                          \
    static float DOT(int64_t n, const void *w, const void *x)                                       \
    {                                                                                               \
        const BLOCK_T *bw = w; /* (n / 256,) */                                                     \
        const uint8_t *px = x; /* (n / 256,) Q8_K blocks */                                         \
        __m256 acc = _mm256_setzero_ps();                                                           \
        for (int64_t ib = 0; ib < n / MP_QK_K; ib++) {                                              \
            mp_prefetch_weights(bw + ib, sizeof(*bw));                                              \
            BLOCK_DOT(&bw[ib], px + ib * sizeof(mp_block_q8_K), 0, 1, &acc);                        \
        }                                                                                           \
        return hsum_ps(acc);                                                                        \
    }                                                                                               \
    static void MULTI(int64_t n, const void *w, const void *x, size_t x_stride, int n_x, float *out)    \
    {                                                                                               \
        const BLOCK_T *bw = w; /* (n / 256,) */                                                     \
        const uint8_t *px = x; /* (n_x, x_stride) rows of Q8_K blocks */                            \
        __m256 acc[MP_GEMM_TILE];                                                                   \
        for (int i = 0; i < MP_GEMM_TILE; i++)                                                      \
            acc[i] = _mm256_setzero_ps();                                                           \
        if (n_x > MP_GEMM_TILE)                                                                     \
            n_x = MP_GEMM_TILE;                                                                     \
        for (int64_t ib = 0; ib < n / MP_QK_K; ib++) {                                              \
            mp_prefetch_weights(bw + ib, sizeof(*bw));                                              \
            BLOCK_DOT(&bw[ib], px + ib * sizeof(mp_block_q8_K), x_stride, n_x, acc);                \
        }                                                                                           \
        for (int i = 0; i < n_x; i++)                                                               \
            out[i] = hsum_ps(acc[i]);                                                               \
    }

DEFINE_K_AVX2(vec_dot_q2_K_q8_K, vec_dot_multi_q2_K, mp_block_q2_K, q2_K_block_dot)
DEFINE_K_AVX2(vec_dot_q3_K_q8_K, vec_dot_multi_q3_K, mp_block_q3_K, q3_K_block_dot)

/* ---- IQ4_XS (activation row is Q8_K) ---- */

/* One IQ4_XS block against n_x Q8_K blocks: per sub-block j, its 32 levels (pshufb) dotted with the
 * activation's 32 quants (the sign moved onto the activation: |v|, |x| <= 127), widened to 8 int32
 * lanes by a multiply-add with the sub-block's s_j - 32; the block's sum times d d_x into acc[i]. */
static inline void iq4_xs_block_dot(const mp_block_iq4_xs *b, const uint8_t *x, size_t x_stride, int n_x,
                                    __m256 *acc)
{
    __m256i v[8];
    int sc[8];
    for (int j = 0; j < 8; j++) {
        v[j] = lookup16(k_iq4_nl_levels, nibbles32(b->qs + 16 * j));
        sc[j] = mp_iq4_xs_scale(b, j) - 32;
    }
    const float d = f16(b->d);
    for (int i = 0; i < n_x; i++) {
        const mp_block_q8_K *bx = (const mp_block_q8_K *)(x + (size_t)i * x_stride);
        __m256i isum = _mm256_setzero_si256();
        for (int j = 0; j < 8; j++) {
            /* pair sums |v x| <= 2 * 127 * 127 fit int16 (no saturation); madd by the scale
             * folds the sub-block scale into the widening add */
            const __m256i xq = loadu256(bx->qs + 32 * j);
            const __m256i p16 = _mm256_maddubs_epi16(_mm256_sign_epi8(v[j], v[j]), _mm256_sign_epi8(xq, v[j]));
            isum = _mm256_add_epi32(isum, _mm256_madd_epi16(p16, _mm256_set1_epi16((short)sc[j])));
        }
        acc[i] = _mm256_fmadd_ps(_mm256_set1_ps(d * bx->d), _mm256_cvtepi32_ps(isum), acc[i]);
    }
}

DEFINE_K_AVX2(vec_dot_iq4_xs_q8_K, vec_dot_multi_iq4_xs, mp_block_iq4_xs, iq4_xs_block_dot)

/* ---- Q4_K and Q5_K (activation row is Q8_K) ---- */

/* One Q4_K or Q5_K weight block (its d, dmin and packed scales, the same in both; lo/hi: its four
 * chunks' low- and high-half quants, one per byte) against n_x Q8_K blocks (x_stride bytes
 * apart): acc[i] += the block's contribution, kept as 8 float lanes. The unpacked quants are
 * shared by all n_x rows. */
static inline void affine_K_block_dot(mp_f16 d_h, mp_f16 dmin_h, const uint8_t *scales, const __m256i lo[4],
                                      const __m256i hi[4], const uint8_t *x, size_t x_stride, int n_x, __m256 *acc)
{
    uint8_t sc[8], m[8];
    mp_q4_K_unpack_scales(scales, sc, m);
    /* each min repeated for its two bsums: lanes (2j, 2j+1) = m[j] */
    __m128i m8 = _mm_loadl_epi64((const __m128i *)m);
    const __m256i mins16 = _mm256_cvtepu8_epi16(_mm_unpacklo_epi8(m8, m8));
    const float d = f16(d_h), dmin = f16(dmin_h);
    for (int i = 0; i < n_x; i++) {
        const mp_block_q8_K *y = (const mp_block_q8_K *)(x + (size_t)i * x_stride);
        __m256i sumi = _mm256_setzero_si256();
        for (int c = 0; c < 4; c++) {
            const __m256i p0 = _mm256_maddubs_epi16(lo[c], loadu256(y->qs + 64 * c));
            const __m256i p1 = _mm256_maddubs_epi16(hi[c], loadu256(y->qs + 64 * c + 32));
            sumi = _mm256_add_epi32(sumi, _mm256_madd_epi16(p0, _mm256_set1_epi16(sc[2 * c])));
            sumi = _mm256_add_epi32(sumi, _mm256_madd_epi16(p1, _mm256_set1_epi16(sc[2 * c + 1])));
        }
        const __m256i summ = _mm256_madd_epi16(loadu256(y->bsums), mins16);
        acc[i] = _mm256_fmadd_ps(_mm256_set1_ps(d * y->d), _mm256_cvtepi32_ps(sumi), acc[i]);
        acc[i] = _mm256_fnmadd_ps(_mm256_set1_ps(dmin * y->d), _mm256_cvtepi32_ps(summ), acc[i]);
    }
}

static inline void q4_K_block_dot(const mp_block_q4_K *b, const uint8_t *x, size_t x_stride, int n_x,
                                  __m256 *acc)
{
    const __m256i mask = _mm256_set1_epi8(0x0F);
    __m256i lo[4], hi[4];
    for (int c = 0; c < 4; c++) {
        const __m256i q = loadu256(b->qs + 32 * c);
        lo[c] = _mm256_and_si256(q, mask);
        hi[c] = _mm256_and_si256(_mm256_srli_epi16(q, 4), mask);
    }
    affine_K_block_dot(b->d, b->dmin, b->scales, lo, hi, x, x_stride, n_x, acc);
}

/* Q5_K: Q4_K's quants with each element's fifth bit from qh: sub-block j's bit is bit j of qh[l],
 * moved to bit 4 of its byte (16-bit shifts: a byte's bit 0 after the right shift is its own bit
 * j, and values below 16 shifted left by 4 stay inside their byte). q in 0..31 keeps maddubs
 * clear of saturation: 2 * 31 * 127 < 32767. */
static inline void q5_K_block_dot(const mp_block_q5_K *b, const uint8_t *x, size_t x_stride, int n_x,
                                  __m256 *acc)
{
    const __m256i mask = _mm256_set1_epi8(0x0F), one = _mm256_set1_epi8(1);
    const __m256i qh = loadu256(b->qh);
    __m256i lo[4], hi[4];
    for (int c = 0; c < 4; c++) {
        const __m256i q = loadu256(b->qs + 32 * c);
        const __m256i h0 = _mm256_slli_epi16(_mm256_and_si256(_mm256_srli_epi16(qh, 2 * c), one), 4);
        const __m256i h1 = _mm256_slli_epi16(_mm256_and_si256(_mm256_srli_epi16(qh, 2 * c + 1), one), 4);
        lo[c] = _mm256_or_si256(_mm256_and_si256(q, mask), h0);
        hi[c] = _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(q, 4), mask), h1);
    }
    affine_K_block_dot(b->d, b->dmin, b->scales, lo, hi, x, x_stride, n_x, acc);
}

DEFINE_K_AVX2(vec_dot_q4_K_q8_K, vec_dot_multi_q4_K, mp_block_q4_K, q4_K_block_dot)

DEFINE_K_AVX2(vec_dot_q5_K_q8_K, vec_dot_multi_q5_K, mp_block_q5_K, q5_K_block_dot)

static void dequantize_q4_K(const void *src, float *dst, int64_t n)
{
    const mp_block_q4_K *b = src; /* (n / 256,) */
    for (int64_t ib = 0; ib < n / MP_QK_K; ib++) {
        uint8_t sc[8], m[8];
        mp_q4_K_unpack_scales(b[ib].scales, sc, m);
        const float d = f16(b[ib].d), dmin = f16(b[ib].dmin);
        float *y = dst + ib * MP_QK_K;
        for (int c = 0; c < 4; c++) {
            const __m256 d0 = _mm256_set1_ps(d * (float)sc[2 * c]), m0 = _mm256_set1_ps(dmin * (float)m[2 * c]);
            const __m256 d1 = _mm256_set1_ps(d * (float)sc[2 * c + 1]), m1 = _mm256_set1_ps(dmin * (float)m[2 * c + 1]);
            for (int k = 0; k < 4; k++) {
                const __m128i q = _mm_loadl_epi64((const __m128i *)(b[ib].qs + 32 * c + 8 * k));
                const __m256i q32 = _mm256_cvtepu8_epi32(q);
                const __m256 lo = _mm256_cvtepi32_ps(_mm256_and_si256(q32, _mm256_set1_epi32(0x0F)));
                const __m256 hi = _mm256_cvtepi32_ps(_mm256_srli_epi32(q32, 4));
                /* mul then sub, never fused: the gguf reference rounds twice */
                _mm256_storeu_ps(y + 64 * c + 8 * k, _mm256_sub_ps(_mm256_mul_ps(d0, lo), m0));
                _mm256_storeu_ps(y + 64 * c + 32 + 8 * k, _mm256_sub_ps(_mm256_mul_ps(d1, hi), m1));
            }
        }
    }
}

/* ---- Q6_K (activation row is Q8_K) ---- */

/* The 256 six-bit quants of a Q6_K block as u = q + 32 in 0..63, in element order:
 * u[4h + s] holds elements 128h + 32s .. +31 (see the scalar dequantizer for the layout). */
static inline void q6_K_unpack(const mp_block_q6_K *b, __m256i u[8])
{
    const __m256i m4 = _mm256_set1_epi8(0x0F), m2 = _mm256_set1_epi8(0x30);
    for (int h = 0; h < 2; h++) {
        const __m256i ql0 = loadu256(b->ql + 64 * h), ql1 = loadu256(b->ql + 64 * h + 32);
        const __m256i qh = loadu256(b->qh + 32 * h);
        u[4 * h + 0] = _mm256_or_si256(_mm256_and_si256(ql0, m4), _mm256_and_si256(_mm256_slli_epi16(qh, 4), m2));
        u[4 * h + 1] = _mm256_or_si256(_mm256_and_si256(ql1, m4), _mm256_and_si256(_mm256_slli_epi16(qh, 2), m2));
        u[4 * h + 2] = _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(ql0, 4), m4), _mm256_and_si256(qh, m2));
        u[4 * h + 3] = _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(ql1, 4), m4),
                                       _mm256_and_si256(_mm256_srli_epi16(qh, 2), m2));
    }
}

static inline void q6_K_block_dot(const mp_block_q6_K *b, const uint8_t *x, size_t x_stride, int n_x,
                                  __m256 *acc)
{
    __m256i u[8];
    q6_K_unpack(b, u);
    /* scales as 16-bit lanes: 32 elements (one u vector) span two scale groups, lanes 0-7 of
     * the maddubs result belong to the first and lanes 8-15 to the second */
    const __m256i sc16 = _mm256_cvtepi8_epi16(loadu128(b->scales)); /* (16,) */
    /* scale_pair[k] = (8 x scales[2k] | 8 x scales[2k+1]): one byte shuffle each out of the
     * 16-bit scales 0-7 (or 8-15) copied into both 128-bit lanes */
    const __m256i sc_lo = _mm256_permute2x128_si256(sc16, sc16, 0x00);
    const __m256i sc_hi = _mm256_permute2x128_si256(sc16, sc16, 0x11);
    __m256i scale_pair[8];
    for (int k = 0; k < 4; k++) {
        const __m256i pick = _mm256_set_m128i(_mm_set1_epi16((int16_t)(0x0302 + 0x0404 * k)),
                                              _mm_set1_epi16((int16_t)(0x0100 + 0x0404 * k)));
        scale_pair[k] = _mm256_shuffle_epi8(sc_lo, pick);
        scale_pair[k + 4] = _mm256_shuffle_epi8(sc_hi, pick);
    }
    const float d = f16(b->d);
    for (int i = 0; i < n_x; i++) {
        const mp_block_q8_K *y = (const mp_block_q8_K *)(x + (size_t)i * x_stride);
        /* sum(q y) = sum(u y) - 32 sum(y); sum(y) per group of 16 is a bsum */
        __m256i sumi = _mm256_slli_epi32(_mm256_madd_epi16(loadu256(y->bsums), sc16), 5);
        sumi = _mm256_sub_epi32(_mm256_setzero_si256(), sumi);
        for (int k = 0; k < 8; k++) {
            const __m256i p = _mm256_maddubs_epi16(u[k], loadu256(y->qs + 32 * k));
            sumi = _mm256_add_epi32(sumi, _mm256_madd_epi16(p, scale_pair[k]));
        }
        acc[i] = _mm256_fmadd_ps(_mm256_set1_ps(d * y->d), _mm256_cvtepi32_ps(sumi), acc[i]);
    }
}

DEFINE_K_AVX2(vec_dot_q6_K_q8_K, vec_dot_multi_q6_K, mp_block_q6_K, q6_K_block_dot)

static void dequantize_q6_K(const void *src, float *dst, int64_t n)
{
    const mp_block_q6_K *b = src; /* (n / 256,) */
    for (int64_t ib = 0; ib < n / MP_QK_K; ib++) {
        __m256i u[8];
        q6_K_unpack(&b[ib], u);
        const float d = f16(b[ib].d);
        float *y = dst + ib * MP_QK_K;
        for (int k = 0; k < 8; k++) {
            uint8_t bytes[32];
            _mm256_storeu_si256((__m256i *)bytes, u[k]);
            for (int part = 0; part < 4; part++) {
                const int e = 32 * k + 8 * part; /* first element of these 8 */
                const __m256 dl = _mm256_set1_ps(d * (float)b[ib].scales[e / 16]);
                const __m256i q = _mm256_sub_epi32(_mm256_cvtepu8_epi32(_mm_loadl_epi64((const __m128i *)(bytes + 8 * part))),
                                                   _mm256_set1_epi32(32));
                _mm256_storeu_ps(y + e, _mm256_mul_ps(dl, _mm256_cvtepi32_ps(q)));
            }
        }
    }
}

/* ---- the table ---- */

#define OPS(T, VDT, DQ, Q, VD, MULTI) \
    {.type = (T), .vec_dot_type = (VDT), .dequantize_row = (DQ), .quantize_row = (Q), .vec_dot = (VD), \
     .vec_dot_multi = (MULTI)}
/* the blocks of 32, with the four-row decode GEMV (b32_gemv) */
#define OPS_GEMV(T, VDT, DQ, Q, VD, MULTI, GEMV) \
    {.type = (T), .vec_dot_type = (VDT), .dequantize_row = (DQ), .quantize_row = (Q), .vec_dot = (VD), \
     .vec_dot_multi = (MULTI), .gemv = (GEMV)}

/* ---- activation quantizers (the scalar references' bits; quantize.c) ----
 *
 * Per block: amax = max |x| with NaN lanes ignored (max_ps returns its second operand when
 * either is NaN, as fmaxf(amax, NaN) returns amax), the scales in scalar code as the reference
 * computes them, then each x * scale rounded as the reference rounds (Q8_K: lrintf, nearest even,
 * as cvtps2dq; Q8_0: roundf, half away from zero). A product that is not finite (a NaN x, an
 * infinite x against a zero scale, any x against the infinite scale of a block of subnormals)
 * becomes 0, as the reference's conversions leave it (the low bits of an integer-indefinite
 * 64-bit result, or of a 32-bit one cut to 8 bits); finite products are within ±127.5. */

static inline __m256 abs_max8(const float *x, int n)
{
    const __m256 sign = _mm256_set1_ps(-0.0f);
    __m256 mx = _mm256_setzero_ps();
    for (int l = 0; l < n; l += 8)
        mx = _mm256_max_ps(_mm256_andnot_ps(sign, _mm256_loadu_ps(x + l)), mx);
    return mx;
}

static inline float hmax_ps(__m256 v)
{
    __m128 m = _mm_max_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    m = _mm_max_ps(m, _mm_movehl_ps(m, m));
    m = _mm_max_ss(m, _mm_movehdup_ps(m));
    return _mm_cvtss_f32(m);
}

/* 32 int32 lanes (non-finite lanes already 0, the rest within [-127, 127] after clamping) to 32 int8 */
static inline __m256i pack32(__m256i q0, __m256i q1, __m256i q2, __m256i q3)
{
    const __m256i w01 = _mm256_packs_epi32(q0, q1), w23 = _mm256_packs_epi32(q2, q3);
    const __m256i b = _mm256_packs_epi16(w01, w23); /* lanes interleaved by 128-bit halves */
    return _mm256_permutevar8x32_epi32(b, _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7));
}

static inline __m256i nonfinite_to_zero(__m256 v, __m256i q)
{
    const __m256 mag = _mm256_andnot_ps(_mm256_set1_ps(-0.0f), v);
    return _mm256_and_si256(_mm256_castps_si256(_mm256_cmp_ps(mag, _mm256_set1_ps(INFINITY), _CMP_LT_OQ)), q);
}

static inline __m256i clamp127(__m256i q)
{
    return _mm256_max_epi32(_mm256_min_epi32(q, _mm256_set1_epi32(127)), _mm256_set1_epi32(-127));
}

void mp_quantize_row_q8_K_avx2(const float *src, void *dst, int64_t n)
{
    uint8_t *p = dst;
    for (int64_t ib = 0; ib < n / MP_QK_K; ib++) {
        const float *x = src + ib * MP_QK_K;
        mp_block_q8_K b;
        const float amax = hmax_ps(abs_max8(x, MP_QK_K));
        const float iscale = amax != 0.0f ? 127.0f / amax : 0.0f;
        b.d = amax != 0.0f ? 1.0f / iscale : 0.0f;
        const __m256 vs = _mm256_set1_ps(iscale);
        for (int l = 0; l < MP_QK_K; l += 32) {
            __m256i q[4];
            for (int i = 0; i < 4; i++) {
                const __m256 v = _mm256_mul_ps(_mm256_loadu_ps(x + l + 8 * i), vs);
                q[i] = clamp127(nonfinite_to_zero(v, _mm256_cvtps_epi32(v)));
            }
            _mm256_storeu_si256((__m256i *)(b.qs + l), pack32(q[0], q[1], q[2], q[3]));
        }
        mp_q8_K_bsums(&b);
        memcpy(p + ib * sizeof(b), &b, sizeof(b));
    }
}

void mp_quantize_row_q8_0_avx2(const float *src, void *dst, int64_t n)
{
    mp_block_q8_0 *b = dst;
    const __m256 sign = _mm256_set1_ps(-0.0f);
    /* roundf(v) = trunc(v + copysign(0.5 - 2^-25, v)) for |v| < 2^22 (here |v| <= ~127): the
     * largest float below 0.5 never carries a value below a half over the next integer, and a
     * half plus it rounds (to even) up to the next integer */
    const __m256 half = _mm256_set1_ps(0.49999997f);
    for (int64_t ib = 0; ib < n / MP_QK8_0; ib++) {
        const float *x = src + ib * MP_QK8_0;
        const float amax = hmax_ps(abs_max8(x, MP_QK8_0));
        const float d = amax / 127.0f;
        const float id = d != 0.0f ? 1.0f / d : 0.0f;
        b[ib].d = mp_f32_to_f16(d);
        const __m256 vs = _mm256_set1_ps(id);
        __m256i q[4];
        for (int i = 0; i < 4; i++) {
            const __m256 v = _mm256_mul_ps(_mm256_loadu_ps(x + 8 * i), vs);
            const __m256 r = _mm256_add_ps(v, _mm256_or_ps(half, _mm256_and_ps(sign, v)));
            q[i] = clamp127(nonfinite_to_zero(v, _mm256_cvttps_epi32(r)));
        }
        _mm256_storeu_si256((__m256i *)b[ib].qs, pack32(q[0], q[1], q[2], q[3]));
    }
}

static const mp_type_ops k_avx2_ops[] = {
    OPS(MP_TYPE_F32, MP_TYPE_F32, mp_dequantize_row_f32_scalar, mp_quantize_row_f32_ref, vec_dot_f32, NULL),
    OPS(MP_TYPE_F16, MP_TYPE_F32, dequantize_f16, mp_quantize_row_f16_ref, vec_dot_f16, NULL),
    OPS(MP_TYPE_BF16, MP_TYPE_F32, dequantize_bf16, mp_quantize_row_bf16_ref, vec_dot_bf16, NULL),
    OPS_GEMV(MP_TYPE_Q4_0, MP_TYPE_Q8_0, dequantize_q4_0, mp_quantize_row_q4_0_ref, mp_vec_dot_q4_0_q8_0_avx2,
        mp_vec_dot_multi_q4_0_avx2, gemv_q4_0_avx2),
    OPS_GEMV(MP_TYPE_Q8_0, MP_TYPE_Q8_0, dequantize_q8_0, mp_quantize_row_q8_0_ref, mp_vec_dot_q8_0_q8_0_avx2,
        mp_vec_dot_multi_q8_0_avx2, gemv_q8_0_avx2),
    /* the other blocks of 32: rows dequantized by the scalar reference (loaders and tests only) */
    OPS_GEMV(MP_TYPE_Q4_1, MP_TYPE_Q8_0, mp_dequantize_row_q4_1_scalar, mp_quantize_row_q4_1_ref, mp_vec_dot_q4_1_q8_0_avx2,
        mp_vec_dot_multi_q4_1_avx2, gemv_q4_1_avx2),
    OPS_GEMV(MP_TYPE_Q5_0, MP_TYPE_Q8_0, mp_dequantize_row_q5_0_scalar, mp_quantize_row_q5_0_ref, mp_vec_dot_q5_0_q8_0_avx2,
        mp_vec_dot_multi_q5_0_avx2, gemv_q5_0_avx2),
    OPS_GEMV(MP_TYPE_Q5_1, MP_TYPE_Q8_0, mp_dequantize_row_q5_1_scalar, mp_quantize_row_q5_1_ref, mp_vec_dot_q5_1_q8_0_avx2,
        mp_vec_dot_multi_q5_1_avx2, gemv_q5_1_avx2),
    OPS_GEMV(MP_TYPE_IQ4_NL, MP_TYPE_Q8_0, mp_dequantize_row_iq4_nl_scalar, mp_quantize_row_iq4_nl_ref,
        mp_vec_dot_iq4_nl_q8_0_avx2, mp_vec_dot_multi_iq4_nl_avx2, gemv_iq4_nl_avx2),
    OPS_GEMV(MP_TYPE_MXFP4, MP_TYPE_Q8_0, mp_dequantize_row_mxfp4_scalar, mp_quantize_row_mxfp4_ref, mp_vec_dot_mxfp4_q8_0_avx2,
        mp_vec_dot_multi_mxfp4_avx2, gemv_mxfp4_avx2),
    OPS(MP_TYPE_Q4_K, MP_TYPE_Q8_K, dequantize_q4_K, mp_quantize_row_q4_K_ref, vec_dot_q4_K_q8_K,
        vec_dot_multi_q4_K),
    /* Q2_K's, Q3_K's and Q5_K's rows are dequantized by the scalar reference (loaders and tests
     * only: decode and prefill use vec_dot) */
    OPS(MP_TYPE_Q2_K, MP_TYPE_Q8_K, mp_dequantize_row_q2_K_scalar, mp_quantize_row_q2_K_ref,
        vec_dot_q2_K_q8_K, vec_dot_multi_q2_K),
    OPS(MP_TYPE_Q3_K, MP_TYPE_Q8_K, mp_dequantize_row_q3_K_scalar, mp_quantize_row_q3_K_ref,
        vec_dot_q3_K_q8_K, vec_dot_multi_q3_K),
    OPS(MP_TYPE_Q5_K, MP_TYPE_Q8_K, mp_dequantize_row_q5_K_scalar, mp_quantize_row_q5_K_ref, vec_dot_q5_K_q8_K,
        vec_dot_multi_q5_K),
    OPS(MP_TYPE_Q6_K, MP_TYPE_Q8_K, dequantize_q6_K, mp_quantize_row_q6_K_ref, vec_dot_q6_K_q8_K,
        vec_dot_multi_q6_K),
    OPS(MP_TYPE_IQ4_XS, MP_TYPE_Q8_K, mp_dequantize_row_iq4_xs_scalar, mp_quantize_row_iq4_xs_ref,
        vec_dot_iq4_xs_q8_K, vec_dot_multi_iq4_xs),
};

const mp_type_ops *mp_type_ops_avx2(int type)
{
    for (size_t i = 0; i < sizeof(k_avx2_ops) / sizeof(k_avx2_ops[0]); i++)
        if (k_avx2_ops[i].type == type)
            return &k_avx2_ops[i];
    return NULL;
}
