/* kernels/quant.h — quantized block layouts and the per-type kernel table.
 *
 * The block structs are GGUF's on-disk layouts, byte for byte (ggml's ggml-common.h defines the
 * same; sizes are checked by static asserts in kernels/cpu/fp.c). CPU and CUDA code share them.
 *
 * Invariants:
 *  - a row of `n` elements of type T occupies n / mp_type_block_elems(T) * mp_type_block_bytes(T)
 *    bytes, and n is always a multiple of the block size (loaders reject other shapes);
 *  - mp_type_ops_get() returns the fastest variant this CPU supports (AVX-512, AVX2, scalar),
 *    chosen once by cpuid;
 *    mp_type_ops_scalar() returns the scalar reference that every variant is tested against.
 */
#ifndef MP_KERNELS_QUANT_H
#define MP_KERNELS_QUANT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

/* GGML/GGUF type ids (the values are the file format's). Only these are supported. */
typedef enum mp_type {
    MP_TYPE_F32 = 0,
    MP_TYPE_F16 = 1,
    MP_TYPE_Q4_0 = 2,
    MP_TYPE_Q4_1 = 3,
    MP_TYPE_Q5_0 = 6,
    MP_TYPE_Q5_1 = 7,
    MP_TYPE_Q8_0 = 8,
    MP_TYPE_Q2_K = 10,
    MP_TYPE_Q3_K = 11,
    MP_TYPE_Q4_K = 12,
    MP_TYPE_Q5_K = 13,
    MP_TYPE_Q6_K = 14,
    MP_TYPE_Q8_K = 15, /* activations only: the partner of the K-quants in dot products */
    MP_TYPE_IQ4_NL = 20,
    MP_TYPE_IQ4_XS = 23,
    MP_TYPE_BF16 = 30,
    MP_TYPE_MXFP4 = 39,
} mp_type;

/* Every block of 32 below (Q4_0 ... MXFP4) dots a Q8_0 activation row. */
#define MP_QK4_0 32
#define MP_QK8_0 32
#define MP_QK_K 256
#define MP_K_SCALE_SIZE 12

typedef uint16_t mp_f16;  /* IEEE half, bit pattern */
typedef uint16_t mp_bf16; /* bfloat16, bit pattern */

typedef struct {
    mp_f16 d;                  /* scale */
    uint8_t qs[MP_QK4_0 / 2];  /* 4-bit quants: low nibbles are elements 0..15, high 16..31 */
} mp_block_q4_0;               /* 18 bytes / 32 elements */

typedef struct {
    mp_f16 d;                  /* scale */
    int8_t qs[MP_QK8_0];       /* quants */
} mp_block_q8_0;               /* 34 bytes / 32 elements */

/* Q4_1: x = d q + m, q in 0..15, nibbles as Q4_0's. */
typedef struct {
    mp_f16 d;                  /* scale */
    mp_f16 m;                  /* offset (the block's minimum) */
    uint8_t qs[MP_QK4_0 / 2];  /* 4-bit quants: low nibbles are elements 0..15, high 16..31 */
} mp_block_q4_1;               /* 20 bytes / 32 elements */

/* Q5_0: x = d (q - 16), q in 0..31: its low 4 bits as Q4_0's nibbles, its fifth bit bit l of the
 * little-endian 32-bit word qh for element l. */
typedef struct {
    mp_f16 d;                  /* scale */
    uint8_t qh[4];             /* the fifth bits, element l at bit l */
    uint8_t qs[MP_QK4_0 / 2];  /* the low 4 bits, as Q4_0's */
} mp_block_q5_0;               /* 22 bytes / 32 elements */

/* Q5_1: x = d q + m, q in 0..31 packed as Q5_0's. */
typedef struct {
    mp_f16 d;                  /* scale */
    mp_f16 m;                  /* offset (the block's minimum) */
    uint8_t qh[4];             /* the fifth bits, element l at bit l */
    uint8_t qs[MP_QK4_0 / 2];  /* the low 4 bits, as Q4_0's */
} mp_block_q5_1;               /* 24 bytes / 32 elements */

/* IQ4_NL: x = d v[q], q a nibble as Q4_0's and v the format's 16 non-uniform levels
 * (MP_IQ4_NL_LEVELS). */
typedef struct {
    mp_f16 d;                  /* scale */
    uint8_t qs[MP_QK4_0 / 2];  /* indices into the levels, nibbles as Q4_0's */
} mp_block_iq4_nl;             /* 18 bytes / 32 elements */

/* MXFP4 (OCP microscaling FP4): x = 2^(e - 128) v[q], e the shared E8M0 exponent and v the FP4
 * E2M1 values doubled (MP_MXFP4_LEVELS: 0, ±0.5, ±1, ±1.5, ±2, ±3, ±4, ±6 times two, so they are
 * integers), q a nibble as Q4_0's. mp_e8m0_half(e) gives 2^(e - 128). */
typedef struct {
    uint8_t e;                 /* shared exponent, E8M0 */
    uint8_t qs[MP_QK4_0 / 2];  /* FP4 E2M1 codes, nibbles as Q4_0's */
} mp_block_mxfp4;              /* 17 bytes / 32 elements */

/* IQ4_XS: IQ4_NL's levels in super-blocks of 256 with a 6-bit scale per sub-block of 32: element
 * 32j + l (l < 32) is x = d (s_j - 32) v[q], q the low nibble of qs[16j + l % 16] (high for l >= 16),
 * s_j the nibble j % 2 of scales_l[j / 2] with bits 2j, 2j + 1 of scales_h on top. */
typedef struct {
    mp_f16 d;                       /* super-block scale */
    uint16_t scales_h;              /* the high 2 bits of the 8 sub-block scales */
    uint8_t scales_l[MP_QK_K / 64]; /* the low 4 bits, two per byte */
    uint8_t qs[MP_QK_K / 2];        /* indices into the levels, 16 bytes per sub-block */
} mp_block_iq4_xs;                  /* 136 bytes / 256 elements */

/* IQ4_XS's 6-bit sub-block codes s_j (0..63): read one, or pack all eight (the quantizer and
 * mkmodel's direct blocks write them, the kernels read them). */
static inline int mp_iq4_xs_scale(const mp_block_iq4_xs *b, int j)
{
    return ((b->scales_l[j / 2] >> (4 * (j % 2))) & 0x0F) | ((b->scales_h >> (2 * j)) & 3) << 4;
}

static inline void mp_iq4_xs_set_scales(mp_block_iq4_xs *b, const int s[8])
{
    uint16_t h = 0;
    for (int j = 0; j < 4; j++)
        b->scales_l[j] = (uint8_t)((s[2 * j] & 0x0F) | (s[2 * j + 1] & 0x0F) << 4);
    for (int j = 0; j < 8; j++)
        h |= (uint16_t)(((s[j] >> 4) & 3) << (2 * j));
    b->scales_h = h;
}

/* The levels of the two look-up formats, as initializers (C and CUDA instantiate them where they
 * need them): GGUF's IQ4_NL values and the E2M1 code points doubled, by code 0..15. */
#define MP_IQ4_NL_LEVELS {-127, -104, -83, -65, -49, -35, -22, -10, 1, 13, 25, 38, 53, 69, 89, 113}
#define MP_MXFP4_LEVELS {0, 1, 2, 3, 4, 6, 8, 12, 0, -1, -2, -3, -4, -6, -8, -12}

/* Q2_K: 16 groups of 16; element 128h + 32j + l (half h, j < 4, l < 32) is q = (qs[32h + l] >> 2j)
 * & 3 of group 8h + 2j + (l >= 16), x = (d sc_g) q - (dmin m_g), sc_g and m_g the low and high
 * nibbles of scales[g]. */
typedef struct {
    uint8_t scales[MP_QK_K / 16];  /* per group: scale (low nibble) and min (high nibble) */
    uint8_t qs[MP_QK_K / 4];       /* 2-bit quants */
    mp_f16 d;                      /* super-block scale for the scales */
    mp_f16 dmin;                   /* super-block scale for the mins */
} mp_block_q2_K;                   /* 84 bytes / 256 elements */

/* Q3_K: 16 groups of 16; element 128h + 32j + l is q = ((qs[32h + l] >> 2j) & 3) - 4 when bit
 * 4h + j of hmask[l] is clear (- 0 when set), in -4..3, of group g = 8h + 2j + (l >= 16), with
 * x = (d (s_g - 32)) q; s_g, 6 bits: the low nibble of scales[g % 8] (high nibble for g >= 8) and
 * bits 2 (g / 4) .. +1 of scales[8 + g % 4] on top. */
typedef struct {
    uint8_t hmask[MP_QK_K / 8];        /* the third bit of each quant (set: no -4) */
    uint8_t qs[MP_QK_K / 4];           /* low 2 bits */
    uint8_t scales[MP_K_SCALE_SIZE];   /* 16 scales of 6 bits, packed */
    mp_f16 d;                          /* super-block scale */
} mp_block_q3_K;                       /* 110 bytes / 256 elements */

typedef struct {
    mp_f16 d;                          /* super-block scale for the quantized scales */
    mp_f16 dmin;                       /* super-block scale for the quantized mins */
    uint8_t scales[MP_K_SCALE_SIZE];   /* 8 scales + 8 mins, 6 bits each, packed */
    uint8_t qs[MP_QK_K / 2];           /* 4-bit quants */
} mp_block_q4_K;                       /* 144 bytes / 256 elements */

/* Q5_K: Q4_K's scales and mins, and a fifth bit per element: element 32j + l (sub-block j, l < 32)
 * is q = (its nibble in qs, as Q4_K's) | ((qh[l] >> j) & 1) << 4, in 0..31; x = d sc_j q - dmin m_j. */
typedef struct {
    mp_f16 d;                          /* super-block scale for the quantized scales */
    mp_f16 dmin;                       /* super-block scale for the quantized mins */
    uint8_t scales[MP_K_SCALE_SIZE];   /* 8 scales + 8 mins, 6 bits each, packed as Q4_K's */
    uint8_t qh[MP_QK_K / 8];           /* the fifth bits: bit j of byte l for element 32j + l */
    uint8_t qs[MP_QK_K / 2];           /* the low 4 bits, packed as Q4_K's qs */
} mp_block_q5_K;                       /* 176 bytes / 256 elements */

typedef struct {
    uint8_t ql[MP_QK_K / 2];      /* quants, lower 4 bits */
    uint8_t qh[MP_QK_K / 4];      /* quants, upper 2 bits */
    int8_t scales[MP_QK_K / 16];  /* 16 scales, 8 bits */
    mp_f16 d;                     /* super-block scale */
} mp_block_q6_K;                  /* 210 bytes / 256 elements */

typedef struct {
    float d;                      /* scale */
    int8_t qs[MP_QK_K];           /* quants */
    int16_t bsums[MP_QK_K / 16];  /* sum of quants in groups of 16 */
} mp_block_q8_K;                  /* 292 bytes / 256 elements */

/* Half/bfloat conversions (scalar; bit-exact with IEEE round-to-nearest-even). */
float mp_f16_to_f32(mp_f16 h);
mp_f16 mp_f32_to_f16(float f);
float mp_bf16_to_f32(mp_bf16 h);
mp_bf16 mp_f32_to_bf16(float f);
/* MXFP4's block scale from its exponent byte e: 2^(e - 128) (half of E8M0's 2^(e - 127), since the
 * levels are doubled), exact for every e (e < 2 gives a subnormal float). Inline: every dot of a
 * block takes one. */
static inline float mp_e8m0_half(uint8_t e)
{
    /* e >= 2: the normal float of exponent field e - 1; e 0 and 1: the subnormals 2^-128, 2^-127 */
    const uint32_t bits = e < 2 ? 0x00200000u << e : (uint32_t)(e - 1) << 23;
    float f;
    memcpy(&f, &bits, sizeof f);
    return f;
}

/* Per-type facts. Unknown types give 0 / NULL. */
int mp_type_supported(int type);          /* 1 for the weight types above (not Q8_K) */
int mp_weight_type_at(int i);             /* the i-th of them (i from 0), -1 past the last: a loop over all */
int64_t mp_type_block_elems(int type);
size_t mp_type_block_bytes(int type);
const char *mp_type_name(int type);       /* "Q4_K", ... or NULL */
/* The longest of those names, and the room of an expert's quant name of up to three of them with
 * its NUL ("GATE/UP/DOWN": runtime/model.h, mp_expert_quant_name; cost files' "quant") */
#define MP_TYPE_NAME_MAX 7
#define MP_EXPERT_QUANT_MAX (3 * MP_TYPE_NAME_MAX + 3)
/* The weight types' names, comma-separated in the table's order ("F32, F16, ..."): the one list
 * error messages and --help texts print. */
const char *mp_type_names(void);
int mp_type_from_name(const char *name);  /* case-insensitive; -1 if unknown */
/* Bytes of a row of n elements, or 0 if n is not a multiple of the block size. */
size_t mp_type_row_bytes(int type, int64_t n);

/* The kernels of one weight type. All pointers are plain rows; no alignment is assumed beyond
 * the block struct's natural alignment of 1 (GGUF data is only 32-byte aligned per tensor). */
typedef struct mp_type_ops {
    int type;
    /* The format the activation vector must be in for vec_dot: F32 for F32/F16/BF16 weights,
     * Q8_0 for the blocks of 32 (Q4_0, Q4_1, Q5_0, Q5_1, Q8_0, IQ4_NL, MXFP4), Q8_K for the
     * K-quants Q2_K..Q6_K and IQ4_XS. */
    int vec_dot_type;
    /* dst[0..n) = dequantized src row. */
    void (*dequantize_row)(const void *src, float *dst, int64_t n);
    /* Reference quantizer (round-to-nearest), used by mkmodel and for activations. n must be a
     * multiple of the block size. F16/BF16/Q4_0/Q4_1/Q5_0/Q5_1/Q8_0/MXFP4 give the gguf package's
     * bytes exactly; IQ4_NL and IQ4_XS use our own scale search (quantize.c);
     * the K-quants use our own least-squares scale search (kernels/cpu/quantize.c): valid blocks
     * with the expected error, not llama.cpp's bit pattern. */
    void (*quantize_row)(const float *src, void *dst, int64_t n);
    /* Dot product of one weight row (this type) with one activation row (vec_dot_type), n elems. */
    float (*vec_dot)(int64_t n, const void *w_row, const void *x_row);
    /* Optional (NULL where a variant has none): one weight row against n_x <= MP_GEMM_TILE
     * activation rows x_stride bytes apart: out[i] = dot(w_row, x_i). Unpacks each weight block
     * once for all n_x rows; mp_gemm_rows uses it, per-row vec_dot otherwise. Must agree with
     * vec_dot within float rounding (it accumulates in the same per-block integer way), bit for bit
     * unless multi_other_order. */
    void (*vec_dot_multi)(int64_t n, const void *w_row, const void *x, size_t x_stride, int n_x,
                          float *out);
    /* vec_dot_multi adds the same exact integer sub-block sums in another lane order than vec_dot
     * and gemv: equal within float rounding, not bit for bit (the AVX-512 Q4_K and Q6_K, whose one-row
     * kernels unpack a block in the order of its bytes, their multi-row dots in element order:
     * kernels/cpu/quant_avx512.c). */
    bool multi_other_order;
    /* Optional (NULL where a variant has none: the AVX-512 level's Q4_0 and Q8_0, the AMX level's
     * Q4_0, Q8_0, Q4_K, Q5_K and Q6_K have it): the whole of mp_gemm_rows for n_rows weight rows
     * from w (row_bytes apart, at most 2^31 / 16) against n_x activation rows:
     * y[i * y_stride + r] = dot(W[r], x_i). mp_gemm_rows uses it from gemm_min_rows activation rows
     * on (below, the multi-row dots). Agrees with vec_dot within float rounding (the same exact
     * integer sub-block sums; the AMX ones add them in another order), the AVX-512 ones bit for bit. */
    void (*gemm)(int64_t n, const void *w, size_t row_bytes, int64_t n_rows, const void *x, size_t x_stride,
                 int64_t n_x, float *y, int64_t y_stride);
    int gemm_min_rows;
    /* Optional (NULL where a variant has none: the AVX2 and AVX-512 levels' blocks of 32 and the
     * AVX-512 Q4_K and Q6_K have it): the
     * decode GEMV, y[r] = dot(W[r], x) for n_rows weight rows from w, row_bytes apart, against one
     * activation row; mp_gemv_rows uses it (and mp_gemm_rows for a tile of one activation row), per-row
     * vec_dot otherwise. Equal to vec_dot bit for bit, whatever rows a call is given. */
    void (*gemv)(int64_t n, const void *w, size_t row_bytes, int64_t n_rows, const void *x, float *y);
} mp_type_ops;

/* Activation rows per tile in mp_gemm_rows (the most vec_dot_multi is ever asked for). */
#define MP_GEMM_TILE 4
/* Weight bytes per block of rows in mp_gemm_rows: every tile runs over a block before the next, so
 * that the block read from memory by the first is in L2 for the others (kernels/cpu/dispatch.c). */
#define MP_GEMM_BLOCK_BYTES ((size_t)256 << 10)

/* Activation quantization (used before every vec_dot of a row of quantized weights).
 * Q8_K: d = max|x| / 127, quants in [-127, 127], bsums[g] = sum of quants 16g..16g+15. */
void mp_quantize_row_q8_K(const float *src, void *dst, int64_t n);
void mp_dequantize_row_q8_K(const void *src, float *dst, int64_t n);
/* Convert an F32 row into vec_dot_type (F32: copy; Q8_0; Q8_K), n a multiple of its block.
 * Returns 0, or -1 if vec_dot_type is not an activation format (nothing written). */
int mp_quantize_activation(int vec_dot_type, const float *src, void *dst, int64_t n);

const mp_type_ops *mp_type_ops_get(int type);    /* dispatched (fastest supported) */
const mp_type_ops *mp_type_ops_scalar(int type); /* the reference */

/* Which SIMD level the dispatcher chose: "scalar", "avx2" (AVX2+FMA+F16C), "avx512" (AVX-512
 * F+BW+VL+VNNI), "amx" (avx512 and AMX-TILE + AMX-INT8, which Linux granted): the best the CPU
 * supports, capped by mp_kernels_set_isa_cap (a cap the CPU lacks
 * leaves its best level, and mp_kernels_isa_warning says so). */
const char *mp_kernels_isa(void);
/* The level whose kernels serve calls of one activation row (decode) at `level` (a name
 * mp_kernels_isa gives): amx's are avx512's; every other level's its own. Two cost files' or
 * processes' decode times compare where these agree. */
const char *mp_kernels_isa_one_row(const char *level);
/* Cap the level at "scalar", "avx2", "avx512" or "amx" (NULL: no cap), from the next lookup on; programs
 * set it once at start from MP_ISA (base/knobs.h). Returns 0, or -1 for another name (then no
 * cap). */
int mp_kernels_set_isa_cap(const char *level);
/* NULL when no cap is set or the CPU has the capped level and its AMX tile GEMMs (if it has AMX)
 * passed their check at start; else one sentence saying which level runs instead and why ("MP_ISA=
 * avx512: this CPU's best is avx2: using avx2", or the type whose tile GEMM disagreed), for the
 * command line to print as a warning. Valid until the next call. */
const char *mp_kernels_isa_warning(void);
/* How far ahead of its loads every SIMD dot product prefetches its weight row, in bytes (0: no
 * prefetch instructions). The hardware prefetchers alone left the K-quant dots at ~5.5 GB/s from
 * DRAM against ~15 GB/s in cache on the GPU host's Xeon, where 2 KB ahead was the best of
 * 0.5/1/2/4 KB for one thread; on an AMD Zen 5 core the GEMV read 10-23 % faster without any
 * (bench/NOTES-kernels.md). The best distance depends on the core and on how loaded the memory
 * is (a loaded memory answers later, and a core keeps up only with more lines in flight), so
 * programs set it at start from MP_PREFETCH_BYTES (base/knobs.h). Values are rounded down to
 * whole 64-byte lines and capped at MP_PREFETCH_BYTES_MAX. Not for calls racing with kernels. */
#define MP_PREFETCH_BYTES_DEFAULT 2048
#define MP_PREFETCH_BYTES_MAX 65536
void mp_kernels_set_prefetch_bytes(int64_t bytes);
int64_t mp_kernels_prefetch_bytes(void);
/* The activation rows from which a type's AMX tile GEMM runs in mp_gemm_rows (below them, the avx512
 * level's multi-row dots), at the amx level. Each type's default is its crossover in dispatch.c's
 * table; a host's own may differ by several rows (two Intel hosts by 3-7 for the K-quants), so
 * `moeplan calibrate` times it on the runtime's expert call and programs set it from MP_AMX_ROWS
 * (base/knobs.h). mp_kernels_set_amx_rows: rows >= 1, or 0 for the table's; 0, or -1 (nothing set)
 * where this build has no tile GEMM for type. mp_kernels_amx_rows: the rows in force, or the
 * table's (table_default); -1 where there is no tile GEMM. Not for calls racing with kernels. */
int mp_kernels_set_amx_rows(int type, int rows);
int mp_kernels_amx_rows(int type, bool table_default);
/* Force the scalar reference everywhere (tests, benchmarks). Call before any mp_type_ops_get.
 * Each call also makes the next lookup re-decide the level. */
void mp_kernels_force_scalar(int on);
/* The table of one level ("scalar", "avx2", "avx512", "amx"; per type falling back to the level below
 * where that level has no kernel), whatever was dispatched: for benchmarks and tests comparing
 * levels side by side. NULL if the name is unknown, the CPU lacks the level, or the type has no
 * kernels. */
const mp_type_ops *mp_type_ops_isa(int type, const char *isa);

/* Matrix-vector over a row range, the decode hot loop (multithreaded by the caller over rows):
 * y[r - row_begin] = dot(W[r], x) for r in [row_begin, row_end). W rows are row_bytes apart.
 * x is already in ops->vec_dot_type. */
void mp_gemv_rows(const mp_type_ops *ops, const void *w, size_t row_bytes, int64_t n_cols,
                  int64_t row_begin, int64_t row_end, const void *x, float *y);

/* Matrix-matrix over a row range, the prefill loop: for each of n_x activation rows (x_stride
 * bytes apart, in vec_dot_type) and each weight row r in [row_begin, row_end):
 *   y[i * y_stride + (r - row_begin)] = dot(W[r], x_i).
 * Tiled so that each weight row is read once per tile of activation rows. */
void mp_gemm_rows(const mp_type_ops *ops, const void *w, size_t row_bytes, int64_t n_cols,
                  int64_t row_begin, int64_t row_end, const void *x, size_t x_stride, int64_t n_x,
                  float *y, int64_t y_stride);

#endif
