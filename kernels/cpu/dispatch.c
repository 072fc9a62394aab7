/* kernels/cpu/dispatch.c — choose kernel variants once, and the row loops (GEMV, GEMM) above them.
 *
 * The ISA is decided on the first mp_type_ops_get() and cached; every later call is a table
 * lookup. Tables are immutable after start-up and shared by all threads. Levels, best first:
 *   amx     avx512 and AMX-TILE + AMX-INT8 and the tile state granted by Linux; a type's tile GEMM
 *           is used where it agreed with the AVX-512 dot at start (else that type runs avx512's):
 *           quant_amx.c (the prefill GEMMs of Q4_0, Q5_0, IQ4_NL, MXFP4, Q8_0, Q4_K, Q5_K, Q6_K,
 *           IQ4_XS; every other kernel is avx512's)
 *   avx512  AVX-512 F + BW + VL + VNNI (and the AVX2 level's FMA, F16C): quant_avx512.c
 *   avx2    AVX2 + FMA + F16C: quant_avx2.c
 *   scalar  the reference (quant_scalar.c, quantize.c)
 * A level without a kernel for some type falls back, per type, to the next level down.
 * Overrides, for A/B runs and tests: mp_kernels_force_scalar(1) wins over everything; else the
 * cap set by mp_kernels_set_isa_cap (the program sets it once at start from MP_ISA,
 * base/knobs.h) caps the level. A cap above the CPU's best level leaves the best level (no
 * crash, no output; mp_kernels_isa() says what was chosen, mp_kernels_isa_warning why).
 *
 * Invariant: every table's vec_dot_type and quantize_row equal the scalar table's, so activations
 * quantized once serve every variant, and weights quantized by any variant decode identically.
 */
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#if defined(__x86_64__) || defined(__i386__)
#include <cpuid.h>
#endif

#include "kernels/cpu/quant_impl.h"

#define OPS(T, VDT, DQ, Q, VD) \
    {.type = (T), .vec_dot_type = (VDT), .dequantize_row = (DQ), .quantize_row = (Q), .vec_dot = (VD), \
     .vec_dot_multi = NULL}

static const mp_type_ops k_scalar_ops[] = {
    OPS(MP_TYPE_F32, MP_TYPE_F32, mp_dequantize_row_f32_scalar, mp_quantize_row_f32_ref,
        mp_vec_dot_f32_scalar),
    OPS(MP_TYPE_F16, MP_TYPE_F32, mp_dequantize_row_f16_scalar, mp_quantize_row_f16_ref,
        mp_vec_dot_f16_scalar),
    OPS(MP_TYPE_BF16, MP_TYPE_F32, mp_dequantize_row_bf16_scalar, mp_quantize_row_bf16_ref,
        mp_vec_dot_bf16_scalar),
    OPS(MP_TYPE_Q4_0, MP_TYPE_Q8_0, mp_dequantize_row_q4_0_scalar, mp_quantize_row_q4_0_ref,
        mp_vec_dot_q4_0_q8_0_scalar),
    OPS(MP_TYPE_Q8_0, MP_TYPE_Q8_0, mp_dequantize_row_q8_0_scalar, mp_quantize_row_q8_0_ref,
        mp_vec_dot_q8_0_q8_0_scalar),
    OPS(MP_TYPE_Q4_1, MP_TYPE_Q8_0, mp_dequantize_row_q4_1_scalar, mp_quantize_row_q4_1_ref,
        mp_vec_dot_q4_1_q8_0_scalar),
    OPS(MP_TYPE_Q5_0, MP_TYPE_Q8_0, mp_dequantize_row_q5_0_scalar, mp_quantize_row_q5_0_ref,
        mp_vec_dot_q5_0_q8_0_scalar),
    OPS(MP_TYPE_Q5_1, MP_TYPE_Q8_0, mp_dequantize_row_q5_1_scalar, mp_quantize_row_q5_1_ref,
        mp_vec_dot_q5_1_q8_0_scalar),
    OPS(MP_TYPE_IQ4_NL, MP_TYPE_Q8_0, mp_dequantize_row_iq4_nl_scalar, mp_quantize_row_iq4_nl_ref,
        mp_vec_dot_iq4_nl_q8_0_scalar),
    OPS(MP_TYPE_MXFP4, MP_TYPE_Q8_0, mp_dequantize_row_mxfp4_scalar, mp_quantize_row_mxfp4_ref,
        mp_vec_dot_mxfp4_q8_0_scalar),
    OPS(MP_TYPE_Q2_K, MP_TYPE_Q8_K, mp_dequantize_row_q2_K_scalar, mp_quantize_row_q2_K_ref,
        mp_vec_dot_q2_K_q8_K_scalar),
    OPS(MP_TYPE_Q3_K, MP_TYPE_Q8_K, mp_dequantize_row_q3_K_scalar, mp_quantize_row_q3_K_ref,
        mp_vec_dot_q3_K_q8_K_scalar),
    OPS(MP_TYPE_Q4_K, MP_TYPE_Q8_K, mp_dequantize_row_q4_K_scalar, mp_quantize_row_q4_K_ref,
        mp_vec_dot_q4_K_q8_K_scalar),
    OPS(MP_TYPE_Q5_K, MP_TYPE_Q8_K, mp_dequantize_row_q5_K_scalar, mp_quantize_row_q5_K_ref,
        mp_vec_dot_q5_K_q8_K_scalar),
    OPS(MP_TYPE_Q6_K, MP_TYPE_Q8_K, mp_dequantize_row_q6_K_scalar, mp_quantize_row_q6_K_ref,
        mp_vec_dot_q6_K_q8_K_scalar),
    OPS(MP_TYPE_IQ4_XS, MP_TYPE_Q8_K, mp_dequantize_row_iq4_xs_scalar, mp_quantize_row_iq4_xs_ref,
        mp_vec_dot_iq4_xs_q8_K_scalar),
};

const mp_type_ops *mp_type_ops_scalar(int type)
{
    for (size_t i = 0; i < sizeof(k_scalar_ops) / sizeof(k_scalar_ops[0]); i++)
        if (k_scalar_ops[i].type == type)
            return &k_scalar_ops[i];
    return NULL;
}

enum { ISA_UNKNOWN = 0, ISA_SCALAR, ISA_AVX2, ISA_AVX512, ISA_AMX }; /* ordered: higher is wider */


static const char *const k_isa_names[] = {
    [ISA_SCALAR] = "scalar", [ISA_AVX2] = "avx2", [ISA_AVX512] = "avx512", [ISA_AMX] = "amx"};

static int g_isa = ISA_UNKNOWN;     /* written once (benign identical races), read with atomics */
static int g_cpu_isa = ISA_UNKNOWN; /* the best level the CPU has; cpuid traps in a VM: cached */
static int g_force_scalar = 0;
static int g_isa_cap = ISA_UNKNOWN; /* mp_kernels_set_isa_cap; UNKNOWN: no cap */

static const char *g_amx_disagreed; /* the first type whose tile GEMM failed its check at start, or NULL */
#define AMX_TYPE_IDS 64                  /* type ids (quant.h's are below it) */
static unsigned char g_amx_off[AMX_TYPE_IDS]; /* 1: this type's tile GEMM failed it: avx512's table */

/* Every AMX tile GEMM against its table's AVX-512 dot (mp_gemm_self_check), once: a type whose GEMM
 * disagrees keeps avx512's table (g_amx_off; the first such type named in g_amx_disagreed) and the
 * others keep their tiles, so that one kernel's bug costs its own type's prefill only. */
static void amx_check_gemms(void)
{
    for (int i = 0, type; (type = mp_weight_type_at(i)) >= 0; i++) /* every type the amx table has */
        if (type >= AMX_TYPE_IDS || mp_gemm_self_check(mp_type_ops_amx(type)) != 0) {
            if (type < AMX_TYPE_IDS)
                g_amx_off[type] = 1;
            if (!g_amx_disagreed)
                g_amx_disagreed = mp_type_name(type);
        }
}

/* The amx table of type, unless its tile GEMM failed the check */
static const mp_type_ops *amx_ops(int type)
{
    return type >= 0 && type < AMX_TYPE_IDS && !g_amx_off[type] ? mp_type_ops_amx(type) : NULL;
}

/* Each tile GEMM from the fewest activation rows where it beat the avx512 level with the weights
 * streaming from memory, as an expert's are in prefill (bench_kernels --gemm --mb 1024, one thread,
 * 2048 columns; with the weights in cache the avx512 dots hold out longer), on both hosts measured
 * (bench/NOTES-kernels.md, 2026-12-07): the larger of their crossovers, since a tile below its
 * crossover ran at 0.53-0.8x avx512 where one at or above it runs even to 1.9x. A development VM's Xeon with
 * AMX put every K-quant ahead from 5 rows (1.15-1.65x), IQ4_XS from 4, Q8_0 and Q5_0 from 3, Q4_0,
 * IQ4_NL and MXFP4 from 2; the H100 machine's host (Emerald Rapids, 16 cores) put Q4_K ahead from 8
 * (1.15-1.37x; 0.78-1.17x at 6), Q5_K even at 8 (0.97x) and 1.36x at 12, Q6_K even at 12
 * (1.00-1.01x), 1.05-1.27x at 16 and 0.53-0.80x at 6-8, Q8_0 at 0.64-0.97x through 8 rows (its
 * avx512 GEMM from 4 rows is the rival there), Q5_0 1.08x at 4 and 1.82x at 6, IQ4_XS 1.17x at 4,
 * Q4_0 and IQ4_NL 1.24-1.44x at 2. The crossovers are the host's: this table is the safe side of the
 * two measured, and `moeplan calibrate` times a host's own on the runtime's expert call (MP_AMX_ROWS,
 * mp_kernels_set_amx_rows: simulator/calibrate_amx.c). */
static const struct {
    int type;
    int rows;
} k_amx_rows[] = {
#if defined(__x86_64__) || defined(__i386__) /* quant_amx.c's types; other families have no tiles */
    {MP_TYPE_Q4_K, 8}, {MP_TYPE_Q5_K, 8},   {MP_TYPE_Q6_K, 12},  {MP_TYPE_IQ4_XS, 4}, {MP_TYPE_Q8_0, 8},
    {MP_TYPE_Q5_0, 4}, {MP_TYPE_Q4_0, 2},   {MP_TYPE_IQ4_NL, 2}, {MP_TYPE_MXFP4, 2},
#endif
    {-1, 0}};
static int g_amx_rows[AMX_TYPE_IDS]; /* mp_kernels_set_amx_rows; 0: the table's */

/* the table's rows of type, or -1 where it has no tile GEMM */
static int amx_rows_default(int type)
{
    for (size_t i = 0; k_amx_rows[i].type >= 0; i++)
        if (k_amx_rows[i].type == type)
            return type < AMX_TYPE_IDS ? k_amx_rows[i].rows : -1;
    return -1;
}

int mp_kernels_amx_rows(int type, bool table_default)
{
    const int dflt = amx_rows_default(type);
    if (dflt < 0)
        return -1;
    const int set = __atomic_load_n(&g_amx_rows[type], __ATOMIC_RELAXED);
    return table_default || !set ? dflt : set;
}

int mp_kernels_set_amx_rows(int type, int rows)
{
    if (amx_rows_default(type) < 0 || rows < 0)
        return -1;
    __atomic_store_n(&g_amx_rows[type], rows, __ATOMIC_RELAXED);
    /* quant_amx.c's code is AVX-512: entered only where the probe found the amx level. Its table is
     * built in that probe (amx_check_gemms) and reads the rows above, so before the probe there is
     * nothing to update, and the knobs set at start cost no probe */
    if (__atomic_load_n(&g_cpu_isa, __ATOMIC_ACQUIRE) == ISA_AMX)
        mp_amx_set_rows(type, mp_kernels_amx_rows(type, false));
    return 0;
}

/* The best level this CPU (and OS: __builtin_cpu_supports checks that the kernel saves the
 * registers) supports. */
static int probe_cpu_isa(void)
{
#if defined(__x86_64__) || defined(__i386__)
    __builtin_cpu_init();
    /* F16C (leaf 1, ECX bit 29) and AVX512_VNNI (leaf 7, ECX bit 11) are read from cpuid: clang
     * does not accept "f16c" in __builtin_cpu_supports, and the fuzz build uses clang. */
    unsigned eax = 0, ebx = 0, ecx = 0, edx = 0;
    __get_cpuid(1, &eax, &ebx, &ecx, &edx);
    const int has_f16c = (ecx >> 29) & 1;
    eax = ebx = ecx = edx = 0;
    const int has_vnni = __get_cpuid_count(7, 0, &eax, &ebx, &ecx, &edx) && ((ecx >> 11) & 1);
    if (!(__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") && has_f16c))
        return ISA_SCALAR;
    if (__builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
        __builtin_cpu_supports("avx512vl") && has_vnni) {
        /* AMX-TILE and AMX-INT8: leaf 7, EDX bits 24 and 25; the OS must grant the tile state */
        const int has_amx = ((edx >> 24) & 3) == 3;
        if (!has_amx || mp_amx_enable() != 0)
            return ISA_AVX512;
        amx_check_gemms();
        return ISA_AMX;
    }
    return ISA_AVX2;
#else
    return ISA_SCALAR;
#endif
}

static int cpu_isa(void)
{
    int isa = __atomic_load_n(&g_cpu_isa, __ATOMIC_ACQUIRE);
    if (isa == ISA_UNKNOWN) {
        isa = probe_cpu_isa();
        __atomic_store_n(&g_cpu_isa, isa, __ATOMIC_RELEASE);
    }
    return isa;
}

/* ISA_* for "scalar", "avx2" or "avx512"; ISA_UNKNOWN for anything else (NULL included) */
static int isa_from_name(const char *name)
{
    for (int isa = ISA_SCALAR; isa <= ISA_AMX; isa++)
        if (name && strcmp(name, k_isa_names[isa]) == 0)
            return isa;
    return ISA_UNKNOWN;
}

static int detect_isa(void)
{
    if (__atomic_load_n(&g_force_scalar, __ATOMIC_RELAXED))
        return ISA_SCALAR;
    const int best = cpu_isa();
    const int cap = __atomic_load_n(&g_isa_cap, __ATOMIC_RELAXED);
    return cap == ISA_UNKNOWN || cap > best ? best : cap;
}

static int current_isa(void)
{
    int isa = __atomic_load_n(&g_isa, __ATOMIC_ACQUIRE);
    if (isa == ISA_UNKNOWN) {
        isa = detect_isa();
        __atomic_store_n(&g_isa, isa, __ATOMIC_RELEASE);
    }
    return isa;
}

void mp_kernels_force_scalar(int on)
{
    __atomic_store_n(&g_force_scalar, on ? 1 : 0, __ATOMIC_RELAXED);
    __atomic_store_n(&g_isa, ISA_UNKNOWN, __ATOMIC_RELEASE); /* re-decide on next use */
}

const char *mp_kernels_isa(void)
{
    return k_isa_names[current_isa()];
}

const char *mp_kernels_isa_one_row(const char *level)
{
    return level && strcmp(level, k_isa_names[ISA_AMX]) == 0 ? k_isa_names[ISA_AVX512] : level;
}

size_t mp_prefetch_distance = MP_PREFETCH_BYTES_DEFAULT; /* quant_impl.h */

void mp_kernels_set_prefetch_bytes(int64_t bytes)
{
    bytes = bytes < 0 ? 0 : bytes > MP_PREFETCH_BYTES_MAX ? MP_PREFETCH_BYTES_MAX : bytes;
    mp_prefetch_distance = (size_t)bytes & ~(size_t)63;
}

int64_t mp_kernels_prefetch_bytes(void)
{
    return (int64_t)mp_prefetch_distance;
}

int mp_kernels_set_isa_cap(const char *level)
{
    const int cap = isa_from_name(level);
    __atomic_store_n(&g_isa_cap, cap, __ATOMIC_RELAXED);
    __atomic_store_n(&g_isa, ISA_UNKNOWN, __ATOMIC_RELEASE); /* re-decide on next use */
    return level && cap == ISA_UNKNOWN ? -1 : 0;
}

const char *mp_kernels_isa_warning(void)
{
    static _Thread_local char msg[160];
    const int cap = __atomic_load_n(&g_isa_cap, __ATOMIC_RELAXED), best = cpu_isa();
    if (g_amx_disagreed && (cap == ISA_UNKNOWN || cap == ISA_AMX))
        snprintf(msg, sizeof msg, "the AMX tile GEMM of %s disagreed with the AVX-512 dot at start (a kernel bug: "
                 "please report it): %s prefill runs avx512's kernels", g_amx_disagreed, g_amx_disagreed);
    else if (cap == ISA_UNKNOWN || cap <= best)
        return NULL;
    else
        snprintf(msg, sizeof msg, "MP_ISA=%s: this CPU's best is %s: using %s", k_isa_names[cap], k_isa_names[best],
                 mp_kernels_isa());
    return msg;
}

/* the table of `type` at level `isa`, falling back per type to the levels below */
static const mp_type_ops *ops_at(int isa, int type)
{
    const mp_type_ops *ops = NULL;
    if (isa >= ISA_AMX)
        ops = amx_ops(type);
    if (!ops && isa >= ISA_AVX512)
        ops = mp_type_ops_avx512(type);
    if (!ops && isa >= ISA_AVX2)
        ops = mp_type_ops_avx2(type);
    return ops ? ops : mp_type_ops_scalar(type);
}

const mp_type_ops *mp_type_ops_get(int type)
{
    return ops_at(current_isa(), type);
}

const mp_type_ops *mp_type_ops_isa(int type, const char *isa)
{
    const int level = isa_from_name(isa);
    if (level == ISA_UNKNOWN || level > cpu_isa())
        return NULL;
    return ops_at(level, type);
}

void mp_quantize_row_q8_K(const float *src, void *dst, int64_t n)
{
    if (current_isa() >= ISA_AVX2)
        mp_quantize_row_q8_K_avx2(src, dst, n);
    else
        mp_quantize_row_q8_K_ref(src, dst, n);
}

void mp_dequantize_row_q8_K(const void *src, float *dst, int64_t n)
{
    mp_dequantize_row_q8_K_scalar(src, dst, n);
}

int mp_quantize_activation(int vec_dot_type, const float *src, void *dst, int64_t n)
{
    switch (vec_dot_type) {
    case MP_TYPE_F32:
        memcpy(dst, src, (size_t)n * sizeof(float));
        return 0;
    case MP_TYPE_Q8_0: /* the AVX2 quantizers give the references' bits, faster (quant_avx2.c) */
        if (current_isa() >= ISA_AVX2)
            mp_quantize_row_q8_0_avx2(src, dst, n);
        else
            mp_quantize_row_q8_0_ref(src, dst, n);
        return 0;
    case MP_TYPE_Q8_K:
        mp_quantize_row_q8_K(src, dst, n);
        return 0;
    default:
        return -1;
    }
}

/* The decode hot loop: nearly all decode time is here, streaming weight rows from memory once. */
void mp_gemv_rows(const mp_type_ops *ops, const void *w, size_t row_bytes, int64_t n_cols,
                  int64_t row_begin, int64_t row_end, const void *x, float *y)
{
    const uint8_t *wb = w; /* (n_rows, row_bytes) */
    if (ops->gemv) {
        ops->gemv(n_cols, wb + (size_t)row_begin * row_bytes, row_bytes, row_end - row_begin, x, y);
        return;
    }
    for (int64_t r = row_begin; r < row_end; r++)
        y[r - row_begin] = ops->vec_dot(n_cols, wb + (size_t)r * row_bytes, x);
}

/* The prefill loop: tiles of MP_GEMM_TILE activation rows, so that each weight row is reused from L1
 * for the tile's other rows, over blocks of MP_GEMM_BLOCK_BYTES of weight rows, so that every tile after
 * the first finds the block in L2: a task's rows (a whole expert's in prefill, megabytes for large
 * experts) otherwise came from memory once per tile. Out of cache, one thread: avx512 Q4_K x8 and
 * x32 1.1-1.26x, Q6_K 1.23-1.52x, in L2 unchanged (development VM, a Xeon with 2 MB of L2 a core;
 * 1 MB blocks measured the same there; 256 KB fits the L2 of older and client cores too;
 * bench/NOTES-kernels.md 2026-12-07). */
void mp_gemm_rows(const mp_type_ops *ops, const void *w, size_t row_bytes, int64_t n_cols,
                  int64_t row_begin, int64_t row_end, const void *x, size_t x_stride, int64_t n_x,
                  float *y, int64_t y_stride)
{
    const uint8_t *wb = w; /* (n_rows, row_bytes) */
    const uint8_t *xb = x; /* (n_x, x_stride) */
    /* the tile GEMMs gather 16 rows by 32-bit offsets: rows of at most 2^31 / 16 bytes */
    if (ops->gemm && n_x >= ops->gemm_min_rows && row_end > row_begin && row_bytes <= (size_t)INT32_MAX / 16) {
        ops->gemm(n_cols, wb + (size_t)row_begin * row_bytes, row_bytes, row_end - row_begin, x, x_stride, n_x, y,
                  y_stride);
        return;
    }
    const int64_t block = row_bytes < MP_GEMM_BLOCK_BYTES ? (int64_t)(MP_GEMM_BLOCK_BYTES / row_bytes) : 1;
    for (int64_t b0 = row_begin; b0 < row_end; b0 += block) {
        const int64_t b1 = b0 + block < row_end ? b0 + block : row_end;
        for (int64_t i0 = 0; i0 < n_x; i0 += MP_GEMM_TILE) {
            const int tile = (int)(n_x - i0 < MP_GEMM_TILE ? n_x - i0 : MP_GEMM_TILE);
            const uint8_t *xt = xb + (size_t)i0 * x_stride;
            if (tile == 1 && ops->gemv) { /* vec_dot's bits, rows grouped */
                ops->gemv(n_cols, wb + (size_t)b0 * row_bytes, row_bytes, b1 - b0, xt,
                          y + i0 * y_stride + (b0 - row_begin));
                continue;
            }
            for (int64_t r = b0; r < b1; r++) {
                const uint8_t *wr = wb + (size_t)r * row_bytes;
                float *yr = y + i0 * y_stride + (r - row_begin); /* column r of the tile's rows */
                if (ops->vec_dot_multi && tile > 1) {
                    float out[MP_GEMM_TILE];
                    ops->vec_dot_multi(n_cols, wr, xt, x_stride, tile, out);
                    for (int i = 0; i < tile; i++)
                        yr[i * y_stride] = out[i];
                } else {
                    for (int i = 0; i < tile; i++)
                        yr[i * y_stride] = ops->vec_dot(n_cols, wr, xt + (size_t)i * x_stride);
                }
            }
        }
    }
}
