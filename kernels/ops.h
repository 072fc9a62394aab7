/* kernels/ops.h — float kernels of the forward pass (norms, RoPE, activations, softmax, top-k).
 *
 * Plain functions over explicit pointers; each has a scalar reference in kernels/cpu/ops_scalar.c.
 * All vectors are float32; lengths are element counts.
 */
#ifndef MP_KERNELS_OPS_H
#define MP_KERNELS_OPS_H

#include <stdint.h>

/* out = x / sqrt(mean(x^2) + eps) * w   (w may be NULL: no gain). out may alias x. */
void mp_rmsnorm(float *out, const float *x, const float *w, int64_t n, float eps);

/* NeoX-style rotary embedding in place on one head of head_dim elements: pairs (i, i + head_dim/2)
 * rotate by pos * base^(-2i/rot_dim) for i < rot_dim/2. */
void mp_rope_neox(float *head, int64_t head_dim, int64_t rot_dim, int64_t pos, float freq_base);

/* The rotation table of one position: cs[2i] = mscale cos(pos theta[i]), cs[2i + 1] = mscale
 * sin(pos theta[i]), i < rot_dim / 2, the angle in double (theta from mp_rope_freqs: base^(-2i /
 * rot_dim) without YaRN, so that with mscale 1 the table is bit-identical to the angles
 * mp_rope_neox computes); a forward pass computes it once per row, not per head. */
void mp_rope_cache(float *cs, int64_t rot_dim, int64_t pos, const double *theta, float mscale);
/* NeoX rotation with a table: pairs (i, i + rot_dim/2). Equals mp_rope_neox. */
void mp_rope_neox_cs(float *head, int64_t rot_dim, const float *cs);
/* Interleaved ("normal", GPT-J style) rotation with a table: pairs (2i, 2i + 1). */
void mp_rope_norm_cs(float *head, int64_t rot_dim, const float *cs);

/* In place softmax over n elements (max-subtracted, float32). */
void mp_softmax(float *x, int64_t n);
/* The same with one more logit, sink, whose share is dropped: x sums to less than 1 (attention
 * sinks, gpt-oss). mp_softmax is this with sink = -inf, bit for bit. */
void mp_softmax_sink(float *x, int64_t n, float sink);

/* out[i] = silu(gate[i]) * up[i]. out may alias gate or up. */
void mp_swiglu(float *out, const float *gate, const float *up, int64_t n);
/* gpt-oss's clamped SwiGLU: g' = min(gate, limit), u' = clamp(up, -limit, limit),
 * out = g' sigmoid(alpha g') (u' + 1); out may alias gate. alpha 1.702 and limit 7 are the values of
 * the published gpt-oss weights' config (swiglu_alpha, swiglu_limit); GGUF files carry no key. */
#define MP_OAI_SWIGLU_ALPHA 1.702f
#define MP_OAI_SWIGLU_LIMIT 7.0f
void mp_swiglu_oai(float *out, const float *gate, const float *up, int64_t n);

/* y += a * x */
void mp_axpy(float *y, float a, const float *x, int64_t n);
/* sum x[i] * y[i] in float32 with float64-free pairwise-friendly accumulation */
float mp_dot_f32(const float *x, const float *y, int64_t n);

/* Indices of the k largest values of x[0..n) in descending order of value, ties to the lower
 * index. Writes k ids to ids and their values to vals (vals may be NULL). k <= n. */
void mp_topk(const float *x, int64_t n, int64_t k, int32_t *ids, float *vals);

/* Argmax of x[0..n), ties to the lower index. */
int64_t mp_argmax(const float *x, int64_t n);

#endif
