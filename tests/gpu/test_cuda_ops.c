/* tests/gpu/test_cuda_ops.c — RoPE, per-head q/k RMSNorm, SwiGLU, residual add and the F16 KV
 * store against kernels/cpu/ops_scalar.c and the f16 conversion; the hybrid decode's wait + add
 * handoff kernel against the values the host put and expects.
 *
 * Tolerances:
 *  - RoPE: both sides take cos/sin of the same float64 angle and round to float; libm and CUDA's
 *    double cos/sin may differ by an ulp of a double, which changes the float only at a rounding
 *    boundary (one float ulp). The rotation itself is the same f32 operations, so
 *    |gpu - cpu| <= 2^-23 · (|a| + |b|) per rotated pair (a, b);
 *  - RMSNorm: the sum of squares is summed in another order (n · 2^-24 relative) and rsqrtf is
 *    approximate (2 ulp): 1e-5 relative, as tests/gpu/test_cuda_norm.c;
 *  - SwiGLU: fast-math expf and division, a few ulp: 1e-5 · (|ref| + |g · u|);
 *  - add and the f16 store: exact. */
#include <math.h>

#include "mp_config.h"
#if MP_HAVE_CUDA && !defined(MP_NO_CUDA)
#include "kernels/cuda/cuda_ops.h"
#include "kernels/ops.h"
#include "runtime/model.h"
#include "tests/gpu/gpu_util.h"

/* The angles of RoPE at base over rot dimensions, with YaRN when yarn > 1 (gpt-oss's: original
 * context 4096, betas 32 and 1, the exact range), from mp_rope_freqs; the host's copy in theta,
 * the device's returned. */
static double *rope_angles(int64_t rot, float base, float yarn, double *theta, float *mscale)
{
    mp_hparams hp = {.rot_dim = rot, .rope_freq_base = base, .rope_yarn_factor = yarn > 1.0f ? yarn : 0.0f,
                     .rope_yarn_orig_ctx = 4096, .rope_yarn_beta_fast = 32.0f, .rope_yarn_beta_slow = 1.0f};
    mp_rope_freqs(&hp, theta, mscale);
    return dev_put(theta, sizeof(double) * (size_t)(rot / 2));
}

static void check_rope(int style, int64_t n_rows, int64_t n_head, int64_t hd, int64_t rot,
                       float base, float yarn)
{
    double theta[256];
    float mscale;
    double *d_theta = rope_angles(rot, base, yarn, theta, &mscale);
    const int64_t stride = n_head * hd + 7; /* rows farther apart than their heads */
    float *x = malloc(sizeof(float) * (size_t)(n_rows * stride));
    rnd_floats(x, n_rows * stride, 1.0f);
    int32_t *pos = malloc(sizeof(int32_t) * (size_t)n_rows);
    for (int64_t r = 0; r < n_rows; r++)
        pos[r] = r == 0 ? 0 : (int32_t)(rnd_u64() % 40000);
    float *d_x = dev_put(x, sizeof(float) * (size_t)(n_rows * stride));
    int32_t *d_pos = dev_put(pos, sizeof(int32_t) * (size_t)n_rows);
    MPC_OK(mp_cuda_rope(d_x, n_rows, stride, n_head, hd, rot, d_pos, d_theta, mscale, style, NULL));
    float *got = malloc(sizeof(float) * (size_t)(n_rows * stride));
    dev_get(got, d_x, sizeof(float) * (size_t)(n_rows * stride));
    float *cs = malloc(sizeof(float) * (size_t)rot);
    for (int64_t r = 0; r < n_rows; r++) {
        mp_rope_cache(cs, rot, pos[r], theta, mscale);
        for (int64_t h = 0; h < n_head; h++) {
            float *ref = x + r * stride + h * hd;
            float orig[512];
            memcpy(orig, ref, sizeof(float) * (size_t)hd);
            if (style == MP_CUDA_ROPE_NEOX)
                mp_rope_neox_cs(ref, rot, cs);
            else
                mp_rope_norm_cs(ref, rot, cs);
            for (int64_t i = 0; i < hd; i++) {
                const int64_t partner = i >= rot ? i
                                        : style == MP_CUDA_ROPE_NEOX ? (i + rot / 2) % rot
                                                                     : (i ^ 1);
                const float tol = 0x1p-23f * mscale * (fabsf(orig[i]) + fabsf(orig[partner]));
                const float g = got[r * stride + h * hd + i];
                cr_assert(fabsf(g - ref[i]) <= tol,
                          "seed %llu: rope style %d hd %ld rot %ld: row %ld (pos %d) head %ld "
                          "element %ld: gpu %.9g, cpu %.9g", (unsigned long long)g_seed, style,
                          (long)hd, (long)rot, (long)r, pos[r], (long)h, (long)i, g, ref[i]);
            }
        }
        for (int64_t i = n_head * hd; i < stride; i++) /* the gap between rows is untouched */
            cr_assert(got[r * stride + i] == x[r * stride + i], "seed %llu: rope wrote into the row gap",
                      (unsigned long long)g_seed);
    }
    cudaFree(d_x); cudaFree(d_pos); cudaFree(d_theta);
    free(x); free(pos); free(got); free(cs);
}

Test(cuda_ops, rope_neox_and_norm)
{
    seed_rng();
    check_rope(MP_CUDA_ROPE_NEOX, 5, 32, 128, 128, 1000000.0f, 0); /* Qwen3 q */
    check_rope(MP_CUDA_ROPE_NEOX, 3, 4, 128, 128, 1000000.0f, 0);  /* Qwen3 k */
    check_rope(MP_CUDA_ROPE_NORM, 4, 8, 64, 64, 10000.0f, 0);      /* interleaved */
    check_rope(MP_CUDA_ROPE_NEOX, 2, 3, 96, 32, 10000.0f, 0);      /* partial rotation */
    check_rope(MP_CUDA_ROPE_NORM, 2, 3, 80, 48, 500000.0f, 0);
    check_rope(MP_CUDA_ROPE_NEOX, 4, 8, 64, 64, 150000.0f, 32.0f); /* gpt-oss: YaRN */
}

/* mp_cuda_rope_table against mp_rope_cache, row by row: the same layout, and each value within
 * one float ulp (the double cos/sin of libm and CUDA may round to floats an ulp apart). */
static void check_rope_table(int64_t n_rows, int64_t rot, float base, float yarn)
{
    double theta[256];
    float mscale;
    double *d_theta = rope_angles(rot, base, yarn, theta, &mscale);
    int32_t *pos = malloc(sizeof(int32_t) * (size_t)n_rows);
    for (int64_t r = 0; r < n_rows; r++)
        pos[r] = r == 0 ? 0 : (int32_t)(rnd_u64() % 40000);
    int32_t *d_pos = dev_put(pos, sizeof(int32_t) * (size_t)n_rows);
    float *d_cs;
    CUDA_OK(cudaMalloc((void **)&d_cs, sizeof(float) * (size_t)(n_rows * rot)));
    MPC_OK(mp_cuda_rope_table(d_cs, d_pos, n_rows, rot, d_theta, mscale, NULL));
    float *got = malloc(sizeof(float) * (size_t)(n_rows * rot)), *ref = malloc(sizeof(float) * (size_t)rot);
    dev_get(got, d_cs, sizeof(float) * (size_t)(n_rows * rot));
    for (int64_t r = 0; r < n_rows; r++) {
        mp_rope_cache(ref, rot, pos[r], theta, mscale);
        for (int64_t i = 0; i < rot; i++)
            cr_assert(fabsf(got[r * rot + i] - ref[i]) <= 0x1p-24f * mscale,
                      "seed %llu: rope table rot %ld: row %ld (pos %d) value %ld: gpu %.9g, cpu %.9g",
                      (unsigned long long)g_seed, (long)rot, (long)r, pos[r], (long)i, got[r * rot + i], ref[i]);
    }
    cudaFree(d_cs); cudaFree(d_pos); cudaFree(d_theta);
    free(pos); free(got); free(ref);
}

Test(cuda_ops, rope_table_equals_the_cpu_table)
{
    seed_rng();
    check_rope_table(5, 128, 1000000.0f, 0); /* Qwen3 */
    check_rope_table(3, 64, 10000.0f, 0);
    check_rope_table(2, 32, 500000.0f, 0);   /* partial rotation */
    check_rope_table(4, 64, 150000.0f, 32.0f); /* gpt-oss: YaRN */
    cr_assert_eq(mp_cuda_rope_table(NULL, NULL, 1, 64, NULL, 1.0f, NULL), MP_CUDA_EINVAL);
}

Test(cuda_ops, per_head_qk_rmsnorm)
{
    seed_rng();
    const int64_t rows = 7, n_head = 32, hd = 128;
    float *x = malloc(sizeof(float) * (size_t)(rows * n_head * hd)), w[128];
    rnd_floats(x, rows * n_head * hd, 3.0f);
    for (int i = 0; i < 128; i++)
        w[i] = 1.0f + 0.3f * rnd_gauss();
    float *d_x = dev_put(x, sizeof(float) * (size_t)(rows * n_head * hd));
    float *d_w = dev_put(w, sizeof w);
    /* in place, as the forward pass does it: rows · heads rows of head_dim */
    MPC_OK(mp_cuda_rmsnorm(d_x, d_x, d_w, rows * n_head, hd, 1e-6f, NULL));
    float *got = malloc(sizeof(float) * (size_t)(rows * n_head * hd));
    dev_get(got, d_x, sizeof(float) * (size_t)(rows * n_head * hd));
    for (int64_t h = 0; h < rows * n_head; h++) {
        mp_rmsnorm(x + h * hd, x + h * hd, w, hd, 1e-6f);
        for (int64_t i = 0; i < hd; i++)
            cr_assert(fabsf(got[h * hd + i] - x[h * hd + i]) <= 1e-5f * (1.0f + fabsf(x[h * hd + i])),
                      "seed %llu: qk norm: head row %ld element %ld: gpu %.9g, cpu %.9g",
                      (unsigned long long)g_seed, (long)h, (long)i, got[h * hd + i], x[h * hd + i]);
    }
    cudaFree(d_x); cudaFree(d_w);
    free(x); free(got);
}

Test(cuda_ops, swiglu_add_kv_store)
{
    seed_rng();
    const int64_t n = 8 * 768 + 13;
    float *g = malloc(sizeof(float) * (size_t)n), *u = malloc(sizeof(float) * (size_t)n);
    float *ref = malloc(sizeof(float) * (size_t)n), *got = malloc(sizeof(float) * (size_t)n);
    rnd_floats(g, n, 4.0f);
    rnd_floats(u, n, 2.0f);
    float *d_g = dev_put(g, sizeof(float) * (size_t)n), *d_u = dev_put(u, sizeof(float) * (size_t)n);
    float *d_o = dev_alloc(sizeof(float) * (size_t)n);
    MPC_OK(mp_cuda_swiglu(d_o, d_g, d_u, n, NULL));
    dev_get(got, d_o, sizeof(float) * (size_t)n);
    mp_swiglu(ref, g, u, n);
    for (int64_t i = 0; i < n; i++)
        cr_assert(fabsf(got[i] - ref[i]) <= 1e-5f * (fabsf(ref[i]) + fabsf(g[i] * u[i])) + 1e-30f,
                  "seed %llu: swiglu element %ld (g %g, u %g): gpu %.9g, cpu %.9g",
                  (unsigned long long)g_seed, (long)i, g[i], u[i], got[i], ref[i]);

    /* residual add: d_g += d_u */
    MPC_OK(mp_cuda_add(d_g, d_u, n, NULL));
    dev_get(got, d_g, sizeof(float) * (size_t)n);
    for (int64_t i = 0; i < n; i++)
        cr_assert(got[i] == g[i] + u[i], "seed %llu: add element %ld: gpu %.9g, cpu %.9g",
                  (unsigned long long)g_seed, (long)i, got[i], g[i] + u[i]);

    /* KV store: 3 rows of 512 at position 5 of an 8-row cache; other rows untouched */
    const int64_t n_kv = 512, n_ctx = 8, pos0 = 5, rows = 3;
    uint16_t *cache = malloc(sizeof(uint16_t) * (size_t)(n_ctx * n_kv));
    for (int64_t i = 0; i < n_ctx * n_kv; i++)
        cache[i] = (uint16_t)rnd_u64();
    uint16_t *d_c = dev_put(cache, sizeof(uint16_t) * (size_t)(n_ctx * n_kv));
    float *src = g; /* 3 × 512 values, some beyond f16's range */
    src[7] = 1e6f;
    src[8] = -7e4f;
    src[9] = 3e-8f;
    float *d_src = dev_put(src, sizeof(float) * (size_t)(rows * n_kv));
    MPC_OK(mp_cuda_kv_store(d_c, d_src, rows, n_kv, pos0, NULL));
    uint16_t *gc = malloc(sizeof(uint16_t) * (size_t)(n_ctx * n_kv));
    dev_get(gc, d_c, sizeof(uint16_t) * (size_t)(n_ctx * n_kv));
    for (int64_t i = 0; i < n_ctx * n_kv; i++) {
        const int64_t r = i / n_kv;
        const uint16_t want = r >= pos0 && r < pos0 + rows ? mp_f32_to_f16(src[i - pos0 * n_kv]) : cache[i];
        cr_assert_eq(gc[i], want, "seed %llu: kv store: cache row %ld element %ld: gpu 0x%04x, want 0x%04x",
                     (unsigned long long)g_seed, (long)r, (long)(i % n_kv), gc[i], want);
    }
    cudaFree(d_g); cudaFree(d_u); cudaFree(d_o); cudaFree(d_c); cudaFree(d_src);
    free(g); free(u); free(ref); free(got); free(cache); free(gc);
}

/* A projection's bias on every row, and a shared expert's output added under its sigmoid gate:
 * random rows of an odd width, against the same float arithmetic on the CPU. */
Test(cuda_ops, bias_and_gated_add)
{
    seed_rng();
    const int64_t rows = 5, width = 3 * 128 + 7, n = rows * width;
    float *x = malloc(sizeof(float) * (size_t)n), *y = malloc(sizeof(float) * (size_t)n);
    float *b = malloc(sizeof(float) * (size_t)width), *logit = malloc(sizeof(float) * (size_t)rows);
    float *got = malloc(sizeof(float) * (size_t)n);
    rnd_floats(x, n, 3.0f);
    rnd_floats(y, n, 3.0f);
    rnd_floats(b, width, 1.0f);
    rnd_floats(logit, rows, 6.0f);
    float *d_x = dev_put(x, sizeof(float) * (size_t)n), *d_y = dev_put(y, sizeof(float) * (size_t)n);
    float *d_b = dev_put(b, sizeof(float) * (size_t)width), *d_l = dev_put(logit, sizeof(float) * (size_t)rows);
    MPC_OK(mp_cuda_add_bias(d_x, d_b, rows, width, NULL));
    dev_get(got, d_x, sizeof(float) * (size_t)n);
    for (int64_t i = 0; i < n; i++)
        cr_assert(got[i] == x[i] + b[i % width], "seed %llu: bias: row %ld element %ld: gpu %.9g, cpu %.9g",
                  (unsigned long long)g_seed, (long)(i / width), (long)(i % width), got[i], x[i] + b[i % width]);
    MPC_OK(mp_cuda_add_gated(d_y, d_x, d_l, rows, width, NULL));
    dev_get(got, d_y, sizeof(float) * (size_t)n);
    for (int64_t i = 0; i < n; i++) {
        const float s = 1.0f / (1.0f + expf(-logit[i / width])), want = y[i] + s * (x[i] + b[i % width]);
        cr_assert(fabsf(got[i] - want) <= 1e-6f * (fabsf(y[i]) + fabsf(x[i] + b[i % width])) + 1e-30f,
                  "seed %llu: gated add: row %ld (logit %g) element %ld: gpu %.9g, cpu %.9g",
                  (unsigned long long)g_seed, (long)(i / width), logit[i / width], (long)(i % width), got[i], want);
    }
    cr_assert_neq(mp_cuda_add_bias(d_x, d_b, rows, 0, NULL), 0, "a bias of width 0 is refused");
    cudaFree(d_x); cudaFree(d_y); cudaFree(d_b); cudaFree(d_l);
    free(x); free(y); free(b); free(logit); free(got);
}
/* ---- the hybrid decode step's handoffs through mapped host memory (handoff.cu) ---- */

static void sleep_ms(long ms)
{
    struct timespec ts = {ms / 1000, (ms % 1000) * 1000000L};
    nanosleep(&ts, NULL);
}

/* wait: the kernel does not finish before the host's flag, then adds (or stores) the partial the
 * host wrote after the launch, bit for bit, and stamps when it began polling and when it saw the
 * flag; twice with the same buffers, so that the second round's wait cannot pass on the first
 * round's flag or partial. (The other way, the rows' publish, is the decode router's launch:
 * fused_decode_router_matches_gemv_and_router in test_cuda_moe.c.) */
Test(cuda_ops, host_wait_add)
{
    seed_rng();
    const int64_t n = 2048 + 3;
    cudaStream_t st;
    cr_assert_eq(cudaStreamCreateWithFlags(&st, cudaStreamNonBlocking), cudaSuccess);
    float *h_part;
    uint32_t *h_flag;
    uint64_t *h_stamp;
    cr_assert_eq(cudaMallocHost((void **)&h_part, sizeof(float) * (size_t)n), cudaSuccess);
    cr_assert_eq(cudaMallocHost((void **)&h_flag, sizeof(uint32_t)), cudaSuccess);
    cr_assert_eq(cudaMallocHost((void **)&h_stamp, 2 * sizeof(uint64_t)), cudaSuccess);
    float *proj = malloc(sizeof(float) * (size_t)n), *part = malloc(sizeof(float) * (size_t)n);
    float *got = malloc(sizeof(float) * (size_t)n);
    for (int round = 0; round < 2; round++) {
        const int accumulate = round == 0;
        *h_flag = 0;
        memset(h_stamp, 0, 2 * sizeof(uint64_t));
        rnd_floats(proj, n, 2.0f);
        float *d_proj = dev_put(proj, sizeof(float) * (size_t)n);
        /* not MPC_OK: it synchronizes the device, which waits for the flag set below */
        cr_assert_eq(mp_cuda_host_wait_add(d_proj, h_part, n, accumulate, h_flag, h_stamp, 30.0, st), 0);
        sleep_ms(30);
        cr_assert_eq(cudaStreamQuery(st), cudaErrorNotReady,
                     "seed %llu: round %d: the wait kernel finished before the host's flag",
                     (unsigned long long)g_seed, round);
        rnd_floats(part, n, 1.0f); /* written after the launch, as the runtime's CPU experts do */
        memcpy(h_part, part, sizeof(float) * (size_t)n);
        __atomic_store_n(h_flag, 1, __ATOMIC_RELEASE);
        cr_assert_eq(cudaStreamSynchronize(st), cudaSuccess);
        dev_get(got, d_proj, sizeof(float) * (size_t)n);
        for (int64_t i = 0; i < n; i++) {
            const float want = accumulate ? proj[i] + part[i] : part[i];
            cr_assert(memcmp(&got[i], &want, sizeof want) == 0,
                      "seed %llu: round %d (accumulate %d): element %ld: gpu %.9g, want %.9g",
                      (unsigned long long)g_seed, round, accumulate, (long)i, got[i], want);
        }
        /* [0] the first poll, [1] the flag seen: the flag was set 30 ms after the launch, so the
         * kernel polled that long */
        cr_assert_gt(h_stamp[0], 0, "seed %llu: round %d: no poll stamped", (unsigned long long)g_seed, round);
        cr_assert_geq(h_stamp[1], h_stamp[0] + 20000000ull, "seed %llu: round %d: polled at %llu, saw the flag "
                      "at %llu: less than the 30 ms the host waited", (unsigned long long)g_seed, round,
                      (unsigned long long)h_stamp[0], (unsigned long long)h_stamp[1]);
        cudaFree(d_proj);
    }
    /* bad arguments: no flag, no timeout */
    cr_assert_eq(mp_cuda_host_wait_add((float *)h_part, h_part, n, 0, NULL, NULL, 1.0, st), MP_CUDA_EINVAL);
    cr_assert_eq(mp_cuda_host_wait_add((float *)h_part, h_part, n, 0, h_flag, NULL, 0.0, st), MP_CUDA_EINVAL);
    cudaFreeHost(h_part); cudaFreeHost(h_flag); cudaFreeHost(h_stamp);
    free(proj); free(part); free(got);
    cudaStreamDestroy(st);
}

#endif
