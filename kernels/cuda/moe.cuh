// kernels/cuda/moe.cuh — what moe.cu (router, per-route and grouped experts, combine) and
// moe_mma.cu (the tensor-core path of the grouped experts) share: an expert tensor on the device
// and the tensor-core launchers.
#ifndef MP_KERNELS_CUDA_MOE_CUH
#define MP_KERNELS_CUDA_MOE_CUH

#include "kernels/cuda/common.cuh"
#include "kernels/ops.h" // MP_OAI_SWIGLU_ALPHA, MP_OAI_SWIGLU_LIMIT

// gridDim.y is at most 65535: the expert kernels (moe.cu, moe_dec.cu) run long steps in slices of
// routes / rows.
#define MOE_MAX_GRID_Y 65535

struct mpc_expert_t {
    const uint8_t *base;
    size_t expert_bytes;
    const void *const *slots;
    size_t row_bytes;
    // far routes (mp_cuda_moe_args.d_far_of_cold); far_of_cold NULL: none
    const uint8_t *far_of_cold;
    const uint8_t *far_stage;     // this tensor's part of far route (row, rank)'s stage slot:
    size_t far_stride;            //   far_stage + (row · far_max + rank) · far_stride
    int far_max;
};

// The experts' activation (mp_cuda_moe_args.act, d_gate_b, d_up_b): h = act(gate + gate bias, up +
// up bias) at FFN row j of expert e, as the CPU computes it (mp_swiglu, mp_swiglu_oai; the bias
// added to the dot first): SwiGLU, or gpt-oss's clamped one.
struct mpc_act_t {
    const float *gate_b, *up_b; // (n_expert, n_ff) each, or NULL
    int kind;                   // MP_CUDA_ACT_*
};

__device__ __forceinline__ float mpc_expert_act(const mpc_act_t &a, int64_t e, int64_t n_ff, int64_t j, float g,
                                                float u)
{
    if (a.gate_b) {
        g = __fadd_rn(g, a.gate_b[e * n_ff + j]);
        u = __fadd_rn(u, a.up_b[e * n_ff + j]);
    }
    if (a.kind == MP_CUDA_ACT_SWIGLU_OAI) {
        g = g < MP_OAI_SWIGLU_LIMIT ? g : MP_OAI_SWIGLU_LIMIT;
        u = u < -MP_OAI_SWIGLU_LIMIT ? -MP_OAI_SWIGLU_LIMIT : u > MP_OAI_SWIGLU_LIMIT ? MP_OAI_SWIGLU_LIMIT : u;
        return g / (1.0f + expf(-MP_OAI_SWIGLU_ALPHA * g)) * (u + 1.0f);
    }
    return g / (1.0f + expf(-g)) * u;
}

// Expert e's weights: its pool slot (NULL: not resident), or base + e * expert_bytes; NULL for an
// id outside [0, n_expert).
__device__ __forceinline__ const uint8_t *mpc_expert_ptr(const mpc_expert_t &t, int32_t e,
                                                         int64_t n_expert)
{
    if (e < 0 || e >= n_expert)
        return NULL;
    if (t.slots)
        return (const uint8_t *)t.slots[e];
    return t.base + (size_t)e * t.expert_bytes;
}

// Far routes. Bit i of the result: route i of a row (ids_row[0 .. top_k)) goes to an expert
// without a slot (a cold route). t.slots must not be NULL.
__device__ __forceinline__ uint32_t mpc_cold_mask(const mpc_expert_t &t, const int32_t *ids_row, int64_t top_k,
                                                  int64_t n_expert)
{
    uint32_t m = 0;
    for (int i = 0; i < (int)top_k; i++) {
        const int32_t e = ids_row[i];
        if (e >= 0 && e < n_expert && !t.slots[e])
            m |= 1u << i;
    }
    return m;
}

// Far routes of a row with cold routes `cold`: how many run far (the table's count, at most
// far_max).
__device__ __forceinline__ int mpc_far_count(const mpc_expert_t &t, uint32_t cold)
{
    const int z = (int)t.far_of_cold[__popc(cold)];
    return z < t.far_max ? z : t.far_max;
}

// Cold route k of row `row`: its gathered weights in the far stage when it is among the row's
// first mpc_far_count cold routes in slot order, else NULL (skipped).
__device__ __forceinline__ const uint8_t *mpc_far_ptr(const mpc_expert_t &t, int64_t row, uint32_t cold, int k)
{
    const int rank = __popc(cold & ((1u << k) - 1u));
    return rank < mpc_far_count(t, cold) ? t.far_stage + ((size_t)row * (size_t)t.far_max + (size_t)rank) * t.far_stride
                                         : NULL;
}

// Route r's (row r / top_k, slot r % top_k) weights: the expert's slot, else its far stage slot
// when the route runs far, else NULL (skipped).
__device__ __forceinline__ const uint8_t *mpc_route_ptr(const mpc_expert_t &t, const int32_t *ids, int64_t r,
                                                        int64_t top_k, int64_t n_expert)
{
    const int32_t e = ids[r];
    const uint8_t *p = mpc_expert_ptr(t, e, n_expert);
    if (p || !t.far_of_cold || e < 0 || e >= n_expert)
        return p;
    const int64_t row = r / top_k;
    return mpc_far_ptr(t, row, mpc_cold_mask(t, ids + row * top_k, top_k, n_expert), (int)(r - row * top_k));
}

static inline mpc_expert_t mpc_expert_of(const mp_cuda_expert_tensor &t)
{
    mpc_expert_t r = {(const uint8_t *)t.d_base, t.expert_bytes, t.d_slots, t.row_bytes, NULL, NULL, 0, 0};
    return r;
}

// ---- tensor-core grouped experts (moe_mma.cu, moe_mma2.cu) ----
//
// Groups of at most MPC_MMA_GROUP routes of one expert (int4: expert, first index into perm,
// count, unused; n_groups on the device). Weight types Q4_K, Q6_K and the blocks of 32 (Q4_0, Q4_1,
// Q5_0, Q5_1, Q8_0, IQ4_NL, MXFP4) with their partner activations (Q8_K / Q8_0, as the CPU dots
// them); the integer products of each scale group run on the tensor cores (int8 in, int32 sums:
// exact), the scales are applied in F32.
#define MPC_MMA_GROUP 32

// Whether the tensor-core path serves experts of these types on the current device (sm_80+
// code in this build, and a supported type pair).
bool mpc_moe_mma_ok(int gate_type, int down_type);
// Which tensor-core kernels a grouped step of a's experts takes (xq, hq: its activation rows for
// gate/up and for down, xq_rb, hq_rb bytes apart): PIPELINED when both launches fit the pipelined
// kernel (moe_mma2.cu), FIRST when the first kernel takes one of them (the blocks of 32 the
// pipelined kernel cannot stage: K not a multiple of 256, rows not 16-byte aligned, the types it
// has no form for), NONE otherwise (the CUDA-core grouped path: a type without an int8
// form, a build or device without sm_80 code, a K-quant launch the pipelined kernel cannot stage).
enum { MPC_MMA_NONE = 0, MPC_MMA_FIRST = 1, MPC_MMA_PIPELINED = 2 };
int mpc_moe_mma_plan(const mp_cuda_moe_args *a, const uint8_t *xq, size_t xq_rb, const uint8_t *hq, size_t hq_rb);

// h[route, j] = fn(gate_e · x_row, up_e · x_row) (mpc_expert_act: biases, SwiGLU or gpt-oss's) for
// every route of every group (x rows xq_row_bytes apart in the gate's partner format; row = route /
// top_k); groups of experts without weights are skipped.
int mpc_moe_mma_gate_up(int type, mpc_expert_t gate, mpc_expert_t up, int64_t n_expert, int64_t n_embd,
                        int64_t n_ff, const uint8_t *xq, size_t xq_row_bytes, int64_t top_k,
                        const int32_t *perm, const int4 *groups, const int32_t *n_groups, int64_t max_groups,
                        mpc_act_t fn, float *h, cudaStream_t st);

// y[route, d] = down_e · h_route (h rows hq_row_bytes apart, per route, in the down's partner
// format) for every route of every group.
int mpc_moe_mma_down(int type, mpc_expert_t down, int64_t n_expert, int64_t n_ff, int64_t n_embd,
                     const uint8_t *hq, size_t hq_row_bytes, const int32_t *perm, const int4 *groups,
                     const int32_t *n_groups, int64_t max_groups, float *y, cudaStream_t st);

// ---- decode experts for the K-quant mix (moe_dec.cu) ----
//
// The per-route path takes them wherever these types and alignments hold (moe.cu).
// h[route, j] = silu(gate_e · x_row) * (up_e · x_row) for Q4_K gate/up with 16-byte aligned rows
// (x in Q8_K, rows xq_rb apart; row = route / top_k).
int mpc_moe_dec_gate_up_q4k(mpc_expert_t gate, mpc_expert_t up, int64_t n_expert, int64_t n_embd, int64_t n_ff,
                            const uint8_t *xq, size_t xq_rb, const int32_t *ids, int64_t top_k, int64_t routes,
                            float *h, cudaStream_t st);
// Whether a down tensor of this type (vec: 16-byte aligned rows, moe.cu's expert_vec) and n_ff runs
// mpc_moe_dec_down: Q6_K, Q5_K or Q4_K (the latter two vec), unless mp_cuda_moe_set_dec_down(0).
bool mpc_moe_dec_down_ok(int type, bool vec, int64_t n_ff);
// out[row] (+)= Σ_k weights[row, k] · (down_e · h_route) for a Q6_K, Q5_K or Q4_K down (h in Q8_K,
// per route, hq_rb apart; top_k <= 32), in slot order, one rounding per element.
int mpc_moe_dec_down(int type, mpc_expert_t down, int64_t n_expert, int64_t n_ff, int64_t n_embd, const uint8_t *hq,
                     size_t hq_rb, const int32_t *ids, const float *weights, int64_t top_k, int64_t n_rows,
                     float *out, int accumulate, cudaStream_t st);

#endif
