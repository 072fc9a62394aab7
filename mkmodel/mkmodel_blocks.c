/* mkmodel/mkmodel_blocks.c — random quantized blocks written directly, for mkmodel's expert tensors.
 *
 * Why: expert tensors are ~97 % of a large MoE model (29 G of the qwen3-30b-a3b preset's 30 G
 * weights), and quantizing Gaussian floats with the K-quant scale search costs ~400 ns per weight
 * on this project's CPUs: hours for one model. Benchmarks only need weights of the right format,
 * size and scale, so expert rows are drawn directly in the quantized domain: quants uniform over
 * their range, centred on the code that dequantizes to exactly 0, with per-block scales that give
 * the requested standard deviation. The result is a valid block of its type (the kernels' own
 * dequantizer reads it; tests/unit/test_mkmodel_blocks.c checks mean, spread and the zeros).
 *
 * Invariants: deterministic in (rng state); element 0 of a row can be forced to exactly 0.0 and
 * a whole row to all zeros (mkmodel's bias channel, see mkmodel_write.c).
 */
#include "mkmodel/mkmodel_blocks.h"

#include <math.h>
#include <string.h>

#include "kernels/quant.h"

/* Standard deviation of a quant drawn uniformly from 0..n-1 (about its mean). */
static float uniform_std(int n)
{
    return sqrtf(((float)n * (float)n - 1.0f) / 12.0f);
}

bool mp_mk_blocks_supported(int type)
{
    switch (type) {
    case MP_TYPE_Q2_K: case MP_TYPE_Q3_K: case MP_TYPE_Q4_K: case MP_TYPE_Q5_K: case MP_TYPE_Q6_K:
    case MP_TYPE_Q8_0: case MP_TYPE_Q4_0: case MP_TYPE_Q4_1: case MP_TYPE_Q5_0: case MP_TYPE_Q5_1:
    case MP_TYPE_IQ4_NL: case MP_TYPE_MXFP4: case MP_TYPE_IQ4_XS:
        return true;
    default:
        return false;
    }
}

/* Q4_K and Q5_K: x = d * sc_j * q - dmin * m_j over 8 sub-blocks of 32, q in 0..levels-1. With
 * m_j = sc_j and dmin = (levels / 2) d, x = d * sc_j * (q - levels / 2): q = levels / 2 is exactly
 * zero (dmin is exact in f16: a power-of-two multiple of d), and the spread is d * sc_j * std(q).
 * The head (d, dmin and the packed scales) is the same in both formats. */
static void affine_K_head(mp_f16 *d_out, mp_f16 *dmin_out, uint8_t scales[MP_K_SCALE_SIZE], int levels, float std,
                          uint64_t (*next)(void *), void *r)
{
    uint8_t sc[8];
    float sc_sum = 0;
    for (int j = 0; j < 8; j++) {
        sc[j] = (uint8_t)(32 + next(r) % 32); /* 6-bit scales in 32..63 */
        sc_sum += sc[j];
    }
    const float d = std / (uniform_std(levels) * sc_sum / 8.0f);
    *d_out = mp_f32_to_f16(d);
    *dmin_out = mp_f32_to_f16((float)(levels / 2) * mp_f16_to_f32(*d_out));
    /* 6-bit scale/min packing of the format: j < 4 in the low 6 bits of bytes j and j + 4;
     * j >= 4 split into a low nibble (byte j + 4) and 2 high bits (top of bytes j - 4 and j). */
    memset(scales, 0, MP_K_SCALE_SIZE);
    for (int j = 0; j < 8; j++) {
        if (j < 4) {
            scales[j] |= sc[j] & 63;
            scales[j + 4] |= sc[j] & 63;
        } else {
            scales[j + 4] = (uint8_t)((sc[j] & 0xF) | ((sc[j] & 0xF) << 4));
            scales[j - 4] |= (uint8_t)((sc[j] >> 4) << 6);
            scales[j] |= (uint8_t)((sc[j] >> 4) << 6);
        }
    }
}

static void random_bytes(uint8_t *p, size_t n, uint64_t (*next)(void *), void *r)
{
    for (size_t i = 0; i < n; i += 8) {
        const uint64_t bits = next(r);
        memcpy(p + i, &bits, n - i < 8 ? n - i : 8);
    }
}

static void q4_K_block(mp_block_q4_K *b, float std, bool zero_first, uint64_t (*next)(void *), void *r)
{
    affine_K_head(&b->d, &b->dmin, b->scales, 16, std, next, r);
    random_bytes(b->qs, sizeof b->qs, next, r);
    if (zero_first) /* element 0 is the low nibble of qs[0]: q = 8 */
        b->qs[0] = (uint8_t)((b->qs[0] & 0xF0) | 8);
}

static void q5_K_block(mp_block_q5_K *b, float std, bool zero_first, uint64_t (*next)(void *), void *r)
{
    affine_K_head(&b->d, &b->dmin, b->scales, 32, std, next, r);
    random_bytes(b->qh, sizeof b->qh, next, r);
    random_bytes(b->qs, sizeof b->qs, next, r);
    if (zero_first) { /* element 0: the low nibble of qs[0] and bit 0 of qh[0]; q = 16 = 0b1'0000 */
        b->qs[0] = (uint8_t)(b->qs[0] & 0xF0);
        b->qh[0] = (uint8_t)(b->qh[0] | 1);
    }
}

/* Q2_K: x = (d sc_g) q - (dmin m_g) over 16 groups of 16, q in 0..3. With dmin = d and m_g = sc_g
 * (even groups) or 2 sc_g (odd), q = 1 or 2 is exactly zero and the groups' mean offsets of +-0.5
 * step cancel; E[(q - q0)^2] = 1.5 sets d for the spread. */
static void q2_K_block(mp_block_q2_K *b, float std, bool zero_first, uint64_t (*next)(void *), void *r)
{
    float sc_sum = 0;
    for (int g = 0; g < 16; g++) {
        const int sc = 4 + (int)(next(r) % 4); /* 4..7, so that 2 sc fits the 4-bit min */
        b->scales[g] = (uint8_t)(sc | ((g % 2 ? 2 * sc : sc) << 4));
        sc_sum += (float)sc;
    }
    b->d = mp_f32_to_f16(std / (sqrtf(1.5f) * sc_sum / 16.0f));
    b->dmin = b->d;
    random_bytes(b->qs, sizeof b->qs, next, r);
    if (zero_first) /* element 0: bits 0-1 of qs[0], group 0 (even): q = 1 */
        b->qs[0] = (uint8_t)((b->qs[0] & 0xFC) | 1);
}

/* Q3_K: x = (d (s_g - 32)) q over 16 groups of 16, q in -4..3. q = 0 is exactly zero; the group
 * scales alternate in sign so that the mean of q (-0.5) cancels; E[q^2] = 5.5 sets d. */
static void q3_K_block(mp_block_q3_K *b, float std, bool zero_first, uint64_t (*next)(void *), void *r)
{
    float c_sum = 0;
    memset(b->scales, 0, sizeof b->scales);
    for (int g = 0; g < 16; g++) {
        const int c = 16 + (int)(next(r) % 16); /* |s_g - 32| in 16..31 */
        const int u = g % 2 ? 32 - c : 32 + c;  /* 6-bit code, 1..63 */
        b->scales[g % 8] |= (uint8_t)((u & 0x0F) << (4 * (g / 8)));
        b->scales[8 + g % 4] |= (uint8_t)((u >> 4) << (2 * (g / 4)));
        c_sum += (float)c;
    }
    b->d = mp_f32_to_f16(std / (sqrtf(5.5f) * c_sum / 16.0f));
    random_bytes(b->hmask, sizeof b->hmask, next, r);
    random_bytes(b->qs, sizeof b->qs, next, r);
    if (zero_first) { /* element 0: bits 0-1 of qs[0] and bit 0 of hmask[0]; u = q + 4 = 4 */
        b->qs[0] = (uint8_t)(b->qs[0] & 0xFC);
        b->hmask[0] = (uint8_t)(b->hmask[0] | 1);
    }
}

/* Q6_K: x = d * scale_j * (q - 32) over 16 sub-blocks of 16, q in 0..63. */
static void q6_K_block(mp_block_q6_K *b, float std, bool zero_first, uint64_t (*next)(void *), void *r)
{
    float sc_sum = 0;
    for (int j = 0; j < MP_QK_K / 16; j++) {
        b->scales[j] = (int8_t)(64 + next(r) % 64); /* 64..127 */
        sc_sum += b->scales[j];
    }
    b->d = mp_f32_to_f16(std / (uniform_std(64) * sc_sum / 16.0f));
    for (int i = 0; i < MP_QK_K / 2; i += 8) {
        uint64_t bits = next(r);
        memcpy(b->ql + i, &bits, 8);
    }
    for (int i = 0; i < MP_QK_K / 4; i += 8) {
        uint64_t bits = next(r);
        memcpy(b->qh + i, &bits, 8);
    }
    if (zero_first) { /* element 0: low nibble of ql[0], low 2 bits of qh[0]; q = 32 = 0b10'0000 */
        b->ql[0] = (uint8_t)(b->ql[0] & 0xF0);
        b->qh[0] = (uint8_t)((b->qh[0] & 0xFC) | 2);
    }
}

static void q8_0_block(mp_block_q8_0 *b, float std, bool zero_first, uint64_t (*next)(void *), void *r)
{
    b->d = mp_f32_to_f16(std / uniform_std(255));
    for (int i = 0; i < MP_QK8_0; i += 8) {
        uint64_t bits = next(r);
        for (int k = 0; k < 8; k++) {
            int8_t q = (int8_t)(bits >> (8 * k));
            b->qs[i + k] = q == -128 ? 127 : q; /* symmetric range -127..127 */
        }
    }
    if (zero_first)
        b->qs[0] = 0;
}

/* Q4_0: x = d * (q - 8), q in 0..15. */
static void q4_0_block(mp_block_q4_0 *b, float std, bool zero_first, uint64_t (*next)(void *), void *r)
{
    b->d = mp_f32_to_f16(std / uniform_std(16));
    uint64_t bits = next(r);
    memcpy(b->qs, &bits, 8);
    bits = next(r);
    memcpy(b->qs + 8, &bits, 8);
    if (zero_first)
        b->qs[0] = (uint8_t)((b->qs[0] & 0xF0) | 8);
}

/* The 16 random nibbles of a block of 32 (Q4_0's layout), and 32 random fifth bits. */
static void random_nibbles(uint8_t qs[16], uint64_t (*next)(void *), void *r)
{
    uint64_t bits = next(r);
    memcpy(qs, &bits, 8);
    bits = next(r);
    memcpy(qs + 8, &bits, 8);
}

/* Q4_1 and Q5_1: x = d q + m, q in 0..levels-1, with m = -(levels / 2) d (exact in f16: a power
 * of two times d) so that q = levels / 2 is exactly 0. qh: NULL for Q4_1. */
static void min_block(mp_f16 *d, mp_f16 *m, uint8_t qs[16], uint8_t *qh, int levels, float std, bool zero_first,
                      uint64_t (*next)(void *), void *r)
{
    *d = mp_f32_to_f16(std / uniform_std(levels));
    *m = mp_f32_to_f16(-(float)(levels / 2) * mp_f16_to_f32(*d));
    random_nibbles(qs, next, r);
    if (qh) {
        const uint32_t h = (uint32_t)next(r);
        memcpy(qh, &h, 4);
    }
    if (zero_first) { /* q = levels / 2: nibble 8 (Q4_1), or nibble 0 and fifth bit 1 (Q5_1) */
        qs[0] = (uint8_t)((qs[0] & 0xF0) | (qh ? 0 : 8));
        if (qh)
            qh[0] |= 1;
    }
}

/* Q5_0: x = d (q - 16), q in 0..31. */
static void q5_0_block(mp_block_q5_0 *b, float std, bool zero_first, uint64_t (*next)(void *), void *r)
{
    b->d = mp_f32_to_f16(std / uniform_std(32));
    random_nibbles(b->qs, next, r);
    const uint32_t h = (uint32_t)next(r);
    memcpy(b->qh, &h, 4);
    if (zero_first) { /* q = 16: nibble 0, fifth bit 1 */
        b->qs[0] &= 0xF0;
        b->qh[0] |= 1;
    }
}

/* The standard deviation of 16 levels drawn uniformly (about their mean). */
static float levels_std(const int8_t levels[16])
{
    float sum = 0, sum2 = 0;
    for (int k = 0; k < 16; k++) {
        sum += levels[k];
        sum2 += (float)levels[k] * levels[k];
    }
    return sqrtf(sum2 / 16 - (sum / 16) * (sum / 16));
}

/* IQ4_NL: x = d v[q]. No level is 0, so a forced zero element zeroes its whole block (d = 0). */
static void iq4_nl_block(mp_block_iq4_nl *b, float std, bool zero_first, uint64_t (*next)(void *), void *r)
{
    static const int8_t levels[16] = MP_IQ4_NL_LEVELS;
    b->d = mp_f32_to_f16(zero_first ? 0.0f : std / levels_std(levels));
    random_nibbles(b->qs, next, r);
}

/* IQ4_XS: x = d (s_j - 32) v[q], sub-block codes s_j in 40..63 (scales 8..31); a forced zero element
 * zeroes its sub-block (s_0 = 32), as IQ4_NL's block. */
static void iq4_xs_block(mp_block_iq4_xs *b, float std, bool zero_first, uint64_t (*next)(void *), void *r)
{
    static const int8_t levels[16] = MP_IQ4_NL_LEVELS;
    int s[8];
    float ms = 0.0f;
    for (int j = 0; j < 8; j++) {
        s[j] = 40 + (int)(next(r) % 24);
        ms += (float)(s[j] - 32) * (float)(s[j] - 32);
    }
    if (zero_first)
        s[0] = 32;
    b->d = mp_f32_to_f16(std / (levels_std(levels) * sqrtf(ms / 8.0f)));
    mp_iq4_xs_set_scales(b, s);
    for (int j = 0; j < 8; j++)
        random_nibbles(b->qs + 16 * j, next, r);
}

/* MXFP4: x = 2^(e - 128) v[q], code 0 is 0. A power-of-two scale cannot hit the requested spread,
 * so each block takes one of the two around it, the lower with the probability that makes the
 * mean square right: with s the lower block spread and r = (std / s)^2 in [1, 4),
 * p s^2 + (1 - p) 4 s^2 = std^2 gives p = (4 - r) / 3. */
static void mxfp4_block(mp_block_mxfp4 *b, float std, bool zero_first, uint64_t (*next)(void *), void *r)
{
    static const int8_t levels[16] = MP_MXFP4_LEVELS;
    const float unit = std / levels_std(levels); /* the ideal 2^(e - 128) */
    const int lo = (int)floorf(log2f(unit));
    const float ratio = unit / ldexpf(1.0f, lo), p_low = (4.0f - ratio * ratio) / 3.0f;
    const float draw = (float)(next(r) >> 40) * 0x1p-24f; /* uniform in [0, 1) */
    const int e = 128 + lo + (draw < p_low ? 0 : 1);
    b->e = (uint8_t)(e < 0 ? 0 : e > 255 ? 255 : e);
    random_nibbles(b->qs, next, r);
    if (zero_first)
        b->qs[0] &= 0xF0;
}

void mp_mk_random_row(int type, int64_t n, float std, bool zero_first, bool zero_row,
                      uint64_t (*next)(void *), void *rng_state, void *dst)
{
    const size_t row_bytes = mp_type_row_bytes(type, n);
    if (zero_row) { /* all-zero bytes: every scale is +0.0, so every element is exactly 0 */
        memset(dst, 0, row_bytes);
        return;
    }
    const int64_t n_blocks = n / mp_type_block_elems(type);
    for (int64_t i = 0; i < n_blocks; i++) {
        const bool z = zero_first && i == 0;
        switch (type) {
        case MP_TYPE_Q2_K: q2_K_block((mp_block_q2_K *)dst + i, std, z, next, rng_state); break;
        case MP_TYPE_Q3_K: q3_K_block((mp_block_q3_K *)dst + i, std, z, next, rng_state); break;
        case MP_TYPE_Q4_K: q4_K_block((mp_block_q4_K *)dst + i, std, z, next, rng_state); break;
        case MP_TYPE_Q5_K: q5_K_block((mp_block_q5_K *)dst + i, std, z, next, rng_state); break;
        case MP_TYPE_Q6_K: q6_K_block((mp_block_q6_K *)dst + i, std, z, next, rng_state); break;
        case MP_TYPE_Q8_0: q8_0_block((mp_block_q8_0 *)dst + i, std, z, next, rng_state); break;
        case MP_TYPE_Q4_0: q4_0_block((mp_block_q4_0 *)dst + i, std, z, next, rng_state); break;
        case MP_TYPE_Q4_1: {
            mp_block_q4_1 *b = (mp_block_q4_1 *)dst + i;
            min_block(&b->d, &b->m, b->qs, NULL, 16, std, z, next, rng_state);
            break;
        }
        case MP_TYPE_Q5_1: {
            mp_block_q5_1 *b = (mp_block_q5_1 *)dst + i;
            min_block(&b->d, &b->m, b->qs, b->qh, 32, std, z, next, rng_state);
            break;
        }
        case MP_TYPE_Q5_0: q5_0_block((mp_block_q5_0 *)dst + i, std, z, next, rng_state); break;
        case MP_TYPE_IQ4_NL: iq4_nl_block((mp_block_iq4_nl *)dst + i, std, z, next, rng_state); break;
        case MP_TYPE_MXFP4: mxfp4_block((mp_block_mxfp4 *)dst + i, std, z, next, rng_state); break;
        case MP_TYPE_IQ4_XS: iq4_xs_block((mp_block_iq4_xs *)dst + i, std, z, next, rng_state); break;
        default: return;
        }
    }
}
