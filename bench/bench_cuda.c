/* bench/bench_cuda.c — GEMV and MoE-expert throughput on the GPU (not a test; run by hand on the
 * GPU machine: `build/bench/bench_cuda [reps]`).
 *
 * For each weight type it times mp_cuda_gemv on
 *   - 6144 × 2048 (the gate projections of 8 routed experts: 768 · 8 rows of hidden 2048),
 *   - 151936 × 2048 (Qwen3's output head),
 * with n_x = 1 (decode) and n_x = 4, 8 (the batched variant), and mp_cuda_moe_experts on a
 * Qwen3-30B-A3B layer (128 experts, top-8, Q4_K gate/up + Q6_K down, all-Q8_0, all-IQ4_XS and
 * Q5_0 gate/up + Q8_0 down) and a gpt-oss-20b layer in MXFP4 (replayed as a
 * CUDA graph like decode runs it; prefill calls of 64 and 512 rows on the grouped and the
 * tensor-core paths side by side), and prints
 * the weight bytes streamed per call divided by the median time (CUDA events) as GB/s — the
 * number to hold against the H200's ~4.8 TB/s HBM bandwidth.
 * Small problems would sit in the 50 MB L2 after the first call and time the cache, not HBM: the
 * weights are replicated over >= 512 MB of copies and each repetition reads the next copy.
 * Weights are random bytes with finite block scales (speed does not depend on the values). */
#include <cuda_runtime_api.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/cuda/cuda_ops.h"
#include "kernels/quant.h"

static uint64_t g_state = 0x243F6A8885A308D3ull;

static uint64_t next_u64(void)
{
    g_state ^= g_state << 13;
    g_state ^= g_state >> 7;
    g_state ^= g_state << 17;
    return g_state;
}

/* A value in [-1, 1] on a grid of 1/1000 (activations, queries, cache entries). */
static float next_unit(void)
{
    return (float)((int64_t)(next_u64() % 2001) - 1000) / 1000.0f;
}

static void fill_weights(int type, uint8_t *w, size_t bytes, int64_t n_in)
{
    for (size_t i = 0; i < bytes; i += 8) {
        const uint64_t v = next_u64();
        memcpy(w + i, &v, bytes - i < 8 ? bytes - i : 8);
    }
    const mp_f16 small = mp_f32_to_f16(0.001f);
    if (type == MP_TYPE_F16 || type == MP_TYPE_BF16 || type == MP_TYPE_F32) {
        /* finite values: clear the exponent's top bit of every element */
        const size_t es = type == MP_TYPE_F32 ? 4 : 2;
        for (size_t i = es - 1; i < bytes; i += es)
            w[i] &= 0x3F;
        return;
    }
    const size_t bb = mp_type_block_bytes(type);
    (void)n_in;
    for (size_t off = 0; off + bb <= bytes; off += bb) {
        if (type == MP_TYPE_Q6_K)
            memcpy(w + off + 208, &small, 2);
        else
            memcpy(w + off, &small, 2);
        if (type == MP_TYPE_Q4_K || type == MP_TYPE_Q4_1 || type == MP_TYPE_Q5_1) /* dmin / m */
            memcpy(w + off + 2, &small, 2);
    }
}

static int cmp_float(const void *a, const void *b)
{
    const float x = *(const float *)a, y = *(const float *)b;
    return x < y ? -1 : x > y;
}

#define CK(call)                                                                               \
    do {                                                                                       \
        int rc_ = (int)(call);                                                                 \
        if (rc_) {                                                                             \
            fprintf(stderr, "bench_cuda: %s failed (%d)\n", #call, rc_);                       \
            exit(1);                                                                           \
        }                                                                                      \
    } while (0)

/* Copies of a weight matrix filling >= 512 MB, so that consecutive calls miss the L2. */
typedef struct copies {
    uint8_t *d;
    size_t bytes; /* one copy */
    int n;
} copies;

static copies make_copies(int type, size_t bytes, int64_t n_in)
{
    copies c = {NULL, bytes, (int)((512ull << 20) / bytes) + 1};
    if (c.n < 2)
        c.n = 2;
    uint8_t *h = malloc(bytes);
    if (!h) {
        fprintf(stderr, "bench_cuda: out of host memory (%zu bytes)\n", bytes);
        exit(1);
    }
    fill_weights(type, h, bytes, n_in);
    CK(cudaMalloc((void **)&c.d, bytes * (size_t)c.n));
    for (int i = 0; i < c.n; i++)
        CK(cudaMemcpy(c.d + (size_t)i * bytes, h, bytes, cudaMemcpyHostToDevice));
    free(h);
    return c;
}

static void bench_gemv(int type, int64_t n_out, int64_t n_in, int reps)
{
    const size_t rb = mp_cuda_row_bytes(type, n_in), bytes = rb * (size_t)n_out;
    const int vdt = mp_cuda_vec_dot_type(type);
    const size_t xb = mp_cuda_row_bytes(vdt, n_in);
    copies w = make_copies(type, bytes, n_in);
    float *d_xf, *d_y;
    void *d_x;
    CK(cudaMalloc((void **)&d_xf, sizeof(float) * 8 * (size_t)n_in));
    CK(cudaMalloc(&d_x, xb * 8));
    CK(cudaMalloc((void **)&d_y, sizeof(float) * 8 * (size_t)n_out));
    float *hx = malloc(sizeof(float) * 8 * (size_t)n_in);
    for (int64_t i = 0; i < 8 * n_in; i++)
        hx[i] = next_unit();
    CK(cudaMemcpy(d_xf, hx, sizeof(float) * 8 * (size_t)n_in, cudaMemcpyHostToDevice));
    CK(mp_cuda_quantize_act(vdt, d_xf, n_in, 8, n_in, d_x, NULL));
    cudaEvent_t e0, e1;
    CK(cudaEventCreate(&e0));
    CK(cudaEventCreate(&e1));
    float *ms = malloc(sizeof(float) * (size_t)reps);
    const int nxs[] = {1, 4, 8};
    for (int k = 0; k < 3; k++) {
        const int nx = nxs[k];
        for (int i = 0; i < w.n; i++) /* warm-up: every copy once */
            CK(mp_cuda_gemv(type, w.d + (size_t)i * bytes, rb, n_out, n_in, d_x, xb, nx, d_y, n_out, NULL));
        for (int r = 0; r < reps; r++) {
            const uint8_t *wc = w.d + (size_t)(r % w.n) * bytes;
            CK(cudaEventRecord(e0, NULL));
            CK(mp_cuda_gemv(type, wc, rb, n_out, n_in, d_x, xb, nx, d_y, n_out, NULL));
            CK(cudaEventRecord(e1, NULL));
            CK(cudaEventSynchronize(e1));
            CK(cudaEventElapsedTime(&ms[r], e0, e1));
        }
        qsort(ms, (size_t)reps, sizeof(float), cmp_float);
        const double med_ms = ms[reps / 2];
        printf("| gemv | %-5s | %6ld x %4ld | n_x %d | %8.1f us | %7.1f GB/s | min %8.1f us |\n",
               mp_type_name(type), (long)n_out, (long)n_in, nx, med_ms * 1e3,
               (double)bytes / (med_ms * 1e-3) / 1e9, ms[0] * 1e3);
    }
    cudaFree(w.d); cudaFree(d_xf); cudaFree(d_x); cudaFree(d_y);
    cudaEventDestroy(e0); cudaEventDestroy(e1);
    free(hx); free(ms);
}

/* The expert call a as a CUDA graph on stream st, between the timing events e0 and e1 (external
 * record nodes): decode's graphs run it so. */
static cudaGraphExec_t moe_graph(const mp_cuda_moe_args *a, cudaStream_t st, cudaEvent_t e0, cudaEvent_t e1)
{
    cudaGraph_t graph;
    cudaGraphExec_t exec;
    CK(cudaStreamBeginCapture(st, cudaStreamCaptureModeThreadLocal));
    CK(cudaEventRecordWithFlags(e0, st, cudaEventRecordExternal));
    CK(mp_cuda_moe_experts(a, st));
    CK(cudaEventRecordWithFlags(e1, st, cudaEventRecordExternal));
    CK(cudaStreamEndCapture(st, &graph));
    CK(cudaGraphInstantiate(&exec, graph, 0));
    CK(cudaGraphDestroy(graph));
    return exec;
}

/* An expert shape of the decode sweep: the presets' (mkmodel) and the accuracy matrix's. */
typedef struct moe_shape {
    const char *name;
    int64_t D, F, E, K; /* n_embd, n_ff, n_expert, top_k */
} moe_shape;

static const moe_shape shape_30b = {"qwen3-30b-a3b", 2048, 768, 128, 8};
/* gpt-oss-20b's experts (hidden 2880 = 90 blocks of 32, no super-block of 256; MXFP4) */
static const moe_shape shape_gpt_oss = {"gpt-oss-20b", 2880, 2880, 32, 4};
static const moe_shape dec_shapes[] = {
    {"qwen3-30b-a3b", 2048, 768, 128, 8},
    {"olmoe", 2048, 1024, 64, 8},
    {"qwen3-256 (accuracy matrix)", 2048, 512, 256, 8},
    {"mixtral", 4096, 14336, 8, 2},
    {"top-1 of 16", 2048, 2048, 16, 1},
};

/* A setting of the decode down kernel, and its name in the output. */
typedef struct dec_variant {
    int lanes;        /* mp_cuda_moe_set_dec_down */
    const char *name;
} dec_variant;

/* One decode MoE call (1 row, top_k of n_expert), captured as a CUDA graph per weight copy with
 * its timing events (external record nodes) and replayed, as the runtime's decode graphs run it:
 * the GPU time without the host's launch gaps; for each of the n_vars settings of the down kernel,
 * alternated in `rounds` rounds on the same weights. */

static void bench_moe(const moe_shape *sh, int gate_type, int down_type, const dec_variant *vars, int n_vars,
                      int rounds, int reps)
{
    const int64_t D = sh->D, F = sh->F, E = sh->E, K = sh->K;
    const size_t grb = mp_cuda_row_bytes(gate_type, D), drb = mp_cuda_row_bytes(down_type, F);
    const size_t g_exp = grb * (size_t)F, d_exp = drb * (size_t)D;
    /* one layer's three expert tensors, all in device memory (~340 MB for the 30B's Q4_K/Q6_K) */
    copies g = make_copies(gate_type, g_exp * (size_t)E, D), u = make_copies(gate_type, g_exp * (size_t)E, D);
    copies d = make_copies(down_type, d_exp * (size_t)E, F);
    float *d_x, *d_out, *d_w;
    int32_t *d_ids;
    CK(cudaMalloc((void **)&d_x, sizeof(float) * (size_t)D));
    CK(cudaMalloc((void **)&d_out, sizeof(float) * (size_t)D));
    CK(cudaMalloc((void **)&d_w, sizeof(float) * (size_t)K));
    CK(cudaMalloc((void **)&d_ids, sizeof(int32_t) * (size_t)K));
    float *hx = malloc(sizeof(float) * (size_t)D), *hw = malloc(sizeof(float) * (size_t)K);
    int32_t *ids = malloc(sizeof(int32_t) * (size_t)K);
    for (int64_t i = 0; i < D; i++)
        hx[i] = next_unit();
    for (int64_t k = 0; k < K; k++)
        hw[k] = 1.0f / (float)K;
    CK(cudaMemcpy(d_x, hx, sizeof(float) * (size_t)D, cudaMemcpyHostToDevice));
    CK(cudaMemcpy(d_w, hw, sizeof(float) * (size_t)K, cudaMemcpyHostToDevice));
    const size_t sb = mp_cuda_moe_scratch_bytes(gate_type, down_type, D, F, 1, K);
    void *d_s;
    CK(cudaMalloc(&d_s, sb));
    cudaStream_t st;
    CK(cudaStreamCreateWithFlags(&st, cudaStreamNonBlocking));
    cudaEvent_t e0, e1;
    CK(cudaEventCreate(&e0));
    CK(cudaEventCreate(&e1));
    const int n_graphs = g.n < u.n ? (g.n < d.n ? g.n : d.n) : (u.n < d.n ? u.n : d.n);
    cudaGraphExec_t *exec = calloc((size_t)n_graphs, sizeof *exec);
    float *ms = malloc(sizeof(float) * (size_t)reps);
    const double bytes = (double)K * (2.0 * (double)g_exp + (double)d_exp);
    for (int round = 0; round < rounds; round++)
        for (int v = 0; v < n_vars; v++) {
            mp_cuda_moe_set_dec_down(vars[v].lanes);
            for (int c = 0; c < n_graphs; c++) {
                mp_cuda_moe_args a = {
                    .gate = {gate_type, g.d + (size_t)c * g.bytes, g_exp, NULL, grb},
                    .up = {gate_type, u.d + (size_t)c * u.bytes, g_exp, NULL, grb},
                    .down = {down_type, d.d + (size_t)c * d.bytes, d_exp, NULL, drb},
                    .n_embd = D, .n_ff = F, .n_expert = E, .top_k = K, .n_rows = 1,
                    .d_x = d_x, .d_ids = d_ids, .d_weights = d_w, .d_out = d_out,
                    .accumulate = 0, .d_scratch = d_s, .scratch_bytes = sb,
                };
                exec[c] = moe_graph(&a, st, e0, e1);
            }
            for (int r = -3; r < reps; r++) {
                /* K distinct experts, the next ones each step: the L2 holds no step's weights from the last */
                for (int64_t k = 0; k < K; k++)
                    ids[k] = (int32_t)((((int64_t)r + 3) * K + k) % E);
                CK(cudaMemcpyAsync(d_ids, ids, sizeof(int32_t) * (size_t)K, cudaMemcpyHostToDevice, st));
                CK(cudaGraphLaunch(exec[(r + 3) % n_graphs], st));
                CK(cudaStreamSynchronize(st));
                if (r >= 0)
                    CK(cudaEventElapsedTime(&ms[r], e0, e1));
            }
            for (int c = 0; c < n_graphs; c++)
                CK(cudaGraphExecDestroy(exec[c]));
            qsort(ms, (size_t)reps, sizeof(float), cmp_float);
            printf("| moe (graph, %s) | %s/%s | %s: %ld experts top-%ld, %ld x %ld | 1 | %8.1f us | %7.1f GB/s | min %8.1f us |\n",
                   vars[v].name, mp_type_name(gate_type), mp_type_name(down_type), sh->name, (long)E, (long)K,
                   (long)D, (long)F, ms[reps / 2] * 1e3, bytes / (ms[reps / 2] * 1e-3) / 1e9, ms[0] * 1e3);
            fflush(stdout);
        }
    mp_cuda_moe_set_dec_down(-1);
    free(exec);
    cudaFree(g.d); cudaFree(u.d); cudaFree(d.d); cudaFree(d_x); cudaFree(d_out); cudaFree(d_w);
    cudaFree(d_ids); cudaFree(d_s);
    cudaEventDestroy(e0); cudaEventDestroy(e1);
    cudaStreamDestroy(st);
    free(ms); free(hx); free(hw); free(ids);
}

/* The decode sweep: every shape of dec_shapes with the expert types of the K-quant mixes
 * (llama.cpp's Q4_K_M gives the experts' down Q6_K or Q4_K by layer, Q5_K_M Q6_K or Q5_K) and
 * Q8_0, the down kernel's variants alternated in `rounds` rounds: the rule, 8 lanes, a warp per
 * dot, and moe.cu's unit kernels. */
static void bench_moe_sweep(int reps, int rounds)
{
    static const int pairs[][2] = {{MP_TYPE_Q4_K, MP_TYPE_Q6_K}, {MP_TYPE_Q4_K, MP_TYPE_Q4_K},
                                   {MP_TYPE_Q5_K, MP_TYPE_Q5_K}, {MP_TYPE_Q8_0, MP_TYPE_Q8_0}};
    static const dec_variant variants[] = {
        {-1, "down by rule"}, {8, "down 8 lanes"}, {32, "down warp"}, {0, "down unit"}};
    for (size_t sh = 0; sh < sizeof dec_shapes / sizeof *dec_shapes; sh++)
        for (size_t p = 0; p < sizeof pairs / sizeof *pairs; p++) /* Q8_0 down: the unit kernels whatever the setting */
            bench_moe(&dec_shapes[sh], pairs[p][0], pairs[p][1], variants, pairs[p][1] == MP_TYPE_Q8_0 ? 1 : 4,
                      rounds, reps);
}

/* One prefill MoE call of n_rows rows of shape sh (random distinct routes per row), enqueued and
 * timed by events: the grouped CUDA-core path (mma 0) against the tensor-core path (mma 1: the
 * pipelined kernel, moe_mma2.cu, for the K-quants and Q8_0 rows of whole super-blocks; the first,
 * moe_mma.cu, at gpt-oss's, whose gate/up biases and clamped SwiGLU come with it), side by side. TFLOP/s counts
 * 2 · routes · 3 · n_embd · n_ff. */
static void bench_moe_prefill(const moe_shape *sh, int gate_type, int down_type, int64_t n_rows, int mma, int reps)
{
    const int64_t D = sh->D, F = sh->F, E = sh->E, K = sh->K, routes = n_rows * K;
    const bool oss = sh == &shape_gpt_oss;
    const size_t grb = mp_cuda_row_bytes(gate_type, D), drb = mp_cuda_row_bytes(down_type, F);
    const size_t g_exp = grb * (size_t)F, d_exp = drb * (size_t)D;
    copies g = make_copies(gate_type, g_exp * (size_t)E, D), u = make_copies(gate_type, g_exp * (size_t)E, D);
    copies d = make_copies(down_type, d_exp * (size_t)E, F);
    float *hx = malloc(sizeof(float) * (size_t)(n_rows * D)), *hw = malloc(sizeof(float) * (size_t)routes);
    int32_t *ids = malloc(sizeof(int32_t) * (size_t)routes);
    for (int64_t i = 0; i < n_rows * D; i++)
        hx[i] = next_unit();
    for (int64_t r = 0; r < n_rows; r++)
        for (int64_t k = 0; k < K; k++) {
            int32_t e;
            int dup;
            do {
                e = (int32_t)(next_u64() % (uint64_t)E);
                dup = 0;
                for (int64_t j = 0; j < k; j++)
                    dup |= ids[r * K + j] == e;
            } while (dup);
            ids[r * K + k] = e;
            hw[r * K + k] = 0.125f;
        }
    float *d_x, *d_out, *d_w, *d_b = NULL;
    int32_t *d_ids;
    CK(cudaMalloc((void **)&d_x, sizeof(float) * (size_t)(n_rows * D)));
    CK(cudaMalloc((void **)&d_out, sizeof(float) * (size_t)(n_rows * D)));
    CK(cudaMalloc((void **)&d_w, sizeof(float) * (size_t)routes));
    CK(cudaMalloc((void **)&d_ids, sizeof(int32_t) * (size_t)routes));
    CK(cudaMemcpy(d_x, hx, sizeof(float) * (size_t)(n_rows * D), cudaMemcpyHostToDevice));
    CK(cudaMemcpy(d_w, hw, sizeof(float) * (size_t)routes, cudaMemcpyHostToDevice));
    CK(cudaMemcpy(d_ids, ids, sizeof(int32_t) * (size_t)routes, cudaMemcpyHostToDevice));
    if (oss) { /* the experts' gate/up biases (one buffer for both: their values do not matter here) */
        CK(cudaMalloc((void **)&d_b, sizeof(float) * (size_t)(E * F)));
        CK(cudaMemset(d_b, 0, sizeof(float) * (size_t)(E * F)));
    }
    const size_t sb = mp_cuda_moe_scratch_bytes(gate_type, down_type, D, F, n_rows, K);
    void *d_s;
    CK(cudaMalloc(&d_s, sb));
    cudaEvent_t e0, e1;
    CK(cudaEventCreate(&e0));
    CK(cudaEventCreate(&e1));
    mp_cuda_moe_set_mma_min_rows(mma ? 16 : 0);
    const int n_c = g.n < u.n ? (g.n < d.n ? g.n : d.n) : (u.n < d.n ? u.n : d.n);
    float *ms = malloc(sizeof(float) * (size_t)reps);
    for (int r = -3; r < reps; r++) {
        const int c = (r + 3) % n_c;
        mp_cuda_moe_args a = {
            .gate = {gate_type, g.d + (size_t)c * g.bytes, g_exp, NULL, grb},
            .up = {gate_type, u.d + (size_t)c * u.bytes, g_exp, NULL, grb},
            .down = {down_type, d.d + (size_t)c * d.bytes, d_exp, NULL, drb},
            .n_embd = D, .n_ff = F, .n_expert = E, .top_k = K, .n_rows = n_rows,
            .d_x = d_x, .d_ids = d_ids, .d_weights = d_w, .d_out = d_out,
            .accumulate = 0, .d_scratch = d_s, .scratch_bytes = sb,
            .act = oss ? MP_CUDA_ACT_SWIGLU_OAI : MP_CUDA_ACT_SWIGLU, .d_gate_b = d_b, .d_up_b = d_b,
        };
        CK(cudaEventRecord(e0, NULL));
        CK(mp_cuda_moe_experts(&a, NULL));
        CK(cudaEventRecord(e1, NULL));
        CK(cudaEventSynchronize(e1));
        if (r >= 0)
            CK(cudaEventElapsedTime(&ms[r], e0, e1));
    }
    mp_cuda_moe_set_mma_min_rows(-1);
    qsort(ms, (size_t)reps, sizeof(float), cmp_float);
    const double flop = 2.0 * (double)routes * 3.0 * (double)D * (double)F;
    printf("| moe prefill (%s) | %s/%s | %s, %ld experts top-%ld | %ld | %8.1f us | %7.1f TFLOP/s | min %8.1f us |\n",
           mma ? "tensor cores" : "grouped", mp_type_name(gate_type), mp_type_name(down_type), sh->name, (long)E,
           (long)K, (long)n_rows, ms[reps / 2] * 1e3, flop / (ms[reps / 2] * 1e-3) / 1e12, ms[0] * 1e3);
    cudaFree(g.d); cudaFree(u.d); cudaFree(d.d); cudaFree(d_x); cudaFree(d_out); cudaFree(d_w); cudaFree(d_b);
    cudaFree(d_ids); cudaFree(d_s);
    cudaEventDestroy(e0); cudaEventDestroy(e1);
    free(ms); free(hx); free(hw); free(ids);
}

/* Far routes (the decode call's gather from mapped host memory): one-row expert calls of a layer
 * whose first n_res experts are in device memory (the pool) and the rest in page-locked host
 * memory, as graphs: far routes off; on with no route cold (the gather's launch alone); one cold
 * route gathered whole; one split, the GPU taking its last quarter of FFN rows. Each with the
 * gather sized by the SMs (blocks 0) and with one block per 16 KB chunk, alternated rep by rep. */
typedef struct far_layer {
    int gate_type, down_type;
    int64_t D, F, E, K, n_res;
    size_t g_exp, d_exp, grb, drb;
    uint8_t *dev[3], *host[3];            /* the pool's experts; the cold ones (host, mapped) */
    const void **d_slots, **d_far;        /* (3, E) each, on the device */
} far_layer;

static far_layer far_layer_new(int gate_type, int down_type, int64_t D, int64_t F, int64_t E, int64_t K, int64_t n_res)
{
    far_layer l;
    memset(&l, 0, sizeof l);
    l.gate_type = gate_type, l.down_type = down_type;
    l.D = D, l.F = F, l.E = E, l.K = K, l.n_res = n_res;
    l.grb = mp_cuda_row_bytes(gate_type, D), l.drb = mp_cuda_row_bytes(down_type, F);
    l.g_exp = l.grb * (size_t)F, l.d_exp = l.drb * (size_t)D;
    const size_t bytes[3] = {l.g_exp, l.g_exp, l.d_exp};
    const int types[3] = {gate_type, gate_type, down_type};
    const void **slots = calloc((size_t)(3 * E), sizeof *slots), **far = calloc((size_t)(3 * E), sizeof *far);
    for (int t = 0; t < 3; t++) {
        uint8_t *h = malloc(bytes[t]);
        fill_weights(types[t], h, bytes[t], t < 2 ? D : F);
        CK(cudaMalloc((void **)&l.dev[t], bytes[t] * (size_t)n_res));
        CK(cudaHostAlloc((void **)&l.host[t], bytes[t] * (size_t)(E - n_res), cudaHostAllocMapped | cudaHostAllocPortable));
        for (int64_t e = 0; e < E; e++) {
            if (e < n_res) {
                CK(cudaMemcpy(l.dev[t] + (size_t)e * bytes[t], h, bytes[t], cudaMemcpyHostToDevice));
                slots[t * E + e] = l.dev[t] + (size_t)e * bytes[t];
            } else {
                uint8_t *p = l.host[t] + (size_t)(e - n_res) * bytes[t];
                memcpy(p, h, bytes[t]);
                void *dp;
                CK(cudaHostGetDevicePointer(&dp, p, 0));
                far[t * E + e] = dp;
            }
        }
        free(h);
    }
    CK(cudaMalloc((void **)&l.d_slots, sizeof(void *) * (size_t)(3 * E)));
    CK(cudaMalloc((void **)&l.d_far, sizeof(void *) * (size_t)(3 * E)));
    CK(cudaMemcpy(l.d_slots, slots, sizeof(void *) * (size_t)(3 * E), cudaMemcpyHostToDevice));
    CK(cudaMemcpy(l.d_far, far, sizeof(void *) * (size_t)(3 * E), cudaMemcpyHostToDevice));
    free(slots);
    free(far);
    return l;
}

static void far_layer_free(far_layer *l)
{
    for (int t = 0; t < 3; t++) {
        cudaFree(l->dev[t]);
        cudaFreeHost(l->host[t]);
    }
    cudaFree(l->d_slots);
    cudaFree(l->d_far);
}

/* One configuration: `cold` of the row's routes on host experts, far routes on (far >= 0: the
 * first `far` cold ones, the last of them split at FFN row r0 when r0 > 0) or off (far < 0). */
static void bench_far_case(const far_layer *l, const char *shape, int cold, int far, int32_t r0, int reps)
{
    const int64_t D = l->D, F = l->F, E = l->E, K = l->K;
    float *d_x, *d_out, *d_w;
    int32_t *d_ids, *d_split;
    uint8_t *d_foc;
    CK(cudaMalloc((void **)&d_x, sizeof(float) * (size_t)D));
    CK(cudaMalloc((void **)&d_out, sizeof(float) * (size_t)D));
    CK(cudaMalloc((void **)&d_w, sizeof(float) * (size_t)K));
    CK(cudaMalloc((void **)&d_ids, sizeof(int32_t) * (size_t)K));
    CK(cudaMalloc((void **)&d_foc, 33));
    CK(cudaMalloc((void **)&d_split, 33 * sizeof(int32_t)));
    float *hx = malloc(sizeof(float) * (size_t)D), hw[32];
    int32_t ids[32], split[33] = {0};
    uint8_t foc[33] = {0};
    for (int64_t i = 0; i < D; i++)
        hx[i] = next_unit();
    for (int64_t k = 0; k < K; k++) { /* the last `cold` slots on host experts */
        hw[k] = 1.0f / (float)K;
        ids[k] = k < K - cold ? (int32_t)k : (int32_t)(l->n_res + (k - (K - cold)));
    }
    foc[cold] = (uint8_t)(far > 0 ? far : 0);
    split[cold] = r0;
    CK(cudaMemcpy(d_x, hx, sizeof(float) * (size_t)D, cudaMemcpyHostToDevice));
    CK(cudaMemcpy(d_w, hw, sizeof(float) * (size_t)K, cudaMemcpyHostToDevice));
    CK(cudaMemcpy(d_ids, ids, sizeof(int32_t) * (size_t)K, cudaMemcpyHostToDevice));
    CK(cudaMemcpy(d_foc, foc, sizeof foc, cudaMemcpyHostToDevice));
    CK(cudaMemcpy(d_split, split, sizeof split, cudaMemcpyHostToDevice));
    const size_t sb = mp_cuda_moe_scratch_bytes(l->gate_type, l->down_type, D, F, 1, K);
    void *d_s, *d_stage = NULL;
    CK(cudaMalloc(&d_s, sb));
    mp_cuda_moe_args a = {
        .gate = {l->gate_type, NULL, l->g_exp, l->d_slots, l->grb}, .up = {l->gate_type, NULL, l->g_exp, l->d_slots + E, l->grb},
        .down = {l->down_type, NULL, l->d_exp, l->d_slots + 2 * E, l->drb},
        .n_embd = D, .n_ff = F, .n_expert = E, .top_k = K, .n_rows = 1,
        .d_x = d_x, .d_ids = d_ids, .d_weights = d_w, .d_out = d_out, .d_scratch = d_s, .scratch_bytes = sb,
    };
    if (far >= 0) {
        a.gate.d_far = l->d_far, a.up.d_far = l->d_far + E, a.down.d_far = l->d_far + 2 * E;
        a.d_far_of_cold = d_foc;
        a.d_far_split_of_cold = d_split;
        a.far_max = (int)K;
        a.far_stage_bytes = mp_cuda_moe_far_stage_bytes(&a);
        CK(cudaMalloc(&d_stage, a.far_stage_bytes));
        a.d_far_stage = d_stage;
    }
    cudaStream_t st;
    CK(cudaStreamCreateWithFlags(&st, cudaStreamNonBlocking));
    cudaEvent_t e0, e1;
    CK(cudaEventCreate(&e0));
    CK(cudaEventCreate(&e1));
    cudaGraphExec_t exec[2]; /* [0]: blocks sized by the SMs, [1]: one block per chunk */
    for (int v = 0; v < 2; v++) {
        mp_cuda_moe_set_far_blocks(v ? 1 << 30 : 0);
        exec[v] = moe_graph(&a, st, e0, e1);
    }
    mp_cuda_moe_set_far_blocks(0);
    float *ms[2] = {malloc(sizeof(float) * (size_t)reps), malloc(sizeof(float) * (size_t)reps)};
    for (int r = -2; r < reps; r++)
        for (int v = 0; v < 2; v++) {
            CK(cudaGraphLaunch(exec[v], st));
            CK(cudaStreamSynchronize(st));
            if (r >= 0)
                CK(cudaEventElapsedTime(&ms[v][r], e0, e1));
        }
    char what[96];
    if (far < 0)
        snprintf(what, sizeof what, "%d cold, far off", cold);
    else
        snprintf(what, sizeof what, "%d cold, %d far%s", cold, far, r0 > 0 ? ", the last split" : "");
    for (int v = 0; v < 2; v++) {
        qsort(ms[v], (size_t)reps, sizeof(float), cmp_float);
        printf("| moe far (graph, gather %s) | %s/%s | %s | %s | %8.1f us | | min %8.1f us |\n",
               v ? "one block a chunk" : "blocks by SMs", mp_type_name(l->gate_type), mp_type_name(l->down_type), shape,
               what, ms[v][reps / 2] * 1e3, ms[v][0] * 1e3);
        if (far < 0)
            break; /* no gather: one graph's numbers */
    }
    for (int v = 0; v < 2; v++) {
        cudaGraphExecDestroy(exec[v]);
        free(ms[v]);
    }
    cudaFree(d_x); cudaFree(d_out); cudaFree(d_w); cudaFree(d_ids); cudaFree(d_foc); cudaFree(d_split);
    cudaFree(d_s); cudaFree(d_stage);
    cudaEventDestroy(e0); cudaEventDestroy(e1);
    cudaStreamDestroy(st);
    free(hx);
}

static void bench_far(int reps)
{
    /* Mixtral-8x7B's experts (Q4_K_M: 114 MB), top-2, 6 in the pool */
    far_layer mx = far_layer_new(MP_TYPE_Q4_K, MP_TYPE_Q6_K, 4096, 14336, 8, 2, 6);
    bench_far_case(&mx, "4096x14336, 8 experts top-2", 0, -1, 0, reps);
    bench_far_case(&mx, "4096x14336, 8 experts top-2", 0, 0, 0, reps);
    bench_far_case(&mx, "4096x14336, 8 experts top-2", 1, 1, 0, reps);
    bench_far_case(&mx, "4096x14336, 8 experts top-2", 1, 1, 14336 - 14 * 256, reps);
    far_layer_free(&mx);
    /* Qwen3-30B-A3B's (2.9 MB), top-8, 12 of 16 in the pool */
    far_layer qw = far_layer_new(MP_TYPE_Q4_K, MP_TYPE_Q6_K, 2048, 768, 16, 8, 12);
    bench_far_case(&qw, "2048x768, 16 experts top-8", 0, -1, 0, reps);
    bench_far_case(&qw, "2048x768, 16 experts top-8", 0, 0, 0, reps);
    bench_far_case(&qw, "2048x768, 16 experts top-8", 3, 2, 0, reps);
    bench_far_case(&qw, "2048x768, 16 experts top-8", 3, 3, 0, reps);
    /* the third split: the GPU its last 512 of 768 FFN rows, down's columns from byte 210 of each
     * 630-byte Q6_K row (vectors crossing the split and the rows) */
    bench_far_case(&qw, "2048x768, 16 experts top-8", 3, 3, 256, reps);
    far_layer_free(&qw);
}

/* Attention (the F16 KV cache of one layer):
 *   - a decode row at a position, its keys split for a context of n_ctx as the executor's graph
 *     does, as a graph of ATT_GRAPH_CALLS calls (one a layer), time per call; conv: the output
 *     also converted to Q8_K for the output projection, by the merge (1) or by a launch of
 *     mp_cuda_quantize_act after the call (2), the executor's two ways;
 *   - a prefill step of n_rows rows at pos0, one call, as the executor issues it.
 * Cache and queries are random; the output is not checked here (tests/gpu/test_cuda_attention.c). */
#define ATT_GRAPH_CALLS 48
static void bench_attention_case(int64_t n_rows, int64_t pos0, int64_t n_ctx, int64_t n_head, int64_t n_head_kv,
                                 int64_t hd, int conv, int reps)
{
    const int64_t n_kv = n_head_kv * hd, keys = pos0 + n_rows;
    const bool decode = n_rows <= 8;
    uint16_t *hc = malloc(sizeof(uint16_t) * (size_t)(n_ctx * n_kv));
    for (int64_t i = 0; i < n_ctx * n_kv; i++)
        hc[i] = mp_f32_to_f16(next_unit());
    float *hq = malloc(sizeof(float) * (size_t)(n_rows * n_head * hd));
    for (int64_t i = 0; i < n_rows * n_head * hd; i++)
        hq[i] = next_unit();
    int32_t *hpos = malloc(sizeof(int32_t) * (size_t)n_rows);
    for (int64_t r = 0; r < n_rows; r++)
        hpos[r] = (int32_t)(pos0 + r);
    uint16_t *d_k, *d_v;
    float *d_q, *d_o;
    int32_t *d_pos;
    void *d_s;
    const size_t sb = mp_cuda_attention_scratch_bytes(n_rows, n_head, hd, n_ctx);
    CK(cudaMalloc((void **)&d_k, sizeof(uint16_t) * (size_t)(n_ctx * n_kv)));
    CK(cudaMalloc((void **)&d_v, sizeof(uint16_t) * (size_t)(n_ctx * n_kv)));
    CK(cudaMalloc((void **)&d_q, sizeof(float) * (size_t)(n_rows * n_head * hd)));
    CK(cudaMalloc((void **)&d_o, sizeof(float) * (size_t)(n_rows * n_head * hd)));
    CK(cudaMalloc((void **)&d_pos, sizeof(int32_t) * (size_t)n_rows));
    CK(cudaMalloc(&d_s, sb));
    void *d_act = NULL;
    const size_t act_rb = mp_cuda_row_bytes(MP_TYPE_Q8_K, n_head * hd);
    if (conv)
        CK(cudaMalloc(&d_act, act_rb * (size_t)n_rows));
    CK(cudaMemcpy(d_k, hc, sizeof(uint16_t) * (size_t)(n_ctx * n_kv), cudaMemcpyHostToDevice));
    CK(cudaMemcpy(d_v, hc, sizeof(uint16_t) * (size_t)(n_ctx * n_kv), cudaMemcpyHostToDevice));
    CK(cudaMemcpy(d_q, hq, sizeof(float) * (size_t)(n_rows * n_head * hd), cudaMemcpyHostToDevice));
    CK(cudaMemcpy(d_pos, hpos, sizeof(int32_t) * (size_t)n_rows, cudaMemcpyHostToDevice));
    cudaStream_t st;
    cudaEvent_t e0, e1;
    CK(cudaStreamCreateWithFlags(&st, cudaStreamNonBlocking));
    CK(cudaEventCreate(&e0));
    CK(cudaEventCreate(&e1));
    cudaGraphExec_t exec = NULL;
    if (decode) {
        cudaGraph_t graph;
        CK(cudaStreamBeginCapture(st, cudaStreamCaptureModeThreadLocal));
        for (int c = 0; c < ATT_GRAPH_CALLS; c++) {
            CK(mp_cuda_attention_at(d_q, d_k, d_v, d_o, n_rows, d_pos, n_ctx, n_head, n_head_kv, hd, d_s, sb,
                                    conv == 1 ? MP_TYPE_Q8_K : MP_TYPE_F32, conv == 1 ? d_act : NULL, 0, NULL, st));
            if (conv == 2)
                CK(mp_cuda_quantize_act(MP_TYPE_Q8_K, d_o, n_head * hd, n_rows, n_head * hd, d_act, st));
        }
        CK(cudaStreamEndCapture(st, &graph));
        CK(cudaGraphInstantiate(&exec, graph, 0));
        CK(cudaGraphDestroy(graph));
    }
    float *ms = malloc(sizeof(float) * (size_t)reps);
    for (int r = -2; r < reps; r++) { /* two warm-up rounds */
        CK(cudaEventRecord(e0, st));
        if (decode)
            CK(cudaGraphLaunch(exec, st));
        else
            CK(mp_cuda_attention_at(d_q, d_k, d_v, d_o, n_rows, d_pos, keys, n_head, n_head_kv, hd, d_s, sb, MP_TYPE_F32, NULL, 0, NULL, st));
        CK(cudaEventRecord(e1, st));
        CK(cudaEventSynchronize(e1));
        if (r >= 0) {
            CK(cudaEventElapsedTime(&ms[r], e0, e1));
            if (decode)
                ms[r] /= ATT_GRAPH_CALLS;
        }
    }
    char shape[96];
    snprintf(shape, sizeof shape, "%ld heads / %ld kv, hd %ld, %ld keys%s%s", (long)n_head, (long)n_head_kv, (long)hd,
             (long)keys, decode ? "" : " (last row)",
             conv == 1 ? ", to Q8_K in the merge" : conv == 2 ? ", to Q8_K in a launch after" : "");
    qsort(ms, (size_t)reps, sizeof(float), cmp_float);
    printf("| attention (%s) | f16 cache | %s | %ld | %9.1f us | | min %9.1f us |\n",
           decode ? "graph of 48" : "one call", shape, (long)n_rows, ms[reps / 2] * 1e3, ms[0] * 1e3);
    if (exec)
        cudaGraphExecDestroy(exec);
    free(ms);
    cudaFree(d_k); cudaFree(d_v); cudaFree(d_q); cudaFree(d_o); cudaFree(d_pos); cudaFree(d_s); cudaFree(d_act);
    cudaEventDestroy(e0); cudaEventDestroy(e1);
    cudaStreamDestroy(st);
    free(hc); free(hq); free(hpos);
}

static void bench_attention(int reps)
{
    /* Qwen3-30B-A3B's attention (32 heads, 4 kv heads, hd 128); tg128 after pp512 reads 513-640 keys */
    bench_attention_case(1, 128, 4096, 32, 4, 128, 0, reps);
    bench_attention_case(1, 600, 4096, 32, 4, 128, 0, reps);
    bench_attention_case(1, 4000, 4096, 32, 4, 128, 0, reps);
    for (int round = 0; round < 2; round++) /* the output's conversion, the two ways alternated */
        for (int conv = 1; conv <= 2; conv++) {
            bench_attention_case(1, 128, 4096, 32, 4, 128, conv, reps);
            bench_attention_case(1, 600, 4096, 32, 4, 128, conv, reps);
        }
    bench_attention_case(512, 0, 4096, 32, 4, 128, 0, reps);
    bench_attention_case(2048, 0, 4096, 32, 4, 128, 0, reps);
    bench_attention_case(512, 3584, 4096, 32, 4, 128, 0, reps);
    bench_attention_case(16, 8000, 8192, 32, 4, 128, 0, reps); /* few row tiles, many keys */
    bench_attention_case(64, 8000, 8192, 32, 4, 128, 0, reps);
    /* 64 heads of 64 (gpt-oss's shape) and 16 of 256 */
    bench_attention_case(512, 0, 4096, 64, 8, 64, 0, reps);
    bench_attention_case(1, 600, 4096, 64, 8, 64, 0, reps);
    bench_attention_case(512, 0, 4096, 16, 4, 256, 0, reps);
}

int main(int argc, char **argv)
{
    const int reps = argc > 1 ? atoi(argv[1]) : 50;
    const bool prefill_only = argc > 2 && !strcmp(argv[2], "prefill");
    const bool decode_only = argc > 2 && !strcmp(argv[2], "decode");
    const bool far_only = argc > 2 && !strcmp(argv[2], "far");
    const bool attn_only = argc > 2 && !strcmp(argv[2], "attn");
    /* prefill GATE/DOWN ...: those expert types on the 30B's shape only; a bad one is named in one
     * line on stderr (then the usage, exit 2) */
    int pairs[8][2], n_pairs = 0;
    bool bad_pair = false;
    for (int i = 3; i < argc && !bad_pair; i++) {
        char g[16] = "", d[16] = "";
        const char *slash = strchr(argv[i], '/');
        if (slash && slash - argv[i] < (long)sizeof g && strlen(slash + 1) < sizeof d) {
            memcpy(g, argv[i], (size_t)(slash - argv[i]));
            g[slash - argv[i]] = '\0';
            strcpy(d, slash + 1);
        }
        const int gt = mp_type_from_name(g), dt = mp_type_from_name(d);
        bad_pair = true;
        if (!prefill_only)
            fprintf(stderr, "bench_cuda: error: argument %d '%s': only prefill takes GATE/DOWN type pairs\n", i,
                    argv[i]);
        else if (n_pairs == 8)
            fprintf(stderr, "bench_cuda: error: argument %d '%s': at most 8 GATE/DOWN type pairs\n", i, argv[i]);
        else if (!mp_type_supported(gt) || !mp_type_supported(dt))
            fprintf(stderr, "bench_cuda: error: argument %d '%s': expected GATE/DOWN weight types, e.g. Q3_K/Q4_K\n",
                    i, argv[i]);
        else {
            bad_pair = false;
            pairs[n_pairs][0] = gt;
            pairs[n_pairs][1] = dt;
            n_pairs++;
        }
    }
    if (reps < 1 || bad_pair || (argc > 2 && !prefill_only && !decode_only && !far_only && !attn_only) ||
        (argc > 1 && !strcmp(argv[1], "--help"))) {
        printf("usage: bench_cuda [REPS [prefill [GATE/DOWN ...]|decode|far|attn]]   (GEMV and MoE-expert GB/s on\n"
               "       CUDA device 0; prefill: only the grouped prefill experts, CUDA cores against tensor cores,\n"
               "       16 ... 512 rows (Q4_K/Q6_K on Mixtral's, a 256-expert and the 30B's shapes, the 30B's\n"
               "       Q8_0, Q3_K/Q4_K, Q2_K/Q4_K, Q5_K/Q6_K and IQ4_XS, gpt-oss-20b's MXFP4), or with up to 8\n"
               "       GATE/DOWN type pairs (e.g. Q3_K/Q4_K) the 30B's shape in those only; decode: the 1-row\n"
               "       expert call of five shapes (the presets', top-1 of 16) with the K-quant mixes' and Q8_0 experts, the\n"
               "       down kernel's variants alternated twice; far: the 1-row\n"
               "       call with far routes (whole, split) on Mixtral's and Qwen3-30B-A3B's experts, the\n"
               "       gather's blocks sized by the SMs against one block per chunk, alternated; attn: attention,\n"
               "       decode rows as graphs and prefill steps of 16 ... 2048 rows)\n");
        return argc > 1 && !strcmp(argv[1], "--help") ? 0 : 2;
    }
    char why[256];
    if (!mp_cuda_available(why, sizeof why)) {
        fprintf(stderr, "bench_cuda: error: %s\n", why);
        return 1;
    }
    struct cudaDeviceProp prop;
    CK(cudaGetDeviceProperties(&prop, 0));
    printf("device: %s, %d SMs, %.1f GiB\n", prop.name, prop.multiProcessorCount,
           (double)prop.totalGlobalMem / (1 << 30));
    printf("| kernel | type | shape | rows | median | bandwidth | best |\n|---|---|---|---|---|---|---|\n");
    if (prefill_only) { /* where the two paths cross (moe.cu's MOE_MMA_MIN_ROWS) */
        const int64_t rows[] = {16, 32, 64, 96, 128, 192, 256, 512};
        for (size_t i = 0; i < sizeof rows / sizeof *rows; i++)
            for (int mma = 0; mma < 2; mma++) {
                if (n_pairs) {
                    for (int p = 0; p < n_pairs; p++)
                        bench_moe_prefill(&shape_30b, pairs[p][0], pairs[p][1], rows[i], mma, reps);
                    continue;
                }
                /* Mixtral's top-2 of 8 (114 MB experts), 256 experts' top-8 (FFN 512), the 30B's
                 * top-8 of 128, gpt-oss's top-4 of 32; the 30B's experts also as mkmodel's q3_k_m,
                 * q2_k and q5_k_m mixes make them, and in IQ4_XS */
                bench_moe_prefill(&dec_shapes[3], MP_TYPE_Q4_K, MP_TYPE_Q6_K, rows[i], mma, reps);
                bench_moe_prefill(&dec_shapes[2], MP_TYPE_Q4_K, MP_TYPE_Q6_K, rows[i], mma, reps);
                bench_moe_prefill(&shape_30b, MP_TYPE_Q4_K, MP_TYPE_Q6_K, rows[i], mma, reps);
                bench_moe_prefill(&shape_30b, MP_TYPE_Q8_0, MP_TYPE_Q8_0, rows[i], mma, reps);
                bench_moe_prefill(&shape_gpt_oss, MP_TYPE_MXFP4, MP_TYPE_MXFP4, rows[i], mma, reps);
                bench_moe_prefill(&shape_30b, MP_TYPE_Q3_K, MP_TYPE_Q4_K, rows[i], mma, reps);
                bench_moe_prefill(&shape_30b, MP_TYPE_Q2_K, MP_TYPE_Q4_K, rows[i], mma, reps);
                bench_moe_prefill(&shape_30b, MP_TYPE_Q5_K, MP_TYPE_Q6_K, rows[i], mma, reps);
                bench_moe_prefill(&shape_30b, MP_TYPE_IQ4_XS, MP_TYPE_IQ4_XS, rows[i], mma, reps);
            }
        return 0;
    }
    if (far_only) {
        bench_far(reps);
        return 0;
    }
    if (attn_only) {
        bench_attention(reps);
        return 0;
    }
    if (decode_only) { /* the 1-row expert call, twice */
        bench_moe_sweep(reps, 2);
        return 0;
    }
    const int types[] = {MP_TYPE_F32,  MP_TYPE_F16,  MP_TYPE_BF16,   MP_TYPE_Q4_0,  MP_TYPE_Q4_1,
                         MP_TYPE_Q5_0, MP_TYPE_Q5_1, MP_TYPE_IQ4_NL, MP_TYPE_MXFP4, MP_TYPE_Q8_0,
                         MP_TYPE_Q4_K, MP_TYPE_IQ4_XS, MP_TYPE_Q6_K};
    for (size_t t = 0; t < sizeof types / sizeof *types; t++) {
        bench_gemv(types[t], 768 * 8, 2048, reps);
        bench_gemv(types[t], 151936, 2048, reps);
    }
    static const dec_variant rule = {-1, "by rule"};
    bench_moe(&shape_30b, MP_TYPE_Q4_K, MP_TYPE_Q6_K, &rule, 1, 1, reps);
    bench_moe(&shape_30b, MP_TYPE_Q8_0, MP_TYPE_Q8_0, &rule, 1, 1, reps);
    bench_moe(&shape_30b, MP_TYPE_IQ4_XS, MP_TYPE_IQ4_XS, &rule, 1, 1, reps);
    bench_moe(&shape_30b, MP_TYPE_Q5_0, MP_TYPE_Q8_0, &rule, 1, 1, reps);
    for (int mma = 0; mma < 2; mma++) /* prefill: the CUDA-core and the tensor-core paths side by side */
        for (int64_t rows = 64; rows <= 512; rows *= 8) {
            bench_moe_prefill(&shape_30b, MP_TYPE_Q4_K, MP_TYPE_Q6_K, rows, mma, reps < 20 ? reps : 20);
            bench_moe_prefill(&shape_30b, MP_TYPE_Q8_0, MP_TYPE_Q8_0, rows, mma, reps < 20 ? reps : 20);
            bench_moe_prefill(&shape_30b, MP_TYPE_Q3_K, MP_TYPE_Q4_K, rows, mma, reps < 20 ? reps : 20);
            bench_moe_prefill(&shape_gpt_oss, MP_TYPE_MXFP4, MP_TYPE_MXFP4, rows, mma, reps < 20 ? reps : 20);
        }
    bench_moe(&shape_gpt_oss, MP_TYPE_MXFP4, MP_TYPE_MXFP4, &rule, 1, 1, reps);
    return 0;
}
