/* kernels/cpu/ops_scalar.c — float kernels of the forward pass (see kernels/ops.h).
 * These are the reference implementations; they are simple enough that the compiler's
 * auto-vectorization is the only SIMD they get, and none of them is a decode hot spot
 * (the weight matrix-vector products in quant_*.c are). */
#include <math.h>

#include "kernels/ops.h"

void mp_rmsnorm(float *out, const float *x, const float *w, int64_t n, float eps)
{
    float sum = 0.0f;
    for (int64_t i = 0; i < n; i++)
        sum += x[i] * x[i];
    const float scale = 1.0f / sqrtf(sum / (float)n + eps);
    for (int64_t i = 0; i < n; i++)
        out[i] = x[i] * scale * (w ? w[i] : 1.0f);
}

void mp_rope_neox(float *head, int64_t head_dim, int64_t rot_dim, int64_t pos, float freq_base)
{
    const int64_t half = rot_dim / 2;
    for (int64_t i = 0; i < half; i++) {
        /* theta_i = pos * base^(-2i / rot_dim), in double so long contexts keep their precision */
        const double theta = (double)pos * pow((double)freq_base, -2.0 * (double)i / (double)rot_dim);
        const float c = (float)cos(theta), s = (float)sin(theta);
        const float a = head[i], b = head[i + half];
        head[i] = a * c - b * s;
        head[i + half] = a * s + b * c;
    }
}

void mp_rope_cache(float *cs, int64_t rot_dim, int64_t pos, const double *theta, float mscale)
{
    for (int64_t i = 0; i < rot_dim / 2; i++) {
        const double a = (double)pos * theta[i];
        cs[2 * i] = (float)cos(a) * mscale;
        cs[2 * i + 1] = (float)sin(a) * mscale;
    }
}

void mp_rope_neox_cs(float *head, int64_t rot_dim, const float *cs)
{
    const int64_t half = rot_dim / 2;
    for (int64_t i = 0; i < half; i++) {
        const float c = cs[2 * i], s = cs[2 * i + 1];
        const float a = head[i], b = head[i + half];
        head[i] = a * c - b * s;
        head[i + half] = a * s + b * c;
    }
}

void mp_rope_norm_cs(float *head, int64_t rot_dim, const float *cs)
{
    for (int64_t i = 0; i < rot_dim / 2; i++) {
        const float c = cs[2 * i], s = cs[2 * i + 1];
        const float a = head[2 * i], b = head[2 * i + 1];
        head[2 * i] = a * c - b * s;
        head[2 * i + 1] = a * s + b * c;
    }
}

void mp_softmax(float *x, int64_t n)
{
    mp_softmax_sink(x, n, -INFINITY);
}

/* sum starts at the sink's share: exp(-inf - max) = 0 for mp_softmax, the same bits as 0 */
void mp_softmax_sink(float *x, int64_t n, float sink)
{
    float max = sink;
    for (int64_t i = 0; i < n; i++)
        if (x[i] > max)
            max = x[i];
    float sum = expf(sink - max);
    for (int64_t i = 0; i < n; i++) {
        x[i] = expf(x[i] - max);
        sum += x[i];
    }
    const float inv = 1.0f / sum;
    for (int64_t i = 0; i < n; i++)
        x[i] *= inv;
}

void mp_swiglu(float *out, const float *gate, const float *up, int64_t n)
{
    for (int64_t i = 0; i < n; i++) {
        const float g = gate[i];
        out[i] = g / (1.0f + expf(-g)) * up[i];
    }
}

void mp_swiglu_oai(float *out, const float *gate, const float *up, int64_t n)
{
    const float alpha = MP_OAI_SWIGLU_ALPHA, limit = MP_OAI_SWIGLU_LIMIT;
    for (int64_t i = 0; i < n; i++) {
        const float g = gate[i] < limit ? gate[i] : limit;
        const float u = up[i] < -limit ? -limit : up[i] > limit ? limit : up[i];
        out[i] = g / (1.0f + expf(-alpha * g)) * (u + 1.0f);
    }
}

void mp_axpy(float *y, float a, const float *x, int64_t n)
{
    for (int64_t i = 0; i < n; i++)
        y[i] += a * x[i];
}

float mp_dot_f32(const float *x, const float *y, int64_t n)
{
    /* 8 independent partial sums: vectorizable, and less rounding drift than one running sum */
    float acc[8] = {0};
    int64_t i = 0;
    for (; i + 8 <= n; i += 8)
        for (int j = 0; j < 8; j++)
            acc[j] += x[i + j] * y[i + j];
    float sum = 0.0f;
    for (; i < n; i++)
        sum += x[i] * y[i];
    for (int j = 0; j < 8; j++)
        sum += acc[j];
    return sum;
}

void mp_topk(const float *x, int64_t n, int64_t k, int32_t *ids, float *vals)
{
    /* k is small (top-8 of 128): insertion into a sorted prefix, O(n k) */
    int64_t have = 0;
    for (int64_t i = 0; i < n; i++) {
        const float v = x[i];
        if (have == k && !(v > x[ids[k - 1]]))
            continue;
        int64_t j = have < k ? have++ : k - 1;
        while (j > 0 && v > x[ids[j - 1]]) {
            ids[j] = ids[j - 1];
            j--;
        }
        ids[j] = (int32_t)i;
    }
    if (vals)
        for (int64_t j = 0; j < k; j++)
            vals[j] = x[ids[j]];
}

int64_t mp_argmax(const float *x, int64_t n)
{
    int64_t best = 0;
    for (int64_t i = 1; i < n; i++)
        if (x[i] > x[best])
            best = i;
    return best;
}
