// kernels/cuda/moe.cu — the MoE block on the device: router (softmax, top-k, renormalization)
// and the experts over grouped routes (gate/up + SwiGLU, then down + weighted combine).
//
// Decode shape this is designed for: 1 row, top-8 of 128 experts, n_embd 2048, n_ff 768.
//   gate/up:  one launch, grid (n_ff / 4 warps, n_routes): a warp computes gate and up row j of
//             route r's expert and writes h[r, j] = silu(g) * u. All 8 experts' weights stream
//             concurrently, 8 × 768 × 2 rows.
//   down:     one launch, grid (n_embd / 4 warps, n_rows): a warp owns output element (row, d) and
//             sums weights[row, k] · (down_e[d] · h[row, k]) over k in slot order in f32 — the
//             combine is fused, deterministic, and rounds once per output element (no atomics).
// Activations are converted to the weights' partner formats (cuda_ops.h) in between, exactly as
// the CPU path does, so CPU experts and GPU experts see the same quantized inputs.
// Routes whose expert has no slot (d_slots[e] == NULL: not resident) or an id outside
// [0, n_expert) contribute nothing; the hybrid runtime adds the CPU's partial (accumulate).
#include "kernels/cuda/common.cuh"
#include "kernels/cuda/gemv.cuh"

#define MOE_WARPS 4

struct mpc_expert_t {
    const uint8_t *base;
    size_t expert_bytes;
    const void *const *slots;
    size_t row_bytes;
};

__device__ __forceinline__ const uint8_t *mpc_expert_ptr(const mpc_expert_t &t, int32_t e,
                                                         int64_t n_expert)
{
    if (e < 0 || e >= n_expert)
        return NULL;
    if (t.slots)
        return (const uint8_t *)t.slots[e];
    return t.base + (size_t)e * t.expert_bytes;
}

static mpc_expert_t mpc_expert_of(const mp_cuda_expert_tensor &t)
{
    mpc_expert_t r = {(const uint8_t *)t.d_base, t.expert_bytes, t.d_slots, t.row_bytes};
    return r;
}

template <int T>
__global__ void __launch_bounds__(MOE_WARPS * MPC_WARP)
gate_up_kernel(mpc_expert_t gate, mpc_expert_t up, int64_t n_expert, int64_t n_units,
               const uint8_t *xq, size_t xq_row_bytes, const int32_t *ids, int64_t top_k,
               int64_t n_ff, float *h)
{
    const int lane = threadIdx.x % MPC_WARP;
    const int64_t r = blockIdx.y; // route = row * top_k + k
    const int64_t j = (int64_t)blockIdx.x * MOE_WARPS + threadIdx.x / MPC_WARP;
    if (j >= n_ff)
        return;
    const int32_t e = ids[r];
    const uint8_t *gw = mpc_expert_ptr(gate, e, n_expert), *uw = mpc_expert_ptr(up, e, n_expert);
    if (!gw || !uw) {
        if (lane == 0)
            h[r * n_ff + j] = 0.0f;
        return;
    }
    const uint8_t *x = xq + (r / top_k) * xq_row_bytes;
    const float g = mpc_row_dot<T, false>(gw + j * gate.row_bytes, x, n_units, lane);
    const float u = mpc_row_dot<T, false>(uw + j * up.row_bytes, x, n_units, lane);
    if (lane == 0)
        h[r * n_ff + j] = g / (1.0f + expf(-g)) * u;
}

template <int T>
__global__ void __launch_bounds__(MOE_WARPS * MPC_WARP)
down_combine_kernel(mpc_expert_t down, int64_t n_expert, int64_t n_units, const uint8_t *hq,
                    size_t hq_row_bytes, const int32_t *ids, const float *weights, int64_t top_k,
                    int64_t n_embd, float *out, int accumulate)
{
    const int lane = threadIdx.x % MPC_WARP;
    const int64_t row = blockIdx.y;
    const int64_t d = (int64_t)blockIdx.x * MOE_WARPS + threadIdx.x / MPC_WARP;
    if (d >= n_embd)
        return;
    float acc = 0.0f;
    for (int64_t k = 0; k < top_k; k++) {
        const int64_t r = row * top_k + k;
        const uint8_t *dw = mpc_expert_ptr(down, ids[r], n_expert);
        if (!dw)
            continue;
        const float v = mpc_row_dot<T, false>(dw + d * down.row_bytes, hq + r * hq_row_bytes,
                                              n_units, lane);
        acc += weights[r] * v;
    }
    if (lane == 0)
        out[row * n_embd + d] = accumulate ? out[row * n_embd + d] + acc : acc;
}

static size_t align256(size_t b)
{
    return (b + 255) & ~(size_t)255;
}

extern "C" size_t mp_cuda_moe_scratch_bytes(int gate_type, int down_type, int64_t n_embd,
                                            int64_t n_ff, int64_t n_rows, int64_t top_k)
{
    const int xv = mp_cuda_vec_dot_type(gate_type), hv = mp_cuda_vec_dot_type(down_type);
    if (xv < 0 || hv < 0 || n_rows < 1 || top_k < 1)
        return 0;
    const size_t routes = (size_t)(n_rows * top_k);
    return align256((size_t)n_rows * mpc_row_bytes(xv, n_embd)) +
           align256(routes * (size_t)n_ff * sizeof(float)) +
           align256(routes * mpc_row_bytes(hv, n_ff));
}

template <int T>
static void launch_gate_up(const mp_cuda_moe_args *a, int64_t n_units, const uint8_t *xq,
                           size_t xq_rb, float *h, cudaStream_t st)
{
    const dim3 grid((unsigned)((a->n_ff + MOE_WARPS - 1) / MOE_WARPS), (unsigned)(a->n_rows * a->top_k));
    gate_up_kernel<T><<<grid, MOE_WARPS * MPC_WARP, 0, st>>>(
        mpc_expert_of(a->gate), mpc_expert_of(a->up), a->n_expert, n_units, xq, xq_rb, a->d_ids,
        a->top_k, a->n_ff, h);
}

template <int T>
static void launch_down(const mp_cuda_moe_args *a, int64_t n_units, const uint8_t *hq,
                        size_t hq_rb, cudaStream_t st)
{
    const dim3 grid((unsigned)((a->n_embd + MOE_WARPS - 1) / MOE_WARPS), (unsigned)a->n_rows);
    down_combine_kernel<T><<<grid, MOE_WARPS * MPC_WARP, 0, st>>>(
        mpc_expert_of(a->down), a->n_expert, n_units, hq, hq_rb, a->d_ids, a->d_weights, a->top_k,
        a->n_embd, a->d_out, a->accumulate);
}

#define MOE_TYPE_SWITCH(type, CALL)               \
    switch (type) {                               \
    case MP_TYPE_F32: CALL(MP_TYPE_F32); break;   \
    case MP_TYPE_F16: CALL(MP_TYPE_F16); break;   \
    case MP_TYPE_BF16: CALL(MP_TYPE_BF16); break; \
    case MP_TYPE_Q4_0: CALL(MP_TYPE_Q4_0); break; \
    case MP_TYPE_Q8_0: CALL(MP_TYPE_Q8_0); break; \
    case MP_TYPE_Q4_K: CALL(MP_TYPE_Q4_K); break; \
    case MP_TYPE_Q6_K: CALL(MP_TYPE_Q6_K); break; \
    default: return MP_CUDA_EINVAL;               \
    }

static bool expert_tensor_ok(const mp_cuda_expert_tensor &t, int64_t n_in, int64_t n_out)
{
    const size_t rb = mpc_row_bytes(t.type, n_in);
    const size_t wa = mpc_weight_align(t.type, false);
    if (rb == 0 || t.row_bytes < rb || t.row_bytes % wa)
        return false;
    if (t.d_slots)
        return true;
    return t.d_base && (uintptr_t)t.d_base % wa == 0 && t.expert_bytes % wa == 0 &&
           t.expert_bytes >= (size_t)n_out * t.row_bytes;
}

extern "C" int mp_cuda_moe_experts(const mp_cuda_moe_args *a, void *stream)
{
    if (!a || a->n_rows < 0 || a->top_k < 1 || a->n_expert < 1 || a->n_embd < 1 || a->n_ff < 1 ||
        a->gate.type != a->up.type || !expert_tensor_ok(a->gate, a->n_embd, a->n_ff) ||
        !expert_tensor_ok(a->up, a->n_embd, a->n_ff) ||
        !expert_tensor_ok(a->down, a->n_ff, a->n_embd) || !a->d_x || !a->d_ids ||
        !a->d_weights || !a->d_out)
        return MP_CUDA_EINVAL;
    if (a->n_rows == 0)
        return 0;
    const int xv = mp_cuda_vec_dot_type(a->gate.type), hv = mp_cuda_vec_dot_type(a->down.type);
    const size_t xq_rb = mpc_row_bytes(xv, a->n_embd), hq_rb = mpc_row_bytes(hv, a->n_ff);
    const size_t need = mp_cuda_moe_scratch_bytes(a->gate.type, a->down.type, a->n_embd, a->n_ff,
                                                  a->n_rows, a->top_k);
    if (xq_rb == 0 || hq_rb == 0 || !a->d_scratch || a->scratch_bytes < need ||
        (uintptr_t)a->d_scratch % 256)
        return a->scratch_bytes < need ? MP_CUDA_ENOMEM : MP_CUDA_EINVAL;
    const int64_t routes = a->n_rows * a->top_k;
    uint8_t *xq = (uint8_t *)a->d_scratch;
    float *h = (float *)(xq + align256((size_t)a->n_rows * xq_rb));
    uint8_t *hq = (uint8_t *)h + align256((size_t)routes * (size_t)a->n_ff * sizeof(float));
    cudaStream_t st = (cudaStream_t)stream;

    int rc = mp_cuda_quantize_act(xv, a->d_x, a->n_embd, a->n_rows, a->n_embd, xq, stream);
    if (rc)
        return rc;
    {
        const int64_t n_units = a->n_embd / (a->gate.type == MP_TYPE_F32 || a->gate.type == MP_TYPE_F16 ||
                                             a->gate.type == MP_TYPE_BF16 ? 1 : 32);
#define MPC_CALL(T) launch_gate_up<T>(a, n_units, xq, xq_rb, h, st)
        MOE_TYPE_SWITCH(a->gate.type, MPC_CALL)
#undef MPC_CALL
        if (cudaGetLastError() != cudaSuccess)
            return MP_CUDA_ELAUNCH;
    }
    rc = mp_cuda_quantize_act(hv, h, a->n_ff, routes, a->n_ff, hq, stream);
    if (rc)
        return rc;
    {
        const int64_t n_units = a->n_ff / (a->down.type == MP_TYPE_F32 || a->down.type == MP_TYPE_F16 ||
                                           a->down.type == MP_TYPE_BF16 ? 1 : 32);
#define MPC_CALL(T) launch_down<T>(a, n_units, hq, hq_rb, st)
        MOE_TYPE_SWITCH(a->down.type, MPC_CALL)
#undef MPC_CALL
    }
    return mpc_launch_status();
}

// ---- router: one warp per row ----

#define ROUTER_MAX_EXPERT 1024

__global__ void router_kernel(const float *logits, int64_t n_expert, int64_t k, int renorm,
                              int32_t *ids, float *weights, float *probs)
{
    __shared__ float p[ROUTER_MAX_EXPERT];
    __shared__ unsigned char taken[ROUTER_MAX_EXPERT];
    const int lane = threadIdx.x;
    const int64_t row = blockIdx.x;
    const float *l = logits + row * n_expert;
    float mx = -INFINITY;
    for (int64_t i = lane; i < n_expert; i += MPC_WARP) {
        p[i] = l[i];
        taken[i] = 0;
        mx = fmaxf(mx, p[i]);
    }
    mx = mpc_warp_max(mx);
    float sum = 0.0f;
    for (int64_t i = lane; i < n_expert; i += MPC_WARP) {
        p[i] = expf(p[i] - mx);
        sum += p[i];
    }
    const float inv = __frcp_rn(mpc_warp_sum(sum));
    for (int64_t i = lane; i < n_expert; i += MPC_WARP) {
        p[i] = p[i] * inv;
        if (probs)
            probs[row * n_expert + i] = p[i];
    }
    __syncwarp();
    // top-k: k rounds of a warp argmax, larger value first, ties to the lower id (as mp_topk)
    float wsum = 0.0f;
    for (int64_t kk = 0; kk < k; kk++) {
        float bv = -INFINITY;
        int bi = 0x7fffffff;
        for (int64_t i = lane; i < n_expert; i += MPC_WARP)
            if (!taken[i] && (p[i] > bv || (p[i] == bv && (int)i < bi))) {
                bv = p[i];
                bi = (int)i;
            }
        for (int off = 16; off > 0; off >>= 1) {
            const float ov = __shfl_xor_sync(0xffffffffu, bv, off);
            const int oi = __shfl_xor_sync(0xffffffffu, bi, off);
            if (ov > bv || (ov == bv && oi < bi)) {
                bv = ov;
                bi = oi;
            }
        }
        if (lane == 0) {
            if (bi == 0x7fffffff) // only NaNs left: take the lowest free id, never index past p
                for (bi = 0; taken[bi]; bi++)
                    ;
            taken[bi] = 1;
            ids[row * k + kk] = bi;
            weights[row * k + kk] = bv;
        }
        wsum += bv; // in slot order, as the CPU sums them
        __syncwarp();
    }
    if (renorm && lane == 0)
        for (int64_t kk = 0; kk < k; kk++)
            weights[row * k + kk] = __fdiv_rn(weights[row * k + kk], wsum);
}

extern "C" int mp_cuda_router(const float *d_logits, int64_t n_rows, int64_t n_expert, int64_t k,
                              int renorm, int32_t *d_ids, float *d_weights, float *d_probs,
                              void *stream)
{
    if (n_rows < 0 || n_expert < 1 || n_expert > ROUTER_MAX_EXPERT || k < 1 || k > 32 ||
        k > n_expert || !d_logits || !d_ids || !d_weights)
        return MP_CUDA_EINVAL;
    if (n_rows == 0)
        return 0;
    router_kernel<<<(unsigned)n_rows, MPC_WARP, 0, (cudaStream_t)stream>>>(
        d_logits, n_expert, k, renorm, d_ids, d_weights, d_probs);
    return mpc_launch_status();
}
