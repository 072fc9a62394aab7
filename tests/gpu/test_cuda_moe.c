/* tests/gpu/test_cuda_moe.c — the device router and the expert kernels against the CPU path.
 *
 * Router: probabilities within 2e-6 of mp_softmax (fast-math expf differs from libm's by a few
 * ulp of the exponentials; probabilities are <= 1), and the selection must equal mp_topk applied
 * to the GPU's own probabilities bit for bit — ids, order, and weights (renormalized with the same
 * f32 operations) — so ties and the lower-id rule are checked exactly, independent of expf ulps.
 *
 * Experts: a CPU reference built from the scalar kernels exactly as runtime/moe_cpu.c runs them
 * (mp_quantize_activation → vec_dot → mp_swiglu → mp_quantize_activation → vec_dot → slot-order
 * weighted sum). Tolerance per output element (row, d), with M = Σ_k |w_k| Σ_j |W_down[d, j] h_j|:
 *   2e-3 · M
 * covering f32 summation order in three dot products (each <= 4 n 2^-24 ≈ 5e-4 relative at
 * n = 2048), fast-math silu, and the rare one-quant flips when h is re-quantized a hair apart
 * (each flip moves one term by d_h |W|, < 1/127 of one of n_ff terms). A wrong expert, row or
 * weight moves the output by ~M / sqrt(n_ff) ≈ 4e-2 · M. */
#include "mp_config.h"
#include <string.h>
#if MP_HAVE_CUDA && !defined(MP_NO_CUDA)
#include "kernels/cuda/cuda_ops.h"
#include "kernels/ops.h"
#include "tests/gpu/gpu_util.h"

/* ---- router ---- */

static void check_router(int64_t n_rows, int64_t n_expert, int64_t k, int renorm, int ties)
{
    float *logits = malloc(sizeof(float) * (size_t)(n_rows * n_expert));
    rnd_floats(logits, n_rows * n_expert, 2.0f);
    if (ties) /* coarse logits: many exact ties in every row, incl. among the top k */
        for (int64_t i = 0; i < n_rows * n_expert; i++)
            logits[i] = roundf(logits[i]);
    float *d_l = dev_put(logits, sizeof(float) * (size_t)(n_rows * n_expert));
    int32_t *d_ids = dev_alloc(sizeof(int32_t) * (size_t)(n_rows * k));
    float *d_w = dev_alloc(sizeof(float) * (size_t)(n_rows * k));
    float *d_p = dev_alloc(sizeof(float) * (size_t)(n_rows * n_expert));
    MPC_OK(mp_cuda_router(d_l, n_rows, n_expert, k, renorm, d_ids, d_w, d_p, NULL));
    int32_t *ids = malloc(sizeof(int32_t) * (size_t)(n_rows * k)), *ref_ids = malloc(sizeof(int32_t) * (size_t)k);
    float *w = malloc(sizeof(float) * (size_t)(n_rows * k)), *ref_w = malloc(sizeof(float) * (size_t)k);
    float *p = malloc(sizeof(float) * (size_t)(n_rows * n_expert));
    dev_get(ids, d_ids, sizeof(int32_t) * (size_t)(n_rows * k));
    dev_get(w, d_w, sizeof(float) * (size_t)(n_rows * k));
    dev_get(p, d_p, sizeof(float) * (size_t)(n_rows * n_expert));
    for (int64_t r = 0; r < n_rows; r++) {
        float *cpu_p = logits + r * n_expert; /* softmax in place on the host copy */
        mp_softmax(cpu_p, n_expert);
        for (int64_t e = 0; e < n_expert; e++)
            cr_assert(fabsf(p[r * n_expert + e] - cpu_p[e]) <= 2e-6f,
                      "seed %llu: router E %ld: row %ld expert %ld: gpu prob %.9g, cpu %.9g",
                      (unsigned long long)g_seed, (long)n_expert, (long)r, (long)e,
                      p[r * n_expert + e], cpu_p[e]);
        mp_topk(p + r * n_expert, n_expert, k, ref_ids, ref_w);
        if (renorm) {
            float sum = 0.0f;
            for (int64_t j = 0; j < k; j++)
                sum += ref_w[j];
            for (int64_t j = 0; j < k; j++)
                ref_w[j] /= sum;
        }
        for (int64_t j = 0; j < k; j++) {
            cr_assert_eq(ids[r * k + j], ref_ids[j],
                         "seed %llu: router E %ld k %ld ties %d: row %ld slot %ld: gpu expert %d, "
                         "mp_topk %d", (unsigned long long)g_seed, (long)n_expert, (long)k, ties,
                         (long)r, (long)j, ids[r * k + j], ref_ids[j]);
            cr_assert(w[r * k + j] == ref_w[j],
                      "seed %llu: router row %ld slot %ld: gpu weight %.9g, cpu %.9g (renorm %d)",
                      (unsigned long long)g_seed, (long)r, (long)j, w[r * k + j], ref_w[j], renorm);
        }
    }
    cudaFree(d_l); cudaFree(d_ids); cudaFree(d_w); cudaFree(d_p);
    free(logits); free(ids); free(ref_ids); free(w); free(ref_w); free(p);
}

Test(cuda_moe, router_matches_mp_topk)
{
    seed_rng();
    check_router(1, 128, 8, 1, 0);   /* Qwen3-30B-A3B decode */
    check_router(37, 128, 8, 1, 0);
    check_router(5, 64, 8, 0, 0);    /* OLMoE: no renormalization */
    check_router(3, 8, 2, 1, 0);     /* Mixtral */
    check_router(4, 100, 5, 1, 0);   /* not a multiple of the warp */
    check_router(16, 128, 8, 1, 1);  /* ties */
    check_router(2, 1000, 32, 0, 1);
}

Test(cuda_moe, router_equal_logits_pick_lowest_ids)
{
    seed_rng();
    float l[128];
    for (int i = 0; i < 128; i++)
        l[i] = 0.25f;
    float *d_l = dev_put(l, sizeof l);
    int32_t *d_ids = dev_alloc(8 * sizeof(int32_t));
    float *d_w = dev_alloc(8 * sizeof(float));
    MPC_OK(mp_cuda_router(d_l, 1, 128, 8, 1, d_ids, d_w, NULL, NULL));
    int32_t ids[8];
    float w[8];
    dev_get(ids, d_ids, sizeof ids);
    dev_get(w, d_w, sizeof w);
    for (int j = 0; j < 8; j++) {
        cr_assert_eq(ids[j], j, "seed %llu: slot %d: expert %d, want %d", (unsigned long long)g_seed, j, ids[j], j);
        cr_assert_float_eq(w[j], 0.125f, 1e-7f, "slot %d weight %g", j, w[j]);
    }
    cr_assert_eq(mp_cuda_router(d_l, 1, 128, 0, 1, d_ids, d_w, NULL, NULL), MP_CUDA_EINVAL);
    cr_assert_eq(mp_cuda_router(d_l, 1, 4, 8, 1, d_ids, d_w, NULL, NULL), MP_CUDA_EINVAL);
    cudaFree(d_l); cudaFree(d_ids); cudaFree(d_w);
}

/* A NaN logit makes every probability of its row NaN: the router must still pick k distinct
 * experts, the lowest ids first, and never read or write past the row (register and
 * shared-memory experts: 128 and 600). */
Test(cuda_moe, router_nan_row_picks_lowest_free_ids)
{
    seed_rng();
    const int64_t sizes[2] = {128, 600};
    for (int c = 0; c < 2; c++) {
        const int64_t E = sizes[c], K = 8;
        float *l = malloc(sizeof(float) * (size_t)E);
        rnd_floats(l, E, 2.0f);
        l[(int64_t)(rnd_u64() % (uint64_t)E)] = NAN;
        float *d_l = dev_put(l, sizeof(float) * (size_t)E);
        int32_t *d_ids = dev_alloc(K * sizeof(int32_t));
        float *d_w = dev_alloc(K * sizeof(float));
        MPC_OK(mp_cuda_router(d_l, 1, E, K, 0, d_ids, d_w, NULL, NULL));
        int32_t ids[8];
        float w[8];
        dev_get(ids, d_ids, sizeof ids);
        dev_get(w, d_w, sizeof w);
        for (int j = 0; j < K; j++) {
            cr_assert_eq(ids[j], j, "seed %llu: E %ld slot %d: expert %d, want %d", (unsigned long long)g_seed,
                         (long)E, j, ids[j], j);
            cr_assert(isinf(w[j]) && w[j] < 0, "seed %llu: E %ld slot %d: weight %g, want -inf",
                      (unsigned long long)g_seed, (long)E, j, w[j]);
        }
        cudaFree(d_l); cudaFree(d_ids); cudaFree(d_w);
        free(l);
    }
}

/* The decode router in one launch (mp_cuda_router_gemv) against mp_cuda_gemv + mp_cuda_router on
 * the same random weights and row: logits, ids and weights bit for bit; three launches on one
 * counter (the last block must leave it at 0 for the next); with a handoff target, the row, ids
 * and weights in host memory and the flag set. Shapes: the qwen3 router (128 x 2048, 128-bit
 * path), an odd one (the scalar path, a partial last block) and 600 experts (shared memory). */
static void check_router_gemv(int type, int64_t E, int64_t D, int64_t K, int renorm, bool handoff, bool bias)
{
    float *b = malloc(sizeof(float) * (size_t)E); /* gpt-oss's router bias: against mp_cuda_add_bias */
    rnd_floats(b, E, 1.0f);
    float *d_b = bias ? dev_put(b, sizeof(float) * (size_t)E) : NULL;
    const size_t rb = mp_type_row_bytes(type, D);
    uint8_t *w = malloc(rb * (size_t)E);
    rnd_weights(type, E, D, rb, w);
    float *x = malloc(sizeof(float) * (size_t)D);
    rnd_floats(x, D, 1.0f);
    uint8_t *d_wt = dev_put(w, rb * (size_t)E);
    float *d_x = dev_put(x, sizeof(float) * (size_t)D);
    float *d_l1 = dev_alloc(sizeof(float) * (size_t)E), *d_l2 = dev_alloc(sizeof(float) * (size_t)E);
    int32_t *d_i1 = dev_alloc(sizeof(int32_t) * (size_t)K), *d_i2 = dev_alloc(sizeof(int32_t) * (size_t)K);
    float *d_w1 = dev_alloc(sizeof(float) * (size_t)K), *d_w2 = dev_alloc(sizeof(float) * (size_t)K);
    unsigned zero = 0, *d_count = dev_put(&zero, sizeof zero);
    MPC_OK(mp_cuda_gemv(type, d_wt, rb, E, D, d_x, (size_t)D * 4, 1, d_l1, E, NULL));
    if (d_b)
        MPC_OK(mp_cuda_add_bias(d_l1, d_b, 1, E, NULL));
    MPC_OK(mp_cuda_router(d_l1, 1, E, K, renorm, d_i1, d_w1, NULL, NULL));
    float *l1 = malloc(sizeof(float) * (size_t)E), *l2 = malloc(sizeof(float) * (size_t)E);
    int32_t i1[32], i2[32];
    float w1[32], w2[32];
    dev_get(l1, d_l1, sizeof(float) * (size_t)E);
    dev_get(i1, d_i1, sizeof(int32_t) * (size_t)K);
    dev_get(w1, d_w1, sizeof(float) * (size_t)K);
    float *h_x = NULL, *h_w = NULL;
    int32_t *h_ids = NULL;
    uint32_t *h_flag = NULL;
    uint64_t *h_stamp = NULL;
    if (handoff) {
        CUDA_OK(cudaMallocHost((void **)&h_x, sizeof(float) * (size_t)D));
        CUDA_OK(cudaMallocHost((void **)&h_ids, sizeof(int32_t) * (size_t)K));
        CUDA_OK(cudaMallocHost((void **)&h_w, sizeof(float) * (size_t)K));
        CUDA_OK(cudaMallocHost((void **)&h_flag, sizeof(uint32_t)));
        CUDA_OK(cudaMallocHost((void **)&h_stamp, sizeof(uint64_t)));
    }
    for (int rep = 0; rep < 3; rep++) {
        CUDA_OK(cudaMemset(d_l2, 0xff, sizeof(float) * (size_t)E));
        CUDA_OK(cudaMemset(d_i2, 0xff, sizeof(int32_t) * (size_t)K));
        if (handoff) {
            memset(h_x, 0xff, sizeof(float) * (size_t)D);
            memset(h_ids, 0xff, sizeof(int32_t) * (size_t)K);
            *h_flag = 0;
            *h_stamp = 0;
        }
        MPC_OK(mp_cuda_router_gemv(type, d_wt, rb, E, D, d_x, d_b, d_l2, K, renorm, d_i2, d_w2, d_count, h_x, h_ids, h_w,
                                   h_flag, h_stamp, NULL));
        dev_get(l2, d_l2, sizeof(float) * (size_t)E);
        dev_get(i2, d_i2, sizeof(int32_t) * (size_t)K);
        dev_get(w2, d_w2, sizeof(float) * (size_t)K);
        unsigned count;
        dev_get(&count, d_count, sizeof count);
        cr_assert_eq(count, 0, "seed %llu: %s E %ld: launch %d left the counter at %u", (unsigned long long)g_seed,
                     mp_type_name(type), (long)E, rep, count);
        for (int64_t e = 0; e < E; e++)
            cr_assert(memcmp(&l1[e], &l2[e], sizeof(float)) == 0,
                      "seed %llu: %s E %ld D %ld launch %d: logit %ld: fused %.9g, gemv %.9g", (unsigned long long)g_seed,
                      mp_type_name(type), (long)E, (long)D, rep, (long)e, l2[e], l1[e]);
        for (int64_t j = 0; j < K; j++) {
            cr_assert(i1[j] == i2[j] && memcmp(&w1[j], &w2[j], sizeof(float)) == 0,
                      "seed %llu: %s E %ld launch %d: slot %ld: fused (%d, %.9g), router (%d, %.9g)",
                      (unsigned long long)g_seed, mp_type_name(type), (long)E, rep, (long)j, i2[j], w2[j], i1[j], w1[j]);
            if (handoff)
                cr_assert(h_ids[j] == i1[j] && memcmp(&h_w[j], &w1[j], sizeof(float)) == 0,
                          "seed %llu: handoff slot %ld: (%d, %.9g) on the host", (unsigned long long)g_seed, (long)j,
                          h_ids[j], h_w[j]);
        }
        if (handoff) {
            cr_assert_eq(*h_flag, 1, "seed %llu: the handoff flag was not set", (unsigned long long)g_seed);
            cr_assert_gt(*h_stamp, 0, "the handoff stamped no time");
            cr_assert(memcmp(h_x, x, sizeof(float) * (size_t)D) == 0, "seed %llu: the handed-off row differs",
                      (unsigned long long)g_seed);
        }
    }
    cudaFree(d_wt); cudaFree(d_x); cudaFree(d_l1); cudaFree(d_l2); cudaFree(d_i1); cudaFree(d_i2);
    cudaFree(d_w1); cudaFree(d_w2); cudaFree(d_count);
    if (handoff) {
        cudaFreeHost(h_x); cudaFreeHost(h_ids); cudaFreeHost(h_w); cudaFreeHost(h_flag); cudaFreeHost(h_stamp);
    }
    cudaFree(d_b);
    free(w); free(x); free(l1); free(l2); free(b);
}

Test(cuda_moe, fused_decode_router_matches_gemv_and_router)
{
    seed_rng();
    check_router_gemv(MP_TYPE_F32, 128, 2048, 8, 1, false, false);
    check_router_gemv(MP_TYPE_F32, 128, 2048, 8, 1, true, false);
    check_router_gemv(MP_TYPE_F32, 61, 100, 5, 0, true, false);   /* scalar path, a partial last block */
    check_router_gemv(MP_TYPE_BF16, 600, 256, 8, 1, false, false); /* shared-memory experts */
    check_router_gemv(MP_TYPE_F16, 64, 512, 4, 1, true, false);
    check_router_gemv(MP_TYPE_F32, 32, 2880, 4, 1, true, true);    /* gpt-oss-20b's router, with its bias */
    unsigned *d_count = dev_alloc(sizeof(unsigned));
    float *d = dev_alloc(4096);
    cr_assert_eq(mp_cuda_router_gemv_supported(MP_TYPE_Q4_K), 0);
    cr_assert_eq(mp_cuda_router_gemv(MP_TYPE_Q4_K, d, 144, 8, 256, d, NULL, d, 2, 1, (int32_t *)d, d, d_count, NULL,
                                     NULL, NULL, NULL, NULL, NULL), MP_CUDA_EINVAL);
    cr_assert_eq(mp_cuda_router_gemv(MP_TYPE_F32, d, 64, 8, 16, d, NULL, d, 9, 1, (int32_t *)d, d, d_count, NULL, NULL,
                                     NULL, NULL, NULL, NULL), MP_CUDA_EINVAL, "k > n_expert");
    cr_assert_eq(mp_cuda_router_gemv(MP_TYPE_F32, d, 64, 8, 16, d, NULL, d, 2, 1, (int32_t *)d, d, NULL, NULL, NULL,
                                     NULL, NULL, NULL, NULL), MP_CUDA_EINVAL, "no counter");
    cudaFree(d_count); cudaFree(d);
}

/* ---- experts ---- */

typedef struct moe_case {
    int gate_type, down_type;
    int64_t n_embd, n_ff, n_expert, top_k, n_rows;
    int use_slots;     /* an expert pool: slot pointers, some experts not resident */
    int accumulate;
    int far;           /* with use_slots: far routes, the cold experts' weights read from mapped
                        * host memory, a random count of each row's cold routes (far_of_cold);
                        * FAR_TOP_K or FAR_ONE, with FAR_SPLIT or FAR_SPLIT_PAST or neither */
} moe_case;

/* check_experts with gpt-oss's experts: gate and up biases, the clamped SwiGLU (mp_swiglu_oai) */
static int g_oai;

enum {
    FAR_TOP_K = 1,      /* at most top_k far routes a row (far_max) */
    FAR_ONE = 2,        /* at most 1 (the table clamped by far_max) */
    FAR_SPLIT = 4,      /* a split table (d_far_split_of_cold): a row's last far route runs FFN rows
                         * [r0, n_ff) only, r0 0 or a random multiple of the down's block */
    FAR_SPLIT_PAST = 8, /* a split table of r0 outside 0..n_ff - 1 (n_ff, INT32_MAX, negative), which the
                         * kernel clamps: the route adds nothing, or all of it */
};

static void check_experts(const moe_case *c)
{
    const int64_t D = c->n_embd, F = c->n_ff, E = c->n_expert, K = c->top_k, R = c->n_rows;
    const size_t grb = mp_type_row_bytes(c->gate_type, D), drb = mp_type_row_bytes(c->down_type, F);
    const size_t g_exp = grb * (size_t)F, d_exp = drb * (size_t)D;
    uint8_t *gate = malloc(g_exp * (size_t)E), *up = malloc(g_exp * (size_t)E), *down = malloc(d_exp * (size_t)E);
    rnd_weights(c->gate_type, E * F, D, grb, gate);
    rnd_weights(c->gate_type, E * F, D, grb, up);
    rnd_weights(c->down_type, E * D, F, drb, down);
    float *x = malloc(sizeof(float) * (size_t)(R * D));
    rnd_floats(x, R * D, 1.0f);
    /* gpt-oss: biases of a size that moves the clamps (gate above 7, up beyond ±7 for some rows) */
    float *gb = malloc(sizeof(float) * (size_t)(E * F)), *ub = malloc(sizeof(float) * (size_t)(E * F));
    rnd_floats(gb, E * F, 8.0f);
    rnd_floats(ub, E * F, 8.0f);
    /* routes: K distinct experts per row, random weights in (0, 1] */
    int32_t *ids = malloc(sizeof(int32_t) * (size_t)(R * K));
    float *rw = malloc(sizeof(float) * (size_t)(R * K));
    for (int64_t r = 0; r < R; r++)
        for (int64_t k = 0; k < K; k++) {
            int32_t e;
            int dup;
            do {
                e = (int32_t)(rnd_u64() % (uint64_t)E);
                dup = 0;
                for (int64_t j = 0; j < k; j++)
                    dup |= ids[r * K + j] == e;
            } while (dup);
            ids[r * K + k] = e;
            rw[r * K + k] = (float)(rnd_uniform() * 0.9 + 0.1);
        }
    /* residency: with slots, every third expert is not resident (its routes are skipped) */
    int *resident = malloc(sizeof(int) * (size_t)E);
    for (int64_t e = 0; e < E; e++)
        resident[e] = !c->use_slots || e % 3 != 1;
    /* far routes: a row with n cold routes runs the first far_of_cold[n] of them (slot order)
     * from host memory; the other cold routes are skipped */
    uint8_t far_of_cold[33] = {0};
    for (int64_t n = 0; n <= K; n++)
        far_of_cold[n] = c->far ? (uint8_t)(rnd_u64() % (uint64_t)(n + 1)) : 0;
    if (c->far && K >= 2)
        far_of_cold[K < 3 ? K : 3] = K < 3 ? (uint8_t)K : 2; /* rows with 3 cold routes run 2 far */
    const int far_max = c->far & FAR_ONE ? 1 : (int)K;
    /* a split last far route: a row with n cold routes runs FFN rows [split_of_cold[n], F) of its
     * last far route; r0 is 0 (the whole route) or a multiple of the down's block in [blk, F - blk] */
    const int64_t blk = mp_type_block_elems(c->down_type);
    int32_t split_of_cold[33] = {0};
    if (c->far & FAR_SPLIT) {
        for (int64_t n = 0; n <= K; n++)
            split_of_cold[n] = F >= 2 * blk && rnd_u64() % 2
                                   ? (int32_t)(blk * (int64_t)(1 + rnd_u64() % (uint64_t)(F / blk - 1)))
                                   : 0;
        if (K >= 2 && F >= 2 * blk) /* rows with 3 cold routes split their last far route mid-FFN */
            split_of_cold[K < 3 ? K : 3] = (int32_t)(F / blk / 2 * blk);
    }
    if (c->far & FAR_SPLIT_PAST)
        for (int64_t n = 0; n <= K; n++)
            split_of_cold[n] = n % 3 == 0 ? (int32_t)F : n % 3 == 1 ? INT32_MAX : -(int32_t)blk;
    int *runs = malloc(sizeof(int) * (size_t)(R * K)); /* route computed: resident or far */
    int64_t *ffn_lo = malloc(sizeof(int64_t) * (size_t)(R * K)); /* the route's first FFN row on the GPU */
    for (int64_t r = 0; r < R; r++) {
        int64_t n_cold = 0, rank = 0;
        for (int64_t k = 0; k < K; k++)
            n_cold += !resident[ids[r * K + k]];
        const int64_t n_far = far_of_cold[n_cold] < far_max ? far_of_cold[n_cold] : far_max;
        const int64_t r0 = split_of_cold[n_cold] < 0 ? 0 : split_of_cold[n_cold] > F ? F : split_of_cold[n_cold];
        for (int64_t k = 0; k < K; k++) {
            const bool cold = !resident[ids[r * K + k]];
            runs[r * K + k] = !cold || rank < n_far;
            ffn_lo[r * K + k] = cold && rank == n_far - 1 ? r0 : 0;
            rank += cold;
        }
    }

    /* ---- CPU reference ---- */
    const mp_type_ops *gops = mp_type_ops_scalar(c->gate_type), *dops = mp_type_ops_scalar(c->down_type);
    const size_t xqb = mp_type_row_bytes(gops->vec_dot_type, D), hqb = mp_type_row_bytes(dops->vec_dot_type, F);
    uint8_t *xq = malloc(xqb), *hq = malloc(hqb);
    float *g = malloc(sizeof(float) * (size_t)F), *u = malloc(sizeof(float) * (size_t)F);
    float *hdq = malloc(sizeof(float) * (size_t)F), *wrow = malloc(sizeof(float) * (size_t)F);
    float *ref = malloc(sizeof(float) * (size_t)(R * D)), *mag = malloc(sizeof(float) * (size_t)(R * D));
    /* flip[i]: one rounding flip of the quantized h per route. The tensor-core path sums gate and
     * up in another order than the CPU, so an h element can land on the other side of a Q8
     * rounding boundary: one quantum (max |h| / 127) times the down weight it meets. */
    float *flip = malloc(sizeof(float) * (size_t)(R * D));
    float *init = malloc(sizeof(float) * (size_t)(R * D));
    rnd_floats(init, R * D, 0.5f); /* the partial that accumulate mode adds to */
    for (int64_t r = 0; r < R; r++) {
        float *o = ref + r * D, *m = mag + r * D, *fl = flip + r * D;
        for (int64_t d = 0; d < D; d++)
            o[d] = m[d] = fl[d] = 0.0f;
        cr_assert_eq(mp_quantize_activation(gops->vec_dot_type, x + r * D, xq, D), 0);
        for (int64_t k = 0; k < K; k++) {
            const int32_t e = ids[r * K + k];
            if (!runs[r * K + k])
                continue;
            for (int64_t j = 0; j < F; j++) {
                g[j] = gops->vec_dot(D, gate + (size_t)e * g_exp + (size_t)j * grb, xq);
                u[j] = gops->vec_dot(D, up + (size_t)e * g_exp + (size_t)j * grb, xq);
                if (g_oai)
                    g[j] += gb[e * F + j], u[j] += ub[e * F + j];
            }
            if (g_oai)
                mp_swiglu_oai(g, g, u, F);
            else
                mp_swiglu(g, g, u, F);
            for (int64_t j = 0; j < ffn_lo[r * K + k]; j++)
                g[j] = 0.0f; /* a split route: FFN rows [0, r0) are the caller's */
            float hmax = 0.0f;
            for (int64_t j = 0; j < F; j++)
                hmax = fabsf(g[j]) > hmax ? fabsf(g[j]) : hmax;
            const float quantum = dops->vec_dot_type == MP_TYPE_F32 ? 0.0f : hmax / 127.0f;
            cr_assert_eq(mp_quantize_activation(dops->vec_dot_type, g, hq, F), 0);
            if (dops->vec_dot_type == MP_TYPE_F32)
                memcpy(hdq, g, sizeof(float) * (size_t)F);
            else if (dops->vec_dot_type == MP_TYPE_Q8_0)
                mp_type_ops_scalar(MP_TYPE_Q8_0)->dequantize_row(hq, hdq, F);
            else
                mp_dequantize_row_q8_K(hq, hdq, F);
            for (int64_t d = 0; d < D; d++) {
                const uint8_t *wd = down + (size_t)e * d_exp + (size_t)d * drb;
                o[d] += rw[r * K + k] * dops->vec_dot(F, wd, hq);
                dops->dequantize_row(wd, wrow, F);
                m[d] += rw[r * K + k] * (float)abs_dot(wrow, hdq, F);
                float wmax = 0.0f;
                for (int64_t j = 0; j < F; j++)
                    wmax = fabsf(wrow[j]) > wmax ? fabsf(wrow[j]) : wmax;
                fl[d] += rw[r * K + k] * wmax * quantum;
            }
        }
        if (c->accumulate)
            for (int64_t d = 0; d < D; d++)
                o[d] += init[r * D + d];
    }

    /* ---- GPU ---- */
    uint8_t *d_gate = dev_put(gate, g_exp * (size_t)E), *d_up = dev_put(up, g_exp * (size_t)E);
    uint8_t *d_down = dev_put(down, d_exp * (size_t)E);
    void **slots = NULL, **d_sg = NULL, **d_su = NULL, **d_sd = NULL;
    uint8_t *d_pool[3] = {NULL, NULL, NULL};
    void **d_far[3] = {NULL, NULL, NULL};
    uint8_t *h_far[3] = {NULL, NULL, NULL}, *d_foc = NULL;
    int32_t *d_split = NULL;
    if (c->use_slots) {
        /* an expert pool: expert e lives in slot (7e + 3) mod E of a separate buffer, so the
         * kernels must follow the table, not e · expert_bytes */
        slots = malloc(sizeof(void *) * (size_t)E);
        for (int which = 0; which < 3; which++) {
            uint8_t *base = which == 0 ? d_gate : which == 1 ? d_up : d_down;
            const size_t stride = which == 2 ? d_exp : g_exp;
            d_pool[which] = dev_alloc(stride * (size_t)E);
            for (int64_t e = 0; e < E; e++) {
                uint8_t *slot = d_pool[which] + (size_t)((7 * e + 3) % E) * stride;
                slots[e] = resident[e] ? slot : NULL;
                if (resident[e])
                    CUDA_OK(cudaMemcpy(slot, base + (size_t)e * stride, stride, cudaMemcpyDeviceToDevice));
            }
            void **d_s = dev_put(slots, sizeof(void *) * (size_t)E);
            if (which == 0) d_sg = d_s; else if (which == 1) d_su = d_s; else d_sd = d_s;
            if (!c->far)
                continue;
            /* the cold experts' host copy, page-locked and mapped: the kernels read it over the bus */
            const uint8_t *src = which == 0 ? gate : which == 1 ? up : down;
            CUDA_OK(cudaHostAlloc((void **)&h_far[which], stride * (size_t)E, cudaHostAllocMapped));
            memcpy(h_far[which], src, stride * (size_t)E);
            uint8_t *dev = NULL;
            CUDA_OK(cudaHostGetDevicePointer((void **)&dev, h_far[which], 0));
            for (int64_t e = 0; e < E; e++)
                slots[e] = resident[e] ? NULL : dev + (size_t)e * stride;
            d_far[which] = dev_put(slots, sizeof(void *) * (size_t)E);
        }
        if (c->far)
            d_foc = dev_put(far_of_cold, sizeof far_of_cold);
        if (c->far & (FAR_SPLIT | FAR_SPLIT_PAST))
            d_split = dev_put(split_of_cold, sizeof split_of_cold);
    }
    float *d_x = dev_put(x, sizeof(float) * (size_t)(R * D));
    int32_t *d_ids = dev_put(ids, sizeof(int32_t) * (size_t)(R * K));
    float *d_rw = dev_put(rw, sizeof(float) * (size_t)(R * K));
    float *d_out = dev_put(init, sizeof(float) * (size_t)(R * D));
    float *d_gb = g_oai ? dev_put(gb, sizeof(float) * (size_t)(E * F)) : NULL;
    float *d_ub = g_oai ? dev_put(ub, sizeof(float) * (size_t)(E * F)) : NULL;
    const size_t sb = mp_cuda_moe_scratch_bytes(c->gate_type, c->down_type, D, F, R, K);
    cr_assert(sb > 0);
    void *d_scratch = dev_alloc(sb);
    mp_cuda_moe_args a = {
        .gate = {c->gate_type, c->use_slots ? NULL : d_gate, g_exp, (const void *const *)d_sg, grb},
        .up = {c->gate_type, c->use_slots ? NULL : d_up, g_exp, (const void *const *)d_su, grb},
        .down = {c->down_type, c->use_slots ? NULL : d_down, d_exp, (const void *const *)d_sd, drb},
        .n_embd = D, .n_ff = F, .n_expert = E, .top_k = K, .n_rows = R,
        .d_x = d_x, .d_ids = d_ids, .d_weights = d_rw, .d_out = d_out,
        .accumulate = c->accumulate, .d_scratch = d_scratch, .scratch_bytes = sb,
        .d_far_of_cold = d_foc, .d_far_split_of_cold = d_split,
        .act = g_oai ? MP_CUDA_ACT_SWIGLU_OAI : MP_CUDA_ACT_SWIGLU, .d_gate_b = d_gb, .d_up_b = d_ub,
    };
    a.gate.d_far = (const void *const *)d_far[0];
    a.up.d_far = (const void *const *)d_far[1];
    a.down.d_far = (const void *const *)d_far[2];
    void *d_stage = NULL;
    if (c->far) {
        a.far_max = far_max;
        a.far_stage_bytes = mp_cuda_moe_far_stage_bytes(&a);
        cr_assert(a.far_stage_bytes > 0);
        a.d_far_stage = d_stage = dev_alloc(a.far_stage_bytes);
        CUDA_OK(cudaMemset(d_stage, 0xA5, a.far_stage_bytes)); /* stale bytes, not zeros */
    }
    MPC_OK(mp_cuda_moe_experts(&a, NULL));
    float *got = malloc(sizeof(float) * (size_t)(R * D));
    dev_get(got, d_out, sizeof(float) * (size_t)(R * D));
    for (int64_t i = 0; i < R * D; i++) {
        const double tol = 2e-3 * mag[i] + flip[i] + 1e-30 + (c->accumulate ? 0x1p-23 * fabs(init[i]) : 0.0);
        cr_assert(fabs((double)got[i] - ref[i]) <= tol,
                  "seed %llu: experts %s/%s D %ld F %ld E %ld K %ld rows %ld slots %d acc %d far %d oai %d: "
                  "row %ld element %ld: gpu %.9g, cpu %.9g, |diff| %.3g > tol %.3g",
                  (unsigned long long)g_seed, mp_type_name(c->gate_type), mp_type_name(c->down_type),
                  (long)D, (long)F, (long)E, (long)K, (long)R, c->use_slots, c->accumulate, c->far, g_oai,
                  (long)(i / D), (long)(i % D), got[i], ref[i], fabs((double)got[i] - ref[i]), tol);
    }
    /* x converted by the caller (d_xq, the fused norm + quantize's output) gives the same bytes */
    const int xv = mp_cuda_vec_dot_type(c->gate_type);
    if (xv != MP_TYPE_F32) {
        void *d_xq = dev_alloc(mp_cuda_row_bytes(xv, D) * (size_t)R);
        MPC_OK(mp_cuda_quantize_act(xv, d_x, D, R, D, d_xq, NULL));
        CUDA_OK(cudaMemcpy(d_out, init, sizeof(float) * (size_t)(R * D), cudaMemcpyHostToDevice));
        a.d_xq = d_xq;
        MPC_OK(mp_cuda_moe_experts(&a, NULL));
        float *got2 = malloc(sizeof(float) * (size_t)(R * D));
        dev_get(got2, d_out, sizeof(float) * (size_t)(R * D));
        cr_assert_eq(memcmp(got, got2, sizeof(float) * (size_t)(R * D)), 0,
                     "seed %llu: experts %s/%s rows %ld: a caller-converted x (d_xq) changes the output",
                     (unsigned long long)g_seed, mp_type_name(c->gate_type), mp_type_name(c->down_type), (long)R);
        a.d_xq = NULL;
        free(got2);
        cudaFree(d_xq);
    }
    /* the undersized scratch is refused, not overrun */
    a.scratch_bytes = sb - 1;
    cr_assert_eq(mp_cuda_moe_experts(&a, NULL), MP_CUDA_ENOMEM);

    cudaFree(d_gate); cudaFree(d_up); cudaFree(d_down);
    for (int i = 0; i < 3; i++) {
        cudaFree(d_pool[i]);
        cudaFree(d_far[i]);
        cudaFreeHost(h_far[i]);
    }
    cudaFree(d_foc);
    cudaFree(d_split);
    cudaFree(d_stage);
    cudaFree(d_gb);
    cudaFree(d_ub);
    free(gb);
    free(ub);
    free(runs);
    free(ffn_lo);
    cudaFree(d_sg); cudaFree(d_su); cudaFree(d_sd);
    cudaFree(d_x); cudaFree(d_ids); cudaFree(d_rw); cudaFree(d_out); cudaFree(d_scratch);
    free(gate); free(up); free(down); free(x); free(ids); free(rw); free(resident); free(xq); free(hq);
    free(g); free(u); free(hdq); free(wrow); free(ref); free(mag); free(flip); free(init); free(got); free(slots);
}

/* The per-route path (< 16 rows; moe_dec.cu's kernels for Q4_K gate/up and K-quant down, moe.cu's
 * unit kernels for the rest): the Qwen3-30B-A3B decode shape (hidden 2048, expert FFN 768, 128
 * experts, top-8; Q4_K_M-like mix, then all Q8_0), several rows of every type as gate and as down,
 * and pool slots with non-resident experts skipped, added onto a partial. */
static void decode_shape_cases(void)
{
    moe_case c5 = {MP_TYPE_Q5_K, MP_TYPE_Q6_K, 2048, 768, 128, 8, 1, 0, 0, 0}; /* the q5_k_m mix */
    check_experts(&c5);
    moe_case c3 = {MP_TYPE_Q3_K, MP_TYPE_Q5_K, 2048, 768, 128, 8, 1, 0, 0, 0}; /* a Q3_K_M-like mix */
    check_experts(&c3);
    moe_case c = {MP_TYPE_Q4_K, MP_TYPE_Q6_K, 2048, 768, 128, 8, 1, 0, 0, 0};
    check_experts(&c);
    c.gate_type = c.down_type = MP_TYPE_Q8_0;
    check_experts(&c);
}

static void several_rows_cases(void)
{
    const int *types = k_gpu_types;
    const size_t nt = N_GPU_TYPES;
    for (size_t t = 0; t < nt; t++) {
        moe_case c = {types[t], types[(t + 3) % nt], 512, 256, 16, 4, 3, 0, 0, 0};
        check_experts(&c);
    }
}

static void slot_table_cases(void)
{
    moe_case c = {MP_TYPE_Q4_K, MP_TYPE_Q6_K, 2048, 768, 128, 8, 4, 1, 1, 0};
    check_experts(&c);
    moe_case c2 = {MP_TYPE_Q8_0, MP_TYPE_Q4_0, 256, 512, 12, 6, 7, 1, 0, 0};
    check_experts(&c2);
}

Test(cuda_moe, experts_qwen3_decode_shape)
{
    seed_rng();
    decode_shape_cases();
}

Test(cuda_moe, experts_every_type_several_rows)
{
    seed_rng();
    several_rows_cases();
}

/* >= 16 rows take the grouped path (routes sorted by expert, one weight pass per group of up to
 * 8 routes, per-route outputs, then the combine): every type, a qwen3-shaped prefill, and slot
 * tables with skipped experts plus accumulate; with the tensor-core path off (its own test below
 * forces it on) */
Test(cuda_moe, experts_grouped_prefill_every_type)
{
    seed_rng();
    mp_cuda_moe_set_mma_min_rows(0);
    const int *types = k_gpu_types;
    const size_t nt = N_GPU_TYPES;
    for (size_t t = 0; t < nt; t++) {
        moe_case c = {types[t], types[(t + 2) % nt], 512, 256, 16, 4, 40, 0, 0, 0};
        check_experts(&c);
    }
    moe_case q = {MP_TYPE_Q4_K, MP_TYPE_Q6_K, 2048, 768, 128, 8, 64, 0, 0, 0};
    check_experts(&q);
    moe_case sl = {MP_TYPE_Q4_K, MP_TYPE_Q6_K, 2048, 768, 128, 8, 33, 1, 1, 0};
    check_experts(&sl);
    moe_case sl2 = {MP_TYPE_Q8_0, MP_TYPE_Q4_0, 256, 512, 12, 6, 17, 1, 0, 0};
    check_experts(&sl2);
    mp_cuda_moe_set_mma_min_rows(-1);
}

/* Quantized experts on the tensor cores, forced from 16 rows: every type with an int8 form as gate
 * and as down, against the same CPU reference (vec_dot over the CPU's quantized activations). The
 * pipelined kernel (moe_mma2.cu) takes every launch whose K is a multiple of 256: a qwen3-shaped
 * prefill, experts with more than one group of 32 routes, partial 64-feature tiles, Q6_K rows that
 * are only 2-byte aligned, Q8_0/Q4_0 blocks whose quants are only 2-byte aligned, slot tables with
 * skipped experts plus accumulate, more routes than one launch's 65535 grid rows. The first kernel
 * (moe_mma.cu) takes the other blocks of 32 and the Q8_0 and Q4_0 launches whose K is not: K 96 and
 * 160 (a partial 128-element stage), 288 (the downs of two cases above), ~50 routes per expert, slot
 * tables plus accumulate; Q4_1, Q5_0, Q5_1, IQ4_NL and MXFP4 at every K (their mins, fifth bits,
 * look-ups, odd-aligned quants), gpt-oss-20b's 2880 x 2880 MXFP4 experts. Then the pipelined
 * kernel's Q2_K, Q3_K, Q5_K and IQ4_XS stages. */
Test(cuda_moe, experts_tensor_core_prefill)
{
    seed_rng();
    cr_assert(mp_cuda_moe_mma_available(), "the tensor-core path is not available on this device/build");
    mp_cuda_moe_set_mma_min_rows(16);
    const int types[] = {MP_TYPE_Q4_0, MP_TYPE_Q8_0, MP_TYPE_Q4_K, MP_TYPE_Q6_K};
    for (size_t t = 0; t < 4; t++) {
        moe_case c = {types[t], types[(t + 1) % 4], 512, 256, 16, 4, 40, 0, 0, 0};
        check_experts(&c);
    }
    /* the pipelined kernel (odd, q8p: gate/up; their down's K 288 takes the first kernel) */
    moe_case q = {MP_TYPE_Q4_K, MP_TYPE_Q6_K, 2048, 768, 128, 8, 64, 0, 0, 0};
    check_experts(&q);
    moe_case big = {MP_TYPE_Q4_K, MP_TYPE_Q6_K, 512, 256, 8, 4, 100, 0, 0, 0}; /* ~50 routes per expert */
    check_experts(&big);
    moe_case odd = {MP_TYPE_Q4_K, MP_TYPE_Q8_0, 512, 288, 8, 4, 40, 0, 0, 0}; /* 288 features: a partial tile */
    check_experts(&odd);
    moe_case down = {MP_TYPE_Q8_0, MP_TYPE_Q4_K, 256, 512, 8, 4, 40, 0, 0, 0}; /* Q4_K down, K 512 */
    check_experts(&down);
    moe_case d6 = {MP_TYPE_Q8_0, MP_TYPE_Q6_K, 288, 512, 8, 4, 40, 0, 0, 0}; /* Q6_K down: a partial tile */
    check_experts(&d6);
    moe_case g6 = {MP_TYPE_Q6_K, MP_TYPE_Q6_K, 256, 768, 8, 4, 40, 0, 0, 0}; /* Q6_K gate/up, 2-byte aligned down rows */
    check_experts(&g6);
    moe_case q8 = {MP_TYPE_Q8_0, MP_TYPE_Q8_0, 2048, 768, 128, 8, 64, 0, 0, 0}; /* Q8_0, 30B shapes */
    check_experts(&q8);
    moe_case q40 = {MP_TYPE_Q4_0, MP_TYPE_Q4_0, 512, 256, 8, 4, 100, 0, 0, 0}; /* Q4_0, ~50 routes per expert */
    check_experts(&q40);
    moe_case q8p = {MP_TYPE_Q8_0, MP_TYPE_Q4_0, 512, 288, 8, 4, 40, 0, 0, 0}; /* Q8_0 gate: a partial tile */
    check_experts(&q8p);
    moe_case q8s = {MP_TYPE_Q8_0, MP_TYPE_Q4_0, 256, 512, 12, 6, 17, 1, 1, 0}; /* slots, accumulate */
    check_experts(&q8s);
    moe_case sl = {MP_TYPE_Q4_K, MP_TYPE_Q6_K, 2048, 768, 128, 8, 33, 1, 1, 0};
    check_experts(&sl);
    moe_case sl2q = {MP_TYPE_Q8_0, MP_TYPE_Q4_0, 256, 512, 12, 6, 17, 1, 0, 0};
    check_experts(&sl2q);
    /* the first kernel (K not a multiple of 256) */
    moe_case tail = {MP_TYPE_Q8_0, MP_TYPE_Q4_0, 96, 160, 4, 2, 20, 0, 0, 0}; /* K 96, and 128 + 32 */
    check_experts(&tail);
    moe_case many = {MP_TYPE_Q4_0, MP_TYPE_Q8_0, 160, 96, 8, 4, 100, 0, 0, 0}; /* ~50 routes per expert */
    check_experts(&many);
    moe_case fs = {MP_TYPE_Q8_0, MP_TYPE_Q4_0, 96, 160, 12, 6, 17, 1, 1, 0}; /* slots, accumulate */
    check_experts(&fs);
    moe_case grid = {MP_TYPE_Q8_0, MP_TYPE_Q8_0, 64, 32, 16, 8, 8200, 0, 0, 0}; /* 65600 routes, 2066 groups */
    check_experts(&grid);
    /* the other blocks of 32, as gate and as down, K a multiple of 256 and not */
    const int b32[] = {MP_TYPE_Q4_1, MP_TYPE_Q5_0, MP_TYPE_Q5_1, MP_TYPE_IQ4_NL, MP_TYPE_MXFP4, MP_TYPE_Q4_0,
                       MP_TYPE_Q8_0};
    for (size_t t = 0; t < 7; t++) {
        moe_case c = {b32[t], b32[(t + 1) % 7], 512, 160, 16, 4, 40, 0, 0, 0};
        check_experts(&c);
        moe_case s = {b32[t], b32[(t + 3) % 7], 96, 288, 12, 6, 17, 1, 1, 0}; /* slots, accumulate */
        check_experts(&s);
    }
    moe_case oss = {MP_TYPE_MXFP4, MP_TYPE_MXFP4, 2880, 2880, 32, 4, 70, 0, 0, 0}; /* ~9 routes per expert */
    check_experts(&oss);
    /* the pipelined kernel's other super-blocks (Q2_K's mins per 16 elements, Q5_K's fifth bits,
     * Q3_K's 2-byte aligned rows and mask bits, IQ4_XS's look-up), as gate and as down; slot tables
     * plus accumulate; beside a Q8_0 down of K 288 (a partial 64-feature tile of the gate/up and
     * the first kernel for the down); llama.cpp's Q3_K_M and Q2_K expert mixes at the 30B shape */
    const int sbt[] = {MP_TYPE_Q2_K, MP_TYPE_Q3_K, MP_TYPE_Q5_K, MP_TYPE_IQ4_XS, MP_TYPE_Q6_K};
    for (size_t t = 0; t < 5; t++) {
        moe_case c = {sbt[t], sbt[(t + 1) % 5], 512, 256, 16, 4, 40, 0, 0, 0};
        check_experts(&c);
        moe_case s = {sbt[t], sbt[(t + 2) % 5], 768, 512, 12, 6, 17, 1, 1, 0}; /* slots, accumulate */
        check_experts(&s);
        moe_case p = {sbt[t], MP_TYPE_Q8_0, 512, 288, 8, 4, 40, 0, 0, 0}; /* partial tile */
        check_experts(&p);
    }
    moe_case q3m = {MP_TYPE_Q3_K, MP_TYPE_Q5_K, 2048, 768, 128, 8, 64, 0, 0, 0};
    check_experts(&q3m);
    moe_case q2 = {MP_TYPE_Q2_K, MP_TYPE_Q3_K, 2048, 768, 128, 8, 64, 0, 0, 0};
    check_experts(&q2);
    /* every quantized type the GPU loads has tensor-core kernels; the float types none */
    for (size_t t = 0; t < N_GPU_TYPES; t++) {
        const int ty = k_gpu_types[t];
        const int quantized = ty != MP_TYPE_F32 && ty != MP_TYPE_F16 && ty != MP_TYPE_BF16;
        cr_assert_eq(mp_cuda_moe_mma_type(ty), quantized, "%s: tensor-core kernels %s", mp_type_name(ty),
                     quantized ? "missing" : "for a float type");
    }
    mp_cuda_moe_set_mma_min_rows(-1);
}

Test(cuda_moe, experts_slot_table_and_accumulate)
{
    seed_rng();
    slot_table_cases();
}

/* The pair kernels' partial passes (gate/up: 2 rows per warp, 4 warps per block; down: 4 outputs
 * per block), each against the CPU reference: 36 sub-block pairs per row (a second, partial pass of
 * the warp) with pool slots and accumulate; 12 pairs (a partial first pass) with n_ff 93 (a warp's
 * second row past n_ff; an F16 down); and a Q6_K down of 102 outputs (a partial last block) with
 * top-9 routes (more (output, route) dots than a block has lane groups). */
Test(cuda_moe, experts_pair_kernel_partial_passes)
{
    seed_rng();
    const moe_case cases[] = {
        {MP_TYPE_Q4_K, MP_TYPE_Q6_K, 2304, 512, 16, 6, 3, 1, 1, 0},
        {MP_TYPE_Q4_K, MP_TYPE_F16, 768, 93, 8, 3, 2, 0, 0, 0},
        {MP_TYPE_F16, MP_TYPE_Q6_K, 102, 256, 12, 9, 2, 0, 0, 0},
    };
    for (size_t c = 0; c < sizeof cases / sizeof *cases; c++)
        check_experts(&cases[c]);
}

/* The decode down kernel for each K-quant down type of llama.cpp's Q4_K_M and Q5_K_M mixes (Q6_K,
 * Q5_K, Q4_K), routed top-1, 2, 3 and 8 (outputs per block by top_k: 32, 16, 8, 4), with 8 lanes,
 * with a warp per dot, with moe.cu's unit kernels instead, and by the rule (rows of 3 and of 9 super-blocks: the rule takes 8
 * lanes, then the warp), each against the CPU reference; a Mixtral-like call (hidden 4096, top-2,
 * 14 super-blocks a row: a partial last step of the warp's four); pool slots with accumulate, and
 * far routes with a split table. */
Test(cuda_moe, experts_decode_down_kquants_top_k_lanes)
{
    seed_rng();
    const int downs[] = {MP_TYPE_Q6_K, MP_TYPE_Q5_K, MP_TYPE_Q4_K};
    const int64_t ks[] = {1, 2, 3, 8}, ffs[] = {768, 2304};
    const int lanes[] = {-1, 8, 32, 0};
    for (size_t d = 0; d < 3; d++)
        for (size_t k = 0; k < 4; k++)
            for (size_t f = 0; f < 2; f++)
                for (size_t l = 0; l < 4; l++) {
                    mp_cuda_moe_set_dec_down(lanes[l]);
                    moe_case c = {MP_TYPE_Q4_K, downs[d], 512, ffs[f], 8, ks[k], 1 + (int64_t)(k % 2), 0, 0, 0};
                    check_experts(&c);
                }
    mp_cuda_moe_set_dec_down(-1);
    for (size_t d = 0; d < 3; d++) {
        moe_case mx = {MP_TYPE_Q4_K, downs[d], 4096, 3584, 4, 2, 1, 0, 0, 0};
        check_experts(&mx);
        moe_case sl = {MP_TYPE_Q4_K, downs[d], 512, 2304, 16, 2, 3, 1, 1, 0};
        check_experts(&sl);
        moe_case far = {MP_TYPE_Q4_K, downs[d], 512, 2304, 16, 3, 2, 1, 1, FAR_TOP_K | FAR_SPLIT};
        check_experts(&far);
    }
}

/* Far routes: each row runs a table-chosen number of its cold routes (slot order) with weights read
 * from mapped host memory, on every per-route kernel (pair and unit), 1 to 7 rows; the
 * routes past the count are skipped as the table says, which the CPU reference follows. With a
 * split table the last far route of a row computes FFN rows [r0, n_ff) only (the reference zeroes
 * h below r0); the stage starts as 0xA5 bytes, so a gather that leaves the caller's part unzeroed
 * fails. Split boundaries: Q6_K down rows of 630 bytes (vectors across rows), F32 down rows of 600
 * and 608 bytes with r0 any column (vectors across the column boundary), Q4_0 gate rows of 54
 * bytes (the byte loop; and, at 152 rows, vectors across the row boundary). A step on the grouped
 * path, or without slot tables or host copies, is refused. */
static void far_cases(void)
{
    const int all = FAR_TOP_K | FAR_SPLIT;
    const moe_case cases[] = {
        {MP_TYPE_Q4_K, MP_TYPE_Q6_K, 2048, 768, 128, 8, 1, 1, 0, all},
        {MP_TYPE_Q4_K, MP_TYPE_Q6_K, 2048, 768, 128, 8, 5, 1, 1, FAR_TOP_K}, /* no split table */
        {MP_TYPE_Q4_K, MP_TYPE_Q6_K, 2048, 768, 128, 8, 5, 1, 1, all},
        {MP_TYPE_Q8_0, MP_TYPE_Q8_0, 512, 256, 16, 6, 3, 1, 0, all},
        {MP_TYPE_F16, MP_TYPE_Q4_0, 256, 512, 12, 6, 7, 1, 1, all},
        {MP_TYPE_Q4_K, MP_TYPE_Q6_K, 2048, 768, 128, 8, 3, 1, 0, FAR_ONE | FAR_SPLIT}, /* one far route a row */
        {MP_TYPE_Q4_0, MP_TYPE_F32, 96, 150, 9, 5, 2, 1, 1, all},      /* experts not 16-byte multiples */
        {MP_TYPE_Q4_0, MP_TYPE_F32, 96, 152, 9, 5, 2, 1, 1, all},      /* rows not 16-byte multiples */
        {MP_TYPE_Q5_K, MP_TYPE_Q5_K, 512, 512, 16, 6, 4, 1, 0, all},   /* a K-quant down of two blocks */
        {MP_TYPE_Q8_0, MP_TYPE_Q8_0, 512, 256, 16, 6, 3, 1, 1, FAR_TOP_K | FAR_SPLIT_PAST},
    };
    for (int rep = 0; rep < 3; rep++) /* fresh routes and a fresh table each time */
        for (size_t i = 0; i < sizeof cases / sizeof *cases; i++)
            check_experts(&cases[i]);
}

Test(cuda_moe, experts_far_routes)
{
    seed_rng();
    far_cases();
    /* the gather's blocks stride over a tensor's 16 KB chunks: one block for all of them, and three
     * (a count that does not divide them), besides the default of far_cases */
    const moe_case striding[] = {
        {MP_TYPE_Q4_K, MP_TYPE_Q6_K, 2048, 768, 128, 8, 1, 1, 0, FAR_TOP_K | FAR_SPLIT},
        {MP_TYPE_Q4_0, MP_TYPE_F32, 96, 152, 9, 5, 2, 1, 1, FAR_TOP_K | FAR_SPLIT},
    };
    for (int blocks = 1; blocks <= 3; blocks += 2) {
        mp_cuda_moe_set_far_blocks(blocks);
        for (size_t i = 0; i < sizeof striding / sizeof *striding; i++)
            check_experts(&striding[i]);
    }
    mp_cuda_moe_set_far_blocks(0);

    /* refused: 16 rows (the grouped path), no stage or a short one, far_max outside 1..top_k, no
     * slot tables, no host copies; the same arguments with a stage run */
    uint8_t foc[33] = {0};
    uint8_t *d_foc = dev_put(foc, sizeof foc);
    void *d = dev_alloc(1 << 20);
    CUDA_OK(cudaMemset(d, 0, 1 << 20));
    const void *const *tab = (const void *const *)d;
    mp_cuda_moe_args a = {
        .gate = {MP_TYPE_Q8_0, NULL, 34 * 32, tab, 34, tab}, .up = {MP_TYPE_Q8_0, NULL, 34 * 32, tab, 34, tab},
        .down = {MP_TYPE_Q8_0, NULL, 34 * 32, tab, 34, tab},
        .n_embd = 32, .n_ff = 32, .n_expert = 4, .top_k = 2, .n_rows = 16,
        .d_x = d, .d_ids = d, .d_weights = d, .d_out = d, .d_scratch = (char *)d + 4096,
        .scratch_bytes = (1 << 20) - 4096, .d_far_of_cold = d_foc, .far_max = 1,
    };
    void *d_stage = dev_alloc(1 << 16);
    a.d_far_stage = d_stage;
    a.far_stage_bytes = 1 << 16;
    cr_assert_eq(mp_cuda_moe_experts(&a, NULL), MP_CUDA_EINVAL, "far routes on the grouped path");
    a.n_rows = 1;
    a.far_stage_bytes = mp_cuda_moe_far_stage_bytes(&a) - 1;
    cr_assert_eq(mp_cuda_moe_experts(&a, NULL), MP_CUDA_EINVAL, "a short far stage");
    a.far_stage_bytes = 1 << 16;
    a.d_far_stage = NULL;
    cr_assert_eq(mp_cuda_moe_experts(&a, NULL), MP_CUDA_EINVAL, "no far stage");
    a.d_far_stage = d_stage;
    a.far_max = 3;
    cr_assert_eq(mp_cuda_moe_experts(&a, NULL), MP_CUDA_EINVAL, "far_max above top_k");
    a.far_max = 0;
    cr_assert_eq(mp_cuda_moe_experts(&a, NULL), MP_CUDA_EINVAL, "far_max 0");
    a.far_max = 1;
    MPC_OK(mp_cuda_moe_experts(&a, NULL)); /* both routes cold (NULL slots), none far (a zero table) */
    CUDA_OK(cudaDeviceSynchronize());
    int32_t split[33] = {0};
    int32_t *d_split = dev_put(split, sizeof split);
    a.d_far_split_of_cold = d_split;
    MPC_OK(mp_cuda_moe_experts(&a, NULL)); /* a split table beside the far table */
    CUDA_OK(cudaDeviceSynchronize());
    a.d_far_split_of_cold = (const int32_t *)((const char *)d_split + 2);
    cr_assert_eq(mp_cuda_moe_experts(&a, NULL), MP_CUDA_EINVAL, "a misaligned split table");
    a.d_far_split_of_cold = d_split;
    a.d_far_of_cold = NULL;
    cr_assert_eq(mp_cuda_moe_experts(&a, NULL), MP_CUDA_EINVAL, "a split table without far routes");
    a.d_far_of_cold = d_foc;
    a.d_far_split_of_cold = NULL;
    a.up.d_slots = NULL;
    a.up.d_base = d;
    a.up.expert_bytes = 34 * 32;
    cr_assert_eq(mp_cuda_moe_experts(&a, NULL), MP_CUDA_EINVAL, "far routes without slot tables");
    a.up = a.gate;
    a.down.d_far = NULL;
    cr_assert_eq(mp_cuda_moe_experts(&a, NULL), MP_CUDA_EINVAL, "far routes without host copies");
    cudaFree(d);
    cudaFree(d_foc);
    cudaFree(d_split);
    cudaFree(d_stage);
}

#endif

#if MP_HAVE_CUDA && !defined(MP_NO_CUDA)
/* gpt-oss's experts (gate/up biases, the clamped SwiGLU) on every path that takes them: decode per
 * route, several rows, the grouped prefill on the CUDA cores and on the tensor cores (both of their
 * kernels: K 512 the pipelined one, 2880 and MXFP4 the first), pool slots with a partial, far routes
 * with split ones; its shapes (2880 = 90 blocks of 32, MXFP4 experts) and the down biases, added
 * for every route by mp_cuda_moe_down_bias */
Test(cuda_moe, experts_gptoss_biases_and_clamped_swiglu)
{
    seed_rng();
    const int all = FAR_TOP_K | FAR_SPLIT;
    const moe_case cases[] = {
        {MP_TYPE_MXFP4, MP_TYPE_MXFP4, 2880, 2880, 32, 4, 1, 0, 0, 0},  /* gpt-oss-20b decode */
        {MP_TYPE_MXFP4, MP_TYPE_MXFP4, 2880, 2880, 32, 4, 5, 1, 1, 0},
        {MP_TYPE_Q8_0, MP_TYPE_Q8_0, 512, 256, 16, 4, 40, 0, 0, 0},     /* grouped */
        {MP_TYPE_Q4_K, MP_TYPE_Q6_K, 512, 256, 16, 4, 3, 0, 0, 0},      /* not the Q4_K decode kernel */
        {MP_TYPE_Q8_0, MP_TYPE_Q8_0, 512, 256, 16, 6, 3, 1, 0, all},    /* far routes, split */
        {MP_TYPE_MXFP4, MP_TYPE_MXFP4, 2880, 2880, 32, 4, 2, 1, 1, all},
        {MP_TYPE_Q4_K, MP_TYPE_Q6_K, 512, 256, 16, 4, 40, 0, 0, 0},     /* grouped */
        {MP_TYPE_MXFP4, MP_TYPE_MXFP4, 2880, 2880, 32, 4, 40, 0, 0, 0},
        {MP_TYPE_IQ4_NL, MP_TYPE_Q5_1, 288, 160, 8, 2, 24, 1, 1, 0},
    };
    g_oai = 1;
    for (int mma = 0; mma < 2; mma++) { /* the grouped cases on the CUDA cores, then the tensor cores */
        mp_cuda_moe_set_mma_min_rows(mma ? 16 : 0);
        for (size_t i = 0; i < sizeof cases / sizeof *cases; i++)
            if (mma == 0 || cases[i].n_rows >= MP_CUDA_MOE_GROUP_MIN_ROWS)
                check_experts(&cases[i]);
    }
    g_oai = 0;
    mp_cuda_moe_set_mma_min_rows(-1);
    /* the down biases: Σ_k w_k b[e_k] added to what is there, ids outside [0, E) adding nothing */
    enum { R = 5, K = 4, D = 96, E = 9 };
    int32_t ids[R * K];
    float w[R * K], b[E * D], out[R * D], got[R * D];
    for (int i = 0; i < R * K; i++) {
        ids[i] = i % 7 == 3 ? -1 : i % 11 == 5 ? E : (int32_t)(rnd_u64() % E);
        w[i] = (float)rnd_uniform();
    }
    rnd_floats(b, E * D, 1.0f);
    rnd_floats(out, R * D, 1.0f);
    int32_t *d_ids = dev_put(ids, sizeof ids);
    float *d_w = dev_put(w, sizeof w), *d_b = dev_put(b, sizeof b), *d_out = dev_put(out, sizeof out);
    MPC_OK(mp_cuda_moe_down_bias(d_out, d_ids, d_w, d_b, R, K, D, E, NULL));
    dev_get(got, d_out, sizeof got);
    for (int r = 0; r < R; r++)
        for (int d = 0; d < D; d++) {
            double want = out[r * D + d], mag = fabs(want);
            for (int k = 0; k < K; k++)
                if (ids[r * K + k] >= 0 && ids[r * K + k] < E) {
                    want += (double)w[r * K + k] * b[ids[r * K + k] * D + d];
                    mag += fabs((double)w[r * K + k] * b[ids[r * K + k] * D + d]);
                }
            cr_assert(fabs(got[r * D + d] - want) <= 1e-6 * mag, "seed %llu: down bias row %d element %d: gpu %.9g, "
                      "want %.9g", (unsigned long long)g_seed, r, d, got[r * D + d], want);
        }
    cr_assert_eq(mp_cuda_moe_down_bias(d_out, NULL, d_w, d_b, R, K, D, E, NULL), MP_CUDA_EINVAL);
    cudaFree(d_ids); cudaFree(d_w); cudaFree(d_b); cudaFree(d_out);
}

Test(cuda_moe, experts_prefill_beyond_grid_limit)
{
    seed_rng();
    /* 8200 rows × top-8 = 65600 routes: more than one launch's 65535 grid rows (small matrices
     * keep the CPU reference quick) */
    moe_case c = {MP_TYPE_Q8_0, MP_TYPE_Q8_0, 64, 32, 16, 8, 8200, 0, 0, 0};
    check_experts(&c);
    /* 65600 rows of top-1 (a session's batch reaches 65536): the grouped path's combine, a block
     * row per output row, takes more than one launch too; on the CUDA cores and the tensor cores */
    moe_case r = {MP_TYPE_Q8_0, MP_TYPE_Q4_0, 64, 32, 16, 1, 65600, 0, 0, 0};
    mp_cuda_moe_set_mma_min_rows(0);
    check_experts(&r);
    mp_cuda_moe_set_mma_min_rows(-1);
    check_experts(&r);
}
#endif
