/* kernels/cpu/quantize.c — reference quantizers (float rows -> blocks) for every type.
 *
 * Q4_0, Q4_1, Q5_0, Q5_1, Q8_0 and MXFP4 reproduce the gguf package's quantize() bit for bit
 * (same float32 operations in the same order; this file is built with -ffp-contract=off so no FMA
 * can change a rounding):
 *   Q4_0: d = x[argmax |x|] / -8, q = min(15, trunc(x / d + 8.5))     (Q5_0: -16, 31, 16.5)
 *   Q4_1: d = (max - min) / 15, m = min, q = trunc((x - m) / d + 0.5) (Q5_1: 31)
 *   Q8_0: d = max |x| / 127,      q = round_half_away(x / d)
 *   MXFP4: a power-of-two scale from max |x|, each element its nearest E2M1 level
 * IQ4_NL and IQ4_XS are our own search over scales (below).
 * The K-quants are our own round-to-nearest design, not llama.cpp's bit pattern: each sub-block
 * (32 elements for Q4_K and Q5_K, 16 for Q2_K, Q3_K and Q6_K) gets a least-squares scale (and min) chosen by trying a
 * small grid of initial scales and refitting twice; then the sub-block scales are themselves
 * quantized against the super-block's f16 scale, and the final quants are recomputed against
 * the scales exactly as they will be decoded, so rounding of the scales cannot compound.
 * Q8_K (activations only) is symmetric: d = max |x| / 127, q in [-127, 127], bsums per 16.
 *
 * Inputs must be finite, with |x| small enough that the f16 super-block scales do not
 * overflow (|x| < ~1e5 for the 4-bit formats); weights of real models are far inside that.
 */
#include <math.h>
#include <string.h>

#include "kernels/cpu/quant_impl.h"

void mp_quantize_row_f32_ref(const float *src, void *dst, int64_t n)
{
    memcpy(dst, src, (size_t)n * sizeof(float));
}

void mp_quantize_row_f16_ref(const float *src, void *dst, int64_t n)
{
    uint8_t *p = dst; /* (n,) f16 */
    for (int64_t i = 0; i < n; i++) {
        const mp_f16 h = mp_f32_to_f16(src[i]);
        memcpy(p + 2 * i, &h, sizeof(h));
    }
}

void mp_quantize_row_bf16_ref(const float *src, void *dst, int64_t n)
{
    uint8_t *p = dst; /* (n,) bf16 */
    for (int64_t i = 0; i < n; i++) {
        const mp_bf16 h = mp_f32_to_bf16(src[i]);
        memcpy(p + 2 * i, &h, sizeof(h));
    }
}

/* The value of largest magnitude among x[0..n) (the first one on ties; 0 for a zero block): the
 * symmetric formats map it to their most negative level, so the asymmetric range is used on the
 * side where the extreme lies. */
static float signed_extreme(const float *x, int n)
{
    float amax = 0.0f, max = 0.0f;
    for (int l = 0; l < n; l++)
        if (fabsf(x[l]) > amax) {
            amax = fabsf(x[l]);
            max = x[l];
        }
    return max;
}

void mp_quantize_row_q4_0_ref(const float *src, void *dst, int64_t n)
{
    mp_block_q4_0 *b = dst; /* (n / 32,) */
    for (int64_t ib = 0; ib < n / MP_QK4_0; ib++) {
        const float *x = src + ib * MP_QK4_0;
        const float d = signed_extreme(x, MP_QK4_0) / -8.0f; /* the extreme maps to -8 */
        const float id = d != 0.0f ? 1.0f / d : 0.0f;
        b[ib].d = mp_f32_to_f16(d);
        for (int l = 0; l < MP_QK4_0 / 2; l++) {
            int q0 = (int)(x[l] * id + 8.5f), q1 = (int)(x[l + MP_QK4_0 / 2] * id + 8.5f);
            q0 = q0 < 0 ? 0 : q0 > 15 ? 15 : q0;
            q1 = q1 < 0 ? 0 : q1 > 15 ? 15 : q1;
            b[ib].qs[l] = (uint8_t)(q0 | (q1 << 4));
        }
    }
}

void mp_quantize_row_q8_0_ref(const float *src, void *dst, int64_t n)
{
    mp_block_q8_0 *b = dst; /* (n / 32,) */
    for (int64_t ib = 0; ib < n / MP_QK8_0; ib++) {
        const float *x = src + ib * MP_QK8_0;
        float amax = 0.0f;
        for (int l = 0; l < MP_QK8_0; l++)
            amax = fmaxf(amax, fabsf(x[l]));
        const float d = amax / 127.0f;
        const float id = d != 0.0f ? 1.0f / d : 0.0f;
        b[ib].d = mp_f32_to_f16(d);
        for (int l = 0; l < MP_QK8_0; l++)
            b[ib].qs[l] = (int8_t)roundf(x[l] * id); /* |x * id| <= 127 (+ rounding), never -128 */
    }
}

/* 32 codes into a block's nibbles (low: elements 0..15, high: 16..31) and, with qh, their fifth
 * bits (element l at bit l of the little-endian word): Q4_1, Q5_0 and Q5_1's packing. */
static void pack_codes(const int q[32], uint8_t qs[16], uint8_t *qh)
{
    uint32_t h = 0;
    for (int l = 0; l < 16; l++)
        qs[l] = (uint8_t)((q[l] & 0x0F) | (q[l + 16] & 0x0F) << 4);
    for (int l = 0; l < 32; l++)
        h |= (uint32_t)(q[l] >> 4) << l;
    if (qh)
        memcpy(qh, &h, 4);
}

/* Q4_1 and Q5_1 (bits levels 2^bits - 1): d = (max - min) / levels, q = min(levels,
 * trunc((x - min) / d + 0.5)), m = min. qh: NULL for Q4_1. */
static void quantize_block_min(const float *x, int levels, mp_f16 *d_out, mp_f16 *m_out, uint8_t *qs, uint8_t *qh)
{
    float min = x[0], max = x[0];
    for (int l = 1; l < 32; l++) {
        min = x[l] < min ? x[l] : min;
        max = x[l] > max ? x[l] : max;
    }
    const float d = (max - min) / (float)levels;
    const float id = d != 0.0f ? 1.0f / d : 0.0f;
    *d_out = mp_f32_to_f16(d);
    *m_out = mp_f32_to_f16(min);
    int q[32];
    for (int l = 0; l < 32; l++) {
        q[l] = (int)((x[l] - min) * id + 0.5f);
        q[l] = q[l] < 0 ? 0 : q[l] > levels ? levels : q[l];
    }
    pack_codes(q, qs, qh);
}

void mp_quantize_row_q4_1_ref(const float *src, void *dst, int64_t n)
{
    mp_block_q4_1 *b = dst; /* (n / 32,) */
    for (int64_t ib = 0; ib < n / 32; ib++)
        quantize_block_min(src + 32 * ib, 15, &b[ib].d, &b[ib].m, b[ib].qs, NULL);
}

void mp_quantize_row_q5_1_ref(const float *src, void *dst, int64_t n)
{
    mp_block_q5_1 *b = dst; /* (n / 32,) */
    for (int64_t ib = 0; ib < n / 32; ib++)
        quantize_block_min(src + 32 * ib, 31, &b[ib].d, &b[ib].m, b[ib].qs, b[ib].qh);
}

/* Q5_0: Q4_0's rule on 5 bits: d = x[argmax |x|] / -16, q = min(31, trunc(x / d + 16.5)). */
void mp_quantize_row_q5_0_ref(const float *src, void *dst, int64_t n)
{
    mp_block_q5_0 *b = dst; /* (n / 32,) */
    for (int64_t ib = 0; ib < n / 32; ib++) {
        const float *x = src + 32 * ib;
        const float d = signed_extreme(x, 32) / -16.0f;
        const float id = d != 0.0f ? 1.0f / d : 0.0f;
        b[ib].d = mp_f32_to_f16(d);
        int q[32];
        for (int l = 0; l < 32; l++) {
            q[l] = (int)(x[l] * id + 16.5f);
            q[l] = q[l] < 0 ? 0 : q[l] > 31 ? 31 : q[l];
        }
        pack_codes(q, b[ib].qs, b[ib].qh);
    }
}

/* The index of the level nearest v among 16 ascending levels (the lower one on a tie). */
static int nearest_level(const int8_t *levels, float v)
{
    int best = 0;
    float err = fabsf(v - (float)levels[0]);
    for (int k = 1; k < 16; k++) {
        const float e = fabsf(v - (float)levels[k]);
        if (e < err) {
            err = e;
            best = k;
        }
    }
    return best;
}

/* The IQ4 levels' scale for 32 values, our own search: the signed extreme is put at each of nine
 * levels near either end of the scale (-127 ... -95 and 113 ... 89, mapped to the extreme's sign);
 * each candidate assigns every element its nearest level and is refitted by least squares; the
 * candidate of least squared error wins. 0 for a zero block. */
static const int8_t k_iq4_levels[16] = MP_IQ4_NL_LEVELS;

static float iq4_scale(const float *x)
{
    const float max = signed_extreme(x, 32);
    float best_d = 0.0f, best_err = INFINITY;
    for (int c = 0; max != 0.0f && c < 18; c++) {
        const float target = c < 9 ? -127.0f + 4.0f * (float)c : 113.0f - 3.0f * (float)(c - 9);
        const float id = target / max;
        float v[32], sxv = 0.0f, svv = 0.0f;
        for (int l = 0; l < 32; l++) {
            v[l] = (float)k_iq4_levels[nearest_level(k_iq4_levels, x[l] * id)];
            sxv += x[l] * v[l];
            svv += v[l] * v[l];
        }
        const float d = svv > 0.0f ? sxv / svv : 0.0f;
        float err = 0.0f;
        for (int l = 0; l < 32; l++) {
            const float r = x[l] - d * v[l];
            err += r * r;
        }
        if (err < best_err) {
            best_err = err;
            best_d = d;
        }
    }
    return best_d;
}

/* The 16 bytes of nibbles of 32 values against the scale d as decoded (Q4_0's order). */
static void iq4_codes(const float *x, float d, uint8_t qs[16])
{
    const float id = d != 0.0f ? 1.0f / d : 0.0f;
    for (int l = 0; l < 16; l++)
        qs[l] = (uint8_t)(nearest_level(k_iq4_levels, x[l] * id) | nearest_level(k_iq4_levels, x[l + 16] * id) << 4);
}

/* IQ4_NL: iq4_scale per block, the codes against its f16 value. */
void mp_quantize_row_iq4_nl_ref(const float *src, void *dst, int64_t n)
{
    mp_block_iq4_nl *b = dst; /* (n / 32,) */
    for (int64_t ib = 0; ib < n / 32; ib++) {
        const float *x = src + 32 * ib;
        b[ib].d = mp_f32_to_f16(iq4_scale(x));
        iq4_codes(x, mp_f16_to_f32(b[ib].d), b[ib].qs);
    }
}

/* IQ4_XS: iq4_scale per sub-block of 32; the super-block scale d = the largest |scale| / 31 (as
 * f16), each sub-block's code round(scale / d) + 32 in 0..63, and its codes against d (s - 32) as
 * decoded. */
void mp_quantize_row_iq4_xs_ref(const float *src, void *dst, int64_t n)
{
    mp_block_iq4_xs *b = dst; /* (n / 256,) */
    for (int64_t ib = 0; ib < n / MP_QK_K; ib++) {
        const float *x = src + ib * MP_QK_K;
        float sc[8], amax = 0.0f;
        for (int j = 0; j < 8; j++) {
            sc[j] = iq4_scale(x + 32 * j);
            amax = fmaxf(amax, fabsf(sc[j]));
        }
        b[ib].d = mp_f32_to_f16(amax / 31.0f);
        const float d = mp_f16_to_f32(b[ib].d);
        const float id = d != 0.0f ? 1.0f / d : 0.0f;
        int ls[8];
        for (int j = 0; j < 8; j++) {
            ls[j] = (int)lrintf(sc[j] * id) + 32;
            ls[j] = ls[j] < 0 ? 0 : ls[j] > 63 ? 63 : ls[j];
            iq4_codes(x + 32 * j, d * (float)(ls[j] - 32), b[ib].qs + 16 * j);
        }
        mp_iq4_xs_set_scales(&b[ib], ls);
    }
}

/* MXFP4: the gguf package's rule: e = floor(log2(max |x|)) - 2 + 127 (0 for a zero block; here
 * from the float's exponent, exact where a float log2 may round up just below a power of two, and
 * clamped at 0 for blocks below 2^-125), then each element the code of least |2^(e-128) v - x|
 * (the first in code order on a tie). */
void mp_quantize_row_mxfp4_ref(const float *src, void *dst, int64_t n)
{
    static const int8_t levels[16] = MP_MXFP4_LEVELS;
    mp_block_mxfp4 *b = dst; /* (n / 32,) */
    for (int64_t ib = 0; ib < n / 32; ib++) {
        const float *x = src + 32 * ib;
        float amax = 0.0f;
        for (int l = 0; l < 32; l++)
            amax = fmaxf(amax, fabsf(x[l]));
        int e = 0;
        if (amax > 0.0f) {
            int ex;
            frexpf(amax, &ex); /* amax = f 2^ex, f in [0.5, 1): floor(log2 amax) = ex - 1 */
            e = ex - 1 - 2 + 127;
            e = e < 0 ? 0 : e > 255 ? 255 : e;
        }
        b[ib].e = (uint8_t)e;
        const float d = mp_e8m0_half((uint8_t)e);
        for (int l = 0; l < 32; l++) {
            int best = 0;
            float err = fabsf(d * (float)levels[0] - x[l]);
            for (int k = 1; k < 16; k++) {
                const float r = fabsf(d * (float)levels[k] - x[l]);
                if (r < err) {
                    err = r;
                    best = k;
                }
            }
            if (l < 16)
                b[ib].qs[l] = (uint8_t)best;
            else
                b[ib].qs[l - 16] |= (uint8_t)(best << 4);
        }
    }
}

void mp_quantize_row_q8_K_ref(const float *src, void *dst, int64_t n)
{
    uint8_t *p = dst; /* (n / 256,) Q8_K blocks */
    for (int64_t ib = 0; ib < n / MP_QK_K; ib++) {
        const float *x = src + ib * MP_QK_K;
        mp_block_q8_K b;
        float amax = 0.0f;
        for (int l = 0; l < MP_QK_K; l++)
            amax = fmaxf(amax, fabsf(x[l]));
        const float iscale = amax != 0.0f ? 127.0f / amax : 0.0f;
        b.d = amax != 0.0f ? 1.0f / iscale : 0.0f;
        for (int l = 0; l < MP_QK_K; l++) {
            int q = (int)lrintf(x[l] * iscale);
            b.qs[l] = (int8_t)(q > 127 ? 127 : q < -127 ? -127 : q);
        }
        mp_q8_K_bsums(&b);
        memcpy(p + ib * sizeof(b), &b, sizeof(b));
    }
}

/* ---- K-quant sub-block fits ---- */

static inline int clampi(int v, int lo, int hi)
{
    return v < lo ? lo : v > hi ? hi : v;
}

/* Fit x[0..n) ~ scale * q - offset with q in [0, qmax], scale >= 0, offset >= 0 (the format
 * stores a non-negative min that is subtracted). Returns the squared error of the fit. */
static float fit_scale_offset(const float *x, int n, int qmax, float *scale, float *offset)
{
    float xmin = 0.0f, xmax = 0.0f; /* the range always includes 0: offset >= 0 */
    for (int i = 0; i < n; i++) {
        xmin = fminf(xmin, x[i]);
        xmax = fmaxf(xmax, x[i]);
    }
    *scale = 0.0f;
    *offset = -xmin;
    if (xmax <= xmin)
        return 0.0f;
    float best_err = INFINITY;
    /* a grid of initial scales around the min/max one: stretching the grid a little often
     * lets more interior points land on levels, and least squares then fixes the ends */
    for (int step = -6; step <= 6; step++) {
        float s = (xmax - xmin) / ((float)qmax + 0.1f * (float)step);
        float c = xmin; /* x ~ s q + c, c = -offset <= 0 */
        for (int refit = 0; refit < 3; refit++) {
            double sq = 0, sqq = 0, sx = 0, sqx = 0;
            for (int i = 0; i < n; i++) {
                const int q = clampi((int)lrintf((x[i] - c) / s), 0, qmax);
                sq += q;
                sqq += (double)q * q;
                sx += x[i];
                sqx += (double)q * x[i];
            }
            const double det = n * sqq - sq * sq;
            if (det <= 0)
                break;
            double ns = (n * sqx - sq * sx) / det;
            double nc = (sx - ns * sq) / n;
            if (nc > 0) { /* a positive minimum is not representable: pin the offset to 0 */
                nc = 0;
                ns = sqx / sqq;
            }
            if (!(ns > 0))
                break;
            s = (float)ns;
            c = (float)nc;
            float err = 0.0f;
            for (int i = 0; i < n; i++) {
                const int q = clampi((int)lrintf((x[i] - c) / s), 0, qmax);
                const float e = s * (float)q + c - x[i];
                err += e * e;
            }
            if (err < best_err) {
                best_err = err;
                *scale = s;
                *offset = -c;
            }
        }
    }
    return best_err;
}

/* Fit x[0..n) ~ scale * q with q in [qmin, qmax] (scale of either sign). */
static float fit_scale_symmetric(const float *x, int n, int qmin, int qmax, float *scale)
{
    float amax = 0.0f, max = 0.0f;
    for (int i = 0; i < n; i++)
        if (fabsf(x[i]) > amax) {
            amax = fabsf(x[i]);
            max = x[i];
        }
    *scale = 0.0f;
    if (amax == 0.0f)
        return 0.0f;
    float best_err = INFINITY;
    /* two families: the extreme on the long side of the range (qmin) or on the short (qmax) */
    for (int side = 0; side < 2; side++) {
        const float target = side == 0 ? (float)qmin : (float)qmax;
        for (int step = -6; step <= 6; step++) {
            float s = max / (target + (side == 0 ? -0.1f : 0.1f) * (float)step);
            for (int refit = 0; refit < 2; refit++) {
                double sqq = 0, sqx = 0;
                for (int i = 0; i < n; i++) {
                    const int q = clampi((int)lrintf(x[i] / s), qmin, qmax);
                    sqq += (double)q * q;
                    sqx += (double)q * x[i];
                }
                if (sqq <= 0)
                    break;
                s = (float)(sqx / sqq);
                if (s == 0.0f)
                    break;
                float err = 0.0f;
                for (int i = 0; i < n; i++) {
                    const int q = clampi((int)lrintf(x[i] / s), qmin, qmax);
                    const float e = s * (float)q - x[i];
                    err += e * e;
                }
                if (err < best_err) {
                    best_err = err;
                    *scale = s;
                }
            }
        }
    }
    return best_err;
}

void mp_quantize_row_q2_K_ref(const float *src, void *dst, int64_t n)
{
    mp_block_q2_K *b = dst; /* (n / 256,) */
    for (int64_t ib = 0; ib < n / MP_QK_K; ib++) {
        const float *x = src + ib * MP_QK_K;
        float scale[16], offset[16], max_scale = 0.0f, max_offset = 0.0f;
        for (int g = 0; g < 16; g++) {
            fit_scale_offset(x + 16 * g, 16, 3, &scale[g], &offset[g]);
            max_scale = fmaxf(max_scale, scale[g]);
            max_offset = fmaxf(max_offset, offset[g]);
        }
        /* 4-bit group scales and mins relative to the f16 super-block scales */
        b[ib].d = mp_f32_to_f16(max_scale / 15.0f);
        b[ib].dmin = mp_f32_to_f16(max_offset / 15.0f);
        const float d = mp_f16_to_f32(b[ib].d), dmin = mp_f16_to_f32(b[ib].dmin);
        memset(b[ib].qs, 0, sizeof(b[ib].qs));
        for (int g = 0; g < 16; g++) {
            const int sc = d > 0 ? clampi((int)lrintf(scale[g] / d), 0, 15) : 0;
            const int m = dmin > 0 ? clampi((int)lrintf(offset[g] / dmin), 0, 15) : 0;
            b[ib].scales[g] = (uint8_t)(sc | (m << 4));
            const float dl = d * (float)sc, ml = dmin * (float)m;
            const int h = g / 8, j = (g % 8) / 2, s = g % 2; /* the layout in quant.h */
            for (int l = 0; l < 16; l++) {
                const int q = dl > 0 ? clampi((int)lrintf((x[16 * g + l] + ml) / dl), 0, 3) : 0;
                b[ib].qs[32 * h + 16 * s + l] |= (uint8_t)(q << (2 * j));
            }
        }
    }
}

void mp_quantize_row_q3_K_ref(const float *src, void *dst, int64_t n)
{
    mp_block_q3_K *b = dst; /* (n / 256,) */
    for (int64_t ib = 0; ib < n / MP_QK_K; ib++) {
        const float *x = src + ib * MP_QK_K;
        float scale[16], amax_scale = 0.0f;
        for (int g = 0; g < 16; g++) {
            fit_scale_symmetric(x + 16 * g, 16, -4, 3, &scale[g]);
            amax_scale = fmaxf(amax_scale, fabsf(scale[g]));
        }
        /* 6-bit signed group scales (code - 32 in -32..31) against the f16 super-block scale */
        b[ib].d = mp_f32_to_f16(amax_scale / 31.0f);
        const float d = mp_f16_to_f32(b[ib].d);
        memset(b[ib].scales, 0, sizeof(b[ib].scales));
        memset(b[ib].qs, 0, sizeof(b[ib].qs));
        memset(b[ib].hmask, 0, sizeof(b[ib].hmask));
        for (int g = 0; g < 16; g++) {
            const int code = d > 0 ? clampi((int)lrintf(scale[g] / d), -32, 31) : 0;
            const int u = code + 32; /* 0..63 */
            b[ib].scales[g % 8] |= (uint8_t)((u & 0x0F) << (4 * (g / 8)));
            b[ib].scales[8 + g % 4] |= (uint8_t)((u >> 4) << (2 * (g / 4)));
            const float dl = d * (float)code;
            const int h = g / 8, j = (g % 8) / 2, s = g % 2;
            for (int l = 0; l < 16; l++) {
                const int q = dl != 0.0f ? clampi((int)lrintf(x[16 * g + l] / dl), -4, 3) : 0;
                const int lb = 16 * s + l;
                /* q + 4 in 0..7: its low 2 bits in qs, its bit 2 in hmask (set: no -4) */
                b[ib].qs[32 * h + lb] |= (uint8_t)(((q + 4) & 3) << (2 * j));
                b[ib].hmask[lb] |= (uint8_t)(((q + 4) >> 2) << (4 * h + j));
            }
        }
    }
}

/* One Q4_K/Q5_K super-block of x[0..256): each sub-block of 32 fitted as x ~ scale q - offset with
 * q in 0..qmax, the 6-bit sub-block scales and mins quantized against f16 d and dmin and packed as
 * Q4_K packs them, and the final quants q[256] (element order) recomputed against the scales as
 * the decoder sees them. */
static void k_affine_block(const float *x, int qmax, mp_f16 *d_out, mp_f16 *dmin_out,
                           uint8_t packed[MP_K_SCALE_SIZE], uint8_t q[MP_QK_K])
{
    float scale[8], offset[8], max_scale = 0.0f, max_offset = 0.0f;
    for (int j = 0; j < 8; j++) {
        fit_scale_offset(x + 32 * j, 32, qmax, &scale[j], &offset[j]);
        max_scale = fmaxf(max_scale, scale[j]);
        max_offset = fmaxf(max_offset, offset[j]);
    }
    /* 6-bit sub-block scales and mins relative to the f16 super-block scales */
    const mp_f16 d_h = mp_f32_to_f16(max_scale / 63.0f);
    const mp_f16 dmin_h = mp_f32_to_f16(max_offset / 63.0f);
    const float d = mp_f16_to_f32(d_h), dmin = mp_f16_to_f32(dmin_h);
    uint8_t sc[8], m[8];
    for (int j = 0; j < 8; j++) {
        sc[j] = (uint8_t)(d > 0 ? clampi((int)lrintf(scale[j] / d), 0, 63) : 0);
        m[j] = (uint8_t)(dmin > 0 ? clampi((int)lrintf(offset[j] / dmin), 0, 63) : 0);
    }
    *d_out = d_h;
    *dmin_out = dmin_h;
    for (int j = 0; j < 4; j++) {
        packed[j] = (uint8_t)((sc[j] & 63) | ((sc[j + 4] >> 4) << 6));
        packed[j + 4] = (uint8_t)((m[j] & 63) | ((m[j + 4] >> 4) << 6));
        packed[j + 8] = (uint8_t)((sc[j + 4] & 0x0F) | ((m[j + 4] & 0x0F) << 4));
    }
    for (int j = 0; j < 8; j++) {
        const float dl = d * (float)sc[j], ml = dmin * (float)m[j];
        for (int l = 0; l < 32; l++)
            q[32 * j + l] = (uint8_t)(dl > 0 ? clampi((int)lrintf((x[32 * j + l] + ml) / dl), 0, qmax) : 0);
    }
}

void mp_quantize_row_q4_K_ref(const float *src, void *dst, int64_t n)
{
    mp_block_q4_K *b = dst; /* (n / 256,) */
    for (int64_t ib = 0; ib < n / MP_QK_K; ib++) {
        uint8_t q[MP_QK_K];
        k_affine_block(src + ib * MP_QK_K, 15, &b[ib].d, &b[ib].dmin, b[ib].scales, q);
        for (int c = 0; c < 4; c++)
            for (int l = 0; l < 32; l++)
                b[ib].qs[32 * c + l] = (uint8_t)(q[64 * c + l] | (q[64 * c + 32 + l] << 4));
    }
}

void mp_quantize_row_q5_K_ref(const float *src, void *dst, int64_t n)
{
    mp_block_q5_K *b = dst; /* (n / 256,) */
    for (int64_t ib = 0; ib < n / MP_QK_K; ib++) {
        uint8_t q[MP_QK_K];
        k_affine_block(src + ib * MP_QK_K, 31, &b[ib].d, &b[ib].dmin, b[ib].scales, q);
        /* the low nibbles as Q4_K's; the fifth bit of element 32j + l is bit j of qh[l] */
        memset(b[ib].qh, 0, sizeof(b[ib].qh));
        for (int c = 0; c < 4; c++)
            for (int l = 0; l < 32; l++)
                b[ib].qs[32 * c + l] = (uint8_t)((q[64 * c + l] & 0x0F) | ((q[64 * c + 32 + l] & 0x0F) << 4));
        for (int j = 0; j < 8; j++)
            for (int l = 0; l < 32; l++)
                b[ib].qh[l] |= (uint8_t)((q[32 * j + l] >> 4) << j);
    }
}

void mp_quantize_row_q6_K_ref(const float *src, void *dst, int64_t n)
{
    mp_block_q6_K *b = dst; /* (n / 256,) */
    for (int64_t ib = 0; ib < n / MP_QK_K; ib++) {
        const float *x = src + ib * MP_QK_K;
        float scale[16], amax_scale = 0.0f;
        for (int g = 0; g < 16; g++) {
            fit_scale_symmetric(x + 16 * g, 16, -32, 31, &scale[g]);
            amax_scale = fmaxf(amax_scale, fabsf(scale[g]));
        }
        const mp_f16 d_h = mp_f32_to_f16(amax_scale / 127.0f);
        const float d = mp_f16_to_f32(d_h);
        b[ib].d = d_h;
        for (int g = 0; g < 16; g++)
            b[ib].scales[g] = (int8_t)(d > 0 ? clampi((int)lrintf(scale[g] / d), -127, 127) : 0);
        uint8_t u[MP_QK_K]; /* q + 32, in 0..63 */
        for (int g = 0; g < 16; g++) {
            const float dl = d * (float)b[ib].scales[g];
            for (int l = 0; l < 16; l++)
                u[16 * g + l] = (uint8_t)(dl != 0.0f ? clampi((int)lrintf(x[16 * g + l] / dl), -32, 31) + 32 : 32);
        }
        memset(b[ib].ql, 0, sizeof(b[ib].ql));
        memset(b[ib].qh, 0, sizeof(b[ib].qh));
        /* element 128h + 32s + l: low nibble in ql[64h + 32(s & 1) + l] (high nibble for
         * s >= 2), top two bits in qh[32h + l] at bit 2s (see the scalar dequantizer) */
        for (int h = 0; h < 2; h++)
            for (int s = 0; s < 4; s++)
                for (int l = 0; l < 32; l++) {
                    const uint8_t v = u[128 * h + 32 * s + l];
                    b[ib].ql[64 * h + 32 * (s & 1) + l] |= (uint8_t)((v & 0x0F) << (s >= 2 ? 4 : 0));
                    b[ib].qh[32 * h + l] |= (uint8_t)((v >> 4) << (2 * s));
                }
    }
}
