/* kernels/cpu/fp.c — half/bfloat conversions and the table of per-type facts.
 *
 * Conversions are bit exact with IEEE 754 round-to-nearest-even, subnormals included.
 * NaN policy (chosen to agree with the F16C instructions the AVX2 kernels use, so that scalar
 * and SIMD paths give the same bits): f16 NaNs are made quiet in both directions and keep the
 * top payload bits; bf16 follows the gguf package (f32 -> bf16 quiets NaN by setting bit 6 of
 * the bf16, bf16 -> f32 is a plain 16-bit shift).
 *
 * Invariant: the block structs of kernels/quant.h have exactly GGUF's sizes (asserted below),
 * so a row of n elements is n / block_elems * block_bytes bytes with no padding anywhere.
 */
#include <assert.h>
#include <ctype.h>
#include <pthread.h>
#include <string.h>

#include "kernels/quant.h"

static_assert(sizeof(mp_block_q4_0) == 2 + MP_QK4_0 / 2, "Q4_0 block is 18 bytes in GGUF");
static_assert(sizeof(mp_block_q8_0) == 2 + MP_QK8_0, "Q8_0 block is 34 bytes in GGUF");
static_assert(sizeof(mp_block_q4_1) == 20, "Q4_1 block is 20 bytes in GGUF");
static_assert(sizeof(mp_block_q5_0) == 22, "Q5_0 block is 22 bytes in GGUF");
static_assert(sizeof(mp_block_q5_1) == 24, "Q5_1 block is 24 bytes in GGUF");
static_assert(sizeof(mp_block_iq4_nl) == 18, "IQ4_NL block is 18 bytes in GGUF");
static_assert(sizeof(mp_block_mxfp4) == 17, "MXFP4 block is 17 bytes in GGUF");
static_assert(sizeof(mp_block_iq4_xs) == 136, "IQ4_XS block is 136 bytes in GGUF");
static_assert(sizeof(mp_block_q2_K) == 84, "Q2_K block is 84 bytes in GGUF");
static_assert(sizeof(mp_block_q3_K) == 110, "Q3_K block is 110 bytes in GGUF");
static_assert(sizeof(mp_block_q4_K) == 144, "Q4_K block is 144 bytes in GGUF");
static_assert(sizeof(mp_block_q5_K) == 176, "Q5_K block is 176 bytes in GGUF");
static_assert(sizeof(mp_block_q6_K) == 210, "Q6_K block is 210 bytes in GGUF");
static_assert(sizeof(mp_block_q8_K) == 292, "Q8_K block is 292 bytes (ggml's layout)");
static_assert(sizeof(float) == 4, "float is IEEE binary32");

static inline uint32_t f32_bits(float f)
{
    uint32_t u;
    memcpy(&u, &f, sizeof(u));
    return u;
}

static inline float bits_f32(uint32_t u)
{
    float f;
    memcpy(&f, &u, sizeof(f));
    return f;
}

float mp_f16_to_f32(mp_f16 h)
{
    const uint32_t sign = (uint32_t)(h & 0x8000) << 16;
    const uint32_t exp = (h >> 10) & 0x1F;
    const uint32_t mant = h & 0x3FF;
    if (exp == 0) {
        /* zero or subnormal: mant * 2^-24 is exact in binary32 */
        const float mag = (float)mant * 0x1p-24f;
        return bits_f32(sign | f32_bits(mag));
    }
    if (exp == 31)
        return bits_f32(sign | 0x7F800000u | (mant << 13) | (mant ? 0x00400000u : 0));
    /* rebias the exponent from 15 to 127 */
    return bits_f32(sign | ((exp + 112) << 23) | (mant << 13));
}

mp_f16 mp_f32_to_f16(float f)
{
    const uint32_t u = f32_bits(f);
    const uint16_t sign = (uint16_t)((u >> 16) & 0x8000);
    uint32_t a = u & 0x7FFFFFFFu;
    if (a > 0x7F800000u) /* NaN: quiet, keep the top payload bits */
        return (uint16_t)(sign | 0x7E00 | ((a >> 13) & 0x3FF));
    if (a >= 0x477FF000u) /* >= 65520 (halfway between 65504 and 2^16) rounds to Inf; Inf too */
        return (uint16_t)(sign | 0x7C00);
    if (a >= 0x38800000u) { /* normal half: >= 2^-14 */
        a += 0x0FFFu + ((a >> 13) & 1); /* round to nearest, ties to even; may carry into exp */
        a -= 0x38000000u;               /* rebias exponent 127 -> 15 */
        return (uint16_t)(sign | (a >> 13));
    }
    const uint32_t exp = a >> 23;
    if (exp < 102) /* below 2^-25: rounds to zero (2^-25 itself ties to even zero, below) */
        return sign;
    /* subnormal half: value = mant * 2^(exp-150) = k * 2^-24, k = mant >> (126 - exp) */
    const uint32_t mant = (a & 0x7FFFFFu) | 0x800000u;
    const uint32_t shift = 126 - exp; /* 14..24 */
    uint32_t k = mant >> shift;
    const uint32_t rem = mant & ((1u << shift) - 1);
    const uint32_t half = 1u << (shift - 1);
    if (rem > half || (rem == half && (k & 1)))
        k++; /* k may reach 0x400: that is exactly the smallest normal's encoding */
    return (uint16_t)(sign | k);
}

float mp_bf16_to_f32(mp_bf16 h)
{
    return bits_f32((uint32_t)h << 16);
}

mp_bf16 mp_f32_to_bf16(float f)
{
    const uint32_t u = f32_bits(f);
    if ((u & 0x7FFFFFFFu) > 0x7F800000u)
        return (uint16_t)((u >> 16) | 0x0040); /* quiet NaN */
    /* round to nearest even; in 64 bits so that the carry out of 0xFFFF.... cannot wrap */
    const uint64_t r = ((uint64_t)u + 0x7FFFu + ((u >> 16) & 1)) >> 16;
    return (uint16_t)r;
}

/* ---- the type table ---- */

typedef struct type_info {
    int type;
    const char *name;
    int64_t block_elems;
    size_t block_bytes;
    int is_weight; /* 0 for Q8_K: only ever an activation format */
} type_info;

static const type_info k_types[] = {
    {MP_TYPE_F32, "F32", 1, sizeof(float), 1},
    {MP_TYPE_F16, "F16", 1, sizeof(mp_f16), 1},
    {MP_TYPE_BF16, "BF16", 1, sizeof(mp_bf16), 1},
    {MP_TYPE_Q4_0, "Q4_0", MP_QK4_0, sizeof(mp_block_q4_0), 1},
    {MP_TYPE_Q4_1, "Q4_1", MP_QK4_0, sizeof(mp_block_q4_1), 1},
    {MP_TYPE_Q5_0, "Q5_0", MP_QK4_0, sizeof(mp_block_q5_0), 1},
    {MP_TYPE_Q5_1, "Q5_1", MP_QK4_0, sizeof(mp_block_q5_1), 1},
    {MP_TYPE_Q8_0, "Q8_0", MP_QK8_0, sizeof(mp_block_q8_0), 1},
    {MP_TYPE_IQ4_NL, "IQ4_NL", MP_QK4_0, sizeof(mp_block_iq4_nl), 1},
    {MP_TYPE_MXFP4, "MXFP4", MP_QK4_0, sizeof(mp_block_mxfp4), 1},
    {MP_TYPE_Q2_K, "Q2_K", MP_QK_K, sizeof(mp_block_q2_K), 1},
    {MP_TYPE_Q3_K, "Q3_K", MP_QK_K, sizeof(mp_block_q3_K), 1},
    {MP_TYPE_Q4_K, "Q4_K", MP_QK_K, sizeof(mp_block_q4_K), 1},
    {MP_TYPE_Q5_K, "Q5_K", MP_QK_K, sizeof(mp_block_q5_K), 1},
    {MP_TYPE_Q6_K, "Q6_K", MP_QK_K, sizeof(mp_block_q6_K), 1},
    {MP_TYPE_IQ4_XS, "IQ4_XS", MP_QK_K, sizeof(mp_block_iq4_xs), 1},
    {MP_TYPE_Q8_K, "Q8_K", MP_QK_K, sizeof(mp_block_q8_K), 0},
};

static const type_info *find_type(int type)
{
    for (size_t i = 0; i < sizeof(k_types) / sizeof(k_types[0]); i++)
        if (k_types[i].type == type)
            return &k_types[i];
    return NULL;
}

int mp_type_supported(int type)
{
    const type_info *t = find_type(type);
    return t && t->is_weight;
}

int mp_weight_type_at(int i)
{
    for (size_t k = 0; k < sizeof(k_types) / sizeof(k_types[0]); k++)
        if (k_types[k].is_weight && i-- == 0)
            return k_types[k].type;
    return -1;
}

int64_t mp_type_block_elems(int type)
{
    const type_info *t = find_type(type);
    return t ? t->block_elems : 0;
}

size_t mp_type_block_bytes(int type)
{
    const type_info *t = find_type(type);
    return t ? t->block_bytes : 0;
}

const char *mp_type_name(int type)
{
    const type_info *t = find_type(type);
    return t ? t->name : NULL;
}

static char g_type_names[160];

static void build_type_names(void)
{
    for (size_t i = 0; i < sizeof(k_types) / sizeof(k_types[0]); i++)
        if (k_types[i].is_weight) {
            if (g_type_names[0])
                strcat(g_type_names, ", ");
            strcat(g_type_names, k_types[i].name);
        }
}

const char *mp_type_names(void)
{
    static pthread_once_t once = PTHREAD_ONCE_INIT;
    pthread_once(&once, build_type_names);
    return g_type_names;
}

int mp_type_from_name(const char *name)
{
    if (!name)
        return -1;
    for (size_t i = 0; i < sizeof(k_types) / sizeof(k_types[0]); i++) {
        const char *a = k_types[i].name, *b = name;
        while (*a && *b && toupper((unsigned char)*a) == toupper((unsigned char)*b)) {
            a++;
            b++;
        }
        if (!*a && !*b)
            return k_types[i].type;
    }
    return -1;
}

size_t mp_type_row_bytes(int type, int64_t n)
{
    const type_info *t = find_type(type);
    if (!t || n < 0 || n % t->block_elems != 0)
        return 0;
    const uint64_t blocks = (uint64_t)(n / t->block_elems);
    /* guard the multiplication: a hostile shape must not wrap into a small size */
    if (blocks > SIZE_MAX / t->block_bytes)
        return 0;
    return (size_t)blocks * t->block_bytes;
}
