// kernels/cuda/common.cuh — device helpers shared by the CUDA kernel files (not a public header).
//
// - the block layouts come from kernels/quant.h (plain C structs, GGUF's bytes); offsets used
//   here are checked against them by static asserts below;
// - f16/bf16 fields are read as 16-bit patterns (blocks are only 2-byte aligned in general);
// - every conversion that must match the CPU reference bit for bit uses the _rn intrinsics, which
//   --use_fast_math does not relax (it only changes plain float division, sqrt, exp, ...).
#ifndef MP_KERNELS_CUDA_COMMON_CUH
#define MP_KERNELS_CUDA_COMMON_CUH

#include <cuda_fp16.h>
#include <cuda_runtime.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

extern "C" {
#include "kernels/quant.h"
}
#include "kernels/cuda/cuda_ops.h"

// ---- programmatic dependent launch (Hopper) ----
// A decode step is a chain of small kernels, each a few microseconds, and each waits for the one
// before it to finish before its own blocks start. Launched with PDL (mpc_launch on a stream of
// a device of compute capability 9.0 or newer), a kernel's blocks start while its predecessor
// still runs: they may read what no kernel writes (weights: prefetched into L2 here), then wait
// in mpc_pdl_wait() until the predecessor has finished and its writes are visible. Rules for
// every kernel launched with mpc_launch:
//   - nothing before mpc_pdl_wait() reads what an earlier kernel wrote or writes anything;
//   - every block calls mpc_pdl_wait() before it exits (a kernel's completion then implies its
//     predecessor's, which the kernel after it relies on);
//   - mpc_pdl_trigger() after the wait lets the next kernel launch while this one runs.
// Launched without PDL (older devices, MP_CUDA_PDL=0, the default stream), both are no-ops.
__device__ __forceinline__ void mpc_pdl_wait()
{
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    asm volatile("griddepcontrol.wait;" ::: "memory");
#endif
}

__device__ __forceinline__ void mpc_pdl_trigger()
{
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
#endif
}

// The GPU's global timer in nanoseconds (the handoff stamps: gpu/gpu_forward.c measures the
// host round trip's gap with them).
__device__ __forceinline__ uint64_t mpc_globaltimer_ns()
{
    uint64_t t;
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
    return t;
}

// The end of a handoff to the host (handoff.cu): called by one thread after every thread of the
// block has fenced its writes to host memory at system scope; stamps the time (when h_stamp is
// not NULL), fences once more, and sets the flag the host spins on.
__device__ __forceinline__ void mpc_host_signal(uint32_t *h_flag, uint64_t *h_stamp)
{
    if (h_stamp)
        *(volatile uint64_t *)h_stamp = mpc_globaltimer_ns();
    __threadfence_system();
    *(volatile uint32_t *)h_flag = 1;
}

// Bytes [p, p + n) toward L2, one 128-byte line per lane step (a warp's lanes cover 4 KiB).
__device__ __forceinline__ void mpc_prefetch_l2(const void *p, size_t n, int lane)
{
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    for (size_t off = (size_t)lane * 128; off < n; off += 32 * 128)
        asm volatile("prefetch.global.L2 [%0];" ::"l"((const char *)p + off));
#endif
}

// PDL on or off for this process: on for compute capability >= 9.0 running code built for sm_90 or
// newer, unless mp_cuda_set_pdl(0) (MP_CUDA_PDL=0).
int mpc_pdl_enabled(void);

// The current device's SMs, asked once per process (0 when the query fails: each caller has its
// own fallback). Launches sized to fill the GPU read it (the far gather, attention's key split).
int mpc_sm_count(void);

// kernel<<<grid, block, smem, st>>>(args...), with PDL when it is enabled and st is a stream of
// the caller's (not the legacy default stream). Errors reach cudaGetLastError as a <<<>>> launch's.
template <typename... K, typename... A>
static inline cudaError_t mpc_launch(void (*kernel)(K...), dim3 grid, dim3 block, size_t smem, cudaStream_t st,
                                     A... args)
{
    cudaLaunchConfig_t cfg = {};
    cfg.gridDim = grid;
    cfg.blockDim = block;
    cfg.dynamicSmemBytes = smem;
    cfg.stream = st;
    cudaLaunchAttribute attr[1];
    attr[0].id = cudaLaunchAttributeProgrammaticStreamSerialization;
    attr[0].val.programmaticStreamSerializationAllowed = 1;
    cfg.attrs = attr;
    cfg.numAttrs = st && mpc_pdl_enabled() ? 1 : 0;
    return cudaLaunchKernelEx(&cfg, kernel, ((K)args)...);
}

static_assert(sizeof(mp_block_q4_0) == 18, "Q4_0 block");
static_assert(sizeof(mp_block_q8_0) == 34, "Q8_0 block");
static_assert(sizeof(mp_block_q4_1) == 20 && offsetof(mp_block_q4_1, qs) == 4, "Q4_1 block");
static_assert(sizeof(mp_block_q5_0) == 22 && offsetof(mp_block_q5_0, qh) == 2 && offsetof(mp_block_q5_0, qs) == 6,
              "Q5_0 block");
static_assert(sizeof(mp_block_q5_1) == 24 && offsetof(mp_block_q5_1, qh) == 4 && offsetof(mp_block_q5_1, qs) == 8,
              "Q5_1 block");
static_assert(sizeof(mp_block_iq4_nl) == 18 && offsetof(mp_block_iq4_nl, qs) == 2, "IQ4_NL block");
static_assert(sizeof(mp_block_mxfp4) == 17 && offsetof(mp_block_mxfp4, qs) == 1, "MXFP4 block");
static_assert(sizeof(mp_block_iq4_xs) == 136 && offsetof(mp_block_iq4_xs, scales_h) == 2 &&
              offsetof(mp_block_iq4_xs, scales_l) == 4 && offsetof(mp_block_iq4_xs, qs) == 8, "IQ4_XS block");
static_assert(sizeof(mp_block_q4_K) == 144, "Q4_K block");
static_assert(sizeof(mp_block_q2_K) == 84 && offsetof(mp_block_q2_K, qs) == 16 && offsetof(mp_block_q2_K, d) == 80,
              "Q2_K block");
static_assert(sizeof(mp_block_q3_K) == 110 && offsetof(mp_block_q3_K, qs) == 32 &&
              offsetof(mp_block_q3_K, scales) == 96 && offsetof(mp_block_q3_K, d) == 108, "Q3_K block");
static_assert(sizeof(mp_block_q5_K) == 176, "Q5_K block");
static_assert(offsetof(mp_block_q5_K, qh) == 16 && offsetof(mp_block_q5_K, qs) == 48, "Q5_K qh, qs offsets");
static_assert(sizeof(mp_block_q6_K) == 210, "Q6_K block");
static_assert(sizeof(mp_block_q8_K) == 292, "Q8_K block");
static_assert(offsetof(mp_block_q4_K, qs) == 16, "Q4_K qs offset");
static_assert(offsetof(mp_block_q6_K, qh) == 128 && offsetof(mp_block_q6_K, scales) == 192 &&
              offsetof(mp_block_q6_K, d) == 208, "Q6_K offsets");
static_assert(offsetof(mp_block_q8_K, qs) == 4 && offsetof(mp_block_q8_K, bsums) == 260,
              "Q8_K offsets");

#define MPC_WARP 32

// RoPE of pair i at position pos: the angle pos * theta[i] (theta: mp_rope_freqs's, computed on the
// host once) in float64, its (cos, sin) rounded to float and scaled by mscale, as mp_rope_cache
// computes them. The one place the GPU computes an angle: the rows' table (rope_table_kernel, what
// the Q/K finish reads) and rope_kernel both call it.
__device__ __forceinline__ float2 mpc_rope_cs(int64_t i, int32_t pos, const double *theta, float mscale)
{
    const double a = (double)pos * theta[i];
    return make_float2(__fmul_rn((float)cos(a), mscale), __fmul_rn((float)sin(a), mscale));
}

// Rotate pair i of one head hd[0 .. head_dim) by the angle whose (cos, sin) is cs, with _rn
// intrinsics (no FMA), so that every kernel that rotates gives the CPU's result to the last ulp
// of the double cos/sin.
__device__ __forceinline__ void mpc_rope_rotate(float *hd, int64_t i, int64_t rot_dim, float2 cs, int style)
{
    const int64_t half = rot_dim / 2;
    const int64_t ia = style == MP_CUDA_ROPE_NEOX ? i : 2 * i;
    const int64_t ib = style == MP_CUDA_ROPE_NEOX ? i + half : 2 * i + 1;
    const float a = hd[ia], b = hd[ib];
    hd[ia] = __fsub_rn(__fmul_rn(a, cs.x), __fmul_rn(b, cs.y));
    hd[ib] = __fadd_rn(__fmul_rn(a, cs.y), __fmul_rn(b, cs.x));
}

// #pragma unroll for loops of functions the host compiles too (its compiler does not know it)
#ifdef __CUDA_ARCH__
#define MPC_UNROLL _Pragma("unroll")
#else
#define MPC_UNROLL
#endif

// ---- helpers the weight units (gemv.cuh) use, callable from the host as well: tests/unit's
// test_cuda_units runs every unit on the CPU against the scalar reference, so that their layouts
// are checked where no GPU is (CI); on the device each is the intrinsic ----

__host__ __device__ __forceinline__ float mpc_u2f(uint32_t u)
{
#ifdef __CUDA_ARCH__
    return __uint_as_float(u);
#else
    float f;
    memcpy(&f, &u, sizeof f);
    return f;
#endif
}

// a * b rounded to nearest, never fused into an FMA (the host pass's float product is one)
__host__ __device__ __forceinline__ float mpc_mul_rn(float a, float b)
{
#ifdef __CUDA_ARCH__
    return __fmul_rn(a, b);
#else
    return a * b;
#endif
}

__host__ __device__ __forceinline__ float mpc_add_rn(float a, float b)
{
#ifdef __CUDA_ARCH__
    return __fadd_rn(a, b);
#else
    return a + b;
#endif
}

__host__ __device__ __forceinline__ float mpc_sub_rn(float a, float b)
{
#ifdef __CUDA_ARCH__
    return __fsub_rn(a, b);
#else
    return a - b;
#endif
}

// a - b in each of the four bytes (no carries between them)
__host__ __device__ __forceinline__ uint32_t mpc_vsub4(uint32_t a, uint32_t b)
{
#ifdef __CUDA_ARCH__
    return __vsub4(a, b);
#else
    uint32_t r = 0;
    for (int n = 0; n < 4; n++)
        r |= ((a >> (8 * n)) - (b >> (8 * n)) & 0xFFu) << (8 * n);
    return r;
#endif
}

// the 32 bits of hi:lo shifted right by sh (0..31)
__host__ __device__ __forceinline__ uint32_t mpc_funnel_r(uint32_t lo, uint32_t hi, unsigned sh)
{
#ifdef __CUDA_ARCH__
    return __funnelshift_r(lo, hi, sh);
#else
    return (uint32_t)((((uint64_t)hi << 32) | lo) >> (sh & 31));
#endif
}

__host__ __device__ __forceinline__ float mpc_f16(uint16_t bits)
{
    return __half2float(__ushort_as_half(bits));
}

__host__ __device__ __forceinline__ float mpc_bf16(uint16_t bits)
{
    return mpc_u2f((uint32_t)bits << 16);
}

// MXFP4's block scale 2^(e - 128) (kernels/quant.h's mp_e8m0_half)
__host__ __device__ __forceinline__ float mpc_e8m0_half(uint32_t e)
{
    return mpc_u2f(e < 2 ? 0x00200000u << e : (e - 1) << 23);
}

// The 16 levels of a look-up format (IQ4_NL, MXFP4) as four words of four signed bytes, for
// mpc_lut16; built at compile time from kernels/quant.h's initializers.
struct mpc_levels {
    int8_t v[16];
};
__host__ __device__ constexpr uint32_t mpc_levels_word(mpc_levels l, int w)
{
    return (uint32_t)(uint8_t)l.v[4 * w] | (uint32_t)(uint8_t)l.v[4 * w + 1] << 8 |
           (uint32_t)(uint8_t)l.v[4 * w + 2] << 16 | (uint32_t)(uint8_t)l.v[4 * w + 3] << 24;
}

// constexpr in the host pass only: the device pass calls intrinsics, which are not constexpr; the
// host pass's definitions let static_assert check the logic on machines without a GPU.
#ifdef __CUDA_ARCH__
#define MPC_HOST_CONSTEXPR
#else
#define MPC_HOST_CONSTEXPR constexpr
#endif

// __byte_perm(x, y, s): byte n of the result is byte (s >> 4n) & 7 of the eight bytes y:x (x's
// four the low ones). The host pass's copy follows that definition, for the checks below.
__host__ __device__ MPC_HOST_CONSTEXPR uint32_t mpc_byte_perm(uint32_t x, uint32_t y, uint32_t s)
{
#ifdef __CUDA_ARCH__
    return __byte_perm(x, y, s);
#else
    uint32_t r = 0;
    for (int n = 0; n < 4; n++) {
        const uint32_t k = (s >> (4 * n)) & 7u;
        r |= ((k < 4 ? x >> (8 * k) : y >> (8 * (k - 4))) & 0xFFu) << (8 * n);
    }
    return r;
#endif
}

// Four codes (one 0..15 per byte of nib) to their four levels (one signed byte each): byte_perm
// picks from levels 0..7 and 8..15 by the code's low 3 bits, its bit 3 chooses between the two.
template <int T>
__host__ __device__ MPC_HOST_CONSTEXPR int mpc_lut16(uint32_t nib)
{
    constexpr mpc_levels lv = T == MP_TYPE_IQ4_NL ? mpc_levels{MP_IQ4_NL_LEVELS} : mpc_levels{MP_MXFP4_LEVELS};
    constexpr uint32_t t0 = mpc_levels_word(lv, 0), t1 = mpc_levels_word(lv, 1);
    constexpr uint32_t t2 = mpc_levels_word(lv, 2), t3 = mpc_levels_word(lv, 3);
    const uint32_t sel = (nib & 0x7u) | ((nib >> 4) & 0x70u) | ((nib >> 8) & 0x700u) | ((nib >> 12) & 0x7000u);
    const uint32_t lo = mpc_byte_perm(t0, t1, sel), hi = mpc_byte_perm(t2, t3, sel);
    const uint32_t high = ((nib >> 3) & 0x01010101u) * 0xFFu;
    return (int)((lo & ~high) | (hi & high));
}

#ifndef __CUDA_ARCH__
// Codes 0, 15, 8, 7 (bytes 0..3) give IQ4_NL's levels -127, 113, 1, -10 and MXFP4's 0, -12, 0, 12;
// codes 9, 1, 14, 6 MXFP4's -1, 1, -8, 8.
static_assert(mpc_lut16<MP_TYPE_IQ4_NL>(0x07080F00u) == (int)0xF6017181u, "IQ4_NL look-up");
static_assert(mpc_lut16<MP_TYPE_MXFP4>(0x07080F00u) == (int)0x0C00F400u, "MXFP4 look-up");
static_assert(mpc_lut16<MP_TYPE_MXFP4>(0x060E0109u) == (int)0x08F801FFu, "MXFP4 look-up");
#endif

// Bits 0..3 of b to bit 4 of bytes 0..3 (Q5_0/Q5_1's fifth bits of four elements).
__host__ __device__ constexpr uint32_t mpc_bits_to_byte4(uint32_t b)
{
    return ((b & 1u) | (b & 2u) << 7 | (b & 4u) << 14 | (b & 8u) << 21) << 4;
}

// The packing, checked where it is compiled (the machines without a GPU too): IQ4_NL's first four
// levels -127, -104, -83, -65 are the bytes 0x81, 0x98, 0xAD, 0xBF; MXFP4's last four -4, -6, -8,
// -12 the bytes 0xFC, 0xFA, 0xF8, 0xF4; bits 0 and 2 go to bytes 0 and 2.
static_assert(mpc_levels_word(mpc_levels{MP_IQ4_NL_LEVELS}, 0) == 0xBFAD9881u, "IQ4_NL levels 0..3");
static_assert(mpc_levels_word(mpc_levels{MP_MXFP4_LEVELS}, 3) == 0xF4F8FAFCu, "MXFP4 levels 12..15");
static_assert(mpc_bits_to_byte4(0x5u) == 0x00100010u && mpc_bits_to_byte4(0xFu) == 0x10101010u, "fifth bits");

__host__ __device__ __forceinline__ uint16_t mpc_ld16(const uint8_t *p)
{
    return *(const uint16_t *)p; // p is 2-byte aligned (every 16-bit field of every block is)
}

// Q4_K: the 6-bit scale and min of sub-block j (0..7) from the block's 12 packed scale bytes,
// read through byte(i) (memory, or words already in registers).
template <typename Byte>
__host__ __device__ __forceinline__ void mpc_q4k_scale_min(Byte byte, int j, int &sc, int &m)
{
    if (j < 4) {
        sc = byte(j) & 63;
        m = byte(j + 4) & 63;
    } else {
        sc = (byte(j + 4) & 0x0F) | ((byte(j - 4) >> 6) << 4);
        m = (byte(j + 4) >> 4) | ((byte(j) >> 6) << 4);
    }
}

// A 32-bit word from a 2-byte aligned address, as two 16-bit loads (little-endian).
__host__ __device__ __forceinline__ uint32_t mpc_ld32_a2(const uint8_t *p)
{
    const uint16_t *q = (const uint16_t *)p;
    return (uint32_t)q[0] | ((uint32_t)q[1] << 16);
}

// N 32-bit words from any address with aligned 32-bit loads: N (+1 when p is not 4-byte
// aligned) loads and a funnel shift, instead of 2N 16-bit (or 4N byte) loads. Never reads outside
// the 4-byte words that hold bytes of [p, p + 4N).
template <int N>
__host__ __device__ __forceinline__ void mpc_ld_words(const uint8_t *p, uint32_t *out)
{
    const uintptr_t a = (uintptr_t)p;
    const uint32_t *q = (const uint32_t *)(a & ~(uintptr_t)3);
    const unsigned sh = (unsigned)(a & 3) * 8; // 0, 8, 16 or 24
    uint32_t w[N + 1];
MPC_UNROLL
    for (int k = 0; k < N; k++)
        w[k] = q[k];
    w[N] = sh ? q[N] : 0u;
MPC_UNROLL
    for (int k = 0; k < N; k++)
        out[k] = mpc_funnel_r(w[k], w[k + 1], sh);
}

__device__ __forceinline__ float mpc_warp_sum(float v)
{
    for (int off = 16; off > 0; off >>= 1)
        v += __shfl_xor_sync(0xffffffffu, v, off);
    return v;
}

__device__ __forceinline__ float mpc_warp_max(float v)
{
    for (int off = 16; off > 0; off >>= 1)
        v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, off));
    return v;
}

// One activation block quantized by one warp (lane = threadIdx.x % 32), bit-identical to the
// CPU reference (kernels/cpu/quantize.c): shared by the quantize kernels (convert.cu) and the
// fused norm + quantize (norm.cu).
// Q8_0: d = max|x| / 127 stored as f16, q = round_half_away(x * (1 / d)), as the CPU does (it
// computes 1/d from the unrounded float d). x: 32 floats, b: an mp_block_q8_0.
__device__ __forceinline__ void mpc_quantize_q8_0_warp(const float *x, uint8_t *b, int lane)
{
    const float v = x[lane];
    const float amax = mpc_warp_max(fabsf(v));
    const float d = __fdiv_rn(amax, 127.0f);
    const float id = d != 0.0f ? __frcp_rn(d) : 0.0f;
    b[2 + lane] = (uint8_t)(int8_t)roundf(__fmul_rn(v, id));
    if (lane == 0)
        *(uint16_t *)b = __half_as_ushort(__float2half_rn(d));
}

// Q8_K: iscale = 127 / max|x|, d = 1 / iscale (f32), q = rint(x * iscale) clamped to ±127,
// bsums per 16. Lane l holds elements 8l .. 8l + 7, so a bsum is two adjacent lanes. x: 256
// floats, b: an mp_block_q8_K (4-byte aligned).
__device__ __forceinline__ void mpc_quantize_q8_K_warp(const float *x, uint8_t *b, int lane)
{
    const float *xb = x + 8 * lane;
    float v[8], amax = 0.0f;
    for (int j = 0; j < 8; j++) {
        v[j] = xb[j];
        amax = fmaxf(amax, fabsf(v[j]));
    }
    amax = mpc_warp_max(amax);
    const float iscale = amax != 0.0f ? __fdiv_rn(127.0f, amax) : 0.0f;
    int s = 0;
    for (int j = 0; j < 8; j++) {
        int qi = __float2int_rn(__fmul_rn(v[j], iscale));
        qi = qi > 127 ? 127 : qi < -127 ? -127 : qi;
        b[4 + 8 * lane + j] = (uint8_t)(int8_t)qi;
        s += qi;
    }
    s += __shfl_xor_sync(0xffffffffu, s, 1);
    if ((lane & 1) == 0)
        *(int16_t *)(b + 260 + 2 * (lane / 2)) = (int16_t)s;
    if (lane == 0)
        *(float *)b = amax != 0.0f ? __frcp_rn(iscale) : 0.0f;
}

// Host: bytes of a row of n elements of type t (0 if n is not a multiple of the block size or
// the type is unknown): kernels/cuda_sizes.h, which the GPU budget reads too.
static inline size_t mpc_row_bytes(int t, int64_t n)
{
    return mp_cuda_row_bytes(t, n);
}

static inline int mpc_launch_status(void)
{
    return cudaGetLastError() == cudaSuccess ? 0 : MP_CUDA_ELAUNCH;
}

#endif
