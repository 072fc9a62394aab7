/* kernels/cuda/cuda_ops.h — C entry points of the CUDA kernels (built only with MP_HAVE_CUDA).
 *
 * Conventions (every function below):
 *  - device pointers are marked d_; `stream` is a cudaStream_t passed as void * (NULL: the
 *    default stream); launches are asynchronous unless the name ends in _host;
 *  - returns 0, or a negative MP_CUDA_E* code; never prints, never exits;
 *  - matrices are row-major; shapes are in the comments as (rows, cols); byte strides are named
 *    _bytes, element strides are plain;
 *  - weight rows are GGUF's block layouts (kernels/quant.h). Rows of Q4_K weights must start at
 *    4-byte aligned addresses (GGUF data always does: tensors are 32-byte aligned and a Q4_K row
 *    is a multiple of 144 bytes); other types need only the blocks' natural 2-byte alignment.
 *
 * Activation formats (the design choice for quantized GEMV): x is converted into exactly the
 * format the CPU kernels dot against (mp_type_ops.vec_dot_type): F32 for F32/F16/BF16 weights,
 * Q8_0 for Q4_0/Q8_0, Q8_K for Q4_K/Q6_K. mp_cuda_quantize_act produces the CPU quantizer's bytes
 * exactly, so a GPU GEMV and a CPU vec_dot of the same row differ only in float summation order
 * — the property the hybrid (CPU-expert) path needs for its parity guarantee.
 */
#ifndef MP_KERNELS_CUDA_OPS_H
#define MP_KERNELS_CUDA_OPS_H

#include <stddef.h>
#include <stdint.h>

/* the scratch sizes, row bytes and activation formats of these kernels, CUDA-free:
 * mp_cuda_vec_dot_type, mp_cuda_row_bytes, mp_cuda_moe_scratch_bytes,
 * mp_cuda_attention_scratch_bytes, mp_cuda_gemm_scratch_bytes */
#include "kernels/cuda_sizes.h"

#ifdef __cplusplus
extern "C" {
#endif

#define MP_CUDA_EINVAL (-1)  /* bad argument: unsupported type, shape, alignment */
#define MP_CUDA_ELAUNCH (-2) /* a kernel launch or a CUDA runtime call failed */
#define MP_CUDA_EBLAS (-3)   /* a cuBLAS call failed */
#define MP_CUDA_ENOMEM (-4)  /* scratch too small / allocation failed */

/* A short description of an MP_CUDA_E* code. */
const char *mp_cuda_strerror(int code);

/* 1 if a CUDA device of compute capability >= 7.0 is usable; else 0 with the reason in why. */
int mp_cuda_available(char *why, size_t why_cap);

/* ---- norms ---- */

/* Row-wise RMSNorm on the device: d_out[r] = d_x[r] / rms(d_x[r]) * d_w, rows × n. d_w may be
 * NULL (no gain); d_out may alias d_x. Per-head q/k norm is this call with rows = n_rows * n_head
 * and n = head_dim (the heads of a row are contiguous). */
int mp_cuda_rmsnorm(float *d_out, const float *d_x, const float *d_w, int64_t rows, int64_t n,
                    float eps, void *stream);

/* d_x += d_y, then d_out = RMSNorm(d_x) · d_w (rows × n): the residual add fused into the next
 * norm, bit-identical to mp_cuda_add followed by mp_cuda_rmsnorm. d_out must not alias d_x. */
int mp_cuda_add_rmsnorm(float *d_out, float *d_x, const float *d_y, const float *d_w, int64_t rows,
                        int64_t n, float eps, void *stream);

/* Host convenience for tests: copies in, runs mp_cuda_rmsnorm, copies out, synchronizes. */
int mp_cuda_rmsnorm_host(float *out, const float *x, const float *w, int64_t rows, int64_t n,
                         float eps);

/* ---- activations, dequantization ---- */


/* d_q (n_rows, row bytes of vdt) = d_x (n_rows, n) f32 with rows x_stride elements apart, in
 * activation format vdt (F32: copy; Q8_0; Q8_K) — the CPU's mp_quantize_activation bytes. */
int mp_cuda_quantize_act(int vdt, const float *d_x, int64_t x_stride, int64_t n_rows, int64_t n,
                         void *d_q, void *stream);

/* d_out (n_rows, n) f32 = dequantized rows d_src (n_rows, n) of type (rows row_bytes apart),
 * bit-identical to the CPU's dequantize_row. */
int mp_cuda_dequantize_rows(int type, const void *d_src, size_t row_bytes, int64_t n_rows,
                            int64_t n, float *d_out, void *stream);

/* Embedding gather: d_out (n_tok, n) f32 = dequantized rows d_tokens[i] of d_table (n_vocab, n).
 * Token ids outside [0, n_vocab) give a zero row and set *d_bad (an int on the device, may be
 * NULL) to 1, so the caller can report them after the step without a sync in the hot path. */
int mp_cuda_get_rows(int type, const void *d_table, size_t row_bytes, int64_t n_vocab, int64_t n,
                     const int32_t *d_tokens, int64_t n_tok, float *d_out, int *d_bad,
                     void *stream);

/* ---- GEMV (decode) ---- */

/* d_y[i * y_stride + r] = W[r] · x_i for r < n_out, i < n_x.
 * W: d_w (n_out, n_in) of type, rows row_bytes apart; x_i: d_x + i * x_stride_bytes, n_in
 * elements in mp_cuda_vec_dot_type(type). One warp per weight row; each weight block is loaded
 * once for up to 8 activation rows (the batched variant for n_x in 2..8; larger n_x runs in
 * groups of 8). */
int mp_cuda_gemv(int type, const void *d_w, size_t row_bytes, int64_t n_out, int64_t n_in,
                 const void *d_x, size_t x_stride_bytes, int n_x, float *d_y, int64_t y_stride,
                 void *stream);

/* ---- MoE experts (decode; also correct for any number of rows) ---- */

/* One expert tensor (GGUF's *_exps: (n_expert, n_out, n_in)). Expert e's matrix starts at
 * d_slots[e] when d_slots is set (a device array of n_expert pointers: the expert pool; a NULL
 * entry means the expert is not resident and its routes are skipped), else at
 * d_base + e * expert_bytes. Slot pointers must be 16-byte aligned when row_bytes is a multiple
 * of 16 (Q4_K rows are then read with 128-bit loads; a pool hands out 256-byte aligned slots). */
typedef struct mp_cuda_expert_tensor {
    int type;
    const void *d_base;
    size_t expert_bytes;
    const void *const *d_slots;
    size_t row_bytes;
    const void *const *d_far; /* with d_slots and mp_cuda_moe_args.d_far_of_cold: expert e's weights
                               * in host memory the device can read (mapped, page-locked), for
                               * experts without a slot; else NULL */
} mp_cuda_expert_tensor;

typedef struct mp_cuda_moe_args {
    mp_cuda_expert_tensor gate, up, down; /* gate/up: (n_ff, n_embd); down: (n_embd, n_ff) */
    int64_t n_embd, n_ff, n_expert, top_k, n_rows;
    const float *d_x;         /* (n_rows, n_embd) the normed MoE input */
    const void *d_xq;         /* NULL, or d_x already converted to the gate's vec_dot_type
                               * (mp_cuda_vec_dot_type; rows mp_cuda_row_bytes apart): the
                               * conversion is then skipped */
    const int32_t *d_ids;     /* (n_rows, top_k) routed experts */
    const float *d_weights;   /* (n_rows, top_k) combine weights */
    float *d_out;             /* (n_rows, n_embd) */
    int accumulate;           /* 0: out = Σ; 1: out += Σ (adds to a partial, e.g. CPU experts') */
    void *d_scratch;          /* mp_cuda_moe_scratch_bytes(...) bytes, 256-byte aligned */
    size_t scratch_bytes;
    /* Far routes (NULL: none). A row's routes to experts without a slot are cold; with this
     * table (top_k + 1 bytes on the device), a row with c cold routes runs the first
     * min(d_far_of_cold[c], far_max) of them (in slot order) on the GPU and skips the rest (their
     * caller runs them elsewhere: the CPU). A first kernel gathers those experts' weights from
     * each tensor's d_far (host memory the device can read) over the bus into d_far_stage, with
     * wide coalesced reads, and the expert kernels read them there. Needs slot tables and d_far
     * on all three tensors, a step on the per-route path (fewer than 16 rows), far_max in
     * 1..top_k and a stage of mp_cuda_moe_far_stage_bytes; MP_CUDA_EINVAL otherwise. */
    const uint8_t *d_far_of_cold;
    const int32_t *d_far_split_of_cold; /* NULL, or (top_k + 1) int32 on the device beside d_far_of_cold:
        for a row with c cold routes, r0 of its last far route: 0 = whole; else 0 < r0 < n_ff, a multiple
        of the down tensor's block (and so of its activation block): the GPU runs only that expert's FFN
        rows [r0, n_ff) and its caller computes rows [0, r0). The gather reads only that part of the
        expert from host memory and writes zeros over the rest of its stage slot (gate/up rows below
        r0, down's first r0 columns of every row), so the expert kernels compute h[j] = 0 for j < r0
        (with gate/up biases a finite value the zero columns cancel)
        and add weight · down[:, r0:] · h[r0:]. Any value is memory-safe (clamped to 0..n_ff; n_ff:
        the route adds nothing). 4-byte aligned, with d_far_of_cold, each expert tensor under 4 GiB;
        MP_CUDA_EINVAL otherwise. */
    int far_max;
    void *d_far_stage;        /* 256-byte aligned */
    size_t far_stage_bytes;
    /* The activation (MP_CUDA_ACT_*; 0: SwiGLU) and the experts' gate and up biases, added before
     * it (device f32, (n_expert, n_ff) each; both NULL: none). Such experts take the CUDA-core
     * kernels (neither the tensor-core nor the Q4_K decode ones). Down biases are not added here:
     * mp_cuda_moe_down_bias adds them once for every route of the layer. */
    int act;
    const float *d_gate_b, *d_up_b;
} mp_cuda_moe_args;

#define MP_CUDA_ACT_SWIGLU 0     /* silu(g) u (mp_swiglu) */
#define MP_CUDA_ACT_SWIGLU_OAI 1 /* gpt-oss's clamped SwiGLU (mp_swiglu_oai) */

/* d_out (n_rows, n_embd) += Σ_k d_weights[row, k] · d_b[d_ids[row, k]] (d_b: (n_expert, n_embd)
 * f32, the experts' down biases), slot order, one rounding per element; ids outside [0, n_expert)
 * add nothing. */
int mp_cuda_moe_down_bias(float *d_out, const int32_t *d_ids, const float *d_weights, const float *d_b,
                          int64_t n_rows, int64_t top_k, int64_t n_embd, int64_t n_expert, void *stream);

/* The far stage a step of a's shape needs: n_rows × far_max experts of gate, up and down, each
 * tensor 256-byte aligned. */
size_t mp_cuda_moe_far_stage_bytes(const mp_cuda_moe_args *a);


/* For every route (row, k) to a resident expert e = ids[row, k]:
 *   h = silu(gate_e · x_row) * (up_e · x_row)          (n_ff, f32; one launch for all routes)
 *   out[row] (+)= Σ_k weights[row, k] · (down_e · h)   (one launch; slot order, f32, one
 *                                                       rounding per output element)
 * gate and up must have the same type; top_k <= 32. Two launches plus two activation
 * conversions. */
int mp_cuda_moe_experts(const mp_cuda_moe_args *a, void *stream);
/* On the per-route path (fewer than 16 rows: decode), Q4_K gate/up with 16-byte aligned rows and
 * Q6_K, Q5_K or Q4_K down (the latter two with 16-byte aligned rows) run moe_dec.cu's kernels (a
 * lane per Q4_K sub-block pair; 8 lanes, or a warp for rows of 8 super-blocks or more, per down
 * (element, route) dot), every other case one warp per output row over every route (moe.cu). From 16 rows
 * the routes are grouped by expert; quantized experts (every quantized type:
 * mp_cuda_moe_mma_type) run on the tensor cores (exact int8 products per scale group, scales in F32: the CPU's vec_dot up to
 * summation order) from 32 rows, where the measurements against the CUDA cores cross for every
 * expert shape measured (moe.cu's MOE_MMA_MIN_ROWS). mp_cuda_moe_set_mma_min_rows(rows) sets
 * another threshold (0: never; a negative value: the measured one), process-wide: for tests and
 * benchmarks. */
void mp_cuda_moe_set_mma_min_rows(int64_t rows);
/* The decode down kernel (moe_dec.cu): lanes 8 or 32 per dot wherever it applies, 0 never (moe.cu's
 * one warp per output row instead), any other value the rule above; process-wide, for tests and
 * benchmarks. */
void mp_cuda_moe_set_dec_down(int lanes);

/* The far gather's blocks per (row, far rank, tensor): 0 (the default) sizes them by the device's
 * SMs; n > 0 fixes n (at most one per 16 KB chunk of the tensor). For benchmarks and tests. */
void mp_cuda_moe_set_far_blocks(int blocks);
/* Reads `bytes` (rounded down to 16) of d_src, mapped page-locked host memory, with the far
 * gather's loads, storing them into d_dst (dst_bytes, a multiple of 16 KB, that the reads wrap
 * around): a probe of what host memory gives the bus beside the cores (runtime/bench.h,
 * mp_bench_host_bus). */
int mp_cuda_bus_read(const void *d_src, size_t bytes, void *d_dst, size_t dst_bytes, void *stream);
/* 1 when this build and device run the tensor-core path (sm_80+ code), else 0. */
int mp_cuda_moe_mma_available(void);
/* 1 when the tensor-core path has kernels for expert weights of this type (the blocks of 32, the
 * K-quants, IQ4_XS), else 0; whether a launch takes them also depends on the device
 * (mp_cuda_moe_mma_available), the rows and the alignment of the weights. */
int mp_cuda_moe_mma_type(int type);

/* ---- router ---- */

/* Per row of d_logits (n_rows, n_expert): softmax (f32, max-subtracted), top-k by probability
 * with ties to the lower expert id (mp_topk's order: descending), optional renormalization of
 * the k weights to sum 1. d_ids, d_weights: (n_rows, k). d_probs (n_rows, n_expert) may be NULL.
 * n_expert <= 1024, k <= 32. */
int mp_cuda_router(const float *d_logits, int64_t n_rows, int64_t n_expert, int64_t k,
                   int renorm, int32_t *d_ids, float *d_weights, float *d_probs, void *stream);

/* Decode's router in one launch, for one row: d_logits (n_expert) = W · d_x (d_x: n_in f32; W:
 * n_expert rows of n_in, row_bytes apart, of a type mp_cuda_router_gemv_supported accepts),
 * bit-identical to mp_cuda_gemv, + d_bias (n_expert; NULL: none) as mp_cuda_add_bias adds it, then mp_cuda_router's softmax/top-k/renormalization of that row
 * into d_ids/d_weights (k), bit-identical to mp_cuda_router. d_count: one unsigned int of device
 * memory, 0 before the launch and 0 again after it (one launch at a time per counter). With
 * h_flag not NULL it also hands the row to the host: h_x = d_x (n_in floats), h_ids/h_w = the
 * routes when h_ids is not NULL, *h_stamp (the GPU's global timer, ns; when not NULL), then
 * *h_flag = 1 after a system-scope fence: a host that reads 1 from *h_flag sees everything written
 * before it (the hybrid decode step's handoff of a layer's row to the host). */
int mp_cuda_router_gemv(int type, const void *d_w, size_t row_bytes, int64_t n_expert, int64_t n_in,
                        const float *d_x, const float *d_bias, float *d_logits, int64_t k, int renorm, int32_t *d_ids, float *d_weights,
                        unsigned *d_count, float *h_x, int32_t *h_ids, float *h_w, uint32_t *h_flag,
                        uint64_t *h_stamp, void *stream);
/* 1 if mp_cuda_router_gemv takes router weights of this type (F32, F16, BF16), else 0. */
int mp_cuda_router_gemv_supported(int type);

/* ---- element-wise ---- */

#define MP_CUDA_ROPE_NEOX 0 /* pairs (i, i + rot_dim/2) */
#define MP_CUDA_ROPE_NORM 1 /* pairs (2i, 2i + 1), interleaved */

/* In place RoPE on d_x (n_rows, n_head, head_dim), rows row_stride elements apart; row r is at
 * position d_pos[r]. Pair i turns by pos * d_theta[i] (device, rot_dim / 2 doubles: mp_rope_freqs's
 * angles) in float64, cos and sin scaled by mscale (as mp_rope_cache). */
int mp_cuda_rope(float *d_x, int64_t n_rows, int64_t row_stride, int64_t n_head, int64_t head_dim,
                 int64_t rot_dim, const int32_t *d_pos, const double *d_theta, float mscale, int style,
                 void *stream);

/* The rows' RoPE angles for mp_cuda_qkv_finish: d_cs (n_rows, rot_dim / 2) pairs of f32, pair i
 * of row r = mscale (cos, sin) of d_pos[r] * d_theta[i], computed as mp_cuda_rope computes them (so
 * the rotations match it bit for bit). One launch per step serves all its layers. */
int mp_cuda_rope_table(float *d_cs, const int32_t *d_pos, int64_t n_rows, int64_t rot_dim, const double *d_theta,
                       float mscale, void *stream);

/* d_out[i] = silu(d_gate[i]) * d_up[i], n elements; d_out may alias either input. */
int mp_cuda_swiglu(float *d_out, const float *d_gate, const float *d_up, int64_t n, void *stream);

/* d_y[i] += d_x[i], n elements (residual add). */
int mp_cuda_add(float *d_y, const float *d_x, int64_t n, void *stream);

/* d_x[r, c] += d_b[c] for n_rows rows of width elements (a projection's bias). */
int mp_cuda_add_bias(float *d_x, const float *d_b, int64_t n_rows, int64_t width, void *stream);

/* d_y[r, c] += sigmoid(d_logit[r]) * d_x[r, c] for n_rows rows of width elements (a shared expert's
 * output under its gate). */
int mp_cuda_add_gated(float *d_y, const float *d_x, const float *d_logit, int64_t n_rows, int64_t width,
                      void *stream);

/* ---- hybrid decode handoffs through mapped host memory (handoff.cu) ----
 * h_ pointers here are page-locked host memory (cudaMallocHost) that the kernels read and write
 * directly. Both launch one block. */

/* Waits until the host sets *h_flag to 1 (the kernel traps after timeout_s seconds, which fails
 * the stream), then d_proj[i] = h_part[i] (d_proj[i] + h_part[i] with accumulate) for i < n,
 * h_part read from host memory (never from a cache); h_stamp (when not NULL; two entries) = the
 * global timer when the kernel began polling and when it saw the flag. It polls as soon as it is
 * on the GPU (with PDL, while the kernels before it still run); d_proj is read only after they
 * finished. */
int mp_cuda_host_wait_add(float *d_proj, const float *h_part, int64_t n, int accumulate, const uint32_t *h_flag,
                          uint64_t *h_stamp, double timeout_s, void *stream);
/* *h_stamp (host memory the device writes) = the GPU's global timer (ns) once the work before it on
 * the stream has finished: where a decode step starts and ends on the GPU's clock. */
int mp_cuda_stamp(uint64_t *h_stamp, void *stream);

/* ---- attention (KV cache in F16) ---- */

/* d_cache rows [pos0, pos0 + n_rows) of width n_kv = n_head_kv * head_dim (f16 bits) =
 * d_src (n_rows, n_kv) f32, rounded to nearest even. The cache is (n_ctx, n_kv) per layer. */
int mp_cuda_kv_store(uint16_t *d_cache, const float *d_src, int64_t n_rows, int64_t n_kv,
                     int64_t pos0, void *stream);

/* As mp_cuda_kv_store, but row r goes to cache row d_pos[r] (positions read on the device, so a
 * captured CUDA graph replays at every position). */
int mp_cuda_kv_store_at(uint16_t *d_cache, const float *d_src, int64_t n_rows, int64_t n_kv,
                        const int32_t *d_pos, void *stream);

/* mp_cuda_kv_store_at for K and V in one launch. */
int mp_cuda_kv_store2_at(uint16_t *d_kcache, uint16_t *d_vcache, const float *d_k, const float *d_v,
                         int64_t n_rows, int64_t n_kv, const int32_t *d_pos, void *stream);

/* d_out = rmsnorm(d_x (+= d_y when d_y is not NULL)) * d_w, rows × n as mp_cuda_add_rmsnorm /
 * mp_cuda_rmsnorm, and d_q = d_out converted to vdt (MP_TYPE_Q8_0 or MP_TYPE_Q8_K) as
 * mp_cuda_quantize_act would, in one launch; bit-identical to those launches. d_out != d_x. */
int mp_cuda_rmsnorm_quant(float *d_out, float *d_x, const float *d_y, const float *d_w, int64_t rows, int64_t n,
                          float eps, int vdt, void *d_q, void *stream);

/* Everything between the Q/K/V projections and attention, in one launch, for n_rows rows at
 * positions d_pos: with norm, each head of d_q (n_rows, n_head, head_dim) and d_k (n_rows,
 * n_head_kv, head_dim) is RMS-normalized with d_q_norm / d_k_norm (head_dim weights each, or NULL
 * for none) as mp_cuda_rmsnorm does per head; then RoPE as mp_cuda_rope (style, rot_dim), by the
 * angles of the rows' table d_rope_cs (mp_cuda_rope_table of d_pos); the results are written back, and K and V (n_rows, n_head_kv, head_dim) go to the
 * caches as mp_cuda_kv_store2_at. Bit-identical to those launches (tests/gpu/test_cuda_norm.c).
 * Steps of 16 rows or more run one warp per (row, head), smaller ones one block per (row, head):
 * the same results bit for bit, the faster launch for each (prefill, decode). */
int mp_cuda_qkv_finish(float *d_q, float *d_k, const float *d_v, const float *d_q_norm, const float *d_k_norm,
                       int norm, int64_t n_rows, int64_t n_head, int64_t n_head_kv, int64_t head_dim,
                       int64_t rot_dim, const int32_t *d_pos, const float *d_rope_cs, int style, float eps,
                       uint16_t *d_kcache, uint16_t *d_vcache, void *stream);
/* Programmatic dependent launch for the decode step's kernels (kernels/cuda/common.cuh): 1 on,
 * 0 off, -1 the default: on for compute capability 9.0 and newer (decided at the first launch).
 * Process-wide, set at start from MP_CUDA_PDL (0: off, so that a profiler's per-kernel durations
 * exclude the time a kernel waited for its predecessor); and by tests. */
void mp_cuda_set_pdl(int on);


/* Causal GQA attention: query row i (position pos0 + i) of head h attends to cache positions
 * [0, pos0 + i] of kv head h / (n_head / n_head_kv); scores (q·k)/sqrt(head_dim) and softmax in
 * f32 with max subtraction. d_q (n_rows, n_head, head_dim) f32; d_k, d_v (n_ctx, n_head_kv,
 * head_dim) f16 caches of one layer; d_out (n_rows, n_head, head_dim) f32. Steps of up to
 * MP_CUDA_ATT_SMALL_ROWS rows split the keys in chunks of MP_CUDA_ATT_CHUNK over blocks (split-K)
 * merged by a second launch; larger steps walk the keys in tiles of 32 query rows (one launch).
 * head_dim even, <= 256; d_scratch of mp_cuda_attention_scratch_bytes. */
int mp_cuda_attention(const float *d_q, const uint16_t *d_k, const uint16_t *d_v, float *d_out,
                      int64_t n_rows, int64_t pos0, int64_t n_head, int64_t n_head_kv,
                      int64_t head_dim, void *d_scratch, size_t scratch_bytes, void *stream);

/* As mp_cuda_attention, but query row i is at position d_pos[i] (read on the device) and the
 * keys are split for up to n_keys_max positions (chunks past a row's position are skipped):
 * the launch shape no longer depends on the position, so a CUDA graph can replay it.
 * act_vdt MP_TYPE_Q8_0 or MP_TYPE_Q8_K with d_act: d_out's rows are also converted into d_act
 * (rows of mp_cuda_row_bytes(act_vdt, n_head * head_dim)), byte for byte as
 * mp_cuda_quantize_act would: in the split-K merge where a group of whole heads makes whole
 * blocks, else in a launch of its own. MP_TYPE_F32 or d_act NULL: no conversion. window > 0: a
 * row of n keys attends to its last min(n, window) (a sliding-window layer); d_sinks (n_head f32,
 * NULL: none): head h's softmax denominator also counts exp(d_sinks[h] - max), the sink's share
 * dropped (gpt-oss). */
int mp_cuda_attention_at(const float *d_q, const uint16_t *d_k, const uint16_t *d_v, float *d_out,
                         int64_t n_rows, const int32_t *d_pos, int64_t n_keys_max, int64_t n_head,
                         int64_t n_head_kv, int64_t head_dim, void *d_scratch, size_t scratch_bytes,
                         int act_vdt, void *d_act, int64_t window, const float *d_sinks, void *stream);

/* Tests: 0 runs steps of more than MP_CUDA_ATT_SMALL_ROWS rows as a device without the tiled
 * kernel's shared memory does (split-K in steps of MP_CUDA_ATT_SMALL_ROWS rows); 1, the default,
 * the tiled kernel. Process-wide. */
void mp_cuda_attention_set_tiles(int on);

/* ---- prefill GEMM (cuBLAS) ---- */

/* A cuBLAS handle (cublasHandle_t) bound to stream; destroy with mp_cuda_blas_destroy. */
int mp_cuda_blas_create(void **handle, void *stream);
void mp_cuda_blas_destroy(void *handle);
/* Make cuBLAS use d_ws (bytes, 256-byte aligned) as its workspace instead of allocating its own,
 * so that a GPU budget accounts for it (32 MiB suits sm_90). */
int mp_cuda_blas_set_workspace(void *handle, void *d_ws, size_t bytes);


/* d_y[i * y_stride + r] = W[r] · x_i for r < n_out, i < n_x, with d_x (n_x, n_in) f32.
 * Weights are dequantized in tiles of tile_rows rows to F16 (BF16 for BF16 weights), x is
 * converted to the same 16-bit type, and cublasGemmEx multiplies with f32 accumulation. */
int mp_cuda_gemm(void *blas, int type, const void *d_w, size_t row_bytes, int64_t n_out,
                 int64_t n_in, const float *d_x, int64_t n_x, float *d_y, int64_t y_stride,
                 int64_t tile_rows, void *d_scratch, size_t scratch_bytes, void *stream);

#ifdef __cplusplus
}
#endif
#endif
