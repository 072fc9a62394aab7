/* kernels/cpu/quant_amx.c — AMX tile GEMMs for the prefill loop: Q4_K, Q5_K, Q6_K and IQ4_XS weight
 * rows against Q8_K activation rows, Q4_0, Q5_0, IQ4_NL, MXFP4 and Q8_0 against Q8_0 ones, 16 weight
 * rows by up to 16 activation rows per tile product (Q4_1 and Q5_1, whose offsets need the
 * activations' block sums that Q8_0 rows do not carry, and the 2- and 3-bit K-quants run avx512's
 * level).
 *
 * Only called where dispatch.c saw AVX-512 (F, BW, VL, VNNI), AMX-TILE and AMX-INT8 in cpuid,
 * Linux granted the tile state (mp_amx_enable) and every tile GEMM passed its start check (and no
 * MP_ISA below amx capped the level). Its table is the
 * AVX-512 table of the type with `gemm` set: decode (one activation row) runs the AVX-512 dots,
 * prefill (mp_gemm_rows, from gemm_min_rows activation rows: dispatch.c's mp_kernels_amx_rows) runs these.
 *
 * One tile product: C (tokens x weight rows, int32) += A (tokens x K bytes, the activations' signed
 * quants, loaded straight from their rows) . B (K / 4 x 16 rows x 4 bytes: four consecutive quants
 * of each weight row side by side, the layout the instructions want). B is built per step of 256
 * elements and row block by 32-bit gathers over the 16 rows (lanes are rows), so the weights stay
 * in the model's own layout: the host copy of the experts is shared with the GPU, which reads it as
 * the file has it. One product per sub-block of the type (Q4_K, Q5_K: 8 of 32 unsigned quants,
 * tdpbsud; Q6_K: 16 of 16, q - 32 signed, tdpbssd, so its -32 needs no correction term; Q4_0, Q5_0
 * and Q8_0: one per block of 32, signed; IQ4_NL, MXFP4 and IQ4_XS: their codes' levels, looked up
 * by vpshufb while B is built, signed); the integer sums are exact. The float part per token and
 * step, with lanes over the 16 weight rows: for the K-quants sum_j (d sc_j)[r] C_j - sum_j (dmin
 * m_j)[r] bsum32_j (the mins, from the activation's bsums), times the token's d; for Q4_0/Q8_0
 * sum_b d_w[r] d_x C_b (MXFP4's d_w its exponent's 2^(e - 128)). The results equal vec_dot's
 * within float rounding (the same exact integer terms, summed in another order), not bit for
 * bit; the tests check that bound.
 *
 * Tiles: 0/3 A, 1/4 B, 2/5 C for even and odd sub-blocks (two independent chains). A pass covers
 * up to 64 activation rows in whole groups of 16, or the last partial group alone, so that the
 * tile shapes change at most twice per row block (a partial group re-gathers its weights).
 *
 * Test-only build: with MP_AMX_EMULATED defined, the tile instructions come from a scalar model of
 * them (tests/unit/amx_emul.h, which also checks every shape against the architecture's limits)
 * and the table is exported as mp_type_ops_amx_emulated, so that the logic is tested on any CPU
 * with AVX-512; the production build never defines it. */
#include <immintrin.h>
#include <stdbool.h>
#include <pthread.h>
#include <string.h>

#ifdef MP_AMX_EMULATED
#include "amx_emul.h"
#define mp_type_ops_amx mp_type_ops_amx_emulated /* renames quant_impl.h's prototype too */
#define mp_amx_enable mp_amx_enable_emulated
#define mp_amx_set_rows mp_amx_set_rows_emulated
#else
#include <sys/syscall.h>
#include <unistd.h>
#endif

#include "kernels/cpu/quant_impl.h"

#define TOKENS_PER_PASS 64 /* activation rows per pass: 4 groups of 16 */
typedef struct tile_config {
    uint8_t palette;
    uint8_t start_row;
    uint8_t reserved[14];
    uint16_t colsb[16];
    uint8_t rows[16];
} tile_config;

/* Shapes for n_t activation rows, K bytes per sub-block product and n_r weight rows. */
static void configure(int n_t, int k_bytes, int n_r)
{
    _Alignas(64) tile_config cfg; /* the 64-byte operand of ldtilecfg */
    memset(&cfg, 0, sizeof cfg);
    cfg.palette = 1;
    for (int p = 0; p < 2; p++) {
        cfg.rows[3 * p] = (uint8_t)n_t; /* A */
        cfg.colsb[3 * p] = (uint16_t)k_bytes;
        cfg.rows[3 * p + 1] = (uint8_t)(k_bytes / 4); /* B */
        cfg.colsb[3 * p + 1] = (uint16_t)(4 * n_r);
        cfg.rows[3 * p + 2] = (uint8_t)n_t; /* C */
        cfg.colsb[3 * p + 2] = (uint16_t)(4 * n_r);
    }
    _tile_loadconfig(&cfg);
}

/* 16 halves (the low 16 bits of each lane) widened to floats */
static inline __m512 f16_lanes(__m512i v)
{
    return _mm512_cvtph_ps(_mm512_cvtepi32_epi16(v));
}

static inline __m512i gather(__mmask16 live, __m512i idx, const uint8_t *base)
{
    return _mm512_mask_i32gather_epi32(_mm512_setzero_si512(), live, idx, base, 1);
}

/* byte q (0..3) of each lane, unsigned, as floats */
static inline __m512 byte_u(__m512i v, int q)
{
    return _mm512_cvtepi32_ps(_mm512_and_si512(_mm512_srli_epi32(v, 8 * q), _mm512_set1_epi32(0xFF)));
}

/* One product (tiles 0, 1, 2): A from A_PTR (rows X_STRIDE apart), B from B_PTR, C stored to C_PTR;
 * DP is the product's form (the weights' signedness). */
#define TILE_ONE(DP, A_PTR, B_PTR, X_STRIDE, C_PTR) \
    do {                                            \
        _tile_loadd(0, (A_PTR), (long)(X_STRIDE));  \
        _tile_loadd(1, (B_PTR), 64);                \
        _tile_zero(2);                              \
        DP(2, 0, 1);                                \
        _tile_stored(2, (C_PTR), 64);               \
    } while (0)

/* Sub-blocks j and j + 1 as two independent products (tiles 0-2 and 3-5): A from the activations'
 * quants, sub-block j's A_STEP * j bytes past QS, B from B[j], C stored to C[j]. */
#define TILE_PAIR(DP, QS, A_STEP, B, J, X_STRIDE, C)                      \
    do {                                                                  \
        _tile_loadd(0, (QS) + (A_STEP) * (J), (long)(X_STRIDE));         \
        _tile_loadd(1, (B)[J], 64);                                       \
        _tile_zero(2);                                                    \
        _tile_loadd(3, (QS) + (A_STEP) * ((J) + 1), (long)(X_STRIDE));   \
        _tile_loadd(4, (B)[(J) + 1], 64);                                 \
        _tile_zero(5);                                                    \
        DP(2, 0, 1);                                                      \
        DP(5, 3, 4);                                                      \
        _tile_stored(2, (C)[J], 64);                                      \
        _tile_stored(5, (C)[(J) + 1], 64);                                \
    } while (0)

/* ---- Q4_K and Q5_K: 8 sub-blocks of 32, x = d sc_j q - dmin m_j (q: a nibble, Q5_K's topped up
 * with its fifth bit) ---- */

typedef struct q4_K_prep {
    _Alignas(64) uint8_t b[8][8][64]; /* B of each sub-block: 8 rows of 16 weight rows x 4 quants */
    _Alignas(64) float sc[8][16];     /* d sc_j per weight row */
    _Alignas(64) float mn[8][16];     /* dmin m_j per weight row */
} q4_K_prep;

/* Super block sb of the live rows (lanes) whose offsets from w are idx; blocks of block_bytes with
 * Q4_K's d, dmin and scales at its start, the nibbles at qs_off and, for Q5_K, the fifth bits at
 * qh_off (-1: none). */
static void prep_q45_K(const uint8_t *w, __m512i idx, __mmask16 live, int64_t sb, q4_K_prep *p, size_t block_bytes,
                       size_t qs_off, int qh_off)
{
    const uint8_t *blk = w + (size_t)sb * block_bytes;
    const __m512i lo4 = _mm512_set1_epi8(0x0F), bit = _mm512_set1_epi8(0x01);
    for (int kk = 0; kk < 8; kk++) {
        /* the fifth bits of elements 32j + 4kk .. + 3: bit j of qh bytes 4kk .. 4kk + 3 */
        const __m512i hb = qh_off >= 0 ? gather(live, idx, blk + qh_off + 4 * kk) : _mm512_setzero_si512();
        for (int c = 0; c < 4; c++) { /* qs bytes 32c .. 32c + 31: sub-block 2c low, 2c + 1 high */
            const __m512i v = gather(live, idx, blk + qs_off + 32 * c + 4 * kk);
            const __m512i h0 = _mm512_slli_epi32(_mm512_and_si512(_mm512_srli_epi32(hb, 2 * c), bit), 4);
            const __m512i h1 = _mm512_slli_epi32(_mm512_and_si512(_mm512_srli_epi32(hb, 2 * c + 1), bit), 4);
            _mm512_store_si512(p->b[2 * c][kk], _mm512_or_si512(_mm512_and_si512(v, lo4), h0));
            _mm512_store_si512(p->b[2 * c + 1][kk],
                               _mm512_or_si512(_mm512_and_si512(_mm512_srli_epi32(v, 4), lo4), h1));
        }
    }
    const __m512i dd = gather(live, idx, blk); /* d | dmin << 16 */
    const __m512 d = f16_lanes(dd), dmin = f16_lanes(_mm512_srli_epi32(dd, 16));
    const uint8_t *s = blk + offsetof(mp_block_q4_K, scales);
    const __m512i a0 = gather(live, idx, s), a1 = gather(live, idx, s + 4), a2 = gather(live, idx, s + 8);
    /* as mp_q4_K_unpack_scales, per lane */
    const __m512i m6 = _mm512_set1_epi32(0x3F3F3F3F), m4 = _mm512_set1_epi32(0x0F0F0F0F),
                  top = _mm512_set1_epi32(0x30303030);
    const __m512i sc_lo = _mm512_and_si512(a0, m6), m_lo = _mm512_and_si512(a1, m6);
    const __m512i sc_hi = _mm512_or_si512(_mm512_and_si512(a2, m4), _mm512_and_si512(_mm512_srli_epi32(a0, 2), top));
    const __m512i m_hi = _mm512_or_si512(_mm512_and_si512(_mm512_srli_epi32(a2, 4), m4),
                                         _mm512_and_si512(_mm512_srli_epi32(a1, 2), top));
    for (int q = 0; q < 4; q++) {
        _mm512_store_ps(p->sc[q], _mm512_mul_ps(d, byte_u(sc_lo, q)));
        _mm512_store_ps(p->sc[4 + q], _mm512_mul_ps(d, byte_u(sc_hi, q)));
        _mm512_store_ps(p->mn[q], _mm512_mul_ps(dmin, byte_u(m_lo, q)));
        _mm512_store_ps(p->mn[4 + q], _mm512_mul_ps(dmin, byte_u(m_hi, q)));
    }
}

static void prep_q4_K(const uint8_t *w, __m512i idx, __mmask16 live, int64_t sb, int64_t n, q4_K_prep *p)
{
    (void)n;
    prep_q45_K(w, idx, live, sb, p, sizeof(mp_block_q4_K), offsetof(mp_block_q4_K, qs), -1);
}

static void prep_q5_K(const uint8_t *w, __m512i idx, __mmask16 live, int64_t sb, int64_t n, q4_K_prep *p)
{
    (void)n;
    prep_q45_K(w, idx, live, sb, p, sizeof(mp_block_q5_K), offsetof(mp_block_q5_K, qs),
               (int)offsetof(mp_block_q5_K, qh));
}

/* One group of n_t activation rows (from xa: super block sb of the group's first row) against the
 * prepared row block; acc[t] gains each row's super-block sum over the 16 weight-row lanes. The
 * quants are unsigned (nibbles, Q5_K's 0..31): tdpbsud. */
static void group_q45_K(const q4_K_prep *p, const uint8_t *xa, size_t x_stride, int n_t, __m512 *acc)
{
    _Alignas(64) int32_t c[8][16][16];
    const uint8_t *qs = xa + offsetof(mp_block_q8_K, qs);
    for (int j = 0; j < 8; j += 2)
        TILE_PAIR(_tile_dpbsud, qs, 32, p->b, j, x_stride, c);
    const __m256i ones = _mm256_set1_epi16(1);
    for (int t = 0; t < n_t; t++) {
        const uint8_t *row = xa + (size_t)t * x_stride;
        float da;
        memcpy(&da, row + offsetof(mp_block_q8_K, d), sizeof da);
        /* bsum32_j = bsums[2j] + bsums[2j + 1] */
        const __m256i bs = _mm256_loadu_si256((const __m256i *)(row + offsetof(mp_block_q8_K, bsums)));
        _Alignas(32) float b32[8];
        _mm256_store_ps(b32, _mm256_cvtepi32_ps(_mm256_madd_epi16(bs, ones)));
        __m512 f = _mm512_setzero_ps();
        for (int j = 0; j < 8; j++)
            f = _mm512_fmadd_ps(_mm512_cvtepi32_ps(_mm512_load_si512(c[j][t])), _mm512_load_ps(p->sc[j]), f);
        for (int j = 0; j < 8; j++)
            f = _mm512_fnmadd_ps(_mm512_set1_ps(b32[j]), _mm512_load_ps(p->mn[j]), f);
        acc[t] = _mm512_fmadd_ps(_mm512_set1_ps(da), f, acc[t]);
    }
}

/* ---- Q6_K: 16 sub-blocks of 16, x = d sc_j (q - 32) ---- */

typedef struct q6_K_prep {
    _Alignas(64) int8_t b[16][4][64]; /* B of each sub-block: 4 rows of 16 weight rows x 4 quants */
    _Alignas(64) float sc[16][16];    /* d sc_j per weight row */
} q6_K_prep;

static void prep_q6_K(const uint8_t *w, __m512i idx, __mmask16 live, int64_t sb, int64_t n, q6_K_prep *p)
{
    (void)n;
    const uint8_t *blk = w + sb * (int64_t)sizeof(mp_block_q6_K);
    const __m512i lo4 = _mm512_set1_epi8(0x0F), lo2 = _mm512_set1_epi8(0x03), k32 = _mm512_set1_epi8(32);
    /* element 128h + 32s + l (l = 4kk .. 4kk + 3): low bits from ql[64h + 32(s & 1) + l] (low
     * nibble for s < 2, high for s >= 2), top bits from qh[32h + l] >> 2s; sub-block 8h + 2s + kk / 4,
     * B row kk % 4 */
    for (int h = 0; h < 2; h++)
        for (int kk = 0; kk < 8; kk++) {
            const uint8_t *ql = blk + offsetof(mp_block_q6_K, ql) + 64 * h + 4 * kk;
            const __m512i l0 = gather(live, idx, ql), l1 = gather(live, idx, ql + 32);
            const __m512i hb = gather(live, idx, blk + offsetof(mp_block_q6_K, qh) + 32 * h + 4 * kk);
            const __m512i lows[4] = {l0, l1, _mm512_srli_epi32(l0, 4), _mm512_srli_epi32(l1, 4)};
            for (int s = 0; s < 4; s++) {
                const __m512i hi = _mm512_and_si512(_mm512_srli_epi32(hb, 2 * s), lo2);
                const __m512i q = _mm512_or_si512(_mm512_and_si512(lows[s], lo4), _mm512_slli_epi32(hi, 4));
                _mm512_store_si512(p->b[8 * h + 2 * s + kk / 4][kk % 4], _mm512_sub_epi8(q, k32));
            }
        }
    /* d: the half at bytes 208-209, the upper half of the dword at 206 (no read past the block) */
    const __m512 d = f16_lanes(_mm512_srli_epi32(gather(live, idx, blk + offsetof(mp_block_q6_K, d) - 2), 16));
    for (int i = 0; i < 4; i++) {
        const __m512i v = gather(live, idx, blk + offsetof(mp_block_q6_K, scales) + 4 * i);
        for (int q = 0; q < 4; q++) { /* scale 4i + q: byte q, sign-extended */
            const __m512i s = _mm512_srai_epi32(_mm512_slli_epi32(v, 24 - 8 * q), 24);
            _mm512_store_ps(p->sc[4 * i + q], _mm512_mul_ps(d, _mm512_cvtepi32_ps(s)));
        }
    }
}

/* One group of n_t Q8_K activation rows against a prepared row block of N_SUB signed sub-block
 * products of A_STEP quants (Q6_K, IQ4_XS: tdpbssd, no min terms); acc[t] gains the row's d times
 * sum_j sc_j C_j over the 16 weight-row lanes. */
#define SIGNED_K_GROUP(NAME, PREP_T, N_SUB, A_STEP)                                                      \
    static void NAME(const PREP_T *p, const uint8_t *xa, size_t x_stride, int n_t, __m512 *acc)          \
    {                                                                                                    \
        _Alignas(64) int32_t c[N_SUB][16][16];                                                           \
        const uint8_t *qs = xa + offsetof(mp_block_q8_K, qs);                                            \
        for (int j = 0; j < (N_SUB); j += 2)                                                             \
            TILE_PAIR(_tile_dpbssd, qs, (A_STEP), p->b, j, x_stride, c);                                 \
        for (int t = 0; t < n_t; t++) {                                                                  \
            float da;                                                                                    \
            memcpy(&da, xa + (size_t)t * x_stride + offsetof(mp_block_q8_K, d), sizeof da);              \
            __m512 f = _mm512_setzero_ps();                                                              \
            for (int j = 0; j < (N_SUB); j++)                                                            \
                f = _mm512_fmadd_ps(_mm512_cvtepi32_ps(_mm512_load_si512(c[j][t])), _mm512_load_ps(p->sc[j]), f); \
            acc[t] = _mm512_fmadd_ps(_mm512_set1_ps(da), f, acc[t]);                                     \
        }                                                                                                \
    }

SIGNED_K_GROUP(group_q6_K, q6_K_prep, 16, 16)

/* ---- Q8_0 and Q4_0 against Q8_0 activations: blocks of 32, x = d q; a step is 8 blocks (fewer
 * at a row's end) ---- */

#define Q0_STEP 8 /* blocks per step: 256 elements, a K-quant super block's */

typedef struct q0_prep {
    _Alignas(64) int8_t b[Q0_STEP][8][64]; /* B of each block: 8 rows of 16 weight rows x 4 quants */
    _Alignas(64) float d[Q0_STEP][16];     /* d per weight row */
    int n_blocks;                          /* in this step */
} q0_prep;

static int step_blocks(int64_t sb, int64_t n)
{
    const int64_t left = n / 32 - sb * Q0_STEP;
    return (int)(left < Q0_STEP ? left : Q0_STEP);
}

static void prep_q8_0(const uint8_t *w, __m512i idx, __mmask16 live, int64_t sb, int64_t n, q0_prep *p)
{
    p->n_blocks = step_blocks(sb, n);
    for (int j = 0; j < p->n_blocks; j++) {
        const uint8_t *blk = w + (size_t)(sb * Q0_STEP + j) * sizeof(mp_block_q8_0);
        for (int kk = 0; kk < 8; kk++)
            _mm512_store_si512(p->b[j][kk], gather(live, idx, blk + offsetof(mp_block_q8_0, qs) + 4 * kk));
        _mm512_store_ps(p->d[j], f16_lanes(gather(live, idx, blk))); /* d and the first two quants */
    }
}

static void prep_q4_0(const uint8_t *w, __m512i idx, __mmask16 live, int64_t sb, int64_t n, q0_prep *p)
{
    const __m512i lo4 = _mm512_set1_epi8(0x0F), k8 = _mm512_set1_epi8(8);
    p->n_blocks = step_blocks(sb, n);
    for (int j = 0; j < p->n_blocks; j++) {
        const uint8_t *blk = w + (size_t)(sb * Q0_STEP + j) * sizeof(mp_block_q4_0);
        for (int kk = 0; kk < 4; kk++) { /* elements 4kk .. + 3 low nibbles, 16 + 4kk .. high */
            const __m512i v = gather(live, idx, blk + offsetof(mp_block_q4_0, qs) + 4 * kk);
            _mm512_store_si512(p->b[j][kk], _mm512_sub_epi8(_mm512_and_si512(v, lo4), k8));
            _mm512_store_si512(p->b[j][4 + kk],
                               _mm512_sub_epi8(_mm512_and_si512(_mm512_srli_epi32(v, 4), lo4), k8));
        }
        _mm512_store_ps(p->d[j], f16_lanes(gather(live, idx, blk)));
    }
}

/* bits s .. s + 3 of each lane's dword v (Q5_0's fifth bits of four consecutive elements), bit s + b
 * moved to bit 4 of byte b: the top of each element's quant in B's layout */
static inline __m512i fifth_bits(__m512i v, int s)
{
    __m512i h = _mm512_setzero_si512();
    for (int b = 0; b < 4; b++)
        h = _mm512_or_si512(h, _mm512_slli_epi32(_mm512_and_si512(_mm512_srli_epi32(v, s + b), _mm512_set1_epi32(1)),
                                                 8 * b + 4));
    return h;
}

static void prep_q5_0(const uint8_t *w, __m512i idx, __mmask16 live, int64_t sb, int64_t n, q0_prep *p)
{
    const __m512i lo4 = _mm512_set1_epi8(0x0F), k16 = _mm512_set1_epi8(16);
    p->n_blocks = step_blocks(sb, n);
    for (int j = 0; j < p->n_blocks; j++) {
        const uint8_t *blk = w + (size_t)(sb * Q0_STEP + j) * sizeof(mp_block_q5_0);
        const __m512i qh = gather(live, idx, blk + offsetof(mp_block_q5_0, qh)); /* element l at bit l */
        for (int kk = 0; kk < 4; kk++) { /* elements 4kk .. + 3 low nibbles, 16 + 4kk .. high */
            const __m512i v = gather(live, idx, blk + offsetof(mp_block_q5_0, qs) + 4 * kk);
            const __m512i lo = _mm512_or_si512(_mm512_and_si512(v, lo4), fifth_bits(qh, 4 * kk));
            const __m512i hi =
                _mm512_or_si512(_mm512_and_si512(_mm512_srli_epi32(v, 4), lo4), fifth_bits(qh, 16 + 4 * kk));
            _mm512_store_si512(p->b[j][kk], _mm512_sub_epi8(lo, k16));
            _mm512_store_si512(p->b[j][4 + kk], _mm512_sub_epi8(hi, k16));
        }
        _mm512_store_ps(p->d[j], f16_lanes(gather(live, idx, blk)));
    }
}

/* The look-up formats' levels (quant.h), in each 128-bit lane for vpshufb: a nibble's level */
static const int8_t k_iq4_nl_levels[16] = MP_IQ4_NL_LEVELS;
static const int8_t k_mxfp4_levels[16] = MP_MXFP4_LEVELS;

static inline __m512i levels_of(const int8_t lv[16])
{
    return _mm512_broadcast_i32x4(_mm_loadu_si128((const __m128i *)lv));
}

/* The 32 codes of a block whose nibbles are Q4_0's, at qs, as their levels (signed) in B rows
 * b[0..7] */
static inline void lut_block(const uint8_t *qs, __m512i idx, __mmask16 live, __m512i levels, int8_t b[8][64])
{
    const __m512i lo4 = _mm512_set1_epi8(0x0F);
    for (int kk = 0; kk < 4; kk++) {
        const __m512i v = gather(live, idx, qs + 4 * kk);
        _mm512_store_si512(b[kk], _mm512_shuffle_epi8(levels, _mm512_and_si512(v, lo4)));
        _mm512_store_si512(b[4 + kk], _mm512_shuffle_epi8(levels, _mm512_and_si512(_mm512_srli_epi32(v, 4), lo4)));
    }
}

/* mp_e8m0_half of the low byte of each lane: 2^(e - 128), the subnormals 2^-128 and 2^-127 for
 * e 0 and 1 */
static inline __m512 e8m0_half_lanes(__m512i v)
{
    const __m512i e = _mm512_and_si512(v, _mm512_set1_epi32(0xFF));
    const __m512i normal = _mm512_slli_epi32(_mm512_sub_epi32(e, _mm512_set1_epi32(1)), 23);
    const __m512i tiny = _mm512_sllv_epi32(_mm512_set1_epi32(0x00200000), e);
    return _mm512_castsi512_ps(_mm512_mask_blend_epi32(_mm512_cmplt_epu32_mask(e, _mm512_set1_epi32(2)), normal, tiny));
}

/* A step of a look-up block-of-32 type: blocks of block_bytes, their codes at qs_off (nibbles as
 * Q4_0's) indexing levels, their scale at byte 0: an f16 d (IQ4_NL) or an E8M0 exponent (MXFP4) */
static inline void prep_lut32(const uint8_t *w, __m512i idx, __mmask16 live, int64_t sb, int64_t n, q0_prep *p,
                              const int8_t lv[16], size_t block_bytes, size_t qs_off, bool e8m0)
{
    const __m512i levels = levels_of(lv);
    p->n_blocks = step_blocks(sb, n);
    for (int j = 0; j < p->n_blocks; j++) {
        const uint8_t *blk = w + (size_t)(sb * Q0_STEP + j) * block_bytes;
        lut_block(blk + qs_off, idx, live, levels, p->b[j]);
        const __m512i head = gather(live, idx, blk); /* the scale and the first codes */
        _mm512_store_ps(p->d[j], e8m0 ? e8m0_half_lanes(head) : f16_lanes(head));
    }
}

static void prep_iq4_nl(const uint8_t *w, __m512i idx, __mmask16 live, int64_t sb, int64_t n, q0_prep *p)
{
    prep_lut32(w, idx, live, sb, n, p, k_iq4_nl_levels, sizeof(mp_block_iq4_nl), offsetof(mp_block_iq4_nl, qs), false);
}

static void prep_mxfp4(const uint8_t *w, __m512i idx, __mmask16 live, int64_t sb, int64_t n, q0_prep *p)
{
    prep_lut32(w, idx, live, sb, n, p, k_mxfp4_levels, sizeof(mp_block_mxfp4), offsetof(mp_block_mxfp4, qs), true);
}

static void group_q0(const q0_prep *p, const uint8_t *xa, size_t x_stride, int n_t, __m512 *acc)
{
    _Alignas(64) int32_t c[Q0_STEP][16][16];
    const uint8_t *qs = xa + offsetof(mp_block_q8_0, qs);
    const size_t a_step = sizeof(mp_block_q8_0);
    int j = 0;
    for (; j + 1 < p->n_blocks; j += 2)
        TILE_PAIR(_tile_dpbssd, qs, a_step, p->b, j, x_stride, c);
    if (j < p->n_blocks)
        TILE_ONE(_tile_dpbssd, qs + a_step * (size_t)j, p->b[j], x_stride, c[j]);
    for (int t = 0; t < n_t; t++) {
        const uint8_t *row = xa + (size_t)t * x_stride;
        __m512 f = _mm512_setzero_ps();
        for (int b = 0; b < p->n_blocks; b++) {
            mp_f16 h;
            memcpy(&h, row + (size_t)b * a_step + offsetof(mp_block_q8_0, d), sizeof h);
            const __m512 dd = _mm512_mul_ps(_mm512_load_ps(p->d[b]), _mm512_set1_ps(_cvtsh_ss(h)));
            f = _mm512_fmadd_ps(_mm512_cvtepi32_ps(_mm512_load_si512(c[b][t])), dd, f);
        }
        acc[t] = _mm512_add_ps(acc[t], f);
    }
}

/* ---- IQ4_XS: 8 sub-blocks of 32, x = d (s_j - 32) v[q], the levels signed: tdpbssd ---- */

typedef struct iq4_xs_prep {
    _Alignas(64) int8_t b[8][8][64]; /* B of each sub-block: 8 rows of 16 weight rows x 4 levels */
    _Alignas(64) float sc[8][16];    /* d (s_j - 32) per weight row */
} iq4_xs_prep;

static void prep_iq4_xs(const uint8_t *w, __m512i idx, __mmask16 live, int64_t sb, int64_t n, iq4_xs_prep *p)
{
    (void)n;
    const uint8_t *blk = w + (size_t)sb * sizeof(mp_block_iq4_xs);
    const __m512i levels = levels_of(k_iq4_nl_levels);
    /* sub-block j's elements l < 16 are the low nibbles of qs[16j + l], 16 + l the high ones: the
     * same nibble order as a Q4_0 block's 16 bytes */
    for (int j = 0; j < 8; j++)
        lut_block(blk + offsetof(mp_block_iq4_xs, qs) + 16 * j, idx, live, levels, p->b[j]);
    const __m512i dh = gather(live, idx, blk);                                  /* d | scales_h << 16 */
    const __m512i sl = gather(live, idx, blk + offsetof(mp_block_iq4_xs, scales_l)); /* s_j's low bits at 4j */
    const __m512 d = f16_lanes(dh);
    const __m512i sh = _mm512_srli_epi32(dh, 16), m4 = _mm512_set1_epi32(0x0F), m2 = _mm512_set1_epi32(3);
    for (int j = 0; j < 8; j++) { /* as mp_iq4_xs_scale, per lane */
        const __m512i s = _mm512_or_si512(_mm512_and_si512(_mm512_srli_epi32(sl, 4 * j), m4),
                                          _mm512_slli_epi32(_mm512_and_si512(_mm512_srli_epi32(sh, 2 * j), m2), 4));
        _mm512_store_ps(p->sc[j], _mm512_mul_ps(d, _mm512_cvtepi32_ps(_mm512_sub_epi32(s, _mm512_set1_epi32(32)))));
    }
}

SIGNED_K_GROUP(group_iq4_xs, iq4_xs_prep, 8, 32)

/* ---- the row loop, one per type ---- */

/* The loop all types share: row blocks of 16, passes of activation rows (whole groups of 16 up to
 * TOKENS_PER_PASS, or the last partial group), steps of 256 elements; PREP builds a row block's B
 * and scales for one step into P, GROUP runs one group against them. A step of the activations is
 * X_STEP bytes; K_BYTES the quants of one product. */
#define AMX_GEMM(NAME, PREP_T, PREP, GROUP, K_BYTES, X_STEP)                                                \
    static void NAME(int64_t n, const void *w, size_t row_bytes, int64_t n_rows, const void *x,             \
                     size_t x_stride, int64_t n_x, float *y, int64_t y_stride)                              \
    {                                                                                                       \
        const int64_t nb = (n + MP_QK_K - 1) / MP_QK_K;                                                     \
        const uint8_t *wb = w, *xb = x;                                                                     \
        _Alignas(64) PREP_T p;                                                                              \
        __m512 acc[TOKENS_PER_PASS];                                                                        \
        int shape_t = -1, shape_r = -1;                                                                     \
        const __m512i lane = _mm512_set_epi32(15, 14, 13, 12, 11, 10, 9, 8, 7, 6, 5, 4, 3, 2, 1, 0);       \
        const __m512i idx = _mm512_mullo_epi32(lane, _mm512_set1_epi32((int)row_bytes));                    \
        for (int64_t r0 = 0; r0 < n_rows; r0 += 16) {                                                      \
            const int n_r = (int)(n_rows - r0 < 16 ? n_rows - r0 : 16);                                     \
            const __mmask16 live = (__mmask16)((1u << n_r) - 1);                                            \
            const uint8_t *wr = wb + (size_t)r0 * row_bytes;                                                \
            for (int64_t t0 = 0; t0 < n_x;) {                                                               \
                const int64_t left = n_x - t0;                                                              \
                const int64_t n_pass = left >= 16 ? (left < TOKENS_PER_PASS ? left / 16 * 16 : TOKENS_PER_PASS) \
                                                   : left;                                                  \
                const int n_t = n_pass >= 16 ? 16 : (int)n_pass;                                            \
                if (n_t != shape_t || n_r != shape_r) {                                                     \
                    configure(n_t, K_BYTES, n_r);                                                           \
                    shape_t = n_t;                                                                          \
                    shape_r = n_r;                                                                          \
                }                                                                                           \
                for (int64_t t = 0; t < n_pass; t++)                                                        \
                    acc[t] = _mm512_setzero_ps();                                                           \
                for (int64_t sb = 0; sb < nb; sb++) {                                                       \
                    PREP(wr, idx, live, sb, n, &p);                                                         \
                    for (int64_t g = 0; g < n_pass; g += n_t)                                               \
                        GROUP(&p, xb + (size_t)(t0 + g) * x_stride + (size_t)sb * (X_STEP), x_stride, n_t,   \
                              acc + g);                                                                     \
                }                                                                                           \
                for (int64_t t = 0; t < n_pass; t++)                                                        \
                    _mm512_mask_storeu_ps(y + (t0 + t) * y_stride + r0, live, acc[t]);                      \
                t0 += n_pass;                                                                               \
            }                                                                                               \
        }                                                                                                   \
        _tile_release();                                                                                    \
    }

AMX_GEMM(gemm_q4_K, q4_K_prep, prep_q4_K, group_q45_K, 32, sizeof(mp_block_q8_K))
AMX_GEMM(gemm_q5_K, q4_K_prep, prep_q5_K, group_q45_K, 32, sizeof(mp_block_q8_K))
AMX_GEMM(gemm_q6_K, q6_K_prep, prep_q6_K, group_q6_K, 16, sizeof(mp_block_q8_K))
AMX_GEMM(gemm_q8_0, q0_prep, prep_q8_0, group_q0, 32, Q0_STEP * sizeof(mp_block_q8_0))
AMX_GEMM(gemm_q4_0, q0_prep, prep_q4_0, group_q0, 32, Q0_STEP * sizeof(mp_block_q8_0))
AMX_GEMM(gemm_q5_0, q0_prep, prep_q5_0, group_q0, 32, Q0_STEP * sizeof(mp_block_q8_0))
AMX_GEMM(gemm_iq4_nl, q0_prep, prep_iq4_nl, group_q0, 32, Q0_STEP * sizeof(mp_block_q8_0))
AMX_GEMM(gemm_mxfp4, q0_prep, prep_mxfp4, group_q0, 32, Q0_STEP * sizeof(mp_block_q8_0))
AMX_GEMM(gemm_iq4_xs, iq4_xs_prep, prep_iq4_xs, group_iq4_xs, 32, sizeof(mp_block_q8_K))

/* ---- the table ---- */

/* The tile GEMM of each type; the rows from which each runs are dispatch.c's (mp_kernels_amx_rows:
 * a plain unit, so that a host without AVX-512 can read and set them). */
static const struct {
    int type;
    void (*gemm)(int64_t, const void *, size_t, int64_t, const void *, size_t, int64_t, float *, int64_t);
} k_gemms[] = {{MP_TYPE_Q4_K, gemm_q4_K},   {MP_TYPE_Q5_K, gemm_q5_K},     {MP_TYPE_Q6_K, gemm_q6_K},
               {MP_TYPE_IQ4_XS, gemm_iq4_xs}, {MP_TYPE_Q8_0, gemm_q8_0},   {MP_TYPE_Q5_0, gemm_q5_0},
               {MP_TYPE_Q4_0, gemm_q4_0},     {MP_TYPE_IQ4_NL, gemm_iq4_nl}, {MP_TYPE_MXFP4, gemm_mxfp4}};
#define N_GEMMS (sizeof k_gemms / sizeof k_gemms[0])

static mp_type_ops g_amx_ops[N_GEMMS];
static pthread_once_t g_amx_once = PTHREAD_ONCE_INIT;

static void build_table(void)
{
    for (size_t i = 0; i < N_GEMMS; i++) {
        g_amx_ops[i] = *mp_type_ops_avx512(k_gemms[i].type);
        g_amx_ops[i].gemm = k_gemms[i].gemm;
        g_amx_ops[i].gemm_min_rows = mp_kernels_amx_rows(k_gemms[i].type, false);
    }
}

/* k_gemms' index of type, or -1 */
static int gemm_index(int type)
{
    for (size_t i = 0; i < N_GEMMS; i++)
        if (k_gemms[i].type == type)
            return (int)i;
    return -1;
}

void mp_amx_set_rows(int type, int rows)
{
    const int i = gemm_index(type);
    if (i < 0)
        return;
    pthread_once(&g_amx_once, build_table);
    g_amx_ops[i].gemm_min_rows = rows;
}

const mp_type_ops *mp_type_ops_amx(int type)
{
    const int i = gemm_index(type);
    if (i < 0)
        return NULL;
    pthread_once(&g_amx_once, build_table);
    return &g_amx_ops[i];
}

#ifndef MP_AMX_EMULATED
/* Linux (5.16 on) hands a process the tile registers' state only when asked for it. */
#define ARCH_REQ_XCOMP_PERM 0x1023
#define XFEATURE_XTILEDATA 18

int mp_amx_enable(void)
{
    return syscall(SYS_arch_prctl, ARCH_REQ_XCOMP_PERM, XFEATURE_XTILEDATA) == 0 ? 0 : -1;
}
#else
int mp_amx_enable(void)
{
    return 0;
}
#endif
