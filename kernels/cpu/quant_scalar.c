/* kernels/cpu/quant_scalar.c — scalar reference kernels: dequantize_row and vec_dot per type.
 *
 * These are the reference every SIMD variant is tested against, and they reproduce the gguf
 * package's dequantization bit for bit: each element is computed with the same float32
 * operations in the same order (e.g. Q4_K: (d * scale) * q - (dmin * min)). kernels/meson.build
 * compiles this file with -ffp-contract=off so that the compiler cannot fuse them into FMAs.
 *
 * vec_dot accumulates integer products per block exactly (int32), as the formats are designed
 * for, and applies the float scales once per block (per 16/32-element sub-block for the scales
 * of the K-quants, which are integers too). Partner formats: F32/F16/BF16 weights dot an F32
 * row; the blocks of 32 (Q4_0, Q4_1, Q5_0, Q5_1, Q8_0, IQ4_NL, MXFP4) dot Q8_0; the K-quants Q2_K..Q6_K and IQ4_XS dot Q8_K (whose bsums carry the sums the mins need).
 */
#include <string.h>

#include "kernels/cpu/quant_impl.h"

/* ---- dequantize ---- */

void mp_dequantize_row_f32_scalar(const void *src, float *dst, int64_t n)
{
    memcpy(dst, src, (size_t)n * sizeof(float));
}

void mp_dequantize_row_f16_scalar(const void *src, float *dst, int64_t n)
{
    const uint8_t *p = src; /* (n,) f16, possibly unaligned */
    for (int64_t i = 0; i < n; i++) {
        mp_f16 h;
        memcpy(&h, p + 2 * i, sizeof(h));
        dst[i] = mp_f16_to_f32(h);
    }
}

void mp_dequantize_row_bf16_scalar(const void *src, float *dst, int64_t n)
{
    const uint8_t *p = src; /* (n,) bf16, possibly unaligned */
    for (int64_t i = 0; i < n; i++) {
        mp_bf16 h;
        memcpy(&h, p + 2 * i, sizeof(h));
        dst[i] = mp_bf16_to_f32(h);
    }
}

void mp_dequantize_row_q4_0_scalar(const void *src, float *dst, int64_t n)
{
    const mp_block_q4_0 *b = src; /* (n / 32,) blocks */
    for (int64_t ib = 0; ib < n / MP_QK4_0; ib++, b++) {
        const float d = mp_f16_to_f32(b->d);
        float *y = dst + ib * MP_QK4_0;
        for (int l = 0; l < MP_QK4_0 / 2; l++) {
            y[l] = d * (float)((b->qs[l] & 0x0F) - 8);
            y[l + MP_QK4_0 / 2] = d * (float)((b->qs[l] >> 4) - 8);
        }
    }
}

void mp_dequantize_row_q8_0_scalar(const void *src, float *dst, int64_t n)
{
    const mp_block_q8_0 *b = src; /* (n / 32,) blocks */
    for (int64_t ib = 0; ib < n / MP_QK8_0; ib++, b++) {
        const float d = mp_f16_to_f32(b->d);
        for (int l = 0; l < MP_QK8_0; l++)
            dst[ib * MP_QK8_0 + l] = (float)b->qs[l] * d;
    }
}

void mp_dequantize_row_q2_K_scalar(const void *src, float *dst, int64_t n)
{
    const mp_block_q2_K *b = src; /* (n / 256,) blocks */
    for (int64_t ib = 0; ib < n / MP_QK_K; ib++, b++) {
        const float d = mp_f16_to_f32(b->d), dmin = mp_f16_to_f32(b->dmin);
        float *y = dst + ib * MP_QK_K;
        /* element e = 16g + l of group g = 8h + 2j + s: bits 2j of qs[32h + 16s + l] */
        for (int g = 0; g < 16; g++) {
            const int h = g / 8, j = (g % 8) / 2, s = g % 2;
            const float dl = d * (float)(b->scales[g] & 0x0F), ml = dmin * (float)(b->scales[g] >> 4);
            for (int l = 0; l < 16; l++)
                y[16 * g + l] = dl * (float)((b->qs[32 * h + 16 * s + l] >> (2 * j)) & 3) - ml;
        }
    }
}

void mp_dequantize_row_q3_K_scalar(const void *src, float *dst, int64_t n)
{
    const mp_block_q3_K *b = src; /* (n / 256,) blocks */
    for (int64_t ib = 0; ib < n / MP_QK_K; ib++, b++) {
        const float d = mp_f16_to_f32(b->d);
        int8_t sc[16];
        mp_q3_K_scales(b->scales, sc);
        float *y = dst + ib * MP_QK_K;
        for (int g = 0; g < 16; g++) {
            const int h = g / 8, j = (g % 8) / 2, s = g % 2;
            const float dl = d * (float)sc[g];
            for (int l = 0; l < 16; l++) {
                const int lb = 16 * s + l; /* byte of qs and hmask */
                const int q = ((b->qs[32 * h + lb] >> (2 * j)) & 3) - ((b->hmask[lb] >> (4 * h + j)) & 1 ? 0 : 4);
                y[16 * g + l] = dl * (float)q;
            }
        }
    }
}

/* The 256 quants of a Q4_K (qh NULL) or Q5_K block in element order: 4 chunks of 64, the low
 * nibbles of qs[32c..32c+31] sub-block 2c and the high ones 2c + 1; Q5_K's fifth bit of element
 * 32j + l is bit j of qh[l]. */
static void affine_K_quants(const uint8_t *qs, const uint8_t *qh, uint8_t q[MP_QK_K])
{
    for (int c = 0; c < 4; c++)
        for (int l = 0; l < 32; l++) {
            q[64 * c + l] = qs[32 * c + l] & 0x0F;
            q[64 * c + 32 + l] = qs[32 * c + l] >> 4;
        }
    if (qh)
        for (int j = 0; j < 8; j++)
            for (int l = 0; l < 32; l++)
                q[32 * j + l] |= (uint8_t)(((qh[l] >> j) & 1) << 4);
}

/* y[0..256) of a Q4_K/Q5_K block from its quants: (d sc_j) q - (dmin m_j) per sub-block j */
static void affine_K_dequant(mp_f16 d_h, mp_f16 dmin_h, const uint8_t *scales, const uint8_t q[MP_QK_K], float *y)
{
    const float d = mp_f16_to_f32(d_h), dmin = mp_f16_to_f32(dmin_h);
    for (int j = 0; j < 8; j++) {
        uint8_t sc, m;
        mp_q4_K_scale_min(scales, j, &sc, &m);
        const float dl = d * (float)sc, ml = dmin * (float)m;
        for (int l = 0; l < 32; l++)
            y[32 * j + l] = dl * (float)q[32 * j + l] - ml;
    }
}

void mp_dequantize_row_q4_K_scalar(const void *src, float *dst, int64_t n)
{
    const mp_block_q4_K *b = src; /* (n / 256,) blocks */
    for (int64_t ib = 0; ib < n / MP_QK_K; ib++, b++) {
        uint8_t q[MP_QK_K];
        affine_K_quants(b->qs, NULL, q);
        affine_K_dequant(b->d, b->dmin, b->scales, q, dst + ib * MP_QK_K);
    }
}

void mp_dequantize_row_q5_K_scalar(const void *src, float *dst, int64_t n)
{
    const mp_block_q5_K *b = src; /* (n / 256,) blocks */
    for (int64_t ib = 0; ib < n / MP_QK_K; ib++, b++) {
        uint8_t q[MP_QK_K];
        affine_K_quants(b->qs, b->qh, q);
        affine_K_dequant(b->d, b->dmin, b->scales, q, dst + ib * MP_QK_K);
    }
}

void mp_dequantize_row_q6_K_scalar(const void *src, float *dst, int64_t n)
{
    const mp_block_q6_K *b = src; /* (n / 256,) blocks */
    for (int64_t ib = 0; ib < n / MP_QK_K; ib++, b++) {
        const float d = mp_f16_to_f32(b->d);
        float *y = dst + ib * MP_QK_K;
        /* 2 halves of 128 elements; element 128h + 32s + l takes its low 4 bits from
         * ql[64h + 32(s&1) + l] (low nibble for s < 2, high for s >= 2) and its top 2 bits from
         * qh[32h + l] >> 2s. The 16 scales cover 16 consecutive elements each. */
        for (int h = 0; h < 2; h++) {
            const uint8_t *ql = b->ql + 64 * h, *qh = b->qh + 32 * h;
            for (int s = 0; s < 4; s++) {
                const int base = 128 * h + 32 * s;
                for (int l = 0; l < 32; l++) {
                    const int lo = s < 2 ? ql[32 * s + l] & 0x0F : ql[32 * (s - 2) + l] >> 4;
                    const int hi = (qh[l] >> (2 * s)) & 3;
                    const int q = (lo | (hi << 4)) - 32;
                    const float dl = d * (float)b->scales[(base + l) / 16];
                    y[base + l] = dl * (float)q;
                }
            }
        }
    }
}

void mp_dequantize_row_q8_K_scalar(const void *src, float *dst, int64_t n)
{
    const uint8_t *p = src; /* (n / 256,) blocks; float d may be unaligned */
    for (int64_t ib = 0; ib < n / MP_QK_K; ib++) {
        mp_block_q8_K b;
        memcpy(&b, p + ib * sizeof(b), sizeof(b));
        for (int l = 0; l < MP_QK_K; l++)
            dst[ib * MP_QK_K + l] = b.d * (float)b.qs[l];
    }
}

/* ---- vec_dot ---- */

float mp_vec_dot_f32_scalar(int64_t n, const void *w, const void *x)
{
    const uint8_t *pw = w;  /* (n,) f32, possibly unaligned */
    const float *px = x;    /* (n,) f32 */
    float sum = 0.0f;
    for (int64_t i = 0; i < n; i++) {
        float wi;
        memcpy(&wi, pw + 4 * i, sizeof(wi));
        sum += wi * px[i];
    }
    return sum;
}

float mp_vec_dot_f16_scalar(int64_t n, const void *w, const void *x)
{
    const uint8_t *pw = w; /* (n,) f16 */
    const float *px = x;   /* (n,) f32 */
    float sum = 0.0f;
    for (int64_t i = 0; i < n; i++) {
        mp_f16 h;
        memcpy(&h, pw + 2 * i, sizeof(h));
        sum += mp_f16_to_f32(h) * px[i];
    }
    return sum;
}

float mp_vec_dot_bf16_scalar(int64_t n, const void *w, const void *x)
{
    const uint8_t *pw = w; /* (n,) bf16 */
    const float *px = x;   /* (n,) f32 */
    float sum = 0.0f;
    for (int64_t i = 0; i < n; i++) {
        mp_bf16 h;
        memcpy(&h, pw + 2 * i, sizeof(h));
        sum += mp_bf16_to_f32(h) * px[i];
    }
    return sum;
}

float mp_vec_dot_q4_0_q8_0_scalar(int64_t n, const void *w, const void *x)
{
    const mp_block_q4_0 *bw = w; /* (n / 32,) */
    const mp_block_q8_0 *bx = x; /* (n / 32,) */
    float sum = 0.0f;
    for (int64_t ib = 0; ib < n / MP_QK4_0; ib++) {
        int32_t isum = 0;
        for (int l = 0; l < MP_QK4_0 / 2; l++) {
            isum += ((bw[ib].qs[l] & 0x0F) - 8) * bx[ib].qs[l];
            isum += ((bw[ib].qs[l] >> 4) - 8) * bx[ib].qs[l + MP_QK4_0 / 2];
        }
        sum += (mp_f16_to_f32(bw[ib].d) * mp_f16_to_f32(bx[ib].d)) * (float)isum;
    }
    return sum;
}

float mp_vec_dot_q8_0_q8_0_scalar(int64_t n, const void *w, const void *x)
{
    const mp_block_q8_0 *bw = w; /* (n / 32,) */
    const mp_block_q8_0 *bx = x; /* (n / 32,) */
    float sum = 0.0f;
    for (int64_t ib = 0; ib < n / MP_QK8_0; ib++) {
        int32_t isum = 0;
        for (int l = 0; l < MP_QK8_0; l++)
            isum += bw[ib].qs[l] * bx[ib].qs[l];
        sum += (mp_f16_to_f32(bw[ib].d) * mp_f16_to_f32(bx[ib].d)) * (float)isum;
    }
    return sum;
}

/* ---- the blocks of 32 that dot Q8_0 (Q4_1, Q5_0, Q5_1, IQ4_NL, MXFP4; Q4_0 and Q8_0 above and
 * below keep their own loops): one unpacker, x = d v + m (m = 0 but for Q4_1 and Q5_1) ---- */

typedef struct block32 {
    int v[32];   /* the integer level of each element */
    float d, m;
    int has_m;   /* Q4_1, Q5_1: add m (a separate float add, as the gguf package does) */
} block32;

static const int8_t k_iq4_nl_levels[16] = MP_IQ4_NL_LEVELS;
static const int8_t k_mxfp4_levels[16] = MP_MXFP4_LEVELS;

/* Block ib of a row of `type`; 0 for a type this does not unpack. */
static int unpack_block32(int type, const uint8_t *row, int64_t ib, block32 *b)
{
    const uint8_t *qs;
    uint32_t qh = 0;
    b->m = 0.0f;
    b->has_m = 0;
    switch (type) {
    case MP_TYPE_Q4_1: {
        const mp_block_q4_1 *p = (const mp_block_q4_1 *)row + ib;
        b->d = mp_f16_to_f32(p->d), b->m = mp_f16_to_f32(p->m), b->has_m = 1;
        qs = p->qs;
        break;
    }
    case MP_TYPE_Q5_0: {
        const mp_block_q5_0 *p = (const mp_block_q5_0 *)row + ib;
        b->d = mp_f16_to_f32(p->d);
        memcpy(&qh, p->qh, 4);
        qs = p->qs;
        break;
    }
    case MP_TYPE_Q5_1: {
        const mp_block_q5_1 *p = (const mp_block_q5_1 *)row + ib;
        b->d = mp_f16_to_f32(p->d), b->m = mp_f16_to_f32(p->m), b->has_m = 1;
        memcpy(&qh, p->qh, 4);
        qs = p->qs;
        break;
    }
    case MP_TYPE_IQ4_NL: {
        const mp_block_iq4_nl *p = (const mp_block_iq4_nl *)row + ib;
        b->d = mp_f16_to_f32(p->d);
        qs = p->qs;
        break;
    }
    case MP_TYPE_MXFP4: {
        const mp_block_mxfp4 *p = (const mp_block_mxfp4 *)row + ib;
        b->d = mp_e8m0_half(p->e);
        qs = p->qs;
        break;
    }
    default: return 0;
    }
    for (int l = 0; l < 32; l++) {
        const int nib = (qs[l % 16] >> (4 * (l / 16))) & 0x0F;
        switch (type) {
        case MP_TYPE_Q4_1: b->v[l] = nib; break;
        case MP_TYPE_Q5_0: b->v[l] = (nib | (int)((qh >> l) & 1) << 4) - 16; break;
        case MP_TYPE_Q5_1: b->v[l] = nib | (int)((qh >> l) & 1) << 4; break;
        case MP_TYPE_IQ4_NL: b->v[l] = k_iq4_nl_levels[nib]; break;
        default: b->v[l] = k_mxfp4_levels[nib]; break;
        }
    }
    return 1;
}

static void dequantize_block32_row(int type, const void *src, float *dst, int64_t n)
{
    block32 b;
    for (int64_t ib = 0; ib < n / 32; ib++) {
        unpack_block32(type, src, ib, &b);
        for (int l = 0; l < 32; l++)
            dst[32 * ib + l] = b.has_m ? b.d * (float)b.v[l] + b.m : b.d * (float)b.v[l];
    }
}

/* Against Q8_0 activations (d_x, q_x): d d_x sum(v q_x) + m d_x sum(q_x) per block. */
static float vec_dot_block32_q8_0(int type, int64_t n, const void *w, const void *x)
{
    const mp_block_q8_0 *bx = x; /* (n / 32,) */
    float sum = 0.0f;
    block32 b;
    for (int64_t ib = 0; ib < n / 32; ib++) {
        unpack_block32(type, w, ib, &b);
        int32_t isum = 0, xsum = 0;
        for (int l = 0; l < 32; l++) {
            isum += b.v[l] * bx[ib].qs[l];
            xsum += bx[ib].qs[l];
        }
        const float dx = mp_f16_to_f32(bx[ib].d);
        sum += (b.d * dx) * (float)isum;
        if (b.has_m)
            sum += (b.m * dx) * (float)xsum;
    }
    return sum;
}

#define DEFINE_BLOCK32(NAME, TYPE)                                                       \
    void mp_dequantize_row_##NAME##_scalar(const void *src, float *dst, int64_t n)       \
    {                                                                                    \
        dequantize_block32_row(TYPE, src, dst, n);                                       \
    }                                                                                    \
    float mp_vec_dot_##NAME##_q8_0_scalar(int64_t n, const void *w, const void *x)       \
    {                                                                                    \
        return vec_dot_block32_q8_0(TYPE, n, w, x);                                      \
    }

DEFINE_BLOCK32(q4_1, MP_TYPE_Q4_1)
DEFINE_BLOCK32(q5_0, MP_TYPE_Q5_0)
DEFINE_BLOCK32(q5_1, MP_TYPE_Q5_1)
DEFINE_BLOCK32(iq4_nl, MP_TYPE_IQ4_NL)
DEFINE_BLOCK32(mxfp4, MP_TYPE_MXFP4)

/* ---- IQ4_XS: IQ4_NL's levels under 6-bit sub-block scales, against Q8_K ---- */

void mp_dequantize_row_iq4_xs_scalar(const void *src, float *dst, int64_t n)
{
    const mp_block_iq4_xs *b = src; /* (n / 256,) */
    for (int64_t ib = 0; ib < n / MP_QK_K; ib++, b++) {
        const float d = mp_f16_to_f32(b->d);
        float *y = dst + ib * MP_QK_K;
        for (int j = 0; j < 8; j++) {
            const float dl = d * (float)(mp_iq4_xs_scale(b, j) - 32);
            for (int l = 0; l < 32; l++)
                y[32 * j + l] = dl * (float)k_iq4_nl_levels[(b->qs[16 * j + l % 16] >> (4 * (l / 16))) & 0x0F];
        }
    }
}

float mp_vec_dot_iq4_xs_q8_K_scalar(int64_t n, const void *w, const void *x)
{
    const mp_block_iq4_xs *bw = w; /* (n / 256,) */
    const mp_block_q8_K *bx = x;   /* (n / 256,) */
    float sum = 0.0f;
    for (int64_t ib = 0; ib < n / MP_QK_K; ib++) {
        int32_t isum = 0;
        for (int j = 0; j < 8; j++) {
            int32_t s = 0;
            for (int l = 0; l < 32; l++)
                s += k_iq4_nl_levels[(bw[ib].qs[16 * j + l % 16] >> (4 * (l / 16))) & 0x0F] * bx[ib].qs[32 * j + l];
            isum += (mp_iq4_xs_scale(&bw[ib], j) - 32) * s;
        }
        sum += (mp_f16_to_f32(bw[ib].d) * bx[ib].d) * (float)isum;
    }
    return sum;
}

float mp_vec_dot_q2_K_q8_K_scalar(int64_t n, const void *w, const void *x)
{
    const mp_block_q2_K *bw = w; /* (n / 256,) */
    const uint8_t *px = x;       /* (n / 256,) Q8_K blocks; float d may be unaligned */
    float sum = 0.0f;
    for (int64_t ib = 0; ib < n / MP_QK_K; ib++) {
        const mp_block_q2_K *b = &bw[ib];
        mp_block_q8_K y;
        memcpy(&y, px + ib * sizeof(y), sizeof(y));
        /* x ~ (d sc_g) q - dmin m_g per group of 16: the mins need only the group's bsum */
        int32_t isum_q = 0, isum_m = 0;
        for (int g = 0; g < 16; g++) {
            const int h = g / 8, j = (g % 8) / 2, s = g % 2;
            int32_t t = 0;
            for (int l = 0; l < 16; l++)
                t += ((b->qs[32 * h + 16 * s + l] >> (2 * j)) & 3) * y.qs[16 * g + l];
            isum_q += (b->scales[g] & 0x0F) * t;
            isum_m += (b->scales[g] >> 4) * y.bsums[g];
        }
        const float d = mp_f16_to_f32(b->d) * y.d, dmin = mp_f16_to_f32(b->dmin) * y.d;
        sum += d * (float)isum_q - dmin * (float)isum_m;
    }
    return sum;
}

float mp_vec_dot_q3_K_q8_K_scalar(int64_t n, const void *w, const void *x)
{
    const mp_block_q3_K *bw = w; /* (n / 256,) */
    const uint8_t *px = x;       /* (n / 256,) Q8_K blocks */
    float sum = 0.0f;
    for (int64_t ib = 0; ib < n / MP_QK_K; ib++) {
        const mp_block_q3_K *b = &bw[ib];
        mp_block_q8_K y;
        memcpy(&y, px + ib * sizeof(y), sizeof(y));
        int8_t sc[16];
        mp_q3_K_scales(b->scales, sc);
        int32_t isum = 0;
        for (int g = 0; g < 16; g++) {
            const int h = g / 8, j = (g % 8) / 2, s = g % 2;
            int32_t t = 0;
            for (int l = 0; l < 16; l++) {
                const int lb = 16 * s + l;
                const int q = ((b->qs[32 * h + lb] >> (2 * j)) & 3) - ((b->hmask[lb] >> (4 * h + j)) & 1 ? 0 : 4);
                t += q * y.qs[16 * g + l];
            }
            isum += sc[g] * t;
        }
        sum += (mp_f16_to_f32(b->d) * y.d) * (float)isum;
    }
    return sum;
}

/* The dot of a Q4_K/Q5_K block (its quants unpacked) with a Q8_K block: x ~ sum_j (d sc_j q -
 * dmin m_j), so the q part needs sum(q y) per sub-block and the min part only sum(y) per
 * sub-block = two adjacent bsums. */
static float affine_K_dot(mp_f16 d_h, mp_f16 dmin_h, const uint8_t *scales, const uint8_t q[MP_QK_K],
                          const mp_block_q8_K *y)
{
    int32_t isum_q = 0, isum_m = 0;
    for (int j = 0; j < 8; j++) {
        uint8_t sc, m;
        mp_q4_K_scale_min(scales, j, &sc, &m);
        int32_t s = 0;
        for (int l = 0; l < 32; l++)
            s += q[32 * j + l] * y->qs[32 * j + l];
        isum_q += sc * s;
        isum_m += m * (y->bsums[2 * j] + y->bsums[2 * j + 1]);
    }
    const float d = mp_f16_to_f32(d_h) * y->d, dmin = mp_f16_to_f32(dmin_h) * y->d;
    return d * (float)isum_q - dmin * (float)isum_m;
}

float mp_vec_dot_q4_K_q8_K_scalar(int64_t n, const void *w, const void *x)
{
    const mp_block_q4_K *bw = w; /* (n / 256,) */
    const uint8_t *px = x;       /* (n / 256,) Q8_K blocks; float d may be unaligned */
    float sum = 0.0f;
    for (int64_t ib = 0; ib < n / MP_QK_K; ib++) {
        mp_block_q8_K y;
        memcpy(&y, px + ib * sizeof(y), sizeof(y));
        uint8_t q[MP_QK_K];
        affine_K_quants(bw[ib].qs, NULL, q);
        sum += affine_K_dot(bw[ib].d, bw[ib].dmin, bw[ib].scales, q, &y);
    }
    return sum;
}

float mp_vec_dot_q5_K_q8_K_scalar(int64_t n, const void *w, const void *x)
{
    const mp_block_q5_K *bw = w; /* (n / 256,) */
    const uint8_t *px = x;       /* (n / 256,) Q8_K blocks */
    float sum = 0.0f;
    for (int64_t ib = 0; ib < n / MP_QK_K; ib++) {
        mp_block_q8_K y;
        memcpy(&y, px + ib * sizeof(y), sizeof(y));
        uint8_t q[MP_QK_K];
        affine_K_quants(bw[ib].qs, bw[ib].qh, q);
        sum += affine_K_dot(bw[ib].d, bw[ib].dmin, bw[ib].scales, q, &y);
    }
    return sum;
}

float mp_vec_dot_q6_K_q8_K_scalar(int64_t n, const void *w, const void *x)
{
    const mp_block_q6_K *bw = w; /* (n / 256,) */
    const uint8_t *px = x;       /* (n / 256,) Q8_K blocks */
    float sum = 0.0f;
    for (int64_t ib = 0; ib < n / MP_QK_K; ib++) {
        const mp_block_q6_K *b = &bw[ib];
        mp_block_q8_K y;
        memcpy(&y, px + ib * sizeof(y), sizeof(y));
        /* the quants are stored as u = q + 32 in 0..63: sum(q y) = sum(u y) - 32 sum(y), and
         * sum(y) per 16 elements is exactly a bsum */
        int32_t group[16] = {0};
        for (int h = 0; h < 2; h++) {
            const uint8_t *ql = b->ql + 64 * h, *qh = b->qh + 32 * h;
            for (int s = 0; s < 4; s++) {
                const int base = 128 * h + 32 * s;
                for (int l = 0; l < 32; l++) {
                    const int lo = s < 2 ? ql[32 * s + l] & 0x0F : ql[32 * (s - 2) + l] >> 4;
                    const int u = lo | (((qh[l] >> (2 * s)) & 3) << 4);
                    group[(base + l) / 16] += u * y.qs[base + l];
                }
            }
        }
        int32_t isum = 0;
        for (int g = 0; g < 16; g++)
            isum += b->scales[g] * (group[g] - 32 * y.bsums[g]);
        sum += (mp_f16_to_f32(b->d) * y.d) * (float)isum;
    }
    return sum;
}
